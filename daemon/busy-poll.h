/*
 * Busy polling: the loop thread and the completion thread trade a core for
 * wake-up latency. After activity (a read from a client, a completion) each
 * keeps polling, without sleeping, for a short window; a request or a
 * completion arriving inside it is seen within a microsecond instead of
 * after a kernel wake-up (several microseconds, a large share of a 1 MiB
 * transfer). An idle daemon sleeps as before. A window of 0 turns it off.
 */
#ifndef TENFERRO_DAEMON_BUSY_POLL_H
#define TENFERRO_DAEMON_BUSY_POLL_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

typedef struct tfd_busy_poll {
    atomic_uint_fast64_t window_ns; /* how long to poll after the last activity */
    atomic_uint_fast64_t last_ns;   /* CLOCK_MONOTONIC of the last activity */
} tfd_busy_poll;

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t tfd_now_ns(void);

/* Sets the window (0 = never poll). */
void tfd_busy_poll_set(tfd_busy_poll *bp, uint64_t window_us);

/* Notes activity now: the window starts again. */
void tfd_busy_poll_touch(tfd_busy_poll *bp);

/* 1 while the last activity is less than one window ago. */
int tfd_busy_poll_active(tfd_busy_poll *bp);

/* One relaxing instruction for a polling loop. */
void tfd_cpu_relax(void);

/*
 * Runs the loop until it has nothing left to do: inside the window it polls
 * for events without blocking, outside it blocks until the next one.
 */
void tfd_loop_run(uv_loop_t *loop, tfd_busy_poll *bp);

#endif
