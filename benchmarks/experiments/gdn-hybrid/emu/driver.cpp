
// ---- emulation driver ----
#include <string>
static std::vector<char> readf(const std::string &p) {
    FILE *f = fopen(p.c_str(), "rb"); if (!f) { perror(p.c_str()); exit(2); }
    fseek(f, 0, SEEK_END); long n = ftell(f); fseek(f, 0, SEEK_SET);
    std::vector<char> b(n + 64); if (fread(b.data(), 1, n, f) != (size_t)n) exit(3); fclose(f); return b;
}
static void writef(const std::string &p, const void *d, size_t n) { FILE *f = fopen(p.c_str(), "wb"); fwrite(d, 1, n, f); fclose(f); }
static void *amalloc(size_t n, int fill) { void *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256); memset(p, fill, n); return p; }

int main(int argc, char **argv) {
    std::string mode = argv[1], dir = argv[2];
    if (mode == "prefill") {
        const int64_t T = atoll(argv[3]), H = atoll(argv[4]), HK = atoll(argv[5]), ld = atoll(argv[6]), n = atoll(argv[7]);
        const float scale = atof(argv[8]);
        auto qb = readf(dir + "/qkv.bin"), gb = readf(dir + "/g.bin"), bb = readf(dir + "/beta.bin"), cb = readf(dir + "/cu.bin");
        bf16 *x = (bf16 *)amalloc(qb.size(), 0); memcpy(x, qb.data(), qb.size());
        float *g = (float *)amalloc(gb.size(), 0); memcpy(g, gb.data(), gb.size());
        float *beta = (float *)amalloc(bb.size(), 0); memcpy(beta, bb.data(), bb.size());
        int32_t *cu = (int32_t *)amalloc(cb.size(), 0); memcpy(cu, cb.data(), cb.size());
        Layout lay(T, n, H);
        unsigned char *ws = (unsigned char *)amalloc(lay.total, 0xFF);
        const size_t obytes = T * H * 128 * 2;
        bf16 *o = (bf16 *)amalloc(obytes, 0xFF);
        const int64_t nc = (T + kC - 1) / kC + n;
        emu_launch(gdn_index_kernel, dim3(1), dim3(32), (const int32_t *)cu, int(n), int(T),
                   (int32_t *)(ws + lay.seq_start), (int32_t *)(ws + lay.chunk_off));
        emu_launch(gdn_prep_kernel, dim3(nc, H, kD / kPrepCols), dim3(kThreads), (const bf16 *)x, ld, (const float *)g, (const float *)beta,
                   int(n), int(H), int(HK), ws, lay);
        if (n > 0) emu_launch(gdn_walk_mma_kernel<2>, dim3(n, H, kD / kSlab), dim3(kThreads), (const bf16 *)x, ld, int(H), int(HK), ws, lay);
        emu_launch(gdn_out_kernel, dim3(nc, H, kD / kOutCols), dim3(kThreads), (const bf16 *)x, ld, int(n), int(T), int(H), int(HK), scale, ws, lay, o);
        writef(dir + "/o.bin", o, obytes);
        printf("workspace %zu bytes\n", lay.total);
    }
    return 0;
}
