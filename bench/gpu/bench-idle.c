/*
 * bench-idle: the loops users write around transfers, through a daemon on a
 * CUDA device against the same loop in this process. Unlike
 * bench-transfer-gpu, whose copies follow each other back to back (inside
 * the daemon's busy-polling window), every timed transfer here comes after
 * the client touched its buffer, and the idle lines after a pause longer
 * than that window, so the daemon's loop has gone to sleep.
 *
 *   h2d_1m_idle, h2d_64k_idle  (GB/s, 1 GB = 1e9 B)
 *     per round: fill the host buffer with fresh values (bench_fill, every
 *     byte written, a pattern that changes from round to round), sleep 2 ms
 *     (nanosleep, not timed), then time one upload.
 *     tenferrod: tf_upload_pending + tf_pending_wait from one reused pinned
 *                buffer into one reused f64 tensor.
 *     baseline:  cudaMemcpy from cudaHostAlloc memory into cudaMalloc memory
 *                of the same size, in this process.
 *   d2h_1m_idle  (GB/s)
 *     per round: sleep 2 ms, time one download, then read the buffer (sum
 *     every value, check the sum, mark the first and last value so the next
 *     download must overwrite them); the read is not timed.
 *     tenferrod: tf_download_pending + tf_pending_wait into the reused
 *                pinned buffer.  baseline: cudaMemcpy device to host.
 *   h2d_8m_fill, h2d_64m_fill  (GB/s)
 *     per round: fill the buffer, then at once time one upload (no sleep;
 *     only the transfer is timed). Routes as h2d_1m_idle.
 *
 *   Each figure is the median over its rounds; the two sides take turns
 *   in blocks of BLOCK_ROUNDS rounds (the first side alternating), after one
 *   untimed round of each, so drift of the machine hits both equally while
 *   each side's requests come its own loop's pause apart.
 *
 *   pipeline  (GB/s of uploaded chunk data: 32 x 64 MiB / wall time)
 *     32 chunks of 64 MiB (a 4096 x 4096 f32 matrix each), each uploaded and
 *     multiplied by a resident 4096 x 4096 f32 matrix B, double-buffered.
 *     The clock covers the whole loop, fills included (both sides do the
 *     same fills), up to the last product's completion.
 *     tenferrod: two pinned buffers, two destination tensors, one held
 *                session. For chunk i (slot k = i % 2): wait for the upload
 *                of chunk i - 2 (tf_pending_wait hands buffer k back), fill
 *                buffer k, tf_upload_pending into tensor k, then, without
 *                waiting for that upload, tf_session_with queueing
 *                matmul(tensor k, B) and tf_session_submit: the matmul
 *                depends on the pending upload, and the daemon orders it
 *                after the copy on its stream ("dependent consumers"). Each
 *                product is freed once submitted, but the last two. At the
 *                end: both pending waits, tf_session_synchronize.
 *                A daemon without dependent consumers answers TF_ERR_BUSY
 *                to such a matmul: the benchmark then says so on a '#' line
 *                and prints no BENCH line for the pipelines.
 *     baseline:  the same loop in this process: two cudaHostAlloc buffers,
 *                a copy stream and a compute stream (cuBLAS, default math
 *                mode, as the daemon's). For chunk i: wait for the event
 *                recorded after the copy of chunk i - 2 (host buffer k may
 *                be refilled), fill it, make the copy stream wait for the
 *                event recorded after product i - 2 (it read device buffer
 *                k), cudaMemcpyAsync on the copy stream, record an event,
 *                cudaStreamWaitEvent on the compute stream, cublasSgemm into
 *                device product k, record an event. At the end:
 *                cudaStreamSynchronize of the compute stream.
 *   pipeline_nofill  (GB/s)
 *     the same two pipelines without the fills (each buffer filled once
 *     before the clock): what the GPU side of the loop sustains when the
 *     host's writes do not bound it.
 *
 *   Median of PIPE_RUNS runs after one untimed run of each, the sides taking
 *   turns run by run. The fill is a counter-based pattern (a multiply, an
 *   add, a shift and a conversion per value, vectorized), different for
 *   every chunk and run; '#' lines give the mean time of one fill.
 *
 * Checks: the idle and fill uploads compare the daemon's tensor with the
 * pinned buffer (blocking download) and the baseline's device buffer with its
 * host buffer after the last round; every download is checked by its read.
 * The pipelines' products of the last run's two last chunks (one per slot)
 * are checked, on both sides, against a digest of A x B computed here (a
 * weighted checksum of every entry and GPU_SAMPLES entries in long double,
 * each within a rounding bound), and the two sides' last products are
 * compared with each other; a stale or misordered chunk fails the check. A
 * failed check ends the benchmark with status 1. The daemon is another
 * process, so initialising CUDA here is safe; this process never forks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench/gpu/gpu-common.h"

static const char *const NAME = "bench-idle";

/* The pause before each timed transfer of the idle lines, longer than the daemon's polling window. */
#define IDLE_MS 2

/* The transfer lines. */
typedef enum loop_kind {
    LOOP_H2D_IDLE, /* fill, sleep, upload */
    LOOP_D2H_IDLE, /* sleep, download, read */
    LOOP_H2D_FILL, /* fill, upload */
} loop_kind;

static const struct {
    const char *name;
    loop_kind kind;
    size_t bytes;
    int rounds;
} LOOPS[] = {
    {"h2d_1m_idle", LOOP_H2D_IDLE, (size_t)1 << 20, 200},
    {"d2h_1m_idle", LOOP_D2H_IDLE, (size_t)1 << 20, 200},
    {"h2d_64k_idle", LOOP_H2D_IDLE, (size_t)64 << 10, 200},
    {"h2d_8m_fill", LOOP_H2D_FILL, (size_t)8 << 20, 100},
    {"h2d_64m_fill", LOOP_H2D_FILL, (size_t)64 << 20, 40},
};

#define MAX_ROUNDS 200
#define LARGEST ((size_t)64 << 20)

/* The in-process side of the transfer lines: page-locked host memory and device memory. */
typedef struct local_side {
    void *host;   /* cudaHostAlloc, LARGEST bytes */
    void *device; /* cudaMalloc, LARGEST bytes */
} local_side;

/* One transfer line's state on both sides. */
typedef struct loop {
    loop_kind kind;
    size_t bytes, n; /* n f64 values */
    double want;     /* d2h: the sum every read must find */
    tf_client *c;
    tf_pinned_buffer *buffer;
    tf_tensor tensor;
    const local_side *l;
} loop;

/* Times one synchronous cudaMemcpy of `bytes` in direction `kind`; returns nanoseconds. */
/* Rounds one side runs before the other takes its turn. */
#define BLOCK_ROUNDS 20

static double memcpy_ns(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    uint64_t t0 = bench_now_ns();
    GPU_CUDA(NAME, cudaMemcpy(dst, src, bytes, kind));
    return (double)(bench_now_ns() - t0);
}

/* The sum of n values, in order (both sides and the expectation sum the same way). */
static double sum_of(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return s;
}

/*
 * A client's read of a download: sums every value and checks the sum, then
 * marks the first and the last value, so a download that did not arrive
 * fails the next read.
 */
static void read_back(const char *who, double *x, size_t n, double want) {
    double s = sum_of(x, n);
    if (s != want) bench_die(NAME, "%s: a download summed to %.17g, expected %.17g", who, s, want);
    x[0] = x[n - 1] = -1e9;
}

/* One round on the daemon's side; returns the transfer's nanoseconds. */
static double daemon_round(loop *lp, int round) {
    const int upload = lp->kind != LOOP_D2H_IDLE;
    if (upload) bench_fill(tf_pinned_buffer_data(lp->buffer), lp->n, round);
    if (lp->kind != LOOP_H2D_FILL) bench_sleep_ms(IDLE_MS);
    double ns = bench_pending_ns(NAME, lp->c, upload, &lp->buffer, &lp->tensor);
    if (!upload) read_back("tenferrod", tf_pinned_buffer_data(lp->buffer), lp->n, lp->want);
    return ns;
}

/* The same round in this process. */
static double local_round(loop *lp, int round) {
    const local_side *l = lp->l;
    double ns;
    if (lp->kind != LOOP_D2H_IDLE) {
        bench_fill(l->host, lp->n, round);
        if (lp->kind != LOOP_H2D_FILL) bench_sleep_ms(IDLE_MS);
        ns = memcpy_ns(l->device, l->host, lp->bytes, cudaMemcpyHostToDevice);
    } else {
        bench_sleep_ms(IDLE_MS);
        ns = memcpy_ns(l->host, l->device, lp->bytes, cudaMemcpyDeviceToHost);
        read_back("cudaMemcpy baseline", l->host, lp->n, lp->want);
    }
    return ns;
}

/* The value at fraction q of n sorted samples. */
static double at_fraction(const double *sorted, size_t n, double q) {
    return sorted[(size_t)(q * (double)(n - 1) + 0.5)];
}

/* One transfer line: both sides, round by round, then the checks and the report. */
static void transfer_line(tf_client *c, const local_side *l, size_t which, double *scratch) {
    const char *name = LOOPS[which].name;
    const int rounds = LOOPS[which].rounds;
    loop lp = {.kind = LOOPS[which].kind, .bytes = LOOPS[which].bytes, .c = c, .l = l};
    lp.n = lp.bytes / sizeof(double);
    bench_fill(scratch, lp.n, 0);
    lp.want = sum_of(scratch, lp.n);
    lp.tensor = bench_tensor(NAME, c, scratch, lp.n);
    lp.buffer = bench_pinned(NAME, c, lp.bytes);
    GPU_CUDA(NAME, cudaMemcpy(l->device, scratch, lp.bytes, cudaMemcpyHostToDevice));

    double td[MAX_ROUNDS], tb[MAX_ROUNDS];
    daemon_round(&lp, 1);
    local_round(&lp, 1);
    /*
     * Blocks of BLOCK_ROUNDS rounds, the sides alternating block by block
     * (the first side alternating too): inside a block each side's requests
     * come exactly the loop's own pause apart, as in a user's loop, rather
     * than that pause plus the other side's round.
     */
    for (int start = 0; start < rounds; start += BLOCK_ROUNDS) {
        const int end = start + BLOCK_ROUNDS < rounds ? start + BLOCK_ROUNDS : rounds;
        for (int side = 0; side < 2; side++) {
            const int daemon_side = ((start / BLOCK_ROUNDS) % 2) == side;
            /* Round r's values are round r + 2's pattern (the untimed round had 1). */
            for (int r = start; r < end; r++) {
                if (daemon_side)
                    td[r] = daemon_round(&lp, r + 2);
                else
                    tb[r] = local_round(&lp, r + 2);
            }
        }
    }
    if (lp.kind != LOOP_D2H_IDLE) {
        bench_expect_tensor(NAME, c, lp.tensor, tf_pinned_buffer_data(lp.buffer), lp.bytes, name);
        GPU_CUDA(NAME, cudaMemcpy(scratch, l->device, lp.bytes, cudaMemcpyDeviceToHost));
        if (memcmp(scratch, l->host, lp.bytes) != 0)
            bench_die(NAME, "%s: cudaMemcpy baseline: the device bytes differ from the host's", name);
    }
    const double mt = bench_summary(td, (size_t)rounds, BENCH_MEDIAN);
    const double mb = bench_summary(tb, (size_t)rounds, BENCH_MEDIAN);
    printf("# %s: %d rounds of %s, the sides alternating in blocks of %d; one transfer: tenferrod median %.1f us "
           "(p10 %.1f, p90 %.1f), cudaMemcpy median %.1f us (p10 %.1f, p90 %.1f)\n",
           name, rounds,
           lp.kind == LOOP_H2D_IDLE   ? "fill, 2 ms asleep, upload"
           : lp.kind == LOOP_D2H_IDLE ? "2 ms asleep, download, read"
                                      : "fill, upload",
           BLOCK_ROUNDS, mt / 1e3, at_fraction(td, (size_t)rounds, 0.1) / 1e3,
           at_fraction(td, (size_t)rounds, 0.9) / 1e3, mb / 1e3,
           at_fraction(tb, (size_t)rounds, 0.1) / 1e3, at_fraction(tb, (size_t)rounds, 0.9) / 1e3);
    bench_report(name, (double)lp.bytes / mt, (double)lp.bytes / mb, "GB/s");
    bench_check(NAME, c, tf_pinned_buffer_free(lp.buffer), "tf_pinned_buffer_free");
    bench_check(NAME, c, tf_tensor_free(c, lp.tensor), "tf_tensor_free");
}

/* ---- the double-buffered pipeline ---- */

#define PIPE_N 4096
#define PIPE_ELEMS ((size_t)PIPE_N * PIPE_N)
#define PIPE_BYTES (PIPE_ELEMS * sizeof(float))
#define PIPE_CHUNKS 32
#define PIPE_RUNS 5
/* The fill writes blocks of this many values (PIPE_ELEMS is a multiple), which GCC vectorizes at -O2. */
#define FILL_BLOCK 64

/* What fills a chunk: x[i] = (the top 12 bits of offset + i * step) / 4096 - 1/2. */
typedef struct pattern {
    uint32_t step, offset; /* step is odd */
} pattern;

/* murmur3's finalizer: a bijection of 32-bit words that mixes every bit. */
static uint32_t mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

/*
 * The pattern of chunk `chunk` of run `run`. Every chunk has its own step, so
 * two chunks' matrices are unrelated (not shifted copies of each other), and
 * a product of a stale chunk misses the check by far.
 */
static pattern pattern_of(int run, int chunk) {
    const uint32_t key = (uint32_t)run * 256u + (uint32_t)chunk;
    pattern p = {mix32(2u * key + 1u) | 1u, mix32(2u * key + 2u)};
    return p;
}

/* Writes every value of a chunk: a multiply, an add, a shift and a conversion each. */
static void fill_chunk(float *x, pattern p) {
    for (size_t b = 0; b < PIPE_ELEMS; b += FILL_BLOCK) {
        const uint32_t base = p.offset + (uint32_t)b * p.step;
        for (uint32_t j = 0; j < FILL_BLOCK; j++)
            x[b + j] = (float)(int32_t)((base + j * p.step) >> 20) * 0x1p-12f - 0.5f;
    }
}

/* Fills a chunk and adds the nanoseconds it took to *fill_ns. */
static void fill_timed(float *x, pattern p, double *fill_ns) {
    uint64_t t0 = bench_now_ns();
    fill_chunk(x, p);
    *fill_ns += (double)(bench_now_ns() - t0);
}

/* The daemon's side of the pipeline. */
typedef struct daemon_pipe {
    tf_client *c;
    tf_tensor b;                 /* the resident matrix */
    tf_tensor dst[2];            /* the chunks' destinations, one per slot */
    tf_pinned_buffer *buffer[2]; /* one per slot */
    tf_tensor kept[2];           /* the products of the last run's last two chunks (0: none) */
    int refused;                 /* the daemon refused a matmul reading a pending upload */
} daemon_pipe;

typedef struct matmul_arg {
    tf_tensor a, b, out;
} matmul_arg;

static tf_status queue_matmul(tf_view *v, void *arg) {
    matmul_arg *m = arg;
    return tf_view_matmul(v, m->a, m->b, &m->out);
}

/* Frees the products the last run kept. */
static void daemon_drop_kept(daemon_pipe *d) {
    for (int k = 0; k < 2; k++) {
        if (d->kept[k]) bench_check(NAME, d->c, tf_tensor_free(d->c, d->kept[k]), "tf_tensor_free");
        d->kept[k] = 0;
    }
}

/*
 * One pipeline through the daemon; returns seconds, or -1 when the daemon
 * (or the client library) refuses a matmul that reads a pending upload's
 * destination with TF_ERR_BUSY: then everything is handed back, d->refused
 * is set and a '#' line says why.
 */
static double daemon_pipeline(daemon_pipe *d, int run, int fill, double *fill_ns) {
    daemon_drop_kept(d);
    if (!fill)
        for (int k = 0; k < 2; k++)
            fill_chunk(tf_pinned_buffer_data(d->buffer[k]), pattern_of(run, PIPE_CHUNKS - 2 + k));
    tf_session *s = NULL;
    bench_check(NAME, d->c, tf_session_open(d->c, &s), "tf_session_open");
    tf_pending *pending[2] = {NULL, NULL};
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < PIPE_CHUNKS; i++) {
        const int k = i % 2;
        if (pending[k]) {
            bench_check(NAME, d->c, tf_pending_wait(pending[k], &d->dst[k], &d->buffer[k]),
                        "tf_pending_wait (upload of chunk i - 2)");
            pending[k] = NULL;
        }
        if (fill) fill_timed(tf_pinned_buffer_data(d->buffer[k]), pattern_of(run, i), fill_ns);
        bench_check(NAME, d->c, tf_upload_pending(d->c, d->buffer[k], d->dst[k], &pending[k]),
                    "tf_upload_pending (chunk)");
        matmul_arg m = {.a = d->dst[k], .b = d->b};
        const char *where = "tf_session_with (matmul of a pending upload's destination)";
        tf_status st = tf_session_with(s, queue_matmul, &m);
        if (st == TF_OK) {
            where = "tf_session_submit (matmul of a pending upload's destination)";
            st = tf_session_submit(s);
        }
        if (st == TF_ERR_BUSY) {
            printf("# pipeline: %s at chunk %d answered TF_ERR_BUSY (%s): this tenferrod runs no "
                   "operation that reads a pending upload's destination (dependent consumers); "
                   "no BENCH line for the pipelines\n",
                   where, i, tf_client_last_error(d->c));
            fflush(stdout);
            for (int j = 0; j < 2; j++)
                if (pending[j])
                    bench_check(NAME, d->c, tf_pending_wait(pending[j], &d->dst[j], &d->buffer[j]),
                                "tf_pending_wait");
            tf_session_release(s);
            d->refused = 1;
            return -1;
        }
        bench_check(NAME, d->c, st, where);
        if (i >= PIPE_CHUNKS - 2)
            d->kept[k] = m.out;
        else
            bench_check(NAME, d->c, tf_tensor_free(d->c, m.out), "tf_tensor_free (product)");
    }
    for (int k = 0; k < 2; k++)
        bench_check(NAME, d->c, tf_pending_wait(pending[k], &d->dst[k], &d->buffer[k]),
                    "tf_pending_wait (last uploads)");
    bench_check(NAME, d->c, tf_session_synchronize(s), "tf_session_synchronize");
    double seconds = (double)(bench_now_ns() - t0) / 1e9;
    bench_check(NAME, d->c, tf_session_close(s, NULL), "tf_session_close");
    return seconds;
}

/* The in-process side of the pipeline. */
typedef struct local_pipe {
    cublasHandle_t h;
    cudaStream_t copy, compute;
    cudaEvent_t copied[2];   /* after the copy of slot k's latest chunk: its host buffer is free */
    cudaEvent_t consumed[2]; /* after the product of slot k's latest chunk: its device copy is read */
    float *host[2];          /* cudaHostAlloc */
    float *a[2], *b, *c[2];  /* cudaMalloc: the chunks, the resident matrix, the products */
} local_pipe;

/* One pipeline in this process; returns seconds. */
static double local_pipeline(local_pipe *l, int run, int fill, double *fill_ns) {
    const int n = PIPE_N;
    const float one = 1.0f, zero = 0.0f;
    if (!fill)
        for (int k = 0; k < 2; k++) fill_chunk(l->host[k], pattern_of(run, PIPE_CHUNKS - 2 + k));
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < PIPE_CHUNKS; i++) {
        const int k = i % 2;
        /* The copy of chunk i - 2 has left host buffer k. */
        if (i >= 2) GPU_CUDA(NAME, cudaEventSynchronize(l->copied[k]));
        if (fill) fill_timed(l->host[k], pattern_of(run, i), fill_ns);
        /* Product i - 2 has read device buffer k before the copy overwrites it. */
        if (i >= 2) GPU_CUDA(NAME, cudaStreamWaitEvent(l->copy, l->consumed[k], 0));
        GPU_CUDA(NAME, cudaMemcpyAsync(l->a[k], l->host[k], PIPE_BYTES, cudaMemcpyHostToDevice,
                                       l->copy));
        GPU_CUDA(NAME, cudaEventRecord(l->copied[k], l->copy));
        GPU_CUDA(NAME, cudaStreamWaitEvent(l->compute, l->copied[k], 0));
        /* C = A B row-major is C^T = B^T A^T column-major. */
        GPU_CUBLAS(NAME, cublasSgemm(l->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, l->b, n,
                                     l->a[k], n, &zero, l->c[k], n));
        GPU_CUDA(NAME, cudaEventRecord(l->consumed[k], l->compute));
    }
    GPU_CUDA(NAME, cudaStreamSynchronize(l->compute));
    return (double)(bench_now_ns() - t0) / 1e9;
}

/* The largest |x - y| over n values. */
static double max_difference(const float *x, const float *y, size_t n) {
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (!(d <= worst)) worst = d; /* NaN wins */
    }
    return worst;
}

/* Host memory for the pipelines' checks. */
typedef struct pipe_check {
    const float *b; /* the resident matrix */
    float *a;       /* a chunk, regenerated */
    float *c;       /* the baseline's product, copied back */
} pipe_check;

/*
 * Checks the last run's products of chunks PIPE_CHUNKS - 2 and - 1 on both
 * sides against A x B, and the two sides' last products against each other.
 */
static void check_pipelines(const char *name, daemon_pipe *d, local_pipe *l, const pipe_check *pc,
                            int run) {
    float *got[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        const int chunk = PIPE_CHUNKS - 2 + k;
        char what[96];
        fill_chunk(pc->a, pattern_of(run, chunk));
        GPU_CUDA(NAME, cudaMemcpy(pc->c, l->c[k], PIPE_BYTES, cudaMemcpyDeviceToHost));
        snprintf(what, sizeof what, "%s: cuBLAS pipeline, chunk %d", name, chunk);
        gpu_verify_product(NAME, what, TF_F32, pc->a, pc->b, pc->c, PIPE_N);
        if (d->refused) continue;
        size_t bytes = 0;
        void *p = NULL;
        bench_check(NAME, d->c, tf_download(d->c, d->kept[k], &p, &bytes), "tf_download (product)");
        got[k] = p;
        if (bytes != PIPE_BYTES)
            bench_die(NAME, "%s: the daemon's product has %zu bytes, expected %zu", name, bytes,
                      PIPE_BYTES);
        snprintf(what, sizeof what, "%s: tenferrod pipeline, chunk %d", name, chunk);
        gpu_verify_product(NAME, what, TF_F32, pc->a, pc->b, got[k], PIPE_N);
    }
    if (!d->refused)
        printf("# %s: the products of chunks %d and %d match A x B on both sides (checksum and %d "
               "entries); chunk %d: max |tenferrod - cuBLAS| = %.3g\n",
               name, PIPE_CHUNKS - 2, PIPE_CHUNKS - 1, GPU_SAMPLES, PIPE_CHUNKS - 1,
               max_difference(got[1], pc->c, PIPE_ELEMS));
    else
        printf("# %s: the cuBLAS pipeline's products of chunks %d and %d match A x B\n", name,
               PIPE_CHUNKS - 2, PIPE_CHUNKS - 1);
    free(got[0]);
    free(got[1]);
}

/*
 * One pipeline line: an untimed run of each side, then PIPE_RUNS runs of
 * each, taking turns; the last run's products are checked. Runs are numbered
 * from first_run, so every run of every line has its own chunks.
 */
static void pipeline_line(const char *name, int fill, int first_run, daemon_pipe *d,
                          local_pipe *l, const pipe_check *pc) {
    double td[PIPE_RUNS], tb[PIPE_RUNS], fill_d = 0, fill_l = 0, ignored = 0;
    if (!d->refused) daemon_pipeline(d, first_run, fill, &ignored);
    local_pipeline(l, first_run, fill, &ignored);
    int last = first_run;
    for (int r = 0; r < PIPE_RUNS; r++) {
        const int run = first_run + 1 + r;
        if (r % 2) tb[r] = local_pipeline(l, run, fill, &fill_l);
        if (!d->refused && (td[r] = daemon_pipeline(d, run, fill, &fill_d)) < 0)
            bench_die(NAME, "%s: the daemon refused a dependent matmul it had accepted before",
                      name);
        if (r % 2 == 0) tb[r] = local_pipeline(l, run, fill, &fill_l);
        last = run;
    }
    check_pipelines(name, d, l, pc, last);
    const double gb = (double)PIPE_CHUNKS * (double)PIPE_BYTES / 1e9;
    const double mb = bench_summary(tb, PIPE_RUNS, BENCH_MEDIAN);
    const double fills = (double)PIPE_RUNS * PIPE_CHUNKS;
    if (d->refused) {
        printf("# %s: in-process two-stream pipeline %.2f GB/s (%.1f chunks/s, median of %d "
               "runs); tenferrod not measured\n",
               name, gb / mb, PIPE_CHUNKS / mb, PIPE_RUNS);
        if (fill)
            printf("# %s: one fill of 64 MiB took %.2f ms on average\n", name,
                   fill_l / fills / 1e6);
        fflush(stdout);
        return;
    }
    const double mt = bench_summary(td, PIPE_RUNS, BENCH_MEDIAN);
    printf("# %s: %d chunks of %d x %d f32 (%zu MiB) each uploaded and multiplied by B; median of "
           "%d runs: tenferrod %.1f ms (%.1f chunks/s), in-process two-stream pipeline %.1f ms "
           "(%.1f chunks/s)\n",
           name, PIPE_CHUNKS, PIPE_N, PIPE_N, PIPE_BYTES >> 20, PIPE_RUNS, mt * 1e3,
           PIPE_CHUNKS / mt, mb * 1e3, PIPE_CHUNKS / mb);
    if (fill)
        printf("# %s: one fill of 64 MiB took %.2f ms on average on the tenferrod side, %.2f ms "
               "on the in-process side (the fills are inside the clock on both)\n",
               name, fill_d / fills / 1e6, fill_l / fills / 1e6);
    bench_report(name, gb / mt, gb / mb, "GB/s");
}

/* Sets up both pipelines, runs pipeline and pipeline_nofill, and frees everything. */
static void pipelines(tf_client *c) {
    const int64_t shape[2] = {PIPE_N, PIPE_N};
    pipe_check pc;
    float *b = gpu_xmalloc(NAME, PIPE_BYTES);
    pc.b = b;
    pc.a = gpu_xmalloc(NAME, PIPE_BYTES);
    pc.c = gpu_xmalloc(NAME, PIPE_BYTES);
    gpu_fill(TF_F32, b, PIPE_ELEMS, 0xb00bu);

    daemon_pipe d = {.c = c};
    bench_check(NAME, c, tf_upload(c, TF_F32, 2, shape, b, &d.b), "tf_upload (B)");
    for (int k = 0; k < 2; k++) {
        bench_check(NAME, c, tf_upload(c, TF_F32, 2, shape, b, &d.dst[k]),
                    "tf_upload (a chunk's destination)");
        d.buffer[k] = bench_pinned(NAME, c, PIPE_BYTES);
    }

    local_pipe l;
    GPU_CUBLAS(NAME, cublasCreate(&l.h));
    GPU_CUBLAS(NAME, cublasSetMathMode(l.h, CUBLAS_DEFAULT_MATH));
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&l.copy, cudaStreamNonBlocking));
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&l.compute, cudaStreamNonBlocking));
    GPU_CUBLAS(NAME, cublasSetStream(l.h, l.compute));
    GPU_CUDA(NAME, cudaMalloc((void **)&l.b, PIPE_BYTES));
    GPU_CUDA(NAME, cudaMemcpy(l.b, b, PIPE_BYTES, cudaMemcpyHostToDevice));
    for (int k = 0; k < 2; k++) {
        GPU_CUDA(NAME, cudaEventCreateWithFlags(&l.copied[k], cudaEventDisableTiming));
        GPU_CUDA(NAME, cudaEventCreateWithFlags(&l.consumed[k], cudaEventDisableTiming));
        GPU_CUDA(NAME, cudaHostAlloc((void **)&l.host[k], PIPE_BYTES, cudaHostAllocDefault));
        GPU_CUDA(NAME, cudaMalloc((void **)&l.a[k], PIPE_BYTES));
        GPU_CUDA(NAME, cudaMalloc((void **)&l.c[k], PIPE_BYTES));
    }

    pipeline_line("pipeline", 1, 0, &d, &l, &pc);
    pipeline_line("pipeline_nofill", 0, 16, &d, &l, &pc);

    daemon_drop_kept(&d);
    for (int k = 0; k < 2; k++) {
        bench_check(NAME, c, tf_pinned_buffer_free(d.buffer[k]), "tf_pinned_buffer_free");
        bench_check(NAME, c, tf_tensor_free(c, d.dst[k]), "tf_tensor_free");
        GPU_CUDA(NAME, cudaEventDestroy(l.copied[k]));
        GPU_CUDA(NAME, cudaEventDestroy(l.consumed[k]));
        GPU_CUDA(NAME, cudaFreeHost(l.host[k]));
        GPU_CUDA(NAME, cudaFree(l.a[k]));
        GPU_CUDA(NAME, cudaFree(l.c[k]));
    }
    bench_check(NAME, c, tf_tensor_free(c, d.b), "tf_tensor_free (B)");
    GPU_CUDA(NAME, cudaFree(l.b));
    GPU_CUBLAS(NAME, cublasDestroy(l.h));
    GPU_CUDA(NAME, cudaStreamDestroy(l.copy));
    GPU_CUDA(NAME, cudaStreamDestroy(l.compute));
    free(b);
    free(pc.a);
    free(pc.c);
}

int main(int argc, char **argv) {
    const uint64_t started = bench_now_ns();
    tf_client *c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(c));
    local_side l;
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaHostAlloc(&l.host, LARGEST, cudaHostAllocDefault));
    GPU_CUDA(NAME, cudaMalloc(&l.device, LARGEST));
    double *scratch = gpu_xmalloc(NAME, LARGEST);
    memset(scratch, 0, LARGEST);
    for (size_t k = 0; k < sizeof LOOPS / sizeof *LOOPS; k++) transfer_line(c, &l, k, scratch);
    GPU_CUDA(NAME, cudaFree(l.device));
    GPU_CUDA(NAME, cudaFreeHost(l.host));
    free(scratch);
    pipelines(c);
    printf("# %s: %.1f s in all\n", NAME, (double)(bench_now_ns() - started) / 1e9);
    tf_disconnect(c);
    return 0;
}
