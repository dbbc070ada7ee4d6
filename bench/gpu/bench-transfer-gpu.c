/*
 * bench-transfer-gpu: pending transfers through a daemon on a CUDA device
 * (docs/transfers.md) against cudaMemcpy in this process.
 *
 *   h2d_<size>, d2h_<size>, size 256m, 8m, 1m  (GB/s, 1 GB = 1e9 B)
 *     tenferrod: a pending transfer from a pinned buffer (the daemon's memfd,
 *                registered with cudaHostRegister once, at creation) into an
 *                existing device tensor (h2d: tf_upload_pending) or back
 *                (d2h: tf_download_pending), from the submit to the wait's
 *                return; the same buffer and tensor every time.
 *     baseline:  cudaMemcpy between cudaHostAlloc memory and cudaMalloc
 *                memory in this process, the same bytes.
 *   staged_256m  (GB/s)
 *     tenferrod: tf_upload of a 256 MiB tensor from ordinary (pageable)
 *                memory: the blocking route, which creates the tensor and
 *                copies the bytes into the client's staging buffer first.
 *     baseline:  the zero-copy pending upload (h2d_256m's route).
 *                '#' lines add the staged download (tf_download_into of a
 *                reused buffer) against the pending download, and
 *                cudaMemcpy from pageable memory in this process.
 *
 *   create_stall (µs)
 *     tenferrod: the slowest of an empty scoped session's round trips made
 *                by one connection while another creates and frees 256 MiB
 *                pinned buffers (each creation registers the memfd with
 *                cudaHostRegister, tens of milliseconds), for as long as 8
 *                creations take.
 *     baseline:  the slowest of as many round trips with no creation going
 *                on. What creation makes other clients wait.
 *
 * Each figure is the median of its repetitions, the two sides taking turns,
 * after one untimed copy of each. The daemon's bytes are checked after the
 * timed runs (blocking download against the pinned buffer) and the
 * baseline's by copying the device buffer back; a mismatch ends the
 * benchmark with status 1. The daemon is another process, so initialising
 * CUDA here is safe; this process never forks.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench/gpu/gpu-common.h"

static const char *const NAME = "bench-transfer-gpu";

/* The sizes of the h2d/d2h lines and how many repetitions each gets. */
static const struct {
    const char *tag;
    size_t bytes;
    int reps;
} SIZES[] = {{"256m", (size_t)256 << 20, 25}, {"8m", (size_t)8 << 20, 100}, {"1m", (size_t)1 << 20, 400}};

#define MAX_REPS 400

/* The in-process side: page-locked host memory and device memory of the largest size. */
typedef struct local_side {
    void *host;   /* cudaHostAlloc */
    void *device; /* cudaMalloc */
} local_side;

/* Times one synchronous cudaMemcpy of `bytes` in direction `kind`; returns nanoseconds. */
static double memcpy_ns(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    uint64_t t0 = bench_now_ns();
    GPU_CUDA(NAME, cudaMemcpy(dst, src, bytes, kind));
    return (double)(bench_now_ns() - t0);
}

/* Ends the benchmark unless the local device buffer holds `want` (copied back through `scratch`). */
static void expect_device(const local_side *l, void *scratch, const void *want, size_t bytes) {
    GPU_CUDA(NAME, cudaMemcpy(scratch, l->device, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(scratch, want, bytes) != 0) bench_die(NAME, "cudaMemcpy baseline: the bytes differ");
}

/* The h2d and d2h lines of one size. */
static void throughput(tf_client *c, const local_side *l, size_t bytes, int reps, const char *tag,
                       double *scratch) {
    const size_t n = bytes / sizeof(double);
    double h2d[MAX_REPS], d2h[MAX_REPS], cuda_up[MAX_REPS], cuda_down[MAX_REPS];
    bench_fill(scratch, n, 1);
    tf_tensor t = bench_tensor(NAME, c, scratch, n);
    tf_pinned_buffer *b = bench_pinned(NAME, c, bytes);
    bench_fill(tf_pinned_buffer_data(b), n, 2);
    bench_fill(l->host, n, 2);
    bench_pending_ns(NAME, c, 1, &b, &t);
    bench_pending_ns(NAME, c, 0, &b, &t);
    memcpy_ns(l->device, l->host, bytes, cudaMemcpyHostToDevice);
    memcpy_ns(l->host, l->device, bytes, cudaMemcpyDeviceToHost);
    for (int r = 0; r < reps; r++) {
        h2d[r] = bench_pending_ns(NAME, c, 1, &b, &t);
        cuda_up[r] = memcpy_ns(l->device, l->host, bytes, cudaMemcpyHostToDevice);
        d2h[r] = bench_pending_ns(NAME, c, 0, &b, &t);
        cuda_down[r] = memcpy_ns(l->host, l->device, bytes, cudaMemcpyDeviceToHost);
    }
    bench_expect_tensor(NAME, c, t, tf_pinned_buffer_data(b), bytes, "pending round trip");
    expect_device(l, scratch, l->host, bytes);
    char name[32];
    snprintf(name, sizeof name, "h2d_%s", tag);
    bench_report(name, (double)bytes / bench_summary(h2d, (size_t)reps, BENCH_MEDIAN),
                 (double)bytes / bench_summary(cuda_up, (size_t)reps, BENCH_MEDIAN), "GB/s");
    snprintf(name, sizeof name, "d2h_%s", tag);
    bench_report(name, (double)bytes / bench_summary(d2h, (size_t)reps, BENCH_MEDIAN),
                 (double)bytes / bench_summary(cuda_down, (size_t)reps, BENCH_MEDIAN), "GB/s");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/* staged_256m: the blocking routes from and into pageable memory against the pending routes. */
static void staged(tf_client *c, const local_side *l, size_t bytes, int reps, double *pageable,
                   double *into_buf) {
    const size_t n = bytes / sizeof(double);
    double up[MAX_REPS], zero_up[MAX_REPS], down[MAX_REPS], zero_down[MAX_REPS], paged[MAX_REPS];
    bench_fill(pageable, n, 3);
    tf_tensor t = bench_tensor(NAME, c, pageable, n);
    tf_pinned_buffer *b = bench_pinned(NAME, c, bytes);
    memcpy(tf_pinned_buffer_data(b), pageable, bytes);
    void *into = into_buf;
    size_t cap = bytes;
    bench_upload_ns(NAME, c, pageable, n);
    memcpy_ns(l->device, pageable, bytes, cudaMemcpyHostToDevice);
    for (int r = 0; r < reps; r++) {
        up[r] = bench_upload_ns(NAME, c, pageable, n);
        zero_up[r] = bench_pending_ns(NAME, c, 1, &b, &t);
        uint64_t t0 = bench_now_ns();
        bench_check(NAME, c, tf_download_into(c, t, &into, &cap), "tf_download_into");
        down[r] = (double)(bench_now_ns() - t0);
        zero_down[r] = bench_pending_ns(NAME, c, 0, &b, &t);
        paged[r] = memcpy_ns(l->device, pageable, bytes, cudaMemcpyHostToDevice);
    }
    if (into != into_buf || memcmp(into, pageable, bytes) != 0)
        bench_die(NAME, "staged download differs");
    printf("# staged_d2h_256m: tf_download_into %.3f GB/s, pending download %.3f GB/s\n",
           (double)bytes / bench_summary(down, (size_t)reps, BENCH_MEDIAN),
           (double)bytes / bench_summary(zero_down, (size_t)reps, BENCH_MEDIAN));
    printf("# staged_256m: in-process cudaMemcpy from pageable memory %.3f GB/s\n",
           (double)bytes / bench_summary(paged, (size_t)reps, BENCH_MEDIAN));
    bench_report("staged_256m", (double)bytes / bench_summary(up, (size_t)reps, BENCH_MEDIAN),
                 (double)bytes / bench_summary(zero_up, (size_t)reps, BENCH_MEDIAN), "GB/s");
    bench_check(NAME, c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, t), "tf_tensor_free");
}

/* The connection that creates buffers in create_stall, and when it is done. */
typedef struct creator {
    tf_client *c;
    size_t bytes;
    int count;
    atomic_int done;
} creator;

static void *create_buffers(void *arg) {
    creator *cr = arg;
    for (int i = 0; i < cr->count; i++) {
        tf_pinned_buffer *b = bench_pinned(NAME, cr->c, cr->bytes);
        bench_check(NAME, cr->c, tf_pinned_buffer_free(b), "tf_pinned_buffer_free");
    }
    atomic_store(&cr->done, 1);
    return NULL;
}

/* An empty scoped session: the shortest request with an answer. */
static tf_status nothing(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

/* The slowest round trip of connection c until *stop reads nonzero (or `count` of them); counts them. */
static double slowest_round_trip(tf_client *c, atomic_int *stop, long count, long *made) {
    double worst = 0;
    long n = 0;
    while (stop ? !atomic_load(stop) : n < count) {
        uint64_t t0 = bench_now_ns();
        bench_check(NAME, c, tf_with_session(c, nothing, NULL), "tf_with_session");
        double us = (double)(bench_now_ns() - t0) / 1e3;
        if (us > worst) worst = us;
        n++;
    }
    *made = n;
    return worst;
}

/* create_stall: another client's worst round trip while pinned buffers are created. */
static void create_stall(int argc, char **argv, tf_client *c) {
    creator cr = {.c = bench_connect(argc, argv), .bytes = (size_t)256 << 20, .count = 8};
    pthread_t t;
    if (pthread_create(&t, NULL, create_buffers, &cr) != 0) bench_die(NAME, "pthread_create");
    long during = 0, idle = 0;
    double worst = slowest_round_trip(c, &cr.done, 0, &during);
    pthread_join(t, NULL);
    double calm = slowest_round_trip(c, NULL, during, &idle);
    printf("# create_stall: %ld round trips while 8 buffers of 256 MiB were created and freed\n",
           during);
    bench_report("create_stall", worst, calm, "us");
    tf_disconnect(cr.c);
}

int main(int argc, char **argv) {
    tf_client *c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(c));
    const size_t largest = SIZES[0].bytes;
    local_side l;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaHostAlloc(&l.host, largest, cudaHostAllocDefault));
    GPU_CUDA(NAME, cudaMalloc(&l.device, largest));
    double *scratch = gpu_xmalloc(NAME, largest), *pageable = gpu_xmalloc(NAME, largest);
    memset(scratch, 0, largest);
    memset(pageable, 0, largest);
    for (size_t k = 0; k < sizeof SIZES / sizeof *SIZES; k++)
        throughput(c, &l, SIZES[k].bytes, SIZES[k].reps, SIZES[k].tag, scratch);
    staged(c, &l, largest, SIZES[0].reps, pageable, scratch);
    create_stall(argc, argv, c);
    GPU_CUDA(NAME, cudaFree(l.device));
    GPU_CUDA(NAME, cudaFreeHost(l.host));
    free(scratch);
    free(pageable);
    tf_disconnect(c);
    return 0;
}
