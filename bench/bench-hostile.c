/*
 * bench-hostile: what a well-behaved client's round trips cost while other
 * clients attack the daemon it shares.
 *
 *   tenferrod: the light client's round trips (an 8-byte blocking download,
 *              the smallest request that goes through its stream) while a
 *              flooder sends the largest batches the daemon accepts
 *              (TF__MAX_OPS_PER_SUBMIT operations per Submit, scoped bursts
 *              of negations and frees) and a vandal sends mutated frames on
 *              connections it keeps reopening.
 *   baseline:  the same client's round trips on the same daemon, quiet.
 *
 * Reported: the 99th percentile in milliseconds (the bound is
 * 50 ms), with p50 and the worst on '#' lines. The attackers run as forked
 * processes speaking raw frames, as a hostile user would.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/bench-common.h"
#include "common/frame.h"

static const char *const NAME = "bench-hostile";

#define SECONDS 4.0
#define FLOOD_PAIRS (TF__MAX_OPS_PER_SUBMIT / 2)

/* A raw connection to the daemon past its Hello, or -1. */
static int raw_open(const char *path, const char *name) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path ? path : "");
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    Tenferro__Frame f = TENFERRO__FRAME__INIT;
    Tenferro__Hello h = TENFERRO__HELLO__INIT;
    h.protocol_version = TENFERRO__PROTOCOL__PROTOCOL_VERSION;
    h.client_name = (char *)name;
    f.seq = 1;
    f.body_case = TENFERRO__FRAME__BODY_HELLO;
    f.hello = &h;
    uint8_t *bytes;
    size_t len;
    if (tf__frame_encode(&f, 1 << 20, &bytes, &len) != TF_OK) {
        close(fd);
        return -1;
    }
    ssize_t n = send(fd, bytes, len, MSG_NOSIGNAL);
    free(bytes);
    if (n != (ssize_t)len) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends an encoded frame whole; -1 when the daemon closed the connection. */
static int raw_send(int fd, const Tenferro__Frame *f) {
    uint8_t *bytes;
    size_t len;
    if (tf__frame_encode(f, (uint64_t)1 << 30, &bytes, &len) != TF_OK) return -1;
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, bytes + done, len - done, MSG_NOSIGNAL);
        if (n <= 0) break;
        done += (size_t)n;
    }
    free(bytes);
    return done == len ? 0 : -1;
}

/* Reads and drops whatever the daemon sent, without waiting. */
static void drain(int fd) {
    static char sink[1 << 16];
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
}

/* The flooder: scoped bursts of the largest batch, each a negation and a free per pair. */
static void flood(const char *path) {
    int fd = raw_open(path, "flooder");
    if (fd < 0) _exit(1);
    double x[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4};
    Tenferro__Frame uf = TENFERRO__FRAME__INIT;
    Tenferro__Upload up = TENFERRO__UPLOAD__INIT;
    up.tensor = 1;
    up.create = 1;
    up.dtype = TF_F64;
    up.n_shape = 1;
    up.shape = shape;
    up.data.data = (uint8_t *)x;
    up.data.len = sizeof x;
    uf.seq = 2;
    uf.body_case = TENFERRO__FRAME__BODY_UPLOAD;
    uf.upload = &up;
    if (raw_send(fd, &uf) != 0) _exit(1);
    enum { OPS = 2 * FLOOD_PAIRS };
    Tenferro__Op *ops = calloc(OPS, sizeof *ops);
    Tenferro__Op **ptrs = calloc(OPS, sizeof *ptrs);
    uint64_t *outs = calloc(FLOOD_PAIRS, sizeof *outs);
    uint64_t one = 1;
    if (!ops || !ptrs || !outs) _exit(1);
    for (int i = 0; i < FLOOD_PAIRS; i++) {
        outs[i] = 100 + (uint64_t)i;
        tenferro__op__init(&ops[2 * i]);
        ops[2 * i].kind = TENFERRO__OP_KIND__OP_NEG;
        ops[2 * i].n_inputs = 1;
        ops[2 * i].inputs = &one;
        ops[2 * i].output = outs[i];
        tenferro__op__init(&ops[2 * i + 1]);
        ops[2 * i + 1].kind = TENFERRO__OP_KIND__OP_FREE;
        ops[2 * i + 1].n_inputs = 1;
        ops[2 * i + 1].inputs = &outs[i];
        ptrs[2 * i] = &ops[2 * i];
        ptrs[2 * i + 1] = &ops[2 * i + 1];
    }
    Tenferro__Frame sf = TENFERRO__FRAME__INIT;
    Tenferro__Submit sub = TENFERRO__SUBMIT__INIT;
    sub.mode = TENFERRO__SUBMIT_MODE__SUBMIT_SCOPED_FINAL;
    sub.n_ops = OPS;
    sub.ops = ptrs;
    sf.body_case = TENFERRO__FRAME__BODY_SUBMIT;
    sf.submit = &sub;
    for (uint64_t seq = 3;; seq++) {
        sf.seq = seq;
        if (raw_send(fd, &sf) != 0) _exit(0);
        drain(fd);
    }
}

/* The vandal: Hello, then frames with random bytes (some decode, most do not), reconnecting. */
static void vandal(const char *path) {
    srand((unsigned)getpid());
    static uint8_t junk[1 << 16];
    for (;;) {
        int fd = raw_open(path, "vandal");
        if (fd < 0) {
            usleep(1000);
            continue;
        }
        for (int k = 0; k < 8; k++) {
            uint32_t len = (uint32_t)(rand() % (int)sizeof junk);
            for (uint32_t i = 0; i < len; i++) junk[i] = (uint8_t)rand();
            uint8_t hdr[4];
            tf__frame_put_length(hdr, len);
            if (send(fd, hdr, 4, MSG_NOSIGNAL) != 4 || send(fd, junk, len, MSG_NOSIGNAL) < 0) break;
            drain(fd);
        }
        close(fd);
    }
}

/* Starts an attacker in a child process that dies with this one. */
static pid_t spawn(void (*fn)(const char *), const char *path) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) bench_die(NAME, "fork failed");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fn(path);
        _exit(0);
    }
    return pid;
}

/* Times round trips of the light client for `seconds`; returns how many, in ms each. */
static size_t light_rounds(tf_client *c, tf_tensor t, double seconds, double *out, size_t cap) {
    double back[1];
    void *buf = back;
    size_t bytes = sizeof back, n = 0;
    uint64_t end = bench_now_ns() + (uint64_t)(seconds * 1e9);
    while (n < cap && bench_now_ns() < end) {
        uint64_t t0 = bench_now_ns();
        bench_check(NAME, c, tf_download_into(c, t, &buf, &bytes), "tf_download_into");
        out[n++] = (double)(bench_now_ns() - t0) / 1e6;
        if (back[0] != 42.0) bench_die(NAME, "the light client read %g, not 42", back[0]);
        bench_sleep_ms(1); /* a user's loop does other work between requests */
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts the samples and prints p50, p99 and the worst; returns p99. */
static double percentiles(const char *what, double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    double p50 = v[n / 2], p99 = v[(size_t)((double)(n - 1) * 0.99)], worst = v[n - 1];
    printf("# %s: %zu round trips, p50 %.3f ms, p99 %.3f ms, worst %.3f ms\n", what, n, p50, p99,
           worst);
    return p99;
}

int main(int argc, char **argv) {
    const char *path = bench_socket_path(argc, argv);
    tf_client *c = bench_connect(argc, argv);
    double one[1] = {42.0};
    tf_tensor t = bench_tensor(NAME, c, one, 1);
    enum { CAP = 100000 };
    double *quiet = malloc(CAP * sizeof *quiet), *loud = malloc(CAP * sizeof *loud);
    if (!quiet || !loud) bench_die(NAME, "out of memory");

    size_t nq = light_rounds(c, t, SECONDS / 2, quiet, CAP);
    pid_t flooder = spawn(flood, path), vandals[2] = {spawn(vandal, path), spawn(vandal, path)};
    bench_sleep_ms(300); /* the first large batches are in */
    size_t nl = light_rounds(c, t, SECONDS, loud, CAP);
    kill(flooder, SIGKILL);
    for (int i = 0; i < 2; i++) kill(vandals[i], SIGKILL);
    waitpid(flooder, NULL, 0);
    for (int i = 0; i < 2; i++) waitpid(vandals[i], NULL, 0);

    double base = percentiles("quiet", quiet, nq);
    double under = percentiles("under a flood of 65536-op batches and mutated frames", loud, nl);
    bench_report("hostile_rtt_p99", under, base, "ms");
    /* The daemon is still whole: the light client's tensor reads back. */
    bench_expect_tensor(NAME, c, t, one, sizeof one, "the light client's tensor after the attack");
    free(quiet);
    free(loud);
    tf_disconnect(c);
    return 0;
}
