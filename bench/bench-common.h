/*
 * Shared helpers of the benchmarks: a monotonic clock, connecting to the
 * daemon under test, summarising repeated timings, and the one output line
 * every benchmark prints:
 *
 *   BENCH <name> tenferrod=<x> baseline=<y> unit=<u>
 *
 * Every other line a benchmark prints starts with '#'. Timings are never
 * pass/fail: a benchmark exits non-zero only when something functionally
 * broke (a call failed, a result was wrong), and bench_die is how it says so.
 */
#ifndef TENFERRO_BENCH_COMMON_H
#define TENFERRO_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/tenferro.h"

/* How repeated timings are summarised. */
typedef enum bench_stat {
    BENCH_MEDIAN,
    BENCH_BEST,
} bench_stat;

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t bench_now_ns(void);

/* The daemon's socket: argv[1], else $TENFERRO_SOCKET, else NULL (the library's default). */
const char *bench_socket_path(int argc, char **argv);

/* Connects to the daemon named by bench_socket_path, or exits 1 saying why. */
tf_client *bench_connect(int argc, char **argv);

/* Prints "<bench>: <what> failed: ..." to stderr and exits 1 (a functional failure). */
void bench_die(const char *bench, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* Exits through bench_die with the status and the client's last error unless st is TF_OK. */
void bench_check(const char *bench, tf_client *c, tf_status st, const char *what);

/* The median (mean of the middle two for even n) or the minimum of n samples; sorts them. */
double bench_summary(double *samples, size_t n, bench_stat stat);

/* Runs fn(arg) k times (k <= 64) and summarises the values it returns. */
double bench_repeat(int k, bench_stat stat, double (*fn)(void *arg), void *arg);

/* Prints the BENCH line and a '#' line with the ratio tenferrod/baseline. */
void bench_report(const char *name, double tenferrod, double baseline, const char *unit);

/* Pauses ms milliseconds (lets spinning BLAS threads of the other side go idle). */
void bench_sleep_ms(int ms);

/*
 * Times one pending transfer (submit to the return of its wait) between *buffer
 * and *tensor, upload when `upload`, else download; returns nanoseconds. Both
 * come back through the wait into the same variables; failures end the benchmark.
 */
double bench_pending_ns(const char *bench, tf_client *c, int upload, tf_pinned_buffer **buffer,
                        tf_tensor *tensor);

/*
 * Times one blocking tf_upload of n f64 values from `data` (a new tensor, freed
 * afterwards, outside the clock); returns nanoseconds.
 */
double bench_upload_ns(const char *bench, tf_client *c, const double *data, size_t n);

/* Creates a pinned buffer of `bytes`, or ends the benchmark. */
tf_pinned_buffer *bench_pinned(const char *bench, tf_client *c, size_t bytes);

/* Uploads n f64 values as a rank-1 tensor, or ends the benchmark. */
tf_tensor bench_tensor(const char *bench, tf_client *c, const double *data, size_t n);

/* Fills n f64 values with a pattern that differs from round to round. */
void bench_fill(double *x, size_t n, int round);

/* Ends the benchmark unless tensor t holds exactly `want` (read by a blocking download). */
void bench_expect_tensor(const char *bench, tf_client *c, tf_tensor t, const void *want,
                         size_t bytes, const char *what);

/*
 * The floor any daemon on a Unix socket pays: a forked child that echoes
 * BENCH_PING_BYTES-byte messages over a socketpair (blocking write, blocking
 * read). Start it after connecting to the daemon; stop it to reap the child.
 */
#define BENCH_PING_BYTES 64
typedef struct bench_echo {
    int fd;
    int pid;
} bench_echo;

/* Forks the echo child, or exits through bench_die. */
void bench_echo_start(const char *bench, bench_echo *e);

/* Times n ping-pongs into out[] (µs each); untimed when out is NULL. */
void bench_echo_rounds(const char *bench, bench_echo *e, int n, double *out);

/* Closes the socket and reaps the child, exiting through bench_die if it failed. */
void bench_echo_stop(const char *bench, bench_echo *e);

#endif
