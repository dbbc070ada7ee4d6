/*
 * bench-first-result: how long a NEW process takes to get its first GPU
 * result, through a warm daemon against starting CUDA itself.
 *
 *   first_result  (ms, time to the result)
 *     tenferrod: a fresh process (fork+exec of this binary, mode
 *                "--child tenferrod") connects to the daemon, uploads a
 *                512 x 512 f32 matrix A (1 MiB), runs A x A in one scoped
 *                session (tf_with_session) and downloads the product.
 *     baseline:  a fresh process (mode "--child cuda") loads cuBLAS, then
 *                cudaSetDevice (context start), cudaMalloc, cudaMemcpy of A,
 *                cublasCreate, cublasSgemm, cudaMemcpy of the product back.
 *
 * The clock runs in the parent from just before fork until the child's first
 * output line, which the child writes as soon as the product is in its
 * memory; checksums and clean-up (context teardown, disconnect) come after
 * and are reported separately as the time to the child's exit. Median of
 * RUNS runs of each, alternating, after one untimed run of each.
 *
 * cuBLAS: the two children are the same binary, and loading cuBLAS costs tens
 * of milliseconds (about 85 ms measured on the build machine), which a
 * tenferrod client never pays. So this binary is linked without cuBLAS
 * (--as-needed, no direct reference) and the CUDA child loads it with dlopen
 * at its start, inside the timed region, as the dynamic loader would for a
 * program linked against it. The CUDA runtime is linked statically on the GPU
 * build and costs nothing until called.
 *
 * Checks: each child prints a digest of its product (a weighted checksum of
 * every entry and GPU_SAMPLES entries); the parent checks both against the
 * digest it predicts from A, so the two children also agree with each other.
 * The parent never calls CUDA: its children could not use CUDA otherwise.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench/gpu/gpu-common.h"

#define M 512
#define RUNS 7
#define SEED 0xf125u
#define CHILD_TIMEOUT_S 60

static const char *const NAME = "bench-first-result";

/* ---- the children ---- */

/* The operand both children (and the parent's prediction) use. */
static float *make_operand(void) {
    float *a = gpu_xmalloc(NAME, sizeof(float) * M * M);
    gpu_fill(TF_F32, a, (size_t)M * M, SEED);
    return a;
}

/* Milliseconds between two bench_now_ns() readings. */
static double ms(uint64_t from, uint64_t to) { return (double)(to - from) / 1e6; }

/* Signals the parent that the product is here: the end of the timed region. */
static void announce_result(void) {
    fputs("RESULT\n", stdout);
    fflush(stdout);
}

typedef struct square {
    tf_tensor a, c;
} square;

static tf_status multiply_square(tf_view *v, void *arg) {
    square *sq = arg;
    return tf_view_matmul(v, sq->a, sq->a, &sq->c);
}

/* The tenferrod child: connect, upload, one scoped matmul, download. */
static int child_tenferrod(int argc, char **argv) {
    const uint64_t t0 = bench_now_ns();
    float *a = make_operand();
    tf_client *c = bench_connect(argc, argv);
    const uint64_t t1 = bench_now_ns();
    int64_t shape[2] = {M, M};
    square sq = {0};
    bench_check(NAME, c, tf_upload(c, TF_F32, 2, shape, a, &sq.a), "tf_upload");
    const uint64_t t2 = bench_now_ns();
    bench_check(NAME, c, tf_with_session(c, multiply_square, &sq), "tf_with_session (matmul)");
    const uint64_t t3 = bench_now_ns();
    void *out = NULL;
    size_t bytes = 0;
    bench_check(NAME, c, tf_download(c, sq.c, &out, &bytes), "tf_download");
    const uint64_t t4 = bench_now_ns();
    announce_result();
    if (bytes != sizeof(float) * M * M)
        bench_die(NAME, "the product has %zu bytes, expected %zu", bytes, sizeof(float) * M * M);
    gpu_digest d;
    gpu_digest_of(TF_F32, out, M, &d);
    gpu_digest_print("DIGEST", &d);
    printf("PHASES operand+connect %.2f, upload %.2f, matmul %.2f, download %.2f ms\n", ms(t0, t1),
           ms(t1, t2), ms(t2, t3), ms(t3, t4));
    fflush(stdout);
    free(out);
    free(a);
    tf_disconnect(c);
    return 0;
}

/* The cuBLAS entry points the CUDA child calls, resolved with dlsym. */
typedef struct blas_api {
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasSgemm_v2) *sgemm;
    __typeof__(cublasDestroy_v2) *destroy;
} blas_api;

/* Loads cuBLAS as the dynamic loader would at a linked program's start (ends the child if not). */
static void load_cublas(blas_api *api) {
    char name[64];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) bench_die(NAME, "cannot load cuBLAS (%s): %s", name, dlerror());
    api->create = (__typeof__(api->create))dlsym(lib, "cublasCreate_v2");
    api->sgemm = (__typeof__(api->sgemm))dlsym(lib, "cublasSgemm_v2");
    api->destroy = (__typeof__(api->destroy))dlsym(lib, "cublasDestroy_v2");
    if (!api->create || !api->sgemm || !api->destroy)
        bench_die(NAME, "%s lacks cublasCreate_v2, cublasSgemm_v2 or cublasDestroy_v2", name);
}

/* The CUDA child: cuBLAS and a context of its own, one product, the result copied back. */
static int child_cuda(void) {
    const uint64_t t0 = bench_now_ns();
    blas_api api;
    load_cublas(&api);
    float *a = make_operand();
    float *c = gpu_xmalloc(NAME, sizeof(float) * M * M);
    const size_t bytes = sizeof(float) * M * M;
    const uint64_t t1 = bench_now_ns();
    GPU_CUDA(NAME, cudaSetDevice(0));
    const uint64_t t2 = bench_now_ns();
    void *da = NULL, *dc = NULL;
    GPU_CUDA(NAME, cudaMalloc(&da, bytes));
    GPU_CUDA(NAME, cudaMalloc(&dc, bytes));
    GPU_CUDA(NAME, cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    const uint64_t t3 = bench_now_ns();
    cublasHandle_t h = NULL;
    GPU_CUBLAS(NAME, api.create(&h));
    const uint64_t t4 = bench_now_ns();
    const float one = 1.0f, zero = 0.0f;
    /* Row-major C = A A, as the daemon computes it: C^T = A^T A^T column-major. */
    GPU_CUBLAS(NAME, api.sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, M, M, &one, da, M, da, M, &zero,
                               dc, M));
    GPU_CUDA(NAME, cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    const uint64_t t5 = bench_now_ns();
    announce_result();
    gpu_digest d;
    gpu_digest_of(TF_F32, c, M, &d);
    gpu_digest_print("DIGEST", &d);
    printf("PHASES cuBLAS load+operand %.2f, cudaSetDevice %.2f, malloc+upload %.2f, "
           "cublasCreate %.2f, sgemm+download %.2f ms\n",
           ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4), ms(t4, t5));
    fflush(stdout);
    GPU_CUBLAS(NAME, api.destroy(h));
    GPU_CUDA(NAME, cudaFree(da));
    GPU_CUDA(NAME, cudaFree(dc));
    free(a);
    free(c);
    return 0;
}

/* ---- the parent ---- */

/* What one child run measured. */
typedef struct child_run {
    double first_ms; /* fork to the RESULT line */
    double exit_ms;  /* fork to the child's exit */
    char phases[256];
} child_run;

/* Starts one child in `mode`, times it, checks its digest against the prediction. */
static child_run run_child(const char *socket, const char *mode, const gpu_expect *e) {
    char self[4096];
    snprintf(self, sizeof self, "%s", gpu_self_path(NAME));
    char *args[] = {self, (char *)socket, "--child", (char *)mode, NULL};
    child_run r = {0};
    char out[8192] = "";
    size_t len = 0;
    int fd = -1;
    const uint64_t t0 = bench_now_ns();
    const uint64_t deadline = t0 + (uint64_t)CHILD_TIMEOUT_S * 1000000000u;
    pid_t pid = gpu_spawn(NAME, args, -1, &fd);
    int got = gpu_read_line(fd, out, sizeof out, &len, deadline);
    const uint64_t t1 = bench_now_ns();
    while (got == 1 && len + 1 < sizeof out)
        got = gpu_read_line(fd, out, sizeof out, &len, deadline);
    close(fd);
    int status = gpu_reap(pid, deadline);
    const uint64_t t2 = bench_now_ns();
    if (got < 0)
        bench_die(NAME, "%s child: did not finish within %d s (killed); it wrote: %.300s", mode,
                  CHILD_TIMEOUT_S, out);
    if (status != 0 || strncmp(out, "RESULT\n", 7) != 0)
        bench_die(NAME, "%s child failed (exit status %d); it wrote: %.300s", mode, status, out);
    const char *dg = strstr(out, "\nDIGEST ");
    const char *ph = strstr(out, "\nPHASES ");
    gpu_digest d;
    if (!dg || gpu_digest_parse(dg + 8, &d) != 0)
        bench_die(NAME, "%s child: no digest in its output: %.300s", mode, out);
    char why[256];
    double worst = gpu_digest_check(&d, e, why, sizeof why);
    if (!(worst <= 1.0))
        bench_die(NAME, "%s child: wrong product: %s (%.3g x the bound)", mode, why, worst);
    if (ph) snprintf(r.phases, sizeof r.phases, "%.*s", (int)strcspn(ph + 8, "\n"), ph + 8);
    r.first_ms = ms(t0, t1);
    r.exit_ms = ms(t0, t2);
    return r;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[2], "--child") == 0) {
        if (strcmp(argv[3], "tenferrod") == 0) return child_tenferrod(argc, argv);
        if (strcmp(argv[3], "cuda") == 0) return child_cuda();
        bench_die(NAME, "unknown child mode %s", argv[3]);
    }
    const char *socket = bench_socket_path(argc, argv);
    if (!socket) socket = "";
    /* Fail early and clearly when the daemon is not there (this touches no CUDA). */
    tf_client *probe = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(probe));
    tf_disconnect(probe);

    float *a = make_operand();
    gpu_expect e;
    gpu_expect_of(TF_F32, a, a, M, &e);
    free(a);

    child_run warm_d = run_child(socket, "tenferrod", &e);
    child_run warm_c = run_child(socket, "cuda", &e);
    printf("# warm-up (untimed): tenferrod %.2f ms, cuda %.2f ms\n", warm_d.first_ms,
           warm_c.first_ms);
    double td[RUNS], tc[RUNS], xd[RUNS], xc[RUNS];
    for (int r = 0; r < RUNS; r++) {
        child_run d = run_child(socket, "tenferrod", &e);
        child_run c = run_child(socket, "cuda", &e);
        td[r] = d.first_ms;
        tc[r] = c.first_ms;
        xd[r] = d.exit_ms;
        xc[r] = c.exit_ms;
        printf("# run %d: tenferrod %.2f ms (exit %.2f) [%s]; cuda %.2f ms (exit %.2f) [%s]\n", r,
               d.first_ms, d.exit_ms, d.phases, c.first_ms, c.exit_ms, c.phases);
        fflush(stdout);
    }
    double d_med = bench_summary(td, RUNS, BENCH_MEDIAN);
    double c_med = bench_summary(tc, RUNS, BENCH_MEDIAN);
    printf("# first_result: new process, %dx%d f32 upload + matmul + download, median of %d "
           "alternating; both products verified against the predicted digest\n",
           M, M, RUNS);
    printf("# first_result: to process exit (medians): tenferrod %.2f ms, cuda %.2f ms\n",
           bench_summary(xd, RUNS, BENCH_MEDIAN), bench_summary(xc, RUNS, BENCH_MEDIAN));
    bench_report("first_result", d_med, c_med, "ms");
    if (d_med > 0) printf("# first_result: baseline/tenferrod = %.1fx faster\n", c_med / d_med);
    return 0;
}
