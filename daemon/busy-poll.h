/*
 * Busy polling: the loop thread and the completion thread trade a core for
 * wake-up latency. After activity (a read from a client, a completion) each
 * keeps polling, without sleeping, for a short window; a request or a
 * completion arriving inside it is seen within a microsecond instead of
 * after a kernel wake-up (several microseconds, a large share of a 1 MiB
 * transfer). Work the loop waits for (a pending transfer in flight, a
 * client's synchronize) holds the window open until it completes, so the
 * completion is answered at once and the client's next request after a long
 * copy or kernel is still seen at once. One worker of the executor polls for
 * new work in the window too, so a batch the loop hands over starts without
 * a wake-up. An idle daemon sleeps as before. A window of 0 turns it all off.
 */
#ifndef TENFERRO_DAEMON_BUSY_POLL_H
#define TENFERRO_DAEMON_BUSY_POLL_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

typedef struct tfd_busy_poll {
    atomic_uint_fast64_t window_ns; /* how long to poll after the last activity */
    atomic_uint_fast64_t last_ns;   /* CLOCK_MONOTONIC of the last activity */
    atomic_int holds;               /* work in flight that keeps the window open */
    /* The loop alone also polls for ring_window_ns after a reply written to a submission ring. */
    atomic_uint_fast64_t ring_window_ns;
    atomic_uint_fast64_t ring_last_ns;
    /*
     * And, loop alone, after a request for about as long as the recent gaps
     * between requests, when those are shorter than idle_max_ns: a client that
     * comes back every couple of milliseconds finds the loop polling.
     */
    atomic_uint_fast64_t idle_max_ns;
    atomic_uint_fast64_t request_last_ns;
    atomic_uint_fast64_t request_gap_ns; /* longest recent gap (two epochs); 0: none short enough */
    uint64_t gap_epoch_ns, gap_cur_ns, gap_prev_ns; /* loop thread only */
} tfd_busy_poll;

/* Sets the window (0 = never poll). */
void tfd_busy_poll_set(tfd_busy_poll *bp, uint64_t window_us);

/* Sets how long the loop looks at submission rings after answering one (0 = not at all). */
void tfd_busy_poll_ring_set(tfd_busy_poll *bp, uint64_t window_us);

/* A reply went into a submission ring: the loop polls for the client's next request a while. */
void tfd_busy_poll_ring_touch(tfd_busy_poll *bp);

/* Sets the longest gap between requests the loop polls across (0 = none). */
void tfd_busy_poll_idle_set(tfd_busy_poll *bp, uint64_t max_us);

/* A client's request arrived now (loop thread): the gap since the last one is learnt. */
void tfd_busy_poll_request(tfd_busy_poll *bp);

/* Notes activity now: the window starts again. */
void tfd_busy_poll_touch(tfd_busy_poll *bp);

/* Keeps the window open until the matching release (work in flight), or lets it go. */
void tfd_busy_poll_hold(tfd_busy_poll *bp);
void tfd_busy_poll_release(tfd_busy_poll *bp);

/* 1 while something holds the window open or the last activity is less than one window ago. */
int tfd_busy_poll_active(tfd_busy_poll *bp);

/*
 * What the loop polls besides its file descriptors (shared-memory mailboxes).
 * poll serves what is waiting and returns how much it served; polling tells
 * the other side whether the loop is polling (1) or about to sleep (0), when
 * it must wake the loop through a descriptor instead.
 */
typedef struct tfd_loop_poller {
    int (*poll)(void *arg);
    void (*polling)(void *arg, int on);
    void *arg;
} tfd_loop_poller;

/*
 * Runs the loop until it has nothing left to do: inside the window it polls
 * for events and the poller without blocking; outside it says so to the
 * poller, polls it once more (what arrived meanwhile is served, not slept
 * on), then blocks until the next event.
 */
void tfd_loop_run(uv_loop_t *loop, tfd_busy_poll *bp, const tfd_loop_poller *poller);

#endif
