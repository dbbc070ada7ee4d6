/*
 * Unit tests of the FFT geometry (daemon/backend/fft-layout.c): numpy's
 * normalization factors, and the split of a transform into the steps that
 * cuFFT's advanced layout expresses, checked without a GPU.
 *
 * The split is checked by running it: an emulator here executes each step
 * exactly as cuFFT defines its advanced layout (element x of batch b at
 * b * dist + ((x0 * embed[1] + x1) * embed[2] + x2) * stride, once per loop
 * index at the loop's offsets) with a naive DFT, on the same arrays the CUDA
 * backend uses (input, output, C2R's scratch), and the result must equal a
 * direct multi-dimensional DFT of the whole tensor over the transformed axes.
 * Every non-empty axis set of tensors of rank 1 to 4 (with lengths 1, odd and
 * even among them) is run for C2C forward and inverse, and for R2C and C2R
 * with every one of its axes as the halved one. Besides: plans never exceed
 * three dims, leading, trailing and all-axes transforms are one execution,
 * and a middle axis loops over the shorter side.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/fft-layout.h"

typedef double complex cplx;

/* Index of a multi-index in a row-major shape. */
static int64_t flat(const tf__meta *m, const int64_t *idx) {
    int64_t f = 0;
    for (int a = 0; a < m->rank; a++) f = f * m->shape[a] + idx[a];
    return f;
}

/* Advances a multi-index over `shape` (rank r); returns 0 after the last. */
static int next_index(int64_t *idx, const int64_t *shape, int r) {
    for (int a = r - 1; a >= 0; a--) {
        if (++idx[a] < shape[a]) return 1;
        idx[a] = 0;
    }
    return 0;
}

/* The direct DFT of x (shape m) over the axes in `set`, with the given sign, unnormalized. */
static void direct_dft(const tf__meta *m, const cplx *x, unsigned set, int sign, cplx *y) {
    int64_t k[TF_MAX_RANK] = {0};
    do {
        cplx acc = 0;
        int64_t j[TF_MAX_RANK] = {0};
        do {
            int ok = 1;
            double phase = 0;
            for (int a = 0; a < m->rank; a++) {
                if (set & (1u << a))
                    phase += (double)(j[a] * k[a] % m->shape[a]) / (double)m->shape[a];
                else if (j[a] != k[a])
                    ok = 0;
            }
            if (ok) acc += x[flat(m, j)] * cexp(sign * 2.0 * M_PI * I * phase);
        } while (next_index(j, m->shape, m->rank));
        y[flat(m, k)] = acc;
    } while (next_index(k, m->shape, m->rank));
}

/* Offset of transform element x[0..rank) in an embedding with its innermost stride. */
static int64_t embed_offset(const int64_t *embed, int64_t stride, const int64_t *x, int rank) {
    int64_t off = 0;
    for (int j = 0; j < rank; j++) off = (j == 0 ? x[0] : off * embed[j] + x[j]);
    return off * stride;
}

/* Runs one plan execution of step s at base offsets, as cuFFT defines it. */
static void run_plan(const tfd_fft_step *s, const cplx *src, cplx *dst, int64_t ibase,
                     int64_t obase) {
    const int r = s->rank;
    const int64_t nl = s->n[r - 1];
    int64_t in_n[TFD_FFT_PLAN_RANK], out_n[TFD_FFT_PLAN_RANK], full[TFD_FFT_PLAN_RANK];
    for (int j = 0; j < r; j++) in_n[j] = out_n[j] = full[j] = s->n[j];
    if (s->kind == TF__FFT_R2C) out_n[r - 1] = nl / 2 + 1;
    if (s->kind == TF__FFT_C2R) in_n[r - 1] = nl / 2 + 1;
    const int sign = s->inverse ? 1 : -1;
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t ib = ibase + b * s->idist, ob = obase + b * s->odist;
        /* Gather the full logical signal (C2R: the Hermitian extension of the half spectrum). */
        int64_t total = 1;
        for (int j = 0; j < r; j++) total *= full[j];
        cplx *sig = calloc((size_t)total, sizeof *sig), *res = calloc((size_t)total, sizeof *res);
        int64_t x[TFD_FFT_PLAN_RANK] = {0};
        int64_t pos = 0;
        do {
            if (s->kind == TF__FFT_C2R && x[r - 1] >= in_n[r - 1]) {
                int64_t mirror[TFD_FFT_PLAN_RANK];
                for (int j = 0; j < r; j++) mirror[j] = (full[j] - x[j]) % full[j];
                sig[pos] = conj(src[ib + embed_offset(s->inembed, s->istride, mirror, r)]);
            } else {
                sig[pos] = src[ib + embed_offset(s->inembed, s->istride, x, r)];
            }
            pos++;
        } while (next_index(x, full, r));
        tf__meta fm = {TF_C128, r, {0}};
        for (int j = 0; j < r; j++) fm.shape[j] = full[j];
        direct_dft(&fm, sig, (1u << r) - 1, sign, res);
        memset(x, 0, sizeof x);
        do {
            cplx v = res[flat(&fm, x)];
            if (s->kind == TF__FFT_C2R) v = creal(v);
            dst[ob + embed_offset(s->onembed, s->ostride, x, r)] = v;
        } while (next_index(x, out_n, r));
        free(sig);
        free(res);
    }
}

/* Runs a step over its loops. */
static void run_step(const tfd_fft_step *s, cplx *const arrays[3]) {
    int64_t idx[TF_MAX_RANK] = {0};
    do {
        int64_t ib = 0, ob = 0;
        for (int l = 0; l < s->n_loops; l++) {
            ib += idx[l] * s->loop_in[l];
            ob += idx[l] * s->loop_out[l];
        }
        run_plan(s, arrays[s->src], arrays[s->dst], ib, ob);
    } while (s->n_loops > 0 && next_index(idx, s->loop_n, s->n_loops));
}

/* Runs a whole layout on input x into y (and a scratch when C2R needs one). */
static void run_layout(const tfd_fft_layout *L, const tf__meta *in, const cplx *x, cplx *y,
                       int64_t out_numel) {
    const int64_t n_in = tf__meta_numel(in);
    cplx *input = malloc(sizeof(cplx) * (size_t)n_in);
    memcpy(input, x, sizeof(cplx) * (size_t)n_in);
    cplx *scratch = calloc((size_t)n_in, sizeof(cplx));
    if (L->n_steps == 0) memcpy(y, x, sizeof(cplx) * (size_t)out_numel);
    if (L->copy_input) memcpy(scratch, input, sizeof(cplx) * (size_t)n_in);
    cplx *const arrays[3] = {input, y, scratch};
    for (int i = 0; i < L->n_steps; i++) run_step(&L->steps[i], arrays);
    /* The input must come out unchanged (the C2R step reads only the scratch). */
    ck_assert(memcmp(input, x, sizeof(cplx) * (size_t)n_in) == 0);
    free(input);
    free(scratch);
}

static double max_diff(const cplx *a, const cplx *b, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = fmax(worst, cabs(a[i] - b[i]));
    return worst;
}

/* Fills n values, deterministic in the seed. */
static void fill(cplx *x, int64_t n, unsigned seed, int real) {
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        double re = (double)(seed >> 8 & 0xffff) / 65536.0 - 0.5;
        seed = seed * 1103515245u + 12345u;
        double im = (double)(seed >> 8 & 0xffff) / 65536.0 - 0.5;
        x[i] = real ? re : re + I * im;
    }
}

/* Shapes the split is run on: lengths 1, 2, odd and even, leading and trailing. */
static const tf__meta shapes[] = {
    {TF_C128, 1, {6}},          {TF_C128, 1, {5}},           {TF_C128, 2, {3, 4}},
    {TF_C128, 2, {1, 5}},       {TF_C128, 3, {2, 3, 4}},     {TF_C128, 3, {3, 1, 4}},
    {TF_C128, 4, {2, 3, 2, 3}}, {TF_C128, 4, {3, 2, 1, 2}},
};

/* Builds an fft of `kind` over the axes of `set`, with axis `last` listed last. */
static tf__fft fft_over(int kind, int inverse, unsigned set, int rank, int last) {
    tf__fft f;
    memset(&f, 0, sizeof f);
    f.kind = (tf__fft_kind)kind;
    f.inverse = inverse;
    for (int a = rank - 1; a >= 0; a--) /* descending, so the order is not the sorted one */
        if ((set & (1u << a)) && a != last) f.axes[f.n_axes++] = a;
    f.axes[f.n_axes++] = last;
    return f;
}

/* Checks the invariants every layout keeps. */
static void check_steps(const tfd_fft_layout *L, const char *what) {
    int64_t launches = 0;
    for (int i = 0; i < L->n_steps; i++) {
        const tfd_fft_step *s = &L->steps[i];
        ck_assert_msg(s->rank >= 1 && s->rank <= TFD_FFT_PLAN_RANK, "%s: step %d of rank %d", what,
                      i, s->rank);
        ck_assert_msg(s->batch >= 1, "%s: step %d batch %lld", what, i, (long long)s->batch);
        int64_t l = 1;
        for (int j = 0; j < s->n_loops; j++) l *= s->loop_n[j];
        launches += l;
    }
    ck_assert_int_eq(launches, L->launches);
}

/* C2C forward and inverse over every axis set equals the direct DFT. */
START_TEST(test_c2c_every_axis_set) {
    const tf__meta *m = &shapes[_i];
    const int64_t n = tf__meta_numel(m);
    cplx *x = malloc(sizeof(cplx) * (size_t)n), *y = malloc(sizeof(cplx) * (size_t)n),
         *want = malloc(sizeof(cplx) * (size_t)n);
    for (unsigned set = 1; set < (1u << m->rank); set++) {
        for (int inverse = 0; inverse < 2; inverse++) {
            int last = 31 - __builtin_clz(set);
            tf__fft f = fft_over(TF__FFT_C2C, inverse, set, m->rank, last);
            tfd_fft_layout L;
            tfd_fft_layout_of(&f, m, &L);
            char what[64];
            snprintf(what, sizeof what, "c2c shape %d set %#x inverse %d", _i, set, inverse);
            check_steps(&L, what);
            fill(x, n, set * 7 + (unsigned)inverse, 0);
            run_layout(&L, m, x, y, n);
            direct_dft(m, x, set, inverse ? 1 : -1, want);
            ck_assert_msg(max_diff(y, want, n) < 1e-9, "%s: differs by %g", what, max_diff(y, want, n));
        }
    }
    free(x);
    free(y);
    free(want);
}
END_TEST

/* R2C over every axis set and halved axis equals the direct DFT's half; C2R brings it back times n. */
START_TEST(test_real_every_axis_set) {
    tf__meta m = shapes[_i];
    m.dtype = TF_F64;
    const int64_t n = tf__meta_numel(&m);
    cplx *x = malloc(sizeof(cplx) * (size_t)n), *full = malloc(sizeof(cplx) * (size_t)n);
    for (unsigned set = 1; set < (1u << m.rank); set++) {
        for (int last = 0; last < m.rank; last++) {
            if (!(set & (1u << last))) continue;
            tf__fft f = fft_over(TF__FFT_R2C, 0, set, m.rank, last);
            tf__meta half;
            char msg[128];
            ck_assert_int_eq(tf__infer_fft(&f, &m, &half, msg, sizeof msg), TF_OK);
            const int64_t nh = tf__meta_numel(&half);
            cplx *y = calloc((size_t)nh, sizeof(cplx)), *want = malloc(sizeof(cplx) * (size_t)nh);
            tfd_fft_layout L;
            tfd_fft_layout_of(&f, &m, &L);
            char what[64];
            snprintf(what, sizeof what, "r2c shape %d set %#x last %d", _i, set, last);
            check_steps(&L, what);
            ck_assert_msg(L.n_steps >= 1 && L.steps[0].kind == TF__FFT_R2C, "%s: R2C not first", what);
            fill(x, n, set * 13 + (unsigned)last, 1);
            run_layout(&L, &m, x, y, nh);
            direct_dft(&m, x, set, -1, full);
            int64_t idx[TF_MAX_RANK] = {0};
            do {
                int64_t src[TF_MAX_RANK];
                memcpy(src, idx, sizeof src);
                want[flat(&half, idx)] = full[flat(&m, src)];
            } while (next_index(idx, half.shape, half.rank));
            ck_assert_msg(max_diff(y, want, nh) < 1e-9, "%s: differs by %g", what, max_diff(y, want, nh));

            /* C2R of that half spectrum, to the original length, is the input times n. */
            tf__fft g = f;
            g.kind = TF__FFT_C2R;
            g.inverse = 1;
            g.last_length = m.shape[last];
            tfd_fft_layout B;
            tfd_fft_layout_of(&g, &half, &B);
            snprintf(what, sizeof what, "c2r shape %d set %#x last %d", _i, set, last);
            check_steps(&B, what);
            ck_assert_msg(B.scratch && B.n_steps >= 1 && B.steps[B.n_steps - 1].kind == TF__FFT_C2R,
                          "%s: C2R not last or no scratch", what);
            cplx *back = calloc((size_t)n, sizeof(cplx));
            run_layout(&B, &half, want, back, n);
            double total = 1;
            for (int a = 0; a < m.rank; a++)
                if (set & (1u << a)) total *= (double)m.shape[a];
            for (int64_t i = 0; i < n; i++) back[i] /= total;
            ck_assert_msg(max_diff(back, x, n) < 1e-9, "%s: differs by %g", what, max_diff(back, x, n));
            free(back);
            free(y);
            free(want);
        }
    }
    free(x);
    free(full);
}
END_TEST

/* Leading, trailing and all-axes transforms are one execution; a middle axis loops over the shorter side. */
START_TEST(test_executions) {
    const tf__meta m = {TF_C64, 3, {4, 5, 6}};
    static const struct {
        unsigned set;
        int steps;
        int64_t launches;
    } cases[] = {
        {0x4, 1, 1}, /* trailing axis, batch before */
        {0x1, 1, 1}, /* leading axis, batch after (strided) */
        {0x6, 1, 1}, /* trailing 2-D */
        {0x3, 1, 1}, /* leading 2-D */
        {0x7, 1, 1}, /* every axis */
        {0x5, 1, 1}, /* outer axes, batch between */
        {0x2, 1, 4}, /* middle axis: batch 6 after it, loop over the 4 before */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tf__fft f = fft_over(TF__FFT_C2C, 0, cases[i].set, 3, 31 - __builtin_clz(cases[i].set));
        tfd_fft_layout L;
        tfd_fft_layout_of(&f, &m, &L);
        ck_assert_msg(L.n_steps == cases[i].steps && L.launches == cases[i].launches,
                      "set %#x: %d steps, %lld launches", cases[i].set, L.n_steps,
                      (long long)L.launches);
    }
    /* Five axes need two plans of at most three dims; their batches cover the rest at once. */
    const tf__meta five = {TF_C64, 5, {2, 3, 2, 3, 2}};
    tf__fft f = fft_over(TF__FFT_C2C, 0, 0x1f, 5, 4);
    tfd_fft_layout L;
    tfd_fft_layout_of(&f, &five, &L);
    ck_assert_int_eq(L.n_steps, 2);
    ck_assert_int_eq(L.launches, 2);
    /* Length-1 axes only: no plan, the output is a copy. */
    const tf__meta ones = {TF_C64, 2, {1, 1}};
    f = fft_over(TF__FFT_C2C, 0, 0x3, 2, 1);
    tfd_fft_layout_of(&f, &ones, &L);
    ck_assert_int_eq(L.n_steps, 0);
}
END_TEST

/* The caches' axis order: sorted, R2C/C2R's halved axis last; the same set in any order keys alike. */
START_TEST(test_canonical_axes) {
    int32_t axes[TF_MAX_RANK];
    tf__fft f = fft_over(TF__FFT_C2C, 0, 0xd, 4, 2); /* listed 3, 0, 2 */
    ck_assert_int_eq(tfd_fft_canonical_axes(&f, 4, axes), 3);
    ck_assert(axes[0] == 0 && axes[1] == 2 && axes[2] == 3);
    tf__fft r = fft_over(TF__FFT_R2C, 0, 0xd, 4, 0); /* listed 3, 2, 0: 0 is halved */
    ck_assert_int_eq(tfd_fft_canonical_axes(&r, 4, axes), 3);
    ck_assert(axes[0] == 2 && axes[1] == 3 && axes[2] == 0);
    r.axes[0] = 2;
    r.axes[1] = 3; /* listed 2, 3, 0: the same key */
    int32_t again[TF_MAX_RANK];
    tfd_fft_canonical_axes(&r, 4, again);
    ck_assert(memcmp(axes, again, sizeof(int32_t) * 3) == 0);
}
END_TEST

/* numpy's norms: backward, ortho and forward, both directions, n from the real side. */
START_TEST(test_scale) {
    const tf__meta m = {TF_C128, 2, {4, 5}};
    tf__fft f = fft_over(TF__FFT_C2C, 0, 0x3, 2, 1);
    f.norm = TF__FFT_NORM_BACKWARD;
    ck_assert(tfd_fft_scale(&f, &m) == 1.0);
    f.inverse = 1;
    ck_assert(fabs(tfd_fft_scale(&f, &m) - 1.0 / 20) < 1e-15);
    f.norm = TF__FFT_NORM_ORTHO;
    ck_assert(fabs(tfd_fft_scale(&f, &m) - 1.0 / sqrt(20)) < 1e-15);
    f.norm = TF__FFT_NORM_FORWARD;
    ck_assert(tfd_fft_scale(&f, &m) == 1.0);
    f.inverse = 0;
    ck_assert(fabs(tfd_fft_scale(&f, &m) - 1.0 / 20) < 1e-15);
    /* C2R: n counts last_length, not the half spectrum's length. */
    const tf__meta half = {TF_C128, 1, {5}};
    tf__fft g = fft_over(TF__FFT_C2R, 1, 0x1, 1, 0);
    g.last_length = 9;
    ck_assert(fabs(tfd_fft_scale(&g, &half) - 1.0 / 9) < 1e-15);
    g.norm = TF__FFT_NORM_FORWARD;
    ck_assert(tfd_fft_scale(&g, &half) == 1.0);
    /* R2C is forward. */
    const tf__meta real = {TF_F64, 1, {8}};
    tf__fft r = fft_over(TF__FFT_R2C, 0, 0x1, 1, 0);
    r.norm = TF__FFT_NORM_FORWARD;
    ck_assert(tfd_fft_scale(&r, &real) == 1.0 / 8);
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *fft_layout_suite(void) {
    Suite *s = suite_create("fft-layout");
    TCase *tc = tcase_create("layout");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_c2c_every_axis_set, 0, N_OF(shapes));
    tcase_add_loop_test(tc, test_real_every_axis_set, 0, N_OF(shapes));
    tcase_add_test(tc, test_executions);
    tcase_add_test(tc, test_scale);
    tcase_add_test(tc, test_canonical_axes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(fft_layout_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
