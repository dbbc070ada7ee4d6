/*
 * Integration tests of the linear-algebra operations (include/tenferro/linalg.h)
 * through a real tenferrod and real client processes, on the suite's device
 * (cpu here, cuda:0 on the GPU machine).
 *
 * Inputs are fresh random values of every dtype (th_fill_random: never zero,
 * seeded per run, the seed in every failure message), or matrices built with
 * known spectra (Q1 diag(s) Q2^H from random unitaries). References are
 * LAPACK called in this process in double complex (zgesvd, a different
 * routine than the daemon's gesdd; zgeqrf, zheev, zpotrf, zgetrf, zgesv,
 * zgetri) and identities, held to normwise bounds c eps max(m, n):
 *
 *  - svd (reduced, full, values only), qr (reduced, complete, r), eigh
 *    (values, vectors, either triangle with garbage in the other), cholesky
 *    (lower, upper), solve (vector and matrix B), inv, det, slogdet, on
 *    square, tall, wide, batched, 1 x 1, rank-deficient and ill-conditioned
 *    matrices: reconstruction, orthogonality, the documented gauges checked
 *    exactly (the first largest-magnitude entry of each U and V column real
 *    and positive, R's diagonal real and >= 0, exact zeros in the triangles),
 *    and two runs giving identical bytes;
 *  - the tensor form (a rank-4 tensor split 2|2, with permutations and a
 *    batch axis) against the matrix form of a copy permuted and reshaped
 *    here: identical bytes;
 *  - vector norms (p = 2, 1, inf, -inf, 0, 3; chosen axes, keepdims; huge
 *    and tiny entries), every matrix norm over chosen axes, trace and
 *    diagonal with offsets, slices with negative steps;
 *  - truncation: every option at its boundaries on matrices of known
 *    singular values, against the documented rule applied here to the
 *    daemon's own untruncated values; the reports, the zero padding past
 *    the kept rank, absorb and renormalize, then tf_view_slice trimming;
 *    eigh_truncated's |w| order and ties;
 *  - typed failures of the numbers (nan or inf, a singular matrix, one not
 *    positive definite) at the synchronize, naming the operation's index and
 *    the matrix, the outputs reading back as zeros and the session usable
 *    afterwards; refusals at the call, nothing sent;
 *  - a held session running a DMRG-like loop (einsum, svd_truncated by
 *    cutoff, report read, slice): exactly one host wait per report read, and
 *    none at all for a truncation by max_rank alone;
 *  - two client processes decomposing at once;
 *  - prepared graphs holding linear algebra (run node by node): einsum ->
 *    svd_truncated (by max_rank, and by a relative cutoff whose rank the
 *    device finds) -> U S Vh contracted back, several runs on fresh inputs
 *    against zgesvd and the documented rule, the report read with
 *    tf_truncation_report_read; qr, solve, a tensor-form qr through a
 *    permuting split (byte for byte a session's) and a slice in one graph;
 *    a cholesky node failing in a run (typed, naming the node and the
 *    matrix, the outputs zeros, the runs around it right); the graph taken
 *    from the daemon's cache by a second process; refusals while recording.
 *
 * Each test starts its own tenferrod and stops it with SIGTERM, requiring a
 * clean exit (a crash or a sanitizer report fails it).
 */
#include <check.h>
#include <complex.h>
#include <float.h>
#include <lapack.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

typedef double complex zc;

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

static double eps_of(tf_dtype dt) {
    return dt == TF_F32 || dt == TF_C64 ? (double)FLT_EPSILON : DBL_EPSILON;
}

/* The normwise bound of a result of dtype dt for an m x n problem: c eps max(m, n). */
#define BOUND_C 40.0
static double bound(tf_dtype dt, int64_t m, int64_t n) {
    return BOUND_C * eps_of(dt) * (double)(m > n ? m : n);
}

/* What the current check is about, for failure messages (which add the seed). */
static char g_what[256];
#define WHAT(...) snprintf(g_what, sizeof g_what, __VA_ARGS__)
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            char m_[512];                                                                          \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
            ck_abort_msg("%s: %s (seed %u)", g_what, m_, th_seed());                               \
        }                                                                                          \
    } while (0)

/* ---- the fixture: one daemon per test, one client ---- */

static th_daemon D;
static tf_client *C;

static void start(void) {
    ck_assert_msg(th_daemon_start(&D, (char *)NULL) == 0, "tenferrod did not start (log %s)",
                  D.log_path);
    C = th_connect(&D);
}

static void stop(void) {
    tf_disconnect(C);
    C = NULL;
    CK_DAEMON_STOP(&D);
}

/* ---- host values ---- */

static size_t prod(const int64_t *d, int n) {
    size_t p = 1;
    for (int i = 0; i < n; i++) p *= (size_t)d[i];
    return p;
}

/* Rounds z to what a tensor of dt holds, in place. */
static void round_to(tf_dtype dt, size_t n, zc *z) {
    void *raw = th_xmalloc(n * tf_dtype_size(dt));
    th_narrow(dt, n, z, raw);
    th_widen(dt, n, raw, z);
    free(raw);
}

/* n fresh random values of dt (never zero), widened: exactly what a tensor of dt holds. */
static zc *random_z(tf_dtype dt, size_t n) {
    void *raw = th_xmalloc(n * tf_dtype_size(dt));
    th_fill_random(dt, n, raw);
    zc *z = th_xmalloc(n * sizeof *z);
    th_widen(dt, n, raw, z);
    free(raw);
    return z;
}

/* Uploads z as a tensor of dt (z is rounded to dt first, so it is then exactly the tensor). */
static tf_tensor upload_z(tf_dtype dt, int rank, const int64_t *shape, zc *z) {
    const size_t n = prod(shape, rank);
    round_to(dt, n, z);
    void *raw = th_xmalloc(n * tf_dtype_size(dt));
    th_narrow(dt, n, z, raw);
    tf_tensor t = 0;
    CK_STATUS(C, tf_upload(C, dt, rank, shape, raw, &t), TF_OK);
    free(raw);
    return t;
}

/* A downloaded tensor: its metadata, its bytes and its values widened. */
typedef struct got {
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    size_t n;
    void *raw;
    zc *z;
} got;

static got fetch_on(tf_client *c, tf_tensor t) {
    got g;
    memset(&g, 0, sizeof g);
    CK_STATUS(c, tf_tensor_info(c, t, &g.dt, &g.rank, g.shape), TF_OK);
    g.n = prod(g.shape, g.rank);
    size_t bytes = 0;
    CK_STATUS(c, tf_download(c, t, &g.raw, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, g.n * tf_dtype_size(g.dt));
    g.z = th_xmalloc(g.n * sizeof *g.z);
    th_widen(g.dt, g.n, g.raw, g.z);
    return g;
}

static got fetch(tf_tensor t) { return fetch_on(C, t); }

static void got_free(got *g) {
    free(g->raw);
    free(g->z);
    memset(g, 0, sizeof *g);
}

/* An input came back unchanged: the operations read it, never write it. */
static void expect_unchanged(tf_tensor t, const zc *z, const char *name) {
    got g = fetch(t);
    CHECK(memcmp(g.z, z, g.n * sizeof *z) == 0, "the operations changed their input %s", name);
    got_free(&g);
}

/* The tensor has dtype dt and the given shape. */
static void expect_meta(const got *g, tf_dtype dt, int rank, const int64_t *shape,
                        const char *name) {
    CHECK(g->dt == dt, "%s is %s, expected %s", name, tf_dtype_name(g->dt), tf_dtype_name(dt));
    int same = g->rank == rank;
    for (int i = 0; same && i < rank; i++) same = g->shape[i] == shape[i];
    char a[128] = "", b[128] = "";
    for (int i = 0, n = 0; i < g->rank; i++)
        n += snprintf(a + n, sizeof a - (size_t)n, "%lld ", (long long)g->shape[i]);
    for (int i = 0, n = 0; i < rank; i++)
        n += snprintf(b + n, sizeof b - (size_t)n, "%lld ", (long long)shape[i]);
    CHECK(same, "%s has shape [ %s], expected [ %s]", name, a, b);
}

/* A shape: the batch axes, then up to two more. */
static int shape_of(int64_t *out, int nb, const int64_t *batch, int n_more, int64_t x, int64_t y) {
    int r = 0;
    for (int i = 0; i < nb; i++) out[r++] = batch[i];
    if (n_more > 0) out[r++] = x;
    if (n_more > 1) out[r++] = y;
    return r;
}

/* |entry i| as the daemon compares it: in the dtype's own precision. */
static double raw_mag(tf_dtype dt, const void *raw, size_t i) {
    switch (dt) {
    case TF_F32: return fabsf(((const float *)raw)[i]);
    case TF_F64: return fabs(((const double *)raw)[i]);
    case TF_C64: {
        const float *f = raw;
        return cabsf(CMPLXF(f[2 * i], f[2 * i + 1]));
    }
    default: {
        const double *d = raw;
        return cabs(CMPLX(d[2 * i], d[2 * i + 1]));
    }
    }
}

/*
 * The gauge of a vector of n entries `stride` apart from `base`: its entry
 * of largest magnitude is real and positive, exactly. The daemon chose it
 * before the phase was applied, which moves the other magnitudes by a
 * rounding: an entry within a few ulps of the largest may be the one it
 * chose. 1 when it holds.
 */
static int gauge_holds(const got *g, size_t base, int64_t n, int64_t stride) {
    double big = 0;
    for (int64_t i = 0; i < n; i++)
        big = fmax(big, raw_mag(g->dt, g->raw, base + (size_t)(i * stride)));
    const double near = big * (1 - 8 * eps_of(g->dt));
    for (int64_t i = 0; i < n; i++) {
        const size_t at = base + (size_t)(i * stride);
        if (raw_mag(g->dt, g->raw, at) >= near && cimag(g->z[at]) == 0 && creal(g->z[at]) > 0)
            return 1;
    }
    return 0;
}

/* ---- dense algebra on the host (row-major, double complex) ---- */

/* c[m x n] = a[m x k] b[k x n]. */
static void mm(int64_t m, int64_t k, int64_t n, const zc *a, const zc *b, zc *c) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            zc s = 0;
            for (int64_t l = 0; l < k; l++) s += a[i * k + l] * b[l * n + j];
            c[i * n + j] = s;
        }
}

/* out[n x m] = a[m x n]^H. */
static void adj(int64_t m, int64_t n, const zc *a, zc *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) out[j * m + i] = conj(a[i * n + j]);
}

static double fro(size_t n, const zc *a) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += creal(a[i] * conj(a[i]));
    return sqrt(s);
}

static double dist(size_t n, const zc *a, const zc *b) {
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        const zc d = a[i] - b[i];
        s += creal(d * conj(d));
    }
    return sqrt(s);
}

/* ||Q^H Q - I||_F of the first k columns of an m-row matrix with ld columns. */
static double orth_cols(int64_t m, int64_t k, int64_t ld, const zc *q) {
    double s = 0;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < k; b++) {
            zc d = 0;
            for (int64_t i = 0; i < m; i++) d += conj(q[i * ld + a]) * q[i * ld + b];
            if (a == b) d -= 1;
            s += creal(d * conj(d));
        }
    return sqrt(s);
}

/* ||V V^H - I||_F of the first k rows of a matrix with n columns. */
static double orth_rows(int64_t k, int64_t n, const zc *v) {
    double s = 0;
    for (int64_t a = 0; a < k; a++)
        for (int64_t b = 0; b < k; b++) {
            zc d = 0;
            for (int64_t j = 0; j < n; j++) d += v[a * n + j] * conj(v[b * n + j]);
            if (a == b) d -= 1;
            s += creal(d * conj(d));
        }
    return sqrt(s);
}

/* ---- LAPACK references (column-major copies of the row-major matrices) ---- */

static void to_col(int64_t m, int64_t n, const zc *a, zc *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) out[j * m + i] = a[i * n + j];
}

static void from_col(int64_t m, int64_t n, const zc *in, zc *a) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) a[i * n + j] = in[j * m + i];
}

/* The singular values of a[m x n], descending (zgesvd). */
static void ref_svd(int64_t m, int64_t n, const zc *a, double *s) {
    zc *w = th_xmalloc(sizeof(zc) * (size_t)(m * n));
    to_col(m, n, a, w);
    lapack_int M = (lapack_int)m, N = (lapack_int)n, lda = M, one = 1, info = 0, lwork = -1;
    const int64_t k = m < n ? m : n;
    double *rw = th_xmalloc(sizeof(double) * (size_t)(5 * k + 8));
    zc q = 0, dummy = 0;
    LAPACK_zgesvd("N", "N", &M, &N, w, &lda, s, &dummy, &one, &dummy, &one, &q, &lwork, rw, &info);
    ck_assert_int_eq(info, 0);
    lwork = (lapack_int)creal(q) + 1;
    zc *work = th_xmalloc(sizeof(zc) * (size_t)lwork);
    LAPACK_zgesvd("N", "N", &M, &N, w, &lda, s, &dummy, &one, &dummy, &one, work, &lwork, rw,
                  &info);
    ck_assert_int_eq(info, 0);
    free(work);
    free(rw);
    free(w);
}

/* The 2-norm condition number of a[m x n] (s_max / s_min; inf when s_min is 0). */
static double cond_of(int64_t m, int64_t n, const zc *a) {
    const int64_t k = m < n ? m : n;
    double *s = th_xmalloc(sizeof(double) * (size_t)k);
    ref_svd(m, n, a, s);
    const double c = s[k - 1] > 0 ? s[0] / s[k - 1] : INFINITY;
    free(s);
    return c;
}

/* R [k x n] of a[m x n] = Q R (zgeqrf), its diagonal made real and >= 0 as the daemon's is. */
static void ref_qr_r(int64_t m, int64_t n, const zc *a, zc *r) {
    const int64_t k = m < n ? m : n;
    zc *w = th_xmalloc(sizeof(zc) * (size_t)(m * n));
    to_col(m, n, a, w);
    lapack_int M = (lapack_int)m, N = (lapack_int)n, lda = M, info = 0, lwork = -1;
    zc *tau = th_xmalloc(sizeof(zc) * (size_t)k), q = 0;
    LAPACK_zgeqrf(&M, &N, w, &lda, tau, &q, &lwork, &info);
    lwork = (lapack_int)creal(q) + 1;
    zc *work = th_xmalloc(sizeof(zc) * (size_t)lwork);
    LAPACK_zgeqrf(&M, &N, w, &lda, tau, work, &lwork, &info);
    ck_assert_int_eq(info, 0);
    for (int64_t i = 0; i < k; i++) {
        for (int64_t j = 0; j < n; j++) r[i * n + j] = j >= i ? w[j * m + i] : 0;
        const zc d = r[i * n + i];
        if (d != 0) {
            const zc p = conj(d) / cabs(d);
            for (int64_t j = i; j < n; j++) r[i * n + j] *= p;
        }
    }
    free(work);
    free(tau);
    free(w);
}

/* The eigenvalues (ascending) of the Hermitian a[n x n] (zheev). */
static void ref_eigh(int64_t n, const zc *a, double *w) {
    zc *c = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    to_col(n, n, a, c);
    lapack_int N = (lapack_int)n, info = 0, lwork = -1;
    double *rw = th_xmalloc(sizeof(double) * (size_t)(3 * n + 2));
    zc q = 0;
    LAPACK_zheev("N", "L", &N, c, &N, w, &q, &lwork, rw, &info);
    lwork = (lapack_int)creal(q) + 1;
    zc *work = th_xmalloc(sizeof(zc) * (size_t)lwork);
    LAPACK_zheev("N", "L", &N, c, &N, w, work, &lwork, rw, &info);
    ck_assert_int_eq(info, 0);
    free(work);
    free(rw);
    free(c);
}

/* L with a = L L^H (zpotrf, lower, zeros above); LAPACK's info. */
static int ref_cholesky(int64_t n, const zc *a, zc *l) {
    zc *c = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    to_col(n, n, a, c);
    lapack_int N = (lapack_int)n, info = 0;
    LAPACK_zpotrf("L", &N, c, &N, &info);
    from_col(n, n, c, l);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) l[i * n + j] = 0;
    free(c);
    return (int)info;
}

/* det a, log |det a| and det / |det| by LU (zgetrf); 0, -inf and 0 for an exactly singular a. */
static void ref_det(int64_t n, const zc *a, zc *det, double *logabs, zc *sign) {
    zc *c = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    to_col(n, n, a, c);
    lapack_int N = (lapack_int)n, info = 0;
    lapack_int *piv = th_xmalloc(sizeof(lapack_int) * (size_t)n);
    LAPACK_zgetrf(&N, &N, c, &N, piv, &info);
    zc d = 1, ph = 1;
    double la = 0;
    for (int64_t i = 0; i < n; i++) {
        const zc u = c[i * n + i];
        d *= u;
        if (piv[i] != i + 1) {
            d = -d;
            ph = -ph;
        }
        if (u == 0) {
            la = -INFINITY;
        } else if (la > -INFINITY) {
            la += log(cabs(u));
            ph *= u / cabs(u);
        }
    }
    *det = info > 0 ? 0 : d;
    *logabs = info > 0 ? -INFINITY : la;
    *sign = info > 0 ? 0 : ph;
    free(piv);
    free(c);
}

/* x[n x k] with a x = b (zgesv). */
static void ref_solve(int64_t n, int64_t k, const zc *a, const zc *b, zc *x) {
    zc *c = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
       *bc = th_xmalloc(sizeof(zc) * (size_t)(n * k));
    to_col(n, n, a, c);
    to_col(n, k, b, bc);
    lapack_int N = (lapack_int)n, K = (lapack_int)k, info = 0;
    lapack_int *piv = th_xmalloc(sizeof(lapack_int) * (size_t)n);
    LAPACK_zgesv(&N, &K, c, &N, piv, bc, &N, &info);
    ck_assert_int_eq(info, 0);
    from_col(n, k, bc, x);
    free(piv);
    free(bc);
    free(c);
}

/* The inverse of a[n x n] (zgetrf, zgetri). */
static void ref_inv(int64_t n, const zc *a, zc *inv) {
    zc *c = th_xmalloc(sizeof(zc) * (size_t)(n * n)), q = 0;
    to_col(n, n, a, c);
    lapack_int N = (lapack_int)n, info = 0, lwork = -1;
    lapack_int *piv = th_xmalloc(sizeof(lapack_int) * (size_t)n);
    LAPACK_zgetrf(&N, &N, c, &N, piv, &info);
    ck_assert_int_eq(info, 0);
    LAPACK_zgetri(&N, c, &N, piv, &q, &lwork, &info);
    lwork = (lapack_int)creal(q) + 1;
    zc *work = th_xmalloc(sizeof(zc) * (size_t)lwork);
    LAPACK_zgetri(&N, c, &N, piv, work, &lwork, &info);
    ck_assert_int_eq(info, 0);
    from_col(n, n, c, inv);
    free(work);
    free(piv);
    free(c);
}

/* A random unitary n x n (orthogonal for a real dt): the Q of a random matrix (zgeqrf, zungqr). */
static void random_unitary(tf_dtype dt, int64_t n, zc *q) {
    zc *c = random_z(th_is_complex(dt) ? TF_C128 : TF_F64, (size_t)(n * n));
    lapack_int N = (lapack_int)n, info = 0, lwork = -1;
    zc *tau = th_xmalloc(sizeof(zc) * (size_t)n), wq = 0;
    LAPACK_zgeqrf(&N, &N, c, &N, tau, &wq, &lwork, &info);
    lwork = (lapack_int)creal(wq) + 1 + 64 * N;
    zc *work = th_xmalloc(sizeof(zc) * (size_t)lwork);
    LAPACK_zgeqrf(&N, &N, c, &N, tau, work, &lwork, &info);
    ck_assert_int_eq(info, 0);
    LAPACK_zungqr(&N, &N, &N, c, &N, tau, work, &lwork, &info);
    ck_assert_int_eq(info, 0);
    from_col(n, n, c, q);
    if (!th_is_complex(dt))
        for (int64_t i = 0; i < n * n; i++) q[i] = creal(q[i]);
    free(work);
    free(tau);
    free(c);
}

/* a[m x n] = Q1[:, :k] diag(s) Q2[:, :k]^H (k = min(m, n)), rounded to dt. */
static void with_singular_values(tf_dtype dt, int64_t m, int64_t n, const double *s, zc *a) {
    const int64_t k = m < n ? m : n;
    zc *q1 = th_xmalloc(sizeof(zc) * (size_t)(m * m)),
       *q2 = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    random_unitary(dt, m, q1);
    random_unitary(dt, n, q2);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            zc v = 0;
            for (int64_t l = 0; l < k; l++) v += q1[i * m + l] * s[l] * conj(q2[j * n + l]);
            a[i * n + j] = v;
        }
    round_to(dt, (size_t)(m * n), a);
    free(q1);
    free(q2);
}

/* Makes a[n x n] exactly Hermitian from its lower triangle (a real diagonal), in dt. */
static void hermitian_from_lower(tf_dtype dt, int64_t n, zc *a) {
    round_to(dt, (size_t)(n * n), a);
    for (int64_t i = 0; i < n; i++) {
        a[i * n + i] = creal(a[i * n + i]);
        for (int64_t j = i + 1; j < n; j++) a[i * n + j] = conj(a[j * n + i]);
    }
}

/* A Hermitian a[n x n] = Q diag(w) Q^H, in dt. */
static void with_eigenvalues(tf_dtype dt, int64_t n, const double *w, zc *a) {
    zc *q = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    random_unitary(dt, n, q);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            zc v = 0;
            for (int64_t l = 0; l < n; l++) v += q[i * n + l] * w[l] * conj(q[j * n + l]);
            a[i * n + j] = v;
        }
    hermitian_from_lower(dt, n, a);
    free(q);
}

/* A random Hermitian a[n x n] (b + b^H of random b), in dt. */
static void random_hermitian(tf_dtype dt, int64_t n, zc *a) {
    zc *b = random_z(dt, (size_t)(n * n));
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) a[i * n + j] = b[i * n + j] + conj(b[j * n + i]);
    hermitian_from_lower(dt, n, a);
    free(b);
}

/* ---- queueing the operations ---- */

enum {
    L_SVD,
    L_SVD_HALF, /* u given, vh NULL: refused */
    L_SVDT,
    L_QR,
    L_EIGH,
    L_EIGHT,
    L_CHOL,
    L_SOLVE,
    L_INV,
    L_DET,
    L_SLOGDET,
    L_VNORM,
    L_MNORM,
    L_TRACE,
    L_DIAG,
    L_SLICE,
    L_COPY,
};

/*
 * One operation and its results: out[] in the kind's order (svd: U, S, Vh,
 * report; qr: Q, R; eigh: W, V, report; slogdet: sign, logabsdet; else the
 * result in out[0]).
 */
typedef struct lop {
    int kind;
    tf_tensor a, b;
    int use_split, use_perm;
    tf_split split;
    int perm[TF_MAX_RANK];
    int full, values_only, upper, no_report;
    tf_qr_mode mode;
    tf_truncation t;
    double p;
    int n_axes, axes[TF_MAX_RANK], keepdims;
    tf_matrix_norm ord;
    int64_t offset;
    int64_t start[TF_MAX_RANK], step[TF_MAX_RANK], len[TF_MAX_RANK];
    tf_tensor out[4];
    tf_status st;
} lop;

static tf_status queue_lop(tf_view *v, lop *o) {
    const tf_split *sp = NULL;
    if (o->use_split) {
        o->split.perm = o->use_perm ? o->perm : NULL;
        sp = &o->split;
    }
    tf_tensor *u = o->values_only ? NULL : &o->out[0], *vh = o->values_only ? NULL : &o->out[2];
    tf_tensor *report = o->no_report ? NULL : &o->out[3];
    switch (o->kind) {
    case L_SVD: return tf_view_svd(v, o->a, sp, o->full, u, &o->out[1], vh);
    case L_SVD_HALF: return tf_view_svd(v, o->a, sp, 0, &o->out[0], &o->out[1], NULL);
    case L_SVDT: return tf_view_svd_truncated(v, o->a, sp, &o->t, u, &o->out[1], vh, report);
    case L_QR: return tf_view_qr(v, o->a, sp, o->mode, &o->out[0], &o->out[1]);
    case L_EIGH:
        return tf_view_eigh(v, o->a, sp, o->upper, &o->out[0], o->values_only ? NULL : &o->out[1]);
    case L_EIGHT:
        return tf_view_eigh_truncated(v, o->a, sp, o->upper, &o->t, &o->out[0],
                                      o->values_only ? NULL : &o->out[1],
                                      o->no_report ? NULL : &o->out[2]);
    case L_CHOL: return tf_view_cholesky(v, o->a, o->upper, &o->out[0]);
    case L_SOLVE: return tf_view_solve(v, o->a, o->b, &o->out[0]);
    case L_INV: return tf_view_inv(v, o->a, &o->out[0]);
    case L_DET: return tf_view_det(v, o->a, &o->out[0]);
    case L_SLOGDET: return tf_view_slogdet(v, o->a, &o->out[0], &o->out[1]);
    case L_VNORM:
        return tf_view_vector_norm(v, o->a, o->p, o->n_axes, o->n_axes ? o->axes : NULL,
                                   o->keepdims, &o->out[0]);
    case L_MNORM:
        return tf_view_matrix_norm(v, o->a, o->ord, o->n_axes ? o->axes : NULL, o->keepdims,
                                   &o->out[0]);
    case L_TRACE: return tf_view_trace(v, o->a, o->offset, &o->out[0]);
    case L_DIAG: return tf_view_diagonal(v, o->a, o->offset, &o->out[0]);
    case L_SLICE: return tf_view_slice(v, o->a, o->start, o->step, o->len, &o->out[0]);
    default: return tf_view_copy(v, o->a, &o->out[0]);
    }
}

typedef struct lop_list {
    lop *o;
    int n;
} lop_list;

static tf_status queue_list(tf_view *v, void *arg) {
    lop_list *l = arg;
    for (int i = 0; i < l->n; i++) {
        l->o[i].st = queue_lop(v, &l->o[i]);
        if (l->o[i].st != TF_OK) return l->o[i].st;
    }
    return TF_OK;
}

/* Runs n operations as one scoped burst; returns its status. */
static tf_status run_scoped_on(tf_client *c, lop *o, int n) {
    lop_list l = {o, n};
    return tf_with_session(c, queue_list, &l);
}

static tf_status run_scoped(lop *o, int n) { return run_scoped_on(C, o, n); }

/* Runs n operations in one burst that must succeed. */
static void run_ok(lop *o, int n) {
    tf_status st = run_scoped(o, n);
    CHECK(st == TF_OK, "the burst returned %s: %s", tf_status_name(st), tf_client_last_error(C));
}

static void free_outs(lop *o) {
    for (int i = 0; i < 4; i++)
        if (o->out[i]) {
            CK_STATUS(C, tf_tensor_free(C, o->out[i]), TF_OK);
            o->out[i] = 0;
        }
}

/* ---- SVD ---- */

enum { M_RANDOM, M_RANK2, M_ILL };

typedef struct mat_case {
    const char *name;
    int nb;
    int64_t batch[2];
    int64_t m, n;
    int kind;
} mat_case;

static const mat_case general_cases[] = {
    {"square", 0, {0}, 5, 5, M_RANDOM},       {"tall", 0, {0}, 7, 4, M_RANDOM},
    {"wide", 0, {0}, 3, 6, M_RANDOM},         {"batched", 2, {2, 3}, 4, 3, M_RANDOM},
    {"1x1", 0, {0}, 1, 1, M_RANDOM},          {"column", 0, {0}, 5, 1, M_RANDOM},
    {"row", 1, {2}, 1, 4, M_RANDOM},          {"rank-deficient", 1, {2}, 6, 5, M_RANK2},
    {"ill-conditioned", 0, {0}, 6, 6, M_ILL}, {"wide rank-deficient", 0, {0}, 4, 7, M_RANK2},
};
#define N_GENERAL ((int)(sizeof general_cases / sizeof general_cases[0]))

/* The matrices of a case: b of m x n, in dt. */
static zc *case_matrices(tf_dtype dt, const mat_case *mc, size_t b) {
    const int64_t m = mc->m, n = mc->n, k = m < n ? m : n;
    zc *a = th_xmalloc(sizeof(zc) * b * (size_t)(m * n));
    for (size_t i = 0; i < b; i++) {
        zc *ai = a + i * (size_t)(m * n);
        if (mc->kind == M_RANDOM) {
            zc *r = random_z(dt, (size_t)(m * n));
            memcpy(ai, r, sizeof(zc) * (size_t)(m * n));
            free(r);
        } else if (mc->kind == M_RANK2) {
            zc *x = random_z(dt, (size_t)(m * 2)), *y = random_z(dt, (size_t)(2 * n));
            mm(m, 2, n, x, y, ai);
            round_to(dt, (size_t)(m * n), ai);
            free(x);
            free(y);
        } else {
            /* Singular values from 1 down to 1e-10 (f64) or 1e-5 (f32). */
            const double span = eps_of(dt) < 1e-10 ? 10 : 5;
            double s[16];
            for (int64_t j = 0; j < k; j++)
                s[j] = pow(10, -span * (double)j / (double)(k > 1 ? k - 1 : 1));
            with_singular_values(dt, m, n, s, ai);
        }
    }
    return a;
}

/* Checks U, S, Vh of one matrix a[m x n] (reduced: r1 = r2 = k; full: m and n). */
static void check_svd_matrix(tf_dtype dt, int64_t m, int64_t n, const zc *a, const got *U,
                             const got *S, const got *Vh, size_t i, int full, const double *sref) {
    const int64_t k = m < n ? m : n, r1 = full ? m : k, r2 = full ? n : k;
    const double tol = bound(dt, m, n), an = fro((size_t)(m * n), a);
    const zc *u = U->z + i * (size_t)(m * r1), *vh = Vh->z + i * (size_t)(r2 * n);
    const zc *s = S->z + i * (size_t)k;
    for (int64_t j = 0; j < k; j++) {
        CHECK(cimag(s[j]) == 0 && creal(s[j]) >= 0, "S[%lld] = %g is not >= 0", (long long)j,
              creal(s[j]));
        if (j) CHECK(creal(s[j]) <= creal(s[j - 1]), "S does not descend at %lld", (long long)j);
        CHECK(fabs(creal(s[j]) - sref[j]) <= tol * sref[0], "S[%lld] = %.9g, zgesvd says %.9g",
              (long long)j, creal(s[j]), sref[j]);
    }
    /* a = U[:, :k] diag(S) Vh[:k, :] */
    zc *us = th_xmalloc(sizeof(zc) * (size_t)(m * k)),
       *re = th_xmalloc(sizeof(zc) * (size_t)(m * n));
    for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < k; j++) us[r * k + j] = u[r * r1 + j] * s[j];
    zc *vk = th_xmalloc(sizeof(zc) * (size_t)(k * n));
    memcpy(vk, vh, sizeof(zc) * (size_t)(k * n));
    mm(m, k, n, us, vk, re);
    CHECK(dist((size_t)(m * n), a, re) <= tol * an, "||A - U S Vh|| / ||A|| = %.3g > %.3g",
          dist((size_t)(m * n), a, re) / an, tol);
    CHECK(orth_cols(m, r1, r1, u) <= tol, "U is not orthonormal: %.3g", orth_cols(m, r1, r1, u));
    CHECK(orth_rows(r2, n, vh) <= tol, "Vh is not orthonormal: %.3g", orth_rows(r2, n, vh));
    /* The gauge: every column of U; the rows of a full Vh past U's columns by their own rule. */
    for (int64_t j = 0; j < r1; j++)
        CHECK(gauge_holds(U, i * (size_t)(m * r1) + (size_t)j, m, r1),
              "column %lld of U breaks the gauge", (long long)j);
    for (int64_t j = r1; j < r2; j++)
        CHECK(gauge_holds(Vh, i * (size_t)(r2 * n) + (size_t)(j * n), n, 1),
              "row %lld of the full Vh breaks the gauge", (long long)j);
    free(us);
    free(re);
    free(vk);
}

static void svd_case(tf_dtype dt, const mat_case *mc) {
    const int64_t m = mc->m, n = mc->n, k = m < n ? m : n;
    const size_t b = prod(mc->batch, mc->nb);
    int64_t shape[TF_MAX_RANK];
    const int rank = shape_of(shape, mc->nb, mc->batch, 2, m, n);
    zc *a = case_matrices(dt, mc, b);
    tf_tensor ta = upload_z(dt, rank, shape, a);
    lop o[4] = {{.kind = L_SVD, .a = ta},
                {.kind = L_SVD, .a = ta, .full = 1},
                {.kind = L_SVD, .a = ta, .values_only = 1},
                {.kind = L_SVD, .a = ta}};
    run_ok(o, 3);
    const tf_dtype rt = th_real_of(dt);
    got U = fetch(o[0].out[0]), S = fetch(o[0].out[1]), Vh = fetch(o[0].out[2]);
    got FU = fetch(o[1].out[0]), FS = fetch(o[1].out[1]), FVh = fetch(o[1].out[2]);
    got VS = fetch(o[2].out[1]);
    int64_t want[TF_MAX_RANK];
    expect_meta(&U, dt, shape_of(want, mc->nb, mc->batch, 2, m, k), want, "U");
    expect_meta(&S, rt, shape_of(want, mc->nb, mc->batch, 1, k, 0), want, "S");
    expect_meta(&Vh, dt, shape_of(want, mc->nb, mc->batch, 2, k, n), want, "Vh");
    expect_meta(&FU, dt, shape_of(want, mc->nb, mc->batch, 2, m, m), want, "full U");
    expect_meta(&FVh, dt, shape_of(want, mc->nb, mc->batch, 2, n, n), want, "full Vh");
    expect_meta(&VS, rt, shape_of(want, mc->nb, mc->batch, 1, k, 0), want, "values-only S");
    CHECK(o[2].out[0] == 0 && o[2].out[2] == 0, "values only made U or Vh");
    double *sref = th_xmalloc(sizeof(double) * (size_t)k);
    for (size_t i = 0; i < b; i++) {
        const zc *ai = a + i * (size_t)(m * n);
        ref_svd(m, n, ai, sref);
        check_svd_matrix(dt, m, n, ai, &U, &S, &Vh, i, 0, sref);
        check_svd_matrix(dt, m, n, ai, &FU, &FS, &FVh, i, 1, sref);
        for (int64_t j = 0; j < k; j++)
            CHECK(fabs(creal(VS.z[i * (size_t)k + (size_t)j]) - sref[j]) <=
                      bound(dt, m, n) * sref[0],
                  "values-only S[%lld] = %.9g, zgesvd says %.9g", (long long)j,
                  creal(VS.z[i * (size_t)k + (size_t)j]), sref[j]);
    }
    /* Determinism: the same decomposition again gives the same bytes. */
    run_ok(&o[3], 1);
    got U2 = fetch(o[3].out[0]), S2 = fetch(o[3].out[1]), Vh2 = fetch(o[3].out[2]);
    CHECK(memcmp(U.raw, U2.raw, U.n * tf_dtype_size(dt)) == 0 &&
              memcmp(S.raw, S2.raw, S.n * tf_dtype_size(rt)) == 0 &&
              memcmp(Vh.raw, Vh2.raw, Vh.n * tf_dtype_size(dt)) == 0,
          "a second run of the same svd gave other bytes");
    expect_unchanged(ta, a, "A");
    got *all[] = {&U, &S, &Vh, &FU, &FS, &FVh, &VS, &U2, &S2, &Vh2};
    for (size_t g = 0; g < sizeof all / sizeof *all; g++) got_free(all[g]);
    for (int j = 0; j < 4; j++) free_outs(&o[j]);
    CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
    free(sref);
    free(a);
}

START_TEST(test_svd) {
    start();
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < N_GENERAL; c++) {
            WHAT("svd %s %s [%lld x %lld]", tf_dtype_name(all_dtypes[d]), general_cases[c].name,
                 (long long)general_cases[c].m, (long long)general_cases[c].n);
            svd_case(all_dtypes[d], &general_cases[c]);
        }
    stop();
}
END_TEST

/* ---- QR ---- */

/* Checks Q (or none) and R of one matrix: R upper with exact zeros, its diagonal real >= 0. */
static void check_qr_matrix(tf_dtype dt, int64_t m, int64_t n, const zc *a, const got *Q,
                            const got *R, size_t i, int64_t kq, double cond, int compare) {
    const int64_t k = m < n ? m : n;
    const double tol = bound(dt, m, n), an = fro((size_t)(m * n), a);
    const zc *r = R->z + i * (size_t)(kq * n);
    for (int64_t x = 0; x < kq; x++)
        for (int64_t y = 0; y < n && y < x; y++)
            CHECK(r[x * n + y] == 0, "R[%lld, %lld] = %g below the diagonal", (long long)x,
                  (long long)y, cabs(r[x * n + y]));
    for (int64_t j = 0; j < k; j++)
        CHECK(cimag(r[j * n + j]) == 0 && creal(r[j * n + j]) >= 0,
              "R[%lld, %lld] = %g%+gi is not real and >= 0", (long long)j, (long long)j,
              creal(r[j * n + j]), cimag(r[j * n + j]));
    if (Q) {
        const zc *q = Q->z + i * (size_t)(m * kq);
        zc *re = th_xmalloc(sizeof(zc) * (size_t)(m * n));
        mm(m, kq, n, q, r, re);
        CHECK(dist((size_t)(m * n), a, re) <= tol * an, "||A - Q R|| / ||A|| = %.3g",
              dist((size_t)(m * n), a, re) / an);
        CHECK(orth_cols(m, kq, kq, q) <= tol, "Q is not orthonormal: %.3g",
              orth_cols(m, kq, kq, q));
        free(re);
    }
    if (compare) {
        /* R is unique for a matrix of full rank; its first-order error grows with the condition. */
        zc *rr = th_xmalloc(sizeof(zc) * (size_t)(k * n));
        ref_qr_r(m, n, a, rr);
        const double e = dist((size_t)(k * n), r, rr);
        CHECK(e <= tol * cond * an, "R differs from zgeqrf's by %.3g (||A|| %.3g, cond %.3g)", e,
              an, cond);
        free(rr);
    }
}

static void qr_case(tf_dtype dt, const mat_case *mc) {
    const int64_t m = mc->m, n = mc->n, k = m < n ? m : n;
    const size_t b = prod(mc->batch, mc->nb);
    int64_t shape[TF_MAX_RANK], want[TF_MAX_RANK];
    const int rank = shape_of(shape, mc->nb, mc->batch, 2, m, n);
    zc *a = case_matrices(dt, mc, b);
    tf_tensor ta = upload_z(dt, rank, shape, a);
    lop o[4] = {{.kind = L_QR, .a = ta, .mode = TF_QR_REDUCED},
                {.kind = L_QR, .a = ta, .mode = TF_QR_COMPLETE},
                {.kind = L_QR, .a = ta, .mode = TF_QR_R},
                {.kind = L_QR, .a = ta, .mode = TF_QR_REDUCED}};
    run_ok(o, 3);
    CHECK(o[2].out[0] == 0, "mode r made a Q");
    got Q = fetch(o[0].out[0]), R = fetch(o[0].out[1]);
    got CQ = fetch(o[1].out[0]), CR = fetch(o[1].out[1]), RR = fetch(o[2].out[1]);
    expect_meta(&Q, dt, shape_of(want, mc->nb, mc->batch, 2, m, k), want, "Q");
    expect_meta(&R, dt, shape_of(want, mc->nb, mc->batch, 2, k, n), want, "R");
    expect_meta(&CQ, dt, shape_of(want, mc->nb, mc->batch, 2, m, m), want, "complete Q");
    expect_meta(&CR, dt, shape_of(want, mc->nb, mc->batch, 2, m, n), want, "complete R");
    expect_meta(&RR, dt, shape_of(want, mc->nb, mc->batch, 2, k, n), want, "mode-r R");
    for (size_t i = 0; i < b; i++) {
        const zc *ai = a + i * (size_t)(m * n);
        const int full_rank = mc->kind != M_RANK2;
        const double cond = full_rank ? cond_of(m, n, ai) : INFINITY;
        check_qr_matrix(dt, m, n, ai, &Q, &R, i, k, cond, full_rank);
        check_qr_matrix(dt, m, n, ai, &CQ, &CR, i, m, cond, 0);
        check_qr_matrix(dt, m, n, ai, NULL, &RR, i, k, cond, full_rank);
    }
    run_ok(&o[3], 1);
    got Q2 = fetch(o[3].out[0]), R2 = fetch(o[3].out[1]);
    CHECK(memcmp(Q.raw, Q2.raw, Q.n * tf_dtype_size(dt)) == 0 &&
              memcmp(R.raw, R2.raw, R.n * tf_dtype_size(dt)) == 0,
          "a second run of the same qr gave other bytes");
    expect_unchanged(ta, a, "A");
    got *all[] = {&Q, &R, &CQ, &CR, &RR, &Q2, &R2};
    for (size_t g = 0; g < sizeof all / sizeof *all; g++) got_free(all[g]);
    for (int j = 0; j < 4; j++) free_outs(&o[j]);
    CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
    free(a);
}

START_TEST(test_qr) {
    start();
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < N_GENERAL; c++) {
            WHAT("qr %s %s [%lld x %lld]", tf_dtype_name(all_dtypes[d]), general_cases[c].name,
                 (long long)general_cases[c].m, (long long)general_cases[c].n);
            qr_case(all_dtypes[d], &general_cases[c]);
        }
    stop();
}
END_TEST

/* ---- eigh ---- */

enum { H_RANDOM, H_ILL, H_DEGENERATE };

typedef struct herm_case {
    const char *name;
    int nb;
    int64_t batch[2];
    int64_t n;
    int kind;
} herm_case;

static const herm_case herm_cases[] = {
    {"1x1", 0, {0}, 1, H_RANDOM},
    {"5x5", 0, {0}, 5, H_RANDOM},
    {"batched", 2, {3, 2}, 4, H_RANDOM},
    {"ill-conditioned", 0, {0}, 6, H_ILL},
    {"degenerate", 1, {2}, 5, H_DEGENERATE},
};
#define N_HERM ((int)(sizeof herm_cases / sizeof herm_cases[0]))

static zc *herm_matrices(tf_dtype dt, const herm_case *hc, size_t b) {
    const int64_t n = hc->n;
    zc *a = th_xmalloc(sizeof(zc) * b * (size_t)(n * n));
    for (size_t i = 0; i < b; i++) {
        zc *ai = a + i * (size_t)(n * n);
        double w[16];
        if (hc->kind == H_RANDOM) {
            random_hermitian(dt, n, ai);
            continue;
        }
        for (int64_t j = 0; j < n; j++)
            w[j] = hc->kind == H_ILL
                       ? (j % 2 ? -1 : 1) * pow(10, -(eps_of(dt) < 1e-10 ? 10.0 : 5.0) * (double)j /
                                                        (double)(n - 1))
                       : (j < 3    ? 2.0
                          : j == 3 ? 1.0
                                   : -1.0);
        with_eigenvalues(dt, n, w, ai);
    }
    return a;
}

/* Fills the triangle eigh must not read with garbage (lower: the strict lower one). */
static void spoil_triangle(tf_dtype dt, int64_t n, size_t b, zc *a, int lower) {
    zc *g = random_z(dt, b * (size_t)(n * n));
    for (size_t i = 0; i < b; i++)
        for (int64_t x = 0; x < n; x++)
            for (int64_t y = 0; y < n; y++)
                if (lower ? y < x : y > x)
                    a[i * (size_t)(n * n) + (size_t)(x * n + y)] =
                        7 * g[i * (size_t)(n * n) + (size_t)(x * n + y)];
    free(g);
}

static void check_eigh_matrix(tf_dtype dt, int64_t n, const zc *a, const got *W, const got *V,
                              size_t i) {
    const double tol = bound(dt, n, n), an = fro((size_t)(n * n), a);
    double *wref = th_xmalloc(sizeof(double) * (size_t)n);
    ref_eigh(n, a, wref);
    const zc *w = W->z + i * (size_t)n;
    double wmax = 0;
    for (int64_t j = 0; j < n; j++) wmax = fmax(wmax, fabs(wref[j]));
    for (int64_t j = 0; j < n; j++) {
        if (j) CHECK(creal(w[j]) >= creal(w[j - 1]), "W does not ascend at %lld", (long long)j);
        CHECK(fabs(creal(w[j]) - wref[j]) <= tol * wmax, "W[%lld] = %.9g, zheev says %.9g",
              (long long)j, creal(w[j]), wref[j]);
    }
    if (V) {
        const zc *v = V->z + i * (size_t)(n * n);
        zc *av = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
           *vw = th_xmalloc(sizeof(zc) * (size_t)(n * n));
        mm(n, n, n, a, v, av);
        for (int64_t x = 0; x < n; x++)
            for (int64_t j = 0; j < n; j++) vw[x * n + j] = v[x * n + j] * w[j];
        CHECK(dist((size_t)(n * n), av, vw) <= tol * an, "||A V - V W|| / ||A|| = %.3g",
              dist((size_t)(n * n), av, vw) / an);
        CHECK(orth_cols(n, n, n, v) <= tol, "V is not orthonormal: %.3g", orth_cols(n, n, n, v));
        for (int64_t j = 0; j < n; j++)
            CHECK(gauge_holds(V, i * (size_t)(n * n) + (size_t)j, n, n),
                  "column %lld of V breaks the gauge", (long long)j);
        free(av);
        free(vw);
    }
    free(wref);
}

static void eigh_case(tf_dtype dt, const herm_case *hc) {
    const int64_t n = hc->n;
    const size_t b = prod(hc->batch, hc->nb), nn = b * (size_t)(n * n);
    int64_t shape[TF_MAX_RANK], want[TF_MAX_RANK];
    const int rank = shape_of(shape, hc->nb, hc->batch, 2, n, n);
    zc *a = herm_matrices(dt, hc, b);
    zc *lo = th_xmalloc(sizeof(zc) * nn), *up = th_xmalloc(sizeof(zc) * nn);
    memcpy(lo, a, sizeof(zc) * nn);
    memcpy(up, a, sizeof(zc) * nn);
    spoil_triangle(dt, n, b, lo, 0); /* the lower triangle is what counts */
    spoil_triangle(dt, n, b, up, 1); /* the upper one */
    tf_tensor tf_full = upload_z(dt, rank, shape, a), tlo = upload_z(dt, rank, shape, lo),
              tup = upload_z(dt, rank, shape, up);
    lop o[5] = {{.kind = L_EIGH, .a = tf_full},
                {.kind = L_EIGH, .a = tlo},
                {.kind = L_EIGH, .a = tup, .upper = 1},
                {.kind = L_EIGH, .a = tlo, .values_only = 1},
                {.kind = L_EIGH, .a = tf_full}};
    run_ok(o, 4);
    CHECK(o[3].out[1] == 0, "values only made V");
    got W = fetch(o[0].out[0]), V = fetch(o[0].out[1]);
    got LW = fetch(o[1].out[0]), LV = fetch(o[1].out[1]), UW = fetch(o[2].out[0]),
        UV = fetch(o[2].out[1]), VW = fetch(o[3].out[0]);
    expect_meta(&W, th_real_of(dt), shape_of(want, hc->nb, hc->batch, 1, n, 0), want, "W");
    expect_meta(&V, dt, shape_of(want, hc->nb, hc->batch, 2, n, n), want, "V");
    for (size_t i = 0; i < b; i++) {
        const zc *ai = a + i * (size_t)(n * n);
        check_eigh_matrix(dt, n, ai, &W, &V, i);
        check_eigh_matrix(dt, n, ai, &LW, &LV, i);
        check_eigh_matrix(dt, n, ai, &UW, &UV, i);
        check_eigh_matrix(dt, n, ai, &VW, NULL, i);
    }
    /* The triangle not read makes no difference at all. */
    CHECK(memcmp(W.raw, LW.raw, W.n * tf_dtype_size(W.dt)) == 0 &&
              memcmp(V.raw, LV.raw, V.n * tf_dtype_size(dt)) == 0,
          "garbage above the diagonal changed eigh (lower)");
    run_ok(&o[4], 1);
    got W2 = fetch(o[4].out[0]), V2 = fetch(o[4].out[1]);
    CHECK(memcmp(W.raw, W2.raw, W.n * tf_dtype_size(W.dt)) == 0 &&
              memcmp(V.raw, V2.raw, V.n * tf_dtype_size(dt)) == 0,
          "a second run of the same eigh gave other bytes");
    expect_unchanged(tlo, lo, "A with garbage above the diagonal");
    expect_unchanged(tup, up, "A with garbage below the diagonal");
    got *all[] = {&W, &V, &LW, &LV, &UW, &UV, &VW, &W2, &V2};
    for (size_t g = 0; g < sizeof all / sizeof *all; g++) got_free(all[g]);
    for (int j = 0; j < 5; j++) free_outs(&o[j]);
    CK_STATUS(C, tf_tensor_free(C, tf_full), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tlo), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tup), TF_OK);
    free(a);
    free(lo);
    free(up);
}

START_TEST(test_eigh) {
    start();
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < N_HERM; c++) {
            WHAT("eigh %s %s [%lld x %lld]", tf_dtype_name(all_dtypes[d]), herm_cases[c].name,
                 (long long)herm_cases[c].n, (long long)herm_cases[c].n);
            eigh_case(all_dtypes[d], &herm_cases[c]);
        }
    stop();
}
END_TEST

/* ---- cholesky, solve, inv, det, slogdet ---- */

/* b Hermitian positive definite n x n: random B B^H + n I, or with eigenvalues 1 .. 1e-8 (1e-4). */
static zc *hpd_matrices(tf_dtype dt, int64_t n, size_t b, int ill) {
    zc *a = th_xmalloc(sizeof(zc) * b * (size_t)(n * n));
    for (size_t i = 0; i < b; i++) {
        zc *ai = a + i * (size_t)(n * n);
        if (ill) {
            double w[16];
            for (int64_t j = 0; j < n; j++)
                w[j] = pow(10, -(eps_of(dt) < 1e-10 ? 8.0 : 4.0) * (double)j /
                                   (double)(n > 1 ? n - 1 : 1));
            with_eigenvalues(dt, n, w, ai);
        } else {
            zc *r = random_z(dt, (size_t)(n * n)), *rh = th_xmalloc(sizeof(zc) * (size_t)(n * n));
            adj(n, n, r, rh);
            mm(n, n, n, r, rh, ai);
            for (int64_t j = 0; j < n; j++) ai[j * n + j] += (double)n;
            hermitian_from_lower(dt, n, ai);
            free(r);
            free(rh);
        }
    }
    return a;
}

typedef struct sq_case {
    const char *name;
    int nb;
    int64_t batch[2];
    int64_t n;
    int ill;
} sq_case;

static const sq_case sq_cases[] = {
    {"1x1", 0, {0}, 1, 0},
    {"4x4", 0, {0}, 4, 0},
    {"batched", 2, {2, 3}, 5, 0},
    {"ill-conditioned", 1, {2}, 6, 1},
};
#define N_SQ ((int)(sizeof sq_cases / sizeof sq_cases[0]))

static void cholesky_case(tf_dtype dt, const sq_case *sc) {
    const int64_t n = sc->n;
    const size_t b = prod(sc->batch, sc->nb), nn = b * (size_t)(n * n);
    int64_t shape[TF_MAX_RANK];
    const int rank = shape_of(shape, sc->nb, sc->batch, 2, n, n);
    zc *a = hpd_matrices(dt, n, b, sc->ill);
    zc *lo = th_xmalloc(sizeof(zc) * nn), *up = th_xmalloc(sizeof(zc) * nn);
    memcpy(lo, a, sizeof(zc) * nn);
    memcpy(up, a, sizeof(zc) * nn);
    spoil_triangle(dt, n, b, lo, 0);
    spoil_triangle(dt, n, b, up, 1);
    tf_tensor ta = upload_z(dt, rank, shape, a), tlo = upload_z(dt, rank, shape, lo),
              tup = upload_z(dt, rank, shape, up);
    lop o[4] = {{.kind = L_CHOL, .a = ta},
                {.kind = L_CHOL, .a = ta, .upper = 1},
                {.kind = L_CHOL, .a = tlo},
                {.kind = L_CHOL, .a = tup, .upper = 1}};
    run_ok(o, 4);
    got L = fetch(o[0].out[0]), U = fetch(o[1].out[0]), L2 = fetch(o[2].out[0]),
        U2 = fetch(o[3].out[0]);
    expect_meta(&L, dt, rank, shape, "L");
    expect_meta(&U, dt, rank, shape, "U");
    CHECK(memcmp(L.raw, L2.raw, L.n * tf_dtype_size(dt)) == 0,
          "garbage above the diagonal changed L");
    CHECK(memcmp(U.raw, U2.raw, U.n * tf_dtype_size(dt)) == 0,
          "garbage below the diagonal changed U");
    const double tol = bound(dt, n, n);
    zc *ref = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
       *lh = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
       *re = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    for (size_t i = 0; i < b; i++) {
        const zc *ai = a + i * (size_t)(n * n), *l = L.z + i * (size_t)(n * n),
                 *u = U.z + i * (size_t)(n * n);
        const double an = fro((size_t)(n * n), ai);
        for (int64_t x = 0; x < n; x++)
            for (int64_t y = 0; y < n; y++) {
                if (y > x)
                    CHECK(l[x * n + y] == 0, "L[%lld, %lld] is not zero", (long long)x,
                          (long long)y);
                if (y < x)
                    CHECK(u[x * n + y] == 0, "U[%lld, %lld] is not zero", (long long)x,
                          (long long)y);
            }
        adj(n, n, l, lh);
        mm(n, n, n, l, lh, re);
        CHECK(dist((size_t)(n * n), ai, re) <= tol * an, "||A - L L^H|| / ||A|| = %.3g",
              dist((size_t)(n * n), ai, re) / an);
        /* U = L^H: the factors agree. */
        CHECK(dist((size_t)(n * n), u, lh) <= tol * fro((size_t)(n * n), lh) * (sc->ill ? 1e4 : 10),
              "U is not L^H: %.3g", dist((size_t)(n * n), u, lh));
        ck_assert_int_eq(ref_cholesky(n, ai, ref), 0);
        const double cond = sc->ill ? (eps_of(dt) < 1e-10 ? 1e8 : 1e4) : cond_of(n, n, ai);
        CHECK(dist((size_t)(n * n), l, ref) <= tol * cond * fro((size_t)(n * n), ref),
              "L differs from zpotrf's by %.3g", dist((size_t)(n * n), l, ref));
    }
    free(ref);
    free(lh);
    free(re);
    expect_unchanged(tlo, lo, "A with garbage above the diagonal");
    expect_unchanged(tup, up, "A with garbage below the diagonal");
    got *all[] = {&L, &U, &L2, &U2};
    for (size_t g = 0; g < 4; g++) got_free(all[g]);
    for (int j = 0; j < 4; j++) free_outs(&o[j]);
    CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tlo), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tup), TF_OK);
    free(a);
    free(lo);
    free(up);
}

/* General square matrices: random plus n I (well conditioned), or of condition 1e8 (1e4). */
static zc *square_matrices(tf_dtype dt, int64_t n, size_t b, int ill) {
    zc *a = th_xmalloc(sizeof(zc) * b * (size_t)(n * n));
    for (size_t i = 0; i < b; i++) {
        zc *ai = a + i * (size_t)(n * n);
        if (ill) {
            double s[16];
            for (int64_t j = 0; j < n; j++)
                s[j] = pow(10, -(eps_of(dt) < 1e-10 ? 8.0 : 4.0) * (double)j /
                                   (double)(n > 1 ? n - 1 : 1));
            with_singular_values(dt, n, n, s, ai);
        } else {
            zc *r = random_z(dt, (size_t)(n * n));
            for (int64_t j = 0; j < n; j++) r[j * n + j] += (double)n;
            memcpy(ai, r, sizeof(zc) * (size_t)(n * n));
            round_to(dt, (size_t)(n * n), ai);
            free(r);
        }
    }
    return a;
}

static void solve_case(tf_dtype dt, const sq_case *sc) {
    const int64_t n = sc->n, nrhs = 3;
    const size_t b = prod(sc->batch, sc->nb);
    int64_t shape[TF_MAX_RANK], vshape[TF_MAX_RANK], mshape[TF_MAX_RANK];
    const int rank = shape_of(shape, sc->nb, sc->batch, 2, n, n);
    const int vrank = shape_of(vshape, sc->nb, sc->batch, 1, n, 0);
    const int mrank = shape_of(mshape, sc->nb, sc->batch, 2, n, nrhs);
    zc *a = square_matrices(dt, n, b, sc->ill);
    zc *bv = random_z(dt, b * (size_t)n), *bm = random_z(dt, b * (size_t)(n * nrhs));
    tf_tensor ta = upload_z(dt, rank, shape, a), tv = upload_z(dt, vrank, vshape, bv),
              tm = upload_z(dt, mrank, mshape, bm);
    lop o[5] = {{.kind = L_SOLVE, .a = ta, .b = tv},
                {.kind = L_SOLVE, .a = ta, .b = tm},
                {.kind = L_INV, .a = ta},
                {.kind = L_DET, .a = ta},
                {.kind = L_SLOGDET, .a = ta}};
    run_ok(o, 5);
    got XV = fetch(o[0].out[0]), XM = fetch(o[1].out[0]), INV = fetch(o[2].out[0]),
        DET = fetch(o[3].out[0]), SIGN = fetch(o[4].out[0]), LAD = fetch(o[4].out[1]);
    expect_meta(&XV, dt, vrank, vshape, "x (vector)");
    expect_meta(&XM, dt, mrank, mshape, "X (matrix)");
    expect_meta(&INV, dt, rank, shape, "inv");
    expect_meta(&DET, dt, sc->nb, sc->batch, "det");
    expect_meta(&SIGN, dt, sc->nb, sc->batch, "sign");
    expect_meta(&LAD, th_real_of(dt), sc->nb, sc->batch, "logabsdet");
    const double tol = bound(dt, n, n);
    zc *ax = th_xmalloc(sizeof(zc) * (size_t)(n * nrhs)),
       *xr = th_xmalloc(sizeof(zc) * (size_t)(n * nrhs)),
       *ir = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
       *eye = th_xmalloc(sizeof(zc) * (size_t)(n * n)),
       *prodm = th_xmalloc(sizeof(zc) * (size_t)(n * n));
    for (int64_t x = 0; x < n * n; x++) eye[x] = x % (n + 1) == 0;
    for (size_t i = 0; i < b; i++) {
        const zc *ai = a + i * (size_t)(n * n);
        const double an = fro((size_t)(n * n), ai), cond = cond_of(n, n, ai);
        /* Backward errors, then the forward error against LAPACK within the condition. */
        const zc *xv = XV.z + i * (size_t)n, *xm = XM.z + i * (size_t)(n * nrhs);
        const zc *bvi = bv + i * (size_t)n, *bmi = bm + i * (size_t)(n * nrhs);
        mm(n, n, 1, ai, xv, ax);
        CHECK(dist((size_t)n, ax, bvi) <= tol * (an * fro((size_t)n, xv) + fro((size_t)n, bvi)),
              "vector solve: residual %.3g", dist((size_t)n, ax, bvi));
        ref_solve(n, 1, ai, bvi, xr);
        CHECK(dist((size_t)n, xv, xr) <= tol * cond * fro((size_t)n, xr),
              "vector solve differs from zgesv: %.3g",
              dist((size_t)n, xv, xr) / fro((size_t)n, xr));
        mm(n, n, nrhs, ai, xm, ax);
        CHECK(dist((size_t)(n * nrhs), ax, bmi) <=
                  tol * (an * fro((size_t)(n * nrhs), xm) + fro((size_t)(n * nrhs), bmi)),
              "matrix solve: residual %.3g", dist((size_t)(n * nrhs), ax, bmi));
        ref_solve(n, nrhs, ai, bmi, xr);
        CHECK(dist((size_t)(n * nrhs), xm, xr) <= tol * cond * fro((size_t)(n * nrhs), xr),
              "matrix solve differs from zgesv: %.3g",
              dist((size_t)(n * nrhs), xm, xr) / fro((size_t)(n * nrhs), xr));
        const zc *inv = INV.z + i * (size_t)(n * n);
        mm(n, n, n, ai, inv, prodm);
        CHECK(dist((size_t)(n * n), prodm, eye) <= tol * an * fro((size_t)(n * n), inv),
              "||A inv(A) - I|| = %.3g", dist((size_t)(n * n), prodm, eye));
        ref_inv(n, ai, ir);
        CHECK(dist((size_t)(n * n), inv, ir) <= tol * cond * fro((size_t)(n * n), ir),
              "inv differs from zgetri's: %.3g",
              dist((size_t)(n * n), inv, ir) / fro((size_t)(n * n), ir));
        zc det, sign;
        double lad;
        ref_det(n, ai, &det, &lad, &sign);
        CHECK(cabs(DET.z[i] - det) <= tol * cond * cabs(det),
              "det = %.9g%+.9gi, zgetrf says %.9g%+.9gi", creal(DET.z[i]), cimag(DET.z[i]),
              creal(det), cimag(det));
        CHECK(fabs(creal(LAD.z[i]) - lad) <= tol * cond * (1 + fabs(lad)),
              "logabsdet = %.9g, zgetrf says %.9g", creal(LAD.z[i]), lad);
        CHECK(cabs(SIGN.z[i] - sign) <= tol * cond, "sign = %g%+gi, zgetrf says %g%+gi",
              creal(SIGN.z[i]), cimag(SIGN.z[i]), creal(sign), cimag(sign));
        if (!th_is_complex(dt))
            CHECK(SIGN.z[i] == 1 || SIGN.z[i] == -1, "a real sign of %g", creal(SIGN.z[i]));
        else
            CHECK(fabs(cabs(SIGN.z[i]) - 1) <= 4 * eps_of(dt), "|sign| = %.9g", cabs(SIGN.z[i]));
        /* det = sign exp(logabsdet) */
        const zc rebuilt = SIGN.z[i] * exp(creal(LAD.z[i]));
        CHECK(cabs(rebuilt - DET.z[i]) <= tol * (1 + fabs(creal(LAD.z[i]))) * cabs(DET.z[i]),
              "sign exp(logabsdet) = %g, det = %g", cabs(rebuilt), cabs(DET.z[i]));
    }
    free(ax);
    free(xr);
    free(ir);
    free(eye);
    free(prodm);
    expect_unchanged(ta, a, "A");
    expect_unchanged(tv, bv, "b");
    expect_unchanged(tm, bm, "B");
    got *all[] = {&XV, &XM, &INV, &DET, &SIGN, &LAD};
    for (size_t g = 0; g < 6; g++) got_free(all[g]);
    for (int j = 0; j < 5; j++) free_outs(&o[j]);
    CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tv), TF_OK);
    CK_STATUS(C, tf_tensor_free(C, tm), TF_OK);
    free(a);
    free(bv);
    free(bm);
}

START_TEST(test_cholesky_solve_inv_det) {
    start();
    for (int d = 0; d < 4; d++)
        for (int c = 0; c < N_SQ; c++) {
            WHAT("cholesky %s %s n=%lld", tf_dtype_name(all_dtypes[d]), sq_cases[c].name,
                 (long long)sq_cases[c].n);
            cholesky_case(all_dtypes[d], &sq_cases[c]);
            WHAT("solve/inv/det/slogdet %s %s n=%lld", tf_dtype_name(all_dtypes[d]),
                 sq_cases[c].name, (long long)sq_cases[c].n);
            solve_case(all_dtypes[d], &sq_cases[c]);
        }
    stop();
}
END_TEST

/*
 * Exactly singular, with a zero row: LU meets an exact zero pivot in every
 * dtype whatever its pivoting and rounding (dependent rows need not: with
 * fused multiply-adds, cuBLAS's batched LU leaves a pivot of a few ulps).
 */
static const double singular3[9] = {1, 2, 3, 0, 0, 0, 4, 1, 1};

START_TEST(test_det_singular) {
    start();
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        WHAT("det of a singular matrix, %s", tf_dtype_name(dt));
        zc a[18];
        for (int i = 0; i < 9; i++) a[i] = singular3[i];
        zc *r = random_z(dt, 9);
        for (int i = 0; i < 9; i++) a[9 + i] = r[i] + (i % 4 == 0 ? 3 : 0);
        free(r);
        const int64_t shape[3] = {2, 3, 3};
        tf_tensor ta = upload_z(dt, 3, shape, a);
        lop o[2] = {{.kind = L_DET, .a = ta}, {.kind = L_SLOGDET, .a = ta}};
        run_ok(o, 2);
        got DET = fetch(o[0].out[0]), SIGN = fetch(o[1].out[0]), LAD = fetch(o[1].out[1]);
        /*
         * LAPACK's LU meets the exact zero pivot; cuBLAS's batched LU may round
         * it to a pivot of a few ulps instead. Either way det is at rounding
         * level, and slogdet says the same: 0 and -inf, or a unit sign and
         * exp(logabsdet) = |det|.
         */
        const double dtol = 64 * eps_of(dt) * 6 * 6 * 6;
        CHECK(cabs(DET.z[0]) <= dtol, "det of a singular matrix = %g", cabs(DET.z[0]));
        if (DET.z[0] == 0) {
            CHECK(SIGN.z[0] == 0, "sign of a singular matrix = %g", cabs(SIGN.z[0]));
            CHECK(isinf(creal(LAD.z[0])) && creal(LAD.z[0]) < 0,
                  "logabsdet of a singular matrix = %g", creal(LAD.z[0]));
        } else {
            CHECK(fabs(cabs(SIGN.z[0]) - 1) <= 1e-5 &&
                      fabs(exp(creal(LAD.z[0])) - cabs(DET.z[0])) <= 1e-3 * cabs(DET.z[0]),
                  "slogdet (%g, %g) of a singular matrix does not match det %g", cabs(SIGN.z[0]),
                  creal(LAD.z[0]), cabs(DET.z[0]));
        }
        zc det, sign;
        double lad;
        ref_det(3, a + 9, &det, &lad, &sign);
        CHECK(cabs(DET.z[1] - det) <= bound(dt, 3, 3) * cond_of(3, 3, a + 9) * cabs(det),
              "det of the regular matrix beside it = %g, zgetrf says %g", cabs(DET.z[1]),
              cabs(det));
        got_free(&DET);
        got_free(&SIGN);
        got_free(&LAD);
        free_outs(&o[0]);
        free_outs(&o[1]);
        CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
    }
    stop();
}
END_TEST

/* ---- the tensor form ---- */

/* dst = src with its axes in the order perm (dst axis i is src axis perm[i]). */
static void permute_host(int rank, const int64_t *shape, const int *perm, const zc *src, zc *dst,
                         int64_t *dshape) {
    int64_t stride[TF_MAX_RANK];
    stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--) stride[i] = stride[i + 1] * shape[i + 1];
    for (int i = 0; i < rank; i++) dshape[i] = shape[perm[i]];
    const size_t n = prod(shape, rank);
    int64_t idx[TF_MAX_RANK] = {0};
    for (size_t f = 0; f < n; f++) {
        int64_t at = 0;
        for (int i = 0; i < rank; i++) at += idx[i] * stride[perm[i]];
        dst[f] = src[at];
        for (int i = rank - 1; i >= 0; i--) {
            if (++idx[i] < dshape[i]) break;
            idx[i] = 0;
        }
    }
}

/* Two results hold the same bytes (shapes may differ: a factor in tensor and in matrix form). */
static void same_bytes(tf_tensor x, tf_tensor y, const char *name) {
    got gx = fetch(x), gy = fetch(y);
    CHECK(gx.dt == gy.dt && gx.n == gy.n &&
              memcmp(gx.raw, gy.raw, gx.n * tf_dtype_size(gx.dt)) == 0,
          "%s: the tensor form differs from the matrix form of the permuted copy", name);
    got_free(&gx);
    got_free(&gy);
}

/* A split of a rank-4 tensor and the matrix form it must equal. */
typedef struct form_case {
    const char *name;
    int use_perm;
    int perm[4];
    int nb, nr;
} form_case;

static const form_case form_cases[] = {
    {"split 2|2", 0, {0, 1, 2, 3}, 0, 2},
    {"split 1|3", 0, {0, 1, 2, 3}, 0, 1},
    {"perm 2 0 3 1, split 2|2", 1, {2, 0, 3, 1}, 0, 2},
    {"perm 1 3 0 2, batch 1, split 1|2", 1, {1, 3, 0, 2}, 1, 1},
    {"identity perm, batch 2, split 1|1", 1, {0, 1, 2, 3}, 2, 1},
};

START_TEST(test_tensor_form) {
    start();
    const int64_t shape[4] = {2, 3, 4, 5};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        zc *t = random_z(dt, 120), *p = th_xmalloc(sizeof(zc) * 120);
        tf_tensor tt = upload_z(dt, 4, shape, t);
        for (size_t c = 0; c < sizeof form_cases / sizeof *form_cases; c++) {
            const form_case *fc = &form_cases[c];
            WHAT("tensor form %s %s", tf_dtype_name(dt), fc->name);
            int64_t ps[4];
            permute_host(4, shape, fc->perm, t, p, ps);
            int64_t ms[TF_MAX_RANK];
            int mr = 0;
            int64_t rows = 1, cols = 1;
            for (int i = 0; i < 4; i++) {
                if (i < fc->nb)
                    ms[mr++] = ps[i];
                else if (i < fc->nb + fc->nr)
                    rows *= ps[i];
                else
                    cols *= ps[i];
            }
            ms[mr++] = rows;
            ms[mr++] = cols;
            tf_tensor tm = upload_z(dt, mr, ms, p);
            const tf_truncation tr = {.max_rank = 2};
            lop o[8];
            memset(o, 0, sizeof o);
            for (int j = 0; j < 4; j++) {
                lop *x = &o[j];
                x->kind = j == 0 ? L_SVD : j == 1 ? L_QR : j == 2 ? L_SVDT : L_SVD;
                x->a = tt;
                x->use_split = 1;
                x->use_perm = fc->use_perm;
                memcpy(x->perm, fc->perm, sizeof fc->perm);
                x->split.n_batch = fc->nb;
                x->split.n_rows = fc->nr;
                x->mode = TF_QR_COMPLETE;
                x->t = tr;
                x->full = j == 3;
                o[4 + j] = *x;
                o[4 + j].a = tm;
                o[4 + j].use_split = 0;
            }
            run_ok(o, 8);
            /* Tensor-form shapes: left [batch, rows..., r], right [batch, r, cols...]. */
            got U = fetch(o[0].out[0]), Vh = fetch(o[0].out[2]);
            const int64_t k = rows < cols ? rows : cols;
            int64_t us[TF_MAX_RANK], vs[TF_MAX_RANK];
            int ur = 0, vr = 0;
            for (int i = 0; i < fc->nb; i++) us[ur++] = vs[vr++] = ps[i];
            for (int i = fc->nb; i < fc->nb + fc->nr; i++) us[ur++] = ps[i];
            us[ur++] = k;
            vs[vr++] = k;
            for (int i = fc->nb + fc->nr; i < 4; i++) vs[vr++] = ps[i];
            expect_meta(&U, dt, ur, us, "U (tensor form)");
            expect_meta(&Vh, dt, vr, vs, "Vh (tensor form)");
            got_free(&U);
            got_free(&Vh);
            static const char *const names[4][4] = {
                {"svd U", "svd S", "svd Vh", NULL},
                {"qr Q", "qr R", NULL, NULL},
                {"svd_truncated U", "svd_truncated S", "svd_truncated Vh", "svd_truncated report"},
                {"full svd U", "full svd S", "full svd Vh", NULL}};
            for (int j = 0; j < 4; j++)
                for (int q = 0; q < 4; q++)
                    if (names[j][q]) same_bytes(o[j].out[q], o[4 + j].out[q], names[j][q]);
            for (int j = 0; j < 8; j++) free_outs(&o[j]);
            CK_STATUS(C, tf_tensor_free(C, tm), TF_OK);
        }
        /* eigh in tensor form: a Hermitian 6 x 6 as [2, 3, 2, 3], and permuted as [3, 2, 2, 3]. */
        WHAT("eigh tensor form %s", tf_dtype_name(dt));
        zc h[36], hp[36];
        random_hermitian(dt, 6, h);
        const int64_t hs[4] = {2, 3, 2, 3}, ms2[2] = {6, 6};
        const int swap[4] = {1, 0, 2, 3}; /* stored with its first two axes swapped */
        int64_t hps[4];
        permute_host(4, hs, swap, h, hp, hps);
        tf_tensor th = upload_z(dt, 4, hps, hp), thm = upload_z(dt, 2, ms2, h);
        lop e[3] = {{.kind = L_EIGH,
                     .a = th,
                     .use_split = 1,
                     .use_perm = 1,
                     .perm = {1, 0, 2, 3},
                     .split = {NULL, 0, 2}},
                    {.kind = L_EIGH, .a = thm},
                    {.kind = L_EIGHT,
                     .a = th,
                     .use_split = 1,
                     .use_perm = 1,
                     .perm = {1, 0, 2, 3},
                     .split = {NULL, 0, 2},
                     .t = {.max_rank = 3}}};
        run_ok(e, 3);
        same_bytes(e[0].out[0], e[1].out[0], "eigh W");
        same_bytes(e[0].out[1], e[1].out[1], "eigh V");
        got V = fetch(e[0].out[1]), TV = fetch(e[2].out[1]);
        const int64_t vshape[3] = {2, 3, 6}, tvshape[3] = {2, 3, 3};
        expect_meta(&V, dt, 3, vshape, "eigh V (tensor form)");
        expect_meta(&TV, dt, 3, tvshape, "eigh_truncated V (tensor form)");
        got_free(&V);
        got_free(&TV);
        for (int j = 0; j < 3; j++) free_outs(&e[j]);
        CK_STATUS(C, tf_tensor_free(C, th), TF_OK);
        CK_STATUS(C, tf_tensor_free(C, thm), TF_OK);
        CK_STATUS(C, tf_tensor_free(C, tt), TF_OK);
        free(t);
        free(p);
    }
    stop();
}
END_TEST

/* ---- norms, trace, diagonal, slice ---- */

/* The vector p-norm of n values, in long double. */
static long double ref_vnorm(const zc *x, const int64_t *idx, int64_t n, double p) {
    long double acc = 0;
    if (isinf(p)) acc = p > 0 ? 0 : INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const long double a = cabsl((long double complex)x[idx[i]]);
        if (p == 0)
            acc += a != 0;
        else if (isinf(p))
            acc = p > 0 ? fmaxl(acc, a) : fminl(acc, a);
        else
            acc += powl(a, (long double)p);
    }
    if (p == 0 || isinf(p)) return acc;
    return powl(acc, 1.0L / (long double)p);
}

/*
 * For a norm over axes `red` (n_red of them) of a tensor of shape s: the
 * flat indices of each output element's reduced elements, outputs in the
 * order of the kept axes (then the reduced ones in the caller's order).
 */
static int64_t norm_groups(int rank, const int64_t *s, int n_red, const int *red, int64_t *idx,
                           int64_t *group) {
    int is_red[TF_MAX_RANK] = {0}, order[TF_MAX_RANK], n = 0;
    for (int i = 0; i < n_red; i++) is_red[red[i] < 0 ? red[i] + rank : red[i]] = 1;
    for (int a = 0; a < rank; a++)
        if (!is_red[a]) order[n++] = a;
    for (int i = 0; i < n_red; i++) order[n++] = red[i] < 0 ? red[i] + rank : red[i];
    int64_t g = 1;
    for (int i = 0; i < n_red; i++) g *= s[order[rank - n_red + i]];
    int64_t ps[TF_MAX_RANK];
    /* Walk the permuted order: consecutive runs of g belong to one output. */
    int64_t stride[TF_MAX_RANK];
    stride[rank - 1] = 1;
    for (int i = rank - 2; i >= 0; i--) stride[i] = stride[i + 1] * s[i + 1];
    for (int i = 0; i < rank; i++) ps[i] = s[order[i]];
    const size_t total = prod(s, rank);
    int64_t cur[TF_MAX_RANK] = {0};
    for (size_t f = 0; f < total; f++) {
        int64_t at = 0;
        for (int i = 0; i < rank; i++) at += cur[i] * stride[order[i]];
        idx[f] = at;
        for (int i = rank - 1; i >= 0; i--) {
            if (++cur[i] < ps[i]) break;
            cur[i] = 0;
        }
    }
    *group = g;
    return (int64_t)total / g;
}

START_TEST(test_vector_norm) {
    start();
    const int64_t s[3] = {3, 4, 5};
    static const double ps[6] = {2, 1, INFINITY, -INFINITY, 0, 3};
    static const struct {
        int n;
        int axes[3];
    } sets[] = {{0, {0}}, {1, {1}}, {2, {0, 2}}, {1, {-1}}, {2, {2, 0}}, {3, {2, 1, 0}}};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        for (int zeros = 0; zeros < 2; zeros++) {
            zc *x = random_z(dt, 60);
            if (zeros) /* some exact zeros, for p = 0 and -inf */
                for (int i = 0; i < 60; i += 7) x[i] = 0;
            tf_tensor tx = upload_z(dt, 3, s, x);
            for (size_t a = 0; a < sizeof sets / sizeof *sets; a++)
                for (int pi = 0; pi < 6; pi++)
                    for (int keep = 0; keep < 2; keep++) {
                        WHAT("vector_norm %s p=%g axes #%zu keepdims %d%s", tf_dtype_name(dt),
                             ps[pi], a, keep, zeros ? " (with zeros)" : "");
                        lop o = {.kind = L_VNORM,
                                 .a = tx,
                                 .p = ps[pi],
                                 .n_axes = sets[a].n,
                                 .keepdims = keep};
                        memcpy(o.axes, sets[a].axes, sizeof sets[a].axes);
                        run_ok(&o, 1);
                        got N = fetch(o.out[0]);
                        int red[3], nred = sets[a].n;
                        for (int i = 0; i < 3; i++) red[i] = nred ? sets[a].axes[i] : i;
                        if (!nred) nred = 3;
                        int64_t want[3];
                        int wr = 0, is_red[3] = {0};
                        for (int i = 0; i < nred; i++) is_red[red[i] < 0 ? red[i] + 3 : red[i]] = 1;
                        for (int i = 0; i < 3; i++)
                            if (keep)
                                want[wr++] = is_red[i] ? 1 : s[i];
                            else if (!is_red[i])
                                want[wr++] = s[i];
                        expect_meta(&N, th_real_of(dt), wr, want, "norm");
                        int64_t idx[60], g = 0;
                        const int64_t outs = norm_groups(3, s, nred, red, idx, &g);
                        CHECK((size_t)outs == N.n, "%zu outputs, expected %lld", N.n,
                              (long long)outs);
                        for (int64_t e = 0; e < outs; e++) {
                            const long double r = ref_vnorm(x, idx + e * g, g, ps[pi]);
                            const double got_v = creal(N.z[e]);
                            CHECK(cimag(N.z[e]) == 0, "a complex norm");
                            /* A count, and for real dtypes the extremes, are exact; |z| rounds. */
                            if (ps[pi] == 0 || (isinf(ps[pi]) && !th_is_complex(dt)))
                                CHECK(got_v == (double)r, "element %lld = %.9g, expected %.9Lg",
                                      (long long)e, got_v, r);
                            else
                                CHECK(fabs(got_v - (double)r) <=
                                          bound(dt, g, 1) * (double)r + DBL_MIN,
                                      "element %lld = %.9g, expected %.9Lg", (long long)e, got_v,
                                      r);
                        }
                        got_free(&N);
                        free_outs(&o);
                    }
            CK_STATUS(C, tf_tensor_free(C, tx), TF_OK);
            free(x);
        }
        /* The 2-norm neither overflows nor underflows where the squares would. */
        const double scales[2] = {eps_of(dt) < 1e-10 ? 1e200 : 1e30,
                                  eps_of(dt) < 1e-10 ? 1e-200 : 1e-30};
        for (int sc = 0; sc < 2; sc++) {
            WHAT("vector_norm %s p=2 of entries near %g", tf_dtype_name(dt), scales[sc]);
            zc *x = random_z(dt, 60);
            for (int i = 0; i < 60; i++) x[i] *= scales[sc];
            tf_tensor tx = upload_z(dt, 3, s, x);
            lop o = {.kind = L_VNORM, .a = tx, .p = 2};
            run_ok(&o, 1);
            got N = fetch(o.out[0]);
            long double acc = 0;
            for (int i = 0; i < 60; i++)
                acc += powl(cabsl((long double complex)x[i]) / (long double)scales[sc], 2);
            const double want = (double)(sqrtl(acc) * (long double)scales[sc]);
            CHECK(isfinite(creal(N.z[0])) && fabs(creal(N.z[0]) - want) <= bound(dt, 60, 1) * want,
                  "norm = %g, expected %g", creal(N.z[0]), want);
            got_free(&N);
            free_outs(&o);
            CK_STATUS(C, tf_tensor_free(C, tx), TF_OK);
            free(x);
        }
    }
    stop();
}
END_TEST

/* The matrix norm `ord` of a[m x n], in double. */
static double ref_mnorm(int64_t m, int64_t n, const zc *a, tf_matrix_norm ord) {
    const int64_t k = m < n ? m : n;
    double s[16], best = 0;
    switch (ord) {
    case TF_NORM_FRO: return fro((size_t)(m * n), a);
    case TF_NORM_NUC:
    case TF_NORM_2:
    case TF_NORM_NEG_2:
        ref_svd(m, n, a, s);
        if (ord == TF_NORM_2) return s[0];
        if (ord == TF_NORM_NEG_2) return s[k - 1];
        for (int64_t j = 0; j < k; j++) best += s[j];
        return best;
    case TF_NORM_1:
    case TF_NORM_NEG_1:
        for (int64_t j = 0; j < n; j++) {
            double c = 0;
            for (int64_t i = 0; i < m; i++) c += cabs(a[i * n + j]);
            if (j == 0 || (ord == TF_NORM_1 ? c > best : c < best)) best = c;
        }
        return best;
    default:
        for (int64_t i = 0; i < m; i++) {
            double r = 0;
            for (int64_t j = 0; j < n; j++) r += cabs(a[i * n + j]);
            if (i == 0 || (ord == TF_NORM_INF ? r > best : r < best)) best = r;
        }
        return best;
    }
}

START_TEST(test_matrix_norm) {
    start();
    const int64_t s[3] = {3, 4, 5};
    static const struct {
        int given;
        int axes[2];
    } sets[] = {{0, {1, 2}}, {1, {2, 0}}, {1, {-1, -2}}, {1, {0, 1}}};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        zc *x = random_z(dt, 60);
        tf_tensor tx = upload_z(dt, 3, s, x);
        for (size_t a = 0; a < sizeof sets / sizeof *sets; a++)
            for (int ord = TF_NORM_FRO; ord <= TF_NORM_NEG_INF; ord++)
                for (int keep = 0; keep < 2; keep++) {
                    WHAT("matrix_norm %s ord %d axes (%d, %d)%s keepdims %d", tf_dtype_name(dt),
                         ord, sets[a].axes[0], sets[a].axes[1], sets[a].given ? "" : " by default",
                         keep);
                    lop o = {.kind = L_MNORM,
                             .a = tx,
                             .ord = (tf_matrix_norm)ord,
                             .keepdims = keep,
                             .n_axes = sets[a].given ? 2 : 0};
                    memcpy(o.axes, sets[a].axes, sizeof sets[a].axes);
                    run_ok(&o, 1);
                    got N = fetch(o.out[0]);
                    const int ra = (sets[a].axes[0] + 3) % 3, ca = (sets[a].axes[1] + 3) % 3;
                    const int ba = 3 - ra - ca;
                    int64_t want[3];
                    int wr = 0;
                    for (int i = 0; i < 3; i++)
                        if (keep)
                            want[wr++] = i == ba ? s[i] : 1;
                        else if (i == ba)
                            want[wr++] = s[i];
                    expect_meta(&N, th_real_of(dt), wr, want, "norm");
                    const int64_t m = s[ra], n = s[ca];
                    zc mat[25];
                    for (int64_t e = 0; e < s[ba]; e++) {
                        for (int64_t i = 0; i < m; i++)
                            for (int64_t j = 0; j < n; j++) {
                                int64_t id[3];
                                id[ba] = e;
                                id[ra] = i;
                                id[ca] = j;
                                mat[i * n + j] = x[(id[0] * 4 + id[1]) * 5 + id[2]];
                            }
                        const double r = ref_mnorm(m, n, mat, (tf_matrix_norm)ord);
                        CHECK(fabs(creal(N.z[e]) - r) <= bound(dt, m, n) * r,
                              "element %lld = %.9g, expected %.9g", (long long)e, creal(N.z[e]), r);
                    }
                    got_free(&N);
                    free_outs(&o);
                }
        CK_STATUS(C, tf_tensor_free(C, tx), TF_OK);
        free(x);
    }
    stop();
}
END_TEST

START_TEST(test_trace_diagonal_slice) {
    start();
    const int64_t s[3] = {2, 4, 6};
    static const int64_t offsets[] = {0, 1, 5, -1, -3, 2};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        zc *x = random_z(dt, 48);
        tf_tensor tx = upload_z(dt, 3, s, x);
        for (size_t k = 0; k < sizeof offsets / sizeof *offsets; k++) {
            const int64_t off = offsets[k];
            WHAT("trace/diagonal %s offset %lld", tf_dtype_name(dt), (long long)off);
            lop o[2] = {{.kind = L_TRACE, .a = tx, .offset = off},
                        {.kind = L_DIAG, .a = tx, .offset = off}};
            run_ok(o, 2);
            got T = fetch(o[0].out[0]), G = fetch(o[1].out[0]);
            const int64_t i0 = off < 0 ? -off : 0, j0 = off > 0 ? off : 0;
            const int64_t len = (4 - i0) < (6 - j0) ? 4 - i0 : 6 - j0;
            const int64_t dshape[2] = {2, len};
            expect_meta(&T, dt, 1, s, "trace");
            expect_meta(&G, dt, 2, dshape, "diagonal");
            for (int64_t b = 0; b < 2; b++) {
                zc sum = 0;
                for (int64_t i = 0; i < len; i++) {
                    const zc e = x[b * 24 + (i0 + i) * 6 + j0 + i];
                    CHECK(G.z[b * len + i] == e, "diagonal[%lld, %lld] is not A[%lld, %lld]",
                          (long long)b, (long long)i, (long long)(i0 + i), (long long)(j0 + i));
                    sum += e;
                }
                CHECK(cabs(T.z[b] - sum) <= bound(dt, len, 1) * (double)len,
                      "trace[%lld] = %g, expected %g", (long long)b, cabs(T.z[b]), cabs(sum));
            }
            got_free(&T);
            got_free(&G);
            free_outs(&o[0]);
            free_outs(&o[1]);
        }
        /* Slices: negative steps, a step past one, a single element. */
        static const struct {
            int64_t start[3], step[3], len[3];
        } sl[] = {
            {{1, 3, 5}, {-1, -1, -1}, {2, 4, 6}},
            {{0, 3, 5}, {1, -2, -3}, {2, 2, 2}},
            {{1, 0, 0}, {1, 3, 5}, {1, 2, 2}},
            {{0, 2, 4}, {1, 1, -2}, {2, 1, 3}},
        };
        for (size_t k = 0; k < sizeof sl / sizeof *sl; k++) {
            WHAT("slice %s #%zu", tf_dtype_name(dt), k);
            lop o = {.kind = L_SLICE, .a = tx};
            memcpy(o.start, sl[k].start, sizeof sl[k].start);
            memcpy(o.step, sl[k].step, sizeof sl[k].step);
            memcpy(o.len, sl[k].len, sizeof sl[k].len);
            run_ok(&o, 1);
            got S = fetch(o.out[0]);
            expect_meta(&S, dt, 3, sl[k].len, "slice");
            size_t f = 0;
            for (int64_t a = 0; a < sl[k].len[0]; a++)
                for (int64_t b = 0; b < sl[k].len[1]; b++)
                    for (int64_t c = 0; c < sl[k].len[2]; c++, f++) {
                        const int64_t ia = sl[k].start[0] + a * sl[k].step[0],
                                      ib = sl[k].start[1] + b * sl[k].step[1],
                                      ic = sl[k].start[2] + c * sl[k].step[2];
                        CHECK(S.z[f] == x[(ia * 4 + ib) * 6 + ic],
                              "slice element %zu is not x[%lld, %lld, %lld]", f, (long long)ia,
                              (long long)ib, (long long)ic);
                    }
            got_free(&S);
            free_outs(&o);
        }
        CK_STATUS(C, tf_tensor_free(C, tx), TF_OK);
        free(x);
    }
    stop();
}
END_TEST

/* ---- truncation ---- */

/* Relative gap below which neighbours form a multiplet (docs: about sqrt(epsilon)). */
static double degenerate_tol(tf_dtype dt) { return sqrt(eps_of(dt)); }

static int multiplet(double a, double b, double tol) { return a - b <= tol * a; }

/*
 * The truncation rule as include/tenferro/linalg.h and docs/linalg.md state
 * it, on k descending values s: the kept rank, and the sum of squares of
 * the dropped values and of all of them.
 */
static int64_t rule_rank(const double *s, int64_t k, const tf_truncation *t, double tol,
                         double *dropped, double *total) {
    const int64_t bound_r = t->max_rank > 0 && t->max_rank < k ? t->max_rank : k;
    double all = 0;
    for (int64_t i = 0; i < k; i++) all += s[i] * s[i];
    int64_t r = bound_r;
    /* values above the cutoffs */
    if (t->cutoff > 0)
        for (int64_t i = 0; i < r; i++)
            if (!(s[i] > t->cutoff)) {
                r = i;
                break;
            }
    if (t->rel_cutoff > 0)
        for (int64_t i = 0; i < r; i++)
            if (!(s[i] > t->rel_cutoff * s[0])) {
                r = i;
                break;
            }
    /* the smallest go while everything discarded weighs at most the limit */
    if (t->discarded_weight > 0 || t->rel_discarded_weight > 0) {
        double limit = INFINITY;
        if (t->discarded_weight > 0) limit = t->discarded_weight;
        if (t->rel_discarded_weight > 0) limit = fmin(limit, t->rel_discarded_weight * all);
        double gone = 0;
        for (int64_t i = r; i < k; i++) gone += s[i] * s[i];
        while (r > 0 && gone + s[r - 1] * s[r - 1] <= limit) {
            gone += s[r - 1] * s[r - 1];
            r--;
        }
    }
    const int64_t floor_r = t->min_rank < bound_r ? t->min_rank : bound_r;
    if (r < floor_r) r = floor_r;
    if (t->keep_degenerate && r > 0 && r < k && multiplet(s[r - 1], s[r], tol)) {
        int64_t lo = r - 1, hi = r + 1; /* the multiplet is s[lo .. hi) */
        while (lo > 0 && multiplet(s[lo - 1], s[lo], tol)) lo--;
        while (hi < k && multiplet(s[hi - 1], s[hi], tol)) hi++;
        if (hi <= bound_r)
            r = hi;
        else if (lo >= floor_r && lo > 0)
            r = lo;
    }
    if (r < 1) r = 1;
    double gone = 0;
    for (int64_t i = r; i < k; i++) gone += s[i] * s[i];
    *dropped = gone;
    *total = all;
    return r;
}

/* The spectra of the truncation tests: distinct, a near-degenerate triple, a fast decay. */
static const double spectra[3][6] = {
    {8, 4, 2, 1, 0.5, 0.25},
    {8, 4, 2, 2, 2, 0.5},
    {3, 2.5, 0.3, 0.01, 0.001, 0.0005},
};

typedef struct trunc_case {
    const char *name;
    tf_truncation t;
    int values_only, no_report;
} trunc_case;

/*
 * Checks one svd_truncated result on the batch (3 matrices of 7 x 6) against
 * the plain svd's values (S0: b x k, the daemon's own, in double).
 */
static void check_truncated(tf_dtype dt, const zc *a, const double *S0, const trunc_case *tc,
                            lop *o, int64_t m, int64_t n, int nb) {
    const int64_t k = m < n ? m : n;
    const tf_truncation *t = &tc->t;
    const int64_t w = t->max_rank > 0 && t->max_rank < k ? t->max_rank : k;
    const tf_dtype rt = th_real_of(dt);
    got S = fetch(o->out[1]);
    const int64_t sshape[2] = {nb, w}, ushape[3] = {nb, m, w}, vshape[3] = {nb, w, n},
                  rshape[2] = {nb, 3};
    expect_meta(&S, rt, 2, sshape, "S");
    tf_truncation_report rep[8];
    memset(rep, 0, sizeof rep);
    if (!tc->no_report) {
        got R = fetch(o->out[3]);
        expect_meta(&R, TF_F64, 2, rshape, "report");
        got_free(&R);
        CK_STATUS(C, tf_truncation_report_read(C, o->out[3], rep, (size_t)nb), TF_OK);
    }
    got U, Vh;
    memset(&U, 0, sizeof U);
    memset(&Vh, 0, sizeof Vh);
    if (!tc->values_only) {
        U = fetch(o->out[0]);
        Vh = fetch(o->out[2]);
        expect_meta(&U, dt, 3, ushape, "U");
        expect_meta(&Vh, dt, 3, vshape, "Vh");
    }
    const double tol = bound(dt, m, n), dtol = degenerate_tol(dt);
    for (int i = 0; i < nb; i++) {
        const double *s0 = S0 + i * k;
        double dropped, total;
        const int64_t r = rule_rank(s0, k, t, dtol, &dropped, &total);
        if (!tc->no_report) {
            CHECK(rep[i].rank == r, "matrix %d: the report keeps %lld values, the rule %lld", i,
                  (long long)rep[i].rank, (long long)r);
            CHECK(fabs(rep[i].discarded_weight - dropped) <= 1e-12 * total,
                  "matrix %d: discarded weight %.17g, expected %.17g", i, rep[i].discarded_weight,
                  dropped);
            CHECK(fabs(rep[i].truncation_error - dropped / total) <= 1e-12,
                  "matrix %d: truncation error %.17g, expected %.17g", i, rep[i].truncation_error,
                  dropped / total);
        }
        const double f =
            t->renormalize && total - dropped > 0 ? sqrt(total / (total - dropped)) : 1;
        const zc *s = S.z + i * w;
        for (int64_t j = 0; j < w; j++) {
            if (j < r)
                CHECK(fabs(creal(s[j]) - f * s0[j]) <= tol * f * s0[0],
                      "matrix %d: S[%lld] = %.9g, expected %.9g", i, (long long)j, creal(s[j]),
                      f * s0[j]);
            else
                CHECK(s[j] == 0, "matrix %d: S[%lld] = %g past the kept rank %lld", i, (long long)j,
                      creal(s[j]), (long long)r);
        }
        if (tc->values_only) continue;
        const zc *u = U.z + i * m * w, *vh = Vh.z + i * w * n, *ai = a + i * m * n;
        for (int64_t j = r; j < w; j++) {
            for (int64_t x = 0; x < m; x++)
                CHECK(u[x * w + j] == 0, "matrix %d: U[%lld, %lld] is not zero past the kept rank",
                      i, (long long)x, (long long)j);
            for (int64_t y = 0; y < n; y++)
                CHECK(vh[j * n + y] == 0,
                      "matrix %d: Vh[%lld, %lld] is not zero past the kept rank", i, (long long)j,
                      (long long)y);
        }
        /* The isometries (the absorption undone), then the reconstruction. */
        zc *ui = th_xmalloc(sizeof(zc) * (size_t)(m * w)),
           *vi = th_xmalloc(sizeof(zc) * (size_t)(w * n));
        for (int64_t j = 0; j < w; j++) {
            const double sj = creal(s[j]);
            const double lu = t->absorb == TF_ABSORB_LEFT   ? sj
                              : t->absorb == TF_ABSORB_BOTH ? sqrt(sj)
                                                            : 1;
            const double lv = t->absorb == TF_ABSORB_RIGHT  ? sj
                              : t->absorb == TF_ABSORB_BOTH ? sqrt(sj)
                                                            : 1;
            for (int64_t x = 0; x < m; x++) ui[x * w + j] = j < r ? u[x * w + j] / lu : 0;
            for (int64_t y = 0; y < n; y++) vi[j * n + y] = j < r ? vh[j * n + y] / lv : 0;
        }
        CHECK(orth_cols(m, r, w, ui) <= tol * 4,
              "matrix %d: the kept columns of U are not orthonormal (%.3g)", i,
              orth_cols(m, r, w, ui));
        CHECK(orth_rows(r, n, vi) <= tol * 4,
              "matrix %d: the kept rows of Vh are not orthonormal (%.3g)", i, orth_rows(r, n, vi));
        for (int64_t j = 0; j < r; j++)
            CHECK(gauge_holds(&U, (size_t)(i * m * w + j), m, w),
                  "matrix %d: column %lld of U breaks the gauge", i, (long long)j);
        /* ||A - U_r S_r Vh_r|| = sqrt(discarded weight), S_r without the renormalization. */
        zc *us = th_xmalloc(sizeof(zc) * (size_t)(m * w)),
           *re = th_xmalloc(sizeof(zc) * (size_t)(m * n));
        for (int64_t x = 0; x < m; x++)
            for (int64_t j = 0; j < w; j++) us[x * w + j] = ui[x * w + j] * creal(s[j]) / f;
        mm(m, w, n, us, vi, re);
        const double err = dist((size_t)(m * n), ai, re);
        CHECK(fabs(err - sqrt(dropped)) <= tol * sqrt(total),
              "matrix %d: ||A - U S Vh|| = %.9g, sqrt(discarded) = %.9g", i, err, sqrt(dropped));
        free(us);
        free(re);
        free(ui);
        free(vi);
    }
    got_free(&S);
    if (!tc->values_only) {
        got_free(&U);
        got_free(&Vh);
    }
}

START_TEST(test_svd_truncated) {
    start();
    const int64_t m = 7, n = 6, k = 6;
    const int nb = 3;
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        zc *a = th_xmalloc(sizeof(zc) * (size_t)(nb * m * n));
        for (int i = 0; i < nb; i++) with_singular_values(dt, m, n, spectra[i], a + i * m * n);
        const int64_t shape[3] = {nb, m, n};
        tf_tensor ta = upload_z(dt, 3, shape, a);
        /* The daemon's own untruncated values, for the rule and the exact boundaries. */
        lop plain[2] = {{.kind = L_SVD, .a = ta}, {.kind = L_SVD, .a = ta, .values_only = 1}};
        WHAT("svd_truncated %s: the plain svd", tf_dtype_name(dt));
        run_ok(plain, 2);
        /* Values alone come from another driver path: their last bits may differ. */
        got PS = fetch(plain[0].out[1]), PV = fetch(plain[1].out[1]);
        double S0[3 * 6], SV[3 * 6];
        for (int i = 0; i < nb * k; i++) {
            S0[i] = creal(PS.z[i]);
            SV[i] = creal(PV.z[i]);
        }
        got_free(&PS);
        got_free(&PV);
        free_outs(&plain[0]);
        free_outs(&plain[1]);
        /* Exact boundaries on matrix 0: S0[2] as the cutoff drops it, just below keeps it. */
        const double tail3 = S0[5] * S0[5] + S0[4] * S0[4] + S0[3] * S0[3];
        const trunc_case cases[] = {
            {"max_rank 3", {.max_rank = 3}, 0, 0},
            {"max_rank 1", {.max_rank = 1}, 0, 0},
            {"max_rank 10 (beyond k)", {.max_rank = 10}, 0, 0},
            {"nothing", {0}, 0, 0},
            {"cutoff 1.5", {.cutoff = 1.5}, 0, 0},
            {"cutoff = S[2]", {.cutoff = S0[2]}, 0, 0},
            {"cutoff just below S[2]", {.cutoff = nextafter(S0[2], 0)}, 0, 0},
            {"cutoff above everything", {.cutoff = 100}, 0, 0},
            {"rel_cutoff 0.2", {.rel_cutoff = 0.2}, 0, 0},
            {"rel_cutoff = S[3] / S[0]", {.rel_cutoff = S0[3] / S0[0]}, 0, 0},
            {"discarded_weight 1.4", {.discarded_weight = 1.4}, 0, 0},
            /*
             * The tail's weight is a sum whose order the backend chooses (a
             * device reduction rounds differently): the boundary is tried a
             * hair either side of it.
             */
            {"discarded_weight a hair above the tail's", {.discarded_weight = tail3 * (1 + 1e-12)},
             0, 0},
            {"discarded_weight a hair below the tail's", {.discarded_weight = tail3 * (1 - 1e-12)},
             0, 0},
            {"rel_discarded_weight 0.01", {.rel_discarded_weight = 0.01}, 0, 0},
            {"both discarded weights",
             {.discarded_weight = 1.4, .rel_discarded_weight = 1e-4}, 0, 0},
            {"cutoff 5, min_rank 3", {.cutoff = 5, .min_rank = 3}, 0, 0},
            {"max_rank 2, min_rank 2, cutoff 100",
             {.max_rank = 2, .min_rank = 2, .cutoff = 100}, 0, 0},
            {"min_rank alone", {.min_rank = 4}, 0, 0},
            {"max_rank 4 and cutoff 0.75", {.max_rank = 4, .cutoff = 0.75}, 0, 0},
            {"keep_degenerate alone", {.keep_degenerate = 1}, 0, 0},
            {"discarded_weight 4.3", {.discarded_weight = 4.3}, 0, 0},
            {"discarded_weight 4.3, keep_degenerate",
             {.discarded_weight = 4.3, .keep_degenerate = 1}, 0, 0},
            {"max_rank 4, discarded_weight 4.3, keep_degenerate",
             {.max_rank = 4, .discarded_weight = 4.3, .keep_degenerate = 1}, 0, 0},
            {"max_rank 5 (the multiplet's end), discarded_weight 4.3, keep_degenerate",
             {.max_rank = 5, .discarded_weight = 4.3, .keep_degenerate = 1}, 0, 0},
            {"max_rank 4, min_rank 2, discarded_weight 4.3, keep_degenerate",
             {.max_rank = 4, .min_rank = 2, .discarded_weight = 4.3, .keep_degenerate = 1}, 0, 0},
            {"max_rank 4, min_rank 3, discarded_weight 4.3, keep_degenerate",
             {.max_rank = 4, .min_rank = 3, .discarded_weight = 4.3, .keep_degenerate = 1}, 0, 0},
            {"cutoff 1.5, keep_degenerate", {.cutoff = 1.5, .keep_degenerate = 1}, 0, 0},
            {"max_rank 3, renormalize", {.max_rank = 3, .renormalize = 1}, 0, 0},
            {"cutoff 1.5, renormalize", {.cutoff = 1.5, .renormalize = 1}, 0, 0},
            {"max_rank 4, absorb left", {.max_rank = 4, .absorb = TF_ABSORB_LEFT}, 0, 0},
            {"max_rank 4, absorb right", {.max_rank = 4, .absorb = TF_ABSORB_RIGHT}, 0, 0},
            {"max_rank 4, absorb both", {.max_rank = 4, .absorb = TF_ABSORB_BOTH}, 0, 0},
            {"cutoff 0.75, absorb left", {.cutoff = 0.75, .absorb = TF_ABSORB_LEFT}, 0, 0},
            {"cutoff 0.75, absorb right, renormalize",
             {.cutoff = 0.75, .absorb = TF_ABSORB_RIGHT, .renormalize = 1}, 0, 0},
            {"cutoff 0.75, absorb both", {.cutoff = 0.75, .absorb = TF_ABSORB_BOTH}, 0, 0},
            {"values only, cutoff 1.5", {.cutoff = 1.5}, 1, 0},
            {"values only, max_rank 2", {.max_rank = 2}, 1, 0},
            {"no report, cutoff 1.5", {.cutoff = 1.5}, 0, 1},
        };
        const int n_cases = (int)(sizeof cases / sizeof *cases);
        for (int c = 0; c < n_cases; c++) {
            WHAT("svd_truncated %s: %s", tf_dtype_name(dt), cases[c].name);
            lop o = {.kind = L_SVDT,
                     .a = ta,
                     .t = cases[c].t,
                     .values_only = cases[c].values_only,
                     .no_report = cases[c].no_report};
            run_ok(&o, 1);
            check_truncated(dt, a, cases[c].values_only ? SV : S0, &cases[c], &o, m, n, nb);
            free_outs(&o);
        }
        /* Trimming with tf_view_slice to the kept rank, and the values-dependent width. */
        WHAT("svd_truncated %s: slice to the kept rank", tf_dtype_name(dt));
        lop o = {.kind = L_SVDT, .a = ta, .t = {.cutoff = 1.5}};
        run_ok(&o, 1);
        tf_truncation_report rep[3];
        CK_STATUS(C, tf_truncation_report_read(C, o.out[3], rep, 3), TF_OK);
        /* A shorter read takes the first entries. */
        tf_truncation_report first = {0};
        CK_STATUS(C, tf_truncation_report_read(C, o.out[3], &first, 1), TF_OK);
        CHECK(first.rank == rep[0].rank, "a one-entry read gave rank %lld, not %lld",
              (long long)first.rank, (long long)rep[0].rank);
        int64_t rmax = 0;
        for (int i = 0; i < 3; i++) rmax = rep[i].rank > rmax ? rep[i].rank : rmax;
        lop sl[3] = {
            {.kind = L_SLICE,
             .a = o.out[0],
             .start = {0, 0, 0},
             .step = {1, 1, 1},
             .len = {3, m, rmax}},
            {.kind = L_SLICE, .a = o.out[1], .start = {0, 0}, .step = {1, 1}, .len = {3, rmax}},
            {.kind = L_SLICE,
             .a = o.out[2],
             .start = {0, 0, 0},
             .step = {1, 1, 1},
             .len = {3, rmax, n}}};
        run_ok(sl, 3);
        got FU = fetch(o.out[0]), FS = fetch(o.out[1]), FV = fetch(o.out[2]);
        got TU = fetch(sl[0].out[0]), TS = fetch(sl[1].out[0]), TV = fetch(sl[2].out[0]);
        for (int i = 0; i < 3; i++) {
            for (int64_t x = 0; x < m; x++)
                for (int64_t j = 0; j < rmax; j++)
                    CHECK(TU.z[(i * m + x) * rmax + j] == FU.z[(i * m + x) * k + j],
                          "trimmed U differs at %d %lld %lld", i, (long long)x, (long long)j);
            for (int64_t j = 0; j < rmax; j++) {
                CHECK(TS.z[i * rmax + j] == FS.z[i * k + j], "trimmed S differs at %d %lld", i,
                      (long long)j);
                for (int64_t y = 0; y < n; y++)
                    CHECK(TV.z[(i * rmax + j) * n + y] == FV.z[(i * k + j) * n + y],
                          "trimmed Vh differs at %d %lld %lld", i, (long long)j, (long long)y);
            }
        }
        got *all[] = {&FU, &FS, &FV, &TU, &TS, &TV};
        for (size_t g = 0; g < 6; g++) got_free(all[g]);
        for (int j = 0; j < 3; j++) free_outs(&sl[j]);
        free_outs(&o);
        CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
        free(a);
    }
    stop();
}
END_TEST

/* A truncated eigh's order of the pairs: |w| descending, the larger w first among equals. */
static void order_by_magnitude(const double *w, int64_t n, int64_t *order) {
    for (int64_t i = 0; i < n; i++) order[i] = i;
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0; j--) {
            const double a = w[order[j - 1]], b = w[order[j]];
            if (fabs(b) > fabs(a) || (fabs(b) == fabs(a) && b > a)) {
                const int64_t t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            } else {
                break;
            }
        }
}

START_TEST(test_eigh_truncated) {
    start();
    const int64_t n = 7;
    static const double spec[2][7] = {{5, -4, 3, 1, -0.5, 0.25, 0.1}, {4, 2, 2, -2, 1, 0.5, -0.05}};
    const tf_truncation rules[] = {
        {0},
        {.max_rank = 3},
        {.cutoff = 0.75},
        {.rel_cutoff = 0.3},
        {.rel_discarded_weight = 0.01},
        {.discarded_weight = 1.3},
        {.max_rank = 2, .keep_degenerate = 1},
        {.max_rank = 3, .keep_degenerate = 1},
        {.cutoff = 1.5, .min_rank = 5},
    };
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        zc a[2 * 49];
        for (int i = 0; i < 2; i++) with_eigenvalues(dt, n, spec[i], a + i * 49);
        const int64_t shape[3] = {2, n, n};
        tf_tensor ta = upload_z(dt, 3, shape, a);
        lop plain = {.kind = L_EIGH, .a = ta};
        WHAT("eigh_truncated %s: the plain eigh", tf_dtype_name(dt));
        run_ok(&plain, 1);
        got PW = fetch(plain.out[0]);
        for (size_t r = 0; r < sizeof rules / sizeof *rules; r++) {
            WHAT("eigh_truncated %s rule #%zu", tf_dtype_name(dt), r);
            lop o = {.kind = L_EIGHT, .a = ta, .t = rules[r]};
            run_ok(&o, 1);
            got W = fetch(o.out[0]), V = fetch(o.out[1]);
            const int64_t w = rules[r].max_rank ? rules[r].max_rank : n;
            const int64_t wshape[2] = {2, w}, vshape[3] = {2, n, w};
            expect_meta(&W, th_real_of(dt), 2, wshape, "W");
            expect_meta(&V, dt, 3, vshape, "V");
            tf_truncation_report rep[2];
            CK_STATUS(C, tf_truncation_report_read(C, o.out[2], rep, 2), TF_OK);
            for (int i = 0; i < 2; i++) {
                const double *w0 = NULL;
                double wp[7], mag[7];
                int64_t order[7];
                for (int64_t j = 0; j < n; j++) wp[j] = creal(PW.z[i * n + j]);
                w0 = wp;
                order_by_magnitude(w0, n, order);
                for (int64_t j = 0; j < n; j++) mag[j] = fabs(w0[order[j]]);
                double dropped, total;
                const int64_t kr =
                    rule_rank(mag, n, &rules[r], degenerate_tol(dt), &dropped, &total);
                CHECK(rep[i].rank == kr, "matrix %d: the report keeps %lld, the rule %lld", i,
                      (long long)rep[i].rank, (long long)kr);
                CHECK(fabs(rep[i].discarded_weight - dropped) <= 1e-12 * total,
                      "matrix %d: discarded %.17g, expected %.17g", i, rep[i].discarded_weight,
                      dropped);
                const zc *wi = W.z + i * w, *vi = V.z + i * n * w, *ai = a + i * 49;
                const double tol = bound(dt, n, n);
                for (int64_t j = 0; j < w; j++) {
                    if (j >= kr) {
                        CHECK(wi[j] == 0, "matrix %d: W[%lld] is not zero past the kept rank", i,
                              (long long)j);
                        for (int64_t x = 0; x < n; x++)
                            CHECK(vi[x * w + j] == 0,
                                  "matrix %d: V[%lld, %lld] is not zero past the kept rank", i,
                                  (long long)x, (long long)j);
                        continue;
                    }
                    CHECK(creal(wi[j]) == w0[order[j]],
                          "matrix %d: W[%lld] = %.9g, the plain eigh's %.9g in |w| order", i,
                          (long long)j, creal(wi[j]), w0[order[j]]);
                    /* A v = w v, v a unit vector in the gauge */
                    double res = 0, nv = 0;
                    for (int64_t x = 0; x < n; x++) {
                        zc av = 0;
                        for (int64_t y = 0; y < n; y++) av += ai[x * n + y] * vi[y * w + j];
                        res += pow(cabs(av - creal(wi[j]) * vi[x * w + j]), 2);
                        nv += pow(cabs(vi[x * w + j]), 2);
                    }
                    CHECK(sqrt(res) <= tol * fro(49, ai) && fabs(nv - 1) <= tol,
                          "matrix %d: pair %lld is no eigenpair", i, (long long)j);
                    CHECK(gauge_holds(&V, (size_t)(i * n * w + j), n, w),
                          "matrix %d: column %lld of V breaks the gauge", i, (long long)j);
                }
            }
            got_free(&W);
            got_free(&V);
            free_outs(&o);
        }
        got_free(&PW);
        free_outs(&plain);
        /* Values only: W in |w| order against the plain values-only eigh, and the report. */
        WHAT("eigh_truncated %s: values only", tf_dtype_name(dt));
        lop vo[2] = {{.kind = L_EIGH, .a = ta, .values_only = 1},
                     {.kind = L_EIGHT, .a = ta, .values_only = 1, .t = {.cutoff = 0.75}}};
        run_ok(vo, 2);
        CHECK(vo[1].out[1] == 0, "values only made V");
        got VW = fetch(vo[0].out[0]), TW = fetch(vo[1].out[0]);
        tf_truncation_report vrep[2];
        CK_STATUS(C, tf_truncation_report_read(C, vo[1].out[2], vrep, 2), TF_OK);
        for (int i = 0; i < 2; i++) {
            double wp[7], mag[7], dropped, total;
            int64_t order[7];
            for (int64_t j = 0; j < n; j++) wp[j] = creal(VW.z[i * n + j]);
            order_by_magnitude(wp, n, order);
            for (int64_t j = 0; j < n; j++) mag[j] = fabs(wp[order[j]]);
            const int64_t kr = rule_rank(mag, n, &vo[1].t, degenerate_tol(dt), &dropped, &total);
            CHECK(vrep[i].rank == kr, "matrix %d: the report keeps %lld, the rule %lld", i,
                  (long long)vrep[i].rank, (long long)kr);
            for (int64_t j = 0; j < n; j++)
                CHECK(TW.z[i * n + j] == (j < kr ? wp[order[j]] : 0), "matrix %d: W[%lld] = %.9g",
                      i, (long long)j, creal(TW.z[i * n + j]));
        }
        got_free(&VW);
        got_free(&TW);
        free_outs(&vo[0]);
        free_outs(&vo[1]);
        CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
        /* Exact ties of |w| (a diagonal matrix): the larger w first, unit vectors in the gauge. */
        WHAT("eigh_truncated %s: ties of |w|", tf_dtype_name(dt));
        zc dg[25] = {0};
        static const double diag[5] = {-3, 1, 3, -0.5, 2};
        for (int i = 0; i < 5; i++) dg[i * 6] = diag[i];
        const int64_t ds[2] = {5, 5};
        tf_tensor td = upload_z(dt, 2, ds, dg);
        lop o = {.kind = L_EIGHT, .a = td, .t = {.max_rank = 3}};
        run_ok(&o, 1);
        got W = fetch(o.out[0]), V = fetch(o.out[1]);
        static const double wexp[3] = {3, -3, 2};
        static const int at[3] = {2, 0, 4};
        for (int j = 0; j < 3; j++) {
            CHECK(W.z[j] == wexp[j], "W[%d] = %g, expected %g", j, creal(W.z[j]), wexp[j]);
            for (int x = 0; x < 5; x++)
                CHECK(V.z[x * 3 + j] == (x == at[j] ? 1 : 0), "V[%d, %d] = %g", x, j,
                      creal(V.z[x * 3 + j]));
        }
        got_free(&W);
        got_free(&V);
        free_outs(&o);
        CK_STATUS(C, tf_tensor_free(C, td), TF_OK);
    }
    stop();
}
END_TEST

/* ---- failures of the numbers ---- */

/* What a failing batch holds: matrix 1 of 3 (or of 2) carries the fault. */
typedef struct fault_case {
    const char *name;
    int kind;
    int fault; /* 0 nan in A, 1 inf in A, 2 inf in B, 3 singular, 4 not positive definite */
    tf_status want;
    const char *needle;
} fault_case;

static const fault_case fault_cases[] = {
    {"svd, nan", L_SVD, 0, TF_ERR_NOT_FINITE, "svd: matrix 1 of 3"},
    {"svd values only, inf", L_SVD, 1, TF_ERR_NOT_FINITE, "svd: matrix 1 of 3"},
    {"svd_truncated, nan", L_SVDT, 0, TF_ERR_NOT_FINITE, "svd: matrix 1 of 3"},
    {"qr, inf", L_QR, 1, TF_ERR_NOT_FINITE, "qr: matrix 1 of 3"},
    {"eigh, nan", L_EIGH, 0, TF_ERR_NOT_FINITE, "eigh: matrix 1 of 3"},
    {"eigh_truncated, nan", L_EIGHT, 0, TF_ERR_NOT_FINITE, "eigh: matrix 1 of 3"},
    {"cholesky, nan", L_CHOL, 0, TF_ERR_NOT_FINITE, "cholesky: matrix 1 of 3"},
    {"solve, nan in A", L_SOLVE, 0, TF_ERR_NOT_FINITE, "solve: matrix 1 of 3"},
    {"solve, inf in B", L_SOLVE, 2, TF_ERR_NOT_FINITE, "solve: matrix 1 of 3"},
    {"inv, inf", L_INV, 1, TF_ERR_NOT_FINITE, "inv: matrix 1 of 3"},
    {"det, nan", L_DET, 0, TF_ERR_NOT_FINITE, "det: matrix 1 of 3"},
    {"slogdet, inf", L_SLOGDET, 1, TF_ERR_NOT_FINITE, "slogdet: matrix 1 of 3"},
    {"solve, singular", L_SOLVE, 3, TF_ERR_SINGULAR, "solve: matrix 1 of 3 is singular"},
    {"inv, singular", L_INV, 3, TF_ERR_SINGULAR, "inv: matrix 1 of 3 is singular"},
    {"cholesky, not positive definite", L_CHOL, 4, TF_ERR_NOT_POSITIVE_DEFINITE,
     "cholesky: matrix 1 of 3 is not positive definite"},
};

/* The session callback of a failing step: a copy (operation 0), then the failing operation (1). */
typedef struct fault_run {
    lop ops[2];
} fault_run;

static tf_status queue_fault(tf_view *v, void *arg) {
    fault_run *f = arg;
    lop_list l = {f->ops, 2};
    return queue_list(v, &l);
}

/* Every byte of a tensor is zero. */
static int all_zero(tf_tensor t) {
    got g = fetch(t);
    int z = 1;
    for (size_t i = 0; i < g.n; i++) z &= g.z[i] == 0;
    got_free(&g);
    return z;
}

START_TEST(test_numeric_failures) {
    start();
    const int64_t n = 3, shape[3] = {3, 3, 3}, bshape[2] = {3, 3};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        for (size_t c = 0; c < sizeof fault_cases / sizeof *fault_cases; c++) {
            const fault_case *fc = &fault_cases[c];
            WHAT("%s, %s", fc->name, tf_dtype_name(dt));
            zc a[27], b[9];
            if (fc->kind == L_CHOL || fc->kind == L_EIGH || fc->kind == L_EIGHT) {
                zc *h = hpd_matrices(dt, n, 3, 0);
                memcpy(a, h, sizeof a);
                free(h);
            } else {
                zc *r = square_matrices(dt, n, 3, 0);
                memcpy(a, r, sizeof a);
                free(r);
            }
            zc *rb = random_z(dt, 9), clean[9];
            memcpy(b, rb, sizeof b);
            memcpy(clean, rb, sizeof clean);
            free(rb);
            if (fc->fault == 0) a[9 + 4] = NAN;
            if (fc->fault == 1)
                a[9 + 3] = INFINITY; /* the lower triangle: eigh and cholesky read it */
            if (fc->fault == 2) b[3 + 1] = -INFINITY;
            if (fc->fault == 3)
                for (int i = 0; i < 9; i++) a[9 + i] = singular3[i];
            if (fc->fault == 4) {
                static const double not_pd[9] = {1, 2, 0, 2, 1, 0, 0, 0, 1};
                for (int i = 0; i < 9; i++) a[9 + i] = not_pd[i];
            }
            tf_tensor ta = upload_z(dt, 3, shape, a), tb = upload_z(dt, 2, bshape, b);
            tf_tensor tgood = upload_z(dt, 2, bshape, clean);
            fault_run f;
            memset(&f, 0, sizeof f);
            f.ops[0].kind = L_COPY;
            f.ops[0].a = tgood;
            f.ops[1].kind = fc->kind;
            f.ops[1].a = ta;
            f.ops[1].b = tb;
            f.ops[1].t.cutoff = 0.5;
            f.ops[1].values_only = fc->fault == 1 && fc->kind == L_SVD;
            /* Held: the failure comes at the synchronize, naming operation 1 and matrix 1. */
            tf_session *s = NULL;
            CK_STATUS(C, tf_session_open(C, &s), TF_OK);
            CK_STATUS(C, tf_session_with(s, queue_fault, &f), TF_OK);
            /* A download of its result reports the failure too, naming the operation. */
            CK_STATUS(C, tf_session_submit(s), TF_OK);
            void *bytes = NULL;
            size_t nbytes = 0;
            int first = 0;
            while (first < 3 && !f.ops[1].out[first]) first++;
            const tf_status dst = tf_download(C, f.ops[1].out[first], &bytes, &nbytes);
            free(bytes);
            CHECK(dst == fc->want, "the download returned %s, expected %s: %s", tf_status_name(dst),
                  tf_status_name(fc->want), tf_client_last_error(C));
            CHECK(strstr(tf_client_last_error(C), "operation 1 of a submission") != NULL &&
                      strstr(tf_client_last_error(C), fc->needle) != NULL,
                  "the download's \"%s\" does not name operation 1 and \"%s\"",
                  tf_client_last_error(C), fc->needle);
            const tf_status st = tf_session_synchronize(s);
            CHECK(st == fc->want, "the synchronize returned %s, expected %s: %s",
                  tf_status_name(st), tf_status_name(fc->want), tf_client_last_error(C));
            /* The failing operation went with the submit before: the synchronize names it so. */
            CHECK(strstr(tf_client_last_error(C), "earlier submission (index 1)") != NULL,
                  "the synchronize's \"%s\" does not name operation 1 of the submit",
                  tf_client_last_error(C));
            CHECK(strstr(tf_client_last_error(C), fc->needle) != NULL, "\"%s\" does not say \"%s\"",
                  tf_client_last_error(C), fc->needle);
            /* The operation before it ran; every output of the failed one holds zeros. */
            got cp = fetch(f.ops[0].out[0]);
            CHECK(memcmp(cp.z, clean, sizeof clean) == 0, "the copy before the failure is wrong");
            got_free(&cp);
            for (int o = 0; o < 4; o++)
                if (f.ops[1].out[o])
                    CHECK(all_zero(f.ops[1].out[o]),
                          "output %d of the failed operation is not zeros", o);
            /* The session is usable: the same operation on good matrices succeeds. */
            zc *good = fc->kind == L_CHOL || fc->kind == L_EIGH || fc->kind == L_EIGHT
                           ? hpd_matrices(dt, n, 3, 0)
                           : square_matrices(dt, n, 3, 0);
            tf_tensor tg = upload_z(dt, 3, shape, good);
            fault_run g;
            memset(&g, 0, sizeof g);
            g.ops[0].kind = L_COPY;
            g.ops[0].a = tgood;
            g.ops[1] = f.ops[1];
            memset(g.ops[1].out, 0, sizeof g.ops[1].out);
            g.ops[1].a = tg;
            g.ops[1].b = tgood;
            CK_STATUS(C, tf_session_with(s, queue_fault, &g), TF_OK);
            CK_STATUS(C, tf_session_synchronize(s), TF_OK);
            CK_STATUS(C, tf_session_close(s, NULL), TF_OK);
            if (fc->kind == L_DET) {
                got dg = fetch(g.ops[1].out[0]);
                zc det, sign;
                double lad;
                ref_det(n, good, &det, &lad, &sign);
                CHECK(cabs(dg.z[0] - det) <= bound(dt, n, n) * 100 * cabs(det),
                      "det after the failure is wrong");
                got_free(&dg);
            }
            /* Scoped: the burst returns the failure, with the same index. */
            fault_run h;
            memset(&h, 0, sizeof h);
            h.ops[0] = f.ops[0];
            h.ops[1] = f.ops[1];
            memset(h.ops[0].out, 0, sizeof h.ops[0].out);
            memset(h.ops[1].out, 0, sizeof h.ops[1].out);
            const tf_status st2 = tf_with_session(C, queue_fault, &h);
            CHECK(st2 == fc->want, "the burst returned %s: %s", tf_status_name(st2),
                  tf_client_last_error(C));
            CHECK(tf_client_failed_index(C) == 1, "the burst's failure names operation %lld",
                  (long long)tf_client_failed_index(C));
            for (int o = 0; o < 4; o++)
                if (h.ops[1].out[o])
                    CHECK(all_zero(h.ops[1].out[o]), "output %d of the failed burst is not zeros",
                          o);
            for (int o = 0; o < 2; o++) {
                free_outs(&f.ops[o]);
                free_outs(&g.ops[o]);
                free_outs(&h.ops[o]);
            }
            CK_STATUS(C, tf_tensor_free(C, ta), TF_OK);
            CK_STATUS(C, tf_tensor_free(C, tb), TF_OK);
            CK_STATUS(C, tf_tensor_free(C, tg), TF_OK);
            CK_STATUS(C, tf_tensor_free(C, tgood), TF_OK);
            free(good);
        }
    }
    stop();
}
END_TEST

/* ---- refusals at the call ---- */

typedef struct refusal {
    const char *what;
    lop o;
    /* 0: the f64 [2, 3, 4] tensor, 1: the [3, 3] one, 2: the rank-1 one, 3: solve with a B of 4
     * rows, 4: solve with a c128 B */
    int on;
    tf_status want;
    const char *needle;
} refusal;

START_TEST(test_refusals_at_the_call) {
    start();
    const int64_t s3[3] = {2, 3, 4}, sq[2] = {3, 3}, v1[1] = {5}, b4[1] = {4};
    zc *x = random_z(TF_F64, 24), *y = random_z(TF_F64, 9), *z = random_z(TF_F64, 5),
       *w = random_z(TF_F64, 4);
    zc *q = random_z(TF_C128, 9);
    tf_tensor t3 = upload_z(TF_F64, 3, s3, x), tq = upload_z(TF_F64, 2, sq, y),
              tv = upload_z(TF_F64, 1, v1, z), tb = upload_z(TF_F64, 1, b4, w),
              tc = upload_z(TF_C128, 2, sq, q);
    const refusal cases[] = {
        {"eigh of a 3 x 4 matrix", {.kind = L_EIGH}, 0, TF_ERR_SHAPE, "square"},
        {"eigh_truncated of a 3 x 4 matrix",
         {.kind = L_EIGHT, .t = {.max_rank = 1}}, 0, TF_ERR_SHAPE, "square"},
        {"eigh, tensor split 6 x 4",
         {.kind = L_EIGH, .use_split = 1, .split = {NULL, 0, 2}}, 0, TF_ERR_SHAPE, NULL},
        {"cholesky of 3 x 4", {.kind = L_CHOL}, 0, TF_ERR_SHAPE, NULL},
        {"inv of 3 x 4", {.kind = L_INV}, 0, TF_ERR_SHAPE, NULL},
        {"det of 3 x 4", {.kind = L_DET}, 0, TF_ERR_SHAPE, NULL},
        {"svd of a vector", {.kind = L_SVD}, 2, TF_ERR_SHAPE, NULL},
        {"svd, no row axes",
         {.kind = L_SVD, .use_split = 1, .split = {NULL, 1, 0}}, 0, TF_ERR_AXIS, NULL},
        {"svd, no column axes",
         {.kind = L_SVD, .use_split = 1, .split = {NULL, 1, 2}}, 0, TF_ERR_AXIS, NULL},
        {"svd, split beyond the rank",
         {.kind = L_SVD, .use_split = 1, .split = {NULL, 3, 1}}, 0, TF_ERR_AXIS, NULL},
        {"svd, negative n_batch",
         {.kind = L_SVD, .use_split = 1, .split = {NULL, -1, 1}}, 0, TF_ERR_AXIS, NULL},
        {"svd, perm repeats an axis",
         {.kind = L_SVD, .use_split = 1, .use_perm = 1, .perm = {0, 0, 1}, .split = {NULL, 0, 1}},
         0,
         TF_ERR_AXIS,
         "perm"},
        {"svd, perm out of range",
         {.kind = L_SVD, .use_split = 1, .use_perm = 1, .perm = {0, 1, 3}, .split = {NULL, 0, 1}},
         0,
         TF_ERR_AXIS,
         "perm"},
        {"qr, negative perm entry",
         {.kind = L_QR, .use_split = 1, .use_perm = 1, .perm = {-1, 0, 1}, .split = {NULL, 1, 1}},
         0,
         TF_ERR_AXIS,
         "perm"},
        {"svd_truncated, min_rank above max_rank",
         {.kind = L_SVDT, .t = {.max_rank = 2, .min_rank = 3}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         "min_rank"},
        {"svd_truncated, negative max_rank",
         {.kind = L_SVDT, .t = {.max_rank = -1}}, 0, TF_ERR_INVALID_ARGUMENT, NULL},
        {"svd_truncated, negative cutoff",
         {.kind = L_SVDT, .t = {.cutoff = -0.5}}, 0, TF_ERR_INVALID_ARGUMENT, "cutoff"},
        {"svd_truncated, nan rel_cutoff",
         {.kind = L_SVDT, .t = {.rel_cutoff = NAN}}, 0, TF_ERR_INVALID_ARGUMENT, "rel_cutoff"},
        {"svd_truncated, inf discarded_weight",
         {.kind = L_SVDT, .t = {.discarded_weight = INFINITY}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         "discarded_weight"},
        {"svd_truncated, negative rel_discarded_weight",
         {.kind = L_SVDT, .t = {.rel_discarded_weight = -1e-9}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         "rel_discarded_weight"},
        {"svd_truncated, absorb without vectors",
         {.kind = L_SVDT, .values_only = 1, .t = {.absorb = TF_ABSORB_LEFT}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         "absorb"},
        {"svd_truncated, absorb 7",
         {.kind = L_SVDT, .t = {.absorb = (tf_absorb)7}}, 0, TF_ERR_INVALID_ARGUMENT, "absorb"},
        {"eigh_truncated, absorb",
         {.kind = L_EIGHT, .t = {.absorb = TF_ABSORB_RIGHT}}, 1, TF_ERR_INVALID_ARGUMENT, "absorb"},
        {"eigh_truncated, renormalize",
         {.kind = L_EIGHT, .t = {.renormalize = 1}}, 1, TF_ERR_INVALID_ARGUMENT, "renormalize"},
        {"svd, u without vh", {.kind = L_SVD_HALF}, 0, TF_ERR_INVALID_ARGUMENT, NULL},
        {"qr, mode 5", {.kind = L_QR, .mode = (tf_qr_mode)5}, 0, TF_ERR_INVALID_ARGUMENT, "mode"},
        {"solve, B of 4 rows", {.kind = L_SOLVE}, 3, TF_ERR_SHAPE, NULL},
        {"solve, B of another dtype", {.kind = L_SOLVE}, 4, TF_ERR_DTYPE, NULL},
        {"vector_norm, nan p", {.kind = L_VNORM, .p = NAN}, 0, TF_ERR_INVALID_ARGUMENT, NULL},
        {"vector_norm, repeated axis",
         {.kind = L_VNORM, .p = 2, .n_axes = 2, .axes = {1, -2}}, 0, TF_ERR_AXIS, NULL},
        {"vector_norm, axis out of range",
         {.kind = L_VNORM, .p = 2, .n_axes = 1, .axes = {3}}, 0, TF_ERR_AXIS, NULL},
        {"matrix_norm, ord 9",
         {.kind = L_MNORM, .ord = (tf_matrix_norm)9}, 0, TF_ERR_INVALID_ARGUMENT, NULL},
        {"matrix_norm, one axis twice",
         {.kind = L_MNORM, .n_axes = 2, .axes = {0, 0}}, 0, TF_ERR_AXIS, NULL},
        {"matrix_norm of a vector", {.kind = L_MNORM}, 2, TF_ERR_SHAPE, NULL},
        {"trace, offset past the columns",
         {.kind = L_TRACE, .offset = 4}, 0, TF_ERR_INVALID_ARGUMENT, "offset"},
        {"diagonal, offset past the rows",
         {.kind = L_DIAG, .offset = -3}, 0, TF_ERR_INVALID_ARGUMENT, "offset"},
        {"diagonal, huge offset",
         {.kind = L_DIAG, .offset = INT64_MAX}, 0, TF_ERR_INVALID_ARGUMENT, NULL},
        {"slice, zero step",
         {.kind = L_SLICE, .start = {0, 0, 0}, .step = {1, 0, 1}, .len = {1, 1, 1}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         NULL},
        {"slice, past the axis",
         {.kind = L_SLICE, .start = {0, 1, 0}, .step = {1, 1, 1}, .len = {1, 3, 1}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         NULL},
        {"slice, backwards past the start",
         {.kind = L_SLICE, .start = {0, 1, 0}, .step = {1, -1, 1}, .len = {1, 3, 1}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         NULL},
        {"slice, zero length",
         {.kind = L_SLICE, .start = {0, 0, 0}, .step = {1, 1, 1}, .len = {1, 0, 1}},
         0,
         TF_ERR_INVALID_ARGUMENT,
         NULL},
    };
    const uint64_t rejected = th_counter(&D, "ops_rejected"),
                   created = th_counter(&D, "tensors_created");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        WHAT("refused at the call: %s", cases[i].what);
        lop o[2];
        o[0] = cases[i].o;
        const tf_tensor ins[5] = {t3, tq, tv, tq, tq};
        o[0].a = ins[cases[i].on];
        o[0].b = cases[i].on == 3 ? tb : cases[i].on == 4 ? tc : tq;
        const tf_status st = run_scoped(o, 1);
        CHECK(st == cases[i].want && o[0].st == cases[i].want, "returned %s, expected %s: %s",
              tf_status_name(st), tf_status_name(cases[i].want), tf_client_last_error(C));
        const char *msg = tf_client_last_error(C);
        CHECK(strlen(msg) >= 10, "no readable message: \"%s\"", msg);
        if (cases[i].needle)
            CHECK(strstr(msg, cases[i].needle) != NULL, "\"%s\" does not say \"%s\"", msg,
                  cases[i].needle);
        for (int k = 0; k < 4; k++)
            CHECK(o[0].out[k] == 0, "a refused call handed out result %d", k);
        /* The client is usable: a good decomposition right after. */
        o[1] = (lop){.kind = L_SVD, .a = tq};
        run_ok(&o[1], 1);
        free_outs(&o[1]);
    }
    /* Nothing refused reached the daemon. */
    ck_assert_uint_eq(th_counter(&D, "ops_rejected"), rejected);
    ck_assert_uint_eq(th_counter(&D, "tensors_created"),
                      created + 3 * (sizeof cases / sizeof *cases));
    /* A report read of a tensor that is not a report is refused. */
    tf_truncation_report r;
    CK_STATUS(C, tf_truncation_report_read(C, t3, &r, 1), TF_ERR_INVALID_ARGUMENT);
    CK_STATUS(C, tf_truncation_report_read(C, tc, &r, 1), TF_ERR_INVALID_ARGUMENT);
    tf_tensor all[5] = {t3, tq, tv, tb, tc};
    for (int i = 0; i < 5; i++) CK_STATUS(C, tf_tensor_free(C, all[i]), TF_OK);
    free(x);
    free(y);
    free(z);
    free(w);
    free(q);
    stop();
}
END_TEST

/* ---- a DMRG-like loop in a held session ---- */

#define CHI 4
#define PHYS 2
#define STEPS 6

typedef struct dmrg {
    tf_tensor theta, gate;
    tf_truncation t;
    tf_tensor t2[STEPS], u[STEPS], s[STEPS], vh[STEPS], report[STEPS], ur[STEPS], vr[STEPS];
    int64_t rank[STEPS];
    int step;
} dmrg;

/* theta' = theta G over the physical legs, then its truncated svd (rows x a, columns b y). */
static tf_status dmrg_decompose(tf_view *v, void *arg) {
    dmrg *g = arg;
    const int i = g->step;
    const tf_tensor ops[2] = {g->theta, g->gate};
    tf_status st = tf_view_einsum(v, "xaby,abcd->xcdy", 2, ops, &g->t2[i]);
    const tf_split split = {NULL, 0, 2};
    if (st == TF_OK)
        st = tf_view_svd_truncated(v, g->t2[i], &split, &g->t, &g->u[i], &g->s[i], &g->vh[i],
                                   &g->report[i]);
    return st;
}

/* The factors trimmed to the kept rank, contracted into the next theta. */
static tf_status dmrg_trim(tf_view *v, void *arg) {
    dmrg *g = arg;
    const int i = g->step;
    const int64_t r = g->rank[i];
    const int64_t s0[3] = {0, 0, 0}, st1[3] = {1, 1, 1}, lu[3] = {CHI, PHYS, r},
                  lv[3] = {r, PHYS, CHI};
    tf_status st = tf_view_slice(v, g->u[i], s0, st1, lu, &g->ur[i]);
    if (st == TF_OK) st = tf_view_slice(v, g->vh[i], s0, st1, lv, &g->vr[i]);
    const tf_tensor ops[2] = {g->ur[i], g->vr[i]};
    if (st == TF_OK) st = tf_view_einsum(v, "xak,kby->xaby", 2, ops, &g->theta);
    return st;
}

/* The bounded loop: the factors' width is max_rank, nothing to read or trim. */
static tf_status dmrg_bounded(tf_view *v, void *arg) {
    dmrg *g = arg;
    const int i = g->step;
    tf_status st = dmrg_decompose(v, arg);
    const tf_tensor ops[2] = {g->u[i], g->vh[i]};
    if (st == TF_OK) st = tf_view_einsum(v, "xak,kby->xaby", 2, ops, &g->theta);
    return st;
}

/*
 * Checks step i: ||theta' - U_r (S Vh)_r|| is the square root of what the
 * cutoff dropped (the kept part renormalized), the rank the cutoff's.
 */
static void dmrg_check(tf_dtype dt, dmrg *g, int i, int trimmed) {
    got T = fetch(g->t2[i]), S = fetch(g->s[i]);
    got U = fetch(trimmed ? g->ur[i] : g->u[i]), V = fetch(trimmed ? g->vr[i] : g->vh[i]);
    const int64_t m = CHI * PHYS, n = PHYS * CHI, r = trimmed ? g->rank[i] : g->t.max_rank;
    zc *re = th_xmalloc(sizeof(zc) * (size_t)(m * n));
    mm(m, r, n, U.z, V.z, re);
    double sref[8], dropped = 0, total = 0;
    ref_svd(m, n, T.z, sref);
    for (int j = 0; j < 8; j++) {
        total += sref[j] * sref[j];
        if (j >= r) dropped += sref[j] * sref[j];
    }
    /* A renormalized truncation scales what it keeps by sqrt(total / kept). */
    const double f = g->t.renormalize ? sqrt(total / (total - dropped)) : 1;
    for (int64_t j = 0; j < m * n; j++) re[j] /= f;
    const double err = dist((size_t)(m * n), T.z, re);
    CHECK(fabs(err - sqrt(dropped)) <= bound(dt, m, n) * 4 * sqrt(total),
          "step %d: ||theta - U S Vh|| = %.9g, the dropped values weigh %.9g", i, err,
          sqrt(dropped));
    if (trimmed) {
        for (int64_t j = 0; j < r; j++)
            CHECK(creal(S.z[j]) > g->t.cutoff,
                  "step %d: kept value %lld = %g is not above the cutoff", i, (long long)j,
                  creal(S.z[j]));
        if (r < 8)
            CHECK(sref[r] <= g->t.cutoff * (1 + 1e-3) || r == 1,
                  "step %d: value %lld = %g above the cutoff was dropped", i, (long long)r,
                  sref[r]);
    }
    got_free(&T);
    got_free(&S);
    got_free(&U);
    got_free(&V);
    free(re);
}

START_TEST(test_dmrg_loop_host_waits) {
    start();
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        for (int bounded = 0; bounded < 2; bounded++) {
            WHAT("dmrg loop %s, %s", tf_dtype_name(dt), bounded ? "max_rank only" : "by cutoff");
            dmrg g;
            memset(&g, 0, sizeof g);
            const int64_t ts[4] = {CHI, PHYS, PHYS, CHI}, gs[4] = {PHYS, PHYS, PHYS, PHYS};
            zc *theta = random_z(dt, CHI * PHYS * PHYS * CHI);
            const double nt = fro(CHI * PHYS * PHYS * CHI, theta);
            for (int i = 0; i < CHI * PHYS * PHYS * CHI; i++) theta[i] /= nt;
            zc gate[16];
            random_unitary(dt, 4, gate); /* a unitary gate keeps the norm but for what is dropped */
            g.theta = upload_z(dt, 4, ts, theta);
            g.gate = upload_z(dt, 4, gs, gate);
            g.t =
                bounded
                    ? (tf_truncation){.max_rank = 3, .absorb = TF_ABSORB_RIGHT}
                    : (tf_truncation){.cutoff = 0.15, .absorb = TF_ABSORB_RIGHT, .renormalize = 1};
            tf_tensor first = g.theta, thetas[STEPS + 1];
            int64_t ranks[STEPS] = {0};
            thetas[0] = first;
            tf_session *s = NULL;
            CK_STATUS(C, tf_session_open(C, &s), TF_OK);
            ck_assert_uint_eq(tf_session_host_waits(s), 0);
            for (int i = 0; i < STEPS; i++) {
                g.step = i;
                if (bounded) {
                    CK_STATUS(C, tf_session_with(s, dmrg_bounded, &g), TF_OK);
                    CK_STATUS(C, tf_session_submit(s), TF_OK);
                    CHECK(tf_session_host_waits(s) == 0,
                          "step %d of a max_rank loop waited %llu times", i,
                          (unsigned long long)tf_session_host_waits(s));
                } else {
                    CK_STATUS(C, tf_session_with(s, dmrg_decompose, &g), TF_OK);
                    CK_STATUS(C, tf_session_submit(s), TF_OK);
                    CHECK(tf_session_host_waits(s) == (uint64_t)i,
                          "step %d: %llu waits before the report read", i,
                          (unsigned long long)tf_session_host_waits(s));
                    tf_truncation_report rep;
                    CK_STATUS(C, tf_truncation_report_read(C, g.report[i], &rep, 1), TF_OK);
                    CHECK(tf_session_host_waits(s) == (uint64_t)i + 1,
                          "step %d: the report read made %llu waits", i,
                          (unsigned long long)(tf_session_host_waits(s) - (uint64_t)i));
                    CHECK(rep.rank >= 1 && rep.rank <= 8, "step %d: rank %lld", i,
                          (long long)rep.rank);
                    g.rank[i] = rep.rank;
                    ranks[i] = rep.rank;
                    CK_STATUS(C, tf_session_with(s, dmrg_trim, &g), TF_OK);
                    CK_STATUS(C, tf_session_submit(s), TF_OK);
                }
                thetas[i + 1] = g.theta;
            }
            if (!bounded) {
                /* The cutoff truncates: some step keeps fewer than all 8 values. */
                int64_t least = 8;
                for (int i = 0; i < STEPS; i++) least = ranks[i] < least ? ranks[i] : least;
                CHECK(least < 8, "no step of the loop truncated anything");
            }
            const uint64_t before = tf_session_host_waits(s);
            CHECK(before == (bounded ? 0u : (uint64_t)STEPS), "the loop waited %llu times",
                  (unsigned long long)before);
            CK_STATUS(C, tf_session_synchronize(s), TF_OK);
            ck_assert_uint_eq(tf_session_host_waits(s), before + 1);
            /* Each check downloads four tensors: four waits each. */
            for (int i = 0; i < STEPS; i++) dmrg_check(dt, &g, i, !bounded);
            ck_assert_uint_eq(tf_session_host_waits(s), before + 1 + 4 * STEPS);
            CK_STATUS(C, tf_session_close(s, NULL), TF_OK);
            for (int i = 0; i < STEPS; i++) {
                tf_tensor ts2[7] = {g.t2[i],     g.u[i],  g.s[i], g.vh[i],
                                    g.report[i], g.ur[i], g.vr[i]};
                for (int j = 0; j < 7; j++)
                    if (ts2[j]) CK_STATUS(C, tf_tensor_free(C, ts2[j]), TF_OK);
            }
            for (int i = 0; i <= STEPS; i++) CK_STATUS(C, tf_tensor_free(C, thetas[i]), TF_OK);
            CK_STATUS(C, tf_tensor_free(C, g.gate), TF_OK);
            free(theta);
        }
    }
    stop();
}
END_TEST

/* ---- two client processes at once ---- */

static int child_decompose(void *arg) {
    th_die_with_parent();
    const tf_dtype dt = (tf_dtype)(uintptr_t)arg;
    srand(th_seed() + (unsigned)dt); /* the two children draw different inputs */
    tf_client *c = NULL;
    CHILD_CHECK(tf_connect(D.socket, &c) == TF_OK);
    const int64_t n = 12, shape[3] = {4, n, n};
    for (int round = 0; round < 5; round++) {
        zc *a = square_matrices(dt, n, 4, 0);
        void *raw = th_xmalloc(4 * n * n * tf_dtype_size(dt));
        th_narrow(dt, 4 * n * n, a, raw);
        tf_tensor t = 0;
        CHILD_STATUS(c, tf_upload(c, dt, 3, shape, raw, &t), TF_OK);
        lop o[2] = {{.kind = L_SVD, .a = t}, {.kind = L_INV, .a = t}};
        CHILD_STATUS(c, run_scoped_on(c, o, 2), TF_OK);
        void *s = NULL, *iv = NULL;
        size_t bytes = 0;
        CHILD_STATUS(c, tf_download(c, o[0].out[1], &s, &bytes), TF_OK);
        CHILD_STATUS(c, tf_download(c, o[1].out[0], &iv, &bytes), TF_OK);
        zc *sz = th_xmalloc(sizeof(zc) * 4 * (size_t)n),
           *ivz = th_xmalloc(sizeof(zc) * 4 * (size_t)(n * n));
        th_widen(th_real_of(dt), 4 * (size_t)n, s, sz);
        th_widen(dt, 4 * (size_t)(n * n), iv, ivz);
        double sref[12];
        zc prodm[144];
        for (int i = 0; i < 4; i++) {
            ref_svd(n, n, a + i * n * n, sref);
            for (int j = 0; j < n; j++)
                CHILD_CHECK(fabs(creal(sz[i * n + j]) - sref[j]) <= bound(dt, n, n) * sref[0]);
            mm(n, n, n, a + i * n * n, ivz + i * n * n, prodm);
            for (int j = 0; j < n * n; j++)
                CHILD_CHECK(cabs(prodm[j] - (j % (n + 1) == 0)) <= bound(dt, n, n) * 100);
        }
        free(s);
        free(iv);
        free(sz);
        free(ivz);
        free(raw);
        free(a);
    }
    tf_disconnect(c);
    return 0;
}

START_TEST(test_two_processes) {
    start();
    pid_t a = th_spawn(child_decompose, (void *)(uintptr_t)TF_C128);
    pid_t b = th_spawn(child_decompose, (void *)(uintptr_t)TF_F32);
    CK_CHILD_OK(a, "the c128 client");
    CK_CHILD_OK(b, "the f32 client");
    stop();
}
END_TEST

/* ---- prepared graphs holding linear algebra (docs/linalg.md, "Prepared graphs") ---- */

/* One run of prepared graph p: inputs and outputs. */
typedef struct graph_run {
    tf_prepared p;
    int n_in, n_out;
    const tf_tensor *in;
    tf_tensor *out;
} graph_run;

static tf_status graph_run_fn(tf_view *v, void *arg) {
    graph_run *r = arg;
    return tf_view_run_prepared(v, r->p, r->n_in, r->in, r->n_out, r->out);
}

/* Runs p once in a scoped session of c; the session's status. */
static tf_status run_graph_on(tf_client *c, tf_prepared p, int n_in, const tf_tensor *in, int n_out,
                              tf_tensor *out) {
    graph_run r = {p, n_in, n_out, in, out};
    return tf_with_session(c, graph_run_fn, &r);
}

/* The sizes of the SVD graph: M = A B is SG_M x SG_N of rank at most SG_K. */
enum { SG_M = 6, SG_K = 5, SG_N = 7, SG_MIN = 6 };

/*
 * Records and prepares, on c: M = einsum(A, B), its truncated SVD by t, and
 * the contraction back, R = U diag(S) Vh (with absorb both, which a complex
 * dtype needs because S is real: R = (U sqrt S)(sqrt S Vh)). Outputs R, U,
 * S, Vh, report.
 */
static tf_status prepare_svd_graph(tf_client *c, tf_dtype dt, const tf_truncation *t,
                                   tf_prepared *out) {
    tf_graph *g = NULL;
    tf_status st = tf_graph_new(c, &g);
    if (st != TF_OK) return st;
    tf_tensor a, b, m, u, s, vh, rep, r;
    tf_view *v = tf_graph_view(g);
    if ((st = tf_graph_input(g, dt, 2, (int64_t[]){SG_M, SG_K}, &a)) == TF_OK &&
        (st = tf_graph_input(g, dt, 2, (int64_t[]){SG_K, SG_N}, &b)) == TF_OK &&
        (st = tf_view_einsum(v, "ij,jk->ik", 2, (tf_tensor[]){a, b}, &m)) == TF_OK &&
        (st = tf_view_svd_truncated(v, m, NULL, t, &u, &s, &vh, &rep)) == TF_OK)
        st = t->absorb == TF_ABSORB_BOTH
                 ? tf_view_einsum(v, "ir,rk->ik", 2, (tf_tensor[]){u, vh}, &r)
                 : tf_view_einsum(v, "ir,r,rk->ik", 3, (tf_tensor[]){u, s, vh}, &r);
    const tf_tensor outs[5] = {r, u, s, vh, rep};
    for (int o = 0; o < 5 && st == TF_OK; o++) st = tf_graph_output(g, outs[o]);
    if (st == TF_OK) st = tf_prepare(c, g, out);
    tf_graph_free(g);
    return st;
}

/* Fresh A and B of dt whose product's values sit clear of t's relative cutoff; M = A B. */
static void svd_graph_inputs(tf_dtype dt, const tf_truncation *t, zc **a, zc **b, zc *m,
                             double *s) {
    for (int attempt = 0;; attempt++) {
        *a = random_z(dt, SG_M * SG_K);
        *b = random_z(dt, SG_K * SG_N);
        mm(SG_M, SG_K, SG_N, *a, *b, m);
        ref_svd(SG_M, SG_N, m, s);
        int clear = 1;
        for (int i = 0; t->rel_cutoff > 0 && i < SG_MIN; i++)
            clear &= fabs(s[i] - t->rel_cutoff * s[0]) > 1e-3 * s[0];
        if (clear || attempt == 20) return;
        free(*a);
        free(*b);
    }
}

/*
 * One run of the SVD graph p on fresh inputs, in the process of client c,
 * against LAPACK: S's leading values are zgesvd's, zeros past the kept rank
 * (the documented rule on zgesvd's values), U's columns and Vh's rows past
 * it zero, U's kept columns orthonormal, R within the bound of M's best
 * approximation of that rank (||M - R|| = the dropped values' norm), and the
 * report, read with tf_truncation_report_read, says the rank and weight.
 * Returns 0, or 1 with why filled (a child process reports it itself).
 */
static int check_svd_graph_run(tf_client *c, tf_prepared p, tf_dtype dt, const tf_truncation *t,
                               char *why, size_t len) {
    zc *a, *b, m[SG_M * SG_N];
    double s[SG_MIN];
    svd_graph_inputs(dt, t, &a, &b, m, s);
    const int64_t sa[2] = {SG_M, SG_K}, sb[2] = {SG_K, SG_N};
    void *ra = th_xmalloc(SG_M * SG_K * tf_dtype_size(dt)), *rb = th_xmalloc(SG_K * SG_N * tf_dtype_size(dt));
    th_narrow(dt, SG_M * SG_K, a, ra);
    th_narrow(dt, SG_K * SG_N, b, rb);
    tf_tensor in[2] = {0, 0}, out[5] = {0};
    int bad = 0;
    if (tf_upload(c, dt, 2, sa, ra, &in[0]) != TF_OK || tf_upload(c, dt, 2, sb, rb, &in[1]) != TF_OK) {
        snprintf(why, len, "upload: %s", tf_client_last_error(c));
        bad = 1;
    }
    tf_status st = bad ? TF_OK : run_graph_on(c, p, 2, in, 5, out);
    if (!bad && st != TF_OK) {
        snprintf(why, len, "the run returned %s: %s", tf_status_name(st), tf_client_last_error(c));
        bad = 1;
    }
    double dropped = 0, total = 0;
    const int64_t r = rule_rank(s, SG_MIN, t, degenerate_tol(dt), &dropped, &total);
    const int64_t rb_ = t->max_rank > 0 && t->max_rank < SG_MIN ? t->max_rank : SG_MIN;
    got R = {0}, U = {0}, S = {0}, Vh = {0};
    if (!bad) {
        R = fetch_on(c, out[0]);
        U = fetch_on(c, out[1]);
        S = fetch_on(c, out[2]);
        Vh = fetch_on(c, out[3]);
        tf_truncation_report rep = {0};
        const double tol = bound(dt, SG_M, SG_N) * 4;
        if (tf_truncation_report_read(c, out[4], &rep, 1) != TF_OK) {
            snprintf(why, len, "report: %s", tf_client_last_error(c));
            bad = 1;
        } else if (rep.rank != r || fabs(rep.discarded_weight - dropped) > tol * total) {
            snprintf(why, len, "the report says rank %lld, weight %g; LAPACK's values give %lld, %g",
                     (long long)rep.rank, rep.discarded_weight, (long long)r, dropped);
            bad = 1;
        } else if (U.n != (size_t)(SG_M * rb_) || S.n != (size_t)rb_ || Vh.n != (size_t)(rb_ * SG_N)) {
            snprintf(why, len, "U, S, Vh hold %zu, %zu, %zu values for the bound %lld", U.n, S.n,
                     Vh.n, (long long)rb_);
            bad = 1;
        }
        for (int64_t i = 0; !bad && i < rb_; i++) {
            const double want = i < r ? s[i] : 0;
            if (i < r ? fabs(creal(S.z[i]) - want) > tol * s[0] : S.z[i] != 0) {
                snprintf(why, len, "S[%lld] is %g, zgesvd's (kept rank %lld) %g", (long long)i,
                         creal(S.z[i]), (long long)r, want);
                bad = 1;
            }
            for (int64_t j = 0; !bad && i >= r && j < SG_M; j++) bad = U.z[j * rb_ + i] != 0;
            for (int64_t j = 0; !bad && i >= r && j < SG_N; j++) bad = Vh.z[i * SG_N + j] != 0;
            if (bad && !why[0]) snprintf(why, len, "U or Vh is not zero past the kept rank %lld", (long long)r);
        }
        if (!bad && t->absorb == TF_ABSORB_NONE && orth_cols(SG_M, r, rb_, U.z) > tol * 4) {
            snprintf(why, len, "U's kept columns are not orthonormal (%g)", orth_cols(SG_M, r, rb_, U.z));
            bad = 1;
        }
        const double err = dist(SG_M * SG_N, m, R.z), an = fro(SG_M * SG_N, m);
        if (!bad && fabs(err - sqrt(dropped)) > tol * an) {
            snprintf(why, len, "||M - U S Vh|| is %g; the values dropped weigh %g (bound %g)", err,
                     sqrt(dropped), tol * an);
            bad = 1;
        }
    }
    got_free(&R);
    got_free(&U);
    got_free(&S);
    got_free(&Vh);
    for (int i = 0; i < 2; i++)
        if (in[i]) (void)tf_tensor_free(c, in[i]);
    for (int o = 0; o < 5; o++)
        if (out[o]) (void)tf_tensor_free(c, out[o]);
    free(ra);
    free(rb);
    free(a);
    free(b);
    return bad;
}

/* The truncations of the SVD graph: by max_rank (nothing waits), by a cutoff (rank on the device). */
static tf_truncation svd_graph_truncation(tf_dtype dt, int by_cutoff) {
    tf_truncation t;
    memset(&t, 0, sizeof t);
    if (by_cutoff)
        t.rel_cutoff = 0.25;
    else
        t.max_rank = 3;
    if (th_is_complex(dt)) t.absorb = TF_ABSORB_BOTH;
    return t;
}

START_TEST(test_graph_svd_contract) {
    start();
    for (int d = 0; d < 4; d++)
        for (int by_cutoff = 0; by_cutoff < 2; by_cutoff++) {
            const tf_dtype dt = all_dtypes[d];
            WHAT("graph einsum -> svd_truncated (%s) -> U S Vh, %s",
                 by_cutoff ? "rel_cutoff" : "max_rank", tf_dtype_name(dt));
            const tf_truncation t = svd_graph_truncation(dt, by_cutoff);
            tf_prepared p = 0;
            tf_status st = prepare_svd_graph(C, dt, &t, &p);
            CHECK(st == TF_OK, "prepare: %s: %s", tf_status_name(st), tf_client_last_error(C));
            /* The outputs' shapes are the bound's: U [m, r_b]. */
            int rank = 0;
            int64_t shape[TF_MAX_RANK];
            CK_STATUS(C, tf_prepared_output(C, p, 1, NULL, &rank, shape), TF_OK);
            CHECK(rank == 2 && shape[0] == SG_M && shape[1] == (by_cutoff ? SG_MIN : 3),
                  "U is recorded [%lld, %lld]", (long long)shape[0], (long long)shape[1]);
            for (int run = 0; run < 4; run++) {
                char why[400] = "";
                CHECK(!check_svd_graph_run(C, p, dt, &t, why, sizeof why), "run %d: %s", run, why);
            }
            CK_STATUS(C, tf_prepared_free(C, p), TF_OK);
        }
    stop();
}
END_TEST

/*
 * qr and solve in one graph, with a tensor-form qr through a permuting split
 * (the daemon's scratch copy) and a slice: QR = A, Q orthonormal, R upper
 * with a real non-negative diagonal, X = zgesv's, the tensor-form factors
 * byte for byte those of the same qr in a session, R2 R's first rows.
 */
START_TEST(test_graph_qr_solve) {
    start();
    enum { N = 4, K = 2 };
    const int64_t sa[2] = {N, N}, sb[2] = {N, K}, st3[3] = {3, 2, 4};
    static const int perm[3] = {1, 0, 2};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        WHAT("graph qr + solve + tensor-form qr + slice, %s", tf_dtype_name(dt));
        tf_graph *g;
        CK_STATUS(C, tf_graph_new(C, &g), TF_OK);
        tf_tensor a, b, t3, q, r, qr, x, qt, rt, r2;
        CK_STATUS(C, tf_graph_input(g, dt, 2, sa, &a), TF_OK);
        CK_STATUS(C, tf_graph_input(g, dt, 2, sb, &b), TF_OK);
        CK_STATUS(C, tf_graph_input(g, dt, 3, st3, &t3), TF_OK);
        tf_view *v = tf_graph_view(g);
        const tf_split split = {perm, 1, 1};
        CK_STATUS(C, tf_view_qr(v, a, NULL, TF_QR_REDUCED, &q, &r), TF_OK);
        CK_STATUS(C, tf_view_einsum(v, "ij,jk->ik", 2, (tf_tensor[]){q, r}, &qr), TF_OK);
        CK_STATUS(C, tf_view_solve(v, a, b, &x), TF_OK);
        CK_STATUS(C, tf_view_qr(v, t3, &split, TF_QR_REDUCED, &qt, &rt), TF_OK);
        CK_STATUS(C, tf_view_slice(v, r, (int64_t[]){0, 0}, (int64_t[]){1, 1}, (int64_t[]){2, N}, &r2),
                  TF_OK);
        const tf_tensor outs[7] = {q, r, qr, x, qt, rt, r2};
        for (int o = 0; o < 7; o++) CK_STATUS(C, tf_graph_output(g, outs[o]), TF_OK);
        tf_prepared p = 0;
        CK_STATUS(C, tf_prepare(C, g, &p), TF_OK);
        tf_graph_free(g);
        for (int run = 0; run < 3; run++) {
            zc *za = square_matrices(dt, N, 1, 0), *zb = random_z(dt, N * K),
               *z3 = random_z(dt, 3 * 2 * 4);
            tf_tensor in[3] = {upload_z(dt, 2, sa, za), upload_z(dt, 2, sb, zb),
                               upload_z(dt, 3, st3, z3)};
            tf_tensor out[7] = {0};
            tf_status st = run_graph_on(C, p, 3, in, 7, out);
            CHECK(st == TF_OK, "run %d: %s: %s", run, tf_status_name(st), tf_client_last_error(C));
            got Q = fetch(out[0]), R = fetch(out[1]), QR = fetch(out[2]), X = fetch(out[3]),
                R2 = fetch(out[6]);
            const double tol = bound(dt, N, N), an = fro(N * N, za);
            CHECK(dist(N * N, QR.z, za) <= tol * an, "run %d: ||QR - A|| = %g", run,
                  dist(N * N, QR.z, za));
            CHECK(orth_cols(N, N, N, Q.z) <= tol * 4, "run %d: Q is not orthonormal", run);
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++) {
                    const zc e = R.z[i * N + j];
                    if (j < i) CHECK(e == 0, "run %d: R[%d][%d] below the diagonal is not 0", run, i, j);
                    if (j == i) CHECK(cimag(e) == 0 && creal(e) >= 0, "run %d: R's diagonal %d", run, i);
                }
            zc xref[N * K];
            ref_solve(N, K, za, zb, xref);
            CHECK(dist(N * K, X.z, xref) <= tol * cond_of(N, N, za) * fro(N * K, xref),
                  "run %d: X differs from zgesv's by %g", run, dist(N * K, X.z, xref));
            CHECK(memcmp(R2.raw, R.raw, 2 * N * tf_dtype_size(dt)) == 0 && R2.n == 2 * N,
                  "run %d: the slice is not R's first two rows", run);
            /* The tensor form through the scratch copy: the bytes a session's qr makes. */
            lop o = {.kind = L_QR, .a = in[2], .use_split = 1, .use_perm = 1, .mode = TF_QR_REDUCED};
            o.split.n_batch = 1;
            o.split.n_rows = 1;
            memcpy(o.perm, perm, sizeof perm);
            run_ok(&o, 1);
            same_bytes(out[4], o.out[0], "the graph's tensor-form Q");
            same_bytes(out[5], o.out[1], "the graph's tensor-form R");
            free_outs(&o);
            got_free(&Q);
            got_free(&R);
            got_free(&QR);
            got_free(&X);
            got_free(&R2);
            for (int i = 0; i < 3; i++) CK_STATUS(C, tf_tensor_free(C, in[i]), TF_OK);
            for (int i = 0; i < 7; i++) CK_STATUS(C, tf_tensor_free(C, out[i]), TF_OK);
            free(za);
            free(zb);
            free(z3);
        }
        CK_STATUS(C, tf_prepared_free(C, p), TF_OK);
    }
    stop();
}
END_TEST

/*
 * A cholesky node failing inside a graph run: the run fails like any
 * operation, typed, its message naming the node and the matrix, every
 * output of the run reading zeros; runs before and after are correct.
 */
START_TEST(test_graph_failing_cholesky) {
    start();
    enum { B = 2, N = 4 };
    const int64_t shape[3] = {B, N, N};
    for (int d = 0; d < 4; d++) {
        const tf_dtype dt = all_dtypes[d];
        WHAT("graph copy -> cholesky, %s", tf_dtype_name(dt));
        tf_graph *g;
        CK_STATUS(C, tf_graph_new(C, &g), TF_OK);
        tf_tensor a, a2, l;
        CK_STATUS(C, tf_graph_input(g, dt, 3, shape, &a), TF_OK);
        tf_view *v = tf_graph_view(g);
        CK_STATUS(C, tf_view_copy(v, a, &a2), TF_OK);
        CK_STATUS(C, tf_view_cholesky(v, a2, 0, &l), TF_OK);
        CK_STATUS(C, tf_graph_output(g, l), TF_OK);
        CK_STATUS(C, tf_graph_output(g, a2), TF_OK);
        tf_prepared p = 0;
        CK_STATUS(C, tf_prepare(C, g, &p), TF_OK);
        tf_graph_free(g);
        for (int run = 0; run < 3; run++) {
            zc *z = hpd_matrices(dt, N, B, 0);
            const int fail = run == 1;
            if (fail) {
                static const double not_pd[16] = {1, 2, 0, 0, 2, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
                for (int i = 0; i < N * N; i++) z[N * N + i] = not_pd[i];
            }
            tf_tensor in = upload_z(dt, 3, shape, z), out[2] = {0, 0};
            tf_session *s = NULL;
            CK_STATUS(C, tf_session_open(C, &s), TF_OK);
            graph_run r = {p, 1, 2, &in, out};
            CK_STATUS(C, tf_session_with(s, graph_run_fn, &r), TF_OK);
            const tf_status st = tf_session_synchronize(s);
            char msg[400];
            snprintf(msg, sizeof msg, "%.399s", tf_client_last_error(C));
            CK_STATUS(C, tf_session_close(s, NULL), TF_OK);
            if (fail) {
                CHECK(st == TF_ERR_NOT_POSITIVE_DEFINITE, "the failing run returned %s: %s",
                      tf_status_name(st), msg);
                CHECK(strstr(msg, "node 1 (cholesky)") != NULL && strstr(msg, "matrix 1") != NULL,
                      "the failure \"%s\" does not name node 1 (cholesky) and matrix 1", msg);
                /*
                 * The failed node's output reads zeros on both backends; on the CPU
                 * the failure is known at the call and the whole run's outputs are
                 * zeros, where CUDA finds it on the device after the copy ran.
                 */
                CHECK(all_zero(out[0]), "the failed node's output does not read zeros");
                if (strncmp(th_device(), "cpu", 3) == 0)
                    CHECK(all_zero(out[1]), "the failed run's outputs do not read zeros");
            } else {
                CHECK(st == TF_OK, "run %d returned %s: %s", run, tf_status_name(st), msg);
                got L = fetch(out[0]), A2 = fetch(out[1]);
                CHECK(memcmp(A2.z, z, A2.n * sizeof *z) == 0, "run %d: the copy differs", run);
                for (int i = 0; i < B; i++) {
                    zc lref[N * N];
                    ck_assert_int_eq(ref_cholesky(N, z + i * N * N, lref), 0);
                    CHECK(dist(N * N, L.z + i * N * N, lref) <= bound(dt, N, N) * 4 * fro(N * N, lref),
                          "run %d: L of matrix %d differs from zpotrf's", run, i);
                }
                got_free(&L);
                got_free(&A2);
            }
            CK_STATUS(C, tf_tensor_free(C, in), TF_OK);
            for (int o = 0; o < 2; o++) CK_STATUS(C, tf_tensor_free(C, out[o]), TF_OK);
            free(z);
        }
        CK_STATUS(C, tf_prepared_free(C, p), TF_OK);
    }
    stop();
}
END_TEST

/* The prepared_graphs cache's hits and misses. */
static void graph_cache_counts(uint64_t *hits, uint64_t *misses) {
    Tenferro__Frame *r = th_status_report(&D);
    ck_assert_ptr_nonnull(r);
    int found = 0;
    for (size_t i = 0; i < r->status_reply->n_caches; i++) {
        const Tenferro__CacheInfo *x = r->status_reply->caches[i];
        if (strcmp(x->name, "prepared_graphs") != 0) continue;
        *hits = x->hits;
        *misses = x->misses;
        found = 1;
    }
    tf__frame_free(r);
    ck_assert_msg(found, "the status report lists no prepared_graphs cache");
}

/* A second process prepares the SVD graph the parent let go of, runs it and checks it. */
static int child_svd_graph(void *arg) {
    (void)arg;
    th_die_with_parent();
    srand(th_seed() ^ 0x2545f491u);
    tf_client *c = NULL;
    CHILD_CHECK(tf_connect(D.socket, &c) == TF_OK);
    const tf_truncation t = svd_graph_truncation(TF_F64, 1);
    tf_prepared p = 0;
    CHILD_STATUS(c, prepare_svd_graph(c, TF_F64, &t, &p), TF_OK);
    for (int run = 0; run < 3; run++) {
        char why[400] = "";
        if (check_svd_graph_run(c, p, TF_F64, &t, why, sizeof why)) {
            fprintf(stderr, "[child] run %d: %s (seed %u)\n", run, why, th_seed());
            return 1;
        }
    }
    CHILD_STATUS(c, tf_prepared_free(c, p), TF_OK);
    tf_disconnect(c);
    return 0;
}

START_TEST(test_graph_cache_second_client) {
    start();
    WHAT("a linear-algebra graph from the cache, in a second process");
    const tf_truncation t = svd_graph_truncation(TF_F64, 1);
    tf_prepared p = 0;
    CK_STATUS(C, prepare_svd_graph(C, TF_F64, &t, &p), TF_OK);
    char why[400] = "";
    CHECK(!check_svd_graph_run(C, p, TF_F64, &t, why, sizeof why), "the first client: %s", why);
    CK_STATUS(C, tf_prepared_free(C, p), TF_OK);
    /* A round trip after the free: the daemon has taken the instance back by its answer. */
    uint64_t h0 = 0, m0 = 0, h1 = 0, m1 = 0;
    tf_tensor probe = upload_z(TF_F64, 1, (int64_t[]){1}, (zc[]){1});
    got pg = fetch(probe);
    got_free(&pg);
    graph_cache_counts(&h0, &m0);
    CK_CHILD_OK(th_spawn(child_svd_graph, NULL), "the second client");
    graph_cache_counts(&h1, &m1);
    CHECK(h1 == h0 + 1 && m1 == m0, "the second client's prepare: hits %llu -> %llu, misses "
          "%llu -> %llu; expected the idle instance", (unsigned long long)h0,
          (unsigned long long)h1, (unsigned long long)m0, (unsigned long long)m1);
    stop();
}
END_TEST

/*
 * Recording refuses what the daemon would, typed, at the call, and records
 * nothing: a split that does not fit, truncation options that do not fit,
 * mixed dtypes in solve. (The daemon's own refusals, with the node's
 * failed index, are test-linalg-raw's.)
 */
START_TEST(test_graph_record_refusals) {
    start();
    WHAT("refusals while recording");
    tf_graph *g;
    CK_STATUS(C, tf_graph_new(C, &g), TF_OK);
    tf_tensor a, b32, t4, out[4];
    CK_STATUS(C, tf_graph_input(g, TF_F64, 2, (int64_t[]){3, 3}, &a), TF_OK);
    CK_STATUS(C, tf_graph_input(g, TF_F32, 2, (int64_t[]){3, 2}, &b32), TF_OK);
    CK_STATUS(C, tf_graph_input(g, TF_F64, 4, (int64_t[]){2, 3, 2, 2}, &t4), TF_OK);
    tf_view *v = tf_graph_view(g);
    const tf_split too_many = {NULL, 3, 2};
    CK_STATUS(C, tf_view_svd(v, t4, &too_many, 0, &out[0], &out[1], &out[2]), TF_ERR_AXIS);
    static const int not_perm[4] = {0, 0, 1, 2};
    const tf_split bad_perm = {not_perm, 0, 2};
    CK_STATUS(C, tf_view_qr(v, t4, &bad_perm, TF_QR_REDUCED, &out[0], &out[1]), TF_ERR_AXIS);
    tf_truncation t = {.max_rank = 1, .min_rank = 2};
    CK_STATUS(C, tf_view_svd_truncated(v, a, NULL, &t, &out[0], &out[1], &out[2], &out[3]),
              TF_ERR_INVALID_ARGUMENT);
    t = (tf_truncation){.cutoff = -1};
    CK_STATUS(C, tf_view_eigh_truncated(v, a, NULL, 0, &t, &out[0], &out[1], &out[2]),
              TF_ERR_INVALID_ARGUMENT);
    t = (tf_truncation){.absorb = TF_ABSORB_LEFT};
    CK_STATUS(C, tf_view_svd_truncated(v, a, NULL, &t, NULL, &out[1], NULL, &out[3]),
              TF_ERR_INVALID_ARGUMENT);
    CK_STATUS(C, tf_view_solve(v, a, b32, &out[0]), TF_ERR_DTYPE);
    CHECK(tf_graph_node_count(g) == 0, "refused calls recorded %d nodes", tf_graph_node_count(g));
    /* A good node still records, and the graph prepares. */
    CK_STATUS(C, tf_view_inv(v, a, &out[0]), TF_OK);
    CK_STATUS(C, tf_graph_output(g, out[0]), TF_OK);
    tf_prepared p = 0;
    CK_STATUS(C, tf_prepare(C, g, &p), TF_OK);
    tf_graph_free(g);
    CK_STATUS(C, tf_prepared_free(C, p), TF_OK);
    stop();
}
END_TEST

static Suite *linalg_suite(void) {
    Suite *s = suite_create("linalg");
    TCase *tc = tcase_create("linalg");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_svd);
    tcase_add_test(tc, test_qr);
    tcase_add_test(tc, test_eigh);
    tcase_add_test(tc, test_cholesky_solve_inv_det);
    tcase_add_test(tc, test_det_singular);
    tcase_add_test(tc, test_tensor_form);
    tcase_add_test(tc, test_vector_norm);
    tcase_add_test(tc, test_matrix_norm);
    tcase_add_test(tc, test_trace_diagonal_slice);
    tcase_add_test(tc, test_svd_truncated);
    tcase_add_test(tc, test_eigh_truncated);
    tcase_add_test(tc, test_numeric_failures);
    tcase_add_test(tc, test_refusals_at_the_call);
    tcase_add_test(tc, test_dmrg_loop_host_waits);
    tcase_add_test(tc, test_two_processes);
    suite_add_tcase(s, tc);
    /* Prepared graphs holding linear algebra: CASE=linalg-graph runs them alone. */
    TCase *graphs = tcase_create("linalg-graph");
    tcase_set_timeout(graphs, 600);
    tcase_add_test(graphs, test_graph_svd_contract);
    tcase_add_test(graphs, test_graph_qr_solve);
    tcase_add_test(graphs, test_graph_failing_cholesky);
    tcase_add_test(graphs, test_graph_cache_second_client);
    tcase_add_test(graphs, test_graph_record_refusals);
    suite_add_tcase(s, graphs);
    return s;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    th_seed();
    SRunner *sr = srunner_create(linalg_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
