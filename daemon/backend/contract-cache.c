/*
 * The contraction plan cache: a chained hash table of plans with an LRU list,
 * under one mutex.
 *
 * Workers of different streams plan concurrently, so the table is locked,
 * but only for the lookup and the insertion: a miss is planned outside the
 * lock, and when two workers miss the same key at once the second insertion
 * finds the first and keeps it. A hit copies the plan out (a plan is a few
 * hundred bytes of plain data), so an eviction can never pull a plan from
 * under a running contraction. Keys are canonical: labels renamed by first
 * appearance, conjugation dropped for real dtypes, unused fields zeroed, so
 * equal contractions compare equal byte for byte.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/contract-cache.h"

/* Buckets of a fresh table; it doubles when entries outnumber buckets twice. */
#define INITIAL_BUCKETS 64

/* What identifies a plan: the canonical descriptor and the inputs' shapes and dtype. */
typedef struct plan_key {
    uint8_t n_inputs, dtype, conj[2], rank[2], out_rank, unused;
    uint8_t labels[2][TF_MAX_RANK];
    uint8_t out[TF_MAX_RANK];
    int64_t shape[2][TF_MAX_RANK];
} plan_key;

struct tfd_plan_entry {
    plan_key key;
    uint64_t hash;
    tfd_contract_plan plan;
    tfd_plan_entry *chain;       /* next in the bucket */
    tfd_plan_entry *newer, *older; /* the LRU list */
};

/* Counters are written under the lock but read without it, so every access is atomic. */
static void count(uint64_t *counter, int64_t delta) {
    __atomic_fetch_add(counter, (uint64_t)delta, __ATOMIC_RELAXED);
}

static uint64_t read_counter(const uint64_t *counter) {
    return __atomic_load_n(counter, __ATOMIC_RELAXED);
}

/* FNV-1a over the key's bytes. */
static uint64_t hash_key(const plan_key *k) {
    const uint8_t *b = (const uint8_t *)k;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/*
 * The canonical key of a checked contraction, and the descriptor with its
 * labels renamed (the one planned on a miss).
 */
static void canonical(const tf__contraction *c, const tf__meta *in, plan_key *k,
                      tf__contraction *renamed) {
    memset(k, 0, sizeof *k);
    memset(renamed, 0, sizeof *renamed);
    uint8_t name[TF__MAX_LABELS];
    memset(name, 0xff, sizeof name);
    uint8_t next = 0;
    const int cx = in[0].dtype == TF_C64 || in[0].dtype == TF_C128;
    k->n_inputs = (uint8_t)c->n_inputs;
    k->dtype = (uint8_t)in[0].dtype;
    renamed->n_inputs = c->n_inputs;
    for (int i = 0; i < c->n_inputs; i++) {
        k->conj[i] = (uint8_t)(cx && c->conj[i]);
        k->rank[i] = (uint8_t)c->rank[i];
        renamed->conj[i] = k->conj[i];
        renamed->rank[i] = c->rank[i];
        for (int ax = 0; ax < c->rank[i]; ax++) {
            const uint8_t L = c->labels[i][ax];
            if (name[L] == 0xff) name[L] = next++;
            k->labels[i][ax] = renamed->labels[i][ax] = name[L];
            k->shape[i][ax] = in[i].shape[ax];
        }
    }
    k->out_rank = (uint8_t)c->out_rank;
    renamed->out_rank = c->out_rank;
    for (int j = 0; j < c->out_rank; j++) k->out[j] = renamed->out[j] = name[c->out[j]];
}

int tfd_contract_cache_init(tfd_contract_cache *pc, uint64_t capacity) {
    memset(pc, 0, sizeof *pc);
    if (pthread_mutex_init(&pc->lock, NULL) != 0) return -1;
    pc->capacity = capacity;
    return 0;
}

/* Unlinks an entry from its bucket and the LRU list; the caller frees it. */
static void unlink_entry(tfd_contract_cache *pc, tfd_plan_entry *e) {
    tfd_plan_entry **at = &pc->buckets[e->hash & (pc->n_buckets - 1)];
    while (*at != e) at = &(*at)->chain;
    *at = e->chain;
    if (e->newer) e->newer->older = e->older; else pc->newest = e->older;
    if (e->older) e->older->newer = e->newer; else pc->oldest = e->newer;
    count(&pc->entries, -1);
}

/* Makes e the most recently used entry. */
static void push_newest(tfd_contract_cache *pc, tfd_plan_entry *e) {
    e->older = pc->newest;
    e->newer = NULL;
    if (pc->newest) pc->newest->newer = e;
    pc->newest = e;
    if (!pc->oldest) pc->oldest = e;
}

/* Evicts the least recently used entries until the bound holds. */
static void enforce_bound(tfd_contract_cache *pc) {
    while (pc->capacity && pc->entries > pc->capacity && pc->oldest) {
        tfd_plan_entry *e = pc->oldest;
        unlink_entry(pc, e);
        free(e);
        count(&pc->evictions, 1);
    }
}

/* Doubles the bucket array (or makes the first one); leaves the table as it was without memory. */
static void grow(tfd_contract_cache *pc) {
    size_t n = pc->n_buckets ? pc->n_buckets * 2 : INITIAL_BUCKETS;
    tfd_plan_entry **b = calloc(n, sizeof *b);
    if (!b) return;
    for (size_t i = 0; i < pc->n_buckets; i++)
        for (tfd_plan_entry *e = pc->buckets[i], *next; e; e = next) {
            next = e->chain;
            e->chain = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    free(pc->buckets);
    pc->buckets = b;
    pc->n_buckets = n;
}

/* The entry of key k (hash h), or NULL; the caller holds the lock. */
static tfd_plan_entry *find(tfd_contract_cache *pc, const plan_key *k, uint64_t h) {
    if (!pc->n_buckets) return NULL;
    for (tfd_plan_entry *e = pc->buckets[h & (pc->n_buckets - 1)]; e; e = e->chain)
        if (e->hash == h && memcmp(&e->key, k, sizeof *k) == 0) return e;
    return NULL;
}

tf_status tfd_contract_cache_get(tfd_contract_cache *pc, const tf__contraction *c, const tf__meta *in,
                             tf__meta *out, tfd_contract_plan *plan, char *msg, size_t msg_len) {
    tf__meta o;
    tf_status st = tf__infer_contract(c, in, &o, msg, msg_len);
    if (st != TF_OK) return st;
    if (out) *out = o;
    plan_key k;
    tf__contraction renamed;
    canonical(c, in, &k, &renamed);
    const uint64_t h = hash_key(&k);

    pthread_mutex_lock(&pc->lock);
    tfd_plan_entry *e = find(pc, &k, h);
    if (e) {
        if (pc->newest != e) {
            if (e->newer) e->newer->older = e->older;
            if (e->older) e->older->newer = e->newer; else pc->oldest = e->newer;
            push_newest(pc, e);
        }
        *plan = e->plan;
        count(&pc->hits, 1);
        pthread_mutex_unlock(&pc->lock);
        return TF_OK;
    }
    count(&pc->misses, 1);
    pthread_mutex_unlock(&pc->lock);

    st = tfd_contract_plan_build(&renamed, in, plan, msg, msg_len);
    if (st != TF_OK) return st;
    tfd_plan_entry *fresh = malloc(sizeof *fresh);
    if (!fresh) return TF_OK; /* planned, just not kept */
    fresh->key = k;
    fresh->hash = h;
    fresh->plan = *plan;
    pthread_mutex_lock(&pc->lock);
    if (find(pc, &k, h)) { /* another worker planned it meanwhile */
        pthread_mutex_unlock(&pc->lock);
        free(fresh);
        return TF_OK;
    }
    if (pc->entries + 1 > 2 * (uint64_t)pc->n_buckets) grow(pc);
    if (!pc->n_buckets) {
        pthread_mutex_unlock(&pc->lock);
        free(fresh);
        return TF_OK;
    }
    tfd_plan_entry **bucket = &pc->buckets[h & (pc->n_buckets - 1)];
    fresh->chain = *bucket;
    *bucket = fresh;
    push_newest(pc, fresh);
    count(&pc->entries, 1);
    enforce_bound(pc);
    pthread_mutex_unlock(&pc->lock);
    return TF_OK;
}

void tfd_contract_cache_set_capacity(tfd_contract_cache *pc, uint64_t capacity) {
    pthread_mutex_lock(&pc->lock);
    __atomic_store_n(&pc->capacity, capacity, __ATOMIC_RELAXED);
    enforce_bound(pc);
    pthread_mutex_unlock(&pc->lock);
}

uint64_t tfd_contract_cache_clear(tfd_contract_cache *pc) {
    pthread_mutex_lock(&pc->lock);
    uint64_t n = 0;
    while (pc->oldest) {
        tfd_plan_entry *e = pc->oldest;
        unlink_entry(pc, e);
        free(e);
        n++;
    }
    pthread_mutex_unlock(&pc->lock);
    return n;
}

void tfd_contract_cache_destroy(tfd_contract_cache *pc) {
    tfd_contract_cache_clear(pc);
    free(pc->buckets);
    pc->buckets = NULL;
    pc->n_buckets = 0;
    pthread_mutex_destroy(&pc->lock);
}

void tfd_contract_cache_stats(tfd_contract_cache *pc, tfd_cache_stats *out) {
    memset(out, 0, sizeof *out);
    out->name = "contraction_plans";
    out->entries = read_counter(&pc->entries);
    out->capacity = __atomic_load_n(&pc->capacity, __ATOMIC_RELAXED);
    out->hits = read_counter(&pc->hits);
    out->misses = read_counter(&pc->misses);
    out->evictions = read_counter(&pc->evictions);
    out->bytes = out->entries * sizeof(tfd_plan_entry);
}

/* ---- the daemon-wide cache ---- */

static tfd_contract_cache daemon_plans = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .capacity = TFD_CONTRACT_PLANS_DEFAULT,
};

tfd_contract_cache *tfd_contract_plans(void) { return &daemon_plans; }

/* The metadata of a kernel's tensor view. */
static tf__meta meta_of(const tfd_tensor_view *v) {
    tf__meta m;
    memset(&m, 0, sizeof m);
    m.dtype = v->dtype;
    m.rank = v->rank;
    if (v->rank > 0 && v->rank <= TF_MAX_RANK)
        memcpy(m.shape, v->shape, sizeof(int64_t) * (size_t)v->rank);
    return m;
}

tf_status tfd_contract_plan_of(const tfd_op *op, tfd_contract_plan *plan, char *msg,
                               size_t msg_len) {
    if (op->kind != TF__OP_CONTRACT || op->n_inputs != op->contract.n_inputs ||
        op->n_inputs < 1 || op->n_inputs > 2) {
        snprintf(msg, msg_len, "contract: the item's %d inputs disagree with its descriptor (%d)",
                 op->n_inputs, op->contract.n_inputs);
        return TF_ERR_INTERNAL;
    }
    tf__meta in[2] = {meta_of(&op->in[0]), meta_of(&op->in[1])};
    tf__meta out;
    tf_status st = tfd_contract_cache_get(&daemon_plans, &op->contract, in, &out, plan, msg, msg_len);
    if (st != TF_OK) return st;
    int same = out.dtype == op->out.dtype && out.rank == op->out.rank;
    for (int j = 0; same && j < out.rank; j++) same = out.shape[j] == op->out.shape[j];
    if (!same || plan->out_numel != op->out.numel) {
        snprintf(msg, msg_len, "contract: the output tensor is not what the contraction makes");
        return TF_ERR_SHAPE;
    }
    return TF_OK;
}

int tfd_contract_plans_caches(tfd_backend *be, tfd_cache_stats *out, int max) {
    (void)be;
    if (max < 1 || out == NULL) return 0;
    tfd_contract_cache_stats(&daemon_plans, &out[0]);
    return 1;
}
