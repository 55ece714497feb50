"""cs1_gemm (cuBLASLt, bf16 in/out, fp32 compute): y = x w^T on the 4B's fused weight shapes against float64.

Tolerance: max |y - ref| / max |ref| <= 1e-2 on the checked rows (first 3, last 3 and 26 random rows of every M;
the float64 product of all 4097 rows would dominate the test time). Columns beyond N of a wider output (ldy > N)
must keep their poison, and every written value must be finite. Tuned plans (cs1_gemm_tune: the fastest of several
cuBLASLt heuristics) are held to the same tolerance, must stay bit-identical per shape, and a plan first made during
graph capture must not break the capture (it falls back to the first heuristic, untimed).
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import GEMM_SHAPES, ROWS, gemm_weight, rand_bf16

from startlux_native import bf16

TOL = 1e-2


@pytest.fixture()
def gemm(gpu):
    h = gpu.ffi.new("void **")
    gpu.lib.cs1_gemm_create(32 << 20, h)
    yield h[0]
    gpu.lib.cs1_gemm_destroy(h[0])


TUNE_CANDIDATES, TUNE_REPEATS = 8, 3


@pytest.fixture()
def tuned_gemm(gpu):
    h = gpu.ffi.new("void **")
    gpu.lib.cs1_gemm_create(32 << 20, h)
    gpu.lib.cs1_gemm_tune(h[0], TUNE_CANDIDATES, TUNE_REPEATS)
    yield h[0]
    gpu.lib.cs1_gemm_destroy(h[0])


def plan_source(gpu, handle, M, N, K) -> tuple[int, int, float]:
    """(heuristic rank, rows the heuristic was asked at, median us while tuning or -1) of the (M, N, K) plan"""
    idx, rows, us = gpu.ffi.new("int32_t *"), gpu.ffi.new("int64_t *"), gpu.ffi.new("float *")
    gpu.lib.cs1_gemm_plan_info(handle, M, N, K, idx, rows, us)
    return int(idx[0]), int(rows[0]), float(us[0])


def plan_info(gpu, handle, M, N, K) -> tuple[int, float]:
    rank, rows, us = plan_source(gpu, handle, M, N, K)
    assert rows == M  # no pins on these handles
    return rank, us


def run_captured(gpu, handle, x, w, y, M, N, K) -> int:
    """One cs1_gemm captured into a graph, replayed once and waited for; returns the captured call's status."""
    exec_ = gpu.ffi.new("void **")
    gpu.lib.cs1_graph_begin(gpu.stream)
    try:
        status = gpu.lib.raw.cs1_gemm(handle, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
    finally:
        gpu.lib.cs1_graph_end(gpu.stream, exec_)
    if status == 0:
        gpu.lib.cs1_graph_launch(exec_[0], gpu.stream)
        gpu.sync()
    gpu.lib.cs1_graph_destroy(exec_[0])
    return status


def checked_rows(rng, M):
    rows = set(range(min(3, M))) | set(range(max(0, M - 3), M))
    rows |= set(rng.integers(0, M, min(26, M)).tolist())
    return np.array(sorted(rows))


def run_case(gpu, gemm, rng, M, N, K, ldx_pad=0, ldy_pad=0):
    ldx, ldy = K + ldx_pad, N + ldy_pad
    x = rand_bf16(rng, (M, ldx))
    w = gemm_weight(rng, N, K)
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
@pytest.mark.parametrize("N,K", GEMM_SHAPES)
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


# ---- autotune (cs1_gemm_tune, cs1_gemm_plan_info) -----------------------------------------------------------------

@pytest.mark.parametrize("M", [1, 64, 65, 147, 512, 4097])
@pytest.mark.parametrize("N,K", GEMM_SHAPES)
def test_tuned_gemm_vs_float64(gpu, gemm, tuned_gemm, rng, M, N, K):
    """Default and tuned plan on the same operands: both within TOL of float64; the tuned plan was timed."""
    gemm_weight(rng, N, K)  # cached before the two runs, so both draw the same x and checked rows below
    seed = int(rng.integers(1 << 32))
    errs = {}
    for name, handle in (("default", gemm), ("tuned", tuned_gemm)):
        errs[name], n = run_case(gpu, handle, np.random.default_rng(seed), M, N, K)
    rank, us = plan_info(gpu, tuned_gemm, M, N, K)
    print(f"gemm M={M} N={N} K={K}: rel error default {errs['default']:.3e}, tuned {errs['tuned']:.3e} "
          f"(heuristic #{rank}, {us:.1f} us) on {n} rows (tol {TOL})")
    assert errs["default"] <= TOL and errs["tuned"] <= TOL
    assert 0 <= rank < TUNE_CANDIDATES and us > 0
    assert plan_info(gpu, gemm, M, N, K) == (0, -1.0)  # the default handle never times


def test_tuned_plan_is_bit_identical_per_shape(gpu, tuned_gemm, rng):
    M, N, K = 147, 2560, 9216
    x = gpu.upload(rand_bf16(rng, (M, K)))
    w = gpu.upload(rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
    outs = []
    for _ in range(3):
        y = gpu.empty(M * N * 2)
        gpu.lib.cs1_gemm(tuned_gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
        outs.append(gpu.download(y, np.uint16, (M, N)))
    print(f"tuned plan: heuristic #{plan_info(gpu, tuned_gemm, M, N, K)}")
    assert np.isfinite(bf16.from_bits(outs[0])).all()
    assert (outs[0] == outs[1]).all() and (outs[0] == outs[2]).all()


def test_tuning_during_capture_does_not_break_capture(gpu, tuned_gemm, rng):
    """A new shape met during capture takes the first heuristic untimed; the graph replays correctly and eager calls
    of that shape keep the same plan (same bits). A new shape outside capture is timed again."""
    M, N, K = 65, 2560, 4096
    x_host = rand_bf16(rng, (M, K))
    w_host = rand_bf16(rng, (N, K), 1.0 / np.sqrt(K))
    x, w = gpu.upload(x_host), gpu.upload(w_host)
    y_graph, y_eager = gpu.empty(M * N * 2), gpu.empty(M * N * 2)
    gpu.sync()
    assert run_captured(gpu, tuned_gemm, x, w, y_graph, M, N, K) == 0
    assert plan_info(gpu, tuned_gemm, M, N, K) == (0, -1.0)
    got = gpu.download(y_graph, np.uint16, (M, N))
    ref = bf16.from_bits(x_host).astype(np.float64) @ bf16.from_bits(w_host).astype(np.float64).T
    rel = float(np.abs(bf16.from_bits(got).astype(np.float64) - ref).max() / np.abs(ref).max())
    print(f"captured tuned-handle gemm M={M}: rel error {rel:.3e} (tol {TOL})")
    assert rel <= TOL
    gpu.lib.cs1_gemm(tuned_gemm, x.ptr, K, w.ptr, y_eager.ptr, N, M, N, K, gpu.stream)
    assert (gpu.download(y_eager, np.uint16, (M, N)) == got).all()
    # outside capture, a new shape is timed as usual
    gpu.lib.cs1_gemm(tuned_gemm, x.ptr, K, w.ptr, y_eager.ptr, N, M - 1, N, K, gpu.stream)
    gpu.sync()
    rank, us = plan_info(gpu, tuned_gemm, M - 1, N, K)
    assert 0 <= rank < TUNE_CANDIDATES and us > 0


def test_tune_off_again_and_existing_plans_kept(gpu, gemm, rng):
    M, N, K = 64, 2560, 4096
    x = gpu.upload(rand_bf16(rng, (M + 2, K)))
    w = gpu.upload(rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
    y = gpu.empty((M + 2) * N * 2)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)  # an untuned plan exists
    gpu.lib.cs1_gemm_tune(gemm, 4, 2)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M + 1, N, K, gpu.stream)  # new shape: timed
    gpu.lib.cs1_gemm_tune(gemm, 0, 0)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M + 2, N, K, gpu.stream)  # tuning off: not timed
    gpu.sync()
    infos = [plan_info(gpu, gemm, m, N, K) for m in (M, M + 1, M + 2)]
    print(f"plan infos: {infos}")
    assert infos[0] == (0, -1.0) and infos[2] == (0, -1.0)
    assert 0 <= infos[1][0] < 4 and infos[1][1] > 0


def test_tune_and_plan_info_argument_checks(gpu, gemm):
    raw, ffi, null = gpu.lib.raw, gpu.ffi, gpu.ffi.NULL
    idx, rows, us = ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("float *")
    assert raw.cs1_gemm_tune(null, 4, 2) == 2003
    assert raw.cs1_gemm_tune(gemm, -1, 2) == 2001
    assert raw.cs1_gemm_tune(gemm, 65, 2) == 2001
    assert raw.cs1_gemm_tune(gemm, 4, 0) == 2001
    assert raw.cs1_gemm_tune(gemm, 4, 1001) == 2001
    assert raw.cs1_gemm_tune(gemm, 0, 0) == 0
    assert raw.cs1_gemm_plan_info(null, 1, 64, 64, idx, rows, us) == 2003
    assert raw.cs1_gemm_plan_info(gemm, 1, 64, 64, null, rows, us) == 2003
    assert raw.cs1_gemm_plan_info(gemm, 1, 64, 64, idx, null, us) == 2003
    assert raw.cs1_gemm_plan_info(gemm, 1, 64, 64, idx, rows, null) == 2003
    assert raw.cs1_gemm_plan_info(gemm, 1, 64, 64, idx, rows, us) == 2001  # no plan of that shape yet


# ---- pins (cs1_gemm_pin): heuristic #rank of the problem asked at other rows ------------------------------------


@pytest.mark.parametrize("M,query_rows,rank", [(1, 64, 0), (63, 128, 1), (144, 192, 0), (160, 192, 1),
                                               (640, 768, 2), (4097, 4608, 1)])
@pytest.mark.parametrize("N,K", [(2560, 4096), (2560, 9216), (18432, 2560)])
def test_pinned_gemm_vs_float64(gpu, gemm, rng, M, query_rows, rank, N, K):
    """A pinned plan is held to the same tolerance as the default; plan_info says whether the pin applied (if the
    heuristic at query_rows lists fewer algorithms, or the check at M refuses, the plan is the default one)."""
    gpu.lib.cs1_gemm_pin(gemm, M, N, K, query_rows, rank)
    rel, n = run_case(gpu, gemm, rng, M, N, K)
    got_rank, got_rows, us = plan_source(gpu, gemm, M, N, K)
    applied = (got_rank, got_rows) == (rank, query_rows)
    print(f"pinned gemm M={M} N={N} K={K} -> heuristic #{rank} at {query_rows} rows: "
          f"{'applied' if applied else 'fell back'}; rel error {rel:.3e} on {n} rows (tol {TOL})")
    assert rel <= TOL and us == -1.0
    assert applied or (got_rank, got_rows) == (0, M)
    if rank == 0:  # cuBLASLt's first choice at nearby rows runs at M for these shapes
        assert applied


def test_pinned_plan_is_bit_identical_and_capturable(gpu, gemm, rng):
    """The pin applies to a plan first made inside a capture too (no timing), and replays bit-identically."""
    M, N, K = 160, 2560, 4096
    x = gpu.upload(rand_bf16(rng, (M, K)))
    w = gpu.upload(rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
    gpu.lib.cs1_gemm_pin(gemm, M, N, K, 192, 0)
    y_graph, y_eager = gpu.empty(M * N * 2), gpu.empty(M * N * 2)
    gpu.sync()
    assert run_captured(gpu, gemm, x, w, y_graph, M, N, K) == 0
    assert plan_source(gpu, gemm, M, N, K) == (0, 192, -1.0)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y_eager.ptr, N, M, N, K, gpu.stream)
    a, b = gpu.download(y_graph, np.uint16, (M, N)), gpu.download(y_eager, np.uint16, (M, N))
    assert np.isfinite(bf16.from_bits(a)).all() and (a == b).all()


def test_pin_keeps_existing_plans_and_can_be_removed(gpu, gemm, tuned_gemm, rng):
    M, N, K = 96, 2560, 4096
    x = gpu.upload(rand_bf16(rng, (M + 1, K)))
    w = gpu.upload(rand_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
    y = gpu.empty((M + 1) * N * 2)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)  # a default plan exists
    gpu.lib.cs1_gemm_pin(gemm, M, N, K, 128, 0)
    gpu.lib.cs1_gemm_pin(gemm, M + 1, N, K, 128, 0)
    gpu.lib.cs1_gemm_pin(gemm, M + 1, N, K, 0, -1)  # removed again
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
    gpu.lib.cs1_gemm(gemm, x.ptr, K, w.ptr, y.ptr, N, M + 1, N, K, gpu.stream)
    # a tuning handle times its candidates at M and ignores the pin
    gpu.lib.cs1_gemm_pin(tuned_gemm, M, N, K, 128, 0)
    gpu.lib.cs1_gemm(tuned_gemm, x.ptr, K, w.ptr, y.ptr, N, M, N, K, gpu.stream)
    gpu.sync()
    assert plan_source(gpu, gemm, M, N, K) == (0, M, -1.0)
    assert plan_source(gpu, gemm, M + 1, N, K) == (0, M + 1, -1.0)
    rank, rows, us = plan_source(gpu, tuned_gemm, M, N, K)
    assert rows == M and us > 0


def test_pin_argument_checks_and_blas_version(gpu, gemm):
    raw, ffi, null = gpu.lib.raw, gpu.ffi, gpu.ffi.NULL
    assert raw.cs1_gemm_pin(null, 1, 64, 64, 1, 0) == 2003
    for M, N, K, rows, rank in ((0, 64, 64, 1, 0), (1, 0, 64, 1, 0), (1, 64, 0, 1, 0), (1, 64, 64, 0, 0),
                                (1, 64, 64, 1, 64)):
        assert raw.cs1_gemm_pin(gemm, M, N, K, rows, rank) == 2001
    assert raw.cs1_gemm_pin(gemm, 1, 64, 64, 0, -1) == 0  # removing a pin that is not there
    version = ffi.new("size_t *")
    assert raw.cs1_gemm_blas_version(null) == 2003
    assert raw.cs1_gemm_blas_version(version) == 0
    print(f"cuBLASLt version {int(version[0])}")
    assert int(version[0]) >= 10000


# ---- K split into batches with fp32 partials (cs1_gemm_split_f32) --------------------------------------------------

def run_split_case(gpu, gemm, rng, M, N, K, splits, ldx_pad=0):
    """partials[s] against the float64 product of slice s; also the sum of the partials against the whole product.
    Returns (worst relative error of a slice, relative error of the sum, rows checked)."""
    ldx, k = K + ldx_pad, K // splits
    x = rand_bf16(rng, (M, ldx))
    w = gemm_weight(rng, N, K)
    out = gpu.empty(splits * M * N * 4)
    gpu.lib.cs1_gemm_split_f32(gemm, gpu.upload(x).ptr, ldx, gpu.upload(w).ptr, gpu.ffi.cast("float *", out.ptr),
                               M, N, K, splits, gpu.stream)
    got = gpu.download(out, np.float32, (splits, M, N))
    assert np.isfinite(got).all(), "unwritten (poisoned) or non-finite partials"
    rows = checked_rows(rng, M)
    xs, ws = bf16.from_bits(x[rows, :K]).astype(np.float64), bf16.from_bits(w).astype(np.float64)
    worst = 0.0
    for s in range(splits):
        ref = xs[:, s * k:(s + 1) * k] @ ws[:, s * k:(s + 1) * k].T
        worst = max(worst, float(np.abs(got[s, rows] - ref).max() / np.abs(ref).max()))
    whole = xs @ ws.T
    total = got[:, rows].astype(np.float64).sum(axis=0)
    return worst, float(np.abs(total - whole).max() / np.abs(whole).max()), len(rows)


SPLIT_TOL = 1e-4  # fp32 outputs of fp32 accumulation over <= 4608 terms: no bf16 rounding of the result


@pytest.mark.parametrize("M", ROWS)
@pytest.mark.parametrize("splits", [2, 3, 4])
def test_gemm_split_vs_float64(gpu, gemm, rng, M, splits):
    N, K = 2560, 9216  # the 4B's down projection
    worst, total, n = run_split_case(gpu, gemm, rng, M, N, K, splits)
    print(f"gemm split M={M} N={N} K={K} splits={splits}: slice rel error {worst:.3e}, sum {total:.3e} on {n} rows "
          f"(tol {SPLIT_TOL})")
    assert worst <= SPLIT_TOL and total <= SPLIT_TOL


@pytest.mark.parametrize("M,N,K,splits,ldx_pad", [(1, 8, 16, 2, 0), (63, 72, 48, 3, 8), (65, 2560, 4096, 8, 64),
                                                 (640, 128, 256, 16, 0)])
def test_gemm_split_awkward_shapes(gpu, gemm, rng, M, N, K, splits, ldx_pad):
    worst, total, n = run_split_case(gpu, gemm, rng, M, N, K, splits, ldx_pad)
    print(f"gemm split M={M} N={N} K={K} splits={splits} ldx=K+{ldx_pad}: slice {worst:.3e}, sum {total:.3e}")
    assert worst <= SPLIT_TOL and total <= SPLIT_TOL


def test_gemm_split_is_deterministic_and_capturable(gpu, gemm, rng):
    M, N, K, splits = 160, 2560, 9216, 3
    x = gpu.upload(rand_bf16(rng, (M, K)))
    w = gpu.upload(gemm_weight(rng, N, K))
    outs = []
    for captured in (False, False, True):
        out = gpu.empty(splits * M * N * 4)
        p = gpu.ffi.cast("float *", out.ptr)
        if captured:
            exec_ = gpu.ffi.new("void **")
            gpu.lib.cs1_graph_begin(gpu.stream)
            try:
                gpu.lib.cs1_gemm_split_f32(gemm, x.ptr, K, w.ptr, p, M, N, K, splits, gpu.stream)
            finally:
                gpu.lib.cs1_graph_end(gpu.stream, exec_)
            gpu.lib.cs1_graph_launch(exec_[0], gpu.stream)
            gpu.sync()
            gpu.lib.cs1_graph_destroy(exec_[0])
        else:
            gpu.lib.cs1_gemm_split_f32(gemm, x.ptr, K, w.ptr, p, M, N, K, splits, gpu.stream)
        outs.append(gpu.download(out, np.float32, (splits, M, N)))
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes()


def test_gemm_split_argument_checks(gpu, gemm):
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    buf = gpu.empty(1 << 20)
    p, f = buf.ptr, gpu.ffi.cast("float *", buf.ptr)
    assert raw.cs1_gemm_split_f32(gemm, null, 96, null, gpu.ffi.NULL, 0, 64, 96, 3, gpu.stream) == 0  # M = 0
    assert raw.cs1_gemm_split_f32(gemm, p, 96, p, f, 4, 64, 96, 1, gpu.stream) == 2001  # splits < 2
    assert raw.cs1_gemm_split_f32(gemm, p, 96, p, f, 4, 64, 96, 17, gpu.stream) == 2001  # splits > 16
    assert raw.cs1_gemm_split_f32(gemm, p, 96, p, f, 4, 64, 100, 3, gpu.stream) == 2001  # K % splits
    assert raw.cs1_gemm_split_f32(gemm, p, 96, p, f, 4, 64, 84, 2, gpu.stream) == 2002  # slice 42: not 16 bytes
    assert raw.cs1_gemm_split_f32(gemm, p, 64, p, f, 4, 64, 96, 3, gpu.stream) == 2001  # ldx < K
    assert raw.cs1_gemm_split_f32(gemm, p, 96, p, gpu.ffi.cast("float *", buf.at(4)), 4, 64, 96, 3,
                                  gpu.stream) == 2002  # partials not 16-byte aligned
    assert raw.cs1_gemm_split_f32(null, p, 96, p, f, 4, 64, 96, 3, gpu.stream) == 2003
    gpu.sync()
