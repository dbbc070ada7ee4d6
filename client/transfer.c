/*
 * Blocking transfers and tensor lifetime on the client side. Data travels
 * inline in frames; a tensor larger than one frame goes in chunks, sent back
 * to back and answered in order, so a big transfer costs one round trip of
 * latency plus the bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

/* Room left in a frame for data after the message's own fields. */
#define FRAME_OVERHEAD 4096
/* Download requests kept in flight at once. */
#define DOWNLOAD_WINDOW 4

static size_t chunk_bytes(const tf_client *c) { return (size_t)(c->max_frame_bytes - FRAME_OVERHEAD); }

tf_status tf_upload(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape, const void *data,
                    tf_tensor *out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (rank > 0 && !shape) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "upload: shape is NULL");
    tf__handle h = {0};
    tf_status st = tf__check_new_meta(dtype, rank, shape, c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    if (!data) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "upload: data is NULL");
    h.meta.dtype = dtype;
    h.meta.rank = rank;
    for (int i = 0; i < rank; i++) h.meta.shape[i] = shape[i];
    h.id = ++c->next_tensor_id;
    size_t bytes = tf__meta_bytes(&h.meta), chunk = chunk_bytes(c);
    size_t n_frames = bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;

    uint64_t first_seq = 0;
    size_t sent = 0;
    for (size_t i = 0; i < n_frames; i++) {
        size_t off = i * chunk, len = bytes - off < chunk ? bytes - off : chunk;
        Tenferro__Frame req = TENFERRO__FRAME__INIT;
        Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
        up.tensor = h.id;
        if (i == 0) {
            up.create = 1;
            up.dtype = (uint32_t)dtype;
            up.n_shape = (size_t)rank;
            up.shape = (int64_t *)shape;
        }
        up.offset = off;
        up.data.data = (uint8_t *)data + off;
        up.data.len = len;
        req.body_case = TENFERRO__FRAME__BODY_UPLOAD;
        req.upload = &up;
        if ((st = tf__send(c, &req)) != TF_OK) return st;
        if (i == 0) first_seq = req.seq;
        sent++;
    }
    tf_status first_error = TF_OK;
    char first_message[sizeof c->last_error] = "";
    for (size_t i = 0; i < sent; i++) {
        Tenferro__Frame *reply = NULL;
        if ((st = tf__recv(c, first_seq + i, &reply)) != TF_OK) return st;
        st = reply->body_case == TENFERRO__FRAME__BODY_RESULT
                 ? tf__result_status(c, reply->result)
                 : tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to Upload");
        tf__frame_free(reply);
        if (st != TF_OK && first_error == TF_OK) {
            first_error = st;
            memcpy(first_message, c->last_error, sizeof first_message);
        }
    }
    if (first_error != TF_OK) {
        memcpy(c->last_error, first_message, sizeof first_message);
        return first_error;
    }
    if (tf__id_table_insert(&c->handles, &h) != 0) {
        Tenferro__Frame fr = TENFERRO__FRAME__INIT;
        Tenferro__Free body = TENFERRO__FREE__INIT;
        body.n_tensors = 1;
        body.tensors = &h.id;
        fr.body_case = TENFERRO__FRAME__BODY_FREE;
        fr.free = &body;
        tf__send(c, &fr);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory recording the tensor");
    }
    *out = h.id;
    return tf__ok(c);
}

/*
 * A tensor can be read once the daemon has it: inside a scoped burst the
 * queue is flushed first; in a held session an unsubmitted result is busy.
 */
static tf_status readable(tf_client *c, tf_tensor t, size_t *bytes) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    tf__handle *h = NULL;
    tf_status st = tf__lookup(c, t, &h);
    if (st != TF_OK) return st;
    *bytes = tf__meta_bytes(&h->meta);
    if (!h->pending) return TF_OK;
    if (c->in_scoped) {
        if ((st = tf__scoped_flush(c)) != TF_OK) return st;
        if (!tf__id_table_find(&c->handles, t))
            return tf__fail(c, TF_ERR_BATCH_FAILED, "tensor %llu was not created: %s",
                            (unsigned long long)t, c->last_error);
        return TF_OK;
    }
    return tf__fail(c, TF_ERR_BUSY,
                    "tensor %llu is the result of an unsubmitted operation: submit or synchronize "
                    "the session first",
                    (unsigned long long)t);
}

/* Reads `bytes` of tensor t into dst, DOWNLOAD_WINDOW chunk requests in flight. */
static tf_status read_into(tf_client *c, tf_tensor t, uint8_t *dst, size_t bytes) {
    size_t chunk = chunk_bytes(c);
    size_t n_frames = bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
    uint64_t seqs[DOWNLOAD_WINDOW];
    size_t requested = 0, received = 0;
    tf_status st = TF_OK, first_error = TF_OK;
    while (received < n_frames) {
        while (requested < n_frames && requested - received < DOWNLOAD_WINDOW) {
            Tenferro__Frame req = TENFERRO__FRAME__INIT;
            Tenferro__Download dl = TENFERRO__DOWNLOAD__INIT;
            dl.tensor = t;
            dl.offset = requested * chunk;
            dl.length = bytes - dl.offset < chunk ? bytes - dl.offset : chunk;
            req.body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
            req.download = &dl;
            if ((st = tf__send(c, &req)) != TF_OK) return st;
            seqs[requested % DOWNLOAD_WINDOW] = req.seq;
            requested++;
        }
        Tenferro__Frame *reply = NULL;
        if ((st = tf__recv(c, seqs[received % DOWNLOAD_WINDOW], &reply)) != TF_OK) return st;
        if (reply->body_case != TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
            st = tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to Download");
        } else {
            st = tf__result_status(c, reply->download_reply->result);
            size_t off = received * chunk, want = bytes - off < chunk ? bytes - off : chunk;
            if (st == TF_OK && reply->download_reply->data.len != want)
                st = tf__fail(c, TF_ERR_PROTOCOL, "download returned %zu bytes, expected %zu",
                              reply->download_reply->data.len, want);
            if (st == TF_OK) memcpy(dst + off, reply->download_reply->data.data, want);
        }
        tf__frame_free(reply);
        if (st != TF_OK && first_error == TF_OK) first_error = st;
        received++;
    }
    return first_error == TF_OK ? tf__ok(c) : first_error;
}

tf_status tf_download(tf_client *c, tf_tensor t, void **data, size_t *bytes) {
    if (!c || !data || !bytes) return TF_ERR_INVALID_ARGUMENT;
    size_t n;
    tf_status st = readable(c, t, &n);
    if (st != TF_OK) return st;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for %zu bytes", n);
    st = read_into(c, t, buf, n);
    if (st != TF_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *bytes = n;
    return TF_OK;
}

tf_status tf_download_into(tf_client *c, tf_tensor t, void **buffer, size_t *capacity) {
    if (!c || !buffer || !capacity) return TF_ERR_INVALID_ARGUMENT;
    size_t n;
    tf_status st = readable(c, t, &n);
    if (st != TF_OK) return st;
    if (*capacity < n || !*buffer) {
        void *grown = realloc(*buffer, n ? n : 1);
        if (!grown) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for %zu bytes", n);
        *buffer = grown;
        *capacity = n ? n : 1;
    }
    return read_into(c, t, *buffer, n);
}

tf_status tf_tensor_free(tf_client *c, tf_tensor t) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    tf__handle *h = NULL;
    tf_status st = tf__lookup(c, t, &h);
    if (st != TF_OK) return st;
    if (c->n_queued > 0) {
        /* Queued work may still name it: free it after that work, in the same queue. */
        if ((st = tf__queue_free(c, t)) != TF_OK) return st;
    } else {
        Tenferro__Frame fr = TENFERRO__FRAME__INIT;
        Tenferro__Free body = TENFERRO__FREE__INIT;
        uint64_t id = t;
        body.n_tensors = 1;
        body.tensors = &id;
        fr.body_case = TENFERRO__FRAME__BODY_FREE;
        fr.free = &body;
        if ((st = tf__send(c, &fr)) != TF_OK) return st;
    }
    tf__id_table_remove(&c->handles, t, NULL);
    return tf__ok(c);
}

tf_status tf_tensor_info(tf_client *c, tf_tensor t, tf_dtype *dtype, int *rank,
                         int64_t shape[TF_MAX_RANK]) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    tf__handle *h = NULL;
    tf_status st = tf__lookup(c, t, &h);
    if (st != TF_OK) return st;
    if (dtype) *dtype = h->meta.dtype;
    if (rank) *rank = h->meta.rank;
    if (shape) memcpy(shape, h->meta.shape, sizeof(int64_t) * TF_MAX_RANK);
    return TF_OK;
}

tf_status tf_tensor_bytes(tf_client *c, tf_tensor t, size_t *bytes) {
    if (!c || !bytes) return TF_ERR_INVALID_ARGUMENT;
    tf__handle *h = NULL;
    tf_status st = tf__lookup(c, t, &h);
    if (st != TF_OK) return st;
    *bytes = tf__meta_bytes(&h->meta);
    return TF_OK;
}
