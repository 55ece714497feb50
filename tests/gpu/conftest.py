"""GPU test harness: skips (with the reason) unless the library loads and a CUDA device is visible.

Library path: $CS1_LIBRARY, else target/libqwen3_5_cuda.so (build it with ./build.sh target 90).
Every output buffer is poisoned with 0xFF bytes (NaN in bf16 and fp32) before a kernel runs.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from startlux_native import abi

SEED = int(os.environ.get("CS1_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


class DeviceBuffer:
    def __init__(self, gpu: Gpu, nbytes: int):
        self.gpu = gpu
        self.nbytes = max(int(nbytes), 1)
        out = gpu.ffi.new("void **")
        gpu.lib.cs1_malloc(out, self.nbytes)
        self.ptr = out[0]

    def free(self):
        if self.ptr is not None:
            self.gpu.lib.cs1_free(self.ptr)
            self.ptr = None

    def at(self, byte_offset: int):
        """A pointer byte_offset bytes into the buffer."""
        return self.gpu.ffi.cast("char *", self.ptr) + byte_offset


class Gpu:
    """Thin helpers over the loaded library for kernel tests."""

    def __init__(self, lib: abi.Library):
        self.lib = lib
        self.ffi = lib.ffi
        s = self.ffi.new("void **")
        lib.cs1_stream_create(s)
        self.stream = s[0]
        self._buffers: list[DeviceBuffer] = []

    def empty(self, nbytes: int, poison: bool = True) -> DeviceBuffer:
        buf = DeviceBuffer(self, nbytes)
        self._buffers.append(buf)
        if poison:
            self.lib.cs1_memset_async(buf.ptr, 0xFF, buf.nbytes, self.stream)
        return buf

    def upload(self, array: np.ndarray) -> DeviceBuffer:
        a = np.ascontiguousarray(array)
        buf = self.empty(a.nbytes, poison=False)
        self.lib.cs1_upload(buf.ptr, self.ffi.from_buffer(a), a.nbytes, self.stream)
        return buf

    def download(self, buf: DeviceBuffer, dtype, shape) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        self.lib.cs1_download(self.ffi.from_buffer(out), buf.ptr, out.nbytes, self.stream)
        return out

    def sync(self):
        self.lib.cs1_stream_sync(self.stream)

    def close(self):
        for b in self._buffers:
            b.free()
        self._buffers.clear()
        self.lib.cs1_stream_destroy(self.stream)


def _load_or_skip() -> abi.Library:
    path = abi.library_path()
    if not path.exists():
        pytest.skip(f"GPU test: no library at {path} (build with ./build.sh target 90, or set {abi.LIBRARY_ENV})")
    lib = abi.load(str(path))
    count = lib.ffi.new("int *")
    status = lib.raw.cs1_device_count(count)
    if status != 0 or count[0] < 1:
        pytest.skip(f"GPU test: no CUDA device visible ({lib.error_string(status) if status else '0 devices'})")
    return lib


@pytest.fixture(scope="session")
def cs1() -> abi.Library:
    return _load_or_skip()


@pytest.fixture()
def gpu(cs1):
    g = Gpu(cs1)
    yield g
    g.close()


@pytest.fixture()
def rng(request):
    seed = SEED + sum(map(ord, request.node.name))
    print(f"seed={seed} (CS1_TEST_SEED={SEED})")
    return np.random.default_rng(seed)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)
