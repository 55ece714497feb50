// gemm.cu: y[M, N] = x[M, K] * w[N, K]^T with cuBLASLt (bf16 in/out, fp32 compute).
//
// Row-major to column-major: a row-major [R, C] matrix with row stride ld is the column-major [C, R] matrix with
// leading dimension ld. So y^T (N x M, ld ldy) = op_T(w as K x N, ld K) * (x^T as K x M, ld ldx).
// Plans (descriptors + the first heuristic algorithm) are cached per shape and pointer alignment; in-place split-K
// (which accumulates into the output and depends on its previous contents) is excluded.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "common.cuh"

namespace {

struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
};

// (M, N, K, ldx, ldy, alignment of x, w, y)
typedef std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int> PlanKey;

struct Gemm {
    cublasLtHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::mutex mutex;
    std::map<PlanKey, Plan> plans;
};

int blas(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? 0 : 1000 + (int)s; }

#define CS1_BLAS(call)                    \
    do {                                  \
        int cs1_b_ = blas(call);          \
        if (cs1_b_ != 0) return cs1_b_;   \
    } while (0)

void destroy_plan(Plan &p) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p = Plan();
}

// largest power of two (at most 256) that divides the address
int alignment_of(const void *p) {
    int a = 256;
    while (a > 1 && ((uintptr_t)p % (uintptr_t)a) != 0) a >>= 1;
    return a;
}

int make_plan(Gemm &g, const PlanKey &key, Plan &plan) {
    int64_t M, N, K, ldx, ldy;
    int ax, aw, ay;
    std::tie(M, N, K, ldx, ldy, ax, aw, ay) = key;
    CS1_BLAS(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    CS1_BLAS(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    CS1_BLAS(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, K));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, ldx));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, ldy));

    cublasLtMatmulPreference_t pref = nullptr;
    CS1_BLAS(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = g.workspace_bytes;
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
    const uint32_t a_align = (uint32_t)aw, b_align = (uint32_t)ax, d_align = (uint32_t)ay;
    int st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    if (!st)
        st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                       sizeof reductions));
    if (!st)
        st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a_align,
                                                       sizeof a_align));
    if (!st)
        st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b_align,
                                                       sizeof b_align));
    if (!st)
        st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &d_align,
                                                       sizeof d_align));
    if (!st)
        st = blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &d_align,
                                                       sizeof d_align));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    if (!st)
        st = blas(cublasLtMatmulAlgoGetHeuristic(g.handle, plan.op, plan.a, plan.b, plan.d, plan.d, pref, 1, &result,
                                                 &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (st) return st;
    if (found < 1) return CS1_ERR_UNSUPPORTED;
    plan.algo = result.algo;
    return 0;
}

}  // namespace

extern "C" int cs1_gemm_create(size_t workspace_bytes, void **gemm) {
    CS1_REQUIRE_PTR(gemm);
    *gemm = nullptr;
    Gemm *g = new Gemm();
    int st = blas(cublasLtCreate(&g->handle));
    if (!st && workspace_bytes > 0) {
        cudaError_t e = cudaMalloc(&g->workspace, workspace_bytes);
        if (e != cudaSuccess) st = cs1_fail(e);
        else g->workspace_bytes = workspace_bytes;
    }
    if (st) {
        if (g->handle) cublasLtDestroy(g->handle);
        delete g;
        (void)cudaGetLastError();
        return st;
    }
    *gemm = g;
    return 0;
}

extern "C" int cs1_gemm_destroy(void *gemm) {
    if (!gemm) return 0;
    Gemm *g = static_cast<Gemm *>(gemm);
    for (auto &kv : g->plans) destroy_plan(kv.second);
    int st = 0;
    if (g->workspace) {
        cudaError_t e = cudaFree(g->workspace);
        if (e != cudaSuccess) st = cs1_fail(e);
    }
    if (g->handle) {
        int b = blas(cublasLtDestroy(g->handle));
        if (!st) st = b;
    }
    delete g;
    return st;
}

extern "C" int cs1_gemm(void *gemm, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M,
                        int64_t N, int64_t K, void *stream) {
    CS1_REQUIRE_SHAPE(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return 0;
    CS1_REQUIRE(gemm && x && w && y, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(K > 0 && ldx >= K && ldy >= N);
    // 16-byte rows and pointers: what the tensor-core algorithms need for bf16
    CS1_REQUIRE(K % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0, CS1_ERR_ALIGNMENT);
    CS1_REQUIRE_ALIGNED(x, 16);
    CS1_REQUIRE_ALIGNED(w, 16);
    CS1_REQUIRE_ALIGNED(y, 16);
    Gemm *g = static_cast<Gemm *>(gemm);
    const PlanKey key(M, N, K, ldx, ldy, alignment_of(x), alignment_of(w), alignment_of(y));
    Plan plan;
    {
        std::lock_guard<std::mutex> lock(g->mutex);
        auto it = g->plans.find(key);
        if (it == g->plans.end()) {
            Plan fresh;
            int st = make_plan(*g, key, fresh);
            if (st) {
                destroy_plan(fresh);
                return st;
            }
            it = g->plans.emplace(key, fresh).first;
        }
        plan = it->second;
    }
    const float alpha = 1.0f, beta = 0.0f;
    CS1_BLAS(cublasLtMatmul(g->handle, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.d, y, plan.d, &plan.algo,
                            g->workspace, g->workspace_bytes, cs1_stream(stream)));
    CS1_LAUNCHED();
}
