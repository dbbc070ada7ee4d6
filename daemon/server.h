/*
 * The daemon's central state: options, the server (loop, listener, backend,
 * executor, reservation table, connections, counters) and the per-connection
 * record. Every module of the loop thread includes this header; the request
 * handlers are declared here so dispatch.c can route to them by name.
 */
#ifndef TENFERRO_DAEMON_SERVER_H
#define TENFERRO_DAEMON_SERVER_H

#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "common/completion.h"
#include "common/frame.h"
#include "daemon/backend/backend.h"
#include "daemon/executor.h"
#include "daemon/pinned.h"
#include "daemon/reservation.h"
#include "daemon/tensor-table.h"
#include "tenferro/version.h"

#define TFD_STR2_(x) #x
#define TFD_STR_(x) TFD_STR2_(x)
#define TFD_VERSION_STRING \
    TFD_STR_(TF_VERSION_MAJOR) "." TFD_STR_(TF_VERSION_MINOR) "." TFD_STR_(TF_VERSION_PATCH)

/* Limits on what one client (or all clients of one uid) may hold; 0 means unlimited. */
typedef struct tfd_quota {
    uint64_t device_bytes;
    uint64_t pinned_bytes;
    uint64_t live_tensors;
    uint64_t queued_ops; /* operations accepted and not yet executed */
} tfd_quota;

#define TFD_MAX_IDS 64

/* A user or group named in the configuration, resolved to its id. */
typedef struct tfd_principal {
    int is_group;
    uint32_t id;
} tfd_principal;

/* A stream priority class: whom it applies to and the priority (lower number = more urgent). */
typedef struct tfd_priority_rule {
    tfd_principal who;
    int priority;
} tfd_priority_rule;

/* The daemon's configuration: built from defaults, the INI file, then the command line. */
typedef struct tfd_options {
    char socket_path[108];
    unsigned socket_mode;     /* permission bits of the socket file (default 0660) */
    char socket_group[64];    /* group owning the socket, "" to leave it */
    char device[32];          /* "auto", "cpu", "cuda:N" */
    int workers;              /* executor worker threads; 0 = one per core (at most 16) */
    uint64_t max_frame_bytes;
    uint64_t max_pinned_bytes; /* pinned buffers of every client together; 0 = unlimited */
    tfd_policy policy;
    uint64_t wait_deadline_ms; /* how long a queued opener waits under the wait policy */
    int max_clients;
    int log_level;
    int busy_poll_us;         /* polling after activity before sleeping; -1 = by backend */
    tfd_quota client_quota;   /* per connection */
    tfd_quota uid_quota;      /* summed over the connections of one uid */
    tfd_principal allowed[TFD_MAX_IDS]; /* who may connect; none listed = everyone */
    int n_allowed;
    tfd_principal admins[TFD_MAX_IDS];  /* who may use admin requests, besides root */
    int n_admins;
    tfd_priority_rule priorities[TFD_MAX_IDS]; /* first match wins; default priority 0 */
    int n_priorities;
} tfd_options;

/* Daemon-wide counters kept by the loop thread; never attributed to a session. */
#define TFD_COUNTER_LIST(X)   \
    X(connections_accepted)   \
    X(connections_refused)    \
    X(connections_closed)     \
    X(protocol_errors)        \
    X(requests_unsupported)   \
    X(frames_received)        \
    X(frames_sent)            \
    X(batches)                \
    X(ops_accepted)           \
    X(ops_rejected)           \
    X(quota_refusals)         \
    X(sessions_opened)        \
    X(sessions_closed)        \
    X(sessions_released)      \
    X(sessions_reclaimed)     \
    X(scoped_roots)           \
    X(admissions_contended)   \
    X(admissions_reentered)   \
    X(admissions_queued)      \
    X(admissions_timed_out)   \
    X(tensors_created)        \
    X(tensors_freed)          \
    X(bytes_uploaded)         \
    X(bytes_downloaded)       \
    X(clients_terminated)     \
    X(pinned_buffers_created) \
    X(pinned_buffers_live)    \
    X(pinned_bytes_live)      \
    X(transfers_accepted)     \
    X(transfers_refused)      \
    X(transfers_completed)    \
    X(transfers_failed)       \
    X(transfers_detached)     \
    X(mailbox_requests)

typedef struct tfd_counters {
#define TFD_COUNTER_FIELD_(name) uint64_t name;
    TFD_COUNTER_LIST(TFD_COUNTER_FIELD_)
#undef TFD_COUNTER_FIELD_
} tfd_counters;

/* A setting given on the command line, re-applied over the file at every reload. */
typedef struct tfd_flag {
    const char *section;
    const char *key;
    const char *value;
} tfd_flag;

#define TFD_MAX_FLAGS 64

/* Where the configuration comes from: the file (if any) and the flags that override it. */
typedef struct tfd_startup {
    char config_path[256]; /* "" when no file is read */
    tfd_flag flags[TFD_MAX_FLAGS];
    int n_flags;
} tfd_startup;

/* Builds options from defaults, the file, then the flags; -1 with the reason in err. */
int tfd_startup_options(const tfd_startup *startup, tfd_options *opt, char *err, size_t err_len);

typedef struct tfd_conn tfd_conn;
struct tfd_transfer;
struct tfd_held_frame;

typedef struct tfd_server {
    uv_loop_t *loop;
    tfd_options opt;
    uv_pipe_t listener;
    uv_signal_t sig_term, sig_int, sig_hup;
    tfd_startup startup;
    tfd_backend backend;
    tfd_executor *ex;
    tfd_reservation res;
    tfd_conn *conns;
    int n_conns;
    uint64_t next_client_id, next_session_id, next_batch_id;
    uint64_t start_ms;
    tfd_counters counters;
    int stopping;
    int draining;           /* admin drain: no new connections, exit when the last leaves */
    int exit_code;          /* what tfd_server_run returns: 0 after a clean stop */
    char device_error[512]; /* why the device was declared lost, "" while healthy */
    uv_timer_t watchdog;    /* bounds a shutdown after the device was lost */
    tfd_busy_poll busy_poll; /* the loop's and completion thread's polling window */
    int mailboxes_polled;    /* the loop polls submission mailboxes now (mailbox.c) */
} tfd_server;

/* A request waiting for the execution domain (policy `wait`); freed when its timer closes. */
typedef struct tfd_queued_request {
    uv_timer_t timer; /* first: the timer's close callback frees the whole record */
    tfd_waiter waiter;
    tfd_conn *conn;
    Tenferro__Frame *frame; /* the request, replayed when admitted */
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
    int paused;          /* reads stop until a request finishes off the loop (tfd_conn_pause) */
    uint32_t buffer_creations; /* BufferCreates on the thread pool; the connection waits for them */

    uint8_t *rbuf;
    size_t rstart, rlen, rcap; /* unread bytes are rbuf[rstart .. rstart+rlen) */

    tfd_tensor_table tensors;
    tfd_stream *stream;
    uint64_t session_id; /* held session, 0 if none */
    int scoped_active;   /* a scoped root is between its first and final frame */
    int priority;        /* stream priority class chosen at the handshake */
    tfd_queued_request *queued; /* request waiting for the domain, or NULL */
    int admitted_from_queue;    /* the replayed request was admitted while queued */
    uint64_t admitted_session_id;

    /* Pinned buffers and pending transfers (handle-buffer.c, handle-pending.c). */
    tf__completion_slot *completion; /* the daemon's mapping of the client's completion page */
    tf__mailbox *mailbox;            /* the submission mailbox in that mapping */
    uint64_t dispatched_seq;         /* highest sequence number of a frame handled so far */
    tfd_pinned_table buffers;
    /* Each slot's transfer: in flight, or completed and kept until the slot is used again. */
    struct tfd_transfer *transfers[TF__COMPLETION_SLOTS];
    uint32_t transfers_in_flight;      /* items of transfers that have not called back */
    atomic_uint transfers_unreaped;    /* completions published since the last reap */

    /* Replies held back behind one that carries a file descriptor (connection.c). */
    struct tfd_held_frame *held_head, *held_tail;
    uv_timer_t *held_timer; /* retries such a reply while the socket is full */
};

/* Monotonic milliseconds. */
uint64_t tfd_now_ms(void);

/* Server lifecycle (server.c). */
int tfd_server_run(const tfd_options *opt, const tfd_startup *startup);
/* Re-reads the configuration (SIGHUP); keeps the running one if the new one is bad. */
void tfd_server_reload(tfd_server *srv);
void tfd_server_begin_shutdown(tfd_server *srv);
/* Clients past their handshake whose connection is not closing. */
int tfd_server_client_count(const tfd_server *srv);
/* During an admin drain: starts the shutdown once no client past its handshake is left. */
void tfd_server_drain_check(tfd_server *srv);

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
/* Sends a Result frame answering request `seq`. */
void tfd_conn_reply(tfd_conn *c, uint64_t seq, tf_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reports a protocol error to the peer if possible and closes this connection only. */
void tfd_conn_fail(tfd_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Starts closing: frees the connection's tensors, drains its stream, releases what it held. */
void tfd_conn_close(tfd_conn *c);
/*
 * Stops handling the connection's input (frames already read wait too) until
 * tfd_conn_resume, for a request that finishes off the loop: the requests
 * after it are handled after it, as they would be had it finished at once.
 */
void tfd_conn_pause(tfd_conn *c);
void tfd_conn_resume(tfd_conn *c);

/* Frees a closing connection once its pipe is closed, its stream drained and no transfer is in flight. */
void tfd_conn_maybe_free(tfd_conn *c);

/* Dispatch (dispatch.c): routes one decoded frame to its handler; takes ownership of it. */
void tfd_dispatch(tfd_conn *c, Tenferro__Frame *frame);

/* Request handlers, one file each. A handler takes ownership of the frame. */
void tfd_handle_hello(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_upload(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_download(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_free(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_session_open(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_submit(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_session_release(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_status(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_admin(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_buffer_create(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_buffer_free(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_transfer(tfd_conn *c, Tenferro__Frame *frame);
void tfd_handle_transfer_release(tfd_conn *c, Tenferro__Frame *frame);

/* A connection's pinned buffers (handle-buffer.c). */
/* Removes buffer id from c's table, unregisters and unmaps it, and counts it gone. */
void tfd_conn_buffer_drop(tfd_conn *c, uint64_t id);
/*
 * Releases c's pinned memory: at close (all = 0) every buffer no transfer
 * uses; at the final free (all = 1) every buffer and the completion page.
 */
void tfd_conn_buffers_release(tfd_conn *c, int all);
/* A pending transfer's request, from a Transfer frame or the submission mailbox. */
typedef struct tfd_transfer_request {
    uint32_t direction;
    uint64_t buffer, tensor, offset, bytes;
    uint32_t slot;
} tfd_transfer_request;

/*
 * Checks a pending transfer in the documented order and starts it; on a
 * refusal nothing changes and msg says why. tag names the request in logs.
 */
tf_status tfd_transfer_start(tfd_conn *c, const tfd_transfer_request *r, uint64_t tag, char *msg,
                             size_t msg_len);

/*
 * Submission mailboxes (mailbox.c): a request a client wrote into its
 * mailbox is started once every frame it sent before has been handled, and
 * answered in the mailbox. tfd_conn_poll_mailbox serves one connection and
 * returns 1 when it answered a request; tfd_server_poll_mailboxes serves
 * them all and returns how many it answered.
 * tfd_server_mailboxes_polled tells clients whether the loop is polling
 * (1) or about to sleep (0), when they must ring the doorbell.
 */
int tfd_conn_poll_mailbox(tfd_conn *c);
void tfd_handle_mailbox_doorbell(tfd_conn *c, Tenferro__Frame *frame);
int tfd_server_poll_mailboxes(tfd_server *srv);
void tfd_server_mailboxes_polled(tfd_server *srv, int polling);

/*
 * Finalizes on the loop every transfer whose completion an executor thread
 * already published, so the next frame finds its buffer and tensor free.
 */
void tfd_conn_reap_transfers(tfd_conn *c);

/* Frees the records of completed transfers kept for a late release (handle-pending.c). */
void tfd_conn_transfers_forget(tfd_conn *c);

/* Admission (admission.c): the reservation table applied to connections. */
/*
 * Asks for the domain for a held open (held = 1, *session_id receives the new
 * session's id) or a scoped root. Returns 1 when admitted: the caller goes on
 * with the request. Returns 0 when the request was refused (answered here) or
 * queued (the frame is kept and replayed through tfd_dispatch once admitted).
 */
int tfd_admission_request(tfd_conn *c, Tenferro__Frame *frame, int held, uint64_t *session_id);
/* Releases c's reservation (if any) and admits queued requests in FIFO order. */
void tfd_admission_release(tfd_conn *c);
/* Withdraws c's queued request, if any, without answering it. */
void tfd_admission_cancel(tfd_conn *c);

/* Batches (batch.c): validates operations and enqueues them on the connection's stream. */
typedef struct tfd_batch_result {
    tf_status status;
    int has_failed_index;
    uint32_t failed_index;
    uint64_t accepted;
    uint64_t batch; /* id the executor reports failures of this batch under */
    char message[512];
} tfd_batch_result;
void tfd_batch_enqueue(tfd_conn *c, Tenferro__Op **ops, size_t n_ops, tfd_batch_result *out);

/*
 * The tensor `id` of this connection when a request may use it: live, and in
 * no pending transfer. Otherwise NULL, with the typed status in *status and a
 * message starting with `what` (then "input N" when input >= 0) in msg.
 */
tfd_tensor *tfd_usable_tensor(tfd_conn *c, uint64_t id, const char *what, int input,
                              tf_status *status, char *msg, size_t msg_len);

/* Enqueues a FREE item for a tensor already removed from the table. */
void tfd_free_tensor_storage(tfd_conn *c, const tfd_tensor *rec);

/* Queues a marker whose completion runs done(item) with item->done_arg. */
tf_status tfd_conn_enqueue_marker(tfd_conn *c, tfd_item_done_fn done, void *arg);

#endif
