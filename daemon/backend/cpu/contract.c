/*
 * Contractions on the CPU backend (OP_CONTRACT): the plan of
 * contract-plan.c run with OpenBLAS.
 *
 * A plan's passes are strided gathers, with a sum over the reduced axes and
 * conjugation when asked: a pass that only permutes a dense source goes
 * through the backend's own permute kernel (cpu/layout.c), an identity one
 * is a memcpy, and anything else (diagonals, sums, conj) through the strided
 * gather-reduce below, which accumulates f32 and c64 in double like the
 * reduction kernels. The GEMM is column-major cblas_?gemm with the plan's
 * transpose flags (CblasConjTrans folds a conjugation) and leading
 * dimensions, one call per batch matrix, since OpenBLAS 0.3.21 has no
 * batched GEMM; batches of tiny matrices (an elementwise product is a batch
 * of 1x1 products) run a plain loop instead, which costs less than the
 * calls. Scratch for the passes and the temporary is one allocation made
 * for the call and freed before it returns.
 */
#include <complex.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "daemon/backend/contract-cache.h"
#include "daemon/backend/contract-plan.h"
#include "daemon/backend/cpu/kernels.h"

/* The largest value a blasint can hold, whichever width this OpenBLAS was built with. */
#define BLASINT_MAX_ ((int64_t)(sizeof(blasint) >= 8 ? INT64_MAX : INT_MAX))

/* Up to this many multiply-adds per matrix a batch runs the plain loop rather than OpenBLAS. */
#define SMALL_GEMM 512

/* Alignment of the scratch allocation. */
#define SCRATCH_ALIGN ((size_t)64)

/* Conjugation of each element type (the identity on real ones). */
#define CONJ_R(v) (v)
#define CONJ_Z(v) conj(v)

/*
 * One strided gather-reduce per (element, accumulator) type: walks the kept
 * axes as rows of the last one, and for each element sums the reduced axes
 * with the innermost one as the tight loop.
 */
#define DEFINE_PASS(NAME, T, ACC, CONJ)                                                      \
    static void NAME(const tfd_contract_pass *ps, const T *restrict src, T *restrict dst) {  \
        const int nk = ps->n_keep, nr = ps->n_red;                                           \
        const int64_t inner = nk ? ps->keep_dim[nk - 1] : 1;                                 \
        const int64_t istride = nk ? ps->keep_stride[nk - 1] : 0;                            \
        const int64_t rows = ps->numel / inner;                                              \
        const int64_t rin = nr ? ps->red_dim[nr - 1] : 1;                                    \
        const int64_t rstride = nr ? ps->red_stride[nr - 1] : 0;                             \
        int64_t idx[TF_MAX_RANK] = {0};                                                      \
        int64_t off = 0;                                                                     \
        for (int64_t row = 0; row < rows; row++, dst += inner) {                             \
            for (int64_t j = 0; j < inner; j++) {                                            \
                const T *base = src + off + j * istride;                                     \
                ACC acc = 0;                                                                 \
                int64_t ridx[TF_MAX_RANK] = {0};                                             \
                int64_t roff = 0;                                                            \
                for (int64_t t = 0; t < ps->terms; t += rin) {                               \
                    for (int64_t q = 0; q < rin; q++) acc += (ACC)base[roff + q * rstride];  \
                    for (int ax = nr - 2; ax >= 0; ax--) {                                   \
                        roff += ps->red_stride[ax];                                          \
                        if (++ridx[ax] < ps->red_dim[ax]) break;                             \
                        roff -= ps->red_stride[ax] * ps->red_dim[ax];                        \
                        ridx[ax] = 0;                                                        \
                    }                                                                        \
                }                                                                            \
                dst[j] = ps->conj ? (T)CONJ(acc) : (T)acc;                                   \
            }                                                                                \
            for (int ax = nk - 2; ax >= 0; ax--) {                                           \
                off += ps->keep_stride[ax];                                                  \
                if (++idx[ax] < ps->keep_dim[ax]) break;                                     \
                off -= ps->keep_stride[ax] * ps->keep_dim[ax];                               \
                idx[ax] = 0;                                                                 \
            }                                                                                \
        }                                                                                    \
    }

DEFINE_PASS(pass_f32, float, double, CONJ_R)
DEFINE_PASS(pass_f64, double, double, CONJ_R)
DEFINE_PASS(pass_c64, float complex, double complex, CONJ_Z)
DEFINE_PASS(pass_c128, double complex, double complex, CONJ_Z)

/* Runs one pass from src into dst: permute kernel, memcpy, or the gather-reduce. */
static tf_status run_pass(tfd_backend *be, void *stream, const tfd_contract_pass *ps,
                          tf_dtype dt, const void *src, void *dst, char *msg, size_t msg_len) {
    const size_t esize = tf_dtype_size(dt);
    if (ps->is_identity) {
        memcpy(dst, src, (size_t)ps->numel * esize);
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
        return tfd_cpu_permute(be, stream, &perm, msg, msg_len);
    }
    switch (dt) {
    case TF_F32: pass_f32(ps, src, dst); return TF_OK;
    case TF_F64: pass_f64(ps, src, dst); return TF_OK;
    case TF_C64: pass_c64(ps, src, dst); return TF_OK;
    case TF_C128: pass_c128(ps, src, dst); return TF_OK;
    }
    snprintf(msg, msg_len, "cpu: contract is not served for dtype %s (%d)", tf_dtype_name(dt),
             (int)dt);
    return TF_ERR_DTYPE;
}

/* The CBLAS flag of a plan's read of an operand. */
static CBLAS_TRANSPOSE trans_of(tfd_gemm_op op) {
    return op == TFD_GEMM_N ? CblasNoTrans : op == TFD_GEMM_T ? CblasTrans : CblasConjTrans;
}

/*
 * The plain loop for batches of tiny matrices: element (r, k) of op(X) sits
 * at r * xr + k * xk, element (k, s) of op(Y) at k * yk + s * ys.
 */
#define DEFINE_SMALL_GEMM(NAME, T, ACC, CONJ)                                                   \
    static void NAME(const tfd_contract_gemm *g, const T *x, const T *y, T *c) {                \
        const int64_t xr = g->op_x == TFD_GEMM_N ? 1 : g->ldx;                                  \
        const int64_t xk = g->op_x == TFD_GEMM_N ? g->ldx : 1;                                  \
        const int64_t yk = g->op_y == TFD_GEMM_N ? 1 : g->ldy;                                  \
        const int64_t ys = g->op_y == TFD_GEMM_N ? g->ldy : 1;                                  \
        const int cx = g->op_x == TFD_GEMM_C, cy = g->op_y == TFD_GEMM_C;                       \
        for (int64_t b = 0; b < g->batch; b++) {                                                \
            const T *xb = x + b * g->stride_x, *yb = y + b * g->stride_y;                       \
            T *cb = c + b * g->stride_c;                                                        \
            for (int64_t s = 0; s < g->cols; s++)                                               \
                for (int64_t r = 0; r < g->rows; r++) {                                         \
                    ACC acc = 0;                                                                \
                    for (int64_t k = 0; k < g->depth; k++) {                                    \
                        ACC u = (ACC)xb[r * xr + k * xk], v = (ACC)yb[k * yk + s * ys];         \
                        acc += (cx ? CONJ(u) : u) * (cy ? CONJ(v) : v);                         \
                    }                                                                           \
                    cb[r + s * g->ldc] = (T)acc;                                                \
                }                                                                               \
        }                                                                                       \
    }

DEFINE_SMALL_GEMM(small_f32, float, double, CONJ_R)
DEFINE_SMALL_GEMM(small_f64, double, double, CONJ_R)
DEFINE_SMALL_GEMM(small_c64, float complex, double complex, CONJ_Z)
DEFINE_SMALL_GEMM(small_c128, double complex, double complex, CONJ_Z)

/* One OpenBLAS call per batch matrix; CALL is the type's GEMM on the current x, y and c. */
#define GEMM_LOOP(T, CALL)                                                                   \
    do {                                                                                     \
        const T *x = xp, *y = yp;                                                            \
        T *c = cp;                                                                           \
        for (int64_t b = 0; b < g->batch;                                                    \
             b++, x += g->stride_x, y += g->stride_y, c += g->stride_c)                      \
            CALL;                                                                            \
    } while (0)

/* The plan's GEMM on operands xp and yp into cp. */
static tf_status run_gemm(const tfd_contract_gemm *g, tf_dtype dt, const void *xp,
                          const void *yp, void *cp, char *msg, size_t msg_len) {
    if (g->rows <= SMALL_GEMM && g->cols <= SMALL_GEMM && g->depth <= SMALL_GEMM &&
        g->rows * g->cols * g->depth <= SMALL_GEMM) {
        switch (dt) {
        case TF_F32: small_f32(g, xp, yp, cp); return TF_OK;
        case TF_F64: small_f64(g, xp, yp, cp); return TF_OK;
        case TF_C64: small_c64(g, xp, yp, cp); return TF_OK;
        case TF_C128: small_c128(g, xp, yp, cp); return TF_OK;
        }
    }
    if (g->rows > BLASINT_MAX_ || g->cols > BLASINT_MAX_ || g->depth > BLASINT_MAX_ ||
        g->ldx > BLASINT_MAX_ || g->ldy > BLASINT_MAX_ || g->ldc > BLASINT_MAX_) {
        snprintf(msg, msg_len,
                 "cpu: contract GEMM of %lld x %lld x %lld exceeds OpenBLAS's integer range",
                 (long long)g->rows, (long long)g->cols, (long long)g->depth);
        return TF_ERR_UNSUPPORTED;
    }
    const blasint R = (blasint)g->rows, S = (blasint)g->cols, K = (blasint)g->depth;
    const blasint LX = (blasint)g->ldx, LY = (blasint)g->ldy, LC = (blasint)g->ldc;
    const CBLAS_TRANSPOSE tx = trans_of(g->op_x), ty = trans_of(g->op_y);
    switch (dt) {
    case TF_F32:
        GEMM_LOOP(float, cblas_sgemm(CblasColMajor, tx, ty, R, S, K, 1.0f, x, LX, y, LY, 0.0f, c,
                                     LC));
        return TF_OK;
    case TF_F64:
        GEMM_LOOP(double, cblas_dgemm(CblasColMajor, tx, ty, R, S, K, 1.0, x, LX, y, LY, 0.0, c,
                                      LC));
        return TF_OK;
    case TF_C64: {
        const float complex one = 1.0f, zero = 0.0f;
        GEMM_LOOP(float complex, cblas_cgemm(CblasColMajor, tx, ty, R, S, K, &one, x, LX, y, LY,
                                             &zero, c, LC));
        return TF_OK;
    }
    case TF_C128: {
        const double complex one = 1.0, zero = 0.0;
        GEMM_LOOP(double complex, cblas_zgemm(CblasColMajor, tx, ty, R, S, K, &one, x, LX, y,
                                              LY, &zero, c, LC));
        return TF_OK;
    }
    }
    snprintf(msg, msg_len, "cpu: contract is not served for dtype %s (%d)", tf_dtype_name(dt),
             (int)dt);
    return TF_ERR_DTYPE;
}

/* Plans (through the daemon-wide cache), then runs the passes and the GEMM on scratch of this call. */
tf_status tfd_cpu_contract(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                           size_t msg_len) {
    tfd_contract_plan plan;
    tf_status st = tfd_contract_plan_of(op, &plan, msg, msg_len);
    if (st != TF_OK) return st;
    const tf_dtype dt = op->out.dtype;
    const size_t esize = tf_dtype_size(dt);
    if (esize == 0) return tfd_cpu_dtype_error(op, dt, msg, msg_len);
    if (plan.n_inputs == 1)
        return run_pass(be, stream, &plan.post, dt, op->in[0].data, op->out.data, msg, msg_len);

    const size_t scratch_bytes = (size_t)tfd_contract_plan_scratch(&plan) * esize;
    char *scratch = NULL;
    if (scratch_bytes > 0) {
        scratch = aligned_alloc(SCRATCH_ALIGN,
                                (scratch_bytes + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN);
        if (scratch == NULL) {
            snprintf(msg, msg_len, "cpu: contract needs %zu bytes of scratch and none are left",
                     scratch_bytes);
            return TF_ERR_NO_MEMORY;
        }
    }
    const void *operand[2] = {op->in[0].data, op->in[1].data};
    char *next = scratch;
    for (int i = 0; i < 2 && st == TF_OK; i++) {
        if (!plan.pre[i].active) continue;
        st = run_pass(be, stream, &plan.pre[i], dt, op->in[i].data, next, msg, msg_len);
        operand[i] = next;
        next += (size_t)plan.pre[i].numel * esize;
    }
    void *product = plan.to_temp ? (void *)next : op->out.data;
    if (st == TF_OK)
        st = run_gemm(&plan.gemm, dt, operand[plan.gemm.x], operand[plan.gemm.y], product, msg,
                      msg_len);
    if (st == TF_OK && plan.to_temp)
        st = run_pass(be, stream, &plan.post, dt, product, op->out.data, msg, msg_len);
    free(scratch);
    return st;
}
