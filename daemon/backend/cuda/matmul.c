/*
 * Matrix product of the CUDA backend, through cuBLAS.
 *
 * a [..., m, k] times b [..., k, n] gives out [..., m, n], all row-major with
 * identical batch dimensions, as on the CPU. cuBLAS is column-major, and a
 * row-major matrix read column-major is its transpose, so the product is
 * computed as C^T = B^T A^T: gemm(N, N, n, m, k, B, ldb=n, A, lda=k, C, ldc=n)
 * writes exactly the row-major C. Rank > 2 runs one strided-batched call with
 * strides k*n (B), m*k (A) and m*n (C). Everything is enqueued on the logical
 * stream through its own cuBLAS handle, with host-side coefficients 1 and 0.
 * cuBLAS takes dimensions and the batch count as int, so larger ones are
 * refused rather than truncated (as the CPU backend does for OpenBLAS).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuComplex.h>

#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/internal.h"

/* Re-checks the geometry cuBLAS will read memory with, then issues one (batched) GEMM. */
tf_status tfd_cuda_matmul(tfd_cuda_stream *s, const tfd_op *op, char *msg, size_t msg_len) {
    const tfd_tensor_view *a = &op->in[0], *b = &op->in[1], *c = &op->out;
    const int r = a->rank;
    if (r < 2 || r > TF_MAX_RANK || b->rank != r || c->rank != r) {
        snprintf(msg, msg_len,
                 "cuda: matmul needs inputs and output of one rank >= 2, got %d, %d and %d", r,
                 b->rank, c->rank);
        return TF_ERR_SHAPE;
    }
    if (b->dtype != a->dtype || c->dtype != a->dtype) {
        snprintf(msg, msg_len, "cuda: matmul operands and output differ in dtype (%s, %s, %s)",
                 tf_dtype_name(a->dtype), tf_dtype_name(b->dtype), tf_dtype_name(c->dtype));
        return TF_ERR_DTYPE;
    }
    const int64_t m = a->shape[r - 2], k = a->shape[r - 1], n = b->shape[r - 1];
    int64_t batch = 1;
    for (int i = 0; i < r - 2; i++) {
        if (b->shape[i] != a->shape[i] || c->shape[i] != a->shape[i]) {
            snprintf(msg, msg_len, "cuda: matmul batch dimension %d differs (%lld, %lld, %lld)",
                     i, (long long)a->shape[i], (long long)b->shape[i], (long long)c->shape[i]);
            return TF_ERR_SHAPE;
        }
        batch *= a->shape[i];
    }
    if (b->shape[r - 2] != k || c->shape[r - 2] != m || c->shape[r - 1] != n) {
        snprintf(msg, msg_len,
                 "cuda: matmul operands and output do not agree ([%lld, %lld] x [%lld, %lld] -> "
                 "[%lld, %lld])",
                 (long long)m, (long long)k, (long long)b->shape[r - 2], (long long)n,
                 (long long)c->shape[r - 2], (long long)c->shape[r - 1]);
        return TF_ERR_SHAPE;
    }
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX) {
        snprintf(msg, msg_len,
                 "cuda: matmul dimensions m=%lld n=%lld k=%lld batch=%lld exceed cuBLAS's "
                 "integer range",
                 (long long)m, (long long)n, (long long)k, (long long)batch);
        return TF_ERR_UNSUPPORTED;
    }
    const int M = (int)m, N = (int)n, K = (int)k, B = (int)batch;
    const long long sa = (long long)(m * k), sb = (long long)(k * n), sc = (long long)(m * n);
    const cublasOperation_t nn = CUBLAS_OP_N;
    cublasHandle_t h = s->blas;
    switch (a->dtype) {
    case TF_F32: {
        const float one = 1.0f, zero = 0.0f;
        const float *A = a->data, *Bm = b->data;
        float *C = c->data;
        if (B == 1)
            TFD_CUBLAS_CHECK_RET(cublasSgemm(h, nn, nn, N, M, K, &one, Bm, N, A, K, &zero, C, N),
                                 msg, msg_len);
        else
            TFD_CUBLAS_CHECK_RET(cublasSgemmStridedBatched(h, nn, nn, N, M, K, &one, Bm, N, sb, A,
                                                           K, sa, &zero, C, N, sc, B),
                                 msg, msg_len);
        return TF_OK;
    }
    case TF_F64: {
        const double one = 1.0, zero = 0.0;
        const double *A = a->data, *Bm = b->data;
        double *C = c->data;
        if (B == 1)
            TFD_CUBLAS_CHECK_RET(cublasDgemm(h, nn, nn, N, M, K, &one, Bm, N, A, K, &zero, C, N),
                                 msg, msg_len);
        else
            TFD_CUBLAS_CHECK_RET(cublasDgemmStridedBatched(h, nn, nn, N, M, K, &one, Bm, N, sb, A,
                                                           K, sa, &zero, C, N, sc, B),
                                 msg, msg_len);
        return TF_OK;
    }
    case TF_C64: {
        const cuComplex one = {1.0f, 0.0f}, zero = {0.0f, 0.0f};
        const cuComplex *A = a->data, *Bm = b->data;
        cuComplex *C = c->data;
        if (B == 1)
            TFD_CUBLAS_CHECK_RET(cublasCgemm(h, nn, nn, N, M, K, &one, Bm, N, A, K, &zero, C, N),
                                 msg, msg_len);
        else
            TFD_CUBLAS_CHECK_RET(cublasCgemmStridedBatched(h, nn, nn, N, M, K, &one, Bm, N, sb, A,
                                                           K, sa, &zero, C, N, sc, B),
                                 msg, msg_len);
        return TF_OK;
    }
    case TF_C128: {
        const cuDoubleComplex one = {1.0, 0.0}, zero = {0.0, 0.0};
        const cuDoubleComplex *A = a->data, *Bm = b->data;
        cuDoubleComplex *C = c->data;
        if (B == 1)
            TFD_CUBLAS_CHECK_RET(cublasZgemm(h, nn, nn, N, M, K, &one, Bm, N, A, K, &zero, C, N),
                                 msg, msg_len);
        else
            TFD_CUBLAS_CHECK_RET(cublasZgemmStridedBatched(h, nn, nn, N, M, K, &one, Bm, N, sb, A,
                                                           K, sa, &zero, C, N, sc, B),
                                 msg, msg_len);
        return TF_OK;
    }
    }
    snprintf(msg, msg_len, "cuda: matmul is not served for dtype %s (%d)", tf_dtype_name(a->dtype),
             (int)a->dtype);
    return TF_ERR_DTYPE;
}
