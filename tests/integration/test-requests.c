/*
 * The daemon's request table (daemon/requests.h, TFD_REQUEST_LIST): every
 * body case a frame can carry, sent with an empty body, is answered or
 * refused as the table says, by its own handler:
 *
 *  - after Hello, each request the daemon serves gets the answer its handler
 *    gives an empty body (EXPECT_AFTER_HELLO below: a reply of its own kind,
 *    a typed Result, or none: Free, SessionRelease, TransferRelease,
 *    PreparedFree, Mapped and MailboxDoorbell answer nothing), and every
 *    other case (no body, a body only the daemon sends, a number no version
 *    uses) is TF_ERR_UNSUPPORTED naming the body, counted once in
 *    requests_unsupported, the connection usable after it;
 *  - before Hello, every case but Hello ends the connection with
 *    TF_ERR_PROTOCOL "the first frame must be Hello";
 *  - on a peer daemon's connection, every case but Hello and PeerFetch is
 *    TF_ERR_PERMISSION "only fetches offers", unknown cases included.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

#define RAW_MS 5000

/*
 * Body cases probed: no body (0), then field numbers 10 to LAST_CASE: every
 * case of the oneof (10..37) and a few numbers no version uses, which decode
 * as no body (field 1 is the sequence number, 2..9 are unused).
 */
#define FIRST_BODY 10
#define LAST_CASE 42

/* The probes in order: 0, then FIRST_BODY..LAST_CASE; -1 after the last. */
static int next_case(int body) {
    if (body < 0) return 0;
    if (body == 0) return FIRST_BODY;
    return body < LAST_CASE ? body + 1 : -1;
}

/* The body case the daemon sees for field `body`: itself if the Frame's oneof has it, else none. */
static int decoded_case(int body) {
    const ProtobufCFieldDescriptor *field =
        body > 1 ? protobuf_c_message_descriptor_get_field(&tenferro__frame__descriptor, (unsigned)body)
                 : NULL;
    return field ? body : 0;
}

/*
 * Sends a frame of sequence number seq whose body is field `body` of the
 * Frame's oneof carrying an empty message (0: no body at all); 0 on success.
 */
static int send_empty_body(int fd, uint64_t seq, int body) {
    uint8_t frame[32];
    size_t n = 4;
    frame[n++] = 0x08; /* field 1 (seq), varint */
    for (uint64_t v = seq; ; v >>= 7) {
        frame[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
        if (v < 0x80) break;
    }
    if (body > 0) {
        for (uint32_t v = ((uint32_t)body << 3) | 2; ; v >>= 7) { /* length-delimited */
            frame[n++] = (uint8_t)((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
            if (v < 0x80) break;
        }
        frame[n++] = 0; /* an empty message */
    }
    tf__frame_put_length(frame, (uint32_t)(n - 4));
    return th_raw_send_bytes(fd, frame, n);
}

/* The status a reply carries: its Result's, or that of the Result inside it; -1 when none. */
static int reply_status(const Tenferro__Frame *r) {
    const Tenferro__Result *res = NULL;
    switch (r->body_case) {
    case TENFERRO__FRAME__BODY_RESULT: res = r->result; break;
    case TENFERRO__FRAME__BODY_DOWNLOAD_REPLY: res = r->download_reply->result; break;
    case TENFERRO__FRAME__BODY_STATUS_REPLY: res = r->status_reply->result; break;
    case TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY: res = r->tensor_info_reply->result; break;
    case TENFERRO__FRAME__BODY_COPY_OFFER_REPLY: res = r->copy_offer_reply->result; break;
    case TENFERRO__FRAME__BODY_PEER_FETCH_REPLY: res = r->peer_fetch_reply->result; break;
    default: break;
    }
    return res ? (int)res->status : -1;
}

/* The message of a reply's Result ("" when it has none). */
static const char *reply_message(const Tenferro__Frame *r) {
    if (r->body_case == TENFERRO__FRAME__BODY_RESULT && r->result->message) return r->result->message;
    return "";
}

/*
 * What one request came to: the body case of its answer (0: none came),
 * that answer's status (-1: it carries none), and whether the daemon closed
 * the connection (then the answer is its last word, sequence number 0).
 */
typedef struct outcome {
    int reply;
    int status;
    int closed;
    char message[256];
} outcome;

/*
 * Sends the probe (sequence number 2, an empty body of case `body`), then a
 * StatusRequest (3), and reads until the StatusRequest is answered or the
 * connection closes: what answered the probe is *out.
 */
static void probe(int fd, int body, outcome *out) {
    memset(out, 0, sizeof *out);
    out->status = -1;
    ck_assert_int_eq(send_empty_body(fd, 2, body), 0);
    ck_assert_int_eq(send_empty_body(fd, 3, TENFERRO__FRAME__BODY_STATUS_REQUEST), 0);
    for (;;) {
        int got_fd = -1;
        Tenferro__Frame *r = th_raw_recv_fd(fd, RAW_MS, &got_fd);
        if (got_fd >= 0) close(got_fd);
        if (!r) {
            ck_assert_msg(th_raw_closed(fd, RAW_MS), "body %d: no answer and the connection open",
                          body);
            out->closed = 1;
            return;
        }
        if (r->seq == 2 || r->seq == 0) {
            ck_assert_msg(out->reply == 0, "body %d: answered twice", body);
            out->reply = (int)r->body_case;
            out->status = reply_status(r);
            snprintf(out->message, sizeof out->message, "%s", reply_message(r));
        }
        const int done = r->seq == 3;
        if (done)
            ck_assert_msg(r->body_case == TENFERRO__FRAME__BODY_STATUS_REPLY,
                          "body %d: the StatusRequest after it got body %d", body, (int)r->body_case);
        tf__frame_free(r);
        if (done) return;
    }
}

/*
 * What the daemon answers each request it serves, sent with an empty body
 * after Hello: what its handler makes of a request that names nothing.
 */
typedef struct expected {
    int body;           /* the request's body case */
    int reply;          /* its answer's body case, 0 for none */
    int status;         /* that answer's status, -1 for none */
    int closed;         /* the daemon ends the connection */
    const char *needle; /* the answer's message contains it (a Result's; NULL: not checked) */
} expected;

#define B(name) TENFERRO__FRAME__BODY_##name
static const expected EXPECT_AFTER_HELLO[] = {
    {B(HELLO), B(RESULT), TF_ERR_PROTOCOL, 1, "Hello sent twice"},
    {B(UPLOAD), B(RESULT), TF_ERR_UNKNOWN_HANDLE, 0, "upload: tensor 0 is not live"},
    {B(DOWNLOAD), B(DOWNLOAD_REPLY), TF_ERR_UNKNOWN_HANDLE, 0, NULL},
    {B(SESSION_OPEN), B(RESULT), TF_OK, 0, NULL},
    {B(SUBMIT), B(RESULT), TF_ERR_INVALID_ARGUMENT, 0, "unknown submit mode 0"},
    {B(SESSION_RELEASE), 0, -1, 0, NULL},
    {B(FREE), 0, -1, 0, NULL},
    {B(STATUS_REQUEST), B(STATUS_REPLY), TF_OK, 0, NULL},
    {B(ADMIN_REQUEST), B(RESULT), TF_ERR_UNSUPPORTED, 0, "admin request kind 0 is not served"},
    {B(BUFFER_CREATE), B(RESULT), TF_ERR_INVALID_ARGUMENT, 0, "pinned buffer id 0 is zero"},
    {B(BUFFER_FREE), B(RESULT), TF_ERR_UNKNOWN_HANDLE, 0, "pinned buffer 0 is not live"},
    {B(TRANSFER), B(RESULT), TF_ERR_INVALID_ARGUMENT, 0, "transfer direction 0"},
    {B(TRANSFER_RELEASE), 0, -1, 0, NULL},
    {B(MAILBOX_DOORBELL), 0, -1, 0, NULL},
    {B(PREPARE), B(RESULT), TF_ERR_INVALID_ARGUMENT, 0, "a prepared graph's id must be nonzero"},
    {B(PREPARED_FREE), 0, -1, 0, NULL},
    {B(TENSOR_INFO), B(TENSOR_INFO_REPLY), TF_ERR_UNKNOWN_HANDLE, 0, NULL},
    {B(COPY_OFFER), B(COPY_OFFER_REPLY), TF_ERR_UNKNOWN_HANDLE, 0, NULL},
    {B(PEER_FETCH), B(PEER_FETCH_REPLY), TF_ERR_PERMISSION, 0, NULL},
    {B(COPY_TAKE), B(RESULT), TF_ERR_INVALID_ARGUMENT, 0, "a copy take needs the offer's token"},
    {B(MAPPED), 0, -1, 0, NULL},
};
#undef B

/* The row of EXPECT_AFTER_HELLO for a body case, or NULL for one the daemon does not serve. */
static const expected *served(int body) {
    for (size_t i = 0; i < sizeof EXPECT_AFTER_HELLO / sizeof EXPECT_AFTER_HELLO[0]; i++)
        if (EXPECT_AFTER_HELLO[i].body == body) return &EXPECT_AFTER_HELLO[i];
    return NULL;
}

/* After Hello: each request its handler's answer; each other case TF_ERR_UNSUPPORTED, counted. */
START_TEST(test_every_case_after_hello) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    int served_count = 0;
    for (int body = next_case(-1); body >= 0; body = next_case(body)) {
        const uint64_t unsupported = th_counter(&d, "requests_unsupported");
        int fd = th_raw_connect(&d);
        ck_assert_int_ge(fd, 0);
        tf__frame_free(th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION));
        outcome o;
        probe(fd, body, &o);
        close(fd);
        const expected *e = served(body);
        if (e) {
            served_count++;
            ck_assert_msg(o.reply == e->reply && o.status == e->status && o.closed == e->closed,
                          "body %d: answered by body %d status %d%s (\"%s\"), expected body %d "
                          "status %d%s",
                          body, o.reply, o.status, o.closed ? ", closed" : "", o.message, e->reply,
                          e->status, e->closed ? ", closed" : "");
            if (e->needle)
                ck_assert_msg(strstr(o.message, e->needle), "body %d: message \"%s\" lacks \"%s\"",
                              body, o.message, e->needle);
            ck_assert_uint_eq(th_counter(&d, "requests_unsupported"), unsupported);
        } else {
            ck_assert_msg(o.reply == TENFERRO__FRAME__BODY_RESULT && o.status == TF_ERR_UNSUPPORTED &&
                              !o.closed,
                          "body %d: answered by body %d status %d%s (\"%s\"), expected "
                          "TF_ERR_UNSUPPORTED",
                          body, o.reply, o.status, o.closed ? ", closed" : "", o.message);
            char needle[64];
            snprintf(needle, sizeof needle, "unknown message type (body %d)", decoded_case(body));
            ck_assert_msg(strstr(o.message, needle), "body %d: message \"%s\"", body, o.message);
            ck_assert_uint_eq(th_counter(&d, "requests_unsupported"), unsupported + 1);
        }
    }
    ck_assert_int_eq(served_count, (int)(sizeof EXPECT_AFTER_HELLO / sizeof EXPECT_AFTER_HELLO[0]));
    CK_DAEMON_STOP(&d);
}
END_TEST

/* Before Hello: every case but Hello is a protocol error that ends the connection. */
START_TEST(test_every_case_before_hello) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    for (int body = next_case(-1); body >= 0; body = next_case(body)) {
        if (body == TENFERRO__FRAME__BODY_HELLO) continue;
        const uint64_t errors = th_counter(&d, "protocol_errors");
        const uint64_t unsupported = th_counter(&d, "requests_unsupported");
        int fd = th_raw_connect(&d);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(send_empty_body(fd, 1, body), 0);
        Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
        ck_assert_msg(r != NULL, "body %d before Hello: no last word", body);
        ck_assert_uint_eq(r->seq, 0);
        CK_EXPECT_RESULT(r, TF_ERR_PROTOCOL, "the first frame must be Hello");
        ck_assert_msg(th_raw_closed(fd, RAW_MS), "body %d before Hello: the connection stayed open",
                      body);
        close(fd);
        ck_assert_uint_eq(th_counter(&d, "protocol_errors"), errors + 1);
        ck_assert_uint_eq(th_counter(&d, "requests_unsupported"), unsupported);
    }
    CK_DAEMON_STOP(&d);
}
END_TEST

/* A peer daemon's connection: only Hello and PeerFetch reach a handler, all else is refused. */
START_TEST(test_every_case_from_a_peer_daemon) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    const uint64_t unsupported = th_counter(&d, "requests_unsupported");
    int fd = th_raw_connect(&d);
    ck_assert_int_ge(fd, 0);
    Tenferro__Frame *r = th_raw_peer_hello(fd, RAW_MS);
    ck_assert_msg(r && r->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY, "no HelloReply");
    tf__frame_free(r);
    uint64_t seq = 1;
    for (int body = next_case(-1); body >= 0; body = next_case(body)) {
        if (body == TENFERRO__FRAME__BODY_HELLO) continue;
        ck_assert_int_eq(send_empty_body(fd, ++seq, body), 0);
        int got_fd = -1;
        r = th_raw_recv_fd(fd, RAW_MS, &got_fd);
        ck_assert_msg(r != NULL, "body %d from a peer daemon: no answer", body);
        ck_assert_int_eq(got_fd, -1);
        ck_assert_uint_eq(r->seq, seq);
        if (body == TENFERRO__FRAME__BODY_PEER_FETCH) {
            /* Its handler's answer: no offer has the empty token. */
            ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_PEER_FETCH_REPLY);
            ck_assert_int_ne(reply_status(r), TF_OK);
            tf__frame_free(r);
        } else {
            CK_EXPECT_RESULT(r, TF_ERR_PERMISSION, "only fetches offers");
        }
    }
    /* Hello reaches its handler too: a second one ends the connection. */
    ck_assert_int_eq(send_empty_body(fd, ++seq, TENFERRO__FRAME__BODY_HELLO), 0);
    r = th_raw_recv(fd, RAW_MS);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->seq, 0);
    CK_EXPECT_RESULT(r, TF_ERR_PROTOCOL, "Hello sent twice");
    ck_assert(th_raw_closed(fd, RAW_MS));
    close(fd);
    ck_assert_uint_eq(th_counter(&d, "requests_unsupported"), unsupported);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("requests");
    TCase *tc = tcase_create("table");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_every_case_after_hello);
    tcase_add_test(tc, test_every_case_before_hello);
    tcase_add_test(tc, test_every_case_from_a_peer_daemon);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
