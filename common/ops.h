/*
 * Operation kinds and tensor metadata shared by the client library and the
 * daemon. The numbers equal proto/tenferro.proto's OpKind (checked at compile
 * time in daemon/validate.c), so a kind travels on the wire unchanged.
 */
#ifndef TENFERRO_COMMON_OPS_H
#define TENFERRO_COMMON_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/status.h"
#include "tenferro/types.h"

typedef enum tf__op_kind {
    TF__OP_NONE = 0,
    TF__OP_ADD = 1,
    TF__OP_SUB = 2,
    TF__OP_MUL = 3,
    TF__OP_DIV = 4,
    TF__OP_NEG = 5,
    TF__OP_CONJ = 6,
    TF__OP_ABS = 7,
    TF__OP_EXP = 8,
    TF__OP_LOG = 9,
    TF__OP_SQRT = 10,
    TF__OP_SCALE = 11,
    TF__OP_AXPBY = 12,
    TF__OP_PERMUTE = 13,
    TF__OP_RESHAPE = 14,
    TF__OP_COPY = 15,
    TF__OP_REDUCE_SUM = 16,
    TF__OP_REDUCE_MAX = 17,
    TF__OP_REDUCE_MIN = 18,
    TF__OP_MATMUL = 19,
    TF__OP_FREE = 20,
    TF__OP_TEST_FAULT = 21, /* fault injection for tests (proto/tenferro.proto, OP_TEST_FAULT) */
    TF__OP_CONTRACT = 22,
    TF__OP_FFT = 23,
    TF__OP_RUN_PREPARED = 24, /* a prepared graph's run (docs/prepared.md): never a backend op */
    TF__OP_KIND_COUNT = 25,
} tf__op_kind;

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

/* Number of tensor inputs an operation kind takes, or -1 for a variable count (FREE). */
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
    int64_t params[TF_MAX_RANK];
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
