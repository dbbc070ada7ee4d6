/*
 * Internal declarations of the CPU backend.
 *
 * The CPU backend is split by concern: cpu/backend.c owns the device life
 * cycle (open, streams, memory, events) and builds the vtable, while each
 * cpu-*.c kernel file serves one family of operations. This header is the only
 * thing those files share: the family entry points the vtable points to (and
 * the fault injection and health of cpu/fault.c), and a
 * small helper that words the "dtype not served" failure the same way
 * everywhere. It is private to daemon/backend; nothing else includes it.
 */
#ifndef TENFERRO_DAEMON_CPU_KERNELS_H
#define TENFERRO_DAEMON_CPU_KERNELS_H

#include <stddef.h>
#include <stdio.h>

#include "daemon/backend/backend.h"

/* Elementwise add, sub, mul, div (cpu/elementwise.c). */
tf_status tfd_cpu_binary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len);
/* Elementwise neg, conj, abs, exp, log, sqrt (cpu/elementwise.c). */
tf_status tfd_cpu_unary(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                        size_t msg_len);
/* Scale and axpby with scalar coefficients (cpu/elementwise.c). */
tf_status tfd_cpu_axpby(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                        size_t msg_len);
/* Permute, reshape, copy and slice (cpu/layout.c). */
tf_status tfd_cpu_permute(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                          size_t msg_len);
/* Sum, max and min over axes (cpu/reduce.c). */
tf_status tfd_cpu_reduce(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len);
/* Batched matrix product through OpenBLAS (cpu/matmul.c). */
tf_status tfd_cpu_matmul(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                         size_t msg_len);

/*
 * Fault injection: declares the device lost and returns TF_ERR_DEVICE
 * (cpu/fault.c); health reports the loss from then on.
 */
tf_status tfd_cpu_inject_fault(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                               size_t msg_len);
tf_status tfd_cpu_health(tfd_backend *be, char *msg, size_t msg_len);
/* Binary and unary contractions (OP_CONTRACT) through a cached plan and OpenBLAS (cpu/contract.c). */
tf_status tfd_cpu_contract(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                           size_t msg_len);
/*
 * The linear-algebra kinds OP_SVD .. OP_DIAGONAL through OpenBLAS's LAPACK
 * (cpu/linalg.c); a failure the numbers show (nan or inf, no convergence, a
 * singular or non-positive-definite matrix) is the call's typed status.
 */
tf_status tfd_cpu_linalg(tfd_backend *be, void *stream, const tfd_linalg_op *op, char *msg,
                         size_t msg_len);
/*
 * Workspace for a kernel running on `stream` (NULL: none), 64-byte aligned,
 * NULL when out of memory: the stream's own buffer (*kept = 1), kept between
 * calls and freed with the stream, while it is free and the request is at
 * most TFD_CPU_SCRATCH_KEPT bytes; else an allocation of its own. Every take
 * is given back, with its `kept`, on the same stream (cpu/backend.c).
 */
#define TFD_CPU_SCRATCH_KEPT ((size_t)64 << 20)
void *tfd_cpu_scratch_take(void *stream, size_t bytes, int *kept);
void tfd_cpu_scratch_give(void *stream, void *p, int kept);
/* The CPU backend's state behind be->impl (cpu/backend.c makes it at open). */
typedef struct tfd_cpu_impl {
    struct tfd_fftw_cache *fftw; /* the daemon-wide FFTW plans (cpu/fft-cache.c) */
} tfd_cpu_impl;

/* FFTs through FFTW (cpu/fft.c). */
tf_status tfd_cpu_fft(tfd_backend *be, void *stream, const tfd_op *op, char *msg,
                      size_t msg_len);
/* The backend's daemon-wide caches: the FFTW plans (cpu/fft.c). */
int tfd_cpu_caches(tfd_backend *be, tfd_cache_stats *out, int max);
/* Empties the plan caches (tenferroctl trim; cpu/fft.c). */
tf_status tfd_cpu_trim(tfd_backend *be, char *msg, size_t msg_len);

/* One wording for "this kernel has no loop for this dtype", so clients see consistent errors. */
static inline tf_status tfd_cpu_dtype_error(const tfd_op *op, tf_dtype dtype, char *msg,
                                            size_t msg_len) {
    snprintf(msg, msg_len, "cpu: %s is not served for dtype %s (%d)", tf__op_name(op->kind),
             tf_dtype_name(dtype), (int)dtype);
    return TF_ERR_DTYPE;
}

#endif
