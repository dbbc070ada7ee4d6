/*
 * py_pinned_upload_64m's baseline: a pending upload (tf_upload_pending, then
 * tf_pending_wait) of 64 MiB from one pinned buffer into one existing f64
 * tensor, reused every time, from C; prints the median of `reps` in GB/s
 * (10^9 bytes per second of the transfer's size).
 *
 *   pinned-upload SOCKET [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tenferro/tenferro.h"

#define BYTES (64u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    tf_client *c = NULL;
    if (argc < 2 || tf_connect(argv[1], &c) != TF_OK) {
        fprintf(stderr, "pinned-upload: cannot connect\n");
        return 1;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 15;
    if (reps > 256) reps = 256;
    tf_pinned_buffer *buf;
    tf_tensor t;
    if (tf_pinned_buffer_new(c, BYTES, &buf) != TF_OK ||
        tf_zeros(c, TF_F64, 1, (int64_t[]){BYTES / 8}, &t) != TF_OK) {
        fprintf(stderr, "pinned-upload: %s\n", tf_client_last_error(c));
        return 1;
    }
    double *d = tf_pinned_buffer_data(buf);
    for (size_t i = 0; i < BYTES / 8; i++) d[i] = (double)i;
    double gbs[256];
    for (int r = -1; r < reps; r++) {
        tf_pending *p;
        double t0 = now_s();
        if (tf_upload_pending(c, buf, t, &p) != TF_OK || tf_pending_wait(p, &t, &buf) != TF_OK) {
            fprintf(stderr, "pinned-upload: %s\n", tf_client_last_error(c));
            return 1;
        }
        double s = now_s() - t0;
        if (r >= 0) gbs[r] = BYTES / s / 1e9;
    }
    qsort(gbs, (size_t)reps, sizeof gbs[0], cmp);
    printf("%.3f\n", reps % 2 ? gbs[reps / 2] : (gbs[reps / 2 - 1] + gbs[reps / 2]) / 2);
    tf_disconnect(c);
    return 0;
}
