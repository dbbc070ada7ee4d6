/*
 * demo-holder: the client of the demo that holds the device (docs/demo.md).
 *
 *   demo-holder [SOCKET] [--stages 2] [--n 512] [--steps 8] [--hold-ms 1000] [--gap-ms 300]
 *
 * A held session reserves the device's execution domain for a whole stage.
 * Each stage here opens one (tf_session_open), runs a chain of dependent
 * products X <- A X of n x n f64 matrices, one tf_session_with and one
 * tf_session_submit per step, synchronizes, reads the result back, keeps the
 * session for at least --hold-ms in all (the host side of a stage: looking at
 * results between steps), and closes it. Under the daemon's `wait` policy
 * every other client's session entry during that time queues behind it; that
 * is what the demo's wait columns show. Between stages the holder pauses
 * --gap-ms, and the others run.
 *
 * Checked against the same chain computed here with cblas_dgemm (also the
 * in-process timing), normwise to 1e-10.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "demo-common.h"

#define TOLERANCE 1e-10

/* State of the step callback: the matrix and the current product. */
typedef struct chain {
    tf_tensor a, x;
} chain;

/* One step X <- A X, the previous X freed after the product that reads it. */
static tf_status queue_step(tf_view *v, void *arg) {
    chain *ch = arg;
    tf_tensor next;
    tf_status s = tf_view_matmul(v, ch->a, ch->x, &next);
    if (s != TF_OK) return s;
    s = tf_tensor_free(tf_view_client(v), ch->x);
    ch->x = next;
    return s;
}

/* The same chain here: x is overwritten with A^steps x. */
static void inproc_chain(int n, int steps, const double *a, double *x, double *tmp) {
    for (int s = 0; s < steps; s++) {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0, a, n, x, n, 0.0, tmp, n);
        memcpy(x, tmp, (size_t)n * n * sizeof *x);
    }
}

/* Largest |x - y| over the largest |y|. */
static double normwise(const double *x, const double *y, size_t n) {
    double err = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
        err = fmax(err, fabs(x[i] - y[i]));
        big = fmax(big, fabs(y[i]));
    }
    return big > 0 ? err / big : err;
}

int main(int argc, char **argv) {
    demo_run r;
    demo_start(&r, "holder", argc, argv);
    int stages = demo_option(&r, argc, argv, "--stages", 2);
    int n = demo_option(&r, argc, argv, "--n", 512);
    int steps = demo_option(&r, argc, argv, "--steps", 8);
    int hold_ms = demo_option(&r, argc, argv, "--hold-ms", 1000);
    int gap_ms = demo_option(&r, argc, argv, "--gap-ms", 300);
    size_t elems = (size_t)n * n;
    double *a = malloc(elems * sizeof *a), *x = malloc(elems * sizeof *x);
    double *mine = malloc(elems * sizeof *mine), *tmp = malloc(elems * sizeof *tmp);
    if (!a || !x || !mine || !tmp) demo_die(&r, "out of memory");

    demo_rng g;
    demo_rng_init(&g, r.seed);
    const int64_t shape[2] = {n, n};
    double worst = 0, held_s = 0;
    void *buf = NULL;
    size_t cap = 0;
    uint64_t ops = 0;
    for (int k = 0; k < stages; k++) {
        if (k > 0) demo_sleep_ms(gap_ms);
        /* Entries of variance 1/n: the chain neither blows up nor dies out. */
        demo_fill(&g, a, elems, sqrt(3.0 / n));
        demo_fill(&g, x, elems, 1.0);
        memcpy(mine, x, elems * sizeof *x);

        double t0 = demo_now();
        tf_session *s;
        demo_check(&r, tf_session_open(r.client, &s), "tf_session_open");
        double t1 = demo_now();
        demo_count_entry(&r, t1 - t0);
        chain ch = {demo_upload(&r, TF_F64, 2, shape, a), demo_upload(&r, TF_F64, 2, shape, x)};
        double t2 = demo_now();
        for (int i = 0; i < steps; i++) {
            demo_check(&r, tf_session_with(s, queue_step, &ch), "tf_session_with");
            demo_check(&r, tf_session_submit(s), "tf_session_submit");
        }
        demo_check(&r, tf_session_synchronize(s), "tf_session_synchronize");
        r.daemon_s += demo_now() - t2;
        demo_download(&r, ch.x, &buf, &cap);
        /* The rest of the stage: the session stays held until hold_ms have passed since it opened. */
        double left_ms = hold_ms - (demo_now() - t1) * 1e3;
        if (left_ms > 0) demo_sleep_ms((int)left_ms);
        tf_session_counters counters;
        demo_check(&r, tf_session_close(s, &counters), "tf_session_close");
        held_s += demo_now() - t1;
        ops += counters.queued_ops;
        demo_check(&r, tf_tensor_free(r.client, ch.a), "tf_tensor_free");
        demo_check(&r, tf_tensor_free(r.client, ch.x), "tf_tensor_free");

        double t3 = demo_now();
        inproc_chain(n, steps, a, mine, tmp);
        r.inproc_s += demo_now() - t3;
        worst = fmax(worst, normwise(buf, mine, elems));
    }
    free(buf);
    int ok = worst <= TOLERANCE;
    int status = demo_finish(&r, ok, (double)stages * steps, "matmuls",
                             2.0 * n * (double)n * n * steps * stages,
                             "%d held stage%s (%.0f ms held in all, %llu operations queued), "
                             "%d x %dx%d f64 matmuls each; vs dgemm here: normwise err %.1e (tol %.0e)",
                             stages, stages == 1 ? "" : "s", held_s * 1e3, (unsigned long long)ops, steps, n, n, worst,
                             TOLERANCE);
    free(a);
    free(x);
    free(mine);
    free(tmp);
    return status;
}
