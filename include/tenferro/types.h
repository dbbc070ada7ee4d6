/* Value types shared by every part of the public API: dtypes, shapes, scalars, counters. */
#ifndef TENFERRO_TYPES_H
#define TENFERRO_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest rank a tensor may have. */
#define TF_MAX_RANK 8

/* Element types. Numbers are part of the wire protocol: append only. */
typedef enum tf_dtype {
    TF_F32 = 1,  /* float */
    TF_F64 = 2,  /* double */
    TF_C64 = 3,  /* complex float: {float re, im} */
    TF_C128 = 4, /* complex double: {double re, im} */
} tf_dtype;

/* Reduction kinds for tf_view_reduce. */
typedef enum tf_reduce_kind {
    TF_REDUCE_SUM = 1,
    TF_REDUCE_MAX = 2, /* real dtypes only */
    TF_REDUCE_MIN = 3, /* real dtypes only */
} tf_reduce_kind;

/*
 * A tensor handle: a 64-bit id that the client library allocates, valid on the
 * connection that made it. 0 is never a valid tensor.
 */
typedef uint64_t tf_tensor;

/* A scalar coefficient for scale and axpby; im is ignored for real dtypes. */
typedef struct tf_scalar {
    double re;
    double im;
} tf_scalar;

/* Counters of one held session, as the session observed them. */
typedef struct tf_session_counters {
    uint64_t held_operations;      /* tf_session_with callbacks run (a callback count) */
    uint64_t explicit_submits;     /* tf_session_submit attempts */
    uint64_t close_submits;        /* submissions performed by tf_session_close */
    uint64_t failed_submits;       /* submit or close submissions that returned an error */
    uint64_t explicit_synchronizes;/* tf_session_synchronize attempts */
    uint64_t failed_synchronizes;  /* synchronize attempts that returned an error */
    uint64_t queued_ops;           /* operations carried to the daemon by this session */
} tf_session_counters;

/* Bytes of one element of a dtype, 0 for an unknown dtype. */
TF_EXTERN size_t tf_dtype_size(tf_dtype dtype);

/* The name of a dtype ("f64"), or "unknown". */
TF_EXTERN const char *tf_dtype_name(tf_dtype dtype);

#ifdef __cplusplus
}
#endif
#endif
