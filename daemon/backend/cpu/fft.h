/*
 * The CPU backend's FFTW plans (cpu/fft-cache.c), as the transform itself
 * (cpu/fft.c) uses them: a key that names one transform on one pair of
 * array alignments, and a daemon-wide cache from keys to plans made through
 * FFTW's guru64 interface, with the planner's lock, the planner flag and the
 * wisdom file of [caches]. Private to daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CPU_FFT_H
#define TENFERRO_DAEMON_CPU_FFT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/backend.h"
#include "daemon/backend/plan-cache.h"

/*
 * Everything an FFTW plan depends on: FFTW may execute a plan on new arrays
 * of the same shape, strides, in-place-ness and alignment class (always out
 * of place here). Zero-filled before use, so it compares bytewise.
 */
typedef struct tfd_fftw_key {
    int32_t kind;    /* tf__fft_kind */
    int32_t inverse; /* the sign: 1 = FFTW_BACKWARD (C2C inverse, and C2R) */
    int32_t dtype;   /* the input's dtype */
    int32_t rank;
    int64_t shape[TF_MAX_RANK]; /* the input's shape (0 past the rank) */
    int32_t n_axes;
    int32_t axes[TF_MAX_RANK]; /* ascending, but R2C/C2R's halved axis last */
    int64_t last_length;       /* C2R: the output length of the halved axis; else 0 */
    int32_t align_in, align_out; /* fftw_alignment_of the arrays */
} tfd_fftw_key;

typedef struct tfd_fftw_cache tfd_fftw_cache;

/*
 * Makes the cache with config's bound and planner, and reads the wisdom file
 * (a missing or unreadable one is logged at info).
 */
tf_status tfd_fftw_cache_open(const tfd_cache_config *config, tfd_fftw_cache **out, char *msg,
                              size_t msg_len);

/* Writes the wisdom back (planner measure or patient) and destroys every plan; nothing in use. */
void tfd_fftw_cache_close(tfd_fftw_cache *fc);

/*
 * The plan for key, from the cache or made now (under the planner's lock, on
 * scratch arrays: the planner may overwrite what it plans on). The caller
 * executes it on its arrays and gives it back with tfd_fftw_cache_release.
 */
tf_status tfd_fftw_cache_acquire(tfd_fftw_cache *fc, const tfd_fftw_key *key,
                                 tfd_plan_entry **entry, char *msg, size_t msg_len);

/* The fftw_plan or fftwf_plan of a taken entry (by the key's dtype). */
void *tfd_fftw_entry_plan(const tfd_plan_entry *entry);

void tfd_fftw_cache_release(tfd_fftw_cache *fc, tfd_plan_entry *entry);

/* Destroys every plan not in use (trim); returns how many entries were taken out. */
uint64_t tfd_fftw_cache_clear(tfd_fftw_cache *fc);

void tfd_fftw_cache_stats(tfd_fftw_cache *fc, tfd_cache_stats *out);

/*
 * The strides of a row-major tensor (element units) and the transform's
 * geometry, shared by planning and execution: the input and output shapes
 * of key and the logical length of every transformed axis.
 */
typedef struct tfd_fftw_geometry {
    int64_t in_shape[TF_MAX_RANK], out_shape[TF_MAX_RANK];
    int64_t in_stride[TF_MAX_RANK], out_stride[TF_MAX_RANK];
    int64_t length[TF_MAX_RANK]; /* the transform length of each axis (real length for R2C/C2R) */
    int64_t in_numel, out_numel;
} tfd_fftw_geometry;

void tfd_fftw_geometry_of(const tfd_fftw_key *key, tfd_fftw_geometry *g);

#endif
