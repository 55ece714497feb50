// skinny_gemm.cu (experiment, not part of libqwen3_5_cuda.so): y[M, N] = x[M, K] w[N, K]^T for small M
// (1..256), bf16 in/out, fp32 accumulate, built for weight streaming: every weight byte is read from HBM once.
//
// Work split ("stream-K"): the (N tile, k tile) iterations, N tile major, form one line of T = NT * KT iterations,
// cut into G (= SM count) nearly equal contiguous ranges, one CTA each. A CTA walks its range with one continuous
// cp.async pipeline (w tile BN x 64 and the matching x tile Mpad x 64 per stage); where a range crosses an N tile
// boundary the CTA finishes one tile's partial sum and starts the next without draining the pipeline.
// The pieces ("segments") of an N tile come from the CTAs lo..hi whose ranges meet it. With one segment the CTA
// writes y. Otherwise each writes its fp32 partial to a workspace slot (slot n + c is unique: along the line n and
// c never decrease and one of them grows at every cut), bumps the tile's counter, and the last to arrive sums the
// partials in the fixed order lo..hi (its own from registers) and writes y, then resets the counter to 0, so a
// launch leaves the workspace as it found it (graph replays work). Results do not depend on which CTA is last:
// bit-identical run to run. No float atomics.
//
// Inside a CTA: WM x WN x WK warps; a warp owns MW m16 tiles (wm, wm + WM, ..) x 64 columns (8 n8 tiles) and 64/WK
// of each stage's k; at a segment end the WK warp groups add their accumulators through shared memory in fixed order.
// mma.sync m16n8k16 bf16 -> fp32, operands by ldmatrix from XOR-swizzled tiles (16-byte chunk c of row r sits at
// chunk c ^ (r & 7), so the 8 rows one ldmatrix phase reads fall in 8 different bank groups).
//
// Fragment layouts (PTX ISA, mma.m16n8k16 bf16), g = lane / 4, t = lane % 4:
//   A (16x16, row)  a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16x8, col)   b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; B[k][n] = w[n][k], so a row of w is a column of B
//   C (16x8, fp32)  c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// ldmatrix.x4: lane l gives the address of row (l % 8) of matrix (l / 8); register i of lane l receives the 32 bits
// at column pair (l % 4) of row (l / 4) of matrix i.
//
// The CPU emulator (emu/) defines SKINNY_EMULATED and brings its own versions of the PTX helpers; it compiles this
// file up to the line "// ---- host side" with g++.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace skinny {

typedef __nv_bfloat16 bf16;

constexpr int kBK = 64;     // k per stage: one 128-byte row per tile row
constexpr int kMaxM = 256;  // rows one CTA covers at most

#ifndef SKINNY_EMULATED

// d += A B (bf16 operands, two per register; fp32 accumulate)
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// four 8x8 b16 matrices from shared memory (layout in the file comment)
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row_addr) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row_addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// 16-byte global -> shared copy (L2 only); zero-fills the destination when !valid
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}

// the same for weights, marked evict-first in L2: they are read once, and x should stay resident
__device__ __forceinline__ uint64_t evict_first_policy() {
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
__device__ __forceinline__ void cp_async16_stream(void *smem, const void *gmem, uint64_t policy) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "l"(policy)
                 : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// partials go through L2 only (another SM reads them); fences and the arrival counter
__device__ __forceinline__ void st_cg4(float4 *p, float4 v) { __stcg(p, v); }
__device__ __forceinline__ float4 ld_cg4(const float4 *p) { return __ldcg(p); }
__device__ __forceinline__ void fence_device() { __threadfence(); }
__device__ __forceinline__ int counter_arrive(int *c) { return atomicAdd(c, 1); }
__device__ __forceinline__ void counter_reset(int *c) { atomicExch(c, 0); }
__device__ __forceinline__ void st_bf16x2(bf16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
}

#endif  // SKINNY_EMULATED

// The line of iterations and its cut into CTAs (host and device use the same integer arithmetic).
struct Plan {
    int64_t nt;     // N tiles (N / BN)
    int64_t kt;     // k tiles per N tile (K / 64)
    int64_t total;  // nt * kt iterations
    int64_t grid;   // CTAs, 1 <= grid <= total
};
__host__ __device__ inline int64_t cta_begin(int64_t c, const Plan &p) { return c * p.total / p.grid; }
// the CTA whose range holds iteration it: the largest c with cta_begin(c) <= it
__host__ __device__ inline int64_t cta_of(int64_t it, const Plan &p) {
    return ((it + 1) * p.grid + p.total - 1) / p.total - 1;
}

// One kernel configuration: MW m16 tiles per warp, WM x WN x WK warps, STAGES pipeline stages.
template <int MW_, int WM_, int WN_, int WK_, int STAGES_>
struct Cfg {
    static constexpr int MW = MW_, WM = WM_, WN = WN_, WK = WK_, STAGES = STAGES_;
    static constexpr int kWarps = WM * WN * WK, kThreads = 32 * kWarps;
    static constexpr int kBM = WM * MW * 16;  // rows covered
    static constexpr int kBN = WN * 64;       // columns per N tile
    static constexpr int kKSteps = 4 / WK;    // k16 steps per warp per stage
    static constexpr int kFrag4 = MW * 8;     // float4 accumulators per lane
    static constexpr int kWBytes = kBN * 128, kXBytes = kBM * 128, kStageBytes = kWBytes + kXBytes;
    static constexpr int kRedBytes = (WK - 1) * WM * WN * kFrag4 * 32 * 16;  // wk >= 1 accumulators
    static constexpr int kSmemBytes = STAGES * kStageBytes + kRedBytes + 16;  // + the "last to arrive" flag
    static constexpr int64_t kSlotFloat4 = int64_t(WM) * WN * kFrag4 * 32;  // one fp32 partial of an N tile
    static_assert(WK == 1 || WK == 2 || WK == 4, "WK divides the 4 k16 steps of a stage");
    static_assert(kBM <= kMaxM, "one CTA covers at most kMaxM rows");
};

// byte offset of 16-byte chunk ch of row r in a swizzled tile of 128-byte rows
__device__ __forceinline__ int swz(int r, int ch) { return r * 128 + ((ch ^ (r & 7)) << 4); }

template <class C>
__global__ void __launch_bounds__(C::kThreads, 1)
    skinny_gemm_kernel(const bf16 *__restrict__ x, int64_t ldx, const bf16 *__restrict__ w, bf16 *__restrict__ y,
                       int64_t ldy, int M, int64_t K, Plan plan, float4 *__restrict__ partials,
                       int *__restrict__ counters) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    constexpr int MW = C::MW, WN = C::WN, WK = C::WK, STAGES = C::STAGES, kBN = C::kBN;
    unsigned char *const red = smem_raw + STAGES * C::kStageBytes;
    int *const last_flag = reinterpret_cast<int *>(red + C::kRedBytes);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wk = warp % WK, wmn = warp / WK, wn = wmn % WN, wm = wmn / WN;
    const int mt_used = (M + 15) / 16;  // m16 tiles holding rows < M; the others are skipped
    // warp wm owns m16 tiles wm, wm + WM, ...: with M below the configuration's rows the work stays spread over
    // the four SM sub-partitions (warp % 4) instead of piling onto the first warps
    const int64_t c = blockIdx.x;
    const int64_t begin = cta_begin(c, plan), end = cta_begin(c + 1, plan);
    const uint64_t policy = evict_first_policy();

    // issue the copies of iteration it into stage s
    auto load = [&](int64_t it, int s) {
        const int64_t n = it / plan.kt, k0 = (it - n * plan.kt) * kBK;
        unsigned char *sw = smem_raw + s * C::kStageBytes, *sx = sw + C::kWBytes;
        const bf16 *wt = w + n * kBN * K + k0;
#pragma unroll
        for (int i = tid; i < kBN * 8; i += C::kThreads) {
            const int r = i >> 3, ch = i & 7;
            cp_async16_stream(sw + swz(r, ch), wt + r * K + ch * 8, policy);
        }
        for (int i = tid; i < mt_used * 16 * 8; i += C::kThreads) {
            const int r = i >> 3, ch = i & 7;
            const bool valid = r < M;  // rows M.. of the last m16 tile are zero-filled
            cp_async16(sx + swz(r, ch), x + (valid ? r : 0) * ldx + k0 + ch * 8, valid);
        }
    };

    float acc[MW][8][4];
    auto zero = [&]() {
#pragma unroll
        for (int mi = 0; mi < MW; ++mi)
#pragma unroll
            for (int nj = 0; nj < 8; ++nj)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
    };

    auto compute = [&](int s) {
        const unsigned char *sw = smem_raw + s * C::kStageBytes, *sx = sw + C::kWBytes;
#pragma unroll
        for (int ks = 0; ks < C::kKSteps; ++ks) {
            const int kk = wk * C::kKSteps + ks;  // this warp's k16 step within the stage
            uint32_t b[4][4];                     // b[p]: b0, b1 of n8 tile 2p, then of n8 tile 2p + 1
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                const int r = wn * 64 + p * 16 + ((lane >> 4) << 3) + (lane & 7);
                ldmatrix_x4(b[p], sw + swz(r, 2 * kk + ((lane >> 3) & 1)));
            }
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                const int mt = mi * C::WM + wm;
                if (mt >= mt_used) continue;  // warp-uniform
                uint32_t a[4];
                ldmatrix_x4(a, sx + swz(mt * 16 + (lane & 15), 2 * kk + (lane >> 4)));
#pragma unroll
                for (int nj = 0; nj < 8; ++nj) mma_bf16(acc[mi][nj], a, &b[nj >> 1][(nj & 1) * 2]);
            }
        }
    };

    // y from a float4 of fragment (mi, nj): rows g and g + 8, columns 2t, 2t + 1
    auto store_y = [&](int64_t n, int mi, int nj, float4 v) {
        const int row = (mi * C::WM + wm) * 16 + (lane >> 2);
        const int64_t col = n * kBN + wn * 64 + nj * 8 + 2 * (lane & 3);
        if (row < M) st_bf16x2(y + row * ldy + col, v.x, v.y);
        if (row + 8 < M) st_bf16x2(y + (row + 8) * ldy + col, v.z, v.w);
    };

    // the end of a segment of N tile n: sum the WK groups, then write y or a partial (and maybe reduce)
    auto finish = [&](int64_t n) {
        if constexpr (WK > 1) {
            float4 *r4 = reinterpret_cast<float4 *>(red);
            if (wk > 0) {
#pragma unroll
                for (int mi = 0; mi < MW; ++mi)
#pragma unroll
                    for (int nj = 0; nj < 8; ++nj) {
                        const float *a = acc[mi][nj];
                        r4[(((wk - 1) * C::WM * WN + wmn) * C::kFrag4 + mi * 8 + nj) * 32 + lane] =
                            make_float4(a[0], a[1], a[2], a[3]);
                    }
            }
            __syncthreads();
            if (wk == 0) {
                for (int g = 1; g < WK; ++g)  // fixed order
#pragma unroll
                    for (int mi = 0; mi < MW; ++mi)
#pragma unroll
                        for (int nj = 0; nj < 8; ++nj) {
                            const float4 v = r4[(((g - 1) * C::WM * WN + wmn) * C::kFrag4 + mi * 8 + nj) * 32 + lane];
                            acc[mi][nj][0] += v.x, acc[mi][nj][1] += v.y, acc[mi][nj][2] += v.z,
                                acc[mi][nj][3] += v.w;
                        }
            }
            // red is written again only at the next segment end, after at least one more __syncthreads
        }
        const int64_t lo = cta_of(n * plan.kt, plan), hi = cta_of((n + 1) * plan.kt - 1, plan);
        if (lo == hi) {  // the whole N tile was ours
            if (wk == 0)
#pragma unroll
                for (int mi = 0; mi < MW; ++mi) {
                    if (mi * C::WM + wm >= mt_used) continue;
#pragma unroll
                    for (int nj = 0; nj < 8; ++nj) {
                        const float *a = acc[mi][nj];
                        store_y(n, mi, nj, make_float4(a[0], a[1], a[2], a[3]));
                    }
                }
            return;
        }
        auto slot = [&](int64_t cta, int mi, int nj) {
            return partials + (n + cta) * C::kSlotFloat4 + (wmn * C::kFrag4 + mi * 8 + nj) * 32 + lane;
        };
        if (wk == 0)
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                if (mi * C::WM + wm >= mt_used) continue;
#pragma unroll
                for (int nj = 0; nj < 8; ++nj) {
                    const float *a = acc[mi][nj];
                    st_cg4(slot(c, mi, nj), make_float4(a[0], a[1], a[2], a[3]));
                }
            }
        fence_device();  // our partial is visible device-wide before the arrival is counted
        __syncthreads();
        if (tid == 0) {
            const int last = counter_arrive(counters + n) == int(hi - lo);
            if (last) counter_reset(counters + n);  // every other segment has arrived: ready for the next launch
            *last_flag = last;
        }
        __syncthreads();
        if (!*last_flag) return;
        fence_device();
        if (wk == 0)
#pragma unroll
            for (int mi = 0; mi < MW; ++mi) {
                if (mi * C::WM + wm >= mt_used) continue;
                float4 sum[8];
                for (int64_t s = lo; s <= hi; ++s) {  // fixed order lo..hi, ours from registers
#pragma unroll
                    for (int nj = 0; nj < 8; ++nj) {
                        const float *a = acc[mi][nj];
                        const float4 v = s == c ? make_float4(a[0], a[1], a[2], a[3]) : ld_cg4(slot(s, mi, nj));
                        if (s == lo) {
                            sum[nj] = v;
                        } else {
                            sum[nj].x += v.x, sum[nj].y += v.y, sum[nj].z += v.z, sum[nj].w += v.w;
                        }
                    }
                }
#pragma unroll
                for (int nj = 0; nj < 8; ++nj) store_y(n, mi, nj, sum[nj]);
            }
    };

    // prologue: STAGES - 1 iterations in flight (a group per stage, possibly empty, keeps the wait count uniform)
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (begin + s < end) load(begin + s, s);
        cp_async_commit();
    }
    zero();
    int stage = 0;
    for (int64_t it = begin; it < end; ++it) {
        cp_async_wait_group<STAGES - 2>();  // iteration it has landed (for this thread's copies) ...
        __syncthreads();                    // ... and for everyone's; the stage computed last is free again
        const int64_t next = it + STAGES - 1;
        if (next < end) load(next, stage == 0 ? STAGES - 1 : stage - 1);
        cp_async_commit();
        compute(stage);
        stage = stage == STAGES - 1 ? 0 : stage + 1;
        if ((it + 1) % plan.kt == 0 || it + 1 == end) {  // CTA-uniform
            finish(it / plan.kt);
            zero();
        }
    }
}

// The configurations (index = config id). Rows covered, columns per tile, threads and shared memory:
//   0: M <= 16   1 x 1 x 4 warps (MW 1, k split 4), 8 stages        1: M <= 32   (MW 2) 1 x 1 x 4 warps, 8 stages
//   2: M <= 64   2 x 1 x 4 warps, 8 stages                      3: M <= 128  4 x 1 x 2 warps, 7 stages
//   4: M <= 256  8 x 1 x 1 warps, 5 stages                      5: M <= 128, BN 128: 4 x 2 x 1 warps, 6 stages
// (M <= 256 with BN 128 needs 128 accumulators per thread with 8 warps: it spilled, so it is not offered.)
typedef Cfg<1, 1, 1, 4, 8> Cfg0;
typedef Cfg<2, 1, 1, 4, 8> Cfg1;
typedef Cfg<2, 2, 1, 4, 8> Cfg2;
typedef Cfg<2, 4, 1, 2, 7> Cfg3;
typedef Cfg<2, 8, 1, 1, 5> Cfg4;
typedef Cfg<2, 4, 2, 1, 6> Cfg5;
constexpr int kConfigs = 6;

struct ConfigInfo {
    int bm, bn, threads, smem;
    int64_t slot_float4;
};
template <class C>
constexpr ConfigInfo info_of() {
    return ConfigInfo{C::kBM, C::kBN, C::kThreads, C::kSmemBytes, C::kSlotFloat4};
}
inline ConfigInfo config_info(int config) {
    switch (config) {
        case 0: return info_of<Cfg0>();
        case 1: return info_of<Cfg1>();
        case 2: return info_of<Cfg2>();
        case 3: return info_of<Cfg3>();
        case 4: return info_of<Cfg4>();
        default: return info_of<Cfg5>();
    }
}
// the default choice: the smallest BN 64 configuration covering M
inline int auto_config(int64_t M) { return M <= 16 ? 0 : M <= 32 ? 1 : M <= 64 ? 2 : M <= 128 ? 3 : 4; }

inline Plan make_plan(int64_t N, int64_t K, int bn, int64_t grid) {
    Plan p;
    p.nt = N / bn;
    p.kt = K / kBK;
    p.total = p.nt * p.kt;
    p.grid = grid < 1 ? 1 : (grid > p.total ? p.total : grid);
    return p;
}
// workspace: the tile counters (zero between launches), then slots n + c for 0 <= n < nt, 0 <= c < grid
inline size_t counters_bytes(const Plan &p) { return (size_t(p.nt) * 4 + 255) / 256 * 256; }
inline size_t workspace_bytes(const Plan &p, const ConfigInfo &ci) {
    return counters_bytes(p) + size_t(p.nt + p.grid - 1) * size_t(ci.slot_float4) * 16;
}

}  // namespace skinny

// ---- host side (the emulator stops here) ---------------------------------------------------------------------------
#include <mutex>

namespace skinny {

enum Status {
    kOk = 0,
    kErrShape = 1,      // M, N, K, ldx, ldy or the configuration do not fit (see skinny_gemm.h comment in README)
    kErrAlignment = 2,  // an operand or the workspace is not 16-byte aligned
    kErrWorkspace = 3,  // workspace too small (skinny_gemm_workspace_bytes)
    kErrDevice = 4,     // the device lacks the shared memory the configuration needs
    kErrCuda = 1000,    // 1000 + cudaError_t
};

static int sm_count() {  // cached per device; attribute queries are legal while a stream is capturing
    static int cached[64] = {};
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    if (cached[dev] == 0) {
        int n = 0;
        if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
        cached[dev] = n;
    }
    return cached[dev];
}

static int64_t default_grid(int64_t grid) { return grid > 0 ? grid : sm_count(); }

template <class C>
int launch(const bf16 *x, int64_t ldx, const bf16 *w, bf16 *y, int64_t ldy, int M, int64_t K, const Plan &plan,
           unsigned char *ws, cudaStream_t stream) {
    static std::once_flag once;
    static cudaError_t attr = cudaSuccess;
    std::call_once(once, [] {
        attr = cudaFuncSetAttribute(skinny_gemm_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    C::kSmemBytes);
    });
    if (attr != cudaSuccess) return kErrCuda + int(attr);
    float4 *partials = reinterpret_cast<float4 *>(ws + counters_bytes(plan));
    skinny_gemm_kernel<C><<<unsigned(plan.grid), C::kThreads, C::kSmemBytes, stream>>>(
        x, ldx, w, y, ldy, M, K, plan, partials, reinterpret_cast<int *>(ws));
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? kOk : kErrCuda + int(e);
}

}  // namespace skinny

extern "C" {

// Bytes of workspace skinny_gemm_ex needs for (M, N, K, config, grid); config -1 / grid 0 = automatic.
int skinny_gemm_workspace_bytes_ex(int64_t M, int64_t N, int64_t K, int config, int64_t grid, size_t *bytes) {
    using namespace skinny;
    if (!bytes || M < 1 || M > kMaxM || N < 64 || N % 64 || K < kBK || K % kBK) return kErrShape;
    if (config < 0) config = auto_config(M);
    if (config >= kConfigs) return kErrShape;
    const ConfigInfo ci = config_info(config);
    if (M > ci.bm || N % ci.bn) return kErrShape;
    const int64_t g = default_grid(grid);
    if (g < 1) return kErrDevice;
    *bytes = workspace_bytes(make_plan(N, K, ci.bn, g), ci);
    return kOk;
}

int skinny_gemm_workspace_bytes(int64_t M, int64_t N, int64_t K, size_t *bytes) {
    return skinny_gemm_workspace_bytes_ex(M, N, K, -1, 0, bytes);
}

// What a call would run: out = {config, rows covered, columns per tile, threads, shared bytes, grid}.
int skinny_gemm_describe(int64_t M, int64_t N, int64_t K, int config, int64_t grid, int64_t out[6]) {
    using namespace skinny;
    size_t unused;
    const int st = skinny_gemm_workspace_bytes_ex(M, N, K, config, grid, &unused);
    if (st != kOk || !out) return st != kOk ? st : kErrShape;
    if (config < 0) config = auto_config(M);
    const ConfigInfo ci = config_info(config);
    const Plan p = make_plan(N, K, ci.bn, default_grid(grid));
    out[0] = config, out[1] = ci.bm, out[2] = ci.bn, out[3] = ci.threads, out[4] = ci.smem, out[5] = p.grid;
    return kOk;
}

// y[M, N] (row stride ldy) = x[M, K] (row stride ldx) w[N, K]^T (w contiguous). 1 <= M <= 256, N % 64 == 0
// (N % 128 for config 5), K % 64 == 0, ldx >= K and ldy >= N multiples of 8, x, w, y, workspace 16-byte
// aligned. The workspace must be zero-filled once after allocation; every launch leaves it zero-filled where it
// matters (the counters). No host synchronisation or allocation: capturable in a CUDA graph.
int skinny_gemm_ex(const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M, int64_t N, int64_t K,
                   void *workspace, size_t workspace_bytes_given, void *stream, int config, int64_t grid) {
    using namespace skinny;
    if (!x || !w || !y || !workspace) return kErrShape;
    if (ldx < K || ldy < N || ldx % 8 || ldy % 8) return kErrShape;
    if ((uintptr_t(x) | uintptr_t(w) | uintptr_t(y) | uintptr_t(workspace)) % 16) return kErrAlignment;
    size_t need = 0;
    const int st = skinny_gemm_workspace_bytes_ex(M, N, K, config, grid, &need);
    if (st != kOk) return st;
    if (workspace_bytes_given < need) return kErrWorkspace;
    if (config < 0) config = auto_config(M);
    const ConfigInfo ci = config_info(config);
    int dev = 0, optin = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return kErrDevice;
    if (optin < ci.smem) return kErrDevice;
    const Plan p = make_plan(N, K, ci.bn, default_grid(grid));
    const bf16 *xb = static_cast<const bf16 *>(x), *wb = static_cast<const bf16 *>(w);
    bf16 *yb = static_cast<bf16 *>(y);
    unsigned char *ws = static_cast<unsigned char *>(workspace);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const int m = int(M);
    switch (config) {
        case 0: return launch<Cfg0>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
        case 1: return launch<Cfg1>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
        case 2: return launch<Cfg2>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
        case 3: return launch<Cfg3>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
        case 4: return launch<Cfg4>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
        default: return launch<Cfg5>(xb, ldx, wb, yb, ldy, m, K, p, ws, s);
    }
}

int skinny_gemm(const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M, int64_t N, int64_t K,
                void *workspace, size_t workspace_bytes_given, void *stream) {
    return skinny_gemm_ex(x, ldx, w, y, ldy, M, N, K, workspace, workspace_bytes_given, stream, -1, 0);
}

}  // extern "C"
