/*
 * probe-layers (GPU, diagnostic): the contractions and FFTs of bench-einsum
 * and bench-fft timed at two layers inside one process, so a gap of the
 * daemon's figure can be placed:
 *   lib      cuBLAS / cuFFT called as the benchmarks' baselines call them
 *   lib-adv  (FFT) cufftMakePlanMany64 with the daemon's advanced layout and
 *            a work area of ours, preallocated outputs
 *   be-pre   the daemon's CUDA backend in-process (tfd_backend_run_op),
 *            outputs preallocated
 *   be-alloc the same with each output taken from the backend's allocator
 *            per operation (and given back as the benchmarks' loops do)
 * Each: REPS operations then one event wait; median of SAMPLES wall times,
 * variants alternating. Prints "PROBE <line> <variant> <us per op>".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cufft.h>
#include <cuda_runtime_api.h>

#include "bench/bench-common.h"
#include "bench/gpu/gpu-common.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/fft-layout.h"
#include "tests/contract-cases.h"

#define SAMPLES 9
#define NVAR 5

static const char *const NAME = "probe-layers";
static tfd_backend be;
static void *stream;
static cudaStream_t raw_stream;
static cublasHandle_t blas;

static void ok(tf_status st, const char *what, const char *msg) {
    if (st != TF_OK) bench_die(NAME, "%s: %s: %s", what, tf_status_name(st), msg ? msg : "");
}

static void be_wait(void) {
    char msg[256] = "";
    void *ev = NULL;
    ok(be.vt->event_record(&be, stream, &ev, msg, sizeof msg), "event_record", msg);
    ok(be.vt->event_wait(&be, ev, msg, sizeof msg), "event_wait", msg);
    be.vt->event_destroy(&be, ev);
}

static void view_of(tfd_tensor_view *v, const tf__meta *m) {
    memset(v, 0, sizeof *v);
    v->dtype = m->dtype;
    v->rank = m->rank;
    v->numel = 1;
    for (int a = 0; a < m->rank; a++) {
        v->shape[a] = m->shape[a];
        v->numel *= m->shape[a];
    }
}

static void *be_alloc(size_t bytes) {
    void *p = NULL;
    ok(be.vt->alloc(&be, stream, bytes, &p), "alloc", NULL);
    return p;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One line: an op template, how many per wait, whether outputs are dropped at once. */
typedef struct line {
    const char *name;
    tfd_op op;
    size_t out_bytes;
    int reps, drop_each;
    void **outs; /* reps preallocated outputs */
    /* raw */
    int is_fft;
    cufftHandle plan, plan_adv;
    void *work_adv;
    int m, n, k, batch;
} line;

static double alloc_ns_total;
static long alloc_calls;

/* alloc_each: 0 preallocated, 1 per op just before it, 2 all before the first launch. */
static double run_be(line *l, int alloc_each) {
    char msg[512] = "";
    tfd_op op = l->op;
    void *prev = NULL;
    void **mine = calloc((size_t)l->reps, sizeof *mine);
    const uint64_t t0 = bench_now_ns();
    if (alloc_each == 2) {
        for (int r = 0; r < l->reps; r++) {
            const uint64_t a0 = bench_now_ns();
            mine[r] = be_alloc(l->out_bytes);
            alloc_ns_total += (double)(bench_now_ns() - a0);
            alloc_calls++;
        }
    }
    for (int r = 0; r < l->reps; r++) {
        if (alloc_each == 1) {
            const uint64_t a0 = bench_now_ns();
            mine[r] = be_alloc(l->out_bytes);
            alloc_ns_total += (double)(bench_now_ns() - a0);
            alloc_calls++;
        }
        op.out.data = alloc_each ? mine[r] : l->outs[r];
        ok(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), l->name, msg);
        if (alloc_each == 1 && l->drop_each) {
            if (prev) be.vt->free(&be, stream, prev, l->out_bytes);
            prev = mine[r];
            mine[r] = NULL;
        }
    }
    be_wait();
    const uint64_t t1 = bench_now_ns();
    if (prev) be.vt->free(&be, stream, prev, l->out_bytes);
    for (int r = 0; r < l->reps; r++)
        if (mine[r]) be.vt->free(&be, stream, mine[r], l->out_bytes);
    free(mine);
    be_wait();
    return (double)(t1 - t0) / 1e3 / l->reps;
}

static double run_lib(line *l, int adv) {
    const uint64_t t0 = bench_now_ns();
    for (int r = 0; r < l->reps; r++) {
        void *o = l->outs[r];
        if (l->is_fft) {
            cufftHandle h = adv ? l->plan_adv : l->plan;
            cufftResult e;
            if (l->op.fft.kind == TF__FFT_R2C)
                e = cufftExecR2C(h, l->op.in[0].data, o);
            else
                e = cufftExecC2C(h, l->op.in[0].data, o, CUFFT_FORWARD);
            if (e != CUFFT_SUCCESS) bench_die(NAME, "cufftExec %d", (int)e);
        } else if (l->op.out.dtype == TF_C128) {
            const cuDoubleComplex one = {1, 0}, zero = {0, 0};
            if (cublasZgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, l->n, l->m, l->k, &one,
                            l->op.in[1].data, l->n, l->op.in[0].data, l->k, &zero, o, l->n))
                bench_die(NAME, "zgemm");
        } else if (l->batch > 1) {
            const double one = 1, zero = 0;
            if (cublasDgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, l->n, l->m, l->k, &one,
                                          l->op.in[1].data, l->n, (long long)l->k * l->n,
                                          l->op.in[0].data, l->k, (long long)l->m * l->k, &zero, o,
                                          l->n, (long long)l->m * l->n, l->batch))
                bench_die(NAME, "dgemm batched");
        } else {
            const double one = 1, zero = 0;
            if (cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, l->n, l->m, l->k, &one,
                            l->op.in[1].data, l->n, l->op.in[0].data, l->k, &zero, o, l->n))
                bench_die(NAME, "dgemm");
        }
    }
    GPU_CUDA(NAME, cudaStreamSynchronize(raw_stream));
    const uint64_t t1 = bench_now_ns();
    return (double)(t1 - t0) / 1e3 / l->reps;
}

static void measure(line *l) {
    double t[NVAR][SAMPLES], a1[SAMPLES], a2[SAMPLES];
    for (int w = 0; w < 2; w++) {
        run_lib(l, 0);
        if (l->is_fft) run_lib(l, 1);
        run_be(l, 0);
        run_be(l, 1);
        run_be(l, 2);
    }
    for (int s = 0; s < SAMPLES; s++) {
        t[0][s] = run_lib(l, 0);
        t[1][s] = l->is_fft ? run_lib(l, 1) : 0;
        t[2][s] = run_be(l, 0);
        alloc_ns_total = 0, alloc_calls = 0;
        t[3][s] = run_be(l, 1);
        a1[s] = alloc_ns_total / 1e3 / alloc_calls;
        alloc_ns_total = 0, alloc_calls = 0;
        t[4][s] = run_be(l, 2);
        a2[s] = alloc_ns_total / 1e3 / alloc_calls;
    }
    qsort(a1, SAMPLES, sizeof(double), cmp);
    qsort(a2, SAMPLES, sizeof(double), cmp);
    printf("# %s: host alloc per call: interleaved %.2f us, all ahead %.2f us\n", l->name,
           a1[SAMPLES / 2], a2[SAMPLES / 2]);
    static const char *const names[NVAR] = {"lib", "lib-adv", "be-pre", "be-alloc", "be-ahead"};
    for (int v = 0; v < NVAR; v++) {
        if (v == 1 && !l->is_fft) continue;
        qsort(t[v], SAMPLES, sizeof(double), cmp);
        printf("PROBE %s %s %.2f us/op (min %.2f max %.2f)\n", l->name, names[v], t[v][SAMPLES / 2],
               t[v][0], t[v][SAMPLES - 1]);
    }
    fflush(stdout);
}

static void fill_input(tfd_tensor_view *v) {
    const size_t bytes = (size_t)v->numel * tf_dtype_size(v->dtype);
    void *h = malloc(bytes);
    gpu_fill(v->dtype, h, (size_t)v->numel, 0x5eedu + (uint64_t)bytes);
    v->data = be_alloc(bytes);
    ok(be.vt->copy_to_device(&be, stream, v->data, h, bytes), "copy_to_device", NULL);
    be_wait();
    free(h);
}

static void prealloc(line *l) {
    l->outs = calloc((size_t)l->reps, sizeof *l->outs);
    for (int r = 0; r < l->reps; r++) l->outs[r] = be_alloc(l->out_bytes);
    be_wait();
}

static void contraction(line *l, const char *name, const char *spec, int64_t dim, int64_t bdim,
                        tf_dtype dt, int reps, int drop, int m, int n, int k, int batch) {
    int64_t size[26];
    for (int i = 0; i < 26; i++) size[i] = dim;
    if (bdim) size['b' - 'a'] = bdim;
    cc_case c;
    if (cc_from_spec(spec, size, dt, 0, 0, &c) != TF_OK) bench_die(NAME, "spec %s", spec);
    memset(l, 0, sizeof *l);
    l->name = name;
    l->op.kind = TF__OP_CONTRACT;
    l->op.n_inputs = 2;
    l->op.contract = c.c;
    for (int i = 0; i < 2; i++) {
        view_of(&l->op.in[i], &c.in[i]);
        fill_input(&l->op.in[i]);
    }
    view_of(&l->op.out, &c.out);
    l->out_bytes = (size_t)l->op.out.numel * tf_dtype_size(dt);
    l->reps = reps;
    l->drop_each = drop;
    l->m = m, l->n = n, l->k = k, l->batch = batch;
    prealloc(l);
}

static void fft_line(line *l, const char *name, int real, int rank, const int64_t *shape,
                     int n_axes, const int *axes, int reps) {
    memset(l, 0, sizeof *l);
    l->name = name;
    l->is_fft = 1;
    l->reps = reps;
    tfd_op *op = &l->op;
    op->kind = TF__OP_FFT;
    op->n_inputs = 1;
    op->fft.kind = real ? TF__FFT_R2C : TF__FFT_C2C;
    op->fft.norm = TF__FFT_NORM_BACKWARD;
    op->fft.n_axes = n_axes;
    for (int i = 0; i < n_axes; i++) op->fft.axes[i] = axes[i];
    tf__meta in;
    memset(&in, 0, sizeof in);
    in.dtype = real ? TF_F32 : (rank == 2 && !real && shape[1] == 4096 ? TF_C64 : TF_C128);
    in.rank = rank;
    for (int a = 0; a < rank; a++) in.shape[a] = shape[a];
    view_of(&op->in[0], &in);
    fill_input(&op->in[0]);
    op->out = op->in[0];
    op->out.data = NULL;
    if (real) {
        op->out.dtype = TF_C64;
        op->out.shape[rank - 1] = shape[rank - 1] / 2 + 1;
        op->out.numel = op->in[0].numel / shape[rank - 1] * op->out.shape[rank - 1];
    }
    l->out_bytes = (size_t)op->out.numel * tf_dtype_size(op->out.dtype);
    prealloc(l);
    /* the baselines' plans */
    const cufftType type = real ? CUFFT_R2C : in.dtype == TF_C64 ? CUFFT_C2C : CUFFT_Z2Z;
    int ok_ = 0;
    if (rank == 2 && n_axes == 2)
        ok_ = cufftPlan2d(&l->plan, (int)shape[0], (int)shape[1], type) == CUFFT_SUCCESS;
    else if (rank == 2)
        ok_ = cufftPlan1d(&l->plan, (int)shape[1], type, (int)shape[0]) == CUFFT_SUCCESS;
    else
        ok_ = cufftPlan1d(&l->plan, (int)shape[0], type, 1) == CUFFT_SUCCESS;
    if (!ok_) bench_die(NAME, "cufftPlan");
    cufftSetStream(l->plan, raw_stream);
    /* the daemon's layout, planned here */
    tfd_fft_layout lay;
    tfd_fft_layout_of(&op->fft, &in, &lay);
    if (lay.n_steps != 1) bench_die(NAME, "%s: %d steps", name, lay.n_steps);
    const tfd_fft_step *s = &lay.steps[0];
    long long nn[3], ie[3], oe[3];
    printf("# %s layout: rank %d n", name, s->rank);
    for (int j = 0; j < s->rank; j++) {
        nn[j] = s->n[j], ie[j] = s->inembed[j], oe[j] = s->onembed[j];
        printf(" %lld(in %lld out %lld)", nn[j], ie[j], oe[j]);
    }
    printf(" istride %lld idist %lld ostride %lld odist %lld batch %lld loops %d\n",
           (long long)s->istride, (long long)s->idist, (long long)s->ostride, (long long)s->odist,
           (long long)s->batch, s->n_loops);
    size_t work = 0;
    cufftCreate(&l->plan_adv);
    cufftSetAutoAllocation(l->plan_adv, 0);
    if (cufftMakePlanMany64(l->plan_adv, s->rank, nn, ie, s->istride, s->idist, oe, s->ostride,
                            s->odist, type, s->batch, &work) != CUFFT_SUCCESS)
        bench_die(NAME, "cufftMakePlanMany64");
    size_t base_work = 0;
    cufftGetSize(l->plan, &base_work);
    printf("# %s work area: basic %zu, advanced %zu\n", name, base_work, work);
    if (work) GPU_CUDA(NAME, cudaMalloc(&l->work_adv, work));
    cufftSetWorkArea(l->plan_adv, l->work_adv);
    cufftSetStream(l->plan_adv, raw_stream);
}

int main(void) {
    char msg[256] = "";
    be.vt = &tfd_cuda_backend;
    ok(be.vt->open(&be, 0, msg, sizeof msg), "open", msg);
    ok(be.vt->stream_create(&be, 0, &stream), "stream_create", NULL);
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
    if (cublasCreate(&blas) || cublasSetStream(blas, raw_stream)) bench_die(NAME, "cublas");
    printf("# device: %s\n", be.description);
    static line l;
    contraction(&l, "einsum_tn_f64", "abcd,cdef->aebf", 48, 0, TF_F64, 20, 1, 2304, 2304, 2304, 1);
    measure(&l);
    contraction(&l, "einsum_perm_c128", "acbd,dcef->abef", 48, 0, TF_C128, 6, 1, 2304, 2304, 2304, 1);
    measure(&l);
    contraction(&l, "einsum_batched_f64", "bij,bjk->bik", 128, 256, TF_F64, 200, 1, 128, 128, 128, 256);
    measure(&l);
    const int64_t s2[2] = {4096, 4096}, sb[2] = {64, 1 << 20}, s1[1] = {1 << 24};
    const int a2[2] = {0, 1}, a1[1] = {1}, a0[1] = {0};
    fft_line(&l, "fft2_c64_4096", 0, 2, s2, 2, a2, 8);
    measure(&l);
    fft_line(&l, "fft_c128_batch", 0, 2, sb, 1, a1, 2);
    measure(&l);
    fft_line(&l, "rfft_f32_16m", 1, 1, s1, 1, a0, 32);
    measure(&l);
    return 0;
}
