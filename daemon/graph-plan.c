/* Plans of prepared graphs: the checks of a Prepare and its canonical form (graph-plan.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/id-table.h"
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

/* Writes everything a node computes with, by value: equal nodes give equal bytes. */
static void put_node(bytes_out *b, const tfd_graph_node *n) {
    const tfd_op *d = &n->op;
    put_i64(b, d->kind);
    put_i64(b, d->n_inputs);
    for (int i = 0; i < d->n_inputs; i++) put_i64(b, n->in_value[i]);
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

/* Checks node n of the Prepare and fills it in; ids maps the values named so far. */
static tf_status plan_node(tfd_graph_plan *g, const Tenferro__Prepare *p, int n,
                           int test_fault_allowed, tf__id_table *ids, char *msg, size_t len) {
    const Tenferro__Op *op = p->nodes[n];
    tfd_graph_node *node = &g->nodes[n];
    if (op->kind == TF__OP_FREE || op->kind == TF__OP_RUN_PREPARED) {
        snprintf(msg, len, "node %d: %s is not a graph node (the daemon plans the memory of a "
                           "graph's values; a graph cannot run another)",
                 n, op->kind == TF__OP_FREE ? "free" : "run_prepared");
        return TF_ERR_INVALID_ARGUMENT;
    }
    char why[400];
    tf_status st = tfd_op_decode(op, test_fault_allowed, &node->op, why, sizeof why);
    if (st != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    tf__meta in[2];
    for (int i = 0; i < node->op.n_inputs; i++) {
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
        tfd_tensor_view *view = &node->op.in[i];
        view->dtype = in[i].dtype;
        view->rank = in[i].rank;
        memcpy(view->shape, in[i].shape, sizeof view->shape);
        view->numel = tf__meta_numel(&in[i]);
    }
    tf__meta out;
    if ((st = tfd_op_infer(op, &node->op, NULL, in, &out, why, sizeof why)) != TF_OK) {
        snprintf(msg, len, "node %d: %s", n, why);
        return st;
    }
    const int value = g->n_inputs + n;
    char what[48];
    snprintf(what, sizeof what, "node %d's output", n);
    if ((st = name_value(ids, op->output, value, what, msg, len)) != TF_OK) return st;
    node->out_value = value;
    tfd_graph_value *v = &g->values[value];
    v->meta = out;
    v->bytes = tf__meta_bytes(&out);
    v->node = n;
    tfd_tensor_view *view = &node->op.out;
    view->dtype = out.dtype;
    view->rank = out.rank;
    memcpy(view->shape, out.shape, sizeof view->shape);
    view->numel = tf__meta_numel(&out);
    return TF_OK;
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
        g->n_values = g->n_inputs + g->n_nodes;
        g->values = calloc((size_t)g->n_values, sizeof *g->values);
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
        if ((st = plan_node(g, p, n, test_fault_allowed, &ids, msg, len)) != TF_OK) {
            *failed_node = n;
            goto fail;
        }
        const size_t bytes = g->values[g->n_inputs + n].bytes;
        if (g->node_bytes > SIZE_MAX / 2 - bytes) {
            snprintf(msg, len, "node %d: the graph's values together exceed the address space", n);
            *failed_node = n;
            st = TF_ERR_QUOTA;
            goto fail;
        }
        g->node_bytes += bytes;
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
