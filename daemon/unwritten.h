/*
 * Bytes a client never wrote. Device memory comes back from a pool or the
 * heap holding whatever the previous owner (perhaps another client) left,
 * so no tensor may be read before every byte of it is the client's own or
 * zero. A tensor created without (or with only part of) its data keeps a
 * watermark: the prefix [0, written) its writes have covered. Writes that
 * continue the prefix, as a chunked upload's do, cost nothing; the first
 * read (an operation input, a download) or a write that leaves a gap
 * enqueues one zero-fill of the rest on the connection's stream, ordered
 * before the read or the write. Operation outputs are written in full
 * (the executor zeroes those of a skipped or failed operation).
 */
#ifndef TENFERRO_DAEMON_UNWRITTEN_H
#define TENFERRO_DAEMON_UNWRITTEN_H

#include <stddef.h>

#include "daemon/connection.h"
#include "daemon/tensor-table.h"
#include "tenferro/status.h"

/*
 * Notes a write of [offset, offset + len) of t that the caller enqueues next.
 * A write past the watermark first zero-fills everything not yet written.
 * TF_ERR_NO_MEMORY (with msg) when the fill cannot be queued; nothing changed then.
 */
tf_status tfd_unwritten_note_write(tfd_conn *c, tfd_tensor *t, size_t offset, size_t len, char *msg,
                                   size_t msg_len);

/* Before t is read: zero-fills whatever of it no write has covered. */
tf_status tfd_unwritten_settle(tfd_conn *c, tfd_tensor *t, char *msg, size_t msg_len);

#endif
