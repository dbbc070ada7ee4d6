/*
 * Hello: the handshake. Checks the protocol version, records the client's
 * name (sanitized), admits the peer (limits.c: the client counts, [access];
 * a peer daemon's connection counts for the client it copies for),
 * creates its logical stream at the peer's priority class and its completion
 * page (pinned.h), and answers with the daemon's limits, the page's memfd
 * riding on the reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/sanitize.h"
#include "daemon/access.h"
#include "daemon/connection.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"

static void send_hello_reply(tfd_conn *c, uint64_t seq, int ring, int page_fd);

void tfd_handle_hello(tfd_conn *c, Tenferro__Frame *frame) {
    tfd_server *srv = c->srv;
    Tenferro__Hello *hello = frame->hello;
    uint64_t seq = frame->seq;
    if (c->hello_done) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "Hello sent twice");
        return;
    }
    /* The name reaches logs, other clients' errors and an operator's terminal: printable only. */
    if (hello->client_name && hello->client_name[0])
        tf__sanitize_name(hello->client_name, c->name, sizeof c->name);
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
    const int peer_daemon = hello->peer_daemon;
    const uid_t asking_uid = (uid_t)hello->asking_uid;
    tf__frame_free(frame);
    char msg[256];
    /* Another daemon fetching an offer (peer-offer.c) runs as this daemon's uid, or as root. */
    if (peer_daemon && c->uid != geteuid() && c->uid != 0) {
        srv->counters.connections_refused++;
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d uid %u) asked to be a peer daemon: refused",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid);
        tfd_conn_reply(c, seq, TF_ERR_PERMISSION,
                       "only a tenferrod of this host (uid %u or root) may connect as a peer "
                       "daemon; uid %u may not",
                       (unsigned)geteuid(), (unsigned)c->uid);
        tfd_conn_close(c);
        return;
    }
    c->peer_daemon = peer_daemon;
    /* Trusted only now that the peer is known to be a daemon of this host: it names its client. */
    if (peer_daemon) c->asking_uid = asking_uid;
    tf_status refusal = tfd_limits_admit_client(c, msg, sizeof msg);
    if (refusal != TF_OK) {
        srv->counters.connections_refused++;
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d uid %u) refused: %s",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, msg);
        tfd_conn_reply(c, seq, refusal, "%s", msg);
        tfd_conn_close(c);
        return;
    }
    if (peer_daemon) {
        /* A peer daemon only fetches offers: no stream, completion page or ring of its own. */
        c->hello_done = 1;
        tfd_log(TFD_LOG_INFO,
                "client %llu connected: a peer daemon (pid %d uid %u) copying for uid %u",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid,
                (unsigned)c->asking_uid);
        send_hello_reply(c, seq, 0, -1);
        return;
    }
    c->priority = tfd_access_priority(&srv->opt, c->uid, c->gid);
    tf_status made = tfd_stream_create(srv->ex, c->priority, &c->stream, msg, sizeof msg);
    if (made != TF_OK) {
        tfd_conn_reply(c, seq, made == TF_ERR_NO_MEMORY ? made : TF_ERR_DEVICE, "%s", msg);
        tfd_conn_close(c);
        return;
    }
    int page_fd = -1;
    tf_status st = tfd_completion_page_create(&c->completion, &page_fd, msg, sizeof msg);
    if (st != TF_OK) {
        tfd_log(TFD_LOG_ERROR, "client %llu: no completion page: %s", (unsigned long long)c->client_id,
                msg);
        tfd_conn_reply(c, seq, st, "tenferrod cannot create the completion page: %s", msg);
        tfd_conn_close(c);
        return;
    }
    /* The daemon keeps a descriptor of the page until the client says Mapped (handle-mapped.c). */
    c->page_fd = fcntl(page_fd, F_DUPFD_CLOEXEC, 0);
    if (c->page_fd < 0) {
        close(page_fd);
        tfd_conn_reply(c, seq, TF_ERR_NO_MEMORY, "tenferrod cannot keep the completion page: %s",
                       strerror(errno));
        tfd_conn_close(c);
        return;
    }
    /* The mailbox and the ring are used once the page is sealed; the ring is offered now. */
    const int ring = 1;
    c->ring_offered = ring;
    c->hello_done = 1;
    tfd_log(TFD_LOG_INFO, "client %llu connected: pid %d uid %u name %s priority %d",
            (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, c->name, c->priority);

    send_hello_reply(c, seq, ring, page_fd);
}

/*
 * Answers the Hello: the daemon's limits, and for a client (page_fd >= 0)
 * its completion page, mailbox and, with `ring`, submission ring, the
 * page's memfd riding on the reply. A peer daemon gets the limits alone.
 */
static void send_hello_reply(tfd_conn *c, uint64_t seq, int ring, int page_fd) {
    tfd_server *srv = c->srv;
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
    if (page_fd < 0) {
        tfd_conn_send(c, &out);
        return;
    }
    reply.completion_slots = (uint32_t)TF__COMPLETION_SLOTS;
    reply.mailbox_offset = TF__MAILBOX_OFFSET;
    if (ring) {
        reply.ring_offset = TF_RING_OFFSET;
        reply.ring_request_bytes = TF_RING_REQUEST_BYTES;
        reply.ring_reply_bytes = TF_RING_REPLY_BYTES;
    }
    tfd_conn_send_with_fd(c, &out, page_fd);
}
