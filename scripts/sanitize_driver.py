"""Drive every kernel once per size under compute-sanitizer (4B head shapes, three packed prompts per batch; the GDN
prefill also with one prompt over all rows).

    compute-sanitizer --tool memcheck python3 scripts/sanitize_driver.py 640 1024 4096
    compute-sanitizer --tool racecheck --kernel-name kns=gdn_ python3 scripts/sanitize_driver.py --no-cublas 160 1024

--no-cublas leaves out the one cuBLAS GEMM: racecheck stops on it with "Internal Sanitizer Error: The Sanitizer failed
to handle a hardware exception" (H200, CUDA 13.0, session 28), even with a kernel filter that excludes it.
"""

import sys

import numpy as np

from benchmarks.device_buffers import DeviceBuffers
from startlux_native import abi

lib = abi.load()
ffi = lib.ffi
rng = np.random.default_rng(0)
dev = DeviceBuffers.on_new_stream(lib, rng)
stream = dev.stream
up, empty, rb = dev.up, dev.empty, dev.rb


def i32(p):
    return ffi.cast("int32_t *", p)


def f32(p):
    return ffi.cast("float *", p)


Hq, Hk, Dh, H, HK = 16, 4, 256, 32, 16
no_cublas = "--no-cublas" in sys.argv[1:]
for T in [int(a) for a in sys.argv[1:] if a != "--no-cublas"]:
    pad = 37 if T > 200 else 0  # trailing padding rows: the kernels' padding paths run under the sanitizer too
    lens = [T // 2 + 1, T // 3, T - (T // 2 + 1) - T // 3 - pad]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    pos = np.concatenate([np.arange(n) for n in lens] + [np.zeros(pad)]).astype(np.int32)
    d_cu, d_pos = i32(up(cu)), i32(up(pos))
    ld_a = (2 * Hq + 2 * Hk) * Dh
    qkv = up(rb(T, ld_a))
    q, gate, k, o = empty(T * Hq * Dh * 2), empty(T * Hq * Dh * 2), empty(T * Hk * Dh * 2), empty(T * Hq * Dh * 2)
    inv = np.float32(1) / np.power(np.float32(1e7), np.arange(0, 64, 2, dtype=np.float32) / np.float32(64))
    lib.cs1_attn_prep(qkv, ld_a, up(rb(Dh, scale=0.1)), up(rb(Dh, scale=0.1)), d_pos, f32(up(inv.astype(np.float32))),
                      q, gate, k, T, Hq, Hk, Dh, 64, 1e-6, stream)
    v = ffi.cast("char *", qkv) + 2 * (2 * Hq * Dh + Hk * Dh)
    lib.cs1_attention_gated(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, stream)
    lib.cs1_attention_gated_bidirectional(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, stream)
    for causal in (0, 1):
        for tile in (64, 128):
            lib.cs1_attention_gated_tiled(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, causal, tile,
                                          stream)
    # the gate's sigmoid in attn_prep, then the attention that takes it (automatic kernel, causal and not)
    lib.cs1_attn_prep_sigmoid_gate(qkv, ld_a, up(rb(Dh, scale=0.1)), up(rb(Dh, scale=0.1)), d_pos,
                                   f32(up(inv.astype(np.float32))), q, gate, k, T, Hq, Hk, Dh, 64, 1e-6, stream)
    for causal in (0, 1):
        lib.cs1_attention_sigmoid_gated(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, causal, 0, stream)
    # keys alone at every row and queries alone at the read-out rows (tail_query: attn_prep with Hq = 0 / Hk = 0)
    lib.cs1_attn_prep_sigmoid_gate(ffi.cast("char *", qkv) + 2 * 2 * Hq * Dh, ld_a, up(rb(Dh, scale=0.1)),
                                   up(rb(Dh, scale=0.1)), d_pos, f32(up(inv.astype(np.float32))), q, gate, k, T, 0,
                                   Hk, Dh, 64, 1e-6, stream)
    qg_rows = up(rb(3, 2 * Hq * Dh))
    lib.cs1_attn_prep_sigmoid_gate(qg_rows, 2 * Hq * Dh, up(rb(Dh, scale=0.1)), up(rb(Dh, scale=0.1)),
                                   i32(up((np.array(lens) - 1).astype(np.int32))), f32(up(inv.astype(np.float32))),
                                   q, gate, k, 3, Hq, 0, Dh, 64, 1e-6, stream)
    # the read-out rows' attention (each prompt's last row; causal from a row inside the prompt), with the workspace
    # sized exactly
    rows_ws = ffi.new("size_t *")
    lib.cs1_attention_rows_workspace_bytes(T, 3, Hq, Dh, rows_ws)
    last = i32(up((cu[1:] - 1).astype(np.int32)))
    mid = i32(up((cu[:-1] + np.array(lens) // 2).astype(np.int32)))
    for causal, rows_at in ((0, last), (1, mid)):
        lib.cs1_attention_gated_rows(q, gate, last, 1, k, v, ld_a, d_cu, rows_at, 3, o, empty(int(rows_ws[0])),
                                     int(rows_ws[0]), T, Hq, Hk, Dh, Dh ** -0.5, causal, stream)
    conv_dim, ld_g = 2 * HK * 128 + H * 128, 12352
    proj = up(rb(T, ld_g))
    conv = empty(T * conv_dim * 2)
    lib.cs1_gdn_conv(proj, ld_g, up(rb(conv_dim, 4, scale=0.5)), d_pos, conv, T, conv_dim, stream)
    beta, g = f32(empty(T * H * 4)), f32(empty(T * H * 4))
    lib.cs1_gdn_gates(ffi.cast("char *", proj) + 2 * (conv_dim + H * 128), ld_g,
                      f32(up(np.log(rng.uniform(0.05, 0.9, H)).astype(np.float32))),
                      f32(up(rng.uniform(-1, 1.5, H).astype(np.float32))), beta, g, T, H, stream)
    lib.cs1_gdn_conv_gates(proj, ld_g, up(rb(conv_dim, 4, scale=0.5)), d_pos, conv, T, conv_dim,
                           ffi.cast("char *", proj) + 2 * (conv_dim + H * 128),
                           f32(up(np.log(rng.uniform(0.05, 0.9, H)).astype(np.float32))),
                           f32(up(rng.uniform(-1, 1.5, H).astype(np.float32))), beta, g, H, stream)
    wsb = ffi.new("size_t *")
    lib.cs1_gdn_workspace_bytes(T, 3, H, wsb)
    ws, go = empty(int(wsb[0])), empty(T * H * 128 * 2)
    lib.cs1_gdn_prefill(conv, conv_dim, g, beta, d_cu, 3, go, ws, int(wsb[0]), T, H, HK, 128 ** -0.5, stream)
    # one prompt over all T rows too: at 65-192 rows prep's grid then fits one wave (prep then makes P, GdnPath::sms),
    # which three packed prompts never reach
    ws1b = ffi.new("size_t *")
    lib.cs1_gdn_workspace_bytes(T, 1, H, ws1b)
    lib.cs1_gdn_prefill(conv, conv_dim, g, beta, i32(up(np.array([0, T], np.int32))), 1, go, empty(int(ws1b[0])),
                        int(ws1b[0]), T, H, HK, 128 ** -0.5, stream)
    ln = empty(T * H * 128 * 2)
    lib.cs1_gated_rms_norm(go, ffi.cast("char *", proj) + 2 * conv_dim, ld_g,
                           f32(up(np.ones(128, np.float32))), 1, ln, T, H, 128, 1e-6, stream)
    # gdn_norm: the prefill and the norm in one call (above 256 rows the out kernel normalises its own tile)
    go_norm, ln_norm = empty(T * H * 128 * 2), empty(T * H * 128 * 2)
    lib.cs1_gdn_prefill_norm(conv, conv_dim, g, beta, d_cu, 3, ffi.cast("char *", proj) + 2 * conv_dim, ld_g,
                             f32(up(rng.uniform(0.5, 1.5, 128).astype(np.float32))), 1, 1e-6, go_norm, ln_norm, ws,
                             int(wsb[0]), T, H, HK, 128 ** -0.5, stream)
    x, out = up(rb(T, 2560)), empty(T * 2560 * 2)
    lib.cs1_rms_norm(x, up(rb(2560, scale=0.1)), out, T, 2560, 1e-6, stream)
    out2 = empty(T * 2560 * 2)
    lib.cs1_add_rms_norm(x, out, up(rb(2560, scale=0.1)), out2, T, 2560, 1e-6, stream)
    act = empty(T * 9216 * 2)
    gu = up(rb(T, 18432))
    lib.cs1_silu_mul(gu, 18432, act, T, 9216, stream)
    hg = ffi.new("void **")
    lib.cs1_gemm_create(32 << 20, hg)
    if not no_cublas:
        lib.cs1_gemm(hg[0], act, 9216, up(rb(2560, 9216, scale=0.01)), out, 2560, T, 2560, 9216, stream)
    tail = empty(3 * 2560 * 2)  # the read-out rows, one of them outside [0, T) (a row of zeros)
    lib.cs1_gather_rows(out, 2560, T, i32(up(np.array([T - 1, 0, T + 5], np.int32))), 3, tail, 2560, 2560, stream)
    logits = f32(empty(3 * 26 * 4))
    lib.cs1_letter_readout(x, out, i32(up((cu[1:] - 1).astype(np.int32))), 3, up(rb(2560, scale=0.1)),
                           f32(up(rng.standard_normal((26, 2560)).astype(np.float32))), 26, logits, 2560, 1e-6,
                           stream)
    lib.cs1_stream_sync(stream)
    lib.cs1_gemm_destroy(hg[0])
    dev.free_all()
    print(f"T={T}: all kernels ran", flush=True)
print("sanitizer driver done")
