/*
 * Check macros of the CUDA backend, in the NCCL style.
 *
 * Every CUDA runtime and cuBLAS call of the backend goes through one of these
 * macros. A failure is mapped to a tf_status (out of memory, invalid argument,
 * or a device error), a message "<call> failed at <file>:<line>: <reason>" is
 * written into the caller's message buffer, and control jumps to a cleanup
 * label (the _GOTO forms) or returns the status (the _RET forms). Errors that
 * leave the CUDA context unusable (a kernel fault) are also recorded in the
 * backend's poisoned flag, so the daemon can report that and exit instead of
 * failing every later call with a puzzling message. Private to daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CUDA_CHECK_H
#define TENFERRO_DAEMON_CUDA_CHECK_H

#include <stddef.h>
#include <stdio.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "tenferro/status.h"

/*
 * Maps a failed CUDA call to a status, records a sticky error, clears the
 * runtime's last-error slot and writes the message (msg may be NULL); defined
 * in cuda/backend.c.
 */
tf_status tfd_cuda_fail(cudaError_t err, const char *call, const char *file, int line, char *msg,
                        size_t msg_len);

/* The same for a failed cuBLAS call; defined in cuda/backend.c. */
tf_status tfd_cublas_fail(cublasStatus_t st, const char *call, const char *file, int line,
                          char *msg, size_t msg_len);

/* Runs a CUDA call; on failure stores the status in `status` and jumps to `label`. */
#define TFD_CUDA_CHECK_GOTO(call, status, msg, msg_len, label)                             \
    do {                                                                                   \
        cudaError_t tfd_e_ = (call);                                                       \
        if (tfd_e_ != cudaSuccess) {                                                       \
            (status) = tfd_cuda_fail(tfd_e_, #call, __FILE__, __LINE__, (msg), (msg_len)); \
            goto label;                                                                    \
        }                                                                                  \
    } while (0)

/* Runs a CUDA call; on failure returns the mapped status from the enclosing function. */
#define TFD_CUDA_CHECK_RET(call, msg, msg_len)                                             \
    do {                                                                                   \
        cudaError_t tfd_e_ = (call);                                                       \
        if (tfd_e_ != cudaSuccess)                                                         \
            return tfd_cuda_fail(tfd_e_, #call, __FILE__, __LINE__, (msg), (msg_len));     \
    } while (0)

/* Runs a cuBLAS call; on failure stores the status in `status` and jumps to `label`. */
#define TFD_CUBLAS_CHECK_GOTO(call, status, msg, msg_len, label)                              \
    do {                                                                                      \
        cublasStatus_t tfd_s_ = (call);                                                       \
        if (tfd_s_ != CUBLAS_STATUS_SUCCESS) {                                                \
            (status) = tfd_cublas_fail(tfd_s_, #call, __FILE__, __LINE__, (msg), (msg_len)); \
            goto label;                                                                       \
        }                                                                                     \
    } while (0)

/* Runs a cuBLAS call; on failure returns the mapped status from the enclosing function. */
#define TFD_CUBLAS_CHECK_RET(call, msg, msg_len)                                          \
    do {                                                                                  \
        cublasStatus_t tfd_s_ = (call);                                                   \
        if (tfd_s_ != CUBLAS_STATUS_SUCCESS)                                              \
            return tfd_cublas_fail(tfd_s_, #call, __FILE__, __LINE__, (msg), (msg_len));  \
    } while (0)

#endif
