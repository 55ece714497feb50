"""Numpy reference: chunked vs recurrent delta rule, attention modes, row independence, small pieces."""

from __future__ import annotations

import numpy as np
import pytest

from startlux_native import reference as R
from startlux_native.checkpoint import load_checkpoint

CHUNK_VS_RECURRENT_TOL = 1e-10  # float64, both exact algorithms


def _gdn_inputs(rng, t, hk=2, hv=4, dk=32, dv=16, dtype=np.float64):
    q = rng.standard_normal((t, hk, dk)).astype(dtype)
    k = rng.standard_normal((t, hk, dk)).astype(dtype)
    v = rng.standard_normal((t, hv, dv)).astype(dtype)
    g = -rng.uniform(0.005, 0.7, (t, hv)).astype(dtype)
    beta = rng.uniform(0.05, 1.0, (t, hv)).astype(dtype)
    return q, k, v, g, beta


@pytest.mark.parametrize("t", [1, 63, 64, 65, 130, 200])
def test_chunked_equals_recurrent_float64(rng, t):
    q, k, v, g, beta = _gdn_inputs(rng, t)
    s0 = rng.standard_normal((4, 32, 16))
    o1, s1 = R.gated_delta_rule_recurrent(q, k, v, g, beta, initial_state=s0)
    o2, s2 = R.gated_delta_rule_chunked(q, k, v, g, beta, initial_state=s0)
    err_o, err_s = np.abs(o1 - o2).max(), np.abs(s1 - s2).max()
    print(f"T={t}: max|o_chunk - o_rec| = {err_o:.3e}, max|S diff| = {err_s:.3e} (tol {CHUNK_VS_RECURRENT_TOL})")
    assert err_o < CHUNK_VS_RECURRENT_TOL and err_s < CHUNK_VS_RECURRENT_TOL
    assert np.abs(o1).max() > 1e-2  # not a trivially small output


def test_recurrent_matches_spec_step_by_step(rng):
    """One explicit step of spec §6.6 with grouped heads: value head h reads key head h // 2."""
    q, k, v, g, beta = _gdn_inputs(rng, 2)
    o, s = R.gated_delta_rule_recurrent(q, k, v, g, beta)
    state = np.zeros((4, 32, 16))
    for t in range(2):
        for h in range(4):
            kh = k[t, h // 2] / np.sqrt(np.sum(k[t, h // 2] ** 2) + 1e-6)
            qh = q[t, h // 2] / np.sqrt(np.sum(q[t, h // 2] ** 2) + 1e-6) / np.sqrt(32)
            state[h] *= np.exp(g[t, h])
            delta = beta[t, h] * (v[t, h] - state[h].T @ kh)
            state[h] += np.outer(kh, delta)
            np.testing.assert_allclose(o[t, h], state[h].T @ qh, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s, state, rtol=1e-12, atol=1e-14)


def test_chunked_fp32_close_to_float64(rng):
    q, k, v, g, beta = _gdn_inputs(rng, 130)
    ref, _ = R.gated_delta_rule_recurrent(q, k, v, g, beta)
    o32, _ = R.gated_delta_rule_chunked(*(a.astype(np.float32) for a in (q, k, v, g, beta)))
    err = np.abs(o32 - ref).max() / np.abs(ref).max()
    print(f"fp32 chunked vs float64 recurrent: max rel err {err:.3e} (tol 1e-4)")
    assert o32.dtype == np.float32 and err < 1e-4


def test_causal_conv_taps(rng):
    m = rng.standard_normal((5, 3))
    w = rng.standard_normal((3, 4))
    out = R.causal_conv1d_silu(m, w)
    t = 2  # taps w[:, 3] on the current token, w[:, 0] three back; zeros before the start
    pre = w[:, 3] * m[2] + w[:, 2] * m[1] + w[:, 1] * m[0]
    np.testing.assert_allclose(out[t], pre / (1 + np.exp(-pre)), rtol=1e-13)


def test_rope_pairs_i_with_i_plus_half(rng):
    x = rng.standard_normal((3, 2, 16))
    cos, sin = R.rope_cos_sin(np.arange(3), 8, 1e7)
    y = R.apply_partial_rope(x, cos, sin)
    phi = 2 * 1e7 ** (-np.arange(4) / 4)  # position 2, theta^(-2i/8)
    np.testing.assert_allclose(y[2, :, :4], x[2, :, :4] * np.cos(phi) - x[2, :, 4:8] * np.sin(phi), rtol=1e-12)
    np.testing.assert_allclose(y[2, :, 4:8], x[2, :, 4:8] * np.cos(phi) + x[2, :, :4] * np.sin(phi), rtol=1e-12)
    np.testing.assert_array_equal(y[:, :, 8:], x[:, :, 8:])
    np.testing.assert_allclose(y[0], x[0], rtol=1e-15)


def test_attention_gqa_and_modes(rng):
    q = rng.standard_normal((5, 4, 8))
    k = rng.standard_normal((5, 1, 8))
    v = rng.standard_normal((5, 1, 8))
    causal = R.attention(q, k, v, causal=True)
    full = R.attention(q, k, v, causal=False)
    np.testing.assert_allclose(causal[-1], full[-1], rtol=1e-12)  # the last row sees everything either way
    assert np.abs(causal[:-1] - full[:-1]).max() > 1e-3
    s = q[1, 3] @ k[:2, 0].T / np.sqrt(8)
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    np.testing.assert_allclose(causal[1, 3], p @ v[:2, 0], rtol=1e-12)


def test_norms(rng):
    x, w, z = rng.standard_normal((3, 16)), rng.standard_normal(16) * 0.1, rng.standard_normal((3, 16))
    np.testing.assert_allclose(R.rms_norm_1p(x, w), x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * (1 + w),
                               rtol=1e-13)
    n = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(R.rms_norm_gated(x, z, w), n * w * z / (1 + np.exp(-z)), rtol=1e-13)


def test_causal_and_bidirectional_differ(tiny8_checkpoint_dir, rng):
    causal = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False)
    bidi = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False, attention_mode="bidirectional")
    rows = [rng.integers(0, 320, n) for n in (5, 70)]
    a = R.ReferenceBackend(causal, precision="float64").letter_logits(rows)
    b = R.ReferenceBackend(bidi, precision="float64").letter_logits(rows)
    diff = np.abs(a - b).max(axis=1)
    print(f"max |causal - bidirectional| letter logit per row: {diff}")
    assert (diff > 1e-3).all()
    one = [rng.integers(0, 320, 1)]  # a single token: identical
    np.testing.assert_allclose(R.ReferenceBackend(causal, precision="float64").letter_logits(one),
                               R.ReferenceBackend(bidi, precision="float64").letter_logits(one), rtol=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "float64"])
def test_rows_independent(tiny_checkpoint_dir, rng, precision):
    ck = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False)
    be = R.ReferenceBackend(ck, precision=precision)
    rows = [rng.integers(0, 248320, n).astype(np.int32) for n in (1, 65, 17)]
    together = be.letter_logits(rows)
    apart = np.concatenate([be.letter_logits([r]) for r in rows])
    assert together.shape == (3, 26) and together.dtype == np.float32
    np.testing.assert_array_equal(together, apart)
    assert np.isfinite(together).all() and np.abs(together).max() > 0.1
    assert be.last_hidden(rows).shape == (3, 64)
    assert be.letter_logits([]).shape == (0, 26)


def test_full_model_chunked_vs_recurrent_and_precisions(tiny_checkpoint_dir, rng):
    ck = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False)
    rows = [rng.integers(0, 248320, n) for n in (1, 64, 130)]
    ref = R.ReferenceBackend(ck, precision="float64", delta_rule="recurrent").letter_logits(rows)
    chunk = R.ReferenceBackend(ck, precision="float64", delta_rule="chunked").letter_logits(rows)
    f32 = R.ReferenceBackend(ck, precision="fp32").letter_logits(rows)
    e64, e32 = np.abs(chunk - ref).max(), np.abs(f32 - ref).max()
    print(f"model letter logits: float64 chunked vs recurrent {e64:.3e} (tol 1e-6, float32 output); "
          f"fp32 vs float64 {e32:.3e} (tol 1e-3)")
    assert e64 < 1e-6 and e32 < 1e-3
