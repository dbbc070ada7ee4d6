/*
 * The integration-test harness: starts a real tenferrod on a private socket,
 * runs client processes, speaks raw frames for bad-input tests, reads the
 * daemon's counters, and makes fresh random inputs.
 *
 * Environment: TENFERRO_DAEMON (path of the daemon binary, default
 * build/tenferrod), TENFERRO_TEST_DEVICE (the device the suite runs on,
 * default cpu; the GPU machine runs the same suites with cuda:0).
 */
#ifndef TENFERRO_TESTS_HARNESS_H
#define TENFERRO_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/frame.h"
#include "tenferro/tenferro.h"

typedef struct th_daemon {
    pid_t pid;
    char socket[108];
    char log_path[128];
    int exit_status; /* tenferrod's status (as th_wait) when th_daemon_start failed as it exited */
} th_daemon;

/*
 * The runtime directory the test process's daemons share, as the daemons of
 * one host share /run/tenferro: /tmp/tf-test-PID, made at the first call
 * (mode 0711) and removed with what is left in it when the process exits.
 * A copy between daemons reaches only a socket of this directory.
 */
const char *th_runtime_dir(void);

/*
 * Starts tenferrod on a fresh socket, th_runtime_dir()/tenferrod-N.sock,
 * with the suite's device and any extra arguments (NULL-terminated list),
 * and waits until it accepts connections. The daemon dies with the test
 * process if the test crashes. Returns 0 on success.
 */
int th_daemon_start(th_daemon *d, ...);

/*
 * th_daemon_start on a given socket path (a daemon restarted where its
 * clients expect it), with extra arguments as a NULL-terminated list.
 */
int th_daemon_start_on(th_daemon *d, const char *socket, ...);

/* SIGTERM, then waits; returns the daemon's exit status (0 = clean), or -1. */
int th_daemon_stop(th_daemon *d);

/*
 * Waits up to timeout_ms for the daemon to exit by itself (an admin drain);
 * returns its exit status, or -1 while it is still running.
 */
int th_daemon_wait(th_daemon *d, int timeout_ms);

/* What the daemon has written to its log (its stderr) so far: a malloc'd string, "" if none. */
char *th_daemon_log(const th_daemon *d);

/* The device the suite runs against ("cpu", "cuda:0"). */
const char *th_device(void);

/* Connects a client, failing the test on error. */
tf_client *th_connect(const th_daemon *d);

/* Runs fn(arg) in a forked child process and returns its pid; the child exits with fn's result. */
pid_t th_spawn(int (*fn)(void *arg), void *arg);

/* Waits for a child; returns its exit code, or 128+signal when it was killed. */
int th_wait(pid_t pid);

/* A daemon-wide counter from the status report (as tenferroctl status lists them). */
uint64_t th_counter(const th_daemon *d, const char *name);

/* Polls until counter `name` reaches `value` or timeout_ms passes; returns 1 when reached. */
int th_wait_counter(const th_daemon *d, const char *name, uint64_t value, int timeout_ms);

/* Number of clients the status report lists (connected, past the handshake). */
int th_client_count(const th_daemon *d);

/* The status report (a StatusReply frame, caller frees with tf__frame_free), or NULL. */
Tenferro__Frame *th_status_report(const th_daemon *d);

/*
 * ---- assertions: Check in the test process, stderr plus exit status in children ----
 * (the CK_ macros need <check.h> and <string.h>; the CHILD_ ones <stdio.h> and <unistd.h>.)
 */

/*
 * In the test process: `call` must return `want`; the message names the call and the client's
 * error.
 */
#define CK_STATUS(c, call, want)                                                                  \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        ck_assert_msg(st_ == (want), "%s returned %s, expected %s: %s", #call,                    \
                      tf_status_name(st_), tf_status_name(want), tf_client_last_error(c));        \
    } while (0)

/* In the test process: starts tenferrod with extra arguments (at least one) or fails the test. */
#define CK_DAEMON_START(d, ...)                                                                   \
    ck_assert_msg(th_daemon_start((d), __VA_ARGS__, (char *)NULL) == 0,                           \
                  "tenferrod did not start (log %s)", (d)->log_path)

/* In the test process: stops tenferrod with SIGTERM and fails the test unless it exited 0. */
#define CK_DAEMON_STOP(d)                                                                         \
    do {                                                                                          \
        char log_[sizeof (d)->log_path];                                                          \
        memcpy(log_, (d)->log_path, sizeof log_);                                                 \
        int rc_ = th_daemon_stop(d);                                                              \
        ck_assert_msg(rc_ == 0, "tenferrod exited with status %d at SIGTERM (log %s)", rc_, log_); \
    } while (0)

/* In a child: report a failed condition and make the child exit with status 1. */
#define CHILD_CHECK(cond)                                                                         \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "[child %d] %s:%d: check failed: %s\n", (int)getpid(), __FILE__,      \
                    __LINE__, #cond);                                                             \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/* In a child: `call` must return `want`. */
#define CHILD_STATUS(c, call, want)                                                               \
    do {                                                                                          \
        tf_status st_ = (call);                                                                   \
        if (st_ != (want)) {                                                                      \
            fprintf(stderr, "[child %d] %s:%d: %s returned %s, expected %s: %s\n", (int)getpid(), \
                    __FILE__, __LINE__, #call, tf_status_name(st_), tf_status_name(want),         \
                    tf_client_last_error(c));                                                     \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/*
 * Runs `tenferroctl --socket S cmd [arg]` (the binary next to TENFERRO_DAEMON)
 * with stdout and stderr captured into out (NUL-terminated, cut at cap).
 * Returns its exit status, or -1 when it could not be started.
 */
int th_run_ctl(const th_daemon *d, char *out, size_t cap, const char *cmd, const char *arg);

/*
 * Runs tenferroctl (the binary next to TENFERRO_DAEMON) with the arguments
 * args (NULL-terminated; no --socket is added) and the test process's
 * environment, captured as th_run_ctl does. Returns its exit status, or -1.
 */
int th_run_ctl_args(char *out, size_t cap, const char *const *args);

/* ---- raw frames, for bad-input tests ---- */

/* Connects a plain socket without a handshake; returns the fd or -1. */
int th_raw_connect(const th_daemon *d);
/* Sends Hello with the given protocol version; returns the reply frame (caller frees) or NULL. */
Tenferro__Frame *th_raw_hello(int fd, uint32_t version);
/* Encodes and sends a frame; returns 0 on success. */
int th_raw_send(int fd, Tenferro__Frame *frame);
/*
 * Sends Mapped{buffer} with sequence number seq: the memfd of pinned buffer
 * `buffer` (0: the completion page) is mapped and the daemon may seal it. No
 * reply comes. Returns 0 on success.
 */
int th_raw_send_mapped(int fd, uint64_t seq, uint64_t buffer);
/* Sends raw bytes. */
int th_raw_send_bytes(int fd, const void *bytes, size_t len);
/* Fills f and dl with a Download of `len` bytes at `offset` of tensor id (seq left 0). */
void th_raw_build_download(Tenferro__Frame *f, Tenferro__Download *dl, uint64_t id, uint64_t offset,
                           uint64_t len);
/* Receives one frame, waiting up to timeout_ms; NULL on EOF, timeout or a bad frame. */
Tenferro__Frame *th_raw_recv(int fd, int timeout_ms);
/*
 * Receives one frame like th_raw_recv, also taking the file descriptor that
 * arrived as SCM_RIGHTS with its bytes: *received_fd is that descriptor (the
 * caller closes it) or -1 when none came.
 */
Tenferro__Frame *th_raw_recv_fd(int fd, int timeout_ms, int *received_fd);
/* 1 when the peer has closed the connection (EOF within timeout_ms). */
int th_raw_closed(int fd, int timeout_ms);

/*
 * Describes, in why (n bytes), how Result r differs from the expected one: its status must be
 * `status`, and an error must carry a readable message (10+ characters) containing `needle`
 * (when not NULL). Returns 1 and fills why when it differs, 0 when it matches.
 */
int th_result_problem(const Tenferro__Result *r, tf_status status, const char *needle, char *why,
                      size_t n);
/* Like th_result_problem for a whole reply, which must also be a Result frame. */
int th_reply_problem(const Tenferro__Frame *reply, tf_status status, const char *needle, char *why,
                     size_t n);

/* In the test process: Result r must have `status` (see th_result_problem). */
#define CK_RESULT(r, status, needle)                                                              \
    do {                                                                                          \
        char why_[1024];                                                                          \
        ck_assert_msg(th_result_problem((r), (status), (needle), why_, sizeof why_) == 0, "%s",   \
                      why_);                                                                      \
    } while (0)

/* In the test process: reply must be a Result with `status` (see th_result_problem); frees it. */
#define CK_EXPECT_RESULT(reply, status, needle)                                                   \
    do {                                                                                          \
        Tenferro__Frame *reply_ = (reply);                                                        \
        char why_[1024];                                                                          \
        ck_assert_msg(th_reply_problem(reply_, (status), (needle), why_, sizeof why_) == 0, "%s", \
                      why_);                                                                      \
        tf__frame_free(reply_);                                                                   \
    } while (0)

/* ---- JSON ---- */

/* 1 when text is exactly one JSON value and white space (RFC 8259; no raw control characters in strings). */
int th_json_valid(const char *text);

/* ---- data ---- */

/* The seed of this test process's random inputs (printed once, settable with TENFERRO_TEST_SEED). */
unsigned th_seed(void);
/* Fills n elements of dtype with random values in [-1,-0.1] U [0.1,1] (never zero). */
void th_fill_random(tf_dtype dtype, size_t n, void *buf);
/* Fills n elements with random positive values in [0.1, 2]. */
void th_fill_positive(tf_dtype dtype, size_t n, void *buf);

/* Largest relative difference |a-b| / max(|b|, floor) over n elements (complex: by modulus). */
double th_max_rel_diff(tf_dtype dtype, size_t n, const void *a, const void *b, double floor);

/* The tolerance a dtype's results are held to (1e-5 for f32/c64, 1e-12 for f64/c128). */
double th_tolerance(tf_dtype dtype);

#endif
