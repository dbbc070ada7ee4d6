/*
 * Integration tests of sessions, the reservation table and admission
 * (DESIGN.md §4-5, docs/sessions.md): one test per row of the session table,
 * plus the per-session counters, close and release, busy results, error
 * precedence and a vanished daemon.
 *
 * Every test starts its own tenferrod on a private socket (th_daemon_start)
 * and stops it at the end, asserting a clean SIGTERM shutdown (exit status 0);
 * the two tests that kill the daemon on purpose assert that instead. Where a
 * second client is needed it is a real process (th_spawn), with its own
 * connection. Steps between processes are ordered by pipes ("gates") and by
 * the daemon's own counters (th_wait_counter), never by sleeping: a child
 * that must wait for something waits on a gate with a generous timeout, and
 * the parent waits for counters such as admissions_queued before it moves on.
 *
 * Children report failures on stderr (file and line) and through their exit
 * status; only the parent test process uses Check's assertions. Numerical
 * results are compared with references computed here from the same inputs.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Side of the square f64 matrices the matmul tests use. */
#define DIM 128
/* Length of the f64 vectors the elementwise tests use. */
#define VLEN 1000
/* How long a child waits on a gate before it gives up (a hang becomes a failure). */
#define GATE_TIMEOUT_MS 60000
/* How long the parent waits for a counter to reach its value. */
#define COUNTER_TIMEOUT_MS 30000

/* ---- assertions: CK_STATUS, CHILD_CHECK and CHILD_STATUS come from harness.h ---- */

/* In a child: ties its life to the test process (child_init), then connects a client. */
static tf_client *child_connect(const th_daemon *d) {
    th_die_with_parent();
    return th_connect(d);
}

/* ---- daemons ---- */

/* Starts a daemon under `policy` ("reject" or "wait") with a wait deadline of `deadline_ms`. */
static void start_daemon(th_daemon *d, const char *policy, const char *deadline_ms) {
    CK_DAEMON_START(d, "--reservation-policy", policy, "--wait-deadline-ms", deadline_ms);
}

/* Disconnects the test's client, then stops the daemon and asserts it shut down cleanly. */
static void finish(th_daemon *d, tf_client *c) {
    tf_disconnect(c);
    CK_DAEMON_STOP(d);
}

/* ---- gates: one-byte signals between processes over a pipe ---- */

typedef struct gate {
    int rd, wr;
} gate;

static gate gate_new(void) {
    int p[2];
    ck_assert_msg(pipe(p) == 0, "pipe: %s", strerror(errno));
    return (gate){p[0], p[1]};
}

static void gate_free(gate g) {
    close(g.rd);
    close(g.wr);
}

/* Lets one waiter through. */
static int gate_open(gate g) {
    char b = 1;
    return write(g.wr, &b, 1) == 1;
}

/* Waits up to timeout_ms for the gate to be opened once; returns 1 when it was. */
static int gate_wait(gate g, int timeout_ms) {
    struct pollfd p = {.fd = g.rd, .events = POLLIN};
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return 0;
        char b;
        ssize_t r = read(g.rd, &b, 1);
        if (r < 0 && errno == EINTR) continue;
        return r == 1;
    }
}

/*
 * In the test process: waits until one of the children `pids` opens the gate.
 * Fails at once, naming the child's exit, when one of them ends first, rather
 * than waiting out the whole timeout.
 */
static void await_gate(gate g, const pid_t *pids, int n, const char *what) {
    for (int waited = 0; waited < GATE_TIMEOUT_MS; waited += 20) {
        if (gate_wait(g, 20)) return;
        for (int i = 0; i < n; i++) {
            siginfo_t info;
            memset(&info, 0, sizeof info);
            if (waitid(P_PID, (id_t)pids[i], &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
                info.si_pid != pids[i])
                continue;
            if (gate_wait(g, 0)) return; /* it opened the gate just before it ended */
            ck_abort_msg("%s: child %d ended (%s %d) first; see its messages above", what,
                         (int)pids[i], info.si_code == CLD_EXITED ? "exit status" : "signal",
                         info.si_status);
        }
    }
    ck_abort_msg("%s: timed out after %d ms", what, GATE_TIMEOUT_MS);
}

/* ---- data ---- */

/* Uploads a row-major f64 tensor of rank 1 (cols == 0) or 2. */
static tf_status upload_f64(tf_client *c, int64_t rows, int64_t cols, const double *data,
                            tf_tensor *out) {
    int64_t shape[2] = {rows, cols};
    return tf_upload(c, TF_F64, cols ? 2 : 1, shape, data, out);
}

/* Downloads an f64 tensor of exactly n elements into dst. */
static tf_status download_f64(tf_client *c, tf_tensor t, double *dst, size_t n) {
    void *data = NULL;
    size_t bytes = 0;
    tf_status st = tf_download(c, t, &data, &bytes);
    if (st != TF_OK) return st;
    if (bytes != n * sizeof(double)) {
        free(data);
        return TF_ERR_SHAPE;
    }
    memcpy(dst, data, bytes);
    free(data);
    return TF_OK;
}

/* Naive reference product of [m,k] and [k,n], in long double. */
static void ref_matmul(const double *a, const double *b, double *out, int m, int k, int n) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            long double acc = 0;
            for (int p = 0; p < k; p++) acc += (long double)a[i * k + p] * b[p * n + j];
            out[i * n + j] = (double)acc;
        }
}

/* 1 when got matches want to f64 tolerance (relative, with a floor of 1 for tiny sums). */
static int close_enough(const double *got, const double *want, size_t n) {
    return th_max_rel_diff(TF_F64, n, got, want, 1.0) <= th_tolerance(TF_F64);
}

/* Downloads t (n elements) and compares it with want; returns 1 when it matches. */
static int check_f64(tf_client *c, tf_tensor t, const double *want, size_t n) {
    double *got = malloc(n * sizeof *got);
    if (!got) return 0;
    tf_status st = download_f64(c, t, got, n);
    int ok = st == TF_OK && close_enough(got, want, n);
    if (!ok)
        fprintf(stderr, "[pid %d] tensor %llu: %s (%s), max rel diff %g\n", (int)getpid(),
                (unsigned long long)t, tf_status_name(st), tf_client_last_error(c),
                st == TF_OK ? th_max_rel_diff(TF_F64, n, got, want, 1.0) : -1.0);
    free(got);
    return ok;
}

/* Two random vectors x, y and their uploads. */
typedef struct vectors {
    double x[VLEN], y[VLEN];
    tf_tensor tx, ty;
} vectors;

static tf_status upload_vectors(tf_client *c, vectors *v) {
    th_fill_random(TF_F64, VLEN, v->x);
    th_fill_random(TF_F64, VLEN, v->y);
    tf_status st = upload_f64(c, VLEN, 0, v->x, &v->tx);
    return st == TF_OK ? upload_f64(c, VLEN, 0, v->y, &v->ty) : st;
}

/* Starts a daemon (see start_daemon), connects a client and uploads fresh vectors v with it. */
static tf_client *start_with_vectors(th_daemon *d, const char *policy, const char *deadline_ms,
                                     vectors *v) {
    start_daemon(d, policy, deadline_ms);
    tf_client *c = th_connect(d);
    CK_STATUS(c, upload_vectors(c, v), TF_OK);
    return c;
}

/* Opens a held session on c, failing the test unless it succeeds. */
static tf_session *open_held(tf_client *c) {
    tf_session *s = NULL;
    CK_STATUS(c, tf_session_open(c, &s), TF_OK);
    return s;
}

/* Opens a held session on c and closes it again at once, both of which must succeed. */
static void expect_open_close(tf_client *c) {
    tf_session *s = open_held(c);
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
}

/* ---- session callbacks ---- */

/* Operands and result of one binary operation queued by a callback. */
typedef struct binop {
    tf_tensor a, b, out;
    int ran;
} binop;

static tf_status cb_add(tf_view *v, void *arg) {
    binop *o = arg;
    o->ran++;
    return tf_view_add(v, o->a, o->b, &o->out);
}

static tf_status cb_matmul(tf_view *v, void *arg) {
    binop *o = arg;
    o->ran++;
    return tf_view_matmul(v, o->a, o->b, &o->out);
}

/* A callback that only records that it ran. */
static tf_status cb_flag(tf_view *v, void *arg) {
    (void)v;
    (*(int *)arg)++;
    return TF_OK;
}

/* A random DIM x DIM product: inputs, their uploads and the reference result. */
typedef struct product {
    double a[DIM * DIM], b[DIM * DIM], ref[DIM * DIM];
    binop op;
} product;

static tf_status product_setup(tf_client *c, product *p) {
    th_fill_random(TF_F64, DIM * DIM, p->a);
    th_fill_random(TF_F64, DIM * DIM, p->b);
    ref_matmul(p->a, p->b, p->ref, DIM, DIM, DIM);
    memset(&p->op, 0, sizeof p->op);
    tf_status st = upload_f64(c, DIM, DIM, p->a, &p->op.a);
    return st == TF_OK ? upload_f64(c, DIM, DIM, p->b, &p->op.b) : st;
}

/* In a held session: queues x + y, synchronizes, and checks the sum. Returns 1 when right. */
static int held_add_works(tf_client *c, tf_session *s, const vectors *v) {
    binop op = {.a = v->tx, .b = v->ty};
    if (tf_session_with(s, cb_add, &op) != TF_OK) return 0;
    if (tf_session_synchronize(s) != TF_OK) return 0;
    double want[VLEN];
    for (int i = 0; i < VLEN; i++) want[i] = v->x[i] + v->y[i];
    int ok = check_f64(c, op.out, want, VLEN);
    tf_tensor_free(c, op.out);
    return ok;
}

/* In the test process: held_add_works must hold (else the test fails naming `what`), then s closes. */
static void expect_add_and_close(tf_client *c, tf_session *s, const vectors *v, const char *what) {
    ck_assert_msg(held_add_works(c, s, v), "%s", what);
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
}

/* In a child: held_add_works must hold and s must close; returns 0, or 1 after reporting a failure. */
static int child_add_and_close(tf_client *c, tf_session *s, const vectors *v) {
    CHILD_CHECK(held_add_works(c, s, v));
    CHILD_STATUS(c, tf_session_close(s, NULL), TF_OK);
    return 0;
}

/* A child that connects, opens a held session, checks it works and closes it. */
static int child_open_use_close(void *arg) {
    const th_daemon *d = arg;
    tf_client *c = child_connect(d);
    static vectors v;
    CHILD_STATUS(c, upload_vectors(c, &v), TF_OK);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    if (child_add_and_close(c, s, &v)) return 1;
    tf_disconnect(c);
    return 0;
}

/* ---- row 1: open while no held session ---- */

/* tf_session_open on a free domain succeeds at once, and the domain is reusable after close. */
START_TEST(test_open_free_domain_and_reuse) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);

    tf_session *s = open_held(c);
    ck_assert_ptr_nonnull(s);
    expect_add_and_close(c, s, &v, "the held session's add is wrong");

    /* The same client can open again, and so can another process. */
    expect_open_close(c);
    CK_CHILD_OK(th_spawn(child_open_use_close, &d), "second client's open/use/close");

    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 3);
    ck_assert_uint_eq(th_counter(&d, "sessions_closed"), 3);
    ck_assert_uint_eq(th_counter(&d, "admissions_contended"), 0);
    finish(&d, c);
}
END_TEST

/* ---- raw frames: the daemon's own answers, without the client library's checks ---- */

/*
 * Sends frame f with sequence number seq and returns the status of the Result that answers it
 * (or -1), storing the Result's session id in *session_id when that is not NULL.
 */
static int raw_result(int fd, Tenferro__Frame *f, uint64_t seq, uint64_t *session_id) {
    f->seq = seq;
    if (th_raw_send(fd, f) != 0) return -1;
    Tenferro__Frame *r = th_raw_recv(fd, 10000);
    int status = -1;
    if (r && r->seq == seq && r->body_case == TENFERRO__FRAME__BODY_RESULT) {
        status = (int)r->result->status;
        if (session_id) *session_id = r->result->session_id;
    }
    tf__frame_free(r);
    return status;
}

/* Sends a SessionOpen with sequence number seq and returns the Result's status (or -1). */
static int raw_session_open(int fd, uint64_t seq, uint64_t *session_id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__SessionOpen body = TENFERRO__SESSION_OPEN__INIT;
    f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
    f.session_open = &body;
    return raw_result(fd, &f, seq, session_id);
}

/* Sends an empty Submit of `mode` for `session_id` and returns the Result's status (or -1). */
static int raw_submit(int fd, uint64_t seq, uint64_t session_id, uint32_t mode) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit body = TENFERRO__SUBMIT__INIT;
    body.session_id = session_id;
    body.mode = mode;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &body;
    return raw_result(fd, &f, seq, NULL);
}

/* Connects a raw socket and completes the handshake. */
static int raw_connect_hello(const th_daemon *d) {
    int fd = th_raw_connect(d);
    ck_assert_int_ge(fd, 0);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert_msg(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY,
                  "the daemon did not answer Hello with a HelloReply");
    tf__frame_free(hello);
    return fd;
}

/* ---- row 2: second open by the same connection ---- */

/* A second open by the holding client is TF_ERR_REENTERED, from the library and from the daemon. */
START_TEST(test_second_open_same_client_reentered) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    tf_session *s = NULL, *s2 = (tf_session *)&s2;
    CK_STATUS(c, tf_session_open(c, &s), TF_OK);
    CK_STATUS(c, tf_session_open(c, &s2), TF_ERR_REENTERED);
    ck_assert_ptr_null(s2);
    ck_assert_msg(strlen(tf_client_last_error(c)) > 0, "a refusal leaves a message");
    /* The refusal happened before any device call: the session is intact and usable. */
    expect_add_and_close(c, s, &v, "the session is unusable after the refused open");
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 1);

    /* The daemon rejects it too, for a client that skips the library's check. */
    int fd = raw_connect_hello(&d);
    uint64_t id = 0, id2 = 0;
    ck_assert_int_eq(raw_session_open(fd, 2, &id), TF_OK);
    ck_assert_uint_ne(id, 0);
    ck_assert_int_eq(raw_session_open(fd, 3, &id2), TF_ERR_REENTERED);
    ck_assert_uint_eq(th_counter(&d, "admissions_reentered"), 1);
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 2);
    /* The first session is still held by the raw connection: another client is contended. */
    tf_session *other = NULL;
    CK_STATUS(c, tf_session_open(c, &other), TF_ERR_CONTENDED);
    close(fd);
    CK_COUNTER(&d, "sessions_reclaimed", 1, COUNTER_TIMEOUT_MS);
    expect_open_close(c);
    finish(&d, c);
}
END_TEST

/* ---- row 3: scoped entry by the holder ---- */

/* tf_with_session by the client that holds the session is TF_ERR_REENTERED and never runs fn. */
START_TEST(test_scoped_by_holder_reentered) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "wait", "10000", &v);
    tf_session *s = open_held(c);
    int ran = 0;
    double t0 = th_now_ms();
    CK_STATUS(c, tf_with_session(c, cb_flag, &ran), TF_ERR_REENTERED);
    ck_assert_msg(th_now_ms() - t0 < 2000, "the refusal waited (even under policy wait it must not)");
    ck_assert_int_eq(ran, 0);
    expect_add_and_close(c, s, &v, "the session is unusable after the refused scoped entry");
    /* Once closed, the same scoped entry runs. */
    CK_STATUS(c, tf_with_session(c, cb_flag, &ran), TF_OK);
    ck_assert_int_eq(ran, 1);

    /* The daemon refuses a scoped root on the holding connection itself, without queueing it. */
    int fd = raw_connect_hello(&d);
    uint64_t id = 0;
    ck_assert_int_eq(raw_session_open(fd, 2, &id), TF_OK);
    ck_assert_int_eq(raw_submit(fd, 3, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL),
                     TF_ERR_REENTERED);
    ck_assert_uint_eq(th_counter(&d, "admissions_reentered"), 1);
    ck_assert_uint_eq(th_counter(&d, "admissions_queued"), 0);
    /* The raw holder's session still takes submissions. */
    ck_assert_int_eq(raw_submit(fd, 4, id, TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE), TF_OK);
    ck_assert_int_eq(raw_submit(fd, 5, id, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE), TF_OK);
    close(fd);
    finish(&d, c);
}
END_TEST

/* ---- rows 4 and 5: another process while held ---- */

/* What a contending child does and how it reports back. */
typedef struct contender {
    const th_daemon *d;
    int wait_policy;
    int scoped; /* 0: tf_session_open, 1: tf_with_session */
    gate answered; /* child -> parent: the first attempt returned */
    gate go;       /* parent -> child: the holder has closed */
} contender;

/*
 * Under reject: refused at once, then succeeds after the holder closes. Under wait: waits, then
 * runs.
 */
static int child_contender(void *arg) {
    contender *k = arg;
    tf_client *c = child_connect(k->d);
    static vectors v;
    static product p;
    CHILD_STATUS(c, upload_vectors(c, &v), TF_OK);
    CHILD_STATUS(c, product_setup(c, &p), TF_OK);
    uint64_t accepted_before = th_counter(k->d, "ops_accepted");
    tf_status want = k->wait_policy ? TF_OK : TF_ERR_CONTENDED;

    double t0 = th_now_ms();
    tf_session *s = NULL;
    if (k->scoped) {
        CHILD_STATUS(c, tf_with_session(c, cb_matmul, &p.op), want);
    } else {
        CHILD_STATUS(c, tf_session_open(c, &s), want);
    }
    double waited = th_now_ms() - t0;

    if (!k->wait_policy) {
        /* Rejected immediately: no wait, nothing ran, a refused burst's output is invalid. */
        CHILD_CHECK(waited < 2000);
        CHILD_CHECK(s == NULL);
        CHILD_CHECK(th_counter(k->d, "ops_accepted") == accepted_before);
        if (k->scoped) {
            void *data = NULL;
            size_t bytes = 0;
            CHILD_STATUS(c, tf_download(c, p.op.out, &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
        }
        CHILD_CHECK(gate_open(k->answered));
        CHILD_CHECK(gate_wait(k->go, GATE_TIMEOUT_MS));
        /* The holder is gone: the same request now succeeds. */
        if (k->scoped) {
            CHILD_STATUS(c, tf_with_session(c, cb_matmul, &p.op), TF_OK);
        } else {
            CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
        }
    } else {
        CHILD_CHECK(gate_open(k->answered));
    }
    if (k->scoped) {
        CHILD_CHECK(check_f64(c, p.op.out, p.ref, DIM * DIM));
    } else {
        if (child_add_and_close(c, s, &v)) return 1;
    }
    tf_disconnect(c);
    return 0;
}

/* The parent holds the session while a child contends for it; `scoped` picks the child's entry. */
static void run_contention(int wait_policy, int scoped) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, wait_policy ? "wait" : "reject", "30000", &v);
    tf_session *s = open_held(c);

    contender k = {.d = &d, .wait_policy = wait_policy, .scoped = scoped};
    k.answered = gate_new();
    k.go = gate_new();
    pid_t pid = th_spawn(child_contender, &k);
    if (wait_policy) {
        /* The child is parked in the FIFO and stays there while the holder works. */
        CK_COUNTER(&d, "admissions_queued", 1, COUNTER_TIMEOUT_MS);
        ck_assert_msg(!gate_wait(k.answered, 0), "the queued request returned while the domain was held");
        ck_assert_msg(held_add_works(c, s, &v), "the holder's session is unusable with a queued waiter");
        ck_assert_msg(!gate_wait(k.answered, 0), "the queued request returned while the domain was held");
        CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
        await_gate(k.answered, &pid, 1, "the queued request is admitted once the holder closes");
        ck_assert_uint_eq(th_counter(&d, "admissions_contended"), 0);
    } else {
        await_gate(k.answered, &pid, 1, "the contender is answered");
        ck_assert_uint_eq(th_counter(&d, "admissions_contended"), 1);
        ck_assert_uint_eq(th_counter(&d, "admissions_queued"), 0);
        expect_add_and_close(c, s, &v, "the holder's session is unusable after a refusal");
        ck_assert(gate_open(k.go));
    }
    CK_CHILD_OK(pid, scoped ? "scoped contender" : "held contender");
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), scoped ? 1 : 2);
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), scoped ? 1 : 0);
    gate_free(k.answered);
    gate_free(k.go);
    finish(&d, c);
}

/*
 * tf_session_open by another process while held: TF_ERR_CONTENDED under reject, FIFO wait under
 * wait.
 */
START_TEST(test_open_by_other_while_held) { run_contention(_i, 0); }
END_TEST

/* A scoped burst by another process while held: refused under reject, queued and run under wait. */
START_TEST(test_scoped_by_other_while_held) { run_contention(_i, 1); }
END_TEST

/* ---- row 6: scoped entry inside a callback ---- */

/* What the outer callback saw when it tried to enter again. */
typedef struct reentry {
    const vectors *v;
    tf_tensor t1, t2;
    int inner_ran;
    tf_status inner_scoped, inner_open, inner_with;
    tf_session *held;
    int flush; /* download t1 inside the callback (scoped only), so the burst is already admitted */
    double t1_inside[VLEN];
    tf_status flush_status;
} reentry;

/* Queues t1 = x + y, tries every re-entry, then queues t2 = t1 * x. */
static tf_status cb_reenter(tf_view *view, void *arg) {
    reentry *r = arg;
    tf_status st = tf_view_add(view, r->v->tx, r->v->ty, &r->t1);
    if (st != TF_OK) return st;
    if (r->flush) r->flush_status = download_f64(tf_view_client(view), r->t1, r->t1_inside, VLEN);
    tf_client *c = tf_view_client(view);
    r->inner_scoped = tf_with_session(c, cb_flag, &r->inner_ran);
    tf_session *s2 = NULL;
    r->inner_open = tf_session_open(c, &s2);
    if (s2) tf_session_release(s2);
    if (r->held) r->inner_with = tf_session_with(r->held, cb_flag, &r->inner_ran);
    return tf_view_mul(view, r->t1, r->v->tx, &r->t2);
}

/* A further callback: t3 = t2 + y. */
typedef struct follow_up {
    tf_tensor in, y, out;
} follow_up;

static tf_status cb_follow_up(tf_view *view, void *arg) {
    follow_up *f = arg;
    return tf_view_add(view, f->in, f->y, &f->out);
}

/*
 * Scoped entry (and any nested entry) inside a held session's callback is TF_ERR_REENTERED; the
 * session stays usable.
 */
START_TEST(test_scoped_inside_held_callback) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "wait", "10000", &v);
    tf_session *s = open_held(c);
    reentry r = {.v = &v, .held = s};
    CK_STATUS(c, tf_session_with(s, cb_reenter, &r), TF_OK);
    ck_assert_msg(r.inner_scoped == TF_ERR_REENTERED, "scoped entry in a held callback: %s",
                  tf_status_name(r.inner_scoped));
    ck_assert_msg(r.inner_open == TF_ERR_REENTERED, "open in a held callback: %s",
                  tf_status_name(r.inner_open));
    ck_assert_msg(r.inner_with == TF_ERR_REENTERED, "tf_session_with in a held callback: %s",
                  tf_status_name(r.inner_with));
    ck_assert_int_eq(r.inner_ran, 0);

    /* The outer session goes on: more work after the refusals, then submit and verify. */
    follow_up f = {.in = r.t2, .y = v.ty};
    CK_STATUS(c, tf_session_with(s, cb_follow_up, &f), TF_OK);
    CK_STATUS(c, tf_session_submit(s), TF_OK);
    CK_STATUS(c, tf_session_synchronize(s), TF_OK);
    static double t1[VLEN], t2[VLEN], t3[VLEN];
    for (int i = 0; i < VLEN; i++) {
        t1[i] = v.x[i] + v.y[i];
        t2[i] = t1[i] * v.x[i];
        t3[i] = t2[i] + v.y[i];
    }
    ck_assert(check_f64(c, r.t1, t1, VLEN));
    ck_assert(check_f64(c, r.t2, t2, VLEN));
    ck_assert(check_f64(c, f.out, t3, VLEN));
    tf_session_counters stats;
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    ck_assert_uint_eq(stats.held_operations, 2);
    ck_assert_uint_eq(stats.queued_ops, 3);
    ck_assert_uint_eq(stats.failed_submits, 0);
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), 0);
    finish(&d, c);
}
END_TEST

/* A nested tf_with_session is TF_ERR_REENTERED and the outer burst still completes correctly. */
START_TEST(test_nested_scoped_entry) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    static double t1[VLEN], t2[VLEN];
    for (int i = 0; i < VLEN; i++) {
        t1[i] = v.x[i] + v.y[i];
        t2[i] = t1[i] * v.x[i];
    }
    /* _i == 1: the outer burst has already been admitted (a download flushed it) when it nests. */
    reentry r = {.v = &v, .flush = _i};
    CK_STATUS(c, tf_with_session(c, cb_reenter, &r), TF_OK);
    ck_assert_msg(r.inner_scoped == TF_ERR_REENTERED, "nested scoped entry: %s",
                  tf_status_name(r.inner_scoped));
    ck_assert_msg(r.inner_open == TF_ERR_REENTERED, "open inside a scoped callback: %s",
                  tf_status_name(r.inner_open));
    ck_assert_int_eq(r.inner_ran, 0);
    if (_i) {
        ck_assert_msg(r.flush_status == TF_OK, "download inside the burst: %s",
                      tf_status_name(r.flush_status));
        ck_assert(close_enough(r.t1_inside, t1, VLEN));
    }
    ck_assert(check_f64(c, r.t1, t1, VLEN));
    ck_assert(check_f64(c, r.t2, t2, VLEN));
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), 1);
    ck_assert_uint_eq(th_counter(&d, "admissions_reentered"), 0);
    /* Nothing is left entered: a new scoped entry and a held open both work. */
    int ran = 0;
    CK_STATUS(c, tf_with_session(c, cb_flag, &ran), TF_OK);
    ck_assert_int_eq(ran, 1);
    expect_open_close(c);
    finish(&d, c);
}
END_TEST

/* ---- row 7: scoped entries from different connections ---- */

#define SCOPED_WORKERS 3
#define SCOPED_ROUNDS 50

typedef struct scoped_worker {
    const th_daemon *d;
    gate ready, go;
} scoped_worker;

/* Runs SCOPED_ROUNDS scoped matmuls and checks each against the reference. */
static int child_scoped_worker(void *arg) {
    scoped_worker *w = arg;
    tf_client *c = child_connect(w->d);
    static product p;
    srand((unsigned)getpid());
    CHILD_STATUS(c, product_setup(c, &p), TF_OK);
    CHILD_CHECK(gate_open(w->ready));
    CHILD_CHECK(gate_wait(w->go, GATE_TIMEOUT_MS));
    for (int i = 0; i < SCOPED_ROUNDS; i++) {
        CHILD_STATUS(c, tf_with_session(c, cb_matmul, &p.op), TF_OK);
        CHILD_CHECK(check_f64(c, p.op.out, p.ref, DIM * DIM));
        CHILD_STATUS(c, tf_tensor_free(c, p.op.out), TF_OK);
    }
    tf_disconnect(c);
    return 0;
}

/* Keeps one scoped burst admitted and open (inside its callback) until told to finish. */
typedef struct open_burst {
    const th_daemon *d;
    gate inside, finish;
} open_burst;

static tf_status cb_hold_burst(tf_view *view, void *arg) {
    open_burst *b = arg;
    static product p;
    tf_client *c = tf_view_client(view);
    tf_status st = product_setup(c, &p);
    if (st != TF_OK) return st;
    if ((st = tf_view_matmul(view, p.op.a, p.op.b, &p.op.out)) != TF_OK) return st;
    /* The download flushes the burst: the daemon admits it and keeps it open. */
    if (!check_f64(c, p.op.out, p.ref, DIM * DIM)) return TF_ERR_INTERNAL;
    if (!gate_open(b->inside)) return TF_ERR_IO;
    if (!gate_wait(b->finish, GATE_TIMEOUT_MS)) return TF_ERR_TIMEOUT;
    return TF_OK;
}

static int child_open_burst(void *arg) {
    open_burst *b = arg;
    tf_client *c = child_connect(b->d);
    CHILD_STATUS(c, tf_with_session(c, cb_hold_burst, b), TF_OK);
    tf_disconnect(c);
    return 0;
}

/*
 * Scoped entries from different processes, with no held session, are all admitted and run side by
 * side.
 */
START_TEST(test_scoped_entries_concurrent) {
    th_daemon d;
    start_daemon(&d, "reject", "10000");
    /* One burst stays open the whole time: the others must not be excluded by it. */
    open_burst b = {.d = &d, .inside = gate_new(), .finish = gate_new()};
    pid_t holder = th_spawn(child_open_burst, &b);
    await_gate(b.inside, &holder, 1, "the open burst gets inside");

    scoped_worker w = {.d = &d, .ready = gate_new(), .go = gate_new()};
    pid_t pids[SCOPED_WORKERS];
    for (int i = 0; i < SCOPED_WORKERS; i++) pids[i] = th_spawn(child_scoped_worker, &w);
    for (int i = 0; i < SCOPED_WORKERS; i++) await_gate(w.ready, pids, SCOPED_WORKERS, "workers get ready");
    for (int i = 0; i < SCOPED_WORKERS; i++) ck_assert(gate_open(w.go));
    for (int i = 0; i < SCOPED_WORKERS; i++) CK_CHILD_OK(pids[i], "scoped worker");

    ck_assert(gate_open(b.finish));
    CK_CHILD_OK(holder, "open scoped burst");
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), SCOPED_WORKERS * SCOPED_ROUNDS + 1);
    ck_assert_uint_eq(th_counter(&d, "admissions_contended"), 0);
    ck_assert_uint_eq(th_counter(&d, "admissions_queued"), 0);
    ck_assert_uint_eq(th_counter(&d, "execution_errors"), 0);
    gate_free(b.inside);
    gate_free(b.finish);
    gate_free(w.ready);
    gate_free(w.go);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- row 8: the holder crashes ---- */

/* Length of the chain of matmuls the killed holder leaves queued. */
#define KILL_CHAIN 2000

typedef struct crash {
    const th_daemon *d;
    gate ready, go;       /* bystander */
    gate submitted, kill; /* holder */
    uint64_t base_allocs; /* device allocations live before the holder started (the bystander's) */
} crash;

/* Owns data from before the crash and checks it is unchanged after. */
static int child_bystander(void *arg) {
    crash *k = arg;
    tf_client *c = child_connect(k->d);
    static double x[256 * 256];
    th_fill_random(TF_F64, 256 * 256, x);
    tf_tensor tx;
    CHILD_STATUS(c, upload_f64(c, 256, 256, x, &tx), TF_OK);
    CHILD_CHECK(gate_open(k->ready));
    CHILD_CHECK(gate_wait(k->go, GATE_TIMEOUT_MS));
    static double got[256 * 256];
    CHILD_STATUS(c, download_f64(c, tx, got, 256 * 256), TF_OK);
    CHILD_CHECK(memcmp(got, x, sizeof x) == 0);
    tf_disconnect(c);
    return 0;
}

/* A chain t_{i+1} = t_i * a of KILL_CHAIN matmuls. */
typedef struct chain {
    tf_tensor start, factor, last;
    int n;
} chain;

static tf_status cb_chain(tf_view *view, void *arg) {
    chain *ch = arg;
    tf_tensor cur = ch->start;
    for (int i = 0; i < ch->n; i++) {
        tf_tensor next;
        tf_status st = tf_view_matmul(view, cur, ch->factor, &next);
        if (st != TF_OK) return st;
        cur = next;
    }
    ch->last = cur;
    return TF_OK;
}

/* Opens a session, submits a long chain without synchronizing, and dies by SIGKILL. */
static int child_killed_holder(void *arg) {
    crash *k = arg;
    tf_client *c = child_connect(k->d);
    /* x times a permutation matrix, over and over: the values stay finite and never denormal. */
    static double x[DIM * DIM], perm[DIM * DIM];
    th_fill_random(TF_F64, DIM * DIM, x);
    for (int i = 0; i < DIM; i++) perm[i * DIM + (i + 1) % DIM] = 1.0;
    chain ch = {.n = KILL_CHAIN};
    CHILD_STATUS(c, upload_f64(c, DIM, DIM, x, &ch.start), TF_OK);
    CHILD_STATUS(c, upload_f64(c, DIM, DIM, perm, &ch.factor), TF_OK);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    CHILD_STATUS(c, tf_session_with(s, cb_chain, &ch), TF_OK);
    CHILD_STATUS(c, tf_session_submit(s), TF_OK);
    CHILD_CHECK(gate_open(k->submitted));
    CHILD_CHECK(gate_wait(k->kill, GATE_TIMEOUT_MS));
    raise(SIGKILL);
    return 2;
}

/* Waits in the FIFO for the crashed holder's domain and checks it gets a whole, drained one. */
static int child_waiting_opener(void *arg) {
    crash *k = arg;
    tf_client *c = child_connect(k->d);
    static vectors v;
    CHILD_STATUS(c, upload_vectors(c, &v), TF_OK);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    /*
     * Admitted only once the dead holder's session was reclaimed and everything
     * it owned freed: the bystander's tensor and this child's two are all that live.
     */
    CHILD_CHECK(th_counter(k->d, "sessions_reclaimed") == 1);
    CHILD_CHECK(th_counter(k->d, "device_allocations_live") == k->base_allocs + 2);
    if (child_add_and_close(c, s, &v)) return 1;
    tf_disconnect(c);
    return 0;
}

/*
 * A holder killed with work queued is reclaimed: memory back to baseline, the next opener admitted,
 * bystanders intact.
 */
START_TEST(test_holder_killed_reclaimed) {
    int wait_policy = _i;
    th_daemon d;
    start_daemon(&d, wait_policy ? "wait" : "reject", "60000");
    crash k = {.d = &d};
    k.ready = gate_new();
    k.go = gate_new();
    k.submitted = gate_new();
    k.kill = gate_new();

    pid_t bystander = th_spawn(child_bystander, &k);
    await_gate(k.ready, &bystander, 1, "the bystander gets ready");
    uint64_t base_bytes = th_counter(&d, "device_bytes_live");
    uint64_t base_allocs = th_counter(&d, "device_allocations_live");
    k.base_allocs = base_allocs;

    pid_t holder = th_spawn(child_killed_holder, &k);
    await_gate(k.submitted, &holder, 1, "the holder submits its chain");
    pid_t opener = 0;
    if (wait_policy) {
        opener = th_spawn(child_waiting_opener, &k);
        CK_COUNTER(&d, "admissions_queued", 1, COUNTER_TIMEOUT_MS);
    } else {
        /* Under reject, another client is refused while the holder lives. */
        tf_client *c = th_connect(&d);
        tf_session *s = NULL;
        CK_STATUS(c, tf_session_open(c, &s), TF_ERR_CONTENDED);
        tf_disconnect(c);
    }
    ck_assert(gate_open(k.kill));
    int rc = th_wait(holder);
    ck_assert_msg(rc == 128 + SIGKILL, "the holder exited with %d instead of dying by SIGKILL", rc);
    uint64_t executed_at_kill = th_counter(&d, "ops_executed");
    if (executed_at_kill >= KILL_CHAIN)
        fprintf(stderr, "note: the chain had already run when the holder died (%llu ops)\n",
                (unsigned long long)executed_at_kill);

    if (wait_policy) {
        CK_CHILD_OK(opener, "waiting opener");
    } else {
        CK_COUNTER(&d, "sessions_reclaimed", 1, COUNTER_TIMEOUT_MS);
        CK_CHILD_OK(th_spawn(child_open_use_close, &d), "opener after the reclaim");
    }
    ck_assert_uint_eq(th_counter(&d, "sessions_reclaimed"), 1);
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 2);
    /* Everything the holder (and the opener, now gone) owned is freed. */
    CK_COUNTER(&d, "device_allocations_live", base_allocs, COUNTER_TIMEOUT_MS);
    CK_COUNTER(&d, "device_bytes_live", base_bytes, COUNTER_TIMEOUT_MS);
    ck_assert(gate_open(k.go));
    CK_CHILD_OK(bystander, "bystander");
    ck_assert_uint_eq(th_counter(&d, "execution_errors"), 0);

    gate_free(k.ready);
    gate_free(k.go);
    gate_free(k.submitted);
    gate_free(k.kill);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- row 9: a queued opener's deadline ---- */

typedef struct timeout_opener {
    const th_daemon *d;
    gate timed_out, go;
} timeout_opener;

/* Waits for the deadline (TF_ERR_TIMEOUT), stays usable, and opens once the holder has closed. */
static int child_timeout_opener(void *arg) {
    timeout_opener *t = arg;
    tf_client *c = child_connect(t->d);
    tf_session *s = NULL;
    double t0 = th_now_ms();
    CHILD_STATUS(c, tf_session_open(c, &s), TF_ERR_TIMEOUT);
    double waited = th_now_ms() - t0;
    CHILD_CHECK(s == NULL);
    if (waited < 150 || waited > 10000)
        fprintf(stderr, "[child %d] waited %.0f ms for a 200 ms deadline\n", (int)getpid(), waited);
    CHILD_CHECK(waited >= 150 && waited <= 10000);
    /* The connection is still fine after the timeout. */
    static vectors v;
    CHILD_STATUS(c, upload_vectors(c, &v), TF_OK);
    CHILD_CHECK(check_f64(c, v.tx, v.x, VLEN));
    CHILD_CHECK(gate_open(t->timed_out));
    CHILD_CHECK(gate_wait(t->go, GATE_TIMEOUT_MS));
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    if (child_add_and_close(c, s, &v)) return 1;
    tf_disconnect(c);
    return 0;
}

/*
 * A queued opener whose deadline passes gets TF_ERR_TIMEOUT; the holder is unaffected and the
 * domain reusable.
 */
START_TEST(test_queued_opener_deadline) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "wait", "200", &v);
    tf_session *s = open_held(c);

    timeout_opener t = {.d = &d, .timed_out = gate_new(), .go = gate_new()};
    pid_t pid = th_spawn(child_timeout_opener, &t);
    await_gate(t.timed_out, &pid, 1, "the queued opener times out");
    ck_assert_uint_eq(th_counter(&d, "admissions_timed_out"), 1);
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 1);
    expect_add_and_close(c, s, &v, "the holder's session is unusable after the timeout");
    ck_assert(gate_open(t.go));
    CK_CHILD_OK(pid, "timed-out opener");
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 2);
    ck_assert_uint_eq(th_counter(&d, "admissions_timed_out"), 1);
    gate_free(t.timed_out);
    gate_free(t.go);
    finish(&d, c);
}
END_TEST

/* ---- counters, close, release ---- */

/* Accumulator for callbacks that add x once each. */
typedef struct accumulate {
    tf_tensor acc, x;
} accumulate;

static tf_status cb_accumulate(tf_view *view, void *arg) {
    accumulate *a = arg;
    tf_tensor next;
    tf_status st = tf_view_add(view, a->acc, a->x, &next);
    if (st == TF_OK) a->acc = next;
    return st;
}

/* Operations queued by the large-submission test: far more than one 64 KiB frame holds. */
#define MANY_OPS 10000

/* Queues MANY_OPS accumulating adds in one callback. */
static tf_status cb_many_adds(tf_view *view, void *arg) {
    for (int i = 0; i < MANY_OPS; i++) {
        tf_status st = cb_accumulate(view, arg);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* Compares two counter sets field by field, naming the first that differs. */
static void expect_stats(const tf_session_counters *got, const tf_session_counters *want) {
#define FIELD_(f)                                                                                 \
    ck_assert_msg(got->f == want->f, "session counter " #f " is %llu, expected %llu",             \
                  (unsigned long long)got->f, (unsigned long long)want->f);
    FIELD_(held_operations)
    FIELD_(explicit_submits)
    FIELD_(close_submits)
    FIELD_(failed_submits)
    FIELD_(explicit_synchronizes)
    FIELD_(failed_synchronizes)
    FIELD_(queued_ops)
#undef FIELD_
}

/* The session counters after a known chain: 100 callbacks, one submit, one synchronize, close. */
START_TEST(test_session_counters) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    tf_session *s = open_held(c);
    accumulate a = {.acc = v.ty, .x = v.tx};
    for (int i = 0; i < 100; i++) CK_STATUS(c, tf_session_with(s, cb_accumulate, &a), TF_OK);
    tf_session_counters stats;
    CK_STATUS(c, tf_session_stats(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 100});
    CK_STATUS(c, tf_session_submit(s), TF_OK);
    CK_STATUS(c, tf_session_synchronize(s), TF_OK);
    CK_STATUS(c, tf_session_stats(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 100, .explicit_submits = 1,
                                                .explicit_synchronizes = 1, .queued_ops = 100});
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 100, .explicit_submits = 1,
                                                .close_submits = 1, .explicit_synchronizes = 1,
                                                .queued_ops = 100});
    static double want[VLEN];
    for (int i = 0; i < VLEN; i++) {
        want[i] = v.y[i];
        for (int j = 0; j < 100; j++) want[i] += v.x[i];
    }
    ck_assert(check_f64(c, a.acc, want, VLEN));
    /* Daemon-wide counters saw the same: one session, one batch carrying the 100 operations. */
    ck_assert_uint_eq(th_counter(&d, "ops_accepted"), 100);
    ck_assert_uint_eq(th_counter(&d, "sessions_opened"), 1);
    ck_assert_uint_eq(th_counter(&d, "sessions_closed"), 1);
    finish(&d, c);
}
END_TEST

/* Queues t_{i+1} = t_i * x + y style work: a short chain of dependent adds and muls. */
typedef struct mixed_chain {
    tf_tensor x, y, out[10];
} mixed_chain;

static tf_status cb_mixed_chain(tf_view *view, void *arg) {
    mixed_chain *m = arg;
    tf_tensor cur = m->x;
    for (int i = 0; i < 10; i++) {
        tf_status st = (i % 2) ? tf_view_mul(view, cur, m->x, &m->out[i])
                               : tf_view_add(view, cur, m->y, &m->out[i]);
        if (st != TF_OK) return st;
        cur = m->out[i];
    }
    return TF_OK;
}

/* The reference values of cb_mixed_chain's outputs. */
static void mixed_chain_ref(const vectors *v, double want[10][VLEN]) {
    for (int j = 0; j < VLEN; j++) {
        double cur = v->x[j];
        for (int i = 0; i < 10; i++) {
            cur = (i % 2) ? cur * v->x[j] : cur + v->y[j];
            want[i][j] = cur;
        }
    }
}

/* A child that must be able to open the domain at once (policy reject). */
static int child_open_at_once(void *arg) {
    const th_daemon *d = arg;
    tf_client *c = child_connect(d);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    CHILD_STATUS(c, tf_session_close(s, NULL), TF_OK);
    tf_disconnect(c);
    return 0;
}

/*
 * Close with unsubmitted work submits it once, releases the reservation and the results are right.
 */
START_TEST(test_close_submits_queued_work) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    tf_session *s = open_held(c);
    mixed_chain m = {.x = v.tx, .y = v.ty};
    CK_STATUS(c, tf_session_with(s, cb_mixed_chain, &m), TF_OK);
    tf_session_counters stats;
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 1, .close_submits = 1,
                                                .queued_ops = 10});
    CK_CHILD_OK(th_spawn(child_open_at_once, &d), "opener after close");
    static double want[10][VLEN];
    mixed_chain_ref(&v, want);
    for (int i = 0; i < 10; i++) ck_assert_msg(check_f64(c, m.out[i], want[i], VLEN), "output %d", i);
    ck_assert_uint_eq(th_counter(&d, "sessions_closed"), 2);
    finish(&d, c);
}
END_TEST

/* Steps of the dropping loop of test_dropped_results_in_one_batch. */
#define DROP_STEPS 150

/*
 * One callback that runs a loop dropping each result as it makes the next,
 * as user code overwriting a variable does: t = x*x, x' = 0.5 x + 0.25 t,
 * free t and the old x; every fifth step also a half-length sum that is
 * freed at once, so blocks of two sizes are let go and asked for in turn.
 */
typedef struct dropping_loop {
    tf_tensor x0, x, sums[DROP_STEPS / 5];
    int n_sums;
} dropping_loop;

static tf_status cb_dropping_loop(tf_view *v, void *arg) {
    dropping_loop *d = arg;
    tf_status st = TF_OK;
    tf_tensor x = d->x0;
    for (int k = 0; k < DROP_STEPS && st == TF_OK; k++) {
        tf_tensor t, next;
        if ((st = tf_view_mul(v, x, x, &t)) != TF_OK) break;
        st = tf_view_axpby(v, (tf_scalar){0.5, 0}, x, (tf_scalar){0.25, 0}, t, &next);
        if (st == TF_OK) st = tf_tensor_free(tf_view_client(v), t);
        if (st == TF_OK && x != d->x0) st = tf_tensor_free(tf_view_client(v), x);
        x = next;
        if (st == TF_OK && k % 5 == 4) {
            tf_tensor half, s;
            int64_t shape[2] = {2, VLEN / 2};
            st = tf_view_reshape(v, x, 2, shape, &half);
            if (st == TF_OK) st = tf_view_sum(v, half, 1, (int[]){0}, &s);
            if (st == TF_OK) st = tf_tensor_free(tf_view_client(v), half);
            if (st == TF_OK) d->sums[d->n_sums++] = s;
        }
    }
    d->x = x;
    return st;
}

/*
 * A batch that drops its results as it goes may hand a dropped tensor's
 * memory to a later output of the same size: every value stays the one a
 * plain loop computes, whether blocks were reused or not.
 */
START_TEST(test_dropped_results_in_one_batch) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    for (int i = 0; i < VLEN; i++) v.x[i] = v.x[i] * 0.9; /* |x| < 1: the iteration stays bounded */
    tf_tensor x0;
    int64_t shape[1] = {VLEN};
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, v.x, &x0), TF_OK);
    tf_session *s = open_held(c);
    dropping_loop dl = {.x0 = x0};
    CK_STATUS(c, tf_session_with(s, cb_dropping_loop, &dl), TF_OK);
    CK_STATUS(c, tf_session_synchronize(s), TF_OK);
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
    static double want[VLEN];
    static double sums[DROP_STEPS / 5][VLEN / 2];
    memcpy(want, v.x, sizeof want);
    int n_sums = 0;
    for (int k = 0; k < DROP_STEPS; k++) {
        for (int i = 0; i < VLEN; i++) want[i] = 0.5 * want[i] + 0.25 * (want[i] * want[i]);
        if (k % 5 == 4) {
            for (int i = 0; i < VLEN / 2; i++) sums[n_sums][i] = want[i] + want[VLEN / 2 + i];
            n_sums++;
        }
    }
    ck_assert_int_eq(dl.n_sums, n_sums);
    ck_assert_msg(check_f64(c, dl.x, want, VLEN), "the loop's last x");
    for (int j = 0; j < n_sums; j++)
        ck_assert_msg(check_f64(c, dl.sums[j], sums[j], VLEN / 2), "sum %d", j);
    /* x0 (the user's) is still there and unchanged. */
    ck_assert_msg(check_f64(c, x0, v.x, VLEN), "x0");
    finish(&d, c);
}
END_TEST

/*
 * Release without submit frees the reservation at once, runs nothing, and forgets the queued
 * outputs.
 */
START_TEST(test_release_discards_queued_work) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    uint64_t accepted = th_counter(&d, "ops_accepted");
    tf_session *s = open_held(c);
    mixed_chain m = {.x = v.tx, .y = v.ty};
    CK_STATUS(c, tf_session_with(s, cb_mixed_chain, &m), TF_OK);
    tf_session_release(s);
    /* The release has no reply: its counter orders it before the next opener. */
    CK_COUNTER(&d, "sessions_released", 1, COUNTER_TIMEOUT_MS);
    CK_CHILD_OK(th_spawn(child_open_at_once, &d), "opener after release");
    for (int i = 0; i < 10; i++) {
        void *data = NULL;
        size_t bytes = 0;
        CK_STATUS(c, tf_download(c, m.out[i], &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
    }
    ck_assert_uint_eq(th_counter(&d, "ops_accepted"), accepted);
    ck_assert_uint_eq(th_counter(&d, "sessions_closed"), 1); /* the child's close only */
    ck_assert_uint_eq(th_counter(&d, "sessions_released"), 1);
    /* The inputs survive, and the client can open again. */
    ck_assert(check_f64(c, v.tx, v.x, VLEN));
    expect_open_close(c);
    finish(&d, c);
}
END_TEST

/* ---- failures at the boundaries ---- */

/* A submission that fails (the daemon was killed) is returned by that boundary and counted. */
START_TEST(test_failed_submits_counted) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    tf_session *s = open_held(c);
    binop op = {.a = v.tx, .b = v.ty};
    CK_STATUS(c, tf_session_with(s, cb_add, &op), TF_OK);

    ck_assert_int_eq(kill(d.pid, SIGKILL), 0);
    ck_assert_int_eq(th_wait(d.pid), 128 + SIGKILL);
    d.pid = 0;
    unlink(d.socket);
    unlink(d.log_path);

    tf_session_counters stats;
    CK_STATUS(c, tf_session_submit(s), TF_ERR_DISCONNECTED);
    CK_STATUS(c, tf_session_stats(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 1, .explicit_submits = 1,
                                                .failed_submits = 1});
    CK_STATUS(c, tf_session_synchronize(s), TF_ERR_DISCONNECTED);
    CK_STATUS(c, tf_session_stats(s, &stats), TF_OK);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 1, .explicit_submits = 1,
                                                .failed_submits = 1, .explicit_synchronizes = 1,
                                                .failed_synchronizes = 1});
    CK_STATUS(c, tf_session_close(s, &stats), TF_ERR_DISCONNECTED);
    expect_stats(&stats, &(tf_session_counters){.held_operations = 1, .explicit_submits = 1,
                                                .close_submits = 1, .failed_submits = 2,
                                                .explicit_synchronizes = 1,
                                                .failed_synchronizes = 1});
    tf_disconnect(c);
}
END_TEST

/* Downloading an unsubmitted held-session result is TF_ERR_BUSY; after submit it is readable. */
START_TEST(test_download_unsubmitted_busy) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    tf_session *s = open_held(c);
    binop op = {.a = v.tx, .b = v.ty};
    CK_STATUS(c, tf_session_with(s, cb_add, &op), TF_OK);
    void *data = NULL;
    size_t bytes = 0, cap = 0;
    CK_STATUS(c, tf_download(c, op.out, &data, &bytes), TF_ERR_BUSY);
    ck_assert_ptr_null(data);
    CK_STATUS(c, tf_download_into(c, op.out, &data, &cap), TF_ERR_BUSY);
    /* The refusal did not disturb the queue: the operation is still carried by submit. */
    CK_STATUS(c, tf_session_submit(s), TF_OK);
    double want[VLEN];
    for (int i = 0; i < VLEN; i++) want[i] = v.x[i] + v.y[i];
    ck_assert(check_f64(c, op.out, want, VLEN));
    CK_STATUS(c, tf_download_into(c, op.out, &data, &cap), TF_OK);
    ck_assert_uint_eq(cap, sizeof want);
    ck_assert(close_enough(data, want, VLEN));
    free(data);
    tf_session_counters stats;
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    ck_assert_uint_eq(stats.queued_ops, 1);
    finish(&d, c);
}
END_TEST

/* A scoped callback that queues a good add, then fails with a real shape error. */
typedef struct failing {
    const vectors *v;
    tf_tensor bad, good;
    tf_status fail_with; /* returned as is when set; else the shape error is returned */
    char message[512];
} failing;

static tf_status cb_failing(tf_view *view, void *arg) {
    failing *f = arg;
    tf_status st = tf_view_add(view, f->v->tx, f->v->ty, &f->good);
    if (st != TF_OK) return st;
    if (f->fail_with != TF_OK) return f->fail_with;
    tf_tensor out;
    st = tf_view_add(view, f->v->tx, f->bad, &out);
    snprintf(f->message, sizeof f->message, "%s", tf_client_last_error(tf_view_client(view)));
    return st;
}

/* The callback's status is returned unchanged by tf_session_with and tf_with_session. */
START_TEST(test_callback_error_precedence) {
    th_daemon d;
    static vectors v;
    tf_client *c = start_with_vectors(&d, "reject", "10000", &v);
    double small[3] = {1, 2, 3}, want[VLEN];
    for (int i = 0; i < VLEN; i++) want[i] = v.x[i] + v.y[i];
    tf_tensor bad;
    CK_STATUS(c, upload_f64(c, 3, 0, small, &bad), TF_OK);

    /* Held: the callback's own code comes back, and the session stays usable. */
    tf_session *s = open_held(c);
    failing f = {.v = &v, .bad = bad, .fail_with = TF_ERR_INVALID_ARGUMENT};
    CK_STATUS(c, tf_session_with(s, cb_failing, &f), TF_ERR_INVALID_ARGUMENT);
    f.fail_with = TF_ERR_QUOTA;
    CK_STATUS(c, tf_session_with(s, cb_failing, &f), TF_ERR_QUOTA);
    ck_assert_msg(held_add_works(c, s, &v), "the session is unusable after failed callbacks");
    tf_session_counters stats;
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    ck_assert_uint_eq(stats.held_operations, 3);
    ck_assert_uint_eq(stats.failed_submits, 0);

    /*
     * Scoped: a real failure inside fn is returned with its message; what fn queued before still
     * ran.
     */
    f.fail_with = TF_OK;
    CK_STATUS(c, tf_with_session(c, cb_failing, &f), TF_ERR_SHAPE);
    ck_assert_str_eq(tf_client_last_error(c), f.message);
    ck_assert_msg(strlen(f.message) > 0, "the shape error has a message");
    ck_assert(check_f64(c, f.good, want, VLEN));
    f.fail_with = TF_ERR_INVALID_ARGUMENT;
    CK_STATUS(c, tf_with_session(c, cb_failing, &f), TF_ERR_INVALID_ARGUMENT);
    ck_assert(check_f64(c, f.good, want, VLEN));
    finish(&d, c);
}
END_TEST

/*
 * Submissions larger than the daemon's frame maximum travel in several frames; close still closes.
 */
START_TEST(test_submission_larger_than_a_frame) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "65536");
    tf_client *c = th_connect(&d);
    static vectors v;
    CK_STATUS(c, upload_vectors(c, &v), TF_OK);
    static double want[VLEN];
    for (int i = 0; i < VLEN; i++) {
        want[i] = v.y[i];
        for (int j = 0; j < MANY_OPS; j++) want[i] += v.x[i];
    }

    /* Held: everything is carried by the close, which must also release the reservation. */
    tf_session *s = open_held(c);
    accumulate a = {.acc = v.ty, .x = v.tx};
    for (int i = 0; i < MANY_OPS; i++) CK_STATUS(c, tf_session_with(s, cb_accumulate, &a), TF_OK);
    uint64_t batches = th_counter(&d, "batches");
    tf_session_counters stats;
    CK_STATUS(c, tf_session_close(s, &stats), TF_OK);
    ck_assert_uint_eq(stats.queued_ops, MANY_OPS);
    ck_assert_uint_eq(stats.failed_submits, 0);
    ck_assert_uint_gt(th_counter(&d, "batches") - batches, 1);
    ck_assert_uint_eq(th_counter(&d, "sessions_closed"), 1);
    CK_CHILD_OK(th_spawn(child_open_at_once, &d), "opener after a multi-frame close");
    ck_assert(check_f64(c, a.acc, want, VLEN));

    /* Scoped: one burst over several frames, admitted once, synchronized at its end. */
    accumulate b = {.acc = v.ty, .x = v.tx};
    CK_STATUS(c, tf_with_session(c, cb_many_adds, &b), TF_OK);
    ck_assert(check_f64(c, b.acc, want, VLEN));
    ck_assert_uint_eq(th_counter(&d, "scoped_roots"), 1);
    expect_open_close(c);
    finish(&d, c);
}
END_TEST

/* ---- the daemon goes away ---- */

typedef struct orphan {
    const th_daemon *d;
    gate ready, gone;
} orphan;

/*
 * Makes every kind of call after the daemon stopped; each must be TF_ERR_DISCONNECTED, without
 * SIGPIPE.
 */
static int child_orphan(void *arg) {
    th_die_with_parent();
    signal(SIGPIPE, SIG_DFL); /* a SIGPIPE would kill this child: the parent sees 128 + SIGPIPE */
    orphan *o = arg;
    tf_client *c = th_connect(o->d);
    static vectors v;
    CHILD_STATUS(c, upload_vectors(c, &v), TF_OK);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    binop op = {.a = v.tx, .b = v.ty};
    CHILD_STATUS(c, tf_session_with(s, cb_add, &op), TF_OK);
    CHILD_CHECK(gate_open(o->ready));
    CHILD_CHECK(gate_wait(o->gone, GATE_TIMEOUT_MS));

    static double big[1 << 17]; /* 1 MiB: several chunks written into a dead socket */
    for (int round = 0; round < 2; round++) {
        tf_tensor t;
        CHILD_STATUS(c, upload_f64(c, 1 << 17, 0, big, &t), TF_ERR_DISCONNECTED);
        void *data = NULL;
        size_t bytes = 0, cap = 0;
        CHILD_STATUS(c, tf_download(c, v.tx, &data, &bytes), TF_ERR_DISCONNECTED);
        CHILD_STATUS(c, tf_download_into(c, v.tx, &data, &cap), TF_ERR_DISCONNECTED);
        CHILD_CHECK(data == NULL);
        CHILD_STATUS(c, tf_session_submit(s), TF_ERR_DISCONNECTED);
        CHILD_STATUS(c, tf_session_synchronize(s), TF_ERR_DISCONNECTED);
        CHILD_STATUS(c, tf_session_with(s, cb_add, &op), TF_ERR_DISCONNECTED);
        tf_session *s2 = NULL;
        CHILD_STATUS(c, tf_session_open(c, &s2), TF_ERR_DISCONNECTED);
        int ran = 0;
        CHILD_STATUS(c, tf_with_session(c, cb_flag, &ran), TF_ERR_DISCONNECTED);
        CHILD_CHECK(ran == 0);
        CHILD_STATUS(c, tf_tensor_free(c, v.ty), TF_ERR_DISCONNECTED);
    }
    CHILD_STATUS(c, tf_session_close(s, NULL), TF_ERR_DISCONNECTED);
    s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_ERR_DISCONNECTED);
    int ran = 0;
    CHILD_STATUS(c, tf_with_session(c, cb_flag, &ran), TF_ERR_DISCONNECTED);
    CHILD_CHECK(ran == 0);
    tf_disconnect(c);
    /* A new connection to the vanished daemon fails the same way. */
    tf_client *c2 = NULL;
    CHILD_STATUS(c2, tf_connect(o->d->socket, &c2), TF_ERR_DISCONNECTED);
    tf_disconnect(c2);
    return 0;
}

/*
 * After the daemon is gone every call returns TF_ERR_DISCONNECTED and no SIGPIPE kills the client.
 */
START_TEST(test_calls_after_daemon_gone) {
    th_daemon d;
    start_daemon(&d, "reject", "10000");
    orphan o = {.d = &d, .ready = gate_new(), .gone = gate_new()};
    pid_t pid = th_spawn(child_orphan, &o);
    await_gate(o.ready, &pid, 1, "the client gets ready");
    /* A clean shutdown while a client holds a session with queued work still exits 0. */
    CK_DAEMON_STOP(&d);
    ck_assert(gate_open(o.gone));
    int rc = th_wait(pid);
    ck_assert_msg(rc != 128 + SIGPIPE, "the client was killed by SIGPIPE");
    ck_assert_msg(rc == 0, "the client exited with %d (see its messages above)", rc);
    gate_free(o.ready);
    gate_free(o.gone);
}
END_TEST

static Suite *sessions_suite(void) {
    Suite *s = suite_create("sessions");
    TCase *tc = tcase_create("session table");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_open_free_domain_and_reuse);
    tcase_add_test(tc, test_second_open_same_client_reentered);
    tcase_add_test(tc, test_scoped_by_holder_reentered);
    tcase_add_loop_test(tc, test_open_by_other_while_held, 0, 2);
    tcase_add_loop_test(tc, test_scoped_by_other_while_held, 0, 2);
    tcase_add_test(tc, test_scoped_inside_held_callback);
    tcase_add_loop_test(tc, test_nested_scoped_entry, 0, 2);
    tcase_add_test(tc, test_scoped_entries_concurrent);
    tcase_add_loop_test(tc, test_holder_killed_reclaimed, 0, 2);
    tcase_add_test(tc, test_queued_opener_deadline);
    suite_add_tcase(s, tc);

    TCase *tb = tcase_create("boundaries");
    tcase_set_timeout(tb, 120);
    tcase_add_test(tb, test_session_counters);
    tcase_add_test(tb, test_close_submits_queued_work);
    tcase_add_test(tb, test_dropped_results_in_one_batch);
    tcase_add_test(tb, test_release_discards_queued_work);
    tcase_add_test(tb, test_failed_submits_counted);
    tcase_add_test(tb, test_download_unsubmitted_busy);
    tcase_add_test(tb, test_callback_error_precedence);
    tcase_add_test(tb, test_submission_larger_than_a_frame);
    tcase_add_test(tb, test_calls_after_daemon_gone);
    suite_add_tcase(s, tb);
    return s;
}

int main(void) {
    th_seed();
    SRunner *sr = srunner_create(sessions_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
