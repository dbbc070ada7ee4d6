/*
 * Unit tests of the contraction rules (common/contract-rules.c).
 *
 * The client library and the daemon both decide with tf__infer_contract
 * whether a contraction descriptor fits its tensors and what the output
 * looks like: a wrong rule either refuses a valid einsum or hands the
 * planner labels it cannot serve. Two tables drive the tests: valid
 * contractions (binary with batch, contracted, free and summed labels,
 * diagonals, unary permute/trace/diagonal/sum, rank 0, every dtype) with
 * the exact output metadata they must produce, and invalid ones with the
 * typed status and a word the message must contain (input count, label
 * count against rank, label >= 64, a label bound to two sizes, an output
 * label twice or on no input, too many output labels, mixed dtypes, bad
 * shapes, an output beyond 2^40 elements).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"

/* Label lists literal: L(n, labels...). */
#define L(n, ...) n, {__VA_ARGS__}
#define NONE 0, {0}
#define M(dt, r, ...) {dt, r, {__VA_ARGS__}}
#define NO_META {(tf_dtype)0, 0, {0}}

/* One call of tf__infer_contract and what it must answer. */
typedef struct contract_case {
    const char *what;
    int n_inputs;
    int rank_a;
    uint8_t a[TF_MAX_RANK];
    int rank_b;
    uint8_t b[TF_MAX_RANK];
    int rank_out;
    uint8_t out[TF_MAX_RANK];
    tf__meta in[2];
    tf_status expect;
    tf__meta result;    /* when expect == TF_OK */
    const char *needle; /* when expect != TF_OK: a word of the message */
} contract_case;

enum { I = 0, J, K, B, A2, C2, D2, E2, F2 };

static const contract_case valid_cases[] = {
    {"matmul ij,jk->ik", 2, L(2, I, J), L(2, J, K), L(2, I, K),
     {M(TF_F64, 2, 3, 4), M(TF_F64, 2, 4, 5)}, TF_OK, M(TF_F64, 2, 3, 5), NULL},
    {"batched bij,bjk->bik", 2, L(3, B, I, J), L(3, B, J, K), L(3, B, I, K),
     {M(TF_F32, 3, 2, 3, 4), M(TF_F32, 3, 2, 4, 5)}, TF_OK, M(TF_F32, 3, 2, 3, 5), NULL},
    {"output order aebf", 2, L(4, A2, B, C2, D2), L(4, C2, D2, E2, F2), L(4, A2, E2, B, F2),
     {M(TF_C128, 4, 2, 3, 4, 5), M(TF_C128, 4, 4, 5, 6, 7)}, TF_OK,
     M(TF_C128, 4, 2, 6, 3, 7), NULL},
    {"summed labels ij,jk->", 2, L(2, I, J), L(2, J, K), NONE,
     {M(TF_C64, 2, 2, 3), M(TF_C64, 2, 3, 4)}, TF_OK, M(TF_C64, 0, 0), NULL},
    {"diagonal iij,jk->ik", 2, L(3, I, I, J), L(2, J, K), L(2, I, K),
     {M(TF_F64, 3, 3, 3, 2), M(TF_F64, 2, 2, 5)}, TF_OK, M(TF_F64, 2, 3, 5), NULL},
    {"outer i,j->ji", 2, L(1, I), L(1, J), L(2, J, I), {M(TF_F32, 1, 4), M(TF_F32, 1, 6)},
     TF_OK, M(TF_F32, 2, 6, 4), NULL},
    {"scalars ,->", 2, NONE, NONE, NONE, {M(TF_F64, 0, 0), M(TF_F64, 0, 0)}, TF_OK,
     M(TF_F64, 0, 0), NULL},
    {"unary permute ij->ji", 1, L(2, I, J), NONE, L(2, J, I), {M(TF_C64, 2, 2, 7)}, TF_OK,
     M(TF_C64, 2, 7, 2), NULL},
    {"unary diagonal ii->i", 1, L(2, I, I), NONE, L(1, I), {M(TF_F64, 2, 5, 5)}, TF_OK,
     M(TF_F64, 1, 5), NULL},
    {"unary trace ii->", 1, L(2, I, I), NONE, NONE, {M(TF_F64, 2, 5, 5)}, TF_OK,
     M(TF_F64, 0, 0), NULL},
    {"unary sum ijk->k", 1, L(3, I, J, K), NONE, L(1, K), {M(TF_F32, 3, 2, 3, 4)}, TF_OK,
     M(TF_F32, 1, 4), NULL},
    {"label 63", 1, L(1, 63), NONE, L(1, 63), {M(TF_F64, 1, 3)}, TF_OK, M(TF_F64, 1, 3), NULL},
    {"rank-8 output", 2, L(4, 0, 1, 2, 3), L(4, 4, 5, 6, 7), L(8, 0, 1, 2, 3, 4, 5, 6, 7),
     {M(TF_F32, 4, 2, 2, 2, 2), M(TF_F32, 4, 2, 2, 2, 2)}, TF_OK,
     M(TF_F32, 8, 2, 2, 2, 2, 2, 2, 2, 2), NULL},
};

static const contract_case invalid_cases[] = {
    {"no inputs", 0, NONE, NONE, NONE, {NO_META, NO_META}, TF_ERR_INVALID_ARGUMENT, NO_META,
     "1 or 2"},
    {"three inputs", 3, L(1, I), L(1, I), NONE, {M(TF_F64, 1, 2), M(TF_F64, 1, 2)},
     TF_ERR_INVALID_ARGUMENT, NO_META, "1 or 2"},
    {"too few labels", 2, L(1, I), L(2, I, J), L(1, J), {M(TF_F64, 2, 2, 2), M(TF_F64, 2, 2, 2)},
     TF_ERR_SHAPE, NO_META, "rank"},
    {"too many labels", 1, L(3, I, J, K), NONE, NONE, {M(TF_F64, 2, 2, 2)}, TF_ERR_SHAPE, NO_META,
     "labels"},
    {"label 64", 1, L(1, 64), NONE, NONE, {M(TF_F64, 1, 2)}, TF_ERR_INVALID_ARGUMENT, NO_META,
     "0..63"},
    {"label 255 in b", 2, L(1, I), L(1, 255), NONE, {M(TF_F64, 1, 2), M(TF_F64, 1, 2)},
     TF_ERR_INVALID_ARGUMENT, NO_META, "0..63"},
    {"size mismatch across inputs", 2, L(2, I, J), L(2, J, K), L(2, I, K),
     {M(TF_F64, 2, 3, 4), M(TF_F64, 2, 5, 6)}, TF_ERR_SHAPE, NO_META, "size"},
    {"diagonal of unequal sizes", 1, L(2, I, I), NONE, L(1, I), {M(TF_F64, 2, 3, 4)},
     TF_ERR_SHAPE, NO_META, "size"},
    {"output label twice", 1, L(2, I, J), NONE, L(2, I, I), {M(TF_F64, 2, 3, 3)},
     TF_ERR_INVALID_ARGUMENT, NO_META, "twice"},
    {"output label absent", 2, L(1, I), L(1, I), L(1, J), {M(TF_F64, 1, 3), M(TF_F64, 1, 3)},
     TF_ERR_INVALID_ARGUMENT, NO_META, "no input"},
    {"output label 64", 1, L(1, I), NONE, L(1, 64), {M(TF_F64, 1, 3)}, TF_ERR_INVALID_ARGUMENT,
     NO_META, "0..63"},
    {"output rank 9", 1, L(1, I), NONE, L(9, I, I, I, I, I, I, I, I), {M(TF_F64, 1, 3)},
     TF_ERR_INVALID_ARGUMENT, NO_META, "at most"},
    {"dtype mix", 2, L(1, I), L(1, I), NONE, {M(TF_F64, 1, 3), M(TF_F32, 1, 3)}, TF_ERR_DTYPE,
     NO_META, "dtypes differ"},
    {"unknown dtype", 1, L(1, I), NONE, L(1, I), {M((tf_dtype)9, 1, 3)}, TF_ERR_DTYPE, NO_META,
     "dtype"},
    {"zero dimension", 1, L(1, I), NONE, L(1, I), {M(TF_F64, 1, 0)}, TF_ERR_BAD_SHAPE, NO_META,
     "at least 1"},
    {"output beyond 2^40", 2, L(1, I), L(1, J), L(2, I, J),
     {M(TF_F32, 1, (int64_t)1 << 21), M(TF_F32, 1, (int64_t)1 << 20)}, TF_ERR_BAD_SHAPE, NO_META,
     "too large"},
};

/* The descriptor a table row describes (its third field beyond 8 output labels is cut). */
static tf__contraction descriptor_of(const contract_case *t) {
    tf__contraction c;
    memset(&c, 0, sizeof c);
    c.n_inputs = t->n_inputs;
    c.rank[0] = t->rank_a;
    c.rank[1] = t->rank_b;
    memcpy(c.labels[0], t->a, sizeof c.labels[0]);
    memcpy(c.labels[1], t->b, sizeof c.labels[1]);
    c.out_rank = t->rank_out;
    memcpy(c.out, t->out, sizeof c.out);
    return c;
}

START_TEST(test_valid) {
    const contract_case *t = &valid_cases[_i];
    tf__contraction c = descriptor_of(t);
    tf__meta out;
    memset(&out, 0xab, sizeof out);
    char msg[256] = "";
    tf_status st = tf__infer_contract(&c, t->in, &out, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s: %s: %s", t->what, tf_status_name(st), msg);
    ck_assert_msg(out.dtype == t->result.dtype, "%s: dtype %d", t->what, (int)out.dtype);
    ck_assert_msg(out.rank == t->result.rank, "%s: rank %d", t->what, out.rank);
    for (int i = 0; i < out.rank; i++)
        ck_assert_msg(out.shape[i] == t->result.shape[i], "%s: dim %d is %lld", t->what, i,
                      (long long)out.shape[i]);
}
END_TEST

START_TEST(test_invalid) {
    const contract_case *t = &invalid_cases[_i];
    tf__contraction c = descriptor_of(t);
    tf__meta out;
    memset(&out, 0, sizeof out);
    char msg[256] = "";
    tf_status st = tf__infer_contract(&c, t->in, &out, msg, sizeof msg);
    ck_assert_msg(st == t->expect, "%s: got %s (%s), expected %s", t->what, tf_status_name(st),
                  msg, tf_status_name(t->expect));
    ck_assert_msg(strlen(msg) > 10, "%s: message \"%s\" is too short", t->what, msg);
    ck_assert_msg(strstr(msg, t->needle) != NULL, "%s: message \"%s\" lacks \"%s\"", t->what, msg,
                  t->needle);
}
END_TEST

/* The unused second input of a unary contraction is never looked at, whatever it holds. */
START_TEST(test_unary_ignores_second) {
    tf__contraction c;
    memset(&c, 0, sizeof c);
    c.n_inputs = 1;
    c.rank[0] = 2;
    c.labels[0][0] = 3;
    c.labels[0][1] = 3;
    c.rank[1] = 99;
    c.labels[1][0] = 200;
    c.out_rank = 1;
    c.out[0] = 3;
    tf__meta in[2] = {M(TF_C64, 2, 4, 4), M((tf_dtype)77, -1, 0)};
    tf__meta out;
    char msg[256] = "";
    ck_assert_int_eq(tf__infer_contract(&c, in, &out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(out.rank, 1);
    ck_assert_int_eq(out.shape[0], 4);
    ck_assert_int_eq(out.dtype, TF_C64);
}
END_TEST

/* NULL arguments are refused typed rather than dereferenced. */
START_TEST(test_null_arguments) {
    tf__contraction c;
    memset(&c, 0, sizeof c);
    c.n_inputs = 1;
    tf__meta in = M(TF_F64, 0, 0), out;
    char msg[128] = "";
    ck_assert_int_eq(tf__infer_contract(NULL, &in, &out, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf__infer_contract(&c, NULL, &out, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf__infer_contract(&c, &in, NULL, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
}
END_TEST

static Suite *contract_rules_suite(void) {
    Suite *s = suite_create("contract-rules");
    TCase *tc = tcase_create("rules");
    tcase_add_loop_test(tc, test_valid, 0, (int)(sizeof valid_cases / sizeof *valid_cases));
    tcase_add_loop_test(tc, test_invalid, 0, (int)(sizeof invalid_cases / sizeof *invalid_cases));
    tcase_add_test(tc, test_unary_ignores_second);
    tcase_add_test(tc, test_null_arguments);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(contract_rules_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
