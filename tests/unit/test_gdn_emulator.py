"""The GDN prefill kernels of native/gdn.cu, run on the CPU by the block emulator of benchmarks/gdn_emulator (every
CUDA thread a std::thread, MMA fragments gathered per warp with the PTX layouts, cp.async landing only at its wait).
No GPU: this checks the kernels' logic on every CI run, not their speed.

Every form of the walk runs on packed prompts with padding rows: the walk that writes O itself (what the H200 uses
up to 640 rows, with P and qs from prep from 129 rows, or 65 for one short prompt) and the walk + separate out
kernel (longer calls, smaller devices), each with two chunk buffers or one. They must give the same bytes, and each
must stay within 2e-2 x max|ref| of the float64 recurrence of tests/gpu/test_gdn.py with zero padding rows.
Needs g++ and the CUDA headers (for the bf16 type); skipped, with the reason, where either is missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import numpy as np
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


# The walk instantiations (with the prep form each runs after): with O or with the out kernel after it, two buffers
# (sm_80 and up) or one (the smaller devices: on the H200 only the two-buffer forms run), and the walk with O that
# takes P and qs from prep (sm_90, 129 to 640 rows, or from 65 for one short prompt; prep then makes them)
# The last three: the walk's copies as sm_80-89 make them (cp.async only; the emulator otherwise takes the sm_90
# form, whose W arrives by TMA on an mbarrier).
WALKS = [("gdn_walk_mma_kernel<2, true>", True), ("gdn_walk_mma_kernel<2, false>", True),
         ("gdn_walk_mma_kernel<1, true>", True), ("gdn_walk_mma_kernel<1, false>", True),
         ("gdn_walk_mma_kernel<2, true, true>", True),
         ("gdn_walk_mma_kernel<2, true>", False), ("gdn_walk_mma_kernel<1, true>", False),
         ("gdn_walk_mma_kernel<1, false>", False)]


def test_every_walk_form_gives_the_same_bytes(emulator):
    native = ROOT / "native"
    exes = [emulator.build(native, walk, f"emu{i}", tma=tma) for i, (walk, tma) in enumerate(WALKS)]
    # three prompts (one row, one exact chunk, two chunks and two rows) packed, then 7 padding rows; case() asserts
    # the float64 tolerance and the zero padding rows for each form
    first = emulator.case((exes[0], None), [1, 64, 130], 2, 1, pad=7)
    assert first.shape == (202, 2, 128)
    for (walk, tma), exe in zip(WALKS[1:], exes[1:], strict=True):
        out = emulator.case((exe, None), [1, 64, 130], 2, 1, pad=7)
        form = f"{walk}{'' if tma else ' without TMA'}"
        assert np.array_equal(out, first), f"{form} differs from {WALKS[0]}"


@pytest.mark.parametrize("round_weighted", [1, 0])
def test_out_kernel_with_the_norm_folded_in_gives_the_norm_kernels_bytes(emulator, round_weighted):
    """gdn_out_norm_mma_kernel (cs1_gdn_prefill_norm above 640 rows) against the norm kernel's row code on the out
    kernel's own O: the same bytes on every prompt row, padding rows left to prep (norm_case asserts both)."""
    exe = emulator.build(ROOT / "native", "gdn_walk_mma_kernel<2, false>", f"emu_norm{round_weighted}")
    fused = emulator.norm_case(exe, [1, 64, 65], 2, 1, pad=5, round_weighted=round_weighted)
    assert fused.shape == (135, 256)
