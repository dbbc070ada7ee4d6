/*
 * Daemons a benchmark starts itself (bench-multi): one tenferrod per entry, each on its own
 * device and on a socket in a private folder under /tmp, with its stdout and stderr in a log
 * file beside the socket.
 *
 * Starting waits until every daemon answers tf_connect (at most DAEMON_SET_START_TIMEOUT_S);
 * one that exits or does not answer in time ends the benchmark with its log. Stopping sends
 * SIGTERM, waits for every daemon to exit and requires exit status 0. No daemon outlives the
 * benchmark: an exit on any other path (bench_die, a return from main) kills the daemons still
 * running from an atexit handler and prints the end of their logs; SIGINT, SIGTERM and SIGHUP
 * kill them too; and each daemon is started with a parent-death signal (SIGKILL) in case the
 * benchmark itself is killed. Those handlers need the set to outlive main, so a process has
 * one set, kept here.
 *
 * Nothing here calls CUDA, so the caller may still fork children that use it.
 */
#ifndef TENFERRO_BENCH_GPU_DAEMON_SET_H
#define TENFERRO_BENCH_GPU_DAEMON_SET_H

#include <sys/types.h>

/* Most daemons one set may hold. */
#define DAEMON_SET_MAX 16

/* How long a daemon may take to answer its first tf_connect. */
#define DAEMON_SET_START_TIMEOUT_S 60

/* The daemons of one run, as daemon_set_start filled them in. */
typedef struct daemon_set {
    const char *bench;                   /* the benchmark's name, for messages */
    int count;
    char folder[64];                     /* the private folder of sockets and logs */
    char devices[DAEMON_SET_MAX][32];    /* --device of daemon i ("cuda:0") */
    char sockets[DAEMON_SET_MAX][128];   /* --socket of daemon i */
    char logs[DAEMON_SET_MAX][128];      /* its stdout and stderr */
    char described[DAEMON_SET_MAX][256]; /* its device as the daemon describes it */
    pid_t pids[DAEMON_SET_MAX];          /* 0 once reaped */
} daemon_set;

/*
 * Starts `count` daemons (`daemon_path` --device devices[i] --socket <folder>/tenferrod-i.sock)
 * and waits until each answers tf_connect; with `ctl_path` (may be NULL) each must also answer
 * `tenferroctl --socket S status`. Returns the process's one set; ends the benchmark on any
 * failure, its daemons killed. Call it once.
 */
const daemon_set *daemon_set_start(const char *bench, const char *daemon_path,
                                   const char *ctl_path, int count, const char *const devices[]);

/*
 * Ends the benchmark, with the end of its log, when a daemon of the set is no longer running
 * (one that died during a measurement fails the run even when its clients noticed nothing).
 */
void daemon_set_expect_running(void);

/*
 * Stops every daemon with SIGTERM, waits for them (SIGKILL after 30 s) and removes the
 * folder; ends the benchmark unless each exited with status 0.
 */
void daemon_set_stop(void);

#endif
