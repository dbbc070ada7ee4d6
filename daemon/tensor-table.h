/*
 * The per-connection tensor table: handle id -> tensor record.
 *
 * Handles are chosen by the client, so the table is the only place a handle
 * means anything: one connection's table never sees another connection's ids,
 * which is what makes "a client can never name another client's tensor" true.
 * Loop thread only. Also keeps the live byte count for status and quotas.
 */
#ifndef TENFERRO_DAEMON_TENSOR_TABLE_H
#define TENFERRO_DAEMON_TENSOR_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "common/id-table.h"
#include "common/ops.h"

/*
 * What a pending transfer does with a tensor it holds (tfd_tensor.in_flight).
 * Either way operations may read the tensor (their items are queued on the
 * stream behind the copy); nothing may write, free or transfer it again.
 */
enum {
    TFD_FLIGHT_NONE = 0,  /* in no transfer */
    TFD_FLIGHT_READ = 1,  /* a pending download reads it */
    TFD_FLIGHT_WRITE = 2, /* a pending upload writes it */
    TFD_FLIGHT_PEER = 3,  /* offered to another daemon, which copies it (peer-offer.c) */
};

typedef struct tfd_tensor {
    uint64_t id; /* first: the id-table key */
    tf__meta meta;
    void *data;  /* device memory */
    size_t bytes;
    size_t written; /* bytes [0, written) were written by this client (or zeroed); see unwritten.h */
    int in_flight; /* TFD_FLIGHT_*: a pending transfer holds it; operations may still read it */
    /*
     * Order beside the copy queue (sync-point.h), where the backend has one:
     * copy_done is the pending upload that writes it (operations reading it
     * wait for that); once a transfer has used it, it is tracked and
     * last_read is the last operation that read it (the next upload into it
     * waits for that one, not for everything before).
     */
    struct tfd_sync_point *copy_done, *last_read;
    int tracked;
} tfd_tensor;

typedef struct tfd_tensor_table {
    tf__id_table map;
    size_t count;
    uint64_t bytes; /* sum of live tensors' bytes */
} tfd_tensor_table;

void tfd_tensor_table_init(tfd_tensor_table *t);
void tfd_tensor_table_destroy(tfd_tensor_table *t);

/* The record for id, or NULL. The pointer is valid until the next insert or remove. */
tfd_tensor *tfd_tensor_table_find(tfd_tensor_table *t, uint64_t id);

/* Inserts a copy of *rec (rec->id must not be present); -1 when out of memory. */
int tfd_tensor_table_insert(tfd_tensor_table *t, const tfd_tensor *rec);

/* Removes id, copying its record into *removed; -1 when absent. */
int tfd_tensor_table_remove(tfd_tensor_table *t, uint64_t id, tfd_tensor *removed);

/* Calls fn on every record; fn must not insert or remove. */
void tfd_tensor_table_each(tfd_tensor_table *t, void (*fn)(tfd_tensor *rec, void *arg), void *arg);

/* The lifecycle of a connection's tensors (tensor-table.c). */
typedef struct tfd_conn tfd_conn;

/*
 * The tensor `id` of this connection when an operation may read it: live.
 * A tensor a pending transfer holds is readable too: the operation's item
 * is queued on the stream behind the copy, which was queued when the
 * transfer was accepted. Otherwise NULL, with TF_ERR_UNKNOWN_HANDLE in
 * *status and a message starting with `what` (then "input N" when
 * input >= 0) in msg.
 */
tfd_tensor *tfd_readable_tensor(tfd_conn *c, uint64_t id, const char *what, int input,
                                tf_status *status, char *msg, size_t msg_len);

/*
 * The tensor `id` of this connection when a request may write, free or
 * transfer it: live, and in no pending transfer. Otherwise NULL, with the
 * typed status in *status (TF_ERR_UNKNOWN_HANDLE, or TF_ERR_BUSY saying
 * which transfer holds it and that it cannot be `use`, e.g. "freed") and a
 * message starting with `what` in msg.
 */
tfd_tensor *tfd_usable_tensor(tfd_conn *c, uint64_t id, const char *what, const char *use,
                              tf_status *status, char *msg, size_t msg_len);

/*
 * Frees a tensor's device memory: at once when nothing queued or running can
 * read it on a backend that finishes in the call (tfd_stream_free_if_idle),
 * else through a FREE item behind everything queued on the stream; the caller
 * then removes the record from the table. Returns
 * TF_ERR_NO_MEMORY when no item can be made: nothing changed, the caller keeps
 * the record, and the connection's final free (tfd_conn_maybe_free) releases
 * it once its stream is idle, so memory a queued item may read is never freed
 * early and never lost.
 */
tf_status tfd_free_tensor_storage(tfd_conn *c, const tfd_tensor *rec);

/*
 * Frees tensor t of c (tfd_free_tensor_storage), then removes it from the
 * table and counts it freed; TF_ERR_NO_MEMORY leaves it in the table.
 */
tf_status tfd_tensor_drop(tfd_conn *c, const tfd_tensor *t);

/*
 * Makes tensor rec (id, meta and bytes set) on c: checks the quotas, takes
 * its memory on c's stream and records it in c's table. On failure nothing
 * is kept and msg says why.
 */
tf_status tfd_tensor_create(tfd_conn *c, tfd_tensor *rec, char *msg, size_t len);

/*
 * Fills rec for a new tensor `id` of dtype and shape (n_shape dimensions)
 * after checking that the id is free on c and the shape is one a tensor may
 * have; nothing is allocated.
 */
tf_status tfd_tensor_record_new(tfd_conn *c, uint64_t id, uint32_t dtype, size_t n_shape,
                                const int64_t *shape, tfd_tensor *rec, char *msg, size_t len);

#endif
