/*
 * Submission mailboxes (mailbox.c): requests a client writes in its
 * completion page instead of the socket, served by the loop.
 */
#ifndef TENFERRO_DAEMON_MAILBOX_H
#define TENFERRO_DAEMON_MAILBOX_H

#include <stdint.h>

#include "daemon/connection.h"
#include "daemon/server.h"

/*
 * Serves one connection's submission mailbox: a request the
 * client wrote there is started once every frame it sent before has been
 * handled, and answered in the mailbox. Returns 1 when it answered one.
 */
int tfd_conn_poll_mailbox(tfd_conn *c);

/*
 * Submission mailboxes (mailbox.c): tfd_server_poll_mailboxes serves every
 * connection's mailbox and returns how many requests it answered;
 * tfd_server_mailboxes_polled tells clients whether the loop is polling (1)
 * or about to sleep (0), when they must ring the doorbell.
 */
int tfd_server_poll_mailboxes(tfd_server *srv);
/*
 * What the loop does on each turn besides its descriptors: serves the
 * mailboxes and rings, then runs (CPU) or watches (CUDA) the copies it took
 * this turn. Returns how many requests it served.
 */
int tfd_server_poll(tfd_server *srv);
void tfd_server_mailboxes_polled(tfd_server *srv, int polling);

#endif
