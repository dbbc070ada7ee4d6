/*
 * Plans of contractions (OP_CONTRACT), shared by the CPU and CUDA backends.
 *
 * A plan says how one contraction runs as at most three kinds of step, in
 * element strides and counts only (no pointers, no dtype arithmetic), so the
 * same plan serves every backend and can be cached:
 *
 *   pre[i]  a pass over input i into scratch: diagonals read through summed
 *           strides, labels found only in that input summed out, the result
 *           laid out for the GEMM, conjugated when the GEMM cannot fold it;
 *   gemm    one strided-batched, column-major GEMM over batch (B), rows,
 *           columns and depth (the contracted labels, K), reading each input
 *           in place (permutation folded into a transpose flag and a leading
 *           dimension) or from its pass, and writing the output in place or
 *           a temporary;
 *   post    the one pass of a unary contraction (permute, diagonal, trace,
 *           sum), or the permutation of the GEMM's temporary into the output.
 *
 * docs/einsum.md ("daemon side") states which layouts need which copy.
 */
#ifndef TENFERRO_DAEMON_CONTRACT_PLAN_H
#define TENFERRO_DAEMON_CONTRACT_PLAN_H

#include <stdint.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"

/* What a pass reads: an input of the operation, or the GEMM's temporary. */
typedef enum tfd_pass_src {
    TFD_PASS_INPUT0 = 0,
    TFD_PASS_INPUT1 = 1,
    TFD_PASS_TEMP = 2,
} tfd_pass_src;

/*
 * One pass: dst (dense, row-major over the kept axes in order) gets, for
 * every kept index i, the sum over the reduced indices r of
 * src[sum_j i_j * keep_stride[j] + sum_q r_q * red_stride[q]], conjugated
 * when conj is set. Adjacent axes are merged, size-1 axes dropped.
 */
typedef struct tfd_contract_pass {
    int active;
    tfd_pass_src src;
    int n_keep, n_red;
    int64_t keep_dim[TF_MAX_RANK], keep_stride[TF_MAX_RANK];
    int64_t red_dim[TF_MAX_RANK], red_stride[TF_MAX_RANK];
    int conj;
    int64_t numel; /* elements written: the product of keep_dim */
    int64_t terms; /* elements summed into each: the product of red_dim */
    /*
     * Set when the pass only reorders a dense source (no reduction, no conj,
     * no diagonal): the source read as a tensor of perm_shape, permuted by
     * perm (output axis j is source axis perm[j]); is_identity when perm keeps
     * the order (a plain copy).
     */
    int is_permutation, is_identity;
    int perm_rank;
    int64_t perm_shape[TF_MAX_RANK];
    int64_t perm[TF_MAX_RANK];
} tfd_contract_pass;

/* How the GEMM reads an operand: as stored, transposed, or conjugate-transposed. */
typedef enum tfd_gemm_op {
    TFD_GEMM_N = 0,
    TFD_GEMM_T = 1,
    TFD_GEMM_C = 2,
} tfd_gemm_op;

/*
 * For each of `batch` matrices (offsets b * stride_*):
 *   C (rows x cols, column-major, ldc) = op_x(X) (rows x depth) * op_y(Y) (depth x cols)
 * where X is operand `x` and Y operand `y` (0: input 0 or its pass, 1: input 1 or its
 * pass), and C the output or the temporary.
 */
typedef struct tfd_contract_gemm {
    int x, y;
    tfd_gemm_op op_x, op_y;
    int64_t rows, cols, depth, batch;
    int64_t ldx, ldy, ldc;
    int64_t stride_x, stride_y, stride_c;
} tfd_contract_gemm;

/* The whole plan of one contraction. */
typedef struct tfd_contract_plan {
    int n_inputs;
    tfd_contract_pass pre[2]; /* binary: input i is read from scratch when pre[i].active */
    tfd_contract_gemm gemm;   /* binary */
    int to_temp;              /* binary: the GEMM writes a temporary, post permutes it out */
    int64_t temp_numel;
    tfd_contract_pass post; /* unary: the one pass from input 0; binary: temp -> output */
    int64_t out_numel;
    int64_t copied; /* binary: elements the passes write besides the GEMM; 0 = all in place */
} tfd_contract_plan;

/*
 * Checks the contraction against its inputs' metadata (tf__infer_contract)
 * and plans it. Conjugation is dropped for real dtypes. Returns the rules'
 * status and message when they refuse it.
 */
tf_status tfd_contract_plan_build(const tf__contraction *c, const tf__meta *in,
                                  tfd_contract_plan *plan, char *msg, size_t msg_len);

/* Scratch elements a plan needs: pre[0], pre[1] and the temporary. */
int64_t tfd_contract_plan_scratch(const tfd_contract_plan *plan);

#endif
