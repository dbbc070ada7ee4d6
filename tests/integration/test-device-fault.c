/*
 * A device fault end to end (docs/cuda.md, "A lost device"), on the suite's
 * device: the CPU in CI, cuda:0 on the GPU machine (scripts/gpu-check.sh).
 * The fault is made by the fault-injection operation (OP_TEST_FAULT), queued
 * through the test-only client call of client/testing.h; on CUDA a kernel
 * writes to an illegal address and poisons the context for real, on the CPU
 * the backend declares its device lost the same way.
 *
 *  - Without --test-fault-injection the operation is refused typed
 *    (TF_ERR_UNSUPPORTED, the message naming the flag), in a scoped and in a
 *    held session; nothing else changes (the held session goes on, results
 *    stay correct, no execution error), and a reload that sets
 *    [testing] fault_injection cannot turn it on (it needs a restart).
 *  - With the flag, three clients are connected: one holding a session (it
 *    injects the fault with a plain submit, which waits for nothing), one
 *    with a pending download in flight behind a chain of large matrix
 *    products, one idle holding a tensor. Every client then gets
 *    TF_ERR_DEVICE, from its next call or from what it was waiting for, and
 *    TF_ERR_DISCONNECTED after that; a transfer the fault did not cut brought
 *    correct data. The daemon exits with status 1 within its 5 s watchdog,
 *    having logged the loss and told the service manager (sd_notify
 *    STATUS=device lost ..., STOPPING=1, on a NOTIFY_SOCKET this test
 *    listens on). A daemon restarted on the same socket serves new clients
 *    with correct results, and the old clients stay disconnected.
 *  - [testing] fault_injection = true in the configuration file does what
 *    the flag does; a scoped session that injects gets TF_ERR_DEVICE.
 *
 * Inputs are fresh random values (TENFERRO_TEST_SEED replays them); results
 * are compared with products and sums computed here in double precision.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client/testing.h"
#include "tests/integration/harness.h"

/* The chain the pending transfer waits behind: CHAIN products of two DIM x DIM f64 matrices. */
#define DIM 1536
#define CHAIN 3
/* Entries of a product checked against a dot product computed here. */
#define SAMPLED 48
/* The watchdog of docs/cuda.md, and the margin allowed for noticing the exit. */
#define WATCHDOG_MS 5000
#define EXIT_MARGIN_MS 1000
/* How long a test waits for a line in the daemon's log. */
#define LOG_WAIT_MS 30000

/* ---- session callbacks ---- */

typedef struct fault_args {
    tf_tensor in, out;
} fault_args;

/* Queues the fault-injection operation on args->in. */
static tf_status inject_fn(tf_view *v, void *arg) {
    fault_args *a = arg;
    return tf__test_inject_fault(v, a->in, &a->out);
}

typedef struct add_args {
    tf_tensor a, b, out;
} add_args;

/* Queues out = a + b. */
static tf_status add_fn(tf_view *v, void *arg) {
    add_args *a = arg;
    return tf_view_add(v, a->a, a->b, &a->out);
}

typedef struct chain_args {
    tf_tensor m;
    tf_tensor out[CHAIN];
} chain_args;

/* Queues CHAIN independent products m x m: seconds of work on the CPU, a moment on a GPU. */
static tf_status chain_fn(tf_view *v, void *arg) {
    chain_args *a = arg;
    for (int i = 0; i < CHAIN; i++) {
        tf_status st = tf_view_matmul(v, a->m, a->m, &a->out[i]);
        if (st != TF_OK) return st;
    }
    return TF_OK;
}

/* ---- helpers ---- */

/* Uploads n random f64 values as a vector (or a square matrix when dim > 0); keeps them in *host. */
static tf_tensor upload_random(tf_client *c, size_t n, int64_t dim, double **host) {
    tf_tensor t;
    int64_t shape[2] = {dim > 0 ? dim : (int64_t)n, dim};
    void *data;
    CK_STATUS(c, th_upload_random(c, TF_F64, dim > 0 ? 2 : 1, shape, &data, &t), TF_OK);
    *host = data;
    return t;
}

/* Downloads x + y computed by the daemon and compares it with the sum computed here. */
static void check_sum(tf_client *c, tf_tensor x, tf_tensor y, const double *hx, const double *hy,
                      size_t n) {
    add_args a = {x, y, 0};
    CK_STATUS(c, tf_with_session(c, add_fn, &a), TF_OK);
    double *got = NULL;
    size_t bytes = 0;
    CK_STATUS(c, tf_download(c, a.out, (void **)&got, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, n * sizeof(double));
    double *want = malloc(n * sizeof *want);
    ck_assert_ptr_nonnull(want);
    for (size_t i = 0; i < n; i++) want[i] = hx[i] + hy[i];
    double diff = th_max_rel_diff(TF_F64, n, got, want, 1e-3);
    ck_assert_msg(diff <= th_tolerance(TF_F64), "x + y differs from the reference by %g", diff);
    free(want);
    free(got);
    CK_STATUS(c, tf_tensor_free(c, a.out), TF_OK);
}

/* Compares SAMPLED entries of the product m x m (row-major, dim x dim) with dot products here. */
static void check_product_entries(const double *got, const double *m, int64_t dim) {
    for (int s = 0; s < SAMPLED; s++) {
        int64_t i = rand() % dim, j = rand() % dim;
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < dim; k++) {
            ref += m[i * dim + k] * m[k * dim + j];
            mag += __builtin_fabs(m[i * dim + k] * m[k * dim + j]);
        }
        double err = __builtin_fabs(got[i * dim + j] - ref);
        ck_assert_msg(err <= 1e-12 * mag + 1e-300,
                      "product entry (%lld, %lld) is %.17g, expected %.17g", (long long)i,
                      (long long)j, got[i * dim + j], ref);
    }
}

/* Writes `text` to /tmp/tf-test-fault-<pid>-<tag>.conf and puts that path in path. */
static void write_config(char *path, size_t len, const char *tag, const char *text) {
    ck_assert_msg(th_write_config(path, len, "fault", tag, text) == 0, "cannot write %s", path);
}

/* 1 when the daemon's log contains `needle`. */
static int log_has(const th_daemon *d, const char *needle) {
    char *text = th_daemon_log(d);
    int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* Waits until the daemon's log contains `needle`; fails the test after LOG_WAIT_MS. */
static void wait_log(const th_daemon *d, const char *needle) {
    for (int waited = 0; waited < LOG_WAIT_MS; waited += 10) {
        if (log_has(d, needle)) return;
        th_sleep_ms(10);
    }
    ck_abort_msg("the daemon's log (%s) never said \"%s\"", d->log_path, needle);
}

/*
 * Waits for the daemon to exit by itself after the fault (injected at
 * fault_ms): its status must be 1, within the watchdog. Returns the time it took.
 */
static double expect_exit_1(th_daemon *d, double fault_ms) {
    char log[sizeof d->log_path];
    memcpy(log, d->log_path, sizeof log);
    int rc = th_daemon_wait(d, WATCHDOG_MS + EXIT_MARGIN_MS);
    double took = th_now_ms() - fault_ms;
    ck_assert_msg(rc != -1, "tenferrod still runs %.0f ms after the fault (log %s)", took, log);
    ck_assert_msg(rc == 1, "tenferrod exited with status %d after the fault, expected 1 (log %s)", rc, log);
    ck_assert_msg(took <= WATCHDOG_MS + EXIT_MARGIN_MS, "tenferrod took %.0f ms to exit", took);
    return took;
}

/*
 * After the loss, calls on c give TF_ERR_DEVICE (from the daemon's last word;
 * `first` says whether this client's very first call must be it), then
 * TF_ERR_DISCONNECTED for good. A client that already got TF_ERR_DEVICE from
 * what it waited for may meet the last word once more.
 */
static void expect_device_then_disconnected(tf_client *c, tf_tensor t, int first_must_be_device,
                                            const char *who) {
    int devices = 0;
    for (int call = 0; call < 4; call++) {
        void *data = NULL;
        size_t bytes = 0;
        tf_status st = tf_download(c, t, &data, &bytes);
        free(data);
        if (st == TF_ERR_DEVICE) {
            devices++;
            ck_assert_msg(strstr(tf_client_last_error(c), "device") != NULL,
                          "%s: TF_ERR_DEVICE without a reason: %s", who, tf_client_last_error(c));
            if (devices == 1 && call == 0)
                ck_assert_msg(strstr(tf_client_last_error(c), "the device is lost") != NULL,
                              "%s: the last word does not say the device is lost: %s", who,
                              tf_client_last_error(c));
            continue;
        }
        ck_assert_msg(st == TF_ERR_DISCONNECTED, "%s: call %d after the fault returned %s: %s", who,
                      call + 1, tf_status_name(st), tf_client_last_error(c));
        ck_assert_msg(!first_must_be_device || devices > 0,
                      "%s: TF_ERR_DISCONNECTED before any TF_ERR_DEVICE", who);
        ck_assert_msg(devices <= 1, "%s: %d TF_ERR_DEVICE from the last word", who, devices);
        CK_STATUS(c, tf_tensor_free(c, t), TF_ERR_DISCONNECTED);
        return;
    }
    ck_abort_msg("%s: never TF_ERR_DISCONNECTED after the fault", who);
}

/* ---- a stand-in for systemd's notification socket ---- */

typedef struct notify_sink {
    int fd;
    char path[108];
} notify_sink;

/* Binds a datagram socket and names it in $NOTIFY_SOCKET, for the daemon started next. */
static void notify_open(notify_sink *n) {
    snprintf(n->path, sizeof n->path, "/tmp/tf-test-notify-%d.sock", (int)getpid());
    unlink(n->path);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", n->path);
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_msg(n->fd >= 0 && bind(n->fd, (struct sockaddr *)&addr, sizeof addr) == 0,
                  "cannot bind %s: %s", n->path, strerror(errno));
    setenv("NOTIFY_SOCKET", n->path, 1);
}

/* Everything the daemon reported (datagrams joined by newlines); unsets $NOTIFY_SOCKET. */
static char *notify_collect(notify_sink *n) {
    unsetenv("NOTIFY_SOCKET");
    size_t cap = 1 << 16, len = 0;
    char *all = calloc(1, cap);
    ck_assert_ptr_nonnull(all);
    char buf[4096];
    ssize_t got;
    while ((got = recv(n->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
        if (len + (size_t)got + 2 < cap) {
            memcpy(all + len, buf, (size_t)got);
            len += (size_t)got;
            all[len++] = '\n';
        }
    close(n->fd);
    unlink(n->path);
    return all;
}

/* ---- tests ---- */

/*
 * Without the flag: refused typed in a scoped and in a held session, naming
 * the flag; the held session goes on; results stay correct; a reload cannot
 * turn fault injection on.
 */
START_TEST(test_refused_without_flag) {
    char path[128];
    write_config(path, sizeof path, "off", "[testing]\nfault_injection = false\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    ck_assert_msg(!log_has(&d, "fault injection is on"), "the log says fault injection is on");
    tf_client *c = th_connect(&d);
    const size_t n = 1000;
    double *hx, *hy;
    tf_tensor x = upload_random(c, n, 0, &hx), y = upload_random(c, n, 0, &hy);

    fault_args f = {x, 0};
    CK_STATUS(c, tf_with_session(c, inject_fn, &f), TF_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(tf_client_last_error(c), "--test-fault-injection") != NULL,
                  "the refusal does not name the flag: %s", tf_client_last_error(c));
    ck_assert_int_eq(tf_client_failed_index(c), 0);
    ck_assert_int_eq(tf_tensor_info(c, f.out, NULL, NULL, NULL), TF_ERR_UNKNOWN_HANDLE);
    check_sum(c, x, y, hx, hy, n);

    tf_session *s = NULL;
    CK_STATUS(c, tf_session_open(c, &s), TF_OK);
    CK_STATUS(c, tf_session_with(s, inject_fn, &f), TF_OK);
    CK_STATUS(c, tf_session_submit(s), TF_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(tf_client_last_error(c), "--test-fault-injection") != NULL,
                  "the refusal does not name the flag: %s", tf_client_last_error(c));
    add_args a = {x, y, 0};
    CK_STATUS(c, tf_session_with(s, add_fn, &a), TF_OK);
    CK_STATUS(c, tf_session_synchronize(s), TF_OK);
    tf_session_counters k;
    CK_STATUS(c, tf_session_close(s, &k), TF_OK);
    ck_assert_uint_eq(k.failed_submits, 1);
    CK_STATUS(c, tf_tensor_free(c, a.out), TF_OK);

    /* Not reloadable: the file now says true, the running daemon still refuses. */
    write_config(path, sizeof path, "off", "[testing]\nfault_injection = true\n");
    ck_assert(kill(d.pid, SIGHUP) == 0);
    wait_log(&d, "configuration reloaded");
    ck_assert_msg(log_has(&d, "[testing] fault_injection change only at restart"),
                  "the reload does not say fault_injection needs a restart");
    CK_STATUS(c, tf_with_session(c, inject_fn, &f), TF_ERR_UNSUPPORTED);
    check_sum(c, x, y, hx, hy, n);
    ck_assert_uint_eq(th_counter(&d, "execution_errors"), 0);
    ck_assert_uint_ge(th_counter(&d, "ops_rejected"), 3);
    CK_STATUS(c, tf_tensor_free(c, x), TF_OK);
    CK_STATUS(c, tf_tensor_free(c, y), TF_OK);
    tf_disconnect(c);
    CK_DAEMON_STOP(&d);
    unlink(path);
    free(hx);
    free(hy);
}
END_TEST

/*
 * The whole path: three clients (held session, pending transfer, idle), the
 * fault, TF_ERR_DEVICE then TF_ERR_DISCONNECTED for each, exit 1 within the
 * watchdog, the service manager told, a restarted daemon serving correctly.
 */
START_TEST(test_fault_end_to_end) {
    notify_sink sink;
    notify_open(&sink);
    th_daemon d;
    CK_DAEMON_START(&d, "--test-fault-injection", "--workers", "4");
    ck_assert_msg(log_has(&d, "fault injection is on"), "the log does not warn that fault injection is on");
    char socket_path[sizeof d.socket];
    memcpy(socket_path, d.socket, sizeof socket_path);

    /* The idle client: connected, holding a tensor, doing nothing. */
    tf_client *idle = th_connect(&d);
    double *h_idle;
    tf_tensor t_idle = upload_random(idle, 4096, 0, &h_idle);

    /* The pending client: products queued on its stream, a pending download of the last behind them. */
    tf_client *pend = th_connect(&d);
    double *h_m;
    tf_tensor m = upload_random(pend, (size_t)DIM * DIM, DIM, &h_m);
    tf_session *ps = NULL;
    CK_STATUS(pend, tf_session_open(pend, &ps), TF_OK);
    chain_args ch = {.m = m};
    CK_STATUS(pend, tf_session_with(ps, chain_fn, &ch), TF_OK);
    tf_session_counters k;
    CK_STATUS(pend, tf_session_close(ps, &k), TF_OK); /* submits; waits for nothing */
    tf_pinned_buffer *buf = NULL;
    CK_STATUS(pend, tf_pinned_buffer_new(pend, (size_t)DIM * DIM * sizeof(double), &buf), TF_OK);
    tf_pending *p = NULL;
    CK_STATUS(pend, tf_download_pending(pend, ch.out[CHAIN - 1], buf, &p), TF_OK);
    int ready_before = tf_pending_is_ready(p);

    /* The holder: a held session, which injects the fault with a plain submit. */
    tf_client *holder = th_connect(&d);
    double *h_x;
    tf_tensor x = upload_random(holder, 256, 0, &h_x);
    tf_session *hs = NULL;
    CK_STATUS(holder, tf_session_open(holder, &hs), TF_OK);
    fault_args f = {x, 0};
    CK_STATUS(holder, tf_session_with(hs, inject_fn, &f), TF_OK);
    double fault_ms = th_now_ms();
    tf_status st = tf_session_submit(hs);
    ck_assert_msg(st == TF_OK || st == TF_ERR_DEVICE, "the injecting submit returned %s: %s",
                  tf_status_name(st), tf_client_last_error(holder));

    double took = expect_exit_1(&d, fault_ms);
    int clean = log_has(&d, "stopped after losing the device");
    printf("test-device-fault: %s: tenferrod exited 1 %.0f ms after the fault (%s); the pending "
           "download was %s when the fault was injected\n",
           th_device(), took, clean ? "a clean shutdown" : "the watchdog ended it",
           ready_before ? "already complete" : "in flight");
    ck_assert_msg(log_has(&d, "device lost:"), "the log does not report the lost device");
    if (strcmp(th_device(), "cpu") == 0)
        ck_assert_msg(clean, "the shutdown after the loss did not finish: the watchdog ended it");
    unlink(d.log_path); /* kept by the harness after a non-zero exit; this one was expected */

    /* The holder learns it at its synchronize, then the connection is gone. */
    st = tf_session_synchronize(hs);
    ck_assert_msg(st == TF_ERR_DEVICE, "synchronize after the fault returned %s: %s",
                  tf_status_name(st), tf_client_last_error(holder));
    tf_session_release(hs);
    expect_device_then_disconnected(holder, x, 0, "the holder");

    /* The pending download: cut by the fault (TF_ERR_DEVICE), or complete with correct data. */
    tf_tensor back = 0;
    st = tf_pending_wait(p, &back, &buf);
    ck_assert_msg(st == TF_OK || st == TF_ERR_DEVICE, "the pending download returned %s: %s",
                  tf_status_name(st), tf_client_last_error(pend));
    if (st == TF_OK) check_product_entries(tf_pinned_buffer_data(buf), h_m, DIM);
    printf("test-device-fault: the pending download %s\n",
           st == TF_OK ? "had completed before the fault: its data is correct"
                       : "was cut by the fault: TF_ERR_DEVICE");
    expect_device_then_disconnected(pend, m, st == TF_OK, "the pending client");
    CK_STATUS(pend, tf_pinned_buffer_free(buf), TF_OK);

    /* The idle client's very first call is TF_ERR_DEVICE. */
    expect_device_then_disconnected(idle, t_idle, 1, "the idle client");

    char *notes = notify_collect(&sink);
    ck_assert_msg(strstr(notes, "READY=1") != NULL, "no READY=1 reached the service manager:\n%s", notes);
    ck_assert_msg(strstr(notes, "STATUS=device lost (") != NULL,
                  "the service manager was not told the device is lost:\n%s", notes);
    ck_assert_msg(strstr(notes, "STOPPING=1") != NULL, "no STOPPING=1 reached the service manager:\n%s",
                  notes);
    free(notes);

    /* Restarted on the same socket (as systemd would), it serves new clients correctly. */
    th_daemon d2;
    ck_assert_msg(th_daemon_start_on(&d2, socket_path, (char *)NULL) == 0,
                  "tenferrod did not start again on %s (log %s)", socket_path, d2.log_path);
    tf_client *fresh = th_connect(&d2);
    double *ha, *hb;
    tf_tensor a = upload_random(fresh, 2048, 0, &ha), b = upload_random(fresh, 2048, 0, &hb);
    check_sum(fresh, a, b, ha, hb, 2048);
    double *h_sq;
    tf_tensor sq = upload_random(fresh, 96 * 96, 96, &h_sq);
    chain_args one = {.m = sq};
    CK_STATUS(fresh, tf_with_session(fresh, chain_fn, &one), TF_OK);
    double *prod = NULL;
    size_t bytes = 0;
    CK_STATUS(fresh, tf_download(fresh, one.out[0], (void **)&prod, &bytes), TF_OK);
    ck_assert_uint_eq(bytes, 96 * 96 * sizeof(double));
    check_product_entries(prod, h_sq, 96);
    free(prod);
    /* The old clients stay disconnected: nothing reconnects behind their back. */
    CK_STATUS(idle, tf_download(idle, t_idle, (void **)&prod, &bytes), TF_ERR_DISCONNECTED);
    tf_disconnect(fresh);
    tf_disconnect(idle);
    tf_disconnect(pend);
    tf_disconnect(holder);
    CK_DAEMON_STOP(&d2);
    free(h_idle);
    free(h_m);
    free(h_x);
    free(ha);
    free(hb);
    free(h_sq);
}
END_TEST

/* The configuration key does what the flag does; a scoped session that injects gets TF_ERR_DEVICE. */
START_TEST(test_config_key_enables) {
    char path[128];
    write_config(path, sizeof path, "on", "[testing]\nfault_injection = yes\n");
    th_daemon d;
    CK_DAEMON_START(&d, "--config", path);
    ck_assert_msg(log_has(&d, "fault injection is on"), "the log does not warn that fault injection is on");
    tf_client *c = th_connect(&d);
    double *hx;
    tf_tensor x = upload_random(c, 64, 0, &hx);
    fault_args f = {x, 0};
    double fault_ms = th_now_ms();
    tf_status st = tf_with_session(c, inject_fn, &f);
    ck_assert_msg(st == TF_ERR_DEVICE, "a scoped session injecting the fault returned %s: %s",
                  tf_status_name(st), tf_client_last_error(c));
    expect_exit_1(&d, fault_ms);
    unlink(d.log_path);
    expect_device_then_disconnected(c, x, 0, "the scoped client");
    tf_disconnect(c);
    unlink(path);
    free(hx);
}
END_TEST

static Suite *device_fault_suite(void) {
    Suite *s = suite_create("device-fault");
    TCase *tc = tcase_create("fault injection");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_refused_without_flag);
    tcase_add_test(tc, test_fault_end_to_end);
    tcase_add_test(tc, test_config_key_enables);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    th_seed();
    SRunner *sr = srunner_create(device_fault_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
