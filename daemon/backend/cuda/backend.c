/*
 * The CUDA backend: device life cycle, streams, stream-ordered memory, copies,
 * completion events, and the validation and dispatch of the operation
 * families (kernels in cuda/kernels.cu, matrix products in cuda/matmul.c,
 * the fault-injection kernel of the tests in cuda/fault.cu, contractions in
 * cuda/contract.c, FFTs and their plan cache in cuda/fft.c, prepared graphs
 * as CUDA graphs in cuda/graph.c, linear algebra through cuSOLVER in
 * cuda/linalg.c, slices in cuda/linalg-kernels.cu).
 *
 * Everything is asynchronous on the logical stream's CUDA stream: operations
 * are launches, copies are cudaMemcpyAsync, and memory comes from each
 * stream's block cache (cuda/alloc.c), which takes slabs and large blocks from
 * the device's default memory pool with cudaMallocAsync/cudaFreeAsync, the
 * pool's release threshold raised to the maximum so freed memory is kept for
 * reuse instead of going back to the driver. The executor learns of
 * completion through events: event_record records one after the work it
 * covers, and the completion thread waits on it, which is where a kernel
 * fault surfaces. An event also remembers its stream and that stream's
 * linear-algebra check sequence, so event_failure can report what the
 * device found in the work it covers (cuda/linalg.c).
 *
 * Threads: the loop thread (stream_create/destroy, alloc), the workers (ops,
 * copies, free, event_record) and the completion thread (event_wait/destroy)
 * all call in, so every entry first makes the device current on its thread
 * (cached per thread, so this costs one comparison after the first call).
 * Streams (with their cuBLAS handle) and events are pooled: cublasDestroy
 * synchronizes the whole device, which the loop thread must never wait for,
 * and creating either costs far more than taking it from a list.
 *
 * Errors go through the check macros of cuda/check.h. A sticky error (a
 * kernel fault) poisons the context for the rest of the process; from then on
 * every entry fails fast with the first fault's message, and
 * tfd_cuda_context_poisoned() tells the daemon to report and exit.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "daemon/backend/contract-cache.h"
#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/fft.h"
#include "daemon/backend/cuda/graph.h"
#include "daemon/backend/cuda/internal.h"
#include "daemon/backend/cuda/peer.h"
#include "daemon/backend/cuda/kernels.h"
#include "daemon/backend/cuda/linalg-kernels.h"
#include "daemon/log.h"

/* Smallest allocation handed out: a zero-byte tensor still gets a distinct, aligned pointer. */
#define MIN_ALLOC ((size_t)256)
/* Idle streams (each with a cuBLAS handle and its workspace) kept for the next connection. */
#define STREAM_POOL_MAX 32
/* Streams created at open, so the first clients do not pay for cublasCreate. */
#define PREWARM_STREAMS 2
/* Idle events kept for reuse. */
#define EVENT_POOL_MAX 1024
/* The oldest compute capability the kernels are built for (-gencode sm_90 in the Makefile). */
#define MIN_CC_MAJOR 9

/*
 * An event of this backend: the CUDA event, and the stream and check
 * sequence (cuda/linalg.c) of the work it covers; stream NULL: none.
 */
typedef struct cuda_event {
    cudaEvent_t ev;
    tfd_cuda_stream *stream;
    uint64_t seq;
} cuda_event;

/* The device state behind be->impl. */
typedef struct cuda_impl {
    int ordinal;
    int sm_count;
    int prio_least, prio_greatest; /* CUDA's range: lower numbers are more urgent */
    cudaMemPool_t pool;
    int pool_shareable; /* pool was made shareable (cuda/peer.c), not the default one */
    tfd_cuda_heap heap;   /* every stream, for trim (cuda/alloc.c) */
    pthread_mutex_t lock; /* guards the two pools below */
    tfd_cuda_stream *free_streams;
    int n_free_streams;
    cuda_event *free_events[EVENT_POOL_MAX];
    int n_free_events;
    tfd_cuda_fft *fft; /* the daemon-wide cuFFT plans (cuda/fft.c) */
    tfd_cuda_graphs graphs; /* prepared graphs' capture stream (cuda/graph.c) */
} cuda_impl;

/* ---- errors ---- */

static atomic_int poison_claimed;
static atomic_int poisoned;
static char poison_reason[512];

int tfd_cuda_context_poisoned(void) { return atomic_load(&poisoned); }

const char *tfd_cuda_poison_reason(void) { return atomic_load(&poisoned) ? poison_reason : ""; }

/* Errors after which CUDA fails every later call in this process (the driver says "relaunch"). */
static int is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

/* Records the first sticky error; later ones only repeat what the first already said. */
static void note_poison(const char *reason) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&poison_claimed, &expected, 1)) return;
    snprintf(poison_reason, sizeof poison_reason, "%s", reason);
    atomic_store(&poisoned, 1);
    tfd_log(TFD_LOG_ERROR, "cuda: device fault, the CUDA context is unusable from now on: %s",
            reason);
}

/* The file name without its directories, to keep messages inside the executor's 256 bytes. */
static const char *base_name(const char *file) {
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

/* Out of memory and bad arguments keep their own status; everything else is the device's. */
static tf_status status_of_cuda(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return TF_ERR_NO_MEMORY;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidMemcpyDirection:
        return TF_ERR_INVALID_ARGUMENT;
    default:
        return TF_ERR_DEVICE;
    }
}

tf_status tfd_cuda_fail(cudaError_t err, const char *call, const char *file, int line, char *msg,
                        size_t msg_len) {
    char text[512];
    const int sticky = is_sticky(err);
    snprintf(text, sizeof text, "%s failed at %s:%d: %s (%s)%s", call, base_name(file), line,
             cudaGetErrorString(err), cudaGetErrorName(err),
             sticky ? "; the CUDA context is now unusable: restart tenferrod" : "");
    if (sticky)
        note_poison(text);
    else
        (void)cudaGetLastError(); /* so a later launch check does not report this one again */
    if (msg != NULL && msg_len > 0)
        snprintf(msg, msg_len, "%s", text);
    else
        tfd_log(TFD_LOG_ERROR, "cuda: %s", text);
    return sticky ? TF_ERR_DEVICE : status_of_cuda(err);
}

/* The same split for cuBLAS, where an unsupported configuration is its own status. */
static tf_status status_of_cublas(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
        return TF_ERR_NO_MEMORY;
    case CUBLAS_STATUS_INVALID_VALUE:
        return TF_ERR_INVALID_ARGUMENT;
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return TF_ERR_UNSUPPORTED;
    default:
        return TF_ERR_DEVICE;
    }
}

tf_status tfd_cublas_fail(cublasStatus_t st, const char *call, const char *file, int line,
                          char *msg, size_t msg_len) {
    char text[512];
    snprintf(text, sizeof text, "%s failed at %s:%d: %s (%s)", call, base_name(file), line,
             cublasGetStatusString(st), cublasGetStatusName(st));
    if (msg != NULL && msg_len > 0)
        snprintf(msg, msg_len, "%s", text);
    else
        tfd_log(TFD_LOG_ERROR, "cuda: %s", text);
    return status_of_cublas(st);
}

/* ---- the calling thread's device ---- */

/* The device this thread last made current through enter(); -1 before its first call. */
static _Thread_local int thread_device = -1;

/*
 * Prepares the calling thread for CUDA calls: refuses once the context is
 * poisoned, makes the device current, and surfaces a sticky error left behind
 * by earlier asynchronous work (non-sticky leftovers were already reported).
 */
static tf_status enter(const cuda_impl *impl, char *msg, size_t msg_len) {
    if (atomic_load(&poisoned)) {
        if (msg != NULL && msg_len > 0)
            snprintf(msg, msg_len,
                     "cuda: the CUDA context is unusable since an earlier device fault: %s",
                     poison_reason);
        return TF_ERR_DEVICE;
    }
    if (impl == NULL) {
        if (msg != NULL && msg_len > 0) snprintf(msg, msg_len, "cuda: the backend is not open");
        return TF_ERR_INTERNAL;
    }
    if (thread_device != impl->ordinal) {
        TFD_CUDA_CHECK_RET(cudaSetDevice(impl->ordinal), msg, msg_len);
        thread_device = impl->ordinal;
    }
    cudaError_t stale = cudaGetLastError();
    if (stale != cudaSuccess && is_sticky(stale))
        return tfd_cuda_fail(stale, "earlier asynchronous work", __FILE__, __LINE__, msg, msg_len);
    return TF_OK;
}

/* Logs the reason of a failure that the vtable entry cannot hand back (no msg parameter). */
static void log_failure(const char *what, tf_status st, const char *msg) {
    tfd_log(st == TF_ERR_NO_MEMORY ? TFD_LOG_DEBUG : TFD_LOG_ERROR, "cuda: %s: %s (%s)", what, msg,
            tf_status_name(st));
}

/* ---- device ---- */

int tfd_cuda_device_count(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0 ? n : 0;
}

tf_status tfd_cuda_stream_new(tfd_cuda_heap *heap, int prio, tfd_cuda_stream **out, char *msg,
                              size_t msg_len) {
    tf_status st = TF_OK;
    tfd_cuda_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(msg, msg_len, "cuda: out of host memory creating a stream");
        return TF_ERR_NO_MEMORY;
    }
    s->priority = prio;
    if (tfd_cuda_linalg_init(s) != 0) {
        free(s);
        snprintf(msg, msg_len, "cuda: cannot initialise a mutex");
        return TF_ERR_INTERNAL;
    }
    TFD_CUDA_CHECK_GOTO(cudaStreamCreateWithPriority(&s->stream, cudaStreamNonBlocking, prio), st,
                        msg, msg_len, fail);
    TFD_CUBLAS_CHECK_GOTO(cublasCreate(&s->blas), st, msg, msg_len, fail);
    TFD_CUBLAS_CHECK_GOTO(cublasSetStream(s->blas, s->stream), st, msg, msg_len, fail);
    /* Full-precision products, as on the CPU: no TF32 unless a later option asks for it. */
    TFD_CUBLAS_CHECK_GOTO(cublasSetMathMode(s->blas, CUBLAS_DEFAULT_MATH), st, msg, msg_len, fail);
    st = tfd_cuda_cache_attach(heap, s, msg, msg_len);
    if (st != TF_OK) goto fail;
    *out = s;
    return TF_OK;
fail:
    tfd_cuda_linalg_delete(s, 0);
    if (s->blas != NULL) (void)cublasDestroy(s->blas);
    if (s->stream != NULL) (void)cudaStreamDestroy(s->stream);
    free(s);
    return st;
}

/* Only close and a pool overflow destroy streams: cublasDestroy synchronizes the device. */
void tfd_cuda_stream_delete(tfd_cuda_stream *s, int device_ok) {
    tfd_cuda_linalg_delete(s, device_ok); /* its workspaces go back to the cache first */
    tfd_cuda_cache_detach(s, device_ok);
    if (!device_ok) {
        free(s);
        return;
    }
    cublasStatus_t bs = cublasDestroy(s->blas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        (void)tfd_cublas_fail(bs, "cublasDestroy(s->blas)", __FILE__, __LINE__, NULL, 0);
    cudaError_t e = cudaStreamDestroy(s->stream);
    if (e != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaStreamDestroy(s->stream)", __FILE__, __LINE__, NULL, 0);
    if (s->copy != NULL && (e = cudaStreamDestroy(s->copy)) != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaStreamDestroy(s->copy)", __FILE__, __LINE__, NULL, 0);
    free(s);
}

/* Releases everything pooled; device calls only while the context is still usable. */
static void drain_pools(cuda_impl *impl, int device_ok) {
    while (impl->free_streams != NULL) {
        tfd_cuda_stream *s = impl->free_streams;
        impl->free_streams = s->next;
        tfd_cuda_stream_delete(s, device_ok);
    }
    impl->n_free_streams = 0;
    for (int i = 0; i < impl->n_free_events; i++) {
        if (device_ok) (void)cudaEventDestroy(impl->free_events[i]->ev);
        free(impl->free_events[i]);
    }
    impl->n_free_events = 0;
}

/*
 * Opens device `ordinal`: creates its primary context now (not at the first
 * client's call), checks that the kernels can run on it, keeps the default
 * memory pool's memory for reuse and warms a few streams.
 */
static tf_status cuda_open(tfd_backend *be, int ordinal, char *msg, size_t msg_len) {
    tf_status st = TF_OK;
    const int count = tfd_cuda_device_count();
    if (ordinal < 0 || ordinal >= count) {
        snprintf(msg, msg_len, "no CUDA device %d: %d CUDA device%s found; start with --device cpu",
                 ordinal, count, count == 1 ? "" : "s");
        return TF_ERR_DEVICE;
    }
    cuda_impl *impl = calloc(1, sizeof *impl);
    if (impl == NULL) {
        snprintf(msg, msg_len, "cuda: out of host memory opening cuda:%d", ordinal);
        return TF_ERR_NO_MEMORY;
    }
    impl->ordinal = ordinal;
    if (pthread_mutex_init(&impl->lock, NULL) != 0) {
        free(impl);
        snprintf(msg, msg_len, "cuda: cannot initialise a mutex");
        return TF_ERR_INTERNAL;
    }
    if (tfd_cuda_heap_init(&impl->heap) != 0) {
        pthread_mutex_destroy(&impl->lock);
        free(impl);
        snprintf(msg, msg_len, "cuda: cannot initialise a mutex");
        return TF_ERR_INTERNAL;
    }
    TFD_CUDA_CHECK_GOTO(cudaSetDevice(ordinal), st, msg, msg_len, fail);
    thread_device = ordinal;
    TFD_CUDA_CHECK_GOTO(cudaFree(0), st, msg, msg_len, fail);

    struct cudaDeviceProp prop;
    TFD_CUDA_CHECK_GOTO(cudaGetDeviceProperties(&prop, ordinal), st, msg, msg_len, fail);
    if (prop.major < MIN_CC_MAJOR) {
        snprintf(msg, msg_len,
                 "cuda:%d is a %.64s (sm_%d%d); this tenferrod's kernels are built for sm_90 and "
                 "newer: start with --device cpu",
                 ordinal, prop.name, prop.major, prop.minor);
        st = TF_ERR_UNSUPPORTED;
        goto fail;
    }
    int pools_supported = 0;
    TFD_CUDA_CHECK_GOTO(
        cudaDeviceGetAttribute(&pools_supported, cudaDevAttrMemoryPoolsSupported, ordinal), st,
        msg, msg_len, fail);
    if (!pools_supported) {
        snprintf(msg, msg_len,
                 "cuda:%d does not support stream-ordered memory pools (cudaMallocAsync); start "
                 "with --device cpu",
                 ordinal);
        st = TF_ERR_UNSUPPORTED;
        goto fail;
    }
    /*
     * A shareable pool, so another daemon of this host can copy a tensor out
     * of it (cuda/peer.c); where the device has none, the default pool, and
     * copies to other daemons are refused.
     */
    char why[256];
    if (tfd_cuda_pool_create_shareable(ordinal, &impl->pool, why, sizeof why) == TF_OK &&
        cudaDeviceSetMemPool(ordinal, impl->pool) == cudaSuccess) {
        impl->pool_shareable = 1;
    } else {
        if (impl->pool) (void)cudaMemPoolDestroy(impl->pool);
        (void)cudaGetLastError();
        tfd_log(TFD_LOG_INFO, "cuda:%d: %s; copies to other daemons are off", ordinal, why);
        TFD_CUDA_CHECK_GOTO(cudaDeviceGetDefaultMemPool(&impl->pool, ordinal), st, msg, msg_len, fail);
    }
    uint64_t threshold = UINT64_MAX;
    TFD_CUDA_CHECK_GOTO(
        cudaMemPoolSetAttribute(impl->pool, cudaMemPoolAttrReleaseThreshold, &threshold), st, msg,
        msg_len, fail);
    TFD_CUDA_CHECK_GOTO(cudaDeviceGetStreamPriorityRange(&impl->prio_least, &impl->prio_greatest),
                        st, msg, msg_len, fail);
    impl->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    if (tfd_cuda_graphs_init(&impl->graphs, &impl->heap, impl->pool, ordinal) != 0) {
        snprintf(msg, msg_len, "cuda: cannot initialise a mutex");
        st = TF_ERR_INTERNAL;
        goto fail;
    }

    for (int i = 0; i < PREWARM_STREAMS; i++) {
        tfd_cuda_stream *s = NULL;
        int prio = 0 < impl->prio_least ? impl->prio_least : 0;
        if (prio < impl->prio_greatest) prio = impl->prio_greatest;
        st = tfd_cuda_stream_new(&impl->heap, prio, &s, msg, msg_len);
        if (st != TF_OK) goto fail;
        s->next = impl->free_streams;
        impl->free_streams = s;
        impl->n_free_streams++;
    }

    st = tfd_cuda_fft_open(&be->caches, &impl->fft, msg, msg_len);
    if (st != TF_OK) goto fail;

    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) {
        (void)cudaGetLastError();
        driver = 0;
    }
    snprintf(be->description, sizeof be->description,
             "cuda:%d (%.96s, %llu GiB, sm_%d%d, driver %d.%d)", ordinal, prop.name,
             (unsigned long long)(prop.totalGlobalMem >> 30), prop.major, prop.minor,
             driver / 1000, (driver % 1000) / 10);
    be->ordinal = ordinal;
    be->impl = impl;
    return TF_OK;

fail:
    tfd_cuda_graphs_close(&impl->graphs, !atomic_load(&poisoned));
    tfd_cuda_fft_close(impl->fft, !atomic_load(&poisoned));
    drain_pools(impl, !atomic_load(&poisoned));
    tfd_cuda_heap_destroy(&impl->heap);
    pthread_mutex_destroy(&impl->lock);
    free(impl);
    be->impl = NULL;
    return st;
}

/* Waits for all device work, then releases the pooled streams and events. */
static void cuda_close(tfd_backend *be) {
    cuda_impl *impl = be->impl;
    if (impl == NULL) return;
    char msg[256];
    tf_status st = enter(impl, msg, sizeof msg);
    int device_ok = st == TF_OK;
    if (device_ok) {
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            (void)tfd_cuda_fail(e, "cudaDeviceSynchronize()", __FILE__, __LINE__, NULL, 0);
            device_ok = !atomic_load(&poisoned);
        }
    } else {
        log_failure("close", st, msg);
    }
    tfd_cuda_graphs_close(&impl->graphs, device_ok);
    tfd_cuda_fft_close(impl->fft, device_ok);
    pthread_mutex_lock(&impl->lock);
    drain_pools(impl, device_ok);
    pthread_mutex_unlock(&impl->lock);
    if (device_ok && impl->pool_shareable) {
        /* The device's pool is its default one again; the shareable one goes once emptied. */
        cudaMemPool_t fallback;
        if (cudaDeviceGetDefaultMemPool(&fallback, impl->ordinal) == cudaSuccess)
            (void)cudaDeviceSetMemPool(impl->ordinal, fallback);
        (void)cudaMemPoolDestroy(impl->pool);
        (void)cudaGetLastError();
    }
    tfd_cuda_heap_destroy(&impl->heap);
    pthread_mutex_destroy(&impl->lock);
    free(impl);
    be->impl = NULL;
}

/* ---- streams ---- */

/*
 * Maps a priority class onto CUDA's range (lower is more urgent): any class
 * above normal (negative: "high" is -1) gets the greatest priority the device
 * has, any class below it (positive) the least, normal (0) CUDA's default
 * clamped into the range. Passing -1 through would give "high" only one step
 * of the device's range (0 to -5 on an H200).
 */
static int clamp_priority(const cuda_impl *impl, int priority) {
    if (priority < 0) return impl->prio_greatest;
    if (priority > 0) return impl->prio_least;
    int normal = 0 < impl->prio_least ? 0 : impl->prio_least;
    return normal < impl->prio_greatest ? impl->prio_greatest : normal;
}

/* Takes a pooled stream of the same priority when there is one, else creates one. */
static tf_status cuda_stream_create(tfd_backend *be, int priority, void **stream) {
    cuda_impl *impl = be->impl;
    char msg[256];
    *stream = NULL;
    tf_status st = enter(impl, msg, sizeof msg);
    if (st != TF_OK) {
        log_failure("stream_create", st, msg);
        return st;
    }
    const int prio = clamp_priority(impl, priority);
    tfd_cuda_stream *s = NULL;
    pthread_mutex_lock(&impl->lock);
    for (tfd_cuda_stream **link = &impl->free_streams; *link != NULL; link = &(*link)->next) {
        if ((*link)->priority == prio) {
            s = *link;
            *link = s->next;
            impl->n_free_streams--;
            break;
        }
    }
    pthread_mutex_unlock(&impl->lock);
    if (s == NULL) {
        st = tfd_cuda_stream_new(&impl->heap, prio, &s, msg, sizeof msg);
        if (st != TF_OK) {
            log_failure("stream_create", st, msg);
            return st;
        }
    }
    s->next = NULL;
    *stream = s;
    return TF_OK;
}

/*
 * Returns an idle stream to the pool, its cached large blocks and idle slabs
 * given back except the slab being carved: the next owner reuses that and
 * the small blocks freed into it. The caller has waited for its last marker;
 * anything enqueued after that (frees) simply runs before the next owner's
 * work, which is what stream order means.
 */
static void cuda_stream_destroy(tfd_backend *be, void *stream) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    if (s == NULL || impl == NULL) return;
    char msg[256];
    const int device_ok = enter(impl, msg, sizeof msg) == TF_OK;
    tfd_cuda_linalg_idle(s, device_ok); /* before the release: its workspaces are cached blocks */
    if (device_ok) (void)tfd_cuda_cache_release(s, 1);
    pthread_mutex_lock(&impl->lock);
    if (impl->n_free_streams < STREAM_POOL_MAX) {
        s->next = impl->free_streams;
        impl->free_streams = s;
        impl->n_free_streams++;
        s = NULL;
    }
    pthread_mutex_unlock(&impl->lock);
    if (s == NULL) return;
    tfd_cuda_graphs_hold_off(&impl->graphs); /* cublasDestroy synchronizes the device */
    tfd_cuda_stream_delete(s, device_ok);
    tfd_cuda_graphs_resume(&impl->graphs);
}

/* ---- memory ---- */

/*
 * Stream-ordered allocation from the stream's block cache (cuda/alloc.c);
 * usable by work enqueued on `stream` after it.
 */
static tf_status cuda_alloc(tfd_backend *be, void *stream, size_t bytes, void **ptr) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    char msg[256];
    *ptr = NULL;
    tf_status st = enter(impl, msg, sizeof msg);
    if (st != TF_OK) goto fail;
    if (s != NULL) {
        st = tfd_cuda_cache_alloc(s, bytes, ptr, msg, sizeof msg);
        if (st != TF_OK) goto fail;
        return TF_OK;
    }
    if (bytes < MIN_ALLOC) bytes = MIN_ALLOC;
    void *p = NULL;
    /* No stream to order on: allocate from the pool, then make it usable from every stream. */
    TFD_CUDA_CHECK_GOTO(cudaMallocFromPoolAsync(&p, bytes, impl->pool, 0), st, msg, sizeof msg,
                        fail);
    cudaError_t e = cudaStreamSynchronize(0);
    if (e != cudaSuccess) {
        st = tfd_cuda_fail(e, "cudaStreamSynchronize(0)", __FILE__, __LINE__, msg, sizeof msg);
        (void)cudaFree(p);
        goto fail;
    }
    *ptr = p;
    return TF_OK;
fail:
    log_failure("alloc", st, msg);
    return st;
}

/*
 * Stream-ordered free into the stream's block cache: the block is reused by
 * work enqueued on the stream after this call (see cuda/alloc.c for why that
 * is safe). Without a stream, memory from the unordered alloc goes back at once.
 */
static void cuda_free(tfd_backend *be, void *stream, void *ptr, size_t bytes) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    char msg[256];
    if (ptr == NULL) return;
    if (enter(impl, msg, sizeof msg) != TF_OK) return; /* a poisoned context frees nothing */
    if (s != NULL) {
        tfd_cuda_cache_free(s, ptr, bytes);
        return;
    }
    cudaError_t e = cudaFree(ptr);
    if (e != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaFree(ptr)", __FILE__, __LINE__, NULL, 0);
}

/*
 * One asynchronous copy between host and device memory. With pageable host
 * memory (the daemon's frames) CUDA stages the bytes: a host-to-device copy
 * returns once the source has been read, and a device-to-host copy once the
 * destination is written, so the executor's buffer handling stays correct.
 */
static tf_status cuda_copy(tfd_backend *be, void *stream, void *dst, const void *src, size_t bytes,
                           enum cudaMemcpyKind kind, const char *what) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    char msg[256];
    if (bytes == 0) return TF_OK;
    if (dst == NULL || src == NULL || s == NULL) {
        tfd_log(TFD_LOG_ERROR, "cuda: %s of %zu bytes without a %s", what, bytes,
                s == NULL ? "stream" : "buffer");
        return TF_ERR_INVALID_ARGUMENT;
    }
    tf_status st = enter(impl, msg, sizeof msg);
    if (st != TF_OK) goto fail;
    TFD_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, kind, s->stream), st, msg, sizeof msg,
                        fail);
    return TF_OK;
fail:
    log_failure(what, st, msg);
    return st;
}

static tf_status cuda_copy_to_device(tfd_backend *be, void *stream, void *dst, const void *src,
                                     size_t bytes) {
    return cuda_copy(be, stream, dst, src, bytes, cudaMemcpyHostToDevice, "copy_to_device");
}

static tf_status cuda_copy_to_host(tfd_backend *be, void *stream, void *dst, const void *src,
                                   size_t bytes) {
    return cuda_copy(be, stream, dst, src, bytes, cudaMemcpyDeviceToHost, "copy_to_host");
}

static void cuda_event_destroy(tfd_backend *be, void *event);

/* An event from the pool (or a new one), for recording, covering nothing yet. */
static cudaError_t pooled_event(cuda_impl *impl, cuda_event **ev) {
    *ev = NULL;
    pthread_mutex_lock(&impl->lock);
    if (impl->n_free_events > 0) *ev = impl->free_events[--impl->n_free_events];
    pthread_mutex_unlock(&impl->lock);
    if (*ev == NULL) {
        cuda_event *e = calloc(1, sizeof *e);
        if (e == NULL) return cudaErrorMemoryAllocation;
        cudaError_t r = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
        if (r != cudaSuccess) {
            free(e);
            return r;
        }
        *ev = e;
    }
    (*ev)->stream = NULL;
    (*ev)->seq = 0;
    return cudaSuccess;
}

/*
 * A pending transfer's copy on the stream's copy queue: it waits for `after`
 * (an event of this backend; NULL: everything enqueued on the stream so far),
 * copies, and records *done after itself. Kernels enqueued on the stream
 * meanwhile run beside it; whoever depends on the copy waits for *done.
 */
static tf_status cuda_side_copy(tfd_backend *be, void *stream, int to_device, void *dst,
                                const void *src, size_t bytes, void *after, void **done, char *msg,
                                size_t msg_len) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    cuda_event *before = NULL, *ev = NULL;
    const cuda_event *prior = after;
    *done = NULL;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (s == NULL || dst == NULL || src == NULL) {
        snprintf(msg, msg_len, "cuda: side copy of %zu bytes without a %s", bytes,
                 s == NULL ? "stream" : "buffer");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (s->copy == NULL)
        TFD_CUDA_CHECK_GOTO(cudaStreamCreateWithPriority(&s->copy, cudaStreamNonBlocking, s->priority),
                            st, msg, msg_len, fail);
    /* The copy covers the checks its wait covers: everything so far, or what `after` covered. */
    const uint64_t seq = prior == NULL       ? tfd_cuda_linalg_seq(s)
                         : prior->stream == s ? prior->seq
                                              : 0;
    if (prior == NULL) {
        TFD_CUDA_CHECK_GOTO(pooled_event(impl, &before), st, msg, msg_len, fail);
        TFD_CUDA_CHECK_GOTO(cudaEventRecord(before->ev, s->stream), st, msg, msg_len, fail);
        prior = before;
    }
    TFD_CUDA_CHECK_GOTO(cudaStreamWaitEvent(s->copy, prior->ev, 0), st, msg, msg_len, fail);
    TFD_CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes,
                                        to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                        s->copy),
                        st, msg, msg_len, fail);
    TFD_CUDA_CHECK_GOTO(pooled_event(impl, &ev), st, msg, msg_len, fail);
    TFD_CUDA_CHECK_GOTO(cudaEventRecord(ev->ev, s->copy), st, msg, msg_len, fail);
    ev->stream = s;
    ev->seq = seq;
    s->side_copies++;
    if (before != NULL) cuda_event_destroy(be, before);
    *done = ev;
    return TF_OK;
fail:
    if (before != NULL) cuda_event_destroy(be, before);
    if (ev != NULL) cuda_event_destroy(be, ev);
    log_failure("side_copy", st, msg);
    return st;
}

/* What is enqueued on the stream next waits for `event` (a side copy's, or another item's). */
static tf_status cuda_stream_wait(tfd_backend *be, void *stream, void *event, char *msg,
                                  size_t msg_len) {
    tfd_cuda_stream *s = stream;
    if (event == NULL || s == NULL) return TF_OK;
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    TFD_CUDA_CHECK_GOTO(cudaStreamWaitEvent(s->stream, ((const cuda_event *)event)->ev, 0), st,
                        msg, msg_len, fail);
    return TF_OK;
fail:
    log_failure("stream_wait", st, msg);
    return st;
}

/* What is enqueued on the stream next waits for every side copy issued so far. */
static tf_status cuda_join_side_copies(tfd_backend *be, void *stream, char *msg, size_t msg_len) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    if (s == NULL || s->side_copies == 0) return TF_OK;
    cuda_event *ev = NULL;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    TFD_CUDA_CHECK_GOTO(pooled_event(impl, &ev), st, msg, msg_len, fail);
    TFD_CUDA_CHECK_GOTO(cudaEventRecord(ev->ev, s->copy), st, msg, msg_len, fail);
    TFD_CUDA_CHECK_GOTO(cudaStreamWaitEvent(s->stream, ev->ev, 0), st, msg, msg_len, fail);
    cuda_event_destroy(be, ev);
    s->side_copies = 0;
    return TF_OK;
fail:
    if (ev != NULL) cuda_event_destroy(be, ev);
    log_failure("join_side_copies", st, msg);
    return st;
}

/* Zeroes device memory on the stream (cudaMemsetAsync runs at memory bandwidth, a few TB/s). */
static tf_status cuda_fill_zero(tfd_backend *be, void *stream, void *ptr, size_t bytes) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    char msg[256];
    if (bytes == 0) return TF_OK;
    if (ptr == NULL || s == NULL) {
        tfd_log(TFD_LOG_ERROR, "cuda: fill_zero of %zu bytes without a %s", bytes,
                s == NULL ? "stream" : "buffer");
        return TF_ERR_INVALID_ARGUMENT;
    }
    tf_status st = enter(impl, msg, sizeof msg);
    if (st != TF_OK) goto fail;
    TFD_CUDA_CHECK_GOTO(cudaMemsetAsync(ptr, 0, bytes, s->stream), st, msg, sizeof msg, fail);
    return TF_OK;
fail:
    log_failure("fill_zero", st, msg);
    return st;
}

/* ---- descriptor checks shared by the operation families ---- */

static int served_dtype(tf_dtype d) {
    return d == TF_F32 || d == TF_F64 || d == TF_C64 || d == TF_C128;
}

static int is_complex(tf_dtype d) { return d == TF_C64 || d == TF_C128; }


static tf_status dtype_error(const tfd_op *op, tf_dtype dtype, char *msg, size_t msg_len) {
    snprintf(msg, msg_len, "cuda: %s is not served for dtype %s (%d)", tf__op_name(op->kind),
             tf_dtype_name(dtype), (int)dtype);
    return TF_ERR_DTYPE;
}

static tf_status inconsistent(const tfd_op *op, const char *why, char *msg, size_t msg_len) {
    snprintf(msg, msg_len, "cuda: %s descriptor is inconsistent: %s", tf__op_name(op->kind), why);
    return TF_ERR_INTERNAL;
}

/*
 * Checks one tensor view before a kernel indexes memory with it: a served
 * dtype, a rank in range, an element count that equals its shape's product,
 * and a device pointer aligned to the element (a misaligned access would be a
 * sticky fault that ends the whole context).
 */
static tf_status check_view(const tfd_op *op, const tfd_tensor_view *t, const char *name,
                            char *msg, size_t msg_len) {
    char why[96];
    if (!served_dtype(t->dtype)) return dtype_error(op, t->dtype, msg, msg_len);
    if (t->rank < 0 || t->rank > TF_MAX_RANK) {
        snprintf(why, sizeof why, "%s has rank %d", name, t->rank);
        return inconsistent(op, why, msg, msg_len);
    }
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 1 || __builtin_mul_overflow(n, t->shape[i], &n)) {
            snprintf(why, sizeof why, "%s has dimension %lld on axis %d", name,
                     (long long)t->shape[i], i);
            return inconsistent(op, why, msg, msg_len);
        }
    }
    if (n != t->numel || n > TF__MAX_ELEMENTS) {
        snprintf(why, sizeof why, "%s holds %lld elements, its shape %lld", name,
                 (long long)t->numel, (long long)n);
        return inconsistent(op, why, msg, msg_len);
    }
    if (t->data == NULL || (uintptr_t)t->data % tf_dtype_size(t->dtype) != 0) {
        snprintf(why, sizeof why, "%s has no device memory or a misaligned pointer", name);
        return inconsistent(op, why, msg, msg_len);
    }
    return TF_OK;
}

/* Common start of every operation entry: device, stream, arity and the views' sanity. */
static tf_status begin_op(tfd_backend *be, void *stream, const tfd_op *op, int arity, char *msg,
                          size_t msg_len) {
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (stream == NULL) return inconsistent(op, "no stream", msg, msg_len);
    if (op->n_inputs != arity) return inconsistent(op, "wrong number of inputs", msg, msg_len);
    for (int i = 0; i < arity; i++) {
        st = check_view(op, &op->in[i], i == 0 ? "input 0" : "input 1", msg, msg_len);
        if (st != TF_OK) return st;
    }
    return check_view(op, &op->out, "the output", msg, msg_len);
}

/* Maps a launcher's result to a status naming the operation and dtype. */
static tf_status launched(cudaError_t e, const char *launcher, const tfd_op *op, int line,
                          char *msg, size_t msg_len) {
    if (e == cudaSuccess) return TF_OK;
    char call[128];
    snprintf(call, sizeof call, "%s(%s, %s)", launcher, tf__op_name(op->kind),
             tf_dtype_name(op->in[0].dtype));
    return tfd_cuda_fail(e, call, __FILE__, line, msg, msg_len);
}

/* Calls a launcher on the stream with the device's SM count and checks what it reported. */
#define LAUNCHED(launcher, impl, s, op, msg, msg_len)                                     \
    launched(launcher((op), (impl)->sm_count, (s)->stream), #launcher, (op), __LINE__, (msg), \
             (msg_len))

/* ---- operation families ---- */

/* Elementwise operands: every input and the output share the first input's dtype and size. */
static tf_status check_elementwise(const tfd_op *op, int arity, char *msg, size_t msg_len) {
    const tf_dtype dt = op->in[0].dtype;
    if (op->out.dtype != dt || (arity == 2 && op->in[1].dtype != dt))
        return inconsistent(op, "operand and output dtypes differ", msg, msg_len);
    if (op->out.numel != op->in[0].numel || (arity == 2 && op->in[1].numel != op->in[0].numel))
        return inconsistent(op, "operand and output sizes differ", msg, msg_len);
    return TF_OK;
}

/* add, sub, mul, div: two inputs and an output of one dtype and one element count. */
static tf_status cuda_binary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 2, msg, msg_len);
    if (st != TF_OK) return st;
    if ((st = check_elementwise(op, 2, msg, msg_len)) != TF_OK) return st;
    return LAUNCHED(tfd_cuda_launch_binary, (cuda_impl *)be->impl, (tfd_cuda_stream *)stream, op,
                    msg, msg_len);
}

/* neg, conj, abs, exp, log, sqrt, square: abs of a complex dtype writes the real dtype. */
static tf_status cuda_unary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                            size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 1, msg, msg_len);
    if (st != TF_OK) return st;
    const tf_dtype dt = op->in[0].dtype;
    const tf_dtype want = tf__op_out_dtype(op->kind, dt);
    if (op->out.dtype != want)
        return inconsistent(op, "the output dtype is not the one the operation makes", msg,
                            msg_len);
    if (op->out.numel != op->in[0].numel)
        return inconsistent(op, "input and output sizes differ", msg, msg_len);
    return LAUNCHED(tfd_cuda_launch_unary, (cuda_impl *)be->impl, (tfd_cuda_stream *)stream, op,
                    msg, msg_len);
}

/* scale (one input) and axpby (two) with complex coefficients; real dtypes use .re only. */
static tf_status cuda_axpby(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                            size_t msg_len) {
    const int arity = op->kind == TF__OP_AXPBY ? 2 : 1;
    tf_status st = begin_op(be, stream, op, arity, msg, msg_len);
    if (st != TF_OK) return st;
    if ((st = check_elementwise(op, arity, msg, msg_len)) != TF_OK) return st;
    return LAUNCHED(tfd_cuda_launch_axpby, (cuda_impl *)be->impl, (tfd_cuda_stream *)stream, op,
                    msg, msg_len);
}

/*
 * A slice: (start, step, length) per input axis, every index inside its axis
 * (the shape rules' check, repeated before the kernel reads memory with it);
 * the output's shape is the lengths.
 */
static tf_status check_slice(const tfd_op *op, char *msg, size_t msg_len) {
    const tfd_tensor_view *in = &op->in[0];
    if (op->out.dtype != in->dtype)
        return inconsistent(op, "input and output differ in dtype", msg, msg_len);
    if (op->n_params != 3 * in->rank || op->out.rank != in->rank) {
        snprintf(msg, msg_len, "cuda: slice of rank %d got %d parameters (output rank %d)",
                 in->rank, op->n_params, op->out.rank);
        return TF_ERR_INVALID_ARGUMENT;
    }
    for (int a = 0; a < in->rank; a++) {
        const int64_t start = op->params[3 * a], step = op->params[3 * a + 1],
                      len = op->params[3 * a + 2], dim = in->shape[a];
        if (step == 0 || step > dim || step < -dim || len < 1 || len > dim || start < 0 ||
            start >= dim || start + step * (len - 1) < 0 || start + step * (len - 1) >= dim) {
            snprintf(msg, msg_len, "cuda: slice axis %d (size %lld): start %lld, step %lld, "
                     "length %lld reach outside the axis", a, (long long)dim, (long long)start,
                     (long long)step, (long long)len);
            return TF_ERR_INVALID_ARGUMENT;
        }
        if (op->out.shape[a] != len)
            return inconsistent(op, "the output shape is not the slice's lengths", msg, msg_len);
    }
    return TF_OK;
}

/*
 * permute gathers; reshape and copy keep row-major order and are one
 * device-to-device copy; slice is a strided gather (cuda/linalg-kernels.cu).
 */
static tf_status cuda_permute(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                              size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 1, msg, msg_len);
    if (st != TF_OK) return st;
    const tfd_tensor_view *in = &op->in[0];
    if (op->kind == TF__OP_SLICE) {
        if ((st = check_slice(op, msg, msg_len)) != TF_OK) return st;
        return LAUNCHED(tfd_cuda_launch_slice, (cuda_impl *)be->impl, (tfd_cuda_stream *)stream,
                        op, msg, msg_len);
    }
    if (op->out.dtype != in->dtype || op->out.numel != in->numel)
        return inconsistent(op, "input and output differ in dtype or size", msg, msg_len);
    tfd_cuda_stream *s = stream;
    switch (op->kind) {
    case TF__OP_PERMUTE: {
        const int r = in->rank;
        if (op->n_params != r || op->out.rank != r) {
            snprintf(msg, msg_len, "cuda: permute of rank %d got %d axes (output rank %d)", r,
                     op->n_params, op->out.rank);
            return TF_ERR_AXIS;
        }
        unsigned seen = 0;
        for (int i = 0; i < r; i++) {
            const int64_t p = op->params[i];
            if (p < 0 || p >= r || (seen & (1u << p))) {
                snprintf(msg, msg_len, "cuda: permute axis %lld is out of range or repeated",
                         (long long)p);
                return TF_ERR_AXIS;
            }
            seen |= 1u << p;
            if (op->out.shape[i] != in->shape[p])
                return inconsistent(op, "the output shape is not the permuted input shape", msg,
                                    msg_len);
        }
        return LAUNCHED(tfd_cuda_launch_permute, (cuda_impl *)be->impl, s, op, msg, msg_len);
    }
    case TF__OP_RESHAPE:
    case TF__OP_COPY: {
        const size_t bytes = (size_t)in->numel * tf_dtype_size(in->dtype);
        TFD_CUDA_CHECK_RET(cudaMemcpyAsync(op->out.data, in->data, bytes,
                                           cudaMemcpyDeviceToDevice, s->stream),
                           msg, msg_len);
        return TF_OK;
    }
    default:
        snprintf(msg, msg_len, "cuda: %s is not a layout operation", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
}

/* sum (every dtype), max and min (real only) over the given axes, or all when none are given. */
static tf_status cuda_reduce(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 1, msg, msg_len);
    if (st != TF_OK) return st;
    const tfd_tensor_view *in = &op->in[0];
    const tf_dtype dt = in->dtype;
    if (op->kind != TF__OP_REDUCE_SUM && op->kind != TF__OP_REDUCE_MAX &&
        op->kind != TF__OP_REDUCE_MIN) {
        snprintf(msg, msg_len, "cuda: %s is not a reduction", tf__op_name(op->kind));
        return TF_ERR_INTERNAL;
    }
    if (op->kind != TF__OP_REDUCE_SUM && is_complex(dt)) {
        snprintf(msg, msg_len,
                 "cuda: %s of %s: complex numbers have no order; served for f32 and f64 only",
                 tf__op_name(op->kind), tf_dtype_name(dt));
        return TF_ERR_DTYPE;
    }
    if (op->out.dtype != dt) return inconsistent(op, "the output dtype differs", msg, msg_len);
    if (op->n_params < 0 || op->n_params > in->rank) {
        snprintf(msg, msg_len, "cuda: %s of rank %d got %d axes", tf__op_name(op->kind),
                 in->rank, op->n_params);
        return TF_ERR_AXIS;
    }
    unsigned reduced = op->n_params == 0 ? (1u << in->rank) - 1u : 0u;
    for (int i = 0; i < op->n_params; i++) {
        const int64_t ax = op->params[i];
        if (ax < 0 || ax >= in->rank || (reduced & (1u << ax))) {
            snprintf(msg, msg_len, "cuda: %s axis %lld is out of range or repeated",
                     tf__op_name(op->kind), (long long)ax);
            return TF_ERR_AXIS;
        }
        reduced |= 1u << ax;
    }
    int64_t kept = 1;
    for (int ax = 0; ax < in->rank; ax++)
        if (!(reduced & (1u << ax))) kept *= in->shape[ax];
    if (kept != op->out.numel) {
        snprintf(msg, msg_len, "cuda: %s output holds %lld elements, the reduction makes %lld",
                 tf__op_name(op->kind), (long long)op->out.numel, (long long)kept);
        return TF_ERR_SHAPE;
    }
    return LAUNCHED(tfd_cuda_launch_reduce, (cuda_impl *)be->impl, (tfd_cuda_stream *)stream, op,
                    msg, msg_len);
}

/* Matrix products go through the stream's cuBLAS handle (cuda/matmul.c). */
static tf_status cuda_matmul(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 2, msg, msg_len);
    if (st != TF_OK) return st;
    return tfd_cuda_matmul(stream, op, msg, msg_len);
}

/* ---- fault injection ---- */

/*
 * OP_TEST_FAULT (the daemon serves it only with --test-fault-injection): a
 * kernel writes to an illegal address, then the stream is synchronized so
 * the fault surfaces here, poisons the context (tfd_cuda_fail) and is this
 * operation's own TF_ERR_DEVICE, with CUDA's words for it.
 */
static tf_status cuda_inject_fault(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                                   size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 1, msg, msg_len);
    if (st != TF_OK) return st;
    tfd_cuda_stream *s = stream;
    TFD_CUDA_CHECK_RET(tfd_cuda_launch_fault(s->stream), msg, msg_len);
    TFD_CUDA_CHECK_RET(cudaStreamSynchronize(s->stream), msg, msg_len);
    snprintf(msg, msg_len, "cuda: the fault-injection kernel wrote to address 0 without faulting");
    return TF_ERR_INTERNAL;
}

/* Contractions: one or two inputs, planned through the daemon-wide cache (cuda/contract.c). */
static tf_status cuda_contract(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                               size_t msg_len) {
    if (op->n_inputs != 1 && op->n_inputs != 2)
        return inconsistent(op, "wrong number of inputs", msg, msg_len);
    tf_status st = begin_op(be, stream, op, op->n_inputs, msg, msg_len);
    if (st != TF_OK) return st;
    return tfd_cuda_contract(stream, ((cuda_impl *)be->impl)->sm_count, op, msg, msg_len);
}

/*
 * FFTs go through cuFFT with the daemon-wide plan cache (cuda/fft.c). Plans
 * the cache let go of are destroyed first, here on a worker; cufftDestroy
 * may synchronize the device, so never while a graph capture runs (the
 * capturing thread itself, whose stream is capturing, leaves them).
 */
static tf_status cuda_fft(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                          size_t msg_len) {
    tf_status st = begin_op(be, stream, op, 1, msg, msg_len);
    if (st != TF_OK) return st;
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    if (s->capture == NULL && tfd_cuda_fft_to_drain(impl->fft)) {
        tfd_cuda_graphs_hold_off(&impl->graphs);
        tfd_cuda_fft_drain(impl->fft);
        tfd_cuda_graphs_resume(&impl->graphs);
    }
    return tfd_cuda_fft_run(impl->fft, s, op, impl->sm_count, msg, msg_len);
}

/*
 * Linear algebra through cuSOLVER (cuda/linalg.c): enqueued without waiting;
 * what the solver finds on the device is reported through event_failure.
 */
static tf_status cuda_linalg(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                             size_t msg_len) {
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (stream == NULL || op == NULL) {
        snprintf(msg, msg_len, "cuda: linalg without a %s", stream == NULL ? "stream" : "operation");
        return TF_ERR_INTERNAL;
    }
    return tfd_cuda_linalg(stream, ((cuda_impl *)be->impl)->sm_count, op, msg, msg_len);
}

/* The backend's daemon-wide caches: the cuFFT plans, then the contraction plans. */
static int cuda_caches(tfd_backend *be, tfd_cache_stats *out, int max) {
    const cuda_impl *impl = be->impl;
    int n = impl ? tfd_cuda_fft_caches(impl->fft, out, max) : 0;
    return n + tfd_contract_plans_caches(be, out + n, max - n);
}

/* ---- completion ---- */

/*
 * Records an event after everything enqueued on the stream so far. If that
 * fails, the stream is synchronized instead, so that the NULL event handed
 * back still means "complete" as the vtable promises.
 */
static tf_status cuda_event_record(tfd_backend *be, void *stream, void **event, char *msg,
                                   size_t msg_len) {
    cuda_impl *impl = be->impl;
    tfd_cuda_stream *s = stream;
    cuda_event *ev = NULL;
    *event = NULL;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (s == NULL) {
        snprintf(msg, msg_len, "cuda: event_record without a stream");
        return TF_ERR_INTERNAL;
    }
    /* Read before recording: every check appended so far was enqueued before the event. */
    const uint64_t seq = tfd_cuda_linalg_seq(s);
    TFD_CUDA_CHECK_GOTO(pooled_event(impl, &ev), st, msg, msg_len, sync_instead);
    TFD_CUDA_CHECK_GOTO(cudaEventRecord(ev->ev, s->stream), st, msg, msg_len, record_failed);
    ev->stream = s;
    ev->seq = seq;
    *event = ev;
    return TF_OK;

record_failed:
    (void)cudaEventDestroy(ev->ev);
    free(ev);
sync_instead:
    if (!atomic_load(&poisoned)) {
        cudaError_t e = cudaStreamSynchronize(s->stream);
        if (e != cudaSuccess)
            (void)tfd_cuda_fail(e, "cudaStreamSynchronize(s->stream)", __FILE__, __LINE__, NULL,
                                0);
    }
    return st;
}

/* Blocks the completion thread until the event's work is done; a kernel fault surfaces here. */
static tf_status cuda_event_wait(tfd_backend *be, void *event, char *msg, size_t msg_len) {
    if (event == NULL) return TF_OK;
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    cudaError_t e = cudaEventSynchronize(((const cuda_event *)event)->ev);
    if (e != cudaSuccess) {
        (void)tfd_cuda_fail(e, "cudaEventSynchronize(event)", __FILE__, __LINE__, msg, msg_len);
        return TF_ERR_DEVICE; /* whatever it was, it happened to queued device work */
    }
    return TF_OK;
}

/* Returns a waited-for event to the pool (or destroys it once the pool is full). */
static void cuda_event_destroy(tfd_backend *be, void *event) {
    cuda_impl *impl = be->impl;
    if (event == NULL || impl == NULL) return;
    int pooled = 0;
    pthread_mutex_lock(&impl->lock);
    if (impl->n_free_events < EVENT_POOL_MAX) {
        impl->free_events[impl->n_free_events++] = event;
        pooled = 1;
    }
    pthread_mutex_unlock(&impl->lock);
    if (pooled) return;
    char msg[256];
    if (enter(impl, msg, sizeof msg) != TF_OK) return;
    cuda_event *ev = event;
    cudaError_t e = cudaEventDestroy(ev->ev);
    free(ev);
    if (e != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaEventDestroy(event)", __FILE__, __LINE__, NULL, 0);
}

/*
 * The first failure the device found in linear algebra the event covers
 * (cuda/linalg.c): the completion thread calls it after event_wait, so the
 * status words of those operations have landed in their pinned slots.
 */
static tf_status cuda_event_failure(tfd_backend *be, void *event, int consume, uint64_t *batch,
                                    uint32_t *index, char *msg, size_t msg_len) {
    (void)be;
    const cuda_event *ev = event;
    if (ev == NULL || ev->stream == NULL) return TF_OK;
    return tfd_cuda_linalg_failure(ev->stream, ev->seq, consume, batch, index, msg, msg_len);
}

/* Every failure still pending on a finished stream (cuda/linalg.c), consumed. */
static tf_status cuda_stream_failure(tfd_backend *be, void *stream, uint64_t *batch,
                                     uint32_t *index, char *msg, size_t msg_len) {
    (void)be;
    return tfd_cuda_linalg_failure(stream, UINT64_MAX, 1, batch, index, msg, msg_len);
}

/*
 * Gives every stream's cached large blocks and idle slabs back to the device
 * pool, then releases the free blocks the pool keeps (its release threshold
 * is "keep everything", see cuda_open) back to the driver. Memory still in
 * use, or freed by work a stream has not reached yet, stays; nothing waits.
 * The daemon-wide contraction plans are dropped too.
 */
static tf_status cuda_trim(tfd_backend *be, char *msg, size_t msg_len) {
    cuda_impl *impl = be->impl;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    uint64_t before = 0, after = 0;
    /* The plans' own memory goes when the next FFT destroys them (that waits for the device). */
    const uint64_t plans = tfd_cuda_fft_clear(impl->fft);
    const size_t cached = tfd_cuda_heap_release(&impl->heap);
    TFD_CUDA_CHECK_RET(
        cudaMemPoolGetAttribute(impl->pool, cudaMemPoolAttrReservedMemCurrent, &before), msg,
        msg_len);
    TFD_CUDA_CHECK_RET(cudaMemPoolTrimTo(impl->pool, 0), msg, msg_len);
    TFD_CUDA_CHECK_RET(
        cudaMemPoolGetAttribute(impl->pool, cudaMemPoolAttrReservedMemCurrent, &after), msg,
        msg_len);
    const uint64_t contractions = tfd_contract_cache_clear(tfd_contract_plans());
    snprintf(msg, msg_len,
             "cuda:%d fft_plans emptied (%llu plan%s let go); stream caches gave back %zu bytes; "
             "memory pool trimmed: %llu bytes reserved before, %llu after; %llu contraction plan%s "
             "dropped",
             impl->ordinal, (unsigned long long)plans, plans == 1 ? "" : "s", cached,
             (unsigned long long)before, (unsigned long long)after,
             (unsigned long long)contractions, contractions == 1 ? "" : "s");
    return TF_OK;
}

/* Whether a recorded event has completed (or failed); cudaEventQuery never waits. */
static int cuda_event_done(tfd_backend *be, void *event) {
    char msg[64];
    if (!event || enter(be->impl, msg, sizeof msg) != TF_OK) return 1;
    return cudaEventQuery(((const cuda_event *)event)->ev) != cudaErrorNotReady;
}

/* Whether the device has finished everything on the stream; cudaStreamQuery never waits. */
static int cuda_stream_done(tfd_backend *be, void *stream) {
    cuda_impl *impl = be->impl;
    char msg[64];
    if (!stream || enter(impl, msg, sizeof msg) != TF_OK) return 0;
    const tfd_cuda_stream *s = stream;
    /* Its copy queue too: a synchronize covers the pending copies as it did in stream order. */
    return cudaStreamQuery(s->stream) == cudaSuccess &&
           (s->copy == NULL || cudaStreamQuery(s->copy) == cudaSuccess);
}

/* The device is lost for good once the context is poisoned. */
static tf_status cuda_health(tfd_backend *be, char *msg, size_t msg_len) {
    (void)be;
    if (!atomic_load(&poisoned)) return TF_OK;
    snprintf(msg, msg_len, "%s", poison_reason);
    return TF_ERR_DEVICE;
}

/* Page-locks a pinned buffer's mapping (a sealed memfd shared with a client) for direct DMA. */
static tf_status cuda_host_register(tfd_backend *be, void *ptr, size_t bytes, char *msg,
                                    size_t msg_len) {
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    TFD_CUDA_CHECK_RET(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault), msg, msg_len);
    return TF_OK;
}

/* Undoes cuda_host_register once no copy uses the range; a poisoned context unregisters nothing. */
static void cuda_host_unregister(tfd_backend *be, void *ptr) {
    char msg[256];
    if (enter(be->impl, msg, sizeof msg) != TF_OK) return;
    cudaError_t e = cudaHostUnregister(ptr);
    if (e != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaHostUnregister(ptr)", __FILE__, __LINE__, NULL, 0);
}

/* ---- prepared graphs (cuda/graph.c) ---- */

/* Records ops into a CUDA graph on the backend's private capture stream; nothing runs yet. */
static tf_status cuda_graph_capture(tfd_backend *be, const tfd_op *ops, int n_ops, void **graph,
                                    uint64_t *bytes, char *msg, size_t msg_len) {
    cuda_impl *impl = be->impl;
    if (graph == NULL || bytes == NULL) {
        snprintf(msg, msg_len, "cuda: graph_capture without a place for the graph");
        return TF_ERR_INTERNAL;
    }
    *graph = NULL;
    *bytes = 0;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    return tfd_cuda_graph_capture(&impl->graphs, be, ops, n_ops, graph, bytes, msg, msg_len);
}

/* One replay of a captured graph on the stream. */
static tf_status cuda_graph_launch(tfd_backend *be, void *stream, void *graph, char *msg,
                                   size_t msg_len) {
    tf_status st = enter(be->impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (stream == NULL || graph == NULL) {
        snprintf(msg, msg_len, "cuda: graph_launch without a %s",
                 stream == NULL ? "stream" : "graph");
        return TF_ERR_INTERNAL;
    }
    return tfd_cuda_graph_launch(stream, graph, msg, msg_len);
}

/* Frees a graph and what it owns; a poisoned context frees only host memory. */
static void cuda_graph_destroy(tfd_backend *be, void *graph) {
    cuda_impl *impl = be->impl;
    if (graph == NULL || impl == NULL) return;
    char msg[256];
    const int device_ok = enter(impl, msg, sizeof msg) == TF_OK;
    tfd_cuda_graph_destroy(&impl->graphs, graph, device_ok);
}

/* A tensor described for another daemon (cuda/peer.c), when the pool is shareable. */
static tf_status cuda_peer_export(tfd_backend *be, void *stream, const void *ptr, size_t bytes,
                                  tfd_peer_memory *out, char *msg, size_t msg_len) {
    cuda_impl *impl = be->impl;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    if (!impl->pool_shareable) {
        snprintf(msg, msg_len, "cuda:%d has no shareable memory pool: its tensors cannot be "
                               "copied to another daemon",
                 impl->ordinal);
        return TF_ERR_UNSUPPORTED;
    }
    /* The allocation holding the tensor: its own block, or the slab it was carved from. */
    void *base = tfd_cuda_cache_allocation(stream, ptr);
    return tfd_cuda_peer_export(impl->pool, base, ptr, bytes, out, msg, msg_len);
}

/* Another daemon's tensor copied in on the stream (cuda/peer.c). */
static tf_status cuda_peer_import_copy(tfd_backend *be, void *stream, void *dst, size_t bytes,
                                       const tfd_peer_memory *in, char *msg, size_t msg_len) {
    cuda_impl *impl = be->impl;
    tf_status st = enter(impl, msg, msg_len);
    if (st != TF_OK) return st;
    return tfd_cuda_peer_import_copy(impl->ordinal, ((tfd_cuda_stream *)stream)->stream, dst,
                                     bytes, in, msg, msg_len);
}

const tfd_backend_vtable tfd_cuda_backend = {
    .name = "cuda",
    .copies_enqueue_only = 1,
    .open = cuda_open,
    .close = cuda_close,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy_to_device = cuda_copy_to_device,
    .copy_to_host = cuda_copy_to_host,
    .fill_zero = cuda_fill_zero,
    .binary = cuda_binary,
    .unary = cuda_unary,
    .axpby = cuda_axpby,
    .permute = cuda_permute,
    .reduce = cuda_reduce,
    .matmul = cuda_matmul,
    .inject_fault = cuda_inject_fault,
    .contract = cuda_contract,
    .fft = cuda_fft,
    .linalg = cuda_linalg,
    .caches = cuda_caches,
    .event_record = cuda_event_record,
    .event_wait = cuda_event_wait,
    .event_destroy = cuda_event_destroy,
    .event_failure = cuda_event_failure,
    .stream_failure = cuda_stream_failure,
    .stream_done = cuda_stream_done,
    .event_done = cuda_event_done,
    .side_copy = cuda_side_copy,
    .stream_wait = cuda_stream_wait,
    .join_side_copies = cuda_join_side_copies,
    .health = cuda_health,
    .trim = cuda_trim,
    .host_register = cuda_host_register,
    .host_unregister = cuda_host_unregister,
    .graph_capture = cuda_graph_capture,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .peer_export = cuda_peer_export,
    .peer_import_copy = cuda_peer_import_copy,
};
