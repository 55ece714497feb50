"""ABI smoke checks that need no GPU: build the library once per session with build.sh (or reuse a prebuilt one from
$CS1_ABI_TEST_LIBRARY), then load it through startlux_native.abi."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PREBUILT_ENV = "CS1_ABI_TEST_LIBRARY"


def find_nvcc() -> str | None:
    for cand in (os.environ.get("NVCC"), shutil.which("nvcc"),
                 os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="session")
def built_library(tmp_path_factory) -> Path:
    """Path of a freshly built libqwen3_5_cuda.so (compile only; no GPU needed)."""
    prebuilt = os.environ.get(PREBUILT_ENV)
    if prebuilt:
        path = Path(prebuilt)
        if not path.exists():
            pytest.fail(f"{PREBUILT_ENV}={prebuilt} does not exist")
        return path
    if find_nvcc() is None:
        pytest.skip("ABI test: nvcc not found (install the CUDA toolkit or set NVCC / CUDA_HOME)")
    out = tmp_path_factory.mktemp("cs1build")
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run([str(ROOT / "build.sh"), str(out), os.environ.get("CS1_TEST_ARCH", "90")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        if "cuBLASLt not found" in proc.stderr:
            pytest.skip("ABI test: cuBLASLt headers/library not found; " + proc.stderr.strip().splitlines()[-2])
        pytest.fail(f"build.sh failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    lib = out / "libqwen3_5_cuda.so"
    assert lib.exists(), proc.stderr
    return lib


