/*
 * Unit tests of the CPU backend's contractions (cpu/contract.c over the
 * plans of contract-plan.c).
 *
 * Each case runs the way the executor runs it: through tfd_cpu_backend's
 * vtable and tfd_backend_run_op, with an OP_CONTRACT descriptor whose output
 * metadata comes from tf__infer_contract, on fresh random inputs of
 * magnitude [0.5, 2) (the seed is printed; TFCK_SEED=<n> replays a run),
 * into an output poisoned with NaN bytes. Every element is compared with an
 * independent reference (contract-cases.h: every assignment of every label,
 * in long double complex), within a bound of a few units of the dtype's
 * precision per summed term, relative to the summed magnitudes of the terms,
 * so cancellation cannot fail a correct kernel. Cases: named forms (matrix
 * products in every layout, batches, the permuted layouts, diagonals,
 * summed labels, outer and elementwise products, scalars) for every dtype
 * with each conjugation flag, large enough for OpenBLAS as well as the small
 * loop; 240 random binary contractions (ranks 0..6, sizes 1..7) and 100
 * random unary ones (permute, diagonal, trace, sums); descriptors that
 * disagree with their tensors refused typed; and the daemon-wide plan cache
 * seen through the backend (vt->caches counts a repeat as a hit, trim
 * empties it).
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/contract-cache.h"
#include "tests/contract-cases.h"

static const tf_dtype all_dtypes[4] = {TF_F32, TF_F64, TF_C64, TF_C128};

/* ---- random numbers: reproducible from one printed seed ---- */

static uint64_t g_seed, rng_state;

/* splitmix64. */
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A magnitude in [0.5, 2), either sign. */
static double rng_value(void) {
    double v = 0.5 + 1.5 * (double)(rng_next() >> 11) * 0x1.0p-53;
    return (rng_next() & 1) ? -v : v;
}

/* ---- the backend and what a test allocated ---- */

#define MAX_ALLOCS 64

static tfd_backend be;
static void *stream;
static char msg[512];
static void *dev_allocs[MAX_ALLOCS];
static size_t dev_bytes[MAX_ALLOCS];
static int n_dev_allocs;

static void setup(void) {
    memset(&be, 0, sizeof be);
    be.vt = &tfd_cpu_backend;
    tf_status st = be.vt->open(&be, 0, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "open: %s %s", tf_status_name(st), msg);
    st = be.vt->stream_create(&be, 0, &stream);
    ck_assert_msg(st == TF_OK, "stream_create: %s", tf_status_name(st));
    n_dev_allocs = 0;
    rng_state = g_seed;
}

/* Frees what the last case allocated. */
static void release(void) {
    for (int i = 0; i < n_dev_allocs; i++) be.vt->free(&be, stream, dev_allocs[i], dev_bytes[i]);
    n_dev_allocs = 0;
}

static void teardown(void) {
    release();
    be.vt->stream_destroy(&be, stream);
    be.vt->close(&be);
}

/* A device tensor of the given metadata, filled from host (NULL: NaN bytes). */
static tfd_tensor_view dev_tensor(const tf__meta *m, const void *host) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = m->dtype;
    v.rank = m->rank;
    memcpy(v.shape, m->shape, sizeof v.shape);
    v.numel = tf__meta_numel(m);
    const size_t bytes = tf__meta_bytes(m);
    ck_assert_int_lt(n_dev_allocs, MAX_ALLOCS);
    tf_status st = be.vt->alloc(&be, stream, bytes, &v.data);
    ck_assert_msg(st == TF_OK, "alloc %zu: %s", bytes, tf_status_name(st));
    dev_allocs[n_dev_allocs] = v.data;
    dev_bytes[n_dev_allocs++] = bytes;
    void *poison = NULL;
    if (!host) { /* all-ones bytes are NaN in every dtype */
        poison = malloc(bytes ? bytes : 1);
        ck_assert_ptr_nonnull(poison);
        memset(poison, 0xff, bytes);
    }
    st = be.vt->copy_to_device(&be, stream, v.data, host ? host : poison, bytes);
    free(poison);
    ck_assert_int_eq(st, TF_OK);
    return v;
}

/* Random host data for metadata m (the caller frees it). */
static void *random_host(const tf__meta *m) {
    const int64_t n = tf__meta_numel(m);
    void *h = malloc(tf__meta_bytes(m) ? tf__meta_bytes(m) : 1);
    ck_assert_ptr_nonnull(h);
    const int cx = m->dtype == TF_C64 || m->dtype == TF_C128;
    for (int64_t i = 0; i < n; i++)
        cc_set(h, m->dtype, i, cx ? CMPLXL(rng_value(), rng_value()) : rng_value());
    return h;
}

/* The executor's descriptor of a case over device tensors in[] into out. */
static tfd_op contract_op(const cc_case *k, const tfd_tensor_view *in, const tfd_tensor_view *out) {
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_CONTRACT;
    op.n_inputs = k->c.n_inputs;
    for (int i = 0; i < k->c.n_inputs; i++) op.in[i] = in[i];
    op.out = *out;
    op.contract = k->c;
    return op;
}

/* Runs case k on random inputs and compares every element with the reference. */
static void check_case(cc_case *k) {
    void *host[2] = {NULL, NULL};
    tfd_tensor_view in[2];
    memset(in, 0, sizeof in);
    for (int i = 0; i < k->c.n_inputs; i++) {
        host[i] = random_host(&k->in[i]);
        in[i] = dev_tensor(&k->in[i], host[i]);
    }
    tfd_tensor_view out = dev_tensor(&k->out, NULL);
    tfd_op op = contract_op(k, in, &out);
    msg[0] = '\0';
    tf_status st = tfd_backend_run_op(&be, stream, &op, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s: %s: %s (seed %llu)", k->text, tf_status_name(st), msg,
                  (unsigned long long)g_seed);
    const int64_t n = out.numel;
    cc_lcx *ref = malloc(sizeof *ref * (size_t)n);
    long double *scale = malloc(sizeof *scale * (size_t)n);
    ck_assert(ref && scale);
    cc_reference(k, host[0], host[1], ref, scale);
    const long double tol = cc_tolerance(k);
    for (int64_t e = 0; e < n; e++) {
        const cc_lcx got = cc_get(out.data, out.dtype, e);
        const long double err = cabsl(got - ref[e]);
        ck_assert_msg(err <= tol * scale[e],
                      "%s element %lld: got %.10Lg%+.10Lgi, want %.10Lg%+.10Lgi, |err| %.3Lg > "
                      "%.3Lg (seed %llu)",
                      k->text, (long long)e, creall(got), cimagl(got), creall(ref[e]),
                      cimagl(ref[e]), err, tol * scale[e], (unsigned long long)g_seed);
    }
    free(ref);
    free(scale);
    free(host[0]);
    free(host[1]);
    release();
}

/* ---- named forms ---- */

/* A form and the size of every letter it uses. */
typedef struct named_form {
    const char *spec;
    int64_t size; /* every letter's size, unless sizes lists them */
    const char *sizes; /* "a3b5..." overrides, or NULL */
} named_form;

static const named_form forms[] = {
    {"ij,jk->ik", 0, "i37j29k41"},   {"ij,kj->ik", 0, "i37j29k41"},
    {"ji,jk->ik", 0, "i37j29k41"},   {"ji,kj->ik", 0, "i37j29k41"},
    {"ij,jk->ki", 0, "i37j29k41"},   {"ji,kj->ki", 0, "i37j29k41"},
    {"bij,bjk->bik", 0, "b3i17j13k11"}, {"ibj,jbk->bki", 0, "b3i17j13k11"},
    {"abcd,cdef->abef", 5, NULL},    {"acbd,dcef->abef", 5, NULL},
    {"abcd,cdef->aebf", 5, NULL},    {"abcd,cdef->feba", 4, NULL},
    {"iij,jk->ik", 0, "i6j5k7"},     {"ijk,jil->lk", 0, "i4j5k6l3"},
    {"ij,jk->", 0, "i5j6k7"},        {"ijk,k->ij", 0, "i5j6k7"},
    {"i,j->ij", 0, "i9j7"},          {"i,j->ji", 0, "i9j7"},
    {"ij,ij->ij", 0, "i6j7"},        {"ij,ji->ij", 0, "i6j7"},
    {"i,i->", 0, "i300"},            {",->", 1, NULL},
    {"ab,->ba", 0, "a3b4"},          {"bi,bi->b", 0, "b5i9"},
    {"abc,bcd->ad", 0, "a1b7c1d9"},  {"aab,bcc->ac", 0, "a4b3c5"},
    {"ii->i", 0, "i7"},              {"ii->", 0, "i7"},
    {"ij->ji", 0, "i6j9"},           {"ij->", 0, "i6j9"},
    {"ijk->kji", 0, "i3j4k5"},       {"iji->j", 0, "i4j5"},
    {"ij->ij", 0, "i6j9"},           {"abc->b", 0, "a3b4c5"},
};

/* Parses a form's sizes: every letter `size`, then the "a3b5" overrides. */
static void form_sizes(const named_form *f, int64_t size[26]) {
    for (int l = 0; l < 26; l++) size[l] = f->size ? f->size : 1;
    for (const char *p = f->sizes; p && *p;) {
        const int l = *p++ - 'a';
        size[l] = strtoll(p, (char **)&p, 10);
    }
}

/* Every form, for every dtype, with no, one and both inputs conjugated. */
START_TEST(test_named_forms) {
    const tf_dtype dt = all_dtypes[_i];
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        int64_t size[26];
        form_sizes(&forms[f], size);
        for (int conj = 0; conj < 4; conj++) {
            cc_case k;
            tf_status st = cc_from_spec(forms[f].spec, size, dt, conj & 1, conj >> 1, &k);
            ck_assert_msg(st == TF_OK, "%s refused by the rules", forms[f].spec);
            check_case(&k);
        }
    }
}
END_TEST

/* Random binary contractions: ranks 0..6, sizes 1..7, every kind of label. */
START_TEST(test_random_binary) {
    rng_state = g_seed + 0x51ED27u * (uint64_t)(_i + 1);
    cc_case k;
    cc_random(rng_next, 1, all_dtypes[_i % 4], 200000, &k);
    check_case(&k);
}
END_TEST

/* Random unary contractions: permutes, diagonals, traces, partial sums. */
START_TEST(test_random_unary) {
    rng_state = g_seed + 0xC0FFEEu * (uint64_t)(_i + 1);
    cc_case k;
    cc_random(rng_next, 0, all_dtypes[_i % 4], 200000, &k);
    check_case(&k);
}
END_TEST

/* An item whose output or input count disagrees with its descriptor is refused, not run. */
START_TEST(test_inconsistent_items) {
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = 3;
    size['j' - 'a'] = 4;
    cc_case k;
    ck_assert_int_eq(cc_from_spec("ij,jk->ik", size, TF_F64, 0, 0, &k), TF_OK);
    void *ha = random_host(&k.in[0]), *hb = random_host(&k.in[1]);
    tfd_tensor_view in[2] = {dev_tensor(&k.in[0], ha), dev_tensor(&k.in[1], hb)};
    tf__meta wrong = k.out;
    wrong.shape[1] = 2;
    tfd_tensor_view out = dev_tensor(&wrong, NULL);
    tfd_op op = contract_op(&k, in, &out);
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_ERR_SHAPE);
    op.n_inputs = 1;
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_ERR_INTERNAL);
    op.n_inputs = 2;
    op.contract.labels[1][0] = 70;
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    op.contract.labels[1][0] = k.c.labels[1][0];
    op.in[1].dtype = TF_F32;
    ck_assert_int_eq(tfd_backend_run_op(&be, stream, &op, msg, sizeof msg), TF_ERR_DTYPE);
    free(ha);
    free(hb);
    release();
}
END_TEST

/* The contraction_plans entry of the backend's caches (it lists the FFT plans too); 1 when found. */
static int contract_stats(tfd_cache_stats *out) {
    tfd_cache_stats all[8];
    int n = be.vt->caches(&be, all, 8);
    for (int i = 0; i < n; i++)
        if (strcmp(all[i].name, "contraction_plans") == 0) {
            *out = all[i];
            return 1;
        }
    return 0;
}

/* The daemon-wide cache through the backend: a repeat is a hit, trim empties it. */
START_TEST(test_plan_cache_through_backend) {
    ck_assert_ptr_nonnull(be.vt->caches);
    tfd_contract_cache_clear(tfd_contract_plans()); /* CK_FORK=no runs every test in one process */
    tfd_cache_stats before, after;
    ck_assert_int_eq(contract_stats(&before), 1);
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = 2 + l % 3;
    cc_case k;
    ck_assert_int_eq(cc_from_spec("abc,cbd->da", size, TF_C64, 1, 0, &k), TF_OK);
    check_case(&k);
    ck_assert_int_eq(contract_stats(&after), 1);
    ck_assert_uint_eq(after.misses, before.misses + 1);
    ck_assert_uint_eq(after.hits, before.hits);
    ck_assert_uint_eq(after.entries, 1);
    check_case(&k);
    ck_assert_int_eq(contract_stats(&after), 1);
    ck_assert_uint_eq(after.hits, before.hits + 1);
    ck_assert_uint_eq(after.misses, before.misses + 1);
    ck_assert_uint_gt(after.bytes, 0);
    ck_assert_uint_eq(after.capacity, TFD_CONTRACT_PLANS_DEFAULT);
    ck_assert_ptr_nonnull(be.vt->trim);
    ck_assert_int_eq(be.vt->trim(&be, msg, sizeof msg), TF_OK);
    ck_assert_msg(strstr(msg, "contraction plan"), "trim said: %s", msg);
    ck_assert_int_eq(contract_stats(&after), 1);
    ck_assert_uint_eq(after.entries, 0);
    check_case(&k); /* planned again after the trim */
    ck_assert_int_eq(contract_stats(&after), 1);
    ck_assert_uint_eq(after.misses, before.misses + 2);
}
END_TEST

static Suite *cpu_contract_suite(void) {
    Suite *s = suite_create("cpu-contract");
    TCase *tc = tcase_create("contract");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_named_forms, 0, 4);
    tcase_add_loop_test(tc, test_random_binary, 0, 240);
    tcase_add_loop_test(tc, test_random_unary, 0, 100);
    tcase_add_test(tc, test_inconsistent_items);
    tcase_add_test(tc, test_plan_cache_through_backend);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    const char *seed = getenv("TFCK_SEED");
    g_seed = seed ? strtoull(seed, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("test-cpu-contract: seed %llu (replay with TFCK_SEED=%llu)\n",
           (unsigned long long)g_seed, (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(cpu_contract_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
