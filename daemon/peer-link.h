/*
 * The taking daemon's connection to the offering daemon of a device-to-device
 * copy (docs/multi-gpu.md): run on a thread of its own (peer-take.c), never
 * on the loop, every step of it (connect, Hello, PeerFetch, the replies)
 * non-blocking and bounded by the copy's deadline, its cancel flag and its
 * client's hang-up.
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
    char message[384]; /* for the client: never a byte of what a non-daemon sent, nor an errno */
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
    uint64_t deadline_ms; /* tfd_now_ms when the fetch gives up (TF_ERR_TIMEOUT) */
    const char *name;     /* the source as the client may see it named ("tenferrod-1.sock") */
    int answered;         /* the other end answered as a tenferrod: its refusals reach the client */
} tfd_peer_fetched;

/*
 * Connects to the daemon at socket_path (a tenferrod socket of this daemon's
 * runtime directory: peer-take.c checked it), which must run as this
 * daemon's uid or root, says Hello as a peer daemon on behalf of a client of
 * uid requester_uid and fetches offer `token` for it, waiting at most until
 * deadline_ms (tfd_now_ms; then TF_ERR_TIMEOUT), or until *cancel is set or
 * client_fd (the asking client's socket, -1 for none) hangs up
 * (TF_ERR_DISCONNECTED). Until the other end has answered as a tenferrod,
 * every failure is one TF_ERR_PEER naming only `name`, its details logged
 * at debug level. Every failure is in out->status and out->message, the
 * connection closed.
 */
void tfd_peer_fetch(const char *socket_path, const char *name, const char *token,
                    uint32_t requester_uid, uint64_t deadline_ms, const atomic_int *cancel,
                    int client_fd, tfd_peer_fetched *out);

/* Closes what a fetch left open (its descriptor and its connection). */
void tfd_peer_fetched_close(tfd_peer_fetched *f);

#endif
