// gemm_algo_probe.cu: the forward's five projections at prompt-sized M, cuBLASLt's whole configuration space against
// the plans the forward can reach today (heuristic ranks at a few query lengths: what the pin table chooses from).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/gemm_algo_probe benchmarks/gemm_algo_probe.cu -lcublasLt && \
//     /tmp/gemm_algo_probe [rows...]            (default rows: 128 160; 1-8192)
//
// Why (LEVERS, lever 55): at 160 rows the wide projections sit far above their weight bytes (gate / up ~36 us per
// call against ~22, GDN in ~25 against 15, qkv ~23 against 12), and lever 30's pins only ever chose among the
// heuristic's first ranks (8 algorithms at most per problem). cuBLASLt also takes any configuration one sets by hand
// (algorithm id, tile, stages, cluster shape, split-K and its reduction, CTA swizzle, custom option) that passes
// cublasLtMatmulAlgoCheck; the heuristic lists a small part of it.
// Method, per shape and M (the forward's layouts, workspace and reduction schemes):
//   1. candidates: the heuristic's list at M and at 144 / 192 / 256 query rows (M x 7/8, 9/8, 5/4 above 256;
//      "h<q>#<rank>"), and every (algorithm, tile, cluster shape, stages undefined or 64xAUTO) with split 1,
//      swizzle 0, option 0 that passes the check ("x");
//   2. screen: each candidate a CUDA graph of kScreenCalls calls, a 256-byte memset between calls (as the pin bench:
//      no call overlaps its neighbour, like the forward where our kernels sit between GEMMs), median of 3 replays;
//   3. widen: the best kWiden screened configurations of step 1 varied in stages, split-K (2, 3, 4) with each
//      reduction scheme, swizzle and custom option, screened the same way;
//   4. confirm: the best kConfirm of all plus heuristic #0 at M, kConfirmCalls calls, kRounds rounds in rotated
//      order, median of the round medians; each confirmed plan's output against heuristic #0's (max abs difference).
// Weights rotate through >= 1 GiB of copies, so every call streams them from HBM.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probe_check.h"

constexpr int kScreenCalls = 10, kScreenReps = 3, kConfirmCalls = 20, kConfirmReps = 9, kRounds = 3;
constexpr int kWiden = 6, kConfirm = 10, kMaxCandidates = 4000;
constexpr size_t kWorkspace = 32 << 20;  // the forward's (startlux_native/cuda_backend.py GEMM_WORKSPACE)
constexpr int kMaxRows = 8192;

struct Config {
    int id = 0, tile = 0, stages = 0, splits = 1, reduction = 0, swizzle = 0, custom = 0, cluster = 0;
};

struct Candidate {
    cublasLtMatmulAlgo_t algo;
    Config c;
    std::string source;
    int waves_x100 = 0;
    float screen = 1e30f, confirm = 1e30f;
};

// One attribute of an algorithm, through `get` (cublasLtMatmulAlgoConfigGetAttribute or ...CapGetAttribute); zero
// when the query fails.
template <typename T, typename Get, typename Attr>
T algo_attr(Get get, const cublasLtMatmulAlgo_t &algo, Attr attr) {
    T v{};
    size_t written = 0;
    get(&algo, attr, &v, sizeof v, &written);
    return v;
}

template <typename T>
T config_get(const cublasLtMatmulAlgo_t &algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
    return algo_attr<T>(cublasLtMatmulAlgoConfigGetAttribute, algo, attr);
}

Config read_config(const cublasLtMatmulAlgo_t &algo) {
    Config c;
    c.id = config_get<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID);
    c.tile = (int)config_get<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID);
    c.stages = (int)config_get<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID);
    c.splits = config_get<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
    c.reduction = (int)config_get<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
    c.swizzle = (int)config_get<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
    c.custom = (int)config_get<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
    c.cluster = (int)config_get<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
    return c;
}

bool same(const Config &a, const Config &b) {
    return a.id == b.id && a.tile == b.tile && a.stages == b.stages && a.splits == b.splits &&
           a.reduction == b.reduction && a.swizzle == b.swizzle && a.custom == b.custom && a.cluster == b.cluster;
}

std::string describe(const Config &c) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "algo %3d tile %3d stages %3d cluster %2d split %d red %d swz %d opt %d", c.id,
                  c.tile, c.stages, c.cluster, c.splits, c.reduction, c.swizzle, c.custom);
    return buf;
}

std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t &algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
        return {0};  // UNDEFINED: the algorithm picks
    std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
    cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), bytes, &bytes);
    return ids;
}

template <typename T>
T cap_get(const cublasLtMatmulAlgo_t &algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    return algo_attr<T>(cublasLtMatmulAlgoCapGetAttribute, algo, attr);
}

struct Problem {
    cublasLtHandle_t lt;
    cudaStream_t stream;
    void *workspace, *separator;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulPreference_t pref;
    const __nv_bfloat16 *pool, *x;
    __nv_bfloat16 *y;
    int copies, M, N, K;
};

void make_layouts(Problem &p) {
    CHECK_BLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK_BLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, p.K, p.N, p.K));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, p.K, p.M, p.K));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, p.N, p.M, p.N));
    CHECK_BLAS(cublasLtMatmulPreferenceCreate(&p.pref));
    const uint64_t ws = kWorkspace;
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
    CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(p.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                    sizeof reductions));
}

void free_layouts(Problem &p) {
    CHECK_BLAS(cublasLtMatmulPreferenceDestroy(p.pref));
    for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d}) CHECK_BLAS(cublasLtMatrixLayoutDestroy(l));
    CHECK_BLAS(cublasLtMatmulDescDestroy(p.desc));
}

// The check at the problem's own M; fills waves and refuses plans over the workspace.
bool check(const Problem &p, Candidate &cand) {
    cublasLtMatmulHeuristicResult_t r;
    if (cublasLtMatmulAlgoCheck(p.lt, p.desc, p.a, p.b, p.d, p.d, &cand.algo, &r) != CUBLAS_STATUS_SUCCESS)
        return false;
    if (r.workspaceSize > kWorkspace) return false;
    cand.waves_x100 = (int)std::lround(r.wavesCount * 100.0f);
    return true;
}

// us per call, or 1e30 when a call fails to launch
float time_plan(const Problem &p, const cublasLtMatmulAlgo_t &algo, int calls, int reps) {
    const float one = 1.0f, zero = 0.0f;
    const long long wcount = (long long)p.N * p.K;
    cudaGraph_t graph;
    bool ok = true;
    CHECK(cudaStreamBeginCapture(p.stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls && ok; ++i) {
        ok = cudaMemsetAsync(p.separator, i & 0xff, 256, p.stream) == cudaSuccess &&
             cublasLtMatmul(p.lt, p.desc, &one, p.pool + (i % p.copies) * wcount, p.a, p.x, p.b, &zero, p.y, p.d,
                            p.y, p.d, &algo, p.workspace, kWorkspace, p.stream) == CUBLAS_STATUS_SUCCESS;
    }
    const cudaError_t end = cudaStreamEndCapture(p.stream, &graph);
    if (!ok || end != cudaSuccess) {
        if (end == cudaSuccess) CHECK(cudaGraphDestroy(graph));
        cudaGetLastError();
        return 1e30f;
    }
    const float us = probe_graph_us(graph, p.stream, calls, reps);
    CHECK(cudaGraphDestroy(graph));
    return us;
}

void add_unique(std::vector<Candidate> &list, const Candidate &cand) {
    for (const Candidate &c : list)
        if (same(c.c, cand.c)) return;
    list.push_back(cand);
}

void heuristic_candidates(const Problem &p, int query_rows, int wanted, std::vector<Candidate> &out) {
    cublasLtMatrixLayout_t b, d;
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, p.K, query_rows, p.K));
    CHECK_BLAS(cublasLtMatrixLayoutCreate(&d, CUDA_R_16BF, p.N, query_rows, p.N));
    std::vector<cublasLtMatmulHeuristicResult_t> found((size_t)wanted);
    int n = 0;
    CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(p.lt, p.desc, p.a, b, d, d, p.pref, wanted, found.data(), &n));
    for (int r = 0; r < n; ++r) {
        if (found[(size_t)r].state != CUBLAS_STATUS_SUCCESS) continue;
        Candidate cand;
        cand.algo = found[(size_t)r].algo;
        cand.c = read_config(cand.algo);
        cand.source = "h" + std::to_string(query_rows) + "#" + std::to_string(r);
        if (check(p, cand)) add_unique(out, cand);
    }
    CHECK_BLAS(cublasLtMatrixLayoutDestroy(b));
    CHECK_BLAS(cublasLtMatrixLayoutDestroy(d));
}

bool set_config(cublasLtMatmulAlgo_t &algo, const Config &c) {
    const uint32_t tile = c.tile, stages = c.stages, reduction = c.reduction, swizzle = c.swizzle,
                   custom = c.custom;
    const int32_t splits = c.splits;
    const uint16_t cluster = (uint16_t)c.cluster;
    return cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile) == 0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages) == 0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits) == 0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction,
                                                sizeof reduction) == 0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle,
                                                sizeof swizzle) == 0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &custom, sizeof custom) ==
               0 &&
           cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                                sizeof cluster) == 0;
}

bool try_config(const Problem &p, const Config &c, const char *source, std::vector<Candidate> &out) {
    Candidate cand;
    if (cublasLtMatmulAlgoInit(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, c.id, &cand.algo) != CUBLAS_STATUS_SUCCESS)
        return false;
    if (!set_config(cand.algo, c) || !check(p, cand)) return false;
    cand.c = read_config(cand.algo);
    cand.source = source;
    const size_t before = out.size();
    add_unique(out, cand);
    return out.size() > before;
}

// Every (algorithm, tile, cluster shape) at default stages, split 1, no swizzle, option 0.
bool listed_algorithms = false;

int exhaustive_candidates(const Problem &p, std::vector<Candidate> &out, int *checked) {
    int ids[512], n_ids = 0;
    CHECK_BLAS(cublasLtMatmulAlgoGetIds(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                        CUDA_R_16BF, 512, ids, &n_ids));
    // cluster shapes auto and 1x1 ... 4x4 (cublasLtClusterShape_t 0, 2-10); stages undefined and 64xAUTO (35: the
    // heuristic's choice for every Hopper plan of the first run; undefined alone passed no check there)
    const int clusters[] = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    const uint32_t stage_ids[] = {0, 35};
    for (int i = 0; i < n_ids && (int)out.size() < kMaxCandidates; ++i) {
        cublasLtMatmulAlgo_t algo;
        if (cublasLtMatmulAlgoInit(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                                   CUDA_R_16BF, ids[i], &algo) != CUBLAS_STATUS_SUCCESS)
            continue;
        const std::vector<uint32_t> tiles = cap_ids(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
        const size_t before = out.size();
        for (uint32_t tile : tiles)
            for (int cluster : clusters)
                for (uint32_t stages : stage_ids) {
                    Config c;
                    c.id = ids[i];
                    c.tile = (int)tile;
                    c.cluster = cluster;
                    c.stages = (int)stages;
                    ++*checked;
                    try_config(p, c, "x", out);
                }
        if (!listed_algorithms)  // once: what each algorithm offers
            std::printf("  algorithm %3d: %zu tiles, %zu stage ids, split-K %d, custom options 0-%d; %zu plans "
                        "passed the check\n",
                        ids[i], tiles.size(), cap_ids(algo, CUBLASLT_ALGO_CAP_STAGES_IDS).size(),
                        cap_get<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT),
                        cap_get<int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX), out.size() - before);
    }
    listed_algorithms = true;
    return n_ids;
}

// Variations of one configuration: stages, split-K with each allowed reduction, swizzle, custom option.
void widen(const Problem &p, const Candidate &base, std::vector<Candidate> &out, int *checked) {
    cublasLtMatmulAlgo_t algo;
    if (cublasLtMatmulAlgoInit(p.lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16BF,
                               CUDA_R_16BF, base.c.id, &algo) != CUBLAS_STATUS_SUCCESS)
        return;
    const bool can_split = cap_get<int32_t>(algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) != 0;
    const uint32_t reductions = cap_get<uint32_t>(algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK) &
                                ~(uint32_t)CUBLASLT_REDUCTION_SCHEME_INPLACE;
    const bool can_swizzle = cap_get<uint32_t>(algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT) != 0;
    const int custom_max = std::min(cap_get<int32_t>(algo, CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX), 7);
    const std::string source = "w(" + base.source + ")";
    for (uint32_t stages : cap_ids(algo, CUBLASLT_ALGO_CAP_STAGES_IDS)) {
        Config c = base.c;
        c.stages = (int)stages;
        ++*checked;
        try_config(p, c, source.c_str(), out);
    }
    for (int swizzle = 0; swizzle <= (can_swizzle ? 1 : 0); ++swizzle)
        for (int custom = 0; custom <= custom_max; ++custom) {
            Config c = base.c;
            c.swizzle = swizzle;
            c.custom = custom;
            ++*checked;
            try_config(p, c, source.c_str(), out);
        }
    if (can_split)
        for (int splits : {2, 3, 4})
            for (uint32_t red : {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE})
                if (reductions & red) {
                    Config c = base.c;
                    c.splits = splits;
                    c.reduction = (int)red;
                    ++*checked;
                    try_config(p, c, source.c_str(), out);
                }
}

void screen(const Problem &p, std::vector<Candidate> &list, size_t from) {
    for (size_t i = from; i < list.size(); ++i) list[i].screen = time_plan(p, list[i].algo, kScreenCalls, kScreenReps);
}

// Max abs difference of one plan's output against a reference output (host copies of y).
float max_diff(const Problem &p, const cublasLtMatmulAlgo_t &algo, const std::vector<__nv_bfloat16> &ref) {
    const float one = 1.0f, zero = 0.0f;
    CHECK(cudaMemsetAsync(p.y, 0xff, 2ull * p.M * p.N, p.stream));  // NaN poison
    CHECK_BLAS(cublasLtMatmul(p.lt, p.desc, &one, p.pool, p.a, p.x, p.b, &zero, p.y, p.d, p.y, p.d, &algo,
                              p.workspace, kWorkspace, p.stream));
    std::vector<__nv_bfloat16> out(ref.size());
    CHECK(cudaMemcpyAsync(out.data(), p.y, out.size() * 2, cudaMemcpyDeviceToHost, p.stream));
    CHECK(cudaStreamSynchronize(p.stream));
    float worst = 0;
    for (size_t i = 0; i < out.size(); ++i) {
        const float d = std::fabs(__bfloat162float(out[i]) - __bfloat162float(ref[i]));
        if (!(d <= worst)) worst = d;  // a NaN is the worst
    }
    return worst;
}

void run_shape(cublasLtHandle_t lt, cudaStream_t stream, void *workspace, void *separator, const char *name, int N,
               int K, const std::vector<int> &rows) {
    const long long wbytes = 2ll * N * K;
    const int copies = (int)std::max<long long>(4, (1ll << 30) / wbytes + 1);
    __nv_bfloat16 *pool, *x, *y;
    CHECK(cudaMalloc(&pool, wbytes * copies));
    CHECK(cudaMalloc(&x, 2ll * kMaxRows * K));
    CHECK(cudaMalloc(&y, 2ll * kMaxRows * N));
    probe_fill_bf16<<<1024, 256, 0, stream>>>(pool, wbytes / 2 * copies, 1u);
    probe_fill_bf16<<<256, 256, 0, stream>>>(x, (long long)kMaxRows * K, 2u);
    CHECK(cudaStreamSynchronize(stream));
    for (int M : rows) {
        Problem p{lt, stream, workspace, separator, nullptr, nullptr, nullptr, nullptr, nullptr, pool, x, y, copies,
                  M, N, K};
        make_layouts(p);
        std::vector<Candidate> list;
        heuristic_candidates(p, M, 32, list);
        const size_t n_default_list = list.size();
        // the pin table's neighbourhood: 144 / 192 / 256 rows up to 256, else M x 7/8, 9/8, 5/4 (16-row steps)
        std::vector<int> queries = {144, 192, 256};
        if (M > 256) queries = {(M * 7 / 8 + 15) / 16 * 16, (M * 9 / 8 + 15) / 16 * 16, (M * 5 / 4 + 15) / 16 * 16};
        for (int q : queries)
            if (q != M) heuristic_candidates(p, q, 6, list);
        const size_t n_heuristic = list.size();
        int checked = 0;
        const int n_ids = exhaustive_candidates(p, list, &checked);
        screen(p, list, 0);
        // widen the best kWiden of everything screened so far
        std::vector<size_t> order(list.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return list[i].screen < list[j].screen; });
        const size_t before_widen = list.size();
        int widened_checks = 0;
        std::vector<Candidate> bases;
        for (size_t i = 0; i < order.size() && (int)bases.size() < kWiden; ++i) bases.push_back(list[order[i]]);
        for (const Candidate &base : bases) widen(p, base, list, &widened_checks);
        screen(p, list, before_widen);
        // confirm: heuristic #0 at M, then the best kConfirm by screen
        order.resize(list.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](size_t i, size_t j) { return list[i].screen < list[j].screen; });
        std::vector<size_t> finalists = {0};
        for (size_t i = 0; i < order.size() && (int)finalists.size() < kConfirm + 1; ++i)
            if (order[i] != 0 && list[order[i]].screen < 1e29f) finalists.push_back(order[i]);
        std::vector<std::vector<float>> rounds(finalists.size());
        for (int round = 0; round < kRounds; ++round)
            for (size_t k = 0; k < finalists.size(); ++k) {
                const size_t f = finalists[(k + round) % finalists.size()];
                rounds[(k + round) % finalists.size()].push_back(
                    time_plan(p, list[f].algo, kConfirmCalls, kConfirmReps));
            }
        for (size_t k = 0; k < finalists.size(); ++k) {
            std::sort(rounds[k].begin(), rounds[k].end());
            list[finalists[k]].confirm = rounds[k][rounds[k].size() / 2];
        }
        std::vector<__nv_bfloat16> ref((size_t)M * N);
        {
            const float one = 1.0f, zero = 0.0f;
            CHECK_BLAS(cublasLtMatmul(lt, p.desc, &one, pool, p.a, x, p.b, &zero, y, p.d, y, p.d, &list[0].algo,
                                      workspace, kWorkspace, stream));
            CHECK(cudaMemcpyAsync(ref.data(), y, ref.size() * 2, cudaMemcpyDeviceToHost, stream));
            CHECK(cudaStreamSynchronize(stream));
        }
        // best of the heuristic space (what the pin table can choose) among the screened
        size_t best_h = 0;
        for (size_t i = 0; i < n_heuristic; ++i)
            if (list[i].screen < list[best_h].screen) best_h = i;
        std::printf("\n%s N %d K %d M %d: %d algorithm ids, %zu heuristic plans (%zu at M), %d exhaustive checks, "
                    "%d widening checks, %zu plans screened; bytes' floor %.1f us at 4.3 TB/s\n",
                    name, N, K, M, n_ids, n_heuristic, n_default_list, checked, widened_checks, list.size(),
                    wbytes / 4.3e6);
        std::printf("  best screened heuristic plan: %-10s %s  screen %.2f us\n", list[best_h].source.c_str(),
                    describe(list[best_h].c).c_str(), list[best_h].screen);
        std::printf("  %-22s %-84s %7s %7s %6s %9s\n", "source", "configuration", "screen", "confirm", "waves",
                    "max|dy|");
        for (size_t f : finalists)
            std::printf("  %-22s %-84s %7.2f %7.2f %6.2f %9.2e\n", list[f].source.c_str(),
                        describe(list[f].c).c_str(), list[f].screen, list[f].confirm, list[f].waves_x100 / 100.0,
                        max_diff(p, list[f].algo, ref));
        std::fflush(stdout);
        free_layouts(p);
    }
    CHECK(cudaFree(pool));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
}

int main(int argc, char **argv) {
    std::vector<int> rows;
    for (int i = 1; i < argc; ++i) {
        const int m = std::atoi(argv[i]);
        if (m < 1 || m > kMaxRows) {
            std::fprintf(stderr, "rows must be 1-%d, got %s\n", kMaxRows, argv[i]);
            return 2;
        }
        rows.push_back(m);
    }
    if (rows.empty()) rows = {128, 160};
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs, cuBLASLt %zu; us per call (a 256-byte memset between calls), screen %d calls x %d "
                "replays, confirm %d calls x %d replays x %d rotated rounds; weights rotating over >= 1 GiB\n",
                prop.name, prop.multiProcessorCount, cublasLtGetVersion(), kScreenCalls, kScreenReps, kConfirmCalls,
                kConfirmReps, kRounds);
    cublasLtHandle_t lt;
    CHECK_BLAS(cublasLtCreate(&lt));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    void *workspace, *separator;
    CHECK(cudaMalloc(&workspace, kWorkspace));
    CHECK(cudaMalloc(&separator, 256));
    struct Shape {
        const char *name;
        int N, K;
    };
    const Shape shapes[] = {{"mlp_gate_up", 18432, 2560}, {"gdn_in", 12352, 2560}, {"attn_qkv", 10240, 2560},
                            {"out_o_proj", 2560, 4096},   {"down", 2560, 9216}};
    for (const Shape &s : shapes) run_shape(lt, stream, workspace, separator, s.name, s.N, s.K, rows);
    CHECK(cudaFree(workspace));
    CHECK(cudaFree(separator));
    CHECK_BLAS(cublasLtDestroy(lt));
    return 0;
}
