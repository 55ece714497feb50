"""Device buffers for the kernel drivers (benchmarks.kernel_times, benchmarks.mlp_blocks, scripts/sanitize_driver.py):
uploads, poisoned empty buffers and random bf16 operands on one stream, all freed together; and graph_ms_per_call,
the drivers' one way of timing a captured op."""

from __future__ import annotations

import statistics
import time

import numpy as np

from startlux_native import bf16


class DeviceBuffers:
    def __init__(self, lib, stream, rng: np.random.Generator):
        self.lib, self.ffi, self.stream, self.rng = lib, lib.ffi, stream, rng
        self._ptrs: list = []

    @classmethod
    def on_new_stream(cls, lib, rng: np.random.Generator) -> DeviceBuffers:
        """Buffers on a stream of their own (`.stream`)."""
        p = lib.ffi.new("void **")
        lib.cs1_stream_create(p)
        return cls(lib, p[0], rng)

    def _malloc(self, nbytes: int):
        p = self.ffi.new("void **")
        self.lib.cs1_malloc(p, max(int(nbytes), 1))
        self._ptrs.append(p[0])
        return p[0]

    def up(self, a: np.ndarray):
        """A device copy of `a` (waits for the upload)."""
        a = np.ascontiguousarray(a)
        p = self._malloc(a.nbytes)
        self.lib.cs1_upload(p, self.ffi.from_buffer(a), a.nbytes, self.stream)
        return p

    def empty(self, nbytes: int):
        """nbytes of device memory poisoned with 0xFF (NaN in bf16 and fp32)."""
        p = self._malloc(nbytes)
        self.lib.cs1_memset_async(p, 0xFF, max(int(nbytes), 1), self.stream)
        return p

    def rb(self, *shape: int, scale: float = 1.0) -> np.ndarray:
        """Random normal values * scale as bf16 bits (never zeros)."""
        return bf16.to_bits((scale * self.rng.standard_normal(shape)).astype(np.float32))

    def free_all(self) -> None:
        self.lib.cs1_stream_sync(self.stream)
        for p in self._ptrs:
            self.lib.cs1_free(p)
        self._ptrs.clear()


def graph_ms_per_call(lib, stream, call, calls: int, trials: int) -> float:
    """call(k) for k = 0 .. calls - 1 captured back to back in one CUDA graph; ms per call = replay time / calls (host
    clock around launch + sync), median of `trials` replays. call(0) runs eagerly first, so lazy set-up (plans,
    shared-memory attributes) stays outside the capture."""
    ffi = lib.ffi
    call(0)
    lib.cs1_stream_sync(stream)
    g = ffi.new("void **")
    lib.cs1_graph_begin(stream)
    for k in range(calls):
        call(k)
    lib.cs1_graph_end(stream, g)
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        lib.cs1_graph_launch(g[0], stream)
        lib.cs1_stream_sync(stream)
        times.append((time.perf_counter() - t0) / calls * 1e3)
    lib.cs1_graph_destroy(g[0])
    return statistics.median(times)
