"""The GDN prefill kernels of native/gdn.cu, run on the CPU by the block emulator of benchmarks/gdn_emulator (every
CUDA thread a std::thread, MMA fragments gathered per warp with the PTX layouts, cp.async landing only at its wait).
No GPU: this checks the kernels' logic on every CI run, not their speed.

Both output paths run on packed prompts with padding rows: the walk that writes O itself (what the H200 uses up to
256 rows) and the walk + separate out kernel (longer calls, smaller devices). They must give the same bytes, and
each must stay within 2e-2 x max|ref| of the float64 recurrence of tests/gpu/test_gdn.py with zero padding rows.
Needs g++ and the CUDA headers (for the bf16 type); skipped, with the reason, where either is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include" / "cuda_runtime.h"

pytestmark = [
    pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the GDN block emulator"),
    pytest.mark.skipif(not CUDA_INCLUDE.exists(), reason=f"no CUDA headers at {CUDA_INCLUDE.parent} (set CUDA_HOME)"),
]


@pytest.fixture(scope="module")
def emulator():
    spec = importlib.util.spec_from_file_location("gdn_emulator_check", ROOT / "benchmarks/gdn_emulator/check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    shutil.rmtree(mod.WORK, ignore_errors=True)


def test_walk_writing_o_equals_separate_out_kernel(emulator):
    native = ROOT / "native"
    fused = emulator.build(native, "gdn_walk_mma_kernel<2, true>", "emu_fused")
    split = emulator.build(native, "gdn_walk_mma_kernel<2, false>", "emu_split")
    # three prompts (one row, one exact chunk, one chunk and a row) packed, then 7 padding rows; case() asserts the
    # float64 tolerance, the zero padding rows and, given a second build, byte equality with it
    out = emulator.case((fused, split), [1, 64, 65], 2, 1, pad=7)
    assert out.shape == (137, 2, 128)
