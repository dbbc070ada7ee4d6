/*
 * The gather-reduce kernel of contraction passes on CUDA (contract-plan.h):
 * one thread per output element, over a grid-stride loop of 64-bit indices.
 * A thread derives its source offset from its output index (the kept axes,
 * outermost first, with their source strides), then sums the reduced axes
 * with the innermost one as the tight loop, and conjugates the sum when the
 * pass asks. Writes are coalesced (the output is dense); reads follow the
 * source strides, which for a diagonal or a reduction is the best a gather
 * can do. Sums of f32 and c64 accumulate in double, as on the CPU and in
 * the reduction kernels. Plain permutations never come here: the backend's
 * tiled permute kernel serves them (cuda/contract.c chooses).
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "daemon/backend/cuda/contract-kernels.h"

namespace {

constexpr int kBlock = 256;

/* A complex number laid out like C's `T complex` ({re, im}, aligned to its size). */
template <typename T>
struct alignas(2 * sizeof(T)) cpx {
    T re, im;
};

/* The geometry of one pass, passed by value to the kernel. */
struct pass_geom {
    int nk, nr, conj;
    int64_t numel, terms;
    int64_t kdim[TF_MAX_RANK], kstride[TF_MAX_RANK];
    int64_t rdim[TF_MAX_RANK], rstride[TF_MAX_RANK];
};

/* The accumulator of each element type and how an element enters it and leaves it. */
template <typename T>
struct acc_traits;

template <>
struct acc_traits<float> {
    using A = double;
    static __device__ __forceinline__ A zero() { return 0.0; }
    static __device__ __forceinline__ void add(A &a, float v) { a += (double)v; }
    static __device__ __forceinline__ float out(A a, int) { return (float)a; }
};

template <>
struct acc_traits<double> {
    using A = double;
    static __device__ __forceinline__ A zero() { return 0.0; }
    static __device__ __forceinline__ void add(A &a, double v) { a += v; }
    static __device__ __forceinline__ double out(A a, int) { return a; }
};

template <typename T>
struct complex_traits {
    using A = cpx<double>;
    static __device__ __forceinline__ A zero() { return {0.0, 0.0}; }
    static __device__ __forceinline__ void add(A &a, cpx<T> v) {
        a.re += (double)v.re;
        a.im += (double)v.im;
    }
    static __device__ __forceinline__ cpx<T> out(A a, int conj) {
        return {(T)a.re, (T)(conj ? -a.im : a.im)};
    }
};

template <>
struct acc_traits<cpx<float>> : complex_traits<float> {};
template <>
struct acc_traits<cpx<double>> : complex_traits<double> {};

/* One output element per thread: locate it in the source, sum its reduced axes, store. */
template <typename T>
__global__ void pass_kernel(pass_geom g, const T *__restrict__ src, T *__restrict__ dst) {
    using tr = acc_traits<T>;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < g.numel; o += step) {
        int64_t rest = o, off = 0;
        for (int j = g.nk - 1; j >= 0; j--) {
            off += (rest % g.kdim[j]) * g.kstride[j];
            rest /= g.kdim[j];
        }
        typename tr::A acc = tr::zero();
        if (g.nr == 0) {
            tr::add(acc, src[off]);
        } else {
            const int64_t rin = g.rdim[g.nr - 1], rs = g.rstride[g.nr - 1];
            for (int64_t t = 0; t < g.terms; t += rin) {
                int64_t r = t / rin, roff = 0;
                for (int q = g.nr - 2; q >= 0; q--) {
                    roff += (r % g.rdim[q]) * g.rstride[q];
                    r /= g.rdim[q];
                }
                const T *p = src + off + roff;
                for (int64_t q = 0; q < rin; q++) tr::add(acc, p[q * rs]);
            }
        }
        dst[o] = tr::out(acc, g.conj);
    }
}

template <typename T>
cudaError_t launch(const pass_geom &g, const void *src, void *dst, int sm, cudaStream_t st) {
    const int64_t sms = sm > 0 ? sm : 1;
    int64_t blocks = (g.numel + kBlock - 1) / kBlock;
    if (blocks > sms * 32) blocks = sms * 32;
    if (blocks < 1) blocks = 1;
    pass_kernel<T><<<(unsigned)blocks, kBlock, 0, st>>>(g, static_cast<const T *>(src),
                                                        static_cast<T *>(dst));
    return cudaGetLastError();
}

}  // namespace

extern "C" cudaError_t tfd_cuda_launch_contract_pass(const tfd_contract_pass *ps, tf_dtype dtype,
                                                     const void *src, void *dst, int sm_count,
                                                     cudaStream_t stream) {
    if (ps->n_keep < 0 || ps->n_keep > TF_MAX_RANK || ps->n_red < 0 || ps->n_red > TF_MAX_RANK ||
        ps->numel < 1 || ps->terms < 1)
        return cudaErrorInvalidValue;
    pass_geom g{};
    g.nk = ps->n_keep;
    g.nr = ps->n_red;
    g.conj = ps->conj;
    g.numel = ps->numel;
    g.terms = ps->terms;
    for (int j = 0; j < g.nk; j++) {
        if (ps->keep_dim[j] < 1) return cudaErrorInvalidValue;
        g.kdim[j] = ps->keep_dim[j];
        g.kstride[j] = ps->keep_stride[j];
    }
    for (int j = 0; j < g.nr; j++) {
        if (ps->red_dim[j] < 1) return cudaErrorInvalidValue;
        g.rdim[j] = ps->red_dim[j];
        g.rstride[j] = ps->red_stride[j];
    }
    switch (dtype) {
    case TF_F32: return launch<float>(g, src, dst, sm_count, stream);
    case TF_F64: return launch<double>(g, src, dst, sm_count, stream);
    case TF_C64: return launch<cpx<float>>(g, src, dst, sm_count, stream);
    case TF_C128: return launch<cpx<double>>(g, src, dst, sm_count, stream);
    }
    return cudaErrorInvalidValue;
}
