/*
 * Status codes of tenferrod and libtenferro-client.
 *
 * One X-macro list generates the enum, tf_strerror() and tf_status_name(), so a
 * code, its name and its default message can never drift apart. Numbers are
 * stable: a code is only ever appended, never renumbered or removed.
 */
#ifndef TENFERRO_STATUS_H
#define TENFERRO_STATUS_H

#include "tenferro/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, number, default message). Append only. */
#define TF_STATUS_MAP(X)                                                                          \
    X(TF_OK, 0, "success")                                                                        \
    X(TF_ERR_INVALID_ARGUMENT, 1, "invalid argument")                                             \
    X(TF_ERR_PROTOCOL, 2, "protocol error: malformed or unexpected frame")                        \
    X(TF_ERR_VERSION, 3, "protocol version mismatch: upgrade the client or the daemon")           \
    X(TF_ERR_DISCONNECTED, 4, "not connected to tenferrod: the daemon went away or closed the connection") \
    X(TF_ERR_UNKNOWN_HANDLE, 5, "unknown handle: it was never created on this connection or was freed") \
    X(TF_ERR_SHAPE, 6, "shape mismatch")                                                          \
    X(TF_ERR_DTYPE, 7, "dtype mismatch or dtype not served by this operation")                    \
    X(TF_ERR_AXIS, 8, "axis out of range or repeated")                                            \
    X(TF_ERR_REENTERED, 9, "session re-entered: this connection already holds or is inside a session") \
    X(TF_ERR_CONTENDED, 10, "execution domain is held by another client's session")               \
    X(TF_ERR_TIMEOUT, 11, "deadline passed before the execution domain became free")              \
    X(TF_ERR_BUSY, 12, "resource busy: in flight, unsubmitted or checked out")                    \
    X(TF_ERR_QUOTA, 13, "quota exceeded")                                                         \
    X(TF_ERR_NO_MEMORY, 14, "out of memory on the device or the host")                            \
    X(TF_ERR_UNSUPPORTED, 15, "operation, dtype or route not supported")                          \
    X(TF_ERR_DEVICE, 16, "device error")                                                          \
    X(TF_ERR_SESSION_CLOSED, 17, "session is closed or was never opened")                         \
    X(TF_ERR_INTERNAL, 18, "internal error in tenferrod: please report it")                       \
    X(TF_ERR_PERMISSION, 19, "permission denied")                                                 \
    X(TF_ERR_TOO_MANY_CLIENTS, 20, "too many clients connected to tenferrod")                     \
    X(TF_ERR_IO, 21, "system call failed")                                                        \
    X(TF_ERR_BAD_SHAPE, 22, "invalid shape: every dimension must be at least 1 and rank at most 8") \
    X(TF_ERR_BATCH_FAILED, 23, "an earlier operation of this batch failed, so this one was not run") \
    X(TF_ERR_PEER, 24, "the other daemon of a device-to-device copy refused it, failed or went away") \
    X(TF_ERR_NOT_CONVERGED, 25, "a linear-algebra solver did not converge")                         \
    X(TF_ERR_SINGULAR, 26, "the matrix is singular")                                               \
    X(TF_ERR_NOT_POSITIVE_DEFINITE, 27, "the matrix is not positive definite")                     \
    X(TF_ERR_NOT_FINITE, 28, "the input holds nan or inf")

typedef enum tf_status {
#define TF_STATUS_ENUM_(name, num, msg) name = num,
    TF_STATUS_MAP(TF_STATUS_ENUM_)
#undef TF_STATUS_ENUM_
} tf_status;

/* The default human-readable message of a status; never NULL. */
TF_EXTERN const char *tf_strerror(tf_status status);

/* The symbolic name of a status ("TF_ERR_CONTENDED"); never NULL. */
TF_EXTERN const char *tf_status_name(tf_status status);

#ifdef __cplusplus
}
#endif
#endif
