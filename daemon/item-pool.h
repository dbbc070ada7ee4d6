/*
 * The executor's items (item-pool.c): allocated from per-thread and shared
 * free lists, so the hot path does not call malloc per operation.
 */
#ifndef TENFERRO_DAEMON_ITEM_POOL_H
#define TENFERRO_DAEMON_ITEM_POOL_H

#include <stdint.h>

#include "daemon/executor.h"

/*
 * Allocates a zeroed item, reusing a let-go one when it can;
 * NULL when out of memory. The outcome's message is an empty string, the
 * rest of its bytes are not cleared.
 */
tfd_item *tfd_item_new(tfd_item_type type);

/* Lets an item go (after its callback, after it ran, or one never enqueued); any thread. */
void tfd_item_free(tfd_item *item);

/* Frees the items kept for reuse (the calling thread's and the shared ones), at shutdown. */
void tfd_item_pool_drain(void);

/*
 * Between these, items the calling thread lets go are kept back and returned
 * to the pool together at the release (a worker serving a stream).
 */
void tfd_item_pool_hold(void);
void tfd_item_pool_release(void);

#endif
