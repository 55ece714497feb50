// common.cuh: shared helpers for every .cu of libqwen3_5_cuda.so (bf16 conversion, reductions, PyTorch-equivalent
// activations, status helpers and the argument-check macros).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cs1.h"

// ---- status helpers ----------------------------------------------------------------------------------------------

// A cudaError_t as a cs1 status (the CUDA range 1..999 passes through unchanged).
static inline int cs1_cuda_status(cudaError_t e) { return (int)e; }

// The status of a failed runtime call; also clears the (non-sticky) last error so a later kernel launch check does
// not report this stale failure. Sticky errors cannot be cleared and keep being reported, as they should.
static inline int cs1_fail(cudaError_t e) {
    if (e != cudaSuccess) (void)cudaGetLastError();
    return (int)e;
}

// Argument checks: return a library status before anything is launched.
#define CS1_REQUIRE(cond, code)    \
    do {                           \
        if (!(cond)) return (code); \
    } while (0)
#define CS1_REQUIRE_PTR(p) CS1_REQUIRE((p) != nullptr, CS1_ERR_NULL)
#define CS1_REQUIRE_SHAPE(cond) CS1_REQUIRE((cond), CS1_ERR_SHAPE)
#define CS1_REQUIRE_ALIGNED(p, bytes) CS1_REQUIRE(((uintptr_t)(p) % (uintptr_t)(bytes)) == 0, CS1_ERR_ALIGNMENT)

// Status of a CUDA runtime call: return its code (clearing the last error) when it fails.
#define CS1_CUDA(call)                                   \
    do {                                                 \
        cudaError_t cs1_e_ = (call);                     \
        if (cs1_e_ != cudaSuccess) return cs1_fail(cs1_e_); \
    } while (0)

// After a kernel launch: the launch status (configuration errors, or a sticky error from earlier work).
#define CS1_LAUNCHED() return cs1_cuda_status(cudaGetLastError())

static inline cudaStream_t cs1_stream(void *s) { return reinterpret_cast<cudaStream_t>(s); }

static inline bool cs1_aligned(const void *p, size_t bytes) { return ((uintptr_t)p % bytes) == 0; }

// Grid sizes stay within the 2^31-1 x-dimension limit; kernels use grid-stride loops over rows.
static inline unsigned int cs1_grid(int64_t blocks) {
    const int64_t cap = 1 << 30;
    return (unsigned int)(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// ---- bf16 ---------------------------------------------------------------------------------------------------------

typedef __nv_bfloat16 bf16;

__device__ __forceinline__ float bf2f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ bf16 f2bf(float v) { return __float2bfloat16_rn(v); }
// round a float to the nearest bf16 value, staying in float
__device__ __forceinline__ float round_bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// 8 bf16 values in one 16-byte load/store.
struct __align__(16) Pack8 {
    bf16 v[8];
};

// ---- activations (PyTorch's CUDA formulas for bf16 inputs, computed in fp32) ----------------------------------------

// torch.sigmoid: 1 / (1 + exp(-x))
__device__ __forceinline__ float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }
// F.silu: x / (1 + exp(-x))
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// silu_f of n values, bit for bit, with no branch per value. silu_f's IEEE division compiles to a reciprocal, Newton
// steps and a check that branches to a slow path, so each value's ~15 dependent instructions run alone. Here each
// quotient comes from the same steps without the check (an approximate reciprocal, one Newton step, a residual
// correction: correctly rounded while every operand stays well inside the normal range), and the values run
// interleaved. When any value leaves that range (zero, |x| < 2^-60 or > 2^64, x < ~-44, inf, NaN), all n are recomputed
// with silu_f. benchmarks/silu_exact.cu compares it with silu_f on every fp32 input.
template <int n>
__device__ __forceinline__ void silu_n(const float *x, float *out) {
    bool in_range = true;
#pragma unroll
    for (int e = 0; e < n; ++e) {
        const float d = 1.0f + expf(-x[e]);
        float y;
#ifdef GDN_MMA_EMULATED  // the CPU block emulator (benchmarks/gdn_emulator): no PTX; its bytes are its own
        y = 1.0f / d;
#else
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(d));
#endif
        y = fmaf(fmaf(-d, y, 1.0f), y, y);
        const float q = x[e] * y;
        out[e] = fmaf(fmaf(-d, q, x[e]), y, q);
        const float a = fabsf(x[e]);
        in_range &= d <= 0x1p64f && a >= 0x1p-60f && a <= 0x1p64f;
    }
    if (!in_range) {
#pragma unroll
        for (int e = 0; e < n; ++e) out[e] = silu_f(x[e]);
    }
}
// silu_f of 8 packed bf16 values, as two interleaved groups of 4 (8 at once took 10-20 more registers in its users)
__device__ __forceinline__ void silu_pack8(const Pack8 &x, float out[8]) {
    float f[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = bf2f(x.v[e]);
    silu_n<4>(f, out);
    silu_n<4>(f + 4, out + 4);
}
// F.softplus (beta 1, threshold 20): log1p(exp(x)), x itself above 20
__device__ __forceinline__ float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// ---- reductions ---------------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` is __shared__ float[32]; the function may be called repeatedly with the same scratch.
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float t = lane < nwarps ? scratch[lane] : 0.0f;
    return warp_sum(t);
}
