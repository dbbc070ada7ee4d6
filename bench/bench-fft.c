/*
 * bench-fft: a 2-D FFT of a 1024 x 1024 c128 tensor through the daemon,
 * against the same transform by FFTW in this process.
 *
 *   cpu_fft2_c128_1024 (GB/s: 16 MiB read + 16 MiB written per transform)
 *     tenferrod: one held session; the input (random) is uploaded once; each
 *                iteration is tf_session_with queueing tf_view_fft over both
 *                axes, tf_session_synchronize, then tf_tensor_free of the
 *                result. The plan is in the daemon's cache after the warm-up.
 *     baseline:  fftw_execute of a plan made before timing with
 *                fftw_plan_dft_2d on fftw_malloc'd buffers of this process,
 *                with the planner flag the daemon uses ([caches]
 *                fftw_planner: estimate by default, which scripts/bench.sh's
 *                daemon runs with; $TENFERRO_BENCH_FFTW_PLANNER = measure or
 *                patient to compare a daemon started with those).
 *
 * Both run single-threaded FFTW on a resident input (neither side refills
 * it: a solver transforms what it already holds). Median of ITERS timed
 * iterations after WARMUP untimed ones of each side, the sides alternating
 * iteration by iteration, so a change of load on the machine hits both
 * alike. The daemon's output is checked once against the baseline's.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include "bench/bench-common.h"

#define N 1024
#define WARMUP 3
#define ITERS 31

static const char *const NAME = "bench-fft";

typedef struct transform {
    tf_tensor x, y;
} transform;

static tf_status fft2(tf_view *v, void *arg) {
    transform *t = arg;
    return tf_view_fft(v, t->x, 0, NULL, TF_FFT_NORM_BACKWARD, &t->y);
}

/* One daemon iteration: queue, synchronize, free; seconds. */
static double daemon_once(tf_client *c, tf_session *s, transform *t) {
    uint64_t t0 = bench_now_ns();
    bench_check(NAME, c, tf_session_with(s, fft2, t), "tf_session_with (fft)");
    bench_check(NAME, c, tf_session_synchronize(s), "tf_session_synchronize");
    bench_check(NAME, c, tf_tensor_free(c, t->y), "tf_tensor_free");
    return (double)(bench_now_ns() - t0) / 1e9;
}

static double fftw_once(fftw_plan p) {
    uint64_t t0 = bench_now_ns();
    fftw_execute(p);
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* The planner flag to compare with: the daemon's default unless the environment names another. */
static unsigned planner_flag(const char **name) {
    const char *e = getenv("TENFERRO_BENCH_FFTW_PLANNER");
    if (e && strcmp(e, "measure") == 0) {
        *name = "measure";
        return FFTW_MEASURE;
    }
    if (e && strcmp(e, "patient") == 0) {
        *name = "patient";
        return FFTW_PATIENT;
    }
    *name = "estimate";
    return FFTW_ESTIMATE;
}

int main(int argc, char **argv) {
    const size_t elems = (size_t)N * N, bytes = elems * sizeof(fftw_complex);
    const char *planner;
    const unsigned flag = planner_flag(&planner);
    fftw_complex *in = fftw_malloc(bytes), *out = fftw_malloc(bytes);
    double *x = malloc(bytes);
    if (!in || !out || !x) bench_die(NAME, "out of memory");
    /* Planned before the data is written: measure and patient overwrite the arrays. */
    fftw_plan plan = fftw_plan_dft_2d(N, N, in, out, FFTW_FORWARD, flag);
    if (!plan) bench_die(NAME, "FFTW could not plan a %dx%d transform", N, N);
    srand(1024);
    for (size_t i = 0; i < 2 * elems; i++) x[i] = (double)rand() / RAND_MAX - 0.5;
    memcpy(in, x, bytes);

    tf_client *c = bench_connect(argc, argv);
    const int64_t shape[2] = {N, N};
    transform t = {0};
    bench_check(NAME, c, tf_upload(c, TF_C128, 2, shape, x, &t.x), "tf_upload");
    tf_session *s = NULL;
    bench_check(NAME, c, tf_session_open(c, &s), "tf_session_open");

    /* Correctness, once: the daemon's transform against FFTW's here. */
    bench_check(NAME, c, tf_session_with(s, fft2, &t), "tf_session_with (fft)");
    bench_check(NAME, c, tf_session_synchronize(s), "tf_session_synchronize");
    void *got = NULL;
    size_t got_bytes = 0;
    bench_check(NAME, c, tf_download(c, t.y, &got, &got_bytes), "tf_download");
    bench_check(NAME, c, tf_tensor_free(c, t.y), "tf_tensor_free");
    fftw_execute(plan);
    if (got_bytes != bytes) bench_die(NAME, "the transform has %zu bytes", got_bytes);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < elems; i++) {
        const double complex a = ((double complex *)got)[i], b = ((double complex *)out)[i];
        worst = fmax(worst, cabs(a - b));
        scale = fmax(scale, cabs(b));
    }
    free(got);
    if (!(worst <= 1e-12 * scale))
        bench_die(NAME, "the daemon's transform differs from FFTW's by %g (of %g)", worst, scale);

    static double tfd[ITERS], raw[ITERS];
    for (int i = 0; i < WARMUP; i++) {
        daemon_once(c, s, &t);
        fftw_once(plan);
    }
    /* Iteration by iteration, so a change of load on the machine falls on both sides alike. */
    for (int i = 0; i < ITERS; i++) {
        tfd[i] = daemon_once(c, s, &t);
        raw[i] = fftw_once(plan);
    }
    bench_check(NAME, c, tf_session_close(s, NULL), "tf_session_close");

    const double moved = 2.0 * (double)bytes / 1e9; /* GB read and written per transform */
    const double tfd_med = bench_summary(tfd, ITERS, BENCH_MEDIAN);
    const double raw_med = bench_summary(raw, ITERS, BENCH_MEDIAN);
    double load = -1;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = -1;
        fclose(lf);
    }
    printf("# cpu_fft2_c128_1024: machine load average %.1f at the end\n", load);
    printf("# cpu_fft2_c128_1024: median of %d alternating after %d warm-up; planner %s on both "
           "sides; %.2f ms against %.2f ms per transform (best %.2f against %.2f); max "
           "|difference| %.2e\n",
           ITERS, WARMUP, planner, tfd_med * 1e3, raw_med * 1e3, tfd[0] * 1e3, raw[0] * 1e3, worst);
    bench_report("cpu_fft2_c128_1024", moved / tfd_med, moved / raw_med, "GB/s");

    tf_disconnect(c);
    fftw_destroy_plan(plan);
    fftw_free(in);
    fftw_free(out);
    free(x);
    return 0;
}
