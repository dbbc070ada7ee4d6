/*
 * Integration tests of the configuration file and its reload (DESIGN.md §8,
 * §11; docs/admission.md):
 *
 *  - a file with a bad line is refused at start: tenferrod exits non-zero and
 *    its stderr names the file, the line and the reason;
 *  - SIGHUP with a bad file keeps the running configuration (a quota is
 *    enforced as before) and the log says "reload refused";
 *  - SIGHUP with a good file that raises [quota.client] device_bytes lets a
 *    new connection make the allocation that was refused before;
 *  - a command-line flag wins over the file's value, also after a reload,
 *    while the file's other keys still apply;
 *  - [daemon] busy_poll_us changes on reload: with 0 pending transfers take
 *    the socket (mailbox_requests stays 0), after a reload to one second
 *    they take the submission mailbox.
 *
 * Configuration files are written under /tmp and removed at the end. The quota
 * probe uploads f64 vectors of 1.5 MiB against limits of 1 MiB and 4 MiB.
 */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Elements of the probe vector: 196608 * 8 bytes = 1.5 MiB. */
#define PROBE_LEN (3 * 65536)
/* How long a test waits for a line in the daemon's log. */
#define LOG_WAIT_MS 30000

/* Writes `text` to /tmp/tf-test-config-<pid>-<tag>.conf and puts that path in path. */
static void write_config(char *path, size_t len, const char *tag, const char *text) {
    ck_assert_msg(th_write_config(path, len, "config", tag, text) == 0, "cannot write %s", path);
}

/* How many times `needle` occurs in the daemon's log. */
static int log_count(const th_daemon *d, const char *needle) {
    char *text = th_daemon_log(d);
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    free(text);
    return n;
}

/* Sends SIGHUP and waits until the log shows `outcome` once more than before. */
static void reload(const th_daemon *d, const char *outcome) {
    int before = log_count(d, outcome);
    ck_assert(kill(d->pid, SIGHUP) == 0);
    for (int waited = 0; waited < LOG_WAIT_MS; waited += 10) {
        if (log_count(d, outcome) > before) return;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    ck_abort_msg("after SIGHUP the log (%s) does not say \"%s\"", d->log_path, outcome);
}

/* Uploads the 1.5 MiB probe on a new connection and frees it; returns the upload's status. */
static tf_status probe_upload(const th_daemon *d) {
    static double data[PROBE_LEN];
    int64_t shape[1] = {PROBE_LEN};
    tf_client *c = th_connect(d);
    tf_tensor t;
    tf_status st = tf_upload(c, TF_F64, 1, shape, data, &t);
    if (st == TF_ERR_QUOTA && !strstr(tf_client_last_error(c), "client quota: device_bytes"))
        st = TF_ERR_INTERNAL; /* refused, but not by the limit under test */
    tf_disconnect(c);
    return st;
}

/* Asserts that the probe upload gets `want`. */
#define EXPECT_PROBE(d, want)                                                                     \
    do {                                                                                          \
        tf_status st_ = probe_upload(d);                                                          \
        ck_assert_msg(st_ == (want), "1.5 MiB upload returned %s, expected %s",                   \
                      tf_status_name(st_), tf_status_name(want));                                 \
    } while (0)

START_TEST(test_bad_file_refused_at_start) {
    char path[128];
    write_config(path, sizeof path, "bad",
                 "[quota.client]\ndevice_bytes = 1M\nlive_tensors = lots\n");
    th_daemon d;
    ck_assert_msg(th_daemon_start(&d, "--config", path, (char *)NULL) != 0,
                  "tenferrod started with a bad configuration file");
    ck_assert_msg(d.exit_status != 0, "tenferrod exited with status 0");
    char *log = th_daemon_log(&d);
    char where[160];
    snprintf(where, sizeof where, "%s:3:", path);
    ck_assert_msg(strstr(log, where) != NULL, "stderr does not name %s line 3: %s", path, log);
    ck_assert_msg(strstr(log, "live_tensors") && strstr(log, "\"lots\" is not a number"),
                  "stderr does not give the reason: %s", log);
    free(log);
    unlink(d.log_path);
    unlink(path);
}
END_TEST

START_TEST(test_reload_bad_file_keeps_running_config) {
    char path[128];
    write_config(path, sizeof path, "keep", "[quota.client]\ndevice_bytes = 1M\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    EXPECT_PROBE(&d, TF_ERR_QUOTA);
    /* An unknown key: the whole file is refused, nothing of it applies (not even the new limit). */
    write_config(path, sizeof path, "keep", "[quota.client]\ndevice_bytes = 4M\nno_such_key = 1\n");
    reload(&d, "reload refused");
    char *log = th_daemon_log(&d);
    ck_assert_msg(strstr(log, "no_such_key") != NULL, "the refusal does not name the bad key: %s",
                  log);
    free(log);
    EXPECT_PROBE(&d, TF_ERR_QUOTA);
    CK_DAEMON_STOP(&d);
    unlink(path);
}
END_TEST

START_TEST(test_reload_good_file_applies) {
    char path[128];
    write_config(path, sizeof path, "good", "[quota.client]\ndevice_bytes = 1M\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    EXPECT_PROBE(&d, TF_ERR_QUOTA);
    write_config(path, sizeof path, "good", "[quota.client]\ndevice_bytes = 4M\n");
    reload(&d, "configuration reloaded");
    EXPECT_PROBE(&d, TF_OK);
    CK_DAEMON_STOP(&d);
    unlink(path);
}
END_TEST

START_TEST(test_flag_overrides_file) {
    char path[128];
    /* The file allows 4 MiB and caps live tensors at 1; the flag says 1 MiB. */
    write_config(path, sizeof path, "flag",
                 "[quota.client]\ndevice_bytes = 4M\nlive_tensors = 1\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path, "--client-device-bytes", "1M");
    EXPECT_PROBE(&d, TF_ERR_QUOTA);
    /* The file's other key applies: a second live tensor is refused. */
    tf_client *c = th_connect(&d);
    double x = 1;
    int64_t shape[1] = {1};
    tf_tensor t1, t2;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, &x, &t1), TF_OK);
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, &x, &t2), TF_ERR_QUOTA);
    tf_disconnect(c);
    /* A reload re-reads the file (now 8 MiB) and applies the flag over it again. */
    write_config(path, sizeof path, "flag", "[quota.client]\ndevice_bytes = 8M\n");
    reload(&d, "configuration reloaded");
    EXPECT_PROBE(&d, TF_ERR_QUOTA);
    CK_DAEMON_STOP(&d);
    unlink(path);
}
END_TEST

/* Five pending uploads of fresh random values on one connection, each checked by a download. */
static void five_pending_uploads(const th_daemon *d) {
    enum { LEN = 4096 };
    tf_client *c = th_connect(d);
    tf_pinned_buffer *b = NULL;
    CK_STATUS(c, tf_pinned_buffer_new(c, LEN * sizeof(double), &b), TF_OK);
    static double zeros[LEN], back[LEN];
    int64_t shape[1] = {LEN};
    tf_tensor t;
    CK_STATUS(c, tf_upload(c, TF_F64, 1, shape, zeros, &t), TF_OK);
    for (int i = 0; i < 5; i++) {
        th_fill_random(TF_F64, LEN, tf_pinned_buffer_data(b));
        tf_pending *p = NULL;
        CK_STATUS(c, tf_upload_pending(c, b, t, &p), TF_OK);
        CK_STATUS(c, tf_pending_wait(p, &t, &b), TF_OK);
        void *into = back;
        size_t cap = sizeof back;
        CK_STATUS(c, tf_download_into(c, t, &into, &cap), TF_OK);
        ck_assert_msg(memcmp(back, tf_pinned_buffer_data(b), sizeof back) == 0,
                      "pending upload %d: the tensor differs from the buffer", i);
    }
    CK_STATUS(c, tf_tensor_free(c, t), TF_OK);
    CK_STATUS(c, tf_pinned_buffer_free(b), TF_OK);
    tf_disconnect(c);
}

START_TEST(test_reload_busy_poll) {
    char path[128];
    /* Polling across request gaps off too: only busy_poll_us decides here. */
    write_config(path, sizeof path, "poll", "[daemon]\nbusy_poll_us = 0\nidle_poll_max_us = 0\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    five_pending_uploads(&d);
    ck_assert_uint_eq(th_counter(&d, "mailbox_requests"), 0);
    write_config(path, sizeof path, "poll", "[daemon]\nbusy_poll_us = 1000000\nidle_poll_max_us = 0\n");
    reload(&d, "configuration reloaded");
    five_pending_uploads(&d);
    ck_assert_msg(th_counter(&d, "mailbox_requests") > 0,
                  "a daemon polling for a second after each request served no request through "
                  "the mailbox");
    CK_DAEMON_STOP(&d);
    unlink(path);
}
END_TEST

/*
 * Every setting marked reloadable changes on SIGHUP, those of [limits] among
 * them (hello_timeout_ms and the per-uid connection counts once stayed at
 * their start values): after a reload to hello_timeout_ms 300, a connection
 * that says nothing is closed within the second, not after the 5 s it had;
 * max_buffers_per_client 1 refuses a second buffer; max_clients_per_uid 1
 * refuses a second client of a uid (checked when the test is not root, who
 * is exempt from that count).
 */
START_TEST(test_reload_applies_limits) {
    char path[128];
    write_config(path, sizeof path, "limits", "[limits]\nmax_clients_per_uid = 3\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    tf_client *first = th_connect(&d);
    write_config(path, sizeof path, "limits",
                 "[limits]\nmax_clients_per_uid = 1\nmax_buffers_per_client = 1\n"
                 "hello_timeout_ms = 300\n");
    reload(&d, "configuration reloaded");
    int silent = th_raw_connect(&d);
    ck_assert_int_ge(silent, 0);
    ck_assert_msg(th_raw_closed(silent, 2000),
                  "a connection without a Hello was not closed after the reloaded 300 ms");
    close(silent);
    tf_pinned_buffer *b1 = NULL, *b2 = NULL;
    ck_assert_int_eq(tf_pinned_buffer_new(first, 100, &b1), TF_OK);
    ck_assert_int_eq(tf_pinned_buffer_new(first, 100, &b2), TF_ERR_QUOTA);
    ck_assert_msg(strstr(tf_client_last_error(first), "max_buffers_per_client") != NULL, "%s",
                  tf_client_last_error(first));
    if (geteuid() != 0) {
        tf_client *second = NULL;
        ck_assert_int_eq(tf_connect(d.socket, &second), TF_ERR_TOO_MANY_CLIENTS);
    }
    ck_assert_int_eq(tf_pinned_buffer_free(b1), TF_OK);
    tf_disconnect(first);
    CK_DAEMON_STOP(&d);
    unlink(path);
}
END_TEST

static Suite *config_suite(void) {
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("file and reload");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_bad_file_refused_at_start);
    tcase_add_test(tc, test_reload_bad_file_keeps_running_config);
    tcase_add_test(tc, test_reload_good_file_applies);
    tcase_add_test(tc, test_reload_applies_limits);
    tcase_add_test(tc, test_flag_overrides_file);
    tcase_add_test(tc, test_reload_busy_poll);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
