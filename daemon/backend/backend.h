/*
 * The backend interface: one vtable that every device family implements.
 *
 * The daemon's executor owns ordering (one FIFO per logical stream, served by
 * worker threads); a backend only knows how to run one item on one of its
 * streams. CPU backends run kernels synchronously in the calling worker; CUDA
 * backends launch asynchronously on the stream and report completion through
 * events. Operation descriptors arrive fully validated: shapes agree, axes are
 * in range, outputs are freshly allocated and never alias an input. A kernel may still fail (a device error, an
 * unserved dtype) and then returns a status; it never aborts.
 */
#ifndef TENFERRO_DAEMON_BACKEND_H
#define TENFERRO_DAEMON_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common/linalg.h"
#include "common/ops.h"
#include "tenferro/status.h"
#include "tenferro/types.h"

/* A tensor as a kernel sees it: contiguous, row-major (last axis fastest). */
typedef struct tfd_tensor_view {
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    int64_t numel;
    void *data; /* device memory of the backend */
} tfd_tensor_view;

/* One validated operation. */
typedef struct tfd_op {
    tf__op_kind kind;
    int n_inputs;
    tfd_tensor_view in[2];
    tfd_tensor_view out;
    int n_params;
    int64_t params[TF__MAX_PARAMS]; /* permutation, new shape, reduced axes, slice triples */
    unsigned flags;              /* TF__REDUCE_KEEPDIMS */
    tf_scalar alpha;             /* scale, axpby */
    tf_scalar beta;              /* axpby */
    tf__contraction contract;    /* TF__OP_CONTRACT, checked by tf__infer_contract */
    tf__fft fft;                 /* TF__OP_FFT, checked by tf__infer_fft */
} tfd_op;

/*
 * One validated linear-algebra operation (OP_SVD .. OP_DIAGONAL,
 * docs/linalg.md). The input is in the canonical layout the descriptor's
 * filled-in sizes describe (desc.b matrices of desc.m x desc.n, contiguous,
 * row-major: the daemon permuted it first if the split asked for it); the
 * outputs are fresh, contiguous, in the wire order of the kind (in a
 * prepared graph: arena slots or the run's output tensors, never aliasing
 * the inputs). `batch` and `index` name the operation in its Submit, for a
 * failure the device finds after the call returned (event_failure).
 */
typedef struct tfd_linalg_op {
    tf__op_kind kind;
    tf__linalg desc;
    int n_inputs;
    tfd_tensor_view in[2];
    int n_outputs;
    tfd_tensor_view out[TF__LINALG_MAX_OUTPUTS];
    uint64_t batch;
    uint32_t index;
    /*
     * Inside a prepared graph's run (batch and index then name the run): the
     * node, so that a failure reported after the call (event_failure) can
     * name it as the call's own message does; -1 outside a graph.
     */
    int node;
} tfd_linalg_op;

/* What one daemon-wide cache holds and how it has been used (status, metrics). */
typedef struct tfd_cache_stats {
    const char *name; /* "fft_plans", "contraction_plans", ... */
    uint64_t entries, capacity, hits, misses, evictions, bytes;
} tfd_cache_stats;

/* How FFTW plans a transform it has not seen ([caches] fftw_planner, docs/fft.md). */
typedef enum tfd_fftw_planner {
    TFD_FFTW_ESTIMATE = 0, /* a heuristic plan at once, never touching the data */
    TFD_FFTW_MEASURE = 1,  /* times candidate plans on scratch arrays (seconds for large sizes) */
    TFD_FFTW_PATIENT = 2,  /* times many more (minutes for large sizes) */
} tfd_fftw_planner;

/*
 * Settings of the daemon-wide caches ([caches] in tenferrod.conf), read by
 * open. All zeros is a fine setting for in-process use: unbounded caches,
 * FFTW estimating its plans, no wisdom file.
 */
typedef struct tfd_cache_config {
    uint64_t fft_plans; /* LRU bound of the FFT plan cache (entries); 0 = unbounded */
    tfd_fftw_planner fftw_planner;
    char fftw_wisdom[256]; /* FFTW wisdom file read at open and written back; "" = none */
} tfd_cache_config;

typedef struct tfd_backend tfd_backend;

/* The largest backend description of shared memory (cudaMemPoolPtrExportData is 64 bytes). */
#define TFD_PEER_HANDLE_BYTES 128

/*
 * A tensor's memory as one daemon shares it with another (docs/multi-gpu.md):
 * `kind` names how ("host-memfd": fd is a sealed memfd holding a copy of the
 * bytes; "cuda-pool": fd is the device memory pool's shareable handle and
 * `handle` the export data of the allocation holding the tensor), `offset`
 * where the tensor starts in what fd and handle name.
 */
typedef struct tfd_peer_memory {
    char kind[16];
    uint8_t handle[TFD_PEER_HANDLE_BYTES];
    size_t handle_len;
    uint64_t offset;
    int fd; /* -1 when none */
} tfd_peer_memory;

/* Every entry returns TF_OK or a typed status and writes a reason into msg when it fails. */
typedef struct tfd_backend_vtable {
    const char *name; /* "cpu", "cuda" */

    /*
     * 1 when copy_to_device and copy_to_host from and into page-locked host
     * memory only enqueue the copy on the stream and never wait (CUDA): the
     * loop thread may then start a pending transfer itself. 0 when a copy
     * runs to its end in the call (CPU), so a worker runs it, or the loop a
     * small one once its request is answered (finishes_in_call).
     */
    int copies_enqueue_only;

    /*
     * 1 when every call has finished its work when it returns (CPU): a stream
     * no worker holds then has nothing in flight, so the loop thread may free
     * its memory at once and run a small copy itself (executor.h). 0 when
     * work may still run on the device after the call (CUDA).
     */
    int finishes_in_call;

    /* Opens device `ordinal`; fills be->description. */
    tf_status (*open)(tfd_backend *be, int ordinal, char *msg, size_t msg_len);
    void (*close)(tfd_backend *be);

    /* A logical stream's native state (queue handle, BLAS handle, scratch). */
    tf_status (*stream_create)(tfd_backend *be, int priority, void **stream);
    void (*stream_destroy)(tfd_backend *be, void *stream);

    /*
     * Device memory, ordered on `stream` where the device supports it. free
     * gets the stream and the byte count the pointer was allocated with.
     */
    tf_status (*alloc)(tfd_backend *be, void *stream, size_t bytes, void **ptr);
    void (*free)(tfd_backend *be, void *stream, void *ptr, size_t bytes);

    /* Copies between host memory and device memory, ordered on `stream`. */
    tf_status (*copy_to_device)(tfd_backend *be, void *stream, void *dst, const void *src,
                                size_t bytes);
    tf_status (*copy_to_host)(tfd_backend *be, void *stream, void *dst, const void *src,
                              size_t bytes);

    /*
     * Sets `bytes` of device memory at ptr to zero, ordered on `stream`: what
     * a client may read of a tensor it never wrote (memory another client
     * may have used before) is zeros, never that client's bytes.
     */
    tf_status (*fill_zero)(tfd_backend *be, void *stream, void *ptr, size_t bytes);

    /* Operations, grouped by family; each switches on op->kind and op->in[0].dtype. */
    tf_status (*binary)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    tf_status (*unary)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    tf_status (*axpby)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    tf_status (*permute)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    tf_status (*reduce)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    tf_status (*matmul)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);
    /* Optional (NULL: TF_ERR_UNSUPPORTED): OP_CONTRACT and OP_FFT (docs/einsum.md, docs/fft.md). */
    tf_status (*contract)(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                          size_t msg_len);
    tf_status (*fft)(tfd_backend *be, void *stream, const tfd_op *op, char *msg, size_t msg_len);

    /*
     * Optional (NULL: TF_ERR_UNSUPPORTED): the linear-algebra kinds
     * (docs/linalg.md). What the call can see fails the call with a typed
     * status (TF_ERR_NOT_CONVERGED, TF_ERR_SINGULAR,
     * TF_ERR_NOT_POSITIVE_DEFINITE, TF_ERR_NOT_FINITE) and a message naming
     * the failing matrix of the batch; every output then holds zeros. A
     * backend whose solver reports on the device (CUDA's info words) does not
     * wait for it: it zeroes the outputs on the device and reports the
     * failure through event_failure.
     */
    tf_status (*linalg)(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                        size_t msg_len);

    /*
     * Optional (NULL: none): the backend's daemon-wide caches (plans shared by
     * every client), up to max entries written into out; returns how many.
     * Any thread may ask; the counters are read without stopping the users.
     */
    int (*caches)(tfd_backend *be, tfd_cache_stats *out, int max);

    /*
     * Optional (NULL: OP_TEST_FAULT is TF_ERR_UNSUPPORTED): fault injection,
     * which the daemon runs only when started with --test-fault-injection.
     * It makes the device fault for real where it can (CUDA: a kernel writes
     * to an illegal address and poisons the context) or declares the device
     * lost (CPU), so that health reports TF_ERR_DEVICE from then on; it
     * returns TF_ERR_DEVICE with the reason itself.
     */
    tf_status (*inject_fault)(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                              size_t msg_len);

    /*
     * Completion. event_record marks "everything enqueued on stream so far";
     * it may set *event to NULL when that work is already complete (CPU).
     * event_wait blocks until the event completes and reports a device error
     * seen by then; it is called from the completion thread, and by the
     * thread that issued a copy once event_done said the event completed.
     */
    tf_status (*event_record)(tfd_backend *be, void *stream, void **event, char *msg, size_t msg_len);
    tf_status (*event_wait)(tfd_backend *be, void *event, char *msg, size_t msg_len);
    void (*event_destroy)(tfd_backend *be, void *event);

    /*
     * Optional (NULL: every failure is the call's own): after event_wait of
     * `event` returned TF_OK, the first failure the device found in
     * linear-algebra work enqueued on the event's stream before the event was
     * recorded and not yet consumed: TF_OK when none, else its status, with
     * the failing operation's batch and index (tfd_linalg_op) and a message.
     * `consume` (a synchronize) forgets the failures up to the event; without
     * it (a download) they stay for the next synchronize. Called from the
     * completion thread while workers keep enqueueing.
     */
    tf_status (*event_failure)(tfd_backend *be, void *event, int consume, uint64_t *batch,
                               uint32_t *index, char *msg, size_t msg_len);

    /*
     * Optional, with event_failure: the same for a stream the device has
     * finished (stream_done said so) and no worker holds, over everything
     * enqueued on it, consumed. A synchronize of an idle stream completes
     * without an event and asks this instead, so a failure a download
     * reported and left is still the synchronize's.
     */
    tf_status (*stream_failure)(tfd_backend *be, void *stream, uint64_t *batch, uint32_t *index,
                                char *msg, size_t msg_len);

    /*
     * Optional, for asynchronous backends: 1 when everything enqueued on the
     * stream has completed without error, else 0. Never waits, so the loop
     * thread may ask; it answers an idle stream's synchronize at once.
     */
    int (*stream_done)(tfd_backend *be, void *stream);

    /*
     * Optional, for asynchronous backends: 1 when the recorded event has
     * completed (an error included: event_wait then reports it), else 0.
     * Never waits; any thread may ask.
     */
    int (*event_done)(tfd_backend *be, void *event);

    /*
     * Optional, for backends with a copy engine beside the compute queue
     * (NULL: copies stay in stream order). side_copy runs a pending
     * transfer's copy on the stream's copy queue after `after` (an event of
     * this backend, or NULL: after everything enqueued on the stream so far)
     * and records *done after it, so kernels enqueued meanwhile run beside
     * it. stream_wait makes what is enqueued on the stream next wait for an
     * event; join_side_copies makes it wait for every side copy so far.
     */
    tf_status (*side_copy)(tfd_backend *be, void *stream, int to_device, void *dst, const void *src,
                           size_t bytes, void *after, void **done, char *msg, size_t msg_len);
    tf_status (*stream_wait)(tfd_backend *be, void *stream, void *event, char *msg, size_t msg_len);
    tf_status (*join_side_copies)(tfd_backend *be, void *stream, char *msg, size_t msg_len);

    /*
     * Optional (NULL = always healthy): TF_OK while the device can still be
     * trusted, else TF_ERR_DEVICE with the reason, once an error has made
     * every later result unreliable (a CUDA context poisoned by a kernel fault).
     */
    tf_status (*health)(tfd_backend *be, char *msg, size_t msg_len);

    /*
     * Optional (NULL = nothing to trim): returns memory the device keeps cached
     * for reuse (a memory pool's free blocks) to the system, without waiting on
     * any stream. Called from the loop thread; msg says what was done, or why
     * it failed.
     */
    tf_status (*trim)(tfd_backend *be, char *msg, size_t msg_len);

    /*
     * Optional (NULL = plain host memory is good enough): page-locks host
     * memory the daemon mapped for a pinned buffer (a sealed memfd shared with
     * a client) so copies to and from it are one DMA, and undoes that before
     * the mapping goes. Called from the loop thread; unregister is only called
     * for a range register accepted, once no copy uses it.
     */
    tf_status (*host_register)(tfd_backend *be, void *ptr, size_t bytes, char *msg, size_t msg_len);
    void (*host_unregister)(tfd_backend *be, void *ptr);

    /*
     * Optional (NULL: a prepared graph runs its nodes one by one through the
     * operation entries): prepared graphs as device graphs (docs/prepared.md).
     *
     * graph_capture records ops[0..n_ops), in order, into a replayable graph
     * and instantiates it, without running them. Every op's data pointers
     * are device memory the caller keeps unchanged for the graph's whole
     * life (memory from alloc with a NULL stream). The graph is
     * self-contained: whatever the ops need besides those pointers (scratch,
     * library work areas and plans, BLAS workspaces) belongs to the graph and
     * goes with graph_destroy, so the graph may be launched on any stream of
     * this backend, after its maker's stream and connection are gone. It does
     * not capture on any caller's stream: it uses a stream of its own, so
     * other work of the daemon is never swept into the capture. *bytes gets
     * the device memory the graph itself holds. Called on a worker thread.
     * TF_ERR_UNSUPPORTED when an op cannot be captured (the caller falls back
     * to running the nodes one by one).
     *
     * graph_launch enqueues one replay on `stream`, ordered after the work
     * enqueued there before and after earlier launches of the same graph.
     * graph_destroy frees it; the caller guarantees no launch is pending
     * (called on a worker thread, or at close).
     */
    tf_status (*graph_capture)(tfd_backend *be, const tfd_op *ops, int n_ops, void **graph,
                               uint64_t *bytes, char *msg, size_t msg_len);
    tf_status (*graph_launch)(tfd_backend *be, void *stream, void *graph, char *msg,
                              size_t msg_len);
    void (*graph_destroy)(tfd_backend *be, void *graph);

    /*
     * Device-to-device copies between daemons (docs/multi-gpu.md); NULL when
     * the backend has no such route. peer_export describes `bytes` at `ptr`
     * for another daemon into *out (its fd is the caller's to close); it is
     * called on a worker in the order of `stream`, the one ptr was allocated on, so the work queued before it has
     * been issued, and the caller waits for that work before handing *out
     * on. peer_import_copy copies `bytes` from memory another daemon
     * described into dst on `stream`, after the work enqueued there before,
     * and returns once the copy is over and nothing of `in` is mapped any
     * more (the caller then closes in->fd and tells the other daemon).
     * TF_ERR_UNSUPPORTED for a kind it cannot read.
     */
    tf_status (*peer_export)(tfd_backend *be, void *stream, const void *ptr, size_t bytes,
                             tfd_peer_memory *out, char *msg, size_t msg_len);
    tf_status (*peer_import_copy)(tfd_backend *be, void *stream, void *dst, size_t bytes,
                                  const tfd_peer_memory *in, char *msg, size_t msg_len);
} tfd_backend_vtable;

struct tfd_backend {
    const tfd_backend_vtable *vt;
    int ordinal;
    char description[256]; /* "cpu (2 cores, OpenBLAS 0.3.21)" */
    void *impl;            /* backend-private device state */
    tfd_cache_config caches; /* set before open */
};

/* The CPU backend's vtable (daemon/backend/cpu/backend.c). */
extern const tfd_backend_vtable tfd_cpu_backend;

/*
 * Runs one operation by dispatching on its kind to the vtable family entry;
 * once the backend reports its device lost (health), nothing runs any more
 * and every operation is TF_ERR_DEVICE. Called by the executor's workers.
 */
tf_status tfd_backend_run_op(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                             size_t msg_len);

/* The same for a linear-algebra operation, through the backend's linalg entry. */
tf_status tfd_backend_run_linalg(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                                 size_t msg_len);

#endif
