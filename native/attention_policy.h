// attention_policy.h: tile choice and the per-device capability cache of the gated attention kernels.
//
// Plain C++17 (no CUDA headers): attention.cu instantiates it with the CUDA runtime, and
// tests/abi/test_attention_policy.py compiles it with g++ against a stub device query. The device API is a
// template parameter with three static functions, each returning a cs1 status (0 = success):
//   static int current_device(int *device);
//   static int query_caps(int device, cs1_attention_policy::DeviceCaps *caps);
//   static int set_max_dynamic_smem(int kernel_id, int bytes);   // on the current device
#ifndef CS1_ATTENTION_POLICY_H
#define CS1_ATTENTION_POLICY_H

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cs1.h"

namespace cs1_attention_policy {

constexpr int kHeadDim = 256;
constexpr int kKeyTileRows = 32;
constexpr int kSmemRowElems = kHeadDim + 8;  // 16 bytes of padding per row: conflict-free ldmatrix
constexpr int kNarrowTileRows = 64;          // 4 warps, 128 threads
constexpr int kWideTileRows = 128;           // 8 warps, 256 threads

// Dynamic shared memory of one block: the query tile plus one key tile and one value tile (bf16).
constexpr int smem_bytes(int tile_rows) { return (tile_rows + 2 * kKeyTileRows) * kSmemRowElems * 2; }
static_assert(smem_bytes(kNarrowTileRows) == 67584, "narrow tile smem");
static_assert(smem_bytes(kWideTileRows) == 101376, "wide tile smem (99 KiB: the sm_86/sm_89 opt-in maximum)");

// The wide tile pays off once the window (query rows) reaches this many rows.
constexpr int64_t kWideTileMinRows = 640;
// sm_90: keep the 64-row tile until the H200 measurement shows the wide tile faster at every covered length.
constexpr bool kWideTileOnSm90 = false;

struct DeviceCaps {
    int cc_major = 0;
    int cc_minor = 0;
    int smem_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
};

inline bool supported(const DeviceCaps &c) {
    return c.cc_major >= 8 && c.smem_optin >= smem_bytes(kNarrowTileRows);
}

inline bool arch_prefers_wide(const DeviceCaps &c) {
    if (c.cc_major == 8 && c.cc_minor == 9) return true;   // sm_89 (L20, L40S, RTX 40xx)
    if (c.cc_major == 12) return true;                      // sm_120 family (RTX 50xx, RTX PRO Blackwell)
    if (c.cc_major == 9) return kWideTileOnSm90;            // sm_90 (H100, H200)
    return false;
}

// Bidirectional attention on compute capability 9.0 runs on the warpgroup-MMA kernel (sm_90a code, which runs on
// 9.0 only) when the library holds it and the block's shared memory fits: 1.13-1.65x the 64-row tile at 128-8192
// rows on the H200 (benchmarks/LEVERS.md, lever 21). Whether it runs does not depend on the window, and its two
// forms (one or two heads per block, kWgmmaPairMinRows) give the same bytes, so a prompt gets the same bits whatever
// length it is padded to. Causal attention, and every other device, keep the tiles below.
inline bool use_wgmma(const DeviceCaps &c, bool causal, bool built, int smem_bytes) {
    return built && !causal && c.cc_major == 9 && c.cc_minor == 0 && c.smem_optin >= smem_bytes;
}
// From this many rows (the window T) the wgmma kernel takes two heads per block (same bytes as one head): 768 since
// lever 98 (LEVERS; 1024 before the pair's gate loads went out together, lever 97).
constexpr int64_t kWgmmaPairMinRows = 768;

// The automatic policy: 128 or 64 query rows per block for a window of `rows` query rows.
inline int choose_tile_rows(const DeviceCaps &c, int64_t rows) {
    if (arch_prefers_wide(c) && rows >= kWideTileMinRows && c.smem_optin >= smem_bytes(kWideTileRows))
        return kWideTileRows;
    return kNarrowTileRows;
}

// Capabilities and "dynamic smem attribute already set" bits per device, filled on first use of each device;
// every call looks up the device current at that moment, so switching devices re-evaluates the policy.
template <class Api>
class DeviceCache {
  public:
    static constexpr int kMaxDevices = 64;
    static constexpr int kMaxKernels = 32;

    // capabilities of the current device (queried once per device); *device receives its id
    int current(int *device, DeviceCaps *caps) {
        int dev = -1;
        int status = Api::current_device(&dev);
        if (status != 0) return status;
        *device = dev;
        if (dev < 0 || dev >= kMaxDevices) return Api::query_caps(dev, caps);  // uncached, still correct
        Entry &e = entries_[dev];
        if (!e.ready.load(std::memory_order_acquire)) {
            std::lock_guard<std::mutex> lock(mu_);
            if (!e.ready.load(std::memory_order_relaxed)) {
                DeviceCaps c;
                status = Api::query_caps(dev, &c);
                if (status != 0) return status;
                e.caps = c;
                e.ready.store(true, std::memory_order_release);
            }
        }
        *caps = e.caps;
        return 0;
    }

    // sets kernel `kernel_id`'s dynamic shared memory limit on `device` (the current device) once
    int ensure_smem(int device, int kernel_id, int bytes) {
        if (device < 0 || device >= kMaxDevices || kernel_id < 0 || kernel_id >= kMaxKernels)
            return Api::set_max_dynamic_smem(kernel_id, bytes);
        Entry &e = entries_[device];
        const uint32_t bit = 1u << kernel_id;
        if (e.smem_set.load(std::memory_order_acquire) & bit) return 0;
        std::lock_guard<std::mutex> lock(mu_);
        if (e.smem_set.load(std::memory_order_relaxed) & bit) return 0;
        int status = Api::set_max_dynamic_smem(kernel_id, bytes);
        if (status == 0) e.smem_set.fetch_or(bit, std::memory_order_release);
        return status;
    }

  private:
    struct Entry {
        std::atomic<bool> ready{false};
        DeviceCaps caps;
        std::atomic<uint32_t> smem_set{0};
    };
    Entry entries_[kMaxDevices];
    std::mutex mu_;
};

// cs1_attention_tile_rows over a cache: the automatic choice for the current device.
template <class Api>
int tile_rows_for_current_device(DeviceCache<Api> &cache, int64_t rows, int32_t *tile_rows) {
    if (tile_rows == nullptr) return CS1_ERR_NULL;
    if (rows < 0) return CS1_ERR_SHAPE;
    int device = -1;
    DeviceCaps caps;
    int status = cache.current(&device, &caps);
    if (status != 0) return status;
    if (!supported(caps)) return CS1_ERR_UNSUPPORTED;
    *tile_rows = choose_tile_rows(caps, rows);
    return 0;
}

}  // namespace cs1_attention_policy

#endif  // CS1_ATTENTION_POLICY_H
