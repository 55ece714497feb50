// probe_check.h: shared pieces of the stand-alone CUDA probes in benchmarks/ (pdl_probe.cu, conv_runs.cu,
// l2_prefetch_probe.cu, splitk_batch_probe.cu): CHECK(call) and CHECK_BLAS(call) print the failing call and its status, then exit 1;
// probe_fill_bf16 writes small hashed values (never all zeros); probe_graph_us times a captured graph.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                                                   \
    do {                                                                                              \
        cudaError_t e_ = (call);                                                                      \
        if (e_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            std::exit(1);                                                                             \
        }                                                                                             \
    } while (0)

// A cuBLAS or cuBLASLt call (status 0 = success): print the call and its status, then exit 1.
#define CHECK_BLAS(call)                                                                         \
    do {                                                                                         \
        const int s_ = (int)(call);                                                              \
        if (s_ != 0) {                                                                           \
            std::fprintf(stderr, "%s:%d %s: status %d\n", __FILE__, __LINE__, #call, s_);        \
            std::exit(1);                                                                        \
        }                                                                                        \
    } while (0)

// p[i] = a hash of (i, seed) scaled to [-0.025, 0.025): weights and activations of a GEMM probe
__global__ void probe_fill_bf16(__nv_bfloat16 *p, long long n, uint32_t seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * 0.05f);
    }
}

// Median microseconds per step of `graph` (a graph of `steps` steps) over `reps` replays, after 2 untimed ones.
inline float probe_graph_us(cudaGraph_t graph, cudaStream_t stream, int steps, int reps) {
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> times;
    for (int rep = 0; rep < reps + 2; ++rep) {
        CHECK(cudaEventRecord(a, stream));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (rep >= 2) times.push_back(ms * 1000.0f / steps);
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaGraphExecDestroy(exec));
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}
