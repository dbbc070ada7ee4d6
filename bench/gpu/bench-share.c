/*
 * bench-share: four processes sharing one GPU, through one daemon (one warm
 * context, one stream per client) against four processes with a CUDA
 * context each (time-sliced by the driver).
 *
 *   share4        1024 x 1024 f32 matmuls, bursts of 32
 *   share4_small   256 x  256 f32 matmuls, bursts of 128
 *   (unit: matmuls per second, all four processes together)
 *
 *   tenferrod: CLIENTS child processes (fork+exec of this binary, mode
 *              "--child tenferrod") each upload A and B once, then loop on
 *              scoped sessions (tf_with_session): each burst queues `batch`
 *              products A x B and then frees those outputs in the same burst
 *              (queued frees run after the products), so the daemon's memory
 *              stays bounded; the scoped session returns once the burst has
 *              completed on the device.
 *   baseline:  CLIENTS child processes (mode "--child cuda"), each with its
 *              own context, non-blocking stream and cuBLAS handle, loop on
 *              `batch` cublasSgemm calls into one output followed by
 *              cudaStreamSynchronize.
 *
 * Each child sets up (connects or creates its context, uploads, runs one
 * burst), reports READY and blocks reading its stdin; the parent closes the
 * write end of that shared pipe once all are ready, so all start together.
 * Each child then runs bursts for WARM_MS untimed and RUN_MS timed, counts
 * the products of completed bursts, checks one last product against the
 * digest predicted from A and B, and reports its count and elapsed time.
 * Aggregate = sum(count) / max(elapsed). The tenferrod side runs first, then
 * the baseline, for each size in one program run.
 *
 * The parent never calls CUDA (its children could not use CUDA otherwise).
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

#define CLIENTS 4
#define WARM_MS 500
#define RUN_MS 3000
#define MAX_BATCH 256
#define READY_TIMEOUT_S 120
#define FINISH_SLACK_S 120

static const char *const NAME = "bench-share";

/* What a child is told on its command line. */
typedef struct child_args {
    int n, batch, warm_ms, run_ms, index;
} child_args;

/* Operands of one child: the same A and B in every child, from fixed seeds. */
static void make_operands(int n, float **a, float **b) {
    const size_t elems = (size_t)n * (size_t)n;
    *a = gpu_xmalloc(NAME, sizeof(float) * elems);
    *b = gpu_xmalloc(NAME, sizeof(float) * elems);
    gpu_fill(TF_F32, *a, elems, 0x5a00u + (uint64_t)n);
    gpu_fill(TF_F32, *b, elems, 0x5b00u + (uint64_t)n);
}

/* Tells the parent this child is set up, then blocks until the parent closes the start pipe. */
static void ready_then_wait(void) {
    fputs("READY\n", stdout);
    fflush(stdout);
    char byte;
    ssize_t r;
    while ((r = read(0, &byte, 1)) != 0)
        if (r < 0 && errno != EINTR) bench_die(NAME, "child: reading the start pipe failed");
}

/* ---- the tenferrod child ---- */

typedef struct daemon_burst {
    tf_client *c;
    tf_tensor a, b;
    int batch;
    tf_tensor out[MAX_BATCH];
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
        bench_check(NAME, db->c, tf_with_session(db->c, products_then_frees, db),
                    "tf_with_session (burst)");
        done += db->batch;
    } while (bench_now_ns() < end);
    return done;
}

/* A tenferrod child: set up, wait for the start, warm up, count bursts, check, report. */
static int child_tenferrod(char **argv, const child_args *ca) {
    float *a, *b;
    make_operands(ca->n, &a, &b);
    daemon_burst db = {.batch = ca->batch};
    db.c = bench_connect(2, argv);
    int64_t shape[2] = {ca->n, ca->n};
    bench_check(NAME, db.c, tf_upload(db.c, TF_F32, 2, shape, a, &db.a), "tf_upload a");
    bench_check(NAME, db.c, tf_upload(db.c, TF_F32, 2, shape, b, &db.b), "tf_upload b");
    daemon_bursts(&db, 0); /* one burst before the start: the stream and cuBLAS are warm */
    ready_then_wait();

    const uint64_t t_warm = bench_now_ns();
    daemon_bursts(&db, t_warm + (uint64_t)ca->warm_ms * 1000000u);
    const uint64_t t0 = bench_now_ns();
    long count = daemon_bursts(&db, t0 + (uint64_t)ca->run_ms * 1000000u);
    const uint64_t t1 = bench_now_ns();

    bench_check(NAME, db.c, tf_with_session(db.c, one_product, &db), "tf_with_session (check)");
    void *c = NULL;
    size_t bytes = 0;
    bench_check(NAME, db.c, tf_download(db.c, db.out[0], &c, &bytes), "tf_download");
    if (bytes != sizeof(float) * (size_t)ca->n * (size_t)ca->n)
        bench_die(NAME, "child %d: the product has %zu bytes", ca->index, bytes);
    gpu_verify_product(NAME, "tenferrod child", TF_F32, a, b, c, ca->n);
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
            GPU_CUBLAS(NAME, cublasSgemm(cb->h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, cb->b, n,
                                         cb->a, n, &zero, cb->c, n));
        GPU_CUDA(NAME, cudaStreamSynchronize(cb->stream));
        done += cb->batch;
    } while (bench_now_ns() < end);
    return done;
}

/* A CUDA child: own context, stream and handle; then the same steps as the tenferrod child. */
static int child_cuda(const child_args *ca) {
    float *a, *b;
    make_operands(ca->n, &a, &b);
    const size_t bytes = sizeof(float) * (size_t)ca->n * (size_t)ca->n;
    cuda_burst cb = {.n = ca->n, .batch = ca->batch};
    GPU_CUDA(NAME, cudaSetDevice(0));
    GPU_CUDA(NAME, cudaStreamCreateWithFlags(&cb.stream, cudaStreamNonBlocking));
    GPU_CUBLAS(NAME, cublasCreate(&cb.h));
    GPU_CUBLAS(NAME, cublasSetStream(cb.h, cb.stream));
    GPU_CUBLAS(NAME, cublasSetMathMode(cb.h, CUBLAS_DEFAULT_MATH));
    GPU_CUDA(NAME, cudaMalloc((void **)&cb.a, bytes));
    GPU_CUDA(NAME, cudaMalloc((void **)&cb.b, bytes));
    GPU_CUDA(NAME, cudaMalloc((void **)&cb.c, bytes));
    GPU_CUDA(NAME, cudaMemcpy(cb.a, a, bytes, cudaMemcpyHostToDevice));
    GPU_CUDA(NAME, cudaMemcpy(cb.b, b, bytes, cudaMemcpyHostToDevice));
    cuda_bursts(&cb, 0);
    ready_then_wait();

    const uint64_t t_warm = bench_now_ns();
    cuda_bursts(&cb, t_warm + (uint64_t)ca->warm_ms * 1000000u);
    const uint64_t t0 = bench_now_ns();
    long count = cuda_bursts(&cb, t0 + (uint64_t)ca->run_ms * 1000000u);
    const uint64_t t1 = bench_now_ns();

    float *c = gpu_xmalloc(NAME, bytes);
    GPU_CUDA(NAME, cudaMemcpy(c, cb.c, bytes, cudaMemcpyDeviceToHost));
    gpu_verify_product(NAME, "cuda child", TF_F32, a, b, c, ca->n);
    printf("DONE %ld %.6f\n", count, (double)(t1 - t0) / 1e9);
    fflush(stdout);
    GPU_CUBLAS(NAME, cublasDestroy(cb.h));
    GPU_CUDA(NAME, cudaStreamDestroy(cb.stream));
    GPU_CUDA(NAME, cudaFree(cb.a));
    GPU_CUDA(NAME, cudaFree(cb.b));
    GPU_CUDA(NAME, cudaFree(cb.c));
    free(c);
    free(a);
    free(b);
    return 0;
}

/* ---- the parent ---- */

/* One child's report. */
typedef struct child_report {
    long count;
    double elapsed_s;
} child_report;

/* Kills and reaps every child started so far, then ends the benchmark with the reason. */
static void fail_all(const pid_t *pids, int n, const char *side, const char *why, const char *out) {
    for (int i = 0; i < n; i++) gpu_reap(pids[i], 0);
    bench_die(NAME, "%s side: %s; child output: %.300s", side, why, out);
}

/* Parses one non-negative integer argument of a child; ends the child on garbage. */
static int int_arg(const char *text) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || v < 0 || v > 1000000) bench_die(NAME, "bad child argument '%s'", text);
    return (int)v;
}

/* Runs CLIENTS children of one side together; returns the aggregate rate (matmuls/s). */
static double run_side(const char *socket, const char *side, int n, int batch) {
    char self[4096], sn[16], sb[16], sw[16], sr[16], si[CLIENTS][16];
    snprintf(self, sizeof self, "%s", gpu_self_path(NAME));
    snprintf(sn, sizeof sn, "%d", n);
    snprintf(sb, sizeof sb, "%d", batch);
    snprintf(sw, sizeof sw, "%d", WARM_MS);
    snprintf(sr, sizeof sr, "%d", RUN_MS);
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) bench_die(NAME, "pipe2 failed: %s", strerror(errno));
    pid_t pids[CLIENTS];
    int fds[CLIENTS];
    static char out[CLIENTS][1024];
    size_t len[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        snprintf(si[i], sizeof si[i], "%d", i);
        char *args[] = {self, (char *)socket, "--child", (char *)side, sn, sb, sw, sr, si[i], NULL};
        pids[i] = gpu_spawn(NAME, args, go[0], &fds[i]);
        out[i][0] = '\0';
        len[i] = 0;
    }
    close(go[0]);
    const uint64_t ready_by = bench_now_ns() + (uint64_t)READY_TIMEOUT_S * 1000000000u;
    for (int i = 0; i < CLIENTS; i++)
        if (gpu_read_line(fds[i], out[i], sizeof out[i], &len[i], ready_by) != 1 ||
            strcmp(out[i], "READY\n") != 0) {
            close(go[1]);
            fail_all(pids, CLIENTS, side, "a child did not get ready", out[i]);
        }
    close(go[1]); /* every child's read of the start pipe returns 0: go */

    const uint64_t done_by =
        bench_now_ns() + (uint64_t)(WARM_MS + RUN_MS) * 1000000u + FINISH_SLACK_S * 1000000000ull;
    child_report rep[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        out[i][0] = '\0';
        len[i] = 0;
        int got = gpu_read_line(fds[i], out[i], sizeof out[i], &len[i], done_by);
        if (got != 1 || sscanf(out[i], "DONE %ld %lf", &rep[i].count, &rep[i].elapsed_s) != 2 ||
            rep[i].count <= 0 || !(rep[i].elapsed_s > 0))
            fail_all(pids, CLIENTS, side, "a child did not report a count", out[i]);
    }
    double total = 0, longest = 0;
    for (int i = 0; i < CLIENTS; i++) {
        close(fds[i]);
        int status = gpu_reap(pids[i], done_by);
        if (status != 0) {
            char why[64];
            snprintf(why, sizeof why, "child %d exited with status %d", i, status);
            fail_all(pids, CLIENTS, side, why, out[i]);
        }
        total += (double)rep[i].count;
        if (rep[i].elapsed_s > longest) longest = rep[i].elapsed_s;
        printf("# %s %dx%d child %d: %ld matmuls in %.3f s = %.0f/s\n", side, n, n, i,
               rep[i].count, rep[i].elapsed_s, (double)rep[i].count / rep[i].elapsed_s);
    }
    printf("# %s %dx%d: %d children, %.0f matmuls in %.3f s = %.0f/s in total\n", side, n, n,
           CLIENTS, total, longest, total / longest);
    fflush(stdout);
    return total / longest;
}

/* Both sides of one size, and its BENCH line. */
static void run_size(const char *socket, const char *name, int n, int batch) {
    double d = run_side(socket, "tenferrod", n, batch);
    double c = run_side(socket, "cuda", n, batch);
    printf("# %s: %d processes, %dx%d f32 matmuls in bursts of %d, %d ms warm-up + %d ms timed; "
           "every child's last product verified\n",
           name, CLIENTS, n, n, batch, WARM_MS, RUN_MS);
    bench_report(name, d, c, "matmuls/s");
}

int main(int argc, char **argv) {
    if (argc >= 9 && strcmp(argv[2], "--child") == 0) {
        child_args ca = {int_arg(argv[4]), int_arg(argv[5]), int_arg(argv[6]), int_arg(argv[7]),
                         int_arg(argv[8])};
        if (ca.n < 1 || ca.batch < 1 || ca.batch > MAX_BATCH)
            bench_die(NAME, "bad child size %d or batch %d", ca.n, ca.batch);
        if (strcmp(argv[3], "tenferrod") == 0) return child_tenferrod(argv, &ca);
        if (strcmp(argv[3], "cuda") == 0) return child_cuda(&ca);
        bench_die(NAME, "unknown child mode %s", argv[3]);
    }
    const char *socket = bench_socket_path(argc, argv);
    if (!socket) socket = "";
    /* Fail early and clearly when the daemon is not there (this touches no CUDA). */
    tf_client *probe = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(probe));
    fflush(stdout);
    tf_disconnect(probe);

    run_size(socket, "share4", 1024, 32);
    run_size(socket, "share4_small", 256, 128);
    return 0;
}
