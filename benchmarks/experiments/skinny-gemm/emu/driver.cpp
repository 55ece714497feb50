
// ---- emulation driver: emu DIR M N K LDX LDY CONFIG GRID SEED RUNS ----
// Reads DIR/x.bin (M x LDX bf16 bits) and DIR/w.bin (N x K), runs the kernel RUNS times on one workspace (slots
// poisoned with NaN, counters zeroed once), each run with a NaN-poisoned y and a different block order; checks after
// every run that the counters are back to zero and that y is bit-identical to the first run; writes DIR/y.bin
// (M x LDY) and prints the plan.
#include <string>

static std::vector<unsigned char> readf(const std::string &p) {
    FILE *f = fopen(p.c_str(), "rb");
    if (!f) { perror(p.c_str()); exit(2); }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<unsigned char> b(n);
    if (fread(b.data(), 1, n, f) != size_t(n)) exit(3);
    fclose(f);
    return b;
}

template <class C>
void run(const skinny::bf16 *x, int64_t ldx, const skinny::bf16 *w, skinny::bf16 *y, int64_t ldy, int M, int64_t K,
         const skinny::Plan &plan, unsigned char *ws, unsigned seed) {
    float4 *partials = reinterpret_cast<float4 *>(ws + skinny::counters_bytes(plan));
    emu_launch(skinny::skinny_gemm_kernel<C>, dim3(unsigned(plan.grid)), dim3(C::kThreads), size_t(C::kSmemBytes),
               seed, x, ldx, w, y, ldy, M, K, plan, partials, reinterpret_cast<int *>(ws));
}

int main(int argc, char **argv) {
    if (argc != 11) { fprintf(stderr, "usage: emu DIR M N K LDX LDY CONFIG GRID SEED RUNS\n"); return 2; }
    const std::string dir = argv[1];
    const int M = atoi(argv[2]);
    const int64_t N = atoll(argv[3]), K = atoll(argv[4]), ldx = atoll(argv[5]), ldy = atoll(argv[6]);
    int config = atoi(argv[7]);
    const int64_t grid = atoll(argv[8]);
    const unsigned seed = unsigned(atoi(argv[9]));
    const int runs = atoi(argv[10]);
    if (config < 0) config = skinny::auto_config(M);
    const skinny::ConfigInfo ci = skinny::config_info(config);
    if (M > ci.bm || N % ci.bn) { fprintf(stderr, "shape does not fit config %d\n", config); return 2; }
    const skinny::Plan plan = skinny::make_plan(N, K, ci.bn, grid);

    auto xb = readf(dir + "/x.bin"), wb = readf(dir + "/w.bin");
    const size_t ybytes = size_t(M) * ldy * 2, wsbytes = skinny::workspace_bytes(plan, ci);
    std::vector<unsigned char> ws(wsbytes + 256), y(ybytes), first(ybytes);
    unsigned char *ws_al = ws.data() + (256 - reinterpret_cast<uintptr_t>(ws.data()) % 256) % 256;
    std::memset(ws_al, 0xFF, wsbytes);                        // NaN partial slots ...
    std::memset(ws_al, 0, skinny::counters_bytes(plan));      // ... and the counters zeroed once
    emu::global_ranges = {{xb.data(), xb.data() + xb.size()}, {wb.data(), wb.data() + wb.size()},
                          {y.data(), y.data() + y.size()}, {ws_al, ws_al + wsbytes}};
    const auto *x = reinterpret_cast<const skinny::bf16 *>(xb.data());
    const auto *w = reinterpret_cast<const skinny::bf16 *>(wb.data());
    auto *yp = reinterpret_cast<skinny::bf16 *>(y.data());
    for (int r = 0; r < runs; ++r) {
        std::memset(y.data(), 0xFF, ybytes);  // NaN
        switch (config) {
            case 0: run<skinny::Cfg0>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
            case 1: run<skinny::Cfg1>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
            case 2: run<skinny::Cfg2>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
            case 3: run<skinny::Cfg3>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
            case 4: run<skinny::Cfg4>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
            default: run<skinny::Cfg5>(x, ldx, w, yp, ldy, M, K, plan, ws_al, seed + r); break;
        }
        for (int64_t n = 0; n < plan.nt; ++n)
            if (reinterpret_cast<const int *>(ws_al)[n] != 0) {
                fprintf(stderr, "run %d: counter of tile %lld is %d, not 0\n", r, (long long)n,
                        reinterpret_cast<const int *>(ws_al)[n]);
                return 4;
            }
        if (r == 0) first = y;
        else if (first != y) { fprintf(stderr, "run %d differs from run 0\n", r); return 5; }
    }
    FILE *f = fopen((dir + "/y.bin").c_str(), "wb");
    fwrite(y.data(), 1, ybytes, f);
    fclose(f);
    int64_t segments = 0;
    for (int64_t n = 0; n < plan.nt; ++n)
        segments += skinny::cta_of((n + 1) * plan.kt - 1, plan) - skinny::cta_of(n * plan.kt, plan) + 1;
    printf("config %d: BM %d BN %d threads %d smem %d; plan nt %lld kt %lld grid %lld segments %lld; %d runs equal\n",
           config, ci.bm, ci.bn, ci.threads, ci.smem, (long long)plan.nt, (long long)plan.kt, (long long)plan.grid,
           (long long)segments, runs);
    return 0;
}
