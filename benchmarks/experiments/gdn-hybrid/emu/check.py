"""CPU block emulator check of a patched copy of native/gdn.cu: every CUDA thread of a block runs as a std::thread,
mma.sync fragments are gathered per warp and multiplied exactly with the PTX ISA layouts, cp.async copies land only
at the wait that covers their group, shared memory is poisoned before each block. Slow (seconds per case), so it
checks small shapes: the kernels' logic, not their speed.

    python benchmarks/experiments/gdn-hybrid/emu/check.py NATIVE_DIR     (a native/ copy with gdn-hybrid.patch applied)

Builds emu.cpp = NATIVE_DIR/gdn.cu (less its device set-up and C API) + prefix.h + driver.cpp with g++ (C++20,
CUDA headers from $CUDA_HOME/include), then runs cases against tests/gpu/test_gdn.py's float64 recurrence
(limit 2e-2 x max|ref|), packed calls against separate calls (bit for bit) and a repeat (bit for bit).
driver.cpp launches the hybrid's kernels (gdn_prep_kernel in column halves, gdn_walk_mma_kernel<2> in 32-column slabs,
gdn_out_kernel in quarters): run it on a tree with gdn-hybrid.patch applied.
"""

from __future__ import annotations

import importlib.util
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

spec = importlib.util.spec_from_file_location("tg", ROOT / "tests" / "gpu" / "test_gdn.py")
tg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tg)
D = 128
WORK = Path(tempfile.mkdtemp(prefix="gdn-emu-"))


def build(native: Path) -> Path:
    src = (native / "gdn.cu").read_text()
    a = src.index("// Opt in to")
    body = src[:a] + "}  // namespace\n"
    body = body.replace("#include <atomic>", "")
    body = body.replace('#include "common.cuh"', '#include "prefix.h"\n#include "common.cuh"')
    body = body.replace("extern __shared__ __align__(16) unsigned char smem_raw[];",
                        "unsigned char *smem_raw = (unsigned char *)smem;")
    (WORK / "emu.cpp").write_text(body + (HERE / "driver.cpp").read_text())
    exe = WORK / "emu"
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    subprocess.run(["g++", "-std=c++20", "-O2", "-pthread", "-w", f"-I{cuda}/include", f"-I{HERE}", f"-I{native}",
                    str(WORK / "emu.cpp"), "-o", str(exe)], check=True)
    return exe


def run(exe, bits, ld, g, beta, cu, t, h, hk):
    d = WORK / "data"
    d.mkdir(exist_ok=True)
    bits.tofile(d / "qkv.bin")
    g.tofile(d / "g.bin")
    beta.tofile(d / "beta.bin")
    np.asarray(cu, np.int32).tofile(d / "cu.bin")
    subprocess.run([str(exe), "prefill", str(d), str(t), str(h), str(hk), str(ld), str(len(cu) - 1), repr(D**-0.5)],
                   check=True, capture_output=True)
    return bf16.from_bits(np.fromfile(d / "o.bin", dtype=np.uint16).reshape(t, h, D))


def case(exe, lengths, h, hk, pad=0, extra=0, amplitude=1.0, weak=False, separate=False, seed=0):
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + pad
    bits, ld, g, beta, q, k, v = tg.prefill_inputs(rng, t, h, hk, amplitude=amplitude, weak=weak, extra_cols=extra)
    t0 = time.time()
    o = run(exe, bits, ld, g, beta, cu, t, h, hk)
    ref = tg.packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    assert np.all(np.isfinite(o)), "non-finite output"
    assert np.all(o[cu[-1]:] == 0), "padding rows are not zero"
    ratio = float(np.max(np.abs(o - ref)) / np.max(np.abs(ref)))
    print(f"{lengths} H={h} HK={hk} pad={pad} ld+{extra} amp={amplitude} weak={weak}: max err / max|ref| "
          f"{ratio:.3e} ({time.time() - t0:.0f} s)", flush=True)
    assert ratio <= 2e-2
    if separate:
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            if b > a:
                alone = run(exe, bits[a:b].copy(), ld, g[a:b].copy(), beta[a:b].copy(), [0, b - a], int(b - a), h, hk)
                assert np.array_equal(alone, o[a:b]), f"rows {a}:{b} differ from a separate call"
        print("  packed == separate calls, bit for bit", flush=True)
    return o


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    native = Path(sys.argv[1]).resolve()
    exe = build(native)
    case(exe, [1], 2, 1)
    case(exe, [64], 2, 2)
    case(exe, [200], 8, 2, extra=72)
    case(exe, [1, 64, 65, 130, 0, 7], 4, 2, pad=37, separate=True)
    case(exe, [64, 128, 192, 1, 1, 1, 129, 0, 2], 2, 1, pad=70, separate=True)
    case(exe, [300], 4, 2, amplitude=1e-9)
    case(exe, [700], 2, 1, weak=True)
    a = case(exe, [40] * 3 + [1] * 20, 2, 1, pad=5)
    b = case(exe, [40] * 3 + [1] * 20, 2, 1, pad=5)
    assert np.array_equal(a, b), "a repeat differs"
    print("repeat equal, bit for bit; all cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
