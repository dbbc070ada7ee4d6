/*
 * Unit tests of the CUDA backend's prepared graphs (cuda/graph.c: the
 * vtable's graph_capture, graph_launch and graph_destroy), run on a GPU
 * machine, in the style of test-cuda-backend.c.
 *
 * The contract (backend.h): a captured graph replays its operations in
 * order on any stream of the backend, each launch after the earlier ones;
 * it is self-contained (its scratch, cuFFT plans and cuBLAS workspace are
 * its own, so the plan cache may be trimmed and every stream's block cache
 * reused meanwhile) and gives its memory back at graph_destroy; and a
 * capture that fails returns a typed status, takes nothing with it and
 * leaves the backend running operations. The tests drive both backends
 * through their vtables the way the daemon does: graph slots are memory
 * from alloc with a NULL stream, an input slot is written by an OP_COPY on
 * the client's stream before graph_launch on that stream, and an output
 * read back by another. The CPU backend runs the same operations one by one
 * on the same random inputs (magnitudes in [0.5, 2), never zero; the seed
 * is printed and TFCK_SEED=<n> replays it) and every element of the
 * graph's output must be within a relative error of a few units of the
 * dtype's precision of the CPU's, measured against the terms a sum adds up
 * where there is a sum. GPU slots are filled with NaN bytes first, so an
 * element no node writes fails.
 *
 * Cases: a chain of 100 elementwise operations on 4096 f32 launched 1000
 * times, its input rewritten before each launch; matrix products (cuBLAS)
 * and a batched one; contractions whose plans need a permutation and a
 * temporary (the scratch path) while the client stream's block cache is
 * reused and trimmed between launches; C2C, R2C and C2R (whose scratch is a
 * copy) FFTs in one graph; a reduction whose partial results are memory
 * nodes; one stateful graph launched on two streams alternately (the final
 * value proves the launches never overlapped); a graph launched again after
 * the FFT plan cache was emptied and its plans destroyed; device memory
 * before and after graph_destroy; captures refused by a node (a bad dtype,
 * a kind no family serves) or invalidated by one that waits for the device
 * (OP_TEST_FAULT synchronizes its stream); and captures while another
 * thread allocates, frees, page-locks host memory, makes and destroys
 * streams and runs FFTs.
 *
 * When it runs: only when TENFERRO_TEST_DEVICE starts with "cuda" ("cuda:N"
 * picks the ordinal) and /dev/nvidiactl exists; otherwise it prints a skip
 * line and passes. Check forks one child per test and the parent never
 * touches CUDA, so every child opens both backends itself; the capture that
 * holds OP_TEST_FAULT is left out under CK_FORK=no. Built without the CUDA
 * backend (CUDA=0) there is nothing to test.
 */
#include <stdio.h>

#ifdef TFD_HAVE_CUDA
#include <check.h>
#include <complex.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "tests/contract-cases.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- random inputs, reproducible from one printed seed ---- */

static uint64_t g_seed, rng_state;

/* splitmix64. */
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

static int is_complex(tf_dtype dt) { return dt == TF_C64 || dt == TF_C128; }

static int is_single(tf_dtype dt) { return dt == TF_F32 || dt == TF_C64; }

/* The relative precision the comparisons allow per operation, as test-cuda-backend.c. */
static long double tol_of(tf_dtype dt) { return is_single(dt) ? 1e-5L : 1e-12L; }

/* ---- the two backends ---- */

enum { ON_CPU, ON_GPU };

static int gpu_ordinal;
static tfd_backend backends[2];
static void *streams[2]; /* each backend's client stream */
static char msg[512];

#define GPU (&backends[ON_GPU])
#define CPU (&backends[ON_CPU])

/* A tensor of both backends: a graph slot on the GPU (alloc without a stream), one on the CPU. */
typedef struct tensor {
    tf__meta m;
    size_t bytes;
    void *data[2];
} tensor;

#define MAX_TENSORS 640
static tensor tensors[MAX_TENSORS];
static int n_tensors;

/* Extra GPU streams of a test, destroyed by teardown. */
static void *extra[4];
static int n_extra;

static void setup(void) {
    rng_state = g_seed;
    n_tensors = n_extra = 0;
    const tfd_backend_vtable *vts[2] = {&tfd_cpu_backend, &tfd_cuda_backend};
    for (int side = 0; side < 2; side++) {
        tfd_backend *be = &backends[side];
        memset(be, 0, sizeof *be);
        be->vt = vts[side];
        msg[0] = '\0';
        tf_status st = be->vt->open(be, side == ON_GPU ? gpu_ordinal : 0, msg, sizeof msg);
        ck_assert_msg(st == TF_OK, "%s open: %s: %s", be->vt->name, tf_status_name(st), msg);
        st = be->vt->stream_create(be, 0, &streams[side]);
        ck_assert_msg(st == TF_OK, "%s stream_create: %s", be->vt->name, tf_status_name(st));
    }
    ck_assert_ptr_nonnull(GPU->vt->graph_capture);
    ck_assert_ptr_nonnull(GPU->vt->graph_launch);
    ck_assert_ptr_nonnull(GPU->vt->graph_destroy);
}

static void teardown(void) {
    for (int i = n_tensors - 1; i >= 0; i--) {
        GPU->vt->free(GPU, NULL, tensors[i].data[ON_GPU], tensors[i].bytes);
        CPU->vt->free(CPU, streams[ON_CPU], tensors[i].data[ON_CPU], tensors[i].bytes);
    }
    for (int i = 0; i < n_extra; i++) GPU->vt->stream_destroy(GPU, extra[i]);
    for (int side = 1; side >= 0; side--) {
        backends[side].vt->stream_destroy(&backends[side], streams[side]);
        backends[side].vt->close(&backends[side]);
    }
}

static void *new_stream(void) {
    ck_assert_int_lt(n_extra, (int)N_ELEMS(extra));
    void *s = NULL;
    ck_assert_int_eq(GPU->vt->stream_create(GPU, 0, &s), TF_OK);
    extra[n_extra++] = s;
    return s;
}

/* Waits for everything enqueued on a stream of a backend so far. */
static void sync_on(tfd_backend *be, void *stream) {
    void *ev = NULL;
    msg[0] = '\0';
    tf_status st = be->vt->event_record(be, stream, &ev, msg, sizeof msg);
    if (st == TF_OK) st = be->vt->event_wait(be, ev, msg, sizeof msg);
    be->vt->event_destroy(be, ev);
    ck_assert_msg(st == TF_OK, "%s sync: %s: %s", be->vt->name, tf_status_name(st), msg);
}

/* The device is still trusted: health reports TF_OK and nothing poisoned the context. */
static void expect_healthy(const char *when) {
    char why[512] = "";
    tf_status st = GPU->vt->health(GPU, why, sizeof why);
    ck_assert_msg(st == TF_OK, "%s: health %s: %s", when, tf_status_name(st), why);
    ck_assert_msg(!tfd_cuda_context_poisoned(), "%s: context poisoned: %s", when,
                  tfd_cuda_poison_reason());
}

static tf__meta meta_of(tf_dtype dt, int rank, const int64_t *shape) {
    tf__meta m;
    memset(&m, 0, sizeof m);
    m.dtype = dt;
    m.rank = rank;
    for (int i = 0; i < rank; i++) m.shape[i] = shape[i];
    return m;
}

/* A new tensor of both backends; the GPU's holds NaN bytes. */
static tensor *tensor_new(const tf__meta *m) {
    ck_assert_int_lt(n_tensors, MAX_TENSORS);
    tensor *t = &tensors[n_tensors];
    t->m = *m;
    t->bytes = tf__meta_bytes(m);
    tf_status st = GPU->vt->alloc(GPU, NULL, t->bytes, &t->data[ON_GPU]);
    ck_assert_msg(st == TF_OK, "cuda alloc of a slot of %zu bytes: %s", t->bytes,
                  tf_status_name(st));
    st = CPU->vt->alloc(CPU, streams[ON_CPU], t->bytes, &t->data[ON_CPU]);
    ck_assert_msg(st == TF_OK, "cpu alloc of %zu bytes: %s", t->bytes, tf_status_name(st));
    n_tensors++;
    void *nan_bytes = malloc(t->bytes ? t->bytes : 1);
    ck_assert_ptr_nonnull(nan_bytes);
    memset(nan_bytes, 0xFF, t->bytes);
    ck_assert_int_eq(GPU->vt->copy_to_device(GPU, streams[ON_GPU], t->data[ON_GPU], nan_bytes,
                                             t->bytes),
                     TF_OK);
    sync_on(GPU, streams[ON_GPU]);
    free(nan_bytes);
    return t;
}

static tfd_tensor_view view_of(const tensor *t, int side) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = t->m.dtype;
    v.rank = t->m.rank;
    memcpy(v.shape, t->m.shape, sizeof v.shape);
    v.numel = tf__meta_numel(&t->m);
    v.data = t->data[side];
    return v;
}

/* Random host values for a tensor (caller frees). */
static void *random_host(const tf__meta *m, int positive) {
    const int64_t n = tf__meta_numel(m) * (is_complex(m->dtype) ? 2 : 1);
    void *h = malloc(tf__meta_bytes(m) ? tf__meta_bytes(m) : 1);
    ck_assert_ptr_nonnull(h);
    for (int64_t j = 0; j < n; j++) {
        const double v = rand_value(positive);
        if (is_single(m->dtype))
            ((float *)h)[j] = (float)v;
        else
            ((double *)h)[j] = v;
    }
    return h;
}

/* Writes host bytes into the tensor on both backends, on the GPU on `stream`. */
static void fill(tensor *t, const void *host, void *stream) {
    ck_assert_int_eq(CPU->vt->copy_to_device(CPU, streams[ON_CPU], t->data[ON_CPU], host, t->bytes),
                     TF_OK);
    ck_assert_int_eq(GPU->vt->copy_to_device(GPU, stream, t->data[ON_GPU], host, t->bytes), TF_OK);
    sync_on(GPU, stream);
}

/* Fresh random values into the tensor on both backends; returns them (caller frees). */
static void *fill_random(tensor *t, int positive) {
    void *h = random_host(&t->m, positive);
    fill(t, h, streams[ON_GPU]);
    return h;
}

/* One backend's copy of a tensor (caller frees); the GPU's read on `stream`. */
static void *download(const tensor *t, int side, void *stream) {
    tfd_backend *be = &backends[side];
    void *h = malloc(t->bytes ? t->bytes : 1);
    ck_assert_ptr_nonnull(h);
    ck_assert_int_eq(be->vt->copy_to_host(be, stream, h, t->data[side], t->bytes), TF_OK);
    sync_on(be, stream);
    return h;
}

static long double complex elem(const void *p, tf_dtype dt, int64_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return CMPLXL(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    case TF_C128: return CMPLXL(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    }
    return NAN;
}

/*
 * Compares the GPU's copy of t (read on `stream`) with the CPU's: every
 * element within rel * max(|cpu|, scale), where scale < 0 stands for the
 * largest |cpu| of the tensor (a norm-wise bound, for FFTs). NaN fails.
 */
static void expect_match_on(const char *what, const tensor *t, long double rel, long double scale,
                            void *stream) {
    void *want = download(t, ON_CPU, streams[ON_CPU]);
    void *got = download(t, ON_GPU, stream);
    const int64_t n = tf__meta_numel(&t->m);
    if (scale < 0) {
        scale = 0;
        for (int64_t i = 0; i < n; i++) scale = fmaxl(scale, cabsl(elem(want, t->m.dtype, i)));
    }
    for (int64_t i = 0; i < n; i++) {
        const long double complex w = elem(want, t->m.dtype, i), g = elem(got, t->m.dtype, i);
        const long double err = cabsl(g - w), bound = rel * fmaxl(cabsl(w), scale);
        if (!(err <= bound)) {
            free(want);
            free(got);
            ck_abort_msg("%s (%s) element %lld of %lld: cpu %.12Lg%+.12Lgi, cuda %.12Lg%+.12Lgi, "
                         "|err| %.3Lg > %.3Lg (seed %llu)",
                         what, tf_dtype_name(t->m.dtype), (long long)i, (long long)n, creall(w),
                         cimagl(w), creall(g), cimagl(g), err, bound, (unsigned long long)g_seed);
        }
    }
    free(want);
    free(got);
}

static void expect_match(const char *what, const tensor *t, long double rel, long double scale) {
    expect_match_on(what, t, rel, scale, streams[ON_GPU]);
}

/* ---- graphs of both backends ---- */

#define MAX_NODES 128

/* The same nodes for both backends: run one by one on the CPU, captured on the GPU. */
typedef struct graph_def {
    int n;
    tfd_op op[2][MAX_NODES];
} graph_def;

static tfd_op proto_of(tf__op_kind kind) {
    tfd_op o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    return o;
}

static tfd_op coef_op(tf__op_kind kind, double alpha, double beta) {
    tfd_op o = proto_of(kind);
    o.alpha.re = alpha;
    o.beta.re = beta;
    return o;
}

/*
 * Appends a node made from `proto` on inputs a (and b) writing `out`, or a
 * new tensor of the shape the rules give when out is NULL; returns the output.
 */
static tensor *node_into(graph_def *g, const tfd_op *proto, tensor *a, tensor *b, tensor *out) {
    ck_assert_int_lt(g->n, MAX_NODES);
    tf__meta in[2] = {a->m, b ? b->m : a->m}, want;
    const int arity = b ? 2 : 1;
    char why[256] = "";
    tf_status st;
    if (proto->kind == TF__OP_CONTRACT)
        st = tf__infer_contract(&proto->contract, in, &want, why, sizeof why);
    else if (proto->kind == TF__OP_FFT)
        st = tf__infer_fft(&proto->fft, &in[0], &want, why, sizeof why);
    else
        st = tf__infer_output(proto->kind, in, arity, proto->params, proto->n_params, proto->flags,
                              &want, why, sizeof why);
    ck_assert_msg(st == TF_OK, "the rules refused a %s node: %s", tf__op_name(proto->kind), why);
    if (out == NULL) out = tensor_new(&want);
    ck_assert_int_eq(out->m.dtype, want.dtype);
    ck_assert_int_eq(tf__meta_numel(&out->m), tf__meta_numel(&want));
    for (int side = 0; side < 2; side++) {
        tfd_op *op = &g->op[side][g->n];
        *op = *proto;
        op->n_inputs = arity;
        op->in[0] = view_of(a, side);
        if (b) op->in[1] = view_of(b, side);
        op->out = view_of(out, side);
    }
    g->n++;
    return out;
}

static tensor *node(graph_def *g, const tfd_op *proto, tensor *a, tensor *b) {
    return node_into(g, proto, a, b, NULL);
}

/* Runs the CPU's nodes one by one. */
static void cpu_run(const graph_def *g) {
    for (int i = 0; i < g->n; i++) {
        msg[0] = '\0';
        tf_status st = tfd_backend_run_op(CPU, streams[ON_CPU], &g->op[ON_CPU][i], msg, sizeof msg);
        ck_assert_msg(st == TF_OK, "cpu node %d (%s): %s: %s", i,
                      tf__op_name(g->op[ON_CPU][i].kind), tf_status_name(st), msg);
    }
}

/* Captures the GPU's nodes; the graph and its bytes. */
static void *capture(const graph_def *g, uint64_t *bytes) {
    void *graph = NULL;
    uint64_t b = 0;
    msg[0] = '\0';
    tf_status st = GPU->vt->graph_capture(GPU, g->op[ON_GPU], g->n, &graph, &b, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "graph_capture of %d nodes: %s: %s (seed %llu)", g->n,
                  tf_status_name(st), msg, (unsigned long long)g_seed);
    ck_assert_ptr_nonnull(graph);
    if (bytes) *bytes = b;
    return graph;
}

static void launch_on(void *graph, void *stream) {
    msg[0] = '\0';
    tf_status st = GPU->vt->graph_launch(GPU, stream, graph, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "graph_launch: %s: %s", tf_status_name(st), msg);
}

static void launch(void *graph) { launch_on(graph, streams[ON_GPU]); }

/* Runs one GPU operation on the client stream (the daemon's copies in and out of the slots). */
static void gpu_run(const tfd_op *op, void *stream) {
    msg[0] = '\0';
    tf_status st = tfd_backend_run_op(GPU, stream, op, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "cuda %s: %s: %s", tf__op_name(op->kind), tf_status_name(st), msg);
}

/*
 * A contraction node's prototype from "ij,jk->ik" and sizes "i3j4k5"; its
 * inputs' metadata into in[], the terms each output element sums into *terms.
 */
static tfd_op contract_op(const char *spec, const char *sizes, tf_dtype dt, int conj_a,
                          tf__meta in[2], int64_t *terms) {
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = 1;
    for (const char *p = sizes; *p;) {
        const int l = *p++ - 'a';
        size[l] = strtoll(p, (char **)&p, 10);
    }
    cc_case k;
    ck_assert_int_eq(cc_from_spec(spec, size, dt, conj_a, 0, &k), TF_OK);
    tfd_op o = proto_of(TF__OP_CONTRACT);
    o.contract = k.c;
    in[0] = k.in[0];
    in[1] = k.in[1];
    *terms = cc_terms(&k);
    return o;
}

/* An FFT node's prototype. */
static tfd_op fft_op(tf__fft_kind kind, int inverse, tf__fft_norm norm, int n_axes,
                     const int *axes, int64_t last_length) {
    tfd_op o = proto_of(TF__OP_FFT);
    o.fft.kind = kind;
    o.fft.inverse = inverse;
    o.fft.norm = norm;
    o.fft.n_axes = n_axes;
    for (int i = 0; i < n_axes; i++) o.fft.axes[i] = axes[i];
    o.fft.last_length = last_length;
    return o;
}

/* Free device memory now (cudaMemGetInfo on this thread's device). */
static size_t device_free_bytes(void) {
    size_t fr = 0, total = 0;
    ck_assert_int_eq(cudaSetDevice(gpu_ordinal), cudaSuccess);
    ck_assert_int_eq(cudaMemGetInfo(&fr, &total), cudaSuccess);
    return fr;
}

#define MIB ((size_t)1 << 20)

/* ---- a chain of elementwise operations ---- */

enum { CHAIN_NODES = 100, CHAIN_N = 4096, CHAIN_LAUNCHES = 1000, CHAIN_INPUTS = 8 };

/*
 * 100 elementwise nodes on 4096 f32 launched 1000 times, the input slot
 * rewritten (an OP_COPY on the client stream) before each launch from one
 * of 8 random inputs picked at random, the output copied out after it: each
 * result is that input's (the CPU's, one by one), never a stale one. The
 * cycle of ten keeps values in (0, 2]: exp(-|.|) bounds what grows.
 */
START_TEST(test_elementwise_chain) {
    const int64_t shape[1] = {CHAIN_N};
    const tf__meta m = meta_of(TF_F32, 1, shape);
    tensor *x = tensor_new(&m), *y = tensor_new(&m), *z = tensor_new(&m);
    free(fill_random(y, 0));
    free(fill_random(z, 1));
    graph_def *g = calloc(1, sizeof *g);
    ck_assert_ptr_nonnull(g);
    tensor *t = x;
    for (int i = 0; i < CHAIN_NODES; i++) {
        tfd_op o;
        tensor *b = NULL;
        switch (i % 10) {
        case 0: o = proto_of(TF__OP_ADD), b = y; break;
        case 1: o = proto_of(TF__OP_MUL), b = z; break;
        case 2: o = coef_op(TF__OP_AXPBY, 0.7, -0.2), b = y; break;
        case 3: o = coef_op(TF__OP_SCALE, 1.3, 0); break;
        case 4: o = proto_of(TF__OP_SUB), b = z; break;
        case 5: o = proto_of(TF__OP_ABS); break;
        case 6: o = proto_of(TF__OP_NEG); break;
        case 7: o = proto_of(TF__OP_EXP); break;
        case 8: o = proto_of(TF__OP_SQRT); break;
        default: o = proto_of(TF__OP_DIV), b = z; break;
        }
        t = node(g, &o, t, b);
    }
    tensor *last = t;
    uint64_t bytes = 1;
    void *graph = capture(g, &bytes);
    ck_assert_msg(bytes == 0, "an elementwise graph holds %llu bytes", (unsigned long long)bytes);

    /* The references: the CPU's result for each input. */
    void *inputs[CHAIN_INPUTS];
    float *want[CHAIN_INPUTS];
    for (int k = 0; k < CHAIN_INPUTS; k++) {
        inputs[k] = random_host(&m, 0);
        ck_assert_int_eq(CPU->vt->copy_to_device(CPU, streams[ON_CPU], x->data[ON_CPU], inputs[k],
                                                 x->bytes),
                         TF_OK);
        cpu_run(g);
        want[k] = download(last, ON_CPU, streams[ON_CPU]);
    }

    /* The daemon's run: a client tensor copied into the slot, the launch, the result copied out. */
    void *cs = streams[ON_GPU];
    void *in_client = NULL, *out_client = NULL;
    ck_assert_int_eq(GPU->vt->alloc(GPU, cs, x->bytes, &in_client), TF_OK);
    ck_assert_int_eq(GPU->vt->alloc(GPU, cs, x->bytes, &out_client), TF_OK);
    tfd_op copy_in = proto_of(TF__OP_COPY), copy_out = proto_of(TF__OP_COPY);
    copy_in.n_inputs = copy_out.n_inputs = 1;
    copy_in.in[0] = copy_in.out = view_of(x, ON_GPU);
    copy_in.in[0].data = in_client;
    copy_out.in[0] = copy_out.out = view_of(last, ON_GPU);
    copy_out.out.data = out_client;
    float *got = malloc(x->bytes);
    ck_assert_ptr_nonnull(got);
    int prev = -1;
    for (int l = 0; l < CHAIN_LAUNCHES; l++) {
        int k = (int)(rand_u64() % CHAIN_INPUTS);
        if (k == prev) k = (k + 1) % CHAIN_INPUTS; /* every launch sees a different input */
        prev = k;
        ck_assert_int_eq(GPU->vt->copy_to_device(GPU, cs, in_client, inputs[k], x->bytes), TF_OK);
        gpu_run(&copy_in, cs);
        launch(graph);
        gpu_run(&copy_out, cs);
        ck_assert_int_eq(GPU->vt->copy_to_host(GPU, cs, got, out_client, x->bytes), TF_OK);
        sync_on(GPU, cs);
        for (int i = 0; i < CHAIN_N; i++) {
            const double w = want[k][i], e = fabs((double)got[i] - w);
            if (!(e <= 1e-4 * fmax(fabs(w), 1.0)))
                ck_abort_msg("launch %d (input %d) element %d: cpu %.9g, cuda %.9g (seed %llu)", l,
                             k, i, w, (double)got[i], (unsigned long long)g_seed);
        }
    }
    free(got);
    GPU->vt->free(GPU, cs, in_client, x->bytes);
    GPU->vt->free(GPU, cs, out_client, x->bytes);
    GPU->vt->graph_destroy(GPU, graph);
    for (int k = 0; k < CHAIN_INPUTS; k++) {
        free(inputs[k]);
        free(want[k]);
    }
    free(g);
    expect_healthy("after the chain");
}
END_TEST

/* ---- matrix products ---- */

static const tf_dtype dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* No input is larger than this in modulus (2 * sqrt(2) for complex ones). */
#define INPUT_MAX 3.0L

/*
 * A graph of cuBLAS products: [96, 64] x [64, 48], a batched [4, 33, 17] x
 * [4, 17, 29], and a product of the first's result, launched twice with the
 * first input rewritten in between.
 */
START_TEST(test_matmul_graph) {
    const tf_dtype dt = dtypes[_i];
    const int64_t sa[2] = {96, 64}, sb[2] = {64, 48}, sf[2] = {48, 16};
    const int64_t sp[3] = {4, 33, 17}, sq[3] = {4, 17, 29};
    tf__meta ma = meta_of(dt, 2, sa), mb = meta_of(dt, 2, sb), mf = meta_of(dt, 2, sf);
    tf__meta mp = meta_of(dt, 3, sp), mq = meta_of(dt, 3, sq);
    tensor *a = tensor_new(&ma), *b = tensor_new(&mb), *f = tensor_new(&mf);
    tensor *p = tensor_new(&mp), *q = tensor_new(&mq);
    free(fill_random(b, 0));
    free(fill_random(f, 0));
    free(fill_random(p, 0));
    free(fill_random(q, 0));
    graph_def g = {0};
    const tfd_op mm = proto_of(TF__OP_MATMUL);
    tensor *c = node(&g, &mm, a, b);
    tensor *r = node(&g, &mm, p, q);
    tensor *e = node(&g, &mm, c, f);
    uint64_t bytes = 0;
    void *graph = capture(&g, &bytes);
    ck_assert_msg(bytes > 0, "a graph of GEMMs holds no workspace");
    const long double tol = tol_of(dt), x2 = INPUT_MAX * INPUT_MAX;
    for (int round = 0; round < 2; round++) {
        free(fill_random(a, 0));
        cpu_run(&g);
        launch(graph);
        expect_match("matmul", c, tol, 64 * x2);
        expect_match("batched matmul", r, tol, 17 * x2);
        expect_match("matmul of a product", e, 4 * tol, 48 * 64 * x2 * INPUT_MAX);
    }
    GPU->vt->graph_destroy(GPU, graph);
    expect_healthy("after the products");
}
END_TEST

/* ---- contractions ---- */

/*
 * Contractions whose plans permute and need a temporary (abcd,cdef->aebf:
 * the GEMM writes abef, a post pass reorders it), a batched one with
 * permuted operands, and one conjugated for complex dtypes; between
 * launches the client stream runs contractions of its own (its block cache
 * hands the same classes out and takes them back) and the backend is
 * trimmed, which must not touch the graph's scratch.
 */
START_TEST(test_contraction_graph) {
    const tf_dtype dt = dtypes[_i];
    static const struct {
        const char *spec, *sizes;
    } forms[] = {{"abcd,cdef->aebf", "a3b4c5d6e7f2"},
                 {"ibj,jbk->bki", "b3i17j13k11"},
                 {"abcd,cdef->aebf", "a5b5c5d5e5f5"}};
    graph_def g = {0}, side = {0};
    tensor *out[N_ELEMS(forms)], *side_out[N_ELEMS(forms)];
    long double scale[N_ELEMS(forms)];
    tensor *ins[N_ELEMS(forms)][2];
    for (size_t k = 0; k < N_ELEMS(forms); k++) {
        tf__meta in[2];
        int64_t terms = 0;
        const tfd_op o = contract_op(forms[k].spec, forms[k].sizes, dt, k == 2 && is_complex(dt),
                                     in, &terms);
        ins[k][0] = tensor_new(&in[0]);
        ins[k][1] = tensor_new(&in[1]);
        free(fill_random(ins[k][0], 0));
        free(fill_random(ins[k][1], 0));
        out[k] = node(&g, &o, ins[k][0], ins[k][1]);
        side_out[k] = node(&side, &o, ins[k][0], ins[k][1]);
        scale[k] = (long double)terms * INPUT_MAX * INPUT_MAX;
    }
    uint64_t bytes = 0;
    void *graph = capture(&g, &bytes);
    ck_assert_msg(bytes > 0, "a graph of contractions with temporaries holds no scratch");
    const long double tol = 4 * tol_of(dt);
    for (int round = 0; round < 3; round++) {
        for (size_t k = 0; k < N_ELEMS(forms); k++) free(fill_random(ins[k][0], 0));
        cpu_run(&g);
        cpu_run(&side);
        launch(graph);
        /* The same contractions one by one on the client stream, its scratch from its cache. */
        for (int i = 0; i < side.n; i++) gpu_run(&side.op[ON_GPU][i], streams[ON_GPU]);
        msg[0] = '\0';
        ck_assert_msg(GPU->vt->trim(GPU, msg, sizeof msg) == TF_OK, "trim: %s", msg);
        for (size_t k = 0; k < N_ELEMS(forms); k++) {
            expect_match(forms[k].spec, out[k], tol, scale[k]);
            expect_match(forms[k].spec, side_out[k], tol, scale[k]);
        }
    }
    GPU->vt->graph_destroy(GPU, graph);
    expect_healthy("after the contractions");
}
END_TEST

/* ---- FFTs ---- */

/*
 * The FFT nodes of one graph on complex dtype cdt and its real twin: C2C
 * over two axes, an inverse C2C (ortho), and two R2C whose half spectra
 * feed a C2R each (C2R needs a consistent half spectrum; its scratch is a
 * copy of its input, or the output of its C2C step).
 */
typedef struct fft_set {
    tensor *in[4], *out[6];
} fft_set;

static const char *const fft_names[6] = {"C2C over axes 0,1", "inverse C2C over axis 2 (ortho)",
                                         "R2C over axis 1", "C2R over axis 1 (forward norm)",
                                         "R2C over axes 0,1", "C2R over axes 0,1"};

static void fft_nodes(graph_def *g, tf_dtype cdt, fft_set *fs) {
    const tf_dtype rdt = cdt == TF_C64 ? TF_F32 : TF_F64;
    const int ax01[2] = {0, 1}, ax1[1] = {1}, ax2[1] = {2};
    const int64_t s_c2c[3] = {16, 24, 5}, s_r1[2] = {6, 32}, s_r2[2] = {8, 16};
    const tf__meta m_c2c = meta_of(cdt, 3, s_c2c), m_r1 = meta_of(rdt, 2, s_r1),
                   m_r2 = meta_of(rdt, 2, s_r2);
    const tfd_op c2c = fft_op(TF__FFT_C2C, 0, TF__FFT_NORM_BACKWARD, 2, ax01, 0);
    const tfd_op ic2c = fft_op(TF__FFT_C2C, 1, TF__FFT_NORM_ORTHO, 1, ax2, 0);
    const tfd_op r2c1 = fft_op(TF__FFT_R2C, 0, TF__FFT_NORM_BACKWARD, 1, ax1, 0);
    const tfd_op c2r1 = fft_op(TF__FFT_C2R, 1, TF__FFT_NORM_FORWARD, 1, ax1, 32);
    const tfd_op r2c2 = fft_op(TF__FFT_R2C, 0, TF__FFT_NORM_BACKWARD, 2, ax01, 0);
    const tfd_op c2r2 = fft_op(TF__FFT_C2R, 1, TF__FFT_NORM_BACKWARD, 2, ax01, 16);
    fs->in[0] = tensor_new(&m_c2c);
    fs->in[1] = tensor_new(&m_c2c);
    fs->in[2] = tensor_new(&m_r1);
    fs->in[3] = tensor_new(&m_r2);
    fs->out[0] = node(g, &c2c, fs->in[0], NULL);
    fs->out[1] = node(g, &ic2c, fs->in[1], NULL);
    fs->out[2] = node(g, &r2c1, fs->in[2], NULL);
    fs->out[3] = node(g, &c2r1, fs->out[2], NULL);
    fs->out[4] = node(g, &r2c2, fs->in[3], NULL);
    fs->out[5] = node(g, &c2r2, fs->out[4], NULL);
}

static void fft_fill(fft_set *fs) {
    for (size_t i = 0; i < N_ELEMS(fs->in); i++) free(fill_random(fs->in[i], 0));
}

/* A norm-wise bound: FFT errors scale with the whole transform, not with one element. */
static void fft_check(const fft_set *fs, tf_dtype cdt) {
    for (size_t i = 0; i < N_ELEMS(fs->out); i++)
        expect_match(fft_names[i], fs->out[i], 8 * tol_of(cdt), -1);
}

/* The FFT nodes in one graph, launched twice on new inputs. */
START_TEST(test_fft_graph) {
    const tf_dtype cdt = _i == 0 ? TF_C64 : TF_C128;
    graph_def g = {0};
    fft_set fs;
    fft_nodes(&g, cdt, &fs);
    uint64_t bytes = 0;
    void *graph = capture(&g, &bytes);
    ck_assert_msg(bytes > 0, "a graph with C2R holds no scratch");
    for (int round = 0; round < 2; round++) {
        fft_fill(&fs);
        cpu_run(&g);
        launch(graph);
        fft_check(&fs, cdt);
    }
    GPU->vt->graph_destroy(GPU, graph);
    expect_healthy("after the FFTs");
}
END_TEST

/*
 * The FFT graph outlives the plan cache: after its capture the same
 * transforms and others run on the client stream (filling the cache), the
 * cache is emptied by trim and the next FFT destroys the cached plans; the
 * graph, launched again on new inputs, still gives the right results.
 */
START_TEST(test_fft_plans_survive_trim) {
    const tf_dtype cdt = TF_C64;
    graph_def g = {0}, side = {0};
    fft_set fs, other;
    fft_nodes(&g, cdt, &fs);
    fft_nodes(&side, TF_C128, &other);
    void *graph = capture(&g, NULL);
    fft_fill(&fs);
    cpu_run(&g);
    launch(graph);
    fft_check(&fs, cdt);
    for (int round = 0; round < 3; round++) {
        fft_fill(&other);
        for (int i = 0; i < g.n; i++) gpu_run(&g.op[ON_GPU][i], streams[ON_GPU]);
        for (int i = 0; i < side.n; i++) gpu_run(&side.op[ON_GPU][i], streams[ON_GPU]);
        sync_on(GPU, streams[ON_GPU]);
        msg[0] = '\0';
        ck_assert_msg(GPU->vt->trim(GPU, msg, sizeof msg) == TF_OK, "trim: %s", msg);
        gpu_run(&side.op[ON_GPU][0], streams[ON_GPU]); /* destroys the plans trim let go of */
        sync_on(GPU, streams[ON_GPU]);
        fft_fill(&fs);
        cpu_run(&g);
        launch(graph);
        fft_check(&fs, cdt);
    }
    GPU->vt->graph_destroy(GPU, graph);
    /* The cache still serves the client stream afterwards. */
    cpu_run(&side);
    for (int i = 0; i < side.n; i++) gpu_run(&side.op[ON_GPU][i], streams[ON_GPU]);
    fft_check(&other, TF_C128);
    expect_healthy("after the trimmed plans");
}
END_TEST

/* ---- a reduction (memory nodes) ---- */

/* Sums over long rows split across blocks, whose partial results are allocated inside the op. */
START_TEST(test_reduction_graph) {
    const int64_t shape[2] = {4, 1 << 18};
    const tf__meta m = meta_of(TF_F64, 2, shape);
    tensor *x = tensor_new(&m);
    graph_def g = {0};
    tfd_op sum = proto_of(TF__OP_REDUCE_SUM);
    sum.n_params = 1;
    sum.params[0] = 1;
    tensor *s = node(&g, &sum, x, NULL);
    tfd_op all = proto_of(TF__OP_REDUCE_SUM);
    tensor *total = node(&g, &all, x, NULL);
    uint64_t bytes = 0;
    void *graph = capture(&g, &bytes);
    printf("test-cuda-graph: a graph of two long sums holds %llu bytes\n",
           (unsigned long long)bytes);
    fflush(stdout);
    for (int round = 0; round < 3; round++) {
        free(fill_random(x, 0));
        cpu_run(&g);
        launch(graph);
        expect_match("sum over axis 1", s, 1e-12L, (long double)shape[1] * INPUT_MAX);
        expect_match("sum of all", total, 1e-12L, (long double)(4 * shape[1]) * INPUT_MAX);
    }
    GPU->vt->graph_destroy(GPU, graph);
    expect_healthy("after the sums");
}
END_TEST

/* ---- two streams ---- */

enum { ACC_N = 1 << 16, ACC_LAUNCHES = 400 };

/*
 * A stateful graph (acc = acc + inc, through a temporary) launched 400
 * times alternately on two streams without a wait: CUDA orders the launches
 * of one graph, so no update is lost and the sum is exact (multiples of
 * 1/4 in f64).
 */
START_TEST(test_two_streams) {
    const int64_t shape[1] = {ACC_N};
    const tf__meta m = meta_of(TF_F64, 1, shape);
    tensor *acc = tensor_new(&m), *inc = tensor_new(&m);
    double *a0 = malloc(sizeof(double) * ACC_N), *d = malloc(sizeof(double) * ACC_N);
    ck_assert(a0 && d);
    for (int i = 0; i < ACC_N; i++) {
        a0[i] = (double)(i % 1000);
        d[i] = 0.25 * (double)(1 + (int)(rand_u64() % 7));
    }
    fill(acc, a0, streams[ON_GPU]);
    fill(inc, d, streams[ON_GPU]);
    graph_def g = {0};
    const tfd_op add = proto_of(TF__OP_ADD), copy = proto_of(TF__OP_COPY);
    tensor *t = node(&g, &add, acc, inc);
    node_into(&g, &copy, t, NULL, acc);
    void *graph = capture(&g, NULL);
    void *two[2] = {streams[ON_GPU], new_stream()};
    for (int l = 0; l < ACC_LAUNCHES; l++) launch_on(graph, two[l & 1]);
    sync_on(GPU, two[0]);
    sync_on(GPU, two[1]);
    double *got = download(acc, ON_GPU, two[1]);
    for (int i = 0; i < ACC_N; i++) {
        const double want = a0[i] + ACC_LAUNCHES * d[i];
        if (got[i] != want)
            ck_abort_msg("element %d after %d launches on two streams: %.17g, want %.17g", i,
                         ACC_LAUNCHES, got[i], want);
    }
    free(got);
    free(a0);
    free(d);
    GPU->vt->graph_destroy(GPU, graph);
    expect_healthy("after two streams");
}
END_TEST

/* ---- memory ---- */

/* A graph of every kind that owns something: GEMMs, a contraction's temporary, FFT plans, C2R. */
typedef struct mixed {
    graph_def g;
    fft_set fs;
    tensor *a, *b, *c, *x, *y, *t;
} mixed;

static void mixed_build(mixed *mx) {
    memset(mx, 0, sizeof *mx);
    const int64_t sa[2] = {96, 64}, sb[2] = {64, 48};
    const tf__meta ma = meta_of(TF_F32, 2, sa), mb = meta_of(TF_F32, 2, sb);
    mx->a = tensor_new(&ma);
    mx->b = tensor_new(&mb);
    const tfd_op mm = proto_of(TF__OP_MATMUL);
    mx->c = node(&mx->g, &mm, mx->a, mx->b);
    tf__meta in[2];
    int64_t terms = 0;
    const tfd_op k = contract_op("abcd,cdef->aebf", "a3b4c5d6e7f2", TF_F32, 0, in, &terms);
    mx->x = tensor_new(&in[0]);
    mx->y = tensor_new(&in[1]);
    mx->t = node(&mx->g, &k, mx->x, mx->y);
    fft_nodes(&mx->g, TF_C64, &mx->fs);
}

static void mixed_fill(mixed *mx) {
    free(fill_random(mx->a, 0));
    free(fill_random(mx->b, 0));
    free(fill_random(mx->x, 0));
    free(fill_random(mx->y, 0));
    fft_fill(&mx->fs);
}

static void mixed_check(mixed *mx) {
    expect_match("matmul", mx->c, tol_of(TF_F32), 64 * INPUT_MAX * INPUT_MAX);
    expect_match("abcd,cdef->aebf", mx->t, 4 * tol_of(TF_F32), 30 * INPUT_MAX * INPUT_MAX);
    fft_check(&mx->fs, TF_C64);
}

/*
 * graph_destroy gives back what the graph held: device memory drops by
 * about what graph_capture reported while the graph lives, and is back
 * after destroy, also after 10 more graphs made, launched and destroyed.
 */
START_TEST(test_destroy_frees_memory) {
    mixed *mx = malloc(sizeof *mx);
    ck_assert_ptr_nonnull(mx);
    mixed_build(mx);
    mixed_fill(mx);
    cpu_run(&mx->g);
    /* A first graph makes the capture stream and loads every kernel. */
    void *graph = capture(&mx->g, NULL);
    launch(graph);
    mixed_check(mx);
    GPU->vt->graph_destroy(GPU, graph);
    sync_on(GPU, streams[ON_GPU]);

    const size_t before = device_free_bytes();
    uint64_t bytes = 0;
    graph = capture(&mx->g, &bytes);
    const size_t held = device_free_bytes();
    /* Its GEMMs are small: the small cuBLAS workspace (64 KiB, cuda/graph.c) at least. */
    ck_assert_msg(bytes >= 64 * 1024, "the graph reports %llu bytes (a cuBLAS workspace at least)",
                  (unsigned long long)bytes);
    ck_assert_msg(before >= held && before - held + 2 * MIB >= bytes,
                  "the graph reports %llu bytes, the device lost %lld", (unsigned long long)bytes,
                  (long long)before - (long long)held);
    launch(graph);
    mixed_check(mx);
    GPU->vt->graph_destroy(GPU, graph);
    const size_t after = device_free_bytes();
    ck_assert_msg(after + 4 * MIB >= before, "destroy left %lld bytes held (%llu reported)",
                  (long long)before - (long long)after, (unsigned long long)bytes);
    for (int i = 0; i < 10; i++) {
        graph = capture(&mx->g, NULL);
        launch(graph);
        sync_on(GPU, streams[ON_GPU]);
        GPU->vt->graph_destroy(GPU, graph);
    }
    const size_t later = device_free_bytes();
    ck_assert_msg(later + 4 * MIB >= before, "10 graphs later %lld bytes are held",
                  (long long)before - (long long)later);
    printf("test-cuda-graph: a mixed graph reports %llu bytes; the device lost %lld while it "
           "lived, %lld after destroy, %lld after 10 more\n",
           (unsigned long long)bytes, (long long)before - (long long)held,
           (long long)before - (long long)after, (long long)before - (long long)later);
    fflush(stdout);
    free(mx);
    expect_healthy("after the memory checks");
}
END_TEST

/* ---- failed captures ---- */

/* A valid add of two fresh tensors, as the last node of a graph that is then spoiled. */
static void add_tail(graph_def *g) {
    const int64_t shape[1] = {1000};
    const tf__meta m = meta_of(TF_F32, 1, shape);
    tensor *a = tensor_new(&m), *b = tensor_new(&m);
    free(fill_random(a, 0));
    free(fill_random(b, 0));
    const tfd_op add = proto_of(TF__OP_ADD);
    node(g, &add, a, b);
}

/* Captures and expects status `want`, no graph, a reason, and a healthy device. */
static void expect_refused(const graph_def *g, tf_status want, const char *what) {
    void *graph = &graph;
    uint64_t bytes = 7;
    msg[0] = '\0';
    tf_status st = GPU->vt->graph_capture(GPU, g->op[ON_GPU], g->n, &graph, &bytes, msg,
                                          sizeof msg);
    ck_assert_msg(st == want, "%s: graph_capture gave %s (%s), want %s", what, tf_status_name(st),
                  msg, tf_status_name(want));
    ck_assert_msg(graph == NULL && bytes == 0, "%s: a failed capture handed back a graph", what);
    ck_assert_msg(msg[0] != '\0', "%s: refused without a reason", what);
    expect_healthy(what);
}

/* After a failed capture: operations still run on the client stream, and the next capture works. */
static void expect_backend_works(mixed *mx) {
    mixed_fill(mx);
    cpu_run(&mx->g);
    for (int i = 0; i < mx->g.n; i++) gpu_run(&mx->g.op[ON_GPU][i], streams[ON_GPU]);
    mixed_check(mx);
    void *graph = capture(&mx->g, NULL);
    mixed_fill(mx);
    cpu_run(&mx->g);
    launch(graph);
    mixed_check(mx);
    GPU->vt->graph_destroy(GPU, graph);
}

/*
 * A node that run_op refuses (input dtype 99; a kind no family serves)
 * after nodes that took scratch, private plans and a workspace: a typed
 * status naming the node, nothing kept (device memory unchanged over many
 * tries), and the backend still runs and captures. An empty graph is fine.
 */
START_TEST(test_capture_refused) {
    mixed *mx = malloc(sizeof *mx);
    ck_assert_ptr_nonnull(mx);
    mixed_build(mx);
    expect_backend_works(mx); /* also makes the capture stream and loads every kernel */
    sync_on(GPU, streams[ON_GPU]);

    graph_def *bad = malloc(sizeof *bad);
    ck_assert_ptr_nonnull(bad);
    *bad = mx->g;
    add_tail(bad);
    tfd_op *tail = &bad->op[ON_GPU][bad->n - 1];
    const tfd_op good_tail = *tail;
    const size_t before = device_free_bytes();
    for (int i = 0; i < 8; i++) {
        tail->in[0].dtype = (tf_dtype)99;
        expect_refused(bad, TF_ERR_DTYPE, "an input of dtype 99");
        ck_assert_msg(strstr(msg, "node") != NULL, "the reason names no node: %s", msg);
        *tail = good_tail;
        tail->kind = TF__OP_FREE;
        expect_refused(bad, TF_ERR_UNSUPPORTED, "a kind no family serves");
        *tail = good_tail;
    }
    const size_t after = device_free_bytes();
    ck_assert_msg(after + 4 * MIB >= before, "16 failed captures kept %lld bytes",
                  (long long)before - (long long)after);
    expect_backend_works(mx);

    /* No nodes: an empty graph, launched and destroyed. */
    void *graph = NULL;
    uint64_t bytes = 1;
    msg[0] = '\0';
    ck_assert_msg(GPU->vt->graph_capture(GPU, NULL, 0, &graph, &bytes, msg, sizeof msg) == TF_OK,
                  "an empty capture: %s", msg);
    ck_assert_uint_eq(bytes, 0);
    launch(graph);
    sync_on(GPU, streams[ON_GPU]);
    GPU->vt->graph_destroy(GPU, graph);
    free(bad);
    free(mx);
    expect_healthy("after the refused captures");
}
END_TEST

/*
 * OP_TEST_FAULT waits for its stream, which a capture cannot record: the
 * capture is invalidated, the faulting kernel never runs, the status is
 * TF_ERR_UNSUPPORTED (the daemon then runs the nodes one by one), the
 * context stays healthy and the capture stream serves the next capture.
 */
START_TEST(test_capture_invalidated) {
    mixed *mx = malloc(sizeof *mx);
    ck_assert_ptr_nonnull(mx);
    mixed_build(mx);
    graph_def *bad = malloc(sizeof *bad);
    ck_assert_ptr_nonnull(bad);
    *bad = mx->g;
    add_tail(bad);
    tfd_op *tail = &bad->op[ON_GPU][bad->n - 1];
    tail->kind = TF__OP_TEST_FAULT;
    tail->n_inputs = 1;
    add_tail(bad); /* a node after the one that cannot be captured */
    for (int i = 0; i < 3; i++) {
        expect_refused(bad, TF_ERR_UNSUPPORTED, "a node that synchronizes");
        printf("test-cuda-graph: the invalidated capture as reported: %s\n", msg);
        fflush(stdout);
        expect_backend_works(mx);
    }
    free(bad);
    free(mx);
    expect_healthy("after the invalidated captures");
}
END_TEST

/* ---- captures while the daemon's other threads work ---- */

/* Streams the other thread makes and gives back at once: more than the backend pools. */
#define CHURN_STREAMS 40

/*
 * What the other thread does, as the daemon's loop thread and workers do:
 * unordered allocs and frees, host memory page-locked and released,
 * streams made and given back beyond the pool (cublasDestroy), and FFTs on
 * its stream with trims in between (so cached plans are destroyed).
 */
typedef struct busy {
    atomic_int stop;
    void *stream;
    graph_def *fft; /* FFT nodes of its own tensors */
    void *host;     /* page-aligned, HOST_BYTES */
    int rounds;
    tf_status st;
    char why[256];
} busy;

#define HOST_BYTES ((size_t)1 << 20)

static void *busy_thread(void *arg) {
    busy *b = arg;
    while (!atomic_load(&b->stop) && b->st == TF_OK) {
        void *p = NULL;
        b->st = GPU->vt->alloc(GPU, NULL, 3 * MIB, &p);
        if (b->st != TF_OK) {
            snprintf(b->why, sizeof b->why, "unordered alloc failed");
            break;
        }
        GPU->vt->free(GPU, NULL, p, 3 * MIB);
        b->st = GPU->vt->host_register(GPU, b->host, HOST_BYTES, b->why, sizeof b->why);
        if (b->st != TF_OK) break;
        GPU->vt->host_unregister(GPU, b->host);
        if ((b->rounds & 7) == 0) {
            void *churn[CHURN_STREAMS] = {0};
            for (int i = 0; i < CHURN_STREAMS && b->st == TF_OK; i++)
                b->st = GPU->vt->stream_create(GPU, 0, &churn[i]);
            for (int i = 0; i < CHURN_STREAMS; i++)
                if (churn[i]) GPU->vt->stream_destroy(GPU, churn[i]);
            if (b->st != TF_OK) {
                snprintf(b->why, sizeof b->why, "stream_create failed");
                break;
            }
        }
        for (int i = 0; i < b->fft->n && b->st == TF_OK; i++)
            b->st = tfd_backend_run_op(GPU, b->stream, &b->fft->op[ON_GPU][i], b->why,
                                       sizeof b->why);
        if ((b->rounds & 3) == 3 && b->st == TF_OK)
            b->st = GPU->vt->trim(GPU, b->why, sizeof b->why);
        void *ev = NULL;
        if (b->st == TF_OK)
            b->st = GPU->vt->event_record(GPU, b->stream, &ev, b->why, sizeof b->why);
        if (b->st == TF_OK) b->st = GPU->vt->event_wait(GPU, ev, b->why, sizeof b->why);
        GPU->vt->event_destroy(GPU, ev);
        b->rounds++;
    }
    return NULL;
}

/*
 * 20 graphs captured, launched, checked and destroyed while another thread
 * allocates and frees without a stream (cudaMallocFromPoolAsync,
 * cudaStreamSynchronize of the legacy stream, cudaFree of pool memory),
 * page-locks host memory, makes and destroys streams, runs FFTs, trims and
 * waits for events: the relaxed capture on the private stream is neither
 * disturbed by that work nor disturbs it.
 */
START_TEST(test_capture_beside_other_work) {
    mixed *mx = malloc(sizeof *mx);
    graph_def *other = calloc(1, sizeof *other);
    ck_assert(mx && other);
    mixed_build(mx);
    fft_set ofs;
    fft_nodes(other, TF_C128, &ofs);
    fft_fill(&ofs);
    busy b = {.stream = new_stream(), .fft = other, .st = TF_OK};
    b.host = aligned_alloc(4096, HOST_BYTES);
    ck_assert_ptr_nonnull(b.host);
    memset(b.host, 0, HOST_BYTES);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, busy_thread, &b), 0);
    for (int i = 0; i < 20; i++) {
        void *graph = capture(&mx->g, NULL);
        mixed_fill(mx);
        cpu_run(&mx->g);
        launch(graph);
        mixed_check(mx);
        GPU->vt->graph_destroy(GPU, graph);
    }
    atomic_store(&b.stop, 1);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(b.st == TF_OK, "the other thread, round %d: %s: %s", b.rounds,
                  tf_status_name(b.st), b.why);
    printf("test-cuda-graph: 20 captures beside %d rounds of other work\n", b.rounds);
    fflush(stdout);
    free(b.host);
    free(other);
    free(mx);
    expect_healthy("after captures beside other work");
}
END_TEST

static Suite *cuda_graph_suite(int forking) {
    Suite *s = suite_create("cuda-graph");
    TCase *tc = tcase_create("device");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_elementwise_chain);
    tcase_add_loop_test(tc, test_matmul_graph, 0, 4);
    tcase_add_loop_test(tc, test_contraction_graph, 0, 4);
    tcase_add_loop_test(tc, test_fft_graph, 0, 2);
    tcase_add_test(tc, test_fft_plans_survive_trim);
    tcase_add_test(tc, test_reduction_graph);
    tcase_add_test(tc, test_two_streams);
    tcase_add_test(tc, test_destroy_frees_memory);
    tcase_add_test(tc, test_capture_refused);
    tcase_add_test(tc, test_capture_beside_other_work);
    suite_add_tcase(s, tc);
    if (forking) { /* a faulting kernel is in it: alone in its process, in case it ever ran */
        TCase *fault = tcase_create("invalidated");
        tcase_add_checked_fixture(fault, setup, teardown);
        tcase_set_timeout(fault, 120);
        tcase_add_test(fault, test_capture_invalidated);
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
    printf("test-cuda-graph: built without the CUDA backend, nothing to test\n");
    return 0;
#else
    const char *device = getenv("TENFERRO_TEST_DEVICE");
    if (device == NULL || strncmp(device, "cuda", 4) != 0 || access("/dev/nvidiactl", F_OK) != 0) {
        printf("test-cuda-graph: skipped: no CUDA device "
               "(set TENFERRO_TEST_DEVICE=cuda:0 on a GPU machine)\n");
        return 0;
    }
    gpu_ordinal = parse_ordinal(device);
    if (gpu_ordinal < 0) {
        fprintf(stderr, "test-cuda-graph: TENFERRO_TEST_DEVICE=%s is neither cuda nor cuda:N\n",
                device);
        return EXIT_FAILURE;
    }
    const char *seed = getenv("TFCK_SEED");
    g_seed = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    const char *fork_mode = getenv("CK_FORK");
    const int forking = fork_mode == NULL || strcmp(fork_mode, "no") != 0;
    printf("test-cuda-graph: cuda:%d, seed %llu (replay with TFCK_SEED=%llu)%s\n", gpu_ordinal,
           (unsigned long long)g_seed, (unsigned long long)g_seed,
           forking ? "" : "; CK_FORK=no leaves out the invalidated capture");
    fflush(stdout);
    SRunner *sr = srunner_create(cuda_graph_suite(forking));
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
