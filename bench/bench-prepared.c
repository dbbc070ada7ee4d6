/*
 * bench-prepared: what a prepared graph saves on the CPU for a chain of 100
 * small elementwise operations (bench/prepared-chain.h has the chain: scale,
 * add, mul in turn on 4096 f32), and what preparing costs.
 *
 *   cpu_prepared_chain  (µs per chain)
 *     tenferrod: the chain recorded once on a graph's view and prepared; each
 *                iteration, in one held session, is tf_session_with queueing
 *                tf_view_run_prepared, tf_session_synchronize, tf_tensor_free
 *                of the output.
 *     baseline:  the same 100 operations unprepared in the same held session:
 *                tf_session_with queueing the 100 tf_view_* calls (each
 *                intermediate freed in the callback once consumed, so the
 *                frees travel in the same Submit), tf_session_synchronize,
 *                tf_tensor_free of the last output.
 *     Timed alongside and printed as '#' lines: the unprepared chain with all
 *     100 outputs freed after the synchronize, and the floor, the same 100
 *     kernels run in this process by the daemon's own CPU backend
 *     (tfd_cpu_backend, tfd_backend_run_op, two preallocated buffers in turn).
 *   cpu_prepare_cost  (µs per tf_prepare)
 *     tenferrod: a second process's tf_prepare of the same graph after the
 *                first process freed its prepared graph: a hit of the
 *                daemon's prepared_graphs cache.
 *     baseline:  the first tf_prepare of that graph (a constant no graph had
 *                before makes it a miss): checked, planned and built.
 *     Both are checked to be what they claim by the daemon's status counters.
 *
 * The chain sides take turns iteration by iteration, WARMUP untimed rounds
 * then ITERS timed, median reported; the inputs stay resident (neither side
 * refills them) and neither side pauses. The first warm-up round of every
 * side and one round after the timed ones (from a second input) are
 * downloaded and compared with the chain computed here. The prepare-cost
 * rounds run first, before the daemon has seen this process's chain.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench-common.h"
#include "bench/prepared-chain.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"

#define WARMUP 20
#define ITERS 1001
#define COST_WARMUP 2
#define COST_ROUNDS 21

static const char *const NAME = "bench-prepared";

/* The floor: the daemon's CPU backend in this process, the operands and two work buffers. */
typedef struct kernel_side {
    tfd_backend be;
    void *stream;
    tfd_tensor_view x, y, z, buf[2];
    float want[PCHAIN_LEN];
    double max_diff;
} kernel_side;

/* A PCHAIN_LEN-element f32 vector of the CPU backend, filled from init when given. */
static tfd_tensor_view kernel_vector(kernel_side *ks, const float *init) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = TF_F32;
    v.rank = 1;
    v.shape[0] = PCHAIN_LEN;
    v.numel = PCHAIN_LEN;
    if (ks->be.vt->alloc(&ks->be, ks->stream, sizeof(float) * PCHAIN_LEN, &v.data) != TF_OK)
        bench_die(NAME, "cpu backend: alloc failed");
    if (init && ks->be.vt->copy_to_device(&ks->be, ks->stream, v.data, init,
                                          sizeof(float) * PCHAIN_LEN) != TF_OK)
        bench_die(NAME, "cpu backend: copy_to_device failed");
    return v;
}

static void kernel_open(kernel_side *ks, const pchain_data *data) {
    ks->be.vt = &tfd_cpu_backend;
    char msg[256] = "";
    if (ks->be.vt->open(&ks->be, 0, msg, sizeof msg) != TF_OK)
        bench_die(NAME, "cpu backend: open: %s", msg);
    if (ks->be.vt->stream_create(&ks->be, 0, &ks->stream) != TF_OK)
        bench_die(NAME, "cpu backend: stream_create failed");
    ks->x = kernel_vector(ks, data->x[0]);
    ks->y = kernel_vector(ks, data->y);
    ks->z = kernel_vector(ks, data->z);
    ks->buf[0] = kernel_vector(ks, NULL);
    ks->buf[1] = kernel_vector(ks, NULL);
    pchain_reference(data, data->x[0], PCHAIN_ALPHA, ks->want);
}

/* The 100 kernels through tfd_backend_run_op, as the daemon's worker runs them; µs. */
static double kernel_once(kernel_side *ks, int check) {
    char msg[256] = "";
    const tfd_tensor_view *t = &ks->x;
    const uint64_t t0 = bench_now_ns();
    for (int k = 0; k < PCHAIN_NODES; k++) {
        tfd_op op;
        memset(&op, 0, sizeof op);
        op.in[0] = *t;
        switch (k % 3) {
        case 0:
            op.kind = TF__OP_SCALE;
            op.n_inputs = 1;
            op.alpha.re = pchain_alpha(k, PCHAIN_ALPHA);
            break;
        case 1:
            op.kind = TF__OP_ADD;
            op.n_inputs = 2;
            op.in[1] = ks->y;
            break;
        default:
            op.kind = TF__OP_MUL;
            op.n_inputs = 2;
            op.in[1] = ks->z;
            break;
        }
        op.out = ks->buf[k & 1];
        const tf_status st = tfd_backend_run_op(&ks->be, ks->stream, &op, msg, sizeof msg);
        if (st != TF_OK) bench_die(NAME, "kernel %d: %s: %s", k, tf_status_name(st), msg);
        t = &ks->buf[k & 1];
    }
    const double us = (double)(bench_now_ns() - t0) / 1e3;
    if (check) {
        const double diff = pchain_check(NAME, t->data, ks->want, "in-process kernels");
        if (diff > ks->max_diff) ks->max_diff = diff;
    }
    return us;
}

static void kernel_close(kernel_side *ks) {
    tfd_tensor_view *v[5] = {&ks->x, &ks->y, &ks->z, &ks->buf[0], &ks->buf[1]};
    for (int i = 0; i < 5; i++)
        ks->be.vt->free(&ks->be, ks->stream, v[i]->data, sizeof(float) * PCHAIN_LEN);
    ks->be.vt->stream_destroy(&ks->be, ks->stream);
    ks->be.vt->close(&ks->be);
}

int main(int argc, char **argv) {
    const int child = pchain_child_main(NAME, argc, argv);
    if (child >= 0) return child;

    static pchain_data data;
    pchain_make_data(&data);
    tf_client *c = bench_connect(argc, argv);

    /* Prepare cost first: every round's graph is new to the daemon. */
    double miss[COST_ROUNDS], hit[COST_ROUNDS];
    pchain_prepare_cost(NAME, c, argc, argv, COST_WARMUP, COST_ROUNDS, miss, hit);

    static pchain_daemon d;
    static kernel_side ks;
    pchain_daemon_open(&d, NAME, c, &data);
    kernel_open(&ks, &data);
    for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 0, 1);
    kernel_once(&ks, 1);
    for (int i = 1; i < WARMUP; i++) {
        for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 0, 0);
        kernel_once(&ks, 0);
    }
    static double t[PCHAIN_SIDES][ITERS], floor_t[ITERS];
    for (int i = 0; i < ITERS; i++) {
        for (int s = 0; s < PCHAIN_SIDES; s++) t[s][i] = pchain_daemon_once(&d, (pchain_side)s, 0, 0);
        floor_t[i] = kernel_once(&ks, 0);
    }
    for (int s = 0; s < PCHAIN_SIDES; s++) pchain_daemon_once(&d, (pchain_side)s, 1, 1);
    memset(ks.buf[0].data, 0, sizeof(float) * PCHAIN_LEN); /* the last check sees fresh results */
    memset(ks.buf[1].data, 0, sizeof(float) * PCHAIN_LEN);
    kernel_once(&ks, 1);
    pchain_daemon_close(&d);
    kernel_close(&ks);
    const double floor_med = bench_summary(floor_t, ITERS, BENCH_MEDIAN);

    double best[PCHAIN_SIDES], med[PCHAIN_SIDES];
    for (int s = 0; s < PCHAIN_SIDES; s++) {
        med[s] = bench_summary(t[s], ITERS, BENCH_MEDIAN); /* sorts: best is t[s][0] after */
        best[s] = t[s][0];
    }
    const double prepared = med[PCHAIN_PREPARED], unprepared = med[PCHAIN_UNPREPARED];
    printf("# cpu_prepared_chain: %d-node chain (scale, add, mul) of %d f32 in one held session; "
           "median of %d alternating after %d warm-up; load average %.1f at the end\n",
           PCHAIN_NODES, PCHAIN_LEN, ITERS, WARMUP, pchain_load());
    printf("# cpu_prepared_chain: results checked against the chain computed here: max |diff| "
           "prepared %.3g, unprepared %.3g, unprepared with late frees %.3g\n",
           d.max_diff[PCHAIN_PREPARED], d.max_diff[PCHAIN_UNPREPARED],
           d.max_diff[PCHAIN_LATE_FREES]);
    printf("# cpu_prepared_chain: per node %.3f against %.3f us; best / p10 / p90 prepared %.1f / "
           "%.1f / %.1f us, unprepared %.1f / %.1f / %.1f us\n",
           prepared / PCHAIN_NODES, unprepared / PCHAIN_NODES, best[PCHAIN_PREPARED],
           t[PCHAIN_PREPARED][ITERS / 10], t[PCHAIN_PREPARED][ITERS - 1 - ITERS / 10],
           best[PCHAIN_UNPREPARED], t[PCHAIN_UNPREPARED][ITERS / 10],
           t[PCHAIN_UNPREPARED][ITERS - 1 - ITERS / 10]);
    printf("# cpu_prepared_chain: unprepared with all %d outputs freed after the synchronize "
           "(%d Free frames): median %.1f us (%.2fx the prepared run)\n",
           PCHAIN_NODES, PCHAIN_NODES, med[PCHAIN_LATE_FREES], med[PCHAIN_LATE_FREES] / prepared);
    printf("# cpu_prepared_chain: the same %d kernels in this process (tfd_cpu_backend): median "
           "%.1f us, p10 / p90 %.1f / %.1f (max |diff| %.3g); above it: prepared %.1f us, "
           "unprepared %.1f us\n",
           PCHAIN_NODES, floor_med, floor_t[ITERS / 10], floor_t[ITERS - 1 - ITERS / 10],
           ks.max_diff, prepared - floor_med, unprepared - floor_med);
    bench_report("cpu_prepared_chain", prepared, unprepared, "us");
    printf("# cpu_prepared_chain: baseline/tenferrod = %.2fx faster prepared (target >= 2x)\n",
           unprepared / prepared);

    const double hit_med = bench_summary(hit, COST_ROUNDS, BENCH_MEDIAN);
    const double miss_med = bench_summary(miss, COST_ROUNDS, BENCH_MEDIAN);
    printf("# cpu_prepare_cost: tf_prepare of the %d-node chain, median of %d rounds after %d "
           "warm-up; first prepare (a miss) in this process, the second (a hit) in a fresh child "
           "process after this one freed its graph; best %.1f against %.1f us\n",
           PCHAIN_NODES, COST_ROUNDS, COST_WARMUP, hit[0], miss[0]);
    bench_report("cpu_prepare_cost", hit_med, miss_med, "us");
    printf("# cpu_prepare_cost: baseline/tenferrod = %.2fx faster on a cache hit (target >= 10x)\n",
           miss_med / hit_med);

    tf_disconnect(c);
    return 0;
}
