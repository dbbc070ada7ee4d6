/*
 * FFTs of the CUDA backend (OP_FFT), through cuFFT, and its daemon-wide
 * cuFFT plan cache.
 *
 * A transform is split (fft-layout.c) into steps that cuFFT's advanced
 * layout expresses: up to three transformed axes with their embedding and
 * innermost stride, one batch run of the other axes with its distance, so
 * transformed axes that are not the last need no transpose; a step whose
 * other axes lie on both sides of its group runs once per index of the
 * shorter side, and more than three axes (or R2C/C2R's halved axis followed
 * by transformed axes) take several steps. Each step is one plan made with
 * cufftMakePlanMany64 and automatic work-area allocation off: its work area
 * comes from the stream's block cache (cuda/alloc.c) for the call and goes
 * back right after the launches, ordered on the same stream. cuFFT's
 * complex-to-real transforms overwrite their input, so C2R runs from a
 * scratch copy (or from the output of the C2C steps before it, written
 * there) and the client's tensor never changes. Normalization is one small
 * scaling kernel (cuda/kernels.cu; cuFFT's callbacks would need its static
 * library, which this build does not link).
 *
 * The cache: one entry holds the plans of one transform (kind, dtype,
 * shape, canonical axes, C2R's length: the layout follows from them; a C2C
 * plan serves both directions). A plan is bound to a stream for the call
 * (cufftSetStream), so an entry serves one stream at a time: the cache is
 * exclusive, and a second stream that needs a key while its entry is busy
 * makes a twin rather than wait. The bound is the LRU of [caches] fft_plans.
 * cuFFT's handles are not shared between threads: an entry is used by the
 * one worker that took it. Destroying a plan frees device memory, which
 * waits for the whole device, so a plan the cache lets go of (evicted,
 * trimmed) is destroyed by the next FFT a worker runs (the cache's drain),
 * or at close: never on the event loop's thread, where `tenferroctl trim`
 * empties the cache. (cuda/backend.c drains before each FFT, holding off
 * graph captures meanwhile: cufftDestroy may synchronize the device.)
 *
 * Graphs (cuda/graph.c): a captured cufftExec keeps pointers into its plan's
 * device data for every replay, and the cache may destroy a plan once it is
 * released. So an FFT of a graph gets plans of its own, outside the cache,
 * made before the capture begins (tfd_cuda_fft_prepare: planning allocates
 * and copies synchronously, which has no place inside a capture) and owned
 * by the graph; while the stream captures, the run takes those and leaves
 * the cache alone.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cufft.h>

#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/fft.h"
#include "daemon/backend/cuda/graph.h"
#include "daemon/backend/cuda/kernels.h"
#include "daemon/backend/fft-layout.h"
#include "daemon/log.h"

/* The name of a cuFFT status. */
static const char *cufft_name(cufftResult r) {
    switch (r) {
    case CUFFT_SUCCESS: return "CUFFT_SUCCESS";
    case CUFFT_INVALID_PLAN: return "CUFFT_INVALID_PLAN";
    case CUFFT_ALLOC_FAILED: return "CUFFT_ALLOC_FAILED";
    case CUFFT_INVALID_TYPE: return "CUFFT_INVALID_TYPE";
    case CUFFT_INVALID_VALUE: return "CUFFT_INVALID_VALUE";
    case CUFFT_INTERNAL_ERROR: return "CUFFT_INTERNAL_ERROR";
    case CUFFT_EXEC_FAILED: return "CUFFT_EXEC_FAILED";
    case CUFFT_SETUP_FAILED: return "CUFFT_SETUP_FAILED";
    case CUFFT_INVALID_SIZE: return "CUFFT_INVALID_SIZE";
    case CUFFT_UNALIGNED_DATA: return "CUFFT_UNALIGNED_DATA";
    case CUFFT_INVALID_DEVICE: return "CUFFT_INVALID_DEVICE";
    case CUFFT_NO_WORKSPACE: return "CUFFT_NO_WORKSPACE";
    case CUFFT_NOT_IMPLEMENTED: return "CUFFT_NOT_IMPLEMENTED";
    case CUFFT_NOT_SUPPORTED: return "CUFFT_NOT_SUPPORTED";
    default: return "an unknown cuFFT status";
    }
}

/* Out of memory keeps its status, a layout cuFFT cannot plan is unsupported, the rest the device's. */
static tf_status status_of_cufft(cufftResult r) {
    switch (r) {
    case CUFFT_ALLOC_FAILED: return TF_ERR_NO_MEMORY;
    case CUFFT_INVALID_SIZE:
    case CUFFT_INVALID_VALUE:
    case CUFFT_INVALID_TYPE:
    case CUFFT_NOT_IMPLEMENTED:
    case CUFFT_NOT_SUPPORTED: return TF_ERR_UNSUPPORTED;
    default: return TF_ERR_DEVICE;
    }
}

/* Writes "<call> failed at <file>:<line>: <status>" and maps the status (the cuBLAS macros' twin). */
static tf_status cufft_fail(cufftResult r, const char *call, int line, char *msg, size_t msg_len) {
    snprintf(msg, msg_len, "%s failed at cuda/fft.c:%d: %s (%d)", call, line, cufft_name(r), (int)r);
    return status_of_cufft(r);
}

/* Runs a cuFFT call; on failure stores the status in `status` and jumps to `label`. */
#define TFD_CUFFT_CHECK_GOTO(call, status, msg, msg_len, label)                        \
    do {                                                                               \
        cufftResult tfd_r_ = (call);                                                   \
        if (tfd_r_ != CUFFT_SUCCESS) {                                                 \
            (status) = cufft_fail(tfd_r_, #call, __LINE__, (msg), (msg_len));          \
            goto label;                                                                \
        }                                                                              \
    } while (0)

/* Everything the plans of a transform depend on; zero-filled, so it compares bytewise. */
typedef struct fft_key {
    int32_t kind, dtype, rank, n_axes;
    int64_t shape[TF_MAX_RANK];
    int32_t axes[TF_MAX_RANK]; /* canonical (tfd_fft_canonical_axes) */
    int64_t last_length;       /* C2R only */
} fft_key;

/* A cached transform: its layout and one cuFFT plan per step. */
typedef struct fft_plans {
    tfd_fft_layout layout;
    cufftHandle handle[TF_MAX_RANK];
    int n_handles;
    size_t work_bytes; /* the largest work area a step needs */
} fft_plans;

struct tfd_cuda_fft {
    tfd_plan_cache cache;
    int device_ok; /* 0 at a close after the context became unusable: no cuFFT calls */
};

/* Destroys a transform's plans; the device is current and usable on the calling thread. */
static void destroy_now(fft_plans *p, int device_ok) {
    for (int i = 0; i < p->n_handles && device_ok; i++) {
        cufftResult r = cufftDestroy(p->handle[i]);
        if (r != CUFFT_SUCCESS) tfd_log(TFD_LOG_ERROR, "cuda: cufftDestroy: %s", cufft_name(r));
    }
    free(p);
}

/*
 * The plan cache's destroy callback. It may run on any thread, the loop's
 * too, so it declines, and the drain of the next FFT (a worker) or of close
 * destroys (must).
 */
static int destroy_plans(void *value, void *arg, int must) {
    const tfd_cuda_fft *ff = arg;
    if (!must) return 0;
    destroy_now(value, ff->device_ok);
    return 1;
}

/* The cuFFT transform type of a step of an input of dtype `in` (the step's source is complex unless R2C). */
static cufftType type_of(int kind, tf_dtype in) {
    const int dbl = in == TF_F64 || in == TF_C128;
    switch (kind) {
    case TF__FFT_R2C: return dbl ? CUFFT_D2Z : CUFFT_R2C;
    case TF__FFT_C2R: return dbl ? CUFFT_Z2D : CUFFT_C2R;
    default: return dbl ? CUFFT_Z2Z : CUFFT_C2C;
    }
}

/* Makes the plans of op's transform (layout already computed into p). */
static tf_status make_plans(fft_plans *p, tf_dtype in_dtype, char *msg, size_t msg_len) {
    tf_status st = TF_OK;
    for (int i = 0; i < p->layout.n_steps; i++) {
        const tfd_fft_step *s = &p->layout.steps[i];
        long long n[TFD_FFT_PLAN_RANK], inembed[TFD_FFT_PLAN_RANK], onembed[TFD_FFT_PLAN_RANK];
        for (int j = 0; j < s->rank; j++) {
            n[j] = s->n[j];
            inembed[j] = s->inembed[j];
            onembed[j] = s->onembed[j];
        }
        size_t work = 0;
        cufftHandle h;
        TFD_CUFFT_CHECK_GOTO(cufftCreate(&h), st, msg, msg_len, fail);
        p->handle[p->n_handles++] = h;
        TFD_CUFFT_CHECK_GOTO(cufftSetAutoAllocation(h, 0), st, msg, msg_len, fail);
        TFD_CUFFT_CHECK_GOTO(cufftMakePlanMany64(h, s->rank, n, inembed, s->istride, s->idist, onembed,
                                                 s->ostride, s->odist, type_of(s->kind, in_dtype),
                                                 s->batch, &work),
                             st, msg, msg_len, fail);
        if (work > p->work_bytes) p->work_bytes = work;
    }
    return TF_OK;
fail:
    return st; /* the caller destroys what was made */
}

/* Bytes of one element of a step's array: the op's input or output, or C2R's complex scratch. */
static size_t element_bytes(const tfd_op *op, int array) {
    switch (array) {
    case TFD_FFT_INPUT: return tf_dtype_size(op->in[0].dtype);
    case TFD_FFT_OUTPUT: return tf_dtype_size(op->out.dtype);
    default: return tf_dtype_size(op->in[0].dtype); /* the scratch copies the (complex) input */
    }
}

/* One execution of a step's plan at the given arrays. */
static cufftResult exec(cufftHandle h, int kind, int inverse, int dbl, void *src, void *dst) {
    const int dir = inverse ? CUFFT_INVERSE : CUFFT_FORWARD;
    switch (kind) {
    case TF__FFT_R2C:
        return dbl ? cufftExecD2Z(h, src, dst) : cufftExecR2C(h, src, dst);
    case TF__FFT_C2R:
        return dbl ? cufftExecZ2D(h, src, dst) : cufftExecC2R(h, src, dst);
    default:
        return dbl ? cufftExecZ2Z(h, src, dst, dir) : cufftExecC2C(h, src, dst, dir);
    }
}

/* Enqueues every step of a transform on the stream; the plans are this caller's for now. */
static tf_status launch(const fft_plans *p, tfd_cuda_stream *s, const tfd_op *op, void *scratch,
                        void *work, char *msg, size_t msg_len) {
    tf_status st = TF_OK;
    const int dbl = op->in[0].dtype == TF_F64 || op->in[0].dtype == TF_C128;
    /*
     * The direction is this call's, not the cached layout's: one cached plan
     * serves both directions, and its layout was made by whichever call came
     * first (a forward C2C then an inverse of the same shape share it).
     */
    const int inverse = op->fft.kind == TF__FFT_C2R ||
                        (op->fft.kind == TF__FFT_C2C && op->fft.inverse);
    char *arrays[3] = {op->in[0].data, op->out.data, scratch};
    for (int i = 0; i < p->layout.n_steps; i++) {
        const tfd_fft_step *step = &p->layout.steps[i];
        const cufftHandle h = p->handle[i];
        TFD_CUFFT_CHECK_GOTO(cufftSetStream(h, s->stream), st, msg, msg_len, done);
        if (p->work_bytes) TFD_CUFFT_CHECK_GOTO(cufftSetWorkArea(h, work), st, msg, msg_len, done);
        const size_t ie = element_bytes(op, step->src), oe = element_bytes(op, step->dst);
        int64_t idx[TF_MAX_RANK] = {0};
        for (;;) {
            int64_t io = 0, oo = 0;
            for (int l = 0; l < step->n_loops; l++) {
                io += idx[l] * step->loop_in[l];
                oo += idx[l] * step->loop_out[l];
            }
            TFD_CUFFT_CHECK_GOTO(exec(h, step->kind, inverse, dbl,
                                      arrays[step->src] + (size_t)io * ie,
                                      arrays[step->dst] + (size_t)oo * oe),
                                 st, msg, msg_len, done);
            int l = step->n_loops - 1;
            while (l >= 0 && ++idx[l] == step->loop_n[l]) idx[l--] = 0;
            if (l < 0) break;
        }
    }
done:
    return st;
}

/* The plans of op's transform, from the cache or made now. */
static tf_status take_plans(tfd_cuda_fft *ff, const tfd_op *op, const tf__meta *in,
                            tfd_plan_entry **entry, char *msg, size_t msg_len) {
    fft_key key;
    memset(&key, 0, sizeof key);
    key.kind = op->fft.kind;
    key.dtype = in->dtype;
    key.rank = in->rank;
    for (int a = 0; a < in->rank; a++) key.shape[a] = in->shape[a];
    key.n_axes = tfd_fft_canonical_axes(&op->fft, in->rank, key.axes);
    key.last_length = op->fft.kind == TF__FFT_C2R ? op->fft.last_length : 0;
    *entry = tfd_plan_cache_acquire(&ff->cache, &key);
    if (*entry) return TF_OK;
    fft_plans *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(msg, msg_len, "cuda: out of host memory planning an FFT");
        return TF_ERR_NO_MEMORY;
    }
    tfd_fft_layout_of(&op->fft, in, &p->layout);
    tf_status st = make_plans(p, in->dtype, msg, msg_len);
    if (st == TF_OK) {
        *entry = tfd_plan_cache_insert(&ff->cache, &key, p, 0);
        if (*entry) return TF_OK;
        snprintf(msg, msg_len, "cuda: out of host memory caching an FFT plan");
        st = TF_ERR_NO_MEMORY;
    }
    destroy_now(p, 1);
    return st;
}

/* A C2C whose every transformed axis has length 1: each 1-point DFT is the identity (and n = 1). */
static int copy_only(const tfd_op *op) {
    int only = op->fft.kind == TF__FFT_C2C;
    for (int i = 0; i < op->fft.n_axes; i++) only &= op->in[0].shape[op->fft.axes[i]] == 1;
    return only;
}

/* The adopted plans' destructor: the graph that owned them is gone. */
static void destroy_private(void *plans, int device_ok) { destroy_now(plans, device_ok); }

tf_status tfd_cuda_fft_prepare(const tfd_op *op, tfd_cuda_capture *cap, char *msg,
                               size_t msg_len) {
    tf__meta in_meta;
    tf_status st = tfd_fft_check_op(op, &in_meta, msg, msg_len);
    if (st != TF_OK || copy_only(op)) return st;
    fft_plans *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(msg, msg_len, "cuda: out of host memory planning an FFT");
        return TF_ERR_NO_MEMORY;
    }
    tfd_fft_layout_of(&op->fft, &in_meta, &p->layout);
    st = make_plans(p, in_meta.dtype, msg, msg_len);
    if (st == TF_OK) st = tfd_cuda_capture_adopt(cap, op, p, destroy_private, msg, msg_len);
    if (st != TF_OK) destroy_now(p, 1);
    return st;
}

tf_status tfd_cuda_fft_run(tfd_cuda_fft *ff, tfd_cuda_stream *s, const tfd_op *op, int sm_count,
                           char *msg, size_t msg_len) {
    const tfd_tensor_view *in = &op->in[0], *out = &op->out;
    tf__meta in_meta;
    tf_status st = tfd_fft_check_op(op, &in_meta, msg, msg_len);
    if (st != TF_OK) return st;
    const size_t in_bytes = (size_t)in->numel * tf_dtype_size(in->dtype);
    if (copy_only(op)) {
        TFD_CUDA_CHECK_RET(cudaMemcpyAsync(out->data, in->data, in_bytes, cudaMemcpyDeviceToDevice,
                                           s->stream),
                           msg, msg_len);
        return TF_OK;
    }
    tfd_plan_entry *entry = NULL;
    const fft_plans *p = NULL;
    if (s->capture != NULL) {
        p = tfd_cuda_capture_find(s->capture, op);
        if (p == NULL) {
            snprintf(msg, msg_len, "cuda: an FFT is captured without the plans made for its graph");
            return TF_ERR_INTERNAL;
        }
    } else {
        if ((st = take_plans(ff, op, &in_meta, &entry, msg, msg_len)) != TF_OK) return st;
        p = tfd_plan_entry_value(entry);
    }
    void *scratch = NULL, *work = NULL;
    if (p->layout.scratch) {
        st = tfd_cuda_cache_alloc(s, in_bytes, &scratch, msg, msg_len);
        if (st != TF_OK) goto done;
        if (p->layout.copy_input)
            TFD_CUDA_CHECK_GOTO(cudaMemcpyAsync(scratch, in->data, in_bytes,
                                                cudaMemcpyDeviceToDevice, s->stream),
                                st, msg, msg_len, done);
    }
    if (p->work_bytes) {
        st = tfd_cuda_cache_alloc(s, p->work_bytes, &work, msg, msg_len);
        if (st != TF_OK) goto done;
    }
    st = launch(p, s, op, scratch, work, msg, msg_len);
    if (st == TF_OK) {
        const double factor = tfd_fft_scale(&op->fft, &in_meta);
        const int cplx = out->dtype == TF_C64 || out->dtype == TF_C128;
        if (factor != 1.0)
            TFD_CUDA_CHECK_GOTO(
                tfd_cuda_launch_fft_scale(out->data, out->numel * (cplx ? 2 : 1),
                                          out->dtype == TF_F64 || out->dtype == TF_C128, factor,
                                          sm_count, s->stream),
                st, msg, msg_len, done);
    }
done:
    /* Stream-ordered: the blocks go back after the launches that use them. */
    if (work) tfd_cuda_cache_free(s, work, p->work_bytes);
    if (scratch) tfd_cuda_cache_free(s, scratch, in_bytes);
    if (entry) tfd_plan_cache_release(&ff->cache, entry);
    return st;
}

tf_status tfd_cuda_fft_open(const tfd_cache_config *config, tfd_cuda_fft **out, char *msg,
                            size_t msg_len) {
    tfd_cuda_fft *ff = calloc(1, sizeof *ff);
    if (!ff || tfd_plan_cache_init(&ff->cache, "fft_plans", sizeof(fft_key), config->fft_plans, 1,
                                   destroy_plans, ff) != 0) {
        free(ff);
        snprintf(msg, msg_len, "cuda: out of host memory making the cuFFT plan cache");
        return TF_ERR_NO_MEMORY;
    }
    ff->device_ok = 1;
    *out = ff;
    return TF_OK;
}

void tfd_cuda_fft_close(tfd_cuda_fft *ff, int device_ok) {
    if (!ff) return;
    ff->device_ok = device_ok;
    tfd_plan_cache_destroy(&ff->cache);
    free(ff);
}

int tfd_cuda_fft_caches(tfd_cuda_fft *ff, tfd_cache_stats *out, int max) {
    if (!ff || max < 1) return 0;
    tfd_plan_cache_stats(&ff->cache, &out[0]);
    return 1;
}

uint64_t tfd_cuda_fft_clear(tfd_cuda_fft *ff) { return ff ? tfd_plan_cache_clear(&ff->cache) : 0; }

int tfd_cuda_fft_to_drain(tfd_cuda_fft *ff) {
    return ff && tfd_plan_cache_declined(&ff->cache) > 0;
}

void tfd_cuda_fft_drain(tfd_cuda_fft *ff) {
    if (ff) tfd_plan_cache_drain(&ff->cache);
}
