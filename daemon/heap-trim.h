/*
 * Giving freed heap back to the system after clients leave (heap-trim.c), so
 * the daemon's resident size comes back near where it was once the
 * connections that made it grow are gone. Loop thread only.
 */
#ifndef TENFERRO_DAEMON_HEAP_TRIM_H
#define TENFERRO_DAEMON_HEAP_TRIM_H

#include <uv.h>

typedef struct tfd_heap_trim {
    uv_timer_t timer;
    int ready;
} tfd_heap_trim;

void tfd_heap_trim_init(tfd_heap_trim *h, uv_loop_t *loop);
/* A connection went: trims the heap a moment from now, unless a trim is already due. */
void tfd_heap_trim_soon(tfd_heap_trim *h);
/* Closes the timer (the loop is stopping). */
void tfd_heap_trim_close(tfd_heap_trim *h);

#endif
