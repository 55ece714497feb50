"""cs1_gemm (cuBLASLt, bf16 in/out, fp32 compute): y = x w^T on the 4B's fused weight shapes against float64.

Tolerance: max |y - ref| / max |ref| <= 1e-2 on the checked rows (first 3, last 3 and 26 random rows of every M;
the float64 product of all 4097 rows would dominate the test time). Columns beyond N of a wider output (ldy > N)
must keep their poison, and every written value must be finite.
"""

from __future__ import annotations

import numpy as np
import pytest

from startlux_native import bf16

ROWS = [1, 63, 64, 65, 640, 700, 2048, 4097]
# (N, K) of the 4B: GDN in, attention in, MLP gate|up, GDN out / o_proj, down
SHAPES = [(12352, 2560), (10240, 2560), (18432, 2560), (2560, 4096), (2560, 9216)]
TOL = 1e-2


_WEIGHTS: dict[tuple[int, int], np.ndarray] = {}  # one random weight per (N, K) per session: generation is slow


def rand_bf16(rng, shape, scale=1.0) -> np.ndarray:
    v = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    v[v == 0] = 1e-3
    return bf16.to_bits(v)


def weight(rng, N, K) -> np.ndarray:
    if (N, K) not in _WEIGHTS:
        _WEIGHTS[(N, K)] = rand_bf16(rng, (N, K), 1.0 / np.sqrt(K))
    return _WEIGHTS[(N, K)]


@pytest.fixture()
def gemm(gpu):
    h = gpu.ffi.new("void **")
    gpu.lib.cs1_gemm_create(32 << 20, h)
    yield h[0]
    gpu.lib.cs1_gemm_destroy(h[0])


def checked_rows(rng, M):
    rows = set(range(min(3, M))) | set(range(max(0, M - 3), M))
    rows |= set(rng.integers(0, M, min(26, M)).tolist())
    return np.array(sorted(rows))


def run_case(gpu, gemm, rng, M, N, K, ldx_pad=0, ldy_pad=0):
    ldx, ldy = K + ldx_pad, N + ldy_pad
    x = rand_bf16(rng, (M, ldx))
    w = weight(rng, N, K)
    y = gpu.empty(M * ldy * 2)
    gpu.lib.cs1_gemm(gemm, gpu.upload(x).ptr, ldx, gpu.upload(w).ptr, y.ptr, ldy, M, N, K, gpu.stream)
    got = gpu.download(y, np.uint16, (M, ldy))
    assert (got[:, N:] == 0xFFFF).all(), "columns beyond N were written"
    vals = bf16.from_bits(got[:, :N])
    assert np.isfinite(vals).all(), "unwritten (poisoned) or non-finite outputs"
    rows = checked_rows(rng, M)
    ref = bf16.from_bits(x[rows, :K]).astype(np.float64) @ bf16.from_bits(w).astype(np.float64).T
    rel = float(np.abs(vals[rows].astype(np.float64) - ref).max() / np.abs(ref).max())
    return rel, len(rows)


@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("N,K", SHAPES)
def test_gemm_vs_float64(gpu, gemm, rng, M, N, K):
    rel, n = run_case(gpu, gemm, rng, M, N, K)
    print(f"gemm M={M} N={N} K={K}: rel error {rel:.3e} on {n} rows (tol {TOL})")
    assert rel <= TOL


@pytest.mark.parametrize("M", [1, 65, 700])
def test_gemm_strided_rows(gpu, gemm, rng, M):
    rel, n = run_case(gpu, gemm, rng, M, 2560, 4096, ldx_pad=64, ldy_pad=8)
    print(f"gemm strided M={M}: rel error {rel:.3e} on {n} rows")
    assert rel <= TOL


def test_gemm_same_shape_reuses_plan_and_is_deterministic(gpu, gemm, rng):
    M, N, K = 700, 2560, 4096
    x = gpu.upload(rand_bf16(rng, (M, K)))
    w = gpu.upload(rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
    outs = []
    for _ in range(2):
        y = gpu.empty(M * N * 2)
        gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
        outs.append(gpu.download(y, np.uint16, (M, N)))
    assert (outs[0] == outs[1]).all()


def test_gemm_argument_checks(gpu, gemm):
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    buf = gpu.empty(1 << 20)
    p = buf.ptr
    assert raw.cs1_gemm(gemm, null, 64, null, null, 64, 0, 64, 64, gpu.stream) == 0  # M = 0: nothing to do
    assert raw.cs1_gemm(gemm, p, 32, p, p, 64, 4, 64, 64, gpu.stream) == 2001  # ldx < K
    assert raw.cs1_gemm(gemm, p, 64, p, p, 32, 4, 64, 64, gpu.stream) == 2001  # ldy < N
    assert raw.cs1_gemm(gemm, p, 64, p, buf.at(2), 64, 4, 64, 64, gpu.stream) == 2002  # y not 16-byte aligned
    assert raw.cs1_gemm(null, p, 64, p, p, 64, 4, 64, 64, gpu.stream) == 2003
    gpu.sync()
