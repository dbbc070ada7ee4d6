/*
 * bench-gpu-chain: what the daemon adds on top of the CUDA kernels it runs,
 * for a long chain of small dependent operations queued in one held session.
 *
 *   gpu_held_chain  (µs per add)
 *     tenferrod: LINKS dependent adds x = x + y of LEN-element f32 vectors,
 *                one tf_session_with per add in one held session, then one
 *                tf_session_submit and one tf_session_synchronize; the clock
 *                runs from the first queued add to the synchronize's return.
 *     baseline:  the same adds launched in this process through the daemon's
 *                own CUDA backend (tfd_cuda_backend: open(0), stream_create,
 *                alloc, then tfd_backend_run_op with TF__OP_ADD descriptors,
 *                alternating between two preallocated outputs), then
 *                event_record and event_wait: the same kernels on the same
 *                kind of stream, without sockets, validation or allocation.
 *
 * Best of REPS runs per side, the sides taking turns, after one untimed run
 * of each. Every run's final vector is copied back and compared with
 * x0 + LINKS * y within the rounding of LINKS f32 additions (and, for
 * information, with the same chain computed here in f32). After a daemon run,
 * its LINKS outputs are freed and an empty scoped session waits for the frees
 * to have run, so no run overlaps the previous one's clean-up.
 *
 * The daemon is another process, so initialising CUDA here is safe; this
 * process never forks.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/gpu/gpu-common.h"
#include "common/ops.h"
#include "daemon/backend/backend.h"
#include "daemon/backend/cuda/backend.h"

#define LINKS 10000
#define LEN 4096
#define REPS 5

static const char *const NAME = "bench-gpu-chain";

/* The operands and the two references every run is compared with. */
typedef struct chain_data {
    float x0[LEN], y[LEN];
    float local[LEN]; /* the chain computed here in f32, add by add */
} chain_data;

/* The daemon side: one client, the operand handles and every output of the current run. */
typedef struct held_side {
    tf_client *c;
    tf_tensor x0, y, x;
    tf_tensor outputs[LINKS];
    int n_outputs;
    double split_us[3]; /* queue, submit, synchronize of the fastest run (µs in total) */
    double best_us;
    double off_local; /* largest difference of any run's result from the local f32 chain */
} held_side;

/* The in-process side: the daemon's CUDA backend, a stream, and four device vectors. */
typedef struct kernel_side {
    tfd_backend be;
    void *stream;
    tfd_tensor_view x0, y, out[2];
    double off_local; /* as in held_side */
} kernel_side;

/*
 * Compares a chain's final vector with x0 + LINKS y: each of the LINKS f32
 * roundings is at most half an ulp of a partial sum no larger than
 * |x0| + LINKS |y|. Raises *off_local to the largest difference from the
 * chain computed here in f32 (expected 0: the same additions in the same order).
 */
static void check_chain(const chain_data *cd, const float *got, const char *what,
                        double *off_local) {
    for (int i = 0; i < LEN; i++) {
        const double exact = (double)cd->x0[i] + (double)LINKS * cd->y[i];
        const double bound =
            LINKS * 0x1p-24 * (fabs(cd->x0[i]) + (double)LINKS * fabs(cd->y[i])) + 1e-6;
        if (!(fabs(got[i] - exact) <= bound))
            bench_die(NAME, "%s: element %d is %.9g, expected %.9g within %.3g", what, i,
                      (double)got[i], exact, bound);
        *off_local = fmax(*off_local, fabs((double)got[i] - (double)cd->local[i]));
    }
}

/* One link of the held chain: x = x + y, remembered for the clean-up. */
static tf_status add_link(tf_view *v, void *arg) {
    held_side *hs = arg;
    tf_tensor sum = 0;
    tf_status st = tf_view_add(v, hs->x, hs->y, &sum);
    if (st != TF_OK) return st;
    hs->x = sum;
    hs->outputs[hs->n_outputs++] = sum;
    return TF_OK;
}

static tf_status empty_burst(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

/* One held chain through the daemon, checked and cleaned up; µs per add. */
static double held_run(held_side *hs, const chain_data *cd) {
    tf_session *s = NULL;
    bench_check(NAME, hs->c, tf_session_open(hs->c, &s), "tf_session_open");
    hs->x = hs->x0;
    hs->n_outputs = 0;
    const uint64_t t0 = bench_now_ns();
    for (int i = 0; i < LINKS; i++)
        bench_check(NAME, hs->c, tf_session_with(s, add_link, hs), "tf_session_with (add)");
    const uint64_t t1 = bench_now_ns();
    bench_check(NAME, hs->c, tf_session_submit(s), "tf_session_submit");
    const uint64_t t2 = bench_now_ns();
    bench_check(NAME, hs->c, tf_session_synchronize(s), "tf_session_synchronize");
    const uint64_t t3 = bench_now_ns();
    bench_check(NAME, hs->c, tf_session_close(s, NULL), "tf_session_close");

    void *data = NULL;
    size_t bytes = 0;
    bench_check(NAME, hs->c, tf_download(hs->c, hs->x, &data, &bytes), "tf_download (chain end)");
    if (bytes != sizeof(float) * LEN)
        bench_die(NAME, "the chain's end has %zu bytes, expected %zu", bytes, sizeof(float) * LEN);
    check_chain(cd, data, "tenferrod chain", &hs->off_local);
    free(data);
    for (int i = 0; i < hs->n_outputs; i++)
        bench_check(NAME, hs->c, tf_tensor_free(hs->c, hs->outputs[i]), "tf_tensor_free");
    hs->n_outputs = 0;
    /* An empty scoped burst is answered once the connection's stream has run the frees. */
    bench_check(NAME, hs->c, tf_with_session(hs->c, empty_burst, NULL), "tf_with_session (drain)");

    const double total_us = (double)(t3 - t0) / 1e3;
    if (hs->best_us == 0 || total_us < hs->best_us) {
        hs->best_us = total_us;
        hs->split_us[0] = (double)(t1 - t0) / 1e3;
        hs->split_us[1] = (double)(t2 - t1) / 1e3;
        hs->split_us[2] = (double)(t3 - t2) / 1e3;
    }
    return total_us / LINKS;
}

/* Ends the benchmark naming a backend entry that failed. */
static void backend_ok(tf_status st, const char *what, const char *msg) {
    if (st != TF_OK)
        bench_die(NAME, "cuda backend: %s: %s: %s", what, tf_status_name(st),
                  msg && msg[0] ? msg : "(see the log lines above)");
}

/* Waits in this thread for everything enqueued on the kernel side's stream. */
static void kernel_wait(kernel_side *ks) {
    char msg[256] = "";
    void *ev = NULL;
    backend_ok(ks->be.vt->event_record(&ks->be, ks->stream, &ev, msg, sizeof msg), "event_record",
               msg);
    tf_status st = ks->be.vt->event_wait(&ks->be, ev, msg, sizeof msg);
    ks->be.vt->event_destroy(&ks->be, ev);
    backend_ok(st, "event_wait", msg);
}

/* A LEN-element f32 device vector on the kernel side's stream, filled from init when given. */
static tfd_tensor_view kernel_vector(kernel_side *ks, const float *init) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = TF_F32;
    v.rank = 1;
    v.shape[0] = LEN;
    v.numel = LEN;
    backend_ok(ks->be.vt->alloc(&ks->be, ks->stream, sizeof(float) * LEN, &v.data), "alloc", NULL);
    if (init)
        backend_ok(
            ks->be.vt->copy_to_device(&ks->be, ks->stream, v.data, init, sizeof(float) * LEN),
            "copy_to_device", NULL);
    return v;
}

/* The same chain launched here through tfd_backend_run_op, then one event wait; µs per add. */
static double kernel_run(kernel_side *ks, const chain_data *cd) {
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_ADD;
    op.n_inputs = 2;
    op.in[1] = ks->y;
    char msg[256] = "";
    const tfd_tensor_view *x = &ks->x0;
    const uint64_t t0 = bench_now_ns();
    for (int i = 0; i < LINKS; i++) {
        op.in[0] = *x;
        op.out = ks->out[i & 1];
        tf_status st = tfd_backend_run_op(&ks->be, ks->stream, &op, msg, sizeof msg);
        if (st != TF_OK) bench_die(NAME, "kernel add %d: %s: %s", i, tf_status_name(st), msg);
        x = &ks->out[i & 1];
    }
    kernel_wait(ks);
    const uint64_t t1 = bench_now_ns();
    static float got[LEN];
    backend_ok(ks->be.vt->copy_to_host(&ks->be, ks->stream, got, x->data, sizeof got),
               "copy_to_host", NULL);
    kernel_wait(ks);
    check_chain(cd, got, "in-process kernel chain", &ks->off_local);
    return (double)(t1 - t0) / 1e3 / LINKS;
}

int main(int argc, char **argv) {
    static chain_data cd;
    static held_side hs;
    static kernel_side ks;
    gpu_fill(TF_F32, cd.x0, LEN, 0xc4a1u);
    gpu_fill(TF_F32, cd.y, LEN, 0xc4a2u);
    for (int i = 0; i < LEN; i++) {
        cd.x0[i] *= 2.0f;      /* [-1, 1) */
        cd.y[i] *= 0x1p-10f;   /* [-2^-11, 2^-11): the sum stays within a few units */
        float x = cd.x0[i];
        for (int k = 0; k < LINKS; k++) x += cd.y[i];
        cd.local[i] = x;
    }

    hs.c = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(hs.c));
    int64_t shape[1] = {LEN};
    bench_check(NAME, hs.c, tf_upload(hs.c, TF_F32, 1, shape, cd.x0, &hs.x0), "tf_upload x0");
    bench_check(NAME, hs.c, tf_upload(hs.c, TF_F32, 1, shape, cd.y, &hs.y), "tf_upload y");

    ks.be.vt = &tfd_cuda_backend;
    char msg[256] = "";
    if (tfd_cuda_device_count() < 1) bench_die(NAME, "no CUDA device visible to this process");
    backend_ok(ks.be.vt->open(&ks.be, 0, msg, sizeof msg), "open(0)", msg);
    printf("# baseline device: %s (tfd_cuda_backend in-process)\n", ks.be.description);
    fflush(stdout);
    backend_ok(ks.be.vt->stream_create(&ks.be, 0, &ks.stream), "stream_create", NULL);
    ks.x0 = kernel_vector(&ks, cd.x0);
    ks.y = kernel_vector(&ks, cd.y);
    ks.out[0] = kernel_vector(&ks, NULL);
    ks.out[1] = kernel_vector(&ks, NULL);
    kernel_wait(&ks);

    /* Untimed first run of each (module loading, pool growth, page faults). */
    held_run(&hs, &cd);
    kernel_run(&ks, &cd);
    hs.best_us = 0;
    double held_t[REPS], kernel_t[REPS];
    for (int r = 0; r < REPS; r++) {
        held_t[r] = held_run(&hs, &cd);
        kernel_t[r] = kernel_run(&ks, &cd);
    }
    double held = bench_summary(held_t, REPS, BENCH_BEST);
    double kernel = bench_summary(kernel_t, REPS, BENCH_BEST);

    printf("# gpu_held_chain: %d dependent %d-element f32 adds, best of %d, sides alternating; "
           "every run's result verified\n",
           LINKS, LEN, REPS);
    printf("# gpu_held_chain split (fastest daemon run, us/op): queue %.3f, submit %.3f, "
           "synchronize %.3f\n",
           hs.split_us[0] / LINKS, hs.split_us[1] / LINKS, hs.split_us[2] / LINKS);
    printf("# gpu_held_chain: largest difference from the local f32 chain: tenferrod %.3g, "
           "baseline %.3g\n",
           hs.off_local, ks.off_local);
    printf("# gpu_held_chain: medians tenferrod %.3f, baseline %.3f us/op\n",
           bench_summary(held_t, REPS, BENCH_MEDIAN), bench_summary(kernel_t, REPS, BENCH_MEDIAN));
    bench_report("gpu_held_chain", held, kernel, "us/op");
    printf("# gpu_held_chain: tenferrod - baseline = %.3f us/op\n", held - kernel);

    tfd_tensor_view *views[4] = {&ks.x0, &ks.y, &ks.out[0], &ks.out[1]};
    for (int i = 0; i < 4; i++)
        ks.be.vt->free(&ks.be, ks.stream, views[i]->data, sizeof(float) * LEN);
    kernel_wait(&ks);
    ks.be.vt->stream_destroy(&ks.be, ks.stream);
    ks.be.vt->close(&ks.be);
    if (tfd_cuda_context_poisoned())
        bench_die(NAME, "the in-process CUDA context was poisoned: %s", tfd_cuda_poison_reason());
    tf_disconnect(hs.c);
    return 0;
}
