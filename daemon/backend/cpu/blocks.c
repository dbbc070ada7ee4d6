/*
 * The CPU backend's kept blocks (see cpu/blocks.h). Any thread pushes a
 * freed block onto its class's stack with a compare-and-swap; a thread that
 * allocates takes a class's whole stack at once into a cache of its own (an
 * atomic exchange, so there is no ABA problem) and pops from there. The bytes
 * kept are counted when a block is pushed and when a thread refills its
 * cache for the blocks it took since, so the count only ever runs ahead of
 * what is kept and the bound holds.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "daemon/backend/cpu/blocks.h"

#if defined(__SANITIZE_ADDRESS__)
#define KEEP_BLOCKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEP_BLOCKS 0
#endif
#endif
#ifndef KEEP_BLOCKS
#define KEEP_BLOCKS 1
#endif

#define CLASSES (TFD_CPU_BLOCK_MAX / TFD_CPU_BLOCK_STEP)

typedef struct block {
    struct block *next;
} block;

/* One class's stack, on a cache line of its own. */
typedef struct stack {
    _Atomic(block *) head;
    char apart[64 - sizeof(block *)];
} stack;

static stack stacks[CLASSES];                /* class k holds blocks of (k + 1) * STEP bytes */
static atomic_size_t kept_bytes;             /* bytes pushed, less those known to be taken */
static _Thread_local block *cache[CLASSES];  /* this thread's blocks taken from the stacks */
static _Thread_local size_t taken_bytes;     /* popped from cache since the count last heard */

static size_t class_bytes(size_t k) { return (k + 1) * TFD_CPU_BLOCK_STEP; }

void *tfd_cpu_block_take(size_t rounded) {
    if (!KEEP_BLOCKS || rounded == 0 || rounded > TFD_CPU_BLOCK_MAX || rounded % TFD_CPU_BLOCK_STEP)
        return NULL;
    const size_t k = rounded / TFD_CPU_BLOCK_STEP - 1;
    block *b = cache[k];
    if (!b) {
        if (!atomic_load_explicit(&stacks[k].head, memory_order_relaxed)) return NULL;
        if (taken_bytes) {
            atomic_fetch_sub_explicit(&kept_bytes, taken_bytes, memory_order_relaxed);
            taken_bytes = 0;
        }
        b = atomic_exchange_explicit(&stacks[k].head, NULL, memory_order_acquire);
        if (!b) return NULL;
    }
    cache[k] = b->next;
    if (b->next) __builtin_prefetch(b->next, 1); /* the next block's link, freed on another core */
    taken_bytes += class_bytes(k);
    return b;
}

int tfd_cpu_block_give(void *p) {
    if (!KEEP_BLOCKS || !p) return 0;
    const size_t usable = malloc_usable_size(p);
    /* A block serves requests up to its usable size; a large one is not kept as a small one. */
    if (usable < TFD_CPU_BLOCK_STEP || usable > TFD_CPU_BLOCK_MAX + TFD_CPU_BLOCK_STEP) return 0;
    const size_t k = (usable < TFD_CPU_BLOCK_MAX ? usable : TFD_CPU_BLOCK_MAX) / TFD_CPU_BLOCK_STEP - 1;
    const size_t bytes = class_bytes(k);
    if (atomic_fetch_add_explicit(&kept_bytes, bytes, memory_order_relaxed) + bytes >
        TFD_CPU_BLOCKS_MAX_BYTES) {
        atomic_fetch_sub_explicit(&kept_bytes, bytes, memory_order_relaxed);
        return 0;
    }
    block *b = p, *head = atomic_load_explicit(&stacks[k].head, memory_order_relaxed);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&stacks[k].head, &head, b, memory_order_release,
                                                    memory_order_relaxed));
    return 1;
}

/*
 * The large slots: few, taken and given once per tensor of megabytes (each
 * worth milliseconds of work), so one mutex over a short array serves. The
 * stamp orders them by when they were given.
 */
typedef struct large_slot {
    void *p;
    size_t bytes; /* its usable size */
    uint64_t stamp;
} large_slot;

static pthread_mutex_t large_lock = PTHREAD_MUTEX_INITIALIZER;
static large_slot large[TFD_CPU_LARGE_SLOTS];
static size_t large_bytes;
static uint64_t large_stamp;

void *tfd_cpu_large_take(size_t rounded) {
    if (!KEEP_BLOCKS || rounded < TFD_CPU_LARGE_MIN || rounded > TFD_CPU_LARGE_MAX) return NULL;
    void *p = NULL;
    pthread_mutex_lock(&large_lock);
    int best = -1;
    for (int i = 0; i < TFD_CPU_LARGE_SLOTS; i++)
        if (large[i].p && large[i].bytes >= rounded && large[i].bytes - rounded <= rounded / 8 &&
            (best < 0 || large[i].bytes < large[best].bytes))
            best = i;
    if (best >= 0) {
        p = large[best].p;
        large_bytes -= large[best].bytes;
        large[best].p = NULL;
    }
    pthread_mutex_unlock(&large_lock);
    return p;
}

int tfd_cpu_large_give(void *p) {
    if (!KEEP_BLOCKS || !p) return 0;
    const size_t usable = malloc_usable_size(p);
    if (usable < TFD_CPU_LARGE_MIN || usable > TFD_CPU_LARGE_MAX + TFD_CPU_LARGE_MAX / 8) return 0;
    void *evicted[TFD_CPU_LARGE_SLOTS];
    int n_evicted = 0, kept = 0;
    pthread_mutex_lock(&large_lock);
    /* Room in slots and bytes: the least recently given go until there is. */
    for (;;) {
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < TFD_CPU_LARGE_SLOTS; i++) {
            if (!large[i].p) free_slot = free_slot < 0 ? i : free_slot;
            else if (oldest < 0 || large[i].stamp < large[oldest].stamp) oldest = i;
        }
        if (free_slot >= 0 && large_bytes + usable <= TFD_CPU_LARGE_MAX_BYTES) {
            large[free_slot] = (large_slot){p, usable, ++large_stamp};
            large_bytes += usable;
            kept = 1;
            break;
        }
        if (oldest < 0) break; /* nothing left to let go: too large to keep */
        evicted[n_evicted++] = large[oldest].p;
        large_bytes -= large[oldest].bytes;
        large[oldest].p = NULL;
    }
    pthread_mutex_unlock(&large_lock);
    for (int i = 0; i < n_evicted; i++) free(evicted[i]);
    return kept;
}

void tfd_cpu_blocks_drain(void) {
    pthread_mutex_lock(&large_lock);
    large_slot gone[TFD_CPU_LARGE_SLOTS];
    for (int i = 0; i < TFD_CPU_LARGE_SLOTS; i++) {
        gone[i] = large[i];
        large[i].p = NULL;
    }
    large_bytes = 0;
    pthread_mutex_unlock(&large_lock);
    for (int i = 0; i < TFD_CPU_LARGE_SLOTS; i++) free(gone[i].p);
    size_t freed = 0;
    for (size_t k = 0; k < CLASSES; k++) {
        block *b = atomic_exchange_explicit(&stacks[k].head, NULL, memory_order_acquire);
        for (int pass = 0; pass < 2; pass++) {
            while (b) {
                block *next = b->next;
                free(b);
                freed += class_bytes(k);
                b = next;
            }
            b = cache[k]; /* then this thread's own */
            cache[k] = NULL;
        }
    }
    atomic_fetch_sub_explicit(&kept_bytes, freed + taken_bytes, memory_order_relaxed);
    taken_bytes = 0;
}
