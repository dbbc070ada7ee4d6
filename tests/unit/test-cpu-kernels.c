/*
 * Unit tests of the CPU backend's kernels.
 *
 * Each test drives the backend the way the executor does: through the
 * tfd_cpu_backend vtable (open, stream_create, alloc, copies) and
 * tfd_backend_run_op, with operation descriptors whose output metadata comes
 * from the shared shape rules (tf__infer_output). Every result is compared,
 * element by element and for every dtype the operation serves, with an
 * independent naive reference computed here in long double (complex)
 * arithmetic from the very same inputs. Inputs are fresh random numbers of
 * magnitude [0.5, 2) (never zero) from a generator seeded by the clock; the
 * seed is printed at start and in every failure message, and TFCK_SEED=<n>
 * replays a run. Outputs are poisoned with NaN bytes before each operation,
 * so an element a kernel forgets to write fails the comparison.
 *
 * Tolerances: relative 1e-5 for f32 and c64, 1e-12 for f64 and c128. For sums
 * and matrix products the error is measured against the sum of the absolute
 * values of the terms (which grows with the number of terms k), so
 * cancellation in a random-sign sum cannot make a correct kernel fail.
 *
 * Fault injection (cpu/fault.c) declares the device lost: that test runs in
 * a process of its own (left out under CK_FORK=no), since the loss is the
 * process's for good.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"

typedef long double complex lcx;

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};
static const tf_dtype real_dtypes[2] = {TF_F32, TF_F64};

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

/* A value of magnitude [0.5, 2): never zero, never tiny, so relative errors stay meaningful. */
static double rng_value(int positive) {
    double v = 0.5 + 1.5 * (double)(rng_next() >> 11) * 0x1.0p-53;
    if (!positive && (rng_next() & 1)) v = -v;
    return v;
}

/* ---- the backend under test and what a test allocated from it ---- */

#define MAX_ALLOCS 1024

static tfd_backend be;
static void *stream;
static char msg[512];
static void *dev_allocs[MAX_ALLOCS], *host_allocs[MAX_ALLOCS];
static size_t dev_bytes[MAX_ALLOCS]; /* what each of dev_allocs was allocated with */
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
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    host_allocs[n_host_allocs++] = p;
    return p;
}

static int is_cx(tf_dtype d) { return d == TF_C64 || d == TF_C128; }

static long double tol_of(tf_dtype d) { return (d == TF_F32 || d == TF_C64) ? 1e-5L : 1e-12L; }

static int64_t numel_of(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    return n;
}

/* Element i of a host buffer of dtype dt, widened to long double complex. */
static lcx host_get(const void *p, tf_dtype dt, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: {
        const float *f = p;
        return CMPLXL(f[2 * i], f[2 * i + 1]);
    }
    case TF_C128: {
        const double *d = p;
        return CMPLXL(d[2 * i], d[2 * i + 1]);
    }
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

/* A device tensor with unspecified contents. */
static tfd_tensor_view dev_tensor(tf_dtype dt, int rank, const int64_t *shape) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = rank;
    for (int i = 0; i < rank; i++) v.shape[i] = shape[i];
    v.numel = numel_of(rank, shape);
    ck_assert_int_lt(n_dev_allocs, MAX_ALLOCS);
    tf_status st = be.vt->alloc(&be, stream, bytes_of(&v), &v.data);
    ck_assert_msg(st == TF_OK, "alloc %zu bytes: %s", bytes_of(&v), tf_status_name(st));
    dev_bytes[n_dev_allocs] = bytes_of(&v);
    dev_allocs[n_dev_allocs++] = v.data;
    return v;
}

static void upload(const tfd_tensor_view *v, const void *host) {
    tf_status st = be.vt->copy_to_device(&be, stream, v->data, host, bytes_of(v));
    ck_assert_msg(st == TF_OK, "copy_to_device: %s", tf_status_name(st));
}

static void *download(const tfd_tensor_view *v) {
    void *host = host_alloc(bytes_of(v));
    tf_status st = be.vt->copy_to_host(&be, stream, host, v->data, bytes_of(v));
    ck_assert_msg(st == TF_OK, "copy_to_host: %s", tf_status_name(st));
    return host;
}

/* A device tensor of fresh random nonzero values; *host receives the same values. */
static tfd_tensor_view random_tensor(tf_dtype dt, int rank, const int64_t *shape, int positive,
                                     void **host) {
    tfd_tensor_view v = dev_tensor(dt, rank, shape);
    void *h = host_alloc(bytes_of(&v));
    for (int64_t i = 0; i < v.numel; i++)
        host_set(h, dt, i, is_cx(dt) ? CMPLXL(rng_value(0), rng_value(0)) : rng_value(positive));
    upload(&v, h);
    *host = h;
    return v;
}

/* A descriptor as the daemon builds it: output metadata from the shape rules, output poisoned. */
static tfd_op make_op(tf__op_kind kind, const tfd_tensor_view *a, const tfd_tensor_view *b,
                      const int64_t *params, int n_params, unsigned flags) {
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    op.n_inputs = b ? 2 : 1;
    op.in[0] = *a;
    if (b) op.in[1] = *b;
    op.n_params = n_params;
    for (int i = 0; i < n_params; i++) op.params[i] = params[i];
    op.flags = flags;
    tf__meta in[2], out;
    memset(in, 0, sizeof in);
    for (int i = 0; i < op.n_inputs; i++) {
        in[i].dtype = op.in[i].dtype;
        in[i].rank = op.in[i].rank;
        for (int d = 0; d < op.in[i].rank; d++) in[i].shape[d] = op.in[i].shape[d];
    }
    char why[256] = "";
    tf_status st = tf__infer_output(kind, in, op.n_inputs, params, n_params, flags, &out, why,
                                    sizeof why);
    ck_assert_msg(st == TF_OK, "shape rules refused %s: %s", tf__op_name(kind), why);
    op.out = dev_tensor(out.dtype, out.rank, out.shape);
    void *poison = host_alloc(bytes_of(&op.out));
    memset(poison, 0xFF, bytes_of(&op.out)); /* all-ones bytes are NaN in every dtype */
    upload(&op.out, poison);
    return op;
}

static void run_ok(const tfd_op *op, const char *what) {
    msg[0] = '\0';
    tf_status st = tfd_backend_run_op(&be, stream, op, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s (%s): %s: %s (seed %llu)", what,
                  tf_dtype_name(op->in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
}

/* |got - ref| <= tol * scale; NaN anywhere fails, scale 0 demands equality. */
static void check_elem(const char *what, tf_dtype dt, int64_t i, lcx got, lcx ref,
                       long double scale) {
    long double err = cabsl(got - ref);
    long double bound = tol_of(dt) * scale;
    ck_assert_msg(err <= bound,
                  "%s (%s) element %lld: got %.10Lg%+.10Lgi, want %.10Lg%+.10Lgi, "
                  "|err| %.3Lg > %.3Lg (seed %llu)",
                  what, tf_dtype_name(dt), (long long)i, creall(got), cimagl(got), creall(ref),
                  cimagl(ref), err, bound, (unsigned long long)g_seed);
}

/* Row-major coordinates of linear index lin. */
static void unravel(int64_t lin, int rank, const int64_t *shape, int64_t *coord) {
    for (int d = rank - 1; d >= 0; d--) {
        coord[d] = lin % shape[d];
        lin /= shape[d];
    }
}

static int64_t ravel(int rank, const int64_t *shape, const int64_t *coord) {
    int64_t lin = 0;
    for (int d = 0; d < rank; d++) lin = lin * shape[d] + coord[d];
    return lin;
}

/* ---- elementwise ---- */

/* The reference of one binary operation, written out by components. */
static lcx ref_binary(tf__op_kind k, tf_dtype dt, lcx x, lcx y) {
    long double a = creall(x), b = cimagl(x), c = creall(y), d = cimagl(y);
    if (!is_cx(dt)) {
        switch (k) {
        case TF__OP_ADD: return a + c;
        case TF__OP_SUB: return a - c;
        case TF__OP_MUL: return a * c;
        default: return a / c;
        }
    }
    switch (k) {
    case TF__OP_ADD: return CMPLXL(a + c, b + d);
    case TF__OP_SUB: return CMPLXL(a - c, b - d);
    case TF__OP_MUL: return CMPLXL(a * c - b * d, a * d + b * c);
    default: {
        long double den = c * c + d * d;
        return CMPLXL((a * c + b * d) / den, (b * c - a * d) / den);
    }
    }
}

START_TEST(test_binary) {
    const tf_dtype dt = all_dtypes[_i];
    static const tf__op_kind kinds[] = {TF__OP_ADD, TF__OP_SUB, TF__OP_MUL, TF__OP_DIV};
    static const int64_t shapes[2][3] = {{64}, {3, 5, 7}};
    static const int ranks[2] = {1, 3};
    for (int s = 0; s < 2; s++) {
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
            void *ha, *hb;
            tfd_tensor_view a = random_tensor(dt, ranks[s], shapes[s], 0, &ha);
            tfd_tensor_view b = random_tensor(dt, ranks[s], shapes[s], 0, &hb);
            tfd_op op = make_op(kinds[k], &a, &b, NULL, 0, 0);
            run_ok(&op, tf__op_name(kinds[k]));
            void *ho = download(&op.out);
            for (int64_t i = 0; i < op.out.numel; i++) {
                lcx ref = ref_binary(kinds[k], dt, host_get(ha, dt, i), host_get(hb, dt, i));
                check_elem(tf__op_name(kinds[k]), dt, i, host_get(ho, dt, i), ref, cabsl(ref));
            }
        }
    }
}
END_TEST

/* The reference of one unary operation, in long double (complex) library functions. */
static lcx ref_unary(tf__op_kind k, tf_dtype dt, lcx z) {
    if (!is_cx(dt)) {
        long double x = creall(z);
        switch (k) {
        case TF__OP_NEG: return -x;
        case TF__OP_CONJ: return x;
        case TF__OP_ABS: return fabsl(x);
        case TF__OP_EXP: return expl(x);
        case TF__OP_LOG: return logl(x);
        case TF__OP_SQUARE: return x * x;
        default: return sqrtl(x);
        }
    }
    switch (k) {
    case TF__OP_NEG: return CMPLXL(-creall(z), -cimagl(z));
    case TF__OP_CONJ: return CMPLXL(creall(z), -cimagl(z));
    case TF__OP_ABS: return hypotl(creall(z), cimagl(z));
    case TF__OP_EXP: return cexpl(z);
    case TF__OP_LOG: return clogl(z);
    case TF__OP_SQUARE: return z * z;
    default: return csqrtl(z);
    }
}

START_TEST(test_unary) {
    const tf_dtype dt = all_dtypes[_i];
    static const tf__op_kind kinds[] = {TF__OP_NEG, TF__OP_CONJ, TF__OP_ABS,  TF__OP_EXP,
                                        TF__OP_LOG, TF__OP_SQRT, TF__OP_SQUARE};
    static const int64_t shape[2] = {5, 13};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        const int positive = kinds[k] == TF__OP_LOG || kinds[k] == TF__OP_SQRT;
        void *ha;
        tfd_tensor_view a = random_tensor(dt, 2, shape, positive, &ha);
        tfd_op op = make_op(kinds[k], &a, NULL, NULL, 0, 0);
        if (kinds[k] == TF__OP_ABS)
            ck_assert_int_eq(op.out.dtype, dt == TF_C64 ? TF_F32 : dt == TF_C128 ? TF_F64 : dt);
        run_ok(&op, tf__op_name(kinds[k]));
        void *ho = download(&op.out);
        for (int64_t i = 0; i < op.out.numel; i++) {
            lcx ref = ref_unary(kinds[k], dt, host_get(ha, dt, i));
            check_elem(tf__op_name(kinds[k]), dt, i, host_get(ho, op.out.dtype, i), ref,
                       cabsl(ref));
        }
    }
}
END_TEST

/* Real sqrt and log of negative numbers are NaN by IEEE rules, not an error. */
START_TEST(test_negative_sqrt_log_nan) {
    const tf_dtype dt = real_dtypes[_i];
    static const tf__op_kind kinds[] = {TF__OP_SQRT, TF__OP_LOG};
    static const int64_t shape[1] = {64};
    for (int k = 0; k < 2; k++) {
        tfd_tensor_view a = dev_tensor(dt, 1, shape);
        void *ha = host_alloc(bytes_of(&a));
        for (int64_t i = 0; i < a.numel; i++) host_set(ha, dt, i, -rng_value(1));
        upload(&a, ha);
        tfd_op op = make_op(kinds[k], &a, NULL, NULL, 0, 0);
        run_ok(&op, tf__op_name(kinds[k]));
        void *ho = download(&op.out);
        for (int64_t i = 0; i < a.numel; i++)
            ck_assert_msg(isnan(creall(host_get(ho, dt, i))),
                          "%s(%s) of %Lg: got %Lg, want NaN (seed %llu)", tf__op_name(kinds[k]),
                          tf_dtype_name(dt), creall(host_get(ha, dt, i)),
                          creall(host_get(ho, dt, i)), (unsigned long long)g_seed);
    }
}
END_TEST

START_TEST(test_scale_axpby) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shape[2] = {8, 9};
    const tf_scalar alpha = {rng_value(0), rng_value(0)}, beta = {rng_value(0), rng_value(0)};
    /* Real dtypes use only the real part of a coefficient. */
    const lcx al = is_cx(dt) ? CMPLXL(alpha.re, alpha.im) : alpha.re;
    const lcx bl = is_cx(dt) ? CMPLXL(beta.re, beta.im) : beta.re;
    void *hx, *hy;
    tfd_tensor_view x = random_tensor(dt, 2, shape, 0, &hx);
    tfd_tensor_view y = random_tensor(dt, 2, shape, 0, &hy);

    tfd_op op = make_op(TF__OP_SCALE, &x, NULL, NULL, 0, 0);
    op.alpha = alpha;
    run_ok(&op, "scale");
    void *ho = download(&op.out);
    for (int64_t i = 0; i < x.numel; i++) {
        lcx ref = al * host_get(hx, dt, i);
        check_elem("scale", dt, i, host_get(ho, dt, i), ref, cabsl(ref));
    }

    op = make_op(TF__OP_AXPBY, &x, &y, NULL, 0, 0);
    op.alpha = alpha;
    op.beta = beta;
    run_ok(&op, "axpby");
    ho = download(&op.out);
    for (int64_t i = 0; i < x.numel; i++) {
        lcx ax = al * host_get(hx, dt, i), by = bl * host_get(hy, dt, i);
        check_elem("axpby", dt, i, host_get(ho, dt, i), ax + by, cabsl(ax) + cabsl(by));
    }
}
END_TEST

/* ---- layout ---- */

/* Runs one permutation and checks every element against index arithmetic. */
static void check_permute(tf_dtype dt, int rank, const int64_t *shape, const int64_t *perm) {
    void *ha;
    tfd_tensor_view a = random_tensor(dt, rank, shape, 0, &ha);
    tfd_op op = make_op(TF__OP_PERMUTE, &a, NULL, perm, rank, 0);
    run_ok(&op, "permute");
    for (int d = 0; d < rank; d++) ck_assert_int_eq(op.out.shape[d], shape[perm[d]]);
    void *ho = download(&op.out);
    for (int64_t o = 0; o < op.out.numel; o++) {
        int64_t oc[TF_MAX_RANK], ic[TF_MAX_RANK];
        unravel(o, rank, op.out.shape, oc);
        for (int d = 0; d < rank; d++) ic[perm[d]] = oc[d];
        int64_t src = ravel(rank, shape, ic);
        check_elem("permute", dt, o, host_get(ho, dt, o), host_get(ha, dt, src), 0);
    }
}

START_TEST(test_permute) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t s3[3] = {2, 3, 4}, s4[4] = {2, 3, 4, 5};
    static const int64_t p3a[3] = {2, 0, 1}, p3b[3] = {1, 0, 2}, p3id[3] = {0, 1, 2};
    static const int64_t p4a[4] = {3, 1, 0, 2}, p4b[4] = {1, 0, 2, 3}, p4c[4] = {2, 3, 0, 1};
    check_permute(dt, 3, s3, p3a);
    check_permute(dt, 3, s3, p3b);
    check_permute(dt, 3, s3, p3id);
    check_permute(dt, 4, s4, p4a);
    check_permute(dt, 4, s4, p4b);
    check_permute(dt, 4, s4, p4c);
}
END_TEST

START_TEST(test_reshape_copy) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t shape[3] = {2, 3, 4}, to2[2] = {4, 6}, to1[1] = {24};
    void *ha;
    tfd_tensor_view a = random_tensor(dt, 3, shape, 0, &ha);
    struct {
        tf__op_kind kind;
        const int64_t *params;
        int n;
    } cases[] = {{TF__OP_RESHAPE, to2, 2}, {TF__OP_RESHAPE, to1, 1}, {TF__OP_COPY, NULL, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tfd_op op = make_op(cases[c].kind, &a, NULL, cases[c].params, cases[c].n, 0);
        run_ok(&op, tf__op_name(cases[c].kind));
        if (cases[c].kind == TF__OP_RESHAPE) {
            ck_assert_int_eq(op.out.rank, cases[c].n);
            for (int d = 0; d < cases[c].n; d++)
                ck_assert_int_eq(op.out.shape[d], cases[c].params[d]);
        }
        void *ho = download(&op.out);
        for (int64_t i = 0; i < a.numel; i++)
            check_elem(tf__op_name(cases[c].kind), dt, i, host_get(ho, dt, i), host_get(ha, dt, i),
                       0);
    }
}
END_TEST

/* ---- reductions ---- */

/*
 * Naive reduction: every input element is folded into the output element its
 * kept coordinates name. scale receives the sum of |x| of each group.
 */
static void ref_reduce(tf__op_kind kind, tf_dtype dt, int rank, const int64_t *shape,
                       const int64_t *axes, int n_axes, const void *in, lcx *ref,
                       long double *scale, int64_t out_numel) {
    int reduced[TF_MAX_RANK] = {0};
    for (int i = 0; i < n_axes; i++) reduced[axes[i]] = 1;
    if (n_axes == 0)
        for (int d = 0; d < rank; d++) reduced[d] = 1;
    int64_t kept_shape[TF_MAX_RANK];
    int kept = 0;
    for (int d = 0; d < rank; d++)
        if (!reduced[d]) kept_shape[kept++] = shape[d];
    char *seen = host_alloc((size_t)out_numel);
    memset(seen, 0, (size_t)out_numel);
    for (int64_t o = 0; o < out_numel; o++) {
        ref[o] = 0;
        scale[o] = 0;
    }
    const int64_t n = numel_of(rank, shape);
    for (int64_t i = 0; i < n; i++) {
        int64_t c[TF_MAX_RANK], kc[TF_MAX_RANK];
        unravel(i, rank, shape, c);
        int k = 0;
        for (int d = 0; d < rank; d++)
            if (!reduced[d]) kc[k++] = c[d];
        int64_t o = ravel(kept, kept_shape, kc);
        lcx x = host_get(in, dt, i);
        if (kind == TF__OP_REDUCE_SUM) {
            ref[o] += x;
            scale[o] += cabsl(x);
        } else if (!seen[o] || isnan(creall(x)) ||
                   (kind == TF__OP_REDUCE_MAX ? creall(x) > creall(ref[o])
                                              : creall(x) < creall(ref[o]))) {
            if (!(seen[o] && isnan(creall(ref[o])))) ref[o] = x;
        }
        seen[o] = 1;
    }
}

/* One reduction case, checked against ref_reduce; in may carry planted NaNs. */
static void check_reduce_on(tf__op_kind kind, const tfd_tensor_view *a, const void *ha,
                            const int64_t *axes, int n_axes, unsigned flags) {
    const tf_dtype dt = a->dtype;
    tfd_op op = make_op(kind, a, NULL, axes, n_axes, flags);
    if (flags & TF__REDUCE_KEEPDIMS) {
        ck_assert_int_eq(op.out.rank, a->rank);
        for (int d = 0; d < a->rank; d++) {
            int r = n_axes == 0;
            for (int i = 0; i < n_axes; i++) r |= axes[i] == d;
            ck_assert_int_eq(op.out.shape[d], r ? 1 : a->shape[d]);
        }
    }
    run_ok(&op, tf__op_name(kind));
    void *ho = download(&op.out);
    lcx *ref = host_alloc(sizeof(lcx) * (size_t)op.out.numel);
    long double *scale = host_alloc(sizeof(long double) * (size_t)op.out.numel);
    ref_reduce(kind, dt, a->rank, a->shape, axes, n_axes, ha, ref, scale, op.out.numel);
    char what[64];
    snprintf(what, sizeof what, "%s over %d axes%s", tf__op_name(kind), n_axes,
             (flags & TF__REDUCE_KEEPDIMS) ? " keepdims" : "");
    for (int64_t o = 0; o < op.out.numel; o++) {
        lcx got = host_get(ho, dt, o);
        if (isnan(creall(ref[o])))
            ck_assert_msg(isnan(creall(got)), "%s (%s) element %lld: got %Lg, want NaN (seed %llu)",
                          what, tf_dtype_name(dt), (long long)o, creall(got),
                          (unsigned long long)g_seed);
        else
            check_elem(what, dt, o, got, ref[o], kind == TF__OP_REDUCE_SUM ? scale[o] : 0);
    }
}

static void check_reduce(tf__op_kind kind, tf_dtype dt, int rank, const int64_t *shape,
                         const int64_t *axes, int n_axes, unsigned flags) {
    void *ha;
    tfd_tensor_view a = random_tensor(dt, rank, shape, 0, &ha);
    check_reduce_on(kind, &a, ha, axes, n_axes, flags);
}

/* The axis sets every reduction kind is checked over. */
static void reduce_cases(tf__op_kind kind, tf_dtype dt) {
    static const int64_t s3[3] = {3, 4, 5}, s4[4] = {2, 3, 4, 5}, s1[1] = {64};
    static const int64_t ax1[1] = {1}, ax2[1] = {2}, ax0[1] = {0}, ax02[2] = {0, 2};
    static const int64_t ax12[2] = {1, 2}, ax13[2] = {1, 3}, ax012[3] = {0, 1, 2};
    check_reduce(kind, dt, 3, s3, ax1, 1, 0);
    check_reduce(kind, dt, 3, s3, ax2, 1, 0);
    check_reduce(kind, dt, 3, s3, ax0, 1, 0);
    check_reduce(kind, dt, 3, s3, ax02, 2, 0);
    check_reduce(kind, dt, 3, s3, ax12, 2, 0);
    check_reduce(kind, dt, 3, s3, ax012, 3, 0);
    check_reduce(kind, dt, 3, s3, NULL, 0, 0);
    check_reduce(kind, dt, 3, s3, NULL, 0, TF__REDUCE_KEEPDIMS);
    check_reduce(kind, dt, 3, s3, ax1, 1, TF__REDUCE_KEEPDIMS);
    check_reduce(kind, dt, 4, s4, ax13, 2, 0);
    check_reduce(kind, dt, 4, s4, ax13, 2, TF__REDUCE_KEEPDIMS);
    check_reduce(kind, dt, 1, s1, NULL, 0, 0);
    check_reduce(kind, dt, 0, NULL, NULL, 0, 0);
}

START_TEST(test_reduce_sum) { reduce_cases(TF__OP_REDUCE_SUM, all_dtypes[_i]); }
END_TEST

START_TEST(test_reduce_max) { reduce_cases(TF__OP_REDUCE_MAX, real_dtypes[_i]); }
END_TEST

START_TEST(test_reduce_min) { reduce_cases(TF__OP_REDUCE_MIN, real_dtypes[_i]); }
END_TEST

/* A NaN anywhere in a group, first element or not, makes that group's max and min NaN. */
START_TEST(test_reduce_nan) {
    const tf_dtype dt = real_dtypes[_i];
    static const int64_t shape[3] = {3, 4, 5};
    static const int64_t ax1[1] = {1}, ax2[1] = {2};
    static const tf__op_kind kinds[2] = {TF__OP_REDUCE_MAX, TF__OP_REDUCE_MIN};
    for (int k = 0; k < 2; k++) {
        void *ha;
        tfd_tensor_view a = random_tensor(dt, 3, shape, 0, &ha);
        host_set(ha, dt, 0, NAN);                 /* first element of its groups */
        host_set(ha, dt, 1 * 20 + 2 * 5 + 3, NAN); /* a middle element */
        upload(&a, ha);
        check_reduce_on(kinds[k], &a, ha, ax1, 1, 0);
        check_reduce_on(kinds[k], &a, ha, ax2, 1, 0);
        check_reduce_on(kinds[k], &a, ha, NULL, 0, 0);
    }
}
END_TEST

/* Complex numbers have no order: the kernel itself refuses, should a descriptor slip through. */
START_TEST(test_reduce_max_complex_refused) {
    static const int64_t shape[2] = {3, 4}, axes[1] = {1}, out_shape[1] = {3};
    static const tf_dtype dts[2] = {TF_C64, TF_C128};
    static const tf__op_kind kinds[2] = {TF__OP_REDUCE_MAX, TF__OP_REDUCE_MIN};
    for (int i = 0; i < 2; i++) {
        void *ha;
        tfd_tensor_view a = random_tensor(dts[i], 2, shape, 0, &ha);
        tf__meta in = {.dtype = dts[i], .rank = 2, .shape = {3, 4}}, out;
        char why[256] = "";
        ck_assert_int_eq(tf__infer_output(kinds[i], &in, 1, axes, 1, 0, &out, why, sizeof why),
                         TF_ERR_DTYPE);
        tfd_op op;
        memset(&op, 0, sizeof op);
        op.kind = kinds[i];
        op.n_inputs = 1;
        op.in[0] = a;
        op.n_params = 1;
        op.params[0] = axes[0];
        op.out = dev_tensor(dts[i], 1, out_shape);
        msg[0] = '\0';
        tf_status st = tfd_backend_run_op(&be, stream, &op, msg, sizeof msg);
        ck_assert_msg(st == TF_ERR_DTYPE, "%s of %s returned %s", tf__op_name(kinds[i]),
                      tf_dtype_name(dts[i]), tf_status_name(st));
        ck_assert_msg(msg[0] != '\0', "no message for a refused %s", tf__op_name(kinds[i]));
    }
}
END_TEST

/* ---- matmul ---- */

static void check_matmul(tf_dtype dt, int rank, const int64_t *sa, const int64_t *sb) {
    void *ha, *hb;
    tfd_tensor_view a = random_tensor(dt, rank, sa, 0, &ha);
    tfd_tensor_view b = random_tensor(dt, rank, sb, 0, &hb);
    tfd_op op = make_op(TF__OP_MATMUL, &a, &b, NULL, 0, 0);
    run_ok(&op, "matmul");
    void *ho = download(&op.out);
    const int64_t m = sa[rank - 2], k = sa[rank - 1], n = sb[rank - 1];
    const int64_t batch = numel_of(rank - 2, sa);
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                lcx acc = 0;
                long double mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    lcx term = host_get(ha, dt, (t * m + i) * k + p) *
                               host_get(hb, dt, (t * k + p) * n + j);
                    acc += term;
                    mag += cabsl(term);
                }
                int64_t o = (t * m + i) * n + j;
                check_elem("matmul", dt, o, host_get(ho, dt, o), acc, mag);
            }
}

START_TEST(test_matmul) {
    const tf_dtype dt = all_dtypes[_i];
    static const int64_t a2[2] = {7, 5}, b2[2] = {5, 3};
    static const int64_t a3[3] = {4, 7, 5}, b3[3] = {4, 5, 3};
    static const int64_t a4[4] = {2, 3, 4, 6}, b4[4] = {2, 3, 6, 5};
    static const int64_t a1[2] = {1, 1}, b1[2] = {1, 1};
    static const int64_t av[2] = {1, 64}, bv[2] = {64, 1};
    check_matmul(dt, 2, a2, b2);
    check_matmul(dt, 3, a3, b3);
    check_matmul(dt, 4, a4, b4);
    check_matmul(dt, 2, a1, b1);
    check_matmul(dt, 2, av, bv);
}
END_TEST

/* ---- the device life cycle around the kernels ---- */

START_TEST(test_backend_lifecycle) {
    ck_assert_str_eq(tfd_cpu_backend.name, "cpu");
    ck_assert_msg(strncmp(be.description, "cpu (", 5) == 0 && strstr(be.description, "OpenBLAS"),
                  "description \"%s\"", be.description);

    tfd_backend other;
    memset(&other, 0, sizeof other);
    other.vt = &tfd_cpu_backend;
    msg[0] = '\0';
    ck_assert_int_eq(tfd_cpu_backend.open(&other, 1, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
    ck_assert_msg(msg[0] != '\0', "no message for ordinal 1");

    /* Small tensors are aligned for every dtype (16 bytes); large ones for wide vectors (64). */
    static const size_t sizes[] = {0, 1, 63, 64, 65, 1000, 5000, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = NULL;
        ck_assert_int_eq(be.vt->alloc(&be, stream, sizes[i], &p), TF_OK);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % (sizes[i] > 4096 ? 64 : 16), 0);
        memset(p, 0x5A, sizes[i] < 64 ? 64 : sizes[i]); /* at least 64 bytes are usable */
        be.vt->free(&be, stream, p, sizes[i]);
    }
    void *huge = (void *)1;
    ck_assert_int_eq(be.vt->alloc(&be, stream, SIZE_MAX - 8, &huge), TF_ERR_NO_MEMORY);
    ck_assert_ptr_null(huge);

    void *ev = (void *)1;
    ck_assert_int_eq(be.vt->event_record(&be, stream, &ev, msg, sizeof msg), TF_OK);
    ck_assert_ptr_null(ev);
    ck_assert_int_eq(be.vt->event_wait(&be, ev, msg, sizeof msg), TF_OK);
    be.vt->event_destroy(&be, ev);

    void *s2 = NULL;
    ck_assert_int_eq(be.vt->stream_create(&be, 5, &s2), TF_OK);
    ck_assert_ptr_nonnull(s2);
    ck_assert_ptr_ne(s2, stream);
    be.vt->stream_destroy(&be, s2);
}
END_TEST

/*
 * Tensors of megabytes freed are kept for the next of their size (not under
 * AddressSanitizer, which must see every reuse): the same block comes back,
 * a much smaller request does not take it, more than the slots hold lets the
 * oldest go, and trim empties them.
 */
#if defined(__SANITIZE_ADDRESS__)
#define BLOCKS_KEPT 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BLOCKS_KEPT 0
#endif
#endif
#ifndef BLOCKS_KEPT
#define BLOCKS_KEPT 1
#endif

START_TEST(test_large_blocks_reused) {
    const size_t big = (size_t)2 << 20;
    void *p = NULL, *q = NULL, *r = NULL;
    ck_assert_int_eq(be.vt->alloc(&be, stream, big, &p), TF_OK);
    memset(p, 0x5A, big);
    be.vt->free(&be, stream, p, big);
    ck_assert_int_eq(be.vt->alloc(&be, stream, big - 100, &q), TF_OK);
    ck_assert_uint_eq((uintptr_t)q % 64, 0);
    if (BLOCKS_KEPT) ck_assert_ptr_eq(q, p);
    memset(q, 0x3C, big - 100);
    be.vt->free(&be, stream, q, big - 100);
    ck_assert_int_eq(be.vt->alloc(&be, stream, big / 2 + 4096, &r), TF_OK);
    if (BLOCKS_KEPT) ck_assert_ptr_ne(r, q);
    memset(r, 0x11, big / 2 + 4096);
    be.vt->free(&be, stream, r, big / 2 + 4096);
    /* more than the slots and bytes kept: every block stays usable, the oldest are let go */
    enum { MANY = 12 };
    void *blocks[MANY];
    const size_t each = (size_t)8 << 20;
    for (int i = 0; i < MANY; i++) {
        ck_assert_int_eq(be.vt->alloc(&be, stream, each, &blocks[i]), TF_OK);
        memset(blocks[i], i, each);
    }
    for (int i = 0; i < MANY; i++) be.vt->free(&be, stream, blocks[i], each);
    for (int i = 0; i < MANY; i++) {
        ck_assert_int_eq(be.vt->alloc(&be, stream, each, &blocks[i]), TF_OK);
        memset(blocks[i], 0x77, each);
    }
    for (int i = 0; i < MANY; i++) be.vt->free(&be, stream, blocks[i], each);
    msg[0] = '\0';
    ck_assert_int_eq(be.vt->trim(&be, msg, sizeof msg), TF_OK);
}
END_TEST

START_TEST(test_run_op_unsupported) {
    static const tf__op_kind kinds[] = {TF__OP_NONE, TF__OP_FREE, TF__OP_KIND_COUNT};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        tfd_op op;
        memset(&op, 0, sizeof op);
        op.kind = kinds[i];
        msg[0] = '\0';
        ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_ERR_UNSUPPORTED);
        ck_assert_msg(msg[0] != '\0', "no message for kind %d", (int)kinds[i]);
    }
}
END_TEST

/*
 * Fault injection declares the device lost: the operation is TF_ERR_DEVICE
 * with the reason, health reports it from then on, and no later operation
 * runs (its output keeps the poison bytes). Alone in its process: the loss
 * is the process's, as a poisoned CUDA context is.
 */
START_TEST(test_injected_fault_loses_device) {
    char why[512] = "";
    ck_assert_int_eq(be.vt->health(&be, why, sizeof why), TF_OK);
    const int64_t shape[1] = {16};
    void *host;
    tfd_tensor_view x = random_tensor(TF_F64, 1, shape, 0, &host);
    tfd_op fault = make_op(TF__OP_TEST_FAULT, &x, NULL, NULL, 0, 0);
    msg[0] = '\0';
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &fault, msg, sizeof msg), TF_ERR_DEVICE);
    ck_assert_msg(strstr(msg, "injected device fault") != NULL, "the fault's reason: %s", msg);
    ck_assert_int_eq(be.vt->health(&be, why, sizeof why), TF_ERR_DEVICE);
    ck_assert_str_eq(why, msg);
    tfd_op neg = make_op(TF__OP_NEG, &x, NULL, NULL, 0, 0);
    msg[0] = '\0';
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &neg, msg, sizeof msg), TF_ERR_DEVICE);
    ck_assert_msg(strstr(msg, "lost") != NULL, "an operation after the loss: %s", msg);
    double out[16];
    ck_assert_int_eq(be.vt->copy_to_host(&be, stream, out, neg.out.data, sizeof out), TF_OK);
    const uint64_t ones = ~(uint64_t)0;
    for (int i = 0; i < 16; i++) ck_assert_msg(memcmp(&out[i], &ones, 8) == 0, "element %d was written", i);
}
END_TEST

static Suite *cpu_kernels_suite(int forking) {
    Suite *s = suite_create("cpu-kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_backend_lifecycle);
    tcase_add_test(tc, test_run_op_unsupported);
    tcase_add_loop_test(tc, test_binary, 0, 4);
    tcase_add_loop_test(tc, test_unary, 0, 4);
    tcase_add_loop_test(tc, test_negative_sqrt_log_nan, 0, 2);
    tcase_add_loop_test(tc, test_scale_axpby, 0, 4);
    tcase_add_loop_test(tc, test_permute, 0, 4);
    tcase_add_loop_test(tc, test_reshape_copy, 0, 4);
    tcase_add_loop_test(tc, test_reduce_sum, 0, 4);
    tcase_add_loop_test(tc, test_reduce_max, 0, 2);
    tcase_add_loop_test(tc, test_reduce_min, 0, 2);
    tcase_add_loop_test(tc, test_reduce_nan, 0, 2);
    tcase_add_test(tc, test_reduce_max_complex_refused);
    tcase_add_loop_test(tc, test_matmul, 0, 4);
    tcase_add_test(tc, test_large_blocks_reused);
    suite_add_tcase(s, tc);
    if (forking) { /* the loss outlives the test: it needs a process of its own */
        TCase *fault = tcase_create("fault injection");
        tcase_add_checked_fixture(fault, setup, teardown);
        tcase_add_test(fault, test_injected_fault_loses_device);
        suite_add_tcase(s, fault);
    }
    return s;
}

int main(void) {
    const char *env = getenv("TFCK_SEED");
    g_seed = env ? strtoull(env, NULL, 10)
                 : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test-cpu-kernels: seed %llu (replay with TFCK_SEED=%llu)\n",
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);
    const char *fork_mode = getenv("CK_FORK");
    SRunner *sr = srunner_create(cpu_kernels_suite(fork_mode == NULL || strcmp(fork_mode, "no") != 0));
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
