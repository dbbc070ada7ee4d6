/*
 * Unit tests of the reservation table (daemon/reservation.c).
 *
 * The table decides who may run on an execution domain: a held opener takes
 * the reservation when it is free, the same owner asking again is told it
 * re-entered, another owner is refused (reject policy) or appended to a FIFO
 * (wait policy), and a scoped root only needs the domain free. When the
 * holder releases, admit_next hands the domain out in FIFO order: scoped
 * waiters are admitted one after another until a held waiter takes the
 * reservation, which stops further admission. These tests drive the table
 * alone, with plain addresses as owners, and check every field the daemon
 * reads back (holder, session id, since, queue links and counts).
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/reservation.h"

#define N_OWNERS 8

static tfd_reservation res;
static char owners[N_OWNERS]; /* distinct addresses to stand for connections */
static tfd_waiter w[N_OWNERS];

static void setup(void) {
    tfd_reservation_init(&res, 3);
    memset(w, 0, sizeof w);
}

/* Makes waiter i a request of owner `owner` (held opener with session id sid, or scoped root). */
static tfd_waiter *waiter(int i, int owner, int held, uint64_t sid) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].owner = &owners[owner];
    w[i].held = held;
    w[i].session_id = held ? sid : 0;
    return &w[i];
}

/* Owner 0 takes the domain with session 100 at time 1000. */
static void hold_by_owner0(void) {
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(0, 0, 1, 100), TFD_POLICY_REJECT, 1000),
                     TFD_ADMITTED);
}

/* Checks that the queue, walked both ways, holds exactly the waiters `idx` (in order). */
static void assert_queue(const int *idx, size_t n) {
    ck_assert_uint_eq(res.n_queued, n);
    tfd_waiter *it = res.head;
    for (size_t i = 0; i < n; i++, it = it->next) {
        ck_assert_ptr_eq(it, &w[idx[i]]);
        ck_assert_int_eq(it->queued, 1);
    }
    ck_assert_ptr_null(it);
    it = res.tail;
    for (size_t i = n; i-- > 0; it = it->prev) ck_assert_ptr_eq(it, &w[idx[i]]);
    ck_assert_ptr_null(it);
    if (n == 0) {
        ck_assert_ptr_null(res.head);
        ck_assert_ptr_null(res.tail);
    }
}

/* Admits from the queue and checks that exactly the waiters `idx` come out, then NULL. */
static void assert_admits(const int *idx, size_t n, uint64_t now) {
    for (size_t i = 0; i < n; i++) {
        tfd_waiter *got = tfd_reservation_admit_next(&res, now);
        ck_assert_ptr_eq(got, &w[idx[i]]);
        ck_assert_int_eq(got->queued, 0);
        ck_assert_ptr_null(got->next);
        ck_assert_ptr_null(got->prev);
    }
    ck_assert_ptr_null(tfd_reservation_admit_next(&res, now));
}

/* A held opener on a free domain takes it and the table records its session and the time. */
START_TEST(test_open_when_free) {
    ck_assert_uint_eq(res.domain, 3);
    ck_assert_ptr_null(res.holder);
    hold_by_owner0();
    ck_assert_ptr_eq(res.holder, &owners[0]);
    ck_assert_uint_eq(res.session_id, 100);
    ck_assert_uint_eq(res.since_ms, 1000);
    ck_assert_int_eq(w[0].queued, 0);
    assert_queue(NULL, 0);
}
END_TEST

/* One row of the request matrix: a request made while owner 0 holds the domain. */
typedef struct request_case {
    int same_owner; /* the request comes from owner 0 itself */
    int held;
    tfd_policy policy;
    tfd_admission expect;
} request_case;

static const request_case request_cases[] = {
    {1, 1, TFD_POLICY_REJECT, TFD_REENTERED}, {1, 1, TFD_POLICY_WAIT, TFD_REENTERED},
    {1, 0, TFD_POLICY_REJECT, TFD_REENTERED}, {1, 0, TFD_POLICY_WAIT, TFD_REENTERED},
    {0, 1, TFD_POLICY_REJECT, TFD_CONTENDED}, {0, 0, TFD_POLICY_REJECT, TFD_CONTENDED},
    {0, 1, TFD_POLICY_WAIT, TFD_QUEUED},      {0, 0, TFD_POLICY_WAIT, TFD_QUEUED},
};

/*
 * While held, the holder re-enters, and another owner is refused (reject) or queued (wait) without
 * disturbing the holder.
 */
START_TEST(test_request_while_held) {
    const request_case *c = &request_cases[_i];
    hold_by_owner0();
    tfd_waiter *req = waiter(1, c->same_owner ? 0 : 1, c->held, 200);
    ck_assert_int_eq(tfd_reservation_request(&res, req, c->policy, 2000), c->expect);
    ck_assert_ptr_eq(res.holder, &owners[0]);
    ck_assert_uint_eq(res.session_id, 100);
    ck_assert_uint_eq(res.since_ms, 1000);
    if (c->expect == TFD_QUEUED) {
        static const int q[] = {1};
        assert_queue(q, 1);
    } else {
        ck_assert_int_eq(req->queued, 0);
        assert_queue(NULL, 0);
    }
}
END_TEST

/*
 * A scoped root on a free domain is admitted without taking it, so other scoped roots and a held
 * opener still get in.
 */
START_TEST(test_scoped_when_free) {
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(1, 1, 0, 0), TFD_POLICY_REJECT, 10),
                     TFD_ADMITTED);
    ck_assert_ptr_null(res.holder);
    ck_assert_uint_eq(res.session_id, 0);
    ck_assert_uint_eq(res.since_ms, 0);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(2, 2, 0, 0), TFD_POLICY_WAIT, 11),
                     TFD_ADMITTED);
    ck_assert_ptr_null(res.holder);
    assert_queue(NULL, 0);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(3, 3, 1, 300), TFD_POLICY_REJECT, 12),
                     TFD_ADMITTED);
    ck_assert_ptr_eq(res.holder, &owners[3]);
    ck_assert_uint_eq(res.session_id, 300);
    ck_assert_uint_eq(res.since_ms, 12);
}
END_TEST

/* Only the holder can release; a stranger, NULL, or a second release change nothing. */
START_TEST(test_release_only_by_holder) {
    hold_by_owner0();
    ck_assert_int_eq(tfd_reservation_release(&res, &owners[1]), 0);
    ck_assert_int_eq(tfd_reservation_release(&res, NULL), 0);
    ck_assert_ptr_eq(res.holder, &owners[0]);
    ck_assert_uint_eq(res.session_id, 100);
    ck_assert_uint_eq(res.since_ms, 1000);
    ck_assert_int_eq(tfd_reservation_release(&res, &owners[0]), 1);
    ck_assert_ptr_null(res.holder);
    ck_assert_uint_eq(res.session_id, 0);
    ck_assert_uint_eq(res.since_ms, 0);
    ck_assert_int_eq(tfd_reservation_release(&res, &owners[0]), 0);
    ck_assert_int_eq(tfd_reservation_release(&res, NULL), 0);
    /* A free domain admits the next opener at once. */
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(1, 1, 1, 101), TFD_POLICY_REJECT, 1001),
                     TFD_ADMITTED);
    ck_assert_ptr_eq(res.holder, &owners[1]);
}
END_TEST

/* admit_next never admits while the domain is held, nor from an empty queue. */
START_TEST(test_admit_next_needs_free_domain) {
    ck_assert_ptr_null(tfd_reservation_admit_next(&res, 5));
    hold_by_owner0();
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(1, 1, 0, 0), TFD_POLICY_WAIT, 6),
                     TFD_QUEUED);
    ck_assert_ptr_null(tfd_reservation_admit_next(&res, 7));
    static const int q[] = {1};
    assert_queue(q, 1);
    ck_assert_ptr_eq(res.holder, &owners[0]);
}
END_TEST

/*
 * After a release, waiters come out in FIFO order: the scoped ones ahead of a
 * held one are all admitted, the held one becomes the holder (session id, time
 * of admission) and stops admission until it releases in turn.
 */
START_TEST(test_admit_next_fifo) {
    hold_by_owner0();
    static const struct {
        int held;
        uint64_t sid;
    } queue[] = {{0, 0}, {0, 0}, {1, 33}, {0, 0}, {1, 55}, {0, 0}};
    for (int i = 0; i < 6; i++) {
        tfd_waiter *req = waiter(i + 1, i + 1, queue[i].held, queue[i].sid);
        ck_assert_int_eq(tfd_reservation_request(&res, req, TFD_POLICY_WAIT, 2000 + (uint64_t)i),
                         TFD_QUEUED);
    }
    static const int all[] = {1, 2, 3, 4, 5, 6};
    assert_queue(all, 6);

    ck_assert_int_eq(tfd_reservation_release(&res, &owners[0]), 1);
    static const int first[] = {1, 2, 3};
    assert_admits(first, 3, 5000);
    ck_assert_ptr_eq(res.holder, &owners[3]);
    ck_assert_uint_eq(res.session_id, 33);
    ck_assert_uint_eq(res.since_ms, 5000); /* admission time, not request time */
    static const int rest[] = {4, 5, 6};
    assert_queue(rest, 3);

    ck_assert_int_eq(tfd_reservation_release(&res, &owners[3]), 1);
    static const int second[] = {4, 5};
    assert_admits(second, 2, 6000);
    ck_assert_ptr_eq(res.holder, &owners[5]);
    ck_assert_uint_eq(res.session_id, 55);
    ck_assert_uint_eq(res.since_ms, 6000);
    static const int last[] = {6};
    assert_queue(last, 1);

    ck_assert_int_eq(tfd_reservation_release(&res, &owners[5]), 1);
    assert_admits(last, 1, 7000);
    ck_assert_ptr_null(res.holder);
    assert_queue(NULL, 0);
}
END_TEST

/*
 * Cancelling any one waiter (head, middle, tail) keeps the others linked in FIFO order; a second
 * cancel is a no-op.
 */
START_TEST(test_cancel_keeps_order) {
    int victim = _i + 1; /* waiters 1..5 are queued */
    hold_by_owner0();
    for (int i = 1; i <= 5; i++)
        ck_assert_int_eq(tfd_reservation_request(&res, waiter(i, i, 0, 0), TFD_POLICY_WAIT, 10),
                         TFD_QUEUED);
    tfd_reservation_cancel(&res, &w[victim]);
    ck_assert_int_eq(w[victim].queued, 0);
    ck_assert_ptr_null(w[victim].next);
    ck_assert_ptr_null(w[victim].prev);
    int left[4], n = 0;
    for (int i = 1; i <= 5; i++)
        if (i != victim) left[n++] = i;
    assert_queue(left, 4);
    tfd_reservation_cancel(&res, &w[victim]);
    assert_queue(left, 4);

    ck_assert_int_eq(tfd_reservation_release(&res, &owners[0]), 1);
    assert_admits(left, 4, 20);
    assert_queue(NULL, 0);
    tfd_reservation_cancel(&res, &w[left[0]]); /* admitted waiters are no longer queued */
    assert_queue(NULL, 0);
}
END_TEST

/*
 * A request never overtakes earlier waiters: it joins the tail while held, and also while the
 * domain is free but the queue is not empty.
 */
START_TEST(test_no_overtaking) {
    hold_by_owner0();
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(1, 1, 1, 11), TFD_POLICY_WAIT, 1),
                     TFD_QUEUED);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(2, 2, 0, 0), TFD_POLICY_WAIT, 2),
                     TFD_QUEUED);
    static const int two[] = {1, 2};
    assert_queue(two, 2);

    /* Released but not yet handed over: the queue still goes first. */
    ck_assert_int_eq(tfd_reservation_release(&res, &owners[0]), 1);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(3, 3, 0, 0), TFD_POLICY_REJECT, 3),
                     TFD_CONTENDED);
    ck_assert_int_eq(w[3].queued, 0);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(4, 4, 1, 44), TFD_POLICY_REJECT, 3),
                     TFD_CONTENDED);
    ck_assert_ptr_null(res.holder);
    ck_assert_int_eq(tfd_reservation_request(&res, waiter(3, 3, 0, 0), TFD_POLICY_WAIT, 3),
                     TFD_QUEUED);
    static const int three[] = {1, 2, 3};
    assert_queue(three, 3);

    static const int one[] = {1};
    assert_admits(one, 1, 4);
    ck_assert_ptr_eq(res.holder, &owners[1]);
    ck_assert_uint_eq(res.session_id, 11);
    ck_assert_uint_eq(res.since_ms, 4);
    ck_assert_int_eq(tfd_reservation_release(&res, &owners[1]), 1);
    static const int tail[] = {2, 3};
    assert_admits(tail, 2, 5);
    ck_assert_ptr_null(res.holder);
}
END_TEST

static Suite *reservation_suite(void) {
    Suite *s = suite_create("reservation");
    TCase *tc = tcase_create("table");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_open_when_free);
    tcase_add_loop_test(tc, test_request_while_held, 0,
                        (int)(sizeof request_cases / sizeof request_cases[0]));
    tcase_add_test(tc, test_scoped_when_free);
    tcase_add_test(tc, test_release_only_by_holder);
    tcase_add_test(tc, test_admit_next_needs_free_domain);
    tcase_add_test(tc, test_admit_next_fifo);
    tcase_add_loop_test(tc, test_cancel_keeps_order, 0, 5);
    tcase_add_test(tc, test_no_overtaking);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(reservation_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
