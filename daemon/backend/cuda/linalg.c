/*
 * Linear algebra of the CUDA backend (OP_SVD .. OP_DIAGONAL, docs/linalg.md),
 * through cuSOLVER and the kernels of cuda/linalg-kernels.cu.
 *
 * Layout. The input is b row-major m x n matrices; read column-major, each
 * is A^T (n x m). Every routine runs on a scratch copy (cuSOLVER overwrites
 * its input), either the buffer as it is (the solver then sees A^T) or its
 * transpose (the solver sees A), and kernels write the row-major outputs
 * from the solver's column-major factors:
 *   SVD      on A^T = U' S V'^H: A's U is conj(V'), A's Vh is U'^T; on A
 *            (Xgesvd needs rows >= cols, so when m > n): U and V^H directly.
 *   QR       geqrf on the transposed copy (A itself), orgqr/ungqr for Q.
 *   EIGH     on A^T = conj(A) (Hermitian): the triangle A's lower one is
 *            X's upper one, and A's eigenvectors are conj of X's.
 *   CHOLESKY potrf on A^T in place, the opposite triangle of X: for
 *            upper 0, X = U'^H U' gives A = L L^H with L = U'^T, whose
 *            row-major buffer is U''s column-major one, so the output buffer
 *            is factored in place and only the other triangle is zeroed.
 *   SOLVE    getrf of A^T, getrs with OP_T (A = (A^T)^T) on B transposed
 *            into column-major (a single right-hand side needs no transpose).
 *   INV      getrf of A^T, getrs of the identity: the column-major inverse of
 *            A^T is the row-major inverse of A, written into the output.
 *   DET, SLOGDET from getrf's factors of A^T (det A^T = det A).
 *   NORM     reductions; NUC and the 2-norms from singular values.
 *
 * Routines (tfd_cuda_linalg_choose, the table routine_table): for a batch
 * of small matrices one call for the whole batch: batched Jacobi
 * (gesvdjBatched, syevjBatched) up to 32 x 32, cublas<t>geqrfBatched up to
 * 32 x 32 (tall only; Q then formed from the reflectors by a kernel, there
 * being no batched orgqr), cublas<t>getrfBatched (+ getrsBatched) for
 * solve, inv, det and slogdet and cusolverDn<t>potrfBatched for Cholesky up
 * to 64 x 64; otherwise the 64-bit routine per matrix of the batch (Xgesvd,
 * Xsyevd, Xgeqrf + orgqr, Xpotrf, Xgetrf + Xgetrs). Each stream has one
 * cuSOLVER handle bound to its CUDA stream (cuBLAS's batched routines run on
 * the stream's cuBLAS handle), its parameter objects, and a device and a host
 * workspace and the batched routines' device pointer arrays, which grow when
 * too small and are kept while the stream is in use.
 *
 * Failures without waiting. Before a factorization a kernel flags each
 * matrix holding nan or inf (a flagged matrix goes to the solver as the
 * identity, so the solver never meets it); the solver writes its info word
 * per matrix on the device. After the operation a kernel reduces flags and
 * info into one status word (the first failing matrix and why), a kernel
 * zeroes every output when it reports a failure, and the word is copied
 * (cudaMemcpyAsync) into a slot of pinned host memory owned by the stream. A
 * pending check {slot, kind, batch, index, b, sequence} is appended to the
 * stream's list; an event remembers the stream's sequence when it is
 * recorded, and once it completed event_failure reads the slots of the
 * checks up to it (tfd_cuda_linalg_failure). Nothing in an operation waits
 * for the device, except when no pinned slot can be had (the pool is at its
 * bound or pinned memory ran out): that one operation then reads its status
 * word with a blocking copy and reports its failure from the call itself.
 */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuComplex.h>
#include <cusolverDn.h>

#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/internal.h"
#include "daemon/backend/cuda/linalg-kernels.h"

/* Pinned status slots: the first slab's count, and the most a stream makes. */
#define SLOTS_FIRST 64
#define SLOTS_MAX 65536

/* Scratch blocks one operation takes at most. */
#define ARENA_MAX 16

/* One operation whose status word is on its way into a pinned slot. */
typedef struct la_check {
    tfd_cuda_la_status *slot;
    tf__op_kind kind;
    uint64_t batch;
    uint32_t index;
    int node; /* its node in a prepared graph, -1 outside one */
    int64_t b;
    uint64_t seq;
} la_check;

struct tfd_cuda_linalg {
    /* The worker's: */
    cusolverDnHandle_t handle;
    cusolverDnParams_t params;
    gesvdjInfo_t gesvdj;
    syevjInfo_t syevj;
    void *dwork; /* device workspace, from the stream's block cache */
    size_t dwork_bytes;
    void *hwork; /* host workspace of the 64-bit API */
    size_t hwork_bytes;
    void **dptrs; /* device pointer arrays of the batched routines, from the block cache */
    size_t dptrs_bytes;
    tfd_cuda_la_status *dstatus; /* the device's status word, reused by every operation */
    uint64_t solver_calls, blocking_reads;
    /* Under the stream's linalg_lock: */
    la_check *checks;
    size_t n_checks, cap_checks;
    tfd_cuda_la_status **free_slots;
    size_t n_free, cap_free;
    void **slabs;
    size_t n_slabs, cap_slabs, n_slots;
};

/* ---- routine table ---- */

/*
 * The first row whose kind matches and whose shape fits picks the routine.
 * The batched rows: one launch for the whole batch instead of one (or, with
 * its workspace query and the kernels between, several) per matrix, which
 * is what a batch of small matrices costs; their bounds are where the
 * batched routines stop being the small-matrix kernels they are documented
 * as (cuSOLVER's Jacobi: 32; cuBLAS's and cuSOLVER's batched LU and
 * Cholesky are tuned for "small" sizes), to be moved by the H200's numbers
 * (bench/gpu/linalg-routines.c prints them). QR's bound is 32 because Q is
 * formed by a kernel of one thread per column (tfd_cuda_la_qr_form_q),
 * whose serial work per thread grows as m * n.
 */
#define BATCHED_QR_MAX 32
#define BATCHED_LU_MAX 64
#define BATCHED_CHOL_MAX 64

static const struct {
    tf__op_kind kind;
    int64_t max_dim;   /* m and n at most this */
    int64_t min_batch; /* b at least this */
    int tall;          /* m >= n only */
    tfd_cuda_solver routine;
} routine_table[] = {
    {TF__OP_SVD, 32, 2, 0, TFD_CUDA_SVD_GESVDJ_BATCHED},
    {TF__OP_SVD, INT64_MAX, 1, 0, TFD_CUDA_SVD_XGESVD},
    {TF__OP_EIGH, 32, 2, 0, TFD_CUDA_EIGH_SYEVJ_BATCHED},
    {TF__OP_EIGH, INT64_MAX, 1, 0, TFD_CUDA_EIGH_XSYEVD},
    {TF__OP_QR, BATCHED_QR_MAX, 2, 1, TFD_CUDA_QR_GEQRF_BATCHED},
    {TF__OP_QR, INT64_MAX, 1, 0, TFD_CUDA_QR_XGEQRF},
    {TF__OP_DET, BATCHED_LU_MAX, 2, 0, TFD_CUDA_LU_GETRF_BATCHED},
    {TF__OP_DET, INT64_MAX, 1, 0, TFD_CUDA_LU_XGETRF},
    {TF__OP_CHOLESKY, BATCHED_CHOL_MAX, 2, 0, TFD_CUDA_CHOL_POTRF_BATCHED},
    {TF__OP_CHOLESKY, INT64_MAX, 1, 0, TFD_CUDA_CHOL_XPOTRF},
};

static atomic_int forced_svd, forced_eigh, forced_qr, forced_lu, forced_chol;

tfd_cuda_solver tfd_cuda_linalg_choose(tf__op_kind kind, tf_dtype dt, int64_t b, int64_t m,
                                       int64_t n) {
    (void)dt;
    if (kind == TF__OP_NORM) kind = TF__OP_SVD; /* NUC and the 2-norms are singular values */
    if (kind == TF__OP_SOLVE || kind == TF__OP_INV || kind == TF__OP_SLOGDET)
        kind = TF__OP_DET; /* one LU factorization for all four */
    for (size_t i = 0; i < sizeof routine_table / sizeof routine_table[0]; i++)
        if (routine_table[i].kind == kind && m <= routine_table[i].max_dim &&
            n <= routine_table[i].max_dim && b >= routine_table[i].min_batch &&
            (!routine_table[i].tall || m >= n))
            return routine_table[i].routine;
    return TFD_CUDA_SOLVER_AUTO;
}

void tfd_cuda_linalg_force(tfd_cuda_solver svd, tfd_cuda_solver eigh) {
    atomic_store(&forced_svd, (int)svd);
    atomic_store(&forced_eigh, (int)eigh);
}

void tfd_cuda_linalg_force_factor(tfd_cuda_solver qr, tfd_cuda_solver lu, tfd_cuda_solver chol) {
    atomic_store(&forced_qr, (int)qr);
    atomic_store(&forced_lu, (int)lu);
    atomic_store(&forced_chol, (int)chol);
}

/*
 * Whether a routine serves the shape (the legacy Jacobi API and the batched
 * routines take int sizes; cuBLAS's batched QR is used for m >= n only).
 */
static int serves(tfd_cuda_solver r, int64_t b, int64_t m, int64_t n) {
    switch (r) {
    case TFD_CUDA_SVD_XGESVD:
    case TFD_CUDA_EIGH_XSYEVD:
    case TFD_CUDA_QR_XGEQRF:
    case TFD_CUDA_LU_XGETRF:
    case TFD_CUDA_CHOL_XPOTRF: return 1;
    case TFD_CUDA_SVD_GESVDJ: return m <= INT_MAX && n <= INT_MAX && m * n <= INT_MAX;
    case TFD_CUDA_SVD_GESVDJ_BATCHED:
    case TFD_CUDA_EIGH_SYEVJ_BATCHED: return m <= 32 && n <= 32 && b <= INT_MAX;
    case TFD_CUDA_QR_GEQRF_BATCHED: return m >= n && m <= 1024 && b <= INT_MAX;
    case TFD_CUDA_LU_GETRF_BATCHED:
    case TFD_CUDA_CHOL_POTRF_BATCHED: return m <= 1024 && n <= 1024 && b <= INT_MAX;
    default: return 0;
    }
}

/* The routine of QR, Cholesky or an LU kind: forced, else the table, else per matrix. */
static tfd_cuda_solver pick_factor(tf__op_kind kind, tf_dtype dt, int64_t b, int64_t m,
                                   int64_t n) {
    const int qr = kind == TF__OP_QR, chol = kind == TF__OP_CHOLESKY;
    const tfd_cuda_solver per = qr ? TFD_CUDA_QR_XGEQRF
                                : chol ? TFD_CUDA_CHOL_XPOTRF
                                       : TFD_CUDA_LU_XGETRF;
    const tfd_cuda_solver batched = qr ? TFD_CUDA_QR_GEQRF_BATCHED
                                    : chol ? TFD_CUDA_CHOL_POTRF_BATCHED
                                           : TFD_CUDA_LU_GETRF_BATCHED;
    const tfd_cuda_solver forced =
        (tfd_cuda_solver)atomic_load(qr ? &forced_qr : chol ? &forced_chol : &forced_lu);
    if ((forced == per || forced == batched) && serves(forced, b, m, n)) return forced;
    const tfd_cuda_solver r = tfd_cuda_linalg_choose(kind, dt, b, m, n);
    if ((r == per || r == batched) && serves(r, b, m, n)) return r;
    return per;
}

static tfd_cuda_solver pick(tf__op_kind kind, tf_dtype dt, int64_t b, int64_t m, int64_t n) {
    const int eigh = kind == TF__OP_EIGH;
    const tfd_cuda_solver forced = (tfd_cuda_solver)atomic_load(eigh ? &forced_eigh : &forced_svd);
    const int fits_kind = eigh ? forced == TFD_CUDA_EIGH_XSYEVD ||
                                     forced == TFD_CUDA_EIGH_SYEVJ_BATCHED
                               : forced >= TFD_CUDA_SVD_XGESVD &&
                                     forced <= TFD_CUDA_SVD_GESVDJ_BATCHED;
    if (forced != TFD_CUDA_SOLVER_AUTO && fits_kind && serves(forced, b, m, n)) return forced;
    const tfd_cuda_solver r = tfd_cuda_linalg_choose(kind, dt, b, m, n);
    if (r != TFD_CUDA_SOLVER_AUTO && serves(r, b, m, n)) return r;
    return eigh ? TFD_CUDA_EIGH_XSYEVD : TFD_CUDA_SVD_XGESVD;
}

/* ---- cuSOLVER errors ---- */

static const char *cusolver_name(cusolverStatus_t r) {
    switch (r) {
    case CUSOLVER_STATUS_SUCCESS: return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED: return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED: return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE: return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH: return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED: return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR: return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
        return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED: return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_INVALID_WORKSPACE: return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default: return "an unknown cuSOLVER status";
    }
}

static tf_status status_of_cusolver(cusolverStatus_t r) {
    switch (r) {
    case CUSOLVER_STATUS_ALLOC_FAILED: return TF_ERR_NO_MEMORY;
    case CUSOLVER_STATUS_INVALID_VALUE: return TF_ERR_INVALID_ARGUMENT;
    case CUSOLVER_STATUS_NOT_SUPPORTED:
    case CUSOLVER_STATUS_ARCH_MISMATCH:
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED: return TF_ERR_UNSUPPORTED;
    default: return TF_ERR_DEVICE;
    }
}

static tf_status cusolver_fail(cusolverStatus_t r, const char *call, int line, char *msg,
                               size_t msg_len) {
    snprintf(msg, msg_len, "%s failed at cuda/linalg.c:%d: %s (%d)", call, line, cusolver_name(r),
             (int)r);
    return status_of_cusolver(r);
}

/* Runs a cuSOLVER call; on failure stores the status in `st` and jumps to `done`. */
#define SOLVER(call)                                                                               \
    do {                                                                                           \
        cusolverStatus_t r_ = (call);                                                              \
        if (r_ != CUSOLVER_STATUS_SUCCESS) {                                                       \
            st = cusolver_fail(r_, #call, __LINE__, c->msg, c->msg_len);                           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* Runs a cuBLAS call; on failure stores the status in `st` and jumps to `done`. */
#define BLAS(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t r_ = (call);                                                                \
        if (r_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            st = tfd_cublas_fail(r_, #call, __FILE__, __LINE__, c->msg, c->msg_len);               \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* Runs a CUDA call (or a launcher of cuda/linalg-kernels.cu); on failure jumps to `done`. */
#define CUDA(call) TFD_CUDA_CHECK_GOTO(call, st, c->msg, c->msg_len, done)

/* Runs a step returning a tf_status; on failure jumps to `done`. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        if ((st = (call)) != TF_OK) goto done;                                                     \
    } while (0)

/* ---- one operation's context ---- */

typedef struct la_ctx {
    tfd_cuda_stream *s;
    struct tfd_cuda_linalg *L;
    int sm;
    const tfd_linalg_op *op;
    tf_dtype dt, rt;
    size_t es, rs;         /* bytes of an element and of a real value */
    cudaDataType ct, rct;  /* their cuSOLVER types */
    void *blk[ARENA_MAX];  /* scratch of this operation, freed stream-ordered at its end */
    size_t blk_bytes[ARENA_MAX];
    int n_blk;
    char *msg;
    size_t msg_len;
} la_ctx;

static cudaDataType cuda_type(tf_dtype d) {
    switch (d) {
    case TF_F32: return CUDA_R_32F;
    case TF_F64: return CUDA_R_64F;
    case TF_C64: return CUDA_C_32F;
    default: return CUDA_C_64F;
    }
}

static tf_dtype real_of(tf_dtype d) { return d == TF_C64 ? TF_F32 : d == TF_C128 ? TF_F64 : d; }

/* Scratch of `bytes` for this operation (at least 16, so nothing is ever NULL). */
static tf_status take(la_ctx *c, size_t bytes, void **out) {
    *out = NULL;
    if (c->n_blk == ARENA_MAX) {
        snprintf(c->msg, c->msg_len, "cuda: %s takes more scratch blocks than it may",
                 tf__op_name(c->op->kind));
        return TF_ERR_INTERNAL;
    }
    if (bytes < 16) bytes = 16;
    tf_status st = tfd_cuda_cache_alloc(c->s, bytes, out, c->msg, c->msg_len);
    if (st != TF_OK) return st;
    c->blk[c->n_blk] = *out;
    c->blk_bytes[c->n_blk++] = bytes;
    return TF_OK;
}

/* The product of three sizes in bytes, or 0 when it does not fit (then take refuses). */
static size_t bytes3(int64_t a, int64_t b, size_t e) {
    int64_t p;
    size_t r;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &p) ||
        __builtin_mul_overflow((size_t)p, e, &r))
        return 0;
    return r;
}

/* take() for a product of sizes, refusing one that overflows. */
static tf_status take3(la_ctx *c, int64_t a, int64_t b, size_t e, void **out) {
    const size_t bytes = bytes3(a, b, e);
    if (bytes == 0 && a > 0 && b > 0 && e > 0) {
        snprintf(c->msg, c->msg_len, "cuda: %s needs more scratch than can be addressed",
                 tf__op_name(c->op->kind));
        return TF_ERR_NO_MEMORY;
    }
    return take(c, bytes, out);
}

static void release_scratch(la_ctx *c) {
    while (c->n_blk > 0) {
        c->n_blk--;
        tfd_cuda_cache_free(c->s, c->blk[c->n_blk], c->blk_bytes[c->n_blk]);
    }
}

/* The device workspace grown to at least `bytes` (the old one goes back, stream-ordered). */
static tf_status device_work(la_ctx *c, size_t bytes, void **out) {
    struct tfd_cuda_linalg *L = c->L;
    if (bytes < 16) bytes = 16;
    if (L->dwork == NULL || L->dwork_bytes < bytes) {
        if (L->dwork != NULL) tfd_cuda_cache_free(c->s, L->dwork, L->dwork_bytes);
        L->dwork = NULL;
        L->dwork_bytes = 0;
        const size_t want = tfd_cuda_block_bytes(bytes);
        tf_status st = tfd_cuda_cache_alloc(c->s, want, &L->dwork, c->msg, c->msg_len);
        if (st != TF_OK) {
            L->dwork = NULL;
            return st;
        }
        L->dwork_bytes = want;
    }
    *out = L->dwork;
    return TF_OK;
}

static void CUDART_CB free_host_cb(void *p) { free(p); }

/*
 * Frees a host workspace once the work enqueued on the stream so far is
 * done (a routine that used it may still run); waits for the stream only if
 * that cannot be enqueued.
 */
static void free_host_later(tfd_cuda_stream *s, void *p, int device_ok) {
    if (p == NULL) return;
    if (!device_ok) {
        free(p);
        return;
    }
    if (cudaLaunchHostFunc(s->stream, free_host_cb, p) == cudaSuccess) return;
    (void)cudaGetLastError();
    (void)cudaStreamSynchronize(s->stream);
    (void)cudaGetLastError();
    free(p);
}

/* The host workspace grown to at least `bytes`; NULL (and TF_OK) for none. */
static tf_status host_work(la_ctx *c, size_t bytes, void **out) {
    struct tfd_cuda_linalg *L = c->L;
    *out = NULL;
    if (bytes == 0) return TF_OK;
    if (L->hwork == NULL || L->hwork_bytes < bytes) {
        free_host_later(c->s, L->hwork, 1);
        L->hwork = malloc(bytes);
        L->hwork_bytes = L->hwork ? bytes : 0;
        if (L->hwork == NULL) {
            snprintf(c->msg, c->msg_len, "cuda: out of host memory for a %zu-byte cuSOLVER "
                     "workspace", bytes);
            return TF_ERR_NO_MEMORY;
        }
    }
    *out = L->hwork;
    return TF_OK;
}

/* Both workspaces of a 64-bit routine. */
static tf_status workspaces(la_ctx *c, size_t dbytes, size_t hbytes, void **d, void **h) {
    tf_status st = device_work(c, dbytes, d);
    return st == TF_OK ? host_work(c, hbytes, h) : st;
}

/*
 * The stream's pointer arrays grown to `slots` arrays of b device pointers
 * each (array t at *out + t * b), kept like the device workspace; a kernel
 * writes them on the stream (tfd_cuda_la_pointers), after the routines of
 * earlier operations that read them.
 */
static tf_status pointer_arrays(la_ctx *c, int slots, void ***out) {
    struct tfd_cuda_linalg *L = c->L;
    const size_t bytes = bytes3(c->op->desc.b, slots, sizeof(void *));
    if (bytes == 0) {
        snprintf(c->msg, c->msg_len, "cuda: %s needs more pointers than can be addressed",
                 tf__op_name(c->op->kind));
        return TF_ERR_NO_MEMORY;
    }
    if (L->dptrs == NULL || L->dptrs_bytes < bytes) {
        if (L->dptrs != NULL) tfd_cuda_cache_free(c->s, L->dptrs, L->dptrs_bytes);
        L->dptrs = NULL;
        L->dptrs_bytes = 0;
        const size_t want = tfd_cuda_block_bytes(bytes);
        void *p = NULL;
        tf_status st = tfd_cuda_cache_alloc(c->s, want, &p, c->msg, c->msg_len);
        if (st != TF_OK) return st;
        L->dptrs = p;
        L->dptrs_bytes = want;
    }
    *out = L->dptrs;
    return TF_OK;
}

/* A batched cuBLAS routine's host info word: only refused arguments set it (negative). */
static tf_status host_info(la_ctx *c, const char *routine, int info) {
    if (info >= 0) return TF_OK;
    snprintf(c->msg, c->msg_len, "cuda: %s: %s refused its argument %d",
             tf__op_name(c->op->kind), routine, -info);
    return TF_ERR_INTERNAL;
}

/* Elements of the dtype at p, offset by i elements. */
static void *at(void *p, int64_t i, size_t es) { return (char *)p + (size_t)i * es; }
static const void *cat(const void *p, int64_t i, size_t es) {
    return (const char *)p + (size_t)i * es;
}

/* ---- per-stream state ---- */

int tfd_cuda_linalg_init(tfd_cuda_stream *s) {
    s->linalg = NULL;
    s->check_seq = 0;
    s->linalg_lock_ok = pthread_mutex_init(&s->linalg_lock, NULL) == 0;
    return s->linalg_lock_ok ? 0 : -1;
}

uint64_t tfd_cuda_linalg_seq(tfd_cuda_stream *s) {
    if (s == NULL || !s->linalg_lock_ok) return 0;
    pthread_mutex_lock(&s->linalg_lock);
    const uint64_t seq = s->check_seq;
    pthread_mutex_unlock(&s->linalg_lock);
    return seq;
}

void tfd_cuda_linalg_counters(tfd_cuda_stream *s, uint64_t *solver_calls,
                              uint64_t *blocking_reads) {
    const struct tfd_cuda_linalg *L = s ? s->linalg : NULL;
    *solver_calls = L ? L->solver_calls : 0;
    *blocking_reads = L ? L->blocking_reads : 0;
}

/* The stream's solver state, made at its first operation; the device status word too. */
static tf_status state_of(tfd_cuda_stream *s, struct tfd_cuda_linalg **out, char *msg,
                          size_t msg_len) {
    struct tfd_cuda_linalg *L = s->linalg;
    tf_status st = TF_OK;
    if (!s->linalg_lock_ok) {
        snprintf(msg, msg_len, "cuda: the stream's linear-algebra lock was never made");
        return TF_ERR_INTERNAL;
    }
    if (L == NULL) {
        L = calloc(1, sizeof *L);
        if (L == NULL) {
            snprintf(msg, msg_len, "cuda: out of host memory for the stream's cuSOLVER state");
            return TF_ERR_NO_MEMORY;
        }
        cusolverStatus_t r;
        const char *call = NULL;
        if ((r = cusolverDnCreate(&L->handle)) != CUSOLVER_STATUS_SUCCESS)
            call = "cusolverDnCreate(&handle)";
        else if ((r = cusolverDnSetStream(L->handle, s->stream)) != CUSOLVER_STATUS_SUCCESS)
            call = "cusolverDnSetStream(handle, stream)";
        else if ((r = cusolverDnCreateParams(&L->params)) != CUSOLVER_STATUS_SUCCESS)
            call = "cusolverDnCreateParams(&params)";
        else if ((r = cusolverDnCreateGesvdjInfo(&L->gesvdj)) != CUSOLVER_STATUS_SUCCESS)
            call = "cusolverDnCreateGesvdjInfo(&gesvdj)";
        else if ((r = cusolverDnCreateSyevjInfo(&L->syevj)) != CUSOLVER_STATUS_SUCCESS)
            call = "cusolverDnCreateSyevjInfo(&syevj)";
        if (call != NULL) {
            st = cusolver_fail(r, call, __LINE__, msg, msg_len);
            if (L->gesvdj) (void)cusolverDnDestroyGesvdjInfo(L->gesvdj);
            if (L->params) (void)cusolverDnDestroyParams(L->params);
            if (L->handle) (void)cusolverDnDestroy(L->handle);
            free(L);
            return st;
        }
        pthread_mutex_lock(&s->linalg_lock);
        s->linalg = L;
        pthread_mutex_unlock(&s->linalg_lock);
    }
    if (L->dstatus == NULL) {
        void *p = NULL;
        st = tfd_cuda_cache_alloc(s, 256, &p, msg, msg_len);
        if (st != TF_OK) return st;
        L->dstatus = p;
    }
    *out = L;
    return TF_OK;
}

/* Puts a slot back on the free stack (whose capacity is every slot made); under the lock. */
static void recycle(struct tfd_cuda_linalg *L, tfd_cuda_la_status *slot) {
    if (slot != NULL && L->n_free < L->cap_free) L->free_slots[L->n_free++] = slot;
}

/* Drops every pending check; under the lock. */
static void drop_checks(struct tfd_cuda_linalg *L) {
    for (size_t i = 0; i < L->n_checks; i++) recycle(L, L->checks[i].slot);
    L->n_checks = 0;
}

void tfd_cuda_linalg_idle(tfd_cuda_stream *s, int device_ok) {
    if (s == NULL || !s->linalg_lock_ok) return;
    pthread_mutex_lock(&s->linalg_lock);
    struct tfd_cuda_linalg *L = s->linalg;
    if (L != NULL) drop_checks(L);
    pthread_mutex_unlock(&s->linalg_lock);
    if (L == NULL) return;
    if (device_ok) {
        if (L->dwork != NULL) tfd_cuda_cache_free(s, L->dwork, L->dwork_bytes);
        if (L->dptrs != NULL) tfd_cuda_cache_free(s, L->dptrs, L->dptrs_bytes);
        if (L->dstatus != NULL) tfd_cuda_cache_free(s, L->dstatus, 256);
    }
    L->dwork = NULL;
    L->dwork_bytes = 0;
    L->dptrs = NULL;
    L->dptrs_bytes = 0;
    L->dstatus = NULL;
    free_host_later(s, L->hwork, device_ok);
    L->hwork = NULL;
    L->hwork_bytes = 0;
}

void tfd_cuda_linalg_delete(tfd_cuda_stream *s, int device_ok) {
    if (s == NULL || !s->linalg_lock_ok) return;
    tfd_cuda_linalg_idle(s, device_ok);
    struct tfd_cuda_linalg *L = s->linalg;
    if (L != NULL) {
        if (device_ok) {
            /* Copies into the slots may still be in flight: they end before the slots go. */
            if (cudaStreamSynchronize(s->stream) != cudaSuccess) (void)cudaGetLastError();
            (void)cusolverDnDestroyGesvdjInfo(L->gesvdj);
            (void)cusolverDnDestroySyevjInfo(L->syevj);
            (void)cusolverDnDestroyParams(L->params);
            (void)cusolverDnDestroy(L->handle);
            for (size_t i = 0; i < L->n_slabs; i++) (void)cudaFreeHost(L->slabs[i]);
            (void)cudaGetLastError();
        }
        free(L->checks);
        free(L->free_slots);
        free(L->slabs);
        free(L);
        s->linalg = NULL;
    }
    pthread_mutex_destroy(&s->linalg_lock);
    s->linalg_lock_ok = 0;
}

/* ---- status slots and pending checks ---- */

/*
 * A free pinned slot, with room in the list for its check; NULL when the
 * pool is at its bound or memory ran out. Under the lock.
 */
static tfd_cuda_la_status *take_slot(struct tfd_cuda_linalg *L) {
    if (L->n_checks == L->cap_checks) {
        const size_t cap = L->cap_checks ? 2 * L->cap_checks : 64;
        la_check *grown = realloc(L->checks, cap * sizeof *grown);
        if (grown == NULL) return NULL;
        L->checks = grown;
        L->cap_checks = cap;
    }
    if (L->n_free == 0) {
        if (L->n_slots >= SLOTS_MAX) return NULL;
        size_t count = L->n_slots ? L->n_slots : SLOTS_FIRST;
        if (count > SLOTS_MAX - L->n_slots) count = SLOTS_MAX - L->n_slots;
        if (L->n_slabs == L->cap_slabs) {
            const size_t cap = L->cap_slabs ? 2 * L->cap_slabs : 8;
            void **grown = realloc(L->slabs, cap * sizeof *grown);
            if (grown == NULL) return NULL;
            L->slabs = grown;
            L->cap_slabs = cap;
        }
        if (L->cap_free < L->n_slots + count) {
            tfd_cuda_la_status **grown =
                realloc(L->free_slots, (L->n_slots + count) * sizeof *grown);
            if (grown == NULL) return NULL;
            L->free_slots = grown;
            L->cap_free = L->n_slots + count;
        }
        void *slab = NULL;
        if (cudaHostAlloc(&slab, count * sizeof(tfd_cuda_la_status), cudaHostAllocDefault) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return NULL;
        }
        L->slabs[L->n_slabs++] = slab;
        for (size_t i = 0; i < count; i++)
            L->free_slots[L->n_free++] = (tfd_cuda_la_status *)slab + i;
        L->n_slots += count;
    }
    return L->free_slots[--L->n_free];
}

/*
 * The typed status and message of a failed status word; inside a prepared
 * graph the message names the node first, as the CPU backend's failures are
 * named by daemon/prepared.c when its call returns.
 */
static tf_status failure_of(tf__op_kind kind, int node, const tfd_cuda_la_status *w, int64_t b,
                            char *msg, size_t msg_len) {
    const char *name = tf__op_name(kind);
    if (node >= 0 && msg_len > 0) {
        const int at = snprintf(msg, msg_len, "prepared graph node %d (%s): ", node, name);
        if (at > 0 && (size_t)at < msg_len) {
            msg += at;
            msg_len -= (size_t)at;
        }
    }
    const long long i = (long long)w->index, n = (long long)b;
    switch (w->code) {
    case TFD_CUDA_LA_NOT_FINITE:
        snprintf(msg, msg_len, "%s: matrix %lld of %lld holds nan or inf", name, i, n);
        return TF_ERR_NOT_FINITE;
    case TFD_CUDA_LA_NOT_CONVERGED:
        snprintf(msg, msg_len, "%s: matrix %lld of %lld did not converge", name, i, n);
        return TF_ERR_NOT_CONVERGED;
    case TFD_CUDA_LA_SINGULAR:
        snprintf(msg, msg_len, "%s: matrix %lld of %lld is singular", name, i, n);
        return TF_ERR_SINGULAR;
    case TFD_CUDA_LA_NOT_PD:
        snprintf(msg, msg_len, "%s: matrix %lld of %lld is not positive definite (leading minor "
                 "%d)", name, i, n, (int)w->detail);
        return TF_ERR_NOT_POSITIVE_DEFINITE;
    default:
        snprintf(msg, msg_len, "%s: matrix %lld of %lld: cuSOLVER refused its argument %d (status "
                 "%d)", name, i, n, (int)w->detail, (int)w->code);
        return TF_ERR_INTERNAL;
    }
}

tf_status tfd_cuda_linalg_failure(tfd_cuda_stream *s, uint64_t seq, int consume, uint64_t *batch,
                                  uint32_t *index, char *msg, size_t msg_len) {
    if (s == NULL || !s->linalg_lock_ok) return TF_OK;
    tf_status st = TF_OK;
    pthread_mutex_lock(&s->linalg_lock);
    struct tfd_cuda_linalg *L = s->linalg;
    if (L != NULL) {
        size_t keep = 0;
        for (size_t i = 0; i < L->n_checks; i++) {
            const la_check ck = L->checks[i];
            if (ck.seq > seq) { /* after the event: not written yet */
                L->checks[keep++] = ck;
                continue;
            }
            /* The event completed, so the copy into the slot has landed. */
            const volatile tfd_cuda_la_status *v = ck.slot;
            tfd_cuda_la_status w;
            w.code = v->code;
            w.detail = v->detail;
            w.index = v->index;
            const int failed = w.code != TFD_CUDA_LA_OK;
            if (failed && st == TF_OK) {
                st = failure_of(ck.kind, ck.node, &w, ck.b, msg, msg_len);
                *batch = ck.batch;
                *index = ck.index;
            }
            if (consume || !failed)
                recycle(L, ck.slot);
            else
                L->checks[keep++] = ck;
        }
        L->n_checks = keep;
    }
    pthread_mutex_unlock(&s->linalg_lock);
    return st;
}

/*
 * The end of every operation that can fail: the status word reduced from
 * the flags and info words, the outputs zeroed when it reports a failure,
 * and the word copied into a pinned slot with a pending check for
 * event_failure. When no slot can be had (the pool is at SLOTS_MAX, or host
 * memory or pinned memory ran out), this one operation reads its word with a
 * blocking copy (pageable memory: the copy returns once it landed, after
 * everything enqueued before it) and returns its failure itself, as the CPU
 * would; its outputs were zeroed on the device all the same.
 */
static tf_status finish(la_ctx *c, const int *flags, const int *info, int positive_code) {
    tf_status st = TF_OK;
    const tfd_linalg_op *op = c->op;
    struct tfd_cuda_linalg *L = c->L;
    tfd_cuda_stream *s = c->s;
    void *ptr[TF__LINALG_MAX_OUTPUTS];
    size_t bytes[TF__LINALG_MAX_OUTPUTS];
    for (int i = 0; i < op->n_outputs; i++) {
        ptr[i] = op->out[i].data;
        bytes[i] = (size_t)op->out[i].numel * tf_dtype_size(op->out[i].dtype);
    }
    CUDA(tfd_cuda_la_status_reduce(flags, info, op->desc.b, positive_code, L->dstatus, s->stream));
    CUDA(tfd_cuda_la_zero_failed(L->dstatus, op->n_outputs, ptr, bytes, c->sm, s->stream));
    pthread_mutex_lock(&s->linalg_lock);
    tfd_cuda_la_status *slot = take_slot(L);
    pthread_mutex_unlock(&s->linalg_lock);
    if (slot != NULL) {
        cudaError_t e = cudaMemcpyAsync(slot, L->dstatus, sizeof *slot, cudaMemcpyDeviceToHost,
                                        s->stream);
        pthread_mutex_lock(&s->linalg_lock);
        if (e != cudaSuccess) {
            recycle(L, slot);
        } else {
            la_check *ck = &L->checks[L->n_checks++]; /* take_slot made room */
            ck->slot = slot;
            ck->kind = op->kind;
            ck->batch = op->batch;
            ck->index = op->index;
            ck->node = op->node;
            ck->b = op->desc.b;
            ck->seq = ++s->check_seq;
        }
        pthread_mutex_unlock(&s->linalg_lock);
        if (e != cudaSuccess)
            st = tfd_cuda_fail(e, "cudaMemcpyAsync(slot, status, D2H)", __FILE__, __LINE__, c->msg,
                               c->msg_len);
        return st;
    }
    tfd_cuda_la_status w;
    L->blocking_reads++;
    CUDA(cudaMemcpyAsync(&w, L->dstatus, sizeof w, cudaMemcpyDeviceToHost, s->stream));
    CUDA(cudaStreamSynchronize(s->stream));
    /* Returned now, so a graph's run names the node itself (daemon/prepared.c). */
    if (w.code != TFD_CUDA_LA_OK) return failure_of(op->kind, -1, &w, op->desc.b, c->msg, c->msg_len);
done:
    return st;
}

/* ---- shared steps ---- */

/* Per-matrix flags and info words, both zeroed: flags [b], then info [b]. */
static tf_status take_words(la_ctx *c, int **flags, int **info) {
    void *p = NULL;
    const int64_t b = c->op->desc.b;
    tf_status st = take3(c, 2 * b, 1, sizeof(int), &p);
    if (st != TF_OK) return st;
    *flags = p;
    *info = (int *)p + b;
    TFD_CUDA_CHECK_RET(cudaMemsetAsync(p, 0, (size_t)(2 * b) * sizeof(int), c->s->stream), c->msg,
                       c->msg_len);
    return TF_OK;
}

/*
 * The SVD of the input (values, and the factors when `vectors`), into a
 * geometry for the phase and store kernels; flags send flagged matrices in
 * as identities.
 */
static tf_status svd_solve(la_ctx *c, const int *flags, int *info, int vectors, int full,
                           tfd_cuda_svd_geom *g) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tf__linalg *d = &c->op->desc;
    const int64_t b = d->b, m = d->m, n = d->n, k = d->k;
    const tfd_cuda_solver routine = pick(TF__OP_SVD, c->dt, b, m, n);
    const int transposed = routine == TFD_CUDA_SVD_XGESVD && m > n;
    const int64_t mx = transposed ? m : n, nx = transposed ? n : m; /* X is mx x nx, mx >= nx */
    const int jacobi = routine != TFD_CUDA_SVD_XGESVD;
    const size_t es = c->es;
    void *a = NULL, *sv = NULL, *u = NULL, *v = NULL;
    int64_t ucols = 0, vcols = 0;
    if (jacobi) {
        ucols = routine == TFD_CUDA_SVD_GESVDJ_BATCHED || full ? mx : k;
        vcols = routine == TFD_CUDA_SVD_GESVDJ_BATCHED || full ? nx : k;
    } else if (vectors) {
        ucols = full ? mx : k;
        vcols = nx; /* VT is nx x nx: k = nx */
    }
    STEP(take3(c, b, mx * nx, es, &a));
    STEP(take3(c, b, k, c->rs, &sv));
    if (ucols) STEP(take3(c, b, mx * ucols, es, &u));
    if (vcols) STEP(take3(c, b, nx * vcols, es, &v));
    CUDA(tfd_cuda_la_prepare(c->op->in[0].data, a, c->dt, b, m, n, transposed, mx * nx, flags,
                             c->sm, c->s->stream));
    const cusolverEigMode_t jobz = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
    if (routine == TFD_CUDA_SVD_GESVDJ_BATCHED) {
        const int M = (int)mx, N = (int)nx, B = (int)b;
        int lwork = 0;
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSgesvdjBatched_bufferSize(L->handle, jobz, M, N, a, M, sv, u, M, v, N,
                                                       &lwork, L->gesvdj, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDgesvdjBatched_bufferSize(L->handle, jobz, M, N, a, M, sv, u, M, v, N,
                                                       &lwork, L->gesvdj, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCgesvdjBatched_bufferSize(L->handle, jobz, M, N, a, M, sv, u, M, v, N,
                                                       &lwork, L->gesvdj, B));
            break;
        default:
            SOLVER(cusolverDnZgesvdjBatched_bufferSize(L->handle, jobz, M, N, a, M, sv, u, M, v, N,
                                                       &lwork, L->gesvdj, B));
            break;
        }
        void *w = NULL;
        STEP(device_work(c, (size_t)(lwork > 0 ? lwork : 1) * es, &w));
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSgesvdjBatched(L->handle, jobz, M, N, a, M, sv, u, M, v, N, w, lwork,
                                            info, L->gesvdj, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDgesvdjBatched(L->handle, jobz, M, N, a, M, sv, u, M, v, N, w, lwork,
                                            info, L->gesvdj, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCgesvdjBatched(L->handle, jobz, M, N, a, M, sv, u, M, v, N, w, lwork,
                                            info, L->gesvdj, B));
            break;
        default:
            SOLVER(cusolverDnZgesvdjBatched(L->handle, jobz, M, N, a, M, sv, u, M, v, N, w, lwork,
                                            info, L->gesvdj, B));
            break;
        }
        L->solver_calls++;
    } else if (routine == TFD_CUDA_SVD_GESVDJ) {
        const int M = (int)mx, N = (int)nx, econ = !full;
        int lwork = 0;
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSgesvdj_bufferSize(L->handle, jobz, econ, M, N, a, M, sv, u, M, v, N,
                                                &lwork, L->gesvdj));
            break;
        case TF_F64:
            SOLVER(cusolverDnDgesvdj_bufferSize(L->handle, jobz, econ, M, N, a, M, sv, u, M, v, N,
                                                &lwork, L->gesvdj));
            break;
        case TF_C64:
            SOLVER(cusolverDnCgesvdj_bufferSize(L->handle, jobz, econ, M, N, a, M, sv, u, M, v, N,
                                                &lwork, L->gesvdj));
            break;
        default:
            SOLVER(cusolverDnZgesvdj_bufferSize(L->handle, jobz, econ, M, N, a, M, sv, u, M, v, N,
                                                &lwork, L->gesvdj));
            break;
        }
        void *w = NULL;
        STEP(device_work(c, (size_t)(lwork > 0 ? lwork : 1) * es, &w));
        for (int64_t i = 0; i < b; i++) {
            void *ai = at(a, i * mx * nx, es), *ui = at(u, i * mx * ucols, es),
                 *vi = at(v, i * nx * vcols, es), *si = at(sv, i * k, c->rs);
            switch (c->dt) {
            case TF_F32:
                SOLVER(cusolverDnSgesvdj(L->handle, jobz, econ, M, N, ai, M, si, ui, M, vi, N, w,
                                         lwork, info + i, L->gesvdj));
                break;
            case TF_F64:
                SOLVER(cusolverDnDgesvdj(L->handle, jobz, econ, M, N, ai, M, si, ui, M, vi, N, w,
                                         lwork, info + i, L->gesvdj));
                break;
            case TF_C64:
                SOLVER(cusolverDnCgesvdj(L->handle, jobz, econ, M, N, ai, M, si, ui, M, vi, N, w,
                                         lwork, info + i, L->gesvdj));
                break;
            default:
                SOLVER(cusolverDnZgesvdj(L->handle, jobz, econ, M, N, ai, M, si, ui, M, vi, N, w,
                                         lwork, info + i, L->gesvdj));
                break;
            }
            L->solver_calls++;
        }
    } else {
        const signed char job = !vectors ? 'N' : full ? 'A' : 'S';
        size_t dbytes = 0, hbytes = 0;
        SOLVER(cusolverDnXgesvd_bufferSize(L->handle, L->params, job, job, mx, nx, c->ct, a, mx,
                                           c->rct, sv, c->ct, u, mx, c->ct, v, nx, c->ct, &dbytes,
                                           &hbytes));
        void *dw = NULL, *hw = NULL;
        STEP(workspaces(c, dbytes, hbytes, &dw, &hw));
        for (int64_t i = 0; i < b; i++) {
            SOLVER(cusolverDnXgesvd(L->handle, L->params, job, job, mx, nx, c->ct,
                                    at(a, i * mx * nx, es), mx, c->rct, at(sv, i * k, c->rs),
                                    c->ct, u ? at(u, i * mx * ucols, es) : NULL, mx, c->ct,
                                    v ? at(v, i * nx * vcols, es) : NULL, nx, c->ct, dw, dbytes,
                                    hw, hbytes, info + i));
            L->solver_calls++;
        }
    }
    memset(g, 0, sizeof *g);
    g->dtype = c->dt;
    g->b = b;
    g->m = m;
    g->n = n;
    g->k = k;
    g->transposed = transposed;
    g->u = u;
    g->ldu = mx;
    g->u_stride = mx * ucols;
    g->v = v;
    g->ldv = nx;
    g->v_stride = nx * vcols;
    g->v_is_vh = !jacobi;
    g->s = sv;
done:
    return st;
}

/*
 * getrf of A^T (the buffer as it is) into lu [b, n, n]. Per matrix
 * (Xgetrf): 64-bit pivots ipiv [b, n]. Batched (cublas<t>getrfBatched, one
 * call): 32-bit pivots ipiv32 [b, n], the pointer array of lu in (*ptrs)[0
 * .. b) with room for a second array at (*ptrs)[b .. 2b), and, with
 * want64, the pivots widened into ipiv too. getrfBatched's info words are
 * Xgetrf's: k > 0 when U(k, k) is exactly zero.
 */
static tf_status lu_factor(la_ctx *c, const int *flags, int *info, int batched, int want64,
                           void **lu, int64_t **ipiv, int **ipiv32, void ***ptrs) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const int64_t b = c->op->desc.b, n = c->op->desc.n;
    void *p = NULL;
    *ipiv = NULL;
    *ipiv32 = NULL;
    *ptrs = NULL;
    STEP(take3(c, b, n * n, c->es, lu));
    if (!batched || want64) {
        STEP(take3(c, b, n, sizeof(int64_t), &p));
        *ipiv = p;
    }
    CUDA(tfd_cuda_la_prepare(c->op->in[0].data, *lu, c->dt, b, n, n, 0, n * n, flags, c->sm,
                             c->s->stream));
    if (batched) {
        const int N = (int)n, B = (int)b;
        STEP(take3(c, b, n, sizeof(int), &p));
        *ipiv32 = p;
        STEP(pointer_arrays(c, 2, ptrs));
        void **A = *ptrs;
        CUDA(tfd_cuda_la_pointers(A, *lu, b, n * n * (int64_t)c->es, c->sm, c->s->stream));
        switch (c->dt) {
        case TF_F32:
            BLAS(cublasSgetrfBatched(c->s->blas, N, (float *const *)A, N, *ipiv32, info, B));
            break;
        case TF_F64:
            BLAS(cublasDgetrfBatched(c->s->blas, N, (double *const *)A, N, *ipiv32, info, B));
            break;
        case TF_C64:
            BLAS(cublasCgetrfBatched(c->s->blas, N, (cuComplex *const *)A, N, *ipiv32, info, B));
            break;
        default:
            BLAS(cublasZgetrfBatched(c->s->blas, N, (cuDoubleComplex *const *)A, N, *ipiv32, info,
                                     B));
            break;
        }
        L->solver_calls++;
        if (want64) CUDA(tfd_cuda_la_widen_pivots(*ipiv32, *ipiv, b * n, c->sm, c->s->stream));
        return TF_OK;
    }
    size_t dbytes = 0, hbytes = 0;
    SOLVER(cusolverDnXgetrf_bufferSize(L->handle, L->params, n, n, c->ct, *lu, n, c->ct, &dbytes,
                                       &hbytes));
    void *dw = NULL, *hw = NULL;
    STEP(workspaces(c, dbytes, hbytes, &dw, &hw));
    for (int64_t i = 0; i < b; i++) {
        SOLVER(cusolverDnXgetrf(L->handle, L->params, n, n, c->ct, at(*lu, i * n * n, c->es), n,
                                *ipiv + i * n, c->ct, dw, dbytes, hw, hbytes, info + i));
        L->solver_calls++;
    }
done:
    return st;
}

/* ---- the kinds ---- */

static tf_status run_svd(la_ctx *c) {
    tf_status st = TF_OK;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int uv = d->compute_uv, full = d->full && uv;
    const int64_t b = d->b, m = d->m, n = d->n, rank = d->rank;
    int *flags = NULL, *info = NULL;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, m, n, TFD_CUDA_LA_ALL, flags, c->sm,
                           c->s->stream));
    tfd_cuda_svd_geom g;
    STEP(svd_solve(c, flags, info, uv, full, &g));
    int o = 0;
    void *U = uv ? op->out[o++].data : NULL;
    void *S = op->out[o++].data;
    void *Vh = uv ? op->out[o++].data : NULL;
    double *report = d->truncate ? op->out[o++].data : NULL;
    g.r1 = full ? m : rank;
    g.r2 = full ? n : rank;
    void *pu = NULL, *pv = NULL, *p = NULL;
    int64_t *pui = NULL, *pvi = NULL;
    if (uv) {
        STEP(take3(c, b, g.r1, c->es, &pu));
        STEP(take3(c, b, g.r2, c->es, &pv));
        STEP(take3(c, b, g.r1, sizeof(int64_t), &p));
        pui = p;
        STEP(take3(c, b, g.r2, sizeof(int64_t), &p));
        pvi = p;
        CUDA(tfd_cuda_la_svd_phase(&g, pu, pv, pui, pvi, c->sm, c->s->stream));
    }
    int64_t *kept = NULL;
    double *factor = NULL;
    if (d->truncate) {
        STEP(take3(c, b, 1, sizeof(int64_t), &p));
        kept = p;
        STEP(take3(c, b, 1, sizeof(double), &p));
        factor = p;
        CUDA(tfd_cuda_la_truncate(g.s, c->rt, d->k, d->k, b, rank, &d->trunc,
                                  d->trunc.renormalize, kept, factor, report, c->s->stream));
    }
    CUDA(tfd_cuda_la_svd_store(&g, pu, pv, pui, pvi, kept, factor,
                               d->truncate ? (int)d->trunc.absorb : TF__ABSORB_NONE, rank, S, U,
                               Vh, c->sm, c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_NOT_CONVERGED);
done:
    return st;
}

/*
 * QR of a batch of small tall matrices in one call: cublas<t>geqrfBatched
 * (its info is a host word for refused arguments only; QR has no numerical
 * failure), the gauge and R as for Xgeqrf, and Q formed from the reflectors
 * by a kernel straight into the output (cuBLAS and cuSOLVER have no batched
 * orgqr; a loop of orgqr would give back the launches the batch saved, and
 * forming Q by batched GEMMs would take one pair of launches per reflector).
 */
static tf_status run_qr_batched(la_ctx *c) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int uv = d->compute_uv, full = d->full && uv;
    const int64_t b = d->b, m = d->m, n = d->n, k = d->k; /* m >= n: k = n */
    const int64_t qcols = full ? m : k, rrows = uv ? qcols : k, stride = m * n;
    const size_t es = c->es;
    const int M = (int)m, N = (int)n, B = (int)b;
    int *flags = NULL, *info = NULL;
    void *a = NULL, *tau = NULL, *ph = NULL;
    void **ptrs = NULL;
    int hinfo = 0;
    STEP(take_words(c, &flags, &info)); /* info stays zero: flags alone can fail a QR */
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, m, n, TFD_CUDA_LA_ALL, flags, c->sm,
                           c->s->stream));
    STEP(take3(c, b, stride, es, &a));
    STEP(take3(c, b, k, es, &tau));
    STEP(take3(c, b, k, es, &ph));
    STEP(pointer_arrays(c, 2, &ptrs));
    CUDA(tfd_cuda_la_prepare(op->in[0].data, a, c->dt, b, m, n, 1, stride, flags, c->sm,
                             c->s->stream));
    void **A = ptrs, **T = ptrs + b;
    CUDA(tfd_cuda_la_pointers(A, a, b, stride * (int64_t)es, c->sm, c->s->stream));
    CUDA(tfd_cuda_la_pointers(T, tau, b, k * (int64_t)es, c->sm, c->s->stream));
    switch (c->dt) {
    case TF_F32:
        BLAS(cublasSgeqrfBatched(c->s->blas, M, N, (float *const *)A, M, (float *const *)T, &hinfo,
                                 B));
        break;
    case TF_F64:
        BLAS(cublasDgeqrfBatched(c->s->blas, M, N, (double *const *)A, M, (double *const *)T,
                                 &hinfo, B));
        break;
    case TF_C64:
        BLAS(cublasCgeqrfBatched(c->s->blas, M, N, (cuComplex *const *)A, M,
                                 (cuComplex *const *)T, &hinfo, B));
        break;
    default:
        BLAS(cublasZgeqrfBatched(c->s->blas, M, N, (cuDoubleComplex *const *)A, M,
                                 (cuDoubleComplex *const *)T, &hinfo, B));
        break;
    }
    L->solver_calls++;
    STEP(host_info(c, "geqrfBatched", hinfo));
    CUDA(tfd_cuda_la_qr_phase(a, c->dt, b, m, k, stride, ph, c->sm, c->s->stream));
    CUDA(tfd_cuda_la_qr_store_r(a, ph, c->dt, b, m, n, k, rrows, stride, op->out[uv ? 1 : 0].data,
                                c->sm, c->s->stream));
    if (uv)
        CUDA(tfd_cuda_la_qr_form_q(a, tau, ph, c->dt, b, m, k, qcols, stride, op->out[0].data,
                                   c->sm, c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_OK);
done:
    return st;
}

static tf_status run_qr(la_ctx *c) {
    if (pick_factor(TF__OP_QR, c->dt, c->op->desc.b, c->op->desc.m, c->op->desc.n) ==
        TFD_CUDA_QR_GEQRF_BATCHED)
        return run_qr_batched(c);
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int uv = d->compute_uv, full = d->full && uv;
    const int64_t b = d->b, m = d->m, n = d->n, k = d->k;
    const int64_t qcols = full ? m : k, rrows = uv ? qcols : k;
    /* A complete Q of a tall matrix needs m x m: geqrf's n columns, then orgqr's m. */
    const int64_t cols = full && m > n ? m : n, stride = m * cols;
    const size_t es = c->es;
    if (uv && (m > INT_MAX || qcols > INT_MAX)) {
        snprintf(c->msg, c->msg_len, "cuda: qr of %lld x %lld matrices: orgqr takes int sizes",
                 (long long)m, (long long)n);
        return TF_ERR_UNSUPPORTED;
    }
    int *flags = NULL, *info = NULL;
    void *a = NULL, *tau = NULL, *ph = NULL;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, m, n, TFD_CUDA_LA_ALL, flags, c->sm,
                           c->s->stream));
    STEP(take3(c, b, stride, es, &a));
    STEP(take3(c, b, k, es, &tau));
    STEP(take3(c, b, k, es, &ph));
    if (cols > n) /* orgqr makes the extra columns; none of them starts as stray bytes */
        CUDA(cudaMemsetAsync(a, 0, bytes3(b, stride, es), c->s->stream));
    CUDA(tfd_cuda_la_prepare(op->in[0].data, a, c->dt, b, m, n, 1, stride, flags, c->sm,
                             c->s->stream));
    size_t dbytes = 0, hbytes = 0;
    SOLVER(cusolverDnXgeqrf_bufferSize(L->handle, L->params, m, n, c->ct, a, m, c->ct, tau, c->ct,
                                       &dbytes, &hbytes));
    void *dw = NULL, *hw = NULL;
    STEP(workspaces(c, dbytes, hbytes, &dw, &hw));
    for (int64_t i = 0; i < b; i++) {
        SOLVER(cusolverDnXgeqrf(L->handle, L->params, m, n, c->ct, at(a, i * stride, es), m, c->ct,
                                at(tau, i * k, es), c->ct, dw, dbytes, hw, hbytes, info + i));
        L->solver_calls++;
    }
    CUDA(tfd_cuda_la_qr_phase(a, c->dt, b, m, k, stride, ph, c->sm, c->s->stream));
    CUDA(tfd_cuda_la_qr_store_r(a, ph, c->dt, b, m, n, k, rrows, stride, op->out[uv ? 1 : 0].data,
                                c->sm, c->s->stream));
    if (uv) {
        const int M = (int)m, N = (int)qcols, K = (int)k;
        int lwork = 0;
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSorgqr_bufferSize(L->handle, M, N, K, a, M, tau, &lwork));
            break;
        case TF_F64:
            SOLVER(cusolverDnDorgqr_bufferSize(L->handle, M, N, K, a, M, tau, &lwork));
            break;
        case TF_C64:
            SOLVER(cusolverDnCungqr_bufferSize(L->handle, M, N, K, a, M, tau, &lwork));
            break;
        default:
            SOLVER(cusolverDnZungqr_bufferSize(L->handle, M, N, K, a, M, tau, &lwork));
            break;
        }
        void *w = NULL;
        STEP(device_work(c, (size_t)(lwork > 0 ? lwork : 1) * es, &w));
        for (int64_t i = 0; i < b; i++) {
            void *ai = at(a, i * stride, es), *ti = at(tau, i * k, es);
            switch (c->dt) {
            case TF_F32:
                SOLVER(cusolverDnSorgqr(L->handle, M, N, K, ai, M, ti, w, lwork, info + i));
                break;
            case TF_F64:
                SOLVER(cusolverDnDorgqr(L->handle, M, N, K, ai, M, ti, w, lwork, info + i));
                break;
            case TF_C64:
                SOLVER(cusolverDnCungqr(L->handle, M, N, K, ai, M, ti, w, lwork, info + i));
                break;
            default:
                SOLVER(cusolverDnZungqr(L->handle, M, N, K, ai, M, ti, w, lwork, info + i));
                break;
            }
            L->solver_calls++;
        }
        CUDA(tfd_cuda_la_qr_store_q(a, ph, c->dt, b, m, qcols, k, stride, op->out[0].data, c->sm,
                                    c->s->stream));
    }
    st = finish(c, flags, info, TFD_CUDA_LA_OK);
done:
    return st;
}

static tf_status run_eigh(la_ctx *c) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int uv = d->compute_uv;
    const int64_t b = d->b, n = d->n, rank = d->rank;
    const size_t es = c->es;
    const tfd_cuda_solver routine = pick(TF__OP_EIGH, c->dt, b, n, n);
    /* A's lower triangle (row-major) is the upper one of X = A^T (column-major). */
    const cublasFillMode_t uplo = d->upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
    const cusolverEigMode_t jobz = uv ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
    int *flags = NULL, *info = NULL;
    void *a = NULL, *w = NULL, *ph = NULL, *p = NULL;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, n, n,
                           d->upper ? TFD_CUDA_LA_UPPER : TFD_CUDA_LA_LOWER, flags, c->sm,
                           c->s->stream));
    STEP(take3(c, b, n * n, es, &a));
    STEP(take3(c, b, n, c->rs, &w));
    CUDA(tfd_cuda_la_prepare(op->in[0].data, a, c->dt, b, n, n, 0, n * n, flags, c->sm,
                             c->s->stream));
    if (routine == TFD_CUDA_EIGH_SYEVJ_BATCHED) {
        const int N = (int)n, B = (int)b;
        int lwork = 0;
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSsyevjBatched_bufferSize(L->handle, jobz, uplo, N, a, N, w, &lwork,
                                                      L->syevj, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDsyevjBatched_bufferSize(L->handle, jobz, uplo, N, a, N, w, &lwork,
                                                      L->syevj, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCheevjBatched_bufferSize(L->handle, jobz, uplo, N, a, N, w, &lwork,
                                                      L->syevj, B));
            break;
        default:
            SOLVER(cusolverDnZheevjBatched_bufferSize(L->handle, jobz, uplo, N, a, N, w, &lwork,
                                                      L->syevj, B));
            break;
        }
        void *work = NULL;
        STEP(device_work(c, (size_t)(lwork > 0 ? lwork : 1) * es, &work));
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSsyevjBatched(L->handle, jobz, uplo, N, a, N, w, work, lwork, info,
                                           L->syevj, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDsyevjBatched(L->handle, jobz, uplo, N, a, N, w, work, lwork, info,
                                           L->syevj, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCheevjBatched(L->handle, jobz, uplo, N, a, N, w, work, lwork, info,
                                           L->syevj, B));
            break;
        default:
            SOLVER(cusolverDnZheevjBatched(L->handle, jobz, uplo, N, a, N, w, work, lwork, info,
                                           L->syevj, B));
            break;
        }
        L->solver_calls++;
    } else {
        size_t dbytes = 0, hbytes = 0;
        SOLVER(cusolverDnXsyevd_bufferSize(L->handle, L->params, jobz, uplo, n, c->ct, a, n,
                                           c->rct, w, c->ct, &dbytes, &hbytes));
        void *dw = NULL, *hw = NULL;
        STEP(workspaces(c, dbytes, hbytes, &dw, &hw));
        for (int64_t i = 0; i < b; i++) {
            SOLVER(cusolverDnXsyevd(L->handle, L->params, jobz, uplo, n, c->ct,
                                    at(a, i * n * n, es), n, c->rct, at(w, i * n, c->rs), c->ct,
                                    dw, dbytes, hw, hbytes, info + i));
            L->solver_calls++;
        }
    }
    int o = 0;
    void *W = op->out[o++].data;
    void *V = uv ? op->out[o++].data : NULL;
    double *report = d->truncate ? op->out[o++].data : NULL;
    int64_t *piv = NULL;
    if (uv) {
        STEP(take3(c, b, n, es, &ph));
        STEP(take3(c, b, n, sizeof(int64_t), &p));
        piv = p;
        CUDA(tfd_cuda_la_eigh_phase(a, c->dt, b, n, ph, piv, c->sm, c->s->stream));
    }
    int32_t *perm = NULL;
    int64_t *kept = NULL;
    if (d->truncate) {
        void *absw = NULL;
        STEP(take3(c, b, n, sizeof(int32_t), &p));
        perm = p;
        STEP(take3(c, b, n, c->rs, &absw));
        STEP(take3(c, b, 1, sizeof(int64_t), &p));
        kept = p;
        void *factor = NULL;
        STEP(take3(c, b, 1, sizeof(double), &factor));
        CUDA(tfd_cuda_la_eigh_order(w, c->rt, b, n, perm, absw, c->s->stream));
        CUDA(tfd_cuda_la_truncate(absw, c->rt, n, n, b, rank, &d->trunc, 0, kept, factor, report,
                                  c->s->stream));
    }
    CUDA(tfd_cuda_la_eigh_store(w, a, ph, piv, perm, kept, c->dt, b, n, rank, W, V, c->sm,
                                c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_NOT_CONVERGED);
done:
    return st;
}

static tf_status run_cholesky(la_ctx *c) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int64_t b = d->b, n = d->n;
    void *out = op->out[0].data;
    const cublasFillMode_t uplo = d->upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;
    int *flags = NULL, *info = NULL;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, n, n,
                           d->upper ? TFD_CUDA_LA_UPPER : TFD_CUDA_LA_LOWER, flags, c->sm,
                           c->s->stream));
    CUDA(tfd_cuda_la_prepare(op->in[0].data, out, c->dt, b, n, n, 0, n * n, flags, c->sm,
                             c->s->stream));
    if (pick_factor(TF__OP_CHOLESKY, c->dt, b, n, n) == TFD_CUDA_CHOL_POTRF_BATCHED) {
        /*
         * potrfBatched, one call: the same factor and info words (the first
         * leading minor that is not positive definite) as Xpotrf; it may use
         * the other triangle as workspace, which is zeroed below anyway.
         */
        const int N = (int)n, B = (int)b;
        void **ptrs = NULL;
        STEP(pointer_arrays(c, 1, &ptrs));
        CUDA(tfd_cuda_la_pointers(ptrs, out, b, n * n * (int64_t)c->es, c->sm, c->s->stream));
        switch (c->dt) {
        case TF_F32:
            SOLVER(cusolverDnSpotrfBatched(L->handle, uplo, N, (float **)ptrs, N, info, B));
            break;
        case TF_F64:
            SOLVER(cusolverDnDpotrfBatched(L->handle, uplo, N, (double **)ptrs, N, info, B));
            break;
        case TF_C64:
            SOLVER(cusolverDnCpotrfBatched(L->handle, uplo, N, (cuComplex **)ptrs, N, info, B));
            break;
        default:
            SOLVER(cusolverDnZpotrfBatched(L->handle, uplo, N, (cuDoubleComplex **)ptrs, N, info,
                                           B));
            break;
        }
        L->solver_calls++;
    } else {
        size_t dbytes = 0, hbytes = 0;
        SOLVER(cusolverDnXpotrf_bufferSize(L->handle, L->params, uplo, n, c->ct, out, n, c->ct,
                                           &dbytes, &hbytes));
        void *dw = NULL, *hw = NULL;
        STEP(workspaces(c, dbytes, hbytes, &dw, &hw));
        for (int64_t i = 0; i < b; i++) {
            SOLVER(cusolverDnXpotrf(L->handle, L->params, uplo, n, c->ct,
                                    at(out, i * n * n, c->es), n, c->ct, dw, dbytes, hw, hbytes,
                                    info + i));
            L->solver_calls++;
        }
    }
    CUDA(tfd_cuda_la_triangle(out, c->dt, b, n, !d->upper, c->sm, c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_NOT_PD);
done:
    return st;
}

/* solve (A X = B) and inv (A X = I), from getrf of A^T. */
static tf_status run_solve_inv(la_ctx *c) {
    tf_status st = TF_OK;
    struct tfd_cuda_linalg *L = c->L;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int inv = op->kind == TF__OP_INV;
    const int64_t b = d->b, n = d->n, nrhs = inv ? n : d->nrhs;
    const size_t es = c->es;
    void *X = op->out[0].data;
    int *flags = NULL, *info = NULL, *info_rs = NULL, *ipiv32 = NULL;
    void *lu = NULL, *bs = NULL, *p = NULL;
    void **ptrs = NULL;
    int64_t *ipiv = NULL;
    const int batched = pick_factor(op->kind, c->dt, b, n, n) == TFD_CUDA_LU_GETRF_BATCHED &&
                        nrhs <= INT_MAX;
    STEP(take_words(c, &flags, &info));
    STEP(take3(c, b, 1, sizeof(int), &p));
    info_rs = p; /* getrs reports only refused arguments, which its status reports too */
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, n, n, TFD_CUDA_LA_ALL, flags, c->sm,
                           c->s->stream));
    if (!inv)
        CUDA(tfd_cuda_la_check(op->in[1].data, c->dt, b, n, nrhs, TFD_CUDA_LA_ALL, flags, c->sm,
                               c->s->stream));
    STEP(lu_factor(c, flags, info, batched, 0, &lu, &ipiv, &ipiv32, &ptrs));
    cublasOperation_t trans = CUBLAS_OP_T; /* A = (A^T)^T, for real and complex alike */
    void *rhs = X;
    if (inv) {
        /* X (A^T) = I column-major: the inverse of A^T, which read row-major is A's. */
        trans = CUBLAS_OP_N;
        CUDA(tfd_cuda_la_identity(X, c->dt, b, n, c->sm, c->s->stream));
    } else if (nrhs == 1) {
        CUDA(cudaMemcpyAsync(X, op->in[1].data, (size_t)(b * n) * es, cudaMemcpyDeviceToDevice,
                             c->s->stream));
    } else {
        STEP(take3(c, b, n * nrhs, es, &bs));
        CUDA(tfd_cuda_la_prepare(op->in[1].data, bs, c->dt, b, n, nrhs, 1, n * nrhs, NULL, c->sm,
                                 c->s->stream));
        rhs = bs;
    }
    if (batched) {
        /*
         * getrsBatched (inv: on the identity, as per matrix, rather than
         * getriBatched: one routine for both); its info is a host word that
         * reports refused arguments only.
         */
        const int N = (int)n, NRHS = (int)nrhs, B = (int)b;
        void **A = ptrs, **R = ptrs + b;
        int hinfo = 0;
        CUDA(tfd_cuda_la_pointers(R, rhs, b, n * nrhs * (int64_t)es, c->sm, c->s->stream));
        switch (c->dt) {
        case TF_F32:
            BLAS(cublasSgetrsBatched(c->s->blas, trans, N, NRHS, (const float *const *)A, N,
                                     ipiv32, (float *const *)R, N, &hinfo, B));
            break;
        case TF_F64:
            BLAS(cublasDgetrsBatched(c->s->blas, trans, N, NRHS, (const double *const *)A, N,
                                     ipiv32, (double *const *)R, N, &hinfo, B));
            break;
        case TF_C64:
            BLAS(cublasCgetrsBatched(c->s->blas, trans, N, NRHS, (const cuComplex *const *)A, N,
                                     ipiv32, (cuComplex *const *)R, N, &hinfo, B));
            break;
        default:
            BLAS(cublasZgetrsBatched(c->s->blas, trans, N, NRHS,
                                     (const cuDoubleComplex *const *)A, N, ipiv32,
                                     (cuDoubleComplex *const *)R, N, &hinfo, B));
            break;
        }
        L->solver_calls++;
        STEP(host_info(c, "getrsBatched", hinfo));
    } else {
        for (int64_t i = 0; i < b; i++) {
            SOLVER(cusolverDnXgetrs(L->handle, L->params, trans, n, nrhs, c->ct,
                                    at(lu, i * n * n, es), n, ipiv + i * n, c->ct,
                                    at(rhs, i * n * nrhs, es), n, info_rs + i));
            L->solver_calls++;
        }
    }
    if (rhs == bs && bs != NULL) /* column-major n x nrhs back to row-major */
        CUDA(tfd_cuda_la_prepare(bs, X, c->dt, b, nrhs, n, 1, n * nrhs, NULL, c->sm,
                                 c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_SINGULAR);
done:
    return st;
}

static tf_status run_det(la_ctx *c) {
    tf_status st = TF_OK;
    const tfd_linalg_op *op = c->op;
    const int64_t b = op->desc.b, n = op->desc.n;
    int *flags = NULL, *info = NULL, *ipiv32 = NULL;
    void *lu = NULL;
    void **ptrs = NULL;
    int64_t *ipiv = NULL;
    const int batched = pick_factor(op->kind, c->dt, b, n, n) == TFD_CUDA_LU_GETRF_BATCHED;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(op->in[0].data, c->dt, b, n, n, TFD_CUDA_LA_ALL, flags, c->sm,
                           c->s->stream));
    STEP(lu_factor(c, flags, info, batched, 1, &lu, &ipiv, &ipiv32, &ptrs));
    if (op->kind == TF__OP_DET)
        CUDA(tfd_cuda_la_det(lu, ipiv, c->dt, b, n, op->out[0].data, NULL, NULL, c->s->stream));
    else
        CUDA(tfd_cuda_la_det(lu, ipiv, c->dt, b, n, NULL, op->out[0].data, op->out[1].data,
                             c->s->stream));
    st = finish(c, flags, info, TFD_CUDA_LA_OK); /* a singular matrix is no error here */
done:
    return st;
}

/* A vector norm through the reducer, with its scratch. */
static tf_status norm_vector(la_ctx *c, const void *x, tf_dtype dt, int64_t nout, int64_t len,
                             double p, void *out, tf_dtype out_dt) {
    tf_status st = TF_OK;
    void *scratch = NULL;
    const size_t bytes = tfd_cuda_la_norm_scratch(nout, len);
    if (bytes) STEP(take(c, bytes, &scratch));
    CUDA(tfd_cuda_la_norm_vector(x, dt, nout, len, p, out, out_dt, scratch, c->sm, c->s->stream));
done:
    return st;
}

static tf_status run_norm(la_ctx *c) {
    tf_status st = TF_OK;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int64_t b = d->b, m = d->m, n = d->n;
    const double p = d->norm_p;
    const void *in = op->in[0].data;
    void *out = op->out[0].data, *sums = NULL;
    switch (d->norm_kind) {
    case TF__NORM_VECTOR: return norm_vector(c, in, c->dt, b, n, p, out, c->rt);
    case TF__NORM_FRO: return norm_vector(c, in, c->dt, b, m * n, 2.0, out, c->rt);
    case TF__NORM_MATRIX:
        if (fabs(p) == 1.0) { /* the largest (smallest) column sum */
            STEP(take3(c, b, n, sizeof(double), &sums));
            CUDA(tfd_cuda_la_column_sums(in, c->dt, b, m, n, sums, c->sm, c->s->stream));
            return norm_vector(c, sums, TF_F64, b, n, p > 0 ? INFINITY : -INFINITY, out, c->rt);
        }
        if (isinf(p)) { /* the largest (smallest) row sum */
            STEP(take3(c, b, m, sizeof(double), &sums));
            STEP(norm_vector(c, in, c->dt, b * m, n, 1.0, sums, TF_F64));
            return norm_vector(c, sums, TF_F64, b, m, p, out, c->rt);
        }
        break;
    case TF__NORM_NUC: break;
    }
    /* NUC and the 2-norms: singular values; nan and inf propagate instead of failing. */
    int *flags = NULL, *info = NULL;
    STEP(take_words(c, &flags, &info));
    CUDA(tfd_cuda_la_check(in, c->dt, b, m, n, TFD_CUDA_LA_ALL, flags, c->sm, c->s->stream));
    tfd_cuda_svd_geom g;
    STEP(svd_solve(c, flags, info, 0, 0, &g));
    CUDA(tfd_cuda_la_norm_sv(g.s, c->rt, b, d->k, d->norm_kind, p, flags, out, c->s->stream));
    st = finish(c, NULL, info, TFD_CUDA_LA_NOT_CONVERGED);
done:
    return st;
}

static tf_status run_diagonal(la_ctx *c) {
    tf_status st = TF_OK;
    const tfd_linalg_op *op = c->op;
    const tf__linalg *d = &op->desc;
    const int64_t i0 = d->offset < 0 ? -d->offset : 0, j0 = d->offset > 0 ? d->offset : 0;
    CUDA(tfd_cuda_la_diagonal(op->in[0].data, c->dt, d->b, d->m, d->n, i0, j0, d->k,
                              op->kind == TF__OP_TRACE, op->out[0].data, c->sm, c->s->stream));
done:
    return st;
}

/* ---- the entry ---- */

static int served(tf_dtype d) { return d == TF_F32 || d == TF_F64 || d == TF_C64 || d == TF_C128; }

/* The element counts and dtypes the outputs of op must have, in wire order; returns how many. */
static int expected_outputs(const tfd_linalg_op *op, int64_t *numel, tf_dtype *dt) {
    const tf__linalg *d = &op->desc;
    const tf_dtype t = op->in[0].dtype, r = real_of(t);
    const int64_t b = d->b, m = d->m, n = d->n, k = d->k, rank = d->rank;
    int o = 0;
#define OUT(count, type) (numel[o] = (count), dt[o++] = (type))
    switch (op->kind) {
    case TF__OP_SVD:
        if (d->compute_uv) OUT(b * m * (d->full ? m : rank), t);
        OUT(b * rank, r);
        if (d->compute_uv) OUT(b * (d->full ? n : rank) * n, t);
        if (d->truncate) OUT(b * TF__REPORT_ENTRIES, TF_F64);
        break;
    case TF__OP_QR: {
        const int64_t q = d->full && d->compute_uv ? m : k;
        if (d->compute_uv) OUT(b * m * q, t);
        OUT(b * (d->compute_uv ? q : k) * n, t);
        break;
    }
    case TF__OP_EIGH:
        OUT(b * rank, r);
        if (d->compute_uv) OUT(b * n * rank, t);
        if (d->truncate) OUT(b * TF__REPORT_ENTRIES, TF_F64);
        break;
    case TF__OP_CHOLESKY:
    case TF__OP_INV: OUT(b * n * n, t); break;
    case TF__OP_SOLVE: OUT(b * n * d->nrhs, t); break;
    case TF__OP_DET:
    case TF__OP_TRACE:
    case TF__OP_NORM: OUT(b, op->kind == TF__OP_NORM ? r : t); break;
    case TF__OP_SLOGDET:
        OUT(b, t);
        OUT(b, r);
        break;
    case TF__OP_DIAGONAL: OUT(b * k, t); break;
    default: break;
    }
#undef OUT
    return o;
}

/* Checks the operation against its descriptor before any kernel indexes memory with it. */
static tf_status check_op(const tfd_linalg_op *op, char *msg, size_t msg_len) {
    const tf__linalg *d = &op->desc;
    const char *name = tf__op_name(op->kind);
    const tf_dtype dt = op->in[0].dtype;
    if (!tf__is_linalg(op->kind)) {
        snprintf(msg, msg_len, "cuda: operation kind %d is not a linear-algebra kind",
                 (int)op->kind);
        return TF_ERR_INTERNAL;
    }
    if (!served(dt)) {
        snprintf(msg, msg_len, "cuda: %s is not served for dtype %s (%d)", name,
                 tf_dtype_name(dt), (int)dt);
        return TF_ERR_DTYPE;
    }
    const int arity = op->kind == TF__OP_SOLVE ? 2 : 1;
    if (op->n_inputs != arity || d->b < 1 || d->m < 1 || d->n < 1 || d->k < 1 ||
        d->k > (d->m < d->n ? d->m : d->n) || op->in[0].numel != d->b * d->m * d->n) {
        snprintf(msg, msg_len, "cuda: %s descriptor is inconsistent: %d inputs, b %lld, m %lld, "
                 "n %lld, k %lld, %lld input elements", name, op->n_inputs, (long long)d->b,
                 (long long)d->m, (long long)d->n, (long long)d->k, (long long)op->in[0].numel);
        return TF_ERR_INTERNAL;
    }
    const int square = op->kind != TF__OP_SVD && op->kind != TF__OP_QR &&
                       op->kind != TF__OP_NORM && op->kind != TF__OP_TRACE &&
                       op->kind != TF__OP_DIAGONAL;
    if (square && d->m != d->n) {
        snprintf(msg, msg_len, "cuda: %s of %lld x %lld matrices: square ones expected", name,
                 (long long)d->m, (long long)d->n);
        return TF_ERR_SHAPE;
    }
    if ((op->kind == TF__OP_SVD || op->kind == TF__OP_EIGH) &&
        (d->rank < 1 || d->rank > (op->kind == TF__OP_EIGH ? d->n : d->k) ||
         (d->full && (d->truncate || d->rank != d->k)))) {
        snprintf(msg, msg_len, "cuda: %s descriptor is inconsistent: rank %lld", name,
                 (long long)d->rank);
        return TF_ERR_INTERNAL;
    }
    if (op->kind == TF__OP_SOLVE &&
        (op->in[1].dtype != dt || d->nrhs < 1 || op->in[1].numel != d->b * d->n * d->nrhs)) {
        snprintf(msg, msg_len, "cuda: solve's B does not fit its descriptor (%lld elements for "
                 "%lld right-hand sides)", (long long)op->in[1].numel, (long long)d->nrhs);
        return TF_ERR_INTERNAL;
    }
    for (int i = 0; i < op->n_inputs; i++)
        if (op->in[i].data == NULL || (uintptr_t)op->in[i].data % tf_dtype_size(dt) != 0) {
            snprintf(msg, msg_len, "cuda: %s input %d has no device memory or a misaligned "
                     "pointer", name, i);
            return TF_ERR_INTERNAL;
        }
    int64_t numel[TF__LINALG_MAX_OUTPUTS];
    tf_dtype types[TF__LINALG_MAX_OUTPUTS];
    const int n_out = expected_outputs(op, numel, types);
    if (op->n_outputs != n_out || n_out < 1 || n_out > TF__LINALG_MAX_OUTPUTS) {
        snprintf(msg, msg_len, "cuda: %s has %d outputs, its descriptor makes %d", name,
                 op->n_outputs, n_out);
        return TF_ERR_INTERNAL;
    }
    for (int i = 0; i < n_out; i++) {
        const tfd_tensor_view *v = &op->out[i];
        if (v->dtype != types[i] || v->numel != numel[i] || v->data == NULL ||
            (uintptr_t)v->data % tf_dtype_size(v->dtype) != 0) {
            snprintf(msg, msg_len, "cuda: %s output %d is %s with %lld elements at %p: %s with "
                     "%lld expected", name, i, tf_dtype_name(v->dtype), (long long)v->numel,
                     v->data, tf_dtype_name(types[i]), (long long)numel[i]);
            return TF_ERR_INTERNAL;
        }
    }
    return TF_OK;
}

tf_status tfd_cuda_linalg(tfd_cuda_stream *s, int sm_count, const tfd_linalg_op *op, char *msg,
                          size_t msg_len) {
    if (s == NULL || op == NULL) {
        snprintf(msg, msg_len, "cuda: linalg without a %s", s == NULL ? "stream" : "operation");
        return TF_ERR_INTERNAL;
    }
    tf_status st = check_op(op, msg, msg_len);
    if (st != TF_OK) return st;
    if (s->capture != NULL) {
        snprintf(msg, msg_len, "cuda: %s cannot be captured into a graph",
                 tf__op_name(op->kind));
        return TF_ERR_UNSUPPORTED;
    }
    la_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.sm = sm_count;
    c.op = op;
    c.dt = op->in[0].dtype;
    c.rt = real_of(c.dt);
    c.es = tf_dtype_size(c.dt);
    c.rs = tf_dtype_size(c.rt);
    c.ct = cuda_type(c.dt);
    c.rct = cuda_type(c.rt);
    c.msg = msg;
    c.msg_len = msg_len;
    /* Norms, traces and diagonals need no solver. */
    const int solver = op->kind != TF__OP_TRACE && op->kind != TF__OP_DIAGONAL &&
                       !(op->kind == TF__OP_NORM && op->desc.norm_kind != TF__NORM_NUC &&
                         !(op->desc.norm_kind == TF__NORM_MATRIX && fabs(op->desc.norm_p) == 2));
    if (solver && (st = state_of(s, &c.L, msg, msg_len)) != TF_OK) return st;
    switch (op->kind) {
    case TF__OP_SVD: st = run_svd(&c); break;
    case TF__OP_QR: st = run_qr(&c); break;
    case TF__OP_EIGH: st = run_eigh(&c); break;
    case TF__OP_CHOLESKY: st = run_cholesky(&c); break;
    case TF__OP_SOLVE:
    case TF__OP_INV: st = run_solve_inv(&c); break;
    case TF__OP_DET:
    case TF__OP_SLOGDET: st = run_det(&c); break;
    case TF__OP_NORM: st = run_norm(&c); break;
    case TF__OP_TRACE:
    case TF__OP_DIAGONAL: st = run_diagonal(&c); break;
    default:
        snprintf(msg, msg_len, "cuda: %s is not a linear-algebra kind", tf__op_name(op->kind));
        st = TF_ERR_INTERNAL;
        break;
    }
    /* Stream-ordered: the blocks go back after the launches that use them. */
    release_scratch(&c);
    return st;
}
