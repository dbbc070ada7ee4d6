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
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/spin.h"
#include "daemon/admission.h"
#include "daemon/connection.h"
#include "daemon/handle-buffer.h"
#include "daemon/handle-prepare.h"
#include "daemon/handle-transfer.h"
#include "daemon/item-pool.h"
#include "daemon/limits.h"
#include "daemon/log.h"
#include "daemon/mailbox.h"
#include "daemon/notify.h"
#include "daemon/peer-offer.h"
#include "daemon/peer-take.h"
#include "daemon/requests.h"
#include "daemon/server.h"
#include "daemon/tensor-table.h"

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

/* Frees an encoded reply: its bytes no longer count as queued for the client (memory-limits.c). */
static void free_reply(tfd_conn *c, uint8_t *bytes, size_t len) {
    free(bytes);
    tfd_memory_reply_release(c, len);
}

static void on_write_done(uv_write_t *req, int status) {
    out_frame *f = (out_frame *)req;
    uv_stream_t *stream = req->handle;
    tfd_conn *c = (tfd_conn *)stream;
    free_reply(c, f->bytes, f->len);
    free(f);
    /*
     * A failed write (the peer went away) ends the connection, dropping what
     * is still queued: a connection whose input waits for its replies reads
     * nothing, so no read error would.
     */
    if (status < 0 && status != UV_ECANCELED) {
        tfd_conn_abort(c);
        return;
    }
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
        if (written > 0) c->mem.reply_out += (uint64_t)written;
        if (written > 0 && (size_t)written == len) {
            free_reply(c, bytes, len);
            c->srv->counters.frames_sent++;
            return;
        }
        /* A failed attempt is left to uv_write, which reports it the usual way. */
        done = written > 0 ? (size_t)written : 0;
    }
    out_frame *f = calloc(1, sizeof *f);
    if (!f) {
        free_reply(c, bytes, len);
        /* The reply is lost (or half of it is out): the client would wait for it forever. */
        tfd_conn_close(c);
        return;
    }
    f->bytes = bytes;
    f->len = len;
    buf = uv_buf_init((char *)bytes + done, (unsigned)(len - done));
    if (uv_write(&f->req, (uv_stream_t *)&c->pipe, &buf, 1, on_write_done) != 0) {
        free_reply(c, f->bytes, f->len);
        free(f);
        tfd_conn_close(c);
        return;
    }
    /* What the stall watch measures progress against: libuv's queue shrinks as it writes. */
    c->mem.reply_out += len - done;
    c->srv->counters.frames_sent++;
}

/* Encodes a reply; NULL (and the connection closing) when it cannot be encoded. */
static uint8_t *encode(tfd_conn *c, Tenferro__Frame *frame, size_t *len) {
    uint8_t *bytes;
    /* Every reply fits the maximum the client was told (reads are capped below it, TF__FRAME_HEADROOM). */
    tf_status st = tf__frame_encode(frame, c->srv->opt.max_frame_bytes, &bytes, len);
    if (st != TF_OK) {
        tfd_log(TFD_LOG_ERROR, "client %llu: cannot encode a reply (%s)",
                (unsigned long long)c->client_id, tf_status_name(st));
        tfd_conn_close(c);
        return NULL;
    }
    /* Queued for the client from now until its bytes are freed. */
    tfd_memory_reply_add(c, *len);
    return bytes;
}

void tfd_conn_send(tfd_conn *c, Tenferro__Frame *frame) {
    if (c->pipe_closed || uv_is_closing((uv_handle_t *)&c->pipe)) return;
    if (tfd_ring_reply(c, frame)) return;
    size_t len;
    uint8_t *bytes = encode(c, frame, &len);
    if (!bytes) return;
    if (!c->held_head) {
        write_bytes(c, bytes, len, 0);
        return;
    }
    tfd_held_frame *h = calloc(1, sizeof *h);
    if (!h) {
        free_reply(c, bytes, len);
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
            c->mem.reply_out += (uint64_t)n;
            c->held_head = h->next;
            if (!c->held_head) c->held_tail = NULL;
            if ((size_t)n == h->len) {
                free_reply(c, h->bytes, h->len);
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
        if (bytes) free_reply(c, bytes, len);
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
            free_reply(c, h->bytes, h->len);
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
void tfd_conn_fail_no_memory(tfd_conn *c, const char *what) {
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
    if (!c->pipe_closed || !c->stream_drained || c->transfers_in_flight || c->buffer_creations ||
        c->decodes || c->later_fn || c->take)
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
    tfd_conn_prepared_release(c); /* the stream is drained: no run of them is left */
    tfd_stream_destroy(c->stream);
    tfd_tensor_table_destroy(&c->tensors);
    tfd_conn_buffers_release(c, 1);
    tfd_conn_transfers_forget(c);
    empty_held(c, 0);
    tfd_memory_detach(c);
    if (c->later) uv_close((uv_handle_t *)c->later, (uv_close_cb)free);
    free(c->rbuf);
    tfd_log(TFD_LOG_DEBUG, "client %llu gone", (unsigned long long)c->client_id);
    free(c);
    tfd_heap_trim_soon(&srv->heap_trim);
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
    /* Cancelled (UV_ECANCELED) by tfd_conn_abort's close of a peer that never read its replies. */
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
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

/* The handshake is over (or the connection is): its deadline goes. */
static void stop_hello_timer(tfd_conn *c) {
    if (!c->hello_timer) return;
    uv_close((uv_handle_t *)c->hello_timer, (uv_close_cb)free);
    c->hello_timer = NULL;
}

/* Worker-side table walker: frees one tensor's device memory. */
static void free_on_worker(tfd_tensor *rec, void *arg) { tfd_stream_free_memory(arg, rec->data, rec->bytes); }

/* On the worker, after everything the connection queued: frees every tensor of the table it owns. */
static void free_table_on_worker(tfd_stream *s, void *arg) {
    tfd_tensor_table *t = arg;
    tfd_tensor_table_each(t, free_on_worker, s);
    tfd_tensor_table_destroy(t);
    free(t);
}

/*
 * Hands the connection's whole tensor table to its stream, which frees every
 * tensor after the work queued before: one item, however many tensors, so a
 * client leaving with a million tensors does not hold the loop. Without
 * memory for that item the tensors stay in the table, and
 * tfd_conn_maybe_free frees them once the stream is idle.
 */
static void free_tensors(tfd_conn *c) {
    tfd_tensor_table *moved = malloc(sizeof *moved);
    tfd_item *it = moved ? tfd_item_new(TFD_ITEM_CALL) : NULL;
    if (!it) {
        free(moved);
        return;
    }
    c->srv->counters.tensors_freed += c->tensors.count;
    *moved = c->tensors;
    tfd_tensor_table_init(&c->tensors);
    it->u.call.fn = free_table_on_worker;
    it->u.call.arg = moved;
    tfd_stream_enqueue(c->stream, it, it, 1);
}

/*
 * A closing connection's stream: every tensor freed after the work queued,
 * then the final marker; without memory for that marker the stream counts as
 * drained now.
 */
static void drain_stream(tfd_conn *c) {
    free_tensors(c);
    if (tfd_conn_enqueue_marker(c, on_final_marker, c) != TF_OK) c->stream_drained = 1;
}

void tfd_conn_lend_over(tfd_conn *c) {
    if (c->lent || !c->teardown_deferred) return;
    c->teardown_deferred = 0;
    drain_stream(c);
    if (c->stream_drained) {
        reclaim_session(c);
        tfd_conn_maybe_free(c);
    }
}

void tfd_conn_close(tfd_conn *c) {
    if (c->closing) return;
    c->closing = 1;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (!c->pipe_closed && !uv_is_closing((uv_handle_t *)&c->pipe)) empty_held(c, !c->mem.drop_output);
    if (c->held_timer) {
        uv_close((uv_handle_t *)c->held_timer, (uv_close_cb)free);
        c->held_timer = NULL;
    }
    stop_hello_timer(c);
    /* Nobody will read the results: skip the work still queued, keep the frees. */
    if (c->stream) tfd_stream_cancel(c->stream);
    /* Buffers no transfer uses go now; the others when their transfer completes. */
    tfd_conn_buffers_release(c, 0);
    tfd_admission_cancel(c);
    c->scoped_active = 0;
    tfd_peer_offers_conn_closing(c);
    tfd_peer_take_cancel(c);
    if (c->stream && c->lent) {
        c->teardown_deferred = 1; /* another daemon copies one of its tensors: they stay */
    } else if (c->stream) {
        drain_stream(c);
    } else {
        c->stream_drained = 1;
    }
    /* No final marker (no stream, or no memory for one): the session goes now. */
    if (c->stream_drained) reclaim_session(c);
    /* A shutdown lets the queued replies go out first; an abort drops them. */
    uv_shutdown_t *req = c->mem.drop_output ? NULL : malloc(sizeof *req);
    if (req) req->data = c;
    if (!req || uv_shutdown(req, (uv_stream_t *)&c->pipe, on_shutdown) != 0) {
        free(req);
        uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
    }
    tfd_memory_closing(c);
}

void tfd_conn_abort(tfd_conn *c) {
    c->mem.drop_output = 1;
    if (!c->closing) {
        tfd_conn_close(c);
        return;
    }
    /* Already closing, its shutdown waiting for replies the peer does not read: cancel them. */
    if (!c->pipe_closed && !uv_is_closing((uv_handle_t *)&c->pipe))
        uv_close((uv_handle_t *)&c->pipe, on_pipe_closed);
}

/* A receive buffer above this stays only while a frame needs it; then it shrinks back. */
#define KEEP_RBUF_BYTES (4 * READ_CHUNK)
/* Frames of at least this many bytes are decoded on libuv's thread pool, off the loop. */
#define OFFLOOP_DECODE_BYTES ((uint32_t)256 << 10)

/*
 * Makes room for `need` more bytes after the unread ones, compacting or
 * growing the buffer within the uid's receive budget (limits.c). Returns 0,
 * or -1 with the typed reason in *st and msg.
 */
static int reserve(tfd_conn *c, size_t need, tf_status *st, char *msg, size_t len) {
    if (c->rstart > 0 && c->rstart + c->rlen + need > c->rcap) {
        memmove(c->rbuf, c->rbuf + c->rstart, c->rlen);
        c->rstart = 0;
    }
    if (c->rlen + need <= c->rcap) return 0;
    size_t cap = c->rcap ? c->rcap : READ_CHUNK;
    while (cap < c->rlen + need) cap *= 2;
    *st = tfd_limits_receive_grow(c, cap, msg, len);
    if (*st != TF_OK) return -1;
    uint8_t *p = realloc(c->rbuf, cap);
    if (!p) {
        *st = TF_ERR_NO_MEMORY;
        snprintf(msg, len, "out of memory reading a frame of %zu bytes", c->rlen + need);
        return -1;
    }
    c->rbuf = p;
    c->rcap = cap;
    return 0;
}

/* Gives back a receive buffer that grew for a large frame once nothing is left in it. */
static void shrink_if_idle(tfd_conn *c) {
    if (c->rlen != 0 || c->rcap <= KEEP_RBUF_BYTES) return;
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = 0;
    c->rstart = 0;
}

/* Ends the connection for input the daemon cannot take, saying why in a typed last word. */
static void refuse_input(tfd_conn *c, tf_status st, const char *msg) {
    if (st == TF_ERR_QUOTA) {
        c->srv->counters.quota_refusals++;
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d uid %u, %s): %s; closing this connection",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, c->name, msg);
        tfd_conn_reply(c, 0, st, "%s; the connection is closed", msg);
        tfd_conn_close(c);
        return;
    }
    tfd_conn_fail_no_memory(c, "reading a frame");
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
    (void)suggested;
    tfd_conn *c = (tfd_conn *)h;
    tf_status st;
    char msg[256];
    if (reserve(c, READ_CHUNK, &st, msg, sizeof msg) != 0) {
        *buf = uv_buf_init(NULL, 0); /* on_read sees UV_ENOBUFS */
        return;
    }
    size_t end = c->rstart + c->rlen;
    *buf = uv_buf_init((char *)c->rbuf + end, (unsigned)(c->rcap - end));
}

void tfd_conn_dispatch_frame(tfd_conn *c, Tenferro__Frame *frame) {
    /* Kept, and handled first once the client's replies leave room (a Download reserves its own). */
    if (tfd_memory_hold_frame(c, frame)) return;
    tfd_busy_poll_request(&c->srv->busy_poll);
    /* A doorbell only wakes: the ring entry it rings for carries an earlier number. */
    if (frame->seq > c->dispatched_seq && frame->body_case != TENFERRO__FRAME__BODY_MAILBOX_DOORBELL)
        c->dispatched_seq = frame->seq;
    int had_hello = c->hello_done;
    tfd_dispatch(c, frame);
    if (!had_hello && c->hello_done) stop_hello_timer(c);
}

/* Ends the connection over a frame that did not decode, saying why (memory, budget, or malformed). */
static void decode_failed(tfd_conn *c, tf_status st, uint32_t len) {
    if (st == TF_ERR_NO_MEMORY)
        tfd_conn_fail_no_memory(c, "decoding a frame");
    else if (st == TF_ERR_QUOTA)
        tfd_conn_fail(c, "a frame of %u bytes decodes into more than %llu bytes of messages: send "
                         "at most %d operations per Submit",
                      len, (unsigned long long)TF__DECODE_BUDGET(len), TF__MAX_OPS_PER_SUBMIT);
    else
        tfd_conn_fail(c, "a frame body of %u bytes does not decode as tenferro.Frame", len);
}

/* A large frame being decoded on the thread pool; the connection is paused meanwhile. */
typedef struct offloop_decode {
    uv_work_t work;
    tfd_conn *conn;
    const uint8_t *body; /* inside conn->rbuf, which nothing moves while the connection is paused */
    uint32_t len;
    Tenferro__Frame *frame;
    tf_status status;
} offloop_decode;

static void decode_work(uv_work_t *w) {
    offloop_decode *d = (offloop_decode *)w;
    d->status = tf__frame_decode_status(d->body, d->len, TF__DECODE_BUDGET(d->len), &d->frame);
}

static void serve_input(tfd_conn *c);

/* Loop thread: the decoded frame is dispatched in order, then the rest of the input. */
static void decode_done(uv_work_t *w, int status) {
    (void)status;
    offloop_decode *d = (offloop_decode *)w;
    tfd_conn *c = d->conn;
    Tenferro__Frame *frame = d->frame;
    uint32_t len = d->len;
    tf_status st = d->status;
    free(d);
    c->decodes--;
    tfd_memory_decode_end(c);
    if (c->closing) {
        tf__frame_free(frame);
        tfd_conn_maybe_free(c);
        return;
    }
    c->rstart += TF__FRAME_HEADER_BYTES + (size_t)len;
    c->rlen -= TF__FRAME_HEADER_BYTES + (size_t)len;
    if (st != TF_OK) {
        decode_failed(c, st, len);
        return;
    }
    c->srv->counters.frames_received++;
    tfd_conn_dispatch_frame(c, frame);
    tfd_conn_resume(c);
}

/*
 * Starts decoding the frame at the head of the input off the loop, or makes
 * the input wait for room among the uid's decodes (memory-limits.c); 0 when
 * it could do neither.
 */
static int decode_off_loop(tfd_conn *c, uint32_t len) {
    if (!tfd_memory_decode_start(c, len)) return 1;
    offloop_decode *d = calloc(1, sizeof *d);
    if (!d) {
        tfd_memory_decode_end(c);
        return 0;
    }
    d->conn = c;
    d->body = c->rbuf + c->rstart + TF__FRAME_HEADER_BYTES;
    d->len = len;
    if (uv_queue_work(c->srv->loop, &d->work, decode_work, decode_done) != 0) {
        free(d);
        tfd_memory_decode_end(c);
        return 0;
    }
    c->decodes++;
    tfd_conn_pause(c);
    return 1;
}

/* Continuation of input handling that yielded the loop to other connections. */
static void continue_input(tfd_conn *c, void *arg) {
    (void)arg;
    if (c->closing) return;
    tfd_conn_resume(c);
}

/*
 * Splits the unread bytes into frames and dispatches each complete one. The
 * limit on a frame's length is the pre-Hello one until the Hello has been
 * handled, also for frames read in the same go. After loop_slice_us the
 * rest waits for a later turn, so other clients are served in between.
 */
static void parse_frames(tfd_conn *c) {
    uint64_t start = tf__now_ns(), slice = c->srv->opt.loop_slice_us * 1000u;
    unsigned handled = 0;
    while (!c->closing && !c->paused && c->rlen >= TF__FRAME_HEADER_BYTES) {
        /* Before the handshake a peer is unknown: it may not make the daemon reserve a big buffer. */
        uint64_t max = c->hello_done ? c->srv->opt.max_frame_bytes : TF__MIN_MAX_FRAME_BYTES;
        uint32_t len = tf__frame_peek_length(c->rbuf + c->rstart);
        if (len > max) {
            tfd_conn_fail(c, "frame length %u exceeds the maximum of %llu bytes", len,
                          (unsigned long long)max);
            return;
        }
        size_t total = TF__FRAME_HEADER_BYTES + (size_t)len;
        if (c->rlen < total) {
            tf_status st;
            char msg[320];
            if (reserve(c, total - c->rlen, &st, msg, sizeof msg) != 0) refuse_input(c, st, msg);
            return;
        }
        /* Replies the client leaves unread hold the daemon's memory: no frame more until they drain. */
        if (!tfd_memory_input_may_go(c)) return;
        if (slice && handled > 0 && (handled & 15) == 0 && tf__now_ns() - start > slice) {
            if (tfd_conn_continue_later(c, continue_input, NULL) == 0) return;
        }
        if (len >= OFFLOOP_DECODE_BYTES && decode_off_loop(c, len)) return;
        Tenferro__Frame *frame;
        tf_status st = tf__frame_decode_status(c->rbuf + c->rstart + TF__FRAME_HEADER_BYTES, len,
                                               TF__DECODE_BUDGET(len), &frame);
        c->rstart += total;
        c->rlen -= total;
        if (st != TF_OK) {
            decode_failed(c, st, len);
            return;
        }
        c->srv->counters.frames_received++;
    tfd_conn_dispatch_frame(c, frame);
        handled++;
    }
    if (c->rlen == 0) {
        c->rstart = 0;
        if (!c->paused) shrink_if_idle(c);
    }
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
    (void)tfd_conn_poll_ring(c);
    if (c->peer_eof && !c->paused && !c->closing) tfd_conn_eof_progress(c);
}

/* The end-of-input marker completed: everything sent before it has run and been answered. */
static void on_eof_marker(tfd_item *it) {
    tfd_conn *c = it->done_arg;
    tfd_item_free(it);
    c->eof_marker = 0;
    tfd_conn_eof_progress(c);
}

void tfd_conn_eof_progress(tfd_conn *c) {
    if (!c->peer_eof || c->closing || c->eof_marker) return;
    /* Requests still to run: a pause (BufferCreate, a decode, a sliced batch), a queued opener. */
    if (c->paused || c->queued || c->rlen >= TF__FRAME_HEADER_BYTES) return;
    /* Every reply is out once no item's callback is still to run (they send the late ones). */
    if (!c->stream || tfd_stream_awaiting(c->stream) == 0) {
        tfd_conn_close(c);
        return;
    }
    /* Look again once what is on the stream now has called back. */
    if (tfd_conn_enqueue_marker(c, on_eof_marker, c) != TF_OK) {
        tfd_conn_close(c);
        return;
    }
    c->eof_marker = 1;
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
    if (nread == UV_EOF && c->rlen > 0 && !c->paused) {
        size_t want = c->rlen >= TF__FRAME_HEADER_BYTES
                          ? TF__FRAME_HEADER_BYTES + tf__frame_peek_length(c->rbuf + c->rstart)
                          : TF__FRAME_HEADER_BYTES;
        if (c->rlen < want) {
            tfd_conn_fail(c, "truncated frame: the connection ended after %zu of %zu bytes",
                          c->rlen, want);
            return;
        }
    }
    if (nread == UV_EOF) {
        /* Half-close: the client sent its last request; it still reads the answers. */
        c->peer_eof = 1;
        uv_read_stop(stream);
        if (!c->paused) tfd_conn_eof_progress(c);
        return;
    }
    if (nread == UV_ENOBUFS) {
        tf_status st = TF_ERR_NO_MEMORY;
        char msg[320] = "out of memory reading a frame";
        if (reserve(c, READ_CHUNK, &st, msg, sizeof msg) == 0) return;
        refuse_input(c, st, msg);
        return;
    }
    tfd_conn_close(c);
}

void tfd_conn_pause(tfd_conn *c) {
    if (c->closing) return;
    if (c->paused++ == 0 && !c->peer_eof) uv_read_stop((uv_stream_t *)&c->pipe);
}

void tfd_conn_resume(tfd_conn *c) {
    if (!c->paused || c->closing) return;
    if (--c->paused > 0) return;
    if (!c->peer_eof && uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) != 0) {
        tfd_conn_close(c);
        return;
    }
    serve_input(c);
}

static void on_later(uv_idle_t *h) {
    tfd_conn *c = h->data;
    uv_idle_stop(h);
    void (*fn)(tfd_conn *, void *) = c->later_fn;
    void *arg = c->later_arg;
    c->later_fn = NULL;
    c->later_arg = NULL;
    fn(c, arg);
    if (c->closing) tfd_conn_maybe_free(c);
}

int tfd_conn_continue_later(tfd_conn *c, void (*fn)(tfd_conn *c, void *arg), void *arg) {
    if (c->later_fn) return -1; /* one continuation at a time: the connection is paused for it */
    if (!c->later) {
        c->later = malloc(sizeof *c->later);
        if (!c->later) return -1;
        uv_idle_init(c->srv->loop, c->later);
        c->later->data = c;
    }
    c->later_fn = fn;
    c->later_arg = arg;
    c->srv->counters.loop_yields++;
    tfd_conn_pause(c);
    uv_idle_start(c->later, on_later);
    return 0;
}

/*
 * Bytes the client sent that the daemon has not yet looked at: in the socket
 * or read but not parsed. A loop held up for longer than the handshake
 * deadline (a long free, a slow machine) sees the deadline and the Hello
 * that came in time together, the timer first.
 */
static int hello_unread(tfd_conn *c) {
    int pending = 0;
    uv_os_fd_t fd;
    if (c->rlen > 0) return 1;
    return uv_fileno((const uv_handle_t *)&c->pipe, &fd) == 0 && ioctl(fd, FIONREAD, &pending) == 0 &&
           pending > 0;
}

static void on_hello_deadline(uv_timer_t *t) {
    tfd_conn *c = t->data;
    if (c->hello_done || c->closing) return;
    /* One more period, once: a client that trickles its Hello still ends at the second deadline. */
    if (!c->hello_grace && hello_unread(c)) {
        c->hello_grace = 1;
        uv_timer_start(t, on_hello_deadline, c->srv->opt.hello_timeout_ms, 0);
        return;
    }
    tfd_log(TFD_LOG_INFO, "client %llu (pid %d uid %u) sent no Hello within %llu ms: closed",
            (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid,
            (unsigned long long)c->srv->opt.hello_timeout_ms);
    c->srv->counters.handshake_timeouts++;
    tfd_conn_reply(c, 0, TF_ERR_TIMEOUT, "no Hello within %llu ms; the connection is closed",
                   (unsigned long long)c->srv->opt.hello_timeout_ms);
    tfd_conn_close(c);
}

/* Arms the handshake deadline ([limits] hello_timeout_ms; 0 = none). */
static void start_hello_timer(tfd_conn *c) {
    uint64_t ms = c->srv->opt.hello_timeout_ms;
    if (ms == 0) return;
    c->hello_timer = malloc(sizeof *c->hello_timer);
    if (!c->hello_timer) return;
    uv_timer_init(c->srv->loop, c->hello_timer);
    c->hello_timer->data = c;
    uv_timer_start(c->hello_timer, on_hello_deadline, ms, 0);
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
    c->page_fd = -1;
    uv_pipe_init(srv->loop, &c->pipe, 0);
    if (uv_accept((uv_stream_t *)&srv->listener, (uv_stream_t *)&c->pipe) != 0) {
        uv_close((uv_handle_t *)&c->pipe, (uv_close_cb)free);
        return;
    }
    c->client_id = ++srv->next_client_id;
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    int known = 0;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0 &&
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        c->pid = cred.pid;
        c->uid = cred.uid;
        c->gid = cred.gid;
        known = 1;
    }
    snprintf(c->name, sizeof c->name, "?");
    tfd_tensor_table_init(&c->tensors);
    tfd_pinned_table_init(&c->buffers);
    tf__id_table_init(&c->prepared, sizeof(tfd_prepared_ref));
    c->next = srv->conns;
    if (srv->conns) srv->conns->prev = c;
    srv->conns = c;
    srv->n_conns++;
    srv->counters.connections_accepted++;
    tfd_notify_clients(srv->n_conns);
    tfd_log(TFD_LOG_DEBUG, "client %llu connected (pid %d uid %u)", (unsigned long long)c->client_id,
            (int)c->pid, (unsigned)c->uid);
    /* What its replies and decodes hold is counted with its uid's from the first byte on. */
    if (tfd_memory_attach(c) != 0) {
        tfd_conn_fail_no_memory(c, "accepting it");
        return;
    }
    /* The peer is judged now, before it can hold a slot or a buffer: not at its Hello. */
    char msg[256] = "the peer's credentials cannot be read";
    tf_status refusal = known ? tfd_limits_admit_connection(c, msg, sizeof msg) : TF_ERR_PERMISSION;
    if (refusal != TF_OK) {
        srv->counters.connections_refused++;
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d uid %u) refused: %s",
                (unsigned long long)c->client_id, (int)c->pid, (unsigned)c->uid, msg);
        tfd_conn_reply(c, 0, refusal, "%s", msg);
        tfd_conn_close(c);
        return;
    }
    start_hello_timer(c);
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
