/*
 * The GPU benchmarks' shared helpers (see gpu-common.h): status checks,
 * deterministic operands, product verification by digest, and child
 * processes by fork+exec with deadlines. Free of CUDA calls of its own and of
 * any cuBLAS symbol, so a benchmark whose parent must not touch the GPU (or
 * whose child must not load cuBLAS) can link it.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/gpu/gpu-common.h"

/* ---- status checks ---- */

void gpu_cuda_check(const char *bench, cudaError_t err, const char *call, const char *file,
                    int line) {
    if (err == cudaSuccess) return;
    bench_die(bench, "%s failed at %s:%d: %s (%s, %d)", call, file, line, cudaGetErrorString(err),
              cudaGetErrorName(err), (int)err);
}

/* cuBLAS's status names, by number (cublas_api.h), so that no cuBLAS symbol is referenced. */
static const char *cublas_status_name(int status) {
    switch (status) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

void gpu_cublas_check(const char *bench, int status, const char *call, const char *file,
                      int line) {
    if (status == 0) return;
    bench_die(bench, "%s failed at %s:%d: %s (%d)", call, file, line, cublas_status_name(status),
              status);
}

void *gpu_xmalloc(const char *bench, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) bench_die(bench, "out of host memory for %zu bytes", bytes);
    return p;
}

/* ---- deterministic operands ---- */

/* splitmix64: a good 64-bit mix of a counter, so element i depends only on (seed, i). */
static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

void gpu_fill(tf_dtype dtype, void *x, size_t n, uint64_t seed) {
    const uint64_t base = mix64(seed);
    if (dtype == TF_F32) {
        float *f = x;
        /* 24 random bits: exactly representable in f32. */
        for (size_t i = 0; i < n; i++)
            f[i] = (float)((double)(mix64(base + i) >> 40) * 0x1p-24 - 0.5);
    } else {
        double *d = x;
        for (size_t i = 0; i < n; i++) d[i] = (double)(mix64(base + i) >> 11) * 0x1p-53 - 0.5;
    }
}

/* ---- product verification ---- */

#define ROW_WEIGHT_SEED 0x57a1u
#define COL_WEIGHT_SEED 0xc01du

/* Weight i of a checksum: deterministic, in [-1, 1), different for rows and columns. */
static double weight(uint64_t seed, int i) {
    return (double)(mix64(seed * 0x100000000ull + (uint64_t)i) >> 11) * 0x1p-52 - 1.0;
}

/* Element i of an f32 or f64 array, as a double. */
static double load(tf_dtype dtype, const void *p, size_t i) {
    return dtype == TF_F32 ? (double)((const float *)p)[i] : ((const double *)p)[i];
}

void gpu_sample_position(int n, int s, int *row, int *col) {
    switch (s) {
    case 0: *row = 0, *col = 0; return;
    case 1: *row = 0, *col = n - 1; return;
    case 2: *row = n - 1, *col = 0; return;
    case 3: *row = n - 1, *col = n - 1; return;
    default:
        *row = (int)(mix64(0x5a3e0000u + (uint64_t)s) % (uint64_t)n);
        *col = (int)(mix64(0xc0130000u + (uint64_t)s) % (uint64_t)n);
    }
}

void gpu_digest_of(tf_dtype dtype, const void *c, int n, gpu_digest *d) {
    long double total = 0;
    double *v = gpu_xmalloc("gpu_digest_of", sizeof(double) * (size_t)n);
    for (int j = 0; j < n; j++) v[j] = weight(COL_WEIGHT_SEED, j);
    for (int i = 0; i < n; i++) {
        long double row = 0;
        const size_t base = (size_t)i * (size_t)n;
        for (int j = 0; j < n; j++) row += (long double)load(dtype, c, base + (size_t)j) * v[j];
        total += row * weight(ROW_WEIGHT_SEED, i);
    }
    free(v);
    d->checksum = (double)total;
    for (int s = 0; s < GPU_SAMPLES; s++) {
        int r, k;
        gpu_sample_position(n, s, &r, &k);
        d->samples[s] = load(dtype, c, (size_t)r * (size_t)n + (size_t)k);
    }
}

/*
 * Bounds: a K-term dot product in precision eps is off by at most about
 * K eps sum|a_ik b_kj|; twice that (K + 2 terms) covers any summation order
 * cuBLAS picks. The checksum inherits the same relative bound over
 * S = sum_k (sum_i |w_i a_ik|)(sum_j |b_kj v_j|), plus the long double
 * accumulation of n^2 terms on each side.
 */
void gpu_expect_of(tf_dtype dtype, const void *a, const void *b, int n, gpu_expect *e) {
    const double eps = dtype == TF_F32 ? 0x1p-24 : 0x1p-53;
    const double rel = 2.0 * (n + 2) * eps;
    const size_t nn = (size_t)n;
    long double *u = gpu_xmalloc("gpu_expect_of", sizeof(long double) * nn * 4);
    long double *ua = u + nn, *z = u + 2 * nn, *za = u + 3 * nn;
    memset(u, 0, sizeof(long double) * nn * 4);
    /* u = w^T A (and |w|^T |A|), row by row of A so memory is read in order. */
    for (int i = 0; i < n; i++) {
        const double w = weight(ROW_WEIGHT_SEED, i);
        for (int k = 0; k < n; k++) {
            const double x = load(dtype, a, (size_t)i * nn + (size_t)k);
            u[k] += (long double)w * x;
            ua[k] += fabs(w * x);
        }
    }
    /* z = B v (and |B| |v|). */
    for (int k = 0; k < n; k++) {
        long double s = 0, sa = 0;
        for (int j = 0; j < n; j++) {
            const double x = load(dtype, b, (size_t)k * nn + (size_t)j);
            const double v = weight(COL_WEIGHT_SEED, j);
            s += (long double)x * v;
            sa += fabs(x * v);
        }
        z[k] = s;
        za[k] = sa;
    }
    long double sum = 0, bound = 0;
    for (int k = 0; k < n; k++) {
        sum += u[k] * z[k];
        bound += ua[k] * za[k];
    }
    free(u);
    const double accumulate = 4.0 * ((double)nn * (double)nn + 4.0 * (double)nn) * 0x1p-64;
    e->value.checksum = (double)sum;
    e->bound.checksum = (rel + accumulate) * (double)bound + 1e-300;
    for (int s = 0; s < GPU_SAMPLES; s++) {
        int r, col;
        gpu_sample_position(n, s, &r, &col);
        long double dot = 0, mag = 0;
        for (int k = 0; k < n; k++) {
            const double x = load(dtype, a, (size_t)r * nn + (size_t)k);
            const double y = load(dtype, b, (size_t)k * nn + (size_t)col);
            dot += (long double)x * y;
            mag += fabs(x * y);
        }
        e->value.samples[s] = (double)dot;
        e->bound.samples[s] = rel * (double)mag + 1e-300;
    }
}

double gpu_digest_check(const gpu_digest *got, const gpu_expect *e, char *why, size_t why_len) {
    double worst = fabs(got->checksum - e->value.checksum) / e->bound.checksum;
    if (isnan(worst)) worst = INFINITY;
    snprintf(why, why_len, "checksum %.17g, expected %.17g (bound %.3g)", got->checksum,
             e->value.checksum, e->bound.checksum);
    for (int s = 0; s < GPU_SAMPLES; s++) {
        double r = fabs(got->samples[s] - e->value.samples[s]) / e->bound.samples[s];
        if (isnan(r)) r = INFINITY;
        if (r > worst) {
            worst = r;
            snprintf(why, why_len, "sample %d is %.17g, expected %.17g (bound %.3g)", s,
                     got->samples[s], e->value.samples[s], e->bound.samples[s]);
        }
    }
    return worst;
}

void gpu_verify_product(const char *bench, const char *what, tf_dtype dtype, const void *a,
                        const void *b, const void *c, int n) {
    gpu_digest d;
    gpu_expect e;
    char why[256];
    gpu_digest_of(dtype, c, n, &d);
    gpu_expect_of(dtype, a, b, n, &e);
    double worst = gpu_digest_check(&d, &e, why, sizeof why);
    if (!(worst <= 1.0))
        bench_die(bench, "%s: wrong %dx%d %s product: %s (%.3g x the bound)", what, n, n,
                  tf_dtype_name(dtype), why, worst);
}

void gpu_digest_print(const char *tag, const gpu_digest *d) {
    printf("%s %.17g", tag, d->checksum);
    for (int s = 0; s < GPU_SAMPLES; s++) printf(" %.17g", d->samples[s]);
    printf("\n");
    fflush(stdout);
}

int gpu_digest_parse(const char *text, gpu_digest *d) {
    char *end = NULL;
    errno = 0;
    d->checksum = strtod(text, &end);
    if (end == text || errno) return -1;
    for (int s = 0; s < GPU_SAMPLES; s++) {
        const char *p = end;
        d->samples[s] = strtod(p, &end);
        if (end == p || errno) return -1;
    }
    return 0;
}

/* ---- child processes ---- */

const char *gpu_self_path(const char *bench) {
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0 || (size_t)n >= sizeof path - 1)
        bench_die(bench, "readlink /proc/self/exe failed: %s", strerror(errno));
    path[n] = '\0';
    return path;
}

pid_t gpu_spawn(const char *bench, char *const argv[], int in_fd, int *out_fd) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) bench_die(bench, "pipe2 failed: %s", strerror(errno));
    fflush(NULL);
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) bench_die(bench, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        /* Die with the parent, so a benchmark killed at its timeout leaves no children behind. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        if ((in_fd >= 0 && dup2(in_fd, 0) < 0) || dup2(fds[1], 1) < 0) _exit(127);
        execv(argv[0], argv);
        fprintf(stderr, "%s: exec %s failed: %s\n", bench, argv[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    *out_fd = fds[0];
    return pid;
}

/* Number of '\n' in buf[0..len). */
static int count_lines(const char *buf, size_t len) {
    int n = 0;
    for (size_t i = 0; i < len; i++) n += buf[i] == '\n';
    return n;
}

int gpu_read_line(int fd, char *buf, size_t cap, size_t *len, uint64_t deadline_ns) {
    const int want = count_lines(buf, *len) + 1;
    for (;;) {
        if (count_lines(buf, *len) >= want || *len + 1 >= cap) return 1;
        uint64_t now = bench_now_ns();
        if (now >= deadline_ns) return -1;
        uint64_t wait_ms = (deadline_ns - now) / 1000000u + 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, wait_ms > 60000 ? 60000 : (int)wait_ms);
        if (r < 0 && errno != EINTR) return -1;
        if (r <= 0) continue;
        ssize_t got = read(fd, buf + *len, cap - 1 - *len);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return 0;
        *len += (size_t)got;
        buf[*len] = '\0';
    }
}

int gpu_reap(pid_t pid, uint64_t deadline_ns) {
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        if (bench_now_ns() >= deadline_ns) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) return -1;
            break;
        }
        bench_sleep_ms(1);
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}
