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
 *     destination daemon killed leaves the source tensor free again;
 *   - a take never waits past its deadline, its client or a SIGTERM, not
 *     even for a listener whose backlog is full (take-deadline);
 *   - a take reaches only a tenferrod socket of the daemon's runtime
 *     directory, everything else refused alike before any connect, and what
 *     answers there as no tenferrod tells the client nothing (take-targets);
 *   - takes are bounded per uid, and a peer daemon's connection counts for
 *     the client that asked for the copy, so one uid's copies cannot keep
 *     root out of the offering daemon (take-limits).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define NOBODY 65534
#define RAW_MS 20000

/* Uploads n fresh random elements of dtype as a vector; *host keeps them (caller frees). */
static tf_tensor upload_random(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape,
                               void **host) {
    tf_tensor t;
    CK_STATUS(c, th_upload_random(c, dtype, rank, shape, host, &t), TF_OK);
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

/*
 * In a child: connects to A as root, then becomes nobody and connects to B,
 * and copies a fresh tensor from A to B; exits 0 when the copy's status is
 * `want` (and, on success, the bytes are exact).
 */
static int cross_uid_copy(const th_daemon *a, const th_daemon *b, tf_status want) {
    tf_client *ca = NULL, *cb = NULL;
    if (tf_connect(a->socket, &ca) != TF_OK || !th_become(NOBODY, NOBODY)) return 2;
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

/* A process of another uid saying Hello as a peer daemon is refused and closed. */
static int fake_peer_child(void *arg) {
    const th_daemon *a = arg;
    if (!th_become(NOBODY, NOBODY)) return 2;
    int fd = th_raw_connect(a);
    CHILD_CHECK(fd >= 0);
    Tenferro__Frame *reply = th_raw_peer_hello(fd, RAW_MS);
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
    int fd = th_raw_open(d, "raw-test", 1, NULL);
    ck_assert_int_ge(fd, 0);
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
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 1, TF_F64, 1, &n, 0, NULL, 0);
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
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    /* Bound as root (the runtime directory is root's), listening as nobody: the uid it shows. */
    CHILD_CHECK(s >= 0 && bind(s, (struct sockaddr *)&addr, sizeof addr) == 0);
    if (!th_become(NOBODY, NOBODY)) return 2;
    CHILD_CHECK(listen(s, 4) == 0);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) return 0;
        th_sleep_ms(100);
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
    /* Source sockets outside the runtime directory, or where nothing listens. */
    raw_offer(fa, sa++, 1, token);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, "relative.sock", 5, TF_F64, 1000),
                     TF_ERR_INVALID_ARGUMENT, "runtime directory");
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, "/nonexistent/tenferrod.sock", 5, TF_F64, 1000),
                     TF_ERR_INVALID_ARGUMENT, "runtime directory");
    char nobody_there[160];
    snprintf(nobody_there, sizeof nobody_there, "%s/tenferrod-absent.sock", th_runtime_dir());
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, nobody_there, 5, TF_F64, 1000), TF_ERR_PEER,
                     "no tenferrod answered at tenferrod-absent.sock");
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
    reply = th_raw_peer_hello(fp, RAW_MS);
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
    /* It fetches for the uid its Hello named, no other: the offer stays untaken. */
    fetch.requester_uid = 12345;
    pf.seq = 3;
    ck_assert_int_eq(th_raw_send(fp, &pf), 0);
    reply = th_raw_recv_fd(fp, RAW_MS, &got_fd);
    ck_assert_ptr_nonnull(reply);
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_PEER_FETCH_REPLY);
    CK_RESULT(reply->peer_fetch_reply->result, TF_ERR_PERMISSION, "asking_uid");
    ck_assert_int_eq(got_fd, -1);
    tf__frame_free(reply);
    close(fp);
    /* The offering connection leaves: its untaken offer goes with it. */
    close(fa);
    ck_assert_msg(th_wait_counter(&a, "device_bytes_live", 0, 5000), "the closed offer kept memory");
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, a.socket, 8, TF_F64, 1000), TF_ERR_UNKNOWN_HANDLE,
                     "no such offer");
    /*
     * A listener of another uid is not a daemon: the take refuses to talk to
     * it, and the client is not told whose it is.
     */
    if (geteuid() == 0) {
        char path[128];
        snprintf(path, sizeof path, "%s/tenferrod-impostor.sock", th_runtime_dir());
        pid_t imp = th_spawn(impostor_child, path);
        for (int i = 0; i < 200 && access(path, F_OK) != 0; i++) th_sleep_ms(10);
        reply = raw_take(fb, sb++, "0123456789abcdef0123456789abcdef", path, 9, TF_F64, 10);
        ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_RESULT);
        ck_assert_msg(strstr(reply->result->message, "65534") == NULL, "%s", reply->result->message);
        CK_EXPECT_RESULT(reply, TF_ERR_PEER, "no tenferrod answered at tenferrod-impostor.sock");
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
    th_sleep_ms(k->after_ms);
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
    th_die_with_parent(); /* gone with the test, whatever becomes of it */
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
    snprintf(silent, sizeof silent, "%.70s/tenferrod-silent.sock", th_runtime_dir());
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
        if (!made) th_sleep_ms(10);
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

/* ---- what a take may reach, and how long it may wait ---- */

/*
 * A listener at path of the runtime directory whose backlog (listen(fd, 0))
 * is full: the fds of the connects that filled it go to fill[] (*n of them).
 * A blocking connect to it would sleep until someone accepts.
 */
static int full_listener(const char *path, int *fill, int *n) {
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    unlink(path);
    ck_assert(ls >= 0 && bind(ls, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(ls, 0) == 0);
    *n = 0;
    for (int i = 0; i < 16; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        ck_assert_int_ge(fd, 0);
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            ck_assert_msg(errno == EAGAIN, "filling the backlog: %s", strerror(errno));
            close(fd);
            return ls;
        }
        fill[(*n)++] = fd;
    }
    ck_abort_msg("the backlog of %s never filled", path);
    return -1;
}

/* Closes a full_listener and what filled it. */
static void close_full_listener(int ls, const char *path, int *fill, int n) {
    for (int i = 0; i < n; i++) close(fill[i]);
    close(ls);
    unlink(path);
}

/* The clients of d's status report with a take in progress, or -1 without a report. */
static int takes_in_status(const th_daemon *d) {
    Tenferro__Frame *r = th_status_report(d);
    if (!r) return -1;
    int n = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++) n += r->status_reply->clients[i]->takes;
    tf__frame_free(r);
    return n;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A take from a listener whose backlog is full ends at [peers] copy_timeout_ms, typed. */
START_TEST(test_take_full_backlog_times_out) {
    th_daemon b;
    CK_DAEMON_START(&b, "--peers-copy-timeout-ms", "1500");
    char full[128];
    snprintf(full, sizeof full, "%s/tenferrod-full.sock", th_runtime_dir());
    int fill[16], n_fill;
    int ls = full_listener(full, fill, &n_fill);
    int fb = raw_client(&b);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CK_EXPECT_RESULT(raw_take(fb, 2, "0123456789abcdef0123456789abcdef", full, 5, TF_F64, 1000),
                     TF_ERR_TIMEOUT, "copy_timeout_ms");
    const double took = seconds_since(&t0);
    ck_assert_msg(took >= 1.4 && took < 6, "the take ended after %.2f s, not at its 1.5 s deadline",
                  took);
    ck_assert_uint_eq(th_counter(&b, "peer_copies_failed"), 1);
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "the take kept its tensor");
    /* The connection serves on. */
    raw_create(fb, 3, 5, 1000);
    close(fb);
    CK_DAEMON_STOP(&b);
    close_full_listener(ls, full, fill, n_fill);
}
END_TEST

/*
 * A client killed while its daemon connects to a listener that never takes
 * the connection: its connection, tensor and fetch thread go within moments
 * (not at [peers] copy_timeout_ms), and a SIGTERM meanwhile ends the daemon
 * promptly and cleanly.
 */
START_TEST(test_taker_killed_mid_connect) {
    th_daemon b;
    CK_DAEMON_START(&b, "--log-level", "info");
    char full[128];
    snprintf(full, sizeof full, "%s/tenferrod-full.sock", th_runtime_dir());
    int fill[16], n_fill;
    int ls = full_listener(full, fill, &n_fill);
    const int clients = th_client_count(&b), threads = th_proc_entries(b.pid, "task");
    ck_assert_int_gt(threads, 0);
    const char *paths[2] = {b.socket, full};
    for (int round = 0; round < 2; round++) {
        pid_t taker = th_spawn(stalled_taker, paths);
        int made = 0;
        for (int i = 0; i < 500 && !made; i++) {
            made = th_counter(&b, "device_bytes_live") >= 8000 && takes_in_status(&b) == 1;
            if (!made) th_sleep_ms(10);
        }
        ck_assert_msg(made, "the take never made its tensor");
        ck_assert_int_eq(th_proc_entries(b.pid, "task"), threads + 1); /* its fetch thread */
        if (round == 1) {
            /* SIGTERM while the fetch still waits for the listener. */
            struct timespec t0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            kill(b.pid, SIGTERM);
            int rc = th_daemon_wait(&b, 5000);
            if (rc == -1) {
                kill(b.pid, SIGKILL);
                th_wait(b.pid);
            }
            ck_assert_msg(rc == 0, "tenferrod at SIGTERM: status %d after %.1f s", rc,
                          seconds_since(&t0));
            kill(taker, SIGKILL);
            th_wait(taker);
            break;
        }
        kill(taker, SIGKILL);
        th_wait(taker);
        int back = 0;
        for (int i = 0; i < 500 && !back; i++) {
            back = th_client_count(&b) == clients && th_counter(&b, "device_bytes_live") == 0 &&
                   th_proc_entries(b.pid, "task") == threads;
            if (!back) th_sleep_ms(10);
        }
        ck_assert_msg(back, "after the taker died: %d clients (%d before), %llu device bytes, %d "
                            "threads (%d before)",
                      th_client_count(&b), clients,
                      (unsigned long long)th_counter(&b, "device_bytes_live"), th_proc_entries(b.pid, "task"),
                      threads);
    }
    unlink(b.socket);
    close_full_listener(ls, full, fill, n_fill);
}
END_TEST

/* In a child: a listener at `arg` that answers whoever connects with `garbage` bytes, then waits. */
typedef struct garbage_args {
    const char *path;
    const char *bytes;
    size_t len;
} garbage_args;

static int garbage_child(void *arg) {
    const garbage_args *g = arg;
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", g->path);
    CHILD_CHECK(s >= 0 && bind(s, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(s, 4) == 0);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) return 0;
        if (write(c, g->bytes, g->len) != (ssize_t)g->len) return 1;
        th_sleep_ms(3000);
        close(c);
    }
}

/* A connection waiting on listener ls, accepted (the caller closes it), or -1 (ls is left non-blocking). */
static int accept_waiting(int ls) {
    fcntl(ls, F_SETFL, O_NONBLOCK);
    return accept(ls, NULL, NULL);
}

/* A listening socket at path (made afresh). */
static int listener_at(const char *path) {
    int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    unlink(path);
    ck_assert(ls >= 0 && bind(ls, (struct sockaddr *)&addr, sizeof addr) == 0 && listen(ls, 8) == 0);
    return ls;
}

/* The message of a take's refusal (caller frees), its status checked. */
static char *take_refusal(int fb, uint64_t seq, const char *token, const char *socket,
                          tf_status want) {
    Tenferro__Frame *reply = raw_take(fb, seq, token, socket, 5, TF_F64, 1000);
    ck_assert_int_eq(reply->body_case, TENFERRO__FRAME__BODY_RESULT);
    ck_assert_msg(reply->result->status == (uint32_t)want, "a take from \"%s\": %s (%s), expected %s",
                  socket, tf_status_name((tf_status)reply->result->status), reply->result->message,
                  tf_status_name(want));
    char *msg = strdup(reply->result->message);
    tf__frame_free(reply);
    return msg;
}

/* msg with every occurrence of name replaced by "NAME" (caller frees). */
static char *without_name(const char *msg, const char *name) {
    char *out = calloc(1, strlen(msg) + 1);
    size_t n = 0;
    for (const char *p = msg; *p;) {
        if (strncmp(p, name, strlen(name)) == 0) {
            memcpy(out + n, "NAME", 4);
            n += 4;
            p += strlen(name);
        } else {
            out[n++] = *p++;
        }
    }
    return out;
}

/*
 * A take reaches only a tenferrod socket of the daemon's runtime directory:
 * every other path is refused alike before anything connects to it; what
 * cannot be reached there, or answers as no tenferrod, is one generic
 * error with no detail (the details are in the log); a device name and a
 * path in the directory's other spellings reach the daemon.
 */
START_TEST(test_take_reaches_runtime_dir_only) {
    th_daemon a, b;
    CK_DAEMON_START(&a, "--log-level", "info");
    /* At the harness's debug level: the reasons of failures are logged. */
    ck_assert_msg(th_daemon_start(&b, (char *)NULL) == 0, "tenferrod did not start (log %s)",
                  b.log_path);
    const char *dir = th_runtime_dir();
    const char *a_file = strrchr(a.socket, '/') + 1;
    int fa = raw_client(&a), fb = raw_client(&b);
    uint64_t sa = 10, sb = 10;
    raw_create(fa, sa++, 1, 1000);
    char token[33];
    raw_offer(fa, sa++, 1, token);

    /* Decoys: a daemon-named listener in another directory, a listener of another name here. */
    char other_dir[96], other[160], decoy[160], link_dir[96], via_link[200], dotdot[300],
        dotdot2[300], nested[200], dot_name[200], slash_name[200];
    snprintf(other_dir, sizeof other_dir, "%s-other", dir);
    ck_assert(mkdir(other_dir, 0700) == 0 || errno == EEXIST);
    snprintf(other, sizeof other, "%s/%s", other_dir, a_file);
    snprintf(decoy, sizeof decoy, "%s/decoy.sock", dir);
    int other_ls = listener_at(other), decoy_ls = listener_at(decoy);
    snprintf(link_dir, sizeof link_dir, "%s-link", dir);
    unlink(link_dir);
    ck_assert(symlink(dir, link_dir) == 0);
    snprintf(via_link, sizeof via_link, "%s/%s", link_dir, a_file);       /* reaches A by a link */
    snprintf(dotdot, sizeof dotdot, "%s/../%s/%s", dir, strrchr(dir, '/') + 1, a_file);
    snprintf(dotdot2, sizeof dotdot2, "%s/x/../%s", dir, a_file);
    snprintf(nested, sizeof nested, "%s/sub/%s", dir, a_file);
    snprintf(dot_name, sizeof dot_name, "%s/tenferrod-..sock", dir);
    snprintf(slash_name, sizeof slash_name, "%s/tenferrod-%s", dir, "a/b.sock");
    const char *refused[] = {"/root/.bashrc", "/nonexistent-dir/tenferrod-1.sock",
                             "/root/.bashrc/x", "relative.sock", a_file, "./tenferrod-1.sock",
                             "", "/", other, decoy, via_link, dotdot, dotdot2, nested, dot_name,
                             slash_name, "cuda:x", "/tmp/tenferrod-1.sock"};
    char *first = NULL;
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char *msg = take_refusal(fb, sb++, token, refused[i], TF_ERR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(msg, "runtime directory") != NULL, "%s", msg);
        if (!first)
            first = msg;
        else {
            ck_assert_msg(strcmp(msg, first) == 0, "\"%s\" is refused differently: %s", refused[i],
                          msg);
            free(msg);
        }
    }
    free(first);
    ck_assert_msg(accept_waiting(other_ls) < 0, "the daemon connected to another directory");
    ck_assert_msg(accept_waiting(decoy_ls) < 0, "the daemon connected to a socket of another name");
    ck_assert_uint_eq(th_counter(&b, "peer_copies_failed"), 0); /* refused before it started */
    ck_assert_uint_eq(th_counter(&b, "device_bytes_live"), 0);

    /* In the directory, under a daemon's name, but no tenferrod: one error, no detail. */
    char missing[160], file[160], subdir[160], garbage[160], undecodable[160];
    snprintf(missing, sizeof missing, "%s/tenferrod-missing.sock", dir);
    snprintf(file, sizeof file, "%s/tenferrod-file.sock", dir);
    snprintf(subdir, sizeof subdir, "%s/tenferrod-dir.sock", dir);
    snprintf(garbage, sizeof garbage, "%s/tenferrod-x.sock", dir);
    snprintf(undecodable, sizeof undecodable, "%s/tenferrod-y.sock", dir);
    ck_assert_int_eq(th_write_file(file, "not a socket\n"), 0);
    ck_assert(mkdir(subdir, 0700) == 0);
    const char zs[] = "ZZZZ secret reply of a foreign service";
    const char bad_frame[] = "\x06\x00\x00\x00\xff\xff\xff\xff\xff\xff";
    garbage_args ga = {garbage, zs, sizeof zs - 1}, gb = {undecodable, bad_frame, 10};
    pid_t g1 = th_spawn(garbage_child, &ga), g2 = th_spawn(garbage_child, &gb);
    for (int i = 0; i < 200 && (access(garbage, F_OK) != 0 || access(undecodable, F_OK) != 0); i++)
        th_sleep_ms(10);
    const char *unanswered[] = {missing, file, subdir, garbage, undecodable};
    first = NULL;
    for (size_t i = 0; i < sizeof unanswered / sizeof *unanswered; i++) {
        const char *name = strrchr(unanswered[i], '/') + 1;
        char *msg = take_refusal(fb, sb++, token, unanswered[i], TF_ERR_PEER);
        char want[128];
        snprintf(want, sizeof want, "no tenferrod answered at %s", name);
        ck_assert_msg(strstr(msg, want) != NULL, "%s", msg);
        ck_assert_msg(strstr(msg, "ZZZZ") == NULL && strstr(msg, "secret") == NULL &&
                          strstr(msg, "1515870810") == NULL && strstr(msg, dir) == NULL,
                      "the refusal tells too much: %s", msg);
        char *generic = without_name(msg, name);
        free(msg);
        if (!first)
            first = generic;
        else {
            ck_assert_msg(strcmp(generic, first) == 0, "%s is refused differently: %s", name,
                          generic);
            free(generic);
        }
    }
    free(first);
    kill(g1, SIGKILL);
    kill(g2, SIGKILL);
    th_wait(g1);
    th_wait(g2);
    /* The reasons are in B's log, for the operator. */
    char *log = th_daemon_log(&b);
    ck_assert_msg(strstr(log, "no tenferrod answered at tenferrod-x.sock: the other daemon sent "
                              "a frame of 1515870810 bytes") != NULL &&
                      strstr(log, "tenferrod-missing.sock: connect: No such file or directory"),
                  "B's log lacks the reasons:\n%s", log);
    free(log);
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 5000), "a failed take kept memory");

    /* The directory's other spellings and the device's name reach A. */
    char spelled[300];
    snprintf(spelled, sizeof spelled, "%s//./%s", dir, a_file);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, spelled, 5, TF_F64, 1000), TF_OK, NULL);
    raw_withdraw(fa, sa++, token);
    raw_offer(fa, sa++, 1, token);
    int ordinal = -1;
    ck_assert_int_eq(sscanf(a_file, "tenferrod-%d.sock", &ordinal), 1);
    char device[32];
    snprintf(device, sizeof device, "cuda:%d", ordinal);
    CK_EXPECT_RESULT(raw_take(fb, sb++, token, device, 6, TF_F64, 1000), TF_OK, NULL);
    raw_withdraw(fa, sa++, token);
    ck_assert_uint_eq(th_counter(&b, "peer_copies_in"), 2);

    close(other_ls);
    close(decoy_ls);
    unlink(other);
    unlink(decoy);
    unlink(link_dir);
    unlink(file);
    rmdir(subdir);
    rmdir(other_dir);
    unlink(garbage);
    unlink(undecodable);
    close(fa);
    close(fb);
    CK_DAEMON_STOP(&a);
    CK_DAEMON_STOP(&b);
}
END_TEST

/*
 * [limits] max_takes_per_uid: one take more than the uid may have in
 * progress is refused typed before anything is connected, root included.
 */
START_TEST(test_takes_bounded_per_uid) {
    th_daemon b;
    CK_DAEMON_START(&b, "--log-level", "info", "--max-takes-per-uid", "1");
    char silent[128];
    snprintf(silent, sizeof silent, "%s/tenferrod-silent.sock", th_runtime_dir());
    int ls = listener_at(silent);
    const char *paths[2] = {b.socket, silent};
    pid_t taker = th_spawn(stalled_taker, paths);
    int waiting = 0;
    for (int i = 0; i < 500 && !waiting; i++) {
        waiting = takes_in_status(&b) == 1;
        if (!waiting) th_sleep_ms(10);
    }
    ck_assert_msg(waiting, "the first take is not in the status");
    /* Accepted and kept open: the first take waits for its answer meanwhile. */
    int first = -1;
    for (int i = 0; i < 500 && first < 0; i++) {
        first = accept_waiting(ls);
        if (first < 0) th_sleep_ms(10);
    }
    ck_assert_msg(first >= 0, "the first take did not connect");
    int fb = raw_client(&b);
    CK_EXPECT_RESULT(raw_take(fb, 2, "0123456789abcdef0123456789abcdef", silent, 5, TF_F64, 1000),
                     TF_ERR_TOO_MANY_CLIENTS, "max_takes_per_uid");
    ck_assert_msg(accept_waiting(ls) < 0, "the refused take connected");
    kill(taker, SIGKILL);
    th_wait(taker);
    close(first);
    /* Once the first take is gone, the uid may take again. */
    int free_again = 0;
    for (int i = 0; i < 500 && !free_again; i++) {
        free_again = takes_in_status(&b) == 0;
        if (!free_again) th_sleep_ms(10);
    }
    ck_assert(free_again);
    char missing[128];
    snprintf(missing, sizeof missing, "%s/tenferrod-missing.sock", th_runtime_dir());
    CK_EXPECT_RESULT(raw_take(fb, 3, "0123456789abcdef0123456789abcdef", missing, 5, TF_F64, 1000),
                     TF_ERR_PEER, "no tenferrod answered");
    close(fb);
    close(ls);
    unlink(silent);
    CK_DAEMON_STOP(&b);
}
END_TEST

/* ---- peer connections are charged to the client that asked ---- */

#define CHARGED_TAKES 3

/* In a child: sends f as seq on fd and returns the answer (NULL when none came). */
static Tenferro__Frame *child_call(int fd, Tenferro__Frame *f, uint64_t seq) {
    f->seq = seq;
    if (th_raw_send(fd, f) != 0) return NULL;
    Tenferro__Frame *reply = th_raw_recv(fd, RAW_MS);
    if (reply && reply->seq != seq) {
        tf__frame_free(reply);
        return NULL;
    }
    return reply;
}

/* In a child: the status of a Result answer (frees it); -1 when it is none. */
static int child_status(Tenferro__Frame *reply, uint64_t *session_id) {
    int st = reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT ? (int)reply->result->status : -1;
    if (st >= 0 && session_id) *session_id = reply->result->session_id;
    tf__frame_free(reply);
    return st;
}

/* In a child: creates tensor id of f64 zeros, shaped `rank` x n. */
static int child_create(int fd, uint64_t seq, uint64_t id, int rank, int64_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    int64_t shape[2] = {n, n};
    up.tensor = id;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = (size_t)rank;
    up.shape = shape;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    return child_status(child_call(fd, &f, seq), NULL);
}

/*
 * In a child: a held session on fd that queues `steps` matmuls x = x * y
 * of n x n tensors 1 and 2 (each intermediate freed), submitted and closed
 * without waiting: the connection's stream is busy for seconds.
 */
static int child_long_work(int fd, uint64_t *seq, int64_t n, int steps) {
    if (child_create(fd, (*seq)++, 1, 2, n) != TF_OK || child_create(fd, (*seq)++, 2, 2, n) != TF_OK)
        return -1;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__SessionOpen open = TENFERRO__SESSION_OPEN__INIT;
    f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
    f.session_open = &open;
    uint64_t session = 0;
    if (child_status(child_call(fd, &f, (*seq)++), &session) != TF_OK) return -1;
    enum { MAX_STEPS = 128 };
    Tenferro__Op ops[2 * MAX_STEPS], *ptrs[2 * MAX_STEPS];
    uint64_t ins[2 * MAX_STEPS][2];
    int k = 0;
    for (int i = 0; i < steps && i < MAX_STEPS; i++) {
        const uint64_t prev = i == 0 ? 1 : 100 + (uint64_t)i - 1;
        tenferro__op__init(&ops[k]);
        ins[k][0] = prev;
        ins[k][1] = 2;
        ops[k].kind = TENFERRO__OP_KIND__OP_MATMUL;
        ops[k].n_inputs = 2;
        ops[k].inputs = ins[k];
        ops[k].output = 100 + (uint64_t)i;
        ptrs[k] = &ops[k];
        k++;
        if (i == 0) continue;
        tenferro__op__init(&ops[k]);
        ins[k][0] = prev;
        ops[k].kind = TENFERRO__OP_KIND__OP_FREE;
        ops[k].n_inputs = 1;
        ops[k].inputs = ins[k];
        ptrs[k] = &ops[k];
        k++;
    }
    Tenferro__Frame sf = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.session_id = session;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE;
    sub.n_ops = (size_t)k;
    sub.ops = ptrs;
    sf.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    sf.submit = &sub;
    return child_status(child_call(fd, &sf, (*seq)++), NULL) == TF_OK ? 0 : -1;
}

typedef struct charged_args {
    const th_daemon *a, *b;
    int ready; /* the pipe the child writes one byte into once every take is asked */
} charged_args;

/*
 * In a child, as nobody: one client of A with long work queued, offering
 * CHARGED_TAKES tensors that CHARGED_TAKES connections of B take at once.
 * A charges each peer connection to nobody: with max_clients_per_uid 2 one
 * take is admitted and the others refused TF_ERR_TOO_MANY_CLIENTS.
 */
static int charged_child(void *arg) {
    const charged_args *ca = arg;
    if (!th_become(NOBODY, NOBODY)) return 2;
    int fa = th_raw_connect(ca->a), fb[CHARGED_TAKES];
    CHILD_CHECK(fa >= 0);
    Tenferro__Frame *hello = th_raw_hello(fa, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    CHILD_CHECK(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY);
    tf__frame_free(hello);
    for (int i = 0; i < CHARGED_TAKES; i++) {
        fb[i] = th_raw_connect(ca->b);
        CHILD_CHECK(fb[i] >= 0);
        hello = th_raw_hello(fb[i], TENFERRO__PROTOCOL__PROTOCOL_VERSION);
        CHILD_CHECK(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY);
        tf__frame_free(hello);
    }
    const int gpu = strncmp(th_device(), "cuda", 4) == 0;
    uint64_t seq = 10;
    CHILD_CHECK(child_long_work(fa, &seq, gpu ? 8192 : 1024, gpu ? 120 : 60) == 0);
    char tokens[CHARGED_TAKES][33];
    for (int i = 0; i < CHARGED_TAKES; i++) {
        CHILD_CHECK(child_create(fa, seq++, 10 + (uint64_t)i, 1, 1000) == TF_OK);
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__CopyOffer offer = TENFERRO__COPY_OFFER__INIT;
        offer.tensor = 10 + (uint64_t)i;
        f.body_case = TENFERRO__FRAME__BODY_COPY_OFFER;
        f.copy_offer = &offer;
        Tenferro__Frame *reply = child_call(fa, &f, seq++);
        CHILD_CHECK(reply && reply->body_case == TENFERRO__FRAME__BODY_COPY_OFFER_REPLY &&
                    reply->copy_offer_reply->result->status == TF_OK);
        snprintf(tokens[i], sizeof tokens[i], "%s", reply->copy_offer_reply->token);
        tf__frame_free(reply);
    }
    for (int i = 0; i < CHARGED_TAKES; i++) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__CopyTake take = TENFERRO__COPY_TAKE__INIT;
        int64_t n = 1000;
        take.token = tokens[i];
        take.source_socket = (char *)ca->a->socket;
        take.tensor = 1;
        take.dtype = TF_F64;
        take.n_shape = 1;
        take.shape = &n;
        f.seq = 2;
        f.body_case = TENFERRO__FRAME__BODY_COPY_TAKE;
        f.copy_take = &take;
        CHILD_CHECK(th_raw_send(fb[i], &f) == 0);
    }
    CHILD_CHECK(write(ca->ready, "g", 1) == 1);
    int ok = 0, refused = 0;
    for (int i = 0; i < CHARGED_TAKES; i++) {
        Tenferro__Frame *reply = th_raw_recv(fb[i], 120000);
        CHILD_CHECK(reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT);
        if (reply->result->status == TF_OK) ok++;
        if (reply->result->status == TF_ERR_TOO_MANY_CLIENTS &&
            strstr(reply->result->message, "max_clients_per_uid"))
            refused++;
        else if (reply->result->status != TF_OK)
            fprintf(stderr, "[child] take %d: %s: %s\n", i,
                    tf_status_name((tf_status)reply->result->status), reply->result->message);
        tf__frame_free(reply);
    }
    if (ok != 1 || refused != CHARGED_TAKES - 1)
        fprintf(stderr, "[child] %d takes succeeded and %d were refused for the uid's limit\n", ok,
                refused);
    CHILD_CHECK(ok == 1 && refused == CHARGED_TAKES - 1);
    close(fa);
    for (int i = 0; i < CHARGED_TAKES; i++) close(fb[i]);
    return 0;
}

/* Peer connections of d's status report, and how many are charged to `uid` (-1: no report). */
static int peer_conns(const th_daemon *d, uint32_t uid, int *charged) {
    Tenferro__Frame *r = th_status_report(d);
    if (!r) return -1;
    int n = 0;
    *charged = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++) {
        const Tenferro__ClientInfo *ci = r->status_reply->clients[i];
        if (!ci->name || strcmp(ci->name, "tenferrod (peer copy)") != 0) continue;
        n++;
        *charged += ci->uid == geteuid() && ci->charged_uid == uid;
    }
    tf__frame_free(r);
    return n;
}

/*
 * One uid's copies cannot fill the offering daemon: each peer connection
 * counts for the client that asked for the copy ([limits]
 * max_clients_per_uid, no root exemption), the status shows it charged so,
 * and root still connects.
 */
START_TEST(test_peer_connections_charged_to_asker) {
    if (geteuid() != 0) {
        fprintf(stderr, "test_peer_connections_charged_to_asker: not root: skipped\n");
        return;
    }
    th_daemon a, b;
    CK_DAEMON_START(&a, "--log-level", "info", "--socket-mode", "0666", "--max-clients", "4",
                    "--max-clients-per-uid", "2");
    CK_DAEMON_START(&b, "--log-level", "info", "--socket-mode", "0666");
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    charged_args args = {&a, &b, p[1]};
    pid_t child = th_spawn(charged_child, &args);
    close(p[1]);
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    char byte;
    ck_assert_msg(poll(&pf, 1, 60000) == 1 && read(p[0], &byte, 1) == 1, "the child never asked");
    close(p[0]);
    /* Every take has reached A: admitted, or refused at its Hello. */
    int peers = -1, charged = 0, settled = 0;
    for (int i = 0; i < 1000 && !settled; i++) {
        peers = peer_conns(&a, NOBODY, &charged);
        settled = peers < 0 || peers >= CHARGED_TAKES ||
                  (peers >= 1 && th_counter(&a, "connections_refused") >= CHARGED_TAKES - 1);
        if (!settled) th_sleep_ms(10);
    }
    /* Root is not refused: the uid's copies did not take the slots. */
    tf_client *root = NULL;
    CK_STATUS(root, tf_connect(a.socket, &root), TF_OK);
    tf_disconnect(root);
    peers = peer_conns(&a, NOBODY, &charged);
    ck_assert_msg(peers == 1 && charged == 1,
                  "A holds %d peer connections (%d charged to uid %d), expected 1 charged to it",
                  peers, charged, NOBODY);
    ck_assert_int_ge(takes_in_status(&b), 1);
    /* tenferroctl shows both, in each of its forms. */
    static char out[1 << 16];
    ck_assert_int_eq(th_run_ctl(&a, out, sizeof out, "status", "--json"), 0);
    ck_assert_msg(th_json_valid(out) &&
                      strstr(out, "\"charged_uid\":65534,\"name\":\"tenferrod (peer copy)\""),
                  "%s", out);
    ck_assert_int_eq(th_run_ctl(&a, out, sizeof out, "metrics", NULL), 0);
    ck_assert_msg(strstr(out, "\ntenferrod_client_charged_uid{") && strstr(out, "} 65534\n"), "%s",
                  out);
    ck_assert_int_eq(th_run_ctl(&b, out, sizeof out, "status", "--json"), 0);
    ck_assert_msg(strstr(out, "\"takes\":1"), "%s", out);
    ck_assert_int_eq(th_run_ctl(&b, out, sizeof out, "status", NULL), 0);
    ck_assert_msg(strstr(out, "charged") && strstr(out, "takes"), "%s", out);
    ck_assert_int_eq(th_wait(child), 0);
    ck_assert_msg(th_wait_counter(&a, "device_bytes_live", 0, 20000), "A kept memory");
    ck_assert_msg(th_wait_counter(&b, "device_bytes_live", 0, 20000), "B kept memory");
    CK_DAEMON_STOP(&a);
    CK_DAEMON_STOP(&b);
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
    /* How long a take may wait, where it may connect, and what it is charged to. */
    TCase *deadline = tcase_create("take-deadline");
    tcase_set_timeout(deadline, 60);
    tcase_add_test(deadline, test_take_full_backlog_times_out);
    tcase_add_test(deadline, test_taker_killed_mid_connect);
    suite_add_tcase(s, deadline);
    TCase *targets = tcase_create("take-targets");
    tcase_set_timeout(targets, 60);
    tcase_add_test(targets, test_take_reaches_runtime_dir_only);
    suite_add_tcase(s, targets);
    TCase *limits = tcase_create("take-limits");
    tcase_set_timeout(limits, 120);
    tcase_add_test(limits, test_takes_bounded_per_uid);
    tcase_add_test(limits, test_peer_connections_charged_to_asker);
    suite_add_tcase(s, limits);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(peer_copy_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
