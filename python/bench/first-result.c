/*
 * py_first_result's baseline: the program of first_result.py in C. Connects,
 * uploads 1024 f64, adds, downloads, exits; exits 1 when anything fails.
 *
 *   first-result SOCKET
 */
#include <stdio.h>
#include <stdlib.h>

#include "tenferro/tenferro.h"

static tf_status add_cb(tf_view *v, void *arg) {
    tf_tensor *t = arg;
    return tf_view_add(v, t[0], t[0], &t[1]);
}

int main(int argc, char **argv) {
    tf_client *c = NULL;
    if (argc < 2 || tf_connect(argv[1], &c) != TF_OK) {
        fprintf(stderr, "first-result: cannot connect: %s\n", c ? tf_client_last_error(c) : "");
        return 1;
    }
    double x[1024];
    for (int i = 0; i < 1024; i++) x[i] = i;
    tf_tensor t[2];
    void *out = NULL;
    size_t bytes = 0;
    if (tf_upload(c, TF_F64, 1, (int64_t[]){1024}, x, &t[0]) != TF_OK ||
        tf_with_session(c, add_cb, t) != TF_OK || tf_download(c, t[1], &out, &bytes) != TF_OK ||
        ((double *)out)[1023] != 2046.0) {
        fprintf(stderr, "first-result: %s\n", tf_client_last_error(c));
        return 1;
    }
    free(out);
    tf_disconnect(c);
    return 0;
}
