// CPU emulation of CUDA blocks for native/gdn.cu (benchmarks/gdn_emulator/check.py): one std::thread per CUDA
// thread, blocks one after another, shared memory poisoned before each block, mma.sync fragments gathered per warp
// and multiplied exactly (PTX ISA layouts; the sum in double, since the hardware's fp32 order is unspecified),
// cp.async copies landing only at the wait that covers their group.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
using std::max;
using std::min;
namespace emu {
thread_local uint3 tid, bid;
dim3 bdim, gdim;
std::barrier<> *block_bar;
std::barrier<> *warp_bar[32];
uint32_t xchg[1024];
}  // namespace emu
#undef __global__
#undef __device__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_bar[emu::tid.x / 32]->arrive_and_wait(); }  // whole warps only
template <class T> T emu_shfl(T v, int src_lane) {
    const int t = emu::tid.x, w = t / 32;
    uint32_t bits; std::memcpy(&bits, &v, 4);
    emu::xchg[t] = bits;
    emu::warp_bar[w]->arrive_and_wait();
    uint32_t got = emu::xchg[w * 32 + src_lane];
    emu::warp_bar[w]->arrive_and_wait();
    T out; std::memcpy(&out, &got, 4);
    return out;
}
template <class T> T __shfl_up_sync(unsigned, T v, int d) { int l = emu::tid.x & 31; return emu_shfl(v, l >= d ? l - d : l); }
template <class T> T __shfl_xor_sync(unsigned, T v, int d) { return emu_shfl(v, (emu::tid.x & 31) ^ d); }
template <class T> T __shfl_sync(unsigned, T v, int s) { return emu_shfl(v, s); }
namespace { alignas(16) float smem[65536]; }

#define GDN_MMA_EMULATED 1
inline uint32_t __float_as_uint(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
inline float __uint_as_float(uint32_t u) { float x; std::memcpy(&x, &u, 4); return x; }
// cvt.rna.tf32.f32: round to nearest, ties away from zero, on the low 13 bits (finite inputs); called by the
// tf32_split of trees before lever 32 (`--against` an older native/), today's split rounds by itself
inline float tf32_round(float x) { uint32_t u = __float_as_uint(x); u = (u + 0x1000u) & 0xffffe000u; return __uint_as_float(u); }
namespace emu { uint32_t xa[1024][4], xb[1024][2]; }
// Full-matrix emulation of one warp's mma from every lane's fragments, with the PTX ISA layouts.
template <bool BF16> void emu_mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    const int tid = emu::tid.x, w = tid / 32, lane = tid & 31, g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 4; ++r) emu::xa[tid][r] = a[r];
    for (int r = 0; r < 2; ++r) emu::xb[tid][r] = b[r];
    emu::warp_bar[w]->arrive_and_wait();
    const int K = BF16 ? 16 : 8;
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int gg = l >> 2, tt = l & 3;
        const uint32_t *fa = emu::xa[w * 32 + l], *fb = emu::xb[w * 32 + l];
        if (BF16) {
            auto lo = [](uint32_t v) { return __uint_as_float(v << 16); };
            auto hi = [](uint32_t v) { return __uint_as_float(v & 0xffff0000u); };
            A[gg][2 * tt] = lo(fa[0]); A[gg][2 * tt + 1] = hi(fa[0]);
            A[gg + 8][2 * tt] = lo(fa[1]); A[gg + 8][2 * tt + 1] = hi(fa[1]);
            A[gg][2 * tt + 8] = lo(fa[2]); A[gg][2 * tt + 9] = hi(fa[2]);
            A[gg + 8][2 * tt + 8] = lo(fa[3]); A[gg + 8][2 * tt + 9] = hi(fa[3]);
            B[2 * tt][gg] = lo(fb[0]); B[2 * tt + 1][gg] = hi(fb[0]);
            B[2 * tt + 8][gg] = lo(fb[1]); B[2 * tt + 9][gg] = hi(fb[1]);
        } else {  // the tensor cores read only the tf32 bits
            auto tf = [](uint32_t v) { return __uint_as_float(v & 0xffffe000u); };
            A[gg][tt] = tf(fa[0]); A[gg + 8][tt] = tf(fa[1]); A[gg][tt + 4] = tf(fa[2]); A[gg + 8][tt + 4] = tf(fa[3]);
            B[tt][gg] = tf(fb[0]); B[tt + 4][gg] = tf(fb[1]);
        }
    }
    emu::warp_bar[w]->arrive_and_wait();
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int e = 0; e < 4; ++e) {
        double acc = 0;  // products are exact; the hardware's fp32 sum order is unspecified
        for (int k = 0; k < K; ++k) acc += double(A[rows[e]][k]) * double(B[k][cols[e]]);
        d[e] = float(double(d[e]) + acc);
    }
}
// ldmatrix .x4: lane l names row l % 8 of matrix l / 8; r[m] = word (l % 4) of row (l / 4) of matrix m
namespace emu { const void *xrow[1024]; }
inline void ldsm_x4(uint32_t r[4], const void *row) {
    const int tid = emu::tid.x, w = tid / 32, lane = tid & 31;
    if (reinterpret_cast<uintptr_t>(row) % 16) { std::fprintf(stderr, "ldsm_x4: row not 16-byte aligned\n"); std::abort(); }
    emu::xrow[tid] = row;
    emu::warp_bar[w]->arrive_and_wait();
    for (int m = 0; m < 4; ++m)
        std::memcpy(&r[m], static_cast<const unsigned char *>(emu::xrow[w * 32 + 8 * m + lane / 4]) + 4 * (lane & 3), 4);
    emu::warp_bar[w]->arrive_and_wait();
}
inline float pinned(float v) { return v; }  // the device form only keeps the compiler from sinking v into a branch
inline void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) { emu_mma<false>(d, a, b); }
inline void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) { emu_mma<true>(d, a, b); }
// deferred cp.async: copies land only at the wait that covers their group (catches wrong group accounting)
namespace emu {
struct Cp { void *dst; const void *src; bool valid; };
thread_local std::vector<std::vector<Cp>> groups;  // committed groups, oldest first
thread_local std::vector<Cp> open_group;
inline void land(const std::vector<Cp> &g) { for (auto &c : g) { if (c.valid) std::memcpy(c.dst, c.src, 16); else std::memset(c.dst, 0, 16); } }
}
inline void cp_async16(void *s, const void *gsrc, bool valid) { emu::open_group.push_back({s, gsrc, valid}); }
inline float4 lds128(const float *p) { return *reinterpret_cast<const float4 *>(p); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }  // MUFU.RSQ's bits are the GPU's own
inline void cp_async_commit() { emu::groups.push_back(std::move(emu::open_group)); emu::open_group.clear(); }
inline void cp_async_wait_all() {
    for (auto &g : emu::groups) emu::land(g);
    emu::groups.clear();
}
template <int kPending> inline void cp_async_wait_group() {
    while (int(emu::groups.size()) > kPending) { emu::land(emu::groups.front()); emu::groups.erase(emu::groups.begin()); }
}
// TMA copies on an mbarrier (the walk's W, walk_prefetch): a copy lands only when a thread waits for the phase it
// completes, and that phase completes only when its arrive (expect_bytes) came and exactly the expected bytes were
// issued; a wait that could never complete, a second arrive in one phase, a misaligned copy or more bytes than
// expected abort the run.
#include <chrono>
#include <map>
#include <mutex>
namespace emu {
struct Bulk { void *dst; const void *src; uint32_t bytes; };
struct Mbar { uint32_t phase = 0; bool arrived = false; int64_t expect = 0, issued = 0; std::vector<Bulk> copies; };
std::mutex mbar_mu;
std::map<const void *, Mbar> mbars;
[[noreturn]] inline void mbar_fail(const char *what, const Mbar &m) {
    std::fprintf(stderr, "mbarrier: %s (phase %u, arrived %d, expected %lld bytes, issued %lld)\n", what, m.phase,
                 int(m.arrived), (long long)m.expect, (long long)m.issued);
    std::abort();
}
}  // namespace emu
inline void bar_init(uint64_t *bar) { std::lock_guard<std::mutex> l(emu::mbar_mu); emu::mbars[bar] = emu::Mbar{}; }
inline void bar_expect_bytes(uint64_t *bar, uint32_t bytes) {
    std::lock_guard<std::mutex> l(emu::mbar_mu);
    auto &m = emu::mbars.at(bar);
    if (m.arrived) emu::mbar_fail("a second arrive in one phase", m);
    m.arrived = true;
    m.expect += bytes;
}
inline void bulk_copy(void *dst, const void *src, uint32_t bytes, uint64_t *bar) {
    std::lock_guard<std::mutex> l(emu::mbar_mu);
    auto &m = emu::mbars.at(bar);
    if (bytes % 16 || reinterpret_cast<uintptr_t>(dst) % 16 || reinterpret_cast<uintptr_t>(src) % 16)
        emu::mbar_fail("a copy not in 16-byte units", m);
    m.copies.push_back({dst, src, bytes});
    m.issued += bytes;
}
inline void bar_wait(uint64_t *bar, uint32_t parity) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        {
            std::lock_guard<std::mutex> l(emu::mbar_mu);
            auto &m = emu::mbars.at(bar);
            if ((m.phase & 1u) != parity) return;  // the phase of that parity completed already
            if (m.arrived && m.issued > m.expect) emu::mbar_fail("more bytes issued than expected", m);
            if (m.arrived && m.issued == m.expect) {
                for (auto &c : m.copies) std::memcpy(c.dst, c.src, c.bytes);
                const uint32_t next = m.phase + 1;
                m = emu::Mbar{};
                m.phase = next;
                return;
            }
            if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20))
                emu::mbar_fail("a wait that never completes", m);
        }
        std::this_thread::yield();
    }
}


template <class K, class... A> void emu_launch(K kernel, dim3 grid, dim3 block, A... args) {
    emu::bdim = block; emu::gdim = grid;
    const int n = block.x * block.y * block.z;
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                std::memset(smem, 0xFF, sizeof(smem));  // poison shared memory
                std::barrier<> bb(n); emu::block_bar = &bb;
                std::vector<std::unique_ptr<std::barrier<>>> wb;
                for (int w = 0; w < (n + 31) / 32; ++w) { wb.emplace_back(new std::barrier<>(32)); emu::warp_bar[w] = wb.back().get(); }
                std::vector<std::thread> th;
                for (int t = 0; t < n; ++t)
                    th.emplace_back([&, t] { emu::tid = make_uint3(t, 0, 0); emu::bid = make_uint3(bx, by, bz); emu::groups.clear(); emu::open_group.clear(); kernel(args...); });
                for (auto &x : th) x.join();
            }
}
