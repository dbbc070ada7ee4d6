/*
 * Device-to-device copies between the daemons of one host (docs/multi-gpu.md).
 *
 * The taking side (peer-take.c): a client asks (CopyTake) for a new tensor
 * made from such an offer; a thread of the daemon fetches it from the other
 * daemon (peer-link.c), the connection's stream copies it in order, and the
 * client is answered once the bytes are there.
 */
#ifndef TENFERRO_DAEMON_PEER_TAKE_H
#define TENFERRO_DAEMON_PEER_TAKE_H

#include "daemon/connection.h"

/* A connection starts closing: its take waiting for the other daemon gives up. */
void tfd_peer_take_cancel(tfd_conn *c);

#endif
