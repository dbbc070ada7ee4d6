/* The reservation table (see reservation.h). */
#include <string.h>

#include "daemon/reservation.h"

void tfd_reservation_init(tfd_reservation *r, unsigned domain) {
    memset(r, 0, sizeof *r);
    r->domain = domain;
}

static void queue_append(tfd_reservation *r, tfd_waiter *w) {
    w->next = NULL;
    w->prev = r->tail;
    if (r->tail)
        r->tail->next = w;
    else
        r->head = w;
    r->tail = w;
    w->queued = 1;
    r->n_queued++;
}

void tfd_reservation_cancel(tfd_reservation *r, tfd_waiter *w) {
    if (!w->queued) return;
    if (w->prev)
        w->prev->next = w->next;
    else
        r->head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        r->tail = w->prev;
    w->next = w->prev = NULL;
    w->queued = 0;
    r->n_queued--;
}

/* Gives the domain to a held opener. */
static void take(tfd_reservation *r, tfd_waiter *w, uint64_t now_ms) {
    r->holder = w->owner;
    r->session_id = w->session_id;
    r->since_ms = now_ms;
}

tfd_admission tfd_reservation_request(tfd_reservation *r, tfd_waiter *w, tfd_policy policy,
                                      uint64_t now_ms) {
    if (r->holder == w->owner) return TFD_REENTERED;
    if (!r->holder && !r->head) {
        if (w->held) take(r, w, now_ms);
        return TFD_ADMITTED;
    }
    if (policy == TFD_POLICY_REJECT) return TFD_CONTENDED;
    queue_append(r, w);
    return TFD_QUEUED;
}

int tfd_reservation_release(tfd_reservation *r, void *owner) {
    if (!owner || r->holder != owner) return 0;
    r->holder = NULL;
    r->session_id = 0;
    r->since_ms = 0;
    return 1;
}

tfd_waiter *tfd_reservation_admit_next(tfd_reservation *r, uint64_t now_ms) {
    if (r->holder || !r->head) return NULL;
    tfd_waiter *w = r->head;
    tfd_reservation_cancel(r, w);
    if (w->held) take(r, w, now_ms);
    return w;
}
