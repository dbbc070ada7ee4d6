/*
 * The share loop (see share-loop.h): the two kinds of child, and the parent's side that
 * starts them by fork+exec, releases them together through a pipe and collects their
 * counts. Shared by bench-share and bench-multi so both measure exactly the same loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench/gpu/gpu-common.h"
#include "bench/gpu/share-loop.h"

#define READY_TIMEOUT_S 120
#define FINISH_SLACK_S 120
#define CHILD_OUTPUT_BYTES 1024

/* What a child is told on its command line. */
typedef struct child_args {
    int n, batch, warm_ms, run_ms, index;
} child_args;

/* Operands of one child: the same A and B in every child, from fixed seeds. */
static void make_operands(const char *bench, int n, float **a, float **b) {
    const size_t elems = (size_t)n * (size_t)n;
    *a = gpu_xmalloc(bench, sizeof(float) * elems);
    *b = gpu_xmalloc(bench, sizeof(float) * elems);
    gpu_fill(TF_F32, *a, elems, 0x5a00u + (uint64_t)n);
    gpu_fill(TF_F32, *b, elems, 0x5b00u + (uint64_t)n);
}

/* Tells the parent this child is set up, then blocks until the parent closes the start pipe. */
static void ready_then_wait(const char *bench) {
    fputs("READY\n", stdout);
    fflush(stdout);
    char byte;
    ssize_t r;
    while ((r = read(0, &byte, 1)) != 0)
        if (r < 0 && errno != EINTR) bench_die(bench, "child: reading the start pipe failed");
}

/* ---- the tenferrod child ---- */

typedef struct daemon_burst {
    const char *bench;
    tf_client *c;
    tf_tensor a, b;
    int batch;
    tf_tensor out[SHARE_MAX_BATCH];
} daemon_burst;

/* One burst: `batch` products, then their frees (queued behind them in the same burst). */
static tf_status products_then_frees(tf_view *v, void *arg) {
    daemon_burst *db = arg;
    tf_status st = TF_OK;
    for (int i = 0; i < db->batch && st == TF_OK; i++)
        st = tf_view_matmul(v, db->a, db->b, &db->out[i]);
    for (int i = 0; i < db->batch && st == TF_OK; i++)
        st = tf_tensor_free(tf_view_client(v), db->out[i]);
    return st;
}

/* One product that stays, for the final check. */
static tf_status one_product(tf_view *v, void *arg) {
    daemon_burst *db = arg;
    return tf_view_matmul(v, db->a, db->b, &db->out[0]);
}

/* Runs scoped bursts until the clock's end; returns products completed. */
static long daemon_bursts(daemon_burst *db, uint64_t end) {
    long done = 0;
    do {
        bench_check(db->bench, db->c, tf_with_session(db->c, products_then_frees, db),
                    "tf_with_session (burst)");
        done += db->batch;
    } while (bench_now_ns() < end);
    return done;
}

/* A tenferrod child: set up, wait for the start, warm up, count bursts, check, report. */
static int child_tenferrod(const char *bench, char **argv, const child_args *ca) {
    float *a, *b;
    make_operands(bench, ca->n, &a, &b);
    daemon_burst db = {.bench = bench, .batch = ca->batch};
    db.c = bench_connect(2, argv);
    int64_t shape[2] = {ca->n, ca->n};
    bench_check(bench, db.c, tf_upload(db.c, TF_F32, 2, shape, a, &db.a), "tf_upload a");
    bench_check(bench, db.c, tf_upload(db.c, TF_F32, 2, shape, b, &db.b), "tf_upload b");
    daemon_bursts(&db, 0); /* one burst before the start: the stream and cuBLAS are warm */
    ready_then_wait(bench);

    const uint64_t t_warm = bench_now_ns();
    daemon_bursts(&db, t_warm + (uint64_t)ca->warm_ms * 1000000u);
    const uint64_t t0 = bench_now_ns();
    long count = daemon_bursts(&db, t0 + (uint64_t)ca->run_ms * 1000000u);
    const uint64_t t1 = bench_now_ns();

    bench_check(bench, db.c, tf_with_session(db.c, one_product, &db), "tf_with_session (check)");
    void *c = NULL;
    size_t bytes = 0;
    bench_check(bench, db.c, tf_download(db.c, db.out[0], &c, &bytes), "tf_download");
    if (bytes != sizeof(float) * (size_t)ca->n * (size_t)ca->n)
        bench_die(bench, "child %d: the product has %zu bytes", ca->index, bytes);
    gpu_verify_product(bench, "tenferrod child", TF_F32, a, b, c, ca->n);
    printf("DONE %ld %.6f\n", count, (double)(t1 - t0) / 1e9);
    fflush(stdout);
    free(c);
    free(a);
    free(b);
    tf_disconnect(db.c);
    return 0;
}

/* ---- the CUDA child ---- */

typedef struct cuda_burst {
    const char *bench;
    cudaStream_t stream;
    cublasHandle_t h;
    float *a, *b, *c;
    int n, batch;
} cuda_burst;

/* Runs bursts of `batch` SGEMMs and a stream synchronize until `end`; returns products done. */
static long cuda_bursts(cuda_burst *cb, uint64_t end) {
    const float one = 1.0f, zero = 0.0f;
    const int n = cb->n;
    long done = 0;
    do {
        for (int i = 0; i < cb->batch; i++)
            GPU_CUBLAS(cb->bench, cublasSgemm(cb->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one,
                                              cb->b, n, cb->a, n, &zero, cb->c, n));
        GPU_CUDA(cb->bench, cudaStreamSynchronize(cb->stream));
        done += cb->batch;
    } while (bench_now_ns() < end);
    return done;
}

/* A CUDA child: own context, stream and handle; then the same steps as the tenferrod child. */
static int child_cuda(const char *bench, const child_args *ca) {
    float *a, *b;
    make_operands(bench, ca->n, &a, &b);
    const size_t bytes = sizeof(float) * (size_t)ca->n * (size_t)ca->n;
    cuda_burst cb = {.bench = bench, .n = ca->n, .batch = ca->batch};
    GPU_CUDA(bench, cudaSetDevice(0));
    GPU_CUDA(bench, cudaStreamCreateWithFlags(&cb.stream, cudaStreamNonBlocking));
    GPU_CUBLAS(bench, cublasCreate(&cb.h));
    GPU_CUBLAS(bench, cublasSetStream(cb.h, cb.stream));
    GPU_CUBLAS(bench, cublasSetMathMode(cb.h, CUBLAS_DEFAULT_MATH));
    GPU_CUDA(bench, cudaMalloc((void **)&cb.a, bytes));
    GPU_CUDA(bench, cudaMalloc((void **)&cb.b, bytes));
    GPU_CUDA(bench, cudaMalloc((void **)&cb.c, bytes));
    GPU_CUDA(bench, cudaMemcpy(cb.a, a, bytes, cudaMemcpyHostToDevice));
    GPU_CUDA(bench, cudaMemcpy(cb.b, b, bytes, cudaMemcpyHostToDevice));
    cuda_bursts(&cb, 0);
    ready_then_wait(bench);

    const uint64_t t_warm = bench_now_ns();
    cuda_bursts(&cb, t_warm + (uint64_t)ca->warm_ms * 1000000u);
    const uint64_t t0 = bench_now_ns();
    long count = cuda_bursts(&cb, t0 + (uint64_t)ca->run_ms * 1000000u);
    const uint64_t t1 = bench_now_ns();

    float *c = gpu_xmalloc(bench, bytes);
    GPU_CUDA(bench, cudaMemcpy(c, cb.c, bytes, cudaMemcpyDeviceToHost));
    gpu_verify_product(bench, "cuda child", TF_F32, a, b, c, ca->n);
    printf("DONE %ld %.6f\n", count, (double)(t1 - t0) / 1e9);
    fflush(stdout);
    GPU_CUBLAS(bench, cublasDestroy(cb.h));
    GPU_CUDA(bench, cudaStreamDestroy(cb.stream));
    GPU_CUDA(bench, cudaFree(cb.a));
    GPU_CUDA(bench, cudaFree(cb.b));
    GPU_CUDA(bench, cudaFree(cb.c));
    free(c);
    free(a);
    free(b);
    return 0;
}

/* Parses one non-negative integer argument of a child; ends the child on garbage. */
static int int_arg(const char *bench, const char *text) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || v < 0 || v > 1000000) bench_die(bench, "bad child argument '%s'", text);
    return (int)v;
}

int share_child_main(const char *bench, int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--child") != 0) return -1;
    const int daemon_side = strcmp(argv[3], "tenferrod") == 0;
    if (!daemon_side && strcmp(argv[3], "cuda") != 0) return -1;
    if (argc < 9) bench_die(bench, "a %s child needs 5 numbers after its mode", argv[3]);
    child_args ca = {int_arg(bench, argv[4]), int_arg(bench, argv[5]), int_arg(bench, argv[6]),
                     int_arg(bench, argv[7]), int_arg(bench, argv[8])};
    if (ca.n < 1 || ca.batch < 1 || ca.batch > SHARE_MAX_BATCH)
        bench_die(bench, "bad child size %d or batch %d", ca.n, ca.batch);
    return daemon_side ? child_tenferrod(bench, argv, &ca) : child_cuda(bench, &ca);
}

/* ---- the parent ---- */

/* One child's report. */
typedef struct child_report {
    long count;
    double elapsed_s;
} child_report;

/* What the parent holds of the children of one side while they run. */
typedef struct side_children {
    pid_t pids[SHARE_MAX_CLIENTS];
    int fds[SHARE_MAX_CLIENTS];
    char out[SHARE_MAX_CLIENTS][CHILD_OUTPUT_BYTES];
    size_t len[SHARE_MAX_CLIENTS];
} side_children;

/* Kills and reaps every child started so far, then ends the benchmark with the reason. */
static void fail_all(const share_side *side, const side_children *sc, const char *why,
                     const char *out) {
    for (int i = 0; i < side->clients; i++) gpu_reap(sc->pids[i], 0);
    bench_die(side->bench, "%s side: %s; child output: %.300s", side->label, why, out);
}

double share_run_side(const share_side *side) {
    if (side->clients < 1 || side->clients > SHARE_MAX_CLIENTS)
        bench_die(side->bench, "%s side: %d children (1 to %d)", side->label, side->clients,
                  SHARE_MAX_CLIENTS);
    char self[4096], sn[16], sb[16], sw[16], sr[16], si[16];
    snprintf(self, sizeof self, "%s", gpu_self_path(side->bench));
    snprintf(sn, sizeof sn, "%d", side->n);
    snprintf(sb, sizeof sb, "%d", side->batch);
    snprintf(sw, sizeof sw, "%d", side->warm_ms);
    snprintf(sr, sizeof sr, "%d", side->run_ms);
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) bench_die(side->bench, "pipe2 failed: %s", strerror(errno));
    static side_children sc;
    for (int i = 0; i < side->clients; i++) {
        snprintf(si, sizeof si, "%d", i);
        char *args[] = {self, (char *)side->sockets[i], "--child", (char *)side->mode,
                        sn,   sb,  sw, sr, si, NULL};
        sc.pids[i] = gpu_spawn(side->bench, args, go[0], &sc.fds[i]);
        sc.out[i][0] = '\0';
        sc.len[i] = 0;
    }
    close(go[0]);
    const uint64_t ready_by = bench_now_ns() + (uint64_t)READY_TIMEOUT_S * 1000000000u;
    for (int i = 0; i < side->clients; i++)
        if (gpu_read_line(sc.fds[i], sc.out[i], sizeof sc.out[i], &sc.len[i], ready_by) != 1 ||
            strcmp(sc.out[i], "READY\n") != 0) {
            close(go[1]);
            fail_all(side, &sc, "a child did not get ready", sc.out[i]);
        }
    close(go[1]); /* every child's read of the start pipe returns 0: go */

    const uint64_t done_by = bench_now_ns() +
                             (uint64_t)(side->warm_ms + side->run_ms) * 1000000u +
                             FINISH_SLACK_S * 1000000000ull;
    child_report rep[SHARE_MAX_CLIENTS];
    for (int i = 0; i < side->clients; i++) {
        sc.out[i][0] = '\0';
        sc.len[i] = 0;
        int got = gpu_read_line(sc.fds[i], sc.out[i], sizeof sc.out[i], &sc.len[i], done_by);
        if (got != 1 ||
            sscanf(sc.out[i], "DONE %ld %lf", &rep[i].count, &rep[i].elapsed_s) != 2 ||
            rep[i].count <= 0 || !(rep[i].elapsed_s > 0))
            fail_all(side, &sc, "a child did not report a count", sc.out[i]);
    }
    double total = 0, longest = 0;
    for (int i = 0; i < side->clients; i++) {
        close(sc.fds[i]);
        int status = gpu_reap(sc.pids[i], done_by);
        if (status != 0) {
            char why[64];
            snprintf(why, sizeof why, "child %d exited with status %d", i, status);
            fail_all(side, &sc, why, sc.out[i]);
        }
        total += (double)rep[i].count;
        if (rep[i].elapsed_s > longest) longest = rep[i].elapsed_s;
        printf("# %s %dx%d child %d: %ld matmuls in %.3f s = %.0f/s\n", side->label, side->n,
               side->n, i, rep[i].count, rep[i].elapsed_s, (double)rep[i].count / rep[i].elapsed_s);
    }
    printf("# %s %dx%d: %d children, %.0f matmuls in %.3f s = %.0f/s in total\n", side->label,
           side->n, side->n, side->clients, total, longest, total / longest);
    fflush(stdout);
    return total / longest;
}
