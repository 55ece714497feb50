"""benchmarks/op_spans.py on the CPU: the event wrapper's labels and the per-op sums, with a fake torch and library
(each fake op advances a fake GPU clock by a known time; an event records the clock when it is queued)."""

from __future__ import annotations

import contextlib
import types

import pytest

from benchmarks import op_spans


class FakeClock:
    def __init__(self):
        self.now = 0.0


def fake_torch(clock: FakeClock):
    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self, stream):
            self.t = clock.now

        def elapsed_time(self, end):
            return end.t - self.t

    cuda = types.SimpleNamespace(Event=Event, stream=lambda s: contextlib.nullcontext(),
                                 _sleep=lambda cycles: None)
    return types.SimpleNamespace(cuda=cuda)


# ms each fake op takes on the fake GPU
COST = {"cs1_upload_async": 0.01, "cs1_gemm": None, "cs1_attention_gated_bidirectional": 0.2,
        "cs1_add_rms_norm": 0.03, "cs1_download_async": 0.005}
GEMM_COST = {(2560, 4096): 0.1, (10240, 2560): 0.25}


class FakeLib:
    def __init__(self, clock: FakeClock):
        self.clock = clock
        self.synced = 0
        self.build = "fake build"  # a non-op attribute: passed through untouched

    def __getattr__(self, name):
        if name not in COST:
            raise AttributeError(name)

        def op(*args):
            self.clock.now += GEMM_COST[(args[7], args[8])] if name == "cs1_gemm" else COST[name]
        return op

    def cs1_stream_sync(self, stream):
        self.synced += 1


class FakeBackend:
    """One 'layer': qkv GEMM, attention, o GEMM, add + norm; then a GDN-shaped out GEMM (same N x K as o)."""

    def __init__(self, lib):
        self.lib, self.stream = lib, object()

    def _prepare(self, rows):
        return 160, 1

    def _enqueue(self, T, n):
        L = self.lib
        assert L.build == "fake build"
        L.cs1_upload_async(None, None, 0, self.stream)
        L.cs1_gemm(None, None, 0, None, None, 0, T, 10240, 2560, self.stream)
        L.cs1_attention_gated_bidirectional()
        L.cs1_gemm(None, None, 0, None, None, 0, T, 2560, 4096, self.stream)
        L.cs1_add_rms_norm()
        L.cs1_gemm(None, None, 0, None, None, 0, T, 2560, 4096, self.stream)
        L.cs1_download_async()


def test_one_forward_sums_each_kind_of_op_and_restores_the_library():
    clock = FakeClock()
    lib = FakeLib(clock)
    backend = FakeBackend(lib)
    sums = op_spans.one_forward(backend, [1, 2, 3], fake_torch(clock), stream=None)
    assert backend.lib is lib  # the wrapper is only in place during the forward
    assert lib.synced == 1
    assert sums["gemm 10240x2560"] == pytest.approx(0.25)
    assert sums["attention_gated_bidirectional"] == pytest.approx(0.2)
    assert sums["gemm 2560x4096 after attention"] == pytest.approx(0.1)  # the o projection
    assert sums["gemm 2560x4096"] == pytest.approx(0.1)  # the same shape elsewhere
    assert sums["add_rms_norm"] == pytest.approx(0.03)
    assert sums["total"] == pytest.approx(0.01 + 0.25 + 0.2 + 0.1 + 0.03 + 0.1 + 0.005)
    assert sum(v for k, v in sums.items() if k != "total") == pytest.approx(sums["total"])


def test_the_wrapper_is_removed_even_when_an_op_fails():
    clock = FakeClock()
    lib = FakeLib(clock)
    backend = FakeBackend(lib)

    def failing(T, n):
        raise RuntimeError("op failed")
    backend._enqueue = failing
    with pytest.raises(RuntimeError):
        op_spans.one_forward(backend, [1], fake_torch(clock), stream=None)
    assert backend.lib is lib
