/* The id-keyed hash table (see id-table.h). */
#include <stdlib.h>
#include <string.h>

#include "common/id-table.h"

static uint64_t id_at(const tf__id_table *t, size_t i) { return t->keys[i]; }

static void *slot(const tf__id_table *t, size_t i) { return t->slots + i * t->record_size; }

/* Mixes sequential ids so probe runs stay short. */
static size_t home_of(uint64_t id, size_t capacity) {
    id ^= id >> 33;
    id *= 0xff51afd7ed558ccdULL;
    id ^= id >> 33;
    return (size_t)id & (capacity - 1);
}

void tf__id_table_init(tf__id_table *t, size_t record_size) {
    memset(t, 0, sizeof *t);
    t->record_size = record_size;
}

void tf__id_table_free(tf__id_table *t) {
    free(t->keys);
    t->keys = NULL;
    t->slots = NULL;
    t->capacity = t->count = 0;
}

void *tf__id_table_find(const tf__id_table *t, uint64_t id) {
    if (id == 0 || t->capacity == 0) return NULL;
    for (size_t i = home_of(id, t->capacity);; i = (i + 1) & (t->capacity - 1)) {
        uint64_t here = id_at(t, i);
        if (here == id) return slot(t, i);
        if (here == 0) return NULL;
    }
}

void tf__id_table_prefetch(const tf__id_table *t, uint64_t id) {
    if (t->capacity == 0) return;
    const size_t i = home_of(id, t->capacity);
    __builtin_prefetch(&t->keys[i], 1);
    __builtin_prefetch(slot(t, i), 1);
    __builtin_prefetch((const char *)slot(t, i) + t->record_size - 1, 1);
}

/* Doubles the table (or creates it) and reinserts every record. */
static int grow(tf__id_table *t) {
    size_t cap = t->capacity ? t->capacity * 2 : 64;
    uint64_t *keys = calloc(cap, sizeof(uint64_t) + t->record_size);
    if (!keys) return -1;
    tf__id_table bigger = {keys, (unsigned char *)(keys + cap), t->record_size, cap, 0};
    for (size_t i = 0; i < t->capacity; i++) {
        uint64_t id = id_at(t, i);
        if (!id) continue;
        size_t j = home_of(id, cap);
        while (id_at(&bigger, j)) j = (j + 1) & (cap - 1);
        bigger.keys[j] = id;
        memcpy(slot(&bigger, j), slot(t, i), t->record_size);
    }
    free(t->keys);
    t->keys = bigger.keys;
    t->slots = bigger.slots;
    t->capacity = cap;
    return 0;
}

int tf__id_table_insert(tf__id_table *t, const void *record) {
    if ((t->count + 1) * 4 > t->capacity * 3 && grow(t) != 0) return -1;
    uint64_t id;
    memcpy(&id, record, sizeof id);
    size_t i = home_of(id, t->capacity);
    while (id_at(t, i)) i = (i + 1) & (t->capacity - 1);
    t->keys[i] = id;
    memcpy(slot(t, i), record, t->record_size);
    t->count++;
    return 0;
}

int tf__id_table_remove(tf__id_table *t, uint64_t id, void *removed) {
    unsigned char *found = tf__id_table_find(t, id);
    if (!found) return -1;
    if (removed) memcpy(removed, found, t->record_size);
    t->count--;
    size_t mask = t->capacity - 1;
    size_t hole = (size_t)(found - t->slots) / t->record_size;
    /* Shift later members of the probe run back so no lookup stops early at the hole. */
    for (size_t j = (hole + 1) & mask; id_at(t, j); j = (j + 1) & mask) {
        size_t home = home_of(id_at(t, j), t->capacity);
        int movable = (j > hole) ? (home <= hole || home > j) : (home <= hole && home > j);
        if (movable) {
            t->keys[hole] = t->keys[j];
            memcpy(slot(t, hole), slot(t, j), t->record_size);
            hole = j;
        }
    }
    t->keys[hole] = 0;
    memset(slot(t, hole), 0, t->record_size);
    return 0;
}

void tf__id_table_each(tf__id_table *t, void (*fn)(void *record, void *arg), void *arg) {
    for (size_t i = 0; i < t->capacity; i++)
        if (id_at(t, i)) fn(slot(t, i), arg);
}
