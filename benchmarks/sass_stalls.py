"""Where one kernel's warps wait, read from Nsight Compute's per-instruction stall samples.

    python -m benchmarks.sass_stalls FILE.sass.csv[.xz] [--kernel REGEX] [--top 20]

FILE is what `SOURCES=1 scripts/gpu_profile.sh` writes per case (`ncu --page source --csv --print-source sass`
of one launch; `.xz` is read as is). The listing is cut into segments, each starting at an instruction that makes a
warp wait for others or for its own copies (BAR: a block barrier; DEPBAR: cp.async.wait_group / wait_all;
WARPSYNC), so a kernel written as "copy, barrier, compute, barrier, ..." reads as its phases. The samples of a warp
waiting at a barrier land on the instruction after the BAR (reason "barrier"), inside the segment it starts. For
each kernel it prints:
- the samples (a sample = one warp seen at one instruction, stalled or issuing) and their split by stall reason;
- the samples by opcode;
- per segment, in address order: the wait that starts it, its instructions (static) and executed (warp level), its
  samples, its share of all samples, the share of its samples that wait at a barrier, and its top stall reasons;
- the `--top` instructions by samples, with their top stall reasons.
Samples are proportional to warp time, so a segment's share of the samples is its share of the kernel's warp time.
"""

from __future__ import annotations

import argparse
import collections
import csv
import lzma
import re
import sys
from dataclasses import dataclass, field

WAIT_OPS = ("BAR", "DEPBAR", "WARPSYNC")  # opcodes (before the first '.') that end a segment
SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Instruction:
    address: str
    source: str
    samples: int
    executed: int
    stalls: dict[str, int]

    @property
    def opcode(self) -> str:
        words = self.source.split()
        if words and words[0].startswith("@"):  # a predicate guard
            words = words[1:]
        return words[0].split(".")[0] if words else ""


@dataclass
class Kernel:
    name: str
    instructions: list[Instruction] = field(default_factory=list)


def _int(text: str) -> int:
    text = text.replace(",", "").strip()
    return int(text) if text.lstrip("-").isdigit() else 0


def read(path: str) -> list[Kernel]:
    """Every kernel of one `--page source --csv --print-source sass` file."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    kernels: list[Kernel] = []
    header: list[str] | None = None
    for row in rows:
        if not row or not any(c.strip() for c in row):
            continue
        if row[0] == "Kernel Name":
            kernels.append(Kernel(row[1] if len(row) > 1 else ""))
            header = None
        elif row[0] == "Address":
            header = row
            missing = [c for c in ("Source", SAMPLES, EXECUTED) if c not in header]
            if missing:
                raise SystemExit(f"{path}: no {', '.join(missing)} column (profile with the SourceCounters section)")
        elif header is not None and kernels and len(row) >= len(header):
            col = dict(zip(header, row[:len(header)], strict=True))
            stalls = {h[len("stall_"):]: _int(col[h]) for h in header
                      if h.startswith("stall_") and "(Not Issued)" not in h}
            kernels[-1].instructions.append(Instruction(col["Address"], col["Source"].strip(), _int(col[SAMPLES]),
                                                        _int(col[EXECUTED]), stalls))
    if not kernels or not any(k.instructions for k in kernels):
        raise SystemExit(f"{path}: no per-instruction rows (expected ncu --page source --csv --print-source sass)")
    return kernels


@dataclass
class Segment:
    instructions: list[Instruction]  # the first one is the wait that starts it (except for the kernel's head)

    @property
    def wait(self) -> Instruction | None:
        first = self.instructions[0]
        return first if first.opcode in WAIT_OPS else None

    def samples(self) -> int:
        return sum(i.samples for i in self.instructions)

    def executed(self) -> int:
        return sum(i.executed for i in self.instructions)

    def stalls(self) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for i in self.instructions:
            total.update(i.stalls)
        return total


def segments(instructions: list[Instruction]) -> list[Segment]:
    """The listing cut before every waiting instruction (no instruction lost, none repeated)."""
    out: list[Segment] = []
    for ins in instructions:
        if not out or ins.opcode in WAIT_OPS:
            out.append(Segment([ins]))
        else:
            out[-1].instructions.append(ins)
    return out


def _top(counter: collections.Counter | dict, n: int, total: int) -> str:
    items = sorted(((k, v) for k, v in counter.items() if v), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {100 * v / max(total, 1):.0f}%" for k, v in items)


def report(kernel: Kernel, top: int) -> str:
    ins = kernel.instructions
    total = sum(i.samples for i in ins)
    lines = [f"kernel {kernel.name}",
             f"  {len(ins)} SASS instructions, {sum(i.executed for i in ins):,} executed (warp level), "
             f"{total:,} samples"]
    reasons: collections.Counter = collections.Counter()
    ops: collections.Counter = collections.Counter()
    for i in ins:
        reasons.update(i.stalls)
        ops[i.opcode] += i.samples
    lines.append("  stall reasons: " + _top(reasons, 10, sum(reasons.values())))
    lines.append("  opcodes: " + _top(ops, 12, total))
    lines.append("  segments (each from a BAR / DEPBAR / WARPSYNC to the next), address order:")
    lines.append(f"    {'from':>6}  {'starts at':<34} {'instr':>5} {'executed':>12} {'samples':>8} {'share':>6} "
                 f"{'barrier':>7}  top reasons")
    for seg in segments(ins):
        s, st = seg.samples(), seg.stalls()
        start = seg.wait.source[:34] if seg.wait else "(kernel start)"
        lines.append(f"    {seg.instructions[0].address[-6:]:>6}  {start:<34} {len(seg.instructions):>5} "
                     f"{seg.executed():>12,} {s:>8,} {100 * s / max(total, 1):>5.1f}% "
                     f"{100 * st['barrier'] / max(s, 1):>6.0f}%  {_top(st, 3, s)}")
    lines.append(f"  top {top} instructions by samples:")
    for i in sorted(ins, key=lambda i: -i.samples)[:top]:
        lines.append(f"    {i.address[-6:]:>6} {i.samples:>7,} {100 * i.samples / max(total, 1):>5.1f}%  "
                     f"{i.source[:56]:<56} {_top(i.stalls, 3, i.samples)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.sass_stalls", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", help="a .sass.csv or .sass.csv.xz file of scripts/gpu_profile.sh SOURCES=1")
    ap.add_argument("--kernel", default="", help="only kernels whose name matches this regex")
    ap.add_argument("--top", type=int, default=20, help="how many single instructions to list (default 20)")
    args = ap.parse_args(argv)
    kernels = [k for k in read(args.file) if re.search(args.kernel, k.name)]
    if not kernels:
        raise SystemExit(f"no kernel in {args.file} matches {args.kernel!r}")
    print("\n\n".join(report(k, args.top) for k in kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
