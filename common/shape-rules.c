/*
 * Shape and dtype rules of every operation.
 *
 * Both sides run these rules: the client library so that a bad call fails at
 * the call (no round trip), the daemon again on every operation it receives,
 * because a client can be old, buggy or hostile. The rules are pure functions
 * of metadata; they never look at data.
 */
#include <stdio.h>
#include <string.h>

#include "common/ops.h"

size_t tf_dtype_size(tf_dtype dtype) {
    switch (dtype) {
    case TF_F32: return 4;
    case TF_F64: return 8;
    case TF_C64: return 8;
    case TF_C128: return 16;
    }
    return 0;
}

const char *tf_dtype_name(tf_dtype dtype) {
    switch (dtype) {
    case TF_F32: return "f32";
    case TF_F64: return "f64";
    case TF_C64: return "c64";
    case TF_C128: return "c128";
    }
    return "unknown";
}

int64_t tf__meta_numel(const tf__meta *meta) {
    int64_t n = 1;
    for (int i = 0; i < meta->rank; i++) n *= meta->shape[i];
    return n;
}

size_t tf__meta_bytes(const tf__meta *meta) {
    return (size_t)tf__meta_numel(meta) * tf_dtype_size(meta->dtype);
}

int tf__meta_same(const tf__meta *a, const tf__meta *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

void tf__meta_describe(const tf__meta *m, char *buf, size_t len) {
    size_t at = (size_t)snprintf(buf, len, "%s [", tf_dtype_name(m->dtype));
    for (int i = 0; i < m->rank && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, i ? ", %lld" : "%lld", (long long)m->shape[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Writes "[2,3,4]" into buf. */
static void format_shape(const tf__meta *m, char *buf, size_t len) {
    size_t used = 0;
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < m->rank && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                                 (long long)m->shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

static int is_complex(tf_dtype d) { return d == TF_C64 || d == TF_C128; }

tf_status tf__check_new_meta(tf_dtype dtype, int rank, const int64_t *shape, char *msg,
                             size_t msg_len) {
    if (tf_dtype_size(dtype) == 0) {
        snprintf(msg, msg_len, "unknown dtype %d: use TF_F32, TF_F64, TF_C64 or TF_C128", (int)dtype);
        return TF_ERR_DTYPE;
    }
    if (rank < 0 || rank > TF_MAX_RANK) {
        snprintf(msg, msg_len, "rank %d is outside 0..%d", rank, TF_MAX_RANK);
        return TF_ERR_BAD_SHAPE;
    }
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 1) {
            snprintf(msg, msg_len, "dimension %d is %lld: every dimension must be at least 1", i,
                     (long long)shape[i]);
            return TF_ERR_BAD_SHAPE;
        }
        if (shape[i] > TF__MAX_ELEMENTS || numel > TF__MAX_ELEMENTS / shape[i]) {
            snprintf(msg, msg_len, "shape has more than 2^40 elements");
            return TF_ERR_BAD_SHAPE;
        }
        numel *= shape[i];
    }
    return TF_OK;
}

/* Both inputs of a two-input elementwise operation must agree in dtype and shape. */
static tf_status check_same(tf__op_kind kind, const tf__meta *a, const tf__meta *b, char *msg,
                            size_t msg_len) {
    if (a->dtype != b->dtype) {
        snprintf(msg, msg_len, "%s: dtypes differ (%s and %s)", tf__op_name(kind),
                 tf_dtype_name(a->dtype), tf_dtype_name(b->dtype));
        return TF_ERR_DTYPE;
    }
    if (a->rank != b->rank || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank) != 0) {
        char sa[128], sb[128];
        format_shape(a, sa, sizeof sa);
        format_shape(b, sb, sizeof sb);
        snprintf(msg, msg_len, "%s: shapes differ (%s and %s)", tf__op_name(kind), sa, sb);
        return TF_ERR_SHAPE;
    }
    return TF_OK;
}

/* Permutation parameters must name every axis of the input exactly once. */
static tf_status infer_permute(const tf__meta *a, const int64_t *perm, int n, tf__meta *out,
                               char *msg, size_t msg_len) {
    if (n != a->rank) {
        snprintf(msg, msg_len, "permute: permutation has %d axes but the tensor has rank %d", n,
                 a->rank);
        return TF_ERR_AXIS;
    }
    int seen[TF_MAX_RANK] = {0};
    *out = *a;
    for (int i = 0; i < n; i++) {
        if (perm[i] < 0 || perm[i] >= a->rank) {
            snprintf(msg, msg_len, "permute: axis %lld is out of range for rank %d",
                     (long long)perm[i], a->rank);
            return TF_ERR_AXIS;
        }
        if (seen[perm[i]]++) {
            snprintf(msg, msg_len, "permute: axis %lld appears twice", (long long)perm[i]);
            return TF_ERR_AXIS;
        }
        out->shape[i] = a->shape[perm[i]];
    }
    return TF_OK;
}

/* Reduction axes must be in range and distinct; no axes means every axis. */
static tf_status infer_reduce(tf__op_kind kind, const tf__meta *a, const int64_t *axes, int n,
                              unsigned flags, tf__meta *out, char *msg, size_t msg_len) {
    if (n > a->rank) {
        snprintf(msg, msg_len, "%s: %d axes given for a tensor of rank %d", tf__op_name(kind), n,
                 a->rank);
        return TF_ERR_AXIS;
    }
    int reduced[TF_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        if (axes[i] < 0 || axes[i] >= a->rank) {
            snprintf(msg, msg_len, "%s: axis %lld is out of range for rank %d", tf__op_name(kind),
                     (long long)axes[i], a->rank);
            return TF_ERR_AXIS;
        }
        if (reduced[axes[i]]++) {
            snprintf(msg, msg_len, "%s: axis %lld appears twice", tf__op_name(kind),
                     (long long)axes[i]);
            return TF_ERR_AXIS;
        }
    }
    if (n == 0)
        for (int i = 0; i < a->rank; i++) reduced[i] = 1;
    out->dtype = a->dtype;
    out->rank = 0;
    for (int i = 0; i < a->rank; i++) {
        if (!reduced[i])
            out->shape[out->rank++] = a->shape[i];
        else if (flags & TF__REDUCE_KEEPDIMS)
            out->shape[out->rank++] = 1;
    }
    return TF_OK;
}

/* Matmul of [..., m, k] by [..., k, n] with identical leading (batch) dimensions. */
static tf_status infer_matmul(const tf__meta *a, const tf__meta *b, tf__meta *out, char *msg,
                              size_t msg_len) {
    char sa[128], sb[128];
    if (a->dtype != b->dtype) {
        snprintf(msg, msg_len, "matmul: dtypes differ (%s and %s)", tf_dtype_name(a->dtype),
                 tf_dtype_name(b->dtype));
        return TF_ERR_DTYPE;
    }
    format_shape(a, sa, sizeof sa);
    format_shape(b, sb, sizeof sb);
    if (a->rank < 2 || b->rank < 2 || a->rank != b->rank) {
        snprintf(msg, msg_len,
                 "matmul: needs two tensors of equal rank >= 2 ([m,k]x[k,n] or batched), got %s and %s",
                 sa, sb);
        return TF_ERR_SHAPE;
    }
    int r = a->rank;
    for (int i = 0; i < r - 2; i++) {
        if (a->shape[i] != b->shape[i]) {
            snprintf(msg, msg_len, "matmul: batch dimensions differ (%s and %s)", sa, sb);
            return TF_ERR_SHAPE;
        }
    }
    if (a->shape[r - 1] != b->shape[r - 2]) {
        snprintf(msg, msg_len, "matmul: inner dimensions differ (%s and %s)", sa, sb);
        return TF_ERR_SHAPE;
    }
    *out = *a;
    out->shape[r - 1] = b->shape[r - 1];
    tf_status st = tf__check_new_meta(out->dtype, out->rank, out->shape, msg, msg_len);
    if (st != TF_OK) snprintf(msg, msg_len, "matmul: the output %s x %s would be too large", sa, sb);
    return st;
}

/* A reshape's parameters are the new shape: valid, and holding the input's element count. */
static tf_status infer_reshape(const tf__meta *a, const int64_t *params, int n_params,
                               tf__meta *out, char *msg, size_t msg_len) {
    char why[200];
    tf_status st = tf__check_new_meta(a->dtype, n_params, params, why, sizeof why);
    if (st != TF_OK) {
        snprintf(msg, msg_len, "reshape: %s", why);
        return st;
    }
    out->dtype = a->dtype;
    out->rank = n_params;
    /* A reshape to rank 0 carries no parameters, and params may then be NULL. */
    if (n_params > 0) memcpy(out->shape, params, sizeof(int64_t) * (size_t)n_params);
    if (tf__meta_numel(out) != tf__meta_numel(a)) {
        char sa[128], sb[128];
        format_shape(a, sa, sizeof sa);
        format_shape(out, sb, sizeof sb);
        snprintf(msg, msg_len, "reshape: %s and %s hold different numbers of elements", sa, sb);
        return TF_ERR_SHAPE;
    }
    return TF_OK;
}

/*
 * OP_SLICE: params are (start, step, length) for every input axis; a
 * nonzero step, a length of at least 1 (tensors have no empty axes), and
 * every index start + i * step for i < length inside the axis. The output
 * has the lengths.
 */
static tf_status infer_slice(const tf__meta *in, const int64_t *params, int n_params,
                             tf__meta *out, char *msg, size_t msg_len) {
    if (n_params != 3 * in->rank) {
        snprintf(msg, msg_len, "slice: %d parameters for a rank-%d input: 3 per axis (start, step, "
                 "length) expected", n_params, in->rank);
        return TF_ERR_INVALID_ARGUMENT;
    }
    *out = *in;
    for (int a = 0; a < in->rank; a++) {
        const int64_t start = params[3 * a], step = params[3 * a + 1], length = params[3 * a + 2];
        const int64_t dim = in->shape[a];
        if (step == 0 || length < 1 || length > dim) {
            snprintf(msg, msg_len, "slice: axis %d (size %lld): step %lld and length %lld: a "
                     "nonzero step and a length from 1 to the axis expected", a, (long long)dim,
                     (long long)step, (long long)length);
            return TF_ERR_INVALID_ARGUMENT;
        }
        /* Bounded first: with |step| <= dim <= 2^40 and length <= dim, the last index cannot overflow. */
        const int in_range = step <= dim && step >= -dim && start >= 0 && start < dim;
        const int64_t last = in_range ? start + step * (length - 1) : -1;
        if (!in_range || last < 0 || last >= dim) {
            snprintf(msg, msg_len, "slice: axis %d (size %lld): start %lld, step %lld, length "
                     "%lld reach outside the axis", a, (long long)dim, (long long)start,
                     (long long)step, (long long)length);
            return TF_ERR_INVALID_ARGUMENT;
        }
        out->shape[a] = length;
    }
    return TF_OK;
}

tf_status tf__infer_output(tf__op_kind kind, const tf__meta *in, int n_inputs,
                           const int64_t *params, int n_params, unsigned flags, tf__meta *out,
                           char *msg, size_t msg_len) {
    const int arity = tf__op_arity(kind);
    const tf__shape_rule rule = tf__op_shape_rule(kind);
    /* Kinds whose descriptors carry their own rules (or that make no output) are not served here. */
    if (arity <= 0 || rule == TF__SHAPE_NONE || rule == TF__SHAPE_CONTRACT || rule == TF__SHAPE_FFT ||
        rule == TF__SHAPE_LINALG) {
        snprintf(msg, msg_len, "unknown operation kind %d", (int)kind);
        return TF_ERR_UNSUPPORTED;
    }
    if (n_inputs != arity) {
        snprintf(msg, msg_len, "%s takes %d inputs, got %d", tf__op_name(kind), arity, n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    const int max_params = rule == TF__SHAPE_SLICE ? TF__MAX_PARAMS : TF_MAX_RANK;
    if (n_params < 0 || n_params > max_params) {
        snprintf(msg, msg_len, "%s: %d parameters, at most %d allowed", tf__op_name(kind), n_params,
                 max_params);
        return TF_ERR_AXIS;
    }
    for (int i = 0; i < n_inputs; i++) {
        tf_status st = tf__check_new_meta(in[i].dtype, in[i].rank, in[i].shape, msg, msg_len);
        if (st != TF_OK) return st;
    }
    /* The dtype rule first: an order-needing kind refuses complex before anything else. */
    if (tf__op_dtype_rule(kind) == TF__DTYPE_REAL_ONLY && is_complex(in[0].dtype)) {
        snprintf(msg, msg_len, "%s: complex numbers have no order; %s is served for f32 and f64 only",
                 tf__op_name(kind), tf__op_name(kind));
        return TF_ERR_DTYPE;
    }
    switch (rule) {
    case TF__SHAPE_ELEMENTWISE: {
        if (n_inputs == 2) {
            tf_status st = check_same(kind, &in[0], &in[1], msg, msg_len);
            if (st != TF_OK) return st;
        }
        *out = in[0];
        out->dtype = tf__op_out_dtype(kind, in[0].dtype);
        return TF_OK;
    }
    case TF__SHAPE_PERMUTE:
        return infer_permute(&in[0], params, n_params, out, msg, msg_len);
    case TF__SHAPE_RESHAPE:
        return infer_reshape(&in[0], params, n_params, out, msg, msg_len);
    case TF__SHAPE_REDUCE:
        return infer_reduce(kind, &in[0], params, n_params, flags, out, msg, msg_len);
    case TF__SHAPE_MATMUL:
        return infer_matmul(&in[0], &in[1], out, msg, msg_len);
    case TF__SHAPE_SLICE:
        return infer_slice(&in[0], params, n_params, out, msg, msg_len);
    case TF__SHAPE_NONE: /* refused above */
    case TF__SHAPE_CONTRACT:
    case TF__SHAPE_FFT:
    case TF__SHAPE_LINALG:
        break;
    }
    snprintf(msg, msg_len, "unknown operation kind %d", (int)kind);
    return TF_ERR_UNSUPPORTED;
}

/* 1 when the memo holds an inference asked with exactly these arguments. */
static int memo_holds(const tf__infer_memo *m, tf__op_kind kind, const tf__meta *in, int n_inputs,
                      const int64_t *params, int n_params, unsigned flags) {
    return m->valid && m->kind == kind && m->n_inputs == n_inputs && m->n_params == n_params &&
           m->flags == flags &&
           (n_params == 0 || memcmp(m->params, params, sizeof *params * (size_t)n_params) == 0) &&
           memcmp(m->in, in, sizeof *in * (size_t)n_inputs) == 0;
}

tf_status tf__infer_output_memo(tf__infer_memo *memo, tf__op_kind kind, const tf__meta *in,
                                int n_inputs, const int64_t *params, int n_params, unsigned flags,
                                tf__meta *out, char *msg, size_t msg_len) {
    const int keeps = n_inputs >= 1 && n_inputs <= 2 && n_params >= 0 && n_params <= TF__MAX_PARAMS;
    if (keeps && memo_holds(memo, kind, in, n_inputs, params, n_params, flags)) {
        *out = memo->out;
        return TF_OK;
    }
    tf_status st = tf__infer_output(kind, in, n_inputs, params, n_params, flags, out, msg, msg_len);
    if (st != TF_OK || !keeps) return st;
    memo->valid = 1;
    memo->kind = kind;
    memo->n_inputs = n_inputs;
    memo->n_params = n_params;
    memo->flags = flags;
    if (n_params > 0) memcpy(memo->params, params, sizeof *params * (size_t)n_params);
    memcpy(memo->in, in, sizeof *in * (size_t)n_inputs);
    memo->out = *out;
    return TF_OK;
}
