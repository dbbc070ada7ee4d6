/*
 * Dispatch: routes a decoded frame to the handler named after its body. The
 * handshake must come first; a frame the daemon does not know is answered
 * with a typed error and the connection stays usable.
 */
#include "daemon/connection.h"
#include "daemon/handlers.h"
#include "daemon/log.h"
#include "daemon/server.h"

void tfd_dispatch(tfd_conn *c, Tenferro__Frame *frame) {
    /* Sequence number 0 marks the daemon's last word: no request may carry it. */
    if (frame->seq == 0) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "a request carries sequence number 0, which is reserved for the "
                         "daemon's last word: number requests from 1");
        return;
    }
    if (!c->hello_done && frame->body_case != TENFERRO__FRAME__BODY_HELLO) {
        tf__frame_free(frame);
        tfd_conn_fail(c, "the first frame must be Hello");
        return;
    }
    /* A peer daemon's connection (peer-offer.c) has no stream: it only fetches offers. */
    if (c->peer_daemon && frame->body_case != TENFERRO__FRAME__BODY_PEER_FETCH &&
        frame->body_case != TENFERRO__FRAME__BODY_HELLO) {
        tfd_conn_reply(c, frame->seq, TF_ERR_PERMISSION,
                       "a peer daemon's connection only fetches offers (PeerFetch)");
        tf__frame_free(frame);
        return;
    }
    switch (frame->body_case) {
    case TENFERRO__FRAME__BODY_HELLO:
        tfd_handle_hello(c, frame);
        return;
    case TENFERRO__FRAME__BODY_UPLOAD:
        tfd_handle_upload(c, frame);
        return;
    case TENFERRO__FRAME__BODY_DOWNLOAD:
        tfd_handle_download(c, frame);
        return;
    case TENFERRO__FRAME__BODY_FREE:
        tfd_handle_free(c, frame);
        return;
    case TENFERRO__FRAME__BODY_SESSION_OPEN:
        tfd_handle_session_open(c, frame);
        return;
    case TENFERRO__FRAME__BODY_SUBMIT:
        tfd_handle_submit(c, frame);
        return;
    case TENFERRO__FRAME__BODY_SESSION_RELEASE:
        tfd_handle_session_release(c, frame);
        return;
    case TENFERRO__FRAME__BODY_STATUS_REQUEST:
        tfd_handle_status(c, frame);
        return;
    case TENFERRO__FRAME__BODY_ADMIN_REQUEST:
        tfd_handle_admin(c, frame);
        return;
    case TENFERRO__FRAME__BODY_BUFFER_CREATE:
        tfd_handle_buffer_create(c, frame);
        return;
    case TENFERRO__FRAME__BODY_BUFFER_FREE:
        tfd_handle_buffer_free(c, frame);
        return;
    case TENFERRO__FRAME__BODY_MAPPED:
        tfd_handle_mapped(c, frame);
        return;
    case TENFERRO__FRAME__BODY_PREPARE:
        tfd_handle_prepare(c, frame);
        return;
    case TENFERRO__FRAME__BODY_PREPARED_FREE:
        tfd_handle_prepared_free(c, frame);
        return;
    case TENFERRO__FRAME__BODY_TENSOR_INFO:
        tfd_handle_tensor_info(c, frame);
        return;
    case TENFERRO__FRAME__BODY_TRANSFER:
        tfd_handle_transfer(c, frame);
        return;
    case TENFERRO__FRAME__BODY_TRANSFER_RELEASE:
        tfd_handle_transfer_release(c, frame);
        return;
    case TENFERRO__FRAME__BODY_MAILBOX_DOORBELL:
        tfd_handle_mailbox_doorbell(c, frame);
        return;
    case TENFERRO__FRAME__BODY_COPY_OFFER:
        tfd_handle_copy_offer(c, frame);
        return;
    case TENFERRO__FRAME__BODY_PEER_FETCH:
        tfd_handle_peer_fetch(c, frame);
        return;
    case TENFERRO__FRAME__BODY_COPY_TAKE:
        tfd_handle_copy_take(c, frame);
        return;
    case TENFERRO__FRAME__BODY_HELLO_REPLY:
    case TENFERRO__FRAME__BODY_RESULT:
    case TENFERRO__FRAME__BODY_DOWNLOAD_REPLY:
    case TENFERRO__FRAME__BODY_STATUS_REPLY:
    case TENFERRO__FRAME__BODY__NOT_SET:
    default:
        break;
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
