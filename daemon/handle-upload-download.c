/*
 * Upload and Download: the blocking transfer routes. Data travels inline in
 * frames of at most the negotiated size (the client splits larger tensors into
 * chunks). Both are ordered on the connection's stream, so an upload is seen
 * by every later operation and a download returns the value after everything
 * queued before it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/quota.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"
#include "daemon/unwritten.h"

/*
 * Creates the tensor an Upload announces, after checking its handle, shape,
 * carried write and the quotas.
 */
static tf_status create_tensor(tfd_conn *c, const Tenferro__Upload *up, char *msg, size_t len) {
    tfd_tensor rec;
    tf_status st = tfd_tensor_record_new(c, up->tensor, up->dtype, up->n_shape, up->shape, &rec,
                                         msg, len);
    if (st != TF_OK) return st;
    /* A refused request changes nothing: check the write before the tensor exists. */
    if (up->data.len > 0 && (up->offset > rec.bytes || up->data.len > rec.bytes - up->offset)) {
        snprintf(msg, len,
                 "write of %zu bytes at offset %llu does not fit the new tensor %llu (%zu bytes)",
                 up->data.len, (unsigned long long)up->offset, (unsigned long long)up->tensor,
                 rec.bytes);
        return TF_ERR_INVALID_ARGUMENT;
    }
    return tfd_tensor_create(c, &rec, msg, len);
}

/*
 * Loop, once an upload's bytes are on the device: the frame that held them
 * is freed with the item, and the bytes no longer count against the client.
 */
static void on_upload_copied(tfd_item *it) {
    tfd_conn *c = it->done_arg;
    tfd_memory_reply_release(c, it->u.copy.bytes);
    tfd_item_free(it);
}

void tfd_handle_upload(tfd_conn *c, Tenferro__Frame *frame) {
    Tenferro__Upload *up = frame->upload;
    uint64_t seq = frame->seq;
    char msg[256];
    tf_status st = TF_OK;
    if (up->create) st = create_tensor(c, up, msg, sizeof msg);
    /* A write names a live tensor and fits it, even an empty write (never a silent success). */
    if (st == TF_OK && (up->data.len > 0 || !up->create)) {
        tfd_tensor *t = tfd_usable_tensor(c, up->tensor, "upload", "written", &st, msg, sizeof msg);
        if (t && (up->offset > t->bytes || up->data.len > t->bytes - up->offset)) {
            snprintf(msg, sizeof msg, "write of %zu bytes at offset %llu does not fit tensor %llu (%zu bytes)",
                     up->data.len, (unsigned long long)up->offset, (unsigned long long)up->tensor,
                     t->bytes);
            st = TF_ERR_INVALID_ARGUMENT;
        } else if (t && up->data.len > 0) {
            tfd_item *it = tfd_item_new(TFD_ITEM_WRITE);
            if (!it) {
                snprintf(msg, sizeof msg, "out of host memory");
                st = TF_ERR_NO_MEMORY;
            } else if ((st = tfd_unwritten_note_write(c, t, up->offset, up->data.len, msg,
                                                      sizeof msg)) != TF_OK) {
                tfd_item_free(it);
            } else {
                it->u.copy.device = (uint8_t *)t->data + up->offset;
                it->u.copy.host = up->data.data;
                it->u.copy.bytes = up->data.len;
                it->u.copy.owned = frame; /* the frame holds the bytes until the copy ran */
                /*
                 * Counted like a reply the client has not read until the copy ran: a
                 * client whose stream is busy cannot pile up decoded uploads without
                 * bound; its next frames wait for room instead (memory-limits.h).
                 */
                it->done = on_upload_copied;
                it->done_arg = c;
                tfd_memory_reply_reserve(c, up->data.len);
                c->srv->counters.bytes_uploaded += up->data.len;
                tfd_stream_enqueue(c->stream, it, it, 1);
                frame = NULL;
            }
        }
    }
    tf__frame_free(frame);
    if (st != TF_OK)
        tfd_conn_reply(c, seq, st, "%s", msg);
    else
        tfd_conn_reply(c, seq, TF_OK, NULL);
}

/*
 * Sends the bytes a READ item copied out, or the failure the stream reported,
 * or (no host buffer: none could be allocated) TF_ERR_NO_MEMORY, in its turn.
 */
static void on_read_done(tfd_item *it) {
    tfd_conn *c = it->done_arg;
    if (!c->closing) {
        Tenferro__Frame out = TENFERRO__FRAME__INIT;
        Tenferro__DownloadReply reply = TENFERRO__DOWNLOAD_REPLY__INIT;
        Tenferro__Result result = TENFERRO__RESULT__INIT;
        char why[sizeof it->outcome.message + 96];
        result.status = (uint32_t)it->outcome.status;
        result.message = it->outcome.message;
        /*
         * An operation of a submission (batch ids start at 1) is named the way a
         * synchronize names it, by its index there; the read's own failure is as it is.
         */
        if (it->outcome.status != TF_OK && it->outcome.batch != 0) {
            snprintf(why, sizeof why, "operation %u of a submission failed on the device: %s",
                     it->outcome.index, it->outcome.message);
            result.message = why;
        }
        if (!it->u.copy.host && it->outcome.status == TF_OK) {
            result.status = TF_ERR_NO_MEMORY;
            result.message = "out of host memory for the read";
        }
        reply.result = &result;
        if (result.status == TF_OK) {
            reply.data.data = it->u.copy.host;
            reply.data.len = it->u.copy.bytes;
            c->srv->counters.bytes_downloaded += it->u.copy.bytes;
        }
        out.seq = it->tag;
        out.body_case = TENFERRO__FRAME__BODY_DOWNLOAD_REPLY;
        out.download_reply = &reply;
        tfd_conn_send(c, &out);
    }
    /* The encoded reply counts now (or nobody will read it): the reservation goes. */
    tfd_memory_reply_release(c, it->u.copy.bytes);
    free(it->u.copy.host);
    tfd_item_free(it);
}

/* Refuses a Download with a DownloadReply carrying no data, as docs/protocol.md promises. */
static void refuse_download(tfd_conn *c, uint64_t seq, tf_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void refuse_download(tfd_conn *c, uint64_t seq, tf_status status, const char *fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    Tenferro__DownloadReply reply = TENFERRO__DOWNLOAD_REPLY__INIT;
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = (uint32_t)status;
    result.message = message;
    reply.result = &result;
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_DOWNLOAD_REPLY;
    out.download_reply = &reply;
    tfd_conn_send(c, &out);
}

void tfd_handle_download(tfd_conn *c, Tenferro__Frame *frame) {
    Tenferro__Download *dl = frame->download;
    uint64_t seq = frame->seq;
    uint64_t id = dl->tensor, offset = dl->offset, length = dl->length;
    tf__frame_free(frame);
    char why[256];
    tf_status st;
    tfd_tensor *t = tfd_usable_tensor(c, id, "download", "downloaded", &st, why, sizeof why);
    if (!t) {
        refuse_download(c, seq, st, "%s", why);
        return;
    }
    if (offset > t->bytes || length > t->bytes - offset) {
        refuse_download(c, seq, TF_ERR_INVALID_ARGUMENT,
                        "read of %llu bytes at offset %llu does not fit tensor %llu (%zu bytes)",
                        (unsigned long long)length, (unsigned long long)offset,
                        (unsigned long long)id, t->bytes);
        return;
    }
    /* The reply carries the bytes plus its own fields: it must fit the frame maximum too. */
    uint64_t most = c->srv->opt.max_frame_bytes - TF__FRAME_HEADROOM;
    if (length > most) {
        refuse_download(c, seq, TF_ERR_INVALID_ARGUMENT,
                        "read of %llu bytes does not fit one reply: read in chunks of at most %llu "
                        "bytes (the %llu-byte frame maximum less %llu for the reply's fields)",
                        (unsigned long long)length, (unsigned long long)most,
                        (unsigned long long)c->srv->opt.max_frame_bytes,
                        (unsigned long long)TF__FRAME_HEADROOM);
        return;
    }
    /*
     * Earlier downloads may still be on the stream: a refusal for want of
     * memory goes in its turn (an item that copies nothing and answers
     * TF_ERR_NO_MEMORY), never ahead of their replies; without even an item,
     * the connection ends with that status.
     */
    tfd_item *it = tfd_item_new(TFD_ITEM_READ);
    /* What the client never wrote reads as zeros: the fill goes on the stream before the read. */
    if (!it || tfd_unwritten_settle(c, t, why, sizeof why) != TF_OK) {
        tfd_item_free(it);
        tfd_conn_reply(c, 0, TF_ERR_NO_MEMORY,
                       "tenferrod is out of memory for a download; the connection is closed");
        tfd_conn_close(c);
        return;
    }
    /* Counted as a queued reply before it exists, so unread replies cannot pile up (memory-limits.c). */
    tfd_memory_reply_reserve(c, length);
    void *host = malloc(length ? length : 1);
    if (!host) tfd_memory_reply_release(c, length);
    it->u.copy.device = (uint8_t *)t->data + offset;
    it->u.copy.host = host;
    it->u.copy.bytes = host ? length : 0;
    it->done = on_read_done;
    it->done_arg = c;
    it->tag = seq;
    tfd_stream_enqueue(c->stream, it, it, 1);
}
