// readout.cu: the decision read-out (qwen3_5-model.md §3, §8.1 "logits" row): the final residual add and final norm
// at each prompt's last row only, then 26 fp32 dot products against the letter rows of the tied embedding. Also the
// row gather that lets the last layer run its row-wise tail (projection, norm, MLP) on those rows alone.
#include "common.cuh"

namespace {

constexpr int kReadoutThreads = 1024;  // 32 warps: one letter row each, so the 26 dot products run side by side
constexpr int kNormThreads = 256;      // the sum of squares keeps its 256-thread order (and so its bits)
constexpr int kDotBatch = 16;          // a lane's letter loads issued together, ahead of their FMAs
constexpr int64_t kMaxDynamicSmem = 48 * 1024 - 32 * sizeof(float);  // 48 KiB without opt-in, less the scratch

// One block per prompt. y (bf16-rounded, kept as float) lives in shared memory; one warp per letter row. Each lane
// sums its terms i = lane, lane + 32, ... in that order (one fmaf chain), as the 8-warp form did, so the logits
// keep their bits; only the loads move ahead (kDotBatch at a time) and the rows spread over 32 warps instead of 8.
__global__ void __launch_bounds__(kReadoutThreads, 1)
    letter_readout_kernel(const bf16 *__restrict__ residual, const bf16 *__restrict__ delta,
                          const int32_t *__restrict__ last_rows, int64_t n_rows, const bf16 *__restrict__ w,
                          const float *__restrict__ letters, int64_t n_letters, float *__restrict__ logits, int64_t D,
                          float eps) {
    __shared__ float scratch[32];
    extern __shared__ float y[];  // [D]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const int64_t t = last_rows[r];
        float ss = 0.0f;  // threads past kNormThreads add +0, as the lanes past 8 warps did in block_sum
        if (threadIdx.x < kNormThreads) {
            for (int64_t i = threadIdx.x; i < D; i += kNormThreads) {
                float h = bf2f(residual[t * D + i]);
                if (delta) h = round_bf(h + bf2f(delta[t * D + i]));
                y[i] = h;
                ss += h * h;
            }
        }
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)D + eps);  // its barriers publish y
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[i] = round_bf(y[i] * inv * (1.0f + bf2f(w[i])));
        __syncthreads();
        for (int64_t j = warp; j < n_letters; j += nwarps) {
            const float *lr = letters + j * D;
            float acc = 0.0f;
            for (int64_t i0 = lane; i0 < D; i0 += 32 * kDotBatch) {
                float l[kDotBatch];
#pragma unroll
                for (int b = 0; b < kDotBatch; ++b) {
                    const int64_t i = i0 + 32 * b;
                    l[b] = i < D ? lr[i] : 0.0f;
                }
#pragma unroll
                for (int b = 0; b < kDotBatch; ++b) {
                    const int64_t i = i0 + 32 * b;
                    if (i < D) acc = fmaf(y[i], l[b], acc);
                }
            }
            acc = warp_sum(acc);
            if (lane == 0) logits[r * n_letters + j] = acc;
        }
        __syncthreads();  // y is reused by the next prompt
    }
}

// dst[r, :] = src[rows[r], :] (zeros where rows[r] is outside [0, src_rows)). kVec: 8 bf16 per 16-byte access.
template <bool kVec>
__global__ void gather_rows_kernel(const bf16 *__restrict__ src, int64_t ld_src, int64_t src_rows,
                                   const int32_t *__restrict__ rows, int64_t n, bf16 *__restrict__ dst,
                                   int64_t ld_dst, int64_t width) {
    const int64_t per_row = kVec ? width / 8 : width, total = n * per_row;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = e / per_row, c = e % per_row, t = rows[r];
        const bool ok = t >= 0 && t < src_rows;
        if constexpr (kVec) {
            const uint4 v = ok ? *reinterpret_cast<const uint4 *>(src + t * ld_src + 8 * c) : make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4 *>(dst + r * ld_dst + 8 * c) = v;
        } else {
            dst[r * ld_dst + c] = ok ? src[t * ld_src + c] : f2bf(0.0f);
        }
    }
}

}  // namespace

extern "C" int cs1_gather_rows(const void *src, int64_t ld_src, int64_t src_rows, const int32_t *rows, int64_t n,
                               void *dst, int64_t ld_dst, int64_t width, void *stream) {
    CS1_REQUIRE_SHAPE(n >= 0 && width >= 0 && src_rows >= 0);
    if (n == 0 || width == 0) return 0;
    CS1_REQUIRE(src && rows && dst, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(ld_src >= width && ld_dst >= width);
    CS1_REQUIRE_ALIGNED(src, 2);
    CS1_REQUIRE_ALIGNED(dst, 2);
    CS1_REQUIRE_ALIGNED(rows, 4);
    const bf16 *s = static_cast<const bf16 *>(src);
    bf16 *d = static_cast<bf16 *>(dst);
    const int threads = 256;
    if (width % 8 == 0 && ld_src % 8 == 0 && ld_dst % 8 == 0 && cs1_aligned(src, 16) && cs1_aligned(dst, 16)) {
        gather_rows_kernel<true><<<cs1_grid((n * (width / 8) + threads - 1) / threads), threads, 0,
                                   cs1_stream(stream)>>>(s, ld_src, src_rows, rows, n, d, ld_dst, width);
    } else {
        gather_rows_kernel<false><<<cs1_grid((n * width + threads - 1) / threads), threads, 0, cs1_stream(stream)>>>(
            s, ld_src, src_rows, rows, n, d, ld_dst, width);
    }
    CS1_LAUNCHED();
}

extern "C" int cs1_letter_readout(const void *residual, const void *delta, const int32_t *last_rows, int64_t n_rows,
                                  const void *final_norm_w, const float *letters, int64_t n_letters, float *logits,
                                  int64_t D, float eps, void *stream) {
    CS1_REQUIRE_SHAPE(n_rows >= 0 && n_letters >= 0 && D >= 0);
    if (n_rows == 0 || n_letters == 0) return 0;
    CS1_REQUIRE(residual && last_rows && final_norm_w && letters && logits, CS1_ERR_NULL);
    // y[D] is dynamic shared memory next to the kernel's 128-byte scratch: 48 KiB in all without an opt-in
    CS1_REQUIRE_SHAPE(D > 0 && D * (int64_t)sizeof(float) <= kMaxDynamicSmem);
    CS1_REQUIRE_ALIGNED(residual, 2);
    CS1_REQUIRE_ALIGNED(delta, 2);
    CS1_REQUIRE_ALIGNED(final_norm_w, 2);
    CS1_REQUIRE_ALIGNED(letters, 4);
    CS1_REQUIRE_ALIGNED(logits, 4);
    CS1_REQUIRE_ALIGNED(last_rows, 4);
    letter_readout_kernel<<<cs1_grid(n_rows), kReadoutThreads, D * sizeof(float), cs1_stream(stream)>>>(
        static_cast<const bf16 *>(residual), static_cast<const bf16 *>(delta), last_rows, n_rows,
        static_cast<const bf16 *>(final_norm_w), letters, n_letters, logits, D, eps);
    CS1_LAUNCHED();
}
