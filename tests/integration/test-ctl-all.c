/*
 * tenferroctl on a host with several daemons (docs/operations.md, "Several
 * daemons on one host"): `status --all` lists every DIR/tenferrod-*.sock of
 * the runtime directory in instance order (ordinals by value, then cpu), a
 * stale socket file nobody listens on is a row of its own "unreachable" and
 * makes the exit status 1, `--json` is one array of the status objects with
 * instance, socket and state; `--device DEV` reaches the daemon of DEV's
 * socket; a malformed --device, and --device with --socket, are usage errors.
 *
 * Two real daemons run on the CPU (any device serves under any socket name),
 * on DIR/tenferrod-0.sock and DIR/tenferrod-1.sock of a private directory
 * that TENFERRO_RUNTIME_DIR names; tenferroctl is the real binary next to
 * TENFERRO_DAEMON, run as a child process.
 */
#include <check.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* Room for tenferroctl's output. */
#define OUT_BYTES (1 << 16)

/* A private runtime directory, named by TENFERRO_RUNTIME_DIR for tenferroctl and the library. */
static void make_runtime_dir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/tf-ctl-all-XXXXXX");
    ck_assert_msg(mkdtemp(dir) != NULL, "mkdtemp failed");
    setenv("TENFERRO_RUNTIME_DIR", dir, 1);
    unsetenv("TENFERRO_SOCKET");
    unsetenv("TENFERRO_DEVICE");
}

/* The path of DIR/tenferrod-INSTANCE.sock into buf. */
static void socket_path(char *buf, size_t len, const char *dir, const char *instance) {
    snprintf(buf, len, "%s/tenferrod-%s.sock", dir, instance);
}

/* Leaves a socket file at path that nobody listens on: what a daemon killed with SIGKILL leaves. */
static void make_stale_socket(const char *path) {
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_msg(fd >= 0, "socket failed");
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    ck_assert_msg(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0, "bind %s failed", path);
    close(fd);
}

/* Starts a CPU daemon on DIR/tenferrod-INSTANCE.sock, with extra arguments (NULL-terminated). */
#define START_CPU_DAEMON(d, dir, instance, ...)                                                    \
    do {                                                                                           \
        char path_[108];                                                                           \
        socket_path(path_, sizeof path_, (dir), (instance));                                       \
        ck_assert_msg(th_daemon_start_on((d), path_, "--device", "cpu", __VA_ARGS__) == 0,         \
                      "tenferrod did not start on %s (log %s)", path_, (d)->log_path);             \
    } while (0)

/* Runs tenferroctl with the arguments (NULL-terminated) into out; returns its exit status. */
static int ctl(char *out, const char *const *args) { return th_run_ctl_args(out, OUT_BYTES, args); }

/* The lines of text, cut in place; returns how many (at most max). */
static int split_lines(char *text, char **lines, int max) {
    int n = 0;
    for (char *p = text; *p && n < max;) {
        lines[n++] = p;
        char *nl = strchr(p, '\n');
        if (!nl) break;
        *nl = '\0';
        p = nl + 1;
    }
    return n;
}

/* 1 when line matches the extended regular expression pattern. */
static int matches(const char *line, const char *pattern) {
    regex_t re;
    ck_assert_msg(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) == 0, "bad pattern %s", pattern);
    int ok = regexec(&re, line, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* Where the object of daemon `instance` starts in the JSON array out, or NULL. */
static const char *json_entry(const char *out, const char *instance) {
    char want[64];
    snprintf(want, sizeof want, "{\"instance\":\"%s\",", instance);
    return strstr(out, want);
}

/* Occurrences of needle in text. */
static int count_of(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/*
 * Daemons on tenferrod-0.sock and tenferrod-1.sock (the second with one more
 * client and --max-clients 7, so the two can be told apart) and a stale
 * tenferrod-7.sock: status --all lists 0, 1, 7 with 7 unreachable and exits 1;
 * its JSON has those three objects in that order; without the stale file it
 * exits 0; --device reaches the daemon of that socket; bad --device use exits 2.
 */
START_TEST(test_status_all_and_device) {
    char dir[64], stale[108];
    make_runtime_dir(dir, sizeof dir);
    th_daemon d0, d1;
    START_CPU_DAEMON(&d0, dir, "0", NULL);
    START_CPU_DAEMON(&d1, dir, "1", "--max-clients", "7", NULL);
    tf_client *extra = th_connect(&d1);
    socket_path(stale, sizeof stale, dir, "7");
    make_stale_socket(stale);

    static char out[OUT_BYTES];
    char *lines[16];
    char pattern[512];
    int rc = ctl(out, (const char *[]){"status", "--all", NULL});
    char text[OUT_BYTES];
    snprintf(text, sizeof text, "%s", out);
    ck_assert_msg(rc == 1, "status --all with a stale socket exited %d, expected 1:\n%s", rc, text);
    int n = split_lines(out, lines, 16);
    ck_assert_msg(n == 4, "status --all printed %d lines, expected a heading and 3 rows:\n%s", n,
                  text);
    ck_assert_msg(matches(lines[0], "^instance +socket +device +clients +held +memory +state$"),
                  "heading: %s", lines[0]);
    /* Daemon 0: no client but tenferroctl (not counted); daemon 1: the extra one. */
    snprintf(pattern, sizeof pattern, "^0 +%s +cpu \\(.*\\) +0 +0 +[0-9.]+ [KMGTP]?i?B +up$",
             d0.socket);
    ck_assert_msg(matches(lines[1], pattern), "row 1 is not daemon 0 up: %s\n%s", lines[1], text);
    snprintf(pattern, sizeof pattern, "^1 +%s +cpu \\(.*\\) +1 +0 +[0-9.]+ [KMGTP]?i?B +up$",
             d1.socket);
    ck_assert_msg(matches(lines[2], pattern), "row 2 is not daemon 1 up: %s\n%s", lines[2], text);
    snprintf(pattern, sizeof pattern, "^7 +%s +- +- +- +- +unreachable: Connection refused$",
             stale);
    ck_assert_msg(matches(lines[3], pattern), "row 3 is not the stale socket: %s\n%s", lines[3],
                  text);

    rc = ctl(out, (const char *[]){"status", "--all", "--json", NULL});
    ck_assert_msg(rc == 1, "status --all --json exited %d, expected 1:\n%s", rc, out);
    ck_assert_msg(th_json_valid(out) && out[0] == '[',
                  "status --all --json is not a JSON array:\n%s", out);
    ck_assert_msg(count_of(out, "{\"instance\":") == 3, "not 3 daemons in %s", out);
    const char *at0 = json_entry(out, "0"), *at1 = json_entry(out, "1"),
               *at7 = json_entry(out, "7");
    ck_assert_msg(at0 && at1 && at7 && at0 < at1 && at1 < at7, "not daemons 0, 1, 7 in order: %s",
                  out);
    char want[512];
    snprintf(want, sizeof want,
             "{\"instance\":\"1\",\"socket\":\"%s\",\"state\":\"up\",\"device\":\"cpu", d1.socket);
    ck_assert_msg(strncmp(at1, want, strlen(want)) == 0, "daemon 1's object does not start %s: %s",
                  want, at1);
    ck_assert_msg(strstr(at1, "\"max_clients\":7,") && strstr(at1, "\"name\":\"tenferroctl\""),
                  "daemon 1's object is not its status report: %s", at1);
    snprintf(
        want, sizeof want,
        "{\"instance\":\"7\",\"socket\":\"%s\",\"state\":\"unreachable: Connection refused\"}]",
        stale);
    ck_assert_msg(strncmp(at7, want, strlen(want)) == 0, "daemon 7's object is not %s: %s", want,
                  at7);

    ck_assert_int_eq(unlink(stale), 0);
    rc = ctl(out, (const char *[]){"status", "--all", NULL});
    snprintf(text, sizeof text, "%s", out);
    ck_assert_msg(rc == 0, "status --all with every daemon up exited %d:\n%s", rc, text);
    ck_assert_msg(split_lines(out, lines, 16) == 3, "not a heading and 2 rows:\n%s", text);

    /* --device finds DIR/tenferrod-1.sock: the daemon with max clients 7 and two clients. */
    const char *devices_of_1[] = {"1", "cuda:1"};
    for (int i = 0; i < 2; i++) {
        rc = ctl(out, (const char *[]){"--device", devices_of_1[i], "status", NULL});
        ck_assert_msg(rc == 0, "--device %s status exited %d: %s", devices_of_1[i], rc, out);
        ck_assert_msg(strstr(out, "\n  max clients 7\n") && strstr(out, "\nclients (2):\n"),
                      "--device %s did not reach the daemon on tenferrod-1.sock:\n%s",
                      devices_of_1[i], out);
    }
    rc = ctl(out, (const char *[]){"--device", "0", "status", "--json", NULL});
    ck_assert_msg(rc == 0 && strstr(out, "\"max_clients\":") && !strstr(out, "\"max_clients\":7,"),
                  "--device 0 did not reach the daemon on tenferrod-0.sock: %d %s", rc, out);

    rc = ctl(out, (const char *[]){"--device", "cuda:x", "status", NULL});
    ck_assert_msg(rc == 2 && strstr(out, "\"cuda:x\" names no device"), "--device cuda:x: %d %s",
                  rc, out);
    rc = ctl(out, (const char *[]){"--device", "1", "--socket", d1.socket, "status", NULL});
    ck_assert_msg(rc == 2 && strstr(out, "--socket and --device"), "--device with --socket: %d %s",
                  rc, out);
    rc = ctl(out, (const char *[]){"--socket", d1.socket, "status", "--all", NULL});
    ck_assert_msg(rc == 2, "--all with --socket: %d %s", rc, out);

    tf_disconnect(extra);
    CK_DAEMON_STOP(&d0);
    CK_DAEMON_STOP(&d1);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/*
 * Instances sort by value, not as text (2 before 10), and cpu after every
 * ordinal; every stale socket is listed, and one answering daemon does not
 * make the command succeed.
 */
START_TEST(test_status_all_order) {
    char dir[64], path[108];
    make_runtime_dir(dir, sizeof dir);
    th_daemon d;
    START_CPU_DAEMON(&d, dir, "cpu", NULL);
    const char *stale[] = {"10", "2", "0"};
    for (int i = 0; i < 3; i++) {
        socket_path(path, sizeof path, dir, stale[i]);
        make_stale_socket(path);
    }
    static char out[OUT_BYTES];
    int rc = ctl(out, (const char *[]){"status", "--all", "--json", NULL});
    ck_assert_msg(rc == 1, "status --all --json exited %d: %s", rc, out);
    const char *order[] = {"0", "2", "10", "cpu"};
    const char *prev = out;
    for (int i = 0; i < 4; i++) {
        const char *at = json_entry(out, order[i]);
        ck_assert_msg(at && at >= prev, "daemon %s is not where 0, 2, 10, cpu puts it: %s",
                      order[i], out);
        prev = at;
    }
    ck_assert_msg(strstr(json_entry(out, "cpu"), "\"state\":\"up\""),
                  "the cpu daemon is not up: %s", out);
    CK_DAEMON_STOP(&d);
    for (int i = 0; i < 3; i++) {
        socket_path(path, sizeof path, dir, stale[i]);
        ck_assert_int_eq(unlink(path), 0);
    }
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

static Suite *ctl_all_suite(void) {
    Suite *s = suite_create("ctl-all");
    TCase *tc = tcase_create("several daemons");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_status_all_and_device);
    tcase_add_test(tc, test_status_all_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(ctl_all_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
