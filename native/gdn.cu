// gdn.cu: the chunked (C = 64) gated delta rule of a gated DeltaNet layer (the conv and the gates: gdn_conv.cu).
//
// Math: ../shared/spec/qwen3_5-model.md §6 and §7.1. Per value head h, with state S (d_k x d_v = 128 x 128, fp32,
// zero at every prompt start), one chunk of rows i = 0..63 entering with S0:
//   Gam_i = sum_{j<=i} g_j (reset per chunk)          k^_i = k_i / sqrt(|k_i|^2 + 1e-6),  q~_i likewise * scale
//   L_ij  = beta_i (k^_i . k^_j) exp(Gam_i - Gam_j), j < i   (strictly lower)
//   U = (I + L)^-1 diag(beta) V,  W = (I + L)^-1 diag(beta e^Gam) K^   (forward substitution, fp32)
//   Delta = U - W S0;  S_next = e^{Gam_63} S0 + (K^ * e^{Gam_63 - Gam})^T Delta
//   O = diag(e^Gam) Q~ S0 + (Q~ K^T  .* D) Delta,  D_ij = exp(Gam_i - Gam_j) for j <= i, else 0
// Rows of a partial chunk past the prompt end are masked (k = v = beta = g = 0), which leaves every valid row and
// the state exact.
//
// Tensor cores (mma.sync, gdn_mma.cuh), keeping ~fp32 accuracy: the raw q, k rows are bf16, so their products go
// through bf16 MMA (Q K^T, K K^T: exact products, fp32 sums) or enter tf32 MMA exactly (K^T Delta, Q S0, T V, T K);
// the L2 norms and decays are applied afterwards as row / column factors (k^ = k / |k|, so K^ * e^{Gam_63 - Gam}
// becomes the factor f_i = e^{Gam_63 - Gam_i} / |k_i| on the rows of Delta). fp32 operands (W, S, Delta, P, T) are
// split into tf32 hi + lo and multiplied as hi hi + hi lo + lo hi (or hi + lo against an exact side).
//
// (I + L)^-1 is formed explicitly (T, unit lower triangular, fp32 on CUDA cores) in three short parallel steps
// instead of a 64-step forward substitution: the four 16x16 diagonal blocks by substitution (16 steps), then the
// off-diagonal blocks by distance d = i - j = 1, 2, 3: T_ij = -T_ii (sum_{k=j}^{i-1} L_ik T_kj). Then
// U = (T diag(beta)) V and W = (T diag(beta e^Gam / |k|)) K_raw on tensor cores (A split, B exact).
//
// The prompt's first chunk has S0 = 0, so Delta = U there (the walk skips W S0 and does not write S0; the out
// kernel skips Q S0), and the state after the prompt's last chunk is never needed (the walk skips that update):
// a one-chunk prompt needs no walk at all.
//
// Four launches per cs1_gdn_prefill:
//   1. gdn_index_kernel (1 warp): sanitised prompt bounds and the chunk offset of each prompt (a prefix sum of
//      ceil(len/64)), so chunks restart at every prompt start. cu_seqlens lives on the device, so the host only
//      knows the bound NC = ceil(T/64) + n_seqs on the number of chunks; blocks past the real count exit.
//   2. gdn_prep_kernel (chunk, head, 64-column half): Gam, 1/|k|, L (bf16 MMA), T = (I + L)^-1 (both halves form
//      it), then U and W for the half's 64 columns (tf32 MMA).
//   3. gdn_walk_kernel (prompt, head, 16-column value slab; 83 KB smem, 2 blocks per SM, also fits sm_86 / sm_89):
//      walks the prompt's chunks in order with the state slab in registers (MMA accumulators), writing each later
//      chunk's entry state S0 and overwriting its U with Delta. Single W and K buffers, staggered: W of the next
//      chunk loads (cp.async) during this chunk's state update, K of the next chunk during its W S0 product.
//   4. gdn_out_kernel (chunk, head, 32-column quarter): O from S0 and Delta; zeros into padding rows.
// (The previous version, 32-column walk slabs with double buffers, whole-chunk out blocks and the serial forward
// substitution, with the same workspace layout, is in git history before this change.)
//
// Workspace (cs1_gdn_workspace_bytes), every part 256-byte aligned from the workspace start, NC chunk slots,
// slot index b = chunk * H + head:
//   seq_start int32 [n_seqs + 1]   sanitised cu_seqlens (clamped to [0, T], non-decreasing)
//   chunk_off int32 [n_seqs + 1]   first chunk of each prompt; chunk_off[n_seqs] = number of chunks
//   U/Delta   f32 [NC * H, 64, 128] U from prep, overwritten in place by Delta in the walk (first chunks: U = Delta)
//   W         f32 [NC * H, 64, 128]
//   S0        f32 [NC * H, 128, 128] state entering each chunk (key index first, as transformers/FLA); not written
//                                    or read for the first chunk of a prompt (it is zero)
//   gam       f32 [NC * H, 64]       cumulative log decay inside the chunk
//   rk        f32 [NC * H, 64]       1 / sqrt(|k_i|^2 + 1e-6)
// = 131,584 B per chunk slot and value head (4.02 MiB per 64 tokens for H = 32), plus the two index arrays.
#include <atomic>

#include "common.cuh"
#include "gdn_mma.cuh"

namespace {

constexpr int kC = 64;         // chunk rows
constexpr int kD = 128;        // d_k = d_v
constexpr int kLdF = 132;      // fp32 smem row stride of 64x128 tiles (16-byte rows; MMA fragments conflict-free)
constexpr int kLdL = 68;       // fp32 smem row stride of 64x64 tiles (A fragments conflict-free)
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
        u = at;         at = align256(at + slots * kC * kD * 4);
        w = at;         at = align256(at + slots * kC * kD * 4);
        s0 = at;        at = align256(at + slots * kD * kD * 4);
        gam = at;       at = align256(at + slots * kC * 4);
        rk = at;        at = align256(at + slots * kC * 4);
        total = at;
    }
};

struct ChunkInfo {
    int row0;    // first row of the chunk
    int len;     // valid rows, 1..64
    bool first;  // the first chunk of its prompt (S0 = 0, Delta = U)
};

// The chunk with global index c, or len = 0 when c is past the last chunk.
__device__ ChunkInfo find_chunk(const int32_t *seq_start, const int32_t *chunk_off, int n_seqs, int c) {
    ChunkInfo info{0, 0, false};
    if (c >= chunk_off[n_seqs]) return info;
    int lo = 0, hi = n_seqs;  // last s with chunk_off[s] <= c; it has chunk_off[s + 1] > c
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (chunk_off[mid] <= c) lo = mid; else hi = mid;
    }
    info.row0 = seq_start[lo] + (c - chunk_off[lo]) * kC;
    info.len = min(kC, seq_start[lo + 1] - info.row0);
    info.first = c == chunk_off[lo];
    return info;
}

// ---- prefill: 1. index --------------------------------------------------------------------------------------------

// One warp: seq_start[s] = running max of clamp(cu[s], 0, T); chunk_off = prefix sum of ceil(len / 64).
__global__ void gdn_index_kernel(const int32_t *__restrict__ cu, int n_seqs, int T, int32_t *__restrict__ seq_start,
                                 int32_t *__restrict__ chunk_off) {
    const int lane = threadIdx.x;
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


// ---- prefill: 2, 3, 4 on tensor cores ---------------------------------------------------------------------------
//
// Precision plan: the raw q and k rows are bf16, so they enter the tensor cores exactly (bf16 MMA, or bf16 bits as
// tf32) and the L2 norms are applied as row / column factors afterwards. fp32 operands (W, S, Delta, P, T) are split
// into tf32 hi + lo: products that feed the state use the 3-term (or 2-term, when the other side is exact) split,
// which keeps ~fp32 accuracy; the output products use the same splits (cheap next to the loads).

constexpr int kLdKb = 136;     // bf16 row stride of 64x128 bf16 tiles (272 B rows)
constexpr int kPrepCols = 64;  // U / W columns per prep block
constexpr int kLdVh = 72;      // bf16 row stride of the prep block's 64 v columns (144 B rows)
constexpr int kWalkCols = 16;  // value columns per walk block
constexpr int kLdWs = 24;      // fp32 row stride of 16-column tiles (B fragments: banks 24t + g + 8j, distinct)
constexpr int kOutCols = 32;   // value columns per out block
constexpr int kLdOs = 40;      // fp32 row stride of 32-column tiles (B fragments: banks 8t + g, distinct)
constexpr int kBlk = 16;       // diagonal block size of the (I + L)^-1 construction

// 64 rows x kCols bf16 (row stride ld) -> smem tile of stride lds, rows >= len zero-filled.
template <int kCols>
__device__ __forceinline__ void cp_rows_bf16(bf16 *dst, int lds, const bf16 *src, int64_t ld, int len) {
    constexpr int kPer = kCols / 8;
    for (int e = threadIdx.x; e < kC * kPer; e += kThreads) {
        const int i = e / kPer, c8 = (e % kPer) * 8;
        const bool ok = i < len;
        cp_async16(dst + i * lds + c8, ok ? src + int64_t(i) * ld + c8 : src, ok);
    }
}

// kRows rows x kCols fp32 (row stride 128) -> smem tile of stride lds.
template <int kRows, int kCols>
__device__ __forceinline__ void cp_tile_f32(float *dst, int lds, const float *src) {
    constexpr int kPer = kCols / 4;
    for (int e = threadIdx.x; e < kRows * kPer; e += kThreads) {
        const int i = e / kPer, c4 = (e % kPer) * 4;
        cp_async16(dst + i * lds + c4, src + i * kD + c4, true);
    }
}

// gam and rk of a chunk slot (64 floats each) -> smem, by threads 0..31.
__device__ __forceinline__ void cp_gam_rk(float *gam, float *rk, const unsigned char *ws, const Layout &lay,
                                          size_t slot) {
    const int tid = threadIdx.x;
    if (tid < kC / 4)
        cp_async16(gam + 4 * tid, reinterpret_cast<const float *>(ws + lay.gam) + slot * kC + 4 * tid, true);
    else if (tid < kC / 2)
        cp_async16(rk + 4 * (tid - kC / 4),
                   reinterpret_cast<const float *>(ws + lay.rk) + slot * kC + 4 * (tid - kC / 4), true);
}

// 1 / sqrt(|x_i|^2 + eps) * num for the 64 bf16 rows of a kLdKb tile, one warp per row -> out[i].
__device__ __forceinline__ void row_inv_norms(const bf16 *x, float num, float *out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = warp; i < kC; i += kThreads / 32) {
        const uint2 raw = *reinterpret_cast<const uint2 *>(x + i * kLdKb + 4 * lane);
        const float x0 = __uint_as_float(raw.x << 16), x1 = __uint_as_float(raw.x & 0xffff0000u);
        const float x2 = __uint_as_float(raw.y << 16), x3 = __uint_as_float(raw.y & 0xffff0000u);
        const float ss = warp_sum(x0 * x0 + x1 * x1 + x2 * x2 + x3 * x3);
        if (lane == 0) out[i] = num / sqrtf(ss + kNormEps);
    }
}

// acc[j] += A B for the warp's 16 rows m0.. and 8-column tiles n0 + 8j (j < kTiles), k = 0..127, with A the raw
// bf16 rows of a (64 x 128, stride kLdKb) and B^T the raw bf16 rows of b (bf16 MMA: exact products, fp32 sums).
// Tiles entirely above the diagonal (column > every row) are skipped when kLower: they stay zero.
template <int kTiles, bool kLower>
__device__ __forceinline__ void mma_rows_bf16(float (*acc)[4], const bf16 *a, const bf16 *b, int m0, int n0) {
    const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
#pragma unroll 2
    for (int k0 = 0; k0 < kD; k0 += 16) {
        uint32_t af[4];
        af[0] = *reinterpret_cast<const uint32_t *>(a + (m0 + gq) * kLdKb + k0 + 2 * t);
        af[1] = *reinterpret_cast<const uint32_t *>(a + (m0 + gq + 8) * kLdKb + k0 + 2 * t);
        af[2] = *reinterpret_cast<const uint32_t *>(a + (m0 + gq) * kLdKb + k0 + 8 + 2 * t);
        af[3] = *reinterpret_cast<const uint32_t *>(a + (m0 + gq + 8) * kLdKb + k0 + 8 + 2 * t);
#pragma unroll
        for (int j = 0; j < kTiles; ++j) {
            if (kLower && n0 + 8 * j > m0 + 15) continue;  // warp-uniform
            const bf16 *brow = b + (n0 + 8 * j + gq) * kLdKb + k0 + 2 * t;
            const uint32_t bf[2] = {*reinterpret_cast<const uint32_t *>(brow),
                                    *reinterpret_cast<const uint32_t *>(brow + 8)};
            mma_bf16(acc[j], af, bf);
        }
    }
}

// Block (chunk, head, half): Gam, 1/|k|, L (bf16 MMA on the raw k rows, norms as factors), T = (I + L)^-1, then
// U[:, cols] = (T diag(beta)) V[:, cols] and W[:, cols] = (T diag(cw)) K_raw[:, cols], cw = beta e^Gam / |k|,
// cols = 64 half ... 64 half + 63. Both halves form L and T (cheap); half 0 writes gam and rk.
struct PrepSmem {
    bf16 K[kC * kLdKb];   // raw k rows (zeros past the chunk end)
    bf16 V[kC * kLdVh];   // raw v rows, this block's 64 columns
    float L[kC * kLdL];   // strictly lower L
    float T[kC * kLdL];   // (I + L)^-1 (block upper triangle unset, never read)
    float X[3 * kBlk * kBlk];  // sum_k L_ik T_kj of one distance step
    float gam[kC];
    float beta[kC];
    float cw[kC];  // beta e^Gam / |k|
    float rk[kC];  // 1 / |k|
};
constexpr size_t kPrepSmem = sizeof(PrepSmem);
static_assert(sizeof(PrepSmem) % 16 == 0, "PrepSmem keeps 16-byte alignment");
static_assert(3 * (kPrepSmem + 1024) <= 228 * 1024, "three prep blocks per SM on sm_90");
static_assert(kThreads == kBlk * kBlk, "one thread per element of a 16x16 block");

// Off-diagonal blocks of T at distance d: T_ij = -T_ii (sum_{k=j}^{i-1} L_ik T_kj), i = j + d, j = 0 .. 3 - d.
// Thread (r, col) = (tid / 16, tid % 16) forms element (r, col) of each block.
template <int d>
__device__ __forceinline__ void inverse_step(PrepSmem &sm) {
    const int r = threadIdx.x / kBlk, col = threadIdx.x % kBlk;
#pragma unroll
    for (int j = 0; j + d < 4; ++j) {
        const int i = j + d;
        const float *lrow = sm.L + (kBlk * i + r) * kLdL;
        float s0 = 0.0f, s1 = 0.0f;  // two partial sums halve the dependent FMA chain
#pragma unroll
        for (int k = kBlk * j; k < kBlk * i; k += 2) {
            s0 = fmaf(lrow[k], sm.T[k * kLdL + kBlk * j + col], s0);
            s1 = fmaf(lrow[k + 1], sm.T[(k + 1) * kLdL + kBlk * j + col], s1);
        }
        sm.X[(kBlk * j + r) * kBlk + col] = s0 + s1;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j + d < 4; ++j) {
        const int i = j + d;
        const float *trow = sm.T + (kBlk * i + r) * kLdL + kBlk * i;  // row r of T_ii (zeros past the diagonal)
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int m = 0; m < kBlk; m += 2) {
            s0 = fmaf(trow[m], sm.X[(kBlk * j + m) * kBlk + col], s0);
            s1 = fmaf(trow[m + 1], sm.X[(kBlk * j + m + 1) * kBlk + col], s1);
        }
        sm.T[(kBlk * i + r) * kLdL + kBlk * j + col] = -(s0 + s1);
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 3) gdn_prep_kernel(const bf16 *__restrict__ qkv, int64_t ld,
                                                               const float *__restrict__ g,
                                                               const float *__restrict__ beta, int n_seqs, int H,
                                                               int HK, unsigned char *__restrict__ ws, Layout lay) {
    const int c = blockIdx.x, h = blockIdx.y, half = blockIdx.z, tid = threadIdx.x, lane = tid & 31,
              warp = tid >> 5;
    const int gq = lane >> 2, t = lane & 3;
    const ChunkInfo ck = find_chunk(reinterpret_cast<const int32_t *>(ws + lay.seq_start),
                                     reinterpret_cast<const int32_t *>(ws + lay.chunk_off), n_seqs, c);
    if (ck.len == 0) return;
    const int hk = h / (H / HK);
    const size_t slot = size_t(c) * H + h;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    PrepSmem &sm = *reinterpret_cast<PrepSmem *>(smem_raw);
    const bf16 *rows = qkv + int64_t(ck.row0) * ld;
    cp_rows_bf16<kD>(sm.K, kLdKb, rows + int64_t(HK) * kD + int64_t(hk) * kD, ld, ck.len);
    cp_rows_bf16<kPrepCols>(sm.V, kLdVh, rows + int64_t(2 * HK) * kD + int64_t(h) * kD + kPrepCols * half, ld,
                            ck.len);
    cp_async_commit();
    if (tid < kC) {
        const bool ok = tid < ck.len;
        sm.gam[tid] = ok ? g[int64_t(ck.row0 + tid) * H + h] : 0.0f;
        sm.beta[tid] = ok ? beta[int64_t(ck.row0 + tid) * H + h] : 0.0f;
    }
    cp_async_wait_all();
    __syncthreads();
    row_inv_norms(sm.K, 1.0f, sm.rk);
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
        if (half == 0) {
            reinterpret_cast<float *>(ws + lay.gam)[slot * kC + tid] = sm.gam[tid];
            reinterpret_cast<float *>(ws + lay.rk)[slot * kC + tid] = sm.rk[tid];
        }
        sm.cw[tid] = sm.beta[tid] * expf(sm.gam[tid]) * sm.rk[tid];
    }
    {  // L = strictly lower (beta_i (k_i . k_j) / (|k_i| |k_j|) exp(Gam_i - Gam_j)); warp: rows 16 (w % 4)..,
       // columns 32 (w / 4)..
        const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
        float acc[4][4] = {};
        mma_rows_bf16<4, true>(acc, sm.K, sm.K, m0, n0);
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
    if (tid < kC) {  // diagonal blocks: column col of (I + L_bb)^-1 by substitution on e_col (rows above it: 0)
        const int b = tid / kBlk, col = tid % kBlk;
        const float *lb = sm.L + kBlk * b * kLdL + kBlk * b;
        float x[kBlk];
#pragma unroll
        for (int i = 0; i < kBlk; ++i) {
            float s = i == col ? 1.0f : 0.0f;
#pragma unroll
            for (int k = 0; k < i; ++k) s = fmaf(-lb[i * kLdL + k], x[k], s);
            x[i] = s;
        }
        float *tb = sm.T + kBlk * b * kLdL + kBlk * b + col;
#pragma unroll
        for (int i = 0; i < kBlk; ++i) tb[i * kLdL] = x[i];
    }
    __syncthreads();
    inverse_step<1>(sm);
    inverse_step<2>(sm);
    inverse_step<3>(sm);

    // U = (T diag(beta)) V, W = (T diag(cw)) K_raw over this half's columns; warp: rows 16 (w % 4)..,
    // columns 32 (w / 4)..; T_ik = 0 for k > i, so k stops at the warp's last row (2-term: B is exact).
    const int m0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
    float au[4][4] = {}, aw[4][4] = {};
    const uint16_t *vb = reinterpret_cast<const uint16_t *>(sm.V);
    const uint16_t *kb = reinterpret_cast<const uint16_t *>(sm.K) + kPrepCols * half;
#pragma unroll 2
    for (int k0 = 0; k0 < m0 + 16; k0 += 8) {
        const float *ta = sm.T + (m0 + gq) * kLdL + k0 + t, *tb = ta + 8 * kLdL;
        const float b0 = sm.beta[k0 + t], b1 = sm.beta[k0 + t + 4], c0 = sm.cw[k0 + t], c1 = sm.cw[k0 + t + 4];
        uint32_t uh[4], ul[4], wh[4], wl[4];
        tf32_split(ta[0] * b0, uh[0], ul[0]);
        tf32_split(tb[0] * b0, uh[1], ul[1]);
        tf32_split(ta[4] * b1, uh[2], ul[2]);
        tf32_split(tb[4] * b1, uh[3], ul[3]);
        tf32_split(ta[0] * c0, wh[0], wl[0]);
        tf32_split(tb[0] * c0, wh[1], wl[1]);
        tf32_split(ta[4] * c1, wh[2], wl[2]);
        tf32_split(tb[4] * c1, wh[3], wl[3]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int n = n0 + 8 * j + gq;
            const uint32_t bv[2] = {bf16_bits_as_tf32(vb[(k0 + t) * kLdVh + n]),
                                    bf16_bits_as_tf32(vb[(k0 + t + 4) * kLdVh + n])};
            const uint32_t bk[2] = {bf16_bits_as_tf32(kb[(k0 + t) * kLdKb + n]),
                                    bf16_bits_as_tf32(kb[(k0 + t + 4) * kLdKb + n])};
            mma_tf32(au[j], ul, bv);
            mma_tf32(au[j], uh, bv);
            mma_tf32(aw[j], wl, bk);
            mma_tf32(aw[j], wh, bk);
        }
    }
    float *u = reinterpret_cast<float *>(ws + lay.u) + slot * kC * kD + kPrepCols * half + n0 + 2 * t;
    float *w = reinterpret_cast<float *>(ws + lay.w) + slot * kC * kD + kPrepCols * half + n0 + 2 * t;
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = m0 + gq + 8 * hh;
            *reinterpret_cast<float2 *>(u + i * kD + 8 * j) = make_float2(au[j][2 * hh], au[j][2 * hh + 1]);
            *reinterpret_cast<float2 *>(w + i * kD + 8 * j) = make_float2(aw[j][2 * hh], aw[j][2 * hh + 1]);
        }
}

// Walk block operands. One W and one K buffer (staggered loads, see gdn_walk_kernel); U, Gam, 1/|k| by chunk parity.
struct WalkSmem {
    float W[kC * kLdF];         // W rows of the chunk
    bf16 K[kC * kLdKb];         // raw k rows of the chunk (zeros past its end)
    float U[2][kC * kLdWs];     // U[:, v0 .. v0 + 15]
    float gam[2][kC];
    float rk[2][kC];
    float S[kD * kLdWs];        // state slab entering the chunk (B operand of W S)
    float Df[kC * kLdWs];       // diag(f) Delta (B operand of the update)
};
constexpr size_t kWalkSmem = sizeof(WalkSmem);
static_assert(sizeof(WalkSmem) % 16 == 0, "WalkSmem keeps 16-byte alignment");
static_assert(kWalkSmem <= 99 * 1024, "fits the 99 KiB opt-in of sm_86 / sm_89");
static_assert(2 * (kWalkSmem + 1024) <= 228 * 1024, "two walk blocks per SM on sm_90");

// U (this slab's columns), Gam and 1/|k| of a chunk slot -> parity buffer b; W too when with_w (no commit).
__device__ __forceinline__ void walk_issue_u(WalkSmem &sm, int b, const unsigned char *ws, const Layout &lay,
                                             size_t slot, int v0, bool with_w) {
    if (with_w) cp_tile_f32<kC, kD>(sm.W, kLdF, reinterpret_cast<const float *>(ws + lay.w) + slot * kC * kD);
    cp_tile_f32<kC, kWalkCols>(sm.U[b], kLdWs, reinterpret_cast<const float *>(ws + lay.u) + slot * kC * kD + v0);
    cp_gam_rk(sm.gam[b], sm.rk[b], ws, lay, slot);
}

// Block (prompt, head, 16-column slab), 8 warps. The state slab S[128][16] lives in registers as MMA accumulators:
// warp w holds rows 16w.. (st[j] = C fragment of columns 8j..8j+7). Chunk l = 0 .. n-1 of the prompt:
//   l > 0:     S0_l -> smem and workspace; Delta = U - W S0_l (64x16, K = 128; warp: rows 16 (w % 4)..,
//              columns 8 (w / 4)..; 3-term tf32) -> workspace (in place of U)          (l = 0: Delta = U, S0 = 0)
//   l < n - 1: S = e^{Gam_63} S + K_raw^T (diag(f) Delta), f_i = e^{Gam_63 - Gam_i} / |k_i|  (K = 64; 2-term)
// cp.async groups (oldest first): prologue {K_0, U_0}, {W_1, U_1}; then per chunk l >= 1: {W_{l+1}, U_{l+1}} issued
// once Delta_l has read W, and {K_{l+1}} once the update of l has read K (l + 1 < n - 1).
__global__ void __launch_bounds__(kThreads, 2) gdn_walk_kernel(const bf16 *__restrict__ qkv, int64_t ld, int H,
                                                               int HK, unsigned char *__restrict__ ws, Layout lay) {
    const int s = blockIdx.x, h = blockIdx.y, v0 = blockIdx.z * kWalkCols;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int32_t *seq_start = reinterpret_cast<const int32_t *>(ws + lay.seq_start);
    const int32_t *chunk_off = reinterpret_cast<const int32_t *>(ws + lay.chunk_off);
    const int c_begin = chunk_off[s], n = chunk_off[s + 1] - c_begin, row_begin = seq_start[s],
              row_end = seq_start[s + 1];
    if (n < 2) return;  // one chunk: Delta = U already, and the out kernel knows S0 = 0
    const int hk = h / (H / HK);
    const bf16 *kcol = qkv + int64_t(HK) * kD + int64_t(hk) * kD;
    const size_t slot0 = size_t(c_begin) * H + h;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    WalkSmem &sm = *reinterpret_cast<WalkSmem *>(smem_raw);
    walk_issue_u(sm, 0, ws, lay, slot0, v0, false);
    cp_rows_bf16<kD>(sm.K, kLdKb, kcol + int64_t(row_begin) * ld, ld, min(kC, row_end - row_begin));
    cp_async_commit();
    walk_issue_u(sm, 1, ws, lay, slot0 + H, v0, true);
    cp_async_commit();

    float st[2][4] = {};
    for (int l = 0; l < n; ++l) {
        const size_t slot = slot0 + size_t(l) * H;
        const int b = l & 1;
        const bool last = l == n - 1;
        if (l == 0) {  // Delta_0 = U_0: Df = diag(f) U_0
            cp_async_wait_group<1>();  // {K_0, U_0} landed ({W_1, U_1} may still be in flight)
            __syncthreads();
            const float gam_last = sm.gam[0][kC - 1];
            for (int e = tid; e < kC * kWalkCols; e += kThreads) {
                const int i = e / kWalkCols, col = e % kWalkCols;
                sm.Df[i * kLdWs + col] = sm.U[0][i * kLdWs + col] * (sm.rk[0][i] * expf(gam_last - sm.gam[0][i]));
            }
            __syncthreads();
        } else {
            {  // S0 of this chunk: to smem (B operand below) and to the workspace (out kernel)
                float *s0 = reinterpret_cast<float *>(ws + lay.s0) + slot * kD * kD + v0;
                const int r = 16 * warp + g;
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const int col = 8 * j + 2 * t;
                    const float2 lo = make_float2(st[j][0], st[j][1]), hi = make_float2(st[j][2], st[j][3]);
                    *reinterpret_cast<float2 *>(sm.S + r * kLdWs + col) = lo;
                    *reinterpret_cast<float2 *>(sm.S + (r + 8) * kLdWs + col) = hi;
                    *reinterpret_cast<float2 *>(s0 + r * kD + col) = lo;
                    *reinterpret_cast<float2 *>(s0 + (r + 8) * kD + col) = hi;
                }
            }
            __syncthreads();  // sS complete (W_l landed and was made visible at the end of chunk l - 1)
            {  // Delta = U - W S0 (even / odd k-steps in separate accumulators: shorter MMA chains)
                const int m0 = 16 * (warp & 3), j = warp >> 2;
                float big[2][4] = {}, small[2][4] = {};
#pragma unroll 2
                for (int k0 = 0; k0 < kD; k0 += 16) {
#pragma unroll
                    for (int p = 0; p < 2; ++p) {
                        const int kk = k0 + 8 * p;
                        uint32_t ah[4], al[4], bh[2], bl[2];
                        tf32_split(sm.W[(m0 + g) * kLdF + kk + t], ah[0], al[0]);
                        tf32_split(sm.W[(m0 + g + 8) * kLdF + kk + t], ah[1], al[1]);
                        tf32_split(sm.W[(m0 + g) * kLdF + kk + t + 4], ah[2], al[2]);
                        tf32_split(sm.W[(m0 + g + 8) * kLdF + kk + t + 4], ah[3], al[3]);
                        tf32_split(sm.S[(kk + t) * kLdWs + 8 * j + g], bh[0], bl[0]);
                        tf32_split(sm.S[(kk + t + 4) * kLdWs + 8 * j + g], bh[1], bl[1]);
                        mma_tf32(small[p], ah, bl);
                        mma_tf32(small[p], al, bh);
                        mma_tf32(big[p], ah, bh);
                    }
                }
                const float gam_last = sm.gam[b][kC - 1];
                float *udelta = reinterpret_cast<float *>(ws + lay.u) + slot * kC * kD + v0;
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int i = m0 + g + 8 * hh, col = 8 * j + 2 * t;
                    const float2 u = *reinterpret_cast<const float2 *>(sm.U[b] + i * kLdWs + col);
                    const float d0 = u.x - ((big[0][2 * hh] + big[1][2 * hh]) + (small[0][2 * hh] + small[1][2 * hh]));
                    const float d1 =
                        u.y - ((big[0][2 * hh + 1] + big[1][2 * hh + 1]) + (small[0][2 * hh + 1] + small[1][2 * hh + 1]));
                    *reinterpret_cast<float2 *>(udelta + i * kD + col) = make_float2(d0, d1);
                    if (!last) {
                        const float f = sm.rk[b][i] * expf(gam_last - sm.gam[b][i]);
                        *reinterpret_cast<float2 *>(sm.Df + i * kLdWs + col) = make_float2(d0 * f, d1 * f);
                    }
                }
            }
            if (last) break;           // the state after the prompt's last chunk is not needed
            cp_async_wait_group<0>();  // {K_l}
            __syncthreads();           // K_l and Df visible; every read of W done
            walk_issue_u(sm, b ^ 1, ws, lay, slot + H, v0, true);
            cp_async_commit();
        }
        {  // S = e^{Gam_63} S + K_raw^T diag(f) Delta
            const uint16_t *kb = reinterpret_cast<const uint16_t *>(sm.K);
            const int m0 = 16 * warp;
            float big[2][4] = {}, small[2][4] = {};
#pragma unroll 2
            for (int i0 = 0; i0 < kC; i0 += 8) {
                uint32_t a[4];
                a[0] = bf16_bits_as_tf32(kb[(i0 + t) * kLdKb + m0 + g]);
                a[1] = bf16_bits_as_tf32(kb[(i0 + t) * kLdKb + m0 + g + 8]);
                a[2] = bf16_bits_as_tf32(kb[(i0 + t + 4) * kLdKb + m0 + g]);
                a[3] = bf16_bits_as_tf32(kb[(i0 + t + 4) * kLdKb + m0 + g + 8]);
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    uint32_t bh[2], bl[2];
                    tf32_split(sm.Df[(i0 + t) * kLdWs + 8 * j + g], bh[0], bl[0]);
                    tf32_split(sm.Df[(i0 + t + 4) * kLdWs + 8 * j + g], bh[1], bl[1]);
                    mma_tf32(small[j], a, bl);
                    mma_tf32(big[j], a, bh);
                }
            }
            const float e_last = expf(sm.gam[b][kC - 1]);
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) st[j][e] = fmaf(e_last, st[j][e], big[j][e] + small[j][e]);
        }
        cp_async_wait_group<0>();  // {W_{l+1}, U_{l+1}}
        __syncthreads();           // they are visible; every read of K and Df done
        if (l + 2 < n) {           // chunk l + 1 updates the state: its k rows
            const int row1 = row_begin + (l + 1) * kC;
            cp_rows_bf16<kD>(sm.K, kLdKb, kcol + int64_t(row1) * ld, ld, min(kC, row_end - row1));
            cp_async_commit();
        }
    }
}

// Block (chunk, head, 32-column quarter z), 8 warps:
//   P = diag(qs) (Q_raw K_raw^T) diag(rk) .* D      bf16 MMA (exact products); warp: rows 16 (w % 4).., cols 32 (w / 4)..
//   O = diag(qs e^Gam) Q_raw S0 + P Delta            tf32; warp: rows 16 (w % 4).., columns 16 (w / 4)..
// over the value columns 32 z .. 32 z + 31; S0 = 0 (skipped) for the first chunk of a prompt. qs_i = scale / |q_i|.
// Also writes zeros into the padding rows of the flat 64-row window (this block's columns).
struct OutSmem {
    bf16 Q[kC * kLdKb];    // raw q rows
    float KP[kC * kLdL];   // raw k rows (bf16, stride kLdKb) until P is formed, then P (fp32, stride kLdL)
    float S0[kD * kLdOs];  // S0[:, 32 z ..]
    float Dl[kC * kLdOs];  // Delta[:, 32 z ..]
    float qs[kC];          // scale / |q_i|
    float gam[kC];
    float rk[kC];
};
constexpr size_t kOutSmem = sizeof(OutSmem);
static_assert(sizeof(OutSmem) % 16 == 0, "OutSmem keeps 16-byte alignment");
static_assert(kC * kLdL * sizeof(float) >= kC * kLdKb * sizeof(bf16), "KP holds the k rows");
static_assert(3 * (kOutSmem + 1024) <= 228 * 1024, "three out blocks per SM on sm_90");

__global__ void __launch_bounds__(kThreads, 3) gdn_out_kernel(const bf16 *__restrict__ qkv, int64_t ld, int n_seqs,
                                                              int T, int H, int HK, float scale,
                                                              unsigned char *__restrict__ ws, Layout lay,
                                                              bf16 *__restrict__ o) {
    const int c = blockIdx.x, h = blockIdx.y, nz = kOutCols * blockIdx.z, tid = threadIdx.x, lane = tid & 31,
              warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int32_t *seq_start = reinterpret_cast<const int32_t *>(ws + lay.seq_start);
    {  // padding rows of the flat 64-row window c (rows outside every prompt) get zeros
        const int first = seq_start[0], end = seq_start[n_seqs];
        for (int e = tid; e < kC * (kOutCols / 4); e += kThreads) {
            const int64_t row = int64_t(c) * kC + e / (kOutCols / 4);
            if (row < T && (row < first || row >= end))
                *reinterpret_cast<uint2 *>(o + (row * H + h) * kD + nz + (e % (kOutCols / 4)) * 4) =
                    make_uint2(0u, 0u);
        }
    }
    const ChunkInfo ck = find_chunk(seq_start, reinterpret_cast<const int32_t *>(ws + lay.chunk_off), n_seqs, c);
    if (ck.len == 0) return;
    const int hk = h / (H / HK);
    const size_t slot = size_t(c) * H + h;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    OutSmem &sm = *reinterpret_cast<OutSmem *>(smem_raw);
    bf16 *sK = reinterpret_cast<bf16 *>(sm.KP);
    const bf16 *rows = qkv + int64_t(ck.row0) * ld;
    cp_rows_bf16<kD>(sm.Q, kLdKb, rows + int64_t(hk) * kD, ld, ck.len);
    cp_rows_bf16<kD>(sK, kLdKb, rows + int64_t(HK) * kD + int64_t(hk) * kD, ld, ck.len);
    cp_tile_f32<kC, kOutCols>(sm.Dl, kLdOs, reinterpret_cast<const float *>(ws + lay.u) + slot * kC * kD + nz);
    if (!ck.first)
        cp_tile_f32<kD, kOutCols>(sm.S0, kLdOs, reinterpret_cast<const float *>(ws + lay.s0) + slot * kD * kD + nz);
    cp_gam_rk(sm.gam, sm.rk, ws, lay, slot);
    cp_async_commit();
    cp_async_wait_all();
    __syncthreads();
    row_inv_norms(sm.Q, scale, sm.qs);
    const int m0 = 16 * (warp & 3), np = 32 * (warp >> 2), n0 = 16 * (warp >> 2);
    float pacc[4][4] = {};
    mma_rows_bf16<4, true>(pacc, sm.Q, sK, m0, np);
    float acc[2][4] = {};
    if (!ck.first) {  // Q_raw S0 (2-term: q is exact)
        const uint16_t *qb = reinterpret_cast<const uint16_t *>(sm.Q);
#pragma unroll 4
        for (int k0 = 0; k0 < kD; k0 += 8) {
            uint32_t a[4];
            a[0] = bf16_bits_as_tf32(qb[(m0 + g) * kLdKb + k0 + t]);
            a[1] = bf16_bits_as_tf32(qb[(m0 + g + 8) * kLdKb + k0 + t]);
            a[2] = bf16_bits_as_tf32(qb[(m0 + g) * kLdKb + k0 + t + 4]);
            a[3] = bf16_bits_as_tf32(qb[(m0 + g + 8) * kLdKb + k0 + t + 4]);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                uint32_t bh[2], bl[2];
                tf32_split(sm.S0[(k0 + t) * kLdOs + n0 + 8 * j + g], bh[0], bl[0]);
                tf32_split(sm.S0[(k0 + t + 4) * kLdOs + n0 + 8 * j + g], bh[1], bl[1]);
                mma_tf32(acc[j], a, bl);
                mma_tf32(acc[j], a, bh);
            }
        }
    }
    __syncthreads();  // every read of the k rows done (P overwrites them); qs visible
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = m0 + g + 8 * (e >> 1), jj = np + 8 * j + 2 * t + (e & 1);
            sm.KP[i * kLdL + jj] = jj <= i ? pacc[j][e] * sm.qs[i] * sm.rk[jj] * expf(sm.gam[i] - sm.gam[jj]) : 0.0f;
        }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const float f = sm.qs[m0 + g + 8 * hh] * expf(sm.gam[m0 + g + 8 * hh]);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            acc[j][2 * hh] *= f;
            acc[j][2 * hh + 1] *= f;
        }
    }
    __syncthreads();  // P complete
#pragma unroll 2
    for (int k0 = 0; k0 < m0 + 16; k0 += 8) {  // + P Delta (3-term); P_ik = 0 for k > i
        uint32_t ah[4], al[4];
        tf32_split(sm.KP[(m0 + g) * kLdL + k0 + t], ah[0], al[0]);
        tf32_split(sm.KP[(m0 + g + 8) * kLdL + k0 + t], ah[1], al[1]);
        tf32_split(sm.KP[(m0 + g) * kLdL + k0 + t + 4], ah[2], al[2]);
        tf32_split(sm.KP[(m0 + g + 8) * kLdL + k0 + t + 4], ah[3], al[3]);
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            uint32_t bh[2], bl[2];
            tf32_split(sm.Dl[(k0 + t) * kLdOs + n0 + 8 * j + g], bh[0], bl[0]);
            tf32_split(sm.Dl[(k0 + t + 4) * kLdOs + n0 + 8 * j + g], bh[1], bl[1]);
            mma_tf32(acc[j], al, bh);
            mma_tf32(acc[j], ah, bl);
            mma_tf32(acc[j], ah, bh);
        }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        const int i = m0 + g + 8 * hh;
        if (i >= ck.len) continue;
        bf16 *orow = o + (int64_t(ck.row0 + i) * H + h) * kD + nz + n0 + 2 * t;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const uint32_t packed = uint32_t(__bfloat16_as_ushort(f2bf(acc[j][2 * hh]))) |
                                    (uint32_t(__bfloat16_as_ushort(f2bf(acc[j][2 * hh + 1]))) << 16);
            *reinterpret_cast<uint32_t *>(orow + 8 * j) = packed;
        }
    }
}


// Opt in to > 48 KiB dynamic shared memory once per device (idempotent, so a race only repeats the call).
int configure_device() {
    static std::atomic<bool> done[64];
    int dev = 0;
    CS1_CUDA(cudaGetDevice(&dev));
    const bool cached = dev >= 0 && dev < 64;
    if (cached && done[dev].load(std::memory_order_acquire)) return 0;
    CS1_CUDA(cudaFuncSetAttribute(gdn_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPrepSmem)));
    CS1_CUDA(cudaFuncSetAttribute(gdn_walk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWalkSmem)));
    CS1_CUDA(cudaFuncSetAttribute(gdn_out_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kOutSmem)));
    if (cached) done[dev].store(true, std::memory_order_release);
    return 0;
}

}  // namespace

extern "C" int cs1_gdn_workspace_bytes(int64_t T, int64_t n_seqs, int64_t H, size_t *bytes) {
    CS1_REQUIRE_PTR(bytes);
    CS1_REQUIRE_SHAPE(T >= 0 && T <= INT32_MAX && n_seqs >= 0 && n_seqs <= (1 << 20) && H > 0 && H <= 65535);
    *bytes = T == 0 ? 0 : Layout(T, n_seqs, H).total;
    return 0;
}

extern "C" int cs1_gdn_prefill(const void *qkv, int64_t ld, const float *g, const float *beta,
                               const int32_t *cu_seqlens, int64_t n_seqs, void *o, void *workspace,
                               size_t workspace_bytes, int64_t T, int64_t H, int64_t HK, float scale, void *stream) {
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
    const Layout lay(T, n_seqs, H);
    CS1_REQUIRE(workspace_bytes >= lay.total, CS1_ERR_WORKSPACE);
    const int64_t nc = (T + kC - 1) / kC + n_seqs;
    CS1_REQUIRE_SHAPE(nc <= INT32_MAX);
    const int st = configure_device();
    if (st != 0) return st;

    cudaStream_t s = cs1_stream(stream);
    auto *ws = static_cast<unsigned char *>(workspace);
    const auto *x = static_cast<const bf16 *>(qkv);
    gdn_index_kernel<<<1, 32, 0, s>>>(cu_seqlens, int(n_seqs), int(T), reinterpret_cast<int32_t *>(ws + lay.seq_start),
                                      reinterpret_cast<int32_t *>(ws + lay.chunk_off));
    CS1_CUDA(cudaGetLastError());
    const dim3 prep_grid{unsigned(nc), unsigned(H), unsigned(kD / kPrepCols)};
    const dim3 walk_grid{unsigned(n_seqs), unsigned(H), unsigned(kD / kWalkCols)};
    const dim3 out_grid{unsigned(nc), unsigned(H), unsigned(kD / kOutCols)};
    gdn_prep_kernel<<<prep_grid, kThreads, kPrepSmem, s>>>(x, ld, g, beta, int(n_seqs), int(H), int(HK), ws, lay);
    CS1_CUDA(cudaGetLastError());  // a failed launch must not leave later kernels reading unset workspace
    if (n_seqs > 0) gdn_walk_kernel<<<walk_grid, kThreads, kWalkSmem, s>>>(x, ld, int(H), int(HK), ws, lay);
    CS1_CUDA(cudaGetLastError());
    gdn_out_kernel<<<out_grid, kThreads, kOutSmem, s>>>(x, ld, int(n_seqs), int(T), int(H), int(HK), scale, ws, lay,
                                                        static_cast<bf16 *>(o));
    CS1_LAUNCHED();
}
