/*
 * The CUDA backend's FFTs and its daemon-wide cuFFT plan cache
 * (cuda/fft.c), as cuda/backend.c uses them. Needs the CUDA headers; private
 * to daemon/backend. Every function expects the device to be current on the
 * calling thread and the context usable (the backend's enter() succeeded).
 */
#ifndef TENFERRO_DAEMON_CUDA_FFT_H
#define TENFERRO_DAEMON_CUDA_FFT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/cuda/internal.h"
#include "daemon/backend/plan-cache.h"

typedef struct tfd_cuda_fft tfd_cuda_fft;

/* Makes the (empty) plan cache, bounded by config's fft_plans. */
tf_status tfd_cuda_fft_open(const tfd_cache_config *config, tfd_cuda_fft **out, char *msg,
                            size_t msg_len);

/* Destroys every plan (cuFFT calls only with device_ok) and the cache; nothing in use. */
void tfd_cuda_fft_close(tfd_cuda_fft *ff, int device_ok);

/* Enqueues op's transform (a validated OP_FFT) on the stream; sm_count sizes the scaling kernel. */
tf_status tfd_cuda_fft_run(tfd_cuda_fft *ff, tfd_cuda_stream *s, const tfd_op *op, int sm_count,
                           char *msg, size_t msg_len);

/*
 * Makes op's plans (a validated OP_FFT) outside the cache, for a graph about
 * to capture it, and hands them to the capture (cuda/graph.c), which
 * destroys them with the graph; the capture's run of op then uses them.
 * Nothing to make for a transform that is a copy. Called before the capture
 * begins: planning allocates device memory and copies synchronously.
 */
tf_status tfd_cuda_fft_prepare(const tfd_op *op, tfd_cuda_capture *cap, char *msg,
                               size_t msg_len);

/* The cache's counters into out[0]; returns 1 (0 when max < 1). */
int tfd_cuda_fft_caches(tfd_cuda_fft *ff, tfd_cache_stats *out, int max);

/* Empties the cache (trim) without waiting: its plans go at the next drain or at close. */
uint64_t tfd_cuda_fft_clear(tfd_cuda_fft *ff);

/* 1 when plans the cache let go of (evicted, trimmed) wait for tfd_cuda_fft_drain. */
int tfd_cuda_fft_to_drain(tfd_cuda_fft *ff);

/* Destroys the plans the cache let go of; may synchronize the device (a worker, before an FFT). */
void tfd_cuda_fft_drain(tfd_cuda_fft *ff);

#endif
