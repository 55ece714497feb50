// gemm.cu: y[M, N] = x[M, K] * w[N, K]^T with cuBLASLt (bf16 in/out, fp32 compute).
//
// Row-major to column-major: a row-major [R, C] matrix with row stride ld is the column-major [C, R] matrix with
// leading dimension ld. So y^T (N x M, ld ldy) = op_T(w as K x N, ld K) * (x^T as K x M, ld ldx).
// Plans (descriptors + one algorithm) are cached per shape and pointer alignment; in-place split-K (which
// accumulates into the output and depends on its previous contents) is excluded. A plan never changes once made, so
// a shape's results stay bit-identical for the life of the handle.
//
// Autotune (cs1_gemm_tune, off by default): cuBLASLt's first heuristic is not always the fastest at small M. With
// candidates > 0 (at most 64; repeats 1..1000), the first cs1_gemm of a NEW (M, N, K, ldx, ldy, alignment) asks for
// up to `candidates` heuristics, runs each once untimed and then `repeats` times between CUDA events on the caller's
// stream with the call's real operands (y is overwritten, then written by the real call; a buffer of twice the L2
// size is overwritten before each timed call so the weights come from HBM as in a forward pass), and keeps the
// lowest median (ties: the better-ranked one). Candidates that fail to launch are skipped. That call therefore WAITS
// for the stream and holds the handle's lock while timing. On a capturing stream (or one whose capture state cannot
// be read) no timing happens: the plan takes the first heuristic, untimed, for good. So warm shapes up eagerly
// before capturing them, and do not make new plans while another capture is open in the same thread (events and
// waits would break it). candidates = 0 turns tuning off again; existing plans are kept either way.
// cs1_gemm_plan_info reports the winner's rank and median (-1 when untimed) of the lowest-(ldx, ldy) plan of an
// (M, N, K).
//
// K split into batches (cs1_gemm_split_f32): one strided-batched call over `splits` equal slices of K, each slice's
// product in its own fp32 [M, N] partial; the caller adds them (cs1_add_partials_rms_norm). At prompt-sized M the
// N = 2560 down projection has only 2 x 20 output tiles, and cuBLASLt's own split-K adds its splits in a second
// pass; the batches hand that sum to a kernel that runs anyway (LEVERS, levers 50 and 51). Plans of splits > 1 are
// keyed apart from the plain ones and take cuBLASLt's first heuristic (no pins).
//
// Pins (cs1_gemm_pin): a fixed choice per (M, N, K), measured once offline (benchmarks/gemm_pins.py) and replayed
// at every start without timing. A pin names heuristic #rank of the same problem asked at query_rows rows: at some
// M cuBLASLt's list for a nearby row count holds a faster algorithm than its list for M itself (out/o at 160 rows,
// lever 30). The algorithm must pass cublasLtMatmulAlgoCheck at M rows and fit the workspace, else the plan falls
// back to the default (plan_info then reports query_rows = M, rank 0). Tuning, when on, ignores pins.
#include <cublasLt.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common.cuh"
#include "gemm_stream.h"

namespace {

constexpr int kMaxCandidates = 64;
constexpr int kMaxRepeats = 1000;

struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo;
    int32_t algo_index = 0;   // heuristic rank of algo (0 = cuBLASLt's first choice)
    int64_t query_rows = 0;   // the row count whose heuristic list held algo (M unless a pin applied)
    float tuned_us = -1.0f;   // median time of the winner while tuning; -1 when the plan was not timed
};

// (M, N, K, ldx, ldy, alignment of x, w, y, splits: 1 = one bf16-output GEMM, > 1 = K batches with fp32 partials)
typedef std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, int> PlanKey;
// (M, N, K) -> (query_rows, rank)
typedef std::tuple<int64_t, int64_t, int64_t> ShapeKey;
typedef std::pair<int64_t, int32_t> Pin;

struct Gemm {
    cublasLtHandle_t handle = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::mutex mutex;
    std::map<PlanKey, Plan> plans;
    std::map<ShapeKey, Pin> pins;
    int32_t tune_candidates = 0;  // 0 = no tuning (first heuristic)
    int32_t tune_repeats = 0;
    void *flush = nullptr;        // tuning only: overwritten before each timed call so weights come from HBM
    size_t flush_bytes = 0;
    stream_gemm::Workspace stream;  // split-K fix-up of the weight-streaming kernel (sm_90a devices only)
};

// Split-K partial sums of cs1_gemm_stream: [splits][M][N] fp32; 24 MiB holds 8 splits of 2560 columns at M = 256.
// Allocated by the handle's first cs1_gemm_stream call (the forward pass never makes one, so it costs nothing there).
constexpr size_t kStreamPartialBytes = 24u << 20;

int ensure_stream_workspace(Gemm &g) {
    if (g.stream.partial) return 0;
    cudaError_t e = cudaMalloc(&g.stream.partial, kStreamPartialBytes);
    if (e == cudaSuccess) e = cudaMalloc(&g.stream.counters, stream_gemm::kCounters * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMemset(g.stream.counters, 0, stream_gemm::kCounters * sizeof(int32_t));
    if (e != cudaSuccess) {
        for (void *p : {static_cast<void *>(g.stream.partial), static_cast<void *>(g.stream.counters)})
            if (p) cudaFree(p);
        g.stream = stream_gemm::Workspace();
        return cs1_fail(e);
    }
    g.stream.partial_bytes = kStreamPartialBytes;
    return 0;
}

// Everything a new plan may need for timing: the caller's operands and stream.
struct Operands {
    const void *x, *w;
    void *y;
    cudaStream_t stream;
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

// The alignment cuBLASLt may assume for every batch of a strided-batched operand: its base pointer's, but no more
// than the batch stride (in bytes) allows.
int batch_alignment(const void *p, int64_t stride_bytes) {
    return std::min(alignment_of(p), alignment_of(reinterpret_cast<const void *>((uintptr_t)stride_bytes)));
}

// True unless the stream is known not to be capturing (a failed query counts as capturing: never time then).
bool maybe_capturing(cudaStream_t s) {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(s, &cs);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return cs != cudaStreamCaptureStatusNone;
}

// A buffer twice the L2 size, written before each timed call. Best effort: without it timing runs with a warm L2.
void ensure_flush_buffer(Gemm &g) {
    if (g.flush) return;
    int dev = 0, l2 = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
        l2 <= 0) {
        (void)cudaGetLastError();
        return;
    }
    const size_t bytes = 2 * (size_t)l2;
    if (cudaMalloc(&g.flush, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        g.flush = nullptr;
        return;
    }
    g.flush_bytes = bytes;
}

struct Events {
    std::vector<cudaEvent_t> ev;
    ~Events() {
        for (cudaEvent_t e : ev)
            if (e) cudaEventDestroy(e);
    }
};

// Times every candidate `repeats` times (one untimed warm-up call first) and stores the fastest in plan.
// Candidates whose launch fails are skipped; a CUDA error left behind by a failed candidate is cleared, but a
// sticky one (the context is unusable) is returned. With no candidate working, the plan keeps rank 0.
int tune_plan(Gemm &g, Plan &plan, const std::vector<cublasLtMatmulHeuristicResult_t> &cands, const Operands &o) {
    const int repeats = g.tune_repeats;
    ensure_flush_buffer(g);
    Events events;
    events.ev.resize(2 * (size_t)repeats, nullptr);
    for (cudaEvent_t &e : events.ev) CS1_CUDA(cudaEventCreate(&e));
    const float alpha = 1.0f, beta = 0.0f;
    auto launch = [&](const cublasLtMatmulAlgo_t &algo) {
        return cublasLtMatmul(g.handle, plan.op, &alpha, o.w, plan.a, o.x, plan.b, &beta, o.y, plan.d, o.y, plan.d,
                              &algo, g.workspace, g.workspace_bytes, o.stream);
    };
    float best_us = std::numeric_limits<float>::infinity();
    int best = -1;
    std::vector<float> times((size_t)repeats);
    for (size_t i = 0; i < cands.size(); ++i) {
        const cublasLtMatmulAlgo_t &algo = cands[i].algo;
        bool ok = launch(algo) == CUBLAS_STATUS_SUCCESS;
        for (int r = 0; ok && r < repeats; ++r) {
            if (g.flush) ok = cudaMemsetAsync(g.flush, r & 0xFF, g.flush_bytes, o.stream) == cudaSuccess;
            ok = ok && cudaEventRecord(events.ev[2 * r], o.stream) == cudaSuccess;
            ok = ok && launch(algo) == CUBLAS_STATUS_SUCCESS;
            ok = ok && cudaEventRecord(events.ev[2 * r + 1], o.stream) == cudaSuccess;
        }
        cudaError_t e = cudaStreamSynchronize(o.stream);
        if (e == cudaSuccess) e = cudaGetLastError();
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            // a sticky error cannot be cleared: the next query still reports it
            cudaError_t again = cudaStreamSynchronize(o.stream);
            if (again != cudaSuccess) return cs1_fail(again);
            ok = false;
        }
        if (!ok) continue;
        for (int r = 0; ok && r < repeats; ++r) {
            float ms = 0.0f;
            ok = cudaEventElapsedTime(&ms, events.ev[2 * r], events.ev[2 * r + 1]) == cudaSuccess;
            times[(size_t)r] = ms * 1000.0f;
        }
        if (!ok) {
            (void)cudaGetLastError();
            continue;
        }
        std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
        const float median = times[(size_t)(repeats / 2)];
        if (median < best_us) {  // strict: a tie keeps the better-ranked heuristic
            best_us = median;
            best = (int)i;
        }
    }
    if (best >= 0) {
        plan.algo = cands[(size_t)best].algo;
        plan.algo_index = best;
        plan.tuned_us = best_us;
    }
    return 0;
}

// cuBLASLt's first `wanted` algorithms for (op, a, b, d), failed entries dropped.
int heuristics(Gemm &g, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
               cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int wanted,
               std::vector<cublasLtMatmulHeuristicResult_t> &results) {
    results.assign((size_t)wanted, cublasLtMatmulHeuristicResult_t());
    int found = 0;
    CS1_BLAS(cublasLtMatmulAlgoGetHeuristic(g.handle, op, a, b, d, d, pref, wanted, results.data(), &found));
    results.resize((size_t)std::max(0, std::min(found, wanted)));
    results.erase(std::remove_if(results.begin(), results.end(),
                                 [](const cublasLtMatmulHeuristicResult_t &r) {
                                     return r.state != CUBLAS_STATUS_SUCCESS;
                                 }),
                  results.end());
    return 0;
}

// Replaces plan.algo with heuristic #pin.second of the problem asked at pin.first rows, when that algorithm exists,
// passes cublasLtMatmulAlgoCheck at the plan's own rows and fits the workspace; otherwise (a failed query
// included) the plan stays as it is. Only a failure to make the layouts is returned.
int apply_pin(Gemm &g, Plan &plan, cublasLtMatmulPreference_t pref, int64_t K, int64_t N, int64_t ldx, int64_t ldy,
              const Pin &pin) {
    const int64_t rows = pin.first;
    const int rank = pin.second;
    cublasLtMatrixLayout_t b = nullptr, d = nullptr;
    int st = blas(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, (uint64_t)K, (uint64_t)rows, ldx));
    if (!st) st = blas(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, (uint64_t)N, (uint64_t)rows, ldy));
    std::vector<cublasLtMatmulHeuristicResult_t> results;
    const bool listed = !st && heuristics(g, plan.op, plan.a, b, d, pref, rank + 1, results) == 0;
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (st || !listed || (int)results.size() <= rank) return st;
    cublasLtMatmulHeuristicResult_t check;
    const cublasLtMatmulAlgo_t &algo = results[(size_t)rank].algo;
    if (cublasLtMatmulAlgoCheck(g.handle, plan.op, plan.a, plan.b, plan.d, plan.d, &algo, &check) !=
            CUBLAS_STATUS_SUCCESS ||
        check.workspaceSize > g.workspace_bytes)
        return 0;
    plan.algo = algo;
    plan.algo_index = rank;
    plan.query_rows = rows;
    return 0;
}

int make_plan(Gemm &g, const PlanKey &key, const Operands &o, Plan &plan) {
    int64_t M, N, K, ldx, ldy;
    int ax, aw, ay, splits;
    std::tie(M, N, K, ldx, ldy, ax, aw, ay, splits) = key;
    const int64_t k = K / splits;  // each batch's slice of K; batch i starts i * k columns into w and x
    CS1_BLAS(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    CS1_BLAS(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT));
    CS1_BLAS(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, (uint64_t)k, (uint64_t)N, K));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, (uint64_t)k, (uint64_t)M, ldx));
    CS1_BLAS(cublasLtMatrixLayoutCreate(&plan.d, splits > 1 ? CUDA_R_32F : CUDA_R_16BF, (uint64_t)N, (uint64_t)M,
                                        ldy));
    if (splits > 1) {
        const int32_t count = splits;
        const int64_t slice = k, partial = ldy * M;
        for (cublasLtMatrixLayout_t l : {plan.a, plan.b, plan.d})
            CS1_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        for (cublasLtMatrixLayout_t l : {plan.a, plan.b})
            CS1_BLAS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &slice,
                                                      sizeof slice));
        CS1_BLAS(cublasLtMatrixLayoutSetAttribute(plan.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &partial,
                                                  sizeof partial));
    }

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
    // Timing needs a stream that is not being captured (events and a wait are not capturable): a plan first made
    // during capture keeps the first heuristic, untimed, for good.
    const bool timed = g.tune_candidates > 0 && !maybe_capturing(o.stream);
    const int wanted = timed ? g.tune_candidates : 1;
    std::vector<cublasLtMatmulHeuristicResult_t> results;
    if (!st) st = heuristics(g, plan.op, plan.a, plan.b, plan.d, pref, wanted, results);
    if (st) {
        cublasLtMatmulPreferenceDestroy(pref);
        return st;
    }
    if (results.empty()) {
        cublasLtMatmulPreferenceDestroy(pref);
        return CS1_ERR_UNSUPPORTED;
    }
    plan.algo = results[0].algo;
    plan.algo_index = 0;
    plan.query_rows = M;
    plan.tuned_us = -1.0f;
    if (!timed && splits == 1) {
        auto pin = g.pins.find(ShapeKey(M, N, K));
        if (pin != g.pins.end()) st = apply_pin(g, plan, pref, K, N, ldx, ldy, pin->second);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (st) return st;
    return timed ? tune_plan(g, plan, results, o) : 0;
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
    for (void *p : {g->workspace, g->flush, static_cast<void *>(g->stream.partial),
                    static_cast<void *>(g->stream.counters)}) {
        if (!p) continue;
        cudaError_t e = cudaFree(p);
        if (e != cudaSuccess && !st) st = cs1_fail(e);
    }
    if (g->handle) {
        int b = blas(cublasLtDestroy(g->handle));
        if (!st) st = b;
    }
    delete g;
    return st;
}

extern "C" int cs1_gemm_tune(void *gemm, int32_t candidates, int32_t repeats) {
    CS1_REQUIRE_PTR(gemm);
    CS1_REQUIRE_SHAPE(candidates >= 0 && candidates <= kMaxCandidates);
    CS1_REQUIRE_SHAPE(candidates == 0 || (repeats >= 1 && repeats <= kMaxRepeats));
    Gemm *g = static_cast<Gemm *>(gemm);
    std::lock_guard<std::mutex> lock(g->mutex);
    g->tune_candidates = candidates;
    g->tune_repeats = candidates > 0 ? repeats : 0;
    return 0;
}

extern "C" int cs1_gemm_pin(void *gemm, int64_t M, int64_t N, int64_t K, int64_t query_rows, int32_t rank) {
    CS1_REQUIRE_PTR(gemm);
    CS1_REQUIRE_SHAPE(M > 0 && N > 0 && K > 0 && rank < kMaxCandidates && (rank < 0 || query_rows > 0));
    Gemm *g = static_cast<Gemm *>(gemm);
    std::lock_guard<std::mutex> lock(g->mutex);
    if (rank < 0) g->pins.erase(ShapeKey(M, N, K));
    else g->pins[ShapeKey(M, N, K)] = Pin(query_rows, rank);
    return 0;
}

extern "C" int cs1_gemm_blas_version(size_t *version) {
    CS1_REQUIRE_PTR(version);
    *version = cublasLtGetVersion();
    return 0;
}

extern "C" int cs1_gemm_plan_info(void *gemm, int64_t M, int64_t N, int64_t K, int32_t *algo_index,
                                  int64_t *query_rows, float *tuned_us) {
    CS1_REQUIRE(gemm && algo_index && query_rows && tuned_us, CS1_ERR_NULL);
    Gemm *g = static_cast<Gemm *>(gemm);
    std::lock_guard<std::mutex> lock(g->mutex);
    const int64_t lo64 = std::numeric_limits<int64_t>::min();
    const int lo = std::numeric_limits<int>::min();
    auto it = g->plans.lower_bound(PlanKey(M, N, K, lo64, lo64, lo, lo, lo, lo));
    if (it == g->plans.end() || std::get<0>(it->first) != M || std::get<1>(it->first) != N ||
        std::get<2>(it->first) != K)
        return CS1_ERR_SHAPE;
    *algo_index = it->second.algo_index;
    *query_rows = it->second.query_rows;
    *tuned_us = it->second.tuned_us;
    return 0;
}

namespace {

// The plan of `key` (made on first use), then one cuBLASLt call with it.
int run_plan(Gemm *g, const PlanKey &key, const void *x, const void *w, void *y, void *stream) {
    Plan plan;
    {
        // held while a new plan is tuned: other threads sharing this handle wait for it
        std::lock_guard<std::mutex> lock(g->mutex);
        auto it = g->plans.find(key);
        if (it == g->plans.end()) {
            Plan fresh;
            int st = make_plan(*g, key, Operands{x, w, y, cs1_stream(stream)}, fresh);
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

}  // namespace

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
    return run_plan(g, PlanKey(M, N, K, ldx, ldy, alignment_of(x), alignment_of(w), alignment_of(y), 1), x, w, y,
                    stream);
}

extern "C" int cs1_gemm_split_f32(void *gemm, const void *x, int64_t ldx, const void *w, float *partials, int64_t M,
                                  int64_t N, int64_t K, int32_t splits, void *stream) {
    CS1_REQUIRE_SHAPE(M >= 0 && N >= 0 && K >= 0 && splits >= 2 && splits <= 16);
    if (M == 0 || N == 0) return 0;
    CS1_REQUIRE(gemm && x && w && partials, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(K > 0 && ldx >= K && K % splits == 0);
    // every slice starts on a 16-byte boundary of w and x; fp32 partial rows of N floats, 16-byte aligned
    CS1_REQUIRE((K / splits) % 8 == 0 && ldx % 8 == 0 && N % 4 == 0, CS1_ERR_ALIGNMENT);
    CS1_REQUIRE_ALIGNED(x, 16);
    CS1_REQUIRE_ALIGNED(w, 16);
    CS1_REQUIRE_ALIGNED(partials, 16);
    Gemm *g = static_cast<Gemm *>(gemm);
    const int64_t slice_bytes = K / splits * 2;
    const PlanKey key(M, N, K, ldx, N, batch_alignment(x, slice_bytes), batch_alignment(w, slice_bytes),
                      batch_alignment(partials, M * N * 4), splits);
    return run_plan(g, key, x, w, partials, stream);
}

extern "C" int cs1_gemm_stream(void *gemm, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy,
                               int64_t M, int64_t N, int64_t K, int32_t block_n, int32_t splits, int32_t cluster,
                               void *stream) {
    CS1_REQUIRE_SHAPE(M >= 0 && N >= 0 && K >= 0);
    CS1_REQUIRE_SHAPE(stream_gemm::block_n_supported(block_n) && stream_gemm::cluster_supported(cluster) &&
                      splits >= 1 && splits <= stream_gemm::kMaxSplits);
    if (M == 0 || N == 0) return 0;
    CS1_REQUIRE(gemm && x && w && y, CS1_ERR_NULL);
    CS1_REQUIRE_SHAPE(K > 0 && ldx >= K && ldy >= N && M <= stream_gemm::kMaxRows && N <= INT32_MAX &&
                      K <= INT32_MAX);
    CS1_REQUIRE(K % 8 == 0 && N % 8 == 0 && ldx % 8 == 0 && ldy % 8 == 0, CS1_ERR_ALIGNMENT);
    CS1_REQUIRE_ALIGNED(x, 16);
    CS1_REQUIRE_ALIGNED(w, 16);
    CS1_REQUIRE_ALIGNED(y, 16);
    if (!stream_gemm::available()) {
        int devices = 0;
        const bool none = cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0;
        (void)cudaGetLastError();
        return none ? CS1_ERR_NO_DEVICE : CS1_ERR_UNSUPPORTED;
    }
    Gemm *g = static_cast<Gemm *>(gemm);
    {
        std::lock_guard<std::mutex> lock(g->mutex);
        const int st = ensure_stream_workspace(*g);
        if (st) return st;
    }
    return stream_gemm::launch(g->stream, x, ldx, w, y, ldy, M, N, K, block_n, splits, cluster,
                               cs1_stream(stream));
}
