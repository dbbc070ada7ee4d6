/*
 * Hostile clients of the load test and the soak: processes that speak raw
 * frames to the daemon the way a broken or malicious peer would, to show
 * that none of it takes the daemon down, disturbs another client, or leaves
 * anything behind once the connection is gone. One hostile child loops over
 * these until its deadline:
 *
 *   garbage        a frame whose body cannot decode (its first byte has an
 *                  invalid wire type), with or without a Hello before it:
 *                  the daemon must close the connection;
 *   before_hello   a well-formed request other than Hello as the first frame:
 *                  closed;
 *   bad_version    Hello with a protocol version no daemon speaks: refused
 *                  with TF_ERR_VERSION;
 *   huge_length    a header announcing more than the maximum frame: closed;
 *   truncated      part of a frame, then the client closes (at once or after
 *                  a moment);
 *   big_partial    after Hello, a header announcing up to 8 MiB, a part of
 *                  it, a pause, and the client closes (a bounded version of
 *                  an unfinished frame that would sit in the daemon's buffer);
 *   wrong_handles  after Hello, requests naming tensors, buffers, sessions and
 *                  slots that do not exist: each a typed refusal, and the
 *                  connection stays usable;
 *   never_hello    one to three connections that send nothing for one to
 *                  three seconds; whether the daemon closed them first is
 *                  counted (a Hello deadline would do that), then the client
 *                  closes them;
 *   vanish         connect and close, or close right after sending Hello or
 *                  a Download, without reading any reply.
 *
 * Every connection is closed by the client within a few seconds and before
 * the deadline, so a daemon that never times out a silent peer still gets
 * every one back before the soak's quiet point. What the daemon must answer
 * is checked; an answer that breaks the contract is counted as unexpected.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/load/load.h"

/* Longest the client waits for an answer, or for the daemon to close. */
#define HOSTILE_WAIT_MS 5000
/* Largest partial frame a big_partial connection announces. */
#define PARTIAL_MAX_BYTES (8u << 20)
/* Unexpected outcomes printed in full. */
#define PRINT_ERRORS 3

typedef struct hostile {
    const th_daemon *d;
    uint64_t rng;
    uint64_t deadline_ms;
    report *rep;
    int printed;
    uint64_t seq;
} hostile;

static uint64_t rnd(hostile *h) { return th_splitmix(&h->rng); }
/* Uniform in [0, n). */
static int below(hostile *h, int n) { return n <= 1 ? 0 : (int)(rnd(h) % (uint64_t)n); }

/* Counts an outcome that breaks the contract and prints the first few. */
static void unexpected(hostile *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unexpected(hostile *h, const char *fmt, ...) {
    h->rep->c[C_unexpected]++;
    if (h->printed++ >= PRINT_ERRORS) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "load: hostile pid %d: unexpected: %s\n", (int)getpid(), msg);
}

/* Milliseconds left before the deadline (0 when past it). */
static int left_ms(const hostile *h) {
    uint64_t now = now_ms();
    return now >= h->deadline_ms ? 0 : (int)(h->deadline_ms - now);
}

/* A raw connection, or -1 (counted as unexpected: the daemon must keep accepting). */
static int open_raw(hostile *h) {
    int fd = th_raw_connect(h->d);
    if (fd < 0) unexpected(h, "connect failed: %s", strerror(errno));
    return fd;
}

/* Hello on fd; returns the daemon's maximum frame size, or 0 (unexpected) when it did not answer. */
static uint64_t say_hello(hostile *h, int fd) {
    Tenferro__Frame *r = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    uint64_t max = 0;
    if (r && r->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY) max = r->hello_reply->max_frame_bytes;
    tf__frame_free(r);
    if (!max) unexpected(h, "no HelloReply");
    h->seq = 2;
    return max;
}

/* The daemon must close a connection it refused; counts it as unexpected when it stays open. */
static void expect_closed(hostile *h, int fd, const char *what) {
    if (!th_raw_closed(fd, HOSTILE_WAIT_MS))
        unexpected(h, "%s: the daemon kept the connection open for %d ms", what, HOSTILE_WAIT_MS);
}

/* Random bytes. */
static void fill_random(hostile *h, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rnd(h);
}

/* A body that cannot decode: its first tag has wire type 7, which protobuf does not define. */
static void garbage(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    if (below(h, 2) && !say_hello(h, fd)) {
        close(fd);
        return;
    }
    size_t len = 1 + (size_t)below(h, 2048);
    uint8_t *buf = malloc(4 + len);
    if (!buf) abort();
    tf__frame_put_length(buf, (uint32_t)len);
    fill_random(h, buf + 4, len);
    buf[4] = (uint8_t)(((1 + below(h, 15)) << 3) | 7);
    if (th_raw_send_bytes(fd, buf, 4 + len) == 0) expect_closed(h, fd, "a frame that does not decode");
    free(buf);
    close(fd);
    h->rep->c[C_hostile_garbage]++;
}

/* A well-formed request as the first frame, without Hello. */
static void before_hello(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    f.seq = 1;
    if (below(h, 2)) {
        f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
        f.status_request = &sr;
    } else {
        dl.tensor = 1;
        dl.length = 8;
        f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
        f.download = &dl;
    }
    if (th_raw_send(fd, &f) == 0) expect_closed(h, fd, "a request before Hello");
    close(fd);
    h->rep->c[C_hostile_before_hello]++;
}

/* Hello with a protocol version nobody speaks: TF_ERR_VERSION. */
static void bad_version(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    Tenferro__Frame *r = th_raw_hello(fd, 1000 + (uint32_t)below(h, 1000));
    int st = r && r->body_case == TENFERRO__FRAME__BODY_RESULT ? (int)r->result->status : -1;
    tf__frame_free(r);
    if (st == TF_ERR_VERSION)
        report_expected(h->rep, st);
    else
        unexpected(h, "Hello with a wrong version: status %d, expected TF_ERR_VERSION", st);
    close(fd);
    h->rep->c[C_hostile_bad_version]++;
}

/* A header announcing more than the daemon accepts (its maximum after Hello, 64 KiB before). */
static void huge_length(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    uint64_t max = TF__MIN_MAX_FRAME_BYTES;
    if (below(h, 2)) {
        max = say_hello(h, fd);
        if (!max) {
            close(fd);
            return;
        }
    }
    uint64_t len = max + 1 + rnd(h) % (UINT32_MAX - max);
    uint8_t header[4];
    tf__frame_put_length(header, (uint32_t)len);
    if (th_raw_send_bytes(fd, header, sizeof header) == 0) expect_closed(h, fd, "a huge frame length");
    close(fd);
    h->rep->c[C_hostile_huge]++;
}

/* An Upload frame (encoded with its header) creating a tensor of n doubles; the caller frees it. */
static uint8_t *upload_frame(hostile *h, uint64_t tensor, size_t n, size_t *len) {
    double *data = calloc(n, sizeof *data);
    if (!data) abort();
    int64_t shape[1] = {(int64_t)n};
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = tensor;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = 1;
    up.shape = shape;
    up.data.data = (uint8_t *)data;
    up.data.len = n * sizeof *data;
    f.seq = h->seq++;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    uint8_t *buf = NULL;
    if (tf__frame_encode(&f, UINT32_MAX, &buf, len) != TF_OK) abort();
    free(data);
    return buf;
}

/* Part of a frame, then the client closes: at once, or after up to a second. */
static void truncated(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    int hello = below(h, 4) != 0;
    if (hello && !say_hello(h, fd)) {
        close(fd);
        return;
    }
    size_t len;
    /* Before Hello the frame must stay under the 64 KiB limit, or it is a huge length instead. */
    uint8_t *buf = upload_frame(h, 1, hello ? 1 + (size_t)below(h, 100000) : 1 + (size_t)below(h, 4000), &len);
    size_t cut = 1 + (size_t)below(h, (int)(len - 1));
    if (th_raw_send_bytes(fd, buf, cut) == 0 && below(h, 2)) {
        int hold = 100 + below(h, 900);
        if (hold > left_ms(h)) hold = left_ms(h);
        th_sleep_ms(hold);
    }
    free(buf);
    close(fd);
    h->rep->c[C_hostile_truncated]++;
}

/* A header of up to 8 MiB (under the maximum), a part of the body, a pause, and a close. */
static void big_partial(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    uint64_t max = say_hello(h, fd);
    if (!max) {
        close(fd);
        return;
    }
    uint32_t len = 1024 + (uint32_t)(rnd(h) % (PARTIAL_MAX_BYTES - 1024));
    if (len > max) len = (uint32_t)max;
    size_t part = (size_t)(rnd(h) % (len < (256u << 10) ? len : (256u << 10)));
    uint8_t *buf = malloc(4 + part);
    if (!buf) abort();
    tf__frame_put_length(buf, len);
    fill_random(h, buf + 4, part);
    if (th_raw_send_bytes(fd, buf, 4 + part) == 0) {
        int hold = 200 + below(h, 800);
        if (hold > left_ms(h)) hold = left_ms(h);
        th_sleep_ms(hold);
    }
    free(buf);
    close(fd);
    h->rep->c[C_hostile_partial]++;
}

/* Statuses a request naming something that does not exist may get: typed refusals. */
static int typed_refusal(int st) {
    switch (st) {
    case TF_ERR_UNKNOWN_HANDLE:
    case TF_ERR_SESSION_CLOSED:
    case TF_ERR_INVALID_ARGUMENT:
    case TF_ERR_BUSY:
    case TF_ERR_CONTENDED:
    case TF_ERR_TIMEOUT:
    case TF_ERR_UNSUPPORTED:
        return 1;
    default:
        return 0;
    }
}

/* Sends f and checks its answer is a typed refusal; returns 0 while the connection works. */
static int refused(hostile *h, int fd, Tenferro__Frame *f, const char *what) {
    f->seq = h->seq++;
    if (th_raw_send(fd, f) != 0) {
        unexpected(h, "%s: send failed", what);
        return -1;
    }
    Tenferro__Frame *r = th_raw_recv(fd, 30000);
    int st = -1;
    if (r && r->body_case == TENFERRO__FRAME__BODY_RESULT) st = (int)r->result->status;
    if (r && r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY && r->download_reply->result)
        st = (int)r->download_reply->result->status;
    int answered_seq = r && r->seq == f->seq;
    tf__frame_free(r);
    if (!answered_seq || !typed_refusal(st)) {
        unexpected(h, "%s: status %d (%s), expected a typed refusal", what, st,
                   st >= 0 ? tf_status_name((tf_status)st) : "no answer");
        return -1;
    }
    report_expected(h->rep, st);
    return 0;
}

/* Sends a frame that has no answer; returns 0 when it went out. */
static int no_answer(hostile *h, int fd, Tenferro__Frame *f) {
    f->seq = h->seq++;
    return th_raw_send(fd, f);
}

/* Requests naming tensors, buffers, sessions and slots that were never made, then a probe. */
static void wrong_handles(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    if (!say_hello(h, fd)) {
        close(fd);
        return;
    }
    h->rep->c[C_hostile_wrong_handles]++;
    uint64_t ghost = 1000000 + rnd(h) % 1000000;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    dl.tensor = ghost;
    dl.length = 8;
    f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    f.download = &dl;
    if (refused(h, fd, &f, "download of a tensor never made") != 0) goto out;

    double eight = 1.0;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = ghost + 1;
    up.data.data = (uint8_t *)&eight;
    up.data.len = sizeof eight;
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    if (refused(h, fd, &f, "upload into a tensor never made") != 0) goto out;

    Tenferro__BufferFree bf = TENFERRO__BUFFER_FREE__INIT;
    bf.buffer = ghost;
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_BUFFER_FREE;
    f.buffer_free = &bf;
    if (refused(h, fd, &f, "free of a pinned buffer never made") != 0) goto out;

    Tenferro__Transfer tr = TENFERRO__TRANSFER__INIT;
    tr.direction = below(h, 2) ? TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD
                               : TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD;
    tr.buffer = ghost;
    tr.tensor = ghost;
    tr.slot = 1 + (uint32_t)below(h, 8);
    tr.bytes = 8;
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_TRANSFER;
    f.transfer = &tr;
    if (refused(h, fd, &f, "transfer between a buffer and a tensor never made") != 0) goto out;

    uint64_t inputs[2] = {ghost, ghost + 7};
    Tenferro__Op op = TENFERRO__OP__INIT;
    Tenferro__Op *ops[1] = {&op};
    op.kind = 1; /* add */
    op.n_inputs = 2;
    op.inputs = inputs;
    op.output = ghost + 9;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.session_id = below(h, 2) ? ghost : 0;
    sub.mode = sub.session_id ? TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE
                              : TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.n_ops = 1;
    sub.ops = ops;
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    if (refused(h, fd, &f, sub.session_id ? "submit to a session never opened"
                                          : "operation on tensors never made") != 0)
        goto out;

    /* Requests without an answer: counted by the daemon, nothing else. */
    uint64_t ghosts[3] = {ghost, ghost + 3, ghost + 5};
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    fr.n_tensors = 3;
    fr.tensors = ghosts;
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_FREE;
    f.free = &fr;
    Tenferro__SessionRelease rel = TENFERRO__SESSION_RELEASE__INIT;
    rel.session_id = ghost;
    Tenferro__Frame f2 = TENFERRO__FRAME__INIT;
    f2.body_case = TENFERRO__FRAME__BODY_SESSION_RELEASE;
    f2.session_release = &rel;
    Tenferro__TransferRelease trel = TENFERRO__TRANSFER_RELEASE__INIT;
    trel.slot = (uint32_t)rnd(h);
    Tenferro__Frame f3 = TENFERRO__FRAME__INIT;
    f3.body_case = TENFERRO__FRAME__BODY_TRANSFER_RELEASE;
    f3.transfer_release = &trel;
    if (no_answer(h, fd, &f) != 0 || no_answer(h, fd, &f2) != 0 || no_answer(h, fd, &f3) != 0) {
        unexpected(h, "sending requests without an answer failed");
        goto out;
    }
    /* The connection still works: the probe is refused typed, in order. */
    f = (Tenferro__Frame)TENFERRO__FRAME__INIT;
    dl.tensor = ghost + 11;
    f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    f.download = &dl;
    (void)refused(h, fd, &f, "probe after requests naming nothing");
out:
    close(fd);
}

/* 1-3 silent connections for 1-3 s: counts those the daemon closed by itself, then closes them. */
static void never_hello(hostile *h) {
    int fds[3], n = 1 + below(h, 3);
    int hold = 1000 + below(h, 2000);
    if (hold > left_ms(h)) hold = left_ms(h);
    for (int i = 0; i < n; i++) fds[i] = th_raw_connect(h->d);
    uint64_t until = now_ms() + (uint64_t)hold;
    int closed[3] = {0, 0, 0};
    for (;;) {
        int open = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0 || closed[i]) continue;
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (poll(&p, 1, 0) == 1) {
                /* A daemon that times the peer out may say why first: read past its last word. */
                uint8_t drain[4096];
                ssize_t r;
                while ((r = recv(fds[i], drain, sizeof drain, MSG_DONTWAIT)) > 0) {
                }
                if (r == 0 || (r < 0 && errno == ECONNRESET)) closed[i] = 1;
            }
            open += !closed[i];
        }
        if (open == 0 || now_ms() >= until) break;
        th_sleep_ms(20);
    }
    for (int i = 0; i < n; i++) {
        if (fds[i] < 0) {
            unexpected(h, "connect failed: %s", strerror(errno));
            continue;
        }
        h->rep->c[C_hostile_no_hello]++;
        h->rep->c[C_hostile_no_hello_closed] += (uint64_t)closed[i];
        close(fds[i]);
    }
}

/* Connects and goes away: at once, right after Hello, or right after a Download, reading nothing. */
static void vanish(hostile *h) {
    int fd = open_raw(h);
    if (fd < 0) return;
    int how = below(h, 4);
    if (how >= 1) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Hello hello = TENFERRO__HELLO__INIT;
        hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
        hello.client_name = "hostile-vanish";
        f.seq = 1;
        f.body_case = TENFERRO__FRAME__BODY_HELLO;
        f.hello = &hello;
        (void)th_raw_send(fd, &f);
    }
    if (how >= 2) {
        h->seq = 2;
        size_t len;
        uint8_t *buf = upload_frame(h, 5, 1 + (size_t)below(h, 50000), &len);
        (void)th_raw_send_bytes(fd, buf, len);
        free(buf);
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
        dl.tensor = 5;
        dl.length = 8;
        f.seq = h->seq++;
        f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
        f.download = &dl;
        (void)th_raw_send(fd, &f);
    }
    if (how == 3) {
        uint8_t half[2] = {0x10, 0x00};
        (void)th_raw_send_bytes(fd, half, sizeof half);
    }
    close(fd);
    h->rep->c[C_hostile_vanish]++;
}

void hostile_main(const th_daemon *d, uint64_t seed, uint64_t deadline_ms, report *rep) {
    hostile h = {.d = d, .rng = seed, .deadline_ms = deadline_ms, .rep = rep};
    static void (*const actions[])(hostile *) = {garbage,     before_hello, bad_version,
                                                 huge_length, truncated,    big_partial,
                                                 wrong_handles, never_hello, vanish};
    const int n_actions = (int)(sizeof actions / sizeof actions[0]);
    /* Stop a little before the deadline: a refusal may take the daemon a moment to close. */
    while (left_ms(&h) > 1500) {
        actions[below(&h, n_actions)](&h);
        th_sleep_ms(10 + below(&h, 40));
    }
}
