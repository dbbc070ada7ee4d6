/*
 * The client's side of the submission ring (include/tenferro/wire.h): the
 * hot path's requests (Submit, SessionOpen, SessionRelease) written into
 * shared memory instead of the socket, and their replies read from there,
 * so a held session's submit or synchronize costs no system call while the
 * daemon polls and no socket wake-up on either side. Each entry names the
 * last frame sent on the socket before it, and the library sends a frame on
 * the socket only once every ring request has been answered, so the daemon
 * sees the requests in the order they were made. While the daemon does not
 * poll, a MailboxDoorbell frame wakes it. The reply is polled for, then
 * slept on with a futex in bounded steps that check the socket, so a daemon
 * that dies leaves TF_ERR_DISCONNECTED, never a hang.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/internal.h"
#include "common/ring.h"
#include "common/spin.h"

/* Entries at or below this size are packed on the stack. */
#define STACK_ENTRY_BYTES 4096u

/* TENFERRO_RING=0 or off: every request takes the socket (for comparisons and tests). */
static int ring_wanted(void) {
    const char *env = getenv("TENFERRO_RING");
    return !env || !(strcmp(env, "0") == 0 || strcasecmp(env, "off") == 0 || strcasecmp(env, "no") == 0);
}

void tf__ring_attach(tf_client *c, uint8_t *mapping, size_t mapped, uint32_t offset,
                     uint32_t request_bytes, uint32_t reply_bytes) {
    const uint64_t end = (uint64_t)offset + TF_RING_HEADER_BYTES + request_bytes + reply_bytes;
    if (!ring_wanted() || offset == 0 || offset % 4096 != 0 || request_bytes < 4096 ||
        reply_bytes < 4096 || request_bytes % 8 != 0 || reply_bytes % 8 != 0 || end > mapped ||
        !c->mailbox)
        return;
    c->ring = (tf_ring_header *)(mapping + offset);
    c->ring_requests = mapping + offset + TF_RING_HEADER_BYTES;
    c->ring_replies = c->ring_requests + request_bytes;
    c->ring_request_bytes = request_bytes;
    c->ring_reply_bytes = reply_bytes;
    c->ring_req_head = __atomic_load_n(&c->ring->req_head, __ATOMIC_RELAXED);
    c->ring_rep_tail = __atomic_load_n(&c->ring->rep_tail, __ATOMIC_RELAXED);
}

int tf__ring_carries(const tf_client *c, const Tenferro__Frame *frame) {
    return c->ring && !c->broken &&
           (frame->body_case == TENFERRO__FRAME__BODY_SUBMIT ||
            frame->body_case == TENFERRO__FRAME__BODY_SESSION_OPEN);
}

/* Writes frame (its sequence number assigned) as the next request entry; 0, or -1 when it does not fit. */
static int write_entry(tf_client *c, const Tenferro__Frame *frame) {
    size_t len = tenferro__frame__get_packed_size(frame);
    uint64_t span = tf__ring_span(len);
    uint64_t tail = __atomic_load_n(&c->ring->req_tail, __ATOMIC_ACQUIRE);
    if (len > UINT32_MAX || span > c->ring_request_bytes || tail > c->ring_req_head ||
        c->ring_req_head - tail + span > c->ring_request_bytes)
        return -1;
    uint8_t stack[STACK_ENTRY_BYTES];
    uint8_t *body = len <= sizeof stack ? stack : malloc(len);
    if (!body) return -1;
    tenferro__frame__pack(frame, body);
    tf_ring_entry e = {.bytes = (uint32_t)len, .seq = frame->seq, .after_seq = c->last_socket_seq};
    tf__ring_put(c->ring_requests, c->ring_request_bytes, c->ring_req_head, &e, sizeof e);
    tf__ring_put(c->ring_requests, c->ring_request_bytes, c->ring_req_head + sizeof e, body, len);
    if (body != stack) free(body);
    c->ring_req_head += span;
    /* Sequentially consistent, then the polling flag: either the daemon sees it or we ring. */
    __atomic_store_n(&c->ring->req_head, c->ring_req_head, __ATOMIC_SEQ_CST);
    return 0;
}

/* How long to poll for the reply: a synchronize's budget or none (wait-spin.c), else the short default. */
static uint32_t reply_spin_us(const tf_client *c) {
    if (c->wait_sleeps) return 0;
    if (!c->spin_until_ns) return TF__REPLY_SPIN_US;
    uint64_t now = tf__now_ns();
    uint64_t left = c->spin_until_ns > now ? (c->spin_until_ns - now) / 1000u : 0;
    return left > TF__REPLY_SPIN_US ? (uint32_t)left : TF__REPLY_SPIN_US;
}

/* Reads the next reply from the ring, waiting for it; it must answer `seq`. */
static tf_status read_reply(tf_client *c, uint64_t seq, Tenferro__Frame **reply) {
    tf_ring_header *r = c->ring;
    for (;;) {
        uint32_t seen = __atomic_load_n(&r->rep_count, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&r->rep_head, __ATOMIC_ACQUIRE) != c->ring_rep_tail) break;
        tf_status st = tf__await_change(c, &r->rep_count, seen, reply_spin_us(c), &r->client_sleeping);
        if (st != TF_OK) return st;
    }
    uint64_t head = __atomic_load_n(&r->rep_head, __ATOMIC_ACQUIRE);
    uint64_t avail = head - c->ring_rep_tail;
    tf_ring_entry e;
    if (head < c->ring_rep_tail || avail > c->ring_reply_bytes || avail < sizeof e) {
        c->broken = 1;
        return tf__fail(c, TF_ERR_DISCONNECTED, "connection to tenferrod lost: its reply ring is torn");
    }
    tf__ring_get(&e, c->ring_replies, c->ring_reply_bytes, c->ring_rep_tail, sizeof e);
    if (tf__ring_span(e.bytes) > avail || e.seq != seq) {
        c->broken = 1;
        return tf__fail(c, TF_ERR_DISCONNECTED, "connection to tenferrod lost: %s",
                        e.seq != seq ? "reply out of sequence" : "its reply ring is torn");
    }
    uint8_t stack[STACK_ENTRY_BYTES];
    uint8_t *body = e.bytes <= sizeof stack ? stack : malloc(e.bytes);
    if (!body) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory reading a reply");
    tf__ring_get(body, c->ring_replies, c->ring_reply_bytes, c->ring_rep_tail + sizeof e, e.bytes);
    c->ring_rep_tail += tf__ring_span(e.bytes);
    __atomic_store_n(&r->rep_tail, c->ring_rep_tail, __ATOMIC_RELEASE);
    Tenferro__Frame *f = tf__frame_decode(body, e.bytes);
    if (body != stack) free(body);
    if (!f) {
        c->broken = 1;
        return tf__fail(c, TF_ERR_DISCONNECTED, "connection to tenferrod lost: a reply does not decode");
    }
    *reply = f;
    return TF_OK;
}

tf_status tf__ring_call(tf_client *c, Tenferro__Frame *request, Tenferro__Frame **reply) {
    request->seq = ++c->next_seq;
    if (write_entry(c, request) != 0) {
        /* Too large for the ring: the socket carries it, under the same sequence number. */
        c->next_seq--;
        tf_status st = tf__send(c, request);
        return st == TF_OK ? tf__recv(c, request->seq, reply) : st;
    }
    tf_status st = tf__doorbell_if_asleep(c);
    if (st != TF_OK) return st;
    return read_reply(c, request->seq, reply);
}
