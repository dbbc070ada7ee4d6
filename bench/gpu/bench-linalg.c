/*
 * bench-linalg: decompositions through the daemon on the GPU against
 * cuSOLVER in this process on the same GPU, and which cuSOLVER routine is
 * the fastest for each case.
 *
 *   svd_f64_1024               reduced SVD of a 1024 x 1024 f64 matrix
 *   svd_c128_1024              the same in c128
 *   eigh_f64_4096              values and vectors of a 4096 x 4096 symmetric f64 matrix
 *   qr_f64_4096                reduced QR of a 4096 x 4096 f64 matrix
 *   svd_batched_f64_512x64x64  reduced SVDs of 512 matrices of 64 x 64 (one [512, 64, 64] tensor)
 *     tenferrod: one held session; the matrix (uniform in [-0.5, 0.5); for
 *                eigh made symmetric) is uploaded once; each iteration is
 *                tf_session_with queueing the decomposition (tf_view_svd,
 *                tf_view_eigh, tf_view_qr), then tf_session_synchronize; the
 *                results are freed after the clock stops.
 *     baseline:  the cuSOLVER routine in this process (its own context,
 *                handle and stream; workspaces allocated before timing), each
 *                iteration copying the input into a scratch buffer first
 *                (cudaMemcpyAsync: the routines overwrite it), then the
 *                routine, then cudaStreamSynchronize:
 *                  svd:     cusolverDnXgesvd jobu = jobvt = 'S';
 *                  eigh:    cusolverDnXsyevd, vectors;
 *                  qr:      cusolverDnXgeqrf, the factor copied (R is its upper
 *                           triangle), then cusolverDn?orgqr forming Q;
 *                  batched: cusolverDnDgesvdjBatched where it takes the size
 *                           (cuSOLVER documents m, n <= 32), else the first
 *                           routine of the survey below that it takes, in its
 *                           order (gesvdj_loop first).
 *                $TENFERRO_BENCH_LINALG_BASELINE picks others, so the baseline
 *                can be the routine the daemon's backend calls: a comma list
 *                of KIND=ROUTINE with KIND svd, svd_batched, eigh or qr and a
 *                routine name of the ROUTINE lines (svd=gesvdj,eigh=syevj).
 *                The row-major input is passed as it lies: cuSOLVER reads it
 *                as its transpose, with the same singular values (for eigh
 *                the same matrix); for QR the baseline factors a column-major
 *                copy of A itself, so R's diagonals can be compared.
 *     Median of ITERS iterations after WARMUP, the sides alternating; ms.
 *
 *   ROUTINE <case> <routine>=<ms>: for each case the candidate cuSOLVER
 *     routines, in-process as the baseline, median of SURVEY_REPS after one
 *     warm-up: svd: gesvd (Xgesvd), gesvdj (?gesvdj, econ, default tolerance
 *     and sweeps), gesvdp (Xgesvdp); eigh: syevd (Xsyevd), syevj (?syevj,
 *     default tolerance and sweeps); qr: geqrf+orgqr; batched: gesvdjBatched,
 *     a loop over the 512 matrices of gesvdj, gesvd and gesvdp (gesvdj_loop,
 *     gesvd_loop, gesvdp_loop), and gesvdaStridedBatched (rank n: an
 *     approximation, its residual printed). A routine cuSOLVER refuses for
 *     the case prints nan, and a '#' line says why. Each routine's values are
 *     compared with the baseline's on a '#' line.
 *     $TENFERRO_BENCH_LINALG_SURVEY=0 leaves them out.
 *
 * Checks: the daemon's results against the promises of
 * include/tenferro/linalg.h (bench/linalg-check.c: residuals and
 * orthonormality on sampled columns of every matrix, ordering, gauge, R's
 * zeros), and its values (S, W, |R's diagonal|) against the baseline's.
 * $TENFERRO_BENCH_LINALG_CASES (comma-separated names) runs only those cases.
 *
 * This process initialises CUDA and never forks.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "bench/gpu/gpu-common.h"
#include "bench/linalg-check.h"

#define WARMUP 1
#define ITERS 5
#define SURVEY_REPS 3
#define MAX_SURVEY 5

static const char *const NAME = "bench-linalg";

typedef enum kind { K_SVD, K_EIGH, K_QR } kind;

typedef enum routine {
    R_GESVD,          /* cusolverDnXgesvd, per matrix */
    R_GESVDJ,         /* cusolverDn?gesvdj, per matrix */
    R_GESVDP,         /* cusolverDnXgesvdp, per matrix */
    R_GESVDJ_BATCHED, /* cusolverDn?gesvdjBatched, one call */
    R_GESVDA_BATCHED, /* cusolverDn?gesvdaStridedBatched, one call */
    R_SYEVD,          /* cusolverDnXsyevd */
    R_SYEVJ,          /* cusolverDn?syevj */
    R_GEQRF,          /* cusolverDnXgeqrf + cusolverDn?orgqr */
    R_COUNT
} routine;

static const char *const routine_base[R_COUNT] = {
    "gesvd", "gesvdj", "gesvdp", "gesvdjBatched", "gesvdaStridedBatched", "syevd", "syevj",
    "geqrf+orgqr",
};

/* One call for the whole batch, or one per matrix. */
static int batched_routine(routine r) { return r == R_GESVDJ_BATCHED || r == R_GESVDA_BATCHED; }

typedef struct lcase {
    const char *name;
    const char *key; /* of $TENFERRO_BENCH_LINALG_BASELINE */
    kind k;
    tf_dtype dt;
    int64_t b, n; /* b matrices of n x n */
    routine baseline;
    int n_survey;
    routine survey[MAX_SURVEY];
} lcase;

static const lcase cases[] = {
    {"svd_f64_1024", "svd", K_SVD, TF_F64, 1, 1024, R_GESVD, 3, {R_GESVD, R_GESVDJ, R_GESVDP}},
    {"svd_c128_1024", "svd", K_SVD, TF_C128, 1, 1024, R_GESVD, 3, {R_GESVD, R_GESVDJ, R_GESVDP}},
    {"eigh_f64_4096", "eigh", K_EIGH, TF_F64, 1, 4096, R_SYEVD, 2, {R_SYEVD, R_SYEVJ}},
    {"qr_f64_4096", "qr", K_QR, TF_F64, 1, 4096, R_GEQRF, 1, {R_GEQRF}},
    {"svd_batched_f64_512x64x64", "svd_batched", K_SVD, TF_F64, 512, 64, R_GESVDJ_BATCHED, 5,
     {R_GESVDJ_BATCHED, R_GESVDJ, R_GESVD, R_GESVDP, R_GESVDA_BATCHED}},
};

/* A routine's name in a case: per-matrix routines of a batch are loops. */
static const char *routine_name(const lcase *lc, routine r) {
    static char buf[64];
    if (lc->b > 1 && !batched_routine(r)) {
        snprintf(buf, sizeof buf, "%s_loop", routine_base[r]);
        return buf;
    }
    return routine_base[r];
}

static const char *solver_status_name(cusolverStatus_t s) {
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

static void solver_check(cusolverStatus_t s, const char *call, int line) {
    if (s != CUSOLVER_STATUS_SUCCESS)
        bench_die(NAME, "%s failed at line %d: %s (%d)", call, line, solver_status_name(s), (int)s);
}
#define SOLVER(call) solver_check((call), #call, __LINE__)

/* ---- the daemon's side ---- */

typedef struct daemon_side {
    tf_client *c;
    tf_session *s;
    const lcase *lc;
    tf_tensor a;
    tf_tensor out[3];
} daemon_side;

static tf_status queue_op(tf_view *v, void *arg) {
    daemon_side *d = arg;
    switch (d->lc->k) {
    case K_SVD: return tf_view_svd(v, d->a, NULL, 0, &d->out[0], &d->out[1], &d->out[2]);
    case K_EIGH: return tf_view_eigh(v, d->a, NULL, 0, &d->out[0], &d->out[1]);
    default: return tf_view_qr(v, d->a, NULL, TF_QR_REDUCED, &d->out[0], &d->out[1]);
    }
}

/* One decomposition: queue and synchronize; ms. The results stay in d->out. */
static double daemon_once(daemon_side *d) {
    const uint64_t t0 = bench_now_ns();
    bench_check(NAME, d->c, tf_session_with(d->s, queue_op, d), "tf_session_with");
    bench_check(NAME, d->c, tf_session_synchronize(d->s), "tf_session_synchronize");
    return (double)(bench_now_ns() - t0) / 1e6;
}

static void daemon_drop(daemon_side *d) {
    for (int i = 0; i < 3; i++) {
        if (d->out[i]) bench_check(NAME, d->c, tf_tensor_free(d->c, d->out[i]), "tf_tensor_free");
        d->out[i] = 0;
    }
}

static void *daemon_result(daemon_side *d, int i, size_t bytes, const char *what) {
    void *p = NULL;
    size_t got = 0;
    bench_check(NAME, d->c, tf_download(d->c, d->out[i], &p, &got), "tf_download");
    if (got != bytes)
        bench_die(NAME, "%s: %s has %zu bytes, not %zu", d->lc->name, what, got, bytes);
    return p;
}

/* ---- the in-process cuSOLVER side ---- */

typedef struct gpu_side {
    const lcase *lc;
    cusolverDnHandle_t h;
    cusolverDnParams_t params;
    gesvdjInfo_t gj;
    syevjInfo_t sj;
    cudaStream_t st;
    cudaDataType dta, dts; /* the matrix's and the real values' */
    size_t esize, rsize, mat_bytes;
    void *dA;   /* the input, never written */
    void *dX;   /* what the routine overwrites (eigh's vectors, qr's Q) */
    void *dS;   /* S or W, b x n */
    void *dU;   /* svd: U (b x n x n); qr: the factor copied (R) */
    void *dV;   /* svd: VT or V (b x n x n) */
    void *dTau; /* qr */
    int *dInfo; /* b */
    void *dWork;
    size_t dWorkBytes;
    void *hWork;
    size_t hWorkBytes;
    int lwork;       /* elements, for the legacy entries */
    double *hResid;  /* gesvdaStridedBatched's residual norms, b */
    double errSigma; /* gesvdp's */
} gpu_side;

static void ensure_work(gpu_side *g, size_t dev, size_t host) {
    if (dev > g->dWorkBytes) {
        if (g->dWork) GPU_CUDA(NAME, cudaFree(g->dWork));
        GPU_CUDA(NAME, cudaMalloc(&g->dWork, dev));
        g->dWorkBytes = dev;
    }
    if (host > g->hWorkBytes) {
        free(g->hWork);
        g->hWork = gpu_xmalloc(NAME, host);
        g->hWorkBytes = host;
    }
}

static void gpu_setup(gpu_side *g, const lcase *lc, const void *input) {
    memset(g, 0, sizeof *g);
    g->lc = lc;
    const int cx = lc->dt == TF_C128 || lc->dt == TF_C64;
    const int single = lc_real_dtype(lc->dt) == TF_F32;
    g->dta = cx ? (single ? CUDA_C_32F : CUDA_C_64F) : (single ? CUDA_R_32F : CUDA_R_64F);
    g->dts = single ? CUDA_R_32F : CUDA_R_64F;
    g->esize = tf_dtype_size(lc->dt);
    g->rsize = tf_dtype_size(lc_real_dtype(lc->dt));
    const size_t nn = (size_t)lc->n * (size_t)lc->n, b = (size_t)lc->b;
    g->mat_bytes = b * nn * g->esize;
    SOLVER(cusolverDnCreate(&g->h));
    SOLVER(cusolverDnCreateParams(&g->params));
    SOLVER(cusolverDnCreateGesvdjInfo(&g->gj));
    SOLVER(cusolverDnCreateSyevjInfo(&g->sj));
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking));
    SOLVER(cusolverDnSetStream(g->h, g->st));
    GPU_CUDA(NAME, cudaMalloc(&g->dA, g->mat_bytes));
    GPU_CUDA(NAME, cudaMalloc(&g->dX, g->mat_bytes));
    GPU_CUDA(NAME, cudaMalloc(&g->dS, b * (size_t)lc->n * g->rsize));
    GPU_CUDA(NAME, cudaMalloc(&g->dTau, b * (size_t)lc->n * g->esize));
    GPU_CUDA(NAME, cudaMalloc((void **)&g->dInfo, b * sizeof(int)));
    if (lc->k != K_EIGH) GPU_CUDA(NAME, cudaMalloc(&g->dU, g->mat_bytes));
    if (lc->k == K_SVD) GPU_CUDA(NAME, cudaMalloc(&g->dV, g->mat_bytes));
    g->hResid = gpu_xmalloc(NAME, b * sizeof(double));
    GPU_CUDA(NAME, cudaMemcpy(g->dA, input, g->mat_bytes, cudaMemcpyHostToDevice));
    /* A pageable copy may still be in flight, and g->st does not wait for the legacy stream. */
    GPU_CUDA(NAME, cudaDeviceSynchronize());
}

static void gpu_teardown(gpu_side *g) {
    GPU_CUDA(NAME, cudaStreamSynchronize(g->st));
    void *dev[] = {g->dA, g->dX, g->dS, g->dU, g->dV, g->dTau, g->dInfo, g->dWork};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        if (dev[i]) GPU_CUDA(NAME, cudaFree(dev[i]));
    free(g->hWork);
    free(g->hResid);
    SOLVER(cusolverDnDestroyGesvdjInfo(g->gj));
    SOLVER(cusolverDnDestroySyevjInfo(g->sj));
    SOLVER(cusolverDnDestroyParams(g->params));
    SOLVER(cusolverDnDestroy(g->h));
    GPU_CUDA(NAME, cudaStreamDestroy(g->st));
}

/* Sizes routine r's workspace; CUSOLVER_STATUS_SUCCESS, or why cuSOLVER refuses the case. */
static cusolverStatus_t routine_prepare(gpu_side *g, routine r) {
    const lcase *lc = g->lc;
    const int64_t n = lc->n;
    const int ni = (int)n, bi = (int)lc->b, cx = lc->dt == TF_C128;
    size_t dev = 0, host = 0;
    int lw = 0, lw2 = 0;
    cusolverStatus_t s = CUSOLVER_STATUS_NOT_SUPPORTED;
    switch (r) {
    case R_GESVD:
        s = cusolverDnXgesvd_bufferSize(g->h, g->params, 'S', 'S', n, n, g->dta, g->dX, n, g->dts,
                                        g->dS, g->dta, g->dU, n, g->dta, g->dV, n, g->dta, &dev,
                                        &host);
        break;
    case R_GESVDJ:
        s = cx ? cusolverDnZgesvdj_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, 1, ni, ni, g->dX, ni,
                                              g->dS, g->dU, ni, g->dV, ni, &lw, g->gj)
               : cusolverDnDgesvdj_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, 1, ni, ni, g->dX, ni,
                                              g->dS, g->dU, ni, g->dV, ni, &lw, g->gj);
        dev = (size_t)lw * g->esize;
        break;
    case R_GESVDP:
        s = cusolverDnXgesvdp_bufferSize(g->h, g->params, CUSOLVER_EIG_MODE_VECTOR, 1, n, n, g->dta,
                                         g->dX, n, g->dts, g->dS, g->dta, g->dU, n, g->dta, g->dV,
                                         n, g->dta, &dev, &host);
        break;
    case R_GESVDJ_BATCHED:
        s = cx ? cusolverDnZgesvdjBatched_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, g->dX,
                                                     ni, g->dS, g->dU, ni, g->dV, ni, &lw, g->gj,
                                                     bi)
               : cusolverDnDgesvdjBatched_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, g->dX,
                                                     ni, g->dS, g->dU, ni, g->dV, ni, &lw, g->gj,
                                                     bi);
        dev = (size_t)lw * g->esize;
        break;
    case R_GESVDA_BATCHED: {
        const long long nn = (long long)n * n;
        s = cx ? cusolverDnZgesvdaStridedBatched_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni,
                                                            ni, g->dX, ni, nn, g->dS, n, g->dU, ni,
                                                            nn, g->dV, ni, nn, &lw, bi)
               : cusolverDnDgesvdaStridedBatched_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni,
                                                            ni, g->dX, ni, nn, g->dS, n, g->dU, ni,
                                                            nn, g->dV, ni, nn, &lw, bi);
        dev = (size_t)lw * g->esize;
        break;
    }
    case R_SYEVD:
        s = cusolverDnXsyevd_bufferSize(g->h, g->params, CUSOLVER_EIG_MODE_VECTOR,
                                        CUBLAS_FILL_MODE_LOWER, n, g->dta, g->dX, n, g->dts, g->dS,
                                        g->dta, &dev, &host);
        break;
    case R_SYEVJ:
        s = cx ? cusolverDnZheevj_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                                             ni, g->dX, ni, g->dS, &lw, g->sj)
               : cusolverDnDsyevj_bufferSize(g->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                                             ni, g->dX, ni, g->dS, &lw, g->sj);
        dev = (size_t)lw * g->esize;
        break;
    case R_GEQRF:
        s = cusolverDnXgeqrf_bufferSize(g->h, g->params, n, n, g->dta, g->dX, n, g->dta, g->dTau,
                                        g->dta, &dev, &host);
        if (s != CUSOLVER_STATUS_SUCCESS) break;
        s = cx ? cusolverDnZungqr_bufferSize(g->h, ni, ni, ni, g->dX, ni, g->dTau, &lw2)
               : cusolverDnDorgqr_bufferSize(g->h, ni, ni, ni, g->dX, ni, g->dTau, &lw2);
        lw = lw2;
        if ((size_t)lw2 * g->esize > dev) dev = (size_t)lw2 * g->esize;
        break;
    default: break;
    }
    if (s != CUSOLVER_STATUS_SUCCESS) return s;
    g->lwork = lw;
    ensure_work(g, dev + 256, host + 256);
    return CUSOLVER_STATUS_SUCCESS;
}

/* Queues the copy of the input and routine r on the stream; the first failing status. */
static cusolverStatus_t routine_run(gpu_side *g, routine r) {
    const lcase *lc = g->lc;
    const int64_t n = lc->n;
    const int ni = (int)n, bi = (int)lc->b, cx = lc->dt == TF_C128;
    const size_t mat = (size_t)n * (size_t)n * g->esize, vec = (size_t)n * g->rsize;
    GPU_CUDA(NAME, cudaMemcpyAsync(g->dX, g->dA, g->mat_bytes, cudaMemcpyDeviceToDevice, g->st));
    cusolverStatus_t s = CUSOLVER_STATUS_SUCCESS;
    if (batched_routine(r)) {
        const long long nn = (long long)n * n;
        if (r == R_GESVDJ_BATCHED)
            s = cx ? cusolverDnZgesvdjBatched(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, g->dX, ni,
                                              g->dS, g->dU, ni, g->dV, ni, g->dWork, g->lwork,
                                              g->dInfo, g->gj, bi)
                   : cusolverDnDgesvdjBatched(g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, g->dX, ni,
                                              g->dS, g->dU, ni, g->dV, ni, g->dWork, g->lwork,
                                              g->dInfo, g->gj, bi);
        else
            s = cx ? cusolverDnZgesvdaStridedBatched(
                         g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, ni, g->dX, ni, nn, g->dS, n, g->dU,
                         ni, nn, g->dV, ni, nn, g->dWork, g->lwork, g->dInfo, g->hResid, bi)
                   : cusolverDnDgesvdaStridedBatched(
                         g->h, CUSOLVER_EIG_MODE_VECTOR, ni, ni, ni, g->dX, ni, nn, g->dS, n, g->dU,
                         ni, nn, g->dV, ni, nn, g->dWork, g->lwork, g->dInfo, g->hResid, bi);
        return s;
    }
    for (int64_t i = 0; i < lc->b && s == CUSOLVER_STATUS_SUCCESS; i++) {
        char *x = (char *)g->dX + (size_t)i * mat, *sv = (char *)g->dS + (size_t)i * vec;
        char *u = g->dU ? (char *)g->dU + (size_t)i * mat : NULL;
        char *v = g->dV ? (char *)g->dV + (size_t)i * mat : NULL;
        int *info = g->dInfo + i;
        switch (r) {
        case R_GESVD:
            s = cusolverDnXgesvd(g->h, g->params, 'S', 'S', n, n, g->dta, x, n, g->dts, sv, g->dta,
                                 u, n, g->dta, v, n, g->dta, g->dWork, g->dWorkBytes, g->hWork,
                                 g->hWorkBytes, info);
            break;
        case R_GESVDJ:
            s = cx ? cusolverDnZgesvdj(g->h, CUSOLVER_EIG_MODE_VECTOR, 1, ni, ni,
                                       (cuDoubleComplex *)x, ni, (double *)sv, (cuDoubleComplex *)u,
                                       ni, (cuDoubleComplex *)v, ni, g->dWork, g->lwork, info,
                                       g->gj)
                   : cusolverDnDgesvdj(g->h, CUSOLVER_EIG_MODE_VECTOR, 1, ni, ni, (double *)x, ni,
                                       (double *)sv, (double *)u, ni, (double *)v, ni, g->dWork,
                                       g->lwork, info, g->gj);
            break;
        case R_GESVDP:
            s = cusolverDnXgesvdp(g->h, g->params, CUSOLVER_EIG_MODE_VECTOR, 1, n, n, g->dta, x, n,
                                  g->dts, sv, g->dta, u, n, g->dta, v, n, g->dta, g->dWork,
                                  g->dWorkBytes, g->hWork, g->hWorkBytes, info, &g->errSigma);
            break;
        case R_SYEVD:
            s = cusolverDnXsyevd(g->h, g->params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER,
                                 n, g->dta, x, n, g->dts, sv, g->dta, g->dWork, g->dWorkBytes,
                                 g->hWork, g->hWorkBytes, info);
            break;
        case R_SYEVJ:
            s = cx ? cusolverDnZheevj(g->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, ni,
                                      (cuDoubleComplex *)x, ni, (double *)sv, g->dWork, g->lwork,
                                      info, g->sj)
                   : cusolverDnDsyevj(g->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, ni,
                                      (double *)x, ni, (double *)sv, g->dWork, g->lwork, info,
                                      g->sj);
            break;
        case R_GEQRF:
            s = cusolverDnXgeqrf(g->h, g->params, n, n, g->dta, x, n, g->dta, g->dTau, g->dta,
                                 g->dWork, g->dWorkBytes, g->hWork, g->hWorkBytes, info);
            if (s != CUSOLVER_STATUS_SUCCESS) break;
            /* R is the factor's upper triangle: copied before orgqr overwrites it. */
            GPU_CUDA(NAME, cudaMemcpyAsync(u, x, mat, cudaMemcpyDeviceToDevice, g->st));
            s = cx ? cusolverDnZungqr(g->h, ni, ni, ni, (cuDoubleComplex *)x, ni, g->dTau, g->dWork,
                                      g->lwork, info)
                   : cusolverDnDorgqr(g->h, ni, ni, ni, (double *)x, ni, g->dTau, g->dWork,
                                      g->lwork, info);
            break;
        default: s = CUSOLVER_STATUS_NOT_SUPPORTED; break;
        }
    }
    return s;
}

/* One timed run of routine r (the copy included), synchronized; ms. */
static double routine_once(gpu_side *g, routine r) {
    const uint64_t t0 = bench_now_ns();
    const cusolverStatus_t s = routine_run(g, r);
    GPU_CUDA(NAME, cudaStreamSynchronize(g->st));
    const double ms = (double)(bench_now_ns() - t0) / 1e6;
    if (s != CUSOLVER_STATUS_SUCCESS)
        bench_die(NAME, "%s: %s failed: %s (%d)", g->lc->name, routine_name(g->lc, r),
                  solver_status_name(s), (int)s);
    GPU_CUDA(NAME, cudaGetLastError());
    return ms;
}

/* The first matrix whose info is not 0 (-1: none), its info in *info. */
static int64_t first_bad_info(gpu_side *g, int *info) {
    int *h = gpu_xmalloc(NAME, sizeof(int) * (size_t)g->lc->b);
    GPU_CUDA(NAME, cudaMemcpy(h, g->dInfo, sizeof(int) * (size_t)g->lc->b, cudaMemcpyDeviceToHost));
    int64_t bad = -1;
    for (int64_t i = 0; i < g->lc->b && bad < 0; i++)
        if (h[i] != 0) bad = i, *info = h[i];
    free(h);
    return bad;
}

/*
 * The values the routine left (b x n reals: S or W; for qr |R's diagonal|), into a new host
 * buffer of the case's real dtype.
 */
static void *routine_values(gpu_side *g) {
    const lcase *lc = g->lc;
    const size_t count = (size_t)lc->b * (size_t)lc->n;
    void *out = gpu_xmalloc(NAME, count * g->rsize);
    if (lc->k != K_QR) {
        GPU_CUDA(NAME, cudaMemcpy(out, g->dS, count * g->rsize, cudaMemcpyDeviceToHost));
        return out;
    }
    void *r = gpu_xmalloc(NAME, g->mat_bytes);
    GPU_CUDA(NAME, cudaMemcpy(r, g->dU, g->mat_bytes, cudaMemcpyDeviceToHost));
    for (size_t j = 0; j < (size_t)lc->n; j++) {
        const size_t at = j * (size_t)lc->n + j;
        ((double *)out)[j] =
            lc->dt == TF_C128 ? cabs(((double complex *)r)[at]) : fabs(((double *)r)[at]);
    }
    free(r);
    return out;
}

/* The routine $TENFERRO_BENCH_LINALG_BASELINE names for the case's key, else the default. */
static routine baseline_routine(const lcase *lc) {
    const char *env = getenv("TENFERRO_BENCH_LINALG_BASELINE");
    if (!env) return lc->baseline;
    const size_t klen = strlen(lc->key);
    for (const char *p = env; *p;) {
        const size_t w = strcspn(p, ",");
        if (w > klen && strncmp(p, lc->key, klen) == 0 && p[klen] == '=') {
            const char *v = p + klen + 1;
            size_t vlen = w - klen - 1;
            if (vlen > 5 && strncmp(v + vlen - 5, "_loop", 5) == 0) vlen -= 5;
            for (int i = 0; i < lc->n_survey; i++) {
                const char *name = routine_base[lc->survey[i]];
                if (strlen(name) == vlen && strncmp(v, name, vlen) == 0) return lc->survey[i];
            }
            bench_die(NAME, "TENFERRO_BENCH_LINALG_BASELINE: %.*s is not a routine of %s", (int)w,
                      p, lc->name);
        }
        p += w;
        p += strspn(p, ",");
    }
    return lc->baseline;
}

static int selected(const char *name) {
    const char *list = getenv("TENFERRO_BENCH_LINALG_CASES");
    if (!list || !list[0]) return 1;
    const size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const size_t w = strcspn(p, ", ");
        if (w == len && strncmp(p, name, len) == 0) return 1;
        p += w;
        p += strspn(p, ", ");
    }
    return 0;
}

/* Checks the daemon's last results; returns the worst check ratio and the values' difference. */
static void check_daemon(daemon_side *d, const void *a, const void *ref, double *worst_out,
                         double *values_out) {
    const lcase *lc = d->lc;
    const size_t n = (size_t)lc->n, b = (size_t)lc->b, esize = tf_dtype_size(lc->dt);
    const tf_dtype rdt = lc_real_dtype(lc->dt);
    const size_t rsize = tf_dtype_size(rdt), mat = n * n * esize;
    char why[256];
    double worst = 0, values;
    int64_t worst_at = 0;
    void *o0 = daemon_result(d, 0, lc->k == K_EIGH ? b * n * rsize : b * mat, "the first result");
    void *o1 = daemon_result(d, 1, lc->k == K_SVD ? b * n * rsize : b * mat, "the second result");
    void *o2 = lc->k == K_SVD ? daemon_result(d, 2, b * mat, "Vh") : NULL;
    for (size_t i = 0; i < b; i++) {
        const char *ai = (const char *)a + i * mat;
        char w1[256];
        double r;
        if (lc->k == K_SVD)
            r = lc_check_svd(lc->dt, ai, lc->n, lc->n, (char *)o0 + i * mat,
                             (char *)o1 + i * n * rsize, (char *)o2 + i * mat, w1, sizeof w1);
        else if (lc->k == K_EIGH)
            r = lc_check_eigh(lc->dt, ai, lc->n, (char *)o0 + i * n * rsize, (char *)o1 + i * mat,
                              w1, sizeof w1);
        else
            r = lc_check_qr(lc->dt, ai, lc->n, lc->n, (char *)o0 + i * mat, (char *)o1 + i * mat,
                            w1, sizeof w1);
        if (i == 0 || !(r <= worst)) {
            worst = r;
            worst_at = (int64_t)i;
            memcpy(why, w1, sizeof why);
        }
    }
    if (!(worst <= 1.0))
        bench_die(NAME,
                  "%s: the daemon's result fails its check: matrix %lld: %s (%.3g x the "
                  "tolerance)",
                  lc->name, (long long)worst_at, why, worst);
    if (lc->k == K_QR) {
        double *dg = gpu_xmalloc(NAME, n * sizeof(double));
        for (size_t j = 0; j < n; j++)
            dg[j] = lc->dt == TF_C128 ? creal(((double complex *)o1)[j * n + j])
                                      : ((double *)o1)[j * n + j];
        values = lc_values_diff(TF_F64, dg, ref, lc->n);
        free(dg);
    } else {
        values = lc_values_diff(rdt, lc->k == K_SVD ? o1 : o0, ref, (int64_t)(b * n));
    }
    free(o0);
    free(o1);
    free(o2);
    *worst_out = worst;
    *values_out = values;
}

static void run_case(tf_client *c, const lcase *lc) {
    const size_t nn = (size_t)lc->n * (size_t)lc->n, elems = (size_t)lc->b * nn;
    const size_t esize = tf_dtype_size(lc->dt), bytes = elems * esize;
    void *a = gpu_xmalloc(NAME, bytes);
    lc_fill(lc->dt, a, elems, 0x9a1au + (uint64_t)lc->n * 13 + (uint64_t)lc->dt + (uint64_t)lc->b);
    if (lc->k == K_EIGH)
        for (int64_t i = 0; i < lc->b; i++)
            lc_hermitize(lc->dt, (char *)a + (size_t)i * nn * esize, lc->n);
    /* QR's baseline factors A itself: its column-major copy. */
    void *acm = NULL;
    if (lc->k == K_QR) {
        acm = gpu_xmalloc(NAME, bytes);
        for (size_t i = 0; i < (size_t)lc->n; i++)
            for (size_t j = 0; j < (size_t)lc->n; j++)
                memcpy((char *)acm + (j * (size_t)lc->n + i) * esize,
                       (char *)a + (i * (size_t)lc->n + j) * esize, esize);
    }

    daemon_side d = {.c = c, .lc = lc};
    const int64_t shape[3] = {lc->b, lc->n, lc->n};
    const int rank = lc->b > 1 ? 3 : 2;
    bench_check(NAME, c, tf_upload(c, lc->dt, rank, lc->b > 1 ? shape : shape + 1, a, &d.a),
                "tf_upload");
    bench_check(NAME, c, tf_session_open(c, &d.s), "tf_session_open");

    gpu_side g;
    gpu_setup(&g, lc, acm ? acm : a);

    /* The baseline: the chosen routine, else the first of the survey cuSOLVER takes. */
    routine base = baseline_routine(lc);
    cusolverStatus_t ps = routine_prepare(&g, base);
    if (ps == CUSOLVER_STATUS_SUCCESS) ps = routine_run(&g, base);
    GPU_CUDA(NAME, cudaStreamSynchronize(g.st));
    if (ps != CUSOLVER_STATUS_SUCCESS) {
        printf("# %s: cuSOLVER refuses %s for this case (%s); the baseline is the next routine it "
               "takes\n",
               lc->name, routine_name(lc, base), solver_status_name(ps));
        int found = 0;
        for (int i = 0; i < lc->n_survey && !found; i++) {
            if (lc->survey[i] == base) continue;
            ps = routine_prepare(&g, lc->survey[i]);
            if (ps == CUSOLVER_STATUS_SUCCESS) ps = routine_run(&g, lc->survey[i]);
            GPU_CUDA(NAME, cudaStreamSynchronize(g.st));
            if (ps == CUSOLVER_STATUS_SUCCESS) base = lc->survey[i], found = 1;
        }
        if (!found) bench_die(NAME, "%s: cuSOLVER takes none of its routines", lc->name);
    }
    GPU_CUDA(NAME, cudaGetLastError());
    char base_name[64];
    snprintf(base_name, sizeof base_name, "%s", routine_name(lc, base));

    double td[ITERS], tb[ITERS];
    for (int i = 0; i < WARMUP; i++) {
        daemon_once(&d);
        daemon_drop(&d);
        routine_once(&g, base);
    }
    for (int i = 0; i < ITERS; i++) {
        td[i] = daemon_once(&d);
        if (i + 1 < ITERS) daemon_drop(&d); /* the last results are kept for the checks */
        tb[i] = routine_once(&g, base);
    }
    int info = 0;
    const int64_t bad = first_bad_info(&g, &info);
    if (bad >= 0)
        bench_die(NAME, "%s: %s: matrix %lld has info %d", lc->name, base_name, (long long)bad,
                  info);
    void *ref = routine_values(&g);
    double worst, values;
    check_daemon(&d, a, ref, &worst, &values);
    daemon_drop(&d);
    bench_check(NAME, c, tf_session_close(d.s, NULL), "tf_session_close");
    bench_check(NAME, c, tf_tensor_free(c, d.a), "tf_tensor_free");
    const double vtol = LC_TOL_FACTOR * (double)lc->n * lc_eps(lc->dt);
    if (!(values <= vtol)) {
        if (base != R_GESVDA_BATCHED)
            bench_die(NAME,
                      "%s: the daemon's values differ from %s's by %.3g (relative; tolerance "
                      "%.3g)",
                      lc->name, base_name, values, vtol);
        printf("# %s: the daemon's values differ from the approximation %s's by %.3g\n", lc->name,
               base_name, values);
    }

    const double td_med = bench_summary(td, ITERS, BENCH_MEDIAN);
    const double tb_med = bench_summary(tb, ITERS, BENCH_MEDIAN);
    printf("# %s: %lld x %lldx%lld %s; median of %d after %d warm-up, alternating; baseline "
           "cuSOLVER %s (input copy included); best tenferrod %.3f ms, baseline %.3f ms; check "
           "%.2g x tolerance, values within %.2g of the baseline's\n",
           lc->name, (long long)lc->b, (long long)lc->n, (long long)lc->n, tf_dtype_name(lc->dt),
           ITERS, WARMUP, base_name, td[0], tb[0], worst, values);
    bench_report(lc->name, td_med, tb_med, "ms");

    /* Which routine is fastest in-process. */
    const char *survey = getenv("TENFERRO_BENCH_LINALG_SURVEY");
    if (!(survey && strcmp(survey, "0") == 0)) {
        double best = INFINITY;
        char best_name[64] = "none";
        for (int i = 0; i < lc->n_survey; i++) {
            const routine r = lc->survey[i];
            char rname[64];
            snprintf(rname, sizeof rname, "%s", routine_name(lc, r));
            cusolverStatus_t s = routine_prepare(&g, r);
            if (s == CUSOLVER_STATUS_SUCCESS) s = routine_run(&g, r);
            GPU_CUDA(NAME, cudaStreamSynchronize(g.st));
            if (s != CUSOLVER_STATUS_SUCCESS) {
                printf("# %s: cuSOLVER refuses %s here: %s (%d)\n", lc->name, rname,
                       solver_status_name(s), (int)s);
                printf("ROUTINE %s %s=nan\n", lc->name, rname);
                fflush(stdout);
                continue;
            }
            double t[SURVEY_REPS];
            for (int k = 0; k < SURVEY_REPS; k++) t[k] = routine_once(&g, r);
            const double med = bench_summary(t, SURVEY_REPS, BENCH_MEDIAN);
            const int64_t rb = first_bad_info(&g, &info);
            void *vals = routine_values(&g);
            const double diff = lc_values_diff(lc_real_dtype(lc->dt), vals, ref,
                                               lc->k == K_QR ? lc->n : lc->b * lc->n);
            free(vals);
            char extra[128] = "";
            if (r == R_GESVDA_BATCHED) {
                double rmax = 0;
                for (int64_t k = 0; k < lc->b; k++) rmax = fmax(rmax, g.hResid[k]);
                snprintf(extra, sizeof extra, "; largest residual norm it reports %.3g", rmax);
            } else if (r == R_GESVDP) {
                snprintf(extra, sizeof extra, "; its error estimate %.3g", g.errSigma);
            }
            printf("# %s: %s median %.3f ms of %d after 1 warm-up (best %.3f); values within %.2g "
                   "of %s's%s%s\n",
                   lc->name, rname, med, SURVEY_REPS, t[0], diff, base_name,
                   rb >= 0 ? "; NOT CONVERGED (info != 0)" : "", extra);
            printf("ROUTINE %s %s=%.3f\n", lc->name, rname, med);
            fflush(stdout);
            if (rb < 0 && med < best && diff <= (r == R_GESVDA_BATCHED ? 1e-6 : vtol))
                best = med, snprintf(best_name, sizeof best_name, "%s", rname);
        }
        printf("# %s: fastest accurate routine in-process: %s (%.3f ms)\n", lc->name, best_name,
               best);
        fflush(stdout);
    }
    free(ref);
    gpu_teardown(&g);
    free(acm);
    free(a);
}

int main(int argc, char **argv) {
    tf_client *c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(c));
    struct cudaDeviceProp prop;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cusolverGetVersion(&ver);
    printf("# baseline device: %s (in-process cuSOLVER %d)\n", prop.name, ver);
    fflush(stdout);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (selected(cases[i].name)) run_case(c, &cases[i]);
    tf_disconnect(c);
    return 0;
}
