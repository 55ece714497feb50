// gdn_mma.cuh: warp-level tensor-core, cp.async and TMA copy helpers for gdn.cu (sm_80+ PTX; TMA sm_90).
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k8" / "mma.m16n8k16"), with g = lane / 4 and
// t = lane % 4:
//   tf32 m16n8k8:  A (16x8, row)  a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]
//                  B (8x8, col)   b0 = B[t][g], b1 = B[t+4][g]
//   bf16 m16n8k16: A (16x16, row) a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//                  B (16x8, col)  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]   (lower half = lower index)
//   C/D (16x8, fp32, both)        c0 = C[g][2t], c1 = C[g][2t+1], c2 = C[g+8][2t], c3 = C[g+8][2t+1]
// The CPU emulator of these kernels defines GDN_MMA_EMULATED and brings its own versions of these functions.
#pragma once

#include <stdint.h>
#ifndef GDN_MMA_EMULATED
#include "smem_async.cuh"
#endif

// a bf16 value as tf32 bits: exact (tf32 keeps 10 mantissa bits, bf16 has 7)
__device__ __forceinline__ uint32_t bf16_bits_as_tf32(uint16_t b) { return uint32_t(b) << 16; }

#ifndef GDN_MMA_EMULATED

// d += A B, tf32 operands, fp32 accumulate
__device__ __forceinline__ void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += A B, bf16 operands (two per register), fp32 accumulate
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// 16-byte global -> shared copy that bypasses registers; zero-fills the destination when !valid
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
// 16-byte shared load kept as one instruction (the compiler splits a float4 load whose lanes are used apart)
__device__ __forceinline__ float4 lds128(const float *p) {
    const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
    float4 v;
    asm("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}

// Four 8 x 8 b16 matrices from shared memory in one instruction (ldmatrix .x4): lane l names the 16-byte row l % 8 of
// matrix l / 8 (16-byte aligned), and gets in r[m] the 4-byte word t of row g of matrix m. Rows [m0 + 8 (m & 1)] at
// 16-byte column m / 2 of a bf16 or fp32 tile give the bf16 m16n8k16 or tf32 m16n8k8 A fragment (see above): one
// load where four 4-byte loads were, the same bits.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *row) {
    cs1_async::ldmatrix_x4(r, cs1_async::smem_u32(row));
}
// v, computed where it stands: the compiler may not sink its computation into a branch (an empty asm that "uses" it)
__device__ __forceinline__ float pinned(float v) {
    asm volatile("" : "+f"(v));
    return v;
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Copies by the TMA unit (sm_90): each a contiguous run of `bytes` (a multiple of 16, 16-byte aligned at both
// ends) counted as bytes on an mbarrier in shared memory, whose phases the copies' readers wait for by parity.
__device__ __forceinline__ void bar_init(uint64_t *bar) {
    cs1_async::mbar_init(cs1_async::smem_u32(bar), 1);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // before the async proxy uses it
#endif
}
__device__ __forceinline__ void bar_expect_bytes(uint64_t *bar, uint32_t bytes) {
    cs1_async::mbar_expect_tx(cs1_async::smem_u32(bar), bytes);
}
__device__ __forceinline__ void bar_wait(uint64_t *bar, uint32_t parity) {
    cs1_async::mbar_wait(cs1_async::smem_u32(bar), parity);
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    cs1_async::bulk_g2s(cs1_async::smem_u32(dst), src, bytes, cs1_async::smem_u32(bar));
}

#endif  // GDN_MMA_EMULATED

// x rounded to tf32 as cvt.rna.tf32.f32 rounds a finite value (nearest, ties away from zero: add half of the dropped
// 13 bits), in 2 instructions where cvt.rna compiles to 7 on sm_90 (lever 32's Nsight). Every fp32 operand of the
// GDN kernels' tf32 MMAs goes through it once (levers 69, 70). No mask: the tensor cores ignore the low 13 bits. The
// clamp keeps the canonical NaN 0x7fffffff a NaN (+ 0x1000 would wrap it to -0); Inf stays Inf, FLT_MAX rounds to
// Inf as cvt.rna does. A negative NaN with its low 12 bits set would read as +0; the GPU's arithmetic returns only
// 0x7fffffff.
__device__ __forceinline__ uint32_t tf32_rna_bits(float x) {
    return uint32_t(min(int(__float_as_uint(x)), 0x7fffefff) + 0x1000);
}
