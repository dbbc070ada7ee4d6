/*
 * bench-ring: what the submission ring costs a held session's empty
 * synchronize, against the floor of two processes handing a word back and
 * forth through shared memory, and against the same synchronize over the
 * socket.
 *
 *   held_empty_sync        tenferrod: tf_session_synchronize with nothing
 *                          queued, in one held session, through the ring.
 *                          baseline: a spinning ping-pong between this
 *                          process and a forked child over one shared page
 *                          (each side spins on the other's word).
 *   held_empty_sync_socket tenferrod: the same synchronize with
 *                          TENFERRO_RING=off (every request on the socket).
 *                          baseline: the ring's figure.
 *   held_sync_idle         the loop users write: 2 ms of host work (a
 *                          sleep, untimed) before each synchronize, so the
 *                          daemon has stopped polling and the request rings
 *                          the doorbell. baseline: a 64-byte socket
 *                          round trip after the same 2 ms sleep.
 *
 * Round trips are timed one by one, the sides in alternating blocks, and the
 * median is reported in microseconds.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench-common.h"
#include "common/spin.h"

#define WARMUP 2000
#define ITERS 20000
#define BLOCKS 4
#define IDLE_ITERS 400
#define IDLE_MS 2

static const char *const NAME = "bench-ring";

/* The shared page of the ping-pong: the parent writes ping, the child answers in pong. */
typedef struct pingpong {
    volatile uint64_t ping;
    char pad[56];
    volatile uint64_t pong;
} pingpong;

/* The child: answers every ping until it reads UINT64_MAX. */
static void pong_child(pingpong *p) {
    uint64_t seen = 0;
    for (;;) {
        uint64_t v;
        while ((v = __atomic_load_n(&p->ping, __ATOMIC_ACQUIRE)) == seen) tf__cpu_relax();
        if (v == UINT64_MAX) _exit(0);
        seen = v;
        __atomic_store_n(&p->pong, v, __ATOMIC_RELEASE);
    }
}

/* Times n shared-memory round trips into out[] (µs); untimed when out is NULL. */
static void pingpong_rounds(pingpong *p, uint64_t *counter, int n, double *out) {
    for (int i = 0; i < n; i++) {
        uint64_t v = ++*counter;
        uint64_t t0 = bench_now_ns();
        __atomic_store_n(&p->ping, v, __ATOMIC_RELEASE);
        while (__atomic_load_n(&p->pong, __ATOMIC_ACQUIRE) != v) tf__cpu_relax();
        uint64_t t1 = bench_now_ns();
        if (out) out[i] = (double)(t1 - t0) / 1e3;
    }
}

/* Times n empty synchronizes of s into out[] (µs), sleeping idle_ms before each (untimed). */
static void sync_rounds(tf_client *c, tf_session *s, int n, int idle_ms, double *out) {
    for (int i = 0; i < n; i++) {
        if (idle_ms) bench_sleep_ms(idle_ms);
        uint64_t t0 = bench_now_ns();
        tf_status st = tf_session_synchronize(s);
        uint64_t t1 = bench_now_ns();
        bench_check(NAME, c, st, "tf_session_synchronize");
        if (out) out[i] = (double)(t1 - t0) / 1e3;
    }
}

/* Times n socket round trips with idle_ms of sleep before each. */
static void echo_idle_rounds(bench_echo *e, int n, int idle_ms, double *out) {
    for (int i = 0; i < n; i++) {
        bench_sleep_ms(idle_ms);
        bench_echo_rounds(NAME, e, 1, out ? out + i : NULL);
    }
}

int main(int argc, char **argv) {
    const char *socket_path = bench_socket_path(argc, argv);
    tf_client *ring = bench_connect(argc, argv);
    setenv("TENFERRO_RING", "off", 1);
    tf_client *sock = NULL;
    bench_check(NAME, ring, tf_connect(socket_path, &sock), "tf_connect (socket route)");
    unsetenv("TENFERRO_RING");

    pingpong *p = mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) bench_die(NAME, "mmap of the ping-pong page failed");
    fflush(NULL);
    pid_t child = fork();
    if (child < 0) bench_die(NAME, "fork failed");
    if (child == 0) pong_child(p);
    uint64_t counter = 0;

    double *base = malloc(sizeof(double) * ITERS), *via_ring = malloc(sizeof(double) * ITERS),
           *via_sock = malloc(sizeof(double) * ITERS);
    if (!base || !via_ring || !via_sock) bench_die(NAME, "out of memory");

    tf_session *rs = NULL;
    bench_check(NAME, ring, tf_session_open(ring, &rs), "tf_session_open");
    pingpong_rounds(p, &counter, WARMUP, NULL);
    sync_rounds(ring, rs, WARMUP, 0, NULL);
    const int per_block = ITERS / BLOCKS;
    for (int b = 0; b < BLOCKS; b++) {
        pingpong_rounds(p, &counter, per_block, base + b * per_block);
        sync_rounds(ring, rs, per_block, 0, via_ring + b * per_block);
    }
    bench_check(NAME, ring, tf_session_close(rs, NULL), "tf_session_close");
    __atomic_store_n(&p->ping, UINT64_MAX, __ATOMIC_RELEASE);
    waitpid(child, NULL, 0);

    /* The socket route: the domain is one client's at a time, so after the ring's session. */
    tf_session *ss = NULL;
    bench_check(NAME, sock, tf_session_open(sock, &ss), "tf_session_open (socket route)");
    sync_rounds(sock, ss, WARMUP, 0, NULL);
    sync_rounds(sock, ss, ITERS, 0, via_sock);
    bench_check(NAME, sock, tf_session_close(ss, NULL), "tf_session_close (socket route)");

    const double base_med = bench_summary(base, ITERS, BENCH_MEDIAN);
    const double ring_med = bench_summary(via_ring, ITERS, BENCH_MEDIAN);
    const double sock_med = bench_summary(via_sock, ITERS, BENCH_MEDIAN);
    printf("# held_empty_sync: median of %d; the ring %.2f us, the socket %.2f us, a spinning "
           "shared-memory ping-pong %.2f us\n",
           ITERS, ring_med, sock_med, base_med);
    bench_report("held_empty_sync", ring_med, base_med, "us");
    bench_report("held_empty_sync_socket", sock_med, ring_med, "us");

    /* After host work: the daemon sleeps, the request rings the doorbell. */
    bench_echo echo;
    bench_echo_start(NAME, &echo);
    bench_check(NAME, ring, tf_session_open(ring, &rs), "tf_session_open");
    const int idle_block = IDLE_ITERS / BLOCKS;
    for (int b = 0; b < BLOCKS; b++) {
        echo_idle_rounds(&echo, idle_block, IDLE_MS, base + b * idle_block);
        sync_rounds(ring, rs, idle_block, IDLE_MS, via_ring + b * idle_block);
    }
    bench_check(NAME, ring, tf_session_close(rs, NULL), "tf_session_close");
    bench_echo_stop(NAME, &echo);
    const double idle_base = bench_summary(base, IDLE_ITERS, BENCH_MEDIAN);
    const double idle_ring = bench_summary(via_ring, IDLE_ITERS, BENCH_MEDIAN);
    printf("# held_sync_idle: median of %d, each after %d ms asleep; the ring %.2f us, a socket "
           "round trip %.2f us\n",
           IDLE_ITERS, IDLE_MS, idle_ring, idle_base);
    bench_report("held_sync_idle", idle_ring, idle_base, "us");

    free(base);
    free(via_ring);
    free(via_sock);
    tf_disconnect(sock);
    tf_disconnect(ring);
    return 0;
}
