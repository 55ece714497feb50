"""cs1_gemv (native/gemv.cu): y = x w^T for 1-4 rows, against float64 and against cs1_gemm (cuBLASLt).

Tolerance: every output within 1 bf16 step (2^-8 relative) of the float64 product plus 1e-6 * sqrt(K) * max|ref|
for the fp32 sum (the output is rounded once); against cs1_gemm (another fp32 order) within 2 bf16 steps. Columns
beyond N of a wider output (ldy > N) keep their poison, every written value is finite, and a call repeated or
captured into a graph gives the same bytes. Shapes: the 4B's tail projections (o 2560 x 4096, gate / up 18432 x
2560, down 2560 x 9216, q | gate 8192 x 2560) and awkward N and K (N 1, 63, 64, 65, 640, 4097; K 8 to 4104).
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import gemm_weight, rand_bf16

from startlux_native import bf16

SHAPE, ALIGNMENT, NULL = 2001, 2002, 2003
TAIL_SHAPES = [(2560, 4096), (18432, 2560), (2560, 9216), (8192, 2560)]
AWKWARD = [(1, 8), (63, 2560), (64, 264), (65, 4104), (640, 1000), (4097, 64)]


def reference(x_bits: np.ndarray, w_bits: np.ndarray) -> np.ndarray:
    return bf16.from_bits(x_bits).astype(np.float64) @ bf16.from_bits(w_bits).astype(np.float64).T


def within(got: np.ndarray, ref: np.ndarray, K: int, steps: float = 1.0) -> float:
    """max of |got - ref| / (steps bf16 steps of |ref| + the fp32 sum's slack); <= 1 passes"""
    slack = 1e-6 * np.sqrt(K) * np.abs(ref).max()
    return float((np.abs(got - ref) / (steps * 2.0**-8 * np.abs(ref) + slack + 1e-30)).max())


def run(gpu, x_bits, w_bits, M, N, K, ldx, ldy):
    y = gpu.empty(M * ldy * 2)
    gpu.lib.cs1_gemv(gpu.upload(x_bits).ptr, ldx, gpu.upload(w_bits).ptr, y.ptr, ldy, M, N, K, gpu.stream)
    gpu.sync()
    return y, gpu.download(y, np.uint16, (M, ldy))


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("N,K", TAIL_SHAPES + AWKWARD)
def test_gemv_matches_float64(gpu, rng, M, N, K):
    ldx, ldy = K + 8 * (M > 1), N + 3  # a row stride above K, and output columns past N that must stay poisoned
    x = rand_bf16(rng, (M, ldx))
    w = gemm_weight(rng, N, K) if (N, K) in TAIL_SHAPES else rand_bf16(rng, (N, K), 1.0 / np.sqrt(K))
    _, out = run(gpu, x, w, M, N, K, ldx, ldy)
    assert np.isnan(bf16.from_bits(out[:, N:])).all(), "a column past N was written"
    got = bf16.from_bits(out[:, :N]).astype(np.float64)
    assert np.isfinite(got).all()
    err = within(got, reference(x[:, :K], w), K)
    print(f"M={M} N={N} K={K}: error {err:.3f} of the tolerance")
    assert err <= 1.0


@pytest.mark.parametrize("N,K", TAIL_SHAPES)
def test_gemv_agrees_with_cublaslt_and_repeats_exactly(gpu, rng, N, K):
    M = 1
    x, w = rand_bf16(rng, (M, K)), gemm_weight(rng, N, K)
    y, first = run(gpu, x, w, M, N, K, K, N)
    h = gpu.ffi.new("void **")
    gpu.lib.cs1_gemm_create(32 << 20, h)
    try:
        yc = gpu.empty(M * N * 2)
        gpu.lib.cs1_gemm(h[0], gpu.upload(x).ptr, K, gpu.upload(w).ptr, yc.ptr, N, M, N, K, gpu.stream)
        gpu.sync()
        cublas = bf16.from_bits(gpu.download(yc, np.uint16, (M, N))).astype(np.float64)
    finally:
        gpu.lib.cs1_gemm_destroy(h[0])
    got = bf16.from_bits(first).astype(np.float64)
    err = within(got, cublas, K, steps=2.0)
    same = float((first == bf16.to_bits(cublas.astype(np.float32))).mean())
    print(f"N={N} K={K}: against cuBLASLt {err:.3f} of the tolerance, {same:.1%} of the outputs the same bytes")
    assert err <= 1.0
    _, again = run(gpu, x, w, M, N, K, K, N)
    assert again.tobytes() == first.tobytes()


def test_gemv_in_a_graph_gives_the_eager_bytes(gpu, rng):
    M, N, K = 2, 2560, 4096
    x, w = rand_bf16(rng, (M, K)), gemm_weight(rng, N, K)
    xd, wd = gpu.upload(x), gpu.upload(w)
    _, eager = run(gpu, x, w, M, N, K, K, N)
    y = gpu.empty(M * N * 2)
    exec_ = gpu.ffi.new("void **")
    gpu.lib.cs1_graph_begin(gpu.stream)
    try:
        gpu.lib.cs1_gemv(xd.ptr, K, wd.ptr, y.ptr, N, M, N, K, gpu.stream)
    finally:
        gpu.lib.cs1_graph_end(gpu.stream, exec_)
    gpu.lib.cs1_graph_launch(exec_[0], gpu.stream)
    gpu.sync()
    gpu.lib.cs1_graph_destroy(exec_[0])
    assert gpu.download(y, np.uint16, (M, N)).tobytes() == eager.tobytes()


def test_gemv_argument_checks(gpu, rng):
    M, N, K = 2, 64, 256
    x, w, y = gpu.upload(rand_bf16(rng, (M, K))), gpu.upload(rand_bf16(rng, (N, K))), gpu.empty(M * N * 2)
    raw = gpu.lib.raw.cs1_gemv

    def call(**kw):
        a = dict(x=x.ptr, ldx=K, w=w.ptr, y=y.ptr, ldy=N, M=M, N=N, K=K)
        a.update(kw)
        return raw(a["x"], a["ldx"], a["w"], a["y"], a["ldy"], a["M"], a["N"], a["K"], gpu.stream)

    assert call(M=5) == SHAPE  # more rows than the kernel takes
    assert call(M=-1) == SHAPE
    assert call(K=12) == SHAPE  # K % 8
    assert call(ldx=K - 8) == SHAPE
    assert call(ldy=N - 1) == SHAPE
    assert call(x=gpu.ffi.NULL) == NULL
    assert call(w=gpu.ffi.NULL) == NULL
    assert call(y=gpu.ffi.NULL) == NULL
    assert call(x=x.at(2)) == ALIGNMENT
    assert call(w=w.at(8)) == ALIGNMENT
    assert call(y=y.at(1)) == ALIGNMENT
    assert call(ldx=K + 4) == ALIGNMENT
    # empty work: success without a launch, null pointers included (as every cs1 op)
    assert call(M=0) == 0 and call(N=0) == 0
    assert raw(gpu.ffi.NULL, K, gpu.ffi.NULL, gpu.ffi.NULL, N, 0, N, K, gpu.stream) == 0
    gpu.sync()
    assert np.isnan(bf16.from_bits(gpu.download(y, np.uint16, (M, N)))).all()
