/*
 * The linear-algebra kinds of the CPU backend (OP_SVD .. OP_DIAGONAL), through
 * the LAPACK inside OpenBLAS (its Fortran entries, prototypes from <lapack.h>).
 *
 * Inputs arrive as batches of contiguous row-major matrices, and LAPACK is
 * column-major: a row-major m x n buffer is the column-major n x m matrix
 * A^T. Most kinds run on that transpose as it lies and read their answer off
 * the transposed result (each kind says how); only QR, eigh's vectors and a
 * right-hand side of several columns take an explicit transposing copy, by
 * tiles. LAPACK overwrites what it factors, so each matrix is copied first:
 * inputs are never written.
 *
 * One body serves the four dtypes. What differs per dtype is a table
 * (la_type): element access in double (complex) arithmetic, the LAPACK
 * routines behind one signature each, and the typed loops that visit every
 * entry of a matrix (transposes, scaling, the gauge's search). The numerics
 * stay in LAPACK, in the dtype's own precision; the element work around it
 * (gauges, truncation, determinants, norms) is linear in the elements, small
 * beside the factorizations. Scratch (copies, LAPACK's workspace) is the
 * stream's kept workspace, so a call does not fault megabytes of fresh pages
 * in. OpenBLAS threads the routines as the backend set it up.
 */
#include <complex.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lapack.h>

#include "common/truncation.h"
#include "daemon/backend/cpu/kernels.h"

/* The kept-rank rule shared with the CUDA backend, once per real precision. */
TF__DEFINE_KEPT_RANK(tf__kept_rank_f32, float)
TF__DEFINE_KEPT_RANK(tf__kept_rank_f64, double)

typedef double complex zval;

/*
 * What the shared code needs of a dtype. Element access goes through double
 * complex (exact for every dtype's values); `mag` is |x| in the dtype's own
 * precision, so the gauge's "largest entry" compares the values as stored.
 * The LAPACK entries return LAPACK's info; the real ones ignore rwork.
 */
typedef struct la_type {
    tf_dtype dtype;
    size_t size;  /* bytes of an element */
    size_t rsize; /* bytes of a real of the same precision (S, W, norms) */
    int cx;
    double tol; /* the degenerate tolerance of the truncation rule */
    zval (*get)(const void *p, int64_t i);
    void (*set)(void *p, int64_t i, zval v);
    double (*rget)(const void *p, int64_t i);
    void (*rset)(void *p, int64_t i, double v);
    double (*mag)(const void *p, int64_t i);
    int64_t (*kept)(const void *s, int64_t k, int64_t bound, const tf__truncation *t, double tol,
                    double *discarded, double *total);
    lapack_int (*gesdd)(char jobz, lapack_int m, lapack_int n, void *a, lapack_int lda, void *s,
                        void *u, lapack_int ldu, void *vt, lapack_int ldvt, void *work,
                        lapack_int lwork, void *rwork, lapack_int *iwork);
    lapack_int (*geqrf)(lapack_int m, lapack_int n, void *a, lapack_int lda, void *tau, void *work,
                        lapack_int lwork);
    lapack_int (*orgqr)(lapack_int m, lapack_int n, lapack_int k, void *a, lapack_int lda,
                        const void *tau, void *work, lapack_int lwork);
    lapack_int (*heevd)(char jobz, char uplo, lapack_int n, void *a, void *w, void *work,
                        lapack_int lwork, void *rwork, lapack_int lrwork, lapack_int *iwork,
                        lapack_int liwork);
    lapack_int (*potrf)(char uplo, lapack_int n, void *a);
    lapack_int (*getrf)(lapack_int n, void *a, lapack_int *ipiv);
    lapack_int (*getrs)(lapack_int n, lapack_int nrhs, const void *a, const lapack_int *ipiv,
                        void *b);
    lapack_int (*getri)(lapack_int n, void *a, const lapack_int *ipiv, void *work,
                        lapack_int lwork);
    /* The loops that visit every entry of a matrix, typed (DEFINE_LOOPS). */
    int64_t (*largest)(const void *x, int64_t n, int64_t stride, double *big);
    void (*largest_cols)(const void *x, int64_t rows, int64_t cols, int64_t ld, int64_t *best,
                         double *big, double *work);
    void (*scale)(void *x, int64_t n, int64_t stride, zval f);
    void (*scale_cols)(void *x, int64_t rows, int64_t cols, int64_t ld, const zval *f);
    void (*gather)(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows,
                   int64_t cols, const int64_t *idx, int cj, const zval *ph);
} la_type;

/* Element access of a dtype of element type T and real type R; ABS is |x| in T's precision. */
#define DEFINE_ACCESS(P, T, R, ABS, RULE)                                                          \
    static zval P##_get(const void *p, int64_t i) { return ((const T *)p)[i]; }                  \
    static void P##_set(void *p, int64_t i, zval v) { ((T *)p)[i] = (T)v; }                      \
    static double P##_rget(const void *p, int64_t i) { return ((const R *)p)[i]; }               \
    static void P##_rset(void *p, int64_t i, double v) { ((R *)p)[i] = (R)v; }                   \
    static double P##_mag(const void *p, int64_t i) { return ABS(((const T *)p)[i]); }           \
    static int64_t P##_kept(const void *s, int64_t k, int64_t bound, const tf__truncation *t,    \
                            double tol, double *discarded, double *total) {                      \
        return RULE((const R *)s, k, bound, t, tol, discarded, total);                           \
    }

/*
 * The loops over whole matrices, typed so they run at memory speed: MUL(f, x)
 * is the zval f times the element x, CJ(x) the conjugate (the identity for a
 * real dtype), ABS as for DEFINE_ACCESS; SKIP1 is 1 where a product by
 * exactly 1 could still change an element (a complex -0 part), so those are
 * skipped as the scalar code always did. The transposes go by tiles, so the
 * strided side of each stays in cache.
 *
 *   largest:  the index of the first entry of largest magnitude of n
 *             entries `stride` apart (exact comparisons of ABS), and that
 *             magnitude (LARGEST_REAL, LARGEST_COMPLEX);
 *   largest_cols: the same for each of the first `cols` columns of a
 *             row-major rows x ld matrix, in passes along its rows (a
 *             column's entries are ld apart: one cache line each);
 *   scale:    n entries `stride` apart times f;
 *   scale_cols: column j of the first `cols` of a row-major rows x ld
 *             matrix times f[j], by rows;
 *   gather:   dst[r*ldd + c] = ph(c) op(src[s(c)*lds + r]) for r < rows,
 *             c < cols, with s(c) = idx ? idx[c] : c, op the conjugate when
 *             cj and ph(c) = ph ? ph[c] : 1: the columns of a column-major
 *             matrix (some, in some order, each with a phase) as the columns
 *             of a row-major one.
 */
#define LA_TILE 16      /* QR's bands of R's rows */
#define LA_TILE_ROWS 64 /* gather: 64 rows of dst by 4 columns; at 1024 x 1024 f64 on the */
#define LA_TILE_COLS 4  /* build machine 2.1 ms a transpose, against 3.3 ms by 64 x 8 tiles */
#define DEFINE_LOOPS(P, T, MUL, CJ, SKIP1)                                                         \
    static void P##_scale(void *x, int64_t n, int64_t stride, zval f) {                          \
        T *v = x;                                                                                \
        for (int64_t i = 0; i < n; i++) v[i * stride] = MUL(f, v[i * stride]);                   \
    }                                                                                            \
    static void P##_scale_cols(void *x, int64_t rows, int64_t cols, int64_t ld, const zval *f) { \
        T *v = x;                                                                                \
        for (int64_t r = 0; r < rows; r++)                                                       \
            for (int64_t j = 0; j < cols; j++)                                                   \
                if (!(SKIP1) || f[j] != 1) v[r * ld + j] = MUL(f[j], v[r * ld + j]);             \
    }                                                                                            \
    static void P##_gather(void *dst, int64_t ldd, const void *src, int64_t lds, int64_t rows,   \
                           int64_t cols, const int64_t *idx, int cj, const zval *ph) {           \
        T *d = dst;                                                                              \
        const T *s = src;                                                                        \
        for (int64_t r0 = 0; r0 < rows; r0 += LA_TILE_ROWS)                                      \
            for (int64_t c0 = 0; c0 < cols; c0 += LA_TILE_COLS) {                                \
                const int64_t r1 = r0 + LA_TILE_ROWS < rows ? r0 + LA_TILE_ROWS : rows;          \
                const int64_t c1 = c0 + LA_TILE_COLS < cols ? c0 + LA_TILE_COLS : cols;          \
                if (!idx && !cj && !ph) { /* the plain transpose, as tight as it goes */         \
                    for (int64_t r = r0; r < r1; r++)                                            \
                        for (int64_t c = c0; c < c1; c++) d[r * ldd + c] = s[c * lds + r];       \
                    continue;                                                                    \
                }                                                                                \
                for (int64_t r = r0; r < r1; r++)                                                \
                    for (int64_t c = c0; c < c1; c++) {                                          \
                        T v = s[(idx ? idx[c] : c) * lds + r];                                   \
                        if (cj) v = CJ(v);                                                       \
                        if (ph && (!(SKIP1) || ph[c] != 1)) v = MUL(ph[c], v);                   \
                        d[r * ldd + c] = v;                                                      \
                    }                                                                            \
            }                                                                                    \
    }

/* The first largest |x| of a real dtype: fabs is exact, one comparison an entry. */
#define LARGEST_REAL(P, T, ABS)                                                                     \
    static int64_t P##_largest(const void *x, int64_t n, int64_t stride, double *big) {          \
        const T *v = x;                                                                          \
        int64_t best = 0;                                                                        \
        double b = ABS(v[0]);                                                                    \
        for (int64_t i = 1; i < n; i++) {                                                        \
            const double a = ABS(v[i * stride]);                                                 \
            if (a > b) {                                                                         \
                b = a;                                                                           \
                best = i;                                                                        \
            }                                                                                    \
        }                                                                                        \
        *big = b;                                                                                \
        return best;                                                                             \
    }                                                                                            \
    static void P##_largest_cols(const void *x, int64_t rows, int64_t cols, int64_t ld,          \
                                 int64_t *best, double *big, double *work) {                     \
        const T *v = x;                                                                          \
        (void)work;                                                                              \
        for (int64_t j = 0; j < cols; j++) {                                                     \
            best[j] = 0;                                                                         \
            big[j] = ABS(v[j]);                                                                  \
        }                                                                                        \
        for (int64_t r = 1; r < rows; r++)                                                       \
            for (int64_t j = 0; j < cols; j++) {                                                 \
                const double a = ABS(v[r * ld + j]);                                             \
                if (a > big[j]) {                                                                \
                    big[j] = a;                                                                  \
                    best[j] = r;                                                                 \
                }                                                                                \
            }                                                                                    \
    }

/*
 * The first largest |x| of a complex dtype, where ABS (cabs, cabsf: hypot)
 * costs a library call. A first pass takes the squared magnitudes re^2 +
 * im^2 in double (a few roundings off the true |x|^2), and ABS is taken only
 * of the entries within SLACK of the largest of those: every entry whose ABS
 * could equal or pass the largest ABS is among them (SLACK, relative, is
 * far above ABS's rounding in the dtype's precision, and above the squares'),
 * so the answer is that of comparing ABS everywhere. A largest square that
 * may have underflowed or overflowed (all entries tiny, or huge) compares
 * ABS everywhere.
 */
#define LARGEST_COMPLEX(P, T, ABS, SLACK)                                                           \
    static int64_t P##_largest(const void *x, int64_t n, int64_t stride, double *big) {          \
        const T *v = x;                                                                          \
        double top = 0;                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                        \
            const double re = creal(v[i * stride]), im = cimag(v[i * stride]);                   \
            const double sq = re * re + im * im;                                                 \
            if (sq > top) top = sq;                                                              \
        }                                                                                        \
        const int screen = top > 0x1p-900 && top < 0x1p900;                                      \
        const double floor_sq = screen ? top * (1 - (SLACK)) : 0;                                \
        int64_t best = 0;                                                                        \
        double b = -1;                                                                           \
        for (int64_t i = 0; i < n; i++) {                                                        \
            const double re = creal(v[i * stride]), im = cimag(v[i * stride]);                   \
            if (screen && re * re + im * im < floor_sq) continue;                                \
            const double a = ABS(v[i * stride]);                                                 \
            if (a > b) {                                                                         \
                b = a;                                                                           \
                best = i;                                                                        \
            }                                                                                    \
        }                                                                                        \
        *big = b;                                                                                \
        return best;                                                                             \
    }                                                                                            \
    static void P##_largest_cols(const void *x, int64_t rows, int64_t cols, int64_t ld,          \
                                 int64_t *best, double *big, double *floor_sq) {                 \
        const T *v = x;                                                                          \
        for (int64_t j = 0; j < cols; j++) floor_sq[j] = 0;                                      \
        for (int64_t r = 0; r < rows; r++)                                                       \
            for (int64_t j = 0; j < cols; j++) {                                                 \
                const double re = creal(v[r * ld + j]), im = cimag(v[r * ld + j]);               \
                const double sq = re * re + im * im;                                             \
                if (sq > floor_sq[j]) floor_sq[j] = sq;                                          \
            }                                                                                    \
        for (int64_t j = 0; j < cols; j++) { /* the top square, then its floor (0: no screen) */ \
            const double top = floor_sq[j];                                                      \
            floor_sq[j] = top > 0x1p-900 && top < 0x1p900 ? top * (1 - (SLACK)) : 0;             \
            best[j] = 0;                                                                         \
            big[j] = -1;                                                                         \
        }                                                                                        \
        for (int64_t r = 0; r < rows; r++)                                                       \
            for (int64_t j = 0; j < cols; j++) {                                                 \
                const double re = creal(v[r * ld + j]), im = cimag(v[r * ld + j]);               \
                if (re * re + im * im < floor_sq[j]) continue;                                   \
                const double a = ABS(v[r * ld + j]);                                             \
                if (a > big[j]) {                                                                \
                    big[j] = a;                                                                  \
                    best[j] = r;                                                                 \
                }                                                                                \
            }                                                                                    \
    }

#define MUL_REAL(f, x) ((x) * creal(f))
#define MUL_C64(f, x) ((float complex)((f) * (zval)(x)))
#define MUL_C128(f, x) ((f) * (x))
#define CJ_REAL(x) (x)

/* The routines whose arguments are the same for real and complex dtypes (square lda = n). */
#define DEFINE_LAPACK_COMMON(P, ORGQR)                                                             \
    static lapack_int P##_geqrf(lapack_int m, lapack_int n, void *a, lapack_int lda, void *tau,  \
                                void *work, lapack_int lwork) {                                  \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##geqrf(&m, &n, a, &lda, tau, work, &lwork, &info);                            \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_orgqr(lapack_int m, lapack_int n, lapack_int k, void *a,               \
                                lapack_int lda, const void *tau, void *work, lapack_int lwork) { \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##ORGQR(&m, &n, &k, a, &lda, tau, work, &lwork, &info);                        \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_potrf(char uplo, lapack_int n, void *a) {                              \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##potrf(&uplo, &n, a, &n, &info);                                              \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_getrf(lapack_int n, void *a, lapack_int *ipiv) {                       \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##getrf(&n, &n, a, &n, ipiv, &info);                                           \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_getrs(lapack_int n, lapack_int nrhs, const void *a,                    \
                                const lapack_int *ipiv, void *b) {                               \
        lapack_int info = 0;                                                                     \
        const char trans = 'T';                                                                  \
        LAPACK_##P##getrs(&trans, &n, &nrhs, a, &n, ipiv, b, &n, &info);                         \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_getri(lapack_int n, void *a, const lapack_int *ipiv, void *work,       \
                                lapack_int lwork) {                                              \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##getri(&n, a, &n, ipiv, work, &lwork, &info);                                 \
        return info;                                                                             \
    }

/* gesdd and syevd of a real dtype: no rwork. */
#define DEFINE_LAPACK_REAL(P)                                                                      \
    static lapack_int P##_gesdd(char jobz, lapack_int m, lapack_int n, void *a, lapack_int lda,  \
                                void *s, void *u, lapack_int ldu, void *vt, lapack_int ldvt,     \
                                void *work, lapack_int lwork, void *rwork, lapack_int *iwork) {  \
        lapack_int info = 0;                                                                     \
        (void)rwork;                                                                             \
        LAPACK_##P##gesdd(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, iwork,    \
                          &info);                                                                \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_heevd(char jobz, char uplo, lapack_int n, void *a, void *w,            \
                                void *work, lapack_int lwork, void *rwork, lapack_int lrwork,    \
                                lapack_int *iwork, lapack_int liwork) {                          \
        lapack_int info = 0;                                                                     \
        (void)rwork;                                                                             \
        (void)lrwork;                                                                            \
        LAPACK_##P##syevd(&jobz, &uplo, &n, a, &n, w, work, &lwork, iwork, &liwork, &info);      \
        return info;                                                                             \
    }

/* gesdd and heevd of a complex dtype, with their real workspace. */
#define DEFINE_LAPACK_COMPLEX(P)                                                                   \
    static lapack_int P##_gesdd(char jobz, lapack_int m, lapack_int n, void *a, lapack_int lda,  \
                                void *s, void *u, lapack_int ldu, void *vt, lapack_int ldvt,     \
                                void *work, lapack_int lwork, void *rwork, lapack_int *iwork) {  \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##gesdd(&jobz, &m, &n, a, &lda, s, u, &ldu, vt, &ldvt, work, &lwork, rwork,    \
                          iwork, &info);                                                         \
        return info;                                                                             \
    }                                                                                            \
    static lapack_int P##_heevd(char jobz, char uplo, lapack_int n, void *a, void *w,            \
                                void *work, lapack_int lwork, void *rwork, lapack_int lrwork,    \
                                lapack_int *iwork, lapack_int liwork) {                          \
        lapack_int info = 0;                                                                     \
        LAPACK_##P##heevd(&jobz, &uplo, &n, a, &n, w, work, &lwork, rwork, &lrwork, iwork,       \
                          &liwork, &info);                                                       \
        return info;                                                                             \
    }

DEFINE_ACCESS(s, float, float, fabsf, tf__kept_rank_f32)
DEFINE_ACCESS(d, double, double, fabs, tf__kept_rank_f64)
DEFINE_ACCESS(c, float complex, float, cabsf, tf__kept_rank_f32)
DEFINE_ACCESS(z, double complex, double, cabs, tf__kept_rank_f64)
DEFINE_LOOPS(s, float, MUL_REAL, CJ_REAL, 0)
DEFINE_LOOPS(d, double, MUL_REAL, CJ_REAL, 0)
DEFINE_LOOPS(c, float complex, MUL_C64, conjf, 1)
DEFINE_LOOPS(z, double complex, MUL_C128, conj, 1)
LARGEST_REAL(s, float, fabsf)
LARGEST_REAL(d, double, fabs)
LARGEST_COMPLEX(c, float complex, cabsf, 0x1p-16)
LARGEST_COMPLEX(z, double complex, cabs, 0x1p-40)
DEFINE_LAPACK_COMMON(s, orgqr)
DEFINE_LAPACK_COMMON(d, orgqr)
DEFINE_LAPACK_COMMON(c, ungqr)
DEFINE_LAPACK_COMMON(z, ungqr)
DEFINE_LAPACK_REAL(s)
DEFINE_LAPACK_REAL(d)
DEFINE_LAPACK_COMPLEX(c)
DEFINE_LAPACK_COMPLEX(z)

#define LA_TYPE(P, DT, T, R, CX, TOL)                                                              \
    {DT,        sizeof(T), sizeof(R), CX,       TOL,      P##_get,   P##_set,   P##_rget,          \
     P##_rset,  P##_mag,   P##_kept,  P##_gesdd, P##_geqrf, P##_orgqr, P##_heevd, P##_potrf,       \
     P##_getrf, P##_getrs, P##_getri, P##_largest, P##_largest_cols, P##_scale,                 \
     P##_scale_cols, P##_gather}

static const la_type la_types[] = {
    LA_TYPE(s, TF_F32, float, float, 0, TF__DEGENERATE_TOL_F32),
    LA_TYPE(d, TF_F64, double, double, 0, TF__DEGENERATE_TOL_F64),
    LA_TYPE(c, TF_C64, float complex, float, 1, TF__DEGENERATE_TOL_F32),
    LA_TYPE(z, TF_C128, double complex, double, 1, TF__DEGENERATE_TOL_F64),
};

static const la_type *la_type_of(tf_dtype dt) {
    for (size_t i = 0; i < sizeof la_types / sizeof la_types[0]; i++)
        if (la_types[i].dtype == dt) return &la_types[i];
    return NULL;
}

/* One call of the entry: the operation, its dtype's table, and where a failure is worded. */
typedef struct la_run {
    void *stream; /* the backend's stream: its workspace serves the call's scratch */
    const tfd_linalg_op *op;
    const tf__linalg *d;
    const la_type *t;
    const char *name;
    char *msg;
    size_t len;
} la_run;

/* "<op>: matrix <i> of <b> <what>": every failure names the first matrix of the batch that failed. */
static tf_status fail_matrix(const la_run *r, tf_status st, int64_t i, const char *what) {
    snprintf(r->msg, r->len, "%s: matrix %lld of %lld %s", r->name, (long long)i,
             (long long)r->d->b, what);
    return st;
}

/* A negative info is an argument LAPACK refused: a bug here, never the caller's data. */
static tf_status fail_lapack(const la_run *r, const char *routine, lapack_int info) {
    snprintf(r->msg, r->len, "%s: LAPACK's %s refused its argument %d", r->name, routine,
             (int)-info);
    return TF_ERR_INTERNAL;
}

/* ---- scratch: one allocation per call, carved into aligned pieces, freed on every path ---- */

typedef struct scratch {
    size_t used;
    char *base;
    int kept; /* base is the stream's kept workspace (tfd_cpu_scratch_take) */
} scratch;

/* Reserves count elements of `size` bytes (64-byte aligned); returns the piece's offset. */
static size_t reserve(scratch *s, size_t count, size_t size) {
    const size_t off = s->used;
    s->used += (count * size + 63) / 64 * 64;
    return off;
}

/* The pieces reserved, from the stream's workspace: its pages stay touched from one call to the next. */
static tf_status scratch_alloc(const la_run *r, scratch *s) {
    s->base = tfd_cpu_scratch_take(r->stream, s->used, &s->kept);
    if (s->base) return TF_OK;
    snprintf(r->msg, r->len, "%s: out of host memory for %zu bytes of scratch", r->name, s->used);
    return TF_ERR_NO_MEMORY;
}

static void scratch_free(const la_run *r, scratch *s) {
    tfd_cpu_scratch_give(r->stream, s->base, s->kept);
    s->base = NULL;
}

/* Element `index` of a buffer of `size`-byte elements. */
static char *at(const void *base, int64_t index, size_t size) {
    return (char *)base + (size_t)index * size;
}

/*
 * A workspace size LAPACK answered to lwork = -1 (in the real part of
 * work[0]), as a count; 0 when it does not fit a lapack_int.
 */
static int query_size(double v, lapack_int *out) {
    if (!(v >= 0) || v > (double)INT_MAX) return 0;
    *out = v < 1 ? 1 : (lapack_int)ceil(v);
    return 1;
}

static tf_status too_large(const la_run *r, const char *routine) {
    snprintf(r->msg, r->len, "%s: LAPACK's %s asks for more workspace than its integers count",
             r->name, routine);
    return TF_ERR_UNSUPPORTED;
}

/* ---- element helpers shared by the kinds ---- */

/* The leading `cols` columns of a row-major matrix of `scols` columns, into one of `dcols`. */
static void copy_columns(size_t size, void *dst, int64_t dcols, const void *src, int64_t scols,
                         int64_t rows, int64_t cols) {
    for (int64_t i = 0; i < rows; i++)
        memcpy(at(dst, i * dcols, size), at(src, i * scols, size), (size_t)cols * size);
}

static void scale_vec(const la_type *t, void *x, int64_t n, int64_t stride, zval f) {
    for (int64_t i = 0; i < n; i++) t->set(x, i * stride, t->get(x, i * stride) * f);
}

static void zero_vec(const la_type *t, void *x, int64_t n, int64_t stride) {
    for (int64_t i = 0; i < n; i++) memset(at(x, i * stride, t->size), 0, t->size);
}

/*
 * Makes the first entry of largest magnitude of a vector (n entries, stride
 * apart; exact comparisons) real and positive, and returns the phase applied
 * so a partner vector can take the conjugate one. That entry is then set to
 * its magnitude exactly, where the product could keep a rounding-sized
 * imaginary part.
 */
static zval gauge_vec(const la_type *t, void *x, int64_t n, int64_t stride) {
    double big;
    const int64_t best = t->largest(x, n, stride, &big);
    if (big == 0) return 1;
    const zval p = conj(t->get(x, best * stride)) / big;
    if (p != 1) t->scale(x, n, stride, p);
    t->set(x, best * stride, big);
    return p;
}

/*
 * Whether n contiguous reals of `rsize` bytes are all finite, on the bits:
 * the exponent field of each, plus one in its lowest place, carries into the
 * sign bit exactly when the field is all ones (inf or nan). Four at a time,
 * or'ed together, so the loop is a pass of integer work at memory speed.
 */
#define FINITE_LOOP(U, FIELD, ONE, TOP)                                                            \
    do {                                                                                           \
        U acc = 0;                                                                                 \
        int64_t i = 0;                                                                             \
        for (; i + 4 <= n; i += 4) {                                                               \
            U u[4];                                                                                \
            memcpy(u, (const char *)x + (size_t)i * sizeof(U), sizeof u);                          \
            acc |= ((u[0] & FIELD) + ONE) | ((u[1] & FIELD) + ONE) | ((u[2] & FIELD) + ONE) |      \
                   ((u[3] & FIELD) + ONE);                                                         \
        }                                                                                          \
        for (; i < n; i++) {                                                                       \
            U u;                                                                                   \
            memcpy(&u, (const char *)x + (size_t)i * sizeof(U), sizeof u);                         \
            acc |= (u & FIELD) + ONE;                                                              \
        }                                                                                          \
        return !(acc >> TOP);                                                                      \
    } while (0)

static int finite_reals(const void *x, int64_t n, size_t rsize) {
    if (rsize == sizeof(double))
        FINITE_LOOP(uint64_t, UINT64_C(0x7ff0000000000000), UINT64_C(0x0010000000000000), 63);
    FINITE_LOOP(uint32_t, UINT32_C(0x7f800000), UINT32_C(0x00800000), 31);
}

/*
 * Whether the part of a row-major rows x cols matrix LAPACK will read is all
 * finite: 'A' all of it, 'L' the lower triangle, 'U' the upper (diagonal
 * included); eigh and cholesky ignore the other triangle, garbage included.
 * A complex entry is its two reals.
 */
static int finite_part(const la_type *t, const void *a, int64_t rows, int64_t cols, char part) {
    const int64_t parts = t->cx ? 2 : 1;
    if (part == 'A') return finite_reals(a, rows * cols * parts, t->rsize);
    for (int64_t i = 0; i < rows; i++) {
        const int64_t j0 = part == 'U' ? i : 0, j1 = part == 'L' && i + 1 < cols ? i + 1 : cols;
        if (j1 > j0 && !finite_reals(at(a, i * cols + j0, t->size), (j1 - j0) * parts, t->rsize))
            return 0;
    }
    return 1;
}

/* nan or inf reaching a solver fails the call first, naming the first matrix (of A or B) holding it. */
static tf_status check_finite(const la_run *r, char part) {
    const tf__linalg *d = r->d;
    const tfd_linalg_op *op = r->op;
    for (int64_t i = 0; i < d->b; i++) {
        if (!finite_part(r->t, at(op->in[0].data, i * d->m * d->n, r->t->size), d->m, d->n, part) ||
            (op->n_inputs > 1 && !finite_part(r->t, at(op->in[1].data, i * d->n * d->nrhs,
                                                       r->t->size), d->n, d->nrhs, 'A')))
            return fail_matrix(r, TF_ERR_NOT_FINITE, i, "holds nan or inf");
    }
    return TF_OK;
}

/* ---- SVD ---- */

/*
 * gesdd's workspace for an M x N column-major problem: lwork by query,
 * complex rwork by LAPACK's documented bound (it has no query), iwork is
 * 8 min(M, N) (the caller's).
 */
static tf_status gesdd_plan(const la_run *r, char jobz, lapack_int M, lapack_int N,
                            lapack_int ldu, lapack_int ldvt, lapack_int *lwork, size_t *lrwork) {
    zval q[2] = {0}, dummy[2] = {0};
    lapack_int iq[8] = {0};
    const lapack_int info = r->t->gesdd(jobz, M, N, dummy, M, dummy, dummy, ldu, dummy, ldvt, q,
                                        -1, dummy, iq);
    if (info != 0) return fail_lapack(r, "gesdd", info);
    if (!query_size(r->t->rget(q, 0), lwork)) return too_large(r, "gesdd");
    const size_t mn = (size_t)(M < N ? M : N), mx = (size_t)(M < N ? N : M);
    const size_t full = 5 * mn * mn + 5 * mn, wide = 2 * mx * mn + 2 * mn * mn + mn;
    *lrwork = !r->t->cx ? 0 : jobz == 'N' ? 7 * mn : full > wide ? full : wide;
    return TF_OK;
}

/*
 * The SVD's gauge on what gesdd wrote (u: m rows of uw columns, vh: rows of
 * n): each of the first r1 columns of U gets its largest entry real positive
 * and the matching row of Vh (j < r2) the conjugate phase, so U S Vh stays
 * A; rows of a complete Vh past U's columns (n > m) get the rule of their
 * own. U's columns are searched and scaled in passes along its rows (a
 * column's entries are uw apart, so column by column each entry cost a
 * cache line: a quarter of the gauge's time at 512 x 512); best, big, work
 * and ph are scratch of r1 entries.
 */
static void svd_gauge(const la_type *t, void *u, int64_t m, int64_t uw, void *vh, int64_t n,
                      int64_t r1, int64_t r2, int64_t *best, double *big, double *work, zval *ph) {
    t->largest_cols(u, m, r1, uw, best, big, work);
    for (int64_t j = 0; j < r1; j++)
        ph[j] = big[j] == 0 ? 1 : conj(t->get(u, best[j] * uw + j)) / big[j];
    t->scale_cols(u, m, r1, uw, ph);
    for (int64_t j = 0; j < r1; j++) {
        if (big[j] != 0) t->set(u, best[j] * uw + j, big[j]); /* exactly real, after the product */
        if (j < r2 && ph[j] != 1) t->scale(at(vh, j * n, t->size), n, 1, conj(ph[j]));
    }
    for (int64_t j = r1; j < r2; j++) gauge_vec(t, at(vh, j * n, t->size), n, 1);
}

/*
 * One matrix's truncation: the shared rule over all k values s (the real
 * type) gives the kept rank; kept values may be renormalized to the norm of
 * all of them, entries past the rank become zeros, and absorb moves the
 * (renormalized) values into U, Vh or both. u (m x w), S (w) and vh (w x n)
 * are the outputs, w = desc.rank; u is NULL for values only.
 */
static void svd_truncate(const la_run *r, const void *s, void *u, void *S, void *vh,
                         double *report) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t w = d->rank, m = d->m, n = d->n;
    double discarded, total;
    const int64_t kept = t->kept(s, d->k, w, &d->trunc, t->tol, &discarded, &total);
    const double f =
        d->trunc.renormalize && total - discarded > 0 ? sqrt(total / (total - discarded)) : 1;
    for (int64_t j = 0; j < w; j++) t->rset(S, j, j < kept ? t->rget(s, j) * f : 0);
    for (int64_t j = 0; u && j < w; j++) {
        void *col = at(u, j, t->size), *row = at(vh, j * n, t->size);
        if (j >= kept) {
            zero_vec(t, col, m, w);
            zero_vec(t, row, n, 1);
            continue;
        }
        const double sj = t->rget(S, j);
        switch (d->trunc.absorb) {
        case TF__ABSORB_LEFT: scale_vec(t, col, m, w, sj); break;
        case TF__ABSORB_RIGHT: scale_vec(t, row, n, 1, sj); break;
        case TF__ABSORB_BOTH:
            scale_vec(t, col, m, w, sqrt(sj));
            scale_vec(t, row, n, 1, sqrt(sj));
            break;
        case TF__ABSORB_NONE: break;
        }
    }
    report[0] = (double)kept;
    report[1] = discarded;
    report[2] = total > 0 ? discarded / total : 0;
}

/*
 * SVD by gesdd on A^T as it lies: A^T = U' S V'^H makes A's U the
 * column-major buffer of V'^H and A's Vh that of U' (transposes, no
 * conjugation), so gesdd writes straight into the outputs unless a bound
 * below k asks for the leading columns of a scratch copy. Then the gauge,
 * then the truncation and absorb.
 */
static tf_status run_svd(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const tfd_linalg_op *op = r->op;
    const int64_t m = d->m, n = d->n, k = d->k, w = d->rank;
    const int uv = d->compute_uv;
    int o = 0;
    void *U = uv ? op->out[o++].data : NULL;
    void *S = op->out[o++].data;
    void *Vh = uv ? op->out[o++].data : NULL;
    double *report = d->truncate ? op->out[o++].data : NULL;
    /* What gesdd makes (uw columns of U, vr rows of Vh) and what the outputs keep (r1, r2). */
    const int64_t uw = d->full ? m : k, vr = d->full ? n : k;
    const int64_t r1 = d->full ? m : w, r2 = d->full ? n : w;
    const int direct = uw == r1;
    const char jobz = !uv ? 'N' : d->full ? 'A' : 'S';
    const lapack_int ldvt = (lapack_int)(uv ? uw : 1);
    lapack_int lwork;
    size_t lrwork;
    tf_status st = gesdd_plan(r, jobz, (lapack_int)n, (lapack_int)m, (lapack_int)n, ldvt, &lwork,
                              &lrwork);
    if (st != TF_OK) return st;
    scratch sc = {0, NULL, 0};
    const size_t o_a = reserve(&sc, (size_t)(m * n), t->size), o_s = reserve(&sc, (size_t)k, t->rsize);
    const size_t o_w = reserve(&sc, (size_t)lwork, t->size), o_rw = reserve(&sc, lrwork, t->rsize);
    const size_t o_iw = reserve(&sc, 8 * (size_t)k, sizeof(lapack_int));
    const size_t o_u = uv && !direct ? reserve(&sc, (size_t)(m * uw), t->size) : 0;
    const size_t o_v = uv && !direct ? reserve(&sc, (size_t)(vr * n), t->size) : 0;
    const size_t g = uv ? (size_t)r1 : 0; /* the gauge's scratch */
    const size_t o_gb = reserve(&sc, g, sizeof(int64_t)), o_gm = reserve(&sc, g, sizeof(double));
    const size_t o_gw = reserve(&sc, g, sizeof(double)), o_gp = reserve(&sc, g, sizeof(zval));
    if ((st = scratch_alloc(r, &sc)) != TF_OK) return st;
    void *a = sc.base + o_a, *s = sc.base + o_s;
    for (int64_t i = 0; i < d->b && st == TF_OK; i++) {
        memcpy(a, at(op->in[0].data, i * m * n, t->size), (size_t)(m * n) * t->size);
        void *u = !uv ? a : direct ? at(U, i * m * uw, t->size) : sc.base + o_u;
        void *vh = !uv ? a : direct ? at(Vh, i * vr * n, t->size) : sc.base + o_v;
        const lapack_int info = t->gesdd(jobz, (lapack_int)n, (lapack_int)m, a, (lapack_int)n, s,
                                         vh, (lapack_int)n, u, ldvt, sc.base + o_w, lwork,
                                         sc.base + o_rw, (lapack_int *)(void *)(sc.base + o_iw));
        if (info != 0) {
            st = info > 0 ? fail_matrix(r, TF_ERR_NOT_CONVERGED, i, "did not converge")
                          : fail_lapack(r, "gesdd", info);
            break;
        }
        void *Ui = uv ? at(U, i * m * r1, t->size) : NULL;
        void *Vhi = uv ? at(Vh, i * r2 * n, t->size) : NULL;
        void *Si = at(S, i * w, t->rsize);
        if (uv) {
            svd_gauge(t, u, m, uw, vh, n, r1, r2, (int64_t *)(void *)(sc.base + o_gb),
                      (double *)(void *)(sc.base + o_gm), (double *)(void *)(sc.base + o_gw),
                      (zval *)(void *)(sc.base + o_gp));
            if (!direct) {
                copy_columns(t->size, Ui, r1, u, uw, m, r1);
                memcpy(Vhi, vh, (size_t)(r2 * n) * t->size);
            }
        }
        if (d->truncate)
            svd_truncate(r, s, Ui, Si, Vhi, report + TF__REPORT_ENTRIES * i);
        else
            memcpy(Si, s, (size_t)w * t->rsize);
    }
    scratch_free(r, &sc);
    return st;
}

/* ---- QR ---- */

/*
 * QR by geqrf and orgqr/ungqr on a column-major copy of A (a tiled
 * transpose of the row-major input), wide enough for a complete Q to be
 * formed in place. (The LQ factorization of A^T as it lies would need no
 * copy, but OpenBLAS's gelqf and orglq, whose panels run along rows of the
 * column-major buffer, take about 1.4 times as long as geqrf and orgqr.)
 * R is the factor's upper triangle transposed out, exact zeros below; its
 * row j then takes the gauge's phase p = conj(d)/|d| of its diagonal d
 * (set to |d| exactly), and column j of orgqr's result is scaled by
 * conj(p) in the same pass that transposes Q out: Q R stays A.
 */
static tf_status run_qr(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const tfd_linalg_op *op = r->op;
    const int64_t m = d->m, n = d->n, k = d->k, kq = d->full ? m : k;
    const int uv = d->compute_uv;
    void *Q = uv ? op->out[0].data : NULL;
    void *R = op->out[uv ? 1 : 0].data;
    const int64_t wc = n > kq ? n : kq;
    zval q[2] = {0}, dummy[2] = {0};
    lapack_int lwork, lw2 = 1;
    lapack_int info = t->geqrf((lapack_int)m, (lapack_int)n, dummy, (lapack_int)m, dummy, q, -1);
    if (info != 0) return fail_lapack(r, "geqrf", info);
    if (!query_size(t->rget(q, 0), &lwork)) return too_large(r, "geqrf");
    if (uv) {
        info = t->orgqr((lapack_int)m, (lapack_int)kq, (lapack_int)k, dummy, (lapack_int)m, dummy,
                        q, -1);
        if (info != 0) return fail_lapack(r, "orgqr", info);
        if (!query_size(t->rget(q, 0), &lw2)) return too_large(r, "orgqr");
    }
    if (lw2 > lwork) lwork = lw2;
    scratch sc = {0, NULL, 0};
    const size_t o_a = reserve(&sc, (size_t)(m * wc), t->size), o_tau = reserve(&sc, (size_t)k, t->size);
    const size_t o_w = reserve(&sc, (size_t)lwork, t->size);
    const size_t o_ph = reserve(&sc, (size_t)kq, sizeof(zval));
    tf_status st = scratch_alloc(r, &sc);
    if (st != TF_OK) return st;
    void *a = sc.base + o_a, *tau = sc.base + o_tau, *work = sc.base + o_w;
    zval *ph = (zval *)(void *)(sc.base + o_ph);
    for (int64_t i = 0; i < d->b; i++) {
        t->gather(a, m, at(op->in[0].data, i * m * n, t->size), n, n, m, NULL, 0, NULL);
        info = t->geqrf((lapack_int)m, (lapack_int)n, a, (lapack_int)m, tau, work, lwork);
        if (info != 0) {
            st = fail_lapack(r, "geqrf", info);
            break;
        }
        void *Ri = at(R, i * kq * n, t->size);
        for (int64_t j = 0; j < k; j += LA_TILE) /* the bands of R's rows, from the diagonal on */
            t->gather(at(Ri, j * n + j, t->size), n, at(a, j * m + j, t->size), m,
                      k - j < LA_TILE ? k - j : LA_TILE, n - j, NULL, 0, NULL);
        for (int64_t j = 0; j < kq; j++) {
            void *row = at(Ri, j * n, t->size);
            if (j >= k) { /* a complete R's rows past k */
                memset(row, 0, (size_t)n * t->size);
                continue;
            }
            memset(row, 0, (size_t)j * t->size);
            ph[j] = 1;
            const double mag = t->mag(row, j);
            if (mag == 0) continue;
            const zval p = conj(t->get(row, j)) / mag;
            if (p != 1) t->scale(at(row, j, t->size), n - j, 1, p);
            t->set(row, j, mag);
            ph[j] = conj(p);
        }
        if (!uv) continue;
        info = t->orgqr((lapack_int)m, (lapack_int)kq, (lapack_int)k, a, (lapack_int)m, tau, work,
                        lwork);
        if (info != 0) {
            st = fail_lapack(r, "orgqr", info);
            break;
        }
        for (int64_t j = k; j < kq; j++) ph[j] = 1; /* a complete Q's columns past k */
        t->gather(at(Q, i * m * kq, t->size), kq, a, m, m, kq, NULL, 0, ph);
    }
    scratch_free(r, &sc);
    return st;
}

/* ---- eigh ---- */

/* The order of a truncated eigh: |w| descending, the larger w first among equal |w|, then LAPACK's. */
typedef struct eig_key {
    double mag, w;
    int64_t index;
} eig_key;

static int eig_order(const void *x, const void *y) {
    const eig_key *a = x, *b = y;
    if (a->mag != b->mag) return a->mag > b->mag ? -1 : 1;
    if (a->w != b->w) return a->w > b->w ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/*
 * Hermitian eigendecomposition by syevd/heevd on the column-major reading of
 * the buffer: the row-major lower triangle is the column-major upper one of
 * A^T = conj(A), which has A's eigenvalues and the conjugate eigenvectors,
 * each contiguous in LAPACK's result. LAPACK works on a copy of the input in
 * the stream's scratch; each kept vector's first entry of largest magnitude
 * is found there (a read of the contiguous vector), and one tiled pass then
 * writes the vectors out as V's columns, conjugated and times the phase p
 * that makes that entry real positive, in the truncation's order when there
 * is one. The largest entries are then set to their magnitudes exactly.
 * (Working in V itself and transposing it in place took twice as long as
 * this out-of-place pass: the swaps across the diagonal walk both triangles
 * at once.) Values only ask LAPACK for no vectors (jobz 'N').
 */
static tf_status run_eigh(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const tfd_linalg_op *op = r->op;
    const int64_t n = d->n, w = d->rank;
    const int uv = d->compute_uv;
    void *W = op->out[0].data;
    void *V = uv ? op->out[1].data : NULL;
    double *report = d->truncate ? op->out[uv ? 2 : 1].data : NULL;
    const char jobz = uv ? 'V' : 'N', uplo = d->upper ? 'L' : 'U';
    zval q[2] = {0}, rq[2] = {0}, dummy[2] = {0};
    lapack_int iq[2] = {0}, lwork, lrwork = 0, liwork;
    lapack_int info = t->heevd(jobz, uplo, (lapack_int)n, dummy, dummy, q, -1, rq, -1, iq, -1);
    if (info != 0) return fail_lapack(r, "heevd", info);
    if (!query_size(t->rget(q, 0), &lwork) || !query_size(iq[0], &liwork) ||
        (t->cx && !query_size(t->rget(rq, 0), &lrwork)))
        return too_large(r, "heevd");
    scratch sc = {0, NULL, 0};
    const size_t o_a = reserve(&sc, (size_t)(n * n), t->size);
    const size_t o_w = reserve(&sc, (size_t)n, t->rsize);
    const size_t o_work = reserve(&sc, (size_t)lwork, t->size);
    const size_t o_rw = reserve(&sc, (size_t)lrwork, t->rsize);
    const size_t o_iw = reserve(&sc, (size_t)liwork, sizeof(lapack_int));
    const size_t o_keys = reserve(&sc, d->truncate ? (size_t)n : 0, sizeof(eig_key));
    const size_t o_abs = reserve(&sc, d->truncate ? (size_t)n : 0, t->rsize);
    const size_t o_idx = reserve(&sc, uv ? (size_t)n : 0, sizeof(int64_t));
    const size_t o_best = reserve(&sc, uv ? (size_t)n : 0, sizeof(int64_t));
    const size_t o_big = reserve(&sc, uv ? (size_t)n : 0, sizeof(double));
    const size_t o_ph = reserve(&sc, uv ? (size_t)n : 0, sizeof(zval));
    tf_status st = scratch_alloc(r, &sc);
    if (st != TF_OK) return st;
    void *a = sc.base + o_a, *ev = sc.base + o_w, *absw = sc.base + o_abs;
    eig_key *keys = (eig_key *)(void *)(sc.base + o_keys);
    int64_t *idx = (int64_t *)(void *)(sc.base + o_idx);
    int64_t *best = (int64_t *)(void *)(sc.base + o_best);
    double *big = (double *)(void *)(sc.base + o_big);
    zval *ph = (zval *)(void *)(sc.base + o_ph);
    for (int64_t i = 0; i < d->b; i++) {
        memcpy(a, at(op->in[0].data, i * n * n, t->size), (size_t)(n * n) * t->size);
        info = t->heevd(jobz, uplo, (lapack_int)n, a, ev, sc.base + o_work, lwork, sc.base + o_rw,
                        lrwork, (lapack_int *)(void *)(sc.base + o_iw), liwork);
        if (info != 0) {
            st = info > 0 ? fail_matrix(r, TF_ERR_NOT_CONVERGED, i, "did not converge")
                          : fail_lapack(r, "heevd", info);
            break;
        }
        int64_t kept = n;
        if (d->truncate) {
            for (int64_t j = 0; j < n; j++) {
                const double v = t->rget(ev, j);
                keys[j] = (eig_key){fabs(v), v, j};
            }
            qsort(keys, (size_t)n, sizeof *keys, eig_order);
            for (int64_t j = 0; j < n; j++) t->rset(absw, j, keys[j].mag);
            double discarded, total;
            kept = t->kept(absw, n, w, &d->trunc, t->tol, &discarded, &total);
            double *rep = report + TF__REPORT_ENTRIES * i;
            rep[0] = (double)kept;
            rep[1] = discarded;
            rep[2] = total > 0 ? discarded / total : 0;
        }
        if (kept > w) kept = w;
        void *Wi = at(W, i * w, t->rsize);
        for (int64_t j = 0; j < w; j++) {
            const int64_t e = d->truncate ? keys[j].index : j;
            t->rset(Wi, j, j < kept ? t->rget(ev, e) : 0);
            if (!uv || j >= kept) continue;
            const void *vec = at(a, e * n, t->size);
            idx[j] = e;
            best[j] = t->largest(vec, n, 1, &big[j]);
            /* the column written out is conj(vec) times p = vec[best] / |vec[best]| */
            ph[j] = big[j] == 0 ? 1 : t->get(vec, best[j]) / big[j];
        }
        if (!uv) continue;
        void *Vi = at(V, i * n * w, t->size);
        t->gather(Vi, w, a, n, n, kept, d->truncate ? idx : NULL, t->cx, ph);
        for (int64_t row = 0; kept < w && row < n; row++)
            memset(at(Vi, row * w + kept, t->size), 0, (size_t)(w - kept) * t->size);
        for (int64_t j = 0; j < kept; j++)
            if (big[j] != 0) t->set(Vi, best[j] * w + j, big[j]);
    }
    scratch_free(r, &sc);
    return st;
}

/* ---- cholesky, solve, inv, det, slogdet ---- */

/*
 * Cholesky by potrf on the buffer as it lies: the row-major lower triangle
 * is the column-major upper one of conj(A) = U'^H U', and L = U'^T lies
 * exactly where the row-major L belongs (upper = 1 is the mirror image:
 * potrf 'L' gives U). The triangle not read is then zeroed.
 */
static tf_status run_cholesky(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t n = d->n;
    void *out = r->op->out[0].data;
    memcpy(out, r->op->in[0].data, (size_t)(d->b * n * n) * t->size);
    for (int64_t i = 0; i < d->b; i++) {
        void *c = at(out, i * n * n, t->size);
        const lapack_int info = t->potrf(d->upper ? 'L' : 'U', (lapack_int)n, c);
        if (info > 0) {
            char what[96];
            snprintf(what, sizeof what, "is not positive definite (leading minor %d)", (int)info);
            return fail_matrix(r, TF_ERR_NOT_POSITIVE_DEFINITE, i, what);
        }
        if (info < 0) return fail_lapack(r, "potrf", info);
        for (int64_t row = 0; row < n; row++) {
            if (d->upper) memset(at(c, row * n, t->size), 0, (size_t)row * t->size);
            else memset(at(c, row * n + row + 1, t->size), 0, (size_t)(n - row - 1) * t->size);
        }
    }
    return TF_OK;
}

/*
 * A X = B by getrf on A^T as it lies and getrs with 'T' (the transpose of
 * A^T is A itself; no conjugation). One right-hand side has the same bytes
 * in either order; several are transposed in and out.
 */
static tf_status run_solve(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const tfd_linalg_op *op = r->op;
    const int64_t n = d->n, nrhs = d->nrhs;
    scratch sc = {0, NULL, 0};
    const size_t o_lu = reserve(&sc, (size_t)(n * n), t->size);
    const size_t o_piv = reserve(&sc, (size_t)n, sizeof(lapack_int));
    const size_t o_b = reserve(&sc, nrhs > 1 ? (size_t)(n * nrhs) : 0, t->size);
    tf_status st = scratch_alloc(r, &sc);
    if (st != TF_OK) return st;
    void *lu = sc.base + o_lu, *bt = sc.base + o_b;
    lapack_int *ipiv = (lapack_int *)(void *)(sc.base + o_piv);
    for (int64_t i = 0; i < d->b; i++) {
        memcpy(lu, at(op->in[0].data, i * n * n, t->size), (size_t)(n * n) * t->size);
        lapack_int info = t->getrf((lapack_int)n, lu, ipiv);
        if (info != 0) {
            st = info > 0 ? fail_matrix(r, TF_ERR_SINGULAR, i, "is singular")
                          : fail_lapack(r, "getrf", info);
            break;
        }
        const void *Bi = at(op->in[1].data, i * n * nrhs, t->size);
        void *Xi = at(op->out[0].data, i * n * nrhs, t->size);
        if (nrhs == 1) memcpy(Xi, Bi, (size_t)n * t->size);
        else t->gather(bt, n, Bi, nrhs, nrhs, n, NULL, 0, NULL);
        info = t->getrs((lapack_int)n, (lapack_int)nrhs, lu, ipiv, nrhs == 1 ? Xi : bt);
        if (info != 0) {
            st = fail_lapack(r, "getrs", info);
            break;
        }
        if (nrhs > 1) t->gather(Xi, nrhs, bt, n, n, nrhs, NULL, 0, NULL);
    }
    scratch_free(r, &sc);
    return st;
}

/* inv(A) by getrf and getri on A^T as it lies: inv(A^T) column-major is inv(A) row-major. */
static tf_status run_inv(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t n = d->n;
    void *out = r->op->out[0].data;
    zval q[2] = {0}, dummy[2] = {0};
    lapack_int piv[2] = {1, 2}, lwork;
    lapack_int info = t->getri((lapack_int)n, dummy, piv, q, -1);
    if (info != 0) return fail_lapack(r, "getri", info);
    if (!query_size(t->rget(q, 0), &lwork)) return too_large(r, "getri");
    scratch sc = {0, NULL, 0};
    const size_t o_piv = reserve(&sc, (size_t)n, sizeof(lapack_int));
    const size_t o_w = reserve(&sc, (size_t)lwork, t->size);
    tf_status st = scratch_alloc(r, &sc);
    if (st != TF_OK) return st;
    lapack_int *ipiv = (lapack_int *)(void *)(sc.base + o_piv);
    memcpy(out, r->op->in[0].data, (size_t)(d->b * n * n) * t->size);
    for (int64_t i = 0; i < d->b; i++) {
        void *x = at(out, i * n * n, t->size);
        info = t->getrf((lapack_int)n, x, ipiv);
        if (info == 0) info = t->getri((lapack_int)n, x, ipiv, sc.base + o_w, lwork);
        if (info != 0) {
            st = info > 0 ? fail_matrix(r, TF_ERR_SINGULAR, i, "is singular")
                          : fail_lapack(r, "getrf/getri", info);
            break;
        }
    }
    scratch_free(r, &sc);
    return st;
}

/*
 * det and slogdet from getrf on A^T as it lies (det A^T = det A): U's
 * diagonal times the sign of the row interchanges, accumulated in double.
 * slogdet keeps the phase as a product of unit factors and the magnitude as
 * a sum of logs, so neither overflows. A zero pivot (info > 0) is a singular
 * matrix: an answer here (0; sign 0 and -inf), not an error.
 */
static tf_status run_det(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t n = d->n;
    const int slog = r->op->kind == TF__OP_SLOGDET;
    void *D = r->op->out[0].data, *L = slog ? r->op->out[1].data : NULL;
    scratch sc = {0, NULL, 0};
    const size_t o_lu = reserve(&sc, (size_t)(n * n), t->size);
    const size_t o_piv = reserve(&sc, (size_t)n, sizeof(lapack_int));
    tf_status st = scratch_alloc(r, &sc);
    if (st != TF_OK) return st;
    void *lu = sc.base + o_lu;
    lapack_int *ipiv = (lapack_int *)(void *)(sc.base + o_piv);
    for (int64_t i = 0; i < d->b; i++) {
        memcpy(lu, at(r->op->in[0].data, i * n * n, t->size), (size_t)(n * n) * t->size);
        const lapack_int info = t->getrf((lapack_int)n, lu, ipiv);
        if (info < 0) {
            st = fail_lapack(r, "getrf", info);
            break;
        }
        zval acc = 1;
        double logabs = 0;
        for (int64_t j = 0; info == 0 && j < n; j++) {
            if (ipiv[j] != j + 1) acc = -acc;
            const zval u = t->get(lu, j * n + j);
            if (!slog) {
                acc *= u;
                continue;
            }
            const double mag = cabs(u);
            logabs += log(mag);
            acc *= u / mag;
        }
        if (info > 0) {
            acc = 0;
            logabs = -INFINITY;
        } else if (slog && t->cx) {
            acc /= cabs(acc);
        }
        t->set(D, i, acc);
        if (slog) t->rset(L, i, logabs);
    }
    scratch_free(r, &sc);
    return st;
}

/* ---- norms ---- */

/* |x| in double: the norms sum magnitudes in double whatever the dtype. */
static double abs_at(const la_type *t, const void *x, int64_t i) { return cabs(t->get(x, i)); }

/*
 * The Euclidean norm of n entries by the scaled sum of squares of nrm2 and
 * lassq: scale * sqrt(ssq), each term divided by the largest magnitude so
 * far, so large entries cannot overflow nor small ones underflow. A complex
 * entry counts as its two parts; nan wins over inf, inf over the rest.
 */
static double norm2(const la_type *t, const void *x, int64_t n) {
    double scale = 0, ssq = 1;
    int nan = 0, inf = 0;
    for (int64_t i = 0; i < n; i++) {
        const zval z = t->get(x, i);
        const double parts[2] = {fabs(creal(z)), fabs(cimag(z))};
        for (int c = 0; c < 2; c++) {
            const double v = parts[c];
            if (isnan(v)) {
                nan = 1;
            } else if (isinf(v)) {
                inf = 1;
            } else if (v > 0) {
                if (scale < v) {
                    ssq = 1 + ssq * (scale / v) * (scale / v);
                    scale = v;
                } else {
                    ssq += (v / scale) * (v / scale);
                }
            }
        }
    }
    return nan ? NAN : inf ? INFINITY : scale * sqrt(ssq);
}

/*
 * The vector p-norm of n entries: 2 (norm2), 1, +inf (max), -inf (min), 0
 * (nonzero count) or (sum |x|^p)^(1/p), the last scaled by the largest
 * magnitude (the norm is homogeneous) so it stays in range. nan propagates
 * for every p.
 */
static double vector_norm(const la_type *t, const void *x, int64_t n, double p) {
    if (p == 2) return norm2(t, x, n);
    double big = 0, acc = p == -INFINITY ? INFINITY : 0;
    for (int64_t i = 0; i < n; i++) {
        const double a = abs_at(t, x, i);
        if (isnan(a)) return NAN;
        if (a > big) big = a;
        if (p == INFINITY) acc = a > acc ? a : acc;
        else if (p == -INFINITY) acc = a < acc ? a : acc;
        else if (p == 0) acc += a != 0;
        else if (p == 1) acc += a;
    }
    if (isinf(p) || p == 0 || p == 1) return acc;
    if (p > 0 && (big == 0 || isinf(big))) return big;
    const double scale = big == 0 || isinf(big) ? 1 : big;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += pow(abs_at(t, x, i) / scale, p);
    return scale * pow(sum, 1 / p);
}

/* The induced 1 (column sums) or inf (row sums) norm: the largest sum for p > 0, the smallest for p < 0. */
static double sum_norm(const la_type *t, const void *a, int64_t m, int64_t n, double p) {
    const int by_column = fabs(p) == 1;
    const int64_t outer = by_column ? n : m, inner = by_column ? m : n;
    double best = p > 0 ? 0 : INFINITY;
    int nan = 0;
    for (int64_t o = 0; o < outer; o++) {
        double sum = 0;
        for (int64_t i = 0; i < inner; i++) sum += abs_at(t, a, by_column ? i * n + o : o * n + i);
        if (isnan(sum)) nan = 1;
        else if (p > 0 ? sum > best : sum < best) best = sum;
    }
    return nan ? NAN : best;
}

/*
 * The norms of the singular values (nuc, 2, -2) by a values-only gesdd of
 * each matrix. A matrix holding nan gives nan, one holding inf gives inf
 * (nuc, 2) or nan (-2, undefined), without LAPACK seeing it.
 */
static tf_status sv_norms(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t m = d->m, n = d->n, k = d->k;
    const int nuc = d->norm_kind == TF__NORM_NUC;
    void *out = r->op->out[0].data;
    lapack_int lwork;
    size_t lrwork;
    tf_status st = gesdd_plan(r, 'N', (lapack_int)n, (lapack_int)m, 1, 1, &lwork, &lrwork);
    if (st != TF_OK) return st;
    scratch sc = {0, NULL, 0};
    const size_t o_a = reserve(&sc, (size_t)(m * n), t->size), o_s = reserve(&sc, (size_t)k, t->rsize);
    const size_t o_w = reserve(&sc, (size_t)lwork, t->size), o_rw = reserve(&sc, lrwork, t->rsize);
    const size_t o_iw = reserve(&sc, 8 * (size_t)k, sizeof(lapack_int));
    if ((st = scratch_alloc(r, &sc)) != TF_OK) return st;
    void *a = sc.base + o_a, *s = sc.base + o_s;
    for (int64_t i = 0; i < d->b; i++) {
        const void *x = at(r->op->in[0].data, i * m * n, t->size);
        const double f = norm2(t, x, m * n);
        if (!isfinite(f)) {
            t->rset(out, i, isnan(f) || (!nuc && d->norm_p < 0) ? NAN : INFINITY);
            continue;
        }
        memcpy(a, x, (size_t)(m * n) * t->size);
        const lapack_int info = t->gesdd('N', (lapack_int)n, (lapack_int)m, a, (lapack_int)n, s, a,
                                         1, a, 1, sc.base + o_w, lwork, sc.base + o_rw,
                                         (lapack_int *)(void *)(sc.base + o_iw));
        if (info != 0) {
            st = info > 0 ? fail_matrix(r, TF_ERR_NOT_CONVERGED, i, "did not converge")
                          : fail_lapack(r, "gesdd", info);
            break;
        }
        double v = 0;
        for (int64_t j = 0; nuc && j < k; j++) v += t->rget(s, j);
        if (!nuc) v = t->rget(s, d->norm_p > 0 ? 0 : k - 1);
        t->rset(out, i, v);
    }
    scratch_free(r, &sc);
    return st;
}

/* Every norm kind: the singular-value ones through LAPACK, the others by loops over each matrix. */
static tf_status run_norm(const la_run *r) {
    const tf__linalg *d = r->d;
    const double p = d->norm_p;
    if (d->norm_kind == TF__NORM_NUC || (d->norm_kind == TF__NORM_MATRIX && fabs(p) == 2))
        return sv_norms(r);
    const int64_t per = d->m * d->n;
    for (int64_t i = 0; i < d->b; i++) {
        const void *x = at(r->op->in[0].data, i * per, r->t->size);
        double v;
        switch (d->norm_kind) {
        case TF__NORM_VECTOR: v = vector_norm(r->t, x, per, p); break;
        case TF__NORM_FRO: v = norm2(r->t, x, per); break;
        default: v = sum_norm(r->t, x, d->m, d->n, p); break;
        }
        r->t->rset(r->op->out[0].data, i, v);
    }
    return TF_OK;
}

/* trace and diagonal: the elements A[i0 + i, j0 + i] for i < desc.k, summed in double or copied. */
static tf_status run_diagonal(const la_run *r) {
    const tf__linalg *d = r->d;
    const la_type *t = r->t;
    const int64_t m = d->m, n = d->n, len = d->k, off = d->offset;
    const int64_t i0 = off < 0 ? -off : 0, j0 = off > 0 ? off : 0;
    void *out = r->op->out[0].data;
    for (int64_t b = 0; b < d->b; b++) {
        const void *a = at(r->op->in[0].data, b * m * n, t->size);
        if (r->op->kind == TF__OP_TRACE) {
            zval sum = 0;
            for (int64_t i = 0; i < len; i++) sum += t->get(a, (i0 + i) * n + j0 + i);
            t->set(out, b, sum);
        } else {
            for (int64_t i = 0; i < len; i++)
                memcpy(at(out, b * len + i, t->size), at(a, (i0 + i) * n + j0 + i, t->size), t->size);
        }
    }
    return TF_OK;
}

/* ---- the entry ---- */

/* 1 when the kind hands matrices to LAPACK, whose integers are 32-bit. */
static int uses_lapack(const tfd_linalg_op *op) {
    switch (op->kind) {
    case TF__OP_NORM:
        return op->desc.norm_kind == TF__NORM_NUC ||
               (op->desc.norm_kind == TF__NORM_MATRIX && fabs(op->desc.norm_p) == 2);
    case TF__OP_TRACE:
    case TF__OP_DIAGONAL: return 0;
    default: return 1;
    }
}

/*
 * Re-checks the geometry the kinds index memory with, cheaply: the inputs'
 * sizes against the descriptor, the outputs there, and LAPACK's integer
 * range (a matrix, and so its dimensions, must fit a lapack_int; workspace
 * sizes are checked as LAPACK answers them).
 */
static tf_status check_geometry(const la_run *r) {
    const tfd_linalg_op *op = r->op;
    const tf__linalg *d = r->d;
    const int inputs = op->kind == TF__OP_SOLVE ? 2 : 1;
    int ok = op->n_inputs == inputs && op->n_outputs == d->n_outputs && d->n_outputs >= 1 &&
             d->n_outputs <= TF__LINALG_MAX_OUTPUTS && d->b >= 1 && d->m >= 1 && d->n >= 1 &&
             op->in[0].numel == d->b * d->m * d->n && op->in[0].data;
    if (ok && inputs == 2)
        ok = op->in[1].dtype == op->in[0].dtype && d->nrhs >= 1 &&
             op->in[1].numel == d->b * d->n * d->nrhs && op->in[1].data;
    for (int i = 0; ok && i < op->n_outputs; i++) ok = op->out[i].data != NULL;
    if (!ok) {
        snprintf(r->msg, r->len, "cpu: %s got inputs or outputs that do not fit its descriptor "
                 "(%lld matrices of %lld x %lld)", r->name, (long long)d->b, (long long)d->m,
                 (long long)d->n);
        return TF_ERR_INTERNAL;
    }
    if (uses_lapack(op) && (d->m * d->n > INT_MAX || d->n * d->nrhs > INT_MAX)) {
        snprintf(r->msg, r->len, "cpu: %s of %lld x %lld matrices exceeds LAPACK's integer range",
                 r->name, (long long)d->m, (long long)d->n);
        return TF_ERR_UNSUPPORTED;
    }
    return TF_OK;
}

tf_status tfd_cpu_linalg(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                         size_t msg_len) {
    (void)be;
    const char *name = tf__op_name(op->kind);
    const la_type *t = la_type_of(op->in[0].dtype);
    if (t == NULL) {
        snprintf(msg, msg_len, "cpu: %s is not served for dtype %s (%d)", name,
                 tf_dtype_name(op->in[0].dtype), (int)op->in[0].dtype);
        return TF_ERR_DTYPE;
    }
    const la_run r = {stream, op, &op->desc, t, name, msg, msg_len};
    tf_status st = check_geometry(&r);
    if (st != TF_OK) return st;
    const char triangle = op->desc.upper ? 'U' : 'L';
    switch (op->kind) {
    case TF__OP_SVD: return (st = check_finite(&r, 'A')) != TF_OK ? st : run_svd(&r);
    case TF__OP_QR: return (st = check_finite(&r, 'A')) != TF_OK ? st : run_qr(&r);
    case TF__OP_EIGH: return (st = check_finite(&r, triangle)) != TF_OK ? st : run_eigh(&r);
    case TF__OP_CHOLESKY:
        return (st = check_finite(&r, triangle)) != TF_OK ? st : run_cholesky(&r);
    case TF__OP_SOLVE: return (st = check_finite(&r, 'A')) != TF_OK ? st : run_solve(&r);
    case TF__OP_INV: return (st = check_finite(&r, 'A')) != TF_OK ? st : run_inv(&r);
    case TF__OP_DET:
    case TF__OP_SLOGDET: return (st = check_finite(&r, 'A')) != TF_OK ? st : run_det(&r);
    case TF__OP_NORM: return run_norm(&r);
    case TF__OP_TRACE:
    case TF__OP_DIAGONAL: return run_diagonal(&r);
    default: break;
    }
    snprintf(msg, msg_len, "cpu: %s is not a linear-algebra kind", name);
    return TF_ERR_INTERNAL;
}
