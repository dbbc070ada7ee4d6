/*
 * The taking daemon's connection to the offering daemon of a device-to-device
 * copy (docs/multi-gpu.md): blocking, bounded by a deadline, run on a thread
 * of its own (peer-take.c), never on the loop.
 */
#ifndef TENFERRO_DAEMON_PEER_LINK_H
#define TENFERRO_DAEMON_PEER_LINK_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon/backend/backend.h"
#include "tenferro/types.h"

/* What the offering daemon answered, and the connection that holds the offer lent. */
typedef struct tfd_peer_fetched {
    tf_status status;
    char message[384];
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    uint64_t bytes;
    uint32_t owner_uid;
    char device[128];
    tfd_peer_memory mem; /* mem.fd -1 unless status is TF_OK */
    int sock;            /* -1, or the connection: closing it ends the lend */
    const atomic_int *cancel; /* set by another thread: the fetch gives up within 100 ms */
    int watch_fd; /* the asking client's socket (-1: none): when it hangs up, the fetch gives up */
} tfd_peer_fetched;

/*
 * Connects to the daemon at socket_path, which must run as this daemon's uid
 * or root, says Hello as a peer daemon and fetches offer `token` for a client
 * of uid requester_uid, waiting at most until deadline_ms (tfd_now_ms), or
 * until *cancel is set or client_fd (the asking client's socket, -1 for
 * none) hangs up (TF_ERR_DISCONNECTED). Every failure is in
 * out->status and out->message, the connection closed.
 */
void tfd_peer_fetch(const char *socket_path, const char *token, uint32_t requester_uid,
                    uint64_t deadline_ms, const atomic_int *cancel, int client_fd,
                    tfd_peer_fetched *out);

/* Closes what a fetch left open (its descriptor and its connection). */
void tfd_peer_fetched_close(tfd_peer_fetched *f);

#endif
