/*
 * The tensor table (see tensor-table.h): the id table plus live counts, and
 * the lifecycle of a connection's tensors (records, storage, lookups that
 * refuse with a typed error).
 */
#include <stdio.h>
#include <string.h>

#include "daemon/connection.h"
#include "daemon/executor.h"
#include "daemon/item-pool.h"
#include "daemon/quota.h"
#include "daemon/server.h"
#include "daemon/sync-point.h"
#include "daemon/tensor-table.h"

void tfd_tensor_table_init(tfd_tensor_table *t) {
    memset(t, 0, sizeof *t);
    tf__id_table_init(&t->map, sizeof(tfd_tensor));
}

/* Drops the sync points a record holds. */
static void drop_points(tfd_tensor *rec) {
    tfd_sync_point_unref(rec->copy_done);
    tfd_sync_point_unref(rec->last_read);
    rec->copy_done = rec->last_read = NULL;
}

static void drop_points_of(void *record, void *arg) {
    (void)arg;
    drop_points(record);
}

void tfd_tensor_table_destroy(tfd_tensor_table *t) {
    tf__id_table_each(&t->map, drop_points_of, NULL);
    tf__id_table_free(&t->map);
    t->count = 0;
    t->bytes = 0;
}

tfd_tensor *tfd_tensor_table_find(tfd_tensor_table *t, uint64_t id) {
    return tf__id_table_find(&t->map, id);
}

int tfd_tensor_table_insert(tfd_tensor_table *t, const tfd_tensor *rec) {
    if (tf__id_table_insert(&t->map, rec) != 0) return -1;
    t->count++;
    t->bytes += rec->bytes;
    return 0;
}

int tfd_tensor_table_remove(tfd_tensor_table *t, uint64_t id, tfd_tensor *removed) {
    tfd_tensor rec;
    if (tf__id_table_remove(&t->map, id, &rec) != 0) return -1;
    t->count--;
    t->bytes -= rec.bytes;
    drop_points(&rec);
    if (removed) *removed = rec;
    return 0;
}

typedef struct each_ctx {
    void (*fn)(tfd_tensor *rec, void *arg);
    void *arg;
} each_ctx;

static void each_adapter(void *record, void *arg) {
    each_ctx *ctx = arg;
    ctx->fn(record, ctx->arg);
}

void tfd_tensor_table_each(tfd_tensor_table *t, void (*fn)(tfd_tensor *rec, void *arg), void *arg) {
    each_ctx ctx = {fn, arg};
    tf__id_table_each(&t->map, each_adapter, &ctx);
}

tf_status tfd_tensor_record_new(tfd_conn *c, uint64_t id, uint32_t dtype, size_t n_shape,
                                const int64_t *shape, tfd_tensor *rec, char *msg, size_t len) {
    memset(rec, 0, sizeof *rec);
    if (id == 0 || tfd_tensor_table_find(&c->tensors, id)) {
        snprintf(msg, len, "tensor handle %llu is zero or already in use on this connection",
                 (unsigned long long)id);
        return TF_ERR_INVALID_ARGUMENT;
    }
    if (n_shape > TF_MAX_RANK) {
        snprintf(msg, len, "rank %zu is above the maximum of %d", n_shape, TF_MAX_RANK);
        return TF_ERR_BAD_SHAPE;
    }
    rec->id = id;
    rec->meta.dtype = (tf_dtype)dtype;
    rec->meta.rank = (int)n_shape;
    for (size_t i = 0; i < n_shape; i++) rec->meta.shape[i] = shape[i];
    tf_status st = tf__check_new_meta(rec->meta.dtype, rec->meta.rank, rec->meta.shape, msg, len);
    if (st == TF_OK) rec->bytes = tf__meta_bytes(&rec->meta);
    return st;
}

tf_status tfd_tensor_create(tfd_conn *c, tfd_tensor *rec, char *msg, size_t len) {
    tf_status st = tfd_quota_check(c, rec->bytes, 1, 0, msg, len);
    if (st == TF_OK) st = tfd_stream_alloc(c->stream, rec->bytes, &rec->data, msg, len);
    if (st != TF_OK) return st;
    if (tfd_tensor_table_insert(&c->tensors, rec) != 0) {
        /* No item has seen the new memory: it goes at once, needing no FREE item. */
        c->srv->backend.vt->free(&c->srv->backend, tfd_stream_native(c->stream), rec->data, rec->bytes);
        tfd_executor_note_free(c->srv->ex, rec->bytes);
        snprintf(msg, len, "out of host memory");
        return TF_ERR_NO_MEMORY;
    }
    c->srv->counters.tensors_created++;
    return TF_OK;
}

tf_status tfd_tensor_drop(tfd_conn *c, const tfd_tensor *t) {
    const uint64_t id = t->id;
    tf_status st = tfd_free_tensor_storage(c, t);
    if (st != TF_OK) return st;
    tfd_tensor_table_remove(&c->tensors, id, NULL);
    c->srv->counters.tensors_freed++;
    return TF_OK;
}

tf_status tfd_free_tensor_storage(tfd_conn *c, const tfd_tensor *rec) {
    /* Nothing queued or running can read it: freed here, sparing a worker's wake-up. */
    if (tfd_stream_free_if_idle(c->stream, rec->data, rec->bytes)) return TF_OK;
    tfd_item *it = tfd_item_new(TFD_ITEM_FREE);
    if (!it) return TF_ERR_NO_MEMORY;
    it->u.free.ptr = rec->data;
    it->u.free.bytes = rec->bytes;
    tfd_stream_enqueue(c->stream, it, it, 1);
    return TF_OK;
}

/*
 * The label a refusal names its tensor by: `what`, then "input N" when
 * input >= 0. Formatted only on refusal: a label for every tensor that is
 * fine would cost each operation.
 */
static void refusal_label(const char *what, int input, char *label, size_t len) {
    if (input >= 0)
        snprintf(label, len, "%s input %d", what, input);
    else
        snprintf(label, len, "%s", what);
}

tfd_tensor *tfd_readable_tensor(tfd_conn *c, uint64_t id, const char *what, int input,
                                tf_status *status, char *msg, size_t msg_len) {
    tfd_tensor *t = tfd_tensor_table_find(&c->tensors, id);
    if (t) return t;
    char label[48];
    refusal_label(what, input, label, sizeof label);
    snprintf(msg, msg_len, "%s: tensor %llu is not live on this connection", label,
             (unsigned long long)id);
    *status = TF_ERR_UNKNOWN_HANDLE;
    return NULL;
}

tfd_tensor *tfd_usable_tensor(tfd_conn *c, uint64_t id, const char *what, const char *use,
                              tf_status *status, char *msg, size_t msg_len) {
    tfd_tensor *t = tfd_readable_tensor(c, id, what, -1, status, msg, msg_len);
    if (!t || !t->in_flight) return t;
    snprintf(msg, msg_len,
             "%s: tensor %llu is in a pending transfer (%s): it cannot be %s until the transfer "
             "has completed; operations may read it meanwhile",
             what, (unsigned long long)id,
             t->in_flight == TFD_FLIGHT_WRITE  ? "an upload writing it"
             : t->in_flight == TFD_FLIGHT_PEER ? "a copy to another daemon reading it"
                                               : "a download reading it",
             use);
    *status = TF_ERR_BUSY;
    return NULL;
}
