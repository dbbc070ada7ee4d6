/*
 * The contraction plan cache (contract-cache.c): plans keyed by labels,
 * shapes, dtype and conjugation, kept under an LRU bound and shared by every
 * stream, worker and client of the daemon, so a contraction planned once is
 * found ready by whoever runs it next.
 */
#ifndef TENFERRO_DAEMON_CONTRACT_CACHE_H
#define TENFERRO_DAEMON_CONTRACT_CACHE_H

#include <pthread.h>
#include <stdint.h>

#include "daemon/backend/backend.h"
#include "daemon/backend/contract-plan.h"

/* [caches] contraction_plans when the configuration does not set it. */
#define TFD_CONTRACT_PLANS_DEFAULT 256

typedef struct tfd_plan_entry tfd_plan_entry;

/*
 * A plan cache. `lock` guards the table and the LRU list; the counters are
 * also written under it but read without it (atomically), so status never
 * waits for a planner.
 */
typedef struct tfd_contract_cache {
    pthread_mutex_t lock;
    tfd_plan_entry **buckets;
    size_t n_buckets;
    tfd_plan_entry *newest, *oldest;
    uint64_t capacity; /* entries kept at most; 0 = unbounded */
    uint64_t entries, hits, misses, evictions;
} tfd_contract_cache;

/* Prepares an empty cache of `capacity` entries (0 = unbounded); 0, or -1 without a mutex. */
int tfd_contract_cache_init(tfd_contract_cache *pc, uint64_t capacity);

/* Frees every entry and the cache's own state. */
void tfd_contract_cache_destroy(tfd_contract_cache *pc);

/*
 * The plan of contraction c over inputs `in` (checked by tf__infer_contract,
 * whose output metadata lands in *out when out is not NULL): a copy of the
 * cached one (a hit), or a new plan, which is then cached (a miss). Labels
 * are renamed by first appearance before the lookup, so `ab,bc->ac` and
 * `xy,yz->xz` over equal shapes share one plan. A plan that cannot be cached
 * (no memory) is still returned.
 */
tf_status tfd_contract_cache_get(tfd_contract_cache *pc, const tf__contraction *c, const tf__meta *in,
                             tf__meta *out, tfd_contract_plan *plan, char *msg, size_t msg_len);

/* Sets the LRU bound, evicting the least recently used entries beyond it. */
void tfd_contract_cache_set_capacity(tfd_contract_cache *pc, uint64_t capacity);

/* Drops every entry (the counters of hits, misses and evictions stay); returns how many. */
uint64_t tfd_contract_cache_clear(tfd_contract_cache *pc);

/* What the cache holds and how it was used, named "contraction_plans". */
void tfd_contract_cache_stats(tfd_contract_cache *pc, tfd_cache_stats *out);

/* ---- the daemon-wide cache every backend plans through ---- */

/* The daemon's one contraction plan cache (bound TFD_CONTRACT_PLANS_DEFAULT until configured). */
tfd_contract_cache *tfd_contract_plans(void);

/*
 * The plan of one validated OP_CONTRACT item, through the daemon-wide cache,
 * after checking that the item's inputs, output and descriptor agree (a
 * disagreement is refused typed, never planned).
 */
tf_status tfd_contract_plan_of(const tfd_op *op, tfd_contract_plan *plan, char *msg,
                               size_t msg_len);

/* vt->caches for a backend whose only cache is the contraction plans: fills out[0]. */
int tfd_contract_plans_caches(tfd_backend *be, tfd_cache_stats *out, int max);

#endif
