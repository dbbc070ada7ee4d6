/*
 * The requests the daemon serves: one list, TFD_REQUEST_LIST, a row per
 * request, from which the handler declarations below and the dispatcher's
 * table (requests.c) are made. A new request is one row here and its
 * handle-*.c; nothing else names it.
 *
 * A row is X(body, handler, flags):
 *   body     the frame's body case (TENFERRO__FRAME__BODY_...) that carries it;
 *   handler  the function that serves it (one handle-*.c or peer-*.c each);
 *            it takes ownership of the frame;
 *   flags    what tfd_dispatch lets through before the handler:
 *            TFD_REQUEST_FIRST, it may come before Hello (only Hello may);
 *            TFD_REQUEST_PEER, a peer daemon's connection (peer-offer.c) may
 *            send it (that connection has no stream: it only fetches offers).
 *
 * A body case with no row (an unknown one, one only the daemon sends, or no
 * body at all) is answered TF_ERR_UNSUPPORTED and counted in
 * requests_unsupported; the connection stays usable.
 */
#ifndef TENFERRO_DAEMON_REQUESTS_H
#define TENFERRO_DAEMON_REQUESTS_H

#include "common/frame.h"
#include "daemon/connection.h"

/* What a request may do that others may not (the flags column of TFD_REQUEST_LIST). */
enum {
    TFD_REQUEST_FIRST = 1 << 0, /* may come before Hello */
    TFD_REQUEST_PEER = 1 << 1,  /* a peer daemon's connection may send it */
};

/* clang-format off */
#define TFD_REQUEST_LIST(X)                                                                       \
    X(TENFERRO__FRAME__BODY_HELLO,             tfd_handle_hello,             TFD_REQUEST_FIRST | TFD_REQUEST_PEER) \
    X(TENFERRO__FRAME__BODY_UPLOAD,            tfd_handle_upload,            0)                   \
    X(TENFERRO__FRAME__BODY_DOWNLOAD,          tfd_handle_download,          0)                   \
    X(TENFERRO__FRAME__BODY_FREE,              tfd_handle_free,              0)                   \
    X(TENFERRO__FRAME__BODY_SESSION_OPEN,      tfd_handle_session_open,      0)                   \
    X(TENFERRO__FRAME__BODY_SUBMIT,            tfd_handle_submit,            0)                   \
    X(TENFERRO__FRAME__BODY_SESSION_RELEASE,   tfd_handle_session_release,   0)                   \
    X(TENFERRO__FRAME__BODY_STATUS_REQUEST,    tfd_handle_status,            0)                   \
    X(TENFERRO__FRAME__BODY_ADMIN_REQUEST,     tfd_handle_admin,             0)                   \
    X(TENFERRO__FRAME__BODY_BUFFER_CREATE,     tfd_handle_buffer_create,     0)                   \
    X(TENFERRO__FRAME__BODY_BUFFER_FREE,       tfd_handle_buffer_free,       0)                   \
    /* Mapped: seals the memfd the client has mapped (handle-mapped.c); no reply. */              \
    X(TENFERRO__FRAME__BODY_MAPPED,            tfd_handle_mapped,            0)                   \
    X(TENFERRO__FRAME__BODY_PREPARE,           tfd_handle_prepare,           0)                   \
    X(TENFERRO__FRAME__BODY_PREPARED_FREE,     tfd_handle_prepared_free,     0)                   \
    X(TENFERRO__FRAME__BODY_TENSOR_INFO,       tfd_handle_tensor_info,       0)                   \
    X(TENFERRO__FRAME__BODY_TRANSFER,          tfd_handle_transfer,          0)                   \
    X(TENFERRO__FRAME__BODY_TRANSFER_RELEASE,  tfd_handle_transfer_release,  0)                   \
    /* A client rang: the loop looks at its submission mailbox (mailbox.c); no reply. */          \
    X(TENFERRO__FRAME__BODY_MAILBOX_DOORBELL,  tfd_handle_mailbox_doorbell,  0)                   \
    /* Device-to-device copies between daemons: the offering side and the peer daemon's */       \
    /* fetch (peer-offer.c), the taking side (peer-take.c). */                                    \
    X(TENFERRO__FRAME__BODY_COPY_OFFER,        tfd_handle_copy_offer,        0)                   \
    X(TENFERRO__FRAME__BODY_PEER_FETCH,        tfd_handle_peer_fetch,        TFD_REQUEST_PEER)    \
    X(TENFERRO__FRAME__BODY_COPY_TAKE,         tfd_handle_copy_take,         0)
/* clang-format on */

/* The handlers, one per row. A handler takes ownership of the frame. */
#define TFD_REQUEST_DECLARE(body, handler, flags) void handler(tfd_conn *c, Tenferro__Frame *frame);
TFD_REQUEST_LIST(TFD_REQUEST_DECLARE)
#undef TFD_REQUEST_DECLARE

/*
 * Routes one decoded frame to its handler by the table made from
 * TFD_REQUEST_LIST (requests.c), after the checks every request passes
 * (sequence number, Hello first, a peer daemon's few requests); takes
 * ownership of the frame.
 */
void tfd_dispatch(tfd_conn *c, Tenferro__Frame *frame);

#endif
