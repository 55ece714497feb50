"""Graph replay vs eager, byte for byte, on every request of a manifest (default: Public231).

    python -m benchmarks.graph_parity CHECKPOINT [--manifest benchmarks/manifests/public231.jsonl] [--output F]

Renders and tokenizes each request with the engine (the rows a real request sends to the backend), then runs
CudaBackend.self_check over all of them: each row group runs eagerly, is captured, and replayed; any byte
difference in the letter logits fails (and would drop the graphs in a server).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from startlux_native.backend import N_LETTERS
from startlux_native.checkpoint import load_checkpoint
from startlux_native.engine import Engine
from startlux_native.tokenizer import DecisionTokenizer


class _Recorder:
    """A backend that records the rows of each call and answers with flat logits (rendering only)."""

    name = "recorder"

    def __init__(self):
        self.calls: list[list[np.ndarray]] = []

    def letter_logits(self, rows):
        self.calls.append([np.asarray(r, dtype=np.int32) for r in rows])
        return np.zeros((len(rows), N_LETTERS), dtype=np.float32)

    def describe(self) -> dict:
        return {"backend": self.name}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--manifest", default=str(Path(__file__).parent / "manifests" / "public231.jsonl"))
    p.add_argument("--library", default=None)
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)

    ckpt = load_checkpoint(args.checkpoint)
    tok = DecisionTokenizer.from_file(ckpt.tokenizer_path)
    recorder = _Recorder()
    engine = Engine(recorder, tok, ckpt.decision_config)
    rows = [json.loads(line) for line in Path(args.manifest).read_text().splitlines() if line.strip()]
    for row in rows:
        req = row["request"]
        engine.decide(req["state"], req["questions"])

    from startlux_native.cuda_backend import CudaBackend

    backend = CudaBackend(ckpt, library=args.library, max_tokens=8192, max_rows=64)
    t0 = time.perf_counter()
    ok = backend.self_check(recorder.calls)
    result = {"manifest": args.manifest, "requests": len(rows), "backend_calls": len(recorder.calls),
              "rows": sum(len(c) for c in recorder.calls), "bit_identical": ok, "graph_state": backend.graph_state,
              "graphs_captured": len(backend._graphs), "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(result))
    if args.output:
        Path(args.output).write_text(json.dumps(result, indent=2))
    backend.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
