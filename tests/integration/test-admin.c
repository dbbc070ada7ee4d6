/*
 * Integration tests of the operator side (DESIGN.md §5, §9, §11;
 * docs/operations.md): who may send admin requests, terminate (a holder's
 * reservation and memory come back, a queued opener is admitted, bystanders
 * keep their data), drain (typed refusal of new clients, exit 0 when the last
 * one leaves), trim (TF_ERR_BUSY at once while a held session is open), and
 * tenferroctl's JSON and Prometheus output.
 *
 * Every test starts its own tenferrod. tenferroctl is the real binary, found
 * next to TENFERRO_DAEMON, run as a child process; other clients are child
 * processes (th_spawn) or connections of the test process itself. A child
 * tells the test process it is ready by writing to a pipe, and waits for the
 * test process the same way; the test process waits on the daemon's counters.
 * The permission test needs root (it drops to uid/gid 65534) and says it is
 * skipped otherwise.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/harness.h"

/* How long the test process waits for a child, a counter or the daemon's exit. */
#define WAIT_MS 30000
/* The unprivileged account the permission test runs its child as. */
#define NOBODY 65534
/* Elements of the f64 tensors the clients upload. */
#define N 1024

/* ---- pipes between processes ---- */

/* Writes one 64-bit value to a pipe (a child saying "ready", the test process saying "go"). */
static int put_u64(int fd, uint64_t v) { return write(fd, &v, sizeof v) == (ssize_t)sizeof v; }

/* Reads one 64-bit value within WAIT_MS; 0 on timeout or when every writer has closed the pipe. */
static int get_u64(int fd, uint64_t *v) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, WAIT_MS) == 1 && read(fd, v, sizeof *v) == (ssize_t)sizeof *v;
}

/* ---- data ---- */

/* Uploads N f64 values i * scale. */
static tf_status upload_ramp(tf_client *c, double scale, tf_tensor *t) {
    static double v[N];
    for (int i = 0; i < N; i++) v[i] = i * scale;
    int64_t shape[1] = {N};
    return tf_upload(c, TF_F64, 1, shape, v, t);
}

/* 1 when tensor t still holds upload_ramp(scale)'s values. */
static int ramp_intact(tf_client *c, tf_tensor t, double scale) {
    void *data = NULL;
    size_t bytes = 0;
    int ok = tf_download(c, t, &data, &bytes) == TF_OK && bytes == N * sizeof(double);
    for (int i = 0; ok && i < N; i++) ok = ((double *)data)[i] == i * scale;
    free(data);
    return ok;
}

/* Connects a client that uploads upload_ramp(1.0) into *t and opens a held session *s. */
static tf_client *connect_holder(const th_daemon *d, tf_tensor *t, tf_session **s) {
    tf_client *c = th_connect(d);
    CK_STATUS(c, upload_ramp(c, 1.0, t), TF_OK);
    CK_STATUS(c, tf_session_open(c, s), TF_OK);
    return c;
}

/* ---- raw admin requests ---- */

/* Sends AdminRequest{kind, client_id} as frame `seq` and returns the reply (caller frees). */
static Tenferro__Frame *raw_admin(int fd, uint64_t seq, uint32_t kind, uint64_t client_id) {
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__AdminRequest a = TENFERRO__ADMIN_REQUEST__INIT;
    a.kind = kind;
    a.client_id = client_id;
    f.seq = seq;
    f.body_case = TENFERRO__FRAME__BODY_ADMIN_REQUEST;
    f.admin_request = &a;
    return th_raw_send(fd, &f) == 0 ? th_raw_recv(fd, WAIT_MS) : NULL;
}

/* The status of a Result reply (TF_ERR_PROTOCOL for anything else); frees the reply. */
static tf_status result_of(Tenferro__Frame *reply, char *msg, size_t len) {
    tf_status st = TF_ERR_PROTOCOL;
    if (reply && reply->body_case == TENFERRO__FRAME__BODY_RESULT) {
        st = (tf_status)reply->result->status;
        snprintf(msg, len, "%s", reply->result->message);
    }
    tf__frame_free(reply);
    return st;
}

/* What the unprivileged child is asked to do. */
typedef struct nobody_args {
    const th_daemon *d;
    uint64_t target;    /* the client it tries to terminate */
    tf_status expected; /* for every kind (PERMISSION), or for trim only (OK: it is an admin) */
} nobody_args;

/* Drops to uid/gid 65534, then sends terminate, drain and trim over a raw connection. */
static int nobody_main(void *arg) {
    const nobody_args *a = arg;
    th_die_with_parent();
    CHILD_CHECK(th_become(NOBODY, NOBODY));
    int fd = th_raw_connect(a->d);
    CHILD_CHECK(fd >= 0);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    CHILD_CHECK(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY);
    tf__frame_free(hello);
    char msg[512] = "";
    if (a->expected == TF_OK) {
        CHILD_CHECK(result_of(raw_admin(fd, 2, TENFERRO__ADMIN_KIND__ADMIN_TRIM, 0), msg,
                               sizeof msg) == TF_OK);
    } else {
        uint32_t kinds[3] = {TENFERRO__ADMIN_KIND__ADMIN_TERMINATE, TENFERRO__ADMIN_KIND__ADMIN_DRAIN,
                             TENFERRO__ADMIN_KIND__ADMIN_TRIM};
        for (int i = 0; i < 3; i++) {
            tf_status st = result_of(raw_admin(fd, 2 + (uint64_t)i, kinds[i], a->target), msg,
                                     sizeof msg);
            if (st != TF_ERR_PERMISSION) fprintf(stderr, "[child] kind %u: %s: %s\n", kinds[i],
                                                 tf_status_name(st), msg);
            CHILD_CHECK(st == TF_ERR_PERMISSION);
            CHILD_CHECK(strstr(msg, "admin requests need root, the tenferrod user"));
        }
    }
    close(fd);
    return 0;
}

/*
 * Admin requests from a user who is not root, not the daemon's user and not in
 * admin_users are refused with TF_ERR_PERMISSION and change nothing; listing the
 * user (_i = 1) or its group (_i = 2) in admin_users lets it in.
 */
START_TEST(test_non_admin_refused) {
    static const char *const admins[3] = {"", "65534", "@65534"};
    if (geteuid() != 0) {
        printf("test_non_admin_refused (admin_users \"%s\"): skipped: needs root (it runs a "
               "client as uid %d)\n", admins[_i], NOBODY);
        return;
    }
    th_daemon d;
    CK_DAEMON_START(&d, "--socket-mode", "0666", "--admin-users", admins[_i]);
    tf_client *target = th_connect(&d);
    tf_tensor t;
    CK_STATUS(target, upload_ramp(target, 1.0, &t), TF_OK);
    nobody_args a = {&d, tf_client_id(target), _i == 0 ? TF_ERR_PERMISSION : TF_OK};
    CK_CHILD_OK(th_spawn(nobody_main, &a), "the unprivileged client");
    ck_assert_int_eq(th_counter(&d, "clients_terminated"), 0);
    ck_assert_msg(ramp_intact(target, t, 1.0), "the target lost its data: %s",
                  tf_client_last_error(target));
    tf_disconnect(target);
    CK_DAEMON_STOP(&d); /* still serving: the refused drain did not start one */
}
END_TEST

/* ---- terminate ---- */

/* The pipes of the holder child: it reports its client id on ready and waits for go. */
typedef struct holder_args {
    const th_daemon *d;
    int ready_wr, go_rd;
} holder_args;

/* Holds a session with a tensor on the device until told to go on, then expects to be gone. */
static int holder_main(void *arg) {
    const holder_args *a = arg;
    th_die_with_parent();
    tf_client *c = th_connect(a->d);
    tf_tensor t;
    tf_session *s = NULL;
    CHILD_CHECK(upload_ramp(c, 2.0, &t) == TF_OK);
    CHILD_CHECK(tf_session_open(c, &s) == TF_OK);
    CHILD_CHECK(put_u64(a->ready_wr, tf_client_id(c)));
    uint64_t go;
    CHILD_CHECK(get_u64(a->go_rd, &go));
    tf_status st = tf_session_synchronize(s);
    const char *why = tf_client_last_error(c);
    if (st != TF_ERR_DISCONNECTED || !strstr(why, "terminated by an administrator"))
        fprintf(stderr, "[holder] synchronize after terminate: %s: %s\n", tf_status_name(st), why);
    /* The daemon's reason arrives even though the send found the connection closed. */
    CHILD_CHECK(st == TF_ERR_DISCONNECTED && strstr(why, "terminated by an administrator"));
    CHILD_CHECK(tf_session_open(c, &s) == TF_ERR_DISCONNECTED);
    tf_disconnect(c);
    return 0;
}

/* Opens a session (queued behind the holder under policy wait), uses it, closes it. */
static int opener_main(void *arg) {
    th_die_with_parent();
    tf_client *c = th_connect(arg);
    tf_session *s = NULL;
    tf_status st = tf_session_open(c, &s);
    if (st != TF_OK) fprintf(stderr, "[opener] open: %s: %s\n", tf_status_name(st), tf_client_last_error(c));
    CHILD_CHECK(st == TF_OK);
    tf_tensor t;
    CHILD_CHECK(upload_ramp(c, 3.0, &t) == TF_OK && ramp_intact(c, t, 3.0));
    CHILD_CHECK(tf_session_close(s, NULL) == TF_OK);
    tf_disconnect(c);
    return 0;
}

/*
 * Terminating a client that holds a session: its next call is
 * TF_ERR_DISCONNECTED, the opener queued behind it (policy wait) is admitted,
 * its device memory is freed, and a bystander's data is untouched.
 */
START_TEST(test_terminate_holder) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "wait", "--wait-deadline-ms", "60000");
    tf_client *bystander = th_connect(&d);
    tf_tensor bt;
    CK_STATUS(bystander, upload_ramp(bystander, 1.0, &bt), TF_OK);
    uint64_t baseline = th_counter(&d, "device_bytes_live");

    int ready[2], go[2];
    ck_assert(pipe(ready) == 0 && pipe(go) == 0);
    holder_args h = {&d, ready[1], go[0]};
    pid_t holder = th_spawn(holder_main, &h);
    close(ready[1]); /* the holder's end only: its exit then reads as end of file */
    uint64_t holder_id = 0;
    ck_assert_msg(get_u64(ready[0], &holder_id), "the holder did not get ready");
    ck_assert_uint_gt(th_counter(&d, "device_bytes_live"), baseline);

    pid_t opener = th_spawn(opener_main, &d);
    CK_COUNTER(&d, "admissions_queued", 1, WAIT_MS);

    char out[1024], id[32];
    snprintf(id, sizeof id, "%llu", (unsigned long long)holder_id);
    ck_assert_msg(th_run_ctl(&d, out, sizeof out, "terminate", id) == 0, "terminate: %s", out);
    CK_CHILD_OK(opener, "the queued opener");
    ck_assert(put_u64(go[1], 1));
    CK_CHILD_OK(holder, "the terminated holder");

    ck_assert_int_eq(th_counter(&d, "clients_terminated"), 1);
    ck_assert_int_eq(th_counter(&d, "sessions_reclaimed"), 1);
    CK_COUNTER(&d, "device_bytes_live", baseline, WAIT_MS);
    tf_session *s = NULL;
    CK_STATUS(bystander, tf_session_open(bystander, &s), TF_OK);
    CK_STATUS(bystander, tf_session_close(s, NULL), TF_OK);
    ck_assert_msg(ramp_intact(bystander, bt, 1.0), "the bystander lost its data");
    tf_disconnect(bystander);
    close(ready[0]);
    close(go[0]);
    close(go[1]);
    CK_DAEMON_STOP(&d);
}
END_TEST

/*
 * A client may terminate itself (it gets TF_OK, then the notice, then EOF);
 * an unknown id is TF_ERR_INVALID_ARGUMENT, reported by tenferroctl with exit 1.
 */
START_TEST(test_terminate_self_and_unknown) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "reject");
    char out[1024];
    ck_assert_int_eq(th_run_ctl(&d, out, sizeof out, "terminate", "999"), 1);
    ck_assert_msg(strstr(out, "tenferroctl: TF_ERR_INVALID_ARGUMENT: no client 999"), "%s", out);
    ck_assert_int_eq(th_run_ctl(&d, out, sizeof out, "terminate", "x"), 2);

    int fd = th_raw_connect(&d);
    Tenferro__Frame *hello = th_raw_hello(fd, TENFERRO__PROTOCOL__PROTOCOL_VERSION);
    ck_assert(hello && hello->body_case == TENFERRO__FRAME__BODY_HELLO_REPLY);
    uint64_t self = hello->hello_reply->client_id;
    tf__frame_free(hello);
    char msg[512] = "";
    ck_assert_int_eq(result_of(raw_admin(fd, 2, TENFERRO__ADMIN_KIND__ADMIN_TERMINATE, self), msg,
                               sizeof msg),
                     TF_OK);
    Tenferro__Frame *notice = th_raw_recv(fd, WAIT_MS);
    ck_assert(notice && notice->seq == 0);
    ck_assert_int_eq(result_of(notice, msg, sizeof msg), TF_ERR_DISCONNECTED);
    ck_assert_msg(strstr(msg, "terminated by an administrator"), "%s", msg);
    ck_assert(th_raw_closed(fd, WAIT_MS));
    close(fd);
    ck_assert_int_eq(th_counter(&d, "clients_terminated"), 1);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- drain ---- */

/*
 * After drain, a new connection is refused with TF_ERR_BUSY at connect, the
 * connected client keeps working, and the daemon exits 0 once it disconnects.
 */
START_TEST(test_drain) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "reject");
    tf_client *c = th_connect(&d);
    tf_tensor t;
    CK_STATUS(c, upload_ramp(c, 1.0, &t), TF_OK);
    char out[1024];
    ck_assert_msg(th_run_ctl(&d, out, sizeof out, "drain", NULL) == 0, "drain: %s", out);

    tf_client *late = NULL;
    CK_STATUS(late, tf_connect(d.socket, &late), TF_ERR_BUSY);
    ck_assert_msg(strstr(tf_client_last_error(late), "draining"), "%s", tf_client_last_error(late));
    tf_disconnect(late);
    ck_assert_int_eq(th_run_ctl(&d, out, sizeof out, "status", NULL), 1);
    ck_assert_msg(strstr(out, "tenferroctl: TF_ERR_BUSY: ") && strstr(out, "tenferrod is draining"),
                  "%s", out);

    ck_assert_msg(ramp_intact(c, t, 1.0), "the connected client stopped working: %s",
                  tf_client_last_error(c));
    tf_tensor u;
    CK_STATUS(c, upload_ramp(c, 4.0, &u), TF_OK);
    ck_assert(ramp_intact(c, u, 4.0));
    ck_assert_int_eq(th_daemon_wait(&d, 0), -1); /* still serving its client */
    tf_disconnect(c);
    ck_assert_int_eq(th_daemon_wait(&d, WAIT_MS), 0);
    ck_assert_msg(access(d.socket, F_OK) != 0, "the socket %s is left behind", d.socket);
}
END_TEST

/* ---- trim ---- */

/* trim answers TF_ERR_BUSY at once while a held session is open, and TF_OK after it closed. */
START_TEST(test_trim_busy_while_held) {
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "reject");
    tf_tensor t;
    tf_session *s = NULL;
    tf_client *c = connect_holder(&d, &t, &s);
    char out[1024], want[128];
    double t0 = th_now_ms();
    ck_assert_int_eq(th_run_ctl(&d, out, sizeof out, "trim", NULL), 1);
    double waited = th_now_ms() - t0;
    snprintf(want, sizeof want, "tenferroctl: TF_ERR_BUSY: a held session of client %llu is open",
             (unsigned long long)tf_client_id(c));
    ck_assert_msg(strstr(out, want), "%s", out);
    ck_assert_msg(waited < 5000, "trim took %.0f ms while a session was held", waited);
    CK_STATUS(c, tf_session_close(s, NULL), TF_OK);
    ck_assert_msg(th_run_ctl(&d, out, sizeof out, "trim", NULL) == 0, "trim: %s", out);
    ck_assert(ramp_intact(c, t, 1.0));
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
}
END_TEST

/* ---- status --json and metrics ---- */

/* A client name with every character JSON and Prometheus must escape, and a byte that is not UTF-8. */
#define ODD_NAME "odd\"name\\with\nnewline\ttab\x01\xff"

/*
 * With two clients, one holding a session and one with an odd name, status
 * --json is one valid JSON object naming the holder, and metrics is Prometheus
 * text with tenferrod_up 1 and escaped labels. The daemon keeps names
 * printable (\xHH for other bytes, \\ for a backslash); each format then
 * escapes what it must.
 */
START_TEST(test_status_json_and_metrics) {
    ck_assert_msg(th_json_valid("{\"a\":[1,-2.5e3,true,null,\"\\u00e9\"]}") && !th_json_valid("{\"a\":}") &&
                      !th_json_valid("\"raw\x01\"") && !th_json_valid("[1,]"),
                  "the JSON checker itself is wrong");
    th_daemon d;
    CK_DAEMON_START(&d, "--reservation-policy", "reject");
    tf_tensor t;
    tf_session *s = NULL;
    tf_client *holder = connect_holder(&d, &t, &s);
    setenv("TENFERRO_CLIENT_NAME", ODD_NAME, 1);
    tf_client *odd = th_connect(&d);
    unsetenv("TENFERRO_CLIENT_NAME");

    static char out[1 << 16];
    char want[256];
    ck_assert_msg(th_run_ctl(&d, out, sizeof out, "status", "--json") == 0, "status --json: %s", out);
    ck_assert_msg(th_json_valid(out), "status --json is not valid JSON:\n%s", out);
    for (const char *p = out; *p; p++)
        ck_assert_msg((unsigned char)*p < 0x80, "a byte that is not UTF-8 reached the JSON: %s", out);
    unsigned long long hid = (unsigned long long)tf_client_id(holder);
    snprintf(want, sizeof want, "\"holder_client_id\":%llu,", hid);
    ck_assert_msg(strstr(out, want), "no %s in %s", want, out);
    snprintf(want, sizeof want, "{\"id\":%llu,", (unsigned long long)tf_client_id(odd));
    ck_assert_msg(strstr(out, want), "no %s in %s", want, out);
    ck_assert_msg(strstr(out, "\"name\":\"odd\\\"name\\\\\\\\with\\\\x0anewline\\\\x09tab\\\\x01\\\\xff\""),
                  "the odd name is not escaped as expected: %s", out);
    ck_assert_msg(strstr(out, "\"session\":{\"kind\":\"held\",\"id\":"), "%s", out);
    ck_assert_msg(strstr(out, "\"counters\":{\"connections_accepted\":"), "%s", out);

    ck_assert_msg(th_run_ctl(&d, out, sizeof out, "metrics", NULL) == 0, "metrics: %s", out);
    ck_assert_msg(strstr(out, "# TYPE tenferrod_"), "%s", out);
    ck_assert_msg(strstr(out, "\ntenferrod_up 1\n"), "%s", out);
    ck_assert_msg(strstr(out, "\n# TYPE tenferrod_ops_accepted_total counter\n"), "%s", out);
    ck_assert_msg(strstr(out, "\n# TYPE tenferrod_device_bytes_live gauge\n"), "%s", out);
    ck_assert_msg(strstr(out, "\ntenferrod_reservation_held{domain=\"0\"} 1\n"), "%s", out);
    snprintf(want, sizeof want, "\ntenferrod_client_live_bytes{client=\"%llu\",pid=\"%d\"", hid,
             (int)getpid());
    ck_assert_msg(strstr(out, want), "no %s in %s", want + 1, out);
    ck_assert_msg(strstr(out, "name=\"odd\\\"name\\\\\\\\with\\\\x0anewline\\\\x09tab\\\\x01\\\\xff\"}"),
                  "the odd name is not escaped as a label value: %s", out);

    CK_STATUS(holder, tf_session_close(s, NULL), TF_OK);
    tf_disconnect(holder);
    tf_disconnect(odd);
    CK_DAEMON_STOP(&d);
}
END_TEST

static Suite *admin_suite(void) {
    Suite *s = suite_create("admin");
    TCase *tc = tcase_create("operator");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_non_admin_refused, 0, 3);
    tcase_add_test(tc, test_terminate_holder);
    tcase_add_test(tc, test_terminate_self_and_unknown);
    tcase_add_test(tc, test_drain);
    tcase_add_test(tc, test_trim_busy_while_held);
    tcase_add_test(tc, test_status_json_and_metrics);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(admin_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
