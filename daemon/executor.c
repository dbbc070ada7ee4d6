/*
 * The executor (see executor.h): stream FIFOs, the worker pool, the completion
 * thread, and the eventfd through which completed items reach the loop.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/spin.h"
#include "daemon/executor.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/sync-point.h"

/* An item waiting on the completion thread for its backend event. */
typedef struct pending_event {
    tfd_item *item;
} pending_event;

struct tfd_stream {
    tfd_executor *ex;
    void *native;
    pthread_mutex_t lock;
    tfd_item *head, *tail;
    int scheduled; /* in the run queue or being served */
    int running;   /* a worker is executing items taken from it */
    pthread_cond_t idle; /* signalled when a worker gives the stream up (scheduled drops to 0) */
    atomic_uint_fast64_t queued;
    atomic_int cancelled; /* the owner is gone: skip work, keep frees and markers */
    uint64_t awaiting; /* items with a callback that has not run yet, loop thread only */
    /* Sticky failure, owned by whichever worker serves the stream. */
    tfd_item_outcome failure;
    tfd_stream *run_next;
};

struct tfd_executor {
    uv_loop_t *loop;
    tfd_backend *be;
    tfd_executor_counters counters;

    pthread_mutex_t lock; /* run queue */
    pthread_cond_t wake;
    tfd_stream *run_head, *run_tail;
    int stopping;
    atomic_int runnable;  /* streams in the run queue, or stopping: read by a polling worker */
    int worker_polling;   /* a worker polls runnable instead of sleeping (at most one) */
    int n_workers;
    pthread_t *workers;

    pthread_mutex_t event_lock; /* completion thread queue */
    pthread_cond_t event_wake;
    tfd_item *event_head, *event_tail;
    atomic_uint events_queued; /* items in that queue, read without the lock while polling */
    int event_stopping;
    tfd_busy_poll *busy_poll;
    pthread_t event_thread;

    void (*device_lost)(void *arg, const char *reason);
    void *device_lost_arg;
    int device_lost_reported;
    atomic_int health_due; /* a worker saw a device error: the loop asks the backend's health */

    /* Copies the loop issued itself (tfd_stream_execute_now), watched once it has answered. */
    int issuing_on_loop;
    tfd_item *watch_head, *watch_tail;
    /* Copies the loop runs itself once it has answered (a backend that finishes in the call). */
    tfd_item *loop_head, *loop_tail;
    /*
     * Items handed to the completion thread and not yet posted, and copies in
     * the loop's watch list: while either is nonzero, no copy is published
     * past them (completions, and the replies they send, keep their order).
     */
    atomic_uint events_unposted;
    atomic_uint watching;

    pthread_mutex_t done_lock; /* completed items for the loop */
    tfd_item *done_head, *done_tail;
    int done_fd;        /* eventfd: readable while completed items wait for the loop */
    uv_poll_t done_poll; /* the loop's watch on done_fd */
};

tfd_executor_counters *tfd_executor_counters_of(tfd_executor *ex) { return &ex->counters; }
tfd_backend *tfd_executor_backend(tfd_executor *ex) { return ex->be; }

/*
 * Hands a completed item to the loop thread and wakes it. Only the item that
 * finds the list empty writes the eventfd: the loop reads the eventfd before
 * it takes the list, so a later item either joins a list the loop has yet to
 * take or finds it empty and writes again. (An eventfd of our own rather
 * than uv_async: uv_async_send marks the handle busy around its write, and
 * the loop, woken by that very write, spun until the sender returned.)
 */
static void post_done(tfd_executor *ex, tfd_item *it) {
    it->next = NULL;
    pthread_mutex_lock(&ex->done_lock);
    const int was_empty = ex->done_head == NULL;
    if (ex->done_tail)
        ex->done_tail->next = it;
    else
        ex->done_head = it;
    ex->done_tail = it;
    pthread_mutex_unlock(&ex->done_lock);
    if (was_empty) {
        const uint64_t one = 1;
        while (write(ex->done_fd, &one, sizeof one) < 0 && errno == EINTR) {
        }
    }
}

/*
 * Lets go of the event an item's completion waited for: a side copy's is its
 * sync point's, shared with the work that waits for the copy (dropped with
 * that reference); any other is the item's own.
 */
static void release_event(tfd_executor *ex, tfd_item *it, void *event) {
    if (it->point && tfd_sync_point_event(it->point) == event) {
        tfd_sync_point_unref(it->point);
        it->point = NULL;
        return;
    }
    ex->be->vt->event_destroy(ex->be, event);
}

/* Loop thread: runs the callbacks of every item completed since the last wake-up. */
static void on_done_ready(uv_poll_t *h, int status, int events) {
    (void)status;
    (void)events;
    tfd_executor *ex = h->data;
    uint64_t posted;
    if (read(ex->done_fd, &posted, sizeof posted) < 0 && errno != EAGAIN && errno != EINTR)
        tfd_log(TFD_LOG_ERROR, "reading the completion eventfd failed: %s", strerror(errno));
    if (ex->busy_poll) tfd_busy_poll_touch(ex->busy_poll);
    pthread_mutex_lock(&ex->done_lock);
    tfd_item *it = ex->done_head;
    ex->done_head = ex->done_tail = NULL;
    pthread_mutex_unlock(&ex->done_lock);
    int failed = atomic_exchange(&ex->health_due, 0);
    while (it) {
        tfd_item *next = it->next;
        failed |= it->outcome.status != TF_OK;
        it->stream->awaiting--; /* before the callback, which may destroy the stream */
        it->done(it);
        it = next;
    }
    /* A failure may mean the device itself is gone: ask the backend once per failure seen. */
    char reason[512];
    if (failed && !ex->device_lost_reported && ex->device_lost && ex->be->vt->health &&
        ex->be->vt->health(ex->be, reason, sizeof reason) != TF_OK) {
        ex->device_lost_reported = 1;
        ex->device_lost(ex->device_lost_arg, reason);
    }
}

/*
 * The completion thread is already running and reads the window under
 * event_lock, so the pointer is set under it too (the loop thread, which
 * also reads it, is the one setting it).
 */
void tfd_executor_set_busy_poll(tfd_executor *ex, tfd_busy_poll *bp) {
    pthread_mutex_lock(&ex->event_lock);
    ex->busy_poll = bp;
    pthread_mutex_unlock(&ex->event_lock);
}

/*
 * Completion thread, with ex->event_lock held: returns once an item is queued
 * or the executor stops, polling while the busy-polling window is open and
 * sleeping on the condition variable otherwise.
 */
static void await_event_locked(tfd_executor *ex) {
    while (!ex->event_head && !ex->event_stopping) {
        tfd_busy_poll *bp = ex->busy_poll; /* read under the lock, used outside it */
        if (bp && tfd_busy_poll_active(bp)) {
            pthread_mutex_unlock(&ex->event_lock);
            while (!atomic_load_explicit(&ex->events_queued, memory_order_relaxed) &&
                   tfd_busy_poll_active(bp))
                tf__cpu_relax();
            pthread_mutex_lock(&ex->event_lock);
            continue;
        }
        pthread_cond_wait(&ex->event_wake, &ex->event_lock);
    }
}

void tfd_executor_on_device_lost(tfd_executor *ex, void (*fn)(void *arg, const char *reason),
                                 void *arg) {
    ex->device_lost = fn;
    ex->device_lost_arg = arg;
}

/* Publishes an item whose event completed: its status, its early callback, then the loop's. */
static void publish_completed(tfd_executor *ex, tfd_item *it, void *event) {
    char msg[256] = "";
    tf_status st = ex->be->vt->event_wait(ex->be, event, msg, sizeof msg);
    uint64_t batch = it->batch;
    uint32_t index = it->index;
    /*
     * A failure the device found after its call returned (a solver's info)
     * names its own operation; a synchronize forgets it once reported, a
     * download reports it and leaves it for the synchronize.
     */
    const int marker = it->type == TFD_ITEM_MARKER && !it->keeps_failure;
    if (st == TF_OK && it->outcome.status == TF_OK && ex->be->vt->event_failure &&
        (marker || it->type == TFD_ITEM_READ))
        st = ex->be->vt->event_failure(ex->be, event, marker, &batch, &index, msg, sizeof msg);
    release_event(ex, it, event);
    if (st != TF_OK && it->outcome.status == TF_OK) {
        it->outcome.status = st;
        it->outcome.batch = batch;
        it->outcome.index = index;
        snprintf(it->outcome.message, sizeof it->outcome.message, "%s", msg);
        atomic_fetch_add(&ex->counters.execution_errors, 1);
    }
    if (it->early) it->early(it);
    post_done(ex, it);
}

/* Completion thread: waits on each recorded event in order, then posts the item. */
static void *event_thread_main(void *arg) {
    tfd_executor *ex = arg;
    for (;;) {
        pthread_mutex_lock(&ex->event_lock);
        await_event_locked(ex);
        tfd_item *it = ex->event_head;
        if (!it) {
            pthread_mutex_unlock(&ex->event_lock);
            return NULL;
        }
        atomic_fetch_sub_explicit(&ex->events_queued, 1, memory_order_relaxed);
        ex->event_head = it->next;
        if (!ex->event_head) ex->event_tail = NULL;
        pthread_mutex_unlock(&ex->event_lock);

        void *event = it->event;
        it->event = NULL;
        publish_completed(ex, it, event);
        atomic_fetch_sub_explicit(&ex->events_unposted, 1, memory_order_release);
    }
}

/*
 * A device error seen by a worker: wakes the loop to ask the backend's health
 * now, so a device lost by work nobody waits for (a held session's plain
 * submit) is still reported at once, not at the next synchronization.
 */
static void wake_for_health(tfd_executor *ex) {
    atomic_store(&ex->health_due, 1);
    const uint64_t one = 1;
    while (write(ex->done_fd, &one, sizeof one) < 0 && errno == EINTR) {
    }
}

/* Records the stream's first failure since the last marker. */
static void note_failure(tfd_stream *s, tfd_item *it, tf_status st, const char *msg) {
    atomic_fetch_add(&s->ex->counters.execution_errors, 1);
    if (st == TF_ERR_DEVICE) wake_for_health(s->ex);
    if (s->failure.status != TF_OK) return;
    s->failure.status = st;
    s->failure.batch = it->batch;
    s->failure.index = it->index;
    snprintf(s->failure.message, sizeof s->failure.message, "%s", msg);
}

/*
 * The thread that issued a copy someone waits for (a pending transfer) watches
 * its stream for about the copy's own time before handing the event to the
 * completion thread: a copy that ends meanwhile is published from here, which
 * spares the completion thread's wake-up (tens of microseconds on a virtual
 * machine, a large share of a transfer of a megabyte). The watch is bounded,
 * so a large copy still goes to the completion thread at once.
 */
/*
 * The largest copy the loop runs itself on a backend that finishes in the
 * call (the CPU): about 100 us of the loop at this machine's 10 GB/s, which
 * saves the worker's wake-up (10-30 us on a 2-vCPU virtual machine, more
 * when other work holds a core) and the completion's trip back to the loop.
 */
#define LOOP_COPY_MAX_BYTES ((size_t)1 << 20)

#define COPY_WATCH_BYTES_PER_NS 20u /* 20 GB/s: about a PCIe 5 link's pinned rate */
#define COPY_WATCH_BASE_NS 8000u
#define COPY_WATCH_MAX_NS 100000u

/* 1 when item it is a copy worth watching: small enough to end within the watch. */
static int copy_watchable(tfd_executor *ex, const tfd_item *it) {
    if ((it->type != TFD_ITEM_READ && it->type != TFD_ITEM_WRITE) || !ex->be->vt->event_done)
        return 0;
    return COPY_WATCH_BASE_NS + it->u.copy.bytes / COPY_WATCH_BYTES_PER_NS <= COPY_WATCH_MAX_NS;
}

/* 1 when no completion is still to be posted ahead of one published now. */
static int nothing_ahead(tfd_executor *ex) {
    return atomic_load_explicit(&ex->events_unposted, memory_order_acquire) == 0 &&
           atomic_load_explicit(&ex->watching, memory_order_acquire) == 0;
}

/* 1 when the event recorded after copy item it completed within about the copy's expected time. */
static int copy_done_soon(tfd_executor *ex, const tfd_item *it, void *event) {
    const uint64_t expect = COPY_WATCH_BASE_NS + it->u.copy.bytes / COPY_WATCH_BYTES_PER_NS;
    const uint64_t start = tf__now_ns();
    do {
        if (ex->be->vt->event_done(ex->be, event)) return 1;
        tf__cpu_relax();
    } while (tf__now_ns() - start < expect);
    return 0;
}

/* Hands an item and its recorded event to the completion thread. */
static void queue_for_event(tfd_executor *ex, tfd_item *it, void *event) {
    it->event = event;
    it->next = NULL;
    pthread_mutex_lock(&ex->event_lock);
    if (ex->event_tail)
        ex->event_tail->next = it;
    else
        ex->event_head = it;
    ex->event_tail = it;
    atomic_fetch_add_explicit(&ex->events_queued, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ex->events_unposted, 1, memory_order_release);
    pthread_cond_signal(&ex->event_wake);
    pthread_mutex_unlock(&ex->event_lock);
}

void tfd_executor_watch_copies(tfd_executor *ex) {
    while (ex->watch_head) {
        tfd_item *it = ex->watch_head;
        ex->watch_head = it->next;
        if (!ex->watch_head) ex->watch_tail = NULL;
        void *event = it->event;
        it->event = NULL;
        /* This one is still counted in `watching`: what else is ahead is the completion thread's. */
        int alone = atomic_load_explicit(&ex->events_unposted, memory_order_acquire) == 0;
        if (alone && copy_done_soon(ex, it, event))
            publish_completed(ex, it, event);
        else
            queue_for_event(ex, it, event);
        atomic_fetch_sub_explicit(&ex->watching, 1, memory_order_release);
    }
}

/*
 * Lets the stream go after the loop or a worker ran items taken from it:
 * requeued behind the others if more arrived meanwhile, else given up.
 */
static void release_stream(tfd_executor *ex, tfd_stream *s);
static int execute_item(tfd_stream *s, tfd_item *it);

void tfd_executor_run_loop_copies(tfd_executor *ex) {
    while (ex->loop_head) {
        tfd_item *it = ex->loop_head;
        ex->loop_head = it->next;
        if (!ex->loop_head) ex->loop_tail = NULL;
        tfd_stream *s = it->stream;
        pthread_mutex_lock(&s->lock);
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        execute_item(s, it);
        atomic_fetch_sub(&s->queued, 1);
        atomic_fetch_add(&ex->counters.items_executed, 1);
        release_stream(ex, s);
    }
}

/* Sends an item someone waits for down the completion path: at once, or via its event. */
static void complete_item(tfd_stream *s, tfd_item *it) {
    tfd_executor *ex = s->ex;
    char msg[256] = "";
    /* A copy that ran on the copy queue completes with the event recorded after it there. */
    void *event = tfd_sync_point_event(it->point);
    tf_status st = TF_OK;
    if (!event) st = ex->be->vt->event_record(ex->be, s->native, &event, msg, sizeof msg);
    if (st != TF_OK && it->outcome.status == TF_OK) {
        it->outcome.status = st;
        snprintf(it->outcome.message, sizeof it->outcome.message, "%s", msg);
    }
    if (!event) {
        if (it->early) it->early(it);
        post_done(ex, it);
        return;
    }
    if (copy_watchable(ex, it)) {
        if (ex->issuing_on_loop) {
            /* The loop answers its request first, then watches (tfd_executor_watch_copies). */
            it->event = event;
            it->next = NULL;
            if (ex->watch_tail)
                ex->watch_tail->next = it;
            else
                ex->watch_head = it;
            ex->watch_tail = it;
            atomic_fetch_add_explicit(&ex->watching, 1, memory_order_release);
            return;
        }
        if (nothing_ahead(ex) && copy_done_soon(ex, it, event)) {
            publish_completed(ex, it, event);
            return;
        }
    }
    queue_for_event(ex, it, event);
}

/*
 * Zeroes memory whose intended writer (an operation or a copy) did not run;
 * the stream's failure is already recorded, so this one's own is only logged
 * by the backend.
 */
static void zero_quietly(tfd_backend *be, tfd_stream *s, void *ptr, size_t bytes) {
    if (ptr && bytes) (void)be->vt->fill_zero(be, s->native, ptr, bytes);
}

/*
 * What a copy skipped on a cancelled stream reports to whoever waits for it
 * (a pending transfer's slot): TF_ERR_DEVICE when the stream was cancelled
 * because the device is lost, which is why the copy never ran; otherwise
 * TF_ERR_DISCONNECTED, the owner having gone.
 */
static tf_status skipped_status(tfd_backend *be) {
    char why[8];
    return be->vt->health && be->vt->health(be, why, sizeof why) != TF_OK ? TF_ERR_DEVICE
                                                                          : TF_ERR_DISCONNECTED;
}

/*
 * Before an operation: the stream waits for the uploads of its inputs still
 * on the copy queue (or for every side copy, when more than fit the item).
 */
static tf_status wait_for_copies(tfd_stream *s, tfd_item *it, char *msg, size_t msg_len) {
    const tfd_backend_vtable *vt = s->ex->be->vt;
    if (!vt->stream_wait) return TF_OK;
    if (it->join_copies) return vt->join_side_copies(s->ex->be, s->native, msg, msg_len);
    for (int i = 0; i < it->n_waits; i++) {
        void *ev = tfd_sync_point_event(it->waits[i]);
        tf_status st = ev ? vt->stream_wait(s->ex->be, s->native, ev, msg, msg_len)
                          : vt->join_side_copies(s->ex->be, s->native, msg, msg_len);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* After an operation that reads a tracked tensor: the event the next upload into it waits for. */
static void mark_after(tfd_stream *s, tfd_item *it) {
    if (!it->mark) return;
    char msg[64];
    void *ev = NULL;
    /* Without an event the next upload waits for everything before it instead. */
    if (s->ex->be->vt->event_record(s->ex->be, s->native, &ev, msg, sizeof msg) == TF_OK && ev)
        tfd_sync_point_set(it->mark, ev);
}

/* What comes next on the stream waits for every side copy issued so far. */
static void join_copies(tfd_stream *s) {
    char msg[256];
    if (s->ex->be->vt->join_side_copies &&
        s->ex->be->vt->join_side_copies(s->ex->be, s->native, msg, sizeof msg) != TF_OK)
        tfd_log(TFD_LOG_ERROR, "joining the copy queue: %s", msg);
}

/* A pending transfer's copy on the stream's copy queue, after `after`, its event into `point`. */
static tf_status side_copy(tfd_stream *s, tfd_item *it, int to_device, char *msg, size_t msg_len) {
    tfd_backend *be = s->ex->be;
    void *done = NULL;
    void *dst = to_device ? it->u.copy.device : it->u.copy.host;
    const void *src = to_device ? it->u.copy.host : it->u.copy.device;
    tf_status st = be->vt->side_copy(be, s->native, to_device, dst, src, it->u.copy.bytes,
                                     tfd_sync_point_event(it->after), &done, msg, msg_len);
    if (st == TF_OK) tfd_sync_point_set(it->point, done);
    return st;
}

/* Runs one item on the worker that serves its stream; returns 1 when it ran an operation. */
static int execute_item(tfd_stream *s, tfd_item *it) {
    tfd_executor *ex = s->ex;
    tfd_backend *be = ex->be;
    char msg[256] = "";
    tf_status st = TF_OK;
    if (atomic_load_explicit(&s->cancelled, memory_order_relaxed) && it->type != TFD_ITEM_FREE &&
        it->type != TFD_ITEM_MARKER && it->type != TFD_ITEM_ZERO && it->type != TFD_ITEM_CALL) {
        /* Whoever waits for a skipped copy (a pending transfer) still hears about it. */
        if (it->type == TFD_ITEM_READ || (it->type == TFD_ITEM_WRITE && it->done)) {
            it->outcome.status = skipped_status(be);
            complete_item(s, it);
            return 0;
        }
        tfd_item_free(it);
        return 0;
    }
    int ran = 0;
    switch (it->type) {
    case TFD_ITEM_OP:
        if (s->failure.status == TF_OK && (st = wait_for_copies(s, it, msg, sizeof msg)) != TF_OK)
            note_failure(s, it, st, msg);
        if (s->failure.status == TF_OK) {
            st = tfd_backend_run_op(be, s->native, &it->u.op, msg, sizeof msg);
            ran = 1;
            if (st != TF_OK) note_failure(s, it, st, msg);
        }
        /* A skipped or failed operation's output stays readable: it must hold zeros, not old bytes. */
        if (st != TF_OK || s->failure.status != TF_OK)
            zero_quietly(be, s, it->u.op.out.data,
                         (size_t)it->u.op.out.numel * tf_dtype_size(it->u.op.out.dtype));
        mark_after(s, it);
        break;
    case TFD_ITEM_WRITE:
        if (s->failure.status == TF_OK && it->side) {
            st = side_copy(s, it, 1, msg, sizeof msg);
            if (st != TF_OK) note_failure(s, it, st, msg);
        } else if (s->failure.status == TF_OK) {
            st = be->vt->copy_to_device(be, s->native, it->u.copy.device, it->u.copy.host,
                                        it->u.copy.bytes);
            if (st != TF_OK) note_failure(s, it, st, "copy to device failed");
        }
        /* The bytes a skipped write would have put there are zeros (the range counts as written). */
        if (st != TF_OK || s->failure.status != TF_OK)
            zero_quietly(be, s, it->u.copy.device, it->u.copy.bytes);
        /* A write someone waits for (a pending upload) completes like a read. */
        if (it->done) {
            it->outcome = s->failure;
            complete_item(s, it);
            return 0;
        }
        tfd_item_free(it);
        return 0;
    case TFD_ITEM_READ:
        if (s->failure.status == TF_OK && it->side) {
            st = side_copy(s, it, 0, msg, sizeof msg);
            if (st != TF_OK) note_failure(s, it, st, msg);
        } else if (s->failure.status == TF_OK) {
            st = be->vt->copy_to_host(be, s->native, it->u.copy.host, it->u.copy.device,
                                      it->u.copy.bytes);
            if (st != TF_OK) note_failure(s, it, st, "copy to host failed");
        }
        it->outcome = s->failure;
        complete_item(s, it);
        return 0;
    case TFD_ITEM_ZERO:
        st = be->vt->fill_zero(be, s->native, it->u.free.ptr, it->u.free.bytes);
        if (st != TF_OK && s->failure.status == TF_OK) note_failure(s, it, st, "zero-fill failed");
        break;
    case TFD_ITEM_CALL:
        it->u.call.fn(s, it->u.call.arg);
        break;
    case TFD_ITEM_RUN:
        if (s->failure.status == TF_OK && (st = wait_for_copies(s, it, msg, sizeof msg)) != TF_OK)
            note_failure(s, it, st, msg);
        if (s->failure.status == TF_OK) {
            st = it->u.run.fn(be, s->native, it->u.run.arg, msg, sizeof msg);
            ran = 1;
            if (st != TF_OK) note_failure(s, it, st, msg);
        }
        if (st != TF_OK || s->failure.status != TF_OK) it->u.run.skipped(be, s->native, it->u.run.arg);
        mark_after(s, it);
        break;
    case TFD_ITEM_FREE:
        join_copies(s); /* the memory may be a side copy's still */
        be->vt->free(be, s->native, it->u.free.ptr, it->u.free.bytes);
        tfd_executor_note_free(ex, it->u.free.bytes);
        break;
    case TFD_ITEM_MARKER:
        join_copies(s); /* everything enqueued before, side copies included */
        if (!it->keeps_failure) {
            it->outcome = s->failure;
            memset(&s->failure, 0, sizeof s->failure);
        }
        complete_item(s, it);
        return 0;
    }
    tfd_item_free(it);
    return ran;
}

/* Puts a stream at the tail of the run queue; the caller holds ex->lock. */
static void runq_push_locked(tfd_executor *ex, tfd_stream *s) {
    s->run_next = NULL;
    if (ex->run_tail)
        ex->run_tail->run_next = s;
    else
        ex->run_head = s;
    ex->run_tail = s;
    atomic_fetch_add_explicit(&ex->runnable, 1, memory_order_release);
    pthread_cond_signal(&ex->wake);
}

/*
 * Serves one stream: takes everything queued, runs it in order, and either
 * gives the stream up or requeues it behind the others if more arrived.
 */
static void serve_stream(tfd_executor *ex, tfd_stream *s) {
    pthread_mutex_lock(&s->lock);
    tfd_item *it = s->head;
    s->head = s->tail = NULL;
    s->running = 1;
    pthread_mutex_unlock(&s->lock);

    uint64_t done = 0, ops = 0;
    tfd_item_pool_hold(); /* the items this serving lets go return to the pool at once */
    while (it) {
        tfd_item *next = it->next;
        ops += (uint64_t)execute_item(s, it);
        done++;
        it = next;
    }
    tfd_item_pool_release();
    atomic_fetch_sub(&s->queued, done);
    atomic_fetch_add(&ex->counters.items_executed, done);
    if (ops) atomic_fetch_add(&ex->counters.ops_executed, ops);
    release_stream(ex, s);
}

static void release_stream(tfd_executor *ex, tfd_stream *s) {
    pthread_mutex_lock(&s->lock);
    s->running = 0;
    if (s->head) {
        pthread_mutex_lock(&ex->lock);
        runq_push_locked(ex, s);
        pthread_mutex_unlock(&ex->lock);
    } else {
        s->scheduled = 0;
        pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->lock);
}

/* The busy-polling window the completion thread also follows (NULL: never poll). */
static tfd_busy_poll *busy_poll_of(tfd_executor *ex) {
    pthread_mutex_lock(&ex->event_lock);
    tfd_busy_poll *bp = ex->busy_poll;
    pthread_mutex_unlock(&ex->event_lock);
    return bp;
}

/*
 * Worker, with ex->lock held: returns once a stream is runnable or the
 * executor stops. While the busy-polling window is open (just after
 * activity, or held by a client waiting on a synchronize, whose next batch
 * follows the answer), one worker polls instead of sleeping, so work the
 * loop hands over starts without a thread wake-up (tens of microseconds on
 * virtual machines); the others sleep on the condition variable.
 */
static void await_work_locked(tfd_executor *ex) {
    while (!ex->run_head && !ex->stopping) {
        tfd_busy_poll *bp = ex->worker_polling ? NULL : busy_poll_of(ex);
        if (bp && tfd_busy_poll_active(bp)) {
            ex->worker_polling = 1;
            pthread_mutex_unlock(&ex->lock);
            while (!atomic_load_explicit(&ex->runnable, memory_order_acquire) &&
                   tfd_busy_poll_active(bp))
                tf__cpu_relax();
            pthread_mutex_lock(&ex->lock);
            ex->worker_polling = 0;
            continue;
        }
        pthread_cond_wait(&ex->wake, &ex->lock);
    }
}

static void *worker_main(void *arg) {
    tfd_executor *ex = arg;
    for (;;) {
        pthread_mutex_lock(&ex->lock);
        await_work_locked(ex);
        tfd_stream *s = ex->run_head;
        if (!s) {
            pthread_mutex_unlock(&ex->lock);
            return NULL;
        }
        atomic_fetch_sub_explicit(&ex->runnable, 1, memory_order_relaxed);
        ex->run_head = s->run_next;
        if (!ex->run_head) ex->run_tail = NULL;
        pthread_mutex_unlock(&ex->lock);
        serve_stream(ex, s);
    }
}

tf_status tfd_executor_start(uv_loop_t *loop, tfd_backend *be, int workers, tfd_executor **out) {
    tfd_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return TF_ERR_NO_MEMORY;
    ex->loop = loop;
    ex->be = be;
    ex->n_workers = workers < 1 ? 1 : workers;
    /* Before the eventfd's watch exists, so a refusal leaves nothing registered with the loop. */
    ex->workers = calloc((size_t)ex->n_workers, sizeof(pthread_t));
    if (!ex->workers) {
        free(ex);
        return TF_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&ex->lock, NULL);
    pthread_cond_init(&ex->wake, NULL);
    pthread_mutex_init(&ex->event_lock, NULL);
    pthread_cond_init(&ex->event_wake, NULL);
    pthread_mutex_init(&ex->done_lock, NULL);
    ex->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ex->done_fd < 0 || uv_poll_init(loop, &ex->done_poll, ex->done_fd) != 0) {
        tfd_log(TFD_LOG_ERROR, "cannot watch a completion eventfd: %s", strerror(errno));
        if (ex->done_fd >= 0) close(ex->done_fd);
        free(ex->workers);
        free(ex);
        return TF_ERR_IO;
    }
    ex->done_poll.data = ex;
    uv_poll_start(&ex->done_poll, UV_READABLE, on_done_ready);
    for (int i = 0; i < ex->n_workers; i++) {
        if (pthread_create(&ex->workers[i], NULL, worker_main, ex) != 0) {
            tfd_log(TFD_LOG_ERROR, "cannot start worker thread %d", i);
            ex->n_workers = i;
            tfd_executor_stop(ex);
            return TF_ERR_IO;
        }
    }
    if (pthread_create(&ex->event_thread, NULL, event_thread_main, ex) != 0) {
        tfd_executor_stop(ex);
        return TF_ERR_IO;
    }
    *out = ex;
    return TF_OK;
}

/* The executor goes once libuv has let go of its watch on the completion eventfd. */
static void on_done_poll_closed(uv_handle_t *h) {
    tfd_executor *ex = h->data;
    close(ex->done_fd);
    free(ex);
}

void tfd_executor_stop(tfd_executor *ex) {
    pthread_mutex_lock(&ex->lock);
    ex->stopping = 1;
    atomic_fetch_add_explicit(&ex->runnable, 1, memory_order_release); /* ends a worker's polling */
    pthread_cond_broadcast(&ex->wake);
    pthread_mutex_unlock(&ex->lock);
    for (int i = 0; i < ex->n_workers; i++) pthread_join(ex->workers[i], NULL);
    tfd_executor_run_loop_copies(ex); /* nor left unrun */
    tfd_executor_watch_copies(ex); /* nothing the loop issued is left unwatched */
    pthread_mutex_lock(&ex->event_lock);
    ex->event_stopping = 1;
    pthread_cond_broadcast(&ex->event_wake);
    pthread_mutex_unlock(&ex->event_lock);
    if (ex->event_thread) pthread_join(ex->event_thread, NULL);
    free(ex->workers);
    /* The executor is freed once libuv has closed its watch on the eventfd. */
    uv_poll_stop(&ex->done_poll);
    uv_close((uv_handle_t *)&ex->done_poll, on_done_poll_closed);
}

tf_status tfd_stream_create(tfd_executor *ex, int priority, tfd_stream **out, char *msg,
                            size_t msg_len) {
    tfd_stream *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, msg_len, "out of host memory creating a stream");
        return TF_ERR_NO_MEMORY;
    }
    tf_status st = ex->be->vt->stream_create(ex->be, priority, &s->native);
    if (st != TF_OK) {
        snprintf(msg, msg_len, "backend %s could not create a stream: %s", ex->be->vt->name,
                 tf_strerror(st));
        free(s);
        return st;
    }
    s->ex = ex;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->idle, NULL);
    *out = s;
    return TF_OK;
}

/*
 * Loop thread: waits until no worker holds the stream (it is neither queued
 * to run nor being served). A copy the loop itself holds the stream for runs
 * first: only the loop could let the stream go.
 */
static void wait_unheld(tfd_stream *s) {
    tfd_executor_run_loop_copies(s->ex);
    pthread_mutex_lock(&s->lock);
    while (s->scheduled) pthread_cond_wait(&s->idle, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

int tfd_stream_free_if_idle(tfd_stream *s, void *ptr, size_t bytes) {
    if (!s->ex->be->vt->finishes_in_call) return 0;
    /* Only the loop thread enqueues, and it is here: an unheld stream stays so until this returns. */
    pthread_mutex_lock(&s->lock);
    const int held = s->scheduled;
    pthread_mutex_unlock(&s->lock);
    if (held) return 0;
    s->ex->be->vt->free(s->ex->be, s->native, ptr, bytes);
    tfd_executor_note_free(s->ex, bytes);
    return 1;
}

void tfd_stream_free_now(tfd_stream *s, void *ptr, size_t bytes) {
    wait_unheld(s);
    s->ex->be->vt->free(s->ex->be, s->native, ptr, bytes);
    tfd_executor_note_free(s->ex, bytes);
}

tf_status tfd_stream_enqueue_call(tfd_stream *s, void (*fn)(tfd_stream *s, void *arg), void *arg,
                                  tfd_item_done_fn done, void *done_arg) {
    tfd_item *call = tfd_item_new(TFD_ITEM_CALL), *marker = tfd_item_new(TFD_ITEM_MARKER);
    if (!call || !marker) {
        tfd_item_free(call);
        tfd_item_free(marker);
        return TF_ERR_NO_MEMORY;
    }
    call->u.call.fn = fn;
    call->u.call.arg = arg;
    marker->keeps_failure = 1;
    marker->done = done;
    marker->done_arg = done_arg;
    call->next = marker;
    tfd_stream_enqueue(s, call, marker, 2);
    return TF_OK;
}

void tfd_stream_destroy(tfd_stream *s) {
    if (!s) return;
    /*
     * The last marker's callback can run on the loop before the worker that
     * executed the marker has finished its bookkeeping on the stream; wait for
     * it to let go (no device work is left, only that tail) before freeing.
     */
    wait_unheld(s);
    s->ex->be->vt->stream_destroy(s->ex->be, s->native);
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void *tfd_stream_native(tfd_stream *s) { return s->native; }

uint64_t tfd_stream_queued(tfd_stream *s) { return atomic_load(&s->queued); }

uint64_t tfd_stream_awaiting(const tfd_stream *s) { return s->awaiting; }

void tfd_stream_free_memory(tfd_stream *s, void *ptr, size_t bytes) {
    s->ex->be->vt->free(s->ex->be, s->native, ptr, bytes);
    tfd_executor_note_free(s->ex, bytes);
}

void tfd_stream_cancel(tfd_stream *s) { atomic_store(&s->cancelled, 1); }

int tfd_stream_complete_if_idle(tfd_stream *s, tfd_item_outcome *outcome) {
    void *probe = NULL;
    int idle = 0;
    pthread_mutex_lock(&s->lock);
    if (!s->scheduled && !s->head) {
        /*
         * An asynchronous backend says whether the device has finished the stream;
         * a synchronous one records no event: its work is done when the queue is.
         */
        const tfd_backend_vtable *vt = s->ex->be->vt;
        char msg[8];
        int done = vt->stream_done
                       ? vt->stream_done(s->ex->be, s->native)
                       : vt->event_record(s->ex->be, s->native, &probe, msg, sizeof msg) == TF_OK &&
                             !probe;
        if (done) {
            *outcome = s->failure;
            memset(&s->failure, 0, sizeof s->failure);
            idle = 1;
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (probe) s->ex->be->vt->event_destroy(s->ex->be, probe);
    /* What the device found and a download left for the synchronize (event_failure). */
    const tfd_backend_vtable *vt = s->ex->be->vt;
    if (idle && outcome->status == TF_OK && vt->stream_failure) {
        uint64_t batch = 0;
        uint32_t index = 0;
        const tf_status st = vt->stream_failure(s->ex->be, s->native, &batch, &index,
                                                outcome->message, sizeof outcome->message);
        if (st != TF_OK) {
            outcome->status = st;
            outcome->batch = batch;
            outcome->index = index;
        }
    }
    return idle;
}

/*
 * Loop thread, a backend that finishes in the call: takes a copy of at most
 * LOOP_COPY_MAX_BYTES on a stream no worker holds, to run it once the
 * request is answered (tfd_executor_run_loop_copies). The stream counts as
 * held meanwhile, so anything enqueued behind the copy waits for it.
 */
static int defer_to_loop(tfd_stream *s, tfd_item *item) {
    if (item->u.copy.bytes > LOOP_COPY_MAX_BYTES) return 0;
    pthread_mutex_lock(&s->lock);
    const int held = s->scheduled;
    if (!held) s->scheduled = 1;
    pthread_mutex_unlock(&s->lock);
    if (held) return 0;
    tfd_executor *ex = s->ex;
    s->awaiting += item->done != NULL;
    item->stream = s;
    item->next = NULL;
    atomic_fetch_add(&s->queued, 1);
    if (ex->loop_tail)
        ex->loop_tail->next = item;
    else
        ex->loop_head = item;
    ex->loop_tail = item;
    return 1;
}

int tfd_stream_execute_now(tfd_stream *s, tfd_item *item) {
    if (item->type != TFD_ITEM_WRITE && item->type != TFD_ITEM_READ) return 0;
    if (s->ex->be->vt->finishes_in_call) return defer_to_loop(s, item);
    if (!s->ex->be->vt->copies_enqueue_only) return 0;
    /*
     * Only the loop thread enqueues, and it is here: a stream no worker holds
     * stays unheld until this returns. The lock orders this against the last
     * worker's writes (its sticky failure) and the next one's reads.
     */
    pthread_mutex_lock(&s->lock);
    int held = s->scheduled;
    pthread_mutex_unlock(&s->lock);
    if (held) return 0;
    s->awaiting += item->done != NULL;
    item->stream = s;
    item->next = NULL;
    s->ex->issuing_on_loop = 1;
    execute_item(s, item);
    s->ex->issuing_on_loop = 0;
    atomic_fetch_add(&s->ex->counters.items_executed, 1);
    return 1;
}

void tfd_stream_enqueue(tfd_stream *s, tfd_item *first, tfd_item *last, uint64_t count) {
    if (!first) return;
    for (tfd_item *it = first; it; it = it->next) {
        it->stream = s;
        s->awaiting += it->done != NULL;
        if (it == last) break;
    }
    last->next = NULL;
    atomic_fetch_add(&s->queued, count);
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = first;
    else
        s->head = first;
    s->tail = last;
    if (!s->scheduled) {
        s->scheduled = 1;
        pthread_mutex_lock(&s->ex->lock);
        runq_push_locked(s->ex, s);
        pthread_mutex_unlock(&s->ex->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

tf_status tfd_stream_alloc(tfd_stream *s, size_t bytes, void **ptr, char *msg, size_t msg_len) {
    tfd_backend *be = s->ex->be;
    tf_status st = be->vt->alloc(be, s->native, bytes, ptr);
    if (st != TF_OK) {
        snprintf(msg, msg_len, "cannot allocate %zu bytes on %s: %s", bytes, be->vt->name,
                 tf_strerror(st));
        return st;
    }
    atomic_fetch_add(&s->ex->counters.device_bytes_live, bytes);
    atomic_fetch_add(&s->ex->counters.device_allocations_live, 1);
    return TF_OK;
}

void tfd_executor_note_free(tfd_executor *ex, size_t bytes) {
    atomic_fetch_sub(&ex->counters.device_bytes_live, bytes);
    atomic_fetch_sub(&ex->counters.device_allocations_live, 1);
}
