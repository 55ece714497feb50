"""CPU emulator check of skinny_gemm.cu: every CUDA thread of a block is a std::thread, mma.sync and ldmatrix gather
the warp's operands and apply the PTX ISA layouts, cp.async copies land only at the wait that covers their group,
shared memory is poisoned (NaN) before each block, global and shared accesses are range-checked, and the blocks of a
launch run one at a time in a shuffled order (so different CTAs arrive last at a tile and do the reduction).

    python benchmarks/experiments/skinny-gemm/emu/check.py              the cases (about a minute or two)
    python benchmarks/experiments/skinny-gemm/emu/check.py --mutants    also: each injected bug must fail

Builds emu.cpp = prefix.h + skinny_gemm.cu (up to "// ---- host side") + driver.cpp with g++ (C++20, CUDA headers
from $CUDA_HOME/include). Each case runs twice on one workspace with different block orders: the counters must be
back to zero after each run and y bit-identical. y is compared with a float64 numpy reference:
    |y - ref| <= 2 ulp_bf16(|ref|) + 1e-3 * sqrt(K) * rms(x) * rms(w)
(the first term covers the final bf16 rounding, the second the fp32 accumulation); the padding columns of y
(ldy > N) must keep their NaN poison. The emulator checks logic, not speed or races between concurrent blocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[3]
sys.path.insert(0, str(ROOT))
from startlux_native import bf16  # noqa: E402

SOURCE = HERE.parent / "skinny_gemm.cu"
WORK = Path(tempfile.mkdtemp(prefix="skinny-emu-"))

# (M, N, K, ldx, ldy, config, grid): awkward M, the split logic (tiles cut in 1-iteration and multi-tile segments,
# one CTA per iteration, a single CTA with no split), both tile widths, padded strides
CASES = [
    (1, 128, 256, 256, 128, -1, 3),
    (17, 192, 320, 320, 192, -1, 4),
    (64, 128, 320, 328, 136, 2, 7),
    (130, 192, 256, 256, 192, 4, 5),
    (100, 256, 320, 320, 256, 5, 3),
    (128, 128, 256, 264, 128, 3, 8),
    (160, 128, 256, 256, 136, 4, 3),
    (33, 64, 64, 64, 64, 2, 1),
    (256, 64, 320, 320, 72, 4, 1),
    (16, 64, 320, 320, 64, 0, 5),
    (192, 256, 640, 640, 256, 4, 11),
    (128, 256, 512, 520, 264, 5, 5),
    (256, 128, 512, 520, 136, 4, 6),
    (63, 192, 576, 576, 192, -1, 13),
    (2, 128, 1024, 1032, 128, -1, 32),
    # long CTA ranges (more iterations than pipeline stages) for every configuration: the steady-state pipeline
    (5, 64, 1024, 1024, 64, 0, 1),
    (31, 128, 1024, 1024, 128, 1, 3),
    (40, 128, 1280, 1288, 128, 2, 3),
    (100, 128, 1024, 1024, 128, 3, 2),
    (200, 128, 768, 768, 128, 4, 2),
    (128, 256, 1024, 1024, 256, 5, 3),
]

# injected bugs (old text, new text): each must make the check fail
MUTANTS = {
    "tile index off by one at the segment end": ("finish(it / plan.kt);", "finish((it + 1) / plan.kt);"),
    "reduction skips the last segment": ("for (int64_t s = lo; s <= hi; ++s)", "for (int64_t s = lo; s < hi; ++s)"),
    "pipeline waits one group too few": ("cp_async_wait_group<STAGES - 2>();", "cp_async_wait_group<STAGES - 1>();"),
    "counter not reset": ("if (last) counter_reset(counters + n);", ""),
    "B ldmatrix k chunk swapped": ("2 * kk + ((lane >> 3) & 1)", "2 * kk + ((lane >> 4) & 1)"),
    "k split groups not added": ("for (int g = 1; g < WK; ++g)", "for (int g = 1; g < 1; ++g)"),
    "next load into the stage being computed": ("load(next, stage == 0 ? STAGES - 1 : stage - 1);",
                                                "load(next, stage);"),
    "A ldmatrix row off": ("swz(mt * 16 + (lane & 15),", "swz(mt * 16 + (lane & 7),"),
    "plan: CTA of an iteration off by one": ("return ((it + 1) * p.grid + p.total - 1) / p.total - 1;",
                                             "return ((it + 1) * p.grid + p.total - 1) / p.total;"),
}


def build(mutant: tuple[str, str] | None = None, name: str = "emu") -> Path:
    src = SOURCE.read_text()
    body = src[: src.index("\n// ---- host side (")]
    body = body.replace("extern __shared__ __align__(128) unsigned char smem_raw[];",
                        "unsigned char *smem_raw = emu::smem;")
    if mutant:
        assert mutant[0] in body, f"mutant text not found: {mutant[0]}"
        body = body.replace(mutant[0], mutant[1])
    cpp = WORK / f"{name}.cpp"
    cpp.write_text('#include "prefix.h"\n' + body + (HERE / "driver.cpp").read_text())
    exe = WORK / name
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    subprocess.run(["g++", "-std=c++20", "-O2", "-pthread", "-w", f"-I{cuda}/include", f"-I{HERE}", str(cpp),
                    "-o", str(exe)], check=True)
    return exe


def case(exe: Path, m, n, k, ldx, ldy, config, grid, seed=0, quiet=False) -> None:
    rng = np.random.default_rng(seed)
    xb = bf16.to_bits(rng.standard_normal((m, ldx)).astype(np.float32))
    wb = bf16.to_bits((rng.standard_normal((n, k)) * k**-0.5).astype(np.float32))
    d = WORK / "data"
    d.mkdir(exist_ok=True)
    xb.tofile(d / "x.bin")
    wb.tofile(d / "w.bin")
    t0 = time.time()
    r = subprocess.run([str(exe), str(d), str(m), str(n), str(k), str(ldx), str(ldy), str(config), str(grid),
                        str(seed), "2"], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"emulator exit {r.returncode}: {r.stderr.strip()}")
    ybits = np.fromfile(d / "y.bin", dtype=np.uint16).reshape(m, ldy)
    assert np.all(ybits[:, n:] == 0xFFFF), "a padding column of y was written"
    y = bf16.from_bits(ybits[:, :n]).astype(np.float64)
    x = bf16.from_bits(xb[:, :k]).astype(np.float64)
    w = bf16.from_bits(wb).astype(np.float64)
    ref = x @ w.T
    assert np.all(np.isfinite(y)), f"non-finite output ({np.sum(~np.isfinite(y))} elements)"
    scale = np.sqrt(np.mean(x**2)) * np.sqrt(np.mean(w**2))
    tol = 2 * bf16.ulp(ref).astype(np.float64) + 1e-3 * np.sqrt(k) * scale
    err = np.abs(y - ref)
    worst = np.unravel_index(np.argmax(err / tol), err.shape)
    ratio = float(np.max(err / tol))
    big = np.abs(ref) >= 0.05 * np.sqrt(np.mean(ref**2))  # ulps mean little next to zero
    ulps = float(np.max(err[big] / bf16.ulp(ref[big])))  # printed: ulp where |ref| >= 0.05 rms
    if not quiet:
        print(f"M={m:<3} N={n} K={k} ldx={ldx} ldy={ldy} cfg={config:>2} grid={grid}: max|err| {err.max():.3e}, "
              f"max err/tol {ratio:.3f} at {tuple(int(i) for i in worst)}, max err {ulps:.2f} ulp (|ref| >= 0.05 rms); "
              f"{r.stdout.strip()} ({time.time() - t0:.1f} s)", flush=True)
    assert ratio <= 1.0, f"error above tolerance: {ratio:.3f} x tol at {worst}"


def check_plan_arithmetic() -> None:
    """cta_of (the CTA holding an iteration) against a brute-force search, in Python with the same formulas."""
    for total in range(1, 60):
        for grid in range(1, total + 1):
            begins = [c * total // grid for c in range(grid + 1)]
            for it in range(total):
                c = ((it + 1) * grid + total - 1) // total - 1
                assert begins[c] <= it < begins[c + 1], (total, grid, it)
    print("plan arithmetic: cta_of matches a brute-force search (total < 60, every grid)")


def main() -> int:
    check_plan_arithmetic()
    exe = build()
    for i, c in enumerate(CASES):
        case(exe, *c, seed=i)
    print("all cases passed (each run twice with different block orders: bit-identical, counters back to 0)")
    if "--mutants" in sys.argv:
        caught = 0
        for name, mut in MUTANTS.items():
            mexe = build(mut, "mutant")
            try:
                for i, c in enumerate(CASES):
                    case(mexe, *c, seed=i, quiet=True)
                print(f"MUTANT NOT CAUGHT: {name}")
            except AssertionError as exc:
                caught += 1
                print(f"mutant caught: {name}: case {i} {CASES[i]}: {str(exc)[:160]}")
        print(f"{caught} of {len(MUTANTS)} injected bugs caught")
        if caught != len(MUTANTS):
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
