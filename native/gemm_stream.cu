// gemm_stream.cu: y[M, N] = x[M, K] w[N, K]^T for prompt-sized M (<= 256) on Hopper warpgroup MMA (sm_90a).
//
// Why: at prompt-sized M a forward pass streams 7.1 GB of weights, and cuBLASLt's kernels sit ~5 us above the
// bytes' time per GEMM (benchmarks/LEVERS.md, lever 26). Here every block holds ALL M rows, so each weight byte is
// read from HBM by exactly one block: block (tile, split) computes columns [tile * BN, tile * BN + BN) over one
// contiguous range of K.
// - Shared memory: a ring of stages, each one K block of 64 (128 bytes of bf16 per row, 128-byte swizzle: 16-byte
//   chunk c of row r at chunk c ^ (r % 8)): x rows [64 * NWG] then w rows [BN]. cp.async fills it, kStages - 2
//   K blocks ahead. Each column tile starts its K range at its own block (rotated), so the tiles do not all read
//   the same x lines at the same moment.
// - Warpgroup g (128 threads) owns rows [64 g, 64 g + 64) and runs wgmma m64nBNk16 with both operands K-major in
//   shared memory; its fp32 accumulators stay in registers for the whole K range.
// - One barrier per K block: before it every thread waited for its copies of this block and for its warpgroup's
//   MMAs two blocks back, so after it the stage those MMAs read can be refilled.
// - Split-K (splits > 1): each block stores its fp32 partial to the workspace; the last block of a column tile to
//   arrive (atomic counter) adds the splits in split order 0, 1, ... and writes bf16. The order does not depend on
//   which block arrives last, so results are deterministic.
// Rounding: fp32 accumulation, one bf16 rounding (round to nearest even) per output, like cuBLASLt; the sum order
// differs from cuBLASLt's, so bits may differ from cs1_gemm's cuBLASLt plans.
#include <mutex>

#include "common.cuh"
#include "gemm_stream.h"
#include "smem_async.cuh"

namespace {

using namespace cs1_async;

constexpr int kBlockK = 64;          // K per stage: one 128-byte swizzle row of bf16
constexpr int kGroupRows = 64;       // rows of one warpgroup's MMA
constexpr int kStageBudget = 200 * 1024;
constexpr int kMaxStages = 8;

__host__ __device__ constexpr int stage_bytes(int bn, int nwg) { return (nwg * kGroupRows + bn) * kBlockK * 2; }
__host__ __device__ constexpr int stages_for(int bn, int nwg) {
    return kStageBudget / stage_bytes(bn, nwg) > kMaxStages ? kMaxStages : kStageBudget / stage_bytes(bn, nwg);
}
// + 1024: the dynamic shared memory base is aligned up to the swizzle atom
constexpr int smem_bytes_for(int bn, int nwg) { return stages_for(bn, nwg) * stage_bytes(bn, nwg) + 1024; }

struct StreamParams {
    const uint16_t *x;
    const uint16_t *w;
    uint16_t *y;
    float *partial;
    int32_t *counters;
    int64_t ldx, ldy;
    int M, N, K;
    int splits;
    int kblocks;  // ceil(K / 64)
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// wgmma m64nNk16, bf16 inputs, fp32 accumulators d[N / 2] (+=), A and B K-major in shared memory (descriptors).
#define CS1_R8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define CS1_R8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define CS1_R8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define CS1_R8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define CS1_R8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define CS1_R8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define CS1_R8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define CS1_R8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define CS1_R8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define CS1_F8(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])

template <int N>
struct WgMma;

template <>
struct WgMma<64> {
    static __device__ __forceinline__ void ss(float (&d)[32], uint64_t a, uint64_t b) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" CS1_R8_0 ", " CS1_R8_1 ", " CS1_R8_2
                     ", " CS1_R8_3 "}, %32, %33, 1, 1, 1, 0, 0;\n"
                     : CS1_F8(0), CS1_F8(8), CS1_F8(16), CS1_F8(24)
                     : "l"(a), "l"(b));
    }
};
template <>
struct WgMma<80> {
    static __device__ __forceinline__ void ss(float (&d)[40], uint64_t a, uint64_t b) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n80k16.f32.bf16.bf16 {" CS1_R8_0 ", " CS1_R8_1 ", " CS1_R8_2
                     ", " CS1_R8_3 ", " CS1_R8_4 "}, %40, %41, 1, 1, 1, 0, 0;\n"
                     : CS1_F8(0), CS1_F8(8), CS1_F8(16), CS1_F8(24), CS1_F8(32)
                     : "l"(a), "l"(b));
    }
};
template <>
struct WgMma<96> {
    static __device__ __forceinline__ void ss(float (&d)[48], uint64_t a, uint64_t b) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n96k16.f32.bf16.bf16 {" CS1_R8_0 ", " CS1_R8_1 ", " CS1_R8_2
                     ", " CS1_R8_3 ", " CS1_R8_4 ", " CS1_R8_5 "}, %48, %49, 1, 1, 1, 0, 0;\n"
                     : CS1_F8(0), CS1_F8(8), CS1_F8(16), CS1_F8(24), CS1_F8(32), CS1_F8(40)
                     : "l"(a), "l"(b));
    }
};
template <>
struct WgMma<128> {
    static __device__ __forceinline__ void ss(float (&d)[64], uint64_t a, uint64_t b) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" CS1_R8_0 ", " CS1_R8_1 ", " CS1_R8_2
                     ", " CS1_R8_3 ", " CS1_R8_4 ", " CS1_R8_5 ", " CS1_R8_6 ", " CS1_R8_7 "}, %64, %65, 1, 1, 1, 0, 0;\n"
                     : CS1_F8(0), CS1_F8(8), CS1_F8(16), CS1_F8(24), CS1_F8(32), CS1_F8(40), CS1_F8(48), CS1_F8(56)
                     : "l"(a), "l"(b));
    }
};
template <>
struct WgMma<144> {
    static __device__ __forceinline__ void ss(float (&d)[72], uint64_t a, uint64_t b) {
        asm volatile("wgmma.mma_async.sync.aligned.m64n144k16.f32.bf16.bf16 {" CS1_R8_0 ", " CS1_R8_1 ", " CS1_R8_2
                     ", " CS1_R8_3 ", " CS1_R8_4 ", " CS1_R8_5 ", " CS1_R8_6 ", " CS1_R8_7 ", " CS1_R8_8
                     "}, %72, %73, 1, 1, 1, 0, 0;\n"
                     : CS1_F8(0), CS1_F8(8), CS1_F8(16), CS1_F8(24), CS1_F8(32), CS1_F8(40), CS1_F8(48), CS1_F8(56),
                       CS1_F8(64)
                     : "l"(a), "l"(b));
    }
};
#undef CS1_F8

__device__ __forceinline__ void store_bf16x2(uint16_t *dst, float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    *reinterpret_cast<__nv_bfloat162 *>(dst) = v;
}
#endif

// Accumulator layout of m64nBN (per warp w of the warpgroup, as mma.m16n8): d[4j + 2h + e] is row 16w + g + 8h,
// column 8j + 2t + e, with g = lane / 4, t = lane % 4.
template <int BN, int NWG>
__global__ void __launch_bounds__(128 * NWG, 1) gemm_stream_kernel(const StreamParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int kThreads = 128 * NWG;
    constexpr int kXBytes = NWG * kGroupRows * 128;
    constexpr int kStageBytes = stage_bytes(BN, NWG);
    constexpr int kStages = stages_for(BN, NWG);
    static_assert(kStages >= 3, "the ring needs a stage in use, one being refilled and one ahead");
    extern __shared__ uint8_t stream_smem_raw[];
    const uint32_t base = (smem_u32(stream_smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x;
    const int n0 = blockIdx.x * BN;
    const int split = blockIdx.y;
    const int kb0 = static_cast<int>(static_cast<int64_t>(split) * p.kblocks / p.splits);
    const int nk = static_cast<int>(static_cast<int64_t>(split + 1) * p.kblocks / p.splits) - kb0;
    // Each column tile walks its K range from its own starting block: all tiles read the same x, and in lockstep
    // every SM would request the same few x lines from one L2 slice at once.
    const int rot = nk > 0 ? static_cast<int>(blockIdx.x % nk) : 0;

    // Each thread's copies are fixed for the whole walk (the address arithmetic is the loop's main cost, so it is
    // hoisted): thread t copies 16-byte chunk c = t % 8 of rows t / 8 + j * kRowStep. kRowStep is a multiple of 8,
    // so the swizzled chunk position is the same for every j.
    constexpr int kRowStep = kThreads / 8;
    constexpr int kXCopies = NWG * kGroupRows / kRowStep;
    constexpr int kWCopies = (BN + kRowStep - 1) / kRowStep;
    const int r0 = tid >> 3, c = tid & 7;
    const uint32_t chunk = r0 * 128 + ((c ^ (r0 & 7)) << 4);
    const uint16_t *xsrc[kXCopies];
    const uint16_t *wsrc[kWCopies];
    uint32_t xvalid = 0, wvalid = 0, winside = 0;  // bit j: copy j reads a real row / lands inside the w tile
#pragma unroll
    for (int j = 0; j < kXCopies; ++j) {
        const int r = r0 + j * kRowStep;
        xvalid |= (r < p.M ? 1u : 0u) << j;
        xsrc[j] = r < p.M ? p.x + r * p.ldx + c * 8 : p.x;
    }
#pragma unroll
    for (int j = 0; j < kWCopies; ++j) {
        const int r = r0 + j * kRowStep;
        winside |= (r < BN ? 1u : 0u) << j;
        wvalid |= (r < BN && n0 + r < p.N ? 1u : 0u) << j;
        wsrc[j] = r < BN && n0 + r < p.N ? p.w + static_cast<int64_t>(n0 + r) * p.K + c * 8 : p.w;
    }
    const bool k_whole = p.K % kBlockK == 0;

    // K block kb into the stage at shared address sx; rows past M or N and columns past K are zeros
    auto load_stage = [&](uint32_t sx, int kb) {
        const int k0 = kb * kBlockK;
        const bool kin = k_whole || k0 + c * 8 < p.K;
#pragma unroll
        for (int j = 0; j < kXCopies; ++j) {
            const bool ok = kin && ((xvalid >> j) & 1u);
            cp_async_16(sx + chunk + j * kRowStep * 128, ok ? xsrc[j] + k0 : p.x, ok);
        }
#pragma unroll
        for (int j = 0; j < kWCopies; ++j) {
            if (!((winside >> j) & 1u)) continue;
            const bool ok = kin && ((wvalid >> j) & 1u);
            cp_async_16(sx + kXBytes + chunk + j * kRowStep * 128, ok ? wsrc[j] + k0 : p.w, ok);
        }
    };

    // ring positions as running offsets (no divisions in the loop)
    constexpr uint32_t kRingBytes = kStages * kStageBytes;
    uint32_t fill_off = 0;   // stage the next load goes to
    int fill_kb = kb0 + rot;  // K block of the next load
    auto advance_fill = [&]() {
        fill_off = fill_off + kStageBytes == kRingBytes ? 0 : fill_off + kStageBytes;
        fill_kb = fill_kb + 1 == kb0 + nk ? kb0 : fill_kb + 1;
    };
#pragma unroll 1
    for (int s = 0; s < kStages - 2; ++s) {
        if (s < nk) {
            load_stage(base + fill_off, fill_kb);
            advance_fill();
        }
        cp_async_commit();  // empty groups keep the count uniform
    }
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    const int wg = tid >> 7;
    // descriptors of stage 0 (this warpgroup's x rows, the w tile); a stage and a 16-column step add their byte
    // offsets / 16 to the address field
    const uint64_t desc_x = wg_desc(base + wg * (kGroupRows * 128), 16, 1024);
    const uint64_t desc_w = wg_desc(base + kXBytes, 16, 1024);
    uint32_t read_off = 0;
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
        cp_async_wait<kStages - 3>();  // this thread's copies of block i have landed
        fence_async_shared();
        __syncthreads();  // ... everyone's; and every warpgroup's MMAs of block i - 2 are done
        if (i + kStages - 2 < nk) {
            load_stage(base + fill_off, fill_kb);
            advance_fill();
        }
        cp_async_commit();
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / 16; ++kk)
            WgMma<BN>::ss(acc, desc_x + ((read_off + kk * 32) >> 4), desc_w + ((read_off + kk * 32) >> 4));
        wg_commit();
        wg_wait<1>();  // block i - 1 done: its stage is free after the next barrier
        read_off = read_off + kStageBytes == kRingBytes ? 0 : read_off + kStageBytes;
    }
    wg_wait<0>();

    const int warp = (tid >> 5) & 3, lane = tid & 31;
    const int row0 = wg * kGroupRows + warp * 16 + (lane >> 2);
    const int col0 = n0 + 2 * (lane & 3);
    if (p.splits == 1) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = row0 + 8 * h, n = col0 + 8 * j;
                if (m < p.M && n < p.N) store_bf16x2(p.y + m * p.ldy + n, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            }
        return;
    }

    // split-K fix-up (see the file comment)
    float *mine = p.partial + static_cast<int64_t>(split) * p.M * p.N;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = row0 + 8 * h, n = col0 + 8 * j;
            if (m < p.M && n < p.N)
                *reinterpret_cast<float2 *>(mine + static_cast<int64_t>(m) * p.N + n) =
                    make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
    __shared__ int s_last;
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(p.counters + blockIdx.x, 1) == p.splits - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int m = row0 + 8 * h, n = col0 + 8 * j;
            if (m >= p.M || n >= p.N) continue;
            float2 sum = make_float2(0.0f, 0.0f);
            for (int s = 0; s < p.splits; ++s) {
                const float2 v = s == split ? make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1])
                                            : __ldcg(reinterpret_cast<const float2 *>(
                                                  p.partial + (static_cast<int64_t>(s) * p.M + m) * p.N + n));
                sum = s == 0 ? v : make_float2(sum.x + v.x, sum.y + v.y);
            }
            store_bf16x2(p.y + m * p.ldy + n, sum.x, sum.y);
        }
    if (tid == 0) p.counters[blockIdx.x] = 0;  // ready for the next call (and graph replay)
#endif
}

// ---- host side ----------------------------------------------------------------------------------------------------

constexpr int kBlockNs[] = {64, 80, 96, 128, 144};
constexpr int kNumBlockNs = sizeof(kBlockNs) / sizeof(kBlockNs[0]);
constexpr int kMaxGroups = static_cast<int>(stream_gemm::kMaxRows / kGroupRows);

typedef void (*StreamKernel)(const StreamParams);

template <int BN>
struct Row {
    static constexpr StreamKernel kernels[kMaxGroups] = {&gemm_stream_kernel<BN, 1>, &gemm_stream_kernel<BN, 2>,
                                                         &gemm_stream_kernel<BN, 3>, &gemm_stream_kernel<BN, 4>};
    static constexpr int smem[kMaxGroups] = {smem_bytes_for(BN, 1), smem_bytes_for(BN, 2), smem_bytes_for(BN, 3),
                                             smem_bytes_for(BN, 4)};
};

bool pick(int bn, int nwg, StreamKernel *fn, int *smem) {
    if (nwg < 1 || nwg > kMaxGroups) return false;
    switch (bn) {
        case 64: *fn = Row<64>::kernels[nwg - 1], *smem = Row<64>::smem[nwg - 1]; return true;
        case 80: *fn = Row<80>::kernels[nwg - 1], *smem = Row<80>::smem[nwg - 1]; return true;
        case 96: *fn = Row<96>::kernels[nwg - 1], *smem = Row<96>::smem[nwg - 1]; return true;
        case 128: *fn = Row<128>::kernels[nwg - 1], *smem = Row<128>::smem[nwg - 1]; return true;
        case 144: *fn = Row<144>::kernels[nwg - 1], *smem = Row<144>::smem[nwg - 1]; return true;
        default: return false;
    }
}

int bn_index(int bn) {
    for (int i = 0; i < kNumBlockNs; ++i)
        if (kBlockNs[i] == bn) return i;
    return -1;
}

// Per device: compute capability, SM count, and which kernels already have their shared-memory limit raised.
constexpr int kMaxDevices = 64;
struct DeviceState {
    bool queried = false;
    bool runs = false;
    int sms = 0;
    bool smem_set[kNumBlockNs][kMaxGroups] = {};
};
DeviceState g_devices[kMaxDevices];
std::mutex g_mutex;

constexpr bool built() {
#if defined(CS1_SM90A_KERNELS)
    return true;
#else
    return false;
#endif
}

// the current device's state (queried once); nullptr when the query fails or the id is out of range
DeviceState *current_device() {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
        (void)cudaGetLastError();
        return nullptr;
    }
    DeviceState &d = g_devices[dev];
    if (!d.queried) {
        int major = 0, minor = 0, sms = 0, optin = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        d.runs = built() && major == 9 && minor == 0 && optin >= kStageBudget + 1024;
        d.sms = sms;
        d.queried = true;
    }
    return &d;
}

}  // namespace

namespace stream_gemm {

bool available(int *sms) {
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState *d = current_device();
    if (d == nullptr || !d->runs) return false;
    if (sms) *sms = d->sms;
    return true;
}

bool block_n_supported(int block_n) { return bn_index(block_n) >= 0; }

int launch(const Workspace &ws, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M,
           int64_t N, int64_t K, int block_n, int splits, cudaStream_t stream) {
    const int nwg = static_cast<int>((M + kGroupRows - 1) / kGroupRows);
    StreamKernel fn = nullptr;
    int smem = 0;
    if (!pick(block_n, nwg, &fn, &smem)) return CS1_ERR_SHAPE;
    const int64_t tiles = (N + block_n - 1) / block_n;
    const int64_t kblocks = (K + kBlockK - 1) / kBlockK;
    if (splits < 1 || splits > kMaxSplits || splits > kblocks || tiles > (1 << 30)) return CS1_ERR_SHAPE;
    if (splits > 1 && (tiles > kCounters || static_cast<size_t>(splits) * M * N * sizeof(float) > ws.partial_bytes))
        return CS1_ERR_SHAPE;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        DeviceState *d = current_device();
        if (d == nullptr || !d->runs) return CS1_ERR_UNSUPPORTED;
        bool &set = d->smem_set[bn_index(block_n)][nwg - 1];
        if (!set) {
            CS1_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            set = true;
        }
    }
    StreamParams p;
    p.x = static_cast<const uint16_t *>(x);
    p.w = static_cast<const uint16_t *>(w);
    p.y = static_cast<uint16_t *>(y);
    p.partial = ws.partial;
    p.counters = ws.counters;
    p.ldx = ldx;
    p.ldy = ldy;
    p.M = static_cast<int>(M);
    p.N = static_cast<int>(N);
    p.K = static_cast<int>(K);
    p.splits = splits;
    p.kblocks = static_cast<int>(kblocks);
    fn<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(splits)), 128 * nwg, smem, stream>>>(p);
    CS1_LAUNCHED();
}

}  // namespace stream_gemm
