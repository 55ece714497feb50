"""Gated DeltaNet ops (native/gdn_conv.cu, native/gdn.cu): conv + SiLU, gates, chunked delta rule, against float64
numpy references.

GPU tests skip here without a device (conftest's cs1 fixture). test_chunked_mirror_matches_recurrence runs on the
CPU: it replays, in float64, exactly the per-chunk steps and workspace quantities of the four prefill kernels (with
the L2 norms and decays applied as row / column factors around the raw q, k products, as the tensor-core kernels do)
and checks them against the token-by-token recurrence at 1e-10, so algebra errors show up before device time is
spent.

Tolerances: conv within 1 bf16 ulp of the once-rounded float64 value; beta within 1 bf16 ulp of bf16(sigmoid(b)),
g within 4e-6 relative (fp32 exp/log1p); prefill max|diff| <= 2e-2 * max|ref| (spec native-abi-reference.md §7.2:
bf16 output and fp32 state against an exact recurrence). Every measured error is printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from startlux_native import bf16

D = 128  # d_k = d_v
C = 64  # chunk
L2_EPS = 1e-6
PREFILL_TOL = 2e-2
SHAPE, ALIGNMENT, NULL, WORKSPACE = 2001, 2002, 2003, 2006


# ---- float64 references ----------------------------------------------------------------------------------------------

def silu(x):
    return x / (1.0 + np.exp(-x))


def l2norm(x):
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def conv_reference(x, w, positions):
    """x [T, ch], w [ch, 4] bf16 values, positions [T]: silu(sum_j w[:, j] x[t-3+j]) with history cut at prompt
    starts, as float64 before the single bf16 rounding. The sum is the fp32 one of the kernel (and causal-conv1d):
    taps in order j = 0..3, each bf16 x bf16 product exact in fp32, so float32 adds reproduce it exactly; an exact
    float64 sum would differ by several bf16 ulps where the taps cancel."""
    t = x.shape[0]
    acc = np.zeros(x.shape, dtype=np.float32)
    for j in range(4):
        back = 3 - j
        shifted = np.zeros(x.shape, dtype=np.float32)
        if back < t:
            shifted[back:] = x[: t - back]
        tap = np.where((positions >= back)[:, None], shifted, np.float32(0.0))
        acc += tap * w[None, :, j].astype(np.float32)
    return silu(acc.astype(np.float64))


def recurrence(q, k, v, g, beta, scale):
    """Token by token (spec §6.6). q, k [T, HK, 128]; v [T, H, 128]; g, beta [T, H] -> o [T, H, 128] (float64)."""
    r = v.shape[1] // k.shape[1]
    qh = np.repeat(l2norm(q), r, axis=1) * scale
    kh = np.repeat(l2norm(k), r, axis=1)
    s = np.zeros((v.shape[1], D, D))
    o = np.empty(v.shape)
    for t in range(v.shape[0]):
        s *= np.exp(g[t])[:, None, None]
        pred = np.matmul(kh[t][:, None, :], s)[:, 0]
        delta = beta[t][:, None] * (v[t] - pred)
        s += kh[t][:, :, None] * delta[:, None, :]
        o[t] = np.matmul(qh[t][:, None, :], s)[:, 0]
    return o


def packed_recurrence(q, k, v, g, beta, cu, scale, t_total):
    o = np.zeros((t_total, v.shape[1], D))
    for a, b in zip(cu[:-1], cu[1:], strict=True):
        if b > a:
            o[a:b] = recurrence(q[a:b], k[a:b], v[a:b], g[a:b], beta[a:b], scale)
    return o


def chunked_mirror(q, k, v, g, beta, cu, scale, t_total):
    """The prefill kernels' steps in float64, same quantities and order (see the header of native/gdn.cu)."""
    hv, hk = v.shape[1], k.shape[1]
    r = hv // hk
    # 1. index: sanitised starts and the chunk offsets of each prompt
    starts = np.maximum.accumulate(np.clip(np.asarray(cu, dtype=np.int64), 0, t_total))
    n_chunks = -(-(starts[1:] - starts[:-1]) // C)
    chunk_off = np.concatenate([[0], np.cumsum(n_chunks)])
    o = np.full((t_total, hv, D), np.nan)
    o[: starts[0]] = 0.0
    o[starts[-1]:] = 0.0
    for s in range(len(cu) - 1):
        state = np.zeros((hv, D, D))
        for c in range(chunk_off[s], chunk_off[s + 1]):
            row0 = starts[s] + (c - chunk_off[s]) * C
            n = min(C, starts[s + 1] - row0)
            rows = slice(row0, row0 + n)

            def pad(x, n=n):  # [n, ...] -> [C, ...], masked rows zero; heads first
                out = np.zeros((C,) + x.shape[1:])
                out[:n] = x
                return np.moveaxis(out, 1, 0)

            kraw = np.repeat(pad(k[rows]), r, axis=0)  # [H, 64, 128]
            qraw = np.repeat(pad(q[rows]), r, axis=0)
            vv, gg, bb = pad(v[rows]), pad(g[rows]), pad(beta[rows])  # [H, 64, 128], [H, 64], [H, 64]
            # 2. prep: Gam, 1/|k|, L from the raw k rows with the norms as factors, then U and W by forward
            #    substitution with right-hand sides beta v and (beta e^Gam / |k|) k_raw
            gam = np.cumsum(gg, axis=1)
            rk = 1.0 / np.sqrt(np.sum(kraw * kraw, axis=2) + L2_EPS)
            lower = np.tril(np.ones((C, C), dtype=bool), -1)
            diff = np.where(lower, gam[:, :, None] - gam[:, None, :], 0.0)
            gram = (kraw @ np.swapaxes(kraw, 1, 2)) * rk[:, :, None] * rk[:, None, :]
            big_l = np.where(lower, bb[:, :, None] * gram * np.exp(diff), 0.0)
            rhs_u, rhs_w = bb[:, :, None] * vv, (bb * np.exp(gam) * rk)[:, :, None] * kraw
            u, w = np.zeros_like(rhs_u), np.zeros_like(rhs_w)
            for i in range(C):
                u[:, i] = rhs_u[:, i] - np.einsum("hj,hjd->hd", big_l[:, i, :i], u[:, :i])
                w[:, i] = rhs_w[:, i] - np.einsum("hj,hjd->hd", big_l[:, i, :i], w[:, :i])
            # 3. walk: S0 of the chunk, Delta over U, then S = e^{Gam_63} S0 + k_raw^T diag(f) Delta with
            #    f_i = e^{Gam_63 - Gam_i} / |k_i| (the normalisation and decay of k^ folded into the rows of Delta)
            s0 = state.copy()
            delta = u - w @ s0
            gam_last = gam[:, C - 1]
            f = rk * np.exp(gam_last[:, None] - gam)
            state = np.exp(gam_last)[:, None, None] * s0 + np.swapaxes(kraw, 1, 2) @ (f[:, :, None] * delta)
            # 4. out: qs = scale / |q|; P = qs_i (q_raw . k_raw_j) / |k_j| e^{Gam_i - Gam_j} (diagonal included),
            #    O = diag(qs e^Gam) q_raw S0 + P Delta
            qs = scale / np.sqrt(np.sum(qraw * qraw, axis=2) + L2_EPS)
            incl = np.tril(np.ones((C, C), dtype=bool))
            diff = np.where(incl, gam[:, :, None] - gam[:, None, :], 0.0)
            qk = (qraw @ np.swapaxes(kraw, 1, 2)) * qs[:, :, None] * rk[:, None, :]
            p = np.where(incl, qk * np.exp(diff), 0.0)
            out = (qs * np.exp(gam))[:, :, None] * (qraw @ s0) + p @ delta
            o[rows] = np.moveaxis(out, 0, 1)[:n]
    return o


# ---- inputs ----------------------------------------------------------------------------------------------------------

def bf16_normal(rng, shape, amplitude=1.0):
    return bf16.round_(rng.standard_normal(shape).astype(np.float32) * np.float32(amplitude))


def realistic_gates(rng, t, h, weak=False):
    """g from the gate formula with Qwen-like A_log / dt_bias, beta = bf16(sigmoid(b)) in (0, 1); fp32 like the op."""
    if weak:
        g = -rng.uniform(1e-5, 1e-3, (t, h)).astype(np.float32)
    else:
        a_log = np.log(rng.uniform(1.0, 16.0, h)).astype(np.float32)
        dt_bias = np.log(np.expm1(rng.uniform(1e-3, 1e-1, h))).astype(np.float32)
        u = bf16_normal(rng, (t, h)) + dt_bias
        sp = np.where(u > 20, u, np.log1p(np.exp(np.minimum(u, 20.0))))
        g = (-np.exp(a_log) * sp).astype(np.float32)
    b = bf16_normal(rng, (t, h), 1.5)
    beta = bf16.round_((1.0 / (1.0 + np.exp(-b.astype(np.float64)))).astype(np.float32))
    beta = bf16.round_(np.clip(beta, 2.0**-10, 1.0 - 2.0**-8))  # strictly inside (0, 1), bf16 values
    return g, beta


def prefill_inputs(rng, t, h, hk, *, amplitude=1.0, weak=False, extra_cols=0):
    """qkv bf16 bits [T, ld] (columns past the q|k|v block are NaN), g, beta fp32; plus float64 q, k, v views."""
    width = (2 * hk + h) * D
    ld = width + extra_cols
    vals = np.empty((t, ld), dtype=np.float32)
    vals[:, : 2 * hk * D] = bf16_normal(rng, (t, 2 * hk * D), amplitude)
    vals[:, 2 * hk * D: width] = bf16_normal(rng, (t, h * D))
    vals[:, width:] = np.nan
    bits = bf16.to_bits(vals)
    g, beta = realistic_gates(rng, t, h, weak)
    v64 = vals.astype(np.float64)
    q = v64[:, : hk * D].reshape(t, hk, D)
    k = v64[:, hk * D: 2 * hk * D].reshape(t, hk, D)
    v = v64[:, 2 * hk * D: width].reshape(t, h, D)
    return bits, ld, g, beta, q, k, v


# ---- CPU mirror of the kernels' algebra ------------------------------------------------------------------------------

def test_chunked_mirror_matches_recurrence(rng):
    h, hk, scale = 4, 2, D**-0.5
    lengths = [1, 63, 64, 65, 130, 0, 7]
    cu = np.concatenate([[0], np.cumsum(lengths)])
    t = int(cu[-1]) + 5  # 5 padding rows
    _, _, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    g64, b64 = g.astype(np.float64), beta.astype(np.float64)
    ref = packed_recurrence(q, k, v, g64, b64, cu, scale, t)
    got = chunked_mirror(q, k, v, g64, b64, cu, scale, t)
    assert np.all(np.isfinite(got)), "mirror left rows unwritten"
    assert np.all(got[cu[-1]:] == 0)
    ratio = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    print(f"mirror vs recurrence: max|diff|/max|ref| = {ratio:.3e}")
    assert ratio <= 1e-10
    # weak decay and tiny q/k amplitudes through the same algebra
    _, _, g, beta, q, k, v = prefill_inputs(rng, 200, h, hk, amplitude=1e-9, weak=True)
    cu = np.array([0, 200])
    ref = packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, scale, 200)
    got = chunked_mirror(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, scale, 200)
    ratio = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    print(f"mirror (weak decay, |q|,|k| ~ 1e-9): max|diff|/max|ref| = {ratio:.3e}")
    assert ratio <= 1e-10


# ---- GPU helpers -----------------------------------------------------------------------------------------------------

def f32p(gpu, buf):
    return gpu.ffi.cast("float *", buf.ptr)


def i32p(gpu, buf):
    return gpu.ffi.cast("int32_t *", buf.ptr)


def workspace_bytes(cs1, t, n_seqs, h):
    out = cs1.ffi.new("size_t *")
    cs1.cs1_gdn_workspace_bytes(t, n_seqs, h, out)
    return int(out[0])


def run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk, scale=D**-0.5):
    """o as float32 [T, H, 128]; o and the workspace start poisoned (NaN)."""
    cu = np.asarray(cu, dtype=np.int32)
    n_seqs = len(cu) - 1
    ws_bytes = workspace_bytes(cs1, t, n_seqs, h)
    d_qkv, d_g, d_b, d_cu = gpu.upload(bits), gpu.upload(g), gpu.upload(beta), gpu.upload(cu)
    d_o, d_ws = gpu.empty(t * h * D * 2), gpu.empty(ws_bytes)
    cs1.cs1_gdn_prefill(d_qkv.ptr, ld, f32p(gpu, d_g), f32p(gpu, d_b), i32p(gpu, d_cu), n_seqs, d_o.ptr, d_ws.ptr,
                        ws_bytes, t, h, hk, scale, gpu.stream)
    gpu.sync()
    return bf16.from_bits(gpu.download(d_o, np.uint16, (t, h, D)))


def check_prefill(label, got, ref):
    assert np.all(np.isfinite(got)), f"{label}: non-finite output (poison left in place?)"
    ratio = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
    print(f"{label}: max|diff|/max|ref| = {ratio:.3e} (tolerance {PREFILL_TOL})")
    assert ratio <= PREFILL_TOL


# ---- conv ------------------------------------------------------------------------------------------------------------

def positions_for(lengths):
    return np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])


def run_conv(cs1, gpu, bits, ld, w_bits, positions, t, channels, byte_offset=0):
    d_x = gpu.empty(bits.nbytes + 16, poison=False)
    cs1.cs1_upload(d_x.at(byte_offset), gpu.ffi.from_buffer(bits), bits.nbytes, gpu.stream)
    d_w, d_pos = gpu.upload(w_bits), gpu.upload(positions)
    d_out = gpu.empty(t * channels * 2)
    cs1.cs1_gdn_conv(d_x.at(byte_offset), ld, d_w.ptr, i32p(gpu, d_pos), d_out.ptr, t, channels, gpu.stream)
    gpu.sync()
    return gpu.download(d_out, np.uint16, (t, channels))


def check_conv(label, out_bits, ref):
    got = bf16.from_bits(out_bits).astype(np.float64)
    ulps = np.abs(got - ref) / bf16.ulp(ref.astype(np.float32))
    print(f"{label}: max error {float(ulps.max()):.3f} bf16 ulp")
    assert np.all(np.isfinite(got))
    assert ulps.max() <= 1.0


@pytest.mark.parametrize("t", [1, 63, 64, 65, 640, 4097])
def test_conv_matches_reference(cs1, gpu, rng, t):
    channels, ld = 8192, 12352  # the 4B: q|k|v columns of the fused GDN projection row
    lengths = [t] if t < 64 else [1, 2, 3, 5, t - 11]
    positions = positions_for(lengths)
    x = bf16_normal(rng, (t, ld))
    w = bf16_normal(rng, (channels, 4), 0.5)
    out = run_conv(cs1, gpu, bf16.to_bits(x), ld, bf16.to_bits(w), positions, t, channels)
    ref = conv_reference(x[:, :channels].astype(np.float64), w.astype(np.float64), positions)
    check_conv(f"conv T={t} (16-byte path)", out, ref)


def test_conv_unaligned_path_matches_vector_path(cs1, gpu, rng):
    t, channels = 300, 8192
    positions = positions_for([100, 3, 197])
    x = bf16_normal(rng, (t, channels))
    w_bits = bf16.to_bits(bf16_normal(rng, (channels, 4), 0.5))
    ref = conv_reference(x.astype(np.float64), bf16.from_bits(w_bits).astype(np.float64), positions)
    vec = run_conv(cs1, gpu, bf16.to_bits(np.pad(x, ((0, 0), (0, 8)))), channels + 8, w_bits, positions, t, channels)
    odd = run_conv(cs1, gpu, bf16.to_bits(np.pad(x, ((0, 0), (0, 1)))), channels + 1, w_bits, positions, t, channels)
    shifted = run_conv(cs1, gpu, bf16.to_bits(x), channels, w_bits, positions, t, channels, byte_offset=2)
    check_conv("conv odd ld (scalar path)", odd, ref)
    assert np.array_equal(vec, odd) and np.array_equal(vec, shifted), "scalar and 16-byte paths differ"
    small = 37  # channel count not a multiple of 8
    out = run_conv(cs1, gpu, bf16.to_bits(x[:, :small].copy()), small, w_bits[:small].copy(), positions, t, small)
    check_conv("conv 37 channels", out, ref[:, :small])


# ---- gates -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", [1, 65, 4097])
def test_gates_match_reference(cs1, gpu, rng, t):
    h = 32
    ld = 2 * h + 6
    ba = bf16_normal(rng, (t, ld), 3.0)
    ba[:, h: 2 * h] += bf16.round_(rng.choice(np.float32([0.0, 18.0, 25.0, -30.0]), (t, h)))  # softplus regimes
    ba = bf16.round_(ba)
    a_log = np.log(rng.uniform(1.0, 16.0, h)).astype(np.float32)
    dt_bias = rng.uniform(-7.0, 1.0, h).astype(np.float32)
    d_ba, d_alog, d_dt = gpu.upload(bf16.to_bits(ba)), gpu.upload(a_log), gpu.upload(dt_bias)
    d_beta, d_g = gpu.empty(t * h * 4), gpu.empty(t * h * 4)
    cs1.cs1_gdn_gates(d_ba.ptr, ld, f32p(gpu, d_alog), f32p(gpu, d_dt), f32p(gpu, d_beta), f32p(gpu, d_g), t, h,
                      gpu.stream)
    gpu.sync()
    beta = gpu.download(d_beta, np.float32, (t, h))
    g = gpu.download(d_g, np.float32, (t, h))
    b, a = ba[:, :h].astype(np.float64), ba[:, h: 2 * h]
    beta_ref = 1.0 / (1.0 + np.exp(-b))
    assert np.array_equal(bf16.round_(beta), beta), "beta is not bf16-representable"
    beta_ulps = np.abs(beta - beta_ref) / bf16.ulp(beta_ref.astype(np.float32))
    u = (a + dt_bias).astype(np.float32).astype(np.float64)  # the add happens in fp32
    g_ref = -np.exp(a_log.astype(np.float64)) * np.where(u > 20, u, np.log1p(np.exp(np.minimum(u, 20.0))))
    g_rel = np.abs(g - g_ref) / np.abs(g_ref)
    print(f"gates T={t}: beta max {float(beta_ulps.max()):.3f} bf16 ulp, g max rel {float(g_rel.max()):.2e}")
    assert beta_ulps.max() <= 1.0
    assert g_rel.max() <= 4e-6


# ---- conv and gates in one launch ------------------------------------------------------------------------------------

def run_conv_gates(cs1, gpu, rows, ld, channels, h, w_bits, positions, a_log, dt_bias, byte_offset=0, combined=True,
                   parts=("conv", "gates")):
    """The forward's layout: q|k|v first and b|a in the last 2h columns of one bf16 row of stride ld. Returns conv
    out, beta and g as raw bits, through cs1_gdn_conv_gates (combined; `parts` picks what it is asked for, the
    other part gets channels or H = 0 and null pointers) or the two separate calls."""
    t = rows.shape[0]
    d_x = gpu.empty(rows.nbytes + 16, poison=False)
    cs1.cs1_upload(d_x.at(byte_offset), gpu.ffi.from_buffer(rows), rows.nbytes, gpu.stream)
    x, ba = d_x.at(byte_offset), d_x.at(byte_offset + 2 * (ld - 2 * h))
    d_w, d_pos, d_alog, d_dt = gpu.upload(w_bits), gpu.upload(positions), gpu.upload(a_log), gpu.upload(dt_bias)
    d_out, d_beta, d_g = gpu.empty(t * channels * 2), gpu.empty(t * h * 4), gpu.empty(t * h * 4)  # NaN-poisoned
    conv = (x, ld, d_w.ptr, i32p(gpu, d_pos), d_out.ptr, t, channels)
    gates = (ba, f32p(gpu, d_alog), f32p(gpu, d_dt), f32p(gpu, d_beta), f32p(gpu, d_g), h)
    if combined:
        null = gpu.ffi.NULL
        c = conv if "conv" in parts else (null, ld, null, null, null, t, 0)
        g = gates if "gates" in parts else (null,) * 5 + (0,)
        st = cs1.raw.cs1_gdn_conv_gates(*c, *g, gpu.stream)
        assert st == 0, cs1.error_string(st)
    else:
        cs1.cs1_gdn_conv(*conv, gpu.stream)
        cs1.cs1_gdn_gates(ba, ld, *gates[1:5], t, h, gpu.stream)
    gpu.sync()
    return (gpu.download(d_out, np.uint16, (t, channels)), gpu.download(d_beta, np.uint32, (t, h)),
            gpu.download(d_g, np.uint32, (t, h)))


def conv_gates_inputs(rng, t, ld, channels, h):
    rows = bf16_normal(rng, (t, ld), 2.0)
    rows[:, ld - h:] += bf16.round_(rng.choice(np.float32([0.0, 18.0, 25.0, -30.0]), (t, h)))  # softplus regimes
    lengths = [t] if t < 64 else [1, 2, 3, 5, t - 11]
    return (bf16.to_bits(bf16.round_(rows)), bf16.to_bits(bf16_normal(rng, (channels, 4), 0.5)),
            positions_for(lengths), np.log(rng.uniform(1.0, 16.0, h)).astype(np.float32),
            rng.uniform(-7.0, 1.0, h).astype(np.float32))


@pytest.mark.parametrize("t", [1, 63, 64, 65, 640, 4097])
def test_conv_gates_equal_the_two_calls(cs1, gpu, rng, t):
    """One launch (the forward's path) gives the bytes of cs1_gdn_conv + cs1_gdn_gates, which the tests above check
    against float64; every output starts NaN-poisoned."""
    channels, h, ld = 8192, 32, 12352  # the 4B's GDN projection row: q|k|v, z, then b|a in the last 64 columns
    rows, w_bits, positions, a_log, dt_bias = conv_gates_inputs(rng, t, ld, channels, h)
    one = run_conv_gates(cs1, gpu, rows, ld, channels, h, w_bits, positions, a_log, dt_bias)
    two = run_conv_gates(cs1, gpu, rows, ld, channels, h, w_bits, positions, a_log, dt_bias, combined=False)
    x = bf16.from_bits(rows).astype(np.float64)
    check_conv(f"conv_gates T={t}", one[0], conv_reference(x[:, :channels], bf16.from_bits(w_bits).astype(np.float64),
                                                            positions))
    for name, a, b in zip(("conv", "beta", "g"), one, two, strict=True):
        differ = int(np.count_nonzero(a != b))
        print(f"conv_gates T={t}: {name} {differ} values differ from the two calls")
        assert differ == 0, f"{name}: the combined call differs from the two calls"


def test_conv_gates_unaligned_and_partial(cs1, gpu, rng):
    """Not 16-byte aligned (two launches inside); each part alone (channels = 0 or H = 0); argument refusals."""
    t, channels, h = 300, 8192, 32
    ld = channels + 2 * h + 1  # odd stride: the scalar conv path
    args = conv_gates_inputs(rng, t, ld, channels, h)
    two = run_conv_gates(cs1, gpu, args[0], ld, channels, h, *args[1:], byte_offset=2, combined=False)
    one = run_conv_gates(cs1, gpu, args[0], ld, channels, h, *args[1:], byte_offset=2)
    conv_only = run_conv_gates(cs1, gpu, args[0], ld, channels, h, *args[1:], byte_offset=2, parts=("conv",))
    gates_only = run_conv_gates(cs1, gpu, args[0], ld, channels, h, *args[1:], byte_offset=2, parts=("gates",))
    for i, name in enumerate(("conv", "beta", "g")):
        assert np.array_equal(one[i], two[i]), f"{name}: the combined call differs from the two calls"
    assert np.array_equal(conv_only[0], two[0]) and np.array_equal(gates_only[1], two[1])
    assert np.array_equal(gates_only[2], two[2])
    assert np.isnan(bf16.from_bits(gates_only[0])).all(), "H-only call wrote conv output"
    assert np.isnan(conv_only[1].view(np.float32)).all(), "conv-only call wrote gates"
    null, d_out = gpu.ffi.NULL, gpu.empty(16)
    call = cs1.raw.cs1_gdn_conv_gates
    assert call(null, ld, null, null, null, t, 0, null, null, null, null, null, 0, gpu.stream) == 0  # nothing to do
    assert call(null, ld, null, null, d_out.ptr, t, channels, null, null, null, null, null, 0, gpu.stream) == NULL
    assert call(null, ld, null, null, null, t, 0, d_out.ptr, null, null, null, null, h, gpu.stream) == NULL
    assert call(null, ld, null, null, null, -1, 0, null, null, null, null, null, 0, gpu.stream) == SHAPE


# ---- prefill ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", [1, 63, 64, 65, 129, 160, 256, 640, 700, 2048, 4097, 8192])
def test_prefill_4b_heads(cs1, gpu, rng, t):
    h, hk = 32, 16
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, [0, t], t, h, hk)
    ref = recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), D**-0.5)
    check_prefill(f"prefill T={t} H=32 HK=16", got, ref)


@pytest.mark.parametrize("h,hk,t", [(8, 2, 200), (4, 4, 130), (6, 1, 65)])
def test_prefill_grouped_heads_and_stride(cs1, gpu, rng, h, hk, t):
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk, extra_cols=72)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, [0, t], t, h, hk)
    ref = recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), D**-0.5)
    check_prefill(f"prefill H={h} HK={hk} T={t} ld={ld}", got, ref)


def test_prefill_packed_equals_separate_calls(cs1, gpu, rng):
    h, hk = 32, 16
    lengths = [1, 64, 0, 65, 700]  # an empty prompt too
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + 37  # padding rows at the end
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk)
    assert np.all(got[cu[-1]:] == 0), "padding rows are not zero"
    ref = packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    check_prefill(f"packed prompts {lengths}", got[: cu[-1]], ref[: cu[-1]])
    for a, b in zip(cu[:-1], cu[1:], strict=True):
        if b == a:
            continue
        alone = run_prefill(cs1, gpu, bits[a:b].copy(), ld, g[a:b].copy(), beta[a:b].copy(), [0, b - a], int(b - a),
                            h, hk)
        assert np.array_equal(alone, got[a:b]), f"prompt rows {a}:{b} differ from a separate call"


@pytest.mark.parametrize("n", [40, 63, 64, 70])
def test_prefill_many_prompts(cs1, gpu, rng, n):
    # more than 32 prompts: the chunk-offset scan runs over several warp-wide tiles; up to 63 prompts every prep
    # block computes it, from 64 the index kernel does
    h, hk = 8, 4
    lengths = [int(n) for n in rng.integers(0, 150, n)]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + 3
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk)
    assert np.all(got[cu[-1]:] == 0), "padding rows are not zero"
    ref = packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    check_prefill(f"{len(lengths)} packed prompts, T={t}", got[: cu[-1]], ref[: cu[-1]])


def test_prefill_many_4b_prompts_match_and_equal_separate_calls(cs1, gpu, rng):
    # 60 prompts at the 4B head counts (1920 walk blocks); lengths around the chunk edges, an empty one
    h, hk = 32, 16
    lengths = [int(n) for n in rng.choice([1, 2, 63, 64, 65, 127, 128, 129, 200, 333], 60)] + [0]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + 70  # a whole padding chunk after the last prompt
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk)
    assert np.all(got[cu[-1]:] == 0), "padding rows are not zero"
    ref = packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    check_prefill(f"{len(lengths)} packed prompts, H=32, T={t}", got[: cu[-1]], ref[: cu[-1]])
    for s in rng.choice(len(lengths), 8, replace=False):
        a, b = int(cu[s]), int(cu[s + 1])
        if b == a:
            continue
        alone = run_prefill(cs1, gpu, bits[a:b].copy(), ld, g[a:b].copy(), beta[a:b].copy(), [0, b - a], b - a, h,
                            hk)
        assert np.array_equal(alone, got[a:b]), f"prompt rows {a}:{b} differ from a separate call"


_PREFILL_CHILD = """
import sys
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/gpu"]
from conftest import Gpu
from startlux_native import abi, bf16
from test_gdn import run_prefill
d = np.load(sys.argv[2])
gpu = Gpu(abi.load())
o = run_prefill(gpu.lib, gpu, d["bits"], int(d["ld"]), d["g"], d["beta"], d["cu"], int(d["t"]), int(d["h"]),
                int(d["hk"]))
np.save(sys.argv[3], bf16.to_bits(o))
"""


def prefill_here_and_in_child(cs1, gpu, rng, tmp_path, lengths, env):
    """One random prefill of prompts `lengths` (H = 32, HK = 16) in this process and in a child process with `env`
    added to its environment (the GDN path is chosen once per process, from the environment): both outputs' bits."""
    h, hk = 32, 16
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1])
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk)
    here = bf16.to_bits(run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk))
    np.savez(tmp_path / "in.npz", bits=bits, ld=ld, g=g, beta=beta, cu=cu, t=t, h=h, hk=hk)
    root = str(Path(__file__).resolve().parents[2])
    subprocess.run([sys.executable, "-c", _PREFILL_CHILD, root, str(tmp_path / "in.npz"), str(tmp_path / "child.npy")],
                   check=True, env={**os.environ, **env}, timeout=120)
    return here, np.load(tmp_path / "child.npy")


@pytest.mark.parametrize("lengths", [[160], [65], [128], [129], [256], [640], [1, 64, 65, 30]])
def test_prefill_p_from_prep_gives_the_walks_own_bytes(cs1, gpu, rng, tmp_path, lengths):
    """From 129 to 640 rows the walk that writes O takes P and qs from prep (sm_90: 219.5 KiB of shared memory), and
    from 65 rows where prep's grid has at most one block per SM (H100 / H200: one prompt of up to 192 rows). With
    CS1_GDN_P_IN=0 (in a child process) the walk forms P and qs itself: the same bytes (the same products in the
    same order)."""
    got, own = prefill_here_and_in_child(cs1, gpu, rng, tmp_path, lengths, {"CS1_GDN_P_IN": "0"})
    assert got.tobytes() == own.tobytes(), "P from prep changed the output's bytes"


def test_prefill_is_deterministic(cs1, gpu, rng):
    h, hk, t = 32, 16, 1000
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk)
    first = run_prefill(cs1, gpu, bits, ld, g, beta, [0, 300, t], t, h, hk)
    second = run_prefill(cs1, gpu, bits, ld, g, beta, [0, 300, t], t, h, hk)
    assert np.array_equal(first, second)


def test_prefill_weak_decay(cs1, gpu, rng):
    h, hk, t = 32, 16, 700
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk, weak=True)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, [0, t], t, h, hk)
    ref = recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), D**-0.5)
    check_prefill("prefill weak decay T=700", got, ref)


def test_prefill_tiny_qk(cs1, gpu, rng):
    h, hk, t = 8, 4, 300
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk, amplitude=1e-9)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, [0, t], t, h, hk)
    ref = recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), D**-0.5)
    check_prefill("prefill |q|,|k| ~ 1e-9 T=300", got, ref)


@pytest.mark.parametrize("t", [200, 700])  # the walk that writes O (<= 640 rows) and the one with the out kernel
def test_prefill_nan_reaches_exactly_its_column(cs1, gpu, rng, t):
    """One NaN in v (row i, value head h, column c) must reach O in that column from the start of its 64-row chunk
    (P Delta multiplies the masked upper triangle, 0 x NaN = NaN) to the end of its prompt, and nowhere else: the
    tf32 splits of the walk and out kernels keep NaN (a split that rounded the canonical NaN by integer arithmetic
    without a clamp would turn it into -0 and leave finite garbage)."""
    h, hk = 8, 4
    first = t - 60  # a second, finite prompt of 60 rows after the first
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk)
    i, head, col = first - 70, 5, 77  # a row inside the prompt's second-to-last chunk
    vals = bf16.from_bits(bits)
    vals[i, (2 * hk + head) * D + col] = np.nan
    got = run_prefill(cs1, gpu, bf16.to_bits(vals), ld, g, beta, [0, first, t], t, h, hk)
    expect = np.zeros(got.shape, dtype=bool)
    expect[i // 64 * 64: first, head, col] = True  # the prompt starts at row 0
    nan = np.isnan(got)
    print(f"T={t}: {int(nan.sum())} NaN outputs, {int(expect.sum())} expected")
    assert np.array_equal(nan, expect)


def test_prefill_all_padding(cs1, gpu, rng):
    h, hk, t = 4, 2, 70
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, [0], t, h, hk)  # n_seqs = 0: every row is padding
    assert np.all(got == 0)


def test_workspace_bytes(cs1):
    assert workspace_bytes(cs1, 0, 1, 32) == 0
    one = workspace_bytes(cs1, 4097, 1, 32)
    many = workspace_bytes(cs1, 4097, 8, 32)
    assert many > one > 0  # room for each prompt's partial chunk
    assert one >= 66 * 32 * (2 * C * D + D * D) * 4
    out = cs1.ffi.new("size_t *")
    assert cs1.raw.cs1_gdn_workspace_bytes(-1, 1, 32, out) == SHAPE
    assert cs1.raw.cs1_gdn_workspace_bytes(64, 1, 0, out) == SHAPE
    assert cs1.raw.cs1_gdn_workspace_bytes(64, 1, 32, cs1.ffi.NULL) == NULL


def test_prefill_rejects_bad_arguments(cs1, gpu, rng):
    h, hk, t = 4, 2, 65
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk)
    cu = np.array([0, t], dtype=np.int32)
    ws = workspace_bytes(cs1, t, 1, h)
    d_qkv, d_g, d_b, d_cu = gpu.upload(bits), gpu.upload(g), gpu.upload(beta), gpu.upload(cu)
    d_o, d_ws = gpu.empty(t * h * D * 2), gpu.empty(ws)
    fg, fb, icu = f32p(gpu, d_g), f32p(gpu, d_b), i32p(gpu, d_cu)
    call = cs1.raw.cs1_gdn_prefill

    def status(qkv=d_qkv.ptr, ld_=ld, o=d_o.ptr, w=d_ws.ptr, wb=ws, t_=t, h_=h, hk_=hk, n=1):
        return call(qkv, ld_, fg, fb, icu, n, o, w, wb, t_, h_, hk_, D**-0.5, gpu.stream)

    assert status() == 0
    assert status(hk_=3) == SHAPE  # H % HK != 0
    assert status(ld_=ld - 8) == SHAPE  # row narrower than q|k|v with 128-wide heads
    assert status(ld_=ld + 4) == ALIGNMENT
    assert status(qkv=d_qkv.at(2)) == ALIGNMENT
    assert status(o=d_o.at(8)) == ALIGNMENT
    assert status(wb=ws - 1) == WORKSPACE
    assert status(o=cs1.ffi.NULL) == NULL
    assert status(w=cs1.ffi.NULL) == NULL
    assert status(t_=-1) == SHAPE
    assert status(t_=0, o=cs1.ffi.NULL) == 0  # empty work launches nothing
    gpu.sync()
