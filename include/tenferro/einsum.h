/*
 * einsum in numpy's notation on a session view (docs/einsum.md).
 *
 * tf_view_einsum(v, "ij,jk->ik", 2, (tf_tensor[]){a, b}, &out) contracts any
 * number of operands of one dtype. At the call the library parses the
 * subscripts against the operands' shapes, chooses an order of pairwise
 * contractions (opt_einsum's greedy by default) and queues one contraction
 * per pair on the view, like every other operation: the output handle exists
 * when the call returns, nothing waits for the daemon, and each intermediate
 * is freed right after the contraction that reads it. A call that fails
 * queues nothing. tf_einsum_path reports the order and its cost without
 * running anything, like numpy's einsum_path.
 *
 * The notation: letters A-Z a-z are labels, ',' separates the operands'
 * terms, an optional '->' is followed by the output's term, '...' (at most
 * once per term) stands for broadcast leading dimensions, blanks are
 * ignored. Without '->' the output is numpy's implicit one: the ellipsis's
 * dimensions, then every label used exactly once, in ASCII order (A-Z before
 * a-z). A label repeated inside one term takes the diagonal ("ii->i"), a
 * label absent from the output is summed, a label in several operands and in
 * the output is a batch label.
 */
#ifndef TENFERRO_EINSUM_H
#define TENFERRO_EINSUM_H

#include <stdint.h>

#include "tenferro/client.h"
#include "tenferro/export.h"
#include "tenferro/session.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Operands one einsum may take. */
#define TF_EINSUM_MAX_OPERANDS 32

/* Operand counts up to which TF_EINSUM_OPTIMAL searches every pairwise order. */
#define TF_EINSUM_OPTIMAL_MAX_OPERANDS 10

/* How the pairwise order is chosen (docs/einsum.md, "Paths"). */
typedef enum tf_einsum_optimize {
    /* Repeatedly contract the pair that shrinks the data most (opt_einsum's greedy). The default. */
    TF_EINSUM_GREEDY = 0,
    /*
     * The order of fewest flops among all pairwise orders, ties broken by the
     * smaller largest intermediate. Beyond TF_EINSUM_OPTIMAL_MAX_OPERANDS
     * operands the search would take too long and greedy runs instead.
     */
    TF_EINSUM_OPTIMAL = 1,
    /* Operands 0 and 1, then that result with operand 2, and so on (numpy's naive order). */
    TF_EINSUM_LEFT_TO_RIGHT = 2,
} tf_einsum_optimize;

/* Options of tf_view_einsum_opt and tf_einsum_path; all zero (or NULL) gives the defaults. */
typedef struct tf_einsum_options {
    tf_einsum_optimize optimize;
    /*
     * Bit i set: use the complex conjugate of operands[i] (bits from
     * n_operands up must be clear). Real dtypes ignore it.
     */
    uint64_t conj;
} tf_einsum_options;

/*
 * Queues the contraction of n_operands operands (1..TF_EINSUM_MAX_OPERANDS)
 * described by `subscripts` and returns the output's handle, a new tensor of
 * the operands' dtype. Refused at the call, with nothing queued:
 * TF_ERR_INVALID_ARGUMENT (the notation, with the position and character at
 * fault; a term count other than n_operands), TF_ERR_DTYPE (operands of
 * different dtypes: einsum does not promote), TF_ERR_SHAPE (a term that
 * does not fit its operand's rank, a label bound to two sizes, ellipsis
 * dimensions that do not broadcast), TF_ERR_BAD_SHAPE (an output above rank
 * TF_MAX_RANK or 2^40 elements, or an expression whose every pairwise order
 * needs such an intermediate), TF_ERR_UNKNOWN_HANDLE, TF_ERR_SESSION_CLOSED
 * outside a session callback. An operand in a pending transfer is read
 * after its copy.
 */
TF_EXTERN tf_status tf_view_einsum(tf_view *v, const char *subscripts, int n_operands,
                                   const tf_tensor *operands, tf_tensor *out);

/*
 * tf_view_einsum with options (NULL: the defaults): the order
 * (TF_ERR_INVALID_ARGUMENT for an unknown one) and the conjugation mask.
 * TF_EINSUM_LEFT_TO_RIGHT is refused with TF_ERR_BAD_SHAPE when its order
 * needs an intermediate above rank TF_MAX_RANK; greedy and optimal avoid
 * such intermediates whenever an order without them exists.
 */
TF_EXTERN tf_status tf_view_einsum_opt(tf_view *v, const char *subscripts, int n_operands,
                                       const tf_tensor *operands, const tf_einsum_options *opt,
                                       tf_tensor *out);

/* One pairwise contraction of a path. */
typedef struct tf_einsum_step {
    /*
     * What it contracts: 0..n_operands-1 name the operands, n_operands + k
     * the result of step k. b is -1 for the single step of a one-operand
     * expression (a permutation, trace, diagonal or sum).
     */
    int a, b;
    double flops;       /* its cost (docs/einsum.md, "Cost model") */
    int64_t elements;   /* elements of its result */
    int scaling;        /* the labels it loops over */
    /*
     * The step in einsum notation ("ij,jk->ik"): ellipsis dimension p prints
     * as the digit p, a size-1 axis broadcast against a larger one as '_'.
     */
    char subscripts[32];
} tf_einsum_step;

/* What tf_einsum_path reports. Read-only; free it with tf_einsum_path_free. */
typedef struct tf_einsum_path_info {
    tf_einsum_optimize optimize; /* the order that was used (greedy when optimal was too large) */
    int n_operands;
    int n_steps;                 /* n_operands - 1, or 1 for a single operand */
    const tf_einsum_step *steps; /* in the order they run */
    double flops;                /* the sum over the steps */
    double naive_flops;          /* one loop nest over every label (docs/einsum.md) */
    int64_t largest_intermediate; /* elements of the largest step result, the output included */
    const char *report;          /* all of it as printable text, one line per step */
} tf_einsum_path_info;

/*
 * Chooses the pairwise order tf_view_einsum_opt would queue for these
 * operands and options, and reports it in *info (the caller frees it with
 * tf_einsum_path_free). Needs no session: it only reads the operands'
 * metadata. Fails as tf_view_einsum_opt does, without the session errors.
 */
TF_EXTERN tf_status tf_einsum_path(tf_client *client, const char *subscripts, int n_operands,
                                   const tf_tensor *operands, const tf_einsum_options *opt,
                                   tf_einsum_path_info **info);

/* Frees what tf_einsum_path returned. NULL is allowed. */
TF_EXTERN void tf_einsum_path_free(tf_einsum_path_info *info);

#ifdef __cplusplus
}
#endif
#endif
