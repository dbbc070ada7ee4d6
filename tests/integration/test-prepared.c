/*
 * Integration tests of prepared graphs (include/tenferro/graph.h) through a
 * real tenferrod, on the suite's device (the CPU in CI, cuda:0 on the GPU
 * machine through TENFERRO_TEST_DEVICE).
 *
 * The graphs are small programs (struct program) over a reference
 * interpreter written here: every program is recorded on a graph's view and
 * prepared, recorded again on a session view and run unprepared, and
 * evaluated by plain loops in long double complex arithmetic on the same
 * fresh random inputs; the three must agree, by dtype (th_tolerance scaled
 * by the rounding steps behind each value; values that only move or negate
 * data, and max/min, exactly).
 *
 *  - Every operation kind inside a prepared graph (elementwise, scale,
 *    axpby, permute, reshape, copy, sum/max/min with and without keepdims,
 *    matmul and batched matmul, 2-, 3- and 4-operand einsum with conj, C2C,
 *    R2C and C2R FFTs with an explicit length), over the dtypes each serves;
 *    graphs with several inputs and outputs, an output listed twice, an
 *    output that is a graph input, a dead node; the inputs stay unchanged.
 *  - 1000 runs in one held session leave the daemon's memory as it was
 *    (outputs freed after each batch, or in the batch as the next run is
 *    queued); runs chained on each other's outputs in one batch, beside
 *    plain operations and a download that flushes the burst.
 *  - A scoped and a held run of one prepared graph give equal results.
 *  - Preflight, client side and raw (the daemon's own): another client's or
 *    connection's graph, a freed one, the wrong number of inputs, an input
 *    of the wrong dtype or shape (named), a pending upload into an input of
 *    a queued run, tf_prepared_free under a queued run; a refusal queues
 *    nothing. An input in a pending transfer is read after its copy.
 *    Misuse of the recording API.
 *  - Bad graphs in raw Prepare frames (cycle, dangling reference, shapes
 *    that disagree, too many nodes, FREE or RUN_PREPARED as a node,
 *    duplicate ids, no outputs, an unknown dtype, ...): typed, the node
 *    named; the connection and another client go on; [limits] max_prepared.
 *  - A prepare over the device_bytes quota is refused and keeps nothing.
 *  - The daemon-wide cache: an equal graph prepared by another process is a
 *    hit; while the first holds its instance the other gets a twin, and both
 *    run at once with their own inputs and results; an instance in use that
 *    the cache's bound pushes out goes on until it is freed.
 *  - A prepared graph freed (or its client disconnected) while runs are
 *    queued; a client killed while its graph runs, and one that leaves right
 *    after a Prepare; a device fault during a replay (TF_ERR_DEVICE, the
 *    daemon exits 1); trim empties the cache, a graph in use going on.
 *
 * Each test starts its own daemon and stops it with SIGTERM, requiring a
 * clean exit (a crash or a sanitizer report fails it). The harness prints
 * the seed of the random inputs; TENFERRO_TEST_SEED=<n> replays a run.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/testing.h"
#include "tests/integration/harness.h"

typedef long double complex lcx;

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* The coefficients of scale and axpby; real dtypes use only the real parts. */
static const tf_scalar ALPHA = {0.7, -1.3};
static const tf_scalar BETA = {-0.4, 0.9};

#define RAW_MS 20000

/* The row-major multi-index of a flat position, and back. */
static void unflatten(int64_t flat, int rank, const int64_t *shape, int64_t *idx) {
    for (int a = rank - 1; a >= 0; a--) {
        idx[a] = flat % shape[a];
        flat /= shape[a];
    }
}

static int64_t flatten(int rank, const int64_t *shape, const int64_t *idx) {
    int64_t f = 0;
    for (int a = 0; a < rank; a++) f = f * shape[a] + idx[a];
    return f;
}

/* ---- host values: what the reference interpreter computes with ---- */

typedef struct hval {
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    int64_t n;
    lcx *v;
    double err; /* rounding steps behind the value; 0: it must come out exactly */
} hval;

/* A zeroed value of that dtype and shape (abort on no memory: nothing to test then). */
static void hval_new(hval *h, tf_dtype dt, int rank, const int64_t *shape) {
    memset(h, 0, sizeof *h);
    h->dt = dt;
    h->rank = rank;
    if (rank) memcpy(h->shape, shape, sizeof(int64_t) * (size_t)rank);
    h->n = (int64_t)th_numel(rank, shape);
    h->v = calloc((size_t)h->n, sizeof *h->v);
    if (!h->v) abort();
}

static void hval_free(hval *h) {
    free(h->v);
    h->v = NULL;
}

/* n elements of a dtype's layout as long double complex (imaginary part 0 for real dtypes). */
static void widen(tf_dtype dt, int64_t n, const void *buf, lcx *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case TF_F32: out[i] = ((const float *)buf)[i]; break;
        case TF_F64: out[i] = ((const double *)buf)[i]; break;
        case TF_C64:
            out[i] = ((const float *)buf)[2 * i] + I * (long double)((const float *)buf)[2 * i + 1];
            break;
        case TF_C128:
            out[i] =
                ((const double *)buf)[2 * i] + I * (long double)((const double *)buf)[2 * i + 1];
            break;
        }
    }
}

/* A coefficient as the daemon applies it to dtype dt: the imaginary part only for complex. */
static lcx coefficient(tf_dtype dt, tf_scalar s) {
    return th_is_complex(dt) ? s.re + I * (long double)s.im : (lcx)s.re;
}

/*
 * Compares a tensor's metadata and data (dt, rank, shape, bytes) with a
 * reference value: exactly when want->err is 0, else within th_tolerance(dt)
 * scaled by the value's rounding steps, relative with a floor of 1. Returns
 * 0 when they agree, else 1 with the first difference described in why.
 */
static int differs(const hval *want, tf_dtype dt, int rank, const int64_t *shape, const void *data,
                   size_t bytes, char *why, size_t len) {
    if (dt != want->dt || rank != want->rank ||
        (rank && memcmp(shape, want->shape, sizeof(int64_t) * (size_t)rank) != 0)) {
        snprintf(why, len, "got %s of rank %d, expected %s of rank %d (or another shape)",
                 tf_dtype_name(dt), rank, tf_dtype_name(want->dt), want->rank);
        return 1;
    }
    if (bytes != (size_t)want->n * tf_dtype_size(dt)) {
        snprintf(why, len, "got %zu bytes, expected %lld elements", bytes, (long long)want->n);
        return 1;
    }
    lcx *got = malloc(sizeof *got * (size_t)want->n);
    if (!got) abort();
    widen(dt, want->n, data, got);
    const double tol = want->err == 0 ? 0 : th_tolerance(dt) * (1 + want->err);
    int bad = 0;
    for (int64_t i = 0; i < want->n && !bad; i++) {
        const long double ref = cabsl(want->v[i]);
        const long double d = cabsl(got[i] - want->v[i]);
        const long double rel = d / (ref > 1 ? ref : 1);
        if (!(rel <= tol)) {
            snprintf(why, len,
                     "element %lld is %.9Lg%+.9Lgi, expected %.9Lg%+.9Lgi (relative error %.3Lg, "
                     "allowed %.3g)",
                     (long long)i, creall(got[i]), cimagl(got[i]), creall(want->v[i]),
                     cimagl(want->v[i]), rel, tol);
            bad = 1;
        }
    }
    free(got);
    return bad;
}

/* Downloads t and compares it with want (see differs); a failed download counts as a difference. */
static int tensor_differs(tf_client *c, tf_tensor t, const hval *want, char *why, size_t len) {
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    tf_status st = tf_tensor_info(c, t, &dt, &rank, shape);
    void *data = NULL;
    size_t bytes = 0;
    if (st == TF_OK) st = tf_download(c, t, &data, &bytes);
    if (st != TF_OK) {
        snprintf(why, len, "tensor %llu: %s: %s", (unsigned long long)t, tf_status_name(st),
                 tf_client_last_error(c));
        return 1;
    }
    int bad = differs(want, dt, rank, shape, data, bytes, why, len);
    free(data);
    return bad;
}

/* A downloaded tensor as a reference value (exact), for comparing two tensors with each other. */
static tf_status tensor_as_value(tf_client *c, tf_tensor t, double err, hval *out) {
    tf_dtype dt;
    int rank;
    int64_t shape[TF_MAX_RANK];
    tf_status st = tf_tensor_info(c, t, &dt, &rank, shape);
    void *data = NULL;
    size_t bytes = 0;
    if (st == TF_OK) st = tf_download(c, t, &data, &bytes);
    if (st != TF_OK) return st;
    hval_new(out, dt, rank, shape);
    widen(dt, out->n, data, out->v);
    out->err = err;
    free(data);
    return TF_OK;
}

/* ---- programs: graphs as data, recorded on a view or evaluated here ---- */

/* clang-format off */
typedef enum step_kind {
    S_ADD, S_SUB, S_MUL, S_DIV, S_NEG, S_CONJ, S_ABS, S_EXP, S_LOG, S_SQRT, S_SCALE, S_AXPBY,
    S_PERMUTE, S_RESHAPE, S_COPY, S_SUM, S_MAX, S_MIN, S_MATMUL, S_EINSUM,
    S_FFT, S_IFFT, S_RFFT, S_IRFFT,
} step_kind;
/* clang-format on */

/* One operation; it reads values in[] (graph inputs first, then step k's result). */
typedef struct step {
    step_kind kind;
    int in[4];
    int n;                     /* axes, permutation, new shape's rank, or einsum operands */
    int ax[TF_MAX_RANK];       /* axes of a reduction or FFT, permutation */
    int64_t dims[TF_MAX_RANK]; /* reshape */
    int keepdims;
    const char *sub; /* einsum */
    uint64_t conj;   /* einsum: conjugated operands */
    int64_t length;  /* irfft: the last axis's output length */
    tf_fft_norm norm;
} step;

/* A graph input: the run's dtype (or its complex twin), positive values or any, its shape. */
enum { IN_SAME, IN_COMPLEX };
typedef struct in_spec {
    int kind;
    int positive;
    int rank;
    int64_t shape[TF_MAX_RANK];
} in_spec;

#define MAX_IN 8
#define MAX_STEPS 48
#define MAX_OUT 16
#define MAX_VALUES (MAX_IN + MAX_STEPS)

typedef struct program {
    const char *name;
    unsigned dtypes; /* bit d: all_dtypes[d] */
    int n_inputs;
    in_spec in[MAX_IN];
    int n_steps;
    step steps[MAX_STEPS];
    int n_outputs;
    int outputs[MAX_OUT];
} program;

#define DT_ALL 0xfu
#define DT_REAL 0x3u
#define DT_COMPLEX 0xcu

/* clang-format off */
#define INPUTS(...) \
    .in = {__VA_ARGS__}, .n_inputs = (int)(sizeof((in_spec[]){__VA_ARGS__}) / sizeof(in_spec))
#define STEPS(...) \
    .steps = {__VA_ARGS__}, .n_steps = (int)(sizeof((step[]){__VA_ARGS__}) / sizeof(step))
#define OUTPUTS(...) \
    .outputs = {__VA_ARGS__}, .n_outputs = (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int))
#define IN(k, pos, r, ...) {.kind = (k), .positive = (pos), .rank = (r), .shape = {__VA_ARGS__}}
#define OP1(k, a) {.kind = (k), .in = {(a)}}
#define OP2(k, a, b) {.kind = (k), .in = {(a), (b)}}
#define AXES(k, a, keep, cnt, ...) \
    {.kind = (k), .in = {(a)}, .keepdims = (keep), .n = (cnt), .ax = {__VA_ARGS__}}
#define RESHAPE(a, cnt, ...) {.kind = S_RESHAPE, .in = {(a)}, .n = (cnt), .dims = {__VA_ARGS__}}
#define EINSUM(s, cj, cnt, ...) \
    {.kind = S_EINSUM, .sub = (s), .conj = (cj), .n = (cnt), .in = {__VA_ARGS__}}
#define FFT(k, a, nrm, len, cnt, ...) \
    {.kind = (k), .in = {(a)}, .norm = (nrm), .length = (len), .n = (cnt), .ax = {__VA_ARGS__}}

static const program programs[] = {
    /* Every elementwise kind, 3 inputs and 12 outputs. */
    {.name = "elementwise", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 2, 3, 5), IN(IN_SAME, 0, 2, 3, 5), IN(IN_SAME, 1, 2, 3, 5)),
     STEPS(OP2(S_ADD, 0, 1), OP2(S_SUB, 0, 1), OP2(S_MUL, 0, 1), OP2(S_DIV, 0, 1), OP1(S_NEG, 0),
           OP1(S_CONJ, 1), OP1(S_ABS, 0), OP1(S_EXP, 0), OP1(S_LOG, 2), OP1(S_SQRT, 2),
           OP1(S_SCALE, 1), OP2(S_AXPBY, 0, 1)),
     OUTPUTS(3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)},
    /*
     * Dependent steps: intermediates read again later, an output listed
     * twice (7), an output that is a graph input (0), a node nobody reads (9).
     */
    {.name = "chain", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 2, 4, 6), IN(IN_SAME, 0, 2, 4, 6)),
     STEPS(OP2(S_ADD, 0, 1), OP2(S_MUL, 2, 0), OP1(S_SCALE, 3), OP1(S_EXP, 4), OP2(S_SUB, 5, 1),
           AXES(S_SUM, 6, 0, 1, 1), OP2(S_DIV, 5, 0), OP1(S_NEG, 8), OP1(S_COPY, 8)),
     OUTPUTS(7, 5, 7, 0, 2, 10)},
    /* Layout and sums, with and without keepdims, over some and over all axes. */
    {.name = "layout", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 3, 2, 3, 4)),
     STEPS({.kind = S_PERMUTE, .in = {0}, .n = 3, .ax = {2, 0, 1}}, RESHAPE(1, 2, 6, 4),
           OP1(S_COPY, 2), AXES(S_SUM, 0, 0, 1, 1), AXES(S_SUM, 0, 1, 2, 0, 2),
           AXES(S_SUM, 0, 0, 0, 0), {.kind = S_PERMUTE, .in = {3}, .n = 2, .ax = {1, 0}},
           RESHAPE(0, 1, 24)),
     OUTPUTS(1, 2, 3, 4, 5, 6, 7, 8)},
    /* max and min (real dtypes only), and a sum of a reduction. */
    {.name = "order", .dtypes = DT_REAL,
     INPUTS(IN(IN_SAME, 0, 3, 3, 4, 5)),
     STEPS(AXES(S_MAX, 0, 0, 1, 2), AXES(S_MIN, 0, 1, 1, 0), AXES(S_MAX, 0, 0, 0, 0),
           AXES(S_MIN, 0, 0, 2, 1, 2), AXES(S_SUM, 1, 1, 1, 0)),
     OUTPUTS(1, 2, 3, 4, 5)},
    /* Matrix products, one of a product, and a batched one. */
    {.name = "matmul", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 2, 3, 4), IN(IN_SAME, 0, 2, 4, 5), IN(IN_SAME, 0, 2, 5, 2),
            IN(IN_SAME, 0, 3, 2, 3, 4), IN(IN_SAME, 0, 3, 2, 4, 2)),
     STEPS(OP2(S_MATMUL, 0, 1), OP2(S_MATMUL, 5, 2), OP2(S_MATMUL, 3, 4)),
     OUTPUTS(5, 6, 7)},
    /* einsum of 1 to 4 operands, some conjugated. */
    {.name = "einsum", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 2, 3, 4), IN(IN_SAME, 0, 2, 4, 5), IN(IN_SAME, 0, 2, 5, 2),
            IN(IN_SAME, 0, 2, 3, 4), IN(IN_SAME, 0, 3, 2, 3, 4)),
     STEPS(EINSUM("ij,jk->ik", 0, 2, 0, 1), EINSUM("ij,jk,kl->il", 0, 3, 0, 1, 2),
           EINSUM("ij,ij->", 1, 2, 0, 3), EINSUM("ij,jk,kl,bij->lb", 2, 4, 0, 1, 2, 4),
           EINSUM("bij->jb", 0, 1, 4)),
     OUTPUTS(5, 6, 7, 8, 9)},
    /* Complex transforms: forward, inverse, norms, one axis and two, and a round trip. */
    {.name = "fft", .dtypes = DT_COMPLEX,
     INPUTS(IN(IN_SAME, 0, 2, 4, 6)),
     STEPS(FFT(S_FFT, 0, TF_FFT_NORM_BACKWARD, 0, 1, 1),
           FFT(S_FFT, 0, TF_FFT_NORM_ORTHO, 0, 2, 0, 1),
           FFT(S_IFFT, 0, TF_FFT_NORM_FORWARD, 0, 1, 0),
           FFT(S_IFFT, 1, TF_FFT_NORM_BACKWARD, 0, 1, 1)),
     OUTPUTS(1, 2, 3, 4)},
    /* Real transforms: rfft over one axis and two, irfft of an explicit (odd) length, round trips. */
    {.name = "rfft", .dtypes = DT_REAL,
     INPUTS(IN(IN_SAME, 0, 2, 4, 6), IN(IN_COMPLEX, 0, 2, 4, 4)),
     STEPS(FFT(S_RFFT, 0, TF_FFT_NORM_BACKWARD, 0, 1, 1),
           FFT(S_RFFT, 0, TF_FFT_NORM_ORTHO, 0, 2, 0, 1),
           FFT(S_IRFFT, 1, TF_FFT_NORM_BACKWARD, 7, 1, 1),
           FFT(S_IRFFT, 2, TF_FFT_NORM_BACKWARD, 6, 1, 1),
           FFT(S_IRFFT, 3, TF_FFT_NORM_ORTHO, 6, 2, 0, 1)),
     OUTPUTS(2, 3, 4, 5, 6)},
    /* Two inputs, two outputs: the preflight tests' graph. */
    {.name = "pair", .dtypes = DT_ALL,
     INPUTS(IN(IN_SAME, 0, 1, 4), IN(IN_SAME, 0, 1, 5)),
     STEPS(OP1(S_NEG, 0), OP1(S_SCALE, 1)),
     OUTPUTS(2, 3)},
};

/* The chain on larger tensors: runs long enough for two clients' runs to overlap. */
static const program wide_program = {
    .name = "wide", .dtypes = DT_ALL,
    INPUTS(IN(IN_SAME, 0, 2, 128, 256), IN(IN_SAME, 0, 2, 128, 256)),
    STEPS(OP2(S_ADD, 0, 1), OP2(S_MUL, 2, 0), OP1(S_SCALE, 3), OP1(S_EXP, 4), OP2(S_SUB, 5, 1),
          AXES(S_SUM, 6, 0, 1, 1), OP2(S_DIV, 5, 0), OP1(S_NEG, 8), OP1(S_COPY, 8)),
    OUTPUTS(7, 5, 10)};

/* Two dependent matrix products and a sum: runs that are still queued when the test acts. */
static const program square_program = {
    .name = "square", .dtypes = DT_ALL,
    INPUTS(IN(IN_SAME, 0, 2, 128, 128), IN(IN_SAME, 0, 2, 128, 128)),
    STEPS(OP2(S_MATMUL, 0, 1), OP2(S_MATMUL, 2, 1), OP1(S_SCALE, 3), AXES(S_SUM, 4, 0, 0, 0)),
    OUTPUTS(5, 2)};

/* clang-format on */

#define N_PROGRAMS ((int)(sizeof programs / sizeof *programs))

/* Program by name (the tests below pick a few). */
static const program *program_named(const char *name) {
    for (int i = 0; i < N_PROGRAMS; i++)
        if (strcmp(programs[i].name, name) == 0) return &programs[i];
    abort();
}

/* The dtype of input i of p when run over dt. */
static tf_dtype input_dtype(const program *p, int i, tf_dtype dt) {
    return p->in[i].kind == IN_COMPLEX ? th_complex_of(dt) : dt;
}

/* Queues step s on view v over the tensors val[] into *out. */
static tf_status record_step(tf_view *v, const step *s, const tf_tensor *val, tf_tensor *out) {
    const tf_tensor a = val[s->in[0]], b = val[s->in[1]];
    switch (s->kind) {
    case S_ADD: return tf_view_add(v, a, b, out);
    case S_SUB: return tf_view_sub(v, a, b, out);
    case S_MUL: return tf_view_mul(v, a, b, out);
    case S_DIV: return tf_view_div(v, a, b, out);
    case S_NEG: return tf_view_neg(v, a, out);
    case S_CONJ: return tf_view_conj(v, a, out);
    case S_ABS: return tf_view_abs(v, a, out);
    case S_EXP: return tf_view_exp(v, a, out);
    case S_LOG: return tf_view_log(v, a, out);
    case S_SQRT: return tf_view_sqrt(v, a, out);
    case S_SCALE: return tf_view_scale(v, ALPHA, a, out);
    case S_AXPBY: return tf_view_axpby(v, ALPHA, a, BETA, b, out);
    case S_PERMUTE: return tf_view_permute(v, a, s->n, s->ax, out);
    case S_RESHAPE: return tf_view_reshape(v, a, s->n, s->dims, out);
    case S_COPY: return tf_view_copy(v, a, out);
    case S_SUM: return tf_view_reduce(v, TF_REDUCE_SUM, a, s->n, s->ax, s->keepdims, out);
    case S_MAX: return tf_view_reduce(v, TF_REDUCE_MAX, a, s->n, s->ax, s->keepdims, out);
    case S_MIN: return tf_view_reduce(v, TF_REDUCE_MIN, a, s->n, s->ax, s->keepdims, out);
    case S_MATMUL: return tf_view_matmul(v, a, b, out);
    case S_EINSUM: {
        tf_tensor ops[4];
        for (int i = 0; i < s->n; i++) ops[i] = val[s->in[i]];
        if (!s->conj) return tf_view_einsum(v, s->sub, s->n, ops, out);
        const tf_einsum_options opt = {.conj = s->conj};
        return tf_view_einsum_opt(v, s->sub, s->n, ops, &opt, out);
    }
    case S_FFT: return tf_view_fft(v, a, s->n, s->ax, s->norm, out);
    case S_IFFT: return tf_view_ifft(v, a, s->n, s->ax, s->norm, out);
    case S_RFFT: return tf_view_rfft(v, a, s->n, s->ax, s->norm, out);
    case S_IRFFT: return tf_view_irfft(v, a, s->n, s->ax, s->length, s->norm, out);
    }
    return TF_ERR_INVALID_ARGUMENT;
}

/* Queues every step of p on v: val[0, n_inputs) are given, the steps' results follow. */
static tf_status record_program(tf_view *v, const program *p, tf_tensor *val) {
    for (int k = 0; k < p->n_steps; k++) {
        tf_status st = record_step(v, &p->steps[k], val, &val[p->n_inputs + k]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* ---- the reference interpreter ---- */

/* The scaling an FFT norm gives one axis of length n. */
static long double axis_factor(tf_fft_norm norm, int inverse, int64_t n) {
    if (norm == TF_FFT_NORM_ORTHO) return 1.0L / sqrtl((long double)n);
    if (norm == TF_FFT_NORM_FORWARD) return inverse ? 1.0L : 1.0L / (long double)n;
    return inverse ? 1.0L / (long double)n : 1.0L;
}

/* e^(sign 2 pi i jk / n), the angle reduced first so it stays exact. */
static lcx twiddle(int64_t j, int64_t k, int64_t n, int sign) {
    const long double th =
        2.0L * 3.14159265358979323846264338327950288L * (long double)(j * k % n) / (long double)n;
    return cosl(th) + I * (long double)sign * sinl(th);
}

/* A complex DFT of x along one axis, in place. */
static void dft_axis(hval *x, int axis, int inverse, tf_fft_norm norm) {
    const int64_t n = x->shape[axis];
    int64_t stride = 1;
    for (int a = axis + 1; a < x->rank; a++) stride *= x->shape[a];
    const int64_t outer = x->n / (n * stride);
    const long double f = axis_factor(norm, inverse, n);
    lcx *tmp = malloc(sizeof *tmp * (size_t)n);
    if (!tmp) abort();
    for (int64_t o = 0; o < outer; o++)
        for (int64_t s = 0; s < stride; s++) {
            lcx *line = x->v + o * n * stride + s;
            for (int64_t k = 0; k < n; k++) {
                lcx acc = 0;
                for (int64_t j = 0; j < n; j++)
                    acc += line[j * stride] * twiddle(j, k, n, inverse ? 1 : -1);
                tmp[k] = acc * f;
            }
            for (int64_t k = 0; k < n; k++) line[k * stride] = tmp[k];
        }
    free(tmp);
}

/* A copy of a as dtype dt. */
static void hval_copy(hval *out, const hval *a, tf_dtype dt) {
    hval_new(out, dt, a->rank, a->shape);
    memcpy(out->v, a->v, sizeof *out->v * (size_t)a->n);
    out->err = a->err;
}

/* The FFT kinds: C2C over the axes, R2C (the last axis halved), C2R (the last axis to length). */
static void eval_fft(const step *s, const hval *a, hval *out) {
    const int last = s->ax[s->n - 1];
    int64_t total = 1;
    for (int i = 0; i < s->n; i++)
        total *= s->kind == S_IRFFT && i == s->n - 1 ? s->length : a->shape[s->ax[i]];
    if (s->kind == S_FFT || s->kind == S_IFFT) {
        hval_copy(out, a, a->dt);
        for (int i = 0; i < s->n; i++) dft_axis(out, s->ax[i], s->kind == S_IFFT, s->norm);
    } else if (s->kind == S_RFFT) {
        hval full;
        hval_copy(&full, a, th_complex_of(a->dt));
        for (int i = 0; i < s->n; i++) dft_axis(&full, s->ax[i], 0, s->norm);
        int64_t shape[TF_MAX_RANK], idx[TF_MAX_RANK];
        memcpy(shape, a->shape, sizeof shape);
        shape[last] = a->shape[last] / 2 + 1;
        hval_new(out, th_complex_of(a->dt), a->rank, shape);
        for (int64_t f = 0; f < full.n; f++) {
            unflatten(f, a->rank, a->shape, idx);
            if (idx[last] < shape[last]) out->v[flatten(a->rank, shape, idx)] = full.v[f];
        }
        hval_free(&full);
    } else {
        /* irfftn: inverse C2C over every axis but the last, then C2R of the Hermitian extension. */
        hval half;
        hval_copy(&half, a, a->dt);
        for (int i = 0; i < s->n - 1; i++) dft_axis(&half, s->ax[i], 1, s->norm);
        const int64_t m = a->shape[last], L = s->length;
        int64_t shape[TF_MAX_RANK], idx[TF_MAX_RANK];
        memcpy(shape, a->shape, sizeof shape);
        shape[last] = L;
        hval_new(out, th_real_of(a->dt), a->rank, shape);
        const long double f = axis_factor(s->norm, 1, L);
        for (int64_t o = 0; o < out->n; o++) {
            unflatten(o, a->rank, shape, idx);
            const int64_t j = idx[last];
            lcx acc = 0;
            for (int64_t k = 0; k < L; k++) {
                idx[last] = k < m ? k : L - k;
                const lcx x = half.v[flatten(a->rank, a->shape, idx)];
                acc += (k < m ? x : conjl(x)) * twiddle(j, k, L, 1);
            }
            out->v[o] = creall(acc) * f;
        }
        hval_free(&half);
    }
    out->err = a->err + 2 * (double)total;
}

/* einsum by its definition: every assignment of every label, the products summed. */
static void eval_einsum(const step *s, const hval *val, hval *out) {
    const char *terms[4];
    int lens[4], n_ops = 0;
    const char *p = s->sub;
    while (*p && n_ops < 4) {
        terms[n_ops] = p;
        while (*p && *p != ',' && *p != '-') p++;
        lens[n_ops] = (int)(p - terms[n_ops]);
        n_ops++;
        if (*p == ',')
            p++;
        else
            break;
    }
    const char *outs = strstr(s->sub, "->") + 2;
    const int out_rank = (int)strlen(outs);
    int64_t size[26] = {0};
    double err = 0;
    for (int i = 0; i < n_ops; i++) {
        const hval *x = &val[s->in[i]];
        for (int a = 0; a < lens[i]; a++) size[terms[i][a] - 'a'] = x->shape[a];
        if (x->err > err) err = x->err;
    }
    int letters[26], n_letters = 0;
    for (int l = 0; l < 26; l++)
        if (size[l]) letters[n_letters++] = l;
    int64_t oshape[TF_MAX_RANK];
    for (int a = 0; a < out_rank; a++) oshape[a] = size[outs[a] - 'a'];
    hval_new(out, val[s->in[0]].dt, out_rank, oshape);
    int64_t at[26] = {0}, assignments = 1;
    for (int l = 0; l < n_letters; l++) assignments *= size[letters[l]];
    for (int64_t it = 0; it < assignments; it++) {
        int64_t rest = it;
        for (int l = n_letters - 1; l >= 0; l--) {
            at[letters[l]] = rest % size[letters[l]];
            rest /= size[letters[l]];
        }
        lcx prod = 1;
        for (int i = 0; i < n_ops; i++) {
            const hval *x = &val[s->in[i]];
            int64_t idx[TF_MAX_RANK];
            for (int a = 0; a < lens[i]; a++) idx[a] = at[terms[i][a] - 'a'];
            const lcx e = x->v[flatten(x->rank, x->shape, idx)];
            prod *= (s->conj >> i & 1) ? conjl(e) : e;
        }
        int64_t oidx[TF_MAX_RANK];
        for (int a = 0; a < out_rank; a++) oidx[a] = at[outs[a] - 'a'];
        out->v[flatten(out_rank, oshape, oidx)] += prod;
    }
    out->err = err + n_ops + (double)(assignments / out->n);
}

/* A reduction over s->ax (none: every axis), keeping them as size 1 with keepdims. */
static void eval_reduce(const step *s, const hval *a, hval *out) {
    int reduced[TF_MAX_RANK] = {0};
    for (int i = 0; i < s->n; i++) reduced[s->ax[i]] = 1;
    if (s->n == 0)
        for (int i = 0; i < a->rank; i++) reduced[i] = 1;
    int64_t shape[TF_MAX_RANK];
    int rank = 0;
    for (int i = 0; i < a->rank; i++)
        if (!reduced[i])
            shape[rank++] = a->shape[i];
        else if (s->keepdims)
            shape[rank++] = 1;
    hval_new(out, a->dt, rank, shape);
    char *seen = calloc((size_t)out->n, 1);
    if (!seen) abort();
    for (int64_t f = 0; f < a->n; f++) {
        int64_t idx[TF_MAX_RANK], oidx[TF_MAX_RANK];
        unflatten(f, a->rank, a->shape, idx);
        int r = 0;
        for (int i = 0; i < a->rank; i++)
            if (!reduced[i])
                oidx[r++] = idx[i];
            else if (s->keepdims)
                oidx[r++] = 0;
        const int64_t o = flatten(rank, shape, oidx);
        const lcx x = a->v[f];
        if (s->kind == S_SUM)
            out->v[o] += x;
        else if (!seen[o] ||
                 (s->kind == S_MAX ? creall(x) > creall(out->v[o]) : creall(x) < creall(out->v[o])))
            out->v[o] = x;
        seen[o] = 1;
    }
    free(seen);
    out->err = s->kind == S_SUM ? a->err + (double)(a->n / out->n) : a->err;
}

/* out = step s over the values val[] (plain loops, long double). */
static void eval_step(const step *s, const hval *val, hval *out) {
    const hval *a = &val[s->in[0]], *b = &val[s->in[1]];
    switch (s->kind) {
    case S_ADD:
    case S_SUB:
    case S_MUL:
    case S_DIV:
    case S_AXPBY: {
        hval_new(out, a->dt, a->rank, a->shape);
        const lcx al = coefficient(a->dt, ALPHA), be = coefficient(a->dt, BETA);
        for (int64_t i = 0; i < a->n; i++) {
            const lcx x = a->v[i], y = b->v[i];
            out->v[i] = s->kind == S_ADD   ? x + y
                        : s->kind == S_SUB ? x - y
                        : s->kind == S_MUL ? x * y
                        : s->kind == S_DIV ? x / y
                                           : al * x + be * y;
        }
        out->err = (a->err > b->err ? a->err : b->err) + (s->kind == S_AXPBY ? 3 : 2);
        return;
    }
    case S_NEG:
    case S_CONJ:
    case S_ABS:
    case S_EXP:
    case S_LOG:
    case S_SQRT:
    case S_SCALE: {
        hval_new(out, s->kind == S_ABS ? th_real_of(a->dt) : a->dt, a->rank, a->shape);
        const lcx al = coefficient(a->dt, ALPHA);
        for (int64_t i = 0; i < a->n; i++) {
            const lcx x = a->v[i];
            out->v[i] = s->kind == S_NEG    ? -x
                        : s->kind == S_CONJ ? conjl(x)
                        : s->kind == S_ABS  ? cabsl(x)
                        : s->kind == S_EXP  ? cexpl(x)
                        : s->kind == S_LOG  ? clogl(x)
                        : s->kind == S_SQRT ? csqrtl(x)
                                            : al * x;
        }
        /* Negation and conjugation are exact; exp, log and sqrt may amplify the input's error. */
        out->err = s->kind == S_NEG || s->kind == S_CONJ                       ? a->err
                   : s->kind == S_EXP || s->kind == S_LOG || s->kind == S_SQRT ? 3 * a->err + 2
                                                                               : a->err + 2;
        return;
    }
    case S_PERMUTE: {
        int64_t shape[TF_MAX_RANK], idx[TF_MAX_RANK], from[TF_MAX_RANK];
        for (int i = 0; i < a->rank; i++) shape[i] = a->shape[s->ax[i]];
        hval_new(out, a->dt, a->rank, shape);
        for (int64_t f = 0; f < out->n; f++) {
            unflatten(f, a->rank, shape, idx);
            for (int i = 0; i < a->rank; i++) from[s->ax[i]] = idx[i];
            out->v[f] = a->v[flatten(a->rank, a->shape, from)];
        }
        out->err = a->err;
        return;
    }
    case S_RESHAPE:
    case S_COPY:
        hval_copy(out, a, a->dt);
        if (s->kind == S_RESHAPE) {
            out->rank = s->n;
            memcpy(out->shape, s->dims, sizeof out->shape);
        }
        return;
    case S_SUM:
    case S_MAX:
    case S_MIN: eval_reduce(s, a, out); return;
    case S_MATMUL: {
        const int r = a->rank;
        const int64_t m = a->shape[r - 2], k = a->shape[r - 1], n = b->shape[r - 1];
        int64_t shape[TF_MAX_RANK];
        memcpy(shape, a->shape, sizeof shape);
        shape[r - 1] = n;
        hval_new(out, a->dt, r, shape);
        const int64_t batches = a->n / (m * k);
        for (int64_t t = 0; t < batches; t++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    lcx acc = 0;
                    for (int64_t l = 0; l < k; l++)
                        acc += a->v[(t * m + i) * k + l] * b->v[(t * k + l) * n + j];
                    out->v[(t * m + i) * n + j] = acc;
                }
        out->err = (a->err > b->err ? a->err : b->err) + 2 * (double)k;
        return;
    }
    case S_EINSUM: eval_einsum(s, val, out); return;
    case S_FFT:
    case S_IFFT:
    case S_RFFT:
    case S_IRFFT: eval_fft(s, a, out); return;
    }
}

/* Evaluates p: val[0, n_inputs) are given, the steps' results follow (free with hval_free). */
static void evaluate(const program *p, hval *val) {
    for (int k = 0; k < p->n_steps; k++) eval_step(&p->steps[k], val, &val[p->n_inputs + k]);
}

static void free_values(hval *val, int n) {
    for (int i = 0; i < n; i++) hval_free(&val[i]);
}

/* ---- preparing and running programs (status-returning, so forked children use them too) ---- */

/* Uploads fresh random inputs of p over dt: t[i] the tensors, h[i] their values (exact). */
static tf_status upload_inputs(tf_client *c, const program *p, tf_dtype dt, tf_tensor *t, hval *h) {
    for (int i = 0; i < p->n_inputs; i++) {
        const in_spec *s = &p->in[i];
        const tf_dtype idt = input_dtype(p, i, dt);
        hval_new(&h[i], idt, s->rank, s->shape);
        void *buf = malloc((size_t)h[i].n * tf_dtype_size(idt));
        if (!buf) abort();
        (s->positive ? th_fill_positive : th_fill_random)(idt, (size_t)h[i].n, buf);
        widen(idt, h[i].n, buf, h[i].v);
        tf_status st = tf_upload(c, idt, s->rank, s->shape, buf, &t[i]);
        free(buf);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* Records p over dt on a new graph and prepares it. */
static tf_status prepare_program(tf_client *c, const program *p, tf_dtype dt, tf_prepared *out) {
    tf_graph *g = NULL;
    tf_tensor val[MAX_VALUES] = {0};
    tf_status st = tf_graph_new(c, &g);
    for (int i = 0; i < p->n_inputs && st == TF_OK; i++)
        st = tf_graph_input(g, input_dtype(p, i, dt), p->in[i].rank, p->in[i].shape, &val[i]);
    if (st == TF_OK) st = record_program(tf_graph_view(g), p, val);
    for (int o = 0; o < p->n_outputs && st == TF_OK; o++)
        st = tf_graph_output(g, val[p->outputs[o]]);
    if (st == TF_OK) st = tf_prepare(c, g, out);
    tf_graph_free(g);
    return st;
}

/* `times` runs of a prepared graph, queued in one session callback; run t's outputs at out + t *
 * n_out. */
typedef struct run_job {
    tf_prepared p;
    int n_in, n_out, times;
    const tf_tensor *in;
    tf_tensor *out;
} run_job;

static tf_status run_fn(tf_view *v, void *arg) {
    run_job *j = arg;
    for (int t = 0; t < j->times; t++) {
        tf_status st =
            tf_view_run_prepared(v, j->p, j->n_in, j->in, j->n_out, j->out + t * j->n_out);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* Runs a job in a held session of its own: open, with, synchronize, close. */
static tf_status with_held(tf_client *c, tf_session_fn fn, void *arg) {
    tf_session *s = NULL;
    tf_status st = tf_session_open(c, &s);
    if (st != TF_OK) return st;
    st = tf_session_with(s, fn, arg);
    if (st == TF_OK) st = tf_session_synchronize(s);
    tf_status closed = tf_session_close(s, NULL);
    return st != TF_OK ? st : closed;
}

/* The steps of a program queued unprepared on a session view, over val[] (inputs given). */
typedef struct plain_job {
    const program *p;
    tf_tensor *val;
} plain_job;

static tf_status plain_fn(tf_view *v, void *arg) {
    plain_job *j = arg;
    return record_program(v, j->p, j->val);
}

/*
 * One scoped run of pp (program p) on inputs in[], every output compared
 * with the reference values val[], then freed. 0 when all agree, else 1
 * with the first difference in why.
 */
static int run_and_compare(tf_client *c, const program *p, tf_prepared pp, const tf_tensor *in,
                           const hval *val, char *why, size_t len) {
    tf_tensor out[MAX_OUT] = {0};
    run_job j = {pp, p->n_inputs, p->n_outputs, 1, in, out};
    tf_status st = tf_with_session(c, run_fn, &j);
    if (st != TF_OK) {
        snprintf(why, len, "run of %s: %s: %s", p->name, tf_status_name(st),
                 tf_client_last_error(c));
        return 1;
    }
    int bad = 0;
    for (int o = 0; o < p->n_outputs; o++) {
        char d[400];
        if (!bad && tensor_differs(c, out[o], &val[p->outputs[o]], d, sizeof d)) {
            snprintf(why, len, "%s output %d: %s", p->name, o, d);
            bad = 1;
        }
        tf_tensor_free(c, out[o]);
    }
    return bad;
}

/* ---- the test process's fixture ---- */

static th_daemon D;
static tf_client *C;

/* Fails the test with the call, the status and the client's message unless the call succeeds. */
#define EXPECT_OK(c, call)                                                                         \
    do {                                                                                           \
        tf_status st_ = (call);                                                                    \
        ck_assert_msg(st_ == TF_OK, "%s: %s: %s (seed %u)", #call, tf_status_name(st_),            \
                      tf_client_last_error(c), th_seed());                                         \
    } while (0)

/* Fails the test unless the call returns `want` with a message containing `needle` (when given). */
#define EXPECT_FAIL(c, call, want, needle)                                                         \
    do {                                                                                           \
        tf_status st_ = (call);                                                                    \
        ck_assert_msg(st_ == (want), "%s returned %s, expected %s: %s", #call,                     \
                      tf_status_name(st_), tf_status_name(want), tf_client_last_error(c));         \
        const char *n_ = (needle);                                                                 \
        ck_assert_msg(!n_ || strstr(tf_client_last_error(c), n_),                                  \
                      "%s: message \"%s\" does not "                                               \
                      "mention \"%s\"",                                                            \
                      #call, tf_client_last_error(c), n_);                                         \
    } while (0)

/* Waits until the daemon's device memory is what `allocs` tensors of `bytes` hold in all. */
static void expect_device_memory(const th_daemon *d, uint64_t allocs, uint64_t bytes,
                                 const char *when) {
    ck_assert_msg(th_wait_counter(d, "device_allocations_live", allocs, 10000),
                  "%s: device_allocations_live is %llu, expected %llu", when,
                  (unsigned long long)th_counter(d, "device_allocations_live"),
                  (unsigned long long)allocs);
    ck_assert_msg(th_wait_counter(d, "device_bytes_live", bytes, 10000),
                  "%s: device_bytes_live is %llu, expected %llu", when,
                  (unsigned long long)th_counter(d, "device_bytes_live"),
                  (unsigned long long)bytes);
}

/* The prepared_graphs cache as the status report lists it. */
typedef struct cache_info {
    uint64_t entries, hits, misses, bytes;
} cache_info;

static cache_info graph_cache(const th_daemon *d) {
    Tenferro__Frame *r = th_status_report(d);
    ck_assert_ptr_nonnull(r);
    cache_info ci = {0};
    int found = 0;
    for (size_t i = 0; i < r->status_reply->n_caches; i++) {
        const Tenferro__CacheInfo *x = r->status_reply->caches[i];
        if (strcmp(x->name, "prepared_graphs") != 0) continue;
        ci = (cache_info){x->entries, x->hits, x->misses, x->bytes};
        found = 1;
    }
    tf__frame_free(r);
    ck_assert_msg(found, "the status report lists no prepared_graphs cache");
    return ci;
}

/* Connections the daemon still keeps (accepted, not yet freed), the status request's own excluded.
 */
static int64_t kept_connections(const th_daemon *d) {
    Tenferro__Frame *r = th_status_report(d);
    ck_assert_ptr_nonnull(r);
    int64_t accepted = -1, closed = -1;
    for (size_t i = 0; i < r->status_reply->n_counters; i++) {
        const Tenferro__Counter *k = r->status_reply->counters[i];
        if (strcmp(k->name, "connections_accepted") == 0) accepted = (int64_t)k->value;
        if (strcmp(k->name, "connections_closed") == 0) closed = (int64_t)k->value;
    }
    tf__frame_free(r);
    return accepted - closed - 1;
}

/* Waits until the daemon keeps exactly n connections; fails the test after 10 s. */
static void expect_connections(const th_daemon *d, int64_t n, const char *when) {
    for (int waited = 0; waited < 10000; waited += 10) {
        if (kept_connections(d) == n) return;
        th_sleep_ms(10);
    }
    ck_abort_msg("%s: the daemon keeps %lld connections, expected %lld", when,
                 (long long)kept_connections(d), (long long)n);
}

/* A client holding one prepared program with its inputs and their reference values. */
typedef struct holder {
    tf_client *c;
    const program *p;
    tf_prepared pp;
    tf_tensor in[MAX_IN];
    hval val[MAX_VALUES];
} holder;

static void holder_start(holder *h, tf_client *c, const program *p, tf_dtype dt) {
    memset(h, 0, sizeof *h);
    h->c = c;
    h->p = p;
    EXPECT_OK(c, upload_inputs(c, h->p, dt, h->in, h->val));
    evaluate(h->p, h->val);
    EXPECT_OK(c, prepare_program(c, h->p, dt, &h->pp));
}

/* Runs the holder's graph once and checks every output. */
static void holder_check(holder *h, const char *when) {
    char why[600];
    ck_assert_msg(!run_and_compare(h->c, h->p, h->pp, h->in, h->val, why, sizeof why),
                  "%s: %s (seed %u)", when, why, th_seed());
}

/* Frees the holder's inputs and prepared graph (the client stays connected). */
static void holder_stop(holder *h) {
    for (int i = 0; i < h->p->n_inputs; i++) EXPECT_OK(h->c, tf_tensor_free(h->c, h->in[i]));
    if (h->pp) EXPECT_OK(h->c, tf_prepared_free(h->c, h->pp));
    free_values(h->val, h->p->n_inputs + h->p->n_steps);
}

/* Device bytes of the holder's inputs. */
static uint64_t holder_input_bytes(const holder *h) {
    uint64_t b = 0;
    for (int i = 0; i < h->p->n_inputs; i++)
        b += (uint64_t)h->val[i].n * tf_dtype_size(h->val[i].dt);
    return b;
}

/* ---- raw frames ---- */

static uint64_t g_seq = 1;

/* Sends f with a fresh sequence number and returns the reply (failing the test without one). */
static Tenferro__Frame *call(int fd, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    return r;
}

/* A raw connection past its Hello. */
static int raw_client(const th_daemon *d, const char *name) {
    int fd = th_raw_open(d, name, ++g_seq, NULL);
    ck_assert_msg(fd >= 0, "%s: no HelloReply", name);
    return fd;
}

/* Creates tensor id of dtype dt and shape [n] holding data. */
static void raw_upload(int fd, uint64_t id, tf_dtype dt, int64_t n, const void *data) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    int64_t shape[1] = {n};
    th_raw_build_upload(&f, &up, id, 1, dt, 1, shape, 0, data, (size_t)n * tf_dtype_size(dt));
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
}

/* Downloads `bytes` of tensor id into dst; returns the status (TF_OK or the refusal). */
static tf_status raw_download(int fd, uint64_t id, void *dst, size_t bytes) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, bytes);
    Tenferro__Frame *r = call(fd, &f);
    tf_status st;
    if (r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
        st = (tf_status)r->download_reply->result->status;
        if (st == TF_OK) {
            ck_assert_uint_eq(r->download_reply->data.len, bytes);
            memcpy(dst, r->download_reply->data.data, bytes);
        }
    } else {
        ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
        st = (tf_status)r->result->status;
    }
    tf__frame_free(r);
    return st;
}

/* 1 when tensor id is live on the raw connection (a one-byte download succeeds). */
static int raw_live(int fd, uint64_t id) {
    uint8_t byte;
    return raw_download(fd, id, &byte, 1) == TF_OK;
}

/* A Prepare frame being built, with the storage it points into. */
#define RAW_NODES 16
typedef struct raw_graph {
    Tenferro__Prepare p;
    Tenferro__GraphInput in[MAX_IN], *in_ptrs[MAX_IN];
    int64_t shapes[MAX_IN][TF_MAX_RANK];
    Tenferro__Op ops[RAW_NODES], *op_ptrs[RAW_NODES];
    uint64_t op_in[RAW_NODES][2];
    uint64_t outputs[MAX_OUT];
} raw_graph;

static void rg_init(raw_graph *g, uint64_t id) {
    memset(g, 0, sizeof *g);
    tenferro__prepare__init(&g->p);
    g->p.id = id;
    g->p.inputs = g->in_ptrs;
    g->p.nodes = g->op_ptrs;
    g->p.outputs = g->outputs;
}

/* Adds graph input `id`: dtype and shape [n] (n < 0: rank 0). */
static void rg_input(raw_graph *g, uint64_t id, uint32_t dtype, int64_t n) {
    const size_t i = g->p.n_inputs++;
    tenferro__graph_input__init(&g->in[i]);
    g->in[i].id = id;
    g->in[i].dtype = dtype;
    g->shapes[i][0] = n;
    g->in[i].n_shape = n < 0 ? 0 : 1;
    g->in[i].shape = g->shapes[i];
    g->in_ptrs[i] = &g->in[i];
}

/* Adds a node of `kind` reading a (and b when n_in is 2) into `out`; returns it for more fields. */
static Tenferro__Op *rg_node(raw_graph *g, uint32_t kind, int n_in, uint64_t a, uint64_t b,
                             uint64_t out) {
    const size_t i = g->p.n_nodes++;
    ck_assert_uint_lt(i, RAW_NODES);
    Tenferro__Op *op = &g->ops[i];
    tenferro__op__init(op);
    op->kind = kind;
    g->op_in[i][0] = a;
    g->op_in[i][1] = b;
    op->inputs = g->op_in[i];
    op->n_inputs = (size_t)n_in;
    op->output = out;
    g->op_ptrs[i] = op;
    return op;
}

static void rg_output(raw_graph *g, uint64_t id) { g->outputs[g->p.n_outputs++] = id; }

/* Sends the Prepare and returns its answer (caller frees). */
static Tenferro__Frame *rg_prepare(int fd, raw_graph *g) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_PREPARE;
    f.prepare = &g->p;
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    return r;
}

/* Tells the daemon to forget raw prepared graph id (no answer). */
static void raw_prepared_free(int fd, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__PreparedFree pf = TENFERRO__PREPARED_FREE__INIT;
    pf.id = id;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_PREPARED_FREE;
    f.prepared_free = &pf;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
}

/* Fills op as one run of prepared graph p: inputs in[0, n_in), new outputs out[0, n_out). */
static void raw_run_op(Tenferro__Op *op, uint64_t p, uint64_t *in, size_t n_in, uint64_t *out,
                       size_t n_out) {
    tenferro__op__init(op);
    op->kind = TENFERRO__OP_KIND__OP_RUN_PREPARED;
    op->prepared = p;
    op->inputs = in;
    op->n_inputs = n_in;
    op->outputs = out;
    op->n_outputs = n_out;
}

/* Sends ops as one scoped burst and returns its Result (caller frees). */
static Tenferro__Frame *raw_submit(int fd, Tenferro__Op **ops, size_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.ops = ops;
    sub.n_ops = n;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    return r;
}

/* One run as its own burst: its Result (caller frees). */
static Tenferro__Frame *raw_run(int fd, uint64_t p, uint64_t *in, size_t n_in, uint64_t *out,
                                size_t n_out) {
    Tenferro__Op op, *ops[1] = {&op};
    raw_run_op(&op, p, in, n_in, out, n_out);
    return raw_submit(fd, ops, 1);
}

/* reply must be a Result with `status`, a message mentioning needle, and failed_index (or none:
 * -1). */
static void expect_refusal(Tenferro__Frame *reply, tf_status status, const char *needle,
                           int64_t failed_index, const char *what) {
    char why[1024];
    ck_assert_msg(th_reply_problem(reply, status, needle, why, sizeof why) == 0, "%s: %s", what,
                  why);
    const Tenferro__Result *r = reply->result;
    if (failed_index < 0)
        ck_assert_msg(!r->has_failed_index, "%s: names index %u, expected none (%s)", what,
                      r->failed_index, r->message);
    else
        ck_assert_msg(r->has_failed_index && r->failed_index == (uint32_t)failed_index,
                      "%s: failed_index %s%u, expected %lld (%s)", what,
                      r->has_failed_index ? "" : "absent ", r->failed_index,
                      (long long)failed_index, r->message);
    tf__frame_free(reply);
}

/* The next tensor id no raw connection of this test has used. */
static uint64_t g_next_tensor = 1000;

/*
 * A valid graph on raw connection fd as prepared id `id`: y = exp(x) + x
 * over f64 [8]; prepared, run on a fresh tensor of random values, checked
 * against the reference, then freed. Proves the connection still works.
 */
static void raw_valid_roundtrip(int fd, uint64_t id, const char *when) {
    double x[8], y[8];
    th_fill_random(TF_F64, 8, x);
    const uint64_t xt = ++g_next_tensor, yt = ++g_next_tensor;
    raw_upload(fd, xt, TF_F64, 8, x);
    raw_graph g;
    rg_init(&g, id);
    rg_input(&g, 1, TF_F64, 8);
    rg_node(&g, TENFERRO__OP_KIND__OP_EXP, 1, 1, 0, 2);
    rg_node(&g, TENFERRO__OP_KIND__OP_ADD, 2, 2, 1, 3);
    rg_output(&g, 3);
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, when);
    uint64_t in[1] = {xt}, out[1] = {yt};
    expect_refusal(raw_run(fd, id, in, 1, out, 1), TF_OK, NULL, -1, when);
    ck_assert_int_eq(raw_download(fd, yt, y, sizeof y), TF_OK);
    for (int i = 0; i < 8; i++) {
        const long double want = expl(x[i]) + x[i];
        ck_assert_msg(fabsl(y[i] - want) <= 1e-13L * (1 + fabsl(want)),
                      "%s: element %d is %.17g, expected %.17Lg", when, i, y[i], want);
    }
    raw_prepared_free(fd, id);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    uint64_t ids[2] = {xt, yt};
    fr.tensors = ids;
    fr.n_tensors = 2;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_FREE;
    f.free = &fr;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
}

/* ---- 1: every operation kind, prepared, against unprepared and the reference ---- */

/*
 * Program p over dt: prepared and run twice in one session (scoped or held),
 * run unprepared in a session of the same kind, evaluated here. Every output
 * of both runs equals the reference and the unprepared result, each with the
 * dtype and shape tf_prepared_output reports; the outputs are distinct
 * tensors (an output listed twice too); the inputs are unchanged.
 */
static void check_program(const program *p, tf_dtype dt, int held) {
    char what[128];
    snprintf(what, sizeof what, "%s over %s (%s session, seed %u)", p->name, tf_dtype_name(dt),
             held ? "held" : "scoped", th_seed());
    tf_tensor in[MAX_IN];
    hval val[MAX_VALUES];
    EXPECT_OK(C, upload_inputs(C, p, dt, in, val));
    evaluate(p, val);
    tf_prepared pp = 0;
    EXPECT_OK(C, prepare_program(C, p, dt, &pp));
    ck_assert_uint_ne(pp, 0);
    int n_in = -1, n_out = -1;
    EXPECT_OK(C, tf_prepared_info(C, pp, &n_in, &n_out));
    ck_assert_int_eq(n_in, p->n_inputs);
    ck_assert_int_eq(n_out, p->n_outputs);

    enum { TIMES = 2 };
    tf_tensor out[TIMES * MAX_OUT] = {0};
    run_job j = {pp, p->n_inputs, p->n_outputs, TIMES, in, out};
    EXPECT_OK(C, held ? with_held(C, run_fn, &j) : tf_with_session(C, run_fn, &j));
    tf_tensor plain[MAX_VALUES] = {0};
    memcpy(plain, in, sizeof(tf_tensor) * (size_t)p->n_inputs);
    plain_job pj = {p, plain};
    EXPECT_OK(C, held ? with_held(C, plain_fn, &pj) : tf_with_session(C, plain_fn, &pj));

    for (int a = 0; a < TIMES * p->n_outputs; a++)
        for (int b = 0; b < a; b++)
            ck_assert_msg(out[a] != out[b], "%s: outputs %d and %d are one tensor", what, a, b);
    char why[600];
    for (int o = 0; o < p->n_outputs; o++) {
        const hval *want = &val[p->outputs[o]];
        tf_dtype odt;
        int orank;
        int64_t oshape[TF_MAX_RANK];
        EXPECT_OK(C, tf_prepared_output(C, pp, o, &odt, &orank, oshape));
        ck_assert_msg(
            odt == want->dt && orank == want->rank &&
                (!orank || memcmp(oshape, want->shape, sizeof(int64_t) * (size_t)orank) == 0),
            "%s: tf_prepared_output %d says %s rank %d, expected %s rank %d", what, o,
            tf_dtype_name(odt), orank, tf_dtype_name(want->dt), want->rank);
        const tf_tensor unprepared = plain[p->outputs[o]];
        ck_assert_msg(!tensor_differs(C, unprepared, want, why, sizeof why),
                      "%s: output %d unprepared against the reference: %s", what, o, why);
        hval same;
        EXPECT_OK(C, tensor_as_value(C, unprepared, want->err, &same));
        for (int t = 0; t < TIMES; t++) {
            ck_assert_msg(!tensor_differs(C, out[t * p->n_outputs + o], want, why, sizeof why),
                          "%s: output %d of run %d against the reference: %s", what, o, t, why);
            ck_assert_msg(!tensor_differs(C, out[t * p->n_outputs + o], &same, why, sizeof why),
                          "%s: output %d of run %d against the unprepared result: %s", what, o, t,
                          why);
        }
        hval_free(&same);
    }
    for (int i = 0; i < p->n_inputs; i++)
        ck_assert_msg(!tensor_differs(C, in[i], &val[i], why, sizeof why),
                      "%s: input %d changed: %s", what, i, why);

    for (int a = 0; a < TIMES * p->n_outputs; a++) EXPECT_OK(C, tf_tensor_free(C, out[a]));
    for (int k = 0; k < p->n_steps; k++) EXPECT_OK(C, tf_tensor_free(C, plain[p->n_inputs + k]));
    for (int i = 0; i < p->n_inputs; i++) EXPECT_OK(C, tf_tensor_free(C, in[i]));
    EXPECT_OK(C, tf_prepared_free(C, pp));
    EXPECT_FAIL(C, tf_prepared_info(C, pp, NULL, NULL), TF_ERR_UNKNOWN_HANDLE, "not live");
    free_values(val, p->n_inputs + p->n_steps);
}

/* Program _i over every dtype it serves, scoped and held sessions alternating. */
START_TEST(test_every_operation) {
    const program *p = &programs[_i];
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    int k = 0;
    for (int d = 0; d < 4; d++)
        if (p->dtypes >> d & 1) check_program(p, all_dtypes[d], k++ % 2);
    expect_device_memory(&D, 0, 0, p->name);
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 2: a thousand runs in one held session, the daemon's memory constant ---- */

/* A run job whose every run but the last has its outputs freed in the callback, after the next run
 * is queued. */
typedef struct dropping_job {
    run_job j;
} dropping_job;

static tf_status dropping_fn(tf_view *v, void *arg) {
    run_job *j = &((dropping_job *)arg)->j;
    for (int t = 0; t < j->times; t++) {
        tf_status st =
            tf_view_run_prepared(v, j->p, j->n_in, j->in, j->n_out, j->out + t * j->n_out);
        for (int o = 0; o < j->n_out && t > 0 && st == TF_OK; o++)
            st = tf_tensor_free(tf_view_client(v), j->out[(t - 1) * j->n_out + o]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

START_TEST(test_thousand_runs_constant_memory) {
    enum { BATCHES = 10, PER_BATCH = 100 };
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder h;
    holder_start(&h, C, program_named("chain"), TF_F64);
    const int n_out = h.p->n_outputs;
    tf_tensor *out = calloc((size_t)(PER_BATCH * n_out), sizeof *out);
    ck_assert_ptr_nonnull(out);
    tf_session *s = NULL;
    EXPECT_OK(C, tf_session_open(C, &s));
    /* The inputs are all this client holds: the baseline, before and after every batch. */
    const uint64_t base_allocs = (uint64_t)h.p->n_inputs, base_bytes = holder_input_bytes(&h);
    expect_device_memory(&D, base_allocs, base_bytes, "before the runs");
    const cache_info cache0 = graph_cache(&D);
    const uint64_t runs0 = th_counter(&D, "prepared_runs");
    char why[600];
    for (int b = 0; b < BATCHES; b++) {
        /* Odd batches free each run's outputs in the batch, as the next run is queued (their blocks
         * reused). */
        run_job j = {h.pp, h.p->n_inputs, n_out, PER_BATCH, h.in, out};
        dropping_job dj = {j};
        EXPECT_OK(
            C, tf_session_with(s, b % 2 ? dropping_fn : run_fn, b % 2 ? (void *)&dj : (void *)&j));
        EXPECT_OK(C, tf_session_synchronize(s));
        /* The first and the last run of each batch are right (the last only, where the others are
         * gone). */
        for (int t = b % 2 ? PER_BATCH - 1 : 0; t < PER_BATCH; t += PER_BATCH - 1)
            for (int o = 0; o < n_out; o++)
                ck_assert_msg(!tensor_differs(C, out[t * n_out + o], &h.val[h.p->outputs[o]], why,
                                              sizeof why),
                              "batch %d run %d output %d: %s (seed %u)", b, t, o, why, th_seed());
        for (int k = b % 2 ? (PER_BATCH - 1) * n_out : 0; k < PER_BATCH * n_out; k++)
            EXPECT_OK(C, tf_tensor_free(C, out[k]));
        char when[64];
        snprintf(when, sizeof when, "after batch %d of %d runs", b, PER_BATCH);
        expect_device_memory(&D, base_allocs, base_bytes, when);
    }
    ck_assert_uint_eq(th_counter(&D, "prepared_runs") - runs0, BATCHES * PER_BATCH);
    const cache_info cache1 = graph_cache(&D);
    ck_assert_uint_eq(cache1.entries, cache0.entries);
    ck_assert_uint_eq(cache1.bytes, cache0.bytes);
    ck_assert_uint_eq(cache1.misses, cache0.misses);
    tf_session_counters k;
    EXPECT_OK(C, tf_session_close(s, &k));
    ck_assert_uint_eq(k.failed_submits, 0);
    free(out);
    holder_stop(&h);
    expect_device_memory(&D, 0, 0, "after the inputs were freed");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 3: scoped and held runs of one prepared graph agree ---- */

/* The outputs of one run of h's graph, by a scoped session or a held one, downloaded. */
static void run_collect(holder *h, int held, void **data, size_t *bytes) {
    tf_tensor out[MAX_OUT] = {0};
    run_job j = {h->pp, h->p->n_inputs, h->p->n_outputs, 1, h->in, out};
    if (held) {
        /* Two callbacks and a submit between them: the run rides a held boundary like any op. */
        tf_session *s = NULL;
        EXPECT_OK(C, tf_session_open(C, &s));
        EXPECT_OK(C, tf_session_with(s, run_fn, &j));
        EXPECT_OK(C, tf_session_submit(s));
        EXPECT_OK(C, tf_session_synchronize(s));
        EXPECT_OK(C, tf_session_close(s, NULL));
    } else {
        EXPECT_OK(C, tf_with_session(C, run_fn, &j));
    }
    for (int o = 0; o < h->p->n_outputs; o++) {
        EXPECT_OK(C, tf_download(C, out[o], &data[o], &bytes[o]));
        EXPECT_OK(C, tf_tensor_free(C, out[o]));
    }
}

START_TEST(test_scoped_and_held_agree) {
    static const struct {
        const char *name;
        tf_dtype dt;
    } cases[] = {{"chain", TF_C128}, {"matmul", TF_F32}, {"einsum", TF_C64}, {"rfft", TF_F64}};
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        holder h;
        holder_start(&h, C, program_named(cases[k].name), cases[k].dt);
        void *scoped[MAX_OUT], *held[MAX_OUT];
        size_t sb[MAX_OUT], hb[MAX_OUT];
        run_collect(&h, 0, scoped, sb);
        run_collect(&h, 1, held, hb);
        char why[600];
        for (int o = 0; o < h.p->n_outputs; o++) {
            const hval *want = &h.val[h.p->outputs[o]];
            ck_assert_msg(sb[o] == hb[o] && memcmp(scoped[o], held[o], sb[o]) == 0,
                          "%s %s output %d: the scoped and the held run differ", h.p->name,
                          tf_dtype_name(cases[k].dt), o);
            ck_assert_msg(
                !differs(want, want->dt, want->rank, want->shape, held[o], hb[o], why, sizeof why),
                "%s %s output %d: %s (seed %u)", h.p->name, tf_dtype_name(cases[k].dt), o, why,
                th_seed());
            free(scoped[o]);
            free(held[o]);
        }
        holder_stop(&h);
    }
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- runs inside one batch: chained, freed as they go, beside plain operations ---- */

#define CHAIN_RUNS 7

/* Runs of the pair graph fed each other's outputs, the inputs of each freed once read, a download
 * flushing midway. */
typedef struct chained {
    tf_prepared pp;
    tf_tensor x, y, last[2], diff;
    tf_status flushed;
} chained;

static tf_status chained_fn(tf_view *v, void *arg) {
    chained *k = arg;
    tf_client *c = tf_view_client(v);
    tf_tensor cur[2] = {k->x, k->y};
    for (int r = 0; r < CHAIN_RUNS; r++) {
        tf_tensor next[2];
        tf_status st = tf_view_run_prepared(v, k->pp, 2, cur, 2, next);
        if (st != TF_OK) return st;
        /* The previous outputs are read by this run only: freed in the same batch, their blocks
         * reused. */
        for (int i = 0; i < 2 && r > 0; i++)
            if ((st = tf_tensor_free(c, cur[i])) != TF_OK) return st;
        cur[0] = next[0];
        cur[1] = next[1];
        if (r == CHAIN_RUNS / 2) {
            /* A download inside a scoped burst sends what is queued so far. */
            void *data = NULL;
            size_t bytes = 0;
            k->flushed = tf_download(c, cur[0], &data, &bytes);
            free(data);
        }
    }
    k->last[0] = cur[0];
    k->last[1] = cur[1];
    return tf_view_sub(v, cur[0], k->x, &k->diff);
}

START_TEST(test_runs_in_one_batch) {
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder h;
    holder_start(&h, C, program_named("pair"), TF_F64);
    chained k = {.pp = h.pp, .x = h.in[0], .y = h.in[1]};
    EXPECT_OK(C, tf_with_session(C, chained_fn, &k));
    EXPECT_OK(C, k.flushed);
    /* pair: (x, y) -> (-x, 0.7 y); CHAIN_RUNS of them, then sub(-x, x) for an odd count. */
    hval want[3];
    hval_copy(&want[0], &h.val[0], TF_F64);
    hval_copy(&want[1], &h.val[1], TF_F64);
    hval_copy(&want[2], &h.val[0], TF_F64);
    for (int64_t i = 0; i < want[1].n; i++) want[1].v[i] *= powl(0.7L, CHAIN_RUNS);
    for (int64_t i = 0; i < want[0].n; i++) {
        want[0].v[i] = -want[0].v[i];
        want[2].v[i] = -2 * want[2].v[i];
    }
    want[1].err = 2 * CHAIN_RUNS;
    want[2].err = 2;
    const tf_tensor got[3] = {k.last[0], k.last[1], k.diff};
    char why[600];
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(!tensor_differs(C, got[i], &want[i], why, sizeof why),
                      "chained runs, result %d: %s (seed %u)", i, why, th_seed());
        EXPECT_OK(C, tf_tensor_free(C, got[i]));
        hval_free(&want[i]);
    }
    holder_stop(&h);
    expect_device_memory(&D, 0, 0, "after the chained runs");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 4: preflight refusals, client side and the daemon's own ---- */

/* Queues a run of the job and then tries tf_prepared_free on it inside the same callback. */
typedef struct free_inside {
    run_job j;
    tf_status freed;
} free_inside;

static tf_status free_inside_fn(tf_view *v, void *arg) {
    free_inside *f = arg;
    tf_status st = run_fn(v, &f->j);
    if (st != TF_OK) return st;
    f->freed = tf_prepared_free(tf_view_client(v), f->j.p);
    return TF_OK;
}

/* Re-evaluates h's reference after its input values changed. */
static void holder_reevaluate(holder *h) {
    free_values(h->val + h->p->n_inputs, h->p->n_steps);
    evaluate(h->p, h->val);
}

START_TEST(test_preflight_client) {
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    tf_client *other = th_connect(&D);
    holder h;
    holder_start(&h, C, program_named("pair"), TF_F64);
    holder_check(&h, "before the refusals");

    /* What the refused runs are offered: the other client's inputs, a wrong dtype, wrong shapes, a
     * freed tensor. */
    tf_tensor theirs[MAX_IN];
    hval tv[MAX_VALUES];
    EXPECT_OK(other, upload_inputs(other, h.p, TF_F64, theirs, tv));
    float f5[5];
    double d6[6], d4[4];
    th_fill_random(TF_F32, 5, f5);
    th_fill_random(TF_F64, 6, d6);
    th_fill_random(TF_F64, 4, d4);
    tf_tensor y32, y6, gone;
    EXPECT_OK(C, tf_upload(C, TF_F32, 1, (int64_t[]){5}, f5, &y32));
    EXPECT_OK(C, tf_upload(C, TF_F64, 1, (int64_t[]){6}, d6, &y6));
    EXPECT_OK(C, tf_upload(C, TF_F64, 1, (int64_t[]){4}, d4, &gone));
    EXPECT_OK(C, tf_tensor_free(C, gone));
    const uint64_t runs0 = th_counter(&D, "prepared_runs");
    const uint64_t created0 = th_counter(&D, "tensors_created");
    const uint64_t accepted0 = th_counter(&D, "ops_accepted");

    tf_tensor out[2] = {0, 0};
    run_job j = {h.pp, 2, 2, 1, theirs, out};
    EXPECT_FAIL(other, tf_with_session(other, run_fn, &j), TF_ERR_UNKNOWN_HANDLE,
                "not live on this client");
    EXPECT_FAIL(other, tf_prepared_info(other, h.pp, NULL, NULL), TF_ERR_UNKNOWN_HANDLE, NULL);
    EXPECT_FAIL(other, tf_prepared_free(other, h.pp), TF_ERR_UNKNOWN_HANDLE, NULL);
    /* The same refusal in a held session, whose queue stays empty. */
    tf_session *s = NULL;
    EXPECT_OK(other, tf_session_open(other, &s));
    EXPECT_FAIL(other, tf_session_with(s, run_fn, &j), TF_ERR_UNKNOWN_HANDLE, NULL);
    tf_session_counters k;
    EXPECT_OK(other, tf_session_close(s, &k));
    ck_assert_uint_eq(k.queued_ops, 0);

    j = (run_job){h.pp, 1, 2, 1, h.in, out};
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_INVALID_ARGUMENT, "takes 2 inputs");
    j = (run_job){h.pp, 2, 1, 1, h.in, out};
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_INVALID_ARGUMENT, "gives 2 outputs");
    tf_tensor bad[2] = {h.in[0], y32};
    j = (run_job){h.pp, 2, 2, 1, bad, out};
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_DTYPE, "input 1");
    bad[1] = y6;
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_SHAPE, "input 1");
    ck_assert_msg(strstr(tf_client_last_error(C), "[6]") && strstr(tf_client_last_error(C), "[5]"),
                  "a wrong shape's refusal does not show both shapes: %s", tf_client_last_error(C));
    bad[0] = h.in[1];
    bad[1] = h.in[0];
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_SHAPE, "input 0");
    bad[0] = gone;
    bad[1] = h.in[1];
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_UNKNOWN_HANDLE, NULL);
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &(run_job){h.pp + 1000, 2, 2, 1, h.in, out}),
                TF_ERR_UNKNOWN_HANDLE, "not live on this client");
    ck_assert_msg(out[0] == 0 && out[1] == 0, "a refused run handed out output handles");
    ck_assert_uint_eq(th_counter(&D, "prepared_runs"), runs0);
    ck_assert_uint_eq(th_counter(&D, "tensors_created"), created0);
    ck_assert_uint_eq(th_counter(&D, "ops_accepted"), accepted0);

    /*
     * An input in a pending transfer (an upload writing it) may be read: the
     * run is queued behind the copy and computes from the uploaded values.
     */
    tf_pinned_buffer *buf = NULL;
    EXPECT_OK(C, tf_pinned_buffer_new(C, 5 * sizeof(double), &buf));
    th_fill_random(TF_F64, 5, tf_pinned_buffer_data(buf));
    widen(TF_F64, 5, tf_pinned_buffer_data(buf), h.val[1].v);
    holder_reevaluate(&h);
    tf_pending *pend = NULL;
    EXPECT_OK(C, tf_upload_pending(C, buf, h.in[1], &pend));
    j = (run_job){h.pp, 2, 2, 1, h.in, out};
    EXPECT_OK(C, tf_with_session(C, run_fn, &j));
    ck_assert_uint_eq(th_counter(&D, "prepared_runs"), runs0 + 1);
    char why[600];
    for (int o = 0; o < 2; o++) {
        ck_assert_msg(!tensor_differs(C, out[o], &h.val[h.p->outputs[o]], why, sizeof why),
                      "a run reading an input in a pending upload, output %d: %s", o, why);
        EXPECT_OK(C, tf_tensor_free(C, out[o]));
    }
    tf_tensor back = 0;
    EXPECT_OK(C, tf_pending_wait(pend, &back, &buf));
    ck_assert_uint_eq(back, h.in[1]);
    EXPECT_OK(C, tf_pinned_buffer_free(buf));
    holder_check(&h, "after the pending upload");

    /*
     * A pending upload into an input of a run queued and not submitted would
     * overtake the run: busy. After the submit it is ordered behind the run,
     * which reads the values from before it.
     */
    EXPECT_OK(C, tf_session_open(C, &s));
    j = (run_job){h.pp, 2, 2, 1, h.in, out};
    EXPECT_OK(C, tf_session_with(s, run_fn, &j));
    EXPECT_OK(C, tf_pinned_buffer_new(C, 5 * sizeof(double), &buf));
    th_fill_random(TF_F64, 5, tf_pinned_buffer_data(buf));
    EXPECT_FAIL(C, tf_upload_pending(C, buf, h.in[1], &pend), TF_ERR_BUSY, "unsubmitted");
    EXPECT_OK(C, tf_session_submit(s));
    EXPECT_OK(C, tf_upload_pending(C, buf, h.in[1], &pend));
    EXPECT_OK(C, tf_pending_wait(pend, &back, &buf));
    EXPECT_OK(C, tf_session_synchronize(s));
    EXPECT_OK(C, tf_session_close(s, NULL));
    for (int o = 0; o < 2; o++) {
        ck_assert_msg(!tensor_differs(C, out[o], &h.val[h.p->outputs[o]], why, sizeof why),
                      "a run queued before a pending upload into its input, output %d: %s", o, why);
        EXPECT_OK(C, tf_tensor_free(C, out[o]));
    }
    widen(TF_F64, 5, tf_pinned_buffer_data(buf), h.val[1].v);
    EXPECT_OK(C, tf_pinned_buffer_free(buf));
    holder_reevaluate(&h);
    holder_check(&h, "after the second pending upload");

    /* tf_prepared_free while a run is queued and not submitted: busy, the run goes on. */
    EXPECT_OK(C, tf_session_open(C, &s));
    EXPECT_OK(C, tf_session_with(s, run_fn, &j));
    EXPECT_FAIL(C, tf_prepared_free(C, h.pp), TF_ERR_BUSY, "submit or synchronize first");
    EXPECT_OK(C, tf_session_synchronize(s));
    EXPECT_OK(C, tf_session_close(s, NULL));
    for (int o = 0; o < 2; o++) {
        ck_assert_msg(!tensor_differs(C, out[o], &h.val[h.p->outputs[o]], why, sizeof why),
                      "the run under the refused free, output %d: %s", o, why);
        EXPECT_OK(C, tf_tensor_free(C, out[o]));
    }
    free_inside fi = {{h.pp, 2, 2, 1, h.in, out}, TF_OK};
    EXPECT_OK(C, tf_with_session(C, free_inside_fn, &fi));
    ck_assert_msg(fi.freed == TF_ERR_BUSY,
                  "tf_prepared_free inside the callback that queued a run: %s",
                  tf_status_name(fi.freed));
    for (int o = 0; o < 2; o++) {
        ck_assert_msg(!tensor_differs(C, out[o], &h.val[h.p->outputs[o]], why, sizeof why),
                      "the run in the callback of the refused free, output %d: %s", o, why);
        EXPECT_OK(C, tf_tensor_free(C, out[o]));
    }

    /* Freed: unknown from then on, typed. */
    EXPECT_OK(C, tf_prepared_free(C, h.pp));
    out[0] = out[1] = 0;
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &j), TF_ERR_UNKNOWN_HANDLE,
                "not live on this client");
    EXPECT_FAIL(C, tf_prepared_free(C, h.pp), TF_ERR_UNKNOWN_HANDLE, NULL);
    EXPECT_FAIL(C, tf_prepared_output(C, h.pp, 0, NULL, NULL, NULL), TF_ERR_UNKNOWN_HANDLE, NULL);
    ck_assert(out[0] == 0 && out[1] == 0);
    h.pp = 0;

    /* Misuse of the graph API: typed at the call, nothing recorded or sent. */
    tf_graph *g = NULL;
    EXPECT_OK(C, tf_graph_new(C, &g));
    tf_tensor gx, gz, gy, gw;
    EXPECT_FAIL(C, tf_graph_input(g, (tf_dtype)9, 1, (int64_t[]){4}, &gx), TF_ERR_DTYPE,
                "unknown dtype");
    EXPECT_FAIL(C, tf_graph_input(g, TF_F64, TF_MAX_RANK + 1, (int64_t[TF_MAX_RANK + 1]){0}, &gx),
                TF_ERR_BAD_SHAPE, NULL);
    EXPECT_OK(C, tf_graph_input(g, TF_F64, 1, (int64_t[]){4}, &gx));
    EXPECT_OK(C, tf_graph_input(g, TF_F64, 1, (int64_t[]){5}, &gz));
    tf_prepared gp = 0;
    EXPECT_FAIL(C, tf_prepare(C, g, &gp), TF_ERR_INVALID_ARGUMENT, "at least one node");
    EXPECT_FAIL(C, tf_view_add(tf_graph_view(g), gx, gz, &gw), TF_ERR_SHAPE, "shapes differ");
    ck_assert_int_eq(tf_graph_node_count(g), 0);
    EXPECT_FAIL(C, tf_view_run_prepared(tf_graph_view(g), h.pp, 2, (tf_tensor[]){gx, gz}, 2, out),
                TF_ERR_INVALID_ARGUMENT, "runs in a session");
    EXPECT_OK(C, tf_view_neg(tf_graph_view(g), gx, &gy));
    ck_assert_int_eq(tf_graph_node_count(g), 1);
    EXPECT_FAIL(C, tf_graph_output(g, gy + 1000), TF_ERR_UNKNOWN_HANDLE,
                "not a value of this graph");
    EXPECT_FAIL(C, tf_prepare(C, g, &gp), TF_ERR_INVALID_ARGUMENT, "one output");
    EXPECT_OK(C, tf_graph_output(g, gy));
    EXPECT_FAIL(other, tf_prepare(other, g, &gp), TF_ERR_INVALID_ARGUMENT, "another client");
    ck_assert_uint_eq(gp, 0);
    tf_graph_free(g);
    EXPECT_OK(C, tf_graph_new(C, &g));
    for (int i = 0; i < TF_GRAPH_MAX_INPUTS; i++)
        EXPECT_OK(C, tf_graph_input(g, TF_F32, 0, NULL, &gx));
    EXPECT_FAIL(C, tf_graph_input(g, TF_F32, 0, NULL, &gx), TF_ERR_INVALID_ARGUMENT, "at most");
    tf_graph_free(g);

    EXPECT_OK(C, tf_tensor_free(C, y32));
    EXPECT_OK(C, tf_tensor_free(C, y6));
    for (int i = 0; i < 2; i++) EXPECT_OK(other, tf_tensor_free(other, theirs[i]));
    free_values(tv, 2);
    holder_stop(&h);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(other);
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* The daemon's own preflight, reached with raw frames that skip the client's checks. */
START_TEST(test_preflight_raw) {
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder h;
    holder_start(&h, C, program_named("pair"), TF_F64);
    int fd = raw_client(&D, "preflight-raw");
    double x4[4], y5[5], y6[6];
    float f5[5];
    th_fill_random(TF_F64, 4, x4);
    th_fill_random(TF_F64, 5, y5);
    th_fill_random(TF_F64, 6, y6);
    th_fill_random(TF_F32, 5, f5);
    const uint64_t X = ++g_next_tensor, Y = ++g_next_tensor, Y6 = ++g_next_tensor,
                   F5 = ++g_next_tensor;
    raw_upload(fd, X, TF_F64, 4, x4);
    raw_upload(fd, Y, TF_F64, 5, y5);
    raw_upload(fd, Y6, TF_F64, 6, y6);
    raw_upload(fd, F5, TF_F32, 5, f5);
    uint64_t in[2] = {X, Y}, o[3] = {++g_next_tensor, ++g_next_tensor, ++g_next_tensor};

    /* Another connection's prepared graph, live there: unknown here; freeing its id here changes
     * nothing there. */
    uint64_t runs0 = th_counter(&D, "prepared_runs");
    expect_refusal(raw_run(fd, h.pp, in, 2, o, 2), TF_ERR_UNKNOWN_HANDLE,
                   "not live on this connection", 0, "a run of another connection's graph");
    raw_prepared_free(fd, h.pp);
    holder_check(&h, "after another connection sent PreparedFree for its id");

    /* This connection's own graph: the pair, as id 7 (neg of x [4], 0.5 * y [5]). */
    raw_graph g;
    rg_init(&g, 7);
    rg_input(&g, 1, TF_F64, 4);
    rg_input(&g, 2, TF_F64, 5);
    rg_node(&g, TENFERRO__OP_KIND__OP_NEG, 1, 1, 0, 3);
    rg_node(&g, TENFERRO__OP_KIND__OP_SCALE, 1, 2, 0, 4)->alpha_re = 0.5;
    rg_output(&g, 3);
    rg_output(&g, 4);
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, "the raw prepare");
    expect_refusal(rg_prepare(fd, &g), TF_ERR_INVALID_ARGUMENT, "not in use", -1,
                   "a prepare under an id in use");
    rg_init(&g, 0);
    rg_input(&g, 1, TF_F64, 4);
    rg_node(&g, TENFERRO__OP_KIND__OP_NEG, 1, 1, 0, 3);
    rg_output(&g, 3);
    expect_refusal(rg_prepare(fd, &g), TF_ERR_INVALID_ARGUMENT, "nonzero", -1,
                   "a prepare under id 0");

    runs0 = th_counter(&D, "prepared_runs");
    uint64_t one[1] = {X}, dtype_bad[2] = {X, F5}, shape_bad[2] = {X, Y6}, swapped[2] = {Y, X};
    uint64_t unknown[2] = {X, 999999}, out_used[2] = {X, o[1]}, out_twice[2] = {o[0], o[0]},
             out_zero[2] = {0, o[1]};
    expect_refusal(raw_run(fd, 7, one, 1, o, 2), TF_ERR_INVALID_ARGUMENT, "takes 2 inputs", 0,
                   "1 input");
    expect_refusal(raw_run(fd, 7, in, 2, o, 3), TF_ERR_INVALID_ARGUMENT, "gives 2 outputs", 0,
                   "3 outputs");
    expect_refusal(raw_run(fd, 7, dtype_bad, 2, o, 2), TF_ERR_DTYPE,
                   "input 1: the graph was prepared for f64 [5]", 0, "an input of the wrong dtype");
    expect_refusal(raw_run(fd, 7, shape_bad, 2, o, 2), TF_ERR_SHAPE,
                   "input 1: the graph was prepared for f64 [5]", 0, "an input of the wrong shape");
    expect_refusal(raw_run(fd, 7, swapped, 2, o, 2), TF_ERR_SHAPE, "input 0", 0, "swapped inputs");
    expect_refusal(raw_run(fd, 7, unknown, 2, o, 2), TF_ERR_UNKNOWN_HANDLE, "input 1", 0,
                   "an unknown input");
    expect_refusal(raw_run(fd, 7, in, 2, out_used, 2), TF_ERR_INVALID_ARGUMENT, "output 0", 0,
                   "an output id in use");
    expect_refusal(raw_run(fd, 7, in, 2, out_twice, 2), TF_ERR_INVALID_ARGUMENT, "output 1", 0,
                   "an output id twice");
    expect_refusal(raw_run(fd, 7, in, 2, out_zero, 2), TF_ERR_INVALID_ARGUMENT, "output 0", 0,
                   "output id 0");
    /* A refused run after a valid operation: that one stays, nothing of the run is made. */
    const uint64_t N = ++g_next_tensor;
    Tenferro__Op neg, run, *ops[2] = {&neg, &run};
    tenferro__op__init(&neg);
    neg.kind = TENFERRO__OP_KIND__OP_NEG;
    neg.inputs = one;
    neg.n_inputs = 1;
    neg.output = N;
    raw_run_op(&run, 7, dtype_bad, 2, o, 2);
    Tenferro__Frame *r = raw_submit(fd, ops, 2);
    ck_assert_uint_eq(r->result->ops_accepted, 1);
    expect_refusal(r, TF_ERR_DTYPE, "input 1", 1, "a refused run behind a valid operation");
    ck_assert_msg(raw_live(fd, N), "the operation before the refused run is gone");
    for (int i = 0; i < 3; i++)
        ck_assert_msg(!raw_live(fd, o[i]), "a refused run made output %d", i);
    ck_assert_uint_eq(th_counter(&D, "prepared_runs"), runs0);

    /* The valid run, then a run after PreparedFree. */
    expect_refusal(raw_run(fd, 7, in, 2, o, 2), TF_OK, NULL, -1, "the valid run");
    double got4[4], got5[5];
    ck_assert_int_eq(raw_download(fd, o[0], got4, sizeof got4), TF_OK);
    ck_assert_int_eq(raw_download(fd, o[1], got5, sizeof got5), TF_OK);
    for (int i = 0; i < 4; i++) ck_assert(got4[i] == -x4[i]);
    for (int i = 0; i < 5; i++) ck_assert(fabs(got5[i] - 0.5 * y5[i]) <= 1e-15 * fabs(y5[i]));
    raw_prepared_free(fd, 7);
    const uint64_t o2[2] = {++g_next_tensor, ++g_next_tensor};
    expect_refusal(raw_run(fd, 7, in, 2, (uint64_t *)o2, 2), TF_ERR_UNKNOWN_HANDLE, "not live", 0,
                   "a run after PreparedFree");
    ck_assert_msg(!raw_live(fd, o2[0]), "a run of a freed graph made an output");
    ck_assert_uint_eq(th_counter(&D, "prepared_runs"), runs0 + 1);
    holder_check(&h, "at the end");
    close(fd);
    holder_stop(&h);
    expect_connections(&D, 1, "after the raw connection closed");
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 5: bad graphs in raw Prepare frames ---- */

#define K(x) TENFERRO__OP_KIND__OP_##x
#define MAX_NODES_FLAG "8"

typedef struct raw_node {
    uint32_t kind;
    int n_in;
    uint64_t a, b, out;
} raw_node;

typedef struct bad_graph {
    const char *what;
    int n_inputs;
    struct {
        uint64_t id;
        uint32_t dtype;
        int64_t n;
    } in[2];
    int n_nodes;
    raw_node nodes[10];
    int n_outputs;
    uint64_t outputs[2];
    tf_status status;
    int64_t failed_index; /* -1: about the graph as a whole */
    const char *needle;
} bad_graph;

/* Prepared id RUN_PREPARED nodes name: a valid graph of the connection. */
#define LIVE_ID 5

/* clang-format off */
static const bad_graph bad_graphs[] = {
    {"a cycle", 1, {{1, TF_F64, 8}}, 2, {{K(ADD), 2, 1, 3, 2}, {K(EXP), 1, 2, 0, 3}}, 1, {3},
     TF_ERR_INVALID_ARGUMENT, 0, "cycle"},
    {"a node reading its own output", 1, {{1, TF_F64, 8}}, 1, {{K(EXP), 1, 2, 0, 2}}, 1, {2},
     TF_ERR_INVALID_ARGUMENT, 0, "cycle"},
    {"a dangling reference", 1, {{1, TF_F64, 8}}, 2, {{K(EXP), 1, 1, 0, 2}, {K(ADD), 2, 2, 99, 3}}, 1,
     {3}, TF_ERR_INVALID_ARGUMENT, 1, "dangling"},
    {"an add of [3] and [4]", 2, {{1, TF_F64, 3}, {2, TF_F64, 4}}, 2,
     {{K(EXP), 1, 1, 0, 3}, {K(ADD), 2, 3, 2, 4}}, 1, {4}, TF_ERR_SHAPE, 1, "shapes differ"},
    {"a mul of f64 and f32", 2, {{1, TF_F64, 3}, {2, TF_F32, 3}}, 1, {{K(MUL), 2, 1, 2, 3}}, 1, {3},
     TF_ERR_DTYPE, 0, "dtypes differ"},
    {"a matmul of vectors", 1, {{1, TF_F64, 3}}, 1, {{K(MATMUL), 2, 1, 1, 2}}, 1, {2}, TF_ERR_SHAPE, 0,
     "matmul"},
    {"more nodes than max_graph_nodes", 1, {{1, TF_F64, 8}}, 9,
     {{K(NEG), 1, 1, 0, 2}, {K(NEG), 1, 2, 0, 3}, {K(NEG), 1, 3, 0, 4}, {K(NEG), 1, 4, 0, 5},
      {K(NEG), 1, 5, 0, 6}, {K(NEG), 1, 6, 0, 7}, {K(NEG), 1, 7, 0, 8}, {K(NEG), 1, 8, 0, 9},
      {K(NEG), 1, 9, 0, 10}},
     1, {10}, TF_ERR_QUOTA, -1, "max_graph_nodes"},
    {"FREE as a node", 1, {{1, TF_F64, 8}}, 2, {{K(EXP), 1, 1, 0, 2}, {K(FREE), 1, 2, 0, 0}}, 1, {2},
     TF_ERR_INVALID_ARGUMENT, 1, "not a graph node"},
    {"RUN_PREPARED as a node", 1, {{1, TF_F64, 8}}, 1, {{K(RUN_PREPARED), 1, 1, 0, 2}}, 1, {2},
     TF_ERR_INVALID_ARGUMENT, 0, "not a graph node"},
    {"a node output reusing an input's id", 1, {{1, TF_F64, 8}}, 1, {{K(EXP), 1, 1, 0, 1}}, 1, {1},
     TF_ERR_INVALID_ARGUMENT, 0, "already names"},
    {"two nodes with one output id", 1, {{1, TF_F64, 8}}, 2, {{K(EXP), 1, 1, 0, 2}, {K(NEG), 1, 1, 0, 2}},
     1, {2}, TF_ERR_INVALID_ARGUMENT, 1, "already names"},
    {"two inputs with one id", 2, {{1, TF_F64, 8}, {1, TF_F64, 8}}, 1, {{K(EXP), 1, 1, 0, 2}}, 1, {2},
     TF_ERR_INVALID_ARGUMENT, -1, "already names"},
    {"a node output of id 0", 1, {{1, TF_F64, 8}}, 1, {{K(EXP), 1, 1, 0, 0}}, 1, {1},
     TF_ERR_INVALID_ARGUMENT, 0, "zero"},
    {"no outputs", 1, {{1, TF_F64, 8}}, 1, {{K(EXP), 1, 1, 0, 2}}, 0, {0}, TF_ERR_INVALID_ARGUMENT, -1,
     "at least one"},
    {"no nodes", 1, {{1, TF_F64, 8}}, 0, {{0}}, 1, {1}, TF_ERR_INVALID_ARGUMENT, -1, "at least one"},
    {"an output no value has", 1, {{1, TF_F64, 8}}, 1, {{K(EXP), 1, 1, 0, 2}}, 1, {42},
     TF_ERR_INVALID_ARGUMENT, -1, "graph output 0"},
    {"an input of an unknown dtype", 1, {{1, 9, 8}}, 1, {{K(EXP), 1, 1, 0, 2}}, 1, {2}, TF_ERR_DTYPE, -1,
     "unknown dtype"},
    {"an input with a zero dimension", 1, {{1, TF_F64, 0}}, 1, {{K(EXP), 1, 1, 0, 2}}, 1, {2},
     TF_ERR_BAD_SHAPE, -1, "graph input 0"},
    {"an unknown operation kind", 1, {{1, TF_F64, 8}}, 2, {{K(EXP), 1, 1, 0, 2}, {99, 1, 2, 0, 3}}, 1,
     {3}, TF_ERR_UNSUPPORTED, 1, "unknown operation"},
    {"an add with one input", 1, {{1, TF_F64, 8}}, 1, {{K(ADD), 1, 1, 0, 2}}, 1, {2},
     TF_ERR_INVALID_ARGUMENT, 0, "takes 2 inputs"},
    {"the fault operation without --test-fault-injection", 1, {{1, TF_F64, 8}}, 2,
     {{K(EXP), 1, 1, 0, 2}, {K(TEST_FAULT), 1, 2, 0, 3}}, 1, {3}, TF_ERR_UNSUPPORTED, 1,
     "--test-fault-injection"},
};

/* clang-format on */

/* Builds bad graph b as the Prepare of prepared id `id`. */
static void build_bad(raw_graph *g, const bad_graph *b, uint64_t id) {
    rg_init(g, id);
    for (int i = 0; i < b->n_inputs; i++) rg_input(g, b->in[i].id, b->in[i].dtype, b->in[i].n);
    for (int n = 0; n < b->n_nodes; n++) {
        const raw_node *x = &b->nodes[n];
        Tenferro__Op *op = rg_node(g, x->kind, x->n_in, x->a, x->b, x->out);
        if (x->kind == K(RUN_PREPARED)) op->prepared = LIVE_ID;
    }
    for (int o = 0; o < b->n_outputs; o++) rg_output(g, b->outputs[o]);
}

/* Prepared graphs the status report lists for all clients (all of this test's uid). */
static uint64_t prepared_listed(const th_daemon *d) {
    Tenferro__Frame *r = th_status_report(d);
    ck_assert_ptr_nonnull(r);
    uint64_t n = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++) n += r->status_reply->clients[i]->prepared;
    tf__frame_free(r);
    return n;
}

START_TEST(test_bad_graphs_raw) {
    CK_DAEMON_START(&D, "--max-graph-nodes", MAX_NODES_FLAG, "--max-prepared", "3", "--workers",
                    "2", "--max-prepared-per-uid", "5");
    C = th_connect(&D);
    holder by; /* a bystander within the node limit */
    holder_start(&by, C, program_named("pair"), TF_F64);
    int fd = raw_client(&D, "bad-graphs");
    /* A live graph for the RUN_PREPARED node to name. */
    raw_graph g;
    rg_init(&g, LIVE_ID);
    rg_input(&g, 1, TF_F64, 8);
    rg_node(&g, K(NEG), 1, 1, 0, 2);
    rg_output(&g, 2);
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, "the live graph");
    for (size_t k = 0; k < sizeof bad_graphs / sizeof *bad_graphs; k++) {
        const bad_graph *b = &bad_graphs[k];
        const uint64_t id = 100 + k;
        const uint64_t refused0 = th_counter(&D, "graphs_refused");
        const cache_info c0 = graph_cache(&D);
        build_bad(&g, b, id);
        expect_refusal(rg_prepare(fd, &g), b->status, b->needle, b->failed_index, b->what);
        ck_assert_uint_eq(th_counter(&D, "graphs_refused"), refused0 + 1);
        const cache_info c1 = graph_cache(&D);
        ck_assert_msg(c1.entries == c0.entries && c1.misses == c0.misses && c1.bytes == c0.bytes,
                      "%s: the refused graph left something in the cache", b->what);
        /* The connection goes on, and the refused id was not kept: a valid graph takes it. */
        raw_valid_roundtrip(fd, id, b->what);
        holder_check(&by, b->what);
    }
    /* Exactly max_graph_nodes nodes is fine. */
    rg_init(&g, 99);
    rg_input(&g, 1, TF_F64, 8);
    for (uint64_t n = 0; n < 8; n++) rg_node(&g, K(NEG), 1, 1 + n, 0, 2 + n);
    rg_output(&g, 9);
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, "a graph of max_graph_nodes nodes");
    /* A third graph is the most one client may hold ([limits] max_prepared = 3); a fourth is
     * refused. */
    g.p.id = 98;
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, "a third prepared graph");
    g.p.id = 97;
    expect_refusal(rg_prepare(fd, &g), TF_ERR_QUOTA, "max_prepared", -1, "a fourth prepared graph");
    /* The uid's bound counts every connection of the uid: a second one fills it, then is refused. */
    int fd2 = raw_client(&D, "bad-graphs-2");
    uint64_t held = prepared_listed(&D);
    ck_assert_uint_lt(held, 5);
    for (uint64_t id = 200; held < 5; id++, held++) {
        g.p.id = id;
        expect_refusal(rg_prepare(fd2, &g), TF_OK, NULL, -1, "a graph within the uid's bound");
    }
    ck_assert_uint_eq(prepared_listed(&D), 5);
    g.p.id = 300;
    expect_refusal(rg_prepare(fd2, &g), TF_ERR_QUOTA, "max_prepared_per_uid", -1,
                   "a graph past the uid's bound");
    close(fd2);
    expect_connections(&D, 2, "after the second raw connection closed");
    g.p.id = 97;
    raw_prepared_free(fd, 98);
    expect_refusal(rg_prepare(fd, &g), TF_OK, NULL, -1, "a prepared graph after one was freed");
    raw_prepared_free(fd, 97);
    raw_prepared_free(fd, 99);
    raw_prepared_free(fd, LIVE_ID);
    close(fd);
    holder_stop(&by);
    expect_connections(&D, 1, "after the raw connection closed");
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 6: a prepare over the device_bytes quota ---- */

/* The outer product of x [n,1] and y [1,n] (an n x n intermediate), summed: one scalar output. */
/* clang-format off */
#define OUTER_PROGRAM(label, n)                                                                    \
    {.name = label, .dtypes = DT_ALL, INPUTS(IN(IN_SAME, 0, 2, n, 1), IN(IN_SAME, 0, 2, 1, n)),  \
     STEPS(OP2(S_MATMUL, 0, 1), AXES(S_SUM, 2, 0, 0, 0)), OUTPUTS(3)}

static const program outer_big = OUTER_PROGRAM("outer 1024", 1024);  /* an 8 MiB intermediate in f64 */
static const program outer_mid = OUTER_PROGRAM("outer 300", 300);    /* 703 KiB */
static const program outer_small = OUTER_PROGRAM("outer 64", 64);    /* 32 KiB */

/* clang-format on */

#define QUOTA_BYTES "1048576"

START_TEST(test_quota_refuses_prepare) {
    CK_DAEMON_START(&D, "--client-device-bytes", QUOTA_BYTES, "--workers", "2");
    C = th_connect(&D);
    tf_tensor in[MAX_IN];
    hval val[MAX_VALUES];
    EXPECT_OK(C, upload_inputs(C, &outer_big, TF_F64, in, val));
    const uint64_t input_bytes = 2 * 1024 * sizeof(double);
    expect_device_memory(&D, 2, input_bytes, "after the uploads");
    const cache_info c0 = graph_cache(&D);
    const uint64_t prepared0 = th_counter(&D, "graphs_prepared");
    const uint64_t refusals0 = th_counter(&D, "quota_refusals");
    tf_prepared pp = 0;
    EXPECT_FAIL(C, prepare_program(C, &outer_big, TF_F64, &pp), TF_ERR_QUOTA, "device_bytes");
    ck_assert_uint_eq(pp, 0);
    ck_assert_uint_eq(th_counter(&D, "quota_refusals"), refusals0 + 1);
    ck_assert_uint_eq(th_counter(&D, "graphs_prepared"), prepared0);
    /* Nothing kept: no instance built for the refused client, idle or in use, and no device memory.
     */
    const cache_info c1 = graph_cache(&D);
    ck_assert_msg(
        c1.entries == c0.entries && c1.bytes == c0.bytes && c1.misses == c0.misses,
        "the refused prepare left an instance in the cache: %llu entries holding %llu bytes "
        "(before: %llu, %llu)",
        (unsigned long long)c1.entries, (unsigned long long)c1.bytes,
        (unsigned long long)c0.entries, (unsigned long long)c0.bytes);
    expect_device_memory(&D, 2, input_bytes, "after the refused prepare");
    for (int i = 0; i < 2; i++) EXPECT_OK(C, tf_tensor_free(C, in[i]));
    free_values(val, 2);

    /* A smaller graph still prepares and runs. */
    holder small;
    holder_start(&small, C, &outer_small, TF_F64);
    holder_check(&small, "the small graph under the quota");
    /* What a client's prepared graphs hold counts: two of 703 KiB do not fit in 1 MiB together. */
    holder mid;
    holder_start(&mid, C, &outer_mid, TF_F64);
    holder_check(&mid, "the first mid graph");
    const cache_info c2 = graph_cache(&D);
    EXPECT_FAIL(C, prepare_program(C, &outer_mid, TF_C64, &pp), TF_ERR_QUOTA, "device_bytes");
    const cache_info c3 = graph_cache(&D);
    ck_assert_msg(c3.entries == c2.entries && c3.bytes == c2.bytes,
                  "the refused second graph left an instance in the cache");
    EXPECT_OK(C, tf_prepared_free(C, mid.pp));
    mid.pp = 0;
    EXPECT_OK(C, prepare_program(C, &outer_mid, TF_C64, &pp));
    EXPECT_OK(C, tf_prepared_free(C, pp));
    holder_stop(&mid);
    holder_stop(&small);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* A 256 x 256 product: no intermediate, but as a device graph three 512 KiB slots and a GEMM. */
/* clang-format off */
static const program gemm_256 = {.name = "gemm 256", .dtypes = DT_REAL,
    INPUTS(IN(IN_SAME, 0, 2, 256, 256), IN(IN_SAME, 0, 2, 256, 256)),
    STEPS(OP2(S_MATMUL, 0, 1)), OUTPUTS(2)};
/* clang-format on */

/*
 * What a device graph holds beside the values counts too, and a prepare that
 * does not fit keeps nothing. Run one by one (the CPU backend), the product
 * writes its output tensor directly and the instance holds no memory: with
 * its inputs (1 MiB) and output (0.5 MiB) it runs under either quota.
 * Captured (cuda), its input and output slots (1.5 MiB) beside the inputs
 * are refused by a 2 MiB quota before anything is built; under 4 MiB they
 * fit, but the device graph's cuBLAS workspace (32 MiB for a GEMM of 2^24
 * multiply-adds) does not: the instance built for the refused client is
 * dropped, not kept idle in the cache at nobody's charge.
 */
START_TEST(test_quota_counts_the_device_graph) {
    const int captured = strncmp(th_device(), "cuda", 4) == 0;
    const char *quotas[2] = {"2097152", "4194304"};
    for (int q = 0; q < 2; q++) {
        CK_DAEMON_START(&D, "--client-device-bytes", quotas[q], "--workers", "2");
        C = th_connect(&D);
        const cache_info before = graph_cache(&D);
        tf_prepared pp = 0;
        if (!captured) {
            holder h;
            holder_start(&h, C, &gemm_256, TF_F64);
            holder_check(&h, "the product under the quota");
            holder_stop(&h);
        } else {
            tf_tensor in[MAX_IN];
            hval val[MAX_VALUES];
            EXPECT_OK(C, upload_inputs(C, &gemm_256, TF_F64, in, val));
            EXPECT_FAIL(C, prepare_program(C, &gemm_256, TF_F64, &pp), TF_ERR_QUOTA, "device_bytes");
            for (int i = 0; i < 2; i++) EXPECT_OK(C, tf_tensor_free(C, in[i]));
            free_values(val, 2);
            const cache_info after = graph_cache(&D);
            ck_assert_msg(after.entries == before.entries && after.bytes == before.bytes,
                          "quota %s: the refused prepare left %llu entries holding %llu bytes "
                          "(before: %llu, %llu)",
                          quotas[q], (unsigned long long)after.entries,
                          (unsigned long long)after.bytes, (unsigned long long)before.entries,
                          (unsigned long long)before.bytes);
            /* Under 2 MiB nothing was even built: the arena beside the inputs is over the quota. */
            if (q == 0) ck_assert_uint_eq(after.misses, before.misses);
        }
        expect_device_memory(&D, 0, 0, "after the prepare");
        tf_disconnect(C);
        CK_DAEMON_STOP(&D);
    }
}
END_TEST

/*
 * Under a device_bytes quota a freed instance is destroyed, not kept idle in
 * the cache (without quotas it stays for the next equal prepare: the cache
 * tests below): its memory would be charged to nobody, and a client could
 * leave one instance of its quota's size after another behind it. The next
 * prepare of the same graph is then a miss.
 */
START_TEST(test_freed_instance_under_quota) {
    CK_DAEMON_START(&D, "--client-device-bytes", "67108864", "--workers", "2");
    C = th_connect(&D);
    holder h;
    holder_start(&h, C, &outer_mid, TF_F64);
    holder_check(&h, "the graph");
    EXPECT_OK(C, tf_prepared_free(C, h.pp));
    h.pp = 0;
    /* The instance goes after the stream's earlier work: wait for the cache to be empty. */
    cache_info after_free = graph_cache(&D);
    for (int waited = 0; after_free.entries != 0 && waited < 10000; waited += 10) {
        th_sleep_ms(10);
        after_free = graph_cache(&D);
    }
    ck_assert_msg(after_free.entries == 0 && after_free.bytes == 0,
                  "a freed instance stayed in the cache under a quota: %llu entries, %llu bytes",
                  (unsigned long long)after_free.entries, (unsigned long long)after_free.bytes);
    tf_prepared pp = 0;
    EXPECT_OK(C, prepare_program(C, &outer_mid, TF_F64, &pp));
    const cache_info again = graph_cache(&D);
    ck_assert_uint_eq(again.hits, after_free.hits);
    ck_assert_uint_eq(again.misses, after_free.misses + 1);
    EXPECT_OK(C, tf_prepared_free(C, pp));
    holder_stop(&h);
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 7: the daemon-wide cache across processes ---- */

/* What a child of the cache test does: its own inputs, prepare, runs, and the pipes it talks on. */
typedef struct cache_child {
    unsigned salt;
    int runs;
    int ready_fd, go_fd; /* -1: no handshake */
} cache_child;

static int cache_child_fn(void *arg) {
    const cache_child *a = arg;
    srand(th_seed() ^ a->salt); /* other inputs than the parent's, replayable from the seed */
    tf_client *c = th_connect(&D);
    const program *p = &wide_program;
    tf_tensor in[MAX_IN];
    hval val[MAX_VALUES];
    CHILD_STATUS(c, upload_inputs(c, p, TF_F64, in, val), TF_OK);
    evaluate(p, val);
    tf_prepared pp = 0;
    CHILD_STATUS(c, prepare_program(c, p, TF_F64, &pp), TF_OK);
    if (a->ready_fd >= 0) {
        char byte = 'r';
        CHILD_CHECK(write(a->ready_fd, &byte, 1) == 1);
        CHILD_CHECK(read(a->go_fd, &byte, 1) == 1);
    }
    char why[600];
    for (int r = 0; r < a->runs; r++) {
        if (run_and_compare(c, p, pp, in, val, why, sizeof why)) {
            fprintf(stderr, "[child %d] run %d: %s (seed %u)\n", (int)getpid(), r, why, th_seed());
            return 1;
        }
    }
    CHILD_STATUS(c, tf_prepared_free(c, pp), TF_OK);
    tf_disconnect(c);
    free_values(val, p->n_inputs + p->n_steps);
    return 0;
}

/* A round trip on c after everything it sent: the daemon has handled its earlier frees. */
static void barrier(tf_client *c, tf_tensor t) {
    void *data = NULL;
    size_t bytes = 0;
    EXPECT_OK(c, tf_download(c, t, &data, &bytes));
    free(data);
}

START_TEST(test_cache_across_processes) {
    enum { RUNS = 20 };
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder a;
    holder_start(&a, C, &wide_program, TF_F64);
    holder_check(&a, "the first client's run");
    EXPECT_OK(C, tf_prepared_free(C, a.pp));
    a.pp = 0;
    barrier(C, a.in[0]);

    /* B, another process, prepares an equal graph after A freed it: a hit, correct for B's inputs.
     */
    const cache_info c0 = graph_cache(&D);
    ck_assert_uint_eq(c0.entries, 1);
    cache_child b = {0x5bd1e995u, 3, -1, -1};
    ck_assert_int_eq(th_wait(th_spawn(cache_child_fn, &b)), 0);
    const cache_info c1 = graph_cache(&D);
    ck_assert_msg(
        c1.hits == c0.hits + 1 && c1.misses == c0.misses && c1.entries == c0.entries,
        "another process's equal prepare: hits %llu -> %llu, misses %llu -> %llu, entries "
        "%llu -> %llu; expected one hit and nothing built",
        (unsigned long long)c0.hits, (unsigned long long)c1.hits, (unsigned long long)c0.misses,
        (unsigned long long)c1.misses, (unsigned long long)c0.entries,
        (unsigned long long)c1.entries);

    /* Disconnecting gives the instance back too: A prepares again (a hit) and holds it. */
    EXPECT_OK(C, prepare_program(C, &wide_program, TF_F64, &a.pp));
    const cache_info c2 = graph_cache(&D);
    ck_assert_uint_eq(c2.hits, c1.hits + 1);
    ck_assert_uint_eq(c2.misses, c1.misses);

    /* While A holds it, B's equal prepare is a miss (a twin); both then run at once, each correct.
     */
    int ready[2], go[2];
    ck_assert(pipe(ready) == 0 && pipe(go) == 0);
    cache_child twin = {0x9e3779b9u, RUNS, ready[1], go[0]};
    pid_t pid = th_spawn(cache_child_fn, &twin);
    char byte = 0;
    ck_assert_msg(read(ready[0], &byte, 1) == 1, "the twin's child did not prepare");
    const cache_info c3 = graph_cache(&D);
    ck_assert_msg(c3.misses == c2.misses + 1 && c3.hits == c2.hits && c3.entries == c2.entries + 1,
                  "a prepare of a graph in use elsewhere: misses %llu -> %llu, hits %llu -> %llu, "
                  "entries %llu -> %llu; expected a twin",
                  (unsigned long long)c2.misses, (unsigned long long)c3.misses,
                  (unsigned long long)c2.hits, (unsigned long long)c3.hits,
                  (unsigned long long)c2.entries, (unsigned long long)c3.entries);
    ck_assert_int_eq(write(go[1], "g", 1), 1);
    for (int r = 0; r < RUNS; r++) holder_check(&a, "the first client, beside its twin");
    ck_assert_int_eq(th_wait(pid), 0);
    for (int i = 0; i < 2; i++) {
        close(ready[i]);
        close(go[i]);
    }
    holder_stop(&a);
    expect_connections(&D, 1, "after the children");
    /* Both instances idle now: entries stay, nothing leaks. */
    ck_assert_uint_eq(graph_cache(&D).entries, 2);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 8: a prepared graph freed, or its client gone, while runs are queued ---- */

START_TEST(test_free_while_queued) {
    enum { RUNS = 8 };
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder h;
    holder_start(&h, C, &square_program, TF_F64);
    const int n_out = h.p->n_outputs;
    tf_tensor out[RUNS * MAX_OUT] = {0};
    run_job j = {h.pp, h.p->n_inputs, n_out, RUNS, h.in, out};
    tf_session *s = NULL;
    EXPECT_OK(C, tf_session_open(C, &s));
    EXPECT_OK(C, tf_session_with(s, run_fn, &j));
    EXPECT_OK(C, tf_session_submit(s));
    EXPECT_OK(C, tf_prepared_free(C, h.pp)); /* the runs are on their way, not done */
    const tf_prepared freed = h.pp;
    h.pp = 0;
    EXPECT_OK(C, tf_session_synchronize(s));
    EXPECT_OK(C, tf_session_close(s, NULL));
    char why[600];
    for (int t = 0; t < RUNS; t++)
        for (int o = 0; o < n_out; o++) {
            ck_assert_msg(
                !tensor_differs(C, out[t * n_out + o], &h.val[h.p->outputs[o]], why, sizeof why),
                "run %d output %d, its graph freed while it was queued: %s (seed %u)", t, o, why,
                th_seed());
            EXPECT_OK(C, tf_tensor_free(C, out[t * n_out + o]));
        }
    run_job again = {freed, h.p->n_inputs, n_out, 1, h.in, out};
    EXPECT_FAIL(C, tf_with_session(C, run_fn, &again), TF_ERR_UNKNOWN_HANDLE, NULL);

    /* The instance went back once those runs completed: an equal prepare takes it. */
    cache_info c0 = graph_cache(&D);
    tf_prepared pp = 0;
    EXPECT_OK(C, prepare_program(C, h.p, TF_F64, &pp));
    cache_info c1 = graph_cache(&D);
    ck_assert_msg(c1.hits == c0.hits + 1 && c1.misses == c0.misses,
                  "the freed graph's instance was not reused");
    EXPECT_OK(C, tf_prepared_free(C, pp));
    barrier(C, h.in[0]);

    /* A client that disconnects with runs queued: they finish or are skipped, then the instance
     * goes back. */
    tf_client *gone = th_connect(&D);
    tf_tensor gin[MAX_IN];
    hval gval[MAX_VALUES];
    EXPECT_OK(gone, upload_inputs(gone, h.p, TF_F64, gin, gval));
    EXPECT_OK(gone, prepare_program(gone, h.p, TF_F64, &pp));
    tf_tensor gout[RUNS * MAX_OUT];
    run_job gj = {pp, h.p->n_inputs, n_out, RUNS, gin, gout};
    EXPECT_OK(gone, tf_session_open(gone, &s));
    EXPECT_OK(gone, tf_session_with(s, run_fn, &gj));
    EXPECT_OK(gone, tf_session_submit(s));
    tf_session_release(s);
    tf_disconnect(gone);
    free_values(gval, h.p->n_inputs);
    expect_connections(&D, 1, "after the client with queued runs left");
    expect_device_memory(&D, (uint64_t)h.p->n_inputs, holder_input_bytes(&h), "after it left");
    c0 = graph_cache(&D);
    EXPECT_OK(C, prepare_program(C, h.p, TF_F64, &pp));
    c1 = graph_cache(&D);
    ck_assert_msg(c1.hits == c0.hits + 1 && c1.misses == c0.misses,
                  "the departed client's instance was not given back");
    h.pp = pp;
    holder_check(&h, "the instance of a departed client, reused");
    holder_stop(&h);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 9: a client killed while its prepared graph runs ---- */

/*
 * LONG_STEPS products of two 512 x 512 f64 matrices in one graph, LONG_RUNS
 * runs queued: about a second of work on two cores (a moment on a GPU).
 */
#define LONG_DIM 512
#define LONG_STEPS 48
#define LONG_RUNS 6
static program long_program;

static const program *long_graph(void) {
    program *p = &long_program;
    memset(p, 0, sizeof *p);
    p->name = "long";
    p->dtypes = DT_ALL;
    p->n_inputs = 2;
    for (int i = 0; i < 2; i++) p->in[i] = (in_spec){IN_SAME, 0, 2, {LONG_DIM, LONG_DIM}};
    p->n_steps = LONG_STEPS;
    for (int k = 0; k < LONG_STEPS; k++)
        p->steps[k] = (step){.kind = S_MATMUL, .in = {k % 2, 1 - k % 2}};
    p->n_outputs = 1;
    p->outputs[0] = 2 + LONG_STEPS - 1;
    return p;
}

/* The killed child: prepares the long graph, queues runs in a held session, says so, and waits. */
static int long_child_fn(void *arg) {
    const int ready_fd = *(const int *)arg;
    tf_client *c = th_connect(&D);
    const program *p = long_graph();
    tf_tensor in[MAX_IN], out[LONG_RUNS];
    hval val[MAX_VALUES];
    CHILD_STATUS(c, upload_inputs(c, p, TF_F64, in, val), TF_OK);
    tf_prepared pp = 0;
    CHILD_STATUS(c, prepare_program(c, p, TF_F64, &pp), TF_OK);
    tf_session *s = NULL;
    CHILD_STATUS(c, tf_session_open(c, &s), TF_OK);
    run_job j = {pp, p->n_inputs, p->n_outputs, LONG_RUNS, in, out};
    CHILD_STATUS(c, tf_session_with(s, run_fn, &j), TF_OK);
    CHILD_STATUS(c, tf_session_submit(s), TF_OK);
    char byte = 'r';
    CHILD_CHECK(write(ready_fd, &byte, 1) == 1);
    (void)tf_session_synchronize(s);
    for (;;) pause(); /* killed here, or earlier */
}

START_TEST(test_client_killed_while_running) {
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    const cache_info c0 = graph_cache(&D);
    int ready[2];
    ck_assert(pipe(ready) == 0);
    pid_t pid = th_spawn(long_child_fn, &ready[1]);
    char byte = 0;
    ck_assert_msg(read(ready[0], &byte, 1) == 1, "the child did not queue its runs");
    th_sleep_ms(100);
    Tenferro__Frame *r = th_status_report(&D);
    ck_assert_ptr_nonnull(r);
    uint64_t queued = 0;
    for (size_t i = 0; i < r->status_reply->n_clients; i++)
        if (r->status_reply->clients[i]->pid == pid)
            queued = r->status_reply->clients[i]->queued_items;
    tf__frame_free(r);
    printf("test-prepared: %s: the child was killed with %llu items queued\n", th_device(),
           (unsigned long long)queued);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_int_eq(th_wait(pid), 128 + SIGKILL);
    close(ready[0]);
    close(ready[1]);

    /* The daemon survives and returns to the baseline: one client (this one), no device memory, the
     * instance idle. */
    expect_connections(&D, 1, "after the kill");
    ck_assert_int_eq(th_client_count(&D), 1);
    expect_device_memory(&D, 0, 0, "after the kill");
    const cache_info c1 = graph_cache(&D);
    ck_assert_uint_eq(c1.entries, c0.entries + 1);
    ck_assert_uint_eq(c1.misses, c0.misses + 1);
    tf_prepared pp = 0;
    EXPECT_OK(C, prepare_program(C, long_graph(), TF_F64, &pp));
    const cache_info c2 = graph_cache(&D);
    ck_assert_msg(c2.hits == c1.hits + 1 && c2.entries == c1.entries,
                  "the killed client's instance was not given back idle");
    EXPECT_OK(C, tf_prepared_free(C, pp));

    /* A connection that closes right after sending a Prepare: its build finishes, nothing is lost.
     */
    /* clang-format off */
    static const program exp_neg = {.name = "exp-neg", .dtypes = DT_ALL,
                                    INPUTS(IN(IN_SAME, 0, 1, 4096)),
                                    STEPS(OP1(S_EXP, 0), OP1(S_NEG, 1)), OUTPUTS(2)};
    /* clang-format on */
    const cache_info c3 = graph_cache(&D);
    int fd = raw_client(&D, "prepare-and-go");
    raw_graph g;
    rg_init(&g, 3);
    rg_input(&g, 1, TF_F64, 4096);
    rg_node(&g, K(EXP), 1, 1, 0, 2);
    rg_node(&g, K(NEG), 1, 2, 0, 3);
    rg_output(&g, 3);
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.seq = ++g_seq;
    f.body_case = TENFERRO__FRAME__BODY_PREPARE;
    f.prepare = &g.p;
    ck_assert_int_eq(th_raw_send(fd, &f), 0);
    close(fd);
    expect_connections(&D, 1, "after the connection that prepared and left");
    const cache_info c4 = graph_cache(&D);
    ck_assert_msg(c4.entries <= c3.entries + 1,
                  "a prepare of a departed connection made %llu instances",
                  (unsigned long long)(c4.entries - c3.entries));
    EXPECT_OK(C, prepare_program(C, &exp_neg, TF_F64, &pp));
    const cache_info c5 = graph_cache(&D);
    if (c4.entries > c3.entries)
        ck_assert_msg(c5.hits == c4.hits + 1,
                      "the instance a departed connection had built is not idle");
    EXPECT_OK(C, tf_prepared_free(C, pp));

    /* Another client prepares and runs. */
    tf_client *next = th_connect(&D);
    holder h;
    holder_start(&h, next, program_named("chain"), TF_F64);
    holder_check(&h, "a client after the kill");
    holder_stop(&h);
    tf_disconnect(next);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- 10: a device fault during a replay ---- */

/* Records y = -fault(exp(x)) over f64 [64] and prepares it. */
static tf_status prepare_faulting(tf_client *c, tf_prepared *out) {
    tf_graph *g = NULL;
    tf_status st = tf_graph_new(c, &g);
    tf_tensor x, e, f, y;
    if (st == TF_OK) st = tf_graph_input(g, TF_F64, 1, (int64_t[]){64}, &x);
    if (st == TF_OK) st = tf_view_exp(tf_graph_view(g), x, &e);
    if (st == TF_OK) st = tf__test_inject_fault(tf_graph_view(g), e, &f);
    if (st == TF_OK) st = tf_view_neg(tf_graph_view(g), f, &y);
    if (st == TF_OK) st = tf_graph_output(g, y);
    if (st == TF_OK) st = tf_prepare(c, g, out);
    tf_graph_free(g);
    return st;
}

/*
 * After the loss, calls on c give TF_ERR_DEVICE (the daemon's last word;
 * `first` says whether this client's first call must be it), then
 * TF_ERR_DISCONNECTED for good (test-device-fault.c has the contract).
 */
static void expect_device_then_disconnected(tf_client *c, tf_tensor t, int first, const char *who) {
    int devices = 0;
    for (int call_no = 0; call_no < 4; call_no++) {
        void *data = NULL;
        size_t bytes = 0;
        tf_status st = tf_download(c, t, &data, &bytes);
        free(data);
        if (st == TF_ERR_DEVICE) {
            devices++;
            continue;
        }
        ck_assert_msg(st == TF_ERR_DISCONNECTED, "%s: call %d after the fault returned %s: %s", who,
                      call_no + 1, tf_status_name(st), tf_client_last_error(c));
        ck_assert_msg(!first || devices > 0, "%s: TF_ERR_DISCONNECTED before any TF_ERR_DEVICE",
                      who);
        ck_assert_msg(devices <= 1, "%s: %d TF_ERR_DEVICE from the last word", who, devices);
        return;
    }
    ck_abort_msg("%s: never TF_ERR_DISCONNECTED after the fault", who);
}

START_TEST(test_device_fault_in_replay) {
    /* Without --test-fault-injection the graph is refused at prepare, naming the node and the flag.
     */
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    tf_prepared pp = 0;
    EXPECT_FAIL(C, prepare_faulting(C, &pp), TF_ERR_UNSUPPORTED, "--test-fault-injection");
    ck_assert_int_eq(tf_client_failed_index(C), 1);
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);

    CK_DAEMON_START(&D, "--test-fault-injection", "--workers", "2");
    C = th_connect(&D);
    tf_client *idle = th_connect(&D);
    holder h;
    holder_start(&h, idle, program_named("chain"), TF_F64);
    holder_check(&h, "a prepared graph on the fault-injecting daemon");
    EXPECT_OK(C, prepare_faulting(C, &pp));
    double x[64];
    th_fill_random(TF_F64, 64, x);
    tf_tensor xt, y = 0;
    EXPECT_OK(C, tf_upload(C, TF_F64, 1, (int64_t[]){64}, x, &xt));
    run_job j = {pp, 1, 1, 1, &xt, &y};
    tf_status st = tf_with_session(C, run_fn, &j);
    ck_assert_msg(st == TF_ERR_DEVICE, "a replay that faults returned %s: %s", tf_status_name(st),
                  tf_client_last_error(C));
    char log[sizeof D.log_path];
    memcpy(log, D.log_path, sizeof log);
    const int rc = th_daemon_wait(&D, 6000);
    ck_assert_msg(rc == 1, "tenferrod exited with %d after the fault, expected 1 (log %s)", rc,
                  log);
    unlink(log); /* kept by the harness after a non-zero exit; this one was expected */
    expect_device_then_disconnected(C, xt, 0, "the faulting client");
    expect_device_then_disconnected(idle, h.in[0], 1, "the idle client");
    EXPECT_FAIL(
        idle,
        tf_with_session(idle, run_fn,
                        &(run_job){h.pp, 2, h.p->n_outputs, 1, h.in, (tf_tensor[MAX_OUT]){0}}),
        TF_ERR_DISCONNECTED, NULL);
    free_values(h.val, h.p->n_inputs + h.p->n_steps);
    tf_disconnect(idle);
    tf_disconnect(C);
}
END_TEST

/* ---- 11: trim empties the cache ---- */

START_TEST(test_trim_empties_cache) {
    CK_DAEMON_START(&D, "--workers", "2");
    C = th_connect(&D);
    holder idle, busy;
    holder_start(&idle, C, program_named("chain"), TF_F64);
    holder_start(&busy, C, program_named("matmul"), TF_C64);
    holder_check(&idle, "before trim");
    holder_check(&busy, "before trim");
    EXPECT_OK(C, tf_prepared_free(C, idle.pp));
    idle.pp = 0;
    barrier(C, idle.in[0]);
    ck_assert_uint_eq(graph_cache(&D).entries, 2); /* one idle, one in use */
    char out[8192];
    int rc = th_run_ctl(&D, out, sizeof out, "trim", NULL);
    ck_assert_msg(rc == 0, "tenferroctl trim exited %d: %s", rc, out);
    ck_assert_msg(strstr(out, "2 prepared graphs let go"),
                  "trim does not report the prepared graphs: %s", out);
    cache_info c = graph_cache(&D);
    ck_assert_msg(c.entries == 0 && c.bytes == 0,
                  "after trim the cache holds %llu entries, %llu bytes",
                  (unsigned long long)c.entries, (unsigned long long)c.bytes);
    /* The graph in use when trim ran goes on, and goes when it is freed. */
    holder_check(&busy, "a graph in use when trim ran");
    EXPECT_OK(C, tf_prepared_free(C, busy.pp));
    busy.pp = 0;
    barrier(C, busy.in[0]);
    rc = th_run_ctl(&D, out, sizeof out, "status", "--json");
    ck_assert_msg(rc == 0, "tenferroctl status --json exited %d: %s", rc, out);
    ck_assert_msg(strstr(out, "{\"name\":\"prepared_graphs\",\"entries\":0,"),
                  "tenferroctl status --json does not show an empty prepared_graphs cache: %s",
                  out);
    /* A later prepare is a miss, and works. */
    c = graph_cache(&D);
    EXPECT_OK(C, prepare_program(C, idle.p, TF_F64, &idle.pp));
    const cache_info c2 = graph_cache(&D);
    ck_assert_uint_eq(c2.misses, c.misses + 1);
    ck_assert_uint_eq(c2.hits, c.hits);
    ck_assert_uint_eq(c2.entries, 1);
    holder_check(&idle, "a prepare after trim");
    holder_stop(&idle);
    holder_stop(&busy);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

/* ---- the cache's bound pushing out an instance in use ---- */

START_TEST(test_cache_bound_in_use) {
    CK_DAEMON_START(&D, "--prepared-graphs", "1", "--workers", "2");
    C = th_connect(&D);
    holder a, b;
    holder_start(&a, C, program_named("chain"), TF_F64);
    holder_start(&b, C, program_named("matmul"),
                 TF_F64); /* pushes a's instance out while a holds it */
    cache_info c = graph_cache(&D);
    ck_assert_uint_eq(c.entries, 1);
    holder_check(&a, "a graph whose instance the bound pushed out while in use");
    holder_check(&b, "the graph that pushed it out");
    EXPECT_OK(C, tf_prepared_free(C, a.pp)); /* its instance goes now, not back to the cache */
    barrier(C, a.in[0]);
    c = graph_cache(&D);
    EXPECT_OK(C, prepare_program(C, a.p, TF_F64, &a.pp));
    const cache_info c2 = graph_cache(&D);
    ck_assert_msg(
        c2.misses == c.misses + 1 && c2.hits == c.hits && c2.entries == 1,
        "a prepare after its instance was pushed out: hits %llu -> %llu, misses %llu -> %llu",
        (unsigned long long)c.hits, (unsigned long long)c2.hits, (unsigned long long)c.misses,
        (unsigned long long)c2.misses);
    holder_check(&a, "the graph prepared again");
    holder_check(&b, "the graph pushed out in turn, in use");
    holder_stop(&a);
    holder_stop(&b);
    expect_device_memory(&D, 0, 0, "at the end");
    tf_disconnect(C);
    CK_DAEMON_STOP(&D);
}
END_TEST

static Suite *prepared_suite(void) {
    Suite *s = suite_create("prepared");
    TCase *tc = tcase_create("prepared graphs");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_every_operation, 0, N_PROGRAMS);
    tcase_add_test(tc, test_thousand_runs_constant_memory);
    tcase_add_test(tc, test_scoped_and_held_agree);
    tcase_add_test(tc, test_runs_in_one_batch);
    tcase_add_test(tc, test_preflight_client);
    tcase_add_test(tc, test_preflight_raw);
    tcase_add_test(tc, test_bad_graphs_raw);
    tcase_add_test(tc, test_quota_refuses_prepare);
    tcase_add_test(tc, test_quota_counts_the_device_graph);
    tcase_add_test(tc, test_freed_instance_under_quota);
    tcase_add_test(tc, test_cache_across_processes);
    tcase_add_test(tc, test_free_while_queued);
    tcase_add_test(tc, test_client_killed_while_running);
    tcase_add_test(tc, test_device_fault_in_replay);
    tcase_add_test(tc, test_trim_empties_cache);
    tcase_add_test(tc, test_cache_bound_in_use);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    th_seed(); /* one seed for the whole run, printed once and inherited by every test */
    SRunner *sr = srunner_create(prepared_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
