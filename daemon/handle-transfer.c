/*
 * Transfer and TransferRelease: pending copies between a pinned buffer and a
 * tensor, reported through the client's completion page.
 *
 * A Transfer is checked completely before anything changes (docs/transfers.md
 * lists the checks in order), then the buffer and the tensor are marked in
 * flight, a WRITE (upload) or READ (download) item is queued on the
 * connection's stream, and the request is answered at once: the daemon never
 * waits for the copy. While in flight the tensor may still be read by
 * operations: their items are queued on the same stream after the copy's
 * (issued by the loop on an idle stream, or queued for the worker), so they
 * run after it on the CPU and are stream-ordered after it on a GPU. Nothing
 * may write, free or transfer it again: batch.c (OP_FREE), handle-free.c
 * and handle-upload-download.c refuse the tensor with TF_ERR_BUSY; BufferFree and
 * other transfers refuse the buffer.
 *
 * When the copy has completed, the thread that saw it (a worker, the
 * completion thread, or the loop for a small CPU copy it ran itself right
 * after the answer) publishes the outcome in the transfer's slot at once
 * (status, then state DONE, then a futex wake) and marks the record completed; the client's wait does not
 * wait for the loop thread. The loop then finalizes the record: it clears
 * the in-flight marks and counts the transfer, and a transfer the client
 * released (TransferRelease: nobody will wait for it) frees its buffer and
 * tensor, the tensor's memory through a FREE item on the stream, so
 * operations queued behind the copy that read it run before it is freed.
 * That happens before the loop handles the bytes of the connection's next
 * read (tfd_conn_reap_transfers, from connection.c), so a request the client
 * sends after it read DONE always finds the buffer and the tensor free;
 * otherwise when the item's own callback reaches the loop. A transfer whose
 * connection has gone frees its buffer and lets the connection finish
 * closing.
 *
 * A release can reach the daemon after the copy completed (the client
 * released while the DONE was on its way). So a completed transfer's record
 * stays with its slot until the next Transfer on that slot replaces it: a
 * late TransferRelease still finds it and frees the buffer and the tensor.
 * The client reuses a slot only after it read DONE there, and a release is
 * sent before that, so the record a release finds is always its own. A
 * record also lives until its item's callback has run, even once replaced.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/connection.h"
#include "daemon/handle-buffer.h"
#include "daemon/handle-transfer.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/sync-point.h"
#include "daemon/tensor-table.h"
#include "daemon/unwritten.h"

/*
 * A transfer, from its acceptance until its slot is used again (or it is
 * released) and its item has called back. Only `completed` and `status` are
 * written off the loop thread, by the executor thread that saw the copy end.
 */
typedef struct tfd_transfer {
    tfd_conn *conn;
    uint64_t buffer, tensor;
    size_t bytes;
    uint32_t slot;
    int upload;
    int detached;   /* TransferRelease: free buffer and tensor once the copy completed */
    int done;       /* finalized on the loop; kept for a late TransferRelease */
    int item_alive; /* its item has not called back yet: the record must stay */
    int dropped;    /* no slot refers to it any more: freed once the item has called back */
    atomic_int completed; /* the outcome is in `status` and published in the slot */
    tf_status status;
} tfd_transfer;

/* Forgets a record no slot refers to any more: now, or when its item calls back. */
static void transfer_drop(tfd_transfer *tr) {
    if (!tr) return;
    tr->dropped = 1;
    if (!tr->item_alive) free(tr);
}

/*
 * Checks a Transfer in the documented order; the first failed check is the
 * answer and nothing changes. On success *bp and *tp are the buffer and the
 * tensor (valid until the tables change).
 */
static tf_status check_transfer(tfd_conn *c, const tfd_transfer_request *r, tfd_pinned **bp,
                                tfd_tensor **tp, char *msg, size_t len) {
    if (r->direction != TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD &&
        r->direction != TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD) {
        snprintf(msg, len, "transfer direction %u is neither upload (%d) nor download (%d)",
                 r->direction, TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD,
                 TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD);
        return TF_ERR_INVALID_ARGUMENT;
    }
    /* The outcome goes into the completion page: only once that page is sealed (handle-mapped.c). */
    if (!c->mailbox) {
        snprintf(msg, len, "the completion page is not sealed: send Mapped with buffer 0 once it "
                           "is mapped, before any pending transfer");
        return TF_ERR_INVALID_ARGUMENT;
    }
    tfd_pinned *b = tfd_pinned_table_find(&c->buffers, r->buffer);
    if (!b) {
        snprintf(msg, len, "pinned buffer %llu is not live on this connection",
                 (unsigned long long)r->buffer);
        return TF_ERR_UNKNOWN_HANDLE;
    }
    if (!b->sealed && !b->creating) {
        if (b->seal_status != TF_OK) {
            snprintf(msg, len,
                     "pinned buffer %llu could not be sealed when it was Mapped (its pages were "
                     "freed by the client or the system has none left): free it and create another",
                     (unsigned long long)r->buffer);
            return b->seal_status;
        }
        snprintf(msg, len, "pinned buffer %llu is not sealed: send Mapped once it is mapped, before "
                           "its first transfer",
                 (unsigned long long)r->buffer);
        return TF_ERR_INVALID_ARGUMENT;
    }
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, r->tensor);
    if (!t) {
        snprintf(msg, len, "tensor %llu is not live on this connection",
                 (unsigned long long)r->tensor);
        return TF_ERR_UNKNOWN_HANDLE;
    }
    if (r->slot >= TF__COMPLETION_SLOTS) {
        snprintf(msg, len, "completion slot %u is out of range: the page has %u slots (0..%u)",
                 r->slot, (unsigned)TF__COMPLETION_SLOTS, (unsigned)TF__COMPLETION_SLOTS - 1);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (c->transfers[r->slot] && !c->transfers[r->slot]->done) {
        snprintf(msg, len,
                 "completion slot %u belongs to a transfer still in flight: wait for it or use a "
                 "free slot",
                 r->slot);
        return TF_ERR_BUSY;
    }
    if (r->bytes != t->bytes) {
        snprintf(msg, len, "length mismatch: the tensor has %zu bytes, the transfer names %llu",
                 t->bytes, (unsigned long long)r->bytes);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (r->offset > b->bytes || r->bytes > b->bytes - r->offset) {
        snprintf(msg, len,
                 "transfer of %llu bytes at offset %llu does not fit pinned buffer %llu (%zu bytes)",
                 (unsigned long long)r->bytes, (unsigned long long)r->offset,
                 (unsigned long long)r->buffer, b->bytes);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (b->in_flight || b->creating) {
        snprintf(msg, len, "buffer %llu is %s: wait for it first", (unsigned long long)r->buffer,
                 b->creating ? "still being created" : "already in a transfer");
        return TF_ERR_BUSY;
    }
    if (t->in_flight) {
        snprintf(msg, len, "tensor %llu is already in a transfer: wait for it first",
                 (unsigned long long)r->tensor);
        return TF_ERR_BUSY;
    }
    *bp = b;
    *tp = t;
    return TF_OK;
}

/*
 * Frees what a released transfer moved: its buffer and its tensor (the client
 * holds neither). The tensor's memory goes through a FREE item behind
 * everything on the stream, the operations that read it included.
 */
static void free_released(tfd_conn *c, const tfd_transfer *tr) {
    tfd_pinned *b = tfd_pinned_table_find(&c->buffers, tr->buffer);
    if (b && !b->in_flight) tfd_conn_buffer_drop(c, tr->buffer);
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, tr->tensor);
    /* Without memory for its free the tensor stays until the connection goes. */
    if (t && !t->in_flight) (void)tfd_tensor_drop(c, t);
}

/*
 * Executor thread that saw the copy end (or be skipped): publishes the
 * outcome in the slot for the client and tells the loop there is a record to
 * finalize. The page stays mapped until the connection is freed, which waits
 * for this item's callback, so the write is safe even if the client has gone.
 */
static void on_transfer_early(tfd_item *it) {
    tfd_transfer *tr = it->done_arg;
    tfd_conn *c = tr->conn;
    tr->status = it->outcome.status;
    atomic_store_explicit(&tr->completed, 1, memory_order_release);
    atomic_fetch_add_explicit(&c->transfers_unreaped, 1, memory_order_release);
    tfd_completion_post(c->completion, tr->slot, tr->status);
}

/*
 * Loop thread, once the copy completed and its outcome is in the slot (the
 * executor runs an item's early hook before its callback): releases the
 * marks, counts it, frees what a released transfer moved.
 */
static void finalize(tfd_conn *c, tfd_transfer *tr) {
    tfd_server *srv = c->srv;
    const tf_status st = tr->status;
    tr->done = 1;
    tfd_pinned *b = tfd_pinned_table_find(&c->buffers, tr->buffer);
    if (b) b->in_flight = 0;
    /* A closing connection's tensor table is already gone (its tensors were freed on the stream). */
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, tr->tensor);
    if (t) {
        t->in_flight = 0;
        /* The copy is done: what reads the tensor from now on need not wait for it. */
        tfd_sync_point_unref(t->copy_done);
        t->copy_done = NULL;
    }
    if (st == TF_OK) {
        srv->counters.transfers_completed++;
        if (tr->upload)
            srv->counters.bytes_uploaded += tr->bytes;
        else
            srv->counters.bytes_downloaded += tr->bytes;
    } else {
        srv->counters.transfers_failed++;
    }
    if (c->closing) {
        c->transfers[tr->slot] = NULL;
        tfd_conn_buffer_drop(c, tr->buffer);
        transfer_drop(tr);
        return;
    }
    if (tr->detached) {
        c->transfers[tr->slot] = NULL;
        free_released(c, tr);
        transfer_drop(tr);
    }
}

void tfd_conn_reap_transfers(tfd_conn *c) {
    if (!atomic_load_explicit(&c->transfers_unreaped, memory_order_relaxed) ||
        !atomic_exchange_explicit(&c->transfers_unreaped, 0, memory_order_acquire))
        return;
    for (uint32_t s = 0; s < TF__COMPLETION_SLOTS; s++) {
        tfd_transfer *tr = c->transfers[s];
        if (tr && !tr->done && atomic_load_explicit(&tr->completed, memory_order_acquire))
            finalize(c, tr);
    }
}

/* Loop thread, the item's callback: finalizes the record unless a reap did, then lets it go. */
static void on_transfer_done(tfd_item *it) {
    tfd_transfer *tr = it->done_arg;
    tfd_conn *c = tr->conn;
    tfd_item_free(it);
    c->transfers_in_flight--;
    tfd_busy_poll_release(&c->srv->busy_poll);
    if (!tr->done) finalize(c, tr);
    tr->item_alive = 0;
    if (tr->dropped) free(tr);
    if (c->closing) tfd_conn_maybe_free(c);
}

/*
 * Where the backend has a copy queue beside its compute queue, a pending
 * transfer's copy runs there, so it overlaps the kernels queued before it
 * that do not touch its tensor. An upload waits only for the last operation
 * that read the tensor since a transfer first used it (before that, for
 * everything queued before it, which covers the tensor's allocation and its
 * producer), and leaves the point the operations reading the new values wait
 * for. A download waits for everything queued before it. Without memory for
 * the points the copy simply stays in stream order.
 */
static void beside_compute(tfd_conn *c, tfd_tensor *t, tfd_item *it, int upload) {
    tfd_backend *be = &c->srv->backend;
    if (!be->vt->side_copy) return;
    it->point = tfd_sync_point_new(be);
    if (!it->point) return;
    it->side = 1;
    if (upload) {
        if (t->tracked) it->after = tfd_sync_point_ref(t->last_read);
        tfd_sync_point_unref(t->copy_done);
        t->copy_done = tfd_sync_point_ref(it->point);
    }
    t->tracked = 1;
}

tf_status tfd_transfer_start(tfd_conn *c, const tfd_transfer_request *r, uint64_t tag, char *msg,
                             size_t msg_len) {
    tfd_pinned *b = NULL;
    tfd_tensor *t = NULL;
    tf_status st = check_transfer(c, r, &b, &t, msg, msg_len);
    int upload = r->direction == TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD;
    tfd_transfer *tr = NULL;
    tfd_item *it = NULL;
    if (st == TF_OK) {
        tr = calloc(1, sizeof *tr);
        it = tfd_item_new(upload ? TFD_ITEM_WRITE : TFD_ITEM_READ);
        /* An upload writes the whole tensor; a download reads it, so what was never written is zeroed. */
        if (!tr || !it || (!upload && tfd_unwritten_settle(c, t, msg, msg_len) != TF_OK)) {
            free(tr);
            tfd_item_free(it);
            snprintf(msg, msg_len, "out of host memory");
            st = TF_ERR_NO_MEMORY;
        }
    }
    if (st != TF_OK) {
        c->srv->counters.transfers_refused++;
        return st;
    }
    tr->conn = c;
    tr->buffer = r->buffer;
    tr->tensor = r->tensor;
    tr->bytes = (size_t)r->bytes;
    tr->slot = r->slot;
    tr->upload = upload;
    tr->item_alive = 1;
    b->in_flight = 1;
    t->in_flight = upload ? TFD_FLIGHT_WRITE : TFD_FLIGHT_READ;
    if (upload) t->written = t->bytes;
    transfer_drop(c->transfers[r->slot]); /* the slot's previous, completed transfer */
    c->transfers[r->slot] = tr;
    c->transfers_in_flight++;
    tfd_busy_poll_hold(&c->srv->busy_poll);
    /* No owned frame: the host side is the buffer's mapping, which outlives the copy. */
    it->u.copy.device = t->data;
    it->u.copy.host = (uint8_t *)b->map + r->offset;
    it->u.copy.bytes = (size_t)r->bytes;
    it->done = on_transfer_done;
    it->early = on_transfer_early;
    it->done_arg = tr;
    it->tag = tag;
    beside_compute(c, t, it, upload);
    c->srv->counters.transfers_accepted++;
    /*
     * An idle stream starts the copy here, before the answer goes out (CUDA), or
     * has the loop run a small one right after the answer (CPU); a busy one queues it.
     */
    if (!tfd_stream_execute_now(c->stream, it)) tfd_stream_enqueue(c->stream, it, it, 1);
    return TF_OK;
}

void tfd_handle_transfer(tfd_conn *c, Tenferro__Frame *frame) {
    const Tenferro__Transfer *m = frame->transfer;
    tfd_transfer_request r = {m->direction, m->buffer, m->tensor, m->offset, m->bytes, m->slot};
    uint64_t seq = frame->seq;
    tf__frame_free(frame);
    char msg[256];
    tf_status st = tfd_transfer_start(c, &r, seq, msg, sizeof msg);
    if (st == TF_OK)
        tfd_conn_reply(c, seq, TF_OK, NULL);
    else
        tfd_conn_reply(c, seq, st, "%s", msg);
}

void tfd_handle_transfer_release(tfd_conn *c, Tenferro__Frame *frame) {
    uint32_t slot = frame->transfer_release->slot;
    tf__frame_free(frame);
    tfd_transfer *tr = slot < TF__COMPLETION_SLOTS ? c->transfers[slot] : NULL;
    if (!tr) {
        tfd_log(TFD_LOG_DEBUG, "client %llu released slot %u, which has no transfer",
                (unsigned long long)c->client_id, slot);
        return;
    }
    if (tr->detached) return;
    c->srv->counters.transfers_detached++;
    tr->detached = 1;
    if (!tr->done) return;
    /* The copy completed before the release arrived: free what it moved now. */
    c->transfers[slot] = NULL;
    free_released(c, tr);
    transfer_drop(tr);
}

void tfd_conn_transfers_forget(tfd_conn *c) {
    for (uint32_t s = 0; s < TF__COMPLETION_SLOTS; s++) {
        free(c->transfers[s]);
        c->transfers[s] = NULL;
    }
}
