/*
 * Limits that keep one local user from taking what others need: how many
 * connections a uid may hold (before and after the Hello), how long a peer
 * may take to say Hello, and how much unfinished input the daemon buffers
 * for one uid. Each refusal is typed and says which setting to raise.
 * Root and the service user are exempt from the per-uid counts, so an
 * operator can reach a daemon that one user filled (max_clients holds for
 * everyone). A peer daemon's connection (a copy between daemons) counts for
 * the client that asked for the copy, never exempt; so do the takes a
 * daemon runs for its clients ([limits] max_takes_per_uid).
 */
#ifndef TENFERRO_DAEMON_LIMITS_H
#define TENFERRO_DAEMON_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/connection.h"
#include "tenferro/status.h"

/*
 * At accept, as soon as the peer's credentials are known: the access list,
 * the drain, and the uid's connections still in their handshake. TF_OK, or
 * the refusal with msg.
 */
tf_status tfd_limits_admit_connection(tfd_conn *c, char *msg, size_t len);

/*
 * The uid a connection counts for in the per-uid connection limits: its own,
 * or for a peer daemon's connection the uid of the client that asked for the
 * copy (Hello.asking_uid).
 */
uid_t tfd_limits_charged_uid(const tfd_conn *c);

/*
 * At the Hello: max_clients and the charged uid's clients past their
 * handshake (a peer daemon's connection with no exemption).
 */
tf_status tfd_limits_admit_client(tfd_conn *c, char *msg, size_t len);

/*
 * Before a CopyTake starts: TF_OK while the uid's takes in progress stay
 * within [limits] max_takes_per_uid, else TF_ERR_TOO_MANY_CLIENTS with msg.
 */
tf_status tfd_limits_admit_take(tfd_conn *c, char *msg, size_t len);

/*
 * Before a connection's receive buffer grows to `cap` bytes: TF_OK while the
 * uid's buffered input stays within [limits] uid_receive_bytes, else
 * TF_ERR_QUOTA with msg.
 */
tf_status tfd_limits_receive_grow(tfd_conn *c, size_t cap, char *msg, size_t len);

/* Receive-buffer bytes held by all connections of uid. */
uint64_t tfd_limits_uid_receive_bytes(const tfd_server *srv, uid_t uid);

#endif
