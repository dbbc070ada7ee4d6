/*
 * linalg-routines: which cuSOLVER (or cuBLAS) routine each decomposition of
 * the CUDA backend should call, by dtype and shape, measured on this GPU in
 * this process alone (no daemon: an argument, the socket gpu-check.sh passes
 * every GPU benchmark, is ignored).
 *
 *   svd   Xgesvd ('S'), gesvdj (econ, default tolerance and sweeps), Xgesvdp
 *         (econ) at 64, 256, 512, 1024, 2048 square and 1024 x 256, for f64
 *         and c128 (f32 at 1024); batched 512 x 16 x 16 and 512 x 32 x 32
 *         by gesvdjBatched and a loop of gesvdj or Xgesvd over the matrices,
 *         64 x 64 x 64 by the two loops (gesvdjBatched takes m, n <= 32).
 *   eigh  Xsyevd and syevj / heevj (default tolerance) at 256, 1024, 4096;
 *         batched 512 x 32 x 32 by syevjBatched and the two loops.
 *   qr    512 x 32 x 32 and 512 x 64 x 64: a loop of Xgeqrf + orgqr / ungqr,
 *         a loop of Xgeqrf (R alone) and cublas<t>geqrfBatched (R alone: cuBLAS
 *         has no batched orgqr; the daemon forms Q with a kernel of its own).
 *   lu    those and 512 x 128 x 128: a loop of Xgetrf, cublas<t>getrfBatched.
 *   chol  the same: a loop of Xpotrf, cusolverDn<t>potrfBatched.
 *
 * Each measurement: the input (uniform in [-0.5, 0.5), a fixed seed per
 * case; Hermitian for eigh, that plus n I for chol; col-major as the routines
 * read it) is copied into a scratch matrix and the routine run, timed with
 * CUDA events on one stream: one warm-up, then the median of 5 runs
 * (workspaces sized and allocated before). A run longer than 1 s is not
 * repeated: its one run is the figure (a '#' line says so). After the runs,
 * the accuracy of the last result: svd ||A - U S V^H||_F / ||A||_F (and
 * the largest entry of |U^H U - I| on the '#' line); eigh ||A V - V W||_F /
 * ||A||_F (and |V^H V - I|), both by cuBLAS on the device over the whole
 * batch; on the host, over every matrix of a small batch and every 8th of
 * 512, qr ||Q R - A|| / ||A|| with Q, else ||R^H R - A^H A|| / ||A||^2; lu
 * ||P A - L U|| / ||A||; chol ||L L^H - A|| / ||A||; the Jacobi routines at their
 * default tolerance may be less accurate than the others, which is what
 * err shows. Matrices whose info word is not 0 (not converged, not positive
 * definite) are counted on the '#' line. One line per measurement:
 *
 *   ROUTINE kind=<svd|eigh|qr|lu|chol> dtype=<f32|f64|c128> shape=<b>x<m>x<n>
 *           routine=<name> ms=<median> err=<relative error>
 *
 * routine names: Xgesvd, gesvdj, Xgesvdp, gesvdjBatched, Xsyevd, syevj,
 * syevjBatched, Xgeqrf+orgqr, Xgeqrf, geqrfBatched, Xgetrf, getrfBatched,
 * Xpotrf, potrfBatched; a per-matrix routine over a batch is <name>_loop.
 * A routine cuSOLVER refuses prints ms=nan err=nan and a '#' line why. The
 * measurements run cheapest first; none starts after 95 s (those left
 * print ms=nan and "# skipped"), so the whole probe stays under about two
 * minutes on an H200: the largest come last (eigh 4096 by Xsyevd, svd 2048,
 * then syevj at 4096, the slowest of all, which the deadline is the most
 * likely to skip). TENFERRO_ROUTINES_KINDS (a comma list of kinds) runs only those.
 *
 * Exits 1 when a call fails outright; accuracy never fails it.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuComplex.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "bench/gpu/gpu-common.h"

#define REPS 5
#define DEADLINE_S 95.0
#define SLOW_RUN_MS 1000.0

static const char *const NAME = "linalg-routines";

typedef enum kind { K_SVD, K_EIGH, K_QR, K_LU, K_CHOL } kind;
static const char *const kind_name[] = {"svd", "eigh", "qr", "lu", "chol"};

typedef enum routine {
    R_GESVD,
    R_GESVDJ,
    R_GESVDP,
    R_GESVDJ_BATCHED,
    R_SYEVD,
    R_SYEVJ,
    R_SYEVJ_BATCHED,
    R_GEQRF_ORGQR,
    R_GEQRF,
    R_GEQRF_BATCHED,
    R_GETRF,
    R_GETRF_BATCHED,
    R_POTRF,
    R_POTRF_BATCHED,
} routine;

static const char *const routine_base[] = {
    "Xgesvd",       "gesvdj", "Xgesvdp",      "gesvdjBatched", "Xsyevd",
    "syevj",        "syevjBatched", "Xgeqrf+orgqr", "Xgeqrf", "geqrfBatched",
    "Xgetrf",       "getrfBatched", "Xpotrf",       "potrfBatched",
};

static int batched_routine(routine r) {
    return r == R_GESVDJ_BATCHED || r == R_SYEVJ_BATCHED || r == R_GEQRF_BATCHED ||
           r == R_GETRF_BATCHED || r == R_POTRF_BATCHED;
}

/* ---- the process's handles ---- */

static struct {
    cusolverDnHandle_t sh;
    cusolverDnParams_t params;
    cublasHandle_t bh;
    gesvdjInfo_t gj;
    syevjInfo_t sj;
    cudaStream_t st;
    cudaEvent_t e0, e1;
    void *dwork;
    size_t dwork_bytes;
    void *hwork;
    size_t hwork_bytes;
    int lwork; /* elements, of the legacy API */
    size_t dbytes, hbytes;
    uint64_t t0;
} g;

static const char *solver_name(cusolverStatus_t s) {
    switch (s) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default: return "another cuSOLVER status";
    }
}

#define SOLVER(call)                                                                               \
    do {                                                                                           \
        cusolverStatus_t s_ = (call);                                                              \
        if (s_ != CUSOLVER_STATUS_SUCCESS)                                                         \
            bench_die(NAME, "%s failed at line %d: %s (%d)", #call, __LINE__, solver_name(s_),     \
                      (int)s_);                                                                    \
    } while (0)
#define CUDA(call) GPU_CUDA(NAME, call)
#define BLAS(call) GPU_CUBLAS(NAME, call)

/* Calls the S, D, C or Z variant of a legacy routine for the dtype (void * arguments convert). */
#define T4(dt, S, D, C, Z, ...)                                                                    \
    ((dt) == TF_F32   ? S(__VA_ARGS__)                                                             \
     : (dt) == TF_F64 ? D(__VA_ARGS__)                                                             \
     : (dt) == TF_C64 ? C(__VA_ARGS__)                                                             \
                      : Z(__VA_ARGS__))

static int is_cx(tf_dtype d) { return d == TF_C64 || d == TF_C128; }
static tf_dtype real_of(tf_dtype d) { return d == TF_C64 ? TF_F32 : d == TF_C128 ? TF_F64 : d; }
static cudaDataType cuda_type(tf_dtype d) {
    return d == TF_F32 ? CUDA_R_32F : d == TF_F64 ? CUDA_R_64F : d == TF_C64 ? CUDA_C_32F
                                                                             : CUDA_C_64F;
}

static double elapsed_s(void) { return (double)(bench_now_ns() - g.t0) / 1e9; }

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CUDA(cudaMalloc(&p, bytes ? bytes : 16));
    return p;
}

static void ensure_work(size_t dev, size_t host) {
    dev += 256;
    host += 256;
    if (dev > g.dwork_bytes) {
        if (g.dwork) CUDA(cudaFree(g.dwork));
        g.dwork = dev_alloc(dev);
        g.dwork_bytes = dev;
    }
    if (host > g.hwork_bytes) {
        free(g.hwork);
        g.hwork = gpu_xmalloc(NAME, host);
        g.hwork_bytes = host;
    }
}

/* ---- one problem: b matrices m x n of a dtype, col-major, and its buffers ---- */

typedef struct prob {
    kind k;
    tf_dtype dt;
    int64_t b, m, n, kk; /* kk = min(m, n) */
    size_t es, rs, mat;  /* element, real and matrix bytes */
    double complex *hA;  /* the input, widened */
    void *dA, *dX;       /* the input (never written) and the routine's copy */
    void *dS;            /* values: b x kk (svd), b x n (eigh) */
    void *dU, *dV;       /* svd: U (b x m x m) and V or V^T (b x n x n) */
    void *dTau, *dR;     /* qr: tau (b x kk) and the factor before orgqr */
    int *dInfo;
    int *dPiv32;
    int64_t *dPiv64;
    void **dPtrsA, **dPtrsT; /* pointer arrays of the batched routines (into dX, dTau) */
    double sigma_err;        /* Xgesvdp's h_err_sigma */
} prob;

static double complex load(tf_dtype dt, const void *p, size_t i) {
    switch (dt) {
    case TF_F32: return ((const float *)p)[i];
    case TF_F64: return ((const double *)p)[i];
    case TF_C64: return CMPLX(((const float *)p)[2 * i], ((const float *)p)[2 * i + 1]);
    default: return CMPLX(((const double *)p)[2 * i], ((const double *)p)[2 * i + 1]);
    }
}

static void store(tf_dtype dt, void *p, size_t i, double complex v) {
    switch (dt) {
    case TF_F32: ((float *)p)[i] = (float)creal(v); break;
    case TF_F64: ((double *)p)[i] = creal(v); break;
    case TF_C64:
        ((float *)p)[2 * i] = (float)creal(v);
        ((float *)p)[2 * i + 1] = (float)cimag(v);
        break;
    default:
        ((double *)p)[2 * i] = creal(v);
        ((double *)p)[2 * i + 1] = cimag(v);
        break;
    }
}

/* A device array's values, widened into a new host array (count elements of dt). */
static double complex *fetch(tf_dtype dt, const void *d, size_t count) {
    const size_t es = tf_dtype_size(dt);
    void *h = gpu_xmalloc(NAME, count * es);
    CUDA(cudaMemcpy(h, d, count * es, cudaMemcpyDeviceToHost));
    double complex *w = gpu_xmalloc(NAME, count * sizeof *w);
    for (size_t i = 0; i < count; i++) w[i] = load(dt, h, i);
    free(h);
    return w;
}

static void prob_make(prob *p, kind k, tf_dtype dt, int64_t b, int64_t m, int64_t n) {
    memset(p, 0, sizeof *p);
    p->k = k;
    p->dt = dt;
    p->b = b;
    p->m = m;
    p->n = n;
    p->kk = m < n ? m : n;
    p->es = tf_dtype_size(dt);
    p->rs = tf_dtype_size(real_of(dt));
    p->mat = (size_t)m * (size_t)n * p->es;
    const size_t count = (size_t)b * (size_t)m * (size_t)n;
    void *h = gpu_xmalloc(NAME, count * p->es);
    gpu_fill(real_of(dt), h, count * (is_cx(dt) ? 2 : 1),
             0x1a11u + (uint64_t)k * 7919 + (uint64_t)dt * 131 + (uint64_t)(b * m * 31 + n));
    p->hA = gpu_xmalloc(NAME, count * sizeof *p->hA);
    for (size_t i = 0; i < count; i++) p->hA[i] = load(dt, h, i);
    if (k == K_EIGH || k == K_CHOL) { /* square: Hermitian (plus n I for chol) */
        const int64_t N = n;
        double complex *x = p->hA, *y = gpu_xmalloc(NAME, count * sizeof *y);
        for (int64_t t = 0; t < b; t++)
            for (int64_t j = 0; j < N; j++)
                for (int64_t i = 0; i < N; i++) {
                    const double complex *xm = x + t * N * N;
                    /* Hermitian; for chol plus n I: diagonally dominant, so positive definite. */
                    double complex v = 0.5 * (xm[i + j * N] + conj(xm[j + i * N]));
                    if (i == j) v = creal(v) + (k == K_CHOL ? (double)N : 0.0);
                    y[t * N * N + i + j * N] = v;
                }
        free(p->hA);
        p->hA = y;
    }
    for (size_t i = 0; i < count; i++) { /* rounded to the dtype, and the widened copy with it */
        store(dt, h, i, p->hA[i]);
        p->hA[i] = load(dt, h, i);
    }
    p->dA = dev_alloc(count * p->es);
    p->dX = dev_alloc(count * p->es);
    CUDA(cudaMemcpy(p->dA, h, count * p->es, cudaMemcpyHostToDevice));
    free(h);
    const size_t bs = (size_t)b;
    p->dInfo = dev_alloc(bs * sizeof(int));
    p->dS = dev_alloc(bs * (size_t)n * p->rs);
    if (k == K_SVD) {
        p->dU = dev_alloc(bs * (size_t)m * (size_t)m * p->es);
        p->dV = dev_alloc(bs * (size_t)n * (size_t)n * p->es);
    }
    if (k == K_QR) {
        p->dTau = dev_alloc(bs * (size_t)p->kk * p->es);
        p->dR = dev_alloc(count * p->es);
    }
    if (k == K_LU) {
        p->dPiv32 = dev_alloc(bs * (size_t)n * sizeof(int));
        p->dPiv64 = dev_alloc(bs * (size_t)n * sizeof(int64_t));
    }
    void **hp = gpu_xmalloc(NAME, 2 * bs * sizeof *hp);
    for (int64_t i = 0; i < b; i++) {
        hp[i] = (char *)p->dX + (size_t)i * p->mat;
        hp[b + i] = p->dTau ? (char *)p->dTau + (size_t)i * (size_t)p->kk * p->es : NULL;
    }
    p->dPtrsA = dev_alloc(2 * bs * sizeof *hp);
    p->dPtrsT = p->dPtrsA + b;
    CUDA(cudaMemcpy(p->dPtrsA, hp, 2 * bs * sizeof *hp, cudaMemcpyHostToDevice));
    free(hp);
}

static void prob_free(prob *p) {
    CUDA(cudaStreamSynchronize(g.st));
    void *d[] = {p->dA, p->dX, p->dS, p->dU, p->dV, p->dTau, p->dR, p->dInfo, p->dPiv32,
                 p->dPiv64, p->dPtrsA};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i]) CUDA(cudaFree(d[i]));
    free(p->hA);
}

/* Matrix i of a batch buffer of `per` elements each. */
static void *mat_at(const prob *p, void *base, int64_t i, int64_t per) {
    return (char *)base + (size_t)i * (size_t)per * p->es;
}

/* ---- routines: workspace, then the run ---- */

/* Sizes r's workspace for p; SUCCESS, or the status with which cuSOLVER refuses the case. */
static cusolverStatus_t prepare(prob *p, routine r) {
    const tf_dtype dt = p->dt;
    const cudaDataType ct = cuda_type(dt), rt = cuda_type(real_of(dt));
    const int64_t m = p->m, n = p->n, kk = p->kk;
    const int M = (int)m, N = (int)n, K = (int)kk, B = (int)p->b;
    const cusolverEigMode_t V = CUSOLVER_EIG_MODE_VECTOR;
    const cublasFillMode_t lo = CUBLAS_FILL_MODE_LOWER;
    size_t dev = 0, host = 0;
    int lw = 0, lw2 = 0;
    cusolverStatus_t s = CUSOLVER_STATUS_SUCCESS;
    switch (r) {
    case R_GESVD:
        s = cusolverDnXgesvd_bufferSize(g.sh, g.params, 'S', 'S', m, n, ct, p->dX, m, rt, p->dS,
                                        ct, p->dU, m, ct, p->dV, kk, ct, &dev, &host);
        break;
    case R_GESVDJ:
        s = T4(dt, cusolverDnSgesvdj_bufferSize, cusolverDnDgesvdj_bufferSize,
               cusolverDnCgesvdj_bufferSize, cusolverDnZgesvdj_bufferSize, g.sh, V, 1, M, N, p->dX,
               M, p->dS, p->dU, M, p->dV, N, &lw, g.gj);
        dev = (size_t)lw * p->es;
        break;
    case R_GESVDP:
        s = cusolverDnXgesvdp_bufferSize(g.sh, g.params, V, 1, m, n, ct, p->dX, m, rt, p->dS, ct,
                                         p->dU, m, ct, p->dV, n, ct, &dev, &host);
        break;
    case R_GESVDJ_BATCHED:
        if (m > 32 || n > 32) return CUSOLVER_STATUS_NOT_SUPPORTED;
        s = T4(dt, cusolverDnSgesvdjBatched_bufferSize, cusolverDnDgesvdjBatched_bufferSize,
               cusolverDnCgesvdjBatched_bufferSize, cusolverDnZgesvdjBatched_bufferSize, g.sh, V,
               M, N, p->dX, M, p->dS, p->dU, M, p->dV, N, &lw, g.gj, B);
        dev = (size_t)lw * p->es;
        break;
    case R_SYEVD:
        s = cusolverDnXsyevd_bufferSize(g.sh, g.params, V, lo, n, ct, p->dX, n, rt, p->dS, ct, &dev,
                                        &host);
        break;
    case R_SYEVJ:
        s = T4(dt, cusolverDnSsyevj_bufferSize, cusolverDnDsyevj_bufferSize,
               cusolverDnCheevj_bufferSize, cusolverDnZheevj_bufferSize, g.sh, V, lo, N, p->dX, N,
               p->dS, &lw, g.sj);
        dev = (size_t)lw * p->es;
        break;
    case R_SYEVJ_BATCHED:
        if (n > 32) return CUSOLVER_STATUS_NOT_SUPPORTED;
        s = T4(dt, cusolverDnSsyevjBatched_bufferSize, cusolverDnDsyevjBatched_bufferSize,
               cusolverDnCheevjBatched_bufferSize, cusolverDnZheevjBatched_bufferSize, g.sh, V, lo,
               N, p->dX, N, p->dS, &lw, g.sj, B);
        dev = (size_t)lw * p->es;
        break;
    case R_GEQRF_ORGQR:
    case R_GEQRF:
        s = cusolverDnXgeqrf_bufferSize(g.sh, g.params, m, n, ct, p->dX, m, ct, p->dTau, ct, &dev,
                                        &host);
        if (s != CUSOLVER_STATUS_SUCCESS || r == R_GEQRF) break;
        s = T4(dt, cusolverDnSorgqr_bufferSize, cusolverDnDorgqr_bufferSize,
               cusolverDnCungqr_bufferSize, cusolverDnZungqr_bufferSize, g.sh, M, K, K, p->dX, M,
               p->dTau, &lw2);
        lw = lw2;
        if ((size_t)lw2 * p->es > dev) dev = (size_t)lw2 * p->es;
        break;
    case R_GETRF:
        s = cusolverDnXgetrf_bufferSize(g.sh, g.params, n, n, ct, p->dX, n, ct, &dev, &host);
        break;
    case R_POTRF:
        s = cusolverDnXpotrf_bufferSize(g.sh, g.params, lo, n, ct, p->dX, n, ct, &dev, &host);
        break;
    case R_GEQRF_BATCHED:
    case R_GETRF_BATCHED:
    case R_POTRF_BATCHED: break; /* no workspace */
    }
    if (s != CUSOLVER_STATUS_SUCCESS) return s;
    g.lwork = lw;
    g.dbytes = dev;
    g.hbytes = host;
    ensure_work(dev, host);
    return CUSOLVER_STATUS_SUCCESS;
}

/* Enqueues r on p's copy of the input: one call, or one per matrix. */
static void enqueue(prob *p, routine r) {
    const tf_dtype dt = p->dt;
    const cudaDataType ct = cuda_type(dt), rt = cuda_type(real_of(dt));
    const int64_t m = p->m, n = p->n, kk = p->kk, b = p->b, mn = m * n;
    const int M = (int)m, N = (int)n, K = (int)kk, B = (int)b;
    const cusolverEigMode_t V = CUSOLVER_EIG_MODE_VECTOR;
    const cublasFillMode_t lo = CUBLAS_FILL_MODE_LOWER;
    CUDA(cudaMemcpyAsync(p->dX, p->dA, (size_t)b * p->mat, cudaMemcpyDeviceToDevice, g.st));
    int hinfo = 0;
    switch (r) {
    case R_GESVDJ_BATCHED:
        SOLVER(T4(dt, cusolverDnSgesvdjBatched, cusolverDnDgesvdjBatched, cusolverDnCgesvdjBatched,
                  cusolverDnZgesvdjBatched, g.sh, V, M, N, p->dX, M, p->dS, p->dU, M, p->dV, N,
                  g.dwork, g.lwork, p->dInfo, g.gj, B));
        return;
    case R_SYEVJ_BATCHED:
        SOLVER(T4(dt, cusolverDnSsyevjBatched, cusolverDnDsyevjBatched, cusolverDnCheevjBatched,
                  cusolverDnZheevjBatched, g.sh, V, lo, N, p->dX, N, p->dS, g.dwork, g.lwork,
                  p->dInfo, g.sj, B));
        return;
    case R_GEQRF_BATCHED:
        switch (dt) {
        case TF_F32:
            BLAS(cublasSgeqrfBatched(g.bh, M, N, (float *const *)p->dPtrsA, M,
                                     (float *const *)p->dPtrsT, &hinfo, B));
            break;
        case TF_F64:
            BLAS(cublasDgeqrfBatched(g.bh, M, N, (double *const *)p->dPtrsA, M,
                                     (double *const *)p->dPtrsT, &hinfo, B));
            break;
        case TF_C64:
            BLAS(cublasCgeqrfBatched(g.bh, M, N, (cuComplex *const *)p->dPtrsA, M,
                                     (cuComplex *const *)p->dPtrsT, &hinfo, B));
            break;
        default:
            BLAS(cublasZgeqrfBatched(g.bh, M, N, (cuDoubleComplex *const *)p->dPtrsA, M,
                                     (cuDoubleComplex *const *)p->dPtrsT, &hinfo, B));
            break;
        }
        if (hinfo != 0) bench_die(NAME, "geqrfBatched refused its argument %d", -hinfo);
        return;
    case R_GETRF_BATCHED:
        switch (dt) {
        case TF_F32:
            BLAS(cublasSgetrfBatched(g.bh, N, (float *const *)p->dPtrsA, N, p->dPiv32, p->dInfo,
                                     B));
            break;
        case TF_F64:
            BLAS(cublasDgetrfBatched(g.bh, N, (double *const *)p->dPtrsA, N, p->dPiv32, p->dInfo,
                                     B));
            break;
        case TF_C64:
            BLAS(cublasCgetrfBatched(g.bh, N, (cuComplex *const *)p->dPtrsA, N, p->dPiv32,
                                     p->dInfo, B));
            break;
        default:
            BLAS(cublasZgetrfBatched(g.bh, N, (cuDoubleComplex *const *)p->dPtrsA, N, p->dPiv32,
                                     p->dInfo, B));
            break;
        }
        return;
    case R_POTRF_BATCHED:
        switch (dt) {
        case TF_F32:
            SOLVER(cusolverDnSpotrfBatched(g.sh, lo, N, (float **)p->dPtrsA, N, p->dInfo, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDpotrfBatched(g.sh, lo, N, (double **)p->dPtrsA, N, p->dInfo, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCpotrfBatched(g.sh, lo, N, (cuComplex **)p->dPtrsA, N, p->dInfo, B));
            break;
        default:
            SOLVER(cusolverDnZpotrfBatched(g.sh, lo, N, (cuDoubleComplex **)p->dPtrsA, N,
                                           p->dInfo, B));
            break;
        }
        return;
    default: break;
    }
    for (int64_t i = 0; i < b; i++) {
        void *x = mat_at(p, p->dX, i, mn), *s = (char *)p->dS + (size_t)(i * n) * p->rs;
        int *info = p->dInfo + i;
        switch (r) {
        case R_GESVD:
            SOLVER(cusolverDnXgesvd(g.sh, g.params, 'S', 'S', m, n, ct, x, m, rt, s, ct,
                                    mat_at(p, p->dU, i, m * kk), m, ct,
                                    mat_at(p, p->dV, i, kk * n), kk, ct, g.dwork, g.dbytes,
                                    g.hwork, g.hbytes, info));
            break;
        case R_GESVDJ:
            SOLVER(T4(dt, cusolverDnSgesvdj, cusolverDnDgesvdj, cusolverDnCgesvdj,
                      cusolverDnZgesvdj, g.sh, V, 1, M, N, x, M, s, mat_at(p, p->dU, i, m * kk),
                      M, mat_at(p, p->dV, i, n * kk), N, g.dwork, g.lwork, info, g.gj));
            break;
        case R_GESVDP:
            SOLVER(cusolverDnXgesvdp(g.sh, g.params, V, 1, m, n, ct, x, m, rt, s, ct,
                                     mat_at(p, p->dU, i, m * kk), m, ct,
                                     mat_at(p, p->dV, i, n * kk), n, ct, g.dwork, g.dbytes,
                                     g.hwork, g.hbytes, info, &p->sigma_err));
            break;
        case R_SYEVD:
            SOLVER(cusolverDnXsyevd(g.sh, g.params, V, lo, n, ct, x, n, rt, s, ct, g.dwork,
                                    g.dbytes, g.hwork, g.hbytes, info));
            break;
        case R_SYEVJ:
            SOLVER(T4(dt, cusolverDnSsyevj, cusolverDnDsyevj, cusolverDnCheevj, cusolverDnZheevj,
                      g.sh, V, lo, N, x, N, s, g.dwork, g.lwork, info, g.sj));
            break;
        case R_GEQRF_ORGQR:
        case R_GEQRF: {
            void *tau = mat_at(p, p->dTau, i, kk);
            SOLVER(cusolverDnXgeqrf(g.sh, g.params, m, n, ct, x, m, ct, tau, ct, g.dwork,
                                    g.dbytes, g.hwork, g.hbytes, info));
            if (r == R_GEQRF) break;
            /* R is the factor's upper triangle: kept before orgqr overwrites it. */
            CUDA(cudaMemcpyAsync(mat_at(p, p->dR, i, mn), x, p->mat, cudaMemcpyDeviceToDevice,
                                 g.st));
            SOLVER(T4(dt, cusolverDnSorgqr, cusolverDnDorgqr, cusolverDnCungqr, cusolverDnZungqr,
                      g.sh, M, K, K, x, M, tau, g.dwork, g.lwork, info));
            break;
        }
        case R_GETRF:
            SOLVER(cusolverDnXgetrf(g.sh, g.params, n, n, ct, x, n, p->dPiv64 + i * n, ct, g.dwork,
                                    g.dbytes, g.hwork, g.hbytes, info));
            break;
        case R_POTRF:
            SOLVER(cusolverDnXpotrf(g.sh, g.params, lo, n, ct, x, n, ct, g.dwork, g.dbytes,
                                    g.hwork, g.hbytes, info));
            break;
        default: bench_die(NAME, "routine %d is not a per-matrix routine", (int)r);
        }
    }
}

/* One timed run (the copy of the input included); ms on the stream, by CUDA events. */
static double run_once(prob *p, routine r) {
    CUDA(cudaEventRecord(g.e0, g.st));
    enqueue(p, r);
    CUDA(cudaEventRecord(g.e1, g.st));
    CUDA(cudaEventSynchronize(g.e1));
    CUDA(cudaGetLastError());
    float ms = 0;
    CUDA(cudaEventElapsedTime(&ms, g.e0, g.e1));
    return ms;
}

/* ---- accuracy ---- */

/* Frobenius norm of the host values. */
static double fro(const double complex *x, size_t count) {
    double s = 0;
    for (size_t i = 0; i < count; i++) s += creal(x[i] * conj(x[i]));
    return sqrt(s);
}

/* The real values dS (count of them), on the host. */
static double *fetch_real(const prob *p, size_t count) {
    double complex *w = fetch(real_of(p->dt), p->dS, count);
    double *r = gpu_xmalloc(NAME, count * sizeof *r);
    for (size_t i = 0; i < count; i++) r[i] = creal(w[i]);
    free(w);
    return r;
}

/* cublas<t>gemmStridedBatched for the dtype, with real alpha and beta. */
static void gemm_sb(tf_dtype dt, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                    int64_t k, double alpha, const void *A, int64_t lda, int64_t sa, const void *B,
                    int64_t ldb, int64_t sb, double beta, void *C, int64_t ldc, int64_t sc,
                    int64_t batch) {
    const int M = (int)m, N = (int)n, K = (int)k, LA = (int)lda, LB = (int)ldb, LC = (int)ldc,
              BT = (int)batch;
    switch (dt) {
    case TF_F32: {
        const float a = (float)alpha, be = (float)beta;
        BLAS(cublasSgemmStridedBatched(g.bh, ta, tb, M, N, K, &a, A, LA, sa, B, LB, sb, &be, C,
                                       LC, sc, BT));
        break;
    }
    case TF_F64:
        BLAS(cublasDgemmStridedBatched(g.bh, ta, tb, M, N, K, &alpha, A, LA, sa, B, LB, sb, &beta,
                                       C, LC, sc, BT));
        break;
    case TF_C64: {
        const cuComplex a = {(float)alpha, 0}, be = {(float)beta, 0};
        BLAS(cublasCgemmStridedBatched(g.bh, ta, tb, M, N, K, &a, A, LA, sa, B, LB, sb, &be, C,
                                       LC, sc, BT));
        break;
    }
    default: {
        const cuDoubleComplex a = {alpha, 0}, be = {beta, 0};
        BLAS(cublasZgemmStridedBatched(g.bh, ta, tb, M, N, K, &a, A, LA, sa, B, LB, sb, &be, C,
                                       LC, sc, BT));
        break;
    }
    }
}

/* C = A diag(x) for an m x n A (ld m); x (n real values on the device) made the dtype first. */
static void scale_columns(tf_dtype dt, int64_t m, int64_t n, const void *A, const void *xr,
                          void *C) {
    double complex *w = fetch(real_of(dt), xr, (size_t)n);
    const size_t es = tf_dtype_size(dt);
    void *h = gpu_xmalloc(NAME, (size_t)n * es);
    for (int64_t i = 0; i < n; i++) store(dt, h, (size_t)i, w[i]);
    void *x = dev_alloc((size_t)n * es);
    CUDA(cudaMemcpy(x, h, (size_t)n * es, cudaMemcpyHostToDevice));
    const int M = (int)m, N = (int)n;
    const cublasSideMode_t R = CUBLAS_SIDE_RIGHT;
    switch (dt) {
    case TF_F32: BLAS(cublasSdgmm(g.bh, R, M, N, A, M, x, 1, C, M)); break;
    case TF_F64: BLAS(cublasDdgmm(g.bh, R, M, N, A, M, x, 1, C, M)); break;
    case TF_C64: BLAS(cublasCdgmm(g.bh, R, M, N, A, M, x, 1, C, M)); break;
    default: BLAS(cublasZdgmm(g.bh, R, M, N, A, M, x, 1, C, M)); break;
    }
    CUDA(cudaStreamSynchronize(g.st));
    CUDA(cudaFree(x));
    free(h);
    free(w);
}

/* ||x||_2 of count elements on the device (cuBLAS, host pointer mode: waits). */
static double dev_norm(tf_dtype dt, const void *x, int64_t count) {
    const int N = (int)count;
    float f = 0;
    double d = 0;
    switch (dt) {
    case TF_F32: BLAS(cublasSnrm2(g.bh, N, x, 1, &f)); return f;
    case TF_F64: BLAS(cublasDnrm2(g.bh, N, x, 1, &d)); return d;
    case TF_C64: BLAS(cublasScnrm2(g.bh, N, x, 1, &f)); return f;
    default: BLAS(cublasDznrm2(g.bh, N, x, 1, &d)); return d;
    }
}

/* The largest |G - I| entry of b Gram matrices k x k on the device. */
static double gram_error(tf_dtype dt, const void *G, int64_t b, int64_t k) {
    double complex *h = fetch(dt, G, (size_t)(b * k * k));
    double worst = 0;
    for (int64_t t = 0; t < b; t++)
        for (int64_t j = 0; j < k; j++)
            for (int64_t i = 0; i < k; i++) {
                const double e = cabs(h[t * k * k + i + j * k] - (i == j ? 1.0 : 0.0));
                if (e > worst) worst = e;
            }
    free(h);
    return worst;
}

/*
 * The SVD's reconstruction error on the device: U (m x kk per matrix, ld m,
 * the matrices one after another) times diag(S) by dgmm over the batch as one
 * m x (b kk) matrix, then U S V^H - A by a batched GEMM, with V^T (kk x n, ld
 * kk; vt 1) or V (n x kk, ld n); ||.||_F / ||A||_F over the batch. *orth: the
 * largest |U^H U - I| entry.
 */
static double svd_error(const prob *p, int vt, double *orth) {
    const int64_t b = p->b, m = p->m, n = p->n, kk = p->kk;
    const tf_dtype dt = p->dt;
    void *us = dev_alloc((size_t)(b * m * kk) * p->es), *c = dev_alloc((size_t)b * p->mat);
    void *gr = dev_alloc((size_t)(b * kk * kk) * p->es);
    scale_columns(dt, m, b * kk, p->dU, p->dS, us);
    CUDA(cudaMemcpyAsync(c, p->dA, (size_t)b * p->mat, cudaMemcpyDeviceToDevice, g.st));
    if (vt)
        gemm_sb(dt, CUBLAS_OP_N, CUBLAS_OP_N, m, n, kk, 1.0, us, m, m * kk, p->dV, kk, kk * n,
                -1.0, c, m, m * n, b);
    else
        gemm_sb(dt, CUBLAS_OP_N, CUBLAS_OP_C, m, n, kk, 1.0, us, m, m * kk, p->dV, n, n * kk,
                -1.0, c, m, m * n, b);
    gemm_sb(dt, CUBLAS_OP_C, CUBLAS_OP_N, kk, kk, m, 1.0, p->dU, m, m * kk, p->dU, m, m * kk, 0.0,
            gr, kk, kk * kk, b);
    const double err = dev_norm(dt, c, b * m * n) / dev_norm(dt, p->dA, b * m * n);
    *orth = gram_error(dt, gr, b, kk);
    CUDA(cudaFree(us));
    CUDA(cudaFree(c));
    CUDA(cudaFree(gr));
    return err;
}

/* eigh on the device: ||A V - V W||_F / ||A||_F, V in dX (n x n per matrix), W in dS. */
static double eigh_error(const prob *p, double *orth) {
    const int64_t b = p->b, n = p->n;
    const tf_dtype dt = p->dt;
    void *c = dev_alloc((size_t)b * p->mat), *gr = dev_alloc((size_t)b * p->mat);
    scale_columns(dt, n, b * n, p->dX, p->dS, c);
    gemm_sb(dt, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, 1.0, p->dA, n, n * n, p->dX, n, n * n, -1.0, c,
            n, n * n, b);
    gemm_sb(dt, CUBLAS_OP_C, CUBLAS_OP_N, n, n, n, 1.0, p->dX, n, n * n, p->dX, n, n * n, 0.0, gr,
            n, n * n, b);
    const double err = dev_norm(dt, c, b * n * n) / dev_norm(dt, p->dA, b * n * n);
    *orth = gram_error(dt, gr, b, n);
    CUDA(cudaFree(c));
    CUDA(cudaFree(gr));
    return err;
}

/* The host checks of a batch look at every matrix of a small batch, every 8th of a large one. */
static int64_t check_step(const prob *p) { return p->b >= 256 ? 8 : 1; }

/* ||A||_F over the matrices the host checks look at. */
static double fro_checked(const prob *p) {
    const size_t mn = (size_t)(p->m * p->n);
    double s = 0;
    for (int64_t t = 0; t < p->b; t += check_step(p)) {
        const double f = fro(p->hA + (size_t)t * mn, mn);
        s += f * f;
    }
    return sqrt(s);
}

/*
 * qr: with Q (orgqr in dX, R in dR) ||Q R - A|| / ||A||; R alone (in dX)
 * ||R^H R - A^H A|| / ||A||^2.
 */
static double qr_error(const prob *p, int with_q) {
    const int64_t b = p->b, m = p->m, n = p->n, kk = p->kk;
    double complex *X = fetch(p->dt, p->dX, (size_t)(b * m * n));
    double complex *Rf = with_q ? fetch(p->dt, p->dR, (size_t)(b * m * n)) : X;
    double err = 0, a2 = fro_checked(p);
    for (int64_t t = 0; t < b; t += check_step(p)) {
        const double complex *x = X + t * m * n, *rf = Rf + t * m * n, *a = p->hA + t * m * n;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < (with_q ? m : n); i++) {
                double complex y = 0;
                if (with_q) { /* (Q R)[i, j] = sum over l <= j of Q[i, l] R[l, j] */
                    for (int64_t l = 0; l <= j && l < kk; l++) y += x[i + l * m] * rf[l + j * m];
                    y -= a[i + j * m];
                } else { /* (R^H R - A^H A)[i, j] */
                    for (int64_t l = 0; l <= i && l <= j && l < kk; l++)
                        y += conj(x[l + i * m]) * x[l + j * m];
                    for (int64_t l = 0; l < m; l++) y -= conj(a[l + i * m]) * a[l + j * m];
                }
                err += creal(y * conj(y));
            }
    }
    if (with_q) free(Rf);
    free(X);
    return with_q ? sqrt(err) / a2 : sqrt(err) / (a2 * a2);
}

/* lu: ||P A - L U|| / ||A|| with LAPACK's 1-based row interchanges (32- or 64-bit pivots). */
static double lu_error(const prob *p, int piv32) {
    const int64_t b = p->b, n = p->n;
    double complex *X = fetch(p->dt, p->dX, (size_t)(b * n * n));
    int64_t *piv = gpu_xmalloc(NAME, (size_t)(b * n) * sizeof *piv);
    if (piv32) {
        int *q = gpu_xmalloc(NAME, (size_t)(b * n) * sizeof *q);
        CUDA(cudaMemcpy(q, p->dPiv32, (size_t)(b * n) * sizeof *q, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < b * n; i++) piv[i] = q[i];
        free(q);
    } else {
        CUDA(cudaMemcpy(piv, p->dPiv64, (size_t)(b * n) * sizeof *piv, cudaMemcpyDeviceToHost));
    }
    double complex *pa = gpu_xmalloc(NAME, (size_t)(n * n) * sizeof *pa);
    double err = 0;
    for (int64_t t = 0; t < b; t += check_step(p)) {
        const double complex *x = X + t * n * n;
        memcpy(pa, p->hA + t * n * n, (size_t)(n * n) * sizeof *pa);
        for (int64_t i = 0; i < n; i++) { /* row i and row piv[i] - 1, in order */
            const int64_t r = piv[t * n + i] - 1;
            if (r < 0 || r >= n) bench_die(NAME, "lu: pivot %lld of matrix %lld is %lld",
                                           (long long)i, (long long)t, (long long)(r + 1));
            for (int64_t j = 0; r != i && j < n; j++) {
                const double complex tmp = pa[i + j * n];
                pa[i + j * n] = pa[r + j * n];
                pa[r + j * n] = tmp;
            }
        }
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < n; i++) {
                double complex y = -pa[i + j * n];
                for (int64_t l = 0; l <= i && l <= j; l++)
                    y += (l == i ? 1.0 : x[i + l * n]) * x[l + j * n];
                err += creal(y * conj(y));
            }
    }
    free(pa);
    free(piv);
    free(X);
    return sqrt(err) / fro_checked(p);
}

/* chol (lower): ||L L^H - A|| / ||A||, over the lower triangle (A is Hermitian). */
static double chol_error(const prob *p) {
    const int64_t b = p->b, n = p->n;
    double complex *X = fetch(p->dt, p->dX, (size_t)(b * n * n));
    double err = 0;
    for (int64_t t = 0; t < b; t += check_step(p)) {
        const double complex *x = X + t * n * n, *a = p->hA + t * n * n;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = j; i < n; i++) {
                double complex y = -a[i + j * n];
                for (int64_t l = 0; l <= j; l++) y += x[i + l * n] * conj(x[j + l * n]);
                err += (i == j ? 1 : 2) * creal(y * conj(y));
            }
    }
    free(X);
    return sqrt(err) / fro_checked(p);
}

/* How many matrices have an info word that is not 0, and the first such word. */
static int64_t bad_infos(const prob *p, routine r, int *first) {
    if (r == R_GEQRF_BATCHED) return 0; /* its info is a host word, checked at the call */
    int *h = gpu_xmalloc(NAME, (size_t)p->b * sizeof *h);
    CUDA(cudaMemcpy(h, p->dInfo, (size_t)p->b * sizeof *h, cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int64_t i = 0; i < p->b; i++)
        if (h[i] != 0 && bad++ == 0) *first = h[i];
    free(h);
    return bad;
}

/* ---- measurements ---- */

static int kind_selected(kind k) {
    const char *list = getenv("TENFERRO_ROUTINES_KINDS");
    if (!list || !list[0]) return 1;
    const size_t len = strlen(kind_name[k]);
    for (const char *q = list; *q;) {
        const size_t w = strcspn(q, ", ");
        if (w == len && strncmp(q, kind_name[k], len) == 0) return 1;
        q += w;
        q += strspn(q, ", ");
    }
    return 0;
}

static void routine_line(const prob *p, routine r, double ms, double err) {
    printf("ROUTINE kind=%s dtype=%s shape=%lldx%lldx%lld routine=%s%s ms=%.4g err=%.3g\n",
           kind_name[p->k], tf_dtype_name(p->dt), (long long)p->b, (long long)p->m,
           (long long)p->n, routine_base[r], p->b > 1 && !batched_routine(r) ? "_loop" : "", ms,
           err);
    fflush(stdout);
}

static void measure(prob *p, routine r) {
    char what[96];
    snprintf(what, sizeof what, "%s %s %lldx%lldx%lld %s", kind_name[p->k], tf_dtype_name(p->dt),
             (long long)p->b, (long long)p->m, (long long)p->n, routine_base[r]);
    if (elapsed_s() > DEADLINE_S) {
        printf("# %s: skipped (the probe's %.0f s are spent)\n", what, DEADLINE_S);
        routine_line(p, r, NAN, NAN);
        return;
    }
    const cusolverStatus_t s = prepare(p, r);
    if (s != CUSOLVER_STATUS_SUCCESS) {
        printf("# %s: cuSOLVER refuses it: %s (%d)\n", what, solver_name(s), (int)s);
        routine_line(p, r, NAN, NAN);
        return;
    }
    double t[REPS];
    const double warm = run_once(p, r);
    int reps = 0;
    if (warm <= SLOW_RUN_MS)
        for (; reps < REPS; reps++) t[reps] = run_once(p, r);
    const double ms = reps ? bench_summary(t, (size_t)reps, BENCH_MEDIAN) : warm;
    double err = NAN, orth = NAN;
    switch (r) {
    case R_GESVD: err = svd_error(p, 1, &orth); break;
    case R_GESVDJ:
    case R_GESVDP:
    case R_GESVDJ_BATCHED: err = svd_error(p, 0, &orth); break; /* batched: square, full = econ */
    case R_SYEVD:
    case R_SYEVJ:
    case R_SYEVJ_BATCHED: err = eigh_error(p, &orth); break;
    case R_GEQRF_ORGQR: err = qr_error(p, 1); break;
    case R_GEQRF:
    case R_GEQRF_BATCHED: err = qr_error(p, 0); break;
    case R_GETRF: err = lu_error(p, 0); break;
    case R_GETRF_BATCHED: err = lu_error(p, 1); break;
    case R_POTRF:
    case R_POTRF_BATCHED: err = chol_error(p); break;
    }
    int first = 0;
    const int64_t bad = bad_infos(p, r, &first);
    char extra[160] = "";
    if (!isnan(orth)) snprintf(extra, sizeof extra, "; max |V^H V - I| %.2g", orth);
    if (r == R_GESVDP)
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                 "; its error estimate %.2g", p->sigma_err);
    printf("# %s: %s %.4g ms (warm-up %.4g ms); err %.3g%s", what,
           reps ? "median of 5" : "one run only (over 1 s):", ms, warm, err, extra);
    if (bad) printf("; %lld matrices with info != 0 (first %d)", (long long)bad, first);
    printf("\n");
    routine_line(p, r, ms, err);
}

/* One problem through each of its routines. */
static void survey(kind k, tf_dtype dt, int64_t b, int64_t m, int64_t n, int nr,
                   const routine *rs) {
    if (!kind_selected(k)) return;
    if (elapsed_s() > DEADLINE_S) { /* no point making the input */
        prob q = {.k = k, .dt = dt, .b = b, .m = m, .n = n};
        for (int i = 0; i < nr; i++) {
            printf("# %s %s %lldx%lldx%lld %s: skipped (the probe's %.0f s are spent)\n",
                   kind_name[k], tf_dtype_name(dt), (long long)b, (long long)m, (long long)n,
                   routine_base[rs[i]], DEADLINE_S);
            routine_line(&q, rs[i], NAN, NAN);
        }
        return;
    }
    prob p;
    prob_make(&p, k, dt, b, m, n);
    for (int i = 0; i < nr; i++) measure(&p, rs[i]);
    prob_free(&p);
}

#define SURVEY(k, dt, b, m, n, ...)                                                                \
    do {                                                                                           \
        const routine rs_[] = {__VA_ARGS__};                                                       \
        survey(k, dt, b, m, n, (int)(sizeof rs_ / sizeof rs_[0]), rs_);                            \
    } while (0)

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    g.t0 = bench_now_ns();
    struct cudaDeviceProp prop;
    CUDA(cudaSetDevice(0));
    CUDA(cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cusolverGetVersion(&ver);
    printf("# linalg-routines: %s, cuSOLVER %d; median of %d CUDA-event timings after a warm-up "
           "(one run when over %.0f ms); no measurement starts after %.0f s\n",
           prop.name, ver, REPS, SLOW_RUN_MS, DEADLINE_S);
    fflush(stdout);
    SOLVER(cusolverDnCreate(&g.sh));
    SOLVER(cusolverDnCreateParams(&g.params));
    SOLVER(cusolverDnCreateGesvdjInfo(&g.gj));
    SOLVER(cusolverDnCreateSyevjInfo(&g.sj));
    BLAS(cublasCreate(&g.bh));
    CUDA(cudaStreamCreateWithFlags(&g.st, cudaStreamNonBlocking));
    SOLVER(cusolverDnSetStream(g.sh, g.st));
    BLAS(cublasSetStream(g.bh, g.st));
    CUDA(cudaEventCreate(&g.e0));
    CUDA(cudaEventCreate(&g.e1));

    static const tf_dtype two[2] = {TF_F64, TF_C128};
    /* The batched factorizations (the daemon's batched QR, LU and Cholesky bounds). */
    for (int d = 0; d < 2; d++)
        for (int64_t n = 32; n <= 128; n *= 2) {
            if (n <= 64) SURVEY(K_QR, two[d], 512, n, n, R_GEQRF_ORGQR, R_GEQRF, R_GEQRF_BATCHED);
            SURVEY(K_LU, two[d], 512, n, n, R_GETRF, R_GETRF_BATCHED);
            SURVEY(K_CHOL, two[d], 512, n, n, R_POTRF, R_POTRF_BATCHED);
        }
    /* Batched SVD and eigh. */
    for (int d = 0; d < 2; d++) {
        SURVEY(K_SVD, two[d], 512, 16, 16, R_GESVDJ_BATCHED, R_GESVDJ, R_GESVD);
        SURVEY(K_SVD, two[d], 512, 32, 32, R_GESVDJ_BATCHED, R_GESVDJ, R_GESVD);
        SURVEY(K_SVD, two[d], 64, 64, 64, R_GESVDJ, R_GESVD);
        SURVEY(K_EIGH, two[d], 512, 32, 32, R_SYEVJ_BATCHED, R_SYEVJ, R_SYEVD);
    }
    /* One matrix: SVD up to 1024 and the tall one, f32 at 1024; eigh 256 and 1024. */
    static const int64_t svd_sizes[] = {64, 256, 512, 1024};
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < sizeof svd_sizes / sizeof svd_sizes[0]; i++)
            SURVEY(K_SVD, two[d], 1, svd_sizes[i], svd_sizes[i], R_GESVD, R_GESVDJ, R_GESVDP);
        SURVEY(K_SVD, two[d], 1, 1024, 256, R_GESVD, R_GESVDJ, R_GESVDP);
    }
    SURVEY(K_SVD, TF_F32, 1, 1024, 1024, R_GESVD, R_GESVDJ, R_GESVDP);
    for (int d = 0; d < 2; d++) {
        SURVEY(K_EIGH, two[d], 1, 256, 256, R_SYEVD, R_SYEVJ);
        SURVEY(K_EIGH, two[d], 1, 1024, 1024, R_SYEVD, R_SYEVJ);
    }
    /*
     * The largest last, the slowest (Jacobi at 4096) at the very end: what
     * the deadline cuts, it cuts there.
     */
    for (int d = 0; d < 2; d++) SURVEY(K_EIGH, two[d], 1, 4096, 4096, R_SYEVD);
    for (int d = 0; d < 2; d++) SURVEY(K_SVD, two[d], 1, 2048, 2048, R_GESVDP, R_GESVDJ, R_GESVD);
    for (int d = 0; d < 2; d++) SURVEY(K_EIGH, two[d], 1, 4096, 4096, R_SYEVJ);

    free(g.hwork);
    if (g.dwork) CUDA(cudaFree(g.dwork));
    CUDA(cudaEventDestroy(g.e0));
    CUDA(cudaEventDestroy(g.e1));
    SOLVER(cusolverDnDestroySyevjInfo(g.sj));
    SOLVER(cusolverDnDestroyGesvdjInfo(g.gj));
    SOLVER(cusolverDnDestroyParams(g.params));
    SOLVER(cusolverDnDestroy(g.sh));
    BLAS(cublasDestroy(g.bh));
    CUDA(cudaStreamDestroy(g.st));
    printf("# linalg-routines: done in %.1f s\n", elapsed_s());
    return 0;
}
