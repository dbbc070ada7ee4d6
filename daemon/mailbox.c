/*
 * Submission mailboxes (common/completion.h): a pending transfer written
 * into shared memory instead of a Transfer frame. While the loop busy-polls
 * it looks at every connection's mailbox on each turn, so a request starts
 * within a microsecond of being written, without a socket hop; before the
 * loop sleeps it tells every client so (daemon_polling = 0) and looks once
 * more, and a client that then writes a request rings the doorbell frame.
 *
 * A request is served exactly like a Transfer frame (tfd_transfer_start),
 * after every frame the client sent before it (after_seq) has been handled,
 * so it can name a tensor created or computed by those frames. Each field
 * is read once from the shared page before it is checked: the client can
 * change the page at any time and cannot make the daemon act on a value it
 * did not check.
 */
#include <limits.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/mailbox.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/handle-transfer.h"

/* Reads a 32- or 64-bit field of the shared mailbox once. */
#define READ_ONCE(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

int tfd_conn_poll_mailbox(tfd_conn *c) {
    tf__mailbox *m = c->mailbox;
    /* Sequentially consistent: ordered after a store of daemon_polling = 0 (completion.h). */
    if (!m || c->closing || c->paused ||
        __atomic_load_n(&m->state, __ATOMIC_SEQ_CST) != TF__MAILBOX_SUBMITTED)
        return 0;
    /* Frames sent before the request are not all handled yet: it waits for them. */
    if (READ_ONCE(m->after_seq) > c->dispatched_seq) return 0;
    /* So does every request while the client's unread replies are at their limit (memory-limits.c). */
    if (!tfd_memory_input_may_go(c)) return 0;
    tfd_transfer_request r = {
        .direction = READ_ONCE(m->direction),
        .buffer = READ_ONCE(m->buffer),
        .tensor = READ_ONCE(m->tensor),
        .offset = READ_ONCE(m->offset),
        .bytes = READ_ONCE(m->bytes),
        .slot = READ_ONCE(m->slot),
    };
    /* Transfers the client has seen complete are finished first, as before a read. */
    tfd_conn_reap_transfers(c);
    c->srv->counters.mailbox_requests++;
    tfd_busy_poll_request(&c->srv->busy_poll);
    char msg[sizeof m->message];
    msg[0] = '\0';
    tf_status st = tfd_transfer_start(c, &r, 0, msg, sizeof msg);
    if (st != TF_OK)
        tfd_log(TFD_LOG_DEBUG, "client %llu: mailbox transfer refused: %s",
                (unsigned long long)c->client_id, msg);
    memcpy(m->message, msg, sizeof msg);
    __atomic_store_n(&m->status, (uint32_t)st, __ATOMIC_RELAXED);
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_ANSWERED, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&m->client_sleeping, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &m->state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    return 1;
}

/* A doorbell rings for the mailbox and the submission ring alike (ring.c). */
void tfd_handle_mailbox_doorbell(tfd_conn *c, Tenferro__Frame *frame) {
    tf__frame_free(frame);
    (void)tfd_conn_poll_mailbox(c);
    (void)tfd_conn_poll_ring(c);
}

int tfd_server_poll_mailboxes(tfd_server *srv) {
    int served = 0;
    for (tfd_conn *c = srv->conns; c; c = c->next)
        served += tfd_conn_poll_mailbox(c) + tfd_conn_poll_ring(c);
    return served;
}

void tfd_server_mailboxes_polled(tfd_server *srv, int polling) {
    if (srv->mailboxes_polled == polling) return;
    srv->mailboxes_polled = polling;
    for (tfd_conn *c = srv->conns; c; c = c->next)
        if (c->mailbox) __atomic_store_n(&c->mailbox->daemon_polling, (uint32_t)polling, __ATOMIC_SEQ_CST);
}
