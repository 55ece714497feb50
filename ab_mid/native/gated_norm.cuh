// gated_norm.cuh: the gated RMSNorm (Qwen3_5RMSNormGated) of one (token, head) row held by a group of kLanes lanes
// of one warp, 8 contiguous values per lane. Used by norm.cu's 16-byte kernel and by gdn.cu's out kernel when it
// normalises its own O tile (cs1_gdn_prefill_norm), so both give the same bytes.
// n = bf16(x * rsqrt(mean(x^2) + eps)); n' = w * n (bf16-rounded when the weight is bf16); out = bf16(n' * silu(z)).
#pragma once
#include "common.cuh"

// rsqrt(mean(x^2) + eps) of the row: each lane sums its 8 squares in order, then the group reduces by xor shuffles
// (every lane of the warp must call it; lane groups are aligned runs of kLanes lanes).
template <int kLanes>
__device__ __forceinline__ float gated_norm_inv(const float v[8], float eps) {
    float ss = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // within the group
    return rsqrtf(ss / (float)(kLanes * 8) + eps);
}

// The lane's 8 outputs from its 8 values, their z, weights and the row's inv.
__device__ __forceinline__ Pack8 gated_norm_pack8(const float v[8], const Pack8 &zp, const float wv[8], float inv,
                                                  int round_weighted) {
    float sz[8];  // the 8 SiLUs interleaved (silu_n: silu_f's bits, no branches)
    silu_pack8(zp, sz);
    Pack8 o;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        float n = wv[e] * round_bf(v[e] * inv);
        if (round_weighted) n = round_bf(n);
        o.v[e] = f2bf(n * sz[e]);
    }
    return o;
}

// The lane's 8 weights w[8 sub .. 8 sub + 7] (w 16-byte aligned).
__device__ __forceinline__ void gated_norm_weights(const float *w, int sub, float wv[8]) {
    const float4 *w4 = reinterpret_cast<const float4 *>(w + sub * 8);
    const float4 lo = w4[0], hi = w4[1];
    wv[0] = lo.x, wv[1] = lo.y, wv[2] = lo.z, wv[3] = lo.w, wv[4] = hi.x, wv[5] = hi.y, wv[6] = hi.z, wv[7] = hi.w;
}
