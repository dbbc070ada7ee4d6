/*
 * Connections and blocking transfers of libtenferro-client.
 *
 * A tf_client is one connection to one tenferrod. It is not thread-safe: use
 * one client per thread, or serialize calls on it. Every call returns a
 * tf_status (TF_OK is 0) and leaves a message for the last failure in
 * tf_client_last_error(). The library never raises SIGPIPE; once the daemon
 * has gone away every call returns TF_ERR_DISCONNECTED.
 */
#ifndef TENFERRO_CLIENT_H
#define TENFERRO_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/export.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tf_client tf_client;

/*
 * Connects to the tenferrod listening on `socket_path` and performs the
 * handshake. A NULL path means $TENFERRO_SOCKET, else the first of
 * /run/tenferro/tenferrod-0.sock and /run/tenferro/tenferrod-cpu.sock that
 * exists (a job scheduler's per-task hook sets $TENFERRO_SOCKET: docs/cluster.md).
 * When none exists, the failure's message names $TENFERRO_SOCKET and both paths.
 * The client's name (shown by tenferroctl status) is $TENFERRO_CLIENT_NAME, else
 * the program's name.
 */
TF_EXTERN tf_status tf_connect(const char *socket_path, tf_client **client);

/*
 * Closes the connection; the daemon frees every tensor and pinned buffer the
 * client still owns. Unmaps the client's pinned buffers and frees its pending
 * transfers still open: every tf_pinned_buffer and tf_pending of this client
 * is invalid afterwards. NULL is allowed.
 */
TF_EXTERN void tf_disconnect(tf_client *client);

/* The message of the client's last failed call ("" after success). Never NULL. */
TF_EXTERN const char *tf_client_last_error(const tf_client *client);

/* The daemon's description of its device ("cpu (2 cores, ...)"). */
TF_EXTERN const char *tf_client_device(const tf_client *client);

/* The id the daemon gave this connection (as tenferroctl status lists it). */
TF_EXTERN uint64_t tf_client_id(const tf_client *client);

/*
 * Creates a tensor on the device from host data (row-major, `rank` dims of
 * `shape`, elements of `dtype`) and returns its handle. Blocking: when it
 * returns, `data` may be reused. Like tf_download and tf_download_into, a
 * tensor of 64 KiB or more travels through the client's staging buffer (one
 * pinned buffer, created on first use and reused), a smaller one inline in
 * frames (docs/transfers.md).
 */
TF_EXTERN tf_status tf_upload(tf_client *client, tf_dtype dtype, int rank, const int64_t *shape,
                              const void *data, tf_tensor *out);

/*
 * Creates a tensor of zeros on the device without sending any data (one
 * small request): an input made on the device, an accumulator.
 */
TF_EXTERN tf_status tf_zeros(tf_client *client, tf_dtype dtype, int rank, const int64_t *shape,
                             tf_tensor *out);

/*
 * Copies a tensor's value to a new malloc'd buffer (*data, release with
 * free()) of *bytes bytes, after everything queued before it has run.
 */
TF_EXTERN tf_status tf_download(tf_client *client, tf_tensor tensor, void **data, size_t *bytes);

/*
 * Copies a tensor's value into *buffer, a malloc'd buffer of *capacity bytes
 * owned by the caller (NULL/0 to start). The buffer is grown with realloc only
 * when it is too small, so a loop reading same-size results allocates once.
 */
TF_EXTERN tf_status tf_download_into(tf_client *client, tf_tensor tensor, void **buffer,
                                     size_t *capacity);

/* Frees a tensor, after any queued work that uses it. */
TF_EXTERN tf_status tf_tensor_free(tf_client *client, tf_tensor tensor);

/* Metadata of a tensor this client knows: dtype, rank and shape (shape may be NULL). */
TF_EXTERN tf_status tf_tensor_info(tf_client *client, tf_tensor tensor, tf_dtype *dtype, int *rank,
                                   int64_t shape[TF_MAX_RANK]);

/* Bytes of a tensor's data. */
TF_EXTERN tf_status tf_tensor_bytes(tf_client *client, tf_tensor tensor, size_t *bytes);

#ifdef __cplusplus
}
#endif
#endif
