// pdl_probe.cu: what programmatic dependent launch (PDL) saves per kernel boundary inside a CUDA graph on this GPU.
//
//   nvcc -O3 -arch=sm_90 -o /tmp/pdl_probe benchmarks/pdl_probe.cu && /tmp/pdl_probe
//
// A graph of `kLaunches` dependent launches of one small kernel (each block reads, updates and writes its slice of
// a buffer that the previous launch wrote: a real data dependence), captured three ways:
//   plain    ordinary launches (the forward's graphs today);
//   wait     launched with cudaLaunchAttributeProgrammaticStreamSerialization, the kernel runs griddepcontrol.wait
//            before its first read (no explicit trigger: the predecessor triggers when it completes);
//   trigger  as wait, and every kernel also runs griddepcontrol.launch_dependents at its start, so the next grid
//            is launched early and waits on the device.
// Work per launch is varied (inner iterations) from a ~2 us kernel to a ~10 us one, at 264 blocks x 256 threads
// (two per SM on 132 SMs). Printed: median graph time per launch over `kReps` replays, and the check that all
// three variants computed the same buffer (bit for bit: the same arithmetic in the same order).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_check.h"

constexpr int kBlocks = 264, kThreads = 256, kLaunches = 400, kReps = 30;

template <int kMode>  // 0 plain, 1 wait, 2 trigger + wait
__global__ void __launch_bounds__(kThreads) step(float *buf, int iters) {
    if (kMode == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    if (kMode >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
    const int i = blockIdx.x * kThreads + threadIdx.x;
    float x = buf[i];
    for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.001f);
    buf[i] = x;
}

template <int kMode>
void launch(float *buf, int iters, cudaStream_t s) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(kBlocks);
    cfg.blockDim = dim3(kThreads);
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = kMode >= 1 ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&cfg, step<kMode>, buf, iters));
}

template <int kMode>
float time_graph(float *buf, const std::vector<float> &init, int iters, cudaStream_t s, std::vector<float> &out) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < kLaunches; ++l) launch<kMode>(buf, iters, s);
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> ms(kReps);
    for (int r = -2; r < kReps; ++r) {
        CHECK(cudaMemcpyAsync(buf, init.data(), init.size() * 4, cudaMemcpyHostToDevice, s));
        CHECK(cudaEventRecord(a, s));
        CHECK(cudaGraphLaunch(ge, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaStreamSynchronize(s));
        if (r >= 0) CHECK(cudaEventElapsedTime(&ms[r], a, b));
    }
    out.resize(init.size());
    CHECK(cudaMemcpy(out.data(), buf, out.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    CHECK(cudaGraphExecDestroy(ge));
    CHECK(cudaGraphDestroy(g));
    std::nth_element(ms.begin(), ms.begin() + kReps / 2, ms.end());
    return ms[kReps / 2] * 1000.0f / kLaunches;  // us per launch
}

int main() {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    std::printf("device %s, %d SMs; %d launches per graph, %d blocks x %d threads, median of %d replays\n", p.name,
                p.multiProcessorCount, kLaunches, kBlocks, kThreads, kReps);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = size_t(kBlocks) * kThreads;
    std::vector<float> init(n);
    for (size_t i = 0; i < n; ++i) init[i] = 1.0f + float((i * 2654435761u) % 1000) / 1000.0f;  // never zero
    float *buf;
    CHECK(cudaMalloc(&buf, n * 4));
    std::printf("%8s | %9s %9s %9s | %9s %9s | %s\n", "iters", "plain us", "wait us", "trigger", "wait-pl", "trig-pl",
                "same bits");
    for (int iters : {16, 256, 1024, 2048, 4096}) {
        std::vector<float> o0, o1, o2;
        const float t0 = time_graph<0>(buf, init, iters, s, o0);
        const float t1 = time_graph<1>(buf, init, iters, s, o1);
        const float t2 = time_graph<2>(buf, init, iters, s, o2);
        const bool same = std::memcmp(o0.data(), o1.data(), n * 4) == 0 && std::memcmp(o0.data(), o2.data(), n * 4) == 0;
        std::printf("%8d | %9.3f %9.3f %9.3f | %+9.3f %+9.3f | %s\n", iters, t0, t1, t2, t1 - t0, t2 - t0,
                    same ? "yes" : "NO");
    }
    CHECK(cudaFree(buf));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
