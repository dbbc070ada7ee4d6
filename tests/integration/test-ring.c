/*
 * The submission ring (docs/transfers.md, "The submission ring"): held and
 * scoped sessions through the ring give the same values as through the
 * socket; the ring keeps its order with frames sent on the socket; a hostile
 * client writing the shared page by hand (random bytes, positions out of
 * range, a sequence number from the past, a frame the ring may not carry, a
 * reply area it will not read) loses its own connection with a typed last
 * word and nothing else; a client killed mid-ring leaves nothing behind; a
 * daemon killed mid-ring leaves its client with TF_ERR_DISCONNECTED.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/completion.h"
#include "common/frame.h"
#include "common/ops.h"
#include "tests/integration/harness.h"

#define RAW_TIMEOUT_MS 5000

/* ---- the library through the ring and through the socket ---- */

/* Operands of held_rounds' callbacks. */
typedef struct held_args {
    tf_tensor a, b, prod, scaled;
} held_args;

static tf_status matmul_step(tf_view *v, void *arg) {
    held_args *x = arg;
    return tf_view_matmul(v, x->a, x->b, &x->prod);
}

static tf_status scale_step(tf_view *v, void *arg) {
    held_args *x = arg;
    tf_scalar two = {2.0, 0.0};
    return tf_view_scale(v, two, x->prod, &x->scaled);
}

/* Runs rounds of a held matmul-and-scale stage on c and checks each against the reference. */
static void held_rounds(tf_client *c, int rounds) {
    enum { N = 24 };
    double a[N * N], b[N * N], want[N * N];
    int64_t shape[2] = {N, N};
    tf_session *s;
    CK_STATUS(c, tf_session_open(c, &s), TF_OK);
    for (int r = 0; r < rounds; r++) {
        th_fill_random(TF_F64, N * N, a);
        th_fill_random(TF_F64, N * N, b);
        held_args x;
        CK_STATUS(c, tf_upload(c, TF_F64, 2, shape, a, &x.a), TF_OK);
        CK_STATUS(c, tf_upload(c, TF_F64, 2, shape, b, &x.b), TF_OK);
        CK_STATUS(c, tf_session_with(s, matmul_step, &x), TF_OK);
        CK_STATUS(c, tf_session_submit(s), TF_OK);
        CK_STATUS(c, tf_session_with(s, scale_step, &x), TF_OK);
        CK_STATUS(c, tf_session_synchronize(s), TF_OK);
        double *got = NULL;
        size_t bytes = 0;
        CK_STATUS(c, tf_download(c, x.scaled, (void **)&got, &bytes), TF_OK);
        ck_assert_uint_eq(bytes, sizeof want);
        th_ref_matmul(N, N, N, a, b, want);
        for (int i = 0; i < N * N; i++) want[i] *= 2.0;
        ck_assert_double_le(th_max_rel_diff(TF_F64, N * N, got, want, 1e-3), 1e-10);
        free(got);
        tf_tensor_free(c, x.a);
        tf_tensor_free(c, x.b);
        tf_tensor_free(c, x.prod);
        tf_tensor_free(c, x.scaled);
    }
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
}

/* Operand of the scoped burst: out = a + b. */
typedef struct add_args {
    tf_tensor a, b, out;
} add_args;

static tf_status add_burst(tf_view *v, void *arg) {
    add_args *x = arg;
    return tf_view_add(v, x->a, x->b, &x->out);
}

/* A scoped burst on c, checked against the loop. */
static void scoped_round(tf_client *c) {
    enum { N = 1000 };
    double a[N], b[N];
    th_fill_random(TF_F64, N, a);
    th_fill_random(TF_F64, N, b);
    int64_t shape[1] = {N};
    add_args x;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, a, &x.a), TF_OK);
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, b, &x.b), TF_OK);
    CK_STATUS(c, tf_with_session(c, add_burst, &x), TF_OK);
    double *got = NULL;
    size_t bytes = 0;
    CK_STATUS(c, tf_download(c, x.out, (void **)&got, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, sizeof a);
    for (int i = 0; i < N; i++) ck_assert_double_eq_tol(got[i], a[i] + b[i], 1e-15);
    free(got);
    tf_tensor_free(c, x.a);
    tf_tensor_free(c, x.b);
    tf_tensor_free(c, x.out);
}

/*
 * Held and scoped sessions give the reference values through the ring, with
 * the daemon polling and with it asleep (every entry rung for), and through
 * the socket when TENFERRO_RING=off; the ring counter says which route ran.
 */
START_TEST(test_ring_and_socket_routes) {
    static const char *const polls[] = {"0", "2000"};
    for (int p = 0; p < 2; p++) {
        th_daemon d;
        CK_DAEMON_START(&d, "--busy-poll-us", polls[p]);
        for (int route = 0; route < 2; route++) {
            if (route == 1) setenv("TENFERRO_RING", "off", 1);
            uint64_t before = th_counter(&d, "ring_requests");
            tf_client *c = th_connect(&d);
            held_rounds(c, 20);
            scoped_round(c);
            tf_disconnect(c);
            uint64_t carried = th_counter(&d, "ring_requests") - before;
            if (route == 0)
                ck_assert_msg(carried >= 20 * 2 + 2, "only %llu requests took the ring (poll %s)",
                              (unsigned long long)carried, polls[p]);
            else
                ck_assert_msg(carried == 0, "%llu requests took the ring with TENFERRO_RING=off",
                              (unsigned long long)carried);
            unsetenv("TENFERRO_RING");
        }
        CK_DAEMON_STOP(&d);
    }
}
END_TEST

/* ---- raw clients that write the ring by hand ---- */

/* A raw connection past its handshake with its ring mapped, and its sequence numbers. */
typedef struct raw_ring {
    th_raw_client c;
    uint64_t seq;        /* the last number taken */
    uint64_t socket_seq; /* the last frame sent on the socket */
} raw_ring;

/* Sends a frame on the socket (numbering it) and returns the reply. */
static Tenferro__Frame *raw_call(raw_ring *r, Tenferro__Frame *f) {
    f->seq = ++r->seq;
    r->socket_seq = f->seq;
    ck_assert_int_eq(th_raw_send(r->c.fd, f), 0);
    Tenferro__Frame *reply = th_raw_recv(r->c.fd, RAW_TIMEOUT_MS);
    ck_assert_msg(reply != NULL, "no reply on the socket");
    return reply;
}

/* Connects, says Hello and maps the ring that must come with the reply. */
static raw_ring raw_ring_open(const th_daemon *d) {
    raw_ring r = {.seq = 0};
    ck_assert_msg(th_raw_client_open(d, "raw-ring", &r.seq, &r.c) == 0,
                  "no HelloReply with its page (see the harness's words above)");
    ck_assert_uint_eq(r.c.ring_offset, TF_RING_OFFSET);
    ck_assert_uint_ge(r.c.req_bytes, 4096);
    ck_assert_uint_ge(r.c.rep_bytes, 4096);
    r.socket_seq = r.seq;
    return r;
}

static void raw_ring_close(raw_ring *r) { th_raw_client_close(&r->c); }

/* Rings the doorbell (the daemon may be asleep). */
static void doorbell(raw_ring *r) {
    /* A doorbell orders nothing: its number is not taken from the sequence. */
    ck_assert_int_eq(th_raw_send_doorbell(r->c.fd, r->seq + 1), 0);
}

/* Writes raw bytes as one entry with the given header fields, publishes it and rings. */
static void put_entry_bytes(raw_ring *r, uint64_t seq, uint64_t after, const void *body, uint32_t len) {
    th_ring_write(&r->c, seq, after, body, len);
    doorbell(r);
}

/* Writes frame f as the next entry (numbering it) and rings. */
static void put_frame(raw_ring *r, Tenferro__Frame *f) {
    f->seq = ++r->seq;
    th_ring_write_frame(&r->c, f, r->socket_seq);
    doorbell(r);
}

/* Waits for the next reply in the reply area; NULL after the timeout. */
static Tenferro__Frame *ring_reply(raw_ring *r, int timeout_ms) {
    Tenferro__Frame *f;
    uint64_t seq;
    if (!th_ring_read(&r->c, timeout_ms, &f, &seq)) return NULL;
    ck_assert_msg(f && f->seq == seq, "a reply in the ring does not decode or carries another seq");
    return f;
}

/* Creates f64 tensor id of n elements holding `data`, through the socket. */
static void raw_upload(raw_ring *r, uint64_t id, const double *data, size_t n) {
    Tenferro__Frame f;
    Tenferro__Upload u;
    int64_t shape[1] = {(int64_t)n};
    th_raw_build_upload(&f, &u, id, 1, TF_F64, 1, shape, 0, data, n * sizeof *data);
    CK_EXPECT_RESULT(raw_call(r, &f), TF_OK, NULL);
}

/* Fills f/sub/op with a scoped final Submit of one ADD out = a + b. */
static void build_add(Tenferro__Frame *f, Tenferro__Submit *sub, Tenferro__Op *op, Tenferro__Op **ptr,
                      uint64_t inputs[2], uint64_t out) {
    tenferro__frame__init(f);
    tenferro__submit__init(sub);
    tenferro__op__init(op);
    op->kind = TF__OP_ADD;
    op->n_inputs = 2;
    op->inputs = inputs;
    op->output = out;
    *ptr = op;
    sub->mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub->n_ops = 1;
    sub->ops = ptr;
    f->body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f->submit = sub;
}

/* Downloads f64 tensor id (n elements) through the socket into out; returns the status. */
static tf_status raw_download(raw_ring *r, uint64_t id, double *out, size_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    th_raw_build_download(&f, &dl, id, 0, n * sizeof *out);
    Tenferro__Frame *reply = raw_call(r, &f);
    tf_status st = TF_ERR_PROTOCOL;
    if (reply->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
        ck_assert_uint_eq(reply->download_reply->data.len, n * sizeof *out);
        memcpy(out, reply->download_reply->data.data, n * sizeof *out);
        st = TF_OK;
    } else if (reply->body_case == TENFERRO__FRAME__BODY_RESULT) {
        st = (tf_status)reply->result->status;
    }
    tf__frame_free(reply);
    return st;
}

/*
 * Order between the two routes: a Free sent on the socket (no reply) before
 * a ring entry is handled before it, so the entry finds the tensor gone; a
 * ring entry's output is there for a Download sent after its reply; an
 * entry naming a socket frame not yet sent waits for it.
 */
START_TEST(test_ring_order_with_socket) {
    th_daemon d;
    CK_DAEMON_START(&d, "--busy-poll-us", "0");
    raw_ring r = raw_ring_open(&d);
    enum { N = 64 };
    double a[N], b[N], got[N];
    th_fill_random(TF_F64, N, a);
    th_fill_random(TF_F64, N, b);
    raw_upload(&r, 1, a, N);
    raw_upload(&r, 2, b, N);

    /* 1 + 2 -> 3 through the ring, then read through the socket. */
    Tenferro__Frame f;
    Tenferro__Submit sub;
    Tenferro__Op op, *ptr;
    uint64_t in12[2] = {1, 2};
    build_add(&f, &sub, &op, &ptr, in12, 3);
    put_frame(&r, &f);
    CK_EXPECT_RESULT(ring_reply(&r, RAW_TIMEOUT_MS), TF_OK, NULL);
    ck_assert_int_eq(raw_download(&r, 3, got, N), TF_OK);
    for (int i = 0; i < N; i++) ck_assert_double_eq_tol(got[i], a[i] + b[i], 1e-15);

    /* A Free on the socket, no reply, then an entry reading the freed tensor: it must be gone. */
    Tenferro__Frame ff = TENFERRO__FRAME__INIT;
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    uint64_t gone[1] = {2};
    fr.n_tensors = 1;
    fr.tensors = gone;
    ff.body_case = TENFERRO__FRAME__BODY_FREE;
    ff.free = &fr;
    ff.seq = ++r.seq;
    r.socket_seq = ff.seq;
    ck_assert_int_eq(th_raw_send(r.c.fd, &ff), 0);
    build_add(&f, &sub, &op, &ptr, in12, 4);
    put_frame(&r, &f);
    CK_EXPECT_RESULT(ring_reply(&r, RAW_TIMEOUT_MS), TF_ERR_UNKNOWN_HANDLE, "not live");

    /* An entry that names a socket frame still to come waits for it: no reply until it is sent. */
    uint64_t in13[2] = {1, 3};
    build_add(&f, &sub, &op, &ptr, in13, 5);
    f.seq = r.seq + 2; /* the Upload below takes r.seq + 1 */
    size_t len = tenferro__frame__get_packed_size(&f);
    uint8_t body[512];
    ck_assert_uint_le(len, sizeof body);
    tenferro__frame__pack(&f, body);
    put_entry_bytes(&r, f.seq, r.seq + 1, body, (uint32_t)len);
    ck_assert_msg(ring_reply(&r, 200) == NULL, "an entry ran before the socket frame it names");
    /* The Free it names: once handled, the entry runs and finds tensor 1 gone. */
    Tenferro__Frame fu = TENFERRO__FRAME__INIT;
    Tenferro__Free fr1 = TENFERRO__FREE__INIT;
    uint64_t one[1] = {1};
    fr1.n_tensors = 1;
    fr1.tensors = one;
    fu.body_case = TENFERRO__FRAME__BODY_FREE;
    fu.free = &fr1;
    fu.seq = ++r.seq; /* r.seq + 1, as the entry names */
    ck_assert_int_eq(th_raw_send(r.c.fd, &fu), 0);
    r.seq++; /* the entry's number */
    CK_EXPECT_RESULT(ring_reply(&r, RAW_TIMEOUT_MS), TF_ERR_UNKNOWN_HANDLE, "not live");
    raw_ring_close(&r);

    /* The daemon is unharmed. */
    tf_client *c = th_connect(&d);
    scoped_round(c);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Waits for the daemon's last word on the socket: a sequence-0 Result naming the ring. */
static void expect_last_word(raw_ring *r, const char *needle) {
    Tenferro__Frame *f = th_raw_recv(r->c.fd, RAW_TIMEOUT_MS);
    ck_assert_msg(f != NULL, "no last word after a bad ring entry (%s)", needle);
    ck_assert_uint_eq(f->seq, 0);
    ck_assert_int_eq(f->body_case, TENFERRO__FRAME__BODY_RESULT);
    CK_RESULT(f->result, TF_ERR_PROTOCOL, needle);
    tf__frame_free(f);
    ck_assert_msg(th_raw_closed(r->c.fd, RAW_TIMEOUT_MS), "the connection stayed open");
}

/* Hostile entries, one per connection; each ends only its own connection, typed. */
START_TEST(test_ring_hostile_entries) {
    th_daemon d;
    CK_DAEMON_START(&d, "--busy-poll-us", "0");
    tf_client *bystander = th_connect(&d);
    for (int kind = 0; kind < 7; kind++) {
        raw_ring r = raw_ring_open(&d);
        const char *needle = "submission ring";
        if (kind == 0) { /* random bytes as the frame */
            uint8_t junk[300];
            for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(rand() | 0x80);
            put_entry_bytes(&r, r.seq + 1, 0, junk, sizeof junk);
            needle = "does not decode";
        } else if (kind == 1) { /* req_head far beyond the area */
            __atomic_store_n(&r.c.ring->req_head, (uint64_t)r.c.req_bytes * 7 + 5, __ATOMIC_SEQ_CST);
            doorbell(&r);
            needle = "req_head";
        } else if (kind == 2) { /* an entry longer than what was written */
            tf_ring_entry e = {.bytes = 60000, .seq = r.seq + 1};
            th_ring_copy_in(r.c.req, r.c.req_bytes, 0, &e, sizeof e);
            __atomic_store_n(&r.c.ring->req_head, (uint64_t)64, __ATOMIC_SEQ_CST);
            doorbell(&r);
            needle = "does not lie within";
        } else if (kind == 3) { /* a sequence number from the past */
            Tenferro__Frame f;
            Tenferro__Submit sub;
            Tenferro__Op op, *ptr;
            uint64_t in[2] = {1, 1};
            build_add(&f, &sub, &op, &ptr, in, 2);
            f.seq = 1; /* Hello's */
            size_t len = tenferro__frame__get_packed_size(&f);
            uint8_t body[256];
            tenferro__frame__pack(&f, body);
            put_entry_bytes(&r, 1, 0, body, (uint32_t)len);
            needle = "not after";
        } else if (kind == 4) { /* the header's number is not the frame's */
            Tenferro__Frame f;
            Tenferro__Submit sub;
            Tenferro__Op op, *ptr;
            uint64_t in[2] = {1, 1};
            build_add(&f, &sub, &op, &ptr, in, 2);
            f.seq = r.seq + 5;
            size_t len = tenferro__frame__get_packed_size(&f);
            uint8_t body[256];
            tenferro__frame__pack(&f, body);
            put_entry_bytes(&r, r.seq + 1, 0, body, (uint32_t)len);
            needle = "another sequence number";
        } else if (kind == 5) { /* a reply area the client claims to have read past */
            __atomic_store_n(&r.c.ring->rep_tail, (uint64_t)1 << 40, __ATOMIC_SEQ_CST);
            Tenferro__Frame f = TENFERRO__FRAME__INIT;
            Tenferro__SessionOpen so = TENFERRO__SESSION_OPEN__INIT;
            f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
            f.session_open = &so;
            put_frame(&r, &f);
            needle = "no room for a reply";
        } else { /* a zero-length entry */
            put_entry_bytes(&r, r.seq + 1, 0, "", 0);
            needle = "does not lie within";
        }
        expect_last_word(&r, needle);
        raw_ring_close(&r);
    }
    /*
     * The connection ended over its reply held a session; it is reclaimed once
     * that connection's stream has drained, after the socket closed. Only then
     * is the domain free for the bystander's burst (the reject policy would
     * answer TF_ERR_CONTENDED before).
     */
    ck_assert_msg(th_wait_counter(&d, "sessions_reclaimed", 1, 10000),
                  "the session of the connection ended over its reply was not reclaimed");
    /* Everyone else is served as before, and the daemon still counts its clients right. */
    scoped_round(bystander);
    tf_disconnect(bystander);
    ck_assert_msg(th_wait_counter(&d, "device_bytes_live", 0, 5000), "device memory was left behind");
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * Entries the ring does not answer with a reply of their own (SessionRelease,
 * Free, StatusRequest) are refused typed in the ring, each in its turn, and
 * the ring goes on: more of them than the daemon keeps places for replies
 * (TFD_RING_OUTSTANDING, 8) do not stall it, and a Submit after them runs.
 */
START_TEST(test_ring_refuses_unanswered_kinds) {
    th_daemon d;
    CK_DAEMON_START(&d, "--busy-poll-us", "0");
    raw_ring r = raw_ring_open(&d);
    double a[16], sum[16];
    th_fill_random(TF_F64, 16, a);
    raw_upload(&r, 1, a, 16);
    for (int i = 0; i < 12; i++) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__SessionRelease rel = TENFERRO__SESSION_RELEASE__INIT;
        Tenferro__Free fr = TENFERRO__FREE__INIT;
        Tenferro__StatusRequest q = TENFERRO__STATUS_REQUEST__INIT;
        if (i % 3 == 0) {
            rel.session_id = 1;
            f.body_case = TENFERRO__FRAME__BODY_SESSION_RELEASE;
            f.session_release = &rel;
        } else if (i % 3 == 1) {
            f.body_case = TENFERRO__FRAME__BODY_FREE;
            f.free = &fr;
        } else {
            f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
            f.status_request = &q;
        }
        put_frame(&r, &f);
        Tenferro__Frame *reply = ring_reply(&r, RAW_TIMEOUT_MS);
        ck_assert_msg(reply != NULL, "entry %d (body %d) got no answer in the ring", i,
                      (int)f.body_case);
        ck_assert_uint_eq(reply->seq, f.seq);
        ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_RESULT);
        CK_RESULT(reply->result, TF_ERR_INVALID_ARGUMENT, "only Submit and SessionOpen");
        tf__frame_free(reply);
    }
    Tenferro__Frame f;
    Tenferro__Submit sub;
    Tenferro__Op op, *ptr;
    uint64_t in[2] = {1, 1};
    build_add(&f, &sub, &op, &ptr, in, 2);
    put_frame(&r, &f);
    Tenferro__Frame *reply = ring_reply(&r, RAW_TIMEOUT_MS);
    ck_assert_msg(reply != NULL, "the Submit after the refused entries got no answer");
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_RESULT);
    CK_RESULT(reply->result, TF_OK, NULL);
    tf__frame_free(reply);
    ck_assert_int_eq(raw_download(&r, 2, sum, 16), TF_OK);
    for (int i = 0; i < 16; i++) ck_assert_double_eq(sum[i], a[i] + a[i]);
    raw_ring_close(&r);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Queues `count` products x = x * t, freeing each intermediate: long work to be killed in. */
typedef struct chain_args {
    tf_client *c;
    tf_tensor t;
    int count;
} chain_args;

static tf_status square_chain(tf_view *v, void *arg) {
    chain_args *x = arg;
    tf_tensor cur = x->t;
    for (int i = 0; i < x->count; i++) {
        tf_tensor out;
        tf_status st = tf_view_matmul(v, cur, x->t, &out);
        if (st != TF_OK) return st;
        if (cur != x->t && (st = tf_tensor_free(x->c, cur)) != TF_OK) return st; /* queued */
        cur = out;
    }
    return TF_OK;
}

/*
 * A size and a count of products that keep the suite's device busy for
 * seconds, in a Submit small enough for the ring (a few thousand operations:
 * a larger one takes the socket).
 */
static void long_work(int *n, int *count) {
    const int gpu = strcmp(th_device(), "cpu") != 0;
    *n = gpu ? 4096 : 384;
    *count = 1000;
}

/* A child that opens a held session, queues long work and waits in the ring until it is killed. */
static int wait_in_ring(void *arg) {
    const th_daemon *d = arg;
    tf_client *c = NULL;
    if (tf_connect(d->socket, &c) != TF_OK) return 2;
    int n, count;
    long_work(&n, &count);
    double *a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    CHILD_CHECK(a != NULL);
    th_fill_random(TF_F64, (size_t)n * (size_t)n, a);
    int64_t shape[2] = {n, n};
    tf_tensor t;
    CHILD_STATUS(c, tf_upload(c, TF_F64, 2, shape, a, &t), TF_OK);
    tf_session *s;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    chain_args x = {c, t, count};
    CHILD_STATUS(c, tf_session_with(s, square_chain, &x), TF_OK);
    fprintf(stderr, "[child %d] waiting in the ring\n", (int)getpid());
    (void)tf_session_synchronize(s);
    pause(); /* killed here at the latest */
    return 0;
}

/*
 * A client killed while it waits for a ring reply: the daemon lets go of its
 * session and memory. A daemon killed while a client waits: the client's
 * call returns TF_ERR_DISCONNECTED, promptly.
 */
START_TEST(test_ring_kills) {
    th_daemon d;
    CK_DAEMON_START(&d, "--busy-poll-us", "0");
    pid_t child = th_spawn(wait_in_ring, &d);
    ck_assert_msg(th_wait_counter(&d, "ring_requests", 2, 10000), "the child never used the ring");
    usleep(50000);
    kill(child, SIGKILL);
    ck_assert_int_eq(th_wait(child), 128 + SIGKILL);
    ck_assert_msg(th_wait_counter(&d, "device_bytes_live", 0, 20000),
                  "a client killed mid-ring left device memory behind");
    ck_assert_int_eq(th_client_count(&d), 0);
    /* The domain is free again: another client holds a session at once. */
    tf_client *c = th_connect(&d);
    held_rounds(c, 2);

    /* Now the daemon dies while c waits for its synchronize in the ring. */
    int n, count;
    long_work(&n, &count);
    double *a = malloc(sizeof(double) * (size_t)n * (size_t)n);
    ck_assert_ptr_nonnull(a);
    th_fill_random(TF_F64, (size_t)n * (size_t)n, a);
    int64_t shape[2] = {n, n};
    tf_tensor t;
    CK_STATUS(c, tf_upload(c, TF_F64, 2, shape, a, &t), TF_OK);
    free(a);
    tf_session *s;
    CK_STATUS(c, tf_session_open(c, &s), TF_OK);
    chain_args x = {c, t, count};
    CK_STATUS(c, tf_session_with(s, square_chain, &x), TF_OK);
    pid_t killer = fork();
    if (killer == 0) {
        usleep(200000);
        kill(d.pid, SIGKILL);
        _exit(0);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tf_status st = tf_session_synchronize(s);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    th_wait(killer);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    ck_assert_msg(st == TF_ERR_DISCONNECTED, "synchronize with the daemon killed returned %s: %s",
                  tf_status_name(st), tf_client_last_error(c));
    ck_assert_msg(waited < 5.0, "the client took %.1f s to notice the daemon was gone", waited);
    tf_disconnect(c);
    th_daemon_stop(&d);
}
END_TEST

static Suite *ring_suite(void) {
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ring_and_socket_routes);
    tcase_add_test(tc, test_ring_order_with_socket);
    tcase_add_test(tc, test_ring_hostile_entries);
    tcase_add_test(tc, test_ring_refuses_unanswered_kinds);
    tcase_add_test(tc, test_ring_kills);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(ring_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
