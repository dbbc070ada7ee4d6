/*
 * Batches: validates the operations a submission carries, one by one, against
 * the connection's tensor table, the shape rules and the quotas (quota.c),
 * allocates each output on the connection's stream, and enqueues the accepted
 * prefix. The first invalid (or over-quota) operation stops the batch:
 * everything before it stays enqueued and valid, nothing from it on is
 * created, and the result names its index. A long batch is checked in
 * slices (tfd_batch_step): the caller lets other clients' requests be served
 * between them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/spin.h"
#include "daemon/batch.h"
#include "daemon/connection.h"
#include "daemon/item-pool.h"
#include "daemon/log.h"
#include "daemon/op-decode.h"
#include "daemon/prepared.h"
#include "daemon/quota.h"
#include "daemon/server.h"
#include "daemon/sync-point.h"
#include "daemon/tensor-table.h"
#include "daemon/unwritten.h"


/*
 * An accepted operation item `it` reads tensor t: where the backend copies
 * beside its compute queue (sync-point.h), it waits for t's upload still on
 * the copy queue, and when transfers use t it becomes t's last reader, which
 * the next upload into t waits for. Without memory for a point the item
 * waits for every side copy, or t stops being tracked (its next upload then
 * waits for everything before it): slower, never unordered.
 */
static void order_read(tfd_conn *c, tfd_tensor *t, tfd_item *it) {
    if (t->copy_done) {
        if (it->n_waits < TFD_ITEM_WAITS)
            it->waits[it->n_waits++] = tfd_sync_point_ref(t->copy_done);
        else
            it->join_copies = 1;
    }
    if (!t->tracked) return;
    if (!it->mark) it->mark = tfd_sync_point_new(&c->srv->backend);
    tfd_sync_point_unref(t->last_read);
    t->last_read = tfd_sync_point_ref(it->mark);
    if (!t->last_read) t->tracked = 0;
}

/* Copies a table record into a kernel's view of it. */
static void view_of(const tfd_tensor *t, tfd_tensor_view *v) {
    v->dtype = t->meta.dtype;
    v->rank = t->meta.rank;
    memcpy(v->shape, t->meta.shape, sizeof v->shape);
    v->numel = tf__meta_numel(&t->meta);
    v->data = t->data;
}

/*
 * Validated items are handed to the stream in chunks while a batch is
 * checked: first ENQUEUE_CHUNK of them, then each chunk twice the previous,
 * up to ENQUEUE_CHUNK_MAX. A worker that runs small operations faster than
 * the loop checks them finishes every chunk and sleeps, so each hand-over
 * is a thread wake-up (a futex call on the loop, a context switch on the
 * worker); growing chunks make that a few dozen per long batch instead of
 * one every 64 operations, while the device still starts early.
 */
#define ENQUEUE_CHUNK 64
#define ENQUEUE_CHUNK_MAX 1024

/* Blocks a chain may hold for reuse (see chain.spare). */
#define CHAIN_SPARES 8

/*
 * A chain of items being built for one submission. `spare` holds the FREE
 * items of tensors the chain freed whose block a later output of the same
 * size may take (a loop that drops each result as it makes the next one
 * reuses two blocks instead of touching fresh memory for every output). A
 * block is reused only by an item later in the same chain, which the
 * executor runs after every item before it on the same stream, so its old
 * users are done with it (CPU) or ordered before the new one on the same
 * CUDA stream. Spares not taken go onto the chain as FREE items before it
 * is handed to the stream (chain_close), so no block leaves the chain
 * unaccounted.
 */
typedef struct chain {
    tfd_item *first, *last;
    uint64_t count;
    tfd_item *spare[CHAIN_SPARES];
    int n_spares;
} chain;

static void chain_push(chain *ch, tfd_item *it) {
    it->next = NULL;
    if (ch->last)
        ch->last->next = it;
    else
        ch->first = it;
    ch->last = it;
    ch->count++;
}

/* Keeps a FREE item as a spare if there is room, else puts it on the chain. */
static void chain_free(chain *ch, tfd_item *it) {
    if (ch->n_spares < CHAIN_SPARES)
        ch->spare[ch->n_spares++] = it;
    else
        chain_push(ch, it);
}

/*
 * The FREE item of a spare block of exactly `bytes`, taken off the chain's
 * spares (NULL if none): the caller uses its block and frees the item, or
 * gives it back with chain_free if the block is not used after all.
 */
static tfd_item *chain_take_spare(chain *ch, size_t bytes) {
    for (int i = 0; i < ch->n_spares; i++) {
        tfd_item *it = ch->spare[i];
        if (it->u.free.bytes != bytes) continue;
        ch->spare[i] = ch->spare[--ch->n_spares];
        return it;
    }
    return NULL;
}

/* Puts the spares not taken on the chain as the FREE items they are, labelled with the batch. */
static void chain_close(chain *ch, uint64_t batch, uint32_t index) {
    for (int i = 0; i < ch->n_spares; i++) {
        ch->spare[i]->batch = batch;
        ch->spare[i]->index = index;
        chain_push(ch, ch->spare[i]);
    }
    ch->n_spares = 0;
}

/*
 * Lets go of an output block nothing has used yet: a spare goes back to the
 * chain (earlier items may still read it), a new block back to the stream.
 */
static void drop_block(tfd_conn *c, chain *ch, tfd_item *spare, void *data, size_t bytes) {
    if (spare) {
        chain_free(ch, spare);
        return;
    }
    c->srv->backend.vt->free(&c->srv->backend, tfd_stream_native(c->stream), data, bytes);
    tfd_executor_note_free(c->srv->ex, bytes);
}

/*
 * Makes output tensor `id` of `meta` for an operation being prepared, which
 * writes every byte of it: memory from a spare block of the chain of its size,
 * else from the stream, and its record in the table. *spare is the FREE item
 * of the block taken, if one was: the caller frees it once the operation is
 * kept, or hands it to drop_block with the record's memory if not. On failure
 * nothing is kept.
 */
static tf_status make_output(tfd_conn *c, chain *ch, uint64_t id, const tf__meta *meta,
                             tfd_tensor *rec, tfd_item **spare, char *msg, size_t len) {
    const size_t bytes = tf__meta_bytes(meta);
    *rec = (tfd_tensor){.id = id, .meta = *meta, .bytes = bytes, .written = bytes};
    *spare = bytes ? chain_take_spare(ch, bytes) : NULL;
    if (*spare) {
        rec->data = (*spare)->u.free.ptr;
    } else {
        tf_status st = tfd_stream_alloc(c->stream, bytes, &rec->data, msg, len);
        if (st != TF_OK) return st;
    }
    if (tfd_tensor_table_insert(&c->tensors, rec) != 0) {
        drop_block(c, ch, *spare, rec->data, bytes);
        *spare = NULL;
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    c->srv->counters.tensors_created++;
    return TF_OK;
}

/* Hands the chain's items to the stream; its spares stay with it for later items. */
static void chain_flush(tfd_conn *c, chain *ch) {
    tfd_stream_enqueue(c->stream, ch->first, ch->last, ch->count);
    ch->first = ch->last = NULL;
    ch->count = 0;
}

/*
 * Validates and prepares a FREE operation: every named tensor must exist and
 * be in no transfer (operations queued behind a pending copy may still read
 * it, but not free it). Its items are made before any tensor leaves the
 * table, so an operation refused for want of memory frees nothing.
 */
static tf_status prepare_free(tfd_conn *c, const Tenferro__Op *op, chain *ch, char *msg, size_t len) {
    tf_status st;
    for (size_t i = 0; i < op->n_inputs; i++)
        if (!tfd_usable_tensor(c, op->inputs[i], "free", "freed", &st, msg, len)) return st;
    chain mine = {0};
    for (size_t i = 0; i < op->n_inputs; i++) {
        tfd_item *it = tfd_item_new(TFD_ITEM_FREE);
        if (!it) {
            while (mine.first) {
                tfd_item *next = mine.first->next;
                tfd_item_free(mine.first);
                mine.first = next;
            }
            snprintf(msg, len, "out of host memory");
            return TF_ERR_NO_MEMORY;
        }
        chain_push(&mine, it);
    }
    tfd_item *it = mine.first;
    for (size_t i = 0; i < op->n_inputs; i++) {
        tfd_item *next = it->next;
        tfd_tensor rec;
        if (tfd_tensor_table_remove(&c->tensors, op->inputs[i], &rec) != 0) { /* named twice */
            tfd_item_free(it);
        } else {
            it->u.free.ptr = rec.data;
            it->u.free.bytes = rec.bytes;
            chain_free(ch, it);
            c->srv->counters.tensors_freed++;
        }
        it = next;
    }
    return TF_OK;
}

/*
 * Validates one compute operation, checks its output against the quotas
 * (`accepted` operations of this batch are ahead of it, not yet on the
 * stream), allocates the output and appends its item.
 */
static tf_status prepare_op(tfd_conn *c, const Tenferro__Op *op, uint64_t accepted, chain *ch,
                            tf__infer_memo *memo, char *msg, size_t len) {
    tfd_item *it = tfd_item_new(TFD_ITEM_OP);
    if (!it) {
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    tfd_op *d = &it->u.op;
    tf_status st = tfd_op_decode(op, c->srv->opt.test_fault_injection, d, msg, len);
    if (st != TF_OK) {
        tfd_item_free(it);
        return st;
    }
    const tf__op_kind kind = d->kind;
    tf__meta in_meta[2];
    for (int i = 0; i < d->n_inputs; i++) {
        /* A tensor a pending transfer holds is read after the copy: its item is queued behind it. */
        tfd_tensor *t = tfd_readable_tensor(c, op->inputs[i], tf__op_name(kind), i, &st, msg, len);
        if (!t) {
            tfd_item_free(it);
            return st;
        }
        st = tfd_unwritten_settle(c, t, msg, len);
        if (st != TF_OK) {
            tfd_item_free(it);
            return st;
        }
        in_meta[i] = t->meta;
        view_of(t, &d->in[i]);
    }
    tf__meta out_meta;
    st = tfd_op_infer(op, d, memo, in_meta, &out_meta, msg, len);
    if (st != TF_OK) {
        tfd_item_free(it);
        return st;
    }
    if (op->output == 0 || tfd_tensor_table_find(&c->tensors, op->output)) {
        snprintf(msg, len, "%s: output handle %llu is zero or already in use", tf__op_name(kind),
                 (unsigned long long)op->output);
        tfd_item_free(it);
        return TF_ERR_INVALID_ARGUMENT;
    }
    /* The operation writes every byte of its output (the executor zeroes it if the op does not run). */
    st = tfd_quota_check(c, tf__meta_bytes(&out_meta), 1, accepted + 1, msg, len);
    tfd_tensor rec;
    tfd_item *spare = NULL;
    if (st == TF_OK) st = make_output(c, ch, op->output, &out_meta, &rec, &spare, msg, len);
    if (st != TF_OK) {
        tfd_item_free(it);
        return st;
    }
    if (spare) tfd_item_free(spare); /* its block lives on in the new tensor */
    view_of(&rec, &d->out);
    for (int i = 0; i < d->n_inputs; i++) {
        tfd_tensor *t = tfd_tensor_table_find(&c->tensors, op->inputs[i]);
        if (t) order_read(c, t, it);
    }
    chain_push(ch, it);
    if (kind == TF__OP_TEST_FAULT)
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d) queued test_fault: the device will fault",
                (unsigned long long)c->client_id, (int)c->pid);
    return TF_OK;
}

/*
 * What a run item carries: its instance, the run's place in its Submit (a
 * linear-algebra node's failure found on the device names it), and the
 * device pointers of its inputs, then outputs.
 */
typedef struct run_args {
    tfd_prepared_exec *exec;
    uint64_t batch;
    uint32_t index;
    int n_in, n_out;
    size_t *out_bytes;
    void *ptr[]; /* n_in inputs, then n_out outputs */
} run_args;

/* Worker: one run of the prepared graph. */
static tf_status run_prepared(tfd_backend *be, void *native, void *arg, char *msg, size_t len) {
    run_args *a = arg;
    return tfd_prepared_run(be, native, a->exec, a->batch, a->index, a->ptr, a->ptr + a->n_in, msg,
                            len);
}

/* Worker: a run that did not happen (or failed) leaves its outputs holding zeros. */
static void run_skipped(tfd_backend *be, void *native, void *arg) {
    run_args *a = arg;
    for (int o = 0; o < a->n_out; o++)
        if (a->out_bytes[o]) (void)be->vt->fill_zero(be, native, a->ptr[a->n_in + o], a->out_bytes[o]);
}

static void run_drop(void *arg) {
    run_args *a = arg;
    if (a) free(a->out_bytes);
    free(a);
}

/* Takes outputs 0..n-1 of a refused run back out of the table; their blocks go as at creation. */
static void unmake_outputs(tfd_conn *c, chain *ch, const Tenferro__Op *op, int n,
                           tfd_item **spares) {
    for (int o = 0; o < n; o++) {
        tfd_tensor rec;
        if (tfd_tensor_table_remove(&c->tensors, op->outputs[o], &rec) != 0) continue;
        c->srv->counters.tensors_created--;
        drop_block(c, ch, spares[o], rec.data, rec.bytes);
    }
}

/*
 * OP_RUN_PREPARED: the preflight of docs/prepared.md (the graph is this
 * connection's and live, the inputs are its own live tensors of the
 * recorded dtypes and shapes, one a pending transfer holds being read after
 * its copy, the outputs fresh ids), then the outputs' memory under the
 * quotas, then one run item. A refusal changes nothing.
 */
static tf_status prepare_run(tfd_conn *c, const Tenferro__Op *op, uint64_t accepted, chain *ch,
                             uint64_t batch, uint32_t index, char *msg, size_t len) {
    const tfd_prepared_ref *ref = tf__id_table_find(&c->prepared, op->prepared);
    if (!ref || ref->freed) {
        snprintf(msg, len,
                 "run_prepared: prepared graph %llu is not live on this connection (never "
                 "prepared here, or freed)",
                 (unsigned long long)op->prepared);
        return TF_ERR_UNKNOWN_HANDLE;
    }
    tfd_prepared_exec *x = tfd_prepared_exec_of(ref->entry);
    const tfd_graph_plan *p = tfd_prepared_plan(x);
    if (op->n_inputs != (size_t)p->n_inputs || op->n_outputs != (size_t)p->n_outputs) {
        snprintf(msg, len, "run_prepared: the graph takes %d inputs and gives %d outputs; the run "
                           "names %zu and %zu",
                 p->n_inputs, p->n_outputs, op->n_inputs, op->n_outputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    tf_status st = TF_OK;
    for (int i = 0; i < p->n_inputs; i++) {
        tfd_tensor *t = tfd_readable_tensor(c, op->inputs[i], "run_prepared", i, &st, msg, len);
        if (!t) return st;
        const tf__meta *want = &p->values[i].meta;
        if (!tf__meta_same(&t->meta, want)) {
            char got_s[96], want_s[96];
            tf__meta_describe(&t->meta, got_s, sizeof got_s);
            tf__meta_describe(want, want_s, sizeof want_s);
            snprintf(msg, len, "run_prepared input %d: the graph was prepared for %s, tensor %llu is %s",
                     i, want_s, (unsigned long long)op->inputs[i], got_s);
            return t->meta.dtype != want->dtype ? TF_ERR_DTYPE : TF_ERR_SHAPE;
        }
    }
    uint64_t total = 0;
    for (int o = 0; o < p->n_outputs; o++) {
        const uint64_t id = op->outputs[o];
        int repeated = 0;
        for (int j = 0; j < o; j++) repeated |= op->outputs[j] == id;
        if (id == 0 || repeated || tfd_tensor_table_find(&c->tensors, id)) {
            snprintf(msg, len, "run_prepared output %d: handle %llu is zero, repeated or in use", o,
                     (unsigned long long)id);
            return TF_ERR_INVALID_ARGUMENT;
        }
        total += p->values[p->outputs[o]].bytes;
    }
    if ((st = tfd_quota_check(c, total, (uint64_t)p->n_outputs, accepted + 1, msg, len)) != TF_OK)
        return st;
    tfd_item *it = tfd_item_new(TFD_ITEM_RUN);
    run_args *a = malloc(sizeof *a + sizeof(void *) * (size_t)(p->n_inputs + p->n_outputs));
    size_t *out_bytes = calloc((size_t)p->n_outputs, sizeof *out_bytes);
    tfd_item *spares[TFD_GRAPH_MAX_OUTPUTS] = {0};
    if (!it || !a || !out_bytes) {
        tfd_item_free(it);
        free(a);
        free(out_bytes);
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    a->exec = x;
    a->batch = batch;
    a->index = index;
    a->n_in = p->n_inputs;
    a->n_out = p->n_outputs;
    a->out_bytes = out_bytes;
    for (int i = 0; i < p->n_inputs; i++) {
        tfd_tensor *t = tfd_tensor_table_find(&c->tensors, op->inputs[i]);
        if ((st = tfd_unwritten_settle(c, t, msg, len)) != TF_OK) break;
        a->ptr[i] = t->data;
    }
    int made = 0;
    for (int o = 0; o < p->n_outputs && st == TF_OK; o++) {
        tfd_tensor rec;
        st = make_output(c, ch, op->outputs[o], &p->values[p->outputs[o]].meta, &rec, &spares[o],
                         msg, len);
        if (st != TF_OK) break;
        a->ptr[p->n_inputs + o] = rec.data;
        out_bytes[o] = rec.bytes;
        made++;
    }
    if (st != TF_OK) {
        unmake_outputs(c, ch, op, made, spares);
        tfd_item_free(it);
        run_drop(a);
        return st;
    }
    for (int o = 0; o < made; o++)
        if (spares[o]) tfd_item_free(spares[o]);
    it->u.run.fn = run_prepared;
    it->u.run.skipped = run_skipped;
    it->u.run.drop = run_drop;
    it->u.run.arg = a;
    for (int i = 0; i < p->n_inputs; i++) {
        tfd_tensor *t = tfd_tensor_table_find(&c->tensors, op->inputs[i]);
        if (t) order_read(c, t, it);
    }
    chain_push(ch, it);
    c->srv->counters.prepared_runs++;
    return TF_OK;
}

/* What a linear-algebra item carries: the operation and its outputs' sizes. */
typedef struct linalg_args {
    tfd_linalg_op op;
    size_t out_bytes[TF__LINALG_MAX_OUTPUTS];
} linalg_args;

/* Worker: one linear-algebra operation. */
static tf_status run_linalg(tfd_backend *be, void *native, void *arg, char *msg, size_t len) {
    linalg_args *a = arg;
    return tfd_backend_run_linalg(be, native, &a->op, msg, len);
}

/* Worker: an operation that did not run (or failed) leaves every output holding zeros. */
static void linalg_skipped(tfd_backend *be, void *native, void *arg) {
    linalg_args *a = arg;
    for (int o = 0; o < a->op.n_outputs; o++)
        if (a->out_bytes[o]) (void)be->vt->fill_zero(be, native, a->op.out[o].data, a->out_bytes[o]);
}

static void linalg_drop(void *arg) { free(arg); }

/*
 * The copy that puts a permuted input in the descriptor's order: memory of
 * the stream's (no table record), a PERMUTE item writing it, and the FREE
 * item that gives it back after the operation; *view is what the operation
 * reads. On failure nothing is kept.
 */
static tf_status permuted_copy(tfd_conn *c, const tfd_tensor *t, const tf__linalg *l,
                               tfd_item **perm_item, tfd_item **free_item, tfd_tensor_view *view,
                               char *msg, size_t len) {
    tfd_item *pi = tfd_item_new(TFD_ITEM_OP), *fi = tfd_item_new(TFD_ITEM_FREE);
    if (!pi || !fi) {
        tfd_item_free(pi);
        tfd_item_free(fi);
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    tfd_op *d = &pi->u.op;
    tfd_tensor_view in;
    view_of(t, &in);
    tfd_linalg_permute_op(l, &in, d);
    tf_status st = tfd_stream_alloc(c->stream, t->bytes, &d->out.data, msg, len);
    if (st != TF_OK) {
        tfd_item_free(pi);
        tfd_item_free(fi);
        return st;
    }
    fi->u.free.ptr = d->out.data;
    fi->u.free.bytes = t->bytes;
    *view = d->out;
    *perm_item = pi;
    *free_item = fi;
    return TF_OK;
}

/*
 * OP_SVD .. OP_DIAGONAL (docs/linalg.md): the descriptor, the inputs (read
 * after a pending upload like any operation's), the rules, fresh output ids
 * (Op.outputs, as many as the kind makes), their memory under the quotas,
 * then one item, after a copy of the input in the descriptor's order when
 * the split permutes it. A refusal changes nothing.
 */
static tf_status prepare_linalg(tfd_conn *c, const Tenferro__Op *op, uint64_t accepted, chain *ch,
                                uint64_t batch, uint32_t index, char *msg, size_t len) {
    const tf__op_kind kind = (tf__op_kind)op->kind;
    const char *name = tf__op_name(kind);
    linalg_args *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    tfd_linalg_op *lo = &a->op;
    tf_status st = tfd_linalg_decode(op, &lo->desc, msg, len);
    tf__meta in_meta[2], out_meta[TF__LINALG_MAX_OUTPUTS];
    tfd_tensor *in_t[2] = {NULL, NULL};
    lo->kind = kind;
    lo->n_inputs = (int)op->n_inputs;
    for (int i = 0; st == TF_OK && i < lo->n_inputs; i++) {
        in_t[i] = tfd_readable_tensor(c, op->inputs[i], name, i, &st, msg, len);
        if (in_t[i]) st = tfd_unwritten_settle(c, in_t[i], msg, len);
        if (st == TF_OK) {
            in_meta[i] = in_t[i]->meta;
            view_of(in_t[i], &lo->in[i]);
        }
    }
    /* A perm names every axis of the input or is absent: the descriptor cannot tell a short one. */
    if (st == TF_OK && op->linalg->n_perm && op->linalg->n_perm != (size_t)in_meta[0].rank) {
        snprintf(msg, len, "%s: perm has %zu entries for a rank-%d input", name, op->linalg->n_perm,
                 in_meta[0].rank);
        st = TF_ERR_AXIS;
    }
    if (st == TF_OK)
        st = tf__infer_linalg(kind, &lo->desc, in_meta, lo->n_inputs, out_meta, msg, len);
    if (st == TF_OK && op->n_outputs != (size_t)lo->desc.n_outputs) {
        snprintf(msg, len, "%s: these options make %d outputs; the operation names %zu", name,
                 lo->desc.n_outputs, op->n_outputs);
        st = TF_ERR_INVALID_ARGUMENT;
    }
    const int n_out = lo->desc.n_outputs;
    uint64_t total = 0;
    for (int o = 0; st == TF_OK && o < n_out; o++) {
        const uint64_t id = op->outputs[o];
        int repeated = 0;
        for (int j = 0; j < o; j++) repeated |= op->outputs[j] == id;
        if (id == 0 || repeated || tfd_tensor_table_find(&c->tensors, id)) {
            snprintf(msg, len, "%s output %d: handle %llu is zero, repeated or in use", name, o,
                     (unsigned long long)id);
            st = TF_ERR_INVALID_ARGUMENT;
        }
        total += tf__meta_bytes(&out_meta[o]);
    }
    const int permute = st == TF_OK && tfd_linalg_permutes(&lo->desc, in_meta[0].rank);
    if (st == TF_OK)
        st = tfd_quota_check(c, total + (permute ? in_t[0]->bytes : 0), (uint64_t)n_out,
                             accepted + 1, msg, len);
    tfd_item *it = st == TF_OK ? tfd_item_new(TFD_ITEM_RUN) : NULL;
    if (st == TF_OK && !it) {
        snprintf(msg, len, "out of host memory");
        st = TF_ERR_NO_MEMORY;
    }
    tfd_item *perm_item = NULL, *free_item = NULL;
    if (st == TF_OK && permute)
        st = permuted_copy(c, in_t[0], &lo->desc, &perm_item, &free_item, &lo->in[0], msg, len);
    tfd_item *spares[TF__LINALG_MAX_OUTPUTS] = {0};
    int made = 0;
    for (int o = 0; st == TF_OK && o < n_out; o++) {
        tfd_tensor rec;
        st = make_output(c, ch, op->outputs[o], &out_meta[o], &rec, &spares[o], msg, len);
        if (st != TF_OK) break;
        view_of(&rec, &lo->out[o]);
        a->out_bytes[o] = rec.bytes;
        made++;
    }
    if (st != TF_OK) {
        unmake_outputs(c, ch, op, made, spares);
        if (perm_item) {
            c->srv->backend.vt->free(&c->srv->backend, tfd_stream_native(c->stream),
                                     free_item->u.free.ptr, free_item->u.free.bytes);
            tfd_executor_note_free(c->srv->ex, free_item->u.free.bytes);
        }
        tfd_item_free(perm_item);
        tfd_item_free(free_item);
        tfd_item_free(it);
        free(a);
        return st;
    }
    for (int o = 0; o < made; o++)
        if (spares[o]) tfd_item_free(spares[o]);
    lo->n_outputs = n_out;
    lo->batch = batch;
    lo->index = index;
    lo->node = -1;
    it->u.run.fn = run_linalg;
    it->u.run.skipped = linalg_skipped;
    it->u.run.drop = linalg_drop;
    it->u.run.arg = a;
    /* The permuting copy reads the caller's tensor; the operation then reads only its own copy. */
    tfd_item *reader = perm_item ? perm_item : it;
    for (int i = 0; i < lo->n_inputs; i++)
        if (in_t[i]) order_read(c, in_t[i], i == 0 ? reader : it);
    if (perm_item) chain_push(ch, perm_item);
    chain_push(ch, it);
    if (free_item) chain_push(ch, free_item);
    return TF_OK;
}

/*
 * While operation i is checked, asks for what the next ones will read: the
 * decoded operation after next (decoded a while ago, it has left the
 * caches of a long frame), the next one's inputs, and the table slot its
 * output will take.
 */
static void prefetch_ahead(tfd_conn *c, const tfd_batch_job *job, size_t i) {
    if (i + 2 < job->n_ops) {
        const char *op = (const char *)job->ops[i + 2];
        for (size_t at = 0; at < sizeof(Tenferro__Op); at += 64) __builtin_prefetch(op + at);
    }
    if (i + 1 < job->n_ops) {
        const Tenferro__Op *next = job->ops[i + 1];
        if (next->n_inputs) __builtin_prefetch(next->inputs);
        tf__id_table_prefetch(&c->tensors.map, next->output);
    }
}

void tfd_batch_begin(tfd_conn *c, tfd_batch_job *job, Tenferro__Op **ops, size_t n_ops) {
    memset(job, 0, sizeof *job);
    job->ops = ops;
    job->n_ops = n_ops;
    job->result.batch = ++c->srv->next_batch_id;
    if (n_ops > TF__MAX_OPS_PER_SUBMIT) {
        job->result.status = TF_ERR_INVALID_ARGUMENT;
        snprintf(job->result.message, sizeof job->result.message,
                 "a Submit carries %zu operations, at most %d are allowed: send the rest in "
                 "further Submits",
                 n_ops, TF__MAX_OPS_PER_SUBMIT);
        job->done = 1;
        c->srv->counters.batches++;
    }
}

int tfd_batch_step(tfd_conn *c, tfd_batch_job *job, uint64_t budget_ns) {
    tfd_batch_result *out = &job->result;
    if (job->done) return 1;
    uint64_t batch = out->batch, start = tf__now_ns();
    chain ch = {0};
    uint64_t flushed = out->accepted; /* operations already handed to the stream */
    /*
     * The batch's first operation goes to the device at once, unless a
     * queued_ops quota applies: an operation already executed would no longer
     * count, and where such a batch stops would depend on the worker's speed.
     */
    const int first_at_once = !c->srv->opt.client_quota.queued_ops && !c->srv->opt.uid_quota.queued_ops;
    uint64_t chunk = ENQUEUE_CHUNK;
    tf__infer_memo memo = {0}; /* a chain of like operations infers its output once */
    while (job->next < job->n_ops) {
        size_t i = job->next;
        Tenferro__Op *op = job->ops[i];
        prefetch_ahead(c, job, i);
        tfd_item *before = ch.last;
        tf_status st = op->kind == TF__OP_FREE
                           ? prepare_free(c, op, &ch, out->message, sizeof out->message)
                       : op->kind == TF__OP_RUN_PREPARED
                           ? prepare_run(c, op, out->accepted - flushed, &ch, batch, (uint32_t)i,
                                         out->message, sizeof out->message)
                       : op->kind < TF__OP_KIND_COUNT && tf__is_linalg((tf__op_kind)op->kind)
                           ? prepare_linalg(c, op, out->accepted - flushed, &ch, batch,
                                            (uint32_t)i, out->message, sizeof out->message)
                           : prepare_op(c, op, out->accepted - flushed, &ch, &memo, out->message,
                                        sizeof out->message);
        if (st != TF_OK) {
            out->status = st;
            out->has_failed_index = 1;
            out->failed_index = (uint32_t)i;
            c->srv->counters.ops_rejected++;
            job->done = 1;
            break;
        }
        for (tfd_item *it = before ? before->next : ch.first; it; it = it->next) {
            it->batch = batch;
            it->index = (uint32_t)i;
        }
        out->accepted++;
        job->next++;
        /* Hand work over as it is validated, so the device starts while the rest is checked. */
        if (ch.count >= chunk || (first_at_once && out->accepted == 1)) {
            if (ch.count >= chunk && chunk < ENQUEUE_CHUNK_MAX) chunk *= 2;
            chain_flush(c, &ch);
            flushed = out->accepted;
        }
        /* The slice's time is looked at every ENQUEUE_CHUNK operations, however large the chunks. */
        if (budget_ns && job->next % ENQUEUE_CHUNK == 0 && job->next < job->n_ops &&
            tf__now_ns() - start > budget_ns)
            break;
    }
    /* A later slice builds a new chain: this one's spares are freed now, after its items. */
    chain_close(&ch, batch, (uint32_t)(job->next ? job->next - 1 : 0));
    chain_flush(c, &ch);
    c->srv->counters.ops_accepted += out->accepted - job->counted;
    job->counted = out->accepted;
    if (job->next == job->n_ops) job->done = 1;
    if (job->done) c->srv->counters.batches++;
    return job->done;
}
