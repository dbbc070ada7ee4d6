/*
 * Reduction kernels of the CPU backend: sum (f32, f64, c64, c128), max and
 * min (f32, f64; complex numbers have no order).
 *
 * The input is walked once in row-major order while an odometer tracks the
 * output element each input element folds into (its index with the reduced
 * axes dropped). In that order the first element of every group is the one
 * whose reduced indices are all zero, so "initialise, then combine" needs no
 * separate pass and no per-element flags: a row is either the group's first
 * or a later one. Keepdims only inserts size-1 axes, which do not change a
 * linear output index, so the kernels ignore it. f32 and c64 sums accumulate
 * in double precision and round once at the end. Max and min propagate NaN.
 */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "daemon/backend/cpu/kernels.h"

/* The geometry of one reduction, shared by every dtype's loop. */
typedef struct walk {
    int rank;                      /* at least 1: a rank-0 input is walked as shape [1] */
    int64_t shape[TF_MAX_RANK];    /* input shape */
    int64_t ostride[TF_MAX_RANK];  /* output step per step along an input axis; 0 if reduced */
    int reduced[TF_MAX_RANK];      /* 1 on reduced axes */
    int64_t inner;                 /* length of the last axis: one row */
    int64_t rows;                  /* number of rows */
} walk;

/* Re-derives the geometry and checks it against op->out, because the loops index memory with it. */
static tf_status setup_walk(const tfd_op *op, walk *w, char *msg, size_t msg_len) {
    const tfd_tensor_view *in = &op->in[0];
    if (in->rank < 0 || in->rank > TF_MAX_RANK || op->n_params < 0 || op->n_params > in->rank) {
        snprintf(msg, msg_len, "cpu: %s of rank %d got %d axes", tf__op_name(op->kind), in->rank,
                 op->n_params);
        return TF_ERR_AXIS;
    }
    w->rank = in->rank;
    for (int ax = 0; ax < in->rank; ax++) {
        w->shape[ax] = in->shape[ax];
        w->reduced[ax] = op->n_params == 0;
    }
    for (int i = 0; i < op->n_params; i++) {
        int64_t ax = op->params[i];
        if (ax < 0 || ax >= in->rank || w->reduced[ax]) {
            snprintf(msg, msg_len, "cpu: %s axis %lld is out of range or repeated",
                     tf__op_name(op->kind), (long long)ax);
            return TF_ERR_AXIS;
        }
        w->reduced[ax] = 1;
    }
    if (w->rank == 0) {
        w->rank = 1;
        w->shape[0] = 1;
        w->reduced[0] = 1;
    }
    int64_t s = 1;
    for (int ax = w->rank - 1; ax >= 0; ax--) {
        w->ostride[ax] = w->reduced[ax] ? 0 : s;
        if (!w->reduced[ax]) s *= w->shape[ax];
    }
    if (s != op->out.numel) {
        snprintf(msg, msg_len, "cpu: %s output holds %lld elements, the reduction makes %lld",
                 tf__op_name(op->kind), (long long)op->out.numel, (long long)s);
        return TF_ERR_SHAPE;
    }
    w->inner = w->shape[w->rank - 1];
    w->rows = 1;
    for (int ax = 0; ax < w->rank - 1; ax++) w->rows *= w->shape[ax];
    return TF_OK;
}

/* Steps the odometer over all axes but the last, keeping the output offset and the count of
 * reduced axes at a nonzero index (zero means the next row starts its groups). */
static inline void advance(const walk *w, int64_t *idx, int64_t *o, int *nz) {
    for (int ax = w->rank - 2; ax >= 0; ax--) {
        *o += w->ostride[ax];
        if (++idx[ax] < w->shape[ax]) {
            if (w->reduced[ax] && idx[ax] == 1) (*nz)++;
            return;
        }
        *o -= w->ostride[ax] * w->shape[ax];
        if (w->reduced[ax] && w->shape[ax] > 1) (*nz)--;
        idx[ax] = 0;
    }
}

/* One walk per (operation, dtype): INIT starts a group, COMBINE folds one more element in. */
#define DEFINE_REDUCE(NAME, T, ACC, INIT, COMBINE)                                        \
    static void NAME(const walk *w, const T *restrict x, ACC *restrict acc) {             \
        int64_t idx[TF_MAX_RANK] = {0};                                                   \
        int64_t o = 0;                                                                    \
        int nz = 0;                                                                       \
        const int64_t inner = w->inner;                                                   \
        const int last_reduced = w->reduced[w->rank - 1];                                 \
        for (int64_t row = 0; row < w->rows; row++, x += inner) {                         \
            if (last_reduced) {                                                           \
                int64_t j = 0;                                                            \
                ACC a;                                                                    \
                if (nz == 0) {                                                            \
                    a = INIT(x[0]);                                                       \
                    j = 1;                                                                \
                } else {                                                                  \
                    a = acc[o];                                                           \
                }                                                                         \
                for (; j < inner; j++) a = COMBINE(a, x[j]);                              \
                acc[o] = a;                                                               \
            } else if (nz == 0) {                                                         \
                for (int64_t j = 0; j < inner; j++) acc[o + j] = INIT(x[j]);              \
            } else {                                                                      \
                for (int64_t j = 0; j < inner; j++) acc[o + j] = COMBINE(acc[o + j], x[j]); \
            }                                                                             \
            advance(w, idx, &o, &nz);                                                     \
        }                                                                                 \
    }

#define INIT_D(v) ((double)(v))
#define INIT_Z(v) ((double complex)(v))
#define INIT_SAME(v) (v)
#define ADD_D(a, v) ((a) + (double)(v))
#define ADD_Z(a, v) ((a) + (double complex)(v))
#define ADD_SAME(a, v) ((a) + (v))
/* NaN wins: a NaN element replaces the accumulator, and no comparison replaces a NaN one. */
#define MAX_NAN(a, v) ((isnan(v) || (v) > (a)) ? (v) : (a))
#define MIN_NAN(a, v) ((isnan(v) || (v) < (a)) ? (v) : (a))

DEFINE_REDUCE(sum_f32, float, double, INIT_D, ADD_D)
DEFINE_REDUCE(sum_f64, double, double, INIT_SAME, ADD_SAME)
DEFINE_REDUCE(sum_c64, float complex, double complex, INIT_Z, ADD_Z)
DEFINE_REDUCE(sum_c128, double complex, double complex, INIT_SAME, ADD_SAME)
DEFINE_REDUCE(max_f32, float, float, INIT_SAME, MAX_NAN)
DEFINE_REDUCE(max_f64, double, double, INIT_SAME, MAX_NAN)
DEFINE_REDUCE(min_f32, float, float, INIT_SAME, MIN_NAN)
DEFINE_REDUCE(min_f64, double, double, INIT_SAME, MIN_NAN)

/* Double-precision accumulators for an f32 or c64 sum: on the stack when small, else heap. */
#define SMALL_ACC 256
typedef union acc_space {
    double d[2 * SMALL_ACC];
    double complex z[SMALL_ACC];
} acc_space;

/* Returns accumulator storage for n elements of `esize` bytes, or NULL when out of memory. */
static void *acc_get(acc_space *small, int64_t n, size_t esize) {
    if ((size_t)n * esize <= sizeof *small) return small;
    return malloc((size_t)n * esize);
}

static void acc_put(acc_space *small, void *p) {
    if (p != small) free(p);
}

/* Sums of the single-precision dtypes go through a double buffer, then round once. */
static tf_status sum_widened(const tfd_op *op, const walk *w, char *msg, size_t msg_len) {
    const int64_t n = op->out.numel;
    const int is_c64 = op->in[0].dtype == TF_C64;
    const size_t esize = is_c64 ? sizeof(double complex) : sizeof(double);
    acc_space small;
    void *acc = acc_get(&small, n, esize);
    if (acc == NULL) {
        snprintf(msg, msg_len, "cpu: sum needs %zu bytes of accumulators and none are left",
                 (size_t)n * esize);
        return TF_ERR_NO_MEMORY;
    }
    if (is_c64) {
        const double complex *restrict z = acc;
        float complex *restrict out = op->out.data;
        sum_c64(w, op->in[0].data, acc);
        for (int64_t i = 0; i < n; i++) out[i] = (float complex)z[i];
    } else {
        const double *restrict d = acc;
        float *restrict out = op->out.data;
        sum_f32(w, op->in[0].data, acc);
        for (int64_t i = 0; i < n; i++) out[i] = (float)d[i];
    }
    acc_put(&small, acc);
    return TF_OK;
}

/* Sum serves every dtype; max and min refuse complex even if the shape rules were bypassed. */
tf_status tfd_cpu_reduce(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len) {
    (void)be;
    (void)stream;
    const tf_dtype dtype = op->in[0].dtype;
    walk w;
    tf_status st = setup_walk(op, &w, msg, msg_len);
    if (st != TF_OK) return st;
    switch (op->kind) {
    case TF__OP_REDUCE_SUM:
        switch (dtype) {
        case TF_F32:
        case TF_C64: return sum_widened(op, &w, msg, msg_len);
        case TF_F64: sum_f64(&w, op->in[0].data, op->out.data); return TF_OK;
        case TF_C128: sum_c128(&w, op->in[0].data, op->out.data); return TF_OK;
        }
        break;
    case TF__OP_REDUCE_MAX:
    case TF__OP_REDUCE_MIN: {
        const int is_max = op->kind == TF__OP_REDUCE_MAX;
        switch (dtype) {
        case TF_F32:
            (is_max ? max_f32 : min_f32)(&w, op->in[0].data, op->out.data);
            return TF_OK;
        case TF_F64:
            (is_max ? max_f64 : min_f64)(&w, op->in[0].data, op->out.data);
            return TF_OK;
        case TF_C64:
        case TF_C128:
            snprintf(msg, msg_len,
                     "cpu: %s of %s: complex numbers have no order; served for f32 and f64 only",
                     tf__op_name(op->kind), tf_dtype_name(dtype));
            return TF_ERR_DTYPE;
        }
        break;
    }
    default:
        snprintf(msg, msg_len, "cpu: %s is not a reduction", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
    return tfd_cpu_dtype_error(op, dtype, msg, msg_len);
}
