/*
 * Hostile raw frames for the linear-algebra operations (OP_SVD ..
 * OP_DIAGONAL, Op.linalg, Linalg, Truncation) and OP_SLICE, sent straight
 * to a real tenferrod by a raw client past its Hello, where the client
 * library's own checks cannot stand in the way.
 *
 * Every parameter gets its bad values: no descriptor; a perm that is no
 * permutation, too long, too short, negative, beyond TF_MAX_RANK; n_batch
 * and n_rows beyond the rank or huge (uint32 max); outputs of the wrong
 * count, zero, repeated, already in use, beyond TF__LINALG_MAX_OUTPUTS;
 * max_rank and min_rank negative, min_rank above max_rank; nan, inf and
 * negative cutoffs and weights; absorb out of its enum and without
 * vectors; truncation, renormalize or full where they do not belong; norm
 * kinds out of range and a matrix norm of p = 3; offsets past the matrix
 * and at INT64_MAX / INT64_MIN; solve with a B that does not fit; OP_SLICE
 * with the wrong number of parameters, a zero step, indices outside the
 * axis and values whose last index overflows; unknown kinds from 38 on;
 * Each is refused with its typed status and a readable message, at its
 * index of the Submit (what came before it stays, nothing from it on is
 * created: the client's live tensors and the daemon's created count are
 * unchanged), and the connection serves the next request. Each is also sent
 * as node 1 of a prepared graph over inputs of the same ids, dtypes and
 * shapes, and refused there with the same status and failed index 1, and
 * each accepted operation is accepted as a node; graphs add their own
 * hostile cases (an output reusing an earlier node's id, a node reading its
 * own output, a graph output nobody made) and good graphs of linear
 * algebra are run (several outputs, a permuting split, a cutoff). Huge but meaningful bounds (max_rank
 * 2^62, min_rank 2^62 without max_rank) are accepted and give results of
 * the matrix's own width.
 *
 * Each test starts its own tenferrod and stops it with SIGTERM, requiring a
 * clean exit (a crash or a sanitizer report fails it).
 */
#include <check.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/linalg.h"
#include "common/ops.h"
#include "tests/integration/harness.h"

#define RAW_MS 20000

static th_daemon D;
static int g_fd = -1;
static uint64_t g_client;
static uint64_t g_seq = 1;
static uint64_t g_next_out = 1000;

/* Sends f with a fresh sequence number and returns the reply to it. */
static Tenferro__Frame *call(Tenferro__Frame *f) {
    f->seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(g_fd, f), 0);
    Tenferro__Frame *r = th_raw_recv(g_fd, RAW_MS);
    ck_assert_msg(r != NULL, "no reply to a frame of body %d", (int)f->body_case);
    ck_assert_msg(r->seq == f->seq, "reply %llu answers request %llu", (unsigned long long)r->seq,
                  (unsigned long long)f->seq);
    return r;
}

/* Creates tensor id of dtype and shape with random contents. */
static void upload(uint64_t id, tf_dtype dt, int rank, const int64_t *shape) {
    const size_t n = th_numel(rank, shape);
    void *data = th_xmalloc(n * tf_dtype_size(dt));
    th_fill_random(dt, n, data);
    Tenferro__Frame f;
    Tenferro__Upload up;
    th_raw_build_upload(&f, &up, id, 1, dt, rank, shape, 0, data, n * tf_dtype_size(dt));
    CK_EXPECT_RESULT(call(&f), TF_OK, NULL);
    free(data);
}

/* The shape of tensor id (its rank returned), which must exist. */
static int tensor_shape(uint64_t id, int64_t *shape) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__TensorInfo ti = TENFERRO__TENSOR_INFO__INIT;
    ti.tensor = id;
    f.body_case = TENFERRO__FRAME__BODY_TENSOR_INFO;
    f.tensor_info = &ti;
    Tenferro__Frame *r = call(&f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY);
    ck_assert_msg(r->tensor_info_reply->result->status == TF_OK, "tensor %llu does not exist",
                  (unsigned long long)id);
    const int rank = (int)r->tensor_info_reply->n_shape;
    for (int i = 0; i < rank; i++) shape[i] = r->tensor_info_reply->shape[i];
    tf__frame_free(r);
    return rank;
}

/* One wire operation and the storage its fields point into. */
typedef struct wop {
    Tenferro__Op op;
    Tenferro__Linalg l;
    Tenferro__Truncation t;
    uint64_t inputs[4];
    uint64_t outputs[1024];
    int32_t perm[16];
    int64_t params[40];
} wop;

/* A linear-algebra operation of kind on inputs, n_out fresh outputs, a default descriptor. */
static void wop_linalg(wop *w, uint32_t kind, int n_in, uint64_t in0, uint64_t in1, int n_out) {
    memset(w, 0, sizeof *w);
    tenferro__op__init(&w->op);
    tenferro__linalg__init(&w->l);
    tenferro__truncation__init(&w->t);
    w->op.kind = kind;
    w->inputs[0] = in0;
    w->inputs[1] = in1;
    w->op.inputs = w->inputs;
    w->op.n_inputs = (size_t)n_in;
    for (int o = 0; o < n_out; o++) w->outputs[o] = g_next_out++;
    w->op.outputs = w->outputs;
    w->op.n_outputs = (size_t)n_out;
    w->op.linalg = &w->l;
}

/* The matrix form of a rank-r input: n_batch r - 2, one row axis. */
static void matrix_form(wop *w, int rank) {
    w->l.n_batch = (uint32_t)(rank - 2);
    w->l.n_rows = 1;
}

static void set_perm(wop *w, int n, const int32_t *p) {
    memcpy(w->perm, p, sizeof(int32_t) * (size_t)n);
    w->l.perm = w->perm;
    w->l.n_perm = (size_t)n;
}

static void set_truncate(wop *w) {
    w->l.truncate = 1;
    w->l.truncation = &w->t;
}

/* A plain operation (OP_SLICE, an unknown kind) of one input into output. */
static void wop_plain(wop *w, uint32_t kind, uint64_t in, int n_params, const int64_t *params) {
    memset(w, 0, sizeof *w);
    tenferro__op__init(&w->op);
    w->op.kind = kind;
    w->inputs[0] = in;
    w->op.inputs = w->inputs;
    w->op.n_inputs = 1;
    w->op.output = g_next_out++;
    if (n_params) memcpy(w->params, params, sizeof(int64_t) * (size_t)n_params);
    w->op.params = w->params;
    w->op.n_params = (size_t)n_params;
}

/* Sends ops as one final scoped Submit and returns its Result frame (caller frees). */
static Tenferro__Frame *submit(Tenferro__Op **ops, size_t n) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.ops = ops;
    sub.n_ops = n;
    f.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    f.submit = &sub;
    Tenferro__Frame *r = call(&f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    return r;
}

/* What exists: this client's live tensors and the daemon's tensors created so far. */
typedef struct counts {
    uint64_t live, created, rejected;
} counts;

static counts snapshot(void) {
    Tenferro__Frame *s = th_status_report(&D);
    ck_assert_msg(s != NULL, "no status report");
    const Tenferro__ClientInfo *ci = th_find_client(s, g_client);
    ck_assert_msg(ci != NULL, "the status report does not list the raw client");
    counts c = {ci->live_tensors, th_report_counter(s->status_reply, "tensors_created"),
                th_report_counter(s->status_reply, "ops_rejected")};
    tf__frame_free(s);
    return c;
}

/* Frees tensors by id (one OP_FREE), requiring success. */
static void free_ids(const uint64_t *ids, size_t n) {
    Tenferro__Op op = TENFERRO__OP__INIT;
    op.kind = TF__OP_FREE;
    op.inputs = (uint64_t *)ids;
    op.n_inputs = n;
    Tenferro__Op *ops[1] = {&op};
    Tenferro__Frame *r = submit(ops, 1);
    CK_RESULT(r->result, TF_OK, NULL);
    tf__frame_free(r);
}

/* The connection still serves: a trace of tensor 2 runs, and its result is freed again. */
static void expect_serving(const char *what) {
    wop w;
    wop_linalg(&w, TF__OP_TRACE, 1, 2, 0, 1);
    matrix_form(&w, 2);
    Tenferro__Op *ops[1] = {&w.op};
    Tenferro__Frame *r = submit(ops, 1);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, TF_OK, NULL, why, sizeof why) == 0,
                  "%s: the next request was not served: %s", what, why);
    tf__frame_free(r);
    free_ids(w.outputs, 1);
}

/* ---- the same frames as nodes of a prepared graph ---- */

/*
 * The graph inputs of every raw graph: ids 1 .. 10 with the dtypes and
 * shapes of the tensors start() uploads, so that an operation naming those
 * tensors is, unchanged, a node over the graph's inputs.
 */
static const struct {
    tf_dtype dt;
    int rank;
    int64_t shape[4];
} g_inputs[10] = {
    {TF_F64, 3, {2, 4, 3}}, {TF_C128, 2, {3, 3}}, {TF_F64, 1, {3}},       {TF_F64, 2, {3, 3}},
    {TF_F64, 4, {2, 3, 4, 5}}, {TF_F64, 2, {4, 2}}, {TF_F32, 2, {3, 3}}, {TF_F64, 2, {3, 3}},
    {TF_F64, 3, {2, 3, 3}}, {TF_F64, 2, {4, 5}},
};

static uint64_t g_next_prepared = 500;

/* 1 when tensor id is live on the raw connection. */
static int live_tensor(uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__TensorInfo ti = TENFERRO__TENSOR_INFO__INIT;
    ti.tensor = id;
    f.body_case = TENFERRO__FRAME__BODY_TENSOR_INFO;
    f.tensor_info = &ti;
    Tenferro__Frame *r = call(&f);
    const int live = r->body_case == TENFERRO__FRAME__BODY_TENSOR_INFO_REPLY &&
                     r->tensor_info_reply->result->status == TF_OK;
    tf__frame_free(r);
    return live;
}

/*
 * Whether w names, as an output, a live tensor other than the inputs 1 .. 10
 * (a batch refuses that id as in use, a graph knows nothing of it), or reads
 * one (a batch reads it, a graph finds no such value): then the graph form
 * of w is not the batch's.
 */
static int names_live_tensors(const wop *w) {
    for (size_t i = 0; i < w->op.n_inputs && i < 2; i++)
        if (w->op.inputs[i] > 10 && live_tensor(w->op.inputs[i])) return 1;
    for (size_t o = 0; o < w->op.n_outputs && o < TF__LINALG_MAX_OUTPUTS; o++)
        if (w->op.outputs[o] > 10 && live_tensor(w->op.outputs[o])) return 1;
    return w->op.output > 10 && live_tensor(w->op.output);
}

/*
 * Sends a Prepare over the inputs 1 .. 10 whose node 0 copies input 4 and
 * whose node 1 (or node 0 when alone) is w's operation; the graph's outputs
 * are outputs[0 .. n_outputs) (none: node 0's). *id gets the Prepare's id;
 * returns its Result frame.
 */
static Tenferro__Frame *prepare_graph(wop *w, int alone, const uint64_t *outputs, int n_outputs,
                                      uint64_t *id) {
    Tenferro__GraphInput in[10], *in_ptrs[10];
    int64_t shapes[10][4];
    for (int i = 0; i < 10; i++) {
        tenferro__graph_input__init(&in[i]);
        in[i].id = (uint64_t)i + 1;
        in[i].dtype = g_inputs[i].dt;
        memcpy(shapes[i], g_inputs[i].shape, sizeof shapes[i]);
        in[i].shape = shapes[i];
        in[i].n_shape = (size_t)g_inputs[i].rank;
        in_ptrs[i] = &in[i];
    }
    wop copy;
    wop_plain(&copy, TF__OP_COPY, 4, 0, NULL);
    Tenferro__Op *nodes[2] = {&copy.op, &w->op};
    const uint64_t node0 = copy.op.output;
    Tenferro__Prepare p = TENFERRO__PREPARE__INIT;
    p.id = *id = ++g_next_prepared;
    p.inputs = in_ptrs;
    p.n_inputs = 10;
    p.nodes = alone ? &nodes[1] : nodes;
    p.n_nodes = alone ? 1 : 2;
    p.outputs = n_outputs ? (uint64_t *)outputs : (uint64_t *)&node0;
    p.n_outputs = n_outputs ? (size_t)n_outputs : 1;
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    f.body_case = TENFERRO__FRAME__BODY_PREPARE;
    f.prepare = &p;
    Tenferro__Frame *r = call(&f);
    ck_assert_int_eq(r->body_case, TENFERRO__FRAME__BODY_RESULT);
    return r;
}

/* Tells the daemon to forget prepared graph id (no answer). */
static void prepared_free(uint64_t id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__PreparedFree pf = TENFERRO__PREPARED_FREE__INIT;
    pf.id = id;
    f.body_case = TENFERRO__FRAME__BODY_PREPARED_FREE;
    f.prepared_free = &pf;
    f.seq = ++g_seq;
    ck_assert_int_eq(th_raw_send(g_fd, &f), 0);
}

/* The daemon's count of refused prepares. */
static uint64_t graphs_refused(void) {
    Tenferro__Frame *s = th_status_report(&D);
    ck_assert_msg(s != NULL, "no status report");
    const uint64_t n = th_report_counter(s->status_reply, "graphs_refused");
    tf__frame_free(s);
    return n;
}

/*
 * w as node 1 of a prepared graph is refused as the batch refuses it: the
 * same status (an unknown input is a dangling reference there, so
 * TF_ERR_INVALID_ARGUMENT), failed index 1, a message naming node 1, the
 * refusal counted, nothing kept (the connection serves the next request).
 */
static void expect_graph_refused(wop *w, tf_status want, const char *what) {
    if (names_live_tensors(w)) return;
    const tf_status graph_want = want == TF_ERR_UNKNOWN_HANDLE ? TF_ERR_INVALID_ARGUMENT : want;
    const uint64_t refused = graphs_refused();
    uint64_t id;
    Tenferro__Frame *r = prepare_graph(w, 0, NULL, 0, &id);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, graph_want, "node 1", why, sizeof why) == 0,
                  "%s, as a graph node: %s", what, why);
    ck_assert_msg(r->result->has_failed_index && r->result->failed_index == 1,
                  "%s, as a graph node: the refusal does not name node 1 (has %d, index %u)", what,
                  (int)r->result->has_failed_index, r->result->failed_index);
    tf__frame_free(r);
    ck_assert_uint_eq(graphs_refused(), refused + 1);
}

/*
 * Runs prepared graph id on the tensors 1 .. 10 into n_outputs fresh
 * tensors in one final scoped Submit, which must succeed; output o must have
 * rank ranks[o] and the next ranks[o] entries of shapes. The outputs are
 * freed again.
 */
static void expect_run(uint64_t id, int n_outputs, const int *ranks, const int64_t *shapes,
                       const char *what) {
    uint64_t in[10], out[8];
    for (int i = 0; i < 10; i++) in[i] = (uint64_t)i + 1;
    for (int o = 0; o < n_outputs; o++) out[o] = g_next_out++;
    Tenferro__Op op = TENFERRO__OP__INIT;
    op.kind = TF__OP_RUN_PREPARED;
    op.prepared = id;
    op.inputs = in;
    op.n_inputs = 10;
    op.outputs = out;
    op.n_outputs = (size_t)n_outputs;
    Tenferro__Op *ops[1] = {&op};
    Tenferro__Frame *r = submit(ops, 1);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, TF_OK, NULL, why, sizeof why) == 0, "%s: run: %s",
                  what, why);
    tf__frame_free(r);
    for (int o = 0, at = 0; o < n_outputs; at += ranks[o], o++) {
        int64_t shape[TF_MAX_RANK];
        ck_assert_msg(tensor_shape(out[o], shape) == ranks[o], "%s: output %d's rank", what, o);
        for (int a = 0; a < ranks[o]; a++)
            ck_assert_msg(shape[a] == shapes[at + a], "%s: output %d axis %d is %lld, not %lld",
                          what, o, a, (long long)shape[a], (long long)shapes[at + a]);
    }
    free_ids(out, (size_t)n_outputs);
}

/* w as node 1 of a prepared graph is accepted as the batch accepts it; the graph is freed again. */
static void expect_graph_accepted(wop *w, const char *what) {
    for (size_t i = 0; i < w->op.n_inputs && i < 2; i++)
        if (w->op.inputs[i] > 10) return; /* reads a result of the batch: no graph input */
    uint64_t id;
    Tenferro__Frame *r = prepare_graph(w, 0, NULL, 0, &id);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, TF_OK, NULL, why, sizeof why) == 0,
                  "%s, as a graph node: %s", what, why);
    tf__frame_free(r);
    prepared_free(id);
}

/*
 * Sends w alone: it must be refused with `want` (a message holding needle,
 * when given) at index 0, accepting and creating nothing, and the
 * connection must serve the next request. The same operation as a node of a
 * prepared graph is refused first, typed alike (expect_graph_refused).
 */
static void expect_refused(wop *w, tf_status want, const char *needle, const char *what) {
    expect_graph_refused(w, want, what);
    const counts before = snapshot();
    Tenferro__Op *ops[1] = {&w->op};
    Tenferro__Frame *r = submit(ops, 1);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, want, needle, why, sizeof why) == 0, "%s: %s", what,
                  why);
    ck_assert_msg(r->result->has_failed_index && r->result->failed_index == 0 &&
                      r->result->ops_accepted == 0,
                  "%s: the refusal does not name operation 0 (has %d, index %u, accepted %llu)",
                  what, (int)r->result->has_failed_index, r->result->failed_index,
                  (unsigned long long)r->result->ops_accepted);
    tf__frame_free(r);
    const counts after = snapshot();
    ck_assert_msg(after.live == before.live && after.created == before.created,
                  "%s: the refusal created tensors (live %llu -> %llu, created %llu -> %llu)", what,
                  (unsigned long long)before.live, (unsigned long long)after.live,
                  (unsigned long long)before.created, (unsigned long long)after.created);
    ck_assert_msg(after.rejected == before.rejected + 1, "%s: ops_rejected went %llu -> %llu", what,
                  (unsigned long long)before.rejected, (unsigned long long)after.rejected);
    expect_serving(what);
}

/* Sends w alone: it must be accepted (as a graph node too); the caller frees its outputs. */
static void expect_accepted(wop *w, const char *what) {
    expect_graph_accepted(w, what);
    Tenferro__Op *ops[1] = {&w->op};
    Tenferro__Frame *r = submit(ops, 1);
    char why[1024];
    ck_assert_msg(th_result_problem(r->result, TF_OK, NULL, why, sizeof why) == 0, "%s: %s", what,
                  why);
    tf__frame_free(r);
}

/*
 * The tensors every test uses:
 *   1 f64 [2, 4, 3]   2 c128 [3, 3]   3 f64 [3]   4 f64 [3, 3]   5 f64 [2, 3, 4, 5]
 *   6 f64 [4, 2]      7 f32 [3, 3]    8 f64 [3, 3] (B of another batch)   9 f64 [2, 3, 3]
 *   10 f64 [4, 5]
 */
static void start(void) {
    ck_assert_msg(th_daemon_start(&D, (char *)NULL) == 0, "tenferrod did not start (log %s)",
                  D.log_path);
    g_fd = th_raw_open(&D, "raw-linalg", ++g_seq, &g_client);
    ck_assert_msg(g_fd >= 0, "no HelloReply");
    const int64_t s1[3] = {2, 4, 3}, s2[2] = {3, 3}, s3[1] = {3}, s5[4] = {2, 3, 4, 5},
                  s6[2] = {4, 2}, s9[3] = {2, 3, 3}, s10[2] = {4, 5};
    upload(1, TF_F64, 3, s1);
    upload(2, TF_C128, 2, s2);
    upload(3, TF_F64, 1, s3);
    upload(4, TF_F64, 2, s2);
    upload(5, TF_F64, 4, s5);
    upload(6, TF_F64, 2, s6);
    upload(7, TF_F32, 2, s2);
    upload(8, TF_F64, 2, s2);
    upload(9, TF_F64, 3, s9);
    upload(10, TF_F64, 2, s10);
}

static void stop(void) {
    close(g_fd);
    g_fd = -1;
    CK_DAEMON_STOP(&D);
}

/* A good reduced SVD of tensor 1 ([2, 4, 3]): U, S, Vh. */
static void svd_base(wop *w) {
    wop_linalg(w, TF__OP_SVD, 1, 1, 0, 3);
    matrix_form(w, 3);
    w->l.compute_uv = 1;
}

/* A good truncated SVD of tensor 1 by max_rank 2: U, S, Vh, report. */
static void svdt_base(wop *w) {
    wop_linalg(w, TF__OP_SVD, 1, 1, 0, 4);
    matrix_form(w, 3);
    w->l.compute_uv = 1;
    set_truncate(w);
    w->t.max_rank = 2;
}

START_TEST(test_descriptor_and_split) {
    start();
    wop w;
    svd_base(&w);
    expect_accepted(&w, "the good base svd");
    free_ids(w.outputs, 3);

    svd_base(&w);
    w.op.linalg = NULL;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "Linalg", "no Op.linalg");

    static const struct {
        const char *what;
        int n;
        int32_t p[12];
    } perms[] = {
        {"perm repeats an axis", 3, {0, 0, 1}},
        {"perm names axis 3 of a rank-3 input", 3, {0, 1, 3}},
        {"perm has a negative entry", 3, {-1, 0, 1}},
        {"perm has INT32_MIN", 3, {INT32_MIN, 0, 1}},
        {"perm is too short", 2, {1, 0}},
        {"perm is too short, a permutation once zeros follow", 2, {1, 2}},
        {"perm of one entry", 1, {1}},
        {"perm is one too long", 4, {0, 1, 2, 3}},
        {"perm is one too long, repeating", 4, {2, 1, 0, 0}},
        {"perm is longer than any rank", 9, {0, 1, 2, 3, 4, 5, 6, 7, 8}},
        {"perm of 12 entries", 12, {0}},
    };
    for (size_t i = 0; i < sizeof perms / sizeof *perms; i++) {
        svd_base(&w);
        set_perm(&w, perms[i].n, perms[i].p);
        expect_refused(&w, TF_ERR_AXIS, NULL, perms[i].what);
    }

    static const struct {
        const char *what;
        uint32_t nb, nr;
    } splits[] = {
        {"n_batch beyond the rank", 4, 1},
        {"n_rows beyond the rank", 0, 4},
        {"no column axes", 2, 1},
        {"no row axes", 1, 0},
        {"n_batch uint32 max", UINT32_MAX, 1},
        {"n_rows uint32 max", 0, UINT32_MAX},
        {"both uint32 max", UINT32_MAX, UINT32_MAX},
        {"n_batch 2^31", 0x80000000u, 1},
        {"n_batch + n_rows wrapping", 0x80000000u, 0x80000000u},
    };
    for (size_t i = 0; i < sizeof splits / sizeof *splits; i++) {
        svd_base(&w);
        w.l.n_batch = splits[i].nb;
        w.l.n_rows = splits[i].nr;
        expect_refused(&w, TF_ERR_AXIS, NULL, splits[i].what);
    }
    /* A permutation in tensor form is fine (a copy of the daemon's own), and the identity too. */
    svd_base(&w);
    static const int32_t rev[3] = {2, 1, 0};
    set_perm(&w, 3, rev);
    expect_accepted(&w, "a reversing perm");
    int64_t shape[TF_MAX_RANK];
    ck_assert_int_eq(tensor_shape(w.outputs[0], shape), 3); /* U [3, 4, 2] */
    ck_assert(shape[0] == 3 && shape[1] == 4 && shape[2] == 2);
    free_ids(w.outputs, 3);

    /* Inputs: counts, an unknown handle. */
    svd_base(&w);
    w.op.n_inputs = 2;
    w.inputs[1] = 4;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "svd with two inputs");
    svd_base(&w);
    w.op.n_inputs = 0;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "svd without inputs");
    svd_base(&w);
    w.inputs[0] = 777;
    expect_refused(&w, TF_ERR_UNKNOWN_HANDLE, NULL, "svd of an unknown tensor");
    wop_linalg(&w, TF__OP_SOLVE, 1, 4, 0, 1);
    matrix_form(&w, 2);
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "solve with one input");
    wop_linalg(&w, TF__OP_SOLVE, 3, 4, 3, 1);
    w.inputs[2] = 3;
    matrix_form(&w, 2);
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "solve with three inputs");
    stop();
}
END_TEST

START_TEST(test_outputs) {
    start();
    wop w;
    svd_base(&w);
    w.op.n_outputs = 2;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", "svd naming 2 outputs of 3");
    svd_base(&w);
    w.op.n_outputs = 4;
    w.outputs[3] = g_next_out++;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", "an untruncated svd naming 4 outputs");
    svd_base(&w);
    w.op.n_outputs = 0;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", "svd naming no outputs");
    svd_base(&w);
    w.op.n_outputs = 0;
    w.op.output = g_next_out++;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "svd with Op.output instead of outputs");
    svd_base(&w);
    w.outputs[2] = w.outputs[0];
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "repeated", "svd output repeated");
    svd_base(&w);
    w.outputs[1] = 4;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "in use", "svd output already a tensor");
    svd_base(&w);
    w.outputs[2] = 0;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "zero", "svd output 0");
    for (int n = TF__LINALG_MAX_OUTPUTS + 1; n <= 1024; n = n < 16 ? n + 1 : n * 4) {
        char what[64];
        snprintf(what, sizeof what, "svd_truncated naming %d outputs", n);
        svdt_base(&w);
        for (int o = 0; o < n; o++) w.outputs[o] = g_next_out++;
        w.op.n_outputs = (size_t)n;
        expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", what);
    }
    wop_linalg(&w, TF__OP_DET, 1, 4, 0, 2);
    matrix_form(&w, 2);
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", "det naming 2 outputs");
    wop_linalg(&w, TF__OP_SLOGDET, 1, 4, 0, 1);
    matrix_form(&w, 2);
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "outputs", "slogdet naming 1 output");
    wop_linalg(&w, TF__OP_QR, 1, 1, 0, 2);
    matrix_form(&w, 3);
    w.outputs[1] = 1;
    w.l.compute_uv = 1;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "in use", "qr's R into an existing tensor");

    /* An output freed earlier may be reused; one made by this very Submit may not. */
    svd_base(&w);
    expect_accepted(&w, "a good svd");
    const uint64_t made[3] = {w.outputs[0], w.outputs[1], w.outputs[2]};
    wop second;
    svd_base(&second);
    second.outputs[0] = made[1];
    expect_refused(&second, TF_ERR_INVALID_ARGUMENT, "in use", "svd into the last svd's S");
    free_ids(made, 3);
    svd_base(&second);
    memcpy(second.outputs, made, sizeof made);
    expect_accepted(&second, "svd into freed ids");
    free_ids(made, 3);

    /* A refusal at index 1: operation 0 stays (its output exists), nothing of 1 does. */
    const counts before = snapshot();
    wop good, bad;
    wop_linalg(&good, TF__OP_TRACE, 1, 2, 0, 1);
    matrix_form(&good, 2);
    svd_base(&bad);
    bad.outputs[1] = bad.outputs[0];
    Tenferro__Op *ops[2] = {&good.op, &bad.op};
    Tenferro__Frame *r = submit(ops, 2);
    CK_RESULT(r->result, TF_ERR_INVALID_ARGUMENT, NULL);
    ck_assert(r->result->has_failed_index && r->result->failed_index == 1 &&
              r->result->ops_accepted == 1);
    tf__frame_free(r);
    const counts after = snapshot();
    ck_assert_uint_eq(after.live, before.live + 1);
    ck_assert_uint_eq(after.created, before.created + 1);
    free_ids(good.outputs, 1);
    stop();
}
END_TEST

START_TEST(test_truncation) {
    start();
    wop w;
    svdt_base(&w);
    expect_accepted(&w, "the good truncated svd");
    free_ids(w.outputs, 4);

    static const struct {
        const char *what;
        int64_t max_rank, min_rank;
        double cutoff, rel_cutoff, dw, rdw;
        int absorb;
        const char *needle;
    } bad[] = {
        {"max_rank -1", -1, 0, 0, 0, 0, 0, 0, "max_rank"},
        {"max_rank INT64_MIN", INT64_MIN, 0, 0, 0, 0, 0, 0, "max_rank"},
        {"min_rank -5", 0, -5, 0, 0, 0, 0, 0, "min_rank"},
        {"min_rank 3 above max_rank 2", 2, 3, 0, 0, 0, 0, 0, "min_rank"},
        {"min_rank 2^62 above max_rank 2", 2, (int64_t)1 << 62, 0, 0, 0, 0, 0, "min_rank"},
        {"cutoff nan", 0, 0, NAN, 0, 0, 0, 0, "cutoff"},
        {"cutoff inf", 0, 0, INFINITY, 0, 0, 0, 0, "cutoff"},
        {"cutoff -1", 0, 0, -1, 0, 0, 0, 0, "cutoff"},
        {"cutoff -DBL_MIN", 0, 0, -2.2250738585072014e-308, 0, 0, 0, 0, "cutoff"},
        {"rel_cutoff nan", 0, 0, 0, NAN, 0, 0, 0, "rel_cutoff"},
        {"rel_cutoff -inf", 0, 0, 0, -INFINITY, 0, 0, 0, "rel_cutoff"},
        {"discarded_weight inf", 0, 0, 0, 0, INFINITY, 0, 0, "discarded_weight"},
        {"discarded_weight -1e-300", 0, 0, 0, 0, -1e-300, 0, 0, "discarded_weight"},
        {"rel_discarded_weight nan", 0, 0, 0, 0, 0, NAN, 0, "rel_discarded_weight"},
        {"rel_discarded_weight -0.5", 0, 0, 0, 0, 0, -0.5, 0, "rel_discarded_weight"},
        {"absorb 4", 0, 0, 0, 0, 0, 0, 4, "absorb"},
        {"absorb -1", 0, 0, 0, 0, 0, 0, -1, "absorb"},
        {"absorb 1000", 0, 0, 0, 0, 0, 0, 1000, "absorb"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        svdt_base(&w);
        w.t.max_rank = bad[i].max_rank;
        w.t.min_rank = bad[i].min_rank;
        w.t.cutoff = bad[i].cutoff;
        w.t.rel_cutoff = bad[i].rel_cutoff;
        w.t.discarded_weight = bad[i].dw;
        w.t.rel_discarded_weight = bad[i].rdw;
        w.t.absorb = (Tenferro__Absorb)bad[i].absorb;
        expect_refused(&w, TF_ERR_INVALID_ARGUMENT, bad[i].needle, bad[i].what);
        /* The same on eigh (square tensor 4: W, V, report). */
        wop e;
        wop_linalg(&e, TF__OP_EIGH, 1, 4, 0, 3);
        matrix_form(&e, 2);
        e.l.compute_uv = 1;
        set_truncate(&e);
        e.t = w.t;
        expect_refused(&e, TF_ERR_INVALID_ARGUMENT, NULL, bad[i].what);
    }
    /* Options where they do not belong. */
    svdt_base(&w);
    w.l.compute_uv = 0;
    w.op.n_outputs = 2; /* S, report */
    w.t.absorb = TENFERRO__ABSORB__ABSORB_LEFT;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "absorb", "absorb without vectors");
    svdt_base(&w);
    w.l.full = 1;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "full", "a truncated full svd");
    wop_linalg(&w, TF__OP_EIGH, 1, 4, 0, 3);
    matrix_form(&w, 2);
    w.l.compute_uv = 1;
    set_truncate(&w);
    w.t.renormalize = 1;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "renormalize", "eigh with renormalize");
    w.t.renormalize = 0;
    w.t.absorb = TENFERRO__ABSORB__ABSORB_BOTH;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "absorb", "eigh with absorb");
    wop_linalg(&w, TF__OP_QR, 1, 1, 0, 2);
    matrix_form(&w, 3);
    w.l.compute_uv = 1;
    set_truncate(&w);
    w.t.max_rank = 2;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "truncation", "qr with truncation");
    w.op.n_outputs = 3;
    w.outputs[2] = g_next_out++;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "truncation", "qr with truncation and a report");
    static const uint32_t others[] = {TF__OP_CHOLESKY, TF__OP_INV,      TF__OP_DET,
                                      TF__OP_TRACE,    TF__OP_DIAGONAL, TF__OP_NORM};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s with truncation", tf__op_name((tf__op_kind)others[i]));
        wop_linalg(&w, others[i], 1, 4, 0, 1);
        matrix_form(&w, 2);
        set_truncate(&w);
        expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "truncation", what);
    }
    /* Huge but meaningful bounds: accepted, the results of the matrix's own width (k = 3). */
    static const struct {
        const char *what;
        int64_t max_rank, min_rank;
    } huge[] = {
        {"max_rank 2^62", (int64_t)1 << 62, 0},
        {"max_rank INT64_MAX", INT64_MAX, 0},
        {"min_rank 2^62 without max_rank", 0, (int64_t)1 << 62},
        {"max_rank = min_rank = 2^62", (int64_t)1 << 62, (int64_t)1 << 62},
    };
    for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
        svdt_base(&w);
        w.t.max_rank = huge[i].max_rank;
        w.t.min_rank = huge[i].min_rank;
        expect_accepted(&w, huge[i].what);
        int64_t shape[TF_MAX_RANK];
        ck_assert_int_eq(tensor_shape(w.outputs[1], shape), 2);
        ck_assert_msg(shape[0] == 2 && shape[1] == 3, "%s: S is [%lld, %lld]", huge[i].what,
                      (long long)shape[0], (long long)shape[1]);
        free_ids(w.outputs, 4);
    }
    /* A truncation flag without its message truncates nothing, and still reports. */
    svdt_base(&w);
    w.l.truncation = NULL;
    expect_accepted(&w, "truncate without a Truncation");
    free_ids(w.outputs, 4);
    /* A Truncation message without the flag is ignored: three outputs. */
    svd_base(&w);
    w.l.truncation = &w.t;
    w.t.cutoff = -1;
    expect_accepted(&w, "a Truncation without truncate");
    free_ids(w.outputs, 3);
    stop();
}
END_TEST

START_TEST(test_kind_options) {
    start();
    wop w;
    /* eigh of a non-square matrix, cholesky in tensor form, a permuted cholesky. */
    wop_linalg(&w, TF__OP_EIGH, 1, 1, 0, 1);
    matrix_form(&w, 3);
    expect_refused(&w, TF_ERR_SHAPE, "square", "eigh of 4 x 3");
    wop_linalg(&w, TF__OP_EIGH, 1, 5, 0, 1);
    w.l.n_rows = 2;
    expect_refused(&w, TF_ERR_SHAPE, "square", "eigh of [2, 3, 4, 5] as 6 x 20");
    wop_linalg(&w, TF__OP_CHOLESKY, 1, 4, 0, 1);
    w.l.n_rows = 1;
    static const int32_t swap[2] = {1, 0};
    set_perm(&w, 2, swap);
    expect_refused(&w, TF_ERR_AXIS, NULL, "cholesky with a perm");
    wop_linalg(&w, TF__OP_INV, 1, 5, 0, 1);
    w.l.n_batch = 0;
    w.l.n_rows = 2;
    expect_refused(&w, TF_ERR_AXIS, NULL, "inv with two row axes");
    wop_linalg(&w, TF__OP_DET, 1, 1, 0, 1);
    matrix_form(&w, 3);
    expect_refused(&w, TF_ERR_SHAPE, NULL, "det of 4 x 3");

    /* Norms. */
    static const struct {
        const char *what;
        int kind;
        double p;
        tf_status want;
    } norms[] = {
        {"norm kind 4", 4, 2, TF_ERR_INVALID_ARGUMENT},
        {"norm kind 99", 99, 2, TF_ERR_INVALID_ARGUMENT},
        {"norm kind -1", -1, 2, TF_ERR_INVALID_ARGUMENT},
        {"matrix norm p = 3", TENFERRO__NORM_KIND__NORM_MATRIX, 3, TF_ERR_INVALID_ARGUMENT},
        {"matrix norm p = 0", TENFERRO__NORM_KIND__NORM_MATRIX, 0, TF_ERR_INVALID_ARGUMENT},
        {"matrix norm p = 1.5", TENFERRO__NORM_KIND__NORM_MATRIX, 1.5, TF_ERR_INVALID_ARGUMENT},
        {"matrix norm p = nan", TENFERRO__NORM_KIND__NORM_MATRIX, NAN, TF_ERR_INVALID_ARGUMENT},
        {"vector norm p = nan", TENFERRO__NORM_KIND__NORM_VECTOR, NAN, TF_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof norms / sizeof *norms; i++) {
        wop_linalg(&w, TF__OP_NORM, 1, 1, 0, 1);
        matrix_form(&w, 3);
        w.l.norm_kind = (Tenferro__NormKind)norms[i].kind;
        w.l.norm_p = norms[i].p;
        expect_refused(&w, norms[i].want, NULL, norms[i].what);
    }
    wop_linalg(&w, TF__OP_NORM, 1, 5, 0, 1);
    w.l.n_batch = 1;
    w.l.n_rows = 2;
    w.l.norm_kind = TENFERRO__NORM_KIND__NORM_FRO;
    expect_refused(&w, TF_ERR_AXIS, NULL, "a Frobenius norm over three axes");
    wop_linalg(&w, TF__OP_NORM, 1, 1, 0, 1);
    w.l.n_batch = 3;
    w.l.norm_p = 2;
    expect_refused(&w, TF_ERR_AXIS, NULL, "a norm over no axes");
    wop_linalg(&w, TF__OP_NORM, 1, 5, 0, 1);
    static const int32_t unordered[4] = {2, 0, 1, 3};
    set_perm(&w, 4, unordered);
    w.l.n_batch = 2;
    w.l.norm_p = 2;
    w.l.keepdims = 1;
    expect_refused(&w, TF_ERR_AXIS, NULL, "keepdims with the kept axes out of order");
    w.l.keepdims = 0;
    expect_accepted(&w, "the same without keepdims");
    free_ids(w.outputs, 1);

    /* Trace and diagonal offsets of a 4 x 3 matrix (tensor 1). */
    static const int64_t offsets[] = {3,         -4,        100,           -100,
                                      INT64_MAX, INT64_MIN, INT64_MIN + 1, INT64_MAX - 1};
    for (size_t i = 0; i < sizeof offsets / sizeof *offsets; i++)
        for (int diag = 0; diag < 2; diag++) {
            char what[96];
            snprintf(what, sizeof what, "%s offset %lld", diag ? "diagonal" : "trace",
                     (long long)offsets[i]);
            wop_linalg(&w, diag ? TF__OP_DIAGONAL : TF__OP_TRACE, 1, 1, 0, 1);
            matrix_form(&w, 3);
            w.l.offset = offsets[i];
            expect_refused(&w, TF_ERR_INVALID_ARGUMENT, "offset", what);
        }
    wop_linalg(&w, TF__OP_TRACE, 1, 5, 0, 1);
    w.l.n_rows = 2;
    expect_refused(&w, TF_ERR_AXIS, NULL, "trace with two row axes");
    wop_linalg(&w, TF__OP_DIAGONAL, 1, 1, 0, 1);
    matrix_form(&w, 3);
    w.l.offset = -3;
    expect_accepted(&w, "the last diagonal below");
    int64_t shape[TF_MAX_RANK];
    ck_assert_int_eq(tensor_shape(w.outputs[0], shape), 2);
    ck_assert(shape[0] == 2 && shape[1] == 1);
    free_ids(w.outputs, 1);

    /* Solve with a B that does not fit. */
    static const struct {
        const char *what;
        uint64_t a, b;
        tf_status want;
    } solves[] = {
        {"B with 4 rows for a 3 x 3 A", 4, 6, TF_ERR_SHAPE},
        {"B of another dtype", 4, 7, TF_ERR_DTYPE},
        {"B of c128 for an f64 A", 4, 2, TF_ERR_DTYPE},
        {"B of another batch", 9, 8, TF_ERR_SHAPE},
        {"B of rank 4", 4, 5, TF_ERR_SHAPE},
        {"a non-square A", 1, 9, TF_ERR_SHAPE},
        {"B unknown", 4, 555, TF_ERR_UNKNOWN_HANDLE},
    };
    for (size_t i = 0; i < sizeof solves / sizeof *solves; i++) {
        wop_linalg(&w, TF__OP_SOLVE, 2, solves[i].a, solves[i].b, 1);
        matrix_form(&w, solves[i].a == 9 || solves[i].a == 1 ? 3 : 2);
        expect_refused(&w, solves[i].want, NULL, solves[i].what);
    }
    wop_linalg(&w, TF__OP_SOLVE, 2, 4, 3, 1);
    matrix_form(&w, 2);
    expect_accepted(&w, "a good solve");
    free_ids(w.outputs, 1);

    /* Linear algebra in a prepared graph: inv alone, accepted and run. */
    wop_linalg(&w, TF__OP_INV, 1, 4, 0, 1);
    matrix_form(&w, 2);
    uint64_t pid;
    Tenferro__Frame *r = prepare_graph(&w, 1, w.outputs, 1, &pid);
    CK_RESULT(r->result, TF_OK, NULL);
    tf__frame_free(r);
    expect_run(pid, 1, (const int[]){2}, (const int64_t[]){3, 3}, "a prepared graph holding inv");
    prepared_free(pid);
    expect_serving("a prepared graph holding inv");
    stop();
}
END_TEST

START_TEST(test_slice_and_unknown_kinds) {
    start();
    wop w;
    /* Tensor 10 is [4, 5]. */
    static const struct {
        const char *what;
        int n;
        int64_t p[8];
        tf_status want;
    } slices[] = {
        {"5 parameters for rank 2", 5, {0, 1, 4, 0, 1}, TF_ERR_INVALID_ARGUMENT},
        {"7 parameters for rank 2", 7, {0, 1, 4, 0, 1, 5, 0}, TF_ERR_INVALID_ARGUMENT},
        {"no parameters", 0, {0}, TF_ERR_INVALID_ARGUMENT},
        {"zero step", 6, {0, 0, 1, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"start past the axis", 6, {4, 1, 1, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"negative start", 6, {-1, 1, 1, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"zero length", 6, {0, 1, 0, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"negative length", 6, {0, 1, -3, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"length past the axis", 6, {0, 1, 5, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"last index past the axis", 6, {1, 1, 4, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"backwards past the start", 6, {2, -1, 4, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"step past the axis", 6, {0, 9, 1, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"huge length", 6, {0, 1, (int64_t)1 << 62, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"length INT64_MAX", 6, {0, 1, INT64_MAX, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"start + step overflowing", 6, {1, INT64_MAX, 2, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"step INT64_MAX, length 4", 6, {0, INT64_MAX, 4, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"step INT64_MIN", 6, {3, INT64_MIN, 2, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"start INT64_MIN, step INT64_MIN",
         6, {INT64_MIN, INT64_MIN, 2, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"start INT64_MAX, step -1", 6, {INT64_MAX, -1, 2, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"start -2, step INT64_MIN", 6, {-2, INT64_MIN, 2, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
        {"step 2^62, length 3", 6, {0, (int64_t)1 << 62, 3, 0, 1, 5}, TF_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof slices / sizeof *slices; i++) {
        wop_plain(&w, TF__OP_SLICE, 10, slices[i].n, slices[i].p);
        expect_refused(&w, slices[i].want, NULL, slices[i].what);
    }
    int64_t many[40] = {0};
    wop_plain(&w, TF__OP_SLICE, 10, 3 * TF_MAX_RANK + 1, many);
    expect_refused(&w, TF_ERR_AXIS, NULL, "more parameters than any slice takes");
    wop_plain(&w, TF__OP_SLICE, 10, 40, many);
    expect_refused(&w, TF_ERR_AXIS, NULL, "40 parameters");
    static const int64_t good[6] = {3, -1, 4, 4, -2, 3};
    wop_plain(&w, TF__OP_SLICE, 10, 6, good);
    w.op.output = 0;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "slice into output 0");
    wop_plain(&w, TF__OP_SLICE, 10, 6, good);
    w.op.output = 3;
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "slice into an existing tensor");
    wop_plain(&w, TF__OP_SLICE, 10, 6, good);
    expect_accepted(&w, "a good slice with negative steps");
    int64_t shape[TF_MAX_RANK];
    ck_assert_int_eq(tensor_shape(w.op.output, shape), 2);
    ck_assert(shape[0] == 4 && shape[1] == 3);
    free_ids(&w.op.output, 1);

    /* Kinds past the last one, and linear-algebra kinds dressed as plain operations. */
    static const uint32_t kinds[] = {TF__OP_KIND_COUNT, 38,        39, 64, 255, 1000,
                                     0x7fffffffu,       UINT32_MAX};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        char what[64];
        snprintf(what, sizeof what, "operation kind %u", kinds[i]);
        wop_linalg(&w, kinds[i], 1, 4, 0, 1);
        matrix_form(&w, 2);
        w.op.output = g_next_out++;
        expect_refused(&w, TF_ERR_UNSUPPORTED, NULL, what);
    }
    wop_plain(&w, TF__OP_INV, 4, 0, NULL);
    expect_refused(&w, TF_ERR_INVALID_ARGUMENT, NULL, "inv without a descriptor, with Op.output");
    stop();
}
END_TEST

/*
 * What only a graph can get wrong: a linear-algebra node's outputs against
 * the ids of earlier nodes and of its own graph, a node reading its own
 * output, graph outputs naming ids no node made, and the runs of good
 * graphs whose nodes have several outputs, a permuting split (the scratch
 * value) and a value-dependent truncation.
 */
START_TEST(test_prepared_graphs) {
    start();
    wop w, copy;
    uint64_t pid;
    /* The failing node is node 1 in each: node 0 (a copy of input 4) is good. */
    svd_base(&w);
    w.outputs[1] = g_next_out; /* the id prepare_graph gives node 0's output next */
    Tenferro__Frame *r = prepare_graph(&w, 0, NULL, 0, &pid);
    CK_RESULT(r->result, TF_ERR_INVALID_ARGUMENT, "node 1");
    ck_assert(r->result->has_failed_index && r->result->failed_index == 1);
    tf__frame_free(r);
    svd_base(&w);
    w.inputs[0] = w.outputs[1]; /* reads its own S: a cycle */
    r = prepare_graph(&w, 0, NULL, 0, &pid);
    CK_RESULT(r->result, TF_ERR_INVALID_ARGUMENT, "dangling");
    ck_assert(r->result->has_failed_index && r->result->failed_index == 1);
    tf__frame_free(r);
    /* A graph output no node made: the whole graph's fault, no node named. */
    svd_base(&w);
    const uint64_t nobody = 99999;
    r = prepare_graph(&w, 0, &nobody, 1, &pid);
    CK_RESULT(r->result, TF_ERR_INVALID_ARGUMENT, "99999");
    ck_assert(!r->result->has_failed_index || (int32_t)r->result->failed_index < 0);
    tf__frame_free(r);
    expect_serving("hostile graphs");

    /* Good graphs, run: every output of a truncated SVD, the report included. */
    svdt_base(&w);
    r = prepare_graph(&w, 1, w.outputs, 4, &pid);
    CK_RESULT(r->result, TF_OK, NULL);
    tf__frame_free(r);
    expect_run(pid, 4, (const int[]){3, 2, 3, 2},
               (const int64_t[]){2, 4, 2, 2, 2, 2, 2, 3, 2, 3}, "svd_truncated by max_rank");
    prepared_free(pid);
    /* A permuting split of tensor 5 [2, 3, 4, 5]: rows (4, 2), columns (5, 3), through scratch. */
    static const int32_t perm[4] = {2, 0, 3, 1};
    wop_linalg(&w, TF__OP_SVD, 1, 5, 0, 4);
    set_perm(&w, 4, perm);
    w.l.n_batch = 0;
    w.l.n_rows = 2;
    w.l.compute_uv = 1;
    set_truncate(&w);
    w.t.rel_cutoff = 0.5;
    w.t.keep_degenerate = 1;
    r = prepare_graph(&w, 0, w.outputs, 4, &pid);
    CK_RESULT(r->result, TF_OK, NULL);
    tf__frame_free(r);
    expect_run(pid, 4, (const int[]){3, 1, 3, 1}, (const int64_t[]){4, 2, 8, 8, 8, 5, 3, 3},
               "svd_truncated of a permuted tensor by a cutoff");
    expect_run(pid, 4, (const int[]){3, 1, 3, 1}, (const int64_t[]){4, 2, 8, 8, 8, 5, 3, 3},
               "the same graph again");
    prepared_free(pid);
    /* qr reading node 0's output, then a solve reading qr's R and tensor 3: three nodes chained. */
    wop qr, solve;
    wop_plain(&copy, TF__OP_COPY, 4, 0, NULL);
    wop_linalg(&qr, TF__OP_QR, 1, copy.op.output, 0, 2);
    matrix_form(&qr, 2);
    qr.l.compute_uv = 1;
    wop_linalg(&solve, TF__OP_SOLVE, 2, 4, 3, 1);
    matrix_form(&solve, 2);
    {
        Tenferro__GraphInput in[10], *in_ptrs[10];
        int64_t shapes[10][4];
        for (int i = 0; i < 10; i++) {
            tenferro__graph_input__init(&in[i]);
            in[i].id = (uint64_t)i + 1;
            in[i].dtype = g_inputs[i].dt;
            memcpy(shapes[i], g_inputs[i].shape, sizeof shapes[i]);
            in[i].shape = shapes[i];
            in[i].n_shape = (size_t)g_inputs[i].rank;
            in_ptrs[i] = &in[i];
        }
        Tenferro__Op *nodes[3] = {&copy.op, &qr.op, &solve.op};
        const uint64_t outs[3] = {qr.outputs[0], qr.outputs[1], solve.outputs[0]};
        Tenferro__Prepare p = TENFERRO__PREPARE__INIT;
        p.id = pid = ++g_next_prepared;
        p.inputs = in_ptrs;
        p.n_inputs = 10;
        p.nodes = nodes;
        p.n_nodes = 3;
        p.outputs = (uint64_t *)outs;
        p.n_outputs = 3;
        Tenferro__Frame f = TENFERRO__FRAME__INIT;
        f.body_case = TENFERRO__FRAME__BODY_PREPARE;
        f.prepare = &p;
        r = call(&f);
        CK_RESULT(r->result, TF_OK, NULL);
        tf__frame_free(r);
    }
    expect_run(pid, 3, (const int[]){2, 2, 1}, (const int64_t[]){3, 3, 3, 3, 3}, "copy, qr, solve");
    prepared_free(pid);
    expect_serving("good graphs");
    stop();
}
END_TEST

static Suite *linalg_raw_suite(void) {
    Suite *s = suite_create("linalg-raw");
    TCase *tc = tcase_create("linalg-raw");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_descriptor_and_split);
    tcase_add_test(tc, test_outputs);
    tcase_add_test(tc, test_truncation);
    tcase_add_test(tc, test_kind_options);
    tcase_add_test(tc, test_slice_and_unknown_kinds);
    tcase_add_test(tc, test_prepared_graphs);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    th_seed();
    SRunner *sr = srunner_create(linalg_raw_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
