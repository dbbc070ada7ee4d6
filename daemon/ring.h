/*
 * The submission ring (include/tenferro/wire.h, docs/transfers.md "The
 * submission ring"): a connection's Submit and SessionOpen frames (the
 * requests answered by exactly one reply) written into shared memory instead of the socket, and their replies
 * written back there. Each entry is copied out of the shared page, decoded
 * and handled exactly like the same frame read from the socket; the client
 * can change the page at any time and cannot make the daemon act on bytes it
 * did not check.
 */
#ifndef TENFERRO_DAEMON_RING_H
#define TENFERRO_DAEMON_RING_H

#include <stdint.h>

#include "common/frame.h"
#include "tenferro/wire.h"

struct tfd_conn;

/* Requests of one connection taken from its ring whose replies are not written yet. */
#define TFD_RING_OUTSTANDING 8

/* The daemon's side of one connection's ring: where the shared areas are, and its own positions. */
typedef struct tfd_ring {
    tf_ring_header *header; /* NULL: the connection has no ring */
    uint8_t *requests, *replies;
    uint64_t req_tail; /* request bytes consumed: the daemon's copy, never read back from the page */
    uint64_t rep_head; /* reply bytes written: likewise */
    uint32_t rep_count;
    uint64_t outstanding[TFD_RING_OUTSTANDING]; /* sequence numbers to answer in the ring; 0 = free */
    uint8_t *scratch; /* an entry copied out of the page (TF_RING_REQUEST_BYTES) */
} tfd_ring;

/* Points c's ring at its place in the completion mapping; allocates the copy-out buffer. */
int tfd_ring_attach(struct tfd_conn *c, uint8_t *mapping);
/* Frees what tfd_ring_attach allocated (the mapping goes with the completion page). */
void tfd_ring_detach(struct tfd_conn *c);

/*
 * Handles, in order, the requests waiting in c's ring that may run now: each
 * only once the frames the client sent on the socket before it have been
 * handled, and never while c is paused. Bad entries end the connection with
 * a typed last word. Returns how many it handled.
 */
int tfd_conn_poll_ring(struct tfd_conn *c);

/*
 * When `frame` answers a request c took from its ring, writes it into the
 * reply area, wakes the client if it sleeps, and returns 1; else 0 (the
 * reply goes on the socket).
 */
int tfd_ring_reply(struct tfd_conn *c, Tenferro__Frame *frame);

#endif
