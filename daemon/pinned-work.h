/*
 * The slow steps of pinned buffers, off the loop thread: creating one
 * (memfd, mapping), sealing one once the client has mapped it (allocating
 * every page, and on CUDA cudaHostRegister, which faults in and locks every
 * page: milliseconds for a few MiB, tens for hundreds) and destroying one
 * (cudaHostUnregister, munmap). They run on libuv's thread pool, so the
 * loop keeps serving every other client meanwhile; the loop only books the
 * result. Pending work keeps the loop alive, so a stopping daemon finishes
 * it before it closes the backend.
 */
#ifndef TENFERRO_DAEMON_PINNED_WORK_H
#define TENFERRO_DAEMON_PINNED_WORK_H

#include <uv.h>

#include "daemon/pinned.h"

/* Runs on the loop once a creation has finished: st is TF_OK with *b and fd set, or why not in msg. */
typedef void (*tfd_pinned_created_fn)(void *arg, tf_status st, const tfd_pinned *b, int fd,
                                      const char *msg);

/* Creates pinned buffer `id` of `bytes` on the thread pool, then calls done on the loop. */
tf_status tfd_pinned_create_async(uv_loop_t *loop, tfd_backend *be, uint64_t id, size_t bytes,
                                  tfd_pinned_created_fn done, void *arg);

/* Runs on the loop once a seal has finished: st is TF_OK with b sealed and registered, or why not in msg. */
typedef void (*tfd_pinned_sealed_fn)(void *arg, tf_status st, const tfd_pinned *b, const char *msg);

/*
 * Seals a copy of *b (which must hold its descriptor) on the thread pool, then
 * calls done on the loop with the record as it then is (fd closed, registered).
 */
tf_status tfd_pinned_seal_async(uv_loop_t *loop, tfd_backend *be, const tfd_pinned *b,
                                tfd_pinned_sealed_fn done, void *arg);

/* Unregisters and unmaps a buffer nothing uses any more, on the thread pool. */
void tfd_pinned_destroy_async(uv_loop_t *loop, tfd_backend *be, const tfd_pinned *b);

#endif
