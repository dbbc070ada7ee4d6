/*
 * libtenferro-client internals: the client record, the local handle table,
 * the queue of operations not yet submitted, the blocking transport with the
 * file descriptors it receives, the completion page and its slots, and the
 * pinned buffers and pending transfers.
 */
#ifndef TENFERRO_CLIENT_INTERNAL_H
#define TENFERRO_CLIENT_INTERNAL_H

#include <stdint.h>

#include "common/completion.h"
#include "common/frame.h"
#include "common/id-table.h"
#include "common/linalg.h"
#include "common/ops.h"
#include "tenferro/tenferro.h"

/* What the client knows of a tensor it made. */
typedef struct tf__handle {
    uint64_t id; /* 0: empty slot */
    tf__meta meta;
    int pending; /* produced by a queued operation not yet accepted by the daemon */
    /*
     * The TransferDirection of the pending transfer that holds it (0: none):
     * operations may read it, but no download, free or other transfer until its wait.
     */
    uint32_t in_flight;
} tf__handle;

/*
 * A file descriptor received as SCM_RIGHTS, with the stream offsets
 * [from, to) of the bytes that arrived with it: the frame it belongs to starts
 * inside that range (the daemon attaches it to the frame's first byte).
 */
typedef struct tf__received_fd {
    int fd;
    uint64_t from, to;
} tf__received_fd;

/* Descriptors received but not yet claimed by their frame; more is a protocol error. */
#define TF__MAX_RECEIVED_FDS 8

/* The completion slot the blocking staged route uses; pending transfers get the others. */
#define TF__STAGING_SLOT 0u

struct tf_pinned_buffer {
    tf_client *client;
    uint64_t id;
    uint8_t *data; /* the client's MAP_SHARED mapping of the daemon's memfd */
    size_t bytes;
    tf_pending *transfer; /* the pending transfer that holds it, NULL when the caller has it */
    tf_pinned_buffer *prev, *next; /* every mapped buffer of the client */
};

struct tf_pending {
    tf_client *client;
    uint32_t slot;
    uint32_t direction; /* TransferDirection */
    tf_tensor tensor;
    tf_pinned_buffer *buffer;
    tf_pending *prev, *next; /* every open pending transfer of the client */
};


/* A queued linear-algebra operation's descriptor and its wire form (view-linalg.c). */
typedef struct tf__linalg_rec {
    tf__linalg desc;
    int rank; /* the input's: perm names that many axes */
    Tenferro__Linalg wire;
    Tenferro__Truncation wire_trunc;
    int32_t perm[TF_MAX_RANK];
} tf__linalg_rec;

/* One operation queued locally until the next submission. */
typedef struct tf__queued_op {
    uint32_t kind;
    int n_inputs;
    uint64_t inputs[2];
    uint64_t output;
    int n_params;
    int64_t params[TF__MAX_PARAMS];
    unsigned flags;
    tf_scalar alpha, beta;
    tf__contraction contract; /* TF__OP_CONTRACT */
    /* Its wire form, written by the encoder (Op.contraction points at it while a frame is built). */
    Tenferro__Contraction contract_msg;
    uint32_t contract_labels[3][TF_MAX_RANK]; /* labels_a, labels_b, labels_out */
    tf__fft fft;           /* TF__OP_FFT: the descriptor (view-fft.c) */
    Tenferro__Fft wire_fft; /* its wire form while a Submit is encoded */
    /*
     * TF__OP_RUN_PREPARED (graph.c) and the linear-algebra kinds
     * (view-linalg.c): inputs then outputs (malloc'd); a run's graph, a
     * linear-algebra operation's descriptor (malloc'd).
     */
    uint64_t prepared;
    int n_run_inputs, n_run_outputs;
    uint64_t *run_io;
    tf__linalg_rec *linalg;
} tf__queued_op;

/* 1 when q names its tensors in run_io (several outputs) instead of inputs and output. */
static inline int tf__queued_names_io(const tf__queued_op *q) {
    return q->kind == TF__OP_RUN_PREPARED || q->linalg != NULL;
}

struct tf_view {
    tf_client *client;
    struct tf_graph *graph; /* recording: operations become this graph's nodes (graph.c) */
};

struct tf_session {
    tf_client *client;
    uint64_t id;
    tf_session_counters stats;
    uint64_t host_waits; /* tf_session_host_waits */
};

struct tf_client {
    int fd;
    int broken;            /* the connection is unusable: every call is TF_ERR_DISCONNECTED */
    uint64_t next_seq;
    uint64_t next_tensor_id;
    uint64_t max_frame_bytes;
    tf_status last_word; /* status of the daemon's closing Result (seq 0), TF_OK if none came */
    uint64_t client_id;
    char device[256];
    char socket_path[108]; /* where the daemon listens, absolute (tf_copy_to tells the other daemon) */
    char last_error[512];
    int64_t failed_index;

    uint8_t *rbuf; /* receive buffer, reused; bytes [rstart, rstart + rlen) are read, not yet used */
    size_t rcap, rstart, rlen;

    tf__id_table handles; /* of tf__handle */
    tf__queued_op *queue; /* operations of the active session not yet submitted */
    size_t n_queued, queue_cap;

    tf_session *held;  /* the open held session, if any */
    int in_callback;   /* inside tf_with_session's or tf_session_with's callback */
    int in_scoped;     /* inside a scoped burst */
    int scoped_sent;   /* the burst already sent a non-final frame (it was admitted) */
    tf_status scoped_refused; /* the burst's admission was refused: nothing more is sent */
    tf_session_options scoped_options; /* the burst's admission (tf_with_session_opts) */
    tf_view view;

    tf__received_fd fds[TF__MAX_RECEIVED_FDS]; /* descriptors not yet claimed, oldest first */
    unsigned n_fds;
    uint64_t received;    /* bytes received on the connection so far */
    uint64_t frame_start; /* stream offset of the frame read last */

    tf__completion_slot *completion; /* the mapped completion page; NULL: no pending transfers */
    size_t completion_bytes;         /* length of that mapping */
    tf__mailbox *mailbox;            /* its submission mailbox; NULL when none is offered */
    uint32_t n_slots;
    /* The submission ring in that mapping (ring.c); NULL when none is offered or wanted. */
    tf_ring_header *ring;
    uint8_t *ring_requests, *ring_replies;
    uint32_t ring_request_bytes, ring_reply_bytes;
    uint64_t ring_req_head, ring_rep_tail; /* this side's positions */
    uint64_t last_socket_seq;  /* the last frame sent on the socket, doorbells aside */
    uint64_t slot_used[TF__COMPLETION_SLOTS / 64];     /* slots armed, waited for or detached */
    uint64_t slot_detached[TF__COMPLETION_SLOTS / 64]; /* released: reclaimed once DONE */
    /*
     * Released while unsubmitted work reads the tensor: the TransferRelease
     * (after which the daemon frees the tensor) goes out once that work was
     * submitted or discarded, and only then is the slot detached.
     */
    uint64_t slot_release_due[TF__COMPLETION_SLOTS / 64];
    uint32_t slot_spin_us[TF__COMPLETION_SLOTS];       /* how long a wait polls before sleeping */

    uint64_t next_buffer_id;
    tf_pinned_buffer *buffers; /* every mapped buffer, the staging buffer included */
    tf_pending *pendings;      /* every pending transfer not yet waited for or released */
    tf_pinned_buffer *staging; /* the blocking routes' reusable buffer, NULL until first use */
    size_t staging_refused;    /* smallest staging size the daemon refused (0: none) */

    tf__id_table prepared; /* of tf__prepared_rec: this connection's prepared graphs (graph.c) */

    /* Waiting for a synchronize (wait-spin.c). */
    uint64_t spin_until_ns;      /* replies are polled for until then (0: the short default) */
    uint64_t wait_spin_max_ns;   /* TENFERRO_WAIT_SPIN_US: the longest poll of one wait */
    uint64_t last_wait_ns;       /* how long the last synchronize waited */
    int wait_sleeps;             /* this synchronize sleeps at once: it is not polled for and the
                                    last one outlasted the short poll (the CPU backend, or
                                    TENFERRO_WAIT_SPIN_US=0) */
    int device_is_host;          /* the daemon's device is this machine's CPU (its cores do the work) */
};

/* Records a failure message (printf-style) and returns status, for `return tf__fail(...)`. */
tf_status tf__fail(tf_client *c, tf_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Clears the last error after a success and returns TF_OK. */
tf_status tf__ok(tf_client *c);

/* Sends a request (assigning its sequence number) and reads its reply; the caller frees *reply. */
tf_status tf__call(tf_client *c, Tenferro__Frame *request, Tenferro__Frame **reply);
/* Sends a frame that has no reply. */
tf_status tf__send(tf_client *c, Tenferro__Frame *frame);
/*
 * Tells the daemon the memfd of pinned buffer `buffer` (0: the completion
 * page) is mapped here and will be mapped no more, so it seals it; no reply.
 */
tf_status tf__send_mapped(tf_client *c, uint64_t buffer);
/* Reads the reply to `seq`. */
tf_status tf__recv(tf_client *c, uint64_t seq, Tenferro__Frame **reply);
/* Maps a Result to a status, copying its message into last_error. */
tf_status tf__result_status(tf_client *c, const Tenferro__Result *result);
/* Sends a request whose answer is a Result and returns that Result's status. */
tf_status tf__call_result(tf_client *c, Tenferro__Frame *request, const char *what);
/* Reads the Result answering `seq` and returns its status. */
tf_status tf__recv_result(tf_client *c, uint64_t seq, const char *what);
/* The descriptor that arrived with the frame read last, or -1; the caller owns it. */
int tf__take_fd(tf_client *c);
/*
 * Without blocking, notices a daemon that has closed the connection or said
 * its last word (a sequence-0 Result): TF_OK while the connection looks alive,
 * else TF_ERR_DISCONNECTED with the reason. Nothing else may arrive unasked.
 */
tf_status tf__check_connection(tf_client *c);

/* ---- where the daemons listen (connection.c) ---- */

/* The folder the daemons' sockets are in: $TENFERRO_RUNTIME_DIR or /run/tenferro. */
const char *tf__runtime_dir(void);
/*
 * The socket of a device's daemon into buf, as tf_connect_device picks it:
 * "cuda:N" or "N" is DIR/tenferrod-N.sock, "cpu" DIR/tenferrod-cpu.sock.
 * 0 on success, -1 when the name has another form.
 */
int tf__device_socket(const char *device, char *buf, size_t len);

/* ---- graphs being recorded and prepared graphs (graph.c) ---- */

/* What the client keeps of a prepared graph: the metadata its runs are checked against. */
typedef struct tf__prepared_rec {
    uint64_t id; /* unique in the process, so another connection's handle is never this one's */
    int n_inputs, n_outputs;
    tf__meta *meta; /* inputs, then outputs */
} tf__prepared_rec;

/* The handle table a view's operations read and create tensors in. */
tf__id_table *tf__view_handles(tf_view *v);
/*
 * The slot after the n operations of a growable array (*ops of *cap slots),
 * growing it (first to first_cap slots, then doubling); NULL when out of memory.
 */
tf__queued_op *tf__ops_slot(tf__queued_op **ops, size_t n, size_t *cap, size_t first_cap);
/* Makes room for one more operation on the view (the session queue or the graph); NULL when out of memory. */
tf__queued_op *tf__view_slot(tf_view *v);
/* Counts the operation tf__view_slot handed out as recorded, and gives the next tensor id. */
void tf__view_commit(tf_view *v);
uint64_t tf__view_next_id(tf_view *v);
/* The operations recorded on the view so far, and how many. */
tf__queued_op *tf__view_ops(tf_view *v, size_t *n);
/* Takes back the view's operations from `start` on (a call that failed part-way). */
void tf__view_truncate(tf_view *v, size_t start);
/* A tensor v's operations may read (a live tensor of the client, or a value of the recording graph). */
tf_status tf__view_lookup(tf_view *v, tf_tensor t, tf__handle **out);
/* Drops a result the view no longer needs (einsum's intermediates): queued free, or nothing in a graph. */
tf_status tf__view_drop(tf_view *v, tf_tensor t);
/* The recording graph's side of those (graph.c). */
tf__queued_op *tf__graph_slot(struct tf_graph *g);
void tf__graph_commit(struct tf_graph *g);
uint64_t tf__graph_next_id(struct tf_graph *g);
tf__id_table *tf__graph_handles(struct tf_graph *g);
tf__queued_op *tf__graph_ops(struct tf_graph *g, size_t *n);
void tf__graph_truncate(struct tf_graph *g, size_t n);
/* Forgets the client's prepared graphs (tf_disconnect). */
void tf__prepared_forget_all(tf_client *c);
/* Frees what a queued operation owns (a run's inputs and outputs). */
void tf__queued_op_release(tf__queued_op *q);
/* Builds the wire form of n queued operations into ops[] / ptrs[] (session.c). */
void tf__encode_ops(tf__queued_op *queue, size_t n, Tenferro__Op *ops, Tenferro__Op **ptrs);

/* ---- waiting for a synchronize (wait-spin.c) ---- */

/* Sets the client's longest poll from TENFERRO_WAIT_SPIN_US and the device (at the handshake). */
void tf__wait_spin_init(tf_client *c);

/* How long a reply that waits for no device work is polled for before the client sleeps. */
#define TF__REPLY_SPIN_US 60u
/*
 * Where synchronizes are not polled for, one sleeps at once when the last
 * took longer than this: several short polls, so the wake-up a sleep adds to
 * a short wait never keeps the next one from polling.
 */
#define TF__WAIT_SLEEP_AFTER_US (4u * TF__REPLY_SPIN_US)

/*
 * Around a request whose reply waits for queued device work: begin lets the
 * reply be polled for about as long as the last such wait took (up to the
 * maximum); where synchronizes are not polled for, it has the reply slept
 * for at once when the last wait took longer than TF__WAIT_SLEEP_AFTER_US
 * (the short poll would only have held a core the work needs). End records
 * how long this one took and goes back to the short default poll. Returns
 * the start time for end.
 */
uint64_t tf__wait_spin_begin(tf_client *c);
void tf__wait_spin_end(tf_client *c, uint64_t started_ns);

/* ---- the completion page (completion.c) ---- */

/* Where HelloReply places the mailbox and the submission ring in the completion page. */
typedef struct tf__page_layout {
    uint32_t slots, mailbox_offset;
    uint32_t ring_offset, ring_request_bytes, ring_reply_bytes;
} tf__page_layout;

/* Maps the completion page the daemon sent with HelloReply (consumes fd); TF_OK or why not. */
tf_status tf__completion_map(tf_client *c, const tf__page_layout *layout, int fd);

/* ---- the submission ring (ring.c) ---- */

/* Takes the ring at `offset` of the mapping when it is well placed and TENFERRO_RING allows it. */
void tf__ring_attach(tf_client *c, uint8_t *mapping, size_t mapped, uint32_t offset,
                     uint32_t request_bytes, uint32_t reply_bytes);
/* 1 when `frame` goes through the ring. */
int tf__ring_carries(const tf_client *c, const Tenferro__Frame *frame);
/* Writes the request into the ring (the socket when it does not fit) and reads its reply. */
tf_status tf__ring_call(tf_client *c, Tenferro__Frame *request, Tenferro__Frame **reply);
/* Unmaps the completion page. */
void tf__completion_unmap(tf_client *c);
/* Takes a free slot for a pending transfer (reclaiming released ones that finished), or TF_ERR_BUSY. */
tf_status tf__slot_acquire(tf_client *c, uint32_t *slot);
/* Marks a slot PENDING before the Transfer naming it (of `bytes`) is sent; sizes its wait's polling. */
void tf__slot_arm(tf_client *c, uint32_t slot, size_t bytes);
/* Returns a slot to IDLE and to the free set (after its wait, or after a refused Transfer). */
void tf__slot_release(tf_client *c, uint32_t slot);
/* Leaves a slot to the daemon's released transfer; it is reclaimed once the daemon marks it DONE. */
void tf__slot_detach(tf_client *c, uint32_t slot);
/*
 * Sleeps until the daemon marks `slot` DONE and stores the transfer's status
 * in *transfer_status. Fails with TF_ERR_DISCONNECTED, never hangs, when the
 * daemon goes away meanwhile.
 */
tf_status tf__slot_wait(tf_client *c, uint32_t slot, tf_status *transfer_status);
/*
 * Waits while the shared word holds `value`: polls for spin_us, then sleeps
 * on its futex in bounded steps, checking the connection between them
 * (TF_ERR_DISCONNECTED when the daemon has gone). *sleeping, when given, is 1
 * while it sleeps, so the other side knows to wake it.
 */
tf_status tf__await_change(tf_client *c, uint32_t *word, uint32_t value, uint32_t spin_us,
                           uint32_t *sleeping);

/* ---- pinned buffers and transfers (pinned.c) ---- */

/* Creates and maps a pinned buffer of `bytes` (no checks of the caller's state). */
tf_status tf__buffer_create(tf_client *c, size_t bytes, tf_pinned_buffer **out);
/* Frees a buffer on the daemon, then unmaps it here; TF_ERR_BUSY keeps it. */
tf_status tf__buffer_free(tf_pinned_buffer *b);
/*
 * Asks for a transfer between buffer b (from offset 0) and tensor t of
 * `bytes` bytes, arming `slot`: through the submission mailbox while the
 * daemon polls it (*ticket = 0), else as a Transfer frame (*ticket = its
 * sequence number).
 */
tf_status tf__transfer_send(tf_client *c, uint32_t direction, const tf_pinned_buffer *b,
                            tf_tensor t, size_t bytes, uint32_t slot, uint64_t *ticket);
/* Reads the answer to that request; a refusal releases its slot (except the staging slot, disarmed). */
tf_status tf__transfer_result(tf_client *c, uint64_t ticket, uint32_t slot);

/* ---- the submission mailbox (mailbox.c) ---- */

/* 1 when the daemon polls the mailbox and it is free: a request there spares a socket hop. */
int tf__mailbox_usable(const tf_client *c);
/* Writes a transfer request into the mailbox, ringing the doorbell if the daemon stopped polling. */
tf_status tf__mailbox_submit(tf_client *c, uint32_t direction, uint64_t buffer, tf_tensor t,
                             size_t bytes, uint32_t slot);
/*
 * After a request was written to shared memory (the mailbox or the ring):
 * sends a MailboxDoorbell frame when the daemon says it no longer polls.
 */
tf_status tf__doorbell_if_asleep(tf_client *c);
/* Waits for the daemon's answer to the mailbox's request: TF_OK, or its refusal with the reason. */
tf_status tf__mailbox_answer(tf_client *c);
/*
 * Waits for the transfer in `slot` and frees the slot; returns the transfer's
 * status with a message naming its direction and tensor.
 */
tf_status tf__transfer_wait(tf_client *c, uint32_t slot, uint32_t direction, tf_tensor t);
/*
 * Sends the TransferRelease of every transfer released while unsubmitted work
 * read its tensor, and detaches their slots: called once the queue has been
 * submitted or discarded, so the daemon frees those tensors behind that work.
 */
void tf__send_due_releases(tf_client *c);
/* Unmaps every buffer and frees every pending transfer (tf_disconnect). */
void tf__pinned_release_all(tf_client *c);

/* ---- the staged blocking route (staging.c) ---- */

/*
 * The staging buffer for a blocking transfer of `bytes`, created or grown as
 * needed; *stage is NULL when the transfer goes inline instead (small, or no
 * staging buffer to be had). Fails only on a lost connection.
 */
tf_status tf__staging_for(tf_client *c, size_t bytes, tf_pinned_buffer **stage);
/* Creates tensor h->id and fills it from data through the staging buffer. */
tf_status tf__staged_upload(tf_client *c, const tf__handle *h, const void *data,
                            tf_pinned_buffer *stage);
/* Copies `bytes` of tensor t into the staging buffer. */
tf_status tf__staged_download(tf_client *c, tf_tensor t, size_t bytes, tf_pinned_buffer *stage);

/* Looks up a live or pending tensor, failing with TF_ERR_UNKNOWN_HANDLE. */
tf_status tf__lookup(tf_client *c, tf_tensor t, tf__handle **out);
/*
 * tf__lookup, failing with TF_ERR_BUSY while a pending transfer holds the
 * tensor, with a message saying which transfer and that it cannot be `use`
 * ("freed", "downloaded", ...) until then.
 */
tf_status tf__lookup_idle(tf_client *c, tf_tensor t, const char *use, tf__handle **out);
/*
 * Makes tensor t's value reachable by the daemon for a transfer: in a scoped
 * burst, queued work naming it is sent first; in a held session, unsubmitted
 * work naming it makes it TF_ERR_BUSY, as does a pending transfer of it
 * (a tensor is in one transfer at a time). *bytes gets its size.
 */
tf_status tf__transferable(tf_client *c, tf_tensor t, size_t *bytes);
/* 1 when an operation queued but not yet submitted names tensor t (as an input or its output). */
int tf__queue_names(const tf_client *c, tf_tensor t);
/* Sends a Free of n tensors (no reply). */
tf_status tf__send_free(tf_client *c, const tf_tensor *tensors, size_t n);
/*
 * Sends one Upload of tensor h->id writing `len` bytes of data at `offset`;
 * with `create` it also creates the tensor from h's dtype and shape.
 */
tf_status tf__send_upload(tf_client *c, const tf__handle *h, int create, size_t offset,
                          const void *data, size_t len, uint64_t *seq);

/* Queues an operation after running the shape rules; returns its output handle. */
tf_status tf__queue_op(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                       int n_params, const int64_t *params, unsigned flags, tf_scalar alpha,
                       tf_scalar beta, tf_tensor *out);
/*
 * The start of queueing an operation: checks the view and `out`, and looks up
 * the inputs (live tensors of this client, also ones a pending transfer
 * holds: the daemon runs the operation after the copy) into meta[0..n_inputs).
 */
tf_status tf__view_inputs(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                          const tf_tensor *out, tf__meta *meta);
/*
 * Appends an operation whose output metadata the caller computed: takes the
 * output's handle (*out) and returns the queued record for the caller to fill
 * with the operation's parameters or descriptor.
 */
tf_status tf__queue_push(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                         const tf__meta *out_meta, tf_tensor *out, tf__queued_op **record);
/* Fills the wire form of a queued FFT into op (view-fft.c); q keeps that form's storage. */
void tf__encode_fft(tf__queued_op *q, Tenferro__Op *op);
/* The same for a queued linear-algebra operation (view-linalg.c). */
void tf__encode_linalg(tf__queued_op *q, Tenferro__Op *op);
/* Queues a FREE of an existing tensor in the active session. */
tf_status tf__queue_free(tf_client *c, tf_tensor t);
/* TF_OK when operations may be queued on v now (inside its session callback, connected). */
tf_status tf__view_check(tf_view *v);
/*
 * Queues an OP_CONTRACT whose descriptor and output metadata the caller has
 * checked (client/view-einsum.c); returns its output handle.
 */
tf_status tf__queue_contract(tf_view *v, const tf__contraction *k, const tf_tensor *inputs,
                             const tf__meta *out_meta, tf_tensor *out);

/*
 * Carries the queued operations to the daemon in a Submit of `mode`. The
 * outputs of accepted operations become live; the rest are forgotten.
 * *carried receives the number of operations sent.
 */
tf_status tf__submit_queue(tf_client *c, uint64_t session_id, uint32_t mode, uint64_t *carried);
/* Inside a scoped burst: sends the queue so far (admitting the burst) without ending it. */
tf_status tf__scoped_flush(tf_client *c);

/* Forgets the queued operations and their outputs without sending them. */
void tf__discard_queue(tf_client *c);

#endif
