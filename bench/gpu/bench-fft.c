/*
 * bench-fft: FFTs through the daemon on the GPU against cuFFT in this
 * process, and a new process's first FFT against a new process that starts
 * CUDA and cuFFT itself.
 *
 *   fft2_c64_4096   one 2-D transform of a 4096 x 4096 c64 tensor
 *   fft_c128_batch  64 transforms of 2^20 c128 elements (the rows of a 64 x 2^20 tensor)
 *   rfft_f32_16m    one real transform of 2^24 f32 elements
 *     tenferrod: one held session; the input (random) is uploaded once; each
 *                iteration is tf_session_with queueing QUEUED transforms of it
 *                (as a solver queues its steps), then tf_session_synchronize;
 *                the outputs are freed after the clock stops. The plans are in
 *                the daemon's cache after the warm-up.
 *     baseline:  cuFFT in this process with a plan made before timing
 *                (cufftPlan2d / cufftPlan1d with its batch), the same QUEUED
 *                executions into preallocated outputs, then
 *                cudaDeviceSynchronize.
 *     Median of ITERS iterations after WARMUP, the sides alternating; GB/s =
 *     (input + output bytes) x QUEUED / time. The one-transform latency of
 *     both (QUEUED = 1) is printed on a '#' line. Checks: the daemon's output
 *     and cuFFT's agree (normwise), and bin 0 equals the sum of the input.
 *
 *   fft_new_process (ms, start of the process to the result ready on the device)
 *     tenferrod: a fresh process (fork+exec of this binary, "--child tenferrod
 *                zeros") connects, makes a 256^3 c64 tensor of zeros on the
 *                device (tf_zeros), runs one fftn in a scoped session and
 *                returns when it has completed. Another client (this process,
 *                before the timed runs) transformed that shape, so its plan is
 *                warm in the daemon.
 *     baseline:  a fresh process ("--child cuda zeros") loads cuFFT, starts
 *                CUDA (cudaSetDevice, cudaFree(0)), cudaMalloc + cudaMemset of
 *                the input and output, cufftPlan3d, cufftExecC2C,
 *                cudaDeviceSynchronize.
 *   fft_new_process_upload: the same with the input filled on the host by the
 *     child (deterministic values) and uploaded: tf_upload against
 *     cudaMemcpy from malloc'd memory.
 *     The clock runs in the parent from just before fork to the child's
 *     RESULT line. Median of RUNS runs of each, alternating, after one
 *     untimed run of each. Each child then checks its result (all zeros; or
 *     bin 0 against the input's sum) and says so.
 *
 * cuFFT is loaded with dlopen, never linked: a tenferrod client does not load
 * it, and the CUDA child pays for loading it inside its timed region as the
 * dynamic loader would charge a program linked against it. CUDA rule
 * (shared/gpu/README.md): the new-process part runs first, before this
 * process initialises CUDA, and every child is a fresh exec.
 */
#include <complex.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <cufft.h>

#include "bench/gpu/gpu-common.h"

#define WARMUP 2
#define ITERS 9
#define RUNS 5
#define CHILD_TIMEOUT_S 90
#define CUBE 256

static const char *const NAME = "bench-fft";

/* ---- cuFFT, loaded at run time ---- */

typedef struct fft_api {
    __typeof__(cufftPlan1d) *plan1d;
    __typeof__(cufftPlan2d) *plan2d;
    __typeof__(cufftPlan3d) *plan3d;
    __typeof__(cufftExecC2C) *c2c;
    __typeof__(cufftExecZ2Z) *z2z;
    __typeof__(cufftExecR2C) *r2c;
    __typeof__(cufftDestroy) *destroy;
} fft_api;

/* Loads cuFFT as the dynamic loader would at a linked program's start (ends the bench if not). */
static void load_cufft(fft_api *api) {
    char name[64];
    snprintf(name, sizeof name, "libcufft.so.%d", CUFFT_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcufft.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) bench_die(NAME, "cannot load cuFFT (%s): %s", name, dlerror());
    api->plan1d = (__typeof__(api->plan1d))dlsym(lib, "cufftPlan1d");
    api->plan2d = (__typeof__(api->plan2d))dlsym(lib, "cufftPlan2d");
    api->plan3d = (__typeof__(api->plan3d))dlsym(lib, "cufftPlan3d");
    api->c2c = (__typeof__(api->c2c))dlsym(lib, "cufftExecC2C");
    api->z2z = (__typeof__(api->z2z))dlsym(lib, "cufftExecZ2Z");
    api->r2c = (__typeof__(api->r2c))dlsym(lib, "cufftExecR2C");
    api->destroy = (__typeof__(api->destroy))dlsym(lib, "cufftDestroy");
    if (!api->plan1d || !api->plan2d || !api->plan3d || !api->c2c || !api->z2z || !api->r2c ||
        !api->destroy)
        bench_die(NAME, "%s lacks a cuFFT entry point this bench uses", name);
}

/* Ends the bench unless a cuFFT call succeeded. */
static void cufft_ok(cufftResult r, const char *call) {
    if (r != CUFFT_SUCCESS) bench_die(NAME, "%s failed: cuFFT status %d", call, (int)r);
}

static double ms(uint64_t from, uint64_t to) { return (double)(to - from) / 1e6; }

/* ---- throughput ---- */

/* One throughput benchmark. */
typedef struct tput_case {
    const char *name;
    int real;        /* R2C (f32 -> c64); else C2C */
    tf_dtype dtype;  /* the input's */
    int rank;
    int64_t shape[2];
    int n_axes; /* 0: all */
    int axes[1];
    int queued; /* transforms per synchronize */
} tput_case;

static const tput_case tput_cases[] = {
    {"fft2_c64_4096", 0, TF_C64, 2, {4096, 4096}, 0, {0}, 8},
    {"fft_c128_batch", 0, TF_C128, 2, {64, 1 << 20}, 1, {1}, 2},
    {"rfft_f32_16m", 1, TF_F32, 1, {1 << 24}, 0, {0}, 32},
};

#define MAX_QUEUED 32

/* The daemon side of one case. */
typedef struct daemon_side {
    tf_client *c;
    tf_session *s;
    const tput_case *tc;
    int queued;
    tf_tensor x, out[MAX_QUEUED];
} daemon_side;

static tf_status queue_transforms(tf_view *v, void *arg) {
    daemon_side *d = arg;
    const tput_case *tc = d->tc;
    const int *axes = tc->n_axes ? tc->axes : NULL;
    for (int k = 0; k < d->queued; k++) {
        tf_status st = tc->real ? tf_view_rfft(v, d->x, tc->n_axes, axes, TF_FFT_NORM_BACKWARD, &d->out[k])
                                : tf_view_fft(v, d->x, tc->n_axes, axes, TF_FFT_NORM_BACKWARD, &d->out[k]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* One daemon iteration (queue, synchronize); seconds. The outputs stay until daemon_drop. */
static double daemon_once(daemon_side *d) {
    uint64_t t0 = bench_now_ns();
    bench_check(NAME, d->c, tf_session_with(d->s, queue_transforms, d), "tf_session_with (fft)");
    bench_check(NAME, d->c, tf_session_synchronize(d->s), "tf_session_synchronize");
    return (double)(bench_now_ns() - t0) / 1e9;
}

static void daemon_drop(daemon_side *d) {
    for (int k = 0; k < d->queued; k++)
        bench_check(NAME, d->c, tf_tensor_free(d->c, d->out[k]), "tf_tensor_free");
}

/* The in-process side of one case: a plan and device buffers of this process. */
typedef struct cufft_side {
    const fft_api *api;
    const tput_case *tc;
    cufftHandle plan;
    void *x, *out[MAX_QUEUED];
    int queued;
} cufft_side;

static double cufft_once(cufft_side *b) {
    uint64_t t0 = bench_now_ns();
    for (int k = 0; k < b->queued; k++) {
        cufftResult r;
        if (b->tc->real)
            r = b->api->r2c(b->plan, b->x, b->out[k]);
        else if (b->tc->dtype == TF_C128)
            r = b->api->z2z(b->plan, b->x, b->out[k], CUFFT_FORWARD);
        else
            r = b->api->c2c(b->plan, b->x, b->out[k], CUFFT_FORWARD);
        cufft_ok(r, "cufftExec");
    }
    GPU_CUDA(NAME, cudaDeviceSynchronize());
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* Normwise difference of two complex outputs (n elements, c64 or c128), and bin 0. */
static double normwise(tf_dtype dt, const void *a, const void *b, size_t n) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double complex x, y;
        if (dt == TF_C64) {
            x = ((const float complex *)a)[i];
            y = ((const float complex *)b)[i];
        } else {
            x = ((const double complex *)a)[i];
            y = ((const double complex *)b)[i];
        }
        worst = fmax(worst, cabs(x - y));
        scale = fmax(scale, cabs(y));
    }
    return worst / (scale > 0 ? scale : 1);
}

/* The sum of the first n input values (complex for complex dtypes), in long double. */
static long double complex input_sum(tf_dtype dt, const void *x, size_t n) {
    long double complex s = 0;
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case TF_F32: s += ((const float *)x)[i]; break;
        case TF_C64: s += ((const float complex *)x)[i]; break;
        default: s += ((const double complex *)x)[i]; break;
        }
    }
    return s;
}

/* Measures one case on both sides and prints its BENCH line. */
static void run_tput(tf_client *c, const fft_api *api, const tput_case *tc) {
    int64_t n_in = 1;
    for (int a = 0; a < tc->rank; a++) n_in *= tc->shape[a];
    const tf_dtype out_dt = tc->real ? TF_C64 : tc->dtype;
    const int64_t n_out = tc->real ? tc->shape[0] / 2 + 1 : n_in;
    const size_t in_bytes = (size_t)n_in * tf_dtype_size(tc->dtype);
    const size_t out_bytes = (size_t)n_out * tf_dtype_size(out_dt);
    void *x = gpu_xmalloc(NAME, in_bytes);
    const tf_dtype real_dt = tc->dtype == TF_C128 ? TF_F64 : TF_F32;
    gpu_fill(real_dt, x, in_bytes / tf_dtype_size(real_dt), 0xf00u + (uint64_t)tc->dtype);

    daemon_side d = {.c = c, .tc = tc, .queued = tc->queued};
    bench_check(NAME, c, tf_upload(c, tc->dtype, tc->rank, tc->shape, x, &d.x), "tf_upload");
    bench_check(NAME, c, tf_session_open(c, &d.s), "tf_session_open");

    cufft_side b = {.api = api, .tc = tc, .queued = tc->queued};
    GPU_CUDA(NAME, cudaMalloc(&b.x, in_bytes));
    GPU_CUDA(NAME, cudaMemcpy(b.x, x, in_bytes, cudaMemcpyHostToDevice));
    for (int k = 0; k < tc->queued; k++) GPU_CUDA(NAME, cudaMalloc(&b.out[k], out_bytes));
    if (tc->real)
        cufft_ok(api->plan1d(&b.plan, (int)tc->shape[0], CUFFT_R2C, 1), "cufftPlan1d (R2C)");
    else if (tc->rank == 2 && tc->n_axes == 0)
        cufft_ok(api->plan2d(&b.plan, (int)tc->shape[0], (int)tc->shape[1],
                             tc->dtype == TF_C128 ? CUFFT_Z2Z : CUFFT_C2C),
                 "cufftPlan2d");
    else
        cufft_ok(api->plan1d(&b.plan, (int)tc->shape[1], tc->dtype == TF_C128 ? CUFFT_Z2Z : CUFFT_C2C,
                             (int)tc->shape[0]),
                 "cufftPlan1d (batched)");

    for (int i = 0; i < WARMUP; i++) {
        daemon_once(&d);
        daemon_drop(&d);
        cufft_once(&b);
    }
    double td[ITERS], tb[ITERS];
    for (int i = 0; i < ITERS; i++) {
        td[i] = daemon_once(&d);
        if (i + 1 < ITERS) daemon_drop(&d); /* the last outputs are kept for the checks */
        tb[i] = cufft_once(&b);
    }
    /* One transform per synchronize: the latency of a lone call on each side. */
    const int queued = d.queued;
    double t1d[5], t1b[5];
    daemon_side one = d;
    one.queued = 1;
    cufft_side b1 = b;
    b1.queued = 1;
    for (int i = 0; i < 5; i++) {
        t1d[i] = daemon_once(&one);
        daemon_drop(&one);
        t1b[i] = cufft_once(&b1);
    }
    bench_check(NAME, c, tf_session_close(d.s, NULL), "tf_session_close");

    /* Checks: the daemon's output against cuFFT's, and bin 0 against the input's sum. */
    void *got = NULL, *ref = gpu_xmalloc(NAME, out_bytes);
    size_t got_bytes = 0;
    bench_check(NAME, c, tf_download(c, d.out[0], &got, &got_bytes), "tf_download");
    if (got_bytes != out_bytes) bench_die(NAME, "%s: the output has %zu bytes", tc->name, got_bytes);
    GPU_CUDA(NAME, cudaMemcpy(ref, b.out[0], out_bytes, cudaMemcpyDeviceToHost));
    const double diff = normwise(out_dt, got, ref, (size_t)n_out);
    const double tol = out_dt == TF_C64 ? 1e-5 : 1e-12;
    if (!(diff <= tol)) bench_die(NAME, "%s: tenferrod and cuFFT differ by %.3g (normwise)", tc->name, diff);
    const size_t row = tc->n_axes == 1 ? (size_t)tc->shape[1] : (size_t)n_in;
    const long double complex sum = input_sum(tc->dtype, x, row);
    const double complex bin0 = out_dt == TF_C64 ? (double complex)((float complex *)got)[0]
                                                 : ((double complex *)got)[0];
    if (!(cabsl((long double complex)bin0 - sum) <= 1e3 * tol * sqrt((double)row)))
        bench_die(NAME, "%s: bin 0 is %g%+gi, the input sums to %Lg%+Lgi", tc->name, creal(bin0),
                  cimag(bin0), creall(sum), cimagl(sum));
    free(got);
    free(ref);
    daemon_drop(&d);
    bench_check(NAME, c, tf_tensor_free(c, d.x), "tf_tensor_free");
    cufft_ok(api->destroy(b.plan), "cufftDestroy");
    GPU_CUDA(NAME, cudaFree(b.x));
    for (int k = 0; k < tc->queued; k++) GPU_CUDA(NAME, cudaFree(b.out[k]));
    free(x);

    const double moved = (double)(in_bytes + out_bytes) * queued / 1e9;
    const double td_med = bench_summary(td, ITERS, BENCH_MEDIAN);
    const double tb_med = bench_summary(tb, ITERS, BENCH_MEDIAN);
    const double t1d_med = bench_summary(t1d, 5, BENCH_MEDIAN), t1b_med = bench_summary(t1b, 5, BENCH_MEDIAN);
    printf("# %s: %d transforms per synchronize, median of %d after %d warm-up, alternating: "
           "tenferrod %.3f ms, cuFFT %.3f ms per transform; one transform alone: tenferrod %.3f "
           "ms, cuFFT %.3f ms; outputs agree to %.2g (normwise), bin 0 = the input's sum\n",
           tc->name, queued, ITERS, WARMUP, td_med / queued * 1e3, tb_med / queued * 1e3,
           t1d_med * 1e3, t1b_med * 1e3, diff);
    bench_report(tc->name, moved / td_med, moved / tb_med, "GB/s");
}

/* ---- the new-process children ---- */

/* Signals the parent that the result is ready on the device: the end of the timed region. */
static void announce_result(void) {
    fputs("RESULT\n", stdout);
    fflush(stdout);
}

#define CUBE_ELEMS ((size_t)CUBE * CUBE * CUBE)

/* The input of the upload mode: deterministic, the same in both children. */
static float *cube_input(void) {
    float *x = gpu_xmalloc(NAME, CUBE_ELEMS * 2 * sizeof(float));
    gpu_fill(TF_F32, x, CUBE_ELEMS * 2, 0xc0beu);
    return x;
}

/* Checks a result: all zeros (zeros mode) or bin 0 equal to the input's sum; prints CHECK. */
static void check_cube(const float complex *y, const float *x) {
    if (!x) {
        double worst = 0;
        for (size_t i = 0; i < CUBE_ELEMS; i++) worst = fmax(worst, cabs(y[i]));
        printf("CHECK %s max |y| %g\n", worst == 0 ? "ok" : "FAIL", worst);
    } else {
        long double complex s = input_sum(TF_C64, x, CUBE_ELEMS);
        double err = (double)cabsl((long double complex)y[0] - s);
        printf("CHECK %s bin 0 off by %g\n", err <= 5e-2 ? "ok" : "FAIL", err);
    }
    fflush(stdout);
}

typedef struct cube_fft {
    tf_tensor x, y;
} cube_fft;

static tf_status cube_fn(tf_view *v, void *arg) {
    cube_fft *f = arg;
    return tf_view_fft(v, f->x, 0, NULL, TF_FFT_NORM_BACKWARD, &f->y);
}

/* The tenferrod child: connect, make (or upload) the input, one scoped fftn, done. */
static int child_tenferrod(int argc, char **argv, int upload) {
    const uint64_t t0 = bench_now_ns();
    float *x = upload ? cube_input() : NULL;
    tf_client *c = bench_connect(argc, argv);
    const uint64_t t1 = bench_now_ns();
    const int64_t shape[3] = {CUBE, CUBE, CUBE};
    cube_fft f = {0};
    if (upload)
        bench_check(NAME, c, tf_upload(c, TF_C64, 3, shape, x, &f.x), "tf_upload");
    else
        bench_check(NAME, c, tf_zeros(c, TF_C64, 3, shape, &f.x), "tf_zeros");
    const uint64_t t2 = bench_now_ns();
    bench_check(NAME, c, tf_with_session(c, cube_fn, &f), "tf_with_session (fft)");
    const uint64_t t3 = bench_now_ns();
    announce_result();
    void *y = NULL;
    size_t bytes = 0;
    bench_check(NAME, c, tf_download(c, f.y, &y, &bytes), "tf_download");
    if (bytes != CUBE_ELEMS * sizeof(float complex)) bench_die(NAME, "the result has %zu bytes", bytes);
    check_cube(y, x);
    printf("PHASES %sconnect %.2f, %s %.2f, fft %.2f ms\n", upload ? "fill+" : "", ms(t0, t1),
           upload ? "upload" : "zeros", ms(t1, t2), ms(t2, t3));
    fflush(stdout);
    free(y);
    free(x);
    tf_disconnect(c);
    return 0;
}

/* The CUDA child: cuFFT and a context of its own, the input, one plan and transform. */
static int child_cuda(int upload) {
    const uint64_t t0 = bench_now_ns();
    fft_api api;
    load_cufft(&api);
    float *x = upload ? cube_input() : NULL;
    const uint64_t t1 = bench_now_ns();
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaFree(0));
    const uint64_t t2 = bench_now_ns();
    const size_t bytes = CUBE_ELEMS * sizeof(float complex);
    void *dx = NULL, *dy = NULL;
    GPU_CUDA(NAME, cudaMalloc(&dx, bytes));
    GPU_CUDA(NAME, cudaMalloc(&dy, bytes));
    if (upload)
        GPU_CUDA(NAME, cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    else
        GPU_CUDA(NAME, cudaMemset(dx, 0, bytes));
    const uint64_t t3 = bench_now_ns();
    cufftHandle plan;
    cufft_ok(api.plan3d(&plan, CUBE, CUBE, CUBE, CUFFT_C2C), "cufftPlan3d");
    const uint64_t t4 = bench_now_ns();
    cufft_ok(api.c2c(plan, dx, dy, CUFFT_FORWARD), "cufftExecC2C");
    GPU_CUDA(NAME, cudaDeviceSynchronize());
    const uint64_t t5 = bench_now_ns();
    announce_result();
    float complex *y = gpu_xmalloc(NAME, bytes);
    GPU_CUDA(NAME, cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    check_cube(y, x);
    printf("PHASES cuFFT load%s %.2f, CUDA start %.2f, malloc+%s %.2f, plan %.2f, fft %.2f ms\n",
           upload ? "+fill" : "", ms(t0, t1), ms(t1, t2), upload ? "upload" : "memset", ms(t2, t3),
           ms(t3, t4), ms(t4, t5));
    fflush(stdout);
    cufft_ok(api.destroy(plan), "cufftDestroy");
    GPU_CUDA(NAME, cudaFree(dx));
    GPU_CUDA(NAME, cudaFree(dy));
    free(y);
    free(x);
    return 0;
}

/* ---- the parent's side of the new-process benchmark ---- */

typedef struct child_run {
    double first_ms; /* fork to the RESULT line */
    char phases[256];
} child_run;

/* Starts one child (mode, input), times it to its RESULT line and requires its CHECK ok. */
static child_run run_child(const char *socket, const char *mode, const char *input) {
    char self[4096];
    snprintf(self, sizeof self, "%s", gpu_self_path(NAME));
    char *args[] = {self, (char *)socket, "--child", (char *)mode, (char *)input, NULL};
    child_run r = {0};
    char out[8192] = "";
    size_t len = 0;
    int fd = -1;
    const uint64_t t0 = bench_now_ns();
    const uint64_t deadline = t0 + (uint64_t)CHILD_TIMEOUT_S * 1000000000u;
    pid_t pid = gpu_spawn(NAME, args, -1, &fd);
    int got = gpu_read_line(fd, out, sizeof out, &len, deadline);
    const uint64_t t1 = bench_now_ns();
    while (got == 1 && len + 1 < sizeof out) got = gpu_read_line(fd, out, sizeof out, &len, deadline);
    close(fd);
    int status = gpu_reap(pid, deadline);
    if (got < 0) bench_die(NAME, "%s child: no end within %d s; it wrote: %.300s", mode, CHILD_TIMEOUT_S, out);
    if (status != 0 || strncmp(out, "RESULT\n", 7) != 0)
        bench_die(NAME, "%s child failed (exit status %d); it wrote: %.300s", mode, status, out);
    if (!strstr(out, "\nCHECK ok"))
        bench_die(NAME, "%s child: wrong result: %.300s", mode, out);
    const char *ph = strstr(out, "\nPHASES ");
    if (ph) snprintf(r.phases, sizeof r.phases, "%.*s", (int)strcspn(ph + 8, "\n"), ph + 8);
    r.first_ms = ms(t0, t1);
    return r;
}

/* Makes the daemon plan the cube's transform, as another client would have (no CUDA here). */
static void warm_the_plan(tf_client *c) {
    const int64_t shape[3] = {CUBE, CUBE, CUBE};
    cube_fft f = {0};
    bench_check(NAME, c, tf_zeros(c, TF_C64, 3, shape, &f.x), "tf_zeros");
    bench_check(NAME, c, tf_with_session(c, cube_fn, &f), "tf_with_session (warm-up fft)");
    bench_check(NAME, c, tf_tensor_free(c, f.x), "tf_tensor_free");
    bench_check(NAME, c, tf_tensor_free(c, f.y), "tf_tensor_free");
}

/* Runs one new-process benchmark (input "zeros" or "upload") and prints its BENCH line. */
static void run_new_process(const char *socket, const char *input, const char *name) {
    child_run wd = run_child(socket, "tenferrod", input), wc = run_child(socket, "cuda", input);
    printf("# %s warm-up (untimed): tenferrod %.2f ms, cuda %.2f ms\n", name, wd.first_ms, wc.first_ms);
    double td[RUNS], tc[RUNS];
    for (int r = 0; r < RUNS; r++) {
        child_run d = run_child(socket, "tenferrod", input);
        child_run c = run_child(socket, "cuda", input);
        td[r] = d.first_ms;
        tc[r] = c.first_ms;
        printf("# %s run %d: tenferrod %.2f ms [%s]; cuda %.2f ms [%s]\n", name, r, d.first_ms,
               d.phases, c.first_ms, c.phases);
        fflush(stdout);
    }
    const double d_med = bench_summary(td, RUNS, BENCH_MEDIAN), c_med = bench_summary(tc, RUNS, BENCH_MEDIAN);
    printf("# %s: a new process's first %d^3 c64 fftn, start to result on the device, median of %d "
           "alternating; both results checked\n",
           name, CUBE, RUNS);
    bench_report(name, d_med, c_med, "ms");
    if (d_med > 0) printf("# %s: baseline/tenferrod = %.1fx faster\n", name, c_med / d_med);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc >= 5 && strcmp(argv[2], "--child") == 0) {
        const int upload = strcmp(argv[4], "upload") == 0;
        if (strcmp(argv[3], "tenferrod") == 0) return child_tenferrod(argc, argv, upload);
        if (strcmp(argv[3], "cuda") == 0) return child_cuda(upload);
        bench_die(NAME, "unknown child mode %s", argv[3]);
    }
    const char *socket = bench_socket_path(argc, argv);
    if (!socket) socket = "";
    tf_client *c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(c));
    fflush(stdout);

    /* New processes first: this process must not have started CUDA before it forks. */
    warm_the_plan(c);
    run_new_process(socket, "zeros", "fft_new_process");
    run_new_process(socket, "upload", "fft_new_process_upload");

    fft_api api;
    load_cufft(&api);
    struct cudaDeviceProp prop;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaGetDeviceProperties(&prop, 0));
    printf("# baseline device: %s (in-process cuFFT, plans made before timing)\n", prop.name);
    fflush(stdout);
    for (size_t i = 0; i < sizeof tput_cases / sizeof tput_cases[0]; i++) run_tput(c, &api, &tput_cases[i]);
    tf_disconnect(c);
    return 0;
}
