"""Probe: the MLP of one layer (gate/up GEMM -> SiLU-mul -> down GEMM) over all T rows at once, against the same
three ops over row blocks of B rows, in CUDA graphs (lever 67's question, written in session 22).

    python -m benchmarks.mlp_blocks [--lengths 1024,2048,4096] [--blocks 256,512,1024] [--calls 8] [--trials 5]

Why: at 2048 rows SiLU-mul reads the gate/up output (2048 x 18432 bf16, 75 MB) and writes 38 MB, ~33 us per layer
at ~3.4 TB/s (op_spans: 1.05 ms per forward), because 75 MB does not stay in the 60 MiB L2. Over row blocks the
gate/up output of one block (B = 512: 19 MB) might still be in L2 when SiLU-mul and the down GEMM read it; the
GEMMs stay FLOP-bound down to a few hundred rows, but each weight byte is then read T / B times.
What: each trial replays a graph of --calls MLPs (weights rotating over 3 copies, so L2 never holds a layer's 141 MB
of weights from the call before, as in a forward); per-MLP time = replay / calls, median of --trials. The blocked
form writes the same rows of the same buffers (gate/up output, activation, MLP output) block after block. For each
(T, B) it prints both times, the difference, and max |y_blocked - y_whole| over the MLP output (0 when cuBLASLt
picks plans whose sums do not depend on M; a non-zero value means the blocked form would change the forward's
bytes).
Needs a CUDA device (exits 2 without one). Operands are random (never zeros); outputs are poisoned first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from benchmarks.device_buffers import DeviceBuffers, graph_ms_per_call
from startlux_native import abi, bf16

H, I = 2560, 9216
N_MLP = 2 * I


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1024,2048,4096")
    p.add_argument("--blocks", default="256,512,1024", help="row-block sizes B (multiples of 16; B < T is timed)")
    p.add_argument("--calls", type=int, default=8, help="MLPs per graph replay")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--library", default=None)
    p.add_argument("--output", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    blocks = [int(x) for x in args.blocks.split(",")]
    if any(b <= 0 or b % 16 for b in blocks) or any(t <= 0 for t in lengths) or args.calls < 1 or args.trials < 1:
        p.error("lengths and calls must be positive; blocks positive multiples of 16")
    lib = abi.load(args.library)
    n = lib.ffi.new("int *")
    try:
        lib.cs1_device_count(n)
    except abi.Cs1Error as exc:
        print(f"mlp_blocks: {exc}", file=sys.stderr)
        return 2
    ffi = lib.ffi
    rng = np.random.default_rng(0)
    dev = DeviceBuffers.on_new_stream(lib, rng)
    s = dev.stream
    hg = ffi.new("void **")
    lib.cs1_gemm_create(32 << 20, hg)
    gemm = hg[0]
    w_up = [dev.up(dev.rb(N_MLP, H, scale=H ** -0.5)) for _ in range(3)]
    w_down = [dev.up(dev.rb(H, I, scale=I ** -0.5)) for _ in range(3)]

    def rows(ptr, r0: int, width: int):
        return ffi.cast("char *", ptr) + 2 * r0 * width

    def mlp(x, gu, act, y, T: int, B: int, k: int):
        """One MLP with weight copy k % 3, over row blocks of B rows (B >= T: all rows at once)."""
        wu, wd = w_up[k % 3], w_down[k % 3]
        for r0 in range(0, T, min(B, T)):
            m = min(B, T - r0)
            lib.cs1_gemm(gemm, rows(x, r0, H), H, wu, rows(gu, r0, N_MLP), N_MLP, m, N_MLP, H, s)
            lib.cs1_silu_mul(rows(gu, r0, N_MLP), N_MLP, rows(act, r0, I), m, I, s)
            lib.cs1_gemm(gemm, rows(act, r0, I), I, wd, rows(y, r0, H), H, m, H, I, s)

    def timed(T: int, B: int, x, gu, act, y) -> float:
        return graph_ms_per_call(lib, s, lambda k: mlp(x, gu, act, y, T, B, k), args.calls, args.trials)

    def output(T: int, B: int, x, gu, act, y) -> np.ndarray:
        lib.cs1_memset_async(y, 0xFF, T * H * 2, s)  # poisoned: a row the blocks miss stays NaN
        mlp(x, gu, act, y, T, B, 0)
        out = np.empty((T, H), np.uint16)
        lib.cs1_download(ffi.from_buffer(out), y, out.nbytes, s)
        return bf16.from_bits(out).astype(np.float64)

    table = []
    print(f"{'T':>6} {'B':>6} {'whole us':>10} {'blocks us':>10} {'blocks - whole':>15} {'max |dy|':>10}")
    for T in lengths:
        x = dev.up(dev.rb(T, H))
        gu, act, y = dev.empty(T * N_MLP * 2), dev.empty(T * I * 2), dev.empty(T * H * 2)
        ref = output(T, T, x, gu, act, y)
        if not np.isfinite(ref).all():
            print(f"mlp_blocks: non-finite MLP output at T={T}", file=sys.stderr)
            return 1
        for B in [b for b in blocks if b < T]:
            got = output(T, B, x, gu, act, y)
            if not np.isfinite(got).all():  # poison left: the blocks missed rows
                print(f"mlp_blocks: non-finite blocked output at T={T}, B={B}", file=sys.stderr)
                return 1
            dy = float(np.max(np.abs(got - ref)))
            # whole and blocked alternate, so a drift of the card's clock reaches both alike
            whole, blocked = [], []
            for _ in range(2):
                whole.append(timed(T, T, x, gu, act, y))
                blocked.append(timed(T, B, x, gu, act, y))
            w_us, b_us = statistics.median(whole) * 1e3, statistics.median(blocked) * 1e3
            print(f"{T:>6} {B:>6} {w_us:>10.1f} {b_us:>10.1f} {b_us - w_us:>+15.1f} {dy:>10.3g}")
            table.append({"tokens": T, "block_rows": B, "whole_us": w_us, "blocks_us": b_us, "max_abs_dy": dy})
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"build_info": lib.build_info(), "results": table}, f, indent=2)
    dev.free_all()
    lib.cs1_gemm_destroy(gemm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
