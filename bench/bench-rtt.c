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
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench-common.h"

#define WARMUP 2000
#define ITERS 20000
#define BLOCKS 4

static const char *const NAME = "bench-rtt";

static tf_status empty_burst(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
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

    bench_echo echo;
    bench_echo_start(NAME, &echo);

    double *raw = malloc(sizeof(double) * ITERS);
    double *tfd = malloc(sizeof(double) * ITERS);
    if (!raw || !tfd) bench_die(NAME, "out of memory");

    bench_echo_rounds(NAME, &echo, WARMUP, NULL);
    daemon_rounds(c, WARMUP, NULL);
    const int per_block = ITERS / BLOCKS;
    for (int b = 0; b < BLOCKS; b++) {
        bench_echo_rounds(NAME, &echo, per_block, raw + b * per_block);
        daemon_rounds(c, per_block, tfd + b * per_block);
    }

    bench_echo_stop(NAME, &echo);

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
