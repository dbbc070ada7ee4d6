/* The taking daemon's blocking connection to an offering daemon (peer-link.h). */
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
#include "daemon/peer-link.h"
#include "daemon/server.h"

/* Replies of the offering daemon are small: anything larger is not one. */
#define MAX_REPLY_BYTES ((uint32_t)1 << 20)

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
 * Waits until sock is readable (or writable), the deadline passed, or the
 * fetch was cancelled or its client hung up (looked at every 100 ms); 0 when
 * ready. A client that only shut its write side (half-close) still waits for
 * the answer: only a full hang-up (POLLHUP) ends the fetch.
 */
static int wait_ready(int sock, short events, uint64_t deadline_ms, tfd_peer_fetched *out) {
    for (;;) {
        if (out->cancel && atomic_load(out->cancel))
            return fail(out, TF_ERR_DISCONNECTED, "the copy was given up: its client left");
        uint64_t now = tfd_now_ms();
        if (now >= deadline_ms)
            return fail(out, TF_ERR_PEER,
                        "the other daemon did not answer in time ([peers] copy_timeout_ms)");
        struct pollfd p[2] = {{.fd = sock, .events = events}, {.fd = out->watch_fd}};
        uint64_t left = deadline_ms - now;
        int n = poll(p, out->watch_fd >= 0 ? 2 : 1, left > 100 ? 100 : (int)left);
        if (n > 0 && out->watch_fd >= 0 && (p[1].revents & (POLLHUP | POLLERR | POLLNVAL)))
            return fail(out, TF_ERR_DISCONNECTED, "the copy was given up: its client left");
        if (n > 0 && p[0].revents) return 0;
        if (n < 0 && errno != EINTR) return fail(out, TF_ERR_IO, "poll: %s", strerror(errno));
    }
}

/* Sends one frame whole. */
static int send_frame(int sock, Tenferro__Frame *frame, uint64_t deadline_ms, tfd_peer_fetched *out) {
    uint8_t *buf;
    size_t len;
    if (tf__frame_encode(frame, MAX_REPLY_BYTES, &buf, &len) != TF_OK)
        return fail(out, TF_ERR_INTERNAL, "cannot encode a request to the other daemon");
    size_t sent = 0;
    while (sent < len) {
        if (wait_ready(sock, POLLOUT, deadline_ms, out) != 0) break;
        ssize_t n = send(sock, buf + sent, len - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            fail(out, TF_ERR_PEER, "the other daemon closed the connection: %s", strerror(errno));
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
static int read_exact(int sock, uint8_t *dst, size_t len, int *fd, uint64_t deadline_ms,
                      tfd_peer_fetched *out) {
    size_t got = 0;
    while (got < len) {
        if (wait_ready(sock, POLLIN, deadline_ms, out) != 0) return -1;
        struct iovec iov = {.iov_base = dst + got, .iov_len = len - got};
        union {
            char buf[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(sock, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n == 0) return fail(out, TF_ERR_PEER, "the other daemon closed the connection");
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return fail(out, TF_ERR_PEER, "reading from the other daemon: %s", strerror(errno));
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

/* Reads one frame answering `seq` (a last word, seq 0, ends the fetch with its reason). */
static Tenferro__Frame *recv_frame(int sock, uint64_t seq, int *fd, uint64_t deadline_ms,
                                   tfd_peer_fetched *out) {
    uint8_t head[TF__FRAME_HEADER_BYTES];
    if (read_exact(sock, head, sizeof head, fd, deadline_ms, out) != 0) return NULL;
    uint32_t len = tf__frame_peek_length(head);
    if (len > MAX_REPLY_BYTES) {
        fail(out, TF_ERR_PEER, "the other daemon sent a frame of %u bytes", len);
        return NULL;
    }
    uint8_t *body = malloc(len ? len : 1);
    if (!body) {
        fail(out, TF_ERR_NO_MEMORY, "out of host memory");
        return NULL;
    }
    Tenferro__Frame *f = NULL;
    if (read_exact(sock, body, len, fd, deadline_ms, out) == 0) {
        f = tf__frame_decode(body, len);
        if (!f) fail(out, TF_ERR_PEER, "the other daemon sent a frame that does not decode");
    }
    free(body);
    if (f && f->seq != seq) {
        if (f->seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT && f->result)
            fail(out, f->result->status ? (tf_status)f->result->status : TF_ERR_PEER,
                 "the other daemon closed the connection: %s",
                 f->result->message ? f->result->message : "");
        else
            fail(out, TF_ERR_PEER, "the other daemon answered request %llu, not %llu",
                 (unsigned long long)f->seq, (unsigned long long)seq);
        tf__frame_free(f);
        return NULL;
    }
    return f;
}

/* Connects and checks that the listener is a daemon of this host's service uid. */
static int connect_peer(const char *socket_path, tfd_peer_fetched *out) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (!socket_path[0] || socket_path[0] != '/' || strlen(socket_path) >= sizeof addr.sun_path)
        return fail(out, TF_ERR_INVALID_ARGUMENT,
                    "the source daemon's socket \"%.200s\" is not an absolute socket path",
                    socket_path);
    memcpy(addr.sun_path, socket_path, strlen(socket_path) + 1);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return fail(out, TF_ERR_IO, "socket: %s", strerror(errno));
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) != 0) {
        int e = errno;
        close(sock);
        return fail(out, TF_ERR_PEER, "cannot connect to the source daemon at %.200s: %s",
                    socket_path, strerror(e));
    }
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        close(sock);
        return fail(out, TF_ERR_IO, "SO_PEERCRED: %s", strerror(errno));
    }
    if (cred.uid != geteuid() && cred.uid != 0) {
        close(sock);
        return fail(out, TF_ERR_PERMISSION,
                    "%.200s is served by uid %u, not by a tenferrod of this host (uid %u or root): "
                    "refused",
                    socket_path, (unsigned)cred.uid, (unsigned)geteuid());
    }
    out->sock = sock;
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

void tfd_peer_fetch(const char *socket_path, const char *token, uint32_t requester_uid,
                    uint64_t deadline_ms, const atomic_int *cancel, int client_fd,
                    tfd_peer_fetched *out) {
    memset(out, 0, sizeof *out);
    out->sock = -1;
    out->mem.fd = -1;
    out->cancel = cancel;
    out->watch_fd = client_fd;
    if (connect_peer(socket_path, out) != 0) return;
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.client_name = "tenferrod (peer copy)";
    hello.peer_daemon = 1;
    req.seq = 1;
    req.body_case = TENFERRO__FRAME__BODY_HELLO;
    req.hello = &hello;
    int page_fd = -1;
    Tenferro__Frame *reply = NULL;
    if (send_frame(out->sock, &req, deadline_ms, out) == 0)
        reply = recv_frame(out->sock, 1, &page_fd, deadline_ms, out);
    if (page_fd >= 0) close(page_fd); /* the completion page: a peer has no use for it */
    if (reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT && reply->result)
        fail(out, reply->result->status ? (tf_status)reply->result->status : TF_ERR_PEER,
             "the source daemon refused this daemon: %s",
             reply->result->message ? reply->result->message : "");
    else if (reply && reply->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY)
        fail(out, TF_ERR_PEER, "the source daemon answered Hello with something else");
    int ok = reply && out->status == TF_OK;
    tf__frame_free(reply);
    reply = NULL;
    if (ok) {
        Tenferro__PeerFetch fetch = TENFERRO__PEER_FETCH__INIT;
        fetch.token = (char *)token;
        fetch.requester_uid = requester_uid;
        req.seq = 2;
        req.body_case = TENFERRO__FRAME__BODY_PEER_FETCH;
        req.peer_fetch = &fetch;
        if (send_frame(out->sock, &req, deadline_ms, out) == 0)
            reply = recv_frame(out->sock, 2, &out->mem.fd, deadline_ms, out);
        if (reply && reply->body_case != TENFERRO__FRAME__BODY_PEER_FETCH_REPLY)
            fail(out, TF_ERR_PEER, "the source daemon answered PeerFetch with something else");
        else if (reply && (!reply->peer_fetch_reply->result ||
                           reply->peer_fetch_reply->result->status != TF_OK))
            fail(out,
                 reply->peer_fetch_reply->result ? (tf_status)reply->peer_fetch_reply->result->status
                                                 : TF_ERR_PEER,
                 "the source daemon: %s",
                 reply->peer_fetch_reply->result && reply->peer_fetch_reply->result->message
                     ? reply->peer_fetch_reply->result->message
                     : "no reason given");
        else if (reply)
            take_reply(reply->peer_fetch_reply, out);
        if (reply && out->status == TF_OK && out->mem.fd < 0)
            fail(out, TF_ERR_PEER, "the source daemon's answer carries no memory descriptor");
        tf__frame_free(reply);
    }
    if (out->status != TF_OK) tfd_peer_fetched_close(out);
}

void tfd_peer_fetched_close(tfd_peer_fetched *f) {
    if (f->mem.fd >= 0) close(f->mem.fd);
    if (f->sock >= 0) close(f->sock);
    f->mem.fd = -1;
    f->sock = -1;
}
