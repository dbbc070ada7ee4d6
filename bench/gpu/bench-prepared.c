/*
 * bench-prepared (GPU): what a prepared graph saves on the GPU for a chain of
 * 100 small elementwise operations (bench/prepared-chain.h: scale, add, mul in
 * turn on 4096 f32), how close it comes to a CUDA graph launched in-process,
 * and what preparing costs. Run against a daemon on a CUDA device (the socket
 * is argv[1], as scripts/gpu-check.sh passes it).
 *
 *   prepared_chain  (µs per chain; µs per node printed too)
 *     tenferrod: the chain recorded once on a graph's view and prepared; each
 *                iteration, in one held session, is tf_session_with queueing
 *                tf_view_run_prepared, tf_session_synchronize, tf_tensor_free
 *                of the output.
 *     baseline:  the same 100 operations unprepared in the same held session
 *                (tf_session_with queueing the 100 tf_view_* calls, each
 *                intermediate freed in the callback once consumed,
 *                tf_session_synchronize, tf_tensor_free of the last output).
 *     The unprepared chain with all 100 outputs freed after the synchronize
 *     is timed alongside and printed as a '#' line.
 *   prepared_vs_graph  (µs per chain)
 *     tenferrod: the same prepared iteration.
 *     baseline:  the same 100 kernels in this process through the daemon's
 *                own CUDA backend (tfd_cuda_backend: open(0), stream_create,
 *                buffers from alloc without a stream), made into a CUDA graph
 *                once: by the backend's graph_capture where it has one, else
 *                here (cudaStreamBeginCapture on the backend stream's
 *                cudaStream_t, tfd_backend_run_op per node, cudaStreamEndCapture,
 *                cudaGraphInstantiateWithFlags). Each iteration is one launch
 *                (graph_launch or cudaGraphLaunch) and cudaStreamSynchronize.
 *                The graph reads x, y, z in place and writes a preallocated
 *                output: the floor of what any daemon could do.
 *   prepare_cost  (µs per tf_prepare)
 *     tenferrod: a second process's tf_prepare of the same graph after the
 *                first process freed its prepared graph (a cache hit).
 *     baseline:  the first tf_prepare of that graph (a constant no graph had
 *                before makes it a miss: checked, planned, built, captured).
 *     Both are checked to be what they claim by the daemon's status counters.
 *
 * Sides take turns iteration by iteration, WARMUP untimed rounds then ITERS
 * timed, median reported; inputs stay resident (neither side refills them),
 * neither side pauses. The first warm-up round of every side and one round
 * after the timed ones (the daemon's from a second input) are copied back and
 * compared with the chain computed here.
 *
 * CUDA rule (gpu-common.h): this process forks prepare-cost children, so it
 * runs them first, before it initialises CUDA for the in-process baseline;
 * the children are fresh execs and never touch CUDA.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/gpu-common.h"
#include "bench/prepared-chain.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"
#include "daemon/backend/cuda/internal.h"

#define WARMUP 20
#define ITERS 301
#define COST_WARMUP 2
#define COST_ROUNDS 21

static const char *const NAME = "bench-prepared";

/* The in-process side: the daemon's CUDA backend, its stream, the buffers and the graph. */
typedef struct graph_side {
    tfd_backend be;
    void *stream; /* a tfd_cuda_stream */
    void *x, *y, *z, *buf[2], *out;
    tfd_op ops[PCHAIN_NODES];
    int by_backend;       /* 1: the backend's graph_capture made the graph; 0: captured here */
    void *backend_graph;  /* by_backend */
    uint64_t graph_bytes; /* by_backend: what the backend says the graph holds */
    cudaGraph_t graph;    /* !by_backend */
    cudaGraphExec_t exec; /* !by_backend */
    float want[PCHAIN_LEN];
    double max_diff;
} graph_side;

/* Ends the benchmark naming a backend entry that failed. */
static void backend_ok(tf_status st, const char *what, const char *msg) {
    if (st != TF_OK)
        bench_die(NAME, "cuda backend: %s: %s: %s", what, tf_status_name(st),
                  msg && msg[0] ? msg : "(see the log lines above)");
}

static cudaStream_t native_stream(const graph_side *gs) {
    return ((const tfd_cuda_stream *)gs->stream)->stream;
}

/* PCHAIN_LEN f32 of device memory that stays put (alloc without a stream), filled from init. */
static void *device_vector(graph_side *gs, const float *init) {
    void *p = NULL;
    const size_t bytes = sizeof(float) * PCHAIN_LEN;
    backend_ok(gs->be.vt->alloc(&gs->be, NULL, bytes, &p), "alloc", NULL);
    if (init)
        backend_ok(gs->be.vt->copy_to_device(&gs->be, gs->stream, p, init, bytes), "copy_to_device",
                   NULL);
    return p;
}

/* A kernel's view of one of the side's vectors. */
static tfd_tensor_view view_of(void *data) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = TF_F32;
    v.rank = 1;
    v.shape[0] = PCHAIN_LEN;
    v.numel = PCHAIN_LEN;
    v.data = data;
    return v;
}

/* The chain's descriptors: node k reads the previous result (x first) and writes buf[k & 1]. */
static void build_ops(graph_side *gs) {
    void *prev = gs->x;
    for (int k = 0; k < PCHAIN_NODES; k++) {
        tfd_op *op = &gs->ops[k];
        memset(op, 0, sizeof *op);
        op->in[0] = view_of(prev);
        switch (k % 3) {
        case 0:
            op->kind = TF__OP_SCALE;
            op->n_inputs = 1;
            op->alpha.re = pchain_alpha(k, PCHAIN_ALPHA);
            break;
        case 1:
            op->kind = TF__OP_ADD;
            op->n_inputs = 2;
            op->in[1] = view_of(gs->y);
            break;
        default:
            op->kind = TF__OP_MUL;
            op->n_inputs = 2;
            op->in[1] = view_of(gs->z);
            break;
        }
        void *dst = k == PCHAIN_NODES - 1 ? gs->out : gs->buf[k & 1];
        op->out = view_of(dst);
        prev = dst;
    }
}

/* Makes the graph: the backend's graph_capture when it has one, else a stream capture here. */
static void make_graph(graph_side *gs) {
    char msg[512] = "";
    if (gs->be.vt->graph_capture) {
        gs->by_backend = 1;
        backend_ok(gs->be.vt->graph_capture(&gs->be, gs->ops, PCHAIN_NODES, &gs->backend_graph,
                                            &gs->graph_bytes, msg, sizeof msg),
                   "graph_capture", msg);
        return;
    }
    const cudaStream_t st = native_stream(gs);
    GPU_CUDA(NAME, cudaStreamSynchronize(st));
    GPU_CUDA(NAME, cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < PCHAIN_NODES; k++) {
        const tf_status r = tfd_backend_run_op(&gs->be, gs->stream, &gs->ops[k], msg, sizeof msg);
        if (r != TF_OK) {
            cudaGraph_t partial = NULL;
            (void)cudaStreamEndCapture(st, &partial);
            if (partial) cudaGraphDestroy(partial);
            bench_die(NAME, "capturing kernel %d: %s: %s", k, tf_status_name(r), msg);
        }
    }
    GPU_CUDA(NAME, cudaStreamEndCapture(st, &gs->graph));
    GPU_CUDA(NAME, cudaGraphInstantiateWithFlags(&gs->exec, gs->graph, 0));
}

static void graph_open(graph_side *gs, const pchain_data *data) {
    if (tfd_cuda_device_count() < 1) bench_die(NAME, "no CUDA device visible to this process");
    gs->be.vt = &tfd_cuda_backend;
    char msg[256] = "";
    backend_ok(gs->be.vt->open(&gs->be, 0, msg, sizeof msg), "open(0)", msg);
    backend_ok(gs->be.vt->stream_create(&gs->be, 0, &gs->stream), "stream_create", NULL);
    gs->x = device_vector(gs, data->x[0]);
    gs->y = device_vector(gs, data->y);
    gs->z = device_vector(gs, data->z);
    gs->buf[0] = device_vector(gs, NULL);
    gs->buf[1] = device_vector(gs, NULL);
    gs->out = device_vector(gs, NULL);
    GPU_CUDA(NAME, cudaStreamSynchronize(native_stream(gs)));
    pchain_reference(data, data->x[0], PCHAIN_ALPHA, gs->want);
    build_ops(gs);
    make_graph(gs);
}

/* One launch of the graph and the wait for it; µs. With check, the output is compared after. */
static double graph_once(graph_side *gs, int check) {
    const cudaStream_t st = native_stream(gs);
    char msg[256] = "";
    const uint64_t t0 = bench_now_ns();
    if (gs->by_backend)
        backend_ok(gs->be.vt->graph_launch(&gs->be, gs->stream, gs->backend_graph, msg, sizeof msg),
                   "graph_launch", msg);
    else
        GPU_CUDA(NAME, cudaGraphLaunch(gs->exec, st));
    GPU_CUDA(NAME, cudaStreamSynchronize(st));
    const double us = (double)(bench_now_ns() - t0) / 1e3;
    if (check) {
        static float got[PCHAIN_LEN];
        backend_ok(gs->be.vt->copy_to_host(&gs->be, gs->stream, got, gs->out, sizeof got),
                   "copy_to_host", NULL);
        GPU_CUDA(NAME, cudaStreamSynchronize(st));
        const double diff = pchain_check(NAME, got, gs->want, "in-process CUDA graph");
        if (diff > gs->max_diff) gs->max_diff = diff;
    }
    return us;
}

static void graph_close(graph_side *gs) {
    GPU_CUDA(NAME, cudaStreamSynchronize(native_stream(gs)));
    if (gs->by_backend) {
        gs->be.vt->graph_destroy(&gs->be, gs->backend_graph);
    } else {
        GPU_CUDA(NAME, cudaGraphExecDestroy(gs->exec));
        GPU_CUDA(NAME, cudaGraphDestroy(gs->graph));
    }
    void *const ptrs[6] = {gs->x, gs->y, gs->z, gs->buf[0], gs->buf[1], gs->out};
    for (int i = 0; i < 6; i++) gs->be.vt->free(&gs->be, NULL, ptrs[i], sizeof(float) * PCHAIN_LEN);
    gs->be.vt->stream_destroy(&gs->be, gs->stream);
    gs->be.vt->close(&gs->be);
    if (tfd_cuda_context_poisoned())
        bench_die(NAME, "the in-process CUDA context was poisoned: %s", tfd_cuda_poison_reason());
}

int main(int argc, char **argv) {
    const int child = pchain_child_main(NAME, argc, argv);
    if (child >= 0) return child;

    static pchain_data data;
    pchain_make_data(&data);
    tf_client *c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(c));
    fflush(stdout);

    /* Prepare cost first: every round's graph is new to the daemon, and no CUDA here yet. */
    double miss[COST_ROUNDS], hit[COST_ROUNDS];
    pchain_prepare_cost(NAME, c, argc, argv, COST_WARMUP, COST_ROUNDS, miss, hit);

    /* prepared_chain: the three daemon sides in turn. */
    static pchain_daemon d;
    pchain_daemon_open(&d, NAME, c, &data);
    for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 0, 1);
    for (int i = 1; i < WARMUP; i++)
        for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 0, 0);
    static double t[PCHAIN_SIDES][ITERS];
    for (int i = 0; i < ITERS; i++)
        for (int s = 0; s < PCHAIN_SIDES; s++) t[s][i] = pchain_daemon_once(&d, (pchain_side)s, 0, 0);

    /* prepared_vs_graph: the prepared run against the in-process CUDA graph, in turn. */
    static graph_side gs;
    graph_open(&gs, &data);
    printf("# baseline device: %s (tfd_cuda_backend in-process); its graph %s\n",
           gs.be.description,
           gs.by_backend ? "comes from the backend's graph_capture, as the daemon's prepared "
                           "instances do"
                         : "is captured here: this build's CUDA backend has no graph_capture, so "
                           "the daemon runs a prepared graph node by node");
    fflush(stdout);
    pchain_daemon_once(&d, PCHAIN_PREPARED, 0, 1);
    graph_once(&gs, 1);
    for (int i = 1; i < WARMUP; i++) {
        pchain_daemon_once(&d, PCHAIN_PREPARED, 0, 0);
        graph_once(&gs, 0);
    }
    static double vs_daemon[ITERS], vs_graph[ITERS];
    for (int i = 0; i < ITERS; i++) {
        vs_daemon[i] = pchain_daemon_once(&d, PCHAIN_PREPARED, 0, 0);
        vs_graph[i] = graph_once(&gs, 0);
    }
    /* Last checks: every daemon side from the second input, and the graph into a zeroed output. */
    for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 1, 1);
    backend_ok(gs.be.vt->fill_zero(&gs.be, gs.stream, gs.out, sizeof(float) * PCHAIN_LEN),
               "fill_zero", NULL);
    graph_once(&gs, 1);
    pchain_daemon_close(&d);
    graph_close(&gs);

    double med[PCHAIN_SIDES], best[PCHAIN_SIDES];
    for (int s = 0; s < PCHAIN_SIDES; s++) {
        med[s] = bench_summary(t[s], ITERS, BENCH_MEDIAN); /* sorts: t[s][0] is the best */
        best[s] = t[s][0];
    }
    const double prepared = med[PCHAIN_PREPARED], unprepared = med[PCHAIN_UNPREPARED];
    printf("# prepared_chain: %d-node chain (scale, add, mul) of %d f32 in one held session; "
           "median of %d alternating after %d warm-up\n",
           PCHAIN_NODES, PCHAIN_LEN, ITERS, WARMUP);
    printf("# prepared_chain: results checked against the chain computed here: max |diff| "
           "prepared %.3g, unprepared %.3g, unprepared with late frees %.3g, in-process graph "
           "%.3g\n",
           d.max_diff[PCHAIN_PREPARED], d.max_diff[PCHAIN_UNPREPARED],
           d.max_diff[PCHAIN_LATE_FREES], gs.max_diff);
    printf("# prepared_chain: best / p10 / p90 prepared %.1f / %.1f / %.1f us, unprepared %.1f / "
           "%.1f / %.1f us\n",
           best[PCHAIN_PREPARED], t[PCHAIN_PREPARED][ITERS / 10],
           t[PCHAIN_PREPARED][ITERS - 1 - ITERS / 10], best[PCHAIN_UNPREPARED],
           t[PCHAIN_UNPREPARED][ITERS / 10], t[PCHAIN_UNPREPARED][ITERS - 1 - ITERS / 10]);
    printf("# prepared_chain: unprepared with all %d outputs freed after the synchronize (%d "
           "Free frames): median %.1f us (%.2fx the prepared run)\n",
           PCHAIN_NODES, PCHAIN_NODES, med[PCHAIN_LATE_FREES], med[PCHAIN_LATE_FREES] / prepared);
    bench_report("prepared_chain", prepared, unprepared, "us");
    printf("# prepared_chain: %.3f us per node prepared (target <= 1.0), %.3f unprepared; "
           "baseline/tenferrod = %.2fx faster prepared (target >= 4x)\n",
           prepared / PCHAIN_NODES, unprepared / PCHAIN_NODES, unprepared / prepared);

    const double vs_d = bench_summary(vs_daemon, ITERS, BENCH_MEDIAN);
    const double vs_g = bench_summary(vs_graph, ITERS, BENCH_MEDIAN);
    printf("# prepared_vs_graph: median of %d alternating after %d warm-up; best / p10 / p90 "
           "%.1f / %.1f / %.1f against %.1f / %.1f / %.1f us; %.3f against %.3f us per node\n",
           ITERS, WARMUP, vs_daemon[0], vs_daemon[ITERS / 10], vs_daemon[ITERS - 1 - ITERS / 10],
           vs_graph[0], vs_graph[ITERS / 10], vs_graph[ITERS - 1 - ITERS / 10], vs_d / PCHAIN_NODES,
           vs_g / PCHAIN_NODES);
    bench_report("prepared_vs_graph", vs_d, vs_g, "us");
    printf("# prepared_vs_graph: target tenferrod <= 1.5x baseline; tenferrod - baseline = %.1f "
           "us\n",
           vs_d - vs_g);

    const double hit_med = bench_summary(hit, COST_ROUNDS, BENCH_MEDIAN);
    const double miss_med = bench_summary(miss, COST_ROUNDS, BENCH_MEDIAN);
    printf("# prepare_cost: tf_prepare of the %d-node chain, median of %d rounds after %d "
           "warm-up; first prepare (a miss) in this process, the second (a hit) in a fresh child "
           "process after this one freed its graph; best %.1f against %.1f us\n",
           PCHAIN_NODES, COST_ROUNDS, COST_WARMUP, hit[0], miss[0]);
    bench_report("prepare_cost", hit_med, miss_med, "us");
    printf("# prepare_cost: baseline/tenferrod = %.2fx faster on a cache hit (target >= 10x)\n",
           miss_med / hit_med);

    tf_disconnect(c);
    return 0;
}
