/*
 * bench-held-chain: what a held session buys for a long chain of tiny
 * dependent operations, and what it still costs above the bare kernel.
 *
 * The chain is x = x + y, CHAIN times, on 64-element f64 vectors; every add
 * consumes the previous add's result.
 *
 *   held_chain     tenferrod: one held session, one tf_session_with per add
 *                  (queued locally), then one tf_session_submit and one
 *                  tf_session_synchronize; total time / CHAIN.
 *                  baseline: the same adds as CHAIN scoped sessions
 *                  (tf_with_session), one round trip each.
 *   held_overhead  tenferrod: the same held chain.
 *                  baseline: the same adds run in this process by the daemon's
 *                  own CPU kernel (tfd_cpu_backend, tfd_backend_run_op on a
 *                  hand-built tfd_op), alternating between two output buffers.
 *
 * Each measurement runs REPS times, the three taking turns, and the best is
 * reported (µs per add). The final value of every daemon chain is downloaded
 * and compared with the chain computed here; the kernel chain is compared too.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench-common.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"

#define CHAIN 10000
#define N 64
#define REPS 5

static const char *const NAME = "bench-held-chain";

/* The daemon side of one chain: the client, the operands, every intermediate handle. */
typedef struct chain_ctx {
    tf_client *c;
    tf_tensor x0, y, x;
    tf_tensor made[CHAIN]; /* outputs, freed after each run */
    int n_made;
    double expect[N];      /* x0 + y, CHAIN times, computed here */
    double best_total;     /* fastest held chain so far (µs), and where its time went */
    double best_split[3];  /* queueing the adds, submit, synchronize (µs) */
} chain_ctx;

/* One link: x = x + y. */
static tf_status add_once(tf_view *v, void *arg) {
    chain_ctx *cc = arg;
    tf_tensor out;
    tf_status st = tf_view_add(v, cc->x, cc->y, &out);
    if (st == TF_OK) {
        cc->x = out;
        cc->made[cc->n_made++] = out;
    }
    return st;
}

static tf_status nothing(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

/*
 * Downloads the chain's end, compares it with the local chain, then frees
 * every output and waits until the daemon has, so no measurement overlaps
 * the previous one's clean-up.
 */
static void verify_and_free(chain_ctx *cc, const char *what) {
    void *data = NULL;
    size_t bytes = 0;
    bench_check(NAME, cc->c, tf_download(cc->c, cc->x, &data, &bytes), "tf_download");
    if (bytes != sizeof cc->expect) bench_die(NAME, "%s: result has %zu bytes", what, bytes);
    const double *got = data;
    for (int i = 0; i < N; i++)
        if (fabs(got[i] - cc->expect[i]) > 1e-12 * fabs(cc->expect[i]))
            bench_die(NAME, "%s: element %d is %.17g, expected %.17g", what, i, got[i],
                      cc->expect[i]);
    free(data);
    for (int i = 0; i < cc->n_made; i++)
        bench_check(NAME, cc->c, tf_tensor_free(cc->c, cc->made[i]), "tf_tensor_free");
    cc->n_made = 0;
    cc->x = cc->x0;
    /* An empty scoped session answers once the stream has drained: the frees are done. */
    bench_check(NAME, cc->c, tf_with_session(cc->c, nothing, NULL), "tf_with_session (drain)");
}

/* One held chain: µs per add, including the submit and the synchronize. */
static double held_chain_once(void *arg) {
    chain_ctx *cc = arg;
    tf_session *s = NULL;
    bench_check(NAME, cc->c, tf_session_open(cc->c, &s), "tf_session_open");
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < CHAIN; i++)
        bench_check(NAME, cc->c, tf_session_with(s, add_once, cc), "tf_session_with");
    uint64_t t_queued = bench_now_ns();
    bench_check(NAME, cc->c, tf_session_submit(s), "tf_session_submit");
    uint64_t t_submitted = bench_now_ns();
    bench_check(NAME, cc->c, tf_session_synchronize(s), "tf_session_synchronize");
    uint64_t t1 = bench_now_ns();
    bench_check(NAME, cc->c, tf_session_close(s, NULL), "tf_session_close");
    verify_and_free(cc, "held chain");
    double total = (double)(t1 - t0) / 1e3;
    if (cc->best_total == 0 || total < cc->best_total) {
        cc->best_total = total;
        cc->best_split[0] = (double)(t_queued - t0) / 1e3;
        cc->best_split[1] = (double)(t_submitted - t_queued) / 1e3;
        cc->best_split[2] = (double)(t1 - t_submitted) / 1e3;
    }
    return total / CHAIN;
}

/* The same chain as one scoped session per add: µs per add. */
static double scoped_chain_once(void *arg) {
    chain_ctx *cc = arg;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < CHAIN; i++)
        bench_check(NAME, cc->c, tf_with_session(cc->c, add_once, cc), "tf_with_session");
    uint64_t t1 = bench_now_ns();
    verify_and_free(cc, "scoped chain");
    return (double)(t1 - t0) / 1e3 / CHAIN;
}

/* The in-process side: the CPU backend, a stream, and three device vectors. */
typedef struct kernel_ctx {
    tfd_backend be;
    void *stream;
    tfd_tensor_view x0, y, buf[2];
    double expect[N];
} kernel_ctx;

static tfd_tensor_view kernel_vector(kernel_ctx *kc, const double *init) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = TF_F64;
    v.rank = 1;
    v.shape[0] = N;
    v.numel = N;
    if (kc->be.vt->alloc(&kc->be, kc->stream, sizeof(double) * N, &v.data) != TF_OK)
        bench_die(NAME, "cpu backend: alloc failed");
    if (init && kc->be.vt->copy_to_device(&kc->be, kc->stream, v.data, init, sizeof(double) * N) !=
                    TF_OK)
        bench_die(NAME, "cpu backend: copy_to_device failed");
    return v;
}

/* The chain through tfd_backend_run_op, as an executor worker runs it: µs per add. */
static double kernel_chain_once(void *arg) {
    kernel_ctx *kc = arg;
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_ADD;
    op.n_inputs = 2;
    op.in[1] = kc->y;
    char msg[256];
    const tfd_tensor_view *x = &kc->x0;
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < CHAIN; i++) {
        op.in[0] = *x;
        op.out = kc->buf[i & 1];
        tf_status st = tfd_backend_run_op(&kc->be, kc->stream, &op, msg, sizeof msg);
        if (st != TF_OK) bench_die(NAME, "kernel add %d: %s: %s", i, tf_status_name(st), msg);
        x = &kc->buf[i & 1];
    }
    uint64_t t1 = bench_now_ns();
    const double *got = x->data;
    for (int i = 0; i < N; i++)
        if (got[i] != kc->expect[i])
            bench_die(NAME, "kernel chain: element %d is %.17g, expected %.17g", i, got[i],
                      kc->expect[i]);
    return (double)(t1 - t0) / 1e3 / CHAIN;
}

int main(int argc, char **argv) {
    static chain_ctx cc;
    static kernel_ctx kc;
    double x0[N], y[N];
    srand(12345);
    for (int i = 0; i < N; i++) {
        x0[i] = (double)rand() / RAND_MAX * 2.0 - 1.0;
        y[i] = (double)rand() / RAND_MAX * 1e-3;
        cc.expect[i] = x0[i];
    }
    for (int k = 0; k < CHAIN; k++)
        for (int i = 0; i < N; i++) cc.expect[i] += y[i];
    memcpy(kc.expect, cc.expect, sizeof kc.expect);

    cc.c = bench_connect(argc, argv);
    int64_t shape[1] = {N};
    bench_check(NAME, cc.c, tf_upload(cc.c, TF_F64, 1, shape, x0, &cc.x0), "tf_upload x");
    bench_check(NAME, cc.c, tf_upload(cc.c, TF_F64, 1, shape, y, &cc.y), "tf_upload y");
    cc.x = cc.x0;

    kc.be.vt = &tfd_cpu_backend;
    char msg[256] = "";
    if (kc.be.vt->open(&kc.be, 0, msg, sizeof msg) != TF_OK)
        bench_die(NAME, "cpu backend: open: %s", msg);
    if (kc.be.vt->stream_create(&kc.be, 0, &kc.stream) != TF_OK)
        bench_die(NAME, "cpu backend: stream_create failed");
    kc.x0 = kernel_vector(&kc, x0);
    kc.y = kernel_vector(&kc, y);
    kc.buf[0] = kernel_vector(&kc, NULL);
    kc.buf[1] = kernel_vector(&kc, NULL);

    /* Warm-up: one of each, untimed (allocator, page faults, caches). */
    held_chain_once(&cc);
    scoped_chain_once(&cc);
    kernel_chain_once(&kc);

    /* The three take turns, so a change of load on the machine falls on all of them. */
    double held_t[REPS], scoped_t[REPS], kernel_t[REPS];
    cc.best_total = 0;
    for (int r = 0; r < REPS; r++) {
        held_t[r] = held_chain_once(&cc);
        scoped_t[r] = scoped_chain_once(&cc);
        kernel_t[r] = kernel_chain_once(&kc);
    }
    double held = bench_summary(held_t, REPS, BENCH_BEST);
    double scoped = bench_summary(scoped_t, REPS, BENCH_BEST);
    double kernel = bench_summary(kernel_t, REPS, BENCH_BEST);

    printf("# held chain: %d dependent %d-element f64 adds, best of %d; results verified\n", CHAIN,
           N, REPS);
    printf("# held chain split (best run, us/op): queue %.3f, submit %.3f, synchronize %.3f\n",
           cc.best_split[0] / CHAIN, cc.best_split[1] / CHAIN, cc.best_split[2] / CHAIN);
    bench_report("held_chain", held, scoped, "us/op");
    printf("# held_chain: baseline/tenferrod = %.1fx faster held\n", scoped / held);
    bench_report("held_overhead", held, kernel, "us/op");
    printf("# held_overhead: tenferrod - baseline = %.3f us/op\n", held - kernel);

    for (int i = 0; i < 4; i++) {
        tfd_tensor_view *v[4] = {&kc.x0, &kc.y, &kc.buf[0], &kc.buf[1]};
        kc.be.vt->free(&kc.be, kc.stream, v[i]->data, sizeof(double) * N);
    }
    kc.be.vt->stream_destroy(&kc.be, kc.stream);
    kc.be.vt->close(&kc.be);
    tf_disconnect(cc.c);
    return 0;
}
