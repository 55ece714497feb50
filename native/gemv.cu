// gemv.cu: y[M, N] = x[M, K] * w[N, K]^T for a few rows (M <= 4): the last layer's projections at the read-out rows
// (cs1_gemv).
//
// At one to four rows a projection is a pass over its weights and nothing else. cuBLASLt's kernels at M = 1 stream
// them at 1.6-3 TB/s on the H200 (LEVERS, lever 60), below the ~4.25 TB/s a copy reaches. Here a warp owns kRows
// weight rows: lane l reads elements l*8 .. l*8+7 of every 256-element step (one 512-byte coalesced read per row and
// step), kSteps steps of all its rows issued before the first use, and x (small, shared by every block) comes
// through L1. fp32 sums: per lane in K order, then a butterfly over the 32 lanes; one bf16 rounding.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kRows = 2;    // weight rows per warp
constexpr int kSteps = 4;   // 256-element steps per row in flight: 8 loads of 16 bytes per lane
constexpr int kStepElems = 256;
constexpr int kMaxM = 4;

__device__ __forceinline__ void fma8(float &acc, const Pack8 &a, const Pack8 &b) {
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(bf2f(a.v[e]), bf2f(b.v[e]), acc);
}

template <int M>
__global__ void __launch_bounds__(kThreads, 2) gemv_kernel(const bf16 *__restrict__ x, int64_t ldx,
                                                        const bf16 *__restrict__ w, bf16 *__restrict__ y, int64_t ldy,
                                                        int N, int K) {
    const int lane = threadIdx.x & 31;
    const int n0 = (blockIdx.x * kWarps + (threadIdx.x >> 5)) * kRows;
    if (n0 >= N) return;  // whole warps only: the butterfly below needs all 32 lanes
    const bf16 *wr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wr[r] = w + (int64_t)min(n0 + r, N - 1) * K;  // a row past N: reread, not stored
    float acc[M][kRows] = {};
    // K in 256-element steps; a partial last step masks lanes past K (K % 8 == 0, so a lane is all in or all out)
    for (int k0 = 0; k0 < K; k0 += kSteps * kStepElems) {
        Pack8 wv[kSteps][kRows];
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int k = k0 + s * kStepElems + lane * 8;
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                if (k < K) {  // streaming loads: each weight byte is read once per call
                    const uint4 u = __ldcs(reinterpret_cast<const uint4 *>(wr[r] + k));
                    wv[s][r] = *reinterpret_cast<const Pack8 *>(&u);
                }
        }
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int k = k0 + s * kStepElems + lane * 8;
            if (k >= K) break;
#pragma unroll
            for (int m = 0; m < M; ++m) {
                const Pack8 xv = *reinterpret_cast<const Pack8 *>(x + m * ldx + k);
#pragma unroll
                for (int r = 0; r < kRows; ++r) fma8(acc[m][r], xv, wv[s][r]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            const float v = warp_sum(acc[m][r]);
            if (lane == m * kRows + r && n0 + r < N) y[m * ldy + n0 + r] = f2bf(v);
        }
}

}  // namespace

extern "C" int cs1_gemv(const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M, int64_t N,
                        int64_t K, void *stream) {
    CS1_REQUIRE_SHAPE(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return CS1_OK;
    CS1_REQUIRE_SHAPE(M <= kMaxM && K > 0 && K % 8 == 0 && K <= (1 << 24) && N <= (1 << 30));
    CS1_REQUIRE_SHAPE(ldx >= K && ldy >= N);
    CS1_REQUIRE_PTR(x);
    CS1_REQUIRE_PTR(w);
    CS1_REQUIRE_PTR(y);
    CS1_REQUIRE(cs1_aligned(x, 16) && cs1_aligned(w, 16) && cs1_aligned(y, 2) && ldx % 8 == 0, CS1_ERR_ALIGNMENT);
    const auto *xb = static_cast<const bf16 *>(x);
    const auto *wb = static_cast<const bf16 *>(w);
    auto *yb = static_cast<bf16 *>(y);
    const int64_t warps = (N + kRows - 1) / kRows;
    const unsigned blocks = cs1_grid((warps + kWarps - 1) / kWarps);
    cudaStream_t s = cs1_stream(stream);
    switch (M) {
        case 1: gemv_kernel<1><<<blocks, kThreads, 0, s>>>(xb, ldx, wb, yb, ldy, (int)N, (int)K); break;
        case 2: gemv_kernel<2><<<blocks, kThreads, 0, s>>>(xb, ldx, wb, yb, ldy, (int)N, (int)K); break;
        case 3: gemv_kernel<3><<<blocks, kThreads, 0, s>>>(xb, ldx, wb, yb, ldy, (int)N, (int)K); break;
        default: gemv_kernel<4><<<blocks, kThreads, 0, s>>>(xb, ldx, wb, yb, ldy, (int)N, (int)K); break;
    }
    CS1_LAUNCHED();
}
