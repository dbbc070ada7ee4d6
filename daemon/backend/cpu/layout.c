/*
 * Layout kernels of the CPU backend: permute, reshape, copy and slice.
 *
 * Tensors are contiguous and row-major, so reshape and copy only move bytes,
 * and permute and slice are strided gathers: the output is written in its
 * own row-major order while an odometer walks the input with the permuted
 * (or stepped) strides. None of this looks at values, so one loop per
 * element size (4, 8 or 16 bytes) serves every dtype.
 */
#include <stdint.h>
#include <string.h>

#include "daemon/backend/cpu/kernels.h"

/* A 16-byte element (c128) that the compiler can move as one unit. */
typedef struct elem16 {
    uint64_t w[2];
} elem16;

/* One strided row per element type: the innermost loop of the gather. */
#define DEFINE_ROW(NAME, T)                                                                 \
    static void NAME(const void *src, int64_t stride, void *dst, int64_t n) {               \
        const T *restrict s = src;                                                          \
        T *restrict d = dst;                                                                \
        for (int64_t j = 0; j < n; j++) d[j] = s[j * stride];                               \
    }

DEFINE_ROW(row4, uint32_t)
DEFINE_ROW(row8, uint64_t)
DEFINE_ROW(row16, elem16)

/* Walks the output row by row so that only the innermost copy is per element. */
static void gather(const tfd_op *op, size_t esize) {
    const int r = op->in[0].rank;
    int64_t in_stride[TF_MAX_RANK];
    int64_t s = 1;
    for (int ax = r - 1; ax >= 0; ax--) {
        in_stride[ax] = s;
        s *= op->in[0].shape[ax];
    }
    /* stride[i]: input elements skipped when output axis i advances by one. */
    int64_t dim[TF_MAX_RANK], stride[TF_MAX_RANK], idx[TF_MAX_RANK] = {0};
    for (int i = 0; i < r; i++) {
        dim[i] = op->out.shape[i];
        stride[i] = in_stride[op->params[i]];
    }
    const int64_t inner = dim[r - 1], inner_stride = stride[r - 1];
    const int64_t rows = op->out.numel / inner;
    const char *src = op->in[0].data;
    char *dst = op->out.data;
    int64_t off = 0; /* input element offset of the current row's start */
    for (int64_t row = 0; row < rows; row++) {
        const void *from = src + (size_t)off * esize;
        switch (esize) {
        case 4: row4(from, inner_stride, dst, inner); break;
        case 8: row8(from, inner_stride, dst, inner); break;
        default: row16(from, inner_stride, dst, inner); break;
        }
        dst += (size_t)inner * esize;
        for (int ax = r - 2; ax >= 0; ax--) {
            off += stride[ax];
            if (++idx[ax] < dim[ax]) break;
            off -= stride[ax] * dim[ax];
            idx[ax] = 0;
        }
    }
}

/* Copies one run of n elements, stride apart in the input: a memcpy when they are adjacent. */
static void copy_run(const void *from, int64_t stride, void *dst, int64_t n, size_t esize) {
    if (stride == 1) {
        memcpy(dst, from, (size_t)n * esize);
        return;
    }
    switch (esize) {
    case 4: row4(from, stride, dst, n); break;
    case 8: row8(from, stride, dst, n); break;
    default: row16(from, stride, dst, n); break;
    }
}

/*
 * OP_SLICE: output element (i_0, ..) is input element (start_a + i_a *
 * step_a, ..). The innermost run is the last axis, extended over the axes
 * before it while everything after them is taken whole with step 1 (so a
 * slice of leading axes copies whole blocks); the odometer walks the rest.
 */
static void slice_gather(const tfd_op *op, size_t esize) {
    const int r = op->in[0].rank;
    int64_t in_stride[TF_MAX_RANK], dim[TF_MAX_RANK] = {0}, stride[TF_MAX_RANK] = {0};
    int64_t idx[TF_MAX_RANK] = {0};
    int64_t s = 1, off = 0; /* off: input element of the current run's start */
    for (int ax = r - 1; ax >= 0; ax--) {
        in_stride[ax] = s;
        s *= op->in[0].shape[ax];
    }
    for (int ax = 0; ax < r; ax++) {
        const int64_t *p = &op->params[3 * ax];
        off += p[0] * in_stride[ax];
        stride[ax] = p[1] * in_stride[ax];
        dim[ax] = p[2];
    }
    int inner = r - 1;
    int64_t run = dim[r - 1];
    if (op->params[3 * (r - 1) + 1] == 1)
        while (inner > 0 && dim[inner] == op->in[0].shape[inner] &&
               op->params[3 * inner + 1] == 1 && op->params[3 * (inner - 1) + 1] == 1)
            run *= dim[--inner];
    /* A merged run is contiguous; an unmerged one steps like the last axis. */
    const int64_t runs = op->out.numel / run, run_stride = inner == r - 1 ? stride[r - 1] : 1;
    const char *src = op->in[0].data;
    char *dst = op->out.data;
    for (int64_t k = 0; k < runs; k++) {
        copy_run(src + off * (int64_t)esize, run_stride, dst, run, esize);
        dst += (size_t)run * esize;
        for (int ax = inner - 1; ax >= 0; ax--) {
            off += stride[ax];
            if (++idx[ax] < dim[ax]) break;
            off -= stride[ax] * dim[ax];
            idx[ax] = 0;
        }
    }
}

/* Checks a slice's (start, step, length) triples once more, cheaply: the gather indexes memory with them. */
static tf_status check_slice(const tfd_op *op, char *msg, size_t msg_len) {
    const int r = op->in[0].rank;
    if (r < 1 || r > TF_MAX_RANK || op->n_params != 3 * r || op->out.rank != r) {
        snprintf(msg, msg_len, "cpu: slice of rank %d got %d parameters (output rank %d)", r,
                 op->n_params, op->out.rank);
        return TF_ERR_AXIS;
    }
    for (int ax = 0; ax < r; ax++) {
        const int64_t start = op->params[3 * ax], step = op->params[3 * ax + 1];
        const int64_t length = op->params[3 * ax + 2], size = op->in[0].shape[ax];
        const int64_t last = start + step * (length - 1);
        if (step == 0 || length < 1 || length != op->out.shape[ax] || step > size || step < -size ||
            start < 0 || start >= size || last < 0 || last >= size) {
            snprintf(msg, msg_len, "cpu: slice axis %d (size %lld): start %lld, step %lld, length "
                     "%lld do not fit", ax, (long long)size, (long long)start, (long long)step,
                     (long long)length);
            return TF_ERR_INVALID_ARGUMENT;
        }
    }
    return TF_OK;
}

/* Checks the permutation once more, cheaply, because gather indexes arrays with it. */
static tf_status check_perm(const tfd_op *op, int *identity, char *msg, size_t msg_len) {
    const int r = op->in[0].rank;
    if (r < 0 || r > TF_MAX_RANK || op->n_params != r || op->out.rank != r) {
        snprintf(msg, msg_len, "cpu: permute of rank %d got %d axes (output rank %d)", r,
                 op->n_params, op->out.rank);
        return TF_ERR_AXIS;
    }
    unsigned seen = 0;
    *identity = 1;
    for (int i = 0; i < r; i++) {
        int64_t p = op->params[i];
        if (p < 0 || p >= r || (seen & (1u << p))) {
            snprintf(msg, msg_len, "cpu: permute axis %lld is out of range or repeated",
                     (long long)p);
            return TF_ERR_AXIS;
        }
        seen |= 1u << p;
        if (p != i) *identity = 0;
    }
    return TF_OK;
}

/* Everything that keeps row-major order is a byte copy; only a true permutation gathers. */
tf_status tfd_cpu_permute(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                          size_t msg_len) {
    (void)be;
    (void)stream;
    const size_t esize = tf_dtype_size(op->in[0].dtype);
    if (esize != 4 && esize != 8 && esize != 16)
        return tfd_cpu_dtype_error(op, op->in[0].dtype, msg, msg_len);
    const size_t bytes = (size_t)op->out.numel * esize;
    int identity = 1;
    switch (op->kind) {
    case TF__OP_PERMUTE: {
        tf_status st = check_perm(op, &identity, msg, msg_len);
        if (st != TF_OK) return st;
        if (!identity) {
            gather(op, esize);
            return TF_OK;
        }
        break;
    }
    case TF__OP_SLICE: {
        tf_status st = check_slice(op, msg, msg_len);
        if (st != TF_OK) return st;
        slice_gather(op, esize);
        return TF_OK;
    }
    case TF__OP_RESHAPE:
    case TF__OP_COPY:
        break;
    default:
        snprintf(msg, msg_len, "cpu: %s is not a layout operation", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
    /* Identity permutation, reshape and copy keep row-major order: a byte copy. */
    if (op->out.data != op->in[0].data) memcpy(op->out.data, op->in[0].data, bytes);
    return TF_OK;
}
