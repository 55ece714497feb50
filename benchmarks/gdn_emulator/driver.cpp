// ---- emulation driver: one cs1_gdn_prefill (index, prep, walk[, out]) on files written by check.py ----
// WALK is the walk kernel instantiation to run, e.g. gdn_walk_mma_kernel<2, true> (set by check.py with -DWALK=...).
#include <string>
static std::vector<char> readf(const std::string &p) {
    FILE *f = fopen(p.c_str(), "rb");
    if (!f) { perror(p.c_str()); exit(2); }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<char> b(n + 64);
    if (fread(b.data(), 1, n, f) != (size_t)n) exit(3);
    fclose(f);
    return b;
}
static void writef(const std::string &p, const void *d, size_t n) {
    FILE *f = fopen(p.c_str(), "wb");
    fwrite(d, 1, n, f);
    fclose(f);
}
static void *amalloc(size_t n, int fill) {
    void *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    memset(p, fill, n);
    return p;
}
template <class V> static V *copy_in(const std::vector<char> &b) {
    V *p = (V *)amalloc(b.size(), 0);
    memcpy(p, b.data(), b.size());
    return p;
}

#ifdef GDN_OUT_NORM
// norm.cu's gated_rms_norm_vec_kernel<128> (16 lanes per (token, head), 8 warps), the two-call path's second call,
// on the shared gated_norm.cuh functions (norm.cu itself is not part of the emulated source)
void ref_gated_norm_kernel(const bf16 *x, const bf16 *z, int64_t ldz, const float *w, int rw, bf16 *out, int64_t T,
                           int64_t H, float eps) {
    const int lane = threadIdx.x & 31, sub = lane % 16;
    float wv[8];
    gated_norm_weights(w, sub, wv);
    const int64_t base = (int64_t(blockIdx.x) * 8 + (threadIdx.x >> 5)) * 2, item = base + lane / 16;
    const bool valid = item < T * H;
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    Pack8 zp;
    if (valid) {
        const Pack8 xp = reinterpret_cast<const Pack8 *>(x + item * 128)[sub];
        zp = reinterpret_cast<const Pack8 *>(z + (item / H) * ldz + (item % H) * 128)[sub];
        for (int e = 0; e < 8; ++e) v[e] = bf2f(xp.v[e]);
    }
    const float inv = gated_norm_inv<16>(v, eps);
    if (valid) reinterpret_cast<Pack8 *>(out + item * 128)[sub] = gated_norm_pack8(v, zp, wv, inv, rw);
}
#endif

int main(int argc, char **argv) {
    if (argc != 9) { fprintf(stderr, "usage: emu DIR T H HK LD N_SEQS SCALE\n"); return 2; }
    const std::string dir = argv[2];
    const int64_t T = atoll(argv[3]), H = atoll(argv[4]), HK = atoll(argv[5]), ld = atoll(argv[6]), n = atoll(argv[7]);
    const float scale = atof(argv[8]);
    bf16 *x = copy_in<bf16>(readf(dir + "/qkv.bin"));
    float *g = copy_in<float>(readf(dir + "/g.bin")), *beta = copy_in<float>(readf(dir + "/beta.bin"));
    int32_t *cu = copy_in<int32_t>(readf(dir + "/cu.bin"));
    Layout lay(T, n, H);
    unsigned char *ws = (unsigned char *)amalloc(lay.total, 0xFF);  // poisoned, as the GPU tests do
    const size_t obytes = T * H * 128 * 2;
    bf16 *o = (bf16 *)amalloc(obytes, 0xFF);
    const int64_t nc = (T + kC - 1) / kC + n;
#ifdef GDN_PREP_INDEX  // prep blocks compute the index themselves up to kPrepIndexMaxSeqs prompts
    const bool prep_indexes = n <= kPrepIndexMaxSeqs;
#else
    const bool prep_indexes = false;
#endif
    if (!prep_indexes)
        emu_launch(gdn_index_kernel, dim3(1), dim3(32), (const int32_t *)cu, int(n), int(T),
                   (int32_t *)(ws + lay.seq_start), (int32_t *)(ws + lay.chunk_off));
#ifdef GDN_WALK_OUT  // prep zeroes the padding rows; the walk writes O itself when GDN_WALK_OUT is 1
#ifdef GDN_PREP_P  // prep is a template: with P and qs for the walk that reads them, or without
#ifdef GDN_PREP_ROLLED  // check.py --prep-rolled: the solve's rows 32-63 as a loop (lever 73c)
#define GDN_PREP gdn_prep_mma_kernel<bool(GDN_WALK_PIN), true>
#else
#define GDN_PREP gdn_prep_mma_kernel<bool(GDN_WALK_PIN)>
#endif
#else
#define GDN_PREP gdn_prep_mma_kernel
#endif
    emu_launch(GDN_PREP, dim3(nc, H), dim3(kThreads), (const bf16 *)x, ld, (const float *)g,
               (const float *)beta,
#ifdef GDN_PREP_INDEX
               (const int32_t *)(prep_indexes ? cu : nullptr),
#endif
               int(n), int(T), int(H), int(HK),
#ifdef GDN_PREP_P
               scale,
#endif
               ws, lay, o);
    if (getenv("GDN_EMU_DUMP_UW")) {  // check.py --prep-precision: prep's U and W, before a walk without O overwrites U
        writef(dir + "/u.bin", ws + lay.u, lay.w - lay.u);
        writef(dir + "/w.bin", ws + lay.w, lay.s0 - lay.w);
    }
    if (n > 0)
        emu_launch(WALK, dim3(n, H, kD / kSlab), dim3(kThreads), (const bf16 *)x, ld, int(H), int(HK), scale, ws, lay,
                   o);
    if (!GDN_WALK_OUT)
        emu_launch(gdn_out_mma_kernel, dim3(nc, H), dim3(kThreads), (const bf16 *)x, ld, int(n), int(H), int(HK),
                   scale, ws, lay, o);
#else
    emu_launch(gdn_prep_mma_kernel, dim3(nc, H), dim3(kThreads), (const bf16 *)x, ld, (const float *)g,
               (const float *)beta, int(n), int(H), int(HK), ws, lay);
    if (n > 0) emu_launch(WALK, dim3(n, H, kD / kSlab), dim3(kThreads), (const bf16 *)x, ld, int(H), int(HK), ws, lay);
    emu_launch(gdn_out_mma_kernel, dim3(nc, H), dim3(kThreads), (const bf16 *)x, ld, int(n), int(T), int(H), int(HK),
               scale, ws, lay, o);
#endif
    writef(dir + "/o.bin", o, obytes);
#ifdef GDN_OUT_NORM  // check.py --norm: the out kernel with the gated RMSNorm folded in, against the norm kernel on o
    if (getenv("GDN_EMU_NORM") && !GDN_WALK_OUT && n > 0) {
        const int64_t ldz = H * 128 + 8;
        bf16 *z = copy_in<bf16>(readf(dir + "/z.bin"));
        float *w = copy_in<float>(readf(dir + "/w.bin"));
        const int rw = atoi(getenv("GDN_EMU_NORM"));
        const float eps = 1e-6f;
        bf16 *ref = (bf16 *)amalloc(obytes, 0xFF), *fused = (bf16 *)amalloc(obytes, 0xFF);
        emu_launch(ref_gated_norm_kernel, dim3(unsigned((T * H + 15) / 16)), dim3(256), (const bf16 *)o,
                   (const bf16 *)z, ldz, (const float *)w, rw, ref, T, H, eps);
        emu_launch(gdn_out_norm_mma_kernel, dim3(nc, H), dim3(kThreads), (const bf16 *)x, ld, int(n), int(H),
                   int(HK), scale, ws, lay, fused, OutNorm{z, ldz, w, rw, eps});
        writef(dir + "/norm_ref.bin", ref, obytes);
        writef(dir + "/norm_fused.bin", fused, obytes);
    }
#endif
    return 0;
}
