/*
 * The shape and dtype rules of OP_FFT (tf__infer_fft, declared in ops.h).
 *
 * Like the rules of every other operation they run twice: in the client
 * library, so that tf_view_fft and its siblings fail at the call, and in the
 * daemon on every Fft descriptor it decodes, because a client can be old,
 * buggy or hostile. They are pure functions of the descriptor and the input's
 * metadata. The conventions are numpy's fftn / rfftn / irfftn over the listed
 * axes: C2C keeps the shape and takes complex tensors only, R2C turns the last
 * listed axis of length n into n/2+1 complex elements, C2R turns it back into
 * last_length real elements, where last_length/2+1 must equal that axis.
 * Axes are 0..rank-1 on the wire (the client library normalizes negative
 * ones), distinct, at least one.
 */
#include <stdio.h>

#include "common/ops.h"

/* The numpy name of a transform, for messages ("rfft"); kinds out of range are refused before. */
static const char *fft_name(const tf__fft *f) {
    switch (f->kind) {
    case TF__FFT_C2C: return f->inverse ? "ifft" : "fft";
    case TF__FFT_R2C: return "rfft";
    case TF__FFT_C2R: return "irfft";
    }
    return "fft";
}

static int is_complex(tf_dtype d) { return d == TF_C64 || d == TF_C128; }
static int is_real(tf_dtype d) { return d == TF_F32 || d == TF_F64; }

/* The complex dtype of a real one's precision, and back. */
static tf_dtype complex_of(tf_dtype d) { return d == TF_F32 ? TF_C64 : TF_C128; }
static tf_dtype real_of(tf_dtype d) { return d == TF_C64 ? TF_F32 : TF_F64; }

/* Axes in range and distinct, at least one and no more than the rank. */
static tf_status check_axes(const tf__fft *f, const tf__meta *in, char *msg, size_t msg_len) {
    const char *name = fft_name(f);
    if (in->rank == 0) {
        snprintf(msg, msg_len, "%s: a rank-0 tensor has no axis to transform", name);
        return TF_ERR_AXIS;
    }
    if (f->n_axes < 1 || f->n_axes > in->rank) {
        snprintf(msg, msg_len, "%s: %d axes given for a tensor of rank %d: between 1 and %d expected",
                 name, f->n_axes, in->rank, in->rank);
        return TF_ERR_AXIS;
    }
    unsigned seen = 0;
    for (int i = 0; i < f->n_axes; i++) {
        int a = f->axes[i];
        if (a < 0 || a >= in->rank) {
            snprintf(msg, msg_len,
                     "%s: axis %d is out of range for rank %d (0..%d; negative axes are counted "
                     "from the end by the client library only)",
                     name, a, in->rank, in->rank - 1);
            return TF_ERR_AXIS;
        }
        if (seen & (1u << a)) {
            snprintf(msg, msg_len, "%s: axis %d appears twice", name, a);
            return TF_ERR_AXIS;
        }
        seen |= 1u << a;
    }
    return TF_OK;
}

/* The dtype each kind takes, with a message that names the transform to use instead. */
static tf_status check_dtype(const tf__fft *f, tf_dtype d, char *msg, size_t msg_len) {
    const char *name = fft_name(f);
    switch (f->kind) {
    case TF__FFT_C2C:
        if (is_complex(d)) return TF_OK;
        snprintf(msg, msg_len,
                 "%s: the complex transform takes c64 or c128, got %s: for a real tensor use rfft "
                 "(tf_view_rfft, kind R2C)",
                 name, tf_dtype_name(d));
        return TF_ERR_DTYPE;
    case TF__FFT_R2C:
        if (is_real(d)) return TF_OK;
        snprintf(msg, msg_len,
                 "rfft: the real-to-complex transform takes f32 or f64, got %s: for a complex "
                 "tensor use fft (tf_view_fft, kind C2C)",
                 tf_dtype_name(d));
        return TF_ERR_DTYPE;
    case TF__FFT_C2R:
        if (is_complex(d)) return TF_OK;
        snprintf(msg, msg_len,
                 "irfft: the complex-to-real transform takes c64 or c128 (a half spectrum), got %s",
                 tf_dtype_name(d));
        return TF_ERR_DTYPE;
    }
    return TF_ERR_DTYPE;
}

tf_status tf__infer_fft(const tf__fft *f, const tf__meta *in, tf__meta *out, char *msg,
                        size_t msg_len) {
    if (!f || !in || !out) {
        snprintf(msg, msg_len, "fft: no descriptor or no input");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if ((int)f->kind < TF__FFT_C2C || (int)f->kind > TF__FFT_C2R) {
        snprintf(msg, msg_len, "fft: unknown kind %d: use C2C (0), R2C (1) or C2R (2)", (int)f->kind);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if ((int)f->norm < TF__FFT_NORM_BACKWARD || (int)f->norm > TF__FFT_NORM_FORWARD) {
        snprintf(msg, msg_len, "%s: unknown norm %d: use backward (0), ortho (1) or forward (2)",
                 fft_name(f), (int)f->norm);
        return TF_ERR_INVALID_ARGUMENT;
    }
    tf_status st = tf__check_new_meta(in->dtype, in->rank, in->shape, msg, msg_len);
    if (st != TF_OK) return st;
    if ((st = check_axes(f, in, msg, msg_len)) != TF_OK) return st;
    if ((st = check_dtype(f, in->dtype, msg, msg_len)) != TF_OK) return st;
    *out = *in;
    const int last = f->axes[f->n_axes - 1];
    if (f->kind == TF__FFT_R2C) {
        out->dtype = complex_of(in->dtype);
        out->shape[last] = in->shape[last] / 2 + 1;
    } else if (f->kind == TF__FFT_C2R) {
        const int64_t m = in->shape[last], n = f->last_length;
        if (n < 1 || n > TF__MAX_ELEMENTS || n / 2 + 1 != m) {
            const long long even = 2 * (long long)(m - 1);
            char fits[64] = "last_length 1";
            if (even >= 1) snprintf(fits, sizeof fits, "last_length %lld or %lld", even, even + 1);
            snprintf(msg, msg_len,
                     "irfft: last_length %lld does not fit axis %d of %lld elements: last_length / "
                     "2 + 1 must equal it (%s)",
                     (long long)n, last, (long long)m, fits);
            return TF_ERR_SHAPE;
        }
        out->dtype = real_of(in->dtype);
        out->shape[last] = n;
        st = tf__check_new_meta(out->dtype, out->rank, out->shape, msg, msg_len);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}
