/*
 * Unit tests of the frame codec (common/frame.c) and of the status list
 * (common/status.c, include/tenferro/status.h).
 *
 * Every byte between the client library and the daemon goes through
 * tf__frame_encode and tf__frame_decode: a 4-byte little-endian body length,
 * then one encoded tenferro.Frame. The tests round-trip a table of frames
 * (hello, a submit carrying operations, an upload carrying bytes, a result, a
 * status reply with nested repeated messages, a free list, an empty frame)
 * and check the header, every field that came back, and that re-encoding the
 * decoded frame gives the same bytes. They check that encode refuses a frame
 * one byte over max_bytes with TF_ERR_PROTOCOL, and that decode returns NULL
 * for garbage and for every truncation of a body. Last, the status X-macro
 * list must give each status a distinct non-empty name and message, and the
 * operation kinds of common/ops.h must equal the proto's OpKind numbers.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"
#include "common/ops.h"

/* ---- the frames under test, built into static storage ---- */

static Tenferro__Frame frame;
static char msg_text[] = "an operation failed: shapes differ ([2,3] and [3,2])";
static uint8_t upload_bytes[70000];

static void build_hello(void) {
    static Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.client_name = "unit-test \xc3\xa9"; /* UTF-8 survives */
    frame.seq = 1;
    frame.body_case = TENFERRO__FRAME__BODY_HELLO;
    frame.hello = &hello;
}

static uint64_t op_inputs[3][2] = {{5, 6}, {7, 0}, {8, 5}};
static int64_t op_params[3][3] = {{0}, {0, 2, -1}, {0}};

static void build_submit(void) {
    static Tenferro__Submit submit = TENFERRO__SUBMIT__INIT;
    static Tenferro__Op ops[3];
    static Tenferro__Op *op_ptrs[3];
    for (int i = 0; i < 3; i++) {
        Tenferro__Op init = TENFERRO__OP__INIT;
        ops[i] = init;
        op_ptrs[i] = &ops[i];
        ops[i].inputs = op_inputs[i];
        ops[i].params = op_params[i];
    }
    ops[0].kind = TF__OP_MATMUL;
    ops[0].n_inputs = 2;
    ops[0].output = 7;
    ops[1].kind = TF__OP_REDUCE_SUM;
    ops[1].n_inputs = 1;
    ops[1].output = 8;
    ops[1].n_params = 3;
    ops[1].flags = TF__REDUCE_KEEPDIMS;
    ops[2].kind = TF__OP_AXPBY;
    ops[2].n_inputs = 2;
    ops[2].output = UINT64_MAX;
    ops[2].alpha_re = -1.5;
    ops[2].alpha_im = 0.25;
    ops[2].beta_re = 1e300;
    ops[2].beta_im = -0.0;
    submit.session_id = 42;
    submit.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    submit.n_ops = 3;
    submit.ops = op_ptrs;
    frame.seq = ((uint64_t)1 << 40) + 3;
    frame.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    frame.submit = &submit;
}

static int64_t upload_shape[2] = {3, 5};

static void build_upload(void) {
    static Tenferro__Upload upload = TENFERRO__UPLOAD__INIT;
    for (size_t i = 0; i < sizeof upload_bytes; i++)
        upload_bytes[i] = (uint8_t)(i * 131 + (i >> 8));
    upload.tensor = 9;
    upload.create = 1;
    upload.dtype = TF_F64;
    upload.n_shape = 2;
    upload.shape = upload_shape;
    upload.offset = 128;
    upload.data.len = sizeof upload_bytes; /* > 65535, so three header bytes are in use */
    upload.data.data = upload_bytes;
    frame.seq = 77;
    frame.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    frame.upload = &upload;
}

static void build_result(void) {
    static Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = TF_ERR_SHAPE;
    result.message = msg_text;
    result.has_failed_index = 1;
    result.failed_index = 4;
    result.ops_accepted = 4;
    frame.seq = 1234567;
    frame.body_case = TENFERRO__FRAME__BODY_RESULT;
    frame.result = &result;
}

static void build_status_reply(void) {
    static Tenferro__StatusReply reply = TENFERRO__STATUS_REPLY__INIT;
    static Tenferro__Result result = TENFERRO__RESULT__INIT;
    static Tenferro__ClientInfo clients[2];
    static Tenferro__ClientInfo *client_ptrs[2];
    static Tenferro__Counter counters[3];
    static Tenferro__Counter *counter_ptrs[3];
    static const char *const counter_names[3] = {"frames_received", "ops_executed", "zero"};
    for (int i = 0; i < 2; i++) {
        Tenferro__ClientInfo init = TENFERRO__CLIENT_INFO__INIT;
        clients[i] = init;
        clients[i].client_id = (uint64_t)i + 1;
        clients[i].pid = -1 - i; /* int32: negative values survive */
        clients[i].name = i ? "second" : "first";
        clients[i].live_bytes = (uint64_t)1 << (33 + i);
        client_ptrs[i] = &clients[i];
    }
    for (int i = 0; i < 3; i++) {
        Tenferro__Counter init = TENFERRO__COUNTER__INIT;
        counters[i] = init;
        counters[i].name = (char *)counter_names[i];
        counters[i].value = (uint64_t)(2 - i) * 1000003;
        counter_ptrs[i] = &counters[i];
    }
    reply.result = &result;
    reply.device = "cpu (2 cores)";
    reply.uptime_ms = 86400000;
    reply.n_clients = 2;
    reply.clients = client_ptrs;
    reply.n_counters = 3;
    reply.counters = counter_ptrs;
    reply.policy = "wait";
    frame.seq = 5;
    frame.body_case = TENFERRO__FRAME__BODY_STATUS_REPLY;
    frame.status_reply = &reply;
}

static uint64_t free_ids[300];

static void build_free(void) {
    static Tenferro__Free fr = TENFERRO__FREE__INIT;
    for (size_t i = 0; i < 300; i++) free_ids[i] = (uint64_t)i * i * i * 2654435761u + 1;
    fr.n_tensors = 300;
    fr.tensors = free_ids;
    frame.seq = 0;
    frame.body_case = TENFERRO__FRAME__BODY_FREE;
    frame.free = &fr;
}

static void build_empty(void) {
    frame.seq = 0;
    frame.body_case = TENFERRO__FRAME__BODY__NOT_SET;
}

/* ---- what must come back ---- */

static void check_hello(const Tenferro__Frame *f) {
    ck_assert_uint_eq(f->hello->protocol_version, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert_str_eq(f->hello->client_name, "unit-test \xc3\xa9");
}

static void check_submit(const Tenferro__Frame *f) {
    const Tenferro__Submit *s = f->submit;
    ck_assert_uint_eq(s->session_id, 42);
    ck_assert_uint_eq(s->mode, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL);
    ck_assert_uint_eq(s->n_ops, 3);
    static const uint32_t kinds[3] = {TF__OP_MATMUL, TF__OP_REDUCE_SUM, TF__OP_AXPBY};
    static const uint64_t outputs[3] = {7, 8, UINT64_MAX};
    static const size_t n_inputs[3] = {2, 1, 2}, n_params[3] = {0, 3, 0};
    for (int i = 0; i < 3; i++) {
        const Tenferro__Op *op = s->ops[i];
        ck_assert_uint_eq(op->kind, kinds[i]);
        ck_assert_uint_eq(op->output, outputs[i]);
        ck_assert_uint_eq(op->n_inputs, n_inputs[i]);
        for (size_t j = 0; j < n_inputs[i]; j++) ck_assert_uint_eq(op->inputs[j], op_inputs[i][j]);
        ck_assert_uint_eq(op->n_params, n_params[i]);
        for (size_t j = 0; j < n_params[i]; j++) ck_assert_int_eq(op->params[j], op_params[i][j]);
    }
    ck_assert_uint_eq(s->ops[1]->flags, TF__REDUCE_KEEPDIMS);
    ck_assert(s->ops[2]->alpha_re == -1.5 && s->ops[2]->alpha_im == 0.25);
    ck_assert(s->ops[2]->beta_re == 1e300);
}

static void check_upload(const Tenferro__Frame *f) {
    const Tenferro__Upload *u = f->upload;
    ck_assert_uint_eq(u->tensor, 9);
    ck_assert(u->create);
    ck_assert_uint_eq(u->dtype, TF_F64);
    ck_assert_uint_eq(u->n_shape, 2);
    ck_assert_int_eq(u->shape[0], 3);
    ck_assert_int_eq(u->shape[1], 5);
    ck_assert_uint_eq(u->offset, 128);
    ck_assert_uint_eq(u->data.len, sizeof upload_bytes);
    ck_assert(memcmp(u->data.data, upload_bytes, sizeof upload_bytes) == 0);
}

static void check_result(const Tenferro__Frame *f) {
    const Tenferro__Result *r = f->result;
    ck_assert_uint_eq(r->status, TF_ERR_SHAPE);
    ck_assert_str_eq(r->message, msg_text);
    ck_assert(r->has_failed_index);
    ck_assert_uint_eq(r->failed_index, 4);
    ck_assert_uint_eq(r->session_id, 0);
    ck_assert_uint_eq(r->ops_accepted, 4);
}

static void check_status_reply(const Tenferro__Frame *f) {
    const Tenferro__StatusReply *r = f->status_reply;
    ck_assert_ptr_nonnull(r->result);
    ck_assert_uint_eq(r->result->status, TF_OK);
    ck_assert_str_eq(r->device, "cpu (2 cores)");
    ck_assert_str_eq(r->policy, "wait");
    ck_assert_uint_eq(r->uptime_ms, 86400000);
    ck_assert_uint_eq(r->n_clients, 2);
    ck_assert_int_eq(r->clients[1]->pid, -2);
    ck_assert_str_eq(r->clients[1]->name, "second");
    ck_assert_uint_eq(r->clients[1]->live_bytes, (uint64_t)1 << 34);
    ck_assert_uint_eq(r->n_counters, 3);
    ck_assert_str_eq(r->counters[1]->name, "ops_executed");
    ck_assert_uint_eq(r->counters[0]->value, 2000006);
    ck_assert_uint_eq(r->counters[2]->value, 0);
    ck_assert_uint_eq(r->n_reservations, 0);
}

static void check_free(const Tenferro__Frame *f) {
    ck_assert_uint_eq(f->free->n_tensors, 300);
    for (size_t i = 0; i < 300; i++) ck_assert_uint_eq(f->free->tensors[i], free_ids[i]);
}

static void check_empty(const Tenferro__Frame *f) { (void)f; }

typedef struct frame_case {
    const char *what;
    void (*build)(void);
    void (*check)(const Tenferro__Frame *decoded);
} frame_case;

static const frame_case frame_cases[] = {
    {"hello", build_hello, check_hello},
    {"submit with ops", build_submit, check_submit},
    {"upload with bytes", build_upload, check_upload},
    {"result", build_result, check_result},
    {"status reply", build_status_reply, check_status_reply},
    {"free list", build_free, check_free},
    {"empty", build_empty, check_empty},
};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint8_t *encoded;
static size_t encoded_len;

static void setup(void) {
    Tenferro__Frame init = TENFERRO__FRAME__INIT;
    frame = init;
    encoded = NULL;
    encoded_len = 0;
}

static void teardown(void) { free(encoded); }

/* Builds frame case i and encodes it under the default maximum. */
static void encode_case(int i) {
    frame_cases[i].build();
    tf_status st = tf__frame_encode(&frame, TF__DEFAULT_MAX_FRAME_BYTES, &encoded, &encoded_len);
    ck_assert_msg(st == TF_OK, "%s: encode %s", frame_cases[i].what, tf_status_name(st));
}

/*
 * A frame decodes to what was encoded: a little-endian header holding the body
 * length, the same body case, seq and fields, and the same bytes when encoded again.
 */
START_TEST(test_round_trip) {
    const frame_case *c = &frame_cases[_i];
    encode_case(_i);
    size_t body = tenferro__frame__get_packed_size(&frame);
    ck_assert_uint_eq(encoded_len, TF__FRAME_HEADER_BYTES + body);
    ck_assert_uint_eq(encoded[0], body & 0xFF);
    ck_assert_uint_eq(encoded[1], (body >> 8) & 0xFF);
    ck_assert_uint_eq(encoded[2], (body >> 16) & 0xFF);
    ck_assert_uint_eq(encoded[3], (body >> 24) & 0xFF);
    ck_assert_uint_eq(tf__frame_peek_length(encoded), body);

    Tenferro__Frame *got = tf__frame_decode(encoded + TF__FRAME_HEADER_BYTES, body);
    ck_assert_msg(got != NULL, "%s: does not decode", c->what);
    ck_assert_int_eq(got->body_case, frame.body_case);
    ck_assert_uint_eq(got->seq, frame.seq);
    c->check(got);

    uint8_t *again = NULL;
    size_t again_len = 0;
    ck_assert_int_eq(tf__frame_encode(got, TF__DEFAULT_MAX_FRAME_BYTES, &again, &again_len), TF_OK);
    ck_assert_uint_eq(again_len, encoded_len);
    ck_assert_msg(memcmp(again, encoded, encoded_len) == 0, "%s: re-encoding differs", c->what);
    free(again);
    tf__frame_free(got);
}
END_TEST

/* The header helpers write and read the length little-endian, all 32 bits of it. */
START_TEST(test_header_little_endian) {
    static const uint32_t lengths[] = {0, 1, 0xFF, 0x100, 0x04030201u, 0xFFFFFFFFu};
    for (size_t i = 0; i < sizeof lengths / sizeof lengths[0]; i++) {
        uint8_t h[4];
        tf__frame_put_length(h, lengths[i]);
        for (int b = 0; b < 4; b++) ck_assert_uint_eq(h[b], (lengths[i] >> (8 * b)) & 0xFF);
        ck_assert_uint_eq(tf__frame_peek_length(h), lengths[i]);
    }
}
END_TEST

/*
 * A frame of exactly max_bytes is encoded, one byte more is refused with TF_ERR_PROTOCOL and
 * nothing returned.
 */
START_TEST(test_encode_max_bytes) {
    const frame_case *c = &frame_cases[_i];
    c->build();
    size_t body = tenferro__frame__get_packed_size(&frame);
    uint8_t *out = NULL;
    size_t len = 0;
    ck_assert_int_eq(tf__frame_encode(&frame, body, &out, &len), TF_OK);
    ck_assert_uint_eq(len, TF__FRAME_HEADER_BYTES + body);
    free(out);
    if (body == 0) return; /* nothing is smaller than the empty frame */
    uint8_t sentinel;
    out = &sentinel;
    len = 12345;
    ck_assert_int_eq(tf__frame_encode(&frame, body - 1, &out, &len), TF_ERR_PROTOCOL);
    ck_assert_ptr_eq(out, &sentinel);
    ck_assert_uint_eq(len, 12345);
    ck_assert_int_eq(tf__frame_encode(&frame, 0, &out, &len), TF_ERR_PROTOCOL);
}
END_TEST

/*
 * A body cut anywhere inside its message does not decode (it is not mistaken for a shorter frame).
 */
START_TEST(test_decode_truncated) {
    const frame_case *c = &frame_cases[_i];
    encode_case(_i);
    size_t body = encoded_len - TF__FRAME_HEADER_BYTES;
    /* Cutting right after seq leaves a valid frame; every cut inside the body message must fail. */
    Tenferro__Frame seq_only = TENFERRO__FRAME__INIT;
    seq_only.seq = frame.seq;
    size_t prefix = tenferro__frame__get_packed_size(&seq_only);
    size_t step = body / 2000 + 1;
    for (size_t cut = prefix + 1; cut < body; cut += (cut + step < body) ? step : 1) {
        Tenferro__Frame *got = tf__frame_decode(encoded + TF__FRAME_HEADER_BYTES, cut);
        ck_assert_msg(got == NULL, "%s: %zu of %zu bytes decoded", c->what, cut, body);
    }
}
END_TEST

/* Bytes that are not a Frame: bad wire types, field 0, runaway varints, lengths past the end. */
typedef struct garbage_case {
    const char *what;
    size_t len;
    uint8_t bytes[24];
} garbage_case;

static const garbage_case garbage_cases[] = {
    {"wire type 7", 1, {0x0F}},
    {"wire type 6", 2, {0x0E, 0x00}},
    {"field number 0", 2, {0x00, 0x01}},
    {"tag without value", 1, {0x08}},
    {"11-byte varint", 12, {0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1}},
    {"length past the end", 3, {0x52, 0x05, 0x01}},
    {"huge length", 6, {0x52, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F}},
    {"bad nested message", 3, {0x52, 0x01, 0x0F}},
    {"hello with a varint for a string", 4, {0x52, 0x02, 0x10, 0x01}},
    {"an HTTP request", 16, "GET / HTTP/1.1\r\n"},
    {"all ones", 8, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}},
};

/* Garbage never decodes into a frame: decode returns NULL for each case. */
START_TEST(test_decode_garbage) {
    const garbage_case *g = &garbage_cases[_i];
    Tenferro__Frame *got = tf__frame_decode(g->bytes, g->len);
    ck_assert_msg(got == NULL, "%s decoded", g->what);
    tf__frame_free(NULL); /* freeing nothing is allowed */
}
END_TEST

/* The X-macro list as data: number, name and message of every status. */
typedef struct status_row {
    tf_status status;
    int number;
    const char *name;
    const char *message;
} status_row;

static const status_row status_rows[] = {
#define TF_STATUS_ROW_(name, num, msg) {name, num, #name, msg},
    TF_STATUS_MAP(TF_STATUS_ROW_)
#undef TF_STATUS_ROW_
};

/*
 * Each status has its own non-empty name and message, from the one list; numbers are dense from 0;
 * unknown values get a fallback.
 */
START_TEST(test_status_names) {
    for (int i = 0; i < N_OF(status_rows); i++) {
        const status_row *r = &status_rows[i];
        ck_assert_int_eq(r->number, i); /* append-only, never renumbered */
        ck_assert_int_eq((int)r->status, r->number);
        const char *name = tf_status_name(r->status);
        const char *text = tf_strerror(r->status);
        ck_assert_ptr_nonnull(name);
        ck_assert_ptr_nonnull(text);
        ck_assert_str_eq(name, r->name);
        ck_assert_str_eq(text, r->message);
        ck_assert_msg(strncmp(name, "TF_", 3) == 0 && name[3] != '\0', "name \"%s\"", name);
        ck_assert_msg(text[0] != '\0', "%s has an empty message", name);
        for (int j = 0; j < i; j++) {
            ck_assert_str_ne(name, tf_status_name(status_rows[j].status));
            ck_assert_str_ne(text, tf_strerror(status_rows[j].status));
        }
    }
    tf_status unknown = (tf_status)(N_OF(status_rows) + 1000);
    ck_assert_str_eq(tf_status_name(unknown), "TF_ERR_UNKNOWN");
    ck_assert_str_eq(tf_strerror(unknown), "unknown status");
    ck_assert_str_eq(tf_status_name(TF_ERR_CONTENDED), "TF_ERR_CONTENDED");
}
END_TEST

/* Operation kinds travel on the wire unchanged: every TF__OP_* equals the proto's OpKind number. */
/* The .proto's Status and DType list every C status and dtype, by the same numbers. */
START_TEST(test_status_and_dtype_enums_match_proto) {
    int n = 0;
#define COUNT_(name, num, msg) n++;
    TF_STATUS_MAP(COUNT_)
#undef COUNT_
    ck_assert_uint_eq(tenferro__status__descriptor.n_values, (unsigned)n);
    for (unsigned i = 0; i < tenferro__status__descriptor.n_values; i++) {
        const ProtobufCEnumValue *v = &tenferro__status__descriptor.values[i];
        ck_assert_str_eq(v->name, tf_status_name((tf_status)v->value));
    }
    ck_assert_uint_eq(tenferro__dtype__descriptor.n_values, 5);
    static const char *const dtype_names[] = {"", "TF_F32", "TF_F64", "TF_C64", "TF_C128"};
    for (int d = TF_F32; d <= TF_C128; d++) {
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&tenferro__dtype__descriptor, d);
        ck_assert_ptr_nonnull(v);
        ck_assert_str_eq(v->name, dtype_names[d]);
    }
}
END_TEST

static Suite *frame_suite(void) {
    Suite *s = suite_create("frame");
    TCase *tc = tcase_create("codec");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_round_trip, 0, N_OF(frame_cases));
    tcase_add_test(tc, test_header_little_endian);
    tcase_add_loop_test(tc, test_encode_max_bytes, 0, N_OF(frame_cases));
    tcase_add_loop_test(tc, test_decode_truncated, 0, N_OF(frame_cases));
    tcase_add_loop_test(tc, test_decode_garbage, 0, N_OF(garbage_cases));
    tcase_add_test(tc, test_status_names);
    tcase_add_test(tc, test_status_and_dtype_enums_match_proto);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(frame_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
