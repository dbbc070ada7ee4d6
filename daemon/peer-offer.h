/*
 * Device-to-device copies between the daemons of one host (docs/multi-gpu.md).
 *
 * The offering side (peer-offer.c): a client offers one of its tensors
 * (CopyOffer) and gets a one-time token; another daemon, connected as a peer
 * (Hello.peer_daemon, admitted only from this daemon's uid or root), fetches
 * it (PeerFetch) once the work queued before the offer has run, and gets the
 * tensor's memory as the backend shares it (tfd_peer_memory) with its
 * descriptor. The tensor stays lent (neither freed nor written, the owner's
 * teardown deferred) until the peer's connection closes.
 */
#ifndef TENFERRO_DAEMON_PEER_OFFER_H
#define TENFERRO_DAEMON_PEER_OFFER_H

#include "daemon/connection.h"

/* Offers untaken this long are withdrawn. */
#define TFD_OFFER_TTL_MS 60000
/* Offers one connection may have at once. */
#define TFD_OFFERS_PER_CONN 64

/*
 * A connection starts closing: its untaken offers go, the ones it fetched as
 * a peer are released, and its own lent ones defer its teardown (c->lent).
 */
void tfd_peer_offers_conn_closing(tfd_conn *c);

#endif
