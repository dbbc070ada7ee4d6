/*
 * Which daemon a client reaches (tf_connect, tf_connect_device): two daemons
 * on private sockets stand for the daemons of GPUs 0 and 1 in a private
 * runtime folder, told apart by their max_clients; the rules of client.h in
 * order, and the failures (a device name of no form, no daemon at all).
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/integration/harness.h"

static char dir[PATH_MAX];
static th_daemon gpu0, gpu1;

/* Starts the daemons of "GPU 0" (max_clients 70) and "GPU 1" (71) in a fresh folder. */
static void start_both(void) {
    snprintf(dir, sizeof dir, "/tmp/tf-connect-%d-XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char s0[PATH_MAX + 32], s1[PATH_MAX + 32];
    snprintf(s0, sizeof s0, "%s/tenferrod-0.sock", dir);
    snprintf(s1, sizeof s1, "%s/tenferrod-1.sock", dir);
    ck_assert_int_eq(th_daemon_start_on(&gpu0, s0, "--max-clients", "70", NULL), 0);
    ck_assert_int_eq(th_daemon_start_on(&gpu1, s1, "--max-clients", "71", NULL), 0);
    setenv("TENFERRO_RUNTIME_DIR", dir, 1);
    unsetenv("TENFERRO_SOCKET");
    unsetenv("TENFERRO_DEVICE");
}

static void stop_both(void) {
    CK_DAEMON_STOP(&gpu0);
    CK_DAEMON_STOP(&gpu1);
    unsetenv("TENFERRO_RUNTIME_DIR");
    unsetenv("TENFERRO_SOCKET");
    unsetenv("TENFERRO_DEVICE");
    rmdir(dir);
}

/* The max_clients of the daemon a connected client reached (70: GPU 0, 71: GPU 1). */
static uint32_t reached(tf_client *c) {
    tf_daemon_status *s = NULL;
    CK_STATUS(c, tf_daemon_status_get(c, &s), TF_OK);
    uint32_t m = s->max_clients;
    tf_daemon_status_free(s);
    return m;
}

/* Connects by device name and says which daemon answered; 0 when the connect failed. */
static uint32_t via_device(const char *device, tf_status want) {
    tf_client *c = NULL;
    tf_status st = tf_connect_device(device, &c);
    ck_assert_msg(st == want, "tf_connect_device(%s): %s (%s)", device ? device : "NULL",
                  tf_status_name(st), c ? tf_client_last_error(c) : "");
    ck_assert_ptr_nonnull(c);
    uint32_t m = st == TF_OK ? reached(c) : 0;
    tf_disconnect(c);
    return m;
}

static uint32_t via_connect(const char *path, tf_status want) {
    tf_client *c = NULL;
    tf_status st = tf_connect(path, &c);
    ck_assert_msg(st == want, "tf_connect(%s): %s (%s)", path ? path : "NULL", tf_status_name(st),
                  c ? tf_client_last_error(c) : "");
    uint32_t m = st == TF_OK ? reached(c) : 0;
    tf_disconnect(c);
    return m;
}

START_TEST(test_device_names) {
    start_both();
    ck_assert_uint_eq(via_device("cuda:1", TF_OK), 71);
    ck_assert_uint_eq(via_device("1", TF_OK), 71);
    ck_assert_uint_eq(via_device("cuda:0", TF_OK), 70);
    /* auto, NULL and "" follow tf_connect: the first default that exists is GPU 0's. */
    ck_assert_uint_eq(via_device("auto", TF_OK), 70);
    ck_assert_uint_eq(via_device(NULL, TF_OK), 70);
    /* No CPU daemon here: a typed failure naming its socket. */
    tf_client *c = NULL;
    ck_assert_int_eq(tf_connect_device("cpu", &c), TF_ERR_DISCONNECTED);
    ck_assert_ptr_nonnull(strstr(tf_client_last_error(c), "tenferrod-cpu.sock"));
    tf_disconnect(c);
    /* Names of no form. */
    via_device("gpu7", TF_ERR_INVALID_ARGUMENT);
    via_device("cuda:", TF_ERR_INVALID_ARGUMENT);
    via_device("cuda:1x", TF_ERR_INVALID_ARGUMENT);
    stop_both();
}
END_TEST

START_TEST(test_environment_order) {
    start_both();
    setenv("TENFERRO_DEVICE", "cuda:1", 1);
    ck_assert_uint_eq(via_connect(NULL, TF_OK), 71);
    /* TENFERRO_SOCKET comes before TENFERRO_DEVICE, the argument before both. */
    setenv("TENFERRO_SOCKET", gpu0.socket, 1);
    ck_assert_uint_eq(via_connect(NULL, TF_OK), 70);
    ck_assert_uint_eq(via_connect(gpu1.socket, TF_OK), 71);
    /* tf_connect_device with a name ignores the environment. */
    ck_assert_uint_eq(via_device("cuda:1", TF_OK), 71);
    unsetenv("TENFERRO_SOCKET");
    setenv("TENFERRO_DEVICE", "nonsense", 1);
    tf_client *c = NULL;
    ck_assert_int_eq(tf_connect(NULL, &c), TF_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(tf_client_last_error(c), "TENFERRO_DEVICE"));
    /* A client after a failed connect is a client: its calls say disconnected. */
    tf_daemon_status *s = NULL;
    ck_assert_int_eq(tf_daemon_status_get(c, &s), TF_ERR_DISCONNECTED);
    tf_disconnect(c);
    stop_both();
}
END_TEST

/* No socket anywhere: the failure names TENFERRO_SOCKET and both default paths. */
START_TEST(test_nothing_to_connect_to) {
    char empty[PATH_MAX];
    snprintf(empty, sizeof empty, "/tmp/tf-connect-empty-%d-XXXXXX", (int)getpid());
    ck_assert_ptr_nonnull(mkdtemp(empty));
    setenv("TENFERRO_RUNTIME_DIR", empty, 1);
    unsetenv("TENFERRO_SOCKET");
    unsetenv("TENFERRO_DEVICE");
    tf_client *c = NULL;
    ck_assert_int_eq(tf_connect(NULL, &c), TF_ERR_DISCONNECTED);
    const char *msg = tf_client_last_error(c);
    char p0[PATH_MAX + 32], pc[PATH_MAX + 32];
    snprintf(p0, sizeof p0, "%s/tenferrod-0.sock", empty);
    snprintf(pc, sizeof pc, "%s/tenferrod-cpu.sock", empty);
    ck_assert_msg(strstr(msg, "TENFERRO_SOCKET") && strstr(msg, p0) && strstr(msg, pc),
                  "the message does not name the variable and both paths: %s", msg);
    tf_disconnect(c);
    unsetenv("TENFERRO_RUNTIME_DIR");
    rmdir(empty);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("connect");
    TCase *tc = tcase_create("rules");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_device_names);
    tcase_add_test(tc, test_environment_order);
    tcase_add_test(tc, test_nothing_to_connect_to);
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
