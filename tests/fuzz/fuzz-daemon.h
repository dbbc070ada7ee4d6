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
 * along, except the completion page of the HelloReply, which it maps as a
 * client does before it says Mapped), after checking that every reply is a
 * well-formed frame that answers a sequence number this client sent (or 0,
 * the daemon's own word).
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
#include "daemon/connection.h"
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
    uint64_t max_seq;   /* the highest sequence number sent on the socket, doorbells aside */
    /*
     * The client's own mapping of its completion page (TF_RING_MAP_BYTES:
     * slots, mailbox, ring), made from the memfd of its HelloReply as a real
     * client does; NULL before that or when the Hello was refused. It stays
     * mapped until fz_finish, whatever becomes of the connection, so a
     * target may write it at any time (a writer thread among them).
     */
    uint8_t *page;
    int page_fd;        /* while the harness waits for the HelloReply: its descriptor, else -1 */
    int want_page;      /* keep the first descriptor that arrives as the page */
    int skip_mapped;    /* fz_hello leaves Mapped(0) to the input */
    /* The daemon's last words: Results with sequence number 0 (the reason a connection ends). */
    unsigned last_words;
    uint32_t last_word_status;
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

/*
 * Sends the handshake (the current protocol version and a name) and settles;
 * when the daemon answered with its completion page, maps it (cl->page) and,
 * unless cl->skip_mapped, says Mapped(0) and settles again, as the client
 * library does: only then does the daemon use the mailbox and the ring.
 */
void fz_hello(fz_client *cl, const char *name);

/* 1 when the client sent a frame of sequence number seq on its socket. */
int fz_sent(const fz_client *cl, uint64_t seq);

/* Sends Mapped{buffer}: the client has mapped that memfd (0: its completion page). */
void fz_mapped(fz_client *cl, uint64_t buffer);

/*
 * One turn of the daemon's loop as fz_settle runs it: the loop without
 * blocking, the poller (mailboxes, rings, loop copies), every client's
 * socket drained. Returns what the poller served.
 */
int fz_turn(void);

/*
 * Words changing between reads: a thread of the fuzz process that keeps
 * storing into shared memory while the daemon reads it, as a hostile client
 * would. Each word is a field (1, 4 or 8 bytes wide) and the values the
 * thread alternates between, picked anew each round, so every mix of old
 * and new values is seen. fz_race_start returns once the thread has made its
 * first round; fz_race_stop stops and joins it. One race at a time; the
 * memory must stay mapped until the race stops (the client's own mapping).
 */
#define FZ_RACE_WORDS 24
#define FZ_RACE_VALUES 4
typedef struct fz_race_word {
    void *at;
    int width;
    int n_values;
    uint64_t values[FZ_RACE_VALUES];
} fz_race_word;
void fz_race_start(const fz_race_word *words, int n);
/* Stops the race; returns the rounds the thread made. */
uint64_t fz_race_stop(void);

/*
 * Runs the loop until it is quiet: no work on any stream, no thread-pool
 * request, no write, no held reply, no connection half closed, and a poller
 * that found nothing to serve (as tenferrod's loop, which polls again before
 * it sleeps while the poller serves); drains every client meanwhile. Aborts
 * if that takes more than a few seconds.
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
