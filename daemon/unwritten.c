/*
 * The watermark of bytes a client has written into a tensor, and the
 * zero-fill that covers the rest before anything can read it (unwritten.h).
 */
#include <stdio.h>

#include "daemon/connection.h"
#include "daemon/executor.h"
#include "daemon/item-pool.h"
#include "daemon/unwritten.h"

/* Queues a zero-fill of t's bytes from the watermark to the end and moves the watermark there. */
static tf_status zero_rest(tfd_conn *c, tfd_tensor *t, char *msg, size_t msg_len) {
    tfd_item *it = tfd_item_new(TFD_ITEM_ZERO);
    if (!it) {
        snprintf(msg, msg_len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    it->u.free.ptr = (char *)t->data + t->written;
    it->u.free.bytes = t->bytes - t->written;
    tfd_stream_enqueue(c->stream, it, it, 1);
    t->written = t->bytes;
    return TF_OK;
}

tf_status tfd_unwritten_note_write(tfd_conn *c, tfd_tensor *t, size_t offset, size_t len, char *msg,
                                   size_t msg_len) {
    if (t->written >= t->bytes) return TF_OK;
    if (offset <= t->written) {
        if (offset + len > t->written) t->written = offset + len;
        return TF_OK;
    }
    /* A gap would stay unwritten: fill everything left now; the write lands on zeros after it. */
    return zero_rest(c, t, msg, msg_len);
}

tf_status tfd_unwritten_settle(tfd_conn *c, tfd_tensor *t, char *msg, size_t msg_len) {
    if (t->written >= t->bytes) return TF_OK;
    return zero_rest(c, t, msg, msg_len);
}
