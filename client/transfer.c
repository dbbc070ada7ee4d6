/*
 * Blocking transfers and tensor lifetime on the client side. A tensor of 64
 * KiB or more goes through the client's reusable staging buffer (staging.c)
 * when the daemon gives one; a smaller one, or any one when it does not,
 * travels inline in frames: a tensor larger than one frame goes in chunks,
 * sent back to back and answered in order, so a big transfer costs one round
 * trip of latency plus the bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

/* Room left in a frame for data after the message's own fields. */
/* Download requests kept in flight at once. */
#define DOWNLOAD_WINDOW 4

static size_t chunk_bytes(const tf_client *c) { return (size_t)(c->max_frame_bytes - TF__FRAME_HEADROOM); }

tf_status tf__send_upload(tf_client *c, const tf__handle *h, int create, size_t offset,
                          const void *data, size_t len, uint64_t *seq) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = h->id;
    if (create) {
        up.create = 1;
        up.dtype = (uint32_t)h->meta.dtype;
        up.n_shape = (size_t)h->meta.rank;
        up.shape = (int64_t *)h->meta.shape;
    }
    up.offset = offset;
    up.data.data = (uint8_t *)data;
    up.data.len = len;
    req.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    req.upload = &up;
    tf_status st = tf__send(c, &req);
    *seq = req.seq;
    return st;
}

tf_status tf__send_free(tf_client *c, const tf_tensor *tensors, size_t n) {
    Tenferro__Frame fr = TENFERRO__FRAME__INIT;
    Tenferro__Free body = TENFERRO__FREE__INIT;
    body.n_tensors = n;
    body.tensors = (uint64_t *)tensors;
    fr.body_case = TENFERRO__FRAME__BODY_FREE;
    fr.free = &body;
    return tf__send(c, &fr);
}

/* Creates tensor h->id from data in frames of at most one chunk each, all sent before any answer is read. */
static tf_status upload_inline(tf_client *c, const tf__handle *h, const void *data) {
    size_t bytes = tf__meta_bytes(&h->meta), chunk = chunk_bytes(c);
    size_t n_frames = bytes == 0 ? 1 : (bytes + chunk - 1) / chunk;
    uint64_t first_seq = 0, seq;
    size_t sent = 0;
    tf_status st;
    for (size_t i = 0; i < n_frames; i++) {
        size_t off = i * chunk, len = bytes - off < chunk ? bytes - off : chunk;
        if ((st = tf__send_upload(c, h, i == 0, off, (const uint8_t *)data + off, len, &seq)) != TF_OK)
            return st;
        if (i == 0) first_seq = seq;
        sent++;
    }
    tf_status first_error = TF_OK;
    char first_message[sizeof c->last_error] = "";
    for (size_t i = 0; i < sent; i++) {
        /* A lost connection (or device: TF_ERR_DEVICE) answers nothing more. */
        if ((st = tf__recv_result(c, first_seq + i, "Upload")) == TF_ERR_DISCONNECTED || c->broken)
            return st;
        if (st != TF_OK && first_error == TF_OK) {
            first_error = st;
            memcpy(first_message, c->last_error, sizeof first_message);
        }
    }
    if (first_error != TF_OK) memcpy(c->last_error, first_message, sizeof first_message);
    return first_error;
}

/*
 * Creates a tensor: from data (tf_upload), or of zeros when `zeros` is set
 * (tf_zeros: one Upload that writes nothing; the daemon reads unwritten
 * bytes as zeros). `what` names the call in messages.
 */
static tf_status create_tensor(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape,
                               const void *data, int zeros, const char *what, tf_tensor *out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (rank > 0 && !shape) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "%s: shape is NULL", what);
    tf__handle h = {0};
    tf_status st = tf__check_new_meta(dtype, rank, shape, c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    if (!zeros && !data) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "%s: data is NULL", what);
    h.meta.dtype = dtype;
    h.meta.rank = rank;
    for (int i = 0; i < rank; i++) h.meta.shape[i] = shape[i];
    h.id = ++c->next_tensor_id;
    if (zeros) {
        uint64_t seq;
        if ((st = tf__send_upload(c, &h, 1, 0, NULL, 0, &seq)) == TF_OK)
            st = tf__recv_result(c, seq, "Upload");
    } else {
        tf_pinned_buffer *stage = NULL;
        if ((st = tf__staging_for(c, tf__meta_bytes(&h.meta), &stage)) != TF_OK) return st;
        st = stage ? tf__staged_upload(c, &h, data, stage) : upload_inline(c, &h, data);
    }
    if (st != TF_OK) return st;
    if (tf__id_table_insert(&c->handles, &h) != 0) {
        tf__send_free(c, &h.id, 1);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory recording the tensor");
    }
    *out = h.id;
    return tf__ok(c);
}

tf_status tf_upload(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape, const void *data,
                    tf_tensor *out) {
    return create_tensor(c, dtype, rank, shape, data, 0, "upload", out);
}

tf_status tf_zeros(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape, tf_tensor *out) {
    return create_tensor(c, dtype, rank, shape, NULL, 1, "zeros", out);
}

int tf__queue_names(const tf_client *c, tf_tensor t) {
    for (size_t i = 0; i < c->n_queued; i++) {
        const tf__queued_op *q = &c->queue[i];
        /* A run of a prepared graph names its tensors in run_io (inputs, then outputs). */
        if (tf__queued_names_io(q)) {
            for (int k = 0; k < q->n_run_inputs + q->n_run_outputs; k++)
                if (q->run_io[k] == t) return 1;
            continue;
        }
        if (q->output == t) return 1;
        for (int k = 0; k < q->n_inputs; k++)
            if (q->inputs[k] == t) return 1;
    }
    return 0;
}

/*
 * A tensor can be read once the daemon has it: inside a scoped burst the
 * queue is flushed first; in a held session an unsubmitted result is busy.
 * With `whole_queue`, any unsubmitted work naming the tensor counts too (a
 * pending transfer must not overtake work queued before it).
 */
static tf_status reachable(tf_client *c, tf_tensor t, int whole_queue, size_t *bytes) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    tf__handle *h = NULL;
    tf_status st = tf__lookup_idle(c, t, whole_queue ? "transferred again" : "downloaded", &h);
    if (st != TF_OK) return st;
    *bytes = tf__meta_bytes(&h->meta);
    int named = whole_queue && !h->pending && tf__queue_names(c, t);
    if (!h->pending && !named) return TF_OK;
    if (c->in_scoped) {
        if ((st = tf__scoped_flush(c)) != TF_OK) return st;
        if (!tf__id_table_find(&c->handles, t))
            return tf__fail(c, TF_ERR_BATCH_FAILED, "tensor %llu was not created: %s",
                            (unsigned long long)t, c->last_error);
        return TF_OK;
    }
    return tf__fail(c, TF_ERR_BUSY,
                    named ? "tensor %llu is named by unsubmitted operations: submit or synchronize "
                            "the session first"
                          : "tensor %llu is the result of an unsubmitted operation: submit or "
                            "synchronize the session first",
                    (unsigned long long)t);
}

tf_status tf__transferable(tf_client *c, tf_tensor t, size_t *bytes) {
    return reachable(c, t, 1, bytes);
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

/*
 * Both blocking downloads: the value of t into a new buffer, or into the
 * caller's *buffer grown with realloc only when too small (`reuse`). A staged
 * download fills the staging buffer before any caller memory is touched.
 */
static tf_status download(tf_client *c, tf_tensor t, void **buffer, size_t *capacity, int reuse) {
    size_t n;
    tf_status st = reachable(c, t, 0, &n);
    if (st != TF_OK) return st;
    if (c->held) c->held->host_waits++; /* the copy waits for the work queued before it */
    tf_pinned_buffer *stage = NULL;
    if ((st = tf__staging_for(c, n, &stage)) != TF_OK) return st;
    if (stage && (st = tf__staged_download(c, t, n, stage)) != TF_OK) return st;
    uint8_t *dst = reuse ? *buffer : NULL;
    if (!reuse || *capacity < n || !dst) {
        dst = reuse ? realloc(*buffer, n ? n : 1) : malloc(n ? n : 1);
        if (!dst) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for %zu bytes", n);
        if (reuse) {
            *buffer = dst;
            *capacity = n ? n : 1;
        }
    }
    if (stage)
        memcpy(dst, stage->data, n);
    else if ((st = read_into(c, t, dst, n)) != TF_OK) {
        if (!reuse) free(dst);
        return st;
    }
    if (!reuse) {
        *buffer = dst;
        *capacity = n;
    }
    return tf__ok(c);
}

tf_status tf_download(tf_client *c, tf_tensor t, void **data, size_t *bytes) {
    if (!c || !data || !bytes) return TF_ERR_INVALID_ARGUMENT;
    return download(c, t, data, bytes, 0);
}

tf_status tf_download_into(tf_client *c, tf_tensor t, void **buffer, size_t *capacity) {
    if (!c || !buffer || !capacity) return TF_ERR_INVALID_ARGUMENT;
    return download(c, t, buffer, capacity, 1);
}

tf_status tf_tensor_free(tf_client *c, tf_tensor t) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    tf__handle *h = NULL;
    tf_status st = tf__lookup_idle(c, t, "freed", &h);
    if (st != TF_OK) return st;
    /* Queued work may still name it: free it after that work, in the same queue. */
    st = c->n_queued > 0 ? tf__queue_free(c, t) : tf__send_free(c, &t, 1);
    if (st != TF_OK) return st;
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
