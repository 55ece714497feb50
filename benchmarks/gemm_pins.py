"""Measure a GEMM pin table: per GEMM shape of the 4B and padded length M, the fastest of cuBLASLt's alternatives.

    python -m benchmarks.gemm_pins --table startlux_native/gemm_pins/h200.json --log gemm_pins_log.json
    python -m benchmarks.gemm_pins --rows 144,160 --shapes out_o_proj --table /tmp/t.json     # a quick look
    python -m benchmarks.gemm_pins filter --table T.json --inprocess AB.json --output T2.json

    python -m benchmarks.gemm_pins merge --table T.json --add NEW.json --output T3.json

`filter` keeps the pins of a padded length only where the whole forward gained: AB.json is an in-process A/B
(benchmarks/inprocess.py --gemm-pins off --gemm-pins-b T.json) at those lengths, and a length whose paired median
B - A is above zero, or that it did not measure, loses its pins (with --keep-unmeasured a length it did not measure
keeps them: the A/B of lengths just added to a validated table). The GEMM bench alone is not enough: its first
table won at 144 rows in isolation and lost 0.05-0.06 ms per forward there, twice (LEVERS lever 30).
`merge` adds a table measured at other lengths (--rows) on the same device to a table; a length pinned in both is
refused.

Candidates per (N, K, M), each on its own GEMM handle (cs1_gemm_pin, then one eager call makes the plan):
- the default plan (cuBLASLt's first heuristic at M);
- heuristics #1 .. #(--ranks - 1) at M itself;
- heuristics #0 .. #(--neighbour-ranks - 1) asked at the ladder lengths around M (one below, --neighbours above):
  at some M the list for nearby rows holds a faster algorithm than the list for M (out/o at 160 rows).
A candidate whose pin does not apply (cuBLASLt lists fewer algorithms, or the check at M refuses it) is dropped, and
so is one whose output is non-finite or differs from the default's by more than 2e-2 relative (the bf16 GEMM
tolerance of tests/gpu/test_gemm.py).

Timing, as in gemm_shapes.py: per candidate a CUDA graph of calls whose weight pointer rotates over copies of at
least 256 MiB (the weights stream from HBM as in a forward), host clock around launch + sync. Between two calls the
graph holds a 256-byte memset (--no-separate drops it): in a forward a GEMM's neighbours are other kernels, so a
GEMM must not gain from overlapping the previous call of itself (cuBLASLt launches some Hopper kernels with
programmatic dependent launch; the first table, made without it, held pins that won back to back and lost in the
forward: LEVERS lever 30). Two
stages, so one lucky trial cannot pick a pin: a screen (--screen-trials per candidate, rotating order), then the
default and the best two screened candidates again (--confirm-trials, rotating order). A pin is written only when its
confirm median beats the default's by at least --min-gain (relative) and 0.2 us.

The table (--table) holds the device key (compute capability, SMs, memory, cuBLASLt version: the heuristic lists
depend on them) and the winning pins; startlux_native.gemm_pins applies it at start-up when the key matches.
--log keeps every candidate's times. Operands are random bf16 (never zero).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from benchmarks.gemm_shapes import SHAPES, WORKSPACE, Bench, forward_ms, stage_operands
from startlux_native import gemm_pins
from startlux_native.cuda_backend import COARSE_LADDER, ladder_lengths

MIN_GAIN_US = 0.2
MAX_REL_DIFF = 2e-2
COMPARE_ROWS = 64
SERVER_MAX_TOKENS = 32768  # the server's default --max-prompt-tokens: the cap of its padded lengths
GRAPH_TARGET_US = 400.0  # calls per graph so that one launch + sync (~10 us) is a small share


def estimate_us(M: int, N: int, K: int) -> float:
    """A rough time for one call (weights at 3 TB/s or FLOPs at 600 TFLOP/s), to size the graphs."""
    return max(N * K * 2 / 3.0e12, 2.0 * M * N * K / 600e12) * 1e6 + 2.0


def rows_and_ladder(rows_arg: str | None, max_rows: int) -> tuple[list[int], list[int]]:
    """The lengths to measure (--rows, else the ladder up to --max-rows) and the ladder their neighbours come from:
    it reaches the longest of them, so lengths above --max-rows (a table extended past 8,192) get neighbours too."""
    rows = [int(v) for v in rows_arg.split(",")] if rows_arg else None
    top = max([max_rows] + (rows or []))
    ladder = [m for m in ladder_lengths(SERVER_MAX_TOKENS, COARSE_LADDER) if m <= top]  # the fine ladder inherits
    return (rows if rows is not None else [m for m in ladder if m <= max_rows]), ladder


def neighbours(M: int, ladder: list[int], above: int) -> list[int]:
    """The ladder lengths next to M: one below and `above` above (M itself excluded)."""
    if M in ladder:
        i = ladder.index(M)
        return ladder[max(0, i - 1):i] + ladder[i + 1:i + 1 + above]
    higher = [m for m in ladder if m > M][:above]
    lower = [m for m in ladder if m < M][-1:]
    return lower + higher


class Candidates:
    """The GEMM handles of one (N, K, M): name -> handle, pinned (query_rows, rank) and the plan that resulted."""

    def __init__(self, bench: Bench):
        self.bench = bench
        self.names: list[str] = []
        self.source: dict[str, tuple[int, int]] = {}

    def add(self, name: str, M: int, N: int, K: int, pin: tuple[int, int] | None) -> None:
        lib, ffi = self.bench.lib, self.bench.ffi
        p = ffi.new("void **")
        lib.cs1_gemm_create(WORKSPACE, p)
        self.bench.handles[name] = p[0]
        if pin is not None:
            lib.cs1_gemm_pin(p[0], M, N, K, pin[0], pin[1])
        self.names.append(name)

    def plan_source(self, name: str, M: int, N: int, K: int) -> tuple[int, int]:
        ffi = self.bench.ffi
        idx, rows, us = ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("float *")
        self.bench.lib.cs1_gemm_plan_info(self.bench.handles[name], M, N, K, idx, rows, us)
        return int(rows[0]), int(idx[0])

    def drop(self, name: str) -> None:
        self.bench.lib.cs1_gemm_destroy(self.bench.handles.pop(name))
        self.names.remove(name)

    def close(self) -> None:
        for name in list(self.names):
            self.drop(name)


def rotating_trials(bench: Bench, graphs: dict, names: list[str], trials: int, calls: int) -> dict[str, list[float]]:
    times = {n: [] for n in names}
    for t in range(trials):
        k = t % len(names)
        for n in names[k:] + names[:k]:
            times[n].append(bench.time_graph(graphs[n]) / calls * 1e6)
    return times


def measure(bench: Bench, x, pool: list, y, sep, name: str, M: int, N: int, K: int, ladder: list[int],
            args) -> dict:
    cands = Candidates(bench)
    wanted: dict[str, tuple[int, int] | None] = {"default": None}
    for r in range(1, args.ranks):
        wanted[f"{M}#{r}"] = (M, r)
    for q in neighbours(M, ladder, args.neighbours):
        for r in range(args.neighbour_ranks):
            wanted[f"{q}#{r}"] = (q, r)
    graphs: dict[str, object] = {}
    row: dict = {"shape": name, "M": M, "N": N, "K": K, "dropped": {}}
    try:
        heads = {}
        for cname, pin in wanted.items():
            cands.add(cname, M, N, K, pin)
            bench.lib.cs1_memset_async(y, 0xFF, M * N * 2, bench.stream)  # NaN poison
            bench.gemm(cname, x, pool[0], y, M, N, K)  # makes the plan
            got = cands.plan_source(cname, M, N, K)
            head = bench.head_rows(y, min(M, COMPARE_ROWS), N)
            if pin is not None and got != pin:
                row["dropped"][cname] = "pin did not apply"
                cands.drop(cname)
                continue
            if not np.isfinite(head).all():
                if pin is None:
                    raise RuntimeError(f"{name} M={M}: the default plan wrote non-finite values")
                row["dropped"][cname] = "non-finite output"
                cands.drop(cname)
                continue
            if pin is not None:
                d = heads["default"]
                rel = float(np.abs(head - d).max() / max(np.abs(d).max(), 1e-30))
                if rel > MAX_REL_DIFF:
                    row["dropped"][cname] = f"differs from the default by {rel:.2e}"
                    cands.drop(cname)
                    continue
            heads[cname] = head
        calls = max(2, min(20, math.ceil(GRAPH_TARGET_US / estimate_us(M, N, K))))
        graphs = {n: bench.capture(n, x, pool, y, M, N, K, calls, sep) for n in cands.names}
        for g in graphs.values():
            bench.time_graph(g)  # warm-up
        screen = rotating_trials(bench, graphs, cands.names, args.screen_trials, calls)
        med = {n: statistics.median(t) for n, t in screen.items()}
        best = sorted((n for n in cands.names if n != "default" and med[n] < med["default"]), key=med.get)[:2]
        confirm = rotating_trials(bench, graphs, ["default", *best], args.confirm_trials, calls)
        conf = {n: statistics.median(t) for n, t in confirm.items()}
        winner = min(conf, key=lambda n: (conf[n], n != "default"))
        gain = conf["default"] - conf[winner]
        pinned = winner != "default" and gain >= args.min_gain * conf["default"] and gain >= MIN_GAIN_US
        row.update(calls=calls, screen_us=med, confirm_us=conf, confirm_trials_us=confirm,
                   winner=winner if pinned else "default", default_us=conf["default"],
                   chosen_us=conf[winner] if pinned else conf["default"])
        if pinned:
            row["query_rows"], row["rank"] = wanted[winner]
        return row
    finally:
        for g in graphs.values():
            bench.lib.cs1_graph_destroy(g)
        cands.close()


def measure_shape(bench: Bench, rng, name: str, N: int, K: int, rows: list[int], ladder: list[int], args) -> list:
    pool, x, y = stage_operands(bench, rng, N, K, max(rows))
    sep = bench.alloc(256) if args.separate else None
    out = []
    try:
        for M in rows:
            r = measure(bench, x, pool, y, sep, name, M, N, K, ladder, args)
            out.append(r)
            mark = f"pin {r['query_rows']}#{r['rank']}" if r["winner"] != "default" else "default"
            print(f"{name:>12} M={M:>5}: default {r['default_us']:9.2f} us, chosen {r['chosen_us']:9.2f} us "
                  f"({r['default_us'] / r['chosen_us']:.3f}x) {mark}; {len(r['screen_us'])} candidates, "
                  f"{len(r['dropped'])} dropped", flush=True)
    finally:
        for ptr in [*pool, x, y] + ([sep] if sep is not None else []):
            bench.free(ptr)
    return out


def forward_sums(rows: list[dict]) -> list[dict]:
    """Per M: the 128 fused GEMMs of one 4B forward, default vs chosen."""
    d, c = forward_ms(rows, lambda r: r["default_us"]), forward_ms(rows, lambda r: r["chosen_us"])
    return [{"M": M, "default_ms": d[M], "chosen_ms": c[M], "delta_ms": c[M] - d[M]} for M in d]


def filter_table(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gemm_pins filter",
                                 description="keep the pins of the lengths whose whole forward gained in an A/B")
    ap.add_argument("--table", required=True, help="the pin table the A/B's arm B ran")
    ap.add_argument("--inprocess", required=True, help="benchmarks/inprocess.py --output of that A/B")
    ap.add_argument("--output", required=True, help="write the filtered table here")
    ap.add_argument("--keep-unmeasured", action="store_true",
                    help="keep the pins of lengths the A/B did not measure (an A/B of only the lengths just added)")
    args = ap.parse_args(argv)
    gemm_pins.load_table(args.table)  # valid before anything is written
    table = json.loads(Path(args.table).read_text())
    ab = json.loads(Path(args.inprocess).read_text())
    delta = {r["tokens"]: r["paired_delta_ms"] for r in ab["rows"]
             if r.get("arm") == "B" and r.get("graphs", True) and "paired_delta_ms" in r}
    kept, dropped = [], {}
    for pin in table["pins"]:
        d = delta.get(pin["M"])
        if d is None and args.keep_unmeasured:
            kept.append(pin)
        elif d is not None and d <= 0:
            kept.append({**pin, "forward_delta_ms": round(d, 4)})
        else:
            dropped[pin["M"]] = "not measured" if d is None else f"{d:+.4f} ms"
    for M in sorted(dropped):
        print(f"M={M:>5}: pins dropped ({dropped[M]})")
    print(f"{len(kept)} of {len(table['pins'])} pins kept; lengths measured: {len(delta)}")
    table["pins"] = kept
    record = {"inprocess": Path(args.inprocess).name, "commit": ab.get("commit"),
              "rule": "a length keeps its pins if the paired median B - A of its whole forward (pins off = A, this "
                      "table = B) is <= 0" + ("; lengths it did not measure keep theirs" if args.keep_unmeasured
                                              else ""),
              "dropped_lengths": {str(k): v for k, v in sorted(dropped.items())}}
    if args.keep_unmeasured:  # a validation of added lengths; the first one stays as it was
        table["measured"].setdefault("validated_added", []).append(record)
    else:
        table["measured"]["validated"] = record
    Path(args.output).write_text(json.dumps(table, indent=1) + "\n")
    gemm_pins.load_table(args.output)
    return 0


def merge_tables(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gemm_pins merge",
                                 description="add the pins of a table measured at other lengths to a table")
    ap.add_argument("--table", required=True, help="the table to extend (its pins and provenance are kept)")
    ap.add_argument("--add", required=True, help="a table of the same device measured at other padded lengths")
    ap.add_argument("--output", required=True, help="write the merged table here")
    args = ap.parse_args(argv)
    base_key, add_key = gemm_pins.load_table(args.table).key, gemm_pins.load_table(args.add).key
    if base_key != add_key:
        raise SystemExit(f"merge: {args.add} was measured on {add_key.describe()}, {args.table} on "
                         f"{base_key.describe()}")
    base, add = json.loads(Path(args.table).read_text()), json.loads(Path(args.add).read_text())
    overlap = sorted({p["M"] for p in base["pins"]} & {p["M"] for p in add["pins"]})
    if overlap:  # one table per length: which measurement would win is not the merge's call
        raise SystemExit(f"merge: both tables pin the lengths {overlap}; measure disjoint lengths")
    base["pins"] = sorted(base["pins"] + add["pins"], key=lambda p: (p["M"], p["N"], p["K"]))
    base["measured"].setdefault("added", []).append(add["measured"])
    Path(args.output).write_text(json.dumps(base, indent=1) + "\n")
    gemm_pins.load_table(args.output)
    print(f"{len(add['pins'])} pins added to {len(base['pins']) - len(add['pins'])}: {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["filter"]:
        return filter_table(argv[1:])
    if argv[:1] == ["merge"]:
        return merge_tables(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--library", help="libqwen3_5_cuda.so (default: $CS1_LIBRARY or target/)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rows", default=None, help="comma-separated M values (default: the padding ladder up to "
                                                  "--max-rows)")
    ap.add_argument("--max-rows", type=int, default=8192,
                    help="the longest padded length measured (the ladder: 16-row steps to 512, then coarser, "
                         "multiples of 1,024 above 8,192, up to 32,768)")
    ap.add_argument("--shapes", default=",".join(s[0] for s in SHAPES), help="comma-separated shape names")
    ap.add_argument("--ranks", type=int, default=6, help="heuristics at M itself (including the default #0)")
    ap.add_argument("--neighbours", type=int, default=3, help="ladder lengths above M whose heuristics are tried")
    ap.add_argument("--neighbour-ranks", type=int, default=2, help="heuristics tried at each neighbouring length")
    ap.add_argument("--screen-trials", type=int, default=5)
    ap.add_argument("--confirm-trials", type=int, default=12)
    ap.add_argument("--min-gain", type=float, default=0.02, help="relative gain a pin must show in the confirm stage")
    ap.add_argument("--no-separate", dest="separate", action="store_false",
                    help="time the calls back to back, with no memset between them")
    ap.add_argument("--table", required=True, help="write the pin table (JSON) here")
    ap.add_argument("--log", help="write every candidate's times (JSON) here")
    args = ap.parse_args(argv)
    if not 1 <= args.ranks <= 64 or not 0 <= args.neighbour_ranks <= 64 or args.neighbours < 0:
        ap.error("--ranks must be 1..64, --neighbour-ranks 0..64, --neighbours >= 0")

    from startlux_native import abi

    rows, ladder = rows_and_ladder(args.rows, args.max_rows)
    shapes = [s for s in SHAPES if s[0] in args.shapes.split(",")]
    if not shapes or not rows or min(rows) < 1:
        ap.error("no shapes or rows to measure")
    lib = abi.load(str(abi.library_path(args.library)))
    key = gemm_pins.device_key(lib, args.device)
    bench = Bench(lib, args.device, 0, 0)
    bench.close_handles()  # each candidate gets its own handle (named "default" for cuBLASLt's first choice)
    rng = np.random.default_rng(args.seed)
    commit = os.environ.get("CS1_GIT_DESCRIBE") or subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()
    print(f"device: {key.describe()}; {lib.build_info()}", flush=True)
    results = []
    try:
        for name, N, K, _ in shapes:
            results.extend(measure_shape(bench, rng, name, N, K, rows, ladder, args))
    finally:
        bench.close()
    sums = forward_sums(results)
    for s in sums:
        print(f"forward M={s['M']:>5}: 128 GEMMs {s['default_ms']:8.3f} -> {s['chosen_ms']:8.3f} ms "
              f"({s['delta_ms']:+.3f})")
    measured = {"commit": commit, "build_info": lib.build_info(), "date": datetime.now(UTC).isoformat(),
                "command": "python -m benchmarks.gemm_pins " + " ".join(argv),
                "rule": f"confirm median at least {args.min_gain:.0%} and {MIN_GAIN_US} us below the default's",
                "separated": args.separate}
    pins = [{"shape": r["shape"], "N": r["N"], "K": r["K"], "M": r["M"], "query_rows": r["query_rows"],
             "rank": r["rank"], "default_us": round(r["default_us"], 3), "pinned_us": round(r["chosen_us"], 3)}
            for r in results if r["winner"] != "default"]
    table = {"format": gemm_pins.FORMAT, "device": key.as_json(), "measured": measured, "pins": pins}
    Path(args.table).parent.mkdir(parents=True, exist_ok=True)
    Path(args.table).write_text(json.dumps(table, indent=1) + "\n")
    gemm_pins.load_table(args.table)  # what the server will read
    print(f"{len(pins)} pins of {len(results)} (shape, M) written to {args.table}")
    if args.log:
        Path(args.log).write_text(json.dumps({**measured, "device": key.as_json(), "rows": results,
                                              "forward_sums": sums}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
