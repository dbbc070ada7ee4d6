/*
 * Device kernels of the CUDA backend's linear algebra (cuda/linalg-kernels.cu),
 * as cuda/linalg.c drives them around the cuSOLVER calls, and the strided
 * gather of OP_SLICE.
 *
 * Matrices are batches of `b`, one after another. "Row-major" is the layout of
 * the daemon's tensors; "col-major" the layout of the cuSOLVER factors, with a
 * leading dimension and a per-matrix stride (in elements). Every launcher only
 * enqueues on `stream` and returns what the runtime reported for its launches
 * (cudaErrorInvalidValue for a dtype it does not serve, before anything is
 * enqueued); none blocks the host. Real outputs (S, W, norms, logabsdet) have
 * the real dtype of the precision (f32 for f32 and c64, f64 for f64 and c128).
 * `sm_count` sizes grid-stride grids. Private to daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CUDA_LINALG_KERNELS_H
#define TENFERRO_DAEMON_CUDA_LINALG_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/linalg.h"
#include "daemon/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the device found in one operation (tfd_cuda_la_status). */
typedef enum tfd_cuda_la_code {
    TFD_CUDA_LA_OK = 0,
    TFD_CUDA_LA_NOT_FINITE = 1,
    TFD_CUDA_LA_NOT_CONVERGED = 2,
    TFD_CUDA_LA_SINGULAR = 3,
    TFD_CUDA_LA_NOT_PD = 4,
    TFD_CUDA_LA_BAD_ARGUMENT = 5, /* the solver refused an argument (info < 0) */
} tfd_cuda_la_code;

/* The status word of one operation: its first failing matrix, reduced on the device. */
typedef struct tfd_cuda_la_status {
    int32_t code;   /* tfd_cuda_la_code */
    int32_t detail; /* cholesky: the leading minor; a refused argument: its position */
    int64_t index;  /* the failing matrix of the batch */
} tfd_cuda_la_status;

/* Bits of the per-matrix flags tfd_cuda_la_check writes. */
#define TFD_CUDA_LA_FLAG_NAN 1
#define TFD_CUDA_LA_FLAG_INF 2

/* Which part of a row-major square matrix tfd_cuda_la_check reads. */
enum { TFD_CUDA_LA_ALL = 0, TFD_CUDA_LA_LOWER = 1, TFD_CUDA_LA_UPPER = 2 };

/*
 * ORs into flags[i] (zeroed by the caller) the NAN and INF bits of the
 * elements of matrix i of a ([b, m, n] row-major), only its lower (i >= j) or
 * upper (i <= j) triangle when `part` says so.
 */
cudaError_t tfd_cuda_la_check(const void *a, tf_dtype dt, int64_t b, int64_t m, int64_t n,
                              int part, int *flags, int sm_count, cudaStream_t stream);

/*
 * Copies the row-major [b, rows, cols] `in` into `out`, matrix i at
 * out + i * out_stride: as it is (transpose 0) or as the col-major rows x cols
 * matrix, leading dimension rows (transpose 1). With flags, a matrix whose
 * flag is set gets the identity (ones on its diagonal) instead, so a solver
 * never meets its nan or inf.
 */
cudaError_t tfd_cuda_la_prepare(const void *in, void *out, tf_dtype dt, int64_t b, int64_t rows,
                                int64_t cols, int transpose, int64_t out_stride, const int *flags,
                                int sm_count, cudaStream_t stream);

/*
 * Reduces one operation's per-matrix words into *out: the first matrix with a
 * set flag (NOT_FINITE, when flags is not NULL); when none is flagged, the
 * first with a negative info (BAD_ARGUMENT) or a positive one (positive_code,
 * unless that is OK: then a positive info is no failure). info may be NULL.
 */
cudaError_t tfd_cuda_la_status_reduce(const int *flags, const int *info, int64_t b,
                                      int positive_code, tfd_cuda_la_status *out,
                                      cudaStream_t stream);

/* Zeroes the n (at most 4) buffers when status->code is not OK; bytes are multiples of 4. */
cudaError_t tfd_cuda_la_zero_failed(const tfd_cuda_la_status *status, int n, void *const *ptr,
                                    const size_t *bytes, int sm_count, cudaStream_t stream);

/*
 * Where an SVD's factors lie after the solver ran on X (col-major): X = A
 * (m x n, transposed 1: the input was transposed into X) or X = A^T (n x m,
 * transposed 0: the row-major buffer as it is). u is X's left factor
 * (col-major, leading dimension ldu, matrix i at u + i * u_stride); v its
 * right factor, V (v_is_vh 0) or V^H (v_is_vh 1), the same way. s holds the k
 * singular values of each matrix, descending.
 */
typedef struct tfd_cuda_svd_geom {
    tf_dtype dtype;
    int64_t b, m, n, k;
    int64_t r1, r2; /* columns of the output U, rows of the output Vh */
    int transposed;
    const void *u;
    int64_t ldu, u_stride;
    const void *v;
    int64_t ldv, v_stride;
    int v_is_vh;
    const void *s;
} tfd_cuda_svd_geom;

/*
 * The gauge of an SVD: pu [b, r1] gets the phase each column of U is
 * multiplied by (conj(x)/|x| of its first largest entry x) and pui [b, r1]
 * that entry's row; pv [b, r2] the phase of each row of Vh: conj of U's for
 * rows below r1 (pvi -1), and for rows r1 and up (full, n > m) the phase that
 * makes the row's first largest entry real positive (pvi its column). A
 * pivot is written as its magnitude exactly.
 */
cudaError_t tfd_cuda_la_svd_phase(const tfd_cuda_svd_geom *g, void *pu, void *pv, int64_t *pui,
                                  int64_t *pvi, int sm_count, cudaStream_t stream);

/*
 * The kept rank of each matrix (common/truncation.h), one thread per matrix:
 * values vals[i * ld + 0 .. k) (real dtype `real`, descending, >= 0), bound
 * `bound` (<= k). Writes kept[i], factor[i] (the renormalization, 1 without
 * it or when nothing is left) and report[i * 3 ..] (f64: rank, discarded
 * weight, ratio to the total).
 */
cudaError_t tfd_cuda_la_truncate(const void *vals, tf_dtype real, int64_t ld, int64_t k,
                                 int64_t b, int64_t bound, const tf__truncation *t,
                                 int renormalize, int64_t *kept, double *factor, double *report,
                                 cudaStream_t stream);

/*
 * Writes the SVD's outputs from the solver's factors: S [b, rank] (values past
 * kept[i] zero, the others times factor[i]), and when U and Vh are not NULL,
 * U [b, m, r1] and Vh [b, r2, n] with the gauge phases, zero past the kept
 * rank and the values absorbed (tf__absorb). kept and factor NULL: none.
 */
cudaError_t tfd_cuda_la_svd_store(const tfd_cuda_svd_geom *g, const void *pu, const void *pv,
                                  const int64_t *pui, const int64_t *pvi, const int64_t *kept,
                                  const double *factor, int absorb, int64_t rank, void *S,
                                  void *U, void *Vh, int sm_count, cudaStream_t stream);

/*
 * A truncated eigh's order, one thread per matrix: perm[i * n + j] the index
 * of the j-th pair by |w| descending (equal |w|: the larger w first, equal w
 * in their order), absw[i * n + j] its |w|. w [b, n] ascending, real dtype.
 */
cudaError_t tfd_cuda_la_eigh_order(const void *w, tf_dtype real, int64_t b, int64_t n,
                                   int32_t *perm, void *absw, cudaStream_t stream);

/*
 * The gauge of eigh: v holds the col-major eigenvectors V' of X = A^T = conj(A)
 * ([b, n, n]); the eigenvectors of A are conj(V'). ph [b, n] gets the phase
 * that makes the first largest entry of each of A's eigenvectors real
 * positive, piv [b, n] that entry's row.
 */
cudaError_t tfd_cuda_la_eigh_phase(const void *v, tf_dtype dt, int64_t b, int64_t n, void *ph,
                                   int64_t *piv, int sm_count, cudaStream_t stream);

/*
 * Writes W [b, rank] and, when V is not NULL, V [b, n, rank] (column j the
 * eigenvector of W[j], gauged), in the order perm (NULL: ascending, as the
 * solver gave them), zero past kept[i] (NULL: none).
 */
cudaError_t tfd_cuda_la_eigh_store(const void *w, const void *v, const void *ph,
                                   const int64_t *piv, const int32_t *perm, const int64_t *kept,
                                   tf_dtype dt, int64_t b, int64_t n, int64_t rank, void *W,
                                   void *V, int sm_count, cudaStream_t stream);

/* QR's gauge from geqrf's output a (col-major m x ?, matrix i at a + i * stride): ph [b, k]. */
cudaError_t tfd_cuda_la_qr_phase(const void *a, tf_dtype dt, int64_t b, int64_t m, int64_t k,
                                 int64_t stride, void *ph, int sm_count, cudaStream_t stream);

/*
 * R [b, rows, n] row-major from geqrf's upper triangle, rows times the phases
 * (the diagonal its magnitude exactly), zeros below.
 */
cudaError_t tfd_cuda_la_qr_store_r(const void *a, const void *ph, tf_dtype dt, int64_t b,
                                   int64_t m, int64_t n, int64_t k, int64_t rows, int64_t stride,
                                   void *R, int sm_count, cudaStream_t stream);

/* Q [b, m, cols] row-major from orgqr's col-major Q, columns below k times conj(phase). */
cudaError_t tfd_cuda_la_qr_store_q(const void *q, const void *ph, tf_dtype dt, int64_t b,
                                   int64_t m, int64_t cols, int64_t k, int64_t stride, void *Q,
                                   int sm_count, cudaStream_t stream);

/*
 * Q [b, m, cols] row-major straight from geqrf's reflectors (the batched
 * QR: cuBLAS has no batched orgqr): a (col-major m x n, leading dimension
 * m, matrix i at a + i * stride) holds the k reflectors below its diagonal
 * and tau [b, k] their scalars; Q = H(0) H(1) ... H(k-1) applied to the
 * first `cols` columns of the identity (cols >= k), as orgqr / ungqr forms
 * it, the columns below k times conj(ph [b, k]) like
 * tfd_cuda_la_qr_store_q. One block per matrix, one thread per column;
 * products accumulated in double.
 */
cudaError_t tfd_cuda_la_qr_form_q(const void *a, const void *tau, const void *ph, tf_dtype dt,
                                  int64_t b, int64_t m, int64_t k, int64_t cols, int64_t stride,
                                  void *Q, int sm_count, cudaStream_t stream);

/*
 * The pointer array of a batched cuBLAS / cuSOLVER routine: out[i] = base +
 * i * stride_bytes for i < b (out is device memory, written on the stream).
 */
cudaError_t tfd_cuda_la_pointers(void **out, void *base, int64_t b, int64_t stride_bytes,
                                 int sm_count, cudaStream_t stream);

/* The 32-bit pivots of cublas<t>getrfBatched widened into 64-bit ones (count of them). */
cudaError_t tfd_cuda_la_widen_pivots(const int *in, int64_t *out, int64_t count, int sm_count,
                                     cudaStream_t stream);

/* Zeroes the strict upper (keep_lower 1) or strict lower triangle of each row-major n x n matrix. */
cudaError_t tfd_cuda_la_triangle(void *a, tf_dtype dt, int64_t b, int64_t n, int keep_lower,
                                 int sm_count, cudaStream_t stream);

/* Writes the n x n identity into each of the b matrices. */
cudaError_t tfd_cuda_la_identity(void *a, tf_dtype dt, int64_t b, int64_t n, int sm_count,
                                 cudaStream_t stream);

/*
 * det (when det is not NULL: [b] of dt) or slogdet (sign [b] of dt, logabs [b]
 * real) from getrf's factors lu ([b, n, n]) and 1-based pivots ipiv ([b, n]).
 */
cudaError_t tfd_cuda_la_det(const void *lu, const int64_t *ipiv, tf_dtype dt, int64_t b,
                            int64_t n, void *det, void *sign, void *logabs, cudaStream_t stream);

/*
 * Vector norms: out[i] (real out_dtype, f32 or f64) = the p-norm of x[i * len
 * .. + len) (x of dtype dt, which may be f64 scratch). p = 2 and other
 * positive p are scaled by the largest |x|; 1, +inf, -inf, 0 are the sum, max,
 * min and count of nonzero. Scratch of tfd_cuda_la_norm_scratch bytes.
 */
size_t tfd_cuda_la_norm_scratch(int64_t nout, int64_t len);
cudaError_t tfd_cuda_la_norm_vector(const void *x, tf_dtype dt, int64_t nout, int64_t len,
                                    double p, void *out, tf_dtype out_dtype, void *scratch,
                                    int sm_count, cudaStream_t stream);

/* Column sums of |a_ij| of each row-major m x n matrix into sums [b, n] (f64). */
cudaError_t tfd_cuda_la_column_sums(const void *a, tf_dtype dt, int64_t b, int64_t m, int64_t n,
                                    double *sums, int sm_count, cudaStream_t stream);

/*
 * Norms from singular values s [b, k] (real dtype): kind NUC the sum, MATRIX
 * with p 2 the largest, -2 the smallest. A matrix whose flags hold NAN gives
 * nan; INF gives inf (nan for p -2).
 */
cudaError_t tfd_cuda_la_norm_sv(const void *s, tf_dtype real, int64_t b, int64_t k,
                                tf__norm_kind kind, double p, const int *flags, void *out,
                                cudaStream_t stream);

/*
 * The diagonal a[i0 + t, j0 + t], t < len, of each row-major m x n matrix:
 * into out [b, len] or, with trace set, its sum into out [b].
 */
cudaError_t tfd_cuda_la_diagonal(const void *a, tf_dtype dt, int64_t b, int64_t m, int64_t n,
                                 int64_t i0, int64_t j0, int64_t len, int trace, void *out,
                                 int sm_count, cudaStream_t stream);

/*
 * OP_SLICE: out (contiguous, shape the lengths) gathers in[start + t * step]
 * along every axis (params: start, step, length per input axis; step may be
 * negative). The caller has checked the parameters against the input.
 */
cudaError_t tfd_cuda_launch_slice(const tfd_op *op, int sm_count, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
