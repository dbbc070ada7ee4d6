/*
 * Giving freed heap back to the system (heap-trim.h). malloc keeps what a
 * connection freed (its frames' decode arenas, its reply buffers, its
 * tensors' records) in its arenas for reuse, so a daemon that served a burst
 * of large frames, or a client that piled up replies, stays at its peak
 * resident size long after. A second after the last connection that went,
 * malloc_trim returns the free pages of every arena: once per burst of
 * departures, never on a request's path.
 */
#include <malloc.h>

#include "daemon/heap-trim.h"

/* How long after a departure the heap is trimmed: later departures of the same burst wait with it. */
#define TRIM_DELAY_MS 1000

static void trim_now(uv_timer_t *t) {
    (void)t;
    (void)malloc_trim(0);
}

void tfd_heap_trim_init(tfd_heap_trim *h, uv_loop_t *loop) {
    uv_timer_init(loop, &h->timer);
    /* The timer must not keep a stopping loop alive. */
    uv_unref((uv_handle_t *)&h->timer);
    h->ready = 1;
}

void tfd_heap_trim_soon(tfd_heap_trim *h) {
    if (!h->ready || uv_is_active((uv_handle_t *)&h->timer)) return;
    uv_timer_start(&h->timer, trim_now, TRIM_DELAY_MS, 0);
}

void tfd_heap_trim_close(tfd_heap_trim *h) {
    if (!h->ready) return;
    h->ready = 0;
    uv_close((uv_handle_t *)&h->timer, NULL);
}
