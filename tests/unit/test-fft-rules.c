/*
 * Unit tests of the FFT shape rules (common/fft-rules.c, tf__infer_fft).
 *
 * The client library and the daemon both decide with tf__infer_fft whether an
 * FFT descriptor is valid for its input and what the output looks like, so a
 * wrong rule either refuses a valid numpy-style call or hands a backend a
 * layout it would misread. Two tables drive the tests, in the style of
 * test-shape-rules.c: valid transforms with the exact output metadata they
 * must produce (C2C keeps everything, R2C halves the last listed axis, which
 * need not be the last axis of the tensor, C2R restores it to last_length,
 * both parities, both precisions), and invalid ones with the typed status
 * each must be refused with and a word the message must contain (axes out of
 * range, negative or repeated, none or too many, a rank-0 tensor, a real
 * tensor to C2C, a complex one to R2C, a real one to C2R, a last_length that
 * does not fit, an unknown kind or norm, a bad input shape).
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ops.h"

/* Metadata literal: M(dtype, rank, dims...). */
#define M(dt, r, ...) {dt, r, {__VA_ARGS__}}
/* An FFT descriptor literal: F(kind, inverse, norm, last_length, n_axes, axes...). */
#define F(k, inv, nm, last, n, ...) {(tf__fft_kind)(k), inv, (tf__fft_norm)(nm), n, {__VA_ARGS__}, last}

enum { C2C = TF__FFT_C2C, R2C = TF__FFT_R2C, C2R = TF__FFT_C2R };
enum { BACK = TF__FFT_NORM_BACKWARD, ORTHO = TF__FFT_NORM_ORTHO, FWD = TF__FFT_NORM_FORWARD };

/* One call of tf__infer_fft and what it must answer. */
typedef struct fft_case {
    const char *what;
    tf__fft fft;
    tf__meta in;
    tf_status expect;
    tf__meta out;        /* when expect == TF_OK */
    const char *needle;  /* when refused: a word the message must contain */
} fft_case;

static const fft_case valid_cases[] = {
    {"c2c 1-D c64", F(C2C, 0, BACK, 0, 1, 0), M(TF_C64, 1, 16), TF_OK, M(TF_C64, 1, 16), NULL},
    {"c2c inverse c128 odd", F(C2C, 1, ORTHO, 0, 1, 0), M(TF_C128, 1, 7), TF_OK, M(TF_C128, 1, 7), NULL},
    {"c2c 2-D of 3-D batched", F(C2C, 0, FWD, 0, 2, 1, 2), M(TF_C64, 3, 4, 5, 6), TF_OK,
     M(TF_C64, 3, 4, 5, 6), NULL},
    {"c2c non-last axis", F(C2C, 0, BACK, 0, 1, 0), M(TF_C128, 3, 11, 2, 3), TF_OK,
     M(TF_C128, 3, 11, 2, 3), NULL},
    {"c2c axes in any order", F(C2C, 1, BACK, 0, 3, 2, 0, 1), M(TF_C64, 3, 2, 3, 4), TF_OK,
     M(TF_C64, 3, 2, 3, 4), NULL},
    {"c2c rank 8", F(C2C, 0, BACK, 0, 1, 7), M(TF_C64, 8, 1, 2, 1, 2, 1, 2, 1, 5), TF_OK,
     M(TF_C64, 8, 1, 2, 1, 2, 1, 2, 1, 5), NULL},
    {"r2c f32 even", F(R2C, 0, BACK, 0, 1, 0), M(TF_F32, 1, 16), TF_OK, M(TF_C64, 1, 9), NULL},
    {"r2c f64 odd", F(R2C, 0, ORTHO, 0, 1, 0), M(TF_F64, 1, 11), TF_OK, M(TF_C128, 1, 6), NULL},
    {"r2c length 1", F(R2C, 0, BACK, 0, 1, 0), M(TF_F64, 1, 1), TF_OK, M(TF_C128, 1, 1), NULL},
    {"r2c 2-D halves the last listed", F(R2C, 0, BACK, 0, 2, 1, 2), M(TF_F32, 3, 3, 8, 10), TF_OK,
     M(TF_C64, 3, 3, 8, 6), NULL},
    {"r2c halves a leading axis", F(R2C, 0, FWD, 0, 2, 1, 0), M(TF_F64, 2, 7, 4), TF_OK,
     M(TF_C128, 2, 4, 4), NULL},
    {"r2c last_length ignored", F(R2C, 0, BACK, 99, 1, 1), M(TF_F32, 2, 2, 5), TF_OK,
     M(TF_C64, 2, 2, 3), NULL},
    {"c2r c64 even", F(C2R, 1, BACK, 16, 1, 0), M(TF_C64, 1, 9), TF_OK, M(TF_F32, 1, 16), NULL},
    {"c2r c128 odd", F(C2R, 1, BACK, 11, 1, 0), M(TF_C128, 1, 6), TF_OK, M(TF_F64, 1, 11), NULL},
    {"c2r length 1", F(C2R, 1, ORTHO, 1, 1, 0), M(TF_C128, 1, 1), TF_OK, M(TF_F64, 1, 1), NULL},
    {"c2r 3-D over a middle axis", F(C2R, 1, FWD, 7, 2, 2, 1), M(TF_C64, 3, 2, 4, 5), TF_OK,
     M(TF_F32, 3, 2, 7, 5), NULL},
};

static const fft_case invalid_cases[] = {
    {"axis out of range", F(C2C, 0, BACK, 0, 1, 2), M(TF_C64, 2, 3, 4), TF_ERR_AXIS, M(0, 0, 0), "2"},
    {"negative axis", F(C2C, 0, BACK, 0, 1, -1), M(TF_C64, 2, 3, 4), TF_ERR_AXIS, M(0, 0, 0), "-1"},
    {"axis repeated", F(C2C, 0, BACK, 0, 2, 1, 1), M(TF_C64, 2, 3, 4), TF_ERR_AXIS, M(0, 0, 0), "twice"},
    {"no axes", F(C2C, 0, BACK, 0, 0, 0), M(TF_C64, 2, 3, 4), TF_ERR_AXIS, M(0, 0, 0), "axes"},
    {"more axes than the rank", F(C2C, 0, BACK, 0, 3, 0, 1, 2), M(TF_C64, 2, 3, 4), TF_ERR_AXIS,
     M(0, 0, 0), "rank"},
    {"rank-0 tensor", F(C2C, 0, BACK, 0, 1, 0), M(TF_C64, 0, 0), TF_ERR_AXIS, M(0, 0, 0), "rank-0"},
    {"real tensor to c2c", F(C2C, 0, BACK, 0, 1, 0), M(TF_F32, 1, 8), TF_ERR_DTYPE, M(0, 0, 0), "rfft"},
    {"real tensor to inverse c2c", F(C2C, 1, BACK, 0, 1, 0), M(TF_F64, 1, 8), TF_ERR_DTYPE, M(0, 0, 0),
     "rfft"},
    {"complex tensor to r2c", F(R2C, 0, BACK, 0, 1, 0), M(TF_C64, 1, 8), TF_ERR_DTYPE, M(0, 0, 0),
     "C2C"},
    {"real tensor to c2r", F(C2R, 1, BACK, 8, 1, 0), M(TF_F64, 1, 5), TF_ERR_DTYPE, M(0, 0, 0), "c64"},
    {"c2r last_length too long", F(C2R, 1, BACK, 12, 1, 0), M(TF_C64, 1, 5), TF_ERR_SHAPE, M(0, 0, 0),
     "12"},
    {"c2r last_length too short", F(C2R, 1, BACK, 7, 1, 1), M(TF_C128, 2, 2, 5), TF_ERR_SHAPE,
     M(0, 0, 0), "5"},
    {"c2r last_length zero", F(C2R, 1, BACK, 0, 1, 0), M(TF_C64, 1, 1), TF_ERR_SHAPE, M(0, 0, 0),
     "last_length"},
    {"c2r last_length negative", F(C2R, 1, BACK, -4, 1, 0), M(TF_C64, 1, 1), TF_ERR_SHAPE, M(0, 0, 0),
     "-4"},
    {"c2r output too large", F(C2R, 1, BACK, (int64_t)1 << 39, 1, 1), M(TF_C64, 2, 3, ((int64_t)1 << 38) + 1),
     TF_ERR_BAD_SHAPE, M(0, 0, 0), NULL},
    {"unknown kind", F(3, 0, BACK, 0, 1, 0), M(TF_C64, 1, 8), TF_ERR_INVALID_ARGUMENT, M(0, 0, 0),
     "kind"},
    {"negative kind", F(-1, 0, BACK, 0, 1, 0), M(TF_C64, 1, 8), TF_ERR_INVALID_ARGUMENT, M(0, 0, 0),
     "kind"},
    {"unknown norm", F(C2C, 0, 3, 0, 1, 0), M(TF_C64, 1, 8), TF_ERR_INVALID_ARGUMENT, M(0, 0, 0), "norm"},
    {"zero dimension", F(C2C, 0, BACK, 0, 1, 0), M(TF_C64, 1, 0), TF_ERR_BAD_SHAPE, M(0, 0, 0), NULL},
    {"unknown dtype", F(C2C, 0, BACK, 0, 1, 0), M(9, 1, 4), TF_ERR_DTYPE, M(0, 0, 0), NULL},
};

/* A valid transform yields exactly the documented output metadata. */
START_TEST(test_valid_outputs) {
    const fft_case *c = &valid_cases[_i];
    char msg[256] = "";
    tf__meta out;
    memset(&out, 0x5a, sizeof out);
    tf_status st = tf__infer_fft(&c->fft, &c->in, &out, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "%s: refused with %s: %s", c->what, tf_status_name(st), msg);
    ck_assert_msg(out.dtype == c->out.dtype, "%s: dtype %s, expected %s", c->what,
                  tf_dtype_name(out.dtype), tf_dtype_name(c->out.dtype));
    ck_assert_int_eq(out.rank, c->out.rank);
    for (int i = 0; i < out.rank; i++)
        ck_assert_msg(out.shape[i] == c->out.shape[i], "%s: axis %d is %lld, expected %lld", c->what,
                      i, (long long)out.shape[i], (long long)c->out.shape[i]);
}
END_TEST

/* An invalid transform is refused with its typed status and a readable message naming the fault. */
START_TEST(test_invalid_refused) {
    const fft_case *c = &invalid_cases[_i];
    char msg[256] = "";
    tf__meta out;
    tf_status st = tf__infer_fft(&c->fft, &c->in, &out, msg, sizeof msg);
    ck_assert_msg(st == c->expect, "%s: got %s, expected %s (%s)", c->what, tf_status_name(st),
                  tf_status_name(c->expect), msg);
    ck_assert_msg(strlen(msg) >= 10, "%s: message \"%s\" is not readable", c->what, msg);
    if (c->needle)
        ck_assert_msg(strstr(msg, c->needle) != NULL, "%s: \"%s\" does not mention \"%s\"", c->what,
                      msg, c->needle);
}
END_TEST

/* A message buffer too short for the reason is cut, never overrun. */
START_TEST(test_short_buffer) {
    const fft_case *c = &invalid_cases[_i];
    char msg[12];
    memset(msg, 'x', sizeof msg);
    tf__meta out;
    ck_assert_int_eq(tf__infer_fft(&c->fft, &c->in, &out, msg, 8), c->expect);
    ck_assert_int_eq(msg[7], '\0');
    ck_assert_int_eq(msg[8], 'x');
}
END_TEST

/* The output of R2C over any axis set is what C2R takes back with the original length. */
START_TEST(test_r2c_c2r_round_trip) {
    for (int64_t n = 1; n <= 9; n++) {
        for (int last = 0; last < 3; last++) {
            tf__meta real = M(TF_F64, 3, 3, 4, 5);
            real.shape[last] = n;
            tf__fft fwd = F(R2C, 0, BACK, 0, 2, (last + 1) % 3, last);
            tf__meta half, back;
            char msg[256];
            ck_assert_int_eq(tf__infer_fft(&fwd, &real, &half, msg, sizeof msg), TF_OK);
            tf__fft inv = fwd;
            inv.kind = TF__FFT_C2R;
            inv.last_length = n;
            ck_assert_msg(tf__infer_fft(&inv, &half, &back, msg, sizeof msg) == TF_OK, "n=%lld: %s",
                          (long long)n, msg);
            ck_assert(back.dtype == TF_F64);
            ck_assert(memcmp(back.shape, real.shape, sizeof real.shape[0] * 3) == 0);
        }
    }
}
END_TEST

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *fft_rules_suite(void) {
    Suite *s = suite_create("fft-rules");
    TCase *tc = tcase_create("rules");
    tcase_add_loop_test(tc, test_valid_outputs, 0, N_OF(valid_cases));
    tcase_add_loop_test(tc, test_invalid_refused, 0, N_OF(invalid_cases));
    tcase_add_loop_test(tc, test_short_buffer, 0, N_OF(invalid_cases));
    tcase_add_test(tc, test_r2c_c2r_round_trip);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(fft_rules_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
