/*
 * Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
 * in the layouts of fuzz-input.h: for fuzz-frame, valid exchanges with every
 * request type (each operation kind among them) and a few broken streams;
 * Mapped frames where a client sends them and in odd places; for
 * fuzz-mailbox, valid and refused mailbox requests around the frames that
 * touch the same transfers, some with a writer thread racing the daemon;
 * for fuzz-ring, entries of the submission ring (Submit and SessionOpen
 * frames, refused bodies, broken headers, wraps, header words) published
 * in the ways a client does; for fuzz-config, configuration files, flags and
 * settings. Every frame is encoded with the generated protobuf-c code, so
 * the seeds follow the .proto. The output is deterministic.
 *
 *   gen-corpus DIR      writes DIR/frame, DIR/mailbox, DIR/ring, DIR/config and DIR/graph
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/completion.h"
#include "common/frame.h"
#include "common/ops.h"
#include "common/ring.h"
#include "tests/fuzz/fuzz-input.h"

/* One seed being written. */
typedef struct seed {
    uint8_t bytes[65536];
    size_t len;
    uint64_t seq; /* the last sequence number used */
} seed;

static const char *out_dir;

static void put(seed *s, const void *p, size_t n) {
    if (s->len + n > sizeof s->bytes) {
        fprintf(stderr, "gen-corpus: a seed outgrew its buffer\n");
        exit(1);
    }
    memcpy(s->bytes + s->len, p, n);
    s->len += n;
}

static void put_u8(seed *s, uint8_t v) { put(s, &v, 1); }

static void put_u16(seed *s, size_t v) {
    put_u8(s, (uint8_t)v);
    put_u8(s, (uint8_t)(v >> 8));
}

/* Starts a seed with its flags byte. */
static void begin(seed *s, uint8_t flags) {
    memset(s, 0, sizeof *s);
    s->seq = 2; /* the harness's Hello and Mapped(0) */
    put_u8(s, flags);
}

/* Writes a finished seed as DIR/target/name. */
static void save(const seed *s, const char *target, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", out_dir, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof path, "%s/%s/%s", out_dir, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(s->bytes, 1, s->len, f) != s->len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Packs a frame body (its seq the next one unless set). */
static size_t pack(seed *s, Tenferro__Frame *f, uint8_t *body) {
    if (f->seq == 0) f->seq = ++s->seq;
    return tenferro__frame__pack(f, body);
}

/* A FRAME record (op FZ_OP_FRAME or FZ_MB_OP_FRAME, both 0 mod their range's FRAME case). */
static void put_frame_op(seed *s, uint8_t op, Tenferro__Frame *f) {
    static uint8_t body[65536];
    if (tenferro__frame__get_packed_size(f) > sizeof body) exit(1);
    size_t n = pack(s, f, body);
    put_u8(s, op);
    put_u16(s, n);
    put(s, body, n);
}

static void put_frame(seed *s, Tenferro__Frame *f) { put_frame_op(s, FZ_OP_FRAME, f); }

/* A frame exactly as on the wire: length header and body (raw streams). */
static void put_wire(seed *s, Tenferro__Frame *f) {
    static uint8_t body[65536];
    size_t n = pack(s, f, body);
    uint8_t header[TF__FRAME_HEADER_BYTES];
    tf__frame_put_length(header, (uint32_t)n);
    put(s, header, sizeof header);
    put(s, body, n);
}

/* ---- frame builders ---- */

static Tenferro__Frame frame(Tenferro__Frame__BodyCase body) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = body;
    return f;
}

static Tenferro__Frame hello(Tenferro__Hello *h, uint32_t version, const char *name) {
    tenferro__hello__init(h);
    h->protocol_version = version;
    h->client_name = (char *)name;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_HELLO);
    f.hello = h;
    return f;
}

/* Creates tensor `id` (f32 of `n` elements, values 1..n unless n is large). */
static void put_create(seed *s, uint8_t op, uint64_t id, uint32_t dtype, const int64_t *shape,
                       size_t rank, int with_data) {
    static uint8_t data[65536];
    size_t elems = 1, elem = dtype == TF_F32 ? 4 : dtype == TF_F64 || dtype == TF_C64 ? 8 : 16;
    for (size_t i = 0; i < rank; i++) elems *= (size_t)shape[i];
    size_t bytes = elems * elem;
    for (size_t i = 0; i < bytes && i < sizeof data; i++) data[i] = (uint8_t)(i % 7 == 0 ? 0x3f : i);
    if (dtype == TF_F32)
        for (size_t i = 0; i < elems && i * 4 < sizeof data; i++) {
            float v = (float)(i + 1);
            memcpy(data + 4 * i, &v, 4);
        }
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = id;
    up.create = 1;
    up.dtype = dtype;
    up.shape = (int64_t *)shape;
    up.n_shape = rank;
    if (with_data && bytes <= sizeof data) {
        up.data.data = data;
        up.data.len = bytes;
    }
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_UPLOAD);
    f.upload = &up;
    put_frame_op(s, op, &f);
}

static void put_upload_write(seed *s, uint64_t id, uint64_t offset, const void *data, size_t len) {
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = id;
    up.offset = offset;
    up.data.data = (uint8_t *)data;
    up.data.len = len;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_UPLOAD);
    f.upload = &up;
    put_frame(s, &f);
}

static void put_download_op(seed *s, uint8_t op, uint64_t id, uint64_t offset, uint64_t length) {
    Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
    dl.tensor = id;
    dl.offset = offset;
    dl.length = length;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_DOWNLOAD);
    f.download = &dl;
    put_frame_op(s, op, &f);
}

static void put_download(seed *s, uint64_t id, uint64_t offset, uint64_t length) {
    put_download_op(s, FZ_OP_FRAME, id, offset, length);
}

static void put_free_op(seed *s, uint8_t op, const uint64_t *ids, size_t n) {
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    fr.tensors = (uint64_t *)ids;
    fr.n_tensors = n;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_FREE);
    f.free = &fr;
    put_frame_op(s, op, &f);
}

static void put_session_open(seed *s) {
    Tenferro__SessionOpen so = TENFERRO__SESSION_OPEN__INIT;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_SESSION_OPEN);
    f.session_open = &so;
    put_frame(s, &f);
}

static void put_session_release(seed *s, uint64_t id) {
    Tenferro__SessionRelease sr = TENFERRO__SESSION_RELEASE__INIT;
    sr.session_id = id;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_SESSION_RELEASE);
    f.session_release = &sr;
    put_frame(s, &f);
}

/* An operation: kind, inputs, output, params, coefficients, flags. */
typedef struct op_spec {
    uint32_t kind;
    uint64_t in[3];
    size_t n_in;
    uint64_t out;
    int64_t params[8];
    size_t n_params;
    double alpha, beta;
    uint32_t flags;
} op_spec;

static void put_submit_op(seed *s, uint8_t rec, uint64_t session, uint32_t mode, const op_spec *ops,
                          size_t n) {
    Tenferro__Op op[16], *ptrs[16];
    for (size_t i = 0; i < n; i++) {
        tenferro__op__init(&op[i]);
        op[i].kind = ops[i].kind;
        op[i].inputs = (uint64_t *)ops[i].in;
        op[i].n_inputs = ops[i].n_in;
        op[i].output = ops[i].out;
        op[i].params = (int64_t *)ops[i].params;
        op[i].n_params = ops[i].n_params;
        op[i].alpha_re = ops[i].alpha;
        op[i].beta_re = ops[i].beta;
        op[i].flags = ops[i].flags;
        ptrs[i] = &op[i];
    }
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.session_id = session;
    sub.mode = mode;
    sub.ops = ptrs;
    sub.n_ops = n;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_SUBMIT);
    f.submit = &sub;
    put_frame_op(s, rec, &f);
}

static void put_submit(seed *s, uint64_t session, uint32_t mode, const op_spec *ops, size_t n) {
    put_submit_op(s, FZ_OP_FRAME, session, mode, ops, n);
}

static void put_status(seed *s) {
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_STATUS_REQUEST);
    f.status_request = &sr;
    put_frame(s, &f);
}

static void put_admin(seed *s, uint32_t kind, uint64_t client) {
    Tenferro__AdminRequest ar = TENFERRO__ADMIN_REQUEST__INIT;
    ar.kind = kind;
    ar.client_id = client;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_ADMIN_REQUEST);
    f.admin_request = &ar;
    put_frame(s, &f);
}

static void put_buffer_create_op(seed *s, uint8_t op, uint64_t id, uint64_t bytes) {
    Tenferro__BufferCreate bc = TENFERRO__BUFFER_CREATE__INIT;
    bc.buffer = id;
    bc.bytes = bytes;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_BUFFER_CREATE);
    f.buffer_create = &bc;
    put_frame_op(s, op, &f);
}

static void put_buffer_free_op(seed *s, uint8_t op, uint64_t id) {
    Tenferro__BufferFree bf = TENFERRO__BUFFER_FREE__INIT;
    bf.buffer = id;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_BUFFER_FREE);
    f.buffer_free = &bf;
    put_frame_op(s, op, &f);
}

static void put_transfer(seed *s, uint32_t dir, uint64_t buffer, uint64_t tensor, uint32_t slot,
                         uint64_t offset, uint64_t bytes) {
    Tenferro__Transfer tr = TENFERRO__TRANSFER__INIT;
    tr.direction = dir;
    tr.buffer = buffer;
    tr.tensor = tensor;
    tr.slot = slot;
    tr.offset = offset;
    tr.bytes = bytes;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_TRANSFER);
    f.transfer = &tr;
    put_frame(s, &f);
}

static void put_transfer_release_op(seed *s, uint8_t op, uint32_t slot) {
    Tenferro__TransferRelease tr = TENFERRO__TRANSFER_RELEASE__INIT;
    tr.slot = slot;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_TRANSFER_RELEASE);
    f.transfer_release = &tr;
    put_frame_op(s, op, &f);
}

static void put_doorbell_op(seed *s, uint8_t op) {
    Tenferro__MailboxDoorbell db = TENFERRO__MAILBOX_DOORBELL__INIT;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_MAILBOX_DOORBELL);
    f.mailbox_doorbell = &db;
    put_frame_op(s, op, &f);
}

static void put_mapped_op(seed *s, uint8_t op, uint64_t buffer) {
    Tenferro__Mapped m = TENFERRO__MAPPED__INIT;
    m.buffer = buffer;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_MAPPED);
    f.mapped = &m;
    put_frame_op(s, op, &f);
}

static void put_mapped(seed *s, uint64_t buffer) { put_mapped_op(s, FZ_OP_FRAME, buffer); }

/* ---- fuzz-frame seeds ---- */

static const int64_t shape4[] = {4}, shape23[] = {2, 3}, shape32[] = {3, 2}, shape22[] = {2, 2},
                     shape234[] = {2, 3, 4};

/* A scoped burst running one operation on fresh inputs, then the result downloaded. */
static void seed_op(const char *name, uint32_t dtype, const int64_t *shape, size_t rank,
                    const int64_t *shape_b, size_t rank_b, op_spec op) {
    seed s;
    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, dtype, shape, rank, 1);
    if (shape_b) put_create(&s, FZ_OP_FRAME, 2, dtype, shape_b, rank_b, 1);
    put_submit(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &op, 1);
    put_download(&s, op.out ? op.out : 1, 0, 16);
    put_u8(&s, FZ_OP_SETTLE);
    save(&s, "frame", name);
}

static void frame_ops(void) {
    static const struct {
        const char *name;
        uint32_t kind;
        int binary;
    } simple[] = {
        {"op-add", TF__OP_ADD, 1},   {"op-sub", TF__OP_SUB, 1},   {"op-mul", TF__OP_MUL, 1},
        {"op-div", TF__OP_DIV, 1},   {"op-neg", TF__OP_NEG, 0},   {"op-abs", TF__OP_ABS, 0},
        {"op-exp", TF__OP_EXP, 0},   {"op-log", TF__OP_LOG, 0},   {"op-sqrt", TF__OP_SQRT, 0},
        {"op-copy", TF__OP_COPY, 0},
    };
    for (size_t i = 0; i < sizeof simple / sizeof *simple; i++) {
        op_spec op = {.kind = simple[i].kind, .in = {1, 2}, .n_in = simple[i].binary ? 2 : 1,
                      .out = 3};
        seed_op(simple[i].name, TF_F32, shape23, 2, simple[i].binary ? shape23 : NULL, 2, op);
    }
    seed_op("op-conj", TF_C64, shape4, 1, NULL, 0,
            (op_spec){.kind = TF__OP_CONJ, .in = {1}, .n_in = 1, .out = 3});
    seed_op("op-scale", TF_F64, shape4, 1, NULL, 0,
            (op_spec){.kind = TF__OP_SCALE, .in = {1}, .n_in = 1, .out = 3, .alpha = 2.5});
    seed_op("op-axpby", TF_C128, shape4, 1, shape4, 1,
            (op_spec){.kind = TF__OP_AXPBY, .in = {1, 2}, .n_in = 2, .out = 3, .alpha = 2,
                      .beta = -1});
    seed_op("op-permute", TF_F32, shape234, 3, NULL, 0,
            (op_spec){.kind = TF__OP_PERMUTE, .in = {1}, .n_in = 1, .out = 3,
                      .params = {2, 0, 1}, .n_params = 3});
    seed_op("op-reshape", TF_F32, shape23, 2, NULL, 0,
            (op_spec){.kind = TF__OP_RESHAPE, .in = {1}, .n_in = 1, .out = 3, .params = {3, 2},
                      .n_params = 2});
    seed_op("op-reduce-sum", TF_F64, shape234, 3, NULL, 0,
            (op_spec){.kind = TF__OP_REDUCE_SUM, .in = {1}, .n_in = 1, .out = 3,
                      .params = {0, 2}, .n_params = 2});
    seed_op("op-reduce-max-keepdims", TF_F32, shape234, 3, NULL, 0,
            (op_spec){.kind = TF__OP_REDUCE_MAX, .in = {1}, .n_in = 1, .out = 3, .params = {1},
                      .n_params = 1, .flags = TF__REDUCE_KEEPDIMS});
    seed_op("op-reduce-min", TF_F32, shape23, 2, NULL, 0,
            (op_spec){.kind = TF__OP_REDUCE_MIN, .in = {1}, .n_in = 1, .out = 3, .params = {0},
                      .n_params = 1});
    seed_op("op-matmul", TF_F32, shape23, 2, shape32, 2,
            (op_spec){.kind = TF__OP_MATMUL, .in = {1, 2}, .n_in = 2, .out = 3});
    seed_op("op-matmul-batched-c64", TF_C64, shape234, 3, (const int64_t[]){2, 4, 3}, 3,
            (op_spec){.kind = TF__OP_MATMUL, .in = {1, 2}, .n_in = 2, .out = 3});
    seed_op("op-matmul-f64", TF_F64, shape23, 2, shape32, 2,
            (op_spec){.kind = TF__OP_MATMUL, .in = {1, 2}, .n_in = 2, .out = 3});
    seed_op("op-matmul-c128", TF_C128, shape22, 2, shape22, 2,
            (op_spec){.kind = TF__OP_MATMUL, .in = {1, 2}, .n_in = 2, .out = 3});
    seed_op("op-free", TF_F32, shape4, 1, shape4, 1,
            (op_spec){.kind = TF__OP_FREE, .in = {1, 2}, .n_in = 2});
}

/*
 * Mapped in odd places: an unknown id, the page twice, before the Hello,
 * before and after its BufferCreate, repeated, for a buffer in a transfer
 * or being freed, just before a hang-up, for the other client's id, and a
 * page that stays unsealed while the input uses it.
 */
static void frame_mapped(void) {
    const uint32_t up = TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD,
                   down = TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD;
    seed s;
    Tenferro__Hello h;
    Tenferro__Frame f;

    begin(&s, 0);
    put_mapped(&s, 77);
    put_mapped(&s, 0);
    put_mapped(&s, UINT64_MAX);
    put_doorbell_op(&s, FZ_OP_FRAME);
    put_status(&s);
    save(&s, "frame", "mapped-unknown-and-repeated");

    begin(&s, FZ_FRAME_NO_HELLO);
    s.seq = 0;
    put_mapped(&s, 0);
    f = hello(&h, TENFERRO__PROTOCOL__PROTOCOL_VERSION, "mapped-first");
    put_frame(&s, &f);
    put_mapped(&s, 0);
    put_doorbell_op(&s, FZ_OP_FRAME);
    save(&s, "frame", "mapped-before-hello");

    begin(&s, FZ_FRAME_NO_MAPPED);
    s.seq = 1;
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 4096);
    put_mapped(&s, 5);
    put_transfer(&s, up, 5, 1, 0, 0, 16);
    put_doorbell_op(&s, FZ_OP_FRAME);
    put_u8(&s, FZ_OP_SETTLE);
    put_mapped(&s, 0);
    put_transfer(&s, up, 5, 1, 0, 0, 16);
    put_u8(&s, FZ_OP_SETTLE);
    put_transfer_release_op(&s, FZ_OP_FRAME, 0);
    save(&s, "frame", "mapped-page-late");

    begin(&s, FZ_FRAME_NO_MAPPED);
    s.seq = 1;
    put_session_open(&s);
    put_status(&s);
    put_u8(&s, FZ_OP_HANGUP);
    save(&s, "frame", "mapped-page-never");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_mapped(&s, 5);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 4096);
    put_transfer(&s, up, 5, 1, 0, 0, 16);
    put_mapped(&s, 5);
    put_transfer(&s, up, 5, 1, 1, 0, 16);
    put_mapped(&s, 5);
    put_u8(&s, FZ_OP_SETTLE);
    put_transfer(&s, down, 5, 1, 2, 16, 16);
    put_download(&s, 1, 0, 16);
    save(&s, "frame", "mapped-before-and-after-create");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, (const int64_t[]){4096}, 1, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 16384);
    put_mapped(&s, 5);
    put_transfer(&s, up, 5, 1, 0, 0, 16384);
    put_mapped(&s, 5);
    put_buffer_free_op(&s, FZ_OP_FRAME, 5);
    put_mapped(&s, 5);
    put_u8(&s, FZ_OP_SETTLE);
    put_transfer_release_op(&s, FZ_OP_FRAME, 0);
    put_buffer_free_op(&s, FZ_OP_FRAME, 5);
    put_mapped(&s, 5);
    save(&s, "frame", "mapped-buffer-in-transfer");

    begin(&s, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 1 << 20);
    put_buffer_create_op(&s, FZ_OP_FRAME, 6, 4096);
    put_mapped(&s, 5);
    put_mapped(&s, 6);
    put_buffer_free_op(&s, FZ_OP_FRAME, 6);
    put_u8(&s, FZ_OP_HANGUP);
    save(&s, "frame", "mapped-then-hangup");

    begin(&s, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 4096);
    put_u8(&s, FZ_OP_SWITCH);
    put_mapped(&s, 5);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 8192);
    put_u8(&s, FZ_OP_SWITCH);
    put_mapped(&s, 5);
    put_u8(&s, FZ_OP_SWITCH);
    put_mapped(&s, 5);
    put_buffer_free_op(&s, FZ_OP_FRAME, 5);
    save(&s, "frame", "mapped-two-clients");

    begin(&s, FZ_FRAME_SLOW_READER | FZ_FRAME_NO_MAPPED);
    s.seq = 1;
    put_buffer_create_op(&s, FZ_OP_FRAME, 1, 4096);
    put_buffer_create_op(&s, FZ_OP_FRAME, 2, 4096);
    put_mapped(&s, 2);
    put_mapped(&s, 0);
    put_mapped(&s, 1);
    put_status(&s);
    save(&s, "frame", "mapped-slow-reader");
}

static void frame_requests(void) {
    seed s;
    Tenferro__Hello h;
    Tenferro__Frame f;

    begin(&s, 0);
    save(&s, "frame", "hello");

    begin(&s, FZ_FRAME_RAW | FZ_FRAME_NO_HELLO);
    s.seq = 0;
    f = hello(&h, TENFERRO__PROTOCOL__PROTOCOL_VERSION, "raw");
    put_wire(&s, &f);
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    f = frame(TENFERRO__FRAME__BODY_STATUS_REQUEST);
    f.status_request = &sr;
    put_wire(&s, &f);
    save(&s, "frame", "raw-hello-status");

    begin(&s, FZ_FRAME_NO_HELLO);
    s.seq = 0;
    put_status(&s);
    save(&s, "frame", "status-before-hello");

    begin(&s, FZ_FRAME_NO_HELLO);
    s.seq = 0;
    f = hello(&h, TENFERRO__PROTOCOL__PROTOCOL_VERSION + 1, "future");
    put_frame(&s, &f);
    save(&s, "frame", "hello-wrong-version");

    begin(&s, 0);
    f = hello(&h, TENFERRO__PROTOCOL__PROTOCOL_VERSION, "again");
    put_frame(&s, &f);
    save(&s, "frame", "hello-twice");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_download(&s, 1, 0, 16);
    put_download(&s, 1, 4, 8);
    save(&s, "frame", "upload-download");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 7, TF_F64, shape23, 2, 0);
    put_upload_write(&s, 7, 8, "\0\0\0\0\0\0\xf0\x3f", 8);
    put_upload_write(&s, 7, 48, "\1", 1);
    put_download(&s, 7, 0, 48);
    put_download(&s, 7, 40, 16);
    put_download(&s, 8, 0, 8);
    save(&s, "frame", "upload-write-chunks");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_create(&s, FZ_OP_FRAME, 2, TF_C128, shape22, 2, 1);
    put_create(&s, FZ_OP_FRAME, 2, TF_F32, shape4, 1, 1);
    put_free_op(&s, FZ_OP_FRAME, (const uint64_t[]){1, 2, 3}, 3);
    put_download(&s, 1, 0, 4);
    save(&s, "frame", "free");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape23, 2, 1);
    put_create(&s, FZ_OP_FRAME, 2, TF_F32, shape23, 2, 1);
    put_session_open(&s);
    put_session_open(&s);
    op_spec add = {.kind = TF__OP_ADD, .in = {1, 2}, .n_in = 2, .out = 3};
    op_spec mul = {.kind = TF__OP_MUL, .in = {3, 3}, .n_in = 2, .out = 4};
    op_spec neg = {.kind = TF__OP_NEG, .in = {4}, .n_in = 1, .out = 5};
    put_submit(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE, &add, 1);
    put_submit(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE, &mul, 1);
    put_submit(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED, &neg, 1);
    put_submit(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, &neg, 1);
    put_submit(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE, &neg, 1);
    put_download(&s, 5, 0, 24);
    save(&s, "frame", "session-held");

    begin(&s, 0);
    put_session_open(&s);
    put_session_release(&s, 2);
    put_session_release(&s, 1);
    put_session_open(&s);
    save(&s, "frame", "session-release");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    op_spec chain[] = {
        {.kind = TF__OP_ADD, .in = {1, 1}, .n_in = 2, .out = 2},
        {.kind = TF__OP_SQRT, .in = {2}, .n_in = 1, .out = 3},
        {.kind = TF__OP_DIV, .in = {3, 1}, .n_in = 2, .out = 4},
        {.kind = TF__OP_ADD, .in = {4, 9}, .n_in = 2, .out = 5},
    };
    put_submit(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED, chain, 3);
    put_submit(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, chain + 3, 1);
    put_submit(&s, 0, 9, chain, 1);
    put_download(&s, 4, 0, 16);
    save(&s, "frame", "scoped-burst");

    begin(&s, 0);
    put_status(&s);
    save(&s, "frame", "status");

    begin(&s, 0);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_TRIM, 0);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_TERMINATE, 9);
    put_admin(&s, 7, 0);
    save(&s, "frame", "admin-trim");

    begin(&s, 0);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_DRAIN, 0);
    put_status(&s);
    save(&s, "frame", "admin-drain");

    begin(&s, 0);
    put_u8(&s, FZ_OP_SWITCH);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_TERMINATE, 1);
    put_u8(&s, FZ_OP_SWITCH);
    put_status(&s);
    save(&s, "frame", "admin-terminate-other");

    begin(&s, 0);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_TERMINATE, 1);
    save(&s, "frame", "admin-terminate-self");

    begin(&s, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 1, 4096);
    put_mapped(&s, 1);
    put_buffer_create_op(&s, FZ_OP_FRAME, 1, 4096);
    put_buffer_create_op(&s, FZ_OP_FRAME, 2, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 3, (uint64_t)1 << 40);
    put_buffer_free_op(&s, FZ_OP_FRAME, 1);
    put_buffer_free_op(&s, FZ_OP_FRAME, 1);
    save(&s, "frame", "buffers");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 4096);
    put_mapped(&s, 5);
    put_transfer(&s, TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD, 5, 1, 0, 0, 16);
    put_transfer(&s, TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD, 5, 1, 1, 0, 16);
    put_u8(&s, FZ_OP_SETTLE);
    put_transfer(&s, TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD, 5, 1, 1, 64, 16);
    put_transfer_release_op(&s, FZ_OP_FRAME, 1);
    put_transfer(&s, TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD, 5, 1, 600, 0, 16);
    put_buffer_free_op(&s, FZ_OP_FRAME, 5);
    put_download(&s, 1, 0, 16);
    save(&s, "frame", "transfers");

    begin(&s, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, shape4, 1, 1);
    put_buffer_create_op(&s, FZ_OP_FRAME, 5, 16);
    put_mapped(&s, 5);
    put_transfer(&s, TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD, 5, 1, 3, 0, 16);
    put_transfer_release_op(&s, FZ_OP_FRAME, 3);
    put_free_op(&s, FZ_OP_FRAME, (const uint64_t[]){1}, 1);
    put_u8(&s, FZ_OP_HANGUP);
    save(&s, "frame", "transfer-released-hangup");

    begin(&s, 0);
    put_doorbell_op(&s, FZ_OP_FRAME);
    save(&s, "frame", "doorbell");

    begin(&s, 0);
    Tenferro__Result res = TENFERRO__RESULT__INIT;
    f = frame(TENFERRO__FRAME__BODY_RESULT);
    f.result = &res;
    put_frame(&s, &f);
    put_u8(&s, FZ_OP_FRAME);
    put_u16(&s, 5);
    put(&s, "\x08\x05\xf8\x06\x01", 5); /* seq 5, then varint field 111 (no such body) */
    save(&s, "frame", "unsupported-bodies");

    begin(&s, FZ_FRAME_WAIT_POLICY);
    put_session_open(&s);
    put_u8(&s, FZ_OP_SWITCH);
    s.seq = 1;
    put_session_open(&s);
    put_u8(&s, FZ_OP_SWITCH);
    put_submit(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, NULL, 0);
    put_u8(&s, FZ_OP_SETTLE);
    put_u8(&s, FZ_OP_SWITCH);
    put_status(&s);
    save(&s, "frame", "two-clients-wait");

    begin(&s, 0);
    put_session_open(&s);
    put_u8(&s, FZ_OP_SWITCH);
    s.seq = 1;
    put_session_open(&s);
    op_spec one = {.kind = TF__OP_NEG, .in = {1}, .n_in = 1, .out = 2};
    put_submit(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &one, 1);
    put_u8(&s, FZ_OP_SWITCH);
    put_u8(&s, FZ_OP_HANGUP);
    put_u8(&s, FZ_OP_SWITCH);
    put_session_open(&s);
    save(&s, "frame", "two-clients-contended");

    begin(&s, FZ_FRAME_OTHER_USER);
    put_admin(&s, TENFERRO__ADMIN_KIND__ADMIN_DRAIN, 0);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, (const int64_t[]){65536}, 1, 0);
    put_create(&s, FZ_OP_FRAME, 2, TF_F32, (const int64_t[]){32768}, 1, 0);
    put_u8(&s, FZ_OP_SWITCH);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, (const int64_t[]){32768}, 1, 0);
    put_buffer_create_op(&s, FZ_OP_FRAME, 1, 4 << 20);
    put_mapped(&s, 1);
    save(&s, "frame", "other-user-quotas");

    begin(&s, FZ_FRAME_ONE_CLIENT);
    put_u8(&s, FZ_OP_SWITCH);
    put_status(&s);
    save(&s, "frame", "one-client-only");

    begin(&s, FZ_FRAME_ACCESS_LIST | FZ_FRAME_OTHER_USER);
    put_status(&s);
    save(&s, "frame", "access-refused");

    begin(&s, FZ_FRAME_ACCESS_LIST);
    put_session_open(&s);
    put_status(&s);
    save(&s, "frame", "access-root-priority");

    begin(&s, FZ_FRAME_SLOW_READER);
    put_create(&s, FZ_OP_FRAME, 1, TF_F32, (const int64_t[]){8192}, 1, 1);
    put_download(&s, 1, 0, 32768);
    put_buffer_create_op(&s, FZ_OP_FRAME, 1, 4096);
    put_mapped(&s, 1);
    put_download(&s, 1, 0, 32768);
    put_buffer_create_op(&s, FZ_OP_FRAME, 2, 4096);
    put_mapped(&s, 2);
    put_status(&s);
    put_download(&s, 1, 0, 32768);
    save(&s, "frame", "slow-reader-held-replies");

    frame_mapped();

    begin(&s, FZ_FRAME_RAW);
    put(&s, "\x64\x00\x00\x00\x08\x02\x9a\x01", 8); /* a 100-byte frame cut short */
    save(&s, "frame", "raw-truncated");

    begin(&s, FZ_FRAME_RAW);
    put(&s, "\xff\xff\xff\xff", 4);
    save(&s, "frame", "raw-oversized");

    begin(&s, FZ_FRAME_RAW);
    put(&s, "\x03\x00\x00\x00\xff\xff\xff", 7);
    save(&s, "frame", "raw-garbage");
}

/* ---- fuzz-mailbox seeds ---- */

/* A MAILBOX record: a request for the head of tf__mailbox. */
static void put_mailbox(seed *s, uint8_t op, uint32_t state, uint32_t direction, uint32_t slot,
                        uint64_t after_seq, uint64_t buffer, uint64_t tensor, uint64_t offset,
                        uint64_t bytes) {
    tf__mailbox m;
    memset(&m, 0, sizeof m);
    m.state = state;
    m.direction = direction;
    m.slot = slot;
    m.after_seq = after_seq;
    m.buffer = buffer;
    m.tensor = tensor;
    m.offset = offset;
    m.bytes = bytes;
    put_u8(s, op);
    put(s, &m, FZ_MAILBOX_REQUEST_BYTES);
}

/*
 * Starts a mailbox seed: the preamble's frames (Hello, Mapped(0), three
 * Uploads, two BufferCreates, two Mapped) took sequence numbers 1 to 9.
 */
static void begin_mailbox(seed *s, uint8_t flags) {
    begin(s, flags);
    s->seq = 9;
}

/* A raced MAILBOX record (FZ_MAILBOX_RACE): the request, then the second value of every field. */
static void put_mailbox_race(seed *s, uint8_t op, const tf__mailbox *a, const tf__mailbox *b) {
    put_u8(s, op);
    put(s, a, FZ_MAILBOX_REQUEST_BYTES);
    put(s, b, FZ_MAILBOX_REQUEST_BYTES);
}

/* A mailbox head for the raced seeds. */
static tf__mailbox mailbox_head(uint32_t state, uint32_t direction, uint32_t slot, uint64_t buffer,
                                uint64_t tensor, uint64_t offset, uint64_t bytes) {
    tf__mailbox m;
    memset(&m, 0, sizeof m);
    m.state = state;
    m.direction = direction;
    m.slot = slot;
    m.buffer = buffer;
    m.tensor = tensor;
    m.offset = offset;
    m.bytes = bytes;
    return m;
}

/*
 * Raced requests (FZ_MAILBOX_RACE): a valid transfer whose fields flip to
 * values that would overrun the buffer or the tensor, to another buffer or
 * tensor, another direction or slot, or to a request that waits.
 */
static void mailbox_race_seeds(void) {
    const uint32_t up = TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD,
                   down = TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD;
    const uint8_t poll = FZ_MB_OP_MAILBOX, bell = FZ_MB_OP_MAILBOX | FZ_MB_DOORBELL;
    const uint32_t sub = TF__MAILBOX_SUBMITTED;
    seed s;
    tf__mailbox a, b;

    begin_mailbox(&s, FZ_MAILBOX_RACE);
    a = mailbox_head(sub, up, 0, 1, 1, 0, 64);
    b = mailbox_head(sub, up, 0, 1, 1, 0, 8192);
    put_mailbox_race(&s, poll, &a, &b);
    b = mailbox_head(sub, up, 0, 2, 1, 0, 64);
    put_mailbox_race(&s, bell, &a, &b);
    save(&s, "mailbox", "race-bytes-and-buffer");

    begin_mailbox(&s, FZ_MAILBOX_RACE);
    a = mailbox_head(sub, down, 1, 1, 2, 4096, 4096);
    b = mailbox_head(sub, down, 1, 1, 3, UINT64_MAX - 4095, 4096);
    put_mailbox_race(&s, poll, &a, &b);
    put_u8(&s, FZ_MB_OP_SETTLE);
    b = mailbox_head(sub, up, TF__COMPLETION_SLOTS + 1, 1, 2, 4096, 1ull << 40);
    put_mailbox_race(&s, bell, &a, &b);
    save(&s, "mailbox", "race-offset-and-slot");

    begin_mailbox(&s, FZ_MAILBOX_RACE | FZ_MAILBOX_SUBMIT);
    a = mailbox_head(sub, up, 2, 2, 3, 0, 4);
    b = mailbox_head(TF__MAILBOX_IDLE, 7, 2, 9, 9, 60, 4);
    b.after_seq = 1000;
    put_mailbox_race(&s, poll, &a, &b);
    put_u8(&s, FZ_MB_OP_POLLING | FZ_MB_DOORBELL);
    put_mailbox_race(&s, bell, &b, &a);
    put_transfer_release_op(&s, FZ_MB_OP_FRAME, 2);
    put_u8(&s, FZ_MB_OP_POLLING);
    save(&s, "mailbox", "race-state-and-after-seq");
}

static void mailbox_seeds(void) {
    const uint32_t up = TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD,
                   down = TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD;
    const uint8_t poll = FZ_MB_OP_MAILBOX, bell = FZ_MB_OP_MAILBOX | FZ_MB_DOORBELL;
    seed s;

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_mailbox(&s, poll, 0, up, 0, 0, 1, 1, 0, 64);
    save(&s, "mailbox", "upload");

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_mailbox(&s, bell, 0, down, 2, 0, 1, 2, 4096, 4096);
    put_mailbox(&s, bell, 0, down, 2, 0, 1, 2, 0, 4096);
    save(&s, "mailbox", "download-doorbell");

    begin_mailbox(&s, 0);
    put_mailbox(&s, poll, TF__MAILBOX_SUBMITTED, up, 1, 0, 1, 3, 8188, 4);
    put_mailbox(&s, poll, TF__MAILBOX_ANSWERED, up, 1, 0, 1, 3, 8188, 4);
    put_mailbox(&s, poll, TF__MAILBOX_IDLE, up, 1, 0, 1, 3, 8188, 4);
    save(&s, "mailbox", "states");

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_mailbox(&s, poll, 0, 0, 0, 0, 1, 1, 0, 64);
    put_mailbox(&s, poll, 0, up, 0, 0, 9, 1, 0, 64);
    put_mailbox(&s, poll, 0, up, 0, 0, 1, 9, 0, 64);
    put_mailbox(&s, poll, 0, up, TF__COMPLETION_SLOTS, 0, 1, 1, 0, 64);
    put_mailbox(&s, poll, 0, up, 0, 0, 1, 1, 0, 63);
    put_mailbox(&s, poll, 0, up, 0, 0, 2, 2, 0, 4096);
    put_mailbox(&s, poll, 0, up, 0, 0, 1, 1, UINT64_MAX - 8, 64);
    save(&s, "mailbox", "refusals");

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_mailbox(&s, poll, 0, up, 0, 99, 1, 1, 0, 64);
    put_download_op(&s, FZ_MB_OP_FRAME, 1, 0, 16);
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_STATUS_REQUEST);
    Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
    f.status_request = &sr;
    f.seq = 99;
    put_frame_op(&s, FZ_MB_OP_FRAME, &f);
    put_u8(&s, FZ_MB_OP_SETTLE);
    put_doorbell_op(&s, FZ_MB_OP_FRAME);
    save(&s, "mailbox", "after-seq");

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_mailbox(&s, poll, 0, up, 0, 0, 1, 1, 0, 64);
    put_mailbox(&s, poll, 0, down, 0, 0, 1, 1, 0, 64);
    put_transfer_release_op(&s, FZ_MB_OP_FRAME, 0);
    put_mailbox(&s, poll, 0, down, 1, 0, 1, 1, 0, 64);
    put_buffer_free_op(&s, FZ_MB_OP_FRAME, 1);
    put_free_op(&s, FZ_MB_OP_FRAME, (const uint64_t[]){1}, 1);
    put_u8(&s, FZ_MB_OP_SETTLE);
    put_buffer_free_op(&s, FZ_MB_OP_FRAME, 1);
    save(&s, "mailbox", "busy-and-release");

    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_u8(&s, FZ_MB_OP_POLLING | FZ_MB_DOORBELL);
    put_mailbox(&s, poll, 0, down, 5, 0, 2, 3, 60, 4);
    put_u8(&s, FZ_MB_OP_POLLING);
    put_mailbox(&s, bell, 0, down, 6, 0, 2, 3, 0, 4);
    put_create(&s, FZ_MB_OP_FRAME, 9, TF_F32, shape4, 1, 1);
    put_buffer_create_op(&s, FZ_MB_OP_FRAME, 9, 16);
    put_mapped_op(&s, FZ_MB_OP_FRAME, 9);
    put_mailbox(&s, bell, 0, up, 7, 0, 9, 9, 0, 16);
    save(&s, "mailbox", "polling-and-new-handles");

    /* A buffer not yet Mapped is refused, then works; Mapped again while it is in a transfer. */
    begin_mailbox(&s, FZ_MAILBOX_SUBMIT);
    put_buffer_create_op(&s, FZ_MB_OP_FRAME, 9, 4096);
    put_mailbox(&s, poll, 0, up, 0, 0, 9, 2, 0, 4096);
    put_mapped_op(&s, FZ_MB_OP_FRAME, 9);
    put_mailbox(&s, bell, 0, up, 0, 0, 9, 2, 0, 4096);
    put_mapped_op(&s, FZ_MB_OP_FRAME, 9);
    put_mapped_op(&s, FZ_MB_OP_FRAME, 1);
    put_buffer_free_op(&s, FZ_MB_OP_FRAME, 9);
    put_mapped_op(&s, FZ_MB_OP_FRAME, 9);
    put_u8(&s, FZ_MB_OP_SETTLE);
    put_transfer_release_op(&s, FZ_MB_OP_FRAME, 0);
    put_mailbox(&s, poll, 0, down, 0, 0, 9, 2, 0, 4096);
    save(&s, "mailbox", "mapped-late-and-repeated");
}

/* ---- fuzz-ring seeds ---- */

/* An ENTRY record (renumbered by the harness) holding frame f. */
static void put_entry(seed *s, Tenferro__Frame *f) { put_frame_op(s, FZ_RING_OP_ENTRY | FZ_RING_FIXUP, f); }

/* A filler entry: an Upload of `bytes` bytes, refused in the ring, that moves both areas on. */
static void put_filler(seed *s, size_t bytes) {
    put_u8(s, FZ_RING_OP_ENTRY | FZ_RING_FILLER);
    put_u16(s, bytes);
}

/* A PUBLISH record; with FZ_RING_RACE its palette follows. */
static void put_publish(seed *s, uint8_t how, const uint8_t *palette) {
    put_u8(s, FZ_RING_OP_PUBLISH | how);
    if (palette) put(s, palette, FZ_RING_PALETTE_BYTES);
}

static void put_word(seed *s, uint8_t which, uint64_t value) {
    put_u8(s, FZ_RING_OP_WORD);
    put_u8(s, which);
    put(s, &value, 8);
}

/* A raw entry header (and nothing else) at the harness's position. */
static void put_raw_header(seed *s, uint32_t bytes, uint64_t seq, uint64_t after_seq) {
    tf_ring_entry e = {.bytes = bytes, .seq = seq, .after_seq = after_seq};
    put_u8(s, FZ_RING_OP_RAW);
    put_u16(s, sizeof e);
    put(s, &e, sizeof e);
}

static Tenferro__Frame ring_session_open(Tenferro__SessionOpen *so, uint32_t policy, uint64_t deadline) {
    tenferro__session_open__init(so);
    so->policy = policy;
    so->deadline_ms = deadline;
    Tenferro__Frame f = frame(TENFERRO__FRAME__BODY_SESSION_OPEN);
    f.session_open = so;
    return f;
}

/* A Submit frame of n operations (at most 4), for an ENTRY record. */
static void put_submit_entry(seed *s, uint64_t session, uint32_t mode, const op_spec *ops, size_t n) {
    put_submit_op(s, FZ_RING_OP_ENTRY | FZ_RING_FIXUP, session, mode, ops, n);
}

/*
 * The ring's seeds, one per way a client or a hostile one uses it: a held
 * session through the ring, scoped bursts, more entries than a poll takes
 * and than there are places for replies, every refused body, broken
 * headers (no bytes, too long, stale or future sequence numbers, a frame
 * that does not decode or carries another number), req_head and rep_tail
 * out of place, both areas wrapping, a lazy reader, a queued SessionOpen
 * answered after the holder leaves, a page used before Mapped, frames on the
 * socket between entries, a hang-up with requests outstanding; and the
 * same shapes raced by the writer thread.
 */
static void ring_seeds(void) {
    /* Palettes (fuzz-input.h): the entries' lengths only, then body bytes, seq and the words. */
    static const uint8_t pal_a[FZ_RING_PALETTE_BYTES] = {0, 0, 0, 0, 0, 0, 1, 0,
                                                         0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t pal_b[FZ_RING_PALETTE_BYTES] = {0, 0, 1, 4, 0x08, 0, 0, 0,
                                                         0xff, 0, 3, 0, 0x80, 9, 0, 0x01};
    static const uint8_t pal_c[FZ_RING_PALETTE_BYTES] = {0xfe, 0x84, 0, 0, 0, 0, 0, 0x80,
                                                         0, 1, 0, 0, 0, 0, 0, 0};
    const uint8_t bell = FZ_RING_DOORBELL, poller = FZ_RING_POLLER;
    op_spec neg = {.kind = TF__OP_NEG, .in = {1}, .n_in = 1, .out = 4};
    op_spec add = {.kind = TF__OP_ADD, .in = {1, 4}, .n_in = 2, .out = 5};
    op_spec bad = {.kind = TF__OP_MATMUL, .in = {1, 3}, .n_in = 2, .out = 6};
    op_spec last = {.kind = TF__OP_SQRT, .in = {5}, .n_in = 1, .out = 7};
    Tenferro__SessionOpen so;
    Tenferro__Frame f;
    seed s;

    for (int race = 0; race < 2; race++) {
        const uint8_t flags = race ? FZ_RING_RACE : 0;
        const uint8_t *pa = race ? pal_a : NULL, *pb = race ? pal_b : NULL,
                      *pc = race ? pal_c : NULL;
        char name[64];

        begin(&s, flags);
        s.seq = 5; /* Hello, Mapped(0), three Uploads */
        f = ring_session_open(&so, 0, 0);
        put_entry(&s, &f);
        put_publish(&s, bell, pa);
        put_submit_entry(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_ENQUEUE, &neg, 1);
        put_publish(&s, poller, pb);
        put_submit_entry(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE, &add, 1);
        put_submit_entry(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, &last, 1);
        put_publish(&s, bell, pc);
        put_download_op(&s, FZ_RING_OP_FRAME, 7, 0, 64);
        put_u8(&s, FZ_RING_OP_SETTLE);
        snprintf(name, sizeof name, "%sheld-session", race ? "race-" : "");
        save(&s, "ring", name);

        begin(&s, flags);
        s.seq = 5;
        put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED, &neg, 1);
        put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &add, 1);
        put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &bad, 1);
        put_publish(&s, 0, pa);
        put_u8(&s, FZ_RING_OP_SETTLE);
        snprintf(name, sizeof name, "%sscoped", race ? "race-" : "");
        save(&s, "ring", name);

        /* More than a poll takes (16) and than there are places for replies (8). */
        begin(&s, flags);
        s.seq = 5;
        for (int i = 0; i < 20; i++) {
            op_spec each = {.kind = TF__OP_NEG, .in = {2}, .n_in = 1, .out = 10 + (uint64_t)i};
            put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &each, 1);
        }
        put_publish(&s, bell, pb);
        for (int i = 0; i < 6; i++) put_filler(&s, 1);
        put_publish(&s, poller, pa);
        snprintf(name, sizeof name, "%smany-entries", race ? "race-" : "");
        save(&s, "ring", name);

        /* Bodies the ring refuses, each answered in the ring. */
        begin(&s, flags);
        s.seq = 5;
        Tenferro__StatusRequest sr = TENFERRO__STATUS_REQUEST__INIT;
        f = frame(TENFERRO__FRAME__BODY_STATUS_REQUEST);
        f.status_request = &sr;
        put_entry(&s, &f);
        Tenferro__SessionRelease rel = TENFERRO__SESSION_RELEASE__INIT;
        rel.session_id = 1;
        f = frame(TENFERRO__FRAME__BODY_SESSION_RELEASE);
        f.session_release = &rel;
        put_entry(&s, &f);
        Tenferro__Mapped mp = TENFERRO__MAPPED__INIT;
        f = frame(TENFERRO__FRAME__BODY_MAPPED);
        f.mapped = &mp;
        put_entry(&s, &f);
        Tenferro__MailboxDoorbell db = TENFERRO__MAILBOX_DOORBELL__INIT;
        f = frame(TENFERRO__FRAME__BODY_MAILBOX_DOORBELL);
        f.mailbox_doorbell = &db;
        put_entry(&s, &f);
        Tenferro__Hello h;
        f = hello(&h, TENFERRO__PROTOCOL__PROTOCOL_VERSION, "in-the-ring");
        put_entry(&s, &f);
        f = frame(TENFERRO__FRAME__BODY__NOT_SET);
        put_entry(&s, &f);
        put_filler(&s, 100);
        put_publish(&s, bell, pa);
        snprintf(name, sizeof name, "%srefused-bodies", race ? "race-" : "");
        save(&s, "ring", name);
    }

    /* Broken headers, each ending the connection with its last word. */
    begin(&s, 0);
    put_raw_header(&s, 0, 6, 5);
    put_publish(&s, bell, NULL);
    save(&s, "ring", "entry-of-no-bytes");

    begin(&s, 0);
    put_raw_header(&s, 60000, 6, 5);
    put_publish(&s, poller, NULL);
    save(&s, "ring", "entry-past-head");

    begin(&s, 0);
    put_raw_header(&s, 8, 1, 0); /* sequence number 1: the Hello's, handled long ago */
    put_word(&s, FZ_RING_WORD_SKIP, 8);
    put_publish(&s, 0, NULL);
    save(&s, "ring", "entry-stale-seq");

    begin(&s, 0);
    s.seq = 5;
    put_u8(&s, FZ_RING_OP_ENTRY);
    put_u16(&s, 5);
    put(&s, "\x08\x07\xff\xff\xff", 5); /* a truncated varint: does not decode */
    put_publish(&s, bell, NULL);
    save(&s, "ring", "entry-undecodable");

    begin(&s, 0);
    s.seq = 40;
    put_submit_op(&s, FZ_RING_OP_ENTRY, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &neg, 1);
    put_publish(&s, bell, NULL);
    save(&s, "ring", "entry-seq-mismatch");

    /* The same req_head published again: nothing new to take. */
    begin(&s, 0);
    s.seq = 5;
    f = ring_session_open(&so, 0, 0);
    put_entry(&s, &f);
    put_publish(&s, bell, NULL);
    put_publish(&s, bell, NULL);
    put_publish(&s, poller, NULL);
    save(&s, "ring", "publish-twice");

    /* An entry after a frame not yet sent waits for it; the frame comes, then it runs. */
    begin(&s, 0);
    {
        /* A SessionOpen after socket frame 1000: the header written raw, the body encoded. */
        static uint8_t body[64];
        Tenferro__SessionOpen o;
        f = ring_session_open(&o, 0, 0);
        f.seq = 1001;
        size_t n = tenferro__frame__pack(&f, body);
        tf_ring_entry e = {.bytes = (uint32_t)n, .seq = 1001, .after_seq = 1000};
        uint8_t pad[8] = {0};
        put_u8(&s, FZ_RING_OP_RAW);
        put_u16(&s, sizeof e + ((n + 7) & ~(size_t)7));
        put(&s, &e, sizeof e);
        put(&s, body, n);
        put(&s, pad, ((n + 7) & ~(size_t)7) - n);
        put_publish(&s, bell, NULL);
        put_u8(&s, FZ_RING_OP_SETTLE);
        Tenferro__StatusRequest st = TENFERRO__STATUS_REQUEST__INIT;
        f = frame(TENFERRO__FRAME__BODY_STATUS_REQUEST);
        f.status_request = &st;
        f.seq = 1000;
        put_frame_op(&s, FZ_RING_OP_FRAME, &f);
        put_u8(&s, FZ_RING_OP_SETTLE);
    }
    save(&s, "ring", "after-seq-waits");

    /* Header words out of place: req_head beyond the area and behind req_tail, rep_tail both ways. */
    begin(&s, 0);
    s.seq = 5;
    f = ring_session_open(&so, 0, 0);
    put_entry(&s, &f);
    put_word(&s, FZ_RING_WORD_REQ_HEAD, 70000);
    put_u8(&s, FZ_RING_OP_SETTLE);
    save(&s, "ring", "req-head-beyond");

    begin(&s, 0);
    s.seq = 5;
    f = ring_session_open(&so, 0, 0);
    put_entry(&s, &f);
    put_publish(&s, bell, NULL);
    put_word(&s, FZ_RING_WORD_REQ_HEAD, (uint64_t)(uint32_t)-8);
    put_u8(&s, FZ_RING_OP_SETTLE);
    save(&s, "ring", "req-head-behind");

    begin(&s, 0);
    s.seq = 5;
    put_word(&s, FZ_RING_WORD_REP_TAIL, 1ull << 63);
    put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &neg, 1);
    put_publish(&s, bell, NULL);
    save(&s, "ring", "rep-tail-beyond");

    begin(&s, FZ_RING_LAZY_READER);
    s.seq = 5;
    put_filler(&s, 1);
    put_publish(&s, bell, NULL);
    put_u8(&s, FZ_RING_OP_CONSUME);
    put_word(&s, FZ_RING_WORD_REP_TAIL, 64);
    put_word(&s, FZ_RING_WORD_SLEEPING, 1);
    put_word(&s, FZ_RING_WORD_REQ_TAIL, 12345);
    put_filler(&s, 1);
    put_publish(&s, poller, NULL);
    put_word(&s, FZ_RING_WORD_REP_TAIL, 1ull << 62);
    put_filler(&s, 1);
    put_publish(&s, bell, NULL);
    save(&s, "ring", "rep-tail-behind-and-words");

    /* A reader that never reads: the reply area fills and the connection ends, typed. */
    begin(&s, FZ_RING_LAZY_READER);
    s.seq = 5;
    for (int i = 0; i < 120; i++) {
        put_filler(&s, 1);
        if (i % 8 == 7) put_publish(&s, poller, NULL);
    }
    put_publish(&s, bell, NULL);
    save(&s, "ring", "lazy-reader-no-room");

    /* Both areas wrap: a large filler, then entries across the end of each area. */
    begin(&s, 0);
    s.seq = 5;
    put_filler(&s, 60000);
    put_publish(&s, bell, NULL);
    for (int i = 0; i < 140; i++) {
        if (i % 16 == 0) put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &neg, 1);
        put_filler(&s, i % 3 ? 1 : 200);
        if (i % 4 == 3) put_publish(&s, i % 8 == 3 ? bell : poller, NULL);
    }
    put_publish(&s, bell, NULL);
    save(&s, "ring", "wrap-both-areas");

    /* A SessionOpen queued behind the holder, answered in the ring once the holder leaves. */
    begin(&s, FZ_RING_CONTENDED);
    s.seq = 5;
    f = ring_session_open(&so, TENFERRO__ADMISSION_POLICY__ADMISSION_WAIT, 5000);
    put_entry(&s, &f);
    put_publish(&s, bell, NULL);
    put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &neg, 1);
    put_publish(&s, bell, NULL);
    put_u8(&s, FZ_RING_OP_HANGUP | FZ_RING_HOLDER);
    put_u8(&s, FZ_RING_OP_SETTLE);
    put_submit_entry(&s, 2, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, &neg, 1);
    put_publish(&s, poller, NULL);
    save(&s, "ring", "contended-open-queued");

    begin(&s, FZ_RING_CONTENDED);
    s.seq = 5;
    f = ring_session_open(&so, TENFERRO__ADMISSION_POLICY__ADMISSION_REJECT, 0);
    put_entry(&s, &f);
    f = ring_session_open(&so, TENFERRO__ADMISSION_POLICY__ADMISSION_WAIT, 1);
    put_entry(&s, &f);
    put_publish(&s, bell, NULL);
    put_u8(&s, FZ_RING_OP_HANGUP);
    save(&s, "ring", "contended-hangup-queued");

    /* The page used before Mapped(0): nothing is taken until the Mapped frame. */
    begin(&s, FZ_RING_NO_MAPPED);
    s.seq = 4; /* Hello, three Uploads */
    f = ring_session_open(&so, 0, 0);
    put_entry(&s, &f);
    put_publish(&s, bell, NULL);
    /* Numbered before the entry: the socket frame must not make it stale. */
    s.seq = 3;
    put_mapped_op(&s, FZ_RING_OP_FRAME, 0);
    put_u8(&s, FZ_RING_OP_SETTLE);
    put_submit_entry(&s, 1, TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE, &neg, 1);
    put_publish(&s, bell, NULL);
    put_mapped_op(&s, FZ_RING_OP_FRAME, 0);
    save(&s, "ring", "mapped-late");

    /* Frames on the socket between entries, and a hang-up while requests are outstanding. */
    begin(&s, 0);
    s.seq = 5;
    put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &neg, 1);
    put_publish(&s, bell, NULL);
    put_create(&s, FZ_RING_OP_FRAME, 7, TF_F32, shape4, 1, 1);
    put_download_op(&s, FZ_RING_OP_FRAME, 4, 0, 64);
    put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &add, 1);
    put_publish(&s, 0, NULL);
    put_free_op(&s, FZ_RING_OP_FRAME, (const uint64_t[]){4, 5}, 2);
    for (int i = 0; i < 10; i++) {
        op_spec each = {.kind = TF__OP_EXP, .in = {7}, .n_in = 1, .out = 10 + (uint64_t)i};
        put_submit_entry(&s, 0, TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL, &each, 1);
    }
    put_publish(&s, bell, NULL);
    put_u8(&s, FZ_RING_OP_HANGUP);
    save(&s, "ring", "socket-frames-and-hangup");
}

/* ---- fuzz-config seeds ---- */

static void put_text(seed *s, const char *text) { put(s, text, strlen(text)); }

/* Writes the example configuration (etc/tenferrod.conf.example) as a file seed, if present. */
static void config_example(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    seed s;
    begin(&s, FZ_CONFIG_FILE);
    s.len += fread(s.bytes + s.len, 1, sizeof s.bytes - s.len, f);
    fclose(f);
    save(&s, "config", "file-example");
}

static void config_seeds(void) {
    seed s;
    begin(&s, FZ_CONFIG_FILE);
    put_text(&s,
             "[daemon]\n"
             "socket = /run/tenferro/tenferrod-cpu.sock\n"
             "socket_mode = 0660\n"
             "device = cpu\n"
             "workers = 4\n"
             "max_frame_bytes = 16M\n"
             "max_pinned_bytes = 2GiB\n"
             "max_clients = 32\n"
             "log_level = debug\n"
             "busy_poll_us = auto\n"
             "[admission]\n"
             "policy = wait\n"
             "wait_deadline_ms = 250\n"
             "[quota.client]\n"
             "device_bytes = 1G\n"
             "pinned_bytes = 64M\n"
             "live_tensors = 1000\n"
             "queued_ops = 0x100\n"
             "[quota.uid]\n"
             "device_bytes = 4T\n"
             "[access]\n"
             "allowed_users = root, 1000 1001\n"
             "allowed_groups = @0,@100\n"
             "admin_users = root\n"
             "[priority]\n"
             "high = root @0\n"
             "low = 65534\n");
    save(&s, "config", "file-every-section");

    begin(&s, FZ_CONFIG_FILE);
    put_text(&s, "; only comments\n# and blanks\n\n[daemon]\ndevice=7\n");
    save(&s, "config", "file-bare-ordinal");

    begin(&s, FZ_CONFIG_FILE);
    put_text(&s, "device = cpu\n[daemon]\nmax_frame_bytes = 1K\n");
    save(&s, "config", "file-errors");

    begin(&s, FZ_CONFIG_FILE);
    put_text(&s, "[daemon\nworkers = 99999999999999999999\n[nope]\nkey = 1\n");
    save(&s, "config", "file-syntax");

    begin(&s, FZ_CONFIG_FLAGS);
    static const char flags[] =
        "device\0cpu\0workers\0" "2\0max-frame-bytes\0" "1M\0reservation-policy\0wait\0"
        "wait-deadline-ms\0" "100\0client-device-bytes\0" "8G\0uid-queued-ops\0" "5\0"
        "allowed-users\0root\0priority-high\0@0\0log-level\0warn\0socket-mode\0" "0600\0"
        "busy-poll-us\0" "1000\0max-pinned-bytes\0" "0\0nonexistent\0x";
    put(&s, flags, sizeof flags - 1);
    save(&s, "config", "flags");

    begin(&s, FZ_CONFIG_SETTINGS);
    static const char settings[] =
        "daemon\nsocket_group\n\ndaemon\ndevice\ncuda:3\nquota.client\nlive_tensors\n12K\n"
        "access\nadmin_users\n0 1 2\npriority\nlow\n@65534\ndaemon\nmax_clients\n-1\n"
        "admission\npolicy\nmaybe\n";
    put(&s, settings, sizeof settings - 1);
    save(&s, "config", "settings");
}

/* One node of a graph seed: kind, inputs (graph ids), output id, parameters. */
static void graph_node(Tenferro__Op *op, uint32_t kind, size_t n_in, uint64_t *in, uint64_t out,
                       size_t n_params, int64_t *params) {
    tenferro__op__init(op);
    op->kind = kind;
    op->n_inputs = n_in;
    op->inputs = in;
    op->output = out;
    op->n_params = n_params;
    op->params = params;
    op->alpha_re = 1.5;
}

/* Writes a packed Prepare as a seed of the graph target. */
static void save_prepare(const Tenferro__Prepare *p, const char *name) {
    seed s;
    memset(&s, 0, sizeof s);
    s.len = tenferro__prepare__pack(p, s.bytes);
    save(&s, "graph", name);
}

/*
 * Seeds of the graph target (tests/fuzz/fuzz-graph.c): a chain, a graph with
 * a contraction and an FFT and two outputs, and one whose node reads a
 * value defined after it (a refusal).
 */
static void graph_seeds(void) {
    int64_t shape[2] = {4, 6}, perm[2] = {1, 0}, axes[1] = {1};
    Tenferro__GraphInput in[2], *in_ptrs[2];
    for (int i = 0; i < 2; i++) {
        tenferro__graph_input__init(&in[i]);
        in[i].id = (uint64_t)i + 1;
        in[i].dtype = TF_F32;
        in[i].n_shape = 2;
        in[i].shape = shape;
        in_ptrs[i] = &in[i];
    }
    uint64_t a[2] = {1, 2}, b[2] = {3, 2}, c[1] = {4}, d[2] = {5, 5};
    Tenferro__Op ops[4], *op_ptrs[4];
    graph_node(&ops[0], TF__OP_ADD, 2, a, 3, 0, NULL);
    graph_node(&ops[1], TF__OP_MUL, 2, b, 4, 0, NULL);
    graph_node(&ops[2], TF__OP_PERMUTE, 1, c, 5, 2, perm);
    graph_node(&ops[3], TF__OP_MATMUL, 2, d, 6, 0, NULL);
    for (int i = 0; i < 4; i++) op_ptrs[i] = &ops[i];
    uint64_t outs[2] = {4, 6};
    Tenferro__Prepare p = TENFERRO__PREPARE__INIT;
    p.id = 7;
    p.n_inputs = 2;
    p.inputs = in_ptrs;
    p.n_nodes = 3;
    p.nodes = op_ptrs;
    p.n_outputs = 1;
    p.outputs = outs;
    save_prepare(&p, "chain");
    p.n_nodes = 4;
    p.n_outputs = 2;
    save_prepare(&p, "permute-matmul");
    /* A cycle: node 0 reads the output of node 1. */
    uint64_t cyc[2] = {4, 2};
    ops[0].inputs = cyc;
    save_prepare(&p, "cycle");
    /* A reduction and an FFT of a complex input. */
    in[0].dtype = TF_C64;
    in[1].dtype = TF_C64;
    Tenferro__Fft fft = TENFERRO__FFT__INIT;
    int32_t fft_axes[1] = {0};
    fft.n_axes = 1;
    fft.axes = fft_axes;
    graph_node(&ops[0], TF__OP_REDUCE_SUM, 1, a, 3, 1, axes);
    graph_node(&ops[1], TF__OP_FFT, 1, a, 4, 0, NULL);
    ops[1].fft = &fft;
    p.n_nodes = 2;
    p.n_outputs = 2;
    uint64_t outs2[2] = {3, 4};
    p.outputs = outs2;
    save_prepare(&p, "reduce-fft");
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen-corpus DIR\n");
        return 2;
    }
    out_dir = argv[1];
    mkdir(out_dir, 0755);
    frame_requests();
    frame_ops();
    mailbox_seeds();
    mailbox_race_seeds();
    ring_seeds();
    config_seeds();
    config_example("etc/tenferrod.conf.example");
    graph_seeds();
    return 0;
}
