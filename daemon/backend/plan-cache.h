/*
 * A daemon-wide plan cache (plan-cache.c): values (FFTW plans, cuFFT plans)
 * kept under fixed-size byte keys, bounded by an LRU, shared by every client
 * and every stream, with the counters tenferroctl status shows.
 *
 * Two ways of sharing: a shared cache hands one entry to any number of users
 * at once (an FFTW plan may be executed by several threads on new arrays); an
 * exclusive cache hands an entry to one user at a time, and a second user of
 * the same key finds no idle entry, makes another value and inserts it beside
 * the first (a cuFFT plan is bound to one stream per call).
 *
 * The cache never makes values; its owner does, outside the cache's lock,
 * then inserts them. It destroys them through the owner's callback, always
 * outside its lock: an evicted or cleared entry that is in use is taken out
 * of the table at once and destroyed when its last user releases it. The
 * callback may decline (a library whose destruction must wait for a lock, or
 * for the device, on a thread that must not wait): the cache then keeps the
 * value aside until its owner calls tfd_plan_cache_drain where waiting is
 * fine.
 * Counting: a hit is an acquire that found an entry, a miss an insert (a
 * value had to be made), an eviction an entry the LRU bound pushed out.
 */
#ifndef TENFERRO_DAEMON_PLAN_CACHE_H
#define TENFERRO_DAEMON_PLAN_CACHE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/backend.h"

typedef struct tfd_plan_entry tfd_plan_entry;

/*
 * Destroys a value the cache let go of (arg is the one given at init) and
 * returns 1; or, when must is 0, may return 0 to leave it to
 * tfd_plan_cache_drain. With must = 1 it destroys.
 */
typedef int (*tfd_plan_destroy_fn)(void *value, void *arg, int must);

typedef struct tfd_plan_cache {
    pthread_mutex_t lock; /* guards everything below; never held while a value is made or destroyed */
    const char *name;
    size_t key_len;
    uint64_t capacity; /* most entries kept; 0 = unbounded */
    int exclusive;
    tfd_plan_destroy_fn destroy;
    void *destroy_arg;
    tfd_plan_entry **buckets;
    size_t n_buckets;
    tfd_plan_entry *newest, *oldest; /* the LRU list, most recently used first */
    uint64_t entries, hits, misses, evictions, bytes;
    tfd_plan_entry *declined; /* let go of, the destroy callback declined: for tfd_plan_cache_drain */
    atomic_uint_fast64_t n_declined;
} tfd_plan_cache;

/* Prepares an empty cache of keys of key_len bytes; 0, or -1 when out of memory. */
int tfd_plan_cache_init(tfd_plan_cache *c, const char *name, size_t key_len, uint64_t capacity,
                        int exclusive, tfd_plan_destroy_fn destroy, void *destroy_arg);

/* Destroys every value (the callback may not decline here) and the cache itself; nothing in use. */
void tfd_plan_cache_destroy(tfd_plan_cache *c);

/*
 * Takes an entry for key (any in a shared cache, an idle one in an exclusive
 * cache), counting a hit and making it the most recently used; NULL when
 * there is none (not counted: the insert that follows counts the miss).
 */
tfd_plan_entry *tfd_plan_cache_acquire(tfd_plan_cache *c, const void *key);

/*
 * Adds a value the caller made for key, already taken by the caller, and
 * counts a miss; pushes the least recently used entry out when the cache is
 * full. `bytes` is what the value holds, as far as known. NULL when the
 * entry cannot be recorded (out of memory): the caller still owns value.
 */
tfd_plan_entry *tfd_plan_cache_insert(tfd_plan_cache *c, const void *key, void *value,
                                      uint64_t bytes);

/* The value of a taken entry. */
void *tfd_plan_entry_value(const tfd_plan_entry *e);

/* Gives a taken entry back; the last user of an entry pushed out meanwhile destroys it. */
void tfd_plan_cache_release(tfd_plan_cache *c, tfd_plan_entry *e);

/*
 * Gives a taken entry back and takes it out of the cache: no later acquire
 * finds it, and it is destroyed (through the callback) once its last user
 * lets go, at once when that is the caller.
 */
void tfd_plan_cache_discard(tfd_plan_cache *c, tfd_plan_entry *e);

/*
 * Empties the cache (trim): idle values are destroyed now, values in use
 * when their users release them. Returns how many entries it took out.
 */
uint64_t tfd_plan_cache_clear(tfd_plan_cache *c);

/* Destroys the values the callback declined before (must = 1); the caller may wait. */
void tfd_plan_cache_drain(tfd_plan_cache *c);

/* How many declined values wait for tfd_plan_cache_drain (read without the lock). */
uint64_t tfd_plan_cache_declined(tfd_plan_cache *c);

/* The counters, for status and metrics. */
void tfd_plan_cache_stats(tfd_plan_cache *c, tfd_cache_stats *out);

#endif
