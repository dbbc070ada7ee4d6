/*
 * Host memory shared between two daemons for a device-to-device copy
 * (docs/multi-gpu.md, kind "host-memfd"): the offering daemon copies the
 * tensor into a sealed memfd, the taking daemon maps it read-only. The CPU
 * backend offers and takes this way; the CUDA backend takes it too (a CPU
 * daemon's tensor onto a GPU).
 */
#ifndef TENFERRO_DAEMON_BACKEND_CPU_PEER_H
#define TENFERRO_DAEMON_BACKEND_CPU_PEER_H

#include <stddef.h>

#include "daemon/backend/backend.h"

#define TFD_PEER_KIND_MEMFD "host-memfd"

/* A sealed memfd holding a copy of `bytes` at ptr, into *out. */
tf_status tfd_peer_memfd_export(const void *ptr, size_t bytes, tfd_peer_memory *out, char *msg,
                                size_t msg_len);

/*
 * Maps the `bytes` another daemon described in `in` read-only: *data points
 * at them; tfd_peer_memfd_unmap(*base, *mapped) undoes it. Refuses a
 * descriptor that is not a memfd sealed against shrinking and writing, or too short.
 */
tf_status tfd_peer_memfd_map(const tfd_peer_memory *in, size_t bytes, const void **data,
                             void **base, size_t *mapped, char *msg, size_t msg_len);
void tfd_peer_memfd_unmap(void *base, size_t mapped);

/* The CPU backend's vtable entries: a memfd copy out, a mapped copy in. */
tf_status tfd_cpu_peer_export(tfd_backend *be, void *stream, const void *ptr, size_t bytes,
                              tfd_peer_memory *out, char *msg, size_t msg_len);
tf_status tfd_cpu_peer_import_copy(tfd_backend *be, void *stream, void *dst, size_t bytes,
                                   const tfd_peer_memory *in, char *msg, size_t msg_len);

#endif
