/*
 * Dispatch: routes a decoded frame to the handler its body names, by a table
 * made from TFD_REQUEST_LIST (requests.h). The handshake must come first; a
 * frame the daemon does not know is answered with a typed error and the
 * connection stays usable.
 */
#include "daemon/connection.h"
#include "daemon/log.h"
#include "daemon/requests.h"
#include "daemon/server.h"

/* One row of TFD_REQUEST_LIST: its handler and its flags (TFD_REQUEST_FIRST, TFD_REQUEST_PEER). */
typedef struct tfd_request {
    void (*handler)(tfd_conn *c, Tenferro__Frame *frame);
    unsigned flags;
} tfd_request;

/*
 * The table's size: one more than the largest body case of the list (the
 * size of a union with one member per row, char[body + 1]).
 */
#define TFD_REQUEST_SIZE_MEMBER(body, handler, flags) char handler[(body) + 1];
enum { TFD_REQUEST_TABLE_SIZE = sizeof(union { TFD_REQUEST_LIST(TFD_REQUEST_SIZE_MEMBER) }) };
#undef TFD_REQUEST_SIZE_MEMBER

/* Every row's body case is a request's: not "no body", and within the table. */
#define TFD_REQUEST_CHECK_ROW(body, handler, flags)                                               \
    _Static_assert((body) > TENFERRO__FRAME__BODY__NOT_SET &&                                      \
                       (int)(body) < (int)TFD_REQUEST_TABLE_SIZE,                                 \
                   #handler ": its body case " #body " is not a request's");
TFD_REQUEST_LIST(TFD_REQUEST_CHECK_ROW)
#undef TFD_REQUEST_CHECK_ROW

/*
 * Never called: at build time, every row's body case is a case of the
 * generated enum (-Wswitch: "case value not in enumerated type", an error
 * under -Werror), and no body case has two rows ("duplicate case value").
 */
#define TFD_REQUEST_CASE(body, handler, flags) case body:
__attribute__((unused)) static void request_cases_are_body_cases(Tenferro__Frame__BodyCase body) {
    switch (body) {
    TFD_REQUEST_LIST(TFD_REQUEST_CASE)
    default:
        break;
    }
}
#undef TFD_REQUEST_CASE

/* The handlers by body case; a case with no row has none. */
#define TFD_REQUEST_ROW(body, h, f) [body] = {.handler = h, .flags = (f)},
static const tfd_request requests[TFD_REQUEST_TABLE_SIZE] = {TFD_REQUEST_LIST(TFD_REQUEST_ROW)};
#undef TFD_REQUEST_ROW

/* The request of body case `body`, or NULL for one the daemon does not serve. */
static const tfd_request *request_of(Tenferro__Frame__BodyCase body) {
    if ((unsigned)body >= TFD_REQUEST_TABLE_SIZE || !requests[body].handler) return NULL;
    return &requests[body];
}

void tfd_dispatch(tfd_conn *c, Tenferro__Frame *frame) {
    /* Sequence number 0 marks the daemon's last word: no request may carry it. */
    if (frame->seq == 0) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "a request carries sequence number 0, which is reserved for the "
                         "daemon's last word: number requests from 1");
        return;
    }
    const tfd_request *r = request_of(frame->body_case);
    if (!c->hello_done && !(r && (r->flags & TFD_REQUEST_FIRST))) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "the first frame must be Hello");
        return;
    }
    /* A peer daemon's connection (peer-offer.c) has no stream: it only fetches offers. */
    if (c->peer_daemon && !(r && (r->flags & TFD_REQUEST_PEER))) {
        tfd_conn_reply(c, frame->seq, TF_ERR_PERMISSION,
                       "a peer daemon's connection only fetches offers (PeerFetch)");
        tf__frame_free(frame);
        return;
    }
    if (r) {
        r->handler(c, frame);
        return;
    }
    /* Not a protocol error: the connection stays usable (a newer client may probe). */
    c->srv->counters.requests_unsupported++;
    tfd_log(TFD_LOG_DEBUG, "client %llu sent an unknown or reply-only message (case %d)",
            (unsigned long long)c->client_id, (int)frame->body_case);
    tfd_conn_reply(c, frame->seq, TF_ERR_UNSUPPORTED,
                   "unknown message type (body %d): this daemon does not serve it",
                   (int)frame->body_case);
    tf__frame_free(frame);
}
