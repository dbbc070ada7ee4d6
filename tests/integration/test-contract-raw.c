/*
 * Integration tests of OP_CONTRACT through a real daemon, spoken in raw
 * frames (the client library of this tree has no einsum call yet, and the
 * daemon must hold against descriptors the library would never send).
 *
 *  - Results: contractions of every dtype (matrix products, the folded and
 *    the permuted layouts, batches, diagonals, conjugation, a unary trace)
 *    run in scoped bursts on random inputs and are compared element by
 *    element with an independent reference (tests/contract-cases.h).
 *  - Bad descriptors: labels that do not match the rank, a label >= 64, a
 *    label bound to two sizes, an output label twice or on no input, three
 *    inputs, mixed dtypes, no descriptor, labels_b with one input: each is
 *    refused with its typed status and a readable message, at its index of
 *    the batch (what came before it stays valid, nothing after it is
 *    created); the connection stays usable, and another client's tensor and
 *    service are untouched.
 *  - The plan cache: a repeated identical contraction (from the same or
 *    another client) adds no plan, which `trim` reports as the number of
 *    plans it dropped; where the status report lists the caches, the
 *    repeat is counted as a hit.
 *
 * Each test starts its own tenferrod and stops it with SIGTERM, requiring a
 * clean exit (a crash or a sanitizer report fails it).
 */
#include <check.h>
#include <complex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/ops.h"
#include "tests/contract-cases.h"
#include "tests/integration/harness.h"

#define RAW_MS 20000

static uint64_t g_seq = 1;

/* ---- raw frames ---- */

/* Sends f with a fresh sequence number and returns the reply (failing the test without one). */
static Tenferro__Frame *call(int fd, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv(fd, RAW_MS);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    return r;
}

/* A raw connection past its Hello. */
static int raw_client(const th_daemon *d, const char *name) {
    int fd = th_raw_open(d, name, ++g_seq, NULL);
    ck_assert_msg(fd >= 0, "%s: no HelloReply", name);
    return fd;
}

/* Creates tensor id with the given metadata and contents. */
static void upload(int fd, uint64_t id, const tf__meta *m, const void *data) {
    Tenferro__Frame f;
    Tenferro__Upload up;
    int64_t shape[TF_MAX_RANK];
    memcpy(shape, m->shape, sizeof shape);
    th_raw_build_upload(&f, &up, id, 1, m->dtype, m->rank, shape, 0, data, tf__meta_bytes(m));
    CK_EXPECT_RESULT(call(fd, &f), TF_OK, NULL);
}

/* Downloads tensor id: its bytes (caller frees), or NULL with *status set when refused. */
static void *download(int fd, uint64_t id, size_t bytes, tf_status *status) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, bytes);
    Tenferro__Frame *r = call(fd, &f);
    void *data = NULL;
    if (r->body_case == TENFERRO__FRAME__BODY_DOWNLOAD_REPLY) {
        *status = (tf_status)r->download_reply->result->status;
        if (*status == TF_OK) {
            ck_assert_uint_eq(r->download_reply->data.len, bytes);
            data = malloc(bytes ? bytes : 1);
            ck_assert_ptr_nonnull(data);
            memcpy(data, r->download_reply->data.data, bytes);
        }
    } else {
        ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
        *status = (tf_status)r->result->status;
    }
    tf__frame_free(r);
    return data;
}

/* One OP_CONTRACT and the storage its frame points into. */
typedef struct contract_op {
    Tenferro__Op op;
    Tenferro__Contraction desc;
    uint64_t inputs[3];
    uint32_t labels[3][TF_MAX_RANK + 2];
} contract_op;

/* Fills o with contraction c over tensors a (and b) into out; with_desc 0 leaves it out. */
static void build_contract(contract_op *o, const tf__contraction *c, uint64_t a, uint64_t b,
                           uint64_t out) {
    tenferro__op__init(&o->op);
    tenferro__contraction__init(&o->desc);
    o->op.kind = TENFERRO__OP_KIND__OP_CONTRACT;
    o->inputs[0] = a;
    o->inputs[1] = b;
    o->op.inputs = o->inputs;
    o->op.n_inputs = (size_t)c->n_inputs;
    o->op.output = out;
    const int n[3] = {c->rank[0], c->n_inputs == 2 ? c->rank[1] : 0, c->out_rank};
    const uint8_t *src[3] = {c->labels[0], c->labels[1], c->out};
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < n[k]; j++) o->labels[k][j] = src[k][j];
    o->desc.labels_a = o->labels[0];
    o->desc.n_labels_a = (size_t)n[0];
    o->desc.labels_b = o->labels[1];
    o->desc.n_labels_b = (size_t)n[1];
    o->desc.labels_out = o->labels[2];
    o->desc.n_labels_out = (size_t)n[2];
    o->desc.conj_a = c->conj[0];
    o->desc.conj_b = c->conj[1];
    o->op.contraction = &o->desc;
}

/* Sends ops as one scoped burst and returns the Result (caller frees). */
static Tenferro__Frame *submit(int fd, Tenferro__Op **ops, size_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.ops = ops;
    sub.n_ops = n;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    return r;
}

/* Random values of magnitude [0.1, 1] for metadata m (caller frees). */
static void *random_data(const tf__meta *m) {
    const int64_t n = tf__meta_numel(m);
    const int cx = m->dtype == TF_C64 || m->dtype == TF_C128;
    void *h = malloc(tf__meta_bytes(m) ? tf__meta_bytes(m) : 1);
    ck_assert_ptr_nonnull(h);
    double *tmp = malloc(sizeof(double) * (size_t)(2 * n + 1));
    ck_assert_ptr_nonnull(tmp);
    th_fill_random(TF_F64, (size_t)(2 * n), tmp);
    for (int64_t i = 0; i < n; i++)
        cc_set(h, m->dtype, i, cx ? CMPLXL(tmp[2 * i], tmp[2 * i + 1]) : tmp[2 * i]);
    free(tmp);
    return h;
}

/* The next tensor id this connection has not used. */
static uint64_t g_next_id = 100;

/* Uploads random inputs for k, runs it, and checks the output against the reference. */
static void run_and_check(int fd, cc_case *k) {
    void *host[2] = {NULL, NULL};
    uint64_t ids[2] = {0, 0};
    for (int i = 0; i < k->c.n_inputs; i++) {
        host[i] = random_data(&k->in[i]);
        ids[i] = ++g_next_id;
        upload(fd, ids[i], &k->in[i], host[i]);
    }
    const uint64_t out = ++g_next_id;
    contract_op o;
    build_contract(&o, &k->c, ids[0], ids[1], out);
    Tenferro__Op *ops[1] = {&o.op};
    Tenferro__Frame *r = submit(fd, ops, 1);
    CK_RESULT(r->result, TF_OK, NULL);
    tf__frame_free(r);
    tf_status st;
    const size_t bytes = tf__meta_bytes(&k->out);
    void *got = download(fd, out, bytes, &st);
    ck_assert_msg(st == TF_OK, "%s: download of the output: %s", k->text, tf_status_name(st));
    const int64_t n = tf__meta_numel(&k->out);
    cc_lcx *ref = malloc(sizeof *ref * (size_t)n);
    long double *scale = malloc(sizeof *scale * (size_t)n);
    ck_assert(ref && scale);
    cc_reference(k, host[0], host[1], ref, scale);
    const long double tol = cc_tolerance(k);
    for (int64_t e = 0; e < n; e++) {
        const long double err = cabsl(cc_get(got, k->out.dtype, e) - ref[e]);
        ck_assert_msg(err <= tol * scale[e], "%s element %lld: |err| %.3Lg > %.3Lg (seed %u)",
                      k->text, (long long)e, err, tol * scale[e], th_seed());
    }
    free(ref);
    free(scale);
    free(got);
    free(host[0]);
    free(host[1]);
}

/* A case from a spec, every letter of size n except those listed in bigs (size big). */
static cc_case spec_case(const char *spec, int64_t n, const char *bigs, int64_t big, tf_dtype dt,
                         int conj_a, int conj_b) {
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = n;
    for (const char *p = bigs; p && *p; p++) size[*p - 'a'] = big;
    cc_case k;
    ck_assert_msg(cc_from_spec(spec, size, dt, conj_a, conj_b, &k) == TF_OK, "%s", spec);
    return k;
}

/* ---- results ---- */

START_TEST(test_results_match_reference) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    int fd = raw_client(&d, "contract-results");
    cc_case cases[] = {
        spec_case("ij,jk->ik", 17, "j", 23, TF_F64, 0, 0),
        spec_case("abcd,cdef->aebf", 5, "c", 3, TF_C128, 1, 0),
        spec_case("acbd,dcef->abef", 4, NULL, 0, TF_F32, 0, 0),
        spec_case("bij,bjk->bik", 6, "b", 9, TF_C64, 0, 1),
        spec_case("iij,jk->ik", 5, "k", 7, TF_F64, 0, 0),
        spec_case("ijm,kj->ki", 4, "m", 3, TF_C64, 1, 1),
        spec_case("ii->", 9, NULL, 0, TF_C128, 1, 0),
        spec_case("ijk->kji", 3, "j", 5, TF_F32, 0, 0),
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_and_check(fd, &cases[i]);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- bad descriptors ---- */

/* A bystander on its own connection: a tensor uploaded before, checked after. */
typedef struct bystander {
    int fd;
    tf__meta meta;
    void *data;
} bystander;

static void bystander_start(const th_daemon *d, bystander *b) {
    b->fd = raw_client(d, "bystander");
    b->meta = (tf__meta){.dtype = TF_F64, .rank = 2, .shape = {12, 12}};
    b->data = random_data(&b->meta);
    upload(b->fd, 1, &b->meta, b->data);
}

/* The bystander's tensor is intact and a trace of it still runs. */
static void bystander_check(bystander *b) {
    tf_status st;
    void *got = download(b->fd, 1, tf__meta_bytes(&b->meta), &st);
    ck_assert_int_eq(st, TF_OK);
    ck_assert_msg(memcmp(got, b->data, tf__meta_bytes(&b->meta)) == 0,
                  "the bystander's tensor changed");
    free(got);
    cc_case k = spec_case("ii->", 12, NULL, 0, TF_F64, 0, 0);
    run_and_check(b->fd, &k);
}

/* What a malformed OP_CONTRACT looks like and how it must be refused. */
typedef struct bad_case {
    const char *what;
    const char *spec;
    tf_status status;
    const char *needle;
} bad_case;

START_TEST(test_bad_descriptors_typed) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    bystander by;
    bystander_start(&d, &by);
    int fd = raw_client(&d, "contract-bad");
    /* Inputs: 1 = f64 [3,4], 2 = f64 [4,5], 3 = f32 [4,5], 4 = f64 [3,3]. */
    const tf__meta m1 = {.dtype = TF_F64, .rank = 2, .shape = {3, 4}};
    const tf__meta m2 = {.dtype = TF_F64, .rank = 2, .shape = {4, 5}};
    const tf__meta m3 = {.dtype = TF_F32, .rank = 2, .shape = {4, 5}};
    const tf__meta m4 = {.dtype = TF_F64, .rank = 2, .shape = {3, 3}};
    const tf__meta *metas[4] = {&m1, &m2, &m3, &m4};
    for (int i = 0; i < 4; i++) {
        void *h = random_data(metas[i]);
        upload(fd, (uint64_t)(i + 1), metas[i], h);
        free(h);
    }
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = 1;
    cc_case good;
    size['i' - 'a'] = 3;
    size['j' - 'a'] = 4;
    size['k' - 'a'] = 5;
    ck_assert_int_eq(cc_from_spec("ij,jk->ik", size, TF_F64, 0, 0, &good), TF_OK);

    enum { LABELS_VS_RANK, LABEL_64, SIZE_MISMATCH, OUT_TWICE, OUT_ABSENT, THREE_INPUTS,
           DTYPE_MIX, NO_DESCRIPTOR, LABELS_B_UNARY, NINE_LABELS, N_BAD };
    static const bad_case bad[N_BAD] = {
        [LABELS_VS_RANK] = {"labels count != rank", NULL, TF_ERR_SHAPE, "labels"},
        [LABEL_64] = {"label 64", NULL, TF_ERR_INVALID_ARGUMENT, "0..63"},
        [SIZE_MISMATCH] = {"a label of two sizes", NULL, TF_ERR_SHAPE, "size"},
        [OUT_TWICE] = {"output label twice", NULL, TF_ERR_INVALID_ARGUMENT, "twice"},
        [OUT_ABSENT] = {"output label on no input", NULL, TF_ERR_INVALID_ARGUMENT, "no input"},
        [THREE_INPUTS] = {"three inputs", NULL, TF_ERR_INVALID_ARGUMENT, "1 or 2"},
        [DTYPE_MIX] = {"f64 with f32", NULL, TF_ERR_DTYPE, "dtypes differ"},
        [NO_DESCRIPTOR] = {"no descriptor", NULL, TF_ERR_INVALID_ARGUMENT, "descriptor"},
        [LABELS_B_UNARY] = {"labels_b with one input", NULL, TF_ERR_INVALID_ARGUMENT, "1 or 2"},
        [NINE_LABELS] = {"nine labels", NULL, TF_ERR_SHAPE, "labels"},
    };
    for (int b = 0; b < N_BAD; b++) {
        contract_op o;
        build_contract(&o, &good.c, 1, 2, 50 + (uint64_t)b);
        switch (b) {
        case LABELS_VS_RANK: o.desc.n_labels_a = 1; break;
        case LABEL_64: o.labels[1][1] = 64; break;
        case SIZE_MISMATCH: o.inputs[1] = 4; break; /* j is 4 in input 0, 3 in [3,3] */
        case OUT_TWICE: o.labels[2][1] = o.labels[2][0]; break;
        case OUT_ABSENT: o.labels[2][1] = 63; break;
        case THREE_INPUTS: o.inputs[2] = 2; o.op.n_inputs = 3; break;
        case DTYPE_MIX: o.inputs[1] = 3; break;
        case NO_DESCRIPTOR: o.op.contraction = NULL; break;
        case LABELS_B_UNARY: o.op.n_inputs = 1; break;
        case NINE_LABELS:
            for (int j = 0; j < 9; j++) o.labels[0][j] = (uint32_t)j;
            o.desc.n_labels_a = 9;
            break;
        }
        /* A valid contraction first: it stays; the one after the bad one is never created. */
        contract_op before, after;
        build_contract(&before, &good.c, 1, 2, 200 + (uint64_t)b);
        build_contract(&after, &good.c, 1, 2, 300 + (uint64_t)b);
        Tenferro__Op *ops[3] = {&before.op, &o.op, &after.op};
        Tenferro__Frame *r = submit(fd, ops, 3);
        char why[1024];
        ck_assert_msg(th_result_problem(r->result, bad[b].status, bad[b].needle, why,
                                        sizeof why) == 0,
                      "%s: %s", bad[b].what, why);
        ck_assert_msg(r->result->has_failed_index && r->result->failed_index == 1,
                      "%s: failed index %u", bad[b].what, r->result->failed_index);
        ck_assert_uint_eq(r->result->ops_accepted, 1);
        tf__frame_free(r);
        tf_status st;
        void *kept = download(fd, 200 + (uint64_t)b, tf__meta_bytes(&good.out), &st);
        ck_assert_msg(st == TF_OK, "%s: the contraction before it is gone: %s", bad[b].what,
                      tf_status_name(st));
        free(kept);
        ck_assert_ptr_null(download(fd, 50 + (uint64_t)b, 8, &st));
        ck_assert_int_eq(st, TF_ERR_UNKNOWN_HANDLE);
        ck_assert_ptr_null(download(fd, 300 + (uint64_t)b, 8, &st));
        ck_assert_int_eq(st, TF_ERR_UNKNOWN_HANDLE);
    }
    /* The connection still works, with results right. */
    cc_case k = spec_case("ij,kj->ik", 6, "j", 4, TF_C128, 0, 1);
    run_and_check(fd, &k);
    bystander_check(&by);
    close(fd);
    close(by.fd);
    free(by.data);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- the plan cache ---- */

/* Sends a raw admin trim and returns how many contraction plans it says it dropped. */
static long trim_plans(int fd) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__AdminRequest a = TENFERRO__ADMIN_REQUEST__INIT;
    a.kind = TENFERRO__ADMIN_KIND__ADMIN_TRIM;
    f.body_case = TENFERRO__FRAME__BODY_ADMIN_REQUEST;
    f.admin_request = &a;
    Tenferro__Frame *r = call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    ck_assert_msg(r->result->status == TF_OK, "trim: %s", r->result->message);
    const char *at = strstr(r->result->message, " contraction plan");
    ck_assert_msg(at != NULL, "trim does not report contraction plans: %s", r->result->message);
    while (at > r->result->message && at[-1] >= '0' && at[-1] <= '9') at--;
    long n = strtol(at, NULL, 10);
    tf__frame_free(r);
    return n;
}

/* The contraction_plans entry of the status report, if the report lists caches (1), else 0. */
static int plan_stats(const th_daemon *d, uint64_t *hits, uint64_t *misses, uint64_t *entries) {
    Tenferro__Frame *r = th_status_report(d);
    ck_assert_ptr_nonnull(r);
    int found = 0;
    for (size_t i = 0; i < r->status_reply->n_caches; i++) {
        const Tenferro__CacheInfo *ci = r->status_reply->caches[i];
        if (strcmp(ci->name, "contraction_plans") != 0) continue;
        *hits = ci->hits;
        *misses = ci->misses;
        *entries = ci->entries;
        found = 1;
    }
    const int listed = r->status_reply->n_caches > 0;
    tf__frame_free(r);
    ck_assert_msg(!listed || found, "the status report lists caches but not contraction_plans");
    return found;
}

START_TEST(test_plan_cache_shared) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "2");
    int a = raw_client(&d, "contract-cache-a"), b = raw_client(&d, "contract-cache-b");
    cc_case x = spec_case("abcd,cdef->aebf", 3, "b", 4, TF_C64, 1, 0);
    cc_case y = spec_case("bij,bjk->bik", 3, "j", 5, TF_F64, 0, 0);
    uint64_t h0 = 0, m0 = 0, e0 = 0, h, m, e;
    const int listed = plan_stats(&d, &h0, &m0, &e0);
    if (!listed)
        fprintf(stderr, "test-contract-raw: the status report lists no caches here; the plan "
                        "cache is checked through trim alone\n");
    ck_assert_int_eq(trim_plans(a), 0);
    run_and_check(a, &x);
    if (listed) {
        plan_stats(&d, &h, &m, &e);
        ck_assert_uint_eq(m, m0 + 1);
        ck_assert_uint_eq(e, 1);
    }
    run_and_check(a, &x); /* the same contraction again: a hit */
    run_and_check(b, &x); /* from another client: the daemon-wide plan, a hit again */
    if (listed) {
        plan_stats(&d, &h, &m, &e);
        ck_assert_uint_eq(h, h0 + 2);
        ck_assert_uint_eq(m, m0 + 1);
        ck_assert_uint_eq(e, 1);
    }
    run_and_check(b, &y);
    ck_assert_int_eq(trim_plans(a), 2);
    ck_assert_int_eq(trim_plans(b), 0);
    run_and_check(a, &x); /* planned afresh after the trim */
    ck_assert_int_eq(trim_plans(b), 1);
    close(a);
    close(b);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* [caches] contraction_plans bounds the cache: with 1, a second contraction evicts the first. */
START_TEST(test_plan_cache_bound) {
    th_daemon d;
    CK_DAEMON_START(&d, "--contraction-plans", "1");
    int fd = raw_client(&d, "contract-bound");
    cc_case x = spec_case("ij,jk->ik", 4, NULL, 0, TF_F32, 0, 0);
    cc_case y = spec_case("ij,jk->ki", 4, NULL, 0, TF_F32, 0, 0);
    run_and_check(fd, &x);
    run_and_check(fd, &y);
    ck_assert_int_eq(trim_plans(fd), 1);
    close(fd);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *contract_raw_suite(void) {
    Suite *s = suite_create("contract-raw");
    TCase *tc = tcase_create("contract");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_results_match_reference);
    tcase_add_test(tc, test_bad_descriptors_typed);
    tcase_add_test(tc, test_plan_cache_shared);
    tcase_add_test(tc, test_plan_cache_bound);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    th_seed();
    SRunner *sr = srunner_create(contract_raw_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
