/*
 * Prepared graphs of the CUDA backend as CUDA graphs (cuda/graph.c): what
 * cuda/backend.c's graph_capture, graph_launch and graph_destroy call, and
 * what the other CUDA files call while a capture runs (cuda/alloc.c for the
 * capture's scratch, cuda/fft.c for its private plans). Needs the CUDA
 * headers; private to daemon/backend. Every function expects the device to
 * be current on the calling thread and the context usable (the backend's
 * enter() succeeded), except where a device_ok argument says otherwise.
 */
#ifndef TENFERRO_DAEMON_CUDA_GRAPH_H
#define TENFERRO_DAEMON_CUDA_GRAPH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "daemon/backend/cuda/internal.h"

/* A device's capture state: its private capture stream, made at the first capture. */
typedef struct tfd_cuda_graphs {
    pthread_mutex_t lock;    /* one capture at a time; graph_destroy takes it too */
    int ready;               /* the mutex exists (0 in a backend whose open failed early) */
    tfd_cuda_stream *stream; /* the capture stream, NULL until the first capture */
    tfd_cuda_heap *heap;     /* every stream of the device: released when the device is full */
    cudaMemPool_t pool;      /* the device's default pool: trimmed when the device is full */
    int ordinal;
} tfd_cuda_graphs;

/* Prepares the capture state of a device; 0, or -1 when its mutex cannot be made. */
int tfd_cuda_graphs_init(tfd_cuda_graphs *g, tfd_cuda_heap *heap, cudaMemPool_t pool, int ordinal);

/* Destroys the capture stream (device calls only with device_ok); every graph is gone. */
void tfd_cuda_graphs_close(tfd_cuda_graphs *g, int device_ok);

/*
 * Holds off the device's captures while the caller makes a call that may
 * synchronize the whole device (cufftDestroy, cublasDestroy): CUDA refuses
 * such a call while a stream of the device captures, and may invalidate the
 * capture. Waits for a capture in progress. Never from the capturing thread.
 */
void tfd_cuda_graphs_hold_off(tfd_cuda_graphs *g);

/* Lets captures run again after tfd_cuda_graphs_hold_off. */
void tfd_cuda_graphs_resume(tfd_cuda_graphs *g);

/* The vtable's graph_capture (backend.h): *graph and *bytes are set on TF_OK only. */
tf_status tfd_cuda_graph_capture(tfd_cuda_graphs *g, tfd_backend *be, const tfd_op *ops,
                                 int n_ops, void **graph, uint64_t *bytes, char *msg,
                                 size_t msg_len);

/* The vtable's graph_launch: one replay enqueued on the stream. */
tf_status tfd_cuda_graph_launch(tfd_cuda_stream *s, void *graph, char *msg, size_t msg_len);

/* The vtable's graph_destroy; without device_ok only host memory is freed. */
void tfd_cuda_graph_destroy(tfd_cuda_graphs *g, void *graph, int device_ok);

/*
 * Scratch of an op being captured (tfd_cuda_cache_alloc while s->capture is
 * set): a block of `bytes` or more that belongs to the graph until
 * graph_destroy, never to a stream's cache.
 */
tf_status tfd_cuda_capture_alloc(tfd_cuda_capture *c, size_t bytes, void **ptr, char *msg,
                                 size_t msg_len);

/*
 * The op's end of use of a capture block (tfd_cuda_cache_free while
 * s->capture is set): a later op of the same graph may take it again; the
 * memory stays the graph's.
 */
void tfd_cuda_capture_free(tfd_cuda_capture *c, void *ptr, size_t bytes);

/*
 * Hands the capture an object made for op `key` (a private cuFFT plan set),
 * destroyed with the graph by destroy(obj, device_ok), or at once when the
 * capture fails. On failure (no host memory) the caller still owns obj.
 */
tf_status tfd_cuda_capture_adopt(tfd_cuda_capture *c, const void *key, void *obj,
                                 void (*destroy)(void *obj, int device_ok), char *msg,
                                 size_t msg_len);

/* The object adopted for `key`, or NULL. */
void *tfd_cuda_capture_find(const tfd_cuda_capture *c, const void *key);

#endif
