"""Parity of the numpy reference with transformers' Qwen3.5 (CPU torch, fp32 compute) on a tiny random model, and
the effect of rounding A_log / linear_attn.norm.weight to bf16.

The tiny model has 8 layers (6 GDN + 2 gated attention, so the last position depends on the attention mode),
value heads = 2 x key heads, GQA 4:1, head_dim 32 (rotary 8). Transformers gets exactly the values our loader
produces (bf16 widened; A_log / gated-norm weight per the loader's precision switch).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from startlux_native import reference as R
from startlux_native.checkpoint import load_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LENGTHS = (1, 63, 64, 65, 130)
# letter logits are O(1..10); transformers runs fp32 with its own summation order and fp32 RoPE tables
TOL_VS_FLOAT64 = 5e-5  # max |logit difference| / max(1, max |logit|)
TOL_FP32_VS_TRANSFORMERS = 5e-5


def _hf_model(ck):
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    text = json.loads((ck.folder / "config.json").read_text())["text_config"]
    text = {k: v for k, v in text.items() if k not in ("model_type", "dtype")}
    cfg = Qwen3_5TextConfig(**text)
    cfg._attn_implementation = "eager"  # a float 4D mask is added as is
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(cfg).eval()
    state = {n: torch.from_numpy(ck.f32(n).copy()) for n in ck.names()}
    model.model.load_state_dict(state, strict=True)  # names and shapes must match transformers' own modules
    return model


def _hf_letter_logits(model, ck, ids: np.ndarray, mode: str) -> np.ndarray:
    t = len(ids)
    mask = None
    if mode == "bidirectional":
        # transformers accepts a per-layer-type mapping: a zero (all-visible) additive mask for the full-attention
        # layers; the GDN layers take no mask (no padding here, so nothing to zero out)
        mask = {"full_attention": torch.zeros(1, 1, t, t), "linear_attention": None}
    with torch.no_grad():
        h = model.model(input_ids=torch.from_numpy(ids[None].astype(np.int64)), attention_mask=mask)
    last = h.last_hidden_state[0, -1].double().numpy()
    return ck.letter_rows().astype(np.float64) @ last


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(1234)
    return [rng.integers(0, 320, n) for n in LENGTHS]


@pytest.mark.parametrize("mode", ["causal", "bidirectional"])
def test_reference_matches_transformers(tiny8_checkpoint_dir, rows, mode):
    torch.set_num_threads(2)
    ck = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False, attention_mode=mode)
    model = _hf_model(ck)
    ref64 = R.ReferenceBackend(ck, precision="float64", delta_rule="recurrent").letter_logits(rows)
    ref32 = R.ReferenceBackend(ck, precision="fp32", delta_rule="chunked").letter_logits(rows)
    worst64 = worst32 = 0.0
    for i, ids in enumerate(rows):
        hf = _hf_letter_logits(model, ck, ids, mode)
        scale = max(1.0, np.abs(hf).max())
        e64 = np.abs(ref64[i] - hf).max() / scale
        e32 = np.abs(ref32[i] - hf).max() / scale
        print(f"{mode} T={len(ids)}: max|logit| {np.abs(hf).max():.2f}, float64 ref vs transformers {e64:.2e}, "
              f"fp32 chunked ref vs transformers {e32:.2e}")
        worst64, worst32 = max(worst64, e64), max(worst32, e32)
    print(f"{mode}: worst relative error float64 {worst64:.2e} (tol {TOL_VS_FLOAT64}), "
          f"fp32 {worst32:.2e} (tol {TOL_FP32_VS_TRANSFORMERS})")
    assert worst64 < TOL_VS_FLOAT64 and worst32 < TOL_FP32_VS_TRANSFORMERS


def test_modes_differ_in_transformers_too(tiny8_checkpoint_dir, rows):
    """The bidirectional mask really reaches transformers' attention (else the parity above proves nothing)."""
    ck = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False)
    model = _hf_model(ck)
    a = _hf_letter_logits(model, ck, rows[2], "causal")
    b = _hf_letter_logits(model, ck, rows[2], "bidirectional")
    print(f"transformers causal vs bidirectional, T=64: max diff {np.abs(a - b).max():.3f}")
    assert np.abs(a - b).max() > 1e-2


def test_fp32_gdn_params_parity(tiny8_checkpoint_dir, rows):
    """keep_fp32_gdn_params: transformers then gets the fp32 A_log / norm weight and still agrees."""
    ck = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False, keep_fp32_gdn_params=True)
    model = _hf_model(ck)
    ref = R.ReferenceBackend(ck, precision="float64").letter_logits(rows[-1:])[0]
    hf = _hf_letter_logits(model, ck, rows[-1], "causal")
    err = np.abs(ref - hf).max() / max(1.0, np.abs(hf).max())
    print(f"fp32 A_log/norm, T=130: float64 ref vs transformers {err:.2e} (tol {TOL_VS_FLOAT64})")
    assert err < TOL_VS_FLOAT64


def _probs(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


class _PerturbedBackend(R.ReferenceBackend):
    """Control for the figure below: every mlp.up_proj weight times (1 + U(-2^-9, 2^-9)), i.e. noise of the size
    of a bf16 rounding, on weights that are already bf16."""

    def __init__(self, ck, seed):
        super().__init__(ck, precision="float64")
        self._noise = np.random.default_rng(seed)
        self._done: set[str] = set()

    def _w(self, name):
        a = super()._w(name)
        if name.endswith("mlp.up_proj.weight") and name not in self._done:
            a = self._cache[name] = a * (1 + self._noise.uniform(-2.0 ** -9, 2.0 ** -9, a.shape))
            self._done.add(name)
        return a


def test_bf16_rounding_of_gdn_params_effect(tiny8_checkpoint_dir):
    """How much rounding A_log / linear_attn.norm.weight to bf16 moves the 26-letter probabilities, as a figure for
    the README, next to a control: bf16-rounding-sized noise on the (already bf16) MLP up-projections. On this tiny
    random model both are of the same order: the model is very sensitive, so only the ratio carries over; the 4B
    figure needs the real weights. At T = 1 A_log has no effect (the state starts at zero): only the norm weight."""
    rng = np.random.default_rng(99)
    rounded = R.ReferenceBackend(load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False), precision="float64")
    kept_ck = load_checkpoint(tiny8_checkpoint_dir, require_tokenizer=False, keep_fp32_gdn_params=True)
    kept = R.ReferenceBackend(kept_ck, precision="float64")
    control = _PerturbedBackend(kept_ck, seed=7)
    worst = worst_control = 0.0
    for t in (1, 16, 64, 130, 200):
        rows = [rng.integers(0, 320, t) for _ in range(3)]
        p_kept = _probs(kept.letter_logits(rows).astype(np.float64))
        d = np.abs(_probs(rounded.letter_logits(rows).astype(np.float64)) - p_kept).max()
        c = np.abs(_probs(control.letter_logits(rows).astype(np.float64)) - p_kept).max()
        print(f"T={t}: max |delta p| over 26 letters, bf16-rounded vs fp32 A_log/norm = {d:.2e}; "
              f"control (bf16-sized noise on mlp.up_proj) = {c:.2e}")
        worst, worst_control = max(worst, d), max(worst_control, c)
    print(f"worst max |delta p|: rounding {worst:.2e}, control {worst_control:.2e}")
    assert 0 < worst < 0.05  # it changes something, and only a little
