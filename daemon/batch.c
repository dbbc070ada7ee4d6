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
#include <string.h>

#include "common/spin.h"
#include "daemon/batch.h"
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/op-decode.h"
#include "daemon/quota.h"
#include "daemon/server.h"
#include "daemon/unwritten.h"


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

/* Hands the chain's items to the stream; its spares stay with it for later items. */
static void chain_flush(tfd_conn *c, chain *ch) {
    tfd_stream_enqueue(c->stream, ch->first, ch->last, ch->count);
    ch->first = ch->last = NULL;
    ch->count = 0;
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
                            char *msg, size_t len) {
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
        tfd_tensor *t = tfd_usable_tensor(c, op->inputs[i], tf__op_name(kind), i, &st, msg, len);
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
    st = tfd_op_infer(op, d, in_meta, &out_meta, msg, len);
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
    size_t out_bytes = tf__meta_bytes(&out_meta);
    /* The operation writes every byte of its output (the executor zeroes it if the op does not run). */
    tfd_tensor rec = {.id = op->output, .meta = out_meta, .bytes = out_bytes, .written = out_bytes};
    st = tfd_quota_check(c, rec.bytes, 1, accepted + 1, msg, len);
    /* A block this chain freed earlier serves if it has the size (chain.spare); else a new one. */
    tfd_item *spare = st == TF_OK && rec.bytes ? chain_take_spare(ch, rec.bytes) : NULL;
    if (spare)
        rec.data = spare->u.free.ptr;
    else if (st == TF_OK)
        st = tfd_stream_alloc(c->stream, rec.bytes, &rec.data, msg, len);
    if (st != TF_OK) {
        tfd_item_free(it);
        return st;
    }
    if (tfd_tensor_table_insert(&c->tensors, &rec) != 0) {
        /* A spare may still be read by earlier items: it goes back to the chain, never freed here. */
        if (spare) {
            chain_free(ch, spare);
        } else {
            c->srv->backend.vt->free(&c->srv->backend, tfd_stream_native(c->stream), rec.data,
                                     rec.bytes);
            tfd_executor_note_free(c->srv->ex, rec.bytes);
        }
        snprintf(msg, len, "out of host memory");
        tfd_item_free(it);
        return TF_ERR_NO_MEMORY;
    }
    if (spare) tfd_item_free(spare); /* its block lives on in the new tensor */
    c->srv->counters.tensors_created++;
    view_of(&rec, &d->out);
    chain_push(ch, it);
    if (kind == TF__OP_TEST_FAULT)
        tfd_log(TFD_LOG_WARN, "client %llu (pid %d) queued test_fault: the device will fault",
                (unsigned long long)c->client_id, (int)c->pid);
    return TF_OK;
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
    while (job->next < job->n_ops) {
        size_t i = job->next;
        Tenferro__Op *op = job->ops[i];
        tfd_item *before = ch.last;
        tf_status st = op->kind == TF__OP_FREE
                           ? prepare_free(c, op, &ch, out->message, sizeof out->message)
                           : prepare_op(c, op, out->accepted - flushed, &ch, out->message,
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
        /*
         * Hand work over as it is validated, so the device starts while the
         * rest is checked: the batch's first operation at once, then chunks.
         */
        if (ch.count >= ENQUEUE_CHUNK || out->accepted == 1) {
            chain_flush(c, &ch);
            flushed = out->accepted;
            if (budget_ns && job->next < job->n_ops && tf__now_ns() - start > budget_ns) break;
        }
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
