/*
 * Unit tests of the id-keyed hash table (common/id-table.c) and of the
 * daemon's tensor table built on it (daemon/tensor-table.c).
 *
 * The table uses linear probing with backward-shift deletion and no
 * tombstones, so its one delicate rule is that removing a record must move
 * later members of its probe run back, or a lookup stops early at the hole
 * and a present id looks absent. The tests check that rule directly, on a
 * probe run built to wrap around the end of the table (each id's home slot is
 * observed by inserting it alone into a fresh table), and statistically, with
 * 100,000 ids inserted and removed in random order against a plain reference
 * array. They also check growth (capacity a power of two, load at most 3/4,
 * records intact), each() visiting every record once, and that the tensor
 * table's count and byte total follow every insert and remove.
 *
 * Random ids come from a generator seeded by the clock; the seed is printed,
 * and TFCK_SEED=<n> replays a run.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/id-table.h"
#include "daemon/tensor-table.h"

/* A record as the table stores it: the id first, then a payload that must travel with it. */
typedef struct rec {
    uint64_t id;
    uint64_t value;
    uint32_t tag;
} rec;

/*
 * A check for hot loops: Check's ck_assert records every passing assertion
 * (a write to the parent in fork mode), which would dominate a run of millions
 * of lookups, so these only call into Check on failure.
 */
#define REQUIRE(cond, ...)                       \
    do {                                         \
        if (!(cond)) ck_abort_msg(__VA_ARGS__);  \
    } while (0)

static uint64_t g_seed;
static uint64_t rng_state;

static void rng_reset(void) { rng_state = g_seed; }

/* splitmix64: every seed, 0 included, gives a full-period stream. */
static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle(size_t *a, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rng_next() % i);
        size_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

static tf__id_table table;

static void setup(void) {
    tf__id_table_init(&table, sizeof(rec));
    rng_reset();
}

static void teardown(void) { tf__id_table_free(&table); }

static rec make_rec(uint64_t id) {
    rec r = {id, id * 3 + 1, (uint32_t)(id ^ (id >> 32))};
    return r;
}

static void insert_id(uint64_t id) {
    rec r = make_rec(id);
    REQUIRE(tf__id_table_insert(&table, &r) == 0, "insert of %llu failed", (unsigned long long)id);
}

/* Finds id and checks that its whole record came along. */
static void assert_present(uint64_t id) {
    const rec *r = tf__id_table_find(&table, id);
    REQUIRE(r != NULL, "id %llu not found (seed %llu)", (unsigned long long)id,
                  (unsigned long long)g_seed);
    rec want = make_rec(id);
    REQUIRE(r->id == want.id && r->value == want.value && r->tag == want.tag,
                  "record of id %llu damaged (seed %llu)", (unsigned long long)id,
                  (unsigned long long)g_seed);
}

static void assert_absent(uint64_t id) {
    REQUIRE(tf__id_table_find(&table, id) == NULL, "removed id %llu still found (seed %llu)",
                  (unsigned long long)id, (unsigned long long)g_seed);
}

/* The table's shape invariants: power-of-two capacity, load at most 3/4. */
static void assert_shape(void) {
    REQUIRE(table.capacity == 0 || (table.capacity & (table.capacity - 1)) == 0,
            "capacity %zu is not a power of two", table.capacity);
    REQUIRE(table.count * 4 <= table.capacity * 3, "load %zu/%zu above 3/4", table.count,
            table.capacity);
}

/* The slot an id lands in when it is alone in a fresh table of 64 slots: its home there. */
static size_t home64(uint64_t id) {
    tf__id_table t;
    tf__id_table_init(&t, sizeof(rec));
    rec r = make_rec(id);
    ck_assert_int_eq(tf__id_table_insert(&t, &r), 0);
    ck_assert_uint_eq(t.capacity, 64);
    size_t home = (size_t)((unsigned char *)tf__id_table_find(&t, id) - t.slots) / sizeof(rec);
    tf__id_table_free(&t);
    return home;
}

/* An empty table finds nothing, refuses removals, and treats id 0 as never present. */
START_TEST(test_empty_and_zero) {
    assert_absent(1);
    assert_absent(0);
    rec out = {7, 7, 7};
    ck_assert_int_eq(tf__id_table_remove(&table, 1, &out), -1);
    ck_assert_uint_eq(out.id, 7); /* untouched on failure */
    insert_id(5);
    assert_absent(0);
    ck_assert_int_eq(tf__id_table_remove(&table, 0, NULL), -1);
    ck_assert_int_eq(tf__id_table_remove(&table, 6, NULL), -1);
    ck_assert_uint_eq(table.count, 1);
    ck_assert_int_eq(tf__id_table_remove(&table, 5, &out), 0);
    ck_assert(out.id == 5 && out.value == 16 && out.tag == 5);
    ck_assert_uint_eq(table.count, 0);
    assert_absent(5);
}
END_TEST

/* The table grows by doubling before the load passes 3/4, keeping every record intact. */
START_TEST(test_growth) {
    ck_assert_uint_eq(table.capacity, 0);
    size_t last_cap = 0;
    for (uint64_t id = 1; id <= 5000; id++) {
        insert_id(id);
        assert_shape();
        REQUIRE(table.capacity == last_cap || table.capacity == (last_cap ? last_cap * 2 : 64),
                "capacity went from %zu to %zu", last_cap, table.capacity);
        last_cap = table.capacity;
        if (id == 48) ck_assert_uint_eq(table.capacity, 64); /* 48/64 is exactly 3/4 */
        if (id == 49) ck_assert_uint_eq(table.capacity, 128);
    }
    ck_assert_uint_eq(table.count, 5000);
    for (uint64_t id = 1; id <= 5000; id++) assert_present(id);
    assert_absent(5001);
}
END_TEST

/*
 * Removing any record from a probe run that wraps past the table's end leaves
 * every other record findable, whatever order the run was built in and
 * whatever order it is taken apart in (the backward-shift invariant).
 */
START_TEST(test_backward_shift_wraps) {
    /* Homes chosen so the run starts near the end, wraps, and mixes homes within it. */
    static const size_t want_home[] = {61, 62, 62, 63, 63, 63, 0, 0, 1, 3, 62, 0};
    enum { N = sizeof want_home / sizeof want_home[0] };
    uint64_t ids[N];
    int have[N] = {0};
    for (uint64_t cand = 1; cand < 10000000; cand++) {
        size_t h = home64(cand);
        for (size_t i = 0; i < N; i++)
            if (!have[i] && want_home[i] == h) {
                ids[i] = cand;
                have[i] = 1;
                break;
            }
        size_t got = 0;
        for (size_t i = 0; i < N; i++) got += (size_t)have[i];
        if (got == N) break;
    }
    for (size_t i = 0; i < N; i++) ck_assert_msg(have[i], "no id found for home %zu", want_home[i]);

    size_t order[N], removal[N];
    for (int round = 0; round < 3000; round++) {
        for (size_t i = 0; i < N; i++) order[i] = removal[i] = i;
        if (round > 0) {
            shuffle(order, N);
            shuffle(removal, N);
        }
        tf__id_table_init(&table, sizeof(rec));
        for (size_t i = 0; i < N; i++) insert_id(ids[order[i]]);
        REQUIRE(table.capacity == 64, "capacity %zu", table.capacity);
        /* The run really wraps: the last slot and the first are both taken. */
        uint64_t first, last;
        memcpy(&first, table.slots, sizeof first);
        memcpy(&last, table.slots + 63 * sizeof(rec), sizeof last);
        REQUIRE(first != 0 && last != 0, "the probe run does not wrap");
        int gone[N] = {0};
        for (size_t k = 0; k < N; k++) {
            rec out;
            REQUIRE(tf__id_table_remove(&table, ids[removal[k]], &out) == 0, "remove failed");
            REQUIRE(out.id == ids[removal[k]], "removed the wrong record");
            gone[removal[k]] = 1;
            REQUIRE(table.count == N - k - 1, "count %zu after %zu removals", table.count, k + 1);
            for (size_t i = 0; i < N; i++) {
                if (gone[i])
                    assert_absent(ids[i]);
                else
                    assert_present(ids[i]);
            }
        }
        for (size_t s = 0; s < 64; s++) {
            uint64_t id;
            memcpy(&id, table.slots + s * sizeof(rec), sizeof id);
            REQUIRE(id == 0, "slot %zu not cleared", s);
        }
        tf__id_table_free(&table);
    }
}
END_TEST

enum { STRESS_N = 100000 };

/* Checks the whole reference set against the table. */
static void verify_all(const uint64_t *ids, const unsigned char *in, size_t n) {
    size_t present = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i]) {
            assert_present(ids[i]);
            present++;
        } else {
            assert_absent(ids[i]);
        }
    }
    ck_assert_uint_eq(table.count, present);
    assert_shape();
}

/*
 * Makes n distinct nonzero ids: even positions sequential (clustered homes),
 * odd positions random with bit 40 set and the position in the low 20 bits,
 * which keeps them distinct from each other and from the sequential ones.
 */
static uint64_t *make_ids(size_t n) {
    ck_assert_uint_lt(n, (size_t)1 << 20);
    uint64_t *ids = malloc(n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = (i % 2 == 0) ? (uint64_t)i + 1
                              : (rng_next() & ~(uint64_t)0xFFFFF) | ((uint64_t)1 << 40) | i;
    return ids;
}

/*
 * 100,000 ids inserted in random order, half removed in another random order,
 * then random inserts and removals mixed, then everything removed: after every
 * step the touched id is right, and periodically every id is checked.
 */
START_TEST(test_random_against_reference) {
    uint64_t *ids = make_ids(STRESS_N);
    unsigned char *in = calloc(STRESS_N, 1);
    size_t *order = malloc(STRESS_N * sizeof *order);
    ck_assert(in && order);
    for (size_t i = 0; i < STRESS_N; i++) order[i] = i;

    shuffle(order, STRESS_N);
    for (size_t k = 0; k < STRESS_N; k++) {
        insert_id(ids[order[k]]);
        in[order[k]] = 1;
        assert_present(ids[order[k]]);
        if (k % 20000 == 19999) verify_all(ids, in, STRESS_N);
    }
    verify_all(ids, in, STRESS_N);

    shuffle(order, STRESS_N);
    for (size_t k = 0; k < STRESS_N / 2; k++) {
        REQUIRE(tf__id_table_remove(&table, ids[order[k]], NULL) == 0, "remove failed");
        in[order[k]] = 0;
        assert_absent(ids[order[k]]);
        assert_present(ids[order[STRESS_N - 1 - k]]);
        if (k % 10000 == 9999) verify_all(ids, in, STRESS_N);
    }
    verify_all(ids, in, STRESS_N);

    for (size_t k = 0; k < 200000; k++) {
        size_t i = (size_t)(rng_next() % STRESS_N);
        if (in[i]) {
            rec out;
            REQUIRE(tf__id_table_remove(&table, ids[i], &out) == 0, "remove failed");
            REQUIRE(out.value == make_rec(ids[i]).value, "removed record damaged");
            assert_absent(ids[i]);
        } else {
            insert_id(ids[i]);
            assert_present(ids[i]);
        }
        in[i] ^= 1;
        if (k % 50000 == 49999) verify_all(ids, in, STRESS_N);
    }
    verify_all(ids, in, STRESS_N);

    for (size_t i = 0; i < STRESS_N; i++)
        if (in[i]) {
            REQUIRE(tf__id_table_remove(&table, ids[i], NULL) == 0, "remove failed");
            in[i] = 0;
        }
    ck_assert_uint_eq(table.count, 0);
    verify_all(ids, in, STRESS_N);
    free(ids);
    free(in);
    free(order);
}
END_TEST

typedef struct visit_ctx {
    const uint64_t *ids;
    size_t n;
    unsigned *seen;
    size_t calls;
} visit_ctx;

static void visit(void *record, void *arg) {
    visit_ctx *v = arg;
    const rec *r = record;
    v->calls++;
    for (size_t i = 0; i < v->n; i++)
        if (v->ids[i] == r->id) {
            v->seen[i]++;
            return;
        }
    ck_abort_msg("each() visited unknown id %llu", (unsigned long long)r->id);
}

/* each() visits every present record exactly once and nothing that was removed. */
START_TEST(test_each_visits_once) {
    enum { N = 3000 };
    uint64_t *ids = make_ids(N);
    unsigned seen[N];
    visit_ctx v = {ids, N, seen, 0};
    memset(seen, 0, sizeof seen);
    tf__id_table_each(&table, visit, &v); /* empty: no calls */
    ck_assert_uint_eq(v.calls, 0);
    for (size_t i = 0; i < N; i++) insert_id(ids[i]);
    for (size_t i = 0; i < N; i += 3)
        REQUIRE(tf__id_table_remove(&table, ids[i], NULL) == 0, "remove failed");
    tf__id_table_each(&table, visit, &v);
    ck_assert_uint_eq(v.calls, table.count);
    for (size_t i = 0; i < N; i++)
        REQUIRE(seen[i] == (i % 3 == 0 ? 0u : 1u), "id %zu visited %u times", i, seen[i]);
    free(ids);
}
END_TEST

typedef struct tensor_sum {
    size_t count;
    uint64_t bytes;
} tensor_sum;

static void sum_tensor(tfd_tensor *t, void *arg) {
    tensor_sum *s = arg;
    s->count++;
    s->bytes += t->bytes;
}

/*
 * The tensor table's count and live byte total follow every insert and remove, and each() agrees
 * with them.
 */
START_TEST(test_tensor_table_totals) {
    enum { N = 20000 };
    tfd_tensor_table tt;
    tfd_tensor_table_init(&tt);
    unsigned char *in = calloc(N, 1);
    ck_assert_ptr_nonnull(in);
    size_t count = 0;
    uint64_t bytes = 0;
    for (size_t k = 0; k < 4 * N; k++) {
        size_t i = (size_t)(rng_next() % N);
        uint64_t id = (uint64_t)i * 7919 + 1;
        size_t size = (i % 97) * 64 + 8;
        if (in[i]) {
            tfd_tensor out;
            REQUIRE(tfd_tensor_table_remove(&tt, id, &out) == 0, "remove %llu failed",
                    (unsigned long long)id);
            REQUIRE(out.id == id && out.bytes == size && out.meta.rank == 1 &&
                        out.data == (void *)(uintptr_t)(id << 4),
                    "removed record of %llu damaged", (unsigned long long)id);
            REQUIRE(tfd_tensor_table_find(&tt, id) == NULL, "%llu still found",
                    (unsigned long long)id);
            count--;
            bytes -= size;
        } else {
            tfd_tensor t = {.id = id, .data = (void *)(uintptr_t)(id << 4), .bytes = size};
            t.meta.dtype = TF_F64;
            t.meta.rank = 1;
            t.meta.shape[0] = (int64_t)size / 8;
            REQUIRE(tfd_tensor_table_insert(&tt, &t) == 0, "insert failed");
            tfd_tensor *f = tfd_tensor_table_find(&tt, id);
            REQUIRE(f != NULL && f->bytes == size, "%llu not found after insert",
                    (unsigned long long)id);
            count++;
            bytes += size;
        }
        in[i] ^= 1;
        REQUIRE(tt.count == count && tt.bytes == bytes, "totals %zu/%llu, want %zu/%llu", tt.count,
                (unsigned long long)tt.bytes, count, (unsigned long long)bytes);
    }
    /* A failed removal changes nothing. */
    ck_assert_int_eq(tfd_tensor_table_remove(&tt, (uint64_t)N * 7919 + 1, NULL), -1);
    ck_assert_uint_eq(tt.count, count);
    ck_assert_uint_eq(tt.bytes, bytes);
    tensor_sum sum = {0, 0};
    tfd_tensor_table_each(&tt, sum_tensor, &sum);
    ck_assert_uint_eq(sum.count, count);
    ck_assert_uint_eq(sum.bytes, bytes);
    /* Removing with NULL for the copy still updates the totals. */
    for (size_t i = 0; i < N; i++)
        if (in[i]) REQUIRE(tfd_tensor_table_remove(&tt, (uint64_t)i * 7919 + 1, NULL) == 0, "rm");
    ck_assert_uint_eq(tt.count, 0);
    ck_assert_uint_eq(tt.bytes, 0);
    tfd_tensor_table_destroy(&tt);
    ck_assert_uint_eq(tt.count, 0);
    ck_assert_uint_eq(tt.bytes, 0);
    ck_assert_ptr_null(tfd_tensor_table_find(&tt, 1));
    free(in);
}
END_TEST

static Suite *id_table_suite(void) {
    Suite *s = suite_create("id-table");
    TCase *tc = tcase_create("table");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_empty_and_zero);
    tcase_add_test(tc, test_growth);
    tcase_add_test(tc, test_backward_shift_wraps);
    tcase_add_test(tc, test_random_against_reference);
    tcase_add_test(tc, test_each_visits_once);
    tcase_add_test(tc, test_tensor_table_totals);
    suite_add_tcase(s, tc);
    return s;
}

/* The run's seed: TFCK_SEED when set (to replay a failure), else the clock and the pid. */
static uint64_t choose_seed(void) {
    const char *env = getenv("TFCK_SEED");
    if (env) return strtoull(env, NULL, 10);
    return (uint64_t)time(NULL) * 1000003u + (uint64_t)getpid();
}

int main(void) {
    g_seed = choose_seed();
    printf("test-id-table: seed %llu (TFCK_SEED=%llu replays it)\n", (unsigned long long)g_seed,
           (unsigned long long)g_seed);
    fflush(stdout);
    SRunner *sr = srunner_create(id_table_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
