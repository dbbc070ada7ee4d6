/*
 * Launchers of the CUDA backend's own kernels (cuda/kernels.cu; the
 * fault-injection kernel in cuda/fault.cu).
 *
 * The C side (cuda/backend.c) validates every descriptor, selects the device
 * for the calling thread and maps errors to tf_status; these launchers only
 * pick the kernel for (operation, dtype), size the grid, enqueue on `stream`
 * and return what the runtime reported for the launch (cudaGetLastError after
 * the last launch). A launcher never blocks the host and never aborts: an
 * operation or dtype it does not serve, or a descriptor that still disagrees
 * with itself, returns cudaErrorInvalidValue before anything is enqueued.
 * `sm_count` is the device's multiprocessor count, used to size grid-stride
 * grids. Private to daemon/backend.
 */
#ifndef TENFERRO_DAEMON_CUDA_KERNELS_H
#define TENFERRO_DAEMON_CUDA_KERNELS_H

#include <cuda_runtime_api.h>

#include "daemon/backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* add, sub, mul, div of two same-shape tensors (f32, f64, c64, c128). */
cudaError_t tfd_cuda_launch_binary(const tfd_op *op, int sm_count, cudaStream_t stream);

/* neg, conj, abs, exp, log, sqrt; abs of a complex dtype writes the real dtype. */
cudaError_t tfd_cuda_launch_unary(const tfd_op *op, int sm_count, cudaStream_t stream);

/* scale (alpha*x) and axpby (alpha*x + beta*y), computed in double (complex) precision. */
cudaError_t tfd_cuda_launch_axpby(const tfd_op *op, int sm_count, cudaStream_t stream);

/* A general permutation of rank <= TF_MAX_RANK (an identity one is a device copy). */
cudaError_t tfd_cuda_launch_permute(const tfd_op *op, int sm_count, cudaStream_t stream);

/*
 * sum (every dtype), max and min (real dtypes) over op->params axes (none:
 * all). May take transient stream-ordered scratch from the device pool; when
 * none is left it falls back to a kernel that needs none.
 */
cudaError_t tfd_cuda_launch_reduce(const tfd_op *op, int sm_count, cudaStream_t stream);

/*
 * Fault injection (tests only): one thread writes to an illegal address.
 * Returns the launch's result; the fault itself surfaces at the next
 * synchronization and poisons the context.
 */
cudaError_t tfd_cuda_launch_fault(cudaStream_t stream);

/*
 * Multiplies n real components (a complex tensor has two per element) of
 * data in place by s, in double or single precision: the normalization of
 * an FFT (cuda/fft.c).
 */
cudaError_t tfd_cuda_launch_fft_scale(void *data, int64_t n, int is_double, double s, int sm_count,
                                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
