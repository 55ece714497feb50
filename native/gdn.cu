// gdn.cu: the chunked (C = 64) gated delta rule of a gated DeltaNet layer (the conv and the gates: gdn_conv.cu).
//
// Math: ../shared/spec/qwen3_5-model.md §6 and §7.1. Per value head h, with state S (d_k x d_v = 128 x 128, fp32,
// zero at every prompt start), one chunk of rows i = 0..63 entering with S0:
//   Gam_i = sum_{j<=i} g_j (reset per chunk)          k^_i = k_i / sqrt(|k_i|^2 + 1e-6),  q~_i likewise * scale
//   L_ij  = beta_i (k^_i . k^_j) exp(Gam_i - Gam_j), j < i   (strictly lower)
//   U = (I + L)^-1 diag(beta) V,  W = (I + L)^-1 diag(beta e^Gam) K^   (block rows of 16, tf32 MMAs)
//   Delta = U - W S0;  S_next = e^{Gam_63} S0 + (K^ * e^{Gam_63 - Gam})^T Delta
//   O = diag(e^Gam) Q~ S0 + (Q~ K^T  .* D) Delta,  D_ij = exp(Gam_i - Gam_j) for j <= i, else 0
// Rows of a partial chunk past the prompt end are masked (k = v = beta = g = 0), which leaves every valid row and
// the state exact.
//
// Tensor cores (mma.sync, gdn_mma.cuh): the raw q, k rows are bf16, so their products go through bf16 MMA (Q K^T,
// K K^T: exact products, fp32 sums) or enter tf32 MMA exactly (K^T Delta, Q S0); the L2 norms and decays are
// applied afterwards as row / column factors (k^ = k / |k|, so K^ * e^{Gam_63 - Gam} becomes the factor
// f_i = e^{Gam_63 - Gam_i} / |k_i| on the rows of Delta). fp32 operands (W, S, Delta, P) enter rounded to tf32
// (see the precision plan below). The forward substitution stays fp32 on CUDA cores.
//
// Two launches per cs1_gdn_prefill up to kWalkOutMaxRows rows on devices with the shared memory for it, three
// otherwise (see GdnPath), and one more above kPrepIndexMaxSeqs prompts:
//   1. the index: sanitised prompt bounds and the chunk offset of each prompt (a prefix sum of ceil(len/64)), so
//      chunks restart at every prompt start. cu_seqlens lives on the device, so the host only knows the bound
//      NC = ceil(T/64) + n_seqs on the number of chunks; blocks past the real count exit. Every prep block
//      computes it for itself up to kPrepIndexMaxSeqs prompts; above, gdn_index_kernel (1 block) runs first.
//   2. gdn_prep_mma_kernel (chunk, head): Gam, 1/|k|, L (bf16 MMA), then U and W by block rows of 16; also
//      writes zeros into the padding rows of o. Above kWalkPInMinRows rows (above kC where its grid has at most one
//      block per SM), up to kWalkOutMaxRows (sm_90), also the walk's P and q norms (kPOut), into the chunk's S0
//      slot, which the walk that writes O does not use. U and W come from tensor cores (lever 88).
//   3. gdn_walk_mma_kernel (prompt, head, 32-column value slab): walks the prompt's chunks in order with the state
//      slab in registers (MMA accumulators); the next chunk's operands arrive by cp.async while one computes (its W
//      by one TMA copy on sm_90). It
//      writes its slab of O for each chunk from the entry state S0 and Delta it holds (kOut), with P and the q norms
//      from prep where prep made them (kPIn), else forming them on its chain.
//   4. gdn_out_mma_kernel  (chunk, head), only without kOut: the walk then writes each chunk's S0 and Delta (over
//      U) to the workspace, and this kernel forms O from them. cs1_gdn_prefill_norm runs gdn_out_norm_mma_kernel
//      instead: the same O tile, then the layer's gated RMSNorm on it (gated_norm.cuh), stored in place of O.
// (The previous all-fp32 CUDA-core versions of 2-4, same workspace, are in git history at commit 203c39a.)
//
// Workspace (cs1_gdn_workspace_bytes), every part 256-byte aligned from the workspace start, NC chunk slots,
// slot index b = chunk * H + head:
//   seq_start int32 [n_seqs + 1]   sanitised cu_seqlens (clamped to [0, T], non-decreasing)
//   chunk_off int32 [n_seqs + 1]   first chunk of each prompt; chunk_off[n_seqs] = number of chunks
//   U/Delta   f32 [NC * H, 64, 132] U from prep (without kOut overwritten in place by Delta in the walk); each row
//                                   128 values and 4 unused (kLdUW), as W's
//   W         f32 [NC * H, 64, 132] rows at the stride of the walk's W tile, so that one TMA copy moves a chunk's W
//                                   on sm_90 (the 4 unused floats of a row land in the tile's padding, never read)
//   S0        f32 [NC * H, 128, 128] state entering each chunk (key index first, as transformers/FLA); without kOut.
//                                    With kPIn the same slot holds prep's P [64][68] (64 values and 4 unused per row,
//                                    kLdL: the walk's tile) and then qs [64] instead
//   gam       f32 [NC * H, 64]       cumulative log decay inside the chunk
//   rk        f32 [NC * H, 64]       1 / sqrt(|k_i|^2 + 1e-6)
// = 133,632 B per chunk slot and value head (4.08 MiB per 64 tokens for H = 32), plus the two index arrays.
#include <atomic>
#include <type_traits>

#include "common.cuh"
#include "gdn_mma.cuh"
#include "gated_norm.cuh"

namespace {

constexpr int kC = 64;         // chunk rows
constexpr int kD = 128;        // d_k = d_v
constexpr int kLdF = 132;      // fp32 smem row stride of 64x128 tiles (16-byte rows; MMA fragments conflict-free)
constexpr int kLdUW = kLdF;    // fp32 row stride of U / Delta and W in the workspace: W's rows as the walk keeps them
constexpr int kLdL = 68;       // fp32 smem row stride of 64x64 tiles
constexpr int kSlab = 32;      // value columns per walk block
constexpr int kThreads = 256;  // prep / walk / out blocks
constexpr float kNormEps = 1e-6f;

size_t align256(size_t x) { return (x + 255) & ~size_t(255); }

// Byte offsets of the workspace parts (see the header comment).
struct Layout {
    size_t seq_start, chunk_off, u, w, s0, gam, rk, total;
    Layout(int64_t T, int64_t n_seqs, int64_t H) {
        const size_t nc = size_t((T + kC - 1) / kC + n_seqs);
        const size_t slots = nc * size_t(H);
        size_t at = 0;
        seq_start = at; at = align256(at + size_t(n_seqs + 1) * 4);
        chunk_off = at; at = align256(at + size_t(n_seqs + 1) * 4);
        u = at;         at = align256(at + slots * kC * kLdUW * 4);
        w = at;         at = align256(at + slots * kC * kLdUW * 4);
        s0 = at;        at = align256(at + slots * kD * kD * 4);
        gam = at;       at = align256(at + slots * kC * 4);
        rk = at;        at = align256(at + slots * kC * 4);
        total = at;
    }
};

struct ChunkInfo {
    int row0;  // first row of the chunk
    int len;   // valid rows, 1..64
};

// The chunk with global index c, or len = 0 when c is past the last chunk.
__device__ ChunkInfo find_chunk(const int32_t *seq_start, const int32_t *chunk_off, int n_seqs, int c) {
    ChunkInfo info{0, 0};
    if (c >= chunk_off[n_seqs]) return info;
    int lo = 0, hi = n_seqs;  // last s with chunk_off[s] <= c; it has chunk_off[s + 1] > c
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (chunk_off[mid] <= c) lo = mid; else hi = mid;
    }
    info.row0 = seq_start[lo] + (c - chunk_off[lo]) * kC;
    info.len = min(kC, seq_start[lo + 1] - info.row0);
    return info;
}

// ---- prefill: 1. index --------------------------------------------------------------------------------------------

// One warp (lane = its lane): seq_start[s] = running max of clamp(cu[s], 0, T); chunk_off = prefix sum of
// ceil(len / 64). The pointers may be global or shared memory.
__device__ __forceinline__ void index_warp(const int32_t *__restrict__ cu, int n_seqs, int T, int32_t *seq_start,
                                           int32_t *chunk_off, int lane) {
    int prev_start = 0, prev_off = 0;
    for (int base = 0; base <= n_seqs; base += 32) {
        const int s = base + lane;
        int v = s <= n_seqs ? min(max(cu[s], 0), T) : 0;
        if (base == 0 && lane == 0) prev_start = v;  // seq_start[0] = clamp(cu[0])
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, v, o);
            if (lane >= o) v = max(v, u);
        }
        v = max(v, prev_start);
        const int before = __shfl_up_sync(0xffffffffu, v, 1);
        const int start_prev = lane == 0 ? prev_start : before;  // start of prompt s - 1
        // chunks of prompt s - 1 (those end at v); the first entry contributes none
        int n = (s == 0 || s > n_seqs) ? 0 : (v - start_prev + kC - 1) / kC;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int u = __shfl_up_sync(0xffffffffu, n, o);
            if (lane >= o) n += u;
        }
        if (s <= n_seqs) {
            seq_start[s] = v;
            chunk_off[s] = prev_off + n;
        }
        prev_start = __shfl_sync(0xffffffffu, v, 31);
        prev_off += __shfl_sync(0xffffffffu, n, 31);
    }
}

__global__ void gdn_index_kernel(const int32_t *__restrict__ cu, int n_seqs, int T, int32_t *__restrict__ seq_start,
                                 int32_t *__restrict__ chunk_off) {
    index_warp(cu, n_seqs, T, seq_start, chunk_off, threadIdx.x);
}

// Up to this many prompts every prep block computes the index itself (in shared memory, one warp, two passes), and
// block (0, 0) also stores it for the walk and out kernels: one launch fewer per layer. More prompts: the index
// kernel runs first.
constexpr int kPrepIndexMaxSeqs = 63;

// ---- prefill: 2, 3, 4 on tensor cores ---------------------------------------------------------------------------
//
// Precision plan: the raw q and k rows are bf16, so they enter the tensor cores exactly (bf16 MMA, or bf16 bits as
// tf32) and the L2 norms are applied as row / column factors afterwards. Each fp32 operand (W, S, Delta, P) is
// rounded to tf32 once (2^-11 relative) and every tf32 product is one MMA: the output's (Q S0, P Delta; lever 69)
// and the state's (W S, K^T diag(f) Delta; lever 70), and prep's U and W (by block rows of 16: L_bd X_d, then
// (I + L_bb)^-1 C_b; lever 88). Sums and the state stay fp32. The state's rounding recurs from chunk to chunk
// through the decayed state; benchmarks/gdn_rounding.py models it in float64: O's error before its bf16 store
// stays ~3-10x below that store's own rounding (2^-9) up to 4,097 rows, with weak decay too (form blk16). (2- and
// 3-term hi + lo splits, ~fp32, until lever 70, and the forward substitution in fp32 until lever 88: in git
// history.)

constexpr int kLdKb = 136;  // bf16 row stride of 64x128 bf16 tiles (272 B rows)
constexpr int kLdSl = 40;   // fp32 row stride of 32-column slabs (B fragments: bank 8t + g, conflict-free)

// The tile copies below give every thread a compile-time trip count: thread tid takes the same 16-byte column of rows
// tid / per_row + p (kThreads / per_row), p = 0, 1, .. (the rows and order a loop e = tid, tid + kThreads, .. gives),
// so the passes unroll as offsets of one address. Such a loop from threadIdx.x has a trip count the compiler cannot
// know: it compiled to a remainder loop plus a 4-way unrolled loop, ~20 address instructions per 16-byte copy (lever
// 80: the walk's SASS 1,463 -> 714 instructions).

// 64 rows x 128 bf16 (row stride ld) -> smem tile of stride kLdKb, rows >= len zero-filled.
__device__ __forceinline__ void cp_rows_bf16(bf16 *dst, const bf16 *src, int64_t ld, int len) {
    constexpr int kPerRow = kD / 8, kRowStep = kThreads / kPerRow;
    static_assert(kThreads % kPerRow == 0 && kC % kRowStep == 0, "whole rows per pass");
    const int i0 = threadIdx.x / kPerRow, c8 = (threadIdx.x % kPerRow) * 8;
    bf16 *d = dst + i0 * kLdKb + c8;
    const bf16 *s = src + int64_t(i0) * ld + c8;
    const int64_t step = int64_t(kRowStep) * ld;
#pragma unroll
    for (int p = 0; p < kC / kRowStep; ++p) {
        const bool ok = i0 + p * kRowStep < len;
        cp_async16(d + p * kRowStep * kLdKb, ok ? s + p * step : src, ok);
    }
}

// 64 rows x kCols fp32 (row stride kLdSrc) -> smem tile of stride lds.
template <int kCols, int kLdSrc>
__device__ __forceinline__ void cp_rows_f32(float *dst, int lds, const float *src) {
    constexpr int kPerRow = kCols / 4, kRowStep = kThreads / kPerRow;
    static_assert(kThreads % kPerRow == 0 && kC % kRowStep == 0, "whole rows per pass");
    const int i0 = threadIdx.x / kPerRow, c4 = (threadIdx.x % kPerRow) * 4;
    float *d = dst + i0 * lds + c4;
    const float *s = src + i0 * kLdSrc + c4;  // each pass at a constant offset from here
#pragma unroll
    for (int p = 0; p < kC / kRowStep; ++p) cp_async16(d + p * kRowStep * lds, s + p * kRowStep * kLdSrc, true);
}

// out[i] = num / sqrt(|row_i|^2 + eps) for the 64 bf16 rows of a tile of stride kLdKb; one warp per row.
__device__ __forceinline__ void row_inv_norms(const bf16 *tile, float num, float *out) {
    const int lane = threadIdx.x & 31;
#pragma unroll 2
    for (int p = 0; p < kC / (kThreads / 32); ++p) {  // rows warp + 8 p
        const int i = (threadIdx.x >> 5) + p * (kThreads / 32);
        const uint2 raw = *reinterpret_cast<const uint2 *>(tile + i * kLdKb + 4 * lane);
        const float x0 = __uint_as_float(raw.x << 16), x1 = __uint_as_float(raw.x & 0xffff0000u);
        const float x2 = __uint_as_float(raw.y << 16), x3 = __uint_as_float(raw.y & 0xffff0000u);
        const float ss = warp_sum(x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3);
        if (lane == 0) out[i] = num / sqrtf(ss + kNormEps);
    }
}

// This lane's row for ldsm_x4 of the A fragment of rows m0..m0+15 (tile rows of ld_bytes bytes): row
// m0 + l % 8 + 8 ((l / 8) % 2) at 16-byte column l / 16, so that r = {a0, a1, a2, a3}; add the k offset in bytes.
__device__ __forceinline__ const unsigned char *a_frag_row(const void *tile, int ld_bytes, int m0) {
    const int lane = threadIdx.x & 31;
    return static_cast<const unsigned char *>(tile) + (m0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * ld_bytes +
           16 * (lane >> 4);
}

// acc[j] = A[m0..m0+15, :] B[n0+8j..n0+8j+7, :]^T over the 128 columns of two bf16 tiles of stride kLdKb
// (bf16 MMA: exact products, fp32 sums); a warp's 16 x 32 block of a 64 x 64 product. Fragments by ldsm_x4: A's
// four registers in one, and B's {b0, b1} of two column groups j, j + 1 in one (lane l: row n0 + 8 (j + l / 16) +
// l % 8 at 16-byte column (l / 8) % 2); rows of 272 bytes put the 8 rows of each matrix on distinct banks.
__device__ __forceinline__ void mma_rows_bf16_16x32(const bf16 *A, const bf16 *B, int m0, int n0,
                                                    float acc[4][4]) {
    constexpr int kRowBytes = kLdKb * int(sizeof(bf16));
    const int lane = threadIdx.x & 31;
    const unsigned char *a_row = a_frag_row(A, kRowBytes, m0);
    const unsigned char *b_row = reinterpret_cast<const unsigned char *>(B) +
                                 (n0 + 8 * (lane >> 4) + (lane & 7)) * kRowBytes + 16 * ((lane >> 3) & 1);
#pragma unroll 2
    for (int k0 = 0; k0 < kD; k0 += 16) {
        uint32_t a[4], b[2][4];
        ldsm_x4(a, a_row + 2 * k0);
        ldsm_x4(b[0], b_row + 2 * k0);                   // j = 0, 1
        ldsm_x4(b[1], b_row + 16 * kRowBytes + 2 * k0);  // j = 2, 3
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16(acc[j], a, &b[j >> 1][2 * (j & 1)]);
    }
}

// P = diag(qs) (Q_raw K_raw^T) diag(rk) .* D into a 64 x 64 smem tile of stride kLdL (bf16 MMA: exact products);
// warp: rows 16 (w % 4).., columns 32 (w / 4)..
// kPOverK: P overlays K's tile (the out kernel), so the block waits for every warp's reads of K before any store.
template <bool kPOverK = false>
__device__ __forceinline__ void chunk_p(const bf16 *Q, const bf16 *K, const float *qs, const float *rk,
                                        const float *gam, float *P) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    float acc[4][4] = {};
    mma_rows_bf16_16x32(Q, K, m0, n0, acc);
    if constexpr (kPOverK) __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = m0 + g + 8 * (e >> 1), jj = n0 + 8 * j + 2 * t + (e & 1);
            P[i * kLdL + jj] = jj <= i ? acc[j][e] * qs[i] * rk[jj] * expf(gam[i] - gam[jj]) : 0.0f;
        }
}

// An m16n8 accumulator (c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)) as the tf32 A operand of a
// product over the same 8 columns, with k slot t taking column 2t and slot t + 4 column 2t + 1: a = {c0, c2, c1, c3}.
// The B operand must be loaded with that k order (prep's block rows, lever 88).
__device__ __forceinline__ void acc_as_a_tf32(const float c[4], uint32_t a[4]) {
    a[0] = tf32_rna_bits(c[0]);
    a[1] = tf32_rna_bits(c[2]);
    a[2] = tf32_rna_bits(c[1]);
    a[3] = tf32_rna_bits(c[3]);
}

// Block (chunk, head): Gam, 1/|k|, L (bf16 MMA on the raw k rows: exact products, fp32 sums; the norms enter as
// factors), then U and W = (I + L)^-1 times the right-hand sides beta v and (beta e^Gam / |k|) k_raw.
// kLdTd = 24: the row stride of Td, whose B fragments are 8-byte loads of (row g, columns 2t, 2t + 1): the 16 lanes
// of a half warp then cover 32 distinct banks.
constexpr int kLdTd = 24;
// A warp's staged block row: 16 rows of 32 floats, unpadded (lever 93: prep<0> then fits three blocks per SM), its
// 16-byte chunks swizzled: chunk k of row r sits at k ^ 2 ((r >> 1) & 3). The fragment stores (row 8 nt + 2 t4 (+1),
// column 16 mt + 8 h + gq) then fall on bank (16 mt + 8 h + gq) ^ 8 t4: 32 distinct banks; the float4 reads (8 lanes
// of one row, its 8 chunks) one 128-byte row per quarter warp: both conflict-free. (Written as col ^ (8 ((r >> 1) & 3)),
// the same address, ptxas spilled 8 bytes at prep<0>'s 80 registers.)
constexpr int kLdXs = 32;
__device__ __forceinline__ int xs_at(int row, int col) {
    return row * kLdXs + ((((col >> 2) ^ (2 * ((row >> 1) & 3))) << 2) | (col & 3));
}
struct PrepSmem {
    bf16 K[kC * kLdKb];  // raw k rows (zeros past the chunk end)
    bf16 V[kC * kLdKb];  // raw v rows (zeros past the chunk end)
    float L[kC * kLdL];
    uint32_t Td[kC * kLdTd];  // row 16 b + n, column k < 16: (I + L_bb)^-1 [n][k] as tf32 bits
    float gam[kC];
    float beta[kC];
    float cw[kC];  // beta e^Gam / |k|
    float rk[kC];  // 1 / |k|
    float Xs[kThreads / 32][16 * kLdXs];  // per warp: one block row of its 32 result columns, staged for the store
    int32_t seq_start[kPrepIndexMaxSeqs + 1];  // the index, when the block computes it (cu given)
    int32_t chunk_off[kPrepIndexMaxSeqs + 1];
};
// With kPOut (the walk that reads P, kPIn): also the chunk's raw q rows and their norms qs. Launched with this size
// only then, so prep's shared memory per block stays as it was at up to kWalkPInMinRows rows.
struct PrepSmemP : PrepSmem {
    float qs[kC];        // scale / |q_i|
    bf16 Q[kC * kLdKb];  // raw q rows (zeros past the chunk end)
};
constexpr size_t kPrepMmaSmem = sizeof(PrepSmem);
constexpr size_t kPrepMmaSmemP = sizeof(PrepSmemP);
static_assert(sizeof(PrepSmem) % 16 == 0 && sizeof(PrepSmemP) % 16 == 0, "PrepSmem keeps 16-byte alignment");
static_assert(offsetof(PrepSmem, Td) % 8 == 0 && offsetof(PrepSmem, L) % 8 == 0,
              "Td's and L's B pairs are 8-byte loads");
static_assert(offsetof(PrepSmem, Xs) % 16 == 0, "the staged block rows are read as float4");
// 74.5 KiB per prep block, 91.75 KiB with P (lever 89's staging tiles: +16 KiB): three blocks per SM on sm_90 without
// P (lever 93), two with P; one on the 99 KiB devices (sm_86 / sm_89), as before the tiles.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr int kPrepBlocksPerSm = 2;  // one fits on sm_86 / sm_89 anyway, and 80 registers spilled there
#else
constexpr int kPrepBlocksPerSm = 3;
#endif
constexpr int kPrepBlocksPerSmP = 2;
static_assert(kPrepBlocksPerSm * (kPrepMmaSmem + 1024) <= 228 * 1024, "three prep blocks per SM on sm_90");
static_assert(kPrepBlocksPerSmP * (kPrepMmaSmemP + 1024) <= 228 * 1024, "two prep blocks per SM with P on sm_90");

// Also writes zeros into the padding rows (outside every prompt) of the flat 64-row window c of o.
// kPOut (launched with kPrepMmaSmemP): also the walk's P = diag(qs) (Q_raw K_raw^T) diag(rk) .* D and qs for the
// walk that reads them (kPIn), stored in the chunk's S0 slot (P [64][64], then qs [64]), which that walk leaves unused.
// The same functions on the same operands as the walk that computes them itself: the same bytes.
template <bool kPOut>
__global__ void __launch_bounds__(kThreads, kPOut ? kPrepBlocksPerSmP : kPrepBlocksPerSm)
    gdn_prep_mma_kernel(const bf16 *__restrict__ qkv, int64_t ld, const float *__restrict__ g,
                        const float *__restrict__ beta, const int32_t *__restrict__ cu, int n_seqs, int T, int H,
                        int HK, float scale, unsigned char *__restrict__ ws, Layout lay, bf16 *__restrict__ o) {
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    using Smem = std::conditional_t<kPOut, PrepSmemP, PrepSmem>;
    auto &sm = *reinterpret_cast<Smem *>(smem_raw);
    auto *ws_start = reinterpret_cast<int32_t *>(ws + lay.seq_start);
    auto *ws_off = reinterpret_cast<int32_t *>(ws + lay.chunk_off);
    const int32_t *seq_start = ws_start, *chunk_off = ws_off;
    if (cu != nullptr) {  // n_seqs <= kPrepIndexMaxSeqs: no index kernel ran
        if (warp == 0) index_warp(cu, n_seqs, T, sm.seq_start, sm.chunk_off, lane);
        __syncthreads();
        if (c == 0 && h == 0 && tid <= n_seqs) {
            ws_start[tid] = sm.seq_start[tid];
            ws_off[tid] = sm.chunk_off[tid];
        }
        seq_start = sm.seq_start;
        chunk_off = sm.chunk_off;
    }
    {
        const int first = seq_start[0], end = seq_start[n_seqs];
#pragma unroll
        for (int p = 0; p < kC * (kD / 4) / kThreads; ++p) {  // rows tid / 32 + 8 p
            const int64_t row = int64_t(c) * kC + tid / (kD / 4) + p * (kThreads / (kD / 4));
            if (row < T && (row < first || row >= end))
                *reinterpret_cast<uint2 *>(o + (row * H + h) * kD + (tid % (kD / 4)) * 4) = make_uint2(0u, 0u);
        }
    }
    const ChunkInfo ck = find_chunk(seq_start, chunk_off, n_seqs, c);
    if (ck.len == 0) return;
    const int hk = h / (H / HK);
    const size_t slot = size_t(c) * H + h;

    const bf16 *rows = qkv + int64_t(ck.row0) * ld;
    cp_rows_bf16(sm.K, rows + int64_t(HK) * kD + int64_t(hk) * kD, ld, ck.len);
    cp_rows_bf16(sm.V, rows + int64_t(2 * HK) * kD + int64_t(h) * kD, ld, ck.len);
    if constexpr (kPOut) cp_rows_bf16(sm.Q, rows + int64_t(hk) * kD, ld, ck.len);
    cp_async_commit();
    if (tid < kC) {
        const bool ok = tid < ck.len;
        sm.gam[tid] = ok ? g[int64_t(ck.row0 + tid) * H + h] : 0.0f;
        sm.beta[tid] = ok ? beta[int64_t(ck.row0 + tid) * H + h] : 0.0f;
    }
    cp_async_wait_all();
    __syncthreads();
    row_inv_norms(sm.K, 1.0f, sm.rk);  // 1 / sqrt(|k_i|^2 + eps)
    if constexpr (kPOut) row_inv_norms(sm.Q, scale, sm.qs);  // qs_i = scale / sqrt(|q_i|^2 + eps), as in the walk
    if (warp == 0) {  // inclusive prefix sum of g over the 64 rows (two halves of 32)
        float lo = sm.gam[lane], hi = sm.gam[32 + lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float a = __shfl_up_sync(0xffffffffu, lo, o), b = __shfl_up_sync(0xffffffffu, hi, o);
            if (lane >= o) { lo += a; hi += b; }
        }
        hi += __shfl_sync(0xffffffffu, lo, 31);
        sm.gam[lane] = lo;
        sm.gam[32 + lane] = hi;
    }
    __syncthreads();
    if (tid < kC) {
        reinterpret_cast<float *>(ws + lay.gam)[slot * kC + tid] = sm.gam[tid];
        reinterpret_cast<float *>(ws + lay.rk)[slot * kC + tid] = sm.rk[tid];
        sm.cw[tid] = sm.beta[tid] * expf(sm.gam[tid]) * sm.rk[tid];
    }
    {  // L = strictly lower (beta_i (k_i . k_j) / (|k_i| |k_j|) exp(Gam_i - Gam_j)); warp: rows 16 (w % 4)..,
       // columns 32 (w / 4)..
        const int gq = lane >> 2, t = lane & 3, m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
        float acc[4][4] = {};
        mma_rows_bf16_16x32(sm.K, sm.K, m0, n0, acc);
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = m0 + gq + 8 * (e >> 1), jj = n0 + 8 * j + 2 * t + (e & 1);
                sm.L[i * kLdL + jj] =
                    jj < i ? sm.beta[i] * (acc[j][e] * sm.rk[i] * sm.rk[jj]) * expf(sm.gam[i] - sm.gam[jj]) : 0.0f;
            }
    }
    __syncthreads();

    // U = (I + L)^-1 (beta V) and W = (I + L)^-1 (cw K_raw) by block rows of 16 on tensor cores (lever 88). Warp w
    // owns 32 right-hand-side columns (warps 0-3 U's, 4-7 W's) and computes their transpose, X^T (columns as MMA
    // rows), so that each block row's result, an accumulator, is already the A operand of the later block rows
    // (their k order permuted to match: k slot t -> row 2t, t + 4 -> 2t + 1, B loaded the same way):
    //   C_b = R_b - sum_{d<b} L_bd X_d  (tf32 MMAs, fp32 sums),   X_b = (I + L_bb)^-1 C_b  (one tf32 MMA per k step)
    // No block barrier after the diagonal blocks' inverses: the warps share only L and Td. Each fp32 operand is
    // rounded to tf32 once; benchmarks/gdn_rounding.py (form blk16) models it. Rows past the chunk end have L rows,
    // beta and cw of 0 and zero v / k rows: their C rows, Td rows (unit rows) and X rows are 0.
    if (tid < kC) {  // column tid % 16 of the diagonal block's inverse (I + L_bb)^-1, by substitution in fp32
        // Every lane computes every row's sum and then selects (s is pinned, so the compiler cannot sink it into a
        // branch per lane, which put L's loads inside 16 divergent branches: lever 88c), and Td is stored after
        // the last row, so no store sits between L's loads.
        const int jl = tid & 15, b0 = tid & ~15;
        const float *lb = sm.L + b0 * kLdL + b0;
        float xd[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // by l mod 4; x_l = 0 for l < jl adds exact zeros
#pragma unroll
            for (int l = 0; l < i; ++l) acc[l & 3] = fmaf(lb[i * kLdL + l], xd[l], acc[l & 3]);
            const float s = pinned(0.0f - ((acc[0] + acc[1]) + (acc[2] + acc[3])));
            xd[i] = i < jl ? 0.0f : i == jl ? 1.0f : s;
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) sm.Td[(b0 + i) * kLdTd + jl] = tf32_rna_bits(xd[i]);
    }
    __syncthreads();  // Td complete
    {
        const int gq = lane >> 2, t4 = lane & 3;
        const bool is_w = warp >= 4;
        const int n0 = 32 * (warp & 3);  // the warp's first column; m tile mt: columns n0 + 16 mt + gq (+ 8)
        const bf16 *rhs = is_w ? sm.K : sm.V;
        const float *coef = is_w ? sm.cw : sm.beta;
        float *dst = reinterpret_cast<float *>(ws + (is_w ? lay.w : lay.u)) + slot * kC * kLdUW + n0;
        float *xs = sm.Xs[warp];
        uint32_t xa[3][2][2][4];  // X_d^T as A fragments (tf32): [block row d][m tile][k step = d's n tile]
#pragma unroll
        for (int b = 0; b < kC / 16; ++b) {
            // C_b^T and X_b^T: [m tile][n tile][fragment]; fragment f of the 16 (m tile f / 8, n tile f / 4 % 2,
            // element f % 4) holds row 16 b + 8 nt + 2 t4 + e % 2, column n0 + 16 mt + gq + 8 (e / 2)
            float cacc[2][2][4];
#pragma unroll
            for (int f = 0; f < 16; ++f) {
                const int mt = f >> 3, nt = (f >> 2) & 1, e = f & 3;
                const int row = 16 * b + 8 * nt + 2 * t4 + (e & 1), col = n0 + 16 * mt + gq + 8 * (e >> 1);
                cacc[mt][nt][e] = coef[row] * bf2f(rhs[row * kLdKb + col]);
            }
#pragma unroll
            for (int d = 0; d < b; ++d)
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) {
                    uint32_t bv[2][2];  // -L[16 b + 8 nt + gq][16 d + 8 ks + 2 t4 (+1)]
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt) {
                        const float2 l = *reinterpret_cast<const float2 *>(
                            sm.L + (16 * b + 8 * nt + gq) * kLdL + 16 * d + 8 * ks + 2 * t4);
                        bv[nt][0] = tf32_rna_bits(-l.x);
                        bv[nt][1] = tf32_rna_bits(-l.y);
                    }
#pragma unroll
                    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                        for (int nt = 0; nt < 2; ++nt) mma_tf32(cacc[mt][nt], xa[d][mt][ks], bv[nt]);
                }
            uint32_t ca[2][2][4];  // C_b^T as A fragments (tf32), k step = C's n tile
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int ks = 0; ks < 2; ++ks) acc_as_a_tf32(cacc[mt][ks], ca[mt][ks]);
            float xacc[2][2][4] = {};  // X_b^T
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {
                uint32_t bv[2][2];  // Td[16 b + 8 nt + gq][8 ks + 2 t4 (+1)]
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) {
                    const uint2 t = *reinterpret_cast<const uint2 *>(sm.Td + (16 * b + 8 * nt + gq) * kLdTd + 8 * ks +
                                                                      2 * t4);
                    bv[nt][0] = t.x;
                    bv[nt][1] = t.y;
                }
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt) mma_tf32(xacc[mt][nt], ca[mt][ks], bv[nt]);
            }
            // W is an operand of the walk's 1-term W S only, so it is stored rounded to tf32 (masked), which the walk
            // then takes as is; U stays fp32. The block row goes through the warp's staging tile so that each global
            // store is a float4 and a warp's store covers 4 whole 128-byte row pieces (lever 89), not 4 rows x 32 B.
#pragma unroll
            for (int f = 0; f < 16; ++f) {
                const int mt = f >> 3, nt = (f >> 2) & 1, e = f & 3;
                const int row = 8 * nt + 2 * t4 + (e & 1), col = 16 * mt + gq + 8 * (e >> 1);
                const float v = xacc[mt][nt][e];
                xs[xs_at(row, col)] = is_w ? __uint_as_float(tf32_rna_bits(v) & 0xffffe000u) : v;
            }
            __syncwarp();
#pragma unroll
            for (int p = 0; p < 4; ++p) {  // rows lane / 8 + 4 p, columns 4 (lane % 8)..
                const int row = (lane >> 3) + 4 * p, c4 = 4 * (lane & 7);
                *reinterpret_cast<float4 *>(dst + (16 * b + row) * kLdUW + c4) =
                    *reinterpret_cast<const float4 *>(xs + xs_at(row, c4));
            }
            __syncwarp();  // the next block row reuses xs
            if (b + 1 < kC / 16)
#pragma unroll
                for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                    for (int ks = 0; ks < 2; ++ks) acc_as_a_tf32(xacc[mt][ks], xa[b][mt][ks]);
        }
    }
    if constexpr (kPOut) {  // the walk's P and qs, into this chunk's S0 slot; L's tile is free once all have solved
        __syncthreads();
        chunk_p(sm.Q, sm.K, sm.qs, sm.rk, sm.gam, sm.L);
        __syncthreads();
        float *pq = reinterpret_cast<float *>(ws + lay.s0) + slot * kD * kD;
#pragma unroll
        for (int p = 0; p < kC * kC / 4 / kThreads; ++p) {  // rows tid / 16 + 16 p
            const int i = tid / (kC / 4) + p * (kThreads / (kC / 4)), c4 = (tid % (kC / 4)) * 4;
            *reinterpret_cast<float4 *>(pq + i * kLdL + c4) = *reinterpret_cast<const float4 *>(sm.L + i * kLdL + c4);
        }
        if (tid < kC) pq[kC * kLdL + tid] = sm.qs[tid];
    }
}

// One chunk's walk operands; two of these double-buffer the next chunk's cp.async loads.
struct WalkBuf {
    float W[kC * kLdF];   // W rows
    bf16 K[kC * kLdKb];   // raw k rows (zeros past the chunk end)
    float U[kC * kLdSl];  // U[:, v0 .. v0 + 31]
    float gam[kC];
    float rk[kC];
};
struct WalkOutBuf : WalkBuf {  // the walk that also writes O needs the chunk's q rows
    bf16 Q[kC * kLdKb];
};
struct WalkPInBuf : WalkOutBuf {  // and, when prep made them (kPIn), the chunk's P and qs
    float P[kC * kLdL];
    float qs[kC];
};
static_assert(sizeof(WalkPInBuf) == sizeof(WalkOutBuf) + (kC * kLdL + kC) * sizeof(float),
              "qs right after P: the walk copies both as one run (they lie so in the S0 slot)");
template <bool kOut, bool kPIn = false>
using WalkBufOf = std::conditional_t<kPIn, WalkPInBuf, std::conditional_t<kOut, WalkOutBuf, WalkBuf>>;
static_assert(sizeof(WalkBuf) % 16 == 0 && sizeof(WalkOutBuf) % 16 == 0 && sizeof(WalkPInBuf) % 16 == 0,
              "walk buffers keep 16-byte alignment");

// Shared memory of a walk block: kBufs chunk buffers, the state slab S and diag(f) Delta; with kOut also Delta,
// P and qs. Without kOut: 151 KiB with two buffers (sm_80 and up), 90.5 KiB with one (sm_86 / sm_89). With kOut:
// 212.25 KiB with two (sm_90 and up), 134.75 KiB with one (sm_80).
// p_in (with kOut): P and qs in each chunk buffer, and Delta over U in it: 219.5 KiB with two buffers (sm_90).
// Each also 8 B per buffer for its mbarrier (W by TMA on sm_90; unused below).
constexpr size_t walk_smem(int bufs, bool out, bool p_in = false) {
    return bufs * (p_in ? sizeof(WalkPInBuf) : out ? sizeof(WalkOutBuf) : sizeof(WalkBuf)) +
           (kD * kLdSl + kC * kLdSl) * sizeof(float) +
           (out && !p_in ? (kC * kLdSl + kC * kLdL + kC) * sizeof(float) : 0) +
           bufs * sizeof(uint64_t);  // one mbarrier per buffer (its W by TMA, sm_90)
}

// fp32 row stride of the out kernel's B tile (S0, then Delta), read as MMA B fragments B[k0 + t][n0 + g]: 136 = 8
// (mod 32) puts lane (g, t) on bank 8t + g, conflict-free (kLdF = 4 (mod 32) gave 4t + g: banks 4-15 took two lanes
// each, so every B load two wavefronts; lever 77).
constexpr int kLdOutB = 136;
// K is read only to form P, so P takes its place (the same 17 KiB): 68.8 KiB in all, three blocks per SM.
struct OutSmem {
    bf16 Q[kC * kLdKb];  // raw q rows; with the norm, the z rows once Q S0 is done
    union {
        bf16 K[kC * kLdKb];  // raw k rows, until P is formed
        float P[kC * kLdL];  // (Q~ K^T) .* D; with the norm, then O as bf16 rows of stride kLdKb
    };
    float B[kC * kLdOutB];  // S0 rows 0..63, then 64..127, then Delta
    float qs[kC];           // scale / |q_i|
    float gam[kC];
    float rk[kC];
};
constexpr size_t kOutMmaSmem = sizeof(OutSmem);
static_assert(3 * (kOutMmaSmem + 1024) <= 228 * 1024, "three out blocks per SM on sm_90 (228 KiB per SM)");
static_assert(sizeof(OutSmem) % 16 == 0, "OutSmem keeps 16-byte alignment");
static_assert(sizeof(bf16) * kC * kLdKb == sizeof(float) * kC * kLdL, "K and P tiles of one size");

// ---- pieces of the output O = diag(qs e^Gam) Q_raw S0 + P Delta, shared by the walk (kOut) and the out kernel ----

// acc[j] (rows m0.., columns n0 + 8j..) *= qs_i e^{Gam_i}: the row factors of Q_raw S0
template <int NT>
__device__ __forceinline__ void scale_q_rows(float acc[NT][4], const float *qs, const float *gam, int m0) {
    const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
        const int i = m0 + g + 4 * e;  // e = 0: row g, e = 2: row g + 8
        const float f = qs[i] * expf(gam[i]);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            acc[j][e] *= f;
            acc[j][e + 1] *= f;
        }
    }
}

// acc[mi][j] += P[m0 + 16 mi.., :] Delta[:, n0 + 8j..] over the 64 chunk rows (1-term tf32: both rounded), for MI
// 16-row tiles at once (each Delta value is rounded once for all of them); Delta in smem of stride ldb. Every
// element gets the same products in the same order whatever MI.
template <int MI, int NT>
__device__ __forceinline__ void mma_p_delta(const float *P, const float *B, int ldb, int m0, int n0,
                                            float acc[MI][NT][4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    constexpr int kRowBytes = kLdL * int(sizeof(float));
    const unsigned char *p_row = a_frag_row(P, kRowBytes, m0);
#pragma unroll 2
    for (int k0 = 0; k0 < kC; k0 += 8) {
        uint32_t a[MI][4];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {  // P's fp32 bits by ldsm_x4, then rounded
            ldsm_x4(a[mi], p_row + 16 * mi * kRowBytes + 4 * k0);
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mi][e] = tf32_rna_bits(__uint_as_float(a[mi][e]));
        }
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const uint32_t b[2] = {tf32_rna_bits(B[(k0 + t) * ldb + n0 + 8 * j + g]),
                                   tf32_rna_bits(B[(k0 + t + 4) * ldb + n0 + 8 * j + g])};
#pragma unroll
            for (int mi = 0; mi < MI; ++mi) mma_tf32(acc[mi][j], a[mi], b);
        }
    }
}

// rows m0 + g and m0 + g + 8 of acc (columns col0 + 8j + 2t, +1) as bf16 into o; rows >= len are not written
template <int NT>
__device__ __forceinline__ void store_o_rows(const float acc[NT][4], bf16 *o, int row0, int len, int H, int h,
                                             int col0, int m0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
        const int i = m0 + g + 4 * e;
        if (i >= len) continue;
        bf16 *orow = o + (int64_t(row0 + i) * H + h) * kD + col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const uint32_t packed = uint32_t(__bfloat16_as_ushort(f2bf(acc[j][e]))) |
                                    (uint32_t(__bfloat16_as_ushort(f2bf(acc[j][e + 1]))) << 16);
            *reinterpret_cast<uint32_t *>(orow + 8 * j) = packed;
        }
    }
}

// rows m0 + g and m0 + g + 8 of acc (columns col0 + 8j + 2t, +1) as bf16 into a smem tile of stride kLdKb: the bits
// store_o_rows would write to o
template <int NT>
__device__ __forceinline__ void stage_o_rows(const float acc[NT][4], bf16 *tile, int col0, int m0) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
        bf16 *row = tile + (m0 + g + 4 * e) * kLdKb + col0 + 2 * t;
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const uint32_t packed = uint32_t(__bfloat16_as_ushort(f2bf(acc[j][e]))) |
                                    (uint32_t(__bfloat16_as_ushort(f2bf(acc[j][e + 1]))) << 16);
            *reinterpret_cast<uint32_t *>(row + 8 * j) = packed;
        }
    }
}

// The walk's shared B operands (the state slab S, [128][kLdSl], and diag(f) Delta, [64][kLdSl]) hold tf32 bits,
// rounded once by their writer rather than by each of their 4 (S) or 8 (diag(f) Delta) reader warps.
__device__ __forceinline__ void put_tf32x2(uint32_t *tile, int at, float x0, float x1) {  // at: even
    *reinterpret_cast<uint2 *>(tile + at) = make_uint2(tf32_rna_bits(x0), tf32_rna_bits(x1));
}
// the B fragment of rows (r, r + 4) at column c: at = r * kLdSl + c
__device__ __forceinline__ void tf32_fragment(const uint32_t *tile, int at, uint32_t b[2]) {
    b[0] = tile[at];
    b[1] = tile[at + 4 * kLdSl];
}

// The state slab entering a chunk (st: warp w's rows 16w.., C fragments of columns 8j..) into the walk's B operand
// sS as tf32 bits and, for the out kernel (kOut = false), as fp32 into the chunk's S0 slot s0.
template <bool kOut>
__device__ __forceinline__ void put_state(const float st[4][4], uint32_t *sS, float *s0) {
    const int lane = threadIdx.x & 31, r = 16 * (threadIdx.x >> 5) + (lane >> 2), t = lane & 3;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int col = 8 * j + 2 * t;
        const float2 lo = make_float2(st[j][0], st[j][1]), hi = make_float2(st[j][2], st[j][3]);
        put_tf32x2(sS, r * kLdSl + col, lo.x, lo.y);
        put_tf32x2(sS, (r + 8) * kLdSl + col, hi.x, hi.y);
        if constexpr (!kOut) {
            *reinterpret_cast<float2 *>(s0 + r * kD + col) = lo;
            *reinterpret_cast<float2 *>(s0 + (r + 8) * kD + col) = hi;
        }
    }
}

// sm_90: the walk's W (33 KB per chunk, 8 of a thread's 14 cp.async) arrives by one TMA copy, issued by thread 0 and
// counted as bytes on the buffer's mbarrier (`bar`), off the load-store path of every thread: as LDGSTS the copies took
// ~10 shared-memory wavefronts per 512 bytes against the 4 of whole rows (LEVERS 84; 83's one TMA copy per row was
// serial in one warp and 2.4x slower). The walk never writes into a W tile, so no generic store meets the async proxy.
// With kPIn, P and qs (17 KB, 4 more cp.async per thread) come the same way, one run from the S0 slot where prep
// stores P at the tile's stride (LEVERS 84c); the walk reads them only.
#if (defined(GDN_MMA_EMULATED) && !defined(GDN_EMULATED_NO_TMA)) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
constexpr bool kWalkTmaW = true;  // the emulator's --no-tma checks the cp.async form the smaller devices run
#else
constexpr bool kWalkTmaW = false;
#endif
static_assert(kLdUW == kLdF && sizeof(WalkBuf::W) % 16 == 0, "W's workspace rows are the walk tile's rows");

// with_w = false (a prompt's first chunk, whose W S the walk skips: S = 0) loads no W; on sm_90 the buffer's mbarrier
// phase then completes on its arrive alone (0 bytes), so every buffer's n-th use still waits for phase n.
template <bool kOut, bool kPIn = false>
__device__ __forceinline__ void walk_prefetch(WalkBufOf<kOut, kPIn> &b, uint64_t *bar, bool with_w, const bf16 *rows,
                                              int64_t ld, int hk, int HK, int len, const unsigned char *ws,
                                              const Layout &lay, size_t slot, int v0) {
    const float *w = reinterpret_cast<const float *>(ws + lay.w) + slot * kC * kLdUW;
    const float *pq = reinterpret_cast<const float *>(ws + lay.s0) + slot * kD * kD;  // kPIn: P [64][kLdL], qs [64]
    if constexpr (kWalkTmaW) {
        if (threadIdx.x == 0) {
            const uint32_t w_bytes = with_w ? uint32_t(sizeof(b.W)) : 0u;
            if constexpr (kPIn) {  // P and qs as the slot holds them: one run (WalkPInBuf keeps qs right after P)
                bar_expect_bytes(bar, w_bytes + uint32_t(sizeof(b.P) + sizeof(b.qs)));
                bulk_copy(b.P, pq, sizeof(b.P) + sizeof(b.qs), bar);
            } else {
                bar_expect_bytes(bar, w_bytes);
            }
            if (with_w) bulk_copy(b.W, w, sizeof(b.W), bar);
        }
    } else {
        if (with_w) cp_rows_f32<kD, kLdUW>(b.W, kLdF, w);
    }
    cp_rows_bf16(b.K, rows + int64_t(HK) * kD + int64_t(hk) * kD, ld, len);
    if constexpr (kOut) cp_rows_bf16(b.Q, rows + int64_t(hk) * kD, ld, len);
    cp_rows_f32<kSlab, kLdUW>(b.U, kLdSl, reinterpret_cast<const float *>(ws + lay.u) + slot * kC * kLdUW + v0);
    const int tid = threadIdx.x;
    if constexpr (kPIn && !kWalkTmaW) {  // prep's P [64][kLdL] and qs [64] from the chunk's S0 slot
#pragma unroll
        for (int p = 0; p < kC * kC / 4 / kThreads; ++p) {  // rows tid / 16 + 16 p (a compile-time trip count)
            const int i = tid / (kC / 4) + p * (kThreads / (kC / 4)), c4 = (tid % (kC / 4)) * 4;
            cp_async16(b.P + i * kLdL + c4, pq + i * kLdL + c4, true);
        }
        if (tid < kC / 4) cp_async16(b.qs + 4 * tid, pq + kC * kLdL + 4 * tid, true);
    }
    if (tid < kC / 4)
        cp_async16(b.gam + 4 * tid, reinterpret_cast<const float *>(ws + lay.gam) + slot * kC + 4 * tid, true);
    else if (tid < kC / 2)
        cp_async16(b.rk + 4 * (tid - kC / 4),
                   reinterpret_cast<const float *>(ws + lay.rk) + slot * kC + 4 * (tid - kC / 4), true);
    cp_async_commit();
}

// The chunk's qs and P: in its buffer when prep made them (WalkPInBuf), else the block's own tiles the walk fills.
template <class Buf> __device__ __forceinline__ float *chunk_qs_of(Buf &b, float *own) {
    if constexpr (std::is_same_v<Buf, WalkPInBuf>) return b.qs; else return own;
}
template <class Buf> __device__ __forceinline__ float *chunk_p_of(Buf &b, float *own) {
    if constexpr (std::is_same_v<Buf, WalkPInBuf>) return b.P; else return own;
}

// Block (prompt, head, 32-column slab), 8 warps. The state slab S[128][32] lives in registers as MMA accumulators:
// warp w holds rows 16w.. (st[j] = C fragment of columns 8j..8j+7). Per chunk:
//   Delta = U - W S           (64x32, K = 128; warp: rows 16 (w % 4).., columns 16 (w / 4)..; 1-term tf32: W
//                              rounded by prep, S by the walk)
//   S = e^{Gam_63} S + K_raw^T (diag(f) Delta),  f_i = e^{Gam_63 - Gam_i} / |k_i|   (K = 64; 1-term, A exact)
// while the next chunk's W, k (and q), U, Gam, 1/|k| arrive by cp.async into the other buffer (kBufs = 2; with
// one buffer they load after the chunk); W by one TMA copy on sm_90 (kWalkTmaW).
// kOut = false: S0 and Delta go to the workspace for gdn_out_mma_kernel. kOut = true: the block writes its slab of
// O itself, with the out kernel's operands in the out kernel's order (the same bytes): Q_raw S0 joins the Delta
// loop (same B fragments), P is formed beside it, and P Delta follows the Delta barrier.
// kPIn (with kOut): P and qs come from prep (gdn_prep_mma_kernel<true>) with the chunk's other operands instead
// of being formed on the walk's serial chain (a 64 x 64 x 128 MMA, the q norms and a barrier per chunk); Delta
// overwrites U in the chunk buffer to make room. The same values in the same order: the same bytes.
template <int kBufs, bool kOut, bool kPIn = false>
__global__ void __launch_bounds__(kThreads, 1) gdn_walk_mma_kernel(const bf16 *__restrict__ qkv, int64_t ld, int H,
                                                                   int HK, float scale,
                                                                   unsigned char *__restrict__ ws, Layout lay,
                                                                   bf16 *__restrict__ o) {
    static_assert(kOut || !kPIn, "P is an operand of O");
    using Buf = WalkBufOf<kOut, kPIn>;
    const int s = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * kSlab;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int32_t *seq_start = reinterpret_cast<const int32_t *>(ws + lay.seq_start);
    const int32_t *chunk_off = reinterpret_cast<const int32_t *>(ws + lay.chunk_off);
    const int c_begin = chunk_off[s], c_end = chunk_off[s + 1], row_begin = seq_start[s], row_end = seq_start[s + 1];
    if (c_begin >= c_end) return;
    const int hk = h / (H / HK);

    extern __shared__ __align__(16) unsigned char smem_raw[];
    Buf *buf = reinterpret_cast<Buf *>(smem_raw);
    uint32_t *ops = reinterpret_cast<uint32_t *>(buf + kBufs);
    constexpr int kNs = kD * kLdSl, kNdf = kC * kLdSl;
    uint32_t *const sS = ops;                                 // [128][kLdSl] state slab entering the chunk (tf32)
    uint32_t *const sDf = ops + kNs;                          // [64][kLdSl] diag(f) Delta (tf32)
    float *sD = reinterpret_cast<float *>(ops + kNs + kNdf);  // kOut, !kPIn: [64][kLdSl] Delta
    float *sP = sD + kC * kLdSl;                          // kOut, !kPIn: [64][kLdL] P
    float *sQs = sP + kC * kLdL;                          // kOut, !kPIn: [64] scale / |q_i|
    // last (walk_smem): buffer b's mbarrier, whose phase n is the TMA copy of its n-th W
    uint64_t *const bars = reinterpret_cast<uint64_t *>(kOut && !kPIn ? sQs + kC : sD);
    if constexpr (kWalkTmaW) {
        if (tid == 0)
            for (int b = 0; b < kBufs; ++b) bar_init(bars + b);
        __syncthreads();  // the mbarriers exist before any thread waits on one
    }

    walk_prefetch<kOut, kPIn>(buf[0], bars, false, qkv + int64_t(row_begin) * ld, ld, hk, HK,
                              min(kC, row_end - row_begin), ws, lay, size_t(c_begin) * H + h, v0);
    float st[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) st[j][0] = st[j][1] = st[j][2] = st[j][3] = 0.0f;
    float *const s0_slots = reinterpret_cast<float *>(ws + lay.s0) + v0;  // kOut = false: slot b at b * kD * kD
    // S entering each chunk is stored by the chunk before it (below, after its update), so the barrier at the top of
    // the loop, which waits for the chunk's copies anyway, also publishes sS
    put_state<kOut>(st, sS, s0_slots + (size_t(c_begin) * H + h) * kD * kD);

    for (int c = c_begin; c < c_end; ++c) {
        const size_t slot = size_t(c) * H + h;
        Buf &cur = buf[(c - c_begin) % kBufs];  // kPIn writes Delta over its U
        const int row0 = row_begin + (c - c_begin) * kC, len = min(kC, row_end - row0);
        cp_async_wait_all();
        if constexpr (kWalkTmaW) bar_wait(bars + (c - c_begin) % kBufs, uint32_t((c - c_begin) / kBufs) & 1u);
        __syncthreads();  // this chunk's buffer and sS landed; every read of the other buffer, sDf, sD, sP is done
        const int row1 = row0 + kC;
        if (kBufs == 2 && c + 1 < c_end)
            walk_prefetch<kOut, kPIn>(buf[(c + 1 - c_begin) % kBufs], bars + (c + 1 - c_begin) % kBufs, true,
                                      qkv + int64_t(row1) * ld, ld, hk, HK, min(kC, row_end - row1), ws, lay, slot + H,
                                      v0);
        const float *const qs = chunk_qs_of(cur, sQs), *const p_tile = chunk_p_of(cur, sP);
        float *const delta = kPIn ? cur.U : sD;  // written by the thread that reads U at that element
        if constexpr (kOut && !kPIn) {
            row_inv_norms(cur.Q, scale, sQs);  // qs_i = scale / sqrt(|q_i|^2 + eps)
            __syncthreads();                   // every row's qs, before chunk_p reads them
        }
        const float gam_last = cur.gam[kC - 1];
        // S = 0 entering a prompt's first chunk, so W S and Q_raw S are exact zeros there and their MMAs are skipped;
        // the state leaving the last chunk is never read, so its update is skipped (the same bytes either way)
        const bool first = c == c_begin, last = c + 1 == c_end;
        const int m0 = 16 * (warp & 3), n0 = 16 * (warp >> 2);  // this warp's block of Delta and O
        float oacc[2][4] = {};
        if constexpr (kOut && !kPIn) chunk_p(cur.Q, cur.K, sQs, cur.rk, cur.gam, sP);
        {  // Delta = U - W S and O = Q_raw S (1-term: W's and S's tf32 bits as stored, q exact)
            const uint16_t *qb = nullptr;
            if constexpr (kOut) qb = reinterpret_cast<const uint16_t *>(cur.Q);
            const unsigned char *w_row = a_frag_row(cur.W, kLdF * int(sizeof(float)), m0);  // W's tf32 bits
            float ws_acc[2][4] = {};
            if (!first)
#pragma unroll 4
            for (int k0 = 0; k0 < kD; k0 += 8) {
                uint32_t aw[4], aq[4];
                ldsm_x4(aw, w_row + 4 * k0);
                if constexpr (kOut) {
                    aq[0] = bf16_bits_as_tf32(qb[(m0 + g) * kLdKb + k0 + t]);
                    aq[1] = bf16_bits_as_tf32(qb[(m0 + g + 8) * kLdKb + k0 + t]);
                    aq[2] = bf16_bits_as_tf32(qb[(m0 + g) * kLdKb + k0 + t + 4]);
                    aq[3] = bf16_bits_as_tf32(qb[(m0 + g + 8) * kLdKb + k0 + t + 4]);
                }
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    uint32_t b[2];
                    tf32_fragment(sS, (k0 + t) * kLdSl + n0 + 8 * j + g, b);
                    mma_tf32(ws_acc[j], aw, b);
                    if constexpr (kOut) mma_tf32(oacc[j], aq, b);
                }
            }
            float *udelta = reinterpret_cast<float *>(ws + lay.u) + slot * kC * kLdUW + v0;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int i = m0 + g + 8 * half;
                const float f = cur.rk[i] * expf(gam_last - cur.gam[i]);
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int col = n0 + 8 * j + 2 * t;
                    const float2 u = *reinterpret_cast<const float2 *>(cur.U + i * kLdSl + col);
                    const float d0 = u.x - ws_acc[j][2 * half];
                    const float d1 = u.y - ws_acc[j][2 * half + 1];
                    if constexpr (kOut)
                        *reinterpret_cast<float2 *>(delta + i * kLdSl + col) = make_float2(d0, d1);
                    else
                        *reinterpret_cast<float2 *>(udelta + i * kLdUW + col) = make_float2(d0, d1);
                    put_tf32x2(sDf, i * kLdSl + col, d0 * f, d1 * f);
                }
            }
        }
        __syncthreads();
        if (!last) {  // S = e^{Gam_63} S + K_raw^T diag(f) Delta
            const uint16_t *kb = reinterpret_cast<const uint16_t *>(cur.K);
            const int r0 = 16 * warp;
            float upd[4][4] = {};
#pragma unroll 2
            for (int i0 = 0; i0 < kC; i0 += 8) {
                uint32_t a[4];
                a[0] = bf16_bits_as_tf32(kb[(i0 + t) * kLdKb + r0 + g]);
                a[1] = bf16_bits_as_tf32(kb[(i0 + t) * kLdKb + r0 + g + 8]);
                a[2] = bf16_bits_as_tf32(kb[(i0 + t + 4) * kLdKb + r0 + g]);
                a[3] = bf16_bits_as_tf32(kb[(i0 + t + 4) * kLdKb + r0 + g + 8]);
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    uint32_t b[2];
                    tf32_fragment(sDf, (i0 + t) * kLdSl + 8 * j + g, b);
                    mma_tf32(upd[j], a, b);
                }
            }
            const float e_last = expf(gam_last);
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) st[j][e] = fmaf(e_last, st[j][e], upd[j][e]);
            // every read of sS (the Delta loop) is behind the barrier above; the next chunk reads it after its top one
            put_state<kOut>(st, sS, s0_slots + (slot + H) * kD * kD);
        }
        if constexpr (kOut) {  // O = diag(qs e^Gam) (Q_raw S0) + P Delta, this warp's 16 x 16 block of the slab
            scale_q_rows<2>(oacc, qs, cur.gam, m0);
            mma_p_delta<1, 2>(p_tile, delta, kLdSl, m0, n0, &oacc);
            store_o_rows<2>(oacc, o, row0, len, H, h, v0 + n0, m0);
        }
        if (kBufs == 1 && c + 1 < c_end) {
            __syncthreads();  // every read of the buffer done
            walk_prefetch<kOut, kPIn>(buf[0], bars, true, qkv + int64_t(row1) * ld, ld, hk, HK, min(kC, row_end - row1),
                                      ws, lay, slot + H, v0);
        }
    }
}

// Block (chunk, head), 8 warps:
//   P = diag(qs) (Q_raw K_raw^T) diag(rk) .* D      bf16 MMA (exact products); warp: rows 16 (w % 4).., cols 32 (w / 4)..
//   O = diag(qs e^Gam) Q_raw S0 + P Delta            tf32; warp: rows 32 (w % 2).., columns 32 (w / 2)..
// O's 32 x 32 warp tiles (two 16-row MMA tiles) have each S0 and Delta value split by 2 warps instead of the 4 of
// 16 x 64 tiles: the splits, not the MMAs, fill the kernel's issue slots (LEVERS, Nsight source counters).
// qs_i = scale / |q_i|. Only where the walk does not write O itself (calls longer than kWalkOutMaxRows rows, devices
// whose shared memory does not hold the walk's extra tiles, or CS1_GDN_SPLIT_OUT=1).
// Where the out kernel's O tile goes: to o as bf16 (NoOutNorm), or through the gated RMSNorm into o's place (OutNorm:
// o is then the norm's output; its z rows are loaded with Delta into the K tile, free by then).
struct NoOutNorm {};
struct OutNorm {
    const bf16 *z;  // z of row t, value head h: z + t * ldz + h * 128 (16-byte aligned, ldz % 8 == 0)
    int64_t ldz;
    const float *w;  // [128], 16-byte aligned
    int round_weighted;
    float eps;
};

template <class Norm>
__device__ __forceinline__ void out_chunk(const bf16 *__restrict__ qkv, int64_t ld, int n_seqs, int H, int HK,
                                          float scale, unsigned char *__restrict__ ws, const Layout &lay,
                                          bf16 *__restrict__ o, const Norm &norm) {
    constexpr bool kNorm = std::is_same_v<Norm, OutNorm>;
    const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const ChunkInfo ck = find_chunk(reinterpret_cast<const int32_t *>(ws + lay.seq_start),
                                    reinterpret_cast<const int32_t *>(ws + lay.chunk_off), n_seqs, c);
    if (ck.len == 0) return;
    const int hk = h / (H / HK);
    const size_t slot = size_t(c) * H + h;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    OutSmem &sm = *reinterpret_cast<OutSmem *>(smem_raw);
    const bf16 *rows = qkv + int64_t(ck.row0) * ld;
    const float *s0 = reinterpret_cast<const float *>(ws + lay.s0) + slot * kD * kD;
    cp_rows_bf16(sm.Q, rows + int64_t(hk) * kD, ld, ck.len);
    cp_rows_bf16(sm.K, rows + int64_t(HK) * kD + int64_t(hk) * kD, ld, ck.len);
    cp_rows_f32<kD, kD>(sm.B, kLdOutB, s0);
    if (tid < kC / 4)
        cp_async16(sm.gam + 4 * tid, reinterpret_cast<const float *>(ws + lay.gam) + slot * kC + 4 * tid, true);
    else if (tid < kC / 2)
        cp_async16(sm.rk + 4 * (tid - kC / 4),
                   reinterpret_cast<const float *>(ws + lay.rk) + slot * kC + 4 * (tid - kC / 4), true);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    row_inv_norms(sm.Q, scale, sm.qs);  // qs_i = scale / sqrt(|q_i|^2 + eps)
    __syncthreads();
    chunk_p<true>(sm.Q, sm.K, sm.qs, sm.rk, sm.gam, sm.P);
    const int m0 = 32 * (warp & 1), n0 = 32 * (warp >> 1);
    float acc[2][4][4] = {};
    const uint16_t *qb = reinterpret_cast<const uint16_t *>(sm.Q);
    for (int half = 0; half < 2; ++half) {  // Q_raw S0, 64 key rows at a time (1-term: q is exact, S0 rounded)
        if (half == 1) {
            __syncthreads();  // every read of S0 rows 0..63 done
            cp_rows_f32<kD, kD>(sm.B, kLdOutB, s0 + kC * kD);
            cp_async_commit();
            cp_async_wait_all();
        }
        __syncthreads();
#pragma unroll 2
        for (int k0 = 0; k0 < kC; k0 += 8) {
            const int kq = half * kC + k0 + t;
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const int r = m0 + 16 * mi + g;
                a[mi][0] = bf16_bits_as_tf32(qb[r * kLdKb + kq]);
                a[mi][1] = bf16_bits_as_tf32(qb[(r + 8) * kLdKb + kq]);
                a[mi][2] = bf16_bits_as_tf32(qb[r * kLdKb + kq + 4]);
                a[mi][3] = bf16_bits_as_tf32(qb[(r + 8) * kLdKb + kq + 4]);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const uint32_t b[2] = {tf32_rna_bits(sm.B[(k0 + t) * kLdOutB + n0 + 8 * j + g]),
                                       tf32_rna_bits(sm.B[(k0 + t + 4) * kLdOutB + n0 + 8 * j + g])};
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) mma_tf32(acc[mi][j], a[mi], b);
            }
        }
    }
    scale_q_rows<4>(acc[0], sm.qs, sm.gam, m0);
    scale_q_rows<4>(acc[1], sm.qs, sm.gam, m0 + 16);
    __syncthreads();  // every read of S0 done (and of the Q tile)
    cp_rows_f32<kD, kLdUW>(sm.B, kLdOutB, reinterpret_cast<const float *>(ws + lay.u) + slot * kC * kLdUW);
    if constexpr (kNorm)  // the chunk's z rows into the Q tile (rows >= len zero)
        cp_rows_bf16(sm.Q, norm.z + int64_t(ck.row0) * norm.ldz + int64_t(h) * kD, norm.ldz, ck.len);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    mma_p_delta<2, 4>(sm.P, sm.B, kLdOutB, m0, n0, acc);
    if constexpr (kNorm) {
        // O as bf16 into P's tile once every warp's P Delta is done, then each row as gated_rms_norm_vec_kernel<128>
        // treats it: 16 lanes per row, 8 columns each, two rows per warp
        bf16 *ot = sm.K;
        __syncthreads();
        stage_o_rows<4>(acc[0], ot, n0, m0);
        stage_o_rows<4>(acc[1], ot, n0, m0 + 16);
        __syncthreads();
        const int sub = lane & 15;
        float wv[8];
        gated_norm_weights(norm.w, sub, wv);
        for (int i = 2 * warp + (lane >> 4); i < kC; i += 2 * (kThreads / 32)) {  // uniform trip count per warp
            const Pack8 xp = *reinterpret_cast<const Pack8 *>(ot + i * kLdKb + 8 * sub);
            const Pack8 zp = *reinterpret_cast<const Pack8 *>(sm.Q + i * kLdKb + 8 * sub);
            float v[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = bf2f(xp.v[e]);
            const float inv = gated_norm_inv<16>(v, norm.eps);
            if (i >= ck.len) continue;
            reinterpret_cast<Pack8 *>(o + (int64_t(ck.row0 + i) * H + h) * kD)[sub] =
                gated_norm_pack8(v, zp, wv, inv, norm.round_weighted);
        }
    } else {
        store_o_rows<4>(acc[0], o, ck.row0, ck.len, H, h, n0, m0);
        store_o_rows<4>(acc[1], o, ck.row0, ck.len, H, h, n0, m0 + 16);
    }
}

__global__ void __launch_bounds__(kThreads, 3) gdn_out_mma_kernel(const bf16 *__restrict__ qkv, int64_t ld,
                                                                  int n_seqs, int H, int HK, float scale,
                                                                  unsigned char *__restrict__ ws, Layout lay,
                                                                  bf16 *__restrict__ o) {
    out_chunk(qkv, ld, n_seqs, H, HK, scale, ws, lay, o, NoOutNorm{});
}

// The out kernel with the layer's gated RMSNorm applied to its tile: o receives the norm's output rows.
__global__ void __launch_bounds__(kThreads, 3) gdn_out_norm_mma_kernel(const bf16 *__restrict__ qkv, int64_t ld,
                                                                       int n_seqs, int H, int HK, float scale,
                                                                       unsigned char *__restrict__ ws, Layout lay,
                                                                       bf16 *__restrict__ o, OutNorm norm) {
    out_chunk(qkv, ld, n_seqs, H, HK, scale, ws, lay, o, norm);
}


// How cs1_gdn_prefill runs on this device. The walk that writes O itself (kOut) saves the out kernel's launch and
// its re-read of S0 and Delta, but puts O's work on the walk's serial chain: on the H200 (lever 24) it took one
// layer at 128 rows from 44.4 to 36.4 us and at 2048 rows from 371 to 429 us (10.0 instead of 5.4 us per chunk,
// while the out kernel runs all chunks in parallel). So it ran only up to 256 rows (the crossover was near 6
// chunks). Levers 69-70 made every product 1-term tf32, O's in the walk included; then the walk with O was faster
// at every length measured from 288 to 640 rows (-0.16 to -0.01 ms per forward, the gain shrinking; lever 72).
// Longer calls keep the out kernel. Both give the same bytes.
constexpr int64_t kWalkOutMaxRows = 640;
// Above this many rows (3 chunks and more) the walk that writes O takes P and qs from prep (kPIn): each walk block
// then skips a 64 x 64 x 128 MMA, the q norms and a barrier per chunk, while prep loads q and forms P for every chunk
// in parallel before any walk starts. Lever 59 (P from prep at every length, prep one kernel) measured +0.025 ms at
// 128 rows, -0.047 at 160; 59b showed +0.020 of that 128-row cost to be the one-kernel prep's code, not the path
// (LEVERS 59b / 59c). Lever 73c then made prep with P 3 us per layer faster where its grid has at most one block
// per SM (the rolled solve), so from kC + 1 rows P comes from prep there too (lever 74).
constexpr int64_t kWalkPInMinRows = 128;

// Chosen once per device from its shared memory per block: walk_bufs for the walk without kOut, out_bufs for the
// one with kOut (0: it does not fit).
// p_in: the walk that writes O with two buffers may take P and qs from prep (kPIn; 219.5 KiB, sm_90).
// sms: the device's SM count: where prep's grid has at most one block per SM, P comes from prep from kC + 1 rows
// (lever 74, measured with lever 73c's rolled substitution, which lever 88's tensor-core solve replaced).
// In the environment (read once): CS1_GDN_SPLIT_OUT=1 sets out_bufs = 0 and CS1_GDN_P_IN=0 p_in = 0: the paths
// of smaller devices (or the walk forming P itself), kept testable on larger ones.
struct GdnPath {
    int walk_bufs;
    int out_bufs;
    int p_in;
    int sms;
};

template <class Kernel> int allow_smem(Kernel kernel, size_t bytes) {
    CS1_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return 0;
}
template <class Kernel> int max_carveout(Kernel kernel) {
    CS1_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  int(cudaSharedmemCarveoutMaxShared)));
    return 0;
}

// Opt in to > 48 KiB dynamic shared memory once per device (idempotent, so a race only repeats the call).
int configure_device(GdnPath *path) {
    static std::atomic<bool> done[64];
    static std::atomic<int> chosen[64];  // walk_bufs + 4 * out_bufs + 16 * p_in + 32 * sms
    int dev = 0;
    CS1_CUDA(cudaGetDevice(&dev));
    const bool cached = dev >= 0 && dev < 64;
    if (cached && done[dev].load(std::memory_order_acquire)) {
        const int v = chosen[dev].load(std::memory_order_relaxed);
        *path = GdnPath{v & 3, (v >> 2) & 3, (v >> 4) & 1, v >> 5};
        return 0;
    }
    int optin = 0;
    CS1_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    CS1_CUDA(cudaDeviceGetAttribute(&path->sms, cudaDevAttrMultiProcessorCount, dev));
    const char *split = getenv("CS1_GDN_SPLIT_OUT");
    const size_t have = size_t(optin);
    path->walk_bufs = have >= walk_smem(2, false) ? 2 : 1;
    path->out_bufs = (split && split[0] == '1') ? 0 : have >= walk_smem(2, true) ? 2 : have >= walk_smem(1, true);
    const char *p_in = getenv("CS1_GDN_P_IN");
    path->p_in = !(p_in && p_in[0] == '0') && path->out_bufs == 2 && have >= walk_smem(2, true, true);
    int st = allow_smem(gdn_prep_mma_kernel<false>, kPrepMmaSmem);
    // three prep blocks per SM need the largest carveout too (lever 93), as the out kernels below
    if (st == 0) st = max_carveout(gdn_prep_mma_kernel<false>);
    if (st == 0 && path->p_in) st = allow_smem(gdn_prep_mma_kernel<true>, kPrepMmaSmemP);
    if (st == 0) st = allow_smem(gdn_out_mma_kernel, kOutMmaSmem);
    if (st == 0) st = allow_smem(gdn_out_norm_mma_kernel, kOutMmaSmem);
    // three out blocks per SM need the largest shared-memory carveout (3 x 69.8 KiB with the 1 KiB the driver
    // reserves per block; the L1 keeps the rest); ask for it rather than rely on the driver's pick
    if (st == 0) st = max_carveout(gdn_out_mma_kernel);
    if (st == 0) st = max_carveout(gdn_out_norm_mma_kernel);
    if (st == 0)
        st = path->walk_bufs == 2 ? allow_smem(gdn_walk_mma_kernel<2, false>, walk_smem(2, false))
                                  : allow_smem(gdn_walk_mma_kernel<1, false>, walk_smem(1, false));
    if (st == 0 && path->out_bufs == 2) st = allow_smem(gdn_walk_mma_kernel<2, true>, walk_smem(2, true));
    if (st == 0 && path->out_bufs == 1) st = allow_smem(gdn_walk_mma_kernel<1, true>, walk_smem(1, true));
    if (st == 0 && path->p_in)
        st = allow_smem(gdn_walk_mma_kernel<2, true, true>, walk_smem(2, true, true));
    if (st != 0) return st;
    if (cached) {
        chosen[dev].store(path->walk_bufs + 4 * path->out_bufs + 16 * path->p_in + 32 * path->sms,
                          std::memory_order_relaxed);
        done[dev].store(true, std::memory_order_release);
    }
    return 0;
}

}  // namespace

extern "C" int cs1_gdn_workspace_bytes(int64_t T, int64_t n_seqs, int64_t H, size_t *bytes) {
    CS1_REQUIRE_PTR(bytes);
    CS1_REQUIRE_SHAPE(T >= 0 && T <= INT32_MAX && n_seqs >= 0 && n_seqs <= (1 << 20) && H > 0 && H <= 65535);
    *bytes = T == 0 ? 0 : Layout(T, n_seqs, H).total;
    return 0;
}

namespace {

// cs1_gdn_prefill, and with `norm` (cs1_gdn_prefill_norm) the layer's gated RMSNorm after it into `normed`: folded
// into the out kernel where it runs, else the norm kernel on o.
int gdn_prefill(const void *qkv, int64_t ld, const float *g, const float *beta, const int32_t *cu_seqlens,
                int64_t n_seqs, void *o, void *workspace, size_t workspace_bytes, int64_t T, int64_t H, int64_t HK,
                float scale, const OutNorm *norm, void *normed, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && T <= INT32_MAX && n_seqs >= 0 && n_seqs <= (1 << 20));
    CS1_REQUIRE_SHAPE(H > 0 && H <= 65535 && HK > 0 && H % HK == 0);
    if (T == 0) return 0;
    CS1_REQUIRE_PTR(qkv);
    CS1_REQUIRE_PTR(g);
    CS1_REQUIRE_PTR(beta);
    CS1_REQUIRE_PTR(cu_seqlens);
    CS1_REQUIRE_PTR(o);
    CS1_REQUIRE_PTR(workspace);
    CS1_REQUIRE_SHAPE(ld >= (2 * HK + H) * kD);
    CS1_REQUIRE(ld % 8 == 0, CS1_ERR_ALIGNMENT);
    CS1_REQUIRE_ALIGNED(qkv, 16);
    CS1_REQUIRE_ALIGNED(o, 16);
    CS1_REQUIRE_ALIGNED(workspace, 16);
    CS1_REQUIRE_ALIGNED(g, 4);
    CS1_REQUIRE_ALIGNED(beta, 4);
    CS1_REQUIRE_ALIGNED(cu_seqlens, 4);
    if (norm) {
        CS1_REQUIRE_PTR(norm->z);
        CS1_REQUIRE_PTR(norm->w);
        CS1_REQUIRE_PTR(normed);
        CS1_REQUIRE_SHAPE(norm->ldz >= H * kD);
        CS1_REQUIRE(norm->ldz % 8 == 0, CS1_ERR_ALIGNMENT);
        CS1_REQUIRE_ALIGNED(norm->z, 16);
        CS1_REQUIRE_ALIGNED(norm->w, 16);
        CS1_REQUIRE_ALIGNED(normed, 16);
    }
    const Layout lay(T, n_seqs, H);
    CS1_REQUIRE(workspace_bytes >= lay.total, CS1_ERR_WORKSPACE);
    const int64_t nc = (T + kC - 1) / kC + n_seqs;
    CS1_REQUIRE_SHAPE(nc <= INT32_MAX);
    GdnPath path{2, 0, 0, 0};
    const int st = configure_device(&path);
    if (st != 0) return st;

    cudaStream_t s = cs1_stream(stream);
    auto *ws = static_cast<unsigned char *>(workspace);
    const auto *x = static_cast<const bf16 *>(qkv);
    const bool walk_writes_o = path.out_bufs > 0 && T <= kWalkOutMaxRows;
    // O's destination: with the norm folded into the out kernel, the normed rows (prep zeroes their padding rows)
    const bool fold = norm && !walk_writes_o;
    auto *out = static_cast<bf16 *>(fold ? normed : o);
    const bool prep_indexes = n_seqs <= kPrepIndexMaxSeqs;
    if (!prep_indexes) {
        gdn_index_kernel<<<1, 32, 0, s>>>(cu_seqlens, int(n_seqs), int(T),
                                          reinterpret_cast<int32_t *>(ws + lay.seq_start),
                                          reinterpret_cast<int32_t *>(ws + lay.chunk_off));
        CS1_CUDA(cudaGetLastError());
    }
    const dim3 chunk_grid{unsigned(nc), unsigned(H), 1u};
    const dim3 walk_grid{unsigned(n_seqs), unsigned(H), unsigned(kD / kSlab)};
    const int bufs = walk_writes_o ? path.out_bufs : path.walk_bufs;
    const bool one_wave = nc * H <= path.sms;  // prep's grid at most one block per SM
    const bool p_in = walk_writes_o && bufs == 2 && path.p_in && (T > kWalkPInMinRows || (T > kC && one_wave));
    const size_t smem = walk_smem(bufs, walk_writes_o, p_in);
    const int32_t *prep_cu = prep_indexes ? cu_seqlens : nullptr;
    if (p_in)
        gdn_prep_mma_kernel<true><<<chunk_grid, kThreads, kPrepMmaSmemP, s>>>(x, ld, g, beta, prep_cu, int(n_seqs),
                                                                           int(T), int(H), int(HK), scale, ws, lay,
                                                                           out);
    else
        gdn_prep_mma_kernel<false><<<chunk_grid, kThreads, kPrepMmaSmem, s>>>(x, ld, g, beta, prep_cu, int(n_seqs),
                                                                            int(T), int(H), int(HK), scale, ws, lay,
                                                                            out);
    CS1_CUDA(cudaGetLastError());  // a failed launch must not leave later kernels reading unset workspace
    const int h32 = int(H), hk32 = int(HK);
    if (n_seqs > 0) {  // no prompt: prep wrote the padding zeros, no walk
        if (p_in)
            gdn_walk_mma_kernel<2, true, true><<<walk_grid, kThreads, smem, s>>>(x, ld, h32, hk32, scale, ws, lay, out);
        else if (walk_writes_o && bufs == 2)
            gdn_walk_mma_kernel<2, true><<<walk_grid, kThreads, smem, s>>>(x, ld, h32, hk32, scale, ws, lay, out);
        else if (walk_writes_o)
            gdn_walk_mma_kernel<1, true><<<walk_grid, kThreads, smem, s>>>(x, ld, h32, hk32, scale, ws, lay, out);
        else if (bufs == 2)
            gdn_walk_mma_kernel<2, false><<<walk_grid, kThreads, smem, s>>>(x, ld, h32, hk32, scale, ws, lay, out);
        else
            gdn_walk_mma_kernel<1, false><<<walk_grid, kThreads, smem, s>>>(x, ld, h32, hk32, scale, ws, lay, out);
        CS1_CUDA(cudaGetLastError());
        if (fold)
            gdn_out_norm_mma_kernel<<<chunk_grid, kThreads, kOutMmaSmem, s>>>(x, ld, int(n_seqs), h32, hk32, scale,
                                                                              ws, lay, out, *norm);
        else if (!walk_writes_o)
            gdn_out_mma_kernel<<<chunk_grid, kThreads, kOutMmaSmem, s>>>(x, ld, int(n_seqs), h32, hk32, scale, ws,
                                                                         lay, out);
        CS1_CUDA(cudaGetLastError());
    }
    if (norm && !fold)
        return cs1_gated_rms_norm(o, norm->z, norm->ldz, norm->w, norm->round_weighted, normed, T, H, kD, norm->eps,
                                  stream);
    CS1_LAUNCHED();
}

}  // namespace

extern "C" int cs1_gdn_prefill(const void *qkv, int64_t ld, const float *g, const float *beta,
                               const int32_t *cu_seqlens, int64_t n_seqs, void *o, void *workspace,
                               size_t workspace_bytes, int64_t T, int64_t H, int64_t HK, float scale, void *stream) {
    return gdn_prefill(qkv, ld, g, beta, cu_seqlens, n_seqs, o, workspace, workspace_bytes, T, H, HK, scale, nullptr,
                       nullptr, stream);
}

extern "C" int cs1_gdn_prefill_norm(const void *qkv, int64_t ld, const float *g, const float *beta,
                                    const int32_t *cu_seqlens, int64_t n_seqs, const void *z, int64_t ldz,
                                    const float *norm_w, int32_t round_weighted, float eps, void *o, void *out,
                                    void *workspace, size_t workspace_bytes, int64_t T, int64_t H, int64_t HK,
                                    float scale, void *stream) {
    const OutNorm norm{static_cast<const bf16 *>(z), ldz, norm_w, int(round_weighted), eps};
    return gdn_prefill(qkv, ld, g, beta, cu_seqlens, n_seqs, o, workspace, workspace_bytes, T, H, HK, scale, &norm,
                       out, stream);
}
