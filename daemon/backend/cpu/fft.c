/*
 * FFTs of the CPU backend (OP_FFT), through FFTW.
 *
 * The operation arrives validated (tf__infer_fft in the daemon); it is
 * checked once more against the views it names, then described by a key
 * (cpu/fft.h) whose plan comes from the daemon-wide cache and runs with
 * FFTW's new-array execute functions straight on the op's input and output:
 * any set of axes, leading, trailing or interleaved with batch axes, is one
 * plan of FFTW's guru64 interface, with no transpose. FFTW's complex-to-real
 * transforms destroy their input, so C2R runs on a scratch copy and the
 * client's tensor never changes. The normalization (numpy's norm) is one
 * scaling pass over the output when its factor is not 1.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <fftw3.h>

#include "daemon/backend/cpu/fft.h"
#include "daemon/backend/cpu/kernels.h"
#include "daemon/backend/fft-layout.h"

static int is_single(tf_dtype d) { return d == TF_F32 || d == TF_C64; }

/* The key of op's transform: its axes in canonical order, and the arrays' alignment classes. */
static void key_of(const tfd_op *op, const void *in, const void *out, tfd_fftw_key *k) {
    const tf__fft *f = &op->fft;
    memset(k, 0, sizeof *k);
    k->kind = f->kind;
    k->inverse = f->kind == TF__FFT_C2C ? f->inverse != 0 : f->kind == TF__FFT_C2R;
    k->dtype = op->in[0].dtype;
    k->rank = op->in[0].rank;
    for (int a = 0; a < k->rank; a++) k->shape[a] = op->in[0].shape[a];
    k->n_axes = tfd_fft_canonical_axes(f, k->rank, k->axes);
    k->last_length = f->kind == TF__FFT_C2R ? f->last_length : 0;
    if (is_single(op->in[0].dtype)) {
        k->align_in = fftwf_alignment_of((float *)in);
        k->align_out = fftwf_alignment_of((float *)out);
    } else {
        k->align_in = fftw_alignment_of((double *)in);
        k->align_out = fftw_alignment_of((double *)out);
    }
}

/* Runs plan on the arrays, with the execute function of its kind and precision. */
static void execute(const tfd_fftw_key *k, void *plan, void *in, void *out) {
    if (is_single((tf_dtype)k->dtype)) {
        switch (k->kind) {
        case TF__FFT_C2C: fftwf_execute_dft(plan, in, out); return;
        case TF__FFT_R2C: fftwf_execute_dft_r2c(plan, in, out); return;
        case TF__FFT_C2R: fftwf_execute_dft_c2r(plan, in, out); return;
        }
    } else {
        switch (k->kind) {
        case TF__FFT_C2C: fftw_execute_dft(plan, in, out); return;
        case TF__FFT_R2C: fftw_execute_dft_r2c(plan, in, out); return;
        case TF__FFT_C2R: fftw_execute_dft_c2r(plan, in, out); return;
        }
    }
}

/* Multiplies every real component of the output by s, rounding once in its precision. */
static void scale(const tfd_tensor_view *out, double s) {
    const int cplx = out->dtype == TF_C64 || out->dtype == TF_C128;
    const int64_t n = out->numel * (cplx ? 2 : 1);
    if (is_single(out->dtype)) {
        float *x = out->data;
        for (int64_t i = 0; i < n; i++) x[i] = (float)(s * (double)x[i]);
    } else {
        double *x = out->data;
        for (int64_t i = 0; i < n; i++) x[i] *= s;
    }
}

tf_status tfd_cpu_fft(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len) {
    (void)stream;
    const tfd_cpu_impl *impl = be->impl;
    const tfd_tensor_view *in = &op->in[0], *out = &op->out;
    if (!impl || !impl->fftw) {
        snprintf(msg, msg_len, "cpu: the backend is not open");
        return TF_ERR_INTERNAL;
    }
    tf__meta in_meta;
    tf_status st = tfd_fft_check_op(op, &in_meta, msg, msg_len);
    if (st != TF_OK) return st;
    void *src = in->data, *scratch = NULL;
    if (op->fft.kind == TF__FFT_C2R) {
        const size_t bytes = (size_t)in->numel * tf_dtype_size(in->dtype);
        scratch = fftw_malloc(bytes ? bytes : 1);
        if (!scratch) {
            snprintf(msg, msg_len, "cpu: out of host memory for irfft's copy of its input");
            return TF_ERR_NO_MEMORY;
        }
        memcpy(scratch, in->data, bytes);
        src = scratch;
    }
    tfd_fftw_key key;
    key_of(op, src, out->data, &key);
    tfd_plan_entry *entry = NULL;
    st = tfd_fftw_cache_acquire(impl->fftw, &key, &entry, msg, msg_len);
    if (st == TF_OK) {
        execute(&key, tfd_fftw_entry_plan(entry), src, out->data);
        tfd_fftw_cache_release(impl->fftw, entry);
        const double s = tfd_fft_scale(&op->fft, &in_meta);
        if (s != 1.0) scale(out, s);
    }
    fftw_free(scratch);
    return st;
}

int tfd_cpu_caches(tfd_backend *be, tfd_cache_stats *out, int max) {
    const tfd_cpu_impl *impl = be->impl;
    if (!impl || !impl->fftw || max < 1) return 0;
    tfd_fftw_cache_stats(impl->fftw, &out[0]);
    return 1;
}

tf_status tfd_cpu_trim(tfd_backend *be, char *msg, size_t msg_len) {
    const tfd_cpu_impl *impl = be->impl;
    uint64_t n = impl && impl->fftw ? tfd_fftw_cache_clear(impl->fftw) : 0;
    snprintf(msg, msg_len, "cpu: fftw_plans emptied (%llu plan%s let go; plans in use go when their "
             "transform ends)",
             (unsigned long long)n, n == 1 ? "" : "s");
    return TF_OK;
}
