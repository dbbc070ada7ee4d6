/*
 * The smallest client: what a first program against tenferrod looks like.
 * (`make demo` runs the demo-*.c clients instead, which do the work the daemon
 * is for, several at once: docs/demo.md.)
 *
 * Uploads a random vector, doubles it three times in a held session (adding it
 * to itself), submits, reads it back and checks it equals 8x the input; then
 * runs a matmul in a scoped session and checks it against a product computed
 * here; prints the session counters. Exits non-zero on any mismatch.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tenferro/tenferro.h"

#define N 1024
#define M 64

/* Prints the failing call's status and message, then exits. */
static void check(tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    fprintf(stderr, "demo: %s failed: %s: %s\n", what, tf_status_name(st), tf_client_last_error(c));
    exit(1);
}

/* State of the held-session callback: the tensor being doubled. */
typedef struct doubling {
    tf_tensor value;
} doubling;

static tf_status double_once(tf_view *v, void *arg) {
    doubling *d = arg;
    tf_tensor twice;
    tf_status st = tf_view_add(v, d->value, d->value, &twice);
    if (st == TF_OK) d->value = twice;
    return st;
}

typedef struct product {
    tf_tensor a, b, c;
} product;

static tf_status multiply(tf_view *v, void *arg) {
    product *p = arg;
    return tf_view_matmul(v, p->a, p->b, &p->c);
}

int main(int argc, char **argv) {
    const char *socket_path = argc > 1 ? argv[1] : NULL;
    srand((unsigned)time(NULL));
    tf_client *c = NULL;
    check(c, tf_connect(socket_path, &c), "tf_connect");
    printf("connected to tenferrod: %s (client %llu)\n", tf_client_device(c),
           (unsigned long long)tf_client_id(c));

    /* Held session: three dependent adds, one submit. */
    static double x[N];
    for (int i = 0; i < N; i++) x[i] = (double)rand() / RAND_MAX * 2.0 - 1.0;
    int64_t shape[1] = {N};
    tf_tensor input;
    check(c, tf_upload(c, TF_F64, 1, shape, x, &input), "tf_upload");
    tf_session *s;
    check(c, tf_session_open(c, &s), "tf_session_open");
    doubling d = {input};
    for (int i = 0; i < 3; i++) check(c, tf_session_with(s, double_once, &d), "tf_session_with");
    check(c, tf_session_submit(s), "tf_session_submit");
    void *out = NULL;
    size_t bytes = 0;
    check(c, tf_download(c, d.value, &out, &bytes), "tf_download");
    const double *y = out;
    for (int i = 0; i < N; i++) {
        if (y[i] != 8.0 * x[i]) {
            fprintf(stderr, "demo: element %d is %g, expected %g\n", i, y[i], 8.0 * x[i]);
            return 1;
        }
    }
    free(out);
    printf("held session: x doubled three times (3 queued adds, 1 submit) == 8x for all %d elements\n", N);
    tf_session_counters stats;
    check(c, tf_session_close(s, &stats), "tf_session_close");
    printf("session counters: held_operations=%llu explicit_submits=%llu close_submits=%llu "
           "failed_submits=%llu explicit_synchronizes=%llu failed_synchronizes=%llu queued_ops=%llu\n",
           (unsigned long long)stats.held_operations, (unsigned long long)stats.explicit_submits,
           (unsigned long long)stats.close_submits, (unsigned long long)stats.failed_submits,
           (unsigned long long)stats.explicit_synchronizes,
           (unsigned long long)stats.failed_synchronizes, (unsigned long long)stats.queued_ops);

    /* Scoped session: one matmul, checked against a product computed here. */
    static double a[M * M], b[M * M], ref[M * M];
    for (int i = 0; i < M * M; i++) {
        a[i] = (double)rand() / RAND_MAX - 0.5;
        b[i] = (double)rand() / RAND_MAX - 0.5;
    }
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            double acc = 0;
            for (int k = 0; k < M; k++) acc += a[i * M + k] * b[k * M + j];
            ref[i * M + j] = acc;
        }
    int64_t mshape[2] = {M, M};
    product p;
    check(c, tf_upload(c, TF_F64, 2, mshape, a, &p.a), "tf_upload a");
    check(c, tf_upload(c, TF_F64, 2, mshape, b, &p.b), "tf_upload b");
    check(c, tf_with_session(c, multiply, &p), "tf_with_session");
    check(c, tf_download(c, p.c, &out, &bytes), "tf_download c");
    double worst = 0;
    for (int i = 0; i < M * M; i++) worst = fmax(worst, fabs(((double *)out)[i] - ref[i]));
    free(out);
    if (worst > 1e-12) {
        fprintf(stderr, "demo: matmul differs from the reference by %g\n", worst);
        return 1;
    }
    printf("scoped session: %dx%d f64 matmul matches the reference (max error %.2e)\n", M, M, worst);
    tf_disconnect(c);
    return 0;
}
