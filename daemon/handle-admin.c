/*
 * AdminRequest: what tenferroctl's mutating commands ask of a running daemon.
 * Only root, the daemon's own user and the principals of [access] admin_users
 * may send one (DESIGN.md §9). Each kind acts at once and never waits on a
 * session (§5): terminate ends a client's connection through the ordinary close
 * path (its tensors freed, its reservation released once its stream drains, the
 * next queued opener admitted); drain stops admitting connections and lets the
 * daemon exit when its last client leaves; trim returns cached device memory,
 * or answers TF_ERR_BUSY while a held session has the device checked out.
 * Every action is logged with who asked for it.
 */
#include <string.h>
#include <unistd.h>

#include "daemon/access.h"
#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/options.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/* Names of the kinds, for the log and for refusals. */
static const char *kind_name(uint32_t kind) {
    switch (kind) {
    case TENFERRO__ADMIN_KIND__ADMIN_TERMINATE: return "terminate";
    case TENFERRO__ADMIN_KIND__ADMIN_DRAIN: return "drain";
    case TENFERRO__ADMIN_KIND__ADMIN_TRIM: return "trim";
    default: return "unknown admin request";
    }
}

/* Root, the daemon's own (service) user, or a principal listed in [access] admin_users. */
static int may_administer(const tfd_conn *c) {
    const tfd_options *opt = &c->srv->opt;
    return c->uid == 0 || c->uid == geteuid() ||
           tfd_access_matches(opt->admins, opt->n_admins, c->uid, c->gid);
}

/* The connection of a client past its handshake and not closing, or NULL. */
static tfd_conn *find_client(tfd_server *srv, uint64_t client_id) {
    for (tfd_conn *o = srv->conns; o; o = o->next)
        if (o->client_id == client_id && o->hello_done && !o->closing) return o;
    return NULL;
}

/* Ends another client's (or the requester's own) connection and reclaims what it held. */
static void terminate(tfd_conn *c, uint64_t seq, uint64_t target) {
    tfd_server *srv = c->srv;
    tfd_conn *victim = find_client(srv, target);
    if (!victim) {
        tfd_conn_reply(c, seq, TF_ERR_INVALID_ARGUMENT,
                       "no client %llu: tenferroctl status lists the connected clients",
                       (unsigned long long)target);
        return;
    }
    tfd_log(TFD_LOG_WARN,
            "client %llu (pid %d, uid %u, %s) terminated by client %llu (pid %d, uid %u)%s",
            (unsigned long long)victim->client_id, (int)victim->pid, (unsigned)victim->uid,
            victim->name, (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid,
            victim->session_id ? "; its held session's reservation is released" : "");
    srv->counters.clients_terminated++;
    /* Answer first: when the requester terminates itself, its connection is about to close. */
    tfd_conn_reply(c, seq, TF_OK, "client %llu terminated", (unsigned long long)target);
    /* Sequence 0: the client library reports it on the victim's next call, then disconnects. */
    tfd_conn_reply(victim, 0, TF_ERR_DISCONNECTED,
                   "terminated by an administrator (client %llu, uid %u)",
                   (unsigned long long)c->client_id, (unsigned)c->uid);
    tfd_conn_close(victim);
}

/* Stops admitting connections; the daemon exits once the last client (the requester too) leaves. */
static void drain(tfd_conn *c, uint64_t seq) {
    tfd_server *srv = c->srv;
    int clients = tfd_server_client_count(srv);
    if (!srv->draining)
        tfd_log(TFD_LOG_WARN,
                "drain requested by client %llu (pid %d, uid %u): refusing new connections; "
                "exiting when the last of %d client%s leaves",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, clients,
                clients == 1 ? "" : "s");
    srv->draining = 1;
    tfd_notify_draining();
    tfd_conn_reply(c, seq, TF_OK,
                   "draining: new connections are refused; tenferrod exits when the last of its "
                   "%d client%s (this one included) disconnects",
                   clients, clients == 1 ? "" : "s");
}

/* Worker: destroys the prepared-graph instances trim let go of (that may wait for the device). */
static void drain_on_worker(tfd_stream *s, void *arg) {
    (void)s;
    tfd_prepared_cache_drain(arg);
}

/* Queues that drain on the asking connection's stream (without memory, the next build drains). */
static void drain_prepared_later(tfd_conn *c) {
    if (!c->stream) return;
    tfd_item *it = tfd_item_new(TFD_ITEM_CALL);
    if (!it) return;
    it->u.call.fn = drain_on_worker;
    it->u.call.arg = &c->srv->prepared;
    tfd_stream_enqueue(c->stream, it, it, 1);
}

/* Returns the device's cached memory, unless a held session has the device checked out. */
static void trim(tfd_conn *c, uint64_t seq) {
    tfd_server *srv = c->srv;
    const tfd_conn *holder = srv->res.holder;
    if (holder) {
        tfd_conn_reply(c, seq, TF_ERR_BUSY, "a held session of client %llu is open; trim later",
                       (unsigned long long)holder->client_id);
        return;
    }
    tfd_backend *be = &srv->backend;
    const uint64_t graphs = tfd_prepared_cache_clear(&srv->prepared);
    drain_prepared_later(c);
    if (!be->vt->trim) {
        tfd_conn_reply(c, seq, TF_OK,
                       "the %s backend keeps no memory to trim; %llu prepared graph%s let go", be->vt->name,
                       (unsigned long long)graphs, graphs == 1 ? "" : "s");
        return;
    }
    char msg[400] = "";
    tf_status st = be->vt->trim(be, msg, sizeof msg);
    if (st == TF_OK) {
        const size_t at = strlen(msg);
        snprintf(msg + at, sizeof msg - at, "; %llu prepared graph%s let go",
                 (unsigned long long)graphs, graphs == 1 ? "" : "s");
    }
    tfd_log(st == TF_OK ? TFD_LOG_INFO : TFD_LOG_ERROR, "trim requested by client %llu (uid %u): %s",
            (unsigned long long)c->client_id, (unsigned)c->uid, msg);
    tfd_conn_reply(c, seq, st, "%s", msg);
}

void tfd_handle_admin(tfd_conn *c, Tenferro__Frame *frame) {
    uint64_t seq = frame->seq;
    uint32_t kind = frame->admin_request->kind;
    uint64_t target = frame->admin_request->client_id;
    tf__frame_free(frame);
    if (!may_administer(c)) {
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d, uid %u) may not %s: refused",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, kind_name(kind));
        tfd_conn_reply(c, seq, TF_ERR_PERMISSION,
                       "uid %u may not %s: admin requests need root, the tenferrod user (uid %u) "
                       "or [access] admin_users",
                       (unsigned)c->uid, kind_name(kind), (unsigned)geteuid());
        return;
    }
    switch (kind) {
    case TENFERRO__ADMIN_KIND__ADMIN_TERMINATE:
        terminate(c, seq, target);
        return;
    case TENFERRO__ADMIN_KIND__ADMIN_DRAIN:
        drain(c, seq);
        return;
    case TENFERRO__ADMIN_KIND__ADMIN_TRIM:
        trim(c, seq);
        return;
    default:
        tfd_conn_reply(c, seq, TF_ERR_UNSUPPORTED,
                       "admin request kind %u is not served by this tenferrod", kind);
        return;
    }
}
