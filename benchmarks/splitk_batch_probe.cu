// splitk_batch_probe.cu: the N = 2560 projections (GDN out / o_proj K = 4096, down K = 9216) at prompt-sized M, as
// today's one bf16-output cuBLASLt GEMM against a split of K into s batches of one strided-batched GEMM with fp32
// partial outputs (whose sum the following add_rms_norm would read instead of the bf16 delta).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/splitk_batch_probe benchmarks/splitk_batch_probe.cu -lcublasLt && \
//     /tmp/splitk_batch_probe
//
// Why (LEVERS, lever 50): lever 49 measured these GEMMs at ~14 us per call at 160 rows even with all their weights
// in L2, against a 4.9 us byte floor (out / o): their time is the kernel's structure, not HBM. cuBLASLt's own split-K
// plans add the splits in a second pass (a reduction kernel or a serialised fix-up); a batched split hands the sum
// to a kernel that runs anyway.
// For each form, cuBLASLt's heuristic list (up to kAlgos) is timed: a CUDA graph of kCalls calls over weight copies
// that rotate through >= 1 GiB (so every call streams its weights from HBM), median of kReps replays. Printed: the
// first heuristic's time and the best, in microseconds per call.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_check.h"

constexpr int kAlgos = 32, kCalls = 20, kReps = 12;
constexpr size_t kWorkspace = 32 << 20;

struct Timing {
    float first = -1, best = 1e30f;
    int tried = 0, best_rank = -1;
};

// y^T [N, M] (column-major; = y [M, N] row-major) = W^T-op (W row-major [N, K] is column-major [K, N]) times x^T
// (x row-major [M, K] is column-major [K, M]); with s > 1, batch b covers K columns [b K / s, (b + 1) K / s) of
// both and writes its own fp32 [M, N] partial.
Timing time_form(cublasLtHandle_t lt, cudaStream_t stream, void *workspace, const __nv_bfloat16 *pool, int copies,
                 const __nv_bfloat16 *x, void *y, int M, int N, int K, int s) {
    const bool batched = s > 1;
    const int k = K / s;
    cublasLtMatmulDesc_t desc;
    CHECK_BLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    cublasLtMatrixLayout_t a, b, d;
    const cudaDataType_t out_type = batched ? CUDA_R_32F : CUDA_R_16BF;
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, N, K));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, M, K));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&d, out_type, N, M, N));
    if (batched) {
        const int32_t count = s;
        const int64_t step_ab = k, step_d = (int64_t)N * M;
        for (cublasLtMatrixLayout_t l : {a, b, d})
            CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &step_ab,
                                                  sizeof step_ab));
        CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &step_ab,
                                                  sizeof step_ab));
        CHECK_BLAS(cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &step_d,
                                                  sizeof step_d));
    }
    cublasLtMatmulPreference_t pref;
    CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = kWorkspace;
    CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t found[kAlgos];
    int n_found = 0;
    CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, d, d, pref, kAlgos, found, &n_found));
    Timing t;
    const float one = 1.0f, zero = 0.0f;
    const long long wcount = (long long)N * K;
    for (int r = 0; r < n_found; ++r) {
        cudaGraph_t graph;
        bool ok = true;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < kCalls && ok; ++i)
            ok = cublasLtMatmul(lt, desc, &one, pool + (i % copies) * wcount, a, x, b, &zero, y, d, y, d,
                                &found[r].algo, workspace, kWorkspace, stream) == CUBLAS_STATUS_SUCCESS;
        CHECK(cudaStreamEndCapture(stream, &graph));
        if (!ok) {
            CHECK(cudaGraphDestroy(graph));
            continue;
        }
        const float med = probe_graph_us(graph, stream, kCalls, kReps);
        if (t.tried == 0) t.first = med;
        if (med < t.best) t.best = med, t.best_rank = r;
        ++t.tried;
        CHECK(cudaGraphDestroy(graph));
    }
    CHECK_BLAS(cublasLtMatmulPreferenceDestroy(pref));
    CHECK_BLAS(cublasLtMatrixLayoutDestroy(a));
    CHECK_BLAS(cublasLtMatrixLayoutDestroy(b));
    CHECK_BLAS(cublasLtMatrixLayoutDestroy(d));
    CHECK_BLAS(cublasLtMatmulDescDestroy(desc));
    return t;
}

int main() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs; us per call, first heuristic / best of up to %d (its rank); graphs of %d calls, "
                "median of %d replays, weights rotating over >= 1 GiB\n",
                prop.name, prop.multiProcessorCount, kAlgos, kCalls, kReps);
    cublasLtHandle_t lt;
    CHECK_BLAS(cublasLtCreate(&lt));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void *workspace;
    CHECK(cudaMalloc(&workspace, kWorkspace));
    const int shapes[][2] = {{2560, 4096}, {2560, 9216}};
    const int rows[] = {128, 160};
    const int splits[] = {1, 2, 3, 4, 6, 8};
    for (const auto &nk : shapes) {
        const int N = nk[0], K = nk[1];
        const long long wbytes = 2ll * N * K;
        const int copies = (int)std::max<long long>(4, (1ll << 30) / wbytes + 1);
        __nv_bfloat16 *pool, *x;
        void *y;
        CHECK(cudaMalloc(&pool, wbytes * copies));
        CHECK(cudaMalloc(&x, 2ll * 256 * K));
        CHECK(cudaMalloc(&y, 4ll * 8 * 256 * N));
        probe_fill_bf16<<<1024, 256, 0, stream>>>(pool, wbytes / 2 * copies, 1u);
        probe_fill_bf16<<<64, 256, 0, stream>>>(x, 256ll * K, 2u);
        CHECK(cudaStreamSynchronize(stream));
        for (int M : rows) {
            for (int s : splits) {
                if (K % s || (K / s) % 8) continue;
                const Timing t = time_form(lt, stream, workspace, pool, copies, x, y, M, N, K, s);
                const double floor_us = wbytes / 4.3e6;
                std::printf("N %5d K %5d M %3d  %s s %d  first %7.2f  best %7.2f (rank %2d of %2d)  bytes' floor %.1f\n",
                            N, K, M, s == 1 ? "bf16 out, one GEMM    " : "fp32 partials, batched", s, t.first,
                            t.best, t.best_rank, t.tried, floor_us);
                std::fflush(stdout);
            }
        }
        CHECK(cudaFree(pool));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
    }
    CHECK(cudaFree(workspace));
    CHECK_BLAS(cublasLtDestroy(lt));
    return 0;
}
