/*
 * bench-linalg: decompositions through the daemon (CPU backend) against the
 * same LAPACK routines called in this process, on the same matrices.
 *
 *   cpu_svd_f64_512    reduced SVD of a 512 x 512 f64 matrix (tf_view_svd, full_matrices 0)
 *   cpu_eigh_f64_1024  values and vectors of a 1024 x 1024 symmetric f64 matrix (tf_view_eigh)
 *   cpu_qr_f64_1024    reduced QR of a 1024 x 1024 f64 matrix (tf_view_qr, TF_QR_REDUCED)
 *   cpu_svd_f32_512, cpu_svd_c128_512: the SVD in the other precisions
 *     tenferrod: one held session; the matrix (uniform in [-0.5, 0.5); for
 *                eigh made symmetric) is uploaded once; each iteration is
 *                tf_session_with queueing the decomposition, then
 *                tf_session_synchronize (the clock runs from the queueing to
 *                the synchronize's return); the results are freed after the
 *                clock stops.
 *     baseline:  the LAPACK routines the CPU backend calls, from OpenBLAS in
 *                this process, each iteration copying the matrix into a
 *                scratch buffer first (they overwrite it), then:
 *                  svd:  ?gesdd jobz='S' (rwork for the complex ones);
 *                  eigh: dsyevd jobz='V', uplo='L';
 *                  qr:   dgeqrf, R copied out of the factor's upper triangle
 *                        (zeros below), then dorgqr forming the reduced Q.
 *                Workspace sizes are queried and allocated before timing.
 *                For the SVD and eigh the row-major matrix is passed as it lies
 *                (LAPACK reads it as its transpose: the same singular values,
 *                and for eigh the same matrix), as the backend does for the
 *                SVD, and the copy is a memcpy; for QR the copy is the
 *                transpose to column-major order a user needs for LAPACK to
 *                factor A itself (numpy's qr copies to Fortran order too),
 *                by the same 64 x 4 tiles as the backend's, so LAPACK
 *                factors the same matrix as the daemon. (Until 2026-12-02
 *                the transpose was made once before timing and each
 *                iteration memcpy'd it: a cheaper copy than the one the
 *                user's loop pays, about 1 ms of 160 on the build machine.)
 *
 * Both sides run OpenBLAS with its default thread count (one thread per
 * online CPU, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS says otherwise:
 * the daemon started by scripts/bench.sh inherits the same environment); the
 * count is printed. Median of a case's iterations after one warm-up of each
 * side, in BLOCKS alternating blocks with a pause before each, so OpenBLAS
 * threads still spinning after one side do not take the cores from the other
 * and a change of load on the machine falls on both sides alike; ms per
 * decomposition.
 *
 * Checks, once per case: the daemon's results against the promises of
 * include/tenferro/linalg.h (bench/linalg-check.c: residuals and
 * orthonormality on sampled columns, ordering, gauge, R's zeros), and its
 * values (S, W, |R's diagonal|) against LAPACK's here.
 *
 * $TENFERRO_BENCH_LINALG_CASES (comma-separated names) runs only those cases;
 * $TENFERRO_BENCH_LINALG_ITERS sets every case's iteration count.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <lapack.h>

#include "bench/bench-common.h"
#include "bench/linalg-check.h"

#define BLOCKS 4
#define PAUSE_MS 200 /* longer than OpenBLAS's idle threads spin before they sleep */
#define MAX_ITERS 64

static const char *const NAME = "bench-linalg";

typedef enum kind { K_SVD, K_EIGH, K_QR } kind;

typedef struct lcase {
    const char *name;
    kind k;
    tf_dtype dt;
    int n; /* the matrix is n x n */
    int iters;
} lcase;

static const lcase cases[] = {
    {"cpu_svd_f64_512", K_SVD, TF_F64, 512, 12},
    {"cpu_eigh_f64_1024", K_EIGH, TF_F64, 1024, 8},
    {"cpu_qr_f64_1024", K_QR, TF_F64, 1024, 12},
    {"cpu_svd_f32_512", K_SVD, TF_F32, 512, 12},
    {"cpu_svd_c128_512", K_SVD, TF_C128, 512, 8},
};

static const char *kind_name(kind k) { return k == K_SVD ? "svd" : k == K_EIGH ? "eigh" : "qr"; }

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

/* Downloads result i, which must hold `bytes`; the caller frees it. */
static void *daemon_result(daemon_side *d, int i, size_t bytes, const char *what) {
    void *p = NULL;
    size_t got = 0;
    bench_check(NAME, d->c, tf_download(d->c, d->out[i], &p, &got), "tf_download");
    if (got != bytes)
        bench_die(NAME, "%s: %s has %zu bytes, not %zu", d->lc->name, what, got, bytes);
    return p;
}

/* ---- the in-process LAPACK side ---- */

typedef struct lapack_side {
    const lcase *lc;
    const void *a; /* the matrix (row-major), never written */
    size_t bytes;  /* of the matrix */
    void *x;       /* the copy LAPACK overwrites (the Q of qr) */
    void *s;       /* S or W (real), or tau */
    void *u, *vt;  /* svd: U and VT; qr: u is R */
    void *work;
    lapack_int lwork;
    double *rwork;
    lapack_int *iwork;
    lapack_int liwork;
} lapack_side;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) bench_die(NAME, "out of memory for %zu bytes", bytes);
    return p;
}

/* The size a workspace query wrote (an element of the dtype's precision). */
static lapack_int query_size(const lcase *lc, const void *w) {
    double v;
    switch (lc->dt) {
    case TF_F32: v = ((const float *)w)[0]; break;
    case TF_F64: v = ((const double *)w)[0]; break;
    case TF_C64: v = crealf(((const float complex *)w)[0]); break;
    default: v = creal(((const double complex *)w)[0]); break;
    }
    return (lapack_int)ceil(v * (1 + 1e-7)) + 1;
}

/* Runs the case's routine on lp->x (already holding the matrix); returns LAPACK's info. */
static lapack_int lapack_run(lapack_side *lp, lapack_int lwork, lapack_int liwork) {
    const lapack_int n = lp->lc->n;
    lapack_int info = 0;
    switch (lp->lc->k) {
    case K_SVD:
        switch (lp->lc->dt) {
        case TF_F32:
            LAPACK_sgesdd("S", &n, &n, lp->x, &n, lp->s, lp->u, &n, lp->vt, &n, lp->work, &lwork,
                          lp->iwork, &info);
            break;
        case TF_F64:
            LAPACK_dgesdd("S", &n, &n, lp->x, &n, lp->s, lp->u, &n, lp->vt, &n, lp->work, &lwork,
                          lp->iwork, &info);
            break;
        case TF_C64:
            LAPACK_cgesdd("S", &n, &n, lp->x, &n, lp->s, lp->u, &n, lp->vt, &n, lp->work, &lwork,
                          (float *)lp->rwork, lp->iwork, &info);
            break;
        default:
            LAPACK_zgesdd("S", &n, &n, lp->x, &n, lp->s, lp->u, &n, lp->vt, &n, lp->work, &lwork,
                          lp->rwork, lp->iwork, &info);
            break;
        }
        break;
    case K_EIGH:
        LAPACK_dsyevd("V", "L", &n, lp->x, &n, lp->s, lp->work, &lwork, lp->iwork, &liwork, &info);
        break;
    case K_QR:
        LAPACK_dgeqrf(&n, &n, lp->x, &n, lp->s, lp->work, &lwork, &info);
        if (info != 0 || lwork < 0) break;
        {
            /* R: the upper triangle of the factor, zeros below (column-major n x n). */
            const double *f = lp->x;
            double *r = lp->u;
            for (lapack_int j = 0; j < n; j++)
                for (lapack_int i = 0; i < n; i++)
                    r[(size_t)j * n + i] = i <= j ? f[(size_t)j * n + i] : 0.0;
        }
        LAPACK_dorgqr(&n, &n, &n, lp->x, &n, lp->s, lp->work, &lwork, &info);
        break;
    }
    return info;
}

/*
 * The column-major copy of the row-major n x n f64 matrix a, by tiles of 64
 * rows of the copy by 4 of its columns (the strided side stays in cache).
 */
static void to_column_major(double *x, const double *a, size_t n) {
    for (size_t r0 = 0; r0 < n; r0 += 64)
        for (size_t c0 = 0; c0 < n; c0 += 4)
            for (size_t r = r0; r < r0 + 64 && r < n; r++)
                for (size_t c = c0; c < c0 + 4 && c < n; c++) x[c * n + r] = a[r * n + c];
}

/* The copy LAPACK overwrites: A's column-major order for QR, the bytes as they lie otherwise. */
static void lapack_copy_in(lapack_side *lp) {
    if (lp->lc->k == K_QR) to_column_major(lp->x, lp->a, (size_t)lp->lc->n);
    else memcpy(lp->x, lp->a, lp->bytes);
}

/* Allocates the outputs and the workspace (sizes by LAPACK's queries). */
static void lapack_setup(lapack_side *lp) {
    const lcase *lc = lp->lc;
    const size_t n = (size_t)lc->n, esize = tf_dtype_size(lc->dt);
    const size_t rsize = tf_dtype_size(lc_real_dtype(lc->dt));
    lp->x = xmalloc(lp->bytes);
    lp->s = xmalloc(n * esize); /* S, W (real) or tau (the dtype) */
    lp->u = xmalloc(n * n * esize);
    lp->vt = xmalloc(n * n * esize);
    /* gesdd's iwork (8 min(m, n)); syevd's is queried. */
    lp->liwork = (lapack_int)(8 * n);
    lp->iwork = xmalloc(sizeof(lapack_int) * (size_t)lp->liwork);
    /* The complex gesdd's rwork for jobz = 'S' and m = n: 5 n^2 + 5 n reals. */
    lp->rwork = xmalloc(rsize * (5 * n * n + 5 * n));
    /* Workspace queries (lwork = -1): the size comes back in work[0] (and syevd's in iwork[0]). */
    double complex q[1] = {0};
    const lapack_int nn = lc->n, none = -1;
    lapack_int info = 0;
    lapack_copy_in(lp);
    if (lc->k == K_EIGH) {
        lapack_int iq = 0;
        LAPACK_dsyevd("V", "L", &nn, lp->x, &nn, lp->s, (double *)q, &none, &iq, &none, &info);
        lp->lwork = query_size(lc, q);
        free(lp->iwork);
        lp->liwork = iq + 1;
        lp->iwork = xmalloc(sizeof(lapack_int) * (size_t)lp->liwork);
    } else if (lc->k == K_QR) {
        LAPACK_dgeqrf(&nn, &nn, lp->x, &nn, lp->s, (double *)q, &none, &info);
        const lapack_int geqrf = query_size(lc, q);
        LAPACK_dorgqr(&nn, &nn, &nn, lp->x, &nn, lp->s, (double *)q, &none, &info);
        const lapack_int orgqr = query_size(lc, q);
        lp->lwork = geqrf > orgqr ? geqrf : orgqr;
    } else {
        lp->work = q;
        info = lapack_run(lp, -1, -1);
        lp->lwork = query_size(lc, q);
    }
    if (info != 0)
        bench_die(NAME, "%s: LAPACK's workspace query returned info %d", lc->name, (int)info);
    lp->work = xmalloc(esize * (size_t)lp->lwork);
}

static void lapack_free(lapack_side *lp) {
    free(lp->x);
    free(lp->s);
    free(lp->u);
    free(lp->vt);
    free(lp->work);
    free(lp->rwork);
    free(lp->iwork);
}

/* One decomposition in-process: the copy, then the routine(s); ms. */
static double lapack_once(lapack_side *lp) {
    const uint64_t t0 = bench_now_ns();
    lapack_copy_in(lp);
    const lapack_int info = lapack_run(lp, lp->lwork, lp->liwork);
    const double ms = (double)(bench_now_ns() - t0) / 1e6;
    if (info != 0) bench_die(NAME, "%s: LAPACK returned info %d", lp->lc->name, (int)info);
    return ms;
}

/* ---- one case ---- */

/* Checks the daemon's last results (the case's promises, and the values against LAPACK's). */
static void check_case(daemon_side *d, lapack_side *lp, const void *a, double *worst_out,
                       double *values_out) {
    const lcase *lc = d->lc;
    const size_t n = (size_t)lc->n, esize = tf_dtype_size(lc->dt);
    const tf_dtype rdt = lc_real_dtype(lc->dt);
    const size_t rsize = tf_dtype_size(rdt);
    char why[256];
    double worst, values;
    if (lc->k == K_SVD) {
        void *u = daemon_result(d, 0, n * n * esize, "U");
        void *s = daemon_result(d, 1, n * rsize, "S");
        void *vh = daemon_result(d, 2, n * n * esize, "Vh");
        worst = lc_check_svd(lc->dt, a, lc->n, lc->n, u, s, vh, why, sizeof why);
        values = lc_values_diff(rdt, s, lp->s, lc->n);
        free(u), free(s), free(vh);
    } else if (lc->k == K_EIGH) {
        void *w = daemon_result(d, 0, n * rsize, "W");
        void *v = daemon_result(d, 1, n * n * esize, "V");
        worst = lc_check_eigh(lc->dt, a, lc->n, w, v, why, sizeof why);
        values = lc_values_diff(rdt, w, lp->s, lc->n);
        free(w), free(v);
    } else {
        void *q = daemon_result(d, 0, n * n * esize, "Q");
        void *r = daemon_result(d, 1, n * n * esize, "R");
        worst = lc_check_qr(lc->dt, a, lc->n, lc->n, q, r, why, sizeof why);
        /* |R's diagonal| is unique; LAPACK's R here is of the same matrix (A, column-major). */
        double *dg = xmalloc(n * sizeof(double)), *dr = xmalloc(n * sizeof(double));
        for (size_t j = 0; j < n; j++) {
            dg[j] = ((const double *)r)[j * n + j];
            dr[j] = fabs(((const double *)lp->u)[j * n + j]);
        }
        values = lc_values_diff(TF_F64, dg, dr, lc->n);
        free(dg), free(dr), free(q), free(r);
    }
    if (!(worst <= 1.0))
        bench_die(NAME, "%s: the daemon's result fails its check: %s (%.3g x the tolerance)",
                  lc->name, why, worst);
    const double vtol = LC_TOL_FACTOR * lc->n * lc_eps(lc->dt);
    if (!(values <= vtol))
        bench_die(NAME,
                  "%s: the daemon's values differ from LAPACK's by %.3g (relative; "
                  "tolerance %.3g)",
                  lc->name, values, vtol);
    *worst_out = worst;
    *values_out = values;
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

static void run_case(tf_client *c, const lcase *lc) {
    const size_t elems = (size_t)lc->n * (size_t)lc->n;
    const size_t bytes = elems * tf_dtype_size(lc->dt);
    void *a = xmalloc(bytes);
    lc_fill(lc->dt, a, elems, 0x11a1u + (uint64_t)lc->n * 7 + (uint64_t)lc->dt);
    if (lc->k == K_EIGH) lc_hermitize(lc->dt, a, lc->n);

    daemon_side d = {.c = c, .lc = lc};
    const int64_t shape[2] = {lc->n, lc->n};
    bench_check(NAME, c, tf_upload(c, lc->dt, 2, shape, a, &d.a), "tf_upload");
    bench_check(NAME, c, tf_session_open(c, &d.s), "tf_session_open");
    lapack_side lp = {.lc = lc, .a = a, .bytes = bytes};
    lapack_setup(&lp);

    int iters = lc->iters;
    const char *env = getenv("TENFERRO_BENCH_LINALG_ITERS");
    if (env && atoi(env) > 0) iters = atoi(env);
    if (iters > MAX_ITERS) iters = MAX_ITERS;
    const int blocks = iters < BLOCKS ? iters : BLOCKS;
    double td[MAX_ITERS], tb[MAX_ITERS];
    int nd = 0, nb = 0;

    /* Warm-up of each side, then the check of the daemon's results. */
    daemon_once(&d);
    double worst, values;
    lapack_once(&lp);
    check_case(&d, &lp, a, &worst, &values);
    daemon_drop(&d);

    for (int blk = 0; blk < blocks; blk++) {
        const int count = iters / blocks + (blk < iters % blocks);
        bench_sleep_ms(PAUSE_MS);
        for (int i = 0; i < count; i++) {
            td[nd++] = daemon_once(&d);
            daemon_drop(&d);
        }
        bench_sleep_ms(PAUSE_MS);
        for (int i = 0; i < count; i++) tb[nb++] = lapack_once(&lp);
    }
    bench_check(NAME, c, tf_session_close(d.s, NULL), "tf_session_close");
    bench_check(NAME, c, tf_tensor_free(c, d.a), "tf_tensor_free");

    const double td_med = bench_summary(td, (size_t)nd, BENCH_MEDIAN);
    const double tb_med = bench_summary(tb, (size_t)nb, BENCH_MEDIAN);
    const char *routine = lc->k == K_EIGH     ? "dsyevd jobz=V"
                          : lc->k == K_QR     ? "transpose in, dgeqrf + dorgqr"
                          : lc->dt == TF_F32  ? "sgesdd jobz=S"
                          : lc->dt == TF_C128 ? "zgesdd jobz=S"
                          : lc->dt == TF_C64  ? "cgesdd jobz=S"
                                              : "dgesdd jobz=S";
    printf("# %s: %s %dx%d %s; median of %d in %d alternating blocks after 1 warm-up; baseline "
           "%s (copy included); best tenferrod %.2f ms, baseline %.2f ms; check %.2g x "
           "tolerance, values within %.2g of LAPACK's\n",
           lc->name, kind_name(lc->k), lc->n, lc->n, tf_dtype_name(lc->dt), nd, blocks, routine,
           td[0], tb[0], worst, values);
    bench_report(lc->name, td_med, tb_med, "ms");
    lapack_free(&lp);
    free(a);
}

int main(int argc, char **argv) {
    tf_client *c = bench_connect(argc, argv);
    const char *ont = getenv("OPENBLAS_NUM_THREADS"), *omp = getenv("OMP_NUM_THREADS");
    printf("# bench-linalg: OpenBLAS %s, %d thread(s) in this process (OPENBLAS_NUM_THREADS=%s, "
           "OMP_NUM_THREADS=%s; the daemon inherits the same); daemon device: %s\n",
           openblas_get_config(), openblas_get_num_threads(), ont ? ont : "unset",
           omp ? omp : "unset", tf_client_device(c));
    fflush(stdout);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (selected(cases[i].name)) run_case(c, &cases[i]);
    tf_disconnect(c);
    return 0;
}
