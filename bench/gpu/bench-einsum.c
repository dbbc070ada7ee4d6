/*
 * bench-einsum (GPU): contractions through the daemon against the cuBLAS call
 * of the same flop count in this process, on the same GPU.
 *
 *   einsum_tn_f64       abcd,cdef->aebf, every dimension 48, f64: a GEMM of
 *                       2304^3 whose output the daemon permutes (aebf splits
 *                       both free groups); baseline cublasDgemm 2304^3.
 *   einsum_perm_c128    acbd,dcef->abef, dimension 48, c128: input 0 is
 *                       permuted first (its free labels a, b are apart);
 *                       baseline cublasZgemm 2304^3.
 *   einsum_batched_f64  bij,bjk->bik, b = 256, 128 x 128: one strided-batched
 *                       GEMM read in place; baseline cublasDgemmStridedBatched.
 *
 * The daemon side is the loop a user writes: inputs uploaded once, then a
 * held session per line, each sample REPS contractions queued in it (every result but the
 * last dropped, as a loop overwriting its result does) and one synchronize.
 * It goes out as the frames the client library sends (bench-raw.c; this
 * tree's library has no einsum call yet). The baseline is REPS cuBLAS calls
 * on device buffers of this process (its own context and handle, default
 * math mode, as the daemon's) and one cudaStreamSynchronize. Median of
 * SAMPLES samples after WARMUP, the sides alternating sample by sample;
 * TFLOP/s = flop count per contraction (2 m n k, 8 m n k for complex) x
 * REPS / time. Checks: the daemon's result of each contraction is downloaded
 * once and SAMPLED entries are recomputed here exactly, each within a
 * rounding bound from the magnitudes of its terms; the baseline's GEMM of
 * the same buffers (read as plain matrices) is checked the same way.
 *
 * This process initialises CUDA and never forks.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuComplex.h>
#include <cuda_runtime_api.h>

#include "bench/bench-raw.h"
#include "bench/gpu/gpu-common.h"

#define WARMUP 2
#define SAMPLES 9
#define SAMPLED 48

static const char *const NAME = "bench-einsum";

/* One benchmark line: the contraction, its shapes, and the GEMM it amounts to. */
typedef struct line {
    const char *name;
    const char *spec; /* labels as letters, for the message */
    tf_dtype dtype;
    tf__contraction c;
    tf__meta in[2], out;
    int reps;
    /* The baseline's GEMM (row-major C[m][n] = A[m][k] B[k][n], batch of `batch`). */
    int m, n, k, batch;
} line;

/* Fills a line's descriptor from "abcd,cdef->aebf" with every letter of size dim (b: bdim). */
static void describe(line *l, const char *spec, int64_t dim, int64_t bdim) {
    memset(&l->c, 0, sizeof l->c);
    l->spec = spec;
    int i = 0;
    const char *p = spec;
    for (; *p != '-'; p++) {
        if (*p == ',') {
            i++;
            continue;
        }
        const int64_t size = *p == 'b' && bdim ? bdim : dim;
        l->c.labels[i][l->c.rank[i]] = (uint8_t)(*p - 'a');
        l->in[i].shape[l->c.rank[i]] = size;
        l->c.rank[i]++;
    }
    l->c.n_inputs = 2;
    for (p += 2; *p; p++) l->c.out[l->c.out_rank++] = (uint8_t)(*p - 'a');
    for (int j = 0; j < 2; j++) {
        l->in[j].dtype = l->dtype;
        l->in[j].rank = l->c.rank[j];
    }
    char why[256];
    if (tf__infer_contract(&l->c, l->in, &l->out, why, sizeof why) != TF_OK)
        bench_die(NAME, "%s: %s", spec, why);
}

static int is_cx(tf_dtype dt) { return dt == TF_C64 || dt == TF_C128; }

static long double complex elem(const void *p, tf_dtype dt, size_t i) {
    if (is_cx(dt)) return CMPLXL(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    return ((const double *)p)[i];
}

/*
 * The exact value of output element `o` of the contraction (its labels all
 * in the output or contracted), and the sum of its terms' magnitudes.
 */
static long double complex exact(const line *l, const void *a, const void *b, size_t o,
                                 long double *mag) {
    int64_t value[26] = {0}, size[26] = {0};
    for (int i = 0; i < 2; i++)
        for (int ax = 0; ax < l->c.rank[i]; ax++) size[l->c.labels[i][ax]] = l->in[i].shape[ax];
    for (int j = l->c.out_rank - 1; j >= 0; j--) {
        value[l->c.out[j]] = (int64_t)(o % (size_t)size[l->c.out[j]]);
        o /= (size_t)size[l->c.out[j]];
    }
    int contracted[26], n = 0;
    for (int L = 0; L < 26; L++) {
        int in_out = 0;
        for (int j = 0; j < l->c.out_rank; j++) in_out |= l->c.out[j] == L;
        if (size[L] && !in_out) contracted[n++] = L;
    }
    long double complex sum = 0;
    *mag = 0;
    int64_t idx[26] = {0};
    for (;;) {
        for (int q = 0; q < n; q++) value[contracted[q]] = idx[q];
        size_t off[2] = {0, 0};
        for (int i = 0; i < 2; i++)
            for (int ax = 0; ax < l->c.rank[i]; ax++)
                off[i] = off[i] * (size_t)l->in[i].shape[ax] + (size_t)value[l->c.labels[i][ax]];
        const long double complex t = elem(a, l->dtype, off[0]) * elem(b, l->dtype, off[1]);
        sum += t;
        *mag += cabsl(t);
        int q = n - 1;
        for (; q >= 0; q--) {
            if (++idx[q] < size[contracted[q]]) break;
            idx[q] = 0;
        }
        if (q < 0) break;
    }
    return sum;
}

/* Fails the benchmark unless `have` is within the rounding bound of `want`; returns error/bound. */
static double check_entry(const line *l, const char *who, size_t at, long double complex have,
                          long double complex want, long double mag) {
    const long double bound = 8.0L * (long double)l->k * 0x1p-53L * mag + 1e-300L;
    const double ratio = (double)(cabsl(have - want) / bound);
    if (!(ratio <= 1.0))
        bench_die(NAME, "%s: %s entry %zu is %.17g%+.17gi, expected %.17Lg%+.17Lgi", l->name, who,
                  at, (double)creall(have), (double)cimagl(have), creall(want), cimagl(want));
    return ratio;
}

/* The next of SAMPLED positions below total: both ends first, then pseudo-random ones. */
static size_t sample_at(int s, size_t total, uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return s == 0 ? 0 : s == 1 ? total - 1 : (size_t)(*x % total);
}

/* Checks SAMPLED entries of the daemon's result (in output label order) exactly. */
static void verify_contraction(const line *l, const void *a, const void *b, const void *got) {
    const size_t total = (size_t)tf__meta_numel(&l->out);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    double worst = 0;
    for (int s = 0; s < SAMPLED; s++) {
        const size_t o = sample_at(s, total, &x);
        long double mag;
        const long double complex want = exact(l, a, b, o, &mag);
        worst = fmax(worst, check_entry(l, "tenferrod", o, elem(got, l->dtype, o), want, mag));
    }
    printf("# %s: tenferrod matches %d entries recomputed here (worst error %.2f of its bound)\n",
           l->name, SAMPLED, worst);
}

/* Checks SAMPLED entries of the baseline's row-major [batch][m][n] GEMM of the flat buffers. */
static void verify_gemm(const line *l, const void *a, const void *b, const void *c) {
    const size_t m = (size_t)l->m, n = (size_t)l->n, k = (size_t)l->k;
    const size_t total = (size_t)l->batch * m * n;
    uint64_t x = 0x7f4a7c159e3779b9ull;
    double worst = 0;
    for (int s = 0; s < SAMPLED; s++) {
        const size_t at = sample_at(s, total, &x);
        const size_t bt = at / (m * n), i = at / n % m, j = at % n;
        long double complex want = 0;
        long double mag = 0;
        for (size_t q = 0; q < k; q++) {
            const long double complex t = elem(a, l->dtype, (bt * m + i) * k + q) *
                                          elem(b, l->dtype, (bt * k + q) * n + j);
            want += t;
            mag += cabsl(t);
        }
        worst = fmax(worst, check_entry(l, "cuBLAS", at, elem(c, l->dtype, at), want, mag));
    }
    printf("# %s: the cuBLAS baseline matches %d entries recomputed here (worst error %.2f of "
           "its bound)\n",
           l->name, SAMPLED, worst);
}

/* The in-process side: a handle, a stream, device buffers. */
typedef struct blas_side {
    cublasHandle_t h;
    cudaStream_t stream;
    void *a, *b, *c;
} blas_side;

/* REPS baseline GEMMs (row-major, as C^T = B^T A^T) and one stream synchronize; seconds. */
static double blas_sample(const line *l, blas_side *bs) {
    const int m = l->m, n = l->n, k = l->k;
    const long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    const uint64_t t0 = bench_now_ns();
    for (int r = 0; r < l->reps; r++) {
        if (l->dtype == TF_C128) {
            const cuDoubleComplex one = {1.0, 0.0}, zero = {0.0, 0.0};
            GPU_CUBLAS(NAME, cublasZgemm(bs->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, bs->b, n,
                                         bs->a, k, &zero, bs->c, n));
        } else if (l->batch > 1) {
            const double one = 1.0, zero = 0.0;
            GPU_CUBLAS(NAME, cublasDgemmStridedBatched(bs->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k,
                                                       &one, bs->b, n, sb, bs->a, k, sa, &zero,
                                                       bs->c, n, sc, l->batch));
        } else {
            const double one = 1.0, zero = 0.0;
            GPU_CUBLAS(NAME, cublasDgemm(bs->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, bs->b, n,
                                         bs->a, k, &zero, bs->c, n));
        }
    }
    GPU_CUDA(NAME, cudaStreamSynchronize(bs->stream));
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* REPS daemon contractions in the held session and one synchronize; seconds. */
static double daemon_sample(const line *l, bench_raw *r, uint64_t a, uint64_t b) {
    const uint64_t t0 = bench_now_ns();
    const uint64_t last = bench_raw_contract_sync(r, &l->c, a, b, l->reps, 1);
    const double s = (double)(bench_now_ns() - t0) / 1e9;
    bench_raw_free(r, last);
    return s;
}

/* Runs one line on both sides and prints its BENCH line. */
static void run_line(line *l, bench_raw *r, blas_side *bs) {
    const size_t na = (size_t)tf__meta_numel(&l->in[0]), nb = (size_t)tf__meta_numel(&l->in[1]);
    const size_t no = (size_t)tf__meta_numel(&l->out);
    const size_t comps = is_cx(l->dtype) ? 2 : 1, esize = tf_dtype_size(l->dtype);
    void *a = gpu_xmalloc(NAME, na * esize), *b = gpu_xmalloc(NAME, nb * esize);
    void *got = gpu_xmalloc(NAME, no * esize);
    gpu_fill(TF_F64, a, na * comps, 0xa11ceu + (uint64_t)l->dtype);
    gpu_fill(TF_F64, b, nb * comps, 0xb0b0u + (uint64_t)l->dtype);
    const uint64_t ta = bench_raw_upload(r, &l->in[0], a), tb = bench_raw_upload(r, &l->in[1], b);
    GPU_CUDA(NAME, cudaMalloc(&bs->a, na * esize));
    GPU_CUDA(NAME, cudaMalloc(&bs->b, nb * esize));
    GPU_CUDA(NAME, cudaMalloc(&bs->c, no * esize));
    GPU_CUDA(NAME, cudaMemcpy(bs->a, a, na * esize, cudaMemcpyHostToDevice));
    GPU_CUDA(NAME, cudaMemcpy(bs->b, b, nb * esize, cudaMemcpyHostToDevice));
    bench_raw_session_open(r);

    /* Correctness, once on each side. */
    const uint64_t out = bench_raw_contract_sync(r, &l->c, ta, tb, 1, 1);
    bench_raw_download(r, out, got, no * esize);
    bench_raw_free(r, out);
    verify_contraction(l, a, b, got);
    const int reps = l->reps;
    l->reps = 1;
    blas_sample(l, bs);
    l->reps = reps;
    GPU_CUDA(NAME, cudaMemcpy(got, bs->c, no * esize, cudaMemcpyDeviceToHost));
    verify_gemm(l, a, b, got);

    for (int i = 0; i < WARMUP; i++) {
        daemon_sample(l, r, ta, tb);
        blas_sample(l, bs);
    }
    double td[SAMPLES], tbl[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        td[i] = daemon_sample(l, r, ta, tb);
        tbl[i] = blas_sample(l, bs);
    }
    bench_raw_session_close(r);
    bench_raw_free(r, ta);
    bench_raw_free(r, tb);
    GPU_CUDA(NAME, cudaFree(bs->a));
    GPU_CUDA(NAME, cudaFree(bs->b));
    GPU_CUDA(NAME, cudaFree(bs->c));
    free(a);
    free(b);
    free(got);

    const double flop = (is_cx(l->dtype) ? 8.0 : 2.0) * l->m * (double)l->n * l->k * l->batch *
                        l->reps;
    const double d_med = bench_summary(td, SAMPLES, BENCH_MEDIAN);
    const double b_med = bench_summary(tbl, SAMPLES, BENCH_MEDIAN);
    printf("# %s: %s %s, %d contractions per synchronize, median of %d after %d warm-up, "
           "alternating; per contraction tenferrod %.1f us, cuBLAS %.1f us\n",
           l->name, l->spec, tf_dtype_name(l->dtype), l->reps, SAMPLES, WARMUP,
           d_med / l->reps * 1e6, b_med / l->reps * 1e6);
    bench_report(l->name, flop / d_med / 1e12, flop / b_med / 1e12, "TFLOP/s");
}

int main(int argc, char **argv) {
    bench_raw r;
    bench_raw_connect(NAME, bench_socket_path(argc, argv), &r);
    printf("# daemon device: %s\n", r.device);

    struct cudaDeviceProp prop;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaGetDeviceProperties(&prop, 0));
    blas_side bs = {0};
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&bs.stream, cudaStreamNonBlocking));
    GPU_CUBLAS(NAME, cublasCreate(&bs.h));
    GPU_CUBLAS(NAME, cublasSetStream(bs.h, bs.stream));
    GPU_CUBLAS(NAME, cublasSetMathMode(bs.h, CUBLAS_DEFAULT_MATH));
    printf("# baseline device: %s (in-process cuBLAS, default math mode)\n", prop.name);
    fflush(stdout);

    line lines[3];
    memset(lines, 0, sizeof lines);
    lines[0] = (line){.name = "einsum_tn_f64", .dtype = TF_F64, .reps = 20,
                      .m = 2304, .n = 2304, .k = 2304, .batch = 1};
    describe(&lines[0], "abcd,cdef->aebf", 48, 0);
    lines[1] = (line){.name = "einsum_perm_c128", .dtype = TF_C128, .reps = 6,
                      .m = 2304, .n = 2304, .k = 2304, .batch = 1};
    describe(&lines[1], "acbd,dcef->abef", 48, 0);
    lines[2] = (line){.name = "einsum_batched_f64", .dtype = TF_F64, .reps = 200,
                      .m = 128, .n = 128, .k = 128, .batch = 256};
    describe(&lines[2], "bij,bjk->bik", 128, 256);
    for (int i = 0; i < 3; i++) run_line(&lines[i], &r, &bs);

    bench_raw_close(&r);
    GPU_CUBLAS(NAME, cublasDestroy(bs.h));
    GPU_CUDA(NAME, cudaStreamDestroy(bs.stream));
    return 0;
}
