/*
 * libtenferro-client internals: the client record, the local handle table,
 * the queue of operations not yet submitted, and the blocking transport.
 */
#ifndef TENFERRO_CLIENT_INTERNAL_H
#define TENFERRO_CLIENT_INTERNAL_H

#include <stdint.h>

#include "common/frame.h"
#include "common/id-table.h"
#include "common/ops.h"
#include "tenferro/tenferro.h"

/* What the client knows of a tensor it made. */
typedef struct tf__handle {
    uint64_t id; /* 0: empty slot */
    tf__meta meta;
    int pending; /* produced by a queued operation not yet accepted by the daemon */
} tf__handle;


/* One operation queued locally until the next submission. */
typedef struct tf__queued_op {
    uint32_t kind;
    int n_inputs;
    uint64_t inputs[2];
    uint64_t output;
    int n_params;
    int64_t params[TF_MAX_RANK];
    unsigned flags;
    tf_scalar alpha, beta;
} tf__queued_op;

struct tf_view {
    tf_client *client;
};

struct tf_session {
    tf_client *client;
    uint64_t id;
    tf_session_counters stats;
};

struct tf_client {
    int fd;
    int broken;            /* the connection is unusable: every call is TF_ERR_DISCONNECTED */
    uint64_t next_seq;
    uint64_t next_tensor_id;
    uint64_t max_frame_bytes;
    uint64_t client_id;
    char device[256];
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
    tf_view view;
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
/* Reads the reply to `seq`. */
tf_status tf__recv(tf_client *c, uint64_t seq, Tenferro__Frame **reply);
/* Maps a Result to a status, copying its message into last_error. */
tf_status tf__result_status(tf_client *c, const Tenferro__Result *result);

/* Looks up a live or pending tensor, failing with TF_ERR_UNKNOWN_HANDLE. */
tf_status tf__lookup(tf_client *c, tf_tensor t, tf__handle **out);

/* Queues an operation after running the shape rules; returns its output handle. */
tf_status tf__queue_op(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                       int n_params, const int64_t *params, unsigned flags, tf_scalar alpha,
                       tf_scalar beta, tf_tensor *out);
/* Queues a FREE of an existing tensor in the active session. */
tf_status tf__queue_free(tf_client *c, tf_tensor t);

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
