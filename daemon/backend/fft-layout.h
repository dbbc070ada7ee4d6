/*
 * The geometry of an FFT on a contiguous row-major tensor, shared by the
 * backends (fft-layout.c): numpy's normalization factor, and, for libraries
 * whose plans take at most three transform dims and one batch stride (cuFFT's
 * advanced layout), the split of a transform into steps such plans express.
 *
 * A step is one plan: up to three transformed axes, in nesting order, with
 * the embedding sizes and strides that place them in their arrays (axes
 * between them are gaps of the embedding), one run of adjacent other axes
 * as its batch, and any further runs of other axes as loops: the plan runs
 * once per loop index, at offset pointers. docs/fft.md lists which axis sets
 * need more than one step or loops. Private to daemon/backend; needs no
 * vendor header, so its unit test runs everywhere.
 */
#ifndef TENFERRO_DAEMON_FFT_LAYOUT_H
#define TENFERRO_DAEMON_FFT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/backend.h"

/* Most transform dims one plan takes (cuFFT). */
#define TFD_FFT_PLAN_RANK 3

/* The arrays a step reads and writes. */
enum { TFD_FFT_INPUT = 0, TFD_FFT_OUTPUT = 1, TFD_FFT_SCRATCH = 2 };

/* One plan of a transform and how it is run. */
typedef struct tfd_fft_step {
    int kind;    /* tf__fft_kind of this plan: C2C, or the R2C / C2R step of the halved axis */
    int inverse; /* C2C steps: the sign */
    int rank;    /* 1..TFD_FFT_PLAN_RANK */
    int64_t n[TFD_FFT_PLAN_RANK];       /* logical (real) lengths, outermost first */
    int64_t inembed[TFD_FFT_PLAN_RANK]; /* embedding of the transformed dims in the source */
    int64_t onembed[TFD_FFT_PLAN_RANK]; /* ... and in the destination */
    int64_t istride, ostride;           /* elements between neighbours of the innermost dim */
    int64_t idist, odist, batch;        /* the batch run */
    int n_loops;                        /* runs the plan cannot cover: one execution per index */
    int64_t loop_n[TF_MAX_RANK], loop_in[TF_MAX_RANK], loop_out[TF_MAX_RANK];
    int src, dst; /* TFD_FFT_INPUT, _OUTPUT or _SCRATCH (src == dst: in place) */
} tfd_fft_step;

/* A whole transform: its steps in execution order. */
typedef struct tfd_fft_layout {
    int n_steps; /* 0: every transformed axis has length 1, the output is a copy of the input */
    tfd_fft_step steps[TF_MAX_RANK];
    int scratch;    /* C2R: a complex scratch array of the input's shape is needed */
    int copy_input; /* C2R with no C2C step: the input is copied into the scratch first */
    int64_t launches; /* plan executions in all */
} tfd_fft_layout;

/*
 * The factor a valid FFT's output is multiplied by, as numpy's norm: 1,
 * 1/sqrt(n) or 1/n, where n is the product of the transformed lengths of
 * the real side (the input's for C2C and R2C, last_length for C2R's axis).
 */
double tfd_fft_scale(const tf__fft *f, const tf__meta *in);

/*
 * Checks that a validated OP_FFT still describes the views it names (one
 * input, the descriptor valid for it, the output the rules give) before a
 * library indexes memory with them; writes the input's metadata into *in.
 */
tf_status tfd_fft_check_op(const tfd_op *op, tf__meta *in, char *msg, size_t msg_len);

/*
 * The transformed axes of f in the order the plan caches key them: sorted,
 * except that R2C and C2R keep their halved axis last (transforms that
 * differ only in the order of their axes are the same transform). Returns
 * how many were written into axes.
 */
int tfd_fft_canonical_axes(const tf__fft *f, int rank, int32_t *axes);

/*
 * Splits a valid FFT (tf__infer_fft accepted f for `in`) into steps of at
 * most TFD_FFT_PLAN_RANK axes with one batch run each, choosing among the
 * ways of grouping the axes the one that costs least: a pass over the data
 * per step, and an execution per loop index.
 */
void tfd_fft_layout_of(const tf__fft *f, const tf__meta *in, tfd_fft_layout *out);

#endif
