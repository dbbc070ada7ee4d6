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
} th_daemon;

/*
 * Starts tenferrod on a fresh socket with the suite's device and any extra
 * arguments (NULL-terminated list), and waits until it accepts connections.
 * The daemon dies with the test process if the test crashes. Returns 0 on success.
 */
int th_daemon_start(th_daemon *d, ...);

/* SIGTERM, then waits; returns the daemon's exit status (0 = clean), or -1. */
int th_daemon_stop(th_daemon *d);

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

/* ---- raw frames, for bad-input tests ---- */

/* Connects a plain socket without a handshake; returns the fd or -1. */
int th_raw_connect(const th_daemon *d);
/* Sends Hello with the given protocol version; returns the reply frame (caller frees) or NULL. */
Tenferro__Frame *th_raw_hello(int fd, uint32_t version);
/* Encodes and sends a frame; returns 0 on success. */
int th_raw_send(int fd, Tenferro__Frame *frame);
/* Sends raw bytes. */
int th_raw_send_bytes(int fd, const void *bytes, size_t len);
/* Receives one frame, waiting up to timeout_ms; NULL on EOF, timeout or a bad frame. */
Tenferro__Frame *th_raw_recv(int fd, int timeout_ms);
/* 1 when the peer has closed the connection (EOF within timeout_ms). */
int th_raw_closed(int fd, int timeout_ms);

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
