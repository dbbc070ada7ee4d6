/*
 * bench-transfer: the transfer routes (docs/transfers.md) against in-process
 * copies of the same bytes, on the CPU daemon.
 *
 *   cpu_h2d_<size>, cpu_d2h_<size>, size 256m, 8m, 1m  (GB/s, 1 GB = 1e9 B)
 *     tenferrod: a pending transfer from a pinned buffer into an existing
 *                tensor (h2d: tf_upload_pending) or back (d2h:
 *                tf_download_pending), from the submit to the wait's return;
 *                the same buffer and tensor every time.
 *     baseline:  memcpy of the same bytes between two pre-touched buffers in
 *                this process (what the daemon's CPU backend does at best).
 *   staged_256m  (GB/s)
 *     tenferrod: tf_upload of a 256 MiB tensor from ordinary memory: the
 *                blocking route, which creates the tensor and copies the
 *                bytes into the client's staging buffer before the transfer.
 *     baseline:  the zero-copy route: a pending upload from a pinned buffer
 *                the caller filled, into an existing tensor (cpu_h2d_256m).
 *                '#' lines add the staged download (tf_download_into of a
 *                reused buffer) against the pending download, and split the
 *                staged upload's time: the memcpy into the staging buffer, the
 *                transfer, and the rest (the daemon allocating and first
 *                touching the new tensor, which tf_upload pays on any route).
 *   pending_fixed  (µs): submit + wait of an 8-byte pending upload, against a
 *                raw 64-byte Unix-socket ping-pong with a forked echo child.
 *   is_ready  (ns per call): tf_pending_is_ready on a completed transfer,
 *                against a call of an empty function through a volatile
 *                pointer (so it is neither inlined nor removed).
 *   buffer_reuse  (ms per 100 transfers of 8 MiB, each filled first)
 *     tenferrod: one pinned buffer reused for all 100 pending uploads.
 *     baseline:  a new pinned buffer created (and freed) for every upload.
 *
 * Each figure is the median of its repetitions, the two sides taking turns
 * (buffer_reuse: the best of 3 runs of 100). Every route's bytes are checked
 * once after its timed runs (a pending download and a blocking download
 * compared with what was sent); a mismatch ends the benchmark with status 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench-common.h"

static const char *const NAME = "bench-transfer";

/* The sizes of the h2d/d2h lines and how many repetitions each gets. */
static const struct {
    const char *tag;
    size_t bytes;
    int reps;
} SIZES[] = {{"256m", (size_t)256 << 20, 7}, {"8m", (size_t)8 << 20, 60}, {"1m", (size_t)1 << 20, 300}};

#define MAX_REPS 300
#define FIXED_WARMUP 1000
#define FIXED_ITERS 10000
#define FIXED_BLOCKS 4
#define READY_CALLS 10000000L
#define REUSE_BYTES ((size_t)8 << 20)
#define REUSE_TRANSFERS 100
#define REUSE_RUNS 3

/* malloc that ends the benchmark when it fails, touching every page. */
static void *xmalloc_touched(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) bench_die(NAME, "out of memory for %zu bytes", bytes);
    memset(p, 0x11, bytes);
    return p;
}

/* The h2d and d2h lines of one size; the staged line too for the largest. */
static void throughput(tf_client *c, size_t bytes, int reps, const char *tag, double *src,
                       double *dst) {
    const size_t n = bytes / sizeof(double);
    double h2d[MAX_REPS], d2h[MAX_REPS], cpy_up[MAX_REPS], cpy_down[MAX_REPS];
    bench_fill(src, n, 1);
    tf_tensor t = bench_tensor(NAME, c, src, n);
    tf_pinned_buffer *b = bench_pinned(NAME, c, bytes);
    bench_fill(tf_pinned_buffer_data(b), n, 2);
    bench_pending_ns(NAME, c, 1, &b, &t); /* warm: the first copy of each direction is untimed */
    bench_pending_ns(NAME, c, 0, &b, &t);
    for (int r = 0; r < reps; r++) {
        h2d[r] = bench_pending_ns(NAME, c, 1, &b, &t);
        uint64_t t0 = bench_now_ns();
        memcpy(dst, src, bytes);
        cpy_up[r] = (double)(bench_now_ns() - t0);
        d2h[r] = bench_pending_ns(NAME, c, 0, &b, &t);
        t0 = bench_now_ns();
        memcpy(src, dst, bytes);
        cpy_down[r] = (double)(bench_now_ns() - t0);
    }
    bench_expect_tensor(NAME, c, t, tf_pinned_buffer_data(b), bytes, "pending round trip");
    char name[32];
    snprintf(name, sizeof name, "cpu_h2d_%s", tag);
    bench_report(name, (double)bytes / bench_summary(h2d, (size_t)reps, BENCH_MEDIAN),
                 (double)bytes / bench_summary(cpy_up, (size_t)reps, BENCH_MEDIAN), "GB/s");
    snprintf(name, sizeof name, "cpu_d2h_%s", tag);
    bench_report(name, (double)bytes / bench_summary(d2h, (size_t)reps, BENCH_MEDIAN),
                 (double)bytes / bench_summary(cpy_down, (size_t)reps, BENCH_MEDIAN), "GB/s");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/*
 * staged_256m: the blocking routes from and into ordinary memory against the
 * pending routes from and into a pinned buffer, all 256 MiB.
 */
static void staged(tf_client *c, size_t bytes, int reps, double *src, double *dst) {
    const size_t n = bytes / sizeof(double);
    double up[MAX_REPS], zero_up[MAX_REPS], down[MAX_REPS], zero_down[MAX_REPS], copy[MAX_REPS];
    bench_fill(src, n, 3);
    tf_tensor t = bench_tensor(NAME, c, src, n);
    tf_pinned_buffer *b = bench_pinned(NAME, c, bytes);
    memcpy(tf_pinned_buffer_data(b), src, bytes);
    void *into = dst;
    size_t cap = bytes;
    bench_upload_ns(NAME, c, src, n);
    for (int r = 0; r < reps; r++) {
        up[r] = bench_upload_ns(NAME, c, src, n);
        zero_up[r] = bench_pending_ns(NAME, c, 1, &b, &t);
        uint64_t t0 = bench_now_ns();
        bench_check(NAME, c, tf_download_into(c, t, &into, &cap), "tf_download_into");
        down[r] = (double)(bench_now_ns() - t0);
        zero_down[r] = bench_pending_ns(NAME, c, 0, &b, &t);
        t0 = bench_now_ns();
        memcpy(dst, src, bytes);
        copy[r] = (double)(bench_now_ns() - t0);
    }
    if (into != dst || memcmp(into, src, bytes) != 0) bench_die(NAME, "staged download differs");
    double up_med = bench_summary(up, (size_t)reps, BENCH_MEDIAN);
    double down_med = bench_summary(down, (size_t)reps, BENCH_MEDIAN);
    double zd_med = bench_summary(zero_down, (size_t)reps, BENCH_MEDIAN);
    double zu_med = bench_summary(zero_up, (size_t)reps, BENCH_MEDIAN);
    double copy_med = bench_summary(copy, (size_t)reps, BENCH_MEDIAN);
    printf("# staged_d2h_256m: tf_download_into %.3f GB/s, pending download %.3f GB/s\n",
           (double)bytes / down_med, (double)bytes / zd_med);
    printf("# staged_256m split: tf_upload %.1f ms = memcpy into staging ~%.1f + transfer ~%.1f + "
           "creating a new tensor in the daemon (allocation, first touch) ~%.1f\n",
           up_med / 1e6, copy_med / 1e6, zu_med / 1e6, (up_med - copy_med - zu_med) / 1e6);
    bench_report("staged_256m", (double)bytes / up_med, (double)bytes / zu_med, "GB/s");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/* pending_fixed: an 8-byte pending upload against a raw socket round trip, in alternating blocks. */
static void fixed_cost(tf_client *c) {
    static double raw[FIXED_ITERS], tfd[FIXED_ITERS];
    double x = 1.5;
    tf_tensor t = bench_tensor(NAME, c, &x, 1);
    tf_pinned_buffer *b = bench_pinned(NAME, c, sizeof x);
    memcpy(tf_pinned_buffer_data(b), &x, sizeof x);
    bench_echo echo;
    bench_echo_start(NAME, &echo);
    bench_echo_rounds(NAME, &echo, FIXED_WARMUP, NULL);
    for (int i = 0; i < FIXED_WARMUP; i++) bench_pending_ns(NAME, c, 1, &b, &t);
    const int per_block = FIXED_ITERS / FIXED_BLOCKS;
    for (int k = 0; k < FIXED_BLOCKS; k++) {
        bench_echo_rounds(NAME, &echo, per_block, raw + k * per_block);
        for (int i = 0; i < per_block; i++)
            tfd[k * per_block + i] = bench_pending_ns(NAME, c, 1, &b, &t) / 1e3;
    }
    bench_echo_stop(NAME, &echo);
    bench_expect_tensor(NAME, c, t, &x, sizeof x, "8-byte upload");
    double tfd_med = bench_summary(tfd, FIXED_ITERS, BENCH_MEDIAN);
    double raw_med = bench_summary(raw, FIXED_ITERS, BENCH_MEDIAN);
    printf("# pending_fixed: p90 tenferrod=%.2f baseline=%.2f us\n", tfd[FIXED_ITERS * 9 / 10],
           raw[FIXED_ITERS * 9 / 10]);
    bench_report("pending_fixed", tfd_med, raw_med, "us");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/* The baseline of is_ready: a call that does nothing, made through a volatile pointer. */
__attribute__((noinline)) static int empty_call(const tf_pending *p) {
    __asm__ __volatile__("" ::: "memory");
    return p != NULL;
}

/* is_ready against an empty call, both READY_CALLS times on a completed transfer. */
static void ready_cost(tf_client *c) {
    double x = 2.5;
    tf_tensor t = bench_tensor(NAME, c, &x, 1);
    tf_pinned_buffer *b = bench_pinned(NAME, c, sizeof x);
    tf_pending *p = NULL;
    bench_check(NAME, c, tf_download_pending(c, t, b, &p), "tf_download_pending");
    while (!tf_pending_is_ready(p)) continue;
    int (*volatile ready)(const tf_pending *) = tf_pending_is_ready;
    int (*volatile empty)(const tf_pending *) = empty_call;
    double ns[2][5];
    long hits = 0;
    for (int r = 0; r < 5; r++) {
        for (int side = 0; side < 2; side++) {
            int (*fn)(const tf_pending *) = side ? empty : ready;
            uint64_t t0 = bench_now_ns();
            for (long i = 0; i < READY_CALLS; i++) hits += fn(p);
            ns[side][r] = (double)(bench_now_ns() - t0) / READY_CALLS;
        }
    }
    if (hits != 10 * READY_CALLS) bench_die(NAME, "is_ready said not ready on a completed transfer");
    bench_report("is_ready", bench_summary(ns[0], 5, BENCH_MEDIAN),
                 bench_summary(ns[1], 5, BENCH_MEDIAN), "ns");
    bench_check(NAME, c, tf_pending_wait(p, &t, &b), "tf_pending_wait");
    if (*(double *)tf_pinned_buffer_data(b) != x) bench_die(NAME, "8-byte download differs");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/* One run of buffer_reuse: 100 filled-then-uploaded 8 MiB transfers; returns ms. */
static double reuse_run(tf_client *c, tf_tensor *t, int reuse) {
    const size_t n = REUSE_BYTES / sizeof(double);
    tf_pinned_buffer *b = reuse ? bench_pinned(NAME, c, REUSE_BYTES) : NULL;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < REUSE_TRANSFERS; i++) {
        if (!reuse) b = bench_pinned(NAME, c, REUSE_BYTES);
        bench_fill(tf_pinned_buffer_data(b), n, i);
        bench_pending_ns(NAME, c, 1, &b, t);
        if (!reuse) bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    }
    double ms = (double)(bench_now_ns() - t0) / 1e6;
    if (reuse) bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    return ms;
}

/* buffer_reuse: one buffer for 100 transfers against a new buffer for each. */
static void reuse_cost(tf_client *c, double *host) {
    const size_t n = REUSE_BYTES / sizeof(double);
    bench_fill(host, n, 0);
    tf_tensor t = bench_tensor(NAME, c, host, n);
    double reused[REUSE_RUNS], fresh[REUSE_RUNS];
    for (int r = 0; r < REUSE_RUNS; r++) {
        reused[r] = reuse_run(c, &t, 1);
        fresh[r] = reuse_run(c, &t, 0);
    }
    bench_fill(host, n, REUSE_TRANSFERS - 1);
    bench_expect_tensor(NAME, c, t, host, REUSE_BYTES, "buffer_reuse's last upload");
    bench_report("buffer_reuse", bench_summary(reused, REUSE_RUNS, BENCH_BEST),
                 bench_summary(fresh, REUSE_RUNS, BENCH_BEST), "ms");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

int main(int argc, char **argv) {
    tf_client *c = bench_connect(argc, argv);
    const size_t largest = SIZES[0].bytes;
    double *src = xmalloc_touched(largest), *dst = xmalloc_touched(largest);
    for (size_t k = 0; k < sizeof SIZES / sizeof *SIZES; k++)
        throughput(c, SIZES[k].bytes, SIZES[k].reps, SIZES[k].tag, src, dst);
    staged(c, largest, SIZES[0].reps, src, dst);
    fixed_cost(c);
    ready_cost(c);
    reuse_cost(c, src);
    free(src);
    free(dst);
    tf_disconnect(c);
    return 0;
}
