/*
 * State shared by the C files of the CUDA backend (cuda-backend.c owns it,
 * cuda-matmul.c reads a stream's cuBLAS handle). Private to daemon/backend;
 * needs the CUDA headers, so the rest of the daemon includes cuda-backend.h.
 */
#ifndef TENFERRO_DAEMON_CUDA_INTERNAL_H
#define TENFERRO_DAEMON_CUDA_INTERNAL_H

#include <stddef.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "daemon/backend/backend.h"

/* A logical stream's native state: one CUDA stream and the cuBLAS handle bound to it. */
typedef struct tfd_cuda_stream {
    cudaStream_t stream;
    cublasHandle_t blas;
    int priority;                 /* the clamped CUDA priority it was created with */
    struct tfd_cuda_stream *next; /* free-list link while pooled */
} tfd_cuda_stream;

/*
 * Batched row-major matrix product through the stream's cuBLAS handle
 * (cuda-matmul.c). The caller has selected the device for this thread.
 */
tf_status tfd_cuda_matmul(tfd_cuda_stream *s, const tfd_op *op, char *msg, size_t msg_len);

#endif
