/*
 * A connection's prepared graphs (handle-prepare.c): Prepare and
 * PreparedFree are in the request table (requests.h); this is what the close
 * path uses.
 */
#ifndef TENFERRO_DAEMON_HANDLE_PREPARE_H
#define TENFERRO_DAEMON_HANDLE_PREPARE_H

#include <stdint.h>

#include "daemon/connection.h"

/* Gives every prepared graph of a connection whose stream is drained back to the cache. */
void tfd_conn_prepared_release(tfd_conn *c);

#endif
