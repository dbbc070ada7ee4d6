/*
 * The prepared-graph benchmarks' chain and their daemon-side measurements
 * (prepared-chain.h): the operands, the reference computed here, the three
 * ways of running the chain in a held session, and the prepare-cost rounds
 * with their child process. Shared by the CPU and the GPU benchmark so both
 * measure exactly the same client loop.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench-common.h"
#include "bench/bench-raw.h"
#include "bench/prepared-chain.h"

/* How long a prepare-cost child may take, start to exit. */
#define CHILD_DEADLINE_NS (60ull * 1000000000ull)

/* A deterministic uniform value in [lo, hi) from a 64-bit LCG state. */
static float uniform(uint64_t *state, float lo, float hi) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(*state >> 11) * 0x1p-53;
    return (float)(lo + (hi - lo) * u);
}

void pchain_make_data(pchain_data *d) {
    uint64_t s = 0x70c4a1ull;
    for (int i = 0; i < PCHAIN_LEN; i++) {
        d->x[0][i] = uniform(&s, -1.0f, 1.0f);
        d->x[1][i] = uniform(&s, -1.0f, 1.0f);
        d->y[i] = uniform(&s, -0.01f, 0.01f);
        d->z[i] = uniform(&s, 0.9f, 1.0f);
    }
}

double pchain_alpha(int k, double alpha0) { return k == 0 ? alpha0 : PCHAIN_ALPHA; }

void pchain_reference(const pchain_data *d, const float *x, double alpha0, float *out) {
    memcpy(out, x, sizeof(float) * PCHAIN_LEN);
    for (int k = 0; k < PCHAIN_NODES; k++) {
        const double a = pchain_alpha(k, alpha0);
        for (int i = 0; i < PCHAIN_LEN; i++) {
            switch (k % 3) {
            case 0: out[i] = (float)(a * (double)out[i]); break;
            case 1: out[i] = out[i] + d->y[i]; break;
            default: out[i] = out[i] * d->z[i]; break;
            }
        }
    }
}

tf_status pchain_queue(tf_view *v, tf_tensor x, tf_tensor y, tf_tensor z, double alpha0,
                       int free_in_batch, tf_tensor made[PCHAIN_NODES], tf_tensor *out) {
    tf_tensor t = x;
    for (int k = 0; k < PCHAIN_NODES; k++) {
        tf_tensor next = 0;
        tf_status st;
        switch (k % 3) {
        case 0: st = tf_view_scale(v, (tf_scalar){pchain_alpha(k, alpha0), 0}, t, &next); break;
        case 1: st = tf_view_add(v, t, y, &next); break;
        default: st = tf_view_mul(v, t, z, &next); break;
        }
        if (st != TF_OK) return st;
        /* The previous intermediate has its last reader queued: its free goes in the same batch. */
        if (free_in_batch && k > 0 && (st = tf_tensor_free(tf_view_client(v), t)) != TF_OK)
            return st;
        made[k] = next;
        t = next;
    }
    *out = t;
    return TF_OK;
}

tf_graph *pchain_record(const char *bench, tf_client *c, double alpha0) {
    tf_graph *g = NULL;
    bench_check(bench, c, tf_graph_new(c, &g), "tf_graph_new");
    const int64_t shape[1] = {PCHAIN_LEN};
    tf_tensor in[3], made[PCHAIN_NODES], out = 0;
    for (int i = 0; i < 3; i++)
        bench_check(bench, c, tf_graph_input(g, TF_F32, 1, shape, &in[i]), "tf_graph_input");
    bench_check(bench, c, pchain_queue(tf_graph_view(g), in[0], in[1], in[2], alpha0, 0, made, &out),
                "recording the chain");
    bench_check(bench, c, tf_graph_output(g, out), "tf_graph_output");
    if (tf_graph_node_count(g) != PCHAIN_NODES)
        bench_die(bench, "the recorded chain has %d nodes, expected %d", tf_graph_node_count(g),
                  PCHAIN_NODES);
    return g;
}

double pchain_check(const char *bench, const float *got, const float *want, const char *what) {
    double worst = 0;
    for (int i = 0; i < PCHAIN_LEN; i++) {
        const double diff = fabs((double)got[i] - (double)want[i]);
        if (!(diff <= PCHAIN_TOLERANCE))
            bench_die(bench, "%s: element %d is %.9g, the chain computed here gives %.9g", what, i,
                      (double)got[i], (double)want[i]);
        if (diff > worst) worst = diff;
    }
    return worst;
}

/* Uploads one f32 [PCHAIN_LEN] operand. */
static tf_tensor upload(pchain_daemon *d, const float *data, const char *what) {
    const int64_t shape[1] = {PCHAIN_LEN};
    tf_tensor t = 0;
    bench_check(d->bench, d->c, tf_upload(d->c, TF_F32, 1, shape, data, &t), what);
    return t;
}

void pchain_daemon_open(pchain_daemon *d, const char *bench, tf_client *c, const pchain_data *data) {
    memset(d, 0, sizeof *d);
    d->bench = bench;
    d->c = c;
    d->x[0] = upload(d, data->x[0], "tf_upload x0");
    d->x[1] = upload(d, data->x[1], "tf_upload x1");
    d->y = upload(d, data->y, "tf_upload y");
    d->z = upload(d, data->z, "tf_upload z");
    pchain_reference(data, data->x[0], PCHAIN_ALPHA, d->want[0]);
    pchain_reference(data, data->x[1], PCHAIN_ALPHA, d->want[1]);
    tf_graph *g = pchain_record(bench, c, PCHAIN_ALPHA);
    bench_check(bench, c, tf_prepare(c, g, &d->p), "tf_prepare");
    tf_graph_free(g);
    int n_in = 0, n_out = 0;
    bench_check(bench, c, tf_prepared_info(c, d->p, &n_in, &n_out), "tf_prepared_info");
    if (n_in != 3 || n_out != 1)
        bench_die(bench, "the prepared chain takes %d inputs and gives %d outputs, expected 3 and 1",
                  n_in, n_out);
    bench_check(bench, c, tf_session_open(c, &d->s), "tf_session_open");
}

/* The callback of a prepared iteration: one run of the prepared chain. */
static tf_status queue_prepared(tf_view *v, void *arg) {
    pchain_daemon *d = arg;
    const tf_tensor in[3] = {d->x[d->xi], d->y, d->z};
    return tf_view_run_prepared(v, d->p, 3, in, 1, &d->out);
}

/* The callback of an unprepared iteration: the 100 operations themselves. */
static tf_status queue_unprepared(tf_view *v, void *arg) {
    pchain_daemon *d = arg;
    return pchain_queue(v, d->x[d->xi], d->y, d->z, PCHAIN_ALPHA, d->side == PCHAIN_UNPREPARED,
                        d->made, &d->out);
}

static const char *side_name(pchain_side side) {
    switch (side) {
    case PCHAIN_PREPARED: return "prepared run";
    case PCHAIN_UNPREPARED: return "unprepared chain";
    case PCHAIN_LATE_FREES: return "unprepared chain, frees after the synchronize";
    case PCHAIN_SIDES: break;
    }
    return "?";
}

double pchain_daemon_once(pchain_daemon *d, pchain_side side, int xi, int check) {
    d->side = side;
    d->xi = xi;
    d->out = 0;
    const uint64_t t0 = bench_now_ns();
    bench_check(d->bench, d->c,
                tf_session_with(d->s, side == PCHAIN_PREPARED ? queue_prepared : queue_unprepared, d),
                "tf_session_with");
    bench_check(d->bench, d->c, tf_session_synchronize(d->s), "tf_session_synchronize");
    if (check) {
        void *got = NULL;
        size_t bytes = 0;
        bench_check(d->bench, d->c, tf_download(d->c, d->out, &got, &bytes), "tf_download");
        if (bytes != sizeof(float) * PCHAIN_LEN)
            bench_die(d->bench, "%s: the result has %zu bytes, expected %zu", side_name(side), bytes,
                      sizeof(float) * PCHAIN_LEN);
        const double diff = pchain_check(d->bench, got, d->want[xi], side_name(side));
        if (diff > d->max_diff[side]) d->max_diff[side] = diff;
        free(got);
    }
    if (side == PCHAIN_LATE_FREES) {
        for (int k = 0; k < PCHAIN_NODES; k++)
            bench_check(d->bench, d->c, tf_tensor_free(d->c, d->made[k]), "tf_tensor_free");
    } else {
        bench_check(d->bench, d->c, tf_tensor_free(d->c, d->out), "tf_tensor_free");
    }
    return (double)(bench_now_ns() - t0) / 1e3;
}

void pchain_daemon_close(pchain_daemon *d) {
    bench_check(d->bench, d->c, tf_session_close(d->s, NULL), "tf_session_close");
    d->s = NULL;
    bench_check(d->bench, d->c, tf_prepared_free(d->c, d->p), "tf_prepared_free");
    const tf_tensor t[4] = {d->x[0], d->x[1], d->y, d->z};
    for (int i = 0; i < 4; i++)
        bench_check(d->bench, d->c, tf_tensor_free(d->c, t[i]), "tf_tensor_free");
}

/* ---- prepare cost ---- */

static tf_status nothing(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

/* Times one tf_prepare of g and checks by the status counters that it hit (want_hit) or missed. */
static double timed_prepare(const char *bench, tf_client *c, bench_raw *r, const tf_graph *g,
                            int want_hit, tf_prepared *p) {
    uint64_t hits0, misses0, hits1, misses1;
    bench_raw_cache(r, "prepared_graphs", &hits0, &misses0);
    const uint64_t t0 = bench_now_ns();
    bench_check(bench, c, tf_prepare(c, g, p), "tf_prepare");
    const uint64_t t1 = bench_now_ns();
    bench_raw_cache(r, "prepared_graphs", &hits1, &misses1);
    const uint64_t hits = hits1 - hits0, misses = misses1 - misses0;
    if (want_hit && (hits != 1 || misses != 0))
        bench_die(bench,
                  "the second prepare of the chain did not hit the daemon's prepared_graphs cache "
                  "(%llu hits, %llu misses): is [caches] prepared_graphs too small, or was the "
                  "first instance still in use?",
                  (unsigned long long)hits, (unsigned long long)misses);
    if (!want_hit && (hits != 0 || misses != 1))
        bench_die(bench,
                  "the first prepare of a chain with a fresh constant was not a cache miss (%llu "
                  "hits, %llu misses): another client prepared the same graph?",
                  (unsigned long long)hits, (unsigned long long)misses);
    return (double)(t1 - t0) / 1e3;
}

/* Starts this executable as a prepare-cost child for alpha0 and returns its hit time (µs). */
static double run_child(const char *bench, char **argv, const char *socket, double alpha0) {
    char alpha[64], self[4096];
    snprintf(alpha, sizeof alpha, "%a", alpha0);
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) bench_die(bench, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    char *child_argv[] = {argv[0], (char *)(socket ? socket : ""), PCHAIN_CHILD_FLAG, alpha, NULL};
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) bench_die(bench, "pipe2: %s", strerror(errno));
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) bench_die(bench, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(127);
        execv(self, child_argv);
        _exit(127);
    }
    close(fds[1]);
    char out[512];
    size_t len = 0;
    const uint64_t deadline = bench_now_ns() + CHILD_DEADLINE_NS;
    for (;;) {
        const uint64_t now = bench_now_ns();
        if (now >= deadline) break;
        struct pollfd pfd = {.fd = fds[0], .events = POLLIN};
        const int ready = poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) break;
        const ssize_t k = read(fds[0], out + len, sizeof out - 1 - len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        len += (size_t)k;
        if (len == sizeof out - 1) break;
    }
    out[len] = '\0';
    close(fds[0]);
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == 0) {
        if (bench_now_ns() >= deadline) kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_die(bench, "the prepare-cost child failed (%s %d)",
                  WIFEXITED(status) ? "exit status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    double hit_us = -1;
    const char *line = strstr(out, "hit_us ");
    if (!line || sscanf(line, "hit_us %lf", &hit_us) != 1 || !(hit_us >= 0))
        bench_die(bench, "the prepare-cost child printed no time: \"%s\"", out);
    return hit_us;
}

void pchain_prepare_cost(const char *bench, tf_client *c, int argc, char **argv, int warmup,
                         int rounds, double *miss_us, double *hit_us) {
    const char *socket = bench_socket_path(argc, argv);
    bench_raw r;
    bench_raw_connect(bench, socket, &r);
    /* A constant no earlier run gave a graph: this process's id and the clock pick it. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    const uint64_t salt = ((uint64_t)getpid() * 2654435761u) ^ (uint64_t)ts.tv_nsec;
    for (int i = 0; i < warmup + rounds; i++) {
        const uint64_t unique = (salt + (uint64_t)i) & 0xfffffu;
        const double alpha0 = PCHAIN_ALPHA * (1.0 + (double)(unique + 1) * 0x1p-30);
        tf_graph *g = pchain_record(bench, c, alpha0);
        tf_prepared p = 0;
        const double miss = timed_prepare(bench, c, &r, g, 0, &p);
        tf_graph_free(g);
        bench_check(bench, c, tf_prepared_free(c, p), "tf_prepared_free");
        /* The instance goes back to the cache after a marker: let the stream drain first. */
        bench_check(bench, c, tf_with_session(c, nothing, NULL), "tf_with_session (drain)");
        const double hit = run_child(bench, argv, socket, alpha0);
        if (i >= warmup) {
            miss_us[i - warmup] = miss;
            hit_us[i - warmup] = hit;
        }
    }
    bench_raw_close(&r);
}

/*
 * The child's first prepare on its connection: the chain with a fixed constant
 * (0.5, never a timed round's), so the timed prepare finds this process's
 * encoding and the daemon's paths for a 100-node graph warm.
 */
static void warm_up_prepare(const char *bench, tf_client *c) {
    tf_graph *g = pchain_record(bench, c, 0.5);
    tf_prepared p = 0;
    bench_check(bench, c, tf_prepare(c, g, &p), "tf_prepare (warm-up)");
    bench_check(bench, c, tf_prepared_free(c, p), "tf_prepared_free");
    tf_graph_free(g);
}

int pchain_child_main(const char *bench, int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], PCHAIN_CHILD_FLAG) != 0) return -1;
    char *end = NULL;
    const double alpha0 = strtod(argv[3], &end);
    if (!end || *end || !(alpha0 > 0)) bench_die(bench, "child: bad constant \"%s\"", argv[3]);
    tf_client *c = bench_connect(argc, argv);
    bench_raw r;
    bench_raw_connect(bench, bench_socket_path(argc, argv), &r);
    warm_up_prepare(bench, c);
    tf_graph *g = pchain_record(bench, c, alpha0);
    tf_prepared p = 0;
    const double hit = timed_prepare(bench, c, &r, g, 1, &p);
    tf_graph_free(g);
    printf("hit_us %.3f\n", hit);
    fflush(stdout);
    bench_check(bench, c, tf_prepared_free(c, p), "tf_prepared_free");
    bench_raw_close(&r);
    tf_disconnect(c);
    return 0;
}

double pchain_load(void) {
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    return load;
}
