/*
 * Pending transfers between a pinned buffer and a tensor (handle-transfer.c),
 * whether they arrive as a Transfer frame or through the submission mailbox.
 */
#ifndef TENFERRO_DAEMON_TRANSFER_H
#define TENFERRO_DAEMON_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/connection.h"
#include "tenferro/status.h"

/* A pending transfer's request, from a Transfer frame or the submission mailbox. */
typedef struct tfd_transfer_request {
    uint32_t direction;
    uint64_t buffer, tensor, offset, bytes;
    uint32_t slot;
} tfd_transfer_request;

/*
 * Checks a pending transfer in the documented order and starts it; on a
 * refusal nothing changes and msg says why. tag names the request in logs.
 */
tf_status tfd_transfer_start(tfd_conn *c, const tfd_transfer_request *r, uint64_t tag, char *msg,
                             size_t msg_len);

/*
 * Finalizes on the loop every transfer whose completion an executor thread
 * already published, so the next frame finds its buffer and tensor free.
 */
void tfd_conn_reap_transfers(tfd_conn *c);

/* Frees the records of completed transfers kept for a late release. */
void tfd_conn_transfers_forget(tfd_conn *c);

#endif
