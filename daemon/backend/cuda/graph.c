/*
 * Prepared graphs of the CUDA backend as CUDA graphs: the vtable's
 * graph_capture, graph_launch and graph_destroy (backend.h has the contract).
 *
 * What is captured: whatever the operation entries enqueue for each op, in
 * order: each op runs through tfd_backend_run_op exactly as the executor
 * runs it, with its checks, but on a stream that is capturing, so nothing
 * runs at capture time. Everything lands on one stream, so the graph is a
 * chain: every node of op i runs before any node of op i + 1 at each replay.
 *
 * Why a stream of its own: a capture records everything enqueued on the
 * capturing stream, by any thread. A client's stream also gets the loop
 * thread's cudaMallocAsync/cudaFreeAsync (its block cache) and the rest of
 * the executor's work, which would be swept into the graph (and be missing
 * from the stream). So captures run on one private stream per device (own
 * CUDA stream, cuBLAS handle and block cache) that nothing else uses, one
 * capture at a time (a mutex), made at the first capture and destroyed at
 * close. Like every stream of the backend it is non-blocking, so what other
 * threads put on the legacy default stream (the unordered alloc) neither
 * joins nor invalidates a capture.
 *
 * The capture mode is cudaStreamCaptureModeRelaxed. The graph's scratch is
 * made with plain cudaMalloc while the capture runs (below), which the
 * global and thread-local modes forbid to the capturing thread; the global
 * mode would moreover make such calls fail on every other thread of the
 * daemon (its unordered alloc and free, cudaHostRegister) for as long as a
 * capture runs. What a capture itself needs is kept by construction: nothing
 * synchronizes or queries the capture stream, and this file frees no device
 * memory while one of its captures runs (graph_destroy takes the mutex).
 * Calls elsewhere that may synchronize the whole device, which CUDA refuses
 * while any stream of it captures, take the mutex too
 * (tfd_cuda_graphs_hold_off): destroying the plans the cuFFT cache let go
 * of, and destroying a stream (cublasDestroy). The daemon's other device
 * calls neither synchronize the device nor reach a non-blocking stream
 * through the legacy stream (its unordered free is a cudaFree of pool
 * memory, which does not synchronize).
 *
 * What the graph owns, so that it is self-contained (it may run on any
 * stream after the stream and connection that prepared it are gone):
 *  - Scratch (contraction temporaries, FFT work areas, C2R's copy). While
 *    the capture stream captures (its `capture` field set), its block cache
 *    hands out nothing: tfd_cuda_cache_alloc comes here, and the block is a
 *    cudaMalloc of the request's size class, ordered on no stream (a
 *    cudaMallocAsync in the capture would become a memory node of the
 *    graph), recorded in the graph's keep-list. The op's tfd_cuda_cache_free
 *    only marks the block free in the keep-list: a later op of the same
 *    graph may take it again, which is safe because the graph is a chain,
 *    but nothing outside the graph ever does. The keep-list goes with
 *    graph_destroy.
 *  - cuFFT plans. A captured cufftExec keeps pointers into its plan's device
 *    data, and the daemon-wide cache may destroy a plan at any time once it
 *    is released (eviction, trim). Before the capture, every FFT op gets
 *    plans of its own (tfd_cuda_fft_prepare), which the graph destroys.
 *  - The cuBLAS workspace. Without one set, cuBLAS takes its workspace
 *    inside a capture with cudaMallocAsync (memory nodes, made anew by every
 *    capture); the cuBLAS documentation (CUDA Graphs support) advises a
 *    user-owned workspace through cublasSetWorkspace. A graph with a GEMM
 *    gets a keep-list block (of the size cuBLAS recommends for Hopper when one
 *    of its GEMMs is large, else a small one: BLAS_WORKSPACE_SMALL), set on
 *    the capture stream's handle for the capture; cublasSetStream afterwards
 *    gives the handle its default workspace back. Coefficients are host
 *    values (CUBLAS_POINTER_MODE_HOST), captured by value.
 *  - Reductions take their partial results from cudaMallocAsync and give
 *    them back with cudaFreeAsync within the op (cuda/kernels.cu). Captured,
 *    these are allocation and free nodes of the graph, whose memory CUDA's
 *    graph pool keeps for it; graph_destroy trims that pool.
 *  - The backend's own kernels take only pointers and values.
 * *bytes is the keep-list's size plus the graph's allocation nodes' (the
 * private plans' own device memory, which cuFFT does not report, is not in
 * it).
 *
 * Instantiation uses flags 0, so a replay's kernels take the priority of the
 * stream it is launched on (the client's), not the capture stream's; the
 * executable graph is uploaded at once, so the first replay does not pay
 * for it. CUDA
 * orders every launch of one executable graph after the previous launch,
 * whatever the stream, which is what graph_launch promises.
 *
 * Linear algebra is not captured: a graph holding an op of a linear-algebra
 * kind is refused at once (TF_ERR_UNSUPPORTED, nothing taken), and the
 * daemon runs such a graph node by node (daemon/prepared.c, which does not
 * even ask). cuSOLVER's routines query and size their workspaces per call,
 * a truncation's rank rule and the info words fold into status words the
 * completion path reads (cuda/linalg.c), and whether capturing the routines
 * that would allow it pays has not been measured.
 *
 * When an op cannot be captured (it is refused, or something in it
 * synchronizes and so invalidates the capture), the capture is ended and
 * discarded, everything taken for it is released, the runtime's error slot
 * cleared, and the stream checked to be out of capture mode, ready for the
 * next capture.
 */
#include <pthread.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/fft.h"
#include "daemon/backend/cuda/graph.h"
#include "daemon/backend/cuda/internal.h"
#include "daemon/log.h"

/*
 * The cuBLAS workspace of a graph with a GEMM: cuBLAS's recommendation for
 * Hopper (sm_90) when a GEMM is large enough to gain from it, else a small
 * one (cuBLAS then picks an algorithm that fits), so a graph of small
 * products does not hold 32 MiB of a client's device_bytes quota.
 */
#define BLAS_WORKSPACE ((size_t)32 << 20)
#define BLAS_WORKSPACE_SMALL ((size_t)64 << 10)
/* Multiply-adds of one GEMM (m n k over the batch) from which the large workspace is taken. */
#define BLAS_LARGE_WORK ((double)(1u << 24))

/* One block of a graph's keep-list. */
typedef struct keep_block {
    void *ptr;
    size_t bytes; /* its size class (tfd_cuda_block_bytes) */
    int free;     /* no op of the capture uses it now: a later one may take it */
} keep_block;

/* An object a graph owns besides memory (private cuFFT plans), found by the op it was made for. */
typedef struct adopted {
    const void *key;
    void *obj;
    void (*destroy)(void *obj, int device_ok);
} adopted;

struct tfd_cuda_capture {
    tfd_cuda_graphs *graphs; /* for the out-of-memory retry */
    keep_block *blocks;
    size_t n_blocks, cap_blocks;
    adopted *objs;
    size_t n_objs, cap_objs;
    uint64_t bytes; /* the blocks' */
};

/* What graph_capture hands back. */
typedef struct cuda_graph {
    cudaGraphExec_t exec;
    tfd_cuda_capture owned;
    uint64_t node_bytes; /* the graph's memory allocation nodes' */
} cuda_graph;

/* ---- what a capture owns ---- */

/* Grows an array of `size`-byte elements to hold one more; -1 without host memory. */
static int grow(void **array, size_t *cap, size_t n, size_t size) {
    if (n < *cap) return 0;
    const size_t want = *cap ? 2 * *cap : 8;
    void *grown = realloc(*array, want * size);
    if (grown == NULL) return -1;
    *array = grown;
    *cap = want;
    return 0;
}

/* One cudaMalloc; when the device is full, every stream's cached memory and the pool's go first. */
static tf_status device_block(tfd_cuda_graphs *g, size_t bytes, void **ptr, char *msg,
                              size_t msg_len) {
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky; only the retry's failure is reported */
        (void)tfd_cuda_heap_release(g->heap);
        (void)cudaMemPoolTrimTo(g->pool, 0); /* what was freed back; frees still queued stay */
        (void)cudaGetLastError();
        e = cudaMalloc(ptr, bytes);
    }
    if (e != cudaSuccess) {
        *ptr = NULL;
        return tfd_cuda_fail(e, "cudaMalloc(ptr, bytes)", __FILE__, __LINE__, msg, msg_len);
    }
    return TF_OK;
}

tf_status tfd_cuda_capture_alloc(tfd_cuda_capture *c, size_t bytes, void **ptr, char *msg,
                                 size_t msg_len) {
    const size_t size = tfd_cuda_block_bytes(bytes);
    for (size_t i = 0; i < c->n_blocks; i++) {
        keep_block *b = &c->blocks[i];
        if (b->free && b->bytes == size) {
            b->free = 0;
            *ptr = b->ptr;
            return TF_OK;
        }
    }
    if (grow((void **)&c->blocks, &c->cap_blocks, c->n_blocks, sizeof *c->blocks) != 0) {
        snprintf(msg, msg_len, "cuda: out of host memory recording a graph's scratch");
        return TF_ERR_NO_MEMORY;
    }
    tf_status st = device_block(c->graphs, size, ptr, msg, msg_len);
    if (st != TF_OK) return st;
    c->blocks[c->n_blocks++] = (keep_block){.ptr = *ptr, .bytes = size, .free = 0};
    c->bytes += size;
    return TF_OK;
}

void tfd_cuda_capture_free(tfd_cuda_capture *c, void *ptr, size_t bytes) {
    for (size_t i = 0; i < c->n_blocks; i++) {
        if (c->blocks[i].ptr == ptr && !c->blocks[i].free) {
            c->blocks[i].free = 1;
            return;
        }
    }
    tfd_log(TFD_LOG_ERROR,
            "cuda: free of %zu bytes at %p during a capture: not a block of that graph; left alone",
            bytes, ptr);
}

tf_status tfd_cuda_capture_adopt(tfd_cuda_capture *c, const void *key, void *obj,
                                 void (*destroy)(void *obj, int device_ok), char *msg,
                                 size_t msg_len) {
    if (grow((void **)&c->objs, &c->cap_objs, c->n_objs, sizeof *c->objs) != 0) {
        snprintf(msg, msg_len, "cuda: out of host memory recording a graph's plans");
        return TF_ERR_NO_MEMORY;
    }
    c->objs[c->n_objs++] = (adopted){.key = key, .obj = obj, .destroy = destroy};
    return TF_OK;
}

void *tfd_cuda_capture_find(const tfd_cuda_capture *c, const void *key) {
    for (size_t i = 0; i < c->n_objs; i++)
        if (c->objs[i].key == key) return c->objs[i].obj;
    return NULL;
}

/*
 * Frees what a capture took: its blocks and adopted objects, with device
 * calls only while the context is usable. The caller holds the mutex and no
 * launch of a graph using them is pending.
 */
static void release_owned(tfd_cuda_capture *c, int device_ok) {
    for (size_t i = 0; i < c->n_blocks; i++) {
        if (!device_ok || tfd_cuda_context_poisoned()) break;
        cudaError_t e = cudaFree(c->blocks[i].ptr);
        if (e != cudaSuccess)
            (void)tfd_cuda_fail(e, "cudaFree(block)", __FILE__, __LINE__, NULL, 0);
    }
    for (size_t i = 0; i < c->n_objs; i++)
        c->objs[i].destroy(c->objs[i].obj, device_ok && !tfd_cuda_context_poisoned());
    free(c->blocks);
    free(c->objs);
    c->blocks = NULL;
    c->objs = NULL;
    c->n_blocks = c->cap_blocks = c->n_objs = c->cap_objs = 0;
    c->bytes = 0;
}

/* ---- the capture stream ---- */

int tfd_cuda_graphs_init(tfd_cuda_graphs *g, tfd_cuda_heap *heap, cudaMemPool_t pool, int ordinal) {
    memset(g, 0, sizeof *g);
    if (pthread_mutex_init(&g->lock, NULL) != 0) return -1;
    g->ready = 1;
    g->heap = heap;
    g->pool = pool;
    g->ordinal = ordinal;
    return 0;
}

void tfd_cuda_graphs_close(tfd_cuda_graphs *g, int device_ok) {
    if (!g->ready) return;
    if (g->stream != NULL) tfd_cuda_stream_delete(g->stream, device_ok);
    g->stream = NULL;
    pthread_mutex_destroy(&g->lock);
    g->ready = 0;
}

void tfd_cuda_graphs_hold_off(tfd_cuda_graphs *g) {
    if (g->ready) pthread_mutex_lock(&g->lock);
}

void tfd_cuda_graphs_resume(tfd_cuda_graphs *g) {
    if (g->ready) pthread_mutex_unlock(&g->lock);
}

/* ---- capture ---- */

/* Whether an op enqueues a cuBLAS call: a matrix product, or a binary contraction's GEMM. */
static int uses_blas(const tfd_op *op) {
    return op->kind == TF__OP_MATMUL || (op->kind == TF__OP_CONTRACT && op->n_inputs == 2);
}

/*
 * The multiply-adds of a GEMM-backed op: for C = A B of batch b,
 * |A| |B| |C| = (b m k)(b k n)(b m n), so sqrt of the product of the three
 * sizes is b m n k up to the batch (exact without one).
 */
static double gemm_work(const tfd_op *op) {
    return sqrt((double)op->in[0].numel * (double)op->in[1].numel * (double)op->out.numel);
}

/* Bytes of the graph's memory allocation nodes (reductions' partial results), 0 when none. */
static uint64_t allocation_node_bytes(cudaGraph_t cg) {
    size_t n = 0;
    if (cudaGraphGetNodes(cg, NULL, &n) != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaGraphNode_t *nodes = malloc(n * sizeof *nodes);
    uint64_t bytes = 0;
    if (nodes != NULL && cudaGraphGetNodes(cg, nodes, &n) == cudaSuccess) {
        for (size_t i = 0; i < n; i++) {
            enum cudaGraphNodeType type;
            struct cudaMemAllocNodeParams p;
            if (cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess &&
                type == cudaGraphNodeTypeMemAlloc &&
                cudaGraphMemAllocNodeGetParams(nodes[i], &p) == cudaSuccess)
                bytes += p.bytesize;
        }
    }
    (void)cudaGetLastError();
    free(nodes);
    return bytes;
}

/*
 * Ends the stream's capture however it went, into *cg (NULL when CUDA has no
 * graph for it), and makes sure the stream is out of capture mode; returns
 * EndCapture's result. A stream that stays in capture mode is given up, so
 * the next capture makes a fresh one.
 */
static cudaError_t end_capture(tfd_cuda_graphs *g, cudaGraph_t *cg) {
    tfd_cuda_stream *s = g->stream;
    *cg = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, cg);
    if (e != cudaSuccess) (void)cudaGetLastError();
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        cs = cudaStreamCaptureStatusActive;
    }
    if (cs != cudaStreamCaptureStatusNone) {
        tfd_log(TFD_LOG_ERROR, "cuda: the graph capture stream stays in capture mode (%s); "
                               "left for good, the next capture makes a new one",
                cudaGetErrorName(e));
        g->stream = NULL; /* destroying it would wait for the device: left as it is */
    }
    return e;
}

/* The status of a capture that failed: a non-sticky device error there means "not capturable". */
static tf_status capture_status(tf_status st) {
    if (tfd_cuda_context_poisoned()) return TF_ERR_DEVICE;
    return st == TF_ERR_DEVICE ? TF_ERR_UNSUPPORTED : st;
}

/* Names the node that failed in msg, with its own reason; returns the capture's status. */
static tf_status node_failed(int i, const tfd_op *op, tf_status st, const char *why, char *msg,
                             size_t msg_len) {
    const tf_status mapped = capture_status(st);
    snprintf(msg, msg_len, "cuda: graph node %d (%s) %s: %s", i, tf__op_name(op->kind),
             mapped != st ? "cannot be captured" : "is refused", why);
    return mapped;
}

/*
 * Captures ops into gr on the capture stream, the mutex held: private plans
 * and the cuBLAS workspace first, then the capture, then instantiation. On
 * failure gr->exec stays NULL and the caller releases gr->owned.
 */
static tf_status capture_locked(tfd_cuda_graphs *g, tfd_backend *be, const tfd_op *ops,
                                int n_ops, cuda_graph *gr, char *msg, size_t msg_len) {
    tf_status st = TF_OK;
    if (g->stream == NULL) {
        st = tfd_cuda_stream_new(g->heap, 0, &g->stream, msg, msg_len);
        if (st != TF_OK) return st;
    }
    tfd_cuda_stream *s = g->stream;
    char why[384] = "";
    int blas = 0;
    double largest = 0;
    for (int i = 0; i < n_ops; i++) {
        if (uses_blas(&ops[i])) {
            blas = 1;
            if (gemm_work(&ops[i]) > largest) largest = gemm_work(&ops[i]);
        }
        if (ops[i].kind != TF__OP_FFT) continue;
        st = tfd_cuda_fft_prepare(&ops[i], &gr->owned, why, sizeof why);
        if (st != TF_OK) return node_failed(i, &ops[i], st, why, msg, msg_len);
    }
    if (blas) {
        void *ws = NULL;
        const size_t ws_bytes = largest >= BLAS_LARGE_WORK ? BLAS_WORKSPACE : BLAS_WORKSPACE_SMALL;
        st = tfd_cuda_capture_alloc(&gr->owned, ws_bytes, &ws, msg, msg_len);
        if (st != TF_OK) return st;
        TFD_CUBLAS_CHECK_RET(cublasSetWorkspace(s->blas, ws, ws_bytes), msg, msg_len);
    }

    cudaGraph_t cg = NULL;
    cudaError_t e = cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeRelaxed);
    if (e != cudaSuccess) {
        st = capture_status(tfd_cuda_fail(e, "cudaStreamBeginCapture(s->stream, relaxed)",
                                          __FILE__, __LINE__, msg, msg_len));
        goto restore;
    }
    s->capture = &gr->owned;
    int failed = -1;
    for (int i = 0; i < n_ops && failed < 0; i++) {
        st = tfd_backend_run_op(be, s, &ops[i], why, sizeof why);
        if (st != TF_OK) failed = i;
    }
    s->capture = NULL;
    e = end_capture(g, &cg);
    if (failed >= 0) {
        st = node_failed(failed, &ops[failed], st, why, msg, msg_len);
        goto restore;
    }
    if (e != cudaSuccess || cg == NULL) {
        snprintf(msg, msg_len,
                 "cuda: the graph's capture was invalidated (%s: %s): an operation waited for "
                 "the device or used a call a capture cannot record",
                 cudaGetErrorName(e), cudaGetErrorString(e));
        st = tfd_cuda_context_poisoned() ? TF_ERR_DEVICE : TF_ERR_UNSUPPORTED;
        goto restore;
    }
    gr->node_bytes = allocation_node_bytes(cg);
    e = cudaGraphInstantiate(&gr->exec, cg, 0);
    if (e != cudaSuccess) {
        gr->exec = NULL;
        st = capture_status(tfd_cuda_fail(e, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__,
                                          __LINE__, msg, msg_len));
        goto restore;
    }
    /* Uploaded now, on the capture stream, and waited for: errors surface at prepare time. */
    e = cudaGraphUpload(gr->exec, s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
        st = capture_status(tfd_cuda_fail(e, "cudaGraphUpload(exec, s->stream)", __FILE__,
                                          __LINE__, msg, msg_len));

restore:
    if (cg != NULL && !tfd_cuda_context_poisoned()) (void)cudaGraphDestroy(cg);
    if (st != TF_OK) (void)cudaGetLastError(); /* nothing of the failure is left for later calls */
    if (blas && g->stream == s && !tfd_cuda_context_poisoned()) {
        /* cublasSetStream puts back the handle's default workspace. */
        cublasStatus_t bs = cublasSetStream(s->blas, s->stream);
        if (bs != CUBLAS_STATUS_SUCCESS) {
            tf_status bst = tfd_cublas_fail(bs, "cublasSetStream(s->blas, s->stream)", __FILE__,
                                            __LINE__, NULL, 0);
            if (st == TF_OK) {
                /* The handle may still point at this graph's workspace: no more captures on it. */
                snprintf(msg, msg_len,
                         "cuda: cannot restore the capture stream's cuBLAS workspace");
                st = bst;
            }
            g->stream = NULL;
        }
    }
    if (st != TF_OK && gr->exec != NULL) {
        if (!tfd_cuda_context_poisoned()) (void)cudaGraphExecDestroy(gr->exec);
        gr->exec = NULL;
    }
    return st;
}

tf_status tfd_cuda_graph_capture(tfd_cuda_graphs *g, tfd_backend *be, const tfd_op *ops,
                                 int n_ops, void **graph, uint64_t *bytes, char *msg,
                                 size_t msg_len) {
    *graph = NULL;
    *bytes = 0;
    if (n_ops < 0 || (n_ops > 0 && ops == NULL)) {
        snprintf(msg, msg_len, "cuda: graph_capture of %d operations without them", n_ops);
        return TF_ERR_INVALID_ARGUMENT;
    }
    for (int i = 0; i < n_ops; i++) {
        if (!tf__is_linalg(ops[i].kind)) continue;
        snprintf(msg, msg_len,
                 "cuda: graph node %d (%s) is linear algebra, which is not captured: the graph "
                 "runs node by node",
                 i, tf__op_name(ops[i].kind));
        return TF_ERR_UNSUPPORTED;
    }
    cuda_graph *gr = calloc(1, sizeof *gr);
    if (gr == NULL) {
        snprintf(msg, msg_len, "cuda: out of host memory making a graph");
        return TF_ERR_NO_MEMORY;
    }
    gr->owned.graphs = g;
    pthread_mutex_lock(&g->lock);
    tf_status st = capture_locked(g, be, ops, n_ops, gr, msg, msg_len);
    if (st != TF_OK) release_owned(&gr->owned, 1); /* under the mutex: no capture runs now */
    pthread_mutex_unlock(&g->lock);
    if (st != TF_OK) {
        free(gr);
        return st;
    }
    *graph = gr;
    *bytes = gr->owned.bytes + gr->node_bytes;
    return TF_OK;
}

/* ---- replay and destruction ---- */

tf_status tfd_cuda_graph_launch(tfd_cuda_stream *s, void *graph, char *msg, size_t msg_len) {
    const cuda_graph *gr = graph;
    TFD_CUDA_CHECK_RET(cudaGraphLaunch(gr->exec, s->stream), msg, msg_len);
    return TF_OK;
}

void tfd_cuda_graph_destroy(tfd_cuda_graphs *g, void *graph, int device_ok) {
    cuda_graph *gr = graph;
    if (gr == NULL) return;
    /* Under the mutex: device memory is never freed while a capture of this device runs. */
    pthread_mutex_lock(&g->lock);
    if (device_ok && gr->exec != NULL) {
        cudaError_t e = cudaGraphExecDestroy(gr->exec);
        if (e != cudaSuccess)
            (void)tfd_cuda_fail(e, "cudaGraphExecDestroy(exec)", __FILE__, __LINE__, NULL, 0);
    }
    release_owned(&gr->owned, device_ok);
    if (device_ok && gr->node_bytes > 0 && !tfd_cuda_context_poisoned()) {
        /* The graph pool keeps freed graph memory for later graphs; what no graph uses goes. */
        cudaError_t e = cudaDeviceGraphMemTrim(g->ordinal);
        if (e != cudaSuccess)
            (void)tfd_cuda_fail(e, "cudaDeviceGraphMemTrim(ordinal)", __FILE__, __LINE__, NULL,
                                0);
    }
    pthread_mutex_unlock(&g->lock);
    free(gr);
}
