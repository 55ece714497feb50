// CPU emulation of CUDA blocks for skinny_gemm.cu (adapted from ../../gdn-hybrid/emu/prefix.h): one std::thread per
// CUDA thread; blocks run one after another in a shuffled order (so different CTAs arrive last at a tile); shared
// memory poisoned before each block; cp.async copies land only at the wait that covers their group; mma and ldmatrix
// gather every lane's operands and apply the PTX ISA layouts; global and shared accesses are range-checked.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#define SKINNY_EMULATED 1
namespace emu {
thread_local uint3 tid, bid;
dim3 bdim, gdim;
std::barrier<> *block_bar;
std::barrier<> *warp_bar[32];
alignas(128) unsigned char smem[256 * 1024];
size_t smem_limit = 0;  // the launch's dynamic shared bytes
struct Range { const unsigned char *lo, *hi; };
std::vector<Range> global_ranges;  // buffers the kernel may touch
[[noreturn]] inline void die(const char *what, const void *p) {
    fprintf(stderr, "EMU FAULT: %s at %p (block %u thread %u)\n", what, p, bid.x, tid.x);
    std::_Exit(86);
}
inline void check_global(const void *p, size_t n) {
    const unsigned char *a = static_cast<const unsigned char *>(p);
    for (auto &r : global_ranges)
        if (a >= r.lo && a + n <= r.hi) return;
    die("global access out of range", p);
}
inline void check_shared(const void *p, size_t n) {
    const unsigned char *a = static_cast<const unsigned char *>(p);
    if (a < smem || a + n > smem + smem_limit) die("shared access out of range", p);
    if (reinterpret_cast<uintptr_t>(a) % (n < 16 ? n : 16)) die("misaligned shared access", p);
}
}  // namespace emu

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }

inline float bits_lo(uint32_t v) { float f; uint32_t u = v << 16; std::memcpy(&f, &u, 4); return f; }
inline float bits_hi(uint32_t v) { float f; uint32_t u = v & 0xffff0000u; std::memcpy(&f, &u, 4); return f; }

// ---- mma.sync m16n8k16 bf16: the warp's 16x16 A and 16x8 B rebuilt from every lane's fragments
namespace emu { uint32_t xa[1024][4], xb[1024][2]; uint64_t xaddr[1024]; }
inline void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    const int t = emu::tid.x, w = t / 32, lane = t & 31, g = lane >> 2, q = lane & 3;
    for (int r = 0; r < 4; ++r) emu::xa[t][r] = a[r];
    for (int r = 0; r < 2; ++r) emu::xb[t][r] = b[r];
    emu::warp_bar[w]->arrive_and_wait();
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int gg = l >> 2, tt = l & 3;
        const uint32_t *fa = emu::xa[w * 32 + l], *fb = emu::xb[w * 32 + l];
        A[gg][2 * tt] = bits_lo(fa[0]), A[gg][2 * tt + 1] = bits_hi(fa[0]);
        A[gg + 8][2 * tt] = bits_lo(fa[1]), A[gg + 8][2 * tt + 1] = bits_hi(fa[1]);
        A[gg][2 * tt + 8] = bits_lo(fa[2]), A[gg][2 * tt + 9] = bits_hi(fa[2]);
        A[gg + 8][2 * tt + 8] = bits_lo(fa[3]), A[gg + 8][2 * tt + 9] = bits_hi(fa[3]);
        B[2 * tt][gg] = bits_lo(fb[0]), B[2 * tt + 1][gg] = bits_hi(fb[0]);
        B[2 * tt + 8][gg] = bits_lo(fb[1]), B[2 * tt + 9][gg] = bits_hi(fb[1]);
    }
    emu::warp_bar[w]->arrive_and_wait();
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * q, 2 * q + 1, 2 * q, 2 * q + 1};
    for (int e = 0; e < 4; ++e) {
        double acc = 0;  // products are exact; the hardware's fp32 sum order is unspecified
        for (int k = 0; k < 16; ++k) acc += double(A[rows[e]][k]) * double(B[k][cols[e]]);
        d[e] = float(double(d[e]) + acc);
    }
}

// ---- ldmatrix.x4: lane l names row l % 8 of matrix l / 8; register i of lane l = 32 bits at column pair l % 4 of
// row l / 4 of matrix i
inline void ldmatrix_x4(uint32_t r[4], const void *row_addr) {
    const int t = emu::tid.x, w = t / 32, lane = t & 31;
    emu::check_shared(row_addr, 16);
    emu::xaddr[t] = reinterpret_cast<uint64_t>(row_addr);
    emu::warp_bar[w]->arrive_and_wait();
    for (int i = 0; i < 4; ++i) {
        const unsigned char *row = reinterpret_cast<const unsigned char *>(emu::xaddr[w * 32 + i * 8 + lane / 4]);
        std::memcpy(&r[i], row + (lane % 4) * 4, 4);
    }
    emu::warp_bar[w]->arrive_and_wait();
}

// ---- deferred cp.async
namespace emu {
struct Cp { void *dst; const void *src; bool valid; };
thread_local std::vector<std::vector<Cp>> groups;  // committed groups, oldest first
thread_local std::vector<Cp> open_group;
inline void land(const std::vector<Cp> &g) {
    for (auto &c : g) {
        if (c.valid) std::memcpy(c.dst, c.src, 16);
        else std::memset(c.dst, 0, 16);
    }
}
}  // namespace emu
inline void cp_async16(void *s, const void *gsrc, bool valid) {
    emu::check_shared(s, 16);
    if (valid) emu::check_global(gsrc, 16);
    if (reinterpret_cast<uintptr_t>(gsrc) % 16) emu::die("misaligned cp.async source", gsrc);
    emu::open_group.push_back({s, gsrc, valid});
}
inline uint64_t evict_first_policy() { return 0; }
inline void cp_async16_stream(void *s, const void *gsrc, uint64_t) { cp_async16(s, gsrc, true); }
inline void cp_async_commit() { emu::groups.push_back(std::move(emu::open_group)); emu::open_group.clear(); }
template <int kPending> inline void cp_async_wait_group() {
    while (int(emu::groups.size()) > kPending) {
        emu::land(emu::groups.front());
        emu::groups.erase(emu::groups.begin());
    }
}

// ---- global memory helpers (blocks run one at a time, so plain accesses are enough)
inline void st_cg4(float4 *p, float4 v) { emu::check_global(p, 16); *p = v; }
inline float4 ld_cg4(const float4 *p) { emu::check_global(p, 16); return *p; }
inline void fence_device() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline int counter_arrive(int *c) { emu::check_global(c, 4); return (*c)++; }
inline void counter_reset(int *c) { emu::check_global(c, 4); *c = 0; }
inline void st_bf16x2(__nv_bfloat16 *p, float a, float b) {
    emu::check_global(p, 4);
    if (reinterpret_cast<uintptr_t>(p) % 4) emu::die("misaligned y store", p);
    p[0] = __float2bfloat16_rn(a);
    p[1] = __float2bfloat16_rn(b);
}

template <class K, class... A>
void emu_launch(K kernel, dim3 grid, dim3 block, size_t smem_bytes, unsigned order_seed, A... args) {
    emu::bdim = block, emu::gdim = grid, emu::smem_limit = smem_bytes;
    const int n = block.x * block.y * block.z;
    std::vector<unsigned> order(grid.x);
    std::iota(order.begin(), order.end(), 0u);
    std::mt19937 rng(order_seed);
    std::shuffle(order.begin(), order.end(), rng);
    for (unsigned bx : order) {
        std::memset(emu::smem, 0xFF, sizeof(emu::smem));  // poison shared memory (NaN in bf16 and fp32)
        std::barrier<> bb(n);
        emu::block_bar = &bb;
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (int w = 0; w < (n + 31) / 32; ++w) {
            wb.emplace_back(new std::barrier<>(32));
            emu::warp_bar[w] = wb.back().get();
        }
        std::vector<std::thread> th;
        for (int t = 0; t < n; ++t)
            th.emplace_back([&, t] {
                emu::tid = make_uint3(t, 0, 0), emu::bid = make_uint3(bx, 0, 0);
                emu::groups.clear(), emu::open_group.clear();
                kernel(args...);
                if (!emu::open_group.empty()) emu::die("uncommitted cp.async at exit", nullptr);
                for (auto &g : emu::groups)  // trailing empty groups are fine; copies still in flight are not
                    if (!g.empty()) emu::die("cp.async group still pending at exit", nullptr);
            });
        for (auto &x : th) x.join();
    }
}
