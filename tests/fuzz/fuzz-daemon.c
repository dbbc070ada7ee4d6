/*
 * The in-process daemon of the fuzz targets (see fuzz-daemon.h): setting up
 * a server the way tfd_server_run does, minus the filesystem socket, signal
 * handlers and blocking loop; clients over Unix stream sockets; running the
 * loop until it is quiet; and the baseline every input must leave behind.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cblas.h>

#include "daemon/backend/registry.h"
#include "daemon/config.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/mailbox.h"
#include "tests/fuzz/fuzz-daemon.h"

/* How long the loop may take to become quiet before the input counts as a hang. */
#define SETTLE_LIMIT_MS 20000
#define MAX_CLIENTS 8
/* What a slow reader takes per turn of the loop. */
#define SLOW_READ_BYTES 512

static tfd_server server;
static uv_loop_t loop;
static int started;
static unsigned generation;
static struct sockaddr_un listen_addr;
static socklen_t listen_len;
static int baseline_fds = -1;
static int baseline_handles;
/* Clients whose socket is open, drained whenever the loop runs. */
static fz_client *clients[MAX_CLIENTS];
/* The options every input starts from, and the credentials its connections present. */
static tfd_options harness_options;
static int peer_override;
static uid_t peer_uid;
static gid_t peer_gid;

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz-daemon: FINDING: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

tfd_server *fz_server(void) { return &server; }

void fz_begin(void) {
    if (server.conns) fz_fail("an input began while connections of the last one remain");
    server.opt = harness_options;
    server.next_client_id = server.next_session_id = server.next_batch_id = 0;
    peer_override = 0;
}

void fz_peer_credentials(uid_t uid, gid_t gid) {
    peer_override = 1;
    peer_uid = uid;
    peer_gid = gid;
}

static void on_connection(uv_stream_t *listener, int status) {
    tfd_server *srv = listener->data;
    if (status < 0 || srv->stopping) return;
    tfd_conn_accept(srv);
}

/*
 * Descriptors of the kinds the daemon makes (sockets, memfds, eventfds and
 * other anonymous inodes); the files libFuzzer opens meanwhile do not count.
 */
static int count_fds(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char path[64], target[256];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = '\0';
        n += strncmp(target, "socket:", 7) == 0 || strncmp(target, "/memfd:", 7) == 0 ||
             strncmp(target, "anon_inode:", 11) == 0;
    }
    closedir(d);
    return n;
}

static void count_handle(uv_handle_t *h, void *arg) {
    if (!uv_is_closing(h)) ++*(int *)arg;
}

/* Handles the loop holds that are not closing. */
static int count_handles(void) {
    int n = 0;
    uv_walk(&loop, count_handle, &n);
    return n;
}

/* Opens the listener: a socket in the abstract namespace, so no file is left anywhere. */
static void listen_abstract(tfd_server *srv) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fz_fail("socket: %s", strerror(errno));
    memset(&listen_addr, 0, sizeof listen_addr);
    listen_addr.sun_family = AF_UNIX;
    int n = snprintf(listen_addr.sun_path + 1, sizeof listen_addr.sun_path - 1,
                     "tenferrod-fuzz-%d-%u", (int)getpid(), generation++);
    listen_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    if (bind(fd, (struct sockaddr *)&listen_addr, listen_len) != 0)
        fz_fail("bind: %s", strerror(errno));
    uv_pipe_init(&loop, &srv->listener, 0);
    srv->listener.data = srv;
    if (uv_pipe_open(&srv->listener, fd) != 0 ||
        uv_listen((uv_stream_t *)&srv->listener, 64, on_connection) != 0)
        fz_fail("cannot listen on the abstract socket");
}

/* Builds the server as tfd_server_run does, with the harness's options and a private loop. */
static void server_start(void) {
    tfd_server *srv = &server;
    memset(srv, 0, sizeof *srv);
    if (uv_loop_init(&loop) != 0) fz_fail("uv_loop_init failed");
    srv->loop = &loop;
    tfd_options_defaults(&srv->opt);
    snprintf(srv->opt.device, sizeof srv->opt.device, "cpu");
    srv->opt.workers = 1;
    srv->opt.max_frame_bytes = FZ_MAX_FRAME_BYTES;
    srv->opt.max_pinned_bytes = FZ_MAX_PINNED_BYTES;
    srv->opt.client_quota.device_bytes = FZ_CLIENT_DEVICE_BYTES;
    srv->opt.client_quota.live_tensors = FZ_CLIENT_LIVE_TENSORS;
    srv->opt.client_quota.queued_ops = FZ_CLIENT_QUEUED_OPS;
    srv->opt.uid_quota.device_bytes = FZ_UID_DEVICE_BYTES;
    srv->opt.uid_quota.pinned_bytes = FZ_UID_PINNED_BYTES;
    srv->opt.busy_poll_us = 0;
    harness_options = srv->opt;
    srv->start_ms = tfd_now_ms();
    tfd_reservation_init(&srv->res, 0);
    char msg[512], resolved[32];
    if (tfd_backend_select("cpu", &srv->opt.caches, &srv->backend, resolved, sizeof resolved, msg,
                           sizeof msg) != TF_OK)
        fz_fail("cannot open the CPU backend: %s", msg);
    if (tfd_executor_start(&loop, &srv->backend, srv->opt.workers, &srv->ex) != TF_OK)
        fz_fail("cannot start the executor");
    tfd_busy_poll_set(&srv->busy_poll, 0);
    tfd_executor_set_busy_poll(srv->ex, &srv->busy_poll);
    listen_abstract(srv);
    /* Never started: they exist because tfd_server_begin_shutdown closes them. */
    uv_signal_init(&loop, &srv->sig_term);
    uv_signal_init(&loop, &srv->sig_int);
    uv_signal_init(&loop, &srv->sig_hup);
    baseline_handles = count_handles();
}

void fz_init(void) {
    if (started) return;
    started = 1;
    signal(SIGPIPE, SIG_IGN);
    const char *level = getenv("FUZZ_LOG");
    int parsed = level ? tfd_log_parse_level(level) : -1;
    tfd_log_set_level(parsed >= 0 ? (tfd_log_level)parsed : TFD_LOG_ERROR);
    /* The executor's one worker is the parallelism: OpenBLAS adds no threads of its own. */
    openblas_set_num_threads(1);
    server_start();
    baseline_fds = count_fds();
}

/* Registers a client whose socket the loop drains. */
static void track(fz_client *cl) {
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (!clients[i]) {
            clients[i] = cl;
            return;
        }
    fz_fail("more than %d clients at once", MAX_CLIENTS);
}

static void untrack(fz_client *cl) {
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (clients[i] == cl) clients[i] = NULL;
}

/* Slot of seq in the client's set of sent sequence numbers (seq != 0, cap a power of 2). */
static size_t seq_slot(const fz_client *cl, uint64_t seq) {
    size_t i = (size_t)(seq * 0x9e3779b97f4a7c15ULL) & (cl->seq_cap - 1);
    while (cl->seqs[i] && cl->seqs[i] != seq) i = (i + 1) & (cl->seq_cap - 1);
    return i;
}

static int seq_sent(const fz_client *cl, uint64_t seq) {
    return cl->seq_cap && cl->seqs[seq_slot(cl, seq)] == seq;
}

int fz_sent(const fz_client *cl, uint64_t seq) { return seq && seq_sent(cl, seq); }

static void note_seq(fz_client *cl, uint64_t seq) {
    if (seq == 0 || seq_sent(cl, seq)) return;
    if ((cl->n_seqs + 1) * 2 > cl->seq_cap) {
        fz_client grown = *cl;
        grown.seq_cap = cl->seq_cap ? cl->seq_cap * 2 : 64;
        grown.seqs = calloc(grown.seq_cap, sizeof *grown.seqs);
        if (!grown.seqs) fz_fail("out of memory tracking sequence numbers");
        for (size_t i = 0; i < cl->seq_cap; i++)
            if (cl->seqs[i]) grown.seqs[seq_slot(&grown, cl->seqs[i])] = cl->seqs[i];
        free(cl->seqs);
        cl->seqs = grown.seqs;
        cl->seq_cap = grown.seq_cap;
    }
    cl->seqs[seq_slot(cl, seq)] = seq;
    cl->n_seqs++;
}

/*
 * Splits what the client has sent into frames, as the daemon will, and notes
 * their sequence numbers. It is never stricter than the daemon: it stops only
 * at a frame above the daemon's largest limit or one that does not decode,
 * after which the daemon reads nothing more from this client.
 */
static void note_sent(fz_client *cl, const uint8_t *bytes, size_t len) {
    if (cl->out_done) return;
    if (cl->out_len + len > cl->out_cap) {
        size_t cap = cl->out_cap ? cl->out_cap : 4096;
        while (cap < cl->out_len + len) cap *= 2;
        uint8_t *p = realloc(cl->out, cap);
        if (!p) fz_fail("out of memory tracking sent frames");
        cl->out = p;
        cl->out_cap = cap;
    }
    memcpy(cl->out + cl->out_len, bytes, len);
    cl->out_len += len;
    size_t at = 0;
    while (cl->out_len - at >= TF__FRAME_HEADER_BYTES) {
        uint32_t body = tf__frame_peek_length(cl->out + at);
        if (body > FZ_MAX_FRAME_BYTES) {
            cl->out_done = 1;
            return;
        }
        if (cl->out_len - at < TF__FRAME_HEADER_BYTES + (size_t)body) break;
        Tenferro__Frame *f = tf__frame_decode(cl->out + at + TF__FRAME_HEADER_BYTES, body);
        if (!f) {
            cl->out_done = 1;
            return;
        }
        note_seq(cl, f->seq);
        /* What a ring entry's after_seq names: doorbells only wake, and are not waited for. */
        if (f->body_case != TENFERRO__FRAME__BODY_MAILBOX_DOORBELL && f->seq > cl->max_seq)
            cl->max_seq = f->seq;
        tf__frame_free(f);
        at += TF__FRAME_HEADER_BYTES + (size_t)body;
    }
    memmove(cl->out, cl->out + at, cl->out_len - at);
    cl->out_len -= at;
}

/*
 * Splits the received bytes into frames: each must be within the daemon's
 * limit, decode, and answer a sequence number this client sent (0 is the
 * daemon's own: the reason a connection ends).
 */
static void check_replies(fz_client *cl) {
    size_t at = 0;
    while (cl->in_len - at >= TF__FRAME_HEADER_BYTES) {
        uint32_t len = tf__frame_peek_length(cl->in + at);
        if (len > server.opt.max_frame_bytes + 4096)
            fz_fail("client %llu: the daemon sent a frame of %u bytes, above its own limit",
                    (unsigned long long)cl->client_id, len);
        if (cl->in_len - at < TF__FRAME_HEADER_BYTES + (size_t)len) break;
        Tenferro__Frame *f = tf__frame_decode(cl->in + at + TF__FRAME_HEADER_BYTES, len);
        if (!f)
            fz_fail("client %llu: the daemon sent a %u-byte frame that does not decode",
                    (unsigned long long)cl->client_id, len);
        uint64_t seq = f->seq;
        if (seq == 0 && f->body_case == TENFERRO__FRAME__BODY_RESULT) {
            cl->last_words++;
            cl->last_word_status = f->result->status;
        }
        tf__frame_free(f);
        if (seq && !seq_sent(cl, seq))
            fz_fail("client %llu: the daemon answered sequence number %llu, which this client "
                    "never sent",
                    (unsigned long long)cl->client_id, (unsigned long long)seq);
        at += TF__FRAME_HEADER_BYTES + (size_t)len;
    }
    memmove(cl->in, cl->in + at, cl->in_len - at);
    cl->in_len -= at;
}

/*
 * Closes every descriptor that rode along with received bytes, except the
 * completion page's while fz_hello waits for it (the first to arrive).
 */
static void close_passed_fds(fz_client *cl, struct msghdr *m) {
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(m); cm; cm = CMSG_NXTHDR(m, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
            if (cl->want_page && cl->page_fd < 0)
                cl->page_fd = fd;
            else
                close(fd);
        }
    }
}

/* Reads everything the daemon has sent the client so far. */
static void drain(fz_client *cl) {
    while (cl->fd >= 0) {
        if (cl->in_cap - cl->in_len < 65536) {
            size_t cap = cl->in_cap ? cl->in_cap * 2 : 131072;
            uint8_t *p = realloc(cl->in, cap);
            if (!p) fz_fail("out of memory draining a client");
            cl->in = p;
            cl->in_cap = cap;
        }
        size_t room = cl->in_cap - cl->in_len;
        struct iovec iov = {.iov_base = cl->in + cl->in_len,
                            .iov_len = cl->slow && room > SLOW_READ_BYTES ? SLOW_READ_BYTES : room};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(8 * sizeof(int))];
        } control;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                           .msg_controllen = sizeof control.buf};
        ssize_t n = recvmsg(cl->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n >= 0) close_passed_fds(cl, &m);
        if (n > 0) {
            cl->in_len += (size_t)n;
            check_replies(cl);
            if (cl->slow) return;
            continue;
        }
        if (n == 0 && cl->in_len > 0)
            fz_fail("client %llu: the daemon's last frame was cut off (%zu bytes of it came)",
                    (unsigned long long)cl->client_id, cl->in_len);
        if (n < 0 && errno == EINTR) continue;
        return;
    }
}

/* One turn: the loop without blocking, the poller, then every client's socket. */
static int step(void) {
    uv_run(&loop, UV_RUN_NOWAIT);
    int served = tfd_server_poll(&server); /* as the daemon's own loop does each turn */
    for (int i = 0; i < MAX_CLIENTS; i++)
        if (clients[i]) drain(clients[i]);
    return served;
}

int fz_turn(void) { return step(); }

/* Nothing is in progress that would change the daemon's state without new input. */
static int quiet(void) {
    if (loop.active_reqs.count) return 0; /* thread-pool work, writes, shutdowns */
    for (tfd_conn *c = server.conns; c; c = c->next) {
        if (c->closing) return 0; /* on its way out, and freed once that is done */
        if (c->stream && tfd_stream_queued(c->stream)) return 0;
        if (c->held_head || c->transfers_in_flight || c->buffer_creations || c->take) return 0;
    }
    return 1;
}

/* Says what the loop is still waiting for, when it never gets quiet. */
static void report_stuck(const char *what) {
    fprintf(stderr, "fuzz-daemon: %s; %u requests active, %d connections:\n", what,
            loop.active_reqs.count, server.n_conns);
    for (tfd_conn *c = server.conns; c; c = c->next)
        fprintf(stderr,
                "  client %llu: hello_done %d closing %d pipe_closed %d stream_drained %d paused %d "
                "queued %llu held %d transfers_in_flight %u buffer_creations %u\n",
                (unsigned long long)c->client_id, c->hello_done, c->closing, c->pipe_closed,
                c->stream_drained, c->paused,
                (unsigned long long)(c->stream ? tfd_stream_queued(c->stream) : 0),
                c->held_head != NULL, c->transfers_in_flight, c->buffer_creations);
    fz_fail("%s", what);
}

void fz_settle(void) {
    uint64_t start = tfd_now_ms();
    for (;;) {
        /*
         * A poller that served something may have more (a ring serves 16
         * entries a turn): tenferrod's loop polls again before it sleeps,
         * so the harness does not call that quiet either. A completion posted
         * just before the stream's count dropped is taken on the next turn.
         */
        if (step() == 0 && quiet()) {
            if (step() == 0 && quiet()) return;
        }
        if (tfd_now_ms() - start > SETTLE_LIMIT_MS) report_stuck("the daemon never got quiet");
        sched_yield();
    }
}

int fz_connect(fz_client *cl) {
    memset(cl, 0, sizeof *cl);
    cl->fd = -1;
    cl->page_fd = -1;
    cl->next_seq = 1;
    if (server.stopping) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fz_fail("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&listen_addr, listen_len) != 0)
        fz_fail("connect: %s", strerror(errno));
    uint64_t before = server.next_client_id;
    for (int i = 0; i < 1000 && server.next_client_id == before; i++) uv_run(&loop, UV_RUN_NOWAIT);
    if (server.next_client_id == before) fz_fail("the daemon did not accept a connection");
    cl->fd = fd;
    tfd_conn *c = server.conns; /* accepted connections go to the head */
    cl->client_id = c->client_id;
    if (peer_override) {
        c->uid = peer_uid;
        c->gid = peer_gid;
    }
    track(cl);
    return 0;
}

void fz_slow_reader(fz_client *cl) {
    cl->slow = 1;
    tfd_conn *c = fz_conn(cl);
    uv_os_fd_t fd;
    int small = 1; /* the kernel raises it to its minimum */
    if (c && uv_fileno((uv_handle_t *)&c->pipe, &fd) == 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
}

tfd_conn *fz_conn(const fz_client *cl) {
    for (tfd_conn *c = server.conns; c; c = c->next)
        if (c->client_id == cl->client_id) return c;
    return NULL;
}

void fz_send(fz_client *cl, const void *bytes, size_t len) {
    const uint8_t *p = bytes;
    uint64_t start = tfd_now_ms();
    while (len > 0 && cl->fd >= 0) {
        ssize_t n = send(cl->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            note_sent(cl, p, (size_t)n);
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return; /* the daemon hung up */
        /* The socket is full: the daemon reads once the loop runs, unless it stopped reading. */
        tfd_conn *c = fz_conn(cl);
        if (!c || c->closing) return;
        step();
        if (tfd_now_ms() - start > SETTLE_LIMIT_MS)
            report_stuck("a connection stopped reading its client's bytes");
        sched_yield();
    }
}

void fz_send_body(fz_client *cl, const void *body, size_t len) {
    uint8_t header[TF__FRAME_HEADER_BYTES];
    tf__frame_put_length(header, (uint32_t)len);
    fz_send(cl, header, sizeof header);
    fz_send(cl, body, len);
}

void fz_send_frame(fz_client *cl, Tenferro__Frame *frame) {
    if (frame->seq == 0) frame->seq = cl->next_seq;
    if (frame->seq >= cl->next_seq) cl->next_seq = frame->seq + 1;
    uint8_t *bytes;
    size_t len;
    if (tf__frame_encode(frame, UINT32_MAX, &bytes, &len) != TF_OK)
        fz_fail("the harness could not encode a frame");
    fz_send(cl, bytes, len);
    free(bytes);
}

void fz_hello(fz_client *cl, const char *name) {
    Tenferro__Hello hello = TENFERRO__HELLO__INIT;
    hello.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    hello.client_name = (char *)name;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &hello;
    cl->want_page = 1;
    fz_send_frame(cl, &f);
    fz_settle();
    cl->want_page = 0;
    if (cl->page_fd < 0) return; /* refused: no page came */
    /* Mapped as the client library maps it; the descriptor is not needed after that. */
    void *p = mmap(NULL, TF_RING_MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, cl->page_fd, 0);
    close(cl->page_fd);
    cl->page_fd = -1;
    if (p == MAP_FAILED) fz_fail("cannot map the completion page: %s", strerror(errno));
    cl->page = p;
    if (cl->skip_mapped) return;
    fz_mapped(cl, 0);
    fz_settle();
}

void fz_mapped(fz_client *cl, uint64_t buffer) {
    Tenferro__Mapped m = TENFERRO__MAPPED__INIT;
    m.buffer = buffer;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_MAPPED;
    f.mapped = &m;
    fz_send_frame(cl, &f);
}

void fz_hangup(fz_client *cl) {
    if (cl->fd < 0) return;
    drain(cl);
    close(cl->fd);
    cl->fd = -1;
    untrack(cl);
}

/* What every input must leave behind once its clients are gone (the executor still runs). */
static void check_baseline(void) {
    tfd_server *srv = &server;
    if (srv->n_conns || srv->conns)
        report_stuck("connections are left after every client hung up");
    tfd_executor_counters *ec = tfd_executor_counters_of(srv->ex);
    uint64_t allocs = atomic_load(&ec->device_allocations_live);
    uint64_t bytes = atomic_load(&ec->device_bytes_live);
    if (allocs || bytes)
        fz_fail("%llu device allocations (%llu bytes) are left after every client hung up",
                (unsigned long long)allocs, (unsigned long long)bytes);
    if (srv->counters.tensors_created != srv->counters.tensors_freed)
        fz_fail("%llu tensors created but %llu freed", (unsigned long long)srv->counters.tensors_created,
                (unsigned long long)srv->counters.tensors_freed);
    if (srv->counters.pinned_buffers_live || srv->counters.pinned_bytes_live)
        fz_fail("%llu pinned buffers (%llu bytes) are booked after every client hung up",
                (unsigned long long)srv->counters.pinned_buffers_live,
                (unsigned long long)srv->counters.pinned_bytes_live);
    if (srv->res.holder || srv->res.head || srv->res.n_queued)
        fz_fail("the reservation is still held or queued after every client hung up");
    int handles = count_handles();
    if (handles != baseline_handles)
        fz_fail("%d loop handles open, %d at the baseline", handles, baseline_handles);
}

/* The input made the server stop (an admin drain): let it finish, check it, start a new one. */
static void restart_server(void) {
    tfd_server *srv = &server;
    if (srv->counters.pinned_buffers_live || srv->counters.pinned_bytes_live)
        fz_fail("the server stopped with %llu pinned buffers booked",
                (unsigned long long)srv->counters.pinned_buffers_live);
    if (srv->stopping != 2) report_stuck("the server began to stop but never finished");
    uint64_t start = tfd_now_ms();
    while (uv_run(&loop, UV_RUN_NOWAIT))
        if (tfd_now_ms() - start > SETTLE_LIMIT_MS) fz_fail("the stopped server's loop never ended");
    tfd_item_pool_drain();
    srv->backend.vt->close(&srv->backend);
    if (uv_loop_close(&loop) != 0) fz_fail("the stopped server left handles on its loop");
    server_start();
}

void fz_finish(fz_client *list, int n) {
    for (int i = 0; i < n; i++) fz_hangup(&list[i]);
    fz_settle();
    if (server.stopping)
        restart_server();
    else
        check_baseline();
    int fds = count_fds();
    if (fds != baseline_fds) fz_fail("%d descriptors open, %d at the baseline", fds, baseline_fds);
    for (int i = 0; i < n; i++) {
        if (list[i].page) munmap(list[i].page, TF_RING_MAP_BYTES);
        list[i].page = NULL;
        free(list[i].in);
        free(list[i].out);
        free(list[i].seqs);
        list[i].in = list[i].out = NULL;
        list[i].seqs = NULL;
        list[i].in_len = list[i].in_cap = list[i].out_len = list[i].out_cap = 0;
        list[i].n_seqs = list[i].seq_cap = 0;
    }
}

/* The race in progress: its words, the thread, and how it is told to stop. */
static struct {
    fz_race_word words[FZ_RACE_WORDS];
    int n;
    pthread_t thread;
    int running;
    int stop;        /* atomic: set by fz_race_stop */
    uint64_t rounds; /* atomic: rounds made so far */
} race;

/* Stores v into one word, atomically where it is aligned (the daemon's reads are atomic loads). */
static void race_store(const fz_race_word *w, uint64_t v) {
    uintptr_t a = (uintptr_t)w->at;
    if (w->width == 8 && a % 8 == 0) {
        __atomic_store_n((uint64_t *)w->at, v, __ATOMIC_RELAXED);
    } else if (w->width == 4 && a % 4 == 0) {
        __atomic_store_n((uint32_t *)w->at, (uint32_t)v, __ATOMIC_RELAXED);
    } else if (w->width == 1) {
        __atomic_store_n((uint8_t *)w->at, (uint8_t)v, __ATOMIC_RELAXED);
    } else {
        /* Unaligned (an entry a raw input put anywhere): byte by byte, as torn as a client's. */
        for (int i = 0; i < w->width; i++)
            __atomic_store_n((uint8_t *)w->at + i, (uint8_t)(v >> (8 * i)), __ATOMIC_RELAXED);
    }
}

/* A xorshift generator: the writer's choices (its timing is what varies between runs). */
static uint64_t race_next(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/*
 * The writer. A field checked and then read again is read twice a few
 * instructions apart, so what matters is how often one word changes: in
 * phases of 64 rounds only about a quarter of the words are written when
 * there are more than six (a short round, so each changes often), the
 * others keep their last value,
 * and each phase picks anew, so over the phases every word is hammered and
 * every mix of old and new values meets the daemon's reads. A word written
 * changes in three rounds out of four, to another of its values. It yields
 * every 256 rounds: on a machine of two cores the loop thread and the
 * executor's worker must run too.
 */
static void *race_main(void *arg) {
    (void)arg;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    uint64_t rounds = 0, active = 0;
    int cur[FZ_RACE_WORDS] = {0};
    while (!__atomic_load_n(&race.stop, __ATOMIC_ACQUIRE)) {
        if (rounds % 64 == 0 && race.n > 0) {
            /* A few words are all hammered at once; of many, a quarter at a time. */
            active = race.n <= 6 ? ~0ull : race_next(&x) & race_next(&x);
            if (!(active & ((1ull << race.n) - 1))) active |= 1ull << (race_next(&x) % (uint64_t)race.n);
        }
        for (int i = 0; i < race.n; i++) {
            const fz_race_word *w = &race.words[i];
            if (!(active >> i & 1)) continue;
            uint64_t r = race_next(&x);
            if (w->n_values > 1 && (r & 3) != 0)
                cur[i] = (cur[i] + 1 + (int)((r >> 32) % (uint64_t)(w->n_values - 1))) % w->n_values;
            race_store(w, w->values[cur[i]]);
        }
        __atomic_store_n(&race.rounds, ++rounds, __ATOMIC_RELEASE);
        if (rounds % 256 == 0) sched_yield();
    }
    return NULL;
}

void fz_race_start(const fz_race_word *words, int n) {
    if (race.running) fz_fail("a race started while another runs");
    if (n > FZ_RACE_WORDS) n = FZ_RACE_WORDS;
    race.n = 0;
    for (int i = 0; i < n; i++)
        if (words[i].at && words[i].n_values > 0 && words[i].n_values <= FZ_RACE_VALUES &&
            (words[i].width == 1 || words[i].width == 4 || words[i].width == 8))
            race.words[race.n++] = words[i];
    race.stop = 0;
    race.rounds = 0;
    /* Every word starts at its first value (the client's own), then the writer moves it. */
    for (int i = 0; i < race.n; i++) race_store(&race.words[i], race.words[i].values[0]);
    if (pthread_create(&race.thread, NULL, race_main, NULL) != 0)
        fz_fail("cannot start the writer thread");
    race.running = 1;
    /* The daemon's next read must meet a writer at work, not one still being scheduled. */
    while (__atomic_load_n(&race.rounds, __ATOMIC_ACQUIRE) == 0) sched_yield();
}

uint64_t fz_race_stop(void) {
    if (!race.running) return 0;
    __atomic_store_n(&race.stop, 1, __ATOMIC_RELEASE);
    pthread_join(race.thread, NULL);
    race.running = 0;
    return race.rounds;
}
