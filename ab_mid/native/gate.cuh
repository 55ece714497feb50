// gate.cuh: the output gate of gated attention, bf16(sigmoid(g)) in fp32 arithmetic, in one place: attn_prep
// (elementwise.cu) may apply it when it copies the gate out (cs1_attn_prep_sigmoid_gate), the attention epilogue
// (attention.cu) otherwise, and both must give the same bits.
#pragma once

#include <cuda_bf16.h>

__device__ __forceinline__ float cs1_gate_sigmoid(float g) {
    return __bfloat162float(__float2bfloat16_rn(1.0f / (1.0f + expf(-g))));
}
