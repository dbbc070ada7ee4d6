/*
 * Operation kinds and tensor metadata shared by the client library and the
 * daemon. The kinds, their names, arities and rules come from one table
 * (common/op-table.h); their numbers equal proto/tenferro.proto's OpKind
 * (asserted at build time in common/op-table.c), so a kind travels on the
 * wire unchanged.
 */
#ifndef TENFERRO_COMMON_OPS_H
#define TENFERRO_COMMON_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/op-table.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

/*
 * TF__OP_ADD = 1, ...: one constant per row of the table, numbered as on the
 * wire, then the number of kinds (the table's numbers are 0..count-1).
 */
#define TF__OP_ENUM(KIND, name, number, arity, shape, dtype, family) TF__OP_##KIND = number,
#define TF__OP_ONE(...) +1
typedef enum tf__op_kind {
    TF__OP_LIST(TF__OP_ENUM)
    TF__OP_KIND_COUNT = 0 TF__OP_LIST(TF__OP_ONE)
} tf__op_kind;
#undef TF__OP_ONE
#undef TF__OP_ENUM

/* How an operation's output shape follows from its inputs (the table's shape column). */
typedef enum tf__shape_rule {
    TF__SHAPE_NONE,        /* no output (FREE), or one a prepared graph decides */
    TF__SHAPE_ELEMENTWISE, /* the inputs' shape; two inputs must agree in shape and dtype */
    TF__SHAPE_PERMUTE,     /* params: a permutation of the input's axes */
    TF__SHAPE_RESHAPE,     /* params: the new shape, with the same element count */
    TF__SHAPE_REDUCE,      /* params: the reduced axes (none: all); flag TF__REDUCE_KEEPDIMS */
    TF__SHAPE_MATMUL,      /* [..., m, k] x [..., k, n] -> [..., m, n] */
    TF__SHAPE_CONTRACT,    /* the contraction descriptor's rule (tf__infer_contract) */
    TF__SHAPE_FFT,         /* the FFT descriptor's rule (tf__infer_fft) */
    TF__SHAPE_SLICE,       /* params: (start, step, length) per input axis */
    TF__SHAPE_LINALG,      /* the linear-algebra descriptor's rule (tf__infer_linalg) */
} tf__shape_rule;

/* Which dtypes an operation takes and which it makes (the table's dtype column). */
typedef enum tf__dtype_rule {
    TF__DTYPE_NONE,      /* decided elsewhere (no output; the FFT's kind) */
    TF__DTYPE_SAME,      /* every dtype; the output has the input's */
    TF__DTYPE_TO_REAL,   /* every dtype; the output is real of the input's precision */
    TF__DTYPE_REAL_ONLY, /* f32 and f64 only (an order is needed); the output has the input's */
} tf__dtype_rule;

/* The shape rule of a kind; TF__SHAPE_NONE for a number outside the table. */
tf__shape_rule tf__op_shape_rule(tf__op_kind kind);

/* The dtype rule of a kind; TF__DTYPE_NONE for a number outside the table. */
tf__dtype_rule tf__op_dtype_rule(tf__op_kind kind);

/* The dtype an operation of this kind makes from an input of dtype `in`, by its dtype rule. */
tf_dtype tf__op_out_dtype(tf__op_kind kind, tf_dtype in);

/* Labels a contraction may use (proto Contraction: 0..63). */
#define TF__MAX_LABELS 64

/*
 * A binary or unary contraction (OP_CONTRACT, proto Contraction): one label
 * per axis of each input and of the output. n_inputs is 1 or 2.
 */
typedef struct tf__contraction {
    int n_inputs;
    int rank[2];
    uint8_t labels[2][TF_MAX_RANK];
    int out_rank;
    uint8_t out[TF_MAX_RANK];
    int conj[2]; /* conjugate that input (complex dtypes only) */
} tf__contraction;

/* OP_FFT kinds and scalings, numbered as proto FftKind and FftNorm. */
typedef enum tf__fft_kind { TF__FFT_C2C = 0, TF__FFT_R2C = 1, TF__FFT_C2R = 2 } tf__fft_kind;
typedef enum tf__fft_norm {
    TF__FFT_NORM_BACKWARD = 0,
    TF__FFT_NORM_ORTHO = 1,
    TF__FFT_NORM_FORWARD = 2,
} tf__fft_norm;

/* An FFT (OP_FFT, proto Fft): transformed axes in order; R2C/C2R halve the last listed. */
typedef struct tf__fft {
    tf__fft_kind kind;
    int inverse; /* C2C only; R2C is forward, C2R inverse */
    tf__fft_norm norm;
    int n_axes;
    int axes[TF_MAX_RANK];
    int64_t last_length; /* C2R: the output length of the last transformed axis */
} tf__fft;

/*
 * Parameters an operation may carry: three per axis (a slice's start, step
 * and length), more than any other kind's one per axis.
 */
#define TF__MAX_PARAMS (3 * TF_MAX_RANK)

/* Flag bit of a reduction: keep reduced axes as dimensions of size 1. */
#define TF__REDUCE_KEEPDIMS 1u

/* Largest number of elements a tensor may hold (2^40); keeps byte counts far from overflow. */
#define TF__MAX_ELEMENTS ((int64_t)1 << 40)

/* What is known of a tensor without its data. */
typedef struct tf__meta {
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
} tf__meta;

/* Number of elements of a tensor (1 for rank 0). */
int64_t tf__meta_numel(const tf__meta *meta);

/* Bytes of a tensor's data. */
size_t tf__meta_bytes(const tf__meta *meta);

/* 1 when two tensors have the same dtype and shape. */
int tf__meta_same(const tf__meta *a, const tf__meta *b);

/* Writes "f32 [64, 4096]" into buf (cut to len). */
void tf__meta_describe(const tf__meta *m, char *buf, size_t len);

/*
 * Tensor inputs an operation of this kind carries on the wire: -1 for a
 * variable count (FREE), 0 where its descriptor decides (CONTRACT,
 * RUN_PREPARED) or for a number outside the table.
 */
int tf__op_arity(tf__op_kind kind);

/* A short name of an operation kind ("add"), or "unknown". */
const char *tf__op_name(tf__op_kind kind);

/*
 * Checks a dtype, rank and shape handed in for a new tensor: a known dtype,
 * rank 0..TF_MAX_RANK, every dimension at least 1, element count bounded.
 */
tf_status tf__check_new_meta(tf_dtype dtype, int rank, const int64_t *shape, char *msg,
                             size_t msg_len);

/*
 * The shape rules: given an operation's kind, its inputs' metadata and its
 * parameters, computes the output's metadata or explains in msg why the
 * operation is invalid. The client calls it so a bad call fails at once; the
 * daemon calls it again because it never trusts a client.
 */
tf_status tf__infer_output(tf__op_kind kind, const tf__meta *inputs, int n_inputs,
                           const int64_t *params, int n_params, unsigned flags, tf__meta *out,
                           char *msg, size_t msg_len);

/*
 * The last inference a caller made, kept so that a run of like operations (a
 * chain of adds on one shape) runs the rules once: tf__infer_output is a
 * function of its arguments alone, so asked again with equal arguments it
 * answers as before. Zero-initialised it holds nothing.
 */
typedef struct tf__infer_memo {
    int valid;
    tf__op_kind kind;
    int n_inputs, n_params;
    unsigned flags;
    int64_t params[TF__MAX_PARAMS];
    tf__meta in[2], out;
} tf__infer_memo;

/*
 * tf__infer_output through the memo: an inference of one or two inputs
 * asked with the arguments of the memo's is answered from it, any other is
 * run and, when it succeeds, kept. The answer is tf__infer_output's.
 */
tf_status tf__infer_output_memo(tf__infer_memo *memo, tf__op_kind kind, const tf__meta *inputs,
                                int n_inputs, const int64_t *params, int n_params, unsigned flags,
                                tf__meta *out, char *msg, size_t msg_len);

/*
 * The shape rules of a contraction: label counts match the inputs' ranks,
 * one label is bound to one size, output labels distinct and present in an
 * input, dtypes equal (no promotion). Computes the output's metadata.
 */
tf_status tf__infer_contract(const tf__contraction *c, const tf__meta *inputs, tf__meta *out,
                             char *msg, size_t msg_len);

/*
 * The shape rules of an FFT: axes distinct and in range, the dtype the kind
 * takes (C2C complex only; R2C real; C2R complex), C2R's last_length fitting
 * its input (last_length / 2 + 1 == that axis). Computes the output's metadata.
 */
tf_status tf__infer_fft(const tf__fft *f, const tf__meta *input, tf__meta *out, char *msg,
                        size_t msg_len);

#endif
