/*
 * The taking side of a device-to-device copy between daemons (peer-take.h,
 * docs/multi-gpu.md): CopyTake.
 *
 * The new tensor is made at once (quotas, memory on the connection's stream)
 * and marked TFD_FLIGHT_WRITE; the connection is paused, so what the client
 * sends next is handled after the copy. A thread of its own fetches the
 * offer from the other daemon (peer-link.c: non-blocking, bounded by [peers]
 * copy_timeout_ms) and hands the answer to the loop through a uv_async. The
 * loop checks it (uids, dtype, shape, size), then the copy runs as a CALL
 * item on the connection's stream, after the work queued before it, and a
 * marker behind it answers the client. Closing the link to the other daemon
 * is what gives its tensor back, so that happens only once the copy is over.
 * Any failure frees the new tensor and answers typed; a connection that
 * closes meanwhile is kept (c->take) until the thread has reported.
 *
 * The daemon connects only where it can name a daemon itself: the take's
 * source_socket must be a tenferrod socket of this daemon's own runtime
 * directory (resolve_source), checked on the string alone before any system
 * call sees it, so a client cannot use the daemon to probe other paths.
 * Takes in progress are bounded per uid ([limits] max_takes_per_uid).
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/daemon-socket.h"
#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/peer-link.h"
#include "daemon/peer-take.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"

typedef struct take_job {
    uv_async_t async; /* first: its close callback frees the job */
    tfd_conn *conn;
    uint64_t seq;
    tfd_tensor made; /* the new tensor's record as created (made.id: its handle) */
    char token[65];
    char source_socket[108]; /* resolved in this daemon's runtime directory (resolve_source) */
    char source_name[64];    /* its file name, all the client's errors show of it */
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
    tfd_peer_fetch(job->source_socket, job->source_name, job->token, job->requester_uid,
                   job->deadline_ms, &job->cancel, job->client_fd, &job->fetched);
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

/*
 * Writes the absolute, lexically normal form of `path` into out: empty and
 * "." components dropped, repeated slashes collapsed, no trailing slash
 * ("/" alone for the root). A relative path is taken from the working
 * directory. -1 for a ".." component (no lexical answer is safe there) or
 * a result that does not fit. Looks at no file.
 */
static int normal_path(const char *path, char *out, size_t cap) {
    char cwd[PATH_MAX] = "";
    if (path[0] != '/' && !getcwd(cwd, sizeof cwd)) return -1;
    size_t n = 0;
    for (int part = 0; part < 2; part++) {
        const char *p = part == 0 ? cwd : path;
        while (*p) {
            while (*p == '/') p++;
            const size_t len = strcspn(p, "/");
            if (len == 0 || (len == 1 && p[0] == '.')) {
                p += len;
                continue;
            }
            if (len == 2 && p[0] == '.' && p[1] == '.') return -1;
            if (n + 1 + len + 1 > cap) return -1;
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
            p += len;
        }
    }
    if (n == 0) {
        if (cap < 2) return -1;
        out[n++] = '/';
    }
    out[n] = '\0';
    return 0;
}

/* The part of a normal path before its last component ("/" for one at the root), in place. */
static void cut_last(char *path) {
    char *slash = strrchr(path, '/');
    if (slash == path)
        path[1] = '\0';
    else if (slash)
        *slash = '\0';
}

/*
 * Resolves a take's source_socket by the one rule a take obeys: a tenferrod
 * socket of this daemon's runtime directory, the directory of its own
 * socket. The client names it either as a path in that directory (compared
 * as strings, in normal form, with the directory as configured or as
 * resolved) whose file name is `tenferrod-<name>.sock`, or as a device
 * ("cuda:1", "1", "cpu", resolved as tf_connect_device resolves it, but in
 * this directory). The path the daemon connects to is built from its own
 * directory and the checked file name, so no system call ever sees a string
 * the client chose. Writes that path and the file name; TF_OK, or
 * TF_ERR_INVALID_ARGUMENT with msg, the same refusal for every path.
 */
static tf_status resolve_source(const tfd_server *srv, const char *given, char *path,
                                size_t path_len, char *name, size_t name_len, char *msg,
                                size_t len) {
    char own[PATH_MAX], real[PATH_MAX] = "", asked[PATH_MAX] = "";
    int own_ok = normal_path(srv->opt.socket_path, own, sizeof own) == 0;
    if (own_ok) {
        cut_last(own);
    } else {
        /* A socket configured through "..": its directory as the file system resolves it. */
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", srv->opt.socket_path);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir] = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        char *r = realpath(dir, NULL);
        own_ok = r && strlen(r) < sizeof own;
        if (own_ok) memcpy(own, r, strlen(r) + 1);
        free(r);
    }
    if (own_ok) {
        /* This daemon's own directory resolved, for a client that reached it through a link. */
        char *r = realpath(own, NULL);
        if (r && strlen(r) < sizeof real) memcpy(real, r, strlen(r) + 1);
        free(r);
    }
    int ok = own_ok && given && given[0];
    if (ok && tf__device_socket_name(given, name, name_len) == 0) {
        /* A device: its daemon's socket in this directory. */
    } else if (ok && given[0] == '/' && normal_path(given, asked, sizeof asked) == 0) {
        const char *file = strrchr(asked, '/') + 1;
        ok = tf__daemon_socket_name_valid(file) && strlen(file) < name_len;
        if (ok) {
            memcpy(name, file, strlen(file) + 1);
            cut_last(asked);
            ok = strcmp(asked, own) == 0 || (real[0] && strcmp(asked, real) == 0);
        }
    } else {
        ok = 0;
    }
    if (ok) {
        const int n = snprintf(path, path_len, "%s%s%s", own, strcmp(own, "/") ? "/" : "", name);
        if (n > 0 && (size_t)n < path_len) return TF_OK;
    }
    snprintf(msg, len,
             "a copy takes only from a tenferrod socket of this daemon's runtime directory: "
             "source_socket must be %.108s/tenferrod-NAME.sock (NAME of letters, digits and "
             ":_.-, not starting with a dot) or a device name (cuda:N, N or cpu)",
             own_ok ? own : "its directory");
    return TF_ERR_INVALID_ARGUMENT;
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
    tf_status st = resolve_source(srv, req->source_socket, job->source_socket,
                                  sizeof job->source_socket, job->source_name,
                                  sizeof job->source_name, msg, len);
    if (st != TF_OK) return st;
    /* A take holds a thread and a connection until it ends: bounded per uid, before any connect. */
    if ((st = tfd_limits_admit_take(c, msg, len)) != TF_OK) return st;
    /* Both clients on this daemon: nothing to fetch from another one. */
    struct stat own, source;
    if (stat(srv->opt.socket_path, &own) == 0 && stat(job->source_socket, &source) == 0 &&
        own.st_dev == source.st_dev && own.st_ino == source.st_ino) {
        snprintf(msg, len, "both clients are connected to this daemon: a copy between daemons needs "
                           "two (copy within one daemon with an operation)");
        return TF_ERR_INVALID_ARGUMENT;
    }
    tfd_tensor *rec = &job->made;
    st = tfd_tensor_record_new(c, req->tensor, req->dtype, req->n_shape, req->shape, rec,
                                         msg, len);
    if (st != TF_OK) return st;
    rec->in_flight = TFD_FLIGHT_WRITE;
    if ((st = tfd_tensor_create(c, rec, msg, len)) != TF_OK) return st;
    snprintf(job->token, sizeof job->token, "%s", req->token);
    job->conn = c;
    job->requester_uid = (uint32_t)c->uid;
    job->deadline_ms = tfd_now_ms() + srv->opt.peers_copy_timeout_ms;
    return TF_OK;
}

void tfd_handle_copy_take(tfd_conn *c, Tenferro__Frame *frame) {
    const uint64_t seq = frame->seq;
    char msg[512];
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
