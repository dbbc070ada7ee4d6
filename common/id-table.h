/*
 * A hash table of fixed-size records keyed by a nonzero 64-bit id stored in
 * the record's first field. Open addressing with linear probing and
 * backward-shift deletion (no tombstones). The ids also sit in an array of
 * their own beside the records, so a probe walks 8-byte keys (eight to a
 * cache line) rather than whole records: looking up an id that is absent, as
 * every new output's does, touches one or two lines of a compact array
 * instead of a cold record. The daemon's per-connection tensor table and the
 * client's handle table are both this table.
 */
#ifndef TENFERRO_COMMON_ID_TABLE_H
#define TENFERRO_COMMON_ID_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tf__id_table {
    uint64_t *keys;      /* the id in each slot, 0 for an empty one; one allocation with slots */
    unsigned char *slots; /* the records, in the same slots as their keys */
    size_t record_size; /* bytes per record; the record starts with its uint64_t id */
    size_t capacity;    /* a power of two, or 0 before the first insert */
    size_t count;
} tf__id_table;

void tf__id_table_init(tf__id_table *t, size_t record_size);
void tf__id_table_free(tf__id_table *t);

/* The record with this id, or NULL; valid until the next insert or remove. */
void *tf__id_table_find(const tf__id_table *t, uint64_t id);

/*
 * Asks the processor for the lines a lookup or an insert of id will touch
 * first (its home key and record), without waiting for them: a caller that
 * knows the next id it will look up hides the miss behind its current work.
 */
void tf__id_table_prefetch(const tf__id_table *t, uint64_t id);

/* Copies a record (whose id must be absent and nonzero) in; -1 when out of memory. */
int tf__id_table_insert(tf__id_table *t, const void *record);

/* Removes the record with this id, copying it to *removed when not NULL; -1 when absent. */
int tf__id_table_remove(tf__id_table *t, uint64_t id, void *removed);

/* Calls fn on every record; fn must not insert or remove. */
void tf__id_table_each(tf__id_table *t, void (*fn)(void *record, void *arg), void *arg);

#endif
