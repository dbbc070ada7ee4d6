/*
 * Hello: the handshake. Checks the protocol version, records the client's
 * name, creates its logical stream and answers with the daemon's limits.
 */
#include <stdio.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/server.h"

void tfd_handle_hello(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    Tenferro__Hello *hello = frame->hello;
    uint64_t seq = frame->seq;
    if (c->hello_done) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "Hello sent twice");
        return;
    }
    if (hello->client_name && hello->client_name[0])
        snprintf(c->name, sizeof c->name, "%s", hello->client_name);
    if (hello->protocol_version != TENFERRO__PROTOCOL__PROTOCOL_VERSION) {
        unsigned theirs = hello->protocol_version;
        tf__frame_free(frame);
        srv->counters.protocol_errors++;
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d, %s) speaks protocol %u, this daemon %d: refused",
                (unsigned long long)c->client_id, (int)c->pid, c->name, theirs,
                TENFERRO__PROTOCOL__PROTOCOL_VERSION);
        tfd_conn_reply(c, seq, TF_ERR_VERSION,
                       "client speaks protocol %u but tenferrod speaks %d: use a client library "
                       "that matches the daemon",
                       theirs, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
        tfd_conn_close(c);
        return;
    }
    tf__frame_free(frame);
    if (srv->opt.max_clients > 0 && srv->n_conns > srv->opt.max_clients) {
        srv->counters.connections_refused++;
        tfd_conn_reply(c, seq, TF_ERR_TOO_MANY_CLIENTS,
                       "tenferrod already serves its maximum of %d clients; retry later",
                       srv->opt.max_clients);
        tfd_conn_close(c);
        return;
    }
    char msg[256];
    if (tfd_stream_create(srv->ex, 0, &c->stream, msg, sizeof msg) != TF_OK) {
        tfd_conn_reply(c, seq, TF_ERR_DEVICE, "%s", msg);
        tfd_conn_close(c);
        return;
    }
    c->hello_done = 1;
    tfd_log(TFD_LOG_INFO, "client %llu connected: pid %d uid %u name %s",
            (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, c->name);

    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    Tenferro__HelloReply reply = TENFERRO__HELLO_REPLY__INIT;
    reply.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    reply.device = srv->backend.description;
    reply.max_frame_bytes = srv->opt.max_frame_bytes;
    reply.client_id = c->client_id;
    reply.daemon_version = TFD_VERSION_STRING;
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_HELLO_REPLY;
    out.hello_reply = &reply;
    tfd_conn_send(c, &out);
}
