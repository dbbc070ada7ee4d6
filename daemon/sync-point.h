/*
 * Sync points: a place in a stream's work that later work on another queue
 * of the same stream must wait for (docs/transfers.md, "Copies beside
 * compute"). An upload on the copy queue leaves one that the operations
 * reading its destination wait for; an operation reading a tensor that
 * transfers use leaves one that the next upload into that tensor waits for.
 * The loop makes a point when it validates the work; the thread that issues
 * that work records the backend event into it; whoever issues the dependent
 * work later reads the event. Points are shared (the tensor record, the
 * items that wait, the completion path) and reference-counted from any
 * thread; the event goes back to the backend with the last reference.
 */
#ifndef TENFERRO_DAEMON_SYNC_POINT_H
#define TENFERRO_DAEMON_SYNC_POINT_H

#include <stdatomic.h>

#include "daemon/backend/backend.h"

typedef struct tfd_sync_point {
    atomic_int refs;
    _Atomic(void *) event; /* NULL until recorded, or when it could not be: then wait for everything */
    tfd_backend *be;
} tfd_sync_point;

/* A new point with one reference, nothing recorded; NULL when out of memory. */
tfd_sync_point *tfd_sync_point_new(tfd_backend *be);
/* Takes another reference (p may be NULL); returns p. */
tfd_sync_point *tfd_sync_point_ref(tfd_sync_point *p);
/* Drops a reference (p may be NULL); the last one destroys the event and the point. */
void tfd_sync_point_unref(tfd_sync_point *p);
/* The issuing thread stores the event recorded after the point's work (the point takes it). */
void tfd_sync_point_set(tfd_sync_point *p, void *event);
/* The recorded event, or NULL (not recorded: wait for everything before instead). */
void *tfd_sync_point_event(tfd_sync_point *p);

#endif
