/*
 * Contractions on the CUDA backend (OP_CONTRACT): the plan of
 * contract-plan.c run on the logical stream.
 *
 * Each pass takes the cheapest route the plan allows: a device-to-device
 * copy when it keeps the order, the backend's tiled permute kernel
 * (cuda/kernels.cu) when it only reorders a dense source, and the
 * gather-reduce kernel (cuda/contract-kernels.cu) for diagonals, sums and
 * conjugation. The GEMM is one cublas?gemm, or cublas?gemmStridedBatched
 * for a batch, on the stream's own cuBLAS handle, with the plan's operations
 * (CUBLAS_OP_C folds a conjugation), leading dimensions and batch strides;
 * cuBLAS is column-major, which is how plans are written. Scratch for the
 * passes and the temporary is one block of the stream's cache
 * (cuda/alloc.c), freed on the same stream right after the launches that
 * use it, so the next owner of that block is ordered after them. Nothing
 * here waits for the device. cuBLAS takes dimensions, leading dimensions
 * and the batch count as int: larger ones are refused (TF_ERR_UNSUPPORTED).
 */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cuComplex.h>
#include <cublas_v2.h>

#include "daemon/backend/contract-cache.h"
#include "daemon/backend/contract-plan.h"
#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/contract-kernels.h"
#include "daemon/backend/cuda/internal.h"
#include "daemon/backend/cuda/kernels.h"

/* Runs one pass from src into dst on the stream: a copy, the permute kernel, or the gather. */
static tf_status run_pass(tfd_cuda_stream *s, int sm_count, const tfd_contract_pass *ps,
                          tf_dtype dt, const void *src, void *dst, char *msg, size_t msg_len) {
    if (ps->is_identity) {
        TFD_CUDA_CHECK_RET(cudaMemcpyAsync(dst, src, (size_t)ps->numel * tf_dtype_size(dt),
                                           cudaMemcpyDeviceToDevice, s->stream),
                           msg, msg_len);
        return TF_OK;
    }
    if (ps->is_permutation) {
        tfd_op perm;
        memset(&perm, 0, sizeof perm);
        perm.kind = TF__OP_PERMUTE;
        perm.n_inputs = 1;
        perm.in[0].dtype = perm.out.dtype = dt;
        perm.in[0].rank = perm.out.rank = perm.n_params = ps->perm_rank;
        for (int j = 0; j < ps->perm_rank; j++) {
            perm.in[0].shape[j] = ps->perm_shape[j];
            perm.out.shape[j] = ps->keep_dim[j];
            perm.params[j] = ps->perm[j];
        }
        perm.in[0].numel = perm.out.numel = ps->numel;
        perm.in[0].data = (void *)src;
        perm.out.data = dst;
        TFD_CUDA_CHECK_RET(tfd_cuda_launch_permute(&perm, sm_count, s->stream), msg, msg_len);
        return TF_OK;
    }
    TFD_CUDA_CHECK_RET(tfd_cuda_launch_contract_pass(ps, dt, src, dst, sm_count, s->stream), msg,
                       msg_len);
    return TF_OK;
}

/* The cuBLAS operation of a plan's read of an operand. */
static cublasOperation_t op_of(tfd_gemm_op op) {
    return op == TFD_GEMM_N ? CUBLAS_OP_N : op == TFD_GEMM_T ? CUBLAS_OP_T : CUBLAS_OP_C;
}

/*
 * Issues one GEMM, strided-batched when there is a batch. TYPE is the cuBLAS
 * letter (S, D, C, Z), T the element type, ONE and ZERO its coefficients.
 */
#define GEMM_CALL(TYPE, T, ONE, ZERO)                                                             \
    do {                                                                                          \
        const T one = ONE, zero = ZERO;                                                           \
        const T *X = x, *Y = y;                                                                   \
        T *C = c;                                                                                 \
        if (B == 1)                                                                               \
            TFD_CUBLAS_CHECK_RET(cublas##TYPE##gemm(h, ox, oy, R, S, K, &one, X, LX, Y, LY, &zero,   \
                                                    C, LC),                                       \
                                 msg, msg_len);                                                   \
        else                                                                                      \
            TFD_CUBLAS_CHECK_RET(cublas##TYPE##gemmStridedBatched(h, ox, oy, R, S, K, &one, X, LX,   \
                                                                  g->stride_x, Y, LY,             \
                                                                  g->stride_y, &zero, C, LC,      \
                                                                  g->stride_c, B),                \
                                 msg, msg_len);                                                   \
    } while (0)

/* The plan's GEMM on operands x and y into c, on the stream's cuBLAS handle. */
static tf_status run_gemm(tfd_cuda_stream *s, const tfd_contract_gemm *g, tf_dtype dt,
                          const void *x, const void *y, void *c, char *msg, size_t msg_len) {
    if (g->rows > INT_MAX || g->cols > INT_MAX || g->depth > INT_MAX || g->batch > INT_MAX ||
        g->ldx > INT_MAX || g->ldy > INT_MAX || g->ldc > INT_MAX) {
        snprintf(msg, msg_len,
                 "cuda: contract GEMM of %lld x %lld x %lld (batch %lld) exceeds cuBLAS's "
                 "integer range",
                 (long long)g->rows, (long long)g->cols, (long long)g->depth,
                 (long long)g->batch);
        return TF_ERR_UNSUPPORTED;
    }
    const int R = (int)g->rows, S = (int)g->cols, K = (int)g->depth, B = (int)g->batch;
    const int LX = (int)g->ldx, LY = (int)g->ldy, LC = (int)g->ldc;
    const cublasOperation_t ox = op_of(g->op_x), oy = op_of(g->op_y);
    cublasHandle_t h = s->blas;
    switch (dt) {
    case TF_F32: GEMM_CALL(S, float, 1.0f, 0.0f); return TF_OK;
    case TF_F64: GEMM_CALL(D, double, 1.0, 0.0); return TF_OK;
    case TF_C64: GEMM_CALL(C, cuComplex, make_cuComplex(1.0f, 0.0f), make_cuComplex(0.0f, 0.0f));
        return TF_OK;
    case TF_C128:
        GEMM_CALL(Z, cuDoubleComplex, make_cuDoubleComplex(1.0, 0.0),
                  make_cuDoubleComplex(0.0, 0.0));
        return TF_OK;
    }
    snprintf(msg, msg_len, "cuda: contract is not served for dtype %s (%d)", tf_dtype_name(dt),
             (int)dt);
    return TF_ERR_DTYPE;
}

tf_status tfd_cuda_contract(tfd_cuda_stream *s, int sm_count, const tfd_op *op, char *msg,
                            size_t msg_len) {
    tfd_contract_plan plan;
    tf_status st = tfd_contract_plan_of(op, &plan, msg, msg_len);
    if (st != TF_OK) return st;
    const tf_dtype dt = op->out.dtype;
    const size_t esize = tf_dtype_size(dt);
    if (plan.n_inputs == 1)
        return run_pass(s, sm_count, &plan.post, dt, op->in[0].data, op->out.data, msg, msg_len);

    const size_t scratch_bytes = (size_t)tfd_contract_plan_scratch(&plan) * esize;
    char *scratch = NULL;
    if (scratch_bytes > 0) {
        st = tfd_cuda_cache_alloc(s, scratch_bytes, (void **)&scratch, msg, msg_len);
        if (st != TF_OK) return st;
    }
    const void *operand[2] = {op->in[0].data, op->in[1].data};
    char *next = scratch;
    for (int i = 0; i < 2 && st == TF_OK; i++) {
        if (!plan.pre[i].active) continue;
        st = run_pass(s, sm_count, &plan.pre[i], dt, op->in[i].data, next, msg, msg_len);
        operand[i] = next;
        next += (size_t)plan.pre[i].numel * esize;
    }
    void *product = plan.to_temp ? (void *)next : op->out.data;
    if (st == TF_OK)
        st = run_gemm(s, &plan.gemm, dt, operand[plan.gemm.x], operand[plan.gemm.y], product, msg,
                      msg_len);
    if (st == TF_OK && plan.to_temp)
        st = run_pass(s, sm_count, &plan.post, dt, product, op->out.data, msg, msg_len);
    /* Stream-ordered: whoever takes the block next runs after what was enqueued here. */
    if (scratch) tfd_cuda_cache_free(s, scratch, scratch_bytes);
    return st;
}
