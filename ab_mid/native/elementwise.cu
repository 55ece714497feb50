// elementwise.cu: SwiGLU activation (qwen3_5-model.md §4.3) and the attention input preparation (§5 steps 1-4).
#include "common.cuh"
#include "gate.cuh"

namespace {

// ---- silu_mul: out = bf16(bf16(silu(gate)) * up) ------------------------------------------------------------------

__device__ __forceinline__ bf16 swiglu(bf16 g, bf16 u) { return f2bf(round_bf(silu_f(bf2f(g))) * bf2f(u)); }

// 8 columns per thread with 16-byte loads (I, ld and the pointers 16-byte aligned).
__global__ void silu_mul_packed(const bf16 *__restrict__ gu, int64_t ld, bf16 *__restrict__ out, int64_t T,
                                int64_t I) {
    const int64_t packs_per_row = I / 8, n = T * packs_per_row;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = p / packs_per_row, c = (p % packs_per_row) * 8;
        const Pack8 g = *reinterpret_cast<const Pack8 *>(gu + t * ld + c);
        const Pack8 u = *reinterpret_cast<const Pack8 *>(gu + t * ld + I + c);
        float sg[8];  // swiglu's arithmetic, the 8 SiLUs interleaved (silu_n: silu_f's bits, no branches)
        silu_pack8(g, sg);
        Pack8 o;
#pragma unroll
        for (int j = 0; j < 8; ++j) o.v[j] = f2bf(round_bf(sg[j]) * bf2f(u.v[j]));
        *reinterpret_cast<Pack8 *>(out + t * I + c) = o;
    }
}

__global__ void silu_mul_scalar(const bf16 *__restrict__ gu, int64_t ld, bf16 *__restrict__ out, int64_t T,
                                int64_t I) {
    const int64_t n = T * I;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = p / I, c = p % I;
        out[p] = swiglu(gu[t * ld + c], gu[t * ld + I + c]);
    }
}

// ---- attn_prep ----------------------------------------------------------------------------------------------------
// One block of Dh threads per (token, head); heads [0, Hq) are query heads (with their gate), [Hq, Hq + Hk) key heads.
// Zero-centred RMSNorm over the head (fp32, one bf16 rounding), then rotate-half RoPE on the first rotary_dim dims in
// bf16 arithmetic as transformers does: cos/sin rounded to bf16, each product rounded, the sum rounded.

__global__ void attn_prep_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ q_norm_w,
                                 const bf16 *__restrict__ k_norm_w, const int32_t *__restrict__ positions,
                                 const float *__restrict__ inv_freq, bf16 *__restrict__ q, bf16 *__restrict__ gate,
                                 bf16 *__restrict__ k, int64_t T, int64_t Hq, int64_t Hk, int Dh, int rotary_dim,
                                 float eps, bool sigmoid_gate) {
    __shared__ float scratch[32];
    extern __shared__ float normed[];  // [Dh], bf16-rounded values
    const int i = threadIdx.x;
    const int half = rotary_dim / 2;
    const int64_t heads = Hq + Hk, n_items = T * heads;
    for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
        const int64_t t = item / heads, h = item % heads;
        const bool is_q = h < Hq;
        const bf16 *row = qkv + t * ld;
        const bf16 *src = is_q ? row + h * 2 * Dh : row + Hq * 2 * Dh + (h - Hq) * Dh;
        const float v = bf2f(src[i]);
        if (is_q)
            gate[t * Hq * Dh + h * Dh + i] = sigmoid_gate ? f2bf(cs1_gate_sigmoid(bf2f(src[Dh + i]))) : src[Dh + i];
        const float inv = rsqrtf(block_sum(v * v, scratch) / (float)Dh + eps);
        const float w = bf2f(is_q ? q_norm_w[i] : k_norm_w[i]);
        const float n = round_bf(v * inv * (1.0f + w));
        normed[i] = n;
        __syncthreads();
        float r = n;
        if (i < rotary_dim) {
            const int f = i < half ? i : i - half;
            const float phi = (float)positions[t] * inv_freq[f];
            const float c = round_bf(cosf(phi)), s = round_bf(sinf(phi));
            // rotate_half: first half pairs with -x[i + half], second half with x[i - half]
            const float other = i < half ? -normed[i + half] : normed[i - half];
            r = round_bf(round_bf(n * c) + round_bf(other * s));
        }
        bf16 *dst = is_q ? q + (t * Hq + h) * Dh : k + (t * Hk + (h - Hq)) * Dh;
        dst[i] = f2bf(r);
        __syncthreads();  // `normed` is reused by the next item
    }
}

// Warp variant for Dh = 32 * kPer (kPer = 8: 16-byte accesses for Dh 256; 4: 8-byte for Dh 128), rotary_dim a
// multiple of 2 * kPer and <= 64: one warp per (token, head), lane l owning elements [l * kPer, (l + 1) * kPer).
// The rotate_half partner (i +- half) sits in the same slot of lane l +- half / kPer (one shuffle); lane f < half
// evaluates cosf/sinf of frequency f once and the rotary lanes fetch theirs by shuffle. Same formulas and roundings
// as attn_prep_kernel; only the fp32 sum order of the norm differs.
template <int kPer>
struct __align__(2 * kPer) BfVec {
    bf16 v[kPer];
};

template <int kPer>
__global__ void __launch_bounds__(256)
    attn_prep_warp_kernel(const bf16 *__restrict__ qkv, int64_t ld, const bf16 *__restrict__ q_norm_w,
                          const bf16 *__restrict__ k_norm_w, const int32_t *__restrict__ positions,
                          const float *__restrict__ inv_freq, bf16 *__restrict__ q, bf16 *__restrict__ gate,
                          bf16 *__restrict__ k, int64_t T, int64_t Hq, int64_t Hk, int rotary_dim, float eps,
                          bool sigmoid_gate) {
    using Vec = BfVec<kPer>;
    constexpr int Dh = 32 * kPer;
    const int lane = threadIdx.x & 31;
    const int half = rotary_dim / 2, d = half / kPer;  // d: lane distance of the rotate_half partner
    const bool rot_lane = lane < 2 * d, first_half = lane < d;
    const int partner = first_half ? lane + d : (rot_lane ? lane - d : lane);
    const int64_t warps_per_block = blockDim.x >> 5;
    const int64_t heads = Hq + Hk, n_items = T * heads;
    const Vec wq = reinterpret_cast<const Vec *>(q_norm_w)[lane], wk = reinterpret_cast<const Vec *>(k_norm_w)[lane];
    for (int64_t item = (int64_t)blockIdx.x * warps_per_block + (threadIdx.x >> 5); item < n_items;
         item += (int64_t)gridDim.x * warps_per_block) {
        const int64_t t = item / heads, h = item % heads;
        const bool is_q = h < Hq;
        const bf16 *row = qkv + t * ld;
        const bf16 *src = is_q ? row + h * 2 * Dh : row + Hq * 2 * Dh + (h - Hq) * Dh;
        const Vec xv = reinterpret_cast<const Vec *>(src)[lane];
        if (is_q) {
            Vec gv = reinterpret_cast<const Vec *>(src + Dh)[lane];
            if (sigmoid_gate) {
#pragma unroll
                for (int e = 0; e < kPer; ++e) gv.v[e] = f2bf(cs1_gate_sigmoid(bf2f(gv.v[e])));
            }
            reinterpret_cast<Vec *>(gate + (t * Hq + h) * Dh)[lane] = gv;
        }
        float cf = 0.0f, sf = 0.0f;  // bf16-rounded cos/sin of frequency `lane`
        if (lane < half) {
            const float phi = (float)positions[t] * inv_freq[lane];
            cf = round_bf(cosf(phi));
            sf = round_bf(sinf(phi));
        }
        float v[kPer], ss = 0.0f;
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
            v[e] = bf2f(xv.v[e]);
            ss += v[e] * v[e];
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)Dh + eps);
        Vec o;
#pragma unroll
        for (int e = 0; e < kPer; ++e) {
            const float w = bf2f(is_q ? wq.v[e] : wk.v[e]);
            const float n = round_bf(v[e] * inv * (1.0f + w));
            // every lane takes part in the shuffles; only rotary lanes use the results
            const float p = __shfl_sync(0xffffffffu, n, partner);
            const int f = rot_lane ? lane * kPer + e - (first_half ? 0 : half) : 0;
            const float c = __shfl_sync(0xffffffffu, cf, f), s = __shfl_sync(0xffffffffu, sf, f);
            float r = n;
            if (rot_lane) {
                const float other = first_half ? -p : p;  // rotate_half: -x[i + half] first, x[i - half] second
                r = round_bf(round_bf(n * c) + round_bf(other * s));
            }
            o.v[e] = f2bf(r);
        }
        bf16 *dst = is_q ? q + (t * Hq + h) * Dh : k + (t * Hk + (h - Hq)) * Dh;
        reinterpret_cast<Vec *>(dst)[lane] = o;
    }
}

}  // namespace

extern "C" int cs1_silu_mul(const void *gate_up, int64_t ld, void *out, int64_t T, int64_t I, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && I >= 0);
    if (T == 0 || I == 0) return 0;
    CS1_REQUIRE(gate_up && out, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(ld >= 2 * I);
    CS1_REQUIRE_ALIGNED(gate_up, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    const bf16 *gu = static_cast<const bf16 *>(gate_up);
    bf16 *o = static_cast<bf16 *>(out);
    cudaStream_t s = cs1_stream(stream);
    const int threads = 256;
    if (I % 8 == 0 && ld % 8 == 0 && cs1_aligned(gate_up, 16) && cs1_aligned(out, 16)) {
        silu_mul_packed<<<cs1_grid((T * (I / 8) + threads - 1) / threads), threads, 0, s>>>(gu, ld, o, T, I);
    } else {
        silu_mul_scalar<<<cs1_grid((T * I + threads - 1) / threads), threads, 0, s>>>(gu, ld, o, T, I);
    }
    CS1_LAUNCHED();
}

namespace {

int attn_prep(const void *qkv, int64_t ld, const void *q_norm_w, const void *k_norm_w, const int32_t *positions,
              const float *inv_freq, void *q, void *gate, void *k, int64_t T, int64_t Hq, int64_t Hk, int64_t Dh,
              int64_t rotary_dim, float eps, bool sigmoid_gate, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && Hq >= 0 && Hk >= 0);
    if (T == 0 || (Hq == 0 && Hk == 0)) return 0;
    CS1_REQUIRE(qkv && q_norm_w && k_norm_w && positions && q && gate && k, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(Dh >= 32 && Dh <= 1024 && Dh % 32 == 0);
    CS1_REQUIRE_SHAPE(rotary_dim >= 0 && rotary_dim <= Dh && rotary_dim % 2 == 0);
    CS1_REQUIRE(rotary_dim == 0 || inv_freq != nullptr, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(ld >= (2 * Hq + 2 * Hk) * Dh);
    CS1_REQUIRE_ALIGNED(qkv, 2);
    CS1_REQUIRE_ALIGNED(q, 2);
    CS1_REQUIRE_ALIGNED(gate, 2);
    CS1_REQUIRE_ALIGNED(k, 2);
    CS1_REQUIRE_ALIGNED(positions, 4);
    CS1_REQUIRE_ALIGNED(inv_freq, 4);
    const auto *x = static_cast<const bf16 *>(qkv);
    const auto *qw = static_cast<const bf16 *>(q_norm_w);
    const auto *kw = static_cast<const bf16 *>(k_norm_w);
    auto *qo = static_cast<bf16 *>(q);
    auto *go = static_cast<bf16 *>(gate);
    auto *ko = static_cast<bf16 *>(k);
    cudaStream_t s = cs1_stream(stream);
    const int64_t per = Dh / 32;
    const bool warp_path = (Dh == 256 || Dh == 128) && rotary_dim % (2 * per) == 0 && rotary_dim <= 64 &&
                           ld % 8 == 0 && cs1_aligned(qkv, 16) && cs1_aligned(q_norm_w, 16) &&
                           cs1_aligned(k_norm_w, 16) && cs1_aligned(q, 16) && cs1_aligned(gate, 16) &&
                           cs1_aligned(k, 16);
    if (warp_path) {
        const int64_t warps = 8;
        const unsigned grid = cs1_grid((T * (Hq + Hk) + warps - 1) / warps);
        if (Dh == 256)
            attn_prep_warp_kernel<8><<<grid, 32 * warps, 0, s>>>(x, ld, qw, kw, positions, inv_freq, qo, go, ko, T, Hq,
                                                                 Hk, (int)rotary_dim, eps, sigmoid_gate);
        else
            attn_prep_warp_kernel<4><<<grid, 32 * warps, 0, s>>>(x, ld, qw, kw, positions, inv_freq, qo, go, ko, T, Hq,
                                                                 Hk, (int)rotary_dim, eps, sigmoid_gate);
    } else {
        attn_prep_kernel<<<cs1_grid(T * (Hq + Hk)), (unsigned)Dh, Dh * sizeof(float), s>>>(
            x, ld, qw, kw, positions, inv_freq, qo, go, ko, T, Hq, Hk, (int)Dh, (int)rotary_dim, eps, sigmoid_gate);
    }
    CS1_LAUNCHED();
}

}  // namespace

extern "C" int cs1_attn_prep(const void *qkv, int64_t ld, const void *q_norm_w, const void *k_norm_w,
                             const int32_t *positions, const float *inv_freq, void *q, void *gate, void *k, int64_t T,
                             int64_t Hq, int64_t Hk, int64_t Dh, int64_t rotary_dim, float eps, void *stream) {
    return attn_prep(qkv, ld, q_norm_w, k_norm_w, positions, inv_freq, q, gate, k, T, Hq, Hk, Dh, rotary_dim, eps,
                     false, stream);
}

extern "C" int cs1_attn_prep_sigmoid_gate(const void *qkv, int64_t ld, const void *q_norm_w, const void *k_norm_w,
                                          const int32_t *positions, const float *inv_freq, void *q, void *gate,
                                          void *k, int64_t T, int64_t Hq, int64_t Hk, int64_t Dh, int64_t rotary_dim,
                                          float eps, void *stream) {
    return attn_prep(qkv, ld, q_norm_w, k_norm_w, positions, inv_freq, q, gate, k, T, Hq, Hk, Dh, rotary_dim, eps,
                     true, stream);
}
