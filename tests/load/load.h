/*
 * What the parts of the load test share (tests/load/): the counters every
 * child process reports to the parent through a pipe, time and randomness,
 * the control block of a soak (shared memory between the parent and its
 * resident clients), and the entry points of the client kinds that live in
 * their own files: hostile connections (hostile.c), resident clients
 * (resident.c), and the soak's sampler and leak rule (soak.c). load.c is the
 * driver and the ordinary clients.
 */
#ifndef TENFERRO_TESTS_LOAD_H
#define TENFERRO_TESTS_LOAD_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "tests/integration/harness.h"

/* ---- per-child counters, sent to the parent through a pipe ---- */

#define COUNTER_LIST(X)                                                                           \
    X(scoped_ok) X(scoped_refused) X(held_opened) X(held_refused) X(held_callbacks)               \
    X(submits) X(synchronizes) X(closes) X(releases) X(abandons) X(ops) X(uploads)                \
    X(downloads) X(bytes_up) X(bytes_down) X(checked) X(lost) X(expected) X(unexpected)           \
    X(reconnects) X(checkpoints) X(raw_bad) X(frees) X(pinned)                                    \
    X(hostile_garbage) X(hostile_before_hello) X(hostile_truncated) X(hostile_huge)               \
    X(hostile_partial) X(hostile_wrong_handles) X(hostile_bad_version) X(hostile_no_hello)        \
    X(hostile_no_hello_closed) X(hostile_vanish) X(resident_actions) X(resident_leaked)

enum {
#define ENUM_(n) C_##n,
    COUNTER_LIST(ENUM_)
#undef ENUM_
    N_COUNTERS
};

#define N_STATUS 64
#define REPORT_MAGIC 0x4c4f4144u

typedef struct report {
    uint32_t magic;
    uint64_t c[N_COUNTERS];
    uint64_t expected_by_status[N_STATUS];
} report;

/* Counts an expected typed error under its status. */
static inline void report_expected(report *r, int status) {
    r->c[C_expected]++;
    r->expected_by_status[(unsigned)status % N_STATUS]++;
}

/* ---- time and randomness ---- */

/* Milliseconds of the monotonic clock, whole (the harness's th_now_ms). */
static inline uint64_t now_ms(void) { return (uint64_t)th_now_ms(); }

/* ---- the soak's control block (MAP_SHARED, made before the children are forked) ---- */

typedef struct soak_ctl {
    atomic_uint quiet;      /* the parent asks the residents to stop sending (a sample is due) */
    atomic_uint epoch;      /* which quiet point the request is for (one per sample) */
    atomic_uint acks;       /* residents idle for that epoch */
    atomic_uint round;      /* the load round in progress (residents leak once per round) */
    atomic_uint stop;       /* the soak is over: residents free what they hold and report */
} soak_ctl;

/* ---- client kinds with files of their own ---- */

/*
 * A hostile client (hostile.c): raw connections that send garbage,
 * truncated frames, frames naming handles that do not exist, lengths past
 * the maximum, frames before Hello, a wrong protocol version; connections
 * that never send Hello, and connections that connect and vanish. Every
 * connection is closed by the client itself within a few seconds, so none
 * outlives the round. Runs until deadline_ms; counts into rep.
 */
void hostile_main(const th_daemon *d, uint64_t seed, uint64_t deadline_ms, report *rep);

/*
 * A resident client (resident.c): one connection for the whole soak,
 * holding a fixed set of tensors and one pinned buffer, working on them
 * while the load runs and idle at every quiet point. With leak_mib > 0 it
 * also uploads a tensor of that many MiB in every round and never frees it:
 * the client-side leak the soak's rules must flag.
 */
void resident_main(const th_daemon *d, uint64_t seed, int index, soak_ctl *ctl, int leak_mib,
                   report *rep);

/* ---- the soak's samples and its rule (soak.c) ---- */

/* One quiet point: the daemon process and its status gauges. */
typedef struct soak_sample {
    int index;                /* 1, 2, ... */
    double t_s;               /* seconds since the soak started */
    long rss_kb, hwm_kb;      /* VmRSS, VmHWM (the peak so far) */
    int fds, threads;
    uint64_t tensors;         /* live tensors over every client */
    uint64_t allocations;     /* device_allocations_live */
    uint64_t device_bytes;    /* device_bytes_live */
    uint64_t pinned_bytes;    /* pinned_bytes_live */
    uint64_t pinned_buffers;  /* pinned_buffers_live */
    int clients;              /* past their handshake, the status request's own excluded */
    int sessions;             /* held reservations and scoped roots in progress */
    int queued;               /* queued openers */
    int settle_ms;            /* how long the gauges took to stand still */
    int settled;
    uint64_t children, killed; /* churn children started and SIGKILLed so far */
} soak_sample;

/*
 * Waits until the daemon is quiet (the expected number of clients, no
 * session, no queued opener, gauges unchanged over consecutive polls; at
 * most settle_ms), then samples /proc/PID and the status gauges into s.
 * Returns 0, or -1 when the daemon could not be read.
 */
int soak_quiet_sample(const th_daemon *d, int want_clients, int settle_ms, soak_sample *s);

/* Prints the header of the per-sample table, and one sample as one line. */
void soak_print_header(FILE *out);
void soak_print_sample(FILE *out, const soak_sample *s);

/*
 * Applies the leak rule to n samples (docs/soak.md): gauges exactly equal
 * at every quiet point; RSS, descriptors and threads no higher late than
 * early past a warm-up, by their floors. Prints one line per metric and
 * returns how many metrics failed (-1 when there are too few samples).
 */
int soak_judge(FILE *out, const soak_sample *s, int n);

#endif
