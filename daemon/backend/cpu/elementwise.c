/*
 * Elementwise kernels of the CPU backend: binary (add, sub, mul, div), unary
 * (neg, conj, abs, exp, log, sqrt, square) and the scalar-coefficient family (scale,
 * axpby), for f32, f64, c64 and c128.
 *
 * These run on short vectors very many times, so each (operation, dtype) pair
 * is one plain loop over restrict pointers, stamped out by a macro: dispatch
 * costs two switches per call, never a call per element, and nothing is
 * allocated. Complex data is interleaved {re, im}, which is exactly the layout
 * of C's float complex and double complex. Real log and sqrt of negative
 * numbers give NaN as IEEE says; that is a value, not an error.
 */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "daemon/backend/cpu/kernels.h"

/* One loop o[i] = a[i] OP b[i] per operator and dtype. */
#define DEFINE_BINARY(NAME, T, OP)                                                          \
    static void NAME(int64_t n, const T *restrict a, const T *restrict b, T *restrict o) { \
        for (int64_t i = 0; i < n; i++) o[i] = a[i] OP b[i];                                \
    }

DEFINE_BINARY(add_f32, float, +)
DEFINE_BINARY(add_f64, double, +)
DEFINE_BINARY(add_c64, float complex, +)
DEFINE_BINARY(add_c128, double complex, +)
DEFINE_BINARY(sub_f32, float, -)
DEFINE_BINARY(sub_f64, double, -)
DEFINE_BINARY(sub_c64, float complex, -)
DEFINE_BINARY(sub_c128, double complex, -)
DEFINE_BINARY(mul_f32, float, *)
DEFINE_BINARY(mul_f64, double, *)
DEFINE_BINARY(mul_c64, float complex, *)
DEFINE_BINARY(mul_c128, double complex, *)
DEFINE_BINARY(div_f32, float, /)
DEFINE_BINARY(div_f64, double, /)
DEFINE_BINARY(div_c64, float complex, /)
DEFINE_BINARY(div_c128, double complex, /)

/* Expands to the dtype switch calling PREFIX##_f32 ... PREFIX##_c128 on the op's two inputs. */
#define BINARY_DISPATCH(PREFIX)                                                               \
    switch (dtype) {                                                                          \
    case TF_F32: PREFIX##_f32(n, op->in[0].data, op->in[1].data, op->out.data); return TF_OK; \
    case TF_F64: PREFIX##_f64(n, op->in[0].data, op->in[1].data, op->out.data); return TF_OK; \
    case TF_C64: PREFIX##_c64(n, op->in[0].data, op->in[1].data, op->out.data); return TF_OK; \
    case TF_C128:                                                                             \
        PREFIX##_c128(n, op->in[0].data, op->in[1].data, op->out.data);                       \
        return TF_OK;                                                                         \
    }                                                                                         \
    break

/* Two switches per call pick one plain loop, so dispatch cost does not grow with n. */
tf_status tfd_cpu_binary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len) {
    (void)be;
    (void)stream;
    const tf_dtype dtype = op->in[0].dtype;
    const int64_t n = op->out.numel;
    switch (op->kind) {
    case TF__OP_ADD: BINARY_DISPATCH(add);
    case TF__OP_SUB: BINARY_DISPATCH(sub);
    case TF__OP_MUL: BINARY_DISPATCH(mul);
    case TF__OP_DIV: BINARY_DISPATCH(div);
    default:
        snprintf(msg, msg_len, "cpu: %s is not a binary operation", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
    return tfd_cpu_dtype_error(op, dtype, msg, msg_len);
}

/* One loop o[i] = EXPR per operation and dtype; TO differs from TI only for abs of complex. */
#define DEFINE_UNARY(NAME, TI, TO, EXPR)                                         \
    static void NAME(int64_t n, const TI *restrict x, TO *restrict o) {          \
        for (int64_t i = 0; i < n; i++) o[i] = EXPR;                             \
    }

DEFINE_UNARY(neg_f32, float, float, -x[i])
DEFINE_UNARY(neg_f64, double, double, -x[i])
DEFINE_UNARY(neg_c64, float complex, float complex, -x[i])
DEFINE_UNARY(neg_c128, double complex, double complex, -x[i])
DEFINE_UNARY(conj_f32, float, float, x[i])
DEFINE_UNARY(conj_f64, double, double, x[i])
DEFINE_UNARY(conj_c64, float complex, float complex, conjf(x[i]))
DEFINE_UNARY(conj_c128, double complex, double complex, conj(x[i]))
DEFINE_UNARY(abs_f32, float, float, fabsf(x[i]))
DEFINE_UNARY(abs_f64, double, double, fabs(x[i]))
DEFINE_UNARY(abs_c64, float complex, float, cabsf(x[i]))
DEFINE_UNARY(abs_c128, double complex, double, cabs(x[i]))
DEFINE_UNARY(exp_f32, float, float, expf(x[i]))
DEFINE_UNARY(exp_f64, double, double, exp(x[i]))
DEFINE_UNARY(exp_c64, float complex, float complex, cexpf(x[i]))
DEFINE_UNARY(exp_c128, double complex, double complex, cexp(x[i]))
DEFINE_UNARY(log_f32, float, float, logf(x[i]))
DEFINE_UNARY(log_f64, double, double, log(x[i]))
DEFINE_UNARY(log_c64, float complex, float complex, clogf(x[i]))
DEFINE_UNARY(log_c128, double complex, double complex, clog(x[i]))
DEFINE_UNARY(sqrt_f32, float, float, sqrtf(x[i]))
DEFINE_UNARY(sqrt_f64, double, double, sqrt(x[i]))
DEFINE_UNARY(sqrt_c64, float complex, float complex, csqrtf(x[i]))
DEFINE_UNARY(sqrt_c128, double complex, double complex, csqrt(x[i]))
DEFINE_UNARY(square_f32, float, float, x[i] * x[i])
DEFINE_UNARY(square_f64, double, double, x[i] * x[i])
DEFINE_UNARY(square_c64, float complex, float complex, x[i] * x[i])
DEFINE_UNARY(square_c128, double complex, double complex, x[i] * x[i])

/* Expands to the dtype switch calling PREFIX##_f32 ... PREFIX##_c128 on the op's input. */
#define UNARY_DISPATCH(PREFIX)                                                      \
    switch (dtype) {                                                                \
    case TF_F32: PREFIX##_f32(n, op->in[0].data, op->out.data); return TF_OK;       \
    case TF_F64: PREFIX##_f64(n, op->in[0].data, op->out.data); return TF_OK;       \
    case TF_C64: PREFIX##_c64(n, op->in[0].data, op->out.data); return TF_OK;       \
    case TF_C128: PREFIX##_c128(n, op->in[0].data, op->out.data); return TF_OK;     \
    }                                                                               \
    break

/* Same shape as binary: abs of a complex dtype writes the real dtype the shape rules chose. */
tf_status tfd_cpu_unary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                        size_t msg_len) {
    (void)be;
    (void)stream;
    const tf_dtype dtype = op->in[0].dtype;
    const int64_t n = op->out.numel;
    switch (op->kind) {
    case TF__OP_NEG: UNARY_DISPATCH(neg);
    case TF__OP_CONJ: UNARY_DISPATCH(conj);
    case TF__OP_ABS: UNARY_DISPATCH(abs);
    case TF__OP_EXP: UNARY_DISPATCH(exp);
    case TF__OP_LOG: UNARY_DISPATCH(log);
    case TF__OP_SQRT: UNARY_DISPATCH(sqrt);
    case TF__OP_SQUARE: UNARY_DISPATCH(square);
    default:
        snprintf(msg, msg_len, "cpu: %s is not a unary operation", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
    return tfd_cpu_dtype_error(op, dtype, msg, msg_len);
}

/*
 * Scale and axpby compute in double precision (double complex for complex
 * dtypes) and round once on store, so f32 results do not suffer from a
 * rounded coefficient or from cancellation between the two products.
 */
#define DEFINE_SCALE(NAME, T, TC)                                                 \
    static void NAME(int64_t n, TC alpha, const T *restrict x, T *restrict o) {  \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(alpha * (TC)x[i]);            \
    }

#define DEFINE_AXPBY(NAME, T, TC)                                                        \
    static void NAME(int64_t n, TC alpha, const T *restrict x, TC beta, const T *restrict y, \
                     T *restrict o) {                                                    \
        for (int64_t i = 0; i < n; i++) o[i] = (T)(alpha * (TC)x[i] + beta * (TC)y[i]);  \
    }

DEFINE_SCALE(scale_f32, float, double)
DEFINE_SCALE(scale_f64, double, double)
DEFINE_SCALE(scale_c64, float complex, double complex)
DEFINE_SCALE(scale_c128, double complex, double complex)
DEFINE_AXPBY(axpby_f32, float, double)
DEFINE_AXPBY(axpby_f64, double, double)
DEFINE_AXPBY(axpby_c64, float complex, double complex)
DEFINE_AXPBY(axpby_c128, double complex, double complex)

/* Coefficients arrive as {re, im} doubles for every dtype and are narrowed here, once per call. */
tf_status tfd_cpu_axpby(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                        size_t msg_len) {
    (void)be;
    (void)stream;
    const tf_dtype dtype = op->in[0].dtype;
    const int64_t n = op->out.numel;
    /* Real dtypes use only the real part of each coefficient. */
    const double ar = op->alpha.re, br = op->beta.re;
    const double complex az = CMPLX(op->alpha.re, op->alpha.im);
    const double complex bz = CMPLX(op->beta.re, op->beta.im);
    const void *x = op->in[0].data;
    void *o = op->out.data;
    if (op->kind == TF__OP_SCALE) {
        switch (dtype) {
        case TF_F32: scale_f32(n, ar, x, o); return TF_OK;
        case TF_F64: scale_f64(n, ar, x, o); return TF_OK;
        case TF_C64: scale_c64(n, az, x, o); return TF_OK;
        case TF_C128: scale_c128(n, az, x, o); return TF_OK;
        }
        return tfd_cpu_dtype_error(op, dtype, msg, msg_len);
    }
    if (op->kind == TF__OP_AXPBY) {
        const void *y = op->in[1].data;
        switch (dtype) {
        case TF_F32: axpby_f32(n, ar, x, br, y, o); return TF_OK;
        case TF_F64: axpby_f64(n, ar, x, br, y, o); return TF_OK;
        case TF_C64: axpby_c64(n, az, x, bz, y, o); return TF_OK;
        case TF_C128: axpby_c128(n, az, x, bz, y, o); return TF_OK;
        }
        return tfd_cpu_dtype_error(op, dtype, msg, msg_len);
    }
    snprintf(msg, msg_len, "cpu: %s is not a scale or axpby operation", tf__op_name(op->kind));
    return TF_ERR_INTERNAL;
}
