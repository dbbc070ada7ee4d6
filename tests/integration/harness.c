/* The integration-test harness (see harness.h). */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <complex.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

const char *th_device(void) {
    const char *d = getenv("TENFERRO_TEST_DEVICE");
    return d && d[0] ? d : "cpu";
}

static const char *daemon_path(void) {
    const char *p = getenv("TENFERRO_DAEMON");
    return p && p[0] ? p : "build/tenferrod";
}

void th_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double th_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

double th_now_s(void) { return th_now_ms() / 1e3; }

long th_proc_status_value(pid_t pid, const char *name) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const size_t len = strlen(name);
    long value = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, name, len) == 0 && line[len] == ':') {
            char *end;
            long v = strtol(line + len + 1, &end, 10);
            if (end != line + len + 1) value = v;
            break;
        }
    fclose(f);
    return value;
}

int th_proc_entries(pid_t pid, const char *dir) {
    char path[96];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, dir);
    DIR *d = opendir(path);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The runtime directory of this test process's daemons, and the process that made it. */
static char runtime_dir[64];
static pid_t runtime_owner;

/* At exit of the process that made it: the runtime directory goes, with what is left in it. */
static void remove_runtime_dir(void) {
    if (getpid() != runtime_owner) return;
    DIR *dir = opendir(runtime_dir);
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            char path[sizeof runtime_dir + 256];
            snprintf(path, sizeof path, "%s/%s", runtime_dir, e->d_name);
            unlink(path);
        }
        closedir(dir);
    }
    rmdir(runtime_dir);
}

const char *th_runtime_dir(void) {
    /* Made once per test process; the children it forks share it (they never run atexit). */
    if (!runtime_dir[0]) {
        snprintf(runtime_dir, sizeof runtime_dir, "/tmp/tf-test-%d", (int)getpid());
        /* Searchable by all (not listable): a suite's children of another uid reach its sockets. */
        if (mkdir(runtime_dir, 0711) != 0 && errno != EEXIST) {
            fprintf(stderr, "harness: cannot make %s: %s\n", runtime_dir, strerror(errno));
            abort();
        }
        chmod(runtime_dir, 0711);
        runtime_owner = getpid();
        atexit(remove_runtime_dir);
    }
    return runtime_dir;
}

/* Starts tenferrod on socket (a fresh one when NULL) with the extra arguments in ap. */
static int start_va(th_daemon *d, const char *socket, va_list ap) {
    static int counter;
    memset(d, 0, sizeof *d);
    ++counter;
    if (socket)
        snprintf(d->socket, sizeof d->socket, "%s", socket);
    else
        snprintf(d->socket, sizeof d->socket, "%s/tenferrod-%d.sock", th_runtime_dir(), counter);
    snprintf(d->log_path, sizeof d->log_path, "/tmp/tf-test-%d-%d.log", (int)getpid(), counter);
    const char *argv[32];
    int n = 0;
    argv[n++] = daemon_path();
    argv[n++] = "--socket";
    argv[n++] = d->socket;
    argv[n++] = "--device";
    argv[n++] = th_device();
    argv[n++] = "--log-level";
    argv[n++] = "debug";
    /* A whole suite can run with the loop polling (the submission-mailbox route of transfers). */
    const char *busy_poll = getenv("TENFERRO_TEST_BUSY_POLL_US");
    if (busy_poll && busy_poll[0]) {
        argv[n++] = "--busy-poll-us";
        argv[n++] = busy_poll;
        /* No polling means none across request gaps either: every request then takes the socket. */
        if (strcmp(busy_poll, "0") == 0) {
            argv[n++] = "--idle-poll-max-us";
            argv[n++] = "0";
        }
    }
    const char *extra;
    while ((extra = va_arg(ap, const char *)) != NULL && n < 31) argv[n++] = extra;
    argv[n] = NULL;

    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        FILE *log = freopen(d->log_path, "w", stderr);
        (void)log;
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    d->pid = pid;
    for (int i = 0; i < 500; i++) {
        int fd = th_raw_connect(d);
        if (fd >= 0) {
            close(fd);
            return 0;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "harness: tenferrod exited at start; log %s\n", d->log_path);
            d->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            d->pid = 0;
            return -1;
        }
        th_sleep_ms(10);
    }
    fprintf(stderr, "harness: tenferrod did not start listening; log %s\n", d->log_path);
    return -1;
}

int th_daemon_start(th_daemon *d, ...) {
    va_list ap;
    va_start(ap, d);
    int rc = start_va(d, NULL, ap);
    va_end(ap);
    return rc;
}

int th_daemon_start_on(th_daemon *d, const char *socket, ...) {
    va_list ap;
    va_start(ap, socket);
    int rc = start_va(d, socket, ap);
    va_end(ap);
    return rc;
}

int th_daemon_stop(th_daemon *d) {
    if (d->pid <= 0) return -1;
    kill(d->pid, SIGTERM);
    int rc = th_wait(d->pid);
    d->pid = 0;
    unlink(d->socket);
    if (rc == 0) unlink(d->log_path);
    return rc;
}

char *th_daemon_log(const th_daemon *d) {
    FILE *f = fopen(d->log_path, "r");
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out) abort();
    if (f) {
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, out);
        fclose(f);
    }
    fclose(out);
    return text;
}

int th_daemon_running(const th_daemon *d) {
    siginfo_t info = {0};
    /* WNOWAIT: only look, so th_wait reaps it later and decodes the status as usual. */
    if (waitid(P_PID, (id_t)d->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return 0;
    return info.si_pid != d->pid;
}

int th_daemon_wait(th_daemon *d, int timeout_ms) {
    if (d->pid <= 0) return -1;
    for (int waited = 0;; waited += 10) {
        siginfo_t info = {0};
        /* WNOWAIT: only look, so th_wait below reaps it and decodes the status as usual. */
        if (waitid(P_PID, (id_t)d->pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == d->pid)
            break;
        if (waited >= timeout_ms) return -1;
        th_sleep_ms(10);
    }
    int rc = th_wait(d->pid);
    d->pid = 0;
    if (rc == 0) unlink(d->log_path);
    return rc;
}

tf_client *th_connect(const th_daemon *d) {
    tf_client *c = NULL;
    tf_status st = tf_connect(d->socket, &c);
    if (st != TF_OK) {
        fprintf(stderr, "harness: tf_connect: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
        abort();
    }
    return c;
}

pid_t th_spawn(int (*fn)(void *arg), void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    return pid;
}

int th_wait(pid_t pid) {
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

void th_die_with_parent(void) { prctl(PR_SET_PDEATHSIG, SIGKILL); }

int th_become(uid_t uid, gid_t gid) {
    return setgroups(0, NULL) == 0 && setgid(gid) == 0 && setuid(uid) == 0;
}

int th_raw_connect(const th_daemon *d) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", d->socket);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int th_raw_send_bytes(int fd, const void *bytes, size_t len) {
    const uint8_t *p = bytes;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int th_raw_send(int fd, Tenferro__Frame *frame) {
    uint8_t *buf;
    size_t len;
    if (tf__frame_encode(frame, UINT32_MAX, &buf, &len) != TF_OK) return -1;
    int rc = th_raw_send_bytes(fd, buf, len);
    free(buf);
    return rc;
}

int th_raw_send_doorbell(int fd, uint64_t seq) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__MailboxDoorbell b = TENFERRO__MAILBOX_DOORBELL__INIT;
    f.seq = seq;
    f.body_case = TENFERRO__FRAME__BODY_MAILBOX_DOORBELL;
    f.mailbox_doorbell = &b;
    return th_raw_send(fd, &f);
}

int th_raw_send_mapped(int fd, uint64_t seq, uint64_t buffer) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Mapped m = TENFERRO__MAPPED__INIT;
    m.buffer = buffer;
    f.seq = seq;
    f.body_case = TENFERRO__FRAME__BODY_MAPPED;
    f.mapped = &m;
    return th_raw_send(fd, &f);
}

/* Reads exactly len bytes, waiting at most timeout_ms overall. */
static int read_exact(int fd, uint8_t *buf, size_t len, int timeout_ms) {
    while (len > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0) return -1;
        ssize_t n = recv(fd, buf, len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/*
 * Reads exactly len bytes like read_exact, with recvmsg, keeping the first
 * descriptor passed along with them in *got (later ones are closed).
 */
static int read_exact_fd(int fd, uint8_t *buf, size_t len, int timeout_ms, int *got) {
    while (len > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0) return -1;
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(4 * sizeof(int))];
        } control;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf,
                           .msg_controllen = sizeof control.buf};
        ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < count; i++) {
                int passed;
                memcpy(&passed, CMSG_DATA(cm) + i * sizeof(int), sizeof passed);
                if (*got < 0)
                    *got = passed;
                else
                    close(passed);
            }
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

Tenferro__Frame *th_raw_recv(int fd, int timeout_ms) {
    uint8_t header[4];
    if (read_exact(fd, header, 4, timeout_ms) != 0) return NULL;
    uint32_t len = tf__frame_peek_length(header);
    uint8_t *body = malloc(len ? len : 1);
    if (!body || read_exact(fd, body, len, timeout_ms) != 0) {
        free(body);
        return NULL;
    }
    Tenferro__Frame *f = tf__frame_decode(body, len);
    free(body);
    return f;
}

Tenferro__Frame *th_raw_recv_fd(int fd, int timeout_ms, int *received_fd) {
    *received_fd = -1;
    uint8_t header[4];
    uint8_t *body = NULL;
    Tenferro__Frame *f = NULL;
    if (read_exact_fd(fd, header, 4, timeout_ms, received_fd) == 0) {
        uint32_t len = tf__frame_peek_length(header);
        body = malloc(len ? len : 1);
        if (body && read_exact_fd(fd, body, len, timeout_ms, received_fd) == 0)
            f = tf__frame_decode(body, len);
    }
    free(body);
    if (!f && *received_fd >= 0) {
        close(*received_fd);
        *received_fd = -1;
    }
    return f;
}

void th_raw_build_download(Tenferro__Frame *f, Tenferro__Download *dl, uint64_t id, uint64_t offset,
                           uint64_t len) {
    tenferro__frame__init(f);
    tenferro__download__init(dl);
    dl->tensor = id;
    dl->offset = offset;
    dl->length = len;
    f->body_case = TENFERRO__FRAME__BODY_DOWNLOAD;
    f->download = dl;
}

void th_raw_build_upload(Tenferro__Frame *f, Tenferro__Upload *up, uint64_t id, int create,
                         tf_dtype dtype, int rank, const int64_t *shape, uint64_t offset,
                         const void *data, size_t len) {
    tenferro__frame__init(f);
    tenferro__upload__init(up);
    up->tensor = id;
    up->create = create;
    up->dtype = (uint32_t)dtype;
    up->n_shape = (size_t)rank;
    up->shape = (int64_t *)shape;
    up->offset = offset;
    up->data.data = (uint8_t *)data;
    up->data.len = len;
    f->body_case = TENFERRO__FRAME__BODY_UPLOAD;
    f->upload = up;
}

void th_raw_build_transfer(Tenferro__Frame *f, Tenferro__Transfer *t, uint32_t direction,
                           uint64_t buffer, uint64_t tensor, uint32_t slot, uint64_t offset,
                           uint64_t bytes) {
    tenferro__frame__init(f);
    tenferro__transfer__init(t);
    t->direction = direction;
    t->buffer = buffer;
    t->tensor = tensor;
    t->slot = slot;
    t->offset = offset;
    t->bytes = bytes;
    f->body_case = TENFERRO__FRAME__BODY_TRANSFER;
    f->transfer = t;
}

int th_raw_closed(int fd, int timeout_ms) {
    uint8_t byte;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0) return 0;
        ssize_t n = recv(fd, &byte, 1, 0);
        if (n == 0) return 1;
        if (n < 0) return errno == ECONNRESET;
        /* Skip whatever else the daemon sent before closing. */
    }
}

/* Sends Hello of protocol `version` as `name` (NULL: none), as a peer daemon when peer, numbered seq. */
static int send_hello(int fd, uint64_t seq, uint32_t version, const char *name, int peer) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = version;
    if (name) h.client_name = (char *)name;
    h.peer_daemon = peer;
    f.seq = seq;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &h;
    return th_raw_send(fd, &f);
}

Tenferro__Frame *th_raw_hello(int fd, uint32_t version) {
    if (send_hello(fd, 1, version, "raw-test", 0) != 0) return NULL;
    return th_raw_recv(fd, 5000);
}

Tenferro__Frame *th_raw_peer_hello(int fd, int timeout_ms) {
    if (send_hello(fd, 1, TENFERRO__PROTOCOL__PROTOCOL_VERSION, NULL, 1) != 0) return NULL;
    return th_raw_recv(fd, timeout_ms);
}

int th_raw_send_hello(int fd, uint64_t seq, const char *name) {
    return send_hello(fd, seq, TENFERRO__PROTOCOL__PROTOCOL_VERSION, name, 0);
}

int th_raw_open(const th_daemon *d, const char *name, uint64_t seq, uint64_t *client_id) {
    int fd = th_raw_connect(d);
    if (fd < 0) return -1;
    int page_fd = -1;
    Tenferro__Frame *r = th_raw_send_hello(fd, seq, name) == 0 ? th_raw_recv_fd(fd, 10000, &page_fd)
                                                               : NULL;
    if (page_fd >= 0) close(page_fd);
    const int ok = r && r->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY;
    if (ok && client_id) *client_id = r->hello_reply->client_id;
    tf__frame_free(r);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

int th_raw_client_open(const th_daemon *d, const char *name, uint64_t *seq, th_raw_client *rc) {
    memset(rc, 0, sizeof *rc);
    rc->fd = th_raw_connect(d);
    if (rc->fd < 0) {
        fprintf(stderr, "harness: cannot connect to %s\n", d->socket);
        return -1;
    }
    int page_fd = -1;
    const uint64_t hello_seq = ++*seq;
    Tenferro__Frame *r = th_raw_send_hello(rc->fd, hello_seq, name) == 0
                             ? th_raw_recv_fd(rc->fd, 10000, &page_fd)
                             : NULL;
    const char *problem = NULL;
    if (!(r && r->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY))
        problem = "no HelloReply";
    else if (r->seq != hello_seq)
        problem = "the HelloReply answers another request";
    else if (page_fd < 0)
        problem = "the HelloReply came without the completion page's descriptor";
    if (!problem) {
        const Tenferro__HelloReply *hr = r->hello_reply;
        rc->client_id = hr->client_id;
        rc->completion_slots = hr->completion_slots;
        rc->mailbox_offset = hr->mailbox_offset;
        rc->ring_offset = hr->ring_offset;
        rc->map_bytes = TF__COMPLETION_MAP_BYTES;
        const size_t ring_end = hr->ring_offset ? (size_t)hr->ring_offset + TF_RING_HEADER_BYTES +
                                                      hr->ring_request_bytes + hr->ring_reply_bytes
                                                : 0;
        if (ring_end > rc->map_bytes) rc->map_bytes = ring_end;
        void *map = mmap(NULL, rc->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
        if (map == MAP_FAILED) {
            fprintf(stderr, "harness: cannot map the completion page: %s\n", strerror(errno));
            problem = "the completion page does not map";
        } else {
            rc->map = map;
            rc->page = (tf__completion_slot *)rc->map;
            rc->box = (tf__mailbox *)(rc->map + TF__MAILBOX_OFFSET);
            if (hr->ring_offset) {
                rc->ring = (tf_ring_header *)(rc->map + hr->ring_offset);
                rc->req = rc->map + hr->ring_offset + TF_RING_HEADER_BYTES;
                rc->req_bytes = hr->ring_request_bytes;
                rc->rep = rc->req + rc->req_bytes;
                rc->rep_bytes = hr->ring_reply_bytes;
            }
        }
    }
    tf__frame_free(r);
    if (page_fd >= 0) close(page_fd);
    if (!problem && th_raw_send_mapped(rc->fd, ++*seq, 0) != 0) problem = "Mapped not sent";
    if (problem) {
        fprintf(stderr, "harness: raw client %s: %s\n", name ? name : "", problem);
        if (rc->map) munmap(rc->map, rc->map_bytes);
        close(rc->fd);
        memset(rc, 0, sizeof *rc);
        rc->fd = -1;
        return -1;
    }
    return 0;
}

void th_raw_client_close(th_raw_client *rc) {
    if (rc->map) munmap(rc->map, rc->map_bytes);
    close(rc->fd);
    rc->map = NULL;
    rc->fd = -1;
}

void th_slot_arm(tf__completion_slot *page, uint32_t slot) {
    __atomic_store_n(&page[slot].status, 0xffffffffu, __ATOMIC_RELAXED);
    __atomic_store_n(&page[slot].state, (uint32_t)TF__SLOT_PENDING, __ATOMIC_RELEASE);
}

tf_status th_slot_take(tf__completion_slot *page, uint32_t slot) {
    tf_status st = (tf_status)__atomic_load_n(&page[slot].status, __ATOMIC_RELAXED);
    __atomic_store_n(&page[slot].state, (uint32_t)TF__SLOT_IDLE, __ATOMIC_RELAXED);
    return st;
}

void th_ring_copy_in(uint8_t *base, uint32_t area, uint64_t pos, const void *src, size_t len) {
    for (size_t i = 0; i < len; i++) base[(pos + i) % area] = ((const uint8_t *)src)[i];
}

void th_ring_copy_out(uint8_t *dst, const uint8_t *base, uint32_t area, uint64_t pos, size_t len) {
    for (size_t i = 0; i < len; i++) dst[i] = base[(pos + i) % area];
}

void th_ring_write(th_raw_client *rc, uint64_t seq, uint64_t after_seq, const void *body,
                   uint32_t len) {
    tf_ring_entry e = {.bytes = len, .seq = seq, .after_seq = after_seq};
    th_ring_copy_in(rc->req, rc->req_bytes, rc->req_head, &e, sizeof e);
    th_ring_copy_in(rc->req, rc->req_bytes, rc->req_head + sizeof e, body, len);
    rc->req_head += (sizeof e + len + 7) & ~(size_t)7;
    __atomic_store_n(&rc->ring->req_head, rc->req_head, __ATOMIC_SEQ_CST);
}

void th_ring_write_frame(th_raw_client *rc, const Tenferro__Frame *f, uint64_t after_seq) {
    size_t len = tenferro__frame__get_packed_size(f);
    uint8_t *body = malloc(len ? len : 1);
    if (!body) abort();
    tenferro__frame__pack(f, body);
    th_ring_write(rc, f->seq, after_seq, body, (uint32_t)len);
    free(body);
}

int th_ring_read(th_raw_client *rc, int timeout_ms, Tenferro__Frame **frame, uint64_t *entry_seq) {
    *frame = NULL;
    for (int waited = 0; __atomic_load_n(&rc->ring->rep_head, __ATOMIC_ACQUIRE) == rc->rep_tail;
         waited++) {
        if (waited >= timeout_ms) return 0;
        th_sleep_ms(1);
    }
    tf_ring_entry e;
    th_ring_copy_out((uint8_t *)&e, rc->rep, rc->rep_bytes, rc->rep_tail, sizeof e);
    uint8_t *body = malloc(e.bytes ? e.bytes : 1);
    if (!body) abort();
    th_ring_copy_out(body, rc->rep, rc->rep_bytes, rc->rep_tail + sizeof e, e.bytes);
    rc->rep_tail += (sizeof e + e.bytes + 7) & ~(uint64_t)7;
    __atomic_store_n(&rc->ring->rep_tail, rc->rep_tail, __ATOMIC_RELEASE);
    *frame = tf__frame_decode(body, e.bytes);
    free(body);
    if (entry_seq) *entry_seq = e.seq;
    return 1;
}

int th_frames_add(th_frames *frames, const Tenferro__Frame *f) {
    uint8_t *bytes;
    size_t n;
    if (tf__frame_encode(f, UINT32_MAX, &bytes, &n) != TF_OK) return -1;
    if (frames->len + n > frames->cap) {
        size_t cap = frames->cap ? frames->cap : 4096;
        while (cap < frames->len + n) cap *= 2;
        uint8_t *p = realloc(frames->bytes, cap);
        if (!p) {
            free(bytes);
            return -1;
        }
        frames->bytes = p;
        frames->cap = cap;
    }
    memcpy(frames->bytes + frames->len, bytes, n);
    frames->len += n;
    free(bytes);
    return 0;
}

void th_frames_free(th_frames *frames) {
    free(frames->bytes);
    memset(frames, 0, sizeof *frames);
}

/* Asks for the status report on a fresh raw connection. */
Tenferro__Frame *th_status_report(const th_daemon *d) {
    int fd = th_raw_connect(d);
    if (fd < 0) return NULL;
    /*
     * A daemon that is slow but alive answers: under ThreadSanitizer on a
     * loaded machine, freeing a GiB tensor alone takes about a second of the
     * loop, and a dead daemon ends the reads at once anyway.
     */
    enum { SLOW_MS = 60000 };
    if (th_raw_send_hello(fd, 1, "raw-test") == 0) tf__frame_free(th_raw_recv(fd, SLOW_MS));
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__StatusRequest body = TENFERRO__STATUS_REQUEST__INIT;
    f.seq = 2;
    f.body_case = TENFERRO__FRAME__BODY_STATUS_REQUEST;
    f.status_request = &body;
    Tenferro__Frame *reply = th_raw_send(fd, &f) == 0 ? th_raw_recv(fd, SLOW_MS) : NULL;
    close(fd);
    if (reply && reply->body_case != TENFERRO__FRAME__BODY_STATUS_REPLY) {
        tf__frame_free(reply);
        return NULL;
    }
    return reply;
}

uint64_t th_report_counter(const Tenferro__StatusReply *report, const char *name) {
    for (size_t i = 0; i < report->n_counters; i++)
        if (strcmp(report->counters[i]->name, name) == 0) return report->counters[i]->value;
    return 0;
}

const Tenferro__ClientInfo *th_find_client(const Tenferro__Frame *status, uint64_t client_id) {
    for (size_t i = 0; i < status->status_reply->n_clients; i++)
        if (status->status_reply->clients[i]->client_id == client_id)
            return status->status_reply->clients[i];
    return NULL;
}

uint64_t th_counter(const th_daemon *d, const char *name) {
    Tenferro__Frame *r = th_status_report(d);
    if (!r) {
        fprintf(stderr, "harness: no status report\n");
        abort();
    }
    uint64_t value = UINT64_MAX;
    for (size_t i = 0; i < r->status_reply->n_counters; i++)
        if (strcmp(r->status_reply->counters[i]->name, name) == 0) value = r->status_reply->counters[i]->value;
    tf__frame_free(r);
    if (value == UINT64_MAX) {
        fprintf(stderr, "harness: no counter named %s\n", name);
        abort();
    }
    return value;
}

int th_wait_counter(const th_daemon *d, const char *name, uint64_t value, int timeout_ms) {
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if (th_counter(d, name) == value) return 1;
        th_sleep_ms(10);
    }
    return 0;
}

int th_client_count(const th_daemon *d) {
    Tenferro__Frame *r = th_status_report(d);
    if (!r) return -1;
    /* The status request's own connection is listed too. */
    int n = (int)r->status_reply->n_clients - 1;
    tf__frame_free(r);
    return n;
}

unsigned th_seed(void) {
    static unsigned seed;
    static int done;
    if (!done) {
        const char *env = getenv("TENFERRO_TEST_SEED");
        seed = env ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
        fprintf(stderr, "harness: random inputs from TENFERRO_TEST_SEED=%u\n", seed);
        srand(seed);
        done = 1;
    }
    return seed;
}

/* One random value in [-1,-0.1] U [0.1,1]. */
static double signed_value(void) {
    double m = 0.1 + 0.9 * ((double)rand() / RAND_MAX);
    return (rand() & 1) ? m : -m;
}

/* Writes n reals or complexes produced by gen() into buf. */
static void fill_with(tf_dtype dtype, size_t n, void *buf, double (*gen)(void)) {
    th_seed();
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case TF_F32: ((float *)buf)[i] = (float)gen(); break;
        case TF_F64: ((double *)buf)[i] = gen(); break;
        case TF_C64: ((float *)buf)[2 * i] = (float)gen(); ((float *)buf)[2 * i + 1] = (float)gen(); break;
        case TF_C128: ((double *)buf)[2 * i] = gen(); ((double *)buf)[2 * i + 1] = gen(); break;
        }
    }
}

static double positive_value(void) { return 0.1 + 1.9 * ((double)rand() / RAND_MAX); }

void th_fill_random(tf_dtype dtype, size_t n, void *buf) { fill_with(dtype, n, buf, signed_value); }
void th_fill_positive(tf_dtype dtype, size_t n, void *buf) { fill_with(dtype, n, buf, positive_value); }

double th_max_rel_diff(tf_dtype dtype, size_t n, const void *a, const void *b, double floor) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double diff, ref;
        switch (dtype) {
        case TF_F32: diff = fabs((double)((const float *)a)[i] - ((const float *)b)[i]); ref = fabs(((const float *)b)[i]); break;
        case TF_F64: diff = fabs(((const double *)a)[i] - ((const double *)b)[i]); ref = fabs(((const double *)b)[i]); break;
        case TF_C64: {
            const float *x = a, *y = b;
            diff = cabs((x[2 * i] - y[2 * i]) + I * (x[2 * i + 1] - y[2 * i + 1]));
            ref = cabs(y[2 * i] + I * y[2 * i + 1]);
            break;
        }
        case TF_C128: default: {
            const double *x = a, *y = b;
            diff = cabs((x[2 * i] - y[2 * i]) + I * (x[2 * i + 1] - y[2 * i + 1]));
            ref = cabs(y[2 * i] + I * y[2 * i + 1]);
            break;
        }
        }
        if (isnan(diff)) return INFINITY;
        double rel = diff / (ref > floor ? ref : floor);
        if (rel > worst) worst = rel;
    }
    return worst;
}

double th_tolerance(tf_dtype dtype) { return (dtype == TF_F32 || dtype == TF_C64) ? 1e-5 : 1e-12; }

void *th_xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "harness: out of memory for %zu bytes\n", bytes);
        abort();
    }
    return p;
}

uint64_t th_splitmix(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int th_is_complex(tf_dtype dtype) { return dtype == TF_C64 || dtype == TF_C128; }

tf_dtype th_real_of(tf_dtype dtype) {
    return dtype == TF_C64 ? TF_F32 : dtype == TF_C128 ? TF_F64 : dtype;
}

tf_dtype th_complex_of(tf_dtype dtype) {
    return dtype == TF_F32 ? TF_C64 : dtype == TF_F64 ? TF_C128 : dtype;
}

size_t th_numel(int rank, const int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)shape[i];
    return n;
}

void th_widen(tf_dtype dtype, size_t n, const void *buf, double complex *z) {
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case TF_F32: z[i] = ((const float *)buf)[i]; break;
        case TF_F64: z[i] = ((const double *)buf)[i]; break;
        case TF_C64: z[i] = CMPLX(((const float *)buf)[2 * i], ((const float *)buf)[2 * i + 1]); break;
        case TF_C128: z[i] = CMPLX(((const double *)buf)[2 * i], ((const double *)buf)[2 * i + 1]); break;
        }
    }
}

void th_narrow(tf_dtype dtype, size_t n, const double complex *z, void *buf) {
    for (size_t i = 0; i < n; i++) {
        switch (dtype) {
        case TF_F32: ((float *)buf)[i] = (float)creal(z[i]); break;
        case TF_F64: ((double *)buf)[i] = creal(z[i]); break;
        case TF_C64:
            ((float *)buf)[2 * i] = (float)creal(z[i]);
            ((float *)buf)[2 * i + 1] = (float)cimag(z[i]);
            break;
        case TF_C128:
            ((double *)buf)[2 * i] = creal(z[i]);
            ((double *)buf)[2 * i + 1] = cimag(z[i]);
            break;
        }
    }
}

void th_ref_matmul(int m, int k, int n, const double *a, const double *b, double *out) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int l = 0; l < k; l++) s += a[(size_t)i * k + l] * b[(size_t)l * n + j];
            out[(size_t)i * n + j] = s;
        }
}

tf_status th_upload_random(tf_client *c, tf_dtype dtype, int rank, const int64_t *shape,
                           void **host, tf_tensor *t) {
    const size_t n = th_numel(rank, shape);
    void *v = th_xmalloc(n * tf_dtype_size(dtype));
    th_fill_random(dtype, n, v);
    tf_status st = tf_upload(c, dtype, rank, shape, v, t);
    if (st != TF_OK) {
        free(v);
        v = NULL;
    }
    *host = v;
    return st;
}

tf_status th_queue_nothing(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

int th_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int th_write_config(char *path, size_t len, const char *kind, const char *tag, const char *text) {
    snprintf(path, len, "/tmp/tf-test-%s-%d-%s.conf", kind, (int)getpid(), tag);
    return th_write_file(path, text);
}

/* ---- Result checks (the CK_RESULT macros in harness.h turn a problem into a failed test) ---- */

int th_result_problem(const Tenferro__Result *r, tf_status status, const char *needle, char *why,
                      size_t n) {
    if (r == NULL) {
        snprintf(why, n, "reply carries no result");
        return 1;
    }
    if (r->status != (uint32_t)status) {
        snprintf(why, n, "status %s (%s), expected %s", tf_status_name((tf_status)r->status),
                 r->message ? r->message : "", tf_status_name(status));
        return 1;
    }
    if (status != TF_OK) {
        if (!(r->message && strlen(r->message) >= 10)) {
            snprintf(why, n, "status %s came without a readable message", tf_status_name(status));
            return 1;
        }
        if (needle && strstr(r->message, needle) == NULL) {
            snprintf(why, n, "message \"%s\" does not mention \"%s\"", r->message, needle);
            return 1;
        }
    }
    return 0;
}

int th_reply_problem(const Tenferro__Frame *reply, tf_status status, const char *needle, char *why,
                     size_t n) {
    if (!(reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT)) {
        snprintf(why, n, "expected a Result, got body %d", reply ? (int)reply->body_case : -1);
        return 1;
    }
    return th_result_problem(reply->result, status, needle, why, n);
}

int th_run_ctl(const th_daemon *d, char *out, size_t cap, const char *cmd, const char *arg) {
    const char *args[] = {"--socket", d->socket, cmd, arg, NULL};
    return th_run_ctl_args(out, cap, args);
}

/* Runs the tenferroctl next to the daemon binary, its output captured (harness.h). */
int th_run_ctl_args(char *out, size_t cap, const char *const *args) {
    const char *daemon = getenv("TENFERRO_DAEMON");
    char dir[512], ctl[600];
    snprintf(dir, sizeof dir, "%s", daemon && daemon[0] ? daemon : "build/tenferrod");
    snprintf(ctl, sizeof ctl, "%s/tenferroctl", dirname(dir));
    const char *argv[32];
    int n = 0;
    argv[n++] = ctl;
    while (n < 31 && args[n - 1]) {
        argv[n] = args[n - 1];
        n++;
    }
    argv[n] = NULL;
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        close(p[0]);
        close(p[1]);
        execv(ctl, (char *const *)argv);
        fprintf(stderr, "cannot run %s: %s\n", ctl, strerror(errno));
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    for (;;) {
        char sink[4096]; /* what does not fit in out is read and dropped */
        char *dst = len + 1 < cap ? out + len : sink;
        ssize_t n = read(p[0], dst, dst == sink ? sizeof sink : cap - 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (dst != sink) len += (size_t)n;
    }
    out[len] = '\0';
    close(p[0]);
    return th_wait(pid);
}

/* ---- JSON ---- */

/*
 * A small JSON checker (RFC 8259 grammar; strings must hold no raw control
 * characters). Each parse_* advances *p past one value and returns 1, or 0 at
 * the first error.
 */
static int parse_value(const char **p, int depth);

static void skip_ws(const char **p) {
    while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r') (*p)++;
}

/* A string: escapes must be JSON's, raw control characters are refused. */
static int parse_string(const char **p) {
    if (*(*p)++ != '"') return 0;
    for (;;) {
        unsigned char ch = (unsigned char)*(*p)++;
        if (ch == '"') return 1;
        if (ch < 0x20) return 0; /* raw control character, or the end of the text */
        if (ch != '\\') continue;
        ch = (unsigned char)*(*p)++;
        if (ch == 'u') {
            for (int i = 0; i < 4; i++, (*p)++)
                if (!strchr("0123456789abcdefABCDEF", **p) || !**p) return 0;
        } else if (!ch || !strchr("\"\\/bfnrt", ch)) {
            return 0;
        }
    }
}

/* A number, loosely: a digit after an optional minus, then digits, '.', 'e' and signs. */
static int parse_number(const char **p) {
    const char *start = *p;
    if (**p == '-') (*p)++;
    if (**p < '0' || **p > '9') return 0;
    while ((**p >= '0' && **p <= '9') || strchr(".eE+-", **p) != NULL) {
        if (!**p) break;
        (*p)++;
    }
    return *p > start;
}

/* An object (close = '}', members "key": value) or an array (close = ']'). */
static int parse_members(const char **p, char close, int depth) {
    (*p)++;
    skip_ws(p);
    if (**p == close) {
        (*p)++;
        return 1;
    }
    for (;;) {
        skip_ws(p);
        if (close == '}') {
            if (!parse_string(p)) return 0;
            skip_ws(p);
            if (*(*p)++ != ':') return 0;
        }
        if (!parse_value(p, depth + 1)) return 0;
        skip_ws(p);
        char ch = *(*p)++;
        if (ch == close) return 1;
        if (ch != ',') return 0;
    }
}

/* Any value, nested at most 32 deep. */
static int parse_value(const char **p, int depth) {
    if (depth > 32) return 0;
    skip_ws(p);
    switch (**p) {
    case '{': return parse_members(p, '}', depth);
    case '[': return parse_members(p, ']', depth);
    case '"': return parse_string(p);
    case 't': return strncmp(*p, "true", 4) == 0 ? (*p += 4, 1) : 0;
    case 'f': return strncmp(*p, "false", 5) == 0 ? (*p += 5, 1) : 0;
    case 'n': return strncmp(*p, "null", 4) == 0 ? (*p += 4, 1) : 0;
    default: return parse_number(p);
    }
}

int th_json_valid(const char *text) {
    const char *p = text;
    if (!parse_value(&p, 0)) return 0;
    skip_ws(&p);
    return *p == '\0';
}
