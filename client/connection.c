/*
 * Connecting, the handshake, and the blocking transport: whole frames out with
 * send(MSG_NOSIGNAL) so a vanished daemon is an error and never a SIGPIPE,
 * whole frames in with their sequence number checked, through a receive
 * buffer so a small reply takes one recvmsg. File descriptors the daemon
 * passes (the completion page with HelloReply, a pinned buffer with the
 * Result of its BufferCreate) arrive as SCM_RIGHTS with the first byte of
 * their frame; they wait in a small queue, tagged with the stream offsets
 * they came with, until that frame claims them. Any transport failure marks
 * the client broken: from then on every call is TF_ERR_DISCONNECTED.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/internal.h"
#include "common/daemon-socket.h"
#include "common/spin.h"

extern char *program_invocation_short_name;

tf_status tf__fail(tf_client *c, tf_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    return status;
}

tf_status tf__ok(tf_client *c) {
    c->last_error[0] = '\0';
    return TF_OK;
}

const char *tf_client_last_error(const tf_client *c) { return c ? c->last_error : "no client"; }
const char *tf_client_device(const tf_client *c) { return c->device; }
uint64_t tf_client_id(const tf_client *c) { return c->client_id; }

/* Marks the connection unusable and reports why. */
static tf_status broken(tf_client *c, const char *why) {
    c->broken = 1;
    return tf__fail(c, TF_ERR_DISCONNECTED, "connection to tenferrod lost: %s", why);
}

static tf_status send_failed(tf_client *c, int err);

/* Writes all of buf, retrying on EINTR and short writes. */
static tf_status write_all(tf_client *c, const uint8_t *buf, size_t len) {
    while (len > 0) {
        ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return send_failed(c, errno);
        if (n == 0) return broken(c, "short write");
        buf += n;
        len -= (size_t)n;
    }
    return TF_OK;
}

/* Smallest receive buffer: room for any ordinary reply and a few more arriving back to back. */
#define RECV_MIN_BYTES ((size_t)64 << 10)

/*
 * Non-blocking receive attempts before a blocking one (each about 0.3 µs, so
 * at most ~60 µs of polling): a reply that arrives within that time costs the
 * client no sleep and wake-up. Measured on the CPU build machine, this brings
 * an empty scoped session from ~1.4x to ~1.1x a raw socket round trip.
 */
#define RECV_SPIN_TRIES 200

/* Descriptors one recvmsg can carry: one frame's, with room to notice more (MSG_CTRUNC). */
#define RECV_FDS_PER_CALL 4

/* Keeps the descriptors of one recvmsg, tagged with the stream offsets of its bytes. */
static tf_status keep_fds(tf_client *c, struct msghdr *m, uint64_t from, uint64_t to) {
    tf_status st = TF_OK;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *p = CMSG_DATA(cm);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, p + i * sizeof fd, sizeof fd);
            if (c->n_fds == TF__MAX_RECEIVED_FDS) {
                close(fd);
                st = broken(c, "the daemon sent more file descriptors than frames to claim them");
                continue;
            }
            c->fds[c->n_fds++] = (tf__received_fd){fd, from, to};
        }
    }
    if (st == TF_OK && (m->msg_flags & MSG_CTRUNC))
        st = broken(c, "file descriptors from the daemon were truncated");
    return st;
}

/* One recvmsg into the receive buffer's free space; returns its result like recv. */
static ssize_t receive(tf_client *c, int flags, tf_status *st) {
    uint8_t *end = c->rbuf + c->rstart + c->rlen;
    struct iovec iov = {.iov_base = end, .iov_len = c->rcap - c->rstart - c->rlen};
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * RECV_FDS_PER_CALL)];
    } control;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
    ssize_t n = recvmsg(c->fd, &m, flags | MSG_CMSG_CLOEXEC);
    *st = TF_OK;
    if (n > 0) {
        if (m.msg_controllen > 0) *st = keep_fds(c, &m, c->received, c->received + (uint64_t)n);
        c->received += (uint64_t)n;
    }
    return n;
}

/*
 * Makes `need` unused bytes available at c->rbuf + c->rstart. Each recvmsg
 * takes as much as the socket holds, so a small reply costs one call for
 * header and body together; bytes of the next reply stay buffered for the next call.
 */
static tf_status fill(tf_client *c, size_t need) {
    if (c->rlen >= need) return TF_OK;
    if (c->rstart + need > c->rcap) {
        if (c->rlen > 0) memmove(c->rbuf, c->rbuf + c->rstart, c->rlen);
        c->rstart = 0;
        if (need > c->rcap) {
            size_t cap = need < RECV_MIN_BYTES ? RECV_MIN_BYTES : need;
            uint8_t *p = realloc(c->rbuf, cap);
            if (!p) return broken(c, "out of memory for a reply");
            c->rbuf = p;
            c->rcap = cap;
        }
    }
    int spins = c->wait_sleeps ? 0 : RECV_SPIN_TRIES;
    while (c->rlen < need) {
        tf_status fd_st;
        /* Poll briefly before sleeping: a reply that is microseconds away costs no wake-up. */
        /* A synchronize polls for as long as tf__wait_spin allowed (its reply is GPU work away). */
        const int poll = spins > 0 || (c->spin_until_ns && tf__now_ns() < c->spin_until_ns);
        ssize_t n = receive(c, poll ? MSG_DONTWAIT : 0, &fd_st);
        if (fd_st != TF_OK) return fd_st;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll) {
            if (spins > 0) spins--;
            else tf__cpu_relax();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return broken(c, "the daemon closed the connection");
        if (n < 0) return broken(c, strerror(errno));
        c->rlen += (size_t)n;
    }
    return TF_OK;
}

tf_status tf__send(tf_client *c, Tenferro__Frame *frame) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    frame->seq = ++c->next_seq;
    uint8_t *buf;
    size_t len;
    tf_status st = tf__frame_encode(frame, c->max_frame_bytes, &buf, &len);
    if (st == TF_ERR_PROTOCOL)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "request is larger than the daemon's %llu-byte frame maximum",
                        (unsigned long long)c->max_frame_bytes);
    if (st != TF_OK) return tf__fail(c, st, "out of memory encoding a request");
    if (frame->body_case != TENFERRO__FRAME__BODY_MAILBOX_DOORBELL) c->last_socket_seq = frame->seq;
    st = write_all(c, buf, len);
    free(buf);
    return st;
}

/* Closes received descriptors that arrived wholly before stream offset `at`: nobody claimed them. */
static void drop_fds_before(tf_client *c, uint64_t at) {
    unsigned keep = 0;
    for (unsigned i = 0; i < c->n_fds; i++) {
        if (c->fds[i].to <= at)
            close(c->fds[i].fd);
        else
            c->fds[keep++] = c->fds[i];
    }
    c->n_fds = keep;
}

int tf__take_fd(tf_client *c) {
    if (c->n_fds == 0 || c->fds[0].from > c->frame_start || c->fds[0].to <= c->frame_start)
        return -1;
    int fd = c->fds[0].fd;
    c->n_fds--;
    memmove(c->fds, c->fds + 1, c->n_fds * sizeof *c->fds);
    return fd;
}

/*
 * Reads the next whole frame. A Result with sequence 0 is the daemon's last
 * word before it closes the connection (a protocol error, a terminate, a lost
 * device): it marks the client broken with that reason. The call that reads
 * it returns TF_ERR_DISCONNECTED, except for a lost device: that call
 * returns TF_ERR_DEVICE, so the caller learns its tensors are gone because
 * the device failed (reconnect and upload again) rather than because the
 * connection broke; every later call is TF_ERR_DISCONNECTED.
 */
static tf_status read_frame(tf_client *c, Tenferro__Frame **out) {
    tf_status st = fill(c, TF__FRAME_HEADER_BYTES);
    if (st != TF_OK) return st;
    c->frame_start = c->received - c->rlen;
    drop_fds_before(c, c->frame_start);
    uint32_t len = tf__frame_peek_length(c->rbuf + c->rstart);
    if (len > c->max_frame_bytes + 8192) return broken(c, "reply frame larger than the maximum");
    size_t total = TF__FRAME_HEADER_BYTES + (size_t)len;
    st = fill(c, total);
    if (st != TF_OK) return st;
    Tenferro__Frame *f = tf__frame_decode(c->rbuf + c->rstart + TF__FRAME_HEADER_BYTES, len);
    c->rstart += total;
    c->rlen -= total;
    if (c->rlen == 0) c->rstart = 0;
    if (!f) return broken(c, "a reply does not decode");
    if (f->seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT) {
        c->broken = 1;
        tf_status why = (tf_status)f->result->status;
        c->last_word = why == TF_OK ? TF_ERR_PROTOCOL : why;
        tf__fail(c, why == TF_OK ? TF_ERR_PROTOCOL : why, "tenferrod closed the connection: %s",
                 f->result->message);
        tf__frame_free(f);
        return why == TF_ERR_DEVICE ? TF_ERR_DEVICE : TF_ERR_DISCONNECTED;
    }
    *out = f;
    return TF_OK;
}

/*
 * A send failed. When the daemon closed the connection (EPIPE), it may have
 * said why just before, and those bytes are still readable: report its reason
 * rather than "Broken pipe". Its end is closed, so these reads stop at its
 * last byte and never block; every way out of the loop marks the client broken.
 */
static tf_status send_failed(tf_client *c, int err) {
    if (err != EPIPE && err != ECONNRESET) return broken(c, strerror(err));
    Tenferro__Frame *f = NULL;
    tf_status st;
    while ((st = read_frame(c, &f)) == TF_OK) tf__frame_free(f);
    return st == TF_ERR_DEVICE ? st : TF_ERR_DISCONNECTED;
}

tf_status tf__recv(tf_client *c, uint64_t seq, Tenferro__Frame **reply) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    Tenferro__Frame *f = NULL;
    tf_status st = read_frame(c, &f);
    if (st != TF_OK) return st;
    if (f->seq != seq) {
        tf__frame_free(f);
        return broken(c, "reply out of sequence");
    }
    *reply = f;
    return TF_OK;
}

tf_status tf__send_mapped(tf_client *c, uint64_t buffer) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Mapped body = TENFERRO__MAPPED__INIT;
    body.buffer = buffer;
    f.body_case = TENFERRO__FRAME__BODY_MAPPED;
    f.mapped = &body;
    return tf__send(c, &f);
}

tf_status tf__call(tf_client *c, Tenferro__Frame *request, Tenferro__Frame **reply) {
    if (tf__ring_carries(c, request)) return tf__ring_call(c, request, reply);
    tf_status st = tf__send(c, request);
    if (st != TF_OK) return st;
    return tf__recv(c, request->seq, reply);
}

tf_status tf__result_status(tf_client *c, const Tenferro__Result *result) {
    if (!result) return tf__fail(c, TF_ERR_PROTOCOL, "reply carries no result");
    tf_status st = (tf_status)result->status;
    if (st == TF_OK) return tf__ok(c);
    return tf__fail(c, st, "%s", result->message && result->message[0] ? result->message
                                                                         : tf_strerror(st));
}

tf_status tf__recv_result(tf_client *c, uint64_t seq, const char *what) {
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__recv(c, seq, &reply);
    if (st != TF_OK) return st;
    st = reply->body_case == TENFERRO__FRAME__BODY_RESULT
             ? tf__result_status(c, reply->result)
             : tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to %s", what);
    tf__frame_free(reply);
    return st;
}

tf_status tf__call_result(tf_client *c, Tenferro__Frame *request, const char *what) {
    tf_status st = tf__send(c, request);
    return st == TF_OK ? tf__recv_result(c, request->seq, what) : st;
}

tf_status tf__check_connection(tf_client *c) {
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (c->rlen == 0) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int r = poll(&p, 1, 0);
        if (r < 0) return errno == EINTR ? TF_OK : broken(c, strerror(errno));
        if (r == 0) return TF_OK;
        if (!(p.revents & POLLIN)) return broken(c, "the daemon closed the connection");
    }
    /* Bytes nobody asked for: the daemon's last word (read_frame reports it), or a stray frame. */
    Tenferro__Frame *f = NULL;
    tf_status st = read_frame(c, &f);
    if (st != TF_OK) return st;
    tf__frame_free(f);
    return broken(c, "the daemon sent a frame nobody asked for");
}

const char *tf__runtime_dir(void) {
    const char *dir = getenv("TENFERRO_RUNTIME_DIR");
    return dir && dir[0] ? dir : "/run/tenferro";
}

int tf__device_socket(const char *device, char *buf, size_t len) {
    /* The name rule is common/daemon-socket.c's: a daemon resolves a copy take's source by it too. */
    char name[64];
    if (tf__device_socket_name(device, name, sizeof name) != 0) return -1;
    snprintf(buf, len, "%s/%s", tf__runtime_dir(), name);
    return 0;
}

/*
 * Picks the socket by tf_connect's rules into buf: the argument, else the
 * device asked for (tf_connect_device), else the environment and the
 * defaults. 0 when found, -1 with the reason in why when not.
 */
static int resolve_path(const char *path, const char *device, char *buf, size_t len, char *why,
                        size_t why_len, int *from_env) {
    *from_env = 0;
    if (path && path[0]) {
        snprintf(buf, len, "%s", path);
        return 0;
    }
    const char *source = "tf_connect_device";
    if (!device || !device[0] || strcmp(device, "auto") == 0) {
        const char *env = getenv("TENFERRO_SOCKET");
        if (env && env[0]) {
            snprintf(buf, len, "%s", env);
            *from_env = 1;
            return 0;
        }
        device = getenv("TENFERRO_DEVICE");
        source = "TENFERRO_DEVICE";
    }
    if (device && device[0] && strcmp(device, "auto") != 0) {
        if (tf__device_socket(device, buf, len) == 0) return 0;
        snprintf(why, why_len, "%s: \"%s\" names no device (cuda:N, N or cpu expected)", source,
                 device);
        return -1;
    }
    char first[256], second[256];
    snprintf(first, sizeof first, "%s/tenferrod-0.sock", tf__runtime_dir());
    snprintf(second, sizeof second, "%s/tenferrod-cpu.sock", tf__runtime_dir());
    struct stat st;
    if (stat(first, &st) == 0) {
        snprintf(buf, len, "%s", first);
        return 0;
    }
    if (stat(second, &st) == 0) {
        snprintf(buf, len, "%s", second);
        return 0;
    }
    snprintf(why, why_len,
             "no tenferrod to connect to: TENFERRO_SOCKET is not set (nor TENFERRO_DEVICE), and "
             "neither %s nor %s exists (is a daemon running? under a scheduler, did the job get "
             "a tenferrod share? docs/cluster.md)",
             first, second);
    return -1;
}

/* Sends Hello and checks the daemon's answer. */
static tf_status handshake(tf_client *c) {
    const char *name = getenv("TENFERRO_CLIENT_NAME");
    if (!name || !name[0]) name = program_invocation_short_name;
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.client_name = (char *)name;
    req.body_case = TENFERRO__FRAME__BODY_HELLO;
    req.hello = &hello;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    /* Refused before its Hello was read (at accept): the daemon's last word is the answer. */
    if (st == TF_ERR_DISCONNECTED && c->last_word != TF_OK) return c->last_word;
    if (st != TF_OK) return st;
    if (reply->body_case == TENFERRO__FRAME__BODY_RESULT) {
        st = tf__result_status(c, reply->result);
        tf__frame_free(reply);
        return st == TF_OK ? TF_ERR_PROTOCOL : st;
    }
    if (reply->body_case != TENFERRO__FRAME__BODY_HELLO_REPLY) {
        tf__frame_free(reply);
        return broken(c, "unexpected answer to Hello");
    }
    Tenferro__HelloReply *hr = reply->hello_reply;
    if (hr->protocol_version != TENFERRO__PROTOCOL__PROTOCOL_VERSION) {
        tf__frame_free(reply);
        return tf__fail(c, TF_ERR_VERSION, "tenferrod speaks protocol %u, this library %d",
                        hr->protocol_version, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    }
    snprintf(c->device, sizeof c->device, "%s", hr->device ? hr->device : "");
    tf__wait_spin_init(c);
    c->client_id = hr->client_id;
    if (hr->max_frame_bytes >= TF__MIN_MAX_FRAME_BYTES) c->max_frame_bytes = hr->max_frame_bytes;
    const tf__page_layout layout = {hr->completion_slots, hr->mailbox_offset, hr->ring_offset,
                                    hr->ring_request_bytes, hr->ring_reply_bytes};
    tf__frame_free(reply);
    /* Without a completion page the client works, but pending transfers are TF_ERR_UNSUPPORTED. */
    int fd = layout.slots > 0 ? tf__take_fd(c) : -1;
    if (fd >= 0 && tf__completion_map(c, &layout, fd) == TF_OK) {
        tf_status st = tf__send_mapped(c, 0);
        if (st != TF_OK) return st;
    }
    return tf__ok(c);
}

/*
 * Keeps the socket's absolute path: another daemon connects there to fetch a
 * tensor this client offers (tf_copy_to), from a directory of its own.
 */
static void remember_socket(tf_client *c, const char *path) {
    char cwd[PATH_MAX], full[PATH_MAX + sizeof c->socket_path];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    int n = snprintf(full, sizeof full, "%s%s%s", cwd, cwd[0] ? "/" : "", path);
    /* A path too long for a socket address stays unknown: tf_copy_to then says so. */
    if (n > 0 && (size_t)n < sizeof c->socket_path) memcpy(c->socket_path, full, (size_t)n + 1);
}

/* tf_connect and tf_connect_device: the socket by the rules, a client either way. */
static tf_status connect_to(const char *socket_path, const char *device, tf_client **out) {
    if (!out) return TF_ERR_INVALID_ARGUMENT;
    *out = NULL;
    tf_client *c = calloc(1, sizeof *c);
    if (!c) return TF_ERR_NO_MEMORY;
    c->fd = -1;
    c->max_frame_bytes = TF__MIN_MAX_FRAME_BYTES;
    c->failed_index = -1;
    c->view.client = c;
    tf__id_table_init(&c->handles, sizeof(tf__handle));
    tf__id_table_init(&c->prepared, sizeof(tf__prepared_rec));
    char path[512], why[1024];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    tf_status st = TF_OK;
    int from_env = 0;
    if (resolve_path(socket_path, device, path, sizeof path, why, sizeof why, &from_env) != 0) {
        c->broken = 1;
        st = tf__fail(c, strstr(why, "names no device") ? TF_ERR_INVALID_ARGUMENT : TF_ERR_DISCONNECTED,
                      "%s", why);
    } else if (strlen(path) >= sizeof addr.sun_path) {
        st = tf__fail(c, TF_ERR_INVALID_ARGUMENT, "socket path %s is too long", path);
    } else {
        memcpy(addr.sun_path, path, strlen(path) + 1); /* fits: checked just above */
        remember_socket(c, path);
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
            c->broken = 1;
            st = tf__fail(c, TF_ERR_DISCONNECTED,
                          "cannot connect to tenferrod at %s%s: %s (is the daemon running? %s)",
                          path, from_env ? " (from TENFERRO_SOCKET)" : "", strerror(errno),
                          from_env ? "check TENFERRO_SOCKET names its socket"
                                   : "set TENFERRO_SOCKET to its socket");
        }
    }
    if (st == TF_OK) st = handshake(c);
    *out = c; /* even on failure, so tf_client_last_error can say why; free with tf_disconnect */
    return st;
}

tf_status tf_connect(const char *socket_path, tf_client **out) {
    return connect_to(socket_path, NULL, out);
}

tf_status tf_connect_device(const char *device, tf_client **out) {
    return connect_to(NULL, device && device[0] ? device : "auto", out);
}

void tf_disconnect(tf_client *c) {
    if (!c) return;
    if (c->held) {
        free(c->held);
        c->held = NULL;
    }
    tf__pinned_release_all(c);
    tf__completion_unmap(c);
    for (unsigned i = 0; i < c->n_fds; i++) close(c->fds[i].fd);
    if (c->fd >= 0) close(c->fd);
    tf__id_table_free(&c->handles);
    tf__prepared_forget_all(c);
    for (size_t i = 0; i < c->n_queued; i++) tf__queued_op_release(&c->queue[i]);
    free(c->queue);
    free(c->rbuf);
    free(c);
}

int64_t tf_client_failed_index(const tf_client *c) { return c->failed_index; }

const char *tf_version(void) { return "0.1.0"; }
unsigned tf_protocol_version(void) { return TENFERRO__PROTOCOL__PROTOCOL_VERSION; }
