// attention_rows.cu: gated attention for one query row per prompt (cs1_attention_gated_rows).
//
// The read-out uses each prompt's last row only, so the last layer's attention needs one query row per prompt, not
// the whole square: a decode-shaped problem that reads every key and value once. Split-KV in two launches:
// - partial: one block = one (64-key chunk of a prompt, kv head), all Hq / Hk query heads of that kv head. Warp w
//   takes keys w*8 .. w*8+7 of the chunk; lane l holds dims l*8 .. l*8+7 (16-byte loads, a key row is one coalesced
//   512-byte read). All 16 loads (8 K rows, 8 V rows) are issued before the first use. fp32 scores (scale and
//   log2 e folded into q), fp32 softmax and P.V; the 8 warps merge through shared memory and the block writes, per
//   query head, its max m, sum l and unnormalised o [256] in fp32.
// - merge: one block = one (prompt, query head), thread d = dim d; rescales the chunks to one max, divides, rounds
//   attn to bf16 and multiplies by the gate as the full kernel does: bf16(bf16(attn) * bf16(sigmoid(gate))).
// Chunks are aligned to the prompt start, so a prompt's bytes do not depend on what is packed beside it. Chunk
// slots: prompt s owns slots floor(cu[s] / 64) + s onward (at least ceil(len_s / 64) of them before prompt s + 1's
// first), so floor(T / 64) + n_seqs slots cover every prompt.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "common.cuh"
#include "gate.cuh"

namespace {

constexpr int kDh = 256;
constexpr int kChunk = 64;                    // keys per partial block
constexpr int kWarps = 8;
constexpr int kKeysPerWarp = kChunk / kWarps;  // 8
constexpr int kThreads = kWarps * 32;          // 256 = kDh: the merge's thread d owns dim d
constexpr float kLog2e = 1.4426950408889634f;

struct RowsParams {
    const bf16 *q;      // [*, Hq, 256]
    const bf16 *gate;   // [*, Hq * 256]
    const int32_t *q_rows;
    const bf16 *k;      // [T, Hk, 256]
    const bf16 *v;      // rows of ldv
    const int32_t *cu_seqlens;
    const int32_t *rows;  // causal only
    float *part_o;        // [slots, Hq, 256]
    float *part_ml;       // [slots, Hq, 2]
    bf16 *out;            // [n, Hq * 256]
    int64_t ldv;
    int n_seqs;
    int Hq;
    int Hk;
    int causal;
    int gate_is_sigmoid;
    float scale_log2;
};

__device__ __forceinline__ int first_slot(const int32_t *cu, int s) { return cu[s] / kChunk + s; }

// one past the last key prompt s attends to
__device__ __forceinline__ int key_end(const RowsParams &p, int s) {
    const int begin = p.cu_seqlens[s], end = p.cu_seqlens[s + 1];
    if (!p.causal || end <= begin) return end;
    const int r = min(max(p.rows[s], begin), end - 1);
    return r + 1;
}

__device__ __forceinline__ void load8(const bf16 *src, float (&dst)[8]) {
    const Pack8 v = *reinterpret_cast<const Pack8 *>(src);
#pragma unroll
    for (int e = 0; e < 8; ++e) dst[e] = bf2f(v.v[e]);
}

__device__ __forceinline__ float to_f(const Pack8 &v, int e) { return bf2f(v.v[e]); }

template <int G>
__global__ void __launch_bounds__(kThreads) attention_rows_partial_kernel(const RowsParams p) {
    const int slot = blockIdx.x, kh = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    // the prompt owning this slot: the last s with first_slot(s) <= slot
    int lo = 0, hi = p.n_seqs - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (first_slot(p.cu_seqlens, mid) <= slot) lo = mid;
        else hi = mid - 1;
    }
    const int s = lo;
    const int chunk = slot - first_slot(p.cu_seqlens, s);
    const int key0 = p.cu_seqlens[s] + chunk * kChunk, end = key_end(p, s);
    if (chunk < 0 || key0 >= end) return;  // a slot past this prompt's keys (uniform over the block)

    const int stride_k = p.Hk * kDh;
    // this warp's keys: issue every K and V load before the first use
    // (kept as packed bf16: 64 registers for the 16 rows instead of 128 as floats)
    Pack8 kr[kKeysPerWarp], vr[kKeysPerWarp];
#pragma unroll
    for (int i = 0; i < kKeysPerWarp; ++i) {
        const int key = min(key0 + warp * kKeysPerWarp + i, end - 1);  // past the end: a valid row, masked below
        kr[i] = *reinterpret_cast<const Pack8 *>(p.k + (int64_t)key * stride_k + kh * kDh + lane * 8);
        vr[i] = *reinterpret_cast<const Pack8 *>(p.v + (int64_t)key * p.ldv + kh * kDh + lane * 8);
    }
    const int64_t qrow = p.q_rows[s];
    float qf[G][8];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        load8(p.q + (qrow * p.Hq + kh * G + g) * kDh + lane * 8, qf[g]);
#pragma unroll
        for (int e = 0; e < 8; ++e) qf[g][e] *= p.scale_log2;
    }

    __shared__ float s_o[kWarps][G][kDh];
    __shared__ float s_m[kWarps][G], s_l[kWarps][G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float sc[kKeysPerWarp];
        float m = -INFINITY;
#pragma unroll
        for (int i = 0; i < kKeysPerWarp; ++i) {
            float d = 0.0f;
#pragma unroll
            for (int e = 0; e < 8; ++e) d = fmaf(qf[g][e], to_f(kr[i], e), d);
            d = warp_sum(d);
            sc[i] = key0 + warp * kKeysPerWarp + i < end ? d : -INFINITY;
            m = fmaxf(m, sc[i]);
        }
        float l = 0.0f, acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < kKeysPerWarp; ++i) {
            const float pr = sc[i] == -INFINITY ? 0.0f : exp2f(sc[i] - m);  // a warp past the keys: m = -inf
            l += pr;
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[e] = fmaf(pr, to_f(vr[i], e), acc[e]);
        }
#pragma unroll
        for (int e = 0; e < 8; ++e) s_o[warp][g][lane * 8 + e] = acc[e];
        if (lane == 0) {
            s_m[warp][g] = m;
            s_l[warp][g] = l;
        }
    }
    __syncthreads();
    // thread d merges the 8 warps for dim d of each head; every warp's m is read in the same order
    const int d = threadIdx.x;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        float m = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) m = fmaxf(m, s_m[w][g]);
        float o = 0.0f, l = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float f = s_m[w][g] == -INFINITY ? 0.0f : exp2f(s_m[w][g] - m);
            o = fmaf(f, s_o[w][g][d], o);
            l = fmaf(f, s_l[w][g], l);
        }
        const int64_t at = (int64_t)slot * p.Hq + kh * G + g;
        p.part_o[at * kDh + d] = o;
        if (d == 0) {
            p.part_ml[at * 2] = m;
            p.part_ml[at * 2 + 1] = l;
        }
    }
}

__global__ void __launch_bounds__(kThreads) attention_rows_merge_kernel(const RowsParams p) {
    const int s = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    const int begin = p.cu_seqlens[s], end = key_end(p, s);
    const int chunks = end > begin ? (end - begin + kChunk - 1) / kChunk : 0;
    const int64_t slot0 = first_slot(p.cu_seqlens, s);
    bf16 *out = p.out + ((int64_t)s * p.Hq + h) * kDh + d;
    if (chunks == 0) {
        *out = f2bf(0.0f);
        return;
    }
    float m = -INFINITY;
    for (int c = 0; c < chunks; ++c) m = fmaxf(m, p.part_ml[((slot0 + c) * p.Hq + h) * 2]);
    float o = 0.0f, l = 0.0f;
    for (int c = 0; c < chunks; ++c) {
        const int64_t at = (slot0 + c) * p.Hq + h;
        const float f = exp2f(p.part_ml[at * 2] - m);
        o = fmaf(f, p.part_o[at * kDh + d], o);
        l = fmaf(f, p.part_ml[at * 2 + 1], l);
    }
    const float attn = round_bf(o / l);
    const float graw = bf2f(p.gate[(int64_t)p.q_rows[s] * p.Hq * kDh + h * kDh + d]);
    const float g = p.gate_is_sigmoid ? graw : cs1_gate_sigmoid(graw);
    *out = f2bf(attn * g);
}

int64_t slot_count(int64_t T, int64_t n_seqs) { return T / kChunk + n_seqs; }

}  // namespace

extern "C" {

int cs1_attention_rows_workspace_bytes(int64_t T, int64_t n_seqs, int64_t Hq, int64_t Dh, size_t *bytes) {
    CS1_REQUIRE_PTR(bytes);
    CS1_REQUIRE_SHAPE(T >= 0 && n_seqs >= 0 && Hq >= 0 && Dh >= 0 && T <= INT_MAX / 2 && n_seqs <= INT_MAX / 2 &&
                      Hq <= 65536 && Dh <= 65536);
    *bytes = (size_t)slot_count(T, n_seqs) * (size_t)Hq * (size_t)(Dh + 2) * sizeof(float);
    return CS1_OK;
}

int cs1_attention_gated_rows(const void *q, const void *gate, const int32_t *q_rows, int32_t gate_is_sigmoid,
                             const void *k, const void *v, int64_t ldv, const int32_t *cu_seqlens,
                             const int32_t *rows, int64_t n_seqs, void *out, void *workspace,
                             size_t workspace_bytes, int64_t T, int64_t Hq, int64_t Hk, int64_t Dh, float scale,
                             int32_t causal, void *stream) {
    CS1_REQUIRE_SHAPE(T >= 0 && n_seqs >= 0 && (causal == 0 || causal == 1) &&
                      (gate_is_sigmoid == 0 || gate_is_sigmoid == 1));
    if (T == 0 || n_seqs == 0) return CS1_OK;
    CS1_REQUIRE(Dh == kDh, CS1_ERR_UNSUPPORTED);
    CS1_REQUIRE_SHAPE(Hq > 0 && Hk > 0 && Hq % Hk == 0 && Hq <= 65535 && ldv >= Hk * kDh && std::isfinite(scale));
    CS1_REQUIRE_SHAPE(T <= INT_MAX / 2 && n_seqs <= 65535);
    const int64_t group = Hq / Hk;
    CS1_REQUIRE(group == 1 || group == 2 || group == 4, CS1_ERR_UNSUPPORTED);
    CS1_REQUIRE_PTR(q);
    CS1_REQUIRE_PTR(gate);
    CS1_REQUIRE_PTR(q_rows);
    CS1_REQUIRE_PTR(k);
    CS1_REQUIRE_PTR(v);
    CS1_REQUIRE_PTR(cu_seqlens);
    CS1_REQUIRE_PTR(out);
    CS1_REQUIRE_PTR(workspace);
    if (causal) CS1_REQUIRE_PTR(rows);
    CS1_REQUIRE(cs1_aligned(q, 16) && cs1_aligned(gate, 2) && cs1_aligned(k, 16) && cs1_aligned(v, 16) &&
                    cs1_aligned(out, 2) && cs1_aligned(workspace, 16) && cs1_aligned(q_rows, 4) &&
                    cs1_aligned(cu_seqlens, 4) && (rows == nullptr || cs1_aligned(rows, 4)) && ldv % 8 == 0,
                CS1_ERR_ALIGNMENT);
    size_t need = 0;
    const int status = cs1_attention_rows_workspace_bytes(T, n_seqs, Hq, Dh, &need);
    if (status != CS1_OK) return status;
    CS1_REQUIRE(workspace_bytes >= need, CS1_ERR_WORKSPACE);

    const int64_t slots = slot_count(T, n_seqs);
    RowsParams p;
    p.q = static_cast<const bf16 *>(q);
    p.gate = static_cast<const bf16 *>(gate);
    p.q_rows = q_rows;
    p.k = static_cast<const bf16 *>(k);
    p.v = static_cast<const bf16 *>(v);
    p.cu_seqlens = cu_seqlens;
    p.rows = rows;
    p.part_o = static_cast<float *>(workspace);
    p.part_ml = p.part_o + slots * Hq * kDh;
    p.out = static_cast<bf16 *>(out);
    p.ldv = ldv;
    p.n_seqs = (int)n_seqs;
    p.Hq = (int)Hq;
    p.Hk = (int)Hk;
    p.causal = causal;
    p.gate_is_sigmoid = gate_is_sigmoid;
    p.scale_log2 = scale * kLog2e;
    cudaStream_t s = cs1_stream(stream);
    const dim3 partial_grid(cs1_grid(slots), (unsigned)Hk);
    if (group == 4)
        attention_rows_partial_kernel<4><<<partial_grid, kThreads, 0, s>>>(p);
    else if (group == 2)
        attention_rows_partial_kernel<2><<<partial_grid, kThreads, 0, s>>>(p);
    else
        attention_rows_partial_kernel<1><<<partial_grid, kThreads, 0, s>>>(p);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return cs1_cuda_status(e);
    attention_rows_merge_kernel<<<dim3((unsigned)n_seqs, (unsigned)Hq), kThreads, 0, s>>>(p);
    CS1_LAUNCHED();
}

}  // extern "C"
