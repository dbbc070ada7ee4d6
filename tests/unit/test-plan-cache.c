/*
 * Unit tests of the daemon-wide plan cache (daemon/backend/plan-cache.c).
 *
 * The FFT backends keep their FFTW and cuFFT plans in it, so its contract is
 * what a client sees in `tenferroctl status`: a second lookup of a key is a
 * hit and a made plan a miss; the LRU bound pushes out the least recently
 * used entry (an eviction), never more than the bound stays; an entry in use
 * when it is pushed out or cleared is destroyed only when its last user
 * gives it back; a shared cache hands one entry to many users, an exclusive
 * one to one user at a time (a second user of a busy key gets nothing and
 * inserts another entry under the same key); clearing (trim) empties it; a
 * destroy callback that declines (it may not wait on this thread) gets the
 * value back at the next drain, and at the cache's end; and many threads
 * hammering it lose no entry and destroy nothing twice.
 */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/backend/plan-cache.h"

/* A key as the FFT caches use them: fixed size, compared bytewise. */
typedef struct test_key {
    int64_t shape[4];
    int kind;
} test_key;

/* A value that records its destruction. */
typedef struct test_value {
    int id;
    int destroyed;
} test_value;

static int g_destroyed;
static int g_decline; /* the callback declines unless it must */

static int destroy_value(void *value, void *arg, int must) {
    (void)arg;
    if (g_decline && !must) return 0;
    test_value *v = value;
    ck_assert_msg(!v->destroyed, "value %d destroyed twice", v->id);
    v->destroyed = 1;
    __atomic_add_fetch(&g_destroyed, 1, __ATOMIC_RELAXED);
    return 1;
}

static test_key key_of(int n) {
    test_key k;
    memset(&k, 0, sizeof k);
    k.shape[0] = n;
    k.kind = 1;
    return k;
}

/* Looks key n up, inserting value v on a miss; returns the taken entry. */
static tfd_plan_entry *get(tfd_plan_cache *c, int n, test_value *v) {
    test_key k = key_of(n);
    tfd_plan_entry *e = tfd_plan_cache_acquire(c, &k);
    if (!e) e = tfd_plan_cache_insert(c, &k, v, 100);
    ck_assert_ptr_nonnull(e);
    return e;
}

static void expect_stats(tfd_plan_cache *c, uint64_t entries, uint64_t hits, uint64_t misses,
                         uint64_t evictions) {
    tfd_cache_stats s;
    tfd_plan_cache_stats(c, &s);
    ck_assert_str_eq(s.name, "test_plans");
    ck_assert_msg(s.entries == entries && s.hits == hits && s.misses == misses &&
                      s.evictions == evictions,
                  "entries %llu hits %llu misses %llu evictions %llu, expected %llu %llu %llu %llu",
                  (unsigned long long)s.entries, (unsigned long long)s.hits,
                  (unsigned long long)s.misses, (unsigned long long)s.evictions,
                  (unsigned long long)entries, (unsigned long long)hits,
                  (unsigned long long)misses, (unsigned long long)evictions);
    ck_assert_uint_eq(s.bytes, 100 * entries);
}

/* A second lookup of a key is a hit on the same value; different keys are different entries. */
START_TEST(test_hit_and_miss) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 8, 0, destroy_value, NULL), 0);
    test_value a = {1, 0}, b = {2, 0};
    tfd_plan_entry *e = get(&c, 10, &a);
    tfd_plan_cache_release(&c, e);
    expect_stats(&c, 1, 0, 1, 0);
    e = get(&c, 10, NULL);
    ck_assert_ptr_eq(tfd_plan_entry_value(e), &a);
    tfd_plan_cache_release(&c, e);
    expect_stats(&c, 1, 1, 1, 0);
    e = get(&c, 11, &b);
    ck_assert_ptr_eq(tfd_plan_entry_value(e), &b);
    tfd_plan_cache_release(&c, e);
    expect_stats(&c, 2, 1, 2, 0);
    tfd_plan_cache_destroy(&c);
    ck_assert(a.destroyed && b.destroyed);
}
END_TEST

/* The bound holds: the least recently used entry goes, a recently used one stays. */
START_TEST(test_lru_bound) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 2, 0, destroy_value, NULL), 0);
    test_value v[4] = {{0, 0}, {1, 0}, {2, 0}, {3, 0}};
    tfd_plan_cache_release(&c, get(&c, 0, &v[0]));
    tfd_plan_cache_release(&c, get(&c, 1, &v[1]));
    tfd_plan_cache_release(&c, get(&c, 0, NULL)); /* 0 is now the most recent */
    tfd_plan_cache_release(&c, get(&c, 2, &v[2])); /* pushes 1 out */
    expect_stats(&c, 2, 1, 3, 1);
    ck_assert(v[1].destroyed && !v[0].destroyed && !v[2].destroyed);
    test_key k1 = key_of(1);
    ck_assert_ptr_null(tfd_plan_cache_acquire(&c, &k1));
    tfd_plan_cache_release(&c, get(&c, 3, &v[3])); /* pushes 0 out */
    ck_assert(v[0].destroyed && !v[2].destroyed && !v[3].destroyed);
    expect_stats(&c, 2, 1, 4, 2);
    tfd_plan_cache_destroy(&c);
    ck_assert_int_eq(g_destroyed, 4);
}
END_TEST

/*
 * A discarded entry leaves the cache at once and is destroyed when its last
 * user lets go: at once for the only user (an exclusive cache), at the other
 * user's release in a shared one; other entries stay.
 */
START_TEST(test_discard) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 8, 1, destroy_value, NULL), 0);
    test_value a = {1, 0}, b = {2, 0};
    tfd_plan_cache_release(&c, get(&c, 20, &b));
    tfd_plan_entry *e = get(&c, 10, &a);
    tfd_plan_cache_discard(&c, e);
    ck_assert(a.destroyed && !b.destroyed);
    expect_stats(&c, 1, 0, 2, 0);
    test_key k = key_of(10);
    ck_assert_ptr_null(tfd_plan_cache_acquire(&c, &k));
    tfd_plan_cache_destroy(&c);
    ck_assert(b.destroyed);

    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 8, 0, destroy_value, NULL), 0);
    test_value s = {3, 0};
    tfd_plan_entry *first = get(&c, 30, &s), *second = get(&c, 30, NULL);
    ck_assert_ptr_eq(first, second);
    tfd_plan_cache_discard(&c, first);
    ck_assert(!s.destroyed); /* the other user still has it */
    expect_stats(&c, 0, 1, 1, 0);
    tfd_plan_cache_release(&c, second);
    ck_assert(s.destroyed);
    tfd_plan_cache_destroy(&c);
    ck_assert_int_eq(g_destroyed, 3);
}
END_TEST

/* An entry pushed out or cleared while in use stays usable and is destroyed at its last release. */
START_TEST(test_in_use_survives) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 1, 0, destroy_value, NULL), 0);
    test_value a = {1, 0}, b = {2, 0}, d = {3, 0};
    tfd_plan_entry *ea = get(&c, 1, &a);
    tfd_plan_entry *ea2 = get(&c, 1, NULL); /* shared: a second user of the same entry */
    ck_assert_ptr_eq(ea, ea2);
    tfd_plan_entry *eb = get(&c, 2, &b); /* pushes a out while two users hold it */
    ck_assert(!a.destroyed);
    expect_stats(&c, 1, 1, 2, 1);
    tfd_plan_cache_release(&c, ea);
    ck_assert(!a.destroyed);
    tfd_plan_cache_release(&c, ea2);
    ck_assert(a.destroyed);
    /* clear: b in use survives until released; entries drop to 0 at once */
    ck_assert_uint_eq(tfd_plan_cache_clear(&c), 1);
    expect_stats(&c, 0, 1, 2, 1);
    ck_assert(!b.destroyed);
    tfd_plan_cache_release(&c, eb);
    ck_assert(b.destroyed);
    /* after a clear the key misses again */
    tfd_plan_cache_release(&c, get(&c, 2, &d));
    expect_stats(&c, 1, 1, 3, 1);
    tfd_plan_cache_destroy(&c);
    ck_assert_int_eq(g_destroyed, 3);
}
END_TEST

/* Exclusive: a busy entry is not handed out again; a second entry of the same key is made beside it. */
START_TEST(test_exclusive) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 0, 1, destroy_value, NULL), 0);
    test_value a = {1, 0}, b = {2, 0};
    tfd_plan_entry *ea = get(&c, 7, &a);
    test_key k = key_of(7);
    ck_assert_ptr_null(tfd_plan_cache_acquire(&c, &k));
    tfd_plan_entry *eb = tfd_plan_cache_insert(&c, &k, &b, 100);
    expect_stats(&c, 2, 0, 2, 0);
    tfd_plan_cache_release(&c, ea);
    tfd_plan_entry *again = tfd_plan_cache_acquire(&c, &k);
    ck_assert_ptr_eq(again, ea);
    ck_assert_ptr_null(tfd_plan_cache_acquire(&c, &k)); /* both busy now */
    tfd_plan_cache_release(&c, again);
    tfd_plan_cache_release(&c, eb);
    expect_stats(&c, 2, 1, 2, 0);
    tfd_cache_stats s;
    tfd_plan_cache_stats(&c, &s);
    ck_assert_uint_eq(s.capacity, 0);
    tfd_plan_cache_destroy(&c);
    ck_assert_int_eq(g_destroyed, 2);
}
END_TEST

/* A declined destruction waits for the drain (or the cache's end); the entry is gone meanwhile. */
START_TEST(test_declined_until_drain) {
    tfd_plan_cache c;
    g_destroyed = 0;
    g_decline = 1;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 1, 1, destroy_value, NULL), 0);
    test_value a = {1, 0}, b = {2, 0}, d = {3, 0};
    tfd_plan_cache_release(&c, get(&c, 1, &a));
    tfd_plan_cache_release(&c, get(&c, 2, &b)); /* evicts a: declined */
    ck_assert(!a.destroyed);
    ck_assert_uint_eq(tfd_plan_cache_declined(&c), 1);
    expect_stats(&c, 1, 0, 2, 1);
    tfd_plan_cache_drain(&c);
    ck_assert(a.destroyed && !b.destroyed);
    ck_assert_uint_eq(tfd_plan_cache_declined(&c), 0);
    /* a trim declined too; the cache's end destroys what is left */
    ck_assert_uint_eq(tfd_plan_cache_clear(&c), 1);
    ck_assert(!b.destroyed);
    tfd_plan_cache_release(&c, get(&c, 3, &d));
    tfd_plan_cache_destroy(&c);
    ck_assert(b.destroyed && d.destroyed);
    ck_assert_int_eq(g_destroyed, 3);
    g_decline = 0;
}
END_TEST

/* Many entries: the table grows and every key is still found. */
START_TEST(test_many_keys) {
    tfd_plan_cache c;
    g_destroyed = 0;
    ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 0, 0, destroy_value, NULL), 0);
    enum { N = 1000 };
    static test_value v[N];
    for (int i = 0; i < N; i++) {
        v[i] = (test_value){i, 0};
        tfd_plan_cache_release(&c, get(&c, i, &v[i]));
    }
    for (int i = 0; i < N; i++) {
        test_key k = key_of(i);
        tfd_plan_entry *e = tfd_plan_cache_acquire(&c, &k);
        ck_assert_ptr_nonnull(e);
        ck_assert_ptr_eq(tfd_plan_entry_value(e), &v[i]);
        tfd_plan_cache_release(&c, e);
    }
    expect_stats(&c, N, N, N, 0);
    tfd_plan_cache_destroy(&c);
    ck_assert_int_eq(g_destroyed, N);
}
END_TEST

/* Threads looking up, inserting and clearing at once: no value is destroyed twice or lost. */
typedef struct hammer_arg {
    tfd_plan_cache *c;
    int seed;
} hammer_arg;

static void *hammer(void *p) {
    hammer_arg *h = p;
    unsigned r = (unsigned)h->seed;
    for (int i = 0; i < 20000; i++) {
        r = r * 1103515245u + 12345u;
        int n = (int)(r >> 16) % 12;
        test_key k = key_of(n);
        tfd_plan_entry *e = tfd_plan_cache_acquire(h->c, &k);
        if (!e) {
            test_value *v = calloc(1, sizeof *v);
            v->id = n;
            e = tfd_plan_cache_insert(h->c, &k, v, 100);
        }
        test_value *v = tfd_plan_entry_value(e);
        if (v->destroyed || v->id != n) return (void *)1;
        if ((r >> 8) % 500 == 0) tfd_plan_cache_clear(h->c);
        tfd_plan_cache_release(h->c, e);
    }
    return NULL;
}

static int free_value(void *value, void *arg, int must) {
    (void)arg;
    (void)must;
    free(value);
    return 1;
}

START_TEST(test_threads) {
    for (int exclusive = 0; exclusive < 2; exclusive++) {
        tfd_plan_cache c;
        ck_assert_int_eq(tfd_plan_cache_init(&c, "test_plans", sizeof(test_key), 5, exclusive,
                                             free_value, NULL),
                         0);
        pthread_t t[4];
        hammer_arg args[4];
        for (int i = 0; i < 4; i++) {
            args[i] = (hammer_arg){&c, i + 1};
            pthread_create(&t[i], NULL, hammer, &args[i]);
        }
        for (int i = 0; i < 4; i++) {
            void *rc;
            pthread_join(t[i], &rc);
            ck_assert_ptr_null(rc);
        }
        tfd_cache_stats s;
        tfd_plan_cache_stats(&c, &s);
        ck_assert_uint_le(s.entries, 5);
        ck_assert_uint_eq(s.hits + s.misses, 4 * 20000);
        tfd_plan_cache_destroy(&c);
    }
}
END_TEST

static Suite *plan_cache_suite(void) {
    Suite *s = suite_create("plan-cache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, test_hit_and_miss);
    tcase_add_test(tc, test_lru_bound);
    tcase_add_test(tc, test_in_use_survives);
    tcase_add_test(tc, test_discard);
    tcase_add_test(tc, test_exclusive);
    tcase_add_test(tc, test_declined_until_drain);
    tcase_add_test(tc, test_many_keys);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(plan_cache_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
