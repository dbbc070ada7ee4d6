/*
 * Graphs recorded on a view, prepared by the daemon, and their runs
 * (include/tenferro/graph.h, docs/prepared.md).
 *
 * A recording view carries its graph (tf_view.graph): the view's operations
 * run the same shape rules and land in the graph's node list instead of the
 * client's queue, over symbolic ids that are the graph's own (inputs and
 * results numbered from 1 in the order made). tf_prepare sends the inputs,
 * nodes and outputs in one Prepare frame under an id unique in the process,
 * so a prepared graph of one connection is never mistaken for another's.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

struct tf_graph {
    tf_client *client;
    tf_view view;
    tf__id_table handles; /* tf__handle of every value: inputs and recorded results */
    tf__queued_op *nodes;
    size_t n_nodes, cap;
    uint64_t next_id;
    int n_inputs, n_outputs;
    uint64_t inputs[TF_GRAPH_MAX_INPUTS];
    uint64_t outputs[TF_GRAPH_MAX_OUTPUTS];
};

/* Ids of prepared graphs, unique in the process. */
static atomic_uint_fast64_t next_prepared_id;

tf_status tf_graph_new(tf_client *c, tf_graph **out) {
    if (!c || !out) return TF_ERR_INVALID_ARGUMENT;
    tf_graph *g = calloc(1, sizeof *g);
    if (!g) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory for a graph");
    g->client = c;
    g->view.client = c;
    g->view.graph = g;
    tf__id_table_init(&g->handles, sizeof(tf__handle));
    *out = g;
    return tf__ok(c);
}

void tf_graph_free(tf_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_nodes; i++) tf__queued_op_release(&g->nodes[i]);
    tf__id_table_free(&g->handles);
    free(g->nodes);
    free(g);
}

tf_view *tf_graph_view(tf_graph *g) { return g ? &g->view : NULL; }

int tf_graph_node_count(const tf_graph *g) { return g ? (int)g->n_nodes : 0; }

tf_status tf_graph_tensor_info(const tf_graph *g, tf_tensor t, tf_dtype *dtype, int *rank,
                               int64_t shape[TF_MAX_RANK]) {
    if (!g) return TF_ERR_INVALID_ARGUMENT;
    const tf__handle *h = tf__id_table_find(&g->handles, t);
    if (!h)
        return tf__fail(g->client, TF_ERR_UNKNOWN_HANDLE,
                        "tensor %llu is not a value of this graph (an input or a recorded result)",
                        (unsigned long long)t);
    if (dtype) *dtype = h->meta.dtype;
    if (rank) *rank = h->meta.rank;
    if (shape) memcpy(shape, h->meta.shape, sizeof(int64_t) * TF_MAX_RANK);
    return TF_OK;
}

tf__queued_op *tf__graph_slot(tf_graph *g) { return tf__ops_slot(&g->nodes, g->n_nodes, &g->cap, 64); }

void tf__graph_commit(tf_graph *g) { g->n_nodes++; }
uint64_t tf__graph_next_id(tf_graph *g) { return ++g->next_id; }
tf__id_table *tf__graph_handles(tf_graph *g) { return &g->handles; }

tf__queued_op *tf__graph_ops(tf_graph *g, size_t *n) {
    *n = g->n_nodes;
    return g->nodes;
}

void tf__graph_truncate(tf_graph *g, size_t n) { g->n_nodes = n; }

tf_status tf_graph_input(tf_graph *g, tf_dtype dtype, int rank, const int64_t *shape,
                         tf_tensor *out) {
    if (!g || !out) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = g->client;
    if (g->n_inputs == TF_GRAPH_MAX_INPUTS)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "a graph takes at most %d inputs",
                        TF_GRAPH_MAX_INPUTS);
    if (rank < 0 || rank > TF_MAX_RANK || (rank > 0 && !shape))
        return tf__fail(c, TF_ERR_BAD_SHAPE, "graph input: rank %d is outside 0..%d", rank,
                        TF_MAX_RANK);
    tf_status st = tf__check_new_meta(dtype, rank, shape, c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    tf__handle h = {.id = g->next_id + 1};
    h.meta.dtype = dtype;
    h.meta.rank = rank;
    for (int a = 0; a < rank; a++) h.meta.shape[a] = shape[a];
    if (tf__id_table_insert(&g->handles, &h) != 0)
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory recording a graph input");
    g->next_id++;
    g->inputs[g->n_inputs++] = h.id;
    *out = h.id;
    return tf__ok(c);
}

tf_status tf_graph_output(tf_graph *g, tf_tensor t) {
    if (!g) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = g->client;
    if (!tf__id_table_find(&g->handles, t))
        return tf__fail(c, TF_ERR_UNKNOWN_HANDLE,
                        "tensor %llu is not a value of this graph (an input or a recorded result)",
                        (unsigned long long)t);
    if (g->n_outputs == TF_GRAPH_MAX_OUTPUTS)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "a graph gives at most %d outputs",
                        TF_GRAPH_MAX_OUTPUTS);
    g->outputs[g->n_outputs++] = t;
    return tf__ok(c);
}

/* The wire form of the graph's inputs. */
static void encode_inputs(const tf_graph *g, Tenferro__GraphInput *in, Tenferro__GraphInput **ptrs,
                          int64_t (*shapes)[TF_MAX_RANK]) {
    for (int i = 0; i < g->n_inputs; i++) {
        const tf__handle *h = tf__id_table_find(&g->handles, g->inputs[i]);
        tenferro__graph_input__init(&in[i]);
        in[i].id = g->inputs[i];
        in[i].dtype = (uint32_t)h->meta.dtype;
        in[i].n_shape = (size_t)h->meta.rank;
        memcpy(shapes[i], h->meta.shape, sizeof shapes[i]);
        in[i].shape = shapes[i];
        ptrs[i] = &in[i];
    }
}

/* Keeps what runs of the new prepared graph are checked against: inputs' and outputs' metadata. */
static tf_status remember(tf_client *c, const tf_graph *g, uint64_t id) {
    tf__prepared_rec rec = {.id = id, .n_inputs = g->n_inputs, .n_outputs = g->n_outputs};
    rec.meta = malloc(sizeof *rec.meta * (size_t)(g->n_inputs + g->n_outputs + 1));
    if (!rec.meta) return TF_ERR_NO_MEMORY;
    for (int i = 0; i < g->n_inputs; i++)
        rec.meta[i] = ((const tf__handle *)tf__id_table_find(&g->handles, g->inputs[i]))->meta;
    for (int o = 0; o < g->n_outputs; o++)
        rec.meta[g->n_inputs + o] =
            ((const tf__handle *)tf__id_table_find(&g->handles, g->outputs[o]))->meta;
    if (tf__id_table_insert(&c->prepared, &rec) != 0) {
        free(rec.meta);
        return TF_ERR_NO_MEMORY;
    }
    return TF_OK;
}

/* Tells the daemon to forget prepared graph id (no answer). */
static tf_status send_prepared_free(tf_client *c, uint64_t id) {
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    Tenferro__PreparedFree pf = TENFERRO__PREPARED_FREE__INIT;
    pf.id = id;
    req.body_case = TENFERRO__FRAME__BODY_PREPARED_FREE;
    req.prepared_free = &pf;
    return tf__send(c, &req);
}

tf_status tf_prepare(tf_client *c, const tf_graph *g, tf_prepared *out) {
    if (!c || !g || !out) return TF_ERR_INVALID_ARGUMENT;
    *out = 0;
    if (g->client != c)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "the graph was recorded for another client");
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (g->n_nodes == 0 || g->n_outputs == 0)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "a graph needs at least one node and one output (%zu nodes, %d outputs)",
                        g->n_nodes, g->n_outputs);
    Tenferro__GraphInput in[TF_GRAPH_MAX_INPUTS], *in_ptrs[TF_GRAPH_MAX_INPUTS];
    int64_t shapes[TF_GRAPH_MAX_INPUTS][TF_MAX_RANK];
    encode_inputs(g, in, in_ptrs, shapes);
    Tenferro__Op *ops = calloc(g->n_nodes, sizeof *ops);
    Tenferro__Op **op_ptrs = calloc(g->n_nodes, sizeof *op_ptrs);
    if (!ops || !op_ptrs) {
        free(ops);
        free(op_ptrs);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory encoding a graph");
    }
    tf__encode_ops(g->nodes, g->n_nodes, ops, op_ptrs);
    const uint64_t id = atomic_fetch_add(&next_prepared_id, 1) + 1;
    Tenferro__Prepare p = TENFERRO__PREPARE__INIT;
    p.id = id;
    p.n_inputs = (size_t)g->n_inputs;
    p.inputs = in_ptrs;
    p.n_nodes = g->n_nodes;
    p.nodes = op_ptrs;
    p.n_outputs = (size_t)g->n_outputs;
    p.outputs = (uint64_t *)g->outputs;
    Tenferro__Frame req = TENFERRO__FRAME__INIT;
    req.body_case = TENFERRO__FRAME__BODY_PREPARE;
    req.prepare = &p;
    c->failed_index = -1;
    Tenferro__Frame *reply = NULL;
    tf_status st = tf__call(c, &req, &reply);
    free(ops);
    free(op_ptrs);
    if (st != TF_OK) return st;
    if (reply->body_case != TENFERRO__FRAME__BODY_RESULT) {
        tf__frame_free(reply);
        return tf__fail(c, TF_ERR_PROTOCOL, "unexpected answer to Prepare");
    }
    /* A refusal about one node names it: tf_client_failed_index. */
    if (reply->result->has_failed_index) c->failed_index = reply->result->failed_index;
    st = tf__result_status(c, reply->result);
    tf__frame_free(reply);
    if (st != TF_OK) return st;
    if (remember(c, g, id) != TF_OK) {
        (void)send_prepared_free(c, id);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory recording a prepared graph");
    }
    *out = id;
    return tf__ok(c);
}

/* The client's record of p, or a typed failure. */
static tf_status lookup_prepared(tf_client *c, tf_prepared p, tf__prepared_rec **out) {
    *out = tf__id_table_find(&c->prepared, p);
    if (*out) return TF_OK;
    return tf__fail(c, TF_ERR_UNKNOWN_HANDLE,
                    "prepared graph %llu is not live on this client (never prepared by it, "
                    "prepared by another client or for another device, or freed)",
                    (unsigned long long)p);
}

tf_status tf_prepared_info(tf_client *c, tf_prepared p, int *n_inputs, int *n_outputs) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    tf__prepared_rec *r;
    tf_status st = lookup_prepared(c, p, &r);
    if (st != TF_OK) return st;
    if (n_inputs) *n_inputs = r->n_inputs;
    if (n_outputs) *n_outputs = r->n_outputs;
    return tf__ok(c);
}

tf_status tf_prepared_output(tf_client *c, tf_prepared p, int i, tf_dtype *dtype, int *rank,
                             int64_t *shape) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    tf__prepared_rec *r;
    tf_status st = lookup_prepared(c, p, &r);
    if (st != TF_OK) return st;
    if (i < 0 || i >= r->n_outputs)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "prepared graph %llu has %d outputs, not %d",
                        (unsigned long long)p, r->n_outputs, i + 1);
    const tf__meta *m = &r->meta[r->n_inputs + i];
    if (dtype) *dtype = m->dtype;
    if (rank) *rank = m->rank;
    if (shape) memcpy(shape, m->shape, sizeof(int64_t) * (size_t)m->rank);
    return tf__ok(c);
}

tf_status tf_prepared_free(tf_client *c, tf_prepared p) {
    if (!c) return TF_ERR_INVALID_ARGUMENT;
    tf__prepared_rec *r;
    tf_status st = lookup_prepared(c, p, &r);
    if (st != TF_OK) return st;
    for (size_t i = 0; i < c->n_queued; i++)
        if (c->queue[i].kind == TF__OP_RUN_PREPARED && c->queue[i].prepared == p)
            return tf__fail(c, TF_ERR_BUSY,
                            "prepared graph %llu has a run queued and not submitted: submit or "
                            "synchronize first",
                            (unsigned long long)p);
    free(r->meta);
    tf__id_table_remove(&c->prepared, p, NULL);
    if (c->broken) return tf__ok(c);
    st = send_prepared_free(c, p);
    return st == TF_OK ? tf__ok(c) : st;
}

/* Checks a run's tensors against the prepared graph's inputs, naming the first that differs. */
static tf_status check_run(tf_view *v, const tf__prepared_rec *r, int n_inputs,
                           const tf_tensor *inputs, int n_outputs, const tf_tensor *outputs) {
    tf_client *c = v->client;
    if (n_inputs != r->n_inputs || n_outputs != r->n_outputs || (n_inputs && !inputs) || !outputs)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "run_prepared: prepared graph %llu takes %d inputs and gives %d outputs; "
                        "the call passes %d and %d",
                        (unsigned long long)r->id, r->n_inputs, r->n_outputs, n_inputs, n_outputs);
    for (int i = 0; i < n_inputs; i++) {
        tf__handle *h;
        tf_status st = tf__view_lookup(v, inputs[i], &h);
        if (st != TF_OK) return st;
        const tf__meta *want = &r->meta[i];
        if (!tf__meta_same(&h->meta, want)) {
            char got_s[128], want_s[128];
            tf__meta_describe(&h->meta, got_s, sizeof got_s);
            tf__meta_describe(want, want_s, sizeof want_s);
            return tf__fail(c, h->meta.dtype != want->dtype ? TF_ERR_DTYPE : TF_ERR_SHAPE,
                            "run_prepared input %d: the graph was prepared for %s, tensor %llu is %s",
                            i, want_s, (unsigned long long)inputs[i], got_s);
        }
    }
    return TF_OK;
}

tf_status tf_view_run_prepared(tf_view *v, tf_prepared p, int n_inputs, const tf_tensor *inputs,
                               int n_outputs, tf_tensor *outputs) {
    tf_status st = tf__view_check(v);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    if (v->graph)
        return tf__fail(c, TF_ERR_INVALID_ARGUMENT,
                        "a prepared graph runs in a session; it cannot be recorded into another");
    tf__prepared_rec *r;
    if ((st = lookup_prepared(c, p, &r)) != TF_OK) return st;
    if ((st = check_run(v, r, n_inputs, inputs, n_outputs, outputs)) != TF_OK) return st;
    uint64_t *io = malloc(sizeof *io * (size_t)(n_inputs + n_outputs + 1));
    tf__queued_op *q = tf__view_slot(v);
    if (!io || !q) {
        free(io);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing run_prepared");
    }
    int made = 0;
    for (; made < n_outputs; made++) {
        tf__handle h = {.meta = r->meta[n_inputs + made], .pending = 1};
        h.id = tf__view_next_id(v);
        if (tf__id_table_insert(&c->handles, &h) != 0) break;
        io[n_inputs + made] = h.id;
    }
    if (made < n_outputs) {
        for (int o = 0; o < made; o++) tf__id_table_remove(&c->handles, io[n_inputs + o], NULL);
        free(io);
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing run_prepared");
    }
    for (int i = 0; i < n_inputs; i++) io[i] = inputs[i];
    memset(q, 0, sizeof *q);
    q->kind = TF__OP_RUN_PREPARED;
    q->prepared = p;
    q->n_run_inputs = n_inputs;
    q->n_run_outputs = n_outputs;
    q->run_io = io;
    tf__view_commit(v);
    for (int o = 0; o < n_outputs; o++) outputs[o] = io[n_inputs + o];
    return tf__ok(c);
}

void tf__queued_op_release(tf__queued_op *q) {
    if (!tf__queued_names_io(q)) return;
    free(q->run_io);
    q->run_io = NULL;
    free(q->linalg);
    q->linalg = NULL;
}

/* One record's memory, at disconnect. */
static void free_rec(void *record, void *arg) {
    (void)arg;
    free(((tf__prepared_rec *)record)->meta);
}

void tf__prepared_forget_all(tf_client *c) {
    tf__id_table_each(&c->prepared, free_rec, NULL);
    tf__id_table_free(&c->prepared);
}
