/* Busy polling (see busy-poll.h). */
#include <sched.h>

#include "common/spin.h"
#include "daemon/busy-poll.h"

void tfd_busy_poll_set(tfd_busy_poll *bp, uint64_t window_us) {
    atomic_store_explicit(&bp->window_ns, window_us * 1000u, memory_order_relaxed);
}

void tfd_busy_poll_ring_set(tfd_busy_poll *bp, uint64_t window_us) {
    atomic_store_explicit(&bp->ring_window_ns, window_us * 1000u, memory_order_relaxed);
}

void tfd_busy_poll_ring_touch(tfd_busy_poll *bp) {
    if (atomic_load_explicit(&bp->ring_window_ns, memory_order_relaxed))
        atomic_store_explicit(&bp->ring_last_ns, tf__now_ns(), memory_order_relaxed);
}

/* 1 while the loop's ring window after the last ring reply is open. */
static int ring_recent(tfd_busy_poll *bp) {
    uint64_t window = atomic_load_explicit(&bp->ring_window_ns, memory_order_relaxed);
    if (!window) return 0;
    return tf__now_ns() - atomic_load_explicit(&bp->ring_last_ns, memory_order_relaxed) < window;
}

void tfd_busy_poll_idle_set(tfd_busy_poll *bp, uint64_t max_us) {
    atomic_store_explicit(&bp->idle_max_ns, max_us * 1000u, memory_order_relaxed);
    if (!max_us) atomic_store_explicit(&bp->request_gap_ns, 0, memory_order_relaxed);
}

/* How long a longest gap is remembered: it is forgotten after one to two of these. */
#define GAP_EPOCH_NS 50000000u

void tfd_busy_poll_request(tfd_busy_poll *bp) {
    const uint64_t max = atomic_load_explicit(&bp->idle_max_ns, memory_order_relaxed);
    if (!max) return;
    const uint64_t now = tf__now_ns();
    const uint64_t gap = now - atomic_load_explicit(&bp->request_last_ns, memory_order_relaxed);
    atomic_store_explicit(&bp->request_last_ns, now, memory_order_relaxed);
    if (now - bp->gap_epoch_ns > GAP_EPOCH_NS) {
        bp->gap_prev_ns = bp->gap_cur_ns;
        bp->gap_cur_ns = 0;
        bp->gap_epoch_ns = now;
    }
    /*
     * The longest gap of the last epoch or two: a client's loop is bursts of
     * requests microseconds apart with its own work between them, and it is
     * the gap after that work the loop has to poll across. A gap past the
     * maximum means the client went idle: the pattern is forgotten.
     */
    if (gap > max) {
        bp->gap_cur_ns = bp->gap_prev_ns = 0;
    } else if (gap > bp->gap_cur_ns) {
        bp->gap_cur_ns = gap;
    }
    const uint64_t est = bp->gap_cur_ns > bp->gap_prev_ns ? bp->gap_cur_ns : bp->gap_prev_ns;
    atomic_store_explicit(&bp->request_gap_ns, est, memory_order_relaxed);
}

/* Slack over the learnt gap, for its jitter. */
#define IDLE_SLACK_NS 200000u

/* 1 while the next request is due within the learnt gap (and the maximum) since the last one. */
static int request_due(tfd_busy_poll *bp) {
    const uint64_t est = atomic_load_explicit(&bp->request_gap_ns, memory_order_relaxed);
    if (!est) return 0;
    uint64_t window = est + est / 4 + IDLE_SLACK_NS;
    const uint64_t max = atomic_load_explicit(&bp->idle_max_ns, memory_order_relaxed);
    if (window > max) window = max;
    return tf__now_ns() - atomic_load_explicit(&bp->request_last_ns, memory_order_relaxed) < window;
}

void tfd_busy_poll_touch(tfd_busy_poll *bp) {
    if (atomic_load_explicit(&bp->window_ns, memory_order_relaxed))
        atomic_store_explicit(&bp->last_ns, tf__now_ns(), memory_order_relaxed);
}

void tfd_busy_poll_hold(tfd_busy_poll *bp) { atomic_fetch_add_explicit(&bp->holds, 1, memory_order_relaxed); }

void tfd_busy_poll_release(tfd_busy_poll *bp) {
    atomic_fetch_sub_explicit(&bp->holds, 1, memory_order_relaxed);
    tfd_busy_poll_touch(bp);
}

/* 1 while the last activity is less than one window ago, whatever holds it. */
static int busy_poll_recent(tfd_busy_poll *bp) {
    uint64_t window = atomic_load_explicit(&bp->window_ns, memory_order_relaxed);
    if (!window) return 0;
    return tf__now_ns() - atomic_load_explicit(&bp->last_ns, memory_order_relaxed) < window;
}

int tfd_busy_poll_active(tfd_busy_poll *bp) {
    if (!atomic_load_explicit(&bp->window_ns, memory_order_relaxed)) return 0;
    if (atomic_load_explicit(&bp->holds, memory_order_relaxed) > 0) return 1;
    return busy_poll_recent(bp);
}

void tfd_loop_run(uv_loop_t *loop, tfd_busy_poll *bp, const tfd_loop_poller *poller) {
    for (;;) {
        int more;
        const int window = tfd_busy_poll_active(bp);
        if (window || ring_recent(bp) || request_due(bp)) {
            poller->polling(poller->arg, 1);
            /* UV_RUN_NOWAIT polls the descriptors with a zero timeout. */
            more = uv_run(loop, UV_RUN_NOWAIT);
            if (poller->poll(poller->arg)) tfd_busy_poll_touch(bp);
            /* Polling for rings or requests alone may happen on the CPU backend: leave the core to a worker that needs it. */
            else if (!window) sched_yield();
        } else {
            poller->polling(poller->arg, 0);
            if (poller->poll(poller->arg)) {
                tfd_busy_poll_touch(bp);
                continue;
            }
            /* UV_RUN_ONCE sleeps until something happens. */
            more = uv_run(loop, UV_RUN_ONCE);
        }
        if (!more) return;
    }
}
