/* Sync points (see sync-point.h). */
#include <stdlib.h>

#include "daemon/sync-point.h"

tfd_sync_point *tfd_sync_point_new(tfd_backend *be) {
    tfd_sync_point *p = malloc(sizeof *p);
    if (!p) return NULL;
    atomic_init(&p->refs, 1);
    atomic_init(&p->event, NULL);
    p->be = be;
    return p;
}

tfd_sync_point *tfd_sync_point_ref(tfd_sync_point *p) {
    if (p) atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
    return p;
}

void tfd_sync_point_unref(tfd_sync_point *p) {
    if (!p || atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) != 1) return;
    void *ev = atomic_load_explicit(&p->event, memory_order_acquire);
    if (ev) p->be->vt->event_destroy(p->be, ev);
    free(p);
}

void tfd_sync_point_set(tfd_sync_point *p, void *event) {
    void *old = atomic_exchange_explicit(&p->event, event, memory_order_acq_rel);
    if (old) p->be->vt->event_destroy(p->be, old);
}

void *tfd_sync_point_event(tfd_sync_point *p) {
    return p ? atomic_load_explicit(&p->event, memory_order_acquire) : NULL;
}
