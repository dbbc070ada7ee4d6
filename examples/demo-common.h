/*
 * What the demo's client programs share (docs/demo.md): connecting, a seeded
 * random source, a clock, scoped bursts whose admission waits are measured,
 * and the one result line every client prints:
 *
 *   DEMO name=tn-sweep-1 pid=4242 seed=... work=46 unit=contractions flops=3.2e+09
 *        bytes=4.1e+06 daemon_ms=812.3 inproc_ms=640.2 waits=2 wait_ms=310.4
 *        check=OK -- free text for a reader
 *
 * (on one line). Everything here uses the public client API only: it is what
 * a program of one's own would copy.
 */
#ifndef TENFERRO_DEMO_COMMON_H
#define TENFERRO_DEMO_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "tenferro/tenferro.h"

/*
 * A session entry that takes longer than this counts as a wait. An
 * uncontended entry is one round trip: tens of microseconds on an idle host,
 * usually under 10 ms on the 2-core build machine with every demo client busy
 * at once, now and then longer (the daemon's threads wait for a core). A
 * queued one lasts until the holder lets go: hundreds of milliseconds here.
 */
#define DEMO_WAIT_THRESHOLD_S 0.05

/* One client process of the demo: its connection and what it measured. */
typedef struct demo_run {
    const char *name;   /* $TENFERRO_CLIENT_NAME, else the role */
    tf_client *client;
    uint64_t seed;
    double daemon_s;    /* time spent on work through tenferrod, waits excluded */
    double inproc_s;    /* the same work done in this process (OpenBLAS, FFTW) */
    double bytes;       /* bytes uploaded and downloaded */
    int waits;          /* session entries that queued behind a held session */
    double wait_s;      /* time those entries waited */
} demo_run;

/* A seeded random source (xorshift64*): fresh inputs every run, reproducible from the seed. */
typedef struct demo_rng {
    uint64_t state;
} demo_rng;

/* Seconds of CLOCK_MONOTONIC. */
double demo_now(void);

/* Sleeps ms milliseconds. */
void demo_sleep_ms(int ms);

/* Prints "<name>: <message>" to stderr and exits 1. */
void demo_die(const demo_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* Exits through demo_die, with the status and the client's message, unless st is TF_OK. */
void demo_check(const demo_run *r, tf_status st, const char *what);

/*
 * Connects to the daemon on argv[1] when it is not an option (else
 * $TENFERRO_SOCKET, else the
 * library's default), names the run, and picks its seed: $DEMO_SEED when
 * set, else one made from the time and the pid.
 */
void demo_start(demo_run *r, const char *role, int argc, char **argv);

/*
 * The integer after `flag` on the command line ("--sites 12"), else `fallback`;
 * exits when it is not a positive integer.
 */
int demo_option(const demo_run *r, int argc, char **argv, const char *flag, int fallback);

/* 1 when `flag` is on the command line ("--f32"), else 0. */
int demo_flag(int argc, char **argv, const char *flag);

/* Starts a random source from a seed. */
void demo_rng_init(demo_rng *g, uint64_t seed);

/* A uniform double in [-1, 1). */
double demo_uniform(demo_rng *g);

/* Fills x[0..n) with uniform values in [-scale, scale). */
void demo_fill(demo_rng *g, double *x, size_t n, double scale);

/*
 * Uploads host data as a new tensor, counting the time and the bytes as work
 * through the daemon; exits on failure.
 */
tf_tensor demo_upload(demo_run *r, tf_dtype dtype, int rank, const int64_t *shape,
                      const void *data);

/* Downloads a tensor into *buf (grown as needed, see tf_download_into), counted like demo_upload. */
void demo_download(demo_run *r, tf_tensor t, void **buf, size_t *capacity);

/*
 * Counts one session entry that took `seconds`: a wait when it took longer
 * than DEMO_WAIT_THRESHOLD_S.
 */
void demo_count_entry(demo_run *r, double seconds);

/*
 * Runs fn(view, arg) as one scoped burst, measuring the admission wait apart
 * from the work: an empty tf_with_session first (one round trip when the
 * device is free, queued under the `wait` policy while another client holds
 * it), then the burst itself, timed as work. The client library reports no
 * admission wait of its own, hence the probe. Exits on failure.
 */
void demo_burst(demo_run *r, tf_session_fn fn, void *arg, const char *what);

/*
 * Prints the client's result line (see the top of this file) and
 * disconnects. `note` (printf format) is free text for a reader. Returns the
 * process's exit status: 0 when ok, 1 otherwise.
 */
int demo_finish(demo_run *r, int ok, double work, const char *unit, double flops,
                const char *note, ...) __attribute__((format(printf, 6, 7)));

#endif
