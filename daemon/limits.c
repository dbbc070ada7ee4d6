/*
 * Connection and input limits per uid (limits.h). The counts are taken by
 * walking the connection list: they are needed at accept, at the Hello and
 * when a receive buffer grows, never per frame, and the list is bounded by
 * these same limits.
 */
#include <stdio.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/access.h"
#include "daemon/connection.h"
#include "daemon/limits.h"
#include "daemon/server.h"

/* Root and the service user are not held to the per-uid counts: an operator can reach a daemon one user filled. */
static int exempt(uid_t uid) { return uid == 0 || uid == geteuid(); }

uid_t tfd_limits_charged_uid(const tfd_conn *c) { return c->peer_daemon ? c->asking_uid : c->uid; }

/*
 * Live (not closing) connections charged to uid, those past their Hello or
 * those still before it (where the charged uid is still the connection's own).
 */
static int count_uid(const tfd_server *srv, const tfd_conn *self, uid_t uid, int hello_done) {
    int n = 0;
    for (const tfd_conn *o = srv->conns; o; o = o->next)
        if (o != self && tfd_limits_charged_uid(o) == uid && !o->closing &&
            o->hello_done == hello_done)
            n++;
    return n;
}

/* 1 (with the refusal in msg) while an admin drain refuses new clients. */
static int draining(const tfd_server *srv, char *msg, size_t len) {
    if (!srv->draining) return 0;
    snprintf(msg, len, "tenferrod is draining; connect to another daemon or retry after it restarts");
    return 1;
}

tf_status tfd_limits_admit_connection(tfd_conn *c, char *msg, size_t len) {
    tfd_server *srv = c->srv;
    if (draining(srv, msg, len)) return TF_ERR_BUSY;
    if (tfd_access_check(&srv->opt, c->uid, c->gid, msg, len) != TF_OK) return TF_ERR_PERMISSION;
    int max = srv->opt.max_handshakes_per_uid;
    if (max > 0 && !exempt(c->uid) && count_uid(srv, c, c->uid, 0) >= max) {
        snprintf(msg, len,
                 "uid %u already has %d connections that have not finished their Hello "
                 "([limits] max_handshakes_per_uid); finish or close those first",
                 (unsigned)c->uid, max);
        return TF_ERR_TOO_MANY_CLIENTS;
    }
    return TF_OK;
}

tf_status tfd_limits_admit_client(tfd_conn *c, char *msg, size_t len) {
    tfd_server *srv = c->srv;
    if (draining(srv, msg, len)) return TF_ERR_BUSY;
    /* Checked again: a reload may have changed the list since the accept. */
    if (tfd_access_check(&srv->opt, c->uid, c->gid, msg, len) != TF_OK) return TF_ERR_PERMISSION;
    if (srv->opt.max_clients > 0 && tfd_server_client_count(srv) >= srv->opt.max_clients) {
        snprintf(msg, len, "tenferrod already serves its maximum of %d clients; retry later",
                 srv->opt.max_clients);
        return TF_ERR_TOO_MANY_CLIENTS;
    }
    int per_uid = srv->opt.max_clients_per_uid;
    /*
     * A peer daemon runs as root or the service user, but its connection
     * serves the client that asked for the copy: it counts for that uid, and
     * is not exempt whatever that uid is, so copies cannot fill max_clients.
     */
    const uid_t who = tfd_limits_charged_uid(c);
    if (per_uid > 0 && (c->peer_daemon || !exempt(who)) && count_uid(srv, c, who, 1) >= per_uid) {
        snprintf(msg, len,
                 "uid %u already has %d clients connected%s ([limits] max_clients_per_uid); close "
                 "one or ask the administrator to raise the limit",
                 (unsigned)who, per_uid,
                 c->peer_daemon ? " (copies to other daemons included)" : "");
        return TF_ERR_TOO_MANY_CLIENTS;
    }
    return TF_OK;
}

tf_status tfd_limits_admit_take(tfd_conn *c, char *msg, size_t len) {
    const tfd_server *srv = c->srv;
    const int max = srv->opt.max_takes_per_uid;
    if (max <= 0) return TF_OK;
    /* Closing connections count too: their fetch thread runs until it notices. */
    int n = 0;
    for (const tfd_conn *o = srv->conns; o; o = o->next) n += o->take && o->uid == c->uid;
    if (n < max) return TF_OK;
    snprintf(msg, len,
             "uid %u already has %d copies from other daemons in progress ([limits] "
             "max_takes_per_uid); wait for one to finish or ask the administrator to raise the "
             "limit",
             (unsigned)c->uid, n);
    return TF_ERR_TOO_MANY_CLIENTS;
}

/*
 * The part of a receive buffer the budget counts: every connection may read
 * into its first TF__MIN_MAX_FRAME_BYTES (the connection counts bound those),
 * only what a frame grows it beyond counts.
 */
static uint64_t counted(size_t cap) { return cap > TF__MIN_MAX_FRAME_BYTES ? cap : 0; }

uint64_t tfd_limits_uid_receive_bytes(const tfd_server *srv, uid_t uid) {
    uint64_t sum = 0;
    for (const tfd_conn *o = srv->conns; o; o = o->next)
        if (o->uid == uid) sum += counted(o->rcap);
    return sum;
}

tf_status tfd_limits_receive_grow(tfd_conn *c, size_t cap, char *msg, size_t len) {
    uint64_t limit = c->srv->opt.uid_receive_bytes;
    if (limit == 0 || counted(cap) == 0 || cap <= c->rcap) return TF_OK;
    uint64_t others = tfd_limits_uid_receive_bytes(c->srv, c->uid) - counted(c->rcap);
    if (others + cap <= limit) return TF_OK;
    snprintf(msg, len,
             "a frame of %zu bytes would take the input buffered for uid %u to %llu bytes, above "
             "[limits] uid_receive_bytes (%llu): send smaller frames or fewer at once",
             cap, (unsigned)c->uid, (unsigned long long)(others + cap), (unsigned long long)limit);
    return TF_ERR_QUOTA;
}
