/*
 * Connection plumbing: accepting a client, reading and framing its bytes,
 * queueing replies (and the few that carry a file descriptor), and the close
 * path that reclaims everything the client owned. A malformed frame ends this
 * connection only; nothing here can take the daemon or another client down.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/admission.h"
#include "daemon/batch.h"
#include "daemon/conn.h"
#include "daemon/handlers.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/server.h"

#define READ_CHUNK (64 * 1024)

/* One queued reply: the write request and the encoded bytes in one allocation. */
typedef struct out_frame {
    uv_write_t req;
    size_t len;
    uint8_t *bytes;
} out_frame;

/* A reply held back so it leaves in order behind one that carries a file descriptor. */
typedef struct tfd_held_frame {
    struct tfd_held_frame *next;
    uint8_t *bytes;
    size_t len;
    int fd; /* sent as SCM_RIGHTS with the first byte; -1 for none */
} tfd_held_frame;

static void flush_held(tfd_conn *c);

static void on_write_done(uv_write_t *req, int status) {
    /* A failed write shows up as a read error and closes the connection. */
    out_frame *f = (out_frame *)req;
    uv_stream_t *stream = req->handle;
    tfd_conn *c = (tfd_conn *)stream;
    free(f->bytes);
    free(f);
    /* libuv's queue has drained: a held reply with a descriptor may go now. */
    if (status == 0 && c->held_head && uv_stream_get_write_queue_size(stream) == 0) flush_held(c);
}

/*
 * Writes an encoded frame (owning `bytes`; the first `done` bytes already
 * went out). Most replies fit in the socket buffer, so they are written at
 * once with uv_try_write (which refuses while earlier writes are queued, so
 * order is kept); only what does not fit goes through a queued uv_write
 * request. This saves a request, a loop iteration and an epoll_ctl per reply.
 */
static void write_bytes(tfd_conn *c, uint8_t *bytes, size_t len, size_t done) {
    uv_buf_t buf;
    if (done == 0) {
        buf = uv_buf_init((char *)bytes, (unsigned)len);
        int written = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
        if (written > 0 && (size_t)written == len) {
            free(bytes);
            c->srv->counters.frames_sent++;
            return;
        }
        /* A failed attempt is left to uv_write, which reports it the usual way. */
        done = written > 0 ? (size_t)written : 0;
    }
    out_frame *f = calloc(1, sizeof *f);
    if (!f) {
        free(bytes);
        /* The reply is lost (or half of it is out): the client would wait for it forever. */
        tfd_conn_close(c);
        return;
    }
    f->bytes = bytes;
    f->len = len;
    buf = uv_buf_init((char *)bytes + done, (unsigned)(len - done));
    if (uv_write(&f->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write_done) != 0) {
        free(f->bytes);
        free(f);
        tfd_conn_close(c);
        return;
    }
    c->srv->counters.frames_sent++;
}

/* Encodes a reply; NULL (and the connection closing) when it cannot be encoded. */
static uint8_t *encode(tfd_conn *c, Tenferro__Frame *frame, size_t *len) {
    uint8_t *bytes;
    /* Replies may carry a whole chunk plus headers: allow a little above the client's maximum. */
    tf_status st = tf__frame_encode(frame, c->srv->opt.max_frame_bytes + 4096, &bytes, len);
    if (st != TF_OK) {
        tfd_log(TFD_LOG_ERROR, "client %llu: cannot encode a reply (%s)",
                (unsigned long long)c->client_id, tf_status_name(st));
        tfd_conn_close(c);
        return NULL;
    }
    return bytes;
}

void tfd_conn_send(tfd_conn *c, Tenferro__Frame *frame) {
    if (c->pipe_closed || uv_is_closing((uv_handle_t *)&c->pipe)) return;
    size_t len;
    uint8_t *bytes = encode(c, frame, &len);
    if (!bytes) return;
    if (!c->held_head) {
        write_bytes(c, bytes, len, 0);
        return;
    }
    tfd_held_frame *h = calloc(1, sizeof *h);
    if (!h) {
        free(bytes);
        tfd_conn_close(c); /* a lost reply would desynchronise the client: end the connection */
        return;
    }
    h->bytes = bytes;
    h->len = len;
    h->fd = -1;
    c->held_tail->next = h;
    c->held_tail = h;
}

/*
 * One sendmsg of an encoded frame with fd attached to its first byte. Returns
 * the bytes sent (the fd went with them), 0 when the socket stayed full
 * through a few brief polls, or -1 on an error that ends the connection.
 */
static ssize_t send_with_fd(int sock, const uint8_t *bytes, size_t len, int fd) {
    struct iovec iov = {.iov_base = (void *)bytes, .iov_len = len};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int))];
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    for (int polls = 0;;) {
        ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (polls++ == 3) return 0;
        struct pollfd p = {.fd = sock, .events = POLLOUT};
        (void)poll(&p, 1, 1);
    }
}

static void on_held_retry(uv_timer_t *t) { flush_held(t->data); }

/* Retries the held replies shortly, without blocking the loop, while the peer's socket is full. */
static void retry_held_later(tfd_conn *c) {
    if (!c->held_timer) {
        c->held_timer = malloc(sizeof *c->held_timer);
        if (!c->held_timer) {
            tfd_conn_close(c);
            return;
        }
        uv_timer_init(c->srv->loop, c->held_timer);
        c->held_timer->data = c;
    }
    uv_timer_start(c->held_timer, on_held_retry, 2, 0);
}

/*
 * Sends the held replies in order. A reply with a descriptor goes out with
 * sendmsg only while libuv's queue is empty (libuv cannot attach one), so the
 * descriptor arrives with that reply's first byte; what sendmsg could not take
 * is queued through libuv. Plain replies behind it are handed to libuv, which
 * keeps their order. Resumes from on_write_done or the retry timer.
 */
static void flush_held(tfd_conn *c) {
    while (c->held_head) {
        /* A closing connection handed what was held to libuv (empty_held). */
        if (c->closing || c->pipe_closed || uv_is_closing((uv_handle_t *)&c->pipe)) return;
        tfd_held_frame *h = c->held_head;
        if (h->fd >= 0) {
            if (uv_stream_get_write_queue_size((uv_stream_t *)&c->pipe) != 0) return;
            uv_os_fd_t sock;
            ssize_t n = uv_fileno((uv_handle_t *)&c->pipe, &sock) == 0
                            ? send_with_fd(sock, h->bytes, h->len, h->fd)
                            : -1;
            if (n == 0) {
                retry_held_later(c);
                return;
            }
            if (n < 0) {
                tfd_log(TFD_LOG_DEBUG, "client %llu: sending a descriptor failed: %s",
                        (unsigned long long)c->client_id, strerror(errno));
                tfd_conn_close(c);
                return;
            }
            /* The peer holds its own reference now; the daemon keeps only its mapping. */
            close(h->fd);
            h->fd = -1;
            c->held_head = h->next;
            if (!c->held_head) c->held_tail = NULL;
            if ((size_t)n == h->len) {
                free(h->bytes);
                c->srv->counters.frames_sent++;
            } else {
                write_bytes(c, h->bytes, h->len, (size_t)n);
            }
            free(h);
            continue;
        }
        c->held_head = h->next;
        if (!c->held_head) c->held_tail = NULL;
        write_bytes(c, h->bytes, h->len, 0);
        free(h);
    }
}

void tfd_conn_send_with_fd(tfd_conn *c, Tenferro__Frame *frame, int fd) {
    if (c->pipe_closed || uv_is_closing((uv_handle_t *)&c->pipe)) {
        close(fd);
        return;
    }
    size_t len;
    uint8_t *bytes = encode(c, frame, &len);
    tfd_held_frame *h = bytes ? calloc(1, sizeof *h) : NULL;
    if (!h) {
        free(bytes);
        close(fd);
        tfd_conn_close(c);
        return;
    }
    h->bytes = bytes;
    h->len = len;
    h->fd = fd;
    if (c->held_tail)
        c->held_tail->next = h;
    else
        c->held_head = h;
    c->held_tail = h;
    flush_held(c);
}

/*
 * Empties the held replies, closing their descriptors: nothing on a closing
 * connection will use them. With `send` the replies go out in order through
 * libuv, whose shutdown waits for them, so a last word (the Result with seq 0
 * saying why the connection ends) queued behind a reply with a descriptor
 * still reaches the client; without it (the pipe is gone) they are dropped.
 */
static void empty_held(tfd_conn *c, int send) {
    while (c->held_head) {
        tfd_held_frame *h = c->held_head;
        c->held_head = h->next;
        if (h->fd >= 0) close(h->fd);
        if (send)
            write_bytes(c, h->bytes, h->len, 0);
        else
            free(h->bytes);
        free(h);
    }
    c->held_tail = NULL;
}

void tfd_conn_reply(tfd_conn *c, uint64_t seq, tf_status status, const char *fmt, ...) {
    char message[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, sizeof message, fmt, ap);
        va_end(ap);
    }
    Tenferro__Result result = TENFERRO__RESULT__INIT;
    result.status = (uint32_t)status;
    result.message = message;
    tfd_conn_send_result(c, seq, &result, -1);
}

void tfd_conn_send_result(tfd_conn *c, uint64_t seq, Tenferro__Result *result, int fd) {
    Tenferro__Frame frame = TENFERRO__FRAME__INIT;
    frame.seq = seq;
    frame.body_case = TENFERRO__FRAME__BODY_RESULT;
    frame.result = result;
    if (fd >= 0)
        tfd_conn_send_with_fd(c, &frame, fd);
    else
        tfd_conn_send(c, &frame);
}

void tfd_conn_fail(tfd_conn *c, const char *fmt, ...) {
    char message[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    c->srv->counters.protocol_errors++;
    tfd_log(TFD_LOG_WARN, "client %llu (pid %d, %s): protocol error: %s; closing this connection",
            (unsigned long long)c->client_id, (int)c->pid, c->name, message);
    tfd_conn_reply(c, 0, TF_ERR_PROTOCOL, "%s; the connection is closed", message);
    tfd_conn_close(c);
}

/*
 * The daemon ran out of host memory for this connection's input: its
 * requests cannot be read, so it is told why (TF_ERR_NO_MEMORY, not a
 * protocol error: the client did nothing wrong) and closed.
 */
static void fail_out_of_memory(tfd_conn *c, const char *what) {
    tfd_log(TFD_LOG_ERROR, "client %llu (pid %d, %s): out of memory %s; closing this connection",
            (unsigned long long)c->client_id, (int)c->pid, c->name, what);
    tfd_conn_reply(c, 0, TF_ERR_NO_MEMORY, "tenferrod is out of memory %s; the connection is closed",
                   what);
    tfd_conn_close(c);
}

/* Table walker of the final free: one tensor left behind by the close, freed at once. */
static void free_left(tfd_tensor *rec, void *arg) {
    tfd_conn *c = arg;
    tfd_stream_free_now(c->stream, rec->data, rec->bytes);
}

/* Unlinks and frees the connection once nothing can refer to it any more. */
void tfd_conn_maybe_free(tfd_conn *c) {
    if (!c->pipe_closed || !c->stream_drained || c->transfers_in_flight || c->buffer_creations)
        return;
    tfd_server *srv = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->n_conns--;
    srv->counters.connections_closed++;
    tfd_notify_clients(srv->n_conns);
    /* Tensors the close found no memory to queue a free for go now that the stream is idle. */
    tfd_tensor_table_each(&c->tensors, free_left, c);
    srv->counters.tensors_freed += c->tensors.count;
    tfd_stream_destroy(c->stream);
    tfd_tensor_table_destroy(&c->tensors);
    tfd_conn_buffers_release(c, 1);
    tfd_conn_transfers_forget(c);
    empty_held(c, 0);
    free(c->rbuf);
    tfd_log(TFD_LOG_DEBUG, "client %llu gone", (unsigned long long)c->client_id);
    free(c);
    if (srv->stopping && srv->n_conns == 0) tfd_server_begin_shutdown(srv);
    tfd_server_drain_check(srv);
}

static void on_pipe_closed(uv_handle_t *h) {
    tfd_conn *c = (tfd_conn *)h;
    c->pipe_closed = 1;
    tfd_conn_maybe_free(c);
}

static void on_shutdown(uv_shutdown_t *req, int status) {
    (void)status;
    tfd_conn *c = req->data;
    free(req);
    uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
}

/* A closing connection's stream has run what it queued: a session it held is reclaimed. */
static void reclaim_session(tfd_conn *c) {
    if (c->session_id) {
        c->srv->counters.sessions_reclaimed++;
        tfd_log(TFD_LOG_INFO, "client %llu went away holding session %llu: reservation released",
                (unsigned long long)c->client_id, (unsigned long long)c->session_id);
        c->session_id = 0;
    }
    tfd_admission_release(c);
}

/* The last item on a closing connection's stream: everything it queued has run. */
static void on_final_marker(tfd_item *it) {
    tfd_conn *c = it->done_arg;
    tfd_item_free(it);
    c->stream_drained = 1;
    reclaim_session(c);
    tfd_conn_maybe_free(c);
}

/* Ids of up to 64 tensors, picked in one walk over the table (which cannot change during it). */
typedef struct tensor_pick {
    uint64_t ids[64];
    int n;
} tensor_pick;

static void pick_tensor(tfd_tensor *rec, void *arg) {
    tensor_pick *p = arg;
    if (p->n < (int)(sizeof p->ids / sizeof *p->ids)) p->ids[p->n++] = rec->id;
}

/*
 * Frees a closing connection's tensors on its stream, behind everything it
 * queued. Those it finds no memory to queue a free for stay in the table,
 * and tfd_conn_maybe_free frees them once the stream is idle.
 */
static void free_tensors(tfd_conn *c) {
    for (;;) {
        tensor_pick p = {.n = 0};
        tfd_tensor_table_each(&c->tensors, pick_tensor, &p);
        if (p.n == 0) break;
        for (int i = 0; i < p.n; i++) {
            if (tfd_free_tensor_storage(c, tfd_tensor_table_find(&c->tensors, p.ids[i])) != TF_OK)
                return;
            tfd_tensor_table_remove(&c->tensors, p.ids[i], NULL);
            c->srv->counters.tensors_freed++;
        }
    }
    tfd_tensor_table_destroy(&c->tensors);
}

void tfd_conn_close(tfd_conn *c) {
    if (c->closing) return;
    c->closing = 1;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (!c->pipe_closed && !uv_is_closing((uv_handle_t *)&c->pipe)) empty_held(c, 1);
    if (c->held_timer) {
        uv_close((uv_handle_t *)c->held_timer, (uv_close_cb)free);
        c->held_timer = NULL;
    }
    /* Nobody will read the results: skip the work still queued, keep the frees. */
    if (c->stream) tfd_stream_cancel(c->stream);
    /* Buffers no transfer uses go now; the others when their transfer completes. */
    tfd_conn_buffers_release(c, 0);
    tfd_admission_cancel(c);
    c->scoped_active = 0;
    if (c->stream) {
        free_tensors(c);
        if (tfd_conn_enqueue_marker(c, on_final_marker, c) != TF_OK) c->stream_drained = 1;
    } else {
        c->stream_drained = 1;
    }
    /* No final marker (no stream, or no memory for one): the session goes now. */
    if (c->stream_drained) reclaim_session(c);
    uv_shutdown_t *req = malloc(sizeof *req);
    if (req) req->data = c;
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) != 0) {
        free(req);
        uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
    }
}

/* Makes room for `need` more bytes after the unread ones, compacting or growing the buffer. */
static int reserve(tfd_conn *c, size_t need) {
    if (c->rstart > 0 && c->rstart + c->rlen + need > c->rcap) {
        memmove(c->rbuf, c->rbuf + c->rstart, c->rlen);
        c->rstart = 0;
    }
    if (c->rlen + need <= c->rcap) return 0;
    size_t cap = c->rcap ? c->rcap : READ_CHUNK;
    while (cap < c->rlen + need) cap *= 2;
    uint8_t *p = realloc(c->rbuf, cap);
    if (!p) return -1;
    c->rbuf = p;
    c->rcap = cap;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    tfd_conn *c = (tfd_conn *)h;
    if (reserve(c, READ_CHUNK) != 0) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    size_t end = c->rstart + c->rlen;
    *buf = uv_buf_init((char *)c->rbuf + end, (unsigned)(c->rcap - end));
}

/* Splits the unread bytes into frames and dispatches each complete one. */
static void parse_frames(tfd_conn *c) {
    /* Before the handshake a peer is unknown: it may not make the daemon reserve a big buffer. */
    uint64_t max = c->hello_done ? c->srv->opt.max_frame_bytes : TF__MIN_MAX_FRAME_BYTES;
    while (!c->closing && !c->paused && c->rlen >= TF__FRAME_HEADER_BYTES) {
        uint32_t len = tf__frame_peek_length(c->rbuf + c->rstart);
        if (len > max) {
            tfd_conn_fail(c, "frame length %u exceeds the maximum of %llu bytes", len,
                          (unsigned long long)max);
            return;
        }
        size_t total = TF__FRAME_HEADER_BYTES + (size_t)len;
        if (c->rlen < total) {
            if (reserve(c, total - c->rlen) != 0) fail_out_of_memory(c, "reading a frame");
            return;
        }
        Tenferro__Frame *frame;
        tf_status st = tf__frame_decode_status(c->rbuf + c->rstart + TF__FRAME_HEADER_BYTES, len,
                                               &frame);
        c->rstart += total;
        c->rlen -= total;
        if (st == TF_ERR_NO_MEMORY) {
            fail_out_of_memory(c, "decoding a frame");
            return;
        }
        if (!frame) {
            tfd_conn_fail(c, "a frame body of %u bytes does not decode as tenferro.Frame", len);
            return;
        }
        c->srv->counters.frames_received++;
        if (frame->seq > c->dispatched_seq) c->dispatched_seq = frame->seq;
        tfd_dispatch(c, frame);
    }
    if (c->rlen == 0) c->rstart = 0;
}

/*
 * Handles what the connection has read and not handled yet. Transfers whose
 * completion is published are finished first: bytes the client sent after it
 * read DONE are among them, so they find the buffer and the tensor free.
 * Frames handled in one go all see the state of its start, wherever a copy
 * has got to meanwhile. Then a mailbox request may have waited for them.
 */
static void serve_input(tfd_conn *c) {
    tfd_conn_reap_transfers(c);
    parse_frames(c);
    (void)tfd_conn_poll_mailbox(c);
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf) {
    (void)buf;
    tfd_conn *c = (tfd_conn *)stream;
    if (c->closing) return;
    if (nread > 0) {
        c->rlen += (size_t)nread;
        tfd_busy_poll_touch(&c->srv->busy_poll);
        serve_input(c);
        return;
    }
    if (nread == 0) return;
    if (nread == UV_EOF && c->rlen > 0) {
        size_t want = c->rlen >= TF__FRAME_HEADER_BYTES
                          ? TF__FRAME_HEADER_BYTES + tf__frame_peek_length(c->rbuf + c->rstart)
                          : TF__FRAME_HEADER_BYTES;
        tfd_conn_fail(c, "truncated frame: the connection ended after %zu of %zu bytes", c->rlen, want);
        return;
    }
    if (nread == UV_ENOBUFS) {
        fail_out_of_memory(c, "reading a frame");
        return;
    }
    tfd_conn_close(c);
}

void tfd_conn_pause(tfd_conn *c) {
    if (c->paused || c->closing) return;
    c->paused = 1;
    uv_read_stop((uv_stream_t *)&c->pipe);
}

void tfd_conn_resume(tfd_conn *c) {
    if (!c->paused || c->closing) return;
    c->paused = 0;
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) != 0) {
        tfd_conn_close(c);
        return;
    }
    serve_input(c);
}

/*
 * A client the daemon has no memory for is still accepted, into this one
 * spare handle, and closed at once (it sees the connection end): libuv
 * watches the listener again only after uv_accept, so a client left
 * unaccepted would stop every later connection too. One that arrives while
 * the spare is still closing is taken when it is free.
 */
static uv_pipe_t spare_pipe;
static int spare_state; /* 0 free, 1 closing, 2 closing and a connection waits */

static void on_spare_closed(uv_handle_t *h) {
    tfd_server *srv = h->data;
    int waiting = spare_state == 2;
    spare_state = 0;
    if (waiting && !srv->stopping) tfd_conn_accept(srv);
}

/* Accepts the waiting connection into the spare handle and closes it. */
static void refuse_unaccepted(tfd_server *srv) {
    if (spare_state) {
        spare_state = 2;
        return;
    }
    tfd_log(TFD_LOG_ERROR, "out of memory accepting a client: its connection is closed");
    uv_pipe_init(srv->loop, &spare_pipe, 0);
    spare_pipe.data = srv;
    spare_state = 1;
    (void)uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&spare_pipe);
    uv_close((uv_handle_t *)&spare_pipe, on_spare_closed);
}

void tfd_conn_accept(tfd_server *srv) {
    tfd_conn *c = calloc(1, sizeof *c);
    if (!c) {
        refuse_unaccepted(srv);
        return;
    }
    c->srv = srv;
    uv_pipe_init(srv->loop, &c->pipe, 0);
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->pipe) != 0) {
        uv_close((uv_handle_t *)&c->pipe, (uv_close_cb)free);
        return;
    }
    c->client_id = ++srv->next_client_id;
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->pid = cred.pid;
        c->uid = cred.uid;
        c->gid = cred.gid;
    }
    snprintf(c->name, sizeof c->name, "?");
    tfd_tensor_table_init(&c->tensors);
    tfd_pinned_table_init(&c->buffers);
    c->next = srv->conns;
    if (srv->conns) srv->conns->prev = c;
    srv->conns = c;
    srv->n_conns++;
    srv->counters.connections_accepted++;
    tfd_notify_clients(srv->n_conns);
    tfd_log(TFD_LOG_DEBUG, "client %llu connected (pid %d uid %u)", (unsigned long long)c->client_id,
            (int)c->pid, (unsigned)c->uid);
    uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
}

/* Runs a marker's done callback with the connection it names. */
tf_status tfd_conn_enqueue_marker(tfd_conn *c, tfd_item_done_fn done, void *arg) {
    tfd_item *it = tfd_item_new(TFD_ITEM_MARKER);
    if (!it) return TF_ERR_NO_MEMORY;
    it->done = done;
    it->done_arg = arg;
    tfd_stream_enqueue(c->stream, it, it, 1);
    return TF_OK;
}
