/*
 * The raw-frame client of the contraction benchmarks (bench-raw.h): blocking
 * frames on a Unix socket, each request answered by the reply carrying its
 * sequence number.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bench/bench-common.h"
#include "bench/bench-raw.h"

/* Bytes of tensor data one Upload or Download frame carries. */
#define CHUNK ((size_t)16 << 20)

/* Writes all n bytes, or ends the benchmark. */
static void send_all(bench_raw *r, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = send(r->fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) bench_die(r->bench, "send to tenferrod: %s", strerror(errno));
        p += k;
        n -= (size_t)k;
    }
}

/* Reads exactly n bytes, or ends the benchmark. */
static void recv_all(bench_raw *r, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = recv(r->fd, p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) bench_die(r->bench, "tenferrod closed the connection or failed: %s",
                              k == 0 ? "EOF" : strerror(errno));
        p += k;
        n -= (size_t)k;
    }
}

/* Sends f under a fresh sequence number; returns that number. */
static uint64_t send_frame(bench_raw *r, Tenferro__Frame *f) {
    f->seq = ++r->seq;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (tf__frame_encode(f, UINT32_MAX, &buf, &len) != TF_OK)
        bench_die(r->bench, "cannot encode a frame of body %d", (int)f->body_case);
    send_all(r, buf, len);
    free(buf);
    return f->seq;
}

/* Receives frames until the reply to `seq` arrives (anything else is dropped); caller frees. */
static Tenferro__Frame *recv_reply(bench_raw *r, uint64_t seq) {
    for (;;) {
        uint8_t header[TF__FRAME_HEADER_BYTES];
        recv_all(r, header, sizeof header);
        const uint32_t len = tf__frame_peek_length(header);
        uint8_t *body = malloc(len ? len : 1);
        if (!body) bench_die(r->bench, "out of memory for a %u-byte reply", len);
        recv_all(r, body, len);
        Tenferro__Frame *f = tf__frame_decode(body, len);
        free(body);
        if (!f) bench_die(r->bench, "a reply from tenferrod does not decode");
        if (f->seq == seq) return f;
        tf__frame_free(f);
    }
}

/* The Result a reply carries (a Result frame or the result of a DownloadReply). */
static const Tenferro__Result *result_of(const Tenferro__Frame *f) {
    if (f->body_case == TENFERRO__FRAME__BODY_RESULT) return f->result;
    if (f->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) return f->download_reply->result;
    return NULL;
}

/* Sends a request and ends the benchmark unless its reply is TF_OK; returns the reply. */
static Tenferro__Frame *call_ok(bench_raw *r, Tenferro__Frame *f, const char *what) {
    Tenferro__Frame *reply = recv_reply(r, send_frame(r, f));
    const Tenferro__Result *res = result_of(reply);
    if (!res) bench_die(r->bench, "%s: unexpected reply of body %d", what, (int)reply->body_case);
    if (res->status != TF_OK)
        bench_die(r->bench, "%s: %s: %s", what, tf_status_name((tf_status)res->status),
                  res->message ? res->message : "");
    return reply;
}

void bench_raw_connect(const char *bench, const char *socket_path, bench_raw *r) {
    memset(r, 0, sizeof *r);
    r->bench = bench;
    r->next_id = 1;
    if (!socket_path) socket_path = getenv("TENFERRO_SOCKET");
    if (!socket_path || !socket_path[0])
        bench_die(bench, "no socket: pass it as the first argument or in TENFERRO_SOCKET");
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
    if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        bench_die(bench, "cannot connect to %s: %s", socket_path, strerror(errno));
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    h.client_name = (char *)bench;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &h;
    Tenferro__Frame *reply = recv_reply(r, send_frame(r, &f));
    if (reply->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY)
        bench_die(bench, "Hello was refused: %s",
                  reply->body_case == TENFERRO__FRAME__BODY_RESULT ? reply->result->message : "?");
    r->max_frame = reply->hello_reply->max_frame_bytes;
    snprintf(r->device, sizeof r->device, "%s",
             reply->hello_reply->device ? reply->hello_reply->device : "");
    tf__frame_free(reply);
}

/* Bytes of data one frame may carry under the daemon's frame limit. */
static size_t chunk_of(const bench_raw *r) {
    size_t chunk = CHUNK;
    if (r->max_frame > 0 && r->max_frame < chunk + 65536) chunk = (size_t)r->max_frame - 65536;
    return chunk;
}

uint64_t bench_raw_upload(bench_raw *r, const tf__meta *m, const void *data) {
    const uint64_t id = r->next_id++;
    const size_t bytes = tf__meta_bytes(m), chunk = chunk_of(r);
    int64_t shape[TF_MAX_RANK];
    memcpy(shape, m->shape, sizeof shape);
    size_t off = 0;
    do {
        const size_t n = bytes - off < chunk ? bytes - off : chunk;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = id;
        up.create = off == 0;
        up.dtype = (uint32_t)m->dtype;
        up.n_shape = off == 0 ? (size_t)m->rank : 0;
        up.shape = shape;
        up.offset = off;
        up.data.data = (uint8_t *)data + off;
        up.data.len = n;
        f.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        f.upload = &up;
        tf__frame_free(call_ok(r, &f, "upload"));
        off += n;
    } while (off < bytes);
    return id;
}

void bench_raw_download(bench_raw *r, uint64_t id, void *dst, size_t bytes) {
    const size_t chunk = chunk_of(r);
    for (size_t off = 0; off < bytes;) {
        const size_t n = bytes - off < chunk ? bytes - off : chunk;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
        dl.tensor = id;
        dl.offset = off;
        dl.length = n;
        f.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
        f.download = &dl;
        Tenferro__Frame *reply = call_ok(r, &f, "download");
        if (reply->body_case != TENFERRO__FRAME__BODY_DOWNLOAD_REPLY ||
            reply->download_reply->data.len != n)
            bench_die(r->bench, "download of tensor %llu: a reply of the wrong size",
                      (unsigned long long)id);
        memcpy((char *)dst + off, reply->download_reply->data.data, n);
        tf__frame_free(reply);
        off += n;
    }
}

void bench_raw_session_open(bench_raw *r) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__SessionOpen so = TENFERRO__SESSION_OPEN__INIT;
    f.body_case = TENFERRO__FRAME__BODY_SESSION_OPEN;
    f.session_open = &so;
    Tenferro__Frame *reply = call_ok(r, &f, "session open");
    r->session = reply->result->session_id;
    tf__frame_free(reply);
}

uint64_t bench_raw_contract_sync(bench_raw *r, const tf__contraction *c, uint64_t a, uint64_t b,
                                 int reps, int free_outputs) {
    if (reps < 1) reps = 1;
    const size_t n_ops = (size_t)reps * 2;
    Tenferro__Op *ops = calloc(n_ops, sizeof *ops);
    Tenferro__Op **ptrs = calloc(n_ops, sizeof *ptrs);
    uint64_t *frees = calloc((size_t)reps, sizeof *frees);
    if (!ops || !ptrs || !frees) bench_die(r->bench, "out of memory building a Submit");
    uint32_t labels[3][TF_MAX_RANK];
    const int count[3] = {c->rank[0], c->n_inputs == 2 ? c->rank[1] : 0, c->out_rank};
    const uint8_t *src[3] = {c->labels[0], c->labels[1], c->out};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < count[k]; j++) labels[k][j] = src[k][j];
    Tenferro__Contraction desc = TENFERRO__CONTRACTION__INIT;
    desc.labels_a = labels[0];
    desc.n_labels_a = (size_t)count[0];
    desc.labels_b = labels[1];
    desc.n_labels_b = (size_t)count[1];
    desc.labels_out = labels[2];
    desc.n_labels_out = (size_t)count[2];
    desc.conj_a = c->conj[0];
    desc.conj_b = c->conj[1];
    uint64_t inputs[2] = {a, b};
    size_t n = 0;
    uint64_t last = 0;
    for (int i = 0; i < reps; i++) {
        Tenferro__Op *op = &ops[n];
        tenferro__op__init(op);
        op->kind = TENFERRO__OP_KIND__OP_CONTRACT;
        op->n_inputs = (size_t)c->n_inputs;
        op->inputs = inputs;
        op->output = last = r->next_id++;
        op->contraction = &desc;
        ptrs[n++] = op;
        if (free_outputs && i + 1 < reps) {
            frees[i] = last;
            op = &ops[n];
            tenferro__op__init(op);
            op->kind = TENFERRO__OP_KIND__OP_FREE;
            op->n_inputs = 1;
            op->inputs = &frees[i];
            ptrs[n++] = op;
        }
    }
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.session_id = r->session;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SYNCHRONIZE;
    sub.n_ops = n;
    sub.ops = ptrs;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    tf__frame_free(call_ok(r, &f, "submit (synchronize) of contractions"));
    free(ops);
    free(ptrs);
    free(frees);
    return last;
}

void bench_raw_free(bench_raw *r, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    fr.n_tensors = 1;
    fr.tensors = &id;
    f.body_case = TENFERRO__FRAME__BODY_FREE;
    f.free = &fr;
    (void)send_frame(r, &f);
}

void bench_raw_session_close(bench_raw *r) {
    if (r->session) {
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
        sub.session_id = r->session;
        sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_CLOSE;
        f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
        f.submit = &sub;
        tf__frame_free(call_ok(r, &f, "session close"));
        r->session = 0;
    }
}

void bench_raw_cache(bench_raw *r, const char *name, uint64_t *hits, uint64_t *misses) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    Tenferro__Frame *reply = recv_reply(r, send_frame(r, &f));
    if (reply->body_case != TENFERRO__FRAME__BODY_STATUS_REPLY)
        bench_die(r->bench, "StatusRequest: unexpected reply of body %d", (int)reply->body_case);
    const Tenferro__StatusReply *s = reply->status_reply;
    if (s->result && s->result->status != TF_OK)
        bench_die(r->bench, "StatusRequest: %s: %s", tf_status_name((tf_status)s->result->status),
                  s->result->message ? s->result->message : "");
    size_t i = 0;
    while (i < s->n_caches && strcmp(s->caches[i]->name ? s->caches[i]->name : "", name) != 0) i++;
    if (i == s->n_caches) bench_die(r->bench, "the daemon's status lists no cache \"%s\"", name);
    *hits = s->caches[i]->hits;
    *misses = s->caches[i]->misses;
    tf__frame_free(reply);
}

void bench_raw_close(bench_raw *r) {
    bench_raw_session_close(r);
    close(r->fd);
    r->fd = -1;
}
