"""The weight-streaming wgmma GEMM (cs1_gemm_stream) against cs1_gemm's cuBLASLt plan on the 4B's GEMM shapes.

    python benchmarks/gemm_stream.py [--library target/libqwen3_5_cuda.so] [--rows 128,160] [--output FILE.json]

Per (shape, M): cuBLASLt's default plan and every stream configuration (block_n, splits) whose grid is between
half a wave and one wave of the device's SMs. Each variant is one CUDA graph of `--calls` back-to-back calls whose
weight pointer rotates over a pool of copies of at least 256 MiB (weights stream from HBM, as in a forward pass);
host clock around launch + sync, per call = trial / calls; trials alternate over the variants; the median is
reported with the weight bandwidth it implies. Before timing, every stream variant's output is compared with
cuBLASLt's on the same operands (relative difference on all rows; a bf16 rounding apart is ~4e-3): a variant above
2e-2 is reported as WRONG and the exit status is 1. Operands are random bf16 (never zero).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gemm_shapes import POOL_BYTES, SHAPES, Bench, random_bf16  # noqa: E402

BLOCK_NS = [64, 80, 96, 128, 144]
CLUSTERS = [1, 2]
MAX_SPLITS = 16
PARTIAL_BYTES = 24 << 20
AGREE = 2e-2


def configs(M: int, N: int, K: int, sms: int) -> list[tuple[int, int, int]]:
    """(block_n, splits, cluster) whose grid is between half a wave and one wave (+3 %) of the SMs."""
    out = []
    for bn in BLOCK_NS:
        if M > 192 and bn > 96:
            continue  # not compiled: registers
        for c in CLUSTERS:
            tiles = -(-N // bn)
            tiles = -(-tiles // c) * c  # whole clusters
            for s in range(1, MAX_SPLITS + 1):
                ctas = tiles * s
                if ctas > 1.03 * sms or s > -(-K // 64) or (s > 1 and s * M * N * 4 > PARTIAL_BYTES):
                    break
                if ctas >= sms // 2:
                    out.append((bn, s, c))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", default=None, help="libqwen3_5_cuda.so (default: $CS1_LIBRARY or target/)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--rows", default="64,128,160,192,256", help="comma-separated M values (each <= 256)")
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all five)")
    ap.add_argument("--calls", type=int, default=20, help="GEMM calls per graph")
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--output", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    from startlux_native import abi, bf16

    lib = abi.load(args.library)
    bench = Bench(lib, args.device, 0, 0)
    ffi = lib.ffi
    major, minor, sms_p, total = ffi.new("int *"), ffi.new("int *"), ffi.new("int *"), ffi.new("size_t *")
    lib.cs1_device_info(args.device, major, minor, sms_p, total)
    sms = int(sms_p[0])
    rows = [int(r) for r in args.rows.split(",") if r]
    wanted = {s for s in args.shapes.split(",") if s}
    handle = bench.handles["default"]
    results, wrong = [], 0
    print(f"# {lib.build_info()}  SMs={sms}  calls/graph={args.calls}  trials={args.trials}")
    print(f"{'shape':12} {'M':>4} {'variant':>14} {'us':>8} {'TB/s':>6} {'vs cuBLAS':>9} {'rel diff':>9}")
    for name, N, K, count in SHAPES:
        if wanted and name not in wanted:
            continue
        rng = np.random.default_rng(0)
        wbytes = N * K * 2
        copies = max(2, math.ceil(POOL_BYTES / wbytes))
        w_host = random_bf16(rng, (N, K), 1.0 / math.sqrt(K))
        pool = [bench.alloc(wbytes) for _ in range(copies)]
        for ptr in pool:
            bench.upload(ptr, w_host)
        m_max = max(rows)
        x = bench.alloc(m_max * K * 2)
        bench.upload(x, random_bf16(rng, (m_max, K), 1.0))
        y = bench.alloc(m_max * N * 2)

        def call(variant, wptr, M, _N=N, _K=K, _x=x, _y=y):
            if variant == "cublas":
                lib.cs1_gemm(handle, _x, _K, wptr, _y, _N, M, _N, _K, bench.stream)
            else:
                bn, s, c = variant
                lib.cs1_gemm_stream(handle, _x, _K, wptr, _y, _N, M, _N, _K, bn, s, c, bench.stream)

        def output(variant, M, _N=N, _y=y, _w=pool[0]):
            lib.cs1_memset_async(_y, 0xFF, M * _N * 2, bench.stream)
            call(variant, _w, M)
            host = np.empty((M, _N), dtype=np.uint16)
            lib.cs1_download(ffi.from_buffer(host), _y, host.nbytes, bench.stream)
            return bf16.from_bits(host).astype(np.float64)

        try:
            for M in rows:
                variants = ["cublas", *configs(M, N, K, sms)]
                ref = output("cublas", M)
                rel = {}
                for v in variants[1:]:
                    got = output(v, M)
                    rel[v] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)) \
                        if np.isfinite(got).all() else float("inf")
                graphs = {}
                for v in variants:
                    lib.cs1_graph_begin(bench.stream)
                    g = ffi.new("void **")
                    try:
                        for i in range(args.calls):
                            call(v, pool[i % len(pool)], M)
                    finally:
                        lib.cs1_graph_end(bench.stream, g)
                    graphs[v] = g[0]
                times = {v: [] for v in variants}
                try:
                    for g in graphs.values():
                        for _ in range(args.warmup):
                            bench.time_graph(g)
                    for trial in range(args.trials):
                        order = variants if trial % 2 == 0 else variants[::-1]
                        for v in order:
                            times[v].append(bench.time_graph(graphs[v]) / args.calls * 1e6)
                finally:
                    for g in graphs.values():
                        lib.cs1_graph_destroy(g)
                base = statistics.median(times["cublas"])
                ranked = sorted(variants, key=lambda v: statistics.median(times[v]))
                for v in ranked:
                    us = statistics.median(times[v])
                    label = "cublas" if v == "cublas" else f"bn{v[0]} s{v[1]} c{v[2]}"
                    r = rel.get(v)
                    bad = r is not None and not r <= AGREE
                    wrong += bad
                    results.append({"shape": name, "N": N, "K": K, "count": count, "M": M, "variant": label,
                                    "us": us, "weight_tbs": wbytes / us * 1e-6, "vs_cublas": base / us,
                                    "rel_diff_vs_cublas": r, "wrong": bad, "trials_us": times[v]})
                    if v == "cublas" or v in ranked[:4] or bad:
                        print(f"{name:12} {M:4d} {label:>14} {us:8.2f} {wbytes / us * 1e-6:6.2f} "
                              f"{base / us:9.3f} {'' if r is None else f'{r:9.2e}'}{'  WRONG' if bad else ''}")
        finally:
            for ptr in [*pool, x, y]:
                bench.free(ptr)
    # forward sums: the best stream variant per (shape, M) against cuBLASLt, weighted by the count per forward
    print("\n# per forward (128 GEMMs), best stream variant per shape vs cuBLASLt")
    for M in rows:
        cub = best = 0.0
        for name, _n, _k, count in SHAPES:
            rs = [r for r in results if r["shape"] == name and r["M"] == M]
            if not rs:
                continue
            cub += count * next(r["us"] for r in rs if r["variant"] == "cublas")
            best += count * min(r["us"] for r in rs if not r["wrong"])
        print(f"M={M:4d}: cuBLASLt {cub / 1e3:.3f} ms, best of both {best / 1e3:.3f} ms")
    if args.output:
        Path(args.output).write_text(json.dumps({"when": datetime.now(UTC).isoformat(), "build": lib.build_info(),
                                                 "sms": sms, "args": vars(args), "results": results}, indent=1))
    bench.close()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
