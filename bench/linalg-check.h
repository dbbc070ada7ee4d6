/*
 * Operands and checks of the linear-algebra benchmarks (bench/bench-linalg.c
 * on the CPU, bench/gpu/bench-linalg.c on the GPU): deterministic test
 * matrices, and the checks of what a decomposition returned, against the
 * promises of include/tenferro/linalg.h.
 *
 * Matrices are row-major, as the daemon's tensors are, in any of the four
 * dtypes (real values such as S and W in the real dtype of the same
 * precision). A check does not recompute the decomposition: it measures, on
 * LC_SAMPLES columns spread over the factor (all of them when fewer), the
 * residual of the defining equation (A v_j = s_j u_j, A v_j = w_j v_j,
 * A e_j = Q R e_j) and the orthonormality of every pair of those columns,
 * and it checks the ordering of the values, the gauge (the largest entry of
 * each sampled column real and positive; R's diagonal real and
 * non-negative) and R's exact zeros below the diagonal. Each costs
 * O(LC_SAMPLES x m x n), well under the decomposition it checks.
 *
 * Every check returns the worst error over its tolerance (<= 1 passes; NaN
 * and inf count as failing) and writes the worst offender into `why`. The
 * tolerance is LC_TOL_FACTOR x max(m, n) x the unit roundoff of the dtype:
 * loose beside a backward-stable routine's residual (a few eps sqrt(n)), tight
 * beside any layout, transposition or gauge mistake (errors of order 1).
 */
#ifndef TENFERRO_BENCH_LINALG_CHECK_H
#define TENFERRO_BENCH_LINALG_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/types.h"

#define LC_SAMPLES 24
#define LC_TOL_FACTOR 32.0

/* The real dtype of dt's precision (S, W): f32 for f32 and c64, f64 for f64 and c128. */
tf_dtype lc_real_dtype(tf_dtype dt);

/* The unit roundoff of dt's precision. */
double lc_eps(tf_dtype dt);

/* Fills n elements of dt (complex ones in both parts) uniform in [-0.5, 0.5), the same per seed. */
void lc_fill(tf_dtype dt, void *x, size_t n, uint64_t seed);

/* Makes the n x n matrix a Hermitian in place: (a + a^H) / 2. */
void lc_hermitize(tf_dtype dt, void *a, int64_t n);

/* The largest |got - ref| over k real values of dtype rdt, over the largest |ref| (NaN: inf). */
double lc_values_diff(tf_dtype rdt, const void *got, const void *ref, int64_t k);

/* A reduced SVD of a (m x n): u (m x k), s (k, real, descending), vh (k x n), k = min(m, n). */
double lc_check_svd(tf_dtype dt, const void *a, int64_t m, int64_t n, const void *u, const void *s,
                    const void *vh, char *why, size_t why_len);

/* A Hermitian eigendecomposition of a (n x n): w (n, real, ascending), v (n x n, columns). */
double lc_check_eigh(tf_dtype dt, const void *a, int64_t n, const void *w, const void *v, char *why,
                     size_t why_len);

/* A reduced QR of a (m x n): q (m x k), r (k x n, upper triangular, real diagonal >= 0). */
double lc_check_qr(tf_dtype dt, const void *a, int64_t m, int64_t n, const void *q, const void *r,
                   char *why, size_t why_len);

#endif
