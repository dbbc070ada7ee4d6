/*
 * Batches: validates the operations a submission carries, one by one, against
 * the connection's tensor table, the shape rules and the quotas (quota.c),
 * allocates each output on the connection's stream, and enqueues the accepted
 * prefix. The first invalid (or over-quota) operation stops the batch:
 * everything before it stays enqueued and valid, nothing from it on is
 * created, and the result names its index.
 */
#include <stdio.h>
#include <string.h>

#include "daemon/batch.h"
#include "daemon/conn.h"
#include "daemon/quota.h"
#include "daemon/server.h"

_Static_assert((int)TF__OP_ADD == TENFERRO__OP_KIND__OP_ADD, "op kinds match the proto");
_Static_assert((int)TF__OP_MATMUL == TENFERRO__OP_KIND__OP_MATMUL, "op kinds match the proto");
_Static_assert((int)TF__OP_FREE == TENFERRO__OP_KIND__OP_FREE, "op kinds match the proto");

tf_status tfd_free_tensor_storage(tfd_conn *c, const tfd_tensor *rec) {
    tfd_item *it = tfd_item_new(TFD_ITEM_FREE);
    if (!it) return TF_ERR_NO_MEMORY;
    it->u.free.ptr = rec->data;
    it->u.free.bytes = rec->bytes;
    tfd_stream_enqueue(c->stream, it, it, 1);
    return TF_OK;
}

tfd_tensor *tfd_usable_tensor(tfd_conn *c, uint64_t id, const char *what, int input,
                              tf_status *status, char *msg, size_t msg_len) {
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, id);
    if (t && !t->in_flight) return t;
    /* Named only now: formatting the label for every tensor that is fine would cost each operation. */
    char label[48];
    if (input >= 0)
        snprintf(label, sizeof label, "%s input %d", what, input);
    else
        snprintf(label, sizeof label, "%s", what);
    if (!t) {
        snprintf(msg, msg_len, "%s: tensor %llu is not live on this connection", label,
                 (unsigned long long)id);
        *status = TF_ERR_UNKNOWN_HANDLE;
    } else {
        snprintf(msg, msg_len, "%s: tensor %llu is in a pending transfer: wait for it first",
                 label, (unsigned long long)id);
        *status = TF_ERR_BUSY;
    }
    return NULL;
}

/* Copies a table record into a kernel's view of it. */
static void view_of(const tfd_tensor *t, tfd_tensor_view *v) {
    v->dtype = t->meta.dtype;
    v->rank = t->meta.rank;
    memcpy(v->shape, t->meta.shape, sizeof v->shape);
    v->numel = tf__meta_numel(&t->meta);
    v->data = t->data;
}

/* Validated items are handed to the stream in chunks of this many while a batch is checked. */
#define ENQUEUE_CHUNK 64

/* A chain of items being built for one submission. */
typedef struct chain {
    tfd_item *first, *last;
    uint64_t count;
} chain;

static void chain_push(chain *ch, tfd_item *it) {
    if (ch->last)
        ch->last->next = it;
    else
        ch->first = it;
    ch->last = it;
    ch->count++;
}

/*
 * Validates and prepares a FREE operation: every named tensor must exist and
 * be in no transfer. Its items are made before any tensor leaves the table,
 * so an operation refused for want of memory frees nothing.
 */
static tf_status prepare_free(tfd_conn *c, const Tenferro__Op *op, chain *ch, char *msg, size_t len) {
    tf_status st;
    for (size_t i = 0; i < op->n_inputs; i++)
        if (!tfd_usable_tensor(c, op->inputs[i], "free", -1, &st, msg, len)) return st;
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
            chain_push(ch, it);
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
                            char *msg, size_t len) {
    tf__op_kind kind = (tf__op_kind)op->kind;
    int arity = tf__op_arity(kind);
    if (op->kind >= TF__OP_KIND_COUNT || arity <= 0) {
        snprintf(msg, len, "unknown operation kind %u", op->kind);
        return TF_ERR_UNSUPPORTED;
    }
    if ((int)op->n_inputs != arity) {
        snprintf(msg, len, "%s takes %d inputs, got %zu", tf__op_name(kind), arity, op->n_inputs);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (op->n_params > TF_MAX_RANK) {
        snprintf(msg, len, "%s: %zu parameters, at most %d allowed", tf__op_name(kind), op->n_params,
                 TF_MAX_RANK);
        return TF_ERR_AXIS;
    }
    tfd_item *it = tfd_item_new(TFD_ITEM_OP);
    if (!it) {
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    tfd_op *d = &it->u.op;
    tf__meta in_meta[2];
    for (int i = 0; i < arity; i++) {
        tf_status st;
        tfd_tensor *t = tfd_usable_tensor(c, op->inputs[i], tf__op_name(kind), i, &st, msg, len);
        if (!t) {
            tfd_item_free(it);
            return st;
        }
        in_meta[i] = t->meta;
        view_of(t, &d->in[i]);
    }
    tf__meta out_meta;
    tf_status st = tf__infer_output(kind, in_meta, arity, op->params, (int)op->n_params, op->flags,
                                    &out_meta, msg, len);
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
    tfd_tensor rec = {.id = op->output, .meta = out_meta, .bytes = tf__meta_bytes(&out_meta)};
    st = tfd_quota_check(c, rec.bytes, 1, accepted + 1, msg, len);
    if (st == TF_OK) st = tfd_stream_alloc(c->stream, rec.bytes, &rec.data, msg, len);
    if (st != TF_OK) {
        tfd_item_free(it);
        return st;
    }
    if (tfd_tensor_table_insert(&c->tensors, &rec) != 0) {
        c->srv->backend.vt->free(&c->srv->backend, tfd_stream_native(c->stream), rec.data,
                                 rec.bytes);
        tfd_executor_note_free(c->srv->ex, rec.bytes);
        snprintf(msg, len, "out of host memory");
        tfd_item_free(it);
        return TF_ERR_NO_MEMORY;
    }
    c->srv->counters.tensors_created++;
    d->kind = kind;
    d->n_inputs = arity;
    view_of(&rec, &d->out);
    d->n_params = (int)op->n_params;
    for (size_t i = 0; i < op->n_params; i++) d->params[i] = op->params[i];
    d->flags = op->flags;
    d->alpha.re = op->alpha_re;
    d->alpha.im = op->alpha_im;
    d->beta.re = op->beta_re;
    d->beta.im = op->beta_im;
    chain_push(ch, it);
    return TF_OK;
}

void tfd_batch_enqueue(tfd_conn *c, Tenferro__Op **ops, size_t n_ops, tfd_batch_result *out) {
    memset(out, 0, sizeof *out);
    uint64_t batch = ++c->srv->next_batch_id;
    out->batch = batch;
    chain ch = {0};
    uint64_t flushed = 0; /* operations already handed to the stream */
    for (size_t i = 0; i < n_ops; i++) {
        tfd_item *before = ch.last;
        tf_status st = ops[i]->kind == TF__OP_FREE
                           ? prepare_free(c, ops[i], &ch, out->message, sizeof out->message)
                           : prepare_op(c, ops[i], out->accepted - flushed, &ch, out->message,
                                        sizeof out->message);
        if (st != TF_OK) {
            out->status = st;
            out->has_failed_index = 1;
            out->failed_index = (uint32_t)i;
            c->srv->counters.ops_rejected++;
            break;
        }
        for (tfd_item *it = before ? before->next : ch.first; it; it = it->next) {
            it->batch = batch;
            it->index = (uint32_t)i;
        }
        out->accepted++;
        /* Hand work over as it is validated, so the device starts while the rest is checked. */
        if (ch.count >= ENQUEUE_CHUNK) {
            tfd_stream_enqueue(c->stream, ch.first, ch.last, ch.count);
            ch = (chain){0};
            flushed = out->accepted;
        }
    }
    c->srv->counters.batches++;
    c->srv->counters.ops_accepted += out->accepted;
    tfd_stream_enqueue(c->stream, ch.first, ch.last, ch.count);
}
