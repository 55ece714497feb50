// gdn_conv.cu: the element-wise front of a gated DeltaNet layer: the causal depthwise conv (kernel 4) + SiLU over
// the q|k|v channels, and the gates beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias).
// Math: ../shared/spec/qwen3_5-model.md §6. The chunked delta rule that consumes both is in gdn.cu.
#include "common.cuh"

namespace {

// the 8 bf16 values of one 16-byte word group (element 2i in the low half of word i) as floats, exactly as bf2f
__device__ __forceinline__ void unpack_words(const uint4 &u, float *f) {
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(words[i] << 16);
        f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
}

unsigned int blocks_for(int64_t items, int threads) { return cs1_grid((items + threads - 1) / threads); }

// ---- conv ---------------------------------------------------------------------------------------------------------

constexpr int kConvThreads = 128;  // consecutive 8-channel groups of one run: a warp reads 512 B of a row at once

// rows t-3+j (j = 0..3) from win[i + j] for output row t = tc + i; same fp32 fmaf order and skip rule as
// gdn_conv1_kernel, so both paths give identical bytes
__device__ __forceinline__ void conv_row(const uint4 *win, int i, const float *wf, int pos, int64_t t,
                                         bf16 *__restrict__ dst) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        if (pos < 3 - j || t - 3 + j < 0) continue;  // history never crosses a prompt start
        float x[8];
        unpack_words(win[i + j], x);
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[e] = fmaf(wf[e * 4 + j], x[e], acc[e]);
    }
    float s[8];  // two groups of 4 interleaved chains: 8 at once spilled at this kernel's 128-register bound
    silu_n<4>(acc, s);
    silu_n<4>(acc + 4, s + 4);
    Pack8 o;
#pragma unroll
    for (int e = 0; e < 8; ++e) o.v[e] = f2bf(s[e]);
    *reinterpret_cast<Pack8 *>(dst) = o;
}

// The conv's work for block `block` of `blocks` (grid-stride over the runs). One thread per (run of `run`
// consecutive rows, 8 channels): the 32 weights stay in registers and each input row is loaded once (plus a 3-row
// halo at the run start), where one thread per row reloaded the weights and every row 4 times. Rows go 4 at a time
// with the next 4 rows already loading (double buffer); <= 128 registers (4 blocks per SM) leaves enough warps to
// overlap the SiLU arithmetic with the loads.
__device__ __forceinline__ void conv_runs(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ w,
                                          const int32_t *__restrict__ positions, bf16 *__restrict__ out, int64_t T,
                                          int64_t channels, int run, int64_t block, int64_t blocks) {
    const int64_t groups = channels / 8;
    const int64_t group_blocks = (groups + kConvThreads - 1) / kConvThreads;
    const int64_t runs = (T + run - 1) / run;
    // channel blocks vary fastest, so neighbouring runs (which share halo rows) run close together and hit L2
    for (int64_t item = block; item < runs * group_blocks; item += blocks) {
        const int64_t g = (item % group_blocks) * kConvThreads + threadIdx.x;
        if (g >= groups) continue;
        const int64_t c0 = g * 8, t0 = (item / group_blocks) * run;
        const int64_t t_end = t0 + run < T ? t0 + run : T;
        const bf16 *col = qkv + c0;
        // rows outside [0, t_end) are never used (skip rule, t < t_end): zeros keep them defined. A row is 4 words
        // (lever 92): a Pack8 select compiled to a predicated PRMT per bf16 half (232 per 4-row step, 27 % of the
        // stall samples at 2048 rows), where zeroed words and a predicated load need none.
        auto load_row = [&](int64_t s) {
            uint4 v = make_uint4(0u, 0u, 0u, 0u);
            if (s >= 0 && s < t_end) v = __ldg(reinterpret_cast<const uint4 *>(col + s * ld));
            return v;
        };
        // the 32 weights as four 16-byte loads issued with the rows' (read through a reference into global memory,
        // they compiled to 32 two-byte loads that waited for the rows: a second memory round trip per thread)
        uint4 wv[4];
        const uint4 *wp = reinterpret_cast<const uint4 *>(w + c0 * 4);
#pragma unroll
        for (int q = 0; q < 4; ++q) wv[q] = __ldg(wp + q);
        uint4 win[7];  // rows tc - 3 .. tc + 3
#pragma unroll
        for (int k = 0; k < 7; ++k) win[k] = load_row(t0 - 3 + k);
        float wf[32];
#pragma unroll
        for (int q = 0; q < 4; ++q) unpack_words(wv[q], wf + 8 * q);  // wf[e * 4 + j] = w[c0 + e, j]
#pragma unroll 1
        for (int64_t tc = t0; tc < t_end; tc += 4) {
            uint4 next[4];
#pragma unroll
            for (int k = 0; k < 4; ++k) next[k] = load_row(tc + 4 + k);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int64_t t = tc + i;
                if (t < t_end) conv_row(win, i, wf, positions[t], t, out + t * channels + c0);
            }
#pragma unroll
            for (int k = 0; k < 3; ++k) win[k] = win[k + 4];
#pragma unroll
            for (int k = 0; k < 4; ++k) win[k + 3] = next[k];
        }
    }
}

__global__ void __launch_bounds__(kConvThreads, 4)
    gdn_conv_runs_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ w,
                         const int32_t *__restrict__ positions, bf16 *__restrict__ out, int64_t T, int64_t channels,
                         int run) {
    conv_runs(qkv, ld, w, positions, out, T, channels, run, blockIdx.x, gridDim.x);
}

// Rows per run (a multiple of 4): long enough to amortise the 3-row halo, short enough that one wave of resident
// threads (H200: 132 SMs x 4 blocks x 128) has work. Only performance depends on it.
int conv_run_length(int64_t T, int64_t channels) {
    const int64_t target_threads = 132 * 512;
    const int64_t rows = (T * (channels / 8) + target_threads - 1) / target_threads;
    const int64_t run = (rows + 3) / 4 * 4;
    return (int)(run < 4 ? 4 : (run > 64 ? 64 : run));
}

// Any alignment: one thread per (row, channel), the same arithmetic in the same order.
__global__ void gdn_conv1_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ w,
                                 const int32_t *__restrict__ positions, bf16 *__restrict__ out, int64_t T,
                                 int64_t channels) {
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < T * channels;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = idx / channels, c = idx % channels;
        const int pos = positions[t];
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t src = t - 3 + j;
            if (pos < 3 - j || src < 0) continue;
            acc = fmaf(bf2f(w[c * 4 + j]), bf2f(qkv[src * ld + c]), acc);
        }
        out[t * channels + c] = f2bf(silu_f(acc));
    }
}

// ---- gates --------------------------------------------------------------------------------------------------------

// beta and g of item idx = t * H + h; the one expression of both gate kernels, so they give the same bytes.
__device__ __forceinline__ void gate_item(const bf16 *__restrict__ ba, int64_t ld, const float *__restrict__ A_log,
                                          const float *__restrict__ dt_bias, float *__restrict__ beta,
                                          float *__restrict__ g, int64_t idx, int64_t H) {
    const int64_t t = idx / H, h = idx % H;
    const float b = bf2f(ba[t * ld + h]), a = bf2f(ba[t * ld + H + h]);
    beta[idx] = round_bf(sigmoid_f(b));  // transformers computes sigmoid in bf16
    g[idx] = -expf(A_log[h]) * softplus_f(a + dt_bias[h]);
}

__global__ void gdn_gates_kernel(const bf16 *__restrict__ ba, int64_t ld, const float *__restrict__ A_log,
                                 const float *__restrict__ dt_bias, float *__restrict__ beta, float *__restrict__ g,
                                 int64_t T, int64_t H) {
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < T * H;
         idx += int64_t(gridDim.x) * blockDim.x)
        gate_item(ba, ld, A_log, dt_bias, beta, g, idx, H);
}

// ---- conv and gates in one launch (one fewer launch per layer; the forward's path) ------------------------------

struct GateArgs {
    const bf16 *ba;
    int64_t ld;
    const float *A_log, *dt_bias;
    float *beta, *g;
    int64_t H;
};

// Blocks [0, conv_blocks) run the conv exactly as gdn_conv_runs_kernel with that grid; the blocks after them the
// gates, kConvThreads items per block and pass.
__global__ void __launch_bounds__(kConvThreads, 4)
    gdn_conv_gates_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ w,
                          const int32_t *__restrict__ positions, bf16 *__restrict__ out, int64_t T, int64_t channels,
                          int run, int64_t conv_blocks, GateArgs ga) {
    if (blockIdx.x < conv_blocks) {
        conv_runs(qkv, ld, w, positions, out, T, channels, run, blockIdx.x, conv_blocks);
        return;
    }
    const int64_t gate_threads = (int64_t(gridDim.x) - conv_blocks) * kConvThreads;
    for (int64_t idx = (int64_t(blockIdx.x) - conv_blocks) * kConvThreads + threadIdx.x; idx < T * ga.H;
         idx += gate_threads)
        gate_item(ga.ba, ga.ld, ga.A_log, ga.dt_bias, ga.beta, ga.g, idx, ga.H);
}

// Argument checks of the conv (T, channels > 0); whether the 16-byte path applies goes to *vec.
int check_conv(const void *qkv, int64_t ld, const void *w, const int32_t *positions, const void *out, int64_t channels,
               bool *vec) {
    CS1_REQUIRE_PTR(qkv);
    CS1_REQUIRE_PTR(w);
    CS1_REQUIRE_PTR(positions);
    CS1_REQUIRE_PTR(out);
    CS1_REQUIRE_SHAPE(ld >= channels);
    CS1_REQUIRE_ALIGNED(qkv, 2);
    CS1_REQUIRE_ALIGNED(w, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    CS1_REQUIRE_ALIGNED(positions, 4);
    *vec = channels % 8 == 0 && ld % 8 == 0 && cs1_aligned(qkv, 16) && cs1_aligned(w, 16) && cs1_aligned(out, 16);
    return 0;
}

// Argument checks of the gates (T, H > 0).
int check_gates(const void *ba, int64_t ld, const float *A_log, const float *dt_bias, const float *beta,
                const float *g, int64_t H) {
    CS1_REQUIRE_PTR(ba);
    CS1_REQUIRE_PTR(A_log);
    CS1_REQUIRE_PTR(dt_bias);
    CS1_REQUIRE_PTR(beta);
    CS1_REQUIRE_PTR(g);
    CS1_REQUIRE_SHAPE(ld >= 2 * H);
    CS1_REQUIRE_ALIGNED(ba, 2);
    CS1_REQUIRE_ALIGNED(A_log, 4);
    CS1_REQUIRE_ALIGNED(dt_bias, 4);
    CS1_REQUIRE_ALIGNED(beta, 4);
    CS1_REQUIRE_ALIGNED(g, 4);
    return 0;
}

// Blocks of the 16-byte conv path and its rows per run.
int64_t conv_blocks(int64_t T, int64_t channels, int *run) {
    *run = conv_run_length(T, channels);
    const int64_t group_blocks = (channels / 8 + kConvThreads - 1) / kConvThreads;
    return cs1_grid((T + *run - 1) / *run * group_blocks);
}

void launch_conv(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out, int64_t T,
                 int64_t channels, bool vec, cudaStream_t st) {
    const auto *x = static_cast<const bf16 *>(qkv);
    const auto *wt = static_cast<const bf16 *>(w);
    auto *y = static_cast<bf16 *>(out);
    if (vec) {
        int run = 0;
        const int64_t blocks = conv_blocks(T, channels, &run);
        gdn_conv_runs_kernel<<<unsigned(blocks), kConvThreads, 0, st>>>(x, ld, wt, positions, y, T, channels, run);
    } else {
        gdn_conv1_kernel<<<blocks_for(T * channels, 256), 256, 0, st>>>(x, ld, wt, positions, y, T, channels);
    }
}

void launch_gates(const GateArgs &ga, int64_t T, cudaStream_t st) {
    gdn_gates_kernel<<<blocks_for(T * ga.H, 256), 256, 0, st>>>(ga.ba, ga.ld, ga.A_log, ga.dt_bias, ga.beta, ga.g, T,
                                                                ga.H);
}

}  // namespace

extern "C" int cs1_gdn_conv(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out,
                            int64_t T, int64_t channels, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && channels >= 0);
    if (T == 0 || channels == 0) return 0;
    bool vec = false;
    if (const int st = check_conv(qkv, ld, w, positions, out, channels, &vec)) return st;
    launch_conv(qkv, ld, w, positions, out, T, channels, vec, cs1_stream(stream));
    CS1_LAUNCHED();
}

extern "C" int cs1_gdn_gates(const void *ba, int64_t ld, const float *A_log, const float *dt_bias, float *beta,
                             float *g, int64_t T, int64_t H, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && H >= 0);
    if (T == 0 || H == 0) return 0;
    if (const int st = check_gates(ba, ld, A_log, dt_bias, beta, g, H)) return st;
    launch_gates(GateArgs{static_cast<const bf16 *>(ba), ld, A_log, dt_bias, beta, g, H}, T, cs1_stream(stream));
    CS1_LAUNCHED();
}

extern "C" int cs1_gdn_conv_gates(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out,
                                  int64_t T, int64_t channels, const void *ba, const float *A_log,
                                  const float *dt_bias, float *beta, float *g, int64_t H, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && channels >= 0 && H >= 0);
    if (T == 0 || (channels == 0 && H == 0)) return 0;
    bool vec = false;
    if (channels > 0)
        if (const int st = check_conv(qkv, ld, w, positions, out, channels, &vec)) return st;
    if (H > 0)
        if (const int st = check_gates(ba, ld, A_log, dt_bias, beta, g, H)) return st;
    const GateArgs ga{static_cast<const bf16 *>(ba), ld, A_log, dt_bias, beta, g, H};
    cudaStream_t st = cs1_stream(stream);
    if (vec && H > 0) {  // the forward's case: one launch
        int run = 0;
        const int64_t blocks = conv_blocks(T, channels, &run);
        const int64_t gate_blocks = blocks_for(T * H, kConvThreads);
        gdn_conv_gates_kernel<<<unsigned(blocks + gate_blocks), kConvThreads, 0, st>>>(
            static_cast<const bf16 *>(qkv), ld, static_cast<const bf16 *>(w), positions, static_cast<bf16 *>(out), T,
            channels, run, blocks, ga);
        CS1_LAUNCHED();
    }
    if (channels > 0) {
        launch_conv(qkv, ld, w, positions, out, T, channels, vec, st);
        CS1_CUDA(cudaGetLastError());
    }
    if (H > 0) launch_gates(ga, T, st);
    CS1_LAUNCHED();
}
