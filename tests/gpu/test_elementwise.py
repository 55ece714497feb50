"""cs1_silu_mul and cs1_attn_prep against float64 numpy references with transformers' bf16 rounding points.

Tolerances: silu_mul within 1 bf16 ulp (2 ulp where the reference's rounded silu sits within 1e-5 of a tie), the
packed 16-byte path bit-identical to the scalar path. attn_prep: the gate copy is exact (cs1_attn_prep_sigmoid_gate:
its q and k bit-identical to cs1_attn_prep's, its gate within 1 bf16 ulp of bf16(sigmoid) in float32 numpy, >= 99.99 %
bit-exact: CUDA's expf and numpy's exp may differ in the last fp32 bit); >= 99.9 % of q/k values
are bit-exact and every value is within 2 ulp of its scale (the larger of the two rounded products for a rotated dim,
because the bf16 sum can cancel): the kernel's fp32 norm or cosf may round a near-tie the other way, which moves a
product by 1 ulp.
"""

from __future__ import annotations

import numpy as np
import pytest
from device_inputs import EPS, ROWS, rand_bf16

from startlux_native import bf16


def f64(bits):
    return bf16.from_bits(bits).astype(np.float64)


def round64(x):
    return bf16.round_(np.asarray(x, dtype=np.float32)).astype(np.float64)


def near_tie(x, rel=1e-5):
    u = bf16.ulp(x).astype(np.float64)
    frac = np.abs(x) / u - np.floor(np.abs(x) / u)
    return np.abs(frac - 0.5) * u <= rel * np.abs(x) + 1e-30


# ---- silu_mul -----------------------------------------------------------------------------------------------------

def silu_mul_ref(g, u):
    s_exact = g / (1.0 + np.exp(-g))
    return round64(s_exact) * u, near_tie(s_exact)


def run_silu_mul(gpu, gu_bits, T, I, ld, elem_offset=0, out_offset=0):
    """gate_up rows of ld placed elem_offset elements into the buffer (an odd offset forces the scalar path)."""
    buf = np.zeros(elem_offset + T * ld, np.uint16)
    buf[elem_offset:] = gu_bits.reshape(-1)
    d = gpu.upload(buf)
    out = gpu.empty((out_offset + T * I) * 2)
    gpu.lib.cs1_silu_mul(d.at(2 * elem_offset), ld, out.at(2 * out_offset), T, I, gpu.stream)
    return gpu.download(out, np.uint16, (out_offset + T * I,))[out_offset:].reshape(T, I)


@pytest.mark.parametrize("T", ROWS)
def test_silu_mul_packed_vs_reference_and_scalar(gpu, rng, T):
    I = 9216 if T <= 700 else 1024
    ld = 2 * I + 16
    gu = rand_bf16(rng, (T, ld), 2.5)
    got = run_silu_mul(gpu, gu, T, I, ld)
    g, u = f64(gu[:, :I]), f64(gu[:, I:2 * I])
    ref, amb = silu_mul_ref(g, u)
    out = bf16.from_bits(got).astype(np.float64)
    assert np.isfinite(out).all()
    e = np.abs(out - ref) / bf16.ulp(ref)
    clean = float(e[~amb].max())
    tie = float(e[amb].max()) if amb.any() else 0.0
    print(f"silu_mul T={T} I={I}: max {clean:.3f} ulp, {tie:.3f} ulp on {int(amb.sum())} near-tie values")
    assert clean <= 1.0 and tie <= 2.0
    scalar = run_silu_mul(gpu, gu, T, I, ld, elem_offset=1, out_offset=1)  # misaligned: the scalar kernel
    diff = int((scalar != got).sum())
    print(f"silu_mul T={T}: packed vs scalar differing values: {diff}")
    assert diff == 0


@pytest.mark.parametrize("I,ld", [(37, 79), (64, 136), (8, 16)])
def test_silu_mul_odd_shapes(gpu, rng, I, ld):
    T = 65
    gu = rand_bf16(rng, (T, ld), 2.0)
    got = bf16.from_bits(run_silu_mul(gpu, gu, T, I, ld)).astype(np.float64)
    ref, amb = silu_mul_ref(f64(gu[:, :I]), f64(gu[:, I:2 * I]))
    e = np.abs(got - ref) / bf16.ulp(ref)
    print(f"silu_mul I={I} ld={ld}: max {e.max():.3f} ulp")
    assert np.where(amb, e <= 2.0, e <= 1.0).all()


# ---- attn_prep ----------------------------------------------------------------------------------------------------

def inv_freq_f32(rotary_dim: int, theta: float) -> np.ndarray:
    exponent = np.arange(0, rotary_dim, 2, dtype=np.float32) / np.float32(rotary_dim)
    return (np.float32(1.0) / np.power(np.float32(theta), exponent)).astype(np.float32)


def attn_prep_ref(qkv, T, Hq, Hk, Dh, rot, qw, kw, positions, inv_freq):
    """float64 with bf16 rounding after the norm, of cos/sin, of each product and of the sum.
    Returns q, gate, k (float64) and per-value error scales for q and k."""
    row = f64(qkv)
    qg = row[:, :2 * Hq * Dh].reshape(T, Hq, 2 * Dh)
    q_raw, gate = qg[:, :, :Dh], qg[:, :, Dh:]
    k_raw = row[:, 2 * Hq * Dh:2 * Hq * Dh + Hk * Dh].reshape(T, Hk, Dh)
    phi = positions.astype(np.float32)[:, None] * inv_freq[None, :]  # fp32 product, as transformers
    c, s = round64(np.cos(phi.astype(np.float64))), round64(np.sin(phi.astype(np.float64)))
    half = rot // 2

    def one(x, w):
        n = round64(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * (1.0 + f64(w)))
        out, scale = n.copy(), np.abs(n)
        x1, x2 = n[..., :half], n[..., half:rot]
        cc, ss = c[:, None, :], s[:, None, :]
        a1, b1 = round64(x1 * cc), round64(-x2 * ss)
        a2, b2 = round64(x2 * cc), round64(x1 * ss)
        out[..., :half] = round64(a1 + b1)
        out[..., half:rot] = round64(a2 + b2)
        scale[..., :half] = np.maximum(np.abs(a1), np.abs(b1))
        scale[..., half:rot] = np.maximum(np.abs(a2), np.abs(b2))
        return out, np.maximum(scale, np.abs(out))

    q, q_scale = one(q_raw, qw)
    k, k_scale = one(k_raw, kw)
    return q, gate, k, q_scale, k_scale


def prompt_positions(rng, T):
    """Positions of several packed prompts (restarting at 0), the last one starting far out."""
    cuts = np.sort(rng.choice(np.arange(1, T), size=min(3, T - 1), replace=False)) if T > 1 else np.array([], int)
    starts = np.concatenate([[0], cuts])
    pos = np.arange(T) - np.repeat(starts, np.diff(np.concatenate([starts, [T]])))
    if T > 2:
        pos[-(T // 3):] += 30000  # large angles: checks the fp32 argument reduction of cos/sin
    return pos.astype(np.int32)


def check_attn_prep(gpu, rng, T, Hq, Hk, Dh, rot, ld, qkv_offset=0):
    """Run cs1_attn_prep on fresh inputs (qkv placed qkv_offset elements into its buffer) and check it."""
    qkv = rand_bf16(rng, (T, ld), 2.0)
    qw, kw = rand_bf16(rng, (Dh,), 0.1), rand_bf16(rng, (Dh,), 0.1)
    positions = prompt_positions(rng, T)
    inv_freq = inv_freq_f32(rot, 10_000_000.0)
    d_qkv = gpu.empty((qkv_offset + qkv.size) * 2, poison=False)
    gpu.lib.cs1_upload(d_qkv.at(2 * qkv_offset), gpu.ffi.from_buffer(qkv), qkv.nbytes, gpu.stream)
    d_freq = gpu.upload(inv_freq if rot else np.ones(1, np.float32))  # rot 0: never read
    q = gpu.empty(T * Hq * Dh * 2)
    gate = gpu.empty(T * Hq * Dh * 2)
    k = gpu.empty(T * Hk * Dh * 2)
    ffi = gpu.ffi
    gpu.lib.cs1_attn_prep(d_qkv.at(2 * qkv_offset), ld, gpu.upload(qw).ptr, gpu.upload(kw).ptr,
                          ffi.cast("int32_t *", gpu.upload(positions).ptr), ffi.cast("float *", d_freq.ptr), q.ptr,
                          gate.ptr, k.ptr, T, Hq, Hk, Dh, rot, EPS, gpu.stream)
    got_q = bf16.from_bits(gpu.download(q, np.uint16, (T, Hq, Dh))).astype(np.float64)
    got_gate = gpu.download(gate, np.uint16, (T, Hq * Dh))
    got_k = bf16.from_bits(gpu.download(k, np.uint16, (T, Hk, Dh))).astype(np.float64)
    rq, _, rk, q_scale, k_scale = attn_prep_ref(qkv, T, Hq, Hk, Dh, rot, qw, kw, positions, inv_freq)
    want_gate = qkv[:, :2 * Hq * Dh].reshape(T, Hq, 2 * Dh)[:, :, Dh:].reshape(T, Hq * Dh)
    assert (got_gate == want_gate).all(), "gate is a plain per-head copy"
    label = f"attn_prep T={T} Hq={Hq} Hk={Hk} Dh={Dh} rot={rot} ld={ld} offset={qkv_offset}"
    # the sigmoid form on the same inputs: q and k the same bits, the gate bf16(sigmoid(gate))
    q2, gate2, k2 = gpu.empty(T * Hq * Dh * 2), gpu.empty(T * Hq * Dh * 2), gpu.empty(T * Hk * Dh * 2)
    gpu.lib.cs1_attn_prep_sigmoid_gate(d_qkv.at(2 * qkv_offset), ld, gpu.upload(qw).ptr, gpu.upload(kw).ptr,
                                       ffi.cast("int32_t *", gpu.upload(positions).ptr),
                                       ffi.cast("float *", d_freq.ptr), q2.ptr, gate2.ptr, k2.ptr, T, Hq, Hk, Dh, rot,
                                       EPS, gpu.stream)
    assert np.array_equal(gpu.download(q2, np.uint16, (T, Hq, Dh)), gpu.download(q, np.uint16, (T, Hq, Dh)))
    assert np.array_equal(gpu.download(k2, np.uint16, (T, Hk, Dh)), gpu.download(k, np.uint16, (T, Hk, Dh)))
    got_sig = gpu.download(gate2, np.uint16, (T, Hq * Dh))
    g32 = bf16.from_bits(want_gate).astype(np.float32)
    want_sig = bf16.to_bits(np.float32(1.0) / (np.float32(1.0) + np.exp(-g32)))
    off = np.abs(got_sig.astype(np.int32) - want_sig.astype(np.int32))  # same sign: bits differ as ulps
    print(f"{label} sigmoid gate: {(off > 0).sum()} of {off.size} values off by {off.max()} ulp at most")
    assert off.max() <= 1 and (off > 0).sum() <= max(2, 1e-4 * off.size)
    for name, got, ref, scale in (("q", got_q, rq, q_scale), ("k", got_k, rk, k_scale)):
        assert np.isfinite(got).all()
        e = np.abs(got - ref) / bf16.ulp(scale)
        exact = float((got == ref).mean())
        print(f"{label} {name}: max {e.max():.3f} ulp of scale, bit-exact {100 * exact:.4f} %")
        assert e.max() <= 2.0
        # the sum-of-squares order may differ from the reference's: a rare 1-ulp flip, so at most 0.1 % (or 2) inexact
        assert (got != ref).sum() <= max(2, 0.001 * got.size)


@pytest.mark.parametrize("T", ROWS)
def test_attn_prep(gpu, rng, T):
    Hq, Hk, Dh, rot = 16, 4, 256, 64  # the 4B: the warp kernel, 16-byte accesses
    check_attn_prep(gpu, rng, T, Hq, Hk, Dh, rot, (2 * Hq + 2 * Hk) * Dh + 8)  # fused projection rows, a bit wider


# The warp kernel takes Dh 256 / 128 with rotary_dim a multiple of Dh / 16 and <= 64, ld % 8 == 0, aligned pointers;
# the rest goes to the block-per-item kernel.
@pytest.mark.parametrize("T", [1, 65])
@pytest.mark.parametrize("Hq,Hk,Dh,rot,extra,offset", [
    (4, 2, 128, 32, 0, 0),  # warp, 8-byte accesses
    (4, 2, 128, 64, 8, 0),  # warp, rotary lanes 0..15
    (2, 1, 256, 16, 0, 0),  # warp, partner one lane away
    (2, 1, 256, 48, 0, 0),  # warp, half = 24
    (2, 1, 256, 0, 0, 0),  # warp, no rotation
    (2, 1, 256, 40, 0, 0),  # block: rotary_dim not a multiple of 16
    (2, 1, 256, 128, 0, 0),  # block: rotary_dim > 64
    (2, 1, 64, 64, 0, 0),  # block: Dh 64
    (16, 4, 256, 64, 3, 0),  # block: ld % 8 != 0
    (16, 4, 256, 64, 8, 1),  # block: qkv 2 bytes off 16
])
def test_attn_prep_paths(gpu, rng, T, Hq, Hk, Dh, rot, extra, offset):
    check_attn_prep(gpu, rng, T, Hq, Hk, Dh, rot, (2 * Hq + 2 * Hk) * Dh + extra, offset)


def test_attn_prep_rejects_bad_shapes(gpu):
    ffi, null = gpu.ffi, gpu.ffi.NULL
    p = gpu.empty(1 << 16).ptr
    ip, fp = ffi.cast("int32_t *", p), ffi.cast("float *", p)
    raw = gpu.lib.raw
    assert raw.cs1_attn_prep(p, 100, p, p, ip, fp, p, p, p, 4, 16, 4, 256, 64, EPS, gpu.stream) == 2001  # ld
    assert raw.cs1_attn_prep(p, 10240, p, p, ip, fp, p, p, p, 4, 16, 4, 256, 65, EPS, gpu.stream) == 2001  # odd
    assert raw.cs1_attn_prep(p, 10240, null, p, ip, fp, p, p, p, 4, 16, 4, 256, 64, EPS, gpu.stream) == 2003
    assert raw.cs1_attn_prep(null, 0, null, null, ffi.cast("int32_t *", 0), ffi.cast("float *", 0), null, null,
                             null, 0, 16, 4, 256, 64, EPS, gpu.stream) == 0
    gpu.sync()
