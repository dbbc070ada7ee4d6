/*
 * The demo clients' shared helpers (see demo-common.h). Kept free of any one
 * client's work, so each client file reads as: make inputs, run them through
 * tenferrod, run them here, compare, print one line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "demo-common.h"

double demo_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void demo_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

void demo_die(const demo_run *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", r && r->name ? r->name : "demo");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void demo_check(const demo_run *r, tf_status st, const char *what) {
    if (st == TF_OK) return;
    demo_die(r, "%s failed: %s: %s", what, tf_status_name(st),
             r->client ? tf_client_last_error(r->client) : tf_strerror(st));
}

/* The seed: $DEMO_SEED (to repeat a run), else the time mixed with the pid. */
static uint64_t pick_seed(void) {
    const char *env = getenv("DEMO_SEED");
    if (env && env[0]) return strtoull(env, NULL, 0);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007u) ^ ((uint64_t)ts.tv_nsec << 16) ^ (uint64_t)getpid();
}

void demo_start(demo_run *r, const char *role, int argc, char **argv) {
    memset(r, 0, sizeof *r);
    const char *name = getenv("TENFERRO_CLIENT_NAME");
    r->name = name && name[0] ? name : role;
    r->seed = pick_seed();
    const char *socket_path = argc > 1 && argv[1][0] && argv[1][0] != '-' ? argv[1] : NULL;
    demo_check(r, tf_connect(socket_path, &r->client), "tf_connect");
}

int demo_option(const demo_run *r, int argc, char **argv, const char *flag, int fallback) {
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], flag) != 0) continue;
        char *end = NULL;
        long v = i + 1 < argc ? strtol(argv[i + 1], &end, 10) : 0;
        if (!end || *end || v < 1 || v > 1 << 20) demo_die(r, "%s needs a positive integer", flag);
        return (int)v;
    }
    return fallback;
}

int demo_flag(int argc, char **argv, const char *flag) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

void demo_rng_init(demo_rng *g, uint64_t seed) {
    /* splitmix64 of the seed, so nearby seeds give unrelated streams (and never 0). */
    uint64_t z = seed + 0x9e3779b97f4a7c15u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    g->state = (z ^ (z >> 31)) | 1u;
}

double demo_uniform(demo_rng *g) {
    g->state ^= g->state >> 12;
    g->state ^= g->state << 25;
    g->state ^= g->state >> 27;
    uint64_t x = g->state * 0x2545f4914f6cdd1du;
    return (double)(x >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

void demo_fill(demo_rng *g, double *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * demo_uniform(g);
}

tf_tensor demo_upload(demo_run *r, tf_dtype dtype, int rank, const int64_t *shape,
                      const void *data) {
    double t0 = demo_now();
    tf_tensor t;
    demo_check(r, tf_upload(r->client, dtype, rank, shape, data, &t), "tf_upload");
    size_t bytes = 0;
    demo_check(r, tf_tensor_bytes(r->client, t, &bytes), "tf_tensor_bytes");
    r->daemon_s += demo_now() - t0;
    r->bytes += (double)bytes;
    return t;
}

void demo_download(demo_run *r, tf_tensor t, void **buf, size_t *capacity) {
    double t0 = demo_now();
    demo_check(r, tf_download_into(r->client, t, buf, capacity), "tf_download_into");
    size_t bytes = 0;
    demo_check(r, tf_tensor_bytes(r->client, t, &bytes), "tf_tensor_bytes");
    r->daemon_s += demo_now() - t0;
    r->bytes += (double)bytes;
}

void demo_count_entry(demo_run *r, double seconds) {
    if (seconds <= DEMO_WAIT_THRESHOLD_S) return;
    r->waits++;
    r->wait_s += seconds;
}

/* The probe's callback: queues nothing, so the burst is admission and one round trip. */
static tf_status queue_nothing(tf_view *v, void *arg) {
    (void)v;
    (void)arg;
    return TF_OK;
}

void demo_burst(demo_run *r, tf_session_fn fn, void *arg, const char *what) {
    double t0 = demo_now();
    demo_check(r, tf_with_session(r->client, queue_nothing, NULL), "tf_with_session (admission)");
    double t1 = demo_now();
    demo_count_entry(r, t1 - t0);
    demo_check(r, tf_with_session(r->client, fn, arg), what);
    r->daemon_s += demo_now() - t1;
}

int demo_finish(demo_run *r, int ok, double work, const char *unit, double flops,
                const char *note, ...) {
    char text[512];
    va_list ap;
    va_start(ap, note);
    vsnprintf(text, sizeof text, note, ap);
    va_end(ap);
    printf("DEMO name=%s pid=%ld seed=%llu work=%.0f unit=%s flops=%.4g bytes=%.4g "
           "daemon_ms=%.1f inproc_ms=%.1f waits=%d wait_ms=%.1f check=%s -- %s\n",
           r->name, (long)getpid(), (unsigned long long)r->seed, work, unit, flops, r->bytes,
           r->daemon_s * 1e3, r->inproc_s * 1e3, r->waits, r->wait_s * 1e3, ok ? "OK" : "FAILED",
           text);
    fflush(stdout);
    tf_disconnect(r->client);
    r->client = NULL;
    return ok ? 0 : 1;
}
