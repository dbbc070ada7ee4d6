/*
 * Unit tests of the einsum subscripts parser (common/einsum-parse.c).
 *
 * Two tables drive them. Valid expressions come with the operands' shapes
 * and the parse they must give, written as the expression with every label
 * spelled out ("1ij,0_jk->01ik": ellipsis dimension p as the digit p, a
 * broadcast size-1 axis as '_') and a few label sizes: numpy's implicit
 * output order (ASCII, upper case first), ellipsis expansion right-aligned
 * with size-1 broadcasting, diagonals, rank-0 operands, blanks, up to the
 * 32 operands allowed. Invalid ones come with the typed status and a piece
 * of the message, which names the position or the character at fault: one
 * case per rule (unknown characters, malformed '...' and '->', two '->', a
 * second '...' in a term, output labels twice or in no input, term counts,
 * ranks, label sizes, broadcasting, dtypes, output ranks). Every refusal is
 * also made with a message buffer of 8 bytes, which must be cut, not overrun.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/einsum.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof *(a)))
/* Metadata literal: M(dtype, rank, dims...). */
#define M(dt, r, ...) {dt, r, {__VA_ARGS__}}
#define S(r, ...) M(TF_F64, r, __VA_ARGS__)
#define SCALAR M(TF_F64, 0, 0)

/* One valid expression: operands, the spelled-out parse, and sizes "i3 j4" to check. */
typedef struct valid_case {
    const char *subscripts;
    int n;
    tf__meta ops[4];
    const char *parse;
    const char *sizes;
    int n_ellipsis;
} valid_case;

static const valid_case valid_cases[] = {
    {"ij,jk->ik", 2, {S(2, 2, 3), S(2, 3, 4)}, "ij,jk->ik", "i2 j3 k4", 0},
    {"ij,jk", 2, {S(2, 2, 3), S(2, 3, 4)}, "ij,jk->ik", "i2 j3 k4", 0},
    {"ii", 1, {S(2, 3, 3)}, "ii->", "i3", 0},
    {"ii->i", 1, {S(2, 3, 3)}, "ii->i", "i3", 0},
    {"iij,jk->ik", 2, {S(3, 2, 2, 3), S(2, 3, 4)}, "iij,jk->ik", "i2 j3 k4", 0},
    {"ji", 1, {S(2, 2, 3)}, "ji->ij", "j2 i3", 0},
    {"ba", 1, {S(2, 2, 3)}, "ba->ab", "b2 a3", 0},
    {"implicit order is ASCII: upper case first", 0, {{0}}, NULL, NULL, 0},
    {"aB", 1, {S(2, 2, 3)}, "aB->Ba", "a2 B3", 0},
    {"Zz,zA", 2, {S(2, 2, 3), S(2, 3, 4)}, "Zz,zA->AZ", "Z2 z3 A4", 0},
    {"ij,ij", 2, {S(2, 2, 3), S(2, 2, 3)}, "ij,ij->", "i2 j3", 0},
    {"bij,bjk->bik", 2, {S(3, 5, 2, 3), S(3, 5, 3, 4)}, "bij,bjk->bik", "b5 i2 j3 k4", 0},
    {"...ij,...jk->...ik", 2, {S(3, 2, 3, 4), S(4, 5, 1, 4, 6)}, "1ij,0_jk->01ik", "0 5 1 2", 2},
    {"...ij,...jk", 2, {S(3, 2, 3, 4), S(4, 5, 1, 4, 6)}, "1ij,0_jk->01ik", "i3 j4 k6", 2},
    {"...,...->...", 2, {S(2, 3, 1), S(2, 1, 4)}, "0_,_1->01", "0 3 1 4", 2},
    {"...i,...i", 2, {S(2, 1, 3), S(2, 1, 3)}, "0i,0i->0", "0 1 i3", 1},
    {"i...j", 1, {S(4, 2, 3, 4, 5)}, "i01j->01ij", "i2 j5 0 3 1 4", 2},
    {"...", 1, {S(3, 2, 3, 4)}, "012->012", "0 2 1 3 2 4", 3},
    {"...ii->...i", 1, {S(3, 7, 2, 2)}, "0ii->0i", "0 7 i2", 1},
    {"empty ellipsis: no '...' needed in the output", 0, {{0}}, NULL, NULL, 0},
    {"...ij->ij", 1, {S(2, 2, 3)}, "ij->ij", "i2 j3", 0},
    {"ij->...ij", 1, {S(2, 2, 3)}, "ij->ij", "i2 j3", 0},
    {" i j , j k -> i k ", 2, {S(2, 2, 3), S(2, 3, 4)}, "ij,jk->ik", "i2 j3 k4", 0},
    {"\t. . .i\n->\r...i", 1, {S(2, 4, 5)}, "0i->0i", "0 4 i5", 1},
    {"", 1, {SCALAR}, "->", "", 0},
    {"->", 1, {SCALAR}, "->", "", 0},
    {",->", 2, {SCALAR, SCALAR}, ",->", "", 0},
    {"i,->i", 2, {S(1, 3), SCALAR}, "i,->i", "i3", 0},
    {"...,i", 2, {SCALAR, S(1, 3)}, ",i->i", "i3", 0},
    {"ij->", 1, {S(2, 2, 3)}, "ij->", "i2 j3", 0},
    {"ij->ji", 1, {S(2, 2, 3)}, "ij->ji", "i2 j3", 0},
    {"abcdefgh->hgfedcba", 1, {S(8, 1, 2, 1, 2, 1, 2, 1, 2)}, "abcdefgh->hgfedcba", "b2 h2", 0},
};

/* Writes a parse spelled out as "ij,jk->ik". */
static void spell(const tf__einsum *e, char *buf, size_t n) {
    size_t k = 0;
    for (int i = 0; i < e->n_operands && k + 10 < n; i++) {
        if (i) buf[k++] = ',';
        for (int a = 0; a < e->in[i].rank; a++) buf[k++] = tf__einsum_label_char(e->in[i].labels[a]);
    }
    buf[k++] = '-';
    buf[k++] = '>';
    for (int a = 0; a < e->out.rank; a++) buf[k++] = tf__einsum_label_char(e->out.labels[a]);
    buf[k] = '\0';
}

/* The label a character of the sizes column names: a letter, or the digit of an ellipsis dimension. */
static unsigned label_of(char ch) {
    if (ch >= 'A' && ch <= 'Z') return (unsigned)(ch - 'A');
    if (ch >= 'a' && ch <= 'z') return 26u + (unsigned)(ch - 'a');
    return TF__EINSUM_ELLIPSIS_LABEL + (unsigned)(ch - '0');
}

START_TEST(test_valid) {
    const valid_case *vc = &valid_cases[_i];
    if (!vc->parse) return; /* a heading */
    tf__einsum e;
    char msg[256] = "";
    tf_status st = tf__einsum_parse(vc->subscripts, strlen(vc->subscripts), vc->n, vc->ops, &e,
                                    msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "'%s': %s: %s", vc->subscripts, tf_status_name(st), msg);
    char got[128];
    spell(&e, got, sizeof got);
    ck_assert_msg(strcmp(got, vc->parse) == 0, "'%s' parsed as %s, expected %s", vc->subscripts,
                  got, vc->parse);
    ck_assert_int_eq(e.n_operands, vc->n);
    ck_assert_int_eq(e.dtype, TF_F64);
    ck_assert_int_eq(e.n_ellipsis, vc->n_ellipsis);
    /* "i3 j4": label i has size 3; "0 5": ellipsis dimension 0 has size 5. */
    const char *p = vc->sizes;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        unsigned l = label_of(*p++);
        while (*p == ' ') p++;
        long long want = strtoll(p, (char **)&p, 10);
        ck_assert_msg(e.size[l] == want, "'%s': label %c has size %lld, expected %lld",
                      vc->subscripts, tf__einsum_label_char(l), (long long)e.size[l], want);
    }
    for (int i = 0; i < e.n_operands; i++) ck_assert_int_eq(e.in[i].rank, vc->ops[i].rank);
    for (int a = 0; a < e.out.rank; a++) ck_assert_int_gt(e.size[e.out.labels[a]], 0);
}
END_TEST

/* One refusal: the status and a piece of its message. */
typedef struct invalid_case {
    const char *subscripts;
    size_t len; /* 0: strlen */
    int n;
    tf__meta ops[4];
    tf_status expect;
    const char *needle;
} invalid_case;

static const invalid_case invalid_cases[] = {
    {"ij,jk->ik$", 0, 2, {S(2, 2, 3), S(2, 3, 4)}, TF_ERR_INVALID_ARGUMENT,
     "unknown character '$' at position 9"},
    {"i j#", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'#' at position 3"},
    {"ij\x01", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "byte 0x01 at position 2"},
    {"ij\0k", 4, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "byte 0x00 at position 2"},
    {"i'", 0, 1, {S(1, 2)}, TF_ERR_INVALID_ARGUMENT, "byte 0x27 at position 1"},
    {"i1", 0, 1, {S(1, 2)}, TF_ERR_INVALID_ARGUMENT, "'1' at position 1"},
    {"ij>k", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'>' at position 2"},
    {"ij-k", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'-' at position 2 is not followed by '>'"},
    {"ij-", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'-' at position 2"},
    {"ij->i->j", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "second '->' at position 5"},
    {"i.j", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'.' at position 1 does not begin"},
    {"..i", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'.' at position 0"},
    {"....i", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'.' at position 3"},
    {"...i...", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'...' twice in one term (positions 0 and 4)"},
    {"ij->......", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'...' twice in one term (positions 4 and 7)"},
    {"ij->ii", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "label 'i' is in the output twice (positions 4 and 5)"},
    {"ij->ik", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "output label 'k' at position 5 is in no input"},
    {"ij->i,j", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "',' at position 5 is after '->'"},
    {"ij,jk", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "2 input terms"},
    {"ij", 0, 2, {S(2, 2, 3), S(2, 3, 4)}, TF_ERR_INVALID_ARGUMENT, "but 2 operands were given"},
    {"ijk", 0, 1, {S(2, 2, 3)}, TF_ERR_SHAPE, "term 0 'ijk' (position 0) names 3 axes but operand 0 has rank 2"},
    {"ij,k", 0, 2, {S(2, 2, 3), S(2, 3, 4)}, TF_ERR_SHAPE, "term 1 'k' (position 3) names 1 axis but operand 1 has rank 2"},
    {"i,", 0, 2, {S(1, 2), S(1, 4)}, TF_ERR_SHAPE, "term 1 '' (position 2) names 0 axes"},
    {"...ijk", 0, 1, {S(2, 2, 3)}, TF_ERR_SHAPE, "names 3 axes besides '...' but operand 0 has rank 2"},
    {"ij,jk", 0, 2, {S(2, 2, 3), S(2, 4, 5)}, TF_ERR_SHAPE,
     "label 'j' is bound to 3 (operand 0, axis 1) and to 4 (operand 1, axis 0)"},
    {"ii", 0, 1, {S(2, 2, 3)}, TF_ERR_SHAPE, "label 'i' is bound to 2 (operand 0, axis 0) and to 3"},
    {"...,...", 0, 2, {S(1, 3), S(1, 4)}, TF_ERR_SHAPE, "ellipsis dimension 0"},
    {"...i,...i", 0, 2, {S(3, 2, 3, 5), S(2, 4, 5)}, TF_ERR_SHAPE, "3 in operand 0 (axis 1) and 4 in operand 1 (axis 0)"},
    {"...ij->ij", 0, 1, {S(3, 2, 3, 4)}, TF_ERR_INVALID_ARGUMENT, "has no '...'"},
    {"i,i", 0, 2, {M(TF_F32, 1, 3), M(TF_F64, 1, 3)}, TF_ERR_DTYPE, "operand 1 is f64 but operand 0 is f32"},
    {"i,i,i", 0, 3, {M(TF_C64, 1, 3), M(TF_C64, 1, 3), M(TF_C128, 1, 3)}, TF_ERR_DTYPE, "no promotion"},
    {"abcde,fghij", 0, 2, {S(5, 1, 1, 1, 1, 1), S(5, 1, 1, 1, 1, 1)}, TF_ERR_BAD_SHAPE,
     "implicit output has 10 axes"},
    {"abcde,fghij->abcdefghij", 0, 2, {S(5, 1, 1, 1, 1, 1), S(5, 1, 1, 1, 1, 1)}, TF_ERR_BAD_SHAPE,
     "has 10 axes, more than 8"},
    {"i", 0, 0, {{0}}, TF_ERR_INVALID_ARGUMENT, "0 operands given"},
    {"i", 0, 33, {{0}}, TF_ERR_INVALID_ARGUMENT, "33 operands given"},
    {"i", 0, 1, {M((tf_dtype)9, 1, 3)}, TF_ERR_DTYPE, "operand 0"},
    {"ij", 0, 1, {S(2, 2, 0)}, TF_ERR_BAD_SHAPE, "operand 0"},
    {"the first error by position wins", 0, 0, {{0}}, TF_OK, NULL},
    {"ij,jk->ik$", 0, 1, {S(2, 2, 3)}, TF_ERR_INVALID_ARGUMENT, "'$'"},
    {"iijj->ii$", 0, 1, {S(4, 2, 2, 3, 3)}, TF_ERR_INVALID_ARGUMENT, "twice (positions 6 and 7)"},
};

START_TEST(test_invalid) {
    const invalid_case *ic = &invalid_cases[_i];
    if (ic->expect == TF_OK) return; /* a heading */
    tf__einsum e;
    char msg[256] = "";
    size_t len = ic->len ? ic->len : strlen(ic->subscripts);
    tf_status st = tf__einsum_parse(ic->subscripts, len, ic->n, ic->ops, &e, msg, sizeof msg);
    ck_assert_msg(st == ic->expect, "'%s' gave %s (%s), expected %s", ic->subscripts,
                  tf_status_name(st), msg, tf_status_name(ic->expect));
    ck_assert_msg(strstr(msg, ic->needle), "'%s': message \"%s\" lacks \"%s\"", ic->subscripts,
                  msg, ic->needle);
    ck_assert_msg(strncmp(msg, "einsum: ", 8) == 0, "message \"%s\" does not say einsum", msg);
    /* A short buffer is cut, never overrun (ASan watches the build-san run). */
    char small[8];
    memset(small, 'x', sizeof small);
    st = tf__einsum_parse(ic->subscripts, len, ic->n, ic->ops, &e, small, sizeof small);
    ck_assert_int_eq(st, ic->expect);
    ck_assert_int_eq(small[7], '\0');
}
END_TEST

/* The output may reach rank 8 with the ellipsis's dimensions counted, and not pass it. */
START_TEST(test_max_rank_output) {
    tf__einsum e;
    char msg[256];
    const tf__meta ok[2] = {S(5, 2, 1, 1, 1, 1), S(4, 2, 1, 1, 1)};
    ck_assert_int_eq(tf__einsum_parse("...ab,...cd->...abcd", 20, 2, ok, &e, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(e.out.rank, 7);
    const tf__meta eight[2] = {S(6, 2, 3, 1, 1, 1, 1), S(4, 1, 1, 1, 1)};
    ck_assert_int_eq(tf__einsum_parse("...ab,...cd->...abcd", 20, 2, eight, &e, msg, sizeof msg),
                     TF_OK);
    ck_assert_int_eq(e.out.rank, 8);
    const tf__meta nine[2] = {S(7, 2, 3, 4, 1, 1, 1, 1), S(4, 1, 1, 1, 1)};
    ck_assert_int_eq(tf__einsum_parse("...ab,...cd->...abcd", 20, 2, nine, &e, msg, sizeof msg),
                     TF_ERR_BAD_SHAPE);
    ck_assert_ptr_nonnull(strstr(msg, "9 axes"));
}
END_TEST

/* At least 16 operands, and up to the 32 allowed; one more is refused. */
START_TEST(test_many_operands) {
    tf__meta ops[TF__EINSUM_MAX_OPERANDS + 1];
    char sub[4 * (TF__EINSUM_MAX_OPERANDS + 1) + 8];
    for (int n = 16; n <= TF__EINSUM_MAX_OPERANDS + 1; n++) {
        size_t k = 0;
        for (int i = 0; i < n; i++) {
            ops[i] = (tf__meta)S(2, 2, 3);
            if (i) sub[k++] = ',';
            /* a chain: operand i is (x_i, x_i+1) over letters a..z A..Z */
            sub[k++] = tf__einsum_label_char((unsigned)(i % 52));
            sub[k++] = tf__einsum_label_char((unsigned)((i + 1) % 52));
        }
        sub[k] = '\0';
        for (int i = 0; i < n; i++) {
            /* A chain of 2x3 matrices does not bind; make every label size 2. */
            ops[i].shape[1] = 2;
        }
        tf__einsum e;
        char msg[256];
        tf_status st = tf__einsum_parse(sub, k, n, ops, &e, msg, sizeof msg);
        if (n <= TF__EINSUM_MAX_OPERANDS) {
            ck_assert_msg(st == TF_OK, "%d operands: %s", n, msg);
            ck_assert_int_eq(e.n_operands, n);
            ck_assert_int_eq(e.out.rank, 2); /* the chain's two ends, in ASCII order */
        } else {
            ck_assert_int_eq(st, TF_ERR_INVALID_ARGUMENT);
        }
    }
}
END_TEST

/* More terms than operands can hold are counted, not stored, and refused by count. */
START_TEST(test_too_many_terms) {
    char sub[200];
    size_t k = 0;
    for (int i = 0; i < 40; i++) {
        if (i) sub[k++] = ',';
        sub[k++] = 'i';
    }
    sub[k] = '\0';
    tf__meta ops[TF__EINSUM_MAX_OPERANDS];
    for (int i = 0; i < TF__EINSUM_MAX_OPERANDS; i++) ops[i] = (tf__meta)S(1, 2);
    tf__einsum e;
    char msg[256];
    ck_assert_int_eq(tf__einsum_parse(sub, k, TF__EINSUM_MAX_OPERANDS, ops, &e, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "40 input terms"));
    /* A character error in a term past the maximum is still found. */
    sub[k - 1] = '%';
    ck_assert_int_eq(tf__einsum_parse(sub, k, TF__EINSUM_MAX_OPERANDS, ops, &e, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(msg, "'%'"));
    /* A term of more letters than it keeps is counted too. */
    char longterm[100];
    memset(longterm, 'a', 99);
    longterm[99] = '\0';
    ck_assert_int_eq(tf__einsum_parse(longterm, 99, 1, ops, &e, msg, sizeof msg), TF_ERR_SHAPE);
    ck_assert_ptr_nonnull(strstr(msg, "names 99 axes"));
}
END_TEST

/* NULL arguments are refused typed. */
START_TEST(test_null_arguments) {
    tf__einsum e;
    char msg[256];
    tf__meta op = S(1, 2);
    ck_assert_int_eq(tf__einsum_parse(NULL, 0, 1, &op, &e, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf__einsum_parse("i", 1, 1, NULL, &e, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf__einsum_parse("i", 1, 1, &op, NULL, msg, sizeof msg), TF_ERR_INVALID_ARGUMENT);
}
END_TEST

/* The characters labels print as. */
START_TEST(test_label_chars) {
    ck_assert_int_eq(tf__einsum_label_char(0), 'A');
    ck_assert_int_eq(tf__einsum_label_char(25), 'Z');
    ck_assert_int_eq(tf__einsum_label_char(26), 'a');
    ck_assert_int_eq(tf__einsum_label_char(51), 'z');
    ck_assert_int_eq(tf__einsum_label_char(TF__EINSUM_ELLIPSIS_LABEL), '0');
    ck_assert_int_eq(tf__einsum_label_char(TF__EINSUM_N_LABELS - 1), '7');
    ck_assert_int_eq(tf__einsum_label_char(TF__EINSUM_BROADCAST), '_');
    ck_assert_int_eq(tf__einsum_label_char(TF__EINSUM_N_LABELS), '?');
}
END_TEST

static Suite *einsum_parse_suite(void) {
    Suite *s = suite_create("einsum-parse");
    TCase *tc = tcase_create("einsum-parse");
    tcase_add_loop_test(tc, test_valid, 0, N_OF(valid_cases));
    tcase_add_loop_test(tc, test_invalid, 0, N_OF(invalid_cases));
    tcase_add_test(tc, test_max_rank_output);
    tcase_add_test(tc, test_many_operands);
    tcase_add_test(tc, test_too_many_terms);
    tcase_add_test(tc, test_null_arguments);
    tcase_add_test(tc, test_label_chars);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(einsum_parse_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
