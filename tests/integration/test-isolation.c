/*
 * Isolation and robustness against a hostile local user (docs/security.md):
 * one test per way a client could read another's bytes, forge the daemon's
 * log or an operator's screen, lock others out, make the daemon buffer
 * memory outside any limit, or lose replies. Most speak raw frames, some as
 * an unprivileged uid (a child drops to it before connecting), because the
 * client library would never send what they send.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define NOBODY 65534
#define RAW_MS 10000
/* The tensor the zero-fill tests create: 512 f64, as a hostile client would ask for. */
#define ELEMS 512
#define BYTES (ELEMS * sizeof(double))

static uint64_t g_seq = 1000;

/* ---- raw frames ---- */

/* Sends f with a fresh sequence number and returns the reply (NULL on EOF or timeout). */
static Tenferro__Frame *call(int fd, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    if (th_raw_send(fd, f) != 0) return NULL;
    return th_raw_recv(fd, RAW_MS);
}

/* Builds an Upload of `len` bytes at `offset` into tensor id (creating it, ELEMS f64, when create). */
static void build_upload(Tenferro__Frame *f, Tenferro__Upload *up, uint64_t id, int create,
                         size_t offset, const void *data, size_t len) {
    static const int64_t shape[1] = {ELEMS};
    th_raw_build_upload(f, up, id, create, TF_F64, create ? 1 : 0, shape, offset, data, len);
}

/* Sends an Upload and expects it accepted. */
static void upload(int fd, uint64_t id, int create, size_t offset, const void *data, size_t len) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    build_upload(&f, &up, id, create, offset, data, len);
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
}

/* Downloads `len` bytes of tensor id into dst; fails the test unless the reply carries them. */
static void download(int fd, uint64_t id, void *dst, size_t len) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, len);
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY, "no DownloadReply");
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(r->download_reply->data.len, len);
    memcpy(dst, r->download_reply->data.data, len);
    tf__frame_free(r);
}

/* Operations of one Submit: negations, each reading `input` (or the previous output when chained). */
typedef struct op_list {
    int n;
    Tenferro__Op *ops;
    Tenferro__Op **ptrs;
    uint64_t *ins;
} op_list;

/* Fills *l with n negations writing outputs first_out, first_out + 1, ... */
static void neg_ops(op_list *l, int n, uint64_t input, uint64_t first_out, int chained) {
    l->n = n;
    l->ops = calloc((size_t)n, sizeof *l->ops);
    l->ptrs = calloc((size_t)n, sizeof *l->ptrs);
    l->ins = calloc((size_t)n, sizeof *l->ins);
    ck_assert(l->ops && l->ptrs && l->ins);
    for (int i = 0; i < n; i++) {
        tenferro__op__init(&l->ops[i]);
        l->ins[i] = chained && i > 0 ? first_out + (uint64_t)i - 1 : input;
        l->ops[i].kind = TENFERRO__OP_KIND__OP_NEG;
        l->ops[i].n_inputs = 1;
        l->ops[i].inputs = &l->ins[i];
        l->ops[i].output = first_out + (uint64_t)i;
        l->ptrs[i] = &l->ops[i];
    }
}

static void op_list_free(op_list *l) {
    free(l->ops);
    free(l->ptrs);
    free(l->ins);
}

/* Builds a Submit frame of mode carrying the operations of l. */
static void build_submit(Tenferro__Frame *f, Tenferro__Submit *sub, const op_list *l, uint32_t mode) {
    tenferro__frame__init(f);
    tenferro__submit__init(sub);
    sub->mode = mode;
    sub->n_ops = (size_t)l->n;
    sub->ops = l->ptrs;
    f->body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f->submit = sub;
}

/* ---- 1. bytes of another client ---- */

/* Fills n doubles with a recognizable secret: never zero. */
static void fill_secret(double *v, size_t n, double base) {
    for (size_t i = 0; i < n; i++) v[i] = base + (double)i;
}

/* 1 when every byte of p is zero. */
static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}

/*
 * A victim uploads secrets into many tensors and frees them; an attacker
 * then creates tensors of the same size without data, with a partial write,
 * with a write that leaves a gap, and uses one as an operation input. Every
 * byte it did not write reads as zero, on every route (download, op input).
 */
START_TEST(test_unwritten_bytes_read_zero) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    enum { ROUNDS = 6, TENSORS = 24 };
    static double secret[ELEMS], back[ELEMS];
    int leaked = 0;
    for (int round = 0; round < ROUNDS; round++) {
        int victim = th_raw_open(&d, "victim", ++g_seq, NULL);
        ck_assert_int_ge(victim, 0);
        fill_secret(secret, ELEMS, 1000.0 * (round + 1));
        for (uint64_t id = 1; id <= TENSORS; id++) upload(victim, id, 1, 0, secret, BYTES);
        download(victim, 1, back, BYTES); /* the uploads have run */
        ck_assert(memcmp(back, secret, BYTES) == 0);
        close(victim); /* its tensors go back to the daemon's memory */
        ck_assert(th_wait_counter(&d, "tensors_freed", th_counter(&d, "tensors_created"), RAW_MS));

        int attacker = th_raw_open(&d, "attacker", ++g_seq, NULL);
        ck_assert_int_ge(attacker, 0);
        for (uint64_t id = 1; id <= TENSORS; id++) {
            upload(attacker, id, 1, 0, NULL, 0);
            download(attacker, id, back, BYTES);
            leaked += !all_zero(back, BYTES);
        }
        /* Half written: the other half reads zero, the written half is the attacker's own. */
        double mine[ELEMS / 2];
        fill_secret(mine, ELEMS / 2, -5.0);
        upload(attacker, 101, 1, 0, mine, sizeof mine);
        download(attacker, 101, back, BYTES);
        ck_assert(memcmp(back, mine, sizeof mine) == 0);
        leaked += !all_zero(back + ELEMS / 2, BYTES / 2);
        /* A write past a gap: the gap reads zero. */
        upload(attacker, 102, 1, 0, NULL, 0);
        upload(attacker, 102, 0, BYTES / 2, mine, sizeof mine);
        download(attacker, 102, back, BYTES);
        leaked += !all_zero(back, BYTES / 2);
        ck_assert(memcmp(back + ELEMS / 2, mine, sizeof mine) == 0);
        /* An operation reading an unwritten tensor sees zeros: neg(0) = 0. */
        upload(attacker, 103, 1, 0, NULL, 0);
        op_list neg;
        neg_ops(&neg, 1, 103, 104, 0);
        Tenferro__Frame f;
        Tenferro__Submit sub;
        build_submit(&f, &sub, &neg, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL);
        CK_EXPECT_RESULT(call(attacker, &f), TF_OK, NULL);
        op_list_free(&neg);
        download(attacker, 104, back, BYTES);
        for (int i = 0; i < ELEMS; i++) leaked += back[i] != 0.0;
        close(attacker);
    }
    ck_assert_msg(leaked == 0, "%d reads returned bytes the reader never wrote", leaked);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 2. log and terminal injection ---- */

#define EVIL_NAME "evil\n<0>tenferrod error: forged line\r\x1b]0;owned\x07\x1b[2J"

/*
 * A name with a newline, a syslog priority and terminal escapes: the log has
 * no forged line and no control byte, and tenferroctl status shows the name
 * escaped; the client itself still works.
 */
START_TEST(test_name_injection) {
    th_daemon d;
    CK_DAEMON_START(&d, "--log-level", "debug");
    int fd = th_raw_open(&d, EVIL_NAME, ++g_seq, NULL);
    ck_assert_int_ge(fd, 0);
    static double x[ELEMS], back[ELEMS];
    fill_secret(x, ELEMS, 3.0);
    upload(fd, 1, 1, 0, x, BYTES);
    download(fd, 1, back, BYTES);
    ck_assert(memcmp(x, back, BYTES) == 0);
    static char out[1 << 16];
    ck_assert_int_eq(th_run_ctl(&d, out, sizeof out, "status", NULL), 0);
    ck_assert_msg(strstr(out, "evil\\x0a<0>tenferrod"), "the name is not shown escaped: %s", out);
    for (const char *p = out; *p; p++)
        ck_assert_msg(*p == '\n' || ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f),
                      "tenferroctl status printed byte 0x%02x", (unsigned char)*p);
    close(fd);
    char *log = th_daemon_log(&d); /* the daemon writes each line at once */
    CK_DAEMON_STOP(&d);
    ck_assert_msg(strstr(log, "evil\\x0a<0>"), "the name is not in the log, escaped: %s", log);
    for (char *line = log; *line; line = strchr(line, '\n') + 1) {
        ck_assert_msg(line[0] == '<' && strncmp(line + 2, ">tenferrod ", 11) == 0,
                      "a log line does not come from the daemon: %.80s", line);
        char *end = strchr(line, '\n');
        ck_assert_msg(end, "an unterminated log line: %s", line);
        for (char *p = line; p < end; p++)
            ck_assert_msg((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
                          "log byte 0x%02x in: %.80s", (unsigned char)*p, line);
    }
    free(log);
}
END_TEST

/* ---- 3. lock-out by idle connections ---- */

/* What a child of the lock-out test does: open n connections as uid and hold them. */
typedef struct idle_plan {
    const th_daemon *d;
    uid_t uid;
    int n;
    int hold_ms;
    int pipe_w; /* the child writes how many connections the daemon kept open after 200 ms */
} idle_plan;

static int hold_idle(void *arg) {
    idle_plan *p = arg;
    th_die_with_parent();
    CHILD_CHECK(th_become(p->uid, p->uid));
    int fds[512], open_after = 0;
    for (int i = 0; i < p->n; i++) fds[i] = th_raw_connect(p->d);
    th_sleep_ms(200);
    for (int i = 0; i < p->n; i++) open_after += fds[i] >= 0 && !th_raw_closed(fds[i], 0);
    CHILD_CHECK(write(p->pipe_w, &open_after, sizeof open_after) == sizeof open_after);
    th_sleep_ms(p->hold_ms);
    return 0;
}

/* Starts a child holding n idle connections as uid; returns how many the daemon left open. */
static int start_idle(const th_daemon *d, uid_t uid, int n, int hold_ms, pid_t *pid) {
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    idle_plan plan = {d, uid, n, hold_ms, p[1]};
    *pid = th_spawn(hold_idle, &plan);
    close(p[1]);
    int open_after = -1;
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, RAW_MS), 1);
    ck_assert_int_eq(read(p[0], &open_after, sizeof open_after), (ssize_t)sizeof open_after);
    close(p[0]);
    return open_after;
}

/*
 * 256 idle connections of a user the access list refuses are closed at
 * accept; idle connections of an allowed user are capped per uid and closed
 * at the Hello deadline; pre-Hello connections never count against
 * max_clients. Through it all a real client connects and works.
 */
START_TEST(test_idle_connections_lock_nobody_out) {
    th_daemon d;
    char allowed[32];
    snprintf(allowed, sizeof allowed, "%u", (unsigned)NOBODY - 1);
    /* Five clients: the four below and the status connection th_counter makes. */
    CK_DAEMON_START(&d, "--socket-mode", "0666", "--allowed-users", allowed, "--max-clients", "5",
                    "--hello-timeout-ms", "1500", "--max-handshakes-per-uid", "8");
    pid_t refused, capped;
    int left = start_idle(&d, NOBODY, 256, 3000, &refused);
    ck_assert_msg(left == 0, "%d connections of a refused uid stayed open", left);
    left = start_idle(&d, NOBODY - 1, 40, 3000, &capped);
    ck_assert_msg(left == 8, "%d idle connections of an allowed uid stayed open, want 8", left);
    /* Root (always allowed) is not locked out, and max_clients counts only real clients. */
    tf_client *c[4];
    for (int i = 0; i < 4; i++) c[i] = th_connect(&d);
    tf_tensor t;
    double v[4] = {1, 2, 3, 4}, w[4];
    void *wp = w;
    size_t wcap = sizeof w;
    CK_STATUS(c[3], tf_upload(c[3], TF_F64, 1, (int64_t[]){4}, v, &t), TF_OK);
    CK_STATUS(c[3], tf_download_into(c[3], t, &wp, &wcap), TF_OK);
    ck_assert(memcmp(v, w, sizeof v) == 0);
    ck_assert_uint_ge(th_counter(&d, "connections_refused"), 256 + 32);
    /*
     * The status counts them, though they are no client yet: the uid's 8 (root's 4 are past
     * their Hello), or fewer once the deadline has begun closing them.
     */
    const uint64_t before_hello = th_counter(&d, "handshakes_live");
    ck_assert_uint_le(before_hello, 8);
    ck_assert_msg(before_hello == 8 || th_counter(&d, "handshake_timeouts") > 0,
                  "%llu connections before their Hello listed, 8 open",
                  (unsigned long long)before_hello);
    /* The allowed uid's idle connections are closed at the deadline. */
    ck_assert(th_wait_counter(&d, "handshake_timeouts", 8, RAW_MS));
    ck_assert_uint_eq(th_counter(&d, "handshakes_live"), 0);
    for (int i = 0; i < 4; i++) tf_disconnect(c[i]);
    ck_assert_int_eq(th_wait(refused), 0);
    ck_assert_int_eq(th_wait(capped), 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Clients of one uid past their Hello are capped, and another uid still gets in. */
START_TEST(test_clients_per_uid) {
    th_daemon d;
    CK_DAEMON_START(&d, "--socket-mode", "0666", "--max-clients-per-uid", "3");
    int pw[2];
    ck_assert_int_eq(pipe(pw), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        th_die_with_parent();
        int ok = 0;
        if (th_become(NOBODY, NOBODY)) {
            tf_client *c[4] = {0};
            tf_status st[4];
            for (int i = 0; i < 4; i++) st[i] = tf_connect(d.socket, &c[i]);
            ok = st[0] == TF_OK && st[1] == TF_OK && st[2] == TF_OK &&
                 st[3] == TF_ERR_TOO_MANY_CLIENTS &&
                 strstr(tf_client_last_error(c[3]), "max_clients_per_uid") != NULL;
            if (!ok) fprintf(stderr, "4th: %s: %s\n", tf_status_name(st[3]), tf_client_last_error(c[3]));
            if (write(pw[1], &ok, sizeof ok) != sizeof ok) _exit(2);
            th_sleep_ms(500);
            for (int i = 0; i < 4; i++) tf_disconnect(c[i]);
        }
        _exit(ok ? 0 : 1);
    }
    close(pw[1]);
    int ok = 0;
    ck_assert_int_eq(read(pw[0], &ok, sizeof ok), (ssize_t)sizeof ok);
    close(pw[0]);
    ck_assert_msg(ok, "the uid's fourth client was not refused as documented");
    tf_client *root = th_connect(&d); /* another uid, while nobody holds its three */
    tf_disconnect(root);
    ck_assert_int_eq(th_wait(pid), 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 4. memory outside any quota ---- */

/* Sends the header of a frame of `len` bytes and `sent` bytes of its body. */
static int start_frame(int fd, uint32_t len, size_t sent) {
    uint8_t hdr[4];
    tf__frame_put_length(hdr, len);
    if (th_raw_send_bytes(fd, hdr, 4) != 0) return -1;
    static uint8_t junk[1 << 16];
    for (size_t done = 0; done < sent;) {
        size_t n = sent - done < sizeof junk ? sent - done : sizeof junk;
        if (th_raw_send_bytes(fd, junk, n) != 0) return -1;
        done += n;
    }
    return 0;
}

/*
 * Unfinished frames of one uid are buffered up to [limits] uid_receive_bytes:
 * the connection whose frame would go over gets TF_ERR_QUOTA and is closed,
 * the others keep working, status shows what is buffered, and once the
 * connections go the daemon holds no buffer any more.
 */
START_TEST(test_receive_buffers_bounded_per_uid) {
    th_daemon d;
    CK_DAEMON_START(&d, "--socket-mode", "0666", "--uid-receive-bytes", "8M", "--max-frame-bytes",
                    "16M");
    int pw[2];
    ck_assert_int_eq(pipe(pw), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        th_die_with_parent();
        int result = 1;
        if (th_become(NOBODY, NOBODY)) {
            int a = th_raw_open(&d, "holder-a", ++g_seq, NULL);
            int b = th_raw_open(&d, "holder-b", ++g_seq, NULL);
            /* 3 MiB of a 3 MiB + 1 frame: a 4 MiB buffer each, 8 MiB for the uid. */
            int ok = a >= 0 && b >= 0 && start_frame(a, (3u << 20) + 1, 3u << 20) == 0 &&
                     start_frame(b, (3u << 20) + 1, 3u << 20) == 0;
            if (!ok) fprintf(stderr, "the two holders could not start their frames\n");
            th_sleep_ms(300);
            int c = th_raw_open(&d, "over", ++g_seq, NULL);
            /* Refused as soon as its header is read: the whole frame would not fit. */
            ok = ok && c >= 0 && start_frame(c, (3u << 20) + 1, 0) == 0;
            if (!ok) fprintf(stderr, "the third connection could not start its frame\n");
            Tenferro__Frame *word = ok ? th_raw_recv(c, RAW_MS) : NULL;
            if (ok && !word) fprintf(stderr, "no last word on the third connection\n");
            ok = ok && word && word->seq == 0 && word->body_case == TENFERRO__FRAME__BODY_RESULT &&
                 word->result->status == TF_ERR_QUOTA &&
                 strstr(word->result->message, "uid_receive_bytes") && th_raw_closed(c, RAW_MS);
            if (word && !ok) fprintf(stderr, "last word: %s\n", word->result ? word->result->message : "?");
            tf__frame_free(word);
            /* The two buffered connections are untouched: a fresh request is still served. */
            int e = ok ? th_raw_open(&d, "fresh", ++g_seq, NULL) : -1;
            ok = ok && e >= 0;
            if (e >= 0) close(e);
            if (write(pw[1], &ok, sizeof ok) != sizeof ok) _exit(2);
            th_sleep_ms(800); /* the test process reads the status meanwhile */
            result = !ok;
        }
        _exit(result);
    }
    close(pw[1]);
    int ok = 0;
    ck_assert_int_eq(read(pw[0], &ok, sizeof ok), (ssize_t)sizeof ok);
    close(pw[0]);
    ck_assert_msg(ok, "the frame over the uid's receive budget was not refused as documented");
    Tenferro__Frame *status = th_status_report(&d);
    ck_assert_ptr_nonnull(status);
    uint64_t buffered = 0; /* what the budget counts: buffers grown beyond the first 64 KiB */
    for (size_t i = 0; i < status->status_reply->n_clients; i++) {
        const Tenferro__ClientInfo *ci = status->status_reply->clients[i];
        if (ci->uid == NOBODY && ci->receive_buffer_bytes > TF__MIN_MAX_FRAME_BYTES)
            buffered += ci->receive_buffer_bytes;
    }
    tf__frame_free(status);
    ck_assert_msg(buffered == (8u << 20), "status shows %llu bytes buffered for uid nobody, want 8 MiB",
                  (unsigned long long)buffered);
    ck_assert_uint_ge(th_counter(&d, "quota_refusals"), 1);
    ck_assert_int_eq(th_wait(pid), 0);
    for (int i = 0; i < 200 && th_client_count(&d) != 0; i++) th_sleep_ms(10);
    ck_assert_int_eq(th_client_count(&d), 0);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* After one large frame a connection's receive buffer shrinks back: it does not keep megabytes. */
START_TEST(test_receive_buffer_shrinks) {
    th_daemon d;
    CK_DAEMON_START(&d, "--log-level", "info");
    int fd = th_raw_open(&d, "big-once", ++g_seq, NULL);
    ck_assert_int_ge(fd, 0);
    static double big[1 << 18]; /* 2 MiB */
    fill_secret(big, 1 << 18, 1.0);
    Tenferro__Frame f;
    Tenferro__Upload up;
    static int64_t shape[1] = {1 << 18};
    build_upload(&f, &up, 7, 1, 0, big, sizeof big);
    up.shape = shape;
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
    Tenferro__Frame *status = th_status_report(&d);
    ck_assert_ptr_nonnull(status);
    uint64_t id = 0;
    for (size_t i = 0; i < status->status_reply->n_clients; i++)
        if (strcmp(status->status_reply->clients[i]->name, "big-once") == 0)
            id = status->status_reply->clients[i]->client_id;
    const Tenferro__ClientInfo *ci = th_find_client(status, id);
    ck_assert_ptr_nonnull(ci);
    ck_assert_msg(ci->receive_buffer_bytes <= (256u << 10), "%llu bytes kept after the frame",
                  (unsigned long long)ci->receive_buffer_bytes);
    tf__frame_free(status);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 5. half-close ---- */

/*
 * Requests fully sent before the client shuts its write side are all
 * answered: a download waiting on the stream behind a burst of work, and a
 * scoped final frame; then the daemon closes.
 */
START_TEST(test_half_close_answered) {
    th_daemon d;
    CK_DAEMON_START(&d, "--log-level", "info");
    int fd = th_raw_open(&d, "half-close", ++g_seq, NULL);
    ck_assert_int_ge(fd, 0);
    static double x[ELEMS], back[ELEMS];
    fill_secret(x, ELEMS, 0.5);
    upload(fd, 1, 1, 0, x, BYTES);
    /* A scoped burst of 2000 chained negations, its final frame, then a download: all before SHUT_WR. */
    enum { OPS = 2000 };
    op_list chain;
    neg_ops(&chain, OPS, 1, 10, 1);
    Tenferro__Frame f;
    Tenferro__Submit sub;
    build_submit(&f, &sub, &chain, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL);
    f.seq = 77;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    Tenferro__Frame g;
    Tenferro__Download dl;
    th_raw_build_download(&g, &dl, 10 + OPS - 1, 0, BYTES);
    g.seq = 78;
    ck_assert_int_eq(th_raw_send(fd, &g), 0);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    Tenferro__Frame *r1 = th_raw_recv(fd, RAW_MS), *r2 = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(r1 && r1->seq == 77, "the scoped final frame was not answered");
    CK_RESULT(r1->result, TF_OK, NULL);
    ck_assert_msg(r2 && r2->seq == 78 && r2->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY,
                  "the download was not answered");
    CK_RESULT(r2->download_reply->result, TF_OK, NULL);
    memcpy(back, r2->download_reply->data.data, BYTES);
    for (int i = 0; i < ELEMS; i++) ck_assert(back[i] == x[i]); /* an even number of negations */
    tf__frame_free(r1);
    tf__frame_free(r2);
    ck_assert_msg(th_raw_closed(fd, RAW_MS), "the daemon did not close after answering");
    close(fd);
    op_list_free(&chain);
    ck_assert(th_wait_counter(&d, "tensors_freed", OPS + 1, RAW_MS));
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 6. frames above the limit ---- */

/* Reads one frame's header and body raw; returns the body length (the frame is dropped). */
static long recv_raw_length(int fd, int timeout_ms) {
    uint8_t hdr[4];
    size_t got = 0;
    while (got < 4) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) != 1) return -1;
        ssize_t n = recv(fd, hdr + got, 4 - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    long len = (long)tf__frame_peek_length(hdr);
    static uint8_t sink[1 << 16];
    for (long left = len; left > 0;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) != 1) return -1;
        ssize_t n = recv(fd, sink, left < (long)sizeof sink ? (size_t)left : sizeof sink, 0);
        if (n <= 0) return -1;
        left -= n;
    }
    return len;
}

/*
 * Every reply stays within the frame maximum: a read of the whole maximum is
 * refused typed (read in chunks), one of the documented largest chunk comes
 * back in a frame no longer than the maximum, and the client library's
 * chunked download of a larger tensor is correct.
 */
START_TEST(test_replies_within_frame_limit) {
    th_daemon d;
    CK_DAEMON_START(&d, "--max-frame-bytes", "65536");
    int fd = th_raw_open(&d, "limits", ++g_seq, NULL);
    ck_assert_int_ge(fd, 0);
    /* A 128 KiB tensor, written in two chunks of the documented size. */
    size_t chunk = 65536 - 4096, total = 2 * chunk;
    uint8_t *data = malloc(total);
    for (size_t i = 0; i < total; i++) data[i] = (uint8_t)(i * 7 + 1);
    Tenferro__Frame f;
    Tenferro__Upload up;
    int64_t shape[1] = {(int64_t)(total / sizeof(double))};
    build_upload(&f, &up, 5, 1, 0, data, chunk);
    up.shape = shape;
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
    build_upload(&f, &up, 5, 0, chunk, data + chunk, chunk);
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, 5, 0, 65536);
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY, "no DownloadReply");
    CK_RESULT(r->download_reply->result, TF_ERR_INVALID_ARGUMENT, "chunks of at most 61440");
    tf__frame_free(r);
    th_raw_build_download(&f, &dl, 5, 0, chunk);
    f.seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    long len = recv_raw_length(fd, RAW_MS);
    ck_assert_msg(len > 0 && len <= 65536, "a reply of %ld bytes against a maximum of 65536", len);
    close(fd);

    tf_client *c = th_connect(&d);
    tf_tensor t;
    int64_t n = (int64_t)(total / sizeof(double));
    CK_STATUS(c, tf_upload(c, TF_F64, 1, &n, data, &t), TF_OK);
    void *back = NULL;
    size_t cap = 0;
    CK_STATUS(c, tf_download_into(c, t, &back, &cap), TF_OK);
    ck_assert(cap >= total && memcmp(back, data, total) == 0);
    tf_disconnect(c);
    free(back);
    free(data);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 7. pipelined Hello ---- */

/* A request above the pre-Hello 64 KiB limit, written in one go with the Hello, is served. */
START_TEST(test_pipelined_hello) {
    th_daemon d;
    CK_DAEMON_START(&d, "--log-level", "info");
    int fd = th_raw_connect(&d);
    ck_assert_int_ge(fd, 0);
    Tenferro__Frame hf = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    h.client_name = "pipelined";
    hf.body_case = TENFERRO__FRAME__BODY_HELLO;
    hf.hello = &h;
    hf.seq = 1;
    static double x[1 << 14]; /* 128 KiB */
    fill_secret(x, 1 << 14, 2.0);
    Tenferro__Frame uf;
    Tenferro__Upload up;
    static int64_t shape[1] = {1 << 14};
    build_upload(&uf, &up, 9, 1, 0, x, sizeof x);
    up.shape = shape;
    uf.seq = 2;
    uint8_t *a, *b;
    size_t alen, blen;
    ck_assert_int_eq(tf__frame_encode(&hf, 1 << 20, &a, &alen), TF_OK);
    ck_assert_int_eq(tf__frame_encode(&uf, 1 << 20, &b, &blen), TF_OK);
    uint8_t *both = malloc(alen + blen);
    memcpy(both, a, alen);
    memcpy(both + alen, b, blen);
    ck_assert_int_eq(th_raw_send_bytes(fd, both, alen + blen), 0);
    free(a);
    free(b);
    free(both);
    Tenferro__Frame *hr = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(hr && hr->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY, "no HelloReply");
    tf__frame_free(hr);
    CK_EXPECT_RESULT(th_raw_recv(fd, RAW_MS), TF_OK, NULL);
    static double back[1 << 14];
    Tenferro__Frame df;
    Tenferro__Download dl;
    th_raw_build_download(&df, &dl, 9, 0, sizeof back);
    Tenferro__Frame *r = call(fd, &df);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY, "no DownloadReply");
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert(r->download_reply->data.len == sizeof back &&
              memcmp(r->download_reply->data.data, x, sizeof x) == 0);
    tf__frame_free(r);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- 8. one client's huge batches do not hold the others ---- */

/* Creates tensor id of 4 f64: the input of batches with many operations (small outputs). */
static void upload_small(int fd, uint64_t id) {
    static double x[4] = {1, 2, 3, 4};
    static int64_t shape4[1] = {4};
    Tenferro__Frame f;
    Tenferro__Upload up;
    build_upload(&f, &up, id, 1, 0, x, sizeof x);
    up.shape = shape4;
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
}

/* A Submit beyond TF__MAX_OPS_PER_SUBMIT is refused typed; the connection stays usable. */
START_TEST(test_submit_op_limit) {
    th_daemon d;
    CK_DAEMON_START(&d, "--log-level", "info");
    int fd = th_raw_open(&d, "too-many-ops", ++g_seq, NULL);
    ck_assert_int_ge(fd, 0);
    upload_small(fd, 1);
    enum { OPS = TF__MAX_OPS_PER_SUBMIT + 1 };
    op_list many;
    neg_ops(&many, OPS, 1, 100, 0);
    Tenferro__Frame f;
    Tenferro__Submit sub;
    build_submit(&f, &sub, &many, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL);
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_ptr_nonnull(r);
    CK_RESULT(r->result, TF_ERR_INVALID_ARGUMENT, "at most 65536");
    ck_assert_uint_eq(r->result->ops_accepted, 0);
    tf__frame_free(r);
    /* The same batch at the limit is accepted whole. */
    sub.n_ops = OPS - 1;
    r = call(fd, &f);
    ck_assert_ptr_nonnull(r);
    CK_RESULT(r->result, TF_OK, NULL);
    ck_assert_uint_eq(r->result->ops_accepted, OPS - 1);
    tf__frame_free(r);
    op_list_free(&many);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * While a flooder's largest batches are validated in slices, a light client's
 * round trips interleave with them: most of its requests are answered while
 * a batch is still being checked (the daemon's answer order shows it). The
 * latency figures themselves come from bench-hostile (docs/benchmarks.md).
 */
START_TEST(test_batches_yield_the_loop) {
    th_daemon d;
    /* Four full batches of new tensors: more than the default live_tensors quota allows. */
    CK_DAEMON_START(&d, "--loop-slice-us", "500", "--client-live-tensors", "0", "--uid-live-tensors",
                    "0", "--client-queued-ops", "0", "--uid-queued-ops", "0");
    int flood = th_raw_open(&d, "flooder", ++g_seq, NULL);
    ck_assert_int_ge(flood, 0);
    upload_small(flood, 1);
    enum { OPS = TF__MAX_OPS_PER_SUBMIT, BATCHES = 4 };
    op_list batch;
    neg_ops(&batch, OPS, 1, 100, 0);
    Tenferro__Frame sf;
    Tenferro__Submit sub;
    build_submit(&sf, &sub, &batch, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED);
    int light = th_raw_open(&d, "light", ++g_seq, NULL);
    ck_assert_int_ge(light, 0);
    int answered_during = 0, asked = 0;
    for (int b = 0; b < BATCHES; b++) {
        for (int i = 0; i < OPS; i++) batch.ops[i].output = (uint64_t)(100 + b * OPS + i);
        sf.seq = ++g_seq;
        ck_assert_int_eq(th_raw_send(flood, &sf), 0);
        /* Round trips of the light client until the flooder's batch is answered. */
        for (;;) {
            struct pollfd p = {.fd = flood, .events = POLLIN};
            if (poll(&p, 1, 0) == 1) break;
            Tenferro__Frame st = TENFERRO__FRAME__INIT;
            Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
            st.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
            st.status_request = &sr;
            Tenferro__Frame *r = call(light, &st);
            ck_assert_ptr_nonnull(r);
            tf__frame_free(r);
            asked++;
            if (poll(&p, 1, 0) == 0) answered_during++;
        }
        Tenferro__Frame *r = th_raw_recv(flood, RAW_MS);
        ck_assert_ptr_nonnull(r);
        CK_RESULT(r->result, TF_OK, NULL);
        ck_assert_uint_eq(r->result->ops_accepted, OPS);
        tf__frame_free(r);
    }
    ck_assert_msg(answered_during >= BATCHES,
                  "only %d of %d light requests were answered while a batch was being checked",
                  answered_during, asked);
    /* Each batch took longer than a slice to check: it gave the loop up at least once. */
    ck_assert_uint_ge(th_counter(&d, "loop_yields"), BATCHES);
    op_list_free(&batch);
    close(light);
    close(flood);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *isolation_suite(void) {
    Suite *s = suite_create("isolation");
    TCase *tc = tcase_create("hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_unwritten_bytes_read_zero);
    tcase_add_test(tc, test_name_injection);
    tcase_add_test(tc, test_idle_connections_lock_nobody_out);
    tcase_add_test(tc, test_clients_per_uid);
    tcase_add_test(tc, test_receive_buffers_bounded_per_uid);
    tcase_add_test(tc, test_receive_buffer_shrinks);
    tcase_add_test(tc, test_half_close_answered);
    tcase_add_test(tc, test_replies_within_frame_limit);
    tcase_add_test(tc, test_pipelined_hello);
    tcase_add_test(tc, test_submit_op_limit);
    tcase_add_test(tc, test_batches_yield_the_loop);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(isolation_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
