"""Runtime entry points on a real device: identity, device queries, memory, pinned uploads, copies and graph capture
(replay reads new inputs; a synchronising call during capture fails cleanly and does not poison later captures)."""

from __future__ import annotations

import numpy as np
import pytest

from startlux_native import abi, bf16

CAPTURE_UNSUPPORTED = 900  # cudaErrorStreamCaptureUnsupported
CAPTURE_INVALIDATED = 901  # cudaErrorStreamCaptureInvalidated


def test_identity_and_device(cs1):
    assert int(cs1.raw.cs1_abi_version()) == abi.header_abi_version()
    print(cs1.build_info())
    ffi = cs1.ffi
    n, dev = ffi.new("int *"), ffi.new("int *")
    cs1.cs1_device_count(n)
    cs1.cs1_set_device(0)
    cs1.cs1_get_device(dev)
    assert n[0] >= 1 and dev[0] == 0
    major, minor, sms, total = ffi.new("int *"), ffi.new("int *"), ffi.new("int *"), ffi.new("size_t *")
    cs1.cs1_device_info(0, major, minor, sms, total)
    free, total2 = ffi.new("size_t *"), ffi.new("size_t *")
    cs1.cs1_mem_info(free, total2)
    print(f"sm_{major[0]}{minor[0]}, {sms[0]} SMs, {total[0] / 2**30:.1f} GiB, free {free[0] / 2**30:.1f} GiB")
    assert major[0] >= 8 and sms[0] > 0 and 0 < free[0] <= total2[0]
    assert cs1.raw.cs1_device_info(9999, major, minor, sms, total) != 0  # a bad index is a status, not a crash


def pinned(gpu, nbytes):
    p = gpu.ffi.new("void **")
    gpu.lib.cs1_host_alloc(p, nbytes)
    return p[0], np.frombuffer(gpu.ffi.buffer(p[0], nbytes), dtype=np.uint8)


@pytest.mark.parametrize("nbytes", [4, 4097 * 4, 3 << 20])
def test_pinned_upload_async_copy_and_download(gpu, rng, nbytes):
    host, view = pinned(gpu, nbytes)
    back_host, back = pinned(gpu, nbytes)
    try:
        data = rng.integers(1, 255, nbytes, dtype=np.uint8)
        view[:] = data
        a, b = gpu.empty(nbytes), gpu.empty(nbytes)
        gpu.lib.cs1_upload_async(a.ptr, host, nbytes, gpu.stream)  # queued only
        gpu.lib.cs1_copy_dd(b.ptr, a.ptr, nbytes, gpu.stream)
        gpu.lib.cs1_download_async(back_host, b.ptr, nbytes, gpu.stream)
        gpu.sync()
        assert (back == data).all()
        assert (gpu.download(a, np.uint8, (nbytes,)) == data).all()
        gpu.lib.cs1_memset_async(b.ptr, 0x5A, nbytes, gpu.stream)
        assert (gpu.download(b, np.uint8, (nbytes,)) == 0x5A).all()
    finally:
        gpu.lib.cs1_host_free(host)
        gpu.lib.cs1_host_free(back_host)


def capture_norm_graph(gpu, host, d_in, w, d_out, rows, D):
    """Capture: pinned host -> d_in (upload_async), then rms_norm(d_in) -> d_out."""
    gpu.lib.cs1_graph_begin(gpu.stream)
    gpu.lib.cs1_upload_async(d_in.ptr, host, rows * D * 2, gpu.stream)
    gpu.lib.cs1_rms_norm(d_in.ptr, w.ptr, d_out.ptr, rows, D, 1e-6, gpu.stream)
    g = gpu.ffi.new("void **")
    gpu.lib.cs1_graph_end(gpu.stream, g)
    return g[0]


def norm_ref(x_bits, w_bits):
    x = bf16.from_bits(x_bits).astype(np.float64)
    w = bf16.from_bits(w_bits).astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-6) * (1 + w)


def test_graph_replay_reads_new_inputs(gpu, rng):
    rows, D = 65, 2560
    host, view = pinned(gpu, rows * D * 2)
    hv = view.view(np.uint16)
    w_bits = bf16.to_bits((0.1 * rng.standard_normal(D)).astype(np.float32))
    w, d_in, d_out = gpu.upload(w_bits), gpu.empty(rows * D * 2), gpu.empty(rows * D * 2)
    graph = capture_norm_graph(gpu, host, d_in, w, d_out, rows, D)
    try:
        for replay in range(3):
            x = bf16.to_bits((3 * rng.standard_normal((rows, D))).astype(np.float32))
            hv[:] = x.reshape(-1)
            gpu.lib.cs1_graph_launch(graph, gpu.stream)
            got = bf16.from_bits(gpu.download(d_out, np.uint16, (rows, D))).astype(np.float64)
            ref = norm_ref(x, w_bits)
            e = float((np.abs(got - ref) / bf16.ulp(ref)).max())
            print(f"replay {replay}: max {e:.3f} ulp")
            assert e <= 1.0
    finally:
        gpu.lib.cs1_graph_destroy(graph)
        gpu.lib.cs1_host_free(host)


def test_sync_during_capture_fails_cleanly_then_capture_works(gpu, rng):
    raw, ffi = gpu.lib.raw, gpu.ffi
    g = ffi.new("void **")
    assert raw.cs1_graph_end(gpu.stream, g) == 2007  # end without begin
    assert raw.cs1_graph_launch(ffi.NULL, gpu.stream) == 2007
    # the legacy default stream cannot be captured: a clean status, nothing poisoned
    assert raw.cs1_graph_begin(ffi.NULL) != 0
    gpu.lib.cs1_graph_begin(gpu.stream)
    status = raw.cs1_stream_sync(gpu.stream)
    print(f"sync during capture: {status} ({gpu.lib.error_string(status)})")
    assert status == CAPTURE_UNSUPPORTED
    end = raw.cs1_graph_end(gpu.stream, g)
    print(f"end after the failed sync: {end} ({gpu.lib.error_string(end)})")
    assert end == CAPTURE_INVALIDATED and g[0] == ffi.NULL
    # nothing sticky: ordinary work and a new capture both succeed
    gpu.sync()
    test_graph_replay_reads_new_inputs(gpu, rng)
