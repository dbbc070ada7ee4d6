/*
 * Unit tests of contraction planning (contract-plan.c) and the plan cache
 * (contract-cache.c).
 *
 * The decomposition: layouts a GEMM can read and write in place must plan
 * no copy at all, with the transpose flags, leading dimensions and batch
 * strides that read them (ij,jk->ik and its transposed forms, bij,bjk->bik,
 * abcd,cdef->abef, a diagonal read through its summed stride, an
 * elementwise product as a batch of 1x1 products, size-1 axes ignored);
 * layouts it cannot must copy exactly what is needed (acbd,dcef->abef
 * permutes input 0 only, abcd,cdef->aebf writes a temporary and permutes
 * it, a label summed out of one input pre-reduces that input); conjugation
 * folds into a transposed read and costs a pass otherwise, and is ignored
 * for real dtypes; unary forms are one pass, recognised as a copy or a
 * permutation where they are one.
 *
 * The cache: hits, misses, evictions and entries counted exactly under an
 * LRU bound (a hit refreshes an entry), keys that differ only in label
 * names share a plan while a different shape, dtype or conjugation does
 * not, a lower bound evicts at once, clear empties it, a refused descriptor
 * is never cached, and threads planning at once keep the counters exact
 * and get the same plans as a direct build.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/contract-cache.h"
#include "daemon/backend/contract-plan.h"
#include "tests/contract-cases.h"

/* Builds a case from a spec with every letter of size n (and `big` for the letters in bigs). */
static cc_case make_case(const char *spec, int64_t n, const char *bigs, int64_t big, tf_dtype dt,
                         int conj_a, int conj_b) {
    int64_t size[26];
    for (int l = 0; l < 26; l++) size[l] = n;
    for (const char *p = bigs; p && *p; p++) size[*p - 'a'] = big;
    cc_case k;
    tf_status st = cc_from_spec(spec, size, dt, conj_a, conj_b, &k);
    ck_assert_msg(st == TF_OK, "%s refused by the rules", spec);
    return k;
}

static tfd_contract_plan plan_of(const cc_case *k) {
    tfd_contract_plan p;
    char msg[256] = "";
    tf_status st = tfd_contract_plan_build(&k->c, k->in, &p, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s: %s", k->text, msg);
    return p;
}

/* No pass, no temporary: the GEMM reads both inputs and writes the output in place. */
static void expect_in_place(const tfd_contract_plan *p, const char *what) {
    ck_assert_msg(!p->pre[0].active && !p->pre[1].active && !p->to_temp && p->copied == 0,
                  "%s copies: pre %d %d, temp %d, %lld elements", what, p->pre[0].active,
                  p->pre[1].active, p->to_temp, (long long)p->copied);
    ck_assert_int_eq(tfd_contract_plan_scratch(p), 0);
}

START_TEST(test_matmul_in_place) {
    /* ij,jk->ik, all row-major: C^T = B^T A^T, both read as stored (X = input 1). */
    cc_case k;
    int64_t size[26] = {0};
    size['i' - 'a'] = 3;
    size['j' - 'a'] = 4;
    size['k' - 'a'] = 5;
    ck_assert_int_eq(cc_from_spec("ij,jk->ik", size, TF_F64, 0, 0, &k), TF_OK);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    const tfd_contract_gemm *g = &p.gemm;
    ck_assert_int_eq(g->x, 1);
    ck_assert_int_eq(g->y, 0);
    ck_assert_int_eq(g->op_x, TFD_GEMM_N);
    ck_assert_int_eq(g->op_y, TFD_GEMM_N);
    ck_assert_int_eq(g->rows, 5);
    ck_assert_int_eq(g->cols, 3);
    ck_assert_int_eq(g->depth, 4);
    ck_assert_int_eq(g->batch, 1);
    ck_assert_int_eq(g->ldx, 5);
    ck_assert_int_eq(g->ldy, 4);
    ck_assert_int_eq(g->ldc, 5);
}
END_TEST

/* Transposed inputs and a transposed output are flags and leading dimensions, not copies. */
START_TEST(test_transposes_in_place) {
    static const struct {
        const char *spec;
        tfd_gemm_op op_x, op_y;
    } forms[] = {
        {"ij,kj->ik", TFD_GEMM_T, TFD_GEMM_N}, /* X = input 1 read transposed */
        {"ji,jk->ik", TFD_GEMM_N, TFD_GEMM_T},
        {"ji,kj->ik", TFD_GEMM_T, TFD_GEMM_T},
        {"ij,jk->ki", TFD_GEMM_T, TFD_GEMM_T}, /* C itself, X = input 0 */
    };
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        cc_case k = make_case(forms[f].spec, 6, "k", 9, TF_F32, 0, 0);
        tfd_contract_plan p = plan_of(&k);
        expect_in_place(&p, k.text);
        ck_assert_msg(p.gemm.op_x == forms[f].op_x && p.gemm.op_y == forms[f].op_y,
                      "%s: ops %d %d", k.text, p.gemm.op_x, p.gemm.op_y);
    }
}
END_TEST

START_TEST(test_batched_in_place) {
    cc_case k = make_case("bij,bjk->bik", 4, "b", 7, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert_int_eq(p.gemm.batch, 7);
    ck_assert_int_eq(p.gemm.stride_x, 16);
    ck_assert_int_eq(p.gemm.stride_y, 16);
    ck_assert_int_eq(p.gemm.stride_c, 16);
    /* The batch label need not lead: ibj,bjk->bik is still one stride per operand. */
    k = make_case("ibj,bjk->bik", 4, "b", 7, TF_F64, 0, 0);
    p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert_int_eq(p.gemm.batch, 7);
}
END_TEST

/* Groups of several labels fold into one GEMM when adjacent in the same order everywhere. */
START_TEST(test_grouped_in_place) {
    cc_case k = make_case("abcd,cdef->abef", 48, NULL, 0, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert_int_eq(p.gemm.rows, 48 * 48);
    ck_assert_int_eq(p.gemm.cols, 48 * 48);
    ck_assert_int_eq(p.gemm.depth, 48 * 48);
    /* The same with size-1 axes sprinkled in: they change no address. */
    k = make_case("axbcd,cdyef->abefy", 5, "xy", 1, TF_F64, 0, 0);
    p = plan_of(&k);
    expect_in_place(&p, k.text);
}
END_TEST

/* acbd,dcef->abef: M = (a,b) is split in input 0, so it alone is permuted; B and C stay. */
START_TEST(test_permuted_operand) {
    cc_case k = make_case("acbd,dcef->abef", 48, NULL, 0, TF_C128, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    ck_assert(p.pre[0].active);
    ck_assert(!p.pre[1].active);
    ck_assert(!p.to_temp);
    ck_assert(p.pre[0].is_permutation);
    ck_assert_int_eq(p.pre[0].numel, 48 * 48 * 48 * 48);
    ck_assert_int_eq(p.copied, 48 * 48 * 48 * 48);
    ck_assert_int_eq(p.gemm.depth, 48 * 48);
    ck_assert_int_eq(tfd_contract_plan_scratch(&p), 48 * 48 * 48 * 48);
}
END_TEST

/* abcd,cdef->aebf interleaves M and N in the output: a temporary, then one permutation. */
START_TEST(test_output_permuted) {
    cc_case k = make_case("abcd,cdef->aebf", 6, NULL, 0, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    ck_assert(!p.pre[0].active && !p.pre[1].active);
    ck_assert(p.to_temp);
    ck_assert(p.post.active && p.post.src == TFD_PASS_TEMP && p.post.is_permutation);
    ck_assert_int_eq(p.temp_numel, 6 * 6 * 6 * 6);
    ck_assert_int_eq(p.post.numel, 6 * 6 * 6 * 6);
    /* A batch label innermost in the output cannot be a GEMM's unit stride either. */
    k = make_case("bij,bjk->ikb", 3, NULL, 0, TF_F64, 0, 0);
    p = plan_of(&k);
    ck_assert(p.to_temp);
}
END_TEST

/* A repeated label is a strided view: iij,jk->ik reads the diagonal in place. */
START_TEST(test_diagonal_in_place) {
    cc_case k = make_case("iij,jk->ik", 5, "j", 3, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    /* Input 0 is Y (depth x cols) read as stored: j contiguous, i at stride 3 * (5 + 1). */
    ck_assert_int_eq(p.gemm.y, 0);
    ck_assert_int_eq(p.gemm.op_y, TFD_GEMM_N);
    ck_assert_int_eq(p.gemm.ldy, 3 * 6);
}
END_TEST

/* Labels of one input only are summed out of it first, in the layout the GEMM wants. */
START_TEST(test_summed_label) {
    cc_case k = make_case("ijm,jk->ik", 4, "m", 6, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    ck_assert(p.pre[0].active);
    ck_assert(!p.pre[1].active);
    ck_assert_int_eq(p.pre[0].n_red, 1);
    ck_assert_int_eq(p.pre[0].terms, 6);
    ck_assert_int_eq(p.pre[0].numel, 16);
    ck_assert(!p.pre[0].is_permutation);
    ck_assert_int_eq(p.gemm.op_x == TFD_GEMM_N && p.gemm.op_y == TFD_GEMM_N, 1);
}
END_TEST

/* An elementwise product is a batch of 1x1 products: no copy either. */
START_TEST(test_elementwise_in_place) {
    cc_case k = make_case("ij,ij->ij", 5, NULL, 0, TF_C64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert_int_eq(p.gemm.batch, 25);
    ck_assert_int_eq(p.gemm.rows * p.gemm.cols * p.gemm.depth, 1);
    k = make_case(",->", 1, NULL, 0, TF_F64, 0, 0);
    p = plan_of(&k);
    expect_in_place(&p, k.text);
}
END_TEST

/* Conjugation folds into a transposed read (op C) and costs a pass on a plain one. */
START_TEST(test_conjugation) {
    /* ij,kj->ik: input 1 is X read transposed: conj(b) folds. */
    cc_case k = make_case("ij,kj->ik", 5, "k", 7, TF_C128, 0, 1);
    tfd_contract_plan p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert_int_eq(p.gemm.x, 1);
    ck_assert_int_eq(p.gemm.op_x, TFD_GEMM_C);
    /* ij,jk->ik: both read as stored, so conj(a) needs a pass that conjugates. */
    k = make_case("ij,jk->ik", 5, "k", 7, TF_C128, 1, 0);
    p = plan_of(&k);
    ck_assert(p.pre[0].active && p.pre[0].conj && !p.pre[0].is_permutation);
    ck_assert(!p.pre[1].active);
    ck_assert(p.gemm.op_x != TFD_GEMM_C && p.gemm.op_y != TFD_GEMM_C);
    /* Real dtypes ignore the flags. */
    k = make_case("ij,jk->ik", 5, "k", 7, TF_F64, 1, 1);
    p = plan_of(&k);
    expect_in_place(&p, k.text);
    ck_assert(p.gemm.op_x == TFD_GEMM_N && p.gemm.op_y == TFD_GEMM_N);
}
END_TEST

/* Unary forms are one pass: a copy, a permutation, or a strided gather-reduce. */
START_TEST(test_unary_passes) {
    cc_case k = make_case("ij->ij", 4, "j", 5, TF_F64, 0, 0);
    tfd_contract_plan p = plan_of(&k);
    ck_assert(p.post.active && p.post.src == TFD_PASS_INPUT0 && p.post.is_identity);
    k = make_case("ij->ji", 4, "j", 5, TF_F64, 0, 0);
    p = plan_of(&k);
    ck_assert(p.post.is_permutation && !p.post.is_identity);
    ck_assert_int_eq(p.post.perm[0], 1);
    ck_assert_int_eq(p.post.perm[1], 0);
    ck_assert_int_eq(p.post.perm_shape[0], 4);
    k = make_case("ij->ji", 4, "j", 5, TF_C64, 1, 0);
    p = plan_of(&k);
    ck_assert(!p.post.is_permutation && p.post.conj);
    k = make_case("ii->i", 6, NULL, 0, TF_F64, 0, 0);
    p = plan_of(&k);
    ck_assert(!p.post.is_permutation);
    ck_assert_int_eq(p.post.n_keep, 1);
    ck_assert_int_eq(p.post.keep_stride[0], 7);
    k = make_case("ii->", 6, NULL, 0, TF_F64, 0, 0);
    p = plan_of(&k);
    ck_assert_int_eq(p.post.n_keep, 0);
    ck_assert_int_eq(p.post.n_red, 1);
    ck_assert_int_eq(p.post.red_stride[0], 7);
    ck_assert_int_eq(p.post.terms, 6);
    k = make_case("abc->b", 3, "b", 4, TF_F64, 0, 0);
    p = plan_of(&k);
    ck_assert_int_eq(p.post.terms, 9);
    ck_assert_int_eq(p.post.numel, 4);
}
END_TEST

/* A refused descriptor is refused by the planner with the rules' status. */
START_TEST(test_planner_refuses) {
    cc_case k = make_case("ij,jk->ik", 3, NULL, 0, TF_F64, 0, 0);
    k.in[1].shape[0] = 4;
    tfd_contract_plan p;
    char msg[256] = "";
    ck_assert_int_eq(tfd_contract_plan_build(&k.c, k.in, &p, msg, sizeof msg), TF_ERR_SHAPE);
    ck_assert(strlen(msg) > 10);
}
END_TEST

/* splitmix64 for the random descriptors below (fixed seed: the sweep is the same every run). */
static uint64_t sweep_state = 0x243F6A8885A308D3ull;
static uint64_t sweep_next(void) {
    uint64_t z = (sweep_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Every random binary contraction plans, into a GEMM that BLAS accepts, copying what it says. */
START_TEST(test_random_plans_valid) {
    for (int i = 0; i < 20000; i++) {
        cc_case k;
        cc_random(sweep_next, 1, (tf_dtype)(1 + i % 4), (int64_t)1 << 30, &k);
        tfd_contract_plan p = plan_of(&k);
        int64_t copied = 0;
        for (int j = 0; j < 2; j++) copied += p.pre[j].active ? p.pre[j].numel : 0;
        if (p.to_temp) copied += p.post.numel;
        ck_assert_msg(copied == p.copied, "%s: copied %lld, passes %lld", k.text,
                      (long long)p.copied, (long long)copied);
        ck_assert_msg(p.gemm.batch * p.gemm.rows * p.gemm.cols == p.out_numel, "%s", k.text);
    }
}
END_TEST

/* ---- the cache ---- */

static tfd_cache_stats stats_of(tfd_contract_cache *pc) {
    tfd_cache_stats s;
    tfd_contract_cache_stats(pc, &s);
    ck_assert_str_eq(s.name, "contraction_plans");
    return s;
}

static void get_ok(tfd_contract_cache *pc, const cc_case *k) {
    tfd_contract_plan p;
    char msg[256] = "";
    tf_status st = tfd_contract_cache_get(pc, &k->c, k->in, NULL, &p, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s: %s", k->text, msg);
}

static void expect_counts(tfd_contract_cache *pc, uint64_t hits, uint64_t misses, uint64_t evictions,
                          uint64_t entries) {
    tfd_cache_stats s = stats_of(pc);
    ck_assert_msg(s.hits == hits && s.misses == misses && s.evictions == evictions &&
                      s.entries == entries,
                  "hits %llu misses %llu evictions %llu entries %llu; expected %llu %llu %llu %llu",
                  (unsigned long long)s.hits, (unsigned long long)s.misses,
                  (unsigned long long)s.evictions, (unsigned long long)s.entries,
                  (unsigned long long)hits, (unsigned long long)misses,
                  (unsigned long long)evictions, (unsigned long long)entries);
}

START_TEST(test_cache_lru) {
    tfd_contract_cache pc;
    ck_assert_int_eq(tfd_contract_cache_init(&pc, 3), 0);
    cc_case k[4];
    for (int i = 0; i < 4; i++) k[i] = make_case("ij,jk->ik", 2 + i, NULL, 0, TF_F64, 0, 0);
    for (int i = 0; i < 3; i++) get_ok(&pc, &k[i]);
    expect_counts(&pc, 0, 3, 0, 3);
    get_ok(&pc, &k[0]); /* a hit makes k[0] the newest: k[1] is now the oldest */
    expect_counts(&pc, 1, 3, 0, 3);
    get_ok(&pc, &k[3]);
    expect_counts(&pc, 1, 4, 1, 3);
    get_ok(&pc, &k[0]);
    expect_counts(&pc, 2, 4, 1, 3);
    get_ok(&pc, &k[1]); /* evicted: planned again, evicting k[2] */
    expect_counts(&pc, 2, 5, 2, 3);
    get_ok(&pc, &k[3]);
    expect_counts(&pc, 3, 5, 2, 3);
    tfd_cache_stats s = stats_of(&pc);
    ck_assert_uint_eq(s.capacity, 3);
    ck_assert_uint_gt(s.bytes, 3 * sizeof(tfd_contract_plan) - 1);
    tfd_contract_cache_set_capacity(&pc, 1);
    expect_counts(&pc, 3, 5, 4, 1);
    get_ok(&pc, &k[3]); /* the newest survived */
    expect_counts(&pc, 4, 5, 4, 1);
    ck_assert_uint_eq(tfd_contract_cache_clear(&pc), 1);
    expect_counts(&pc, 4, 5, 4, 0);
    ck_assert_uint_eq(stats_of(&pc).bytes, 0);
    tfd_contract_cache_destroy(&pc);
}
END_TEST

/* Unbounded (capacity 0) keeps everything, growing its table. */
START_TEST(test_cache_unbounded) {
    tfd_contract_cache pc;
    ck_assert_int_eq(tfd_contract_cache_init(&pc, 0), 0);
    for (int i = 1; i <= 300; i++) {
        int64_t size[26];
        for (int l = 0; l < 26; l++) size[l] = 1 + i % 17;
        size['j' - 'a'] = 1 + i / 17;
        cc_case k;
        ck_assert_int_eq(cc_from_spec("ij,jk->ik", size, TF_F32, 0, 0, &k), TF_OK);
        get_ok(&pc, &k);
    }
    expect_counts(&pc, 0, 300, 0, 300);
    tfd_contract_cache_destroy(&pc);
}
END_TEST

/* What makes two contractions the same plan, and what does not. */
START_TEST(test_cache_keys) {
    tfd_contract_cache pc;
    ck_assert_int_eq(tfd_contract_cache_init(&pc, 64), 0);
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 4, NULL, 0, TF_C64, 0, 0)});
    get_ok(&pc, (cc_case[]){make_case("xy,yz->xz", 4, NULL, 0, TF_C64, 0, 0)});
    expect_counts(&pc, 1, 1, 0, 1); /* renamed labels: the same plan */
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 5, NULL, 0, TF_C64, 0, 0)});
    expect_counts(&pc, 1, 2, 0, 2); /* another shape */
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 4, NULL, 0, TF_C128, 0, 0)});
    expect_counts(&pc, 1, 3, 0, 3); /* another dtype */
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 4, NULL, 0, TF_C64, 1, 0)});
    expect_counts(&pc, 1, 4, 0, 4); /* conjugated */
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ca", 4, NULL, 0, TF_C64, 0, 0)});
    expect_counts(&pc, 1, 5, 0, 5); /* another output order */
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 4, NULL, 0, TF_F64, 0, 0)});
    get_ok(&pc, (cc_case[]){make_case("ab,bc->ac", 4, NULL, 0, TF_F64, 1, 1)});
    expect_counts(&pc, 2, 6, 0, 6); /* conjugation of a real dtype is no conjugation */
    /* A refused descriptor is answered typed and never cached. */
    cc_case bad = make_case("ab,bc->ac", 4, NULL, 0, TF_F64, 0, 0);
    bad.in[1].dtype = TF_F32;
    tfd_contract_plan p;
    char msg[256];
    ck_assert_int_eq(tfd_contract_cache_get(&pc, &bad.c, bad.in, NULL, &p, msg, sizeof msg),
                     TF_ERR_DTYPE);
    expect_counts(&pc, 2, 6, 0, 6);
    tfd_contract_cache_destroy(&pc);
}
END_TEST

/* Threads planning at once: exact counters, bounded entries, and the plans a direct build makes. */
#define THREADS 4
#define LOOKUPS 2000
#define DISTINCT 24

static tfd_contract_cache shared_cache;
static cc_case shared_cases[DISTINCT];
static tfd_contract_plan direct_plans[DISTINCT];

static int same_plan(const tfd_contract_plan *a, const tfd_contract_plan *b) {
    return memcmp(&a->gemm, &b->gemm, sizeof a->gemm) == 0 && a->to_temp == b->to_temp &&
           a->copied == b->copied && a->pre[0].active == b->pre[0].active &&
           a->pre[1].active == b->pre[1].active && a->post.numel == b->post.numel;
}

static void *planner_thread(void *arg) {
    uint64_t x = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < LOOKUPS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int which = (int)(x % DISTINCT);
        tfd_contract_plan p;
        char msg[256];
        if (tfd_contract_cache_get(&shared_cache, &shared_cases[which].c, shared_cases[which].in, NULL,
                               &p, msg, sizeof msg) != TF_OK ||
            !same_plan(&p, &direct_plans[which]))
            return (void *)1;
    }
    return NULL;
}

START_TEST(test_cache_threads) {
    ck_assert_int_eq(tfd_contract_cache_init(&shared_cache, DISTINCT / 2), 0);
    static const char *const specs[3] = {"abcd,cdef->aebf", "acbd,dcef->abef", "bij,bjk->bik"};
    for (int i = 0; i < DISTINCT; i++) {
        shared_cases[i] = make_case(specs[i % 3], 2 + i / 3, NULL, 0, TF_C128, i & 1, 0);
        direct_plans[i] = plan_of(&shared_cases[i]);
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, planner_thread, (void *)(uintptr_t)(i + 1)), 0);
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        ck_assert_msg(r == NULL, "thread %d got a wrong plan or an error", i);
    }
    tfd_cache_stats s = stats_of(&shared_cache);
    ck_assert_uint_eq(s.hits + s.misses, (uint64_t)THREADS * LOOKUPS);
    ck_assert_uint_le(s.entries, DISTINCT / 2);
    ck_assert_uint_gt(s.hits, 0);
    ck_assert_uint_gt(s.evictions, 0);
    tfd_contract_cache_destroy(&shared_cache);
}
END_TEST

static Suite *contract_plan_suite(void) {
    Suite *s = suite_create("contract-plan");
    TCase *tc = tcase_create("decomposition");
    tcase_add_test(tc, test_matmul_in_place);
    tcase_add_test(tc, test_transposes_in_place);
    tcase_add_test(tc, test_batched_in_place);
    tcase_add_test(tc, test_grouped_in_place);
    tcase_add_test(tc, test_permuted_operand);
    tcase_add_test(tc, test_output_permuted);
    tcase_add_test(tc, test_diagonal_in_place);
    tcase_add_test(tc, test_summed_label);
    tcase_add_test(tc, test_elementwise_in_place);
    tcase_add_test(tc, test_conjugation);
    tcase_add_test(tc, test_unary_passes);
    tcase_add_test(tc, test_planner_refuses);
    tcase_add_test(tc, test_random_plans_valid);
    suite_add_tcase(s, tc);
    TCase *cache = tcase_create("cache");
    tcase_set_timeout(cache, 60);
    tcase_add_test(cache, test_cache_lru);
    tcase_add_test(cache, test_cache_unbounded);
    tcase_add_test(cache, test_cache_keys);
    tcase_add_test(cache, test_cache_threads);
    suite_add_tcase(s, cache);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(contract_plan_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
