/*
 * The pairwise order of an einsum (einsum-path.c), its lowering to OP_CONTRACT
 * descriptors, and the report tf_einsum_path hands out (einsum-report.c).
 * Labels are those of common/einsum.h; a set of labels is a 64-bit mask.
 */
#ifndef TENFERRO_CLIENT_EINSUM_PATH_H
#define TENFERRO_CLIENT_EINSUM_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "common/einsum.h"
#include "common/ops.h"
#include "tenferro/einsum.h"

/* One pairwise contraction (or the one unary contraction of a single operand). */
typedef struct tf__einsum_step {
    int a, b;          /* 0..n-1: the operands; n + k: the result of step k; b = -1: unary */
    uint64_t labels;   /* the distinct labels of its result */
    uint64_t loops;    /* every label it runs over */
    double flops;
    int64_t elements;  /* of its result */
} tf__einsum_step;

/* The order chosen for one expression, with its cost. */
typedef struct tf__einsum_path {
    tf_einsum_optimize method; /* what ran: optimal beyond its limit, or a stuck greedy, differ */
    int n_steps;
    tf__einsum_step step[TF__EINSUM_MAX_OPERANDS];
    double flops, naive_flops;
    int64_t largest; /* elements of the largest step result */
} tf__einsum_path;

/*
 * Chooses the steps of a parsed expression by `how`. Every intermediate must
 * be a tensor the daemon can hold (rank up to TF_MAX_RANK, at most 2^40
 * elements): greedy skips pairs that break this, and when it is left with
 * only such pairs the exhaustive search runs instead (up to
 * TF_EINSUM_OPTIMAL_MAX_OPERANDS operands); left-to-right, or an expression
 * no order can serve, is refused with TF_ERR_BAD_SHAPE and a reason in msg.
 */
tf_status tf__einsum_path_find(const tf__einsum *e, tf_einsum_optimize how, tf__einsum_path *p,
                               char *msg, size_t msg_len);

/*
 * The OP_CONTRACT descriptor of step k and its output's metadata: each axis's
 * label renumbered from 0 in order of appearance (a broadcast size-1 axis
 * gets a label of its own), an intermediate's axes in ascending label order,
 * the last step's in the output's order, and conj set on an input that is
 * operand i with bit i of `conj` (complex dtypes only).
 */
void tf__einsum_step_contraction(const tf__einsum *e, const tf__einsum_path *p, int k,
                                 uint64_t conj, tf__contraction *c, tf__meta *out);

/*
 * The labels of operand or result `id` (n + k: the result of step k), axis
 * by axis; returns its rank. An intermediate's axes are in ascending label
 * order, the last result's are the output's.
 */
int tf__einsum_axes(const tf__einsum *e, const tf__einsum_path *p, int id,
                    unsigned labels[TF_MAX_RANK]);

/* The report of a path (tf_einsum_path's answer), or NULL when out of memory. */
tf_einsum_path_info *tf__einsum_report(const tf__einsum *e, const tf__einsum_path *p);

#endif
