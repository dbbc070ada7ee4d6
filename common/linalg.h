/*
 * The linear-algebra kinds (OP_SVD .. OP_DIAGONAL): their descriptor, shared
 * by the client library and the daemon, and the rules that give their
 * outputs (docs/linalg.md). The client runs the rules so a bad call fails at
 * once; the daemon runs them again on what arrived.
 *
 * A descriptor names a split of the input's axes: taken in the order perm,
 * the first n_batch axes are batch axes, the next n_rows are the matrix's
 * rows and the rest its columns. The matrix form of an operation on
 * [..., m, n] is n_batch = rank - 2, n_rows = 1; the tensor form decomposes
 * any rank. The daemon runs a permutation as a copy of its own before the
 * operation, so a backend only ever sees the canonical layout: `b` matrices
 * of `m` rows and `n` columns, contiguous, row-major.
 */
#ifndef TENFERRO_COMMON_LINALG_H
#define TENFERRO_COMMON_LINALG_H

#include <stdint.h>

#include "common/ops.h"

/* The most outputs a linear-algebra operation makes (a truncated SVD: U, S, Vh, report). */
#define TF__LINALG_MAX_OUTPUTS 4

/* Entries of a truncation report per batch element: kept rank, discarded weight, its ratio. */
#define TF__REPORT_ENTRIES 3

/* Where a truncated SVD puts its singular values besides S (proto Absorb). */
typedef enum tf__absorb {
    TF__ABSORB_NONE = 0,
    TF__ABSORB_LEFT = 1,  /* U S */
    TF__ABSORB_RIGHT = 2, /* S Vh */
    TF__ABSORB_BOTH = 3,  /* U sqrt(S), sqrt(S) Vh */
} tf__absorb;

/* The norms of OP_NORM (proto NormKind). */
typedef enum tf__norm_kind {
    TF__NORM_VECTOR = 0, /* (sum |x|^p)^(1/p) over the column axes; p = norm_p */
    TF__NORM_FRO = 1,    /* Frobenius of each matrix */
    TF__NORM_NUC = 2,    /* sum of singular values */
    TF__NORM_MATRIX = 3, /* induced p-norm: p = 1, -1, 2, -2, +inf, -inf */
} tf__norm_kind;

/* Truncation (proto Truncation); zero means "not asked". */
typedef struct tf__truncation {
    int64_t max_rank, min_rank;
    double cutoff, rel_cutoff;
    double discarded_weight, rel_discarded_weight;
    int keep_degenerate;
    tf__absorb absorb;
    int renormalize;
} tf__truncation;

/* A linear-algebra operation's descriptor (proto Linalg). */
typedef struct tf__linalg {
    int has_perm;
    int perm[TF_MAX_RANK];
    int n_batch, n_rows;
    int full, compute_uv, upper, truncate;
    tf__truncation trunc;
    tf__norm_kind norm_kind;
    double norm_p;
    int keepdims;
    int64_t offset;

    /*
     * Filled in by tf__infer_linalg: the canonical problem the backend runs.
     * b matrices of m x n (b = 1 without batch axes); k = min(m, n); rank is
     * the bound of a truncated SVD or eigh (its outputs' width: the kept rank
     * is at most this), else k (SVD, QR) or n (eigh). For OP_SOLVE, nrhs is
     * the columns of B (1 for a vector B). For OP_NORM with NORM_VECTOR, m is
     * 1 and n the reduced elements. value_rank: 1 when the kept rank depends
     * on the values (a cutoff, a discarded weight, keep_degenerate).
     */
    int64_t b, m, n, k, rank, nrhs;
    int value_rank;
    int n_outputs;
} tf__linalg;

/*
 * The rules of a linear-algebra kind: checks the descriptor against the
 * inputs (one, or two for OP_SOLVE; every dtype f32, f64, c64, c128), fills
 * in its canonical sizes, and writes the outputs' metadata in wire order
 * (proto OpKind) into out[0 .. l->n_outputs). Typed errors: TF_ERR_DTYPE,
 * TF_ERR_SHAPE (not square, B's rows not A's), TF_ERR_AXIS (a bad split or
 * permutation), TF_ERR_INVALID_ARGUMENT (options that do not fit the kind).
 */
tf_status tf__infer_linalg(tf__op_kind kind, tf__linalg *l, const tf__meta *in, int n_inputs,
                           tf__meta *out, char *msg, size_t msg_len);

/* 1 when kind is one of the linear-algebra kinds. */
int tf__is_linalg(tf__op_kind kind);

#endif
