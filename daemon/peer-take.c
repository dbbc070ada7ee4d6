/*
 * The taking side of a device-to-device copy between daemons (peer-copy.h,
 * docs/multi-gpu.md): CopyTake.
 *
 * The new tensor is made at once (quotas, memory on the connection's stream)
 * and marked TFD_FLIGHT_WRITE; the connection is paused, so what the client
 * sends next is handled after the copy. A thread of its own fetches the
 * offer from the other daemon (peer-link.c: blocking, bounded by [peers]
 * copy_timeout_ms) and hands the answer to the loop through a uv_async. The
 * loop checks it (uids, dtype, shape, size), then the copy runs as a CALL
 * item on the connection's stream, after the work queued before it, and a
 * marker behind it answers the client. Closing the link to the other daemon
 * is what gives its tensor back, so that happens only once the copy is over.
 * Any failure frees the new tensor and answers typed; a connection that
 * closes meanwhile is kept (c->take) until the thread has reported.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "daemon/batch.h"
#include "daemon/conn.h"
#include "daemon/handlers.h"
#include "daemon/log.h"
#include "daemon/peer-copy.h"
#include "daemon/peer-link.h"
#include "daemon/server.h"

typedef struct take_job {
    uv_async_t async; /* first: its close callback frees the job */
    tfd_conn *conn;
    uint64_t seq;
    tfd_tensor made; /* the new tensor's record as created (made.id: its handle) */
    char token[65];
    char source_socket[108];
    uint32_t requester_uid;
    uint64_t deadline_ms;
    tfd_peer_fetched fetched; /* filled by the thread */
    atomic_int cancel;        /* the client left: the thread gives up */
    int client_fd;            /* the client's socket, watched for a hang-up while fetching */
    tf_status copy_status;    /* filled by the CALL item */
    char copy_msg[256];
} take_job;

/* The thread: fetches the offer from the other daemon, then wakes the loop. */
static void *fetch_thread(void *arg) {
    take_job *job = arg;
    tfd_peer_fetch(job->source_socket, job->token, job->requester_uid, job->deadline_ms,
                   &job->cancel, job->client_fd, &job->fetched);
    uv_async_send(&job->async);
    return NULL;
}

/* Gives the new tensor up: out of the table, its memory freed in stream order. */
static void drop_tensor(tfd_conn *c, uint64_t id) {
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, id);
    if (!t) return;
    t->in_flight = 0;
    (void)tfd_tensor_drop(c, t); /* without memory for its free it goes with the connection */
}

/* Ends a take: answers the client (unless it left), lets the other daemon's tensor go, frees the job. */
static void finish(take_job *job, tf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void finish(take_job *job, tf_status st, const char *fmt, ...) {
    tfd_conn *c = job->conn;
    tfd_peer_fetched_close(&job->fetched);
    if (!c->closing) {
        if (st == TF_OK) {
            tfd_tensor *t = tfd_tensor_table_find(&c->tensors, job->made.id);
            if (t) {
                t->in_flight = 0;
                t->written = t->bytes;
            }
            c->srv->counters.peer_copies_in++;
            tfd_conn_reply(c, job->seq, TF_OK, NULL);
        } else {
            char msg[512];
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(msg, sizeof msg, fmt, ap);
            va_end(ap);
            drop_tensor(c, job->made.id);
            c->srv->counters.peer_copies_failed++;
            tfd_log(TFD_LOG_INFO, "client %llu: copy from another daemon failed: %s",
                    (unsigned long long)c->client_id, msg);
            tfd_conn_reply(c, job->seq, st, "%s", msg);
        }
        tfd_conn_resume(c);
    }
    c->take = NULL;
    uv_close((uv_handle_t *)&job->async, (uv_close_cb)free);
    tfd_conn_maybe_free(c);
}

/* Worker, in the connection's stream order: the backend copies the other daemon's bytes in. */
static void copy_on_worker(tfd_stream *s, void *arg) {
    take_job *job = arg;
    tfd_backend *be = &job->conn->srv->backend;
    job->copy_status = be->vt->peer_import_copy(be, tfd_stream_native(s), job->made.data,
                                                job->made.bytes, &job->fetched.mem, job->copy_msg,
                                                sizeof job->copy_msg);
}

/* Loop, once the copy ran: the answer. */
static void on_copied(tfd_item *it) {
    take_job *job = it->done_arg;
    tf_status stream_st = it->outcome.status;
    tfd_item_free(it);
    if (stream_st != TF_OK && job->copy_status == TF_OK)
        finish(job, stream_st, "the copy did not run: %s", tf_strerror(stream_st));
    else if (job->copy_status != TF_OK)
        finish(job, job->copy_status, "%s", job->copy_msg);
    else
        finish(job, TF_OK, NULL);
}

/*
 * Checks what the other daemon answered against what the client asked and
 * may see: the offer's owner is of the client's uid (or [peers]
 * allow_cross_uid), and dtype, shape and size match the new tensor.
 */
static tf_status check_fetched(const take_job *job, char *msg, size_t len) {
    const tfd_conn *c = job->conn;
    const tfd_peer_fetched *f = &job->fetched;
    const tfd_tensor *t = &job->made;
    if (f->owner_uid != (uint32_t)c->uid && !c->srv->opt.peers_allow_cross_uid) {
        snprintf(msg, len,
                 "the tensor belongs to uid %u on the other daemon and this client is uid %u: "
                 "copies between uids are off ([peers] allow_cross_uid)",
                 (unsigned)f->owner_uid, (unsigned)c->uid);
        return TF_ERR_PERMISSION;
    }
    if (f->dtype != t->meta.dtype) {
        snprintf(msg, len, "the offered tensor is %s, the copy asks for %s", tf_dtype_name(f->dtype),
                 tf_dtype_name(t->meta.dtype));
        return TF_ERR_DTYPE;
    }
    int same = f->rank == t->meta.rank && f->bytes == t->bytes;
    for (int i = 0; same && i < f->rank; i++) same = f->shape[i] == t->meta.shape[i];
    if (!same) {
        snprintf(msg, len, "the offered tensor's shape (rank %d, %llu bytes) is not the one the "
                           "copy asks for (rank %d, %zu bytes)",
                 f->rank, (unsigned long long)f->bytes, t->meta.rank, t->bytes);
        return TF_ERR_SHAPE;
    }
    return TF_OK;
}

/* Loop, once the thread has the other daemon's answer: checks it and queues the copy. */
static void on_fetched(uv_async_t *h) {
    take_job *job = (take_job *)h;
    tfd_conn *c = job->conn;
    if (c->closing) {
        finish(job, TF_ERR_DISCONNECTED, "the client left");
        return;
    }
    if (job->fetched.status != TF_OK) {
        finish(job, job->fetched.status, "%s", job->fetched.message);
        return;
    }
    char msg[256];
    tf_status st = check_fetched(job, msg, sizeof msg);
    if (st != TF_OK) {
        finish(job, st, "%s", msg);
        return;
    }
    if (tfd_stream_enqueue_call(c->stream, copy_on_worker, job, on_copied, job) != TF_OK)
        finish(job, TF_ERR_NO_MEMORY, "out of host memory");
}

/* Checks a CopyTake and makes its tensor; the job is filled for the thread. */
static tf_status start(tfd_conn *c, const Tenferro__CopyTake *req, take_job *job, char *msg,
                       size_t len) {
    tfd_server *srv = c->srv;
    if (!srv->backend.vt->peer_import_copy) {
        snprintf(msg, len, "this daemon's backend cannot take memory from another daemon");
        return TF_ERR_UNSUPPORTED;
    }
    if (!req->token || !req->token[0] || strlen(req->token) >= sizeof job->token) {
        snprintf(msg, len, "a copy take needs the offer's token (at most %zu characters)",
                 sizeof job->token - 1);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (!req->source_socket || req->source_socket[0] != '/' ||
        strlen(req->source_socket) >= sizeof job->source_socket) {
        snprintf(msg, len, "a copy take needs the source daemon's socket as an absolute path");
        return TF_ERR_INVALID_ARGUMENT;
    }
    /* Both clients on this daemon: nothing to fetch from another one. */
    struct stat own, source;
    if (stat(srv->opt.socket_path, &own) == 0 && stat(req->source_socket, &source) == 0 &&
        own.st_dev == source.st_dev && own.st_ino == source.st_ino) {
        snprintf(msg, len, "both clients are connected to this daemon: a copy between daemons needs "
                           "two (copy within one daemon with an operation)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    tfd_tensor *rec = &job->made;
    tf_status st = tfd_tensor_record_new(c, req->tensor, req->dtype, req->n_shape, req->shape, rec,
                                         msg, len);
    if (st != TF_OK) return st;
    rec->in_flight = TFD_FLIGHT_WRITE;
    if ((st = tfd_tensor_create(c, rec, msg, len)) != TF_OK) return st;
    snprintf(job->token, sizeof job->token, "%s", req->token);
    snprintf(job->source_socket, sizeof job->source_socket, "%s", req->source_socket);
    job->conn = c;
    job->requester_uid = (uint32_t)c->uid;
    job->deadline_ms = tfd_now_ms() + srv->opt.peers_copy_timeout_ms;
    return TF_OK;
}

void tfd_handle_copy_take(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t seq = frame->seq;
    char msg[256];
    take_job *job = calloc(1, sizeof *job);
    tf_status st = job ? start(c, frame->copy_take, job, msg, sizeof msg) : TF_ERR_NO_MEMORY;
    tf__frame_free(frame);
    if (st != TF_OK) {
        free(job);
        tfd_conn_reply(c, seq, st, "%s", st == TF_ERR_NO_MEMORY && !job ? "out of host memory" : msg);
        return;
    }
    job->seq = seq;
    uv_os_fd_t client_fd;
    job->client_fd = uv_fileno((uv_handle_t *)&c->pipe, &client_fd) == 0 ? client_fd : -1;
    job->fetched.sock = -1;
    job->fetched.mem.fd = -1;
    if (uv_async_init(c->srv->loop, &job->async, on_fetched) != 0) {
        drop_tensor(c, job->made.id);
        free(job);
        tfd_conn_reply(c, seq, TF_ERR_NO_MEMORY, "cannot set up the copy");
        return;
    }
    c->take = job;
    tfd_conn_pause(c);
    pthread_attr_t attr;
    pthread_t thread;
    int started = pthread_attr_init(&attr) == 0;
    if (started) {
        started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&thread, &attr, fetch_thread, job) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started) {
        /* No thread: the take ends here, through the loop like any other. */
        job->fetched.status = TF_ERR_NO_MEMORY;
        snprintf(job->fetched.message, sizeof job->fetched.message,
                 "cannot start a thread for the copy");
        uv_async_send(&job->async);
    }
}

void tfd_peer_take_cancel(tfd_conn *c) {
    if (c->take) atomic_store(&c->take->cancel, 1);
}
