/*
 * The rules of the linear-algebra kinds (common/linalg-rules.c): output
 * shapes and dtypes of each kind in matrix and tensor form, the typed
 * refusals, the slice rule, and the kept-rank rule of common/truncation.h at
 * each of its boundaries.
 */
#include <check.h>
#include <math.h>
#include <string.h>

#include "common/linalg.h"
#include "common/truncation.h"

TF__DEFINE_KEPT_RANK(kept_rank, double)

static tf__meta meta(tf_dtype dt, int rank, const int64_t *shape) {
    tf__meta m;
    memset(&m, 0, sizeof m);
    m.dtype = dt;
    m.rank = rank;
    for (int i = 0; i < rank; i++) m.shape[i] = shape[i];
    return m;
}

static void expect_shape(const tf__meta *m, tf_dtype dt, int rank, const int64_t *shape) {
    ck_assert_int_eq(m->dtype, dt);
    ck_assert_int_eq(m->rank, rank);
    for (int i = 0; i < rank; i++) ck_assert_int_eq(m->shape[i], shape[i]);
}

/* A batched complex SVD: U, S (real), Vh, and with truncation a bounded width and the report. */
START_TEST(test_svd_shapes) {
    char msg[256];
    tf__meta in = meta(TF_C128, 3, (int64_t[]){4, 6, 3}), out[4];
    tf__linalg l = {.n_batch = 1, .n_rows = 1, .compute_uv = 1};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(l.n_outputs, 3);
    ck_assert_int_eq(l.b, 4);
    ck_assert_int_eq(l.k, 3);
    expect_shape(&out[0], TF_C128, 3, (int64_t[]){4, 6, 3});
    expect_shape(&out[1], TF_F64, 2, (int64_t[]){4, 3});
    expect_shape(&out[2], TF_C128, 3, (int64_t[]){4, 3, 3});
    l.full = 1;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    expect_shape(&out[0], TF_C128, 3, (int64_t[]){4, 6, 6});
    l.full = 0;
    l.truncate = 1;
    l.trunc.max_rank = 2;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(l.n_outputs, 4);
    ck_assert_int_eq(l.value_rank, 0);
    expect_shape(&out[0], TF_C128, 3, (int64_t[]){4, 6, 2});
    expect_shape(&out[3], TF_F64, 2, (int64_t[]){4, TF__REPORT_ENTRIES});
    l.trunc.cutoff = 1e-3;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(l.value_rank, 1);
}
END_TEST

/* The tensor form: a rank-4 tensor split 2|2 after a permutation. */
START_TEST(test_tensor_form) {
    char msg[256];
    tf__meta in = meta(TF_F32, 4, (int64_t[]){2, 3, 4, 5}), out[4];
    tf__linalg l = {.n_rows = 2, .compute_uv = 1, .has_perm = 1, .perm = {2, 0, 3, 1}};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(l.m, 8);
    ck_assert_int_eq(l.n, 15);
    expect_shape(&out[0], TF_F32, 3, (int64_t[]){4, 2, 8});
    expect_shape(&out[2], TF_F32, 3, (int64_t[]){8, 5, 3});
    l.perm[1] = 2; /* names axis 2 twice */
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &in, 1, out, msg, sizeof msg), TF_ERR_AXIS);
}
END_TEST

/* Refusals of each kind, typed. */
START_TEST(test_refusals) {
    char msg[256];
    tf__meta out[4];
    tf__meta rect = meta(TF_F64, 2, (int64_t[]){3, 4});
    tf__linalg l = {.n_rows = 1, .compute_uv = 1};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_EIGH, &l, &rect, 1, out, msg, sizeof msg), TF_ERR_SHAPE);
    ck_assert_int_eq(tf__infer_linalg(TF__OP_INV, &l, &rect, 1, out, msg, sizeof msg), TF_ERR_SHAPE);
    l.n_rows = 2;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &rect, 1, out, msg, sizeof msg), TF_ERR_AXIS);
    l = (tf__linalg){.n_rows = 1, .compute_uv = 1, .truncate = 1};
    l.trunc.max_rank = 2;
    l.trunc.min_rank = 3;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    l.trunc.min_rank = 0;
    l.trunc.cutoff = NAN;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    l.trunc.cutoff = 0;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_QR, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    l = (tf__linalg){.n_rows = 1, .truncate = 1, .trunc = {.absorb = TF__ABSORB_LEFT}};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SVD, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    /* solve: B's rows must be A's; dtypes must agree. */
    tf__meta ab[2] = {meta(TF_F64, 2, (int64_t[]){3, 3}), meta(TF_F64, 2, (int64_t[]){4, 2})};
    l = (tf__linalg){.n_rows = 1};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SOLVE, &l, ab, 2, out, msg, sizeof msg), TF_ERR_SHAPE);
    ab[1] = meta(TF_F32, 1, (int64_t[]){3});
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SOLVE, &l, ab, 2, out, msg, sizeof msg), TF_ERR_DTYPE);
    ab[1].dtype = TF_F64;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_SOLVE, &l, ab, 2, out, msg, sizeof msg), TF_OK);
    ck_assert_int_eq(l.nrhs, 1);
    /* A diagonal must exist. */
    l = (tf__linalg){.n_rows = 1, .offset = 4};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_DIAGONAL, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
    l.offset = 3;
    ck_assert_int_eq(tf__infer_linalg(TF__OP_DIAGONAL, &l, &rect, 1, out, msg, sizeof msg), TF_OK);
    expect_shape(&out[0], TF_F64, 1, (int64_t[]){1});
    /* A matrix norm's p is one of six. */
    l = (tf__linalg){.n_rows = 1, .norm_kind = TF__NORM_MATRIX, .norm_p = 3};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_NORM, &l, &rect, 1, out, msg, sizeof msg),
                     TF_ERR_INVALID_ARGUMENT);
}
END_TEST

/* keepdims puts the reduced axes back where they were, as size 1. */
START_TEST(test_norm_keepdims) {
    char msg[256];
    tf__meta in = meta(TF_C64, 3, (int64_t[]){3, 4, 5}), out[1];
    tf__linalg l = {.n_batch = 2, .has_perm = 1, .perm = {0, 2, 1}, .keepdims = 1};
    ck_assert_int_eq(tf__infer_linalg(TF__OP_NORM, &l, &in, 1, out, msg, sizeof msg), TF_OK);
    expect_shape(&out[0], TF_F32, 3, (int64_t[]){3, 1, 5});
    ck_assert_int_eq(l.n, 4);
}
END_TEST

/* The slice rule: in range, nonzero steps, lengths of at least 1. */
START_TEST(test_slice_rule) {
    char msg[256];
    tf__meta in = meta(TF_F32, 2, (int64_t[]){5, 7}), out;
    int64_t ok[6] = {4, -2, 3, 1, 3, 2};
    ck_assert_int_eq(tf__infer_output(TF__OP_SLICE, &in, 1, ok, 6, 0, &out, msg, sizeof msg), TF_OK);
    expect_shape(&out, TF_F32, 2, (int64_t[]){3, 2});
    int64_t bad[][6] = {
        {4, -2, 4, 0, 1, 1}, /* reaches index -2 */
        {0, 0, 1, 0, 1, 1},  /* zero step */
        {0, 1, 0, 0, 1, 1},  /* empty */
        {0, 1, 1, 6, 1, 2},  /* past the end */
        {0, INT64_MAX / 2, 3, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(tf__infer_output(TF__OP_SLICE, &in, 1, bad[i], 6, 0, &out, msg, sizeof msg),
                         TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_ne(tf__infer_output(TF__OP_SLICE, &in, 1, ok, 5, 0, &out, msg, sizeof msg), TF_OK);
}
END_TEST

/* Each truncation option at its boundary, on values 8, 4, 2, 1, 0.5 (squares 64, 16, 4, 1, .25). */
START_TEST(test_kept_rank) {
    const double s[5] = {8, 4, 2, 1, 0.5};
    double gone, total;
    tf__truncation t = {0};
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 5);
    ck_assert(total == 85.25 && gone == 0);
    t.max_rank = 3;
    ck_assert_int_eq(kept_rank(s, 5, 3, &t, 1e-8, &gone, &total), 3);
    ck_assert(gone == 1.25);
    t = (tf__truncation){.cutoff = 2}; /* values equal to the cutoff go */
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 2);
    t = (tf__truncation){.rel_cutoff = 0.25}; /* 0.25 * 8 = 2 */
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 2);
    t = (tf__truncation){.discarded_weight = 5.25}; /* exactly 4 + 1 + .25 */
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 2);
    t.discarded_weight = 5.24;
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 3);
    t = (tf__truncation){.rel_discarded_weight = 1.25 / 85.25};
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 3);
    t = (tf__truncation){.cutoff = 100, .min_rank = 2};
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 2);
    t = (tf__truncation){.cutoff = 100};
    ck_assert_int_eq(kept_rank(s, 5, 5, &t, 1e-8, &gone, &total), 1); /* never none */
    /* A doublet 4, 4 the cut would split: kept whole within the bound, dropped past it. */
    const double d[5] = {8, 4, 4, 1, 0.5};
    t = (tf__truncation){.max_rank = 2};
    ck_assert_int_eq(kept_rank(d, 5, 2, &t, 1e-8, &gone, &total), 2);
    t.keep_degenerate = 1;
    ck_assert_int_eq(kept_rank(d, 5, 2, &t, 1e-8, &gone, &total), 1);
    ck_assert_int_eq(kept_rank(d, 5, 3, &(tf__truncation){.cutoff = 4.5, .keep_degenerate = 1}, 1e-8,
                               &gone, &total), 1);
    ck_assert_int_eq(kept_rank(d, 5, 5, &(tf__truncation){.rel_discarded_weight = 0.2,
                                                          .keep_degenerate = 1}, 1e-8, &gone,
                               &total), 3);
    /* Dropping the doublet would go below min_rank: the cut splits it. */
    ck_assert_int_eq(kept_rank(d, 5, 2, &(tf__truncation){.max_rank = 2, .min_rank = 2,
                                                          .keep_degenerate = 1}, 1e-8, &gone,
                               &total), 2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("linalg-rules");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_svd_shapes);
    tcase_add_test(tc, test_tensor_form);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_norm_keepdims);
    tcase_add_test(tc, test_slice_rule);
    tcase_add_test(tc, test_kept_rank);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
