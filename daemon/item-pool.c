/*
 * Executor items are made on the loop thread (one per operation of a
 * submission) and mostly let go on a worker, so plain calloc/free would
 * move every item across threads: malloc's arena lock bounces between them
 * at hundreds of thousands of operations a second. Let-go items go onto a
 * shared lock-free stack instead (any thread pushes with a compare-and-swap);
 * a thread that makes items takes the whole stack at once into a cache of
 * its own (an atomic exchange, so there is no ABA problem) and reuses them.
 * At most POOL_MAX items wait in the stack; beyond that they are freed.
 * Under AddressSanitizer the pool is off (POOL_MAX 0), so a use of an item
 * after it was let go is still caught there; the failure-injection build
 * turns it off too (TFD_ITEM_POOL_OFF), so every item is an allocation it
 * can fail.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"
#include "daemon/executor.h"
#include "daemon/sync-point.h"

/* Items kept for reuse at most (about 1 KiB each). */
#if defined(__SANITIZE_ADDRESS__) || defined(TFD_ITEM_POOL_OFF)
#define POOL_MAX 0
#else
#define POOL_MAX 8192
#endif

static _Atomic(tfd_item *) pooled;        /* let-go items, linked through ->next */
static atomic_int pooled_count;           /* about how many: bounds the pool */
static _Thread_local tfd_item *cache;     /* this thread's items taken from the stack */

tfd_item *tfd_item_new(tfd_item_type type) {
    if (!cache && atomic_load_explicit(&pooled, memory_order_relaxed)) {
        cache = atomic_exchange_explicit(&pooled, NULL, memory_order_acquire);
        int n = 0;
        for (tfd_item *it = cache; it; it = it->next) n++;
        atomic_fetch_sub_explicit(&pooled_count, n, memory_order_relaxed);
    }
    tfd_item *it = cache;
    if (it) {
        cache = it->next;
        memset(it, 0, sizeof *it);
    } else {
        it = calloc(1, sizeof *it);
        if (!it) return NULL;
    }
    it->type = type;
    return it;
}

void tfd_item_free(tfd_item *item) {
    if (!item) return;
    if (item->type == TFD_ITEM_WRITE) tf__frame_free(item->u.copy.owned);
    if (item->type == TFD_ITEM_RUN && item->u.run.drop) item->u.run.drop(item->u.run.arg);
    for (int i = 0; i < item->n_waits; i++) tfd_sync_point_unref(item->waits[i]);
    tfd_sync_point_unref(item->mark);
    tfd_sync_point_unref(item->after);
    tfd_sync_point_unref(item->point);
    if (atomic_fetch_add_explicit(&pooled_count, 1, memory_order_relaxed) >= POOL_MAX) {
        atomic_fetch_sub_explicit(&pooled_count, 1, memory_order_relaxed);
        free(item);
        return;
    }
    tfd_item *head = atomic_load_explicit(&pooled, memory_order_relaxed);
    do {
        item->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&pooled, &head, item, memory_order_release,
                                                    memory_order_relaxed));
}

void tfd_item_pool_drain(void) {
    tfd_item *it = atomic_exchange_explicit(&pooled, NULL, memory_order_acquire);
    while (it) {
        tfd_item *next = it->next;
        free(it);
        atomic_fetch_sub_explicit(&pooled_count, 1, memory_order_relaxed);
        it = next;
    }
    while (cache) {
        tfd_item *next = cache->next;
        free(cache);
        cache = next;
    }
}
