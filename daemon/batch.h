/*
 * Batches of operations (batch.c): validation against the connection's
 * tensors and quotas, and their enqueueing on its stream (the tensors'
 * own lifecycle is the tensor table's, tensor-table.h).
 */
#ifndef TENFERRO_DAEMON_BATCH_H
#define TENFERRO_DAEMON_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "common/frame.h"
#include "daemon/connection.h"
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

#endif
