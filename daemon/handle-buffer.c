/*
 * BufferCreate and BufferFree: a client's pinned buffers (pinned.h). A buffer
 * is created under the id the client chose, after its quotas and the
 * daemon-wide [daemon] max_pinned_bytes allow it; the reply carries its
 * sealed memfd. A buffer a transfer uses cannot be freed (TF_ERR_BUSY). When
 * the connection goes, the idle buffers go at once and the others as their
 * transfers complete; the completion page goes with the connection.
 */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/quota.h"
#include "daemon/server.h"

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
    tf_status st = tfd_quota_check_pinned(c, bytes, msg, len);
    if (st != TF_OK) return st;
    uint64_t max = srv->opt.max_pinned_bytes, live = srv->counters.pinned_bytes_live;
    if (max && (bytes > max || live > max - bytes)) {
        srv->counters.quota_refusals++;
        snprintf(msg, len,
                 "daemon-wide pinned memory limit: [daemon] max_pinned_bytes %llu would be exceeded "
                 "(%llu bytes pinned by all clients, asking %llu); free pinned buffers, use a "
                 "smaller one, or raise --max-pinned-bytes",
                 (unsigned long long)max, (unsigned long long)live, (unsigned long long)bytes);
        return TF_ERR_QUOTA;
    }
    return TF_OK;
}

void tfd_handle_buffer_create(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    uint64_t seq = frame->seq, id = frame->buffer_create->buffer,
             bytes = frame->buffer_create->bytes;
    tf__frame_free(frame);
    char msg[512];
    tf_status st = check_create(c, id, bytes, msg, sizeof msg);
    tfd_pinned b;
    int fd = -1;
    if (st == TF_OK) st = tfd_pinned_create(&srv->backend, id, (size_t)bytes, &b, &fd, msg, sizeof msg);
    if (st == TF_OK && tfd_pinned_table_insert(&c->buffers, &b) != 0) {
        tfd_pinned_destroy(&srv->backend, &b);
        close(fd);
        snprintf(msg, sizeof msg, "out of host memory");
        st = TF_ERR_NO_MEMORY;
    }
    if (st != TF_OK) {
        tfd_conn_reply(c, seq, st, "%s", msg);
        return;
    }
    srv->counters.pinned_buffers_created++;
    srv->counters.pinned_buffers_live++;
    srv->counters.pinned_bytes_live += bytes;
    tfd_log(TFD_LOG_DEBUG, "client %llu: pinned buffer %llu of %llu bytes created%s",
            (unsigned long long)c->client_id, (unsigned long long)id, (unsigned long long)bytes,
            b.registered ? " and registered" : "");

    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = TF_OK;
    result.message = "";
    tfd_conn_send_result(c, seq, &result, fd);
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
    if (b->in_flight) {
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
    tfd_pinned_destroy(&c->srv->backend, &b);
    c->srv->counters.pinned_buffers_live--;
    c->srv->counters.pinned_bytes_live -= b.bytes;
}

void tfd_conn_buffers_release(tfd_conn *c, int all) {
    uint64_t n = 0, bytes = 0;
    tfd_pinned_table_release(&c->buffers, &c->srv->backend, !all, &n, &bytes);
    c->srv->counters.pinned_buffers_live -= n;
    c->srv->counters.pinned_bytes_live -= bytes;
    if (!all) return;
    tfd_pinned_table_free(&c->buffers);
    tfd_completion_page_destroy(c->completion);
    c->completion = NULL;
}
