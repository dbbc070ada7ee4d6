/*
 * The request handlers, one file each (handle-*.c), and the dispatcher that
 * routes a decoded frame to the handler named after its body.
 */
#ifndef TENFERRO_DAEMON_HANDLERS_H
#define TENFERRO_DAEMON_HANDLERS_H

#include "common/frame.h"
#include "daemon/connection.h"

/* Routes one decoded frame to its handler (dispatch.c); takes ownership of it. */
void tfd_dispatch(tfd_conn *c, Tenferro__Frame *frame);

/* Request handlers, one file each. A handler takes ownership of the frame. */
void tfd_handle_hello(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_upload(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_download(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_free(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_session_open(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_submit(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_session_release(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_status(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_admin(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_buffer_create(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_buffer_free(tfd_conn *c, Tenferro__Frame *frame);
/* Mapped: seals the memfd the client has mapped (handle-mapped.c); no reply. */
void tfd_handle_mapped(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_transfer(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_transfer_release(tfd_conn *c, Tenferro__Frame *frame);
/* A client rang: the loop looks at its submission mailbox (mailbox.c). */
void tfd_handle_mailbox_doorbell(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_prepare(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_prepared_free(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_tensor_info(tfd_conn *c, Tenferro__Frame *frame);
/* Device-to-device copies between daemons: the offering side (peer-offer.c), the taking side (peer-take.c). */
void tfd_handle_copy_offer(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_peer_fetch(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_copy_take(tfd_conn *c, Tenferro__Frame *frame);

#endif
