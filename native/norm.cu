// norm.cu: embedding gather and the three RMSNorm variants of Qwen3.5 (qwen3_5-model.md §4.1, §4.2, §8.1).
#include "common.cuh"

namespace {

constexpr int kNormThreads = 256;

// ---- embedding ----------------------------------------------------------------------------------------------------

template <bool kPacked>
__global__ void embed_kernel(const int32_t *__restrict__ ids, const bf16 *__restrict__ table, bf16 *__restrict__ out,
                             int64_t T, int64_t D, int64_t vocab) {
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
        int64_t id = ids[t];
        if (id < 0 || id >= vocab) id = 0;  // never read out of bounds
        const bf16 *src = table + id * D;
        bf16 *dst = out + t * D;
        if (kPacked) {
            const Pack8 *s8 = reinterpret_cast<const Pack8 *>(src);
            Pack8 *d8 = reinterpret_cast<Pack8 *>(dst);
            for (int64_t i = threadIdx.x; i < D / 8; i += blockDim.x) d8[i] = s8[i];
        } else {
            for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
        }
    }
}

// ---- zero-centred RMSNorm: out = bf16(x * rsqrt(mean(x^2) + eps) * (1 + w)) ----------------------------------------
// One block per row. kAdd: residual <- bf16(residual + delta) first (in place), and the norm reads the rounded sum.
// Each thread touches the same elements in both passes, so pass 2 re-reads its own writes (no cross-thread hazard).

template <bool kAdd>
__global__ void rms_norm_kernel(bf16 *__restrict__ x, const bf16 *__restrict__ delta, const bf16 *__restrict__ w,
                                bf16 *__restrict__ out, int64_t rows, int64_t D, float eps) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        bf16 *xr = x + r * D;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            float v;
            if (kAdd) {
                bf16 s = f2bf(bf2f(xr[i]) + bf2f(delta[r * D + i]));
                xr[i] = s;
                v = bf2f(s);
            } else {
                v = bf2f(xr[i]);
            }
            ss += v * v;
        }
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)D + eps);
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float n = bf2f(xr[i]) * inv;
            out[r * D + i] = f2bf(n * (1.0f + bf2f(w[i])));
        }
    }
}

// ---- gated RMSNorm (Qwen3_5RMSNormGated): one warp per (token, head) ------------------------------------------------
// n = bf16(x * rsqrt(mean(x^2) + eps)); n' = w * n (bf16-rounded when the weight is bf16); out = bf16(n' * silu(z)).

template <int kPerLane>
__global__ void gated_rms_norm_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ z, int64_t ldz,
                                      const float *__restrict__ w, int round_weighted, bf16 *__restrict__ out,
                                      int64_t T, int64_t H, float eps) {
    constexpr int D = kPerLane * 32;
    const int lane = threadIdx.x & 31;
    const int64_t warps_per_block = blockDim.x >> 5;
    const int64_t n_items = T * H;
    for (int64_t item = (int64_t)blockIdx.x * warps_per_block + (threadIdx.x >> 5); item < n_items;
         item += (int64_t)gridDim.x * warps_per_block) {
        const int64_t t = item / H, h = item % H;
        const bf16 *xr = x + item * D;
        const bf16 *zr = z + t * ldz + h * D;
        float v[kPerLane];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            v[j] = bf2f(xr[lane + 32 * j]);
            ss += v[j] * v[j];
        }
        const float inv = rsqrtf(warp_sum(ss) / (float)D + eps);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int i = lane + 32 * j;
            float n = w[i] * round_bf(v[j] * inv);
            if (round_weighted) n = round_bf(n);
            out[item * D + i] = f2bf(n * silu_f(bf2f(zr[i])));
        }
    }
}

int launch_norm(bool add, bf16 *x, const bf16 *delta, const bf16 *w, bf16 *out, int64_t rows, int64_t D, float eps,
                cudaStream_t s) {
    const unsigned grid = cs1_grid(rows);
    if (add)
        rms_norm_kernel<true><<<grid, kNormThreads, 0, s>>>(x, delta, w, out, rows, D, eps);
    else
        rms_norm_kernel<false><<<grid, kNormThreads, 0, s>>>(x, delta, w, out, rows, D, eps);
    CS1_LAUNCHED();
}

}  // namespace

extern "C" int cs1_embed(const int32_t *ids, const void *table, void *out, int64_t T, int64_t D, int64_t vocab,
                         void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && D >= 0);
    if (T == 0 || D == 0) return 0;
    CS1_REQUIRE(ids && table && out, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(vocab > 0);
    CS1_REQUIRE_ALIGNED(table, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    CS1_REQUIRE_ALIGNED(ids, 4);
    const bool packed = D % 8 == 0 && cs1_aligned(table, 16) && cs1_aligned(out, 16);
    const unsigned grid = cs1_grid(T);
    const bf16 *tab = static_cast<const bf16 *>(table);
    bf16 *o = static_cast<bf16 *>(out);
    if (packed)
        embed_kernel<true><<<grid, 128, 0, cs1_stream(stream)>>>(ids, tab, o, T, D, vocab);
    else
        embed_kernel<false><<<grid, 128, 0, cs1_stream(stream)>>>(ids, tab, o, T, D, vocab);
    CS1_LAUNCHED();
}

extern "C" int cs1_rms_norm(const void *x, const void *w, void *out, int64_t rows, int64_t D, float eps,
                            void *stream) {
    CS1_REQUIRE_SHAPE(rows >= 0 && D >= 0);
    if (rows == 0) return 0;
    CS1_REQUIRE_SHAPE(D > 0);
    CS1_REQUIRE(x && w && out, CS1_ERR_NULL);
    CS1_REQUIRE_ALIGNED(x, 2);
    CS1_REQUIRE_ALIGNED(w, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    return launch_norm(false, const_cast<bf16 *>(static_cast<const bf16 *>(x)), nullptr, static_cast<const bf16 *>(w),
                       static_cast<bf16 *>(out), rows, D, eps, cs1_stream(stream));
}

extern "C" int cs1_add_rms_norm(void *residual, const void *delta, const void *w, void *out, int64_t rows, int64_t D,
                                float eps, void *stream) {
    CS1_REQUIRE_SHAPE(rows >= 0 && D >= 0);
    if (rows == 0) return 0;
    CS1_REQUIRE_SHAPE(D > 0);
    CS1_REQUIRE(residual && delta && w && out, CS1_ERR_NULL);
    CS1_REQUIRE_ALIGNED(residual, 2);
    CS1_REQUIRE_ALIGNED(delta, 2);
    CS1_REQUIRE_ALIGNED(w, 2);
    CS1_REQUIRE_ALIGNED(out, 2);
    return launch_norm(true, static_cast<bf16 *>(residual), static_cast<const bf16 *>(delta),
                       static_cast<const bf16 *>(w), static_cast<bf16 *>(out), rows, D, eps, cs1_stream(stream));
}

extern "C" int cs1_gated_rms_norm(const void *x, const void *z, int64_t ldz, const float *w, int32_t round_weighted,
                                  void *out, int64_t T, int64_t H, int64_t D, float eps, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && H >= 0 && D >= 0);
    if (T == 0 || H == 0) return 0;
    CS1_REQUIRE(x && z && w && out, CS1_ERR_NULL);
    CS1_REQUIRE(D == 64 || D == 128 || D == 256, CS1_ERR_UNSUPPORTED);
    CS1_REQUIRE_SHAPE(ldz >= H * D);
    CS1_REQUIRE_ALIGNED(x, 2);
    CS1_REQUIRE_ALIGNED(z, 2);
    CS1_REQUIRE_ALIGNED(w, 4);
    CS1_REQUIRE_ALIGNED(out, 2);
    const int threads = 256;  // 8 warps, one (token, head) each
    const unsigned grid = cs1_grid((T * H + 7) / 8);
    const bf16 *xb = static_cast<const bf16 *>(x);
    const bf16 *zb = static_cast<const bf16 *>(z);
    bf16 *ob = static_cast<bf16 *>(out);
    cudaStream_t s = cs1_stream(stream);
    if (D == 64)
        gated_rms_norm_kernel<2><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    else if (D == 128)
        gated_rms_norm_kernel<4><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    else
        gated_rms_norm_kernel<8><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    CS1_LAUNCHED();
}
