/*
 * Unit tests of the CPU backend's linear algebra (cpu/linalg.c) and slice
 * kernel (cpu/layout.c).
 *
 * Each test drives the backend as the executor does: tfd_backend_run_linalg
 * with a tfd_linalg_op whose descriptor and output metadata come from the
 * shared rules (tf__infer_linalg), on outputs poisoned with NaN bytes. Inputs
 * are fresh random numbers of magnitude [0.5, 2) (never zero) from a
 * generator seeded by the clock, printed at start and in failures
 * (TFCK_SEED=<n> replays a run); matrices with a known spectrum are
 * Q1 diag(s) Q2^H with random unitary Q from LAPACK's QR of random matrices.
 *
 * Results are checked by what they must satisfy, in long double (complex)
 * arithmetic from the very values uploaded: reconstruction, orthogonality,
 * A V = V W, L L^H = A, A X = B, A inv(A) = I, the gauges, determinants
 * against an elimination written here, norms, traces and diagonals against
 * loops. Bounds are C * eps * (the largest dimension) relative to the
 * matrix's norm, eps of the dtype's precision. The truncation rule is
 * checked at each boundary: the boundaries are set from the singular values
 * the backend itself returns, so "equal to the cutoff" is exact.
 */
#include <check.h>
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lapack.h>

#include "common/linalg.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"

typedef long double complex lcx;

/* The slack of every bound, in units of eps times the largest dimension. */
#define C_TOL 64.0L

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* ---- random numbers: reproducible from one printed seed ---- */

static uint64_t g_seed;
static uint64_t rng_state;

static void rng_reset(void) {
    rng_state = g_seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (rng_state == 0) rng_state = 1;
}

/* xorshift64*: tiny, fast and good enough to make test data. */
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* A value of magnitude [0.5, 2) and random sign: never zero. */
static double rng_value(void) {
    double v = 0.5 + 1.5 * (double)(rng_next() >> 11) * 0x1.0p-53;
    return (rng_next() & 1) ? -v : v;
}

static int is_cx(tf_dtype d) { return d == TF_C64 || d == TF_C128; }

static long double eps_of(tf_dtype d) {
    return (d == TF_F32 || d == TF_C64) ? (long double)FLT_EPSILON : (long double)DBL_EPSILON;
}

/* A random entry of the dtype's kind (complex: both parts nonzero). */
static lcx rng_entry(tf_dtype dt) {
    return is_cx(dt) ? CMPLXL(rng_value(), rng_value()) : (lcx)rng_value();
}

/* ---- the backend under test and what a test allocated from it ---- */

#define MAX_ALLOCS 16384

static tfd_backend be;
static void *stream;
static char msg[512];
static void *dev_allocs[MAX_ALLOCS], *host_allocs[MAX_ALLOCS];
static size_t dev_bytes[MAX_ALLOCS];
static int n_dev_allocs, n_host_allocs;

static void setup(void) {
    memset(&be, 0, sizeof be);
    be.vt = &tfd_cpu_backend;
    msg[0] = '\0';
    tf_status st = be.vt->open(&be, 0, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "open: %s %s", tf_status_name(st), msg);
    st = be.vt->stream_create(&be, 0, &stream);
    ck_assert_msg(st == TF_OK, "stream_create: %s", tf_status_name(st));
    n_dev_allocs = n_host_allocs = 0;
    rng_reset();
}

/* Frees everything, so the sanitizer's leak check only ever reports the backend's own leaks. */
static void teardown(void) {
    for (int i = 0; i < n_dev_allocs; i++) be.vt->free(&be, stream, dev_allocs[i], dev_bytes[i]);
    for (int i = 0; i < n_host_allocs; i++) free(host_allocs[i]);
    n_dev_allocs = n_host_allocs = 0;
    be.vt->stream_destroy(&be, stream);
    be.vt->close(&be);
}

static void *host_alloc(size_t bytes) {
    ck_assert_int_lt(n_host_allocs, MAX_ALLOCS);
    void *p = calloc(1, bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    host_allocs[n_host_allocs++] = p;
    return p;
}

static lcx *mat_new(int64_t count) { return host_alloc((size_t)count * sizeof(lcx)); }

static lcx host_get(const void *p, tf_dtype dt, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return CMPLXL(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    case TF_C128: return CMPLXL(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    }
    return 0;
}

static void host_set(void *p, tf_dtype dt, int64_t i, lcx v) {
    switch (dt) {
    case TF_F32: ((float *)p)[i] = (float)creall(v); break;
    case TF_F64: ((double *)p)[i] = (double)creall(v); break;
    case TF_C64:
        ((float *)p)[2 * i] = (float)creall(v);
        ((float *)p)[2 * i + 1] = (float)cimagl(v);
        break;
    case TF_C128:
        ((double *)p)[2 * i] = (double)creall(v);
        ((double *)p)[2 * i + 1] = (double)cimagl(v);
        break;
    }
}

static size_t bytes_of(const tfd_tensor_view *v) {
    return (size_t)v->numel * tf_dtype_size(v->dtype);
}

static tfd_tensor_view dev_tensor(tf_dtype dt, int rank, const int64_t *shape) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    v.numel = 1;
    for (int i = 0; i < rank; i++) v.numel *= v.shape[i] = shape[i];
    ck_assert_int_lt(n_dev_allocs, MAX_ALLOCS);
    tf_status st = be.vt->alloc(&be, stream, bytes_of(&v), &v.data);
    ck_assert_msg(st == TF_OK, "alloc %zu bytes: %s", bytes_of(&v), tf_status_name(st));
    dev_bytes[n_dev_allocs] = bytes_of(&v);
    dev_allocs[n_dev_allocs++] = v.data;
    return v;
}

/* A device tensor of the given shape holding vals rounded to dt; vals become the rounded values. */
static tfd_tensor_view upload_vals(tf_dtype dt, int rank, const int64_t *shape, lcx *vals) {
    tfd_tensor_view v = dev_tensor(dt, rank, shape);
    void *h = host_alloc(bytes_of(&v));
    for (int64_t i = 0; i < v.numel; i++) {
        host_set(h, dt, i, vals[i]);
        vals[i] = host_get(h, dt, i);
    }
    ck_assert_int_eq(be.vt->copy_to_device(&be, stream, v.data, h, bytes_of(&v)), TF_OK);
    return v;
}

/* A batch of b matrices m x n as a tensor [b, m, n], or [m, n] when b is 0 (one matrix). */
static tfd_tensor_view upload_mats(tf_dtype dt, int64_t b, int64_t m, int64_t n, lcx *vals) {
    const int64_t s3[3] = {b, m, n}, s2[2] = {m, n};
    return b ? upload_vals(dt, 3, s3, vals) : upload_vals(dt, 2, s2, vals);
}

/* The values of a device tensor, widened. */
static lcx *fetch(const tfd_tensor_view *v) {
    void *h = host_alloc(bytes_of(v));
    ck_assert_int_eq(be.vt->copy_to_host(&be, stream, h, v->data, bytes_of(v)), TF_OK);
    lcx *out = mat_new(v->numel);
    for (int64_t i = 0; i < v->numel; i++) out[i] = host_get(h, v->dtype, i);
    return out;
}

/* The matrix form's descriptor of a batch (b = 0: a single matrix, no batch axis). */
static tf__linalg mat_desc(int64_t b) {
    tf__linalg d;
    memset(&d, 0, sizeof d);
    d.n_batch = b ? 1 : 0;
    d.n_rows = 1;
    return d;
}

/* An operation as the daemon builds it: sizes and outputs from the rules, outputs poisoned. */
static tfd_linalg_op make_la(tf__op_kind kind, const tf__linalg *desc, const tfd_tensor_view *a,
                             const tfd_tensor_view *b) {
    tfd_linalg_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    op.desc = *desc;
    op.n_inputs = b ? 2 : 1;
    op.in[0] = *a;
    if (b) op.in[1] = *b;
    tf__meta in[2], out[TF__LINALG_MAX_OUTPUTS];
    memset(in, 0, sizeof in);
    for (int i = 0; i < op.n_inputs; i++) {
        in[i].dtype = op.in[i].dtype;
        in[i].rank = op.in[i].rank;
        for (int d = 0; d < op.in[i].rank; d++) in[i].shape[d] = op.in[i].shape[d];
    }
    char why[256] = "";
    tf_status st = tf__infer_linalg(kind, &op.desc, in, op.n_inputs, out, why, sizeof why);
    ck_assert_msg(st == TF_OK, "rules refused %s: %s", tf__op_name(kind), why);
    op.n_outputs = op.desc.n_outputs;
    for (int i = 0; i < op.n_outputs; i++) {
        op.out[i] = dev_tensor(out[i].dtype, out[i].rank, out[i].shape);
        void *poison = host_alloc(bytes_of(&op.out[i]));
        memset(poison, 0xFF, bytes_of(&op.out[i])); /* NaN in every dtype */
        ck_assert_int_eq(be.vt->copy_to_device(&be, stream, op.out[i].data, poison,
                                                bytes_of(&op.out[i])), TF_OK);
    }
    return op;
}

static tf_status run_la(const tfd_linalg_op *op) {
    msg[0] = '\0';
    return tfd_backend_run_linalg(&be, stream, op, msg, sizeof msg);
}

static void run_la_ok(const tfd_linalg_op *op, const char *what) {
    tf_status st = run_la(op);
    ck_assert_msg(st == TF_OK, "%s (%s): %s: %s (seed %llu)", what,
                  tf_dtype_name(op->in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
}

/* Runs an operation that must fail with `want`, its message holding `text`. */
static void run_la_fails(const tfd_linalg_op *op, tf_status want, const char *text) {
    tf_status st = run_la(op);
    ck_assert_msg(st == want, "%s (%s): got %s (%s), want %s (seed %llu)", tf__op_name(op->kind),
                  tf_dtype_name(op->in[0].dtype), tf_status_name(st), msg, tf_status_name(want),
                  (unsigned long long)g_seed);
    ck_assert_msg(strstr(msg, text) != NULL, "%s: message '%s' lacks '%s'", tf__op_name(op->kind),
                  msg, text);
}

/* ---- long double linear algebra for the checks ---- */

/* c (m x n) = a (m x k) b (k x n), row-major. */
static void ld_mul(const lcx *a, const lcx *b, lcx *c, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            lcx s = 0;
            for (int64_t l = 0; l < k; l++) s += a[i * k + l] * b[l * n + j];
            c[i * n + j] = s;
        }
}

/* out (cols x rows) = a^H. */
static lcx *ld_adj(const lcx *a, int64_t rows, int64_t cols) {
    lcx *out = mat_new(rows * cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) out[j * rows + i] = conjl(a[i * cols + j]);
    return out;
}

static long double ld_fro(const lcx *a, int64_t count) {
    long double s = 0;
    for (int64_t i = 0; i < count; i++) s += creall(a[i] * conjl(a[i]));
    return sqrtl(s);
}

static long double ld_dist(const lcx *a, const lcx *b, int64_t count) {
    long double s = 0;
    for (int64_t i = 0; i < count; i++) {
        const lcx d = a[i] - b[i];
        s += creall(d * conjl(d));
    }
    return sqrtl(s);
}

/* The columns cols of q (rows x cols, row-major) are orthonormal: max |Q^H Q - I|. */
static void check_orthonormal(const char *what, tf_dtype dt, const lcx *q, int64_t rows,
                              int64_t cols) {
    long double worst = 0;
    for (int64_t a = 0; a < cols; a++)
        for (int64_t b = 0; b < cols; b++) {
            lcx s = 0;
            for (int64_t i = 0; i < rows; i++) s += conjl(q[i * cols + a]) * q[i * cols + b];
            const long double e = cabsl(s - (a == b ? 1 : 0));
            if (e > worst) worst = e;
        }
    const long double bound = C_TOL * eps_of(dt) * (long double)(rows > cols ? rows : cols);
    ck_assert_msg(worst <= bound, "%s (%s): not orthonormal, max |Q^H Q - I| %.3Lg > %.3Lg (seed %llu)",
                  what, tf_dtype_name(dt), worst, bound, (unsigned long long)g_seed);
}

/* ||got - want|| <= C eps dim ||scale||: the relative error of a matrix result. */
static void check_rel(const char *what, tf_dtype dt, long double err, long double scale,
                      int64_t dim) {
    const long double bound = C_TOL * eps_of(dt) * (long double)dim * scale;
    ck_assert_msg(err <= bound, "%s (%s): error %.3Lg > %.3Lg (scale %.3Lg, seed %llu)", what,
                  tf_dtype_name(dt), err, bound, scale, (unsigned long long)g_seed);
}

/*
 * The gauge: the largest entry in magnitude of a vector (n entries, stride
 * apart) is real and positive. For a real dtype the gauge only flips signs,
 * which keeps magnitudes exact, so the first of exactly equal largest
 * entries must be the positive one; a complex phase rounds magnitudes, so
 * there entries within rounding of the largest count as ties.
 */
static void check_gauge(const char *what, tf_dtype dt, const lcx *x, int64_t n, int64_t stride) {
    long double big = 0;
    int64_t first = 0;
    for (int64_t i = 0; i < n; i++)
        if (cabsl(x[i * stride]) > big) {
            big = cabsl(x[i * stride]);
            first = i;
        }
    if (!is_cx(dt)) {
        ck_assert_msg(creall(x[first * stride]) > 0, "%s (%s): the first largest entry (%lld) is "
                      "negative (seed %llu)", what, tf_dtype_name(dt), (long long)first,
                      (unsigned long long)g_seed);
        return;
    }
    int ok = 0;
    for (int64_t i = 0; i < n; i++) {
        const lcx v = x[i * stride];
        if (cabsl(v) >= big * (1 - 16 * eps_of(dt)) && cimagl(v) == 0 && creall(v) > 0) ok = 1;
    }
    ck_assert_msg(ok, "%s (%s): the largest entry (|%.6Lg|) is not real positive (seed %llu)", what,
                  tf_dtype_name(dt), big, (unsigned long long)g_seed);
}

/*
 * A random n x n unitary matrix (orthogonal for a real dtype), row-major:
 * the Q of LAPACK's QR of a random matrix, in double precision.
 */
static lcx *random_unitary(tf_dtype dt, int64_t n) {
    lapack_int N = (lapack_int)n, lwork = 64 * N + 64, info = 0;
    lcx *q = mat_new(n * n);
    if (is_cx(dt)) {
        double complex *a = host_alloc(sizeof(double complex) * (size_t)(n * n));
        double complex *tau = host_alloc(sizeof(double complex) * (size_t)n);
        double complex *work = host_alloc(sizeof(double complex) * (size_t)lwork);
        for (int64_t i = 0; i < n * n; i++) a[i] = CMPLX(rng_value(), rng_value());
        LAPACK_zgeqrf(&N, &N, a, &N, tau, work, &lwork, &info);
        ck_assert_int_eq(info, 0);
        LAPACK_zungqr(&N, &N, &N, a, &N, tau, work, &lwork, &info);
        ck_assert_int_eq(info, 0);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) q[i * n + j] = a[i + j * n];
    } else {
        double *a = host_alloc(sizeof(double) * (size_t)(n * n));
        double *tau = host_alloc(sizeof(double) * (size_t)n);
        double *work = host_alloc(sizeof(double) * (size_t)lwork);
        for (int64_t i = 0; i < n * n; i++) a[i] = rng_value();
        LAPACK_dgeqrf(&N, &N, a, &N, tau, work, &lwork, &info);
        ck_assert_int_eq(info, 0);
        LAPACK_dorgqr(&N, &N, &N, a, &N, tau, work, &lwork, &info);
        ck_assert_int_eq(info, 0);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) q[i * n + j] = a[i + j * n];
    }
    return q;
}

/* A matrix of known spectrum: the sum over j < r of s_j q1[:, j] q2[:, j]^H (m x n). */
typedef struct spectral {
    lcx *q1, *q2; /* m x m, n x n */
    int64_t m, n;
} spectral;

static spectral spectral_new(tf_dtype dt, int64_t m, int64_t n) {
    spectral sp = {random_unitary(dt, m), random_unitary(dt, n), m, n};
    return sp;
}

static void spectral_matrix(const spectral *sp, const double *s, int64_t r, lcx *out) {
    for (int64_t i = 0; i < sp->m; i++)
        for (int64_t j = 0; j < sp->n; j++) {
            lcx v = 0;
            for (int64_t l = 0; l < r; l++)
                v += sp->q1[i * sp->m + l] * s[l] * conjl(sp->q2[j * sp->n + l]);
            out[i * sp->n + j] = v;
        }
}

/* ---- SVD ---- */

/* The checks of one matrix's SVD: U m x uc, S k, Vh vr x n (reduced or full). */
static void check_svd(const char *what, tf_dtype dt, const lcx *a, int64_t m, int64_t n,
                      const lcx *U, int64_t uc, const lcx *S, const lcx *Vh, int64_t vr) {
    const int64_t k = m < n ? m : n, dim = m > n ? m : n;
    for (int64_t j = 0; j < k; j++) {
        ck_assert_msg(cimagl(S[j]) == 0 && creall(S[j]) >= 0, "%s: S[%lld] negative", what,
                      (long long)j);
        if (j) ck_assert_msg(creall(S[j]) <= creall(S[j - 1]), "%s: S not descending", what);
    }
    lcx *rec = mat_new(m * n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t jj = 0; jj < n; jj++) {
            lcx v = 0;
            for (int64_t l = 0; l < k; l++) v += U[i * uc + l] * S[l] * Vh[l * n + jj];
            rec[i * n + jj] = v;
        }
    check_rel(what, dt, ld_dist(rec, a, m * n), ld_fro(a, m * n), dim);
    check_orthonormal(what, dt, U, m, uc);
    check_orthonormal(what, dt, ld_adj(Vh, vr, n), n, vr);
    for (int64_t j = 0; j < uc; j++) check_gauge(what, dt, U + j, m, uc);
    for (int64_t j = uc; j < vr; j++) check_gauge(what, dt, Vh + j * n, n, 1);
}

START_TEST(test_svd) {
    const tf_dtype dt = all_dtypes[_i];
    /* the larger ones: the gauge's passes along U's rows over many columns */
    static const int64_t shapes[][2] = {{1, 1}, {4, 4},   {7, 3},   {3, 7},
                                        {1, 5}, {5, 1},   {40, 37}, {37, 40}, {70, 45}, {45, 70}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int64_t b = 0; b <= 3; b += 3) {
            const int64_t m = shapes[si][0], n = shapes[si][1], k = m < n ? m : n;
            const int64_t nb = b ? b : 1;
            lcx *a = mat_new(nb * m * n);
            for (int64_t i = 0; i < nb * m * n; i++) a[i] = rng_entry(dt);
            tfd_tensor_view in = upload_mats(dt, b, m, n, a);
            lcx *s_reduced = NULL;
            for (int mode = 0; mode < 3; mode++) { /* reduced, full, values only */
                tf__linalg d = mat_desc(b);
                d.compute_uv = mode != 2;
                d.full = mode == 1;
                tfd_linalg_op op = make_la(TF__OP_SVD, &d, &in, NULL);
                run_la_ok(&op, "svd");
                char what[96];
                snprintf(what, sizeof what, "svd %lldx%lld b=%lld mode %d", (long long)m,
                         (long long)n, (long long)b, mode);
                if (mode == 2) {
                    ck_assert_int_eq(op.n_outputs, 1);
                    lcx *S = fetch(&op.out[0]);
                    for (int64_t i = 0; i < nb * k; i++)
                        check_rel(what, dt, cabsl(S[i] - s_reduced[i]), creall(s_reduced[i / k * k]),
                                  m > n ? m : n);
                    continue;
                }
                ck_assert_int_eq(op.n_outputs, 3);
                lcx *U = fetch(&op.out[0]), *S = fetch(&op.out[1]), *Vh = fetch(&op.out[2]);
                const int64_t uc = mode == 1 ? m : k, vr = mode == 1 ? n : k;
                for (int64_t i = 0; i < nb; i++)
                    check_svd(what, dt, a + i * m * n, m, n, U + i * m * uc, uc, S + i * k,
                              Vh + i * vr * n, vr);
                if (mode == 0) s_reduced = S;
            }
        }
    }
}
END_TEST

/* A rank-2 matrix and an ill-conditioned one: still a backward-stable SVD, with the right values. */
START_TEST(test_svd_hard) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t m = 6, n = 5, k = 5;
    /* rank deficient: X (6 x 2) Y (2 x 5) */
    lcx *x = mat_new(m * 2), *y = mat_new(2 * n), *a = mat_new(m * n);
    for (int64_t i = 0; i < m * 2; i++) x[i] = rng_entry(dt);
    for (int64_t i = 0; i < 2 * n; i++) y[i] = rng_entry(dt);
    ld_mul(x, y, a, m, 2, n);
    tfd_tensor_view in = upload_mats(dt, 0, m, n, a);
    tf__linalg d = mat_desc(0);
    d.compute_uv = 1;
    tfd_linalg_op op = make_la(TF__OP_SVD, &d, &in, NULL);
    run_la_ok(&op, "svd rank 2");
    lcx *U = fetch(&op.out[0]), *S = fetch(&op.out[1]), *Vh = fetch(&op.out[2]);
    check_svd("svd rank 2", dt, a, m, n, U, k, S, Vh, k);
    for (int64_t j = 2; j < k; j++) check_rel("svd rank 2: zero values", dt, creall(S[j]), creall(S[0]), m);
    /* ill-conditioned: values 1 .. 1e-5 (single) or 1e-12 (double) */
    const double span = eps_of(dt) > 1e-10 ? 1e-5 : 1e-12;
    double s[5];
    for (int j = 0; j < 5; j++) s[j] = pow(span, j / 4.0);
    spectral sp = spectral_new(dt, m, n);
    lcx *c = mat_new(m * n);
    spectral_matrix(&sp, s, k, c);
    tfd_tensor_view in2 = upload_mats(dt, 0, m, n, c);
    tfd_linalg_op op2 = make_la(TF__OP_SVD, &d, &in2, NULL);
    run_la_ok(&op2, "svd ill-conditioned");
    U = fetch(&op2.out[0]);
    S = fetch(&op2.out[1]);
    Vh = fetch(&op2.out[2]);
    check_svd("svd ill-conditioned", dt, c, m, n, U, k, S, Vh, k);
    for (int64_t j = 0; j < k; j++)
        check_rel("svd ill-conditioned: values", dt, fabsl(creall(S[j]) - s[j]), 1, m);
}
END_TEST

/* ---- QR ---- */

START_TEST(test_qr) {
    const tf_dtype dt = all_dtypes[_i];
    /* the larger ones span several tiles of the transposes */
    static const int64_t shapes[][2] = {{1, 1}, {4, 4},   {7, 3},   {3, 7},   {1, 5},
                                        {5, 1}, {40, 37}, {37, 40}, {70, 45}, {45, 70}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t m = shapes[si][0], n = shapes[si][1], k = m < n ? m : n, b = 3;
        lcx *a = mat_new(b * m * n);
        for (int64_t i = 0; i < b * m * n; i++) a[i] = rng_entry(dt);
        tfd_tensor_view in = upload_mats(dt, b, m, n, a);
        lcx *r_reduced = NULL;
        for (int mode = 0; mode < 3; mode++) { /* reduced, complete, R only */
            tf__linalg d = mat_desc(b);
            d.compute_uv = mode != 2;
            d.full = mode == 1;
            tfd_linalg_op op = make_la(TF__OP_QR, &d, &in, NULL);
            run_la_ok(&op, "qr");
            char what[96];
            snprintf(what, sizeof what, "qr %lldx%lld mode %d", (long long)m, (long long)n, mode);
            const int64_t kq = mode == 1 ? m : k;
            lcx *R = fetch(&op.out[mode == 2 ? 0 : 1]);
            for (int64_t i = 0; i < b; i++) {
                const lcx *Ri = R + i * kq * n;
                for (int64_t r = 0; r < kq; r++)
                    for (int64_t c = 0; c < n; c++) {
                        if (c < r) ck_assert_msg(Ri[r * n + c] == 0, "%s: R[%lld][%lld] below the "
                                                 "diagonal is not zero", what, (long long)r, (long long)c);
                        if (c == r) ck_assert_msg(cimagl(Ri[r * n + c]) == 0 && creall(Ri[r * n + c]) >= 0,
                                                  "%s: R's diagonal is not real non-negative", what);
                    }
            }
            if (mode == 2) {
                for (int64_t i = 0; i < b * k * n; i++)
                    check_rel(what, dt, cabsl(R[i] - r_reduced[i]), ld_fro(a + i / (k * n) * m * n, m * n),
                              m > n ? m : n);
                continue;
            }
            lcx *Q = fetch(&op.out[0]), *qr = mat_new(m * n);
            for (int64_t i = 0; i < b; i++) {
                check_orthonormal(what, dt, Q + i * m * kq, m, kq);
                ld_mul(Q + i * m * kq, R + i * kq * n, qr, m, kq, n);
                check_rel(what, dt, ld_dist(qr, a + i * m * n, m * n), ld_fro(a + i * m * n, m * n),
                          m > n ? m : n);
            }
            if (mode == 0) r_reduced = R;
        }
    }
}
END_TEST

/* ---- eigh ---- */

/* A random Hermitian matrix whose unread triangle holds nan (the input) and its completion (h). */
static lcx *hermitian_input(tf_dtype dt, int64_t b, int64_t n, int upper, lcx *h) {
    lcx *in = mat_new(b * n * n);
    for (int64_t x = 0; x < b; x++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j <= i; j++) {
                const lcx v = i == j ? (lcx)rng_value() : rng_entry(dt);
                h[x * n * n + i * n + j] = v;
                h[x * n * n + j * n + i] = conjl(v);
            }
    for (int64_t x = 0; x < b; x++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                const int read = upper ? j >= i : j <= i;
                in[x * n * n + i * n + j] = read ? h[x * n * n + i * n + j] : (lcx)NAN;
            }
    return in;
}

/* The values the device holds, read back into the Hermitian completion (rounding included). */
static void round_hermitian(lcx *h, const lcx *in, int64_t b, int64_t n, int upper) {
    for (int64_t x = 0; x < b; x++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                const int read = upper ? j >= i : j <= i;
                const lcx v = in[x * n * n + (read ? i * n + j : j * n + i)];
                h[x * n * n + i * n + j] = read ? v : conjl(v);
            }
}

/* A V = V diag(W) for the first w columns of V (n x w) with values W; the columns orthonormal and gauged. */
static void check_eigenpairs(const char *what, tf_dtype dt, const lcx *h, int64_t n, const lcx *W,
                             const lcx *V, int64_t w, int64_t kept) {
    lcx *av = mat_new(n * w), *vw = mat_new(n * w);
    ld_mul(h, V, av, n, n, w);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < w; j++) vw[i * w + j] = V[i * w + j] * W[j];
    check_rel(what, dt, ld_dist(av, vw, n * w), ld_fro(h, n * n), n);
    lcx *vk = mat_new(n * kept);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < kept; j++) vk[i * kept + j] = V[i * w + j];
    check_orthonormal(what, dt, vk, n, kept);
    for (int64_t j = 0; j < kept; j++) check_gauge(what, dt, V + j, n, w);
}

START_TEST(test_eigh) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t sizes[] = {1, 4, 6, 37, 70};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int upper = 0; upper <= 1; upper++) {
            const int64_t n = sizes[si], b = 3;
            lcx *h = mat_new(b * n * n);
            lcx *in = hermitian_input(dt, b, n, upper, h);
            tfd_tensor_view t = upload_mats(dt, b, n, n, in);
            round_hermitian(h, in, b, n, upper);
            tf__linalg d = mat_desc(b);
            d.upper = upper;
            d.compute_uv = 1;
            tfd_linalg_op op = make_la(TF__OP_EIGH, &d, &t, NULL);
            run_la_ok(&op, "eigh");
            lcx *W = fetch(&op.out[0]), *V = fetch(&op.out[1]);
            char what[64];
            snprintf(what, sizeof what, "eigh n=%lld upper=%d", (long long)n, upper);
            for (int64_t x = 0; x < b; x++) {
                for (int64_t j = 1; j < n; j++)
                    ck_assert_msg(creall(W[x * n + j]) >= creall(W[x * n + j - 1]), "%s: W not ascending", what);
                check_eigenpairs(what, dt, h + x * n * n, n, W + x * n, V + x * n * n, n, n);
            }
            d.compute_uv = 0;
            tfd_linalg_op op2 = make_la(TF__OP_EIGH, &d, &t, NULL);
            run_la_ok(&op2, "eigh values");
            lcx *W2 = fetch(&op2.out[0]);
            for (int64_t i = 0; i < b * n; i++)
                check_rel("eigh values only", dt, cabsl(W2[i] - W[i]), ld_fro(h + i / n * n * n, n * n), n);
        }
}
END_TEST

/*
 * Exact ties for the gauge: [[2, 1], [1, 2]]'s eigenvectors are (1, 1) and
 * (1, -1) over sqrt 2, whose entries LAPACK makes of equal magnitude; the
 * first of equals is the one made positive.
 */
START_TEST(test_gauge_ties) {
    const tf_dtype dt = all_dtypes[_i];
    lcx h[4] = {2, 1, 1, 2};
    tfd_tensor_view t = upload_mats(dt, 0, 2, 2, h);
    tf__linalg d = mat_desc(0);
    d.compute_uv = 1;
    tfd_linalg_op op = make_la(TF__OP_EIGH, &d, &t, NULL);
    run_la_ok(&op, "eigh of a tie");
    lcx *V = fetch(&op.out[1]);
    for (int j = 0; j < 2; j++) {
        check_gauge("eigh tie", dt, V + j, 2, 2);
        if (cabsl(V[j]) == cabsl(V[2 + j]))
            ck_assert_msg(cimagl(V[j]) == 0 && creall(V[j]) > 0, "eigh tie: column %d's first entry "
                          "is not the positive one", j);
    }
    /* the SVD of [[1, 1], [1, -1]]: U's and Vh's entries all of magnitude 1/sqrt 2 */
    lcx a[4] = {1, 1, 1, -1};
    tfd_tensor_view ta = upload_mats(dt, 0, 2, 2, a);
    tfd_linalg_op sv = make_la(TF__OP_SVD, &d, &ta, NULL);
    run_la_ok(&sv, "svd of a tie");
    lcx *U = fetch(&sv.out[0]);
    for (int j = 0; j < 2; j++) {
        check_gauge("svd tie", dt, U + j, 2, 2);
        if (cabsl(U[j]) == cabsl(U[2 + j]))
            ck_assert_msg(cimagl(U[j]) == 0 && creall(U[j]) > 0, "svd tie: column %d's first entry "
                          "is not the positive one", j);
    }
}
END_TEST

/* ---- cholesky, solve, inv ---- */

/* A Hermitian positive definite X X^H + n I with nan in the triangle not read. */
static lcx *pd_input(tf_dtype dt, int64_t b, int64_t n, int upper, lcx *h) {
    lcx *x = mat_new(n * n);
    for (int64_t e = 0; e < b; e++) {
        for (int64_t i = 0; i < n * n; i++) x[i] = rng_entry(dt);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                lcx s = i == j ? (lcx)n : 0;
                for (int64_t l = 0; l < n; l++) s += x[i * n + l] * conjl(x[j * n + l]);
                h[e * n * n + i * n + j] = i == j ? (lcx)creall(s) : s;
            }
    }
    lcx *in = mat_new(b * n * n);
    for (int64_t i = 0; i < b * n * n; i++) {
        const int64_t r = i / n % n, c = i % n;
        in[i] = (upper ? c >= r : c <= r) ? h[i] : (lcx)NAN;
    }
    return in;
}

START_TEST(test_cholesky) {
    const tf_dtype dt = all_dtypes[_i];
    for (int upper = 0; upper <= 1; upper++)
        for (int64_t n = 1; n <= 5; n += 4) {
            const int64_t b = 3;
            lcx *h = mat_new(b * n * n);
            lcx *in = pd_input(dt, b, n, upper, h);
            tfd_tensor_view t = upload_mats(dt, b, n, n, in);
            round_hermitian(h, in, b, n, upper);
            tf__linalg d = mat_desc(b);
            d.upper = upper;
            tfd_linalg_op op = make_la(TF__OP_CHOLESKY, &d, &t, NULL);
            run_la_ok(&op, "cholesky");
            lcx *L = fetch(&op.out[0]), *p = mat_new(n * n);
            for (int64_t x = 0; x < b; x++) {
                const lcx *Lx = L + x * n * n;
                for (int64_t i = 0; i < n; i++)
                    for (int64_t j = 0; j < n; j++)
                        if (upper ? j < i : j > i)
                            ck_assert_msg(Lx[i * n + j] == 0, "cholesky: the other triangle is not zero");
                /* lower: L L^H; upper: U^H U */
                lcx *adj = ld_adj(Lx, n, n);
                if (upper) ld_mul(adj, Lx, p, n, n, n);
                else ld_mul(Lx, adj, p, n, n, n);
                check_rel("cholesky", dt, ld_dist(p, h + x * n * n, n * n), ld_fro(h + x * n * n, n * n), n);
            }
        }
    /* matrix 1 of 3 indefinite: its 2x2 leading minor is negative */
    const int64_t n = 3, b = 3;
    lcx *h = mat_new(b * n * n);
    lcx *in = pd_input(dt, b, n, 0, h);
    in[1 * n * n + 1 * n + 0] = 100; /* |a10|^2 > a00 a11 */
    tfd_tensor_view t = upload_mats(dt, b, n, n, in);
    tf__linalg d = mat_desc(b);
    tfd_linalg_op op = make_la(TF__OP_CHOLESKY, &d, &t, NULL);
    run_la_fails(&op, TF_ERR_NOT_POSITIVE_DEFINITE, "cholesky: matrix 1 of 3 is not positive "
                 "definite (leading minor 2)");
}
END_TEST

/* Random square matrices plus 2n on the diagonal: well conditioned, so residuals stay near eps. */
static lcx *dominant(tf_dtype dt, int64_t b, int64_t n) {
    lcx *a = mat_new(b * n * n);
    for (int64_t i = 0; i < b * n * n; i++) a[i] = rng_entry(dt) + (i / n % n == i % n ? 2 * n : 0);
    return a;
}

START_TEST(test_solve_inv) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3;
    static const int64_t sizes[][2] = {{1, 0}, {1, 3}, {5, 0}, {5, 3}, {40, 37}}; /* n, nrhs */
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int64_t n = sizes[si][0], nrhs = sizes[si][1]; /* nrhs 0: a vector B [b, n] */
        const int64_t cols = nrhs ? nrhs : 1;
        lcx *a = dominant(dt, b, n), *bb = mat_new(b * n * cols);
        for (int64_t i = 0; i < b * n * cols; i++) bb[i] = rng_entry(dt);
        tfd_tensor_view ta = upload_mats(dt, b, n, n, a);
        const int64_t vshape[2] = {b, n};
        tfd_tensor_view tb = nrhs ? upload_mats(dt, b, n, nrhs, bb) : upload_vals(dt, 2, vshape, bb);
        tf__linalg d = mat_desc(b);
        tfd_linalg_op op = make_la(TF__OP_SOLVE, &d, &ta, &tb);
        ck_assert_int_eq(op.desc.nrhs, cols);
        ck_assert_int_eq(op.out[0].rank, tb.rank);
        run_la_ok(&op, "solve");
        lcx *X = fetch(&op.out[0]), *ax = mat_new(n * cols);
        for (int64_t x = 0; x < b; x++) {
            ld_mul(a + x * n * n, X + x * n * cols, ax, n, n, cols);
            check_rel("solve: A X = B", dt, ld_dist(ax, bb + x * n * cols, n * cols),
                      ld_fro(a + x * n * n, n * n) * ld_fro(X + x * n * cols, n * cols), n);
        }
    }
    for (int64_t n = 1; n <= 5; n += 2) {
        lcx *a = dominant(dt, b, n);
        tfd_tensor_view ta = upload_mats(dt, b, n, n, a);
        tf__linalg d = mat_desc(b);
        tfd_linalg_op op = make_la(TF__OP_INV, &d, &ta, NULL);
        run_la_ok(&op, "inv");
        lcx *X = fetch(&op.out[0]), *p = mat_new(n * n);
        for (int64_t x = 0; x < b; x++) {
            ld_mul(a + x * n * n, X + x * n * n, p, n, n, n);
            for (int64_t i = 0; i < n; i++) p[i * n + i] -= 1;
            check_rel("inv: A inv(A) = I", dt, ld_fro(p, n * n),
                      ld_fro(a + x * n * n, n * n) * ld_fro(X + x * n * n, n * n), n);
        }
    }
    /* matrix 2 of 3 with a zero column: an exact zero pivot */
    const int64_t n = 4;
    lcx *a = dominant(dt, b, n), *bb = mat_new(b * n);
    for (int64_t i = 0; i < n; i++) a[2 * n * n + i * n + 1] = 0;
    for (int64_t i = 0; i < b * n; i++) bb[i] = rng_entry(dt);
    tfd_tensor_view ta = upload_mats(dt, b, n, n, a);
    const int64_t vshape[2] = {b, n};
    tfd_tensor_view tb = upload_vals(dt, 2, vshape, bb);
    tf__linalg d = mat_desc(b);
    tfd_linalg_op op = make_la(TF__OP_SOLVE, &d, &ta, &tb);
    run_la_fails(&op, TF_ERR_SINGULAR, "solve: matrix 2 of 3 is singular");
    tfd_linalg_op op2 = make_la(TF__OP_INV, &d, &ta, NULL);
    run_la_fails(&op2, TF_ERR_SINGULAR, "inv: matrix 2 of 3 is singular");
}
END_TEST

/* ---- det, slogdet ---- */

/* det by Gaussian elimination with partial pivoting, in long double complex. */
static lcx ref_det(const lcx *a, int64_t n) {
    lcx *w = mat_new(n * n);
    memcpy(w, a, sizeof(lcx) * (size_t)(n * n));
    lcx det = 1;
    for (int64_t c = 0; c < n; c++) {
        int64_t p = c;
        for (int64_t r = c + 1; r < n; r++)
            if (cabsl(w[r * n + c]) > cabsl(w[p * n + c])) p = r;
        if (w[p * n + c] == 0) return 0;
        if (p != c) {
            for (int64_t j = 0; j < n; j++) {
                const lcx t = w[c * n + j];
                w[c * n + j] = w[p * n + j];
                w[p * n + j] = t;
            }
            det = -det;
        }
        det *= w[c * n + c];
        for (int64_t r = c + 1; r < n; r++) {
            const lcx f = w[r * n + c] / w[c * n + c];
            for (int64_t j = c; j < n; j++) w[r * n + j] -= f * w[c * n + j];
        }
    }
    return det;
}

/* Hadamard's bound on |det|: the product of the rows' norms, the scale of det's rounding error. */
static long double hadamard(const lcx *a, int64_t n) {
    long double p = 1;
    for (int64_t i = 0; i < n; i++) p *= ld_fro(a + i * n, n);
    return p;
}

START_TEST(test_det) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3;
    static const int64_t sizes[] = {1, 2, 5};
    for (int si = 0; si < 3; si++) {
        const int64_t n = sizes[si];
        lcx *a = mat_new(b * n * n);
        for (int64_t i = 0; i < b * n * n; i++) a[i] = rng_entry(dt);
        if (n > 1) /* matrix 1 singular: a zero column */
            for (int64_t i = 0; i < n; i++) a[n * n + i * n] = 0;
        tfd_tensor_view t = upload_mats(dt, b, n, n, a);
        tf__linalg d = mat_desc(b);
        tfd_linalg_op op = make_la(TF__OP_DET, &d, &t, NULL);
        run_la_ok(&op, "det");
        tfd_linalg_op op2 = make_la(TF__OP_SLOGDET, &d, &t, NULL);
        run_la_ok(&op2, "slogdet");
        ck_assert_int_eq(op2.out[1].dtype, is_cx(dt) ? (dt == TF_C64 ? TF_F32 : TF_F64) : dt);
        lcx *D = fetch(&op.out[0]), *sign = fetch(&op2.out[0]), *logabs = fetch(&op2.out[1]);
        for (int64_t x = 0; x < b; x++) {
            const lcx want = ref_det(a + x * n * n, n);
            const long double scale = hadamard(a + x * n * n, n);
            check_rel("det", dt, cabsl(D[x] - want), scale, n);
            if (want == 0) {
                ck_assert_msg(D[x] == 0 && sign[x] == 0 && isinf(creall(logabs[x])) &&
                              creall(logabs[x]) < 0, "slogdet of a singular matrix: sign 0, -inf");
                continue;
            }
            check_rel("slogdet: |sign| = 1", dt, fabsl(cabsl(sign[x]) - 1), 1, n);
            if (!is_cx(dt)) ck_assert_msg(sign[x] == 1 || sign[x] == -1, "slogdet: real sign not +-1");
            const lcx got = sign[x] * expl(creall(logabs[x]));
            check_rel("slogdet vs det", dt, cabsl(got - want), scale, n);
        }
    }
}
END_TEST

/* ---- norms ---- */

/* The vector p-norm by its definition, in long double. */
static long double ref_vector_norm(const lcx *x, int64_t n, double p) {
    long double acc = p == -INFINITY ? INFINITY : 0;
    for (int64_t i = 0; i < n; i++) {
        const long double a = cabsl(x[i]);
        if (p == INFINITY) acc = a > acc ? a : acc;
        else if (p == -INFINITY) acc = a < acc ? a : acc;
        else if (p == 0) acc += a != 0;
        else acc += powl(a, p);
    }
    return isinf(p) || p == 0 ? acc : powl(acc, 1 / (long double)p);
}

/* The induced 1 / inf norms by their definition: largest (p > 0) or smallest column (1) or row (inf) sum. */
static long double ref_sum_norm(const lcx *a, int64_t m, int64_t n, double p) {
    const int cols = fabs(p) == 1;
    long double best = p > 0 ? 0 : INFINITY;
    for (int64_t o = 0; o < (cols ? n : m); o++) {
        long double s = 0;
        for (int64_t i = 0; i < (cols ? m : n); i++) s += cabsl(a[cols ? i * n + o : o * n + i]);
        if (p > 0 ? s > best : s < best) best = s;
    }
    return best;
}

/* A norm of a [b, m, n] tensor over the matrix axes (or all of a vector's), fetched. */
static lcx *norm_of(const tfd_tensor_view *t, int64_t b, tf__norm_kind kind, double p) {
    tf__linalg d = mat_desc(b);
    d.norm_kind = kind;
    d.norm_p = p;
    tfd_linalg_op op = make_la(TF__OP_NORM, &d, t, NULL);
    run_la_ok(&op, "norm");
    return fetch(&op.out[0]);
}

START_TEST(test_norm) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3, m = 4, n = 5, k = 4;
    lcx *a = mat_new(b * m * n);
    for (int64_t i = 0; i < b * m * n; i++) a[i] = rng_entry(dt);
    a[7] = 0; /* one zero for the p = 0 count and the -inf norm */
    tfd_tensor_view t = upload_mats(dt, b, m, n, a);
    static const double ps[] = {2, 1, INFINITY, -INFINITY, 0, 3, 0.5, -1.5};
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++) {
        lcx *v = norm_of(&t, b, TF__NORM_VECTOR, ps[pi]);
        for (int64_t x = 0; x < b; x++) {
            const long double want = ref_vector_norm(a + x * m * n, m * n, ps[pi]);
            check_rel("vector norm", dt, fabsl(creall(v[x]) - want), want, m * n);
        }
    }
    lcx *fro = norm_of(&t, b, TF__NORM_FRO, 0);
    for (int64_t x = 0; x < b; x++) {
        const long double want = ld_fro(a + x * m * n, m * n);
        check_rel("fro norm", dt, fabsl(creall(fro[x]) - want), want, m * n);
    }
    static const double mps[] = {1, -1, INFINITY, -INFINITY};
    for (int pi = 0; pi < 4; pi++) {
        lcx *v = norm_of(&t, b, TF__NORM_MATRIX, mps[pi]);
        for (int64_t x = 0; x < b; x++) {
            const long double want = ref_sum_norm(a + x * m * n, m, n, mps[pi]);
            check_rel("matrix 1/inf norm", dt, fabsl(creall(v[x]) - want), want, m * n);
        }
    }
    /* the singular-value norms against the SVD's values */
    tf__linalg d = mat_desc(b);
    tfd_linalg_op sv = make_la(TF__OP_SVD, &d, &t, NULL);
    run_la_ok(&sv, "svd values");
    lcx *S = fetch(&sv.out[0]);
    lcx *nuc = norm_of(&t, b, TF__NORM_NUC, 0), *two = norm_of(&t, b, TF__NORM_MATRIX, 2);
    lcx *mtwo = norm_of(&t, b, TF__NORM_MATRIX, -2);
    for (int64_t x = 0; x < b; x++) {
        long double sum = 0;
        for (int64_t j = 0; j < k; j++) sum += creall(S[x * k + j]);
        check_rel("nuc norm", dt, fabsl(creall(nuc[x]) - sum), sum, m);
        check_rel("2 norm", dt, fabsl(creall(two[x]) - creall(S[x * k])), creall(S[x * k]), m);
        check_rel("-2 norm", dt, fabsl(creall(mtwo[x]) - creall(S[x * k + k - 1])), creall(S[x * k]), m);
        ck_assert_msg(creall(two[x]) <= creall(fro[x]) * (1 + 8 * eps_of(dt)), "2 norm above fro");
    }
    /* large and small entries: the 2-norm is scaled, never overflowing or underflowing */
    const long double scales[2] = {eps_of(dt) > 1e-10 ? 1e30L : 1e200L, eps_of(dt) > 1e-10 ? 1e-30L : 1e-200L};
    for (int si = 0; si < 2; si++) {
        lcx *big = mat_new(b * m * n);
        for (int64_t i = 0; i < b * m * n; i++) big[i] = rng_entry(dt) * scales[si];
        tfd_tensor_view tb = upload_mats(dt, b, m, n, big);
        lcx *v = norm_of(&tb, b, TF__NORM_VECTOR, 2), *f = norm_of(&tb, b, TF__NORM_FRO, 0);
        for (int64_t x = 0; x < b; x++) {
            const long double want = ld_fro(big + x * m * n, m * n);
            check_rel("scaled 2-norm", dt, fabsl(creall(v[x]) - want), want, m * n);
            check_rel("scaled fro norm", dt, fabsl(creall(f[x]) - want), want, m * n);
        }
    }
    /* nan propagates through every norm, without an error */
    lcx *nan = mat_new(b * m * n);
    for (int64_t i = 0; i < b * m * n; i++) nan[i] = rng_entry(dt);
    nan[1 * m * n + 6] = NAN;
    tfd_tensor_view tn = upload_mats(dt, b, m, n, nan);
    lcx *outs[16];
    int no = 0;
    for (size_t pi = 0; pi < sizeof ps / sizeof ps[0]; pi++)
        outs[no++] = norm_of(&tn, b, TF__NORM_VECTOR, ps[pi]);
    outs[no++] = norm_of(&tn, b, TF__NORM_FRO, 0);
    outs[no++] = norm_of(&tn, b, TF__NORM_NUC, 0);
    static const double all_mps[] = {1, -1, 2, -2, INFINITY, -INFINITY};
    for (int pi = 0; pi < 6; pi++) outs[no++] = norm_of(&tn, b, TF__NORM_MATRIX, all_mps[pi]);
    for (int i = 0; i < no; i++) {
        ck_assert_msg(isnan(creall(outs[i][1])), "norm %d of a matrix with nan is %Lg", i, creall(outs[i][1]));
        ck_assert_msg(!isnan(creall(outs[i][0])) && !isnan(creall(outs[i][2])),
                      "norm %d: nan reached another matrix", i);
    }
}
END_TEST

/* ---- trace, diagonal ---- */

START_TEST(test_trace_diagonal) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3, m = 4, n = 5;
    lcx *a = mat_new(b * m * n);
    for (int64_t i = 0; i < b * m * n; i++) a[i] = rng_entry(dt);
    tfd_tensor_view t = upload_mats(dt, b, m, n, a);
    for (int64_t off = -(m - 1); off <= n - 1; off++) {
        tf__linalg d = mat_desc(b);
        d.offset = off;
        tfd_linalg_op tr = make_la(TF__OP_TRACE, &d, &t, NULL);
        run_la_ok(&tr, "trace");
        tfd_linalg_op dg = make_la(TF__OP_DIAGONAL, &d, &t, NULL);
        run_la_ok(&dg, "diagonal");
        lcx *T = fetch(&tr.out[0]), *D = fetch(&dg.out[0]);
        const int64_t i0 = off < 0 ? -off : 0, j0 = off > 0 ? off : 0;
        int64_t len = 0;
        while (i0 + len < m && j0 + len < n) len++;
        ck_assert_int_eq(dg.out[0].shape[1], len);
        for (int64_t x = 0; x < b; x++) {
            lcx sum = 0;
            long double mag = 0;
            for (int64_t i = 0; i < len; i++) {
                const lcx e = a[x * m * n + (i0 + i) * n + j0 + i];
                ck_assert_msg(D[x * len + i] == e, "diagonal offset %lld entry %lld", (long long)off, (long long)i);
                sum += e;
                mag += cabsl(e);
            }
            check_rel("trace", dt, cabsl(T[x] - sum), mag, len);
        }
    }
}
END_TEST

/* ---- truncation ---- */

/* A truncated SVD's results, with the descriptor the rules filled in. */
typedef struct trunc_result {
    tf__linalg d;
    lcx *U, *S, *Vh, *report;
} trunc_result;

static trunc_result svd_trunc(const tfd_tensor_view *t, int64_t b, const tf__truncation *tr,
                              int uv) {
    trunc_result res;
    memset(&res, 0, sizeof res);
    tf__linalg d = mat_desc(b);
    d.truncate = 1;
    d.compute_uv = uv;
    d.trunc = *tr;
    tfd_linalg_op op = make_la(TF__OP_SVD, &d, t, NULL);
    run_la_ok(&op, "truncated svd");
    res.d = op.desc;
    int o = 0;
    if (uv) res.U = fetch(&op.out[o++]);
    res.S = fetch(&op.out[o++]);
    if (uv) res.Vh = fetch(&op.out[o++]);
    res.report = fetch(&op.out[o++]);
    return res;
}

/* The plain SVD's values (uv: the reduced SVD's, else values only), as the backend computes them. */
static lcx *svd_values(const tfd_tensor_view *t, int64_t b, int uv) {
    tf__linalg d = mat_desc(b);
    d.compute_uv = uv;
    tfd_linalg_op op = make_la(TF__OP_SVD, &d, t, NULL);
    run_la_ok(&op, "svd values");
    return fetch(&op.out[uv ? 1 : 0]);
}

/* The sum of squares of s[from..k) as the rule accumulates it (double, in order). */
static double tail_weight(const lcx *s, int64_t from, int64_t k) {
    double w = 0;
    for (int64_t i = from; i < k; i++) w += (double)creall(s[i]) * (double)creall(s[i]);
    return w;
}

/*
 * The checks of one truncated SVD (matrix x) with the kept rank `want`:
 * the report; S the plain values (times f when renormalized), zeros past
 * the rank; U S Vh (with absorb undone by the product) the rank-`want`
 * reconstruction ref (NULL: no unique one, a cut inside a multiplet); zeros
 * in U and Vh past the rank.
 */
static void check_trunc(const char *what, tf_dtype dt, const trunc_result *r, int64_t x,
                        const lcx *s_plain, int64_t want, const lcx *ref) {
    const tf__linalg *d = &r->d;
    const int64_t m = d->m, n = d->n, k = d->k, w = d->rank;
    const lcx *rep = r->report + 3 * x, *S = r->S + x * w;
    ck_assert_msg(creall(rep[0]) == (long double)want, "%s (%s): kept rank %Lg, want %lld (seed %llu)",
                  what, tf_dtype_name(dt), creall(rep[0]), (long long)want, (unsigned long long)g_seed);
    const double total = tail_weight(s_plain, 0, k), gone = tail_weight(s_plain, want, k);
    check_rel(what, dt, fabsl(creall(rep[1]) - gone), total, k);
    check_rel(what, dt, fabsl(creall(rep[2]) - gone / total), 1, k);
    const long double f = d->trunc.renormalize ? sqrtl(total / (total - gone)) : 1;
    for (int64_t j = 0; j < w; j++) {
        const lcx want_s = j < want ? s_plain[j] * f : 0;
        check_rel(what, dt, cabsl(S[j] - want_s), creall(s_plain[0]), k);
        if (j >= want) ck_assert_msg(S[j] == 0, "%s: S[%lld] past the rank is not zero", what, (long long)j);
    }
    if (!r->U) return;
    const lcx *U = r->U + x * m * w, *Vh = r->Vh + x * w * n;
    for (int64_t j = want; j < w; j++) {
        for (int64_t i = 0; i < m; i++) ck_assert_msg(U[i * w + j] == 0, "%s: U column past the rank", what);
        for (int64_t i = 0; i < n; i++) ck_assert_msg(Vh[j * n + i] == 0, "%s: Vh row past the rank", what);
    }
    /* the product with the values put back where absorb did not put them */
    lcx *rec = mat_new(m * n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t c = 0; c < n; c++) {
            lcx v = 0;
            for (int64_t j = 0; j < want; j++) {
                /* absorbed or not, the product carries S (renormalized by f) once */
                const long double mid =
                    d->trunc.absorb == TF__ABSORB_NONE ? creall(S[j]) / f : 1 / f;
                v += U[i * w + j] * mid * Vh[j * n + c];
            }
            rec[i * n + c] = v;
        }
    if (ref) check_rel(what, dt, ld_dist(rec, ref, m * n), ld_fro(ref, m * n), m > n ? m : n);
    /* U and Vh stay isometries on the kept columns when nothing was absorbed into them */
    lcx *uk = mat_new(m * want), *vk = mat_new(want * n);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < want; j++) uk[i * want + j] = U[i * w + j];
    memcpy(vk, Vh, sizeof(lcx) * (size_t)(want * n));
    if (d->trunc.absorb == TF__ABSORB_NONE || d->trunc.absorb == TF__ABSORB_RIGHT)
        check_orthonormal(what, dt, uk, m, want);
    if (d->trunc.absorb == TF__ABSORB_NONE || d->trunc.absorb == TF__ABSORB_LEFT)
        check_orthonormal(what, dt, ld_adj(vk, want, n), n, want);
    for (int64_t j = 0; j < want; j++) {
        long double cu = 0, rv = 0;
        for (int64_t i = 0; i < m; i++) cu += creall(U[i * w + j] * conjl(U[i * w + j]));
        for (int64_t i = 0; i < n; i++) rv += creall(Vh[j * n + i] * conjl(Vh[j * n + i]));
        const long double sj = creall(S[j]);
        const long double wu = d->trunc.absorb == TF__ABSORB_LEFT ? sj : d->trunc.absorb == TF__ABSORB_BOTH ? sqrtl(sj) : 1;
        const long double wv = d->trunc.absorb == TF__ABSORB_RIGHT ? sj : d->trunc.absorb == TF__ABSORB_BOTH ? sqrtl(sj) : 1;
        check_rel("absorbed column norm", dt, fabsl(sqrtl(cu) - wu), wu, m);
        check_rel("absorbed row norm", dt, fabsl(sqrtl(rv) - wv), wv, n);
    }
}

/*
 * One truncation of a matrix of known spectrum s (with U and Vh, or values
 * only), checked against the rank-want reconstruction (s NULL: none is
 * unique); s_plain are the plain
 * SVD's values of the same path (gesdd with vectors and without may differ
 * in the last bit, and the boundaries are exact).
 */
static void trunc_case(const char *what, tf_dtype dt, const tfd_tensor_view *t, const spectral *sp,
                       const double *s, const lcx *s_plain, const tf__truncation *tr, int64_t want,
                       int64_t width, int uv) {
    trunc_result r = svd_trunc(t, 0, tr, uv);
    ck_assert_msg(r.d.rank == width, "%s: outputs of width %lld, want %lld", what, (long long)r.d.rank,
                  (long long)width);
    lcx *ref = s ? mat_new(sp->m * sp->n) : NULL;
    if (s) spectral_matrix(sp, s, want, ref);
    char full[160];
    snprintf(full, sizeof full, "%s (%s)", what, uv ? "U, S, Vh" : "values only");
    check_trunc(full, dt, &r, 0, s_plain, want, ref);
}

START_TEST(test_svd_truncation) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t m = 6, n = 5, k = 5;
    const double s[5] = {4, 3, 2, 1, 0.5};
    spectral sp = spectral_new(dt, m, n);
    lcx *a = mat_new(m * n);
    spectral_matrix(&sp, s, k, a);
    tfd_tensor_view t = upload_mats(dt, 0, m, n, a);
    /* an exactly doubly degenerate pair (computed within the tolerance) that cuts may straddle */
    const double sd[5] = {5, 3, 3, 1, 0.5};
    lcx *ad = mat_new(m * n);
    spectral_matrix(&sp, sd, k, ad);
    tfd_tensor_view td = upload_mats(dt, 0, m, n, ad);
    tf__truncation tr;
#define CASE(WHAT, WANT, WIDTH, ...)                                                               \
    do {                                                                                           \
        memset(&tr, 0, sizeof tr);                                                                 \
        __VA_ARGS__;                                                                               \
        trunc_case(WHAT, dt, &t, &sp, s, sv, &tr, WANT, WIDTH, uv);                                \
    } while (0)
#define DCASE(WHAT, WANT, WIDTH, ...)                                                              \
    do {                                                                                           \
        memset(&tr, 0, sizeof tr);                                                                 \
        __VA_ARGS__;                                                                               \
        trunc_case(WHAT, dt, &td, &sp, (WANT) == 2 ? NULL : sd, svd_d, &tr, WANT, WIDTH, uv);     \
    } while (0)
    for (int uv = 1; uv >= 0; uv--) {
        lcx *sv = svd_values(&t, 0, uv);
        const double s2 = (double)creall(sv[2]), s0 = (double)creall(sv[0]);
        CASE("max_rank 2", 2, 2, tr.max_rank = 2);
        CASE("max_rank 5 (all)", 5, 5, tr.max_rank = 5);
        CASE("cutoff equal to s2 drops it", 2, 5, tr.cutoff = s2);
        CASE("cutoff just below s2 keeps it", 3, 5, tr.cutoff = nextafter(s2, 0));
        CASE("cutoff above all keeps one", 1, 5, tr.cutoff = 10);
        CASE("min_rank beats the cutoff", 2, 5, tr.cutoff = 10; tr.min_rank = 2);
        CASE("min_rank with max_rank", 3, 3, tr.cutoff = 10; tr.min_rank = 3; tr.max_rank = 3);
        CASE("cutoff with max_rank", 2, 2, tr.cutoff = 0.75; tr.max_rank = 2);
        CASE("rel_cutoff above s2/s0", 2, 5, tr.rel_cutoff = s2 / s0 * (1 + 8 * DBL_EPSILON));
        CASE("rel_cutoff below s2/s0", 3, 5, tr.rel_cutoff = s2 / s0 * (1 - 8 * DBL_EPSILON));
        /* at rel = s2/s0 itself the threshold is (s2/s0) * s0, which rounding puts on either side */
        CASE("rel_cutoff at s2/s0", s2 > (s2 / s0) * s0 ? 3 : 2, 5, tr.rel_cutoff = s2 / s0);
        /* s3^2 + s4^2 as the rule sums it: s4's square first, then s3's (two terms: either order) */
        const double w34 = tail_weight(sv, 3, k), all = tail_weight(sv, 0, k);
        CASE("discarded_weight equal to s3^2+s4^2 drops both", 3, 5, tr.discarded_weight = w34);
        CASE("discarded_weight just below keeps s3", 4, 5, tr.discarded_weight = nextafter(w34, 0));
        CASE("rel_discarded_weight above", 3, 5,
             tr.rel_discarded_weight = w34 / all * (1 + 8 * DBL_EPSILON));
        CASE("rel_discarded_weight below", 4, 5,
             tr.rel_discarded_weight = w34 / all * (1 - 8 * DBL_EPSILON));
        CASE("the smaller of both weights binds", 4, 5, tr.discarded_weight = nextafter(w34, 0);
             tr.rel_discarded_weight = 0.5);
        CASE("renormalize", 2, 2, tr.max_rank = 2; tr.renormalize = 1);
        CASE("renormalize, value-dependent", 3, 5, tr.cutoff = nextafter(s2, 0); tr.renormalize = 1);
        if (uv) {
            CASE("absorb left", 2, 2, tr.max_rank = 2; tr.absorb = TF__ABSORB_LEFT);
            CASE("absorb right", 2, 2, tr.max_rank = 2; tr.absorb = TF__ABSORB_RIGHT);
            CASE("absorb both", 3, 5, tr.cutoff = nextafter(s2, 0); tr.absorb = TF__ABSORB_BOTH);
            CASE("absorb left, renormalized", 3, 5, tr.cutoff = nextafter(s2, 0);
                 tr.absorb = TF__ABSORB_LEFT; tr.renormalize = 1);
            CASE("absorb both, renormalized", 2, 2, tr.max_rank = 2; tr.absorb = TF__ABSORB_BOTH;
                 tr.renormalize = 1);
        }
        /* the renormalized values carry all the weight */
        memset(&tr, 0, sizeof tr);
        tr.max_rank = 2;
        tr.renormalize = 1;
        trunc_result rn = svd_trunc(&t, 0, &tr, uv);
        const long double kept2 =
            creall(rn.S[0]) * creall(rn.S[0]) + creall(rn.S[1]) * creall(rn.S[1]);
        check_rel("renormalized weight", dt, fabsl(kept2 - all), all, k);

        lcx *svd_d = svd_values(&td, 0, uv);
        /* a weight that drops s2..s4 and so cuts the pair at rank 2 (s1^2 = 9 is far above the margin) */
        const double drop2 = tail_weight(svd_d, 2, k) + 1;
        DCASE("a weight cutting the pair", 2, 5, tr.discarded_weight = drop2);
        DCASE("keep_degenerate extends to the pair", 3, 5, tr.discarded_weight = drop2;
              tr.keep_degenerate = 1);
        DCASE("keep_degenerate drops the pair past max_rank", 1, 2, tr.max_rank = 2;
              tr.keep_degenerate = 1);
        DCASE("keep_degenerate extends within max_rank", 3, 3, tr.max_rank = 3;
              tr.discarded_weight = drop2; tr.keep_degenerate = 1);
        DCASE("keep_degenerate without a cut pair changes nothing", 4, 5,
              tr.discarded_weight = nextafter(tail_weight(svd_d, 4, k), INFINITY);
              tr.keep_degenerate = 1);
        /* min_rank forbids the drop: the cut stays inside the pair (no unique reference) */
        memset(&tr, 0, sizeof tr);
        tr.max_rank = 2;
        tr.min_rank = 2;
        tr.keep_degenerate = 1;
        trunc_result r = svd_trunc(&td, 0, &tr, uv);
        ck_assert_msg(creall(r.report[0]) == 2, "keep_degenerate below min_rank: rank %Lg",
                      creall(r.report[0]));
    }
#undef CASE
#undef DCASE
}
END_TEST

/* A value-dependent rank differs per matrix of a batch: each gets its own zeros and report. */
START_TEST(test_svd_truncation_batch) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t m = 6, n = 5, k = 5, b = 3;
    const double base[5] = {4, 3, 2, 1, 0.5}, factor[3] = {1, 0.3, 3};
    const int64_t want[3] = {3, 1, 5}; /* cutoff 1.4 */
    spectral sp[3];
    double s[3][5];
    lcx *a = mat_new(b * m * n);
    for (int x = 0; x < 3; x++) {
        sp[x] = spectral_new(dt, m, n);
        for (int j = 0; j < 5; j++) s[x][j] = base[j] * factor[x];
        spectral_matrix(&sp[x], s[x], k, a + x * m * n);
    }
    tfd_tensor_view t = upload_mats(dt, b, m, n, a);
    lcx *sv = svd_values(&t, b, 1);
    tf__truncation tr;
    memset(&tr, 0, sizeof tr);
    tr.cutoff = 1.4;
    trunc_result r = svd_trunc(&t, b, &tr, 1);
    ck_assert_int_eq(r.d.rank, k);
    for (int x = 0; x < 3; x++) {
        lcx *ref = mat_new(m * n);
        spectral_matrix(&sp[x], s[x], want[x], ref);
        check_trunc("batched cutoff", dt, &r, x, sv + x * k, want[x], ref);
    }
}
END_TEST

/* Truncated eigh: |w| descending (the larger w first among equal |w|), the rule on |w|, zeros past it. */
START_TEST(test_eigh_truncation) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t n = 5;
    /* a diagonal matrix: its eigenvalues are exact, so +3 and -3 tie exactly */
    static const double diag[5] = {-3, 1, 3, 0.5, -4};
    lcx *h = mat_new(n * n);
    for (int64_t i = 0; i < n; i++) h[i * n + i] = diag[i];
    tfd_tensor_view t = upload_mats(dt, 0, n, n, h);
    static const double order[5] = {-4, 3, -3, 1, 0.5};
    static const int64_t where[5] = {4, 2, 0, 1, 3};
    struct {
        const char *what;
        int64_t max_rank, want;
        double weight;
    } cases[] = {
        {"eigh: all, reordered", 0, 5, 0},
        {"eigh: keep_degenerate drops the +-3 pair past max_rank", 2, 1, 0},
        {"eigh: keep_degenerate extends to the +-3 pair", 0, 3, 10.25},
    };
    for (int c = 0; c < 3; c++) {
        tf__linalg d = mat_desc(0);
        d.truncate = 1;
        d.compute_uv = 1;
        d.trunc.max_rank = cases[c].max_rank;
        d.trunc.discarded_weight = cases[c].weight;
        d.trunc.keep_degenerate = c > 0;
        if (c == 0) d.trunc.max_rank = 5;
        tfd_linalg_op op = make_la(TF__OP_EIGH, &d, &t, NULL);
        run_la_ok(&op, cases[c].what);
        const int64_t w = op.desc.rank;
        lcx *W = fetch(&op.out[0]), *V = fetch(&op.out[1]), *rep = fetch(&op.out[2]);
        ck_assert_msg(creall(rep[0]) == (long double)cases[c].want, "%s: rank %Lg", cases[c].what,
                      creall(rep[0]));
        double gone = 0, total = 0;
        for (int j = 0; j < 5; j++) {
            total += order[j] * order[j];
            if (j >= cases[c].want) gone += order[j] * order[j];
        }
        ck_assert_msg(creall(rep[1]) == gone && creall(rep[2]) == gone / total, "%s: report", cases[c].what);
        for (int64_t j = 0; j < w; j++) {
            const int kept = j < cases[c].want;
            ck_assert_msg(W[j] == (kept ? order[j] : 0), "%s: W[%lld] = %Lg", cases[c].what, (long long)j,
                          creall(W[j]));
            for (int64_t i = 0; i < n; i++)
                ck_assert_msg(V[i * w + j] == (kept && i == where[j] ? 1 : 0), "%s: V[%lld][%lld]",
                              cases[c].what, (long long)i, (long long)j);
        }
    }
    /* a dense matrix of known spectrum {-4, 3, -2, 1, 0.5}: the rule and A V = V W on the kept pairs */
    static const double spec[5] = {-4, 3, -2, 1, 0.5};
    spectral sp = spectral_new(dt, n, n);
    sp.q2 = sp.q1;
    lcx *a = mat_new(n * n);
    spectral_matrix(&sp, spec, n, a);
    for (int64_t i = 0; i < n; i++) a[i * n + i] = creall(a[i * n + i]);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++) a[j * n + i] = conjl(a[i * n + j]);
    lcx *in = mat_new(n * n);
    memcpy(in, a, sizeof(lcx) * (size_t)(n * n));
    tfd_tensor_view ta = upload_mats(dt, 0, n, n, in);
    round_hermitian(a, in, 1, n, 0);
    tf__linalg d = mat_desc(0);
    d.truncate = 1;
    d.compute_uv = 1;
    d.trunc.cutoff = 1.5;
    tfd_linalg_op op = make_la(TF__OP_EIGH, &d, &ta, NULL);
    run_la_ok(&op, "eigh cutoff");
    lcx *W = fetch(&op.out[0]), *V = fetch(&op.out[1]), *rep = fetch(&op.out[2]);
    ck_assert_int_eq(op.desc.rank, n);
    ck_assert_msg(creall(rep[0]) == 3, "eigh cutoff 1.5: rank %Lg", creall(rep[0]));
    static const double want_w[3] = {-4, 3, -2};
    for (int j = 0; j < 3; j++) check_rel("eigh cutoff: W", dt, fabsl(creall(W[j]) - want_w[j]), 4, n);
    ck_assert(W[3] == 0 && W[4] == 0);
    check_eigenpairs("eigh cutoff", dt, a, n, W, V, n, 3);
    for (int64_t i = 0; i < n; i++) ck_assert(V[i * n + 3] == 0 && V[i * n + 4] == 0);
    check_rel("eigh cutoff: report", dt, fabsl(creall(rep[1]) - 1.25), 30.25, n);
}
END_TEST

/*
 * A truncated eigh of a random Hermitian matrix larger than the tiles its
 * vectors are gathered by: the kept pairs in the order of |w| descending,
 * each an eigenpair of the matrix with its gauge, the values those of the
 * untruncated call (batched, and through the upper triangle).
 */
START_TEST(test_eigh_truncation_large) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t n = 40, b = 2, bound = 23;
    lcx *h = mat_new(b * n * n);
    lcx *in = hermitian_input(dt, b, n, 1, h);
    tfd_tensor_view t = upload_mats(dt, b, n, n, in);
    round_hermitian(h, in, b, n, 1);
    tf__linalg d = mat_desc(b);
    d.upper = 1;
    d.compute_uv = 1;
    tfd_linalg_op full = make_la(TF__OP_EIGH, &d, &t, NULL);
    run_la_ok(&full, "eigh untruncated");
    lcx *Wf = fetch(&full.out[0]);
    d.truncate = 1;
    d.trunc.max_rank = bound;
    tfd_linalg_op op = make_la(TF__OP_EIGH, &d, &t, NULL);
    run_la_ok(&op, "eigh max_rank 23");
    ck_assert_int_eq(op.desc.rank, bound);
    lcx *W = fetch(&op.out[0]), *V = fetch(&op.out[1]), *rep = fetch(&op.out[2]);
    for (int64_t x = 0; x < b; x++) {
        ck_assert_msg(creall(rep[3 * x]) == bound, "eigh max_rank 23: rank %Lg", creall(rep[3 * x]));
        /* the untruncated values by |w| descending (selection; random values do not tie) */
        int used[40] = {0};
        for (int64_t j = 0; j < bound; j++) {
            int64_t pick = -1;
            for (int64_t e = 0; e < n; e++)
                if (!used[e] && (pick < 0 || fabsl(creall(Wf[x * n + e])) > fabsl(creall(Wf[x * n + pick]))))
                    pick = e;
            used[pick] = 1;
            check_rel("eigh max_rank 23: W", dt, fabsl(creall(W[x * bound + j]) - creall(Wf[x * n + pick])),
                      ld_fro(h + x * n * n, n * n), n);
        }
        check_eigenpairs("eigh max_rank 23", dt, h + x * n * n, n, W + x * bound, V + x * n * bound,
                         bound, bound);
    }
}
END_TEST

/* ---- typed errors ---- */

START_TEST(test_not_finite) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3, n = 4;
    static const tf__op_kind kinds[] = {TF__OP_SVD, TF__OP_QR, TF__OP_EIGH, TF__OP_CHOLESKY,
                                        TF__OP_SOLVE, TF__OP_INV, TF__OP_DET, TF__OP_SLOGDET};
    for (int bad = 0; bad < 2; bad++) { /* nan, inf */
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
            lcx *h = mat_new(b * n * n);
            lcx *a = pd_input(dt, b, n, 0, h);
            for (int64_t i = 0; i < b * n * n; i++) a[i] = h[i];
            a[1 * n * n + 2 * n + 1] = bad ? (lcx)INFINITY : (lcx)NAN; /* lower triangle of matrix 1 */
            tfd_tensor_view ta = upload_mats(dt, b, n, n, a);
            lcx *bb = mat_new(b * n);
            for (int64_t i = 0; i < b * n; i++) bb[i] = rng_entry(dt);
            const int64_t vshape[2] = {b, n};
            tfd_tensor_view tb = upload_vals(dt, 2, vshape, bb);
            tf__linalg d = mat_desc(b);
            tfd_linalg_op op = make_la(kinds[ki], &d, &ta, kinds[ki] == TF__OP_SOLVE ? &tb : NULL);
            char want[96];
            snprintf(want, sizeof want, "%s: matrix 1 of 3 holds nan or inf", tf__op_name(kinds[ki]));
            run_la_fails(&op, TF_ERR_NOT_FINITE, want);
        }
    }
    /* nan in B of solve (matrix 2); nan only where eigh and cholesky do not read: no error */
    lcx *h = mat_new(b * n * n);
    lcx *a = pd_input(dt, b, n, 0, h);
    tfd_tensor_view ta = upload_mats(dt, b, n, n, a); /* nan above the diagonal */
    tf__linalg d = mat_desc(b);
    tfd_linalg_op ch = make_la(TF__OP_CHOLESKY, &d, &ta, NULL);
    run_la_ok(&ch, "cholesky ignoring the upper triangle");
    tfd_linalg_op eg = make_la(TF__OP_EIGH, &d, &ta, NULL);
    run_la_ok(&eg, "eigh ignoring the upper triangle");
    for (int64_t i = 0; i < b * n * n; i++) a[i] = h[i];
    tfd_tensor_view tg = upload_mats(dt, b, n, n, a);
    lcx *bb = mat_new(b * n);
    for (int64_t i = 0; i < b * n; i++) bb[i] = rng_entry(dt);
    bb[2 * n + 3] = NAN;
    const int64_t vshape[2] = {b, n};
    tfd_tensor_view tb = upload_vals(dt, 2, vshape, bb);
    tfd_linalg_op sv = make_la(TF__OP_SOLVE, &d, &tg, &tb);
    run_la_fails(&sv, TF_ERR_NOT_FINITE, "solve: matrix 2 of 3 holds nan or inf");
}
END_TEST

/*
 * The finiteness check at every entry of a matrix whose size is no multiple
 * of the four the check takes at a time, in either part of a complex entry:
 * nan, inf and -inf fail, the largest finite value does not; for eigh, only
 * in the triangle it reads.
 */
START_TEST(test_not_finite_each_entry) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t m = 3, n = 5;
    const lcx bad[3] = {NAN, INFINITY, -INFINITY};
    const long double big = dt == TF_F32 || dt == TF_C64 ? FLT_MAX : DBL_MAX;
    for (int64_t e = 0; e < m * n; e++)
        for (int part = 0; part < (is_cx(dt) ? 2 : 1); part++)
            for (int v = 0; v < 3; v++) {
                lcx *a = mat_new(m * n);
                for (int64_t i = 0; i < m * n; i++) a[i] = rng_entry(dt);
                a[e] = part ? CMPLXL(creall(a[e]), creall(bad[v])) : CMPLXL(creall(bad[v]), cimagl(a[e]));
                tfd_tensor_view t = upload_mats(dt, 0, m, n, a);
                tf__linalg d = mat_desc(0);
                tfd_linalg_op op = make_la(TF__OP_QR, &d, &t, NULL);
                run_la_fails(&op, TF_ERR_NOT_FINITE, "qr: matrix 0 of 1 holds nan or inf");
            }
    lcx *a = mat_new(m * n);
    for (int64_t i = 0; i < m * n; i++) a[i] = rng_entry(dt) * 1e-3L;
    a[m * n - 1] = big;
    tfd_tensor_view t = upload_mats(dt, 0, m, n, a);
    tf__linalg d = mat_desc(0);
    tfd_linalg_op op = make_la(TF__OP_QR, &d, &t, NULL);
    run_la_ok(&op, "qr with the largest finite entry");
    const int64_t s = 5;
    for (int64_t r = 0; r < s; r++)
        for (int64_t c = 0; c < s; c++) {
            lcx *h = mat_new(s * s);
            lcx *in = hermitian_input(dt, 1, s, 0, h);
            for (int64_t i = 0; i < s * s; i++) in[i] = h[i];
            in[r * s + c] = INFINITY;
            tfd_tensor_view te = upload_mats(dt, 0, s, s, in);
            tfd_linalg_op eg = make_la(TF__OP_EIGH, &d, &te, NULL);
            if (c <= r) run_la_fails(&eg, TF_ERR_NOT_FINITE, "eigh: matrix 0 of 1 holds nan or inf");
            else run_la_ok(&eg, "eigh with inf above the diagonal");
        }
}
END_TEST

/* ---- slice ---- */

START_TEST(test_slice) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t shape[3] = {5, 6, 7};
    lcx *vals = mat_new(5 * 6 * 7);
    for (int64_t i = 0; i < 5 * 6 * 7; i++) vals[i] = rng_entry(dt);
    tfd_tensor_view in = upload_vals(dt, 3, shape, vals);
    static const int64_t cases[][9] = {
        {0, 1, 5, 0, 1, 6, 0, 1, 7},  /* everything: one run */
        {1, 1, 3, 0, 1, 6, 0, 1, 7},  /* leading axis: whole blocks */
        {0, 1, 5, 2, 1, 3, 0, 1, 7},  /* middle axis, last whole: runs of 3 rows */
        {0, 2, 3, 1, 1, 4, 2, 1, 3},  /* step 1 last axis, partial */
        {4, -1, 5, 5, -2, 3, 6, -1, 7}, /* negative steps everywhere */
        {2, 1, 1, 3, 1, 1, 0, 3, 3},  /* length-1 axes, stepped last axis */
        {4, -2, 3, 0, 1, 6, 0, 1, 7}, /* negative leading step, whole trailing block */
        {0, 1, 5, 0, 5, 2, 6, -6, 2}, /* large steps */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *p = cases[c];
        tfd_op op;
        memset(&op, 0, sizeof op);
        op.kind = TF__OP_SLICE;
        op.n_inputs = 1;
        op.in[0] = in;
        op.n_params = 9;
        for (int i = 0; i < 9; i++) op.params[i] = p[i];
        tf__meta im, om;
        memset(&im, 0, sizeof im);
        im.dtype = dt;
        im.rank = 3;
        for (int i = 0; i < 3; i++) im.shape[i] = shape[i];
        char why[256] = "";
        ck_assert_msg(tf__infer_output(TF__OP_SLICE, &im, 1, op.params, 9, 0, &om, why, sizeof why) == TF_OK,
                      "slice rules: %s", why);
        op.out = dev_tensor(om.dtype, om.rank, om.shape);
        msg[0] = '\0';
        tf_status st = tfd_backend_run_op(&be, stream, &op, msg, sizeof msg);
        ck_assert_msg(st == TF_OK, "slice case %zu: %s %s", c, tf_status_name(st), msg);
        lcx *got = fetch(&op.out);
        int64_t o = 0;
        for (int64_t i = 0; i < p[2]; i++)
            for (int64_t j = 0; j < p[5]; j++)
                for (int64_t l = 0; l < p[8]; l++, o++) {
                    const int64_t si = p[0] + i * p[1], sj = p[3] + j * p[4], sl = p[6] + l * p[7];
                    ck_assert_msg(got[o] == vals[(si * 6 + sj) * 7 + sl], "slice case %zu: element %lld",
                                  c, (long long)o);
                }
    }
    /* rank 1, negative step */
    const int64_t s1[1] = {9};
    tfd_tensor_view v = upload_vals(dt, 1, s1, vals);
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_SLICE;
    op.n_inputs = 1;
    op.in[0] = v;
    op.n_params = 3;
    op.params[0] = 8;
    op.params[1] = -3;
    op.params[2] = 3;
    const int64_t s3[1] = {3};
    op.out = dev_tensor(dt, 1, s3);
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_OK);
    lcx *got = fetch(&op.out);
    for (int i = 0; i < 3; i++) ck_assert(got[i] == vals[8 - 3 * i]);
    /* a triple reaching outside the axis is refused, not read */
    op.params[2] = 4;
    const int64_t s4[1] = {4};
    op.out = dev_tensor(dt, 1, s4);
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *cpu_linalg_suite(void) {
    Suite *s = suite_create("cpu-linalg");
    TCase *tc = tcase_create("linalg");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_svd, 0, 4);
    tcase_add_loop_test(tc, test_svd_hard, 0, 4);
    tcase_add_loop_test(tc, test_qr, 0, 4);
    tcase_add_loop_test(tc, test_eigh, 0, 4);
    tcase_add_loop_test(tc, test_gauge_ties, 0, 4);
    tcase_add_loop_test(tc, test_cholesky, 0, 4);
    tcase_add_loop_test(tc, test_solve_inv, 0, 4);
    tcase_add_loop_test(tc, test_det, 0, 4);
    tcase_add_loop_test(tc, test_norm, 0, 4);
    tcase_add_loop_test(tc, test_trace_diagonal, 0, 4);
    tcase_add_loop_test(tc, test_svd_truncation, 0, 4);
    tcase_add_loop_test(tc, test_svd_truncation_batch, 0, 4);
    tcase_add_loop_test(tc, test_eigh_truncation, 0, 4);
    tcase_add_loop_test(tc, test_eigh_truncation_large, 0, 4);
    tcase_add_loop_test(tc, test_not_finite, 0, 4);
    tcase_add_loop_test(tc, test_not_finite_each_entry, 0, 4);
    tcase_add_loop_test(tc, test_slice, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    const char *env = getenv("TFCK_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test-cpu-linalg: seed %llu (replay with TFCK_SEED=%llu)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(cpu_linalg_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
