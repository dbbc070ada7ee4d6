/*
 * Kernels of the CUDA backend: elementwise (binary, unary, scale/axpby),
 * permute and reductions, for f32, f64, c64 and c128, and the scaling pass
 * of the FFTs (cuda/fft.c).
 *
 * The CPU backend (cpu-*.c) defines the semantics; these kernels match it
 * within dtype tolerance. Complex numbers are a two-member struct with the
 * interleaved {re, im} layout of C's complex types. Complex products and
 * quotients follow the algorithms the host compiler uses for C's operators
 * (the naive product, Smith's method with Baudin-Smith scaling for double
 * quotients, single quotients in double) with C99 Annex G's recovery of
 * results that naive arithmetic turns into NaN+NaN, and they avoid FMA
 * contraction, so ordinary values give the CPU's bits. Single-precision
 * complex transcendental functions are evaluated in double and rounded once,
 * at least as accurate as the host library. Scale and axpby compute in double
 * (complex) like the CPU.
 *
 * Elementwise kernels are grid-stride loops over 64-bit indices. Permute first
 * merges axes that stay adjacent; when the input's contiguous axis also ends
 * up innermost it is a gather (each thread owns one output element and derives
 * its input offset from the output index), otherwise a batch of tiled 2-D
 * transposes through shared memory, coalesced on both sides. A reduction is
 * first reduced to coalesced axes (size-1 axes dropped, neighbours of the same
 * kind merged) and then takes one of four routes:
 *   rows     the reduced axes are the innermost block: each output reduces one
 *            contiguous row, with a warp or a block per row (and, for few long
 *            rows, the row split across blocks with a second pass over the
 *            partial results);
 *   outer    one reduced axis and a kept innermost axis (column sums): a 2-D
 *            grid of threads over (output, cyclic share of the reduced axis),
 *            then a rows pass over the shares;
 *   permute  the innermost axis is reduced but other reduced axes sit between
 *            kept ones: the input is first transposed into scratch with the
 *            reduced axes last, then reduced as rows;
 *   strided  anything else (and short rows): one thread per output element
 *            walks its reduced elements with an odometer, optionally split
 *            along the reduced range with a second pass.
 * Scratch comes from the stream-ordered pool and is freed on the stream; when
 * the pool is exhausted, the route that needs no scratch is taken instead.
 * Sums of f32 and c64 accumulate in double; max and min propagate NaN.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "daemon/backend/cuda/kernels.h"

namespace {

/*
 * Threads per block everywhere. The kernels carry no __launch_bounds__: with
 * it ptxas trims registers towards full occupancy and spills (seen for f64
 * exp); without it every kernel stays under 64 registers, so 256-thread
 * blocks always launch.
 */
constexpr int kBlock = 256;
constexpr int kWarp = 32;
constexpr int kMaxRank = TF_MAX_RANK;

/* ---------------------------------------------------------------- complex */

/* A complex number laid out like C's `T complex` ({re, im}, aligned to its size). */
template <typename T>
struct alignas(2 * sizeof(T)) cx {
    T re, im;
};

using c64 = cx<float>;
using c128 = cx<double>;

/*
 * Uncontracted arithmetic. nvcc fuses a*b+c into one FMA by default; the host
 * compiles C's complex operators without FMA, so the complex product, the
 * quotient and scale/axpby use these to round every step as the CPU does
 * (bit-identical results for ordinary values, and the same overflow
 * behaviour). Plain real elementwise kernels have no such expression.
 */
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }

template <typename T>
__device__ __forceinline__ cx<T> operator+(cx<T> a, cx<T> b) {
    return {a.re + b.re, a.im + b.im};
}

template <typename T>
__device__ __forceinline__ cx<T> operator-(cx<T> a, cx<T> b) {
    return {a.re - b.re, a.im - b.im};
}

template <typename T>
__device__ __forceinline__ cx<T> operator-(cx<T> a) {
    return {-a.re, -a.im};
}

/* Product with C99 Annex G's recovery of infinities that naive arithmetic turns into NaN. */
template <typename T>
__device__ __forceinline__ cx<T> cmul_recover(T a, T b, T c, T d) {
    const T inf = (T)INFINITY;
    const T ac = mul_rn(a, c), bd = mul_rn(b, d), ad = mul_rn(a, d), bc = mul_rn(b, c);
    T x = sub_rn(ac, bd), y = add_rn(ad, bc);
    int recalc = 0;
    if (isinf(a) || isinf(b)) {
        a = copysign(isinf(a) ? (T)1 : (T)0, a);
        b = copysign(isinf(b) ? (T)1 : (T)0, b);
        if (isnan(c)) c = copysign((T)0, c);
        if (isnan(d)) d = copysign((T)0, d);
        recalc = 1;
    }
    if (isinf(c) || isinf(d)) {
        c = copysign(isinf(c) ? (T)1 : (T)0, c);
        d = copysign(isinf(d) ? (T)1 : (T)0, d);
        if (isnan(a)) a = copysign((T)0, a);
        if (isnan(b)) b = copysign((T)0, b);
        recalc = 1;
    }
    if (!recalc && (isinf(ac) || isinf(bd) || isinf(ad) || isinf(bc))) {
        if (isnan(a)) a = copysign((T)0, a);
        if (isnan(b)) b = copysign((T)0, b);
        if (isnan(c)) c = copysign((T)0, c);
        if (isnan(d)) d = copysign((T)0, d);
        recalc = 1;
    }
    if (recalc) {
        x = inf * sub_rn(mul_rn(a, c), mul_rn(b, d));
        y = inf * add_rn(mul_rn(a, d), mul_rn(b, c));
    }
    return {x, y};
}

/* Complex product: the naive formula, and the Annex G recovery only when it yields NaN+NaN. */
template <typename T>
__device__ __forceinline__ cx<T> operator*(cx<T> p, cx<T> q) {
    const T x = sub_rn(mul_rn(p.re, q.re), mul_rn(p.im, q.im));
    const T y = add_rn(mul_rn(p.re, q.im), mul_rn(p.im, q.re));
    if (isnan(x) && isnan(y)) return cmul_recover(p.re, p.im, q.re, q.im);
    return {x, y};
}

/*
 * Annex G's recovery of a quotient that came out NaN+NaN although it is
 * infinite (nonzero / zero, infinite / finite) or zero (finite / infinite).
 */
template <typename T>
__device__ __forceinline__ void cdiv_recover(T a, T b, T c, T d, T *x, T *y) {
    const T inf = (T)INFINITY;
    if (c == (T)0 && d == (T)0 && (!isnan(a) || !isnan(b))) {
        *x = copysign(inf, c) * a;
        *y = copysign(inf, c) * b;
    } else if ((isinf(a) || isinf(b)) && isfinite(c) && isfinite(d)) {
        a = copysign(isinf(a) ? (T)1 : (T)0, a);
        b = copysign(isinf(b) ? (T)1 : (T)0, b);
        *x = inf * add_rn(mul_rn(a, c), mul_rn(b, d));
        *y = inf * sub_rn(mul_rn(b, c), mul_rn(a, d));
    } else if ((isinf(c) || isinf(d)) && isfinite(a) && isfinite(b)) {
        c = copysign(isinf(c) ? (T)1 : (T)0, c);
        d = copysign(isinf(d) ? (T)1 : (T)0, d);
        *x = (T)0 * add_rn(mul_rn(a, c), mul_rn(b, d));
        *y = (T)0 * sub_rn(mul_rn(b, c), mul_rn(a, d));
    }
}

/*
 * Double-precision quotient by Smith's method with the Baudin-Smith scalings
 * (the algorithm of the host's own complex division): the denominator's
 * larger part goes first, and operands near the ends of the exponent range
 * are rescaled by powers of two so that neither the ratio nor the
 * denominator overflows or underflows.
 */
__device__ __forceinline__ c128 cdiv_d(double a, double b, double c, double d) {
    const double big = 0x1.fffffffffffffp+1022;   /* DBL_MAX / 2 */
    const double tiny = 0x1p-1022;                /* DBL_MIN */
    const double eps = 0x1p-52;                   /* DBL_EPSILON */
    const double mid = big * eps;
    /* (a + ib) / (c + id) equals (b - ia) / (d - ic): with it the first denominator part is larger. */
    const bool turn = fabs(c) < fabs(d);
    double p = turn ? b : a, q = turn ? -a : b, r = turn ? d : c, s = turn ? -c : d;
    if (fabs(r) >= big) {
        p *= 0.5;
        q *= 0.5;
        r *= 0.5;
        s *= 0.5;
    }
    if (fabs(r) < eps || (fabs(p) < tiny && fabs(q) < mid && fabs(r) < mid) ||
        (fabs(q) < tiny && fabs(p) < mid && fabs(r) < mid)) {
        p *= 0x1p52;
        q *= 0x1p52;
        r *= 0x1p52;
        s *= 0x1p52;
    }
    const double t = s / r;
    const double den = add_rn(r, mul_rn(s, t));
    double x, y;
    if (fabs(t) > tiny) {
        x = add_rn(p, mul_rn(q, t)) / den;
        y = sub_rn(q, mul_rn(p, t)) / den;
    } else { /* a subnormal ratio would lose digits: divide first */
        x = add_rn(p, mul_rn(s, q / r)) / den;
        y = sub_rn(q, mul_rn(s, p / r)) / den;
    }
    if (isnan(x) && isnan(y)) /* in the original orientation, scaled as above */
        cdiv_recover(turn ? -q : p, turn ? p : q, turn ? -s : r, turn ? r : s, &x, &y);
    return {x, y};
}

/*
 * Single-precision quotient: in double the naive formula can neither overflow
 * nor underflow for float operands; round once, then recover in float.
 */
__device__ __forceinline__ c64 operator/(c64 p, c64 q) {
    const double a = p.re, b = p.im, c = q.re, d = q.im;
    const double denom = add_rn(mul_rn(c, c), mul_rn(d, d));
    float x = (float)(add_rn(mul_rn(a, c), mul_rn(b, d)) / denom);
    float y = (float)(sub_rn(mul_rn(b, c), mul_rn(a, d)) / denom);
    if (isnan(x) && isnan(y)) cdiv_recover(p.re, p.im, q.re, q.im, &x, &y);
    return {x, y};
}

__device__ __forceinline__ c128 operator/(c128 p, c128 q) { return cdiv_d(p.re, p.im, q.re, q.im); }

/* Widening and narrowing between element and accumulator types. */
template <typename To, typename From>
struct cvt {
    __device__ __forceinline__ static To f(From x) { return static_cast<To>(x); }
};
template <typename A, typename B>
struct cvt<cx<A>, cx<B>> {
    __device__ __forceinline__ static cx<A> f(cx<B> x) {
        return {static_cast<A>(x.re), static_cast<A>(x.im)};
    }
};

/* cexp: e^re (cos im + i sin im), with C's special cases for zero, infinite and huge parts. */
__device__ __forceinline__ c128 cexp_d(double re, double im) {
    if (im == 0.0) return {exp(re), im};
    if (isinf(re) && !isfinite(im)) {
        if (re < 0.0) return {0.0, 0.0};
        return {re, im - im}; /* +inf + i NaN */
    }
    double s, c;
    sincos(im, &s, &c);
    if (re > 700.0) { /* e^re alone may overflow while the product does not */
        const double h = exp(0.5 * re);
        return {(h * c) * h, (h * s) * h};
    }
    const double e = exp(re);
    return {e * c, e * s};
}

/* clog: log|z| + i arg z, with log1p near |z| = 1 where log(hypot) would cancel. */
__device__ __forceinline__ c128 clog_d(double re, double im) {
    double ax = fabs(re), ay = fabs(im);
    if (ax < ay) {
        const double t = ax;
        ax = ay;
        ay = t;
    }
    double lr;
    if (ax >= 0.5 && ax <= 2.0)
        lr = 0.5 * log1p((ax - 1.0) * (ax + 1.0) + ay * ay);
    else
        lr = log(hypot(ax, ay));
    return {lr, atan2(im, re)};
}

/* csqrt: the principal square root, scaled so that no intermediate overflows or underflows. */
__device__ __forceinline__ c128 csqrt_d(double x, double y) {
    const double inf = (double)INFINITY;
    if (x == 0.0 && y == 0.0) return {0.0, y};
    if (isinf(y)) return {inf, y};
    if (isnan(x)) return {x, x};
    if (isinf(x)) {
        if (x > 0.0) return {x, isnan(y) ? y : copysign(0.0, y)};
        return {isnan(y) ? y : 0.0, copysign(inf, y)};
    }
    if (isnan(y)) return {y, y};
    double ax = fabs(x), ay = fabs(y), scale = 1.0;
    if (ax > 0x1p1020 || ay > 0x1p1020) {
        ax *= 0.25;
        ay *= 0.25;
        scale = 2.0;
    } else if (ax < 0x1p-1000 && ay < 0x1p-1000) {
        ax *= 0x1p108;
        ay *= 0x1p108;
        scale = 0x1p-54;
    }
    const double t = sqrt(0.5 * (ax + hypot(ax, ay)));
    const double u = ay / (2.0 * t);
    if (x >= 0.0) return {t * scale, copysign(u * scale, y)};
    return {u * scale, copysign(t * scale, y)};
}

/* ------------------------------------------------------------ elementwise */

/* The unary functions, overloaded per element type; complex single precision goes through double. */
__device__ __forceinline__ float f_neg(float x) { return -x; }
__device__ __forceinline__ double f_neg(double x) { return -x; }
template <typename T>
__device__ __forceinline__ cx<T> f_neg(cx<T> x) { return -x; }

template <typename T>
__device__ __forceinline__ cx<T> f_conj(cx<T> x) { return {x.re, -x.im}; }

__device__ __forceinline__ float f_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double f_abs(double x) { return fabs(x); }
__device__ __forceinline__ float f_abs(c64 x) { return (float)hypot((double)x.re, (double)x.im); }
__device__ __forceinline__ double f_abs(c128 x) { return hypot(x.re, x.im); }

__device__ __forceinline__ float f_exp(float x) { return expf(x); }
__device__ __forceinline__ double f_exp(double x) { return exp(x); }
__device__ __forceinline__ c64 f_exp(c64 x) { return cvt<c64, c128>::f(cexp_d(x.re, x.im)); }
__device__ __forceinline__ c128 f_exp(c128 x) { return cexp_d(x.re, x.im); }

__device__ __forceinline__ float f_log(float x) { return logf(x); }
__device__ __forceinline__ double f_log(double x) { return log(x); }
__device__ __forceinline__ c64 f_log(c64 x) { return cvt<c64, c128>::f(clog_d(x.re, x.im)); }
__device__ __forceinline__ c128 f_log(c128 x) { return clog_d(x.re, x.im); }

__device__ __forceinline__ float f_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double f_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ c64 f_sqrt(c64 x) { return cvt<c64, c128>::f(csqrt_d(x.re, x.im)); }
__device__ __forceinline__ c128 f_sqrt(c128 x) { return csqrt_d(x.re, x.im); }

/* Functors handed to the generic kernels (one per operation, generic over the element type). */
struct op_add { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct op_sub { template <typename T> __device__ T operator()(T a, T b) const { return a - b; } };
struct op_mul { template <typename T> __device__ T operator()(T a, T b) const { return a * b; } };
struct op_div { template <typename T> __device__ T operator()(T a, T b) const { return a / b; } };
struct op_neg { template <typename T> __device__ T operator()(T x) const { return f_neg(x); } };
struct op_conj { template <typename T> __device__ T operator()(T x) const { return f_conj(x); } };
struct op_abs { template <typename T> __device__ auto operator()(T x) const { return f_abs(x); } };
struct op_exp { template <typename T> __device__ T operator()(T x) const { return f_exp(x); } };
struct op_log { template <typename T> __device__ T operator()(T x) const { return f_log(x); } };
struct op_sqrt { template <typename T> __device__ T operator()(T x) const { return f_sqrt(x); } };
struct op_square { template <typename T> __device__ T operator()(T x) const { return x * x; } };

/* Scale and axpby in double (complex), rounded once on store like the CPU kernels. */
__device__ __forceinline__ double scale_by(double a, double x) { return mul_rn(a, x); }
__device__ __forceinline__ c128 scale_by(c128 a, c128 x) { return a * x; }
__device__ __forceinline__ double sum_rn(double a, double b) { return add_rn(a, b); }
__device__ __forceinline__ c128 sum_rn(c128 a, c128 b) {
    return {add_rn(a.re, b.re), add_rn(a.im, b.im)};
}

template <typename T, typename C>
struct op_scale {
    C alpha;
    __device__ T operator()(T x) const { return cvt<T, C>::f(scale_by(alpha, cvt<C, T>::f(x))); }
};
template <typename T, typename C>
struct op_axpby {
    C alpha, beta;
    __device__ T operator()(T x, T y) const {
        return cvt<T, C>::f(
            sum_rn(scale_by(alpha, cvt<C, T>::f(x)), scale_by(beta, cvt<C, T>::f(y))));
    }
};

/* o[i] = f(x[i]) over a grid-stride loop. */
template <typename TI, typename TO, typename F>
__global__ void
    map1_kernel(int64_t n, const TI *__restrict__ x, TO *__restrict__ o, F f) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        o[i] = f(x[i]);
}

/* o[i] = f(a[i], b[i]) over a grid-stride loop. */
template <typename T, typename F>
__global__ void
    map2_kernel(int64_t n, const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ o,
                F f) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        o[i] = f(a[i], b[i]);
}

/* Enough blocks to fill every SM at full occupancy; the grid-stride loop covers the rest. */
unsigned grid_for(int64_t n, int sm_count, int per_block = kBlock) {
    int64_t blocks = (n + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(sm_count > 0 ? sm_count : 1) * 8;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    return (unsigned)blocks;
}

template <typename TI, typename TO, typename F>
cudaError_t launch_map1(const tfd_op *op, int sm, cudaStream_t st, F f) {
    const int64_t n = op->out.numel;
    if (n <= 0) return cudaSuccess;
    map1_kernel<TI, TO, F><<<grid_for(n, sm), kBlock, 0, st>>>(
        n, static_cast<const TI *>(op->in[0].data), static_cast<TO *>(op->out.data), f);
    return cudaGetLastError();
}

template <typename T, typename F>
cudaError_t launch_map2(const tfd_op *op, int sm, cudaStream_t st, F f) {
    const int64_t n = op->out.numel;
    if (n <= 0) return cudaSuccess;
    map2_kernel<T, F><<<grid_for(n, sm), kBlock, 0, st>>>(
        n, static_cast<const T *>(op->in[0].data), static_cast<const T *>(op->in[1].data),
        static_cast<T *>(op->out.data), f);
    return cudaGetLastError();
}

/* One dtype switch per functor; F must serve all four element types. */
template <typename F>
cudaError_t binary_dtype(const tfd_op *op, int sm, cudaStream_t st, F f) {
    switch (op->in[0].dtype) {
    case TF_F32: return launch_map2<float>(op, sm, st, f);
    case TF_F64: return launch_map2<double>(op, sm, st, f);
    case TF_C64: return launch_map2<c64>(op, sm, st, f);
    case TF_C128: return launch_map2<c128>(op, sm, st, f);
    }
    return cudaErrorInvalidValue;
}

/* Same for unary functors whose output type equals the input type. */
template <typename F>
cudaError_t unary_dtype(const tfd_op *op, int sm, cudaStream_t st, F f) {
    switch (op->in[0].dtype) {
    case TF_F32: return launch_map1<float, float>(op, sm, st, f);
    case TF_F64: return launch_map1<double, double>(op, sm, st, f);
    case TF_C64: return launch_map1<c64, c64>(op, sm, st, f);
    case TF_C128: return launch_map1<c128, c128>(op, sm, st, f);
    }
    return cudaErrorInvalidValue;
}

/* A device-to-device copy of the whole input, for operations that do not change values. */
cudaError_t copy_input(const tfd_op *op, cudaStream_t st) {
    const size_t bytes = (size_t)op->out.numel * tf_dtype_size(op->in[0].dtype);
    if (bytes == 0 || op->out.data == op->in[0].data) return cudaSuccess;
    cudaError_t e = cudaMemcpyAsync(op->out.data, op->in[0].data, bytes,
                                    cudaMemcpyDeviceToDevice, st);
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* ---------------------------------------------------------------- permute */

/* Output dims and, per output axis, the input stride (in elements); merged and 1-free. */
struct perm_geom {
    int rank;
    int64_t dim[kMaxRank];
    int64_t stride[kMaxRank];
};

/* Drops size-1 axes and merges neighbours that are also neighbours in the input. */
void perm_coalesce(perm_geom *g) {
    perm_geom c{};
    c.rank = 0;
    for (int i = 0; i < g->rank; i++) {
        if (g->dim[i] == 1) continue;
        if (c.rank > 0 && c.stride[c.rank - 1] == g->stride[i] * g->dim[i]) {
            c.dim[c.rank - 1] *= g->dim[i];
            c.stride[c.rank - 1] = g->stride[i];
            continue;
        }
        c.dim[c.rank] = g->dim[i];
        c.stride[c.rank] = g->stride[i];
        c.rank++;
    }
    if (c.rank == 0) { /* every axis had size 1: one element */
        c.rank = 1;
        c.dim[0] = 1;
        c.stride[0] = 1;
    }
    *g = c;
}

/* A 16-byte element (c128) moved as one aligned unit. */
struct alignas(16) elem16 {
    unsigned long long w[2];
};

/* Each thread writes one output element, gathering it from the input offset of its index. */
template <typename E, typename I>
__global__ void
    permute_kernel(I n, perm_geom g, const E *__restrict__ in, E *__restrict__ out) {
    const I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        I rem = i, off = 0;
        for (int ax = g.rank - 1; ax > 0; ax--) {
            const I d = (I)g.dim[ax];
            const I q = rem / d;
            off += (rem - q * d) * (I)g.stride[ax];
            rem = q;
        }
        off += rem * (I)g.stride[0];
        out[i] = in[off];
    }
}

/*
 * A permutation that moves the input's contiguous axis (p) away from the
 * output's innermost one (q) is a batch of 2-D transposes: tiles of 32x32
 * are read along p and written along q through shared memory, so both sides
 * stay coalesced. The other axes are batch axes with their own strides.
 */
constexpr int kTile = 32;
constexpr int kTileRows = 8; /* block of 32 x 8 threads, four tile rows per thread */

struct tile_geom {
    int nb;
    int64_t bdim[kMaxRank], bin[kMaxRank], bout[kMaxRank]; /* batch axes, outer to inner */
    int64_t dp, dq;       /* extents of the two tile axes */
    int64_t sq_in;        /* input stride of q (p's input stride is 1) */
    int64_t sp_out;       /* output stride of p (q's output stride is 1) */
    int64_t tiles_p, tiles_q, units;
};

/* Each block transposes whole tiles; every thread runs the same iterations, so barriers are uniform. */
template <typename E>
__global__ void transpose_kernel(tile_geom g, const E *__restrict__ in, E *__restrict__ out) {
    __shared__ E tile[kTile][kTile + 1];
    const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
    for (int64_t u = blockIdx.x; u < g.units; u += gridDim.x) {
        int64_t rem = u;
        const int64_t tq = rem % g.tiles_q;
        rem /= g.tiles_q;
        const int64_t tp = rem % g.tiles_p;
        rem /= g.tiles_p;
        int64_t ib = 0, ob = 0;
        for (int ax = g.nb - 1; ax >= 0; ax--) {
            const int64_t q = rem / g.bdim[ax];
            const int64_t idx = rem - q * g.bdim[ax];
            ib += idx * g.bin[ax];
            ob += idx * g.bout[ax];
            rem = q;
        }
        const int64_t p0 = tp * kTile, q0 = tq * kTile;
        for (int j = ty; j < kTile; j += kTileRows) {
            const int64_t p = p0 + tx, q = q0 + j;
            if (p < g.dp && q < g.dq) tile[j][tx] = in[ib + p + q * g.sq_in];
        }
        __syncthreads();
        for (int j = ty; j < kTile; j += kTileRows) {
            const int64_t q = q0 + tx, p = p0 + j;
            if (p < g.dp && q < g.dq) out[ob + q + p * g.sp_out] = tile[tx][j];
        }
        __syncthreads();
    }
}

/* Fills a tile geometry when the tiled kernel applies (both tile axes long enough), else false. */
bool tile_plan(const perm_geom &g, tile_geom *t) {
    const int q = g.rank - 1;
    int p = -1;
    for (int i = 0; i < g.rank; i++)
        if (g.stride[i] == 1) p = i;
    if (p < 0 || p == q || g.dim[p] < 16 || g.dim[q] < 16) return false;
    int64_t ostride[kMaxRank];
    ostride[q] = 1;
    for (int i = q - 1; i >= 0; i--) ostride[i] = ostride[i + 1] * g.dim[i + 1];
    *t = tile_geom{};
    int64_t batch = 1;
    for (int i = 0; i < g.rank; i++) {
        if (i == p || i == q) continue;
        t->bdim[t->nb] = g.dim[i];
        t->bin[t->nb] = g.stride[i];
        t->bout[t->nb] = ostride[i];
        t->nb++;
        batch *= g.dim[i];
    }
    t->dp = g.dim[p];
    t->dq = g.dim[q];
    t->sq_in = g.stride[q];
    t->sp_out = ostride[p];
    t->tiles_p = (t->dp + kTile - 1) / kTile;
    t->tiles_q = (t->dq + kTile - 1) / kTile;
    t->units = batch * t->tiles_p * t->tiles_q;
    return true;
}

/* Runs the gather with 32-bit index arithmetic whenever the element count allows it. */
template <typename E>
cudaError_t launch_gather(const perm_geom &g, int64_t n, const void *in, void *out, int sm,
                          cudaStream_t st) {
    tile_geom t;
    if (tile_plan(g, &t)) {
        const int64_t cap = (int64_t)(sm > 0 ? sm : 1) * 32;
        const unsigned grid = (unsigned)(t.units < cap ? t.units : cap);
        transpose_kernel<E><<<grid, dim3(kTile, kTileRows), 0, st>>>(
            t, static_cast<const E *>(in), static_cast<E *>(out));
        return cudaGetLastError();
    }
    const unsigned grid = grid_for(n, sm);
    if (n < ((int64_t)1 << 31))
        permute_kernel<E, uint32_t><<<grid, kBlock, 0, st>>>(
            (uint32_t)n, g, static_cast<const E *>(in), static_cast<E *>(out));
    else
        permute_kernel<E, uint64_t><<<grid, kBlock, 0, st>>>(
            (uint64_t)n, g, static_cast<const E *>(in), static_cast<E *>(out));
    return cudaGetLastError();
}

/*
 * When the output's innermost axis is also the input's contiguous one, each
 * output row is a contiguous input row: if a row is a whole number of
 * 16-byte units and both arrays are 16-byte aligned, the gather moves rows
 * as 16-byte units (the geometry rescaled), which halves or quarters the
 * index arithmetic per byte and widens every memory access. Returns false
 * (g untouched) when that does not apply.
 */
bool widen_rows(perm_geom *g, int64_t *n, size_t *esize, const void *in, const void *out) {
    const int q = g->rank - 1;
    const int64_t unit = 16;
    if (*esize >= (size_t)unit || g->stride[q] != 1) return false;
    if (((uintptr_t)in | (uintptr_t)out) % (uintptr_t)unit) return false;
    const int64_t row_bytes = g->dim[q] * (int64_t)*esize;
    if (row_bytes % unit) return false;
    perm_geom w = *g;
    for (int i = 0; i < q; i++) {
        const int64_t bytes = g->stride[i] * (int64_t)*esize;
        if (bytes % unit) return false;
        w.stride[i] = bytes / unit;
    }
    w.dim[q] = row_bytes / unit;
    *n = *n * (int64_t)*esize / unit;
    *esize = (size_t)unit;
    *g = w;
    return true;
}

/* Gathers `n` elements of `esize` bytes along an already coalesced geometry. */
cudaError_t gather_bytes(const perm_geom &geom, int64_t n, size_t esize, const void *in, void *out,
                         int sm, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    if (geom.rank == 1 && geom.stride[0] == 1) { /* the order did not change: a plain copy */
        cudaError_t e = cudaMemcpyAsync(out, in, (size_t)n * esize, cudaMemcpyDeviceToDevice, st);
        return e != cudaSuccess ? e : cudaGetLastError();
    }
    perm_geom g = geom;
    (void)widen_rows(&g, &n, &esize, in, out);
    switch (esize) {
    case 4: return launch_gather<uint32_t>(g, n, in, out, sm, st);
    case 8: return launch_gather<unsigned long long>(g, n, in, out, sm, st);
    case 16: return launch_gather<elem16>(g, n, in, out, sm, st);
    }
    return cudaErrorInvalidValue;
}

/* ------------------------------------------------------------- reductions */

/* Sum: identity -0.0, so that a sum of negative zeros stays -0.0 exactly as on the CPU. */
template <typename A>
struct red_sum;
template <>
struct red_sum<double> {
    __device__ static double identity() { return -0.0; }
    __device__ static double combine(double a, double b) { return a + b; }
};
template <typename T>
struct red_sum<cx<T>> {
    __device__ static cx<T> identity() { return {(T)-0.0, (T)-0.0}; }
    __device__ static cx<T> combine(cx<T> a, cx<T> b) { return a + b; }
};

/* Max and min: a NaN on either side wins, so NaN propagates through every tree shape. */
template <typename A>
struct red_max {
    __device__ static A identity() { return (A)-INFINITY; }
    __device__ static A combine(A a, A v) { return (isnan(v) || v > a) ? v : a; }
};
template <typename A>
struct red_min {
    __device__ static A identity() { return (A)INFINITY; }
    __device__ static A combine(A a, A v) { return (isnan(v) || v < a) ? v : a; }
};

__device__ __forceinline__ float shfl_down(float v, int d) {
    return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ double shfl_down(double v, int d) {
    return __shfl_down_sync(0xffffffffu, v, d);
}
template <typename T>
__device__ __forceinline__ cx<T> shfl_down(cx<T> v, int d) {
    return {shfl_down(v.re, d), shfl_down(v.im, d)};
}

/* Tree reduction across one full warp; lane 0 ends up with the result. */
template <typename Op, typename A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
    for (int d = kWarp / 2; d > 0; d >>= 1) v = Op::combine(v, shfl_down(v, d));
    return v;
}

/*
 * The rows route: row r is x[r*len .. r*len+len), cut into `pieces` chunks of
 * `chunk` elements; a group of G threads (a warp or the whole block) reduces
 * one (row, piece) unit into out[r*pieces + piece].
 */
template <template <typename> class OpT, typename In, typename A, typename Out, int G>
__global__ void
    rows_kernel(int64_t rows, int64_t len, int64_t pieces, int64_t chunk,
                const In *__restrict__ x, Out *__restrict__ out) {
    using Op = OpT<A>;
    static_assert(G == kWarp || G == kBlock, "a group is a warp or a block");
    constexpr int groups = kBlock / G;
    __shared__ A partial[kBlock / kWarp];
    const int lane = (int)threadIdx.x % G;
    const int group = (int)threadIdx.x / G;
    const int64_t units = rows * pieces;
    /* Every thread of a group runs the same iterations, so the barriers below are uniform. */
    for (int64_t base = (int64_t)blockIdx.x * groups; base < units;
         base += (int64_t)gridDim.x * groups) {
        const int64_t u = base + group;
        A acc = Op::identity();
        if (u < units) {
            const int64_t row = u / pieces, piece = u - row * pieces;
            const int64_t begin = piece * chunk;
            const int64_t end = begin + chunk < len ? begin + chunk : len;
            const In *p = x + row * len;
            for (int64_t j = begin + lane; j < end; j += G)
                acc = Op::combine(acc, cvt<A, In>::f(p[j]));
        }
        acc = warp_reduce<Op>(acc);
        if (G == kWarp) {
            if (lane == 0 && u < units) out[u] = cvt<Out, A>::f(acc);
        } else {
            const int warp = (int)threadIdx.x / kWarp, wl = (int)threadIdx.x % kWarp;
            if (wl == 0) partial[warp] = acc;
            __syncthreads();
            if (warp == 0) {
                A v = wl < kBlock / kWarp ? partial[wl] : Op::identity();
                v = warp_reduce<Op>(v);
                if (wl == 0 && u < units) out[u] = cvt<Out, A>::f(v);
            }
            __syncthreads();
        }
    }
}

/* Coalesced geometry of a reduction: kept and reduced axes, outer to inner, never empty. */
struct red_geom {
    int nk, nr;
    int64_t kdim[kMaxRank], kstride[kMaxRank];
    int64_t rdim[kMaxRank], rstride[kMaxRank];
};

/*
 * The strided route: each thread owns output element o and the slice
 * [split*chunk, split*chunk+chunk) of the reduced index range (blockIdx.y is
 * the split); it finds its input offsets with an odometer over the reduced
 * axes, running the innermost one as a plain strided loop.
 */
template <template <typename> class OpT, typename In, typename A, typename Out>
__global__ void
    strided_kernel(int64_t nout, int64_t nred, int64_t chunk, red_geom g,
                   const In *__restrict__ x, Out *__restrict__ out) {
    using Op = OpT<A>;
    const int64_t splits = gridDim.y, split = blockIdx.y;
    const int64_t r0 = split * chunk;
    const int64_t r1 = r0 + chunk < nred ? r0 + chunk : nred;
    const int inner = g.nr - 1;
    const int64_t in_dim = g.rdim[inner], in_stride = g.rstride[inner];
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = o, off = 0;
        for (int ax = g.nk - 1; ax >= 0; ax--) {
            const int64_t q = rem / g.kdim[ax];
            off += (rem - q * g.kdim[ax]) * g.kstride[ax];
            rem = q;
        }
        int64_t idx[kMaxRank];
        rem = r0;
        for (int ax = g.nr - 1; ax >= 0; ax--) {
            const int64_t q = rem / g.rdim[ax];
            idx[ax] = rem - q * g.rdim[ax];
            off += idx[ax] * g.rstride[ax];
            rem = q;
        }
        A acc = Op::identity();
        int64_t r = r0;
        while (r < r1) {
            int64_t run = in_dim - idx[inner];
            if (run > r1 - r) run = r1 - r;
            for (int64_t k = 0; k < run; k++)
                acc = Op::combine(acc, cvt<A, In>::f(x[off + k * in_stride]));
            r += run;
            off += run * in_stride;
            idx[inner] += run;
            /* Carry into the outer reduced axes once the innermost one wraps. */
            for (int ax = inner; ax >= 0 && idx[ax] == g.rdim[ax]; ax--) {
                off -= g.rdim[ax] * g.rstride[ax];
                idx[ax] = 0;
                if (ax > 0) {
                    idx[ax - 1]++;
                    off += g.rstride[ax - 1];
                }
            }
        }
        out[o * splits + split] = cvt<Out, A>::f(acc);
    }
}

/*
 * The outer route: one reduced axis and a kept innermost axis (a column sum).
 * Threads form a 2-D grid, x over output elements and y over a cyclic share
 * of the reduced axis (r = s, s+S, s+2S, ...), so a warp reads whole rows of
 * consecutive columns even when there are only a few columns; each thread
 * writes one partial result to out[o*S + s].
 */
template <template <typename> class OpT, typename In, typename A, typename Out>
__global__ void outer_kernel(int64_t nout, int64_t rdim, int64_t rstride, red_geom g,
                             const In *__restrict__ x, Out *__restrict__ out) {
    using Op = OpT<A>;
    const int64_t S = (int64_t)gridDim.y * blockDim.y;
    const int64_t s = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t rem = o, base = 0;
        for (int ax = g.nk - 1; ax >= 0; ax--) {
            const int64_t q = rem / g.kdim[ax];
            base += (rem - q * g.kdim[ax]) * g.kstride[ax];
            rem = q;
        }
        A acc = Op::identity();
        for (int64_t r = s; r < rdim; r += S)
            acc = Op::combine(acc, cvt<A, In>::f(x[base + r * rstride]));
        out[o * S + s] = cvt<Out, A>::f(acc);
    }
}

/* Device-pool scratch that is returned to the pool on the stream when it goes out of scope. */
struct scratch {
    void *ptr = nullptr;
    cudaStream_t st;
    explicit scratch(cudaStream_t s) : st(s) {}
    /* Takes `bytes`; on failure clears the runtime's error slot and reports false. */
    bool get(size_t bytes) {
        if (cudaMallocAsync(&ptr, bytes < 256 ? 256 : bytes, st) != cudaSuccess) {
            (void)cudaGetLastError();
            ptr = nullptr;
            return false;
        }
        return true;
    }
    ~scratch() {
        if (ptr) (void)cudaFreeAsync(ptr, st);
    }
    scratch(const scratch &) = delete;
    scratch &operator=(const scratch &) = delete;
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Rows shorter than this go to the strided route, one thread per row. */
constexpr int64_t kMinRowLen = 64;
/* A piece of a split row holds at least this many elements. */
constexpr int64_t kMinPiece = 4096;

/* Reduces `rows` contiguous rows of `len` elements into out[rows]. */
template <template <typename> class OpT, typename In, typename A, typename Out>
cudaError_t run_rows(const In *x, int64_t rows, int64_t len, Out *out, int sm, cudaStream_t st) {
    const int64_t sms = sm > 0 ? sm : 1;
    const int64_t target_blocks = sms * 8;
    /* Few long rows: split each across blocks, then reduce the partial results. */
    int64_t pieces = 1;
    if (rows < target_blocks && len >= 2 * kMinPiece) {
        pieces = ceil_div(target_blocks, rows);
        if (pieces > len / kMinPiece) pieces = len / kMinPiece;
        if (pieces < 1) pieces = 1;
    }
    scratch part(st);
    if (pieces > 1 && !part.get((size_t)(rows * pieces) * sizeof(A))) pieces = 1;
    if (pieces > 1) {
        const int64_t chunk = ceil_div(len, pieces);
        pieces = ceil_div(len, chunk);
        const int64_t units = rows * pieces;
        const unsigned grid = (unsigned)(units < sms * 32 ? units : sms * 32);
        rows_kernel<OpT, In, A, A, kBlock><<<grid, kBlock, 0, st>>>(
            rows, len, pieces, chunk, x, static_cast<A *>(part.ptr));
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        return run_rows<OpT, A, A, Out>(static_cast<const A *>(part.ptr), rows, pieces, out, sm,
                                        st);
    }
    if (len >= 1024 || rows < target_blocks) {
        const unsigned grid = (unsigned)(rows < sms * 32 ? rows : sms * 32);
        rows_kernel<OpT, In, A, Out, kBlock><<<grid, kBlock, 0, st>>>(rows, len, 1, len, x, out);
    } else {
        const int64_t per_block = kBlock / kWarp;
        const int64_t blocks = ceil_div(rows, per_block);
        const unsigned grid = (unsigned)(blocks < sms * 32 ? blocks : sms * 32);
        rows_kernel<OpT, In, A, Out, kWarp><<<grid, kBlock, 0, st>>>(rows, len, 1, len, x, out);
    }
    return cudaGetLastError();
}

/* Column-style reduction over one reduced axis; partial results per share, then rows. */
template <template <typename> class OpT, typename In, typename A, typename Out>
cudaError_t run_outer(const In *x, const red_geom &g, int64_t nout, Out *out, int sm,
                      cudaStream_t st) {
    const int64_t sms = sm > 0 ? sm : 1;
    const int64_t rdim = g.rdim[0], rstride = g.rstride[0];
    const int64_t want_threads = sms * 2048;
    int64_t bx = kBlock, by = 1, gy = 1;
    if (nout < want_threads && rdim >= 32) {
        bx = kWarp;
        while (bx / 2 >= nout && bx > 1) bx /= 2; /* a power of two covering nout, at most 32 */
        by = kBlock / bx;
        int64_t blocks_x = ceil_div(nout, bx);
        gy = ceil_div(want_threads, blocks_x * kBlock);
        const int64_t max_gy = ceil_div(rdim, 16 * by); /* at least ~16 elements per thread */
        if (gy > max_gy) gy = max_gy;
        if (gy > 65535) gy = 65535;
        if (gy < 1) gy = 1;
    }
    int64_t S = by * gy;
    scratch part(st);
    if (S > 1 && !part.get((size_t)(nout * S) * sizeof(A))) {
        bx = kBlock;
        by = gy = S = 1;
    }
    int64_t blocks_x = ceil_div(nout, bx);
    if (blocks_x > sms * 16) blocks_x = sms * 16;
    const dim3 grid((unsigned)blocks_x, (unsigned)gy), block((unsigned)bx, (unsigned)by);
    if (S == 1) {
        outer_kernel<OpT, In, A, Out><<<grid, block, 0, st>>>(nout, rdim, rstride, g, x, out);
        return cudaGetLastError();
    }
    outer_kernel<OpT, In, A, A><<<grid, block, 0, st>>>(nout, rdim, rstride, g, x,
                                                        static_cast<A *>(part.ptr));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    return run_rows<OpT, A, A, Out>(static_cast<const A *>(part.ptr), nout, S, out, sm, st);
}

/* Reduces along any coalesced geometry, one thread per output (plus splits when few). */
template <template <typename> class OpT, typename In, typename A, typename Out>
cudaError_t run_strided(const In *x, const red_geom &g, int64_t nout, int64_t nred, Out *out,
                        int sm, cudaStream_t st) {
    const int64_t sms = sm > 0 ? sm : 1;
    const int64_t want_threads = sms * 2048;
    int64_t splits = 1;
    if (nout < want_threads && nred >= 2 * 256) {
        splits = ceil_div(want_threads, nout);
        if (splits > nred / 256) splits = nred / 256;
        if (splits > 65535) splits = 65535;
        if (splits < 1) splits = 1;
    }
    scratch part(st);
    if (splits > 1 && !part.get((size_t)(nout * splits) * sizeof(A))) splits = 1;
    const int64_t chunk = ceil_div(nred, splits);
    splits = ceil_div(nred, chunk);
    int64_t block = nout < kBlock ? ceil_div(nout, kWarp) * kWarp : kBlock;
    int64_t blocks = ceil_div(nout, block);
    if (blocks > sms * 16) blocks = sms * 16;
    const dim3 grid((unsigned)blocks, (unsigned)splits);
    if (splits == 1) {
        strided_kernel<OpT, In, A, Out><<<grid, (unsigned)block, 0, st>>>(nout, nred, chunk, g, x,
                                                                          out);
        return cudaGetLastError();
    }
    strided_kernel<OpT, In, A, A><<<grid, (unsigned)block, 0, st>>>(nout, nred, chunk, g, x,
                                                                    static_cast<A *>(part.ptr));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    /* The partial results are rows of `splits` values per output element. */
    return run_rows<OpT, A, A, Out>(static_cast<const A *>(part.ptr), nout, splits, out, sm, st);
}

/* One coalesced axis of the input: size, stride in elements, and whether it is reduced. */
struct axis {
    int64_t dim, stride;
    int reduced;
};

/* Picks the route for one (operation, dtype) and runs it. */
template <template <typename> class OpT, typename In, typename A, typename Out>
cudaError_t reduce_typed(const tfd_op *op, int sm, cudaStream_t st) {
    const tfd_tensor_view &in = op->in[0];
    const In *x = static_cast<const In *>(in.data);
    Out *out = static_cast<Out *>(op->out.data);
    if (in.rank < 0 || in.rank > kMaxRank || op->n_params < 0 || op->n_params > in.rank)
        return cudaErrorInvalidValue;
    int reduced[kMaxRank];
    for (int ax = 0; ax < in.rank; ax++) reduced[ax] = op->n_params == 0;
    for (int i = 0; i < op->n_params; i++) {
        const int64_t ax = op->params[i];
        if (ax < 0 || ax >= in.rank || reduced[ax]) return cudaErrorInvalidValue;
        reduced[ax] = 1;
    }
    /* Coalesce: drop size-1 axes, merge neighbours of the same kind (the input is contiguous). */
    axis ax_list[kMaxRank];
    int n = 0;
    int64_t stride = 1, nout = 1, nred = 1;
    for (int ax = in.rank - 1; ax >= 0; ax--) {
        const int64_t d = in.shape[ax];
        if (d < 1) return cudaErrorInvalidValue;
        if (reduced[ax])
            nred *= d;
        else
            nout *= d;
        if (d > 1) {
            if (n > 0 && ax_list[n - 1].reduced == reduced[ax]) {
                ax_list[n - 1].dim *= d;
            } else {
                ax_list[n] = axis{d, stride, reduced[ax]};
                n++;
            }
        }
        stride *= d;
    }
    if (nout != op->out.numel) return cudaErrorInvalidValue;
    /* ax_list is inner to outer; the geometry wants outer to inner and at least one of each. */
    red_geom g{};
    int n_reduced_axes = 0;
    for (int i = n - 1; i >= 0; i--) {
        if (ax_list[i].reduced) {
            g.rdim[g.nr] = ax_list[i].dim;
            g.rstride[g.nr] = ax_list[i].stride;
            g.nr++;
            n_reduced_axes++;
        } else {
            g.kdim[g.nk] = ax_list[i].dim;
            g.kstride[g.nk] = ax_list[i].stride;
            g.nk++;
        }
    }
    if (g.nk == 0) {
        g.kdim[0] = 1;
        g.kstride[0] = 0;
        g.nk = 1;
    }
    if (g.nr == 0) {
        g.rdim[0] = 1;
        g.rstride[0] = 0;
        g.nr = 1;
    }
    const int inner_reduced = n > 0 && ax_list[0].reduced;
    if (inner_reduced && n_reduced_axes == 1 && nred >= kMinRowLen)
        return run_rows<OpT, In, A, Out>(x, nout, nred, out, sm, st);
    if (inner_reduced && n_reduced_axes > 1 && nred >= kMinRowLen) {
        /* Gather into scratch with the kept axes first and the reduced ones last, then rows. */
        perm_geom pg{};
        pg.rank = 0;
        for (int i = n - 1; i >= 0; i--)
            if (!ax_list[i].reduced) {
                pg.dim[pg.rank] = ax_list[i].dim;
                pg.stride[pg.rank] = ax_list[i].stride;
                pg.rank++;
            }
        for (int i = n - 1; i >= 0; i--)
            if (ax_list[i].reduced) {
                pg.dim[pg.rank] = ax_list[i].dim;
                pg.stride[pg.rank] = ax_list[i].stride;
                pg.rank++;
            }
        perm_coalesce(&pg);
        scratch tmp(st);
        if (tmp.get((size_t)in.numel * sizeof(In))) {
            cudaError_t e = gather_bytes(pg, in.numel, sizeof(In), x, tmp.ptr, sm, st);
            if (e != cudaSuccess) return e;
            return run_rows<OpT, In, A, Out>(static_cast<const In *>(tmp.ptr), nout, nred, out,
                                             sm, st);
        }
        /* No scratch left: the strided route needs none. */
    }
    if (!inner_reduced && g.nr == 1) return run_outer<OpT, In, A, Out>(x, g, nout, out, sm, st);
    return run_strided<OpT, In, A, Out>(x, g, nout, nred, out, sm, st);
}

/* FFT normalization: x[i] *= s in place over n real components (cuFFT leaves outputs unscaled). */
template <typename T>
__global__ void fft_scale_kernel(int64_t n, T *x, T s) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) x[i] *= s;
}

}  // namespace

/* ------------------------------------------------------------- launchers */

extern "C" cudaError_t tfd_cuda_launch_binary(const tfd_op *op, int sm_count,
                                              cudaStream_t stream) {
    switch (op->kind) {
    case TF__OP_ADD: return binary_dtype(op, sm_count, stream, op_add{});
    case TF__OP_SUB: return binary_dtype(op, sm_count, stream, op_sub{});
    case TF__OP_MUL: return binary_dtype(op, sm_count, stream, op_mul{});
    case TF__OP_DIV: return binary_dtype(op, sm_count, stream, op_div{});
    default: break;
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t tfd_cuda_launch_unary(const tfd_op *op, int sm_count,
                                             cudaStream_t stream) {
    const tf_dtype dt = op->in[0].dtype;
    const int real = dt == TF_F32 || dt == TF_F64;
    switch (op->kind) {
    case TF__OP_NEG: return unary_dtype(op, sm_count, stream, op_neg{});
    case TF__OP_CONJ:
        if (real) return copy_input(op, stream); /* conj of a real number is itself */
        if (dt == TF_C64) return launch_map1<c64, c64>(op, sm_count, stream, op_conj{});
        if (dt == TF_C128) return launch_map1<c128, c128>(op, sm_count, stream, op_conj{});
        break;
    case TF__OP_ABS:
        switch (dt) {
        case TF_F32: return launch_map1<float, float>(op, sm_count, stream, op_abs{});
        case TF_F64: return launch_map1<double, double>(op, sm_count, stream, op_abs{});
        case TF_C64: return launch_map1<c64, float>(op, sm_count, stream, op_abs{});
        case TF_C128: return launch_map1<c128, double>(op, sm_count, stream, op_abs{});
        }
        break;
    case TF__OP_EXP: return unary_dtype(op, sm_count, stream, op_exp{});
    case TF__OP_LOG: return unary_dtype(op, sm_count, stream, op_log{});
    case TF__OP_SQRT: return unary_dtype(op, sm_count, stream, op_sqrt{});
    case TF__OP_SQUARE: return unary_dtype(op, sm_count, stream, op_square{});
    default: break;
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t tfd_cuda_launch_axpby(const tfd_op *op, int sm_count,
                                             cudaStream_t stream) {
    /* Real dtypes use only the real part of each coefficient, as on the CPU. */
    const double ar = op->alpha.re, br = op->beta.re;
    const c128 az = {op->alpha.re, op->alpha.im}, bz = {op->beta.re, op->beta.im};
    if (op->kind == TF__OP_SCALE) {
        switch (op->in[0].dtype) {
        case TF_F32:
            return launch_map1<float, float>(op, sm_count, stream, op_scale<float, double>{ar});
        case TF_F64:
            return launch_map1<double, double>(op, sm_count, stream, op_scale<double, double>{ar});
        case TF_C64:
            return launch_map1<c64, c64>(op, sm_count, stream, op_scale<c64, c128>{az});
        case TF_C128:
            return launch_map1<c128, c128>(op, sm_count, stream, op_scale<c128, c128>{az});
        }
        return cudaErrorInvalidValue;
    }
    if (op->kind == TF__OP_AXPBY) {
        switch (op->in[0].dtype) {
        case TF_F32:
            return launch_map2<float>(op, sm_count, stream, op_axpby<float, double>{ar, br});
        case TF_F64:
            return launch_map2<double>(op, sm_count, stream, op_axpby<double, double>{ar, br});
        case TF_C64: return launch_map2<c64>(op, sm_count, stream, op_axpby<c64, c128>{az, bz});
        case TF_C128:
            return launch_map2<c128>(op, sm_count, stream, op_axpby<c128, c128>{az, bz});
        }
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t tfd_cuda_launch_permute(const tfd_op *op, int sm_count,
                                               cudaStream_t stream) {
    const tfd_tensor_view &in = op->in[0];
    const int r = in.rank;
    if (r < 0 || r > kMaxRank || op->n_params != r || op->out.numel != in.numel)
        return cudaErrorInvalidValue;
    int64_t in_stride[kMaxRank];
    int64_t s = 1;
    for (int ax = r - 1; ax >= 0; ax--) {
        in_stride[ax] = s;
        s *= in.shape[ax];
    }
    perm_geom g{};
    g.rank = r;
    unsigned seen = 0;
    for (int i = 0; i < r; i++) {
        const int64_t p = op->params[i];
        if (p < 0 || p >= r || (seen & (1u << p))) return cudaErrorInvalidValue;
        seen |= 1u << p;
        g.dim[i] = in.shape[p];
        g.stride[i] = in_stride[p];
    }
    perm_coalesce(&g);
    return gather_bytes(g, in.numel, tf_dtype_size(in.dtype), in.data, op->out.data, sm_count,
                        stream);
}

extern "C" cudaError_t tfd_cuda_launch_reduce(const tfd_op *op, int sm_count,
                                              cudaStream_t stream) {
    const tf_dtype dt = op->in[0].dtype;
    switch (op->kind) {
    case TF__OP_REDUCE_SUM:
        switch (dt) {
        case TF_F32: return reduce_typed<red_sum, float, double, float>(op, sm_count, stream);
        case TF_F64: return reduce_typed<red_sum, double, double, double>(op, sm_count, stream);
        case TF_C64: return reduce_typed<red_sum, c64, c128, c64>(op, sm_count, stream);
        case TF_C128: return reduce_typed<red_sum, c128, c128, c128>(op, sm_count, stream);
        }
        break;
    case TF__OP_REDUCE_MAX:
        if (dt == TF_F32) return reduce_typed<red_max, float, float, float>(op, sm_count, stream);
        if (dt == TF_F64)
            return reduce_typed<red_max, double, double, double>(op, sm_count, stream);
        break;
    case TF__OP_REDUCE_MIN:
        if (dt == TF_F32) return reduce_typed<red_min, float, float, float>(op, sm_count, stream);
        if (dt == TF_F64)
            return reduce_typed<red_min, double, double, double>(op, sm_count, stream);
        break;
    default: break;
    }
    return cudaErrorInvalidValue;
}

extern "C" cudaError_t tfd_cuda_launch_fft_scale(void *data, int64_t n, int is_double, double s,
                                                 int sm_count, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (data == nullptr) return cudaErrorInvalidValue;
    if (is_double)
        fft_scale_kernel<double><<<grid_for(n, sm_count), kBlock, 0, stream>>>(
            n, static_cast<double *>(data), s);
    else
        fft_scale_kernel<float><<<grid_for(n, sm_count), kBlock, 0, stream>>>(
            n, static_cast<float *>(data), (float)s);
    return cudaGetLastError();
}
