"""Narrow (64-query) vs wide (128-query) attention tile, timed through the library exactly as plan.json says.

    python benchmarks/attention-wide/run.py [--library target/libqwen3_5_cuda.so] [--device 0] [--output FILE]
    python benchmarks/attention-wide/run.py --quick      # 2 lengths, 3 trials: a smoke run, never evidence

Everything goes through startlux_native.abi (cs1_attention_gated_tiled, cs1_graph_*, cs1_stream_sync): one CUDA
graph per (length, mode, tile) holds `calls_per_graph` back-to-back calls; the host clock brackets launch + sync
(the ABI has no event calls), so per-call time = trial time / calls_per_graph. The outputs of the two tiles are
compared byte for byte. Writes a NEW results file (refuses to overwrite) with the verdict of plan.json's rules.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PLAN = HERE / "plan.json"
SERIES = ("narrow_a", "wide", "auto", "narrow_b")
TILE_OF = {"narrow_a": 64, "narrow_b": 64, "wide": 128, "auto": 0}


def verdict(plan: dict, rows: list[dict]) -> dict:
    """Apply plan.json's decision rules to per-(length, mode) rows: {length, mode, narrow_ms, narrow_b_ms, wide_ms,
    byte_identical}. Returns {"adopt_wide": bool, "reasons": [...], "ratios": {...}}."""
    reasons, ratios = [], {}
    if any(r.get("wide_ms") is None for r in rows):
        return {"adopt_wide": False, "reasons": ["the wide tile is unsupported on this device"], "ratios": {}}
    if not all(r["byte_identical"] for r in rows):
        bad = [f"{r['mode']} {r['length']}" for r in rows if not r["byte_identical"]]
        reasons.append(f"byte parity fails at {', '.join(bad)}")
    wins = 0
    for r in rows:
        ratio = r["wide_ms"] / r["narrow_ms"]
        noise = abs(r["narrow_b_ms"] - r["narrow_ms"]) / r["narrow_ms"]
        ratios[f"{r['mode']} {r['length']}"] = {"wide/narrow": ratio, "aa_noise": noise}
        if r["length"] < 640:
            continue
        if ratio > 1.0:
            reasons.append(f"{r['mode']} {r['length']}: wide is slower ({ratio:.3f})")
        elif ratio <= 0.90 and (1 - ratio) > 2 * noise:
            wins += 1
    if wins < 2:
        reasons.append(f"only {wins} (length, mode) points >= 640 are >= 10 % faster beyond 2x the A-A noise")
    return {"adopt_wide": not reasons, "reasons": reasons, "ratios": ratios}


class Bench:
    """Device buffers and calls for one attention shape."""

    def __init__(self, lib, device: int, shape: dict, max_len: int, seed: int):
        from startlux_native import bf16

        self.lib, self.ffi = lib, lib.ffi
        lib.cs1_set_device(device)
        p = self.ffi.new("void **")
        lib.cs1_stream_create(p)
        self.stream = p[0]
        self.hq, self.hk, self.dh = shape["Hq"], shape["Hk"], shape["Dh"]
        self.ldv, self.scale = shape["ldv"], float(shape["scale"])
        rng = np.random.default_rng(seed)
        sizes = {"q": self.hq * self.dh, "k": self.hk * self.dh, "v": self.ldv, "gate": self.hq * self.dh}
        self.buf = {}
        for name, width in sizes.items():
            host = bf16.to_bits(rng.standard_normal(max_len * width).astype(np.float32))
            host[host == 0] = bf16.to_bits(np.float32([1e-3]))[0]
            self.buf[name] = self._alloc(host.nbytes)
            self.lib.cs1_upload(self.buf[name], self.ffi.from_buffer(host), host.nbytes, self.stream)
        self.out_elems = max_len * self.hq * self.dh
        self.buf["out"] = self._alloc(self.out_elems * 2)
        self.buf["cu"] = self._alloc(8)
        self.graphs = []

    def _alloc(self, nbytes: int):
        p = self.ffi.new("void **")
        self.lib.cs1_malloc(p, nbytes)
        return p[0]

    def set_length(self, length: int) -> None:
        cu = np.array([0, length], dtype=np.int32)
        self.lib.cs1_upload(self.buf["cu"], self.ffi.from_buffer(cu), cu.nbytes, self.stream)
        self.length = length

    def call(self, causal: int, tile: int) -> None:
        b = self.buf
        self.lib.cs1_attention_gated_tiled(b["q"], b["k"], b["v"], self.ldv, b["gate"], b["cu"], 1, b["out"],
                                           self.length, self.hq, self.hk, self.dh, self.scale, causal, tile,
                                           self.stream)

    def output(self, causal: int, tile: int) -> np.ndarray:
        n = self.length * self.hq * self.dh
        self.lib.cs1_memset_async(self.buf["out"], 0xFF, n * 2, self.stream)  # poison: NaN in bf16
        self.call(causal, tile)
        host = np.empty(n, dtype=np.uint16)
        self.lib.cs1_download(self.ffi.from_buffer(host), self.buf["out"], host.nbytes, self.stream)
        return host

    def capture(self, causal: int, tile: int, calls: int):
        self.lib.cs1_graph_begin(self.stream)
        try:
            for _ in range(calls):
                self.call(causal, tile)
        finally:
            p = self.ffi.new("void **")
            self.lib.cs1_graph_end(self.stream, p)
        self.graphs.append(p[0])
        return p[0]

    def time_graph(self, graph) -> float:
        t0 = time.perf_counter()
        self.lib.cs1_graph_launch(graph, self.stream)
        self.lib.cs1_stream_sync(self.stream)
        return time.perf_counter() - t0

    def close(self) -> None:
        for g in self.graphs:
            self.lib.cs1_graph_destroy(g)
        for p in self.buf.values():
            self.lib.cs1_free(p)
        self.lib.cs1_stream_destroy(self.stream)


def measure(bench: Bench, plan: dict, lengths: list[int], trials: int) -> list[dict]:
    from startlux_native import bf16
    from startlux_native.abi import Cs1Error

    t = plan["timing"]
    rows = []
    for length in lengths:
        bench.set_length(length)
        policy = bench.ffi.new("int32_t *")
        bench.lib.cs1_attention_tile_rows(length, policy)
        for mode in plan["modes"]:
            causal = int(mode == "causal")
            row = {"length": length, "mode": mode, "policy_tile_rows": int(policy[0])}
            narrow = bench.output(causal, 64)
            try:
                wide = bench.output(causal, 128)
            except Cs1Error as exc:
                row.update(wide_ms=None, byte_identical=None, wide_error=str(exc))
                wide = None
            if wide is not None:
                diff = narrow != wide
                row["byte_identical"] = not bool(diff.any())
                row["differing_elements"] = int(diff.sum())
                row["max_abs_diff"] = float(np.max(np.abs(bf16.from_bits(narrow) - bf16.from_bits(wide))))
                row["finite"] = bool(np.isfinite(bf16.from_bits(narrow)).all())
            series = [s for s in SERIES if wide is not None or s != "wide"]
            graphs = {s: bench.capture(causal, TILE_OF[s], t["calls_per_graph"]) for s in series}
            for s in series:
                for _ in range(t["warmup_launches"]):
                    bench.time_graph(graphs[s])
            times = {s: [] for s in series}
            for trial in range(trials):
                order = series[trial % len(series):] + series[:trial % len(series)]
                for s in order:
                    times[s].append(bench.time_graph(graphs[s]) / t["calls_per_graph"] * 1e3)
            for s in series:
                key = {"narrow_a": "narrow_ms", "narrow_b": "narrow_b_ms"}.get(s, f"{s}_ms")
                row[key] = statistics.median(times[s])
                row[f"{s}_trials_ms"] = times[s]
            rows.append(row)
            print(f"{mode:>13} T={length:>5}  policy {row['policy_tile_rows']:>3}  narrow {row['narrow_ms']:.4f} ms  "
                  f"wide {row.get('wide_ms') or float('nan'):.4f} ms  auto {row['auto_ms']:.4f} ms  "
                  f"A-A {row['narrow_b_ms']:.4f} ms  bytes {'same' if row.get('byte_identical') else 'DIFFER'}",
                  flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", help="libqwen3_5_cuda.so (default: $CS1_LIBRARY or target/)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", help="results file to write (default results/sm_XX-<utc>.json; never overwritten)")
    ap.add_argument("--quick", action="store_true", help="lengths 512 and 640, 3 trials: a smoke run, not evidence")
    args = ap.parse_args(argv)

    from startlux_native import abi

    plan_bytes = PLAN.read_bytes()
    plan = json.loads(plan_bytes)
    try:
        lib = abi.load(args.library)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = [lib.ffi.new("int *") for _ in range(3)] + [lib.ffi.new("size_t *")]
    lib.cs1_device_info(args.device, *info)
    cc = f"{info[0][0]}{info[1][0]}"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = Path(args.output) if args.output else HERE / "results" / f"sm_{cc}-{stamp}.json"
    if out.exists():
        print(f"error: {out} exists; results are never overwritten", file=sys.stderr)
        return 2
    lengths = [512, 640] if args.quick else plan["lengths"]
    trials = 3 if args.quick else plan["timing"]["trials"]
    bench = Bench(lib, args.device, plan["shape"], max(lengths), args.seed)
    try:
        rows = measure(bench, plan, lengths, trials)
    finally:
        bench.close()
    result = {
        "plan": str(PLAN.relative_to(HERE.parent.parent)), "plan_sha256": hashlib.sha256(plan_bytes).hexdigest(),
        "evidence": not args.quick, "created_utc": stamp, "seed": args.seed,
        "device": {"index": args.device, "compute_capability": f"{info[0][0]}.{info[1][0]}",
                   "sm_count": info[2][0], "total_bytes": info[3][0]},
        "library": lib.path, "build_info": lib.build_info(), "lengths": lengths, "trials": trials,
        "rows": rows, "verdict": verdict(plan, rows),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x", encoding="utf-8") as f:  # "x": never overwrite
        f.write(json.dumps(result, indent=2) + "\n")
    v = result["verdict"]
    print(f"{out}: adopt wide tile: {v['adopt_wide']}" + ("" if v["adopt_wide"] else f" ({'; '.join(v['reasons'])})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
