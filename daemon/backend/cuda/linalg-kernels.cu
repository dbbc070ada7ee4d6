/*
 * Device kernels of the CUDA backend's linear algebra (cuda/linalg.c runs the
 * cuSOLVER calls between them), and the strided gather of OP_SLICE.
 *
 * Around each factorization: a check for nan and inf that flags each matrix
 * (the flagged ones go to the solver as identities, so it never meets them),
 * the copy (or transposition) of the input into the solver's scratch, and
 * after it the kernels that turn the solver's col-major factors into the
 * row-major outputs: the gauge (the phase of each singular or eigenvector,
 * docs/linalg.md), the truncation (the kept rank of common/truncation.h,
 * computed here by one thread per matrix, so both backends give the same
 * rank from the same values), absorbing and renormalizing, triangles, the
 * determinant from the LU factors. The status of an operation is reduced on
 * the device into one word (its first failing matrix), and a failed
 * operation zeroes its outputs here, so nothing waits for the solver's info.
 *
 * Complex numbers are {re, im} pairs laid out like C's complex types. Every
 * kernel is a grid-stride loop over 64-bit indices, or one thread (or one
 * warp) per matrix or per vector.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "common/truncation.h"
#include "daemon/backend/cuda/linalg-kernels.h"

namespace {

constexpr int kBlock = 256;
constexpr int kWarp = 32;

template <typename R>
struct alignas(2 * sizeof(R)) cx {
    R re, im;
};

using c64 = cx<float>;
using c128 = cx<double>;

/* The real type of an element type, and the type products are accumulated in. */
template <typename T>
struct traits;
template <>
struct traits<float> {
    using R = float;
    using W = double;
};
template <>
struct traits<double> {
    using R = double;
    using W = double;
};
template <>
struct traits<c64> {
    using R = float;
    using W = c128;
};
template <>
struct traits<c128> {
    using R = double;
    using W = c128;
};

template <typename T>
__device__ __forceinline__ T zero_of();
template <>
__device__ __forceinline__ float zero_of<float>() { return 0.0f; }
template <>
__device__ __forceinline__ double zero_of<double>() { return 0.0; }
template <>
__device__ __forceinline__ c64 zero_of<c64>() { return {0.0f, 0.0f}; }
template <>
__device__ __forceinline__ c128 zero_of<c128>() { return {0.0, 0.0}; }

template <typename T>
__device__ __forceinline__ T one_of();
template <>
__device__ __forceinline__ float one_of<float>() { return 1.0f; }
template <>
__device__ __forceinline__ double one_of<double>() { return 1.0; }
template <>
__device__ __forceinline__ c64 one_of<c64>() { return {1.0f, 0.0f}; }
template <>
__device__ __forceinline__ c128 one_of<c128>() { return {1.0, 0.0}; }

__device__ __forceinline__ float conjv(float x) { return x; }
__device__ __forceinline__ double conjv(double x) { return x; }
template <typename R>
__device__ __forceinline__ cx<R> conjv(cx<R> x) {
    return {x.re, -x.im};
}

__device__ __forceinline__ float mulv(float a, float b) { return a * b; }
__device__ __forceinline__ double mulv(double a, double b) { return a * b; }
template <typename R>
__device__ __forceinline__ cx<R> mulv(cx<R> a, cx<R> b) {
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

/* x times a real number. */
__device__ __forceinline__ float scalev(float x, float r) { return x * r; }
__device__ __forceinline__ double scalev(double x, double r) { return x * r; }
template <typename R>
__device__ __forceinline__ cx<R> scalev(cx<R> x, R r) {
    return {x.re * r, x.im * r};
}

/* |x| in the element's own precision (the gauge compares these exactly). */
__device__ __forceinline__ float absr(float x) { return fabsf(x); }
__device__ __forceinline__ double absr(double x) { return fabs(x); }
__device__ __forceinline__ float absr(c64 x) { return hypotf(x.re, x.im); }
__device__ __forceinline__ double absr(c128 x) { return hypot(x.re, x.im); }

/* |x| in double (norms). */
__device__ __forceinline__ double absd(float x) { return fabs((double)x); }
__device__ __forceinline__ double absd(double x) { return fabs(x); }
__device__ __forceinline__ double absd(c64 x) { return hypot((double)x.re, (double)x.im); }
__device__ __forceinline__ double absd(c128 x) { return hypot(x.re, x.im); }

__device__ __forceinline__ bool nonzero(float x) { return x != 0.0f; }
__device__ __forceinline__ bool nonzero(double x) { return x != 0.0; }
template <typename R>
__device__ __forceinline__ bool nonzero(cx<R> x) {
    return x.re != (R)0 || x.im != (R)0;
}

/* The NAN and INF bits of an element. */
__device__ __forceinline__ int bad_bits(double x) {
    return isnan(x) ? TFD_CUDA_LA_FLAG_NAN : isinf(x) ? TFD_CUDA_LA_FLAG_INF : 0;
}
__device__ __forceinline__ int bad_of(float x) { return bad_bits((double)x); }
__device__ __forceinline__ int bad_of(double x) { return bad_bits(x); }
template <typename R>
__device__ __forceinline__ int bad_of(cx<R> x) {
    return bad_bits((double)x.re) | bad_bits((double)x.im);
}

/* conj(x) / |x|: the phase that makes x real and positive; 1 for x = 0 (or nan). */
__device__ __forceinline__ float phase_of(float x) { return x < 0.0f ? -1.0f : 1.0f; }
__device__ __forceinline__ double phase_of(double x) { return x < 0.0 ? -1.0 : 1.0; }
template <typename R>
__device__ __forceinline__ cx<R> phase_of(cx<R> x) {
    const R a = absr(x);
    if (!(a > (R)0) || isinf(a)) return one_of<cx<R>>();
    return {x.re / a, -x.im / a};
}

/* A real value as an element (the exact magnitude a gauge leaves at its pivot). */
template <typename T>
__device__ __forceinline__ T from_real(typename traits<T>::R r);
template <>
__device__ __forceinline__ float from_real<float>(float r) { return r; }
template <>
__device__ __forceinline__ double from_real<double>(double r) { return r; }
template <>
__device__ __forceinline__ c64 from_real<c64>(float r) { return {r, 0.0f}; }
template <>
__device__ __forceinline__ c128 from_real<c128>(double r) { return {r, 0.0}; }

/* Widening and narrowing between an element type and its accumulation type. */
__device__ __forceinline__ double widen(float x) { return (double)x; }
__device__ __forceinline__ double widen(double x) { return x; }
__device__ __forceinline__ c128 widen(c64 x) { return {(double)x.re, (double)x.im}; }
__device__ __forceinline__ c128 widen(c128 x) { return x; }
template <typename T>
__device__ __forceinline__ T narrow(double x) {
    return (T)x;
}
template <typename T>
__device__ __forceinline__ T narrow(c128 x);
template <>
__device__ __forceinline__ c64 narrow<c64>(c128 x) {
    return {(float)x.re, (float)x.im};
}
template <>
__device__ __forceinline__ c128 narrow<c128>(c128 x) {
    return x;
}
__device__ __forceinline__ double addw(double a, double b) { return a + b; }
__device__ __forceinline__ c128 addw(c128 a, c128 b) { return {a.re + b.re, a.im + b.im}; }

unsigned grid_for(int64_t n, int sm_count, int per_block = kBlock) {
    int64_t blocks = (n + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * 16;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

/* One thread per matrix (or output) for short per-thread loops. */
unsigned grid_threads(int64_t n) {
    int64_t blocks = (n + kBlock - 1) / kBlock;
    if (blocks > 65535) blocks = 65535;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

/* Calls FN<T>(args) for the element type of dt. */
#define LA_DISPATCH(dt, FN, ...)                                                                   \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case TF_F32: return FN<float>(__VA_ARGS__);                                                \
        case TF_F64: return FN<double>(__VA_ARGS__);                                               \
        case TF_C64: return FN<c64>(__VA_ARGS__);                                                  \
        case TF_C128: return FN<c128>(__VA_ARGS__);                                                \
        default: return cudaErrorInvalidValue;                                                     \
        }                                                                                          \
    } while (0)

/* Calls FN<R>(args) for a real dtype. */
#define LA_DISPATCH_REAL(dt, FN, ...)                                                              \
    do {                                                                                           \
        switch (dt) {                                                                              \
        case TF_F32: return FN<float>(__VA_ARGS__);                                                \
        case TF_F64: return FN<double>(__VA_ARGS__);                                               \
        default: return cudaErrorInvalidValue;                                                     \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------ input checks */

template <typename T>
__global__ void check_kernel(const T *__restrict__ a, int64_t b, int64_t m, int64_t n, int part,
                             int *flags) {
    const int64_t mn = m * n, total = b * mn;
    GRID_STRIDE(idx, total) {
        const int64_t mat = idx / mn;
        if (part != TFD_CUDA_LA_ALL) {
            const int64_t r = idx - mat * mn, i = r / n, j = r - i * n;
            if ((part == TFD_CUDA_LA_LOWER && j > i) || (part == TFD_CUDA_LA_UPPER && j < i))
                continue;
        }
        const int code = bad_of(a[idx]);
        if (code) {
            const volatile int *f = flags + mat;
            if ((*f & code) != code) atomicOr(flags + mat, code);
        }
    }
}

template <typename T>
cudaError_t check_typed(const void *a, int64_t b, int64_t m, int64_t n, int part, int *flags,
                        int sm, cudaStream_t st) {
    check_kernel<T><<<grid_for(b * m * n, sm), kBlock, 0, st>>>(static_cast<const T *>(a), b, m,
                                                                 n, part, flags);
    return cudaGetLastError();
}

template <typename T>
__global__ void prepare_kernel(const T *__restrict__ in, T *__restrict__ out, int64_t b,
                               int64_t rows, int64_t cols, int transpose, int64_t out_stride,
                               const int *flags) {
    const int64_t rc = rows * cols, total = b * rc;
    GRID_STRIDE(idx, total) {
        const int64_t mat = idx / rc, r = idx - mat * rc;
        int64_t i, j;
        if (transpose) {
            j = r / rows;
            i = r - j * rows;
        } else {
            i = r / cols;
            j = r - i * cols;
        }
        T v;
        if (flags != nullptr && flags[mat] != 0)
            v = i == j ? one_of<T>() : zero_of<T>();
        else
            v = in[mat * rc + i * cols + j];
        out[mat * out_stride + r] = v;
    }
}

template <typename T>
cudaError_t prepare_typed(const void *in, void *out, int64_t b, int64_t rows, int64_t cols,
                          int transpose, int64_t out_stride, const int *flags, int sm,
                          cudaStream_t st) {
    prepare_kernel<T><<<grid_for(b * rows * cols, sm), kBlock, 0, st>>>(
        static_cast<const T *>(in), static_cast<T *>(out), b, rows, cols, transpose, out_stride,
        flags);
    return cudaGetLastError();
}

/* -------------------------------------------------------------- status */

/*
 * One block: each thread finds its first failing matrix, then the block
 * keeps the smallest. A flagged matrix comes before any solver failure (nan
 * and inf are checked before a solver runs), so flags rank first.
 */
__global__ void status_kernel(const int *flags, const int *info, int64_t b, int positive_code,
                              tfd_cuda_la_status *out) {
    __shared__ int64_t s_index[kBlock];
    __shared__ int s_code[kBlock], s_detail[kBlock];
    int64_t best = INT64_MAX;
    int code = 0, detail = 0;
    for (int64_t i = threadIdx.x; flags != nullptr && i < b; i += blockDim.x)
        if (flags[i] != 0) {
            best = i;
            code = TFD_CUDA_LA_NOT_FINITE;
            break;
        }
    /* Any flag at all: the block's smallest flagged index wins; else the first solver failure. */
    __shared__ int any_flag;
    if (threadIdx.x == 0) any_flag = 0;
    __syncthreads();
    if (code != 0) atomicOr(&any_flag, 1);
    __syncthreads();
    for (int64_t i = threadIdx.x; !any_flag && i < b; i += blockDim.x) {
        int c = 0, d = 0;
        if (info != nullptr) {
            const int v = info[i];
            if (v < 0) {
                c = TFD_CUDA_LA_BAD_ARGUMENT;
                d = -v;
            } else if (v > 0 && positive_code != TFD_CUDA_LA_OK) {
                c = positive_code;
                d = v;
            }
        }
        if (c != 0) {
            best = i;
            code = c;
            detail = d;
            break;
        }
    }
    s_index[threadIdx.x] = best;
    s_code[threadIdx.x] = code;
    s_detail[threadIdx.x] = detail;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half && s_index[threadIdx.x + half] < s_index[threadIdx.x]) {
            s_index[threadIdx.x] = s_index[threadIdx.x + half];
            s_code[threadIdx.x] = s_code[threadIdx.x + half];
            s_detail[threadIdx.x] = s_detail[threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const int found = s_index[0] != INT64_MAX;
        out->code = found ? s_code[0] : TFD_CUDA_LA_OK;
        out->detail = found ? s_detail[0] : 0;
        out->index = found ? s_index[0] : -1;
    }
}

struct zero_set {
    uint32_t *p[4];
    int64_t words[4];
    int n;
};

__global__ void zero_failed_kernel(const tfd_cuda_la_status *status, zero_set z) {
    if (status->code == TFD_CUDA_LA_OK) return;
    for (int t = 0; t < z.n; t++) {
        uint32_t *p = z.p[t];
        GRID_STRIDE(w, z.words[t]) p[w] = 0u;
    }
}

/* ------------------------------------------------------------------- SVD */

/* The solver's factors read as A's U (m x k...) and Vh, whichever way it ran. */
template <typename T>
struct svd_view {
    const T *u;
    int64_t ldu, us;
    const T *v;
    int64_t ldv, vs;
    int vh, tr;

    /* The solver's V[r, c] (its right singular vectors), from V or from V^H. */
    __device__ __forceinline__ T vx(int64_t mat, int64_t r, int64_t c) const {
        return vh ? conjv(v[mat * vs + c + r * ldv]) : v[mat * vs + r + c * ldv];
    }
    /* A's U[i, j]: X = A gives it directly, X = A^T as conj(V_X[i, j]). */
    __device__ __forceinline__ T ua(int64_t mat, int64_t i, int64_t j) const {
        return tr ? u[mat * us + i + j * ldu] : conjv(vx(mat, i, j));
    }
    /* A's Vh[j, l]: conj(V_X[l, j]) for X = A, U_X[l, j] for X = A^T. */
    __device__ __forceinline__ T vha(int64_t mat, int64_t j, int64_t l) const {
        return tr ? conjv(vx(mat, l, j)) : u[mat * us + l + j * ldu];
    }
};

template <typename T>
svd_view<T> view_of(const tfd_cuda_svd_geom *g) {
    svd_view<T> w;
    w.u = static_cast<const T *>(g->u);
    w.ldu = g->ldu;
    w.us = g->u_stride;
    w.v = static_cast<const T *>(g->v);
    w.ldv = g->ldv;
    w.vs = g->v_stride;
    w.vh = g->v_is_vh;
    w.tr = g->transposed;
    return w;
}

/* Warp-wide first index of the largest |x|: larger value wins, equal ones the smaller index. */
template <typename R>
__device__ __forceinline__ void warp_argmax(R &best, int64_t &at) {
    for (int off = kWarp / 2; off > 0; off /= 2) {
        const R ob = __shfl_down_sync(0xffffffffu, best, off);
        const long long oi = __shfl_down_sync(0xffffffffu, (long long)at, off);
        if (oi >= 0 && (at < 0 || ob > best || (ob == best && oi < at))) {
            best = ob;
            at = oi;
        }
    }
}

/* One warp per vector: U's columns j < r1, then Vh's rows r1 .. r2 (full, n > m). */
template <typename T>
__global__ void svd_phase_kernel(svd_view<T> w, int64_t b, int64_t m, int64_t n, int64_t r1,
                                 int64_t r2, T *pu, T *pv, int64_t *pui, int64_t *pvi) {
    using R = typename traits<T>::R;
    const int64_t nv = r1 + (r2 > r1 ? r2 - r1 : 0), total = b * nv;
    const int lane = (int)(threadIdx.x & (kWarp - 1));
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) / kWarp;
    for (int64_t wi = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp; wi < total;
         wi += step) {
        const int64_t mat = wi / nv, j = wi - mat * nv;
        const bool col = j < r1;
        const int64_t len = col ? m : n;
        R best = (R)-1;
        int64_t at = -1;
        for (int64_t t = lane; t < len; t += kWarp) {
            const R a = absr(col ? w.ua(mat, t, j) : w.vha(mat, j, t));
            if (a > best) {
                best = a;
                at = t;
            }
        }
        warp_argmax(best, at);
        if (lane == 0) {
            const T x = at < 0 ? zero_of<T>() : col ? w.ua(mat, at, j) : w.vha(mat, j, at);
            const T p = phase_of(x);
            if (col) {
                pu[mat * r1 + j] = p;
                pui[mat * r1 + j] = at;
                if (j < r2) {
                    pv[mat * r2 + j] = conjv(p);
                    pvi[mat * r2 + j] = -1;
                }
            } else {
                pv[mat * r2 + j] = p;
                pvi[mat * r2 + j] = at;
            }
        }
    }
}

template <typename T>
cudaError_t svd_phase_typed(const tfd_cuda_svd_geom *g, void *pu, void *pv, int64_t *pui,
                            int64_t *pvi, int sm, cudaStream_t st) {
    const int64_t nv = g->r1 + (g->r2 > g->r1 ? g->r2 - g->r1 : 0);
    if (g->b * nv == 0) return cudaSuccess;
    svd_phase_kernel<T><<<grid_for(g->b * nv * kWarp, sm), kBlock, 0, st>>>(
        view_of<T>(g), g->b, g->m, g->n, g->r1, g->r2, static_cast<T *>(pu),
        static_cast<T *>(pv), pui, pvi);
    return cudaGetLastError();
}

TF__DEFINE_KEPT_RANK(la_kept_rank_f, float)
TF__DEFINE_KEPT_RANK(la_kept_rank_d, double)

__device__ __forceinline__ int64_t kept_rank(const float *s, int64_t k, int64_t bound,
                                             const tf__truncation *t, double *d, double *tot) {
    return la_kept_rank_f(s, k, bound, t, TF__DEGENERATE_TOL_F32, d, tot);
}
__device__ __forceinline__ int64_t kept_rank(const double *s, int64_t k, int64_t bound,
                                             const tf__truncation *t, double *d, double *tot) {
    return la_kept_rank_d(s, k, bound, t, TF__DEGENERATE_TOL_F64, d, tot);
}

template <typename R>
__global__ void truncate_kernel(const R *vals, int64_t ld, int64_t k, int64_t b, int64_t bound,
                                tf__truncation t, int renormalize, int64_t *kept, double *factor,
                                double *report) {
    GRID_STRIDE(mat, b) {
        double discarded = 0, total = 0;
        const int64_t r = kept_rank(vals + mat * ld, k, bound, &t, &discarded, &total);
        kept[mat] = r;
        double f = 1.0;
        if (renormalize && total - discarded > 0) f = sqrt(total / (total - discarded));
        factor[mat] = f;
        report[mat * TF__REPORT_ENTRIES + 0] = (double)r;
        report[mat * TF__REPORT_ENTRIES + 1] = discarded;
        report[mat * TF__REPORT_ENTRIES + 2] = total > 0 ? discarded / total : 0.0;
    }
}

template <typename R>
cudaError_t truncate_typed(const void *vals, int64_t ld, int64_t k, int64_t b, int64_t bound,
                           const tf__truncation *t, int renormalize, int64_t *kept,
                           double *factor, double *report, cudaStream_t st) {
    truncate_kernel<R><<<grid_threads(b), kBlock, 0, st>>>(static_cast<const R *>(vals), ld, k,
                                                           b, bound, *t, renormalize, kept,
                                                           factor, report);
    return cudaGetLastError();
}

/* The (renormalized) value j of matrix mat as S holds it, and whether it is kept. */
template <typename R>
__device__ __forceinline__ R kept_value(const R *s, int64_t mat, int64_t k, int64_t j,
                                        const int64_t *kept, const double *factor, bool *keep) {
    const int64_t r = kept ? kept[mat] : k;
    *keep = j < r;
    if (!*keep) return (R)0;
    if (factor == nullptr) return s[mat * k + j];
    return (R)((double)s[mat * k + j] * factor[mat]);
}

template <typename R>
__global__ void svd_store_s_kernel(const R *s, int64_t b, int64_t k, int64_t rank,
                                   const int64_t *kept, const double *factor, R *S) {
    GRID_STRIDE(idx, b * rank) {
        const int64_t mat = idx / rank, j = idx - mat * rank;
        bool keep;
        S[idx] = kept_value(s, mat, k, j, kept, factor, &keep);
    }
}

/* The multiplier of vector j of a factor: 0 past the kept rank, the absorbed value, or 1. */
template <typename R>
__device__ __forceinline__ R factor_scale(const R *s, int64_t mat, int64_t k, int64_t j,
                                          const int64_t *kept, const double *factor, int absorb,
                                          int side, bool *scaled) {
    *scaled = false;
    if (j >= k) return (R)1;
    bool keep;
    const R v = kept_value(s, mat, k, j, kept, factor, &keep);
    if (!keep) {
        *scaled = true;
        return (R)0;
    }
    if (absorb == side) {
        *scaled = true;
        return v;
    }
    if (absorb == TF__ABSORB_BOTH) {
        *scaled = true;
        return (R)sqrt((double)v);
    }
    return (R)1;
}

template <typename T>
__global__ void svd_store_u_kernel(svd_view<T> w, const typename traits<T>::R *s, int64_t b,
                                   int64_t m, int64_t k, int64_t r1, const T *pu,
                                   const int64_t *pui, const int64_t *kept, const double *factor,
                                   int absorb, T *U) {
    using R = typename traits<T>::R;
    GRID_STRIDE(idx, b * m * r1) {
        const int64_t j = idx % r1, rest = idx / r1, i = rest % m, mat = rest / m;
        const T u = w.ua(mat, i, j);
        /* The pivot becomes its magnitude exactly, where the product could keep a rounding. */
        T x = i == pui[mat * r1 + j] ? from_real<T>(absr(u)) : mulv(u, pu[mat * r1 + j]);
        bool scaled;
        const R f = factor_scale(s, mat, k, j, kept, factor, absorb, TF__ABSORB_LEFT, &scaled);
        U[idx] = scaled ? scalev(x, f) : x;
    }
}

template <typename T>
__global__ void svd_store_vh_kernel(svd_view<T> w, const typename traits<T>::R *s, int64_t b,
                                    int64_t n, int64_t k, int64_t r2, const T *pv,
                                    const int64_t *pvi, const int64_t *kept, const double *factor,
                                    int absorb, T *Vh) {
    using R = typename traits<T>::R;
    GRID_STRIDE(idx, b * r2 * n) {
        const int64_t l = idx % n, rest = idx / n, j = rest % r2, mat = rest / r2;
        const T v = w.vha(mat, j, l);
        T x = l == pvi[mat * r2 + j] ? from_real<T>(absr(v)) : mulv(v, pv[mat * r2 + j]);
        bool scaled;
        const R f = factor_scale(s, mat, k, j, kept, factor, absorb, TF__ABSORB_RIGHT, &scaled);
        Vh[idx] = scaled ? scalev(x, f) : x;
    }
}

template <typename T>
cudaError_t svd_store_typed(const tfd_cuda_svd_geom *g, const void *pu, const void *pv,
                            const int64_t *pui, const int64_t *pvi, const int64_t *kept,
                            const double *factor, int absorb, int64_t rank, void *S, void *U,
                            void *Vh, int sm, cudaStream_t st) {
    using R = typename traits<T>::R;
    const R *s = static_cast<const R *>(g->s);
    svd_store_s_kernel<R><<<grid_for(g->b * rank, sm), kBlock, 0, st>>>(
        s, g->b, g->k, rank, kept, factor, static_cast<R *>(S));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || U == nullptr || Vh == nullptr) return e;
    const svd_view<T> w = view_of<T>(g);
    svd_store_u_kernel<T><<<grid_for(g->b * g->m * g->r1, sm), kBlock, 0, st>>>(
        w, s, g->b, g->m, g->k, g->r1, static_cast<const T *>(pu), pui, kept, factor, absorb,
        static_cast<T *>(U));
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    svd_store_vh_kernel<T><<<grid_for(g->b * g->r2 * g->n, sm), kBlock, 0, st>>>(
        w, s, g->b, g->n, g->k, g->r2, static_cast<const T *>(pv), pvi, kept, factor, absorb,
        static_cast<T *>(Vh));
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ eigh */

/*
 * |w| is largest at one end of an ascending w, so the order by |w|
 * descending is a merge from both ends; a run of equal values at the upper
 * end is taken in index order, as a stable sort would.
 */
template <typename R>
__global__ void eigh_order_kernel(const R *w, int64_t b, int64_t n, int32_t *perm, R *absw) {
    GRID_STRIDE(mat, b) {
        const R *x = w + mat * n;
        int32_t *p = perm + mat * n;
        R *a = absw + mat * n;
        int64_t lo = 0, hi = n - 1, t = 0;
        while (lo <= hi) {
            const R alo = fabs(x[lo]), ahi = fabs(x[hi]);
            if (ahi > alo || (ahi == alo && x[hi] > x[lo])) {
                int64_t h0 = hi;
                while (h0 > lo && x[h0 - 1] == x[hi]) h0--;
                for (int64_t i = h0; i <= hi; i++) {
                    p[t] = (int32_t)i;
                    a[t++] = fabs(x[i]);
                }
                hi = h0 - 1;
            } else {
                p[t] = (int32_t)lo;
                a[t++] = alo;
                lo++;
            }
        }
    }
}

template <typename R>
cudaError_t eigh_order_typed(const void *w, int64_t b, int64_t n, int32_t *perm, void *absw,
                             cudaStream_t st) {
    eigh_order_kernel<R><<<grid_threads(b), kBlock, 0, st>>>(static_cast<const R *>(w), b, n,
                                                             perm, static_cast<R *>(absw));
    return cudaGetLastError();
}

/* One warp per eigenvector: A's vector j is conj of the solver's column j. */
template <typename T>
__global__ void eigh_phase_kernel(const T *v, int64_t b, int64_t n, T *ph, int64_t *piv) {
    using R = typename traits<T>::R;
    const int64_t total = b * n;
    const int lane = (int)(threadIdx.x & (kWarp - 1));
    const int64_t step = ((int64_t)gridDim.x * blockDim.x) / kWarp;
    for (int64_t wi = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / kWarp; wi < total;
         wi += step) {
        const int64_t mat = wi / n, j = wi - mat * n;
        const T *col = v + mat * n * n + j * n;
        R best = (R)-1;
        int64_t at = -1;
        for (int64_t t = lane; t < n; t += kWarp) {
            const R a = absr(col[t]);
            if (a > best) {
                best = a;
                at = t;
            }
        }
        warp_argmax(best, at);
        if (lane == 0) {
            ph[wi] = phase_of(at < 0 ? zero_of<T>() : conjv(col[at]));
            piv[wi] = at;
        }
    }
}

template <typename T>
cudaError_t eigh_phase_typed(const void *v, int64_t b, int64_t n, void *ph, int64_t *piv, int sm,
                             cudaStream_t st) {
    eigh_phase_kernel<T><<<grid_for(b * n * kWarp, sm), kBlock, 0, st>>>(
        static_cast<const T *>(v), b, n, static_cast<T *>(ph), piv);
    return cudaGetLastError();
}

template <typename R>
__global__ void eigh_store_w_kernel(const R *w, const int32_t *perm, const int64_t *kept,
                                    int64_t b, int64_t n, int64_t rank, R *W) {
    GRID_STRIDE(idx, b * rank) {
        const int64_t mat = idx / rank, j = idx - mat * rank;
        const int64_t r = kept ? kept[mat] : n;
        const int64_t src = perm ? (int64_t)perm[mat * n + j] : j;
        W[idx] = j < r ? w[mat * n + src] : (R)0;
    }
}

template <typename T>
__global__ void eigh_store_v_kernel(const T *v, const T *ph, const int64_t *piv,
                                    const int32_t *perm, const int64_t *kept, int64_t b, int64_t n,
                                    int64_t rank, T *V) {
    GRID_STRIDE(idx, b * n * rank) {
        const int64_t j = idx % rank, rest = idx / rank, i = rest % n, mat = rest / n;
        const int64_t r = kept ? kept[mat] : n;
        if (j >= r) {
            V[idx] = zero_of<T>();
            continue;
        }
        const int64_t src = perm ? (int64_t)perm[mat * n + j] : j;
        const T x = conjv(v[mat * n * n + i + src * n]);
        V[idx] = i == piv[mat * n + src] ? from_real<T>(absr(x)) : mulv(x, ph[mat * n + src]);
    }
}

template <typename T>
cudaError_t eigh_store_typed(const void *w, const void *v, const void *ph, const int64_t *piv,
                             const int32_t *perm, const int64_t *kept, int64_t b, int64_t n,
                             int64_t rank, void *W, void *V, int sm, cudaStream_t st) {
    using R = typename traits<T>::R;
    eigh_store_w_kernel<R><<<grid_for(b * rank, sm), kBlock, 0, st>>>(
        static_cast<const R *>(w), perm, kept, b, n, rank, static_cast<R *>(W));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || V == nullptr) return e;
    eigh_store_v_kernel<T><<<grid_for(b * n * rank, sm), kBlock, 0, st>>>(
        static_cast<const T *>(v), static_cast<const T *>(ph), piv, perm, kept, b, n, rank,
        static_cast<T *>(V));
    return cudaGetLastError();
}

/* -------------------------------------------------------------------- QR */

template <typename T>
__global__ void qr_phase_kernel(const T *a, int64_t b, int64_t m, int64_t k, int64_t stride,
                                T *ph) {
    GRID_STRIDE(idx, b * k) {
        const int64_t mat = idx / k, j = idx - mat * k;
        ph[idx] = phase_of(a[mat * stride + j + j * m]);
    }
}

template <typename T>
cudaError_t qr_phase_typed(const void *a, int64_t b, int64_t m, int64_t k, int64_t stride,
                           void *ph, int sm, cudaStream_t st) {
    qr_phase_kernel<T><<<grid_for(b * k, sm), kBlock, 0, st>>>(static_cast<const T *>(a), b, m,
                                                               k, stride, static_cast<T *>(ph));
    return cudaGetLastError();
}

template <typename T>
__global__ void qr_store_r_kernel(const T *a, const T *ph, int64_t b, int64_t m, int64_t n,
                                  int64_t k, int64_t rows, int64_t stride, T *R) {
    GRID_STRIDE(idx, b * rows * n) {
        const int64_t l = idx % n, rest = idx / n, j = rest % rows, mat = rest / rows;
        const T x = a[mat * stride + j + l * m];
        if (j > l || j >= k)
            R[idx] = zero_of<T>();
        else if (j == l) /* the diagonal becomes its magnitude exactly */
            R[idx] = from_real<T>(absr(x));
        else
            R[idx] = mulv(x, ph[mat * k + j]);
    }
}

template <typename T>
cudaError_t qr_store_r_typed(const void *a, const void *ph, int64_t b, int64_t m, int64_t n,
                             int64_t k, int64_t rows, int64_t stride, void *R, int sm,
                             cudaStream_t st) {
    qr_store_r_kernel<T><<<grid_for(b * rows * n, sm), kBlock, 0, st>>>(
        static_cast<const T *>(a), static_cast<const T *>(ph), b, m, n, k, rows, stride,
        static_cast<T *>(R));
    return cudaGetLastError();
}

template <typename T>
__global__ void qr_store_q_kernel(const T *q, const T *ph, int64_t b, int64_t m, int64_t cols,
                                  int64_t k, int64_t stride, T *Q) {
    GRID_STRIDE(idx, b * m * cols) {
        const int64_t j = idx % cols, rest = idx / cols, i = rest % m, mat = rest / m;
        const T x = q[mat * stride + i + j * m];
        Q[idx] = j < k ? mulv(x, conjv(ph[mat * k + j])) : x;
    }
}

template <typename T>
cudaError_t qr_store_q_typed(const void *q, const void *ph, int64_t b, int64_t m, int64_t cols,
                             int64_t k, int64_t stride, void *Q, int sm, cudaStream_t st) {
    qr_store_q_kernel<T><<<grid_for(b * m * cols, sm), kBlock, 0, st>>>(
        static_cast<const T *>(q), static_cast<const T *>(ph), b, m, cols, k, stride,
        static_cast<T *>(Q));
    return cudaGetLastError();
}

/*
 * Q from the reflectors, one block per matrix and one thread per column c:
 * applying H(j) = I - tau_j v_j v_j^H from the left changes each column on
 * its own (w = v_j^H q_c, q_c -= tau_j v_j w), so the threads never wait
 * for one another. Backward accumulation as orgqr: q_c starts as e_c, and
 * H(j) for j > c leaves e_c alone (v_j is zero above row j), so column c
 * meets H(min(c, k-1)) .. H(0) only. q_c lives in the output (row-major:
 * the threads of a warp touch consecutive addresses); v_j is read by every
 * thread alike.
 */
__device__ __forceinline__ double subw(double a, double b) { return a - b; }
__device__ __forceinline__ c128 subw(c128 a, c128 b) { return {a.re - b.re, a.im - b.im}; }

template <typename T>
__global__ void qr_form_q_kernel(const T *a, const T *tau, const T *ph, int64_t b, int64_t m,
                                 int64_t k, int64_t cols, int64_t stride, T *Q) {
    using W = typename traits<T>::W;
    for (int64_t mat = blockIdx.x; mat < b; mat += gridDim.x) {
        const T *am = a + mat * stride;
        const T *tm = tau + mat * k;
        T *q = Q + mat * m * cols;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            for (int64_t r = 0; r < m; r++) q[r * cols + c] = r == c ? one_of<T>() : zero_of<T>();
            for (int64_t j = c < k ? c : k - 1; j >= 0; j--) {
                const T *v = am + j * m; /* v[j] is 1, v[r] for r > j below the diagonal */
                W w = widen(q[j * cols + c]);
                for (int64_t r = j + 1; r < m; r++)
                    w = addw(w, mulv(widen(conjv(v[r])), widen(q[r * cols + c])));
                const W tw = mulv(widen(tm[j]), w);
                q[j * cols + c] = narrow<T>(subw(widen(q[j * cols + c]), tw));
                for (int64_t r = j + 1; r < m; r++)
                    q[r * cols + c] =
                        narrow<T>(subw(widen(q[r * cols + c]), mulv(widen(v[r]), tw)));
            }
            if (c < k) {
                const T p = conjv(ph[mat * k + c]);
                for (int64_t r = 0; r < m; r++) q[r * cols + c] = mulv(q[r * cols + c], p);
            }
        }
    }
}

template <typename T>
cudaError_t qr_form_q_typed(const void *a, const void *tau, const void *ph, int64_t b, int64_t m,
                            int64_t k, int64_t cols, int64_t stride, void *Q, int sm,
                            cudaStream_t st) {
    int64_t threads = (cols + kWarp - 1) / kWarp * kWarp;
    if (threads > kBlock) threads = kBlock;
    int64_t blocks = b;
    const int64_t cap = (int64_t)(sm > 0 ? sm : 1) * 16;
    if (blocks > cap) blocks = cap;
    if (blocks > 65535) blocks = 65535;
    qr_form_q_kernel<T><<<(unsigned)blocks, (unsigned)threads, 0, st>>>(
        static_cast<const T *>(a), static_cast<const T *>(tau), static_cast<const T *>(ph), b, m,
        k, cols, stride, static_cast<T *>(Q));
    return cudaGetLastError();
}

__global__ void pointers_kernel(void **out, char *base, int64_t b, int64_t stride) {
    GRID_STRIDE(i, b) out[i] = base + i * stride;
}

__global__ void widen_pivots_kernel(const int *in, int64_t *out, int64_t count) {
    GRID_STRIDE(i, count) out[i] = in[i];
}

/* ------------------------------------------------- triangles and identity */

template <typename T>
__global__ void triangle_kernel(T *a, int64_t b, int64_t n, int keep_lower) {
    GRID_STRIDE(idx, b * n * n) {
        const int64_t j = idx % n, i = (idx / n) % n;
        if (keep_lower ? j > i : j < i) a[idx] = zero_of<T>();
    }
}

template <typename T>
cudaError_t triangle_typed(void *a, int64_t b, int64_t n, int keep_lower, int sm,
                           cudaStream_t st) {
    triangle_kernel<T><<<grid_for(b * n * n, sm), kBlock, 0, st>>>(static_cast<T *>(a), b, n,
                                                                   keep_lower);
    return cudaGetLastError();
}

template <typename T>
__global__ void identity_kernel(T *a, int64_t b, int64_t n) {
    GRID_STRIDE(idx, b * n * n) {
        const int64_t j = idx % n, i = (idx / n) % n;
        a[idx] = i == j ? one_of<T>() : zero_of<T>();
    }
}

template <typename T>
cudaError_t identity_typed(void *a, int64_t b, int64_t n, int sm, cudaStream_t st) {
    identity_kernel<T><<<grid_for(b * n * n, sm), kBlock, 0, st>>>(static_cast<T *>(a), b, n);
    return cudaGetLastError();
}

/* ---------------------------------------------------- det and slogdet */

__device__ __forceinline__ double unit_mul(double a, double d, double ad) { return a * (d / ad); }
__device__ __forceinline__ c128 unit_mul(c128 a, c128 d, double ad) {
    return mulv(a, c128{d.re / ad, d.im / ad});
}
__device__ __forceinline__ double unit_norm(double a) { return a; }
__device__ __forceinline__ c128 unit_norm(c128 a) {
    const double r = hypot(a.re, a.im);
    return r > 0 ? c128{a.re / r, a.im / r} : a;
}
__device__ __forceinline__ double wide_one(double, double s) { return s; }
__device__ __forceinline__ c128 wide_one(c128, double s) { return {s, 0.0}; }

template <typename T>
__global__ void det_kernel(const T *lu, const int64_t *ipiv, int64_t b, int64_t n, T *det,
                           T *sign, typename traits<T>::R *logabs) {
    using W = typename traits<T>::W;
    using R = typename traits<T>::R;
    GRID_STRIDE(mat, b) {
        const T *a = lu + mat * n * n;
        const int64_t *p = ipiv + mat * n;
        int odd = 0;
        for (int64_t i = 0; i < n; i++) odd ^= p[i] != i + 1;
        const double s0 = odd ? -1.0 : 1.0;
        if (det != nullptr) {
            W acc = wide_one(W{}, s0);
            for (int64_t i = 0; i < n; i++) acc = mulv(acc, widen(a[i + i * n]));
            det[mat] = narrow<T>(acc);
            continue;
        }
        W ph = wide_one(W{}, s0);
        double la = 0;
        bool singular = false;
        for (int64_t i = 0; i < n; i++) {
            const W d = widen(a[i + i * n]);
            const double ad = absd(a[i + i * n]);
            if (ad == 0) {
                singular = true;
                break;
            }
            la += log(ad);
            ph = unit_mul(ph, d, ad);
        }
        if (singular) {
            sign[mat] = zero_of<T>();
            logabs[mat] = (R)-INFINITY;
        } else {
            sign[mat] = narrow<T>(unit_norm(ph));
            logabs[mat] = (R)la;
        }
    }
}

template <typename T>
cudaError_t det_typed(const void *lu, const int64_t *ipiv, int64_t b, int64_t n, void *det,
                      void *sign, void *logabs, cudaStream_t st) {
    using R = typename traits<T>::R;
    det_kernel<T><<<grid_threads(b), kBlock, 0, st>>>(
        static_cast<const T *>(lu), ipiv, b, n, static_cast<T *>(det), static_cast<T *>(sign),
        static_cast<R *>(logabs));
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ norms */

enum { NM_SUM, NM_MAX, NM_MIN, NM_COUNT, NM_POS, NM_NEG };

/* A partial norm: the scale s and the scaled sum q (NM_POS), or q alone; f: NAN/INF seen. */
struct nacc {
    double s, q;
    int f;
};

int norm_mode(double p) {
    if (p == 1.0) return NM_SUM;
    if (isinf(p)) return p > 0 ? NM_MAX : NM_MIN;
    if (p == 0.0) return NM_COUNT;
    return p > 0 ? NM_POS : NM_NEG;
}

__device__ __forceinline__ nacc nacc_init(int mode) {
    nacc a;
    a.s = 0;
    a.q = mode == NM_MIN ? INFINITY : 0.0;
    a.f = 0;
    return a;
}

__device__ __forceinline__ double pow_p(double r, double p) { return p == 2.0 ? r * r : pow(r, p); }

__device__ __forceinline__ void nacc_add(nacc &a, double v, bool nz, int mode, double p) {
    if (isnan(v)) a.f |= TFD_CUDA_LA_FLAG_NAN;
    switch (mode) {
    case NM_SUM: a.q += v; break;
    case NM_MAX:
        if (v > a.q) a.q = v;
        break;
    case NM_MIN:
        if (v < a.q) a.q = v;
        break;
    case NM_COUNT: a.q += nz ? 1.0 : 0.0; break;
    case NM_POS:
        if (isinf(v)) {
            a.f |= TFD_CUDA_LA_FLAG_INF;
        } else if (v > a.s) {
            a.q = a.q * pow_p(a.s / v, p) + 1.0;
            a.s = v;
        } else if (v > 0) {
            a.q += pow_p(v / a.s, p);
        }
        break;
    default: a.q += pow(v, p); break;
    }
}

__device__ __forceinline__ nacc nacc_combine(nacc a, nacc b, int mode, double p) {
    nacc c;
    c.f = a.f | b.f;
    c.s = 0;
    switch (mode) {
    case NM_MAX: c.q = a.q > b.q ? a.q : b.q; break;
    case NM_MIN: c.q = a.q < b.q ? a.q : b.q; break;
    case NM_POS:
        c.s = a.s > b.s ? a.s : b.s;
        c.q = c.s > 0 ? (a.s > 0 ? a.q * pow_p(a.s / c.s, p) : 0.0) +
                            (b.s > 0 ? b.q * pow_p(b.s / c.s, p) : 0.0)
                      : 0.0;
        break;
    default: c.q = a.q + b.q; break;
    }
    return c;
}

__device__ __forceinline__ double nacc_final(nacc a, int mode, double p) {
    if (a.f & TFD_CUDA_LA_FLAG_NAN) return NAN;
    switch (mode) {
    case NM_POS:
        if (a.f & TFD_CUDA_LA_FLAG_INF) return INFINITY;
        if (a.s == 0) return 0.0;
        return p == 2.0 ? a.s * sqrt(a.q) : a.s * pow(a.q, 1.0 / p);
    case NM_NEG: return pow(a.q, 1.0 / p);
    default: return a.q;
    }
}

__device__ __forceinline__ void store_real(void *out, int is_double, int64_t i, double v) {
    if (is_double)
        static_cast<double *>(out)[i] = v;
    else
        static_cast<float *>(out)[i] = (float)v;
}

/* Elements per block's share of one output; at most kMaxChunks shares per output. */
constexpr int64_t kChunk = 16384;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kThreadPerOutput = 32;

int64_t chunks_of(int64_t len) {
    int64_t c = (len + kChunk - 1) / kChunk;
    if (c > kMaxChunks) c = kMaxChunks;
    return c < 1 ? 1 : c;
}

template <typename T>
__global__ void norm_thread_kernel(const T *x, int64_t nout, int64_t len, int mode, double p,
                                   void *out, int is_double) {
    GRID_STRIDE(o, nout) {
        nacc a = nacc_init(mode);
        for (int64_t i = 0; i < len; i++) {
            const T v = x[o * len + i];
            nacc_add(a, absd(v), nonzero(v), mode, p);
        }
        store_real(out, is_double, o, nacc_final(a, mode, p));
    }
}

template <typename T>
__global__ void norm_block_kernel(const T *x, int64_t nout, int64_t len, int64_t chunks,
                                  int64_t chunk_len, int mode, double p, void *out, int is_double,
                                  nacc *partial) {
    __shared__ nacc sh[kBlock];
    const int64_t units = nout * chunks;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        const int64_t o = u / chunks, c = u - o * chunks;
        const int64_t lo = c * chunk_len, hi = lo + chunk_len < len ? lo + chunk_len : len;
        nacc a = nacc_init(mode);
        for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            const T v = x[o * len + i];
            nacc_add(a, absd(v), nonzero(v), mode, p);
        }
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int half = blockDim.x / 2; half > 0; half /= 2) {
            if ((int)threadIdx.x < half)
                sh[threadIdx.x] = nacc_combine(sh[threadIdx.x], sh[threadIdx.x + half], mode, p);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (chunks == 1)
                store_real(out, is_double, o, nacc_final(sh[0], mode, p));
            else
                partial[u] = sh[0];
        }
        __syncthreads();
    }
}

__global__ void norm_combine_kernel(const nacc *partial, int64_t nout, int64_t chunks, int mode,
                                    double p, void *out, int is_double) {
    GRID_STRIDE(o, nout) {
        nacc a = partial[o * chunks];
        for (int64_t c = 1; c < chunks; c++) a = nacc_combine(a, partial[o * chunks + c], mode, p);
        store_real(out, is_double, o, nacc_final(a, mode, p));
    }
}

template <typename T>
cudaError_t norm_typed(const void *x, int64_t nout, int64_t len, double p, void *out,
                       int is_double, void *scratch, int sm, cudaStream_t st) {
    const int mode = norm_mode(p);
    const T *in = static_cast<const T *>(x);
    if (len <= kThreadPerOutput) {
        norm_thread_kernel<T><<<grid_threads(nout), kBlock, 0, st>>>(in, nout, len, mode, p, out,
                                                                     is_double);
        return cudaGetLastError();
    }
    const int64_t chunks = chunks_of(len), chunk_len = (len + chunks - 1) / chunks;
    if (chunks > 1 && scratch == nullptr) return cudaErrorInvalidValue;
    const int64_t units = nout * chunks;
    const int64_t cap = (int64_t)(sm > 0 ? sm : 1) * 32;
    norm_block_kernel<T><<<(unsigned)(units < cap ? units : cap), kBlock, 0, st>>>(
        in, nout, len, chunks, chunk_len, mode, p, out, is_double, static_cast<nacc *>(scratch));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess || chunks == 1) return e;
    norm_combine_kernel<<<grid_threads(nout), kBlock, 0, st>>>(static_cast<nacc *>(scratch), nout,
                                                               chunks, mode, p, out, is_double);
    return cudaGetLastError();
}

template <typename T>
__global__ void column_sums_kernel(const T *a, int64_t b, int64_t m, int64_t n, double *sums) {
    GRID_STRIDE(idx, b * n) {
        const int64_t mat = idx / n, j = idx - mat * n;
        const T *col = a + mat * m * n + j;
        double s = 0;
        for (int64_t i = 0; i < m; i++) s += absd(col[i * n]);
        sums[idx] = s;
    }
}

template <typename T>
cudaError_t column_sums_typed(const void *a, int64_t b, int64_t m, int64_t n, double *sums,
                              int sm, cudaStream_t st) {
    column_sums_kernel<T><<<grid_for(b * n, sm), kBlock, 0, st>>>(static_cast<const T *>(a), b,
                                                                  m, n, sums);
    return cudaGetLastError();
}

template <typename R>
__global__ void norm_sv_kernel(const R *s, int64_t b, int64_t k, int kind, double p,
                               const int *flags, R *out) {
    GRID_STRIDE(mat, b) {
        const R *v = s + mat * k;
        const int f = flags ? flags[mat] : 0;
        double r;
        if (f & TFD_CUDA_LA_FLAG_NAN) {
            r = NAN;
        } else if (f & TFD_CUDA_LA_FLAG_INF) {
            r = kind == TF__NORM_MATRIX && p < 0 ? NAN : INFINITY;
        } else if (kind == TF__NORM_NUC) {
            r = 0;
            for (int64_t j = 0; j < k; j++) r += (double)v[j];
        } else {
            r = p > 0 ? (double)v[0] : (double)v[k - 1];
        }
        out[mat] = (R)r;
    }
}

template <typename R>
cudaError_t norm_sv_typed(const void *s, int64_t b, int64_t k, int kind, double p,
                          const int *flags, void *out, cudaStream_t st) {
    norm_sv_kernel<R><<<grid_threads(b), kBlock, 0, st>>>(static_cast<const R *>(s), b, k, kind,
                                                          p, flags, static_cast<R *>(out));
    return cudaGetLastError();
}

/* ------------------------------------------------------ trace, diagonal */

template <typename T>
__global__ void trace_kernel(const T *a, int64_t b, int64_t m, int64_t n, int64_t i0, int64_t j0,
                             int64_t len, T *out) {
    using W = typename traits<T>::W;
    GRID_STRIDE(mat, b) {
        W acc = widen(zero_of<T>());
        for (int64_t t = 0; t < len; t++) acc = addw(acc, widen(a[mat * m * n + (i0 + t) * n + j0 + t]));
        out[mat] = narrow<T>(acc);
    }
}

template <typename T>
__global__ void diagonal_kernel(const T *a, int64_t b, int64_t m, int64_t n, int64_t i0,
                                int64_t j0, int64_t len, T *out) {
    GRID_STRIDE(idx, b * len) {
        const int64_t mat = idx / len, t = idx - mat * len;
        out[idx] = a[mat * m * n + (i0 + t) * n + j0 + t];
    }
}

template <typename T>
cudaError_t diagonal_typed(const void *a, int64_t b, int64_t m, int64_t n, int64_t i0, int64_t j0,
                           int64_t len, int trace, void *out, int sm, cudaStream_t st) {
    if (trace)
        trace_kernel<T><<<grid_threads(b), kBlock, 0, st>>>(static_cast<const T *>(a), b, m, n,
                                                            i0, j0, len, static_cast<T *>(out));
    else
        diagonal_kernel<T><<<grid_for(b * len, sm), kBlock, 0, st>>>(
            static_cast<const T *>(a), b, m, n, i0, j0, len, static_cast<T *>(out));
    return cudaGetLastError();
}

/* ------------------------------------------------------------------ slice */

struct slice_geom {
    int rank;
    int64_t base;
    int64_t dim[TF_MAX_RANK];
    int64_t stride[TF_MAX_RANK]; /* input elements per step along the output axis; may be < 0 */
};

struct alignas(16) elem16 {
    unsigned long long w[2];
};

template <typename E>
__global__ void slice_kernel(int64_t n, slice_geom g, const E *__restrict__ in,
                             E *__restrict__ out) {
    GRID_STRIDE(i, n) {
        int64_t rem = i, off = g.base;
        for (int ax = g.rank - 1; ax > 0; ax--) {
            const int64_t d = g.dim[ax], q = rem / d;
            off += (rem - q * d) * g.stride[ax];
            rem = q;
        }
        off += rem * g.stride[0];
        out[i] = in[off];
    }
}

template <typename E>
cudaError_t slice_typed(int64_t n, const slice_geom &g, const void *in, void *out, int sm,
                        cudaStream_t st) {
    slice_kernel<E><<<grid_for(n, sm), kBlock, 0, st>>>(n, g, static_cast<const E *>(in),
                                                        static_cast<E *>(out));
    return cudaGetLastError();
}

} // namespace

/* ------------------------------------------------------------- launchers */

extern "C" cudaError_t tfd_cuda_la_check(const void *a, tf_dtype dt, int64_t b, int64_t m,
                                         int64_t n, int part, int *flags, int sm_count,
                                         cudaStream_t stream) {
    if (b * m * n == 0) return cudaSuccess;
    LA_DISPATCH(dt, check_typed, a, b, m, n, part, flags, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_prepare(const void *in, void *out, tf_dtype dt, int64_t b,
                                           int64_t rows, int64_t cols, int transpose,
                                           int64_t out_stride, const int *flags, int sm_count,
                                           cudaStream_t stream) {
    if (b * rows * cols == 0) return cudaSuccess;
    LA_DISPATCH(dt, prepare_typed, in, out, b, rows, cols, transpose, out_stride, flags, sm_count,
                stream);
}

extern "C" cudaError_t tfd_cuda_la_status_reduce(const int *flags, const int *info, int64_t b,
                                                 int positive_code, tfd_cuda_la_status *out,
                                                 cudaStream_t stream) {
    status_kernel<<<1, kBlock, 0, stream>>>(flags, info, b, positive_code, out);
    return cudaGetLastError();
}

extern "C" cudaError_t tfd_cuda_la_zero_failed(const tfd_cuda_la_status *status, int n,
                                               void *const *ptr, const size_t *bytes,
                                               int sm_count, cudaStream_t stream) {
    if (n < 0 || n > 4) return cudaErrorInvalidValue;
    zero_set z{};
    z.n = n;
    int64_t most = 0;
    for (int t = 0; t < n; t++) {
        if (bytes[t] % 4 != 0) return cudaErrorInvalidValue;
        z.p[t] = static_cast<uint32_t *>(ptr[t]);
        z.words[t] = (int64_t)(bytes[t] / 4);
        if (z.words[t] > most) most = z.words[t];
    }
    zero_failed_kernel<<<grid_for(most, sm_count), kBlock, 0, stream>>>(status, z);
    return cudaGetLastError();
}

extern "C" cudaError_t tfd_cuda_la_svd_phase(const tfd_cuda_svd_geom *g, void *pu, void *pv,
                                             int64_t *pui, int64_t *pvi, int sm_count,
                                             cudaStream_t stream) {
    LA_DISPATCH(g->dtype, svd_phase_typed, g, pu, pv, pui, pvi, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_truncate(const void *vals, tf_dtype real, int64_t ld,
                                            int64_t k, int64_t b, int64_t bound,
                                            const tf__truncation *t, int renormalize,
                                            int64_t *kept, double *factor, double *report,
                                            cudaStream_t stream) {
    if (k < 1 || bound < 1 || bound > k) return cudaErrorInvalidValue;
    LA_DISPATCH_REAL(real, truncate_typed, vals, ld, k, b, bound, t, renormalize, kept, factor,
                     report, stream);
}

extern "C" cudaError_t tfd_cuda_la_svd_store(const tfd_cuda_svd_geom *g, const void *pu,
                                             const void *pv, const int64_t *pui,
                                             const int64_t *pvi, const int64_t *kept,
                                             const double *factor, int absorb, int64_t rank,
                                             void *S, void *U, void *Vh, int sm_count,
                                             cudaStream_t stream) {
    LA_DISPATCH(g->dtype, svd_store_typed, g, pu, pv, pui, pvi, kept, factor, absorb, rank, S, U,
                Vh, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_eigh_order(const void *w, tf_dtype real, int64_t b, int64_t n,
                                              int32_t *perm, void *absw, cudaStream_t stream) {
    LA_DISPATCH_REAL(real, eigh_order_typed, w, b, n, perm, absw, stream);
}

extern "C" cudaError_t tfd_cuda_la_eigh_phase(const void *v, tf_dtype dt, int64_t b, int64_t n,
                                              void *ph, int64_t *piv, int sm_count,
                                              cudaStream_t stream) {
    LA_DISPATCH(dt, eigh_phase_typed, v, b, n, ph, piv, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_eigh_store(const void *w, const void *v, const void *ph,
                                              const int64_t *piv, const int32_t *perm,
                                              const int64_t *kept, tf_dtype dt, int64_t b,
                                              int64_t n, int64_t rank, void *W, void *V,
                                              int sm_count, cudaStream_t stream) {
    LA_DISPATCH(dt, eigh_store_typed, w, v, ph, piv, perm, kept, b, n, rank, W, V, sm_count,
                stream);
}

extern "C" cudaError_t tfd_cuda_la_qr_phase(const void *a, tf_dtype dt, int64_t b, int64_t m,
                                            int64_t k, int64_t stride, void *ph, int sm_count,
                                            cudaStream_t stream) {
    LA_DISPATCH(dt, qr_phase_typed, a, b, m, k, stride, ph, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_qr_store_r(const void *a, const void *ph, tf_dtype dt,
                                              int64_t b, int64_t m, int64_t n, int64_t k,
                                              int64_t rows, int64_t stride, void *R, int sm_count,
                                              cudaStream_t stream) {
    LA_DISPATCH(dt, qr_store_r_typed, a, ph, b, m, n, k, rows, stride, R, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_qr_store_q(const void *q, const void *ph, tf_dtype dt,
                                              int64_t b, int64_t m, int64_t cols, int64_t k,
                                              int64_t stride, void *Q, int sm_count,
                                              cudaStream_t stream) {
    LA_DISPATCH(dt, qr_store_q_typed, q, ph, b, m, cols, k, stride, Q, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_qr_form_q(const void *a, const void *tau, const void *ph,
                                             tf_dtype dt, int64_t b, int64_t m, int64_t k,
                                             int64_t cols, int64_t stride, void *Q, int sm_count,
                                             cudaStream_t stream) {
    if (b < 1 || m < 1 || k < 1 || k > m || cols < k || cols > m) return cudaErrorInvalidValue;
    LA_DISPATCH(dt, qr_form_q_typed, a, tau, ph, b, m, k, cols, stride, Q, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_pointers(void **out, void *base, int64_t b,
                                            int64_t stride_bytes, int sm_count,
                                            cudaStream_t stream) {
    if (b < 1) return cudaSuccess;
    pointers_kernel<<<grid_for(b, sm_count), kBlock, 0, stream>>>(out, static_cast<char *>(base),
                                                                  b, stride_bytes);
    return cudaGetLastError();
}

extern "C" cudaError_t tfd_cuda_la_widen_pivots(const int *in, int64_t *out, int64_t count,
                                                int sm_count, cudaStream_t stream) {
    if (count < 1) return cudaSuccess;
    widen_pivots_kernel<<<grid_for(count, sm_count), kBlock, 0, stream>>>(in, out, count);
    return cudaGetLastError();
}

extern "C" cudaError_t tfd_cuda_la_triangle(void *a, tf_dtype dt, int64_t b, int64_t n,
                                            int keep_lower, int sm_count, cudaStream_t stream) {
    LA_DISPATCH(dt, triangle_typed, a, b, n, keep_lower, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_identity(void *a, tf_dtype dt, int64_t b, int64_t n,
                                            int sm_count, cudaStream_t stream) {
    LA_DISPATCH(dt, identity_typed, a, b, n, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_det(const void *lu, const int64_t *ipiv, tf_dtype dt,
                                       int64_t b, int64_t n, void *det, void *sign, void *logabs,
                                       cudaStream_t stream) {
    if (det == nullptr && (sign == nullptr || logabs == nullptr)) return cudaErrorInvalidValue;
    LA_DISPATCH(dt, det_typed, lu, ipiv, b, n, det, sign, logabs, stream);
}

extern "C" size_t tfd_cuda_la_norm_scratch(int64_t nout, int64_t len) {
    if (len <= kThreadPerOutput) return 0;
    const int64_t chunks = chunks_of(len);
    return chunks > 1 ? (size_t)(nout * chunks) * sizeof(nacc) : 0;
}

extern "C" cudaError_t tfd_cuda_la_norm_vector(const void *x, tf_dtype dt, int64_t nout,
                                               int64_t len, double p, void *out,
                                               tf_dtype out_dtype, void *scratch, int sm_count,
                                               cudaStream_t stream) {
    if (nout == 0) return cudaSuccess;
    if (len < 1 || isnan(p) || (out_dtype != TF_F32 && out_dtype != TF_F64))
        return cudaErrorInvalidValue;
    const int is_double = out_dtype == TF_F64;
    LA_DISPATCH(dt, norm_typed, x, nout, len, p, out, is_double, scratch, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_column_sums(const void *a, tf_dtype dt, int64_t b, int64_t m,
                                               int64_t n, double *sums, int sm_count,
                                               cudaStream_t stream) {
    LA_DISPATCH(dt, column_sums_typed, a, b, m, n, sums, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_la_norm_sv(const void *s, tf_dtype real, int64_t b, int64_t k,
                                           tf__norm_kind kind, double p, const int *flags,
                                           void *out, cudaStream_t stream) {
    if (k < 1) return cudaErrorInvalidValue;
    LA_DISPATCH_REAL(real, norm_sv_typed, s, b, k, (int)kind, p, flags, out, stream);
}

extern "C" cudaError_t tfd_cuda_la_diagonal(const void *a, tf_dtype dt, int64_t b, int64_t m,
                                            int64_t n, int64_t i0, int64_t j0, int64_t len,
                                            int trace, void *out, int sm_count,
                                            cudaStream_t stream) {
    if (len < 1 || i0 < 0 || j0 < 0 || i0 + len > m || j0 + len > n) return cudaErrorInvalidValue;
    LA_DISPATCH(dt, diagonal_typed, a, b, m, n, i0, j0, len, trace, out, sm_count, stream);
}

extern "C" cudaError_t tfd_cuda_launch_slice(const tfd_op *op, int sm_count,
                                             cudaStream_t stream) {
    const tfd_tensor_view &in = op->in[0];
    const int r = in.rank;
    if (r < 1 || r > TF_MAX_RANK || op->n_params != 3 * r) return cudaErrorInvalidValue;
    int64_t stride[TF_MAX_RANK];
    int64_t s = 1;
    for (int ax = r - 1; ax >= 0; ax--) {
        stride[ax] = s;
        s *= in.shape[ax];
    }
    slice_geom g{};
    g.rank = 0;
    g.base = 0;
    int64_t n = 1;
    for (int ax = 0; ax < r; ax++) {
        const int64_t start = op->params[3 * ax], step = op->params[3 * ax + 1],
                      len = op->params[3 * ax + 2];
        if (len < 1 || start < 0 || start >= in.shape[ax] || step == 0) return cudaErrorInvalidValue;
        const int64_t last = start + step * (len - 1);
        if (last < 0 || last >= in.shape[ax]) return cudaErrorInvalidValue;
        g.base += start * stride[ax];
        n *= len;
        if (len == 1) continue;
        const int64_t eff = step * stride[ax];
        if (g.rank > 0 && g.stride[g.rank - 1] == eff * len) {
            g.dim[g.rank - 1] *= len;
            g.stride[g.rank - 1] = eff;
            continue;
        }
        g.dim[g.rank] = len;
        g.stride[g.rank] = eff;
        g.rank++;
    }
    if (n != op->out.numel) return cudaErrorInvalidValue;
    if (g.rank == 0) {
        g.rank = 1;
        g.dim[0] = 1;
        g.stride[0] = 1;
    }
    const size_t esize = tf_dtype_size(in.dtype);
    const char *src = static_cast<const char *>(in.data);
    if (g.rank == 1 && g.stride[0] == 1) { /* one contiguous run */
        cudaError_t e = cudaMemcpyAsync(op->out.data, src + (size_t)g.base * esize,
                                        (size_t)n * esize, cudaMemcpyDeviceToDevice, stream);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    switch (esize) {
    case 4: return slice_typed<uint32_t>(n, g, in.data, op->out.data, sm_count, stream);
    case 8: return slice_typed<unsigned long long>(n, g, in.data, op->out.data, sm_count, stream);
    case 16: return slice_typed<elem16>(n, g, in.data, op->out.data, sm_count, stream);
    }
    return cudaErrorInvalidValue;
}
