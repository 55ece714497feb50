// l2_prefetch_probe.cu: how much of a GEMM's weight stream a small kernel before it can pull into L2 while it runs,
// and what that costs the small kernel.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/l2_prefetch_probe benchmarks/l2_prefetch_probe.cu -lcublas && /tmp/l2_prefetch_probe
//
// Why: at prompt-sized M the forward streams 7.1 GB of weights through GEMMs, and between them runs ~2.3 ms (at 160
// rows) of latency-bound kernels that leave HBM nearly idle (LEVERS, lever 48). If those kernels issue bulk L2
// prefetches of the next GEMM's weights (`cp.async.bulk.prefetch.L2`, fire and forget), the GEMM reads part of its
// weights from L2.
// One step of the timed graph: `window` (block 0 walks `steps` dependent loads over a 4 MiB cycle that sits in L2:
// a latency-bound kernel like the forward's small ones; blocks 1..kPrefetchBlocks only issue the prefetches of the
// step's weight copy and exit), then cublasGemmEx y[M, N] = x[M, K] w[N, K]^T on that copy. Copies rotate over a
// pool of >= 1 GiB, so nothing of a copy is in L2 unless this step prefetched it.
// Patterns: "prefix" = the first fraction of every weight row (a GEMM that walks K from 0 meets it first);
// "stripe" = 256-byte chunks spread evenly along every row (each K range of any split-K gets its share).
// Printed per shape, window and pattern: microseconds per step of window + GEMM, of the window alone, and their
// difference (the GEMM's share), medians over kReps graph replays of kSteps steps.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_check.h"

constexpr int kM = 160, kSteps = 20, kReps = 15, kPrefetchBlocks = 16, kThreads = 256;
constexpr int kChaseWords = 1 << 20;  // 4 MiB of uint32 indices: one random cycle
constexpr int kStripeChunk = 256;     // bytes per stripe chunk

struct Prefetch {
    const char *base;   // the weight copy
    long long rows;     // N
    long long row_bytes;
    int pattern;        // 0 none, 1 prefix, 2 stripe
    float fraction;
};

__device__ __forceinline__ void bulk_prefetch_l2(const void *p, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__global__ void __launch_bounds__(kThreads) window(const uint32_t *cycle, int steps, uint32_t *sink, Prefetch pf) {
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) {
            uint32_t i = 0;
            for (int s = 0; s < steps; ++s) i = __ldcg(cycle + i);
            sink[0] = i;
        }
        return;
    }
    if (pf.pattern == 0) return;
    const long long t = (long long)(blockIdx.x - 1) * kThreads + threadIdx.x;
    const long long threads = (long long)(gridDim.x - 1) * kThreads;
    if (pf.pattern == 1) {
        // prefix: one bulk prefetch per row, 16-byte multiple
        const uint32_t bytes = (uint32_t)((long long)(pf.fraction * pf.row_bytes) / 16 * 16);
        if (bytes == 0) return;
        for (long long r = t; r < pf.rows; r += threads) bulk_prefetch_l2(pf.base + r * pf.row_bytes, bytes);
    } else {
        // stripe: chunk c of every row when floor(c * f) moves, i.e. an even share f of the row's chunks
        const long long chunks = pf.row_bytes / kStripeChunk;
        const long long total = pf.rows * chunks;
        for (long long j = t; j < total; j += threads) {
            const long long r = j / chunks, c = j % chunks;
            if ((long long)((c + 1) * pf.fraction) == (long long)(c * pf.fraction)) continue;
            bulk_prefetch_l2(pf.base + r * pf.row_bytes + c * kStripeChunk, kStripeChunk);
        }
    }
}

struct Shape { const char *name; int n, k; };

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs, L2 %.1f MiB; M = %d, graphs of %d steps, median of %d replays\n", prop.name,
                prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, kM, kSteps, kReps);
    // a random single cycle through kChaseWords words (Sattolo), in L2 after the first walk
    std::vector<uint32_t> host(kChaseWords);
    for (int i = 0; i < kChaseWords; ++i) host[i] = i;
    uint64_t rng = 88172645463325252ull;
    for (int i = kChaseWords - 1; i > 0; --i) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        std::swap(host[i], host[rng % i]);
    }
    uint32_t *cycle, *sink;
    CHECK(cudaMalloc(&cycle, kChaseWords * 4));
    CHECK(cudaMalloc(&sink, 64));
    CHECK(cudaMemcpy(cycle, host.data(), kChaseWords * 4, cudaMemcpyHostToDevice));
    cublasHandle_t handle;
    CHECK_BLAS(cublasCreate(&handle));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_BLAS(cublasSetStream(handle, stream));
    const Shape shapes[] = {{"out/o 2560x4096", 2560, 4096}, {"down 2560x9216", 2560, 9216},
                            {"gdn_in 12352x2560", 12352, 2560}, {"gate_up 18432x2560", 18432, 2560}};
    const int windows[] = {32, 320};  // dependent L2 loads: a ~5 us and a ~50 us kernel
    const float fractions[] = {0.0f, 0.125f, 0.25f, 0.5f, 1.0f};
    const double l2_budget = 0.6 * prop.l2CacheSize;  // prefetch no more than this per step
    for (const Shape &s : shapes) {
        const long long wbytes = 2ll * s.n * s.k;
        const int copies = (int)std::max<long long>(4, (1ll << 30) / wbytes + 1);
        __nv_bfloat16 *pool, *x, *y;
        CHECK(cudaMalloc(&pool, wbytes * copies));
        CHECK(cudaMalloc(&x, 2ll * kM * s.k));
        CHECK(cudaMalloc(&y, 2ll * kM * s.n));
        probe_fill_bf16<<<1024, 256, 0, stream>>>(pool, wbytes / 2 * copies, 1u);
        probe_fill_bf16<<<64, 256, 0, stream>>>(x, (long long)kM * s.k, 2u);
        CHECK(cudaStreamSynchronize(stream));
        const float one = 1.0f, zero = 0.0f;
        for (int steps : windows) {
            for (int pattern = 1; pattern <= 2; ++pattern) {
                for (float f : fractions) {
                    if (f * wbytes > l2_budget) continue;
                    if (f == 0.0f && pattern == 2) continue;  // the same as prefix at 0
                    double med[2];
                    for (int with_gemm = 0; with_gemm < 2; ++with_gemm) {
                        cudaGraph_t graph;
                        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
                        for (int i = 0; i < kSteps; ++i) {
                            const char *copy = (const char *)pool + (long long)(i % copies) * wbytes;
                            Prefetch pf{copy, s.n, 2ll * s.k, f == 0.0f ? 0 : pattern, f};
                            window<<<1 + kPrefetchBlocks, kThreads, 0, stream>>>(cycle, steps, sink, pf);
                            if (with_gemm)
                                CHECK_BLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, kM, s.k, &one, copy,
                                                          CUDA_R_16BF, s.k, x, CUDA_R_16BF, s.k, &zero, y, CUDA_R_16BF,
                                                          s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                        }
                        CHECK(cudaStreamEndCapture(stream, &graph));
                        med[with_gemm] = probe_graph_us(graph, stream, kSteps, kReps);
                        CHECK(cudaGraphDestroy(graph));
                    }
                    std::printf("%-20s window %3d  %-6s f %.3f (%6.1f MB)  step %7.2f us  window %6.2f  gemm %6.2f\n",
                                s.name, steps, f == 0.0f ? "none" : (pattern == 1 ? "prefix" : "stripe"), f,
                                f * wbytes / 1e6, med[1], med[0], med[1] - med[0]);
                    std::fflush(stdout);
                }
            }
        }
        CHECK(cudaFree(pool));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
    CHECK_BLAS(cublasDestroy(handle));
    return 0;
}
