/*
 * Per-call admission (tf_session_open_opts, tf_with_session_opts): a call
 * may ask not to wait, or to wait less than the daemon's deadline, never
 * more; against the reject policy it cannot wait; every refusal is typed and
 * names the holder, the timeout too.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* A daemon of `policy` with deadline `ms`, a client holding the domain, and a second client. */
typedef struct contention {
    th_daemon d;
    tf_client *holder, *other;
    tf_session *held;
    char pid_text[32];
} contention;

static void start(contention *k, const char *policy, const char *deadline_ms) {
    CK_DAEMON_START(&k->d, "--reservation-policy", policy, "--wait-deadline-ms", deadline_ms);
    k->holder = th_connect(&k->d);
    k->other = th_connect(&k->d);
    CK_STATUS(k->holder, tf_session_open(k->holder, &k->held), TF_OK);
    snprintf(k->pid_text, sizeof k->pid_text, "pid %d", (int)getpid());
}

static void finish(contention *k) {
    CK_STATUS(k->holder, tf_session_close(k->held, NULL), TF_OK);
    tf_disconnect(k->holder);
    tf_disconnect(k->other);
    CK_DAEMON_STOP(&k->d);
}

/* The other client's error names the holder (its client id and pid). */
static void expect_names_holder(contention *k) {
    const char *msg = tf_client_last_error(k->other);
    char id[48];
    snprintf(id, sizeof id, "client %llu", (unsigned long long)tf_client_id(k->holder));
    ck_assert_msg(strstr(msg, id) && strstr(msg, k->pid_text), "does not name the holder: %s", msg);
}

/* Asking not to wait under the wait policy: TF_ERR_CONTENDED at once, held and scoped. */
START_TEST(test_reject_asked_under_wait) {
    contention k;
    start(&k, "wait", "30000");
    const tf_session_options reject = {TF_ADMISSION_REJECT, 0};
    tf_session *s = NULL;
    double t0 = th_now_s();
    ck_assert_int_eq(tf_session_open_opts(k.other, &reject, &s), TF_ERR_CONTENDED);
    expect_names_holder(&k);
    ck_assert_int_eq(tf_with_session_opts(k.other, &reject, th_queue_nothing, NULL), TF_ERR_CONTENDED);
    expect_names_holder(&k);
    ck_assert_msg(th_now_s() - t0 < 10.0, "a call that asked not to wait waited %.1f s", th_now_s() - t0);
    ck_assert_ptr_null(s);
    finish(&k);
}
END_TEST

/* A shorter wait than the daemon's: TF_ERR_TIMEOUT after it, naming the holder and that deadline. */
START_TEST(test_shorter_wait) {
    contention k;
    start(&k, "wait", "30000");
    const tf_session_options brief = {TF_ADMISSION_WAIT, 200};
    tf_session *s = NULL;
    double t0 = th_now_s();
    ck_assert_int_eq(tf_session_open_opts(k.other, &brief, &s), TF_ERR_TIMEOUT);
    const double waited = th_now_s() - t0;
    ck_assert_msg(waited >= 0.19 && waited < 10.0, "waited %.3f s for a 200 ms deadline", waited);
    expect_names_holder(&k);
    ck_assert_ptr_nonnull(strstr(tf_client_last_error(k.other), "200 ms"));
    ck_assert_int_eq(tf_with_session_opts(k.other, &brief, th_queue_nothing, NULL), TF_ERR_TIMEOUT);
    expect_names_holder(&k);
    finish(&k);
}
END_TEST

/* A longer wait than the daemon's is cut to the daemon's deadline. */
START_TEST(test_longer_wait_bounded) {
    contention k;
    start(&k, "wait", "300");
    const tf_session_options patient = {TF_ADMISSION_WAIT, 600000};
    tf_session *s = NULL;
    double t0 = th_now_s();
    ck_assert_int_eq(tf_session_open_opts(k.other, &patient, &s), TF_ERR_TIMEOUT);
    ck_assert_msg(th_now_s() - t0 < 20.0, "the daemon's 300 ms bound did not hold");
    ck_assert_ptr_nonnull(strstr(tf_client_last_error(k.other), "300 ms"));
    expect_names_holder(&k);
    finish(&k);
}
END_TEST

/* Under the reject policy a call cannot wait: asking to is TF_ERR_CONTENDED at once. */
START_TEST(test_wait_asked_under_reject) {
    contention k;
    start(&k, "reject", "30000");
    const tf_session_options wait = {TF_ADMISSION_WAIT, 5000};
    tf_session *s = NULL;
    double t0 = th_now_s();
    ck_assert_int_eq(tf_session_open_opts(k.other, &wait, &s), TF_ERR_CONTENDED);
    ck_assert_int_eq(tf_with_session_opts(k.other, &wait, th_queue_nothing, NULL), TF_ERR_CONTENDED);
    ck_assert_msg(th_now_s() - t0 < 4.0, "waited under the reject policy");
    expect_names_holder(&k);
    finish(&k);
}
END_TEST

/* A wait that is admitted before its deadline runs; options of an unknown policy are refused. */
START_TEST(test_admitted_within_deadline_and_bad_options) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "wait", "--wait-deadline-ms", "30000");
    tf_client *c = th_connect(&d);
    const tf_session_options wait = {TF_ADMISSION_WAIT, 1000};
    tf_session *s = NULL;
    CK_STATUS(c, tf_session_open_opts(c, &wait, &s), TF_OK);
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
    CK_STATUS(c, tf_with_session_opts(c, NULL, th_queue_nothing, NULL), TF_OK);
    const tf_session_options bad = {(tf_admission_policy)7, 0};
    ck_assert_int_eq(tf_session_open_opts(c, &bad, &s), TF_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(tf_with_session_opts(c, &bad, th_queue_nothing, NULL), TF_ERR_INVALID_ARGUMENT);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* The plain call's timeout (the daemon's deadline) names the holder too. */
START_TEST(test_default_timeout_names_holder) {
    contention k;
    start(&k, "wait", "200");
    tf_session *s = NULL;
    ck_assert_int_eq(tf_session_open(k.other, &s), TF_ERR_TIMEOUT);
    expect_names_holder(&k);
    finish(&k);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("admission-opts");
    TCase *tc = tcase_create("per call");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_reject_asked_under_wait);
    tcase_add_test(tc, test_shorter_wait);
    tcase_add_test(tc, test_longer_wait_bounded);
    tcase_add_test(tc, test_wait_asked_under_reject);
    tcase_add_test(tc, test_admitted_within_deadline_and_bad_options);
    tcase_add_test(tc, test_default_timeout_names_holder);
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
