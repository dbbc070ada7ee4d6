/*
 * bench-gemm: one large matrix product through the daemon against the same
 * product by cuBLAS in this process, on the same GPU.
 *
 *   dgemm_8192, sgemm_8192 (f64, f32; n = 8192)
 *     tenferrod: one held session; A and B (random, [-0.5, 0.5)) are uploaded
 *                once; each iteration is tf_session_with queueing one matmul
 *                A x B, then tf_session_synchronize; the result is freed after
 *                the clock stops.
 *     baseline:  cublasDgemm / cublasSgemm on device buffers of this process
 *                (its own context and handle, default math mode, as the
 *                daemon's), then cudaDeviceSynchronize.
 *
 * Median of ITERS iterations after WARMUP untimed ones of each side, the two
 * sides alternating iteration by iteration; reported as TFLOP/s = 2 n^3 / t.
 * Checks: the daemon's last product is downloaded once, and it and cuBLAS's
 * are both checked against a digest computed here from A and B (a weighted
 * checksum of all entries and GPU_SAMPLES entries, each within a rounding
 * bound); the largest difference between the two products is printed.
 *
 * This process initialises CUDA and never forks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench/gpu/gpu-common.h"

#define N 8192
#define WARMUP 2
#define ITERS 7

static const char *const NAME = "bench-gemm";

/* The daemon side: the client, its held session, operands and the latest product. */
typedef struct daemon_side {
    tf_client *c;
    tf_session *s;
    tf_tensor a, b, out;
} daemon_side;

/* The in-process side: a cuBLAS handle and device buffers of this process. */
typedef struct blas_side {
    cublasHandle_t h;
    tf_dtype dtype;
    void *a, *b, *c;
} blas_side;

static tf_status multiply(tf_view *v, void *arg) {
    daemon_side *d = arg;
    return tf_view_matmul(v, d->a, d->b, &d->out);
}

/* One daemon product: queue and synchronize; seconds. d->out holds the product afterwards. */
static double daemon_once(daemon_side *d) {
    uint64_t t0 = bench_now_ns();
    bench_check(NAME, d->c, tf_session_with(d->s, multiply, d), "tf_session_with (matmul)");
    bench_check(NAME, d->c, tf_session_synchronize(d->s), "tf_session_synchronize");
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* Frees the daemon's latest product (outside the timed region). */
static void daemon_drop(daemon_side *d) {
    bench_check(NAME, d->c, tf_tensor_free(d->c, d->out), "tf_tensor_free (product)");
    d->out = 0;
}

/* One cuBLAS product C = A B, row-major (C^T = B^T A^T column-major), synchronized; seconds. */
static double blas_once(blas_side *bs) {
    const int n = N;
    uint64_t t0 = bench_now_ns();
    if (bs->dtype == TF_F64) {
        const double one = 1.0, zero = 0.0;
        GPU_CUBLAS(NAME, cublasDgemm(bs->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, bs->b, n,
                                     bs->a, n, &zero, bs->c, n));
    } else {
        const float one = 1.0f, zero = 0.0f;
        GPU_CUBLAS(NAME, cublasSgemm(bs->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, bs->b, n,
                                     bs->a, n, &zero, bs->c, n));
    }
    GPU_CUDA(NAME, cudaDeviceSynchronize());
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* The largest |x - y| over two n x n products, and how many entries differ at all. */
static double max_difference(tf_dtype dtype, const void *x, const void *y, size_t n,
                             size_t *differ) {
    double worst = 0;
    *differ = 0;
    for (size_t i = 0; i < n; i++) {
        double p = dtype == TF_F32 ? ((const float *)x)[i] : ((const double *)x)[i];
        double q = dtype == TF_F32 ? ((const float *)y)[i] : ((const double *)y)[i];
        double d = fabs(p - q);
        if (d != 0) (*differ)++; /* NaN counts too */
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* Measures one dtype on both sides and prints its BENCH line. */
static void run_dtype(daemon_side *d, cublasHandle_t h, tf_dtype dtype, const char *name) {
    const size_t elems = (size_t)N * N, bytes = elems * tf_dtype_size(dtype);
    void *a = gpu_xmalloc(NAME, bytes), *b = gpu_xmalloc(NAME, bytes);
    gpu_fill(dtype, a, elems, 0xa000u + (uint64_t)dtype);
    gpu_fill(dtype, b, elems, 0xb000u + (uint64_t)dtype);

    int64_t shape[2] = {N, N};
    uint64_t t0 = bench_now_ns();
    bench_check(NAME, d->c, tf_upload(d->c, dtype, 2, shape, a, &d->a), "tf_upload a");
    bench_check(NAME, d->c, tf_upload(d->c, dtype, 2, shape, b, &d->b), "tf_upload b");
    double up_s = (double)(bench_now_ns() - t0) / 1e9;
    printf("# %s: uploaded 2 x %zu MiB to the daemon in %.2f s (%.2f GB/s)\n", name, bytes >> 20,
           up_s, 2.0 * (double)bytes / up_s / 1e9);
    fflush(stdout);

    blas_side bs = {.h = h, .dtype = dtype};
    GPU_CUDA(NAME, cudaMalloc(&bs.a, bytes));
    GPU_CUDA(NAME, cudaMalloc(&bs.b, bytes));
    GPU_CUDA(NAME, cudaMalloc(&bs.c, bytes));
    GPU_CUDA(NAME, cudaMemcpy(bs.a, a, bytes, cudaMemcpyHostToDevice));
    GPU_CUDA(NAME, cudaMemcpy(bs.b, b, bytes, cudaMemcpyHostToDevice));

    bench_check(NAME, d->c, tf_session_open(d->c, &d->s), "tf_session_open");
    for (int i = 0; i < WARMUP; i++) {
        daemon_once(d);
        daemon_drop(d);
        blas_once(&bs);
    }
    double td[ITERS], tb[ITERS];
    for (int i = 0; i < ITERS; i++) {
        td[i] = daemon_once(d);
        if (i + 1 < ITERS) daemon_drop(d); /* the last product is kept for the check */
        tb[i] = blas_once(&bs);
    }
    tf_session_counters counters;
    bench_check(NAME, d->c, tf_session_close(d->s, &counters), "tf_session_close");
    d->s = NULL;

    /* Checks: both products against the digest predicted from A and B, then against each other. */
    void *got = NULL;
    size_t got_bytes = 0;
    bench_check(NAME, d->c, tf_download(d->c, d->out, &got, &got_bytes), "tf_download (product)");
    if (got_bytes != bytes)
        bench_die(NAME, "%s: the daemon's product has %zu bytes, expected %zu", name, got_bytes,
                  bytes);
    void *ref = gpu_xmalloc(NAME, bytes);
    GPU_CUDA(NAME, cudaMemcpy(ref, bs.c, bytes, cudaMemcpyDeviceToHost));
    gpu_verify_product(NAME, "tenferrod", dtype, a, b, got, N);
    gpu_verify_product(NAME, "cuBLAS", dtype, a, b, ref, N);
    size_t differ = 0;
    double diff = max_difference(dtype, got, ref, elems, &differ);
    printf("# %s: both products match the predicted checksum and %d sampled entries; "
           "max |tenferrod - cuBLAS| = %.3g (%zu of %zu entries differ)\n",
           name, GPU_SAMPLES, diff, differ, elems);

    daemon_drop(d);
    bench_check(NAME, d->c, tf_tensor_free(d->c, d->a), "tf_tensor_free a");
    bench_check(NAME, d->c, tf_tensor_free(d->c, d->b), "tf_tensor_free b");
    GPU_CUDA(NAME, cudaFree(bs.a));
    GPU_CUDA(NAME, cudaFree(bs.b));
    GPU_CUDA(NAME, cudaFree(bs.c));
    free(got);
    free(ref);
    free(a);
    free(b);

    const double flop = 2.0 * (double)N * N * N;
    double td_best = td[0], tb_best = tb[0];
    for (int i = 1; i < ITERS; i++) {
        td_best = fmin(td_best, td[i]);
        tb_best = fmin(tb_best, tb[i]);
    }
    double td_med = bench_summary(td, ITERS, BENCH_MEDIAN);
    double tb_med = bench_summary(tb, ITERS, BENCH_MEDIAN);
    printf("# %s: %d x %d %s, median of %d after %d warm-up, alternating; "
           "tenferrod %.2f ms (best %.2f), cuBLAS %.2f ms (best %.2f); session carried %llu ops\n",
           name, N, N, tf_dtype_name(dtype), ITERS, WARMUP, td_med * 1e3, td_best * 1e3,
           tb_med * 1e3, tb_best * 1e3, (unsigned long long)counters.queued_ops);
    bench_report(name, flop / td_med / 1e12, flop / tb_med / 1e12, "TFLOP/s");
}

int main(int argc, char **argv) {
    daemon_side d = {0};
    d.c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(d.c));

    struct cudaDeviceProp prop;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaGetDeviceProperties(&prop, 0));
    cublasHandle_t h = NULL;
    GPU_CUBLAS(NAME, cublasCreate(&h));
    GPU_CUBLAS(NAME, cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    printf("# baseline device: %s (in-process cuBLAS, default math mode)\n", prop.name);
    fflush(stdout);

    run_dtype(&d, h, TF_F64, "dgemm_8192");
    run_dtype(&d, h, TF_F32, "sgemm_8192");

    GPU_CUBLAS(NAME, cublasDestroy(h));
    tf_disconnect(d.c);
    return 0;
}
