/*
 * Mapped: the client has mapped a memfd the daemon handed it (a pinned
 * buffer, or with buffer 0 its completion page holding the mailbox and the
 * ring) and the daemon seals it (pinned.h, tfd_memfd_seal). Until then the
 * daemon touches none of that memory: the page's mailbox and ring are not
 * looked at and transfers are refused, so a client that punches holes before
 * it says Mapped gets its pages allocated again or a typed refusal, never a
 * daemon that faults. No reply: the client library sends Mapped right after
 * its mmap and goes on; what a refused seal means reaches it at its first use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/pinned-work.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/* The completion page is small: sealed here, on the loop, and then put to use. */
static void seal_page(tfd_conn *c) {
    if (c->page_fd < 0) return; /* sealed already, or a peer daemon's connection (no page) */
    char msg[256];
    tf_status st = tfd_memfd_seal(c->page_fd, TF_RING_MAP_BYTES, msg, sizeof msg);
    close(c->page_fd);
    c->page_fd = -1;
    if (st != TF_OK) {
        c->srv->counters.shared_seals_refused++;
        tfd_conn_fail(c, "completion page: %s", msg);
        return;
    }
    if (c->ring_offered && tfd_ring_attach(c, (uint8_t *)c->completion) != 0) {
        tfd_conn_fail_no_memory(c, "the submission ring's copy-out buffer");
        return;
    }
    c->mailbox = (tf__mailbox *)((uint8_t *)c->completion + TF__MAILBOX_OFFSET);
    __atomic_store_n(&c->mailbox->daemon_polling, (uint32_t)c->srv->mailboxes_polled,
                     __ATOMIC_SEQ_CST);
}

/* A buffer's seal in progress on the thread pool. */
typedef struct sealing {
    tfd_conn *conn;
    uint64_t id;
} sealing;

/* Loop: books the seal's outcome in the buffer's record; the connection reads again. */
static void on_sealed(void *arg, tf_status st, const tfd_pinned *done, const char *msg) {
    sealing *s = arg;
    tfd_conn *c = s->conn;
    free(s);
    c->buffer_creations--;
    tfd_pinned *rec = tfd_pinned_table_find(&c->buffers, done->id);
    if (rec) {
        *rec = *done; /* the descriptor closed, the registration made */
        rec->creating = 0;
        rec->sealed = 0;
        tfd_pinned_table_sealed(&c->buffers, rec, st);
    }
    if (st != TF_OK) {
        c->srv->counters.shared_seals_refused++;
        tfd_log(TFD_LOG_INFO, "client %llu: pinned buffer %llu refused at its seal: %s",
                (unsigned long long)c->client_id, (unsigned long long)done->id, msg);
    }
    if (c->closing) {
        tfd_conn_maybe_free(c);
        return;
    }
    tfd_conn_resume(c);
}

void tfd_handle_mapped(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t id = frame->mapped->buffer;
    tf__frame_free(frame);
    if (id == 0) {
        seal_page(c);
        return;
    }
    tfd_pinned *b = tfd_pinned_table_find(&c->buffers, id);
    /* Nothing to answer: an unknown id, or a buffer sealed already, is simply left as it is. */
    if (!b || b->creating || b->fd < 0) {
        tfd_log(TFD_LOG_DEBUG, "client %llu: Mapped names pinned buffer %llu, which waits for no seal",
                (unsigned long long)c->client_id, (unsigned long long)id);
        return;
    }
    sealing *s = malloc(sizeof *s);
    if (!s) {
        tfd_conn_fail_no_memory(c, "sealing a pinned buffer");
        return;
    }
    *s = (sealing){c, id};
    /* Busy meanwhile: neither freed nor used, and the connection waits for the outcome. */
    b->creating = 1;
    if (tfd_pinned_seal_async(c->srv->loop, &c->srv->backend, b, on_sealed, s) != TF_OK) {
        b->creating = 0;
        free(s);
        tfd_conn_fail_no_memory(c, "sealing a pinned buffer");
        return;
    }
    c->buffer_creations++;
    tfd_conn_pause(c);
}
