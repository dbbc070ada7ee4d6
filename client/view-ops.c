/*
 * The operations of a session view. Each runs the shared shape rules, takes a
 * fresh handle for its output and appends itself to the client's queue; the
 * daemon sees it at the next submission boundary.
 */
#include <stdlib.h>
#include <string.h>

#include "client/internal.h"

tf_status tf__lookup(tf_client *c, tf_tensor t, tf__handle **out) {
    tf__handle *h = tf__id_table_find(&c->handles, t);
    if (!h)
        return tf__fail(c, TF_ERR_UNKNOWN_HANDLE,
                        "tensor %llu is not live on this client (never created, freed, or dropped "
                        "with a failed batch)",
                        (unsigned long long)t);
    *out = h;
    return TF_OK;
}

tf_status tf__lookup_idle(tf_client *c, tf_tensor t, const char *use, tf__handle **out) {
    tf_status st = tf__lookup(c, t, out);
    if (st == TF_OK && (*out)->in_flight)
        return tf__fail(c, TF_ERR_BUSY,
                        "tensor %llu is in a pending transfer (%s): it cannot be %s until the "
                        "transfer is waited for; operations may read it meanwhile",
                        (unsigned long long)t,
                        (*out)->in_flight == TENFERRO__TRANSFER_DIRECTION__TRANSFER_UPLOAD
                            ? "an upload writing it"
                            : "a download reading it",
                        use);
    return st;
}

tf__queued_op *tf__ops_slot(tf__queued_op **ops, size_t n, size_t *cap, size_t first_cap) {
    if (n == *cap) {
        size_t grown = *cap ? *cap * 2 : first_cap;
        tf__queued_op *q = realloc(*ops, grown * sizeof *q);
        if (!q) return NULL;
        *ops = q;
        *cap = grown;
    }
    return &(*ops)[n];
}

/* Makes room for one more queued operation. */
static tf__queued_op *queue_slot(tf_client *c) {
    return tf__ops_slot(&c->queue, c->n_queued, &c->queue_cap, 256);
}

tf__queued_op *tf__view_slot(tf_view *v) {
    return v->graph ? tf__graph_slot(v->graph) : queue_slot(v->client);
}

void tf__view_commit(tf_view *v) {
    if (v->graph)
        tf__graph_commit(v->graph);
    else
        v->client->n_queued++;
}

uint64_t tf__view_next_id(tf_view *v) {
    return v->graph ? tf__graph_next_id(v->graph) : ++v->client->next_tensor_id;
}

tf__id_table *tf__view_handles(tf_view *v) {
    return v->graph ? tf__graph_handles(v->graph) : &v->client->handles;
}

tf__queued_op *tf__view_ops(tf_view *v, size_t *n) {
    if (v->graph) return tf__graph_ops(v->graph, n);
    *n = v->client->n_queued;
    return v->client->queue;
}

void tf__view_truncate(tf_view *v, size_t start) {
    size_t n;
    tf__queued_op *ops = tf__view_ops(v, &n);
    tf__id_table *handles = tf__view_handles(v);
    for (size_t i = start; i < n; i++) {
        if (tf__queued_names_io(&ops[i])) {
            for (int o = 0; o < ops[i].n_run_outputs; o++)
                tf__id_table_remove(handles, ops[i].run_io[ops[i].n_run_inputs + o], NULL);
        } else if (ops[i].kind != TF__OP_FREE) {
            tf__id_table_remove(handles, ops[i].output, NULL);
        }
        tf__queued_op_release(&ops[i]);
    }
    if (v->graph)
        tf__graph_truncate(v->graph, start);
    else
        v->client->n_queued = start;
}

/*
 * A tensor a view's operation may read: a live tensor of the client in a
 * session, a value of the graph on a recording view. A tensor a pending
 * transfer holds is readable: the operation reaches the daemon after the
 * transfer was accepted, so it is queued on the stream behind the copy.
 */
static tf_status view_lookup(tf_view *v, tf_tensor t, tf__handle **out) {
    if (!v->graph) return tf__lookup(v->client, t, out);
    *out = tf__id_table_find(tf__graph_handles(v->graph), t);
    if (*out) return TF_OK;
    return tf__fail(v->client, TF_ERR_UNKNOWN_HANDLE,
                    "tensor %llu is not a value of the graph being recorded (an input or a "
                    "result recorded on its view)",
                    (unsigned long long)t);
}

/* Operations are queued only inside a callback, where they belong to a session; a recording view always takes them. */
static tf_status check_view(tf_view *v) {
    if (!v || !v->client) return TF_ERR_INVALID_ARGUMENT;
    tf_client *c = v->client;
    if (v->graph) return TF_OK;
    if (c->broken) return tf__fail(c, TF_ERR_DISCONNECTED, "not connected to tenferrod");
    if (!c->in_callback)
        return tf__fail(c, TF_ERR_SESSION_CLOSED,
                        "a view is only valid inside its session callback");
    return TF_OK;
}

tf_status tf__view_inputs(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                          const tf_tensor *out, tf__meta *meta) {
    tf_status st = check_view(v);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    if (!out) return tf__fail(c, TF_ERR_INVALID_ARGUMENT, "%s: out is NULL", tf__op_name(kind));
    for (int i = 0; i < n_inputs; i++) {
        tf__handle *h = NULL;
        if ((st = view_lookup(v, inputs[i], &h)) != TF_OK) return st;
        meta[i] = h->meta;
    }
    return TF_OK;
}

tf_status tf__view_lookup(tf_view *v, tf_tensor t, tf__handle **out) { return view_lookup(v, t, out); }

tf_status tf__queue_push(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                         const tf__meta *out_meta, tf_tensor *out, tf__queued_op **record) {
    tf_client *c = v->client;
    tf__queued_op *q = tf__view_slot(v);
    if (!q) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing %s", tf__op_name(kind));
    tf__handle outh = {.meta = *out_meta, .pending = 1};
    outh.id = tf__view_next_id(v);
    if (tf__id_table_insert(tf__view_handles(v), &outh) != 0)
        return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing %s", tf__op_name(kind));
    memset(q, 0, sizeof *q);
    q->kind = kind;
    q->n_inputs = n_inputs;
    for (int i = 0; i < n_inputs; i++) q->inputs[i] = inputs[i];
    q->output = outh.id;
    tf__view_commit(v);
    /* The next operation's output takes the next id: its slot in the handle table is asked for now. */
    if (!v->graph) tf__id_table_prefetch(&c->handles, c->next_tensor_id + 1);
    *out = outh.id;
    *record = q;
    return tf__ok(c);
}

tf_status tf__queue_op(tf_view *v, tf__op_kind kind, int n_inputs, const tf_tensor *inputs,
                       int n_params, const int64_t *params, unsigned flags, tf_scalar alpha,
                       tf_scalar beta, tf_tensor *out) {
    tf__meta in_meta[2], out_meta;
    tf_status st = tf__view_inputs(v, kind, n_inputs, inputs, out, in_meta);
    if (st != TF_OK) return st;
    tf_client *c = v->client;
    st = tf__infer_output(kind, in_meta, n_inputs, params, n_params, flags, &out_meta,
                          c->last_error, sizeof c->last_error);
    if (st != TF_OK) return st;
    tf__queued_op *q;
    if ((st = tf__queue_push(v, kind, n_inputs, inputs, &out_meta, out, &q)) != TF_OK) return st;
    q->n_params = n_params;
    for (int i = 0; i < n_params; i++) q->params[i] = params[i];
    q->flags = flags;
    q->alpha = alpha;
    q->beta = beta;
    return TF_OK;
}

tf_status tf__queue_free(tf_client *c, tf_tensor t) {
    tf__queued_op *q = queue_slot(c);
    if (!q) return tf__fail(c, TF_ERR_NO_MEMORY, "out of memory queueing free");
    memset(q, 0, sizeof *q);
    q->kind = TF__OP_FREE;
    q->n_inputs = 1;
    q->inputs[0] = t;
    c->n_queued++;
    return TF_OK;
}

tf_status tf__view_check(tf_view *v) { return check_view(v); }

tf_status tf__queue_contract(tf_view *v, const tf__contraction *k, const tf_tensor *inputs,
                             const tf__meta *out_meta, tf_tensor *out) {
    tf__queued_op *q;
    tf_status st = tf__queue_push(v, TF__OP_CONTRACT, k->n_inputs, inputs, out_meta, out, &q);
    if (st == TF_OK) q->contract = *k;
    return st;
}

tf_status tf__view_drop(tf_view *v, tf_tensor t) {
    /* A graph's intermediate needs no free: the daemon plans the memory of a graph's values. */
    tf_status st = v->graph ? TF_OK : tf__queue_free(v->client, t);
    tf__id_table_remove(tf__view_handles(v), t, NULL);
    return st;
}

static const tf_scalar no_scalar = {0, 0};

/* A two-input elementwise operation. */
static tf_status binary(tf_view *v, tf__op_kind kind, tf_tensor a, tf_tensor b, tf_tensor *out) {
    tf_tensor in[2] = {a, b};
    return tf__queue_op(v, kind, 2, in, 0, NULL, 0, no_scalar, no_scalar, out);
}

/* A one-input elementwise operation. */
static tf_status unary(tf_view *v, tf__op_kind kind, tf_tensor a, tf_tensor *out) {
    return tf__queue_op(v, kind, 1, &a, 0, NULL, 0, no_scalar, no_scalar, out);
}

tf_status tf_view_add(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out) { return binary(v, TF__OP_ADD, a, b, out); }
tf_status tf_view_sub(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out) { return binary(v, TF__OP_SUB, a, b, out); }
tf_status tf_view_mul(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out) { return binary(v, TF__OP_MUL, a, b, out); }
tf_status tf_view_div(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out) { return binary(v, TF__OP_DIV, a, b, out); }
tf_status tf_view_neg(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_NEG, a, out); }
tf_status tf_view_conj(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_CONJ, a, out); }
tf_status tf_view_abs(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_ABS, a, out); }
tf_status tf_view_exp(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_EXP, a, out); }
tf_status tf_view_log(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_LOG, a, out); }
tf_status tf_view_sqrt(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_SQRT, a, out); }
tf_status tf_view_square(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_SQUARE, a, out); }
tf_status tf_view_copy(tf_view *v, tf_tensor a, tf_tensor *out) { return unary(v, TF__OP_COPY, a, out); }
tf_status tf_view_matmul(tf_view *v, tf_tensor a, tf_tensor b, tf_tensor *out) { return binary(v, TF__OP_MATMUL, a, b, out); }

tf_status tf_view_scale(tf_view *v, tf_scalar alpha, tf_tensor a, tf_tensor *out) {
    return tf__queue_op(v, TF__OP_SCALE, 1, &a, 0, NULL, 0, alpha, no_scalar, out);
}

tf_status tf_view_axpby(tf_view *v, tf_scalar alpha, tf_tensor x, tf_scalar beta, tf_tensor y,
                        tf_tensor *out) {
    tf_tensor in[2] = {x, y};
    return tf__queue_op(v, TF__OP_AXPBY, 2, in, 0, NULL, 0, alpha, beta, out);
}

/* Copies int axes into the int64 parameters the wire carries, refusing too many. */
static tf_status axes_to_params(tf_view *v, int n, const int *axes, int64_t *params) {
    if (n < 0 || n > TF_MAX_RANK || (n > 0 && !axes))
        return tf__fail(v->client, TF_ERR_AXIS, "%d axes given: between 0 and %d expected", n,
                        TF_MAX_RANK);
    for (int i = 0; i < n; i++) params[i] = axes[i];
    return TF_OK;
}

tf_status tf_view_permute(tf_view *v, tf_tensor a, int rank, const int *perm, tf_tensor *out) {
    int64_t params[TF_MAX_RANK];
    tf_status st = check_view(v);
    if (st == TF_OK) st = axes_to_params(v, rank, perm, params);
    if (st != TF_OK) return st;
    return tf__queue_op(v, TF__OP_PERMUTE, 1, &a, rank, params, 0, no_scalar, no_scalar, out);
}

tf_status tf_view_reshape(tf_view *v, tf_tensor a, int rank, const int64_t *shape, tf_tensor *out) {
    tf_status st = check_view(v);
    if (st != TF_OK) return st;
    if (rank < 0 || rank > TF_MAX_RANK || (rank > 0 && !shape))
        return tf__fail(v->client, TF_ERR_BAD_SHAPE, "reshape: rank %d is outside 0..%d", rank,
                        TF_MAX_RANK);
    return tf__queue_op(v, TF__OP_RESHAPE, 1, &a, rank, shape, 0, no_scalar, no_scalar, out);
}

tf_status tf_view_reduce(tf_view *v, tf_reduce_kind kind, tf_tensor a, int n_axes, const int *axes,
                         int keepdims, tf_tensor *out) {
    tf__op_kind op;
    switch (kind) {
    case TF_REDUCE_SUM: op = TF__OP_REDUCE_SUM; break;
    case TF_REDUCE_MAX: op = TF__OP_REDUCE_MAX; break;
    case TF_REDUCE_MIN: op = TF__OP_REDUCE_MIN; break;
    default:
        return v && v->client ? tf__fail(v->client, TF_ERR_INVALID_ARGUMENT, "unknown reduction %d", (int)kind)
                              : TF_ERR_INVALID_ARGUMENT;
    }
    int64_t params[TF_MAX_RANK];
    tf_status st = check_view(v);
    if (st == TF_OK) st = axes_to_params(v, n_axes, axes, params);
    if (st != TF_OK) return st;
    return tf__queue_op(v, op, 1, &a, n_axes, params, keepdims ? TF__REDUCE_KEEPDIMS : 0, no_scalar,
                        no_scalar, out);
}

tf_status tf_view_sum(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out) {
    return tf_view_reduce(v, TF_REDUCE_SUM, a, n_axes, axes, 0, out);
}
tf_status tf_view_max(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out) {
    return tf_view_reduce(v, TF_REDUCE_MAX, a, n_axes, axes, 0, out);
}
tf_status tf_view_min(tf_view *v, tf_tensor a, int n_axes, const int *axes, tf_tensor *out) {
    return tf_view_reduce(v, TF_REDUCE_MIN, a, n_axes, axes, 0, out);
}

tf_client *tf_view_client(tf_view *v) { return v ? v->client : NULL; }
