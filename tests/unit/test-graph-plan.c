/*
 * Unit tests of the plans of prepared graphs (daemon/graph-plan.c) for the
 * linear-algebra kinds, on Prepare messages built here.
 *
 * A node of a linear-algebra kind writes as many values as its options make
 * (a truncated SVD: U, S, Vh, report), numbered after the earlier nodes'
 * and before the next node's, with the metadata of common/linalg-rules.c; a
 * split that moves axes adds the node's scratch value (the input in the
 * split's order) and the PERMUTE that writes it. The canonical form is the
 * same for the same graph and differs when any one linear-algebra option
 * differs (every truncation option, the split, the kind's flags, the
 * norm's p and keepdims, the offset). Refusals are typed and name the node:
 * a short perm, the wrong output count, mixed dtypes in solve, min_rank
 * above max_rank, an output id an earlier node already made.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/linalg.h"
#include "daemon/graph-plan.h"

#define MAX_NODES 8

/* A Prepare under construction and the storage its fields point into. */
typedef struct prep {
    Tenferro__Prepare p;
    Tenferro__GraphInput in[4], *in_ptrs[4];
    int64_t shapes[4][TF_MAX_RANK];
    Tenferro__Op ops[MAX_NODES], *op_ptrs[MAX_NODES];
    Tenferro__Linalg l[MAX_NODES];
    Tenferro__Truncation t[MAX_NODES];
    uint64_t op_in[MAX_NODES][2], op_out[MAX_NODES][TF__LINALG_MAX_OUTPUTS + 1];
    int32_t perm[MAX_NODES][TF_MAX_RANK];
    uint64_t outputs[8];
    uint64_t next_id;
} prep;

static void prep_init(prep *g) {
    memset(g, 0, sizeof *g);
    tenferro__prepare__init(&g->p);
    g->p.id = 1;
    g->p.inputs = g->in_ptrs;
    g->p.nodes = g->op_ptrs;
    g->p.outputs = g->outputs;
    g->next_id = 100;
}

/* Adds a graph input; returns its id. */
static uint64_t prep_input(prep *g, tf_dtype dt, int rank, const int64_t *shape) {
    const size_t i = g->p.n_inputs++;
    tenferro__graph_input__init(&g->in[i]);
    g->in[i].id = ++g->next_id;
    g->in[i].dtype = dt;
    memcpy(g->shapes[i], shape, sizeof(int64_t) * (size_t)rank);
    g->in[i].shape = g->shapes[i];
    g->in[i].n_shape = (size_t)rank;
    g->in_ptrs[i] = &g->in[i];
    return g->in[i].id;
}

/* Adds a node of a linear-algebra kind with n_out fresh outputs; the caller sets its options. */
static Tenferro__Op *prep_linalg(prep *g, uint32_t kind, uint64_t a, uint64_t b, int n_out) {
    const size_t n = g->p.n_nodes++;
    Tenferro__Op *op = &g->ops[n];
    tenferro__op__init(op);
    tenferro__linalg__init(&g->l[n]);
    tenferro__truncation__init(&g->t[n]);
    op->kind = kind;
    g->op_in[n][0] = a;
    g->op_in[n][1] = b;
    op->inputs = g->op_in[n];
    op->n_inputs = b ? 2 : 1;
    for (int o = 0; o < n_out; o++) g->op_out[n][o] = ++g->next_id;
    op->outputs = g->op_out[n];
    op->n_outputs = (size_t)n_out;
    op->linalg = &g->l[n];
    g->op_ptrs[n] = op;
    return op;
}

/* Adds an elementwise node of two inputs; returns its output id. */
static uint64_t prep_binary(prep *g, uint32_t kind, uint64_t a, uint64_t b) {
    const size_t n = g->p.n_nodes++;
    Tenferro__Op *op = &g->ops[n];
    tenferro__op__init(op);
    op->kind = kind;
    g->op_in[n][0] = a;
    g->op_in[n][1] = b;
    op->inputs = g->op_in[n];
    op->n_inputs = 2;
    op->output = ++g->next_id;
    g->op_ptrs[n] = op;
    return op->output;
}

static void prep_output(prep *g, uint64_t id) { g->outputs[g->p.n_outputs++] = id; }

/* Builds the plan, which must be accepted. */
static tfd_graph_plan *build_ok(const prep *g) {
    tfd_graph_plan *plan = NULL;
    int failed = -2;
    char msg[512] = "";
    tf_status st = tfd_graph_plan_build(&g->p, 4096, 0, &plan, &failed, msg, sizeof msg);
    ck_assert_msg(st == TF_OK, "the plan was refused: %s: %s", tf_status_name(st), msg);
    ck_assert_int_eq(failed, -1);
    return plan;
}

/* Builds the plan, which must be refused with want naming node `node`. */
static void build_refused(const prep *g, tf_status want, int node, const char *what) {
    tfd_graph_plan *plan = NULL;
    int failed = -2;
    char msg[512] = "";
    tf_status st = tfd_graph_plan_build(&g->p, 4096, 0, &plan, &failed, msg, sizeof msg);
    ck_assert_msg(st == want && failed == node && plan == NULL,
                  "%s: %s at node %d (%s), expected %s at node %d", what, tf_status_name(st),
                  failed, msg, tf_status_name(want), node);
    char needle[32];
    snprintf(needle, sizeof needle, "node %d", node);
    ck_assert_msg(strstr(msg, needle) != NULL, "%s: the message \"%s\" does not name %s", what,
                  msg, needle);
}

static void expect_shape(const tfd_graph_value *v, tf_dtype dt, int rank, const int64_t *shape) {
    ck_assert_int_eq(v->meta.dtype, dt);
    ck_assert_int_eq(v->meta.rank, rank);
    for (int a = 0; a < rank; a++) ck_assert_int_eq(v->meta.shape[a], shape[a]);
    ck_assert_uint_eq(v->bytes, tf__meta_bytes(&v->meta));
}

START_TEST(test_outputs_numbered) {
    prep g;
    prep_init(&g);
    const uint64_t a = prep_input(&g, TF_F64, 2, (int64_t[]){4, 6});
    Tenferro__Op *svd = prep_linalg(&g, TF__OP_SVD, a, 0, 4);
    svd->linalg->n_rows = 1;
    svd->linalg->compute_uv = 1;
    svd->linalg->truncate = 1;
    svd->linalg->truncation = &g.t[0];
    g.t[0].max_rank = 2;
    const uint64_t uu = prep_binary(&g, TF__OP_MUL, svd->outputs[0], svd->outputs[0]);
    prep_output(&g, uu);
    prep_output(&g, svd->outputs[3]);
    tfd_graph_plan *p = build_ok(&g);
    ck_assert_int_eq(p->n_values, 1 + 4 + 1);
    ck_assert_int_eq(p->n_linalg, 1);
    const tfd_graph_node *n0 = &p->nodes[0], *n1 = &p->nodes[1];
    ck_assert_ptr_nonnull(n0->linalg);
    ck_assert_ptr_null(n1->linalg);
    ck_assert_int_eq(n0->n_out, 4);
    for (int o = 0; o < 4; o++) {
        ck_assert_int_eq(n0->out_value[o], 1 + o);
        ck_assert_int_eq(p->values[1 + o].node, 0);
        ck_assert_int_eq(p->values[1 + o].scratch, 0);
    }
    ck_assert_int_eq(n0->scratch_value, -1);
    expect_shape(&p->values[1], TF_F64, 2, (int64_t[]){4, 2});
    expect_shape(&p->values[2], TF_F64, 1, (int64_t[]){2});
    expect_shape(&p->values[3], TF_F64, 2, (int64_t[]){2, 6});
    expect_shape(&p->values[4], TF_F64, 1, (int64_t[]){TF__REPORT_ENTRIES});
    ck_assert_int_eq(n1->n_out, 1);
    ck_assert_int_eq(n1->out_value[0], 5);
    ck_assert_int_eq(n1->in_value[0], 1);
    ck_assert_int_eq(p->outputs[0], 5);
    ck_assert_int_eq(p->outputs[1], 4);
    size_t bytes = 0;
    for (int v = 1; v < p->n_values; v++) bytes += p->values[v].bytes;
    ck_assert_uint_eq(p->node_bytes, bytes);
    const tfd_linalg_op *lo = &n0->linalg->op;
    ck_assert_int_eq(lo->n_outputs, 4);
    ck_assert_int_eq(lo->node, 0);
    ck_assert_int_eq(lo->desc.rank, 2);
    ck_assert_int_eq(lo->out[0].shape[1], 2);
    tfd_graph_plan_free(p);
}
END_TEST

START_TEST(test_permuted_split_scratch) {
    prep g;
    prep_init(&g);
    const uint64_t a = prep_input(&g, TF_C128, 3, (int64_t[]){2, 3, 4});
    Tenferro__Op *qr = prep_linalg(&g, TF__OP_QR, a, 0, 2);
    g.perm[0][0] = 2;
    g.perm[0][1] = 0;
    g.perm[0][2] = 1;
    qr->linalg->perm = g.perm[0];
    qr->linalg->n_perm = 3;
    qr->linalg->n_batch = 0;
    qr->linalg->n_rows = 1;
    qr->linalg->compute_uv = 1;
    prep_output(&g, qr->outputs[1]);
    tfd_graph_plan *p = build_ok(&g);
    const tfd_graph_node *n0 = &p->nodes[0];
    ck_assert_int_eq(p->n_values, 1 + 2 + 1);
    ck_assert_int_eq(n0->scratch_value, 3);
    ck_assert_int_eq(p->values[3].scratch, 1);
    expect_shape(&p->values[3], TF_C128, 3, (int64_t[]){4, 2, 3});
    /* Q [4, 4] and R [4, 6]: rows (4), columns (2, 3). */
    expect_shape(&p->values[1], TF_C128, 2, (int64_t[]){4, 4});
    expect_shape(&p->values[2], TF_C128, 3, (int64_t[]){4, 2, 3});
    const tfd_op *pm = &n0->linalg->permute;
    ck_assert_int_eq(pm->kind, TF__OP_PERMUTE);
    ck_assert_int_eq(pm->n_params, 3);
    ck_assert(pm->params[0] == 2 && pm->params[1] == 0 && pm->params[2] == 1);
    ck_assert_int_eq(pm->out.shape[0], 4);
    ck_assert_int_eq(n0->linalg->op.in[0].shape[0], 4);
    tfd_graph_plan_free(p);

    /* An identity permutation needs no copy. */
    g.perm[0][0] = 0;
    g.perm[0][1] = 1;
    g.perm[0][2] = 2;
    p = build_ok(&g);
    ck_assert_int_eq(p->nodes[0].scratch_value, -1);
    ck_assert_int_eq(p->n_values, 3);
    tfd_graph_plan_free(p);
}
END_TEST

/* The variants of the key test: one option changed from a base node. */
enum { V_BASE, V_MAX_RANK, V_MIN_RANK, V_CUTOFF, V_REL_CUTOFF, V_DW, V_REL_DW, V_DEGENERATE,
       V_ABSORB, V_RENORMALIZE, V_PERM, V_EIGH_UPPER, V_NORM_P, V_KEEPDIMS, V_OFFSET, V_COUNT };

/* A graph of four linear-algebra nodes over [4, 4] with variant v applied. */
static void key_graph(prep *g, int v) {
    prep_init(g);
    const uint64_t a = prep_input(g, TF_F64, 2, (int64_t[]){4, 4});
    Tenferro__Op *svd = prep_linalg(g, TF__OP_SVD, a, 0, 4);
    Tenferro__Linalg *l = svd->linalg;
    l->n_rows = 1;
    l->compute_uv = 1;
    l->truncate = 1;
    l->truncation = &g->t[0];
    Tenferro__Truncation *t = &g->t[0];
    t->max_rank = 3;
    t->cutoff = 0.1;
    if (v == V_MAX_RANK) t->max_rank = 2;
    if (v == V_MIN_RANK) t->min_rank = 1;
    if (v == V_CUTOFF) t->cutoff = 0.2;
    if (v == V_REL_CUTOFF) t->rel_cutoff = 0.01;
    if (v == V_DW) t->discarded_weight = 0.5;
    if (v == V_REL_DW) t->rel_discarded_weight = 0.5;
    if (v == V_DEGENERATE) t->keep_degenerate = 1;
    if (v == V_ABSORB) t->absorb = TENFERRO__ABSORB__ABSORB_LEFT;
    if (v == V_RENORMALIZE) t->renormalize = 1;
    if (v == V_PERM) {
        g->perm[0][0] = 1;
        g->perm[0][1] = 0;
        l->perm = g->perm[0];
        l->n_perm = 2;
    }
    Tenferro__Op *eigh = prep_linalg(g, TF__OP_EIGH, a, 0, 1);
    eigh->linalg->n_rows = 1;
    eigh->linalg->upper = v == V_EIGH_UPPER;
    Tenferro__Op *norm = prep_linalg(g, TF__OP_NORM, a, 0, 1);
    g->perm[2][0] = 0;
    g->perm[2][1] = 1;
    norm->linalg->perm = g->perm[2];
    norm->linalg->n_perm = 2;
    norm->linalg->n_batch = 1;
    norm->linalg->norm_kind = TENFERRO__NORM_KIND__NORM_VECTOR;
    norm->linalg->norm_p = v == V_NORM_P ? 3 : 2;
    norm->linalg->keepdims = v == V_KEEPDIMS;
    Tenferro__Op *trace = prep_linalg(g, TF__OP_TRACE, a, 0, 1);
    trace->linalg->n_rows = 1;
    trace->linalg->offset = v == V_OFFSET ? 1 : 0;
    prep_output(g, svd->outputs[0]);
    prep_output(g, eigh->outputs[0]);
    prep_output(g, norm->outputs[0]);
    prep_output(g, trace->outputs[0]);
}

START_TEST(test_key_covers_every_option) {
    prep g;
    key_graph(&g, V_BASE);
    tfd_graph_plan *base = build_ok(&g), *again = build_ok(&g);
    ck_assert(tfd_graph_plan_same(base, again));
    /* The same graph with other ids (another client's) has the same form. */
    g.next_id = 5000;
    key_graph(&g, V_BASE);
    for (size_t i = 0; i < g.p.n_inputs; i++) g.in[i].id += 7000;
    for (size_t n = 0; n < g.p.n_nodes; n++) {
        g.op_in[n][0] += 7000;
        for (size_t o = 0; o < g.ops[n].n_outputs; o++) g.op_out[n][o] += 7000;
    }
    for (size_t o = 0; o < g.p.n_outputs; o++) g.outputs[o] += 7000;
    tfd_graph_plan *renamed = build_ok(&g);
    ck_assert(tfd_graph_plan_same(base, renamed));
    tfd_graph_plan_free(renamed);
    for (int v = V_BASE + 1; v < V_COUNT; v++) {
        key_graph(&g, v);
        tfd_graph_plan *other = build_ok(&g);
        ck_assert_msg(!tfd_graph_plan_same(base, other), "variant %d has the base's form", v);
        tfd_graph_plan_free(other);
    }
    tfd_graph_plan_free(base);
    tfd_graph_plan_free(again);
}
END_TEST

/* The ids of the refusal graphs' inputs and node 0's output. */
typedef struct base_ids {
    uint64_t a, b32, sq, first;
} base_ids;

/* Inputs f64 [2, 3, 4], f32 [3, 2], f64 [3, 3]; node 0 a good add; its output the graph's. */
static base_ids refusal_base(prep *g) {
    base_ids ids;
    prep_init(g);
    ids.a = prep_input(g, TF_F64, 3, (int64_t[]){2, 3, 4});
    ids.b32 = prep_input(g, TF_F32, 2, (int64_t[]){3, 2});
    ids.sq = prep_input(g, TF_F64, 2, (int64_t[]){3, 3});
    ids.first = prep_binary(g, TF__OP_ADD, ids.sq, ids.sq);
    prep_output(g, ids.first);
    return ids;
}

START_TEST(test_refusals_name_the_node) {
    prep g;
    base_ids ids = refusal_base(&g);
    Tenferro__Op *op = prep_linalg(&g, TF__OP_SVD, ids.a, 0, 3);
    g.perm[1][0] = 1;
    g.perm[1][1] = 0;
    op->linalg->perm = g.perm[1];
    op->linalg->n_perm = 2;
    op->linalg->n_rows = 1;
    op->linalg->compute_uv = 1;
    build_refused(&g, TF_ERR_AXIS, 1, "a perm of 2 entries for a rank-3 input");

    ids = refusal_base(&g);
    op = prep_linalg(&g, TF__OP_SVD, ids.a, 0, 2);
    op->linalg->n_batch = 1;
    op->linalg->n_rows = 1;
    op->linalg->compute_uv = 1;
    build_refused(&g, TF_ERR_INVALID_ARGUMENT, 1, "svd naming 2 outputs of 3");

    ids = refusal_base(&g);
    op = prep_linalg(&g, TF__OP_SOLVE, ids.sq, ids.b32, 1);
    op->linalg->n_rows = 1;
    build_refused(&g, TF_ERR_DTYPE, 1, "solve of f64 A and f32 B");

    ids = refusal_base(&g);
    op = prep_linalg(&g, TF__OP_SVD, ids.sq, 0, 4);
    op->linalg->n_rows = 1;
    op->linalg->compute_uv = 1;
    op->linalg->truncate = 1;
    op->linalg->truncation = &g.t[1];
    g.t[1].max_rank = 1;
    g.t[1].min_rank = 2;
    build_refused(&g, TF_ERR_INVALID_ARGUMENT, 1, "min_rank above max_rank");

    ids = refusal_base(&g);
    op = prep_linalg(&g, TF__OP_QR, ids.sq, 0, 2);
    op->linalg->n_rows = 1;
    op->linalg->compute_uv = 1;
    g.op_out[1][1] = ids.first;
    build_refused(&g, TF_ERR_INVALID_ARGUMENT, 1, "qr's R under node 0's id");

    ids = refusal_base(&g);
    op = prep_linalg(&g, TF__OP_INV, ids.sq, 0, 1);
    op->linalg = NULL;
    build_refused(&g, TF_ERR_INVALID_ARGUMENT, 1, "inv without its descriptor");
}
END_TEST

static Suite *graph_plan_suite(void) {
    Suite *s = suite_create("graph-plan");
    TCase *tc = tcase_create("graph-plan");
    tcase_add_test(tc, test_outputs_numbered);
    tcase_add_test(tc, test_permuted_split_scratch);
    tcase_add_test(tc, test_key_covers_every_option);
    tcase_add_test(tc, test_refusals_name_the_node);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(graph_plan_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
