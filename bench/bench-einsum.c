/*
 * bench-einsum (CPU): a contraction through the daemon against the GEMM it
 * amounts to, computed in this process by OpenBLAS.
 *
 *   cpu_einsum_tn_f64  abcd,cdef->aebf, every dimension 24, f64: a GEMM of
 *                      576 x 576 x 576 whose output the daemon also permutes
 *                      (the output interleaves the two inputs' free labels).
 *     tenferrod: one held session, inputs uploaded once; each sample is
 *                REPS contractions queued in the session (every result but
 *                the last dropped) and one synchronize, the loop a user
 *                writes, sent as the frames the client library sends
 *                (bench-raw.c: this tree's library has no einsum call yet).
 *     baseline:  cblas_dgemm of 576 x 576 x 576 on the same data, REPS times.
 *
 * GFLOP/s = 2 * 576^3 per contraction over the median sample of each side;
 * the sides take turns in blocks, each after a pause, so OpenBLAS threads
 * still spinning on one side do not steal the cores from the other. The
 * daemon's result is checked once, element by element, against the
 * baseline's product permuted to aebf.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench/bench-common.h"
#include "bench/bench-raw.h"

#define D 24
#define M (D * D)
#define REPS 4
#define SAMPLES 12
#define BLOCKS 4
#define PAUSE_MS 200

static const char *const NAME = "bench-einsum";

/* abcd,cdef->aebf with labels a..f = 0..5. */
static tf__contraction tn_descriptor(void) {
    tf__contraction c;
    memset(&c, 0, sizeof c);
    c.n_inputs = 2;
    c.rank[0] = c.rank[1] = c.out_rank = 4;
    const uint8_t a[4] = {0, 1, 2, 3}, b[4] = {2, 3, 4, 5}, out[4] = {0, 4, 1, 5};
    memcpy(c.labels[0], a, 4);
    memcpy(c.labels[1], b, 4);
    memcpy(c.out, out, 4);
    return c;
}

/* REPS daemon contractions and one synchronize; seconds. */
static double daemon_sample(bench_raw *r, const tf__contraction *c, uint64_t a, uint64_t b) {
    uint64_t t0 = bench_now_ns();
    uint64_t last = bench_raw_contract_sync(r, c, a, b, REPS, 1);
    double s = (double)(bench_now_ns() - t0) / 1e9;
    bench_raw_free(r, last);
    return s;
}

static double blas_sample(const double *a, const double *b, double *c) {
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < REPS; i++)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, 1.0, a, M, b, M, 0.0, c,
                    M);
    return (double)(bench_now_ns() - t0) / 1e9;
}

int main(int argc, char **argv) {
    const size_t n = (size_t)M * M;
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *ref = malloc(n * sizeof *ref);
    double *got = malloc(n * sizeof *got);
    if (!a || !b || !ref || !got) bench_die(NAME, "out of memory");
    srand(2424);
    for (size_t i = 0; i < n; i++) {
        a[i] = (double)rand() / RAND_MAX - 0.5;
        b[i] = (double)rand() / RAND_MAX - 0.5;
    }
    bench_raw r;
    bench_raw_connect(NAME, bench_socket_path(argc, argv), &r);
    const tf__meta m = {.dtype = TF_F64, .rank = 4, .shape = {D, D, D, D}};
    const uint64_t ta = bench_raw_upload(&r, &m, a), tb = bench_raw_upload(&r, &m, b);
    bench_raw_session_open(&r);
    const tf__contraction c = tn_descriptor();

    /* Correctness, once: the daemon's aebf against dgemm's abef, permuted here. */
    uint64_t out = bench_raw_contract_sync(&r, &c, ta, tb, 1, 1);
    bench_raw_download(&r, out, got, n * sizeof *got);
    bench_raw_free(&r, out);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, 1.0, a, M, b, M, 0.0, ref, M);
    double worst = 0;
    for (size_t ia = 0; ia < D; ia++)
        for (size_t ib = 0; ib < D; ib++)
            for (size_t ie = 0; ie < D; ie++)
                for (size_t jf = 0; jf < D; jf++) {
                    const double want = ref[(ia * D + ib) * M + ie * D + jf];
                    const double have = got[((ia * D + ie) * D + ib) * D + jf];
                    worst = fmax(worst, fabs(want - have));
                }
    if (!(worst <= 1e-10)) bench_die(NAME, "the daemon's contraction differs by %g", worst);

    double td[SAMPLES], tb_[SAMPLES];
    const int per_block = SAMPLES / BLOCKS;
    for (int blk = 0; blk < BLOCKS; blk++) {
        bench_sleep_ms(PAUSE_MS);
        daemon_sample(&r, &c, ta, tb);
        for (int i = 0; i < per_block; i++) td[blk * per_block + i] = daemon_sample(&r, &c, ta, tb);
        bench_sleep_ms(PAUSE_MS);
        blas_sample(a, b, ref);
        for (int i = 0; i < per_block; i++) tb_[blk * per_block + i] = blas_sample(a, b, ref);
    }
    bench_raw_close(&r);
    const double flop = 2.0 * M * M * M * REPS;
    const double d_med = bench_summary(td, SAMPLES, BENCH_MEDIAN);
    const double b_med = bench_summary(tb_, SAMPLES, BENCH_MEDIAN);
    printf("# cpu_einsum_tn_f64: abcd,cdef->aebf, dimension %d (GEMM %d^3 plus the output "
           "permutation); %d contractions per synchronize, median of %d samples in %d "
           "alternating blocks; max |error| vs dgemm %.2e; per contraction tenferrod %.2f ms, "
           "dgemm %.2f ms\n",
           D, M, REPS, SAMPLES, BLOCKS, worst, d_med / REPS * 1e3, b_med / REPS * 1e3);
    bench_report("cpu_einsum_tn_f64", flop / d_med / 1e9, flop / b_med / 1e9, "GFLOP/s");
    free(a);
    free(b);
    free(ref);
    free(got);
    return 0;
}
