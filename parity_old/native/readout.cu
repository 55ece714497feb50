// readout.cu: the decision read-out (qwen3_5-model.md §3, §8.1 "logits" row): the final residual add and final norm
// at each prompt's last row only, then 26 fp32 dot products against the letter rows of the tied embedding.
#include "common.cuh"

namespace {

constexpr int kReadoutThreads = 256;

// One block per prompt. y (bf16-rounded, kept as float) lives in shared memory; one warp per letter row.
__global__ void letter_readout_kernel(const bf16 *__restrict__ residual, const bf16 *__restrict__ delta,
                                      const int32_t *__restrict__ last_rows, int64_t n_rows,
                                      const bf16 *__restrict__ w, const float *__restrict__ letters,
                                      int64_t n_letters, float *__restrict__ logits, int64_t D, float eps) {
    __shared__ float scratch[32];
    extern __shared__ float y[];  // [D]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < n_rows; r += gridDim.x) {
        const int64_t t = last_rows[r];
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            float h = bf2f(residual[t * D + i]);
            if (delta) h = round_bf(h + bf2f(delta[t * D + i]));
            y[i] = h;
            ss += h * h;
        }
        const float inv = rsqrtf(block_sum(ss, scratch) / (float)D + eps);
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[i] = round_bf(y[i] * inv * (1.0f + bf2f(w[i])));
        __syncthreads();
        for (int64_t j = warp; j < n_letters; j += nwarps) {
            const float *lr = letters + j * D;
            float acc = 0.0f;
            for (int64_t i = lane; i < D; i += 32) acc = fmaf(y[i], lr[i], acc);
            acc = warp_sum(acc);
            if (lane == 0) logits[r * n_letters + j] = acc;
        }
        __syncthreads();  // y is reused by the next prompt
    }
}

}  // namespace

extern "C" int cs1_letter_readout(const void *residual, const void *delta, const int32_t *last_rows, int64_t n_rows,
                                  const void *final_norm_w, const float *letters, int64_t n_letters, float *logits,
                                  int64_t D, float eps, void *stream) {
    CS1_REQUIRE_SHAPE(n_rows >= 0 && n_letters >= 0 && D >= 0);
    if (n_rows == 0 || n_letters == 0) return 0;
    CS1_REQUIRE(residual && last_rows && final_norm_w && letters && logits, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(D > 0 && D * (int64_t)sizeof(float) <= 48 * 1024);
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
