/*
 * Integration tests of bad input (DESIGN.md §3 and §9): every malformed frame,
 * unknown message, bad handle, shape, dtype, axis, offset or dying client gets
 * a typed status with a readable message; malformed frames close only their
 * own connection; the daemon keeps serving every other client; and nothing
 * another client owns changes.
 *
 * Each test starts its own tenferrod on a private socket and, before any bad
 * input, a bystander: a separate client process that uploads a tensor of
 * random data. After the bad input the bystander downloads its tensor and
 * compares it byte for byte, then runs a scoped session with an add and
 * checks the sum, which proves the daemon still serves. Each test ends by
 * stopping the daemon with SIGTERM and requires a clean exit (status 0): a
 * crash, or a sanitizer report in a sanitizer build, fails it.
 *
 * Bad frames are built by hand with the harness's raw-frame helpers; the
 * public client API is used where the client library itself must refuse.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/ops.h"
#include "tests/integration/harness.h"

/* Shape of the bystander's tensor: big enough to notice a stray write, small enough for one frame. */
#define BY_ROWS 64
#define BY_COLS 48
#define BY_ELEMS (BY_ROWS * BY_COLS)

/* How long a raw read may wait before the test calls the daemon unresponsive. */
#define RAW_TIMEOUT_MS 5000

/* ---- the bystander: a separate client process owning data the bad input must not touch ---- */

typedef struct bystander {
    pid_t pid;
    int to_child;   /* commands: 'c' check, 'q' quit */
    int from_child; /* answers: one status byte per command */
    tf_tensor tensor;
} bystander;

/* The child's ends of the bystander's pipes, and the parent's ends it must close. */
typedef struct bystander_pipes {
    int cmd_read, answer_write;
    int cmd_write, answer_read;
} bystander_pipes;

/* The add the bystander runs in a scoped session to prove the daemon serves. */
typedef struct by_add {
    tf_tensor a, out;
} by_add;

static tf_status by_add_fn(tf_view *v, void *arg) {
    by_add *s = arg;
    return tf_view_add(v, s->a, s->a, &s->out);
}

/* Child side of the check: the tensor is unchanged and a scoped add still runs; 0 when both hold. */
static int bystander_verify(tf_client *c, tf_tensor t, const double *expect) {
    void *data = NULL;
    size_t bytes = 0;
    tf_status st = tf_download(c, t, &data, &bytes);
    if (st != TF_OK) {
        fprintf(stderr, "bystander: download: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        return 2;
    }
    int same = bytes == sizeof(double) * BY_ELEMS && memcmp(data, expect, bytes) == 0;
    free(data);
    if (!same) {
        fprintf(stderr, "bystander: its tensor changed\n");
        return 3;
    }
    by_add s = {.a = t};
    st = tf_with_session(c, by_add_fn, &s);
    if (st != TF_OK) {
        fprintf(stderr, "bystander: scoped add: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        return 4;
    }
    st = tf_download(c, s.out, &data, &bytes);
    if (st != TF_OK) {
        fprintf(stderr, "bystander: download of the sum: %s: %s\n", tf_status_name(st),
                tf_client_last_error(c));
        return 5;
    }
    int ok = bytes == sizeof(double) * BY_ELEMS;
    for (size_t i = 0; ok && i < BY_ELEMS; i++) ok = ((double *)data)[i] == 2.0 * expect[i];
    free(data);
    if (!ok) {
        fprintf(stderr, "bystander: the scoped add returned wrong values\n");
        return 6;
    }
    st = tf_tensor_free(c, s.out);
    return st == TF_OK ? 0 : 7;
}

/* Where the daemon to use is passed to the bystander child. */
static const th_daemon *g_daemon;
static bystander_pipes g_pipes;

/* The bystander process: upload, report the tensor id, then answer commands until told to quit. */
static int bystander_main(void *arg) {
    (void)arg;
    int in = g_pipes.cmd_read, out = g_pipes.answer_write;
    close(g_pipes.cmd_write); /* so a vanished parent reads as EOF */
    close(g_pipes.answer_read);
    tf_client *c = th_connect(g_daemon);
    static double data[BY_ELEMS];
    /* A stream of its own: data equal to what the test sends elsewhere would hide a stray write. */
    srand(th_seed() ^ 0x9e3779b9u);
    th_fill_random(TF_F64, BY_ELEMS, data);
    const int64_t shape[2] = {BY_ROWS, BY_COLS};
    tf_tensor t = 0;
    tf_status st = tf_upload(c, TF_F64, 2, shape, data, &t);
    if (st != TF_OK) {
        fprintf(stderr, "bystander: upload: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        return 1;
    }
    if (write(out, &t, sizeof t) != (ssize_t)sizeof t) return 1;
    for (;;) {
        char cmd;
        ssize_t n = read(in, &cmd, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || cmd == 'q') break;
        unsigned char answer = (unsigned char)bystander_verify(c, t, data);
        if (write(out, &answer, 1) != 1) return 1;
    }
    tf_disconnect(c);
    return 0;
}

/* Reads n bytes from the bystander, failing the test if it does not answer in time. */
static void bystander_read(bystander *b, void *buf, size_t n) {
    uint8_t *p = buf;
    while (n > 0) {
        struct pollfd pfd = {.fd = b->from_child, .events = POLLIN};
        ck_assert_msg(poll(&pfd, 1, 30000) == 1, "the bystander did not answer within 30 s");
        ssize_t got = read(b->from_child, p, n);
        if (got < 0 && errno == EINTR) continue;
        ck_assert_msg(got > 0, "the bystander died (see its message above)");
        p += got;
        n -= (size_t)got;
    }
}

/* Starts the bystander and waits until its tensor is uploaded. */
static void bystander_start(bystander *b, const th_daemon *d) {
    int cmd[2], answer[2];
    ck_assert_int_eq(pipe(cmd), 0);
    ck_assert_int_eq(pipe(answer), 0);
    g_daemon = d;
    g_pipes.cmd_read = cmd[0];
    g_pipes.answer_write = answer[1];
    g_pipes.cmd_write = cmd[1];
    g_pipes.answer_read = answer[0];
    b->pid = th_spawn(bystander_main, NULL);
    ck_assert_int_gt(b->pid, 0);
    close(cmd[0]);
    close(answer[1]);
    b->to_child = cmd[1];
    b->from_child = answer[0];
    bystander_read(b, &b->tensor, sizeof b->tensor);
    ck_assert_msg(b->tensor != 0, "the bystander got no tensor");
}

/* Asks the bystander to check its tensor and run an add; fails the test unless both hold. */
static void bystander_check(bystander *b) {
    ck_assert_int_eq(write(b->to_child, "c", 1), 1);
    unsigned char answer = 0xff;
    bystander_read(b, &answer, 1);
    ck_assert_msg(answer == 0, "bystander check failed with code %u (see its message above)", answer);
}

/* A last check, then the bystander disconnects and must exit cleanly. */
static void bystander_finish(bystander *b) {
    bystander_check(b);
    ck_assert_int_eq(write(b->to_child, "q", 1), 1);
    ck_assert_int_eq(th_wait(b->pid), 0);
    close(b->to_child);
    close(b->from_child);
}

/* Starts a daemon (with --max-frame-bytes when max_frame is not NULL) and its bystander. */
static void start(th_daemon *d, bystander *b, const char *max_frame) {
    if (max_frame)
        ck_assert_int_eq(th_daemon_start(d, "--max-frame-bytes", max_frame, NULL), 0);
    else
        ck_assert_int_eq(th_daemon_start(d, NULL), 0);
    bystander_start(b, d);
}

/* The common ending: the bystander's data and service are intact, and the daemon stops cleanly. */
static void finish(th_daemon *d, bystander *b) {
    bystander_finish(b);
    char log[sizeof d->log_path];
    memcpy(log, d->log_path, sizeof log);
    int rc = th_daemon_stop(d);
    ck_assert_msg(rc == 0, "tenferrod did not shut down cleanly (status %d); its log: %s", rc, log);
}

/* ---- raw frames ---- */

static uint64_t g_seq = 100;

/* Connects and completes the handshake; returns the fd. */
static int raw_open(const th_daemon *d) {
    int fd = th_raw_open(d, "raw-test", 1, NULL);
    ck_assert_msg(fd >= 0, "handshake failed");
    return fd;
}

/* Sends a frame (its seq is set here) and returns the reply; fails the test on silence. */
static Tenferro__Frame *raw_call(int fd, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    ck_assert_msg(r->seq == f->seq, "reply seq %llu answers request %llu", (unsigned long long)r->seq,
                  (unsigned long long)f->seq);
    return r;
}

/* 1 when the message contains `n` as a whole decimal number. */
static int mentions_number(const char *msg, long long n) {
    for (const char *p = msg; *p;) {
        if (*p >= '0' && *p <= '9') {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (v == n) return 1;
            p = end;
        } else {
            p++;
        }
    }
    return 0;
}

/* Checks a batch failure: status, the failing index and how many operations were accepted. */
static void expect_batch_failure(Tenferro__Frame *reply, tf_status status, uint32_t index,
                                 uint64_t accepted, const char *needle) {
    ck_assert_msg(reply->body_case == TENFERRO__FRAME__BODY_RESULT, "expected a Result");
    CK_RESULT(reply->result, status, needle);
    ck_assert_msg(reply->result->has_failed_index, "the failure names no index");
    ck_assert_uint_eq(reply->result->failed_index, index);
    ck_assert_uint_eq(reply->result->ops_accepted, accepted);
    tf__frame_free(reply);
}

/* Reads the protocol-error Result (seq 0) a daemon sends before closing, then requires the close. */
static void expect_closed_with(int fd, tf_status status, const char *needle) {
    Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r != NULL, "the daemon closed without a typed error");
    ck_assert_msg(r->body_case == TENFERRO__FRAME__BODY_RESULT, "expected a Result, got body %d",
                  (int)r->body_case);
    if (status == TF_ERR_PROTOCOL) ck_assert_uint_eq(r->seq, 0);
    CK_RESULT(r->result, status, needle);
    tf__frame_free(r);
    ck_assert_msg(th_raw_closed(fd, RAW_TIMEOUT_MS), "the daemon left a broken connection open");
    close(fd);
}

/*
 * Requires r to be a typed Result with `status` (see th_result_problem) that, when number is not
 * -1, names that number (`number_names` says what it is), then requires the close; no_answer is the
 * failure when r is missing or no Result.
 */
static void expect_typed_close(int fd, Tenferro__Frame *r, const char *no_answer, tf_status status,
                               const char *needle, long long number, const char *number_names) {
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_RESULT, "%s", no_answer);
    CK_RESULT(r->result, status, needle);
    if (number != -1)
        ck_assert_msg(mentions_number(r->result->message, number), "\"%s\" does not name %s",
                      r->result->message, number_names);
    tf__frame_free(r);
    ck_assert(th_raw_closed(fd, RAW_TIMEOUT_MS));
    close(fd);
}

/* Uploads (create and/or write) over a raw connection and returns the reply. */
static Tenferro__Frame *raw_upload(int fd, uint64_t id, int create, tf_dtype dtype, int rank,
                                   const int64_t *shape, uint64_t offset, const void *data,
                                   size_t len) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, create, dtype, rank, shape, offset, data, len);
    return raw_call(fd, &f);
}

/* Creates a tensor with data over a raw connection, requiring success. */
static void raw_create(int fd, uint64_t id, tf_dtype dtype, int rank, const int64_t *shape,
                       const void *data) {
    tf__meta m = {.dtype = dtype, .rank = rank};
    for (int i = 0; i < rank; i++) m.shape[i] = shape[i];
    CK_EXPECT_RESULT(raw_upload(fd, id, 1, dtype, rank, shape, 0, data, tf__meta_bytes(&m)), TF_OK, NULL);
}

/* Sends a Download and returns its reply, which must be a DownloadReply even when refused. */
static Tenferro__Frame *raw_download(int fd, uint64_t id, uint64_t offset, uint64_t length) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    dl.tensor = id;
    dl.offset = offset;
    dl.length = length;
    f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    f.download = &dl;
    Tenferro__Frame *r = raw_call(fd, &f);
    ck_assert_msg(r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY,
                  "expected a DownloadReply, got body %d", (int)r->body_case);
    return r;
}

/* Requires a Download to be refused with `status`. */
static void expect_download_error(int fd, uint64_t id, uint64_t offset, uint64_t length,
                                  tf_status status, const char *needle) {
    Tenferro__Frame *r = raw_download(fd, id, offset, length);
    CK_RESULT(r->download_reply->result, status, needle);
    ck_assert_uint_eq(r->download_reply->data.len, 0);
    tf__frame_free(r);
}

/* Downloads a whole tensor of `bytes` bytes into dst, requiring success. */
static void raw_read(int fd, uint64_t id, void *dst, size_t bytes) {
    Tenferro__Frame *r = raw_download(fd, id, 0, bytes);
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(r->download_reply->data.len, bytes);
    memcpy(dst, r->download_reply->data.data, bytes);
    tf__frame_free(r);
}

/* Requires the connection to still answer: a StatusRequest gets a StatusReply. */
static void expect_usable(int fd) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    Tenferro__Frame *r = raw_call(fd, &f);
    ck_assert_msg(r->body_case == TENFERRO__FRAME__BODY_STATUS_REPLY, "expected a StatusReply, got body %d",
                  (int)r->body_case);
    tf__frame_free(r);
}

/* Waits until the daemon holds exactly `expect` allocations (frees run on the streams, after replies). */
static void settle_allocations(const th_daemon *d, uint64_t expect) {
    ck_assert_msg(th_wait_counter(d, "device_allocations_live", expect, 10000),
                  "device_allocations_live is %llu, expected %llu",
                  (unsigned long long)th_counter(d, "device_allocations_live"),
                  (unsigned long long)expect);
}

/* An operation with its own storage for inputs and parameters; initialise in place. */
typedef struct raw_op {
    Tenferro__Op op;
    uint64_t inputs[2];
    int64_t params[TF_MAX_RANK];
} raw_op;

/* Fills r with an operation of `kind` on n_in inputs (a, b) writing `out`, with n_params parameters. */
static void raw_op_init(raw_op *r, tf__op_kind kind, int n_in, uint64_t a, uint64_t b, uint64_t out,
                        int n_params, const int64_t *params) {
    tenferro__op__init(&r->op);
    r->inputs[0] = a;
    r->inputs[1] = b;
    for (int i = 0; i < n_params; i++) r->params[i] = params[i];
    r->op.kind = (uint32_t)kind;
    r->op.n_inputs = (size_t)n_in;
    r->op.inputs = r->inputs;
    r->op.output = out;
    r->op.n_params = (size_t)n_params;
    r->op.params = r->params;
}

/* Sends a Submit carrying ops[0..n) and returns the reply. */
static Tenferro__Frame *raw_submit(int fd, uint64_t session, uint32_t mode, raw_op *ops, size_t n) {
    Tenferro__Op *ptrs[16];
    ck_assert_uint_le(n, 16);
    for (size_t i = 0; i < n; i++) ptrs[i] = &ops[i].op;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.session_id = session;
    sub.mode = mode;
    sub.n_ops = n;
    sub.ops = ptrs;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    return raw_call(fd, &f);
}

/* A scoped root of one operation, in one final frame, that must fail at index 0 with `status`. */
static void expect_scoped_op_refused(int fd, raw_op *op, tf_status status, const char *needle) {
    expect_batch_failure(raw_submit(fd, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, op, 1), status,
                         0, 0, needle);
}

/*
 * Sends raw frame bytes carrying sequence number seq that the daemon must answer with
 * TF_ERR_UNSUPPORTED (naming needle), leaving the connection usable; `what` names them in failures.
 */
static void expect_unsupported_bytes(int fd, const uint8_t *bytes, size_t n, uint64_t seq,
                                     const char *what, const char *needle) {
    ck_assert_int_eq(th_raw_send_bytes(fd, bytes, n), 0);
    Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r != NULL, "no answer to %s", what);
    ck_assert_uint_eq(r->seq, seq);
    CK_EXPECT_RESULT(r, TF_ERR_UNSUPPORTED, needle);
    expect_usable(fd);
}

/* Sends a Free frame (it has no reply). */
static void raw_free(int fd, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Free body = TENFERRO__FREE__INIT;
    body.n_tensors = 1;
    body.tensors = &id;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_FREE;
    f.free = &body;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
}

/* Writes a little-endian frame header announcing `len` body bytes. */
static void put_header(uint8_t *p, uint32_t len) { tf__frame_put_length(p, len); }

/* ---- public-API helpers ---- */

/* Arguments of one client-side call inside a scoped session. */
typedef struct call_args {
    int which;
    tf_tensor a, b;
    tf_tensor out;
    tf_status got;
} call_args;

/* ---- 1. truncated frame ---- */

/* A frame cut short by the end of the stream is a typed protocol error and closes only that connection. */
START_TEST(test_truncated_frame) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    uint64_t errors = th_counter(&d, "protocol_errors");
    int fd = raw_open(&d);
    uint8_t bytes[14];
    put_header(bytes, 100);
    memset(bytes + 4, 0x08, 10);
    ck_assert_int_eq(th_raw_send_bytes(fd, bytes, sizeof bytes), 0);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "truncated");
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 1);

    /* The same before the handshake, and with a header cut short. */
    fd = th_raw_connect(&d);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(th_raw_send_bytes(fd, bytes, 2), 0);
    ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "truncated");
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 2);
    finish(&d, &b);
}
END_TEST

/* ---- 2. length over the maximum ---- */

/* A header announcing more than --max-frame-bytes is refused before any body is read; the maximum itself is accepted. */
START_TEST(test_length_over_maximum) {
    th_daemon d;
    bystander b;
    start(&d, &b, "65536");

    /* A frame of exactly the maximum is served. */
    int ok_fd = raw_open(&d);
    const int64_t shape[1] = {16384};
    CK_EXPECT_RESULT(raw_upload(ok_fd, 1, 1, TF_F32, 1, shape, 0, NULL, 0), TF_OK, NULL);
    static uint8_t payload[65536];
    memset(payload, 0x3f, sizeof payload);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = 1;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f.upload = &up;
    up.data.data = payload;
    for (up.data.len = sizeof payload; tenferro__frame__get_packed_size(&f) > 65536; up.data.len--) {
    }
    ck_assert_uint_eq(tenferro__frame__get_packed_size(&f), 65536);
    ck_assert_int_eq(th_raw_send(ok_fd, &f), 0);
    Tenferro__Frame *r = th_raw_recv(ok_fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r && r->seq == f.seq, "no answer to a frame of exactly the maximum");
    CK_EXPECT_RESULT(r, TF_OK, NULL);

    /* One byte more is a protocol error, whatever follows. */
    uint64_t errors = th_counter(&d, "protocol_errors");
    int fd = raw_open(&d);
    uint8_t header[4];
    put_header(header, 65537);
    ck_assert_int_eq(th_raw_send_bytes(fd, header, sizeof header), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "maximum");
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 1);

    /* Before the handshake too, with the largest length a header can carry. */
    fd = th_raw_connect(&d);
    put_header(header, UINT32_MAX);
    ck_assert_int_eq(th_raw_send_bytes(fd, header, sizeof header), 0);
    expect_typed_close(fd, th_raw_recv(fd, RAW_TIMEOUT_MS), "no typed error", TF_ERR_PROTOCOL,
                       "maximum", 65536, "the maximum");

    /* The connection that sent the frame of the maximum size is untouched. */
    expect_usable(ok_fd);
    close(ok_fd);
    finish(&d, &b);
}
END_TEST

/* ---- 3. body that does not decode ---- */

/* A body that is not a tenferro.Frame is a typed protocol error and closes that connection only. */
START_TEST(test_body_does_not_decode) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    uint64_t errors = th_counter(&d, "protocol_errors");
    int keep = raw_open(&d);
    int fd = raw_open(&d);
    uint8_t bytes[4 + 32];
    put_header(bytes, 32);
    memset(bytes + 4, 0xff, 32);
    ck_assert_int_eq(th_raw_send_bytes(fd, bytes, sizeof bytes), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "decode");
    /* A length-delimited field running past the body does not decode either (before the handshake). */
    fd = th_raw_connect(&d);
    const uint8_t overrun[] = {6, 0, 0, 0, 0x08, 0x01, 0x6a, 0x7f, 0x08, 0x01};
    ck_assert_int_eq(th_raw_send_bytes(fd, overrun, sizeof overrun), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "decode");
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 2);
    expect_usable(keep);
    close(keep);
    finish(&d, &b);
}
END_TEST

/* ---- 4. unknown message type ---- */

/*
 * A message the daemon does not know, or one only the daemon sends, is
 * TF_ERR_UNSUPPORTED and the connection stays usable; each counts in
 * requests_unsupported, none in protocol_errors.
 */
START_TEST(test_unknown_message_type) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    int fd = raw_open(&d);
    const uint64_t errors = th_counter(&d, "protocol_errors");

    /* seq = 7, then field 99 as a varint: no body of the oneof is set. */
    const uint8_t unknown_varint[] = {5, 0, 0, 0, 0x08, 0x07, 0x98, 0x06, 0x01};
    expect_unsupported_bytes(fd, unknown_varint, sizeof unknown_varint, 7, "an unknown message",
                             "unknown");

    /* seq = 8, then a body number no version uses (200) carrying an empty message. */
    const uint8_t unknown_body[] = {5, 0, 0, 0, 0x08, 0x08, 0xc2, 0x0c, 0x00};
    expect_unsupported_bytes(fd, unknown_body, sizeof unknown_body, 8, "an unknown body", NULL);

    /* Reply-only bodies sent by a client. */
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__HelloReply hr = TENFERRO__HELLO_REPLY__INIT;
    hr.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    f.body_case = TENFERRO__FRAME__BODY_HELLO_REPLY;
    f.hello_reply = &hr;
    CK_EXPECT_RESULT(raw_call(fd, &f), TF_ERR_UNSUPPORTED, NULL);
    expect_usable(fd);
    Tenferro__Frame g = TENFERRO__FRAME__INIT;
    Tenferro__Result res = TENFERRO__RESULT__INIT;
    g.body_case = TENFERRO__FRAME__BODY_RESULT;
    g.result = &res;
    CK_EXPECT_RESULT(raw_call(fd, &g), TF_ERR_UNSUPPORTED, NULL);
    Tenferro__Frame h = TENFERRO__FRAME__INIT;
    Tenferro__DownloadReply dr = TENFERRO__DOWNLOAD_REPLY__INIT;
    h.body_case = TENFERRO__FRAME__BODY_DOWNLOAD_REPLY;
    h.download_reply = &dr;
    CK_EXPECT_RESULT(raw_call(fd, &h), TF_ERR_UNSUPPORTED, NULL);
    expect_usable(fd);
    ck_assert_uint_eq(th_counter(&d, "requests_unsupported"), 5);
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors);

    /* An unknown operation kind and an unknown submit mode are typed too. */
    raw_op op;
    raw_op_init(&op, (tf__op_kind)99, 0, 0, 0, 5, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_UNSUPPORTED, "99");
    raw_op_init(&op, TF__OP_NONE, 0, 0, 0, 5, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_UNSUPPORTED, NULL);
    CK_EXPECT_RESULT(raw_submit(fd, 0, 42, NULL, 0), TF_ERR_INVALID_ARGUMENT, "42");
    expect_usable(fd);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 5. protocol version mismatch; first frame not Hello ---- */

/* A version mismatch is a typed error at connect naming both versions; a first frame other than Hello is a protocol error. */
START_TEST(test_version_mismatch) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    int fd = th_raw_connect(&d);
    ck_assert_int_ge(fd, 0);
    expect_typed_close(fd, th_raw_hello(fd, 999), "no typed answer to Hello 999", TF_ERR_VERSION,
                       "999", TENFERRO__PROTOCOL__PROTOCOL_VERSION, "the daemon's version");

    /* Version 0 (a client that never set it) likewise. */
    fd = th_raw_connect(&d);
    expect_typed_close(fd, th_raw_hello(fd, 0), "no typed answer to Hello 0", TF_ERR_VERSION, NULL,
                       -1, NULL);

    /* First frame not Hello. */
    uint64_t errors = th_counter(&d, "protocol_errors");
    fd = th_raw_connect(&d);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.seq = 1;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    expect_closed_with(fd, TF_ERR_PROTOCOL, "Hello");
    ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 1);

    /* A second Hello on a live connection. */
    fd = raw_open(&d);
    expect_typed_close(fd, th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION),
                       "no typed answer to a second Hello", TF_ERR_PROTOCOL, "Hello", -1, NULL);
    finish(&d, &b);
}
END_TEST

/* ---- 6. unknown tensor handle ---- */

static tf_status add_unknown_fn(tf_view *v, void *arg) {
    call_args *a = arg;
    a->got = tf_view_add(v, 424242, 424242, &a->out);
    return a->got;
}

/* A handle that was never created is TF_ERR_UNKNOWN_HANDLE, in the client library and at the daemon. */
START_TEST(test_unknown_handle) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    tf_client *c = th_connect(&d);
    void *data = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(tf_download(c, 424242, &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_msg(strstr(tf_client_last_error(c), "424242"), "unreadable: %s", tf_client_last_error(c));
    ck_assert_int_eq(tf_tensor_free(c, 424242), TF_ERR_UNKNOWN_HANDLE);
    call_args a = {0};
    ck_assert_int_eq(tf_with_session(c, add_unknown_fn, &a), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_int_eq(a.got, TF_ERR_UNKNOWN_HANDLE);
    tf_disconnect(c);

    int fd = raw_open(&d);
    raw_op op;
    raw_op_init(&op, TF__OP_ADD, 2, 424242, 424242, 5, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_UNKNOWN_HANDLE, "424242");
    raw_op_init(&op, TF__OP_NEG, 1, 424242, 0, 5, 0, NULL);
    expect_batch_failure(raw_submit(fd, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &op, 1),
                         TF_ERR_UNKNOWN_HANDLE, 0, 0, "424242");
    raw_op_init(&op, TF__OP_FREE, 1, 424242, 0, 0, 0, NULL);
    expect_batch_failure(raw_submit(fd, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &op, 1),
                         TF_ERR_UNKNOWN_HANDLE, 0, 0, "424242");
    expect_download_error(fd, 424242, 0, 8, TF_ERR_UNKNOWN_HANDLE, "424242");
    CK_EXPECT_RESULT(raw_upload(fd, 424242, 0, TF_F64, 0, NULL, 0, "12345678", 8), TF_ERR_UNKNOWN_HANDLE,
                  "424242");
    /* Even an empty write names a tensor, and an unknown one is not a silent success. */
    CK_EXPECT_RESULT(raw_upload(fd, 424242, 0, TF_F64, 0, NULL, 0, NULL, 0), TF_ERR_UNKNOWN_HANDLE, "424242");
    /* The output of the refused operation was never created. */
    expect_download_error(fd, 5, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);
    expect_usable(fd);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 7. handle of another connection ---- */

/* Handles are per connection: another client cannot read, use or free a tensor it did not create. */
START_TEST(test_handle_of_another_connection) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    const uint64_t x = b.tensor;
    const size_t x_bytes = sizeof(double) * BY_ELEMS;
    int fd = raw_open(&d);
    expect_download_error(fd, x, 0, x_bytes, TF_ERR_UNKNOWN_HANDLE, NULL);
    raw_op op;
    raw_op_init(&op, TF__OP_ADD, 2, x, x, x + 1000, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_UNKNOWN_HANDLE, NULL);
    /* Writing into it and freeing it: refused or ignored, never applied to the owner's tensor. */
    static double junk[BY_ELEMS];
    CK_EXPECT_RESULT(raw_upload(fd, x, 0, TF_F64, 0, NULL, 0, junk, sizeof junk), TF_ERR_UNKNOWN_HANDLE, NULL);
    raw_free(fd, x);
    raw_op_init(&op, TF__OP_FREE, 1, x, 0, 0, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_UNKNOWN_HANDLE, NULL);
    expect_usable(fd);
    bystander_check(&b);

    /* The same id created on this connection is a different tensor; using it leaves the owner's alone. */
    const int64_t shape[2] = {BY_ROWS, BY_COLS};
    memset(junk, 0, sizeof junk);
    raw_create(fd, x, TF_F64, 2, shape, junk);
    raw_op_init(&op, TF__OP_ADD, 2, x, x, x + 1, 0, NULL);
    CK_EXPECT_RESULT(raw_submit(fd, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &op, 1), TF_OK, NULL);
    static double back[BY_ELEMS];
    raw_read(fd, x + 1, back, sizeof back);
    for (size_t i = 0; i < BY_ELEMS; i++) ck_assert(back[i] == 0.0);
    raw_free(fd, x);
    expect_usable(fd);

    /* A public client cannot name it either. */
    tf_client *c = th_connect(&d);
    void *data = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(tf_download(c, x, &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
    tf_disconnect(c);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 8. shape or dtype mismatch ---- */

/* Tensors a public client uses in the mismatch tests. */
typedef struct mismatch_tensors {
    tf_tensor f32_3, f32_4, f64_3, f32_3x4, f32_5x4;
} mismatch_tensors;

static tf_status mismatch_fn(tf_view *v, void *arg) {
    call_args *a = arg;
    switch (a->which) {
    case 0: a->got = tf_view_add(v, a->a, a->b, &a->out); break;
    case 1: a->got = tf_view_mul(v, a->a, a->b, &a->out); break;
    case 2: a->got = tf_view_matmul(v, a->a, a->b, &a->out); break;
    default: a->got = TF_ERR_INTERNAL; break;
    }
    return a->got;
}

/* Runs one client-side call that must be refused at the call with `want`, and nothing reaches the daemon. */
static void expect_client_refuses(const th_daemon *d, tf_client *c, int which, tf_tensor a, tf_tensor b,
                                  tf_status want) {
    uint64_t accepted = th_counter(d, "ops_accepted"), rejected = th_counter(d, "ops_rejected");
    call_args args = {.which = which, .a = a, .b = b};
    ck_assert_int_eq(tf_with_session(c, mismatch_fn, &args), want);
    ck_assert_int_eq(args.got, want);
    ck_assert_msg(strlen(tf_client_last_error(c)) >= 10, "no readable message for %s",
                  tf_status_name(want));
    ck_assert_uint_eq(th_counter(d, "ops_accepted"), accepted);
    ck_assert_uint_eq(th_counter(d, "ops_rejected"), rejected);
}

/* Shapes and dtypes that do not fit are refused at the call by the client and again by the daemon. */
START_TEST(test_shape_dtype_mismatch) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    const uint64_t baseline = th_counter(&d, "device_allocations_live");
    static float f[20];
    static double g[3];
    th_fill_random(TF_F32, 20, f);
    th_fill_random(TF_F64, 3, g);
    const int64_t s3[1] = {3}, s4[1] = {4}, s34[2] = {3, 4}, s54[2] = {5, 4};

    tf_client *c = th_connect(&d);
    mismatch_tensors t;
    ck_assert_int_eq(tf_upload(c, TF_F32, 1, s3, f, &t.f32_3), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F32, 1, s4, f, &t.f32_4), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F64, 1, s3, g, &t.f64_3), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F32, 2, s34, f, &t.f32_3x4), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F32, 2, s54, f, &t.f32_5x4), TF_OK);
    expect_client_refuses(&d, c, 0, t.f32_3, t.f32_4, TF_ERR_SHAPE);
    ck_assert_msg(strstr(tf_client_last_error(c), "[3]") && strstr(tf_client_last_error(c), "[4]"),
                  "the message does not name the shapes: %s", tf_client_last_error(c));
    expect_client_refuses(&d, c, 0, t.f32_3, t.f64_3, TF_ERR_DTYPE);
    ck_assert_msg(strstr(tf_client_last_error(c), "f32") && strstr(tf_client_last_error(c), "f64"),
                  "the message does not name the dtypes: %s", tf_client_last_error(c));
    expect_client_refuses(&d, c, 1, t.f32_3x4, t.f32_5x4, TF_ERR_SHAPE);
    expect_client_refuses(&d, c, 2, t.f32_3x4, t.f32_5x4, TF_ERR_SHAPE);
    expect_client_refuses(&d, c, 2, t.f32_3, t.f32_3, TF_ERR_SHAPE);
    tf_disconnect(c);

    int fd = raw_open(&d);
    raw_create(fd, 1, TF_F32, 1, s3, f);
    raw_create(fd, 2, TF_F32, 1, s4, f);
    raw_create(fd, 3, TF_F64, 1, s3, g);
    raw_create(fd, 4, TF_F32, 2, s34, f);
    raw_create(fd, 5, TF_F32, 2, s54, f);
    const uint64_t allocations = baseline + 5; /* the public client's tensors are freed by now */
    settle_allocations(&d, allocations);
    raw_op op;
    raw_op_init(&op, TF__OP_ADD, 2, 1, 2, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_SHAPE, "[3]");
    raw_op_init(&op, TF__OP_ADD, 2, 1, 3, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_DTYPE, "f64");
    raw_op_init(&op, TF__OP_AXPBY, 2, 3, 1, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_DTYPE, NULL);
    raw_op_init(&op, TF__OP_MATMUL, 2, 4, 5, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_SHAPE, NULL);
    raw_op_init(&op, TF__OP_MATMUL, 2, 1, 1, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_SHAPE, NULL);
    /* Wrong arity: the daemon cannot trust the client's input count. */
    raw_op_init(&op, TF__OP_ADD, 1, 1, 0, 10, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_INVALID_ARGUMENT, NULL);
    /* An output handle already in use, and the reserved handle 0. */
    raw_op_init(&op, TF__OP_NEG, 1, 1, 0, 2, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_INVALID_ARGUMENT, NULL);
    raw_op_init(&op, TF__OP_NEG, 1, 1, 0, 0, 0, NULL);
    expect_scoped_op_refused(fd, &op, TF_ERR_INVALID_ARGUMENT, NULL);
    /* Upload of an unknown dtype. */
    CK_EXPECT_RESULT(raw_upload(fd, 20, 1, (tf_dtype)9, 1, s3, 0, NULL, 0), TF_ERR_DTYPE, NULL);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations);
    expect_download_error(fd, 10, 0, 4, TF_ERR_UNKNOWN_HANDLE, NULL);
    /* Tensor 2 (an output handle we tried to reuse) still holds its data. */
    float back[4];
    raw_read(fd, 2, back, sizeof back);
    ck_assert(memcmp(back, f, sizeof back) == 0);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 9. axis out of range / repeated axis ---- */

static tf_status axis_fn(tf_view *v, void *arg) {
    call_args *a = arg;
    static const int perm_out[2] = {0, 5}, perm_rep[2] = {1, 1}, axis_neg[1] = {-1}, axis_rep[2] = {0, 0},
                     axis_big[1] = {2}, perm_short[1] = {0};
    switch (a->which) {
    case 0: a->got = tf_view_permute(v, a->a, 2, perm_out, &a->out); break;
    case 1: a->got = tf_view_permute(v, a->a, 2, perm_rep, &a->out); break;
    case 2: a->got = tf_view_sum(v, a->a, 1, axis_neg, &a->out); break;
    case 3: a->got = tf_view_sum(v, a->a, 2, axis_rep, &a->out); break;
    case 4: a->got = tf_view_max(v, a->a, 1, axis_big, &a->out); break;
    case 5: a->got = tf_view_permute(v, a->a, 1, perm_short, &a->out); break;
    default: a->got = TF_ERR_INTERNAL; break;
    }
    return a->got;
}

/* An axis out of range or named twice is TF_ERR_AXIS at the call and at the daemon. */
START_TEST(test_axis_errors) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    static double x[12];
    th_fill_random(TF_F64, 12, x);
    const int64_t s34[2] = {3, 4};
    tf_client *c = th_connect(&d);
    tf_tensor t;
    ck_assert_int_eq(tf_upload(c, TF_F64, 2, s34, x, &t), TF_OK);
    uint64_t rejected = th_counter(&d, "ops_rejected");
    for (int which = 0; which < 6; which++) {
        call_args a = {.which = which, .a = t};
        ck_assert_msg(tf_with_session(c, axis_fn, &a) == TF_ERR_AXIS, "case %d: %s", which,
                      tf_status_name(a.got));
        ck_assert_int_eq(a.got, TF_ERR_AXIS);
        ck_assert_msg(strlen(tf_client_last_error(c)) >= 10, "case %d: no readable message", which);
    }
    ck_assert_uint_eq(th_counter(&d, "ops_rejected"), rejected);
    tf_disconnect(c);

    int fd = raw_open(&d);
    raw_create(fd, 1, TF_F64, 2, s34, x);
    raw_op op;
    const int64_t perm_out[2] = {0, 5}, perm_rep[2] = {1, 1}, perm_neg[2] = {-1, 0}, axis_neg[1] = {-1},
                  axis_rep[2] = {0, 0}, axis_big[1] = {2}, nine[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    raw_op_init(&op, TF__OP_PERMUTE, 1, 1, 0, 10, 2, perm_out);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, "5");
    raw_op_init(&op, TF__OP_PERMUTE, 1, 1, 0, 10, 2, perm_rep);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, "twice");
    raw_op_init(&op, TF__OP_PERMUTE, 1, 1, 0, 10, 2, perm_neg);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, NULL);
    raw_op_init(&op, TF__OP_PERMUTE, 1, 1, 0, 10, 1, perm_out);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, NULL);
    raw_op_init(&op, TF__OP_REDUCE_SUM, 1, 1, 0, 10, 1, axis_neg);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, "-1");
    raw_op_init(&op, TF__OP_REDUCE_SUM, 1, 1, 0, 10, 2, axis_rep);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, "twice");
    raw_op_init(&op, TF__OP_REDUCE_MIN, 1, 1, 0, 10, 1, axis_big);
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, NULL);
    /* More parameters than any rank allows: the daemon must not overrun its parameter array. */
    raw_op_init(&op, TF__OP_PERMUTE, 1, 1, 0, 10, 8, nine);
    op.op.n_params = 9;
    int64_t many[9];
    memcpy(many, nine, sizeof many);
    op.op.params = many;
    expect_scoped_op_refused(fd, &op, TF_ERR_AXIS, NULL);
    expect_download_error(fd, 10, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);
    expect_usable(fd);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 10. zero or negative dimension ---- */

static tf_status reshape_fn(tf_view *v, void *arg) {
    call_args *a = arg;
    static const int64_t zero[2] = {0, 4}, negative[2] = {-3, -4};
    a->got = tf_view_reshape(v, a->a, 2, a->which == 0 ? zero : negative, &a->out);
    return a->got;
}

/* A dimension below 1 is TF_ERR_BAD_SHAPE at upload and reshape, on both sides, and allocates nothing. */
START_TEST(test_bad_dimensions) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    const uint64_t allocations = th_counter(&d, "device_allocations_live");
    const uint64_t bytes_live = th_counter(&d, "device_bytes_live");
    static double x[12];
    th_fill_random(TF_F64, 12, x);

    tf_client *c = th_connect(&d);
    const int64_t s30[2] = {3, 0}, sneg[1] = {-2}, s34[2] = {3, 4};
    tf_tensor t = 0;
    ck_assert_int_eq(tf_upload(c, TF_F64, 2, s30, x, &t), TF_ERR_BAD_SHAPE);
    ck_assert_msg(strstr(tf_client_last_error(c), "0"), "unreadable: %s", tf_client_last_error(c));
    ck_assert_int_eq(tf_upload(c, TF_F64, 1, sneg, x, &t), TF_ERR_BAD_SHAPE);
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 12};
    ck_assert_int_eq(tf_upload(c, TF_F64, 9, nine, x, &t), TF_ERR_BAD_SHAPE);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations);
    ck_assert_int_eq(tf_upload(c, TF_F64, 2, s34, x, &t), TF_OK);
    for (int which = 0; which < 2; which++) {
        call_args a = {.which = which, .a = t};
        ck_assert_int_eq(tf_with_session(c, reshape_fn, &a), TF_ERR_BAD_SHAPE);
        ck_assert_int_eq(a.got, TF_ERR_BAD_SHAPE);
    }
    ck_assert_int_eq(tf_tensor_free(c, t), TF_OK);
    tf_disconnect(c);

    int fd = raw_open(&d);
    CK_EXPECT_RESULT(raw_upload(fd, 1, 1, TF_F64, 1, sneg, 0, NULL, 0), TF_ERR_BAD_SHAPE, "-2");
    CK_EXPECT_RESULT(raw_upload(fd, 2, 1, TF_F64, 2, s30, 0, NULL, 0), TF_ERR_BAD_SHAPE, NULL);
    CK_EXPECT_RESULT(raw_upload(fd, 3, 1, TF_F64, 9, nine, 0, NULL, 0), TF_ERR_BAD_SHAPE, NULL);
    /* Too many elements: refused before any allocation is attempted. */
    const int64_t huge[3] = {1 << 20, 1 << 20, 1 << 20};
    CK_EXPECT_RESULT(raw_upload(fd, 4, 1, TF_F64, 3, huge, 0, NULL, 0), TF_ERR_BAD_SHAPE, NULL);
    const int64_t overflow[2] = {INT64_MAX, 2};
    CK_EXPECT_RESULT(raw_upload(fd, 5, 1, TF_F64, 2, overflow, 0, NULL, 0), TF_ERR_BAD_SHAPE, NULL);
    /* A legal element count that no device can hold (16 TiB) is typed too, and nothing is kept. */
    const int64_t vast[1] = {(int64_t)1 << 40};
    CK_EXPECT_RESULT(raw_upload(fd, 6, 1, TF_C128, 1, vast, 0, NULL, 0), TF_ERR_NO_MEMORY, NULL);
    expect_download_error(fd, 6, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);
    expect_download_error(fd, 1, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);
    /* (The public client's valid tensor is freed on its stream after it disconnected.) */
    ck_assert_msg(th_wait_counter(&d, "device_allocations_live", allocations, 5000),
                  "a refused upload left an allocation behind");

    raw_create(fd, 10, TF_F64, 2, s34, x);
    const int64_t zero4[2] = {0, 4};
    raw_op op;
    raw_op_init(&op, TF__OP_RESHAPE, 1, 10, 0, 11, 2, zero4);
    expect_scoped_op_refused(fd, &op, TF_ERR_BAD_SHAPE, NULL);
    raw_op_init(&op, TF__OP_RESHAPE, 1, 10, 0, 11, 1, sneg);
    expect_scoped_op_refused(fd, &op, TF_ERR_BAD_SHAPE, NULL);
    const int64_t s26[2] = {2, 6}, s25[2] = {2, 5};
    raw_op_init(&op, TF__OP_RESHAPE, 1, 10, 0, 11, 2, s25);
    expect_scoped_op_refused(fd, &op, TF_ERR_SHAPE, NULL);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations + 1);
    /* A valid reshape still works on this connection. */
    raw_op_init(&op, TF__OP_RESHAPE, 1, 10, 0, 11, 2, s26);
    CK_EXPECT_RESULT(raw_submit(fd, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &op, 1), TF_OK, NULL);
    double back[12];
    raw_read(fd, 11, back, sizeof back);
    ck_assert(memcmp(back, x, sizeof back) == 0);
    raw_free(fd, 10);
    raw_free(fd, 11);
    expect_usable(fd);
    ck_assert_msg(th_wait_counter(&d, "device_allocations_live", allocations, 5000),
                  "allocations did not return to the bystander's baseline");
    ck_assert_uint_eq(th_counter(&d, "device_bytes_live"), bytes_live);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 11. a batch whose middle operation fails ---- */

/* The public-API part: what one held-session callback queues. */
typedef struct held_args {
    tf_tensor x, y, tall, wide;
    tf_tensor sum, huge, later;
    tf_status refused;
} held_args;

/* A valid add, a call the client refuses, a matmul no device can hold, and an add after it. */
static tf_status held_fn(tf_view *v, void *arg) {
    held_args *h = arg;
    tf_tensor bad;
    if (tf_view_add(v, h->x, h->y, &h->sum) != TF_OK) return TF_ERR_INTERNAL;
    h->refused = tf_view_matmul(v, h->x, h->y, &bad); /* [4] x [4]: refused at the call */
    /* [2^20,1] x [1,2^20]: a legal shape of 2^40 elements, but 4 TiB of output. */
    if (tf_view_matmul(v, h->tall, h->wide, &h->huge) != TF_OK) return TF_ERR_INTERNAL;
    if (tf_view_add(v, h->sum, h->sum, &h->later) != TF_OK) return TF_ERR_INTERNAL;
    return TF_OK;
}

/* A failing operation stops its batch there: earlier ones run and keep their values, later ones never exist. */
START_TEST(test_batch_middle_failure) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    const uint64_t baseline = th_counter(&d, "device_allocations_live");
    const int64_t s44[2] = {4, 4};
    double x[16], y[16];
    th_fill_random(TF_F64, 16, x);
    th_fill_random(TF_F64, 16, y);

    int fd = raw_open(&d);
    raw_create(fd, 1, TF_F64, 2, s44, x);
    raw_create(fd, 2, TF_F64, 2, s44, y);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__SessionOpen open = TENFERRO__SESSION_OPEN__INIT;
    f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
    f.session_open = &open;
    Tenferro__Frame *r = raw_call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    CK_RESULT(r->result, TF_OK, NULL);
    uint64_t session = r->result->session_id;
    ck_assert_uint_ne(session, 0);
    tf__frame_free(r);
    const uint64_t allocations = baseline + 2;
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations);

    raw_op ops[5];
    raw_op_init(&ops[0], TF__OP_ADD, 2, 1, 2, 100, 0, NULL);
    raw_op_init(&ops[1], TF__OP_MUL, 2, 1, 2, 101, 0, NULL);
    raw_op_init(&ops[2], TF__OP_ADD, 2, 1, 424242, 102, 0, NULL);
    raw_op_init(&ops[3], TF__OP_SUB, 2, 100, 101, 103, 0, NULL);
    raw_op_init(&ops[4], TF__OP_MUL, 2, 100, 101, 104, 0, NULL);
    expect_batch_failure(raw_submit(fd, session, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE, ops, 5),
                         TF_ERR_UNKNOWN_HANDLE, 2, 2, "424242");
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations + 2);

    double sum[16], prod[16];
    raw_read(fd, 100, sum, sizeof sum);
    raw_read(fd, 101, prod, sizeof prod);
    for (int i = 0; i < 16; i++) {
        ck_assert_msg(sum[i] == x[i] + y[i], "op0 element %d: %g, expected %g", i, sum[i], x[i] + y[i]);
        ck_assert_msg(prod[i] == x[i] * y[i], "op1 element %d: %g, expected %g", i, prod[i], x[i] * y[i]);
    }
    for (uint64_t id = 102; id <= 104; id++) expect_download_error(fd, id, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);

    /* The session is still open and usable: the same later operations now succeed. */
    raw_op_init(&ops[0], TF__OP_SUB, 2, 100, 101, 103, 0, NULL);
    CK_EXPECT_RESULT(raw_submit(fd, session, TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE, ops, 1), TF_OK, NULL);
    double diff[16];
    raw_read(fd, 103, diff, sizeof diff);
    for (int i = 0; i < 16; i++) ck_assert(diff[i] == sum[i] - prod[i]);
    /* A submit naming another session id is typed and changes nothing. */
    CK_EXPECT_RESULT(raw_submit(fd, session + 1, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE, ops, 1),
                  TF_ERR_SESSION_CLOSED, NULL);
    CK_EXPECT_RESULT(raw_submit(fd, session, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, NULL, 0), TF_OK, NULL);
    close(fd);

    /*
     * Public API: a call refused by the client leaves the queue intact; the
     * daemon refusing operation 1 (the device cannot hold its output) is
     * reported by the submit with tf_client_failed_index, keeps operation 0,
     * and forgets what followed.
     */
    tf_client *c = th_connect(&d);
    held_args h = {0};
    const int64_t s4[1] = {4}, tall[2] = {1 << 20, 1}, wide[2] = {1, 1 << 20};
    float *column = malloc(sizeof(float) << 20);
    ck_assert_ptr_nonnull(column);
    th_fill_random(TF_F32, (size_t)1 << 20, column);
    ck_assert_int_eq(tf_upload(c, TF_F64, 1, s4, x, &h.x), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F64, 1, s4, y, &h.y), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F32, 2, tall, column, &h.tall), TF_OK);
    ck_assert_int_eq(tf_upload(c, TF_F32, 2, wide, column, &h.wide), TF_OK);
    free(column);
    /* The raw connection's tensors are gone, the public client's four are live. */
    const uint64_t c_allocations = baseline + 4;
    settle_allocations(&d, c_allocations);
    tf_session *s = NULL;
    ck_assert_int_eq(tf_session_open(c, &s), TF_OK);
    ck_assert_int_eq(tf_session_with(s, held_fn, &h), TF_OK);
    ck_assert_int_eq(h.refused, TF_ERR_SHAPE);
    ck_assert_int_eq(tf_session_submit(s), TF_ERR_NO_MEMORY);
    ck_assert_int_eq(tf_client_failed_index(c), 1);
    ck_assert_msg(strstr(tf_client_last_error(c), "operation 1"), "unreadable: %s", tf_client_last_error(c));
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), c_allocations + 1);
    void *data = NULL;
    size_t bytes = 0;
    ck_assert_int_eq(tf_download(c, h.huge, &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_int_eq(tf_download(c, h.later, &data, &bytes), TF_ERR_UNKNOWN_HANDLE);
    ck_assert_int_eq(tf_session_synchronize(s), TF_OK);
    ck_assert_int_eq(tf_client_failed_index(c), -1);
    ck_assert_int_eq(tf_download(c, h.sum, &data, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, sizeof(double) * 4);
    for (int i = 0; i < 4; i++) ck_assert(((double *)data)[i] == x[i] + y[i]);
    free(data);
    tf_session_counters stats;
    ck_assert_int_eq(tf_session_close(s, &stats), TF_OK);
    ck_assert_uint_eq(stats.failed_submits, 1);
    tf_disconnect(c);
    finish(&d, &b);
}
END_TEST

/* ---- 12. a client killed while holding the reservation with work queued ---- */

typedef struct killer_args {
    int report_fd;
} killer_args;

static tf_status matmuls_fn(tf_view *v, void *arg) {
    tf_tensor *in = arg;
    for (int i = 0; i < 500; i++) {
        tf_tensor out;
        tf_status st = tf_view_matmul(v, in[0], in[1], &out);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* The doomed client: holds the session, submits 500 matmuls, tells the parent, and dies by SIGKILL. */
static int killer_main(void *arg) {
    killer_args *k = arg;
    tf_client *c = th_connect(g_daemon);
    static double m[256 * 256];
    th_fill_random(TF_F64, 256 * 256, m);
    const int64_t shape[2] = {256, 256};
    tf_tensor in[2];
    if (tf_upload(c, TF_F64, 2, shape, m, &in[0]) != TF_OK) return 2;
    if (tf_upload(c, TF_F64, 2, shape, m, &in[1]) != TF_OK) return 3;
    tf_session *s = NULL;
    if (tf_session_open(c, &s) != TF_OK) return 4;
    if (tf_session_with(s, matmuls_fn, in) != TF_OK) return 5;
    if (tf_session_submit(s) != TF_OK) return 6;
    char ok = 'k';
    if (write(k->report_fd, &ok, 1) != 1) return 7;
    kill(getpid(), SIGKILL);
    return 8;
}

/* A client that dies holding the reservation with work queued loses it all, and nobody else loses anything. */
START_TEST(test_killed_holder) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    const uint64_t allocations = th_counter(&d, "device_allocations_live");
    const uint64_t bytes_live = th_counter(&d, "device_bytes_live");
    ck_assert_uint_eq(th_counter(&d, "sessions_reclaimed"), 0);

    int report[2];
    ck_assert_int_eq(pipe(report), 0);
    killer_args k = {.report_fd = report[1]};
    g_daemon = &d;
    pid_t pid = th_spawn(killer_main, &k);
    close(report[1]);
    ck_assert_int_eq(th_wait(pid), 128 + SIGKILL);
    char ok = 0;
    ck_assert_msg(read(report[0], &ok, 1) == 1 && ok == 'k', "the child did not submit its matmuls");
    close(report[0]);

    /* While the dead client's work drains, management still answers. */
    ck_assert_int_ge(th_client_count(&d), 1);
    ck_assert_msg(th_wait_counter(&d, "sessions_reclaimed", 1, 60000),
                  "the dead client's session was not reclaimed");
    ck_assert_msg(th_wait_counter(&d, "device_allocations_live", allocations, 10000),
                  "allocations did not return to the baseline: %llu, expected %llu",
                  (unsigned long long)th_counter(&d, "device_allocations_live"),
                  (unsigned long long)allocations);
    ck_assert_uint_eq(th_counter(&d, "device_bytes_live"), bytes_live);
    ck_assert_int_eq(th_client_count(&d), 1);
    bystander_check(&b);

    /* The domain is free again: a new client can hold it. */
    tf_client *c = th_connect(&d);
    tf_session *s = NULL;
    ck_assert_int_eq(tf_session_open(c, &s), TF_OK);
    ck_assert_int_eq(tf_session_close(s, NULL), TF_OK);
    tf_disconnect(c);
    finish(&d, &b);
}
END_TEST

/* ---- 13. many malformed connections ---- */

/* A small seeded generator, independent of the harness's data stream. */
static uint64_t g_rng;
static uint32_t rng_next(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

/* No stream of garbage crashes the daemon: every connection that sent a header is counted as a protocol error. */
START_TEST(test_many_malformed_connections) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    g_rng = 0x9e3779b97f4a7c15ull ^ th_seed();
    uint64_t errors = th_counter(&d, "protocol_errors");
    int with_header = 0;
    static uint8_t garbage[4096];
    for (int i = 0; i < 60; i++) {
        int after_hello = i >= 50; /* the last ten speak garbage after a valid handshake */
        int fd = after_hello ? raw_open(&d) : th_raw_connect(&d);
        ck_assert_int_ge(fd, 0);
        size_t len = rng_next() % 300;
        for (size_t j = 0; j < len; j++) garbage[j] = (uint8_t)rng_next();
        if (len >= 4) {
            switch (rng_next() % 3) {
            case 0: break; /* a random length, usually far above the maximum */
            case 1: put_header(garbage, (uint32_t)(len - 4 + 1 + rng_next() % 4000)); break; /* truncated */
            case 2: put_header(garbage, (uint32_t)(rng_next() % (len - 3))); break; /* complete, maybe trailing */
            }
            if (!after_hello) with_header++;
        }
        if (len > 0) ck_assert_int_eq(th_raw_send_bytes(fd, garbage, len), 0);
        shutdown(fd, SHUT_WR);
        ck_assert_msg(th_raw_closed(fd, RAW_TIMEOUT_MS), "connection %d was not closed", i);
        close(fd);
    }
    /* And some that vanish abruptly in the middle of a frame. */
    for (int i = 0; i < 10; i++) {
        int fd = th_raw_connect(&d);
        uint8_t header[6];
        put_header(header, 1000);
        header[4] = 0x08;
        header[5] = 0x01;
        ck_assert_int_eq(th_raw_send_bytes(fd, header, (size_t)(1 + i % 6)), 0);
        close(fd);
    }
    ck_assert_msg(th_counter(&d, "protocol_errors") >= errors + (uint64_t)with_header,
                  "protocol_errors %llu, expected at least %llu",
                  (unsigned long long)th_counter(&d, "protocol_errors"),
                  (unsigned long long)(errors + (uint64_t)with_header));
    /* Every garbage connection is gone: open are only the bystander and the status requests. */
    int settled = 0;
    for (int waited = 0; waited < 5000 && !settled; waited += 10) {
        uint64_t accepted = th_counter(&d, "connections_accepted");
        settled = accepted - th_counter(&d, "connections_closed") <= 3;
        if (!settled) usleep(10000);
    }
    ck_assert_msg(settled, "some garbage connections were never closed");
    int fd = raw_open(&d);
    expect_usable(fd);
    close(fd);
    finish(&d, &b);
}
END_TEST

/* ---- 14. out-of-range offsets ---- */

/* A read or write outside a tensor is TF_ERR_INVALID_ARGUMENT, writes nothing, and the connection stays usable. */
START_TEST(test_out_of_range_offsets) {
    th_daemon d;
    bystander b;
    start(&d, &b, NULL);
    double x[16];
    th_fill_random(TF_F64, 16, x);
    const int64_t s16[1] = {16};
    int fd = raw_open(&d);
    raw_create(fd, 1, TF_F64, 1, s16, x);
    const uint64_t n = sizeof x;

    expect_download_error(fd, 1, n + 8, 8, TF_ERR_INVALID_ARGUMENT, "offset");
    expect_download_error(fd, 1, n - 8, 16, TF_ERR_INVALID_ARGUMENT, NULL);
    expect_download_error(fd, 1, UINT64_MAX, 2, TF_ERR_INVALID_ARGUMENT, NULL);
    expect_download_error(fd, 1, 8, UINT64_MAX - 4, TF_ERR_INVALID_ARGUMENT, NULL);
    expect_usable(fd);

    static uint8_t junk[256];
    memset(junk, 0xab, sizeof junk);
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, n - 8, junk, 16), TF_ERR_INVALID_ARGUMENT, "offset");
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, n + 1, junk, 1), TF_ERR_INVALID_ARGUMENT, NULL);
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, UINT64_MAX, junk, 8), TF_ERR_INVALID_ARGUMENT, NULL);
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, 0, junk, n + 1), TF_ERR_INVALID_ARGUMENT, NULL);
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, n + 1, NULL, 0), TF_ERR_INVALID_ARGUMENT, NULL);
    expect_usable(fd);

    /* Nothing of the refused writes landed; edge reads and writes inside the tensor work. */
    double back[16];
    raw_read(fd, 1, back, sizeof back);
    ck_assert(memcmp(back, x, sizeof x) == 0);
    Tenferro__Frame *r = raw_download(fd, 1, n, 0);
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(r->download_reply->data.len, 0);
    tf__frame_free(r);
    double last = 0.5;
    CK_EXPECT_RESULT(raw_upload(fd, 1, 0, TF_F64, 0, NULL, n - 8, &last, 8), TF_OK, NULL);
    raw_read(fd, 1, back, sizeof back);
    ck_assert(back[15] == 0.5 && memcmp(back, x, n - 8) == 0);

    /* A create whose data does not fit the new tensor is refused as a whole: no tensor is left behind. */
    uint64_t allocations = th_counter(&d, "device_allocations_live");
    CK_EXPECT_RESULT(raw_upload(fd, 2, 1, TF_F64, 1, s16, 0, junk, n + 8), TF_ERR_INVALID_ARGUMENT, NULL);
    ck_assert_uint_eq(th_counter(&d, "device_allocations_live"), allocations);
    expect_download_error(fd, 2, 0, 8, TF_ERR_UNKNOWN_HANDLE, NULL);
    raw_create(fd, 2, TF_F64, 1, s16, x);
    expect_usable(fd);
    close(fd);
    finish(&d, &b);
}
END_TEST

static Suite *bad_input_suite(void) {
    Suite *s = suite_create("bad-input");
    TCase *tc = tcase_create("bad-input");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_truncated_frame);
    tcase_add_test(tc, test_length_over_maximum);
    tcase_add_test(tc, test_body_does_not_decode);
    tcase_add_test(tc, test_unknown_message_type);
    tcase_add_test(tc, test_version_mismatch);
    tcase_add_test(tc, test_unknown_handle);
    tcase_add_test(tc, test_handle_of_another_connection);
    tcase_add_test(tc, test_shape_dtype_mismatch);
    tcase_add_test(tc, test_axis_errors);
    tcase_add_test(tc, test_bad_dimensions);
    tcase_add_test(tc, test_batch_middle_failure);
    tcase_add_test(tc, test_killed_holder);
    tcase_add_test(tc, test_many_malformed_connections);
    tcase_add_test(tc, test_out_of_range_offsets);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    th_seed();
    SRunner *sr = srunner_create(bad_input_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
