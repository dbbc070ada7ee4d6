/*
 * BufferCreate and BufferFree: a client's pinned buffers (pinned.h). A buffer
 * is created under the id the client chose, after its quotas and the
 * daemon-wide [daemon] max_pinned_bytes allow it (in whole pages) and the
 * count limits too; the reply carries its memfd, sealed further once the
 * client says Mapped (handle-mapped.c). A buffer a transfer uses cannot be freed (TF_ERR_BUSY). When
 * the connection goes, the idle buffers go at once and the others as their
 * transfers complete; the completion page goes with the connection.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/connection.h"
#include "daemon/handle-buffer.h"
#include "daemon/log.h"
#include "daemon/pinned-work.h"
#include "daemon/quota.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/*
 * Buffers a client may have waiting for their Mapped: each holds one of the
 * daemon's descriptors, and the client library has at most one at a time.
 */
#define MAX_UNSEALED_PER_CLIENT 8

/* Pinned buffers of all of uid's connections. */
static uint64_t uid_buffers(const tfd_server *srv, uid_t uid) {
    uint64_t n = 0;
    for (const tfd_conn *o = srv->conns; o; o = o->next)
        if (o->uid == uid) n += o->buffers.count;
    return n;
}

/*
 * The count limits: each buffer is one mapping of the daemon (the kernel's
 * vm.max_map_count bounds them all) and, until sealed, one descriptor.
 */
static tf_status check_count(tfd_conn *c, char *msg, size_t len) {
    tfd_server *srv = c->srv;
    const tfd_options *o = &srv->opt;
    const char *what = NULL;
    uint64_t limit = 0;
    if (c->buffers.unsealed >= MAX_UNSEALED_PER_CLIENT) {
        what = "buffers created but not yet Mapped by one client (fixed)";
        limit = MAX_UNSEALED_PER_CLIENT;
    } else if (o->max_buffers_per_client && c->buffers.count >= (uint64_t)o->max_buffers_per_client) {
        what = "[limits] max_buffers_per_client";
        limit = (uint64_t)o->max_buffers_per_client;
    } else if (o->max_buffers_per_uid &&
               uid_buffers(srv, c->uid) >= (uint64_t)o->max_buffers_per_uid) {
        what = "[limits] max_buffers_per_uid";
        limit = (uint64_t)o->max_buffers_per_uid;
    } else if (o->max_buffers && srv->counters.pinned_buffers_live >= (uint64_t)o->max_buffers) {
        what = "[daemon] max_buffers (all clients)";
        limit = (uint64_t)o->max_buffers;
    }
    if (!what) return TF_OK;
    srv->counters.limit_refusals++;
    snprintf(msg, len, "pinned buffer limit reached: %s is %llu; free buffers or reuse one",
             what, (unsigned long long)limit);
    return TF_ERR_QUOTA;
}

/* Checks a BufferCreate before anything is allocated: its id, its size, then every limit. */
static tf_status check_create(tfd_conn *c, uint64_t id, uint64_t bytes, char *msg, size_t len) {
    tfd_server *srv = c->srv;
    if (id == 0 || tfd_pinned_table_find(&c->buffers, id)) {
        snprintf(msg, len, "pinned buffer id %llu is zero or already in use on this connection",
                 (unsigned long long)id);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (bytes == 0) {
        snprintf(msg, len, "a pinned buffer needs at least 1 byte, the request asks for 0");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (bytes > (uint64_t)INT64_MAX / 2) {
        snprintf(msg, len, "a pinned buffer of %llu bytes is beyond any host's memory",
                 (unsigned long long)bytes);
        return TF_ERR_INVALID_ARGUMENT;
    }
    tf_status st = check_count(c, msg, len);
    if (st != TF_OK) return st;
    /* Pages are what the kernel pins and maps: a 1-byte buffer costs a whole page. */
    const uint64_t charge = tfd_pinned_charge(bytes);
    st = tfd_quota_check_pinned(c, charge, msg, len);
    if (st != TF_OK) return st;
    uint64_t max = srv->opt.max_pinned_bytes, live = srv->counters.pinned_bytes_live;
    if (max && (charge > max || live > max - charge)) {
        srv->counters.quota_refusals++;
        snprintf(msg, len,
                 "daemon-wide pinned memory limit: [daemon] max_pinned_bytes %llu would be exceeded "
                 "(%llu bytes pinned by all clients, in whole pages, asking %llu); free pinned "
                 "buffers, use a smaller one, or raise --max-pinned-bytes",
                 (unsigned long long)max, (unsigned long long)live, (unsigned long long)charge);
        return TF_ERR_QUOTA;
    }
    return TF_OK;
}

/* A BufferCreate whose memfd is being made on the thread pool. */
typedef struct creation {
    tfd_conn *conn;
    uint64_t seq, id, bytes;
} creation;

/*
 * Loop, once the thread pool has made (or failed to make) the buffer: fills
 * the reserved record and answers with the memfd, or gives the reservation
 * back and answers with the reason; then the connection reads again. A
 * connection that closed meanwhile gets nothing: the buffer is destroyed.
 */
static void on_created(void *arg, tf_status st, const tfd_pinned *b, int fd, const char *msg) {
    creation *cr = arg;
    tfd_conn *c = cr->conn;
    tfd_server *srv = c->srv;
    c->buffer_creations--;
    tfd_pinned *rec = tfd_pinned_table_find(&c->buffers, cr->id);
    if (st != TF_OK || c->closing || !rec) {
        /* The reservation goes, with the buffer if it was made (nobody is left to take it). */
        if (st == TF_OK) {
            close(fd);
            if (rec)
                *rec = *b;
            else
                tfd_pinned_destroy_async(srv->loop, &srv->backend, b);
        }
        tfd_conn_buffer_drop(c, cr->id);
        if (!c->closing) {
            tfd_conn_reply(c, cr->seq, st, "%s", msg);
            tfd_conn_resume(c);
        } else {
            tfd_conn_maybe_free(c);
        }
        free(cr);
        return;
    }
    *rec = *b;
    srv->counters.pinned_buffers_created++;
    if (b->huge) srv->counters.pinned_buffers_huge++;
    tfd_log(TFD_LOG_DEBUG, "client %llu: pinned buffer %llu of %llu bytes created%s",
            (unsigned long long)c->client_id, (unsigned long long)cr->id,
            (unsigned long long)cr->bytes, b->huge ? " on huge pages" : "");
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = TF_OK;
    result.message = "";
    tfd_conn_send_result(c, cr->seq, &result, fd);
    free(cr);
    tfd_conn_resume(c);
}

/*
 * BufferCreate: checked on the loop, where the buffer is also reserved (its
 * id taken, its bytes counted against every limit), then made on the thread
 * pool. The connection reads nothing more until the answer is out, so its
 * later requests find the buffer made, exactly as if it had been made here.
 */
void tfd_handle_buffer_create(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    uint64_t seq = frame->seq, id = frame->buffer_create->buffer,
             bytes = frame->buffer_create->bytes;
    tf__frame_free(frame);
    char msg[512];
    tf_status st = check_create(c, id, bytes, msg, sizeof msg);
    creation *cr = NULL;
    if (st == TF_OK) {
        cr = malloc(sizeof *cr);
        tfd_pinned reserved = {.id = id,
                               .bytes = (size_t)bytes,
                               .charged = tfd_pinned_charge(bytes),
                               .fd = -1,
                               .creating = 1};
        if (!cr || tfd_pinned_table_insert(&c->buffers, &reserved) != 0) {
            free(cr);
            snprintf(msg, sizeof msg, "out of host memory");
            st = TF_ERR_NO_MEMORY;
        }
    }
    if (st != TF_OK) {
        tfd_conn_reply(c, seq, st, "%s", msg);
        return;
    }
    *cr = (creation){c, seq, id, bytes};
    srv->counters.pinned_buffers_live++;
    srv->counters.pinned_bytes_live += tfd_pinned_charge(bytes);
    if (tfd_pinned_create_async(srv->loop, &srv->backend, id, (size_t)bytes, on_created, cr) !=
        TF_OK) {
        tfd_conn_buffer_drop(c, id);
        free(cr);
        tfd_conn_reply(c, seq, TF_ERR_NO_MEMORY, "out of host memory");
        return;
    }
    c->buffer_creations++;
    tfd_conn_pause(c);
}

void tfd_handle_buffer_free(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t seq = frame->seq, id = frame->buffer_free->buffer;
    tf__frame_free(frame);
    tfd_pinned *b = tfd_pinned_table_find(&c->buffers, id);
    if (!b) {
        tfd_conn_reply(c, seq, TF_ERR_UNKNOWN_HANDLE, "pinned buffer %llu is not live on this connection",
                       (unsigned long long)id);
        return;
    }
    if (b->in_flight || b->creating) {
        tfd_conn_reply(c, seq, TF_ERR_BUSY,
                       "pinned buffer %llu is in a transfer still in flight: wait for it before "
                       "freeing the buffer",
                       (unsigned long long)id);
        return;
    }
    tfd_conn_buffer_drop(c, id);
    tfd_conn_reply(c, seq, TF_OK, NULL);
}

void tfd_conn_buffer_drop(tfd_conn *c, uint64_t id) {
    tfd_pinned b;
    if (tfd_pinned_table_remove(&c->buffers, id, &b) != 0) return;
    /* A reservation whose memfd was never made has nothing to unregister or unmap. */
    if (b.map) tfd_pinned_destroy_async(c->srv->loop, &c->srv->backend, &b);
    c->srv->counters.pinned_buffers_live--;
    c->srv->counters.pinned_bytes_live -= b.charged;
}

uint64_t tfd_conn_mappings(const tfd_conn *c) {
    return c->buffers.count + (c->completion ? 1 : 0);
}

uint64_t tfd_conn_descriptors(const tfd_conn *c) {
    return 1 + (c->page_fd >= 0 ? 1 : 0) + c->buffers.unsealed + (c->take ? 1 : 0);
}

/* Table walker's destroy step: the buffer leaves the books now and memory on the thread pool. */
static void destroy_later(void *arg, tfd_pinned *b) {
    tfd_server *srv = arg;
    tfd_pinned_destroy_async(srv->loop, &srv->backend, b);
}

void tfd_conn_buffers_release(tfd_conn *c, int all) {
    uint64_t n = 0, bytes = 0;
    tfd_pinned_table_release(&c->buffers, !all, destroy_later, c->srv, &n, &bytes);
    c->srv->counters.pinned_buffers_live -= n;
    c->srv->counters.pinned_bytes_live -= bytes;
    if (!all) return;
    tfd_pinned_table_free(&c->buffers);
    tfd_ring_detach(c);
    if (c->page_fd >= 0) close(c->page_fd);
    c->page_fd = -1;
    c->mailbox = NULL;
    tfd_completion_page_destroy(c->completion);
    c->completion = NULL;
}
