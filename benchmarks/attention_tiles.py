"""The sm_90 warpgroup-MMA attention kernel (one head and two heads per block) against the mma.sync 64-query tile,
bidirectional, one prompt.

    python -m benchmarks.attention_tiles [--library PATH] [--lengths 128,512,...] [--trials 9] [--output FILE.json]

Same method as benchmarks/attention-wide/run.py (whose Bench class this reuses): random bf16 inputs of the 4B's
attention shape (Hq 16, Hk 4, Dh 256), one CUDA graph per (length, kernel) of 20 back-to-back calls, host clock
around launch + sync, per-call time = trial / 20, trials interleaved (narrow_a, wgmma, wgmma_pair, narrow_b
rotated), median.
narrow_b is the A-A control: the same kernel as narrow_a in its own series, so |narrow_b - narrow_a| is the noise.
Also prints, per length, the largest |difference| between the two kernels' bf16 outputs relative to the largest
|output| (the kernels sum in different orders; tests/gpu/test_attention.py holds both to a float64 reference).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHAPE = {"Hq": 16, "Hk": 4, "Dh": 256, "scale": 0.0625, "ldv": 1024}
SERIES = {"narrow_a": 64, "wgmma": -64, "wgmma_pair": -128, "narrow_b": 64}
CALLS = 20


def load_bench_class():
    path = ROOT / "benchmarks" / "attention-wide" / "run.py"
    spec = importlib.util.spec_from_file_location("attention_wide_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Bench


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", help="libqwen3_5_cuda.so (default: $CS1_LIBRARY or target/)")
    ap.add_argument("--lengths", default="128,512,1024,2048,4096,8192")
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", help="write the rows as JSON here")
    args = ap.parse_args(argv)

    from startlux_native import abi, bf16

    lib = abi.load(args.library)
    lengths = [int(x) for x in args.lengths.split(",")]
    bench = load_bench_class()(lib, 0, SHAPE, max(lengths), args.seed)
    rows = []
    try:
        for length in lengths:
            bench.set_length(length)
            narrow = bf16.from_bits(bench.output(0, 64)).astype(np.float64)
            wgmma = bf16.from_bits(bench.output(0, -64)).astype(np.float64)
            if not (np.isfinite(narrow).all() and np.isfinite(wgmma).all()):
                print(f"T={length}: non-finite output", file=sys.stderr)
                return 1
            rel = float(np.abs(narrow - wgmma).max() / np.abs(narrow).max())
            graphs = {s: bench.capture(0, tile, CALLS) for s, tile in SERIES.items()}
            names = list(SERIES)
            for s in names:
                for _ in range(3):
                    bench.time_graph(graphs[s])
            times = {s: [] for s in names}
            for trial in range(args.trials):
                for s in names[trial % len(names):] + names[:trial % len(names)]:
                    times[s].append(bench.time_graph(graphs[s]) / CALLS * 1e3)
            row = {"length": length, "rel_diff_narrow_vs_wgmma": rel,
                   **{f"{s}_ms": statistics.median(v) for s, v in times.items()}, "trials_ms": times}
            row["speedup"] = row["narrow_a_ms"] / row["wgmma_ms"]
            row["speedup_pair"] = row["narrow_a_ms"] / row["wgmma_pair_ms"]
            row["aa_noise"] = abs(row["narrow_b_ms"] - row["narrow_a_ms"]) / row["narrow_a_ms"]
            rows.append(row)
            print(f"T={length:>5}  narrow {row['narrow_a_ms']:.4f} ms  wgmma {row['wgmma_ms']:.4f} ms "
                  f"x{row['speedup']:.2f}  pair {row['wgmma_pair_ms']:.4f} ms x{row['speedup_pair']:.2f}  "
                  f"A-A {100 * row['aa_noise']:.1f} %  |narrow-wgmma|/max {rel:.2e}",
                  flush=True)
    finally:
        bench.close()
    if args.output:
        Path(args.output).write_text(json.dumps({"build": lib.build_info(), "shape": SHAPE, "calls_per_graph": CALLS,
                                                 "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
