/*
 * Discrete Fourier transforms on a session view, as numpy.fft's fftn,
 * ifftn, rfftn and irfftn over the given axes (docs/fft.md).
 *
 * Like every tf_view_* call, each checks its arguments at once (a typed error
 * at the call for anything the daemon would refuse), takes the output's handle
 * and queues the transform: the output can be used by the next call before
 * anything has reached the daemon. The output is a new contiguous tensor; the
 * input is never modified (not even by the complex-to-real transform).
 *
 * Axes: n_axes of them, distinct; a negative axis counts from the end (-1 is
 * the last). n_axes = 0 transforms every axis, in order, as numpy's default.
 * The real transforms halve the LAST LISTED axis: rfft turns its n real
 * elements into n/2+1 complex ones, irfft turns m = last_length/2+1 complex
 * elements back into last_length real ones.
 *
 * dtypes: fft and ifft take c64 or c128 (a real tensor is TF_ERR_DTYPE: use
 * rfft); rfft takes f32 -> c64 and f64 -> c128; irfft takes c64 -> f32 and
 * c128 -> f64.
 *
 * Scaling (norm), with n the product of the transformed (real) lengths:
 * TF_FFT_NORM_BACKWARD (numpy's default) leaves the forward transforms
 * unscaled and divides the inverse ones by n; ORTHO scales both by
 * 1/sqrt(n); FORWARD divides the forward ones by n and leaves the inverse
 * ones unscaled. The sign convention is numpy's: the forward transform is
 * X[k] = sum_j x[j] exp(-2 pi i j k / n).
 */
#ifndef TENFERRO_FFT_H
#define TENFERRO_FFT_H

#include <stdint.h>

#include "tenferro/export.h"
#include "tenferro/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Scalings of the transforms; numbers are part of the wire protocol (proto FftNorm). */
typedef enum tf_fft_norm {
    TF_FFT_NORM_BACKWARD = 0,
    TF_FFT_NORM_ORTHO = 1,
    TF_FFT_NORM_FORWARD = 2,
} tf_fft_norm;

/* Complex-to-complex forward transform over the axes (numpy.fft.fftn). */
TF_EXTERN tf_status tf_view_fft(tf_view *v, tf_tensor a, int n_axes, const int *axes,
                                tf_fft_norm norm, tf_tensor *out);

/* Complex-to-complex inverse transform over the axes (numpy.fft.ifftn). */
TF_EXTERN tf_status tf_view_ifft(tf_view *v, tf_tensor a, int n_axes, const int *axes,
                                 tf_fft_norm norm, tf_tensor *out);

/* Real-to-complex forward transform; the last listed axis n becomes n/2+1 (numpy.fft.rfftn). */
TF_EXTERN tf_status tf_view_rfft(tf_view *v, tf_tensor a, int n_axes, const int *axes,
                                 tf_fft_norm norm, tf_tensor *out);

/*
 * Complex-to-real inverse transform (numpy.fft.irfftn): the last listed axis
 * of m elements becomes last_length real ones, where last_length/2+1 == m
 * (else TF_ERR_SHAPE); last_length 0 means numpy's default 2*(m-1).
 */
TF_EXTERN tf_status tf_view_irfft(tf_view *v, tf_tensor a, int n_axes, const int *axes,
                                  int64_t last_length, tf_fft_norm norm, tf_tensor *out);

#ifdef __cplusplus
}
#endif
#endif
