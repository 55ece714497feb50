/* cs1.h: the whole ABI of libqwen3_5_cuda.so (Qwen3.5 hybrid forward pass for StartLux-Decision).
 *
 * Conventions
 * - Plain C, stdint/stddef types only. Device pointers, streams, graphs and GEMM handles are opaque void*.
 * - Tensors are row-major bf16 (raw uint16 bit patterns) unless a parameter is typed float* (fp32) or int32_t*.
 *   "ld" parameters are row strides in elements.
 * - Every function returns an int status: 0 = success, otherwise a code whose text is cs1_error_string(code).
 *   Ranges are disjoint: 1..999 = cudaError_t passed through, 1000..1999 = 1000 + cublasStatus_t,
 *   2000.. = library codes (enum cs1_status). The library never exits the process and never prints.
 * - Ops only enqueue work on the caller's stream (no internal synchronisation), so every op is graph-capturable.
 *   Only cs1_upload / cs1_download copy and wait, and cs1_gemm while opt-in tuning (cs1_gemm_tune) times a new
 *   shape outside a capture.
 * - Empty work (T == 0, rows == 0, n == 0) returns 0 without launching anything.
 * - Shapes and alignment are checked before each launch (CS1_ERR_SHAPE / CS1_ERR_ALIGNMENT / CS1_ERR_NULL).
 * - Variable-length rows: a batch packs n_seqs prompts back to back into T token rows. cu_seqlens (device int32,
 *   n_seqs + 1 entries, cu_seqlens[0] = 0, non-decreasing) gives each prompt's row range; positions (device int32,
 *   T entries) gives each token's 0-based position inside its prompt. Rows at or after cu_seqlens[n_seqs] are
 *   padding: they get finite values and never influence a real row.
 * - Rounding points follow transformers' modeling_qwen3_5.py in bf16 (see ../shared/spec/qwen3_5-model.md §8).
 *
 * Python (startlux_native/abi.py) reads the declarations between the CDEF markers below as its cffi cdef,
 * so keep that region free of macros and preprocessor lines. Bump CS1_ABI_VERSION on ANY change below.
 */
#ifndef CS1_H
#define CS1_H

#include <stddef.h>
#include <stdint.h>

#define CS1_ABI_VERSION 10

#ifdef __cplusplus
extern "C" {
#endif

/* CS1_CDEF_BEGIN */

enum cs1_status {
    CS1_OK = 0,
    CS1_ERR_SHAPE = 2001,        /* a size argument is out of range or inconsistent */
    CS1_ERR_ALIGNMENT = 2002,    /* a pointer or leading dimension is not aligned as the kernel needs */
    CS1_ERR_NULL = 2003,         /* a required pointer is null */
    CS1_ERR_UNSUPPORTED = 2004,  /* a configuration the kernels do not implement (head dim, arch, ...) */
    CS1_ERR_NO_DEVICE = 2005,    /* no CUDA device is visible */
    CS1_ERR_WORKSPACE = 2006,    /* the workspace passed is smaller than the size function asked for */
    CS1_ERR_GRAPH = 2007         /* graph capture misuse (null graph, end without begin, ...) */
};

/* ---- identity ---------------------------------------------------------------------------------------- */
uint32_t cs1_abi_version(void);
/* "abi=<n> arch=<sm list> cuda=<runtime version> nvcc=<version> git=<describe>" (static string) */
const char *cs1_build_info(void);
/* text for any status code (CUDA, cuBLAS or library range); never null */
const char *cs1_error_string(int status);

/* ---- device ------------------------------------------------------------------------------------------ */
/* no device or no usable driver: CS1_ERR_NO_DEVICE with *count = 0 */
int cs1_device_count(int *count);
int cs1_set_device(int device);
int cs1_get_device(int *device);
/* compute capability, multiprocessor count and total memory of a device */
int cs1_device_info(int device, int *cc_major, int *cc_minor, int *sm_count, size_t *total_bytes);
int cs1_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---- memory ------------------------------------------------------------------------------------------ */
int cs1_malloc(void **ptr, size_t bytes);
int cs1_free(void *ptr);
/* queue-only byte fill (tests poison buffers with 0xFF = NaN in bf16 and fp32) */
int cs1_memset_async(void *ptr, int value, size_t bytes, void *stream);
/* pinned (page-locked) host memory, for cs1_upload_async sources */
int cs1_host_alloc(void **ptr, size_t bytes);
int cs1_host_free(void *ptr);

/* ---- streams ----------------------------------------------------------------------------------------- */
int cs1_stream_create(void **stream);     /* a non-blocking stream */
int cs1_stream_sync(void *stream);
int cs1_stream_destroy(void *stream);

/* ---- copies ------------------------------------------------------------------------------------------ */
int cs1_upload(void *dst, const void *src, size_t bytes, void *stream);              /* H2D, then wait */
int cs1_upload_async(void *dst, const void *pinned_src, size_t bytes, void *stream); /* H2D, queued only */
int cs1_download(void *dst, const void *src, size_t bytes, void *stream);            /* D2H, then wait */
int cs1_download_async(void *pinned_dst, const void *src, size_t bytes, void *stream);/* D2H, queued only */
int cs1_copy_dd(void *dst, const void *src, size_t bytes, void *stream);             /* D2D, queued only */

/* ---- graph capture (thread-local capture mode; failures clear the sticky capture error) ---------------- */
int cs1_graph_begin(void *stream);
int cs1_graph_end(void *stream, void **graph_exec);
int cs1_graph_launch(void *graph_exec, void *stream);
int cs1_graph_destroy(void *graph_exec);

/* ---- embedding and norms ----------------------------------------------------------------------------- */
/* out[t, :] = table[ids[t], :]. ids live on the device and are not checked here (the caller validates them);
 * the kernel clamps an id outside [0, vocab) to row 0, so a bad id never reads out of bounds. */
int cs1_embed(const int32_t *ids, const void *table, void *out, int64_t T, int64_t D, int64_t vocab,
              void *stream);
/* zero-centred RMSNorm: out = bf16( x * rsqrt(mean(x^2) + eps) * (1 + w) ), fp32 inside, w bf16 [D] */
int cs1_rms_norm(const void *x, const void *w, void *out, int64_t rows, int64_t D, float eps, void *stream);
/* residual <- bf16(residual + delta) in place, then out = RMSNorm(1+w) of the rounded residual */
int cs1_add_rms_norm(void *residual, const void *delta, const void *w, void *out, int64_t rows, int64_t D,
                     float eps, void *stream);
/* cs1_add_rms_norm with the delta made from fp32 partials (cs1_gemm_split_f32's output): delta = bf16(p_0 + p_1 +
 * ... + p_{splits-1}) summed in fp32 in that order, p_s at partials + s * split_stride (floats, >= rows * D, a
 * multiple of 4), each [rows, D]; then as cs1_add_rms_norm. D % 8 == 0 and D <= 4096; 16-byte aligned pointers. */
int cs1_add_partials_rms_norm(void *residual, const float *partials, int32_t splits, int64_t split_stride,
                              const void *w, void *out, int64_t rows, int64_t D, float eps, void *stream);
/* Qwen3_5RMSNormGated over GDN output x [T, H, D] (D = 64, 128 or 256), z in rows of ldz (head h at z + h*D):
 * n = bf16(x * rsqrt(mean(x^2) + eps)); n' = w * n (rounded to bf16 when round_weighted != 0, i.e. the
 * weight was loaded in bf16); out = bf16(n' * silu(z_f32)). w is fp32 [D]. */
int cs1_gated_rms_norm(const void *x, const void *z, int64_t ldz, const float *w, int32_t round_weighted,
                       void *out, int64_t T, int64_t H, int64_t D, float eps, void *stream);

/* ---- gated DeltaNet ---------------------------------------------------------------------------------- */
/* depthwise causal conv1d (kernel 4, no bias) + SiLU over the first `channels` columns of qkv (rows of ld),
 * fp32 inside and one rounding, as causal-conv1d does: out[t, c] = bf16(silu(sum_j w[c, j] * x[t - 3 + j, c])),
 * with x[t - 3 + j] = 0 when positions[t] < 3 - j (history never crosses a prompt start).
 * w bf16 [channels, 4] (tap 3 multiplies the current token). out [T, channels]. */
int cs1_gdn_conv(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out, int64_t T,
                 int64_t channels, void *stream);
/* b = ba[t*ld + h], a = ba[t*ld + H + h]: beta = bf16-rounded sigmoid(b) (stored fp32);
 * g = -exp(A_log[h]) * softplus(a + dt_bias[h]) in fp32 (softplus linear above 20). beta, g: fp32 [T, H]. */
int cs1_gdn_gates(const void *ba, int64_t ld, const float *A_log, const float *dt_bias, float *beta, float *g,
                  int64_t T, int64_t H, void *stream);
/* cs1_gdn_conv and cs1_gdn_gates in one launch (the same bytes as the two calls), ba rows at the same stride ld as
 * qkv (both live in one projection row). channels or H may be 0 to skip that part. */
int cs1_gdn_conv_gates(const void *qkv, int64_t ld, const void *w, const int32_t *positions, void *out, int64_t T,
                       int64_t channels, const void *ba, const float *A_log, const float *dt_bias, float *beta,
                       float *g, int64_t H, void *stream);
/* workspace bytes cs1_gdn_prefill needs for T rows in n_seqs prompts with H value heads */
int cs1_gdn_workspace_bytes(int64_t T, int64_t n_seqs, int64_t H, size_t *bytes);
/* chunked (C = 64) gated delta rule, fp32 state starting at zero for every prompt.
 * qkv: conv output rows of ld: q head j at [j*128], k head j at [HK*128 + j*128], v head h at [2*HK*128 + h*128].
 * q and k are L2-normalised inside (eps 1e-6), q scaled by `scale` (1/sqrt(128)); value head h reads key head
 * h / (H / HK). o: bf16 [T, H, 128] (rows outside every prompt get zeros).
 * Up to 640 rows (T), where the device's shared memory allows (sm_80 and up), the chunk walk writes o itself
 * (three launches); otherwise a separate output kernel does. CS1_GDN_SPLIT_OUT=1 in the environment (read once per
 * device) forces the separate kernel, for tests; both give the same bytes. From 129 (65 for one short prompt) to 640
 * rows on sm_90 the prep kernel also forms the walk's P and query norms (CS1_GDN_P_IN=0: the walk forms them
 * itself; the same bytes). */
int cs1_gdn_prefill(const void *qkv, int64_t ld, const float *g, const float *beta, const int32_t *cu_seqlens,
                    int64_t n_seqs, void *o, void *workspace, size_t workspace_bytes, int64_t T, int64_t H,
                    int64_t HK, float scale, void *stream);
/* cs1_gdn_prefill, then the layer's gated RMSNorm (cs1_gated_rms_norm with D = 128) on its output: out [T, H, 128] =
 * the bytes of cs1_gated_rms_norm(o, z, ldz, norm_w, round_weighted, out, T, H, 128, eps) after cs1_gdn_prefill on
 * every row inside a prompt; rows outside every prompt get zeros. Where the separate output kernel runs (above 640
 * rows, or CS1_GDN_SPLIT_OUT=1) it normalises its own tile and o is not touched; otherwise o receives the prefill's
 * output and the norm kernel runs on it (o: scratch, bf16 [T, H, 128]). z, norm_w (fp32 [128]) and out 16-byte
 * aligned, ldz % 8 == 0, ldz >= H * 128. */
int cs1_gdn_prefill_norm(const void *qkv, int64_t ld, const float *g, const float *beta, const int32_t *cu_seqlens,
                         int64_t n_seqs, const void *z, int64_t ldz, const float *norm_w, int32_t round_weighted,
                         float eps, void *o, void *out, void *workspace, size_t workspace_bytes, int64_t T,
                         int64_t H, int64_t HK, float scale, void *stream);

/* ---- gated full attention ---------------------------------------------------------------------------- */
/* From the fused projection rows (ld): [q|gate interleaved per head: Hq*2*Dh | k: Hk*Dh | v: Hk*Dh].
 * Per-head zero-centred RMSNorm of q and k (weights bf16 [Dh], shared by heads), then NeoX rotate-half RoPE on
 * the first rotary_dim dims with cos/sin = bf16(cos/sin(positions[t] * inv_freq[i])) (inv_freq fp32
 * [rotary_dim/2]), products and sums rounded to bf16. Writes q [T, Hq, Dh], gate [T, Hq*Dh], k [T, Hk, Dh].
 * v stays in place: v = qkv + Hq*2*Dh + Hk*Dh with row stride ld. */
int cs1_attn_prep(const void *qkv, int64_t ld, const void *q_norm_w, const void *k_norm_w,
                  const int32_t *positions, const float *inv_freq, void *q, void *gate, void *k, int64_t T,
                  int64_t Hq, int64_t Hk, int64_t Dh, int64_t rotary_dim, float eps, void *stream);
/* the same, writing gate as bf16(sigmoid(gate)) (fp32 sigmoid, one rounding), for cs1_attention_sigmoid_gated:
 * the sigmoid runs here over every (token, head) in parallel instead of in the attention's epilogue; the same
 * bytes in the end */
int cs1_attn_prep_sigmoid_gate(const void *qkv, int64_t ld, const void *q_norm_w, const void *k_norm_w,
                               const int32_t *positions, const float *inv_freq, void *q, void *gate, void *k,
                               int64_t T, int64_t Hq, int64_t Hk, int64_t Dh, int64_t rotary_dim, float eps,
                               void *stream);
/* out [T, Hq*Dh] = bf16(bf16(softmax(q k^T * scale) v) * bf16(sigmoid(gate))), GQA (q head h uses kv head
 * h / (Hq/Hk)), Dh = 256, tensor cores, fp32 softmax. Causal: keys of the same prompt up to the query row.
 * Bidirectional: every key of the same prompt. Padding rows get zeros. */
int cs1_attention_gated(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                        const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq, int64_t Hk,
                        int64_t Dh, float scale, void *stream);
int cs1_attention_gated_bidirectional(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                                      const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T,
                                      int64_t Hq, int64_t Hk, int64_t Dh, float scale, void *stream);
/* the same with the kernel chosen explicitly (tests, benchmarks): causal 0/1; tile_rows 0 = automatic policy (on
 * compute capability 9.0 with a target-90 build, bidirectional calls take the wgmma kernel: CS1_ATTENTION_TILE_WGMMA,
 * or _PAIR from 1024 rows; everything else the tile cs1_attention_tile_rows names),
 * 64 = the 64-query/128-thread tile, 128 = the wide 128-query/256-thread tile (byte-identical results),
 * CS1_ATTENTION_TILE_WGMMA = the sm_90 warpgroup-MMA kernel (64 queries of one head per block; bidirectional only,
 * compute capability 9.0 and a build for target 90, else CS1_ERR_UNSUPPORTED; its bits differ from the other two),
 * CS1_ATTENTION_TILE_WGMMA_PAIR = the same with two heads of one kv head per block (Hq / Hk even; the same bytes as
 * CS1_ATTENTION_TILE_WGMMA). */
enum { CS1_ATTENTION_TILE_WGMMA = -64, CS1_ATTENTION_TILE_WGMMA_PAIR = -128 };
int cs1_attention_gated_tiled(const void *q, const void *k, const void *v, int64_t ldv, const void *gate,
                              const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq,
                              int64_t Hk, int64_t Dh, float scale, int32_t causal, int32_t tile_rows,
                              void *stream);
/* cs1_attention_gated_tiled with gate_sigmoid = bf16(sigmoid(gate)) already (cs1_attn_prep_sigmoid_gate): out =
 * bf16(bf16(attn) * gate_sigmoid), the bytes cs1_attention_gated_tiled gives for the raw gate */
int cs1_attention_sigmoid_gated(const void *q, const void *k, const void *v, int64_t ldv, const void *gate_sigmoid,
                                const int32_t *cu_seqlens, int64_t n_seqs, void *out, int64_t T, int64_t Hq,
                                int64_t Hk, int64_t Dh, float scale, int32_t causal, int32_t tile_rows,
                                void *stream);
/* workspace bytes cs1_attention_gated_rows needs for T key rows in n_seqs prompts with Hq query heads of Dh */
int cs1_attention_rows_workspace_bytes(int64_t T, int64_t n_seqs, int64_t Hq, int64_t Dh, size_t *bytes);
/* The gated attention of one query row per prompt (the read-out rows of the last layer; native/attention_rows.cu).
 * Prompt s's query and gate come from row q_rows[s] of q [*, Hq, Dh] and gate [*, Hq*Dh] (not bounds-checked: the
 * caller passes rows that exist); its keys are k [T, Hk, Dh] and v (rows of ldv, head j at v + j*Dh) at rows
 * cu_seqlens[s] .. cu_seqlens[s+1] - 1, causal: up to rows[s] only (clamped into the prompt; rows may be null when
 * causal = 0). out[s, h*Dh + d] = bf16(bf16(attn) * g), g = gate when gate_is_sigmoid = 1 (it already holds
 * bf16(sigmoid(gate)), cs1_attn_prep_sigmoid_gate) else bf16(sigmoid(gate)); an empty prompt gets zeros.
 * attn = softmax(q k^T * scale) v with fp32 scores, softmax and P.V (P is not rounded to bf16, so the bits differ
 * from cs1_attention_gated's at that row by about one bf16 step). Keys are split into 64-row chunks over the whole
 * GPU, partial results in the workspace (fp32), merged by a second launch. Dh = 256, Hq / Hk in {1, 2, 4}. */
int cs1_attention_gated_rows(const void *q, const void *gate, const int32_t *q_rows, int32_t gate_is_sigmoid,
                             const void *k, const void *v, int64_t ldv, const int32_t *cu_seqlens,
                             const int32_t *rows, int64_t n_seqs, void *out, void *workspace,
                             size_t workspace_bytes, int64_t T, int64_t Hq, int64_t Hk, int64_t Dh, float scale,
                             int32_t causal, void *stream);
/* the automatic mma.sync tile (64 or 128) for the current device and a window of `rows` query rows (causal calls,
 * and bidirectional ones where the wgmma kernel does not run) */
int cs1_attention_tile_rows(int64_t rows, int32_t *tile_rows);

/* ---- MLP ----------------------------------------------------------------------------------------------- */
/* out [T, I] = bf16(bf16(silu(gate)) * up) from gate_up rows of ld: gate = [0, I), up = [I, 2I) */
int cs1_silu_mul(const void *gate_up, int64_t ld, void *out, int64_t T, int64_t I, void *stream);

/* ---- GEMM (cuBLASLt, bf16 in/out, fp32 compute) ------------------------------------------------------- */
/* a handle owns one cuBLASLt workspace: use it from one stream at a time */
int cs1_gemm_create(size_t workspace_bytes, void **gemm);
int cs1_gemm_destroy(void *gemm);
/* y[M, N] (row stride ldy) = x[M, K] (row stride ldx) * w[N, K]^T (w contiguous, nn.Linear layout).
 * K, ldx and ldy multiples of 8 and x, w, y 16-byte aligned, else CS1_ERR_ALIGNMENT. */
int cs1_gemm(void *gemm, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M, int64_t N,
             int64_t K, void *stream);
/* K split into `splits` (2..16) equal slices, one strided-batched cuBLASLt call: partials[s] [M, N] fp32 (row
 * stride N, partials + s * M * N) = x[:, s k:(s + 1) k] * w[:, s k:(s + 1) k]^T with k = K / splits (a multiple of
 * 8), N % 4 == 0; the caller adds the partials (cs1_add_partials_rms_norm). Plans: cuBLASLt's first choice. */
int cs1_gemm_split_f32(void *gemm, const void *x, int64_t ldx, const void *w, float *partials, int64_t M, int64_t N,
                       int64_t K, int32_t splits, void *stream);
/* opt-in: new plans time `candidates` heuristics on the call's operands and wait for the stream; 0 = off (gemm.cu) */
int cs1_gemm_tune(void *gemm, int32_t candidates, int32_t repeats);
/* Pin the plans this handle makes from now on for (M, N, K), any ld or alignment, to cuBLASLt's heuristic #rank
 * (0..63) of the same problem asked at query_rows rows (a table measured offline: benchmarks/gemm_pins.py). If that
 * algorithm does not exist, fails cublasLtMatmulAlgoCheck at M rows or needs more workspace than the handle has,
 * the plan is the default one. Plans made before stay; tuning (cs1_gemm_tune), when on, ignores pins.
 * rank < 0 removes the pin. */
int cs1_gemm_pin(void *gemm, int64_t M, int64_t N, int64_t K, int64_t query_rows, int32_t rank);
/* cublasLtGetVersion() of the cuBLASLt loaded: a pin table is only valid for the version it was measured with */
int cs1_gemm_blas_version(size_t *version);
/* a plan's heuristic rank (0 = first), the rows its heuristic list was asked at (M unless a pin applied) and its
 * median us while tuning (-1: untimed); CS1_ERR_SHAPE if (M, N, K) has none */
int cs1_gemm_plan_info(void *gemm, int64_t M, int64_t N, int64_t K, int32_t *algo_index, int64_t *query_rows,
                       float *tuned_us);
/* The weight-streaming kernel (gemm_stream.cu: Hopper TMA + wgmma, every block holds all M rows) with an explicit
 * configuration: block_n output columns per block (64, 80, 96, 128 or 144), the K range split `splits` ways
 * (1..16; splits > 1 adds fp32 partials from the handle's workspace in a fixed order, so results are deterministic;
 * splits <= ceil(K / 64) and splits * M * N * 4 bytes <= 24 MiB), and clusters of `cluster` column tiles (1 or 2)
 * that share each x load (TMA multicast). M <= 256 (<= 192 for block_n 128 and 144: registers), N and K
 * multiples of 8, the rest as cs1_gemm.
 * CS1_ERR_UNSUPPORTED unless the library holds the sm_90a kernels and the device is compute capability 9.0
 * (CS1_ERR_NO_DEVICE without a device).
 * Calls on one handle must not run concurrently (they share the split-K workspace, 24 MiB, which the handle's
 * first call allocates: make it outside a graph capture; a failed allocation returns its CUDA status). Not used by
 * the forward pass: slower than cuBLASLt at every shape of the 4B so far (benchmarks/LEVERS.md, lever 26). */
int cs1_gemm_stream(void *gemm, const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M,
                    int64_t N, int64_t K, int32_t block_n, int32_t splits, int32_t cluster, void *stream);

/* ---- letter read-out ----------------------------------------------------------------------------------- */
/* For each prompt r: row t = last_rows[r] (not bounds-checked: the caller passes rows < T);
 * h = bf16(residual[t] + delta[t]) (delta may be null: h = residual[t]);
 * y = RMSNorm(1+w)(h) rounded to bf16; logits[r, j] = sum_d float(y[d]) * letters[j, d] in fp32.
 * letters: fp32 [n_letters, D]; logits: fp32 [n_rows, n_letters]. D <= 12256 (one fp32 row in 48 KiB of shared
 * memory beside the kernel's scratch), else CS1_ERR_SHAPE. */
int cs1_letter_readout(const void *residual, const void *delta, const int32_t *last_rows, int64_t n_rows,
                       const void *final_norm_w, const float *letters, int64_t n_letters, float *logits, int64_t D,
                       float eps, void *stream);
/* dst[r, 0:width] = src[rows[r], 0:width] for r < n (bf16 rows; rows on the device; a row index outside
 * [0, src_rows) gives a row of zeros). The forward gathers each prompt's last row with it so that the last layer's
 * row-wise tail (output projection, norm, MLP) runs on those n rows alone. ld_src, ld_dst >= width. */
int cs1_gather_rows(const void *src, int64_t ld_src, int64_t src_rows, const int32_t *rows, int64_t n, void *dst,
                    int64_t ld_dst, int64_t width, void *stream);

/* CS1_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* CS1_H */
