/*
 * Matrix product kernel of the CPU backend, through OpenBLAS.
 *
 * a [..., m, k] times b [..., k, n] gives out [..., m, n]; the leading
 * (batch) dimensions are identical for a and b, and every batch element is
 * one row-major GEMM on pointer offsets into the contiguous tensors. OpenBLAS
 * takes dimensions as blasint, which may be 32-bit, so dimensions beyond its
 * range are refused rather than truncated.
 */
#include <complex.h>
#include <limits.h>
#include <stdint.h>

#include <cblas.h>

#include "daemon/backend/cpu/kernels.h"

/* The largest value a blasint can hold, whichever width this OpenBLAS was built with. */
#define BLASINT_MAX_ ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))

/* One GEMM per batch element; CALL is the type's GEMM on the current pointers a, b and c. */
#define BATCH_LOOP(T, CALL)                                                      \
    do {                                                                         \
        const T *a = op->in[0].data;                                             \
        const T *b = op->in[1].data;                                             \
        T *c = op->out.data;                                                     \
        for (int64_t i = 0; i < batch; i++, a += m * k, b += k * n, c += m * n) \
            CALL;                                                                \
    } while (0)

/* Re-checks the geometry before OpenBLAS reads memory with it, then loops over the batch. */
tf_status tfd_cpu_matmul(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len) {
    (void)be;
    (void)stream;
    const int r = op->in[0].rank;
    if (r < 2 || r > TF_MAX_RANK || op->in[1].rank != r || op->out.rank != r) {
        snprintf(msg, msg_len,
                 "cpu: matmul needs inputs and output of one rank >= 2, got %d, %d and %d", r,
                 op->in[1].rank, op->out.rank);
        return TF_ERR_SHAPE;
    }
    const int64_t m = op->in[0].shape[r - 2], k = op->in[0].shape[r - 1];
    const int64_t n = op->in[1].shape[r - 1];
    int64_t batch = 1;
    for (int i = 0; i < r - 2; i++) batch *= op->in[0].shape[i];
    int64_t out_numel;
    if (op->in[1].shape[r - 2] != k || __builtin_mul_overflow(batch, m, &out_numel) ||
        __builtin_mul_overflow(out_numel, n, &out_numel) || out_numel != op->out.numel) {
        snprintf(msg, msg_len,
                 "cpu: matmul operands and output do not agree (inner %lld vs %lld, "
                 "output %lld elements)",
                 (long long)k, (long long)op->in[1].shape[r - 2], (long long)op->out.numel);
        return TF_ERR_SHAPE;
    }
    if (m > BLASINT_MAX_ || n > BLASINT_MAX_ || k > BLASINT_MAX_) {
        snprintf(msg, msg_len,
                 "cpu: matmul dimensions m=%lld n=%lld k=%lld exceed OpenBLAS's integer range",
                 (long long)m, (long long)n, (long long)k);
        return TF_ERR_UNSUPPORTED;
    }
    const blasint M = (blasint)m, N = (blasint)n, K = (blasint)k;
    switch (op->in[0].dtype) {
    case TF_F32:
        BATCH_LOOP(float, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f,
                                      a, K, b, N, 0.0f, c, N));
        return TF_OK;
    case TF_F64:
        BATCH_LOOP(double, cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0,
                                       a, K, b, N, 0.0, c, N));
        return TF_OK;
    case TF_C64: {
        const float complex one = 1.0f, zero = 0.0f;
        BATCH_LOOP(float complex, cblas_cgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K,
                                              &one, a, K, b, N, &zero, c, N));
        return TF_OK;
    }
    case TF_C128: {
        const double complex one = 1.0, zero = 0.0;
        BATCH_LOOP(double complex, cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N,
                                               K, &one, a, K, b, N, &zero, c, N));
        return TF_OK;
    }
    }
    return tfd_cpu_dtype_error(op, op->in[0].dtype, msg, msg_len);
}
