"""cs1_gemm_stream (gemm_stream.cu: the weight-streaming wgmma GEMM for M <= 256) against float64.

Tolerance: max |y - ref| / max |ref| <= 1e-2 on the checked rows (first 3, last 3 and 26 random rows), as for
cs1_gemm: fp32 accumulation, one bf16 rounding per output (measured errors print with -s). Outputs are poisoned
with NaN (0xFFFF) first: every value in rows < M and columns < N must be finite, and everything outside (rows >= M,
columns >= N of a wider ldy) must keep its poison. Split-K results must be the same bytes on every call and in
graph replay (the fix-up adds the splits in a fixed order). The kernels run on compute capability 9.0 only: on any
other device (or a build without the sm_90a kernels) every test skips, saying so.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import GEMM_SHAPES, gemm_weight, rand_bf16

from startlux_native import bf16

TOL = 1e-2
UNSUPPORTED = 2004
BLOCK_NS = [64, 80, 96, 128, 144]
CLUSTERS = [1, 2]


def block_ns(M):
    """The column widths compiled for M rows (128 and 144 need M <= 192: registers)."""
    return [b for b in BLOCK_NS if M <= 192 or b <= 96]


ROWS = [1, 63, 64, 65, 160, 256]


@pytest.fixture()
def gemm(gpu):
    h = gpu.ffi.new("void **")
    gpu.lib.cs1_gemm_create(32 << 20, h)
    probe = gpu.empty(1 << 16)
    status = gpu.lib.raw.cs1_gemm_stream(h[0], probe.ptr, 64, probe.ptr, probe.ptr, 64, 1, 64, 64, 64, 1, 1,
                                         gpu.stream)
    if status == UNSUPPORTED:
        gpu.lib.cs1_gemm_destroy(h[0])
        pytest.skip("cs1_gemm_stream: needs the sm_90a build on a compute capability 9.0 device")
    assert status == 0, gpu.lib.error_string(status)
    yield h[0]
    gpu.lib.cs1_gemm_destroy(h[0])


def checked_rows(rng, M):
    rows = set(range(min(3, M))) | set(range(max(0, M - 3), M))
    rows |= set(rng.integers(0, M, min(26, M)).tolist())
    return np.array(sorted(rows))


def run_stream(gpu, gemm, x, w, M, N, K, block_n, splits, cluster=1, ldx=None, ldy=None, extra_rows=2):
    """y as uint16 [M + extra_rows, ldy] after one call (poisoned before)."""
    ldx, ldy = ldx or K, ldy or N
    y = gpu.empty((M + extra_rows) * ldy * 2)
    gpu.lib.cs1_gemm_stream(gemm, x.ptr, ldx, w.ptr, y.ptr, ldy, M, N, K, block_n, splits, cluster, gpu.stream)
    return gpu.download(y, np.uint16, (M + extra_rows, ldy))


def reference(x_bits, w_bits, rows, K):
    return bf16.from_bits(x_bits[rows, :K]).astype(np.float64) @ bf16.from_bits(w_bits).astype(np.float64).T


def check(got, rows, ref, M, N):
    """The relative error on the checked rows, after the poison and finiteness checks."""
    assert (got[M:] == 0xFFFF).all(), "rows beyond M were written"
    assert (got[:M, N:] == 0xFFFF).all(), "columns beyond N were written"
    vals = bf16.from_bits(got[:M, :N])
    assert np.isfinite(vals).all(), "unwritten (poisoned) or non-finite outputs"
    return float(np.abs(vals[rows].astype(np.float64) - ref).max() / np.abs(ref).max())


def splits_for(N, K, block_n):
    """1, and the split count that fills 132 SMs (the H200's), capped by K blocks and the workspace."""
    tiles = -(-N // block_n)
    s = max(1, min(16, 132 // tiles, -(-K // 64)))
    while s > 1 and s * 256 * N * 4 > (24 << 20):
        s -= 1
    return sorted({1, s})


def check_configs(gpu, gemm, rng, w_bits, M, N, K, configs):
    """Random x [M, K] against w_bits: every (block_n, splits, cluster) within TOL of float64 on the checked rows."""
    x_bits = rand_bf16(rng, (M, K))
    x, w = gpu.upload(x_bits), gpu.upload(w_bits)
    rows = checked_rows(rng, M)
    ref = reference(x_bits, w_bits, rows, K)
    for block_n, splits, cluster in configs:
        got = run_stream(gpu, gemm, x, w, M, N, K, block_n, splits, cluster)
        rel = check(got, rows, ref, M, N)
        print(f"stream M={M} N={N} K={K} block_n={block_n} splits={splits} cluster={cluster}: "
              f"rel error {rel:.3e} (tol {TOL})")
        assert rel <= TOL, (block_n, splits, cluster, rel)


@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("N,K", GEMM_SHAPES)
def test_stream_vs_float64(gpu, gemm, rng, M, N, K):
    configs = [(b, s, c) for b in block_ns(M) for s in splits_for(N, K, b) for c in CLUSTERS]
    check_configs(gpu, gemm, rng, gemm_weight(rng, N, K), M, N, K, configs)


@pytest.mark.parametrize("N,K", [(8, 8), (200, 72), (1000, 4104), (136, 640)])
@pytest.mark.parametrize("M", [1, 63, 65, 193])
def test_stream_awkward_shapes(gpu, gemm, rng, M, N, K):
    """Partial column tiles, K not a multiple of 64, more splits than some ranges hold."""
    kblocks = -(-K // 64)
    splits = sorted({1, min(3, kblocks), min(kblocks, 16)})
    configs = [(b, s, c) for b in block_ns(M) for s in splits for c in CLUSTERS]
    check_configs(gpu, gemm, rng, rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)), M, N, K, configs)


def test_stream_strided_rows(gpu, gemm, rng):
    M, N, K = 130, 2560, 4096
    ldx, ldy = K + 64, N + 8
    w_bits = gemm_weight(rng, N, K)
    x_bits = rand_bf16(rng, (M, ldx))
    x, w = gpu.upload(x_bits), gpu.upload(w_bits)
    rows = checked_rows(rng, M)
    ref = reference(x_bits, w_bits, rows, K)
    for block_n, splits, cluster in [(80, 1, 1), (80, 4, 2), (128, 6, 2)]:
        got = run_stream(gpu, gemm, x, w, M, N, K, block_n, splits, cluster, ldx=ldx, ldy=ldy)
        rel = check(got, rows, ref, M, N)
        print(f"stream strided block_n={block_n} splits={splits} cluster={cluster}: rel error {rel:.3e}")
        assert rel <= TOL


def test_stream_split_k_is_deterministic_and_replays(gpu, gemm, rng):
    """Same bytes on every call and in graph replay; counters reset so a second call is as good as the first."""
    M, N, K = 160, 2560, 9216
    x = gpu.upload(rand_bf16(rng, (M, K)))
    w = gpu.upload(gemm_weight(rng, N, K))
    first = run_stream(gpu, gemm, x, w, M, N, K, 80, 4, 2)
    for _ in range(3):
        assert (run_stream(gpu, gemm, x, w, M, N, K, 80, 4, 2) == first).all()
    # the cluster size changes only who loads x, never the sum order
    assert (run_stream(gpu, gemm, x, w, M, N, K, 80, 4, 1) == first).all()
    y = gpu.empty((M + 2) * N * 2)
    g = gpu.ffi.new("void **")
    gpu.lib.cs1_graph_begin(gpu.stream)
    try:
        for _ in range(3):
            gpu.lib.cs1_gemm_stream(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, 80, 4, 2, gpu.stream)
    finally:
        gpu.lib.cs1_graph_end(gpu.stream, g)
    try:
        for _ in range(2):
            gpu.lib.cs1_graph_launch(g[0], gpu.stream)
            assert (gpu.download(y, np.uint16, (M + 2, N)) == first).all()
    finally:
        gpu.lib.cs1_graph_destroy(g[0])


def test_stream_argument_checks(gpu, gemm):
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    buf = gpu.empty(1 << 20)
    p = buf.ptr
    s = gpu.stream
    assert raw.cs1_gemm_stream(gemm, null, 64, null, null, 64, 0, 64, 64, 64, 1, 1, s) == 0  # M = 0: nothing
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 4, 64, 64, 72, 1, 1, s) == 2001  # block_n not compiled
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 4, 64, 64, 64, 0, 1, s) == 2001  # splits < 1
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 4, 64, 64, 64, 2, 1, s) == 2001  # splits > K blocks (1)
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 257, 64, 64, 64, 1, 1, s) == 2001  # M > 256
    assert raw.cs1_gemm_stream(gemm, p, 32, p, p, 64, 4, 64, 64, 64, 1, 1, s) == 2001  # ldx < K
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 4, 60, 64, 64, 1, 1, s) == 2002  # N not a multiple of 8
    assert raw.cs1_gemm_stream(gemm, p, 64, p, buf.at(2), 64, 4, 64, 64, 64, 1, 1, s) == 2002  # y misaligned
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 4, 64, 64, 64, 1, 3, s) == 2001  # cluster not compiled
    assert raw.cs1_gemm_stream(gemm, p, 64, p, p, 64, 193, 64, 64, 128, 1, 1, s) == 2001  # block_n 128, M > 192
    assert raw.cs1_gemm_stream(null, p, 64, p, p, 64, 4, 64, 64, 64, 1, 1, s) == 2003
    # the partial sums of 16 splits x 256 rows x 4096 columns (64 MiB) exceed the 24 MiB workspace
    assert raw.cs1_gemm_stream(gemm, p, 2048, p, p, 4096, 256, 4096, 2048, 64, 16, 1, s) == 2001
    gpu.sync()
