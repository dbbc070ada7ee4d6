/*
 * bench-share: four processes sharing one GPU, through one daemon (one warm
 * context, one stream per client) against four processes with a CUDA
 * context each (time-sliced by the driver).
 *
 *   share4        1024 x 1024 f32 matmuls, bursts of 32
 *   share4_small   256 x  256 f32 matmuls, bursts of 128
 *   (unit: matmuls per second, all four processes together)
 *
 *   tenferrod: CLIENTS child processes (fork+exec of this binary, mode
 *              "--child tenferrod") each upload A and B once, then loop on
 *              scoped sessions (tf_with_session): each burst queues `batch`
 *              products A x B and then frees those outputs in the same burst
 *              (queued frees run after the products), so the daemon's memory
 *              stays bounded; the scoped session returns once the burst has
 *              completed on the device.
 *   baseline:  CLIENTS child processes (mode "--child cuda"), each with its
 *              own context, non-blocking stream and cuBLAS handle, loop on
 *              `batch` cublasSgemm calls into one output followed by
 *              cudaStreamSynchronize.
 *
 * Each child sets up (connects or creates its context, uploads, runs one
 * burst), reports READY and blocks reading its stdin; the parent closes the
 * write end of that shared pipe once all are ready, so all start together.
 * Each child then runs bursts for WARM_MS untimed and RUN_MS timed, counts
 * the products of completed bursts, checks one last product against the
 * digest predicted from A and B, and reports its count and elapsed time.
 * Aggregate = sum(count) / max(elapsed). The tenferrod side runs first, then
 * the baseline, for each size in one program run.
 *
 * The children and the parent's side of the loop live in share-loop.c (bench-multi runs the
 * same loop against several daemons). The parent never calls CUDA (its children could not use
 * CUDA otherwise).
 */
#include <stdio.h>
#include <string.h>

#include "bench/gpu/gpu-common.h"
#include "bench/gpu/share-loop.h"

#define CLIENTS 4
#define WARM_MS 500
#define RUN_MS 3000

static const char *const NAME = "bench-share";

/* Runs CLIENTS children of one side together against the one daemon; returns matmuls/s. */
static double run_side(const char *socket, const char *mode, int n, int batch) {
    const char *sockets[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) sockets[i] = socket;
    const share_side side = {.bench = NAME, .mode = mode, .label = mode, .clients = CLIENTS,
                             .sockets = sockets, .n = n, .batch = batch, .warm_ms = WARM_MS,
                             .run_ms = RUN_MS};
    return share_run_side(&side);
}

/* Both sides of one size, and its BENCH line. */
static void run_size(const char *socket, const char *name, int n, int batch) {
    double d = run_side(socket, "tenferrod", n, batch);
    double c = run_side(socket, "cuda", n, batch);
    printf("# %s: %d processes, %dx%d f32 matmuls in bursts of %d, %d ms warm-up + %d ms timed; "
           "every child's last product verified\n",
           name, CLIENTS, n, n, batch, WARM_MS, RUN_MS);
    bench_report(name, d, c, "matmuls/s");
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[2], "--child") == 0) {
        int status = share_child_main(NAME, argc, argv);
        if (status < 0) bench_die(NAME, "unknown child mode %s", argc > 3 ? argv[3] : "(none)");
        return status;
    }
    const char *socket = bench_socket_path(argc, argv);
    if (!socket) socket = "";
    /* Fail early and clearly when the daemon is not there (this touches no CUDA). */
    tf_client *probe = bench_connect(argc, argv);
    printf("# daemon device: %s\n", tf_client_device(probe));
    fflush(stdout);
    tf_disconnect(probe);

    run_size(socket, "share4", 1024, 32);
    run_size(socket, "share4_small", 256, 128);
    return 0;
}
