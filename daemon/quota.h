/*
 * Quotas: whether a request that would add device bytes, live tensors,
 * queued operations or pinned bytes fits the limits of [quota.client] (per connection) and
 * [quota.uid] (summed over every connection of the same uid). A request that
 * would go over a limit is refused with TF_ERR_QUOTA before anything is
 * allocated; nothing already accepted is touched.
 *
 * What is counted:
 *  - device_bytes, live_tensors: the connection's tensor table (a free gives
 *    the room back at once, even while the memory itself is freed later on
 *    the stream);
 *  - queued_ops: the items on the connection's stream not yet executed, plus
 *    what the caller says this request adds (for a batch: every operation it
 *    accepted so far, and this one);
 *  - pinned_bytes: the connection's pinned buffers (handle-buffer.c); a
 *    BufferFree gives the room back at once. The daemon-wide limit on pinned
 *    memory ([daemon] max_pinned_bytes) is checked by BufferCreate itself.
 *
 * A limit of 0 is unlimited. With every limit 0 a check returns at once; the
 * per-uid sum walks the connection list once per batch (quota.c). Loop
 * thread only.
 */
#ifndef TENFERRO_DAEMON_QUOTA_H
#define TENFERRO_DAEMON_QUOTA_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/connection.h"

/*
 * Checks that c may take more_bytes of device memory, more_tensors live
 * tensors and more_queued queued operations on top of what it (and its uid)
 * uses now. Returns TF_OK, or TF_ERR_QUOTA with a message naming the limit,
 * the usage and the request (and counts the refusal).
 */
tf_status tfd_quota_check(tfd_conn *c, uint64_t more_bytes, uint64_t more_tensors,
                          uint64_t more_queued, char *msg, size_t len);

/* The same check for a pinned buffer of more_pinned bytes (BufferCreate). */
tf_status tfd_quota_check_pinned(tfd_conn *c, uint64_t more_pinned, char *msg, size_t len);

#endif
