// gdn_conv.cu: the element-wise front of a gated DeltaNet layer: the causal depthwise conv (kernel 4) + SiLU over
// the q|k|v channels, and the gates beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias).
// Math: ../shared/spec/qwen3_5-model.md §6. The chunked delta rule that consumes both is in gdn.cu.
#include "common.cuh"

namespace {

__device__ __forceinline__ void unpack8(const Pack8 &p, float *f) {
#pragma unroll
    for (int e = 0; e < 8; ++e) f[e] = bf2f(p.v[e]);
}

unsigned int blocks_for(int64_t items, int threads) { return cs1_grid((items + threads - 1) / threads); }

// ---- conv ---------------------------------------------------------------------------------------------------------

// One thread per (row, 8 channels): 16-byte loads of 4 input rows and of the 8x4 weights.
__global__ void gdn_conv8_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ w,
                                 const int32_t *__restrict__ positions, bf16 *__restrict__ out, int64_t T,
                                 int64_t channels) {
    const int64_t groups = channels / 8;
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < T * groups;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = idx / groups, c0 = (idx % groups) * 8;
        const int pos = positions[t];
        float wf[32];
        const Pack8 *wp = reinterpret_cast<const Pack8 *>(w + c0 * 4);
#pragma unroll
        for (int q = 0; q < 4; ++q) unpack8(wp[q], wf + 8 * q);  // wf[e * 4 + j] = w[c0 + e, j]
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t src = t - 3 + j;
            if (pos < 3 - j || src < 0) continue;  // history never crosses a prompt start
            float x[8];
            unpack8(*reinterpret_cast<const Pack8 *>(qkv + src * ld + c0), x);
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] = fmaf(wf[e * 4 + j], x[e], acc[e]);
        }
        Pack8 o;
#pragma unroll
        for (int e = 0; e < 8; ++e) o.v[e] = f2bf(silu_f(acc[e]));
        *reinterpret_cast<Pack8 *>(out + t * channels + c0) = o;
    }
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

__global__ void gdn_gates_kernel(const bf16 *__restrict__ ba, int64_t ld, const float *__restrict__ A_log,
                                 const float *__restrict__ dt_bias, float *__restrict__ beta, float *__restrict__ g,
                                 int64_t T, int64_t H) {
    for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < T * H;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = idx / H, h = idx % H;
        const float b = bf2f(ba[t * ld + h]), a = bf2f(ba[t * ld + H + h]);
        beta[idx] = round_bf(sigmoid_f(b));  // transformers computes sigmoid in bf16
        g[idx] = -expf(A_log[h]) * softplus_f(a + dt_bias[h]);
    }
}

}  // namespace

extern "C" int cs1_gdn_conv(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out,
                            int64_t T, int64_t channels, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && channels >= 0);
    if (T == 0 || channels == 0) return 0;
    CS1_REQUIRE_PTR(qkv);
    CS1_REQUIRE_PTR(w);
    CS1_REQUIRE_PTR(positions);
    CS1_REQUIRE_PTR(out);
    CS1_REQUIRE_SHAPE(ld >= channels);
    CS1_REQUIRE_ALIGNED(qkv, 2);
    CS1_REQUIRE_ALIGNED(w, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    CS1_REQUIRE_ALIGNED(positions, 4);
    const bool vec = channels % 8 == 0 && ld % 8 == 0 && cs1_aligned(qkv, 16) && cs1_aligned(w, 16) &&
                     cs1_aligned(out, 16);
    const auto *x = static_cast<const bf16 *>(qkv);
    const auto *wt = static_cast<const bf16 *>(w);
    auto *y = static_cast<bf16 *>(out);
    if (vec)
        gdn_conv8_kernel<<<blocks_for(T * (channels / 8), 256), 256, 0, cs1_stream(stream)>>>(x, ld, wt, positions, y,
                                                                                               T, channels);
    else
        gdn_conv1_kernel<<<blocks_for(T * channels, 256), 256, 0, cs1_stream(stream)>>>(x, ld, wt, positions, y, T,
                                                                                         channels);
    CS1_LAUNCHED();
}

extern "C" int cs1_gdn_gates(const void *ba, int64_t ld, const float *A_log, const float *dt_bias, float *beta,
                             float *g, int64_t T, int64_t H, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && H >= 0);
    if (T == 0 || H == 0) return 0;
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
    gdn_gates_kernel<<<blocks_for(T * H, 256), 256, 0, cs1_stream(stream)>>>(static_cast<const bf16 *>(ba), ld, A_log,
                                                                             dt_bias, beta, g, T, H);
    CS1_LAUNCHED();
}
