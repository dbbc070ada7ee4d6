/*
 * Shared helpers of the GPU benchmarks (bench/gpu/), on top of bench-common:
 *
 *   - CUDA and cuBLAS status checks that end the benchmark with the failing
 *     call, its place and the runtime's own name for the error;
 *   - deterministic test matrices, so a parent and its children (separate
 *     processes) agree on the operands without sending them;
 *   - verification of a square matrix product without recomputing it: a
 *     weighted checksum sum_ij w_i v_j C_ij, which equals (w^T A)(B v) and so
 *     costs O(n^2) to predict, plus a few sampled entries computed exactly,
 *     each with a rounding bound derived from the operands;
 *   - child processes started by fork+exec of this same binary, reading their
 *     output with deadlines, and reaping them (killed at the deadline).
 *
 * CUDA rule (shared/gpu/README.md): a process that initialised CUDA must not
 * fork children that use CUDA. Benchmarks with children therefore never call
 * CUDA in the parent, and every child is a fresh exec. Nothing here calls
 * CUDA or cuBLAS on its own, and nothing here links cuBLAS (bench-first-result
 * must be able to start without loading it).
 */
#ifndef TENFERRO_BENCH_GPU_COMMON_H
#define TENFERRO_BENCH_GPU_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cuda_runtime_api.h>

#include "bench/bench-common.h"

/* Unless err is success, ends the benchmark (bench_die) naming the call, file:line and error. */
void gpu_cuda_check(const char *bench, cudaError_t err, const char *call, const char *file,
                    int line);

/* The same for a cuBLAS status (passed as an int, so no cuBLAS symbol is needed). */
void gpu_cublas_check(const char *bench, int status, const char *call, const char *file,
                      int line);

#define GPU_CUDA(bench, call) gpu_cuda_check((bench), (call), #call, __FILE__, __LINE__)
#define GPU_CUBLAS(bench, call) gpu_cublas_check((bench), (int)(call), #call, __FILE__, __LINE__)

/* malloc that ends the benchmark when it fails. */
void *gpu_xmalloc(const char *bench, size_t bytes);

/* Fills x[0..n) with deterministic values uniform in [-0.5, 0.5), the same for the same seed. */
void gpu_fill(tf_dtype dtype, void *x, size_t n, uint64_t seed);

/* Samples of a product's digest (index 0..3 are the four corners). */
#define GPU_SAMPLES 16

/* What a product C = A B (square n x n, row-major) is checked by. */
typedef struct gpu_digest {
    double checksum;               /* sum_ij w_i v_j C_ij */
    double samples[GPU_SAMPLES];   /* C at gpu_sample_position(n, s) */
} gpu_digest;

/* The expected digest of A B and the rounding bounds each value may differ by. */
typedef struct gpu_expect {
    gpu_digest value;
    gpu_digest bound;
} gpu_expect;

/* Row and column of sample s of an n x n product. */
void gpu_sample_position(int n, int s, int *row, int *col);

/* The digest of a computed product c (f32 or f64, n x n, row-major). */
void gpu_digest_of(tf_dtype dtype, const void *c, int n, gpu_digest *d);

/* The expected digest of a x b computed exactly enough here (O(n^2)), with its bounds. */
void gpu_expect_of(tf_dtype dtype, const void *a, const void *b, int n, gpu_expect *e);

/*
 * Compares a digest with the expectation: returns the worst |error| / bound
 * over the checksum and the samples (<= 1 passes; NaN counts as failing) and
 * writes the worst offender into why.
 */
double gpu_digest_check(const gpu_digest *got, const gpu_expect *e, char *why, size_t why_len);

/* Digest plus check of a whole product in one call; ends the benchmark when it fails. */
void gpu_verify_product(const char *bench, const char *what, tf_dtype dtype, const void *a,
                        const void *b, const void *c, int n);

/* Writes a digest as one line of numbers after `tag` ("%.17g" each, then '\n'), flushed. */
void gpu_digest_print(const char *tag, const gpu_digest *d);

/* Parses what gpu_digest_print wrote after its tag; 0 on success. */
int gpu_digest_parse(const char *text, gpu_digest *d);

/* This executable's path, to start children in a mode of the same binary. */
const char *gpu_self_path(const char *bench);

/*
 * Starts argv (argv[0] is run, searched nowhere) by fork+exec: the child's
 * stdin is in_fd (or unchanged when -1), its stdout a new pipe whose read end
 * is returned in *out_fd (close-on-exec); stderr is shared. Returns the pid.
 */
pid_t gpu_spawn(const char *bench, char *const argv[], int in_fd, int *out_fd);

/*
 * Reads from fd into buf (kept NUL-terminated) until buf holds a line, EOF or
 * the deadline (bench_now_ns() units). Returns 1 on a line, 0 on EOF and -1
 * at the deadline. *len carries what is already in buf between calls.
 */
int gpu_read_line(int fd, char *buf, size_t cap, size_t *len, uint64_t deadline_ns);

/*
 * Waits for pid until the deadline, then kills it (SIGKILL) and reaps it.
 * Returns its exit status, 128 + signal, or -1 when waiting failed.
 */
int gpu_reap(pid_t pid, uint64_t deadline_ns);

#endif
