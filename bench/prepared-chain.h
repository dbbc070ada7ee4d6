/*
 * The chain the prepared-graph benchmarks run (bench/bench-prepared.c on the
 * CPU, bench/gpu/bench-prepared.c on a GPU), and the measurements both make
 * through the daemon (prepared-chain.c).
 *
 * The chain: PCHAIN_NODES dependent elementwise operations on PCHAIN_LEN f32,
 * node k being t = alpha_k t (k % 3 == 0), t = t + y (k % 3 == 1) or
 * t = t * z (k % 3 == 2), starting from t = x. With x in [-1, 1),
 * y in [-0.01, 0.01), z in [0.9, 1) and alpha_k = 0.97 the values stay in
 * [-1, 1] and x still shows in the result (each scale-add-mul round keeps
 * about 0.92 of it), so a run that read the wrong input is caught. alpha_0
 * is a parameter: the prepare-cost measurement gives every graph a constant
 * of its own, so its first prepare is a real cache miss.
 *
 * Three ways to run it in one held session, each iteration being the loop a
 * user writes (tf_session_with, tf_session_synchronize, the frees), the
 * inputs resident on the device (uploaded once, never refilled):
 *
 *   PCHAIN_PREPARED     tf_view_run_prepared of the recorded and prepared
 *                       chain, then tf_tensor_free of its output;
 *   PCHAIN_UNPREPARED   the same 100 tf_view_* calls queued in the callback,
 *                       each intermediate freed in the same callback once the
 *                       next node has consumed it (queued frees: one frame),
 *                       the final output freed after the synchronize;
 *   PCHAIN_LATE_FREES   the same 100 calls, all 100 outputs freed after the
 *                       synchronize (100 Free frames).
 *
 * Failures end the benchmark through bench_die (exit 1).
 */
#ifndef TENFERRO_BENCH_PREPARED_CHAIN_H
#define TENFERRO_BENCH_PREPARED_CHAIN_H

#include "tenferro/tenferro.h"

#define PCHAIN_NODES 100
#define PCHAIN_LEN 4096

/* alpha_k of every scale node but the first one, and alpha_0 of the timed chain. */
#define PCHAIN_ALPHA 0.97

/* A result element may differ from the reference by this much (|values| <= 1). */
#define PCHAIN_TOLERANCE 1e-5

/* argv[2] of a child started by pchain_prepare_cost (argv[3]: alpha_0 as "%a"). */
#define PCHAIN_CHILD_FLAG "--prepare-child"

/* The operands, the same in every process: x[0] for the timed runs, x[1] for the last check. */
typedef struct pchain_data {
    float x[2][PCHAIN_LEN];
    float y[PCHAIN_LEN];
    float z[PCHAIN_LEN];
} pchain_data;

/* Fills the operands deterministically. */
void pchain_make_data(pchain_data *d);

/* Node k's scale constant (k % 3 == 0) in a chain whose first one is alpha0. */
double pchain_alpha(int k, double alpha0);

/* The chain computed here from x, in f32 as the kernels round (scale through double). */
void pchain_reference(const pchain_data *d, const float *x, double alpha0, float *out);

/*
 * Queues (or records, on a graph's view) the chain on v from x with operands
 * y and z; made[k] gets node k's output, *out the last. With free_in_batch
 * (a session's view only) each intermediate is freed right after the node
 * that consumes it, so only *out is left live.
 */
tf_status pchain_queue(tf_view *v, tf_tensor x, tf_tensor y, tf_tensor z, double alpha0,
                       int free_in_batch, tf_tensor made[PCHAIN_NODES], tf_tensor *out);

/* Records the chain as a graph of inputs x, y, z (f32 [PCHAIN_LEN]) and one output. */
tf_graph *pchain_record(const char *bench, tf_client *c, double alpha0);

/* Largest |got - want| over the chain's elements; ends the benchmark above PCHAIN_TOLERANCE. */
double pchain_check(const char *bench, const float *got, const float *want, const char *what);

/* The ways of running the chain through the daemon (see the top of this file). */
typedef enum pchain_side {
    PCHAIN_PREPARED,
    PCHAIN_UNPREPARED,
    PCHAIN_LATE_FREES,
    PCHAIN_SIDES
} pchain_side;

/* One client's operands, prepared chain (alpha_0 = PCHAIN_ALPHA) and held session. */
typedef struct pchain_daemon {
    const char *bench;
    tf_client *c;
    tf_session *s;
    tf_tensor x[2], y, z;
    tf_prepared p;
    float want[2][PCHAIN_LEN]; /* the reference result from x[0] and from x[1] */
    double max_diff[PCHAIN_SIDES]; /* largest difference of a checked run from the reference */
    /* The iteration under way. */
    pchain_side side;
    int xi;
    tf_tensor made[PCHAIN_NODES];
    tf_tensor out;
} pchain_daemon;

/* Uploads the operands, records and prepares the chain, and opens the held session. */
void pchain_daemon_open(pchain_daemon *d, const char *bench, tf_client *c, const pchain_data *data);

/*
 * One iteration of `side` from x[xi]: µs from the tf_session_with to the
 * return of the last free. With check, the result is downloaded between the
 * synchronize and the frees and compared with the reference (the time of a
 * checked iteration includes that download: do not report it).
 */
double pchain_daemon_once(pchain_daemon *d, pchain_side side, int xi, int check);

/* Closes the held session and frees the prepared chain and the operands. */
void pchain_daemon_close(pchain_daemon *d);

/*
 * The prepare-cost measurement, run before anything else of the benchmark
 * (the parent must not have initialised CUDA: it forks). Each of
 * warmup + rounds rounds records the chain with an alpha_0 no graph had
 * before, times this process's tf_prepare of it (checked to be a miss of the
 * daemon's prepared_graphs cache by its status counters), frees it, waits
 * until the daemon has given the instance back, then starts a child of this
 * executable (fork+exec, PCHAIN_CHILD_FLAG) that connects, prepares the
 * chain with another, fixed constant (its connection's first prepare, which
 * warms the same paths), records the timed round's chain and times its
 * tf_prepare (checked to be a hit). miss_us[i] and
 * hit_us[i] get the timed rounds' figures (i < rounds).
 */
void pchain_prepare_cost(const char *bench, tf_client *c, int argc, char **argv, int warmup,
                         int rounds, double *miss_us, double *hit_us);

/*
 * The child's side of pchain_prepare_cost, when argv names PCHAIN_CHILD_FLAG:
 * returns its exit status (0; failures exit 1). Returns -1 when argv is an
 * ordinary command line.
 */
int pchain_child_main(const char *bench, int argc, char **argv);

/* The machine's one-minute load average, or -1 when unknown. */
double pchain_load(void);

#endif
