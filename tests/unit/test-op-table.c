/*
 * The operation table (common/op-table.h) against what is written about it
 * elsewhere: the proto's OpKind has exactly the table's kinds (the numbers
 * themselves are asserted at build time in common/op-table.c), every lookup
 * answers the table's columns, and docs/operations-reference.md's table of
 * kinds lists every kind but OP_NONE with the table's columns, in order.
 * TENFERRO_OPS_REFERENCE names the reference (default: the repository's, the
 * tests run from its root).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"
#include "common/ops.h"

/* One row of the table as the reference writes it: "| `OP_ADD` | 1 | add | 2 | elementwise | same | binary |". */
#define DOC_ROW(KIND, name, number, arity, shape, dtype, family) \
    {#KIND, name, number, arity, #shape, #dtype, #family},
typedef struct doc_row {
    const char *kind, *name;
    int number, arity;
    const char *shape, *dtype, *family;
} doc_row;
static const doc_row doc_rows[] = {TF__OP_LIST(DOC_ROW)};
#undef DOC_ROW
#define N_ROWS ((int)(sizeof doc_rows / sizeof *doc_rows))

/* Lower-cases s into buf. */
static const char *lower(const char *s, char *buf, size_t len) {
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++) buf[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
    buf[i] = '\0';
    return buf;
}

/* The reference's line for row r. */
static void expected_line(const doc_row *r, char *buf, size_t len) {
    char shape[32], dtype[32], arity[16];
    if (r->arity == -1)
        snprintf(arity, sizeof arity, "any");
    else if (r->arity == 0)
        snprintf(arity, sizeof arity, "descriptor");
    else
        snprintf(arity, sizeof arity, "%d", r->arity);
    snprintf(buf, len, "| `OP_%s` | %d | %s | %s | %s | %s | %s |", r->kind, r->number, r->name,
             arity, lower(r->shape, shape, sizeof shape), lower(r->dtype, dtype, sizeof dtype),
             r->family);
}

/* The proto's enum has the table's kinds, each under the table's name and number. */
START_TEST(test_proto_has_every_kind) {
    const ProtobufCEnumDescriptor *d = &tenferro__op_kind__descriptor;
    ck_assert_int_eq((int)d->n_values, TF__OP_KIND_COUNT);
    ck_assert_int_eq(N_ROWS, TF__OP_KIND_COUNT);
    for (int i = 0; i < N_ROWS; i++) {
        char want[64];
        snprintf(want, sizeof want, "OP_%s", doc_rows[i].kind);
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(d, want);
        ck_assert_msg(v != NULL, "proto/tenferro.proto has no %s", want);
        ck_assert_int_eq(v->value, doc_rows[i].number);
    }
}
END_TEST

/* The lookups answer the table's columns, and "unknown" or nothing outside it. */
START_TEST(test_lookups_follow_the_table) {
    for (int i = 0; i < N_ROWS; i++) {
        const tf__op_kind k = (tf__op_kind)doc_rows[i].number;
        ck_assert_str_eq(tf__op_name(k), doc_rows[i].name);
        ck_assert_int_eq(tf__op_arity(k), doc_rows[i].arity);
        for (int j = 0; j < i; j++) ck_assert_str_ne(doc_rows[i].name, doc_rows[j].name);
    }
    ck_assert_int_eq(tf__op_shape_rule(TF__OP_ADD), TF__SHAPE_ELEMENTWISE);
    ck_assert_int_eq(tf__op_dtype_rule(TF__OP_ABS), TF__DTYPE_TO_REAL);
    ck_assert_int_eq(tf__op_out_dtype(TF__OP_ABS, TF_C128), TF_F64);
    ck_assert_int_eq(tf__op_out_dtype(TF__OP_SQUARE, TF_C64), TF_C64);
    ck_assert_int_eq(tf__op_dtype_rule(TF__OP_REDUCE_MAX), TF__DTYPE_REAL_ONLY);
    const int outside[] = {-1, TF__OP_KIND_COUNT, 999};
    for (size_t i = 0; i < sizeof outside / sizeof *outside; i++) {
        ck_assert_str_eq(tf__op_name((tf__op_kind)outside[i]), "unknown");
        ck_assert_int_eq(tf__op_arity((tf__op_kind)outside[i]), 0);
        ck_assert_int_eq(tf__op_shape_rule((tf__op_kind)outside[i]), TF__SHAPE_NONE);
        ck_assert_int_eq(tf__op_dtype_rule((tf__op_kind)outside[i]), TF__DTYPE_NONE);
    }
}
END_TEST

/* The reference's table of kinds is the table, row for row (OP_NONE left out), and nothing more. */
START_TEST(test_reference_lists_every_kind) {
    const char *path = getenv("TENFERRO_OPS_REFERENCE");
    if (!path) path = "docs/operations-reference.md";
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository's root)", path);
    char line[512];
    int next = 1; /* the row the next table line must be */
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "| `OP_", 6) != 0) continue;
        char want[512];
        ck_assert_msg(next < N_ROWS, "%s lists a kind the table does not have: %s", path, line);
        expected_line(&doc_rows[next], want, sizeof want);
        ck_assert_msg(strcmp(line, want) == 0, "%s: the line\n  %s\nshould be\n  %s", path, line,
                      want);
        next++;
    }
    fclose(f);
    if (next < N_ROWS) {
        char want[512];
        expected_line(&doc_rows[next], want, sizeof want);
        ck_abort_msg("%s misses kinds from OP_%s on; the next line should be\n  %s", path,
                     doc_rows[next].kind, want);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("op-table");
    TCase *tc = tcase_create("table");
    tcase_add_test(tc, test_proto_has_every_kind);
    tcase_add_test(tc, test_lookups_follow_the_table);
    tcase_add_test(tc, test_reference_lists_every_kind);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
