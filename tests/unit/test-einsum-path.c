/*
 * Unit tests of the einsum path (client/einsum-path.c) and its report
 * (client/einsum-report.c).
 *
 * Known cases with hand-computed costs: one matrix product (2 flops per
 * combination of labels in a real dtype, 8 in a complex one), the classic
 * matrix chain where greedy and optimal agree, a matrix-matrix-vector chain
 * where left-to-right pays 50 times more, a case where greedy pays 2.7 times
 * what optimal does, single-operand steps (trace, diagonal, sum, permutation) and the
 * naive counts. The rank limit: left-to-right refused where greedy and
 * optimal find an order of rank-8 intermediates, greedy stuck and replaced by
 * the exhaustive search, and an expression whose every order needs rank 12,
 * refused by all three. The lowering: labels
 * renumbered in order of appearance, diagonals kept as repeated labels,
 * broadcast size-1 axes given labels of their own, the output in the
 * expression's order, and the conjugation mask mapped onto the step that
 * first reads each operand (and ignored for real dtypes).
 *
 * Random expressions, from a fixed seed: optimal is never worse than greedy
 * or left-to-right, every intermediate stays within rank 8, and a loopback
 * evaluates each path step by step with a plain contraction written here and
 * compares it with one loop nest over the whole expression, for every order
 * and with conjugated operands: the decomposition, not the daemon, is what
 * is tested.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/einsum-path.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))

static const tf_einsum_optimize all_methods[3] = {TF_EINSUM_GREEDY, TF_EINSUM_OPTIMAL,
                                                  TF_EINSUM_LEFT_TO_RIGHT};

/* Builds operand metadata of dtype dt from "2x3,3x4" ("" or "s" for a scalar). */
static int metas_of(tf_dtype dt, const char *shapes, tf__meta *m) {
    int n = 0;
    const char *p = shapes;
    for (;;) {
        memset(&m[n], 0, sizeof m[n]);
        m[n].dtype = dt;
        while (*p && *p != ',') {
            if (*p == 's' || *p == 'x') {
                p++;
                continue;
            }
            m[n].shape[m[n].rank++] = strtoll(p, (char **)&p, 10);
        }
        n++;
        if (!*p) return n;
        p++;
    }
}

/* Parses an expression or fails the test. */
static void parse(const char *sub, tf_dtype dt, const char *shapes, tf__einsum *e) {
    tf__meta m[TF__EINSUM_MAX_OPERANDS];
    int n = metas_of(dt, shapes, m);
    char msg[256];
    tf_status st = tf__einsum_parse(sub, strlen(sub), n, m, e, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "'%s' on %s: %s", sub, shapes, msg);
}

/* Finds a path or fails the test. */
static void find(const tf__einsum *e, tf_einsum_optimize how, tf__einsum_path *p) {
    char msg[256];
    tf_status st = tf__einsum_path_find(e, how, p, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "path %d: %s", (int)how, msg);
}

/* ---- known cases ---- */

typedef struct known_case {
    const char *sub;
    tf_dtype dt;
    const char *shapes;
    tf_einsum_optimize how;
    const char *pairs; /* "0,1 3,2": the steps' operands */
    double flops, naive;
    int64_t largest;
    tf_einsum_optimize ran; /* the method the path reports */
} known_case;

static const known_case known_cases[] = {
    /* 2x3x4 combinations, one multiply and one add each (6 and 2 flops in complex). */
    {"ij,jk->ik", TF_F64, "2x3,3x4", TF_EINSUM_GREEDY, "0,1", 48, 48, 8, TF_EINSUM_GREEDY},
    {"ij,jk->ik", TF_C64, "2x3,3x4", TF_EINSUM_OPTIMAL, "0,1", 192, 192, 8, TF_EINSUM_OPTIMAL},
    /*
     * i=10 j=100 k=5 l=50: (ij,jk) loops 5000, then (ik,kl) 2500, 15000 flops in all; the
     * other trees cost 150000 and more. Naive: 250000 combinations x (2 multiplies + 1 add).
     */
    {"ij,jk,kl->il", TF_F32, "10x100,100x5,5x50", TF_EINSUM_GREEDY, "0,1 2,3", 15000, 750000,
     500, TF_EINSUM_GREEDY},
    {"ij,jk,kl->il", TF_F32, "10x100,100x5,5x50", TF_EINSUM_OPTIMAL, "0,1 3,2", 15000, 750000,
     500, TF_EINSUM_OPTIMAL},
    {"ij,jk,kl->il", TF_F32, "10x100,100x5,5x50", TF_EINSUM_LEFT_TO_RIGHT, "0,1 3,2", 15000,
     750000, 500, TF_EINSUM_LEFT_TO_RIGHT},
    /*
     * Matrix, matrix, vector, all 100: left to right makes the matrix product first
     * (10^6 combinations, 2e6 flops, then 2e4); greedy and optimal take the matrix-vector
     * products (2e4 each). Naive: 10^6 x 3. Greedy's result joins the end of the list.
     */
    {"ij,jk,k->i", TF_F64, "100x100,100x100,100", TF_EINSUM_LEFT_TO_RIGHT, "0,1 3,2", 2020000,
     3e6, 10000, TF_EINSUM_LEFT_TO_RIGHT},
    {"ij,jk,k->i", TF_F64, "100x100,100x100,100", TF_EINSUM_GREEDY, "1,2 0,3", 40000, 3e6, 100,
     TF_EINSUM_GREEDY},
    {"ij,jk,k->i", TF_F64, "100x100,100x100,100", TF_EINSUM_OPTIMAL, "1,2 0,3", 40000, 3e6, 100,
     TF_EINSUM_OPTIMAL},
    /*
     * Greedy worse than optimal: d=8 a=6 c=4. Greedy takes (da,cd), which shrinks 48+32
     * to 24 (grows -56; (da,a) grows only 8-48-6 = -46): loops dac 192, then (ac,a) 24,
     * 432 flops. Optimal takes (da,a) first: loops da 48, then (d,cd) 32, 160 flops.
     * Naive: 192 x 3.
     */
    {"da,cd,a->c", TF_F64, "8x6,4x8,6", TF_EINSUM_GREEDY, "0,1 2,3", 432, 576, 24,
     TF_EINSUM_GREEDY},
    {"da,cd,a->c", TF_F64, "8x6,4x8,6", TF_EINSUM_OPTIMAL, "0,2 3,1", 160, 576, 8,
     TF_EINSUM_OPTIMAL},
    {"da,cd,a->c", TF_F64, "8x6,4x8,6", TF_EINSUM_LEFT_TO_RIGHT, "0,1 3,2", 432, 576, 24,
     TF_EINSUM_LEFT_TO_RIGHT},
    /* One operand: one step with one add per combination of its labels. */
    {"ii->", TF_F64, "5x5", TF_EINSUM_GREEDY, "0", 5, 5, 1, TF_EINSUM_GREEDY},
    {"ii->i", TF_C128, "5x5", TF_EINSUM_GREEDY, "0", 10, 10, 5, TF_EINSUM_GREEDY},
    {"ij->", TF_F32, "3x4", TF_EINSUM_OPTIMAL, "0", 12, 12, 1, TF_EINSUM_OPTIMAL},
    {"ij->ji", TF_F32, "3x4", TF_EINSUM_LEFT_TO_RIGHT, "0", 12, 12, 12, TF_EINSUM_LEFT_TO_RIGHT},
    /* i=2 j=3: (j,ij) keeps i, grows 2-3-6 = -7, better than (i,ij)'s 3-2-6 = -5. */
    {"i,j,ij->", TF_F64, "2,3,2x3", TF_EINSUM_GREEDY, "1,2 0,3", 16, 18, 2, TF_EINSUM_GREEDY},
    /* Optimal beyond its limit is greedy: 11 operands, 10 steps of 2 x 2 flops; naive 2 x 11. */
    {"a,a,a,a,a,a,a,a,a,a,a->a", TF_F64, "2,2,2,2,2,2,2,2,2,2,2", TF_EINSUM_OPTIMAL,
     "0,1 2,3 4,5 6,7 8,9 10,11 12,13 14,15 16,17 18,19", 40, 22, 2, TF_EINSUM_GREEDY},
};

/* Writes a path's operand pairs as "0,1 3,2". */
static void pairs_of(const tf__einsum_path *p, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int s = 0; s < p->n_steps && k < n; s++) {
        if (p->step[s].b < 0)
            k += (size_t)snprintf(buf + k, n - k, "%s%d", s ? " " : "", p->step[s].a);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%d,%d", s ? " " : "", p->step[s].a,
                                  p->step[s].b);
    }
}

START_TEST(test_known) {
    const known_case *kc = &known_cases[_i];
    tf__einsum e;
    tf__einsum_path p;
    parse(kc->sub, kc->dt, kc->shapes, &e);
    find(&e, kc->how, &p);
    char pairs[256];
    pairs_of(&p, pairs, sizeof pairs);
    ck_assert_msg(strcmp(pairs, kc->pairs) == 0, "'%s' (%d): steps %s, expected %s", kc->sub,
                  (int)kc->how, pairs, kc->pairs);
    ck_assert_msg(p.flops == kc->flops, "'%s' (%d): %g flops, expected %g", kc->sub, (int)kc->how,
                  p.flops, kc->flops);
    ck_assert_msg(p.naive_flops == kc->naive, "'%s': naive %g, expected %g", kc->sub,
                  p.naive_flops, kc->naive);
    ck_assert_int_eq(p.largest, kc->largest);
    ck_assert_int_eq(p.method, kc->ran);
}
END_TEST

/* ---- the rank limit ---- */

/* Left-to-right would make a rank-10 outer product first; the others pair the twins. */
START_TEST(test_rank_limit_avoided) {
    tf__einsum e;
    tf__einsum_path p;
    char msg[256];
    parse("abcde,fghij,abcde,fghij->", TF_F64, "2x1x2x1x2,1x2x1x2x1,2x1x2x1x2,1x2x1x2x1", &e);
    ck_assert_int_eq(tf__einsum_path_find(&e, TF_EINSUM_LEFT_TO_RIGHT, &p, msg, sizeof msg),
                     TF_ERR_BAD_SHAPE);
    ck_assert_ptr_nonnull(strstr(msg, "left-to-right"));
    for (int m = 0; m < 2; m++) {
        find(&e, all_methods[m], &p);
        ck_assert_int_eq(p.n_steps, 3);
        for (int s = 0; s < p.n_steps; s++)
            ck_assert_int_le(__builtin_popcountll(p.step[s].labels), TF_MAX_RANK);
    }
}
END_TEST

/*
 * Greedy's choices can leave only pairs whose results pass rank 8 where another
 * order exists (a case the random search found): the exhaustive search then
 * runs instead and says so.
 */
START_TEST(test_greedy_stuck_falls_back) {
    tf__einsum e;
    tf__einsum_path p;
    parse("jahgfb,lga,lbgcdeh,bdjhiea,ilcfeha->", TF_F64,
          "1x2x2x3x1x1,2x3x2,2x1x3x3x2x1x2,1x2x1x2x1x1x2,1x2x3x1x1x2x2", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    ck_assert_int_eq(p.method, TF_EINSUM_OPTIMAL);
    ck_assert_int_eq(p.n_steps, 4);
    for (int s = 0; s < p.n_steps; s++)
        ck_assert_int_le(__builtin_popcountll(p.step[s].labels), TF_MAX_RANK);
}
END_TEST

/*
 * Five operands, every pair of them sharing two labels: each operand has rank 8 and
 * any first pair keeps 12 labels. No order exists; all three refuse.
 */
START_TEST(test_rank_limit_refused) {
    char terms[5][9] = {{0}};
    int len[5] = {0};
    char next = 'a';
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            for (int k = 0; k < 2; k++, next++) {
                terms[i][len[i]++] = next;
                terms[j][len[j]++] = next;
            }
    char sub[64];
    snprintf(sub, sizeof sub, "%s,%s,%s,%s,%s->", terms[0], terms[1], terms[2], terms[3],
             terms[4]);
    tf__einsum e;
    parse(sub, TF_F32, "2x2x2x2x2x2x2x2,2x2x2x2x2x2x2x2,2x2x2x2x2x2x2x2,2x2x2x2x2x2x2x2,"
                       "2x2x2x2x2x2x2x2", &e);
    for (int m = 0; m < 3; m++) {
        tf__einsum_path p;
        char msg[256] = "";
        ck_assert_int_eq(tf__einsum_path_find(&e, all_methods[m], &p, msg, sizeof msg),
                         TF_ERR_BAD_SHAPE);
        ck_assert_msg(strstr(msg, "rank 8"), "message: %s", msg);
    }
}
END_TEST

/* An output of more than 2^40 elements is refused before any search. */
START_TEST(test_output_too_large) {
    tf__einsum e;
    tf__einsum_path p;
    char msg[256];
    parse("a,b,c,d->abcd", TF_F32, "1100,1100,1100,1100", &e);
    ck_assert_int_eq(tf__einsum_path_find(&e, TF_EINSUM_GREEDY, &p, msg, sizeof msg),
                     TF_ERR_BAD_SHAPE);
    ck_assert_ptr_nonnull(strstr(msg, "2^40"));
    ck_assert_int_eq(tf__einsum_path_find(&e, (tf_einsum_optimize)7, &p, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
}
END_TEST

/* ---- lowering ---- */

/* Asserts a contraction's labels: "001,12->02" (wire labels as digits; ",->" for none). */
static void expect_labels(const tf__contraction *c, const char *want) {
    char got[64];
    size_t k = 0;
    for (int x = 0; x < c->n_inputs; x++) {
        if (x) got[k++] = ',';
        for (int a = 0; a < c->rank[x]; a++) got[k++] = (char)('a' + c->labels[x][a]);
    }
    got[k++] = '-';
    got[k++] = '>';
    for (int a = 0; a < c->out_rank; a++) got[k++] = (char)('a' + c->out[a]);
    got[k] = '\0';
    ck_assert_msg(strcmp(got, want) == 0, "labels %s, expected %s", got, want);
}

START_TEST(test_lowering) {
    tf__einsum e;
    tf__einsum_path p;
    tf__contraction c;
    tf__meta out;
    /* A diagonal stays a repeated label; the daemon takes it. */
    parse("iij,jk->ik", TF_F64, "2x2x3,3x4", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    tf__einsum_step_contraction(&e, &p, 0, 0, &c, &out);
    ck_assert_int_eq(c.n_inputs, 2);
    expect_labels(&c, "aab,bc->ac");
    ck_assert_int_eq(out.rank, 2);
    ck_assert_int_eq(out.shape[0], 2);
    ck_assert_int_eq(out.shape[1], 4);
    ck_assert_int_eq(out.dtype, TF_F64);
    /* Ellipsis dimensions are labels; a broadcast size-1 axis gets one of its own. */
    parse("...ij,...jk->...ik", TF_C64, "2x3x4,5x1x4x6", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    tf__einsum_step_contraction(&e, &p, 0, 0, &c, &out);
    expect_labels(&c, "abc,decf->dabf"); /* 1ij, 0_jk -> 01ik */
    ck_assert_int_eq(out.rank, 4);
    int64_t want[4] = {5, 2, 3, 6};
    for (int a = 0; a < 4; a++) ck_assert_int_eq(out.shape[a], want[a]);
    /* One operand: one unary step in the output's order. */
    parse("ijk->kji", TF_F32, "2x3x4", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    ck_assert_int_eq(p.n_steps, 1);
    tf__einsum_step_contraction(&e, &p, 0, 0, &c, &out);
    ck_assert_int_eq(c.n_inputs, 1);
    expect_labels(&c, "abc->cba");
    parse("ii->", TF_F32, "3x3", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    tf__einsum_step_contraction(&e, &p, 0, 0, &c, &out);
    expect_labels(&c, "aa->");
    ck_assert_int_eq(out.rank, 0);
    /* An intermediate's axes are in label order; the last step's in the output's. */
    parse("kj,ji,il->lk", TF_F64, "2x3,3x4,4x5", &e);
    find(&e, TF_EINSUM_LEFT_TO_RIGHT, &p);
    tf__einsum_step_contraction(&e, &p, 0, 0, &c, &out);
    expect_labels(&c, "ab,bc->ca"); /* kj,ji -> ik (i < k) */
    tf__einsum_step_contraction(&e, &p, 1, 0, &c, &out);
    expect_labels(&c, "ab,ac->cb"); /* ik,il -> lk */
    ck_assert_int_eq(out.shape[0], 5);
    ck_assert_int_eq(out.shape[1], 2);
}
END_TEST

/* The conjugation mask lands on the step that first reads each operand, complex only. */
START_TEST(test_conj_mapping) {
    tf__einsum e;
    tf__einsum_path p;
    tf__contraction c;
    tf__meta out;
    parse("ij,jk,kl->il", TF_C128, "10x100,100x5,5x50", &e);
    find(&e, TF_EINSUM_GREEDY, &p); /* (0,1), then operand 2 with that result (3) */
    const uint64_t mask = 0x5;      /* operands 0 and 2 */
    tf__einsum_step_contraction(&e, &p, 0, mask, &c, &out);
    ck_assert_int_eq(c.conj[0], 1);
    ck_assert_int_eq(c.conj[1], 0);
    tf__einsum_step_contraction(&e, &p, 1, mask, &c, &out);
    ck_assert_int_eq(p.step[1].a, 2);
    ck_assert_int_eq(p.step[1].b, 3);
    ck_assert_int_eq(c.conj[0], 1);
    ck_assert_int_eq(c.conj[1], 0); /* the intermediate: its conjugate was taken where it was made */
    /* The other way round: operand 2 read first. */
    parse("ij,jk,k->i", TF_C64, "100x100,100x100,100", &e);
    find(&e, TF_EINSUM_GREEDY, &p); /* (1,2) then (0,3) */
    tf__einsum_step_contraction(&e, &p, 0, 0x4, &c, &out);
    ck_assert_int_eq(c.conj[0], 0);
    ck_assert_int_eq(c.conj[1], 1);
    tf__einsum_step_contraction(&e, &p, 1, 0x4, &c, &out);
    ck_assert_int_eq(c.conj[0] + c.conj[1], 0);
    /* Real dtypes ignore the mask. */
    parse("ij,jk,kl->il", TF_F64, "10x100,100x5,5x50", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    for (int s = 0; s < p.n_steps; s++) {
        tf__einsum_step_contraction(&e, &p, s, 0x7, &c, &out);
        ck_assert_int_eq(c.conj[0] + c.conj[1], 0);
    }
    /* A single operand. */
    parse("ii->", TF_C64, "3x3", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    tf__einsum_step_contraction(&e, &p, 0, 0x1, &c, &out);
    ck_assert_int_eq(c.conj[0], 1);
}
END_TEST

/* ---- the report ---- */

START_TEST(test_report) {
    tf__einsum e;
    tf__einsum_path p;
    parse("ij,jk,kl->il", TF_F32, "10x100,100x5,5x50", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    tf_einsum_path_info *info = tf__einsum_report(&e, &p);
    ck_assert_ptr_nonnull(info);
    ck_assert_int_eq(info->n_operands, 3);
    ck_assert_int_eq(info->n_steps, 2);
    ck_assert_int_eq(info->optimize, TF_EINSUM_GREEDY);
    ck_assert(info->flops == 15000);
    ck_assert(info->naive_flops == 750000);
    ck_assert_int_eq(info->largest_intermediate, 500);
    ck_assert_int_eq(info->steps[0].a, 0);
    ck_assert_int_eq(info->steps[0].b, 1);
    ck_assert_int_eq(info->steps[0].scaling, 3);
    ck_assert_int_eq(info->steps[0].elements, 50);
    ck_assert(info->steps[0].flops == 10000);
    ck_assert_str_eq(info->steps[0].subscripts, "ij,jk->ik");
    ck_assert_str_eq(info->steps[1].subscripts, "kl,ik->il");
    ck_assert_ptr_nonnull(strstr(info->report, "greedy"));
    ck_assert_ptr_nonnull(strstr(info->report, "ij,jk,kl->il"));
    ck_assert_ptr_nonnull(strstr(info->report, "kl,ik->il"));
    ck_assert_ptr_nonnull(strstr(info->report, "1.5e+04"));
    ck_assert_ptr_nonnull(strstr(info->report, "7.5e+05"));
    free((char *)info->report);
    free(info);
    /* Ellipsis dimensions print as digits, broadcast axes as '_'; one operand has b = -1. */
    parse("...ij,...jk->...ik", TF_C64, "2x3x4,5x1x4x6", &e);
    find(&e, TF_EINSUM_OPTIMAL, &p);
    info = tf__einsum_report(&e, &p);
    ck_assert_ptr_nonnull(info);
    ck_assert_str_eq(info->steps[0].subscripts, "1ij,0_jk->01ik");
    free((char *)info->report);
    free(info);
    parse("ii->i", TF_F64, "4x4", &e);
    find(&e, TF_EINSUM_GREEDY, &p);
    info = tf__einsum_report(&e, &p);
    ck_assert_ptr_nonnull(info);
    ck_assert_int_eq(info->steps[0].b, -1);
    ck_assert_str_eq(info->steps[0].subscripts, "ii->i");
    free((char *)info->report);
    free(info);
}
END_TEST

/* ---- random expressions ---- */

static uint64_t rng_state;

static unsigned rnd(unsigned n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (unsigned)(rng_state % n);
}

/* A random expression: its string and the shapes of its operands. */
typedef struct random_expr {
    char sub[256];
    int n;
    tf__meta ops[6];
} random_expr;

/*
 * Draws an expression over letters a..h (sizes up to max_size, loop space
 * kept below max_space when max_space > 0): 1..6 operands of 0..5 axes
 * with repeats, sometimes an ellipsis of up to 2 broadcast dimensions, an
 * implicit or explicit output.
 */
static void draw(random_expr *r, tf_dtype dt, int max_size, double max_space) {
    static const char letters[] = "abcdefgh";
    int64_t size[8];
    for (;;) {
        double space = 1;
        for (int l = 0; l < 8; l++) size[l] = 1 + rnd((unsigned)max_size);
        int n_ell = rnd(3) == 0 ? 1 + (int)rnd(2) : 0;
        int64_t ell[2] = {1 + rnd(3), 1 + rnd(3)};
        r->n = 1 + (int)rnd(6);
        size_t k = 0;
        int used[8] = {0};
        int ell_used = 0;
        for (int i = 0; i < r->n; i++) {
            tf__meta *m = &r->ops[i];
            memset(m, 0, sizeof *m);
            m->dtype = dt;
            if (i) r->sub[k++] = ',';
            int k_ell = n_ell && rnd(2) ? (int)rnd((unsigned)n_ell + 1) : -1;
            if (k_ell >= 0) {
                k += (size_t)sprintf(r->sub + k, "...");
                ell_used |= k_ell > 0;
                for (int d = 0; d < k_ell; d++)
                    m->shape[m->rank++] = rnd(4) == 0 ? 1 : ell[n_ell - k_ell + d];
            }
            int axes = (int)rnd(6);
            if (axes + m->rank > 6) axes = 6 - m->rank;
            for (int a = 0; a < axes; a++) {
                int l = (int)rnd(8);
                used[l] = 1;
                r->sub[k++] = letters[l];
                m->shape[m->rank++] = size[l];
            }
        }
        for (int l = 0; l < 8; l++)
            if (used[l]) space *= (double)size[l];
        for (int d = 0; d < n_ell; d++) space *= (double)ell[d];
        if (max_space > 0 && space > max_space) continue;
        if (rnd(3)) {
            k += (size_t)sprintf(r->sub + k, "->");
            if (ell_used || rnd(2)) k += (size_t)sprintf(r->sub + k, "...");
            for (int l = 0; l < 8; l++)
                if (used[l] && rnd(2)) r->sub[k++] = letters[l];
        }
        r->sub[k] = '\0';
        return;
    }
}

/* Parses a random expression; 0 when it is one the parser refuses (an output of rank > 8). */
static int parse_random(const random_expr *r, tf__einsum *e) {
    char msg[256];
    tf_status st = tf__einsum_parse(r->sub, strlen(r->sub), r->n, r->ops, e, msg, sizeof msg);
    if (st == TF_ERR_BAD_SHAPE) return 0;
    ck_assert_msg(st == TF_OK, "'%s': %s", r->sub, msg);
    return 1;
}

/* Optimal is never worse than greedy or left-to-right; every intermediate stays within rank 8. */
START_TEST(test_optimal_not_worse) {
    rng_state = 0x9e3779b97f4a7c15ull;
    int compared = 0, strictly = 0;
    for (int t = 0; t < 3000; t++) {
        random_expr r;
        draw(&r, t % 2 ? TF_F64 : TF_C64, 30, 0);
        tf__einsum e;
        if (!parse_random(&r, &e)) continue;
        tf__einsum_path p[3];
        tf_status st[3];
        char msg[256];
        for (int m = 0; m < 3; m++) {
            st[m] = tf__einsum_path_find(&e, all_methods[m], &p[m], msg, sizeof msg);
            ck_assert_msg(st[m] == TF_OK || st[m] == TF_ERR_BAD_SHAPE, "'%s': %s", r.sub, msg);
            if (st[m] != TF_OK) continue;
            ck_assert_int_eq(p[m].n_steps, e.n_operands == 1 ? 1 : e.n_operands - 1);
            for (int s = 0; s < p[m].n_steps; s++)
                ck_assert_int_le(__builtin_popcountll(p[m].step[s].labels), TF_MAX_RANK);
        }
        /* Greedy finds an order whenever one exists (it falls back to the search). */
        ck_assert_int_eq(st[0], st[1]);
        if (st[1] != TF_OK) continue;
        ck_assert_msg(p[1].flops <= p[0].flops * (1 + 1e-12), "'%s': optimal %g > greedy %g",
                      r.sub, p[1].flops, p[0].flops);
        if (st[2] == TF_OK)
            ck_assert_msg(p[1].flops <= p[2].flops * (1 + 1e-12),
                          "'%s': optimal %g > left-to-right %g", r.sub, p[1].flops, p[2].flops);
        compared++;
        strictly += p[1].flops < p[0].flops;
    }
    ck_assert_int_gt(compared, 2000);
    ck_assert_int_gt(strictly, 0); /* greedy is a heuristic: the search must sometimes beat it */
}
END_TEST

/* Row-major strides of a shape. */
static void strides_of(int rank, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int a = rank - 1; a >= 0; a--) {
        stride[a] = s;
        s *= shape[a];
    }
}

static int64_t numel(int rank, const int64_t *shape) {
    int64_t n = 1;
    for (int a = 0; a < rank; a++) n *= shape[a];
    return n;
}

/*
 * One contraction as the daemon must run it, by a loop over every
 * combination of its wire labels: out[labels_out] += a[labels_a] *
 * b[labels_b], with the conjugates it asks for.
 */
static void run_contraction(const tf__contraction *c, const tf__meta *in, double complex *const *x,
                            const tf__meta *out_meta, double complex *out) {
    int64_t size[TF__MAX_LABELS] = {0};
    int64_t stride[3][TF_MAX_RANK];
    for (int i = 0; i < c->n_inputs; i++) {
        strides_of(in[i].rank, in[i].shape, stride[i]);
        for (int a = 0; a < c->rank[i]; a++) size[c->labels[i][a]] = in[i].shape[a];
    }
    strides_of(out_meta->rank, out_meta->shape, stride[2]);
    memset(out, 0, sizeof *out * (size_t)numel(out_meta->rank, out_meta->shape));
    int labels[TF__MAX_LABELS], n = 0;
    for (int l = 0; l < TF__MAX_LABELS; l++)
        if (size[l]) labels[n++] = l;
    int64_t idx[TF__MAX_LABELS] = {0};
    for (;;) {
        double complex term = 1;
        for (int i = 0; i < c->n_inputs; i++) {
            int64_t off = 0;
            for (int a = 0; a < c->rank[i]; a++) off += idx[c->labels[i][a]] * stride[i][a];
            term *= c->conj[i] ? conj(x[i][off]) : x[i][off];
        }
        int64_t off = 0;
        for (int a = 0; a < c->out_rank; a++) off += idx[c->out[a]] * stride[2][a];
        out[off] += term;
        int d = n - 1;
        while (d >= 0 && ++idx[labels[d]] == size[labels[d]]) idx[labels[d--]] = 0;
        if (d < 0) break;
    }
}

/* The whole expression as one loop nest over its labels (broadcast axes read index 0). */
static void run_direct(const tf__einsum *e, uint64_t conj_mask, const tf__meta *ops,
                       double complex *const *x, double complex *out) {
    int64_t stride[TF__EINSUM_MAX_OPERANDS][TF_MAX_RANK], ostride[TF_MAX_RANK], oshape[TF_MAX_RANK];
    for (int i = 0; i < e->n_operands; i++) strides_of(ops[i].rank, ops[i].shape, stride[i]);
    for (int a = 0; a < e->out.rank; a++) oshape[a] = e->size[e->out.labels[a]];
    strides_of(e->out.rank, oshape, ostride);
    memset(out, 0, sizeof *out * (size_t)numel(e->out.rank, oshape));
    int labels[TF__EINSUM_N_LABELS], n = 0;
    for (int l = 0; l < TF__EINSUM_N_LABELS; l++)
        if (e->size[l]) labels[n++] = l;
    int64_t idx[TF__EINSUM_N_LABELS + 1] = {0}; /* idx[N_LABELS]: broadcast axes, always 0 */
    for (;;) {
        double complex term = 1;
        for (int i = 0; i < e->n_operands; i++) {
            int64_t off = 0;
            for (int a = 0; a < e->in[i].rank; a++) {
                unsigned l = e->in[i].labels[a];
                off += idx[l == TF__EINSUM_BROADCAST ? TF__EINSUM_N_LABELS : l] * stride[i][a];
            }
            term *= (conj_mask >> i) & 1 && (e->dtype == TF_C64 || e->dtype == TF_C128)
                        ? conj(x[i][off])
                        : x[i][off];
        }
        int64_t off = 0;
        for (int a = 0; a < e->out.rank; a++) off += idx[e->out.labels[a]] * ostride[a];
        out[off] += term;
        int d = n - 1;
        while (d >= 0 && ++idx[labels[d]] == e->size[labels[d]]) idx[labels[d--]] = 0;
        if (d < 0) break;
    }
}

/*
 * The loopback: every path of random expressions evaluated step by step
 * through its OP_CONTRACT descriptors, against the expression in one loop nest.
 */
START_TEST(test_loopback) {
    rng_state = 0x2545f4914f6cdd1dull;
    int evaluated = 0;
    for (int t = 0; t < 400; t++) {
        random_expr r;
        tf_dtype dt = t % 4 == 0 ? TF_F64 : TF_C128;
        draw(&r, dt, 4, 3000);
        tf__einsum e;
        if (!parse_random(&r, &e)) continue;
        double complex *x[TF__EINSUM_MAX_OPERANDS + TF__EINSUM_MAX_OPERANDS];
        tf__meta meta[2 * TF__EINSUM_MAX_OPERANDS];
        for (int i = 0; i < r.n; i++) {
            meta[i] = r.ops[i];
            int64_t n = numel(r.ops[i].rank, r.ops[i].shape);
            x[i] = malloc(sizeof **x * (size_t)n);
            for (int64_t k = 0; k < n; k++)
                x[i][k] = CMPLX(rnd(2001) / 1000.0 - 1, dt == TF_C128 ? rnd(2001) / 1000.0 - 1 : 0);
        }
        uint64_t mask = rnd(1u << r.n);
        int64_t oshape[TF_MAX_RANK];
        for (int a = 0; a < e.out.rank; a++) oshape[a] = e.size[e.out.labels[a]];
        int64_t n_out = numel(e.out.rank, oshape);
        double complex *want = malloc(sizeof *want * (size_t)n_out);
        run_direct(&e, mask, r.ops, x, want);
        for (int m = 0; m < 3; m++) {
            tf__einsum_path p;
            char msg[256];
            if (tf__einsum_path_find(&e, all_methods[m], &p, msg, sizeof msg) != TF_OK) continue;
            for (int s = 0; s < p.n_steps; s++) {
                tf__contraction c;
                int id = r.n + s;
                tf__einsum_step_contraction(&e, &p, s, mask, &c, &meta[id]);
                tf__meta in[2] = {meta[p.step[s].a], p.step[s].b >= 0 ? meta[p.step[s].b] : meta[0]};
                double complex *xs[2] = {x[p.step[s].a], p.step[s].b >= 0 ? x[p.step[s].b] : NULL};
                x[id] = malloc(sizeof **x * (size_t)numel(meta[id].rank, meta[id].shape));
                run_contraction(&c, in, xs, &meta[id], x[id]);
            }
            double complex *got = x[r.n + p.n_steps - 1];
            ck_assert_int_eq(meta[r.n + p.n_steps - 1].rank, e.out.rank);
            for (int64_t k = 0; k < n_out; k++)
                ck_assert_msg(cabs(got[k] - want[k]) <= 1e-9 * (1 + cabs(want[k])),
                              "'%s' (method %d, conj 0x%llx): element %lld is %g%+gi, expected "
                              "%g%+gi",
                              r.sub, m, (unsigned long long)mask, (long long)k, creal(got[k]),
                              cimag(got[k]), creal(want[k]), cimag(want[k]));
            for (int s = 0; s < p.n_steps; s++) free(x[r.n + s]);
            evaluated++;
        }
        for (int i = 0; i < r.n; i++) free(x[i]);
        free(want);
    }
    ck_assert_int_gt(evaluated, 1000);
}
END_TEST

static Suite *einsum_path_suite(void) {
    Suite *s = suite_create("einsum-path");
    TCase *tc = tcase_create("einsum-path");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, test_known, 0, N_OF(known_cases));
    tcase_add_test(tc, test_rank_limit_avoided);
    tcase_add_test(tc, test_greedy_stuck_falls_back);
    tcase_add_test(tc, test_rank_limit_refused);
    tcase_add_test(tc, test_output_too_large);
    tcase_add_test(tc, test_lowering);
    tcase_add_test(tc, test_conj_mapping);
    tcase_add_test(tc, test_report);
    tcase_add_test(tc, test_optimal_not_worse);
    tcase_add_test(tc, test_loopback);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(einsum_path_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
