/*
 * The taking daemon's connection to an offering daemon (peer-link.h).
 *
 * Nothing here blocks: the socket is non-blocking from its creation, a
 * connect that finds the listener's backlog full (EAGAIN on a Unix socket)
 * is tried again after a short pause, and every wait (connecting, sending,
 * each reply) is a poll bounded by the copy's deadline that also looks at
 * the cancel flag and the client's socket every 100 ms. So no listener, not
 * even one that never accepts, holds the thread past [peers]
 * copy_timeout_ms, a client that leaves or a SIGTERM.
 *
 * Until the other end has answered the Hello as a tenferrod, what went wrong
 * (no such file, a refusal, a socket of another uid, bytes that are not a
 * frame) is told to the client as one error, "no tenferrod answered at
 * NAME", and the details go to the log at debug level: the client learns
 * nothing about the path or what listens there. After that answer the other
 * end is a daemon of this host, and its refusals reach the client.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/frame.h"
#include "daemon/log.h"
#include "daemon/peer-link.h"
#include "daemon/server.h"

/* Replies of the offering daemon are small: anything larger is not one. */
#define MAX_REPLY_BYTES ((uint32_t)1 << 20)
/* The longest pause between two connects to a listener whose backlog is full. */
#define CONNECT_RETRY_MAX_MS 50

/* Records a failure of the fetch (printf-style) and returns -1. */
static int fail(tfd_peer_fetched *out, tf_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(tfd_peer_fetched *out, tf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->message, sizeof out->message, fmt, ap);
    va_end(ap);
    out->status = st;
    return -1;
}

/*
 * Records that no tenferrod answered at the source: the client gets the one
 * generic error, the reason (printf-style) goes to the log at debug level.
 * Returns -1.
 */
static int unreachable(tfd_peer_fetched *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int unreachable(tfd_peer_fetched *out, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    tfd_log(TFD_LOG_DEBUG, "copy take: no tenferrod answered at %s: %s", out->name, why);
    return fail(out, TF_ERR_PEER,
                "no tenferrod answered at %s (a copy takes only from a running daemon of this "
                "daemon's runtime directory)",
                out->name);
}

/*
 * A connection that broke (printf-style reason): the generic error while the
 * other end has not answered as a tenferrod, the reason itself once it has.
 * Returns -1.
 */
static int broken(tfd_peer_fetched *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int broken(tfd_peer_fetched *out, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (!out->answered) return unreachable(out, "%s", why);
    return fail(out, TF_ERR_PEER, "%s", why);
}

/*
 * Waits until sock (ignored when -1) is ready for events: 1 when it is, 0
 * when until_ms came first, -1 when the fetch is over: the deadline passed
 * (TF_ERR_TIMEOUT), it was cancelled or its client hung up
 * (TF_ERR_DISCONNECTED; both looked at every 100 ms). A client that only
 * shut its write side (half-close) still waits for the answer: only a full
 * hang-up (POLLHUP) ends the fetch.
 */
static int wait_for(int sock, short events, uint64_t until_ms, tfd_peer_fetched *out) {
    for (;;) {
        if (out->cancel && atomic_load(out->cancel))
            return fail(out, TF_ERR_DISCONNECTED, "the copy was given up: its client left");
        const uint64_t now = tfd_now_ms();
        if (now >= out->deadline_ms)
            return fail(out, TF_ERR_TIMEOUT,
                        "the other daemon did not answer in time ([peers] copy_timeout_ms)");
        if (now >= until_ms) return 0;
        const uint64_t end = until_ms < out->deadline_ms ? until_ms : out->deadline_ms;
        const uint64_t left = end - now;
        struct pollfd p[2] = {{.fd = sock, .events = events}, {.fd = out->watch_fd}};
        int n = poll(p, 2, left > 100 ? 100 : (int)left);
        if (n > 0 && out->watch_fd >= 0 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
            return fail(out, TF_ERR_DISCONNECTED, "the copy was given up: its client left");
        if (n > 0 && sock >= 0 && p[0].revents) return 1;
        if (n < 0 && errno != EINTR) return fail(out, TF_ERR_IO, "poll: %s", strerror(errno));
    }
}

/* Waits until sock is ready for events: 0, or -1 when the fetch is over (wait_for). */
static int wait_ready(int sock, short events, tfd_peer_fetched *out) {
    return wait_for(sock, events, UINT64_MAX, out) == 1 ? 0 : -1;
}

/* Sends one frame whole. */
static int send_frame(int sock, Tenferro__Frame *frame, tfd_peer_fetched *out) {
    uint8_t *buf;
    size_t len;
    if (tf__frame_encode(frame, MAX_REPLY_BYTES, &buf, &len) != TF_OK)
        return fail(out, TF_ERR_INTERNAL, "cannot encode a request to the other daemon");
    size_t sent = 0;
    while (sent < len) {
        if (wait_ready(sock, POLLOUT, out) != 0) break;
        ssize_t n = send(sock, buf + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            broken(out, "the other daemon closed the connection: %s", strerror(errno));
            break;
        }
    }
    free(buf);
    return sent == len ? 0 : -1;
}

/*
 * Reads exactly len bytes, keeping the first descriptor that rides on them
 * in *fd (later ones are closed).
 */
static int read_exact(int sock, uint8_t *dst, size_t len, int *fd, tfd_peer_fetched *out) {
    size_t got = 0;
    while (got < len) {
        if (wait_ready(sock, POLLIN, out) != 0) return -1;
        struct iovec iov = {.iov_base = dst + got, .iov_len = len - got};
        union {
            char buf[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n == 0) return broken(out, "the other daemon closed the connection");
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return broken(out, "reading from the other daemon: %s", strerror(errno));
        }
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&m); h; h = CMSG_NXTHDR(&m, h)) {
            if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
            size_t count = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; i++) {
                int received;
                memcpy(&received, CMSG_DATA(h) + i * sizeof(int), sizeof received);
                if (*fd < 0)
                    *fd = received;
                else
                    close(received);
            }
        }
        got += (size_t)n;
    }
    return 0;
}

/*
 * Reads one frame answering `seq` (a last word, seq 0, ends the fetch with
 * its reason). A frame that decodes and answers the request, or is a last
 * word, is tenferrod's protocol: from then on the other end's reasons reach
 * the client (out->answered).
 */
static Tenferro__Frame *recv_frame(int sock, uint64_t seq, int *fd, tfd_peer_fetched *out) {
    uint8_t head[TF__FRAME_HEADER_BYTES];
    if (read_exact(sock, head, sizeof head, fd, out) != 0) return NULL;
    uint32_t len = tf__frame_peek_length(head);
    if (len > MAX_REPLY_BYTES) {
        broken(out, "the other daemon sent a frame of %u bytes", len);
        return NULL;
    }
    uint8_t *body = malloc(len ? len : 1);
    if (!body) {
        fail(out, TF_ERR_NO_MEMORY, "out of host memory");
        return NULL;
    }
    Tenferro__Frame *f = NULL;
    if (read_exact(sock, body, len, fd, out) == 0) {
        f = tf__frame_decode(body, len);
        if (!f) broken(out, "the other daemon sent a frame that does not decode");
    }
    free(body);
    if (!f) return NULL;
    const int last_word = f->seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT && f->result;
    if (f->seq == seq || last_word) out->answered = 1;
    if (f->seq != seq) {
        if (last_word)
            fail(out, f->result->status ? (tf_status)f->result->status : TF_ERR_PEER,
                 "the other daemon closed the connection: %s",
                 f->result->message ? f->result->message : "");
        else
            broken(out, "the other daemon answered request %llu, not %llu",
                   (unsigned long long)f->seq, (unsigned long long)seq);
        tf__frame_free(f);
        return NULL;
    }
    return f;
}

/*
 * Connects without ever blocking: a full backlog (EAGAIN) is tried again
 * after a pause growing to CONNECT_RETRY_MAX_MS, a connect in progress is
 * waited for; all within the deadline. Then checks that the listener runs as
 * this daemon's uid or root, as a tenferrod of this host does.
 */
static int connect_peer(const char *socket_path, tfd_peer_fetched *out) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(socket_path) >= sizeof addr.sun_path)
        return fail(out, TF_ERR_INTERNAL, "the source daemon's socket path is too long");
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (sock < 0) return fail(out, TF_ERR_IO, "cannot make a socket: %s", strerror(errno));
    out->sock = sock; /* closed by tfd_peer_fetched_close on any failure */
    uint64_t pause_ms = 1;
    for (;;) {
        if (connect(sock, (struct sockaddr *)&addr, sizeof addr) == 0) break;
        const int e = errno;
        if (e == EISCONN) break;
        if (e == EINTR) continue;
        if (e == EAGAIN) {
            /* The listener's backlog is full: nothing was queued, so try again shortly. */
            if (wait_for(-1, 0, tfd_now_ms() + pause_ms, out) < 0) return -1;
            pause_ms = pause_ms * 2 > CONNECT_RETRY_MAX_MS ? CONNECT_RETRY_MAX_MS : pause_ms * 2;
            continue;
        }
        if (e != EINPROGRESS && e != EALREADY) return unreachable(out, "connect: %s", strerror(e));
        if (wait_ready(sock, POLLOUT, out) != 0) return -1;
        int so_error = 0;
        socklen_t sl = sizeof so_error;
        if (getsockopt(sock, SOL_SOCKET, SO_ERROR, &so_error, &sl) != 0) so_error = errno;
        if (so_error == 0) break;
        return unreachable(out, "connect: %s", strerror(so_error));
    }
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0)
        return unreachable(out, "SO_PEERCRED: %s", strerror(errno));
    if (cred.uid != geteuid() && cred.uid != 0)
        return unreachable(out, "served by uid %u, neither this daemon's (%u) nor root",
                           (unsigned)cred.uid, (unsigned)geteuid());
    return 0;
}

/* Fills out from a successful PeerFetchReply. */
static int take_reply(const Tenferro__PeerFetchReply *r, tfd_peer_fetched *out) {
    if (r->n_shape > TF_MAX_RANK) return fail(out, TF_ERR_PEER, "the offer's rank is out of range");
    if (r->handle.len > sizeof out->mem.handle)
        return fail(out, TF_ERR_PEER, "the offer's memory handle is %zu bytes", r->handle.len);
    out->dtype = (tf_dtype)r->dtype;
    out->rank = (int)r->n_shape;
    for (size_t i = 0; i < r->n_shape; i++) out->shape[i] = r->shape[i];
    out->bytes = r->bytes;
    out->owner_uid = r->owner_uid;
    snprintf(out->device, sizeof out->device, "%s", r->device ? r->device : "");
    snprintf(out->mem.kind, sizeof out->mem.kind, "%s", r->kind ? r->kind : "");
    if (r->handle.len) memcpy(out->mem.handle, r->handle.data, r->handle.len);
    out->mem.handle_len = r->handle.len;
    out->mem.offset = r->offset;
    return 0;
}

/*
 * Says Hello as a peer daemon copying for a client of requester_uid; 0 once
 * the other end answered with a HelloReply.
 */
static int say_hello(uint32_t requester_uid, tfd_peer_fetched *out) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.client_name = "tenferrod (peer copy)";
    hello.peer_daemon = 1;
    hello.asking_uid = requester_uid;
    req.seq = 1;
    req.body_case = TENFERRO__FRAME__BODY_HELLO;
    req.hello = &hello;
    int page_fd = -1;
    Tenferro__Frame *reply = NULL;
    if (send_frame(out->sock, &req, out) == 0) reply = recv_frame(out->sock, 1, &page_fd, out);
    if (page_fd >= 0) close(page_fd); /* a completion page: a peer has no use for it */
    if (reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT && reply->result)
        fail(out, reply->result->status ? (tf_status)reply->result->status : TF_ERR_PEER,
             "the source daemon refused this daemon: %s",
             reply->result->message ? reply->result->message : "");
    else if (reply && reply->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY)
        fail(out, TF_ERR_PEER, "the source daemon answered Hello with something else");
    const int ok = reply && out->status == TF_OK;
    tf__frame_free(reply);
    return ok ? 0 : -1;
}

/* Sends PeerFetch for `token` and fills out from the answer, with the memory's descriptor. */
static void fetch_offer(const char *token, uint32_t requester_uid, tfd_peer_fetched *out) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__PeerFetch fetch = TENFERRO__PEER_FETCH__INIT;
    fetch.token = (char *)token;
    fetch.requester_uid = requester_uid;
    req.seq = 2;
    req.body_case = TENFERRO__FRAME__BODY_PEER_FETCH;
    req.peer_fetch = &fetch;
    Tenferro__Frame *reply = NULL;
    if (send_frame(out->sock, &req, out) == 0) reply = recv_frame(out->sock, 2, &out->mem.fd, out);
    if (!reply) return;
    const Tenferro__PeerFetchReply *r = reply->peer_fetch_reply;
    if (reply->body_case != TENFERRO__FRAME__BODY_PEER_FETCH_REPLY || !r)
        fail(out, TF_ERR_PEER, "the source daemon answered PeerFetch with something else");
    else if (!r->result || r->result->status != TF_OK)
        fail(out, r->result ? (tf_status)r->result->status : TF_ERR_PEER, "the source daemon: %s",
             r->result && r->result->message ? r->result->message : "no reason given");
    else
        take_reply(r, out);
    if (out->status == TF_OK && out->mem.fd < 0)
        fail(out, TF_ERR_PEER, "the source daemon's answer carries no memory descriptor");
    tf__frame_free(reply);
}

void tfd_peer_fetch(const char *socket_path, const char *name, const char *token,
                    uint32_t requester_uid, uint64_t deadline_ms, const atomic_int *cancel,
                    int client_fd, tfd_peer_fetched *out) {
    memset(out, 0, sizeof *out);
    out->sock = -1;
    out->mem.fd = -1;
    out->cancel = cancel;
    out->watch_fd = client_fd;
    out->deadline_ms = deadline_ms;
    out->name = name;
    if (connect_peer(socket_path, out) == 0 && say_hello(requester_uid, out) == 0)
        fetch_offer(token, requester_uid, out);
    if (out->status != TF_OK) tfd_peer_fetched_close(out);
}

void tfd_peer_fetched_close(tfd_peer_fetched *f) {
    if (f->mem.fd >= 0) close(f->mem.fd);
    if (f->sock >= 0) close(f->sock);
    f->mem.fd = -1;
    f->sock = -1;
}
