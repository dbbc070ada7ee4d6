/*
 * Pinned buffers and pending transfers of libtenferro-client
 * (docs/transfers.md).
 *
 * A pinned buffer is host memory shared with the daemon: tenferrod creates
 * it, pins it once (cudaHostRegister on a GPU) and maps the same pages into
 * this process, so a transfer is one copy between those pages and the
 * device. Creating one is the expensive step: make a buffer once and reuse it
 * for every transfer of that size.
 *
 * A pending transfer takes its buffer and its tensor by value. From a
 * successful tf_upload_pending or tf_download_pending until tf_pending_wait
 * hands them back, the buffer's bytes are unreachable (tf_pinned_buffer_data
 * returns NULL, tf_pinned_buffer_free is TF_ERR_BUSY) and the tensor may be
 * read by operations (scoped or held, any kind, a prepared graph's input):
 * the daemon runs them after the copy, on the same stream, without waiting
 * for it. It may not be written, freed, downloaded or transferred again:
 * tf_tensor_free, tf_download, tf_download_into and other transfers return
 * TF_ERR_BUSY at the call, without asking the daemon, and change nothing. A
 * refused submission returns a typed error and leaves the buffer, the tensor
 * and the client as they were.
 *
 * Like the rest of a tf_client, none of this is thread-safe: use a client,
 * its buffers and its pending transfers from one thread at a time.
 */
#ifndef TENFERRO_TRANSFER_H
#define TENFERRO_TRANSFER_H

#include <stddef.h>

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_pinned_buffer tf_pinned_buffer;
typedef struct tf_pending tf_pending;

/*
 * Creates a pinned buffer of `bytes` bytes (at least 1) shared with the
 * daemon. Counts against the pinned_bytes quota (TF_ERR_QUOTA). A daemon
 * without pinned buffers answers TF_ERR_UNSUPPORTED. The buffer lives until
 * tf_pinned_buffer_free, tf_pending_release or tf_disconnect.
 */
TF_EXTERN tf_status tf_pinned_buffer_new(tf_client *client, size_t bytes,
                                         tf_pinned_buffer **buffer);

/* The buffer's bytes, or NULL while a pending transfer holds it (or for NULL). */
TF_EXTERN void *tf_pinned_buffer_data(tf_pinned_buffer *buffer);

/* The buffer's size in bytes (0 for NULL). */
TF_EXTERN size_t tf_pinned_buffer_size(const tf_pinned_buffer *buffer);

/*
 * Frees a buffer: TF_ERR_BUSY while a pending transfer holds it (nothing
 * changes). After the connection is lost this only unmaps it (the daemon
 * freed its side with the connection) and returns TF_OK. NULL is allowed.
 */
TF_EXTERN tf_status tf_pinned_buffer_free(tf_pinned_buffer *buffer);

/*
 * Starts copying `buffer` into the existing tensor `destination`, whose size
 * must equal the buffer's (TF_ERR_INVALID_ARGUMENT otherwise). Returns at
 * once, once the daemon has queued the copy: it is ordered after the work
 * this client submitted before it, and operations reading `destination`
 * submitted after it see the copied values. On success *pending owns both
 * until tf_pending_wait or tf_pending_release. Refusals (each leaves everything untouched):
 * TF_ERR_UNKNOWN_HANDLE (an unknown tensor, or a buffer of another client),
 * TF_ERR_BUSY (the buffer or the tensor is in another transfer, the tensor is
 * read or produced by unsubmitted work of a held session, or all completion
 * slots are in use), TF_ERR_UNSUPPORTED (the daemon has no pinned transfers), and any
 * refusal of the daemon.
 */
TF_EXTERN tf_status tf_upload_pending(tf_client *client, tf_pinned_buffer *buffer,
                                      tf_tensor destination, tf_pending **pending);

/* Starts copying tensor `source` into `buffer`; the same rules as tf_upload_pending. */
TF_EXTERN tf_status tf_download_pending(tf_client *client, tf_tensor source,
                                        tf_pinned_buffer *buffer, tf_pending **pending);

/*
 * 1 when the transfer has completed (wait will not sleep), 0 while it is in
 * flight. Never waits and makes no system call: one atomic load of the
 * completion page the daemon writes. A copy may finish before the first
 * poll, so 1 at once is not an error. Also 1 once the connection is known to
 * be lost, so a caller polling it goes on to tf_pending_wait and hears why.
 */
TF_EXTERN int tf_pending_is_ready(const tf_pending *pending);

/*
 * Waits for the transfer (sleeping on the completion word, never spinning
 * for long), then hands back the tensor and the buffer and frees `pending`.
 * Returns the transfer's status: TF_OK, the daemon's error for the copy, or
 * TF_ERR_DISCONNECTED when the daemon went away meanwhile. The tensor and the
 * buffer come back in every case; a NULL `tensor` or `buffer` frees that one
 * instead.
 */
TF_EXTERN tf_status tf_pending_wait(tf_pending *pending, tf_tensor *tensor,
                                    tf_pinned_buffer **buffer);

/*
 * Detaches a pending transfer nobody will wait for: frees `pending`, the
 * buffer (its mapping here) and the tensor's handle at once; the daemon frees
 * its side of both when the copy has completed, and after the operations
 * queued to read the tensor (ones not yet submitted are sent first: the
 * release follows the session's next submission). NULL is allowed.
 */
TF_EXTERN void tf_pending_release(tf_pending *pending);

#ifdef __cplusplus
}
#endif
#endif
