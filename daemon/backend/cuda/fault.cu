/*
 * The fault-injection kernel of the CUDA backend (OP_TEST_FAULT, served only
 * when the daemon runs with --test-fault-injection).
 *
 * One thread writes through a null pointer. Address 0 is never device memory
 * nor a mapped host page, so the write is an illegal address: the launch
 * itself succeeds, and the next synchronization on the context reports
 * cudaErrorIllegalAddress, a sticky error after which every CUDA call of the
 * process fails. That is the real thing a buggy kernel does, so the daemon's
 * lost-device path (docs/cuda.md) runs exactly as it would in production.
 * The pointer is a kernel argument, so the compiler cannot see that it is
 * null and turn the store into something else.
 */
#include <cuda_runtime.h>

#include "daemon/backend/cuda/kernels.h"

namespace {

__global__ void fault_kernel(volatile unsigned *target) { *target = 0xdeadu; }

}  // namespace

extern "C" cudaError_t tfd_cuda_launch_fault(cudaStream_t stream) {
    fault_kernel<<<1, 1, 0, stream>>>(nullptr);
    return cudaGetLastError();
}
