/* The submission ring, the daemon's side (see ring.h). */
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/ring.h"
#include "daemon/busy-poll.h"
#include "daemon/connection.h"
#include "daemon/handle-transfer.h"
#include "daemon/log.h"
#include "daemon/ring.h"
#include "daemon/server.h"

/* Entries handled in one poll of one connection, so one busy ring does not hold the loop. */
#define ENTRIES_PER_POLL 16

int tfd_ring_attach(tfd_conn *c, uint8_t *mapping) {
    c->ring.scratch = malloc(TF_RING_REQUEST_BYTES);
    if (!c->ring.scratch) return -1;
    c->ring.header = (tf_ring_header *)(mapping + TF_RING_OFFSET);
    c->ring.requests = mapping + TF_RING_OFFSET + TF_RING_HEADER_BYTES;
    c->ring.replies = c->ring.requests + TF_RING_REQUEST_BYTES;
    return 0;
}

void tfd_ring_detach(tfd_conn *c) {
    free(c->ring.scratch);
    c->ring.scratch = NULL;
    c->ring.header = NULL;
}

/* A free place in the table of requests to answer in the ring, or -1. */
static int free_outstanding(const tfd_ring *r) {
    for (int i = 0; i < TFD_RING_OUTSTANDING; i++)
        if (r->outstanding[i] == 0) return i;
    return -1;
}

/*
 * The frames a ring may carry: the hot path's, each answered by exactly one
 * reply. A request without a reply (SessionRelease, Free) would hold its
 * place in the table of requests to answer for ever, so it is refused.
 */
static int ring_body_allowed(Tenferro__Frame__BodyCase body) {
    return body == TENFERRO__FRAME__BODY_SUBMIT || body == TENFERRO__FRAME__BODY_SESSION_OPEN;
}

/*
 * Takes the entry at the ring's tail, if it may run now: 1 with it decoded in
 * *out, 2 when it was refused (answered in the ring), 0 when there is none or
 * it must wait, -1 when the connection was ended over it.
 */
static int take_entry(tfd_conn *c, Tenferro__Frame **out) {
    tfd_ring *r = &c->ring;
    uint64_t head = __atomic_load_n(&r->header->req_head, __ATOMIC_ACQUIRE);
    if (head == r->req_tail) return 0;
    /* An entry waits while the client's unread replies are at their limit (memory-limits.c). */
    if (!tfd_memory_input_may_go(c)) return 0;
    uint64_t avail = head - r->req_tail;
    if (head < r->req_tail || avail > TF_RING_REQUEST_BYTES || avail < sizeof(tf_ring_entry)) {
        tfd_conn_fail(c, "submission ring: req_head %llu is not within %u bytes after the %llu "
                         "bytes already consumed",
                      (unsigned long long)head, TF_RING_REQUEST_BYTES, (unsigned long long)r->req_tail);
        return -1;
    }
    tf_ring_entry e;
    tf__ring_get(&e, r->requests, TF_RING_REQUEST_BYTES, r->req_tail, sizeof e);
    if (e.bytes == 0 || tf__ring_span(e.bytes) > avail) {
        tfd_conn_fail(c, "submission ring: an entry of %u bytes at %llu does not lie within the %llu "
                         "bytes written",
                      e.bytes, (unsigned long long)r->req_tail, (unsigned long long)avail);
        return -1;
    }
    /* Frames the client sent on the socket before this entry come first. */
    if (e.after_seq > c->dispatched_seq) return 0;
    if (e.seq <= c->dispatched_seq) {
        tfd_conn_fail(c, "submission ring: an entry carries sequence number %llu, not after %llu "
                         "already handled",
                      (unsigned long long)e.seq, (unsigned long long)c->dispatched_seq);
        return -1;
    }
    int place = free_outstanding(r);
    if (place < 0) return 0; /* its reply would have nowhere to go yet */
    tf__ring_get(r->scratch, r->requests, TF_RING_REQUEST_BYTES, r->req_tail + sizeof e, e.bytes);
    r->req_tail += tf__ring_span(e.bytes);
    __atomic_store_n(&r->header->req_tail, r->req_tail, __ATOMIC_RELEASE);
    Tenferro__Frame *frame = NULL;
    tf_status st = tf__frame_decode_status(r->scratch, e.bytes, TF__DECODE_BUDGET(e.bytes), &frame);
    if (st == TF_ERR_NO_MEMORY) {
        tfd_conn_fail_no_memory(c, "decoding a ring entry");
        return -1;
    }
    if (st != TF_OK) {
        tfd_conn_fail(c, "submission ring: an entry of %u bytes does not decode as tenferro.Frame (%s)",
                      e.bytes, tf_status_name(st));
        return -1;
    }
    if (frame->seq != e.seq) {
        tfd_conn_fail(c, "submission ring: an entry's frame carries another sequence number than "
                         "its header");
        tf__frame_free(frame);
        return -1;
    }
    r->outstanding[place] = e.seq;
    if (!ring_body_allowed(frame->body_case)) {
        /* Refused in the ring itself, in order: the entry is answered and the ring goes on. */
        int body = (int)frame->body_case;
        c->dispatched_seq = e.seq;
        tf__frame_free(frame);
        tfd_conn_reply(c, e.seq, TF_ERR_INVALID_ARGUMENT,
                       "submission ring: only Submit and SessionOpen frames may travel in the ring "
                       "(body %d does not): send it on the socket",
                       body);
        return c->closing ? -1 : 2;
    }
    *out = frame;
    return 1;
}

int tfd_conn_poll_ring(tfd_conn *c) {
    int handled = 0;
    if (!c->ring.header ||
        __atomic_load_n(&c->ring.header->req_head, __ATOMIC_ACQUIRE) == c->ring.req_tail)
        return 0;
    /* Transfers the client has seen complete are finished first, as before a read. */
    tfd_conn_reap_transfers(c);
    while (c->ring.header && !c->closing && !c->paused && handled < ENTRIES_PER_POLL) {
        Tenferro__Frame *frame = NULL;
        int taken = take_entry(c, &frame);
        if (taken <= 0) break;
        c->srv->counters.ring_requests++;
        if (taken == 1) tfd_conn_dispatch_frame(c, frame);
        handled++;
    }
    return handled;
}

/* Takes seq out of the table of requests to answer in the ring; 1 when it was there. */
static int take_outstanding(tfd_ring *r, uint64_t seq) {
    for (int i = 0; i < TFD_RING_OUTSTANDING; i++)
        if (r->outstanding[i] == seq) {
            r->outstanding[i] = 0;
            return 1;
        }
    return 0;
}

int tfd_ring_reply(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_ring *r = &c->ring;
    if (!r->header || frame->seq == 0 || !take_outstanding(r, frame->seq)) return 0;
    size_t len = tenferro__frame__get_packed_size(frame);
    uint64_t span = tf__ring_span((uint32_t)len);
    /* The client's read position, read once; one outside what was written is its own loss. */
    uint64_t tail = __atomic_load_n(&r->header->rep_tail, __ATOMIC_ACQUIRE);
    if (tail > r->rep_head || r->rep_head - tail + span > TF_RING_REPLY_BYTES) {
        tfd_conn_fail(c, "submission ring: no room for a reply of %zu bytes (rep_tail %llu, %llu "
                         "written): the client does not read its replies",
                      len, (unsigned long long)tail, (unsigned long long)r->rep_head);
        return 1;
    }
    uint8_t *body = malloc(len ? len : 1);
    if (!body) {
        tfd_conn_fail_no_memory(c, "writing a reply into the ring"); /* a lost reply would leave the client waiting */
        return 1;
    }
    tenferro__frame__pack(frame, body);
    tf_ring_entry e = {.bytes = (uint32_t)len, .seq = frame->seq};
    tf__ring_put(r->replies, TF_RING_REPLY_BYTES, r->rep_head, &e, sizeof e);
    tf__ring_put(r->replies, TF_RING_REPLY_BYTES, r->rep_head + sizeof e, body, len);
    free(body);
    r->rep_head += span;
    __atomic_store_n(&r->header->rep_head, r->rep_head, __ATOMIC_RELEASE);
    __atomic_store_n(&r->header->rep_count, ++r->rep_count, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&r->header->client_sleeping, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &r->header->rep_count, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    /* The client's next request is likely microseconds away: look for it without sleeping. */
    tfd_busy_poll_ring_touch(&c->srv->busy_poll);
    return 1;
}
