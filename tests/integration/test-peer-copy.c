/*
 * Device-to-device copies between two daemons (tf_copy_to, docs/multi-gpu.md),
 * with two real daemons of the suite's device: on the CPU two CPU daemons, on
 * the GPU machine two daemons of cuda:0 (CUDA IPC between processes of one
 * device).
 *
 *   - every dtype, small and large, arrives bit for bit; the source stays
 *     the owner's (readable, then freeable) and nothing is left behind;
 *   - a copy is ordered after the held-session work that produces it;
 *   - across uids it is refused typed on both sides unless both daemons
 *     allow it; a process of another uid cannot pose as a peer daemon;
 *   - hostile requests (bad tokens, tokens used twice, a withdrawn offer, a
 *     wrong shape or dtype, a non-daemon listener, PeerFetch from a client)
 *     are answered typed and lose nothing;
 *   - the source daemon killed while the copy waits behind its work leaves
 *     the destination client with TF_ERR_PEER and no memory behind; the
 *     destination daemon killed leaves the source tensor free again.
 */
#include <check.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define NOBODY 65534
#define RAW_MS 20000

static void sleep_ms(int ms) { nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000L}, NULL); }

/* Uploads n fresh random elements of dtype as a vector; *host keeps them (caller frees). */
static tf_tensor upload_random(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape,
                               void **host) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
    void *v = malloc(n * tf_dtype_size(dtype));
    ck_assert_ptr_nonnull(v);
    th_fill_random(dtype, n, v);
    tf_tensor t;
    CK_STATUS(c, tf_upload(c, dtype, rank, shape, v, &t), TF_OK);
    *host = v;
    return t;
}

/* Downloads t and checks it equals want (bytes long) bit for bit. */
static void expect_bytes(tf_client *c, tf_tensor t, const void *want, size_t bytes) {
    void *got = NULL;
    size_t n = 0;
    CK_STATUS(c, tf_download(c, t, &got, &n), TF_OK);
    ck_assert_uint_eq(n, bytes);
    ck_assert_msg(memcmp(got, want, bytes) == 0, "the copy's bytes differ from the source's");
    free(got);
}

/* Every dtype, a matrix and an 8 MiB vector: exact, the source kept, nothing left behind. */
START_TEST(test_copy_exact) {
    th_daemon a, b;
    CK_DAEMON_START(&a, "--log-level", "info");
    CK_DAEMON_START(&b, "--log-level", "info");
    tf_client *ca = th_connect(&a), *cb = th_connect(&b);
    const tf_dtype dtypes[] = {TF_F32, TF_F64, TF_C64, TF_C128};
    int copies = 0;
    for (int k = 0; k < 4; k++) {
        for (int big = 0; big < 2; big++) {
            int64_t shape[2] = {37, 53};
            int rank = 2;
            if (big) {
                shape[0] = (int64_t)((8u << 20) / tf_dtype_size(dtypes[k]));
                rank = 1;
            }
            void *host;
            tf_tensor src = upload_random(ca, dtypes[k], rank, shape, &host);
            tf_tensor dst = 0;
            CK_STATUS(cb, tf_copy_to(ca, src, cb, &dst), TF_OK);
            copies++;
            size_t bytes = 0;
            CK_STATUS(cb, tf_tensor_bytes(cb, dst, &bytes), TF_OK);
            tf_dtype dt;
            int r;
            int64_t sh[TF_MAX_RANK];
            CK_STATUS(cb, tf_tensor_info(cb, dst, &dt, &r, sh), TF_OK);
            ck_assert_int_eq(dt, dtypes[k]);
            ck_assert_int_eq(r, rank);
            for (int i = 0; i < rank; i++) ck_assert_int_eq(sh[i], shape[i]);
            expect_bytes(cb, dst, host, bytes);
            /* The source is the owner's again: readable, writable by a new upload, freeable. */
            expect_bytes(ca, src, host, bytes);
            CK_STATUS(ca, tf_tensor_free(ca, src), TF_OK);
            CK_STATUS(cb, tf_tensor_free(cb, dst), TF_OK);
            free(host);
        }
    }
    ck_assert_uint_eq(th_counter(&a, "peer_copies_out"), (uint64_t)copies);
    ck_assert_uint_eq(th_counter(&b, "peer_copies_in"), (uint64_t)copies);
    ck_assert_msg(th_wait_counter(&a, "device_bytes_live", 0, 5000), "the source daemon kept memory");
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "the destination kept memory");
    /* Copying within one connection or one daemon is refused; so is a tensor the client lacks. */
    tf_tensor none = 0;
    ck_assert_int_eq(tf_copy_to(ca, 1, ca, &none), TF_ERR_INVALID_ARGUMENT);
    tf_client *ca2 = th_connect(&a);
    void *host;
    const int64_t four = 4;
    tf_tensor small = upload_random(ca, TF_F64, 1, &four, &host);
    CK_STATUS(ca2, tf_copy_to(ca, small, ca2, &none), TF_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(tf_client_last_error(ca2), "connected to this daemon") != NULL, "%s",
                  tf_client_last_error(ca2));
    expect_bytes(ca, small, host, 4 * sizeof(double)); /* the offer was withdrawn: still readable */
    CK_STATUS(ca, tf_tensor_free(ca, small), TF_OK);
    free(host);
    tf_disconnect(ca2);
    ck_assert_int_eq(tf_copy_to(ca, 999999, cb, &none), TF_ERR_UNKNOWN_HANDLE);
    tf_disconnect(ca);
    tf_disconnect(cb);
    CK_DAEMON_STOP(&a);
    CK_DAEMON_STOP(&b);
}
END_TEST

/*
 * The chain a held session queues: x = op(x, y), `steps` times (an add or a
 * matmul); the intermediates go as the chain runs (queued frees), so memory
 * stays bounded.
 */
typedef struct chain {
    tf_tensor x, y;
    int steps;
    tf_status (*op)(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);
} chain;

static tf_status run_chain(tf_view *v, void *arg) {
    chain *ch = arg;
    for (int i = 0; i < ch->steps; i++) {
        tf_tensor next;
        tf_status st = ch->op(v, ch->x, ch->y, &next);
        if (st != TF_OK) return st;
        if (i > 0 && (st = tf_tensor_free(tf_view_client(v), ch->x)) != TF_OK) return st;
        ch->x = next;
    }
    return TF_OK;
}

/* A copy of a held session's submitted (not synchronized) result carries the produced values. */
START_TEST(test_copy_after_producer) {
    th_daemon a, b;
    CK_DAEMON_START(&a, "--log-level", "info");
    CK_DAEMON_START(&b, "--log-level", "info");
    tf_client *ca = th_connect(&a), *cb = th_connect(&b);
    const int64_t n = 1 << 18;
    void *x0, *y;
    chain ch = {.steps = 200, .op = tf_view_add};
    ch.x = upload_random(ca, TF_F64, 1, &n, &x0);
    ch.y = upload_random(ca, TF_F64, 1, &n, &y);
    double *want = malloc((size_t)n * sizeof *want);
    memcpy(want, x0, (size_t)n * sizeof *want);
    for (int s = 0; s < ch.steps; s++)
        for (int64_t i = 0; i < n; i++) want[i] += ((double *)y)[i];
    tf_session *s;
    CK_STATUS(ca, tf_session_open(ca, &s), TF_OK);
    CK_STATUS(ca, tf_session_with(s, run_chain, &ch), TF_OK);
    CK_STATUS(ca, tf_session_submit(s), TF_OK);
    tf_tensor dst;
    CK_STATUS(cb, tf_copy_to(ca, ch.x, cb, &dst), TF_OK);
    expect_bytes(cb, dst, want, (size_t)n * sizeof *want);
    CK_STATUS(ca, tf_session_synchronize(s), TF_OK);
    CK_STATUS(ca, tf_session_close(s, NULL), TF_OK);
    free(want);
    free(x0);
    free(y);
    tf_disconnect(ca);
    tf_disconnect(cb);
    CK_DAEMON_STOP(&a);
    CK_DAEMON_STOP(&b);
}
END_TEST

/* Drops to uid/gid in a child, after its first connection. */
static int become(uid_t uid, gid_t gid) {
    return setgroups(0, NULL) == 0 && setgid(gid) == 0 && setuid(uid) == 0;
}

/*
 * In a child: connects to A as root, then becomes nobody and connects to B,
 * and copies a fresh tensor from A to B; exits 0 when the copy's status is
 * `want` (and, on success, the bytes are exact).
 */
static int cross_uid_copy(const th_daemon *a, const th_daemon *b, tf_status want) {
    tf_client *ca = NULL, *cb = NULL;
    if (tf_connect(a->socket, &ca) != TF_OK || !become(NOBODY, NOBODY)) return 2;
    if (tf_connect(b->socket, &cb) != TF_OK) {
        fprintf(stderr, "nobody cannot connect: %s\n", tf_client_last_error(cb));
        return 3;
    }
    const int64_t n = 1000;
    double v[1000];
    th_fill_random(TF_F64, (size_t)n, v);
    tf_tensor src, dst = 0;
    CHILD_STATUS(ca, tf_upload(ca, TF_F64, 1, &n, v, &src), TF_OK);
    tf_status st = tf_copy_to(ca, src, cb, &dst);
    if (st != want) {
        fprintf(stderr, "cross-uid copy returned %s, expected %s: %s\n", tf_status_name(st),
                tf_status_name(want), tf_client_last_error(cb));
        return 1;
    }
    if (st == TF_OK) {
        void *got = NULL;
        size_t bytes = 0;
        CHILD_STATUS(cb, tf_download(cb, dst, &got, &bytes), TF_OK);
        CHILD_CHECK(bytes == sizeof v && memcmp(got, v, sizeof v) == 0);
        free(got);
    } else {
        CHILD_CHECK(strstr(tf_client_last_error(cb), "allow_cross_uid") != NULL);
    }
    /* Either way the source is the owner's again at once. */
    void *back = NULL;
    size_t bytes = 0;
    CHILD_STATUS(ca, tf_download(ca, src, &back, &bytes), TF_OK);
    CHILD_CHECK(bytes == sizeof v && memcmp(back, v, sizeof v) == 0);
    free(back);
    CHILD_STATUS(ca, tf_tensor_free(ca, src), TF_OK);
    tf_disconnect(ca);
    tf_disconnect(cb);
    return 0;
}

static int refused_child(void *arg) {
    const th_daemon *d = arg;
    return cross_uid_copy(&d[0], &d[1], TF_ERR_PERMISSION);
}

static int allowed_child(void *arg) {
    const th_daemon *d = arg;
    return cross_uid_copy(&d[0], &d[1], TF_OK);
}

/* Says Hello as a peer daemon on a raw connection; returns the answer (caller frees) or NULL. */
static Tenferro__Frame *raw_peer_hello(int fd) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.peer_daemon = 1;
    f.seq = 1;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &hello;
    return th_raw_send(fd, &f) == 0 ? th_raw_recv(fd, RAW_MS) : NULL;
}

/* A process of another uid saying Hello as a peer daemon is refused and closed. */
static int fake_peer_child(void *arg) {
    const th_daemon *a = arg;
    if (!become(NOBODY, NOBODY)) return 2;
    int fd = th_raw_connect(a);
    CHILD_CHECK(fd >= 0);
    Tenferro__Frame *reply = raw_peer_hello(fd);
    char why[512];
    int bad = th_reply_problem(reply, TF_ERR_PERMISSION, "peer daemon", why, sizeof why);
    if (bad) fprintf(stderr, "%s\n", why);
    tf__frame_free(reply);
    CHILD_CHECK(!bad);
    CHILD_CHECK(th_raw_closed(fd, RAW_MS));
    close(fd);
    return 0;
}

/* Across uids: refused typed unless both daemons allow it; nobody cannot pose as a peer daemon. */
START_TEST(test_copy_across_uids) {
    if (geteuid() != 0) {
        fprintf(stderr, "test_copy_across_uids: not root, so no second uid to test with: skipped\n");
        return;
    }
    th_daemon d[2];
    CK_DAEMON_START(&d[0], "--socket-mode", "0666");
    CK_DAEMON_START(&d[1], "--socket-mode", "0666");
    ck_assert_int_eq(th_wait(th_spawn(refused_child, d)), 0);
    ck_assert_int_eq(th_wait(th_spawn(fake_peer_child, &d[0])), 0);
    ck_assert_uint_eq(th_counter(&d[0], "peer_copies_out"), 0);
    ck_assert_msg(th_wait_counter(&d[1], "device_bytes_live", 0, 5000), "the refused copy kept memory");
    CK_DAEMON_STOP(&d[0]);
    CK_DAEMON_STOP(&d[1]);
    CK_DAEMON_START(&d[0], "--socket-mode", "0666", "--peers-allow-cross-uid");
    CK_DAEMON_START(&d[1], "--socket-mode", "0666", "--peers-allow-cross-uid");
    ck_assert_int_eq(th_wait(th_spawn(allowed_child, d)), 0);
    CK_DAEMON_STOP(&d[0]);
    CK_DAEMON_STOP(&d[1]);
}
END_TEST

/* ---- raw frames ---- */

/* A raw connection past its Hello. */
static int raw_client(const th_daemon *d) {
    int fd = th_raw_connect(d);
    ck_assert_int_ge(fd, 0);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert_ptr_nonnull(hello);
    tf__frame_free(hello);
    return fd;
}

/* Sends request f as seq and returns the reply. */
static Tenferro__Frame *raw_call(int fd, Tenferro__Frame *f, uint64_t seq) {
    f->seq = seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *reply = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(reply != NULL, "no answer to request %llu", (unsigned long long)seq);
    ck_assert_uint_eq(reply->seq, seq);
    return reply;
}

/* Creates tensor id (f64, n elements, zeros) on a raw connection. */
static void raw_create(int fd, uint64_t seq, uint64_t id, int64_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = id;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = 1;
    up.shape = &n;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    CK_EXPECT_RESULT(raw_call(fd, &f, seq), TF_OK, NULL);
}

/* Offers tensor id on a raw connection; the token goes to token (33 bytes). */
static void raw_offer(int fd, uint64_t seq, uint64_t id, char *token) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__CopyOffer offer = TENFERRO__COPY_OFFER__INIT;
    offer.tensor = id;
    f.body_case = TENFERRO__FRAME__BODY_COPY_OFFER;
    f.copy_offer = &offer;
    Tenferro__Frame *reply = raw_call(fd, &f, seq);
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_COPY_OFFER_REPLY);
    CK_RESULT(reply->copy_offer_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(strlen(reply->copy_offer_reply->token), 32);
    memcpy(token, reply->copy_offer_reply->token, 33);
    tf__frame_free(reply);
}

/* A CopyTake on a raw connection, answered by the returned frame. */
static Tenferro__Frame *raw_take(int fd, uint64_t seq, const char *token, const char *socket,
                                 uint64_t id, uint32_t dtype, int64_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__CopyTake take = TENFERRO__COPY_TAKE__INIT;
    take.token = (char *)token;
    take.source_socket = (char *)socket;
    take.tensor = id;
    take.dtype = dtype;
    take.n_shape = 1;
    take.shape = &n;
    f.body_case = TENFERRO__FRAME__BODY_COPY_TAKE;
    f.copy_take = &take;
    return raw_call(fd, &f, seq);
}

/*
 * Withdraws an offer as tf_copy_to does after every take: answered once the
 * other daemon has let the tensor go, so it is the owner's again.
 */
static void raw_withdraw(int fd, uint64_t seq, const char *token) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__CopyOffer w = TENFERRO__COPY_OFFER__INIT;
    w.withdraw_token = (char *)token;
    f.body_case = TENFERRO__FRAME__BODY_COPY_OFFER;
    f.copy_offer = &w;
    CK_EXPECT_RESULT(raw_call(fd, &f, seq), TF_OK, NULL);
}

/* In a child of another uid: listens on path and accepts whoever connects, saying nothing. */
static int impostor_child(void *arg) {
    const char *path = arg;
    if (!become(NOBODY, NOBODY)) return 2;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    CHILD_CHECK(s >= 0 && bind(s, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(s, 4) == 0);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) return 0;
        sleep_ms(100);
        close(c);
    }
}

/* Bad tokens, reused and withdrawn offers, wrong shapes, a non-daemon source: typed, nothing lost. */
START_TEST(test_copy_hostile) {
    th_daemon a, b;
    CK_DAEMON_START(&a, "--log-level", "info", "--socket-mode", "0666");
    CK_DAEMON_START(&b, "--log-level", "info");
    int fa = raw_client(&a), fb = raw_client(&b);
    uint64_t sa = 10, sb = 10;
    raw_create(fa, sa++, 1, 1000);
    char token[33];

    /* A token nobody offered. */
    CK_EXPECT_RESULT(raw_take(fb, sb++, "0123456789abcdef0123456789abcdef", a.socket, 5, TF_F64, 1000),
                     TF_ERR_UNKNOWN_HANDLE, "no such offer");
    /* Source sockets that are not absolute, or where nothing listens. */
    raw_offer(fa, sa++, 1, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, "relative.sock", 5, TF_F64, 1000),
                     TF_ERR_INVALID_ARGUMENT, "absolute");
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, "/nonexistent/tenferrod.sock", 5, TF_F64, 1000),
                     TF_ERR_PEER, "cannot connect");
    /* The wrong dtype and the wrong shape: refused, and the lend ends with the refusal. */
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 5, TF_F32, 1000), TF_ERR_DTYPE, "f64");
    raw_withdraw(fa, sa++, token);
    raw_offer(fa, sa++, 1, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 5, TF_F64, 999), TF_ERR_SHAPE, "shape");
    raw_withdraw(fa, sa++, token);
    /* A good take, then the same token again. */
    raw_offer(fa, sa++, 1, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 5, TF_F64, 1000), TF_OK, NULL);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 6, TF_F64, 1000), TF_ERR_UNKNOWN_HANDLE,
                     "no such offer");
    raw_withdraw(fa, sa++, token);
    /* The new tensor's id is taken now. */
    raw_offer(fa, sa++, 1, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 5, TF_F64, 1000), TF_ERR_INVALID_ARGUMENT,
                     "already in use");
    /* A withdrawn offer cannot be taken; withdrawing it twice is harmless. */
    raw_withdraw(fa, sa++, token);
    raw_withdraw(fa, sa++, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 7, TF_F64, 1000), TF_ERR_UNKNOWN_HANDLE,
                     "no such offer");
    /* A client cannot fetch an offer itself: PeerFetch is for peer daemons. */
    raw_offer(fa, sa++, 1, token);
    Tenferro__Frame pf = TENFERRO__FRAME__INIT;
    Tenferro__PeerFetch fetch = TENFERRO__PEER_FETCH__INIT;
    fetch.token = token;
    pf.body_case = TENFERRO__FRAME__BODY_PEER_FETCH;
    pf.peer_fetch = &fetch;
    int fc = raw_client(&a);
    int got_fd = -1;
    pf.seq = 3;
    ck_assert_int_eq(th_raw_send(fc, &pf), 0);
    Tenferro__Frame *reply = th_raw_recv_fd(fc, RAW_MS, &got_fd);
    ck_assert_ptr_nonnull(reply);
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_PEER_FETCH_REPLY);
    CK_RESULT(reply->peer_fetch_reply->result, TF_ERR_PERMISSION, "peer daemon");
    ck_assert_int_eq(got_fd, -1);
    tf__frame_free(reply);
    close(fc);
    /* A peer daemon's connection fetches offers and does nothing else. */
    int fp = th_raw_connect(&a);
    ck_assert_int_ge(fp, 0);
    reply = raw_peer_hello(fp);
    ck_assert_ptr_nonnull(reply);
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_HELLO_REPLY);
    tf__frame_free(reply);
    Tenferro__Frame up = TENFERRO__FRAME__INIT;
    Tenferro__Upload upload = TENFERRO__UPLOAD__INIT;
    int64_t len = 4;
    upload.tensor = 1;
    upload.create = 1;
    upload.dtype = TF_F64;
    upload.n_shape = 1;
    upload.shape = &len;
    up.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    up.upload = &upload;
    CK_EXPECT_RESULT(raw_call(fp, &up, 2), TF_ERR_PERMISSION, "only fetches offers");
    close(fp);
    /* The offering connection leaves: its untaken offer goes with it. */
    close(fa);
    ck_assert_msg(th_wait_counter(&a, "device_bytes_live", 0, 5000), "the closed offer kept memory");
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 8, TF_F64, 1000), TF_ERR_UNKNOWN_HANDLE,
                     "no such offer");
    /* A listener of another uid is not a daemon: the take refuses to talk to it. */
    if (geteuid() == 0) {
        char path[128];
        snprintf(path, sizeof path, "%s.impostor", b.socket);
        pid_t imp = th_spawn(impostor_child, path);
        for (int i = 0; i < 200 && access(path, F_OK) != 0; i++) sleep_ms(10);
        CK_EXPECT_RESULT(raw_take(fb, sb++, "0123456789abcdef0123456789abcdef", path, 9, TF_F64, 10),
                         TF_ERR_PERMISSION, "not by a tenferrod");
        kill(imp, SIGKILL);
        th_wait(imp);
        unlink(path);
    }
    /* B holds exactly the one tensor the good take made, and serves on. */
    ck_assert_uint_eq(th_counter(&b, "peer_copies_in"), 1);
    ck_assert_uint_ge(th_counter(&b, "device_bytes_live"), 8000);
    ck_assert_uint_le(th_counter(&b, "device_bytes_live"), 16384);
    close(fb);
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "B kept memory");
    CK_DAEMON_STOP(&a);
    CK_DAEMON_STOP(&b);
}
END_TEST

/*
 * Queues a held chain of matmuls on ca that runs for seconds on the suite's
 * device; returns its result (submitted, not synchronized).
 */
static tf_tensor queue_long_work(tf_client *ca, tf_session **s) {
    const int gpu = strncmp(th_device(), "cuda", 4) == 0;
    const int64_t shape[2] = {gpu ? 8192 : 1024, gpu ? 8192 : 1024};
    void *x, *m;
    chain ch = {.steps = gpu ? 120 : 80, .op = tf_view_matmul};
    ch.x = upload_random(ca, TF_F64, 2, shape, &x);
    ch.y = upload_random(ca, TF_F64, 2, shape, &m);
    free(x);
    free(m);
    CK_STATUS(ca, tf_session_open(ca, s), TF_OK);
    CK_STATUS(ca, tf_session_with(*s, run_chain, &ch), TF_OK);
    CK_STATUS(ca, tf_session_submit(*s), TF_OK);
    return ch.x;
}

typedef struct kill_args {
    const th_daemon *victim;
    int after_ms;
} kill_args;

static int killer(void *arg) {
    kill_args *k = arg;
    sleep_ms(k->after_ms);
    kill(k->victim->pid, SIGKILL);
    return 0;
}

/*
 * Starts daemons a and b, queues long work on a client of a and copies its
 * result to a client of b while b (kill_b) or a is killed 300 ms in;
 * returns the copy's status once the killed daemon is reaped.
 */
static tf_status copy_while_killing(th_daemon *a, th_daemon *b, int kill_b, tf_client **ca,
                                    tf_client **cb, tf_session **s, tf_tensor *t) {
    const th_daemon *victim = kill_b ? b : a;
    CK_DAEMON_START(a, "--log-level", "info");
    CK_DAEMON_START(b, "--log-level", "info");
    *ca = th_connect(a);
    *cb = th_connect(b);
    *t = queue_long_work(*ca, s);
    kill_args k = {victim, 300};
    pid_t kp = th_spawn(killer, &k);
    tf_tensor dst = 0;
    tf_status st = tf_copy_to(*ca, *t, *cb, &dst);
    ck_assert_int_eq(th_wait(kp), 0);
    waitpid(victim->pid, NULL, 0);
    return st;
}

/* The source daemon killed while the copy waits behind its work: TF_ERR_PEER, nothing left on B. */
START_TEST(test_source_killed_mid_copy) {
    th_daemon a, b;
    tf_client *ca, *cb;
    tf_session *s;
    tf_tensor t;
    tf_status st = copy_while_killing(&a, &b, 0, &ca, &cb, &s, &t);
    ck_assert_msg(st == TF_ERR_PEER || st == TF_ERR_DISCONNECTED,
                  "copy from a killed daemon returned %s: %s", tf_status_name(st),
                  tf_client_last_error(cb));
    if (st == TF_ERR_PEER)
        ck_assert_msg(strstr(tf_client_last_error(cb), "closed the connection") != NULL, "%s",
                      tf_client_last_error(cb));
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "the failed take kept memory");
    ck_assert_uint_eq(th_counter(&b, "peer_copies_failed"), st == TF_ERR_PEER ? 1 : 0);
    /* B serves on: the same client uploads and reads back. */
    const int64_t n = 100;
    double v[100], *back = NULL;
    size_t bytes;
    th_fill_random(TF_F64, 100, v);
    tf_tensor u;
    CK_STATUS(cb, tf_upload(cb, TF_F64, 1, &n, v, &u), TF_OK);
    CK_STATUS(cb, tf_download(cb, u, (void **)&back, &bytes), TF_OK);
    ck_assert(memcmp(back, v, sizeof v) == 0);
    free(back);
    tf_session_release(s);
    tf_disconnect(ca);
    tf_disconnect(cb);
    CK_DAEMON_STOP(&b);
}
END_TEST

/* The destination daemon killed mid-copy: the client hears TF_ERR_DISCONNECTED, the source is free. */
START_TEST(test_destination_killed_mid_copy) {
    th_daemon a, b;
    tf_client *ca, *cb;
    tf_session *s;
    tf_tensor t;
    tf_status st = copy_while_killing(&a, &b, 1, &ca, &cb, &s, &t);
    ck_assert_msg(st == TF_ERR_DISCONNECTED, "copy into a killed daemon returned %s: %s",
                  tf_status_name(st), tf_client_last_error(cb));
    /* The offer came back: the result is the owner's to read and free. */
    CK_STATUS(ca, tf_session_synchronize(s), TF_OK);
    CK_STATUS(ca, tf_session_close(s, NULL), TF_OK);
    void *got = NULL;
    size_t bytes = 0;
    CK_STATUS(ca, tf_download(ca, t, &got, &bytes), TF_OK);
    free(got);
    tf_disconnect(ca);
    ck_assert_msg(th_wait_counter(&a, "device_bytes_live", 0, 10000), "the source kept memory");
    tf_disconnect(cb);
    CK_DAEMON_STOP(&a);
}
END_TEST

/* In a child: asks B for a copy from `arg` (a listener that never answers), then waits to be killed. */
static int stalled_taker(void *arg) {
    const char **paths = arg; /* B's socket, the silent listener's */
    th_daemon b = {0};
    snprintf(b.socket, sizeof b.socket, "%s", paths[0]);
    int fd = th_raw_connect(&b);
    CHILD_CHECK(fd >= 0);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    CHILD_CHECK(hello != NULL);
    tf__frame_free(hello);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__CopyTake take = TENFERRO__COPY_TAKE__INIT;
    int64_t n = 1000;
    take.token = "0123456789abcdef0123456789abcdef";
    take.source_socket = (char *)paths[1];
    take.tensor = 1;
    take.dtype = TF_F64;
    take.n_shape = 1;
    take.shape = &n;
    f.seq = 2;
    f.body_case = TENFERRO__FRAME__BODY_COPY_TAKE;
    f.copy_take = &take;
    CHILD_CHECK(th_raw_send(fd, &f) == 0);
    for (;;) pause();
}

/*
 * A client that leaves while its daemon waits for a source daemon that never
 * answers: the daemon gives the fetch up at once, so it frees the connection
 * and still stops promptly at SIGTERM (not after [peers] copy_timeout_ms).
 */
START_TEST(test_taker_leaves_mid_fetch) {
    th_daemon b;
    CK_DAEMON_START(&b, "--log-level", "info");
    char silent[100];
    snprintf(silent, sizeof silent, "%.90s.silent", b.socket);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", silent);
    ck_assert(ls >= 0 && bind(ls, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(ls, 4) == 0);
    const char *paths[2] = {b.socket, silent};
    pid_t taker = th_spawn(stalled_taker, paths);
    /* The take has made its tensor and waits for the silent listener. */
    int made = 0;
    for (int i = 0; i < 500 && !made; i++) {
        made = th_counter(&b, "device_bytes_live") >= 8000;
        if (!made) sleep_ms(10);
    }
    ck_assert_msg(made, "the take never made its tensor");
    kill(taker, SIGKILL);
    th_wait(taker);
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "the take kept memory");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CK_DAEMON_STOP(&b);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 5);
    close(ls);
    unlink(silent);
}
END_TEST

static Suite *peer_copy_suite(void) {
    Suite *s = suite_create("peer-copy");
    TCase *tc = tcase_create("peer-copy");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_copy_exact);
    tcase_add_test(tc, test_copy_after_producer);
    tcase_add_test(tc, test_copy_across_uids);
    tcase_add_test(tc, test_copy_hostile);
    tcase_add_test(tc, test_source_killed_mid_copy);
    tcase_add_test(tc, test_destination_killed_mid_copy);
    tcase_add_test(tc, test_taker_leaves_mid_fetch);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(peer_copy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
