/*
 * Operations on a session view. Each call checks shapes and dtypes at once,
 * allocates the output's handle, and queues the operation: the output handle
 * can be used by the next call before anything has reached the daemon.
 * Outputs are new contiguous tensors; inputs are never modified.
 */
#ifndef TENFERRO_VIEW_H
#define TENFERRO_VIEW_H

#include "tenferro/export.h"
#include "tenferro/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Elementwise a (op) b; equal dtypes and shapes. */
TF_EXTERN tf_status tf_view_add(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);
TF_EXTERN tf_status tf_view_sub(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);
TF_EXTERN tf_status tf_view_mul(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);
TF_EXTERN tf_status tf_view_div(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);

/* Elementwise functions. abs of a complex tensor is real (c64 -> f32, c128 -> f64). */
TF_EXTERN tf_status tf_view_neg(tf_view *v, tf_tensor a, tf_tensor *out);
TF_EXTERN tf_status tf_view_conj(tf_view *v, tf_tensor a, tf_tensor *out);
TF_EXTERN tf_status tf_view_abs(tf_view *v, tf_tensor a, tf_tensor *out);
TF_EXTERN tf_status tf_view_exp(tf_view *v, tf_tensor a, tf_tensor *out);
TF_EXTERN tf_status tf_view_log(tf_view *v, tf_tensor a, tf_tensor *out);
TF_EXTERN tf_status tf_view_sqrt(tf_view *v, tf_tensor a, tf_tensor *out);
/* a * a, elementwise (for complex a, the complex square, not |a|^2). */
TF_EXTERN tf_status tf_view_square(tf_view *v, tf_tensor a, tf_tensor *out);

/* alpha * a. */
TF_EXTERN tf_status tf_view_scale(tf_view *v, tf_scalar alpha, tf_tensor a, tf_tensor *out);

/* alpha * x + beta * y. */
TF_EXTERN tf_status tf_view_axpby(tf_view *v, tf_scalar alpha, tf_tensor x, tf_scalar beta,
                                  tf_tensor y, tf_tensor *out);

/* out.shape[i] = a.shape[perm[i]]; perm names each of a's `rank` axes once. */
TF_EXTERN tf_status tf_view_permute(tf_view *v, tf_tensor a, int rank, const int *perm,
                                    tf_tensor *out);

/* The same elements under a new shape (same element count). */
TF_EXTERN tf_status tf_view_reshape(tf_view *v, tf_tensor a, int rank, const int64_t *shape,
                                    tf_tensor *out);

/* A contiguous copy. */
TF_EXTERN tf_status tf_view_copy(tf_view *v, tf_tensor a, tf_tensor *out);

/*
 * A strided slice, as a contiguous copy: for each of a's axes i, length[i]
 * elements from index start[i] in steps of step[i] (nonzero, negative to go
 * backwards); every index taken must lie inside the axis and every length be
 * at least 1.
 */
TF_EXTERN tf_status tf_view_slice(tf_view *v, tf_tensor a, const int64_t *start,
                                  const int64_t *step, const int64_t *length, tf_tensor *out);

/*
 * Reduces over `n_axes` distinct axes (0 axes: all of them); keepdims keeps
 * them as size 1. MAX and MIN are served for real dtypes only.
 */
TF_EXTERN tf_status tf_view_reduce(tf_view *v, tf_reduce_kind kind, tf_tensor a, int n_axes,
                                   const int *axes, int keepdims, tf_tensor *out);
TF_EXTERN tf_status tf_view_sum(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out);
TF_EXTERN tf_status tf_view_max(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out);
TF_EXTERN tf_status tf_view_min(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out);

/* [m,k] x [k,n] -> [m,n]; rank > 2 multiplies batches with identical leading dimensions. */
TF_EXTERN tf_status tf_view_matmul(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out);

/* The client a view belongs to (for transfers inside a callback). */
TF_EXTERN tf_client *tf_view_client(tf_view *v);

#ifdef __cplusplus
}
#endif
#endif
