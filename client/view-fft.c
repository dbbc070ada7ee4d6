/*
 * The FFT operations of a session view (include/tenferro/fft.h).
 *
 * Each call turns numpy-style arguments into the shared descriptor
 * (tf__fft): every axis when none are given, negative axes counted from the
 * end, irfft's default output length. It then runs the same rules the
 * daemon runs (tf__infer_fft), so anything the daemon would refuse fails
 * here with the same typed status, and queues one OP_FFT carrying the
 * descriptor; tf__encode_fft writes it into the Submit.
 */
#include <string.h>

#include "client/internal.h"

/* The wire's repeated int32 axes are read straight from the descriptor's int array. */
_Static_assert(sizeof(int) == sizeof(int32_t), "int is 32 bits");
_Static_assert((int)TF_FFT_NORM_ORTHO == (int)TF__FFT_NORM_ORTHO &&
                   (int)TF_FFT_NORM_FORWARD == (int)TF__FFT_NORM_FORWARD,
               "public and shared norms agree");

/*
 * Builds the descriptor's axes from the caller's: all axes in order when
 * n_axes is 0, negative ones counted from the end. Out-of-range axes are
 * refused here with the caller's own number (after normalizing, the rules
 * would name another one).
 */
static tf_status normalize_axes(tf_client *c, const char *name, int rank, int n_axes,
                                const int *axes, tf__fft *f) {
    if (n_axes < 0 || n_axes > TF_MAX_RANK || (n_axes > 0 && !axes))
        return tf__fail(c, TF_ERR_AXIS, "%s: %d axes given: between 0 (all) and %d expected", name,
                        n_axes, TF_MAX_RANK);
    if (n_axes == 0) {
        f->n_axes = rank;
        for (int i = 0; i < rank; i++) f->axes[i] = i;
        return TF_OK;
    }
    f->n_axes = n_axes;
    for (int i = 0; i < n_axes; i++) {
        if (axes[i] < -rank || axes[i] >= rank)
            return tf__fail(c, TF_ERR_AXIS, "%s: axis %d is out of range for rank %d (-%d..%d)", name,
                            axes[i], rank, rank, rank - 1);
        f->axes[i] = axes[i] < 0 ? axes[i] + rank : axes[i];
    }
    return TF_OK;
}

/* Checks and queues one transform of kind `kind`; last_length is irfft's output length (0: default). */
static tf_status queue_fft(tf_view *v, const char *name, tf__fft_kind kind, int inverse,
                           tf_tensor a, int n_axes, const int *axes, int64_t last_length,
                           tf_fft_norm norm, tf_tensor *out) {
    tf__meta in, out_meta;
    tf_status st = tf__view_inputs(v, TF__OP_FFT, 1, &a, out, &in);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    tf__fft f;
    memset(&f, 0, sizeof f);
    f.kind = kind;
    f.inverse = inverse;
    f.norm = (tf__fft_norm)norm;
    if ((st = normalize_axes(c, name, in.rank, n_axes, axes, &f)) != TF_OK) return st;
    if (kind == TF__FFT_C2R) {
        f.last_length = last_length;
        if (last_length == 0 && f.n_axes > 0) f.last_length = 2 * (in.shape[f.axes[f.n_axes - 1]] - 1);
    }
    st = tf__infer_fft(&f, &in, &out_meta, c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    tf__queued_op *q;
    if ((st = tf__queue_push(v, TF__OP_FFT, 1, &a, &out_meta, out, &q)) != TF_OK) return st;
    q->fft = f;
    return TF_OK;
}

void tf__encode_fft(tf__queued_op *q, Tenferro__Op *op) {
    Tenferro__Fft *w = &q->wire_fft;
    tenferro__fft__init(w);
    w->n_axes = (size_t)q->fft.n_axes;
    w->axes = (int32_t *)q->fft.axes;
    w->kind = (Tenferro__FftKind)q->fft.kind;
    w->inverse = q->fft.inverse != 0;
    w->norm = (Tenferro__FftNorm)q->fft.norm;
    w->last_length = q->fft.last_length;
    op->fft = w;
}

tf_status tf_view_fft(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_fft_norm norm,
                      tf_tensor *out) {
    return queue_fft(v, "fft", TF__FFT_C2C, 0, a, n_axes, axes, 0, norm, out);
}

tf_status tf_view_ifft(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_fft_norm norm,
                       tf_tensor *out) {
    return queue_fft(v, "ifft", TF__FFT_C2C, 1, a, n_axes, axes, 0, norm, out);
}

tf_status tf_view_rfft(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_fft_norm norm,
                       tf_tensor *out) {
    return queue_fft(v, "rfft", TF__FFT_R2C, 0, a, n_axes, axes, 0, norm, out);
}

tf_status tf_view_irfft(tf_view *v, tf_tensor a, int n_axes, const int *axes, int64_t last_length,
                        tf_fft_norm norm, tf_tensor *out) {
    return queue_fft(v, "irfft", TF__FFT_C2R, 1, a, n_axes, axes, last_length, norm, out);
}
