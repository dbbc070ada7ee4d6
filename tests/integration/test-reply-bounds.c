/*
 * Integration tests of the bounds on what a client makes the daemon hold in
 * host memory (DESIGN.md §9, daemon/memory-limits.h): replies a client does
 * not read ([limits] client_reply_bytes, uid_reply_bytes, reply_stall_ms)
 * and large frames being decoded ([limits] uid_receive_bytes).
 *
 * Each hostile client speaks raw frames and never reads: the daemon's VmRSS
 * (/proc/<pid>/status) must stay near its baseline plus the limit, a
 * bystander must be served correctly meanwhile, the hostile connection must
 * be closed once its replies have not moved for reply_stall_ms, and the
 * status report must show the bytes going back to 0. A client that reads
 * slowly but does read is never closed and gets every reply in order. Each
 * test starts its own tenferrod and ends by stopping it with SIGTERM,
 * requiring a clean exit.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "tenferro/wire.h"
#include "tests/integration/harness.h"

#define MIB ((uint64_t)1 << 20)
/* How long a raw read may wait before the test calls the daemon unresponsive. */
#define RAW_MS 10000
/* The uid the per-uid test's clients run as. */
#define NOBODY 65534

/* ---- small helpers ---- */

/* The monotonic clock in whole milliseconds. */
static uint64_t now_ms(void) { return (uint64_t)th_now_ms(); }

/* The daemon's resident set in bytes (VmRSS of /proc/<pid>/status), 0 when unreadable. */
static uint64_t rss_bytes(pid_t pid) {
    long kib = th_proc_status_value(pid, "VmRSS");
    return kib > 0 ? (uint64_t)kib * 1024u : 0;
}

/*
 * Requires the daemon's peak VmRSS to stay below base + allowed. Under a
 * sanitizer the daemon keeps freed memory in quarantine and shadows what it
 * maps, so its VmRSS bounds nothing: there the figures are only printed (the
 * reply_bytes the status shows are still checked).
 */
static void check_rss(uint64_t base, uint64_t peak, uint64_t allowed, const char *what) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)allowed;
    fprintf(stderr, "%s: VmRSS %llu -> %llu MiB, not checked under a sanitizer\n", what,
            (unsigned long long)(base / MIB), (unsigned long long)(peak / MIB));
#else
    ck_assert_msg(peak < base + allowed, "%s: the daemon's VmRSS went from %llu to %llu MiB, above %llu MiB",
                  what, (unsigned long long)(base / MIB), (unsigned long long)(peak / MIB),
                  (unsigned long long)((base + allowed) / MIB));
#endif
}

/* ---- raw frames (usable in children: no Check assertions) ---- */

/* Receives the HelloReply (closing the page descriptor riding on it); its client id, or 0. */
static uint64_t recv_hello_reply(int fd) {
    int page = -1;
    Tenferro__Frame *r = th_raw_recv_fd(fd, RAW_MS, &page);
    if (page >= 0) close(page);
    uint64_t id = r && r->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY ? r->hello_reply->client_id : 0;
    tf__frame_free(r);
    return id;
}

/* Receives one reply that must be a Result with TF_OK answering seq; 0 when it is. */
static int expect_ok(int fd, uint64_t seq) {
    Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
    int ok = r && r->seq == seq && r->body_case == TENFERRO__FRAME__BODY_RESULT &&
             r->result->status == TF_OK;
    if (!ok)
        fprintf(stderr, "expected an OK Result for request %llu, got %s\n", (unsigned long long)seq,
                !r ? "nothing" : r->body_case == TENFERRO__FRAME__BODY_RESULT ? r->result->message
                                                                             : "another frame");
    tf__frame_free(r);
    return ok ? 0 : -1;
}

/*
 * Creates f64 tensor id of bytes/8 elements holding data, written in frames
 * of at most `chunk` bytes (each answered before the next goes); 0 on success.
 */
static int raw_upload(int fd, uint64_t *seq, uint64_t id, const void *data, size_t bytes,
                      size_t chunk) {
    int64_t shape[1] = {(int64_t)(bytes / sizeof(double))};
    for (size_t off = 0; off < bytes || off == 0; off += chunk) {
        Tenferro__Frame f;
        Tenferro__Upload up;
        const int create = off == 0;
        th_raw_build_upload(&f, &up, id, create, create ? TF_F64 : (tf_dtype)0, create ? 1 : 0,
                            create ? shape : NULL, off, (const uint8_t *)data + off,
                            bytes - off < chunk ? bytes - off : chunk);
        f.seq = ++*seq;
        if (th_raw_send(fd, &f) != 0 || expect_ok(fd, f.seq) != 0) return -1;
        if (bytes == 0) break;
    }
    return 0;
}

/* Appends a Download of `len` bytes at `offset` of tensor id as request seq. */
static int append_download(th_frames *frames, uint64_t seq, uint64_t id, uint64_t offset,
                           uint64_t bytes) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, offset, bytes);
    f.seq = seq;
    return th_frames_add(frames, &f);
}

/* Sends n Downloads of all `bytes` of tensor id (requests seq+1 .. seq+n) in one write. */
static int send_downloads(int fd, uint64_t seq, int n, uint64_t id, uint64_t bytes) {
    th_frames frames = {0};
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = append_download(&frames, seq + 1 + (uint64_t)i, id, 0, bytes);
    if (rc == 0) rc = th_raw_send_bytes(fd, frames.bytes, frames.len);
    th_frames_free(&frames);
    return rc;
}

/* ---- the status report ---- */

/* The queued reply bytes status shows for client id; UINT64_MAX when it is not listed. */
static uint64_t reply_bytes_of(const th_daemon *d, uint64_t id) {
    Tenferro__Frame *s = th_status_report(d);
    ck_assert_msg(s != NULL, "no status report");
    const Tenferro__ClientInfo *ci = th_find_client(s, id);
    uint64_t v = ci ? ci->reply_bytes : UINT64_MAX;
    tf__frame_free(s);
    return v;
}

/* What status shows summed over the clients of uid (every uid when uid is -1). */
typedef struct uid_sum {
    uint64_t reply_bytes, decode_bytes, max_client_reply_bytes;
    int clients;
} uid_sum;

static uid_sum sum_for(const th_daemon *d, long uid) {
    Tenferro__Frame *s = th_status_report(d);
    ck_assert_msg(s != NULL, "no status report");
    uid_sum u = {0};
    for (size_t i = 0; i < s->status_reply->n_clients; i++) {
        const Tenferro__ClientInfo *ci = s->status_reply->clients[i];
        if (uid >= 0 && ci->uid != (uint32_t)uid) continue;
        u.reply_bytes += ci->reply_bytes;
        u.decode_bytes += ci->decode_bytes;
        if (ci->reply_bytes > u.max_client_reply_bytes) u.max_client_reply_bytes = ci->reply_bytes;
        u.clients++;
    }
    tf__frame_free(s);
    return u;
}

/* Clients status lists whose name starts with `prefix`. */
static int count_named(const th_daemon *d, const char *prefix) {
    Tenferro__Frame *s = th_status_report(d);
    ck_assert_msg(s != NULL, "no status report");
    int n = 0;
    for (size_t i = 0; i < s->status_reply->n_clients; i++)
        n += strncmp(s->status_reply->clients[i]->name, prefix, strlen(prefix)) == 0;
    tf__frame_free(s);
    return n;
}

/* ---- the bystander: another client that must be served, with correct bytes, meanwhile ---- */

static const th_daemon *g_daemon;

/* Uploads and downloads 8 MiB of fresh random data through the client library; 0 when it comes back equal. */
static int bystander_main(void *arg) {
    (void)arg;
    enum { N = 1 << 20 };
    double *data = malloc(N * sizeof(double));
    CHILD_CHECK(data != NULL);
    srand(th_seed() ^ (unsigned)getpid());
    th_fill_random(TF_F64, N, data);
    tf_client *c = NULL;
    CHILD_CHECK(tf_connect(g_daemon->socket, &c) == TF_OK);
    const int64_t shape[1] = {N};
    tf_tensor t;
    uint64_t start = now_ms();
    CHILD_STATUS(c, tf_upload(c, TF_F64, 1, shape, data, &t), TF_OK);
    void *back = NULL;
    size_t bytes = 0;
    CHILD_STATUS(c, tf_download(c, t, &back, &bytes), TF_OK);
    CHILD_CHECK(bytes == N * sizeof(double));
    CHILD_CHECK(memcmp(back, data, bytes) == 0);
    CHILD_STATUS(c, tf_tensor_free(c, t), TF_OK);
    fprintf(stderr, "bystander: 8 MiB up and down in %llu ms\n", (unsigned long long)(now_ms() - start));
    free(back);
    free(data);
    tf_disconnect(c);
    return 0;
}

/*
 * Samples the daemon's VmRSS every 10 ms for at least `ms`, and until the
 * bystander `by` (when not 0) has exited; returns the peak, and the
 * bystander's exit code in *by_rc.
 */
static uint64_t peak_rss_while(const th_daemon *d, int ms, pid_t by, int *by_rc) {
    uint64_t peak = 0, until = now_ms() + (uint64_t)ms, limit = now_ms() + 60000;
    int running = by > 0;
    while ((now_ms() < until || running) && now_ms() < limit) {
        uint64_t r = rss_bytes(d->pid);
        if (r > peak) peak = r;
        if (running) {
            int status;
            if (waitpid(by, &status, WNOHANG) == by) {
                running = 0;
                *by_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            }
        }
        th_sleep_ms(10);
    }
    ck_assert_msg(!running, "the bystander did not finish within 60 s");
    return peak;
}

/* ---- (a) Downloads never read ---- */

#define A_TENSOR (16 * MIB)
#define A_LIMIT (48 * MIB)
/* Above baseline + limit: one reply's host buffer beside its encoding, the bystander's 8 MiB tensor and staging buffer, slack. */
#define A_MARGIN (48 * MIB)

/*
 * 60 Downloads of 16 MiB sent in one write and never read: the daemon takes
 * what fits in client_reply_bytes, stops reading, and stays near baseline +
 * the limit; a bystander is served meanwhile; after reply_stall_ms the
 * connection is closed (reply_stall_closes 1) and nothing is left counted.
 */
START_TEST(test_unread_downloads_bounded) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "20M", "--client-reply-bytes", "48M",
                    "--reply-stall-ms", "4000");
    g_daemon = &d;
    uint64_t id, seq = 1;
    int fd = th_raw_open(&d, "unread-downloads", 1, &id);
    ck_assert_int_ge(fd, 0);
    double *big = malloc(A_TENSOR);
    ck_assert_ptr_nonnull(big);
    th_fill_random(TF_F64, A_TENSOR / sizeof(double), big);
    ck_assert_int_eq(raw_upload(fd, &seq, 1, big, A_TENSOR, A_TENSOR), 0);
    free(big);
    uint64_t base = rss_bytes(d.pid);
    ck_assert_uint_gt(base, 0);

    ck_assert_int_eq(send_downloads(fd, seq, 60, 1, A_TENSOR), 0);
    /* The first replies are queued: the daemon has taken Downloads up to the limit. */
    uint64_t queued = 0;
    for (int i = 0; i < 500 && (queued = reply_bytes_of(&d, id)) < A_TENSOR; i++) th_sleep_ms(10);
    ck_assert_msg(queued >= A_TENSOR && queued != UINT64_MAX, "status shows %llu reply bytes queued",
                  (unsigned long long)queued);

    int by_rc = -1;
    pid_t by = th_spawn(bystander_main, NULL);
    uint64_t peak = peak_rss_while(&d, 1000, by, &by_rc);
    ck_assert_msg(by_rc == 0, "the bystander failed (code %d, see its message above)", by_rc);
    fprintf(stderr, "unread downloads: VmRSS %llu MiB before, peak %llu MiB (limit %llu MiB)\n",
            (unsigned long long)(base / MIB), (unsigned long long)(peak / MIB),
            (unsigned long long)(A_LIMIT / MIB));
    check_rss(base, peak, A_LIMIT + A_MARGIN, "48 MiB of unread Download replies allowed");
    queued = reply_bytes_of(&d, id);
    /* Reservations count the data; each reply adds a few bytes of fields. */
    ck_assert_msg(queued > 0 && queued <= A_LIMIT + 4096, "status shows %llu reply bytes queued, limit %llu",
                  (unsigned long long)queued, (unsigned long long)A_LIMIT);
    ck_assert_uint_eq(th_counter(&d, "reply_stall_closes"), 0);

    /* Nothing was read for reply_stall_ms: the connection is closed and its replies dropped. */
    ck_assert_msg(th_wait_counter(&d, "reply_stall_closes", 1, 15000),
                  "the stalled connection was not closed");
    ck_assert_msg(th_raw_closed(fd, RAW_MS), "the stalled connection is still open");
    close(fd);
    uid_sum all = {0};
    for (int i = 0; i < 200; i++) {
        all = sum_for(&d, -1);
        if (all.reply_bytes == 0 && reply_bytes_of(&d, id) == UINT64_MAX) break;
        th_sleep_ms(10);
    }
    ck_assert_msg(all.reply_bytes == 0, "status still shows %llu reply bytes",
                  (unsigned long long)all.reply_bytes);
    ck_assert_uint_eq(reply_bytes_of(&d, id), UINT64_MAX);
    ck_assert_uint_eq(th_counter(&d, "reply_stall_closes"), 1);
    char *log = th_daemon_log(&d);
    ck_assert_msg(strstr(log, "reply_stall_ms") != NULL, "the close is not logged");
    free(log);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (b) Status requests never read ---- */

#define B_LIMIT (1 * MIB)
#define B_MARGIN (16 * MIB)

/*
 * A flood of Status requests whose replies are never read: the daemon stops
 * reading the connection once a MiB of replies is queued, its VmRSS stays
 * near baseline, and the connection is closed after reply_stall_ms.
 */
START_TEST(test_unread_status_bounded) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "1M", "--client-reply-bytes", "1M", "--reply-stall-ms",
                    "2000");
    uint64_t id;
    int fd = th_raw_open(&d, "unread-status", 1, &id);
    ck_assert_int_ge(fd, 0);
    uint64_t base = rss_bytes(d.pid);
    ck_assert_uint_gt(base, 0);

    th_frames frames = {0};
    size_t off = 0;
    uint64_t seq = 1, sent = 0, peak = base;
    uint64_t start = now_ms(), last_sample = 0;
    /* Requests as fast as the daemon takes them, for a second. */
    while (now_ms() - start < 1000) {
        if (off == frames.len) {
            frames.len = off = 0;
            for (int i = 0; i < 4096; i++) {
                Tenferro__Frame f = TENFERRO__FRAME__INIT;
                Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
                f.seq = ++seq;
                f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
                f.status_request = &body;
                ck_assert_int_eq(th_frames_add(&frames, &f), 0);
            }
        }
        ssize_t n = send(fd, frames.bytes + off, frames.len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            sent += (uint64_t)n;
        } else {
            ck_assert_msg(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR),
                          "the connection failed while flooding: %s", strerror(errno));
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            (void)poll(&p, 1, 5);
        }
        if (now_ms() - last_sample >= 10) {
            uint64_t r = rss_bytes(d.pid);
            if (r > peak) peak = r;
            last_sample = now_ms();
        }
    }
    th_frames_free(&frames);
    uint64_t later = peak_rss_while(&d, 300, 0, NULL);
    if (later > peak) peak = later;
    fprintf(stderr, "unread status: %llu request bytes taken, VmRSS %llu MiB before, peak %llu MiB\n",
            (unsigned long long)sent, (unsigned long long)(base / MIB),
            (unsigned long long)(peak / MIB));
    check_rss(base, peak, B_LIMIT + B_MARGIN, "1 MiB of unread Status replies allowed");
    uint64_t queued = reply_bytes_of(&d, id);
    ck_assert_msg(queued > 0 && queued <= B_LIMIT + 64 * 1024,
                  "status shows %llu reply bytes queued, limit %llu", (unsigned long long)queued,
                  (unsigned long long)B_LIMIT);

    ck_assert_msg(th_wait_counter(&d, "reply_stall_closes", 1, 15000),
                  "the stalled connection was not closed");
    ck_assert_msg(th_raw_closed(fd, RAW_MS), "the stalled connection is still open");
    close(fd);
    uid_sum all = {0};
    for (int i = 0; i < 200 && (all = sum_for(&d, -1)).reply_bytes != 0; i++) th_sleep_ms(10);
    ck_assert_uint_eq(all.reply_bytes, 0);
    ck_assert_uint_eq(reply_bytes_of(&d, id), UINT64_MAX);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (c) a slow reader ---- */

#define C_TENSOR (8 * MIB)
#define C_READ (1 * MIB)
#define C_LIMIT (2 * MIB)
#define C_REQUESTS 32

/* The offset request i reads: all over the tensor, so a reply out of order or wrong shows. */
static uint64_t c_offset(int i) { return (uint64_t)((i * 5) % 8) * C_READ; }

/*
 * A client that reads its replies slowly (128 KiB every 10 ms) but does read
 * is never closed, whatever the stall setting, and gets every reply in
 * order with the right bytes; meanwhile its queued replies stay within
 * client_reply_bytes.
 */
START_TEST(test_slow_reader_served) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "2M", "--client-reply-bytes", "2M", "--reply-stall-ms",
                    "300");
    uint64_t id, seq = 1;
    int fd = th_raw_open(&d, "slow-reader", 1, &id);
    ck_assert_int_ge(fd, 0);
    uint8_t *data = malloc(C_TENSOR);
    ck_assert_ptr_nonnull(data);
    th_fill_random(TF_F64, C_TENSOR / sizeof(double), data);
    ck_assert_int_eq(raw_upload(fd, &seq, 1, data, C_TENSOR, C_READ), 0);

    th_frames req = {0};
    for (int i = 0; i < C_REQUESTS; i++)
        ck_assert_int_eq(append_download(&req, 1000 + (uint64_t)i, 1, c_offset(i), C_READ), 0);
    ck_assert_int_eq(th_raw_send_bytes(fd, req.bytes, req.len), 0);
    th_frames_free(&req);

    size_t cap = 2 * C_READ + 65536, have = 0;
    uint8_t *in = malloc(cap);
    ck_assert_ptr_nonnull(in);
    int got = 0;
    uint64_t max_queued = 0, last_status = 0, start = now_ms();
    while (got < C_REQUESTS) {
        ck_assert_msg(now_ms() - start < 60000, "only %d of %d replies in 60 s", got, C_REQUESTS);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ck_assert_msg(poll(&p, 1, RAW_MS) == 1, "no reply bytes for %d ms after %d replies", RAW_MS, got);
        size_t want = cap - have < 128 * 1024 ? cap - have : 128 * 1024;
        ssize_t n = recv(fd, in + have, want, 0);
        ck_assert_msg(n > 0, "the connection ended after %d replies", got);
        have += (size_t)n;
        while (have >= TF__FRAME_HEADER_BYTES && have >= TF__FRAME_HEADER_BYTES + tf__frame_peek_length(in)) {
            uint32_t flen = tf__frame_peek_length(in);
            Tenferro__Frame *r = tf__frame_decode(in + TF__FRAME_HEADER_BYTES, flen);
            ck_assert_ptr_nonnull(r);
            ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
            ck_assert_msg(r->seq == 1000 + (uint64_t)got, "reply %llu came as the %dth",
                          (unsigned long long)r->seq, got);
            CK_RESULT(r->download_reply->result, TF_OK, NULL);
            ck_assert_uint_eq(r->download_reply->data.len, C_READ);
            ck_assert_msg(memcmp(r->download_reply->data.data, data + c_offset(got), C_READ) == 0,
                          "reply %d carries the wrong bytes", got);
            tf__frame_free(r);
            got++;
            have -= TF__FRAME_HEADER_BYTES + flen;
            memmove(in, in + TF__FRAME_HEADER_BYTES + flen, have);
        }
        if (now_ms() - last_status >= 100) {
            uint64_t q = reply_bytes_of(&d, id);
            ck_assert_msg(q != UINT64_MAX, "the slow reader is no longer listed");
            if (q > max_queued) max_queued = q;
            last_status = now_ms();
        }
        th_sleep_ms(10);
    }
    free(in);
    fprintf(stderr, "slow reader: %d replies in %llu ms, at most %llu bytes queued\n", got,
            (unsigned long long)(now_ms() - start), (unsigned long long)max_queued);
    /* Each reply is its data plus a few bytes of fields. */
    ck_assert_msg(max_queued <= C_LIMIT + 4096, "%llu reply bytes were queued, limit %llu",
                  (unsigned long long)max_queued, (unsigned long long)C_LIMIT);
    /* Still open, and served: a Status request is answered. */
    th_sleep_ms(500);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.seq = 5000;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_STATUS_REPLY && r->seq == 5000,
                  "the slow reader's Status request was not answered");
    tf__frame_free(r);
    free(data);
    ck_assert_uint_eq(th_counter(&d, "reply_stall_closes"), 0);
    ck_assert_uint_eq(reply_bytes_of(&d, id), 0);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (d) the uid's bound across its connections ---- */

#define D_TENSOR (4 * MIB)
#define D_CLIENT_LIMIT (8 * MIB)
#define D_UID_LIMIT (16 * MIB)
#define D_ATTACKERS 4
#define D_MARGIN (48 * MIB)

/* Parent and child of the per-uid test talk over two pipes, one byte per step. */
static int g_to_child[2], g_to_parent[2];

/* Waits for the parent's next step `want`; 0 when it came. */
static int child_step(char want) {
    char got = 0;
    return read(g_to_child[0], &got, 1) == 1 && got == want ? 0 : -1;
}

/* Tells the parent a step ended, with ok 1 or 0. */
static int child_says(char ok) { return write(g_to_parent[1], &ok, 1) == 1 ? 0 : -1; }

/*
 * The child, as uid nobody: four connections each upload a 4 MiB tensor and
 * send 20 Downloads of it without reading; a late fifth connection's Hello
 * must then wait while the uid's replies are at the limit, and be answered
 * once the four are gone.
 */
static int uid_child(void *arg) {
    const th_daemon *d = arg;
    CHILD_CHECK(th_become(NOBODY, NOBODY));
    int fds[D_ATTACKERS];
    uint8_t *data = malloc(D_TENSOR);
    CHILD_CHECK(data != NULL);
    for (int i = 0; i < D_ATTACKERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "uid-attacker-%d", i);
        uint64_t seq = 1;
        fds[i] = th_raw_open(d, name, 1, NULL);
        CHILD_CHECK(fds[i] >= 0);
        memset(data, 0x40 + i, D_TENSOR);
        CHILD_CHECK(raw_upload(fds[i], &seq, 1, data, D_TENSOR, D_TENSOR) == 0);
    }
    free(data);
    CHILD_CHECK(child_says(1) == 0 && child_step('g') == 0);
    for (int i = 0; i < D_ATTACKERS; i++) CHILD_CHECK(send_downloads(fds[i], 10, 20, 1, D_TENSOR) == 0);
    CHILD_CHECK(child_says(1) == 0 && child_step('l') == 0);

    /* The uid is at its limit: even a Hello waits. */
    int late = th_raw_connect(d);
    CHILD_CHECK(late >= 0 && th_raw_send_hello(late, 1, "uid-late") == 0);
    struct pollfd p = {.fd = late, .events = POLLIN};
    int answered = poll(&p, 1, 500);
    if (answered != 0) fprintf(stderr, "[child] the late Hello was answered while the uid was at its limit\n");
    CHILD_CHECK(child_says(answered == 0) == 0 && child_step('c') == 0);

    /* The four go: the uid's replies drain, and the late connection goes on. */
    for (int i = 0; i < D_ATTACKERS; i++) close(fds[i]);
    uint64_t id = recv_hello_reply(late);
    if (!id) fprintf(stderr, "[child] no HelloReply once the attackers were gone\n");
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.seq = 2;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    Tenferro__Frame *r = id && th_raw_send(late, &f) == 0 ? th_raw_recv(late, RAW_MS) : NULL;
    int served = r && r->body_case == TENFERRO__FRAME__BODY_STATUS_REPLY;
    tf__frame_free(r);
    CHILD_CHECK(child_says(served) == 0 && child_step('q') == 0);
    close(late);
    return 0;
}

/* The parent's side of a step: sends `cmd` (unless 0), then reads the child's verdict. */
static int parent_step(char cmd) {
    if (cmd) ck_assert_int_eq(write(g_to_child[1], &cmd, 1), 1);
    struct pollfd p = {.fd = g_to_parent[0], .events = POLLIN};
    ck_assert_msg(poll(&p, 1, 60000) == 1, "the child did not answer step '%c'", cmd ? cmd : '0');
    char ok = 0;
    ck_assert_msg(read(g_to_parent[0], &ok, 1) == 1, "the child died (see its message above)");
    return ok;
}

/*
 * Four connections of one uid, each within client_reply_bytes, together
 * held to uid_reply_bytes (one Download over at most): the daemon's VmRSS
 * stays near baseline + the uid's limit, a client of another uid is served,
 * a new connection of the uid waits, and goes on once the uid's replies
 * drain.
 */
START_TEST(test_uid_bound) {
    th_daemon d;
    CK_DAEMON_START(&d, "--socket-mode", "0666", "--max-frame-bytes", "5M", "--client-reply-bytes",
                    "8M", "--uid-reply-bytes", "16M", "--reply-stall-ms", "30000");
    g_daemon = &d;
    ck_assert_int_eq(pipe(g_to_child), 0);
    ck_assert_int_eq(pipe(g_to_parent), 0);
    pid_t child = th_spawn(uid_child, &d);
    ck_assert_msg(parent_step(0), "the child could not upload its tensors");
    uint64_t base = rss_bytes(d.pid);
    ck_assert_msg(parent_step('g'), "the child could not send its Downloads");

    uid_sum u = {0};
    for (int i = 0; i < 500 && (u = sum_for(&d, NOBODY)).reply_bytes < D_UID_LIMIT; i++) th_sleep_ms(10);
    ck_assert_msg(u.reply_bytes >= D_UID_LIMIT, "the uid's replies reached only %llu bytes",
                  (unsigned long long)u.reply_bytes);
    int by_rc = -1;
    pid_t by = th_spawn(bystander_main, NULL); /* root: another uid */
    uint64_t peak = peak_rss_while(&d, 800, by, &by_rc);
    ck_assert_msg(by_rc == 0, "the bystander failed (code %d, see its message above)", by_rc);
    uint64_t most = 0, most_client = 0;
    for (int i = 0; i < 20; i++) {
        u = sum_for(&d, NOBODY);
        if (u.reply_bytes > most) most = u.reply_bytes;
        if (u.max_client_reply_bytes > most_client) most_client = u.max_client_reply_bytes;
        th_sleep_ms(10);
    }
    fprintf(stderr, "uid bound: %llu reply bytes for the uid, at most %llu for one client; VmRSS "
                    "%llu MiB before, peak %llu MiB\n",
            (unsigned long long)most, (unsigned long long)most_client,
            (unsigned long long)(base / MIB), (unsigned long long)(peak / MIB));
    ck_assert_msg(most <= D_UID_LIMIT + D_TENSOR + 4096, "the uid held %llu reply bytes, limit %llu",
                  (unsigned long long)most, (unsigned long long)D_UID_LIMIT);
    ck_assert_msg(most_client <= D_CLIENT_LIMIT + 4096, "one client held %llu reply bytes, limit %llu",
                  (unsigned long long)most_client, (unsigned long long)D_CLIENT_LIMIT);
    check_rss(base, peak, D_UID_LIMIT + D_TENSOR + D_MARGIN, "16 MiB of unread replies allowed to the uid");

    ck_assert_msg(parent_step('l'), "a new connection of the uid was served while it was at its limit");
    ck_assert_msg(parent_step('c'), "the new connection was not served once the uid's replies drained");
    for (int i = 0; i < 500 && count_named(&d, "uid-attacker") != 0; i++) th_sleep_ms(10);
    ck_assert_int_eq(count_named(&d, "uid-attacker"), 0);
    ck_assert_int_eq(count_named(&d, "uid-late"), 1);
    u = sum_for(&d, NOBODY);
    ck_assert_uint_eq(u.reply_bytes, 0);
    ck_assert_int_eq(write(g_to_child[1], "q", 1), 1);
    ck_assert_int_eq(th_wait(child), 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (e) large frames of one uid being decoded ---- */

#define E_CLIENTS 4
#define E_TENSOR (3 * MIB)
#define E_ROUNDS 6
/* Fits one 3 MiB frame's decode budget (2 x 3 MiB + 32 MiB), not two. */
#define E_RECEIVE "40M"
#define E_RECEIVE_BYTES (40 * MIB)

/* One client uploading 3 MiB frames back to back and reading each tensor back. */
static int decode_child(void *arg) {
    const th_daemon *d = arg;
    uint64_t seq = 1;
    int fd = th_raw_open(d, "decoder", 1, NULL);
    CHILD_CHECK(fd >= 0);
    uint8_t *data = malloc(E_TENSOR);
    CHILD_CHECK(data != NULL);
    srand(th_seed() ^ (unsigned)getpid());
    for (int k = 1; k <= E_ROUNDS; k++) {
        th_fill_random(TF_F64, E_TENSOR / sizeof(double), data);
        CHILD_CHECK(raw_upload(fd, &seq, (uint64_t)k, data, E_TENSOR, E_TENSOR) == 0);
        Tenferro__Frame f;
        Tenferro__Download dl;
        th_raw_build_download(&f, &dl, (uint64_t)k, 0, E_TENSOR);
        f.seq = ++seq;
        CHILD_CHECK(th_raw_send(fd, &f) == 0);
        Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
        CHILD_CHECK(r && r->seq == seq && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
        CHILD_CHECK(r->download_reply->data.len == E_TENSOR);
        CHILD_CHECK(memcmp(r->download_reply->data.data, data, E_TENSOR) == 0);
        tf__frame_free(r);
    }
    free(data);
    close(fd);
    return 0;
}

/*
 * Four connections of one uid upload 3 MiB frames (decoded off the loop) at
 * once: every upload lands intact, the decodes in progress stay within the
 * uid's budget (status decode_bytes), and nothing is left counted after.
 */
START_TEST(test_decodes_bounded_per_uid) {
    th_daemon d;
    CK_DAEMON_START(&d, "--uid-receive-bytes", E_RECEIVE);
    pid_t kids[E_CLIENTS];
    for (int i = 0; i < E_CLIENTS; i++) kids[i] = th_spawn(decode_child, &d);
    uint64_t most = 0;
    int running = E_CLIENTS, rc[E_CLIENTS] = {0};
    uint64_t start = now_ms();
    while (running > 0 && now_ms() - start < 60000) {
        uid_sum u = sum_for(&d, -1);
        if (u.decode_bytes > most) most = u.decode_bytes;
        for (int i = 0; i < E_CLIENTS; i++) {
            int status;
            if (kids[i] > 0 && waitpid(kids[i], &status, WNOHANG) == kids[i]) {
                rc[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                kids[i] = 0;
                running--;
            }
        }
        th_sleep_ms(1);
    }
    ck_assert_msg(running == 0, "the uploads did not finish within 60 s");
    for (int i = 0; i < E_CLIENTS; i++)
        ck_assert_msg(rc[i] == 0, "uploader %d failed (code %d, see its message above)", i, rc[i]);
    fprintf(stderr, "decodes: at most %llu bytes of decode budget seen at once\n", (unsigned long long)most);
    ck_assert_msg(most <= E_RECEIVE_BYTES, "decodes of %llu bytes were in progress for one uid, limit %llu",
                  (unsigned long long)most, (unsigned long long)E_RECEIVE_BYTES);
    ck_assert_uint_eq(sum_for(&d, -1).decode_bytes, 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (f) a reload that raises the limit ---- */

/*
 * A connection waiting for its replies to drain goes on when a reload raises
 * client_reply_bytes; a reload that would put it below max_frame_bytes is
 * refused, and a start with it too.
 */
START_TEST(test_reload_raises_limit) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/tf-test-reply-%d.conf", (int)getpid());
    ck_assert_int_eq(
        th_write_file(path, "[daemon]\nmax_frame_bytes = 5M\n[limits]\nclient_reply_bytes = 3M\n"), 0);
    th_daemon d;
    ck_assert_msg(th_daemon_start(&d, "--config", path, (char *)NULL) != 0,
                  "tenferrod started with client_reply_bytes below max_frame_bytes");
    ck_assert_int_eq(
        th_write_file(path, "[daemon]\nmax_frame_bytes = 5M\n[limits]\nclient_reply_bytes = 8M\n"), 0);
    CK_DAEMON_START(&d, "--config", path);
    uint64_t id, seq = 1;
    int fd = th_raw_open(&d, "reload", 1, &id);
    ck_assert_int_ge(fd, 0);
    uint8_t *data = calloc(1, D_TENSOR);
    ck_assert_ptr_nonnull(data);
    ck_assert_int_eq(raw_upload(fd, &seq, 1, data, D_TENSOR, D_TENSOR), 0);
    free(data);
    ck_assert_int_eq(send_downloads(fd, seq, 10, 1, D_TENSOR), 0);
    /* One or two replies of 4 MiB fit in 8 MiB (each carries a few bytes besides its data). */
    uint64_t q = 0;
    for (int i = 0; i < 300 && (q = reply_bytes_of(&d, id)) < D_TENSOR; i++) th_sleep_ms(10);
    th_sleep_ms(200);
    q = reply_bytes_of(&d, id);
    ck_assert_msg(q >= D_TENSOR && q <= 2 * D_TENSOR + 4096, "%llu reply bytes queued under 8 MiB",
                  (unsigned long long)q);

    ck_assert_int_eq(
        th_write_file(path, "[daemon]\nmax_frame_bytes = 5M\n[limits]\nclient_reply_bytes = 2M\n"), 0);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    th_sleep_ms(300);
    /* Refused: no Download more went (a reply may have been encoded meanwhile, a few bytes more). */
    ck_assert_uint_le(reply_bytes_of(&d, id), 2 * D_TENSOR + 4096);
    ck_assert_int_eq(
        th_write_file(path, "[daemon]\nmax_frame_bytes = 5M\n[limits]\nclient_reply_bytes = 24M\n"), 0);
    ck_assert_int_eq(kill(d.pid, SIGHUP), 0);
    for (int i = 0; i < 300 && (q = reply_bytes_of(&d, id)) < 5 * D_TENSOR; i++) th_sleep_ms(10);
    ck_assert_msg(q >= 5 * D_TENSOR && q <= 6 * D_TENSOR + 4096,
                  "%llu reply bytes queued after raising the limit to 24 MiB", (unsigned long long)q);
    char *log = th_daemon_log(&d);
    ck_assert_msg(strstr(log, "client_reply_bytes") != NULL, "the refused reload is not logged");
    free(log);
    close(fd);
    unlink(path);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (g) the submission ring waits too ---- */

/* Connects as `name`, says Hello, maps the ring riding on the reply and says Mapped (seq 2). */
static th_raw_client ring_open(const th_daemon *d, const char *name) {
    th_raw_client r;
    uint64_t seq = 0;
    ck_assert_msg(th_raw_client_open(d, name, &seq, &r) == 0 && r.ring,
                  "no HelloReply with its page and ring");
    return r;
}

/*
 * Writes frame f (numbered seq, after socket frame `after`) as the next ring
 * entry, without ringing: the daemon, polling, finds it by itself (a
 * doorbell would be a socket frame, held by the socket's own gate).
 */
static void ring_submit(th_raw_client *r, Tenferro__Frame *f, uint64_t seq, uint64_t after) {
    f->seq = seq;
    th_ring_write_frame(r, f, after);
}

/* The next reply in the ring, or NULL after timeout_ms. */
static Tenferro__Frame *ring_reply(th_raw_client *r, int timeout_ms) {
    Tenferro__Frame *f;
    th_ring_read(r, timeout_ms, &f, NULL);
    return f;
}

/* Reads one DownloadReply of `bytes` data bytes answering seq from a raw socket. */
static void expect_download(int fd, uint64_t seq, size_t bytes) {
    Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(r && r->seq == seq && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY,
                  "no DownloadReply for request %llu", (unsigned long long)seq);
    ck_assert_uint_eq(r->download_reply->data.len, bytes);
    tf__frame_free(r);
}

/*
 * The submission ring is held to the same rule: with its uid's replies over
 * uid_reply_bytes (another connection's 4 MiB unread, and this one's own
 * 4 MiB, which went because it had nothing queued), a Submit written into
 * the ring is not taken until they are read.
 */
START_TEST(test_ring_waits_for_replies) {
    th_daemon d;
    /* The loop polls the rings for a second after each request, so no doorbell is needed. */
    CK_DAEMON_START(&d, "--max-frame-bytes", "5M", "--client-reply-bytes", "5M", "--uid-reply-bytes",
                    "6M", "--reply-stall-ms", "0", "--busy-poll-us", "1000000");
    uint64_t xid, xseq = 1;
    int x = th_raw_open(&d, "ring-other", 1, &xid);
    ck_assert_int_ge(x, 0);
    uint8_t *data = calloc(1, D_TENSOR);
    ck_assert_ptr_nonnull(data);
    ck_assert_int_eq(raw_upload(x, &xseq, 1, data, D_TENSOR, D_TENSOR), 0);
    th_raw_client y = ring_open(&d, "ring-user");
    uint64_t yseq = 2;
    ck_assert_int_eq(raw_upload(y.fd, &yseq, 1, data, D_TENSOR, D_TENSOR), 0);
    free(data);

    ck_assert_int_eq(send_downloads(x, xseq, 1, 1, D_TENSOR), 0);
    for (int i = 0; i < 300 && reply_bytes_of(&d, xid) < D_TENSOR; i++) th_sleep_ms(10);
    ck_assert_int_eq(send_downloads(y.fd, yseq, 1, 1, D_TENSOR), 0);
    uint64_t ydl = yseq + 1;
    /* No status from here on: this process's own uid is over its limit, its Hello would wait too. */
    th_sleep_ms(300);

    Tenferro__Frame f;
    Tenferro__Submit sub;
    Tenferro__Op op, *ops[1] = {&op};
    uint64_t inputs[2] = {1, 1};
    tenferro__frame__init(&f);
    tenferro__submit__init(&sub);
    tenferro__op__init(&op);
    op.kind = 1; /* TF__OP_ADD */
    op.n_inputs = 2;
    op.inputs = inputs;
    op.output = 2;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.n_ops = 1;
    sub.ops = ops;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    ring_submit(&y, &f, ydl + 1, ydl);
    Tenferro__Frame *r = ring_reply(&y, 400);
    ck_assert_msg(r == NULL, "the ring entry was taken while the uid's replies were over its limit");

    /* The replies are read: the entry goes. */
    expect_download(x, xseq + 1, D_TENSOR);
    expect_download(y.fd, ydl, D_TENSOR);
    r = ring_reply(&y, RAW_MS);
    ck_assert_msg(r != NULL, "the ring entry was not answered once the replies were read");
    ck_assert_uint_eq(r->seq, ydl + 1);
    CK_EXPECT_RESULT(r, TF_OK, NULL);
    ck_assert_uint_eq(sum_for(&d, -1).reply_bytes, 0);
    th_raw_client_close(&y);
    close(x);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (h) a connection closed with its replies unread ---- */

/*
 * A connection the daemon closes (here over a frame longer than the maximum)
 * while replies it never reads are queued: its shutdown would wait for them
 * for ever, keeping their memory and the socket; after reply_stall_ms they
 * are dropped and the socket closed, unread bytes and all.
 */
START_TEST(test_closing_connection_unread) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "5M", "--reply-stall-ms", "500");
    uint64_t id, seq = 1;
    int fd = th_raw_open(&d, "closing-unread", 1, &id);
    ck_assert_int_ge(fd, 0);
    uint8_t *data = calloc(1, D_TENSOR);
    ck_assert_ptr_nonnull(data);
    ck_assert_int_eq(raw_upload(fd, &seq, 1, data, D_TENSOR, D_TENSOR), 0);
    free(data);
    ck_assert_int_eq(send_downloads(fd, seq, 3, 1, D_TENSOR), 0);
    /* Encoded replies (data and fields) queued, not only reservations (data alone). */
    for (int i = 0; i < 300 && reply_bytes_of(&d, id) <= 3 * D_TENSOR; i++) th_sleep_ms(10);
    ck_assert_uint_gt(reply_bytes_of(&d, id), 3 * D_TENSOR);
    /* A header announcing more than the maximum: a protocol error, the connection is closing. */
    uint8_t header[4] = {0xff, 0xff, 0xff, 0x7f};
    ck_assert_int_eq(th_raw_send_bytes(fd, header, sizeof header), 0);
    for (int i = 0; i < 300 && reply_bytes_of(&d, id) != UINT64_MAX; i++) th_sleep_ms(10);
    ck_assert_uint_eq(reply_bytes_of(&d, id), UINT64_MAX);
    /* Unread, the replies hold the shutdown back; then the socket is closed under them. */
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int hung_up = 0;
    for (int i = 0; i < 300 && !hung_up; i++) {
        p.revents = 0;
        hung_up = poll(&p, 1, 10) == 1 && (p.revents & (POLLRDHUP | POLLHUP));
    }
    ck_assert_msg(hung_up, "the closing connection's socket stayed open behind its unread replies");
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- (i) uploads piled up behind a busy stream ---- */

#define I_SIDE 1024                                   /* the matrices of the long work */
#define I_MATMULS 24                                  /* seconds of work on this VM's two cores */
#define I_CHUNK (4 * MIB)                             /* each Upload's data */
#define I_UPLOADS 40                                  /* 160 MiB of them */
#define I_LIMIT (16 * MIB)
#define I_MARGIN (48 * MIB)

/*
 * A client keeps its stream busy (a long run of matrix products), then sends
 * 40 Uploads of 4 MiB in one write. Each Upload's bytes wait, decoded, for
 * the stream to reach their copy: they count like replies the client has not
 * read, so the daemon takes what fits in client_reply_bytes and reads no more
 * until copies have run, instead of holding all 160 MiB. Once the work is
 * done every Upload is answered OK and the tensor holds the last one's bytes.
 */
START_TEST(test_uploads_behind_busy_stream_bounded) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "16M", "--client-reply-bytes", "16M", "--workers", "2");
    uint64_t id, seq = 1;
    int fd = th_raw_open(&d, "busy-uploads", 1, &id);
    ck_assert_int_ge(fd, 0);
    const size_t mbytes = (size_t)I_SIDE * I_SIDE * sizeof(double);
    double *m = malloc(mbytes);
    ck_assert_ptr_nonnull(m);
    th_fill_random(TF_F64, (size_t)I_SIDE * I_SIDE, m);
    {
        int64_t mshape[2] = {I_SIDE, I_SIDE};
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = 1;
        up.create = 1;
        up.dtype = TF_F64;
        up.n_shape = 2;
        up.shape = mshape;
        up.data.data = (uint8_t *)m;
        up.data.len = mbytes;
        f.seq = ++seq;
        f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        f.upload = &up;
        ck_assert_int_eq(th_raw_send(fd, &f), 0);
        ck_assert_int_eq(expect_ok(fd, f.seq), 0);
    }
    free(m);
    double *chunk = malloc(I_CHUNK);
    ck_assert_ptr_nonnull(chunk);
    ck_assert_int_eq(raw_upload(fd, &seq, 2, chunk, I_CHUNK, I_CHUNK), 0); /* the target tensor */
    uint64_t base = rss_bytes(d.pid);

    /*
     * The long work: x_i = m @ m, each freed after it (so the products' memory
     * does not grow), I_MATMULS times, one scoped Submit answered at acceptance.
     */
    static Tenferro__Op ops[2 * I_MATMULS], *ptrs[2 * I_MATMULS];
    static uint64_t ins[2] = {1, 1}, outs[I_MATMULS];
    for (int i = 0; i < I_MATMULS; i++) {
        outs[i] = 100 + (uint64_t)i;
        tenferro__op__init(&ops[2 * i]);
        ops[2 * i].kind = TF__OP_MATMUL;
        ops[2 * i].n_inputs = 2;
        ops[2 * i].inputs = ins;
        ops[2 * i].output = outs[i];
        tenferro__op__init(&ops[2 * i + 1]);
        ops[2 * i + 1].kind = TF__OP_FREE;
        ops[2 * i + 1].n_inputs = 1;
        ops[2 * i + 1].inputs = &outs[i];
        ptrs[2 * i] = &ops[2 * i];
        ptrs[2 * i + 1] = &ops[2 * i + 1];
    }
    Tenferro__Frame sf = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED;
    sub.n_ops = 2 * I_MATMULS;
    sub.ops = ptrs;
    sf.seq = ++seq;
    sf.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    sf.submit = &sub;
    ck_assert_int_eq(th_raw_send(fd, &sf), 0);
    ck_assert_int_eq(expect_ok(fd, sf.seq), 0);

    /* 40 Uploads into tensor 2 in one write, the last one's bytes marked. */
    th_frames frames = {0};
    const uint64_t first = seq + 1;
    for (int i = 0; i < I_UPLOADS; i++) {
        th_fill_random(TF_F64, I_CHUNK / sizeof(double), chunk);
        Tenferro__Frame f;
        Tenferro__Upload up;
        th_raw_build_upload(&f, &up, 2, 0, (tf_dtype)0, 0, NULL, 0, chunk, I_CHUNK);
        f.seq = ++seq;
        ck_assert_int_eq(th_frames_add(&frames, &f), 0);
    }
    /* A writer child, so the parent can watch the daemon while the socket is full. */
    pid_t writer = fork();
    ck_assert_int_ge(writer, 0);
    if (writer == 0) _exit(th_raw_send_bytes(fd, frames.bytes, frames.len) == 0 ? 0 : 1);
    uint64_t peak = 0;
    for (int i = 0; i < 150; i++) {
        uint64_t r = rss_bytes(d.pid);
        if (r > peak) peak = r;
        th_sleep_ms(10);
    }
    fprintf(stderr, "uploads behind a busy stream: VmRSS %llu MiB before, peak %llu MiB (limit %llu MiB)\n",
            (unsigned long long)(base / MIB), (unsigned long long)(peak / MIB),
            (unsigned long long)(I_LIMIT / MIB));
    check_rss(base, peak, I_LIMIT + I_MARGIN, "16 MiB of uploads waiting for their copies allowed");
    uint64_t held = reply_bytes_of(&d, id);
    ck_assert_msg(held <= I_LIMIT + I_CHUNK, "status shows %llu bytes held for the client, limit %llu",
                  (unsigned long long)held, (unsigned long long)I_LIMIT);
    for (uint64_t s = first; s <= seq; s++) {
        /* Answered as the copies run, behind the long work: a generous wait. */
        Tenferro__Frame *ok = th_raw_recv(fd, 120000);
        ck_assert_msg(ok && ok->seq == s && ok->body_case == TENFERRO__FRAME__BODY_RESULT &&
                          ok->result->status == TF_OK,
                      "Upload %llu was not answered OK", (unsigned long long)s);
        tf__frame_free(ok);
    }
    int status;
    ck_assert_int_eq(waitpid(writer, &status, 0), writer);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The tensor holds the last Upload's bytes. */
    Tenferro__Frame df;
    Tenferro__Download dl;
    th_raw_build_download(&df, &dl, 2, 0, I_CHUNK);
    df.seq = ++seq;
    ck_assert_int_eq(th_raw_send(fd, &df), 0);
    Tenferro__Frame *r = th_raw_recv(fd, 60000);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY && r->seq == df.seq,
                  "no DownloadReply");
    ck_assert_uint_eq(r->download_reply->data.len, I_CHUNK);
    ck_assert_int_eq(memcmp(r->download_reply->data.data, chunk, I_CHUNK), 0);
    tf__frame_free(r);
    th_frames_free(&frames);
    free(chunk);
    ck_assert_uint_eq(reply_bytes_of(&d, id), 0);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *reply_bounds_suite(void) {
    Suite *s = suite_create("reply-bounds");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_unread_downloads_bounded);
    tcase_add_test(tc, test_unread_status_bounded);
    tcase_add_test(tc, test_slow_reader_served);
    tcase_add_test(tc, test_uid_bound);
    tcase_add_test(tc, test_decodes_bounded_per_uid);
    tcase_add_test(tc, test_reload_raises_limit);
    tcase_add_test(tc, test_ring_waits_for_replies);
    tcase_add_test(tc, test_closing_connection_unread);
    tcase_add_test(tc, test_uploads_behind_busy_stream_bounded);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    th_seed();
    SRunner *sr = srunner_create(reply_bounds_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
