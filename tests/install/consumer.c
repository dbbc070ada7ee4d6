/*
 * A program built only from an installed tenferro: its headers, its library
 * and its pkg-config file (tests/install/test-install.sh compiles it with
 * `pkg-config --cflags --libs tenferro-client`). It connects to the daemon
 * named by argv[1], uploads two vectors, adds them in one scoped session,
 * downloads the sum and checks it, and checks that the installed header and
 * library agree on the version. Exits 0 and prints "consumer: ok" on success.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tenferro/tenferro.h>

#define N 4096

/* The scoped session's inputs and output. */
typedef struct sum {
    tf_tensor a, b, out;
} sum;

static tf_status add(tf_view *v, void *arg) {
    sum *s = arg;
    return tf_view_add(v, s->a, s->b, &s->out);
}

/* Reports a failed call with the library's message and exits. */
static void check(tf_client *c, tf_status st, const char *what) {
    if (st == TF_OK) return;
    fprintf(stderr, "consumer: %s: %s: %s\n", what, tf_status_name(st),
            c ? tf_client_last_error(c) : tf_strerror(st));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer SOCKET\n");
        return 2;
    }
    char header_version[32];
    snprintf(header_version, sizeof header_version, "%d.%d.%d", TF_VERSION_MAJOR, TF_VERSION_MINOR,
             TF_VERSION_PATCH);
    if (strcmp(header_version, tf_version()) != 0) {
        fprintf(stderr, "consumer: header says %s, library says %s\n", header_version, tf_version());
        return 1;
    }

    tf_client *c = NULL;
    check(c, tf_connect(argv[1], &c), "tf_connect");
    static double a[N], b[N];
    for (int i = 0; i < N; i++) {
        a[i] = i * 0.5;
        b[i] = 1000.0 - i;
    }
    int64_t shape[1] = {N};
    sum s;
    check(c, tf_upload(c, TF_F64, 1, shape, a, &s.a), "tf_upload a");
    check(c, tf_upload(c, TF_F64, 1, shape, b, &s.b), "tf_upload b");
    check(c, tf_with_session(c, add, &s), "tf_with_session");
    void *data = NULL;
    size_t bytes = 0;
    check(c, tf_download(c, s.out, &data, &bytes), "tf_download");
    if (bytes != sizeof a) {
        fprintf(stderr, "consumer: downloaded %zu bytes, expected %zu\n", bytes, sizeof a);
        return 1;
    }
    const double *y = data;
    for (int i = 0; i < N; i++) {
        if (y[i] != a[i] + b[i]) {
            fprintf(stderr, "consumer: element %d is %g, expected %g\n", i, y[i], a[i] + b[i]);
            return 1;
        }
    }
    free(data);
    printf("consumer: ok (libtenferro-client %s, %s)\n", tf_version(), tf_client_device(c));
    tf_disconnect(c);
    return 0;
}
