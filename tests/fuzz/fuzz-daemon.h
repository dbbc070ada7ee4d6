/*
 * The in-process daemon the fuzz targets drive: a real tfd_server (CPU
 * backend, executor, reservation table, options from tfd_options_defaults
 * with the harness's limits) on a private loop, and clients that speak to
 * it over real Unix stream sockets, so every byte goes through the daemon's
 * own accept, read, framing, dispatch and close paths.
 *
 * A client's socket is connected to a listener in the abstract namespace (no
 * file) that the server accepts from with tfd_conn_accept, as tenferrod
 * does; the harness writes the client's bytes into its end and drains and
 * discards what the daemon sends back (closing any descriptor that rides
 * along), after checking that every reply is a well-formed frame that
 * answers a sequence number this client sent (or 0, the daemon's own word).
 *
 * After each input, fz_finish closes every client, runs the loop until every
 * connection is freed, and checks that the server is back at its baseline:
 * no connections, no tensors or device bytes, no pinned bytes, no held
 * reservation, no work or descriptor left behind. Anything else aborts with
 * a report, which libFuzzer records as a crash. An input that makes the
 * daemon shut down (an admin drain) is followed by a fresh server.
 */
#ifndef TENFERRO_TESTS_FUZZ_DAEMON_H
#define TENFERRO_TESTS_FUZZ_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "common/frame.h"
#include "daemon/conn.h"
#include "daemon/server.h"

/* Limits the harness gives its server, small enough that no input can exhaust the machine. */
#define FZ_MAX_FRAME_BYTES ((uint64_t)256 << 10)
#define FZ_MAX_PINNED_BYTES ((uint64_t)8 << 20)
#define FZ_CLIENT_DEVICE_BYTES ((uint64_t)256 << 10)
#define FZ_CLIENT_LIVE_TENSORS 64
#define FZ_CLIENT_QUEUED_OPS 512
#define FZ_UID_DEVICE_BYTES ((uint64_t)384 << 10)
#define FZ_UID_PINNED_BYTES ((uint64_t)6 << 20)

/* One client: the harness's end of its socket and the id the daemon gave it. */
typedef struct fz_client {
    int fd;             /* -1 once hung up or never connected */
    uint64_t client_id; /* the daemon's id of its connection, 0 before it was accepted */
    uint8_t *in;        /* reply bytes not yet split into frames */
    size_t in_len, in_cap;
    uint64_t next_seq;  /* sequence number of the harness's next frame */
    int slow;           /* reads at most a few hundred bytes per turn of the loop */
    /* What the client sent, split into frames to learn their sequence numbers. */
    uint8_t *out;
    size_t out_len, out_cap;
    int out_done;       /* past a frame the daemon refuses: it reads nothing more */
    uint64_t *seqs;     /* sequence numbers sent (open addressing, 0 = empty slot) */
    size_t n_seqs, seq_cap;
} fz_client;

/* Starts the server once per process (idempotent); quiets the daemon's log. */
void fz_init(void);

/* The running server. */
tfd_server *fz_server(void);

/*
 * Starts an input: the harness's options again, and client, session and
 * batch ids counting from 1 again, so an input that names them means the
 * same thing on every run (libFuzzer needs an input to behave the same each
 * time it runs). The input may change fz_server()->opt afterwards.
 */
void fz_begin(void);

/*
 * The credentials the next connections present, as SO_PEERCRED would give
 * them for a client of that user (the harness itself runs as one user).
 * fz_begin goes back to the harness's own.
 */
void fz_peer_credentials(uid_t uid, gid_t gid);

/*
 * Makes the client a slow reader: the daemon's end of its socket gets the
 * smallest send buffer and the client reads little per turn, so replies
 * queue up in the daemon (partial writes, held replies, retries).
 */
void fz_slow_reader(fz_client *cl);

/* Connects a client and waits until the daemon has accepted it; 0 on success. */
int fz_connect(fz_client *cl);

/* The daemon's record of the client's connection, or NULL once it is freed. */
tfd_conn *fz_conn(const fz_client *cl);

/*
 * Writes bytes as the client, running the loop while the socket is full; gives
 * up on what is left once the daemon no longer reads from this connection.
 */
void fz_send(fz_client *cl, const void *bytes, size_t len);

/* Sends a frame whose body is `body` (any bytes) with its length header. */
void fz_send_body(fz_client *cl, const void *body, size_t len);

/* Encodes and sends a frame; its seq is set from the client's counter when 0. */
void fz_send_frame(fz_client *cl, Tenferro__Frame *frame);

/* Sends the handshake (the current protocol version and a name) and settles. */
void fz_hello(fz_client *cl, const char *name);

/*
 * Runs the loop until it is quiet: no work on any stream, no thread-pool
 * request, no write, no held reply, no connection half closed; drains every
 * client meanwhile. Aborts if that takes more than a few seconds.
 */
void fz_settle(void);

/* Closes the client's end: the daemon reads end-of-file. */
void fz_hangup(fz_client *cl);

/*
 * Ends an input: hangs up every client given, waits until the daemon has
 * freed every connection, checks the baseline (aborting when it is not met)
 * and, if the input made the server stop, starts a fresh one.
 */
void fz_finish(fz_client *clients, int n);

/* Aborts the process with a message: a finding. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
