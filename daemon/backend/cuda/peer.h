/*
 * The CUDA backend's side of device-to-device copies between daemons
 * (docs/multi-gpu.md, kind "cuda-pool"): the daemon's memory pool is created
 * shareable (a POSIX file descriptor handle), an offered tensor is described
 * by the pool's descriptor and the export data of the allocation holding it,
 * and the taking daemon imports both and copies on its own stream (peer to
 * peer across GPUs, device to device on one).
 */
#ifndef TENFERRO_DAEMON_BACKEND_CUDA_PEER_H
#define TENFERRO_DAEMON_BACKEND_CUDA_PEER_H

#include <cuda_runtime_api.h>

#include "daemon/backend/backend.h"

#define TFD_PEER_KIND_CUDA_POOL "cuda-pool"

/*
 * A memory pool on device `ordinal` whose allocations other processes may
 * import; TF_ERR_UNSUPPORTED (msg says why) where the device or driver has
 * none, and the caller keeps the device's default pool.
 */
tf_status tfd_cuda_pool_create_shareable(int ordinal, cudaMemPool_t *pool, char *msg, size_t msg_len);

/*
 * Describes `bytes` at ptr, inside the allocation that starts at base (made
 * from `pool`, of the current device), for another daemon.
 */
tf_status tfd_cuda_peer_export(cudaMemPool_t pool, void *base, const void *ptr, size_t bytes,
                               tfd_peer_memory *out, char *msg, size_t msg_len);

/*
 * Copies `bytes` another daemon described into dst on `stream` (of device
 * `ordinal`, current), after the work queued there, and returns once the
 * copy is over and the imported memory let go.
 */
tf_status tfd_cuda_peer_import_copy(int ordinal, cudaStream_t stream, void *dst, size_t bytes,
                                    const tfd_peer_memory *in, char *msg, size_t msg_len);

#endif
