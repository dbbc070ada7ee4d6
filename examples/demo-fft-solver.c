/*
 * demo-fft-solver: a spectral solver client of the demo (docs/demo.md).
 *
 *   demo-fft-solver [SOCKET] [--grid 64] [--steps 32] [--f32]
 *
 * Integrates the heat equation u_t = nu * laplacian(u) on the periodic cube
 * [0, 2 pi)^3 sampled on grid^3 points, from a manufactured initial value: a
 * sum of a few Fourier modes with random integer wave vectors k, amplitudes
 * and phases. Each mode decays as exp(-nu |k|^2 t), so the exact solution at
 * any time is known in closed form.
 *
 * One time step is one scoped burst through tenferrod: rfft over the three
 * axes, an elementwise multiplication of the half spectrum by
 * exp(-nu |k|^2 dt) (a tensor uploaded once), and irfft back with the
 * explicit output length grid. The client uploads the initial value, runs
 * the steps, and downloads the result once.
 *
 * Checked twice: against the exact solution, and against the same steps run
 * here with FFTW (which is also the in-process timing). Tolerance, normwise
 * (largest error over largest value): 1e-10 in f64, 1e-4 in f32.
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fftw3.h>

#include "demo-common.h"

#define MODES 6

/* The manufactured problem: u(x, t) = sum_m amp_m exp(-nu |k_m|^2 t) cos(k_m . x + phase_m). */
typedef struct heat_problem {
    int n;              /* points per axis */
    int steps;
    double nu, t_end;
    int k[MODES][3];
    double amp[MODES], phase[MODES];
} heat_problem;

/* State of the step callback: the current field and the decay factor on the device. */
typedef struct step_arg {
    tf_tensor u, decay;
    int64_t n;
} step_arg;

static void *xmalloc(const demo_run *r, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) demo_die(r, "out of memory (%zu bytes)", bytes);
    return p;
}

/* Random modes with wave vectors up to n/4 per axis (well inside the grid's band). */
static void make_problem(heat_problem *p, demo_rng *g) {
    int kmax = p->n / 4;
    for (int m = 0; m < MODES; m++) {
        for (int a = 0; a < 3; a++) p->k[m][a] = (int)lround(kmax * demo_uniform(g));
        p->amp[m] = 1.0 + 0.5 * demo_uniform(g);
        p->phase[m] = M_PI * demo_uniform(g);
    }
    /* The fastest mode possible loses a factor e^3 over the run. */
    p->nu = 1.0 / (kmax * kmax);
    p->t_end = 1.0;
}

/* The exact solution at time t on the grid, row-major (x, y, z). */
static void exact_solution(const heat_problem *p, double t, double *u) {
    size_t n = (size_t)p->n;
    double h = 2 * M_PI / p->n;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t l = 0; l < n; l++) {
                double v = 0;
                for (int m = 0; m < MODES; m++) {
                    double k2 = p->k[m][0] * p->k[m][0] + p->k[m][1] * p->k[m][1] +
                                p->k[m][2] * p->k[m][2];
                    double phase = h * (p->k[m][0] * (double)i + p->k[m][1] * (double)j +
                                        p->k[m][2] * (double)l) + p->phase[m];
                    v += p->amp[m] * exp(-p->nu * k2 * t) * cos(phase);
                }
                u[(i * n + j) * n + l] = v;
            }
}

/* The signed wave number of bin i of an axis of n points (numpy's fftfreq times n). */
static int wave_number(int i, int n) { return i <= n / 2 ? i : i - n; }

/* exp(-nu |k|^2 dt) on the half spectrum (n, n, n/2+1). */
static void decay_factor(const heat_problem *p, double *out) {
    int n = p->n, h = n / 2 + 1;
    double dt = p->t_end / p->steps;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int l = 0; l < h; l++) {
                int kx = wave_number(i, n), ky = wave_number(j, n), kz = l;
                out[((size_t)i * n + j) * h + l] = exp(-p->nu * (kx * kx + ky * ky + kz * kz) * dt);
            }
}

/* One time step as one burst: u <- irfft(rfft(u) * decay), the old field and spectra freed. */
static tf_status queue_step(tf_view *v, void *varg) {
    step_arg *a = varg;
    tf_client *c = tf_view_client(v);
    const int axes[3] = {0, 1, 2};
    tf_tensor spec, damped, next;
    tf_status s = tf_view_rfft(v, a->u, 3, axes, TF_FFT_NORM_BACKWARD, &spec);
    if (s == TF_OK) s = tf_view_mul(v, spec, a->decay, &damped);
    if (s == TF_OK) s = tf_view_irfft(v, damped, 3, axes, a->n, TF_FFT_NORM_BACKWARD, &next);
    if (s != TF_OK) return s;
    s = tf_tensor_free(c, spec);
    if (s == TF_OK) s = tf_tensor_free(c, damped);
    if (s == TF_OK) s = tf_tensor_free(c, a->u);
    a->u = next;
    return s;
}

/* The same steps with FFTW in double precision: u is overwritten with the result. */
static void inproc_f64(const demo_run *r, const heat_problem *p, const double *decay, double *u) {
    int n = p->n;
    size_t half = (size_t)n * n * (n / 2 + 1), total = (size_t)n * n * n;
    fftw_complex *spec = fftw_malloc(half * sizeof *spec);
    if (!spec) demo_die(r, "out of memory");
    fftw_plan fwd = fftw_plan_dft_r2c_3d(n, n, n, u, spec, FFTW_ESTIMATE);
    fftw_plan inv = fftw_plan_dft_c2r_3d(n, n, n, spec, u, FFTW_ESTIMATE);
    double scale = 1.0 / (double)total;
    for (int s = 0; s < p->steps; s++) {
        fftw_execute(fwd);
        for (size_t i = 0; i < half; i++) spec[i] *= decay[i];
        fftw_execute(inv);
        for (size_t i = 0; i < total; i++) u[i] *= scale;
    }
    fftw_destroy_plan(fwd);
    fftw_destroy_plan(inv);
    fftw_free(spec);
}

/* The same steps with FFTW in single precision. */
static void inproc_f32(const demo_run *r, const heat_problem *p, const double *decay, float *u) {
    int n = p->n;
    size_t half = (size_t)n * n * (n / 2 + 1), total = (size_t)n * n * n;
    fftwf_complex *spec = fftwf_malloc(half * sizeof *spec);
    float *dec = malloc(half * sizeof *dec);
    if (!spec || !dec) demo_die(r, "out of memory");
    for (size_t i = 0; i < half; i++) dec[i] = (float)decay[i];
    fftwf_plan fwd = fftwf_plan_dft_r2c_3d(n, n, n, u, spec, FFTW_ESTIMATE);
    fftwf_plan inv = fftwf_plan_dft_c2r_3d(n, n, n, spec, u, FFTW_ESTIMATE);
    float scale = 1.0f / (float)total;
    for (int s = 0; s < p->steps; s++) {
        fftwf_execute(fwd);
        for (size_t i = 0; i < half; i++) spec[i] *= dec[i];
        fftwf_execute(inv);
        for (size_t i = 0; i < total; i++) u[i] *= scale;
    }
    fftwf_destroy_plan(fwd);
    fftwf_destroy_plan(inv);
    fftwf_free(spec);
    free(dec);
}

/* Largest |x - y| over the largest |y|: the normwise error of x against y. */
static double normwise(const double *x, const double *y, size_t n) {
    double err = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs(x[i] - y[i]));
        big = fmax(big, fabs(y[i]));
    }
    return big > 0 ? err / big : err;
}

int main(int argc, char **argv) {
    demo_run r;
    demo_start(&r, "fft-solver", argc, argv);
    heat_problem p;
    memset(&p, 0, sizeof p);
    p.n = demo_option(&r, argc, argv, "--grid", 64);
    p.steps = demo_option(&r, argc, argv, "--steps", 32);
    int single = demo_flag(argc, argv, "--f32");
    if (p.n < 4 || p.n % 2) demo_die(&r, "--grid must be even and at least 4");
    tf_dtype real = single ? TF_F32 : TF_F64, cplx = single ? TF_C64 : TF_C128;
    double tolerance = single ? 1e-4 : 1e-10;
    size_t total = (size_t)p.n * p.n * p.n, half = (size_t)p.n * p.n * (p.n / 2 + 1);

    demo_rng g;
    demo_rng_init(&g, r.seed);
    make_problem(&p, &g);
    double *u0 = xmalloc(&r, total * sizeof *u0), *exact = xmalloc(&r, total * sizeof *exact);
    double *decay = xmalloc(&r, half * sizeof *decay), *got = xmalloc(&r, total * sizeof *got);
    exact_solution(&p, 0, u0);
    exact_solution(&p, p.t_end, exact);
    decay_factor(&p, decay);

    /* Host copies in the tensor's dtype: reals, and the decay as complex numbers. */
    size_t esize = single ? sizeof(float) : sizeof(double);
    void *field = xmalloc(&r, total * esize), *spectrum = xmalloc(&r, half * 2 * esize);
    for (size_t i = 0; i < total; i++) {
        if (single) ((float *)field)[i] = (float)u0[i];
        else ((double *)field)[i] = u0[i];
    }
    for (size_t i = 0; i < half; i++) {
        if (single) {
            ((float *)spectrum)[2 * i] = (float)decay[i];
            ((float *)spectrum)[2 * i + 1] = 0;
        } else {
            ((double *)spectrum)[2 * i] = decay[i];
            ((double *)spectrum)[2 * i + 1] = 0;
        }
    }

    const int64_t shape[3] = {p.n, p.n, p.n}, hshape[3] = {p.n, p.n, p.n / 2 + 1};
    step_arg arg = {demo_upload(&r, real, 3, shape, field), demo_upload(&r, cplx, 3, hshape, spectrum),
                    p.n};
    for (int s = 0; s < p.steps; s++) demo_burst(&r, queue_step, &arg, "tf_with_session (step)");
    void *buf = NULL;
    size_t cap = 0;
    demo_download(&r, arg.u, &buf, &cap);
    for (size_t i = 0; i < total; i++) got[i] = single ? ((float *)buf)[i] : ((double *)buf)[i];
    demo_check(&r, tf_tensor_free(r.client, arg.u), "tf_tensor_free");
    demo_check(&r, tf_tensor_free(r.client, arg.decay), "tf_tensor_free");
    free(buf);

    /* The same steps here, from the same initial value (field still holds it). */
    double t0 = demo_now();
    if (single) inproc_f32(&r, &p, decay, field);
    else inproc_f64(&r, &p, decay, field);
    r.inproc_s = demo_now() - t0;
    double *mine = u0; /* u0 is no longer needed: reuse it for the in-process result */
    for (size_t i = 0; i < total; i++) mine[i] = single ? ((float *)field)[i] : ((double *)field)[i];

    double err_exact = normwise(got, exact, total), err_fftw = normwise(got, mine, total);
    int ok = err_exact <= tolerance && err_fftw <= tolerance;
    /* A real transform of N points: the customary 2.5 N log2 N flops. */
    double flops = 2.0 * p.steps * 2.5 * (double)total * log2((double)total);
    int status = demo_finish(&r, ok, 2.0 * p.steps, "transforms", flops,
                             "heat equation, %d^3 grid, %d steps, %s: normwise err vs exact %.1e, "
                             "vs FFTW here %.1e (tol %.0e)",
                             p.n, p.steps, single ? "f32" : "f64", err_exact, err_fftw, tolerance);
    free(u0);
    free(exact);
    free(decay);
    free(got);
    free(field);
    free(spectrum);
    return status;
}
