// prefetch.cu: an L2 prefetch of a weight range, for a side stream (see cs1_l2_prefetch in cs1.h).
//
// Why: at prompt-sized M the projections stream their weights from HBM, while the gated-DeltaNet and attention
// kernels before them are latency-bound and leave the HBM nearly idle. Prefetching the next projection's weights
// during that window lets the GEMM read them from L2. Nothing is written, so results cannot change.
#include "common.cuh"

namespace {

constexpr int kPrefetchBlocks = 16;  // few threads on a few SMs: they sit beside the kernels of the main stream
constexpr int kPrefetchThreads = 64;

// Each thread takes every (blocks * threads)-th piece of the range.
__global__ void l2_prefetch_kernel(const unsigned char *__restrict__ p, size_t bytes) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    const size_t first = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // the SM's bulk-copy unit (TMA) fetches whole 16 KB pieces: few instructions, no registers held
    constexpr size_t kBulkBytes = size_t(16) << 10;
    for (size_t i = first; i * kBulkBytes < bytes; i += stride) {
        const size_t off = i * kBulkBytes;
        const unsigned n = unsigned(min(kBulkBytes, bytes - off));
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
    }
#else
    constexpr size_t kLineBytes = 128;
    for (size_t i = first; i * kLineBytes < bytes; i += stride)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + i * kLineBytes));
#endif
}

}  // namespace

extern "C" int cs1_l2_prefetch(const void *ptr, size_t bytes, void *stream) {
    if (bytes == 0) return 0;
    CS1_REQUIRE_PTR(ptr);
    CS1_REQUIRE_ALIGNED(ptr, 16);
    CS1_REQUIRE_SHAPE(bytes % 16 == 0);
    l2_prefetch_kernel<<<kPrefetchBlocks, kPrefetchThreads, 0, cs1_stream(stream)>>>(
        static_cast<const unsigned char *>(ptr), bytes);
    CS1_LAUNCHED();
}
