/*
 * Integration tests of every operation, run through a real tenferrod.
 *
 * Each test starts its own daemon, connects one client, uploads fresh random
 * inputs (never zeros; positive ones for log and sqrt) and checks every
 * operation, for every dtype it serves, against a reference computed here by
 * plain loops in double / double complex arithmetic, independently of the
 * daemon's kernels. The operations are described by tables (elementwise,
 * shape-changing, matmul) rather than one function per operation. Work runs
 * alternately in scoped bursts (tf_with_session) and in held sessions (open,
 * with, synchronize, download, close), so both entry paths carry every kind
 * of operation. Besides the operations: a chain of dependent operations,
 * rank-0 tensors, tf_download_into's buffer reuse, tensors larger than the
 * daemon's frame limit (through the staging buffer, and inline in many
 * chunks when a pinned quota refuses the staging buffer), and, at the end of
 * every test, that freeing every tensor returns the daemon's device memory to zero.
 *
 * Tolerances are relative, th_tolerance(dtype), with a floor of 1 so that
 * results near zero are judged by absolute error; for sums and matrix
 * products (whose rounding grows with the number of terms k) they are scaled
 * by k, and the chain of four dependent operations allows four roundings.
 * Layout operations and max/min must be exact. The harness prints the
 * seed of the random inputs; TENFERRO_TEST_SEED=<n> replays a run.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/harness.h"

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* The coefficients of scale and axpby; real dtypes use only the real parts. */
static const tf_scalar ALPHA = {0.7, -1.3};
static const tf_scalar BETA = {-0.4, 0.9};

/* ---- the per-test fixture: one daemon, one client, everything to release ---- */

#define MAX_KEPT 1024

static struct {
    th_daemon d;
    tf_client *c;
    tf_tensor tensors[MAX_KEPT];
    int n_tensors;
    void *host[MAX_KEPT];
    int n_host;
} F;

/* Fails the test with the call, the status and the client's message unless the call succeeds. */
#define EXPECT_OK(call)                                                                        \
    do {                                                                                       \
        tf_status st_ = (call);                                                                \
        ck_assert_msg(st_ == TF_OK, "%s: %s: %s (seed %u)", #call, tf_status_name(st_),        \
                      tf_client_last_error(F.c), th_seed());                                   \
    } while (0)

/* Returns from a session callback with the first failing call's status. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        tf_status st_ = (call);                                                                \
        if (st_ != TF_OK) return st_;                                                          \
    } while (0)

/*
 * Starts a private daemon and connects: with --max-frame-bytes when max_frame
 * is given, and --client-pinned-bytes when pinned is.
 */
static void start_with(const char *max_frame, const char *pinned) {
    memset(&F, 0, sizeof F);
    int rc = pinned ? th_daemon_start(&F.d, "--max-frame-bytes", max_frame, "--client-pinned-bytes",
                                      pinned, NULL)
             : max_frame ? th_daemon_start(&F.d, "--max-frame-bytes", max_frame, NULL)
                         : th_daemon_start(&F.d, NULL);
    ck_assert_msg(rc == 0, "tenferrod did not start");
    F.c = th_connect(&F.d);
}

/* Starts a private daemon (with --max-frame-bytes when max_frame is given) and connects. */
static void start(const char *max_frame) { start_with(max_frame, NULL); }

/* Remembers a tensor so that finish() frees it; returns it. */
static tf_tensor keep(tf_tensor t) {
    ck_assert_int_lt(F.n_tensors, MAX_KEPT);
    F.tensors[F.n_tensors++] = t;
    return t;
}

/* Remembers a malloc'd host buffer so that finish() frees it; returns it. */
static void *keep_host(void *p) {
    ck_assert_ptr_nonnull(p);
    ck_assert_int_lt(F.n_host, MAX_KEPT);
    F.host[F.n_host++] = p;
    return p;
}

/* A zeroed host buffer released by finish(). */
static void *scratch(size_t bytes) { return keep_host(calloc(bytes ? bytes : 1, 1)); }

/* Frees every kept tensor, checks device memory drains to zero, and stops the daemon cleanly. */
static void finish(void) {
    for (int i = 0; i < F.n_tensors; i++) EXPECT_OK(tf_tensor_free(F.c, F.tensors[i]));
    F.n_tensors = 0;
    ck_assert_msg(th_wait_counter(&F.d, "device_allocations_live", 0, 5000),
                  "device_allocations_live is %llu after every tensor was freed",
                  (unsigned long long)th_counter(&F.d, "device_allocations_live"));
    ck_assert_msg(th_wait_counter(&F.d, "device_bytes_live", 0, 5000),
                  "device_bytes_live is %llu after every tensor was freed",
                  (unsigned long long)th_counter(&F.d, "device_bytes_live"));
    tf_disconnect(F.c);
    F.c = NULL;
    ck_assert_msg(th_daemon_stop(&F.d) == 0, "tenferrod did not exit cleanly; log %s",
                  F.d.log_path);
    for (int i = 0; i < F.n_host; i++) free(F.host[i]);
    F.n_host = 0;
}

/* ---- host data: widening to double complex, narrowing back, comparing ---- */

/* A coefficient as the daemon applies it to dtype dt: the imaginary part only for complex. */
static double complex coefficient(tf_dtype dt, tf_scalar s) {
    return th_is_complex(dt) ? CMPLX(s.re, s.im) : CMPLX(s.re, 0.0);
}

/* Widens n elements of dtype dt to double complex, into a buffer finish() releases. */
static double complex *widen(tf_dtype dt, size_t n, const void *buf) {
    double complex *z = scratch(n * sizeof *z);
    th_widen(dt, n, buf, z);
    return z;
}

/* Rounds n double complex values to dtype dt's layout, into a buffer finish() releases. */
static void *narrow(tf_dtype dt, size_t n, const double complex *z) {
    void *buf = scratch(n * tf_dtype_size(dt));
    th_narrow(dt, n, z, buf);
    return buf;
}

/* Uploads fresh random (or positive) values; *values receives them widened, for references. */
static tf_tensor upload_fresh(tf_dtype dt, int rank, const int64_t *shape, int positive,
                              double complex **values) {
    size_t n = th_numel(rank, shape);
    void *buf = scratch(n * tf_dtype_size(dt));
    (positive ? th_fill_positive : th_fill_random)(dt, n, buf);
    tf_tensor t = 0;
    EXPECT_OK(tf_upload(F.c, dt, rank, shape, buf, &t));
    ck_assert_uint_ne(t, 0);
    if (values) *values = widen(dt, n, buf);
    return keep(t);
}

/* Downloads t after checking its dtype, rank and shape; returns its data. */
static void *fetch(tf_tensor t, tf_dtype dt, int rank, const int64_t *shape) {
    tf_dtype got_dt;
    int got_rank;
    int64_t got_shape[TF_MAX_RANK];
    EXPECT_OK(tf_tensor_info(F.c, t, &got_dt, &got_rank, got_shape));
    ck_assert_msg(got_dt == dt, "tensor %llu is %s, expected %s", (unsigned long long)t,
                  tf_dtype_name(got_dt), tf_dtype_name(dt));
    ck_assert_int_eq(got_rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(got_shape[i], shape[i]);
    void *data = NULL;
    size_t bytes = 0;
    EXPECT_OK(tf_download(F.c, t, &data, &bytes));
    keep_host(data);
    ck_assert_uint_eq(bytes, th_numel(rank, shape) * tf_dtype_size(dt));
    return data;
}

/* Asserts that n downloaded elements of dt match the reference within tol (relative, floor). */
static void expect_close(const char *what, tf_dtype dt, size_t n, const void *got,
                         const double complex *ref, double floor, double tol) {
    double diff = th_max_rel_diff(dt, n, got, narrow(dt, n, ref), floor);
    ck_assert_msg(diff <= tol, "%s on %s: relative difference %g above %g (seed %u)", what,
                  tf_dtype_name(dt), diff, tol, th_seed());
}

/* ---- sessions: both entry paths ---- */

/*
 * Runs fn once, as a scoped burst (held == 0) or in a held session (open,
 * with, synchronize, download, close), keeps the output fn wrote to *out and
 * returns that output's data, downloaded and checked to be of dtype dt, rank
 * and shape.
 */
static const void *run_fetch(int held, tf_session_fn fn, void *arg, const tf_tensor *out,
                             tf_dtype dt, int rank, const int64_t *shape) {
    if (!held) {
        EXPECT_OK(tf_with_session(F.c, fn, arg));
        return fetch(keep(*out), dt, rank, shape);
    }
    tf_session *s = NULL;
    EXPECT_OK(tf_session_open(F.c, &s));
    EXPECT_OK(tf_session_with(s, fn, arg));
    EXPECT_OK(tf_session_synchronize(s));
    const void *got = fetch(keep(*out), dt, rank, shape);
    tf_session_counters k;
    EXPECT_OK(tf_session_close(s, &k));
    ck_assert_uint_eq(k.held_operations, 1);
    ck_assert_uint_eq(k.explicit_synchronizes, 1);
    ck_assert_uint_eq(k.close_submits, 1);
    ck_assert_uint_eq(k.failed_submits + k.failed_synchronizes, 0);
    return got;
}

typedef tf_status (*unary_fn)(tf_view *, tf_tensor, tf_tensor *);
typedef tf_status (*binary_fn)(tf_view *, tf_tensor, tf_tensor, tf_tensor *);

/* One operation to queue: a unary or binary view call, else scale (one input) or axpby (two). */
typedef struct call_job {
    unary_fn unary;
    binary_fn binary;
    int arity;
    tf_scalar alpha, beta;
    tf_tensor in[2];
    tf_tensor out;
} call_job;

/* Session callback: queues the job's one operation. */
static tf_status run_call(tf_view *v, void *arg) {
    call_job *j = arg;
    if (j->unary) return j->unary(v, j->in[0], &j->out);
    if (j->binary) return j->binary(v, j->in[0], j->in[1], &j->out);
    if (j->arity == 1) return tf_view_scale(v, j->alpha, j->in[0], &j->out);
    return tf_view_axpby(v, j->alpha, j->in[0], j->beta, j->in[1], &j->out);
}

/* ---- elementwise operations ---- */

/* A reference of one element: a and b are the inputs, alpha and beta the coefficients. */
typedef double complex (*ref_fn)(double complex a, double complex b, double complex alpha,
                                 double complex beta);

#define DEFINE_REF(NAME, EXPR)                                                                 \
    static double complex NAME(double complex a, double complex b, double complex alpha,       \
                               double complex beta) {                                          \
        (void)a, (void)b, (void)alpha, (void)beta;                                             \
        return EXPR;                                                                           \
    }

DEFINE_REF(ref_add, a + b)
DEFINE_REF(ref_sub, a - b)
DEFINE_REF(ref_mul, a * b)
DEFINE_REF(ref_div, a / b)
DEFINE_REF(ref_neg, -a)
DEFINE_REF(ref_conj, conj(a))
DEFINE_REF(ref_abs, cabs(a))
DEFINE_REF(ref_exp, cexp(a))
DEFINE_REF(ref_log, clog(a))
DEFINE_REF(ref_sqrt, csqrt(a))
DEFINE_REF(ref_square, a * a)
DEFINE_REF(ref_scale, alpha * a)
DEFINE_REF(ref_axpby, alpha * a + beta * b)

/* An elementwise operation: its view call (none for scale and axpby), inputs, and reference. */
typedef struct ew_op {
    const char *name;
    unary_fn unary;
    binary_fn binary;
    int arity;
    int positive; /* inputs from th_fill_positive (log, sqrt) */
    int real_out; /* complex inputs give the real dtype (abs) */
    ref_fn ref;
} ew_op;

static const ew_op ew_ops[] = {
    {"add", NULL, tf_view_add, 2, 0, 0, ref_add},
    {"sub", NULL, tf_view_sub, 2, 0, 0, ref_sub},
    {"mul", NULL, tf_view_mul, 2, 0, 0, ref_mul},
    {"div", NULL, tf_view_div, 2, 0, 0, ref_div},
    {"neg", tf_view_neg, NULL, 1, 0, 0, ref_neg},
    {"conj", tf_view_conj, NULL, 1, 0, 0, ref_conj},
    {"abs", tf_view_abs, NULL, 1, 0, 1, ref_abs},
    {"exp", tf_view_exp, NULL, 1, 0, 0, ref_exp},
    {"log", tf_view_log, NULL, 1, 1, 0, ref_log},
    {"sqrt", tf_view_sqrt, NULL, 1, 1, 0, ref_sqrt},
    {"square", tf_view_square, NULL, 1, 0, 0, ref_square},
    {"scale", NULL, NULL, 1, 0, 0, ref_scale},
    {"axpby", NULL, NULL, 2, 0, 0, ref_axpby},
};
#define N_EW_OPS (sizeof ew_ops / sizeof *ew_ops)

/* Every elementwise operation on one dtype, fresh inputs each, alternating session kinds. */
START_TEST(test_elementwise) {
    const tf_dtype dt = all_dtypes[_i];
    const int64_t shape[3] = {7, 11, 13};
    const size_t n = th_numel(3, shape);
    const double complex alpha = coefficient(dt, ALPHA), beta = coefficient(dt, BETA);
    start(NULL);
    for (size_t k = 0; k < N_EW_OPS; k++) {
        const ew_op *op = &ew_ops[k];
        call_job job = {op->unary, op->binary, op->arity, ALPHA, BETA, {0, 0}, 0};
        double complex *x[2] = {NULL, NULL};
        for (int i = 0; i < op->arity; i++)
            job.in[i] = upload_fresh(dt, 3, shape, op->positive, &x[i]);
        const tf_dtype out_dt = op->real_out ? th_real_of(dt) : dt;
        const int held = (int)(k + (size_t)_i) % 2;
        const void *got = run_fetch(held, run_call, &job, &job.out, out_dt, 3, shape);
        double complex *ref = scratch(n * sizeof *ref);
        for (size_t i = 0; i < n; i++) ref[i] = op->ref(x[0][i], x[1] ? x[1][i] : 0, alpha, beta);
        expect_close(op->name, out_dt, n, got, ref, 1.0, th_tolerance(dt));
    }
    finish();
}
END_TEST

/* ---- shape-changing operations: permute, reshape, copy, reductions ---- */

typedef enum shaped_kind { PERMUTE, RESHAPE, COPY, REDUCE } shaped_kind;

/* One shape-changing case; the output shape is written out by hand, not derived. */
typedef struct shaped_case {
    const char *name;
    shaped_kind kind;
    tf_reduce_kind reduce;
    int rank;
    int64_t shape[TF_MAX_RANK];
    int n_params; /* permutation or reduced axes (0 axes: all) */
    int params[TF_MAX_RANK];
    int keepdims;
    int rank_out;
    int64_t shape_out[TF_MAX_RANK];
} shaped_case;

static const shaped_case shaped_cases[] = {
    {"permute 3 {2,0,1}", PERMUTE, 0, 3, {3, 5, 7}, 3, {2, 0, 1}, 0, 3, {7, 3, 5}},
    {"permute 4 {3,1,0,2}", PERMUTE, 0, 4, {3, 5, 7, 9}, 4, {3, 1, 0, 2}, 0, 4, {9, 5, 3, 7}},
    {"permute 3 {1,0,2}", PERMUTE, 0, 3, {3, 5, 7}, 3, {1, 0, 2}, 0, 3, {5, 3, 7}},
    {"transpose", PERMUTE, 0, 2, {7, 5}, 2, {1, 0}, 0, 2, {5, 7}},
    {"permute 8 reversed", PERMUTE, 0, 8, {2, 3, 1, 3, 2, 1, 3, 5}, 8, {7, 6, 5, 4, 3, 2, 1, 0},
     0, 8, {5, 3, 1, 2, 3, 1, 3, 2}},
    {"reshape [2,3,4]->[6,4]", RESHAPE, 0, 3, {2, 3, 4}, 2, {6, 4}, 0, 2, {6, 4}},
    {"copy", COPY, 0, 3, {7, 11, 13}, 0, {0}, 0, 3, {7, 11, 13}},
    {"sum axis 0", REDUCE, TF_REDUCE_SUM, 2, {7, 5}, 1, {0}, 0, 1, {5}},
    {"sum axis 1 of rank 3", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 1, {1}, 0, 2, {3, 7}},
    {"sum axes {2,0}", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 2, {2, 0}, 0, 1, {5}},
    {"sum all", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 0, {0}, 0, 0, {0}},
    {"sum axis 1 keepdims", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 1, {1}, 1, 3, {3, 1, 7}},
    {"sum axes {0,2} keepdims", REDUCE, TF_REDUCE_SUM, 3, {5, 3, 7}, 2, {0, 2}, 1, 3, {1, 3, 1}},
    {"sum size-1 axis", REDUCE, TF_REDUCE_SUM, 3, {3, 1, 7}, 1, {1}, 0, 2, {3, 7}},
    {"sum axes {1,2} with size 1", REDUCE, TF_REDUCE_SUM, 4, {5, 1, 3, 7}, 2, {1, 2}, 0, 2, {5, 7}},
    {"sum axes {0,1,2} named", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 3, {0, 1, 2}, 0, 0, {0}},
    {"sum rank 8 keepdims", REDUCE, TF_REDUCE_SUM, 8, {2, 3, 1, 3, 2, 1, 3, 5}, 4, {7, 0, 3, 5},
     1, 8, {1, 3, 1, 1, 2, 1, 3, 1}},
    {"max rank 8", REDUCE, TF_REDUCE_MAX, 8, {3, 2, 1, 3, 2, 1, 3, 5}, 3, {1, 4, 6}, 0, 5,
     {3, 1, 3, 1, 5}},
    {"sum all keepdims", REDUCE, TF_REDUCE_SUM, 3, {3, 5, 7}, 0, {0}, 1, 3, {1, 1, 1}},
    {"max axis 1", REDUCE, TF_REDUCE_MAX, 3, {3, 5, 7}, 1, {1}, 0, 2, {3, 7}},
    {"max all", REDUCE, TF_REDUCE_MAX, 3, {3, 5, 7}, 0, {0}, 0, 0, {0}},
    {"max axes {3,1} keepdims", REDUCE, TF_REDUCE_MAX, 4, {3, 5, 7, 3}, 2, {3, 1}, 1, 4,
     {3, 1, 7, 1}},
    {"min axis 0", REDUCE, TF_REDUCE_MIN, 2, {7, 5}, 1, {0}, 0, 1, {5}},
    {"min axis 2", REDUCE, TF_REDUCE_MIN, 3, {3, 5, 7}, 1, {2}, 0, 2, {3, 5}},
    {"min all", REDUCE, TF_REDUCE_MIN, 3, {3, 5, 7}, 0, {0}, 0, 0, {0}},
    {"scalar sum", REDUCE, TF_REDUCE_SUM, 0, {0}, 0, {0}, 0, 0, {0}},
    {"scalar max", REDUCE, TF_REDUCE_MAX, 0, {0}, 0, {0}, 1, 0, {0}},
    {"scalar permute", PERMUTE, 0, 0, {0}, 0, {0}, 0, 0, {0}},
    {"scalar to [1,1,1]", RESHAPE, 0, 0, {0}, 3, {1, 1, 1}, 0, 3, {1, 1, 1}},
    {"[1,1,1] to scalar", RESHAPE, 0, 3, {1, 1, 1}, 0, {0}, 0, 0, {0}},
};
#define N_SHAPED_CASES (sizeof shaped_cases / sizeof *shaped_cases)

/* A shaped case to queue on one input. */
typedef struct shaped_job {
    const shaped_case *sc;
    tf_tensor in, out;
} shaped_job;

/* Session callback: queues the case's one operation. */
static tf_status run_shaped(tf_view *v, void *arg) {
    shaped_job *j = arg;
    const shaped_case *sc = j->sc;
    /* No parameters travel as NULL, as the API allows. */
    const int *params = sc->n_params ? sc->params : NULL;
    int64_t shape[TF_MAX_RANK];
    for (int i = 0; i < sc->n_params; i++) shape[i] = sc->params[i];
    switch (sc->kind) {
    case PERMUTE: return tf_view_permute(v, j->in, sc->n_params, params, &j->out);
    case RESHAPE: return tf_view_reshape(v, j->in, sc->n_params, params ? shape : NULL, &j->out);
    case COPY: return tf_view_copy(v, j->in, &j->out);
    case REDUCE:
        return tf_view_reduce(v, sc->reduce, j->in, sc->n_params, params, sc->keepdims, &j->out);
    }
    return TF_ERR_INTERNAL;
}

/* Splits a row-major linear index into a multi-index of shape. */
static void unravel(size_t li, int rank, const int64_t *shape, int64_t *idx) {
    for (int ax = rank - 1; ax >= 0; ax--) {
        idx[ax] = (int64_t)(li % (size_t)shape[ax]);
        li /= (size_t)shape[ax];
    }
}

/* The reference of a shaped case, by index arithmetic on every input element. */
static void shaped_ref(const shaped_case *sc, const double complex *x, double complex *out) {
    const size_t n_in = th_numel(sc->rank, sc->shape), n_out = th_numel(sc->rank_out, sc->shape_out);
    int64_t idx[TF_MAX_RANK];
    if (sc->kind == RESHAPE || sc->kind == COPY) {
        memcpy(out, x, n_in * sizeof *x);
    } else if (sc->kind == PERMUTE) {
        /* out[j0..jr] = x[i] where i's axis perm[a] is j's axis a. */
        for (size_t lo = 0; lo < n_out; lo++) {
            int64_t in_idx[TF_MAX_RANK];
            unravel(lo, sc->rank_out, sc->shape_out, idx);
            for (int a = 0; a < sc->rank; a++) in_idx[sc->params[a]] = idx[a];
            size_t li = 0;
            for (int a = 0; a < sc->rank; a++) li = li * (size_t)sc->shape[a] + (size_t)in_idx[a];
            out[lo] = x[li];
        }
    } else {
        int reduced[TF_MAX_RANK] = {0};
        for (int a = 0; a < sc->rank; a++) reduced[a] = sc->n_params == 0;
        for (int i = 0; i < sc->n_params; i++) reduced[sc->params[i]] = 1;
        char *seen = scratch(n_out);
        for (size_t li = 0; li < n_in; li++) {
            unravel(li, sc->rank, sc->shape, idx);
            size_t lo = 0;
            for (int a = 0; a < sc->rank; a++)
                if (!reduced[a]) lo = lo * (size_t)sc->shape[a] + (size_t)idx[a];
            double complex v = x[li];
            if (!seen[lo]) out[lo] = v;
            else if (sc->reduce == TF_REDUCE_SUM) out[lo] += v;
            else if (sc->reduce == TF_REDUCE_MAX && creal(v) > creal(out[lo])) out[lo] = v;
            else if (sc->reduce == TF_REDUCE_MIN && creal(v) < creal(out[lo])) out[lo] = v;
            seen[lo] = 1;
        }
    }
}

/* Every shaped case on one dtype (max and min on real dtypes only), alternating session kinds. */
START_TEST(test_shaped) {
    const tf_dtype dt = all_dtypes[_i];
    start(NULL);
    for (size_t k = 0; k < N_SHAPED_CASES; k++) {
        const shaped_case *sc = &shaped_cases[k];
        if (sc->kind == REDUCE && sc->reduce != TF_REDUCE_SUM && th_is_complex(dt)) continue;
        double complex *x;
        shaped_job job = {sc, upload_fresh(dt, sc->rank, sc->shape, 0, &x), 0};
        const void *got = run_fetch((int)(k + (size_t)_i) % 2, run_shaped, &job, &job.out, dt,
                                    sc->rank_out, sc->shape_out);
        const size_t n_in = th_numel(sc->rank, sc->shape), n_out = th_numel(sc->rank_out, sc->shape_out);
        double complex *ref = scratch(n_out * sizeof *ref);
        shaped_ref(sc, x, ref);
        /* Moves and max/min are exact; a sum of k terms may round k times. */
        double tol = sc->kind == REDUCE && sc->reduce == TF_REDUCE_SUM
                         ? th_tolerance(dt) * (double)(n_in / n_out)
                         : 0.0;
        expect_close(sc->name, dt, n_out, got, ref, 1.0, tol);
    }
    finish();
}
END_TEST

/* Max and min of complex tensors fail at the call with TF_ERR_DTYPE; the client stays usable. */
START_TEST(test_order_needs_real) {
    start(NULL);
    for (size_t k = 0; k < N_SHAPED_CASES; k++) {
        const shaped_case *sc = &shaped_cases[k];
        if (sc->kind != REDUCE || sc->reduce == TF_REDUCE_SUM) continue;
        for (int c = 0; c < 2; c++) {
            const tf_dtype dt = c ? TF_C128 : TF_C64;
            shaped_job job = {sc, upload_fresh(dt, sc->rank, sc->shape, 0, NULL), 0};
            tf_status st = tf_with_session(F.c, run_shaped, &job);
            ck_assert_msg(st == TF_ERR_DTYPE, "%s on %s gave %s", sc->name, tf_dtype_name(dt),
                          tf_status_name(st));
            ck_assert_uint_eq(job.out, 0);
        }
    }
    /* The refused calls queued nothing; a sum on the same client still works. */
    double complex *x;
    const int64_t shape[2] = {3, 5};
    static const shaped_case sum = {"sum", REDUCE, TF_REDUCE_SUM, 2, {3, 5}, 1, {1}, 0, 1, {3}};
    shaped_job job = {&sum, upload_fresh(TF_C64, 2, shape, 0, &x), 0};
    EXPECT_OK(tf_with_session(F.c, run_shaped, &job));
    keep(job.out);
    double complex ref[3];
    shaped_ref(&sum, x, ref);
    const void *got = fetch(job.out, TF_C64, 1, sum.shape_out);
    expect_close("sum after refusals", TF_C64, 3, got, ref, 1.0, th_tolerance(TF_C64) * 5);
    finish();
}
END_TEST

/* ---- matrix products ---- */

/* One matmul case: a [batch..., m, k] times b [batch..., k, n]. */
typedef struct mm_case {
    int rank;
    int64_t a[4], b[4];
} mm_case;

static const mm_case mm_cases[] = {
    {2, {7, 5}, {5, 3}},
    {2, {64, 48}, {48, 80}},
    {3, {4, 6, 5}, {4, 5, 7}},
    {4, {3, 2, 5, 3}, {3, 2, 3, 7}},
    {2, {1, 9}, {9, 1}},
    {2, {5, 1}, {1, 7}},
};

/* The plain triple loop, once per batch element. */
static void matmul_ref(const mm_case *mc, const double complex *a, const double complex *b,
                       double complex *out) {
    const int r = mc->rank;
    const size_t m = (size_t)mc->a[r - 2], k = (size_t)mc->a[r - 1], n = (size_t)mc->b[r - 1];
    size_t batch = 1;
    for (int i = 0; i < r - 2; i++) batch *= (size_t)mc->a[i];
    for (size_t p = 0; p < batch; p++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double complex acc = 0;
                for (size_t l = 0; l < k; l++)
                    acc += a[(p * m + i) * k + l] * b[(p * k + l) * n + j];
                out[(p * m + i) * n + j] = acc;
            }
}

/* Every matmul case on one dtype: non-square, larger, batched; alternating session kinds. */
START_TEST(test_matmul) {
    const tf_dtype dt = all_dtypes[_i];
    start(NULL);
    for (size_t k = 0; k < sizeof mm_cases / sizeof *mm_cases; k++) {
        const mm_case *mc = &mm_cases[k];
        const int r = mc->rank;
        double complex *a, *b;
        call_job job = {NULL, tf_view_matmul, 2, ALPHA, BETA, {0, 0}, 0};
        job.in[0] = upload_fresh(dt, r, mc->a, 0, &a);
        job.in[1] = upload_fresh(dt, r, mc->b, 0, &b);
        int64_t out_shape[4];
        memcpy(out_shape, mc->a, sizeof out_shape);
        out_shape[r - 1] = mc->b[r - 1];
        const int held = (int)(k + (size_t)_i) % 2;
        const void *got = run_fetch(held, run_call, &job, &job.out, dt, r, out_shape);
        const size_t n_out = th_numel(r, out_shape);
        double complex *ref = scratch(n_out * sizeof *ref);
        matmul_ref(mc, a, b, ref);
        char what[64];
        snprintf(what, sizeof what, "matmul case %zu", k);
        expect_close(what, dt, n_out, got, ref, 1.0, th_tolerance(dt) * (double)mc->a[r - 1]);
    }
    finish();
}
END_TEST

/* ---- a chain of dependent operations ---- */

/* ((a + b) * c - a) / b, then its sum over all axes; may download the sum inside the burst. */
typedef struct chain_job {
    tf_tensor a, b, c, quotient, sum;
    int download_inside;
    void *inside;
    size_t inside_bytes;
} chain_job;

/* Session callback: queues the chain, each operation reading the previous one's output. */
static tf_status run_chain(tf_view *v, void *arg) {
    chain_job *j = arg;
    tf_tensor s, p, d;
    TRY(tf_view_add(v, j->a, j->b, &s));
    TRY(tf_view_mul(v, s, j->c, &p));
    TRY(tf_view_sub(v, p, j->a, &d));
    TRY(tf_view_div(v, d, j->b, &j->quotient));
    TRY(tf_view_sum(v, j->quotient, 0, NULL, &j->sum));
    /* The intermediates are freed in the same queue, after the work that reads them. */
    TRY(tf_tensor_free(tf_view_client(v), s));
    TRY(tf_tensor_free(tf_view_client(v), p));
    TRY(tf_tensor_free(tf_view_client(v), d));
    if (j->download_inside)
        TRY(tf_download(tf_view_client(v), j->sum, &j->inside, &j->inside_bytes));
    return TF_OK;
}

/* The chain checked end to end for every dtype: scoped (downloading inside the burst) and held. */
START_TEST(test_chain) {
    const int64_t shape[3] = {5, 9, 11};
    const size_t n = th_numel(3, shape);
    start(NULL);
    for (int k = 0; k < 8; k++) {
        const tf_dtype dt = all_dtypes[k % 4];
        const int held = k / 4;
        double complex *a, *b, *c;
        chain_job job = {0};
        job.a = upload_fresh(dt, 3, shape, 0, &a);
        job.b = upload_fresh(dt, 3, shape, 0, &b);
        job.c = upload_fresh(dt, 3, shape, 0, &c);
        job.download_inside = !held;
        const void *q = run_fetch(held, run_chain, &job, &job.quotient, dt, 3, shape);
        const void *sum = fetch(keep(job.sum), dt, 0, NULL);
        double complex *ref = scratch(n * sizeof *ref), total = 0;
        for (size_t i = 0; i < n; i++) {
            ref[i] = ((a[i] + b[i]) * c[i] - a[i]) / b[i];
            total += ref[i];
        }
        /* Four dependent roundings, the last amplified by 1/|b|: allow four steps' worth. */
        expect_close("chain quotient", dt, n, q, ref, 1.0, 4 * th_tolerance(dt));
        expect_close("chain sum", dt, 1, sum, &total, 1.0, th_tolerance(dt) * (double)n);
        if (!held) {
            keep_host(job.inside);
            ck_assert_uint_eq(job.inside_bytes, tf_dtype_size(dt));
            ck_assert_mem_eq(job.inside, sum, tf_dtype_size(dt));
        }
    }
    finish();
}
END_TEST

/* ---- rank 0 ---- */

/* Scalars of every dtype: upload, scale, exp of the result, all rank 0 (more in shaped_cases). */
START_TEST(test_scalars) {
    start(NULL);
    for (int k = 0; k < 4; k++) {
        const tf_dtype dt = all_dtypes[k];
        double complex *x;
        call_job scale = {NULL, NULL, 1, ALPHA, BETA, {upload_fresh(dt, 0, NULL, 0, &x), 0}, 0};
        const void *got = run_fetch(k % 2, run_call, &scale, &scale.out, dt, 0, NULL);
        double complex ref = coefficient(dt, ALPHA) * x[0];
        expect_close("scalar scale", dt, 1, got, &ref, 1.0, th_tolerance(dt));

        call_job ex = {tf_view_exp, NULL, 1, ALPHA, BETA, {scale.out, 0}, 0};
        EXPECT_OK(tf_with_session(F.c, run_call, &ex));
        keep(ex.out);
        ref = cexp(ref);
        expect_close("scalar exp", dt, 1, fetch(ex.out, dt, 0, NULL), &ref, 1.0, th_tolerance(dt));
    }
    finish();
}
END_TEST

/* ---- tf_download_into ---- */

/* 100 same-size downloads reuse one buffer with fresh values each; a larger tensor grows it. */
START_TEST(test_download_into_reuses) {
    start(NULL);
    const tf_dtype dt = TF_C64;
    const int64_t shape[2] = {7, 11}, big_shape[2] = {13, 17};
    const size_t n = th_numel(2, shape);
    double complex *x;
    call_job job = {NULL, NULL, 1, ALPHA, BETA, {upload_fresh(dt, 2, shape, 0, &x), 0}, 0};
    void *buf = NULL, *first = NULL;
    size_t cap = 0, first_cap = 0;
    double complex *ref = scratch(n * sizeof *ref);
    for (int i = 1; i <= 100; i++) {
        job.alpha = (tf_scalar){0.25 * i, -0.5 * i};
        EXPECT_OK(tf_with_session(F.c, run_call, &job));
        EXPECT_OK(tf_download_into(F.c, job.out, &buf, &cap));
        if (i == 1) {
            first = buf;
            first_cap = cap;
            ck_assert_ptr_nonnull(first);
            ck_assert_uint_eq(first_cap, n * tf_dtype_size(dt));
        }
        ck_assert_ptr_eq(buf, first);
        ck_assert_uint_eq(cap, first_cap);
        for (size_t e = 0; e < n; e++) ref[e] = CMPLX(0.25 * i, -0.5 * i) * x[e];
        expect_close("scale then download_into", dt, n, buf, ref, 1.0, th_tolerance(dt));
        EXPECT_OK(tf_tensor_free(F.c, job.out));
    }
    double complex *y;
    tf_tensor big = upload_fresh(dt, 2, big_shape, 0, &y);
    EXPECT_OK(tf_download_into(F.c, big, &buf, &cap));
    keep_host(buf);
    ck_assert_uint_gt(cap, first_cap);
    ck_assert_uint_eq(cap, th_numel(2, big_shape) * tf_dtype_size(dt));
    expect_close("download_into grown", dt, th_numel(2, big_shape), buf, y, 1.0, 0.0);
    finish();
}
END_TEST

/* ---- tensors larger than a frame ---- */

/*
 * Large f64 and c128 tensors against a 64 KiB frame limit: upload, scale,
 * sum, download; also sizes of exactly one chunk (64 KiB less the client's 4
 * KiB allowance for the message) and one element past it. Run 0 lets the
 * blocking routes use the staging buffer: a large tensor is two requests
 * (create, transfer) whatever the frame limit. Run 1 gives the client a
 * pinned quota too small for any staging buffer, so everything travels
 * inline: the upload and both downloads need many frames of at most 64 KiB.
 */
START_TEST(test_large_chunked) {
    static const struct {
        tf_dtype dt;
        int64_t n;
    } cases[] = {{TF_F64, 1000003}, {TF_C128, 300001}, {TF_F64, 7680}, {TF_F32, 15361}};
    const int inline_only = _i == 1;
    start_with("65536", inline_only ? "4096" : NULL);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        const tf_dtype dt = cases[k].dt;
        const int64_t shape[1] = {cases[k].n};
        const size_t n = (size_t)cases[k].n, bytes = n * tf_dtype_size(dt);
        const int staged = !inline_only && bytes >= 65536;
        const uint64_t received = th_counter(&F.d, "frames_received");
        const uint64_t sent = th_counter(&F.d, "frames_sent");
        const uint64_t moved = th_counter(&F.d, "transfers_completed");
        double complex *x;
        call_job job = {NULL, NULL, 1, ALPHA, BETA, {upload_fresh(dt, 1, shape, 0, &x), 0}, 0};
        const void *got = run_fetch((int)k % 2, run_call, &job, &job.out, dt, 1, shape);
        const void *back = fetch(job.in[0], dt, 1, shape);
        if (staged) {
            /* Three transfers (upload, two downloads), each a request or two, whatever the size. */
            ck_assert_uint_eq(th_counter(&F.d, "transfers_completed") - moved, 3);
            ck_assert_uint_lt(th_counter(&F.d, "frames_received") - received, 16);
        } else {
            ck_assert_uint_eq(th_counter(&F.d, "transfers_completed"), moved);
            ck_assert_uint_ge(th_counter(&F.d, "frames_received") - received, bytes / 65536);
            ck_assert_uint_ge(th_counter(&F.d, "frames_sent") - sent, 2 * (bytes / 65536));
        }
        expect_close("large round trip", dt, n, back, x, 1.0, 0.0);
        const double complex alpha = coefficient(dt, ALPHA);
        double complex *ref = scratch(n * sizeof *ref), total = 0;
        for (size_t i = 0; i < n; i++) {
            ref[i] = alpha * x[i];
            total += ref[i];
        }
        expect_close("large scale", dt, n, got, ref, 1.0, th_tolerance(dt));

        /* Only what run_shaped reads: a sum over no named axes, i.e. all of them. */
        static const shaped_case all = {.name = "sum all", .kind = REDUCE, .reduce = TF_REDUCE_SUM};
        shaped_job sj = {&all, job.out, 0};
        EXPECT_OK(tf_with_session(F.c, run_shaped, &sj));
        keep(sj.out);
        expect_close("large sum", dt, 1, fetch(sj.out, dt, 0, NULL), &total, 1.0,
                     th_tolerance(dt) * (double)n);
    }
    finish();
}
END_TEST

/* One suite; Check forks every test, and each starts its own daemon. */
int main(void) {
    th_seed(); /* one seed for the whole run, printed once and inherited by every test */
    Suite *suite = suite_create("operations");
    TCase *tc = tcase_create("operations");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_elementwise, 0, 4);
    tcase_add_loop_test(tc, test_shaped, 0, 4);
    tcase_add_test(tc, test_order_needs_real);
    tcase_add_loop_test(tc, test_matmul, 0, 4);
    tcase_add_test(tc, test_chain);
    tcase_add_test(tc, test_scalars);
    tcase_add_test(tc, test_download_into_reuses);
    tcase_add_loop_test(tc, test_large_chunked, 0, 2);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
