/*
 * Unit tests of the CUDA backend, run on a GPU machine.
 *
 * The CUDA backend promises the CPU backend's results on its device, and
 * failures that stay typed: a refused descriptor or an allocation the device
 * cannot hold is reported and leaves the device usable, while a device fault
 * poisons the CUDA context, is reported as TF_ERR_DEVICE, and makes every
 * later entry fail fast. Work on one stream runs in order, streams are
 * independent, and any thread may call in (the executor's loop thread,
 * workers and completion thread all do). These tests drive both backends
 * the way the executor does, through their vtables (open, stream_create, alloc,
 * copy_to_device, tfd_backend_run_op, event_record and event_wait before
 * reading back, copy_to_host), with descriptors whose output metadata comes
 * from the shared shape rules (tf__infer_output). Every operation family and
 * dtype runs on both backends on the same random inputs (magnitudes in
 * [0.5, 2), never zero; the seed is printed and TFCK_SEED=<n> replays it) and
 * the results are compared element by element: data movement, sign flips
 * and selections (permute, reshape, copy, neg, conj, max, min) must give the
 * CPU's bits, arithmetic a relative error of 1e-5 (f32, c64) or 1e-12 (f64,
 * c128), where sums, products and axpby measure the error against the number
 * of summed terms times the largest term, so that cancellation cannot fail a
 * correct kernel. A NaN must meet a NaN. GPU outputs are filled with NaN
 * bytes first, so an element a kernel forgets to write fails the comparison.
 * The per-stream block cache (cuda/alloc.c) must keep live blocks disjoint
 * and intact while it hands freed ones back, to their own stream only.
 *
 * When it runs: the size-class arithmetic of the block cache always (it
 * needs no device); everything else only when TENFERRO_TEST_DEVICE starts
 * with "cuda" ("cuda:N" picks the ordinal) and /dev/nvidiactl exists;
 * otherwise it prints a skip line for those. The parent process never touches CUDA: Check forks one
 * child per test, a child cannot use CUDA once its parent initialised it, so
 * each child opens both backends in its checked fixture. The fault test
 * needs that isolation and is left out under CK_FORK=no. Built without the
 * CUDA backend (CUDA=0, the sanitizer build of `make check`), there is
 * nothing to test.
 */
#include <stdio.h>

#ifdef TFD_HAVE_CUDA
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/cuda/internal.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static const tf_dtype dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* No random element is larger than this in modulus (2 * sqrt(2) for complex ones). */
#define INPUT_MAX 3.0L

/* ---- random inputs, reproducible from one printed seed ---- */

static uint64_t g_seed, rng_state;

/* splitmix64: one add and two multiplies per number, and any seed is fine. */
static uint64_t rand_u64(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A magnitude in [0.5, 2), negative half of the time unless `positive`. */
static double rand_value(int positive) {
    const double m = 0.5 + 1.5 * (double)(rand_u64() >> 11) * 0x1.0p-53;
    return positive || (rand_u64() & 1) ? m : -m;
}

/* ---- dtypes as arrays of float or double components ---- */

static int is_complex(tf_dtype dt) { return dt == TF_C64 || dt == TF_C128; }

static int is_single(tf_dtype dt) { return dt == TF_F32 || dt == TF_C64; }

/* Components per element: re and im for complex dtypes. */
static int width_of(tf_dtype dt) { return is_complex(dt) ? 2 : 1; }

static long double get_comp(const void *p, tf_dtype dt, int64_t j) {
    return is_single(dt) ? (long double)((const float *)p)[j] : (long double)((const double *)p)[j];
}

static void set_comp(void *p, tf_dtype dt, int64_t j, double v) {
    if (is_single(dt))
        ((float *)p)[j] = (float)v;
    else
        ((double *)p)[j] = v;
}

static size_t view_bytes(const tfd_tensor_view *v) {
    return (size_t)v->numel * tf_dtype_size(v->dtype);
}

static tfd_tensor_view view_of(const tf__meta *m, void *data) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = m->dtype;
    v.rank = m->rank;
    memcpy(v.shape, m->shape, sizeof v.shape);
    v.numel = tf__meta_numel(m);
    v.data = data;
    return v;
}

/* ---- the two backends, each used through one stream ---- */

/* A backend and the stream its calls are ordered on. */
typedef struct lane {
    tfd_backend *be;
    void *stream;
} lane;

enum { ON_CPU, ON_GPU };

static int gpu_ordinal;
static tfd_backend backends[2];
static lane lanes[2];
static int gpu_open;       /* cleared by the fault test, which closes the device itself */
static void *extra_stream; /* a second GPU stream, when a test made one */
static char msg[512];

/* What a test allocated, released by release_all (device memory first, on its own stream). */
#define MAX_TRACKED 256
static struct {
    lane on;
    void *ptr;
    size_t bytes;
} dev_mem[MAX_TRACKED];
static void *host_mem[MAX_TRACKED];
static int n_dev_mem, n_host_mem;

static void release_all(void) {
    while (n_dev_mem > 0) {
        n_dev_mem--;
        const lane *l = &dev_mem[n_dev_mem].on;
        l->be->vt->free(l->be, l->stream, dev_mem[n_dev_mem].ptr, dev_mem[n_dev_mem].bytes);
    }
    while (n_host_mem > 0) free(host_mem[--n_host_mem]);
}

static void open_lane(int side, const tfd_backend_vtable *vt, int ordinal) {
    tfd_backend *be = &backends[side];
    memset(be, 0, sizeof *be);
    be->vt = vt;
    msg[0] = '\0';
    tf_status st = vt->open(be, ordinal, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s open %d: %s: %s", vt->name, ordinal, tf_status_name(st), msg);
    lanes[side].be = be;
    st = vt->stream_create(be, 0, &lanes[side].stream);
    ck_assert_msg(st == TF_OK, "%s stream_create: %s", vt->name, tf_status_name(st));
}

static void close_lane(int side) {
    lane *l = &lanes[side];
    l->be->vt->stream_destroy(l->be, l->stream);
    l->be->vt->close(l->be);
}

static void setup(void) {
    rng_state = g_seed;
    n_dev_mem = n_host_mem = 0;
    extra_stream = NULL;
    open_lane(ON_CPU, &tfd_cpu_backend, 0);
    open_lane(ON_GPU, &tfd_cuda_backend, gpu_ordinal);
    gpu_open = 1;
}

static void teardown(void) {
    release_all();
    if (gpu_open) {
        if (extra_stream != NULL)
            backends[ON_GPU].vt->stream_destroy(&backends[ON_GPU], extra_stream);
        close_lane(ON_GPU);
    }
    close_lane(ON_CPU);
}

static void *host_buffer(size_t bytes) {
    ck_assert_int_lt(n_host_mem, MAX_TRACKED);
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    host_mem[n_host_mem++] = p;
    return p;
}

static void *lane_alloc(const lane *l, size_t bytes) {
    ck_assert_int_lt(n_dev_mem, MAX_TRACKED);
    void *p = NULL;
    tf_status st = l->be->vt->alloc(l->be, l->stream, bytes, &p);
    ck_assert_msg(st == TF_OK && p != NULL, "%s alloc of %zu bytes: %s", l->be->vt->name, bytes,
                  tf_status_name(st));
    dev_mem[n_dev_mem].on = *l;
    dev_mem[n_dev_mem].bytes = bytes;
    dev_mem[n_dev_mem++].ptr = p;
    return p;
}

/* Waits for everything enqueued on the lane so far: event_record, then event_wait. */
static void lane_sync(const lane *l) {
    void *ev = NULL;
    msg[0] = '\0';
    tf_status st = l->be->vt->event_record(l->be, l->stream, &ev, msg, sizeof msg);
    if (st == TF_OK) st = l->be->vt->event_wait(l->be, ev, msg, sizeof msg);
    l->be->vt->event_destroy(l->be, ev);
    ck_assert_msg(st == TF_OK, "%s event_record/event_wait: %s: %s", l->be->vt->name,
                  tf_status_name(st), msg);
}

static void *lane_upload(const lane *l, const void *host, size_t bytes) {
    void *p = lane_alloc(l, bytes);
    tf_status st = l->be->vt->copy_to_device(l->be, l->stream, p, host, bytes);
    ck_assert_msg(st == TF_OK, "%s copy_to_device: %s", l->be->vt->name, tf_status_name(st));
    return p;
}

/* Copies device memory back and waits for the copy before the host reads it. */
static void *lane_download(const lane *l, const void *dev, size_t bytes) {
    void *host = host_buffer(bytes);
    tf_status st = l->be->vt->copy_to_host(l->be, l->stream, host, dev, bytes);
    ck_assert_msg(st == TF_OK, "%s copy_to_host: %s", l->be->vt->name, tf_status_name(st));
    lane_sync(l);
    return host;
}

static void lane_run(const lane *l, const tfd_op *op, const char *what) {
    msg[0] = '\0';
    tf_status st = tfd_backend_run_op(l->be, l->stream, op, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s on %s (%s): %s: %s (seed %llu)", what, l->be->vt->name,
                  tf_dtype_name(op->in[0].dtype), tf_status_name(st), msg,
                  (unsigned long long)g_seed);
}

/* The device is still trusted: health reports TF_OK and nothing poisoned the context. */
static void expect_healthy(const char *when) {
    char why[512] = "";
    tf_status st = backends[ON_GPU].vt->health(&backends[ON_GPU], why, sizeof why);
    ck_assert_msg(st == TF_OK, "%s: health %s: %s", when, tf_status_name(st), why);
    ck_assert_msg(!tfd_cuda_context_poisoned(), "%s: context poisoned: %s", when,
                  tfd_cuda_poison_reason());
}

/* ---- one operation on both backends ---- */

/* How the inputs of a case are made. */
enum {
    IN_POSITIVE = 1u, /* real inputs > 0 (log, sqrt) */
    IN_NAN = 2u,      /* NaN planted in the first input; real dtypes only */
};

/* An operation and its input shapes, run for every dtype it serves. */
typedef struct op_case {
    const char *name;
    tf__op_kind kind;
    int rank;
    int64_t shape[TF_MAX_RANK];
    int64_t shape2[TF_MAX_RANK]; /* the second input's when it differs (matmul) */
    int n_params;
    int64_t params[TF_MAX_RANK];
    unsigned flags;
    unsigned inputs; /* IN_* */
    tf_scalar alpha, beta;
} op_case;

static int case_serves(const op_case *c, tf_dtype dt) {
    if (!is_complex(dt)) return 1;
    return c->kind != TF__OP_REDUCE_MAX && c->kind != TF__OP_REDUCE_MIN && !(c->inputs & IN_NAN);
}

/* One operation prepared on both backends, on copies of the same host inputs. */
typedef struct twin {
    const op_case *c;
    tfd_op op[2]; /* [ON_CPU], [ON_GPU] */
} twin;

static void *random_host(const tf__meta *m, unsigned inputs) {
    const tf_dtype dt = m->dtype;
    const int64_t n = tf__meta_numel(m) * width_of(dt);
    void *h = host_buffer(tf__meta_bytes(m));
    for (int64_t j = 0; j < n; j++)
        set_comp(h, dt, j, rand_value((inputs & IN_POSITIVE) && !is_complex(dt)));
    if (inputs & IN_NAN) { /* the first element of its groups and one further on */
        set_comp(h, dt, 0, NAN);
        set_comp(h, dt, n - 1 - n / 3, NAN);
    }
    return h;
}

/* Builds the case on both backends; inputs are random unless `given` supplies them. */
static void twin_build(twin *t, const op_case *c, tf_dtype dt, void *const given[2]) {
    const int arity = tf__op_arity(c->kind);
    tf__meta in[2], out;
    memset(in, 0, sizeof in);
    for (int i = 0; i < arity; i++) {
        in[i].dtype = dt;
        in[i].rank = c->rank;
        memcpy(in[i].shape, i == 1 && c->shape2[0] != 0 ? c->shape2 : c->shape,
               sizeof in[i].shape);
    }
    char why[256] = "";
    tf_status st = tf__infer_output(c->kind, in, arity, c->params, c->n_params, c->flags, &out,
                                    why, sizeof why);
    ck_assert_msg(st == TF_OK, "the shape rules refused %s: %s", c->name, why);
    t->c = c;
    for (int side = 0; side < 2; side++) {
        tfd_op *op = &t->op[side];
        memset(op, 0, sizeof *op);
        op->kind = c->kind;
        op->n_inputs = arity;
        op->n_params = c->n_params;
        memcpy(op->params, c->params, sizeof op->params);
        op->flags = c->flags;
        op->alpha = c->alpha;
        op->beta = c->beta;
        op->out = view_of(&out, lane_alloc(&lanes[side], tf__meta_bytes(&out)));
    }
    for (int i = 0; i < arity; i++) {
        const void *host = given != NULL ? given[i] : random_host(&in[i], c->inputs);
        for (int side = 0; side < 2; side++) {
            void *data = lane_upload(&lanes[side], host, tf__meta_bytes(&in[i]));
            t->op[side].in[i] = view_of(&in[i], data);
        }
    }
    void *nan_bytes = host_buffer(tf__meta_bytes(&out));
    memset(nan_bytes, 0xFF, tf__meta_bytes(&out)); /* all-ones bytes are NaN in every dtype */
    st = backends[ON_GPU].vt->copy_to_device(&backends[ON_GPU], lanes[ON_GPU].stream,
                                             t->op[ON_GPU].out.data, nan_bytes,
                                             tf__meta_bytes(&out));
    ck_assert_msg(st == TF_OK, "copy_to_device: %s", tf_status_name(st));
}

/*
 * The floor of the error bound of an operation's elements: negative demands
 * the CPU's bits, 0 a relative error, anything else the error allowed for
 * the number of summed terms times the largest term.
 */
static long double bound_floor(const tfd_op *op) {
    switch (op->kind) {
    case TF__OP_PERMUTE:
    case TF__OP_RESHAPE:
    case TF__OP_COPY:
    case TF__OP_NEG:
    case TF__OP_CONJ:
    case TF__OP_REDUCE_MAX:
    case TF__OP_REDUCE_MIN:
        return -1;
    case TF__OP_REDUCE_SUM:
        return (long double)(op->in[0].numel / op->out.numel) * INPUT_MAX;
    case TF__OP_MATMUL:
        return (long double)op->in[0].shape[op->in[0].rank - 1] * INPUT_MAX * INPUT_MAX;
    case TF__OP_AXPBY:
        return (hypotl(op->alpha.re, op->alpha.im) + hypotl(op->beta.re, op->beta.im)) * INPUT_MAX;
    default:
        return 0;
    }
}

/* Compares the CUDA result `got` with the CPU's `want`, element by element. */
static void compare_outputs(const char *what, const tfd_op *op, const void *want, const void *got) {
    const tf_dtype dt = op->out.dtype;
    const int w = width_of(dt);
    const size_t esize = tf_dtype_size(dt);
    const long double least = bound_floor(op), tol = is_single(dt) ? 1e-5L : 1e-12L;
    for (int64_t i = 0; i < op->out.numel; i++) {
        const long double wr = get_comp(want, dt, w * i), gr = get_comp(got, dt, w * i);
        const long double wi = w == 2 ? get_comp(want, dt, 2 * i + 1) : 0;
        const long double gi = w == 2 ? get_comp(got, dt, 2 * i + 1) : 0;
        const int want_nan = isnan(wr) || isnan(wi), got_nan = isnan(gr) || isnan(gi);
        long double err = 0, bound = 0;
        int ok;
        if (want_nan || got_nan)
            ok = want_nan && got_nan;
        else if (least < 0)
            ok = memcmp((const char *)want + i * esize, (const char *)got + i * esize, esize) == 0;
        else if (isinf(wr) || isinf(wi) || isinf(gr) || isinf(gi))
            ok = wr == gr && wi == gi;
        else {
            err = hypotl(gr - wr, gi - wi);
            bound = tol * fmaxl(hypotl(wr, wi), least);
            ok = err <= bound;
        }
        if (!ok)
            ck_abort_msg("%s (%s) element %lld of %lld: cpu %.17Lg%+.17Lgi, cuda %.17Lg%+.17Lgi, "
                         "|err| %.3Lg > %.3Lg (seed %llu)",
                         what, tf_dtype_name(dt), (long long)i, (long long)op->out.numel, wr, wi,
                         gr, gi, err, bound, (unsigned long long)g_seed);
    }
}

static void twin_run(const twin *t, int side) { lane_run(&lanes[side], &t->op[side], t->c->name); }

static void twin_compare(const twin *t) {
    const size_t bytes = view_bytes(&t->op[ON_CPU].out);
    const void *want = lane_download(&lanes[ON_CPU], t->op[ON_CPU].out.data, bytes);
    const void *got = lane_download(&lanes[ON_GPU], t->op[ON_GPU].out.data, bytes);
    compare_outputs(t->c->name, &t->op[ON_CPU], want, got);
}

/* Runs a case on both backends and compares; frees everything afterwards. */
static void parity_check(const op_case *c, tf_dtype dt, void *const given[2]) {
    twin t;
    twin_build(&t, c, dt, given);
    twin_run(&t, ON_CPU);
    twin_run(&t, ON_GPU);
    twin_compare(&t);
    release_all();
}

/* ---- parity ---- */

/* Elementwise tensors hold more elements than one pass of a grid-stride grid. */
#define EW .rank = 2, .shape = {517, 1031}
#define CUBE .rank = 3, .shape = {37, 41, 43}
#define BRICK .rank = 3, .shape = {300, 7, 5}
#define SLAB .rank = 4, .shape = {8, 200, 3, 300}

static const op_case parity_cases[] = {
    {.name = "add", .kind = TF__OP_ADD, EW},
    {.name = "sub", .kind = TF__OP_SUB, EW},
    {.name = "mul", .kind = TF__OP_MUL, EW},
    {.name = "div", .kind = TF__OP_DIV, EW},
    {.name = "mul of rank 3", .kind = TF__OP_MUL, .rank = 3, .shape = {4, 5, 6}},
    {.name = "add of one element", .kind = TF__OP_ADD, .rank = 1, .shape = {1}},
    {.name = "neg", .kind = TF__OP_NEG, EW},
    {.name = "conj", .kind = TF__OP_CONJ, EW},
    {.name = "abs", .kind = TF__OP_ABS, EW},
    {.name = "exp", .kind = TF__OP_EXP, EW},
    {.name = "exp of rank 0", .kind = TF__OP_EXP, .rank = 0},
    {.name = "log", .kind = TF__OP_LOG, EW, .inputs = IN_POSITIVE},
    {.name = "sqrt", .kind = TF__OP_SQRT, EW, .inputs = IN_POSITIVE},
    {.name = "log of both signs", .kind = TF__OP_LOG, .rank = 1, .shape = {1000}},
    {.name = "sqrt of both signs", .kind = TF__OP_SQRT, .rank = 1, .shape = {1000}},
    {.name = "square", .kind = TF__OP_SQUARE, EW},
    {.name = "scale", .kind = TF__OP_SCALE, EW, .alpha = {1.7, -0.3}},
    {.name = "axpby", .kind = TF__OP_AXPBY, EW, .alpha = {0.7, 0.25}, .beta = {-1.3, 2.0}},

    {.name = "transpose", .kind = TF__OP_PERMUTE, .rank = 2, .shape = {1000, 1003},
     .n_params = 2, .params = {1, 0}},
    {.name = "permute (2,0,1)", .kind = TF__OP_PERMUTE, CUBE, .n_params = 3, .params = {2, 0, 1}},
    {.name = "permute (1,0,2)", .kind = TF__OP_PERMUTE, CUBE, .n_params = 3, .params = {1, 0, 2}},
    {.name = "permute identity", .kind = TF__OP_PERMUTE, CUBE, .n_params = 3,
     .params = {0, 1, 2}},
    {.name = "permute (3,1,0,2)", .kind = TF__OP_PERMUTE, .rank = 4, .shape = {6, 7, 8, 9},
     .n_params = 4, .params = {3, 1, 0, 2}},
    {.name = "permute (1,0,3,2)", .kind = TF__OP_PERMUTE, .rank = 4, .shape = {6, 7, 8, 9},
     .n_params = 4, .params = {1, 0, 3, 2}},
    /* The innermost axis stays: rows move as 16-byte units when their length allows. */
    {.name = "permute (2,0,1,3) keeping rows of 4", .kind = TF__OP_PERMUTE, .rank = 4,
     .shape = {6, 7, 8, 4}, .n_params = 4, .params = {2, 0, 1, 3}},
    {.name = "permute (0,2,1,3) keeping rows of 48", .kind = TF__OP_PERMUTE, .rank = 4,
     .shape = {12, 10, 14, 48}, .n_params = 4, .params = {0, 2, 1, 3}},
    {.name = "permute (1,0,2) keeping rows of 3", .kind = TF__OP_PERMUTE, .rank = 3,
     .shape = {9, 11, 3}, .n_params = 3, .params = {1, 0, 2}},
    {.name = "permute of rank 8 reversed", .kind = TF__OP_PERMUTE, .rank = 8,
     .shape = {2, 3, 2, 3, 2, 3, 2, 3}, .n_params = 8, .params = {7, 6, 5, 4, 3, 2, 1, 0}},
    {.name = "reshape", .kind = TF__OP_RESHAPE, CUBE, .n_params = 2, .params = {1517, 43}},
    {.name = "copy", .kind = TF__OP_COPY, CUBE},

    {.name = "sum over axis 0", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 1, .params = {0}},
    {.name = "sum over axis 1", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 1, .params = {1}},
    {.name = "sum over axis 2", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 1, .params = {2}},
    {.name = "sum over axes 0,2", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 2,
     .params = {0, 2}},
    {.name = "sum over axis 1 keepdims", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 1,
     .params = {1}, .flags = TF__REDUCE_KEEPDIMS},
    {.name = "sum of all", .kind = TF__OP_REDUCE_SUM, BRICK},
    {.name = "sum of all keepdims", .kind = TF__OP_REDUCE_SUM, BRICK,
     .flags = TF__REDUCE_KEEPDIMS},
    {.name = "sum over axes 1,3", .kind = TF__OP_REDUCE_SUM, SLAB, .n_params = 2, .params = {1, 3}},
    {.name = "sum over a long axis 0", .kind = TF__OP_REDUCE_SUM, .rank = 2,
     .shape = {1 << 20, 4}, .n_params = 1, .params = {0}},
    {.name = "sum over a long axis 1", .kind = TF__OP_REDUCE_SUM, .rank = 2,
     .shape = {4, 1 << 20}, .n_params = 1, .params = {1}},
    {.name = "sum of a long vector", .kind = TF__OP_REDUCE_SUM, .rank = 1,
     .shape = {(1 << 22) + 17}},
    {.name = "sum of rank 0", .kind = TF__OP_REDUCE_SUM, .rank = 0},
    {.name = "sum over axes 6,1,4 of rank 8", .kind = TF__OP_REDUCE_SUM, .rank = 8,
     .shape = {2, 3, 4, 5, 3, 2, 1, 2}, .n_params = 3, .params = {6, 1, 4}},
    {.name = "max over axis 0", .kind = TF__OP_REDUCE_MAX, BRICK, .n_params = 1, .params = {0}},
    {.name = "max over axis 2", .kind = TF__OP_REDUCE_MAX, BRICK, .n_params = 1, .params = {2}},
    {.name = "max over axes 1,3", .kind = TF__OP_REDUCE_MAX, SLAB, .n_params = 2, .params = {1, 3}},
    {.name = "max of a long vector", .kind = TF__OP_REDUCE_MAX, .rank = 1,
     .shape = {(1 << 20) + 3}},
    {.name = "min over axis 1", .kind = TF__OP_REDUCE_MIN, BRICK, .n_params = 1, .params = {1}},
    {.name = "min over axes 0,2", .kind = TF__OP_REDUCE_MIN, BRICK, .n_params = 2,
     .params = {0, 2}},
    {.name = "min of all keepdims", .kind = TF__OP_REDUCE_MIN, BRICK,
     .flags = TF__REDUCE_KEEPDIMS},
    {.name = "max over axis 1 with NaNs", .kind = TF__OP_REDUCE_MAX, BRICK, .n_params = 1,
     .params = {1}, .inputs = IN_NAN},
    {.name = "min of all with NaNs", .kind = TF__OP_REDUCE_MIN, BRICK, .inputs = IN_NAN},
    {.name = "sum over axis 0 with NaNs", .kind = TF__OP_REDUCE_SUM, BRICK, .n_params = 1,
     .params = {0}, .inputs = IN_NAN},

    {.name = "matmul", .kind = TF__OP_MATMUL, .rank = 2, .shape = {257, 129}, .shape2 = {129, 65}},
    {.name = "matmul 1x1", .kind = TF__OP_MATMUL, .rank = 2, .shape = {1, 1}, .shape2 = {1, 1}},
    {.name = "matmul as a dot product", .kind = TF__OP_MATMUL, .rank = 2, .shape = {1, 300},
     .shape2 = {300, 1}},
    {.name = "matmul 300x500x200", .kind = TF__OP_MATMUL, .rank = 2, .shape = {300, 500},
     .shape2 = {500, 200}},
    {.name = "batched matmul", .kind = TF__OP_MATMUL, .rank = 3, .shape = {4, 33, 17},
     .shape2 = {4, 17, 29}},
    {.name = "batched matmul of rank 4", .kind = TF__OP_MATMUL, .rank = 4,
     .shape = {2, 3, 16, 8}, .shape2 = {2, 3, 8, 24}},
};

/* Every operation family and dtype gives the CPU backend's result on the same random inputs. */
START_TEST(test_parity_with_cpu) {
    const tf_dtype dt = dtypes[_i];
    for (size_t k = 0; k < N_ELEMS(parity_cases); k++)
        if (case_serves(&parity_cases[k], dt)) parity_check(&parity_cases[k], dt, NULL);
    expect_healthy("after the parity cases");
}
END_TEST

/* IEEE special values (signed zeros, infinities, NaN, huge, subnormal) give the CPU's results. */
START_TEST(test_special_values) {
    const tf_dtype dt = dtypes[_i];
    const int single = dt == TF_F32;
    const double vals[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1.0, -1.0, 0.75,
                           single ? 1e38 : 1e308, single ? -3e38 : -1e300,
                           single ? 1e-40 : 1e-310};
    enum { NV = N_ELEMS(vals) };
    double a[NV * NV], b[NV * NV]; /* every ordered pair; float components fit as well */
    for (int i = 0; i < NV; i++)
        for (int j = 0; j < NV; j++) {
            set_comp(a, dt, i * NV + j, vals[i]);
            set_comp(b, dt, i * NV + j, vals[j]);
        }
    static const tf__op_kind kinds[] = {TF__OP_ADD, TF__OP_SUB, TF__OP_MUL,
                                        TF__OP_DIV, TF__OP_NEG, TF__OP_ABS,
                                        TF__OP_EXP, TF__OP_LOG, TF__OP_SQRT,
                                        TF__OP_SQUARE};
    void *const given[2] = {a, b};
    for (size_t k = 0; k < N_ELEMS(kinds); k++) {
        const op_case c = {.name = tf__op_name(kinds[k]), .kind = kinds[k], .rank = 1,
                           .shape = {NV * NV}};
        parity_check(&c, dt, given);
    }
}
END_TEST

/* ---- refused descriptors ---- */

static const op_case base_add = {.name = "add", .kind = TF__OP_ADD, .rank = 1, .shape = {64}};
static const op_case base_abs = {.name = "abs", .kind = TF__OP_ABS, .rank = 1, .shape = {64}};
static const op_case base_sum = {.name = "sum over axis 1", .kind = TF__OP_REDUCE_SUM, .rank = 2,
                                 .shape = {6, 5}, .n_params = 1, .params = {1}};
static const op_case base_max = {.name = "max over axis 1", .kind = TF__OP_REDUCE_MAX, .rank = 2,
                                 .shape = {6, 5}, .n_params = 1, .params = {1}};
static const op_case base_permute = {.name = "permute", .kind = TF__OP_PERMUTE, .rank = 3,
                                     .shape = {2, 3, 4}, .n_params = 3, .params = {2, 0, 1}};
static const op_case base_matmul = {.name = "matmul", .kind = TF__OP_MATMUL, .rank = 2,
                                    .shape = {4, 6}, .shape2 = {6, 3}};

static int64_t shape_numel(const tfd_tensor_view *v) {
    int64_t n = 1;
    for (int d = 0; d < v->rank; d++) n *= v->shape[d];
    return n;
}

/* Each spoils one thing of a valid descriptor; none makes a kernel reach past its buffers. */
static void spoil_out_numel(tfd_op *op) { op->out.numel += 1; }
static void spoil_in_dtype(tfd_op *op) { op->in[0].dtype = (tf_dtype)99; }
static void spoil_out_dtype(tfd_op *op) { op->out.dtype = (tf_dtype)99; }
static void spoil_byte_offset(tfd_op *op) { op->in[0].data = (char *)op->in[0].data + 1; }
static void spoil_word_offset(tfd_op *op) { op->out.data = (char *)op->out.data + 4; }
static void spoil_no_data(tfd_op *op) { op->in[1].data = NULL; }
static void spoil_rank(tfd_op *op) { op->in[0].rank = TF_MAX_RANK + 1; }
static void spoil_zero_dim(tfd_op *op) {
    op->in[0].shape[0] = 0;
    op->in[0].numel = 0;
}
static void spoil_arity(tfd_op *op) { op->n_inputs = 1; }
static void spoil_mixed_dtypes(tfd_op *op) { op->in[1].dtype = TF_F64; }
static void spoil_abs_dtype(tfd_op *op) { op->out.dtype = op->in[0].dtype; }
static void spoil_axis(tfd_op *op) { op->params[0] = 5; }
static void spoil_repeated_axis(tfd_op *op) { op->params[1] = op->params[0]; }
static void spoil_reduced_size(tfd_op *op) {
    op->out.shape[0] -= 1;
    op->out.numel = shape_numel(&op->out);
}
static void spoil_inner_dim(tfd_op *op) {
    op->in[1].shape[0] -= 1;
    op->in[1].numel = shape_numel(&op->in[1]);
}
static void spoil_complex_order(tfd_op *op) { op->in[0].dtype = op->out.dtype = TF_C64; }
static void spoil_kind(tfd_op *op) { op->kind = TF__OP_FREE; }

/* A spoiled descriptor and the status the backend defines for it. */
typedef struct bad_case {
    const char *what;
    const op_case *base;
    tf_dtype dtype;
    void (*spoil)(tfd_op *op);
    tf_status want;
} bad_case;

static const bad_case bad_cases[] = {
    {"out.numel disagrees with its shape", &base_add, TF_F32, spoil_out_numel, TF_ERR_INTERNAL},
    {"input dtype 99", &base_add, TF_F64, spoil_in_dtype, TF_ERR_DTYPE},
    {"output dtype 99", &base_sum, TF_F32, spoil_out_dtype, TF_ERR_DTYPE},
    {"input pointer one byte off", &base_add, TF_C128, spoil_byte_offset, TF_ERR_INTERNAL},
    {"f64 output pointer four bytes off", &base_permute, TF_F64, spoil_word_offset,
     TF_ERR_INTERNAL},
    {"no device memory", &base_matmul, TF_F32, spoil_no_data, TF_ERR_INTERNAL},
    {"rank 9", &base_permute, TF_C64, spoil_rank, TF_ERR_INTERNAL},
    {"a dimension of 0", &base_sum, TF_F64, spoil_zero_dim, TF_ERR_INTERNAL},
    {"one input to add", &base_add, TF_F32, spoil_arity, TF_ERR_INTERNAL},
    {"f32 added to f64", &base_add, TF_F32, spoil_mixed_dtypes, TF_ERR_INTERNAL},
    {"abs of c64 writing c64", &base_abs, TF_C64, spoil_abs_dtype, TF_ERR_INTERNAL},
    {"reduced axis out of range", &base_sum, TF_F32, spoil_axis, TF_ERR_AXIS},
    {"repeated permute axis", &base_permute, TF_F32, spoil_repeated_axis, TF_ERR_AXIS},
    {"reduction output of the wrong size", &base_sum, TF_C128, spoil_reduced_size, TF_ERR_SHAPE},
    {"matmul inner dimensions differ", &base_matmul, TF_C64, spoil_inner_dim, TF_ERR_SHAPE},
    {"max of complex numbers", &base_max, TF_F32, spoil_complex_order, TF_ERR_DTYPE},
    {"a kind no family serves", &base_add, TF_F64, spoil_kind, TF_ERR_UNSUPPORTED},
};

/*
 * A bad descriptor gets a typed error and a reason, the context stays
 * healthy, and the valid descriptor it was spoiled from still runs right.
 */
START_TEST(test_bad_descriptor_refused) {
    for (size_t r = 0; r < N_ELEMS(bad_cases); r++) {
        const bad_case *bc = &bad_cases[r];
        twin t;
        twin_build(&t, bc->base, bc->dtype, NULL);
        tfd_op spoiled = t.op[ON_GPU];
        bc->spoil(&spoiled);
        msg[0] = '\0';
        tf_status st = tfd_backend_run_op(&backends[ON_GPU], lanes[ON_GPU].stream, &spoiled, msg,
                                          sizeof msg);
        ck_assert_msg(st == bc->want, "%s: got %s (%s), want %s", bc->what, tf_status_name(st), msg,
                      tf_status_name(bc->want));
        ck_assert_msg(msg[0] != '\0', "%s: refused without a reason", bc->what);
        expect_healthy(bc->what);
        twin_run(&t, ON_CPU);
        twin_run(&t, ON_GPU);
        twin_compare(&t);
        release_all();
    }
}
END_TEST

/* ---- out of memory ---- */

/* An allocation beyond the device is TF_ERR_NO_MEMORY and leaves the device usable. */
START_TEST(test_out_of_memory) {
    void *const streams[2] = {lanes[ON_GPU].stream, NULL}; /* stream-ordered, and unordered */
    for (int i = 0; i < 2; i++) {
        void *p = &p;
        tf_status st =
            backends[ON_GPU].vt->alloc(&backends[ON_GPU], streams[i], (size_t)1 << 42, &p);
        ck_assert_msg(st == TF_ERR_NO_MEMORY, "4 TiB %s: got %s",
                      streams[i] ? "on a stream" : "without a stream", tf_status_name(st));
        ck_assert_ptr_null(p);
        expect_healthy("after a failed allocation");
        parity_check(&base_add, TF_F64, NULL);
        parity_check(&base_matmul, TF_C128, NULL);
    }
}
END_TEST

/* ---- the block cache ---- */

/*
 * Sizes on both sides of the cache's boundaries: the smallest class (256 B),
 * the classes carved from slabs (up to 64 KiB), the large classes, and the
 * requests above 64 MiB that bypass the cache.
 */
static const size_t cache_sizes[] = {0,
                                     1,
                                     255,
                                     256,
                                     257,
                                     1000,
                                     4096,
                                     65535,
                                     65536,
                                     65537,
                                     (size_t)1 << 20,
                                     ((size_t)1 << 20) + 1,
                                     (size_t)64 << 20,
                                     ((size_t)64 << 20) + 256};
#define LARGEST_CACHED ((size_t)64 << 20)

/* A device block of the cache tests and the tag its contents were written from. */
typedef struct block {
    void *p;
    size_t bytes;
    unsigned tag;
} block;

/* Byte j of the pattern of `tag` (tags below 256 give different bytes at every offset). */
static unsigned char pattern_byte(unsigned tag, size_t j) {
    return (unsigned char)(tag * 131u + (unsigned)j * 7u + (unsigned)(j >> 9) + 1u);
}

static void block_alloc(const lane *l, size_t bytes, block *b) {
    b->p = NULL;
    b->bytes = bytes;
    b->tag = 0;
    tf_status st = l->be->vt->alloc(l->be, l->stream, bytes, &b->p);
    ck_assert_msg(st == TF_OK && b->p != NULL, "alloc of %zu bytes: %s", bytes,
                  tf_status_name(st));
    ck_assert_msg((uintptr_t)b->p % 16 == 0, "alloc of %zu bytes: %p is misaligned", bytes, b->p);
}

static void block_free(const lane *l, block *b) {
    l->be->vt->free(l->be, l->stream, b->p, b->bytes);
    b->p = NULL;
}

/* Writes the pattern of `tag` over the whole block, ordered on the lane's stream. */
static void block_write(const lane *l, block *b, unsigned tag) {
    b->tag = tag;
    if (b->bytes == 0) return;
    unsigned char *host = malloc(b->bytes);
    ck_assert_ptr_nonnull(host);
    for (size_t j = 0; j < b->bytes; j++) host[j] = pattern_byte(tag, j);
    tf_status st = l->be->vt->copy_to_device(l->be, l->stream, b->p, host, b->bytes);
    ck_assert_msg(st == TF_OK, "copy_to_device of %zu bytes: %s", b->bytes, tf_status_name(st));
    lane_sync(l);
    free(host);
}

/* Reads the block back and checks it still holds its tag's pattern. */
static void block_check(const lane *l, const block *b, const char *when) {
    if (b->bytes == 0) return;
    unsigned char *host = malloc(b->bytes);
    ck_assert_ptr_nonnull(host);
    tf_status st = l->be->vt->copy_to_host(l->be, l->stream, host, b->p, b->bytes);
    ck_assert_msg(st == TF_OK, "copy_to_host of %zu bytes: %s", b->bytes, tf_status_name(st));
    lane_sync(l);
    for (size_t j = 0; j < b->bytes; j++)
        if (host[j] != pattern_byte(b->tag, j)) {
            const unsigned got = host[j], want = pattern_byte(b->tag, j);
            free(host);
            ck_abort_msg("%s: block %p of %zu bytes (tag %u), byte %zu: got %u, want %u "
                         "(seed %llu)",
                         when, b->p, b->bytes, b->tag, j, got, want, (unsigned long long)g_seed);
        }
    free(host);
}

static int by_address(const void *x, const void *y) {
    const uintptr_t a = (uintptr_t)((const block *)x)->p, b = (uintptr_t)((const block *)y)->p;
    return a < b ? -1 : a > b;
}

/* Blocks live at the same time never overlap (a zero-byte block still owns one byte). */
static void expect_disjoint(const block *blocks, int n, const char *when) {
    block *sorted = malloc(sizeof *sorted * (size_t)(n > 0 ? n : 1));
    ck_assert_ptr_nonnull(sorted);
    memcpy(sorted, blocks, sizeof *sorted * (size_t)n);
    qsort(sorted, (size_t)n, sizeof *sorted, by_address);
    for (int i = 0; i + 1 < n; i++) {
        const uintptr_t end = (uintptr_t)sorted[i].p + (sorted[i].bytes ? sorted[i].bytes : 1);
        if (end > (uintptr_t)sorted[i + 1].p) {
            const block a = sorted[i], b = sorted[i + 1];
            free(sorted);
            ck_abort_msg("%s: live blocks overlap: %p (%zu bytes) and %p (%zu bytes)", when, a.p,
                         a.bytes, b.p, b.bytes);
        }
    }
    free(sorted);
}

static int holds_pointer(const block *blocks, int n, const void *p) {
    for (int i = 0; i < n; i++)
        if (blocks[i].p == p) return 1;
    return 0;
}

/* A random-walk size: log-uniform from 1 B to 4 MiB, a power of two a quarter of the time. */
static size_t random_size(void) {
    const int log2 = (int)(rand_u64() % 22);
    const size_t base = (size_t)1 << log2;
    if (rand_u64() % 4 == 0) return base;
    return base + (size_t)(rand_u64() % base);
}

/* What a worker thread frees: the backend's free called from a thread new to it. */
typedef struct free_job {
    lane on;
    block *b;
} free_job;

static void *free_in_thread(void *arg) {
    free_job *job = arg;
    block_free(&job->on, job->b);
    return NULL;
}

/*
 * The per-stream block cache: blocks of every class (and above the largest)
 * live at the same time are disjoint and keep their contents; freed blocks
 * come back to the same stream's later allocations, with the new contents
 * only; a random walk of allocations and frees never corrupts a live block;
 * a block freed on one stream is not handed to another; a 4 TiB request is
 * still TF_ERR_NO_MEMORY and leaves live blocks intact; frees from another
 * thread, trim, and a stream's return to the pool keep all of that.
 */
START_TEST(test_block_cache) {
    tfd_backend *gpu = &backends[ON_GPU];
    const lane one = lanes[ON_GPU];
    enum { NS = N_ELEMS(cache_sizes) };
    unsigned tag = 1;

    /* Every class at once, three times: the second and third rounds reuse the first's blocks. */
    block live[NS], prev[NS];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NS; i++) block_alloc(&one, cache_sizes[i], &live[i]);
        expect_disjoint(live, NS, "every class at once");
        if (round > 0)
            for (int i = 0; i < NS; i++)
                if (cache_sizes[i] <= LARGEST_CACHED)
                    ck_assert_msg(holds_pointer(prev, NS, live[i].p),
                                  "round %d: %zu bytes at %p is not a block the stream freed",
                                  round, cache_sizes[i], live[i].p);
        for (int i = 0; i < NS; i++) block_write(&one, &live[i], tag++);
        for (int i = 0; i < NS; i++) block_check(&one, &live[i], "every class at once");
        memcpy(prev, live, sizeof live);
        for (int j = 0; j < NS; j++) block_free(&one, &live[round % 2 ? j : NS - 1 - j]);
    }

    /* Half stay live while the other half is freed, allocated again and rewritten. */
    for (int i = 0; i < NS; i++) {
        block_alloc(&one, cache_sizes[i], &live[i]);
        block_write(&one, &live[i], tag++);
    }
    for (int i = 1; i < NS; i += 2) block_free(&one, &live[i]);
    for (int i = 1; i < NS; i += 2) {
        block_alloc(&one, cache_sizes[i], &live[i]);
        block_write(&one, &live[i], tag++);
    }
    expect_disjoint(live, NS, "half reallocated");
    for (int i = 0; i < NS; i++) block_check(&one, &live[i], "half reallocated");
    for (int i = 0; i < NS; i++) block_free(&one, &live[i]);

    /* A random walk of allocations and frees; every live block keeps its own contents. */
    enum { WALK = 400, WALK_LIVE = 48 };
    block walk[WALK_LIVE];
    int n_walk = 0;
    for (int step = 0; step < WALK; step++) {
        if (n_walk == WALK_LIVE || (n_walk > 0 && rand_u64() % 3 == 0)) {
            const int victim = (int)(rand_u64() % (uint64_t)n_walk);
            block_free(&one, &walk[victim]);
            walk[victim] = walk[--n_walk];
        } else {
            block_alloc(&one, random_size(), &walk[n_walk]);
            block_write(&one, &walk[n_walk], (tag++ % 255u) + 1u);
            n_walk++;
            expect_disjoint(walk, n_walk, "random walk");
        }
        if (step % 100 == 99)
            for (int i = 0; i < n_walk; i++) block_check(&one, &walk[i], "random walk");
    }
    for (int i = 0; i < n_walk; i++) block_check(&one, &walk[i], "end of the random walk");
    for (int i = 0; i < n_walk; i++) block_free(&one, &walk[i]);
    tag = 1;

    /* A block freed on one stream is not handed to another, and stays the first stream's. */
    ck_assert_int_eq(gpu->vt->stream_create(gpu, 0, &extra_stream), TF_OK);
    const lane two = {gpu, extra_stream};
    static const size_t probe_sizes[] = {4096, (size_t)1 << 20};
    for (size_t k = 0; k < N_ELEMS(probe_sizes); k++) {
        block first, other, again;
        block_alloc(&one, probe_sizes[k], &first);
        block_write(&one, &first, tag++);
        void *const freed = first.p;
        block_free(&one, &first);
        block_alloc(&two, probe_sizes[k], &other);
        ck_assert_msg(other.p != freed, "%zu bytes freed on one stream went to another",
                      probe_sizes[k]);
        block_alloc(&one, probe_sizes[k], &again);
        ck_assert_msg(again.p == freed, "%zu bytes freed on a stream did not come back to it",
                      probe_sizes[k]);
        block_write(&two, &other, tag++);
        block_write(&one, &again, tag++);
        block_check(&two, &other, "second stream");
        block_check(&one, &again, "first stream");
        block_free(&two, &other);
        block_free(&one, &again);
    }

    /* Out of memory: typed, healthy afterwards, and live blocks (small and large) intact. */
    block small, large, cached;
    block_alloc(&one, 4096, &small);
    block_alloc(&one, (size_t)1 << 20, &large);
    block_alloc(&one, (size_t)2 << 20, &cached);
    block_write(&one, &small, tag++);
    block_write(&one, &large, tag++);
    block_free(&one, &cached); /* something for the retry to give back */
    void *p = &p;
    tf_status st = gpu->vt->alloc(gpu, one.stream, (size_t)1 << 42, &p);
    ck_assert_msg(st == TF_ERR_NO_MEMORY, "4 TiB on a stream with a cache: got %s",
                  tf_status_name(st));
    ck_assert_ptr_null(p);
    expect_healthy("after a failed allocation with a cache");
    block_check(&one, &small, "after out of memory");
    block_check(&one, &large, "after out of memory");
    block_alloc(&one, (size_t)2 << 20, &cached);
    block_write(&one, &cached, tag++);
    block_check(&one, &cached, "allocated after out of memory");
    block_free(&one, &cached);

    /* A free from a thread that never called the backend, as the executor's workers do. */
    block moved;
    block_alloc(&one, 8192, &moved);
    void *const moved_at = moved.p;
    free_job job = {.on = one, .b = &moved};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, free_in_thread, &job), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    block_alloc(&one, 8192, &moved);
    ck_assert_ptr_eq(moved.p, moved_at);
    block_write(&one, &moved, tag++);
    block_check(&one, &moved, "freed by another thread");

    /* trim gives cached memory back but nothing live. */
    block spare;
    block_alloc(&one, 65536, &spare);
    block_free(&one, &spare);
    msg[0] = '\0';
    st = gpu->vt->trim(gpu, msg, sizeof msg);
    ck_assert_msg(st == TF_OK && msg[0] != '\0', "trim: %s: %s", tf_status_name(st), msg);
    block_check(&one, &small, "after trim");
    block_check(&one, &large, "after trim");
    block_check(&one, &moved, "after trim");

    /* A stream back in the pool and out again still allocates right. */
    block pooled;
    block_alloc(&two, (size_t)1 << 20, &pooled);
    block_free(&two, &pooled);
    block_alloc(&two, 300, &pooled);
    block_free(&two, &pooled);
    gpu->vt->stream_destroy(gpu, extra_stream);
    extra_stream = NULL;
    ck_assert_int_eq(gpu->vt->stream_create(gpu, 0, &extra_stream), TF_OK);
    const lane three = {gpu, extra_stream};
    for (size_t k = 0; k < N_ELEMS(probe_sizes); k++) {
        block b;
        block_alloc(&three, probe_sizes[k], &b);
        block_write(&three, &b, tag++);
        block_check(&three, &b, "on a stream taken from the pool");
        block_free(&three, &b);
    }

    block_free(&one, &small);
    block_free(&one, &large);
    block_free(&one, &moved);
    expect_healthy("after the block cache");
}
END_TEST

/* ---- stream order ---- */

enum { CHAIN_LEN = 1000, CHAIN_N = 1 << 18 };

/* A chain of dependent adds on one stream: x <- x + inc, ping-ponging between two buffers. */
typedef struct chain {
    lane on;
    double step;
    void *buf[2], *inc;
} chain;

static tfd_tensor_view chain_view(void *data) {
    const tf__meta m = {.dtype = TF_F64, .rank = 1, .shape = {CHAIN_N}};
    return view_of(&m, data);
}

static void chain_start(chain *c) {
    double *x = host_buffer(sizeof(double) * CHAIN_N), *inc = host_buffer(sizeof(double) * CHAIN_N);
    for (int i = 0; i < CHAIN_N; i++) {
        x[i] = (double)i;
        inc[i] = c->step * (double)(1 + i % 3); /* small multiples of 2^-2: every sum is exact */
    }
    c->buf[0] = lane_upload(&c->on, x, sizeof(double) * CHAIN_N);
    c->buf[1] = lane_alloc(&c->on, sizeof(double) * CHAIN_N);
    c->inc = lane_upload(&c->on, inc, sizeof(double) * CHAIN_N);
}

/* Enqueues link k: buf[(k + 1) % 2] = buf[k % 2] + inc; it reads what link k - 1 wrote. */
static void chain_link(const chain *c, int k) {
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_ADD;
    op.n_inputs = 2;
    op.in[0] = chain_view(c->buf[k & 1]);
    op.in[1] = chain_view(c->inc);
    op.out = chain_view(c->buf[(k + 1) & 1]);
    lane_run(&c->on, &op, "chained add");
}

static void chain_check(const chain *c) {
    const double *got = lane_download(&c->on, c->buf[CHAIN_LEN & 1], sizeof(double) * CHAIN_N);
    for (int i = 0; i < CHAIN_N; i++) {
        const double want = (double)i + CHAIN_LEN * c->step * (double)(1 + i % 3);
        if (got[i] != want)
            ck_abort_msg("chain of step %g, element %d: got %.17g, want %.17g", c->step, i, got[i],
                         want);
    }
}

/* 1000 dependent adds on one stream give the exact sum; two streams' independent chains both do. */
START_TEST(test_stream_order) {
    const int n_chains = 1 + _i;
    chain ch[2] = {{.on = lanes[ON_GPU], .step = 0.5}, {.on = lanes[ON_GPU], .step = -0.25}};
    if (n_chains == 2) {
        tf_status st = backends[ON_GPU].vt->stream_create(&backends[ON_GPU], -1, &extra_stream);
        ck_assert_msg(st == TF_OK, "stream_create: %s", tf_status_name(st));
        ck_assert_ptr_ne(extra_stream, lanes[ON_GPU].stream);
        ch[1].on.stream = extra_stream;
    }
    for (int c = 0; c < n_chains; c++) chain_start(&ch[c]);
    for (int k = 0; k < CHAIN_LEN; k++)
        for (int c = 0; c < n_chains; c++) chain_link(&ch[c], k);
    for (int c = 0; c < n_chains; c++) lane_sync(&ch[c].on);
    for (int c = 0; c < n_chains; c++) chain_check(&ch[c]);
    expect_healthy("after the chains");
}
END_TEST

/* ---- threads ---- */

/* What an executor worker hands the completion thread: the operation and its event. */
typedef struct handoff {
    const tfd_op *op;
    void *event;
    tf_status st;
    char why[256];
} handoff;

/* A worker's part: enqueue the operation and record its event. */
static void *worker_part(void *arg) {
    handoff *h = arg;
    h->st = tfd_backend_run_op(&backends[ON_GPU], lanes[ON_GPU].stream, h->op, h->why,
                               sizeof h->why);
    if (h->st == TF_OK)
        h->st = backends[ON_GPU].vt->event_record(&backends[ON_GPU], lanes[ON_GPU].stream,
                                                  &h->event, h->why, sizeof h->why);
    return NULL;
}

/* The completion thread's part: wait for the event, then return it. */
static void *completion_part(void *arg) {
    handoff *h = arg;
    h->st = backends[ON_GPU].vt->event_wait(&backends[ON_GPU], h->event, h->why, sizeof h->why);
    backends[ON_GPU].vt->event_destroy(&backends[ON_GPU], h->event);
    return NULL;
}

static void in_fresh_thread(void *(*part)(void *), handoff *h, const char *name) {
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, part, h), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(h->st == TF_OK, "%s: %s: %s", name, tf_status_name(h->st), h->why);
}

static const op_case thread_sum = {.name = "sum over axis 0", .kind = TF__OP_REDUCE_SUM, .rank = 2,
                                   .shape = {1000, 33}, .n_params = 1, .params = {0}};
static const op_case thread_matmul = {.name = "matmul", .kind = TF__OP_MATMUL, .rank = 2,
                                      .shape = {1000, 33}, .shape2 = {33, 20}};

/* Threads that never called the backend before (workers, the completion thread) can use it. */
START_TEST(test_fresh_threads) {
    const struct {
        const op_case *c;
        tf_dtype dt;
    } runs[] = {{&thread_sum, TF_F64}, {&thread_matmul, TF_C128}, {&base_permute, TF_C64}};
    for (size_t r = 0; r < N_ELEMS(runs); r++) {
        twin t;
        twin_build(&t, runs[r].c, runs[r].dt, NULL);
        twin_run(&t, ON_CPU);
        handoff h = {.op = &t.op[ON_GPU]};
        in_fresh_thread(worker_part, &h, "enqueue and event_record in a new thread");
        in_fresh_thread(completion_part, &h, "event_wait in a new thread");
        twin_compare(&t);
        release_all();
    }
}
END_TEST

/* ---- life cycle ---- */

/*
 * The backend names itself, refuses a missing device, and its memory,
 * copies, events and streams keep the vtable's promises.
 */
START_TEST(test_lifecycle) {
    tfd_backend *gpu = &backends[ON_GPU];
    ck_assert_str_eq(tfd_cuda_backend.name, "cuda");
    ck_assert_ptr_nonnull(tfd_cuda_backend.health);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "cuda:%d (", gpu_ordinal);
    ck_assert_msg(strncmp(gpu->description, prefix, strlen(prefix)) == 0, "description \"%s\"",
                  gpu->description);
    ck_assert_int_gt(tfd_cuda_device_count(), gpu_ordinal);
    expect_healthy("after open");

    tfd_backend missing;
    memset(&missing, 0, sizeof missing);
    missing.vt = &tfd_cuda_backend;
    msg[0] = '\0';
    ck_assert_int_eq(tfd_cuda_backend.open(&missing, 4096, msg, sizeof msg), TF_ERR_DEVICE);
    ck_assert_msg(msg[0] != '\0', "no reason for a missing device");

    static const size_t sizes[] = {0, 1, 255, 256, 257, 1 << 20};
    for (size_t i = 0; i < N_ELEMS(sizes); i++) {
        void *p = lane_alloc(&lanes[ON_GPU], sizes[i]);
        ck_assert_uint_eq((uintptr_t)p % 16, 0); /* the largest element, c128 */
        if (sizes[i] == 0) continue;
        unsigned char *pattern = host_buffer(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++) pattern[j] = (unsigned char)(rand_u64() >> 56);
        ck_assert_int_eq(gpu->vt->copy_to_device(gpu, lanes[ON_GPU].stream, p, pattern, sizes[i]),
                         TF_OK);
        const void *back = lane_download(&lanes[ON_GPU], p, sizes[i]);
        ck_assert_msg(memcmp(back, pattern, sizes[i]) == 0, "round trip of %zu bytes", sizes[i]);
    }
    ck_assert_int_eq(gpu->vt->copy_to_device(gpu, lanes[ON_GPU].stream, NULL, NULL, 0), TF_OK);
    double x = 1.0;
    void *d = lane_alloc(&lanes[ON_GPU], sizeof x);
    ck_assert_int_eq(gpu->vt->copy_to_device(gpu, NULL, d, &x, sizeof x), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(gpu->vt->copy_to_host(gpu, NULL, &x, d, sizeof x), TF_ERR_INVALID_ARGUMENT);
    lane_sync(&lanes[ON_GPU]); /* an event over nothing new completes too */

    static const int priorities[] = {-1000, -1, 0, 1, 1000}; /* clamped into CUDA's range */
    void *streams[N_ELEMS(priorities)];
    for (size_t i = 0; i < N_ELEMS(priorities); i++) {
        ck_assert_int_eq(gpu->vt->stream_create(gpu, priorities[i], &streams[i]), TF_OK);
        ck_assert_ptr_nonnull(streams[i]);
        ck_assert_ptr_ne(streams[i], lanes[ON_GPU].stream);
    }
    for (size_t i = 0; i < N_ELEMS(priorities); i++) gpu->vt->stream_destroy(gpu, streams[i]);
    expect_healthy("after the life-cycle calls");
}
END_TEST

/* ---- a device fault ---- */

static tfd_op probe_op_desc; /* a valid add, prepared before the fault */

static tf_status probe_op(void) {
    return tfd_backend_run_op(&backends[ON_GPU], lanes[ON_GPU].stream, &probe_op_desc, msg,
                              sizeof msg);
}

static tf_status probe_alloc(void) {
    void *p = NULL;
    tf_status st = backends[ON_GPU].vt->alloc(&backends[ON_GPU], lanes[ON_GPU].stream, 256, &p);
    ck_assert_ptr_null(p);
    return st;
}

static tf_status probe_copy(void) {
    float x[64] = {0};
    return backends[ON_GPU].vt->copy_to_device(&backends[ON_GPU], lanes[ON_GPU].stream,
                                               probe_op_desc.in[0].data, x, sizeof x);
}

static tf_status probe_event(void) {
    void *ev = NULL;
    tf_status st = backends[ON_GPU].vt->event_record(&backends[ON_GPU], lanes[ON_GPU].stream, &ev,
                                                     msg, sizeof msg);
    ck_assert_ptr_null(ev);
    return st;
}

static tf_status probe_stream(void) {
    void *s = NULL;
    tf_status st = backends[ON_GPU].vt->stream_create(&backends[ON_GPU], 0, &s);
    ck_assert_ptr_null(s);
    return st;
}

static tf_status probe_health(void) {
    return backends[ON_GPU].vt->health(&backends[ON_GPU], msg, sizeof msg);
}

static const struct {
    const char *what;
    tf_status (*probe)(void);
} after_fault[] = {{"an operation", probe_op},      {"alloc", probe_alloc},
                   {"copy_to_device", probe_copy},  {"event_record", probe_event},
                   {"stream_create", probe_stream}, {"health", probe_health}};

/* Square c128 products queued ahead of the fault, so event_record is enqueued before it happens. */
enum { BUSY_DIM = 2048, BUSY_PRODUCTS = 16 };

static void keep_device_busy(void) {
    const tf__meta m = {.dtype = TF_C128, .rank = 2, .shape = {BUSY_DIM, BUSY_DIM}};
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_MATMUL;
    op.n_inputs = 2;
    op.in[0] = view_of(&m, lane_alloc(&lanes[ON_GPU], tf__meta_bytes(&m)));
    op.in[1] = op.in[0];
    op.out = view_of(&m, lane_alloc(&lanes[ON_GPU], tf__meta_bytes(&m)));
    for (int i = 0; i < BUSY_PRODUCTS; i++) lane_run(&lanes[ON_GPU], &op, "busy matmul");
}

/*
 * An illegal address in a kernel poisons the context: event_wait reports
 * TF_ERR_DEVICE, health reports it with the reason, every later entry fails
 * fast with TF_ERR_DEVICE, and close still returns.
 */
START_TEST(test_fault_poisons_context) {
    tfd_backend *gpu = &backends[ON_GPU];
    twin valid;
    twin_build(&valid, &base_add, TF_F32, NULL);
    probe_op_desc = valid.op[ON_GPU];
    lane_sync(&lanes[ON_GPU]);
    expect_healthy("before the fault");

    /* An aligned address that is not device memory (what the driver faulted on in verification). */
    const tf__meta m = {.dtype = TF_F32, .rank = 1, .shape = {1 << 20}};
    tfd_op bad;
    memset(&bad, 0, sizeof bad);
    bad.kind = TF__OP_ADD;
    bad.n_inputs = 2;
    bad.in[0] = view_of(&m, (void *)(uintptr_t)0x100000000ull);
    bad.in[1] = view_of(&m, lane_alloc(&lanes[ON_GPU], tf__meta_bytes(&m)));
    bad.out = view_of(&m, lane_alloc(&lanes[ON_GPU], tf__meta_bytes(&m)));
    keep_device_busy();
    lane_run(&lanes[ON_GPU], &bad, "add reading a bogus address (the launch is asynchronous)");

    void *ev = NULL;
    msg[0] = '\0';
    tf_status st = gpu->vt->event_record(gpu, lanes[ON_GPU].stream, &ev, msg, sizeof msg);
    ck_assert_msg(st == TF_OK && ev != NULL, "event_record before the fault: %s: %s",
                  tf_status_name(st), msg);
    msg[0] = '\0';
    st = gpu->vt->event_wait(gpu, ev, msg, sizeof msg);
    gpu->vt->event_destroy(gpu, ev);
    ck_assert_msg(st == TF_ERR_DEVICE, "event_wait after the fault: %s: %s", tf_status_name(st),
                  msg);
    ck_assert_msg(msg[0] != '\0', "event_wait gave no reason");

    char reason[512] = "";
    ck_assert_int_eq(gpu->vt->health(gpu, reason, sizeof reason), TF_ERR_DEVICE);
    ck_assert_msg(reason[0] != '\0', "health gave no reason");
    ck_assert_int_eq(tfd_cuda_context_poisoned(), 1);
    ck_assert_str_eq(reason, tfd_cuda_poison_reason());
    printf("test-cuda-backend: the fault as reported: %s\n", reason);
    fflush(stdout);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < N_ELEMS(after_fault); i++) {
        msg[0] = '\0';
        st = after_fault[i].probe();
        ck_assert_msg(st == TF_ERR_DEVICE, "%s after the fault: got %s", after_fault[i].what,
                      tf_status_name(st));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double spent = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    ck_assert_msg(spent < 1.0, "the entries after the fault took %.3f s, not failing fast", spent);

    release_all(); /* frees nothing on a poisoned context, and must not hang */
    close_lane(ON_GPU);
    gpu_open = 0;
}
END_TEST

/*
 * The block a request gets, for every request up to 70,000 bytes, both sides
 * of every class boundary up to 64 MiB and 20,000 random sizes: never
 * smaller than the request; a power of two under twice the request up to
 * 64 KiB, at most a quarter above it beyond; the request itself above
 * 64 MiB; never smaller for a larger request; a block's own size maps to
 * itself; and exactly TFD_CUDA_N_CLASSES distinct sizes up to 64 MiB.
 */
START_TEST(test_size_classes) {
    const size_t slab_max = (size_t)1 << TFD_CUDA_SLAB_CLASS_MAX_LOG2;
    const size_t cached_max = (size_t)1 << TFD_CUDA_CLASS_MAX_LOG2;
    static size_t sizes[70000 + 2000 + 20000];
    size_t n = 0;
    for (size_t b = 0; b < 70000; b++) sizes[n++] = b;
    for (int j = TFD_CUDA_SLAB_CLASS_MAX_LOG2; j <= TFD_CUDA_CLASS_MAX_LOG2 + 1; j++)
        for (size_t q = 0; q <= 4; q++) {
            size_t edge = ((size_t)1 << j) + q * (((size_t)1 << j) / 4);
            sizes[n++] = edge - 1;
            sizes[n++] = edge;
            sizes[n++] = edge + 1;
        }
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        sizes[n++] = (size_t)(x % (cached_max + cached_max / 2));
    }
    size_t distinct[256];
    size_t n_distinct = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t b = sizes[i], got = tfd_cuda_block_bytes(b);
        ck_assert_msg(got >= b, "%zu bytes get a block of %zu", b, got);
        if (b > cached_max) {
            ck_assert_msg(got == b, "%zu bytes (above the cache) get %zu", b, got);
            continue;
        }
        if (b <= slab_max) {
            ck_assert_msg((got & (got - 1)) == 0 && (b <= 256 || got < 2 * b),
                          "%zu bytes get %zu: not the next power of two", b, got);
        } else {
            ck_assert_msg(got - b < b / 4 + 1, "%zu bytes get %zu: more than a quarter wasted", b,
                          got);
        }
        ck_assert_msg(tfd_cuda_block_bytes(got) == got, "a block of %zu maps to %zu", got,
                      tfd_cuda_block_bytes(got));
        if (b + 1 <= cached_max)
            ck_assert_msg(tfd_cuda_block_bytes(b + 1) >= got,
                          "%zu bytes get %zu, one more gets %zu", b, got,
                          tfd_cuda_block_bytes(b + 1));
        size_t k = 0;
        while (k < n_distinct && distinct[k] != got) k++;
        if (k == n_distinct) {
            ck_assert_uint_lt(n_distinct, 256);
            distinct[n_distinct++] = got;
        }
    }
    ck_assert_uint_eq(n_distinct, TFD_CUDA_N_CLASSES);
}
END_TEST

/* The size classes alone: arithmetic, no device. */
static Suite *size_class_suite(void) {
    Suite *s = suite_create("cuda-size-classes");
    TCase *tc = tcase_create("classes");
    tcase_add_test(tc, test_size_classes);
    suite_add_tcase(s, tc);
    return s;
}

static Suite *cuda_backend_suite(int forking) {
    Suite *s = suite_create("cuda-backend");
    TCase *tc = tcase_create("device");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_lifecycle);
    tcase_add_loop_test(tc, test_parity_with_cpu, 0, 4);
    tcase_add_loop_test(tc, test_special_values, 0, 2);
    tcase_add_test(tc, test_bad_descriptor_refused);
    tcase_add_test(tc, test_out_of_memory);
    tcase_add_test(tc, test_block_cache);
    tcase_add_loop_test(tc, test_stream_order, 0, 2);
    tcase_add_test(tc, test_fresh_threads);
    suite_add_tcase(s, tc);
    if (forking) { /* last and alone in its process: nothing can run on a poisoned context */
        TCase *fault = tcase_create("fault");
        tcase_add_checked_fixture(fault, setup, teardown);
        tcase_set_timeout(fault, 120);
        tcase_add_test(fault, test_fault_poisons_context);
        suite_add_tcase(s, fault);
    }
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
    printf("test-cuda-backend: built without the CUDA backend, nothing to test\n");
    return 0;
#else
    /* Decided without initialising CUDA here: the forked children need a parent that never did. */
    SRunner *classes = srunner_create(size_class_suite());
    srunner_run_all(classes, CK_NORMAL);
    const int classes_failed = srunner_ntests_failed(classes);
    srunner_free(classes);
    if (classes_failed) return EXIT_FAILURE;
    const char *device = getenv("TENFERRO_TEST_DEVICE");
    if (device == NULL || strncmp(device, "cuda", 4) != 0 || access("/dev/nvidiactl", F_OK) != 0) {
        printf("test-cuda-backend: device tests skipped: no CUDA device "
               "(set TENFERRO_TEST_DEVICE=cuda:0 on a GPU machine)\n");
        return 0;
    }
    gpu_ordinal = parse_ordinal(device);
    if (gpu_ordinal < 0) {
        fprintf(stderr, "test-cuda-backend: TENFERRO_TEST_DEVICE=%s is neither cuda nor cuda:N\n",
                device);
        return EXIT_FAILURE;
    }
    const char *seed = getenv("TFCK_SEED");
    g_seed = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    const char *fork_mode = getenv("CK_FORK");
    const int forking = fork_mode == NULL || strcmp(fork_mode, "no") != 0;
    printf("test-cuda-backend: cuda:%d, seed %llu (replay with TFCK_SEED=%llu)%s\n", gpu_ordinal,
           (unsigned long long)g_seed, (unsigned long long)g_seed,
           forking ? "" : "; CK_FORK=no leaves out the fault test");
    fflush(stdout);
    SRunner *sr = srunner_create(cuda_backend_suite(forking));
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
