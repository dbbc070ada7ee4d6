/*
 * The daemon's report through the library (tf_daemon_status_get): what it
 * says while a session is held and another client queues behind it, and
 * that it says the same as `tenferroctl status --json`, which prints it.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* How long the queued opener waits at most (the daemon's deadline). */
#define DEADLINE_MS "20000"

/* A child that opens a held session (it queues behind the holder), then closes it. */
static int child_opener(void *arg) {
    th_die_with_parent();
    const th_daemon *d = arg;
    tf_client *c = th_connect(d);
    if (!c) return 1;
    tf_session *s = NULL;
    tf_status st = tf_session_open(c, &s);
    if (st == TF_OK) st = tf_session_close(s, NULL);
    tf_disconnect(c);
    return st == TF_OK ? 0 : 2;
}

/* The client of the report with this id, or NULL. */
static const tf_client_info *client_of(const tf_daemon_status *s, uint64_t id) {
    for (size_t i = 0; i < s->n_clients; i++)
        if (s->clients[i].client_id == id) return &s->clients[i];
    return NULL;
}

/* Polls the report until the domain has a queued opener (or gives up after 10 s). */
static tf_daemon_status *report_with_queue(tf_client *c) {
    for (int i = 0; i < 1000; i++) {
        tf_daemon_status *s = NULL;
        ck_assert_int_eq(tf_daemon_status_get(c, &s), TF_OK);
        if (s->n_reservations == 1 && s->reservations[0].n_queued_client_ids == 1) return s;
        tf_daemon_status_free(s);
        usleep(10000);
    }
    ck_abort_msg("no opener queued within 10 s");
    return NULL;
}

START_TEST(test_status_while_held_and_queued) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "wait", "--wait-deadline-ms", DEADLINE_MS);
    tf_client *holder = th_connect(&d);
    tf_client *watcher = th_connect(&d);
    double x[16];
    th_fill_random(TF_F64, 16, x);
    int64_t n = 16;
    tf_tensor t;
    CK_STATUS(holder, tf_upload(holder, TF_F64, 1, &n, x, &t), TF_OK);
    tf_session *s = NULL;
    CK_STATUS(holder, tf_session_open(holder, &s), TF_OK);
    pid_t child = th_spawn(child_opener, &d);
    ck_assert_int_gt(child, 0);

    tf_daemon_status *r = report_with_queue(watcher);
    ck_assert_str_eq(r->policy, "wait");
    ck_assert_ptr_nonnull(strstr(r->device, th_device()));
    ck_assert_str_eq(r->device_error, "");
    ck_assert_int_eq(r->draining, 0);
    const tf_reservation_info *res = &r->reservations[0];
    const tf_client_info *h = client_of(r, tf_client_id(holder));
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(res->holder_client_id, h->client_id);
    ck_assert_int_eq(res->holder_pid, getpid());
    ck_assert_uint_ne(h->session_id, 0);
    ck_assert_uint_eq(res->session_id, h->session_id);
    ck_assert_uint_eq(h->live_tensors, 1);
    ck_assert_uint_eq(h->live_bytes, sizeof x);
    const tf_client_info *q = client_of(r, res->queued_client_ids[0]);
    ck_assert_ptr_nonnull(q);
    ck_assert_int_eq(q->pid, child);
    ck_assert_uint_ge(r->n_clients, 3);
    ck_assert_uint_eq(tf_daemon_status_counter(r, "admissions_queued"), 1);
    ck_assert_uint_eq(tf_daemon_status_counter(r, "no such counter"), 0);
    ck_assert_ptr_nonnull(tf_daemon_status_cache(r, "prepared_graphs"));
    ck_assert_ptr_null(tf_daemon_status_cache(r, "no such cache"));

    /* tenferroctl prints the same report: the holder, its pid and the queued client. */
    static char json[1 << 16];
    ck_assert_int_eq(th_run_ctl(&d, json, sizeof json, "status", "--json"), 0);
    char want[128];
    snprintf(want, sizeof want, "\"holder_client_id\":%llu,\"holder_pid\":%d",
             (unsigned long long)res->holder_client_id, (int)getpid());
    ck_assert_msg(strstr(json, want), "tenferroctl --json lacks %s: %s", want, json);
    snprintf(want, sizeof want, "\"queued\":[%llu]", (unsigned long long)q->client_id);
    ck_assert_msg(strstr(json, want), "tenferroctl --json lacks %s: %s", want, json);
    tf_daemon_status_free(r);

    CK_STATUS(holder, tf_session_close(s, NULL), TF_OK);
    ck_assert_int_eq(th_wait(child), 0);
    /* Once the queue has gone, the report says so. */
    ck_assert_int_eq(tf_daemon_status_get(watcher, &r), TF_OK);
    ck_assert_uint_eq(r->reservations[0].holder_client_id, 0);
    ck_assert_uint_eq(r->reservations[0].n_queued_client_ids, 0);
    tf_daemon_status_free(r);
    tf_disconnect(holder);
    tf_disconnect(watcher);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* A report on a connection that broke is TF_ERR_DISCONNECTED; NULL arguments are refused. */
START_TEST(test_status_errors) {
    th_daemon d;
    CK_DAEMON_START(&d, NULL);
    tf_client *c = th_connect(&d);
    tf_daemon_status *r = (tf_daemon_status *)1;
    ck_assert_int_eq(tf_daemon_status_get(NULL, &r), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf_daemon_status_get(c, NULL), TF_ERR_INVALID_ARGUMENT);
    CK_DAEMON_STOP(&d);
    ck_assert_int_eq(tf_daemon_status_get(c, &r), TF_ERR_DISCONNECTED);
    ck_assert_ptr_null(r);
    tf_daemon_status_free(NULL);
    tf_disconnect(c);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("daemon-status");
    TCase *tc = tcase_create("report");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_status_while_held_and_queued);
    tcase_add_test(tc, test_status_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
