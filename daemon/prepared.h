/*
 * Prepared graphs at run time (prepared.c): the executable instance of a
 * plan, its device memory, its device graph where the backend makes one,
 * one run of it, and the daemon-wide cache that keeps instances for the next
 * client that prepares an equal graph (docs/prepared.md).
 *
 * An instance (tfd_prepared_exec) is self-contained: a plan, one block of
 * device memory (the arena) for the values it keeps, and on a backend with
 * graph_capture a device graph bound to that arena. It is used by one
 * connection at a time: the cache is exclusive, so a second client preparing
 * a graph whose instance is in use gets an instance of its own (a twin). When
 * its connection lets go (PreparedFree, or the connection's end), the
 * instance goes back to the cache only after every run queued on that
 * connection's stream has completed on the device, so the next user never
 * races the last one; its arena then holds values of the last user that no
 * handle reaches, and every run overwrites each value before reading it.
 */
#ifndef TENFERRO_DAEMON_PREPARED_H
#define TENFERRO_DAEMON_PREPARED_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/backend/backend.h"
#include "daemon/backend/plan-cache.h"
#include "daemon/graph-plan.h"

typedef struct tfd_prepared_exec tfd_prepared_exec;

/* One connection's prepared graph (its table in tfd_conn.prepared, keyed by the client's id). */
typedef struct tfd_prepared_ref {
    uint64_t id;
    struct tfd_plan_entry *entry; /* the instance, taken from the cache for this connection */
    uint64_t bytes;               /* device memory charged to the connection for it */
    int freed;                    /* PreparedFree found no memory to queue its give-back: */
                                  /* unusable now, given back with the connection */
} tfd_prepared_ref;

/* The daemon-wide cache of instances, keyed by the plan's canonical form. */
typedef struct tfd_prepared_cache {
    tfd_plan_cache cache;
    tfd_backend *be;
} tfd_prepared_cache;

/* Opens the cache for backend be, keeping at most `capacity` instances (0 = unbounded); 0 or -1. */
int tfd_prepared_cache_init(tfd_prepared_cache *pc, tfd_backend *be, uint64_t capacity);

/* Destroys every instance (none may be in use or running) and the cache. */
void tfd_prepared_cache_destroy(tfd_prepared_cache *pc);

/*
 * Takes an idle instance of a plan equal to `plan`, counting a hit; NULL when
 * there is none (the caller builds one). Any thread.
 */
tfd_plan_entry *tfd_prepared_take(tfd_prepared_cache *pc, const tfd_graph_plan *plan);

/*
 * Builds an instance of plan (which it takes over, also on failure): the
 * arena, and the device graph where the backend captures one (a capture the
 * backend refuses falls back to running the nodes one by one). Inserts it
 * taken and counts a miss. Destroys instances the cache let go of first.
 * On a worker thread: it allocates and may wait for the device.
 */
tf_status tfd_prepared_build(tfd_prepared_cache *pc, tfd_graph_plan *plan, tfd_plan_entry **entry,
                             char *msg, size_t msg_len);

/*
 * The arena an instance of plan is built with: laid out for a device graph
 * (every value in it) when the backend captures graphs, else to run the
 * nodes one by one. A capture the backend refuses only makes it smaller;
 * the device graph itself may hold more (tfd_prepared_bytes says all). 0
 * when it cannot be worked out (no host memory; the build reports it). Any
 * thread; allocates nothing on the device.
 */
uint64_t tfd_prepared_arena_bytes(const tfd_prepared_cache *pc, const tfd_graph_plan *plan);

/*
 * Gives a taken instance back (idle, for the next equal prepare); the caller
 * guarantees every run of it has completed. Any thread.
 */
void tfd_prepared_give_back(tfd_prepared_cache *pc, tfd_plan_entry *entry);

/*
 * Gives a taken instance back and out of the cache (one built for a client
 * its quota then refused: kept idle, its memory would be charged to nobody).
 * Nothing has run it. Any thread.
 */
void tfd_prepared_discard(tfd_prepared_cache *pc, tfd_plan_entry *entry);

/* Destroys instances the cache let go of and could not destroy then; on a worker thread. */
void tfd_prepared_cache_drain(tfd_prepared_cache *pc);

/* Empties the cache (trim); returns how many instances it let go of. */
uint64_t tfd_prepared_cache_clear(tfd_prepared_cache *pc);

/* The cache's counters ("prepared_graphs"). */
void tfd_prepared_cache_stats(tfd_prepared_cache *pc, tfd_cache_stats *out);

/* What an instance runs, and the device memory it holds (its arena and graph). */
tfd_prepared_exec *tfd_prepared_exec_of(tfd_plan_entry *entry);
const tfd_graph_plan *tfd_prepared_plan(const tfd_prepared_exec *x);
uint64_t tfd_prepared_bytes(const tfd_prepared_exec *x);
/* 1 when the instance replays a device graph, 0 when it runs its nodes one by one. */
int tfd_prepared_is_graph(const tfd_prepared_exec *x);

/*
 * One run on `stream` (a worker, in the stream's order): the graph's inputs
 * read from in[i], its outputs written to out[o] (fresh tensors of the
 * outputs' sizes). `batch` and `index` name the run in its Submit (a
 * linear-algebra node's failure the device reports later names it). A
 * node's failure stops the run, its message naming the node. Nothing is
 * checked here: the batch checked the tensors against the plan.
 */
tf_status tfd_prepared_run(tfd_backend *be, void *stream, tfd_prepared_exec *x, uint64_t batch,
                           uint32_t index, void *const *in, void *const *out, char *msg,
                           size_t msg_len);

#endif
