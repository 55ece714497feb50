"""benchmarks/sass_stalls.py on a synthetic ncu source page with known sums, and on a stored real one."""

from __future__ import annotations

import csv
import io
import lzma
from pathlib import Path

import pytest

from benchmarks import sass_stalls

ROOT = Path(__file__).resolve().parents[2]
STORED = ROOT / "benchmarks/results/20261130-h200/gdn-sources-a0078f0/src-2048-gdn_walk.sass.csv.xz"
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed", "stall_barrier", "stall_wait", "stall_selected", "stall_barrier (Not Issued)"]
# address, source, samples, executed, barrier, wait, selected
LISTING = [
    ("0x10", "LDC R1, c[0x0][0x28]", 3, 8, 0, 1, 2),
    ("0x20", "DEPBAR.LE SB0, 0x0", 5, 8, 0, 5, 0),
    ("0x30", "BAR.SYNC.DEFER_BLOCKING 0x0", 1, 8, 0, 0, 1),
    ("0x40", "LDS R21, [R20+0x10]", 40, 64, 38, 0, 2),
    ("0x50", "@!P0 HMMA.1688.F32.TF32 R4, R8, R12, R4", 1_200, 512, 0, 700, 500),
    ("0x60", "BAR.SYNC.DEFER_BLOCKING 0x0", 2, 64, 0, 0, 2),
    ("0x70", "@!P0 BRA 0x40", 30, 64, 29, 0, 1),
    ("0x80", "EXIT", 1, 8, 0, 0, 1),
]


def page(kernels: list[tuple[str, list[tuple]]]) -> str:
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    for name, listing in kernels:
        w.writerow(["Kernel Name", name, ""])
        w.writerow(HEADER)
        for a, src, n, ex, bar, wait, sel in listing:
            w.writerow([a, "      " + src, f"{n:,}", str(n), f"{ex:,}", bar, wait, sel, 0])
    return out.getvalue()


def test_segments_start_at_each_wait_and_keep_every_instruction(tmp_path):
    f = tmp_path / "k.sass.csv"
    f.write_text(page([("walk<2, 0>", LISTING)]))
    (kernel,) = sass_stalls.read(str(f))
    assert [i.opcode for i in kernel.instructions] == ["LDC", "DEPBAR", "BAR", "LDS", "HMMA", "BAR", "BRA", "EXIT"]
    assert kernel.instructions[4].samples == 1_200  # "1,200" read as a number
    segs = sass_stalls.segments(kernel.instructions)
    assert [[i.address for i in s.instructions] for s in segs] == [
        ["0x10"], ["0x20"], ["0x30", "0x40", "0x50"], ["0x60", "0x70", "0x80"]]
    assert [s.wait.opcode if s.wait else None for s in segs] == [None, "DEPBAR", "BAR", "BAR"]
    assert sum(s.samples() for s in segs) == sum(x[2] for x in LISTING)
    assert segs[2].samples() == 1_241 and segs[2].executed() == 584
    assert segs[2].stalls()["barrier"] == 38 and segs[3].stalls()["barrier"] == 29


def test_report_shares_and_kernel_filter(tmp_path, capsys):
    f = tmp_path / "k.sass.csv.xz"
    with lzma.open(f, "wt") as out:
        out.write(page([("walk<2, 0>", LISTING), ("out_kernel", LISTING[:3])]))
    assert sass_stalls.main([str(f), "--kernel", "walk", "--top", "2"]) == 0
    text = capsys.readouterr().out
    total = sum(x[2] for x in LISTING)
    assert "out_kernel" not in text and f"{total:,} samples" in text
    seg_line = next(line for line in text.splitlines() if line.strip().startswith("0x30"))
    assert f"{100 * 1_241 / total:.1f}%" in seg_line and f"{100 * 38 / 1_241:.0f}%" in seg_line
    top = text.split("top 2 instructions by samples:")[1].splitlines()[1:3]
    assert "HMMA" in top[0] and "LDS" in top[1]


def test_a_file_without_instruction_rows_is_refused(tmp_path):
    f = tmp_path / "empty.csv"
    f.write_text('"==PROF== Disconnected"\n')
    with pytest.raises(SystemExit, match="no per-instruction rows"):
        sass_stalls.read(str(f))
    h = tmp_path / "nosamples.csv"
    h.write_text(page([("walk", LISTING)]).replace("Warp Stall Sampling (All Samples)", "Other"))
    with pytest.raises(SystemExit, match="no Warp Stall Sampling"):
        sass_stalls.read(str(h))
    g = tmp_path / "k.sass.csv"
    g.write_text(page([("walk", LISTING)]))
    with pytest.raises(SystemExit, match="no kernel"):
        sass_stalls.main([str(g), "--kernel", "prep"])


@pytest.mark.skipif(not STORED.exists(), reason="the stored session-11 source page is not in this checkout")
def test_stored_real_page_parses_whole():
    (kernel,) = sass_stalls.read(str(STORED))
    with lzma.open(STORED, "rt") as f:
        data_rows = sum(1 for line in f if line.startswith('"0x'))
    assert len(kernel.instructions) == data_rows > 1000
    segs = sass_stalls.segments(kernel.instructions)
    assert sum(len(s.instructions) for s in segs) == data_rows
    assert sum(s.samples() for s in segs) == sum(i.samples for i in kernel.instructions) > 0
    assert sum(1 for s in segs if s.wait and s.wait.opcode == "BAR") >= 3  # the walk's chunk loop has three
