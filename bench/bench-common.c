/*
 * The benchmarks' shared helpers (see bench-common.h). Kept free of any
 * knowledge of particular operations so every benchmark reads the same way:
 * connect, measure both sides, report one BENCH line.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench-common.h"

uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *bench_socket_path(int argc, char **argv) {
    if (argc > 1 && argv[1][0]) return argv[1];
    const char *env = getenv("TENFERRO_SOCKET");
    return env && env[0] ? env : NULL;
}

void bench_die(const char *bench, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void bench_check(const char *bench, tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    bench_die(bench, "%s failed: %s: %s", what, tf_status_name(st),
              c ? tf_client_last_error(c) : "");
}

tf_client *bench_connect(int argc, char **argv) {
    tf_client *c = NULL;
    tf_status st = tf_connect(bench_socket_path(argc, argv), &c);
    bench_check(argv[0], c, st, "tf_connect");
    return c;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_summary(double *samples, size_t n, bench_stat stat) {
    if (n == 0) return 0;
    qsort(samples, n, sizeof *samples, cmp_double);
    if (stat == BENCH_BEST) return samples[0];
    return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

double bench_repeat(int k, bench_stat stat, double (*fn)(void *arg), void *arg) {
    double v[64];
    if (k > 64) k = 64;
    for (int i = 0; i < k; i++) v[i] = fn(arg);
    return bench_summary(v, (size_t)k, stat);
}

void bench_report(const char *name, double tenferrod, double baseline, const char *unit) {
    printf("BENCH %s tenferrod=%.3f baseline=%.3f unit=%s\n", name, tenferrod, baseline, unit);
    if (baseline > 0) printf("# %s: tenferrod/baseline = %.2fx\n", name, tenferrod / baseline);
    fflush(stdout);
}

void bench_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Writes or reads exactly n bytes on a blocking socket; 0 on success. */
static int xfer_all(int fd, void *buf, size_t n, int writing) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The echo child: returns every message until the parent closes its end. */
static void echo_child(int fd) {
    char buf[BENCH_PING_BYTES];
    while (xfer_all(fd, buf, sizeof buf, 0) == 0)
        if (xfer_all(fd, buf, sizeof buf, 1) != 0) break;
    _exit(0);
}

void bench_echo_start(const char *bench, bench_echo *e) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        bench_die(bench, "socketpair: %s", strerror(errno));
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) bench_die(bench, "fork: %s", strerror(errno));
    if (child == 0) {
        close(sv[0]);
        echo_child(sv[1]);
    }
    close(sv[1]);
    signal(SIGPIPE, SIG_IGN);
    e->fd = sv[0];
    e->pid = (int)child;
}

void bench_echo_rounds(const char *bench, bench_echo *e, int n, double *out) {
    char buf[BENCH_PING_BYTES];
    memset(buf, 0x5a, sizeof buf);
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();
        if (xfer_all(e->fd, buf, sizeof buf, 1) != 0 || xfer_all(e->fd, buf, sizeof buf, 0) != 0)
            bench_die(bench, "the echo child went away: %s", strerror(errno));
        uint64_t t1 = bench_now_ns();
        if (out) out[i] = (double)(t1 - t0) / 1e3;
    }
}

void bench_echo_stop(const char *bench, bench_echo *e) {
    close(e->fd);
    int status = 0;
    waitpid((pid_t)e->pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bench_die(bench, "the echo child failed");
}

double bench_pending_ns(const char *bench, tf_client *c, int upload, tf_pinned_buffer **buffer,
                        tf_tensor *tensor) {
    tf_pending *p = NULL;
    uint64_t t0 = bench_now_ns();
    tf_status st = upload ? tf_upload_pending(c, *buffer, *tensor, &p)
                          : tf_download_pending(c, *tensor, *buffer, &p);
    bench_check(bench, c, st, upload ? "tf_upload_pending" : "tf_download_pending");
    bench_check(bench, c, tf_pending_wait(p, tensor, buffer), "tf_pending_wait");
    return (double)(bench_now_ns() - t0);
}

double bench_upload_ns(const char *bench, tf_client *c, const double *data, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    tf_tensor t = 0;
    uint64_t t0 = bench_now_ns();
    bench_check(bench, c, tf_upload(c, TF_F64, 1, shape, data, &t), "tf_upload");
    double ns = (double)(bench_now_ns() - t0);
    bench_check(bench, c, tf_tensor_free(c, t), "tf_tensor_free");
    return ns;
}

tf_pinned_buffer *bench_pinned(const char *bench, tf_client *c, size_t bytes) {
    tf_pinned_buffer *b = NULL;
    bench_check(bench, c, tf_pinned_buffer_new(c, bytes, &b), "tf_pinned_buffer_new");
    return b;
}

tf_tensor bench_tensor(const char *bench, tf_client *c, const double *data, size_t n) {
    int64_t shape[1] = {(int64_t)n};
    tf_tensor t = 0;
    bench_check(bench, c, tf_upload(c, TF_F64, 1, shape, data, &t), "tf_upload");
    return t;
}

void bench_fill(double *x, size_t n, int round) {
    for (size_t i = 0; i < n; i++) x[i] = (double)(i % 1000) + 0.25 * round;
}

void bench_expect_tensor(const char *bench, tf_client *c, tf_tensor t, const void *want,
                         size_t bytes, const char *what) {
    void *got = NULL;
    size_t n = 0;
    bench_check(bench, c, tf_download(c, t, &got, &n), "tf_download");
    if (n != bytes || memcmp(got, want, bytes) != 0) bench_die(bench, "%s: the bytes differ", what);
    free(got);
}
