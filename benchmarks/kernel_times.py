"""Where one 4B forward spends its GPU time: each op of a layer timed alone at the 4B shapes, times its count.

    python -m benchmarks.kernel_times [--lengths 128,2048] [--output FILE.json]

Each op is captured `--calls` times back to back in one CUDA graph (cs1_graph_*); per-call time = replay time /
calls (host clock around launch + sync, median of --trials). Operands are random bf16 (never zeros); the GEMM
weights rotate over several copies so the L2 cannot hold them. One prompt per length, bidirectional attention.
The per-forward estimate multiplies each op by its count (24 GDN layers, 8 attention layers, 32 MLPs).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.device_buffers import DeviceBuffers, graph_ms_per_call
from startlux_native import abi

H, I, HQ, HKV, DH, HV, HKL = 2560, 9216, 16, 4, 256, 32, 16
CONV, VDIM = 2 * HKL * 128 + HV * 128, HV * 128
N_GDN, N_ATT, N_MLP = 12352, (2 * HQ + 2 * HKV) * DH, 2 * I


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="128,512,2048,4096")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--library", default=None)
    p.add_argument("--gdn-norm", choices=("auto", "off"), default="auto",
                   help="auto: the GDN layer as the forward runs it (cs1_gdn_prefill_norm; above 640 rows its out "
                        "kernel is gdn_out_norm_mma_kernel); off: cs1_gdn_prefill then cs1_gated_rms_norm")
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    lib = abi.load(args.library)
    ffi = lib.ffi
    rng = np.random.default_rng(0)
    dev = DeviceBuffers.on_new_stream(lib, rng)
    s = dev.stream
    up, empty, rb = dev.up, dev.empty, dev.rb

    def timed(fn) -> float:
        return graph_ms_per_call(lib, s, lambda _k: fn(), args.calls, args.trials)

    hg = ffi.new("void **")
    lib.cs1_gemm_create(32 << 20, hg)
    gemm = hg[0]
    i32 = lambda q: ffi.cast("int32_t *", q)  # noqa: E731
    f32 = lambda q: ffi.cast("float *", q)  # noqa: E731
    weights = {(n, k): [up(rb(n, k, scale=k ** -0.5)) for _ in range(3)] for n, k in
               ((N_GDN, H), (N_ATT, H), (N_MLP, H), (H, VDIM), (H, I))}

    def one_length(T: int) -> dict:
        cu, pos = up(np.array([0, T], np.int32)), up(np.arange(T, dtype=np.int32))
        x = up(rb(T, H))
        proj = up(rb(T, max(N_GDN, N_ATT, N_MLP), scale=0.5))
        y = empty(T * max(N_GDN, N_ATT, N_MLP) * 2)
        conv, q, gate, k, ao = (empty(T * w * 2) for w in (CONV, HQ * DH, HQ * DH, HKV * DH, HQ * DH))
        beta, g = f32(empty(T * HV * 4)), f32(empty(T * HV * 4))
        o, ln, act, out = (empty(T * w * 2) for w in (VDIM, VDIM, I, H))
        ws_b = ffi.new("size_t *")
        lib.cs1_gdn_workspace_bytes(T, 1, HV, ws_b)
        ws = empty(ws_b[0])
        conv_w, a_log = up(rb(CONV, 4, scale=0.5)), f32(up(np.log(rng.uniform(0.05, 0.9, HV)).astype(np.float32)))
        dt_bias, norm_w = f32(up(rng.uniform(-1, 1.5, HV).astype(np.float32))), f32(up(np.ones(128, np.float32)))
        nw = up(rb(H, scale=0.1))
        qn, kn = up(rb(DH, scale=0.1)), up(rb(DH, scale=0.1))
        inv = f32(up((1.0 / np.power(1e7, np.arange(0, 64, 2) / 64)).astype(np.float32)))
        lib.cs1_gdn_conv(proj, N_GDN, conv_w, i32(pos), conv, T, CONV, s)
        lib.cs1_gdn_gates(ffi.cast("char *", proj) + 2 * (CONV + VDIM), N_GDN, a_log, dt_bias, beta, g, T, HV, s)
        lib.cs1_attn_prep_sigmoid_gate(proj, N_ATT, qn, kn, i32(pos), inv, q, gate, k, T, HQ, HKV, DH, 64, 1e-6, s)
        v = ffi.cast("char *", proj) + 2 * (2 * HQ * DH + HKV * DH)
        rot = {key: 0 for key in weights}

        def gemm_op(n, kdim, src, ld):
            def fn():
                w = weights[(n, kdim)][rot[(n, kdim)] % 3]
                rot[(n, kdim)] += 1
                lib.cs1_gemm(gemm, src, ld, w, y, n, T, n, kdim, s)
            return fn

        # counts at T rows: the last layer's tail (o, its norm, the MLP) runs on the read-out row alone in the
        # forward (CudaBackend tail_rows "auto"), so 31 of those per forward, not 32; the tail itself is not listed
        z = ffi.cast("char *", proj) + 2 * CONV
        if args.gdn_norm == "auto":  # the forward's form (CudaBackend gdn_norm "auto"): one call, the out kernel
            gdn_ops = [("gdn_prefill_norm", 24, lambda: lib.cs1_gdn_prefill_norm(  # normalises its tile > 640 rows
                conv, CONV, g, beta, i32(cu), 1, z, N_GDN, norm_w, 1, 1e-6, o, ln, ws, ws_b[0], T, HV, HKL,
                128 ** -0.5, s))]
        else:
            gdn_ops = [("gdn_prefill", 24, lambda: lib.cs1_gdn_prefill(conv, CONV, g, beta, i32(cu), 1, o, ws, ws_b[0],
                                                                       T, HV, HKL, 128 ** -0.5, s)),
                       ("gated_rms_norm", 24, lambda: lib.cs1_gated_rms_norm(o, z, N_GDN, norm_w, 1, ln, T, HV, 128,
                                                                             1e-6, s))]
        ops = [  # name, count per forward, op
            ("gemm gdn_in 12352x2560", 24, gemm_op(N_GDN, H, x, H)),
            ("gemm attn_qkv 10240x2560", 8, gemm_op(N_ATT, H, x, H)),
            ("gemm gate_up 18432x2560", 31, gemm_op(N_MLP, H, x, H)),
            ("gemm out/o 2560x4096", 31, gemm_op(H, VDIM, proj, VDIM)),
            ("gemm down 2560x9216", 31, gemm_op(H, I, proj, I)),
            ("gdn_conv_gates", 24, lambda: lib.cs1_gdn_conv_gates(proj, N_GDN, conv_w, i32(pos), conv, T, CONV,
                                                                  ffi.cast("char *", proj) + 2 * (CONV + VDIM),
                                                                  a_log, dt_bias, beta, g, HV, s)),
        ] + gdn_ops + [
            # the forward's forms (CudaBackend gate_in_prep "auto"): the gate's sigmoid in attn_prep
            ("attn_prep", 8, lambda: lib.cs1_attn_prep_sigmoid_gate(proj, N_ATT, qn, kn, i32(pos), inv, q, gate, k, T,
                                                                    HQ, HKV, DH, 64, 1e-6, s)),
            ("attention bidir", 8, lambda: lib.cs1_attention_sigmoid_gated(q, k, v, N_ATT, gate, i32(cu), 1, ao, T, HQ,
                                                                           HKV, DH, DH ** -0.5, 0, 0, s)),
            ("add_rms_norm", 63, lambda: lib.cs1_add_rms_norm(x, out, nw, act, T, H, 1e-6, s)),
            ("silu_mul", 31, lambda: lib.cs1_silu_mul(proj, N_MLP, act, T, I, s)),
        ]
        table = []
        for name, count, fn in ops:
            ms = timed(fn)
            table.append({"op": name, "count": count, "ms_per_call": ms, "ms_per_forward": ms * count})
        total = sum(r["ms_per_forward"] for r in table)
        print(f"\nT={T}: sum of ops {total:.3f} ms per forward")
        for r in sorted(table, key=lambda r: -r["ms_per_forward"]):
            print(f"  {r['op']:<26} {r['ms_per_call'] * 1e3:9.1f} us x{r['count']:<3} = {r['ms_per_forward']:8.3f} ms "
                  f"({100 * r['ms_per_forward'] / total:4.1f} %)")
        return {"tokens": T, "ops": table, "total_ms": total}
    results = [one_length(int(x)) for x in args.lengths.split(",")]
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"build_info": lib.build_info(), "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
