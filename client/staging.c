/*
 * The staged blocking route: tf_upload, tf_download and tf_download_into move
 * a tensor of STAGED_MIN_BYTES or more through one pinned buffer per client,
 * created on first use and reused, grown only when a larger tensor comes. An
 * upload copies the caller's bytes into it and a download copies them out, so
 * the route costs one host memcpy beside the daemon's own copy; the pending
 * routes (pinned.c) skip that memcpy for a caller who fills the pinned buffer
 * directly. When the daemon gives no staging buffer (no completion page, a
 * pinned_bytes quota, no pinned memory left) the blocking routes carry the
 * data inline in frames instead, as for small tensors: the staging buffer is
 * the library's choice, never the caller's, so refusing it refuses nothing.
 */
#include <string.h>

#include "client/internal.h"

/* Smallest tensor the blocking routes stage; smaller ones travel inline in one frame. */
#define STAGED_MIN_BYTES ((size_t)64 << 10)
/* Staging sizes are rounded up to this, so tensors of similar sizes share one buffer. */
#define STAGING_GRAIN ((size_t)1 << 20)

/* Asks for a staging buffer of `bytes`; TF_OK with c->staging set, or the daemon's refusal. */
static tf_status create_staging(tf_client *c, size_t bytes) {
    tf_pinned_buffer *b = NULL;
    tf_status st = tf__buffer_create(c, bytes, &b);
    if (st == TF_OK) c->staging = b;
    return st;
}

tf_status tf__staging_for(tf_client *c, size_t bytes, tf_pinned_buffer **stage) {
    *stage = NULL;
    if (bytes < STAGED_MIN_BYTES || !c->completion) return TF_OK;
    if (c->staging && c->staging->bytes >= bytes) {
        *stage = c->staging;
        return TF_OK;
    }
    if (c->staging_refused && bytes >= c->staging_refused) return TF_OK;
    if (c->staging) {
        tf_status st = tf__buffer_free(c->staging);
        if (st != TF_OK && (st == TF_ERR_DISCONNECTED || c->broken)) return st;
        if (st == TF_ERR_BUSY) return tf__ok(c); /* still the daemon's: go inline this time */
    }
    size_t rounded = bytes <= SIZE_MAX - STAGING_GRAIN ? (bytes + STAGING_GRAIN - 1) / STAGING_GRAIN * STAGING_GRAIN
                                                       : bytes;
    tf_status st = create_staging(c, rounded);
    /* The rounding may be what a pinned quota refuses: try the exact size before giving up. */
    if (st != TF_OK && st != TF_ERR_DISCONNECTED && !c->broken && rounded > bytes)
        st = create_staging(c, bytes);
    if (st != TF_OK && (st == TF_ERR_DISCONNECTED || c->broken)) return st;
    if (st != TF_OK) {
        c->staging_refused = bytes;
        return tf__ok(c);
    }
    *stage = c->staging;
    return TF_OK;
}

tf_status tf__staged_upload(tf_client *c, const tf__handle *h, const void *data,
                            tf_pinned_buffer *stage) {
    const size_t bytes = tf__meta_bytes(&h->meta);
    const uint32_t up = TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD;
    uint64_t create_seq, transfer_seq;
    /* Create first, copy while the daemon allocates, then move: two requests, one round trip. */
    tf_status st = tf__send_upload(c, h, 1, 0, NULL, 0, &create_seq);
    if (st != TF_OK) return st;
    memcpy(stage->data, data, bytes);
    tf_status moved = tf__transfer_send(c, up, stage, h->id, bytes, TF__STAGING_SLOT, &transfer_seq);
    st = tf__recv_result(c, create_seq, "Upload");
    char why[sizeof c->last_error];
    memcpy(why, c->last_error, sizeof why);
    if (moved == TF_OK) moved = tf__transfer_result(c, transfer_seq, TF__STAGING_SLOT);
    if (moved == TF_OK) moved = tf__transfer_wait(c, TF__STAGING_SLOT, up, h->id);
    if (st != TF_OK) {
        /* The creation's refusal explains the transfer's. */
        memcpy(c->last_error, why, sizeof why);
        return st;
    }
    if (moved != TF_OK && !c->broken) {
        memcpy(why, c->last_error, sizeof why);
        tf__send_free(c, &h->id, 1);
        memcpy(c->last_error, why, sizeof why);
    }
    return moved;
}

tf_status tf__staged_download(tf_client *c, tf_tensor t, size_t bytes, tf_pinned_buffer *stage) {
    const uint32_t down = TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD;
    uint64_t seq;
    tf_status st = tf__transfer_send(c, down, stage, t, bytes, TF__STAGING_SLOT, &seq);
    if (st == TF_OK) st = tf__transfer_result(c, seq, TF__STAGING_SLOT);
    if (st == TF_OK) st = tf__transfer_wait(c, TF__STAGING_SLOT, down, t);
    return st;
}
