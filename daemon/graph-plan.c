/* Plans of prepared graphs: the checks of a Prepare and its canonical form (graph-plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/id-table.h"
#include "common/linalg.h"
#include "daemon/graph-plan.h"
#include "daemon/op-decode.h"

/* A graph id and the value it names. */
typedef struct id_value {
    uint64_t id;
    int value;
} id_value;

/* A growable byte string: the canonical form being written. */
typedef struct bytes_out {
    uint8_t *p;
    size_t len, cap;
    int failed;
} bytes_out;

/* Appends n bytes (records a failure instead when out of memory). */
static void put(bytes_out *b, const void *src, size_t n) {
    if (b->failed) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_i64(bytes_out *b, int64_t v) { put(b, &v, sizeof v); }

/* FNV-1a over the bytes from a given offset basis. */
static uint64_t fnv1a(const uint8_t *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void put_f64(bytes_out *b, double v) { put(b, &v, sizeof v); }

/*
 * Writes a linear-algebra node's descriptor, every option by value (the
 * split, the kind's flags, the truncation, the norm, the offset), field by
 * field so that no padding byte enters the form.
 */
static void put_linalg(bytes_out *b, const tfd_graph_linalg *gl) {
    const tf__linalg *l = &gl->op.desc;
    put_i64(b, l->has_perm);
    if (l->has_perm)
        for (int i = 0; i < gl->op.in[0].rank; i++) put_i64(b, l->perm[i]);
    put_i64(b, l->n_batch);
    put_i64(b, l->n_rows);
    put_i64(b, l->full);
    put_i64(b, l->compute_uv);
    put_i64(b, l->upper);
    put_i64(b, l->truncate);
    const tf__truncation *t = &l->trunc;
    put_i64(b, t->max_rank);
    put_i64(b, t->min_rank);
    put_f64(b, t->cutoff);
    put_f64(b, t->rel_cutoff);
    put_f64(b, t->discarded_weight);
    put_f64(b, t->rel_discarded_weight);
    put_i64(b, t->keep_degenerate);
    put_i64(b, t->absorb);
    put_i64(b, t->renormalize);
    put_i64(b, l->norm_kind);
    put_f64(b, l->norm_p);
    put_i64(b, l->keepdims);
    put_i64(b, l->offset);
}

/* Writes everything a node computes with, by value: equal nodes give equal bytes. */
static void put_node(bytes_out *b, const tfd_graph_node *n) {
    const tfd_op *d = &n->op;
    put_i64(b, d->kind);
    put_i64(b, d->n_inputs);
    for (int i = 0; i < d->n_inputs; i++) put_i64(b, n->in_value[i]);
    put_i64(b, n->n_out);
    for (int o = 0; o < n->n_out; o++) put_i64(b, n->out_value[o]);
    put_i64(b, n->scratch_value);
    if (n->linalg) {
        put_linalg(b, n->linalg);
        return;
    }
    put_i64(b, d->n_params);
    for (int i = 0; i < d->n_params; i++) put_i64(b, d->params[i]);
    put_i64(b, d->flags);
    put(b, &d->alpha, sizeof d->alpha);
    put(b, &d->beta, sizeof d->beta);
    if (d->kind == TF__OP_CONTRACT) {
        const tf__contraction *c = &d->contract;
        put_i64(b, c->n_inputs);
        for (int i = 0; i < 2; i++) {
            put_i64(b, c->rank[i]);
            put(b, c->labels[i], (size_t)c->rank[i]);
            put_i64(b, c->conj[i]);
        }
        put_i64(b, c->out_rank);
        put(b, c->out, (size_t)c->out_rank);
    }
    if (d->kind == TF__OP_FFT) {
        const tf__fft *f = &d->fft;
        put_i64(b, f->kind);
        put_i64(b, f->inverse);
        put_i64(b, f->norm);
        put_i64(b, f->n_axes);
        for (int i = 0; i < f->n_axes; i++) put_i64(b, f->axes[i]);
        put_i64(b, f->last_length);
    }
}

/* Writes the plan's canonical form and its hashes. */
static int make_key(tfd_graph_plan *g) {
    bytes_out b = {0};
    put_i64(&b, g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) {
        const tf__meta *m = &g->values[i].meta;
        put_i64(&b, m->dtype);
        put_i64(&b, m->rank);
        for (int a = 0; a < m->rank; a++) put_i64(&b, m->shape[a]);
    }
    put_i64(&b, g->n_nodes);
    for (int n = 0; n < g->n_nodes; n++) put_node(&b, &g->nodes[n]);
    put_i64(&b, g->n_outputs);
    for (int o = 0; o < g->n_outputs; o++) put_i64(&b, g->outputs[o]);
    if (b.failed) {
        free(b.p);
        return -1;
    }
    g->key = b.p;
    g->key_len = b.len;
    g->key_hash[0] = fnv1a(b.p, b.len, 0xcbf29ce484222325ull);
    g->key_hash[1] = fnv1a(b.p, b.len, 0x84222325cbf29ce4ull ^ (uint64_t)b.len);
    return 0;
}

/* Records a graph id for a value; a zero or repeated id is refused. */
static tf_status name_value(tf__id_table *ids, uint64_t id, int value, const char *what, char *msg,
                            size_t len) {
    if (id == 0 || tf__id_table_find(ids, id)) {
        snprintf(msg, len, "%s has id %llu, which is zero or already names another value", what,
                 (unsigned long long)id);
        return TF_ERR_INVALID_ARGUMENT;
    }
    id_value rec = {.id = id, .value = value};
    if (tf__id_table_insert(ids, &rec) != 0) {
        snprintf(msg, len, "out of host memory preparing a graph");
        return TF_ERR_NO_MEMORY;
    }
    return TF_OK;
}

/* A kernel's view of a tensor of metadata m (no data pointer: bound per run). */
static void view_set(tfd_tensor_view *view, const tf__meta *m) {
    view->dtype = m->dtype;
    view->rank = m->rank;
    memcpy(view->shape, m->shape, sizeof view->shape);
    view->numel = tf__meta_numel(m);
}

/*
 * A new value of metadata m written by node n (its outputs in order, then
 * its scratch): the next number. The caller sized the array for every value
 * the Prepare can make (max_values), so this never grows it.
 */
static int new_value(tfd_graph_plan *g, int n, const tf__meta *m, int scratch) {
    const int value = g->n_values++;
    tfd_graph_value *v = &g->values[value];
    v->meta = *m;
    v->bytes = tf__meta_bytes(m);
    v->node = n;
    v->scratch = scratch;
    return value;
}

/* A new output value of node n under graph id `id` (fresh and nonzero), or a refusal. */
static tf_status new_output(tfd_graph_plan *g, int n, int o, uint64_t id, const tf__meta *m,
                            tf__id_table *ids, char *msg, size_t len) {
    char what[48];
    if (o == 0 && g->nodes[n].linalg == NULL)
        snprintf(what, sizeof what, "node %d's output", n);
    else
        snprintf(what, sizeof what, "node %d's output %d", n, o);
    const int value = new_value(g, n, m, 0);
    tf_status st = name_value(ids, id, value, what, msg, len);
    if (st != TF_OK) return st;
    g->nodes[n].out_value[o] = value;
    g->nodes[n].n_out = o + 1;
    return TF_OK;
}

/*
 * Node n's inputs: each must name a graph input or an earlier node's output;
 * their values go to the node, their metadata to in[].
 */
static tf_status node_inputs(tfd_graph_plan *g, const Tenferro__Op *op, int n, int n_inputs,
                             const tf__id_table *ids, tf__meta *in, char *msg, size_t len) {
    tfd_graph_node *node = &g->nodes[n];
    for (int i = 0; i < n_inputs; i++) {
        const id_value *v = tf__id_table_find(ids, op->inputs[i]);
        if (!v) {
            snprintf(msg, len,
                     "node %d (%s) input %d names %llu, which is neither a graph input nor the "
                     "output of an earlier node (a dangling reference, or a cycle)",
                     n, tf__op_name(node->op.kind), i, (unsigned long long)op->inputs[i]);
            return TF_ERR_INVALID_ARGUMENT;
        }
        node->in_value[i] = v->value;
        in[i] = g->values[v->value].meta;
    }
    return TF_OK;
}

/*
 * Node n of a linear-algebra kind (OP_SVD .. OP_DIAGONAL): the descriptor,
 * the inputs, the rules of common/linalg-rules.c on their metadata, as many
 * fresh output ids in Op.outputs as the options make, and the scratch value
 * of a split that moves axes (graph-plan.h): the checks of a batch's
 * prepare_linalg, on the recorded metadata instead of live tensors.
 */
static tf_status plan_linalg(tfd_graph_plan *g, const Tenferro__Op *op, int n, tf__id_table *ids,
                             char *msg, size_t len) {
    tfd_graph_node *node = &g->nodes[n];
    const tf__op_kind kind = (tf__op_kind)op->kind;
    const char *name = tf__op_name(kind);
    node->op.kind = kind;
    node->linalg = calloc(1, sizeof *node->linalg);
    if (!node->linalg) {
        snprintf(msg, len, "out of host memory preparing a graph");
        return TF_ERR_NO_MEMORY;
    }
    tfd_linalg_op *lo = &node->linalg->op;
    char why[400];
    tf_status st = tfd_linalg_decode(op, &lo->desc, why, sizeof why);
    if (st != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    lo->kind = kind;
    lo->n_inputs = (int)op->n_inputs;
    lo->node = n;
    node->op.n_inputs = lo->n_inputs;
    tf__meta in[2], out[TF__LINALG_MAX_OUTPUTS];
    if ((st = node_inputs(g, op, n, lo->n_inputs, ids, in, msg, len)) != TF_OK) return st;
    for (int i = 0; i < lo->n_inputs; i++) view_set(&lo->in[i], &in[i]);
    /* A perm names every axis of the input or is absent: the descriptor cannot tell a short one. */
    if (op->linalg->n_perm && op->linalg->n_perm != (size_t)in[0].rank) {
        snprintf(msg, len, "node %d: %s: perm has %zu entries for a rank-%d input", n, name,
                 op->linalg->n_perm, in[0].rank);
        return TF_ERR_AXIS;
    }
    if ((st = tf__infer_linalg(kind, &lo->desc, in, lo->n_inputs, out, why, sizeof why)) != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    if (op->n_outputs != (size_t)lo->desc.n_outputs) {
        snprintf(msg, len, "node %d: %s: these options make %d outputs; the node names %zu", n,
                 name, lo->desc.n_outputs, op->n_outputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    lo->n_outputs = lo->desc.n_outputs;
    for (int o = 0; o < lo->n_outputs; o++) {
        if ((st = new_output(g, n, o, op->outputs[o], &out[o], ids, msg, len)) != TF_OK) return st;
        view_set(&lo->out[o], &out[o]);
    }
    if (tfd_linalg_permutes(&lo->desc, in[0].rank)) {
        tfd_op *pm = &node->linalg->permute;
        tfd_linalg_permute_op(&lo->desc, &lo->in[0], pm);
        tf__meta scratch = in[0];
        memcpy(scratch.shape, pm->out.shape, sizeof scratch.shape);
        node->scratch_value = new_value(g, n, &scratch, 1);
        lo->in[0] = pm->out;
    }
    g->n_linalg++;
    return TF_OK;
}

/* Checks node n of the Prepare and fills it in; ids maps the values named so far. */
static tf_status plan_node(tfd_graph_plan *g, const Tenferro__Prepare *p, int n,
                           int test_fault_allowed, tf__id_table *ids, char *msg, size_t len) {
    const Tenferro__Op *op = p->nodes[n];
    tfd_graph_node *node = &g->nodes[n];
    node->scratch_value = -1;
    if (op->kind == TF__OP_FREE || op->kind == TF__OP_RUN_PREPARED) {
        snprintf(msg, len, "node %d: %s is not a graph node (the daemon plans the memory of a "
                           "graph's values; a graph cannot run another)",
                 n, op->kind == TF__OP_FREE ? "free" : "run_prepared");
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (op->kind < TF__OP_KIND_COUNT && tf__is_linalg((tf__op_kind)op->kind))
        return plan_linalg(g, op, n, ids, msg, len);
    char why[400];
    tf_status st = tfd_op_decode(op, test_fault_allowed, &node->op, why, sizeof why);
    if (st != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    tf__meta in[2];
    if ((st = node_inputs(g, op, n, node->op.n_inputs, ids, in, msg, len)) != TF_OK) return st;
    for (int i = 0; i < node->op.n_inputs; i++) view_set(&node->op.in[i], &in[i]);
    tf__meta out;
    if ((st = tfd_op_infer(op, &node->op, NULL, in, &out, why, sizeof why)) != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    if ((st = new_output(g, n, 0, op->output, &out, ids, msg, len)) != TF_OK) return st;
    view_set(&node->op.out, &out);
    return TF_OK;
}

/*
 * The most values a Prepare can make: its inputs, one per node, and for a
 * linear-algebra node up to TFD_GRAPH_NODE_OUTPUTS outputs and a scratch
 * value (a node naming more outputs is refused before it makes them).
 */
static size_t max_values(const Tenferro__Prepare *p) {
    size_t n = p->n_inputs;
    for (size_t i = 0; i < p->n_nodes; i++) {
        const uint32_t kind = p->nodes[i]->kind;
        n += kind < TF__OP_KIND_COUNT && tf__is_linalg((tf__op_kind)kind)
                 ? TFD_GRAPH_NODE_OUTPUTS + 1
                 : 1;
    }
    return n;
}

/* Checks the graph's inputs and records their values. */
static tf_status plan_inputs(tfd_graph_plan *g, const Tenferro__Prepare *p, tf__id_table *ids,
                             char *msg, size_t len) {
    for (int i = 0; i < g->n_inputs; i++) {
        const Tenferro__GraphInput *in = p->inputs[i];
        char why[300];
        if (in->n_shape > TF_MAX_RANK) {
            snprintf(msg, len, "graph input %d has rank %zu: at most %d", i, in->n_shape,
                     TF_MAX_RANK);
            return TF_ERR_SHAPE;
        }
        tf_status st = tf__check_new_meta((tf_dtype)in->dtype, (int)in->n_shape, in->shape, why,
                                          sizeof why);
        if (st != TF_OK) {
            snprintf(msg, len, "graph input %d: %s", i, why);
            return st;
        }
        char what[32];
        snprintf(what, sizeof what, "graph input %d", i);
        if ((st = name_value(ids, in->id, i, what, msg, len)) != TF_OK) return st;
        tfd_graph_value *v = &g->values[i];
        v->meta.dtype = (tf_dtype)in->dtype;
        v->meta.rank = (int)in->n_shape;
        for (size_t a = 0; a < in->n_shape; a++) v->meta.shape[a] = in->shape[a];
        v->bytes = tf__meta_bytes(&v->meta);
        v->node = -1;
    }
    return TF_OK;
}

/* Checks the sizes of the graph as a whole before anything is decoded. */
static tf_status check_counts(const Tenferro__Prepare *p, int max_nodes, char *msg, size_t len) {
    if (p->n_inputs > TFD_GRAPH_MAX_INPUTS || p->n_outputs > TFD_GRAPH_MAX_OUTPUTS) {
        snprintf(msg, len, "a graph has %zu inputs and %zu outputs: at most %d and %d", p->n_inputs,
                 p->n_outputs, TFD_GRAPH_MAX_INPUTS, TFD_GRAPH_MAX_OUTPUTS);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (p->n_nodes == 0 || p->n_outputs == 0) {
        snprintf(msg, len, "a graph needs at least one node and one output (%zu nodes, %zu outputs)",
                 p->n_nodes, p->n_outputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (p->n_nodes > (size_t)max_nodes) {
        snprintf(msg, len,
                 "a graph of %zu nodes is larger than this daemon's limit of %d ([limits] "
                 "max_graph_nodes)",
                 p->n_nodes, max_nodes);
        return TF_ERR_QUOTA;
    }
    return TF_OK;
}

tf_status tfd_graph_plan_build(const Tenferro__Prepare *p, int max_nodes, int test_fault_allowed,
                               tfd_graph_plan **out, int *failed_node, char *msg, size_t len) {
    *out = NULL;
    *failed_node = -1;
    tf_status st = check_counts(p, max_nodes, msg, len);
    if (st != TF_OK) return st;
    tfd_graph_plan *g = calloc(1, sizeof *g);
    tf__id_table ids;
    tf__id_table_init(&ids, sizeof(id_value));
    if (g) {
        g->n_inputs = (int)p->n_inputs;
        g->n_nodes = (int)p->n_nodes;
        g->n_outputs = (int)p->n_outputs;
        g->n_values = g->n_inputs; /* the nodes add theirs as they are planned */
        g->values = calloc(max_values(p), sizeof *g->values);
        g->nodes = calloc((size_t)g->n_nodes, sizeof *g->nodes);
        g->outputs = calloc((size_t)g->n_outputs, sizeof *g->outputs);
    }
    if (!g || !g->values || !g->nodes || !g->outputs) {
        snprintf(msg, len, "out of host memory preparing a graph of %zu nodes", p->n_nodes);
        st = TF_ERR_NO_MEMORY;
        goto fail;
    }
    if ((st = plan_inputs(g, p, &ids, msg, len)) != TF_OK) goto fail;
    for (int n = 0; n < g->n_nodes; n++) {
        const int first = g->n_values;
        if ((st = plan_node(g, p, n, test_fault_allowed, &ids, msg, len)) != TF_OK) {
            *failed_node = n;
            goto fail;
        }
        for (int v = first; v < g->n_values; v++) {
            const size_t bytes = g->values[v].bytes;
            if (g->node_bytes > SIZE_MAX / 2 - bytes) {
                snprintf(msg, len, "node %d: the graph's values together exceed the address space",
                         n);
                *failed_node = n;
                st = TF_ERR_QUOTA;
                goto fail;
            }
            g->node_bytes += bytes;
        }
    }
    for (int o = 0; o < g->n_outputs; o++) {
        const id_value *v = tf__id_table_find(&ids, p->outputs[o]);
        if (!v) {
            snprintf(msg, len, "graph output %d names %llu, which no input or node has", o,
                     (unsigned long long)p->outputs[o]);
            st = TF_ERR_INVALID_ARGUMENT;
            goto fail;
        }
        g->outputs[o] = v->value;
    }
    if (make_key(g) != 0) {
        snprintf(msg, len, "out of host memory preparing a graph");
        st = TF_ERR_NO_MEMORY;
        goto fail;
    }
    tf__id_table_free(&ids);
    *out = g;
    return TF_OK;
fail:
    tf__id_table_free(&ids);
    tfd_graph_plan_free(g);
    return st;
}

void tfd_graph_plan_free(tfd_graph_plan *p) {
    if (!p) return;
    for (int n = 0; p->nodes && n < p->n_nodes; n++) free(p->nodes[n].linalg);
    free(p->values);
    free(p->nodes);
    free(p->outputs);
    free(p->key);
    free(p);
}

int tfd_graph_plan_same(const tfd_graph_plan *a, const tfd_graph_plan *b) {
    return a->key_len == b->key_len && a->key_hash[0] == b->key_hash[0] &&
           memcmp(a->key, b->key, a->key_len) == 0;
}
