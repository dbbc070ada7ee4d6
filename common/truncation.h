/*
 * The truncation rule of OP_SVD and OP_EIGH (docs/linalg.md, "Truncation"),
 * written once for both backends: the CPU runs it on the host, the CUDA
 * backend in a kernel on the device, so the kept rank and the report agree
 * bit for bit given the same values.
 *
 * The values arrive in descending order and are non-negative (singular
 * values; eigh's |w|). The rule, in order:
 *   1. at most `bound` values (max_rank, or all of them);
 *   2. cutoff: only values above it; rel_cutoff: above it times the largest;
 *   3. discarded weight: the smallest values go while the sum of the squares
 *      of everything discarded stays at most discarded_weight, and at most
 *      rel_discarded_weight times the sum of all squares;
 *   4. at least min(min_rank, bound) values;
 *   5. keep_degenerate: a multiplet (neighbours a >= b with a - b <= tol * a)
 *      the cut would split is kept whole when it ends within the bound, else
 *      dropped whole unless that would go below min_rank;
 *   6. at least one value.
 */
#ifndef TENFERRO_COMMON_TRUNCATION_H
#define TENFERRO_COMMON_TRUNCATION_H

#include <stdint.h>

#include "common/linalg.h"

#ifdef __CUDACC__
#define TF__HD __host__ __device__
#else
#define TF__HD
#endif

/* Relative gap below which neighbouring values form a multiplet: about sqrt(epsilon). */
#define TF__DEGENERATE_TOL_F32 3.4526698e-4
#define TF__DEGENERATE_TOL_F64 1.4901161193847656e-8

/*
 * Defines NAME(s, k, bound, t, tol, &discarded, &total) for values of type T:
 * the kept rank of k values s[0..k) (k >= 1) under truncation t with a bound
 * of at most k; *discarded gets the sum of squares of s[rank..k), *total of
 * all of them (accumulated in double).
 */
#define TF__DEFINE_KEPT_RANK(NAME, T)                                                              \
    TF__HD static inline int tf__degenerate_##NAME(double a, double b, double tol) {               \
        return a - b <= tol * a;                                                                   \
    }                                                                                              \
    TF__HD static inline int64_t NAME(const T *s, int64_t k, int64_t bound,                        \
                                      const tf__truncation *t, double tol, double *discarded,      \
                                      double *total) {                                             \
        double all = 0;                                                                            \
        for (int64_t i = 0; i < k; i++) all += (double)s[i] * (double)s[i];                        \
        int64_t r = bound < k ? bound : k;                                                         \
        if (t->cutoff > 0) {                                                                       \
            int64_t c = 0;                                                                         \
            while (c < r && (double)s[c] > t->cutoff) c++;                                         \
            r = c;                                                                                 \
        }                                                                                          \
        if (t->rel_cutoff > 0) {                                                                   \
            const double thr = t->rel_cutoff * (double)s[0];                                       \
            int64_t c = 0;                                                                         \
            while (c < r && (double)s[c] > thr) c++;                                               \
            r = c;                                                                                 \
        }                                                                                          \
        if (t->discarded_weight > 0 || t->rel_discarded_weight > 0) {                              \
            double limit = -1;                                                                     \
            if (t->discarded_weight > 0) limit = t->discarded_weight;                              \
            if (t->rel_discarded_weight > 0) {                                                     \
                const double rel = t->rel_discarded_weight * all;                                  \
                if (limit < 0 || rel < limit) limit = rel;                                         \
            }                                                                                      \
            double tail = 0;                                                                       \
            for (int64_t i = r; i < k; i++) tail += (double)s[i] * (double)s[i];                   \
            while (r > 0 && tail + (double)s[r - 1] * (double)s[r - 1] <= limit) {                 \
                tail += (double)s[r - 1] * (double)s[r - 1];                                       \
                r--;                                                                               \
            }                                                                                      \
        }                                                                                          \
        int64_t floor_rank = t->min_rank < bound ? t->min_rank : bound;                            \
        if (r < floor_rank) r = floor_rank;                                                        \
        if (t->keep_degenerate && r > 0 && r < k &&                                                \
            tf__degenerate_##NAME((double)s[r - 1], (double)s[r], tol)) {                          \
            int64_t up = r;                                                                        \
            while (up < k && tf__degenerate_##NAME((double)s[up - 1], (double)s[up], tol)) up++;   \
            if (up <= bound) {                                                                     \
                r = up;                                                                            \
            } else {                                                                               \
                int64_t down = r;                                                                  \
                while (down > 0 && tf__degenerate_##NAME((double)s[down - 1], (double)s[down], tol)) \
                    down--;                                                                        \
                if (down >= floor_rank && down > 0) r = down;                                      \
            }                                                                                      \
        }                                                                                          \
        if (r < 1) r = 1;                                                                          \
        double gone = 0;                                                                           \
        for (int64_t i = r; i < k; i++) gone += (double)s[i] * (double)s[i];                       \
        *discarded = gone;                                                                         \
        *total = all;                                                                              \
        return r;                                                                                  \
    }

#endif
