/*
 * tf_copy_to: a tensor from one daemon's device to another's (tenferro/peer.h,
 * docs/multi-gpu.md). The source daemon offers the tensor under a one-time
 * token; the destination daemon takes the offer, fetching it from the source
 * over a daemon-to-daemon connection, so the memory's descriptor never
 * reaches this process. An offer that was not taken is withdrawn at once.
 */
#include <string.h>

#include "client/internal.h"

/* Asks `from`'s daemon to offer tensor t; the token goes to token (NUL-terminated). */
static tf_status offer(tf_client *from, tf_tensor t, char *token, size_t len) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__CopyOffer body = TENFERRO__COPY_OFFER__INIT;
    body.tensor = t;
    req.body_case = TENFERRO__FRAME__BODY_COPY_OFFER;
    req.copy_offer = &body;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(from, &req, &reply);
    if (st != TF_OK) return st;
    if (reply->body_case != TENFERRO__FRAME__BODY_COPY_OFFER_REPLY) {
        st = tf__fail(from, TF_ERR_PROTOCOL, "unexpected answer to CopyOffer");
    } else if ((st = tf__result_status(from, reply->copy_offer_reply->result)) == TF_OK) {
        const char *tok = reply->copy_offer_reply->token;
        if (!tok || !tok[0] || strlen(tok) >= len)
            st = tf__fail(from, TF_ERR_PROTOCOL, "CopyOffer answered without a usable token");
        else
            memcpy(token, tok, strlen(tok) + 1);
    }
    tf__frame_free(reply);
    return st;
}

/* Withdraws an offer the other daemon did not take, so the tensor is free again. */
static void withdraw(tf_client *from, const char *token) {
    char kept[sizeof from->last_error];
    memcpy(kept, from->last_error, sizeof kept);
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__CopyOffer body = TENFERRO__COPY_OFFER__INIT;
    body.withdraw_token = (char *)token;
    req.body_case = TENFERRO__FRAME__BODY_COPY_OFFER;
    req.copy_offer = &body;
    Tenferro__Frame *reply = NULL;
    if (tf__call(from, &req, &reply) == TF_OK) tf__frame_free(reply);
    memcpy(from->last_error, kept, sizeof kept);
}

/* Asks `to`'s daemon to take the offer into a new tensor `id` of meta; answered once copied. */
static tf_status take(tf_client *to, const char *token, const char *source_socket, uint64_t id,
                      const tf__meta *meta) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__CopyTake body = TENFERRO__COPY_TAKE__INIT;
    int64_t shape[TF_MAX_RANK];
    for (int i = 0; i < meta->rank; i++) shape[i] = meta->shape[i];
    body.token = (char *)token;
    body.source_socket = (char *)source_socket;
    body.tensor = id;
    body.dtype = (uint32_t)meta->dtype;
    body.n_shape = (size_t)meta->rank;
    body.shape = shape;
    req.body_case = TENFERRO__FRAME__BODY_COPY_TAKE;
    req.copy_take = &body;
    return tf__call_result(to, &req, "CopyTake");
}

tf_status tf_copy_to(tf_client *from, tf_tensor source, tf_client *to, tf_tensor *out) {
    if (!from || !to || !out) return TF_ERR_INVALID_ARGUMENT;
    if (from == to)
        return tf__fail(from, TF_ERR_INVALID_ARGUMENT,
                        "tf_copy_to: both clients are the same connection (copy within one "
                        "daemon with an operation instead)");
    if (to->broken) return tf__fail(to, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    size_t bytes;
    tf_status st = tf__transferable(from, source, &bytes);
    if (st != TF_OK) return st;
    tf__handle *h = NULL;
    if ((st = tf__lookup(from, source, &h)) != TF_OK) return st;
    tf__handle made = {.meta = h->meta};
    char token[64];
    if ((st = offer(from, source, token, sizeof token)) != TF_OK) return st;
    /* The destination's queued work goes first, as for any request of `to`. */
    if (to->in_scoped && (st = tf__scoped_flush(to)) != TF_OK) {
        withdraw(from, token);
        return st;
    }
    made.id = ++to->next_tensor_id;
    st = take(to, token, from->socket_path, made.id, &made.meta);
    if (st != TF_OK) {
        withdraw(from, token);
        memcpy(from->last_error, to->last_error, sizeof from->last_error);
        return st;
    }
    if (tf__id_table_insert(&to->handles, &made) != 0) {
        tf__send_free(to, &made.id, 1);
        return tf__fail(to, TF_ERR_NO_MEMORY, "out of memory recording the tensor");
    }
    *out = made.id;
    tf__ok(from);
    return tf__ok(to);
}
