/*
 * Integration tests of dependent consumers (docs/transfers.md, "Ownership"):
 * operations that read a tensor a pending transfer still holds, queued
 * before anyone waits for the transfer, and what stays refused meanwhile.
 *
 *  - fifty rounds of fresh random values uploaded into a large tensor
 *    (8 MiB) and a small one, each read at once (scale, add, matmul) in a
 *    held session (submitted, not synchronized) or a scoped burst: the
 *    results hold the new values, through Transfer frames, through the
 *    submission mailbox, and with a batch handed to the stream only at its
 *    end (a queued_ops quota);
 *  - every kind of operation reading pending destinations: elementwise,
 *    axpby, matmul, einsum of one, two and three operands, fft and rfft,
 *    reductions, permute, reshape, copy, and a prepared graph's run;
 *  - the refusals (freeing, downloading, transferring again, a buffer
 *    freed), each TF_ERR_BUSY saying why and changing nothing: the transfer
 *    still completes with its values; a pending download's source is read by
 *    operations too; program order in a held session (an upload into a
 *    tensor unsubmitted work reads stays busy);
 *  - a transfer released while operations reading its tensor are queued
 *    (submitted, unsubmitted, in a scoped burst): they read the new values,
 *    and device memory, tensors and pinned buffers come back to baseline;
 *  - a download, pending and blocking, of what submitted and not yet
 *    synchronized work (a chain of matrix products) will produce;
 *  - raw frames: the daemon itself accepts a read of a tensor in flight
 *    (after a Transfer frame and after a mailbox request) and refuses a
 *    free, a write, a download and another transfer of it.
 *
 * Every reference is computed here with plain loops from values drawn fresh
 * for each round (never zero, never repeated), so an operation that ran
 * before its copy would read the previous values and fail. Each test
 * starts its own daemon (TENFERRO_TEST_DEVICE picks the device) and stops
 * it with SIGTERM, expecting a clean exit.
 */
#include <check.h>
#include <complex.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/completion.h"
#include "common/ops.h"
#include "tests/integration/harness.h"

/* How long a test waits for a counter. */
#define WAIT_MS 30000

/* Fails the test with the call, its status and the client's message unless it returns TF_OK. */
#define OK(c, call) CK_STATUS(c, call, TF_OK)

/* `call` must be TF_ERR_BUSY with `needle` in the client's message. */
#define EXPECT_BUSY(c, call, needle)                                                              \
    do {                                                                                          \
        CK_STATUS(c, call, TF_ERR_BUSY);                                                          \
        ck_assert_msg(strstr(tf_client_last_error(c), (needle)) != NULL,                          \
                      "%s: the refusal \"%s\" does not say \"%s\"", #call,                        \
                      tf_client_last_error(c), (needle));                                         \
    } while (0)

/* In a session callback: returns the failing call's status, naming it in job->failed. */
#define TRY(job, call)                                                                            \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        if (st_ != TF_OK) {                                                                       \
            (job)->failed = #call;                                                                \
            return st_;                                                                           \
        }                                                                                         \
    } while (0)

/* ---- helpers ---- */

/* Starts a daemon with extra arguments ((char *)NULL for none) or fails the test. */
#define START(d, ...) CK_DAEMON_START(d, __VA_ARGS__)

/* A new pinned buffer of `bytes`. */
static tf_pinned_buffer *new_buffer(tf_client *c, size_t bytes) {
    tf_pinned_buffer *b = NULL;
    OK(c, tf_pinned_buffer_new(c, bytes, &b));
    ck_assert_ptr_nonnull(tf_pinned_buffer_data(b));
    return b;
}

/* A tensor of zeros (the destination of the uploads that follow). */
static tf_tensor zeros(tf_client *c, tf_dtype dt, int rank, const int64_t *shape) {
    tf_tensor t = 0;
    OK(c, tf_zeros(c, dt, rank, shape, &t));
    return t;
}

/* A tensor holding `data`. */
static tf_tensor upload(tf_client *c, tf_dtype dt, int rank, const int64_t *shape, const void *data) {
    tf_tensor t = 0;
    OK(c, tf_upload(c, dt, rank, shape, data, &t));
    return t;
}

/* Fresh random values into host (n elements of dt) and the same bytes into the buffer's pages. */
static void fill_both(tf_pinned_buffer *b, tf_dtype dt, size_t n, void *host) {
    th_fill_random(dt, n, host);
    void *pages = tf_pinned_buffer_data(b);
    ck_assert_ptr_nonnull(pages);
    memcpy(pages, host, n * tf_dtype_size(dt));
}

/* Downloads t, which must hold exactly n_doubles doubles; the caller frees. */
static double *fetch(tf_client *c, tf_tensor t, size_t n_doubles) {
    void *data = NULL;
    size_t bytes = 0;
    OK(c, tf_download(c, t, &data, &bytes));
    ck_assert_msg(bytes == n_doubles * sizeof(double), "tensor %llu has %zu bytes, expected %zu",
                  (unsigned long long)t, bytes, n_doubles * sizeof(double));
    return data;
}

/* The largest |got - want| over the largest |want| (a normwise relative error). */
static double rel_error(size_t n, const double *got, const double *want) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - want[i]), m = fabs(want[i]);
        if (isnan(got[i])) return INFINITY;
        if (d > diff) diff = d;
        if (m > scale) scale = m;
    }
    return diff / (scale > 0 ? scale : 1);
}

/* Fails unless got matches want (n doubles) within tol, naming the value and the round. */
static void expect_near(const char *what, int round, size_t n, const double *got,
                        const double *want, double tol) {
    double e = rel_error(n, got, want);
    ck_assert_msg(e <= tol, "round %d: %s differs from its reference by %g (tolerance %g)", round,
                  what, e, tol);
}

/* Downloads t and compares it with want (n doubles), then frees it on the daemon. */
static void check_and_free(tf_client *c, tf_tensor t, const char *what, int round, size_t n,
                           const double *want, double tol) {
    double *got = fetch(c, t, n);
    expect_near(what, round, n, got, want, tol);
    free(got);
    OK(c, tf_tensor_free(c, t));
}

/* Waits for p and requires it to hand back tensor t and buffer b with TF_OK. */
static void wait_back(tf_client *c, tf_pending *p, tf_tensor t, tf_pinned_buffer *b) {
    tf_tensor got_t = 0;
    tf_pinned_buffer *got_b = NULL;
    OK(c, tf_pending_wait(p, &got_t, &got_b));
    ck_assert_uint_eq(got_t, t);
    ck_assert_ptr_eq(got_b, b);
    ck_assert_ptr_nonnull(tf_pinned_buffer_data(b));
}

/* The forward DFT of n complex values with numpy's sign, every `stride`-th element of in. */
static void ref_dft(int n, const double complex *in, size_t stride, double complex *out) {
    for (int k = 0; k < n; k++) {
        double complex s = 0;
        for (int j = 0; j < n; j++) s += in[(size_t)j * stride] * cexp(-2.0 * M_PI * I * j * k / n);
        out[k] = s;
    }
}

/* The daemon's gauges that must come back: memory, and live tensors (created less freed). */
typedef struct gauges {
    uint64_t device_bytes, device_allocations, pinned_buffers, pinned_bytes, tensors;
} gauges;

/* Reads the gauges from the daemon's status report. */
static gauges gauges_now(const th_daemon *d) {
    gauges g;
    g.device_bytes = th_counter(d, "device_bytes_live");
    g.device_allocations = th_counter(d, "device_allocations_live");
    g.pinned_buffers = th_counter(d, "pinned_buffers_live");
    g.pinned_bytes = th_counter(d, "pinned_bytes_live");
    g.tensors = th_counter(d, "tensors_created") - th_counter(d, "tensors_freed");
    return g;
}

/* Waits until every gauge is back to its value in `want`, failing the test after WAIT_MS. */
static void expect_gauges(const th_daemon *d, const gauges *want) {
    gauges now = gauges_now(d);
    for (int waited = 0; waited < WAIT_MS && memcmp(&now, want, sizeof now) != 0; waited += 10) {
        usleep(10000);
        now = gauges_now(d);
    }
    ck_assert_msg(memcmp(&now, want, sizeof now) == 0,
                  "gauges not back to baseline: device_bytes %llu/%llu allocations %llu/%llu "
                  "pinned_buffers %llu/%llu pinned_bytes %llu/%llu tensors %llu/%llu",
                  (unsigned long long)now.device_bytes, (unsigned long long)want->device_bytes,
                  (unsigned long long)now.device_allocations,
                  (unsigned long long)want->device_allocations,
                  (unsigned long long)now.pinned_buffers, (unsigned long long)want->pinned_buffers,
                  (unsigned long long)now.pinned_bytes, (unsigned long long)want->pinned_bytes,
                  (unsigned long long)now.tensors, (unsigned long long)want->tensors);
}

/* Returns once everything the client queued on its stream has run (an empty burst's answer waits for it). */
static void drain(tf_client *c) { OK(c, tf_with_session(c, th_queue_nothing, NULL)); }

/* Waits until counter `name` is at least `value`, failing the test after WAIT_MS. */
static void wait_counter_at_least(const th_daemon *d, const char *name, uint64_t value) {
    for (int waited = 0; th_counter(d, name) < value; waited += 1) {
        ck_assert_msg(waited < WAIT_MS, "counter %s stays below %llu", name, (unsigned long long)value);
        usleep(1000);
    }
}

/* Creates the client's staging buffer (a blocking download of 64 KiB or more) so baselines hold it. */
static void warm_staging(tf_client *c, size_t bytes) {
    double *x = th_xmalloc(bytes);
    th_fill_random(TF_F64, bytes / sizeof *x, x);
    int64_t shape[1] = {(int64_t)(bytes / sizeof *x)};
    tf_tensor t = upload(c, TF_F64, 1, shape, x);
    free(fetch(c, t, bytes / sizeof *x));
    OK(c, tf_tensor_free(c, t));
    drain(c); /* the free has run: the gauges read next are a baseline */
    free(x);
}

/* ---- fifty rounds of fresh uploads read at once ---- */

/* The large tensor: 1 Mi f64 (8 MiB); the small matrix product: [AM x AK] x [AK x AN]. */
#define BIG ((size_t)1 << 20)
#define AM 96
#define AK 80
#define AN 64
#define ROUNDS 50

/* One round's consumers: what they read and what they made. */
typedef struct round_job {
    tf_client *c;
    tf_tensor big, other, a, b;   /* big and a are pending destinations */
    tf_pinned_buffer *a_buf;      /* scoped: a's upload starts inside the burst */
    tf_pending *a_up;
    tf_scalar alpha;
    tf_tensor scaled, sum, prod;
    const char *failed;
} round_job;

/* Queues scaled = alpha big, sum = big + other, prod = a b. */
static tf_status queue_consumers(tf_view *v, void *arg) {
    round_job *j = arg;
    TRY(j, tf_view_scale(v, j->alpha, j->big, &j->scaled));
    TRY(j, tf_view_add(v, j->big, j->other, &j->sum));
    TRY(j, tf_view_matmul(v, j->a, j->b, &j->prod));
    return TF_OK;
}

/* The scoped burst: a's pending upload starts inside it, then the same consumers. */
static tf_status upload_then_consume(tf_view *v, void *arg) {
    round_job *j = arg;
    TRY(j, tf_upload_pending(j->c, j->a_buf, j->a, &j->a_up));
    return queue_consumers(v, arg);
}

/*
 * _i: bit 0 scoped (else held); the rest picks the daemon's route: Transfer
 * frames (no busy polling), the submission mailbox (polling), or batches
 * handed to the stream only once validated (a queued_ops quota).
 */
START_TEST(test_consumers_see_each_new_upload) {
    const int scoped = _i & 1, route = _i >> 1;
    static const char *const routes[] = {"frames", "mailbox", "whole-batch"};
    th_daemon d;
    if (route == 0)
        START(&d, "--busy-poll-us", "0");
    else if (route == 1)
        START(&d, "--busy-poll-us", "2000");
    else
        START(&d, "--busy-poll-us", "0", "--client-queued-ops", "1000000");
    tf_client *c = th_connect(&d);
    const int64_t big_shape[1] = {(int64_t)BIG}, a_shape[2] = {AM, AK}, b_shape[2] = {AK, AN};
    double *x = th_xmalloc(BIG * sizeof *x), *y = th_xmalloc(BIG * sizeof *y);
    double *a = th_xmalloc(AM * AK * sizeof *a), *b = th_xmalloc(AK * AN * sizeof *b);
    double *want = th_xmalloc(BIG * sizeof *want), *want_prod = th_xmalloc(AM * AN * sizeof *want_prod);
    th_fill_random(TF_F64, BIG, y);
    th_fill_random(TF_F64, AK * AN, b);
    round_job j = {.c = c};
    j.big = zeros(c, TF_F64, 1, big_shape);
    j.a = zeros(c, TF_F64, 2, a_shape);
    j.other = upload(c, TF_F64, 1, big_shape, y);
    j.b = upload(c, TF_F64, 2, b_shape, b);
    tf_pinned_buffer *big_buf = new_buffer(c, BIG * sizeof *x);
    j.a_buf = new_buffer(c, AM * AK * sizeof *a);
    tf_session *s = NULL;
    if (!scoped) OK(c, tf_session_open(c, &s));
    const uint64_t mailbox0 = th_counter(&d, "mailbox_requests");
    for (int round = 0; round < ROUNDS; round++) {
        fill_both(big_buf, TF_F64, BIG, x);
        fill_both(j.a_buf, TF_F64, AM * AK, a);
        j.alpha = (tf_scalar){0.5 + round + (double)rand() / RAND_MAX, 0};
        tf_pending *big_up = NULL;
        j.a_up = NULL;
        j.failed = "";
        OK(c, tf_upload_pending(c, big_buf, j.big, &big_up));
        if (scoped) {
            tf_status st = tf_with_session(c, upload_then_consume, &j);
            ck_assert_msg(st == TF_OK, "round %d (scoped, %s): %s returned %s: %s", round,
                          routes[route], j.failed, tf_status_name(st), tf_client_last_error(c));
        } else {
            OK(c, tf_upload_pending(c, j.a_buf, j.a, &j.a_up));
            tf_status st = tf_session_with(s, queue_consumers, &j);
            ck_assert_msg(st == TF_OK, "round %d (held, %s): %s returned %s: %s", round,
                          routes[route], j.failed, tf_status_name(st), tf_client_last_error(c));
            OK(c, tf_session_submit(s)); /* no synchronize, no wait for the transfers */
        }
        /* The results first, the transfers' waits after: the daemon ordered the reads. */
        for (size_t i = 0; i < BIG; i++) want[i] = j.alpha.re * x[i];
        check_and_free(c, j.scaled, "alpha * big", round, BIG, want, 1e-15);
        for (size_t i = 0; i < BIG; i++) want[i] = x[i] + y[i];
        check_and_free(c, j.sum, "big + other", round, BIG, want, 1e-15);
        th_ref_matmul(AM, AK, AN, a, b, want_prod);
        check_and_free(c, j.prod, "a b", round, AM * AN, want_prod, 1e-12);
        wait_back(c, big_up, j.big, big_buf);
        wait_back(c, j.a_up, j.a, j.a_buf);
    }
    if (route == 1)
        ck_assert_msg(th_counter(&d, "mailbox_requests") > mailbox0,
                      "no transfer took the mailbox while the daemon polled");
    if (s) OK(c, tf_session_close(s, NULL));
    free(x);
    free(y);
    free(a);
    free(b);
    free(want);
    free(want_prod);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- every kind of operation ---- */

#define XR 24
#define XC 20
#define WC 16
#define VC 12
#define ZN 64
#define N_KINDS 17

/* What reads the pending destinations x, w, v (f64) and z (c128), and what each made. */
typedef struct kinds_job {
    tf_tensor x, w, v, z;
    tf_prepared graph; /* t = x w, y = t * t */
    tf_tensor out[N_KINDS];
    const char *failed;
} kinds_job;

static const char *const kind_names[N_KINDS] = {
    "neg(x)", "exp(x)", "x + x", "axpby(1.5, x, -0.25, x)", "matmul(x, w)", "einsum ij,jk->ik",
    "einsum ij,jk,kl->il", "einsum ij->j", "fft(z)", "rfft(x, axis 1)", "sum(x, axis 0)",
    "max(x)", "permute(x, 1 0)", "reshape(x, [480])", "copy(w)", "run_prepared t", "run_prepared y"};

/* Queues one operation of every kind on the pending destinations. */
static tf_status queue_every_kind(tf_view *v, void *arg) {
    kinds_job *j = arg;
    tf_tensor *o = j->out;
    const tf_tensor xw[2] = {j->x, j->w}, xwv[3] = {j->x, j->w, j->v};
    const int axis0 = 0, axis1 = 1, perm[2] = {1, 0};
    const int64_t flat[1] = {XR * XC};
    TRY(j, tf_view_neg(v, j->x, &o[0]));
    TRY(j, tf_view_exp(v, j->x, &o[1]));
    TRY(j, tf_view_add(v, j->x, j->x, &o[2]));
    TRY(j, tf_view_axpby(v, (tf_scalar){1.5, 0}, j->x, (tf_scalar){-0.25, 0}, j->x, &o[3]));
    TRY(j, tf_view_matmul(v, j->x, j->w, &o[4]));
    TRY(j, tf_view_einsum(v, "ij,jk->ik", 2, xw, &o[5]));
    TRY(j, tf_view_einsum(v, "ij,jk,kl->il", 3, xwv, &o[6]));
    TRY(j, tf_view_einsum(v, "ij->j", 1, &j->x, &o[7]));
    TRY(j, tf_view_fft(v, j->z, 0, NULL, TF_FFT_NORM_BACKWARD, &o[8]));
    TRY(j, tf_view_rfft(v, j->x, 1, &axis1, TF_FFT_NORM_BACKWARD, &o[9]));
    TRY(j, tf_view_sum(v, j->x, 1, &axis0, &o[10]));
    TRY(j, tf_view_max(v, j->x, 0, NULL, &o[11]));
    TRY(j, tf_view_permute(v, j->x, 2, perm, &o[12]));
    TRY(j, tf_view_reshape(v, j->x, 1, flat, &o[13]));
    TRY(j, tf_view_copy(v, j->w, &o[14]));
    TRY(j, tf_view_run_prepared(v, j->graph, 2, xw, 2, &o[15]));
    return TF_OK;
}

/* Records and prepares t = x w, y = t * t on inputs of x's and w's shapes. */
static tf_prepared prepare_product(tf_client *c) {
    const int64_t xs[2] = {XR, XC}, ws[2] = {XC, WC};
    tf_graph *g = NULL;
    OK(c, tf_graph_new(c, &g));
    tf_tensor gx, gw, gt, gy;
    OK(c, tf_graph_input(g, TF_F64, 2, xs, &gx));
    OK(c, tf_graph_input(g, TF_F64, 2, ws, &gw));
    tf_view *rec = tf_graph_view(g);
    OK(c, tf_view_matmul(rec, gx, gw, &gt));
    OK(c, tf_view_mul(rec, gt, gt, &gy));
    OK(c, tf_graph_output(g, gt));
    OK(c, tf_graph_output(g, gy));
    tf_prepared p = 0;
    OK(c, tf_prepare(c, g, &p));
    tf_graph_free(g);
    return p;
}

/*
 * x, w, v and z are pending upload destinations, never waited for when one
 * operation of every kind is queued on them (_i: 0 held and submitted, 1 a
 * scoped burst). Three rounds, each with fresh values.
 */
START_TEST(test_every_kind_reads_pending_destinations) {
    const int scoped = _i;
    th_daemon d;
    START(&d, (char *)NULL);
    tf_client *c = th_connect(&d);
    const int64_t xs[2] = {XR, XC}, ws[2] = {XC, WC}, vs[2] = {WC, VC}, zs[1] = {ZN};
    kinds_job j = {0};
    j.x = zeros(c, TF_F64, 2, xs);
    j.w = zeros(c, TF_F64, 2, ws);
    j.v = zeros(c, TF_F64, 2, vs);
    j.z = zeros(c, TF_C128, 1, zs);
    j.graph = prepare_product(c);
    double x[XR * XC], w[XC * WC], v[WC * VC];
    double complex z[ZN];
    tf_pinned_buffer *xb = new_buffer(c, sizeof x), *wb = new_buffer(c, sizeof w);
    tf_pinned_buffer *vb = new_buffer(c, sizeof v), *zb = new_buffer(c, sizeof z);
    drain(c);
    const gauges base = gauges_now(&d);
    tf_session *s = NULL;
    for (int round = 0; round < 3; round++) {
        fill_both(xb, TF_F64, XR * XC, x);
        fill_both(wb, TF_F64, XC * WC, w);
        fill_both(vb, TF_F64, WC * VC, v);
        fill_both(zb, TF_C128, ZN, z);
        tf_pending *up[4];
        OK(c, tf_upload_pending(c, xb, j.x, &up[0]));
        OK(c, tf_upload_pending(c, wb, j.w, &up[1]));
        OK(c, tf_upload_pending(c, vb, j.v, &up[2]));
        OK(c, tf_upload_pending(c, zb, j.z, &up[3]));
        j.failed = "";
        tf_status st;
        if (scoped) {
            st = tf_with_session(c, queue_every_kind, &j);
        } else {
            OK(c, tf_session_open(c, &s));
            st = tf_session_with(s, queue_every_kind, &j);
            if (st == TF_OK) st = tf_session_submit(s);
        }
        ck_assert_msg(st == TF_OK, "round %d: %s returned %s: %s", round, j.failed,
                      tf_status_name(st), tf_client_last_error(c));

        /* References, each from this round's values. */
        static double want[N_KINDS][XR * XC * 2];
        for (int i = 0; i < XR * XC; i++) {
            want[0][i] = -x[i];
            want[1][i] = exp(x[i]);
            want[2][i] = x[i] + x[i];
            want[3][i] = 1.5 * x[i] - 0.25 * x[i];
            want[13][i] = x[i];
        }
        th_ref_matmul(XR, XC, WC, x, w, want[4]);
        memcpy(want[5], want[4], sizeof(double) * XR * WC);
        th_ref_matmul(XR, WC, VC, want[4], v, want[6]);
        for (int col = 0; col < XC; col++) {
            double sum = 0;
            for (int r = 0; r < XR; r++) sum += x[r * XC + col];
            want[7][col] = want[10][col] = sum;
        }
        ref_dft(ZN, z, 1, (double complex *)want[8]);
        for (int r = 0; r < XR; r++) {
            double complex row[XC], spectrum[XC];
            for (int col = 0; col < XC; col++) row[col] = x[r * XC + col];
            ref_dft(XC, row, 1, spectrum);
            memcpy(&want[9][r * 2 * (XC / 2 + 1)], spectrum, sizeof(double complex) * (XC / 2 + 1));
        }
        want[11][0] = x[0];
        for (int i = 1; i < XR * XC; i++)
            if (x[i] > want[11][0]) want[11][0] = x[i];
        for (int r = 0; r < XR; r++)
            for (int col = 0; col < XC; col++) want[12][col * XR + r] = x[r * XC + col];
        memcpy(want[14], w, sizeof w);
        memcpy(want[15], want[4], sizeof(double) * XR * WC);
        for (int i = 0; i < XR * WC; i++) want[16][i] = want[4][i] * want[4][i];
        const size_t n[N_KINDS] = {XR * XC, XR * XC, XR * XC, XR * XC, XR * WC, XR * WC, XR * VC,
                                   XC, 2 * ZN, 2 * XR * (XC / 2 + 1), XC, 1, XR * XC, XR * XC,
                                   XC * WC, XR * WC, XR * WC};
        for (int k = 0; k < N_KINDS; k++)
            check_and_free(c, j.out[k], kind_names[k], round, n[k], want[k], 1e-11);
        if (s) {
            OK(c, tf_session_close(s, NULL));
            s = NULL;
        }
        wait_back(c, up[0], j.x, xb);
        wait_back(c, up[1], j.w, wb);
        wait_back(c, up[2], j.v, vb);
        wait_back(c, up[3], j.z, zb);
        /* The transfers' own values are in their tensors. */
        double *back = fetch(c, j.x, XR * XC);
        expect_near("x after its wait", round, XR * XC, back, x, 0);
        free(back);
        expect_gauges(&d, &base);
    }
    OK(c, tf_prepared_free(c, j.graph));
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- refusals ---- */

#define RN ((size_t)1 << 16) /* 512 KiB of f64: the blocking routes would stage it */

/* What one scale of a tensor made. */
typedef struct scale_job {
    tf_tensor in, out;
    double alpha;
    const char *failed;
} scale_job;

/* Queues out = alpha in. */
static tf_status queue_scale(tf_view *v, void *arg) {
    scale_job *j = arg;
    TRY(j, tf_view_scale(v, (tf_scalar){j->alpha, 0}, j->in, &j->out));
    return TF_OK;
}

/* Checks that t holds alpha * x (RN doubles) and frees it. */
static void check_scaled(tf_client *c, tf_tensor t, double alpha, const double *x, const char *what) {
    double *want = th_xmalloc(RN * sizeof *want);
    for (size_t i = 0; i < RN; i++) want[i] = alpha * x[i];
    check_and_free(c, t, what, 0, RN, want, 1e-15);
    free(want);
}

/*
 * Everything but reading is refused while a transfer holds a tensor, at the
 * call, TF_ERR_BUSY with the reason; nothing changes (the daemon sees no
 * request) and the transfer completes with its values. Reading is allowed
 * meanwhile, for an upload's destination and a download's source.
 */
START_TEST(test_refusals_change_nothing) {
    th_daemon d;
    START(&d, (char *)NULL);
    tf_client *c = th_connect(&d);
    const int64_t shape[1] = {(int64_t)RN};
    double *x = th_xmalloc(RN * sizeof *x), *y = th_xmalloc(RN * sizeof *y);
    tf_tensor t = zeros(c, TF_F64, 1, shape);
    tf_pinned_buffer *tb = new_buffer(c, RN * sizeof *x), *other = new_buffer(c, RN * sizeof *x);
    warm_staging(c, RN * sizeof *x);

    /* A pending upload's destination. */
    fill_both(tb, TF_F64, RN, x);
    tf_pending *up = NULL, *q = NULL;
    OK(c, tf_upload_pending(c, tb, t, &up));
    const uint64_t accepted = th_counter(&d, "transfers_accepted");
    const uint64_t freed = th_counter(&d, "tensors_freed");
    EXPECT_BUSY(c, tf_tensor_free(c, t), "cannot be freed");
    ck_assert_msg(strstr(tf_client_last_error(c), "an upload writing it"), "%s",
                  tf_client_last_error(c));
    void *data = NULL;
    size_t bytes = 0, cap = 0;
    EXPECT_BUSY(c, tf_download(c, t, &data, &bytes), "cannot be downloaded");
    EXPECT_BUSY(c, tf_download_into(c, t, &data, &cap), "cannot be downloaded");
    ck_assert_ptr_null(data);
    ck_assert_uint_eq(cap, 0);
    EXPECT_BUSY(c, tf_upload_pending(c, other, t, &q), "cannot be transferred again");
    EXPECT_BUSY(c, tf_download_pending(c, t, other, &q), "cannot be transferred again");
    ck_assert_ptr_null(q);
    EXPECT_BUSY(c, tf_pinned_buffer_free(tb), "pending transfer");
    ck_assert_ptr_null(tf_pinned_buffer_data(tb));
    /* None of those reached the daemon. */
    ck_assert_uint_eq(th_counter(&d, "transfers_accepted"), accepted);
    ck_assert_uint_eq(th_counter(&d, "tensors_freed"), freed);
    /* Reading it is allowed, scoped and held: both see the uploaded values. */
    scale_job scoped = {.in = t, .alpha = 3.0 + (double)rand() / RAND_MAX};
    OK(c, tf_with_session(c, queue_scale, &scoped));
    tf_session *s = NULL;
    OK(c, tf_session_open(c, &s));
    scale_job held = {.in = t, .alpha = -2.0 - (double)rand() / RAND_MAX};
    OK(c, tf_session_with(s, queue_scale, &held));
    /* The transfer completes and hands both back; the tensor holds the new values. */
    wait_back(c, up, t, tb);
    check_scaled(c, scoped.out, scoped.alpha, x, "a scoped read of the destination");

    /*
     * Program order in the held session: the scale queued (not submitted)
     * reads t, so an upload into t would overtake it: busy until submitted.
     */
    fill_both(tb, TF_F64, RN, y);
    EXPECT_BUSY(c, tf_upload_pending(c, tb, t, &up), "unsubmitted");
    ck_assert_ptr_nonnull(tf_pinned_buffer_data(tb));
    OK(c, tf_session_submit(s));
    OK(c, tf_upload_pending(c, tb, t, &up));
    wait_back(c, up, t, tb);
    OK(c, tf_session_close(s, NULL));
    check_scaled(c, held.out, held.alpha, x, "the held read queued before the second upload");
    double *back = fetch(c, t, RN);
    expect_near("the destination after the second upload", 0, RN, back, y, 0);
    free(back);

    /* A pending download's source: read by operations, nothing else. */
    tf_pending *down = NULL;
    OK(c, tf_download_pending(c, t, other, &down));
    EXPECT_BUSY(c, tf_tensor_free(c, t), "a download reading it");
    EXPECT_BUSY(c, tf_download(c, t, &data, &bytes), "cannot be downloaded");
    EXPECT_BUSY(c, tf_upload_pending(c, tb, t, &q), "cannot be transferred again");
    ck_assert_ptr_null(data);
    scale_job source = {.in = t, .alpha = 5.0 + (double)rand() / RAND_MAX};
    OK(c, tf_with_session(c, queue_scale, &source));
    wait_back(c, down, t, other);
    ck_assert_msg(memcmp(tf_pinned_buffer_data(other), y, RN * sizeof *y) == 0,
                  "the pending download did not deliver the tensor's values");
    check_scaled(c, source.out, source.alpha, y, "a read of a pending download's source");
    ck_assert_uint_eq(th_counter(&d, "transfers_refused"), 0);
    OK(c, tf_tensor_free(c, t));
    free(x);
    free(y);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- release with queued consumers ---- */

#define LR 1024 /* the released tensor viewed as LR x LR */
#define LW 8    /* columns of the matrix it is multiplied with */

/* What reads a released transfer's destination. */
typedef struct release_job {
    tf_client *c;
    const th_daemon *d;
    tf_tensor t, w;
    tf_pending *up;
    int release_inside; /* release from the callback, after queueing */
    uint64_t copied;    /* transfers_completed once the release's copy is done */
    tf_scalar alpha;
    tf_tensor scaled, prod, total, square;
    const char *failed;
} release_job;

/* Queues alpha t, reshape(t) w and sum(t) (the reshape dropped at once), then maybe releases. */
static tf_status queue_release_readers(tf_view *v, void *arg) {
    release_job *j = arg;
    const int64_t square[2] = {LR, LR};
    TRY(j, tf_view_scale(v, j->alpha, j->t, &j->scaled));
    TRY(j, tf_view_reshape(v, j->t, 2, square, &j->square));
    TRY(j, tf_view_matmul(v, j->square, j->w, &j->prod));
    TRY(j, tf_tensor_free(j->c, j->square));
    TRY(j, tf_view_sum(v, j->t, 0, NULL, &j->total));
    if (j->release_inside) {
        tf_pending_release(j->up);
        j->up = NULL;
        /* The copy completes before the burst's work reaches the daemon, which must not free t. */
        wait_counter_at_least(j->d, "transfers_completed", j->copied);
    }
    return TF_OK;
}

/*
 * A pending upload released while operations reading its destination are
 * queued: _i 0 held, released after the submit; 1 held, released before it
 * (the release follows the submission); 2 released inside a scoped burst.
 * In 1 and 2 the copy has completed before the queued work is sent, so a
 * release that reached the daemon early would have let it free the tensor
 * first. Each round's results hold that round's values, the daemon frees
 * the tensor and the buffer itself, and every gauge comes back.
 */
START_TEST(test_release_with_queued_consumers) {
    const int variant = _i;
    th_daemon d;
    START(&d, (char *)NULL);
    tf_client *c = th_connect(&d);
    const int64_t shape[1] = {(int64_t)LR * LR}, w_shape[2] = {LR, LW}, q_shape[1] = {4096};
    double *x = th_xmalloc((size_t)LR * LR * sizeof *x), *w = th_xmalloc(LR * LW * sizeof *w);
    double *want = th_xmalloc((size_t)LR * LR * sizeof *want), q[4096];
    th_fill_random(TF_F64, LR * LW, w);
    release_job j = {.c = c, .d = &d, .release_inside = variant == 2};
    j.w = upload(c, TF_F64, 2, w_shape, w);
    warm_staging(c, (size_t)LR * LR * sizeof *x);
    const gauges base = gauges_now(&d);
    const uint64_t detached = th_counter(&d, "transfers_detached");
    tf_session *s = NULL;
    if (variant < 2) OK(c, tf_session_open(c, &s));
    const int rounds = 6;
    for (int round = 0; round < rounds; round++) {
        j.t = zeros(c, TF_F64, 1, shape);
        tf_pinned_buffer *b = new_buffer(c, (size_t)LR * LR * sizeof *x);
        fill_both(b, TF_F64, (size_t)LR * LR, x);
        j.alpha = (tf_scalar){1.5 + round + (double)rand() / RAND_MAX, 0};
        j.failed = "";
        j.copied = th_counter(&d, "transfers_completed") + 1;
        OK(c, tf_upload_pending(c, b, j.t, &j.up));
        tf_status st = TF_OK;
        tf_tensor qt = 0;
        tf_pinned_buffer *qb = NULL;
        tf_pending *qp = NULL;
        if (variant == 2) {
            st = tf_with_session(c, queue_release_readers, &j);
        } else {
            st = tf_session_with(s, queue_release_readers, &j);
            if (st == TF_OK && variant == 0) st = tf_session_submit(s);
            if (st == TF_OK) {
                tf_pending_release(j.up);
                j.up = NULL;
            }
            if (st == TF_OK && variant == 1) {
                /* The copy completes before the queued work reaches the daemon, which must not free t. */
                wait_counter_at_least(&d, "transfers_completed", j.copied);
                /* Another transfer meanwhile: the released slot is not handed to it. */
                qt = zeros(c, TF_F64, 1, q_shape);
                qb = new_buffer(c, sizeof q);
                fill_both(qb, TF_F64, 4096, q);
                OK(c, tf_upload_pending(c, qb, qt, &qp));
                st = tf_session_submit(s);
            }
        }
        ck_assert_msg(st == TF_OK, "round %d: %s returned %s: %s", round, j.failed,
                      tf_status_name(st), tf_client_last_error(c));
        ck_assert_ptr_null(j.up);
        for (size_t i = 0; i < (size_t)LR * LR; i++) want[i] = j.alpha.re * x[i];
        check_and_free(c, j.scaled, "alpha t", round, (size_t)LR * LR, want, 1e-15);
        th_ref_matmul(LR, LR, LW, x, w, want);
        check_and_free(c, j.prod, "reshape(t) w", round, LR * LW, want, 1e-12);
        /* A sum is held to its magnitude's scale: the sum of |x|. */
        double total = 0, magnitude = 0;
        for (size_t i = 0; i < (size_t)LR * LR; i++) {
            total += x[i];
            magnitude += fabs(x[i]);
        }
        double *got = fetch(c, j.total, 1);
        ck_assert_msg(fabs(*got - total) <= 1e-12 * magnitude, "round %d: sum(t) is %.17g, not %.17g",
                      round, *got, total);
        free(got);
        OK(c, tf_tensor_free(c, j.total));
        if (qp) {
            wait_back(c, qp, qt, qb);
            double *back = fetch(c, qt, 4096);
            expect_near("the transfer started after the release", round, 4096, back, q, 0);
            free(back);
            OK(c, tf_tensor_free(c, qt));
            OK(c, tf_pinned_buffer_free(qb));
        }
        /* The released tensor and buffer are the daemon's to free, once the copy completed. */
        ck_assert_msg(th_wait_counter(&d, "transfers_detached", detached + (uint64_t)round + 1, WAIT_MS),
                      "round %d: the release did not reach the daemon", round);
        expect_gauges(&d, &base);
    }
    if (s) OK(c, tf_session_close(s, NULL));
    expect_gauges(&d, &base);
    free(x);
    free(w);
    free(want);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- downloads of what queued work will produce ---- */

#define MD 256   /* the chain's matrices are MD x MD */
#define CHAIN 16 /* products in the chain */

/* A chain of products of m: p[0] = m m, p[k] = p[k-1] m. */
typedef struct chain_job {
    tf_client *c;
    tf_tensor m, p[CHAIN];
    tf_pinned_buffer *buf;
    double *last_pending, *mid_blocking; /* scoped: the downloads made inside the burst */
    const char *failed;
} chain_job;

/* Queues the chain of products. */
static tf_status queue_chain(tf_view *v, void *arg) {
    chain_job *j = arg;
    TRY(j, tf_view_matmul(v, j->m, j->m, &j->p[0]));
    for (int k = 1; k < CHAIN; k++) TRY(j, tf_view_matmul(v, j->p[k - 1], j->m, &j->p[k]));
    return TF_OK;
}

/* The scoped burst: the chain, then both downloads inside it (each flushes the queue first). */
static tf_status chain_then_download(tf_view *v, void *arg) {
    chain_job *j = arg;
    tf_status st = queue_chain(v, arg);
    if (st != TF_OK) return st;
    tf_pending *p = NULL;
    TRY(j, tf_download_pending(j->c, j->p[CHAIN - 1], j->buf, &p));
    TRY(j, tf_pending_wait(p, &j->p[CHAIN - 1], &j->buf));
    memcpy(j->last_pending, tf_pinned_buffer_data(j->buf), MD * MD * sizeof(double));
    void *data = NULL;
    size_t bytes = 0;
    TRY(j, tf_download(j->c, j->p[CHAIN / 2], &data, &bytes));
    memcpy(j->mid_blocking, data, MD * MD * sizeof(double));
    free(data);
    return TF_OK;
}

/* Operands of the reader chain: `count` products t * t, each freed but the last (in *last). */
typedef struct reader_chain {
    tf_client *c;
    tf_tensor t, last;
    int count;
} reader_chain;

static tf_status read_chain(tf_view *v, void *arg) {
    reader_chain *r = arg;
    for (int i = 0; i < r->count; i++) {
        tf_tensor out;
        tf_status st = tf_view_matmul(v, r->t, r->t, &out);
        if (st != TF_OK) return st;
        if (i > 0 && (st = tf_tensor_free(r->c, r->last)) != TF_OK) return st;
        r->last = out;
    }
    return TF_OK;
}

/* Entry (i, j) of a * a for an n x n row-major a, in long double. */
static double square_entry(int n, const double *a, int i, int j) {
    long double s = 0;
    for (int k = 0; k < n; k++) s += (long double)a[(size_t)i * n + k] * a[(size_t)k * n + j];
    return (double)s;
}

/* Fails unless 16 spread entries of p (n x n) are a * a's within tol. */
static void expect_square(const char *what, int round, int n, const double *p, const double *a) {
    for (int e = 0; e < 16; e++) {
        const int i = (e * 7919) % n, j = (e * 104729 + 13) % n;
        const double want = square_entry(n, a, i, j), got = p[(size_t)i * n + j];
        ck_assert_msg(fabs(got - want) <= 1e-9 * (fabs(want) + n),
                      "round %d: %s entry (%d,%d) is %.17g, expected %.17g", round, what, i, j,
                      got, want);
    }
}

/*
 * An upload must not overwrite values that work already submitted still
 * reads: a long chain of products reading t is submitted, then at once
 * fresh values are uploaded into t (pending, no wait) and read by one more
 * product. The chain's result must be the old values' square and the new
 * product the new values'. A copy that ran beside the chain without waiting
 * for its last read of t would mix them. The work is long on a GPU too.
 */
START_TEST(test_upload_waits_for_submitted_readers) {
    th_daemon d;
    CK_DAEMON_START(&d, (char *)NULL);
    tf_client *c = th_connect(&d);
    const int gpu = strcmp(th_device(), "cpu") != 0;
    const int n = gpu ? 2048 : 192, count = gpu ? 200 : 20;
    const size_t elems = (size_t)n * (size_t)n, bytes = elems * sizeof(double);
    const int64_t shape[2] = {n, n};
    double *old_values = th_xmalloc(bytes), *new_values = th_xmalloc(bytes);
    tf_pinned_buffer *b = new_buffer(c, bytes);
    tf_tensor t = zeros(c, TF_F64, 2, shape);
    for (int round = 0; round < 3; round++) {
        /* Old values in through a pending upload: t is tracked from now on. */
        fill_both(b, TF_F64, elems, old_values);
        tf_pending *p = NULL;
        OK(c, tf_upload_pending(c, b, t, &p));
        wait_back(c, p, t, b);
        tf_session *s = NULL;
        OK(c, tf_session_open(c, &s));
        reader_chain chain = {c, t, 0, count};
        OK(c, tf_session_with(s, read_chain, &chain));
        OK(c, tf_session_submit(s));
        /* At once, while the chain runs: new values into t, read by one more product. */
        fill_both(b, TF_F64, elems, new_values);
        OK(c, tf_upload_pending(c, b, t, &p));
        reader_chain after = {c, t, 0, 1};
        OK(c, tf_session_with(s, read_chain, &after));
        OK(c, tf_session_synchronize(s));
        OK(c, tf_session_close(s, NULL));
        wait_back(c, p, t, b);
        double *got = fetch(c, chain.last, elems);
        expect_square("the chain submitted before the upload", round, n, got, old_values);
        free(got);
        got = fetch(c, after.last, elems);
        expect_square("the product queued after the upload", round, n, got, new_values);
        free(got);
        OK(c, tf_tensor_free(c, chain.last));
        OK(c, tf_tensor_free(c, after.last));
    }
    OK(c, tf_tensor_free(c, t));
    OK(c, tf_pinned_buffer_free(b));
    free(old_values);
    free(new_values);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A pending and a blocking download of products a long chain will make, the
 * chain itself reading a pending upload's destination: _i 0 held (after the
 * submit, before any synchronize), 1 a scoped burst (queued work, flushed by
 * the downloads).
 */
START_TEST(test_download_of_queued_work) {
    const int scoped = _i;
    th_daemon d;
    START(&d, (char *)NULL);
    tf_client *c = th_connect(&d);
    const int64_t shape[2] = {MD, MD};
    const size_t n = (size_t)MD * MD;
    double *m = th_xmalloc(n * sizeof *m), *ref = th_xmalloc(n * CHAIN * sizeof *ref);
    chain_job j = {.c = c, .buf = new_buffer(c, n * sizeof *m)};
    j.last_pending = th_xmalloc(n * sizeof(double));
    j.mid_blocking = th_xmalloc(n * sizeof(double));
    j.m = zeros(c, TF_F64, 2, shape);
    tf_pinned_buffer *mb = new_buffer(c, n * sizeof *m);
    for (int round = 0; round < 2; round++) {
        /* Entries of about 1/sqrt(MD): the products keep their size along the chain. */
        fill_both(mb, TF_F64, n, m);
        for (size_t i = 0; i < n; i++) m[i] /= 9.6;
        memcpy(tf_pinned_buffer_data(mb), m, n * sizeof *m);
        tf_pending *up = NULL;
        OK(c, tf_upload_pending(c, mb, j.m, &up));
        j.failed = "";
        tf_session *s = NULL;
        if (scoped) {
            tf_status st = tf_with_session(c, chain_then_download, &j);
            ck_assert_msg(st == TF_OK, "round %d: %s returned %s: %s", round, j.failed,
                          tf_status_name(st), tf_client_last_error(c));
        } else {
            OK(c, tf_session_open(c, &s));
            tf_status st = tf_session_with(s, queue_chain, &j);
            ck_assert_msg(st == TF_OK, "round %d: %s returned %s: %s", round, j.failed,
                          tf_status_name(st), tf_client_last_error(c));
            OK(c, tf_session_submit(s));
            /* Submitted, not synchronized: both downloads are ordered behind the chain. */
            tf_pending *p = NULL;
            OK(c, tf_download_pending(c, j.p[CHAIN - 1], j.buf, &p));
            wait_back(c, p, j.p[CHAIN - 1], j.buf);
            memcpy(j.last_pending, tf_pinned_buffer_data(j.buf), n * sizeof(double));
            double *mid = fetch(c, j.p[CHAIN / 2], n);
            memcpy(j.mid_blocking, mid, n * sizeof(double));
            free(mid);
        }
        th_ref_matmul(MD, MD, MD, m, m, ref);
        for (int k = 1; k < CHAIN; k++) th_ref_matmul(MD, MD, MD, ref + (k - 1) * n, m, ref + k * n);
        expect_near("the pending download of the last product", round, n, j.last_pending,
                    ref + (CHAIN - 1) * n, 1e-10);
        expect_near("the blocking download of the middle product", round, n, j.mid_blocking,
                    ref + (CHAIN / 2) * n, 1e-10);
        if (s) {
            OK(c, tf_session_synchronize(s));
            OK(c, tf_session_close(s, NULL));
        }
        wait_back(c, up, j.m, mb);
        for (int k = 0; k < CHAIN; k++) OK(c, tf_tensor_free(c, j.p[k]));
    }
    free(m);
    free(ref);
    free(j.last_pending);
    free(j.mid_blocking);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- raw frames: the daemon's own checks ---- */

#define RAW_TIMEOUT_MS 10000
#define ROWS 64
#define COLS 48
#define ELEMS (ROWS * COLS)
#define TENSOR_BYTES (ELEMS * sizeof(double))
#define UP TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD
#define DOWN TENFERRO__TRANSFER_DIRECTION__TRANSFER_DOWNLOAD

static const int64_t RAW_SHAPE[2] = {ROWS, COLS};
static uint64_t g_seq = 100;

/* Sends a frame (its seq set here) and returns the reply and the descriptor that came with it. */
static Tenferro__Frame *raw_call_fd(int fd, Tenferro__Frame *f, int *passed) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(fd, f), 0);
    Tenferro__Frame *r = th_raw_recv_fd(fd, RAW_TIMEOUT_MS, passed);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    ck_assert_uint_eq(r->seq, f->seq);
    return r;
}

/* Sends a frame and returns its reply, closing any descriptor that came with it. */
static Tenferro__Frame *raw_call(int fd, Tenferro__Frame *f) {
    int passed;
    Tenferro__Frame *r = raw_call_fd(fd, f, &passed);
    if (passed >= 0) close(passed);
    return r;
}

/* Connects, says Hello and maps the completion page that comes with the reply. */
static th_raw_client raw_open(const th_daemon *d) {
    th_raw_client rc;
    ck_assert_msg(th_raw_client_open(d, "raw-dependent", &g_seq, &rc) == 0,
                  "handshake failed (see the harness's words above)");
    return rc;
}

/* Creates pinned buffer id of TENSOR_BYTES and maps it. */
static uint8_t *raw_buffer(int fd, uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__BufferCreate b = TENFERRO__BUFFER_CREATE__INIT;
    b.buffer = id;
    b.bytes = TENSOR_BYTES;
    f.body_case = TENFERRO__FRAME__BODY_BUFFER_CREATE;
    f.buffer_create = &b;
    int mem = -1;
    CK_EXPECT_RESULT(raw_call_fd(fd, &f, &mem), TF_OK, NULL);
    ck_assert_int_ge(mem, 0);
    void *p = mmap(NULL, TENSOR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    ck_assert(p != MAP_FAILED);
    close(mem);
    ck_assert_int_eq(th_raw_send_mapped(fd, ++g_seq, id), 0);
    return p;
}

/* Fills f/up with an Upload of tensor id: created (f64, RAW_SHAPE) when `create`, writing data. */
static void build_upload(Tenferro__Frame *f, Tenferro__Upload *up, uint64_t id, int create,
                         const void *data, size_t len) {
    th_raw_build_upload(f, up, id, create, create ? TF_F64 : (tf_dtype)0, create ? 2 : 0,
                        create ? RAW_SHAPE : NULL, 0, data, len);
}

/* A Submit of one operation with its own storage. */
typedef struct raw_op {
    Tenferro__Op op;
    uint64_t inputs[2];
    Tenferro__Op *ptr;
    Tenferro__Submit sub;
} raw_op;

/* Fills f with a scoped Submit (final or not) of one operation kind(a[, b]) -> out. */
static void build_op(Tenferro__Frame *f, raw_op *r, int final, tf__op_kind kind, int n_in,
                     uint64_t a, uint64_t b, uint64_t out) {
    tenferro__op__init(&r->op);
    r->inputs[0] = a;
    r->inputs[1] = b;
    r->op.kind = (uint32_t)kind;
    r->op.n_inputs = (size_t)n_in;
    r->op.inputs = r->inputs;
    r->op.output = out;
    r->ptr = &r->op;
    tenferro__submit__init(&r->sub);
    r->sub.mode = final ? TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL
                        : TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED;
    r->sub.n_ops = 1;
    r->sub.ops = &r->ptr;
    tenferro__frame__init(f);
    f->body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f->submit = &r->sub;
}

/* Frames sent with one write, so the daemon handles them all before a completion can run. */
typedef th_frames pipeline;

/* Appends a frame to the pipeline; returns the seq its reply will carry. */
static uint64_t pipe_add(pipeline *p, Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_frames_add(p, f), 0);
    return f->seq;
}

/* The reply to request seq (pipelined replies come in order). */
static Tenferro__Frame *recv_reply(int fd, uint64_t seq) {
    Tenferro__Frame *r = th_raw_recv(fd, RAW_TIMEOUT_MS);
    ck_assert_msg(r != NULL, "no reply to request %llu", (unsigned long long)seq);
    ck_assert_uint_eq(r->seq, seq);
    return r;
}

/* The reply to a Submit of one operation must be OK with it accepted. */
static void expect_accepted(int fd, uint64_t seq) {
    Tenferro__Frame *r = recv_reply(fd, seq);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    CK_RESULT(r->result, TF_OK, NULL);
    ck_assert_uint_eq(r->result->ops_accepted, 1);
    tf__frame_free(r);
}

/* The reply to a Submit must refuse its operation 0 with TF_ERR_BUSY saying `needle`. */
static void expect_refused_op(int fd, uint64_t seq, const char *needle) {
    Tenferro__Frame *r = recv_reply(fd, seq);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    CK_RESULT(r->result, TF_ERR_BUSY, needle);
    ck_assert(r->result->has_failed_index && r->result->failed_index == 0);
    ck_assert_uint_eq(r->result->ops_accepted, 0);
    tf__frame_free(r);
}

/* Waits for the daemon to mark the slot DONE; returns its status. */
static tf_status slot_wait(th_raw_client *rc, uint32_t slot) {
    for (int i = 0; i < RAW_TIMEOUT_MS; i++) {
        if (__atomic_load_n(&rc->page[slot].state, __ATOMIC_ACQUIRE) == TF__SLOT_DONE)
            return th_slot_take(rc->page, slot);
        usleep(1000);
    }
    ck_abort_msg("slot %u never completed", slot);
    return TF_ERR_INTERNAL;
}

/* Reads tensor id (TENSOR_BYTES) with a Download frame into dst. */
static void raw_read(int fd, uint64_t id, double *dst) {
    Tenferro__Frame f;
    Tenferro__Download dl;
    th_raw_build_download(&f, &dl, id, 0, TENSOR_BYTES);
    Tenferro__Frame *r = raw_call(fd, &f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    CK_RESULT(r->download_reply->result, TF_OK, NULL);
    ck_assert_uint_eq(r->download_reply->data.len, TENSOR_BYTES);
    memcpy(dst, r->download_reply->data.data, TENSOR_BYTES);
    tf__frame_free(r);
}

/* Tensor id must hold exactly want[i] * scale + add[i] (add may be NULL). */
static void expect_raw_tensor(int fd, uint64_t id, const double *want, double scale,
                              const double *add, const char *what) {
    static double got[ELEMS];
    raw_read(fd, id, got);
    for (size_t i = 0; i < ELEMS; i++) {
        double w = want[i] * scale + (add ? add[i] : 0);
        ck_assert_msg(got[i] == w, "%s: element %zu is %g, expected %g", what, i, got[i], w);
    }
}

/*
 * The daemon itself, in raw frames sent in one write behind a Transfer (so
 * it handles them before the copy can complete): operations reading the
 * tensor in flight are accepted and see the copied values; OP_FREE, an
 * Upload writing it, a Download of it and another Transfer of it are
 * TF_ERR_BUSY saying why; a Free frame keeps it and logs. The same for a
 * pending download's source, and for an upload taken from the mailbox.
 */
START_TEST(test_daemon_orders_and_refuses) {
    th_daemon d;
    START(&d, "--busy-poll-us", "1000000", "--workers", "2");
    th_raw_client c = raw_open(&d);
    static double other[ELEMS], junk[8];
    th_fill_random(TF_F64, ELEMS, other);
    th_fill_random(TF_F64, 8, junk);
    Tenferro__Frame f[12];
    Tenferro__Upload up[2];
    build_upload(&f[0], &up[0], 10, 1, NULL, 0);
    CK_EXPECT_RESULT(raw_call(c.fd, &f[0]), TF_OK, NULL);
    build_upload(&f[0], &up[0], 11, 1, other, TENSOR_BYTES);
    CK_EXPECT_RESULT(raw_call(c.fd, &f[0]), TF_OK, NULL);
    double *map1 = (double *)raw_buffer(c.fd, 1), *map2 = (double *)raw_buffer(c.fd, 2);
    th_fill_random(TF_F64, ELEMS, map1);
    static double x[ELEMS];
    memcpy(x, map1, TENSOR_BYTES);

    /* An upload in flight: reads accepted, everything else refused. */
    static pipeline p;
    p.len = 0;
    Tenferro__Transfer t[3];
    raw_op ops[6];
    Tenferro__Download dl;
    Tenferro__Free fr = TENFERRO__FREE__INIT;
    uint64_t ten = 10;
    th_slot_arm(c.page, 1);
    th_raw_build_transfer(&f[0], &t[0], UP, 1, 10, 1, 0, TENSOR_BYTES);
    const uint64_t s_transfer = pipe_add(&p, &f[0]);
    build_op(&f[1], &ops[0], 0, TF__OP_ADD, 2, 10, 11, 50);
    const uint64_t s_add = pipe_add(&p, &f[1]);
    build_op(&f[2], &ops[1], 0, TF__OP_NEG, 1, 10, 0, 51);
    const uint64_t s_neg = pipe_add(&p, &f[2]);
    build_op(&f[3], &ops[2], 0, TF__OP_FREE, 1, 10, 0, 0);
    const uint64_t s_free = pipe_add(&p, &f[3]);
    build_upload(&f[4], &up[1], 10, 0, junk, sizeof junk);
    const uint64_t s_write = pipe_add(&p, &f[4]);
    th_raw_build_download(&f[5], &dl, 10, 0, TENSOR_BYTES);
    const uint64_t s_download = pipe_add(&p, &f[5]);
    th_raw_build_transfer(&f[6], &t[1], DOWN, 2, 10, 2, 0, TENSOR_BYTES);
    const uint64_t s_again = pipe_add(&p, &f[6]);
    tenferro__frame__init(&f[7]);
    fr.n_tensors = 1;
    fr.tensors = &ten;
    f[7].body_case = TENFERRO__FRAME__BODY_FREE;
    f[7].free = &fr;
    pipe_add(&p, &f[7]); /* no reply */
    build_op(&f[8], &ops[3], 1, TF__OP_ADD, 2, 10, 10, 52);
    const uint64_t s_final = pipe_add(&p, &f[8]);
    ck_assert_uint_lt(p.len, 4096); /* one socket buffer: one read takes it all */
    ck_assert_int_eq(th_raw_send_bytes(c.fd, p.bytes, p.len), 0);

    CK_EXPECT_RESULT(recv_reply(c.fd, s_transfer), TF_OK, NULL);
    expect_accepted(c.fd, s_add);
    expect_accepted(c.fd, s_neg);
    expect_refused_op(c.fd, s_free, "cannot be freed");
    CK_EXPECT_RESULT(recv_reply(c.fd, s_write), TF_ERR_BUSY, "cannot be written");
    Tenferro__Frame *r = recv_reply(c.fd, s_download);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_DOWNLOAD_REPLY);
    CK_RESULT(r->download_reply->result, TF_ERR_BUSY, "cannot be downloaded");
    ck_assert_uint_eq(r->download_reply->data.len, 0);
    tf__frame_free(r);
    CK_EXPECT_RESULT(recv_reply(c.fd, s_again), TF_ERR_BUSY, "tensor 10 is already in a transfer");
    expect_accepted(c.fd, s_final);
    ck_assert_int_eq(slot_wait(&c, 1), TF_OK);
    expect_raw_tensor(c.fd, 10, x, 1, NULL, "the destination");
    expect_raw_tensor(c.fd, 50, x, 1, other, "10 + 11, read behind the copy");
    expect_raw_tensor(c.fd, 51, x, -1, NULL, "-10, read behind the copy");
    expect_raw_tensor(c.fd, 52, x, 2, NULL, "10 + 10, read behind the copy");
    char *log = th_daemon_log(&d);
    ck_assert_msg(strstr(log, "freed tensor 10 while a transfer uses it: kept"),
                  "the Free frame of the tensor in flight was not logged");
    free(log);

    /* A download in flight: its source is read by operations too, and refused the rest. */
    p.len = 0;
    th_slot_arm(c.page, 2);
    th_raw_build_transfer(&f[0], &t[2], DOWN, 2, 10, 2, 0, TENSOR_BYTES);
    const uint64_t s_down = pipe_add(&p, &f[0]);
    build_op(&f[1], &ops[4], 0, TF__OP_NEG, 1, 10, 0, 53);
    const uint64_t s_read = pipe_add(&p, &f[1]);
    build_op(&f[2], &ops[5], 1, TF__OP_FREE, 1, 10, 0, 0);
    const uint64_t s_free2 = pipe_add(&p, &f[2]);
    build_upload(&f[3], &up[1], 10, 0, junk, sizeof junk);
    const uint64_t s_write2 = pipe_add(&p, &f[3]);
    ck_assert_int_eq(th_raw_send_bytes(c.fd, p.bytes, p.len), 0);
    CK_EXPECT_RESULT(recv_reply(c.fd, s_down), TF_OK, NULL);
    expect_accepted(c.fd, s_read);
    expect_refused_op(c.fd, s_free2, "a download reading it");
    CK_EXPECT_RESULT(recv_reply(c.fd, s_write2), TF_ERR_BUSY, "a download reading it");
    ck_assert_int_eq(slot_wait(&c, 2), TF_OK);
    ck_assert_msg(memcmp(map2, x, TENSOR_BYTES) == 0, "the download did not deliver tensor 10");
    expect_raw_tensor(c.fd, 53, x, -1, NULL, "-10, read while a download held it");

    /* An upload from the mailbox, then an operation sent once it was answered. */
    th_fill_random(TF_F64, ELEMS, map1);
    memcpy(x, map1, TENSOR_BYTES);
    for (int i = 0; i < 10000 && !__atomic_load_n(&c.box->daemon_polling, __ATOMIC_SEQ_CST); i++)
        usleep(100);
    ck_assert_msg(__atomic_load_n(&c.box->daemon_polling, __ATOMIC_SEQ_CST),
                  "the daemon does not poll the mailbox");
    th_slot_arm(c.page, 3);
    tf__mailbox *m = c.box;
    m->direction = UP;
    m->buffer = 1;
    m->tensor = 11;
    m->slot = 3;
    m->offset = 0;
    m->bytes = TENSOR_BYTES;
    m->after_seq = g_seq;
    const uint64_t served = th_counter(&d, "mailbox_requests");
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_SUBMITTED, __ATOMIC_SEQ_CST);
    int answered = 0;
    for (int i = 0; i < RAW_TIMEOUT_MS * 10 && !answered; i++) {
        answered = __atomic_load_n(&m->state, __ATOMIC_ACQUIRE) == TF__MAILBOX_ANSWERED;
        if (!answered) usleep(100);
    }
    ck_assert_msg(answered, "the daemon never answered the mailbox");
    ck_assert_msg(m->status == TF_OK, "the mailbox upload was refused: %.*s",
                  (int)sizeof m->message, m->message);
    __atomic_store_n(&m->state, (uint32_t)TF__MAILBOX_IDLE, __ATOMIC_RELEASE);
    ck_assert_uint_eq(th_counter(&d, "mailbox_requests"), served + 1);
    build_op(&f[0], &ops[0], 1, TF__OP_ADD, 2, 11, 11, 54);
    Tenferro__Frame *reply = raw_call(c.fd, &f[0]);
    CK_RESULT(reply->result, TF_OK, NULL);
    tf__frame_free(reply);
    ck_assert_int_eq(slot_wait(&c, 3), TF_OK);
    expect_raw_tensor(c.fd, 54, x, 2, NULL, "11 + 11, read behind the mailbox's upload");

    munmap(map1, TENSOR_BYTES);
    munmap(map2, TENSOR_BYTES);
    th_raw_client_close(&c);
    CK_DAEMON_STOP(&d);
}
END_TEST

int main(void) {
    th_seed(); /* one seed for the whole run, printed once and inherited by every test */
    signal(SIGPIPE, SIG_IGN);
    Suite *suite = suite_create("dependent");
    TCase *tc = tcase_create("dependent");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_consumers_see_each_new_upload, 0, 5);
    tcase_add_loop_test(tc, test_every_kind_reads_pending_destinations, 0, 2);
    tcase_add_test(tc, test_refusals_change_nothing);
    tcase_add_loop_test(tc, test_release_with_queued_consumers, 0, 3);
    tcase_add_loop_test(tc, test_download_of_queued_work, 0, 2);
    tcase_add_test(tc, test_upload_waits_for_submitted_readers);
    tcase_add_test(tc, test_daemon_orders_and_refuses);
    suite_add_tcase(suite, tc);
    SRunner *sr = srunner_create(suite);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
