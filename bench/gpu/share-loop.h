/*
 * The share loop of the GPU benchmarks (bench-share's share4 lines, bench-multi's share_scale):
 * several client processes, all released together, each running bursts of square f32 matmuls
 * for a warm-up and then a timed window, counting the products of completed bursts and
 * checking one last product against its digest.
 *
 *   tenferrod side (child mode "tenferrod"): each child connects to its daemon, uploads A and
 *     B once, then loops on scoped sessions (tf_with_session); each burst queues `batch`
 *     products A x B and then frees those outputs in the same burst (queued frees run after
 *     the products), so the daemon's memory stays bounded; the scoped session returns once the
 *     burst has completed on the device.
 *   cuda side (child mode "cuda"): each child has its own context, non-blocking stream and
 *     cuBLAS handle on device 0, and loops on `batch` cublasSgemm calls into one output
 *     followed by cudaStreamSynchronize.
 *
 * Children are fork+exec of the calling benchmark's own binary, with the command line
 *
 *   <self> <socket> --child tenferrod|cuda <n> <batch> <warm_ms> <run_ms> <index>
 *
 * which the benchmark's main hands to share_child_main first. Each child sets up (connects or
 * creates its context, uploads, runs one burst), writes READY and blocks reading its stdin;
 * the parent closes the write end of that shared pipe once all are ready, so all start
 * together. Each child then runs bursts for warm_ms untimed and run_ms timed and writes
 * "DONE <count> <elapsed s>". Aggregate = sum(count) / max(elapsed).
 *
 * The parent side never calls CUDA (its children could not use CUDA otherwise).
 */
#ifndef TENFERRO_BENCH_GPU_SHARE_LOOP_H
#define TENFERRO_BENCH_GPU_SHARE_LOOP_H

/* Most products one burst may queue. */
#define SHARE_MAX_BATCH 256

/* Most children one side may run. */
#define SHARE_MAX_CLIENTS 64

/* One side's run: which children, against which daemons, on which products. */
typedef struct share_side {
    const char *bench;           /* the benchmark's name, for messages */
    const char *mode;            /* child mode: "tenferrod" or "cuda" */
    const char *label;           /* what the '#' lines and failures call this side */
    int clients;                 /* children, 1..SHARE_MAX_CLIENTS */
    const char *const *sockets;  /* sockets[i]: child i's daemon (also passed to cuda children) */
    int n, batch;                /* n x n f32 products, `batch` per burst */
    int warm_ms, run_ms;         /* untimed warm-up, then the timed window */
} share_side;

/*
 * Runs one side's children together, prints a '#' line per child and one for the total,
 * and returns the aggregate rate (matmuls/s); a child that fails, hangs or reports a wrong
 * product ends the benchmark (bench_die) after every child was reaped.
 */
double share_run_side(const share_side *side);

/*
 * When argv is a share child's command line (argv[2] "--child", argv[3] "tenferrod" or
 * "cuda"), runs that child and returns its exit status; otherwise returns -1.
 */
int share_child_main(const char *bench, int argc, char **argv);

#endif
