/*
 * bench-einsum-path: why the pairwise order of an einsum matters. Four f64
 * matrices and a vector, all of size N = 512, contracted to a vector:
 *
 *   "ij,jk,kl,lm,m->i"   (A B C D v)
 *
 * Left to right (numpy's naive order) multiplies the matrices first, three
 * N^3 products; greedy and optimal start from the vector and do four N^2
 * matrix-vector products. Both run through the daemon in the same run:
 *
 *   tenferrod: the greedy (line einsum_path) or the optimal (einsum_path_optimal) order
 *   baseline:  the left-to-right order
 *
 * Each iteration is tf_session_with queueing the einsum in a held session,
 * tf_session_synchronize, then tf_tensor_free of the result; inputs are
 * uploaded once. Median of ITERS timed iterations per order, in BLOCKS
 * alternating blocks with a pause before each, in µs. A '#' line gives the
 * flop counts tf_einsum_path reports and their ratio. Each order's result is
 * checked once against the product computed here with plain loops.
 *
 * A daemon that does not run OP_CONTRACT (TF_ERR_UNSUPPORTED) is reported on
 * a '#' line and the benchmark ends without a figure, successfully.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench-common.h"

#define N 512
#define WARMUP 3
#define ITERS 15
#define BLOCKS 3
#define PAUSE_MS 200 /* longer than OpenBLAS's idle threads spin before they sleep */
#define N_ORDERS 3

static const char *const NAME = "bench-einsum-path";
static const char *const EXPR = "ij,jk,kl,lm,m->i";

static const tf_einsum_optimize orders[N_ORDERS] = {TF_EINSUM_GREEDY, TF_EINSUM_OPTIMAL,
                                                    TF_EINSUM_LEFT_TO_RIGHT};
static const char *const order_names[N_ORDERS] = {"greedy", "optimal", "left-to-right"};

typedef struct job {
    tf_tensor in[5];
    tf_einsum_options opt;
    tf_tensor out;
} job;

static tf_status contract(tf_view *v, void *arg) {
    job *j = arg;
    return tf_view_einsum_opt(v, EXPR, 5, j->in, &j->opt, &j->out);
}

/* One iteration: queue, synchronize, free; µs. */
static double once(tf_client *c, tf_session *s, job *j) {
    uint64_t t0 = bench_now_ns();
    bench_check(NAME, c, tf_session_with(s, contract, j), "tf_session_with");
    bench_check(NAME, c, tf_session_synchronize(s), "tf_session_synchronize");
    bench_check(NAME, c, tf_tensor_free(c, j->out), "tf_tensor_free");
    uint64_t t1 = bench_now_ns();
    return (double)(t1 - t0) / 1e3;
}

/* y = M x for an N x N row-major matrix. */
static void matvec(const double *m, const double *x, double *y) {
    for (int i = 0; i < N; i++) {
        double acc = 0;
        for (int k = 0; k < N; k++) acc += m[(size_t)i * N + k] * x[k];
        y[i] = acc;
    }
}

int main(int argc, char **argv) {
    double *mat[4], vec[N], ref[N], tmp[N];
    for (int k = 0; k < 4; k++) {
        mat[k] = malloc(sizeof(double) * N * N);
        if (!mat[k]) bench_die(NAME, "out of memory");
    }
    srand(2718);
    /* Entries of about 1/sqrt(N) keep every product of order 1. */
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; i < (size_t)N * N; i++)
            mat[k][i] = ((double)rand() / RAND_MAX - 0.5) * 3.4 / sqrt(N);
    for (int i = 0; i < N; i++) vec[i] = (double)rand() / RAND_MAX - 0.5;
    matvec(mat[3], vec, ref);
    matvec(mat[2], ref, tmp);
    matvec(mat[1], tmp, ref);
    matvec(mat[0], ref, tmp);
    for (int i = 0; i < N; i++) ref[i] = tmp[i];

    tf_client *c = bench_connect(argc, argv);
    job jobs[N_ORDERS];
    const int64_t mshape[2] = {N, N}, vshape[1] = {N};
    tf_tensor in[5];
    for (int k = 0; k < 4; k++)
        bench_check(NAME, c, tf_upload(c, TF_F64, 2, mshape, mat[k], &in[k]), "tf_upload");
    bench_check(NAME, c, tf_upload(c, TF_F64, 1, vshape, vec, &in[4]), "tf_upload");
    double flops[N_ORDERS];
    for (int o = 0; o < N_ORDERS; o++) {
        for (int k = 0; k < 5; k++) jobs[o].in[k] = in[k];
        jobs[o].opt = (tf_einsum_options){orders[o], 0};
        tf_einsum_path_info *info = NULL;
        bench_check(NAME, c, tf_einsum_path(c, EXPR, 5, in, &jobs[o].opt, &info), "tf_einsum_path");
        flops[o] = info->flops;
        tf_einsum_path_free(info);
    }

    tf_session *s = NULL;
    bench_check(NAME, c, tf_session_open(c, &s), "tf_session_open");
    /* Correctness, once per order; a daemon without contractions ends the benchmark here. */
    for (int o = 0; o < N_ORDERS; o++) {
        bench_check(NAME, c, tf_session_with(s, contract, &jobs[o]), "tf_session_with");
        tf_status st = tf_session_synchronize(s);
        if (st == TF_ERR_UNSUPPORTED) {
            printf("# einsum_path: skipped: this daemon does not run OP_CONTRACT (%s)\n",
                   tf_client_last_error(c));
            tf_session_close(s, NULL);
            tf_disconnect(c);
            return 0;
        }
        bench_check(NAME, c, st, "tf_session_synchronize");
        double *out = NULL;
        size_t bytes = 0;
        bench_check(NAME, c, tf_download(c, jobs[o].out, (void **)&out, &bytes), "tf_download");
        bench_check(NAME, c, tf_tensor_free(c, jobs[o].out), "tf_tensor_free");
        if (bytes != sizeof(double) * N) bench_die(NAME, "the result has %zu bytes", bytes);
        double worst = 0;
        for (int i = 0; i < N; i++) worst = fmax(worst, fabs(out[i] - ref[i]) / (1 + fabs(ref[i])));
        free(out);
        if (!(worst <= 1e-10))
            bench_die(NAME, "the %s order's result differs from the loops by %g", order_names[o],
                      worst);
    }

    static double samples[N_ORDERS][ITERS];
    const int per_block = ITERS / BLOCKS;
    for (int blk = 0; blk < BLOCKS; blk++)
        for (int o = 0; o < N_ORDERS; o++) {
            bench_sleep_ms(PAUSE_MS);
            for (int i = 0; i < (blk ? 1 : WARMUP); i++) once(c, s, &jobs[o]);
            for (int i = 0; i < per_block; i++) samples[o][blk * per_block + i] = once(c, s, &jobs[o]);
        }
    bench_check(NAME, c, tf_session_close(s, NULL), "tf_session_close");

    double med[N_ORDERS];
    for (int o = 0; o < N_ORDERS; o++) med[o] = bench_summary(samples[o], ITERS, BENCH_MEDIAN);
    printf("# einsum_path: %s on %dx%d f64 matrices and a vector; median of %d in %d alternating "
           "blocks after %d warm-up\n",
           EXPR, N, N, ITERS, BLOCKS, WARMUP);
    printf("# einsum_path flops: greedy %.4g, optimal %.4g, left-to-right %.4g: left-to-right "
           "does %.1fx the flops of greedy\n",
           flops[0], flops[1], flops[2], flops[2] / flops[0]);
    bench_report("einsum_path", med[0], med[2], "us");
    bench_report("einsum_path_optimal", med[1], med[2], "us");

    tf_disconnect(c);
    for (int k = 0; k < 4; k++) free(mat[k]);
    return 0;
}
