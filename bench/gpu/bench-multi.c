/*
 * bench-multi: several daemons on one host, one per GPU, started by this program.
 *
 *   bench-multi --daemon PATH_TO_tenferrod [--ctl PATH_TO_tenferroctl] [--gpus N] [--same-gpu]
 *
 * Daemon i runs `tenferrod --device cuda:i --socket <folder>/tenferrod-i.sock` (daemon-set.c);
 * with --same-gpu every daemon gets cuda:0, which is how a one-GPU machine runs this. N is
 * --gpus, else the number of CUDA devices a child process counts (mode "--child count").
 *
 *   share_scale  (matmul/s, every client together)
 *     tenferrod: 4 client processes per daemon, 4N in all, client k on daemon k/4, run the
 *                share4 loop of bench-share (share-loop.c: 1024 x 1024 f32 matmuls in scoped
 *                sessions of 32, outputs freed in the same burst, each client's last product
 *                checked by its digest), all released together, WARM_MS untimed, RUN_MS timed.
 *     baseline:  the same with 1 daemon: 4 clients on daemon 0 while the others idle.
 *   d2d_256m     (GB/s, 1 GB = 1e9 B; median of REPS)
 *     tenferrod: a child connects to daemons 0 and 1, uploads 256 MiB of fresh random f32 data
 *                (8192 x 8192) into daemon 0, runs tf_copy_to into daemon 1 once untimed and
 *                REPS times timed, freeing each copy but the last, which it downloads from
 *                daemon 1 and compares with the uploaded data bit for bit.
 *     baseline:  a child with its own CUDA context: cudaMalloc on the two daemons' devices,
 *                peer access enabled both ways where they differ and allow it, cudaMemcpyPeer
 *                of the 256 MiB and cudaDeviceSynchronize on both devices, the same reps, the
 *                destination checked against the source.
 *     d2d needs 2 daemons: with N = 1 it runs only with --same-gpu (a second daemon on cuda:0).
 *
 * The daemons are stopped with SIGTERM at the end and must exit 0; on every other way out they
 * are killed (daemon-set.c). Timings never fail a run; a wrong result or a failed call does.
 * The parent never calls CUDA: its children could not use CUDA otherwise.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bench/gpu/daemon-set.h"
#include "bench/gpu/gpu-common.h"
#include "bench/gpu/share-loop.h"
#include "tenferro/peer.h"

#define CLIENTS_PER_DAEMON 4
#define SHARE_N 1024
#define SHARE_BATCH 32
#define WARM_MS 500
#define RUN_MS 3000
#define D2D_SIDE 8192 /* 8192 x 8192 f32 = 256 MiB */
#define D2D_ELEMS ((size_t)D2D_SIDE * D2D_SIDE)
#define D2D_BYTES (D2D_ELEMS * sizeof(float))
#define REPS 10
#define CHILD_TIMEOUT_S 120

static const char *const NAME = "bench-multi";

/* ---- the d2d children ---- */

/* A seed no earlier run used, so a stale copy cannot pass the bit-for-bit check. */
static uint64_t fresh_seed(void) {
    return bench_now_ns() ^ ((uint64_t)getpid() << 40);
}

/* 256 MiB of fresh random f32 values. */
static float *fresh_data(void) {
    float *data = gpu_xmalloc(NAME, D2D_BYTES);
    gpu_fill(TF_F32, data, D2D_ELEMS, fresh_seed());
    return data;
}

/* Ends the child unless `got` equals `want` bit for bit, naming the first differing element. */
static void expect_same_bits(const char *what, const float *want, const float *got) {
    if (memcmp(want, got, D2D_BYTES) == 0) return;
    size_t i = 0;
    while (memcmp(&want[i], &got[i], sizeof(float)) == 0) i++;
    uint32_t w, g;
    memcpy(&w, &want[i], sizeof w);
    memcpy(&g, &got[i], sizeof g);
    bench_die(NAME, "%s: element %zu of the copy is 0x%08x, the source's 0x%08x", what, i, g, w);
}

/* Writes the child's one report line: DONE <how the copy went, or -> <seconds of each rep>. */
static void report_reps(const char *how, const double seconds[REPS]) {
    printf("DONE %s", how);
    for (int r = 0; r < REPS; r++) printf(" %.9f", seconds[r]);
    printf("\n");
    fflush(stdout);
}

/* Ends the child unless tensor t of client c is an f32 D2D_SIDE x D2D_SIDE tensor. */
static void expect_d2d_shape(tf_client *c, tf_tensor t) {
    tf_dtype dtype;
    int rank;
    int64_t shape[TF_MAX_RANK];
    bench_check(NAME, c, tf_tensor_info(c, t, &dtype, &rank, shape), "tf_tensor_info (copy)");
    if (dtype != TF_F32 || rank != 2 || shape[0] != D2D_SIDE || shape[1] != D2D_SIDE)
        bench_die(NAME, "the copy is %s of rank %d (%lld x %lld), not f32 %d x %d",
                  tf_dtype_name(dtype), rank, (long long)shape[0],
                  (long long)(rank > 1 ? shape[1] : 0), D2D_SIDE, D2D_SIDE);
}

/* tf_copy_to, or the end of the child with both clients' last errors. */
static void copy_or_die(tf_client *from, tf_tensor source, tf_client *to, tf_tensor *copy) {
    tf_status st = tf_copy_to(from, source, to, copy);
    if (st != TF_OK)
        bench_die(NAME, "tf_copy_to failed: %s: from: %s; to: %s", tf_status_name(st),
                  tf_client_last_error(from), tf_client_last_error(to));
}

/* The tenferrod side of d2d_256m: tf_copy_to from the daemon on `from` to the one on `to`. */
static int child_d2d_tenferrod(const char *from_socket, const char *to_socket) {
    tf_client *from = NULL, *to = NULL;
    tf_status st = tf_connect(from_socket, &from);
    bench_check(NAME, from, st, "tf_connect (daemon 0)");
    st = tf_connect(to_socket, &to);
    bench_check(NAME, to, st, "tf_connect (daemon 1)");
    float *data = fresh_data();
    const int64_t shape[2] = {D2D_SIDE, D2D_SIDE};
    tf_tensor source, copy;
    bench_check(NAME, from, tf_upload(from, TF_F32, 2, shape, data, &source), "tf_upload");

    copy_or_die(from, source, to, &copy);
    expect_d2d_shape(to, copy);
    bench_check(NAME, to, tf_tensor_free(to, copy), "tf_tensor_free (copy)");
    double seconds[REPS];
    for (int r = 0; r < REPS; r++) {
        const uint64_t t0 = bench_now_ns();
        copy_or_die(from, source, to, &copy);
        seconds[r] = (double)(bench_now_ns() - t0) / 1e9;
        if (r < REPS - 1) bench_check(NAME, to, tf_tensor_free(to, copy), "tf_tensor_free (copy)");
    }

    expect_d2d_shape(to, copy);
    void *back = NULL;
    size_t bytes = 0;
    bench_check(NAME, to, tf_download(to, copy, &back, &bytes), "tf_download (copy)");
    if (bytes != D2D_BYTES) bench_die(NAME, "the copy has %zu bytes, not %zu", bytes, D2D_BYTES);
    expect_same_bits("tf_copy_to", data, back);
    report_reps("-", seconds);
    free(back);
    free(data);
    bench_check(NAME, to, tf_tensor_free(to, copy), "tf_tensor_free (copy)");
    bench_check(NAME, from, tf_tensor_free(from, source), "tf_tensor_free (source)");
    tf_disconnect(from);
    tf_disconnect(to);
    return 0;
}

/* Waits until both devices have finished everything queued on them. */
static void sync_devices(int from, int to) {
    GPU_CUDA(NAME, cudaSetDevice(to));
    GPU_CUDA(NAME, cudaDeviceSynchronize());
    if (from == to) return;
    GPU_CUDA(NAME, cudaSetDevice(from));
    GPU_CUDA(NAME, cudaDeviceSynchronize());
}

/* Lets device `dev` reach `peer` directly when it can; returns 1 when it can. */
static int enable_peer(int dev, int peer) {
    int can = 0;
    GPU_CUDA(NAME, cudaDeviceCanAccessPeer(&can, dev, peer));
    if (!can) return 0;
    GPU_CUDA(NAME, cudaSetDevice(dev));
    cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError(); /* not an error here: clear it, so no later check reports it */
        return 1;
    }
    GPU_CUDA(NAME, err);
    return 1;
}

/* The baseline of d2d_256m: cudaMemcpyPeer between the two devices, in this child's context. */
static int child_d2d_cuda(int from, int to) {
    float *data = fresh_data(), *back = gpu_xmalloc(NAME, D2D_BYTES);
    void *src = NULL, *dst = NULL;
    GPU_CUDA(NAME, cudaSetDevice(from));
    GPU_CUDA(NAME, cudaMalloc(&src, D2D_BYTES));
    GPU_CUDA(NAME, cudaMemcpy(src, data, D2D_BYTES, cudaMemcpyHostToDevice));
    GPU_CUDA(NAME, cudaSetDevice(to));
    GPU_CUDA(NAME, cudaMalloc(&dst, D2D_BYTES));
    GPU_CUDA(NAME, cudaMemset(dst, 0xff, D2D_BYTES));
    const char *how = "same-device";
    if (from != to) {
        const int forward = enable_peer(from, to), backward = enable_peer(to, from);
        how = forward && backward ? "peer-access" : forward || backward ? "peer-access-one-way"
                                                                        : "no-peer-access";
    }
    sync_devices(from, to);

    GPU_CUDA(NAME, cudaMemcpyPeer(dst, to, src, from, D2D_BYTES));
    sync_devices(from, to);
    double seconds[REPS];
    for (int r = 0; r < REPS; r++) {
        const uint64_t t0 = bench_now_ns();
        GPU_CUDA(NAME, cudaMemcpyPeer(dst, to, src, from, D2D_BYTES));
        sync_devices(from, to);
        seconds[r] = (double)(bench_now_ns() - t0) / 1e9;
    }

    GPU_CUDA(NAME, cudaSetDevice(to));
    GPU_CUDA(NAME, cudaMemcpy(back, dst, D2D_BYTES, cudaMemcpyDeviceToHost));
    expect_same_bits("cudaMemcpyPeer", data, back);
    report_reps(how, seconds);
    GPU_CUDA(NAME, cudaFree(dst));
    GPU_CUDA(NAME, cudaSetDevice(from));
    GPU_CUDA(NAME, cudaFree(src));
    free(back);
    free(data);
    return 0;
}

/* The CUDA device count, for the parent that must not ask itself. */
static int child_count(void) {
    int count = 0;
    GPU_CUDA(NAME, cudaGetDeviceCount(&count));
    printf("COUNT %d\n", count);
    fflush(stdout);
    return 0;
}

/* Parses a device ordinal given to a child. */
static int device_arg(const char *text) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || v < 0 || v > 1023) bench_die(NAME, "bad device number '%s'", text);
    return (int)v;
}

/* This program's own child modes: bench-multi --child count | d2d-tenferrod A B | d2d-cuda A B. */
static int own_child_main(int argc, char **argv) {
    const char *mode = argc > 2 ? argv[2] : "";
    if (strcmp(mode, "count") == 0) return child_count();
    if (argc != 5) bench_die(NAME, "child mode '%s' needs two arguments", mode);
    if (strcmp(mode, "d2d-tenferrod") == 0) return child_d2d_tenferrod(argv[3], argv[4]);
    if (strcmp(mode, "d2d-cuda") == 0)
        return child_d2d_cuda(device_arg(argv[3]), device_arg(argv[4]));
    bench_die(NAME, "unknown child mode '%s'", mode);
}

/* ---- the parent ---- */

/* What the command line asked for. */
typedef struct options {
    const char *daemon_path, *ctl_path;
    int gpus; /* 0: count them */
    int same_gpu;
} options;

/* Prints how to call this program (after `why` unless NULL); exits 2, or 0 for --help. */
__attribute__((noreturn)) static void usage_error(const char *why) {
    FILE *out = why ? stderr : stdout;
    if (why) fprintf(out, "%s: %s\n", NAME, why);
    fprintf(out,
            "usage: %s --daemon PATH_TO_tenferrod [--ctl PATH_TO_tenferroctl] [--gpus N] "
            "[--same-gpu]\n"
            "  --gpus N     daemons for N GPUs (default: the CUDA device count)\n"
            "  --same-gpu   every daemon on cuda:0 (a machine with one GPU)\n"
            "  --ctl PATH   also require `tenferroctl status` to answer before measuring\n",
            NAME);
    exit(why ? 2 : 0);
}

/* Parses the command line; a usage error exits with status 2. */
static options parse_options(int argc, char **argv) {
    static const struct option longs[] = {{"daemon", required_argument, NULL, 'd'},
                                          {"ctl", required_argument, NULL, 'c'},
                                          {"gpus", required_argument, NULL, 'g'},
                                          {"same-gpu", no_argument, NULL, 's'},
                                          {"help", no_argument, NULL, 'h'},
                                          {NULL, 0, NULL, 0}};
    options o = {0};
    int opt;
    while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        char *end = NULL;
        switch (opt) {
        case 'd': o.daemon_path = optarg; break;
        case 'c': o.ctl_path = optarg; break;
        case 's': o.same_gpu = 1; break;
        case 'g':
            o.gpus = (int)strtol(optarg, &end, 10);
            if (!optarg[0] || *end || o.gpus < 1 || o.gpus > DAEMON_SET_MAX)
                usage_error("--gpus takes a number from 1 to 16");
            break;
        case 'h': usage_error(NULL);
        default: usage_error("unknown option");
        }
    }
    if (optind < argc) usage_error("unexpected argument (it starts its own daemons: no socket)");
    if (!o.daemon_path) usage_error("--daemon is required");
    if (access(o.daemon_path, X_OK) != 0) usage_error("--daemon is not an executable file");
    if (o.ctl_path && access(o.ctl_path, X_OK) != 0)
        usage_error("--ctl is not an executable file");
    return o;
}

/* The '#' lines every benchmark run starts with: the machine and the date. */
static void print_machine(void) {
    char model[256] = "unknown cpu", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
            snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
            model[strcspn(model, "\n")] = '\0';
            break;
        }
    if (f) fclose(f);
    struct utsname u;
    const int named = uname(&u) == 0;
    printf("# machine: %ld cpus, %s, %s %s\n", sysconf(_SC_NPROCESSORS_ONLN), model,
           named ? u.sysname : "unknown", named ? u.release : "");
    char date[64];
    const time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &utc);
    printf("# date: %s\n", date);
    fflush(stdout);
}

/*
 * Runs one child of this binary to its end: returns its first output line (in out); a child
 * that fails, hangs past CHILD_TIMEOUT_S or writes no line ends the benchmark.
 */
static void run_child(char *const args[], const char *what, char *out, size_t cap) {
    int fd = -1;
    size_t len = 0;
    out[0] = '\0';
    const uint64_t deadline = bench_now_ns() + (uint64_t)CHILD_TIMEOUT_S * 1000000000u;
    pid_t pid = gpu_spawn(NAME, args, -1, &fd);
    int got = gpu_read_line(fd, out, cap, &len, deadline);
    close(fd);
    int status = gpu_reap(pid, deadline);
    if (got != 1 || status != 0)
        bench_die(NAME, "%s child failed (exit status %d%s); it wrote: %.300s", what, status,
                  got < 0 ? ", killed at its deadline" : "", out);
}

/* The CUDA device count, asked of a child. */
static int count_devices(void) {
    char self[4096], out[256];
    snprintf(self, sizeof self, "%s", gpu_self_path(NAME));
    char *args[] = {self, "--child", "count", NULL};
    run_child(args, "device-count (--gpus N does without it)", out, sizeof out);
    int count = 0;
    if (sscanf(out, "COUNT %d", &count) != 1 || count < 0)
        bench_die(NAME, "the device-count child wrote '%s'", out);
    if (count == 0) bench_die(NAME, "no CUDA device here (pass --gpus N to name the count)");
    if (count > DAEMON_SET_MAX) {
        printf("# %d CUDA devices: measuring the first %d\n", count, DAEMON_SET_MAX);
        count = DAEMON_SET_MAX;
    }
    return count;
}

/* One share run of 4 clients on each of the first `daemons` daemons; returns matmuls/s. */
static double share_with(const daemon_set *set, int daemons) {
    const char *sockets[SHARE_MAX_CLIENTS];
    const int clients = CLIENTS_PER_DAEMON * daemons;
    for (int k = 0; k < clients; k++) sockets[k] = set->sockets[k / CLIENTS_PER_DAEMON];
    char label[32];
    snprintf(label, sizeof label, "%d daemon%s", daemons, daemons == 1 ? "" : "s");
    const share_side side = {.bench = NAME, .mode = "tenferrod", .label = label,
                             .clients = clients, .sockets = sockets, .n = SHARE_N,
                             .batch = SHARE_BATCH, .warm_ms = WARM_MS, .run_ms = RUN_MS};
    double rate = share_run_side(&side);
    daemon_set_expect_running();
    return rate;
}

/* share_scale: 1 daemon, then `gpus` daemons, and the BENCH line. */
static void run_share_scale(const daemon_set *set, int gpus) {
    const double one = share_with(set, 1);
    const double all = share_with(set, gpus);
    printf("# share_scale: %d processes per daemon (client k on daemon k/%d), %dx%d f32 matmuls "
           "in bursts of %d, %d ms warm-up + %d ms timed; 1 daemon, then %d; every child's last "
           "product verified\n",
           CLIENTS_PER_DAEMON, CLIENTS_PER_DAEMON, SHARE_N, SHARE_N, SHARE_BATCH, WARM_MS, RUN_MS,
           gpus);
    bench_report("share_scale", all, one, "matmul/s");
    printf("# share_scale: N=%d ratio %.2f (target >= 1.9 at N=2)\n", gpus, all / one);
    fflush(stdout);
}

/*
 * Runs one d2d child and returns the median GB/s of its reps; the median and best times go
 * to a '#' line under `what`.
 */
static double d2d_side(char *const args[], const char *what) {
    char out[1024], how[64];
    run_child(args, what, out, sizeof out);
    double seconds[REPS];
    const char *p = out;
    int used = 0;
    if (sscanf(p, "DONE %63s%n", how, &used) != 1) bench_die(NAME, "%s child wrote '%s'", what, out);
    p += used;
    for (int r = 0; r < REPS; r++) {
        if (sscanf(p, "%lf%n", &seconds[r], &used) != 1 || !(seconds[r] > 0))
            bench_die(NAME, "%s child wrote '%s'", what, out);
        p += used;
    }
    const double median = bench_summary(seconds, REPS, BENCH_MEDIAN);
    const double best = seconds[0]; /* bench_summary sorted them */
    char how_note[80] = "";
    if (strcmp(how, "-") != 0) snprintf(how_note, sizeof how_note, " (%s)", how);
    printf("# d2d_256m %s%s: median %.3f ms = %.2f GB/s, best %.3f ms = %.2f GB/s; copy "
           "verified bit for bit\n",
           what, how_note, median * 1e3, (double)D2D_BYTES / median / 1e9, best * 1e3,
           (double)D2D_BYTES / best / 1e9);
    fflush(stdout);
    return (double)D2D_BYTES / median / 1e9;
}

/* The CUDA ordinal of a daemon's --device ("cuda:N"). */
static int device_ordinal(const char *device) {
    int ordinal = -1;
    if (sscanf(device, "cuda:%d", &ordinal) != 1 || ordinal < 0)
        bench_die(NAME, "daemon device '%s' is not cuda:N", device);
    return ordinal;
}

/* d2d_256m: daemon 0 to daemon 1, both sides, and the BENCH line. */
static void run_d2d(const daemon_set *set) {
    char self[4096], from[16], to[16];
    snprintf(self, sizeof self, "%s", gpu_self_path(NAME));
    char *daemon_args[] = {self, "--child", "d2d-tenferrod", (char *)set->sockets[0],
                           (char *)set->sockets[1], NULL};
    const double daemons = d2d_side(daemon_args, "tf_copy_to daemon 0 -> daemon 1");
    daemon_set_expect_running();
    snprintf(from, sizeof from, "%d", device_ordinal(set->devices[0]));
    snprintf(to, sizeof to, "%d", device_ordinal(set->devices[1]));
    char *cuda_args[] = {self, "--child", "d2d-cuda", from, to, NULL};
    char what[64];
    snprintf(what, sizeof what, "cudaMemcpyPeer device %s -> %s", from, to);
    const double cuda = d2d_side(cuda_args, what);
    printf("# d2d_256m: 256 MiB f32 (%d x %d), %s -> %s, 1 untimed + %d timed copies, median\n",
           D2D_SIDE, D2D_SIDE, set->devices[0], set->devices[1], REPS);
    bench_report("d2d_256m", daemons, cuda, "GB/s");
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[2], "--child") == 0) {
        int status = share_child_main(NAME, argc, argv);
        if (status < 0) bench_die(NAME, "unknown child mode %s", argc > 3 ? argv[3] : "(none)");
        return status;
    }
    if (argc >= 2 && strcmp(argv[1], "--child") == 0) return own_child_main(argc, argv);
    const options o = parse_options(argc, argv);
    print_machine();

    const int gpus = o.gpus ? o.gpus : count_devices();
    const int daemons = gpus < 2 && o.same_gpu ? 2 : gpus;
    const char *devices[DAEMON_SET_MAX];
    char names[DAEMON_SET_MAX][16];
    for (int i = 0; i < daemons; i++) {
        snprintf(names[i], sizeof names[i], "cuda:%d", o.same_gpu ? 0 : i);
        devices[i] = names[i];
    }
    printf("# bench-multi: N=%d (%s)%s; %d daemon%s\n", gpus,
           o.gpus ? "--gpus" : "CUDA device count",
           o.same_gpu ? ", --same-gpu: every daemon on cuda:0" : ", daemon i on cuda:i", daemons,
           daemons == 1 ? "" : "s");
    fflush(stdout);
    const daemon_set *set = daemon_set_start(NAME, o.daemon_path, o.ctl_path, daemons, devices);
    for (int i = 0; i < daemons; i++)
        printf("# daemon %d: --device %s: %s\n", i, set->devices[i], set->described[i]);
    fflush(stdout);

    run_share_scale(set, gpus);
    if (daemons >= 2)
        run_d2d(set);
    else
        printf("# d2d_256m: skipped: it needs 2 daemons, and N=1 without --same-gpu\n");
    fflush(stdout);
    daemon_set_stop();
    return 0;
}
