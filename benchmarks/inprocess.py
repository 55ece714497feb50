"""In-process single-prompt latency of a backend next to the physical floor.

    python -m benchmarks.inprocess CHECKPOINT [--lengths 128,512,...] [--backend cuda] [--output FILE.json]

For each length: one prompt of random token ids (never zeros), warm-up, then --repeat timed calls of
backend.letter_logits (host clock around the whole call: upload, forward, 26-logit download). The floor is
max(weight bytes / measured copy bandwidth, FLOPs / measured bf16 GEMM peak), both measured here with torch
on the same GPU (skipped when torch has no CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from startlux_native.checkpoint import load_checkpoint


def measure_ceilings() -> dict:
    """Device-to-device copy bandwidth (read + write bytes) and the bf16 GEMM rate on random data, via torch."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    src = torch.randn(1 << 30, dtype=torch.bfloat16, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")

    def timed(fn, n):
        for _ in range(3):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(n):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        return statistics.median(times)

    copy_s = timed(lambda: dst.copy_(src), 10)
    gemm_s = timed(lambda: torch.matmul(a, b), 10)
    out = {"copy_bytes_per_s": 2 * src.numel() * 2 / copy_s, "gemm_flops_per_s": 2 * 8192**3 / gemm_s,
           "gpu": torch.cuda.get_device_name()}
    src = dst = a = b = None  # free before empty_cache (rebinding, not del: the lambdas above read these)
    torch.cuda.empty_cache()
    return out


def model_cost(ckpt, length: int) -> tuple[int, float]:
    """(weight bytes read per forward, FLOPs) for one prompt of `length` tokens."""
    cfg = ckpt.config
    weight_bytes = 0
    linear_params = 0
    for name in ckpt.names():
        if name.startswith("embed_tokens") or name.startswith("lm_head"):
            continue
        arr = ckpt.raw(name)
        weight_bytes += arr.nbytes
        if arr.ndim == 2:
            linear_params += arr.size
    n_attn = sum(t == "full_attention" for t in cfg.layer_types)
    bidirectional = ckpt.profile.attention_mode == "bidirectional"
    attn_flops = n_attn * cfg.num_attention_heads * cfg.head_dim * 4 * length * length
    if not bidirectional:
        attn_flops //= 2
    return weight_bytes, 2.0 * linear_params * length + attn_flops


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--lengths", default="128,512,1024,2048,4096,8192")
    p.add_argument("--backend", choices=["cuda", "reference"], default="cuda")
    p.add_argument("--library", default=None)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--graphs", choices=["on", "off", "both"], default="both",
                   help="CUDA graph replay (on), eager launches (off), or both side by side (default)")
    p.add_argument("--output", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)

    lengths = [int(x) for x in args.lengths.split(",")]
    ckpt = load_checkpoint(args.checkpoint)
    ceilings = measure_ceilings() if args.backend == "cuda" else {}
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.graphs] if args.backend == "cuda" else [False]
    if args.backend == "cuda":
        from startlux_native.cuda_backend import CudaBackend
        backend = CudaBackend(ckpt, library=args.library, max_tokens=max(lengths), max_rows=4)
    else:
        from startlux_native.reference import ReferenceBackend
        backend = ReferenceBackend(ckpt)
    rng = np.random.default_rng(args.seed)
    commit = os.environ.get("CS1_GIT_DESCRIBE") or subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    rows = []
    for length in lengths:
        ids = rng.integers(100, 200_000, size=length, dtype=np.int32)
        weight_bytes, flops = model_cost(ckpt, length)
        floor_ms = None
        if ceilings:
            floor_ms = 1e3 * max(weight_bytes / ceilings["copy_bytes_per_s"], flops / ceilings["gemm_flops_per_s"])
        for graphs in modes:
            if args.backend == "cuda":
                backend.graphs_enabled = graphs
            for _ in range(args.warmup):
                backend.letter_logits([ids])
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                backend.letter_logits([ids])
                times.append((time.perf_counter() - t0) * 1e3)
            times.sort()
            row = {"tokens": length, "graphs": graphs, "p50_ms": statistics.median(times), "min_ms": times[0],
                   "p95_ms": times[max(0, -(-len(times) * 95 // 100) - 1)], "weight_bytes": weight_bytes,
                   "flops": flops, "floor_ms": floor_ms,
                   "ratio_to_floor": (statistics.median(times) / floor_ms) if floor_ms else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    result = {"commit": commit, "checkpoint": str(Path(args.checkpoint).resolve()), "backend": args.backend,
              "profile": ckpt.profile.attention_mode, "ceilings": ceilings, "repeat": args.repeat,
              "warmup": args.warmup, "rows": rows}
    print(f"\n{'tokens':>7} {'graphs':>6} {'p50 ms':>9} {'p95 ms':>9} {'floor ms':>9} {'x floor':>8}")
    for r in rows:
        fl = f"{r['floor_ms']:.3f}" if r["floor_ms"] else "-"
        ra = f"{r['ratio_to_floor']:.2f}" if r["ratio_to_floor"] else "-"
        print(f"{r['tokens']:>7} {str(r['graphs']):>6} {r['p50_ms']:>9.3f} {r['p95_ms']:>9.3f} {fl:>9} {ra:>8}")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
