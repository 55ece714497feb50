"""cs1_gemm's default plan (cuBLASLt's first heuristic) vs its tuned plan (cs1_gemm_tune) on the 4B's GEMM shapes.

    python benchmarks/gemm_shapes.py [--library target/libqwen3_5_cuda.so] [--device 0] [--output FILE.json]
    python benchmarks/gemm_shapes.py --rows 1,147,512 --trials 3     # a quick look

Everything goes through startlux_native.abi. Two GEMM handles, one default and one with
cs1_gemm_tune(candidates, repeats). Per (M, N, K): one eager call each makes the plan (the tuned handle times its
candidates then), then one CUDA graph per handle holds `--calls` back-to-back cs1_gemm calls whose weight pointer
rotates over a pool of copies of at least 256 MiB (more than 4x an H200's L2), so the weights stream from HBM as in
a forward pass. The host clock brackets cs1_graph_launch + cs1_stream_sync (the ABI has no events): per-call time =
trial / calls, so one launch and one sync (~10 us) are spread over the calls of both variants alike. Trials
alternate between the two graphs; the median is reported. Operands are random bf16 (never zero). The tuned output's
first rows are compared with the default's (different algorithms may round differently: a relative difference
around 1e-3 is expected). Exit status 1 if any output is non-finite.

The "forward" lines weight the five shapes by their count in one 4B forward (32 layers: 24 GDN, 8 attention):
24 x GDN in, 8 x attention qkv, 32 x gate+up, 32 x out/o_proj, 32 x down, i.e. the 128 fused GEMMs of the spec's
"cuBLAS GEMM sequence" addendum.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROWS = [1, 32, 64, 128, 147, 192, 256, 384, 512, 1024, 2048, 4096]
# (name, N, K, GEMMs of this shape in one forward of the 4B)
SHAPES = [("gdn_in", 12352, 2560, 24), ("attn_qkv", 10240, 2560, 8), ("mlp_gate_up", 18432, 2560, 32),
          ("out_o_proj", 2560, 4096, 32), ("down", 2560, 9216, 32)]
POOL_BYTES = 256 << 20
WORKSPACE = 32 << 20
COMPARE_ROWS = 64


class Bench:
    """Device buffers, a stream and the two GEMM handles."""

    def __init__(self, lib, device: int, candidates: int, repeats: int):
        self.lib, self.ffi = lib, lib.ffi
        lib.cs1_set_device(device)
        p = self.ffi.new("void **")
        lib.cs1_stream_create(p)
        self.stream = p[0]
        self.candidates, self.repeats = candidates, repeats
        self.handles: dict[str, object] = {}
        self.buffers: list = []
        self.open_handles()

    def alloc(self, nbytes: int):
        p = self.ffi.new("void **")
        self.lib.cs1_malloc(p, nbytes)
        self.buffers.append(p[0])
        return p[0]

    def free(self, ptr) -> None:
        self.buffers.remove(ptr)
        self.lib.cs1_free(ptr)

    def upload(self, ptr, host: np.ndarray) -> None:
        self.lib.cs1_upload(ptr, self.ffi.from_buffer(host), host.nbytes, self.stream)

    def open_handles(self) -> None:
        """The default handle and the tuned one (plans are per shape: each new (M, N, K) is tuned on first use)."""
        for name in ("default", "tuned"):
            p = self.ffi.new("void **")
            self.lib.cs1_gemm_create(WORKSPACE, p)
            self.handles[name] = p[0]
        self.lib.cs1_gemm_tune(self.handles["tuned"], self.candidates, self.repeats)

    def close_handles(self) -> None:
        for h in self.handles.values():
            self.lib.cs1_gemm_destroy(h)
        self.handles.clear()

    def gemm(self, which: str, x, w, y, M: int, N: int, K: int) -> None:
        self.lib.cs1_gemm(self.handles[which], x, K, w, y, N, M, N, K, self.stream)

    def plan_info(self, which: str, M: int, N: int, K: int) -> tuple[int, float]:
        idx, rows, us = self.ffi.new("int32_t *"), self.ffi.new("int64_t *"), self.ffi.new("float *")
        self.lib.cs1_gemm_plan_info(self.handles[which], M, N, K, idx, rows, us)
        return int(idx[0]), float(us[0])

    def capture(self, which: str, x, pool: list, y, M: int, N: int, K: int, calls: int, sep=None):
        """A graph of `calls` GEMMs over the weight copies, each followed by a 256-byte memset of sep if given."""
        self.lib.cs1_graph_begin(self.stream)
        p = self.ffi.new("void **")
        try:
            for i in range(calls):
                self.gemm(which, x, pool[i % len(pool)], y, M, N, K)
                if sep is not None:
                    self.lib.cs1_memset_async(sep, i & 0xFF, 256, self.stream)
        finally:
            self.lib.cs1_graph_end(self.stream, p)
        return p[0]

    def time_graph(self, graph) -> float:
        t0 = time.perf_counter()
        self.lib.cs1_graph_launch(graph, self.stream)
        self.lib.cs1_stream_sync(self.stream)
        return time.perf_counter() - t0

    def head_rows(self, y, rows: int, N: int) -> np.ndarray:
        from startlux_native import bf16

        host = np.empty((rows, N), dtype=np.uint16)
        self.lib.cs1_download(self.ffi.from_buffer(host), y, host.nbytes, self.stream)
        return bf16.from_bits(host).astype(np.float64)

    def close(self) -> None:
        self.close_handles()
        for ptr in list(self.buffers):
            self.free(ptr)
        self.lib.cs1_stream_destroy(self.stream)


def random_bf16(rng, shape, scale: float) -> np.ndarray:
    from startlux_native import bf16

    v = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    v[v == 0] = np.float32(1e-3)
    return bf16.to_bits(v)


def stage_operands(bench: Bench, rng, N: int, K: int, m_max: int) -> tuple[list, object, object]:
    """(weight copies of >= POOL_BYTES in all, x [m_max, K], y [m_max, N]) on the device; random bf16, never zero."""
    wbytes = N * K * 2
    copies = max(2, math.ceil(POOL_BYTES / wbytes))
    w_host = random_bf16(rng, (N, K), 1.0 / math.sqrt(K))
    pool = [bench.alloc(wbytes) for _ in range(copies)]
    for ptr in pool:
        bench.upload(ptr, w_host)  # same values, distinct addresses: L2 is keyed by address
    x = bench.alloc(m_max * K * 2)
    bench.upload(x, random_bf16(rng, (m_max, K), 1.0))
    return pool, x, bench.alloc(m_max * N * 2)


def measure_shape(bench: Bench, rng, name: str, N: int, K: int, rows: list[int], args) -> list[dict]:
    pool, x, y = stage_operands(bench, rng, N, K, max(rows))
    copies = len(pool)
    out = []
    try:
        for M in rows:
            heads = {}
            for which in ("default", "tuned"):
                bench.lib.cs1_memset_async(y, 0xFF, M * N * 2, bench.stream)  # NaN poison
                bench.gemm(which, x, pool[0], y, M, N, K)  # makes the plan (tuned: times the candidates)
                heads[which] = bench.head_rows(y, min(M, COMPARE_ROWS), N)
            graphs = {w: bench.capture(w, x, pool, y, M, N, K, args.calls) for w in ("default", "tuned")}
            try:
                for g in graphs.values():
                    for _ in range(args.warmup):
                        bench.time_graph(g)
                times = {"default": [], "tuned": []}
                for trial in range(args.trials):
                    order = ("default", "tuned") if trial % 2 == 0 else ("tuned", "default")
                    for which in order:
                        times[which].append(bench.time_graph(graphs[which]) / args.calls * 1e6)
            finally:
                for g in graphs.values():
                    bench.lib.cs1_graph_destroy(g)
            row = {"shape": name, "M": M, "N": N, "K": K, "weight_copies": copies}
            flop, wb = 2.0 * M * N * K, float(N * K * 2)
            for which in ("default", "tuned"):
                us = statistics.median(times[which])
                rank, tuned_us = bench.plan_info(which, M, N, K)
                row[which] = {"us": us, "tflops": flop / us * 1e-6, "weight_gbs": wb / us * 1e-3,
                              "algo_index": rank, "plan_tuned_us": tuned_us if tuned_us >= 0 else None,
                              "trials_us": times[which]}
            d, t = heads["default"], heads["tuned"]
            row["finite"] = bool(np.isfinite(d).all() and np.isfinite(t).all())
            row["tuned_vs_default_rel"] = float(np.abs(t - d).max() / max(np.abs(d).max(), 1e-30))
            row["speedup"] = row["default"]["us"] / row["tuned"]["us"]
            out.append(row)
            print_row(row)
    finally:
        for ptr in [*pool, x, y]:
            bench.free(ptr)
    return out


def print_header() -> None:
    print(f"{'shape':>12} {'M':>5} {'N':>6} {'K':>5} | {'default us':>10} {'tuned us':>9} {'speedup':>7} {'rank':>4} | "
          f"{'TFLOP/s d':>9} {'TFLOP/s t':>9} | {'GB/s d':>7} {'GB/s t':>7} | {'rel diff':>8}", flush=True)


def print_row(r: dict) -> None:
    d, t = r["default"], r["tuned"]
    flag = "" if r["finite"] else "  NON-FINITE"
    print(f"{r['shape']:>12} {r['M']:>5} {r['N']:>6} {r['K']:>5} | {d['us']:>10.2f} {t['us']:>9.2f} "
          f"{r['speedup']:>7.3f} {t['algo_index']:>4} | {d['tflops']:>9.1f} {t['tflops']:>9.1f} | "
          f"{d['weight_gbs']:>7.0f} {t['weight_gbs']:>7.0f} | {r['tuned_vs_default_rel']:>8.1e}{flag}", flush=True)


def forward_ms(rows: list[dict], time_us) -> dict[int, float]:
    """Per M: ms of the 128 fused GEMMs of one 4B forward, time_us(row) per shape, where all five were measured."""
    count = {name: n for name, _, _, n in SHAPES}
    out = {}
    for M in sorted({r["M"] for r in rows}):
        at = [r for r in rows if r["M"] == M]
        if {r["shape"] for r in at} == set(count):
            out[M] = sum(count[r["shape"]] * time_us(r) for r in at) / 1e3
    return out


def forward_sums(rows: list[dict]) -> list[dict]:
    """Per M: the 128 fused GEMMs of one 4B forward, default vs tuned."""
    d, t = forward_ms(rows, lambda r: r["default"]["us"]), forward_ms(rows, lambda r: r["tuned"]["us"])
    return [{"M": M, "default_ms": d[M], "tuned_ms": t[M], "speedup": d[M] / t[M]} for M in d]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", help="libqwen3_5_cuda.so (default: $CS1_LIBRARY or target/)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default=",".join(map(str, ROWS)), help="comma-separated M values")
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES), help="comma-separated shape names")
    ap.add_argument("--candidates", type=int, default=16, help="heuristics the tuned handle times (1..64)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per candidate")
    ap.add_argument("--calls", type=int, default=20, help="cs1_gemm calls per graph")
    ap.add_argument("--warmup", type=int, default=2, help="untimed launches per graph")
    ap.add_argument("--trials", type=int, default=9, help="timed launches per graph")
    ap.add_argument("--output", help="write the results as JSON here")
    args = ap.parse_args(argv)
    rows = [int(v) for v in args.rows.split(",") if v.strip()]
    names = [v.strip() for v in args.shapes.split(",") if v.strip()]
    unknown = set(names) - {s[0] for s in SHAPES}
    if unknown or not rows or min(rows) < 1 or args.calls < 1 or args.trials < 1 or not 1 <= args.candidates <= 64:
        ap.error(f"bad arguments (unknown shapes: {sorted(unknown)})" if unknown else "bad arguments")

    from startlux_native import abi

    try:
        lib = abi.load(args.library)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = [lib.ffi.new("int *") for _ in range(3)] + [lib.ffi.new("size_t *")]
    lib.cs1_device_info(args.device, *info)
    device = {"index": args.device, "compute_capability": f"{info[0][0]}.{info[1][0]}", "sm_count": int(info[2][0]),
              "total_bytes": int(info[3][0])}
    print(f"{lib.build_info()}  device {device}  candidates {args.candidates} x {args.repeats} repeats, "
          f"{args.calls} calls/graph, {args.trials} trials", flush=True)

    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    bench = Bench(lib, args.device, args.candidates, args.repeats)
    results = []
    try:
        print_header()
        for name, N, K, _ in SHAPES:
            if name in names:
                results += measure_shape(bench, rng, name, N, K, rows, args)
    finally:
        bench.close()
    sums = forward_sums(results)
    for s in sums:
        print(f"forward (128 GEMMs) M={s['M']:>5}: default {s['default_ms']:.3f} ms, tuned {s['tuned_ms']:.3f} ms, "
              f"x{s['speedup']:.3f}")
    elapsed = time.perf_counter() - started
    print(f"total {elapsed:.1f} s")
    if args.output:
        doc = {"created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "build_info": lib.build_info(),
               "device": device, "settings": {k: getattr(args, k) for k in
                                              ("seed", "candidates", "repeats", "calls", "warmup", "trials")},
               "pool_bytes": POOL_BYTES, "workspace_bytes": WORKSPACE, "elapsed_s": elapsed, "rows": results,
               "forward": sums}
        Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.output}")
    return 0 if all(r["finite"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
