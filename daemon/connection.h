/*
 * The connection record (one per client) and its plumbing (connection.c):
 * reading and framing, replies (and the few that carry a descriptor), the
 * pause used by requests that finish off the loop, and the close path.
 */
#ifndef TENFERRO_DAEMON_CONN_H
#define TENFERRO_DAEMON_CONN_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/completion.h"
#include "common/frame.h"
#include "common/id-table.h"
#include "daemon/executor.h"
#include "daemon/memory-limits.h"
#include "daemon/pinned.h"
#include "daemon/reservation.h"
#include "daemon/ring.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"

struct tfd_transfer;
struct tfd_held_frame;

/* A request waiting for the execution domain (policy `wait`); freed when its timer closes. */
typedef struct tfd_queued_request {
    uv_timer_t timer; /* first: the timer's close callback frees the whole record */
    tfd_waiter waiter;
    tfd_conn *conn;
    Tenferro__Frame *frame; /* the request, replayed when admitted */
    uint64_t deadline_ms;   /* how long it may wait: the client's ask within the daemon's */
} tfd_queued_request;

struct tfd_conn {
    uv_pipe_t pipe; /* first: libuv handles point back to the connection */
    tfd_server *srv;
    tfd_conn *next, *prev;
    uint64_t client_id;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    char name[64];
    int hello_done;
    int closing;         /* no more frames are read or answered */
    int pipe_closed;     /* libuv closed the pipe */
    int stream_drained;  /* the final marker completed */
    int paused;          /* requests finishing off the loop that input waits for (tfd_conn_pause) */
    int peer_eof;        /* the client shut its write side: answer what it sent, then close */
    int eof_marker;      /* that marker has not completed yet */
    uint32_t decodes;    /* large frames being decoded off the loop (connection.c) */
    uv_timer_t *hello_timer; /* closes a connection that does not say Hello in time */
    int hello_grace;     /* the deadline was put off once for a Hello not yet read */
    uv_idle_t *later;    /* runs later_fn on the next loop turn (tfd_conn_continue_later) */
    void (*later_fn)(tfd_conn *c, void *arg);
    void *later_arg;
    uint32_t buffer_creations; /* BufferCreates on the thread pool; the connection waits for them */

    uint8_t *rbuf;
    size_t rstart, rlen, rcap; /* unread bytes are rbuf[rstart .. rstart+rlen) */

    tfd_tensor_table tensors;
    tf__id_table prepared;   /* tfd_prepared_ref by the client's id (handle-prepare.c) */
    uint64_t prepared_bytes; /* device memory of those, for the quotas */
    tfd_stream *stream;
    uint64_t session_id; /* held session, 0 if none */
    int scoped_active;   /* a scoped root is between its first and final frame */
    int priority;        /* stream priority class chosen at the handshake */
    tfd_queued_request *queued; /* request waiting for the domain, or NULL */
    int admitted_from_queue;    /* the replayed request was admitted while queued */
    uint64_t admitted_session_id;

    /* Pinned buffers and pending transfers (handle-buffer.c, handle-transfer.c). */
    tf__completion_slot *completion; /* the daemon's mapping of the client's completion page */
    int page_fd;                     /* its memfd until the client says Mapped, else -1 */
    int ring_offered;                /* the HelloReply offered a ring: attached at Mapped */
    tf__mailbox *mailbox;            /* the submission mailbox in that mapping, once sealed */
    uint64_t dispatched_seq;         /* highest sequence number of a frame handled so far */
    tfd_ring ring;                   /* the submission ring in that mapping (ring.c) */
    tfd_pinned_table buffers;
    /* Each slot's transfer: in flight, or completed and kept until the slot is used again. */
    struct tfd_transfer *transfers[TF__COMPLETION_SLOTS];
    uint32_t transfers_in_flight;      /* items of transfers that have not called back */
    atomic_uint transfers_unreaped;    /* completions published since the last reap */

    /*
     * Device-to-device copies between daemons (peer-offer.c, peer-take.c):
     * this connection is another daemon's, fetching offers (peer_daemon);
     * offers of this connection being fetched or lent (lent; while any is,
     * a closing connection keeps its tensors: teardown_deferred); the take
     * of this connection in progress (take: at most one, as the connection
     * is paused meanwhile; a closing connection is kept until it ends);
     * for a peer daemon's connection, the uid of the client that asked that
     * daemon for the copy (Hello.asking_uid), the uid it is charged to
     * (tfd_limits_charged_uid).
     */
    int peer_daemon;
    uid_t asking_uid;
    uint32_t lent;
    int teardown_deferred;
    struct take_job *take;

    /* Replies held back behind one that carries a file descriptor (connection.c). */
    struct tfd_held_frame *held_head, *held_tail;
    uv_timer_t *held_timer; /* retries such a reply while the socket is full */

    /* Queued reply bytes and decode memory, and why input waits for them (memory-limits.c). */
    tfd_conn_memory mem;
};

/* Connection plumbing (connection.c). */
void tfd_conn_accept(tfd_server *srv);
/* Encodes and queues a frame; closes the connection if it cannot be encoded. */
void tfd_conn_send(tfd_conn *c, Tenferro__Frame *frame);
/*
 * Sends a frame with file descriptor fd as SCM_RIGHTS on its first byte, in
 * order with every other reply; takes ownership of fd (closed once sent, or
 * when the connection goes).
 */
void tfd_conn_send_with_fd(tfd_conn *c, Tenferro__Frame *frame, int fd);
/* Sends `result` as the answer to request `seq`, with file descriptor `fd` attached unless it is -1. */
void tfd_conn_send_result(tfd_conn *c, uint64_t seq, Tenferro__Result *result, int fd);
/* Hands a decoded request (from the socket or the ring) to its handler, noting its sequence number. */
void tfd_conn_dispatch_frame(tfd_conn *c, Tenferro__Frame *frame);
/* Sends a Result frame answering request `seq`. */
void tfd_conn_reply(tfd_conn *c, uint64_t seq, tf_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reports a protocol error to the peer if possible and closes this connection only. */
void tfd_conn_fail(tfd_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Ends the connection over memory the daemon could not get for `what`, with a typed last word. */
void tfd_conn_fail_no_memory(tfd_conn *c, const char *what);
/* Starts closing: frees the connection's tensors, drains its stream, releases what it held. */
void tfd_conn_close(tfd_conn *c);
/*
 * Closes the connection without waiting for the peer to read what is queued
 * for it (a closing connection's shutdown waits for that): the replies are
 * dropped and their memory freed. For a peer that does not read at all.
 */
void tfd_conn_abort(tfd_conn *c);
/*
 * The last tensor a closing connection lent to another daemon came back
 * (c->lent is 0): the teardown tfd_conn_close deferred goes on.
 */
void tfd_conn_lend_over(tfd_conn *c);
/*
 * Stops handling the connection's input (frames already read wait too) until
 * tfd_conn_resume, for a request that finishes off the loop: the requests
 * after it are handled after it, as they would be had it finished at once.
 */
void tfd_conn_pause(tfd_conn *c);
void tfd_conn_resume(tfd_conn *c);

/*
 * Fairness: runs fn(c, arg) on a later turn of the loop, after other
 * connections' input, with c paused until then (fn resumes it, or continues
 * later again). A handler whose work would hold the loop longer than
 * [limits] loop_slice_us does a slice and continues here. fn also runs when
 * c started closing meanwhile, to free what arg holds. Returns -1 (nothing
 * scheduled) when out of memory.
 */
int tfd_conn_continue_later(tfd_conn *c, void (*fn)(tfd_conn *c, void *arg), void *arg);

/*
 * A request the client sent before shutting its write side has been
 * answered, or a pause ended: closes the connection once nothing it sent is
 * left unanswered (half-close).
 */
void tfd_conn_eof_progress(tfd_conn *c);

/* Queues a marker whose completion runs done(item) with item->done_arg. */
tf_status tfd_conn_enqueue_marker(tfd_conn *c, tfd_item_done_fn done, void *arg);

/* Frees a closing connection once its pipe is closed, its stream drained and no transfer is in flight. */
void tfd_conn_maybe_free(tfd_conn *c);

#endif
