"""cs1_letter_readout against a float64 reference: h = bf16(residual + delta) at each prompt's last row,
y = bf16(RMSNorm(1+w)(h)), logits = y . letters (fp32 letter rows). cs1_gather_rows (the read-out rows of the last
layer's tail) against numpy indexing: a copy, so exact.

Tolerance (fp32 logits): |logit - ref| <= 1e-5 * sum_d |y_d l_d| + 2 * max_d ulp(y_d) * max_d |l_d| -- fp32 summation
error plus at most one y value whose bf16 rounding flips at a near-tie between the fp32 kernel and float64.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import EPS, ROWS, rand_bf16

from startlux_native import bf16

D, N_LETTERS = 2560, 26
MAX_D = (48 * 1024 - 128) // 4  # cs1_letter_readout refuses a wider row (status 2001)


def reference(res, delta, last, w, letters):
    h = bf16.from_bits(res[last]).astype(np.float32)
    if delta is not None:
        h = bf16.round_(h + bf16.from_bits(delta[last]))
    h = h.astype(np.float64)
    y = bf16.round_((h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + EPS)
                     * (1.0 + bf16.from_bits(w).astype(np.float64))).astype(np.float32)).astype(np.float64)
    l64 = letters.astype(np.float64)
    ref = y @ l64.T
    terms = np.abs(y) @ np.abs(l64).T
    # one flipped y rounding moves a logit by at most max ulp(y) * max |l| (a bound, cheap to form)
    flip = bf16.ulp(y).astype(np.float64).max(axis=-1)[:, None] * np.abs(l64).max(axis=-1)[None, :]
    return ref, 1e-5 * terms + 2.0 * flip


def run_readout(gpu, rng, n_rows, with_delta, d=D, n_letters=N_LETTERS):
    T = n_rows + 37
    res = rand_bf16(rng, (T, d), 3.0)
    delta = rand_bf16(rng, (T, d), 1.0) if with_delta else None
    w = rand_bf16(rng, (d,), 0.1)
    letters = (0.25 * rng.standard_normal((n_letters, d))).astype(np.float32)
    last = np.sort(rng.choice(T, n_rows, replace=False)).astype(np.int32)
    ffi = gpu.ffi
    logits = gpu.empty(n_rows * n_letters * 4)  # poisoned: every logit must be written
    d_res = gpu.upload(res)
    gpu.lib.cs1_letter_readout(d_res.ptr, gpu.upload(delta).ptr if with_delta else ffi.NULL,
                               ffi.cast("int32_t *", gpu.upload(last).ptr), n_rows, gpu.upload(w).ptr,
                               ffi.cast("float *", gpu.upload(letters).ptr), n_letters,
                               ffi.cast("float *", logits.ptr), d, EPS, gpu.stream)
    got = gpu.download(logits, np.float32, (n_rows, n_letters)).astype(np.float64)
    assert (gpu.download(d_res, np.uint16, (T, d)) == res).all(), "the residual is read-only here"
    ref, tol = reference(res, delta, last, w, letters)
    assert np.isfinite(got).all()
    err = np.abs(got - ref)
    print(f"readout n={n_rows} D={d} letters={n_letters} delta={with_delta}: max |err| {err.max():.3e}, "
          f"max err/tol {(err / tol).max():.3f}, max |logit| {np.abs(ref).max():.2f}")
    assert (err <= tol).all()


@pytest.mark.parametrize("n_rows", ROWS)
@pytest.mark.parametrize("with_delta", [True, False])
def test_letter_readout(gpu, rng, n_rows, with_delta):
    run_readout(gpu, rng, n_rows, with_delta)


# awkward widths (a lane's last batch partly past D; fewer elements than lanes) and letter counts (fewer rows than
# warps, more rows than warps); the widest D whose row (4 bytes a value) fits 48 KiB of shared memory beside the
# kernel's 128-byte scratch is 12256
@pytest.mark.parametrize(("d", "n_letters"), [(1, 1), (63, 26), (64, 32), (65, 33), (640, 40), (4097, 26),
                                              (MAX_D, 3)])
@pytest.mark.parametrize("n_rows", [1, 65])
def test_letter_readout_awkward_sizes(gpu, rng, d, n_letters, n_rows):
    run_readout(gpu, rng, n_rows, True, d, n_letters)


def test_readout_empty_and_checks(gpu):
    raw, ffi, null = gpu.lib.raw, gpu.ffi, gpu.ffi.NULL
    fp = ffi.cast("float *", 0)
    assert raw.cs1_letter_readout(null, null, ffi.cast("int32_t *", 0), 0, null, fp, 26, fp, D, EPS, gpu.stream) == 0
    p = gpu.empty(1 << 16)
    assert raw.cs1_letter_readout(p.ptr, null, ffi.cast("int32_t *", p.ptr), 2, null, ffi.cast("float *", p.ptr), 26,
                                  ffi.cast("float *", p.ptr), D, EPS, gpu.stream) == 2003
    for too_wide in (MAX_D + 1, 1 << 20):
        assert raw.cs1_letter_readout(p.ptr, null, ffi.cast("int32_t *", p.ptr), 2, p.ptr, ffi.cast("float *", p.ptr),
                                      26, ffi.cast("float *", p.ptr), too_wide, EPS, gpu.stream) == 2001
    gpu.sync()


def run_gather(gpu, rng, n, width, ld_src, ld_dst, src_offset=0, dst_offset=0, bad_rows=False):
    src_rows = n + 5
    src = rand_bf16(rng, (src_rows, ld_src), 2.0)
    rows = rng.integers(0, src_rows, n).astype(np.int32)
    if bad_rows and n > 2:  # outside [0, src_rows): zeros
        rows[0], rows[-1] = -1, src_rows
    ffi = gpu.ffi
    d_src = gpu.empty(src.nbytes + src_offset, poison=False)
    gpu.lib.cs1_upload(d_src.at(src_offset), ffi.from_buffer(src), src.nbytes, gpu.stream)
    dst = gpu.empty(n * ld_dst * 2 + dst_offset)  # poisoned (0xFFFF): every row's width columns must be written
    gpu.lib.cs1_gather_rows(d_src.at(src_offset), ld_src, src_rows, ffi.cast("int32_t *", gpu.upload(rows).ptr), n,
                            dst.at(dst_offset), ld_dst, width, gpu.stream)
    raw = gpu.download(dst, np.uint8, (n * ld_dst * 2 + dst_offset,))[dst_offset:]
    got = raw.view(np.uint16).reshape(n, ld_dst)
    ok = (rows >= 0) & (rows < src_rows)
    want = np.where(ok[:, None], src[np.clip(rows, 0, src_rows - 1), :width], 0).astype(np.uint16)
    assert (got[:, :width] == want).all(), f"gather n={n} width={width}: rows differ"
    assert (got[:, width:] == 0xFFFF).all(), "columns past width are not the gather's to write"
    print(f"gather n={n} width={width} ld {ld_src}/{ld_dst} offsets {src_offset}/{dst_offset} bad={bad_rows}: exact")


@pytest.mark.parametrize("n", ROWS)
def test_gather_rows_vector(gpu, rng, n):  # the 16-byte path: width, lds multiples of 8, aligned pointers
    run_gather(gpu, rng, n, 2560, 2560, 2560, bad_rows=True)


@pytest.mark.parametrize(("width", "ld_src", "ld_dst"), [(1, 1, 1), (63, 64, 63), (64, 72, 64), (65, 65, 80),
                                                         (640, 648, 640), (4096, 4096, 4104), (4097, 4097, 4097)])
@pytest.mark.parametrize("n", [1, 65])
def test_gather_rows_awkward_sizes(gpu, rng, n, width, ld_src, ld_dst):
    run_gather(gpu, rng, n, width, ld_src, ld_dst, bad_rows=True)


def test_gather_rows_misaligned_pointers(gpu, rng):  # 2-byte aligned only: the scalar path
    run_gather(gpu, rng, 63, 640, 640, 640, src_offset=2, dst_offset=0)
    run_gather(gpu, rng, 63, 640, 640, 640, src_offset=0, dst_offset=2)


def test_gather_rows_empty_and_checks(gpu):
    raw, ffi, null = gpu.lib.raw, gpu.ffi, gpu.ffi.NULL
    ip = ffi.cast("int32_t *", 0)
    assert raw.cs1_gather_rows(null, 8, 4, ip, 0, null, 8, 8, gpu.stream) == 0
    assert raw.cs1_gather_rows(null, 8, 4, ip, 2, null, 8, 0, gpu.stream) == 0
    p = gpu.empty(1 << 12)
    pi = ffi.cast("int32_t *", p.ptr)
    assert raw.cs1_gather_rows(null, 8, 4, pi, 2, p.ptr, 8, 8, gpu.stream) == 2003
    assert raw.cs1_gather_rows(p.ptr, 7, 4, pi, 2, p.ptr, 8, 8, gpu.stream) == 2001  # ld_src < width
    assert raw.cs1_gather_rows(p.ptr, 8, 4, pi, 2, p.ptr, 7, 8, gpu.stream) == 2001  # ld_dst < width
    assert raw.cs1_gather_rows(p.ptr, 8, 4, pi, -1, p.ptr, 8, 8, gpu.stream) == 2001
    assert raw.cs1_gather_rows(p.at(1), 8, 4, pi, 2, p.ptr, 8, 8, gpu.stream) == 2002
    gpu.sync()
