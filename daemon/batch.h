/*
 * Batches of operations (batch.c): validation against the connection's
 * tensors and quotas, and their enqueueing on its stream; the lookups of a
 * usable tensor that every handler shares.
 */
#ifndef TENFERRO_DAEMON_BATCH_H
#define TENFERRO_DAEMON_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/frame.h"
#include "daemon/conn.h"
#include "daemon/tensor-table.h"
#include "tenferro/status.h"

/* What a batch came to: accepted count, or the failing index and why. */
typedef struct tfd_batch_result {
    tf_status status;
    int has_failed_index;
    uint32_t failed_index;
    uint64_t accepted;
    uint64_t batch; /* id the executor reports failures of this batch under */
    char message[512];
} tfd_batch_result;

/* A batch being validated and enqueued, possibly over several slices. */
typedef struct tfd_batch_job {
    Tenferro__Op **ops; /* owned by the caller's frame */
    size_t n_ops;
    size_t next;        /* the first operation not looked at yet */
    uint64_t counted;   /* accepted operations already in the daemon's counters */
    int done;
    tfd_batch_result result;
} tfd_batch_job;

/* Starts a batch (a Submit of more than TF__MAX_OPS_PER_SUBMIT operations is refused whole). */
void tfd_batch_begin(tfd_conn *c, tfd_batch_job *job, Tenferro__Op **ops, size_t n_ops);

/*
 * Validates and enqueues operations from job->next on, for about budget_ns
 * (0 = to the end). Returns 1 when the batch is finished (job->result is
 * final), 0 when the slice ran out and the rest waits for the next call.
 */
int tfd_batch_step(tfd_conn *c, tfd_batch_job *job, uint64_t budget_ns);

/*
 * The tensor `id` of this connection when an operation may read it: live.
 * A tensor a pending transfer holds is readable too: the operation's item
 * is queued on the stream behind the copy, which was queued when the
 * transfer was accepted. Otherwise NULL, with TF_ERR_UNKNOWN_HANDLE in
 * *status and a message starting with `what` (then "input N" when
 * input >= 0) in msg.
 */
tfd_tensor *tfd_readable_tensor(tfd_conn *c, uint64_t id, const char *what, int input,
                                tf_status *status, char *msg, size_t msg_len);

/*
 * The tensor `id` of this connection when a request may write, free or
 * transfer it: live, and in no pending transfer. Otherwise NULL, with the
 * typed status in *status (TF_ERR_UNKNOWN_HANDLE, or TF_ERR_BUSY saying
 * which transfer holds it and that it cannot be `use`, e.g. "freed") and a
 * message starting with `what` in msg.
 */
tfd_tensor *tfd_usable_tensor(tfd_conn *c, uint64_t id, const char *what, const char *use,
                              tf_status *status, char *msg, size_t msg_len);

/*
 * Frees a tensor's device memory: at once when nothing queued or running can
 * read it on a backend that finishes in the call (tfd_stream_free_if_idle),
 * else through a FREE item behind everything queued on the stream; the caller
 * then removes the record from the table. Returns
 * TF_ERR_NO_MEMORY when no item can be made: nothing changed, the caller keeps
 * the record, and the connection's final free (tfd_conn_maybe_free) releases
 * it once its stream is idle, so memory a queued item may read is never freed
 * early and never lost.
 */
tf_status tfd_free_tensor_storage(tfd_conn *c, const tfd_tensor *rec);

/*
 * Frees tensor t of c (tfd_free_tensor_storage), then removes it from the
 * table and counts it freed; TF_ERR_NO_MEMORY leaves it in the table.
 */
tf_status tfd_tensor_drop(tfd_conn *c, const tfd_tensor *t);

/*
 * Makes tensor rec (id, meta and bytes set) on c: checks the quotas, takes
 * its memory on c's stream and records it in c's table. On failure nothing
 * is kept and msg says why.
 */
tf_status tfd_tensor_create(tfd_conn *c, tfd_tensor *rec, char *msg, size_t len);

/*
 * Fills rec for a new tensor `id` of dtype and shape (n_shape dimensions)
 * after checking that the id is free on c and the shape is one a tensor may
 * have; nothing is allocated.
 */
tf_status tfd_tensor_record_new(tfd_conn *c, uint64_t id, uint32_t dtype, size_t n_shape,
                                const int64_t *shape, tfd_tensor *rec, char *msg, size_t len);

#endif
