"""Each op's GPU time inside the real forward (not alone): CUDA events between the ops of an eager forward.

    python -m benchmarks.op_spans CHECKPOINT --library A.so [--library-b B.so] [--lengths 160] [--repeat 20]

Why: `benchmarks.kernel_times` times each op alone (10 calls of it in a graph), and levers 36 and 38 moved an op one
way there and the whole forward the other way. Here one eager forward runs with an event recorded on its stream
after every cs1_* op, behind a spin kernel (torch.cuda._sleep) long enough for the host to queue the whole forward
first, so the ops run back to back at the GPU's pace and each op's span is the time between its neighbours'
events. Ops are labelled by kind (and N x K for a GEMM) and summed per forward; with two libraries the forwards
alternate A, B, B, A, ... and the table shows both and B - A (medians over --repeat forwards of the per-forward
sums). Event records add a little GPU time per op, alike in both arms.
Needs torch and a CUDA device.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

import numpy as np

from benchmarks.inprocess import add_setting_flags, setting_kwargs, settings_of_b

# gdn_norm auto's cs1_gdn_prefill_norm keeps its own row (gdn_prefill_norm) against off's gdn_prefill + gated_rms_norm
FORWARD_OPS = ("cs1_upload_async", "cs1_embed", "cs1_rms_norm", "cs1_gemm", "cs1_gdn_conv_gates", "cs1_gdn_prefill",
               "cs1_gated_rms_norm", "cs1_attn_prep", "cs1_attention_gated_bidirectional", "cs1_attention_gated",
               "cs1_add_rms_norm", "cs1_silu_mul", "cs1_letter_readout", "cs1_download_async",
               "cs1_gemm_split_f32", "cs1_add_partials_rms_norm", "cs1_attn_prep_sigmoid_gate",
               "cs1_attention_sigmoid_gated", "cs1_gather_rows", "cs1_attention_gated_rows",
               "cs1_gdn_prefill_norm")


class EventLib:
    """Stands in for a backend's abi.Library: the forward's ops record an event on `stream` after each call."""

    def __init__(self, lib, stream, torch):
        self._lib, self._stream, self._torch = lib, stream, torch
        self.events: list[tuple[str, object]] = []

    def __getattr__(self, name):
        fn = getattr(self._lib, name)
        if name not in FORWARD_OPS:
            return fn

        def call(*args):
            out = fn(*args)
            label = name.removeprefix("cs1_")
            if name == "cs1_gemm":
                label = f"gemm {args[7]}x{args[8]}"  # N x K
                if self.events and self.events[-1][0].startswith("attention"):
                    label += " after attention"  # o: the same shape as the GDN layers' out projection
                if any(lbl == "gather_rows" for lbl, _ in self.events):
                    label += " tail"  # the last layer's tail on the read-out rows
            elif name == "cs1_gemm_split_f32":
                label = f"gemm {args[6]}x{args[7]} split"  # N x K, the down projection's K batches
            elif name == "cs1_attn_prep_sigmoid_gate":
                label = "attn_prep"  # the same op with the gate's sigmoid in it: one row for both arms
            elif name == "cs1_attention_sigmoid_gated":
                label = "attention_gated" if args[13] else "attention_gated_bidirectional"
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record(self._stream)
            self.events.append((label, ev))
            return out
        return call


def one_forward(backend, ids, torch, stream) -> dict[str, float]:
    """Per-label sums (ms) of one eager forward queued behind a spin kernel."""
    T, n = backend._prepare([ids])
    lib = backend.lib
    rec = EventLib(lib, stream, torch)
    start = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(40_000_000)  # ~20 ms of spinning: the host queues the forward meanwhile
    start.record(stream)
    backend.lib = rec
    try:
        backend._enqueue(T, n)
    finally:
        backend.lib = lib
    lib.cs1_stream_sync(backend.stream)
    sums: dict[str, float] = collections.defaultdict(float)
    prev = start
    for label, ev in rec.events:
        sums[label] += prev.elapsed_time(ev)
        prev = ev
    sums["total"] = start.elapsed_time(prev)
    return dict(sums)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--library", default=None)
    p.add_argument("--library-b", default=None)
    add_setting_flags(p)
    p.add_argument("--lengths", default="160")
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--output", default=None, help="write the table as JSON here")
    args = p.parse_args(argv)

    import torch

    from startlux_native import abi
    from startlux_native.checkpoint import load_checkpoint
    from startlux_native.cuda_backend import CudaBackend

    lengths = [int(x) for x in args.lengths.split(",")]
    ckpt = load_checkpoint(args.checkpoint)
    arms = [(args.library, setting_kwargs(args))]
    if args.library_b or settings_of_b(args):
        arms.append((args.library_b or args.library, setting_kwargs(args, True)))
    libs = [lib for lib, _ in arms]
    backends = [CudaBackend(ckpt, library=abi.load(str(abi.library_path(lib))), max_tokens=max(lengths), max_rows=1,
                            graphs=False, **kw) for lib, kw in arms]
    streams = [torch.cuda.ExternalStream(int(b.ffi.cast("uintptr_t", b.stream))) for b in backends]
    rng = np.random.default_rng(args.seed)
    result = {"checkpoint": args.checkpoint, "libraries": libs, "repeat": args.repeat, "rows": []}
    for length in lengths:
        ids = rng.integers(100, 200_000, size=length, dtype=np.int32)
        for b in backends:  # warm-up: plans, shared-memory attributes
            b.letter_logits([ids])
        runs: list[list[dict[str, float]]] = [[] for _ in backends]
        for r in range(args.repeat):
            order = range(len(backends)) if r % 2 == 0 else reversed(range(len(backends)))
            for i in order:
                runs[i].append(one_forward(backends[i], ids, torch, streams[i]))
        labels = list(dict.fromkeys(label for arm in runs for label in arm[0]))  # every arm's ops, A's order first
        print(f"T={length}: ms per forward (median of {args.repeat}); arms " + ", ".join("AB"[:len(libs)]))
        for label in labels:
            med = [statistics.median(run.get(label, 0.0) for run in arm) for arm in runs]
            row = {"tokens": length, "op": label, "ms": med}
            if len(med) == 2:
                row["b_minus_a_ms"] = statistics.median(b.get(label, 0.0) - a.get(label, 0.0)
                                                        for a, b in zip(*runs, strict=True))
            result["rows"].append(row)
            tail = f"  {row['b_minus_a_ms']:+8.4f}" if "b_minus_a_ms" in row else ""
            print(f"  {label:36s}" + "".join(f" {m:8.4f}" for m in med) + tail, flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)
    for b in backends:
        b.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
