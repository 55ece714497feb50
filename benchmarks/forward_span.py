"""Where the wall time of one graph-replayed forward goes: host work around the launch, the GPU's own span, the rest.

    python -m benchmarks.forward_span CHECKPOINT [--lengths 128,160,512,2048] [--repeat 50] [--library PATH]

Why: the in-process p50 at 160 tokens (`benchmarks.inprocess`) sits ~0.3 ms above the sum of the forward's ops timed
alone (`benchmarks.kernel_times`). This splits one `letter_logits` call into its parts, per call, medians over
--repeat calls (CUDA graphs on, one prompt of random ids per length, the graph captured before timing):
  wall       the whole letter_logits call (host clock)
  prepare    CudaBackend._prepare: the pinned input buffer (host clock)
  launch     the cs1_graph_launch call itself (host clock)
  gpu        CUDA events recorded on the forward's stream just before and after the graph (the GPU's span,
             upload and download nodes included)
  gpu_warm   the same events around a second replay queued right behind the first (no host gap before it)
Needs torch (for the events on the backend's stream, via torch.cuda.ExternalStream) and a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--lengths", default="128,160,512,2048")
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--library", default=None)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)

    import torch

    from startlux_native.checkpoint import load_checkpoint
    from startlux_native.cuda_backend import CudaBackend

    lengths = [int(x) for x in args.lengths.split(",")]
    backend = CudaBackend(load_checkpoint(args.checkpoint), library=args.library, max_tokens=max(lengths),
                          max_rows=1)
    lib, ffi = backend.lib, backend.ffi
    stream = torch.cuda.ExternalStream(int(ffi.cast("uintptr_t", backend.stream)))
    rng = np.random.default_rng(args.seed)
    rows = []
    for length in lengths:
        ids = rng.integers(100, 200_000, size=length, dtype=np.int32)
        for _ in range(3):  # eager, capture, first replay
            backend.letter_logits([ids])
        T, n = backend._prepare([ids])
        graph = backend._graphs[(T, n, backend.attention_mode)]
        parts: dict[str, list[float]] = {k: [] for k in ("wall", "prepare", "launch", "gpu", "gpu_warm")}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            backend.letter_logits([ids])
            parts["wall"].append((time.perf_counter() - t0) * 1e3)

            e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            t0 = time.perf_counter()
            backend._prepare([ids])
            t1 = time.perf_counter()
            e[0].record(stream)
            lib.cs1_graph_launch(graph, backend.stream)
            t2 = time.perf_counter()
            e[1].record(stream)
            lib.cs1_graph_launch(graph, backend.stream)  # right behind: its span has no host gap before it
            e[2].record(stream)
            lib.cs1_stream_sync(backend.stream)
            parts["prepare"].append((t1 - t0) * 1e3)
            parts["launch"].append((t2 - t1) * 1e3)
            parts["gpu"].append(e[0].elapsed_time(e[1]))
            parts["gpu_warm"].append(e[1].elapsed_time(e[2]))
        row = {"tokens": length, "padded": T, **{k + "_ms": statistics.median(v) for k, v in parts.items()}}
        row["host_overhead_ms"] = row["wall_ms"] - row["gpu_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"{'tokens':>7} {'wall':>8} {'gpu':>8} {'gpu_warm':>8} {'wall-gpu':>8} {'prepare':>8} {'launch':>8}")
    for r in rows:
        print(f"{r['tokens']:>7} {r['wall_ms']:8.3f} {r['gpu_ms']:8.3f} {r['gpu_warm_ms']:8.3f} "
              f"{r['host_overhead_ms']:8.3f} {r['prepare_ms']:8.3f} {r['launch_ms']:8.3f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"checkpoint": args.checkpoint, "repeat": args.repeat, "rows": rows}, f, indent=1)
    backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
