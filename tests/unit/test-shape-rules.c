/*
 * Unit tests of the shape and dtype rules (common/shape-rules.c).
 *
 * Both the client library and the daemon decide with tf__infer_output whether
 * an operation is valid and what its output looks like, so a wrong rule means
 * either a valid program refused or a kernel handed shapes it cannot serve.
 * Two tables drive the tests: valid operations with the exact output metadata
 * they must produce (every kind, including abs of complex to real, permuted
 * shapes, reshapes, reductions with and without keepdims or axes, 2-D and
 * batched matmul), and invalid ones with the typed status each must be refused
 * with (dtype, shape, axis, bad shape, input count, unknown kind) and a
 * non-empty message. tf__check_new_meta gets its own table of ranks,
 * dimensions and element counts around the 2^40 bound.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"

/* Metadata literal: M(dtype, rank, dims...). */
#define M(dt, r, ...) {dt, r, {__VA_ARGS__}}
/* No metadata: an absent input or an output never produced. */
#define NO_META {(tf_dtype)0, 0, {0}}
/* Parameter list literal: P(n, values...). */
#define P(n, ...) n, {__VA_ARGS__}
#define NO_PARAMS 0, {0}

#define BIG ((int64_t)1 << 20)

/* One call of tf__infer_output and what it must answer. */
typedef struct infer_case {
    const char *what;
    tf__op_kind kind;
    int n_inputs;
    tf__meta in[3];
    int n_params;
    int64_t params[TF_MAX_RANK + 1];
    unsigned flags;
    tf_status expect;
    tf__meta out; /* when expect == TF_OK */
} infer_case;

static const infer_case valid_cases[] = {
    {"add", TF__OP_ADD, 2, {M(TF_F32, 2, 2, 3), M(TF_F32, 2, 2, 3)}, NO_PARAMS, 0, TF_OK,
     M(TF_F32, 2, 2, 3)},
    {"sub", TF__OP_SUB, 2, {M(TF_F64, 1, 7), M(TF_F64, 1, 7)}, NO_PARAMS, 0, TF_OK,
     M(TF_F64, 1, 7)},
    {"mul", TF__OP_MUL, 2, {M(TF_C64, 3, 2, 1, 4), M(TF_C64, 3, 2, 1, 4)}, NO_PARAMS, 0, TF_OK,
     M(TF_C64, 3, 2, 1, 4)},
    {"div scalar", TF__OP_DIV, 2, {M(TF_C128, 0, 0), M(TF_C128, 0, 0)}, NO_PARAMS, 0, TF_OK,
     M(TF_C128, 0, 0)},
    {"axpby", TF__OP_AXPBY, 2, {M(TF_F64, 2, 5, 5), M(TF_F64, 2, 5, 5)}, NO_PARAMS, 0, TF_OK,
     M(TF_F64, 2, 5, 5)},
    {"neg", TF__OP_NEG, 1, {M(TF_F32, 1, 9)}, NO_PARAMS, 0, TF_OK, M(TF_F32, 1, 9)},
    {"conj", TF__OP_CONJ, 1, {M(TF_C64, 2, 3, 3)}, NO_PARAMS, 0, TF_OK, M(TF_C64, 2, 3, 3)},
    {"exp", TF__OP_EXP, 1, {M(TF_F64, 1, 2)}, NO_PARAMS, 0, TF_OK, M(TF_F64, 1, 2)},
    {"log", TF__OP_LOG, 1, {M(TF_C128, 1, 2)}, NO_PARAMS, 0, TF_OK, M(TF_C128, 1, 2)},
    {"sqrt", TF__OP_SQRT, 1, {M(TF_F32, 2, 1, 1)}, NO_PARAMS, 0, TF_OK, M(TF_F32, 2, 1, 1)},
    {"scale", TF__OP_SCALE, 1, {M(TF_C64, 1, 4)}, NO_PARAMS, 0, TF_OK, M(TF_C64, 1, 4)},
    {"copy", TF__OP_COPY, 1, {M(TF_F64, 4, 1, 2, 3, 4)}, NO_PARAMS, 0, TF_OK,
     M(TF_F64, 4, 1, 2, 3, 4)},
    {"test_fault", TF__OP_TEST_FAULT, 1, {M(TF_C64, 2, 3, 5)}, NO_PARAMS, 0, TF_OK,
     M(TF_C64, 2, 3, 5)},
    {"abs f32", TF__OP_ABS, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_OK, M(TF_F32, 1, 3)},
    {"abs f64", TF__OP_ABS, 1, {M(TF_F64, 1, 3)}, NO_PARAMS, 0, TF_OK, M(TF_F64, 1, 3)},
    {"abs c64 is f32", TF__OP_ABS, 1, {M(TF_C64, 2, 2, 3)}, NO_PARAMS, 0, TF_OK,
     M(TF_F32, 2, 2, 3)},
    {"abs c128 is f64", TF__OP_ABS, 1, {M(TF_C128, 1, 3)}, NO_PARAMS, 0, TF_OK, M(TF_F64, 1, 3)},
    {"permute 3d", TF__OP_PERMUTE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(3, 2, 0, 1), 0, TF_OK,
     M(TF_F32, 3, 4, 2, 3)},
    {"permute identity", TF__OP_PERMUTE, 1, {M(TF_C64, 2, 5, 6)}, P(2, 0, 1), 0, TF_OK,
     M(TF_C64, 2, 5, 6)},
    {"permute rank 8", TF__OP_PERMUTE, 1, {M(TF_F64, 8, 1, 2, 3, 4, 5, 6, 7, 8)},
     P(8, 7, 6, 5, 4, 3, 2, 1, 0), 0, TF_OK, M(TF_F64, 8, 8, 7, 6, 5, 4, 3, 2, 1)},
    {"permute scalar", TF__OP_PERMUTE, 1, {M(TF_F64, 0, 0)}, NO_PARAMS, 0, TF_OK, M(TF_F64, 0, 0)},
    {"reshape 2d", TF__OP_RESHAPE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(2, 4, 6), 0, TF_OK,
     M(TF_F32, 2, 4, 6)},
    {"reshape flat", TF__OP_RESHAPE, 1, {M(TF_C128, 2, 6, 4)}, P(1, 24), 0, TF_OK,
     M(TF_C128, 1, 24)},
    {"reshape to scalar", TF__OP_RESHAPE, 1, {M(TF_F64, 2, 1, 1)}, NO_PARAMS, 0, TF_OK,
     M(TF_F64, 0, 0)},
    {"reshape from scalar", TF__OP_RESHAPE, 1, {M(TF_F64, 0, 0)}, P(3, 1, 1, 1), 0, TF_OK,
     M(TF_F64, 3, 1, 1, 1)},
    {"sum one axis", TF__OP_REDUCE_SUM, 1, {M(TF_F32, 3, 2, 3, 4)}, P(1, 1), 0, TF_OK,
     M(TF_F32, 2, 2, 4)},
    {"sum one axis keepdims", TF__OP_REDUCE_SUM, 1, {M(TF_F32, 3, 2, 3, 4)}, P(1, 1),
     TF__REDUCE_KEEPDIMS, TF_OK, M(TF_F32, 3, 2, 1, 4)},
    {"sum two axes, any order", TF__OP_REDUCE_SUM, 1, {M(TF_C64, 3, 2, 3, 4)}, P(2, 2, 0), 0, TF_OK,
     M(TF_C64, 1, 3)},
    {"sum all by 0 axes", TF__OP_REDUCE_SUM, 1, {M(TF_F64, 3, 2, 3, 4)}, NO_PARAMS, 0, TF_OK,
     M(TF_F64, 0, 0)},
    {"sum all by 0 axes keepdims", TF__OP_REDUCE_SUM, 1, {M(TF_F64, 3, 2, 3, 4)}, NO_PARAMS,
     TF__REDUCE_KEEPDIMS, TF_OK, M(TF_F64, 3, 1, 1, 1)},
    {"sum all axes named", TF__OP_REDUCE_SUM, 1, {M(TF_C128, 2, 2, 3)}, P(2, 0, 1), 0, TF_OK,
     M(TF_C128, 0, 0)},
    {"max f64", TF__OP_REDUCE_MAX, 1, {M(TF_F64, 2, 5, 6)}, P(1, 0), 0, TF_OK, M(TF_F64, 1, 6)},
    {"min f32 keepdims", TF__OP_REDUCE_MIN, 1, {M(TF_F32, 2, 5, 6)}, P(1, 1), TF__REDUCE_KEEPDIMS,
     TF_OK, M(TF_F32, 2, 5, 1)},
    {"sum of a scalar", TF__OP_REDUCE_SUM, 1, {M(TF_F32, 0, 0)}, NO_PARAMS, 0, TF_OK,
     M(TF_F32, 0, 0)},
    {"matmul 2d", TF__OP_MATMUL, 2, {M(TF_F32, 2, 2, 3), M(TF_F32, 2, 3, 5)}, NO_PARAMS, 0, TF_OK,
     M(TF_F32, 2, 2, 5)},
    {"matmul vector-like", TF__OP_MATMUL, 2, {M(TF_C128, 2, 1, 64), M(TF_C128, 2, 64, 1)},
     NO_PARAMS, 0, TF_OK, M(TF_C128, 2, 1, 1)},
    {"matmul batched", TF__OP_MATMUL, 2, {M(TF_F64, 3, 4, 2, 3), M(TF_F64, 3, 4, 3, 5)}, NO_PARAMS,
     0, TF_OK, M(TF_F64, 3, 4, 2, 5)},
    {"matmul batched rank 4", TF__OP_MATMUL, 2, {M(TF_C64, 4, 2, 3, 4, 5),
     M(TF_C64, 4, 2, 3, 5, 6)}, NO_PARAMS, 0, TF_OK, M(TF_C64, 4, 2, 3, 4, 6)},
    {"matmul output at the bound", TF__OP_MATMUL, 2, {M(TF_F32, 2, BIG, 1), M(TF_F32, 2, 1, BIG)},
     NO_PARAMS, 0, TF_OK, M(TF_F32, 2, BIG, BIG)},
};

static const infer_case invalid_cases[] = {
    {"add dtypes", TF__OP_ADD, 2, {M(TF_F32, 1, 3), M(TF_F64, 1, 3)}, NO_PARAMS, 0, TF_ERR_DTYPE,
     NO_META},
    {"div dtypes", TF__OP_DIV, 2, {M(TF_C64, 1, 3), M(TF_C128, 1, 3)}, NO_PARAMS, 0, TF_ERR_DTYPE,
     NO_META},
    {"axpby dtypes", TF__OP_AXPBY, 2, {M(TF_F64, 1, 3), M(TF_C128, 1, 3)}, NO_PARAMS, 0,
     TF_ERR_DTYPE, NO_META},
    {"sub shapes", TF__OP_SUB, 2, {M(TF_F32, 2, 2, 3), M(TF_F32, 2, 3, 2)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"mul ranks", TF__OP_MUL, 2, {M(TF_F32, 1, 6), M(TF_F32, 2, 2, 3)}, NO_PARAMS, 0, TF_ERR_SHAPE,
     NO_META},
    {"add scalar and [1]", TF__OP_ADD, 2, {M(TF_F64, 0, 0), M(TF_F64, 1, 1)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"axpby shapes", TF__OP_AXPBY, 2, {M(TF_F64, 1, 3), M(TF_F64, 1, 4)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"permute too few axes", TF__OP_PERMUTE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(2, 1, 0), 0, TF_ERR_AXIS,
     NO_META},
    {"permute too many axes", TF__OP_PERMUTE, 1, {M(TF_F32, 2, 2, 3)}, P(3, 1, 0, 2), 0,
     TF_ERR_AXIS, NO_META},
    {"permute axis out of range", TF__OP_PERMUTE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(3, 0, 1, 3), 0,
     TF_ERR_AXIS, NO_META},
    {"permute negative axis", TF__OP_PERMUTE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(3, -1, 0, 1), 0,
     TF_ERR_AXIS, NO_META},
    {"permute repeated axis", TF__OP_PERMUTE, 1, {M(TF_F32, 3, 2, 3, 4)}, P(3, 0, 2, 0), 0,
     TF_ERR_AXIS, NO_META},
    {"sum axis out of range", TF__OP_REDUCE_SUM, 1, {M(TF_F32, 3, 2, 3, 4)}, P(1, 3), 0,
     TF_ERR_AXIS, NO_META},
    {"sum negative axis", TF__OP_REDUCE_SUM, 1, {M(TF_F32, 3, 2, 3, 4)}, P(1, -1), 0, TF_ERR_AXIS,
     NO_META},
    {"sum repeated axis", TF__OP_REDUCE_SUM, 1, {M(TF_F64, 3, 2, 3, 4)}, P(2, 1, 1), 0, TF_ERR_AXIS,
     NO_META},
    {"max more axes than rank", TF__OP_REDUCE_MAX, 1, {M(TF_F64, 2, 2, 3)}, P(3, 0, 1, 0), 0,
     TF_ERR_AXIS, NO_META},
    {"min axis on a scalar", TF__OP_REDUCE_MIN, 1, {M(TF_F64, 0, 0)}, P(1, 0), 0, TF_ERR_AXIS,
     NO_META},
    {"max of c64", TF__OP_REDUCE_MAX, 1, {M(TF_C64, 1, 4)}, NO_PARAMS, 0, TF_ERR_DTYPE, NO_META},
    {"max of c128", TF__OP_REDUCE_MAX, 1, {M(TF_C128, 1, 4)}, P(1, 0), 0, TF_ERR_DTYPE, NO_META},
    {"min of c64", TF__OP_REDUCE_MIN, 1, {M(TF_C64, 2, 2, 2)}, P(1, 1), TF__REDUCE_KEEPDIMS,
     TF_ERR_DTYPE, NO_META},
    {"min of c128", TF__OP_REDUCE_MIN, 1, {M(TF_C128, 1, 4)}, NO_PARAMS, 0, TF_ERR_DTYPE, NO_META},
    {"reshape zero dim", TF__OP_RESHAPE, 1, {M(TF_F32, 1, 6)}, P(2, 0, 6), 0, TF_ERR_BAD_SHAPE,
     NO_META},
    {"reshape negative dims", TF__OP_RESHAPE, 1, {M(TF_F32, 1, 6)}, P(2, -2, -3), 0,
     TF_ERR_BAD_SHAPE, NO_META},
    {"reshape -1 is no wildcard", TF__OP_RESHAPE, 1, {M(TF_F32, 1, 6)}, P(2, 2, -1), 0,
     TF_ERR_BAD_SHAPE, NO_META},
    {"reshape count mismatch", TF__OP_RESHAPE, 1, {M(TF_F32, 2, 2, 3)}, P(2, 5, 5), 0, TF_ERR_SHAPE,
     NO_META},
    {"reshape to scalar from 2", TF__OP_RESHAPE, 1, {M(TF_F64, 1, 2)}, NO_PARAMS, 0, TF_ERR_SHAPE,
     NO_META},
    {"matmul inner mismatch", TF__OP_MATMUL, 2, {M(TF_F32, 2, 2, 3), M(TF_F32, 2, 4, 5)}, NO_PARAMS,
     0, TF_ERR_SHAPE, NO_META},
    {"matmul batch mismatch", TF__OP_MATMUL, 2, {M(TF_F64, 3, 2, 2, 3), M(TF_F64, 3, 3, 3, 5)},
     NO_PARAMS, 0, TF_ERR_SHAPE, NO_META},
    {"matmul rank 1", TF__OP_MATMUL, 2, {M(TF_F64, 1, 3), M(TF_F64, 1, 3)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"matmul rank 1 by 2", TF__OP_MATMUL, 2, {M(TF_F64, 1, 3), M(TF_F64, 2, 3, 1)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"matmul scalars", TF__OP_MATMUL, 2, {M(TF_F64, 0, 0), M(TF_F64, 0, 0)}, NO_PARAMS, 0,
     TF_ERR_SHAPE, NO_META},
    {"matmul ranks differ", TF__OP_MATMUL, 2, {M(TF_F64, 2, 2, 3), M(TF_F64, 3, 1, 3, 4)},
     NO_PARAMS, 0, TF_ERR_SHAPE, NO_META},
    {"matmul dtypes", TF__OP_MATMUL, 2, {M(TF_F32, 2, 2, 3), M(TF_C64, 2, 3, 2)}, NO_PARAMS, 0,
     TF_ERR_DTYPE, NO_META},
    {"matmul output too large", TF__OP_MATMUL, 2, {M(TF_F32, 2, BIG, 1), M(TF_F32, 2, 1, 2 * BIG)},
     NO_PARAMS, 0, TF_ERR_BAD_SHAPE, NO_META},
    {"matmul batched output too large", TF__OP_MATMUL, 2, {M(TF_F32, 3, 4, BIG, 1),
     M(TF_F32, 3, 4, 1, BIG)}, NO_PARAMS, 0, TF_ERR_BAD_SHAPE, NO_META},
    {"add with one input", TF__OP_ADD, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_INVALID_ARGUMENT,
     NO_META},
    {"axpby with three inputs", TF__OP_AXPBY, 3, {M(TF_F32, 1, 3), M(TF_F32, 1, 3),
     M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_INVALID_ARGUMENT, NO_META},
    {"neg with two inputs", TF__OP_NEG, 2, {M(TF_F32, 1, 3), M(TF_F32, 1, 3)}, NO_PARAMS, 0,
     TF_ERR_INVALID_ARGUMENT, NO_META},
    {"matmul with no input", TF__OP_MATMUL, 0, {NO_META}, NO_PARAMS, 0, TF_ERR_INVALID_ARGUMENT,
     NO_META},
    {"sum with no input", TF__OP_REDUCE_SUM, 0, {NO_META}, NO_PARAMS, 0, TF_ERR_INVALID_ARGUMENT,
     NO_META},
    {"kind none", TF__OP_NONE, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_UNSUPPORTED, NO_META},
    {"kind free", TF__OP_FREE, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_UNSUPPORTED, NO_META},
    {"test_fault with two inputs", TF__OP_TEST_FAULT, 2, {M(TF_F32, 1, 3), M(TF_F32, 1, 3)},
     NO_PARAMS, 0, TF_ERR_INVALID_ARGUMENT, NO_META},
    {"kind count", TF__OP_KIND_COUNT, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_UNSUPPORTED,
     NO_META},
    {"kind 999", (tf__op_kind)999, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_UNSUPPORTED, NO_META},
    {"kind -1", (tf__op_kind)-1, 1, {M(TF_F32, 1, 3)}, NO_PARAMS, 0, TF_ERR_UNSUPPORTED, NO_META},
    {"nine params", TF__OP_PERMUTE, 1, {M(TF_F32, 1, 3)}, P(9, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0,
     TF_ERR_AXIS, NO_META},
    {"negative param count", TF__OP_RESHAPE, 1, {M(TF_F32, 1, 3)}, -1, {0}, 0, TF_ERR_AXIS,
     NO_META},
    {"input with a zero dim", TF__OP_NEG, 1, {M(TF_F32, 2, 3, 0)}, NO_PARAMS, 0, TF_ERR_BAD_SHAPE,
     NO_META},
    {"second input with a negative dim", TF__OP_ADD, 2, {M(TF_F32, 1, 3), M(TF_F32, 1, -3)},
     NO_PARAMS, 0, TF_ERR_BAD_SHAPE, NO_META},
    {"input of rank 9", TF__OP_COPY, 1, {M(TF_F32, 9, 1, 1, 1, 1, 1, 1, 1, 1)}, NO_PARAMS, 0,
     TF_ERR_BAD_SHAPE, NO_META},
    {"input of unknown dtype", TF__OP_EXP, 1, {M((tf_dtype)9, 1, 3)}, NO_PARAMS, 0, TF_ERR_DTYPE,
     NO_META},
    {"input too large", TF__OP_ABS, 1, {M(TF_F64, 3, BIG, BIG, 2)}, NO_PARAMS, 0, TF_ERR_BAD_SHAPE,
     NO_META},
};

static char msg[512];

/* Runs one case and returns its status; the output is poisoned first so a partial write shows. */
static tf_status run_case(const infer_case *c, tf__meta *out) {
    memset(out, 0x7B, sizeof *out);
    msg[0] = '\0';
    return tf__infer_output(c->kind, c->in, c->n_inputs, c->params, c->n_params, c->flags, out,
                            msg, sizeof msg);
}

/* Every valid operation yields exactly its documented output dtype, rank and shape. */
START_TEST(test_valid_outputs) {
    const infer_case *c = &valid_cases[_i];
    tf__meta out;
    tf_status st = run_case(c, &out);
    ck_assert_msg(st == TF_OK, "%s: %s (%s)", c->what, tf_status_name(st), msg);
    ck_assert_msg(out.dtype == c->out.dtype, "%s: dtype %d, want %d", c->what, (int)out.dtype,
                  (int)c->out.dtype);
    ck_assert_msg(out.rank == c->out.rank, "%s: rank %d, want %d", c->what, out.rank, c->out.rank);
    for (int d = 0; d < c->out.rank; d++)
        ck_assert_msg(out.shape[d] == c->out.shape[d], "%s: dim %d is %lld, want %lld", c->what, d,
                      (long long)out.shape[d], (long long)c->out.shape[d]);
    /* With no parameters the caller may pass NULL for them, and gets the same answer. */
    if (c->n_params == 0) {
        tf__meta again;
        ck_assert_int_eq(tf__infer_output(c->kind, c->in, c->n_inputs, NULL, 0, c->flags, &again,
                                          msg, sizeof msg),
                         TF_OK);
        ck_assert_int_eq(again.rank, out.rank);
        ck_assert(memcmp(again.shape, out.shape, sizeof(int64_t) * (size_t)out.rank) == 0);
    }
}
END_TEST

/* Every invalid operation is refused with its typed status and a message saying why. */
START_TEST(test_invalid_refused) {
    const infer_case *c = &invalid_cases[_i];
    tf__meta out;
    tf_status st = run_case(c, &out);
    ck_assert_msg(st == c->expect, "%s: got %s (%s), want %s", c->what, tf_status_name(st), msg,
                  tf_status_name(c->expect));
    ck_assert_msg(msg[0] != '\0', "%s: no message", c->what);
    ck_assert_msg(strlen(msg) < sizeof msg - 1, "%s: message fills the buffer", c->what);
}
END_TEST

/*
 * A message longer than the caller's buffer is cut and still terminated, never written past the
 * end.
 */
START_TEST(test_invalid_short_buffer) {
    const infer_case *c = &invalid_cases[_i];
    struct {
        char buf[12];
        char guard[32];
    } m;
    memset(&m, 0x55, sizeof m);
    tf__meta out;
    tf_status st = tf__infer_output(c->kind, c->in, c->n_inputs, c->params, c->n_params, c->flags,
                                    &out, m.buf, sizeof m.buf);
    ck_assert_int_eq(st, c->expect);
    ck_assert_msg(memchr(m.buf, '\0', sizeof m.buf) != NULL, "%s: not terminated", c->what);
    ck_assert_msg(m.buf[0] != '\0', "%s: no message", c->what);
    for (size_t i = 0; i < sizeof m.guard; i++) ck_assert_int_eq((unsigned char)m.guard[i], 0x55);
}
END_TEST

/* Every operation kind has a distinct name and the arity the wire format assumes. */
START_TEST(test_names_and_arity) {
    for (int k = 0; k < TF__OP_KIND_COUNT; k++) {
        const char *name = tf__op_name((tf__op_kind)k);
        ck_assert_msg(name && name[0] && strcmp(name, "unknown") != 0, "kind %d has no name", k);
        for (int j = 0; j < k; j++) ck_assert_str_ne(name, tf__op_name((tf__op_kind)j));
        int arity = tf__op_arity((tf__op_kind)k);
        int want = 1;
        if (k == TF__OP_NONE || k == TF__OP_CONTRACT || k == TF__OP_RUN_PREPARED)
            want = 0; /* their descriptors decide (one or two contracted inputs; a graph's) */
        else if (k == TF__OP_FREE)
            want = -1;
        else if (k == TF__OP_ADD || k == TF__OP_SUB || k == TF__OP_MUL || k == TF__OP_DIV ||
                 k == TF__OP_AXPBY || k == TF__OP_MATMUL || k == TF__OP_SOLVE)
            want = 2;
        ck_assert_msg(arity == want, "kind %s: arity %d, want %d", name, arity, want);
    }
    ck_assert_str_eq(tf__op_name(TF__OP_KIND_COUNT), "unknown");
    ck_assert_str_eq(tf__op_name((tf__op_kind)-3), "unknown");
}
END_TEST

/* One call of tf__check_new_meta. */
typedef struct new_meta_case {
    const char *what;
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK + 2];
    tf_status expect;
} new_meta_case;

static const new_meta_case new_meta_cases[] = {
    {"scalar", TF_F32, 0, {0}, TF_OK},
    {"rank 8", TF_C128, 8, {1, 2, 3, 4, 5, 6, 7, 8}, TF_OK},
    {"exactly 2^40 elements", TF_F64, 2, {BIG, BIG}, TF_OK},
    {"2^40 in eight dims", TF_F32, 8, {32, 32, 32, 32, 32, 32, 32, 32}, TF_OK},
    {"one dim of 2^40", TF_C64, 1, {(int64_t)1 << 40}, TF_OK},
    {"rank 9", TF_F32, 9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, TF_ERR_BAD_SHAPE},
    {"rank -1", TF_F32, -1, {0}, TF_ERR_BAD_SHAPE},
    {"dim 0", TF_F32, 3, {2, 0, 2}, TF_ERR_BAD_SHAPE},
    {"dim -1", TF_F64, 2, {-1, 4}, TF_ERR_BAD_SHAPE},
    {"last dim 0", TF_F64, 8, {1, 1, 1, 1, 1, 1, 1, 0}, TF_ERR_BAD_SHAPE},
    {"2^40 + 2^20 elements", TF_F32, 2, {BIG + 1, BIG}, TF_ERR_BAD_SHAPE},
    {"2^41 elements", TF_F32, 3, {BIG, BIG, 2}, TF_ERR_BAD_SHAPE},
    {"2^48 in eight dims", TF_F32, 8, {64, 64, 64, 64, 64, 64, 64, 64}, TF_ERR_BAD_SHAPE},
    {"one dim of 2^40 + 1", TF_F32, 1, {((int64_t)1 << 40) + 1}, TF_ERR_BAD_SHAPE},
    {"product overflows int64", TF_F32, 2, {(int64_t)1 << 32, (int64_t)1 << 32}, TF_ERR_BAD_SHAPE},
    {"INT64_MAX dims", TF_F32, 2, {INT64_MAX, INT64_MAX}, TF_ERR_BAD_SHAPE},
    {"dtype 0", (tf_dtype)0, 1, {3}, TF_ERR_DTYPE},
    {"dtype 5", (tf_dtype)5, 1, {3}, TF_ERR_DTYPE},
};

/*
 * A new tensor's metadata is accepted only with a known dtype, rank 0..8, dims >= 1 and at most
 * 2^40 elements.
 */
START_TEST(test_check_new_meta) {
    const new_meta_case *c = &new_meta_cases[_i];
    msg[0] = '\0';
    tf_status st = tf__check_new_meta(c->dtype, c->rank, c->shape, msg, sizeof msg);
    ck_assert_msg(st == c->expect, "%s: got %s (%s), want %s", c->what, tf_status_name(st), msg,
                  tf_status_name(c->expect));
    if (st != TF_OK) ck_assert_msg(msg[0] != '\0', "%s: no message", c->what);
}
END_TEST

/* Sizes follow the dtype and element count; rank 0 holds one element. */
START_TEST(test_numel_and_bytes) {
    static const struct {
        tf__meta m;
        int64_t numel;
        size_t bytes;
    } cases[] = {
        {M(TF_F32, 0, 0), 1, 4},
        {M(TF_F64, 1, 5), 5, 40},
        {M(TF_C64, 2, 3, 4), 12, 96},
        {M(TF_C128, 3, 2, 3, 4), 24, 384},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(tf__meta_numel(&cases[i].m), cases[i].numel);
        ck_assert_uint_eq(tf__meta_bytes(&cases[i].m), cases[i].bytes);
    }
    ck_assert_uint_eq(tf_dtype_size((tf_dtype)0), 0);
    ck_assert_str_eq(tf_dtype_name(TF_C64), "c64");
    ck_assert_str_eq(tf_dtype_name((tf_dtype)7), "unknown");
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *shape_rules_suite(void) {
    Suite *s = suite_create("shape-rules");
    TCase *tc = tcase_create("rules");
    tcase_add_loop_test(tc, test_valid_outputs, 0, N_OF(valid_cases));
    tcase_add_loop_test(tc, test_invalid_refused, 0, N_OF(invalid_cases));
    tcase_add_loop_test(tc, test_invalid_short_buffer, 0, N_OF(invalid_cases));
    tcase_add_test(tc, test_names_and_arity);
    tcase_add_loop_test(tc, test_check_new_meta, 0, N_OF(new_meta_cases));
    tcase_add_test(tc, test_numel_and_bytes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(shape_rules_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
