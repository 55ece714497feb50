// silu_exact.cu: silu_n (native/common.cuh, the conv's branch-free SiLU) against silu_f on every fp32 input, bit for
// bit. Each of the 2^32 bit patterns x is checked twice: with three in-range partners, so that x takes the fast path
// whenever it can (x sits in slot x & 3), and inside the group of the four consecutive patterns it belongs to, so
// that groups leaving the range take the fall-back as a whole.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a -Inative -o /tmp/silu_exact benchmarks/silu_exact.cu && /tmp/silu_exact
//
// Prints the number of inputs that differ (and the first few); exits 1 when any does.
#include "../native/common.cuh"

#include <cstdio>

#include "probe_check.h"

namespace {

constexpr int kMaxReports = 8;

struct Report {
    unsigned long long differ;
    unsigned int count;
    unsigned int bits[kMaxReports], want[kMaxReports], got[kMaxReports];
};

__device__ void compare(const float *v, const float *got, Report *r) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const unsigned int want = __float_as_uint(silu_f(v[e])), have = __float_as_uint(got[e]);
        if (want != have) {
            atomicAdd(&r->differ, 1ull);
            const unsigned int k = atomicAdd(&r->count, 1u);
            if (k < kMaxReports) {
                r->bits[k] = __float_as_uint(v[e]);
                r->want[k] = want;
                r->got[k] = have;
            }
        }
    }
}

__global__ void check_kernel(Report *r) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long g = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; g < (1ull << 30);
         g += stride) {
        float group[4], out[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) group[e] = __uint_as_float((unsigned int)(g * 4 + e));
        silu_n<4>(group, out);  // the four consecutive patterns together
        compare(group, out, r);
#pragma unroll
        for (int e = 0; e < 4; ++e) {  // each pattern alone among in-range partners
            float v[4] = {0.75f, -1.5f, 3.0f, -0.3f};
            v[e] = group[e];
            silu_n<4>(v, out);
            compare(v, out, r);
        }
    }
}

}  // namespace

int main() {
    Report *r;
    CHECK(cudaMallocManaged(&r, sizeof(Report)));
    *r = Report{};
    check_kernel<<<132 * 16, 256>>>(r);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("silu_n<4> against silu_f on all 4294967296 fp32 inputs (alone among in-range values, and in groups "
                "of four consecutive patterns): %llu results differ\n", r->differ);
    for (unsigned int k = 0; k < r->count && k < (unsigned int)kMaxReports; ++k)
        std::printf("  x bits 0x%08x: silu_f 0x%08x, silu_n 0x%08x\n", r->bits[k], r->want[k], r->got[k]);
    const int rc = r->differ ? 1 : 0;
    CHECK(cudaFree(r));
    return rc;
}
