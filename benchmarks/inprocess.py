"""In-process single-prompt latency of a backend next to the physical floor.

    python -m benchmarks.inprocess CHECKPOINT [--lengths 128,512,...] [--backend cuda] [--output FILE.json]
    python -m benchmarks.inprocess CHECKPOINT --library A.so --library-b B.so [...]   (A/B of two builds)
    python -m benchmarks.inprocess CHECKPOINT --library A.so --library-b B.so --library-c C.so [...]   (A/B/C)

For each length: one prompt of random token ids (never zeros), warm-up, then --repeat timed calls of
backend.letter_logits (host clock around the whole call: upload, forward, 26-logit download). The floor is
max(weight bytes / measured copy bandwidth, FLOPs / measured bf16 GEMM peak), both measured here with torch
on the same GPU (skipped when torch has no CUDA).

With --library-b, two CUDA backends (two builds of this package's ABI version) hold the model side by side and their
calls alternate (A B, then B A, ...), so the machine's drift over a run (1-2 % between separate runs) hits both
arms alike; each row then also gives the median of the per-round differences B - A. --gemm-pins-b alone makes the
same kind of A/B with one build: arm B differs only in its GEMM pin table (--gemm-pins is arm A's; "auto", "off"
or a table's path, see startlux_native.gemm_pins); --down-split-b likewise for the down projection's K split
("auto" or "off", --down-split is arm A's), and each length then also gives the largest logit difference between
the two arms. --library-c adds a third build (e.g. A = main, B = main + one
lever, C = main + that lever + the next): the rounds then rotate A B C, B C A, C A B, and arm C's rows give C - B
(the second lever alone) next to C - A, so two stacked levers are judged in one process.
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


def interleaved(calls, repeat: int, warmup: int) -> list[list[float]]:
    """Time each zero-argument call `repeat` times in ms, the arms' order rotating every round (A B, B A, ...; with
    three arms A B C, B C A, C A B), so every arm takes every place in a round alike (warm-ups first)."""
    for fn in calls:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in calls]
    n = len(calls)
    for r in range(repeat):
        for i in [(r + k) % n for k in range(n)]:
            t0 = time.perf_counter()
            calls[i]()
            times[i].append((time.perf_counter() - t0) * 1e3)
    return times


def paired_deltas(times: list[list[float]]) -> list[dict]:
    """Per arm, the median of its per-round differences against arm A ("paired_delta_ms") and, from the third arm
    on, against the arm before it ("paired_delta_prev_ms"); {} for arm A. Calls of one round ran back to back."""
    out: list[dict] = [{}]
    for i in range(1, len(times)):
        d = {"paired_delta_ms": statistics.median(b - a for a, b in zip(times[0], times[i], strict=True))}
        if i >= 2:
            d["paired_delta_prev_ms"] = statistics.median(
                b - a for a, b in zip(times[i - 1], times[i], strict=True))
        out.append(d)
    return out


# CudaBackend's auto / off settings, each with an arm B twin: (flag, keyword, what it does when on)
BACKEND_SETTINGS = (("down-split", "down_split", "the down projection as K batches"),
                    ("gate-in-prep", "gate_in_prep", "the attention gate's sigmoid in attn_prep (off: the attention)"),
                    ("tail-rows", "tail_rows", "the last layer's tail on the read-out rows only (off: every row)"),
                    ("tail-attention", "tail_attention",
                     "the last attention at the read-out rows only, with the tail there (off: every query row)"),
                    ("tail-query", "tail_query",
                     "the last attention's q / gate projection at the read-out rows from 512 rows (off: every row)"),
                    ("gdn-norm", "gdn_norm",
                     "the GDN layers' gated RMSNorm inside the prefill's out kernel above 640 rows (off: a separate "
                     "norm launch)"),
                    ("fine-ladder", "fine_ladder",
                     "64-row padding steps up to 4,096 rows, GEMM plans of the coarse length above (off: the coarse "
                     "ladder)"))


def add_setting_flags(p: argparse.ArgumentParser) -> None:
    for flag, _, what in BACKEND_SETTINGS:
        p.add_argument(f"--{flag}", default="auto", choices=["auto", "off"], help=f"arm A's {what} (default auto)")
        p.add_argument(f"--{flag}-b", default=None, choices=["auto", "off"],
                       help="arm B's (default: arm A's); with it alone, arm B runs arm A's library")


def setting_kwargs(args, arm_b: bool = False) -> dict:
    """CudaBackend keywords of arm A, or of arm B (its -b flags where given, else arm A's)."""
    return {kw: (getattr(args, kw + "_b") if arm_b else None) or getattr(args, kw) for _, kw, _ in BACKEND_SETTINGS}


def settings_of_b(args) -> bool:
    return any(getattr(args, kw + "_b") for _, kw, _ in BACKEND_SETTINGS)


def describe_settings(b) -> str:
    return (f"down split {b.down_split_state}, gate sigmoid {b.gate_in_prep_state}, tail {b.tail_rows_state}, "
            f"tail attention {b.tail_attention_state}, tail query {b.tail_query_state}, GDN norm {b.gdn_norm_state}, "
            f"fine ladder {b.fine_ladder_state}")


def summary(times: list[float]) -> dict:
    s = sorted(times)
    return {"p50_ms": statistics.median(s), "min_ms": s[0], "p95_ms": s[max(0, -(-len(s) * 95 // 100) - 1)]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--lengths", default="128,512,1024,2048,4096,8192")
    p.add_argument("--backend", choices=["cuda", "reference"], default="cuda")
    p.add_argument("--library", default=None)
    p.add_argument("--library-b", default=None,
                   help="a second build (same ABI): A/B with the calls of the two alternated (CUDA backend only)")
    p.add_argument("--library-c", default=None,
                   help="a third build (same ABI), with --library-b: arm C, its rows also give C - B (paired)")
    p.add_argument("--gemm-pins", default="auto", help="arm A's GEMM pin table: auto, off or a path (default auto)")
    p.add_argument("--gemm-pins-b", default=None,
                   help="arm B's GEMM pin table (default: arm A's); with it alone, arm B runs arm A's library")
    add_setting_flags(p)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--graphs", choices=["on", "off", "both"], default="both",
                   help="CUDA graph replay (on), eager launches (off), or both side by side (default)")
    p.add_argument("--output", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)

    arm_b = args.library_b or args.gemm_pins_b or settings_of_b(args)
    if (arm_b or args.library_c) and args.backend != "cuda":
        p.error("--library-b, --library-c, --gemm-pins-b and the settings' -b flags need the CUDA backend")
    if args.library_c and not args.library_b:
        p.error("--library-c needs --library-b (arm C is compared with arms A and B)")
    lengths = [int(x) for x in args.lengths.split(",")]
    ckpt = load_checkpoint(args.checkpoint)
    ceilings = measure_ceilings() if args.backend == "cuda" else {}
    modes = {"on": [True], "off": [False], "both": [False, True]}[args.graphs] if args.backend == "cuda" else [False]
    if args.backend == "cuda":
        from startlux_native import abi
        from startlux_native.cuda_backend import CudaBackend
        lib_a = abi.load(str(abi.library_path(args.library)))
        arms_cfg = [(lib_a, args.gemm_pins, setting_kwargs(args))]
        if arm_b:
            arms_cfg.append((args.library_b or lib_a, args.gemm_pins_b or args.gemm_pins, setting_kwargs(args, True)))
        if args.library_c:
            arms_cfg.append((args.library_c, args.gemm_pins, setting_kwargs(args)))
        backends = [CudaBackend(ckpt, library=lib, max_tokens=max(lengths), max_rows=4, gemm_pins=pins, **kw)
                    for lib, pins, kw in arms_cfg]
        for arm, b in zip("ABC", backends, strict=False):
            print(f"arm {arm}: {b.lib.path}, GEMM pins {b.gemm_pins_state}, {describe_settings(b)}", flush=True)
    else:
        from startlux_native.reference import ReferenceBackend
        backends = [ReferenceBackend(ckpt)]
    arms = "ABC"[:len(backends)]
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
            for backend in backends:
                if args.backend == "cuda":
                    backend.graphs_enabled = graphs
            calls = [lambda b=backend, x=ids: b.letter_logits([x]) for backend in backends]
            times = interleaved(calls, args.repeat, args.warmup)
            logits = [call() for call in calls]
            for arm, t, paired in zip(arms, times, paired_deltas(times), strict=True):
                row = {"tokens": length, "graphs": graphs, **summary(t), "weight_bytes": weight_bytes,
                       "flops": flops, "floor_ms": floor_ms,
                       "ratio_to_floor": (statistics.median(t) / floor_ms) if floor_ms else None}
                if len(arms) > 1:
                    row["arm"] = arm
                    row["max_abs_dlogit_vs_a"] = float(np.abs(logits[arms.index(arm)] - logits[0]).max())
                    row.update(paired)
                rows.append(row)
                print(json.dumps(row), flush=True)
    result = {"commit": commit, "checkpoint": str(Path(args.checkpoint).resolve()), "backend": args.backend,
              "libraries": {arm: str(lib) for arm, lib in
                            zip(arms, [args.library, args.library_b, args.library_c], strict=False)},
              "gemm_pins": {arm: getattr(b, "gemm_pins_state", None) for arm, b in zip(arms, backends, strict=True)},
              "profile": ckpt.profile.attention_mode, "ceilings": ceilings, "repeat": args.repeat,
              "warmup": args.warmup, "rows": rows}
    print(f"\n{'tokens':>7} {'graphs':>6} {'p50 ms':>9} {'p95 ms':>9} {'floor ms':>9} {'x floor':>8}"
          + ("  arm  arm - A (paired) ms" if len(arms) > 1 else "") + ("  arm - previous arm" if len(arms) > 2 else ""))
    for r in rows:
        fl = f"{r['floor_ms']:.3f}" if r["floor_ms"] else "-"
        ra = f"{r['ratio_to_floor']:.2f}" if r["ratio_to_floor"] else "-"
        ab = f"  {r['arm']:>3}  {r['paired_delta_ms']:+.4f}" if "paired_delta_ms" in r else (
            f"  {r['arm']:>3}" if "arm" in r else "")
        if "paired_delta_prev_ms" in r:
            ab += f"  {r['paired_delta_prev_ms']:+.4f}"
        print(f"{r['tokens']:>7} {str(r['graphs']):>6} {r['p50_ms']:>9.3f} {r['p95_ms']:>9.3f} {fl:>9} {ra:>8}{ab}")
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
