/*
 * Operands and checks of the linear-algebra benchmarks (see linalg-check.h).
 * Arithmetic is in double complex whatever the dtype: exact for every
 * dtype's values, and far more precise than the f32 results it checks.
 */
#include <complex.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/linalg-check.h"

typedef double complex zval;

/* A phase made real leaves an imaginary part of a few roundings of the entry: this many allowed. */
#define GAUGE_EPS 16.0

tf_dtype lc_real_dtype(tf_dtype dt) { return dt == TF_F32 || dt == TF_C64 ? TF_F32 : TF_F64; }

double lc_eps(tf_dtype dt) { return lc_real_dtype(dt) == TF_F32 ? 0x1p-24 : 0x1p-53; }

static int is_complex(tf_dtype dt) { return dt == TF_C64 || dt == TF_C128; }

static zval get(tf_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return ((const float complex *)p)[i];
    default: return ((const double complex *)p)[i];
    }
}

static void set(tf_dtype dt, void *p, int64_t i, zval v) {
    switch (dt) {
    case TF_F32: ((float *)p)[i] = (float)creal(v); break;
    case TF_F64: ((double *)p)[i] = creal(v); break;
    case TF_C64: ((float complex *)p)[i] = (float complex)v; break;
    default: ((double complex *)p)[i] = v; break;
    }
}

static double rget(tf_dtype rdt, const void *p, int64_t i) {
    return rdt == TF_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

/* splitmix64: element i depends only on (seed, i). */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void lc_fill(tf_dtype dt, void *x, size_t n, uint64_t seed) {
    const uint64_t base = mix64(seed);
    const size_t reals = is_complex(dt) ? 2 * n : n;
    if (lc_real_dtype(dt) == TF_F32) {
        float *f = x;
        for (size_t i = 0; i < reals; i++)
            f[i] = (float)((double)(mix64(base + i) >> 40) * 0x1p-24 - 0.5);
    } else {
        double *d = x;
        for (size_t i = 0; i < reals; i++) d[i] = (double)(mix64(base + i) >> 11) * 0x1p-53 - 0.5;
    }
}

void lc_hermitize(tf_dtype dt, void *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        set(dt, a, i * n + i, creal(get(dt, a, i * n + i)));
        for (int64_t j = i + 1; j < n; j++) {
            const zval x = 0.5 * (get(dt, a, i * n + j) + conj(get(dt, a, j * n + i)));
            set(dt, a, i * n + j, x);
            set(dt, a, j * n + i, conj(x));
        }
    }
}

double lc_values_diff(tf_dtype rdt, const void *got, const void *ref, int64_t k) {
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < k; i++) {
        const double d = fabs(rget(rdt, got, i) - rget(rdt, ref, i));
        if (isnan(d)) return INFINITY;
        worst = fmax(worst, d);
        scale = fmax(scale, fabs(rget(rdt, ref, i)));
    }
    return worst / (scale > 0 ? scale : 1);
}

/* ---- the worst error of a check ---- */

typedef struct verdict {
    double worst; /* error / tolerance */
    int any;      /* something was noted */
    char *why;
    size_t why_len;
} verdict;

static void note(verdict *v, double ratio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(verdict *v, double ratio, const char *fmt, ...) {
    if (isnan(ratio)) ratio = INFINITY;
    if (v->any && !(ratio > v->worst)) return;
    v->any = 1;
    v->worst = ratio;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, v->why_len, fmt, ap);
    va_end(ap);
}

/* Column s of ns sampled out of k: all of them when k <= LC_SAMPLES, else spread, ends included. */
static int64_t sample_count(int64_t k) { return k < LC_SAMPLES ? k : LC_SAMPLES; }
static int64_t sample_index(int64_t s, int64_t ns, int64_t k) {
    return ns == k ? s : (ns > 1 ? s * (k - 1) / (ns - 1) : 0);
}

/*
 * The gauge of one column (n entries, contiguous, in double): its largest
 * entry in magnitude real and positive. Entries within rounding of the
 * largest are ties the routine may have ordered otherwise; any of them may
 * carry the phase.
 */
static void check_gauge(verdict *v, const zval *col, int64_t n, double eps, const char *what,
                        int64_t j) {
    double big = 0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, cabs(col[i]));
    if (!(big > 0)) {
        note(v, INFINITY, "%s %lld is zero", what, (long long)j);
        return;
    }
    double best = INFINITY;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        if (cabs(col[i]) < big * (1 - 8 * eps)) continue;
        /* Off by the imaginary part, or by the whole entry when it is negative. */
        const double off = creal(col[i]) > 0 ? fabs(cimag(col[i])) / cabs(col[i]) : 1.0;
        if (off < best) best = off, at = i;
    }
    note(v, best / (GAUGE_EPS * eps),
         "%s %lld: its largest entry (row %lld) is %.6g%+.6gi, not real positive", what,
         (long long)j, (long long)at, creal(col[at]), cimag(col[at]));
}

/* |<x_a, x_b> - delta_ab| over every pair of the ns columns of cols (each n long). */
static void check_orthonormal(verdict *v, const zval *cols, int64_t ns, int64_t n, double tol,
                              const char *what, const int64_t *index) {
    for (int64_t a = 0; a < ns; a++)
        for (int64_t b = a; b < ns; b++) {
            zval dot = 0;
            for (int64_t i = 0; i < n; i++) dot += conj(cols[a * n + i]) * cols[b * n + i];
            const double err = cabs(dot - (a == b ? 1.0 : 0.0));
            note(v, err / tol, "%s %lld and %lld: inner product %.3g%+.3gi", what,
                 (long long)index[a], (long long)index[b], creal(dot), cimag(dot));
        }
}

/*
 * out[t * rows + i] = sum_c mat[i, c] x[t * cols + c] for the ns vectors x: each row of the
 * row-major mat is read once, in order. 0, or -1 when out of memory.
 */
static int mat_times(tf_dtype dt, const void *mat, int64_t rows, int64_t cols, const zval *x,
                     int64_t ns, zval *out) {
    zval *row = malloc(sizeof(zval) * (size_t)(cols > 0 ? cols : 1));
    if (!row) return -1;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t c = 0; c < cols; c++) row[c] = get(dt, mat, i * cols + c);
        for (int64_t t = 0; t < ns; t++) {
            const zval *xt = x + t * cols;
            zval dot = 0;
            for (int64_t c = 0; c < cols; c++) dot += row[c] * xt[c];
            out[t * rows + i] = dot;
        }
    }
    free(row);
    return 0;
}

/* ns sampled columns of length len, their indices, and their products with a matrix. */
typedef struct samples {
    int64_t ns;
    int64_t *index;
    zval *x;    /* ns x len: the vectors multiplied */
    zval *y;    /* ns x len2: what the products should be, or another factor's columns */
    zval *prod; /* ns x rows: the products */
} samples;

static int samples_new(samples *sp, int64_t k, int64_t len, int64_t len2, int64_t rows) {
    sp->ns = sample_count(k);
    const size_t ns = (size_t)(sp->ns > 0 ? sp->ns : 1);
    sp->index = malloc(sizeof(int64_t) * ns);
    sp->x = malloc(sizeof(zval) * ns * (size_t)(len > 0 ? len : 1));
    sp->y = malloc(sizeof(zval) * ns * (size_t)(len2 > 0 ? len2 : 1));
    sp->prod = malloc(sizeof(zval) * ns * (size_t)(rows > 0 ? rows : 1));
    if (!sp->index || !sp->x || !sp->y || !sp->prod) return -1;
    for (int64_t t = 0; t < sp->ns; t++) sp->index[t] = sample_index(t, sp->ns, k);
    return 0;
}

static void samples_free(samples *sp) {
    free(sp->index);
    free(sp->x);
    free(sp->y);
    free(sp->prod);
}

/* The norm of prod_t - scale_t y_t (rows long): the residual of sample t. */
static double residual(const samples *sp, int64_t t, int64_t rows, double scale_t) {
    double r2 = 0;
    for (int64_t i = 0; i < rows; i++) {
        const double d = cabs(sp->prod[t * rows + i] - scale_t * sp->y[t * rows + i]);
        r2 += d * d;
    }
    return sqrt(r2);
}

double lc_check_svd(tf_dtype dt, const void *a, int64_t m, int64_t n, const void *u, const void *s,
                    const void *vh, char *why, size_t why_len) {
    verdict v = {0, 0, why, why_len};
    snprintf(why, why_len, "nothing checked");
    const int64_t k = m < n ? m : n;
    const tf_dtype rdt = lc_real_dtype(dt);
    const double eps = lc_eps(dt), tol = LC_TOL_FACTOR * (double)(m > n ? m : n) * eps;
    for (int64_t j = 0; j < k; j++) {
        const double x = rget(rdt, s, j);
        if (!(x >= 0) || !isfinite(x))
            note(&v, INFINITY, "S[%lld] = %.17g is negative or not finite", (long long)j, x);
        else if (j > 0 && x > rget(rdt, s, j - 1))
            note(&v, INFINITY, "S[%lld] = %.17g is above S[%lld]", (long long)j, x,
                 (long long)(j - 1));
    }
    const double smax = k > 0 && rget(rdt, s, 0) > 0 ? rget(rdt, s, 0) : 1.0;
    samples sp;
    if (samples_new(&sp, k, n, m, m) != 0) {
        samples_free(&sp);
        note(&v, INFINITY, "out of memory for the check");
        return v.worst;
    }
    /* x_t = Vh[j,:]^H, y_t = U[:,j]: A x_t = s_j y_t. */
    for (int64_t t = 0; t < sp.ns; t++) {
        const int64_t j = sp.index[t];
        for (int64_t c = 0; c < n; c++) sp.x[t * n + c] = conj(get(dt, vh, j * n + c));
        for (int64_t i = 0; i < m; i++) sp.y[t * m + i] = get(dt, u, i * k + j);
        check_gauge(&v, sp.y + t * m, m, eps, "U's column", j);
    }
    if (mat_times(dt, a, m, n, sp.x, sp.ns, sp.prod) != 0) {
        note(&v, INFINITY, "out of memory for the check");
    } else {
        for (int64_t t = 0; t < sp.ns; t++) {
            const double r = residual(&sp, t, m, rget(rdt, s, sp.index[t])) / smax;
            note(&v, r / tol, "column %lld: |A v - s u| / s_max = %.3g", (long long)sp.index[t], r);
        }
    }
    check_orthonormal(&v, sp.y, sp.ns, m, tol, "U's columns", sp.index);
    check_orthonormal(&v, sp.x, sp.ns, n, tol, "Vh's rows", sp.index);
    samples_free(&sp);
    return v.worst;
}

double lc_check_eigh(tf_dtype dt, const void *a, int64_t n, const void *w, const void *vecs,
                     char *why, size_t why_len) {
    verdict v = {0, 0, why, why_len};
    snprintf(why, why_len, "nothing checked");
    const tf_dtype rdt = lc_real_dtype(dt);
    const double eps = lc_eps(dt), tol = LC_TOL_FACTOR * (double)n * eps;
    double wmax = 0;
    for (int64_t j = 0; j < n; j++) {
        const double x = rget(rdt, w, j);
        if (!isfinite(x))
            note(&v, INFINITY, "W[%lld] = %.17g is not finite", (long long)j, x);
        else if (j > 0 && x < rget(rdt, w, j - 1))
            note(&v, INFINITY, "W[%lld] = %.17g is below W[%lld]", (long long)j, x,
                 (long long)(j - 1));
        wmax = fmax(wmax, fabs(x));
    }
    if (!(wmax > 0)) wmax = 1;
    samples sp;
    if (samples_new(&sp, n, n, n, n) != 0) {
        samples_free(&sp);
        note(&v, INFINITY, "out of memory for the check");
        return v.worst;
    }
    /* x_t = y_t = V[:,j]: A x_t = w_j y_t. */
    for (int64_t t = 0; t < sp.ns; t++) {
        const int64_t j = sp.index[t];
        for (int64_t i = 0; i < n; i++)
            sp.x[t * n + i] = sp.y[t * n + i] = get(dt, vecs, i * n + j);
        check_gauge(&v, sp.x + t * n, n, eps, "V's column", j);
    }
    if (mat_times(dt, a, n, n, sp.x, sp.ns, sp.prod) != 0) {
        note(&v, INFINITY, "out of memory for the check");
    } else {
        for (int64_t t = 0; t < sp.ns; t++) {
            const double r = residual(&sp, t, n, rget(rdt, w, sp.index[t])) / wmax;
            note(&v, r / tol, "column %lld: |A v - w v| / max|w| = %.3g", (long long)sp.index[t],
                 r);
        }
    }
    check_orthonormal(&v, sp.x, sp.ns, n, tol, "V's columns", sp.index);
    samples_free(&sp);
    return v.worst;
}

double lc_check_qr(tf_dtype dt, const void *a, int64_t m, int64_t n, const void *q, const void *r,
                   char *why, size_t why_len) {
    verdict v = {0, 0, why, why_len};
    snprintf(why, why_len, "nothing checked");
    const int64_t k = m < n ? m : n;
    const double eps = lc_eps(dt), tol = LC_TOL_FACTOR * (double)(m > n ? m : n) * eps;
    /* R: exact zeros below the diagonal, a real non-negative diagonal. */
    for (int64_t i = 0; i < k; i++) {
        for (int64_t j = 0; j < i && j < n; j++) {
            const zval x = get(dt, r, i * n + j);
            if (x != 0)
                note(&v, INFINITY, "R[%lld][%lld] = %.3g%+.3gi below the diagonal", (long long)i,
                     (long long)j, creal(x), cimag(x));
        }
        const zval d = get(dt, r, i * n + i);
        if (!(creal(d) >= 0))
            note(&v, INFINITY, "R[%lld][%lld] = %.6g%+.6gi is not non-negative", (long long)i,
                 (long long)i, creal(d), cimag(d));
        else if (cabs(d) > 0)
            note(&v, fabs(cimag(d)) / cabs(d) / (GAUGE_EPS * eps),
                 "R[%lld][%lld] = %.6g%+.6gi is not real", (long long)i, (long long)i, creal(d),
                 cimag(d));
    }
    /* The scale: the largest column norm of A. */
    double *norm2 = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!norm2) {
        note(&v, INFINITY, "out of memory for the check");
        return v.worst;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const double x = cabs(get(dt, a, i * n + j));
            norm2[j] += x * x;
        }
    double scale = 0;
    for (int64_t j = 0; j < n; j++) scale = fmax(scale, sqrt(norm2[j]));
    free(norm2);
    if (!(scale > 0)) scale = 1;
    /* x_t = R[:,j], y_t = A[:,j] for sampled columns j of A: Q x_t = y_t. */
    samples sp;
    if (samples_new(&sp, n, k, m, m) != 0) {
        samples_free(&sp);
        note(&v, INFINITY, "out of memory for the check");
        return v.worst;
    }
    for (int64_t t = 0; t < sp.ns; t++) {
        const int64_t j = sp.index[t];
        for (int64_t l = 0; l < k; l++) sp.x[t * k + l] = get(dt, r, l * n + j);
        for (int64_t i = 0; i < m; i++) sp.y[t * m + i] = get(dt, a, i * n + j);
    }
    if (mat_times(dt, q, m, k, sp.x, sp.ns, sp.prod) != 0) {
        note(&v, INFINITY, "out of memory for the check");
    } else {
        for (int64_t t = 0; t < sp.ns; t++) {
            const double res = residual(&sp, t, m, 1.0) / scale;
            note(&v, res / tol, "column %lld: |A e - Q R e| / max |A e| = %.3g",
                 (long long)sp.index[t], res);
        }
    }
    samples_free(&sp);
    /* Q's sampled columns orthonormal. */
    if (samples_new(&sp, k, m, 1, 1) != 0) {
        samples_free(&sp);
        note(&v, INFINITY, "out of memory for the check");
        return v.worst;
    }
    for (int64_t t = 0; t < sp.ns; t++)
        for (int64_t i = 0; i < m; i++) sp.x[t * m + i] = get(dt, q, i * k + sp.index[t]);
    check_orthonormal(&v, sp.x, sp.ns, m, tol, "Q's columns", sp.index);
    samples_free(&sp);
    return v.worst;
}
