/*
 * Integration tests of how a client finds its daemon (client/connection.c,
 * resolve_path; docs/operations.md, docs/cluster.md):
 *
 *  - with TENFERRO_SOCKET unset (or empty) and no socket at either default
 *    path, tf_connect fails with TF_ERR_DISCONNECTED and a message that names
 *    TENFERRO_SOCKET and both default paths: what a batch job that asked for
 *    no tenferrod share sees (skipped where a default socket exists);
 *  - a TENFERRO_SOCKET that names no socket is reported as coming from
 *    TENFERRO_SOCKET, with the path and the system's reason;
 *  - a path the caller gives is reported with the hint to set TENFERRO_SOCKET;
 *  - TENFERRO_SOCKET naming a running daemon connects with a NULL path.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static const char *const defaults[] = {"/run/tenferro/tenferrod-0.sock",
                                       "/run/tenferro/tenferrod-cpu.sock"};

/* 1 when anything sits at a default path: then the no-default case cannot be seen here. */
static int a_default_exists(void) {
    struct stat st;
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++)
        if (stat(defaults[i], &st) == 0) return 1;
    return 0;
}

/* Connects with `path` (NULL: the library's rules); returns the failure's message, in buf. */
static const char *connect_message(const char *path, char *buf, size_t len) {
    tf_client *c = NULL;
    tf_status st = tf_connect(path, &c);
    ck_assert_msg(st == TF_ERR_DISCONNECTED, "tf_connect returned %s, expected TF_ERR_DISCONNECTED",
                  tf_status_name(st));
    snprintf(buf, len, "%s", tf_client_last_error(c));
    tf_disconnect(c);
    return buf;
}

/* The message must contain `needle`. */
static void ck_mentions(const char *message, const char *needle) {
    ck_assert_msg(strstr(message, needle) != NULL, "the message does not mention \"%s\": %s",
                  needle, message);
}

START_TEST(test_no_socket_anywhere_names_both) {
    if (a_default_exists()) {
        fprintf(stderr, "test-connect: a socket exists at a default path here; the message for "
                        "none is not checked\n");
        return;
    }
    char buf[1024];
    for (int empty = 0; empty < 2; empty++) {
        if (empty)
            setenv("TENFERRO_SOCKET", "", 1);
        else
            unsetenv("TENFERRO_SOCKET");
        const char *m = connect_message(NULL, buf, sizeof buf);
        ck_mentions(m, "TENFERRO_SOCKET is not set");
        ck_mentions(m, defaults[0]);
        ck_mentions(m, defaults[1]);
        ck_mentions(m, "docs/cluster.md");
    }
}
END_TEST

START_TEST(test_environment_path_missing) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/tmp/tf-test-connect-%d-absent.sock", (int)getpid());
    setenv("TENFERRO_SOCKET", path, 1);
    const char *m = connect_message(NULL, buf, sizeof buf);
    ck_mentions(m, path);
    ck_mentions(m, "(from TENFERRO_SOCKET)");
    ck_mentions(m, "No such file or directory");
    /* The caller's path wins over the environment and is worded as the caller's. */
    char given[64];
    snprintf(given, sizeof given, "/tmp/tf-test-connect-%d-given.sock", (int)getpid());
    m = connect_message(given, buf, sizeof buf);
    ck_mentions(m, given);
    ck_mentions(m, "set TENFERRO_SOCKET to its socket");
    ck_assert_msg(strstr(m, "(from TENFERRO_SOCKET)") == NULL, "%s", m);
}
END_TEST

START_TEST(test_environment_path_connects) {
    th_daemon d;
    CK_DAEMON_START(&d, "--workers", "1");
    setenv("TENFERRO_SOCKET", d.socket, 1);
    tf_client *c = NULL;
    CK_STATUS(c, tf_connect(NULL, &c), TF_OK);
    ck_assert(tf_client_id(c) > 0);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *connect_suite(void) {
    Suite *s = suite_create("connect");
    TCase *tc = tcase_create("resolve");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_no_socket_anywhere_names_both);
    tcase_add_test(tc, test_environment_path_missing);
    tcase_add_test(tc, test_environment_path_connects);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(connect_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
