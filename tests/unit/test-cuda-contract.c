/*
 * Parity of the CUDA backend's contractions with the CPU backend's, run on a
 * GPU machine (the style of test-cuda-backend.c).
 *
 * Both backends run the very same OP_CONTRACT descriptors on copies of the
 * same random inputs (magnitudes in [0.5, 2); the seed is printed and
 * TFCK_SEED=<n> replays it), driven through their vtables the way the
 * executor does (alloc, copy_to_device, tfd_backend_run_op, event_record and
 * event_wait, copy_to_host); GPU outputs are filled with NaN bytes first.
 * Every element of the GPU's result must be within a few units of the
 * dtype's precision per summed term of the CPU's, relative to the summed
 * magnitudes of the terms (tests/contract-cases.h computes them). Cases: the
 * named forms of test-cpu-contract.c (every layout the planner folds or
 * copies, diagonals, sums, conjugation, unary forms) for every dtype and
 * conjugation; 240 random binary and 100 random unary contractions (ranks
 * 0..6, sizes 1..7); contractions large enough for cuBLAS's own kernels
 * (the benchmark's shapes, scaled down); and a run of contractions whose
 * scratch blocks are reused back to back on one stream without a wait in
 * between, which must not disturb any result.
 *
 * When it runs: only when TENFERRO_TEST_DEVICE starts with "cuda" ("cuda:N"
 * picks the ordinal) and /dev/nvidiactl exists; otherwise it prints a skip
 * line and passes. Check forks one child per test and the parent never
 * touches CUDA, so every child opens both backends itself. Built without the
 * CUDA backend (CUDA=0) there is nothing to test.
 */
#include <stdio.h>

#ifdef TFD_HAVE_CUDA
#include <check.h>
#include <complex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "tests/contract-cases.h"

static const tf_dtype dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

static uint64_t g_seed, rng_state;

/* splitmix64. */
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_value(void) {
    double v = 0.5 + 1.5 * (double)(rng_next() >> 11) * 0x1.0p-53;
    return (rng_next() & 1) ? -v : v;
}

/* ---- the two backends, one stream each ---- */

enum { ON_CPU, ON_GPU };

typedef struct lane {
    tfd_backend be;
    void *stream;
} lane;

static int gpu_ordinal;
static lane lanes[2];
static char msg[512];

/* Device memory of the current case, released by release(). */
#define MAX_TRACKED 512
static struct {
    int side;
    void *ptr;
    size_t bytes;
} tracked[MAX_TRACKED];
static int n_tracked;

static void open_lane(int side, const tfd_backend_vtable *vt, int ordinal) {
    lane *l = &lanes[side];
    memset(&l->be, 0, sizeof l->be);
    l->be.vt = vt;
    tf_status st = vt->open(&l->be, ordinal, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s open: %s: %s", vt->name, tf_status_name(st), msg);
    st = vt->stream_create(&l->be, 0, &l->stream);
    ck_assert_msg(st == TF_OK, "%s stream_create: %s", vt->name, tf_status_name(st));
}

static void release(void) {
    while (n_tracked > 0) {
        n_tracked--;
        lane *l = &lanes[tracked[n_tracked].side];
        l->be.vt->free(&l->be, l->stream, tracked[n_tracked].ptr, tracked[n_tracked].bytes);
    }
}

static void setup(void) {
    rng_state = g_seed;
    n_tracked = 0;
    open_lane(ON_CPU, &tfd_cpu_backend, 0);
    open_lane(ON_GPU, &tfd_cuda_backend, gpu_ordinal);
}

static void teardown(void) {
    release();
    for (int side = 1; side >= 0; side--) {
        lane *l = &lanes[side];
        l->be.vt->stream_destroy(&l->be, l->stream);
        l->be.vt->close(&l->be);
    }
}

/* Waits for everything enqueued on the lane so far. */
static void lane_sync(lane *l) {
    void *ev = NULL;
    tf_status st = l->be.vt->event_record(&l->be, l->stream, &ev, msg, sizeof msg);
    if (st == TF_OK) st = l->be.vt->event_wait(&l->be, ev, msg, sizeof msg);
    l->be.vt->event_destroy(&l->be, ev);
    ck_assert_msg(st == TF_OK, "%s sync: %s: %s", l->be.vt->name, tf_status_name(st), msg);
}

/* A tensor on a lane holding host's bytes (NULL: NaN bytes). */
static tfd_tensor_view lane_tensor(int side, const tf__meta *m, const void *host) {
    lane *l = &lanes[side];
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = m->dtype;
    v.rank = m->rank;
    memcpy(v.shape, m->shape, sizeof v.shape);
    v.numel = tf__meta_numel(m);
    const size_t bytes = tf__meta_bytes(m);
    ck_assert_int_lt(n_tracked, MAX_TRACKED);
    tf_status st = l->be.vt->alloc(&l->be, l->stream, bytes, &v.data);
    ck_assert_msg(st == TF_OK, "%s alloc %zu: %s", l->be.vt->name, bytes, tf_status_name(st));
    tracked[n_tracked].side = side;
    tracked[n_tracked].ptr = v.data;
    tracked[n_tracked++].bytes = bytes;
    void *poison = NULL;
    if (!host) {
        poison = malloc(bytes);
        ck_assert_ptr_nonnull(poison);
        memset(poison, 0xff, bytes);
    }
    st = l->be.vt->copy_to_device(&l->be, l->stream, v.data, host ? host : poison, bytes);
    ck_assert_int_eq(st, TF_OK);
    lane_sync(l); /* the host buffer may go once the copy is done */
    free(poison);
    return v;
}

static void *random_host(const tf__meta *m) {
    const int64_t n = tf__meta_numel(m);
    void *h = malloc(tf__meta_bytes(m));
    ck_assert_ptr_nonnull(h);
    const int cx = m->dtype == TF_C64 || m->dtype == TF_C128;
    for (int64_t i = 0; i < n; i++)
        cc_set(h, m->dtype, i, cx ? CMPLXL(rng_value(), rng_value()) : rng_value());
    return h;
}

/* One case prepared on both lanes on the same inputs, not yet run. */
typedef struct twin {
    cc_case k;
    void *host[2];
    tfd_op op[2];
} twin;

static void twin_build(twin *t, const cc_case *k) {
    t->k = *k;
    t->host[0] = t->host[1] = NULL;
    for (int i = 0; i < k->c.n_inputs; i++) t->host[i] = random_host(&k->in[i]);
    for (int side = 0; side < 2; side++) {
        tfd_op *op = &t->op[side];
        memset(op, 0, sizeof *op);
        op->kind = TF__OP_CONTRACT;
        op->n_inputs = k->c.n_inputs;
        op->contract = k->c;
        for (int i = 0; i < k->c.n_inputs; i++) op->in[i] = lane_tensor(side, &k->in[i], t->host[i]);
        op->out = lane_tensor(side, &k->out, NULL);
    }
}

static void twin_run(twin *t, int side) {
    msg[0] = '\0';
    tf_status st = tfd_backend_run_op(&lanes[side].be, lanes[side].stream, &t->op[side], msg,
                                      sizeof msg);
    ck_assert_msg(st == TF_OK, "%s on %s: %s: %s (seed %llu)", t->k.text,
                  lanes[side].be.vt->name, tf_status_name(st), msg, (unsigned long long)g_seed);
}

/* Reads both results back and compares them element by element. */
static void twin_check(twin *t) {
    const size_t bytes = tf__meta_bytes(&t->k.out);
    void *got[2];
    for (int side = 0; side < 2; side++) {
        lane *l = &lanes[side];
        got[side] = malloc(bytes);
        ck_assert_ptr_nonnull(got[side]);
        tf_status st = l->be.vt->copy_to_host(&l->be, l->stream, got[side], t->op[side].out.data,
                                              bytes);
        ck_assert_int_eq(st, TF_OK);
        lane_sync(l);
    }
    const int64_t n = tf__meta_numel(&t->k.out);
    cc_lcx *ref = malloc(sizeof *ref * (size_t)n);
    long double *scale = malloc(sizeof *scale * (size_t)n);
    ck_assert(ref && scale);
    cc_reference(&t->k, t->host[0], t->host[1], ref, scale);
    const long double tol = 2 * cc_tolerance(&t->k);
    for (int64_t e = 0; e < n; e++) {
        const cc_lcx cpu = cc_get(got[ON_CPU], t->k.out.dtype, e);
        const cc_lcx gpu = cc_get(got[ON_GPU], t->k.out.dtype, e);
        const long double err = cabsl(gpu - cpu);
        ck_assert_msg(err <= tol * scale[e],
                      "%s element %lld: gpu %.10Lg%+.10Lgi, cpu %.10Lg%+.10Lgi, |diff| %.3Lg > "
                      "%.3Lg (seed %llu)",
                      t->k.text, (long long)e, creall(gpu), cimagl(gpu), creall(cpu), cimagl(cpu),
                      err, tol * scale[e], (unsigned long long)g_seed);
    }
    free(ref);
    free(scale);
    free(got[0]);
    free(got[1]);
    free(t->host[0]);
    free(t->host[1]);
}

/* One case on both backends, compared. */
static void parity(const cc_case *k) {
    twin t;
    twin_build(&t, k);
    twin_run(&t, ON_CPU);
    twin_run(&t, ON_GPU);
    twin_check(&t);
    release();
}

/* ---- cases ---- */

typedef struct named_form {
    const char *spec;
    const char *sizes; /* "a3b5...": every other letter is 1 */
} named_form;

static const named_form forms[] = {
    {"ij,jk->ik", "i37j29k41"},   {"ij,kj->ik", "i37j29k41"},    {"ji,jk->ik", "i37j29k41"},
    {"ji,kj->ki", "i37j29k41"},   {"bij,bjk->bik", "b3i17j13k11"}, {"ibj,jbk->bki", "b3i17j13k11"},
    {"abcd,cdef->abef", "a5b5c5d5e5f5"}, {"acbd,dcef->abef", "a5b5c5d5e5f5"},
    {"abcd,cdef->aebf", "a5b5c5d5e5f5"}, {"iij,jk->ik", "i6j5k7"}, {"ijk,jil->lk", "i4j5k6l3"},
    {"ij,jk->", "i5j6k7"},        {"i,j->ji", "i9j7"},           {"ij,ij->ij", "i6j7"},
    {"i,i->", "i300"},            {",->", ""},                   {"aab,bcc->ac", "a4b3c5"},
    {"ii->i", "i7"},              {"ii->", "i7"},                {"ij->ji", "i6j9"},
    {"ij->", "i6j9"},             {"iji->j", "i4j5"},            {"ij->ij", "i6j9"},
};

static void sizes_of(const char *spec, int64_t size[26]) {
    for (int l = 0; l < 26; l++) size[l] = 1;
    for (const char *p = spec; *p;) {
        const int l = *p++ - 'a';
        size[l] = strtoll(p, (char **)&p, 10);
    }
}

START_TEST(test_named_forms) {
    const tf_dtype dt = dtypes[_i];
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        int64_t size[26];
        sizes_of(forms[f].sizes, size);
        for (int conj = 0; conj < 4; conj++) {
            cc_case k;
            ck_assert_int_eq(cc_from_spec(forms[f].spec, size, dt, conj & 1, conj >> 1, &k), TF_OK);
            parity(&k);
        }
    }
}
END_TEST

/* 20 random binary contractions per iteration, 12 iterations: 240. */
START_TEST(test_random_binary) {
    rng_state = g_seed + 0x51ED27u * (uint64_t)(_i + 1);
    for (int j = 0; j < 20; j++) {
        cc_case k;
        cc_random(rng_next, 1, dtypes[(j + _i) % 4], 200000, &k);
        parity(&k);
    }
}
END_TEST

/* 20 random unary contractions per iteration, 5 iterations: 100. */
START_TEST(test_random_unary) {
    rng_state = g_seed + 0xC0FFEEu * (uint64_t)(_i + 1);
    for (int j = 0; j < 20; j++) {
        cc_case k;
        cc_random(rng_next, 0, dtypes[(j + _i) % 4], 200000, &k);
        parity(&k);
    }
}
END_TEST

/* The benchmark's forms at a size cuBLAS runs its own large kernels on. */
START_TEST(test_large_forms) {
    static const struct {
        const char *spec, *sizes;
        tf_dtype dt;
        int conj_a, conj_b;
    } big[] = {
        {"abcd,cdef->aebf", "a16b16c16d16e16f16", TF_F64, 0, 0},
        {"acbd,dcef->abef", "a12b12c12d12e12f12", TF_C128, 1, 0},
        {"bij,bjk->bik", "b16i96j96k96", TF_F64, 0, 0},
        {"ij,kj->ik", "i300j200k250", TF_C64, 0, 1},
    };
    for (size_t i = 0; i < sizeof big / sizeof *big; i++) {
        int64_t size[26];
        sizes_of(big[i].sizes, size);
        cc_case k;
        ck_assert_int_eq(cc_from_spec(big[i].spec, size, big[i].dt, big[i].conj_a, big[i].conj_b, &k),
                         TF_OK);
        twin t;
        twin_build(&t, &k);
        twin_run(&t, ON_CPU);
        twin_run(&t, ON_GPU);
        /* The reference walks every label: compare with the CPU within its own bound instead. */
        const size_t bytes = tf__meta_bytes(&k.out);
        void *got[2];
        for (int side = 0; side < 2; side++) {
            got[side] = malloc(bytes);
            ck_assert_ptr_nonnull(got[side]);
            lane *l = &lanes[side];
            ck_assert_int_eq(l->be.vt->copy_to_host(&l->be, l->stream, got[side],
                                                    t.op[side].out.data, bytes),
                             TF_OK);
            lane_sync(l);
        }
        /* |a b| <= 4 (complex: 8) per term: the summed magnitudes are at most that times the terms. */
        const long double bound = 2 * cc_tolerance(&k) * 8.0L * (long double)cc_terms(&k);
        for (int64_t e = 0; e < tf__meta_numel(&k.out); e++) {
            const long double err = cabsl(cc_get(got[ON_GPU], k.out.dtype, e) -
                                          cc_get(got[ON_CPU], k.out.dtype, e));
            ck_assert_msg(err <= bound, "%s element %lld: |gpu - cpu| %.3Lg > %.3Lg", k.text,
                          (long long)e, err, bound);
        }
        free(got[0]);
        free(got[1]);
        free(t.host[0]);
        free(t.host[1]);
        release();
    }
}
END_TEST

/* Contractions with scratch, back to back on one stream with no wait: all results intact. */
START_TEST(test_scratch_reuse_in_order) {
    enum { RUNS = 24 };
    static twin t[RUNS];
    int64_t size[26];
    sizes_of("a6b7c5d4e6f3", size);
    static const char *const specs[3] = {"abcd,cdef->aebf", "acbd,dcef->abef", "abcd,dcfe->fb"};
    for (int r = 0; r < RUNS; r++) {
        cc_case k;
        ck_assert_int_eq(cc_from_spec(specs[r % 3], size, dtypes[r % 4], r & 1, 0, &k), TF_OK);
        twin_build(&t[r], &k);
    }
    for (int r = 0; r < RUNS; r++) twin_run(&t[r], ON_GPU); /* no sync in between */
    for (int r = 0; r < RUNS; r++) twin_run(&t[r], ON_CPU);
    for (int r = 0; r < RUNS; r++) twin_check(&t[r]);
    release();
}
END_TEST

static Suite *cuda_contract_suite(void) {
    Suite *s = suite_create("cuda-contract");
    TCase *tc = tcase_create("parity");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_named_forms, 0, 4);
    tcase_add_loop_test(tc, test_random_binary, 0, 12);
    tcase_add_loop_test(tc, test_random_unary, 0, 5);
    tcase_add_test(tc, test_large_forms);
    tcase_add_test(tc, test_scratch_reuse_in_order);
    suite_add_tcase(s, tc);
    return s;
}

/* The ordinal of "cuda" (0) or "cuda:N", or -1 when the name is neither. */
static int parse_ordinal(const char *device) {
    if (device[4] == '\0') return 0;
    if (device[4] != ':') return -1;
    char *end = NULL;
    const long n = strtol(device + 5, &end, 10);
    return end == device + 5 || *end != '\0' || n < 0 || n > 4095 ? -1 : (int)n;
}
#endif /* TFD_HAVE_CUDA */

int main(void) {
#ifndef TFD_HAVE_CUDA
    printf("test-cuda-contract: built without the CUDA backend, nothing to test\n");
    return 0;
#else
    const char *device = getenv("TENFERRO_TEST_DEVICE");
    if (device == NULL || strncmp(device, "cuda", 4) != 0 || access("/dev/nvidiactl", F_OK) != 0) {
        printf("test-cuda-contract: skipped: no CUDA device "
               "(set TENFERRO_TEST_DEVICE=cuda:0 on a GPU machine)\n");
        return 0;
    }
    gpu_ordinal = parse_ordinal(device);
    if (gpu_ordinal < 0) {
        fprintf(stderr, "test-cuda-contract: TENFERRO_TEST_DEVICE=%s is neither cuda nor cuda:N\n",
                device);
        return EXIT_FAILURE;
    }
    const char *seed = getenv("TFCK_SEED");
    g_seed = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test-cuda-contract: cuda:%d, seed %llu (replay with TFCK_SEED=%llu)\n", gpu_ordinal,
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(cuda_contract_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
#endif
}
