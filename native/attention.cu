// attention.cu: gated full attention (Qwen3.5 layers 3, 7, ...), FlashAttention-2 style on bf16 tensor cores.
//
// out[t, h*256 + d] = bf16( bf16(attn) * bf16(sigmoid(gate)) ), attn = softmax(q k^T * scale) v per prompt.
// - One block = one (prompt, query tile, q head). Each warp owns 16 query rows; keys stream through shared memory
//   in tiles of 32 (cp.async: the next K tile loads during P.V, the next V tile during Q.K^T).
// - mma.sync m16n8k16 bf16 -> fp32, operands through ldmatrix; online softmax in fp32, base 2 (scale * log2 e);
//   P is rounded to bf16 for P.V; the row sum uses the fp32 P (as FlashAttention-2 does).
// - Two tiles, 64 query rows / 128 threads and 128 rows / 256 threads, run the same per-warp code over the same
//   32-key tiles (aligned to the prompt start, skipped per warp by the same rule), so they are byte-identical.
// - Packed prompts: blocks find their (prompt, tile) by scanning cu_seqlens on the device; rows at or after
//   cu_seqlens[n_seqs] are padding and get zeros. Causal blocks take a prompt's last (longest) tile first.
// - sm_90 (compute capability 9.0, target-90 build): bidirectional calls run the wgmma kernels instead (one or two
//   heads per block), the same math on warpgroup MMA (wgmma) with 64-key tiles; see their section below.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "attention_policy.h"
#include "cs1.h"
#include "gate.cuh"
#include "smem_async.cuh"

namespace {

namespace policy = cs1_attention_policy;
using namespace cs1_async;

constexpr int kHeadDim = policy::kHeadDim;
constexpr int kKeyTile = policy::kKeyTileRows;
constexpr int kRowElems = policy::kSmemRowElems;
constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per 256-element row
constexpr unsigned kFullMask = 0xffffffffu;

struct AttnParams {
    const uint16_t *q;     // [T, Hq, 256]
    const uint16_t *k;     // [T, Hk, 256]
    const uint16_t *v;     // rows of ldv, head j at v + j*256
    const uint16_t *gate;  // [T, Hq*256]
    uint16_t *out;         // [T, Hq*256]
    const int32_t *cu_seqlens;
    int64_t ldv;
    int T;
    int n_seqs;
    int Hq;
    int Hk;
    int group;  // Hq / Hk
    float scale_log2;
    int gate_is_sigmoid;  // 1: gate already holds bf16(sigmoid(gate)) (cs1_attn_prep_sigmoid_gate)
};

// ---- small device helpers (local: this file must link next to the other native/*.cu) ---------------------

// c += a (16x16 row-major bf16) * b (16x8 col-major bf16), fp32 accumulate
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// two floats -> bf16x2 (round to nearest even), `lo` in the low half (the lower column)
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

__device__ __forceinline__ uint32_t float_to_bf16_bits(float x) {
    __nv_bfloat16 b = __float2bfloat16_rn(x);
    return static_cast<uint32_t>(*reinterpret_cast<uint16_t *>(&b));
}

// bf16(a * bf16(sigmoid(g))) for the two bf16 values packed in each word (a already rounded to bf16); with
// is_sigmoid, g already is bf16(sigmoid(gate)), so the product is the same
__device__ __forceinline__ uint32_t gate_pair(uint32_t a2, uint32_t g2, bool is_sigmoid) {
    uint32_t r = 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const float a = bf16_bits_to_float((a2 >> (16 * half)) & 0xffffu);
        const float g = bf16_bits_to_float((g2 >> (16 * half)) & 0xffffu);
        const float sig = is_sigmoid ? g : cs1_gate_sigmoid(g);
        r |= float_to_bf16_bits(a * sig) << (16 * half);
    }
    return r;
}

// ROWS rows of 256 bf16 from global (row stride ld elements) into shared rows of kRowElems; rows >= valid are zeros.
// Thread tid copies chunk tid % 32 of rows tid / 32, tid / 32 + NTHREADS / 32, ...
template <int ROWS, int NTHREADS>
__device__ __forceinline__ void load_rows_async(uint16_t *s, const uint16_t *g, int64_t ld, int valid, int tid) {
    static_assert(NTHREADS % kChunksPerRow == 0 && ROWS % (NTHREADS / kChunksPerRow) == 0, "tile split");
    constexpr int kRowStep = NTHREADS / kChunksPerRow;
    const int r0 = tid / kChunksPerRow;
    const int ch = tid % kChunksPerRow;
    const uint16_t *src = g + r0 * ld + ch * 8;
    const uint32_t dst = smem_u32(s + r0 * kRowElems + ch * 8);
#pragma unroll 4
    for (int i = 0; i < ROWS / kRowStep; ++i) {
        const int r = r0 + i * kRowStep;
        const bool ok = r < valid;
        cp_async_16(dst + i * kRowStep * kRowElems * 2, ok ? src + i * kRowStep * ld : g, ok);
    }
}

struct TileWork {
    int start;  // first row of the segment (prompt or padding)
    int end;    // one past its last row
    int tile;   // query tile index inside the segment
    bool padding;
};

// Maps a tile slot to (segment, tile) by a warp-parallel scan of cu_seqlens (each warp computes the same answer).
// Segments are the prompts (clamped to be non-decreasing and inside [0, T]) and then the padding rows [end, T).
// Returns false when the slot has no work.
template <int BQ, bool CAUSAL>
__device__ __forceinline__ bool find_tile(const AttnParams &p, int slot, TileWork &w) {
    const int lane = threadIdx.x & 31;
    int prev_end = min(max(__ldg(p.cu_seqlens), 0), p.T);
    int base = 0;  // tiles in the segments before this group of 32 prompts
    for (int i0 = 0; i0 < p.n_seqs; i0 += 32) {
        const int i = i0 + lane;
        int e = i < p.n_seqs ? __ldg(p.cu_seqlens + i + 1) : INT_MIN;
        e = max(e, prev_end);
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int o = __shfl_up_sync(kFullMask, e, d);
            if (lane >= d) e = max(e, o);
        }
        e = min(e, p.T);
        int s = __shfl_up_sync(kFullMask, e, 1);
        if (lane == 0) s = prev_end;
        const int n = (e - s + BQ - 1) / BQ;
        int incl = n;
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const int o = __shfl_up_sync(kFullMask, incl, d);
            if (lane >= d) incl += o;
        }
        const unsigned hit = __ballot_sync(kFullMask, slot < base + incl);
        if (hit) {
            const int src = __ffs(hit) - 1;
            w.start = __shfl_sync(kFullMask, s, src);
            w.end = __shfl_sync(kFullMask, e, src);
            const int count = __shfl_sync(kFullMask, n, src);
            const int before = base + __shfl_sync(kFullMask, incl - n, src);
            const int local = slot - before;
            w.tile = CAUSAL ? count - 1 - local : local;  // causal: longest tile first
            w.padding = false;
            return true;
        }
        base += __shfl_sync(kFullMask, incl, 31);
        prev_end = __shfl_sync(kFullMask, e, 31);
    }
    const int pad_tiles = (p.T - prev_end + BQ - 1) / BQ;
    if (slot < base + pad_tiles) {
        w.start = prev_end;
        w.end = p.T;
        w.tile = slot - base;
        w.padding = true;
        return true;
    }
    return false;
}

// Where a block's query rows (from row0 of its segment, head `head`) and its kv head's keys and values start.
struct HeadRows {
    const uint16_t *q, *k, *v;
    int64_t ldk;  // k row stride (elements)
};

__device__ __forceinline__ HeadRows head_rows(const AttnParams &p, const TileWork &w, int64_t ldq, int row0,
                                              int head) {
    const int kvh = head / p.group;
    HeadRows r;
    r.ldk = static_cast<int64_t>(p.Hk) * kHeadDim;
    r.q = p.q + static_cast<int64_t>(w.start + row0) * ldq + head * kHeadDim;
    r.k = p.k + static_cast<int64_t>(w.start) * r.ldk + kvh * kHeadDim;
    r.v = p.v + static_cast<int64_t>(w.start) * p.ldv + kvh * kHeadDim;
    return r;
}

// Zeros into the output rows [row0, row0 + rows) of a padding segment, one head: 16-byte stores, threads tid of n.
__device__ __forceinline__ void zero_padding_rows(const AttnParams &p, const TileWork &w, int64_t ldq, int row0,
                                                  int rows, int head, int tid, int n) {
    uint16_t *o = p.out + static_cast<int64_t>(w.start + row0) * ldq + head * kHeadDim;
    for (int c = tid; c < rows * kChunksPerRow; c += n)
        *reinterpret_cast<uint4 *>(o + (c / kChunksPerRow) * ldq + (c % kChunksPerRow) * 8) = make_uint4(0, 0, 0, 0);
}

// 1 / (softmax row sum) of the accumulator rows g and g + 8 from this thread's partial sums (reduced over the quad)
__device__ __forceinline__ void inverse_row_sums(const float (&row_sum)[2], float (&inv)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_sum[r];
        l += __shfl_xor_sync(kFullMask, l, 1);
        l += __shfl_xor_sync(kFullMask, l, 2);
        inv[r] = 1.0f / l;
    }
}

// A block's query tile (find_tile) with the values every kernel derives from it; a padding tile gets its zeros here
// (threads tid of n). False when the block has nothing more to do: no tile, or a padding tile.
struct QueryTile {
    TileWork w;
    int64_t ldq;  // q, gate and out row stride (elements)
    int row0;     // first query row, relative to the segment
    int seq_len;  // the segment's length
};

template <int BQ, bool CAUSAL>
__device__ __forceinline__ bool query_tile(const AttnParams &p, int slot, int head, int tid, int n, QueryTile &q) {
    if (!find_tile<BQ, CAUSAL>(p, slot, q.w)) return false;
    q.ldq = static_cast<int64_t>(p.Hq) * kHeadDim;
    q.row0 = q.w.tile * BQ;
    q.seq_len = q.w.end - q.w.start;
    if (q.w.padding) {  // padding rows: zeros
        zero_padding_rows(p, q.w, q.ldq, q.row0, min(BQ, q.seq_len - q.row0), head, tid, n);
        return false;
    }
    return true;
}

// one 16-byte piece of an output row: bf16(attn) a times the gate gt (bf16 pairs)
__device__ __forceinline__ uint4 gate_piece(const uint4 a, const uint4 gt, bool is_sigmoid) {
    uint4 o;
    o.x = gate_pair(a.x, gt.x, is_sigmoid);
    o.y = gate_pair(a.y, gt.y, is_sigmoid);
    o.z = gate_pair(a.z, gt.z, is_sigmoid);
    o.w = gate_pair(a.w, gt.w, is_sigmoid);
    return o;
}

// out = bf16(attn) * bf16(sigmoid(gate)) for the 16 rows of one warp and head from wrow0 (those before seq_len):
// bf16(attn) staged at sO (row stride kRowElems), out0 = the first row's element offset + lane * 8; one full
// 512-byte row per iteration. The gate comes from global memory, or (sG non-null) from the warp's 16 rows staged
// in shared memory (plain rows of 256 elements) while the last key tile was processed.
__device__ __forceinline__ void store_gated_rows(const AttnParams &p, const uint16_t *sO, int64_t ldq, int64_t out0,
                                                 int wrow0, int seq_len, int lane, const uint16_t *sG = nullptr) {
    for (int i = 0; i < 16 && wrow0 + i < seq_len; ++i) {
        const uint4 a = *reinterpret_cast<const uint4 *>(sO + i * kRowElems + lane * 8);
        const uint4 gt = sG != nullptr ? *reinterpret_cast<const uint4 *>(sG + i * kHeadDim + lane * 8)
                                       : __ldg(reinterpret_cast<const uint4 *>(p.gate + out0 + i * ldq));
        *reinterpret_cast<uint4 *>(p.out + out0 + i * ldq) = gate_piece(a, gt, p.gate_is_sigmoid != 0);
    }
}

// The gate of the warp's 16 rows (those before seq_len; out0 as above) into registers, every load issued before
// any is used: the loop above waits for each row's load before it issues the next (16 global latencies in a row,
// ~9 % of the two-head wgmma kernel's warp time at 2,048 rows in Nsight's stall samples). Only that kernel calls it,
// and only in the sm_90a pass (hence maybe_unused).
[[maybe_unused]] __device__ __forceinline__ void load_gate_rows(const AttnParams &p, int64_t ldq, int64_t out0,
                                                                int wrow0, int seq_len, uint4 (&gt)[16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i)
        if (wrow0 + i < seq_len) gt[i] = __ldg(reinterpret_cast<const uint4 *>(p.gate + out0 + i * ldq));
}

// store_gated_rows with the gate already in registers (load_gate_rows). Unrolled (the gate is in registers), so the
// sigmoid's form is a template argument: the path the forward runs (sigmoid in attn_prep) stays short code.
template <bool kGateIsSigmoid>
__device__ __forceinline__ void store_gated_rows(const AttnParams &p, const uint16_t *sO, int64_t ldq, int64_t out0,
                                                 int wrow0, int seq_len, int lane, const uint4 (&gt)[16]) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        if (wrow0 + i >= seq_len) break;
        const uint4 a = *reinterpret_cast<const uint4 *>(sO + i * kRowElems + lane * 8);
        *reinterpret_cast<uint4 *>(p.out + out0 + i * ldq) = gate_piece(a, gt[i], kGateIsSigmoid);
    }
}

// ---- the kernel -------------------------------------------------------------------------------------------

template <int BQ, bool CAUSAL>
__global__ void __launch_bounds__(BQ * 2, 1) gated_attention_kernel(const AttnParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr int kThreads = BQ * 2;
    extern __shared__ __align__(16) uint16_t smem[];
    uint16_t *sQ = smem;
    uint16_t *sK = sQ + BQ * kRowElems;
    uint16_t *sV = sK + kKeyTile * kRowElems;

    const int tid = threadIdx.x;
    const int head = blockIdx.x % p.Hq;
    const int slot = blockIdx.x / p.Hq;
    QueryTile qt;
    if (!query_tile<BQ, CAUSAL>(p, slot, head, tid, kThreads, qt)) return;
    const TileWork &w = qt.w;
    const int64_t ldq = qt.ldq;
    const int row0 = qt.row0, seq_len = qt.seq_len;

    const HeadRows in = head_rows(p, w, ldq, row0, head);
    const int64_t ldk = in.ldk;
    const uint16_t *gQ = in.q, *gK = in.k, *gV = in.v;
    const int key_end = CAUSAL ? min(seq_len, row0 + BQ) : seq_len;  // keys this block may need
    const int n_key_tiles = (key_end + kKeyTile - 1) / kKeyTile;

    // groups in flight, in order: [Q + K0] [V0] then per key tile [K next] [V next] (empty at the end)
    load_rows_async<BQ, kThreads>(sQ, gQ, ldq, min(BQ, seq_len - row0), tid);
    load_rows_async<kKeyTile, kThreads>(sK, gK, ldk, min(kKeyTile, seq_len), tid);
    cp_async_commit();
    load_rows_async<kKeyTile, kThreads>(sV, gV, p.ldv, min(kKeyTile, seq_len), tid);
    cp_async_commit();

    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;  // accumulator row (and row + 8)
    const int t = lane & 3;   // accumulator column pair
    const int wrow0 = row0 + warp * 16;  // this warp's first row, relative to the segment
    const bool warp_has_rows = wrow0 < seq_len;
    const int wrow_last = min(wrow0 + 15, seq_len - 1);

    // per-lane ldmatrix addresses (see the fragment layouts of mma.m16n8k16)
    const uint32_t q_lane = smem_u32(sQ + (warp * 16 + (lane & 15)) * kRowElems + (lane >> 4) * 8);
    const uint32_t k_lane = smem_u32(sK + ((lane >> 4) * 8 + (lane & 7)) * kRowElems + ((lane >> 3) & 1) * 8);
    const uint32_t v_lane = smem_u32(sV + (((lane >> 3) & 1) * 8 + (lane & 7)) * kRowElems + (lane >> 4) * 8);

    float acc[kHeadDim / 8][4];
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};  // in scaled base-2 units
    float row_sum[2] = {0.f, 0.f};              // this thread's partial sums; reduced over the quad at the end
    uint32_t pa[2][4];                          // P as bf16 A fragments for the two 16-key steps

    for (int kt = 0; kt < n_key_tiles; ++kt) {
        const int key0 = kt * kKeyTile;
        cp_async_wait<1>();
        __syncthreads();
        // the same rule in both tiles: a warp works on a key tile iff it has a row that may see one of its keys
        const bool active = warp_has_rows && (!CAUSAL || key0 <= wrow_last);
        if (active) {
            float s[4][4];
#pragma unroll
            for (int j = 0; j < 4; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
            for (int ks = 0; ks < kHeadDim / 16; ++ks) {
                uint32_t a[4];
                ldmatrix_x4(a, q_lane + ks * 32);
#pragma unroll
                for (int np = 0; np < 2; ++np) {
                    uint32_t b[4];
                    ldmatrix_x4(b, k_lane + (np * 16 * kRowElems + ks * 16) * 2);
                    mma_bf16_16816(s[2 * np], a, b[0], b[1]);
                    mma_bf16_16816(s[2 * np + 1], a, b[2], b[3]);
                }
            }
            const bool need_mask = key0 + kKeyTile > seq_len || (CAUSAL && key0 + kKeyTile - 1 > wrow0);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = __fmul_rn(s[j][e], p.scale_log2);
                    if (need_mask) {
                        const int key = key0 + j * 8 + 2 * t + (e & 1);
                        const int row = wrow0 + g + (e >> 1) * 8;
                        if (key >= seq_len || (CAUSAL && key > row)) x = -INFINITY;
                    }
                    s[j][e] = x;
                }
            }
            float alpha[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {  // explicit _rn arithmetic: no FMA contraction, same bits in both tiles
                float mx = row_max[r];
#pragma unroll
                for (int j = 0; j < 4; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
                const float m_use = mx == -INFINITY ? 0.f : mx;  // a row with no key yet: keep it at zero
                alpha[r] = exp2f(row_max[r] - m_use);
                row_max[r] = mx;
                row_sum[r] = __fmul_rn(row_sum[r], alpha[r]);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[j][2 * r] = exp2f(__fsub_rn(s[j][2 * r], m_use));
                    s[j][2 * r + 1] = exp2f(__fsub_rn(s[j][2 * r + 1], m_use));
                    row_sum[r] = __fadd_rn(row_sum[r], __fadd_rn(s[j][2 * r], s[j][2 * r + 1]));
                }
            }
            // rescale the accumulators only when a row maximum moved (x * 1 is exact: skipping changes no bit)
            if (__any_sync(kFullMask, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
                for (int n = 0; n < kHeadDim / 8; ++n) {
                    acc[n][0] *= alpha[0];
                    acc[n][1] *= alpha[0];
                    acc[n][2] *= alpha[1];
                    acc[n][3] *= alpha[1];
                }
            }
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                pa[kk][0] = pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
                pa[kk][1] = pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
                pa[kk][2] = pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
                pa[kk][3] = pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            }
        }
        __syncthreads();  // everyone is done with this K tile
        if (kt + 1 < n_key_tiles) {
            const int next = key0 + kKeyTile;
            load_rows_async<kKeyTile, kThreads>(sK, gK + next * ldk, ldk, min(kKeyTile, seq_len - next), tid);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();  // this V tile has landed
        if (active) {
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
                for (int nd = 0; nd < kHeadDim / 16; ++nd) {
                    uint32_t b[4];
                    ldmatrix_x4_trans(b, v_lane + (kk * 16 * kRowElems + nd * 16) * 2);
                    mma_bf16_16816(acc[2 * nd], pa[kk], b[0], b[1]);
                    mma_bf16_16816(acc[2 * nd + 1], pa[kk], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // everyone is done with this V tile
        if (kt + 1 < n_key_tiles) {
            const int next = key0 + kKeyTile;
            load_rows_async<kKeyTile, kThreads>(sV, gV + next * p.ldv, p.ldv, min(kKeyTile, seq_len - next), tid);
        }
        cp_async_commit();
    }
    cp_async_wait<0>();

    if (!warp_has_rows) return;
    // Epilogue. Stage bf16(attn) in this warp's own query rows (no other warp reads them), then apply the gate
    // with 16-byte loads and stores: each iteration is one full 512-byte row.
    float inv[2];
    inverse_row_sums(row_sum, inv);
    __syncwarp();
    uint16_t *sO = sQ + warp * 16 * kRowElems;
#pragma unroll
    for (int n = 0; n < kHeadDim / 8; ++n) {
        *reinterpret_cast<uint32_t *>(sO + g * kRowElems + n * 8 + 2 * t) =
            pack_bf16x2(acc[n][0] * inv[0], acc[n][1] * inv[0]);
        *reinterpret_cast<uint32_t *>(sO + (g + 8) * kRowElems + n * 8 + 2 * t) =
            pack_bf16x2(acc[n][2] * inv[1], acc[n][3] * inv[1]);
    }
    __syncwarp();
    const int64_t out0 = static_cast<int64_t>(w.start + wrow0) * ldq + head * kHeadDim + lane * 8;
    store_gated_rows(p, sO, ldq, out0, wrow0, seq_len, lane);
#endif
}

// ---- sm_90: warpgroup MMA (wgmma) kernels, bidirectional -------------------------------------------------------
//
// One warpgroup (128 threads) = 64 query rows of one (prompt, q head); keys in tiles of 64. Two forms: one head per
// block (gated_attention_wgmma_kernel: two blocks per SM), and the two q heads of one key/value head per block
// (gated_attention_wgmma_pair_kernel, below: they share every K and V tile, double-buffered, half the loads per query
// row, and take the tensor cores in turns), which the automatic choice takes from kWgmmaPairMinRows rows (LEVERS 98,
// 101). Each warpgroup runs the same arithmetic in the same order in both (wg_softmax_step, the same MMAs), so the two
// forms give the same bytes. S = Q K^T runs on wgmma m64n64k16 and O += P V on m64n256k16 (fp32 accumulators): Q and
// K from shared memory, P from registers (bf16, the same rounding as the mma.sync kernels), V from shared memory read
// as an MN-major operand. Shared tiles are 4 panels of 64 columns x 64 rows x 128 bytes, 128-byte swizzled (16-byte
// chunk c of row r stored at chunk c ^ (r % 8)), the layout the wgmma descriptors name: 32 KiB per Q head and per K
// or V tile and stage.
// Needs sm_90a (wgmma): the build compiles them for that target only (CS1_SM90A_KERNELS), and the dispatcher picks
// them only on compute capability 9.0. Their bits differ from the mma.sync kernels (the tensor cores sum in another
// order), so a device uses one family for every length.

constexpr int kWgRows = 64;                      // query rows per warpgroup
[[maybe_unused]] constexpr int kWgKeys = 64;     // keys per tile (used only in the sm_90a pass)
constexpr int kWgPanelBytes = 64 * 128;          // one 64-column panel of a 64-row tile
constexpr int kWgTileBytes = 4 * kWgPanelBytes;  // 64 rows x 256 columns of bf16
// One head per block: Q, one K and one V tile + slack to align the base to 1024 bytes; the bf16 output is staged in
// the V tile (64 padded rows: 1 KB over one tile, hence the extra 2 KB; still 2 blocks per SM) while the gate waits
// in the K tile.
constexpr int wg_smem_bytes() { return 3 * kWgTileBytes + 1024 + 2048; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// 64 rows x 256 bf16 from global (row stride ld) into the swizzled panels at s by NTHREADS threads; rows >= valid
// are zeros. Thread tid copies chunk tid % 32 of rows tid / 32 + k NTHREADS / 32: one pointer step and one fixed
// shared offset per row, and no zero-fill operands on a full tile (every tile but a prompt's last), where the general
// form spent ~18 instructions per copy on 64-bit row products and selects.
template <int NTHREADS>
__device__ __forceinline__ void wg_load_tile(uint32_t s, const uint16_t *g, int64_t ld, int valid, int tid) {
    constexpr int kRowStep = NTHREADS / 32;
    const int ch = tid & 31;  // 16-byte chunk of the 512-byte row
    const int r0 = tid >> 5;
    const uint32_t dst0 = s + (ch >> 3) * kWgPanelBytes + r0 * 128;
    const uint16_t *src = g + r0 * ld + ch * 8;
    const int64_t step = kRowStep * ld;
    // chunk (ch % 8) of row r sits at chunk (ch % 8) ^ (r % 8) of its panel row
    const auto dst = [&](int i) { return dst0 + kRowStep * i * 128 + (((ch & 7) ^ ((r0 + kRowStep * i) & 7)) << 4); };
    if (valid >= 64) {
#pragma unroll
        for (int i = 0; i < 64 / kRowStep; ++i) cp_async_16(dst(i), src + i * step);
    } else {
#pragma unroll 4
        for (int i = 0; i < 64 / kRowStep; ++i) {
            const bool ok = r0 + kRowStep * i < valid;
            cp_async_16(dst(i), ok ? src + i * step : g, ok);
        }
    }
}

// 2^x on the MUFU unit alone (ex2.approx.ftz): the same value as exp2f wherever that is a normal float (x >= -126);
// below, where exp2f returns a denormal (< 2^-126, next to a row's largest term 1), this returns 0. exp2f spends three
// more instructions per call on that range (a compare and two predicated multiplies): 96 per thread and key tile.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The gate of 64 rows x 256 columns (one head) from global (row stride ld) into plain rows of 512 bytes at s, by
// 128 threads; rows >= valid are not loaded (the epilogue never reads them).
__device__ __forceinline__ void wg_load_gate(uint32_t s, const uint16_t *g, int64_t ld, int valid, int tid) {
    const int ch = tid & 31;
#pragma unroll 4
    for (int i = 0; i < 16; ++i) {
        const int r = (tid >> 5) + 4 * i;
        if (r < valid) cp_async_16(s + r * 512 + ch * 16, g + r * ld + ch * 8, true);
    }
}

#define CS1_WG_D32                                                                                              \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
    "%23, %24, %25, %26, %27, %28, %29, %30, %31}"
// the 128 accumulator operands of an m64n256 wgmma
#define CS1_WG_D128 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
    "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
    "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, " \
    "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, " \
    "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define CS1_WG_D32_OPERANDS(d)                                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

// d (64x64 fp32) = [d +] A (64x16, K-major in shared memory) * B (16x64, K-major in shared memory)
__device__ __forceinline__ void wg_mma_ss(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " CS1_WG_D32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : CS1_WG_D32_OPERANDS(d)
                 : "l"(a), "l"(b), "r"(accumulate));
}

// d (64x256 fp32, as four 64x64 panels: panel n holds columns 64n..) += A (64x16 bf16 in registers, the
// mma.m16n8k16 A layout per warp) * B (16x256, MN-major in shared memory: the four 64-column panels of a tile,
// kWgPanelBytes apart, the descriptor's leading offset). One instruction per 16 keys where four m64n64k16 re-sent the
// same A fragment; each output element sees the same k16 steps in the same order.
__device__ __forceinline__ void wg_mma_rs_n256(float (&d)[4][32], const uint32_t (&a)[4], uint64_t b) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" CS1_WG_D128
                 "}, {%128, %129, %130, %131}, %132, 1, 1, 1, 1;\n"
                 : CS1_WG_D32_OPERANDS(d[0]), CS1_WG_D32_OPERANDS(d[1]), CS1_WG_D32_OPERANDS(d[2]),
                   CS1_WG_D32_OPERANDS(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}
#undef CS1_WG_D32
#undef CS1_WG_D128
#undef CS1_WG_D32_OPERANDS

// One key tile's online softmax for a warpgroup (accumulator layout of m64n64, below): the scores s (raw Q K^T of
// keys key0..) become P, the running row maxima and partial sums move on, O (acc) is rescaled where a maximum grew,
// and P is packed as bf16 A fragments of 16 keys each for P V. Every wgmma form runs this same arithmetic, so each
// gives the same bytes.
__device__ __forceinline__ void wg_softmax_step(float (&s)[32], int key0, int seq_len, int t, float scale_log2,
                                                float (&row_max)[2], float (&row_sum)[2], float (&acc)[4][32],
                                                uint32_t (&pa)[4][4]) {
    if (key0 + kWgKeys > seq_len) {  // a prompt's last tile only: keys past its end get -inf
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const bool past_end = key0 + (i >> 2) * 8 + 2 * t + (i & 1) >= seq_len;
            s[i] = past_end ? -INFINITY : __fmul_rn(s[i], scale_log2);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) s[i] = __fmul_rn(s[i], scale_log2);
    }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // explicit _rn arithmetic: no FMA contraction
        float mx = row_max[r];
#pragma unroll
        for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        alpha[r] = exp2_ftz(row_max[r] - mx);  // every tile has a valid key: mx is finite
        row_max[r] = mx;
        row_sum[r] = __fmul_rn(row_sum[r], alpha[r]);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s[4 * j + 2 * r] = exp2_ftz(__fsub_rn(s[4 * j + 2 * r], mx));
            s[4 * j + 2 * r + 1] = exp2_ftz(__fsub_rn(s[4 * j + 2 * r + 1], mx));
            row_sum[r] = __fadd_rn(row_sum[r], __fadd_rn(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
        }
    }
    if (__any_sync(kFullMask, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                acc[n][4 * j] *= alpha[0];
                acc[n][4 * j + 1] *= alpha[0];
                acc[n][4 * j + 2] *= alpha[1];
                acc[n][4 * j + 3] *= alpha[1];
            }
    }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        pa[kk][0] = pack_bf16x2(s[8 * kk], s[8 * kk + 1]);
        pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

// S (64 x 64 fp32) = Q K^T of one key tile, issued only (the caller fences, commits and waits): 16-column steps,
// panel ks / 4, 32 bytes in; q_desc and k_desc name the tiles' starts (wg_desc)
__device__ __forceinline__ void wg_issue_s(float (&s)[32], uint64_t q_desc, uint64_t k_desc) {
#pragma unroll
    for (int ks = 0; ks < kHeadDim / 16; ++ks) {
        const uint32_t off = (ks >> 2) * kWgPanelBytes + (ks & 3) * 32;
        wg_mma_ss(s, q_desc + (off >> 4), k_desc + (off >> 4), ks > 0);
    }
}

// O += P V of one key tile, issued only: keys 16kk.. are 16 rows of 128 bytes into every panel of the V tile
__device__ __forceinline__ void wg_issue_pv(float (&acc)[4][32], const uint32_t (&pa)[4][4], uint64_t v_desc) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wg_mma_rs_n256(acc, pa[kk], v_desc + kk * (2048 >> 4));
}

// bf16(O / row sum) of this warp's 16 rows into sO (row stride kRowElems), for the epilogue's gated stores
__device__ __forceinline__ void wg_stage_output(const float (&acc)[4][32], const float (&inv)[2], uint16_t *sO, int g,
                                                int t) {
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int col = n * 64 + j * 8 + 2 * t;
            *reinterpret_cast<uint32_t *>(sO + g * kRowElems + col) =
                pack_bf16x2(acc[n][4 * j] * inv[0], acc[n][4 * j + 1] * inv[0]);
            *reinterpret_cast<uint32_t *>(sO + (g + 8) * kRowElems + col) =
                pack_bf16x2(acc[n][4 * j + 2] * inv[1], acc[n][4 * j + 3] * inv[1]);
        }
    __syncwarp();
}
#endif

// Accumulator layout of m64n64 (per warp w of the warpgroup, as mma.m16n8): d[4j + e] is row 16w + g + 8(e >> 1),
// column 8j + 2t + (e & 1), with g = lane / 4, t = lane % 4.
// One head per block: single K and V tiles (the next K loads during the softmax and P V, the next V during S).
__global__ void __launch_bounds__(128, 2) gated_attention_wgmma_kernel(const AttnParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t wg_smem_raw[];
    const uint32_t base = (smem_u32(wg_smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x;
    const uint32_t sQ = base, sK = base + kWgTileBytes, sV = base + 2 * kWgTileBytes;
    // the tiles' descriptors: b bytes into a tile is + b / 16 (wg_desc), no rebuild per MMA
    const uint64_t q_desc = wg_desc(sQ, 16, 1024), k_desc = wg_desc(sK, 16, 1024);
    const uint64_t v_desc = wg_desc(sV, kWgPanelBytes, 1024);

    const int head = blockIdx.x % p.Hq;
    const int slot = blockIdx.x / p.Hq;
    QueryTile qt;
    if (!query_tile<kWgRows, false>(p, slot, head, tid, 128, qt)) return;
    const TileWork &w = qt.w;
    const int64_t ldq = qt.ldq;
    const int row0 = qt.row0, seq_len = qt.seq_len;

    const HeadRows in = head_rows(p, w, ldq, row0, head);
    const int64_t ldk = in.ldk;
    const uint16_t *gQ = in.q, *gK = in.k, *gV = in.v;
    const int n_key_tiles = (seq_len + kWgKeys - 1) / kWgKeys;

    // groups in flight, in order: [Q + K0] [V0], then per key tile kt, once its tile is free, [K(kt + 1)]
    // [V(kt + 1)] (empty past the end; the gate in the last K group), so the same wait count always works
    wg_load_tile<128>(sQ, gQ, ldq, min(kWgRows, seq_len - row0), tid);
    wg_load_tile<128>(sK, gK, ldk, min(kWgKeys, seq_len), tid);
    cp_async_commit();
    wg_load_tile<128>(sV, gV, p.ldv, min(kWgKeys, seq_len), tid);
    cp_async_commit();

    const int warp = tid >> 5;  // accumulator rows 16 warp..
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int wrow0 = row0 + warp * 16;  // this warp's first row, relative to the segment

    float acc[4][32];  // O: 64 rows x 256 columns, as four 64-column panels
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[n][i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};  // scaled base-2 units
    float row_sum[2] = {0.f, 0.f};              // this thread's partial sums; reduced over the quad at the end

    for (int kt = 0; kt < n_key_tiles; ++kt) {
        const int key0 = kt * kWgKeys;
        cp_async_wait<1>();
        fence_async_shared();
        __syncthreads();  // Q and this K tile have landed
        float s[32];
        wg_fence();
        wg_issue_s(s, q_desc, k_desc);
        wg_commit();
        wg_wait_all();
        __syncthreads();  // every warp is done with this K tile
        if (kt + 1 < n_key_tiles) {
            const int next = key0 + kWgKeys;
            wg_load_tile<128>(sK, gK + next * ldk, ldk, min(kWgKeys, seq_len - next), tid);
        } else {
            // the K tile is free: the gate lands there during the last softmax and P.V instead of being waited for
            // row by row in the epilogue (short prompts, where that wait was most of the kernel)
            wg_load_gate(sK, p.gate + static_cast<int64_t>(w.start + row0) * ldq + head * kHeadDim, ldq,
                         min(kWgRows, seq_len - row0), tid);
        }
        cp_async_commit();

        uint32_t pa[4][4];  // P as bf16 A fragments, 16 keys each
        wg_softmax_step(s, key0, seq_len, t, p.scale_log2, row_max, row_sum, acc, pa);

        cp_async_wait<1>();
        fence_async_shared();
        __syncthreads();  // this V tile has landed
        wg_fence();
        wg_issue_pv(acc, pa, v_desc);
        wg_commit();
        wg_wait_all();
        __syncthreads();  // every warp is done with this V tile
        if (kt + 1 < n_key_tiles) {
            const int next = key0 + kWgKeys;
            wg_load_tile<128>(sV, gV + next * p.ldv, p.ldv, min(kWgKeys, seq_len - next), tid);
        }
        cp_async_commit();
    }
    cp_async_wait<0>();
    __syncthreads();  // the gate rows, loaded by every thread of the block

    if (wrow0 >= seq_len) return;
    // Epilogue as in the mma.sync kernel: bf16(attn) staged in this warp's own rows of the V tile (row stride
    // kRowElems), then the gate (in the K tile) with 16-byte loads and stores.
    float inv[2];
    inverse_row_sums(row_sum, inv);
    uint8_t *const smem0 = wg_smem_raw + (base - smem_u32(wg_smem_raw));
    uint16_t *sO = reinterpret_cast<uint16_t *>(smem0 + 2 * kWgTileBytes) + warp * 16 * kRowElems;
    const uint16_t *sG = reinterpret_cast<const uint16_t *>(smem0 + kWgTileBytes) + warp * 16 * kHeadDim;
    wg_stage_output(acc, inv, sO, g, t);
    const int64_t out0 = static_cast<int64_t>(w.start + wrow0) * ldq + head * kHeadDim + lane * 8;
    store_gated_rows(p, sO, ldq, out0, wrow0, seq_len, lane, sG);
#else
    __trap();  // not built for sm_90a: the dispatcher never launches it there
#endif
}

// ---- sm_90: the two-head form, warpgroups in turns ------------------------------------------------------------
//
// The two q heads of one kv head, 64 query rows each, one warpgroup per head, sharing every K and V tile (2 stages).
// No block barrier in the key loop: each stage's tiles have mbarriers, "full" (completes when every thread's copies
// into it have landed: cp.async.mbarrier.arrive) and "empty" (when every thread has read it), and two named
// barriers hand the tensor cores over in turns: S(kt) of head 0, S(kt) of head 1, P V(kt) of head 0, P V(kt) of
// head 1, ... so one warpgroup's softmax runs while the other's MMAs do (the block-barrier form ran both softmaxes at
// once, the tensor cores idle). Each thread loads its share of the next tiles in the shadow of its own MMA waits:
// V(kt + 1) once its S(kt) is issued, K(kt + 2) once its P V(kt) is. Each warpgroup's arithmetic is the one-head
// kernel's, in the same order (wg_softmax_step, the same MMAs): the same bytes.
// Shared memory: Q of head 0 and 1, each with the 1 KiB more that its epilogue's padded output rows need (the other
// head may still read its own Q then), 2 stages of K and V, 8 mbarriers.
constexpr int kPairQBytes = 34 * 1024;
constexpr int kPairStages = 2;
constexpr int kPairBarOffset = 2 * kPairQBytes + 2 * kPairStages * kWgTileBytes;
constexpr int wg_pair_smem_bytes() { return kPairBarOffset + 4 * kPairStages * 8 + 1024; }
static_assert(64 * kRowElems * 2 <= kPairQBytes && kPairQBytes % 1024 == 0, "a head's output rows fit its Q room");

__global__ void __launch_bounds__(256, 1) gated_attention_wgmma_pair_kernel(const AttnParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ uint8_t wg_smem_raw[];
    const uint32_t base = (smem_u32(wg_smem_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // which head of the pair
    const int wtid = tid & 127;
    // K (v = 0) or V (v = 1) of key tile kt, and that stage's "full" and "empty" mbarriers
    const auto sKV = [&](int kt, int v) {
        return base + 2 * kPairQBytes + (2 * (kt % kPairStages) + v) * kWgTileBytes;
    };
    const auto full_bar = [&](int kt, int v) { return base + kPairBarOffset + (2 * (kt % kPairStages) + v) * 8; };
    const auto empty_bar = [&](int kt, int v) { return full_bar(kt, v) + 2 * kPairStages * 8; };
    const auto phase = [](int kt) { return static_cast<uint32_t>(kt / kPairStages) & 1u; };

    const int head_groups = p.Hq / 2;
    const int head = (blockIdx.x % head_groups) * 2 + wg;
    const int slot = blockIdx.x / head_groups;
    QueryTile qt;  // the block's 64 rows, for each of its two heads
    if (!query_tile<kWgRows, false>(p, slot, head, wtid, 128, qt)) return;
    const TileWork &w = qt.w;
    const int64_t ldq = qt.ldq;
    const int row0 = qt.row0, seq_len = qt.seq_len;
    const HeadRows in = head_rows(p, w, ldq, row0, head);
    const int n_key_tiles = (seq_len + kWgKeys - 1) / kWgKeys;
    // this thread's share (rows 8i + tid / 32) of key tile kt's K or V, counted on its "full" mbarrier
    const auto load_kv = [&](int kt, int v) {
        const int key0 = kt * kWgKeys;
        if (v == 0)
            wg_load_tile<256>(sKV(kt, 0), in.k + key0 * in.ldk, in.ldk, min(kWgKeys, seq_len - key0), tid);
        else
            wg_load_tile<256>(sKV(kt, 1), in.v + key0 * p.ldv, p.ldv, min(kWgKeys, seq_len - key0), tid);
        cp_async_mbar_arrive(full_bar(kt, v));
    };

    if (tid == 0) {
        for (int i = 0; i < 2 * kPairStages; ++i) {
            mbar_init(base + kPairBarOffset + i * 8, 256);                      // full: every thread's copies
            mbar_init(base + kPairBarOffset + (2 * kPairStages + i) * 8, 256);  // empty: every thread's reads
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the mbarriers exist before anyone arrives or waits

    const uint32_t sQ = base + wg * kPairQBytes;
    const uint64_t q_desc = wg_desc(sQ, 16, 1024);  // b bytes into the tile: + b / 16 (wg_desc)
    wg_load_tile<128>(sQ, in.q, ldq, min(kWgRows, seq_len - row0), wtid);
    cp_async_commit();
    for (int kt = 0; kt < kPairStages && kt < n_key_tiles; ++kt) {
        load_kv(kt, 0);
        load_kv(kt, 1);
    }

    const int warp = wtid >> 5;  // warp in its warpgroup: accumulator rows 16 warp..
    const int lane = tid & 31;
    const int t = lane & 3;
    const int wrow0 = row0 + warp * 16;
    // named barriers 1 and 2: "head 1 may issue its next MMAs", "head 0 may"; 3 and 4: a head's Q has landed
    const int my_turn = 2 - wg, their_turn = 1 + wg;

    float acc[4][32];  // O: 64 rows x 256 columns, as four 64-column panels
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 32; ++i) acc[n][i] = 0.f;
    float row_max[2] = {-INFINITY, -INFINITY};  // scaled base-2 units
    float row_sum[2] = {0.f, 0.f};              // this thread's partial sums; reduced over the quad at the end

    cp_async_wait<0>();  // Q (the K and V copies are in no group: their mbarriers count them)
    fence_async_shared();
    named_bar_sync(3 + wg, 128);
    for (int kt = 0; kt < n_key_tiles; ++kt) {
        mbar_wait(full_bar(kt, 0), phase(kt));
        fence_async_shared();  // the copies, seen through the mbarrier, made visible to wgmma's reads
        if (wg == 1 || kt > 0) named_bar_sync(my_turn, 256);
        const uint64_t k_desc = wg_desc(sKV(kt, 0), 16, 1024);
        float s[32];
        wg_fence();
        wg_issue_s(s, q_desc, k_desc);
        wg_commit();
        named_bar_arrive(their_turn, 256);
        if (kt >= 1 && kt + 1 < n_key_tiles) {  // V(kt + 1) into the stage both heads' P V(kt - 1) read
            mbar_wait(empty_bar(kt - 1, 1), phase(kt - 1));
            load_kv(kt + 1, 1);
        }
        wg_wait_all();
        mbar_arrive(empty_bar(kt, 0));

        uint32_t pa[4][4];
        wg_softmax_step(s, kt * kWgKeys, seq_len, t, p.scale_log2, row_max, row_sum, acc, pa);

        mbar_wait(full_bar(kt, 1), phase(kt));
        fence_async_shared();
        named_bar_sync(my_turn, 256);
        const uint64_t v_desc = wg_desc(sKV(kt, 1), kWgPanelBytes, 1024);
        wg_fence();
        wg_issue_pv(acc, pa, v_desc);
        wg_commit();
        if (wg == 0 || kt + 1 < n_key_tiles) named_bar_arrive(their_turn, 256);  // head 1's last issue: no one waits
        if (kt + kPairStages < n_key_tiles) {  // K(kt + 2) into the stage both heads' S(kt) read
            mbar_wait(empty_bar(kt, 0), phase(kt));
            load_kv(kt + kPairStages, 0);
        }
        wg_wait_all();
        mbar_arrive(empty_bar(kt, 1));
    }
    // the gate's loads go out now and land while the output is staged
    const int64_t out0 = static_cast<int64_t>(w.start + wrow0) * ldq + head * kHeadDim + lane * 8;
    uint4 gate_rows[16];
    load_gate_rows(p, ldq, out0, wrow0, seq_len, gate_rows);
    if (wrow0 >= seq_len) return;
    // Epilogue: bf16(attn) staged in this warp's own rows of its head's Q room (its last S has completed; the other
    // head never reads there), then the gate with 16-byte loads and stores.
    float inv[2];
    inverse_row_sums(row_sum, inv);
    const int g = lane >> 2;
    uint16_t *sO = reinterpret_cast<uint16_t *>(wg_smem_raw + (sQ - smem_u32(wg_smem_raw))) + warp * 16 * kRowElems;
    wg_stage_output(acc, inv, sO, g, t);
    if (p.gate_is_sigmoid != 0)
        store_gated_rows<true>(p, sO, ldq, out0, wrow0, seq_len, lane, gate_rows);
    else
        store_gated_rows<false>(p, sO, ldq, out0, wrow0, seq_len, lane, gate_rows);
#else
    __trap();  // not built for sm_90a: the dispatcher never launches it there
#endif
}

// ---- host side ---------------------------------------------------------------------------------------------

// kernel ids for the per-device "dynamic smem attribute set" bits
constexpr int kernel_id(int tile_rows, bool causal) { return (tile_rows == policy::kWideTileRows ? 2 : 0) + causal; }
constexpr int wgmma_kernel_id(int heads) { return 3 + heads; }

const void *kernel_for(int id) {
    switch (id) {
        case 0: return reinterpret_cast<const void *>(&gated_attention_kernel<policy::kNarrowTileRows, false>);
        case 1: return reinterpret_cast<const void *>(&gated_attention_kernel<policy::kNarrowTileRows, true>);
        case 2: return reinterpret_cast<const void *>(&gated_attention_kernel<policy::kWideTileRows, false>);
        case 3: return reinterpret_cast<const void *>(&gated_attention_kernel<policy::kWideTileRows, true>);
        case wgmma_kernel_id(1): return reinterpret_cast<const void *>(&gated_attention_wgmma_kernel);
        case wgmma_kernel_id(2): return reinterpret_cast<const void *>(&gated_attention_wgmma_pair_kernel);
        default: return nullptr;
    }
}

struct CudaDeviceApi {
    static int current_device(int *device) { return static_cast<int>(cudaGetDevice(device)); }
    static int query_caps(int device, policy::DeviceCaps *caps) {
        cudaError_t e = cudaDeviceGetAttribute(&caps->cc_major, cudaDevAttrComputeCapabilityMajor, device);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&caps->cc_minor, cudaDevAttrComputeCapabilityMinor, device);
        if (e == cudaSuccess)
            e = cudaDeviceGetAttribute(&caps->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        return static_cast<int>(e);
    }
    static int set_max_dynamic_smem(int id, int bytes) {
        const void *fn = kernel_for(id);
        if (fn == nullptr) return CS1_ERR_UNSUPPORTED;
        return static_cast<int>(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    }
};

policy::DeviceCache<CudaDeviceApi> g_device_cache;

bool aligned16(const void *p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <int BQ, bool CAUSAL>
int launch_tile(const AttnParams &p, int64_t slots, cudaStream_t stream) {
    const int bytes = policy::smem_bytes(BQ);
    const unsigned blocks = static_cast<unsigned>(slots * p.Hq);
    gated_attention_kernel<BQ, CAUSAL><<<blocks, BQ * 2, bytes, stream>>>(p);
    return static_cast<int>(cudaGetLastError());
}

AttnParams make_params(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                       const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq, int64_t Hk,
                       float scale, int gate_is_sigmoid) {
    AttnParams p;
    p.q = static_cast<const uint16_t *>(q);
    p.k = static_cast<const uint16_t *>(k);
    p.v = static_cast<const uint16_t *>(v);
    p.gate = static_cast<const uint16_t *>(gate);
    p.out = static_cast<uint16_t *>(out);
    p.cu_seqlens = cu_seqlens;
    p.ldv = ldv;
    p.T = static_cast<int>(T);
    p.n_seqs = static_cast<int>(n_seqs);
    p.Hq = static_cast<int>(Hq);
    p.Hk = static_cast<int>(Hk);
    p.group = static_cast<int>(Hq / Hk);
    p.scale_log2 = scale * 1.4426950408889634f;
    p.gate_is_sigmoid = gate_is_sigmoid;
    return p;
}

// whether this library holds the sm_90a build of the wgmma kernel (build.sh defines CS1_SM90A_KERNELS for it)
constexpr bool wgmma_built() {
#if defined(CS1_SM90A_KERNELS)
    return true;
#else
    return false;
#endif
}

int attention_gated_impl(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                         const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq, int64_t Hk,
                         int64_t Dh, float scale, int32_t causal, int32_t tile_rows, int gate_is_sigmoid,
                         void *stream) {
    if (T < 0 || n_seqs < 0 || (causal != 0 && causal != 1)) return CS1_ERR_SHAPE;
    if (tile_rows != 0 && tile_rows != policy::kNarrowTileRows && tile_rows != policy::kWideTileRows &&
        tile_rows != CS1_ATTENTION_TILE_WGMMA && tile_rows != CS1_ATTENTION_TILE_WGMMA_PAIR)
        return CS1_ERR_SHAPE;
    if (T == 0) return CS1_OK;
    if (Dh != kHeadDim) return CS1_ERR_UNSUPPORTED;
    if (Hq <= 0 || Hk <= 0 || Hq % Hk != 0 || ldv < Hk * kHeadDim || !std::isfinite(scale)) return CS1_ERR_SHAPE;
    if (T > INT_MAX / 2 || n_seqs > INT_MAX / 2 || Hq > 65536) return CS1_ERR_SHAPE;
    if (q == nullptr || k == nullptr || v == nullptr || gate == nullptr || cu_seqlens == nullptr || out == nullptr)
        return CS1_ERR_NULL;
    if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(gate) || !aligned16(out) || ldv % 8 != 0 ||
        (reinterpret_cast<uintptr_t>(cu_seqlens) & 3u) != 0)
        return CS1_ERR_ALIGNMENT;

    int device = -1;
    policy::DeviceCaps caps;
    int status = g_device_cache.current(&device, &caps);
    if (status != 0) return status;
    if (!policy::supported(caps)) return CS1_ERR_UNSUPPORTED;
    // wgmma: explicitly, or automatically where it runs (both forms give the same bytes, so the automatic choice
    // between them may follow the window: two heads per block from kWgmmaPairMinRows rows, when the group allows)
    const bool wgmma_here = policy::use_wgmma(caps, causal != 0, wgmma_built(), wg_smem_bytes());
    const bool pair_ok = wgmma_here && (Hq / Hk) % 2 == 0 && caps.smem_optin >= wg_pair_smem_bytes();
    const bool want_wgmma = tile_rows == CS1_ATTENTION_TILE_WGMMA || tile_rows == CS1_ATTENTION_TILE_WGMMA_PAIR;
    if (want_wgmma || (tile_rows == 0 && wgmma_here)) {
        if (!wgmma_here || (tile_rows == CS1_ATTENTION_TILE_WGMMA_PAIR && !pair_ok)) return CS1_ERR_UNSUPPORTED;
        const int heads = tile_rows == CS1_ATTENTION_TILE_WGMMA_PAIR ||
                                  (tile_rows == 0 && pair_ok && T >= policy::kWgmmaPairMinRows)
                              ? 2
                              : 1;
        const int64_t slots = (T + kWgRows - 1) / kWgRows + n_seqs;
        if (slots * Hq > INT_MAX) return CS1_ERR_SHAPE;
        const int bytes = heads == 2 ? wg_pair_smem_bytes() : wg_smem_bytes();
        status = g_device_cache.ensure_smem(device, wgmma_kernel_id(heads), bytes);
        if (status != 0) return status;
        const AttnParams p =
            make_params(q, k, v, ldv, gate, cu_seqlens, n_seqs, out, T, Hq, Hk, scale, gate_is_sigmoid);
        const unsigned blocks = static_cast<unsigned>(slots * Hq / heads);
        cudaStream_t s = static_cast<cudaStream_t>(stream);
        if (heads == 2)
            gated_attention_wgmma_pair_kernel<<<blocks, 256, bytes, s>>>(p);
        else
            gated_attention_wgmma_kernel<<<blocks, 128, bytes, s>>>(p);
        return static_cast<int>(cudaGetLastError());
    }
    // automatic: the window is T (the longest prompt's length lives on the device)
    const int rows = tile_rows != 0 ? tile_rows : policy::choose_tile_rows(caps, T);
    if (caps.smem_optin < policy::smem_bytes(rows)) return CS1_ERR_UNSUPPORTED;
    // enough tile slots for every prompt and the padding: sum of ceil(len_i / rows) <= ceil(T / rows) + n_seqs
    const int64_t slots = (T + rows - 1) / rows + n_seqs;
    if (slots * Hq > INT_MAX) return CS1_ERR_SHAPE;
    status = g_device_cache.ensure_smem(device, kernel_id(rows, causal != 0), policy::smem_bytes(rows));
    if (status != 0) return status;

    const AttnParams p =
        make_params(q, k, v, ldv, gate, cu_seqlens, n_seqs, out, T, Hq, Hk, scale, gate_is_sigmoid);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (rows == policy::kWideTileRows)
        return causal ? launch_tile<policy::kWideTileRows, true>(p, slots, s)
                      : launch_tile<policy::kWideTileRows, false>(p, slots, s);
    return causal ? launch_tile<policy::kNarrowTileRows, true>(p, slots, s)
                  : launch_tile<policy::kNarrowTileRows, false>(p, slots, s);
}

}  // namespace

extern "C" {

int cs1_attention_gated(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                        const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq, int64_t Hk,
                        int64_t Dh, float scale, void *stream) {
    return attention_gated_impl(q, k, v, ldv, gate, cu_seqlens, n_seqs, out, T, Hq, Hk, Dh, scale, 1, 0, 0, stream);
}

int cs1_attention_gated_bidirectional(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                                      const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T,
                                      int64_t Hq, int64_t Hk, int64_t Dh, float scale, void *stream) {
    return attention_gated_impl(q, k, v, ldv, gate, cu_seqlens, n_seqs, out, T, Hq, Hk, Dh, scale, 0, 0, 0, stream);
}

int cs1_attention_gated_tiled(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                              const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq,
                              int64_t Hk, int64_t Dh, float scale, int32_t causal, int32_t tile_rows,
                              void *stream) {
    return attention_gated_impl(q, k, v, ldv, gate, cu_seqlens, n_seqs, out, T, Hq, Hk, Dh, scale, causal,
                                tile_rows, 0, stream);
}

int cs1_attention_sigmoid_gated(const void *q, const void *k, const void *v, int64_t ldv, const void *gate_sigmoid,
                                const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq,
                                int64_t Hk, int64_t Dh, float scale, int32_t causal, int32_t tile_rows,
                                void *stream) {
    return attention_gated_impl(q, k, v, ldv, gate_sigmoid, cu_seqlens, n_seqs, out, T, Hq, Hk, Dh, scale, causal,
                                tile_rows, 1, stream);
}

int cs1_attention_tile_rows(int64_t rows, int32_t *tile_rows) {
    return cs1_attention_policy::tile_rows_for_current_device(g_device_cache, rows, tile_rows);
}

}  // extern "C"
