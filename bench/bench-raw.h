/*
 * A raw-frame client for the contraction benchmarks (bench-raw.c), and for
 * the status counters the prepared-graph benchmarks check their cache hits by.
 *
 * This tree's client library cannot queue OP_CONTRACT yet (tf_view_einsum
 * comes with the client-side einsum), so the einsum benchmarks speak the
 * protocol themselves: Hello, Upload in chunks, a held session, Submits of
 * operations, chunked Downloads. The frames are the ones the library sends
 * for the loop a user writes (operations queued in a held session, then one
 * SUBMIT_SYNCHRONIZE frame carrying them), so the daemon does the same work
 * either way; swapping these calls for tf_upload, tf_session_with and
 * tf_view_einsum changes no daemon path. Failures end the benchmark through
 * bench_die.
 */
#ifndef TENFERRO_BENCH_RAW_H
#define TENFERRO_BENCH_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "common/frame.h"
#include "common/ops.h"

/* One raw connection and its held session. */
typedef struct bench_raw {
    const char *bench;
    int fd;
    uint64_t seq;
    uint64_t session;   /* 0 until bench_raw_session_open */
    uint64_t max_frame; /* the daemon's, from the HelloReply */
    uint64_t next_id;   /* tensor ids this client hands out */
    char device[256];
} bench_raw;

/* Connects to the socket (NULL: $TENFERRO_SOCKET) and says Hello. */
void bench_raw_connect(const char *bench, const char *socket, bench_raw *r);

/* Creates a tensor of the given metadata from host data (in chunks); returns its id. */
uint64_t bench_raw_upload(bench_raw *r, const tf__meta *m, const void *data);

/* Reads `bytes` of tensor id into dst (in chunks). */
void bench_raw_download(bench_raw *r, uint64_t id, void *dst, size_t bytes);

/* Opens a held session (TF_ERR_CONTENDED and the like end the benchmark). */
void bench_raw_session_open(bench_raw *r);

/*
 * Sends `reps` contractions c of inputs a (and b), each into a fresh output,
 * in one Submit of the held session with mode SUBMIT_SYNCHRONIZE, and waits
 * for its Result. With free_outputs every output but the last is freed in
 * the same Submit (as a loop that drops its result would); the last output's
 * id is returned.
 */
uint64_t bench_raw_contract_sync(bench_raw *r, const tf__contraction *c, uint64_t a, uint64_t b,
                                 int reps, int free_outputs);

/* Frees tensors outside any batch (a Free frame; no reply). */
void bench_raw_free(bench_raw *r, uint64_t id);

/* Closes the held session (SUBMIT_CLOSE); nothing happens without one. */
void bench_raw_session_close(bench_raw *r);

/*
 * The counters of the daemon-wide cache `name` ("prepared_graphs", ...) from
 * a StatusRequest, as tenferroctl status lists them; ends the benchmark when
 * the daemon does not list that cache.
 */
void bench_raw_cache(bench_raw *r, const char *name, uint64_t *hits, uint64_t *misses);

/* Closes the held session (if any) and the connection. */
void bench_raw_close(bench_raw *r);

#endif
