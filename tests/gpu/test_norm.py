"""cs1_embed, cs1_rms_norm, cs1_add_rms_norm, cs1_gated_rms_norm against float64 numpy references.

Tolerances (bf16 outputs): the embedding and the residual add are exact; every norm output is within 1 bf16 ulp of
the float64 reference that rounds at transformers' points (qwen3_5-model.md §4.1, §4.2). Where the reference's
intermediate bf16 rounding sits within 1e-5 (relative) of a tie, the fp32 kernel may round the other way; for those
elements (counted and printed) the reference is also evaluated with the other neighbour at that intermediate, and the
output must be within 1 ulp of one of the candidates.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import EPS, ROWS, rand_bf16

from startlux_native import bf16


def f64(bits: np.ndarray) -> np.ndarray:
    return bf16.from_bits(bits).astype(np.float64)


def round64(x: np.ndarray) -> np.ndarray:
    return bf16.round_(x.astype(np.float32)).astype(np.float64)


def near_tie(x: np.ndarray, rel: float = 1e-5) -> np.ndarray:
    """True where x is within rel of a bf16 rounding midpoint (double-rounding territory)."""
    u = bf16.ulp(x).astype(np.float64)
    frac = np.abs(x) / u - np.floor(np.abs(x) / u)
    return np.abs(frac - 0.5) * u <= rel * np.abs(x) + 1e-30


def other_neighbour(exact: np.ndarray) -> np.ndarray:
    """The bf16 value on the other side of `exact` from its round-to-nearest value (float64)."""
    near = bf16.to_bits(exact.astype(np.float32)).astype(np.int32)
    nearest = bf16.from_bits(near.astype(np.uint16)).astype(np.float64)
    step = np.sign(exact - nearest) * np.sign(nearest)  # +1: away from zero in bits
    return bf16.from_bits((near + step.astype(np.int32)).astype(np.uint16)).astype(np.float64)


def ulps(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    return np.abs(out.astype(np.float64) - ref) / bf16.ulp(ref).astype(np.float64)


def check_ulps(name: str, out_bits: np.ndarray, ref: np.ndarray, ambiguous: np.ndarray | None = None,
               alternatives: tuple[np.ndarray, ...] = ()) -> None:
    """1 ulp against ref; at `ambiguous` elements, 1 ulp against the closest of ref and `alternatives`."""
    out = bf16.from_bits(out_bits)
    assert np.isfinite(out).all(), f"{name}: non-finite output (poison left?)"
    e = ulps(out, ref)
    amb = np.zeros(e.shape, bool) if ambiguous is None else np.broadcast_to(ambiguous, e.shape)
    clean_max = float(e[~amb].max()) if (~amb).any() else 0.0
    e_amb = e
    for alt in alternatives:
        e_amb = np.minimum(e_amb, ulps(out, alt))
    amb_max = float(e_amb[amb].max()) if amb.any() else 0.0
    print(f"{name}: max {clean_max:.3f} ulp (clean), {amb_max:.3f} ulp on {int(amb.sum())} near-tie elements "
          f"of {e.size} (closest candidate rounding)")
    assert clean_max <= 1.0, f"{name}: {clean_max} ulp"
    assert amb_max <= 1.0, f"{name}: {amb_max} ulp at a near-tie"


def rms_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * (1.0 + w)


@pytest.mark.parametrize("T", ROWS)
def test_embed_exact(gpu, rng, T):
    vocab, D = 4099, 2560
    table = rand_bf16(rng, (vocab, D))
    ids = rng.integers(0, vocab, T).astype(np.int32)
    d_table, d_ids = gpu.upload(table), gpu.upload(ids)
    out = gpu.empty(T * D * 2)
    gpu.lib.cs1_embed(gpu.ffi.cast("int32_t *", d_ids.ptr), d_table.ptr, out.ptr, T, D, vocab, gpu.stream)
    got = gpu.download(out, np.uint16, (T, D))
    mismatches = int((got != table[ids]).sum())
    print(f"embed T={T}: {mismatches} mismatching values")
    assert mismatches == 0


def test_embed_scalar_path_and_bad_ids(gpu, rng):
    vocab, D, T = 50, 37, 9  # D not a multiple of 8: the scalar path
    table = rand_bf16(rng, (vocab, D))
    ids = rng.integers(0, vocab, T).astype(np.int32)
    ids[3], ids[5] = -4, vocab + 7  # clamped to row 0, never read out of bounds
    d_table, d_ids = gpu.upload(table), gpu.upload(ids)
    out = gpu.empty(T * D * 2)
    gpu.lib.cs1_embed(gpu.ffi.cast("int32_t *", d_ids.ptr), d_table.ptr, out.ptr, T, D, vocab, gpu.stream)
    got = gpu.download(out, np.uint16, (T, D))
    want = table[np.where((ids < 0) | (ids >= vocab), 0, ids)]
    assert (got == want).all()


@pytest.mark.parametrize("T", ROWS)
@pytest.mark.parametrize("D", [2560, 257])
def test_rms_norm(gpu, rng, T, D):
    x = rand_bf16(rng, (T, D), 3.0)
    w = rand_bf16(rng, (D,), 0.1)
    out = gpu.empty(T * D * 2)
    gpu.lib.cs1_rms_norm(gpu.upload(x).ptr, gpu.upload(w).ptr, out.ptr, T, D, EPS, gpu.stream)
    got = gpu.download(out, np.uint16, (T, D))
    check_ulps(f"rms_norm T={T} D={D}", got, rms_ref(f64(x), f64(w)))


@pytest.mark.parametrize("T", ROWS)
def test_add_rms_norm(gpu, rng, T):
    D = 2560
    res = rand_bf16(rng, (T, D), 4.0)
    delta = rand_bf16(rng, (T, D), 1.0)
    w = rand_bf16(rng, (D,), 0.1)
    d_res = gpu.upload(res)
    out = gpu.empty(T * D * 2)
    gpu.lib.cs1_add_rms_norm(d_res.ptr, gpu.upload(delta).ptr, gpu.upload(w).ptr, out.ptr, T, D, EPS, gpu.stream)
    new_res = gpu.download(d_res, np.uint16, (T, D))
    # residual add: bf16 + bf16 computed in fp32 and rounded once, exactly as torch does
    want_res = bf16.to_bits(bf16.from_bits(res) + bf16.from_bits(delta))
    mism = int((new_res != want_res).sum())
    print(f"add_rms_norm T={T}: residual mismatches {mism}")
    assert mism == 0
    check_ulps(f"add_rms_norm T={T}", gpu.download(out, np.uint16, (T, D)), rms_ref(f64(want_res), f64(w)))


# (D, element offset of x/residual and out): which kernel runs. The register kernel (a 128-thread block per row, all
# loads first) needs D % 8 == 0, D <= 4096 and 16-byte aligned pointers (Pack8 per thread: 1..4, the last threads
# partly idle when D / 8 is not a multiple of 128); everything else takes the plain block-per-row kernel.
NORM_PATHS = [
    (8, 0),  # register kernel, 1 pack in thread 0 only
    (1000, 0),  # register kernel, 1 pack per thread with idle threads (125 packs)
    (3000, 0),  # register kernel, 3 packs per thread with idle threads (375 packs)
    (4096, 0),  # register kernel, 4 packs per thread exactly
    (2560, 1),  # plain: pointers 2 bytes off 16
    (100, 0),  # plain: D % 8 != 0
    (4104, 0),  # plain: D > 4096
]


def place(gpu, bits: np.ndarray, offset: int):
    """Upload bits `offset` elements into a fresh buffer; returns (buffer, pointer to the data)."""
    buf = gpu.empty((bits.size + offset) * 2, poison=False)
    gpu.lib.cs1_upload(buf.at(2 * offset), gpu.ffi.from_buffer(np.ascontiguousarray(bits)), bits.nbytes, gpu.stream)
    return buf, buf.at(2 * offset)


@pytest.mark.parametrize("T", [1, 65, 1027])
@pytest.mark.parametrize("D,offset", NORM_PATHS)
def test_rms_norm_paths(gpu, rng, T, D, offset):
    x = rand_bf16(rng, (T, D), 3.0)
    w = rand_bf16(rng, (D,), 0.1)
    _, x_ptr = place(gpu, x, offset)
    out = gpu.empty((T * D + offset) * 2)
    gpu.lib.cs1_rms_norm(x_ptr, gpu.upload(w).ptr, out.at(2 * offset), T, D, EPS, gpu.stream)
    got = gpu.download(out, np.uint16, (T * D + offset,))[offset:].reshape(T, D)
    check_ulps(f"rms_norm T={T} D={D} offset={offset}", got, rms_ref(f64(x), f64(w)))


@pytest.mark.parametrize("T", [1, 65, 1027])
@pytest.mark.parametrize("D,offset", NORM_PATHS)
def test_add_rms_norm_paths(gpu, rng, T, D, offset):
    res = rand_bf16(rng, (T, D), 4.0)
    delta = rand_bf16(rng, (T, D), 1.0)
    w = rand_bf16(rng, (D,), 0.1)
    d_res, res_ptr = place(gpu, res, offset)
    _, delta_ptr = place(gpu, delta, offset)
    out = gpu.empty((T * D + offset) * 2)
    gpu.lib.cs1_add_rms_norm(res_ptr, delta_ptr, gpu.upload(w).ptr, out.at(2 * offset), T, D, EPS, gpu.stream)
    new_res = gpu.download(d_res, np.uint16, (T * D + offset,))[offset:].reshape(T, D)
    want_res = bf16.to_bits(bf16.from_bits(res) + bf16.from_bits(delta))
    mism = int((new_res != want_res).sum())
    print(f"add_rms_norm T={T} D={D} offset={offset}: residual mismatches {mism}")
    assert mism == 0
    got = gpu.download(out, np.uint16, (T * D + offset,))[offset:].reshape(T, D)
    check_ulps(f"add_rms_norm T={T} D={D} offset={offset}", got, rms_ref(f64(want_res), f64(w)))


def check_gated_rms_norm(gpu, rng, T, H, D, ldz, round_weighted, x_offset=0):
    x = rand_bf16(rng, (T, H, D), 0.5)
    z = rand_bf16(rng, (T, ldz), 2.0)  # z lives inside wider projection rows
    w = (1.0 + 0.2 * rng.standard_normal(D)).astype(np.float32)
    if round_weighted:
        w = bf16.round_(w)
    _, x_ptr = place(gpu, x, x_offset)
    out = gpu.empty(T * H * D * 2)
    gpu.lib.cs1_gated_rms_norm(x_ptr, gpu.upload(z).ptr, ldz, gpu.ffi.cast("float *", gpu.upload(w).ptr),
                               round_weighted, out.ptr, T, H, D, EPS, gpu.stream)
    got = gpu.download(out, np.uint16, (T, H, D))
    xf = f64(x)
    n_exact = xf / np.sqrt(np.mean(xf * xf, axis=-1, keepdims=True) + EPS)
    w64 = w.astype(np.float64)
    silu_z = (lambda zf: zf / (1.0 + np.exp(-zf)))(f64(z[:, :H * D]).reshape(T, H, D))

    def finish(n):  # the rest of the reference after the first bf16 rounding; returns (output, w*n before rounding)
        nw = w64 * n
        return (round64(nw) if round_weighted else nw) * silu_z, nw

    ref, nw_exact = finish(round64(n_exact))
    amb = near_tie(n_exact)
    alts = [finish(other_neighbour(n_exact))[0]]
    if round_weighted:  # the second rounding (w * n) can sit at a tie too
        amb |= near_tie(nw_exact)
        alts.append(other_neighbour(nw_exact) * silu_z)
    check_ulps(f"gated_rms_norm T={T} H={H} D={D} ldz={ldz} x_offset={x_offset} round_weighted={round_weighted}",
               got, ref, amb, tuple(alts))


@pytest.mark.parametrize("T", ROWS)
@pytest.mark.parametrize("round_weighted", [1, 0])
def test_gated_rms_norm(gpu, rng, T, round_weighted):
    H, D = 32, 128
    check_gated_rms_norm(gpu, rng, T, H, D, H * D + 8 * 3, round_weighted)  # 16-byte path


# 16-byte path: ldz % 8 == 0 and aligned pointers, D / 8 lanes per (token, head); H = 3 leaves a warp's last item
# groups empty. One-warp-per-item path: ldz odd or x 2 bytes off 16.
@pytest.mark.parametrize("T", [1, 65])
@pytest.mark.parametrize("H,D,extra,x_offset", [
    (3, 64, 8, 0), (3, 128, 0, 0), (3, 256, 8, 0), (16, 256, 16, 0),
    (3, 64, 3, 0), (3, 128, 1, 0), (3, 256, 5, 0), (32, 128, 24, 1),
])
def test_gated_rms_norm_paths(gpu, rng, T, H, D, extra, x_offset):
    check_gated_rms_norm(gpu, rng, T, H, D, H * D + extra, 1, x_offset)


def test_empty_work_returns_zero(gpu):
    null = gpu.ffi.NULL
    assert gpu.lib.raw.cs1_rms_norm(null, null, null, 0, 2560, EPS, gpu.stream) == 0
    assert gpu.lib.raw.cs1_add_rms_norm(null, null, null, null, 0, 2560, EPS, gpu.stream) == 0
    assert gpu.lib.raw.cs1_gated_rms_norm(null, null, 0, gpu.ffi.cast("float *", 0), 1, null, 0, 32, 128, EPS,
                                          gpu.stream) == 0
    gpu.sync()


# ---- cs1_add_partials_rms_norm: the delta made from fp32 partials (cs1_gemm_split_f32) -------------------------------

# (T, D, splits): the 4B's down projection at every awkward row count, then the register kernel's other widths and
# the counts without their own kernel (1, 5, 16: the loop over `splits`; 2, 3, 4 load every partial up front)
PARTIAL_CASES = [(T, 2560, 3) for T in ROWS] + [(1, 8, 2), (63, 1000, 1), (65, 3000, 4), (65, 2560, 5),
                                                        (640, 4096, 16)]


@pytest.mark.parametrize("T,D,splits", PARTIAL_CASES)
def test_add_partials_rms_norm(gpu, rng, T, D, splits):
    """delta = bf16(fp32 p_0 + p_1 + ... in order): exact against numpy's float32 sums in the same order; then the
    residual add exact and the norm within 1 ulp, as cs1_add_rms_norm. The partials sit split_stride floats apart,
    with a gap after each block."""
    res = rand_bf16(rng, (T, D), 4.0)
    parts = (rng.standard_normal((splits, T, D)) * (1.0 / splits)).astype(np.float32)
    w = rand_bf16(rng, (D,), 0.1)
    stride = T * D + 12
    spaced = np.full((splits, stride), np.nan, np.float32)
    spaced[:, :T * D] = parts.reshape(splits, -1)
    d_res = gpu.upload(res)
    d_parts = gpu.upload(spaced)
    out = gpu.empty(T * D * 2)
    gpu.lib.cs1_add_partials_rms_norm(d_res.ptr, gpu.ffi.cast("float *", d_parts.ptr), splits, stride,
                                      gpu.upload(w).ptr, out.ptr, T, D, EPS, gpu.stream)
    total = parts[0].copy()
    for s in range(1, splits):
        total = total + parts[s]  # float32, in split order
    delta = bf16.to_bits(total)
    want_res = bf16.to_bits(bf16.from_bits(res) + bf16.from_bits(delta))
    new_res = gpu.download(d_res, np.uint16, (T, D))
    mism = int((new_res != want_res).sum())
    print(f"add_partials_rms_norm T={T} D={D} splits={splits}: residual mismatches {mism}")
    assert mism == 0
    got = gpu.download(out, np.uint16, (T, D))
    check_ulps(f"add_partials_rms_norm T={T} D={D}", got, rms_ref(f64(want_res), f64(w)))


def test_add_partials_rms_norm_refuses(gpu, rng):
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    buf = gpu.empty(1 << 20)
    p, f = buf.ptr, gpu.ffi.cast("float *", buf.ptr)
    assert raw.cs1_add_partials_rms_norm(null, gpu.ffi.cast("float *", null), 3, 0, null, null, 0, 2560, EPS,
                                         gpu.stream) == 0  # no rows
    assert raw.cs1_add_partials_rms_norm(p, f, 3, 64 * 100, p, p, 8, 100, EPS, gpu.stream) == 2001  # D % 8
    assert raw.cs1_add_partials_rms_norm(p, f, 3, 64 * 4104, p, p, 8, 4104, EPS, gpu.stream) == 2001  # D > 4096
    assert raw.cs1_add_partials_rms_norm(p, f, 0, 64 * 64, p, p, 8, 64, EPS, gpu.stream) == 2001  # splits
    assert raw.cs1_add_partials_rms_norm(p, f, 3, 8 * 64 - 4, p, p, 8, 64, EPS, gpu.stream) == 2001  # stride short
    assert raw.cs1_add_partials_rms_norm(p, f, 3, 8 * 64 + 2, p, p, 8, 64, EPS, gpu.stream) == 2002  # stride % 4
    assert raw.cs1_add_partials_rms_norm(buf.at(2), f, 3, 8 * 64, p, p, 8, 64, EPS, gpu.stream) == 2002
    assert raw.cs1_add_partials_rms_norm(p, f, 3, 8 * 64, p, null, 8, 64, EPS, gpu.stream) == 2003
    gpu.sync()
