// norm.cu: embedding gather and the three RMSNorm variants of Qwen3.5 (qwen3_5-model.md §4.1, §4.2, §8.1).
#include "common.cuh"
#include "gated_norm.cuh"

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

// One 128-thread block per row (D % 8 == 0, D <= 4096, 16-byte aligned): each thread keeps up to kPacks Pack8 of
// the row (pack p = thread + 128 j: one warp access covers 512 contiguous bytes). Every load of the row (x, delta,
// w) is issued before any store or arithmetic, so a row costs one memory round trip; with one warp per row and the
// loads interleaved with the in-place residual stores, each delta load waited for the previous store (~7 us at 128
// rows). Same formulas as rms_norm_kernel; only the fp32 sum order differs (fixed: lanes, then warps in order).
// kSplits != 0 (with kAdd): the delta is not read but made, as a GEMM makes its output: the fp32 sum of the
// partials (partials + s * split_stride, s = 0, 1, ... in that order), rounded to bf16 once (cs1_gemm_split_f32).
// With kSplits > 0 (the counts the forward uses) every partial's load is issued with the row's other loads, so the
// row still costs one memory round trip; kDynamicSplits takes the count from `splits` and walks it in a loop.
constexpr int kRowThreads = 128;
constexpr int kDynamicSplits = -1;

template <bool kAdd, int kSplits, int kPacks>
__global__ void __launch_bounds__(kRowThreads)
    rms_norm_row_kernel(bf16 *__restrict__ x, const bf16 *__restrict__ delta, const float *__restrict__ partials,
                        int splits, int64_t split_stride, const bf16 *__restrict__ w, bf16 *__restrict__ out,
                        int64_t rows, int64_t D, float eps) {
    constexpr bool kPartials = kSplits != 0;
    __shared__ float warp_ss[kRowThreads / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int packs = (int)(D / 8);
    const Pack8 *w8 = reinterpret_cast<const Pack8 *>(w);
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        Pack8 *xr = reinterpret_cast<Pack8 *>(x + r * D);
        const Pack8 *dr = kAdd && !kPartials ? reinterpret_cast<const Pack8 *>(delta + r * D) : nullptr;
        Pack8 v[kPacks], d[kPacks], wp[kPacks];
#pragma unroll
        for (int j = 0; j < kPacks; ++j) {
            const int p = tid + kRowThreads * j;
            if (p >= packs) continue;
            v[j] = xr[p];
            if (kAdd && !kPartials) d[j] = dr[p];
            wp[j] = w8[p];
        }
        if constexpr (kSplits > 0) {
            float4 q[kPacks][kSplits][2];  // [pack][partial][low, high 4 of the pack's 8 values]
#pragma unroll
            for (int j = 0; j < kPacks; ++j) {
                const int p = tid + kRowThreads * j;
                if (p >= packs) continue;
#pragma unroll
                for (int sp = 0; sp < kSplits; ++sp) {
                    const float4 *qs = reinterpret_cast<const float4 *>(partials + sp * split_stride + r * D) + 2 * p;
                    q[j][sp][0] = qs[0];
                    q[j][sp][1] = qs[1];
                }
            }
#pragma unroll
            for (int j = 0; j < kPacks; ++j) {
                const int p = tid + kRowThreads * j;
                if (p >= packs) continue;
                float4 lo = q[j][0][0], hi = q[j][0][1];
#pragma unroll
                for (int sp = 1; sp < kSplits; ++sp) {
                    const float4 a = q[j][sp][0], b = q[j][sp][1];
                    lo.x += a.x, lo.y += a.y, lo.z += a.z, lo.w += a.w;
                    hi.x += b.x, hi.y += b.y, hi.z += b.z, hi.w += b.w;
                }
                const float sum[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) d[j].v[e] = f2bf(sum[e]);
            }
        } else if constexpr (kPartials) {
#pragma unroll
            for (int j = 0; j < kPacks; ++j) {
                const int p = tid + kRowThreads * j;
                if (p >= packs) continue;
                const float4 *q = reinterpret_cast<const float4 *>(partials + r * D) + 2 * p;
                float4 lo = q[0], hi = q[1];
                for (int sp = 1; sp < splits; ++sp) {
                    const float4 *qs = reinterpret_cast<const float4 *>(partials + sp * split_stride + r * D) + 2 * p;
                    const float4 a = qs[0], b = qs[1];
                    lo.x += a.x, lo.y += a.y, lo.z += a.z, lo.w += a.w;
                    hi.x += b.x, hi.y += b.y, hi.z += b.z, hi.w += b.w;
                }
                const float sum[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                for (int e = 0; e < 8; ++e) d[j].v[e] = f2bf(sum[e]);
            }
        }
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kPacks; ++j) {
            const int p = tid + kRowThreads * j;
            if (p >= packs) continue;
            if (kAdd) {
#pragma unroll
                for (int e = 0; e < 8; ++e) v[j].v[e] = f2bf(bf2f(v[j].v[e]) + bf2f(d[j].v[e]));
                xr[p] = v[j];
            }
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float f = bf2f(v[j].v[e]);
                ss += f * f;
            }
        }
        ss = warp_sum(ss);
        if (lane == 0) warp_ss[warp] = ss;
        __syncthreads();
        float total = 0.0f;
#pragma unroll
        for (int i = 0; i < kRowThreads / 32; ++i) total += warp_ss[i];
        const float inv = rsqrtf(total / (float)D + eps);
        Pack8 *o8 = reinterpret_cast<Pack8 *>(out + r * D);
#pragma unroll
        for (int j = 0; j < kPacks; ++j) {
            const int p = tid + kRowThreads * j;
            if (p >= packs) continue;
            Pack8 o;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const float n = bf2f(v[j].v[e]) * inv;
                o.v[e] = f2bf(n * (1.0f + bf2f(wp[j].v[e])));
            }
            o8[p] = o;
        }
        __syncthreads();  // warp_ss is reused by the block's next row
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

// 16-byte variant (x, z, out 16-byte aligned, ldz % 8 == 0, w 16-byte aligned): D / 8 lanes per (token, head), each
// with 8 contiguous elements, so a warp serves 32 / (D / 8) items; the sum of squares reduces within that lane group.
// Same formulas as gated_rms_norm_kernel; only the fp32 sum order differs.
template <int D>
__global__ void __launch_bounds__(256)
    gated_rms_norm_vec_kernel(const bf16 *__restrict__ x, const bf16 *__restrict__ z, int64_t ldz,
                              const float *__restrict__ w, int round_weighted, bf16 *__restrict__ out, int64_t T,
                              int64_t H, float eps) {
    constexpr int kLanes = D / 8, kItemsPerWarp = 32 / kLanes;
    const int lane = threadIdx.x & 31, sub = lane % kLanes;
    const int64_t warps_per_block = blockDim.x >> 5;
    const int64_t n_items = T * H;
    float wv[8];
    gated_norm_weights(w, sub, wv);
    // the loop bound is per warp, so every lane reaches the shuffles
    for (int64_t base = ((int64_t)blockIdx.x * warps_per_block + (threadIdx.x >> 5)) * kItemsPerWarp; base < n_items;
         base += (int64_t)gridDim.x * warps_per_block * kItemsPerWarp) {
        const int64_t item = base + lane / kLanes;
        const bool valid = item < n_items;
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        Pack8 zp;
        if (valid) {
            const int64_t t = item / H, h = item % H;
            const Pack8 xp = reinterpret_cast<const Pack8 *>(x + item * D)[sub];
            zp = reinterpret_cast<const Pack8 *>(z + t * ldz + h * D)[sub];
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = bf2f(xp.v[e]);
        }
        const float inv = gated_norm_inv<kLanes>(v, eps);
        if (!valid) continue;
        const Pack8 o = gated_norm_pack8(v, zp, wv, inv, round_weighted);
        reinterpret_cast<Pack8 *>(out + item * D)[sub] = o;
    }
}

template <bool kAdd, int kSplits>
int launch_row_kernel(int64_t per_thread, unsigned grid, bf16 *x, const bf16 *delta, const float *partials,
                      int splits, int64_t split_stride, const bf16 *w, bf16 *out, int64_t rows, int64_t D, float eps,
                      cudaStream_t s) {
    if (per_thread <= 1)
        rms_norm_row_kernel<kAdd, kSplits, 1><<<grid, kRowThreads, 0, s>>>(x, delta, partials, splits, split_stride, w,
                                                                          out, rows, D, eps);
    else if (per_thread <= 2)
        rms_norm_row_kernel<kAdd, kSplits, 2><<<grid, kRowThreads, 0, s>>>(x, delta, partials, splits, split_stride, w,
                                                                          out, rows, D, eps);
    else if (per_thread <= 3)  // D = 2560 (the 4B hidden size)
        rms_norm_row_kernel<kAdd, kSplits, 3><<<grid, kRowThreads, 0, s>>>(x, delta, partials, splits, split_stride, w,
                                                                          out, rows, D, eps);
    else
        rms_norm_row_kernel<kAdd, kSplits, 4><<<grid, kRowThreads, 0, s>>>(x, delta, partials, splits, split_stride, w,
                                                                          out, rows, D, eps);
    CS1_LAUNCHED();
}

template <bool kAdd>
int launch_norm_t(bf16 *x, const bf16 *delta, const bf16 *w, bf16 *out, int64_t rows, int64_t D, float eps,
                  cudaStream_t s) {
    const bool vec = D % 8 == 0 && D <= 4096 && cs1_aligned(x, 16) && cs1_aligned(w, 16) && cs1_aligned(out, 16) &&
                     (!kAdd || cs1_aligned(delta, 16));
    const int64_t per_thread = (D / 8 + kRowThreads - 1) / kRowThreads;  // Pack8 per thread, one block per row
    const unsigned grid = cs1_grid(rows);
    if (vec) return launch_row_kernel<kAdd, 0>(per_thread, grid, x, delta, nullptr, 0, 0, w, out, rows, D, eps, s);
    rms_norm_kernel<kAdd><<<grid, kNormThreads, 0, s>>>(x, delta, w, out, rows, D, eps);
    CS1_LAUNCHED();
}

int launch_norm(bool add, bf16 *x, const bf16 *delta, const bf16 *w, bf16 *out, int64_t rows, int64_t D, float eps,
                cudaStream_t s) {
    return add ? launch_norm_t<true>(x, delta, w, out, rows, D, eps, s)
               : launch_norm_t<false>(x, delta, w, out, rows, D, eps, s);
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

extern "C" int cs1_add_partials_rms_norm(void *residual, const float *partials, int32_t splits, int64_t split_stride,
                                         const void *w, void *out, int64_t rows, int64_t D, float eps, void *stream) {
    CS1_REQUIRE_SHAPE(rows >= 0 && D >= 0 && splits >= 1 && splits <= 16);
    if (rows == 0) return 0;
    CS1_REQUIRE(residual && partials && w && out, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(D > 0 && D % 8 == 0 && D <= 4096 && split_stride >= rows * D);
    CS1_REQUIRE(split_stride % 4 == 0, CS1_ERR_ALIGNMENT);
    CS1_REQUIRE_ALIGNED(residual, 16);
    CS1_REQUIRE_ALIGNED(partials, 16);
    CS1_REQUIRE_ALIGNED(w, 16);
    CS1_REQUIRE_ALIGNED(out, 16);
    const int64_t per_thread = (D / 8 + kRowThreads - 1) / kRowThreads;
    // 2-4 splits (the forward uses 3, for the down projection) load every partial up front; others walk a loop
    auto launch = launch_row_kernel<true, kDynamicSplits>;
    if (splits == 2) launch = launch_row_kernel<true, 2>;
    if (splits == 3) launch = launch_row_kernel<true, 3>;
    if (splits == 4) launch = launch_row_kernel<true, 4>;
    return launch(per_thread, cs1_grid(rows), static_cast<bf16 *>(residual), nullptr, partials, splits, split_stride,
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
    const int threads = 256;
    const bf16 *xb = static_cast<const bf16 *>(x);
    const bf16 *zb = static_cast<const bf16 *>(z);
    bf16 *ob = static_cast<bf16 *>(out);
    cudaStream_t s = cs1_stream(stream);
    const bool vec = ldz % 8 == 0 && cs1_aligned(x, 16) && cs1_aligned(z, 16) && cs1_aligned(w, 16) &&
                     cs1_aligned(out, 16);
    if (vec) {
        const int64_t items_per_block = 8 * (32 / (D / 8));  // 8 warps
        const unsigned grid = cs1_grid((T * H + items_per_block - 1) / items_per_block);
        if (D == 64)
            gated_rms_norm_vec_kernel<64><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
        else if (D == 128)
            gated_rms_norm_vec_kernel<128><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
        else
            gated_rms_norm_vec_kernel<256><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
        CS1_LAUNCHED();
    }
    const unsigned grid = cs1_grid((T * H + 7) / 8);  // 8 warps, one (token, head) each
    if (D == 64)
        gated_rms_norm_kernel<2><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    else if (D == 128)
        gated_rms_norm_kernel<4><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    else
        gated_rms_norm_kernel<8><<<grid, threads, 0, s>>>(xb, zb, ldz, w, round_weighted, ob, T, H, eps);
    CS1_LAUNCHED();
}
