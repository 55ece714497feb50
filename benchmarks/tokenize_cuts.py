"""Where long evidence may be cut before tokenizing, A/B in one process: the engine's tokenize stage per request.

    python -m benchmarks.tokenize_cuts [--checkpoint DIR] [--manifest FILE] [--rounds 4] [--gap-ms 5]
        [--cuts-a line|safe] [--split-chars-b N] [--output FILE.json]

Arm A cuts long pieces at safe line breaks only (tokenizer.LINE_CUTS, the rule before LEVERS 106; with --cuts-a
safe, at every safe place as B does); arm B at every safe place (tokenizer.SAFE_CUTS: also before a space that
follows a non-whitespace character), with --split-chars-b characters per part if given (default the encoder's own,
WrappedEncoder.SPLIT_CHARS, which arm A always uses). So `--cuts-a safe --split-chars-b 512` compares part sizes
alone, the cut rule the same in both arms. Every manifest
request goes through Engine.decide with the instant fake backend (benchmarks/host_path.py: the real tokenizer,
renderer and read-out, no forward), the two arms back to back in alternating order, and --gap-ms of sleep before
each call, as a server idles through a forward between requests (lever 41b: an idle CPU makes the next call
slower, so back-to-back timings understate the stage). The tokenizer's thread pool is on, as in the server
(--parallel-tokenize), so the result depends on the machine's cores: run it where the server runs.

Prints each arm's tokenize p50 / p95 / mean (p95 = nearest rank), the paired B - A per request, and the requests
with the slowest arm A; checks that both arms send the same token ids for every request (the cuts are exact), and
exits 1 if they ever differ.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from benchmarks.host_path import DEFAULT_MANIFEST, InstantBackend, load_bodies, quantiles


class RecordingBackend(InstantBackend):
    """The instant backend, keeping the token rows of the last call (to compare the arms' ids)."""

    def __init__(self, checkpoint=None, seed: int = 0):
        super().__init__(checkpoint, seed)
        self.rows: list[list[int]] = []

    def letter_logits(self, rows):
        self.rows = [list(map(int, r)) for r in rows]
        return super().letter_logits(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=None, help="a checkpoint folder (its tokenizer); default the demo's")
    p.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    p.add_argument("--rounds", type=int, default=4, help="traversals of the manifest (default 4)")
    p.add_argument("--gap-ms", type=float, default=5.0, help="sleep before each call (default 5)")
    p.add_argument("--cuts-a", choices=("line", "safe"), default="line",
                   help="arm A's cuts: line breaks only (default) or every safe place, as arm B")
    p.add_argument("--split-chars-b", type=int, default=None, help="arm B's characters per part")
    p.add_argument("--output", type=Path, default=None, help="write the summary JSON here")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.gap_ms < 0 or (args.split_chars_b is not None and args.split_chars_b < 0):
        p.error("--rounds must be >= 1, --gap-ms and --split-chars-b >= 0")

    from server import loading
    from server.__main__ import tokenizer_parallelism
    from server.settings import parse
    from startlux_native import tokenizer

    tokenizer_parallelism(True)
    loading.BACKEND_OVERRIDE = RecordingBackend
    try:
        loaded = loading.load(parse(["--checkpoint", args.checkpoint] if args.checkpoint else ["--demo"]))
    finally:
        loading.BACKEND_OVERRIDE = None
    engine, backend = loaded.engine, loaded.engine.backend
    enc = engine.wrapped_encoder
    arms = {"A": (tokenizer.LINE_CUTS if args.cuts_a == "line" else tokenizer.SAFE_CUTS, enc.split_chars),
            "B": (tokenizer.SAFE_CUTS, enc.split_chars if args.split_chars_b is None else args.split_chars_b)}
    bodies = [(name, json.loads(body)) for name, body in load_bodies(args.manifest)]
    times: dict[str, dict[str, list[float]]] = {arm: {} for arm in arms}
    differ = set()
    for r in range(args.rounds):
        for i, (name, body) in enumerate(bodies):
            rows = {}
            for arm in ("A", "B") if (i + r) % 2 == 0 else ("B", "A"):
                enc.cuts, enc.split_chars = arms[arm]
                time.sleep(args.gap_ms / 1000)
                stages: dict = {}
                engine.decide(body["state"], body["questions"], stages)
                times[arm].setdefault(name, []).append(stages["tokenize"] * 1000)
                rows[arm] = backend.rows
            if rows["A"] != rows["B"]:
                differ.add(name)
    flat = {arm: [t for ts in times[arm].values() for t in ts] for arm in arms}
    paired = [b - a for a, b in zip(flat["A"], flat["B"], strict=True)]
    summary = {"manifest": str(args.manifest), "requests": len(bodies), "rounds": args.rounds, "gap_ms": args.gap_ms,
               "cuts": {"A": args.cuts_a, "B": "safe"}, "split_chars": {arm: arms[arm][1] for arm in arms},
               "tokenize_ms": {a: {**quantiles(flat[a]), "max": max(flat[a])} for a in arms},
               "paired_b_minus_a_ms": {"median": statistics.median(paired), "mean": statistics.fmean(paired)},
               "ids_differ": sorted(differ),
               "per_request_median_ms": {n: {a: statistics.median(times[a][n]) for a in arms} for n, _ in bodies}}
    a_cuts = "line breaks only" if args.cuts_a == "line" else "every safe place"
    print(f"{len(bodies)} requests x {args.rounds} rounds, gap {args.gap_ms} ms; A: {a_cuts}, B: every safe place; "
          f"characters per part A {arms['A'][1]}, B {arms['B'][1]}")
    for arm in arms:
        q = summary["tokenize_ms"][arm]
        print(f"arm {arm} tokenize  p50 {q['p50']:.3f}  p95 {q['p95']:.3f}  mean {q['mean']:.3f}  "
              f"max {q['max']:.3f} ms")
    print(f"paired B - A per call: median {statistics.median(paired):+.4f}, mean {statistics.fmean(paired):+.4f} ms")
    slowest = sorted(summary["per_request_median_ms"].items(), key=lambda kv: -kv[1]["A"])[:12]
    for name, m in slowest:
        print(f"  {name:36s} A {m['A']:.3f}  B {m['B']:.3f} ms")
    print(f"token ids: {'the same for every request' if not differ else f'{len(differ)} requests differ'}")
    if args.output:
        args.output.write_text(json.dumps(summary, indent=2))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
