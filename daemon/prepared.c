/*
 * Instances of prepared graphs, their runs and their cache (prepared.h).
 *
 * Memory. With a device graph (graph_capture), every value has a slot in the
 * arena: the graph reads its inputs from their slots and writes every node's
 * output to its slot, since a captured graph's pointers cannot change; a run
 * copies the input tensors into the input slots, launches the graph, and
 * copies the output slots into the fresh output tensors (two copies per
 * input and output, each one kernel-sized). Without one (the CPU backend, or
 * a capture the backend refused), the nodes run one by one with pointers
 * bound per run: they read the input tensors in place, a node whose value is
 * an output writes that output tensor directly, and only the other node
 * values live in the arena; an output listed twice, or one that is a graph
 * input, is a copy. Either way nothing is allocated per run and nothing is
 * validated again.
 *
 * Linear algebra. A plan with a linear-algebra node is never captured, on
 * any backend (captures() says why): its nodes run one by one, each such
 * node through the backend's linalg entry, its several outputs each a value
 * like any node's, and the permuted copy a split asks for (graph-plan.h) a
 * scratch value in the arena, written by the node's PERMUTE just before it.
 * A failing node stops the run; the run item's skipped path then leaves
 * every output of the run holding zeros, as for any failed operation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/log.h"
#include "daemon/prepared.h"

/* Arena offsets are aligned to this, enough for every dtype and vector loads. */
#define ARENA_ALIGN 256u
/* No offset: a value not kept in the arena. */
#define NOT_IN_ARENA SIZE_MAX

struct tfd_prepared_exec {
    tfd_graph_plan *plan;
    tfd_backend *be;
    void *arena;
    size_t arena_bytes;
    size_t *offset;    /* per value: where it lives in the arena, or NOT_IN_ARENA */
    int *direct;       /* per value (node mode): the output it is written to directly, or -1 */
    void *graph;       /* the backend's device graph, or NULL (node mode) */
    uint64_t graph_bytes;
    void **ptr;        /* per value: its memory during one run (node mode scratch) */
    tfd_op *bound;     /* graph mode: the nodes bound to their slots (what was captured) */
};

/* The cache key: the canonical form's hashes and length; a hit is confirmed against the form. */
typedef struct exec_key {
    uint64_t hash[2];
    uint64_t len;
} exec_key;

static exec_key key_of(const tfd_graph_plan *p) {
    exec_key k;
    memset(&k, 0, sizeof k);
    k.hash[0] = p->key_hash[0];
    k.hash[1] = p->key_hash[1];
    k.len = p->key_len;
    return k;
}

/* Frees an instance; the device is usable and nothing runs it (a worker, or close). */
static void destroy_exec(tfd_prepared_exec *x) {
    if (!x) return;
    if (x->graph && x->be->vt->graph_destroy) x->be->vt->graph_destroy(x->be, x->graph);
    if (x->arena) x->be->vt->free(x->be, NULL, x->arena, x->arena_bytes);
    tfd_graph_plan_free(x->plan);
    free(x->offset);
    free(x->direct);
    free(x->ptr);
    free(x->bound);
    free(x);
}

/*
 * The cache's destroy callback. Freeing a device graph or device memory may
 * wait for the device, so on a backend with device graphs it declines unless
 * it must (the loop may be the caller); the next build, or trim's drain on a
 * worker, destroys what it declined.
 */
static int destroy_cb(void *value, void *arg, int must) {
    const tfd_prepared_cache *pc = arg;
    if (!must && pc->be->vt->graph_capture) return 0;
    destroy_exec(value);
    return 1;
}

int tfd_prepared_cache_init(tfd_prepared_cache *pc, tfd_backend *be, uint64_t capacity) {
    pc->be = be;
    return tfd_plan_cache_init(&pc->cache, "prepared_graphs", sizeof(exec_key), capacity, 1,
                               destroy_cb, pc);
}

void tfd_prepared_cache_destroy(tfd_prepared_cache *pc) { tfd_plan_cache_destroy(&pc->cache); }

tfd_plan_entry *tfd_prepared_take(tfd_prepared_cache *pc, const tfd_graph_plan *plan) {
    const exec_key k = key_of(plan);
    tfd_plan_entry *e = tfd_plan_cache_acquire(&pc->cache, &k);
    if (e && !tfd_graph_plan_same(tfd_prepared_exec_of(e)->plan, plan)) {
        /* Equal hashes, another graph: build a twin rather than run the wrong one. */
        tfd_plan_cache_release(&pc->cache, e);
        return NULL;
    }
    return e;
}

/* Places `bytes` at the end of the arena being laid out; -1 on overflow. */
static int place(size_t *end, size_t bytes, size_t *at) {
    const size_t aligned = (*end + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (aligned < *end || bytes > SIZE_MAX - aligned) return -1;
    *at = aligned;
    *end = aligned + bytes;
    return 0;
}

/* A free region of the arena being laid out. */
typedef struct region {
    size_t at, bytes;
} region;

/*
 * A slot of `bytes` for a value: the smallest free region that holds it
 * (regions are not split), else new space at the end; -1 on overflow.
 */
static int take_slot(region *free_list, int *n_free, size_t *end, size_t bytes, size_t *at) {
    int best = -1;
    for (int i = 0; i < *n_free; i++)
        if (free_list[i].bytes >= bytes && (best < 0 || free_list[i].bytes < free_list[best].bytes))
            best = i;
    if (best < 0) return place(end, bytes, at);
    *at = free_list[best].at;
    free_list[best] = free_list[--*n_free];
    return 0;
}

/*
 * Lays the arena out. In graph mode every value gets a slot; in node mode
 * the first output naming a node's value is written directly, and the other
 * node values get slots (inputs are read in place). A scratch value always
 * has a slot. An intermediate's slot is free again after the last node that
 * reads it, for a later node's output (a chain needs two slots, not one per
 * node); inputs and outputs keep theirs for the whole run. A node's values
 * all get their slots before any of them is freed (an output nobody reads,
 * the scratch), so the values of one node never share memory. Nodes run in
 * order on one stream, so a reused slot's next writer always follows its
 * last reader.
 */
static int lay_out(tfd_prepared_exec *x, int graph_mode) {
    const tfd_graph_plan *p = x->plan;
    size_t end = 0;
    int *last_use = malloc(sizeof *last_use * (size_t)p->n_values);
    region *free_list = malloc(sizeof *free_list * (size_t)p->n_values);
    int n_free = 0, rc = 0;
    if (!last_use || !free_list) {
        free(last_use);
        free(free_list);
        return -1;
    }
    for (int v = 0; v < p->n_values; v++) {
        x->offset[v] = NOT_IN_ARENA;
        x->direct[v] = -1;
        last_use[v] = v < p->n_inputs ? p->n_nodes : -1;
    }
    for (int n = 0; n < p->n_nodes; n++) {
        for (int i = 0; i < p->nodes[n].op.n_inputs; i++) last_use[p->nodes[n].in_value[i]] = n;
        if (p->nodes[n].scratch_value >= 0) last_use[p->nodes[n].scratch_value] = n;
    }
    for (int o = 0; o < p->n_outputs; o++) {
        const int v = p->outputs[o];
        last_use[v] = p->n_nodes;
        if (!graph_mode && v >= p->n_inputs && x->direct[v] < 0) x->direct[v] = o;
    }
    for (int v = 0; v < p->n_inputs && graph_mode && rc == 0; v++)
        rc = place(&end, p->values[v].bytes, &x->offset[v]);
    for (int n = 0; n < p->n_nodes && rc == 0; n++) {
        const tfd_graph_node *node = &p->nodes[n];
        int made[TFD_GRAPH_NODE_OUTPUTS + 1], n_made = 0;
        for (int o = 0; o < node->n_out; o++) made[n_made++] = node->out_value[o];
        if (node->scratch_value >= 0) made[n_made++] = node->scratch_value;
        for (int j = 0; j < n_made && rc == 0; j++) {
            const int v = made[j];
            if (graph_mode || x->direct[v] < 0 || p->values[v].scratch)
                rc = take_slot(free_list, &n_free, &end, p->values[v].bytes, &x->offset[v]);
        }
        /* Never read (free at once after its writer), or read by this node alone (the scratch). */
        for (int j = 0; j < n_made && rc == 0; j++) {
            const int v = made[j];
            if ((last_use[v] < 0 || p->values[v].scratch) && x->offset[v] != NOT_IN_ARENA)
                free_list[n_free++] = (region){x->offset[v], p->values[v].bytes};
        }
        /* Values whose last reader is this node are free for the nodes after it. */
        for (int i = 0; i < node->op.n_inputs && rc == 0; i++) {
            const int r = node->in_value[i];
            int seen = 0;
            for (int j = 0; j < i; j++) seen |= node->in_value[j] == r;
            if (!seen && last_use[r] == n && r >= p->n_inputs && x->offset[r] != NOT_IN_ARENA)
                free_list[n_free++] = (region){x->offset[r], p->values[r].bytes};
        }
    }
    free(last_use);
    free(free_list);
    x->arena_bytes = end;
    return rc;
}

/*
 * Whether instances of plan are captured into device graphs: where the
 * backend makes them, and only for plans without linear algebra. A solver's
 * workspace query, its info words and the CPU-side truncation rule are not
 * what a capture can record in general, and whether a capture of the
 * routines that could be captured pays has not been measured; such a plan
 * runs node by node on every backend (docs/prepared.md).
 */
static int captures(const tfd_backend *be, const tfd_graph_plan *plan) {
    return be->vt->graph_capture != NULL && plan->n_linalg == 0;
}

uint64_t tfd_prepared_arena_bytes(const tfd_prepared_cache *pc, const tfd_graph_plan *plan) {
    tfd_prepared_exec x;
    memset(&x, 0, sizeof x);
    x.plan = (tfd_graph_plan *)plan; /* lay_out only reads it */
    x.offset = calloc((size_t)plan->n_values, sizeof *x.offset);
    x.direct = calloc((size_t)plan->n_values, sizeof *x.direct);
    uint64_t bytes = 0;
    if (x.offset && x.direct) {
        const int rc = lay_out(&x, captures(pc->be, plan));
        bytes = rc == 0 ? x.arena_bytes : 0;
    }
    free(x.offset);
    free(x.direct);
    return bytes;
}

/* The memory of value v in this run: its slot, its input tensor, or the output it is written to. */
static void *value_ptr(const tfd_prepared_exec *x, int v, void *const *in, void *const *out) {
    if (x->offset[v] != NOT_IN_ARENA) return (char *)x->arena + x->offset[v];
    if (v < x->plan->n_inputs) return in[v];
    return out[x->direct[v]];
}

/* Node n of the plan with its data pointers set from ptr[] (not a linear-algebra node). */
static void bind_node(const tfd_graph_plan *p, int n, void *const *ptr, tfd_op *op) {
    const tfd_graph_node *node = &p->nodes[n];
    *op = node->op;
    for (int i = 0; i < op->n_inputs; i++) op->in[i].data = ptr[node->in_value[i]];
    op->out.data = ptr[node->out_value[0]];
}

/*
 * Linear-algebra node n with its data pointers set from ptr[]: the operation
 * reads the scratch value where the split permutes input 0, which *permute
 * (then bound too) writes first; *has_permute says whether it must run.
 */
static void bind_linalg(const tfd_graph_plan *p, int n, void *const *ptr, tfd_linalg_op *op,
                        tfd_op *permute, int *has_permute) {
    const tfd_graph_node *node = &p->nodes[n];
    *op = node->linalg->op;
    for (int i = 0; i < op->n_inputs; i++) op->in[i].data = ptr[node->in_value[i]];
    for (int o = 0; o < op->n_outputs; o++) op->out[o].data = ptr[node->out_value[o]];
    *has_permute = node->scratch_value >= 0;
    if (!*has_permute) return;
    *permute = node->linalg->permute;
    permute->in[0].data = ptr[node->in_value[0]];
    permute->out.data = ptr[node->scratch_value];
    op->in[0].data = permute->out.data;
}

/*
 * Runs node n of a node-by-node run with this run's pointers. A failure
 * names the node and its kind before the operation's own reason (which names
 * the failing matrix of a batch), so the session's error says which step of
 * the graph failed; a linear-algebra node carries the run's batch and index
 * for a failure the device reports later.
 */
static tf_status run_node(tfd_backend *be, void *stream, const tfd_graph_plan *p, int n,
                          void *const *ptr, uint64_t batch, uint32_t index, char *msg,
                          size_t len) {
    char why[512] = "";
    tf_status st;
    if (p->nodes[n].linalg) {
        tfd_linalg_op lo;
        tfd_op permute;
        int has_permute = 0;
        bind_linalg(p, n, ptr, &lo, &permute, &has_permute);
        lo.batch = batch;
        lo.index = index;
        lo.node = n;
        st = has_permute ? tfd_backend_run_op(be, stream, &permute, why, sizeof why) : TF_OK;
        if (st == TF_OK) st = tfd_backend_run_linalg(be, stream, &lo, why, sizeof why);
    } else {
        tfd_op op;
        bind_node(p, n, ptr, &op);
        st = tfd_backend_run_op(be, stream, &op, why, sizeof why);
    }
    if (st != TF_OK)
        snprintf(msg, len, "prepared graph node %d (%s): %s", n, tf__op_name(p->nodes[n].op.kind),
                 why);
    return st;
}

/* A contiguous copy of value v (its metadata) from src to dst, as an OP_COPY. */
static tf_status copy_value(tfd_backend *be, void *stream, const tfd_graph_plan *p, int v,
                            const void *src, void *dst, char *msg, size_t len) {
    if (src == dst || p->values[v].bytes == 0) return TF_OK;
    tfd_op op;
    memset(&op, 0, sizeof op);
    op.kind = TF__OP_COPY;
    op.n_inputs = 1;
    const tf__meta *m = &p->values[v].meta;
    op.in[0].dtype = op.out.dtype = m->dtype;
    op.in[0].rank = op.out.rank = m->rank;
    memcpy(op.in[0].shape, m->shape, sizeof op.in[0].shape);
    memcpy(op.out.shape, m->shape, sizeof op.out.shape);
    op.in[0].numel = op.out.numel = tf__meta_numel(m);
    op.in[0].data = (void *)src;
    op.out.data = dst;
    return tfd_backend_run_op(be, stream, &op, msg, len);
}

/* Captures the bound nodes into a device graph; 0 when captured, -1 to run node by node. */
static int capture(tfd_prepared_exec *x, char *msg, size_t len) {
    const tfd_graph_plan *p = x->plan;
    for (int v = 0; v < p->n_values; v++) x->ptr[v] = (char *)x->arena + x->offset[v];
    for (int n = 0; n < p->n_nodes; n++) bind_node(p, n, x->ptr, &x->bound[n]); /* no linalg here */
    tf_status st = x->be->vt->graph_capture(x->be, x->bound, p->n_nodes, &x->graph, &x->graph_bytes,
                                            msg, len);
    if (st == TF_OK) return 0;
    tfd_log(TFD_LOG_INFO, "prepared graph of %d nodes runs node by node: %s", p->n_nodes, msg);
    x->graph = NULL;
    x->graph_bytes = 0;
    return -1;
}

/* Allocates the arena as laid out; TF_OK or the allocation's status with a message. */
static tf_status alloc_arena(tfd_prepared_exec *x, char *msg, size_t len) {
    if (x->arena_bytes == 0) return TF_OK;
    tf_status st = x->be->vt->alloc(x->be, NULL, x->arena_bytes, &x->arena);
    if (st != TF_OK)
        snprintf(msg, len, "cannot allocate the %zu bytes of a prepared graph's values on %s: %s",
                 x->arena_bytes, x->be->vt->name, tf_strerror(st));
    return st;
}

/* Makes an instance of plan: the arena, then (where the backend can) its device graph. */
static tf_status make_exec(tfd_backend *be, tfd_graph_plan *plan, tfd_prepared_exec **out,
                           char *msg, size_t len) {
    tfd_prepared_exec *x = calloc(1, sizeof *x);
    if (!x) {
        tfd_graph_plan_free(plan);
        snprintf(msg, len, "out of host memory preparing a graph");
        return TF_ERR_NO_MEMORY;
    }
    x->plan = plan;
    x->be = be;
    const size_t nv = (size_t)plan->n_values;
    x->offset = calloc(nv, sizeof *x->offset);
    x->direct = calloc(nv, sizeof *x->direct);
    x->ptr = calloc(nv, sizeof *x->ptr);
    x->bound = calloc((size_t)plan->n_nodes, sizeof *x->bound);
    tf_status st = TF_OK;
    if (!x->offset || !x->direct || !x->ptr || !x->bound) {
        snprintf(msg, len, "out of host memory preparing a graph");
        st = TF_ERR_NO_MEMORY;
    }
    const int try_graph = captures(be, plan);
    if (be->vt->graph_capture && !try_graph)
        tfd_log(TFD_LOG_INFO, "prepared graph of %d nodes runs node by node: %d of them are "
                              "linear algebra, which is not captured",
                plan->n_nodes, plan->n_linalg);
    if (st == TF_OK && lay_out(x, try_graph) != 0) {
        snprintf(msg, len, "a prepared graph's values exceed the address space");
        st = TF_ERR_QUOTA;
    }
    if (st == TF_OK) st = alloc_arena(x, msg, len);
    if (st == TF_OK && try_graph && capture(x, msg, len) != 0) {
        /* Node by node needs less arena: lay out again and take a smaller one. */
        be->vt->free(be, NULL, x->arena, x->arena_bytes);
        x->arena = NULL;
        if (lay_out(x, 0) != 0) {
            snprintf(msg, len, "a prepared graph's values exceed the address space");
            st = TF_ERR_QUOTA;
        }
        if (st == TF_OK) st = alloc_arena(x, msg, len);
    }
    if (st != TF_OK) {
        destroy_exec(x);
        return st;
    }
    *out = x;
    return TF_OK;
}

tf_status tfd_prepared_build(tfd_prepared_cache *pc, tfd_graph_plan *plan, tfd_plan_entry **entry,
                             char *msg, size_t msg_len) {
    *entry = NULL;
    tfd_plan_cache_drain(&pc->cache);
    const exec_key k = key_of(plan);
    tfd_prepared_exec *x = NULL;
    tf_status st = make_exec(pc->be, plan, &x, msg, msg_len);
    if (st != TF_OK) return st;
    *entry = tfd_plan_cache_insert(&pc->cache, &k, x, tfd_prepared_bytes(x));
    if (*entry) return TF_OK;
    destroy_exec(x);
    snprintf(msg, msg_len, "out of host memory caching a prepared graph");
    return TF_ERR_NO_MEMORY;
}

void tfd_prepared_give_back(tfd_prepared_cache *pc, tfd_plan_entry *entry) {
    tfd_plan_cache_release(&pc->cache, entry);
}

void tfd_prepared_discard(tfd_prepared_cache *pc, tfd_plan_entry *entry) {
    tfd_plan_cache_discard(&pc->cache, entry);
}

void tfd_prepared_cache_drain(tfd_prepared_cache *pc) { tfd_plan_cache_drain(&pc->cache); }

uint64_t tfd_prepared_cache_clear(tfd_prepared_cache *pc) { return tfd_plan_cache_clear(&pc->cache); }

void tfd_prepared_cache_stats(tfd_prepared_cache *pc, tfd_cache_stats *out) {
    tfd_plan_cache_stats(&pc->cache, out);
}

tfd_prepared_exec *tfd_prepared_exec_of(tfd_plan_entry *entry) {
    return tfd_plan_entry_value(entry);
}

const tfd_graph_plan *tfd_prepared_plan(const tfd_prepared_exec *x) { return x->plan; }

uint64_t tfd_prepared_bytes(const tfd_prepared_exec *x) { return x->arena_bytes + x->graph_bytes; }

int tfd_prepared_is_graph(const tfd_prepared_exec *x) { return x->graph != NULL; }

/* Graph mode: inputs into their slots, one launch, output slots into the outputs. */
static tf_status run_graph(tfd_backend *be, void *stream, tfd_prepared_exec *x, void *const *in,
                           void *const *out, char *msg, size_t len) {
    const tfd_graph_plan *p = x->plan;
    tf_status st = TF_OK;
    for (int i = 0; i < p->n_inputs && st == TF_OK; i++)
        st = copy_value(be, stream, p, i, in[i], (char *)x->arena + x->offset[i], msg, len);
    if (st == TF_OK) st = be->vt->graph_launch(be, stream, x->graph, msg, len);
    for (int o = 0; o < p->n_outputs && st == TF_OK; o++) {
        const int v = p->outputs[o];
        st = copy_value(be, stream, p, v, (char *)x->arena + x->offset[v], out[o], msg, len);
    }
    return st;
}

/* Node mode: every node with this run's pointers, then the outputs that are copies. */
static tf_status run_nodes(tfd_backend *be, void *stream, tfd_prepared_exec *x, uint64_t batch,
                           uint32_t index, void *const *in, void *const *out, char *msg,
                           size_t len) {
    const tfd_graph_plan *p = x->plan;
    for (int v = 0; v < p->n_values; v++) x->ptr[v] = value_ptr(x, v, in, out);
    tf_status st = TF_OK;
    for (int n = 0; n < p->n_nodes && st == TF_OK; n++)
        st = run_node(be, stream, p, n, x->ptr, batch, index, msg, len);
    for (int o = 0; o < p->n_outputs && st == TF_OK; o++) {
        const int v = p->outputs[o];
        if (v >= p->n_inputs && x->direct[v] == o) continue; /* written in place */
        st = copy_value(be, stream, p, v, x->ptr[v], out[o], msg, len);
    }
    return st;
}

tf_status tfd_prepared_run(tfd_backend *be, void *stream, tfd_prepared_exec *x, uint64_t batch,
                           uint32_t index, void *const *in, void *const *out, char *msg,
                           size_t msg_len) {
    return x->graph ? run_graph(be, stream, x, in, out, msg, msg_len)
                    : run_nodes(be, stream, x, batch, index, in, out, msg, msg_len);
}
