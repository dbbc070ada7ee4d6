/*
 * Unit tests of the CUDA backend's linear algebra (cuda/linalg.c,
 * cuda/linalg-kernels.cu) and its slice kernel, run on a GPU machine.
 *
 * Both backends are driven as the executor drives them: a tfd_linalg_op
 * whose descriptor and output metadata come from the shared rules
 * (tf__infer_linalg), tfd_backend_run_linalg, then event_record and
 * event_wait before reading back, and event_failure for what the device
 * found after the call returned. Every kind runs for every dtype on fresh
 * random inputs (magnitudes in [0.5, 2), never zero; the seed is printed and
 * TFCK_SEED=<n> replays it), on both backends from the same bytes. The CUDA
 * results must satisfy their identities (reconstruction, orthonormality,
 * A V = V W, L L^H = A, A X = B, A inv(A) = I, the gauges, exact zeros where
 * the semantics put them) within C * eps * (largest dimension) of the
 * matrix's norm, and agree with the CPU's: values within that bound, the
 * gauged vectors within it divided by the smallest gap of the spectrum (the
 * matrices have distinct singular values). Every cuSOLVER routine of the
 * routine table is forced in turn where it serves the shape. Truncation is
 * checked at its boundaries, set from the values the device itself returns.
 * Failures (nan input, a singular solve, a matrix that is not positive
 * definite) must leave zeros in every output, come back through event_failure
 * with the operation's batch and index, and be consumed once; a batch of 64
 * small SVDs must take one cuSOLVER call and no blocking read. The batched
 * factorizations (QR, the LU kinds, Cholesky: one cuBLAS or cuSOLVER call
 * for the batch) run for b = 1, 3, 100 and n = 1, 2, 7, 32, 33 under the
 * table and forced each way, their call counts showing which route ran, with
 * a rank-deficient member in the middle of a QR batch, and singular,
 * non-positive-definite and nan members in the middle of a batch reported by
 * their index.
 *
 * When it runs: only when TENFERRO_TEST_DEVICE starts with "cuda" ("cuda:N"
 * picks the ordinal) and /dev/nvidiactl exists; otherwise it prints a skip
 * line. Check forks one child per test, and each child opens both backends
 * in its fixture (a child cannot use CUDA once its parent initialised it).
 * Built without the CUDA backend there is nothing to test.
 */
#include <stdio.h>

#ifdef TFD_HAVE_CUDA
#include <check.h>
#include <complex.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/linalg.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/cuda/internal.h"

typedef long double complex lcx;

/* The slack of every bound, in units of eps times the largest dimension. */
#define C_TOL 64.0L

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* ---- random numbers, reproducible from one printed seed ---- */

static uint64_t g_seed, rng_state;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A magnitude in [0.5, 2) with a random sign: never zero. */
static double rng_value(void) {
    const double v = 0.5 + 1.5 * (double)(rng_next() >> 11) * 0x1.0p-53;
    return (rng_next() & 1) ? -v : v;
}

static int is_cx(tf_dtype d) { return d == TF_C64 || d == TF_C128; }

static long double eps_of(tf_dtype d) {
    return (d == TF_F32 || d == TF_C64) ? (long double)FLT_EPSILON : (long double)DBL_EPSILON;
}

static lcx rng_entry(tf_dtype dt) {
    return is_cx(dt) ? CMPLXL(rng_value(), rng_value()) : (lcx)rng_value();
}

/* ---- the two backends ---- */

enum { ON_CPU, ON_GPU };

static int gpu_ordinal;
static tfd_backend backends[2];
static void *streams[2];
static char msg[512];

#define MAX_TRACKED 4096
static struct {
    int side;
    void *ptr;
    size_t bytes;
} dev_mem[MAX_TRACKED];
static void *host_mem[MAX_TRACKED];
static int n_dev_mem, n_host_mem;

/* Frees the device memory a test allocated; host arrays stay for the values still in use. */
static void release_device(void) {
    while (n_dev_mem > 0) {
        n_dev_mem--;
        tfd_backend *be = &backends[dev_mem[n_dev_mem].side];
        be->vt->free(be, streams[dev_mem[n_dev_mem].side], dev_mem[n_dev_mem].ptr,
                     dev_mem[n_dev_mem].bytes);
    }
}

static void release_all(void) {
    release_device();
    while (n_host_mem > 0) free(host_mem[--n_host_mem]);
}

static void open_side(int side, const tfd_backend_vtable *vt, int ordinal) {
    tfd_backend *be = &backends[side];
    memset(be, 0, sizeof *be);
    be->vt = vt;
    msg[0] = '\0';
    tf_status st = vt->open(be, ordinal, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s open %d: %s: %s", vt->name, ordinal, tf_status_name(st), msg);
    st = vt->stream_create(be, 0, &streams[side]);
    ck_assert_msg(st == TF_OK, "%s stream_create: %s", vt->name, tf_status_name(st));
}

static void close_side(int side) {
    tfd_backend *be = &backends[side];
    be->vt->stream_destroy(be, streams[side]);
    be->vt->close(be);
}

static void setup(void) {
    rng_state = g_seed;
    n_dev_mem = n_host_mem = 0;
    open_side(ON_CPU, &tfd_cpu_backend, 0);
    open_side(ON_GPU, &tfd_cuda_backend, gpu_ordinal);
}

static void teardown(void) {
    tfd_cuda_linalg_force(TFD_CUDA_SOLVER_AUTO, TFD_CUDA_SOLVER_AUTO);
    tfd_cuda_linalg_force_factor(TFD_CUDA_SOLVER_AUTO, TFD_CUDA_SOLVER_AUTO, TFD_CUDA_SOLVER_AUTO);
    release_all();
    close_side(ON_GPU);
    close_side(ON_CPU);
}

static void *host_alloc(size_t bytes) {
    ck_assert_int_lt(n_host_mem, MAX_TRACKED);
    void *p = calloc(1, bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    host_mem[n_host_mem++] = p;
    return p;
}

static lcx *mat_new(int64_t count) { return host_alloc((size_t)count * sizeof(lcx)); }

static lcx host_get(const void *p, tf_dtype dt, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return CMPLXL(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    case TF_C128: return CMPLXL(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    default: return 0;
    }
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
    default: break;
    }
}

static size_t bytes_of(const tfd_tensor_view *v) {
    return (size_t)v->numel * tf_dtype_size(v->dtype);
}

/* Waits for everything enqueued on a side so far. */
static void side_sync(int side) {
    tfd_backend *be = &backends[side];
    void *ev = NULL;
    msg[0] = '\0';
    tf_status st = be->vt->event_record(be, streams[side], &ev, msg, sizeof msg);
    if (st == TF_OK) st = be->vt->event_wait(be, ev, msg, sizeof msg);
    be->vt->event_destroy(be, ev);
    ck_assert_msg(st == TF_OK, "%s sync: %s: %s", be->vt->name, tf_status_name(st), msg);
}

static tfd_tensor_view dev_tensor(int side, tf_dtype dt, int rank, const int64_t *shape) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    v.numel = 1;
    for (int i = 0; i < rank; i++) v.numel *= v.shape[i] = shape[i];
    ck_assert_int_lt(n_dev_mem, MAX_TRACKED);
    tfd_backend *be = &backends[side];
    tf_status st = be->vt->alloc(be, streams[side], bytes_of(&v), &v.data);
    ck_assert_msg(st == TF_OK, "%s alloc %zu bytes: %s", be->vt->name, bytes_of(&v),
                  tf_status_name(st));
    dev_mem[n_dev_mem].side = side;
    dev_mem[n_dev_mem].ptr = v.data;
    dev_mem[n_dev_mem++].bytes = bytes_of(&v);
    return v;
}

static void upload_bytes(int side, const tfd_tensor_view *v, const void *host) {
    tfd_backend *be = &backends[side];
    ck_assert_int_eq(be->vt->copy_to_device(be, streams[side], v->data, host, bytes_of(v)), TF_OK);
}

/* vals rounded to dt in place, and their bytes. */
static void *round_vals(tf_dtype dt, int64_t count, lcx *vals) {
    void *h = host_alloc((size_t)count * tf_dtype_size(dt));
    for (int64_t i = 0; i < count; i++) {
        host_set(h, dt, i, vals[i]);
        vals[i] = host_get(h, dt, i);
    }
    return h;
}

/* A device tensor's values, widened, once the work before has completed. */
static lcx *fetch(int side, const tfd_tensor_view *v) {
    tfd_backend *be = &backends[side];
    void *h = host_alloc(bytes_of(v));
    ck_assert_int_eq(be->vt->copy_to_host(be, streams[side], h, v->data, bytes_of(v)), TF_OK);
    side_sync(side);
    lcx *out = mat_new(v->numel);
    for (int64_t i = 0; i < v->numel; i++) out[i] = host_get(h, v->dtype, i);
    return out;
}

/* The first failure the GPU found in the work so far (event_record, event_wait, event_failure). */
static tf_status gpu_failure(int consume, uint64_t *batch, uint32_t *index) {
    tfd_backend *be = &backends[ON_GPU];
    void *ev = NULL;
    msg[0] = '\0';
    tf_status st = be->vt->event_record(be, streams[ON_GPU], &ev, msg, sizeof msg);
    ck_assert_msg(st == TF_OK && ev != NULL, "event_record: %s: %s", tf_status_name(st), msg);
    st = be->vt->event_wait(be, ev, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "event_wait: %s: %s", tf_status_name(st), msg);
    *batch = UINT64_MAX;
    *index = UINT32_MAX;
    st = be->vt->event_failure(be, ev, consume, batch, index, msg, sizeof msg);
    be->vt->event_destroy(be, ev);
    return st;
}

/* ---- one operation on both backends ---- */

typedef struct pair {
    tfd_linalg_op op[2];
    lcx *in[2];  /* the inputs' values, as uploaded */
    lcx *out[2][TF__LINALG_MAX_OUTPUTS];
} pair;

static tf__linalg mat_desc(int n_batch) {
    tf__linalg d;
    memset(&d, 0, sizeof d);
    d.n_batch = n_batch;
    d.n_rows = 1;
    return d;
}

/*
 * Builds kind on both sides from the same values a (shape sa) and b (shape
 * sb, or none): the rules fill in the descriptor and the outputs, which are
 * poisoned with NaN bytes.
 */
static void pair_make(pair *p, tf__op_kind kind, const tf__linalg *desc, tf_dtype dt, int ra,
                      const int64_t *sa, lcx *a, int rb, const int64_t *sb, lcx *b) {
    memset(p, 0, sizeof *p);
    tf__meta in[2], out[TF__LINALG_MAX_OUTPUTS];
    memset(in, 0, sizeof in);
    const int n_in = b ? 2 : 1;
    int ranks[2] = {ra, rb};
    const int64_t *shapes[2] = {sa, sb};
    lcx *vals[2] = {a, b};
    for (int i = 0; i < n_in; i++) {
        in[i].dtype = dt;
        in[i].rank = ranks[i];
        for (int d = 0; d < ranks[i]; d++) in[i].shape[d] = shapes[i][d];
    }
    tf__linalg dd = *desc;
    char why[256] = "";
    tf_status st = tf__infer_linalg(kind, &dd, in, n_in, out, why, sizeof why);
    ck_assert_msg(st == TF_OK, "rules refused %s: %s", tf__op_name(kind), why);
    for (int side = 0; side < 2; side++) {
        tfd_linalg_op *op = &p->op[side];
        op->kind = kind;
        op->desc = dd;
        op->n_inputs = n_in;
        op->n_outputs = dd.n_outputs;
        op->batch = 1000 + (uint64_t)side;
        op->index = 7;
        for (int i = 0; i < n_in; i++) op->in[i] = dev_tensor(side, dt, ranks[i], shapes[i]);
        for (int i = 0; i < op->n_outputs; i++) {
            op->out[i] = dev_tensor(side, out[i].dtype, out[i].rank, out[i].shape);
            void *poison = host_alloc(bytes_of(&op->out[i]));
            memset(poison, 0xFF, bytes_of(&op->out[i]));
            upload_bytes(side, &op->out[i], poison);
        }
    }
    for (int i = 0; i < n_in; i++) {
        const void *h = round_vals(dt, p->op[0].in[i].numel, vals[i]);
        p->in[i] = vals[i];
        for (int side = 0; side < 2; side++) upload_bytes(side, &p->op[side].in[i], h);
    }
}

static tf_status pair_run_side(pair *p, int side) {
    msg[0] = '\0';
    return tfd_backend_run_linalg(&backends[side], streams[side], &p->op[side], msg, sizeof msg);
}

/* Runs on both sides (both must succeed) and fetches every output. */
static void pair_run(pair *p, const char *what) {
    for (int side = 0; side < 2; side++) {
        tf_status st = pair_run_side(p, side);
        ck_assert_msg(st == TF_OK, "%s on %s (%s): %s: %s (seed %llu)", what,
                      backends[side].vt->name, tf_dtype_name(p->op[side].in[0].dtype),
                      tf_status_name(st), msg, (unsigned long long)g_seed);
    }
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < p->op[side].n_outputs; i++)
            p->out[side][i] = fetch(side, &p->op[side].out[i]);
    uint64_t batch;
    uint32_t index;
    tf_status st = gpu_failure(1, &batch, &index);
    ck_assert_msg(st == TF_OK, "%s (%s): the device reported %s: %s (seed %llu)", what,
                  tf_dtype_name(p->op[ON_GPU].in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
}

/* ---- checks ---- */

static void check_close(const char *what, tf_dtype dt, const lcx *want, const lcx *got,
                        int64_t count, long double bound) {
    for (int64_t i = 0; i < count; i++) {
        const int wn = isnan(creall(want[i])) || isnan(cimagl(want[i]));
        const int gn = isnan(creall(got[i])) || isnan(cimagl(got[i]));
        int ok;
        long double err = 0;
        if (wn || gn)
            ok = wn && gn;
        else if (isinf(creall(want[i])) || isinf(creall(got[i])))
            ok = want[i] == got[i];
        else
            ok = (err = cabsl(got[i] - want[i])) <= bound;
        ck_assert_msg(ok, "%s (%s): element %lld of %lld: cpu %.17Lg%+.17Lgi, cuda %.17Lg%+.17Lgi, "
                      "|err| %.3Lg > %.3Lg (seed %llu)", what, tf_dtype_name(dt), (long long)i,
                      (long long)count, creall(want[i]), cimagl(want[i]), creall(got[i]),
                      cimagl(got[i]), err, bound, (unsigned long long)g_seed);
    }
}

static void check_zero(const char *what, const lcx *x, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        ck_assert_msg(x[i] == 0, "%s: element %lld is %Lg%+Lgi, not zero (seed %llu)", what,
                      (long long)i, creall(x[i]), cimagl(x[i]), (unsigned long long)g_seed);
}

static long double fro(const lcx *a, int64_t count) {
    long double s = 0;
    for (int64_t i = 0; i < count; i++) s += creall(a[i] * conjl(a[i]));
    return sqrtl(s);
}

static long double bound_of(tf_dtype dt, int64_t dim, long double scale) {
    return C_TOL * eps_of(dt) * (long double)dim * scale;
}

/* Vectors (count of them, len entries, entry e of vector v at v * vs + e * es) are orthonormal. */
static void check_orth(const char *what, tf_dtype dt, const lcx *q, int64_t count, int64_t len,
                       int64_t vs, int64_t es) {
    long double worst = 0;
    for (int64_t a = 0; a < count; a++)
        for (int64_t b = 0; b < count; b++) {
            lcx s = 0;
            for (int64_t e = 0; e < len; e++) s += conjl(q[a * vs + e * es]) * q[b * vs + e * es];
            const long double err = cabsl(s - (a == b ? 1 : 0));
            if (err > worst) worst = err;
        }
    const long double bound = bound_of(dt, count > len ? count : len, 1);
    ck_assert_msg(worst <= bound, "%s (%s): not orthonormal: %.3Lg > %.3Lg (seed %llu)", what,
                  tf_dtype_name(dt), worst, bound, (unsigned long long)g_seed);
}

/*
 * The gauge of a vector: its largest entry in magnitude is real and
 * positive. The backend writes that entry as its magnitude exactly; among
 * entries within rounding of the largest any may be the one (complex
 * phases round magnitudes), for real dtypes the first of equals.
 */
static void check_gauge(const char *what, tf_dtype dt, const lcx *x, int64_t len, int64_t es) {
    long double big = 0;
    int64_t first = 0;
    for (int64_t e = 0; e < len; e++)
        if (cabsl(x[e * es]) > big) {
            big = cabsl(x[e * es]);
            first = e;
        }
    if (big == 0) return;
    if (!is_cx(dt)) {
        ck_assert_msg(creall(x[first * es]) > 0, "%s (%s): the largest entry %Lg is negative "
                      "(seed %llu)", what, tf_dtype_name(dt), creall(x[first * es]),
                      (unsigned long long)g_seed);
        return;
    }
    for (int64_t e = 0; e < len; e++) {
        const lcx v = x[e * es];
        if (cimagl(v) == 0 && creall(v) > 0 && creall(v) >= big * (1 - 16 * eps_of(dt))) return;
    }
    ck_assert_msg(0, "%s (%s): no entry of magnitude %Lg is real and positive (seed %llu)", what,
                  tf_dtype_name(dt), big, (unsigned long long)g_seed);
}

/* The smallest gap between neighbouring values of s (descending), and to zero when asked. */
static long double min_gap(const lcx *s, int64_t k, int to_zero) {
    long double g = INFINITY;
    for (int64_t j = 0; j + 1 < k; j++) {
        const long double d = fabsl(creall(s[j]) - creall(s[j + 1]));
        if (d < g) g = d;
    }
    if (to_zero && fabsl(creall(s[k - 1])) < g) g = fabsl(creall(s[k - 1]));
    return g;
}

/* b random matrices m x n. */
static lcx *rand_mats(tf_dtype dt, int64_t count) {
    lcx *a = mat_new(count);
    for (int64_t i = 0; i < count; i++) a[i] = rng_entry(dt);
    return a;
}

/* ---- SVD ---- */

static const tfd_cuda_solver svd_routines[] = {TFD_CUDA_SOLVER_AUTO, TFD_CUDA_SVD_XGESVD,
                                               TFD_CUDA_SVD_GESVDJ, TFD_CUDA_SVD_GESVDJ_BATCHED};

/* One SVD on both sides: identities of the CUDA result, and agreement with the CPU. */
static void svd_case(tf_dtype dt, int64_t b, int64_t m, int64_t n, int full, int uv,
                     tfd_cuda_solver routine) {
    char what[128];
    snprintf(what, sizeof what, "svd %lldx%lldx%lld full %d uv %d routine %d", (long long)b,
             (long long)m, (long long)n, full, uv, (int)routine);
    tfd_cuda_linalg_force(routine, TFD_CUDA_SOLVER_AUTO);
    const int64_t shape[3] = {b, m, n};
    lcx *a = rand_mats(dt, b * m * n);
    tf__linalg d = mat_desc(1);
    d.full = full;
    d.compute_uv = uv;
    pair p;
    pair_make(&p, TF__OP_SVD, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(&p, what);
    const int64_t k = m < n ? m : n, r1 = full ? m : k, r2 = full ? n : k;
    const int o_s = uv ? 1 : 0;
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * m * n;
        const long double norm = fro(A, m * n);
        const lcx *S = p.out[ON_GPU][o_s] + i * k, *Sc = p.out[ON_CPU][o_s] + i * k;
        check_close(what, dt, Sc, S, k, bound_of(dt, m > n ? m : n, norm));
        for (int64_t j = 0; j + 1 < k; j++)
            ck_assert_msg(creall(S[j]) >= creall(S[j + 1]) && creall(S[j + 1]) >= 0,
                          "%s: S not descending (seed %llu)", what, (unsigned long long)g_seed);
        if (!uv) continue;
        const lcx *U = p.out[ON_GPU][0] + i * m * r1, *Vh = p.out[ON_GPU][2] + i * r2 * n;
        long double err = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) {
                lcx s = 0;
                for (int64_t j = 0; j < k; j++) s += U[r * r1 + j] * S[j] * Vh[j * n + c];
                err += creall((s - A[r * n + c]) * conjl(s - A[r * n + c]));
            }
        const long double rb = bound_of(dt, m > n ? m : n, norm);
        ck_assert_msg(sqrtl(err) <= rb, "%s (%s): |U S Vh - A| %.3Lg > %.3Lg (seed %llu)", what,
                      tf_dtype_name(dt), sqrtl(err), rb, (unsigned long long)g_seed);
        check_orth(what, dt, U, r1, m, 1, r1);
        check_orth(what, dt, Vh, r2, n, n, 1);
        for (int64_t j = 0; j < r1; j++) check_gauge(what, dt, U + j, m, r1);
        for (int64_t j = r1; j < r2; j++) check_gauge(what, dt, Vh + j * n, n, 1);
        /* The gauged vectors of distinct values agree with the CPU's (the first k of each). */
        const long double gap = min_gap(S, k, m != n);
        if (!(gap > 1e-3L * creall(S[0]))) continue; /* too close to compare vectors */
        const lcx *Uc = p.out[ON_CPU][0] + i * m * r1, *Vhc = p.out[ON_CPU][2] + i * r2 * n;
        const long double vb = bound_of(dt, m > n ? m : n, norm / gap);
        for (int64_t r = 0; r < m; r++) check_close(what, dt, Uc + r * r1, U + r * r1, k, vb);
        check_close(what, dt, Vhc, Vh, k * n, vb);
    }
    release_all();
}

START_TEST(test_svd) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][3] = {{1, 7, 5}, {3, 5, 9}, {4, 6, 6}, {2, 40, 33}, {1, 1, 4},
                                        {2, 33, 3}};
    for (size_t r = 0; r < sizeof svd_routines / sizeof svd_routines[0]; r++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int mode = 0; mode < 3; mode++) /* reduced, full, values only */
                svd_case(dt, shapes[s][0], shapes[s][1], shapes[s][2], mode == 1, mode != 2,
                         svd_routines[r]);
}
END_TEST

/* ---- QR ---- */

static void qr_case(tf_dtype dt, int64_t b, int64_t m, int64_t n, int full, int uv) {
    char what[96];
    snprintf(what, sizeof what, "qr %lldx%lldx%lld full %d uv %d", (long long)b, (long long)m,
             (long long)n, full, uv);
    const int64_t shape[3] = {b, m, n};
    lcx *a = rand_mats(dt, b * m * n);
    tf__linalg d = mat_desc(1);
    d.full = full && uv;
    d.compute_uv = uv;
    pair p;
    pair_make(&p, TF__OP_QR, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(&p, what);
    const int64_t k = m < n ? m : n, kq = full && uv ? m : k;
    const int o_r = uv ? 1 : 0;
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * m * n;
        const long double norm = fro(A, m * n), bd = bound_of(dt, m > n ? m : n, norm);
        const lcx *R = p.out[ON_GPU][o_r] + i * kq * n, *Rc = p.out[ON_CPU][o_r] + i * kq * n;
        for (int64_t r = 0; r < kq; r++)
            for (int64_t c = 0; c < n; c++)
                if (r > c || r >= k)
                    ck_assert_msg(R[r * n + c] == 0, "%s: R[%lld, %lld] is not zero", what,
                                  (long long)r, (long long)c);
        for (int64_t j = 0; j < k; j++)
            ck_assert_msg(cimagl(R[j * n + j]) == 0 && creall(R[j * n + j]) >= 0,
                          "%s: R[%lld, %lld] = %Lg%+Lgi is not real non-negative", what,
                          (long long)j, (long long)j, creall(R[j * n + j]), cimagl(R[j * n + j]));
        check_close(what, dt, Rc, R, kq * n, bd);
        if (!uv) continue;
        const lcx *Q = p.out[ON_GPU][0] + i * m * kq, *Qc = p.out[ON_CPU][0] + i * m * kq;
        check_orth(what, dt, Q, kq, m, 1, kq);
        long double err = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) {
                lcx s = 0;
                for (int64_t j = 0; j < kq; j++) s += Q[r * kq + j] * R[j * n + c];
                err += creall((s - A[r * n + c]) * conjl(s - A[r * n + c]));
            }
        ck_assert_msg(sqrtl(err) <= bd, "%s (%s): |QR - A| %.3Lg > %.3Lg (seed %llu)", what,
                      tf_dtype_name(dt), sqrtl(err), bd, (unsigned long long)g_seed);
        /* The first k columns are determined by the gauge; the others are the routine's. */
        const long double qb = bound_of(dt, m > n ? m : n, norm / creall(R[(k - 1) * n + k - 1]));
        for (int64_t r = 0; r < m; r++) check_close(what, dt, Qc + r * kq, Q + r * kq, k, qb);
    }
    release_all();
}

START_TEST(test_qr) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][3] = {{2, 6, 4}, {3, 4, 6}, {1, 5, 5}, {2, 37, 20}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int mode = 0; mode < 3; mode++)
            qr_case(dt, shapes[s][0], shapes[s][1], shapes[s][2], mode == 1, mode != 2);
}
END_TEST

/* ---- eigh ---- */

/*
 * A Hermitian matrix in the triangle eigh reads (upper 0: the lower), and
 * garbage in the other one (nan when asked: eigh must not read it).
 */
static lcx *hermitian(tf_dtype dt, int64_t b, int64_t n, int upper, int nan_garbage) {
    lcx *a = mat_new(b * n * n);
    for (int64_t i = 0; i < b; i++)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c <= r; c++) {
                lcx v = rng_entry(dt);
                if (r == c) v = creall(v) * 2;
                a[i * n * n + r * n + c] = v;
                a[i * n * n + c * n + r] = conjl(v);
            }
    for (int64_t i = 0; i < b; i++)
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++)
                if (upper ? c < r : c > r)
                    a[i * n * n + r * n + c] = nan_garbage ? (lcx)NAN : rng_entry(dt) * 100;
    return a;
}

/* The full Hermitian matrix of what eigh reads. */
static lcx read_herm(const lcx *a, int64_t n, int upper, int64_t r, int64_t c) {
    const int in = upper ? c >= r : c <= r;
    return in ? a[r * n + c] : conjl(a[c * n + r]);
}

static const tfd_cuda_solver eigh_routines[] = {TFD_CUDA_SOLVER_AUTO, TFD_CUDA_EIGH_XSYEVD,
                                                TFD_CUDA_EIGH_SYEVJ_BATCHED};

static void eigh_case(tf_dtype dt, int64_t b, int64_t n, int upper, int uv, int nan_garbage,
                      tfd_cuda_solver routine) {
    char what[112];
    snprintf(what, sizeof what, "eigh %lldx%lld upper %d uv %d routine %d", (long long)b,
             (long long)n, upper, uv, (int)routine);
    tfd_cuda_linalg_force(TFD_CUDA_SOLVER_AUTO, routine);
    const int64_t shape[3] = {b, n, n};
    lcx *a = hermitian(dt, b, n, upper, nan_garbage);
    tf__linalg d = mat_desc(1);
    d.upper = upper;
    d.compute_uv = uv;
    pair p;
    pair_make(&p, TF__OP_EIGH, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(&p, what);
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * n * n;
        long double norm = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++) norm += powl(cabsl(read_herm(A, n, upper, r, c)), 2);
        norm = sqrtl(norm);
        const lcx *W = p.out[ON_GPU][0] + i * n, *Wc = p.out[ON_CPU][0] + i * n;
        check_close(what, dt, Wc, W, n, bound_of(dt, n, norm));
        for (int64_t j = 0; j + 1 < n; j++)
            ck_assert_msg(creall(W[j]) <= creall(W[j + 1]), "%s: W not ascending", what);
        if (!uv) continue;
        const lcx *V = p.out[ON_GPU][1] + i * n * n, *Vc = p.out[ON_CPU][1] + i * n * n;
        check_orth(what, dt, V, n, n, 1, n);
        long double err = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < n; j++) {
                lcx s = 0;
                for (int64_t c = 0; c < n; c++) s += read_herm(A, n, upper, r, c) * V[c * n + j];
                s -= V[r * n + j] * W[j];
                err += creall(s * conjl(s));
            }
        const long double bd = bound_of(dt, n, norm);
        ck_assert_msg(sqrtl(err) <= bd, "%s (%s): |A V - V W| %.3Lg > %.3Lg (seed %llu)", what,
                      tf_dtype_name(dt), sqrtl(err), bd, (unsigned long long)g_seed);
        for (int64_t j = 0; j < n; j++) check_gauge(what, dt, V + j, n, n);
        lcx *desc_w = mat_new(n);
        for (int64_t j = 0; j < n; j++) desc_w[j] = W[n - 1 - j];
        const long double gap = min_gap(desc_w, n, 0);
        if (gap > 1e-3L * norm)
            check_close(what, dt, Vc, V, n * n, bound_of(dt, n, norm / gap));
    }
    release_all();
}

START_TEST(test_eigh) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][2] = {{3, 5}, {1, 6}, {2, 40}, {5, 32}};
    for (size_t r = 0; r < sizeof eigh_routines / sizeof eigh_routines[0]; r++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int upper = 0; upper < 2; upper++)
                for (int uv = 0; uv < 2; uv++)
                    eigh_case(dt, shapes[s][0], shapes[s][1], upper, uv, s == 0 && uv,
                              eigh_routines[r]);
}
END_TEST

/* ---- cholesky, solve, inv, det, slogdet ---- */

/* b positive definite matrices M M^H + n I in the triangle read, garbage in the other. */
static lcx *positive_definite(tf_dtype dt, int64_t b, int64_t n, int upper) {
    lcx *a = mat_new(b * n * n), *mm = rand_mats(dt, n * n);
    for (int64_t i = 0; i < b; i++) {
        for (int64_t e = 0; e < n * n; e++) mm[e] = rng_entry(dt);
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++) {
                lcx s = r == c ? (lcx)n : 0;
                for (int64_t l = 0; l < n; l++) s += mm[r * n + l] * conjl(mm[c * n + l]);
                if (r == c) s = creall(s);
                const int in = upper ? c >= r : c <= r;
                a[i * n * n + r * n + c] = in ? s : rng_entry(dt) * 50;
            }
    }
    return a;
}

START_TEST(test_cholesky) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][2] = {{3, 5}, {1, 1}, {2, 48}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int upper = 0; upper < 2; upper++) {
            const int64_t b = shapes[s][0], n = shapes[s][1], shape[3] = {b, n, n};
            lcx *a = positive_definite(dt, b, n, upper);
            tf__linalg d = mat_desc(1);
            d.upper = upper;
            pair p;
            pair_make(&p, TF__OP_CHOLESKY, &d, dt, 3, shape, a, 0, NULL, NULL);
            pair_run(&p, "cholesky");
            for (int64_t i = 0; i < b; i++) {
                const lcx *A = a + i * n * n, *L = p.out[ON_GPU][0] + i * n * n;
                long double err = 0, norm = 0;
                for (int64_t r = 0; r < n; r++)
                    for (int64_t c = 0; c < n; c++) {
                        if (upper ? c < r : c > r)
                            ck_assert_msg(L[r * n + c] == 0, "cholesky: [%lld, %lld] not zero",
                                          (long long)r, (long long)c);
                        lcx s = 0;
                        for (int64_t l = 0; l < n; l++)
                            s += upper ? conjl(L[l * n + r]) * L[l * n + c]
                                       : L[r * n + l] * conjl(L[c * n + l]);
                        const lcx want = read_herm(A, n, upper, r, c);
                        err += creall((s - want) * conjl(s - want));
                        norm += creall(want * conjl(want));
                    }
                const long double bd = bound_of(dt, n, sqrtl(norm));
                ck_assert_msg(sqrtl(err) <= bd, "cholesky (%s): error %.3Lg > %.3Lg (seed %llu)",
                              tf_dtype_name(dt), sqrtl(err), bd, (unsigned long long)g_seed);
                check_close("cholesky", dt, p.out[ON_CPU][0] + i * n * n, L, n * n,
                            bound_of(dt, n, sqrtl(sqrtl(norm)) * 4));
            }
            release_all();
        }
}
END_TEST

/* b well-conditioned matrices: random plus 2n on the diagonal. */
static lcx *well_conditioned(tf_dtype dt, int64_t b, int64_t n) {
    lcx *a = rand_mats(dt, b * n * n);
    for (int64_t i = 0; i < b; i++)
        for (int64_t r = 0; r < n; r++) a[i * n * n + r * n + r] += 2 * n;
    return a;
}

START_TEST(test_solve_inv) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][3] = {{3, 5, 1}, {2, 6, 4}, {1, 40, 3}, {2, 1, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t b = shapes[s][0], n = shapes[s][1], nrhs = shapes[s][2];
        for (int vector = 0; vector < (nrhs == 1 ? 2 : 1); vector++) {
            const int64_t sa[3] = {b, n, n}, sb3[3] = {b, n, nrhs}, sb2[2] = {b, n};
            lcx *a = well_conditioned(dt, b, n), *bb = rand_mats(dt, b * n * nrhs);
            tf__linalg d = mat_desc(1);
            pair p;
            pair_make(&p, TF__OP_SOLVE, &d, dt, 3, sa, a, vector ? 2 : 3, vector ? sb2 : sb3,
                      bb);
            pair_run(&p, "solve");
            for (int64_t i = 0; i < b; i++) {
                const lcx *A = a + i * n * n, *B = bb + i * n * nrhs;
                const lcx *X = p.out[ON_GPU][0] + i * n * nrhs;
                long double err = 0;
                for (int64_t r = 0; r < n; r++)
                    for (int64_t c = 0; c < nrhs; c++) {
                        lcx s = -B[r * nrhs + c];
                        for (int64_t l = 0; l < n; l++) s += A[r * n + l] * X[l * nrhs + c];
                        err += creall(s * conjl(s));
                    }
                const long double bd = bound_of(dt, n, fro(A, n * n) * fro(X, n * nrhs) + 1);
                ck_assert_msg(sqrtl(err) <= bd, "solve (%s): |AX - B| %.3Lg > %.3Lg (seed %llu)",
                              tf_dtype_name(dt), sqrtl(err), bd, (unsigned long long)g_seed);
                check_close("solve", dt, p.out[ON_CPU][0] + i * n * nrhs, X, n * nrhs,
                            bound_of(dt, n, fro(X, n * nrhs)));
            }
            release_all();
        }
        const int64_t sa[3] = {b, n, n};
        lcx *a = well_conditioned(dt, b, n);
        tf__linalg d = mat_desc(1);
        pair p;
        pair_make(&p, TF__OP_INV, &d, dt, 3, sa, a, 0, NULL, NULL);
        pair_run(&p, "inv");
        for (int64_t i = 0; i < b; i++) {
            const lcx *A = a + i * n * n, *X = p.out[ON_GPU][0] + i * n * n;
            long double err = 0;
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c < n; c++) {
                    lcx s = r == c ? -1 : 0;
                    for (int64_t l = 0; l < n; l++) s += A[r * n + l] * X[l * n + c];
                    err += creall(s * conjl(s));
                }
            const long double bd = bound_of(dt, n, fro(A, n * n) * fro(X, n * n));
            ck_assert_msg(sqrtl(err) <= bd, "inv (%s): |A inv(A) - I| %.3Lg > %.3Lg (seed %llu)",
                          tf_dtype_name(dt), sqrtl(err), bd, (unsigned long long)g_seed);
            check_close("inv", dt, p.out[ON_CPU][0] + i * n * n, X, n * n,
                        bound_of(dt, n, fro(X, n * n)));
        }
        release_all();
    }
}
END_TEST

START_TEST(test_det) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shapes[][2] = {{4, 3}, {2, 1}, {3, 20}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t b = shapes[s][0], n = shapes[s][1], sa[3] = {b, n, n};
        for (int slog = 0; slog < 2; slog++) {
            lcx *a = rand_mats(dt, b * n * n);
            /* Matrix 1 singular: a zero row gives an exactly zero pivot. */
            for (int64_t c = 0; c < n; c++) a[1 * n * n + (n - 1) * n + c] = 0;
            tf__linalg d = mat_desc(1);
            pair p;
            pair_make(&p, slog ? TF__OP_SLOGDET : TF__OP_DET, &d, dt, 3, sa, a, 0, NULL, NULL);
            pair_run(&p, slog ? "slogdet" : "det"); /* a singular matrix is no failure */
            for (int64_t i = 0; i < b; i++) {
                const lcx g = p.out[ON_GPU][0][i], c = p.out[ON_CPU][0][i];
                if (i == 1) {
                    ck_assert_msg(g == 0, "%s of a singular matrix: %Lg%+Lgi", slog ? "sign" : "det",
                                  creall(g), cimagl(g));
                    if (slog) ck_assert(isinf(creall(p.out[ON_GPU][1][i])) &&
                                        creall(p.out[ON_GPU][1][i]) < 0);
                    continue;
                }
                if (!slog) {
                    check_close("det", dt, &c, &g, 1, bound_of(dt, n, cabsl(c)));
                    continue;
                }
                check_close("slogdet sign", dt, &c, &g, 1, bound_of(dt, n, 1));
                ck_assert_msg(fabsl(cabsl(g) - 1) <= bound_of(dt, 1, 1), "sign is not a unit");
                const lcx lg = p.out[ON_GPU][1][i], lc = p.out[ON_CPU][1][i];
                check_close("slogdet logabs", dt, &lc, &lg, 1, bound_of(dt, n, fabsl(creall(lc)) + 1));
            }
            release_all();
        }
    }
}
END_TEST

/* ---- norms, trace, diagonal ---- */

static void norm_case(tf_dtype dt, int64_t b, int64_t m, int64_t n, tf__norm_kind kind, double p,
                      int plant) {
    char what[96];
    snprintf(what, sizeof what, "norm kind %d p %g %lldx%lldx%lld plant %d", (int)kind, p,
             (long long)b, (long long)m, (long long)n, plant);
    const int64_t shape[3] = {b, m, n};
    lcx *a = rand_mats(dt, b * m * n);
    if (plant == 1) a[m * n + 2 % (m * n)] = NAN; /* matrix 1 holds nan */
    if (plant == 2) a[m * n + 1 % (m * n)] = INFINITY;
    if (plant == 3) a[m * n] = 0; /* a zero, for p = 0 and negative p */
    tf__linalg d = mat_desc(1);
    if (kind == TF__NORM_VECTOR) { /* reduce rows and columns: a vector of m n per matrix */
        d.n_rows = 1;
    }
    d.norm_kind = kind;
    d.norm_p = p;
    pair pr;
    pair_make(&pr, TF__OP_NORM, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(&pr, what);
    for (int64_t i = 0; i < b; i++) {
        const lcx c = pr.out[ON_CPU][0][i], g = pr.out[ON_GPU][0][i];
        check_close(what, dt, &c, &g, 1, bound_of(dt, m * n, cabsl(c)));
    }
    release_all();
}

START_TEST(test_norm) {
    const tf_dtype dt = all_dtypes[_i];
    static const double vector_p[] = {2, 1, INFINITY, -INFINITY, 0, 3, 0.5, -1.5};
    static const int64_t shapes[][3] = {{3, 4, 5}, {2, 70, 300}, {2, 2, 7}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t b = shapes[s][0], m = shapes[s][1], n = shapes[s][2];
        for (int plant = 0; plant < 4; plant++) {
            for (size_t q = 0; q < sizeof vector_p / sizeof vector_p[0]; q++)
                norm_case(dt, b, m, n, TF__NORM_VECTOR, vector_p[q], plant);
            norm_case(dt, b, m, n, TF__NORM_FRO, 0, plant);
            norm_case(dt, b, m, n, TF__NORM_NUC, 0, plant);
            static const double matrix_p[] = {1, -1, 2, -2, INFINITY, -INFINITY};
            for (size_t q = 0; q < sizeof matrix_p / sizeof matrix_p[0]; q++)
                norm_case(dt, b, m, n, TF__NORM_MATRIX, matrix_p[q], plant);
        }
    }
}
END_TEST

START_TEST(test_trace_diagonal) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3, m = 5, n = 7, shape[3] = {b, m, n};
    for (int64_t off = -4; off <= 6; off++)
        for (int trace = 0; trace < 2; trace++) {
            lcx *a = rand_mats(dt, b * m * n);
            tf__linalg d = mat_desc(1);
            d.offset = off;
            pair p;
            pair_make(&p, trace ? TF__OP_TRACE : TF__OP_DIAGONAL, &d, dt, 3, shape, a, 0, NULL,
                      NULL);
            pair_run(&p, trace ? "trace" : "diagonal");
            const int64_t count = p.op[0].out[0].numel;
            check_close(trace ? "trace" : "diagonal", dt, p.out[ON_CPU][0], p.out[ON_GPU][0],
                        count, trace ? bound_of(dt, m, 8) : 0);
            release_all();
        }
}
END_TEST

/* ---- truncation ---- */

/* A truncated SVD on both sides; the kept rank and the report must agree. */
static void truncated_svd(tf_dtype dt, int64_t b, int64_t m, int64_t n, const tf__truncation *t,
                          int uv, lcx *a, pair *p) {
    const int64_t shape[3] = {b, m, n};
    tf__linalg d = mat_desc(1);
    d.truncate = 1;
    d.compute_uv = uv;
    d.trunc = *t;
    pair_make(p, TF__OP_SVD, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(p, "truncated svd");
}

/*
 * The GPU's singular values of a (b matrices), from an untruncated SVD with
 * vectors: the path the truncated ones take, so the values are the same bits.
 */
static lcx *gpu_values(tf_dtype dt, int64_t b, int64_t m, int64_t n, lcx *a) {
    const int64_t shape[3] = {b, m, n};
    tf__linalg d = mat_desc(1);
    d.compute_uv = 1;
    pair p;
    pair_make(&p, TF__OP_SVD, &d, dt, 3, shape, a, 0, NULL, NULL);
    pair_run(&p, "svd values");
    return p.out[ON_GPU][1];
}

START_TEST(test_svd_truncation) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 3, m = 9, n = 6, k = 6;
    lcx *a = rand_mats(dt, b * m * n);
    lcx *s = gpu_values(dt, b, m, n, a);
    /* Boundaries on the device's own values: exactly a value is dropped ("above" the cutoff). */
    for (int64_t j = 1; j < k; j++) {
        tf__truncation t;
        memset(&t, 0, sizeof t);
        t.cutoff = (double)creall(s[j]); /* matrix 0's value j: matrix 0 keeps exactly j */
        pair p;
        truncated_svd(dt, b, m, n, &t, 1, a, &p);
        const lcx *rep = p.out[ON_GPU][3];
        ck_assert_msg(creall(rep[0]) == (long double)j, "cutoff at s[%lld]: kept %Lg",
                      (long long)j, creall(rep[0]));
        for (int64_t i = 0; i < b; i++) {
            /* Away from the boundary the CPU must keep the same rank. */
            const lcx *si = s + i * k;
            int near = 0;
            for (int64_t l = 0; l < k; l++)
                near |= fabsl(creall(si[l]) - t.cutoff) <= 1e-3L * t.cutoff;
            if (i != 0 && !near) /* away from the boundary the CPU keeps the same rank */
                ck_assert_msg(creall(rep[3 * i]) == creall(p.out[ON_CPU][3][3 * i]),
                              "cutoff: cuda keeps %Lg, cpu %Lg", creall(rep[3 * i]),
                              creall(p.out[ON_CPU][3][3 * i]));
            const int64_t r = (int64_t)creall(rep[3 * i]);
            for (int64_t l = r; l < k; l++) ck_assert(p.out[ON_GPU][1][i * k + l] == 0);
            for (int64_t row = 0; row < m; row++)
                for (int64_t l = r; l < k; l++) ck_assert(p.out[ON_GPU][0][i * m * k + row * k + l] == 0);
            long double disc = 0, tot = 0;
            for (int64_t l = 0; l < k; l++) {
                tot += powl(creall(si[l]), 2);
                if (l >= r) disc += powl(creall(si[l]), 2);
            }
            check_close("report discarded", TF_F64, &(lcx){disc}, &rep[3 * i + 1], 1,
                        bound_of(dt, k, tot));
        }
        release_device(); /* a and s stay */
    }
    /* max_rank and min_rank bound the width; absorb and renormalize against the CPU. */
    for (int absorb = 0; absorb < 4; absorb++)
        for (int renorm = 0; renorm < 2; renorm++) {
            tf__truncation t;
            memset(&t, 0, sizeof t);
            t.max_rank = 4;
            t.min_rank = 2;
            t.rel_cutoff = (double)(creall(s[3]) / creall(s[0])) * 1.5; /* drops matrix 0's 4th */
            t.absorb = (tf__absorb)absorb;
            t.renormalize = renorm;
            pair p;
            truncated_svd(dt, b, m, n, &t, 1, a, &p);
            const int64_t w = 4;
            for (int64_t i = 0; i < b; i++) {
                const long double norm = fro(a + i * m * n, m * n);
                check_close("truncated S", dt, p.out[ON_CPU][1] + i * w, p.out[ON_GPU][1] + i * w,
                            w, bound_of(dt, m, norm));
                ck_assert(creall(p.out[ON_GPU][3][3 * i]) == creall(p.out[ON_CPU][3][3 * i]));
                const long double gap = min_gap(s + i * k, k, 1);
                if (!(gap > 1e-3L * creall(s[i * k]))) continue;
                const long double vb = bound_of(dt, m, (norm + 1) * (norm + 1) / gap);
                check_close("truncated U", dt, p.out[ON_CPU][0] + i * m * w,
                            p.out[ON_GPU][0] + i * m * w, m * w, vb);
                check_close("truncated Vh", dt, p.out[ON_CPU][2] + i * w * n,
                            p.out[ON_GPU][2] + i * w * n, w * n, vb);
                check_close("report", TF_F64, p.out[ON_CPU][3] + 3 * i, p.out[ON_GPU][3] + 3 * i, 3,
                            bound_of(dt, k, norm * norm));
            }
            release_device(); /* a and s stay */
        }
    /* Values only, with a discarded weight exactly at a tail's sum of squares. */
    tf__truncation t;
    memset(&t, 0, sizeof t);
    t.discarded_weight = (double)(powl(creall(s[5]), 2) + powl(creall(s[4]), 2));
    pair p;
    truncated_svd(dt, b, m, n, &t, 0, a, &p);
    ck_assert_msg(creall(p.out[ON_GPU][1][0]) >= 4 && creall(p.out[ON_GPU][1][0]) <= 5,
                  "discarded weight at the tail's weight keeps %Lg", creall(p.out[ON_GPU][1][0]));
    release_device(); /* a and s stay */
}
END_TEST

START_TEST(test_eigh_truncation) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t b = 4, n = 7, shape[3] = {b, n, n};
    for (size_t r = 0; r < sizeof eigh_routines / sizeof eigh_routines[0]; r++)
        for (int64_t max_rank = 0; max_rank <= 5; max_rank += 5) {
            tfd_cuda_linalg_force(TFD_CUDA_SOLVER_AUTO, eigh_routines[r]);
            lcx *a = hermitian(dt, b, n, 0, 0);
            tf__linalg d = mat_desc(1);
            d.compute_uv = 1;
            d.truncate = 1;
            d.trunc.max_rank = max_rank;
            d.trunc.rel_cutoff = 0.2;
            pair p;
            pair_make(&p, TF__OP_EIGH, &d, dt, 3, shape, a, 0, NULL, NULL);
            pair_run(&p, "truncated eigh");
            const int64_t w = p.op[0].desc.rank;
            for (int64_t i = 0; i < b; i++) {
                const lcx *W = p.out[ON_GPU][0] + i * w, *Wc = p.out[ON_CPU][0] + i * w;
                const long double norm = fro(a + i * n * n, n * n);
                ck_assert(creall(p.out[ON_GPU][2][3 * i]) == creall(p.out[ON_CPU][2][3 * i]));
                check_close("truncated W", dt, Wc, W, w, bound_of(dt, n, norm));
                const int64_t kept = (int64_t)creall(p.out[ON_GPU][2][3 * i]);
                for (int64_t j = 0; j + 1 < kept; j++)
                    ck_assert_msg(fabsl(creall(W[j])) >= fabsl(creall(W[j + 1])),
                                  "truncated eigh: |W| not descending");
                for (int64_t j = kept; j < w; j++) ck_assert(W[j] == 0);
                const lcx *V = p.out[ON_GPU][1] + i * n * w;
                for (int64_t j = 0; j < kept; j++) check_gauge("truncated V", dt, V + j, n, w);
                check_orth("truncated V", dt, V, kept, n, 1, w);
            }
            release_all();
        }
}
END_TEST

/* ---- failures the device finds ---- */

/* Every output of the GPU side is zeros after a failure. */
static void expect_zeroed(const pair *p, const char *what) {
    for (int i = 0; i < p->op[ON_GPU].n_outputs; i++)
        check_zero(what, fetch(ON_GPU, &p->op[ON_GPU].out[i]), p->op[ON_GPU].out[i].numel);
}

/* The failure comes back (twice without consume, once with it), then nothing. */
static void expect_failure(tf_status want, uint64_t batch_want, uint32_t index_want,
                           const char *text) {
    for (int round = 0; round < 3; round++) {
        uint64_t batch;
        uint32_t index;
        const int consume = round == 2;
        tf_status st = gpu_failure(consume, &batch, &index);
        ck_assert_msg(st == want, "event_failure (round %d): %s (%s), want %s", round,
                      tf_status_name(st), msg, tf_status_name(want));
        ck_assert_msg(batch == batch_want && index == index_want,
                      "event_failure names batch %llu index %u, want %llu %u",
                      (unsigned long long)batch, index, (unsigned long long)batch_want,
                      index_want);
        ck_assert_msg(strstr(msg, text) != NULL, "event_failure: '%s' lacks '%s'", msg, text);
    }
    uint64_t batch;
    uint32_t index;
    tf_status st = gpu_failure(1, &batch, &index);
    ck_assert_msg(st == TF_OK, "the failure was reported again after its consume: %s (%s)",
                  tf_status_name(st), msg);
}

START_TEST(test_deferred_failure) {
    const tf_dtype dt = all_dtypes[_i];
    /* An event recorded before the failing operation covers nothing of it. */
    void *early = NULL;
    tfd_backend *gpu = &backends[ON_GPU];
    ck_assert_int_eq(gpu->vt->event_record(gpu, streams[ON_GPU], &early, msg, sizeof msg), TF_OK);

    /* nan in matrix 3 of 8: the call succeeds, the device finds it. */
    {
        const int64_t shape[3] = {8, 5, 4};
        lcx *a = rand_mats(dt, 8 * 5 * 4);
        a[3 * 20 + 7] = NAN;
        tf__linalg d = mat_desc(1);
        d.compute_uv = 1;
        pair p;
        pair_make(&p, TF__OP_SVD, &d, dt, 3, shape, a, 0, NULL, NULL);
        p.op[ON_GPU].batch = 41;
        p.op[ON_GPU].index = 5;
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "svd with nan: %s", msg);
        ck_assert_msg(pair_run_side(&p, ON_CPU) == TF_ERR_NOT_FINITE, "cpu: %s", msg);
        ck_assert_int_eq(gpu->vt->event_wait(gpu, early, msg, sizeof msg), TF_OK);
        uint64_t eb = 0;
        uint32_t ei = 0;
        ck_assert_msg(gpu->vt->event_failure(gpu, early, 0, &eb, &ei, msg, sizeof msg) == TF_OK,
                      "an event before the operation reports it: %s", msg);
        gpu->vt->event_destroy(gpu, early);
        expect_zeroed(&p, "svd with nan");
        expect_failure(TF_ERR_NOT_FINITE, 41, 5, "svd: matrix 3 of 8 holds nan or inf");
        release_all();
    }
    /* A singular solve, then a non-positive-definite cholesky: the first is reported first. */
    {
        const int64_t n = 4, sa[3] = {4, n, n}, sb[3] = {4, n, 2};
        lcx *a = well_conditioned(dt, 4, n), *bb = rand_mats(dt, 4 * n * 2);
        for (int64_t c = 0; c < n; c++) a[1 * n * n + 2 * n + c] = 0; /* matrix 1 singular */
        tf__linalg d = mat_desc(1);
        pair p;
        pair_make(&p, TF__OP_SOLVE, &d, dt, 3, sa, a, 3, sb, bb);
        p.op[ON_GPU].batch = 42;
        p.op[ON_GPU].index = 0;
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "singular solve: %s", msg);
        ck_assert_msg(pair_run_side(&p, ON_CPU) == TF_ERR_SINGULAR, "cpu: %s", msg);

        lcx *c = positive_definite(dt, 3, n, 0);
        c[2 * n * n + 1 * n + 1] = -100; /* matrix 2's second leading minor fails */
        const int64_t sc[3] = {3, n, n};
        pair q;
        pair_make(&q, TF__OP_CHOLESKY, &d, dt, 3, sc, c, 0, NULL, NULL);
        q.op[ON_GPU].batch = 43;
        q.op[ON_GPU].index = 2;
        ck_assert_msg(pair_run_side(&q, ON_GPU) == TF_OK, "cholesky: %s", msg);
        ck_assert_msg(pair_run_side(&q, ON_CPU) == TF_ERR_NOT_POSITIVE_DEFINITE, "cpu: %s", msg);
        expect_zeroed(&p, "singular solve");
        expect_zeroed(&q, "cholesky");
        /* Consuming the first consumes everything up to the event: the second went with it. */
        expect_failure(TF_ERR_SINGULAR, 42, 0, "solve: matrix 1 of 4 is singular");

        pair_make(&q, TF__OP_CHOLESKY, &d, dt, 3, sc, c, 0, NULL, NULL);
        q.op[ON_GPU].batch = 44;
        q.op[ON_GPU].index = 9;
        ck_assert_msg(pair_run_side(&q, ON_GPU) == TF_OK, "cholesky: %s", msg);
        expect_failure(TF_ERR_NOT_POSITIVE_DEFINITE, 44, 9,
                       "cholesky: matrix 2 of 3 is not positive definite (leading minor 2)");
        release_all();
    }
    /* A singular inverse, nan in B of a solve. */
    {
        const int64_t n = 3, sa[3] = {2, n, n}, sb[2] = {2, n};
        lcx *a = well_conditioned(dt, 2, n);
        for (int64_t r = 0; r < n; r++) a[n * n + r * n + 1] = 0; /* matrix 1: a zero column */
        tf__linalg d = mat_desc(1);
        pair p;
        pair_make(&p, TF__OP_INV, &d, dt, 3, sa, a, 0, NULL, NULL);
        p.op[ON_GPU].batch = 45;
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "singular inv: %s", msg);
        expect_zeroed(&p, "singular inv");
        expect_failure(TF_ERR_SINGULAR, 45, 7, "inv: matrix 1 of 2 is singular");
        lcx *a2 = well_conditioned(dt, 2, n), *bb = rand_mats(dt, 2 * n);
        bb[0] = INFINITY;
        pair_make(&p, TF__OP_SOLVE, &d, dt, 3, sa, a2, 2, sb, bb);
        p.op[ON_GPU].batch = 46;
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "solve with inf: %s", msg);
        expect_failure(TF_ERR_NOT_FINITE, 46, 7, "solve: matrix 0 of 2 holds nan or inf");
        release_all();
    }
}
END_TEST

/* ---- one launch for a batch of small matrices; the slot pool grows without blocking ---- */

START_TEST(test_batched_launch) {
    const tf_dtype dt = all_dtypes[_i];
    tfd_cuda_stream *gs = streams[ON_GPU];
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_SVD, dt, 64, 8, 8),
                     TFD_CUDA_SVD_GESVDJ_BATCHED);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_EIGH, dt, 64, 8, 8),
                     TFD_CUDA_EIGH_SYEVJ_BATCHED);
    uint64_t calls0, blocking0, calls1, blocking1;
    {
        const int64_t shape[3] = {64, 8, 8};
        lcx *a = rand_mats(dt, 64 * 64);
        tf__linalg d = mat_desc(1);
        d.compute_uv = 1;
        pair p;
        pair_make(&p, TF__OP_SVD, &d, dt, 3, shape, a, 0, NULL, NULL);
        tfd_cuda_linalg_counters(gs, &calls0, &blocking0);
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "batched svd: %s", msg);
        tfd_cuda_linalg_counters(gs, &calls1, &blocking1);
        ck_assert_msg(calls1 - calls0 == 1 && blocking1 == blocking0,
                      "64 SVDs of 8 x 8 took %llu cuSOLVER calls, %llu blocking reads",
                      (unsigned long long)(calls1 - calls0),
                      (unsigned long long)(blocking1 - blocking0));
        release_all();
    }
    {
        const int64_t shape[3] = {64, 8, 8};
        lcx *a = hermitian(dt, 64, 8, 0, 0);
        tf__linalg d = mat_desc(1);
        d.compute_uv = 1;
        pair p;
        pair_make(&p, TF__OP_EIGH, &d, dt, 3, shape, a, 0, NULL, NULL);
        tfd_cuda_linalg_counters(gs, &calls0, &blocking0);
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "batched eigh: %s", msg);
        tfd_cuda_linalg_counters(gs, &calls1, &blocking1);
        ck_assert_msg(calls1 - calls0 == 1 && blocking1 == blocking0,
                      "64 eighs of 8 x 8 took %llu cuSOLVER calls",
                      (unsigned long long)(calls1 - calls0));
        release_all();
    }
    /* 300 operations without a synchronize: more checks than the first slab holds. */
    const int64_t shape[3] = {1, 2, 2};
    lcx *a = well_conditioned(dt, 1, 2);
    tf__linalg d = mat_desc(1);
    pair p;
    pair_make(&p, TF__OP_DET, &d, dt, 3, shape, a, 0, NULL, NULL);
    tfd_cuda_linalg_counters(gs, &calls0, &blocking0);
    for (int i = 0; i < 300; i++)
        ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "det %d: %s", i, msg);
    tfd_cuda_linalg_counters(gs, &calls1, &blocking1);
    ck_assert_msg(blocking1 == blocking0, "%llu blocking reads",
                  (unsigned long long)(blocking1 - blocking0));
    uint64_t batch;
    uint32_t index;
    ck_assert_int_eq(gpu_failure(1, &batch, &index), TF_OK);
    release_all();
}
END_TEST

/* ---- batched factorizations: QR, LU (solve, inv, det, slogdet) and Cholesky in one call ---- */

/*
 * The route a case runs: the table (AUTO), or every factorization forced per
 * matrix (the 64-bit cuSOLVER API) or batched (cublas<t>geqrfBatched,
 * cublas<t>getrfBatched + getrsBatched (inv: on the identity), cusolverDn<t>potrfBatched).
 * Which one ran is checked by the cuSOLVER/cuBLAS calls the stream counted:
 * one per batch (two for solve and inv) batched, one per matrix (two per
 * matrix for solve, inv and QR with Q) otherwise.
 */
enum { BF_AUTO, BF_PER, BF_BATCHED };

static const int64_t bf_batches[] = {1, 3, 100};
static const int64_t bf_sizes[] = {1, 2, 7, 32, 33};

static void bf_force(int route) {
    if (route == BF_PER)
        tfd_cuda_linalg_force_factor(TFD_CUDA_QR_XGEQRF, TFD_CUDA_LU_XGETRF, TFD_CUDA_CHOL_XPOTRF);
    else if (route == BF_BATCHED)
        tfd_cuda_linalg_force_factor(TFD_CUDA_QR_GEQRF_BATCHED, TFD_CUDA_LU_GETRF_BATCHED,
                                     TFD_CUDA_CHOL_POTRF_BATCHED);
    else
        tfd_cuda_linalg_force_factor(TFD_CUDA_SOLVER_AUTO, TFD_CUDA_SOLVER_AUTO,
                                     TFD_CUDA_SOLVER_AUTO);
}

/* Whether the route runs kind batched for this shape (batched QR only for m >= n). */
static int bf_batched(tf__op_kind kind, tf_dtype dt, int route, int64_t b, int64_t m, int64_t n) {
    if (route == BF_PER) return 0;
    if (route == BF_BATCHED) return kind != TF__OP_QR || m >= n;
    const tfd_cuda_solver r = tfd_cuda_linalg_choose(kind, dt, b, m, n);
    return r == TFD_CUDA_QR_GEQRF_BATCHED || r == TFD_CUDA_LU_GETRF_BATCHED ||
           r == TFD_CUDA_CHOL_POTRF_BATCHED;
}

/* The solver calls kind takes for b matrices, batched or not (uv: QR forms Q). */
static uint64_t bf_calls(tf__op_kind kind, int batched, int64_t b, int uv) {
    const uint64_t per = kind == TF__OP_SOLVE || kind == TF__OP_INV || (kind == TF__OP_QR && uv)
                             ? 2
                             : 1;
    return batched ? (kind == TF__OP_SOLVE || kind == TF__OP_INV ? 2 : 1) : per * (uint64_t)b;
}

/*
 * pair_run, with the GPU side's solver calls counted: they must be `calls`,
 * with no blocking read of a status word.
 */
static void bf_run(pair *p, const char *what, uint64_t calls) {
    tfd_cuda_stream *gs = streams[ON_GPU];
    uint64_t c0, k0, c1, k1;
    tfd_cuda_linalg_counters(gs, &c0, &k0);
    tf_status st = pair_run_side(p, ON_GPU);
    tfd_cuda_linalg_counters(gs, &c1, &k1);
    ck_assert_msg(st == TF_OK, "%s on cuda (%s): %s: %s (seed %llu)", what,
                  tf_dtype_name(p->op[ON_GPU].in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
    ck_assert_msg(c1 - c0 == calls && k1 == k0,
                  "%s (%s): %llu solver calls and %llu blocking reads, want %llu and 0", what,
                  tf_dtype_name(p->op[ON_GPU].in[0].dtype), (unsigned long long)(c1 - c0),
                  (unsigned long long)(k1 - k0), (unsigned long long)calls);
    st = pair_run_side(p, ON_CPU);
    ck_assert_msg(st == TF_OK, "%s on cpu (%s): %s: %s (seed %llu)", what,
                  tf_dtype_name(p->op[ON_CPU].in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
    for (int side = 0; side < 2; side++)
        for (int i = 0; i < p->op[side].n_outputs; i++)
            p->out[side][i] = fetch(side, &p->op[side].out[i]);
    uint64_t batch;
    uint32_t index;
    st = gpu_failure(1, &batch, &index);
    ck_assert_msg(st == TF_OK, "%s (%s): the device reported %s: %s (seed %llu)", what,
                  tf_dtype_name(p->op[ON_GPU].in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
}

/* The member of a batch of b that a case makes special: one in the middle (none for b = 1). */
static int64_t bf_middle(int64_t b) { return b == 1 ? -1 : b == 3 ? 1 : 57; }

/*
 * b random m x n matrices made well conditioned: the diagonal entries
 * (random magnitude and sign or phase) times 4n, larger than the rest of
 * their row together, so that the factors of the two backends are close
 * to within a small multiple of the rounding.
 */
static lcx *bf_dominant(tf_dtype dt, int64_t b, int64_t m, int64_t n) {
    lcx *a = rand_mats(dt, b * m * n);
    const int64_t k = m < n ? m : n;
    for (int64_t i = 0; i < b; i++)
        for (int64_t j = 0; j < k; j++) a[i * m * n + j * n + j] *= 4 * (m > n ? m : n);
    return a;
}

/*
 * QR of b m x n matrices; with `deficient`, the middle member's last column
 * is a copy of its first (rank n - 1: R's last diagonal entry is at the
 * rounding, Q's last column of the reduced form any unit vector orthogonal
 * to the others). Checked: R's zeros, its diagonal real and >= 0, Q
 * orthonormal, Q R = A, and the CPU's R and Q (the first k columns; for the
 * deficient member the first n - 1 columns of Q and rows of R).
 */
static void bf_qr_case(tf_dtype dt, int route, int64_t b, int64_t m, int64_t n, int full, int uv,
                       int deficient) {
    char what[128];
    snprintf(what, sizeof what, "batched qr %lldx%lldx%lld full %d uv %d route %d deficient %d",
             (long long)b, (long long)m, (long long)n, full, uv, route, deficient);
    bf_force(route);
    const int64_t shape[3] = {b, m, n}, k = m < n ? m : n, mid = bf_middle(b);
    lcx *a = bf_dominant(dt, b, m, n);
    const int def = deficient && mid >= 0 && n >= 2;
    if (def)
        for (int64_t r = 0; r < m; r++) a[mid * m * n + r * n + n - 1] = a[mid * m * n + r * n];
    tf__linalg d = mat_desc(1);
    d.full = full && uv;
    d.compute_uv = uv;
    pair p;
    pair_make(&p, TF__OP_QR, &d, dt, 3, shape, a, 0, NULL, NULL);
    bf_run(&p, what, bf_calls(TF__OP_QR, bf_batched(TF__OP_QR, dt, route, b, m, n), b, uv));
    const int64_t kq = full && uv ? m : k;
    const int o_r = uv ? 1 : 0;
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * m * n;
        const long double norm = fro(A, m * n), bd = bound_of(dt, m > n ? m : n, norm);
        const lcx *R = p.out[ON_GPU][o_r] + i * kq * n, *Rc = p.out[ON_CPU][o_r] + i * kq * n;
        for (int64_t r = 0; r < kq; r++)
            for (int64_t c = 0; c < n; c++)
                if (r > c || r >= k)
                    ck_assert_msg(R[r * n + c] == 0, "%s: matrix %lld: R[%lld, %lld] is not zero",
                                  what, (long long)i, (long long)r, (long long)c);
        for (int64_t j = 0; j < k; j++)
            ck_assert_msg(cimagl(R[j * n + j]) == 0 && creall(R[j * n + j]) >= 0,
                          "%s: matrix %lld: R[%lld, %lld] = %Lg%+Lgi is not real non-negative",
                          what, (long long)i, (long long)j, (long long)j, creall(R[j * n + j]),
                          cimagl(R[j * n + j]));
        const int is_def = def && i == mid;
        /* Rows of R and columns of Q fixed by the gauge: all k, or the first n - 1. */
        const int64_t fixed = is_def ? n - 1 : k;
        /*
         * The bounds of the factors: the rounding times the condition of the
         * fixed columns (about |A| / R[fixed - 1, fixed - 1]), times |A| for R.
         */
        const long double kappa = norm / creall(R[(fixed - 1) * n + fixed - 1]);
        const long double rb = bound_of(dt, m > n ? m : n, norm * kappa);
        const long double qb = bound_of(dt, m > n ? m : n, kappa);
        if (is_def) /* R's last diagonal entry: the rounding of an exact zero */
            ck_assert_msg(creall(R[(n - 1) * n + n - 1]) <= bd,
                          "%s: the deficient member's R[%lld, %lld] = %Lg > %Lg", what,
                          (long long)(n - 1), (long long)(n - 1), creall(R[(n - 1) * n + n - 1]),
                          bd);
        for (int64_t r = 0; r < fixed; r++) check_close(what, dt, Rc + r * n, R + r * n, n, rb);
        if (!uv) continue;
        const lcx *Q = p.out[ON_GPU][0] + i * m * kq, *Qc = p.out[ON_CPU][0] + i * m * kq;
        check_orth(what, dt, Q, kq, m, 1, kq);
        long double err = 0;
        for (int64_t r = 0; r < m; r++)
            for (int64_t c = 0; c < n; c++) {
                lcx s = 0;
                for (int64_t j = 0; j < kq; j++) s += Q[r * kq + j] * R[j * n + c];
                err += creall((s - A[r * n + c]) * conjl(s - A[r * n + c]));
            }
        ck_assert_msg(sqrtl(err) <= bd, "%s (%s): matrix %lld: |QR - A| %.3Lg > %.3Lg (seed %llu)",
                      what, tf_dtype_name(dt), (long long)i, sqrtl(err), bd,
                      (unsigned long long)g_seed);
        for (int64_t r = 0; r < m; r++)
            check_close(what, dt, Qc + r * kq, Q + r * kq, fixed, qb);
    }
    release_all();
}

/* Cholesky of b positive definite matrices: L L^H = A, zeros, the CPU's factor. */
static void bf_cholesky_case(tf_dtype dt, int route, int64_t b, int64_t n, int upper) {
    char what[112];
    snprintf(what, sizeof what, "batched cholesky %lldx%lld upper %d route %d", (long long)b,
             (long long)n, upper, route);
    bf_force(route);
    const int64_t shape[3] = {b, n, n};
    lcx *a = positive_definite(dt, b, n, upper);
    tf__linalg d = mat_desc(1);
    d.upper = upper;
    pair p;
    pair_make(&p, TF__OP_CHOLESKY, &d, dt, 3, shape, a, 0, NULL, NULL);
    bf_run(&p, what,
           bf_calls(TF__OP_CHOLESKY, bf_batched(TF__OP_CHOLESKY, dt, route, b, n, n), b, 0));
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * n * n, *L = p.out[ON_GPU][0] + i * n * n;
        long double err = 0, norm = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++) {
                if (upper ? c < r : c > r)
                    ck_assert_msg(L[r * n + c] == 0, "%s: matrix %lld: [%lld, %lld] not zero",
                                  what, (long long)i, (long long)r, (long long)c);
                lcx s = 0;
                for (int64_t l = 0; l < n; l++)
                    s += upper ? conjl(L[l * n + r]) * L[l * n + c]
                               : L[r * n + l] * conjl(L[c * n + l]);
                const lcx want = read_herm(A, n, upper, r, c);
                err += creall((s - want) * conjl(s - want));
                norm += creall(want * conjl(want));
            }
        const long double bd = bound_of(dt, n, sqrtl(norm));
        ck_assert_msg(sqrtl(err) <= bd, "%s (%s): matrix %lld: |L L^H - A| %.3Lg > %.3Lg (seed %llu)",
                      what, tf_dtype_name(dt), (long long)i, sqrtl(err), bd,
                      (unsigned long long)g_seed);
        for (int64_t j = 0; j < n; j++)
            ck_assert_msg(fabsl(cimagl(L[j * n + j])) <= bd && creall(L[j * n + j]) > 0,
                          "%s: matrix %lld: L[%lld, %lld] = %Lg%+Lgi is not real positive", what,
                          (long long)i, (long long)j, (long long)j, creall(L[j * n + j]),
                          cimagl(L[j * n + j]));
        check_close(what, dt, p.out[ON_CPU][0] + i * n * n, L, n * n,
                    bound_of(dt, n, sqrtl(sqrtl(norm)) * 4));
    }
    release_all();
}

/* solve (B [b, n] with vector, else [b, n, nrhs]) of b well-conditioned systems. */
static void bf_solve_case(tf_dtype dt, int route, int64_t b, int64_t n, int64_t nrhs,
                          int vector) {
    char what[112];
    snprintf(what, sizeof what, "batched solve %lldx%lld nrhs %lld vector %d route %d",
             (long long)b, (long long)n, (long long)nrhs, vector, route);
    bf_force(route);
    const int64_t sa[3] = {b, n, n}, sb3[3] = {b, n, nrhs}, sb2[2] = {b, n};
    lcx *a = well_conditioned(dt, b, n), *bb = rand_mats(dt, b * n * nrhs);
    tf__linalg d = mat_desc(1);
    pair p;
    pair_make(&p, TF__OP_SOLVE, &d, dt, 3, sa, a, vector ? 2 : 3, vector ? sb2 : sb3, bb);
    bf_run(&p, what, bf_calls(TF__OP_SOLVE, bf_batched(TF__OP_SOLVE, dt, route, b, n, n), b, 0));
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * n * n, *B = bb + i * n * nrhs, *X = p.out[ON_GPU][0] + i * n * nrhs;
        long double err = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < nrhs; c++) {
                lcx s = -B[r * nrhs + c];
                for (int64_t l = 0; l < n; l++) s += A[r * n + l] * X[l * nrhs + c];
                err += creall(s * conjl(s));
            }
        const long double bd = bound_of(dt, n, fro(A, n * n) * fro(X, n * nrhs) + 1);
        ck_assert_msg(sqrtl(err) <= bd, "%s (%s): matrix %lld: |AX - B| %.3Lg > %.3Lg (seed %llu)",
                      what, tf_dtype_name(dt), (long long)i, sqrtl(err), bd,
                      (unsigned long long)g_seed);
        check_close(what, dt, p.out[ON_CPU][0] + i * n * nrhs, X, n * nrhs,
                    bound_of(dt, n, fro(X, n * nrhs)));
    }
    release_all();
}

/* inv of b well-conditioned matrices: A inv(A) = I, the CPU's inverse. */
static void bf_inv_case(tf_dtype dt, int route, int64_t b, int64_t n) {
    char what[96];
    snprintf(what, sizeof what, "batched inv %lldx%lld route %d", (long long)b, (long long)n,
             route);
    bf_force(route);
    const int64_t sa[3] = {b, n, n};
    lcx *a = well_conditioned(dt, b, n);
    tf__linalg d = mat_desc(1);
    pair p;
    pair_make(&p, TF__OP_INV, &d, dt, 3, sa, a, 0, NULL, NULL);
    bf_run(&p, what, bf_calls(TF__OP_INV, bf_batched(TF__OP_INV, dt, route, b, n, n), b, 0));
    for (int64_t i = 0; i < b; i++) {
        const lcx *A = a + i * n * n, *X = p.out[ON_GPU][0] + i * n * n;
        long double err = 0;
        for (int64_t r = 0; r < n; r++)
            for (int64_t c = 0; c < n; c++) {
                lcx s = r == c ? -1 : 0;
                for (int64_t l = 0; l < n; l++) s += A[r * n + l] * X[l * n + c];
                err += creall(s * conjl(s));
            }
        const long double bd = bound_of(dt, n, fro(A, n * n) * fro(X, n * n));
        ck_assert_msg(sqrtl(err) <= bd,
                      "%s (%s): matrix %lld: |A inv(A) - I| %.3Lg > %.3Lg (seed %llu)", what,
                      tf_dtype_name(dt), (long long)i, sqrtl(err), bd, (unsigned long long)g_seed);
        check_close(what, dt, p.out[ON_CPU][0] + i * n * n, X, n * n,
                    bound_of(dt, n, fro(X, n * n)));
    }
    release_all();
}

/*
 * det or slogdet of b well-conditioned matrices scaled by 1 / (2n) (the
 * determinants stay near 1, far from f32's range), the middle member made
 * singular by a zero last row: an exactly zero pivot, so det 0, sign 0 and
 * logabsdet -inf, and no failure.
 */
static void bf_det_case(tf_dtype dt, int route, int64_t b, int64_t n, int slog) {
    char what[96];
    snprintf(what, sizeof what, "batched %s %lldx%lld route %d", slog ? "slogdet" : "det",
             (long long)b, (long long)n, route);
    bf_force(route);
    const int64_t sa[3] = {b, n, n}, mid = bf_middle(b);
    lcx *a = well_conditioned(dt, b, n);
    for (int64_t e = 0; e < b * n * n; e++) a[e] /= 2 * n;
    if (mid >= 0)
        for (int64_t c = 0; c < n; c++) a[mid * n * n + (n - 1) * n + c] = 0;
    tf__linalg d = mat_desc(1);
    pair p;
    const tf__op_kind kind = slog ? TF__OP_SLOGDET : TF__OP_DET;
    pair_make(&p, kind, &d, dt, 3, sa, a, 0, NULL, NULL);
    bf_run(&p, what, bf_calls(kind, bf_batched(kind, dt, route, b, n, n), b, 0));
    for (int64_t i = 0; i < b; i++) {
        const lcx g = p.out[ON_GPU][0][i], c = p.out[ON_CPU][0][i];
        if (i == mid) {
            ck_assert_msg(g == 0, "%s: matrix %lld is singular: %Lg%+Lgi", what, (long long)i,
                          creall(g), cimagl(g));
            if (slog)
                ck_assert_msg(isinf(creall(p.out[ON_GPU][1][i])) &&
                                  creall(p.out[ON_GPU][1][i]) < 0,
                              "%s: logabsdet of the singular matrix is %Lg", what,
                              creall(p.out[ON_GPU][1][i]));
            continue;
        }
        if (!slog) {
            check_close(what, dt, &c, &g, 1, bound_of(dt, n, cabsl(c)));
            continue;
        }
        check_close(what, dt, &c, &g, 1, bound_of(dt, n, 1));
        ck_assert_msg(fabsl(cabsl(g) - 1) <= bound_of(dt, 1, 1), "%s: sign is not a unit", what);
        const lcx lg = p.out[ON_GPU][1][i], lc = p.out[ON_CPU][1][i];
        check_close(what, dt, &lc, &lg, 1, bound_of(dt, n, fabsl(creall(lc)) + 1));
    }
    release_all();
}

START_TEST(test_batched_factor) {
    const tf_dtype dt = all_dtypes[_i];
    /* The table: batched for b >= 2 up to its bounds, per matrix otherwise. */
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_QR, dt, 100, 32, 32),
                     TFD_CUDA_QR_GEQRF_BATCHED);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_QR, dt, 100, 33, 33), TFD_CUDA_QR_XGEQRF);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_QR, dt, 100, 7, 9), TFD_CUDA_QR_XGEQRF);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_QR, dt, 1, 7, 7), TFD_CUDA_QR_XGEQRF);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_SOLVE, dt, 2, 64, 64),
                     TFD_CUDA_LU_GETRF_BATCHED);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_INV, dt, 100, 65, 65), TFD_CUDA_LU_XGETRF);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_DET, dt, 1, 2, 2), TFD_CUDA_LU_XGETRF);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_SLOGDET, dt, 3, 33, 33),
                     TFD_CUDA_LU_GETRF_BATCHED);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_CHOLESKY, dt, 3, 64, 64),
                     TFD_CUDA_CHOL_POTRF_BATCHED);
    ck_assert_int_eq(tfd_cuda_linalg_choose(TF__OP_CHOLESKY, dt, 1, 7, 7), TFD_CUDA_CHOL_XPOTRF);
    for (size_t bi = 0; bi < sizeof bf_batches / sizeof bf_batches[0]; bi++)
        for (size_t ni = 0; ni < sizeof bf_sizes / sizeof bf_sizes[0]; ni++) {
            const int64_t b = bf_batches[bi], n = bf_sizes[ni];
            /* The table's route everywhere; both forced routes where it is cheap (b <= 3). */
            for (int route = BF_AUTO; route <= (b <= 3 ? BF_BATCHED : BF_AUTO); route++) {
                for (int mode = 0; mode < 3; mode++) /* reduced, complete, R alone */
                    bf_qr_case(dt, route, b, n, n, mode == 1, mode != 2, 1);
                bf_qr_case(dt, route, b, n + 4, n, 0, 1, 1); /* tall, reduced */
                bf_qr_case(dt, route, b, n + 4, n, 1, 1, 0); /* tall, complete */
                if (n >= 2) bf_qr_case(dt, route, b, n - 1, n, 0, 1, 0); /* wide: per matrix */
                for (int upper = 0; upper < 2; upper++)
                    bf_cholesky_case(dt, route, b, n, upper);
                bf_solve_case(dt, route, b, n, 1, 1);
                bf_solve_case(dt, route, b, n, 3, 0);
                bf_inv_case(dt, route, b, n);
                bf_det_case(dt, route, b, n, 0);
                bf_det_case(dt, route, b, n, 1);
            }
        }
    /* Past the bounds the batched routines still serve when forced. */
    bf_qr_case(dt, BF_BATCHED, 5, 40, 33, 0, 1, 1);
    bf_cholesky_case(dt, BF_BATCHED, 5, 65, 0);
    bf_solve_case(dt, BF_BATCHED, 5, 65, 2, 0);
    bf_inv_case(dt, BF_BATCHED, 5, 65);
}
END_TEST

/*
 * Failures in the middle of a batch (member 1 of 3, 57 of 100), and a
 * second failing member later (99 of 100): the first is reported, with the
 * operation's batch and index, every output holds zeros, and the CPU
 * (LAPACK) fails the same way.
 */
START_TEST(test_batched_factor_failure) {
    const tf_dtype dt = all_dtypes[_i];
    for (int64_t b = 3; b <= 100; b += 97)
        for (size_t ni = 0; ni < sizeof bf_sizes / sizeof bf_sizes[0]; ni++)
            for (int route = BF_AUTO; route <= BF_BATCHED; route += BF_BATCHED - BF_AUTO) {
                const int64_t n = bf_sizes[ni], mid = bf_middle(b), late = b == 100 ? 99 : -1;
                bf_force(route);
                char text[160];
                const int64_t sa[3] = {b, n, n}, sb[3] = {b, n, 2};
                tf__linalg d = mat_desc(1);
                pair p;
                /* solve and inv: a zero row, an exactly zero pivot. */
                for (int inv = 0; inv < 2; inv++) {
                    lcx *a = well_conditioned(dt, b, n), *bb = rand_mats(dt, b * n * 2);
                    for (int64_t c = 0; c < n; c++) {
                        a[mid * n * n + (n - 1) * n + c] = 0;
                        if (late >= 0) a[late * n * n + c] = 0;
                    }
                    pair_make(&p, inv ? TF__OP_INV : TF__OP_SOLVE, &d, dt, 3, sa, a, inv ? 0 : 3,
                              inv ? NULL : sb, inv ? NULL : bb);
                    p.op[ON_GPU].batch = 60 + (uint64_t)inv;
                    p.op[ON_GPU].index = 3;
                    ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "singular %s: %s",
                                  inv ? "inv" : "solve", msg);
                    ck_assert_msg(pair_run_side(&p, ON_CPU) == TF_ERR_SINGULAR, "cpu: %s", msg);
                    expect_zeroed(&p, inv ? "singular inv" : "singular solve");
                    snprintf(text, sizeof text, "%s: matrix %lld of %lld is singular",
                             inv ? "inv" : "solve", (long long)mid, (long long)b);
                    expect_failure(TF_ERR_SINGULAR, 60 + (uint64_t)inv, 3, text);
                    release_all();
                }
                /* cholesky: a negative diagonal entry fails its leading minor. */
                for (int upper = 0; upper < 2; upper++) {
                    lcx *a = positive_definite(dt, b, n, upper);
                    const int64_t q = n >= 2 ? 1 : 0;
                    a[mid * n * n + q * n + q] = -100;
                    if (late >= 0) a[late * n * n] = -100;
                    tf__linalg dc = mat_desc(1);
                    dc.upper = upper;
                    pair_make(&p, TF__OP_CHOLESKY, &dc, dt, 3, sa, a, 0, NULL, NULL);
                    p.op[ON_GPU].batch = 62;
                    p.op[ON_GPU].index = 4;
                    ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "cholesky: %s", msg);
                    ck_assert_msg(pair_run_side(&p, ON_CPU) == TF_ERR_NOT_POSITIVE_DEFINITE,
                                  "cpu: %s", msg);
                    expect_zeroed(&p, "cholesky");
                    snprintf(text, sizeof text,
                             "cholesky: matrix %lld of %lld is not positive definite (leading "
                             "minor %lld)",
                             (long long)mid, (long long)b, (long long)(q + 1));
                    expect_failure(TF_ERR_NOT_POSITIVE_DEFINITE, 62, 4, text);
                    release_all();
                }
                /* qr: nan in the middle member. */
                {
                    lcx *a = bf_dominant(dt, b, n, n);
                    a[mid * n * n + (n * n) / 2] = NAN;
                    if (late >= 0) a[late * n * n] = INFINITY;
                    tf__linalg dq = mat_desc(1);
                    dq.compute_uv = 1;
                    pair_make(&p, TF__OP_QR, &dq, dt, 3, sa, a, 0, NULL, NULL);
                    p.op[ON_GPU].batch = 63;
                    p.op[ON_GPU].index = 5;
                    ck_assert_msg(pair_run_side(&p, ON_GPU) == TF_OK, "qr: %s", msg);
                    ck_assert_msg(pair_run_side(&p, ON_CPU) == TF_ERR_NOT_FINITE, "cpu: %s", msg);
                    expect_zeroed(&p, "qr with nan");
                    snprintf(text, sizeof text, "qr: matrix %lld of %lld holds nan or inf",
                             (long long)mid, (long long)b);
                    expect_failure(TF_ERR_NOT_FINITE, 63, 5, text);
                    release_all();
                }
            }
}
END_TEST

/* ---- slice ---- */

START_TEST(test_slice) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t shape[3] = {5, 6, 7};
    static const int64_t cases[][9] = {
        {0, 1, 5, 0, 1, 6, 0, 1, 7},    {1, 1, 3, 0, 1, 6, 0, 1, 7},
        {0, 1, 5, 2, 1, 3, 0, 1, 7},    {0, 2, 3, 1, 1, 4, 2, 1, 3},
        {4, -1, 5, 5, -2, 3, 6, -1, 7}, {2, 1, 1, 3, 1, 1, 0, 3, 3},
        {4, -2, 3, 0, 1, 6, 0, 1, 7},   {0, 1, 5, 0, 5, 2, 6, -6, 2},
    };
    lcx *vals = rand_mats(dt, 5 * 6 * 7);
    const void *h = round_vals(dt, 5 * 6 * 7, vals);
    tfd_tensor_view in[2];
    for (int side = 0; side < 2; side++) {
        in[side] = dev_tensor(side, dt, 3, shape);
        upload_bytes(side, &in[side], h);
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tf__meta im, om;
        memset(&im, 0, sizeof im);
        im.dtype = dt;
        im.rank = 3;
        for (int i = 0; i < 3; i++) im.shape[i] = shape[i];
        char why[256] = "";
        ck_assert_msg(tf__infer_output(TF__OP_SLICE, &im, 1, cases[c], 9, 0, &om, why,
                                       sizeof why) == TF_OK, "slice rules: %s", why);
        lcx *got[2];
        for (int side = 0; side < 2; side++) {
            tfd_op op;
            memset(&op, 0, sizeof op);
            op.kind = TF__OP_SLICE;
            op.n_inputs = 1;
            op.in[0] = in[side];
            op.n_params = 9;
            for (int i = 0; i < 9; i++) op.params[i] = cases[c][i];
            op.out = dev_tensor(side, om.dtype, om.rank, om.shape);
            msg[0] = '\0';
            tf_status st = tfd_backend_run_op(&backends[side], streams[side], &op, msg, sizeof msg);
            ck_assert_msg(st == TF_OK, "slice case %zu on %s: %s %s", c,
                          backends[side].vt->name, tf_status_name(st), msg);
            got[side] = fetch(side, &op.out);
        }
        const int64_t count = cases[c][2] * cases[c][5] * cases[c][8];
        for (int64_t o = 0; o < count; o++)
            ck_assert_msg(got[ON_GPU][o] == got[ON_CPU][o], "slice case %zu: element %lld", c,
                          (long long)o);
    }
    /* A triple reaching outside the axis is refused, not read. */
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_SLICE;
    op.n_inputs = 1;
    op.in[0] = in[ON_GPU];
    op.n_params = 9;
    const int64_t bad[9] = {0, 1, 5, 0, 1, 6, 3, 2, 3};
    for (int i = 0; i < 9; i++) op.params[i] = bad[i];
    const int64_t so[3] = {5, 6, 3};
    op.out = dev_tensor(ON_GPU, dt, 3, so);
    ck_assert_int_eq(tfd_backend_run_op(&backends[ON_GPU], streams[ON_GPU], &op, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    release_all();
}
END_TEST

static Suite *cuda_linalg_suite(void) {
    Suite *s = suite_create("cuda-linalg");
    TCase *tc = tcase_create("linalg");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_svd, 0, 4);
    tcase_add_loop_test(tc, test_qr, 0, 4);
    tcase_add_loop_test(tc, test_eigh, 0, 4);
    tcase_add_loop_test(tc, test_cholesky, 0, 4);
    tcase_add_loop_test(tc, test_solve_inv, 0, 4);
    tcase_add_loop_test(tc, test_det, 0, 4);
    tcase_add_loop_test(tc, test_norm, 0, 4);
    tcase_add_loop_test(tc, test_trace_diagonal, 0, 4);
    tcase_add_loop_test(tc, test_svd_truncation, 0, 4);
    tcase_add_loop_test(tc, test_eigh_truncation, 0, 4);
    tcase_add_loop_test(tc, test_deferred_failure, 0, 4);
    tcase_add_loop_test(tc, test_batched_launch, 0, 4);
    tcase_add_loop_test(tc, test_batched_factor, 0, 4);
    tcase_add_loop_test(tc, test_batched_factor_failure, 0, 4);
    tcase_add_loop_test(tc, test_slice, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

/* The ordinal of "cuda" (0) or "cuda:N", or -1 when the name is neither. */
static int parse_ordinal(const char *device) {
    if (device[4] == '\0') return 0;
    if (device[4] != ':') return -1;
    char *end = NULL;
    const long n = strtol(device + 5, &end, 10);
    return end == device + 5 || *end != '\0' || n < 0 || n > 4095 ? -1 : (int)n;
}
#endif /* TFD_HAVE_CUDA */

int main(void) {
#ifndef TFD_HAVE_CUDA
    printf("test-cuda-linalg: built without the CUDA backend, nothing to test\n");
    return 0;
#else
    const char *device = getenv("TENFERRO_TEST_DEVICE");
    if (device == NULL || strncmp(device, "cuda", 4) != 0 || access("/dev/nvidiactl", F_OK) != 0) {
        printf("test-cuda-linalg: device tests skipped: no CUDA device "
               "(set TENFERRO_TEST_DEVICE=cuda:0 on a GPU machine)\n");
        return 0;
    }
    gpu_ordinal = parse_ordinal(device);
    if (gpu_ordinal < 0) {
        fprintf(stderr, "test-cuda-linalg: TENFERRO_TEST_DEVICE=%s is neither cuda nor cuda:N\n",
                device);
        return EXIT_FAILURE;
    }
    const char *seed = getenv("TFCK_SEED");
    g_seed = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test-cuda-linalg: cuda:%d, seed %llu (replay with TFCK_SEED=%llu)\n", gpu_ordinal,
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(cuda_linalg_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
