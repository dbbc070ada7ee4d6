/*
 * The daemon-wide plan cache (see plan-cache.h): a chained hash table of
 * entries under fixed-size byte keys, threaded on one LRU list.
 *
 * Every operation holds the cache's mutex only for table and list updates
 * (a few hundred nanoseconds), never while a value is made or destroyed: an
 * FFTW plan can take seconds to measure and a cuFFT plan frees device memory
 * when it goes, and neither may stall the other streams' lookups. Values to
 * destroy are therefore collected under the lock and destroyed after it.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/plan-cache.h"

struct tfd_plan_entry {
    tfd_plan_entry *hash_next;
    tfd_plan_entry *newer, *older; /* LRU neighbours while in the table */
    uint64_t hash;
    int users;
    int detached; /* out of the table while in use: destroyed by its last release */
    uint64_t bytes;
    void *value;
    unsigned char key[];
};

#define INITIAL_BUCKETS 64

/* FNV-1a over the key's bytes. */
static uint64_t hash_key(const void *key, size_t len) {
    const unsigned char *p = key;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

int tfd_plan_cache_init(tfd_plan_cache *c, const char *name, size_t key_len, uint64_t capacity,
                        int exclusive, tfd_plan_destroy_fn destroy, void *destroy_arg) {
    memset(c, 0, sizeof *c);
    c->buckets = calloc(INITIAL_BUCKETS, sizeof *c->buckets);
    if (!c->buckets) return -1;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        free(c->buckets);
        c->buckets = NULL;
        return -1;
    }
    c->n_buckets = INITIAL_BUCKETS;
    c->name = name;
    c->key_len = key_len;
    c->capacity = capacity;
    c->exclusive = exclusive;
    c->destroy = destroy;
    c->destroy_arg = destroy_arg;
    return 0;
}

/* Unlinks e from the LRU list. */
static void lru_unlink(tfd_plan_cache *c, tfd_plan_entry *e) {
    if (e->newer) e->newer->older = e->older; else c->newest = e->older;
    if (e->older) e->older->newer = e->newer; else c->oldest = e->newer;
    e->newer = e->older = NULL;
}

/* Puts e at the most recently used end. */
static void lru_push(tfd_plan_cache *c, tfd_plan_entry *e) {
    e->newer = NULL;
    e->older = c->newest;
    if (c->newest) c->newest->newer = e; else c->oldest = e;
    c->newest = e;
}

/* Takes e out of its bucket and the LRU list; it is no longer found or counted. */
static void table_remove(tfd_plan_cache *c, tfd_plan_entry *e) {
    tfd_plan_entry **link = &c->buckets[e->hash & (c->n_buckets - 1)];
    while (*link != e) link = &(*link)->hash_next;
    *link = e->hash_next;
    e->hash_next = NULL;
    lru_unlink(c, e);
    c->entries--;
    c->bytes -= e->bytes;
}

/* Doubles the buckets once the table holds more entries than buckets (kept as it is when out of memory). */
static void maybe_grow(tfd_plan_cache *c) {
    if (c->entries <= c->n_buckets) return;
    size_t n = c->n_buckets * 2;
    tfd_plan_entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < c->n_buckets; i++) {
        for (tfd_plan_entry *e = c->buckets[i], *next; e; e = next) {
            next = e->hash_next;
            e->hash_next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(c->buckets);
    c->buckets = b;
    c->n_buckets = n;
}

/*
 * Takes e out of the table; returns it when it can be destroyed now (nobody
 * uses it), else marks it for its last user and returns NULL.
 */
static tfd_plan_entry *take_out(tfd_plan_cache *c, tfd_plan_entry *e) {
    table_remove(c, e);
    if (e->users == 0) return e;
    e->detached = 1;
    return NULL;
}

/* Destroys an entry's value and the entry (outside the lock), or keeps it for a drain. */
static void destroy_entry(tfd_plan_cache *c, tfd_plan_entry *e) {
    if (!c->destroy || c->destroy(e->value, c->destroy_arg, 0)) {
        free(e);
        return;
    }
    pthread_mutex_lock(&c->lock);
    e->hash_next = c->declined;
    c->declined = e;
    atomic_fetch_add(&c->n_declined, 1);
    pthread_mutex_unlock(&c->lock);
}

void tfd_plan_cache_drain(tfd_plan_cache *c) {
    if (atomic_load(&c->n_declined) == 0) return;
    pthread_mutex_lock(&c->lock);
    tfd_plan_entry *list = c->declined;
    c->declined = NULL;
    atomic_store(&c->n_declined, 0);
    pthread_mutex_unlock(&c->lock);
    while (list) {
        tfd_plan_entry *next = list->hash_next;
        c->destroy(list->value, c->destroy_arg, 1);
        free(list);
        list = next;
    }
}

uint64_t tfd_plan_cache_declined(tfd_plan_cache *c) { return atomic_load(&c->n_declined); }

tfd_plan_entry *tfd_plan_cache_acquire(tfd_plan_cache *c, const void *key) {
    const uint64_t h = hash_key(key, c->key_len);
    pthread_mutex_lock(&c->lock);
    tfd_plan_entry *e = c->buckets[h & (c->n_buckets - 1)];
    for (; e; e = e->hash_next)
        if (e->hash == h && memcmp(e->key, key, c->key_len) == 0 && (!c->exclusive || e->users == 0))
            break;
    if (e) {
        e->users++;
        c->hits++;
        lru_unlink(c, e);
        lru_push(c, e);
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

tfd_plan_entry *tfd_plan_cache_insert(tfd_plan_cache *c, const void *key, void *value,
                                      uint64_t bytes) {
    tfd_plan_entry *e = calloc(1, sizeof *e + c->key_len);
    if (!e) return NULL;
    memcpy(e->key, key, c->key_len);
    e->hash = hash_key(key, c->key_len);
    e->users = 1;
    e->bytes = bytes;
    e->value = value;
    tfd_plan_entry *victim = NULL;
    pthread_mutex_lock(&c->lock);
    c->misses++;
    /* Each insert adds one entry, so one eviction keeps the bound (an older, lower bound is not enforced here). */
    if (c->capacity && c->entries >= c->capacity && c->oldest) {
        victim = take_out(c, c->oldest);
        c->evictions++;
    }
    tfd_plan_entry **bucket = &c->buckets[e->hash & (c->n_buckets - 1)];
    e->hash_next = *bucket;
    *bucket = e;
    lru_push(c, e);
    c->entries++;
    c->bytes += bytes;
    maybe_grow(c);
    pthread_mutex_unlock(&c->lock);
    if (victim) destroy_entry(c, victim);
    return e;
}

void *tfd_plan_entry_value(const tfd_plan_entry *e) { return e->value; }

void tfd_plan_cache_release(tfd_plan_cache *c, tfd_plan_entry *e) {
    pthread_mutex_lock(&c->lock);
    int last = --e->users == 0 && e->detached;
    pthread_mutex_unlock(&c->lock);
    if (last) destroy_entry(c, e);
}

void tfd_plan_cache_discard(tfd_plan_cache *c, tfd_plan_entry *e) {
    pthread_mutex_lock(&c->lock);
    if (!e->detached) (void)take_out(c, e); /* in use by the caller: detached, not destroyed */
    int last = --e->users == 0;
    pthread_mutex_unlock(&c->lock);
    if (last) destroy_entry(c, e);
}

uint64_t tfd_plan_cache_clear(tfd_plan_cache *c) {
    tfd_plan_entry *idle = NULL;
    uint64_t removed = 0;
    pthread_mutex_lock(&c->lock);
    while (c->oldest) {
        tfd_plan_entry *e = take_out(c, c->oldest);
        removed++;
        if (e) {
            e->hash_next = idle; /* reused as the list of values to destroy */
            idle = e;
        }
    }
    pthread_mutex_unlock(&c->lock);
    while (idle) {
        tfd_plan_entry *next = idle->hash_next;
        destroy_entry(c, idle);
        idle = next;
    }
    return removed;
}

void tfd_plan_cache_destroy(tfd_plan_cache *c) {
    if (!c->buckets) return;
    tfd_plan_cache_clear(c);
    tfd_plan_cache_drain(c);
    pthread_mutex_destroy(&c->lock);
    free(c->buckets);
    c->buckets = NULL;
}

void tfd_plan_cache_stats(tfd_plan_cache *c, tfd_cache_stats *out) {
    pthread_mutex_lock(&c->lock);
    out->name = c->name;
    out->entries = c->entries;
    out->capacity = c->capacity;
    out->hits = c->hits;
    out->misses = c->misses;
    out->evictions = c->evictions;
    out->bytes = c->bytes;
    pthread_mutex_unlock(&c->lock);
}
