/*
 * The allocation failure walk (docs/testing.md): a workload runs against the
 * failure-injection daemon (build/tests/tenferrod-failalloc,
 * tests/failalloc/failalloc.c) once for each N, with the Nth allocation the
 * daemon makes while serving the workload's client failing. For every N:
 *
 *  - the workload's calls return TF_OK, TF_ERR_NO_MEMORY or (the daemon
 *    closed that connection) TF_ERR_DISCONNECTED, and every value it reads
 *    back is right; it stops at its first failure, then checks that the
 *    connection (if still there) gives right answers or typed errors;
 *  - the daemon did not crash: it answers a status request, and exits 0 on
 *    SIGTERM;
 *  - a second client, connected before the failure was armed, still reads
 *    the bytes of its tensor back unchanged;
 *  - once both clients have gone, the status is back to its baseline: no
 *    connection left, no device or pinned bytes, no reservation, every
 *    tensor created was freed, and no protocol error was counted (running
 *    out of memory is not the client's protocol error).
 *
 * The workload: connect; upload two tensors (one large enough for the staged
 * route, whose staging buffer is a pinned buffer); a scoped session with an
 * add, a matmul and a sum; a held session (open, operations, submit,
 * operations and a FREE, synchronize, close); a pinned buffer with a
 * pending upload, then a pending download into it; a pending download
 * released unwaited and a held session released; blocking downloads of
 * every result; a Free; a second short connection (connect, upload,
 * download, disconnect); a status request; a raw connection that sends
 * several downloads before reading (its replies queue behind a full socket);
 * a held session opened and left held; then disconnect. An f32 sum makes a worker thread allocate.
 *
 * A dry run (nothing fails) counts the allocations K the workload makes.
 * Every N from 1 to K is walked when the walk fits the time budget
 * (TENFERRO_FAILALLOC_BUDGET_S, default 60 s, estimated from the dry run);
 * otherwise every N up to 200 and a stride beyond (TENFERRO_FAILALLOC_STRIDE
 * forces one). The summary line says which.
 *
 * Environment: TENFERRO_FAILALLOC_DAEMON (default: tests/tenferrod-failalloc
 * beside $TENFERRO_DAEMON, else build/tests/tenferrod-failalloc).
 */
#include <check.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Element counts of the workload's tensors: X is staged (at least 64 KiB of f64), Y inline. */
enum { XN = 96, YN = 32, SMALL = 16 };
/* An f32 tensor of FR x FC summed over its columns: more sums than fit the worker's stack buffer. */
enum { FR = 640, FC = 3 };
/* The raw step's tensor (inline: under 64 KiB) and how many downloads of it go out unread. */
enum { RAW_ELEMS = 7000, RAW_DOWNLOADS = 8 };
/* Bytes of the second client's tensor. */
enum { HELD_ELEMS = 512 };

/* How the workload ended: the exit code of its process. */
enum {
    W_COMPLETED = 0,
    W_WRONG = 1,        /* a wrong value or a status other than the allowed ones */
    W_NO_MEMORY = 10,   /* stopped at TF_ERR_NO_MEMORY */
    W_DISCONNECTED = 11 /* stopped at TF_ERR_DISCONNECTED */
};

/* ---- the workload (a child process) ---- */

/* The workload's state: its client, its inputs and what it expects back. */
typedef struct workload {
    tf_client *c;
    const char *step; /* what it was doing, for the report */
    tf_tensor x, y, z, m, s, a, b, d, u, f, fs;
    double hx[XN * XN], hy[YN], hu[XN * XN];
    float hf[FR * FC];
} workload;

/* The allowed outcome of a failed call: which exit code it maps to, or W_WRONG. */
static int outcome_of(workload *w, tf_status st) {
    if (st == TF_ERR_NO_MEMORY) return W_NO_MEMORY;
    if (st == TF_ERR_DISCONNECTED) return W_DISCONNECTED;
    fprintf(stderr, "[workload] %s: %s is neither TF_ERR_NO_MEMORY nor TF_ERR_DISCONNECTED: %s\n",
            w->step, tf_status_name(st), tf_client_last_error(w->c));
    return W_WRONG;
}

/* Stops the workload at its first failed call (the caller returns the code). */
#define STEP(w, call)                                                                             \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        if (st_ != TF_OK) return outcome_of((w), st_);                                            \
    } while (0)

/* A downloaded tensor must hold n doubles close to want (relative 1e-10: sums in another order). */
static int check_values(workload *w, const char *what, const void *got, size_t bytes,
                        const double *want, size_t n) {
    if (bytes != n * sizeof(double)) {
        fprintf(stderr, "[workload] %s: %zu bytes, expected %zu\n", what, bytes, n * sizeof(double));
        return W_WRONG;
    }
    double diff = th_max_rel_diff(TF_F64, n, got, want, 1.0);
    if (!(diff <= 1e-10)) {
        fprintf(stderr, "[workload] %s: wrong values (relative difference %g)\n", what, diff);
        return W_WRONG;
    }
    (void)w;
    return W_COMPLETED;
}

/* Downloads tensor t and compares it with want. */
static int download_check(workload *w, const char *what, tf_tensor t, const double *want, size_t n) {
    void *data = NULL;
    size_t bytes = 0;
    w->step = what;
    STEP(w, tf_download(w->c, t, &data, &bytes));
    int rc = check_values(w, what, data, bytes, want, n);
    free(data);
    return rc;
}

static tf_status scoped_ops(tf_view *v, void *arg) {
    workload *w = arg;
    tf_status st = tf_view_add(v, w->x, w->x, &w->z);
    if (st == TF_OK) st = tf_view_matmul(v, w->x, w->x, &w->m);
    int axis = 1;
    if (st == TF_OK) st = tf_view_sum(v, w->m, 1, &axis, &w->s);
    /* Runs on a worker that allocates its accumulators (cpu/reduce.c). */
    if (st == TF_OK) st = tf_view_sum(v, w->f, 1, &axis, &w->fs);
    return st;
}

static tf_status held_ops_1(tf_view *v, void *arg) {
    workload *w = arg;
    tf_status st = tf_view_mul(v, w->z, w->x, &w->a);
    if (st == TF_OK) st = tf_view_scale(v, (tf_scalar){2.0, 0.0}, w->a, &w->b);
    return st;
}

static tf_status held_ops_2(tf_view *v, void *arg) {
    workload *w = arg;
    tf_status st = tf_view_sub(v, w->b, w->x, &w->d);
    /* Queued behind d, so it travels as a FREE operation of the batch. */
    if (st == TF_OK) st = tf_tensor_free(tf_view_client(v), w->a);
    return st;
}

/*
 * A pending download nobody waits for (released: the daemon frees the buffer
 * and the tensor when the copy is done), and a held session released without
 * a submission.
 */
static int detached_and_released(workload *w) {
    double v[SMALL];
    th_fill_random(TF_F64, SMALL, v);
    tf_tensor t;
    w->step = "upload (released)";
    STEP(w, tf_upload(w->c, TF_F64, 1, (int64_t[]){SMALL}, v, &t));
    tf_pinned_buffer *pb = NULL;
    w->step = "pinned buffer (released)";
    STEP(w, tf_pinned_buffer_new(w->c, sizeof v, &pb));
    tf_pending *p = NULL;
    w->step = "download pending (released)";
    tf_status st = tf_download_pending(w->c, t, pb, &p);
    if (st != TF_OK) {
        tf_pinned_buffer_free(pb);
        return outcome_of(w, st);
    }
    tf_pending_release(p);
    tf_session *s = NULL;
    w->step = "session open (released)";
    STEP(w, tf_session_open(w->c, &s));
    tf_session_release(s);
    return W_COMPLETED;
}

/* Sends one frame of the raw step; 0 when sent. */
static int raw_send_body(int fd, uint64_t seq, Tenferro__Frame *f) {
    f->seq = seq;
    return th_raw_send(fd, f);
}

/*
 * A raw connection that sends several downloads before it reads any answer,
 * so the daemon's replies outgrow the socket buffer and queue through libuv.
 * Each answer must be the right bytes or a typed refusal, or the connection
 * closes; an answer that never comes (the connection left open) is wrong.
 */
static int raw_pipelined(workload *w, const char *sock) {
    th_daemon d;
    memset(&d, 0, sizeof d);
    snprintf(d.socket, sizeof d.socket, "%s", sock);
    w->step = "raw pipelined downloads";
    int fd = th_raw_connect(&d);
    if (fd < 0) return W_DISCONNECTED;
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    int rc = W_COMPLETED;
    if (!hello || hello->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY) {
        rc = hello ? W_NO_MEMORY : W_DISCONNECTED;
        tf__frame_free(hello);
        goto out;
    }
    tf__frame_free(hello);
    static double v[RAW_ELEMS];
    th_fill_random(TF_F64, RAW_ELEMS, v);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    int64_t shape[1] = {RAW_ELEMS};
    up.tensor = 1;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = 1;
    up.shape = shape;
    up.data.data = (uint8_t *)v;
    up.data.len = sizeof v;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    if (raw_send_body(fd, 2, &f) != 0) {
        rc = W_DISCONNECTED;
        goto out;
    }
    Tenferro__Frame *r = th_raw_recv(fd, 5000);
    int ok = r && r->body_case == TENFERRO__FRAME__BODY_RESULT && r->result->status == TF_OK;
    if (r && !ok && r->body_case == TENFERRO__FRAME__BODY_RESULT &&
        r->result->status != TF_ERR_NO_MEMORY) {
        fprintf(stderr, "[workload] raw upload: %s\n", tf_status_name(r->result->status));
        rc = W_WRONG;
    } else if (!ok) {
        rc = r ? W_NO_MEMORY : (th_raw_closed(fd, 0) ? W_DISCONNECTED : W_WRONG);
    }
    tf__frame_free(r);
    if (!ok) goto out;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    dl.tensor = 1;
    dl.length = sizeof v;
    Tenferro__Frame g = TENFERRO__FRAME__INIT;
    g.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    g.download = &dl;
    for (uint64_t i = 0; i < RAW_DOWNLOADS; i++)
        if (raw_send_body(fd, 3 + i, &g) != 0) break;
    for (uint64_t i = 0; i < RAW_DOWNLOADS && rc == W_COMPLETED; i++) {
        r = th_raw_recv(fd, 5000);
        if (!r) {
            if (!th_raw_closed(fd, 100)) {
                fprintf(stderr, "[workload] raw download %llu: no answer, connection still open\n",
                        (unsigned long long)i);
                rc = W_WRONG;
            } else {
                rc = W_DISCONNECTED;
            }
        } else if (r->seq == 0 && r->body_case == TENFERRO__FRAME__BODY_RESULT) {
            rc = W_DISCONNECTED; /* the daemon's last word before it closes the connection */
        } else if (r->seq != 3 + i || r->body_case != TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
            /* The client library reads pipelined downloads in order (client/transfer.c). */
            fprintf(stderr, "[workload] raw download %llu: answer %llu of body %d\n",
                    (unsigned long long)i, (unsigned long long)r->seq, (int)r->body_case);
            rc = W_WRONG;
        } else if (r->download_reply->result->status == TF_ERR_NO_MEMORY) {
            rc = W_NO_MEMORY;
        } else if (r->download_reply->result->status != TF_OK ||
                   r->download_reply->data.len != sizeof v ||
                   memcmp(r->download_reply->data.data, v, sizeof v) != 0) {
            fprintf(stderr, "[workload] raw download %llu: wrong answer (%s)\n",
                    (unsigned long long)i, tf_status_name(r->download_reply->result->status));
            rc = W_WRONG;
        }
        tf__frame_free(r);
    }
out:
    close(fd);
    return rc;
}

/* The daemon's status on a raw connection of its own: a report, or a typed refusal. */
static int status_request(workload *w, const char *sock) {
    th_daemon d;
    memset(&d, 0, sizeof d);
    snprintf(d.socket, sizeof d.socket, "%s", sock);
    w->step = "status request";
    Tenferro__Frame *r = th_status_report(&d);
    /* NULL: the daemon answered otherwise (out of memory) or closed the connection; both allowed. */
    int rc = W_COMPLETED;
    if (r && (!r->status_reply->result || r->status_reply->result->status != TF_OK ||
              r->status_reply->n_clients < 2)) {
        fprintf(stderr, "[workload] status request: a wrong report\n");
        rc = W_WRONG;
    }
    tf__frame_free(r);
    return rc;
}

/* The workload's steps after connecting; returns its exit code. */
static int run_steps(workload *w) {
    const size_t nx = XN * XN;
    const int64_t shape_x[2] = {XN, XN}, shape_y[1] = {YN};
    th_fill_random(TF_F64, nx, w->hx);
    th_fill_random(TF_F64, YN, w->hy);
    th_fill_random(TF_F64, nx, w->hu);

    w->step = "upload (staged)";
    STEP(w, tf_upload(w->c, TF_F64, 2, shape_x, w->hx, &w->x));
    w->step = "upload (inline)";
    STEP(w, tf_upload(w->c, TF_F64, 1, shape_y, w->hy, &w->y));
    th_fill_random(TF_F32, FR * FC, w->hf);
    w->step = "upload (f32)";
    STEP(w, tf_upload(w->c, TF_F32, 2, (int64_t[]){FR, FC}, w->hf, &w->f));

    w->step = "scoped session";
    STEP(w, tf_with_session(w->c, scoped_ops, w));

    tf_session *s = NULL;
    w->step = "session open";
    STEP(w, tf_session_open(w->c, &s));
    w->step = "session with";
    STEP(w, tf_session_with(s, held_ops_1, w));
    w->step = "session submit";
    STEP(w, tf_session_submit(s));
    w->step = "session with (2)";
    STEP(w, tf_session_with(s, held_ops_2, w));
    w->step = "session synchronize";
    STEP(w, tf_session_synchronize(s));
    tf_session_counters counters;
    w->step = "session close";
    STEP(w, tf_session_close(s, &counters));

    /* A pinned buffer: pending upload into a new tensor, then a pending download of d into it. */
    tf_pinned_buffer *pb = NULL;
    w->step = "pinned buffer";
    STEP(w, tf_pinned_buffer_new(w->c, nx * sizeof(double), &pb));
    w->step = "upload (destination)";
    tf_status st = tf_upload(w->c, TF_F64, 2, shape_x, w->hx, &w->u); /* overwritten below */
    if (st == TF_OK) {
        memcpy(tf_pinned_buffer_data(pb), w->hu, nx * sizeof(double));
        tf_pending *p = NULL;
        w->step = "upload pending";
        st = tf_upload_pending(w->c, pb, w->u, &p);
        if (st == TF_OK) {
            (void)tf_pending_is_ready(p);
            w->step = "upload pending wait";
            st = tf_pending_wait(p, &w->u, &pb);
        }
    }
    if (st == TF_OK) {
        tf_pending *p = NULL;
        w->step = "download pending";
        st = tf_download_pending(w->c, w->d, pb, &p);
        if (st == TF_OK) {
            w->step = "download pending wait";
            st = tf_pending_wait(p, &w->d, &pb);
        }
    }
    double *want = malloc(nx * sizeof *want);
    if (!want) abort();
    int rc = W_COMPLETED;
    if (st == TF_OK) {
        /* d = 2 * (x + x) * x - x */
        for (size_t i = 0; i < nx; i++) want[i] = 2.0 * (2.0 * w->hx[i]) * w->hx[i] - w->hx[i];
        rc = check_values(w, "pending download", tf_pinned_buffer_data(pb), nx * sizeof(double),
                          want, nx);
    } else {
        rc = outcome_of(w, st);
    }
    tf_pinned_buffer_free(pb);
    if (rc != W_COMPLETED) {
        free(want);
        return rc;
    }
    rc = detached_and_released(w);
    if (rc != W_COMPLETED) {
        free(want);
        return rc;
    }

    /* Blocking downloads of every result, against references computed here. */
    for (size_t i = 0; i < nx; i++) want[i] = 2.0 * w->hx[i];
    rc = download_check(w, "download z", w->z, want, nx);
    if (rc == W_COMPLETED) {
        for (int i = 0; i < XN; i++)
            for (int j = 0; j < XN; j++) {
                double acc = 0;
                for (int k = 0; k < XN; k++) acc += w->hx[i * XN + k] * w->hx[k * XN + j];
                want[i * XN + j] = acc;
            }
        rc = download_check(w, "download m", w->m, want, nx);
    }
    if (rc == W_COMPLETED) {
        double sums[XN];
        for (int i = 0; i < XN; i++) {
            sums[i] = 0;
            for (int j = 0; j < XN; j++) sums[i] += want[i * XN + j];
        }
        rc = download_check(w, "download s", w->s, sums, XN);
    }
    if (rc == W_COMPLETED) rc = download_check(w, "download u", w->u, w->hu, nx);
    if (rc == W_COMPLETED) {
        float fsum[FR];
        for (int i = 0; i < FR; i++) {
            double acc = 0;
            for (int j = 0; j < FC; j++) acc += w->hf[i * FC + j];
            fsum[i] = (float)acc;
        }
        void *data = NULL;
        size_t bytes = 0;
        w->step = "download fs";
        tf_status st2 = tf_download(w->c, w->fs, &data, &bytes);
        if (st2 != TF_OK) {
            rc = outcome_of(w, st2);
        } else if (bytes != sizeof fsum || th_max_rel_diff(TF_F32, FR, data, fsum, 1.0) > 1e-6) {
            fprintf(stderr, "[workload] download fs: wrong values\n");
            rc = W_WRONG;
        }
        free(data);
    }
    if (rc == W_COMPLETED) rc = download_check(w, "download y", w->y, w->hy, YN);
    free(want);
    /* A Free frame (nothing is queued). */
    if (rc == W_COMPLETED) {
        w->step = "free";
        STEP(w, tf_tensor_free(w->c, w->y));
    }
    return rc;
}

/* A second, short connection of the same process: connect, upload, download, disconnect. */
static int second_connection(workload *w, const char *sock) {
    tf_client *c2 = NULL;
    w->step = "second connect";
    tf_status st = tf_connect(sock, &c2);
    int rc = W_COMPLETED;
    if (st == TF_OK) {
        double v[SMALL];
        th_fill_random(TF_F64, SMALL, v);
        tf_tensor t;
        w->step = "second upload";
        st = tf_upload(c2, TF_F64, 1, (int64_t[]){SMALL}, v, &t);
        void *data = NULL;
        size_t bytes = 0;
        if (st == TF_OK) {
            w->step = "second download";
            st = tf_download(c2, t, &data, &bytes);
        }
        if (st == TF_OK) rc = check_values(w, "second download", data, bytes, v, SMALL);
        free(data);
    }
    if (st != TF_OK) {
        tf_client *first = w->c;
        w->c = c2;
        rc = outcome_of(w, st);
        w->c = first;
    }
    tf_disconnect(c2);
    return rc;
}

/*
 * After a typed failure on a connection that is still there: a fresh round
 * trip must give the right bytes or a typed error (the stream's pending
 * failure may be reported again), never a wrong value.
 */
static int after_failure(workload *w) {
    double v[SMALL];
    th_fill_random(TF_F64, SMALL, v);
    tf_tensor t;
    void *data = NULL;
    size_t bytes = 0;
    w->step = "round trip after the failure";
    tf_status st = tf_upload(w->c, TF_F64, 1, (int64_t[]){SMALL}, v, &t);
    if (st == TF_OK) st = tf_download(w->c, t, &data, &bytes);
    int rc = st == TF_OK ? check_values(w, w->step, data, bytes, v, SMALL) : outcome_of(w, st);
    free(data);
    return rc == W_WRONG ? W_WRONG : W_COMPLETED;
}

/* Arguments of the workload process: where to read the socket path that starts it. */
typedef struct workload_args {
    int go_fd;
    int parent_end; /* the pipe's other end, closed here so a parent that gives up is seen */
} workload_args;

/* The workload process: waits for the daemon's socket path on go_fd, then runs. */
static int workload_main(void *arg) {
    workload_args *a = arg;
    close(a->parent_end);
    char sock[sizeof ((th_daemon *)0)->socket];
    memset(sock, 0, sizeof sock);
    size_t got = 0;
    while (got < sizeof sock) {
        ssize_t n = read(a->go_fd, sock + got, sizeof sock - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return W_WRONG;
        got += (size_t)n;
    }
    sock[sizeof sock - 1] = '\0';
    static workload w;
    memset(&w, 0, sizeof w);
    w.step = "connect";
    tf_status st = tf_connect(sock, &w.c);
    int rc = st == TF_OK ? run_steps(&w) : outcome_of(&w, st);
    if (rc == W_COMPLETED) rc = second_connection(&w, sock);
    if (rc == W_COMPLETED) rc = status_request(&w, sock);
    if (rc == W_COMPLETED) rc = raw_pipelined(&w, sock);
    /* Last, a held session its owner leaves holding: the daemon reclaims it at the close. */
    tf_session *held = NULL;
    if (rc == W_COMPLETED) {
        w.step = "session open (left held)";
        tf_status st2 = tf_session_open(w.c, &held);
        if (st2 != TF_OK) rc = outcome_of(&w, st2);
    }
    if (rc != W_COMPLETED && rc != W_WRONG && getenv("TENFERRO_FAILALLOC_VERBOSE"))
        fprintf(stderr, "[workload] stopped at %s: %s\n", w.step, tf_client_last_error(w.c));
    if (rc == W_NO_MEMORY && after_failure(&w) == W_WRONG) rc = W_WRONG;
    (void)held; /* not released: the connection goes with it */
    tf_disconnect(w.c);
    return rc;
}

/* ---- one run of the walk ---- */

/* What one run found: the workload's end, the daemon's log facts. */
typedef struct run_result {
    int workload;        /* W_* */
    int failed;          /* the daemon's log names the failed allocation */
    char site[512];      /* its stack inside the daemon: offsets for addr2line, innermost first */
    uint64_t counted;    /* allocations counted while armed (from "disarmed: K") */
    char problem[1024];  /* "" when every check passed */
} run_result;

/* The failure-injection daemon's path. */
static const char *failalloc_daemon(void) {
    static char path[4096];
    const char *p = getenv("TENFERRO_FAILALLOC_DAEMON");
    if (p && p[0]) return p;
    const char *d = getenv("TENFERRO_DAEMON");
    if (d && d[0]) {
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", d);
        snprintf(path, sizeof path, "%s/tests/tenferrod-failalloc", dirname(copy));
        return path;
    }
    return "build/tests/tenferrod-failalloc";
}

/* Waits up to timeout_ms for a child; its exit code, or -1 (killed) when it did not end. */
static int wait_child(pid_t pid, int timeout_ms) {
    for (int waited = 0; waited < timeout_ms; waited += 5) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        th_sleep_ms(5);
    }
    kill(pid, SIGKILL);
    th_wait(pid);
    return -1;
}

/* A counter of a status report, or UINT64_MAX when it is missing. */
static uint64_t counter_of(const Tenferro__StatusReply *r, const char *name) {
    for (size_t i = 0; i < r->n_counters; i++)
        if (strcmp(r->counters[i]->name, name) == 0) return r->counters[i]->value;
    return UINT64_MAX;
}

/* Describes how the status differs from the baseline in why; 0 when it is the baseline. */
static int off_baseline(const Tenferro__StatusReply *r, char *why, size_t len) {
    /* The status request's own connection is the one client and the one open connection. */
    uint64_t open = counter_of(r, "connections_accepted") - counter_of(r, "connections_closed");
    uint64_t created = counter_of(r, "tensors_created"), freed = counter_of(r, "tensors_freed");
    const char *zero[] = {"device_bytes_live", "device_allocations_live", "pinned_bytes_live",
                          "pinned_buffers_live", "protocol_errors"};
    if (r->n_clients != 1 || open != 1) {
        snprintf(why, len, "%ld clients and %lld connections besides the status request's",
                 (long)r->n_clients - 1, (long long)open - 1);
        return 1;
    }
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++) {
        uint64_t v = counter_of(r, zero[i]);
        if (v != 0) {
            snprintf(why, len, "%s is %llu", zero[i], (unsigned long long)v);
            return 1;
        }
    }
    uint64_t opened = counter_of(r, "sessions_opened"),
             ended = counter_of(r, "sessions_closed") + counter_of(r, "sessions_released") +
                     counter_of(r, "sessions_reclaimed");
    if (opened != ended) {
        snprintf(why, len, "%llu sessions opened, %llu closed, released or reclaimed",
                 (unsigned long long)opened, (unsigned long long)ended);
        return 1;
    }
    if (created != freed) {
        snprintf(why, len, "%llu tensors created, %llu freed", (unsigned long long)created,
                 (unsigned long long)freed);
        return 1;
    }
    if (r->n_reservations > 0 && r->reservations[0]->holder_client_id != 0) {
        snprintf(why, len, "the reservation is held by client %llu",
                 (unsigned long long)r->reservations[0]->holder_client_id);
        return 1;
    }
    return 0;
}

/* Runs the workload against a daemon failing allocation n (0: none) and checks everything. */
static void run_once(uint64_t n, run_result *out) {
    memset(out, 0, sizeof *out);
    int go[2];
    if (pipe(go) != 0) abort();
    workload_args args = {go[0], go[1]};
    pid_t pid = th_spawn(workload_main, &args);
    close(go[0]);
    char value[32];
    snprintf(value, sizeof value, "%llu", (unsigned long long)n);
    setenv("TENFERRO_FAIL_ALLOC", value, 1);
    snprintf(value, sizeof value, "%d", (int)pid);
    setenv("TENFERRO_FAIL_ALLOC_PEER", value, 1);
    th_daemon d;
    int started = th_daemon_start(&d, NULL);
    unsetenv("TENFERRO_FAIL_ALLOC");
    unsetenv("TENFERRO_FAIL_ALLOC_PEER");
    if (started != 0) {
        close(go[1]);
        th_wait(pid);
        snprintf(out->problem, sizeof out->problem, "the daemon did not start (log %s)", d.log_path);
        return;
    }

    /* The other client: connected, holding a tensor, before the workload's connection arms it. */
    tf_client *other = NULL;
    double held[HELD_ELEMS];
    th_fill_random(TF_F64, HELD_ELEMS, held);
    tf_tensor held_t = 0;
    if (tf_connect(d.socket, &other) != TF_OK ||
        tf_upload(other, TF_F64, 1, (int64_t[]){HELD_ELEMS}, held, &held_t) != TF_OK) {
        snprintf(out->problem, sizeof out->problem, "the other client could not connect: %s",
                 tf_client_last_error(other));
        close(go[1]);
        th_wait(pid);
        tf_disconnect(other);
        th_daemon_stop(&d);
        return;
    }

    if (write(go[1], d.socket, sizeof d.socket) != (ssize_t)sizeof d.socket) abort();
    close(go[1]);
    out->workload = wait_child(pid, 30000);
    char *p = out->problem;
    size_t len = sizeof out->problem;
    if (out->workload == -1)
        snprintf(p, len, "the workload hung (killed after 30 s)");
    else if (out->workload != W_COMPLETED && out->workload != W_NO_MEMORY &&
             out->workload != W_DISCONNECTED)
        snprintf(p, len, "the workload ended with %d (a wrong value or status, see its stderr)",
                 out->workload);

    /* The daemon is alive and answers. */
    int status;
    if (waitpid(d.pid, &status, WNOHANG) == d.pid) {
        snprintf(p, len, "the daemon died (%s %d; log %s)", WIFSIGNALED(status) ? "signal" : "exit",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), d.log_path);
        d.pid = 0;
        tf_disconnect(other);
        return;
    }

    /*
     * The workload's process has ended; counting stops once the daemon has
     * freed its connection, and the checks below must not be counted.
     */
    int disarmed = 0;
    for (double until = th_now_s() + 5; !disarmed && th_now_s() < until;) {
        char *text = th_daemon_log(&d);
        disarmed = strstr(text, "disarmed: ") != NULL;
        free(text);
        if (!disarmed) th_sleep_ms(2);
    }

    /* The other client's bytes are intact. */
    void *data = NULL;
    size_t bytes = 0;
    tf_status st = tf_download(other, held_t, &data, &bytes);
    if (!p[0] && (st != TF_OK || bytes != sizeof held || memcmp(data, held, sizeof held) != 0))
        snprintf(p, len, "the other client's tensor came back %s: %s",
                 st == TF_OK ? "changed" : tf_status_name(st), tf_client_last_error(other));
    free(data);
    tf_disconnect(other);

    /* Back to the baseline once both clients have gone. */
    char why[256] = "no status report";
    int settled = 0;
    for (double until = th_now_s() + 5; !settled && th_now_s() < until;) {
        Tenferro__Frame *r = th_status_report(&d);
        settled = r && !off_baseline(r->status_reply, why, sizeof why);
        tf__frame_free(r);
        if (!settled) th_sleep_ms(10);
    }
    if (!p[0] && !settled) snprintf(p, len, "the status did not come back to baseline: %s", why);

    char *log = th_daemon_log(&d);
    if (getenv("TENFERRO_FAILALLOC_ONLY")) fprintf(stderr, "---- the daemon's log\n%s----\n", log);
    char needle[64];
    snprintf(needle, sizeof needle, "failing allocation #%llu:", (unsigned long long)n);
    const char *fail_line = n > 0 ? strstr(log, needle) : NULL;
    out->failed = fail_line != NULL;
    /* The daemon's own frames of the failed allocation's stack, for the verbose listing. */
    for (const char *f = fail_line; f && (f = strstr(f, "tenferrod-failalloc(+0x")) != NULL;) {
        f += strlen("tenferrod-failalloc(+");
        size_t used = strlen(out->site), len_f = strcspn(f, ")");
        if (used + len_f + 2 >= sizeof out->site) break;
        snprintf(out->site + used, sizeof out->site - used, "%.*s ", (int)len_f, f);
        const char *eol = strchr(f, '\n');
        if (!eol || strncmp(eol + 1, "tenferrod-failalloc:", 20) == 0 || !strchr(eol + 1, '(')) break;
    }
    const char *dis = strstr(log, "disarmed: ");
    if (dis) out->counted = strtoull(dis + strlen("disarmed: "), NULL, 10);
    else if (!p[0]) snprintf(p, len, "the workload's connection was never freed (no \"disarmed\")");
    free(log);

    char log_path[sizeof d.log_path];
    memcpy(log_path, d.log_path, sizeof log_path);
    int rc = th_daemon_stop(&d);
    if (!p[0] && rc != 0) snprintf(p, len, "the daemon exited with %d at SIGTERM", rc);
    /* Keep the log of a failed run (th_daemon_stop removed it only after a clean exit). */
    if (p[0] && rc == 0) {
        size_t used = strlen(p);
        snprintf(p + used, len - used, " (log removed; rerun with TENFERRO_FAIL_ALLOC=%llu)",
                 (unsigned long long)n);
    } else if (p[0]) {
        size_t used = strlen(p);
        snprintf(p + used, len - used, " (log %s)", log_path);
    }
}

/* An unsigned setting from the environment, or def. */
static unsigned long env_ulong(const char *name, unsigned long def) {
    const char *v = getenv(name);
    return v && v[0] ? strtoul(v, NULL, 10) : def;
}

/* The walk: a dry run counts the workload's allocations, then each N fails in turn. */
START_TEST(test_allocation_failure_walk) {
    char daemon[4096];
    snprintf(daemon, sizeof daemon, "%s", failalloc_daemon());
    /* The failure-injection daemon is built with the CPU backend only. */
    setenv("TENFERRO_TEST_DEVICE", "cpu", 1);
    ck_assert_msg(access(daemon, X_OK) == 0, "no failure-injection daemon at %s", daemon);
    setenv("TENFERRO_DAEMON", daemon, 1);
    run_result r;
    double t0 = th_now_s();
    run_once(0, &r);
    ck_assert_msg(!r.problem[0], "dry run (nothing fails): %s", r.problem);
    ck_assert_msg(r.workload == W_COMPLETED, "dry run: the workload ended with %d", r.workload);
    ck_assert_msg(r.counted > 0, "dry run: no allocation was counted");
    const uint64_t k = r.counted;

    /*
     * Every N up to 200; beyond, every N if the rest fits the time budget at
     * the pace of the runs so far, else a stride (and always N = K itself).
     */
    const double budget = (double)env_ulong("TENFERRO_FAILALLOC_BUDGET_S", 60);
    uint64_t stride = env_ulong("TENFERRO_FAILALLOC_STRIDE", 0);
    const int fixed_stride = stride != 0;
    if (!fixed_stride) stride = 1;
    const uint64_t dense = 200;
    uint64_t walked = 0, fired = 0, completed = 0, no_memory = 0, disconnected = 0;
    /* TENFERRO_FAILALLOC_ONLY=N runs that one value and prints the daemon's log. */
    const uint64_t only = env_ulong("TENFERRO_FAILALLOC_ONLY", 0);
    const int keep_going = env_ulong("TENFERRO_FAILALLOC_KEEP_GOING", 0) != 0;
    uint64_t problems = 0;
    const double walk_start = th_now_s();
    for (uint64_t n = only ? only : 1; n <= (only ? only : k);) {
        double started = th_now_s();
        run_once(n, &r);
        double took = th_now_s() - started;
        /* TENFERRO_FAILALLOC_KEEP_GOING=1 lists every failing N instead of stopping at the first. */
        if (r.problem[0] && keep_going) {
            fprintf(stderr, "failalloc: allocation #%llu failing: %s\n", (unsigned long long)n,
                    r.problem);
            problems++;
        } else {
            ck_assert_msg(!r.problem[0], "allocation #%llu of %llu failing: %s",
                          (unsigned long long)n, (unsigned long long)k, r.problem);
        }
        /* TENFERRO_FAILALLOC_VERBOSE=1 lists each N: how the workload ended and where it failed. */
        if (getenv("TENFERRO_FAILALLOC_VERBOSE"))
            fprintf(stderr, "failalloc: N=%llu workload=%d %.3f s site=%s\n",
                    (unsigned long long)n, r.workload, took, r.site);
        walked++;
        fired += r.failed;
        completed += r.workload == W_COMPLETED;
        no_memory += r.workload == W_NO_MEMORY;
        disconnected += r.workload == W_DISCONNECTED;
        if (n == dense && !fixed_stride && k > dense) {
            double pace = (th_now_s() - walk_start) / (double)walked;
            double left = budget - (th_now_s() - t0);
            double affordable = left > 0 ? left / pace : 0;
            stride = affordable >= (double)(k - dense)
                         ? 1
                         : (uint64_t)ceil((double)(k - dense) / (affordable > 1 ? affordable : 1));
        }
        if (n >= dense && n < k && n + stride > k)
            n = k; /* the last allocation is always walked */
        else
            n += n < dense ? 1 : stride;
    }
    fprintf(stderr,
            "failalloc: the workload makes %llu allocations; walked %llu values of N (%s) in "
            "%.1f s: %llu failures injected; the workload completed %llu times, stopped at "
            "TF_ERR_NO_MEMORY %llu times and at TF_ERR_DISCONNECTED %llu times\n",
            (unsigned long long)k, (unsigned long long)walked,
            stride == 1 ? "every N" : "every N up to 200, then a stride",
            th_now_s() - t0, (unsigned long long)fired, (unsigned long long)completed,
            (unsigned long long)no_memory, (unsigned long long)disconnected);
    if (stride > 1) fprintf(stderr, "failalloc: stride %llu beyond N = 200\n", (unsigned long long)stride);
    ck_assert_msg(problems == 0, "%llu values of N failed a check (listed above)",
                  (unsigned long long)problems);
}
END_TEST

int main(void) {
    th_seed();
    Suite *s = suite_create("failalloc");
    TCase *tc = tcase_create("walk");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_allocation_failure_walk);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
