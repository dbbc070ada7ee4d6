/*
 * Executor items are made on the loop thread (one per operation of a
 * submission) and mostly let go on a worker, so plain calloc/free would
 * move every item across threads: malloc's arena lock bounces between them
 * at hundreds of thousands of operations a second. Let-go items go onto a
 * shared lock-free stack instead (any thread pushes with a compare-and-swap);
 * a thread that makes items takes the whole stack at once into a cache of
 * its own (an atomic exchange, so there is no ABA problem) and reuses them.
 *
 * A worker lets go of the items of one serving of a stream as one batch
 * (tfd_item_pool_hold / tfd_item_pool_release): they are linked on the
 * worker, then pushed with one compare-and-swap, instead of two atomic
 * operations on lines the loop thread also uses for every item. Every batch
 * on the stack is a run of items whose first one records how many it holds
 * and which is its last, so the thread that takes the stack counts it batch
 * by batch without walking (and touching) every item.
 *
 * At most POOL_MAX items wait in the stack; beyond that they are freed.
 * Under AddressSanitizer the pool is off (POOL_MAX 0), so a use of an item
 * after it was let go is still caught there; the failure-injection build
 * turns it off too (TFD_ITEM_POOL_OFF), so every item is an allocation it
 * can fail.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/frame.h"
#include "daemon/executor.h"
#include "daemon/item-pool.h"
#include "daemon/sync-point.h"

/* Items kept for reuse at most (about 1 KiB each). */
#if defined(__SANITIZE_ADDRESS__) || defined(TFD_ITEM_POOL_OFF)
#define POOL_MAX 0
#else
#define POOL_MAX 8192
#endif

/*
 * While an item waits in the pool, the head of its batch keeps the batch's
 * length in `tag` and its last item in `done_arg`; tfd_item_new clears both.
 */
#define BATCH_LENGTH(it) ((it)->tag)
#define BATCH_LAST(it) ((it)->done_arg)

static _Atomic(tfd_item *) pooled;        /* let-go items, linked through ->next */
static atomic_int pooled_count;           /* about how many: bounds the pool */
static _Thread_local tfd_item *cache;     /* this thread's items taken from the stack */

/* This thread's items let go while it holds them back (tfd_item_pool_hold). */
static _Thread_local int holding;
static _Thread_local tfd_item *held_first, *held_last;
static _Thread_local int held_count;

/* Takes the whole stack into this thread's cache, counting it batch by batch. */
static void take_stack(void) {
    cache = atomic_exchange_explicit(&pooled, NULL, memory_order_acquire);
    int n = 0;
    for (tfd_item *b = cache; b; b = ((tfd_item *)BATCH_LAST(b))->next) n += (int)BATCH_LENGTH(b);
    atomic_fetch_sub_explicit(&pooled_count, n, memory_order_relaxed);
}

tfd_item *tfd_item_new(tfd_item_type type) {
    if (!cache && atomic_load_explicit(&pooled, memory_order_relaxed)) take_stack();
    tfd_item *it = cache;
    if (it) {
        cache = it->next;
        /*
         * The next item was last touched by the worker that let it go: ask for
         * its lines now, so that they are this core's by the time it is made.
         */
        if (cache)
            for (size_t at = 0; at < offsetof(tfd_item, outcome.message); at += 64)
                __builtin_prefetch((char *)cache + at, 1);
        /* Not the outcome's message: an operation's item never writes it (a few cache lines fewer). */
        memset(it, 0, offsetof(tfd_item, outcome) + offsetof(tfd_item_outcome, message));
        it->outcome.message[0] = '\0';
    } else {
        it = calloc(1, sizeof *it);
        if (!it) return NULL;
    }
    it->type = type;
    return it;
}

/* Pushes the batch first..last of n items onto the stack, or frees it when the pool is full. */
static void push_batch(tfd_item *first, tfd_item *last, int n) {
    if (atomic_fetch_add_explicit(&pooled_count, n, memory_order_relaxed) + n > POOL_MAX) {
        atomic_fetch_sub_explicit(&pooled_count, n, memory_order_relaxed);
        for (tfd_item *it = first, *next; it; it = next) {
            next = it == last ? NULL : it->next;
            free(it);
        }
        return;
    }
    BATCH_LENGTH(first) = (uint64_t)n;
    BATCH_LAST(first) = last;
    tfd_item *head = atomic_load_explicit(&pooled, memory_order_relaxed);
    do {
        last->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&pooled, &head, first, memory_order_release,
                                                    memory_order_relaxed));
}

void tfd_item_free(tfd_item *item) {
    if (!item) return;
    if (item->type == TFD_ITEM_WRITE) tf__frame_free(item->u.copy.owned);
    if (item->type == TFD_ITEM_RUN && item->u.run.drop) item->u.run.drop(item->u.run.arg);
    for (int i = 0; i < item->n_waits; i++) tfd_sync_point_unref(item->waits[i]);
    tfd_sync_point_unref(item->mark);
    tfd_sync_point_unref(item->after);
    tfd_sync_point_unref(item->point);
    if (POOL_MAX == 0) {
        free(item);
        return;
    }
    if (holding) {
        item->next = held_first;
        held_first = item;
        if (!held_last) held_last = item;
        held_count++;
        return;
    }
    push_batch(item, item, 1);
}

void tfd_item_pool_hold(void) { holding = 1; }

void tfd_item_pool_release(void) {
    holding = 0;
    if (held_first) push_batch(held_first, held_last, held_count);
    held_first = held_last = NULL;
    held_count = 0;
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
