/*
 * Linear algebra inside sessions (docs/linalg.md): decompositions, solvers,
 * norms, traces and diagonals, queued on a view like every operation and
 * batched over leading axes, for f32, f64, c64 and c128.
 *
 * Every call checks its arguments at once with the daemon's own rules (a bad
 * call fails here, typed, and queues nothing), takes fresh handles for its
 * results and queues one operation. Failures only the numbers can show (a
 * solver that does not converge, a singular or non-positive-definite matrix,
 * nan or inf in the input) are typed errors of the operation, reported like
 * any failed operation: by the synchronize (or download) after it, naming its
 * index and the failing matrix of the batch; its results then hold zeros.
 *
 * Results have their shapes at the call. A truncation whose kept rank depends
 * on the values (a cutoff, a discarded weight, keep_degenerate) makes results
 * of the bound's width (max_rank, or every value) whose entries past the kept
 * rank are zeros, so what is queued on them at once computes what the trimmed
 * factors would; the kept rank reaches the client in the report, read with one
 * wait (tf_truncation_report_read), after which tf_view_slice trims them.
 */
#ifndef TENFERRO_LINALG_H
#define TENFERRO_LINALG_H

#include <stdint.h>

#include "tenferro/export.h"
#include "tenferro/session.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How a decomposition reads a tensor as a batch of matrices: its axes, in the
 * order perm (NULL: as they are; else a permutation of all of them), are
 * n_batch batch axes, then n_rows row axes, then the column axes. A NULL
 * split is the matrix form of [..., m, n]: n_batch = rank - 2, n_rows = 1.
 * Tensor form: {NULL, 0, k} decomposes an order-r tensor with its first k
 * axes as rows; the left factor is then [rows..., r] and the right one
 * [r, columns...].
 */
typedef struct tf_split {
    const int *perm;
    int n_batch;
    int n_rows;
} tf_split;

/* Where a truncated SVD puts its singular values besides S. */
typedef enum tf_absorb {
    TF_ABSORB_NONE = 0,  /* U and Vh stay isometries */
    TF_ABSORB_LEFT = 1,  /* U S */
    TF_ABSORB_RIGHT = 2, /* S Vh */
    TF_ABSORB_BOTH = 3,  /* U sqrt(S) and sqrt(S) Vh */
} tf_absorb;

/*
 * Truncation of an SVD or eigh (docs/linalg.md, "Truncation"); zero (or 0.0)
 * leaves an option unused, so {0} truncates nothing. Values are singular
 * values, or |eigenvalue| for eigh.
 */
typedef struct tf_truncation {
    int64_t max_rank;            /* keep at most this many */
    int64_t min_rank;            /* keep at least this many (at most max_rank) */
    double cutoff;               /* keep values above this */
    double rel_cutoff;           /* keep values above this times the largest */
    double discarded_weight;     /* drop the smallest while the sum of their squares is <= this */
    double rel_discarded_weight; /* ... <= this times the sum of all squares */
    int keep_degenerate;         /* never cut a multiplet in two */
    tf_absorb absorb;            /* SVD only */
    int renormalize;             /* SVD only: kept values rescaled to the norm of all of them */
} tf_truncation;

/* What a truncation did to one matrix of the batch. */
typedef struct tf_truncation_report {
    int64_t rank;              /* values kept */
    double discarded_weight;   /* sum of the squares of the values dropped */
    double truncation_error;   /* that over the sum of all squares (0 for a zero matrix) */
} tf_truncation_report;

/*
 * a = U diag(S) Vh. Reduced (full_matrices 0): U [..., m, k], S [..., k],
 * Vh [..., k, n] with k = min(m, n); full: U [..., m, m], Vh [..., n, n].
 * u and vh both NULL: singular values only. S descends; the largest entry in
 * magnitude of each column of U (the first of equals) is real and positive,
 * Vh's row carrying the opposite phase.
 */
TF_EXTERN tf_status tf_view_svd(tf_view *v, tf_tensor a, const tf_split *split, int full_matrices,
                                tf_tensor *u, tf_tensor *s, tf_tensor *vh);

/*
 * The truncated SVD: results of width r_b = min(k, max_rank) (k without
 * max_rank); with a value-dependent rule the entries past each matrix's kept
 * rank are zeros. report (may be NULL) gets an f64 [..., 3] tensor: kept rank,
 * discarded weight, truncation error per matrix (tf_truncation_report_read).
 * u and vh both NULL: values only (absorb refused).
 */
TF_EXTERN tf_status tf_view_svd_truncated(tf_view *v, tf_tensor a, const tf_split *split,
                                          const tf_truncation *t, tf_tensor *u, tf_tensor *s,
                                          tf_tensor *vh, tf_tensor *report);

/* How much of a QR decomposition is wanted (numpy's mode). */
typedef enum tf_qr_mode {
    TF_QR_REDUCED = 0,  /* Q [..., m, k], R [..., k, n] */
    TF_QR_COMPLETE = 1, /* Q [..., m, m], R [..., m, n] */
    TF_QR_R = 2,        /* R [..., k, n] alone (q is not written) */
} tf_qr_mode;

/* a = Q R with R's diagonal real and non-negative. */
TF_EXTERN tf_status tf_view_qr(tf_view *v, tf_tensor a, const tf_split *split, tf_qr_mode mode,
                               tf_tensor *q, tf_tensor *r);

/*
 * Hermitian eigendecomposition a = V diag(W) V^H, reading one triangle
 * (upper 0: the lower, numpy's UPLO='L'). W [..., n] real ascending, V
 * [..., n, n] (vecs NULL: values only) with each column's largest entry in
 * magnitude real and positive. In tensor form the rows and columns must have
 * the same size.
 */
TF_EXTERN tf_status tf_view_eigh(tf_view *v, tf_tensor a, const tf_split *split, int upper,
                                 tf_tensor *w, tf_tensor *vecs);

/*
 * Truncated eigh: the pairs ordered by |W| descending (the larger W first
 * among equals), truncated by the rule of the SVD on |W|; absorb and
 * renormalize are refused. report as for tf_view_svd_truncated.
 */
TF_EXTERN tf_status tf_view_eigh_truncated(tf_view *v, tf_tensor a, const tf_split *split,
                                           int upper, const tf_truncation *t, tf_tensor *w,
                                           tf_tensor *vecs, tf_tensor *report);

/* a = L L^H (upper 0: L lower, reading a's lower triangle) or U^H U (upper 1). */
TF_EXTERN tf_status tf_view_cholesky(tf_view *v, tf_tensor a, int upper, tf_tensor *out);

/* X with a X = b: a [..., n, n], b [..., n] or [..., n, k] with a's batch axes. */
TF_EXTERN tf_status tf_view_solve(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *x);

/* The inverse of each matrix of a [..., n, n]. */
TF_EXTERN tf_status tf_view_inv(tf_view *v, tf_tensor a, tf_tensor *out);

/* The determinant [...] of each matrix of a [..., n, n] (0 for a singular one). */
TF_EXTERN tf_status tf_view_det(tf_view *v, tf_tensor a, tf_tensor *out);

/*
 * det = sign * exp(logabsdet): sign [...] of a's dtype (+-1, or a unit complex
 * number; 0 for a singular matrix), logabsdet [...] real (-inf when singular).
 */
TF_EXTERN tf_status tf_view_slogdet(tf_view *v, tf_tensor a, tf_tensor *sign,
                                    tf_tensor *logabsdet);

/*
 * The vector p-norm (sum |x|^p)^(1/p) over axes (n_axes 0: all of them), real:
 * p = 2, 1, INFINITY (max |x|), -INFINITY (min |x|), 0 (nonzero count) or any
 * other. keepdims keeps the reduced axes as size 1.
 */
TF_EXTERN tf_status tf_view_vector_norm(tf_view *v, tf_tensor a, double p, int n_axes,
                                        const int *axes, int keepdims, tf_tensor *out);

/* The matrix norms (numpy's ord for matrices). */
typedef enum tf_matrix_norm {
    TF_NORM_FRO = 0,      /* Frobenius */
    TF_NORM_NUC = 1,      /* sum of singular values */
    TF_NORM_1 = 2,        /* max column sum of |a| */
    TF_NORM_NEG_1 = 3,    /* min column sum */
    TF_NORM_2 = 4,        /* largest singular value */
    TF_NORM_NEG_2 = 5,    /* smallest singular value */
    TF_NORM_INF = 6,      /* max row sum of |a| */
    TF_NORM_NEG_INF = 7,  /* min row sum */
} tf_matrix_norm;

/* A matrix norm over axes (row axis, column axis) (NULL: the last two), real. */
TF_EXTERN tf_status tf_view_matrix_norm(tf_view *v, tf_tensor a, tf_matrix_norm ord,
                                        const int *axes, int keepdims, tf_tensor *out);

/* The sum of each matrix's diagonal `offset` of a [..., n, m] (above the main when > 0): [...]. */
TF_EXTERN tf_status tf_view_trace(tf_view *v, tf_tensor a, int64_t offset, tf_tensor *out);

/* That diagonal itself: [..., d]. */
TF_EXTERN tf_status tf_view_diagonal(tf_view *v, tf_tensor a, int64_t offset, tf_tensor *out);

/*
 * Reads a truncation report (tf_view_svd_truncated, tf_view_eigh_truncated):
 * waits for the operation that made it, like a download of that one tensor,
 * and writes up to n entries (one per matrix of the batch, in order) into out.
 * Called outside a view callback; in a held session, a report still in its
 * queue is submitted first (tf_session_submit).
 */
TF_EXTERN tf_status tf_truncation_report_read(tf_client *c, tf_tensor report,
                                              tf_truncation_report *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
