/*
 * State shared by the C files of the CUDA backend (cuda/backend.c owns it,
 * cuda/matmul.c reads a stream's cuBLAS handle, cuda/alloc.c keeps a stream's
 * block cache, cuda/linalg.c its cuSOLVER state and pending checks). Private
 * to daemon/backend; needs the CUDA headers, so the rest of the daemon
 * includes cuda/backend.h.
 */
#ifndef TENFERRO_DAEMON_CUDA_INTERNAL_H
#define TENFERRO_DAEMON_CUDA_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "daemon/backend/backend.h"

/*
 * The block cache's size classes: powers of two from 2^8 (256 B) to 2^16
 * (64 KiB), carved from slabs; above that four classes per power of two
 * (1.25, 1.5, 1.75 and 2 times 2^j) up to 2^26 (64 MiB), so a block is at
 * most a quarter larger than its request.
 */
#define TFD_CUDA_CLASS_MIN_LOG2 8
#define TFD_CUDA_SLAB_CLASS_MAX_LOG2 16
#define TFD_CUDA_CLASS_MAX_LOG2 26
#define TFD_CUDA_STEPS_PER_DOUBLING 4
#define TFD_CUDA_N_CLASSES                                                                         \
    (TFD_CUDA_SLAB_CLASS_MAX_LOG2 - TFD_CUDA_CLASS_MIN_LOG2 + 1 +                                  \
     TFD_CUDA_STEPS_PER_DOUBLING * (TFD_CUDA_CLASS_MAX_LOG2 - TFD_CUDA_SLAB_CLASS_MAX_LOG2))

/* The bytes of the block a request of `bytes` gets: its class's size, or `bytes` above 64 MiB. */
size_t tfd_cuda_block_bytes(size_t bytes);

/* A stack of free device blocks of one size class. */
typedef struct tfd_cuda_blocks {
    void **ptr;
    size_t n, cap;
} tfd_cuda_blocks;

/* A region small blocks are carved from, and how many of its blocks are handed out. */
typedef struct tfd_cuda_slab {
    char *base;
    size_t live;
} tfd_cuda_slab;

/*
 * A stream's block cache (cuda/alloc.c): free blocks per size class, the
 * slabs of the small classes (sorted by address) and the slab being carved.
 * `lock` guards every field: alloc runs on the loop thread, free on a worker.
 */
typedef struct tfd_cuda_cache {
    pthread_mutex_t lock;
    tfd_cuda_blocks free[TFD_CUDA_N_CLASSES];
    tfd_cuda_slab *slabs;
    size_t n_slabs, cap_slabs;
    char *carve_base; /* the slab new small blocks come from; NULL when none */
    size_t carve_used;
    size_t large_cached; /* bytes on the free stacks of the classes above the slab classes */
} tfd_cuda_cache;

typedef struct tfd_cuda_heap tfd_cuda_heap;

/* What a graph capture owns while it runs (cuda/graph.c): its scratch blocks and private plans. */
typedef struct tfd_cuda_capture tfd_cuda_capture;

/* A logical stream's native state: one CUDA stream, the cuBLAS handle bound to it, its cache. */
typedef struct tfd_cuda_stream {
    cudaStream_t stream;
    cublasHandle_t blas;
    int priority;                 /* the clamped CUDA priority it was created with */
    struct tfd_cuda_stream *next; /* free-list link while pooled */
    tfd_cuda_heap *heap;          /* the device's list of streams, NULL until attached */
    struct tfd_cuda_stream *heap_prev, *heap_next;
    tfd_cuda_cache cache;
    /*
     * Set only on the backend's capture stream while it captures a graph
     * (cuda/graph.c), and only by the capturing thread: scratch then comes
     * from and stays with that capture instead of this cache, and FFTs use
     * the capture's private plans.
     */
    tfd_cuda_capture *capture;
    /*
     * The stream's copy queue for pending transfers (created at the first),
     * so a copy overlaps the stream's kernels; side_copies counts the copies
     * issued there since the stream last waited for them all.
     */
    cudaStream_t copy;
    unsigned side_copies;
    /*
     * Linear algebra (cuda/linalg.c): the solver state, made at the stream's
     * first linear-algebra operation, and the pending checks of operations
     * whose failure the device reports later (the solver's info words).
     * linalg_lock guards the pointer, check_seq and every check: a worker
     * appends, the completion thread scans (event_failure). check_seq counts
     * the checks appended over the stream's whole life; an event remembers it.
     */
    pthread_mutex_t linalg_lock;
    int linalg_lock_ok;
    uint64_t check_seq;
    struct tfd_cuda_linalg *linalg;
} tfd_cuda_stream;

/* Every stream of one device, pooled or in use, so trim and an out-of-memory retry reach them. */
struct tfd_cuda_heap {
    pthread_mutex_t lock; /* taken before a stream's cache lock, never after */
    tfd_cuda_stream *streams;
};

/*
 * Creates a stream (cuda/backend.c): a non-blocking CUDA stream of CUDA
 * priority `prio`, a cuBLAS handle bound to it in full-precision math mode,
 * and its block cache attached to the device's list.
 */
tf_status tfd_cuda_stream_new(tfd_cuda_heap *heap, int prio, tfd_cuda_stream **out, char *msg,
                              size_t msg_len);

/*
 * Destroys a stream for good, its cached memory first; cublasDestroy
 * synchronizes the device. Without a usable device only host state is freed.
 */
void tfd_cuda_stream_delete(tfd_cuda_stream *s, int device_ok);

/*
 * Batched row-major matrix product through the stream's cuBLAS handle
 * (cuda/matmul.c). The caller has selected the device for this thread.
 */
tf_status tfd_cuda_matmul(tfd_cuda_stream *s, const tfd_op *op, char *msg, size_t msg_len);

/*
 * A contraction (OP_CONTRACT) through the daemon-wide plan cache: passes and
 * one (strided-batched) GEMM enqueued on the stream (cuda/contract.c). The
 * caller has selected the device for this thread and checked the views.
 */
tf_status tfd_cuda_contract(tfd_cuda_stream *s, int sm_count, const tfd_op *op, char *msg,
                            size_t msg_len);

/*
 * Linear algebra (cuda/linalg.c): every kind of tfd_linalg_op through
 * cuSOLVER and the kernels of cuda/linalg-kernels.cu, enqueued on the stream
 * without waiting for it. A failure the solver reports on the device (its
 * info words, a nan in the input) zeroes the outputs on the device and is
 * found later by tfd_cuda_linalg_failure. The caller has selected the device
 * for this thread.
 */
tf_status tfd_cuda_linalg(tfd_cuda_stream *s, int sm_count, const tfd_linalg_op *op, char *msg,
                          size_t msg_len);

/* Prepares a new stream's linear-algebra fields; 0, or -1 when its mutex cannot be made. */
int tfd_cuda_linalg_init(tfd_cuda_stream *s);

/* The stream's check sequence now: an event recorded now covers the checks up to it. */
uint64_t tfd_cuda_linalg_seq(tfd_cuda_stream *s);

/*
 * After an event recorded on s at sequence seq completed: the first failure
 * among the pending checks up to seq (TF_OK when none), with its operation's
 * batch and index and a message. consume drops every check up to seq; without
 * it the failed ones stay (a later consume reports them again). Checks that
 * did not fail go either way. Never calls CUDA: any thread may ask.
 */
tf_status tfd_cuda_linalg_failure(tfd_cuda_stream *s, uint64_t seq, int consume, uint64_t *batch,
                                  uint32_t *index, char *msg, size_t msg_len);

/*
 * The stream goes back to the pool: its pending checks are dropped and its
 * solver workspaces freed (stream-ordered); the cuSOLVER handle stays. Only
 * host state is touched without device_ok.
 */
void tfd_cuda_linalg_idle(tfd_cuda_stream *s, int device_ok);

/* The stream is destroyed: everything of its linear algebra goes (the handle too). */
void tfd_cuda_linalg_delete(tfd_cuda_stream *s, int device_ok);

/*
 * The cuSOLVER and cuBLAS routines of the SVD (and the norms made from
 * singular values), eigh, QR, Cholesky and the LU kinds (solve, inv, det,
 * slogdet), as tfd_cuda_linalg_choose picks them by shape: one call for a
 * whole batch of small matrices, else the 64-bit API one matrix at a time.
 */
typedef enum tfd_cuda_solver {
    TFD_CUDA_SOLVER_AUTO = 0,
    TFD_CUDA_SVD_XGESVD = 1,         /* cusolverDnXgesvd per matrix (QR iteration) */
    TFD_CUDA_SVD_GESVDJ = 2,         /* cusolverDn<t>gesvdj per matrix (Jacobi) */
    TFD_CUDA_SVD_GESVDJ_BATCHED = 3, /* cusolverDn<t>gesvdjBatched, m and n at most 32 */
    TFD_CUDA_EIGH_XSYEVD = 4,        /* cusolverDnXsyevd per matrix (divide and conquer) */
    TFD_CUDA_EIGH_SYEVJ_BATCHED = 5, /* cusolverDn<t>syevjBatched / heevjBatched, n at most 32 */
    TFD_CUDA_QR_XGEQRF = 6,          /* cusolverDnXgeqrf + <t>orgqr / ungqr per matrix */
    TFD_CUDA_QR_GEQRF_BATCHED = 7,   /* cublas<t>geqrfBatched (m >= n), Q by a kernel */
    TFD_CUDA_LU_XGETRF = 8,          /* cusolverDnXgetrf (+ Xgetrs) per matrix */
    TFD_CUDA_LU_GETRF_BATCHED = 9,   /* cublas<t>getrfBatched (+ getrsBatched) */
    TFD_CUDA_CHOL_XPOTRF = 10,       /* cusolverDnXpotrf per matrix */
    TFD_CUDA_CHOL_POTRF_BATCHED = 11, /* cusolverDn<t>potrfBatched */
} tfd_cuda_solver;

/*
 * The routine of the default table for a kind (SVD, NORM, EIGH, QR,
 * CHOLESKY, SOLVE, INV, DET or SLOGDET) and shape; AUTO for other kinds.
 */
tfd_cuda_solver tfd_cuda_linalg_choose(tf__op_kind kind, tf_dtype dt, int64_t b, int64_t m,
                                       int64_t n);

/*
 * Overrides the table for the SVD and eigh (AUTO: the table), where the
 * routine can serve the shape; for tests and measurements.
 */
void tfd_cuda_linalg_force(tfd_cuda_solver svd, tfd_cuda_solver eigh);

/* The same for QR, the LU kinds (solve, inv, det, slogdet) and Cholesky. */
void tfd_cuda_linalg_force_factor(tfd_cuda_solver qr, tfd_cuda_solver lu, tfd_cuda_solver chol);

/*
 * Counters of the stream's linear algebra: cuSOLVER compute calls enqueued,
 * and operations whose status had to be read with a blocking copy (no pinned
 * slot could be had). Read on the thread that runs the stream's operations.
 */
void tfd_cuda_linalg_counters(tfd_cuda_stream *s, uint64_t *solver_calls,
                              uint64_t *blocking_reads);

/*
 * The per-stream block cache (cuda/alloc.c). Every function that may call
 * CUDA expects the device to be current on the calling thread and the context
 * to be usable (the backend's enter() succeeded).
 */

/* Prepares an empty list of streams; 0, or -1 when its mutex cannot be made. */
int tfd_cuda_heap_init(tfd_cuda_heap *h);

/* Destroys the list; every stream has been detached before. */
void tfd_cuda_heap_destroy(tfd_cuda_heap *h);

/* Gives a new stream an empty cache and adds it to the device's list. */
tf_status tfd_cuda_cache_attach(tfd_cuda_heap *h, tfd_cuda_stream *s, char *msg, size_t msg_len);

/*
 * Takes a stream off the device's list and drops its cache: with device_ok,
 * its memory goes back to the pool on the stream first (a slab that still
 * has blocks handed out is left allocated); without, only host state is freed.
 */
void tfd_cuda_cache_detach(tfd_cuda_stream *s, int device_ok);

/* Stream-ordered allocation of at least `bytes` through the stream's cache. */
tf_status tfd_cuda_cache_alloc(tfd_cuda_stream *s, size_t bytes, void **ptr, char *msg,
                               size_t msg_len);

/* Returns a block allocated on `s` with the same `bytes`; stream-ordered after its users. */
void tfd_cuda_cache_free(tfd_cuda_stream *s, void *ptr, size_t bytes);

/*
 * The start of the device allocation holding block ptr of stream s: the
 * slab it was carved from, else the block itself (a block of a larger class,
 * or an exact-size one, is one cudaMallocAsync of its own).
 */
void *tfd_cuda_cache_allocation(tfd_cuda_stream *s, const void *ptr);

/*
 * Frees the stream's cached large blocks and its idle slabs (no block handed
 * out) to the pool, keeping the slab being carved when keep_carving is set;
 * returns the bytes released.
 */
size_t tfd_cuda_cache_release(tfd_cuda_stream *s, int keep_carving);

/* tfd_cuda_cache_release(s, 0) for every stream of the device; returns the bytes released. */
size_t tfd_cuda_heap_release(tfd_cuda_heap *h);

#endif
