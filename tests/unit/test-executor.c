/*
 * Unit tests of the executor (daemon/executor.c) on the CPU backend.
 *
 * The executor is what makes a client's work ordered and isolated: items on
 * one stream run in FIFO order, different streams are served by different
 * workers, a failure is sticky (later operations and reads on that stream are
 * skipped) until a marker reports it with its status, batch and index, and
 * completions reach the libuv loop thread through an async handle. Each test
 * starts the executor with 2 workers on a private uv loop, enqueues items the
 * way the daemon does (tfd_item_new, tfd_stream_alloc, tfd_stream_enqueue),
 * and runs the loop until the expected READ and MARKER callbacks have fired.
 * Results are checked numerically, counters exactly (device bytes and
 * allocations come back to 0), and every test ends with a clean stop: streams
 * destroyed, tfd_executor_stop, one more loop run to close the async handle,
 * and uv_loop_close returning 0.
 *
 * The independence test wraps the CPU backend's unary family in a gate that
 * holds one worker inside an operation, so that "stream B completes while
 * stream A is stuck" is shown deterministically rather than by timing.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/executor.h"
#include "daemon/item-pool.h"

#define MAX_DONE 64
#define MAX_STREAMS 8
#define MAX_ALLOCS 64

/* Elements of the test vectors, and operations in an ordering chain. */
enum { N = 16, CHAIN = 64 };

static uv_loop_t loop;
static tfd_backend be;
static tfd_executor *ex;
static pthread_t loop_thread;
static char msg[256];

static tfd_stream *streams[MAX_STREAMS];
static int n_streams;

/* Device buffers a test still owns; teardown frees what a test did not free itself. */
static struct {
    void *ptr;
    size_t bytes;
} allocs[MAX_ALLOCS];
static int n_allocs;

/* What a READ or MARKER reported when its callback ran. */
typedef struct done_rec {
    tfd_item_type type;
    uint64_t tag;
    void *arg;
    tfd_item_outcome outcome;
    int on_loop_thread;
} done_rec;

static done_rec done[MAX_DONE];
static int n_done, n_wanted;

/* ---- the gate: a unary family that can hold a worker inside a NEG ---- */

static tfd_backend_vtable gated_vt;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open = 1, gate_entered;

static tf_status gated_unary(tfd_backend *b, void *stream, const tfd_op *op, char *m, size_t len) {
    if (op->kind == TF__OP_NEG) {
        pthread_mutex_lock(&gate_lock);
        gate_entered++;
        pthread_cond_broadcast(&gate_cond);
        while (!gate_open) pthread_cond_wait(&gate_cond, &gate_lock);
        pthread_mutex_unlock(&gate_lock);
    }
    return tfd_cpu_backend.unary(b, stream, op, m, len);
}

static void set_gate(int open) {
    pthread_mutex_lock(&gate_lock);
    gate_open = open;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

/* Waits (at most 10 s) until a worker is held inside the gate. */
static int wait_gate_entered(void) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&gate_lock);
    int rc = 0;
    while (!gate_entered && rc == 0) rc = pthread_cond_timedwait(&gate_cond, &gate_lock, &deadline);
    int entered = gate_entered;
    pthread_mutex_unlock(&gate_lock);
    return entered;
}

/* ---- fixture ---- */

static void start(const tfd_backend_vtable *vt) {
    memset(&be, 0, sizeof be);
    be.vt = &tfd_cpu_backend;
    tf_status st = be.vt->open(&be, 0, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "open: %s %s", tf_status_name(st), msg);
    be.vt = vt;
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    loop_thread = pthread_self();
    ck_assert_int_eq(tfd_executor_start(&loop, &be, 2, &ex), TF_OK);
    ck_assert_ptr_eq(tfd_executor_backend(ex), &be);
    n_streams = n_allocs = n_done = n_wanted = 0;
}

static void setup_cpu(void) { start(&tfd_cpu_backend); }

static void setup_gated(void) {
    gated_vt = tfd_cpu_backend;
    gated_vt.unary = gated_unary;
    gate_open = 1;
    gate_entered = 0;
    start(&gated_vt);
}

static tfd_executor_counters *counters(void) { return tfd_executor_counters_of(ex); }

/*
 * Polls until the stream is idle (nothing queued or running) and takes its
 * pending failure into *o; a worker may still be finishing the batch whose
 * last callback already ran, so this is how a test knows the stream let go.
 */
static void wait_idle(tfd_stream *s, tfd_item_outcome *o) {
    for (int i = 0; i < 10000; i++) {
        if (tfd_stream_complete_if_idle(s, o)) return;
        usleep(1000);
    }
    ck_abort_msg("stream never became idle");
}

/* Frees what is left, destroys idle streams, stops the executor and closes the loop. */
static void teardown(void) {
    set_gate(1);
    tfd_item_outcome o;
    for (int i = 0; i < n_streams; i++) {
        wait_idle(streams[i], &o);
        ck_assert_uint_eq(tfd_stream_queued(streams[i]), 0);
    }
    for (int i = 0; i < n_allocs; i++) {
        be.vt->free(&be, tfd_stream_native(streams[0]), allocs[i].ptr, allocs[i].bytes);
        tfd_executor_note_free(ex, allocs[i].bytes);
    }
    ck_assert_uint_eq(atomic_load(&counters()->device_bytes_live), 0);
    ck_assert_uint_eq(atomic_load(&counters()->device_allocations_live), 0);
    for (int i = 0; i < n_streams; i++) tfd_stream_destroy(streams[i]);
    tfd_executor_stop(ex);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0); /* closes the async handle, frees ex */
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    be.vt->close(&be);
}

/* ---- helpers that build items the way the daemon does ---- */

static tfd_stream *new_stream(void) {
    ck_assert_int_lt(n_streams, MAX_STREAMS);
    tfd_stream *s = NULL;
    tf_status st = tfd_stream_create(ex, 0, &s, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "stream_create: %s %s", tf_status_name(st), msg);
    ck_assert_ptr_nonnull(tfd_stream_native(s));
    streams[n_streams++] = s;
    return s;
}

static void *dev_alloc(tfd_stream *s, size_t bytes) {
    ck_assert_int_lt(n_allocs, MAX_ALLOCS);
    void *p = NULL;
    tf_status st = tfd_stream_alloc(s, bytes, &p, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "alloc %zu: %s %s", bytes, tf_status_name(st), msg);
    allocs[n_allocs].ptr = p;
    allocs[n_allocs].bytes = bytes;
    n_allocs++;
    return p;
}

/* A FREE item for a tracked buffer, which the test then no longer owns. */
static tfd_item *free_item(void *ptr) {
    for (int i = 0; i < n_allocs; i++)
        if (allocs[i].ptr == ptr) {
            tfd_item *it = tfd_item_new(TFD_ITEM_FREE);
            ck_assert_ptr_nonnull(it);
            it->u.free.ptr = ptr;
            it->u.free.bytes = allocs[i].bytes;
            allocs[i] = allocs[--n_allocs];
            return it;
        }
    ck_abort_msg("free of an untracked buffer");
    return NULL;
}

static tfd_tensor_view vec(tf_dtype dt, int64_t n, void *data) {
    tfd_tensor_view v;
    memset(&v, 0, sizeof v);
    v.dtype = dt;
    v.rank = 1;
    v.shape[0] = n;
    v.numel = n;
    v.data = data;
    return v;
}

/* An operation item on f64 vectors of n elements: out = kind(a[, b]) with coefficients. */
static tfd_item *op_item(tf__op_kind kind, int64_t n, void *a, void *b, void *out, double alpha,
                         double beta) {
    tfd_item *it = tfd_item_new(TFD_ITEM_OP);
    ck_assert_ptr_nonnull(it);
    ck_assert_int_eq(it->type, TFD_ITEM_OP);
    tfd_op *op = &it->u.op;
    op->kind = kind;
    op->n_inputs = b ? 2 : 1;
    op->in[0] = vec(TF_F64, n, a);
    if (b) op->in[1] = vec(TF_F64, n, b);
    op->out = vec(TF_F64, n, out);
    op->alpha.re = alpha;
    op->beta.re = beta;
    return it;
}

static tfd_item *copy_item(tfd_item_type type, void *device, void *host, size_t bytes,
                           uint64_t tag) {
    tfd_item *it = tfd_item_new(type);
    ck_assert_ptr_nonnull(it);
    it->u.copy.device = device;
    it->u.copy.host = host;
    it->u.copy.bytes = bytes;
    it->tag = tag;
    return it;
}

static void on_done(tfd_item *it) {
    ck_assert_int_lt(n_done, MAX_DONE);
    done_rec *r = &done[n_done++];
    r->type = it->type;
    r->tag = it->tag;
    r->arg = it->done_arg;
    r->outcome = it->outcome;
    r->on_loop_thread = pthread_equal(pthread_self(), loop_thread);
    tfd_item_free(it);
    if (n_done >= n_wanted) uv_stop(&loop);
}

/* Gives an item that someone waits for (READ, MARKER) its callback and tag. */
static tfd_item *waited(tfd_item *it, uint64_t tag) {
    it->done = on_done;
    it->done_arg = &done; /* any address: checked to come back unchanged */
    it->tag = tag;
    return it;
}

static tfd_item *marker(uint64_t tag) {
    tfd_item *it = tfd_item_new(TFD_ITEM_MARKER);
    ck_assert_ptr_nonnull(it);
    return waited(it, tag);
}

static tfd_item *in_batch(tfd_item *it, uint64_t batch, uint32_t index) {
    it->batch = batch;
    it->index = index;
    return it;
}

static void put(tfd_stream *s, tfd_item *it) { tfd_stream_enqueue(s, it, it, 1); }

/* An operation no backend family serves (tfd_backend_run_op fails with TF_ERR_UNSUPPORTED). */
static tfd_item *bad_op(tf__op_kind kind, void *buf, uint64_t batch, uint32_t index) {
    tfd_item *it = in_batch(op_item(TF__OP_NEG, N, buf, NULL, buf, 0, 0), batch, index);
    it->u.op.kind = kind;
    return it;
}

/* Runs the loop until `total` callbacks have fired since the test began. */
static void run_until(int total) {
    n_wanted = total;
    if (n_done < total) uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(n_done, total);
}

static void assert_done(int i, tfd_item_type type, uint64_t tag, tf_status st) {
    ck_assert_int_eq(done[i].type, type);
    ck_assert_uint_eq(done[i].tag, tag);
    ck_assert_ptr_eq(done[i].arg, &done);
    ck_assert_msg(done[i].on_loop_thread, "callback %d ran off the loop thread", i);
    ck_assert_msg(done[i].outcome.status == st, "callback %d: %s, want %s", i,
                  tf_status_name(done[i].outcome.status), tf_status_name(st));
}

static void assert_vec(const double *got, const double *want, int n) {
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(got[i] - want[i]) <= 1e-12 * (1 + fabs(want[i])),
                      "element %d: %.17g, want %.17g", i, got[i], want[i]);
}

/* ---- tests ---- */

/*
 * Enqueues on stream s a chain that only gives the right answer in FIFO
 * order: two buffers used in turn, each op overwriting the buffer the op
 * before it read, with coefficients that differ per step; then a READ of the
 * result into got (tag read_tag) and a marker (read_tag + 1). The host
 * reference is left in want; returns the number of items enqueued.
 */
static uint64_t enqueue_order_chain(tfd_stream *s, const double *x, double *want, double *got,
                                    uint64_t read_tag) {
    void *buf[2] = {dev_alloc(s, N * sizeof(double)), dev_alloc(s, N * sizeof(double))};
    void *k = dev_alloc(s, N * sizeof(double));
    static const double ones[N] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    tfd_item *head = copy_item(TFD_ITEM_WRITE, buf[0], (void *)x, N * sizeof(double), 0);
    tfd_item *tail = copy_item(TFD_ITEM_WRITE, k, (void *)ones, sizeof ones, 0);
    head->next = tail;
    uint64_t n = 2;
    for (int i = 0; i < N; i++) want[i] = x[i];
    for (int j = 0; j < CHAIN; j++) {
        double alpha = ((j % 3) + 1) * ((j % 2) ? -0.5 : 0.5), beta = j - 20;
        tail->next = op_item(TF__OP_AXPBY, N, buf[j % 2], k, buf[(j + 1) % 2], alpha, beta);
        tail = tail->next;
        n++;
        for (int i = 0; i < N; i++) want[i] = alpha * want[i] + beta;
    }
    tfd_stream_enqueue(s, head, tail, n); /* one chain of many items */
    put(s, waited(copy_item(TFD_ITEM_READ, buf[CHAIN % 2], got, N * sizeof(double), 0), read_tag));
    put(s, marker(read_tag + 1));
    return n + 2;
}

/*
 * Items on one stream run in FIFO order: a chain whose result depends on order comes out exactly
 * right.
 */
START_TEST(test_fifo_order) {
    tfd_stream *s = new_stream();
    double x[N], want[N], got[N];
    for (int i = 0; i < N; i++) x[i] = i + 1;
    uint64_t count = enqueue_order_chain(s, x, want, got, 1);
    run_until(2);
    assert_done(0, TFD_ITEM_READ, 1, TF_OK);
    assert_done(1, TFD_ITEM_MARKER, 2, TF_OK);
    assert_vec(got, want, N);

    tfd_item_outcome o;
    wait_idle(s, &o);
    ck_assert_int_eq(o.status, TF_OK);
    ck_assert_uint_eq(tfd_stream_queued(s), 0);
    ck_assert_uint_eq(atomic_load(&counters()->ops_executed), CHAIN);
    ck_assert_uint_eq(atomic_load(&counters()->items_executed), count);
    ck_assert_uint_eq(atomic_load(&counters()->execution_errors), 0);
}
END_TEST

/*
 * Streams are served independently: while one worker is held inside an
 * operation of stream A, stream B's whole chain, read and marker complete;
 * A finishes once released, and both results are right.
 */
START_TEST(test_streams_independent) {
    tfd_stream *a = new_stream(), *b = new_stream();
    double xa[N], want_a[N], got_a[N], xb[N], want_b[N], got_b[N];
    for (int i = 0; i < N; i++) {
        xa[i] = 0.25 * i;
        want_a[i] = -xa[i];
        xb[i] = 3.0 - i;
    }
    void *a_in = dev_alloc(a, sizeof xa), *a_out = dev_alloc(a, sizeof xa);
    set_gate(0);
    tfd_item *chain[4] = {
        copy_item(TFD_ITEM_WRITE, a_in, xa, sizeof xa, 0),
        op_item(TF__OP_NEG, N, a_in, NULL, a_out, 0, 0),
        waited(copy_item(TFD_ITEM_READ, a_out, got_a, sizeof got_a, 0), 10),
        marker(11),
    };
    for (int i = 0; i < 3; i++) chain[i]->next = chain[i + 1];
    tfd_stream_enqueue(a, chain[0], chain[3], 4);
    ck_assert_msg(wait_gate_entered(), "stream A never reached its operation");

    enqueue_order_chain(b, xb, want_b, got_b, 20);
    run_until(2);
    assert_done(0, TFD_ITEM_READ, 20, TF_OK);
    assert_done(1, TFD_ITEM_MARKER, 21, TF_OK);
    assert_vec(got_b, want_b, N);

    /* A is still held: busy, with its whole batch counted as queued. */
    tfd_item_outcome o;
    ck_assert_int_eq(tfd_stream_complete_if_idle(a, &o), 0);
    ck_assert_uint_eq(tfd_stream_queued(a), 4);

    set_gate(1);
    run_until(4);
    assert_done(2, TFD_ITEM_READ, 10, TF_OK);
    assert_done(3, TFD_ITEM_MARKER, 11, TF_OK);
    assert_vec(got_a, want_a, N);
}
END_TEST

/*
 * A failed operation makes later operations and reads on its stream skip
 * until a marker, which reports the first failure's status, batch and index
 * and clears it, so the next marker reports TF_OK and operations run again.
 * FREE items still run while the failure is pending. The outputs of the
 * failed and the skipped operations are zeroed: a client may still read them.
 */
START_TEST(test_sticky_failure) {
    tfd_stream *s = new_stream();
    double x[N], neg[N], sentinel[N], got_skipped[N], got_after[N];
    for (int i = 0; i < N; i++) {
        x[i] = i - 4.5;
        neg[i] = -x[i];
        sentinel[i] = 777.0 + i;
        got_skipped[i] = -1.0;
    }
    void *dx = dev_alloc(s, sizeof x), *y1 = dev_alloc(s, sizeof x), *y2 = dev_alloc(s, sizeof x);
    void *y3 = dev_alloc(s, sizeof x), *tmp = dev_alloc(s, 4096);
    put(s, copy_item(TFD_ITEM_WRITE, dx, x, sizeof x, 0));
    put(s, copy_item(TFD_ITEM_WRITE, y2, sentinel, sizeof sentinel, 0));

    put(s, in_batch(op_item(TF__OP_NEG, N, dx, NULL, y1, 0, 0), 7, 0));
    put(s, bad_op(TF__OP_NONE, y2, 7, 1));
    put(s, bad_op((tf__op_kind)999, y2, 7, 2)); /* skipped: not reported */
    put(s, in_batch(op_item(TF__OP_NEG, N, dx, NULL, y2, 0, 0), 7, 3)); /* skipped */
    put(s, in_batch(waited(copy_item(TFD_ITEM_READ, y2, got_skipped, sizeof x, 0), 1), 7, 4));
    put(s, free_item(tmp));
    put(s, marker(2));
    run_until(2);
    assert_done(0, TFD_ITEM_READ, 1, TF_ERR_UNSUPPORTED);
    assert_done(1, TFD_ITEM_MARKER, 2, TF_ERR_UNSUPPORTED);
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(done[i].outcome.batch, 7);
        ck_assert_uint_eq(done[i].outcome.index, 1);
        ck_assert_msg(done[i].outcome.message[0] != '\0', "failure without a message");
    }
    for (int i = 0; i < N; i++) ck_assert(got_skipped[i] == -1.0); /* the read did not copy */
    assert_vec(y1, neg, N);      /* CPU device memory is host memory */
    /* The op after the failure did not run: its output reads zeros, not the bytes it held before. */
    double zeros[N] = {0};
    assert_vec(y2, zeros, N);

    /* Reported once, cleared: the next batch runs and its marker says OK. */
    put(s, in_batch(op_item(TF__OP_NEG, N, dx, NULL, y3, 0, 0), 8, 0));
    put(s, in_batch(waited(copy_item(TFD_ITEM_READ, y3, got_after, sizeof x, 0), 3), 8, 1));
    put(s, marker(4));
    run_until(4);
    assert_done(2, TFD_ITEM_READ, 3, TF_OK);
    assert_done(3, TFD_ITEM_MARKER, 4, TF_OK);
    ck_assert_uint_eq(done[3].outcome.batch, 0);
    ck_assert_uint_eq(done[3].outcome.index, 0);
    ck_assert_str_eq(done[3].outcome.message, "");
    assert_vec(got_after, neg, N);

    tfd_item_outcome o;
    wait_idle(s, &o);
    ck_assert_int_eq(o.status, TF_OK);
    ck_assert_uint_eq(atomic_load(&counters()->execution_errors), 1);
    ck_assert_uint_eq(atomic_load(&counters()->ops_executed), 3); /* y1, the bad op, y3 */
    ck_assert_uint_eq(atomic_load(&counters()->device_allocations_live), 4);
}
END_TEST

/* A failure on one stream never shows on another stream's marker. */
START_TEST(test_failure_stays_on_its_stream) {
    tfd_stream *a = new_stream(), *b = new_stream();
    void *buf = dev_alloc(a, N * sizeof(double));
    put(a, bad_op(TF__OP_KIND_COUNT, buf, 5, 6));
    put(a, marker(1));
    run_until(1);
    put(b, marker(2));
    run_until(2);
    assert_done(0, TFD_ITEM_MARKER, 1, TF_ERR_UNSUPPORTED);
    ck_assert_uint_eq(done[0].outcome.batch, 5);
    ck_assert_uint_eq(done[0].outcome.index, 6);
    assert_done(1, TFD_ITEM_MARKER, 2, TF_OK);
}
END_TEST

/*
 * On an idle stream the probe answers at once: TF_OK for a fresh stream, and
 * otherwise the pending failure, which it takes (a second probe says TF_OK).
 */
START_TEST(test_complete_if_idle) {
    tfd_stream *s = new_stream();
    tfd_item_outcome o;
    memset(&o, 0x5A, sizeof o);
    ck_assert_int_eq(tfd_stream_complete_if_idle(s, &o), 1);
    ck_assert_int_eq(o.status, TF_OK);
    ck_assert_uint_eq(o.batch, 0);

    void *buf = dev_alloc(s, N * sizeof(double));
    put(s, bad_op(TF__OP_FREE, buf, 3, 9));
    wait_idle(s, &o);
    ck_assert_int_eq(o.status, TF_ERR_UNSUPPORTED);
    ck_assert_uint_eq(o.batch, 3);
    ck_assert_uint_eq(o.index, 9);
    ck_assert(o.message[0] != '\0');
    ck_assert_int_eq(tfd_stream_complete_if_idle(s, &o), 1);
    ck_assert_int_eq(o.status, TF_OK);

    /* The failure was taken by the probe, so a marker has nothing to report. */
    put(s, marker(1));
    run_until(1);
    assert_done(0, TFD_ITEM_MARKER, 1, TF_OK);
}
END_TEST

/*
 * READ items copy the device bytes back and complete on the loop thread, in enqueue order, before
 * a later marker.
 */
START_TEST(test_reads_complete) {
    tfd_stream *s = new_stream();
    static const size_t sizes[] = {1, 7, 64, 1000, 65536};
    enum { R = sizeof sizes / sizeof sizes[0] };
    unsigned char *src[R], *dst[R];
    void *dev[R];
    for (int r = 0; r < R; r++) {
        src[r] = malloc(sizes[r]);
        dst[r] = calloc(1, sizes[r]);
        ck_assert(src[r] && dst[r]);
        for (size_t i = 0; i < sizes[r]; i++) src[r][i] = (unsigned char)(i * 7 + (size_t)r);
        dev[r] = dev_alloc(s, sizes[r]);
        put(s, copy_item(TFD_ITEM_WRITE, dev[r], src[r], sizes[r], 0));
    }
    for (int r = 0; r < R; r++)
        put(s, waited(copy_item(TFD_ITEM_READ, dev[r], dst[r], sizes[r], 0), 100 + (uint64_t)r));
    put(s, marker(200));
    run_until(R + 1);
    for (int r = 0; r < R; r++) {
        assert_done(r, TFD_ITEM_READ, 100 + (uint64_t)r, TF_OK);
        ck_assert_msg(memcmp(src[r], dst[r], sizes[r]) == 0, "read %d copied wrong bytes", r);
        free(src[r]);
        free(dst[r]);
    }
    assert_done(R, TFD_ITEM_MARKER, 200, TF_OK);
}
END_TEST

/*
 * A WRITE someone waits for (a pending upload from a pinned buffer) completes
 * like a READ: on the loop thread, in order, with the stream's pending failure
 * when one skipped it, and with TF_ERR_DISCONNECTED once the stream is
 * cancelled (as are cancelled READs). Its host memory is never freed: it owns
 * no frame (a stack buffer here, which a free would make ASan report).
 */
START_TEST(test_waited_writes) {
    tfd_stream *s = new_stream();
    double x[N], back[N], stale[N];
    for (int i = 0; i < N; i++) {
        x[i] = 0.25 * i - 1;
        back[i] = stale[i] = -9.0;
    }
    void *dev = dev_alloc(s, sizeof x);
    put(s, waited(copy_item(TFD_ITEM_WRITE, dev, x, sizeof x, 0), 1));
    put(s, waited(copy_item(TFD_ITEM_READ, dev, back, sizeof x, 0), 2));
    run_until(2);
    assert_done(0, TFD_ITEM_WRITE, 1, TF_OK);
    assert_done(1, TFD_ITEM_READ, 2, TF_OK);
    assert_vec(back, x, N);

    /* After a failed operation the waited write is skipped and reports that failure. */
    put(s, bad_op(TF__OP_NONE, dev, 4, 0));
    put(s, waited(copy_item(TFD_ITEM_WRITE, dev, stale, sizeof x, 0), 3));
    put(s, marker(4));
    run_until(4);
    assert_done(2, TFD_ITEM_WRITE, 3, TF_ERR_UNSUPPORTED);
    assert_done(3, TFD_ITEM_MARKER, 4, TF_ERR_UNSUPPORTED);
    /* The skipped write did not copy; the range it would have filled reads zeros, never old bytes. */
    double zeros[N] = {0};
    assert_vec(dev, zeros, N);

    /* A cancelled stream skips both kinds of copies and still reports them. */
    tfd_stream_cancel(s);
    put(s, waited(copy_item(TFD_ITEM_WRITE, dev, stale, sizeof x, 0), 5));
    put(s, waited(copy_item(TFD_ITEM_READ, dev, back, sizeof x, 0), 6));
    put(s, free_item(dev));
    put(s, marker(7));
    run_until(7);
    assert_done(4, TFD_ITEM_WRITE, 5, TF_ERR_DISCONNECTED);
    assert_done(5, TFD_ITEM_READ, 6, TF_ERR_DISCONNECTED);
    assert_done(6, TFD_ITEM_MARKER, 7, TF_OK);
    assert_vec(back, x, N);
    for (int i = 0; i < N; i++) ck_assert(stale[i] == -9.0);
}
END_TEST

/*
 * FREE items return every byte and allocation to the counters, across streams; a failed allocation
 * counts nothing.
 */
START_TEST(test_free_counters) {
    tfd_stream *a = new_stream(), *b = new_stream();
    static const size_t sizes[] = {1, 63, 64, 65, 4096, 1 << 20, 3, 100000};
    enum { K = sizeof sizes / sizeof sizes[0] };
    void *ptrs[K];
    uint64_t total = 0;
    for (int i = 0; i < K; i++) {
        ptrs[i] = dev_alloc(i % 2 ? b : a, sizes[i]);
        total += sizes[i];
        ck_assert_uint_eq(atomic_load(&counters()->device_bytes_live), total);
        ck_assert_uint_eq(atomic_load(&counters()->device_allocations_live), (uint64_t)i + 1);
    }
    void *p = (void *)&total;
    ck_assert_int_eq(tfd_stream_alloc(a, SIZE_MAX - 8, &p, msg, sizeof msg), TF_ERR_NO_MEMORY);
    ck_assert(msg[0] != '\0');
    ck_assert_uint_eq(atomic_load(&counters()->device_bytes_live), total);
    ck_assert_uint_eq(atomic_load(&counters()->device_allocations_live), K);

    for (int i = 0; i < K; i++) put(i < K / 2 ? a : b, free_item(ptrs[i]));
    put(a, marker(1));
    put(b, marker(2));
    run_until(2);
    tfd_item_outcome o;
    wait_idle(a, &o);
    wait_idle(b, &o);
    ck_assert_uint_eq(atomic_load(&counters()->device_bytes_live), 0);
    ck_assert_uint_eq(atomic_load(&counters()->device_allocations_live), 0);
    ck_assert_uint_eq(atomic_load(&counters()->items_executed), K + 2);
}
END_TEST

/* Frees the stream from its final marker's callback, as the daemon's close path does. */
static void on_final_marker(tfd_item *it) {
    tfd_stream *s = it->done_arg;
    tfd_item_free(it);
    tfd_stream_destroy(s);
    n_done++;
    uv_stop(&loop);
}

/*
 * A stream may be destroyed as soon as its last marker's callback runs (the
 * daemon frees a closed connection there), even if the worker that ran the
 * marker has not yet let go of the stream.
 */
START_TEST(test_destroy_from_final_marker) {
    for (int round = 0; round < 2000; round++) {
        tfd_stream *s = NULL;
        ck_assert_int_eq(tfd_stream_create(ex, 0, &s, msg, sizeof msg), TF_OK);
        tfd_item *m = tfd_item_new(TFD_ITEM_MARKER);
        ck_assert_ptr_nonnull(m);
        m->done = on_final_marker;
        m->done_arg = s;
        put(s, m);
        int before = n_done;
        uv_run(&loop, UV_RUN_DEFAULT);
        ck_assert_int_eq(n_done, before + 1);
    }
}
END_TEST

static Suite *executor_suite(void) {
    Suite *s = suite_create("executor");
    TCase *tc = tcase_create("cpu");
    tcase_add_checked_fixture(tc, setup_cpu, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fifo_order);
    tcase_add_test(tc, test_sticky_failure);
    tcase_add_test(tc, test_failure_stays_on_its_stream);
    tcase_add_test(tc, test_complete_if_idle);
    tcase_add_test(tc, test_reads_complete);
    tcase_add_test(tc, test_waited_writes);
    tcase_add_test(tc, test_free_counters);
    tcase_add_test(tc, test_destroy_from_final_marker);
    suite_add_tcase(s, tc);

    TCase *gated = tcase_create("gated");
    tcase_add_checked_fixture(gated, setup_gated, teardown);
    tcase_set_timeout(gated, 60);
    tcase_add_test(gated, test_streams_independent);
    suite_add_tcase(s, gated);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(executor_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
