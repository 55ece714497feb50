// gemm_stream.h: the weight-streaming GEMM of gemm_stream.cu (Hopper wgmma, prompt-sized M), as gemm.cu calls it.
// Internal to the library: the ABI entry points (cs1_gemm, cs1_gemm_stream) live in gemm.cu, which owns the
// workspace.
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

namespace stream_gemm {

constexpr int64_t kMaxRows = 256;     // M limit: four warpgroups of 64 rows hold every row of a block
constexpr int kMaxSplits = 16;
constexpr int kCounters = 4096;       // one arrival counter per column tile of a split-K call

// Device memory of the split-K fix-up: partial sums [splits][M][N] fp32 and the per-tile arrival counters (zero
// between calls: the last block of a tile resets its counter).
struct Workspace {
    float *partial = nullptr;
    size_t partial_bytes = 0;
    int32_t *counters = nullptr;
};

// Whether the library holds the kernels (sm_90a build) and the current device runs them (compute capability 9.0).
// Cached per device.
bool available();

// Whether block_n is one of the compiled column-tile widths / cluster one of the compiled cluster sizes.
bool block_n_supported(int block_n);
bool cluster_supported(int cluster);

// The launch. The caller (gemm.cu's cs1_gemm_stream) checked pointers, alignment and the M, N, K limits; this
// checks the configuration against the shape (splits, workspace, compiled forms): CS1_ERR_SHAPE when it does not fit.
int launch(const Workspace &ws, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M,
           int64_t N, int64_t K, int block_n, int splits, int cluster, cudaStream_t stream);

}  // namespace stream_gemm
