/*
 * The offering side of a device-to-device copy between daemons (peer-offer.h,
 * docs/multi-gpu.md): CopyOffer from a client, PeerFetch from a peer daemon.
 *
 * An offer lives in the server's list from its CopyOffer until it is
 * released: withdrawn or expired untaken, its owner gone before the fetch,
 * or the peer connection that fetched it closed. Its tensor is marked
 * TFD_FLIGHT_PEER meanwhile, so the owner can read it but not free, write or
 * transfer it. A fetch runs the backend's export as a CALL item on the
 * owner's stream and answers after the marker behind it, so the other daemon
 * reads the tensor only once the work queued before the offer has run.
 * Fetching and lent offers count in the owner's `lent`: a closing owner keeps
 * its tensors until they are all back. A withdraw of an offer being fetched
 * or lent is answered once the offer is back, so when tf_copy_to returns the
 * tensor is the owner's alone again.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/peer-offer.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"

enum { OFFERED, FETCHING, LENT };

typedef struct tfd_offer {
    uv_timer_t timer; /* first: its close callback frees the record */
    tfd_server *srv;
    struct tfd_offer *next, *prev;
    char token[33];
    int state;
    tfd_conn *owner;
    uint64_t tensor;
    tfd_conn *peer; /* FETCHING: who is answered (NULL once it closed); LENT: who holds it */
    uint64_t fetch_seq;
    uint64_t withdraw_seq; /* a withdraw waiting for the offer to come back (0: none) */
    tfd_peer_memory mem;   /* what the export produced; mem.fd -1 once handed on or closed */
    tf_status export_status;
    char export_msg[256];
} tfd_offer;

/* Offers of this connection not yet released. */
static int offers_of(const tfd_server *srv, const tfd_conn *c) {
    int n = 0;
    for (const tfd_offer *o = srv->offers; o; o = o->next) n += o->owner == c;
    return n;
}

/* The offer with this token, or NULL. */
static tfd_offer *find_offer(tfd_server *srv, const char *token) {
    if (!token || !token[0]) return NULL;
    for (tfd_offer *o = srv->offers; o; o = o->next)
        if (strcmp(o->token, token) == 0) return o;
    return NULL;
}

/*
 * Ends an offer: its tensor is the owner's alone again (a waiting withdraw is
 * answered), the owner's deferred teardown goes on once nothing is lent, and
 * the record goes with its timer.
 */
static void release(tfd_offer *o) {
    tfd_server *srv = o->srv;
    tfd_conn *owner = o->owner;
    if (o->prev)
        o->prev->next = o->next;
    else
        srv->offers = o->next;
    if (o->next) o->next->prev = o->prev;
    if (o->mem.fd >= 0) close(o->mem.fd);
    const int counted = o->state != OFFERED;
    tfd_tensor *t = tfd_tensor_table_find(&owner->tensors, o->tensor);
    if (t && t->in_flight == TFD_FLIGHT_PEER) t->in_flight = 0;
    if (o->withdraw_seq && !owner->closing) {
        tfd_conn_reply(owner, o->withdraw_seq, TF_OK, NULL);
        tfd_conn_resume(owner);
    }
    uv_close((uv_handle_t *)&o->timer, (uv_close_cb)free);
    if (counted && --owner->lent == 0) tfd_conn_lend_over(owner);
}

/* An offer nobody fetched in time goes. */
static void on_expired(uv_timer_t *h) {
    tfd_offer *o = (tfd_offer *)h;
    if (o->state != OFFERED) return;
    tfd_log(TFD_LOG_INFO, "client %llu: the offer of tensor %llu to another daemon expired untaken",
            (unsigned long long)o->owner->client_id, (unsigned long long)o->tensor);
    release(o);
}

/* 32 hex digits from the kernel's random source; -1 when it has none to give. */
static int new_token(char out[33]) {
    uint8_t raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) return -1;
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", raw[i]);
    return 0;
}

/* Answers a CopyOffer. */
static void reply_offer(tfd_conn *c, uint64_t seq, tf_status st, const char *msg, const char *token) {
    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    Tenferro__CopyOfferReply reply = TENFERRO__COPY_OFFER_REPLY__INIT;
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = (uint32_t)st;
    result.message = (char *)(msg ? msg : "");
    reply.result = &result;
    reply.token = (char *)(token ? token : "");
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_COPY_OFFER_REPLY;
    out.copy_offer_reply = &reply;
    tfd_conn_send(c, &out);
}

/*
 * A withdraw: an untaken offer goes at once; one being fetched or lent is
 * answered when it comes back, the connection paused until then, so what
 * the client sends next finds the tensor free. A token this connection does
 * not hold (already back, or never its own) is answered at once.
 */
static void withdraw(tfd_conn *c, uint64_t seq, const char *token) {
    tfd_offer *o = find_offer(c->srv, token);
    if (!o || o->owner != c) {
        tfd_conn_reply(c, seq, TF_OK, NULL);
        return;
    }
    if (o->state == OFFERED) {
        release(o);
        tfd_conn_reply(c, seq, TF_OK, NULL);
        return;
    }
    if (o->withdraw_seq) {
        tfd_conn_reply(c, seq, TF_ERR_BUSY, "this offer is already being withdrawn");
        return;
    }
    o->withdraw_seq = seq;
    tfd_conn_pause(c);
}

void tfd_handle_copy_offer(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t seq = frame->seq;
    const Tenferro__CopyOffer *req = frame->copy_offer;
    tfd_server *srv = c->srv;
    char msg[256] = "";
    if (req->withdraw_token && req->withdraw_token[0]) {
        withdraw(c, seq, req->withdraw_token);
        tf__frame_free(frame);
        return;
    }
    const uint64_t id = req->tensor;
    tf__frame_free(frame);
    tf_status st = TF_OK;
    tfd_tensor *t = tfd_usable_tensor(c, id, "copy offer", "offered to another daemon", &st, msg,
                                      sizeof msg);
    if (!t) {
        reply_offer(c, seq, st, msg, NULL);
        return;
    }
    if (!srv->backend.vt->peer_export) {
        reply_offer(c, seq, TF_ERR_UNSUPPORTED, "this daemon's backend cannot share memory with another daemon", NULL);
        return;
    }
    if (offers_of(srv, c) >= TFD_OFFERS_PER_CONN) {
        snprintf(msg, sizeof msg, "this connection already has %d offers to other daemons open",
                 TFD_OFFERS_PER_CONN);
        reply_offer(c, seq, TF_ERR_QUOTA, msg, NULL);
        return;
    }
    tfd_offer *o = calloc(1, sizeof *o);
    if (!o || new_token(o->token) != 0 || uv_timer_init(srv->loop, &o->timer) != 0) {
        const tf_status made = o ? TF_ERR_IO : TF_ERR_NO_MEMORY;
        free(o);
        reply_offer(c, seq, made, "cannot make an offer token", NULL);
        return;
    }
    o->srv = srv;
    o->owner = c;
    o->tensor = id;
    o->mem.fd = -1;
    o->state = OFFERED;
    o->next = srv->offers;
    if (o->next) o->next->prev = o;
    srv->offers = o;
    t->in_flight = TFD_FLIGHT_PEER;
    uv_timer_start(&o->timer, on_expired, TFD_OFFER_TTL_MS, 0);
    reply_offer(c, seq, TF_OK, NULL, o->token);
}

/* Answers a PeerFetch with a refusal. */
static void refuse_fetch(tfd_conn *peer, uint64_t seq, tf_status st, const char *msg) {
    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    Tenferro__PeerFetchReply reply = TENFERRO__PEER_FETCH_REPLY__INIT;
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = (uint32_t)st;
    result.message = (char *)msg;
    reply.result = &result;
    out.seq = seq;
    out.body_case = TENFERRO__FRAME__BODY_PEER_FETCH_REPLY;
    out.peer_fetch_reply = &reply;
    tfd_conn_send(peer, &out);
}

/* Worker, in the owner's stream order: the backend describes the tensor for the other daemon. */
static void export_on_worker(tfd_stream *s, void *arg) {
    tfd_offer *o = arg;
    tfd_backend *be = &o->srv->backend;
    tfd_tensor *t = tfd_tensor_table_find(&o->owner->tensors, o->tensor);
    if (!t) {
        o->export_status = TF_ERR_PEER;
        snprintf(o->export_msg, sizeof o->export_msg, "the offered tensor is gone");
        return;
    }
    o->export_status = be->vt->peer_export(be, tfd_stream_native(s), t->data, t->bytes, &o->mem,
                                           o->export_msg, sizeof o->export_msg);
}

/*
 * Loop, once the work before the offer has run: hands the export to the
 * peer (the offer is then lent until the peer's connection closes), or
 * tells it why not.
 */
static void on_exported(tfd_item *it) {
    tfd_offer *o = it->done_arg;
    tf_status stream_st = it->outcome.status;
    tfd_item_free(it);
    tfd_conn *owner = o->owner, *peer = o->peer;
    tfd_tensor *t = tfd_tensor_table_find(&owner->tensors, o->tensor);
    const char *why = NULL;
    tf_status st = o->export_status;
    if (owner->closing || stream_st != TF_OK || !t) {
        st = TF_ERR_PEER;
        why = "the offering client's connection ended before its work had run";
    } else if (st != TF_OK) {
        why = o->export_msg;
    }
    if (!peer || why) {
        if (peer) refuse_fetch(peer, o->fetch_seq, st, why);
        release(o);
        return;
    }
    Tenferro__Frame out = TENFERRO__FRAME__INIT;
    Tenferro__PeerFetchReply reply = TENFERRO__PEER_FETCH_REPLY__INIT;
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    int64_t shape[TF_MAX_RANK];
    for (int i = 0; i < t->meta.rank; i++) shape[i] = t->meta.shape[i];
    result.status = TF_OK;
    reply.result = &result;
    reply.dtype = (uint32_t)t->meta.dtype;
    reply.n_shape = (size_t)t->meta.rank;
    reply.shape = shape;
    reply.bytes = t->bytes;
    reply.owner_uid = (uint32_t)owner->uid;
    reply.kind = o->mem.kind;
    reply.handle.data = o->mem.handle;
    reply.handle.len = o->mem.handle_len;
    reply.offset = o->mem.offset;
    reply.device = o->srv->backend.description;
    out.seq = o->fetch_seq;
    out.body_case = TENFERRO__FRAME__BODY_PEER_FETCH_REPLY;
    out.peer_fetch_reply = &reply;
    o->state = LENT;
    const int fd = o->mem.fd;
    o->mem.fd = -1; /* the send owns it now */
    o->srv->counters.peer_copies_out++;
    tfd_conn_send_with_fd(peer, &out, fd);
}

void tfd_handle_peer_fetch(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t seq = frame->seq;
    tfd_server *srv = c->srv;
    char token[33] = "";
    const uint32_t requester_uid = frame->peer_fetch->requester_uid;
    if (frame->peer_fetch->token) snprintf(token, sizeof token, "%s", frame->peer_fetch->token);
    tf__frame_free(frame);
    if (!c->peer_daemon) {
        refuse_fetch(c, seq, TF_ERR_PERMISSION,
                     "PeerFetch is for a peer daemon (a tenferrod of this host that said "
                     "Hello.peer_daemon), not for clients");
        return;
    }
    /* The fetch asks for the uid its connection is charged to: one peer connection, one asker. */
    if (requester_uid != (uint32_t)c->asking_uid) {
        refuse_fetch(c, seq, TF_ERR_PERMISSION,
                     "PeerFetch.requester_uid is not the uid this peer connection said Hello for "
                     "(Hello.asking_uid)");
        return;
    }
    tfd_offer *o = find_offer(srv, token);
    if (!o || o->state != OFFERED || o->owner->closing) {
        refuse_fetch(c, seq, TF_ERR_UNKNOWN_HANDLE,
                     "no such offer: it was taken, withdrawn or expired, or its client left");
        return;
    }
    if (requester_uid != (uint32_t)o->owner->uid && !srv->opt.peers_allow_cross_uid) {
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the tensor belongs to uid %u and the copy was asked by uid %u: copies between "
                 "uids are off ([peers] allow_cross_uid)",
                 (unsigned)o->owner->uid, (unsigned)requester_uid);
        refuse_fetch(c, seq, TF_ERR_PERMISSION, msg);
        return;
    }
    if (tfd_stream_enqueue_call(o->owner->stream, export_on_worker, o, on_exported, o) != TF_OK) {
        refuse_fetch(c, seq, TF_ERR_NO_MEMORY, "out of host memory");
        return;
    }
    uv_timer_stop(&o->timer);
    o->state = FETCHING;
    o->peer = c;
    o->fetch_seq = seq;
    o->owner->lent++;
}

void tfd_peer_offers_conn_closing(tfd_conn *c) {
    tfd_offer *o = c->srv->offers;
    while (o) {
        tfd_offer *next = o->next;
        if (o->owner == c && o->state == OFFERED) {
            release(o);
        } else if (o->peer == c) {
            if (o->state == LENT)
                release(o);
            else
                o->peer = NULL; /* FETCHING: the marker's callback releases it */
        }
        o = next;
    }
}
