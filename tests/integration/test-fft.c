/*
 * Integration tests of the FFTs (OP_FFT: tf_view_fft, ifft, rfft, irfft)
 * through a real tenferrod, on the suite's device (cpu here, cuda:0 on the
 * GPU machine).
 *
 * Results: fresh random inputs (th_fill_random; the harness prints the seed)
 * against a direct DFT computed here in long double, for small tensors:
 * every non-empty axis set of tensors of rank 1 to 3 and of some of rank 4
 * (1-D, 2-D, n-D, batched, leading, middle and trailing axes, axis lists in
 * any order and with negative axes, the default "all axes"), every norm,
 * odd (prime: 7, 11) and even lengths, C2C forward and inverse in c64 and
 * c128, R2C in f32 and f64 with every transformed axis as the halved one,
 * and C2R of half spectra back to even and odd lengths. The C2R reference
 * is the inverse DFT of the Hermitian extension of its input. For large
 * sizes (2^16, 256 x 256, and a real 2^16) the inverse of the forward
 * transform gives the input back, and Parseval's identity holds. Tolerances
 * are normwise (worst error over the largest reference value), by dtype. The
 * inputs of every transform, irfft's too, come back unchanged.
 *
 * Plan caches (the daemon-wide FFT cache in `tenferroctl status`): a second
 * identical transform is a hit and the first a miss; with [caches]
 * fft_plans = 2, three shapes evict; trim empties the cache (entries back to
 * 0) and is refused TF_ERR_BUSY while a held session is open; two client
 * processes transforming the same shape at the same time both get correct
 * results; on the CPU, FFTW wisdom is written where [caches] fftw_wisdom
 * says, and an unwritable place only costs a log line.
 *
 * Bad input, each refused typed at the call and again when sent raw to the
 * daemon (the connection stays usable and another client's data and service
 * are untouched): axes out of range, negative on the wire, repeated, too
 * many or none (a rank-0 tensor), an irfft length that does not fit, a real
 * tensor to C2C, a complex one to R2C, an unknown kind or norm, and an
 * OP_FFT without its descriptor.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ops.h"
#include "tests/integration/harness.h"

typedef long double complex lcplx;

#define PI_L 3.141592653589793238462643383279502884L

/* ---- the reference: a direct DFT in long double ---- */

/* A tensor's shape, for the reference loops. */
typedef struct shape {
    int rank;
    int64_t dim[TF_MAX_RANK];
} shape;

static int64_t numel_of(const shape *s) { return (int64_t)th_numel(s->rank, s->dim); }

/* Row-major index of a multi-index. */
static int64_t flat(const shape *s, const int64_t *idx) {
    int64_t f = 0;
    for (int a = 0; a < s->rank; a++) f = f * s->dim[a] + idx[a];
    return f;
}

/* Advances a multi-index over the axes in `mask` of shape s; 0 after the last. */
static int next_over(int64_t *idx, const shape *s, unsigned mask) {
    for (int a = s->rank - 1; a >= 0; a--) {
        if (!(mask & (1u << a))) continue;
        if (++idx[a] < s->dim[a]) return 1;
        idx[a] = 0;
    }
    return 0;
}

/* One transform as the API takes it. */
typedef struct fft_case {
    int kind; /* tf__fft_kind */
    int inverse;
    tf_fft_norm norm;
    int n_axes; /* 0 = all */
    int axes[TF_MAX_RANK];
    int64_t last_length; /* irfft; 0 = default */
} fft_case;

/* The factor numpy's norm gives, n the product of the real-side lengths. */
static long double norm_factor(tf_fft_norm norm, int inverse, long double n) {
    if (norm == TF_FFT_NORM_ORTHO) return 1.0L / sqrtl(n);
    if (norm == TF_FFT_NORM_FORWARD) return inverse ? 1.0L : 1.0L / n;
    return inverse ? 1.0L / n : 1.0L;
}

/* The normalized axes of c for a rank (all, negative counted from the end), last = the halved one. */
static int resolve_axes(const fft_case *c, int rank, int *axes) {
    if (c->n_axes == 0) {
        for (int a = 0; a < rank; a++) axes[a] = a;
        return rank;
    }
    for (int i = 0; i < c->n_axes; i++) axes[i] = c->axes[i] < 0 ? c->axes[i] + rank : c->axes[i];
    return c->n_axes;
}

/*
 * The reference of case c on input x (shape in, complex long double; real
 * inputs have zero imaginary parts) into y (shape out).
 */
static void reference(const fft_case *c, const shape *in, const lcplx *x, shape *out, lcplx *y) {
    int axes[TF_MAX_RANK] = {0};
    const int n_axes = resolve_axes(c, in->rank, axes);
    const int last = axes[n_axes - 1];
    unsigned mask = 0;
    for (int i = 0; i < n_axes; i++) mask |= 1u << axes[i];
    *out = *in;
    shape full = *in; /* the logical (real-side) lengths */
    if (c->kind == TF__FFT_R2C) out->dim[last] = in->dim[last] / 2 + 1;
    if (c->kind == TF__FFT_C2R) {
        int64_t n = c->last_length ? c->last_length : 2 * (in->dim[last] - 1);
        out->dim[last] = full.dim[last] = n;
    }
    long double n_total = 1;
    for (int i = 0; i < n_axes; i++) n_total *= (long double)full.dim[axes[i]];
    const int inverse = c->kind == TF__FFT_C2R || (c->kind == TF__FFT_C2C && c->inverse);
    const long double sign = inverse ? 1.0L : -1.0L;
    const long double s = norm_factor(c->norm, inverse, n_total);
    int64_t k[TF_MAX_RANK] = {0};
    do {
        lcplx acc = 0;
        int64_t j[TF_MAX_RANK];
        memcpy(j, k, sizeof j);
        for (int i = 0; i < n_axes; i++) j[axes[i]] = 0;
        do {
            long double frac = 0;
            for (int i = 0; i < n_axes; i++) {
                const int a = axes[i];
                frac += (long double)(j[a] * k[a] % full.dim[a]) / (long double)full.dim[a];
            }
            lcplx v;
            if (c->kind == TF__FFT_C2R) {
                /* The Hermitian extension of the half spectrum along the halved axis. */
                const int64_t m = in->dim[last];
                if (j[last] < m) {
                    v = x[flat(in, j)];
                } else {
                    int64_t mirror[TF_MAX_RANK];
                    memcpy(mirror, j, sizeof mirror);
                    for (int i = 0; i < n_axes; i++)
                        mirror[axes[i]] = (full.dim[axes[i]] - j[axes[i]]) % full.dim[axes[i]];
                    v = conjl(x[flat(in, mirror)]);
                }
            } else {
                v = x[flat(in, j)];
            }
            const long double th = 2.0L * PI_L * frac;
            acc += v * (cosl(th) + I * sign * sinl(th));
        } while (next_over(j, &full, mask));
        acc *= s;
        if (c->kind == TF__FFT_C2R) acc = creall(acc);
        y[flat(out, k)] = acc;
    } while (next_over(k, out, ~0u));
}

/* Host data of a dtype as complex long double values. */
static void to_long(tf_dtype dt, const void *data, int64_t n, lcplx *out) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case TF_F32: out[i] = ((const float *)data)[i]; break;
        case TF_F64: out[i] = ((const double *)data)[i]; break;
        case TF_C64:
            out[i] = ((const float *)data)[2 * i] + I * (long double)((const float *)data)[2 * i + 1];
            break;
        case TF_C128:
            out[i] = ((const double *)data)[2 * i] + I * (long double)((const double *)data)[2 * i + 1];
            break;
        }
    }
}

/* Complex long double values into host data of a complex dtype. */
static void from_long(tf_dtype dt, const lcplx *v, int64_t n, void *data) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == TF_C64) {
            ((float *)data)[2 * i] = (float)creall(v[i]);
            ((float *)data)[2 * i + 1] = (float)cimagl(v[i]);
        } else {
            ((double *)data)[2 * i] = (double)creall(v[i]);
            ((double *)data)[2 * i + 1] = (double)cimagl(v[i]);
        }
    }
}

/* Normwise relative error: the worst |got - want| over the largest |want|. */
static double normwise_error(const lcplx *got, const lcplx *want, int64_t n) {
    long double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        long double d = cabsl(got[i] - want[i]);
        if (isnan((double)d)) return INFINITY;
        if (d > worst) worst = d;
        if (cabsl(want[i]) > scale) scale = cabsl(want[i]);
    }
    return (double)(worst / (scale > 0 ? scale : 1));
}


/* ---- running cases through the daemon ---- */

#define MAX_CASES 96

/* A batch of transforms of one input, queued in one scoped session. */
typedef struct batch {
    tf_tensor input;
    int n;
    const fft_case *cases;
    tf_tensor out[MAX_CASES];
    tf_status got[MAX_CASES];
} batch;

/* Queues one case on the view. */
static tf_status queue_case(tf_view *v, tf_tensor a, const fft_case *c, tf_tensor *out) {
    const int *axes = c->n_axes ? c->axes : NULL;
    switch (c->kind) {
    case TF__FFT_C2C:
        return c->inverse ? tf_view_ifft(v, a, c->n_axes, axes, c->norm, out)
                          : tf_view_fft(v, a, c->n_axes, axes, c->norm, out);
    case TF__FFT_R2C: return tf_view_rfft(v, a, c->n_axes, axes, c->norm, out);
    default: return tf_view_irfft(v, a, c->n_axes, axes, c->last_length, c->norm, out);
    }
}

static tf_status queue_batch(tf_view *v, void *arg) {
    batch *b = arg;
    for (int i = 0; i < b->n; i++) {
        tf_status st = queue_case(v, b->input, &b->cases[i], &b->out[i]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* A readable name of a case, for failure messages. */
static void describe(const fft_case *c, tf_dtype dt, const shape *s, char *buf, size_t len) {
    static const char *const kinds[] = {"c2c", "r2c", "c2r"};
    int n = snprintf(buf, len, "%s%s %s [", kinds[c->kind], c->inverse && !c->kind ? " inverse" : "",
                     tf_dtype_name(dt));
    for (int a = 0; a < s->rank; a++) n += snprintf(buf + n, len - (size_t)n, "%s%lld", a ? "," : "", (long long)s->dim[a]);
    n += snprintf(buf + n, len - (size_t)n, "] axes (");
    for (int i = 0; i < c->n_axes; i++) n += snprintf(buf + n, len - (size_t)n, "%s%d", i ? "," : "", c->axes[i]);
    snprintf(buf + n, len - (size_t)n, "%s) norm %d last_length %lld (seed %u)", c->n_axes ? "" : "all",
             (int)c->norm, (long long)c->last_length, th_seed());
}

/*
 * Uploads `data` (dtype dt, shape s), runs every case on it in one scoped
 * session, and checks each output against the reference within tol; the
 * input must come back unchanged.
 */
static void run_cases(tf_client *c, tf_dtype dt, const shape *s, const void *data,
                      const fft_case *cases, int n, double tol) {
    ck_assert_int_le(n, MAX_CASES);
    const int64_t numel = numel_of(s);
    batch b = {.n = n, .cases = cases};
    CK_STATUS(c, tf_upload(c, dt, s->rank, s->dim, data, &b.input), TF_OK);
    CK_STATUS(c, tf_with_session(c, queue_batch, &b), TF_OK);
    lcplx *x = malloc(sizeof(lcplx) * (size_t)numel);
    to_long(dt, data, numel, x);
    for (int i = 0; i < n; i++) {
        shape os;
        /* Large enough for any output: R2C halves an axis, C2R at most doubles one. */
        lcplx *want = malloc(sizeof(lcplx) * (size_t)(2 * numel + 8));
        reference(&cases[i], s, x, &os, want);
        void *got = NULL;
        size_t bytes = 0;
        CK_STATUS(c, tf_download(c, b.out[i], &got, &bytes), TF_OK);
        const int64_t on = numel_of(&os);
        const tf_dtype odt = cases[i].kind == TF__FFT_R2C ? th_complex_of(dt)
                             : cases[i].kind == TF__FFT_C2R ? th_real_of(dt)
                                                            : dt;
        char what[256];
        describe(&cases[i], dt, s, what, sizeof what);
        ck_assert_msg(bytes == (size_t)on * tf_dtype_size(odt), "%s: %zu bytes, expected %lld x %s",
                      what, bytes, (long long)on, tf_dtype_name(odt));
        lcplx *g = malloc(sizeof(lcplx) * (size_t)on);
        to_long(odt, got, on, g);
        double err = normwise_error(g, want, on);
        ck_assert_msg(err <= tol, "%s: normwise error %.3g > %.3g", what, err, tol);
        free(g);
        free(got);
        free(want);
        CK_STATUS(c, tf_tensor_free(c, b.out[i]), TF_OK);
    }
    /* The input is never modified, irfft's included. */
    void *back = NULL;
    size_t bytes = 0;
    CK_STATUS(c, tf_download(c, b.input, &back, &bytes), TF_OK);
    ck_assert_msg(bytes == (size_t)numel * tf_dtype_size(dt) && memcmp(back, data, bytes) == 0,
                  "an FFT changed its input (%s)", tf_dtype_name(dt));
    free(back);
    CK_STATUS(c, tf_tensor_free(c, b.input), TF_OK);
    free(x);
}

/* Every axis list of a rank: each non-empty subset, in descending order (not sorted). */
static int axis_sets(int rank, int lists[][TF_MAX_RANK], int *lens) {
    int n = 0;
    for (unsigned set = 1; set < (1u << rank); set++) {
        lens[n] = 0;
        for (int a = rank - 1; a >= 0; a--)
            if (set & (1u << a)) lists[n][lens[n]++] = a;
        n++;
    }
    return n;
}

/* The shapes the small transforms run on: odd (prime) and even lengths, ranks 1 to 4. */
static const shape small_shapes[] = {
    {1, {7}},    {1, {8}},       {1, {11}},        {1, {12}},          {2, {5, 6}},
    {2, {4, 1}}, {3, {3, 4, 7}}, {3, {2, 5, 4}},  {4, {2, 3, 4, 5}},
};
#define N_SMALL ((int)(sizeof small_shapes / sizeof small_shapes[0]))

/* The fixture: one daemon per test, one client. */
static th_daemon D;
static tf_client *C;

static void start(void) {
    CK_DAEMON_START(&D, "--fft-plans", "64");
    C = th_connect(&D);
}

static void stop(void) {
    tf_disconnect(C);
    C = NULL;
    CK_DAEMON_STOP(&D);
}

/* Random data of a dtype for a shape (caller frees). */
static void *random_data(tf_dtype dt, const shape *s) {
    const int64_t n = numel_of(s);
    void *p = malloc((size_t)n * tf_dtype_size(dt));
    th_fill_random(dt, (size_t)n, p);
    return p;
}

/* ---- C2C ---- */

/* C2C forward and inverse, every norm, every axis set (rank 4: a few), c64 and c128. */
/* The small cases of one shape (one daemon runs every shape of a test: a CUDA daemon takes seconds to start). */
static void c2c_shape(const shape *s) {
    static const tf_dtype dts[2] = {TF_C64, TF_C128};
    int lists[16][TF_MAX_RANK], lens[16];
    int n_sets = axis_sets(s->rank, lists, lens);
    for (int d = 0; d < 2; d++) {
        void *data = random_data(dts[d], s);
        static fft_case cases[MAX_CASES];
        int n = 0;
        for (int k = 0; k < n_sets; k++) {
            /* Rank 4: the middle, split and all-axes sets, which need loops or two plans on CUDA. */
            if (s->rank == 4 && !(k == 1 || k == 4 || k == 5 || k == 9 || k == n_sets - 1)) continue;
            for (int inv = 0; inv < 2; inv++) {
                for (int norm = 0; norm < 3; norm++) {
                    fft_case *c = &cases[n++];
                    memset(c, 0, sizeof *c);
                    c->kind = TF__FFT_C2C;
                    c->inverse = inv;
                    c->norm = (tf_fft_norm)norm;
                    c->n_axes = lens[k];
                    memcpy(c->axes, lists[k], sizeof c->axes);
                }
            }
        }
        /* Every axis by default, and negative axes. */
        cases[n++] = (fft_case){TF__FFT_C2C, 0, TF_FFT_NORM_BACKWARD, 0, {0}, 0};
        cases[n++] = (fft_case){TF__FFT_C2C, 1, TF_FFT_NORM_ORTHO, 1, {-1}, 0};
        run_cases(C, dts[d], s, data, cases, n, th_tolerance(dts[d]));
        free(data);
    }
}

START_TEST(test_c2c_small) {
    start();
    for (int i = 0; i < N_SMALL; i++) c2c_shape(&small_shapes[i]);
    stop();
}
END_TEST

/* ---- R2C and C2R ---- */

/* A real transform over list[0..len), with list[h] moved to the end: the halved axis. */
static fft_case halving(int kind, const int *list, int len, int h) {
    fft_case c = {kind, kind == TF__FFT_C2R, TF_FFT_NORM_BACKWARD, len, {0}, 0};
    for (int i = 0, j = 0; i < len; i++)
        if (i != h) c.axes[j++] = list[i];
    c.axes[len - 1] = list[h];
    return c;
}

/* R2C with every transformed axis as the halved one, every norm, f32 and f64. */
static void r2c_shape(const shape *s) {
    static const tf_dtype dts[2] = {TF_F32, TF_F64};
    int lists[16][TF_MAX_RANK], lens[16];
    int n_sets = axis_sets(s->rank, lists, lens);
    for (int d = 0; d < 2; d++) {
        void *data = random_data(dts[d], s);
        static fft_case cases[MAX_CASES];
        int n = 0;
        for (int k = 0; k < n_sets && n + 3 * TF_MAX_RANK <= MAX_CASES; k++) {
            if (s->rank == 4 && !(k == 4 || k == 9 || k == n_sets - 1)) continue;
            for (int h = 0; h < lens[k]; h++) {
                cases[n] = halving(TF__FFT_R2C, lists[k], lens[k], h);
                cases[n++].norm = (tf_fft_norm)((k + h) % 3);
            }
        }
        cases[n++] = (fft_case){TF__FFT_R2C, 0, TF_FFT_NORM_FORWARD, 0, {0}, 0};
        run_cases(C, dts[d], s, data, cases, n, th_tolerance(dts[d]));
        free(data);
    }
}

START_TEST(test_r2c_small) {
    start();
    for (int i = 0; i < N_SMALL; i++) r2c_shape(&small_shapes[i]);
    stop();
}
END_TEST

/*
 * C2R of half spectra (the rfft of random real data, computed here) back to
 * even and odd lengths, with every transformed axis as the halved one, and
 * the default length.
 */
static void c2r_shape(const shape *s) {
    static const tf_dtype dts[2] = {TF_C64, TF_C128};
    int lists[16][TF_MAX_RANK], lens[16];
    int n_sets = axis_sets(s->rank, lists, lens);
    const int64_t numel = numel_of(s);
    lcplx *real = malloc(sizeof(lcplx) * (size_t)numel);
    for (int d = 0; d < 2; d++) {
        double *r = malloc(sizeof(double) * (size_t)numel);
        th_fill_random(TF_F64, (size_t)numel, r);
        for (int64_t i = 0; i < numel; i++) real[i] = r[i];
        free(r);
        for (int k = 0; k < n_sets; k++) {
            if (s->rank == 4 && !(k == 4 || k == n_sets - 1)) continue;
            for (int h = 0; h < lens[k]; h++) {
                /* The half spectrum of `real` over this axis list, halving axis lists[k][h]. */
                const fft_case fwd = halving(TF__FFT_R2C, lists[k], lens[k], h);
                shape hs;
                lcplx *half = malloc(sizeof(lcplx) * (size_t)numel);
                reference(&fwd, s, real, &hs, half);
                void *data = malloc((size_t)numel_of(&hs) * tf_dtype_size(dts[d]));
                from_long(dts[d], half, numel_of(&hs), data);
                fft_case cases[4];
                for (int norm = 0; norm < 3; norm++) {
                    cases[norm] = fwd;
                    cases[norm].kind = TF__FFT_C2R;
                    cases[norm].inverse = 1;
                    cases[norm].norm = (tf_fft_norm)norm;
                    cases[norm].last_length = s->dim[lists[k][h]];
                }
                cases[3] = cases[0];
                cases[3].last_length = 0; /* numpy's default, 2 * (m - 1) */
                const int n = s->dim[lists[k][h]] > 1 ? 4 : 3; /* m = 1 has no default length */
                run_cases(C, dts[d], &hs, data, cases, n, th_tolerance(dts[d]));
                free(data);
                free(half);
            }
        }
    }
    free(real);
}

START_TEST(test_c2r_small) {
    start();
    for (int i = 0; i < N_SMALL; i++) c2r_shape(&small_shapes[i]);
    stop();
}
END_TEST

/* ---- large sizes: inverse(forward(x)) == x and Parseval ---- */

/* What one round trip is: its dtype, shape and axes. */
typedef struct round_trip {
    tf_dtype dtype; /* the input's */
    shape s;
    int n_axes;
    int axes[2];
} round_trip;

typedef struct round_trip_run {
    const round_trip *rt;
    tf_tensor x, fwd, back;
} round_trip_run;

static tf_status run_round_trip(tf_view *v, void *arg) {
    round_trip_run *r = arg;
    const round_trip *rt = r->rt;
    tf_status st;
    if (rt->dtype == TF_C64 || rt->dtype == TF_C128) {
        st = tf_view_fft(v, r->x, rt->n_axes, rt->axes, TF_FFT_NORM_BACKWARD, &r->fwd);
        if (st == TF_OK) st = tf_view_ifft(v, r->fwd, rt->n_axes, rt->axes, TF_FFT_NORM_BACKWARD, &r->back);
    } else {
        st = tf_view_rfft(v, r->x, rt->n_axes, rt->axes, TF_FFT_NORM_ORTHO, &r->fwd);
        const int64_t n = rt->s.dim[rt->axes[rt->n_axes - 1]];
        if (st == TF_OK)
            st = tf_view_irfft(v, r->fwd, rt->n_axes, rt->axes, n, TF_FFT_NORM_ORTHO, &r->back);
    }
    return st;
}

/* Sum of |v|^2 over n values of a dtype (long double). */
static long double energy(tf_dtype dt, const void *data, int64_t n) {
    long double e = 0;
    const int cplx = dt == TF_C64 || dt == TF_C128;
    for (int64_t i = 0; i < n * (cplx ? 2 : 1); i++) {
        long double x = dt == TF_F32 || dt == TF_C64 ? ((const float *)data)[i] : ((const double *)data)[i];
        e += x * x;
    }
    return e;
}

START_TEST(test_large_round_trip) {
    start();
    static const round_trip cases[] = {
        {TF_C64, {1, {65536}}, 1, {0}},
        {TF_C128, {1, {65536}}, 1, {0}},
        {TF_C64, {2, {256, 256}}, 2, {0, 1}},
        {TF_C128, {2, {256, 256}}, 2, {1, 0}},
        {TF_F32, {1, {65536}}, 1, {0}},
        {TF_F64, {2, {256, 256}}, 2, {0, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const round_trip *rt = &cases[i];
        const int64_t n = numel_of(&rt->s);
        void *x = random_data(rt->dtype, &rt->s);
        round_trip_run r = {.rt = rt};
        CK_STATUS(C, tf_upload(C, rt->dtype, rt->s.rank, rt->s.dim, x, &r.x), TF_OK);
        CK_STATUS(C, tf_with_session(C, run_round_trip, &r), TF_OK);
        void *back = NULL, *fwd = NULL;
        size_t bytes = 0, fbytes = 0;
        CK_STATUS(C, tf_download(C, r.back, &back, &bytes), TF_OK);
        CK_STATUS(C, tf_download(C, r.fwd, &fwd, &fbytes), TF_OK);
        ck_assert_uint_eq(bytes, (size_t)n * tf_dtype_size(rt->dtype));
        lcplx *a = malloc(sizeof(lcplx) * (size_t)n), *b = malloc(sizeof(lcplx) * (size_t)n);
        to_long(rt->dtype, x, n, a);
        to_long(rt->dtype, back, n, b);
        const double tol = 10 * th_tolerance(rt->dtype);
        double err = normwise_error(b, a, n);
        ck_assert_msg(err <= tol, "case %zu: inverse(forward(x)) differs from x by %.3g (seed %u)", i,
                      err, th_seed());
        /* Parseval: C2C (backward norm) sum |X|^2 = N sum |x|^2; R2C (ortho) counts the half spectrum. */
        const long double ex = energy(rt->dtype, x, n);
        long double ef;
        if (rt->dtype == TF_C64 || rt->dtype == TF_C128) {
            ef = energy(rt->dtype, fwd, n) / (long double)n;
        } else {
            /* The halved (last listed) axis is the last axis here: weigh the bins with a twin twice. */
            const tf_dtype cd = th_complex_of(rt->dtype);
            const int64_t len = rt->s.dim[rt->s.rank - 1], m = len / 2 + 1, rows = n / len;
            ef = 0;
            for (int64_t row = 0; row < rows; row++) {
                for (int64_t k = 0; k < m; k++) {
                    const int64_t at = row * m + k;
                    long double re = cd == TF_C64 ? ((float *)fwd)[2 * at] : ((double *)fwd)[2 * at];
                    long double im = cd == TF_C64 ? ((float *)fwd)[2 * at + 1] : ((double *)fwd)[2 * at + 1];
                    const int twin = k != 0 && !(len % 2 == 0 && k == len / 2);
                    ef += (re * re + im * im) * (twin ? 2 : 1);
                }
            }
        }
        ck_assert_msg(fabsl(ef - ex) <= tol * ex, "case %zu: Parseval: %Lg against %Lg (seed %u)", i,
                      ef, ex, th_seed());
        free(a);
        free(b);
        free(back);
        free(fwd);
        free(x);
        CK_STATUS(C, tf_tensor_free(C, r.x), TF_OK);
        CK_STATUS(C, tf_tensor_free(C, r.fwd), TF_OK);
        CK_STATUS(C, tf_tensor_free(C, r.back), TF_OK);
    }
    stop();
}
END_TEST

/* tf_zeros makes a tensor of zeros on the device; its transforms are zeros (and every byte is written). */
typedef struct zeros_run {
    tf_tensor z, f, r;
} zeros_run;

static tf_status zeros_fn(tf_view *v, void *arg) {
    zeros_run *z = arg;
    tf_status st = tf_view_fft(v, z->z, 0, NULL, TF_FFT_NORM_ORTHO, &z->f);
    if (st == TF_OK) st = tf_view_irfft(v, z->z, 1, (const int[]){1}, 0, TF_FFT_NORM_BACKWARD, &z->r);
    return st;
}

START_TEST(test_zeros_input) {
    start();
    const int64_t dims[2] = {6, 5};
    zeros_run z = {0};
    CK_STATUS(C, tf_zeros(C, TF_C64, 2, dims, &z.z), TF_OK);
    CK_STATUS(C, tf_with_session(C, zeros_fn, &z), TF_OK);
    void *data = NULL;
    size_t bytes = 0;
    const tf_tensor ids[3] = {z.z, z.f, z.r};
    const size_t want[3] = {30 * 8, 30 * 8, 6 * 8 * 4};
    for (int i = 0; i < 3; i++) {
        CK_STATUS(C, tf_download(C, ids[i], &data, &bytes), TF_OK);
        ck_assert_uint_eq(bytes, want[i]);
        for (size_t k = 0; k < bytes; k++) ck_assert_msg(((uint8_t *)data)[k] == 0, "tensor %d byte %zu", i, k);
        free(data);
        CK_STATUS(C, tf_tensor_free(C, ids[i]), TF_OK);
    }
    CK_STATUS(C, tf_zeros(C, TF_C64, 2, NULL, &z.z), TF_ERR_INVALID_ARGUMENT);
    CK_STATUS(C, tf_zeros(C, (tf_dtype)9, 1, dims, &z.z), TF_ERR_DTYPE);
    stop();
}
END_TEST

/* ---- plan caches ---- */

/* The daemon's FFT plan cache from its status report ("fftw_plans" on cpu, "fft_plans" on cuda). */
static int fft_cache(const th_daemon *d, Tenferro__CacheInfo *out) {
    Tenferro__Frame *f = th_status_report(d);
    ck_assert_ptr_nonnull(f);
    int found = 0;
    for (size_t i = 0; i < f->status_reply->n_caches; i++) {
        Tenferro__CacheInfo *ci = f->status_reply->caches[i];
        if (ci->name && strstr(ci->name, "fft")) {
            *out = *ci;
            out->name = NULL;
            found = 1;
            break;
        }
    }
    tf__frame_free(f);
    return found;
}

/* One transform, as the cache tests use them: fft2 of a c128 tensor of this shape. */
typedef struct one_fft {
    tf_tensor x, y;
} one_fft;

static tf_status fft2_fn(tf_view *v, void *arg) {
    one_fft *o = arg;
    return tf_view_fft(v, o->x, 0, NULL, TF_FFT_NORM_BACKWARD, &o->y);
}

/* Uploads a fresh tensor of rows x cols c128, transforms it once and frees both. */
static void transform_once(tf_client *c, int64_t rows, int64_t cols) {
    const shape s = {2, {rows, cols}};
    void *data = random_data(TF_C128, &s);
    one_fft o = {0};
    CK_STATUS(c, tf_upload(c, TF_C128, 2, s.dim, data, &o.x), TF_OK);
    CK_STATUS(c, tf_with_session(c, fft2_fn, &o), TF_OK);
    CK_STATUS(c, tf_tensor_free(c, o.x), TF_OK);
    CK_STATUS(c, tf_tensor_free(c, o.y), TF_OK);
    free(data);
}

/* The first transform of a shape is a miss and an entry; the same again is a hit. */
START_TEST(test_cache_counters) {
    start();
    Tenferro__CacheInfo a, b, e;
    ck_assert_msg(fft_cache(&D, &a), "the status lists no FFT plan cache");
    ck_assert_uint_eq(a.capacity, 64);
    transform_once(C, 12, 10);
    ck_assert(fft_cache(&D, &b));
    ck_assert_msg(b.misses == a.misses + 1 && b.entries == a.entries + 1 && b.hits == a.hits,
                  "first transform: misses %llu -> %llu, entries %llu -> %llu, hits %llu -> %llu",
                  (unsigned long long)a.misses, (unsigned long long)b.misses,
                  (unsigned long long)a.entries, (unsigned long long)b.entries,
                  (unsigned long long)a.hits, (unsigned long long)b.hits);
    transform_once(C, 12, 10);
    ck_assert(fft_cache(&D, &e));
    ck_assert_msg(e.hits == b.hits + 1 && e.misses == b.misses && e.entries == b.entries,
                  "second transform: hits %llu -> %llu, misses %llu -> %llu",
                  (unsigned long long)b.hits, (unsigned long long)e.hits,
                  (unsigned long long)b.misses, (unsigned long long)e.misses);
    /* A second client (a process of its own would see the same) finds the plan warm. */
    tf_client *other = th_connect(&D);
    transform_once(other, 12, 10);
    tf_disconnect(other);
    ck_assert(fft_cache(&D, &b));
    ck_assert_uint_eq(b.hits, e.hits + 1);
    ck_assert_uint_eq(b.misses, e.misses);
    /* The text, JSON and Prometheus forms show it. */
    static char out[1 << 16];
    ck_assert_int_eq(th_run_ctl(&D, out, sizeof out, "status", NULL), 0);
    ck_assert_msg(strstr(out, "\ncaches:\n") && strstr(out, "fft"), "%s", out);
    ck_assert_int_eq(th_run_ctl(&D, out, sizeof out, "status", "--json"), 0);
    ck_assert_msg(strstr(out, "\"caches\":[{\"name\":"), "%s", out);
    ck_assert_int_eq(th_run_ctl(&D, out, sizeof out, "metrics", NULL), 0);
    ck_assert_msg(strstr(out, "\n# TYPE tenferrod_cache_hits_total counter\n") &&
                      strstr(out, "tenferrod_cache_entries{cache=\""),
                  "%s", out);
    stop();
}
END_TEST

/* With fft_plans = 2, three shapes push the oldest out: evictions counted, never more than 2 entries. */
START_TEST(test_cache_lru_bound) {
    CK_DAEMON_START(&D, "--fft-plans", "2");
    C = th_connect(&D);
    Tenferro__CacheInfo ci;
    transform_once(C, 4, 6);
    transform_once(C, 5, 6);
    transform_once(C, 6, 6);
    ck_assert(fft_cache(&D, &ci));
    ck_assert_uint_eq(ci.capacity, 2);
    ck_assert_uint_le(ci.entries, 2);
    ck_assert_uint_ge(ci.evictions, 1);
    ck_assert_uint_eq(ci.misses, 3);
    /* The first shape was pushed out: it misses again. */
    transform_once(C, 4, 6);
    Tenferro__CacheInfo after;
    ck_assert(fft_cache(&D, &after));
    ck_assert_uint_eq(after.misses, 4);
    ck_assert_uint_le(after.entries, 2);
    stop();
}
END_TEST

/* trim empties the cache (entries 0), but not while a held session is open (TF_ERR_BUSY, unchanged). */
START_TEST(test_cache_trim) {
    start();
    transform_once(C, 8, 8);
    transform_once(C, 8, 9);
    Tenferro__CacheInfo ci;
    ck_assert(fft_cache(&D, &ci));
    ck_assert_uint_ge(ci.entries, 2);
    static char out[4096];
    tf_client *holder = th_connect(&D);
    tf_session *s = NULL;
    CK_STATUS(holder, tf_session_open(holder, &s), TF_OK);
    ck_assert_int_eq(th_run_ctl(&D, out, sizeof out, "trim", NULL), 1);
    ck_assert_msg(strstr(out, "TF_ERR_BUSY"), "%s", out);
    Tenferro__CacheInfo busy;
    ck_assert(fft_cache(&D, &busy));
    ck_assert_uint_eq(busy.entries, ci.entries);
    CK_STATUS(holder, tf_session_close(s, NULL), TF_OK);
    tf_disconnect(holder);
    ck_assert_msg(th_run_ctl(&D, out, sizeof out, "trim", NULL) == 0, "trim: %s", out);
    ck_assert(fft_cache(&D, &ci));
    ck_assert_uint_eq(ci.entries, 0);
    /* The cache works on after a trim: the same shape is made again. */
    uint64_t misses = ci.misses;
    transform_once(C, 8, 8);
    ck_assert(fft_cache(&D, &ci));
    ck_assert_uint_eq(ci.misses, misses + 1);
    ck_assert_uint_eq(ci.entries, 1);
    stop();
}
END_TEST

/* Two client processes transforming the same shape at once: every result is right. */
#define SHARED_ROUNDS 40
static int shared_child(void *arg) {
    const unsigned salt = (unsigned)(uintptr_t)arg;
    tf_client *c = NULL;
    if (tf_connect(D.socket, &c) != TF_OK) return 2;
    const shape s = {2, {16, 24}};
    const int64_t n = numel_of(&s);
    srand(th_seed() ^ salt);
    double *x = malloc(sizeof(double) * 2 * (size_t)n);
    th_fill_random(TF_C128, (size_t)n, x);
    lcplx *lx = malloc(sizeof(lcplx) * (size_t)n), *want = malloc(sizeof(lcplx) * (size_t)n),
          *got = malloc(sizeof(lcplx) * (size_t)n);
    to_long(TF_C128, x, n, lx);
    const fft_case fc = {TF__FFT_C2C, 0, TF_FFT_NORM_BACKWARD, 0, {0}, 0};
    shape os;
    reference(&fc, &s, lx, &os, want);
    one_fft o = {0};
    CHILD_STATUS(c, tf_upload(c, TF_C128, 2, s.dim, x, &o.x), TF_OK);
    for (int r = 0; r < SHARED_ROUNDS; r++) {
        CHILD_STATUS(c, tf_with_session(c, fft2_fn, &o), TF_OK);
        void *y = NULL;
        size_t bytes = 0;
        CHILD_STATUS(c, tf_download(c, o.y, &y, &bytes), TF_OK);
        CHILD_CHECK(bytes == sizeof(double) * 2 * (size_t)n);
        to_long(TF_C128, y, n, got);
        free(y);
        double err = normwise_error(got, want, n);
        if (!(err <= th_tolerance(TF_C128))) {
            fprintf(stderr, "[child %d] round %d: normwise error %.3g\n", (int)getpid(), r, err);
            return 1;
        }
        CHILD_STATUS(c, tf_tensor_free(c, o.y), TF_OK);
    }
    free(x);
    free(lx);
    free(want);
    free(got);
    tf_disconnect(c);
    return 0;
}

START_TEST(test_cache_two_processes) {
    start();
    pid_t a = th_spawn(shared_child, (void *)(uintptr_t)0x1111);
    pid_t b = th_spawn(shared_child, (void *)(uintptr_t)0x2222);
    ck_assert_int_eq(th_wait(a), 0);
    ck_assert_int_eq(th_wait(b), 0);
    Tenferro__CacheInfo ci;
    ck_assert(fft_cache(&D, &ci));
    /* One key: at most one plan per stream that used it at once, everything else hits. */
    ck_assert_uint_le(ci.misses, 2);
    ck_assert_uint_ge(ci.hits, 2 * SHARED_ROUNDS - 2);
    stop();
}
END_TEST

/* CPU: measured wisdom lands in [caches] fftw_wisdom; an unwritable place is only a log line. */
START_TEST(test_wisdom_file) {
    if (strcmp(th_device(), "cpu") != 0) return; /* FFTW is the CPU backend's */
    char path[128], bad[] = "/nonexistent-tenferro-dir/fftw-wisdom";
    snprintf(path, sizeof path, "/tmp/tf-test-wisdom-%d", (int)getpid());
    unlink(path);
    CK_DAEMON_START(&D, "--fftw-planner", "measure", "--fftw-wisdom", path);
    C = th_connect(&D);
    transform_once(C, 16, 16);
    struct stat st;
    ck_assert_msg(stat(path, &st) == 0 && st.st_size > 0, "no wisdom written to %s", path);
    FILE *f = fopen(path, "r");
    char text[4096] = "";
    size_t got = fread(text, 1, sizeof text - 1, f);
    text[got] = '\0';
    fclose(f);
    ck_assert_msg(strstr(text, "fftw_wisdom") && strstr(text, "fftwf_wisdom"), "%s", text);
    stop();
    /* A restart reads it back. */
    CK_DAEMON_START(&D, "--fftw-planner", "measure", "--fftw-wisdom", path);
    C = th_connect(&D);
    char *log = th_daemon_log(&D);
    ck_assert_msg(strstr(log, "wisdom read from"), "%s", log);
    free(log);
    transform_once(C, 16, 16);
    stop();
    unlink(path);
    /* A directory that does not exist: the daemon serves, and says so at info. */
    CK_DAEMON_START(&D, "--fftw-planner", "measure", "--fftw-wisdom", bad);
    C = th_connect(&D);
    transform_once(C, 16, 16);
    log = th_daemon_log(&D);
    ck_assert_msg(strstr(log, "no wisdom read from") && strstr(log, "wisdom not written"), "%s", log);
    free(log);
    stop();
}
END_TEST

/* ---- bad input ---- */

/* One bad call and what it must be refused with. */
typedef struct bad_call {
    const char *what;
    fft_case c;
    int on_real;    /* apply it to the real tensor (else the complex one) */
    int on_scalar;  /* ... or to the rank-0 tensor */
    tf_status want;
    const char *needle;
} bad_call;

static const bad_call bad_calls[] = {
    {"axis out of range", {TF__FFT_C2C, 0, 0, 1, {2}, 0}, 0, 0, TF_ERR_AXIS, "2"},
    {"axis below -rank", {TF__FFT_C2C, 0, 0, 1, {-3}, 0}, 0, 0, TF_ERR_AXIS, "-3"},
    {"axis repeated", {TF__FFT_C2C, 1, 0, 2, {1, 1}, 0}, 0, 0, TF_ERR_AXIS, "twice"},
    {"axis repeated through a negative", {TF__FFT_C2C, 0, 0, 2, {1, -1}, 0}, 0, 0, TF_ERR_AXIS, "twice"},
    {"too many axes", {TF__FFT_C2C, 0, 0, 3, {0, 1, 0}, 0}, 0, 0, TF_ERR_AXIS, NULL},
    {"irfft length that does not fit", {TF__FFT_C2R, 1, 0, 1, {1}, 9}, 0, 0, TF_ERR_SHAPE, "9"},
    {"real tensor to fft", {TF__FFT_C2C, 0, 0, 1, {0}, 0}, 1, 0, TF_ERR_DTYPE, "rfft"},
    {"real tensor to ifft", {TF__FFT_C2C, 1, 0, 0, {0}, 0}, 1, 0, TF_ERR_DTYPE, "rfft"},
    {"complex tensor to rfft", {TF__FFT_R2C, 0, 0, 1, {1}, 0}, 0, 0, TF_ERR_DTYPE, "fft"},
    {"real tensor to irfft", {TF__FFT_C2R, 1, 0, 1, {1}, 6}, 1, 0, TF_ERR_DTYPE, NULL},
    {"unknown norm", {TF__FFT_C2C, 0, (tf_fft_norm)7, 1, {0}, 0}, 0, 0, TF_ERR_INVALID_ARGUMENT, "norm"},
    {"no axes with a rank-0 tensor", {TF__FFT_C2C, 0, 0, 0, {0}, 0}, 0, 1, TF_ERR_AXIS, "rank-0"},
};
#define N_BAD ((int)(sizeof bad_calls / sizeof bad_calls[0]))

typedef struct bad_run {
    const bad_call *b;
    tf_tensor z, r, scalar;
    tf_status got;
} bad_run;

static tf_status bad_fn(tf_view *v, void *arg) {
    bad_run *r = arg;
    tf_tensor out = 0, in = r->b->on_scalar ? r->scalar : r->b->on_real ? r->r : r->z;
    r->got = queue_case(v, in, &r->b->c, &out);
    return r->got;
}

/* The raw side: a connection that speaks frames, with its own tensors. */
static uint64_t g_seq = 1000;

static Tenferro__Frame *raw_call(int fd, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, 5000);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    ck_assert_uint_eq(r->seq, f->seq);
    return r;
}

/* Creates tensor id with data over the raw connection. */
static void raw_create(int fd, uint64_t id, tf_dtype dt, int rank, const int64_t *dims, const void *data) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 1, dt, rank, dims, 0, data,
                        th_numel(rank, dims) * tf_dtype_size(dt));
    CK_EXPECT_RESULT(raw_call(fd, &f), TF_OK, NULL);
}

/* Sends one OP_FFT of input `in` into `out` in a final scoped Submit; returns the reply. */
static Tenferro__Frame *raw_fft(int fd, uint64_t in, uint64_t out, Tenferro__Fft *desc) {
    Tenferro__Op op = TENFERRO__OP__INIT;
    op.kind = TF__OP_FFT;
    op.n_inputs = 1;
    op.inputs = &in;
    op.output = out;
    op.fft = desc;
    Tenferro__Op *ops[1] = {&op};
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.n_ops = 1;
    sub.ops = ops;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    return raw_call(fd, &f);
}

/* The descriptor of a case on the wire, axes taken as they are (negative ones too). */
static void wire_of(const fft_case *c, int32_t *axes, Tenferro__Fft *w) {
    tenferro__fft__init(w);
    for (int i = 0; i < c->n_axes; i++) axes[i] = c->axes[i];
    w->n_axes = (size_t)c->n_axes;
    w->axes = axes;
    w->kind = (Tenferro__FftKind)c->kind;
    w->inverse = c->inverse;
    w->norm = (Tenferro__FftNorm)c->norm;
    w->last_length = c->last_length;
}

/* Requires a Submit's reply to fail at operation 0 with `want`, nothing accepted. */
static void expect_refused(Tenferro__Frame *r, tf_status want, const char *needle, const char *what) {
    ck_assert_msg(r->body_case == TENFERRO__FRAME__BODY_RESULT, "%s: no Result", what);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, want, needle, why, sizeof why) == 0, "%s: %s", what, why);
    ck_assert_msg(r->result->has_failed_index && r->result->failed_index == 0 &&
                      r->result->ops_accepted == 0,
                  "%s: the failure names no index 0", what);
    tf__frame_free(r);
}

/* The connection still answers: a StatusRequest gets a StatusReply. */
static void expect_usable(int fd) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    Tenferro__Frame *r = raw_call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_STATUS_REPLY);
    tf__frame_free(r);
}

/* The bystander's check: its tensor is unchanged and its own FFT is still right. */
static void bystander_check(tf_client *by, tf_tensor t, const double *data, int64_t n) {
    void *back = NULL;
    size_t bytes = 0;
    CK_STATUS(by, tf_download(by, t, &back, &bytes), TF_OK);
    ck_assert_msg(bytes == sizeof(double) * 2 * (size_t)n && memcmp(back, data, bytes) == 0,
                  "the bystander's tensor changed");
    free(back);
    one_fft o = {.x = t};
    CK_STATUS(by, tf_with_session(by, fft2_fn, &o), TF_OK);
    CK_STATUS(by, tf_download(by, o.y, &back, &bytes), TF_OK);
    const shape s = {2, {3, 4}};
    lcplx *lx = malloc(sizeof(lcplx) * (size_t)n), *want = malloc(sizeof(lcplx) * (size_t)n),
          *got = malloc(sizeof(lcplx) * (size_t)n);
    to_long(TF_C128, data, n, lx);
    to_long(TF_C128, back, n, got);
    const fft_case fc = {TF__FFT_C2C, 0, TF_FFT_NORM_BACKWARD, 0, {0}, 0};
    shape os;
    reference(&fc, &s, lx, &os, want);
    ck_assert_msg(normwise_error(got, want, n) <= th_tolerance(TF_C128), "the bystander's FFT is wrong");
    free(lx);
    free(want);
    free(got);
    free(back);
    CK_STATUS(by, tf_tensor_free(by, o.y), TF_OK);
}

START_TEST(test_bad_input) {
    start();
    /* A bystander: another client with data of its own. */
    tf_client *by = th_connect(&D);
    const int64_t bdims[2] = {3, 4};
    double bdata[24];
    th_fill_random(TF_C128, 12, bdata);
    tf_tensor bt;
    CK_STATUS(by, tf_upload(by, TF_C128, 2, bdims, bdata, &bt), TF_OK);

    /* At the call: complex [4, 6], real [4, 6], and a rank-0 complex tensor. */
    const int64_t dims[2] = {4, 6};
    double z[48], r[24], one[2] = {0.5, -0.25};
    th_fill_random(TF_C128, 24, z);
    th_fill_random(TF_F64, 24, r);
    bad_run run = {0};
    CK_STATUS(C, tf_upload(C, TF_C128, 2, dims, z, &run.z), TF_OK);
    CK_STATUS(C, tf_upload(C, TF_F64, 2, dims, r, &run.r), TF_OK);
    CK_STATUS(C, tf_upload(C, TF_C128, 0, NULL, one, &run.scalar), TF_OK);
    uint64_t rejected = th_counter(&D, "ops_rejected");
    for (int i = 0; i < N_BAD; i++) {
        run.b = &bad_calls[i];
        tf_status st = tf_with_session(C, bad_fn, &run);
        ck_assert_msg(st == bad_calls[i].want && run.got == bad_calls[i].want,
                      "%s: at the call %s, expected %s: %s", bad_calls[i].what,
                      tf_status_name(run.got), tf_status_name(bad_calls[i].want),
                      tf_client_last_error(C));
        const char *msg = tf_client_last_error(C);
        ck_assert_msg(strlen(msg) >= 10, "%s: no readable message", bad_calls[i].what);
        if (bad_calls[i].needle)
            ck_assert_msg(strstr(msg, bad_calls[i].needle), "%s: \"%s\" does not mention \"%s\"",
                          bad_calls[i].what, msg, bad_calls[i].needle);
    }
    /* Refused at the call: nothing reached the daemon. */
    ck_assert_uint_eq(th_counter(&D, "ops_rejected"), rejected);
    bystander_check(by, bt, bdata, 12);

    /* Raw: the same descriptors sent straight to the daemon, plus what the API cannot send. */
    int fd = th_raw_connect(&D);
    ck_assert_int_ge(fd, 0);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert_msg(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY, "handshake failed");
    tf__frame_free(hello);
    raw_create(fd, 1, TF_C128, 2, dims, z);
    raw_create(fd, 2, TF_F64, 2, dims, r);
    raw_create(fd, 3, TF_C128, 0, NULL, one);
    int32_t axes[TF_MAX_RANK + 2];
    Tenferro__Fft w;
    for (int i = 0; i < N_BAD; i++) {
        const bad_call *b = &bad_calls[i];
        fft_case c = b->c;
        if (c.n_axes == 0 && !b->on_scalar) {
            /* "all axes" is the client's default; on the wire it is the list itself */
            c.n_axes = 2;
            c.axes[0] = 0;
            c.axes[1] = 1;
        }
        wire_of(&c, axes, &w);
        const uint64_t in = b->on_scalar ? 3 : b->on_real ? 2 : 1;
        /* Negative axes are the client library's convenience: the daemon refuses them (TF_ERR_AXIS). */
        int negative = 0;
        for (int k = 0; k < c.n_axes; k++) negative |= c.axes[k] < 0;
        expect_refused(raw_fft(fd, in, 50 + (uint64_t)i, &w), negative ? TF_ERR_AXIS : b->want,
                       negative ? NULL : b->needle, b->what);
    }
    const fft_case ok = {TF__FFT_C2C, 0, TF_FFT_NORM_BACKWARD, 1, {1}, 0};
    wire_of(&ok, axes, &w);
    w.kind = (Tenferro__FftKind)7;
    expect_refused(raw_fft(fd, 1, 80, &w), TF_ERR_INVALID_ARGUMENT, "kind", "unknown kind");
    wire_of(&ok, axes, &w);
    w.norm = (Tenferro__FftNorm)9;
    expect_refused(raw_fft(fd, 1, 81, &w), TF_ERR_INVALID_ARGUMENT, "norm", "unknown norm (raw)");
    wire_of(&ok, axes, &w);
    axes[0] = -1;
    expect_refused(raw_fft(fd, 1, 82, &w), TF_ERR_AXIS, "-1", "negative axis on the wire");
    wire_of(&ok, axes, &w);
    w.n_axes = 0;
    expect_refused(raw_fft(fd, 1, 83, &w), TF_ERR_AXIS, NULL, "no axes on the wire");
    wire_of(&ok, axes, &w);
    for (int k = 0; k < TF_MAX_RANK + 1; k++) axes[k] = 0;
    w.n_axes = TF_MAX_RANK + 1;
    expect_refused(raw_fft(fd, 1, 84, &w), TF_ERR_AXIS, NULL, "more axes than any rank");
    wire_of(&ok, axes, &w);
    w.kind = (Tenferro__FftKind)TF__FFT_C2R;
    w.last_length = -2;
    expect_refused(raw_fft(fd, 1, 85, &w), TF_ERR_SHAPE, NULL, "negative irfft length");
    expect_refused(raw_fft(fd, 1, 86, NULL), TF_ERR_INVALID_ARGUMENT, "descriptor", "no descriptor");
    /* The connection is kept, and a good FFT on it still runs. */
    expect_usable(fd);
    wire_of(&ok, axes, &w);
    Tenferro__Frame *good = raw_fft(fd, 1, 90, &w);
    CK_EXPECT_RESULT(good, TF_OK, NULL);
    close(fd);

    /* Nothing of the refused operations exists, and the bystander is untouched. */
    bystander_check(by, bt, bdata, 12);
    tf_disconnect(by);
    stop();
}
END_TEST

static Suite *fft_suite(void) {
    Suite *s = suite_create("fft");
    TCase *tc = tcase_create("fft");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_c2c_small);
    tcase_add_test(tc, test_r2c_small);
    tcase_add_test(tc, test_c2r_small);
    tcase_add_test(tc, test_large_round_trip);
    tcase_add_test(tc, test_zeros_input);
    tcase_add_test(tc, test_cache_counters);
    tcase_add_test(tc, test_cache_lru_bound);
    tcase_add_test(tc, test_cache_trim);
    tcase_add_test(tc, test_cache_two_processes);
    tcase_add_test(tc, test_wisdom_file);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    th_seed();
    SRunner *sr = srunner_create(fft_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
