// gemm_stream.cu: y[M, N] = x[M, K] w[N, K]^T for prompt-sized M (<= 256) on Hopper TMA + warpgroup MMA (sm_90a).
//
// Why: at prompt-sized M a forward pass streams 7.1 GB of weights, and cuBLASLt's kernels sit ~5 us above the
// bytes' time per GEMM (benchmarks/LEVERS.md, lever 26). Here every block holds ALL M rows, so each weight byte is
// read from HBM by exactly one block: block (tile, split) computes columns [tile * BN, tile * BN + BN) over one
// contiguous range of K.
// - Shared memory: a ring of stages, each one K block of 64 (128 bytes of bf16 per row, 128-byte swizzle: 16-byte
//   chunk c of row r at chunk c ^ (r % 8), what TMA writes and the wgmma descriptors name): x rows [64 * NWG], then
//   w rows [BN].
// - Warpgroup 0 is the producer: one thread issues the TMA loads of each stage once every consumer (of every block
//   in the cluster) has released it (mbarrier "empty"), and the stage's bytes complete its mbarrier "full".
// - Warpgroups 1..NWG are the consumers: warpgroup g owns rows [64 (g - 1), 64 g) and runs wgmma m64nBNk16 with
//   both operands K-major in shared memory; fp32 accumulators stay in registers for the whole K range.
// - Cluster of CLUSTER column tiles: they read the same x, so each block loads 1 / CLUSTER of every x stage and
//   multicasts it to all blocks of the cluster (x leaves L2 once per cluster instead of once per tile). Every block
//   walks its K range in order, so the cluster size never changes the sum order.
// - Split-K (splits > 1): each block stores its fp32 partial to the workspace; the last block of a column tile to
//   arrive (atomic counter) adds the splits in split order 0, 1, ... and writes bf16. The order does not depend on
//   which block arrives last, so results are deterministic.
// Rounding: fp32 accumulation, one bf16 rounding (round to nearest even) per output, like cuBLASLt; the sum order
// differs from cuBLASLt's, so bits may differ from cs1_gemm's cuBLASLt plans.
// Status: correct and tested (tests/gpu/test_gemm_stream.py) but at 0.6-0.91x cuBLASLt on the 4B's shapes, so the
// forward does not call it (lever 26 lists what was measured and what to try next).
#include <cuda.h>
#include <cudaTypedefs.h>

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
    uint16_t *y;
    float *partial;
    int32_t *counters;
    int64_t ldy;
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
    *reinterpret_cast<__nv_bfloat162 *>(dst) = __floats2bfloat162_rn(lo, hi);
}

// ---- TMA and clusters (one PTX instruction each; the mbarrier helpers are in smem_async.cuh) ----
// arrive on the mbarrier at the same shared-memory offset in block `rank` of the cluster (this block included);
// release at CTA scope: the .cluster-scope release fence (ERRBAR) took ~9 % of the consumers' stall samples
__device__ __forceinline__ void mbar_arrive_in(uint32_t bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
            "r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
}
// the same box into every block of the cluster named in `mask`, completing each one's mbarrier at offset `bar`
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                                   uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
        "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
        : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
#endif

// Accumulator layout of m64nBN (per warp w of a consumer warpgroup, as mma.m16n8): d[4j + 2h + e] is row
// 16w + g + 8h, column 8j + 2t + e, with g = lane / 4, t = lane % 4.
template <int BN, int NWG, int CLUSTER>
__global__ void __launch_bounds__(128 * (NWG + 1), 1)
    gemm_stream_kernel(const __grid_constant__ CUtensorMap xmap, const __grid_constant__ CUtensorMap wmap,
                       const StreamParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int kThreads = 128 * (NWG + 1);
    constexpr int kXBytes = NWG * kGroupRows * 128;
    constexpr int kStageBytes = stage_bytes(BN, NWG);
    constexpr int kStages = stages_for(BN, NWG);
    constexpr int kSliceRows = NWG * kGroupRows / CLUSTER;  // x rows each block of a cluster loads
    static_assert(kSliceRows % 8 == 0, "x slices keep the 1024-byte swizzle alignment");
    extern __shared__ uint8_t stream_smem_raw[];
    __shared__ __align__(8) uint64_t full_bar[kStages], empty_bar[kStages];
    __shared__ int s_last;
    const uint32_t base = (smem_u32(stream_smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid >> 7;
    const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
    const int n0 = blockIdx.x * BN;
    const int split = blockIdx.y;
    const int kb0 = static_cast<int>(static_cast<int64_t>(split) * p.kblocks / p.splits);
    const int nk = static_cast<int>(static_cast<int64_t>(split + 1) * p.kblocks / p.splits) - kb0;

    if (tid == 0) {
        for (int s = 0; s < kStages; ++s) {
            mbar_init(smem_u32(&full_bar[s]), 1);
            mbar_init(smem_u32(&empty_bar[s]), NWG * CLUSTER);  // every consumer warpgroup of the cluster
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if (CLUSTER > 1) cluster_sync();  // the peers' barriers exist before anything multicasts into them
    else __syncthreads();

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    if (wg == 0) {
        if (tid == 0) {  // producer
            int kb = kb0, s = 0;
            uint32_t use = 0;
            for (int i = 0; i < nk; ++i) {
                if (use > 0) mbar_wait(smem_u32(&empty_bar[s]), (use - 1) & 1);
                const uint32_t full = smem_u32(&full_bar[s]);
                mbar_expect_tx(full, kStageBytes);  // this block's w box + every block's x slice
                const uint32_t st = base + s * kStageBytes;
                tma_load(st + kXBytes, &wmap, kb * kBlockK, n0, full);
                const uint32_t slice = st + rank * kSliceRows * 128;
                if (CLUSTER > 1)
                    tma_load_multicast(slice, &xmap, kb * kBlockK, rank * kSliceRows, full, (1u << CLUSTER) - 1);
                else
                    tma_load(slice, &xmap, kb * kBlockK, 0, full);
                ++kb;
                if (++s == kStages) s = 0, ++use;
            }
        }
    } else {  // consumers
        const uint64_t desc_x = wg_desc(base + (wg - 1) * (kGroupRows * 128), 16, 1024);
        const uint64_t desc_w = wg_desc(base + kXBytes, 16, 1024);
        int s = 0, prev = kStages - 1;
        uint32_t use = 0;
        for (int i = 0; i < nk; ++i) {
            mbar_wait(smem_u32(&full_bar[s]), use & 1);
            wg_fence();
            const uint32_t off = s * kStageBytes;
#pragma unroll
            for (int kk = 0; kk < kBlockK / 16; ++kk)
                WgMma<BN>::ss(acc, desc_x + ((off + kk * 32) >> 4), desc_w + ((off + kk * 32) >> 4));
            wg_commit();
            wg_wait<1>();  // block i - 1 done: release its stage in every block of the cluster
            if (i > 0 && (tid & 127) == 0)
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_in(smem_u32(&empty_bar[prev]), r);
            prev = s;
            if (++s == kStages) s = 0, ++use;
        }
        wg_wait<0>();
    }
    // no block leaves while a peer may still multicast into it or arrive on its barriers
    if (CLUSTER > 1) cluster_sync();

    const bool consumer = wg > 0;
    const int warp = (tid >> 5) & 3, lane = tid & 31;
    const int row0 = (wg - 1) * kGroupRows + warp * 16 + (lane >> 2);
    const int col0 = n0 + 2 * (lane & 3);
    if (p.splits == 1) {
        if (!consumer) return;
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
    if (consumer) {
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
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) s_last = atomicAdd(p.counters + blockIdx.x, 1) == p.splits - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    // the tile's sum, 4 columns per item and kBatch items per thread in flight; every block's partial (this one's
    // included) is read back, so the order is split 0, 1, ... whichever block is last
    constexpr int kQuads = BN / 4, kBatch = 4;
    const int items = p.M * kQuads;
    for (int q0 = tid; q0 < items; q0 += kThreads * kBatch) {
        float4 sum[kBatch];
        for (int sp = 0; sp < p.splits; ++sp) {
#pragma unroll
            for (int b = 0; b < kBatch; ++b) {
                const int q = q0 + b * kThreads, m = q / kQuads, n = n0 + 4 * (q % kQuads);
                if (q >= items || n >= p.N) continue;
                const float4 v =
                    __ldcg(reinterpret_cast<const float4 *>(p.partial + (static_cast<int64_t>(sp) * p.M + m) * p.N + n));
                sum[b] = sp == 0 ? v : make_float4(sum[b].x + v.x, sum[b].y + v.y, sum[b].z + v.z, sum[b].w + v.w);
            }
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int q = q0 + b * kThreads, m = q / kQuads, n = n0 + 4 * (q % kQuads);
            if (q >= items || n >= p.N) continue;
            uint16_t *dst = p.y + m * p.ldy + n;
            store_bf16x2(dst, sum[b].x, sum[b].y);
            store_bf16x2(dst + 2, sum[b].z, sum[b].w);
        }
    }
    if (tid == 0) p.counters[blockIdx.x] = 0;  // ready for the next call (and graph replay)
#endif
}

// ---- host side ----------------------------------------------------------------------------------------------------

typedef void (*StreamKernel)(const CUtensorMap, const CUtensorMap, const StreamParams);

// whether BN accumulators (BN / 2 registers) + ~40 others fit the register file at 128 * (NWG + 1) threads
constexpr bool fits(int bn, int nwg) { return (bn / 2 + 40) * 128 * (nwg + 1) <= 65536; }

// the four-warpgroup form (M > 192) where its accumulators fit, else none
template <int BN, int C>
StreamKernel four_groups() {
    if constexpr (fits(BN, 4)) return &gemm_stream_kernel<BN, 4, C>;
    else return nullptr;
}

template <int BN>
StreamKernel kernel_for(int nwg, int cluster) {
    switch (cluster * 8 + nwg) {
        case 9: return &gemm_stream_kernel<BN, 1, 1>;
        case 10: return &gemm_stream_kernel<BN, 2, 1>;
        case 11: return &gemm_stream_kernel<BN, 3, 1>;
        case 12: return four_groups<BN, 1>();
        case 17: return &gemm_stream_kernel<BN, 1, 2>;
        case 18: return &gemm_stream_kernel<BN, 2, 2>;
        case 19: return &gemm_stream_kernel<BN, 3, 2>;
        case 20: return four_groups<BN, 2>();
        default: return nullptr;
    }
}

constexpr int kBlockNs[] = {64, 80, 96, 128, 144};
constexpr int kNumBlockNs = sizeof(kBlockNs) / sizeof(kBlockNs[0]);
constexpr int kMaxGroups = static_cast<int>(stream_gemm::kMaxRows / kGroupRows);
constexpr int kClusters[] = {1, 2};
constexpr int kNumClusters = sizeof(kClusters) / sizeof(kClusters[0]);

int bn_index(int bn) {
    for (int i = 0; i < kNumBlockNs; ++i)
        if (kBlockNs[i] == bn) return i;
    return -1;
}
int cluster_index(int c) {
    for (int i = 0; i < kNumClusters; ++i)
        if (kClusters[i] == c) return i;
    return -1;
}

StreamKernel pick(int bn, int nwg, int cluster) {
    switch (bn) {
        case 64: return kernel_for<64>(nwg, cluster);
        case 80: return kernel_for<80>(nwg, cluster);
        case 96: return kernel_for<96>(nwg, cluster);
        case 128: return kernel_for<128>(nwg, cluster);
        case 144: return kernel_for<144>(nwg, cluster);
        default: return nullptr;
    }
}

// Per device: whether the kernels run there, and which kernels already have their shared-memory limit raised.
constexpr int kMaxDevices = 64;
struct DeviceState {
    bool queried = false;
    bool runs = false;
    bool smem_set[kNumBlockNs][kNumClusters][kMaxGroups] = {};
};
DeviceState g_devices[kMaxDevices];
std::mutex g_mutex;
PFN_cuTensorMapEncodeTiled_v12000 g_encode = nullptr;

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
        int major = 0, minor = 0, optin = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            return nullptr;
        }
        if (g_encode == nullptr && built()) {  // the driver's tensor-map encoder, through the runtime
            void *fn = nullptr;
            cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
            if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) ==
                    cudaSuccess &&
                q == cudaDriverEntryPointSuccess)
                g_encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
            else
                (void)cudaGetLastError();
        }
        d.runs = built() && g_encode != nullptr && major == 9 && minor == 0 && optin >= kStageBudget + 2048;
        d.queried = true;
    }
    return &d;
}

// a 2-D bf16 tensor map: `rows` rows of `cols` elements, `row_bytes` apart; boxes of 64 columns x box_rows rows,
// 128-byte swizzle, zeros outside the tensor
int encode_map(CUtensorMap *map, const void *ptr, int64_t cols, int64_t rows, int64_t row_bytes, int box_rows) {
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
    const cuuint32_t box[2] = {kBlockK, static_cast<cuuint32_t>(box_rows)};
    const cuuint32_t steps[2] = {1, 1};
    const CUresult r = g_encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(ptr), dims, strides, box,
                                steps, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? 0 : CS1_ERR_UNSUPPORTED;
}

}  // namespace

namespace stream_gemm {

bool available() {
    std::lock_guard<std::mutex> lock(g_mutex);
    DeviceState *d = current_device();
    return d != nullptr && d->runs;
}

bool block_n_supported(int block_n) { return bn_index(block_n) >= 0; }
bool cluster_supported(int cluster) { return cluster_index(cluster) >= 0; }

int launch(const Workspace &ws, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M,
           int64_t N, int64_t K, int block_n, int splits, int cluster, cudaStream_t stream) {
    const int nwg = static_cast<int>((M + kGroupRows - 1) / kGroupRows);
    StreamKernel fn = pick(block_n, nwg, cluster);
    if (fn == nullptr) return CS1_ERR_SHAPE;
    const int smem = smem_bytes_for(block_n, nwg);
    const int64_t tiles = (N + block_n - 1) / block_n;
    const int64_t grid_x = (tiles + cluster - 1) / cluster * cluster;  // whole clusters (extra tiles are all-zero w)
    const int64_t kblocks = (K + kBlockK - 1) / kBlockK;
    if (splits < 1 || splits > kMaxSplits || splits > kblocks || grid_x > (1 << 30)) return CS1_ERR_SHAPE;
    if (splits > 1 && (grid_x > kCounters || static_cast<size_t>(splits) * M * N * sizeof(float) > ws.partial_bytes))
        return CS1_ERR_SHAPE;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        DeviceState *d = current_device();
        if (d == nullptr || !d->runs) return CS1_ERR_UNSUPPORTED;
        bool &set = d->smem_set[bn_index(block_n)][cluster_index(cluster)][nwg - 1];
        if (!set) {
            CS1_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void *>(fn),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            set = true;
        }
    }
    CUtensorMap xmap, wmap;
    int st = encode_map(&xmap, x, K, M, ldx * 2, nwg * kGroupRows / cluster);
    if (!st) st = encode_map(&wmap, w, K, N, K * 2, block_n);
    if (st) return st;
    StreamParams p;
    p.y = static_cast<uint16_t *>(y);
    p.partial = ws.partial;
    p.counters = ws.counters;
    p.ldy = ldy;
    p.M = static_cast<int>(M);
    p.N = static_cast<int>(N);
    p.K = static_cast<int>(K);
    p.splits = splits;
    p.kblocks = static_cast<int>(kblocks);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(splits));
    cfg.blockDim = dim3(128 * (nwg + 1));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CS1_CUDA(cudaLaunchKernelEx(&cfg, fn, xmap, wmap, p));
    CS1_LAUNCHED();
}

}  // namespace stream_gemm
