/*
 * The executor: logical streams, their FIFOs, the worker pool that serves
 * them, and the completion path back to the event loop.
 *
 * Each client connection owns one logical stream. Items queued on a stream run
 * in order, served by one worker at a time; different streams are served by
 * different workers concurrently, so one client's work never waits behind
 * another's on a single thread. Items that someone waits for (markers, reads)
 * complete through the backend's events: a worker records an event after the
 * item, a completion thread waits on it, and the loop thread is woken
 * through an eventfd it watches to run the item's callback. The loop thread
 * never blocks on device work.
 *
 * Failure is sticky until reported: once an item fails, every later operation
 * and read on that stream is skipped until the next marker, which reports the
 * failure (status, message, the batch and the index inside it) and clears it.
 */
#ifndef TENFERRO_DAEMON_EXECUTOR_H
#define TENFERRO_DAEMON_EXECUTOR_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "daemon/backend/backend.h"
#include "daemon/busy-poll.h"

typedef struct tfd_executor tfd_executor;
typedef struct tfd_stream tfd_stream;
typedef struct tfd_item tfd_item;

typedef enum tfd_item_type {
    TFD_ITEM_OP = 1,     /* run op */
    TFD_ITEM_WRITE = 2,  /* copy host bytes into device memory */
    TFD_ITEM_READ = 3,   /* copy device memory into host bytes, then complete */
    TFD_ITEM_FREE = 4,   /* free device memory */
    TFD_ITEM_MARKER = 5, /* complete once everything before it has completed */
    TFD_ITEM_ZERO = 6,   /* zero device memory a client has not written (never skipped) */
    TFD_ITEM_CALL = 7,   /* run u.call.fn on the worker, in order (never skipped) */
    TFD_ITEM_RUN = 8,    /* run u.run.fn like an operation (a prepared graph's run) */
} tfd_item_type;

/* Runs on the loop thread when a READ, MARKER or waited-for WRITE item has completed. */
typedef void (*tfd_item_done_fn)(tfd_item *item);

/*
 * Runs on whichever executor thread learns an item's outcome (the completion
 * thread, or the worker when the backend completes synchronously), before the
 * item travels to the loop: it may publish that outcome to someone outside
 * the daemon at once. It must not touch state the loop thread owns.
 */
typedef void (*tfd_item_early_fn)(tfd_item *item);

/* What a completed item reports: OK, or the stream's first failure since the last report. */
typedef struct tfd_item_outcome {
    tf_status status;
    uint64_t batch;      /* batch of the failed item */
    uint32_t index;      /* its index inside that batch */
    char message[256];
} tfd_item_outcome;

/* Copies on the copy queue one operation item can wait for by name (more: it waits for them all). */
#define TFD_ITEM_WAITS 4

struct tfd_item {
    tfd_item *next;
    tfd_item_type type;
    uint64_t batch;      /* submission that carried this item; 0 for none */
    uint32_t index;      /* position inside that submission */
    union {
        tfd_op op;
        struct {
            void *device;    /* WRITE: destination; READ: source */
            void *host;      /* WRITE: source; READ: destination */
            size_t bytes;
            void *owned;     /* WRITE: the frame holding the source bytes, freed with the item;
                                NULL when the host memory is someone else's (a pinned buffer) */
        } copy;
        struct {
            void *ptr;
            size_t bytes;
        } free; /* FREE, and ZERO: the range to zero */
        struct {
            void (*fn)(tfd_stream *s, void *arg);
            void *arg;
        } call;
        /*
         * RUN: fn runs on the worker like an operation (skipped while the
         * stream has a failure, a failure of its own recorded like one);
         * skipped runs when fn did not run or failed, to leave the outputs
         * holding zeros; drop frees arg when the item goes.
         */
        struct {
            tf_status (*fn)(tfd_backend *be, void *native, void *arg, char *msg, size_t msg_len);
            void (*skipped)(tfd_backend *be, void *native, void *arg);
            void (*drop)(void *arg);
            void *arg;
        } run;
    } u;
    /*
     * For READ and MARKER, and for a WRITE that sets it (a pending upload):
     * called on the loop thread once complete, also when a cancelled stream
     * skipped the copy (outcome TF_ERR_DISCONNECTED, or TF_ERR_DEVICE once the
     * backend reports its device lost).
     */
    tfd_item_done_fn done;
    tfd_item_early_fn early; /* optional; see tfd_item_early_fn */
    int keeps_failure;       /* MARKER: completes OK and leaves the stream's failure to the next one */
    void *done_arg;
    uint64_t tag;        /* the waiting request's sequence number */
    void *event; /* backend event recorded after this item, if any */
    tfd_stream *stream;
    /*
     * Order across the stream's compute and copy queues (sync-point.h): an
     * OP or RUN item waits for `waits` (uploads of its inputs still on the
     * copy queue) before it runs, or for every side copy when they did not
     * fit, and records `mark` after itself (the next upload into one of its
     * tracked inputs waits for it). A WRITE or READ with `side` runs on the
     * copy queue after `after` (NULL: after everything before it), and
     * `point` receives the event recorded after it, which is also the event
     * its completion waits for.
     */
    struct tfd_sync_point *waits[TFD_ITEM_WAITS];
    int n_waits;
    int join_copies;
    struct tfd_sync_point *mark;
    int side;
    struct tfd_sync_point *after;
    struct tfd_sync_point *point;
    /* Last: its message is written only when the item reports a failure (tfd_item_new leaves it). */
    tfd_item_outcome outcome;
};

/*
 * Counters the executor keeps, readable from any thread. The workers count
 * what they ran, the loop thread what it allocates for each operation it
 * accepts: the two groups sit a cache line apart, so a worker finishing
 * operations does not take the line from the loop at every one.
 */
typedef struct tfd_executor_counters {
    atomic_uint_fast64_t items_executed;
    atomic_uint_fast64_t ops_executed;
    atomic_uint_fast64_t execution_errors;
    char apart[64];
    atomic_uint_fast64_t device_bytes_live;
    atomic_uint_fast64_t device_allocations_live;
} tfd_executor_counters;

/* Starts `workers` worker threads and one completion thread on backend `be`. */
tf_status tfd_executor_start(uv_loop_t *loop, tfd_backend *be, int workers, tfd_executor **out);

/*
 * Registers what to call (on the loop thread, once) when the backend reports
 * that the device can no longer be trusted. The backend's health is asked
 * when a failed item reaches the loop, and at once when a worker sees
 * TF_ERR_DEVICE, even in work nobody waits for.
 */
void tfd_executor_on_device_lost(tfd_executor *ex, void (*fn)(void *arg, const char *reason),
                                 void *arg);

/*
 * Shares the loop's busy-polling window (busy-poll.h): completions count as
 * activity, and inside the window the completion thread polls its queue
 * instead of sleeping on it. Without one it always sleeps.
 */
void tfd_executor_set_busy_poll(tfd_executor *ex, tfd_busy_poll *bp);

/* Stops the threads after they finish what is queued; streams must be destroyed first. */
void tfd_executor_stop(tfd_executor *ex);

tfd_executor_counters *tfd_executor_counters_of(tfd_executor *ex);
tfd_backend *tfd_executor_backend(tfd_executor *ex);

/* Creates a logical stream with the backend's native stream behind it. */
tf_status tfd_stream_create(tfd_executor *ex, int priority, tfd_stream **out, char *msg,
                            size_t msg_len);

/* Destroys an idle stream (the caller has waited for its last marker). */
void tfd_stream_destroy(tfd_stream *s);

/*
 * Frees device memory of a stream whose owner is gone at once, without a
 * FREE item (the connection's final free, for what no item could be made
 * for): waits until no worker holds the stream, so nothing queued still reads
 * it; an asynchronous backend's free is ordered on the stream. Counted like
 * an executed FREE.
 */
void tfd_stream_free_now(tfd_stream *s, void *ptr, size_t bytes);

/*
 * Loop thread: frees device memory at once when the backend finishes its work
 * in the call and no worker holds the stream (nothing queued or running can
 * read it), counted like an executed FREE, and returns 1; else 0 and the
 * caller queues a FREE item.
 */
int tfd_stream_free_if_idle(tfd_stream *s, void *ptr, size_t bytes);

/* The backend's native stream behind a logical stream (for allocation). */
void *tfd_stream_native(tfd_stream *s);

/*
 * Frees device memory from a CALL item's function on the worker (the
 * executor's byte counters follow), as a FREE item would.
 */
void tfd_stream_free_memory(tfd_stream *s, void *ptr, size_t bytes);

/* Number of items queued and not yet executed. */
uint64_t tfd_stream_queued(tfd_stream *s);
/* Items with a done callback that has not run on the loop yet; loop thread only. */
uint64_t tfd_stream_awaiting(const tfd_stream *s);

/*
 * When the stream has nothing queued or running and its device work has
 * completed (a synchronous backend's always has; an asynchronous one is asked
 * without waiting), takes the stream's pending failure into *outcome and
 * returns 1: a marker would complete at once, so the loop can answer without
 * a round trip through the workers. Returns 0 otherwise.
 */
int tfd_stream_complete_if_idle(tfd_stream *s, tfd_item_outcome *outcome);

/*
 * Marks the stream's owner as gone: operations, writes and reads still queued
 * are skipped (frees and markers still run), so a dead client's backlog does
 * not delay the release of what it held.
 */
void tfd_stream_cancel(tfd_stream *s);

/*
 * Loop thread: takes a WRITE or READ item whose host side is page-locked (a
 * pinned buffer) instead of queueing it, when no worker holds the stream, so
 * its order is kept. A backend whose copies only enqueue device work (they
 * never wait) has it issued at once; one that finishes in the call (the CPU)
 * has a copy of up to 1 MiB run by the loop once the turn's requests are
 * answered (tfd_executor_run_loop_copies), the stream held meanwhile, which
 * spares a worker's wake-up. Returns 1 when the item was taken (it completes
 * like a queued one), 0 when the caller must enqueue it.
 */
int tfd_stream_execute_now(tfd_stream *s, tfd_item *item);

/*
 * Loop thread, once the requests of this turn are answered: runs the copies
 * tfd_stream_execute_now took for the loop, publishing each as a worker
 * would, then lets its stream go (to a worker, if more was queued behind).
 */
void tfd_executor_run_loop_copies(tfd_executor *ex);

/*
 * Loop thread, once the requests of this turn are answered: watches the
 * copies tfd_stream_execute_now issued for about their own time, publishing
 * each that ends meanwhile from here and handing the others to the
 * completion thread, which would otherwise have to wake for each.
 */
void tfd_executor_watch_copies(tfd_executor *ex);

/*
 * Queues fn(s, arg) on a worker in the stream's order, then a marker whose
 * completion runs done(item) on the loop with item->done_arg = done_arg
 * (item->outcome says whether the stream was cancelled meanwhile). The
 * marker keeps the stream's failure for the next one. TF_ERR_NO_MEMORY, with
 * nothing queued, when the items cannot be made.
 */
tf_status tfd_stream_enqueue_call(tfd_stream *s, void (*fn)(tfd_stream *s, void *arg), void *arg,
                                  tfd_item_done_fn done, void *done_arg);

/* Appends a chain of items (linked through ->next, `count` of them) to the stream. */
void tfd_stream_enqueue(tfd_stream *s, tfd_item *first, tfd_item *last, uint64_t count);

/*
 * Allocates device memory on the stream and counts it; frees likewise. The
 * counters make "every byte came back" checkable from tenferroctl status.
 */
tf_status tfd_stream_alloc(tfd_stream *s, size_t bytes, void **ptr, char *msg, size_t msg_len);
void tfd_executor_note_free(tfd_executor *ex, size_t bytes);

#endif
