/*
 * The CUDA backend's per-stream block cache: device memory for tensors
 * without a cudaMallocAsync/cudaFreeAsync pair per operation.
 *
 * Requests are rounded up to a size class from 256 B to 64 MiB: powers of
 * two up to 64 KiB, then four classes per doubling, so a large block wastes
 * at most a quarter of its request (larger requests bypass the cache and go
 * straight to the device pool, at their exact size). Each
 * stream keeps a stack of free blocks per class. Classes up to 64 KiB are
 * carved from 4 MiB slabs that the stream bump-allocates (one cudaMallocAsync
 * per slab, not per tensor); larger classes are single cudaMallocAsync blocks
 * of the class size, and at most 512 MiB of them are kept per stream (above
 * that a freed block goes back to the pool). alloc pops a block of its class,
 * else carves one, else allocates; free pushes the block back.
 *
 * Why handing a freed block to the next alloc of the same stream is safe,
 * although alloc runs on the loop thread at validation, ahead of execution:
 * free is called by the worker that executes the stream's FREE item, which
 * the executor runs only after every earlier item of that stream has been
 * enqueued on the same CUDA stream, in FIFO order. So when a block is pushed,
 * every device use of its old contents is already on the CUDA stream; the
 * loop thread can only pop it after the push (the cache mutex orders the
 * two), and the new owner's work is enqueued on the same CUDA stream later
 * still, so the stream runs it after the old users. (The loop thread frees
 * directly only a block nothing has used yet: an output a batch could not
 * record.) A block is never handed
 * to another stream: another stream's work is not ordered after these users.
 * (The daemon frees every tensor on the stream it was allocated on. A slab
 * block freed on a stream that did not carve it, or freed twice, is left
 * alone and logged.)
 *
 * Slabs: each records how many of its blocks are handed out. Release (trim,
 * stream_destroy, an out-of-memory retry, the stream's end) frees the cached
 * large blocks and every slab none of whose blocks is handed out, after
 * dropping that slab's blocks from the free stacks; cudaFreeAsync on the
 * stream orders each after its last user by the same argument as above.
 * stream_destroy keeps the slab being carved, so a pooled stream starts the
 * next connection warm. When cudaMallocAsync finds the device full, the
 * stream's cached memory is released and the allocation retried, then every
 * stream's, and then it fails with TF_ERR_NO_MEMORY.
 *
 * Locking: each stream's cache has a mutex (alloc on the loop thread, free on
 * a worker: uncontended in the common case); the device's list of streams
 * (tfd_cuda_heap) has one, always taken before a cache's. alloc holds no
 * mutex while it calls CUDA, so the out-of-memory retry, which takes the
 * list's and then each cache's, never waits on a mutex its caller holds.
 * Release calls cudaFreeAsync under the cache's mutex; a free arriving then
 * waits that long.
 *
 * While a stream captures a graph (s->capture set; only the backend's
 * private capture stream ever does), alloc and free bypass the cache and go
 * to the capture (cuda/graph.c): a block the captured kernels use must stay
 * the graph's for the graph's whole life, so it can be neither a cached
 * block (a later free would hand it to other work) nor cudaMallocAsync on
 * the stream (a memory node of the graph).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "daemon/backend/cuda/check.h"
#include "daemon/backend/cuda/graph.h"
#include "daemon/backend/cuda/internal.h"
#include "daemon/log.h"

/* The smallest and largest cached sizes. */
#define CLASS_MIN ((size_t)1 << TFD_CUDA_CLASS_MIN_LOG2)
#define CLASS_MAX ((size_t)1 << TFD_CUDA_CLASS_MAX_LOG2)
/* Classes up to this size are carved from slabs. */
#define SLAB_CLASS_MAX ((size_t)1 << TFD_CUDA_SLAB_CLASS_MAX_LOG2)
/* How many classes are powers of two (the slab classes). */
#define N_POW2_CLASSES (TFD_CUDA_SLAB_CLASS_MAX_LOG2 - TFD_CUDA_CLASS_MIN_LOG2 + 1)
/* One slab: 64 blocks of the largest slab class. */
#define SLAB_BYTES ((size_t)4 << 20)
/* Cached bytes of the classes above SLAB_CLASS_MAX, per stream. */
#define LARGE_CACHE_CAP ((size_t)512 << 20)

_Static_assert(SLAB_BYTES % SLAB_CLASS_MAX == 0, "slabs hold whole blocks of every slab class");

/* floor(log2(x)) for x >= 1. */
static int log2_floor(size_t x) { return 63 - __builtin_clzll((unsigned long long)x); }

/*
 * The size class of a request of at most CLASS_MAX bytes: 0 for 256 B, 1 for
 * 512 B, ... 8 for 64 KiB; then, for a request in (2^j, 2^(j+1)], one of the
 * four classes 2^j + q * 2^(j-2), q = 1..4, whichever is the first to hold it.
 */
static int class_of(size_t bytes) {
    if (bytes <= CLASS_MIN) return 0;
    if (bytes <= SLAB_CLASS_MAX) return log2_floor(bytes - 1) + 1 - TFD_CUDA_CLASS_MIN_LOG2;
    const int j = log2_floor(bytes - 1);
    const size_t base = (size_t)1 << j, step = base / TFD_CUDA_STEPS_PER_DOUBLING;
    const int q = (int)((bytes - base + step - 1) / step); /* 1 .. steps */
    return N_POW2_CLASSES + (j - TFD_CUDA_SLAB_CLASS_MAX_LOG2) * TFD_CUDA_STEPS_PER_DOUBLING + q - 1;
}

/* The bytes of class k's blocks. */
static size_t class_bytes(int k) {
    if (k < N_POW2_CLASSES) return (size_t)1 << (k + TFD_CUDA_CLASS_MIN_LOG2);
    const int t = k - N_POW2_CLASSES;
    const int j = TFD_CUDA_SLAB_CLASS_MAX_LOG2 + t / TFD_CUDA_STEPS_PER_DOUBLING;
    const size_t base = (size_t)1 << j;
    return base + (size_t)(t % TFD_CUDA_STEPS_PER_DOUBLING + 1) * (base / TFD_CUDA_STEPS_PER_DOUBLING);
}

size_t tfd_cuda_block_bytes(size_t bytes) { return bytes > CLASS_MAX ? bytes : class_bytes(class_of(bytes)); }

/* The first class above the slab classes. */
static int first_large_class(void) { return class_of(SLAB_CLASS_MAX) + 1; }

/* The slab holding address p, or NULL: binary search over the slabs sorted by base. */
static tfd_cuda_slab *slab_find(tfd_cuda_cache *c, const void *p) {
    const uintptr_t a = (uintptr_t)p;
    size_t lo = 0, hi = c->n_slabs;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)c->slabs[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0) return NULL;
    tfd_cuda_slab *sl = &c->slabs[lo - 1];
    return a - (uintptr_t)sl->base < SLAB_BYTES ? sl : NULL;
}

/* Adds a slab in address order; -1 without host memory. */
static int slab_insert(tfd_cuda_cache *c, char *base) {
    if (c->n_slabs == c->cap_slabs) {
        const size_t cap = c->cap_slabs ? 2 * c->cap_slabs : 8;
        tfd_cuda_slab *grown = realloc(c->slabs, cap * sizeof *grown);
        if (grown == NULL) return -1;
        c->slabs = grown;
        c->cap_slabs = cap;
    }
    size_t at = 0;
    while (at < c->n_slabs && (uintptr_t)c->slabs[at].base < (uintptr_t)base) at++;
    memmove(&c->slabs[at + 1], &c->slabs[at], (c->n_slabs - at) * sizeof *c->slabs);
    c->slabs[at].base = base;
    c->slabs[at].live = 0;
    c->n_slabs++;
    return 0;
}

/* Pushes a free block; -1 without host memory. */
static int push(tfd_cuda_blocks *b, void *p) {
    if (b->n == b->cap) {
        const size_t cap = b->cap ? 2 * b->cap : 16;
        void **grown = realloc(b->ptr, cap * sizeof *grown);
        if (grown == NULL) return -1;
        b->ptr = grown;
        b->cap = cap;
    }
    b->ptr[b->n++] = p;
    return 0;
}

/* Pops the most recently freed block of class k (its memory is likeliest in cache), or NULL. */
static void *pop(tfd_cuda_cache *c, int k) {
    tfd_cuda_blocks *b = &c->free[k];
    if (b->n == 0) return NULL;
    void *p = b->ptr[--b->n];
    if (class_bytes(k) <= SLAB_CLASS_MAX) {
        /* Always found: the stacks only hold blocks of slabs not yet released. */
        tfd_cuda_slab *sl = slab_find(c, p);
        if (sl != NULL) sl->live++;
    } else {
        c->large_cached -= class_bytes(k);
    }
    return p;
}

/* Bump-allocates `size` bytes from the slab being carved, or NULL when it has no room. */
static void *carve(tfd_cuda_cache *c, size_t size) {
    if (c->carve_base == NULL || SLAB_BYTES - c->carve_used < size) return NULL;
    tfd_cuda_slab *sl = slab_find(c, c->carve_base);
    if (sl == NULL) return NULL;
    void *p = c->carve_base + c->carve_used;
    c->carve_used += size;
    sl->live++;
    return p;
}

/* Stream-ordered free to the device pool; a failure can only be logged. */
static void device_free(tfd_cuda_stream *s, void *p) {
    cudaError_t e = cudaFreeAsync(p, s->stream);
    if (e != cudaSuccess)
        (void)tfd_cuda_fail(e, "cudaFreeAsync(p, s->stream)", __FILE__, __LINE__, NULL, 0);
}

/*
 * cudaMallocAsync on the stream. When the device is full, releases this
 * stream's cached memory and retries, then every stream's and retries.
 */
static tf_status device_malloc(tfd_cuda_stream *s, size_t bytes, void **ptr, char *msg,
                               size_t msg_len) {
    void *p = NULL;
    cudaError_t e = cudaMallocAsync(&p, bytes, s->stream);
    for (int stage = 0; e == cudaErrorMemoryAllocation && stage < 2; stage++) {
        (void)cudaGetLastError(); /* not sticky; only the last attempt's failure is reported */
        size_t released = 0;
        if (stage == 0)
            released = tfd_cuda_cache_release(s, 0);
        else if (s->heap != NULL)
            released = tfd_cuda_heap_release(s->heap);
        if (released > 0) e = cudaMallocAsync(&p, bytes, s->stream);
    }
    if (e != cudaSuccess)
        return tfd_cuda_fail(e, "cudaMallocAsync(&p, bytes, s->stream)", __FILE__, __LINE__, msg,
                             msg_len);
    *ptr = p;
    return TF_OK;
}

/* Allocates a new slab, makes it the one being carved and carves `size` bytes from it. */
static tf_status carve_new_slab(tfd_cuda_stream *s, size_t size, void **ptr, char *msg,
                                size_t msg_len) {
    tfd_cuda_cache *c = &s->cache;
    void *slab = NULL;
    tf_status st = device_malloc(s, SLAB_BYTES, &slab, msg, msg_len);
    if (st != TF_OK) return st;
    pthread_mutex_lock(&c->lock);
    if (slab_insert(c, slab) != 0) {
        pthread_mutex_unlock(&c->lock);
        device_free(s, slab);
        snprintf(msg, msg_len, "cuda: out of host memory recording a device slab");
        return TF_ERR_NO_MEMORY;
    }
    c->carve_base = slab;
    c->carve_used = 0;
    *ptr = carve(c, size); /* size <= SLAB_CLASS_MAX < SLAB_BYTES: it fits */
    pthread_mutex_unlock(&c->lock);
    return TF_OK;
}

int tfd_cuda_heap_init(tfd_cuda_heap *h) {
    h->streams = NULL;
    return pthread_mutex_init(&h->lock, NULL) == 0 ? 0 : -1;
}

void tfd_cuda_heap_destroy(tfd_cuda_heap *h) { pthread_mutex_destroy(&h->lock); }

tf_status tfd_cuda_cache_attach(tfd_cuda_heap *h, tfd_cuda_stream *s, char *msg, size_t msg_len) {
    memset(&s->cache, 0, sizeof s->cache);
    if (pthread_mutex_init(&s->cache.lock, NULL) != 0) {
        snprintf(msg, msg_len, "cuda: cannot initialise a stream's cache mutex");
        return TF_ERR_INTERNAL;
    }
    pthread_mutex_lock(&h->lock);
    s->heap = h;
    s->heap_prev = NULL;
    s->heap_next = h->streams;
    if (h->streams != NULL) h->streams->heap_prev = s;
    h->streams = s;
    pthread_mutex_unlock(&h->lock);
    return TF_OK;
}

void tfd_cuda_cache_detach(tfd_cuda_stream *s, int device_ok) {
    tfd_cuda_heap *h = s->heap;
    if (h == NULL) return; /* never attached */
    pthread_mutex_lock(&h->lock);
    if (s->heap_prev != NULL)
        s->heap_prev->heap_next = s->heap_next;
    else
        h->streams = s->heap_next;
    if (s->heap_next != NULL) s->heap_next->heap_prev = s->heap_prev;
    pthread_mutex_unlock(&h->lock);
    s->heap = NULL;
    s->heap_prev = s->heap_next = NULL;

    tfd_cuda_cache *c = &s->cache;
    if (device_ok) {
        (void)tfd_cuda_cache_release(s, 0);
        if (c->n_slabs > 0) /* blocks never freed: whoever holds them may still use them */
            tfd_log(TFD_LOG_WARN,
                    "cuda: a stream ends with %zu slab%s still holding blocks; %zu bytes stay "
                    "allocated",
                    c->n_slabs, c->n_slabs == 1 ? "" : "s", c->n_slabs * SLAB_BYTES);
    }
    for (int k = 0; k < TFD_CUDA_N_CLASSES; k++) free(c->free[k].ptr);
    free(c->slabs);
    pthread_mutex_destroy(&c->lock);
    memset(c, 0, sizeof *c);
}

tf_status tfd_cuda_cache_alloc(tfd_cuda_stream *s, size_t bytes, void **ptr, char *msg,
                               size_t msg_len) {
    *ptr = NULL;
    if (s->capture != NULL) return tfd_cuda_capture_alloc(s->capture, bytes, ptr, msg, msg_len);
    if (bytes > CLASS_MAX) return device_malloc(s, bytes, ptr, msg, msg_len);
    const int k = class_of(bytes);
    const size_t size = class_bytes(k);
    tfd_cuda_cache *c = &s->cache;
    pthread_mutex_lock(&c->lock);
    void *p = pop(c, k);
    if (p == NULL && size <= SLAB_CLASS_MAX) p = carve(c, size);
    pthread_mutex_unlock(&c->lock);
    if (p != NULL) {
        *ptr = p;
        return TF_OK;
    }
    if (size <= SLAB_CLASS_MAX) return carve_new_slab(s, size, ptr, msg, msg_len);
    return device_malloc(s, size, ptr, msg, msg_len);
}

void *tfd_cuda_cache_allocation(tfd_cuda_stream *s, const void *ptr) {
    tfd_cuda_cache *c = &s->cache;
    pthread_mutex_lock(&c->lock);
    const tfd_cuda_slab *sl = slab_find(c, ptr);
    void *base = sl ? sl->base : (void *)ptr;
    pthread_mutex_unlock(&c->lock);
    return base;
}

void tfd_cuda_cache_free(tfd_cuda_stream *s, void *ptr, size_t bytes) {
    if (s->capture != NULL) {
        tfd_cuda_capture_free(s->capture, ptr, bytes);
        return;
    }
    if (bytes > CLASS_MAX) {
        device_free(s, ptr);
        return;
    }
    const int k = class_of(bytes);
    const size_t size = class_bytes(k);
    tfd_cuda_cache *c = &s->cache;
    pthread_mutex_lock(&c->lock);
    if (size <= SLAB_CLASS_MAX) {
        tfd_cuda_slab *sl = slab_find(c, ptr);
        const int ours = sl != NULL && sl->live > 0;
        if (ours) {
            sl->live--;
            /* Without host memory to record it, the block idles until its slab is released. */
            (void)push(&c->free[k], ptr);
        }
        pthread_mutex_unlock(&c->lock);
        if (!ours)
            tfd_log(TFD_LOG_ERROR,
                    "cuda: free of %zu bytes at %p: not a block this stream handed out; left alone",
                    bytes, ptr);
        return;
    }
    const int cached = c->large_cached + size <= LARGE_CACHE_CAP && push(&c->free[k], ptr) == 0;
    if (cached) c->large_cached += size;
    pthread_mutex_unlock(&c->lock);
    if (!cached) device_free(s, ptr);
}

/* A slab release may free: none of its blocks handed out, and not kept as the one carved. */
static int slab_idle(const tfd_cuda_cache *c, const tfd_cuda_slab *sl, int keep_carving) {
    return sl->live == 0 && !(keep_carving && sl->base == c->carve_base);
}

size_t tfd_cuda_cache_release(tfd_cuda_stream *s, int keep_carving) {
    tfd_cuda_cache *c = &s->cache;
    size_t released = 0;
    pthread_mutex_lock(&c->lock);
    for (int k = first_large_class(); k < TFD_CUDA_N_CLASSES; k++) {
        tfd_cuda_blocks *b = &c->free[k];
        for (size_t i = 0; i < b->n; i++) device_free(s, b->ptr[i]);
        released += b->n * class_bytes(k);
        b->n = 0;
    }
    c->large_cached = 0;

    size_t n_idle = 0;
    for (size_t i = 0; i < c->n_slabs; i++)
        n_idle += (size_t)slab_idle(c, &c->slabs[i], keep_carving);
    if (n_idle > 0) {
        /* First drop the idle slabs' blocks from the stacks, while the slabs can still be found. */
        for (int k = 0; k < first_large_class(); k++) {
            tfd_cuda_blocks *b = &c->free[k];
            size_t kept = 0;
            for (size_t i = 0; i < b->n; i++) {
                const tfd_cuda_slab *sl = slab_find(c, b->ptr[i]);
                if (sl != NULL && !slab_idle(c, sl, keep_carving)) b->ptr[kept++] = b->ptr[i];
            }
            b->n = kept;
        }
        size_t kept = 0;
        for (size_t i = 0; i < c->n_slabs; i++) {
            tfd_cuda_slab *sl = &c->slabs[i];
            if (!slab_idle(c, sl, keep_carving)) {
                c->slabs[kept++] = *sl;
                continue;
            }
            if (sl->base == c->carve_base) {
                c->carve_base = NULL;
                c->carve_used = 0;
            }
            device_free(s, sl->base);
            released += SLAB_BYTES;
        }
        c->n_slabs = kept;
    }
    pthread_mutex_unlock(&c->lock);
    return released;
}

size_t tfd_cuda_heap_release(tfd_cuda_heap *h) {
    size_t released = 0;
    pthread_mutex_lock(&h->lock);
    for (tfd_cuda_stream *s = h->streams; s != NULL; s = s->heap_next)
        released += tfd_cuda_cache_release(s, 0);
    pthread_mutex_unlock(&h->lock);
    return released;
}
