/* The tensor table (see tensor-table.h): the id table plus live counts. */
#include <string.h>

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
