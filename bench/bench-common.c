/*
 * The benchmarks' shared helpers (see bench-common.h). Kept free of any
 * knowledge of particular operations so every benchmark reads the same way:
 * connect, measure both sides, report one BENCH line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench-common.h"

uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const char *bench_socket_path(int argc, char **argv) {
    if (argc > 1 && argv[1][0]) return argv[1];
    const char *env = getenv("TENFERRO_SOCKET");
    return env && env[0] ? env : NULL;
}

void bench_die(const char *bench, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

void bench_check(const char *bench, tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    bench_die(bench, "%s failed: %s: %s", what, tf_status_name(st),
              c ? tf_client_last_error(c) : "");
}

tf_client *bench_connect(int argc, char **argv) {
    tf_client *c = NULL;
    tf_status st = tf_connect(bench_socket_path(argc, argv), &c);
    bench_check(argv[0], c, st, "tf_connect");
    return c;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_summary(double *samples, size_t n, bench_stat stat) {
    if (n == 0) return 0;
    qsort(samples, n, sizeof *samples, cmp_double);
    if (stat == BENCH_BEST) return samples[0];
    return n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

double bench_repeat(int k, bench_stat stat, double (*fn)(void *arg), void *arg) {
    double v[64];
    if (k > 64) k = 64;
    for (int i = 0; i < k; i++) v[i] = fn(arg);
    return bench_summary(v, (size_t)k, stat);
}

void bench_report(const char *name, double tenferrod, double baseline, const char *unit) {
    printf("BENCH %s tenferrod=%.3f baseline=%.3f unit=%s\n", name, tenferrod, baseline, unit);
    if (baseline > 0) printf("# %s: tenferrod/baseline = %.2fx\n", name, tenferrod / baseline);
    fflush(stdout);
}

void bench_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
