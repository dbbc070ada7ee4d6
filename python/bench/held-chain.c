/*
 * py_held_chain's baseline: 10,000 dependent adds x = x + y of 64-element f64
 * vectors in one held session from C, one tf_session_with per add, then one
 * submit and one synchronize (bench-held-chain's held chain); prints the best
 * of `reps` runs in µs per add, then the best time of the queueing alone (the loop of
 * tf_session_with calls, before the submit) in µs per add. The intermediates are freed as Python frees
 * them (each x once the next add has read it), so both sides queue the same.
 *
 *   held-chain SOCKET [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tenferro/tenferro.h"

#define CHAIN 10000
#define N 64

typedef struct chain {
    tf_tensor x, y;
} chain;

static tf_status add_once(tf_view *v, void *arg) {
    chain *ch = arg;
    tf_tensor out;
    tf_status st = tf_view_add(v, ch->x, ch->y, &out);
    if (st == TF_OK) ch->x = out;
    return st;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void check(tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    fprintf(stderr, "held-chain: %s: %s: %s\n", what, tf_status_name(st), tf_client_last_error(c));
    exit(1);
}

int main(int argc, char **argv) {
    tf_client *c = NULL;
    if (argc < 2 || tf_connect(argv[1], &c) != TF_OK) {
        fprintf(stderr, "held-chain: cannot connect\n");
        return 1;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    double zeros[N] = {0}, ones[N];
    for (int i = 0; i < N; i++) ones[i] = 1.0;
    double best = 0, best_queue = 0;
    for (int r = 0; r < reps; r++) {
        chain ch;
        check(c, tf_upload(c, TF_F64, 1, (int64_t[]){N}, zeros, &ch.x), "tf_upload");
        check(c, tf_upload(c, TF_F64, 1, (int64_t[]){N}, ones, &ch.y), "tf_upload");
        tf_session *s;
        check(c, tf_session_open(c, &s), "tf_session_open");
        double t0 = now_us();
        for (int i = 0; i < CHAIN; i++) {
            tf_tensor prev = ch.x;
            check(c, tf_session_with(s, add_once, &ch), "tf_session_with");
            check(c, tf_tensor_free(c, prev), "tf_tensor_free");
        }
        double queued = (now_us() - t0) / CHAIN;
        check(c, tf_session_submit(s), "tf_session_submit");
        check(c, tf_session_synchronize(s), "tf_session_synchronize");
        double us = (now_us() - t0) / CHAIN;
        check(c, tf_session_close(s, NULL), "tf_session_close");
        void *out = NULL;
        size_t bytes;
        check(c, tf_download(c, ch.x, &out, &bytes), "tf_download");
        if (((double *)out)[N - 1] != (double)CHAIN) {
            fprintf(stderr, "held-chain: wrong result %g\n", ((double *)out)[N - 1]);
            return 1;
        }
        free(out);
        tf_tensor_free(c, ch.x);
        tf_tensor_free(c, ch.y);
        if (r == 0 || us < best) best = us;
        if (r == 0 || queued < best_queue) best_queue = queued;
    }
    printf("%.4f %.4f\n", best, best_queue);
    tf_disconnect(c);
    return 0;
}
