/*
 * Admission (admission.c): the reservation table applied to connections,
 * with the reject and wait policies and the FIFO of queued requests.
 */
#ifndef TENFERRO_DAEMON_ADMISSION_H
#define TENFERRO_DAEMON_ADMISSION_H

#include <stdint.h>

#include "common/frame.h"
#include "daemon/connection.h"

/*
 * Asks for the domain for a held open (held = 1, *session_id receives the new
 * session's id) or a scoped root. Returns 1 when admitted: the caller goes on
 * with the request. Returns 0 when the request was refused (answered here) or
 * queued (the frame is kept and replayed through tfd_dispatch once admitted).
 */
int tfd_admission_request(tfd_conn *c, Tenferro__Frame *frame, int held, uint64_t *session_id);
/* Releases c's reservation (if any) and admits queued requests in FIFO order. */
void tfd_admission_release(tfd_conn *c);
/* Withdraws c's queued request, if any, without answering it. */
void tfd_admission_cancel(tfd_conn *c);

#endif
