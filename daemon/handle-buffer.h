/*
 * A connection's pinned buffers (handle-buffer.c): BufferCreate and
 * BufferFree are in the request table (requests.h); these are the parts the
 * close path and the status report use.
 */
#ifndef TENFERRO_DAEMON_HANDLE_BUFFER_H
#define TENFERRO_DAEMON_HANDLE_BUFFER_H

#include <stdint.h>

#include "daemon/connection.h"

/* A connection's pinned buffers: removes buffer id from c's table, unregisters and unmaps it, and counts it gone. */
void tfd_conn_buffer_drop(tfd_conn *c, uint64_t id);
/* Mappings the daemon holds of c's memory: its buffers and its completion page. */
uint64_t tfd_conn_mappings(const tfd_conn *c);
/* Descriptors the daemon holds for c: its socket, memfds awaiting Mapped, a take's link. */
uint64_t tfd_conn_descriptors(const tfd_conn *c);
/*
 * Releases c's pinned memory: at close (all = 0) every buffer no transfer
 * uses; at the final free (all = 1) every buffer and the completion page.
 */
void tfd_conn_buffers_release(tfd_conn *c, int all);

#endif
