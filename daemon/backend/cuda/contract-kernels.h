/*
 * The CUDA kernel of contraction passes (cuda/contract-kernels.cu): the
 * strided gather-reduce with conjugation that a plan's pass describes
 * (contract-plan.h), for what the backend's permute kernel and a device copy
 * do not cover: diagonals, labels summed out, conjugation. Like the other
 * launchers it only enqueues on `stream` and returns what the runtime
 * reported (cudaErrorInvalidValue for a pass or dtype it cannot serve,
 * before anything is enqueued). Private to daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CUDA_CONTRACT_KERNELS_H
#define TENFERRO_DAEMON_CUDA_CONTRACT_KERNELS_H

#include <cuda_runtime_api.h>

#include "daemon/backend/contract-plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[numel] (dense) = sum over the pass's reduced axes of (conj) src, as ps describes. */
cudaError_t tfd_cuda_launch_contract_pass(const tfd_contract_pass *ps, tf_dtype dtype,
                                          const void *src, void *dst, int sm_count,
                                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
