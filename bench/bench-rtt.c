/*
 * bench-rtt: the cost of one empty scoped session, against the floor that any
 * daemon on a Unix socket has to pay.
 *
 *   tenferrod: tf_with_session with a callback that queues nothing, so the
 *              client sends one empty final Submit and waits for its Result.
 *   baseline:  a raw 64-byte ping-pong between this process and a forked
 *              child over a socketpair (blocking write, blocking read).
 *
 * Both sides run ITERS timed round trips after WARMUP untimed ones, in
 * alternating blocks so drift of the machine hits both alike; each round trip
 * is timed on its own and the median is reported in microseconds.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench-common.h"

#define WARMUP 2000
#define ITERS 20000
#define BLOCKS 4
#define PING_BYTES 64

static const char *const NAME = "bench-rtt";

static tf_status empty_burst(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
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

/* The child: echoes every 64-byte message until the parent closes its end. */
static void echo_child(int fd) {
    char buf[PING_BYTES];
    while (xfer_all(fd, buf, sizeof buf, 0) == 0)
        if (xfer_all(fd, buf, sizeof buf, 1) != 0) break;
    _exit(0);
}

/* Times n ping-pongs into out[] (µs each); untimed when out is NULL. */
static void raw_rounds(int fd, int n, double *out) {
    char buf[PING_BYTES];
    memset(buf, 0x5a, sizeof buf);
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();
        if (xfer_all(fd, buf, sizeof buf, 1) != 0 || xfer_all(fd, buf, sizeof buf, 0) != 0)
            bench_die(NAME, "the echo child went away: %s", strerror(errno));
        uint64_t t1 = bench_now_ns();
        if (out) out[i] = (double)(t1 - t0) / 1e3;
    }
}

/* Times n empty scoped sessions into out[] (µs each); untimed when out is NULL. */
static void daemon_rounds(tf_client *c, int n, double *out) {
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();
        tf_status st = tf_with_session(c, empty_burst, NULL);
        uint64_t t1 = bench_now_ns();
        bench_check(NAME, c, st, "tf_with_session");
        if (out) out[i] = (double)(t1 - t0) / 1e3;
    }
}

int main(int argc, char **argv) {
    tf_client *c = bench_connect(argc, argv);

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        bench_die(NAME, "socketpair: %s", strerror(errno));
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) bench_die(NAME, "fork: %s", strerror(errno));
    if (child == 0) {
        close(sv[0]);
        echo_child(sv[1]);
    }
    close(sv[1]);
    signal(SIGPIPE, SIG_IGN);

    double *raw = malloc(sizeof(double) * ITERS);
    double *tfd = malloc(sizeof(double) * ITERS);
    if (!raw || !tfd) bench_die(NAME, "out of memory");

    raw_rounds(sv[0], WARMUP, NULL);
    daemon_rounds(c, WARMUP, NULL);
    const int per_block = ITERS / BLOCKS;
    for (int b = 0; b < BLOCKS; b++) {
        raw_rounds(sv[0], per_block, raw + b * per_block);
        daemon_rounds(c, per_block, tfd + b * per_block);
    }

    close(sv[0]);
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bench_die(NAME, "the echo child failed");

    double raw_med = bench_summary(raw, ITERS, BENCH_MEDIAN);
    double tfd_med = bench_summary(tfd, ITERS, BENCH_MEDIAN);
    printf("# rtt: %d round trips each after %d warm-up; p90 tenferrod=%.2f baseline=%.2f us\n",
           ITERS, WARMUP, tfd[ITERS * 9 / 10], raw[ITERS * 9 / 10]);
    bench_report("rtt", tfd_med, raw_med, "us");

    free(raw);
    free(tfd);
    tf_disconnect(c);
    return 0;
}
