// conv_runs.cu: how long the GDN conv + gates launch (native/gdn_conv.cu) takes at each run length, per prompt
// length, on this GPU; the data behind conv_run_length's policy (lever 32 in benchmarks/LEVERS.md).
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Inative -o /tmp/conv_runs benchmarks/conv_runs.cu && /tmp/conv_runs
//
// The 4B's shapes: 8192 conv channels inside a 12352-wide projection row, 32 value heads of gates. For each T and
// each run length (1 .. 64 rows per thread) a CUDA graph of kLaunches launches is replayed kReps times; printed:
// the median microseconds per launch, the run the library's policy picks, and a check that every run length gave
// the same bytes as run 4 (the arithmetic per row does not depend on the run).
#include "../native/gdn_conv.cu"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "probe_check.h"

namespace {

constexpr int kLaunches = 20;
constexpr int kReps = 30;
constexpr int64_t kChannels = 8192, kLd = 12352, kHeads = 32;
constexpr int64_t kBaColumn = 12288;  // b and a after q|k|v (8192) and z (4096)

uint16_t bf16_bits(float x) {  // round to nearest even
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float lcg_normalish(uint64_t &s) {  // sum of four uniforms, centred: cheap, non-zero, varied
    float acc = 0.0f;
    for (int i = 0; i < 4; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        acc += float((s >> 40) & 0xffffff) / float(1 << 24);
    }
    return (acc - 2.0f) * 1.7f;
}

struct Inputs {
    bf16 *qkv, *w, *out;
    int32_t *pos;
    float *a_log, *dt_bias, *beta, *g;
};

void launch(const Inputs &in, int64_t T, int run, cudaStream_t st) {
    const int64_t group_blocks = (kChannels / 8 + kConvThreads - 1) / kConvThreads;
    const int64_t blocks = cs1_grid((T + run - 1) / run * group_blocks);
    const int64_t gate_blocks = blocks_for(T * kHeads, kConvThreads);
    const GateArgs ga{in.qkv + kBaColumn, kLd, in.a_log, in.dt_bias, in.beta, in.g, kHeads};
    gdn_conv_gates_kernel<<<unsigned(blocks + gate_blocks), kConvThreads, 0, st>>>(
        in.qkv, kLd, in.w, in.pos, in.out, T, kChannels, run, blocks, ga);
}

}  // namespace

int main() {
    const int64_t kMaxT = 4096;
    std::vector<uint16_t> hx(size_t(kMaxT) * kLd), hw(size_t(kChannels) * 4);
    uint64_t seed = 12345;
    for (auto &v : hx) v = bf16_bits(lcg_normalish(seed));
    for (auto &v : hw) v = bf16_bits(0.5f * lcg_normalish(seed));
    std::vector<int32_t> hpos(kMaxT);
    for (int64_t t = 0; t < kMaxT; ++t) hpos[t] = int32_t(t % 700);  // prompts of 700 rows: starts inside runs
    std::vector<float> hal(kHeads), hdt(kHeads);
    for (int h = 0; h < kHeads; ++h) { hal[h] = 0.1f * h - 1.0f; hdt[h] = 0.05f * h; }
    Inputs in{};
    CHECK(cudaMalloc(&in.qkv, hx.size() * 2));
    CHECK(cudaMalloc(&in.w, hw.size() * 2));
    CHECK(cudaMalloc(&in.out, size_t(kMaxT) * kChannels * 2));
    CHECK(cudaMalloc(&in.pos, kMaxT * 4));
    CHECK(cudaMalloc(&in.a_log, kHeads * 4));
    CHECK(cudaMalloc(&in.dt_bias, kHeads * 4));
    CHECK(cudaMalloc(&in.beta, kMaxT * kHeads * 4));
    CHECK(cudaMalloc(&in.g, kMaxT * kHeads * 4));
    CHECK(cudaMemcpy(in.qkv, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(in.w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(in.pos, hpos.data(), kMaxT * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(in.a_log, hal.data(), kHeads * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(in.dt_bias, hdt.data(), kHeads * 4, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    const int runs[] = {1, 2, 4, 8, 16, 32, 64};
    const int64_t lengths[] = {128, 160, 256, 512, 1024, 2048, 4096};
    std::printf("us per conv+gates launch (median of %d graph replays x %d launches); * = policy's run\n", kReps,
                kLaunches);
    std::printf("%6s %6s", "T", "policy");
    for (int r : runs) std::printf(" %8s", ("run" + std::to_string(r)).c_str());
    std::printf("  same bytes\n");
    bool all_same = true;
    for (int64_t T : lengths) {
        const int policy = conv_run_length(T, kChannels);
        std::vector<uint16_t> ref(size_t(T) * kChannels), got(ref.size());
        std::printf("%6lld %6d", (long long)T, policy);
        bool same = true;
        for (int run : runs) {
            CHECK(cudaMemset(in.out, 0xff, size_t(T) * kChannels * 2));  // poison
            launch(in, T, run, st);
            CHECK(cudaStreamSynchronize(st));
            CHECK(cudaMemcpy(run == 1 ? ref.data() : got.data(), in.out, ref.size() * 2, cudaMemcpyDeviceToHost));
            if (run != 1 && std::memcmp(ref.data(), got.data(), ref.size() * 2) != 0) same = false;
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < kLaunches; ++i) launch(in, T, run, st);
            CHECK(cudaStreamEndCapture(st, &graph));
            CHECK(cudaGraphInstantiate(&exec, graph, 0));
            CHECK(cudaGraphLaunch(exec, st));  // warm-up
            std::vector<float> ms(kReps);
            for (int r = 0; r < kReps; ++r) {
                CHECK(cudaEventRecord(e0, st));
                CHECK(cudaGraphLaunch(exec, st));
                CHECK(cudaEventRecord(e1, st));
                CHECK(cudaEventSynchronize(e1));
                CHECK(cudaEventElapsedTime(&ms[r], e0, e1));
            }
            std::nth_element(ms.begin(), ms.begin() + kReps / 2, ms.end());
            std::printf(" %7.2f%s", 1000.0f * ms[kReps / 2] / kLaunches, run == policy ? "*" : " ");
            CHECK(cudaGraphExecDestroy(exec));
            CHECK(cudaGraphDestroy(graph));
        }
        std::printf("  %s\n", same ? "yes" : "NO");
        all_same = all_same && same;
    }
    std::printf(all_same ? "every run length gave the same bytes\n" : "RUN LENGTHS DIFFER\n");
    return all_same ? 0 : 1;
}
