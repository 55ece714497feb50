"""Whole-model parity of CudaBackend.

- Tiny random checkpoints (head_dim 256, GDN head dims 128, as the kernels need) against the numpy
  ReferenceBackend (fp32), causal and bidirectional, several rows of different lengths in one call.
- The full 4B text shape with random weights (built once per session into a temp folder) against transformers
  Qwen3_5ForCausalLM on the GPU (lengths ~100, 600, 2600, 3900; bidirectional = an all-true 4-D mask): the same
  weights run in fp32 (TF32 off) are the high-precision reference, and transformers in bf16 (the stack the published
  numbers came from) is reported next to it, so each row shows ours-vs-fp32 beside the bf16 stack's own distance
  from fp32; and against the numpy reference at ~100 tokens.

Criterion per row (tiny checkpoints): max |p - p_ref| <= 0.02 (softmax over the 26 letters at T = 1) and the top
letter agrees, unless the reference's top two letters are within 0.02 of each other (a near-tie; printed). The
near-tie band is the probability tolerance itself: at 0.01 a 5-token row (one GDN chunk) with max |dp| 0.0079 and a
reference gap of 0.013 failed on every build of session 25 (seed 3394437800), an error the 0.02 bound accepts.
At the 4B shape see check_against_fp32: at least as close to fp32 as transformers' own bf16 run, measured per row.
The 4B-shape embedding has std 0.05 (letter logits of std ~2.5, a calibrated read-out's spread; at tiny.py's 0.25
the logits have std ~13 and every bf16 stack, transformers' included, moves near-top probabilities by more than 0.02).
The random projection matrices are 1/4 of tiny.py's scale (exact in bf16): at the default scale the random network
is chaotic under bf16 rounding (transformers bf16 vs the fp32 reference already differs by 0.07 in probability on
a tiny model), which would hide real errors behind rounding noise.
"""

from __future__ import annotations

import gc
import inspect
import json
import math
import os
import shutil
import time

import numpy as np
import pytest

from startlux_native.checkpoint import ModelConfig, load_checkpoint
from startlux_native.cuda_backend import CudaBackend
from startlux_native.errors import BackendError
from startlux_native.reference import ReferenceBackend
from startlux_native.tiny import FOUR_B, make_tiny_checkpoint, scale_projection_matrices, tiny_config_json

MAX_PROB_DIFF = 0.02
EMBED_STD_4B = 0.05
NEAR_TIE = MAX_PROB_DIFF  # a top-letter flip is accepted only where the tolerance alone explains it
MATRIX_SCALE_SHIFT = 2  # projection matrices * 2**-2
TINY = dict(hidden_size=128, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2, head_dim=256,
            intermediate_size=256, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
            linear_value_head_dim=128, vocab_size=4096)
TINY_LENGTHS = [1, 2, 5, 63, 64, 65, 130, 257]
FOUR_B_LENGTHS = [101, 600, 2600, 3900]
LETTER_IDS = list(range(32, 58))


def probs(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def compare(label: str, got: np.ndarray, ref: np.ndarray, lengths) -> None:
    assert got.shape == ref.shape and np.isfinite(got).all()
    pg, pr = probs(got), probs(ref)
    diff = np.abs(pg - pr).max(axis=-1)
    top_g, top_r = pg.argmax(-1), pr.argmax(-1)
    top2 = np.sort(pr, axis=-1)[:, -2:]
    tie = top2[:, 1] - top2[:, 0] < NEAR_TIE
    for i, n in enumerate(lengths):
        print(f"{label} row {i} ({n} tokens): top {chr(65 + top_g[i])}/{chr(65 + top_r[i])}"
              f"{' (near-tie)' if tie[i] else ''} p_top {pr[i, top_r[i]]:.4f}, max |dp| {diff[i]:.5f}, "
              f"max |dlogit| {np.abs(got[i] - ref[i]).max():.4f}")
    assert ((top_g == top_r) | tie).all(), f"{label}: top letters differ"
    assert diff.max() <= MAX_PROB_DIFF, f"{label}: max prob diff {diff.max():.4f}"


def random_rows(rng, lengths, vocab):
    # ids >= 100 keep the letter rows (32..57) out of the inputs
    return [rng.integers(100, vocab, n).astype(np.int32) for n in lengths]


# ---- tiny checkpoints vs the numpy reference -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return scale_projection_matrices(make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "ckpt", seed=7,
                                                           with_tokenizer=False, with_decision_config=True, **TINY))


@pytest.mark.parametrize("mode", ["causal", "bidirectional"])
@pytest.mark.parametrize("keep_fp32", [False, True])
def test_tiny_model_matches_reference(cs1, tiny_folder, rng, mode, keep_fp32):
    ck = load_checkpoint(tiny_folder, attention_mode=mode, keep_fp32_gdn_params=keep_fp32, require_tokenizer=False)
    rows = random_rows(rng, TINY_LENGTHS, TINY["vocab_size"])
    with CudaBackend(ck, library=cs1, max_tokens=1024, max_rows=16) as be:
        print(json.dumps(be.describe()))
        assert be.attention_mode == mode and be.round_weighted == (0 if keep_fp32 else 1)
        got = be.letter_logits(rows)
        again = be.letter_logits(rows[::-1])[::-1]  # another packing order: the same rows
    ref = ReferenceBackend(ck).letter_logits(rows)
    compare(f"tiny {mode} fp32params={keep_fp32}", got, ref, TINY_LENGTHS)
    compare(f"tiny {mode} reordered", again, ref, TINY_LENGTHS)


def test_backend_refuses_bad_calls(cs1, tiny_folder, rng):
    ck = load_checkpoint(tiny_folder, require_tokenizer=False)
    with CudaBackend(ck, library=cs1, max_tokens=256, max_rows=4) as be:
        assert be.letter_logits([]).shape == (0, 26)
        with pytest.raises(BackendError, match="max_tokens"):
            be.letter_logits([np.ones(300, np.int32) * 100])
        split = be.letter_logits([np.ones(3, np.int32) * 100] * 5)  # more rows than max_rows: two forwards
        assert split.shape == (5, 26) and (split == split[0]).all()
        with pytest.raises(BackendError, match="token id"):
            be.letter_logits([np.array([5, TINY["vocab_size"]], np.int32)])
        with pytest.raises(BackendError, match="non-empty"):
            be.letter_logits([np.zeros(0, np.int32)])
        out = be.letter_logits(random_rows(rng, [3, 9], TINY["vocab_size"]))  # still usable after refusals
        assert out.shape == (2, 26) and np.isfinite(out).all()


# ---- the 4B text shape with random weights --------------------------------------------------------------------------

def _fill_(torch, name: str, p, gen) -> None:
    """Random values in place, following tiny.py's recipe with the matrices scaled down (never zeros)."""
    with torch.no_grad():
        t = torch.empty(p.shape, dtype=torch.float32, device=p.device)
        if name.endswith("A_log"):
            t.uniform_(0.05, 0.9, generator=gen).log_()
        elif name.endswith("dt_bias"):
            t.uniform_(-1.0, 1.5, generator=gen)
        elif name.endswith("linear_attn.norm.weight"):
            t.normal_(1.0, 0.2, generator=gen)
        elif name.endswith("norm.weight"):
            t.normal_(0.0, 0.1, generator=gen)
        elif name.endswith("conv1d.weight"):
            t.normal_(0.0, 0.5, generator=gen)
        elif name.endswith("embed_tokens.weight"):
            # std 0.05: letter logits of std ~2.5 (0.05 * sqrt(2560)), the spread of a calibrated decision read-out;
            # tiny.py's 0.25 gives std ~13, where any bf16 stack's rounding moves near-top probabilities by > 0.02
            t.normal_(0.0, EMBED_STD_4B, generator=gen)
        else:  # projection matrices, 1/4 of tiny.py's scale (see the module docstring)
            t.normal_(0.0, 2.0 ** -MATRIX_SCALE_SHIFT / math.sqrt(p.shape[-1]), generator=gen)
        t[t == 0] = 1e-3
        p.copy_(t.to(p.dtype))


@pytest.fixture(scope="module")
def four_b(cs1, tmp_path_factory):
    """(folder, transformers model on the GPU in bf16): random weights of the 4B text shape, saved as a checkpoint
    with the real layout (prefix model., fp32 A_log / linear_attn.norm.weight holding bf16 values)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    if not torch.cuda.is_available():
        pytest.skip("4B parity: torch sees no CUDA device")
    if not hasattr(transformers, "Qwen3_5ForCausalLM"):
        pytest.skip(f"4B parity: transformers {transformers.__version__} has no Qwen3_5ForCausalLM")
    # transformers' own torch paths for the conv and the delta rule (fp32 state), even when flash-linear-attention
    # or causal-conv1d are installed: the spec's parity target, and no Triton JIT inside the time budget
    from transformers.models.qwen3_5 import modeling_qwen3_5 as hf_mod

    saved = {fn: getattr(hf_mod, fn) for fn in ("torch_chunk_gated_delta_rule", "causal_conv1d_fn")}
    for fn, f in saved.items():
        setattr(hf_mod, fn, inspect.unwrap(f))
    t0 = time.perf_counter()
    folder = tmp_path_factory.mktemp("four_b") / "ckpt"
    folder.mkdir()
    cfg_json = tiny_config_json(**FOUR_B, text_only=True, name="startlux-native/random-4b-shape")
    (folder / "config.json").write_text(json.dumps(cfg_json, indent=1))
    (folder / "decision_config.json").write_text(json.dumps({
        "format": "random 4B-shape test model", "letter_token_ids": LETTER_IDS,
        "temperature_by_type": {"choice": 1.0, "noul": 1.0, "score": 1.0},
        "wide_choice": {"group": 25, "keep": 3, "residual": 1e-3}, "release_date": "2026-10-10"}))
    config = transformers.AutoConfig.from_pretrained(folder)
    config._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = transformers.Qwen3_5ForCausalLM._from_config(config, dtype=torch.bfloat16)
    model.eval()
    gen = torch.Generator(device="cuda").manual_seed(1234)
    params = dict(model.named_parameters())
    expected = ModelConfig.from_json(cfg_json).expected_tensors()
    tensors = {}
    for name, (shape, dtype) in expected.items():
        p = params["model." + name]
        assert tuple(p.shape) == shape, (name, tuple(p.shape), shape)
        _fill_(torch, name, p, gen)
        t = p.detach()
        tensors["model." + name] = (t.float() if dtype == "F32" else t).cpu().contiguous()
    safetensors_torch.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    del tensors
    gc.collect()
    print(f"4B-shape checkpoint built and saved in {time.perf_counter() - t0:.1f} s")
    yield folder, model, torch
    for fn, f in saved.items():
        setattr(hf_mod, fn, f)
    model_fp32_cache.clear()
    del model
    gc.collect()
    torch.cuda.empty_cache()
    shutil.rmtree(folder, ignore_errors=True)


model_fp32_cache: dict = {}


def hf_fp32_model(torch, model):
    """The same weights in fp32 (bf16 values widened exactly), TF32 off: the high-precision reference."""
    if "m" not in model_fp32_cache:
        import copy

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model_fp32_cache["m"] = copy.deepcopy(model).float().eval()
    return model_fp32_cache["m"]


def hf_letter_logits(torch, model, rows, mode: str) -> np.ndarray:
    """transformers bf16: the final-norm hidden state at the last position (bf16) . letter rows, in fp32."""
    letters = model.model.embed_tokens.weight[LETTER_IDS].float()
    out = []
    with torch.no_grad():
        for ids in rows:
            x = torch.as_tensor(ids, dtype=torch.long, device="cuda")[None]
            mask = None
            if mode == "bidirectional":
                full = torch.ones((1, 1, x.shape[1], x.shape[1]), dtype=torch.bool, device="cuda")
                mask = {"full_attention": full, "linear_attention": None}
            h = model.model(input_ids=x, attention_mask=mask, use_cache=False).last_hidden_state[0, -1]
            out.append((h.float() @ letters.T).cpu().numpy())
    return np.stack(out).astype(np.float32)


@pytest.fixture(scope="module")
def four_b_backend(cs1, four_b):
    folder, _, _ = four_b
    ck = load_checkpoint(folder, attention_mode="bidirectional", require_tokenizer=False)
    t0 = time.perf_counter()
    be = CudaBackend(ck, library=cs1, max_tokens=8192, max_rows=8)
    print(f"CudaBackend load {time.perf_counter() - t0:.1f} s: {json.dumps(be.describe())}")
    yield be
    be.close()


@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
def test_four_b_shape_matches_transformers(four_b, four_b_backend, rng, mode):
    _, model, torch = four_b
    be = four_b_backend
    be.attention_mode = mode  # same weights, other attention mode (read per forward)
    rows = random_rows(rng, FOUR_B_LENGTHS, be.config.vocab_size)
    t0 = time.perf_counter()
    got = be.letter_logits(rows)
    t1 = time.perf_counter()
    ref_bf16 = hf_letter_logits(torch, model, rows, mode)
    t2 = time.perf_counter()
    ref = hf_letter_logits(torch, hf_fp32_model(torch, model), rows, mode)
    print(f"4B {mode}: cuda forward of {sum(FOUR_B_LENGTHS)} tokens {1000 * (t1 - t0):.1f} ms (first call incl.), "
          f"transformers bf16 {t2 - t1:.1f} s, fp32 {time.perf_counter() - t2:.1f} s")
    check_against_fp32(f"4B {mode}", got, ref_bf16, ref, FOUR_B_LENGTHS)


def check_against_fp32(label: str, got, ref_bf16, ref, lengths) -> None:
    """The 4B-shape criterion. On random 4B weights every bf16 stack moves the letter logits by ~0.1 rms against
    fp32 (transformers' own bf16 run included, measured here per row), which exceeds 0.02 in probability on some
    rows: a bound no bf16 implementation meets on these weights. So (a) over the rows, ours must be about as close
    to the fp32 answer as transformers bf16 is (mean rms dlogit <= 1.25 x transformers' + 0.01; one row's rms over
    26 letters is itself noisy: a per-row 1.25x bound failed on a 0.129 vs 0.094 row while the means were 0.125 vs
    0.123), (b) no row may be grossly worse (rms <= 2 x transformers' + 0.02), and (c) the top letter must agree
    unless the fp32 top-2 logit gap is within 3 x transformers' rms error (bf16 noise can flip it).
    The max probability differences of both stacks are printed and counted against 0.02."""
    dp_bf16 = np.abs(probs(ref_bf16) - probs(ref)).max(axis=-1)
    dp_ours = np.abs(probs(got) - probs(ref)).max(axis=-1)
    rms = lambda a: np.sqrt(np.mean((a - ref) ** 2, axis=-1))  # noqa: E731
    rms_ours, rms_bf16 = rms(got), rms(ref_bf16)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    gap = top2[:, 1] - top2[:, 0]
    for i, n in enumerate(lengths):
        print(f"{label} row {i} ({n} tokens): vs fp32: max |dp| ours {dp_ours[i]:.5f}, transformers bf16 "
              f"{dp_bf16[i]:.5f}; rms dlogit ours {rms_ours[i]:.4f}, transformers bf16 {rms_bf16[i]:.4f}; "
              f"logit std {ref[i].std():.2f}, top-2 gap {gap[i]:.3f}; top ours/bf16/fp32 "
              f"{chr(65 + got[i].argmax())}/{chr(65 + ref_bf16[i].argmax())}/{chr(65 + ref[i].argmax())}")
    print(f"{label}: rows with max |dp| <= {MAX_PROB_DIFF} vs fp32: ours {(dp_ours <= MAX_PROB_DIFF).sum()}/"
          f"{len(lengths)}, transformers bf16 {(dp_bf16 <= MAX_PROB_DIFF).sum()}/{len(lengths)}")
    assert np.isfinite(got).all()
    print(f"{label}: mean rms dlogit ours {rms_ours.mean():.4f}, transformers bf16 {rms_bf16.mean():.4f}")
    assert rms_ours.mean() <= 1.25 * rms_bf16.mean() + 0.01, f"{label}: further from fp32 than transformers bf16"
    assert (rms_ours <= 2 * rms_bf16 + 0.02).all(), f"{label}: a row far from fp32"
    ambiguous = gap < 3 * rms_bf16
    assert ((got.argmax(-1) == ref.argmax(-1)) | ambiguous).all(), f"{label}: top letter differs from fp32"


@pytest.mark.skipif(os.environ.get("CS1_SKIP_4B_NUMPY") == "1", reason="CS1_SKIP_4B_NUMPY=1")
def test_four_b_shape_numpy_reference_agrees_with_transformers_fp32(four_b, four_b_backend, rng):
    """Two independent fp32 implementations of the 4B shape (ours in numpy, transformers in torch) agree, which
    validates the fp32 reference the GPU is judged against; the GPU result is checked against it too."""
    _, model, torch = four_b
    be = four_b_backend
    # four rows, not one: check_against_fp32 bounds a mean over rows, and one row's rms over 26 letters is too noisy
    # for it (one random row once failed by 0.0001 on bytes that pass: LEVERS 91)
    lengths = [100, 37, 64, 129]
    rows = random_rows(rng, lengths, be.config.vocab_size)
    ref_backend = None
    for mode in ("bidirectional", "causal"):
        be.attention_mode = mode
        got = be.letter_logits(rows)
        t0 = time.perf_counter()
        shared = ref_backend._cache if ref_backend is not None else None
        ref_backend = ReferenceBackend(be.checkpoint, attention_mode=mode)
        if shared is not None:
            ref_backend._cache = shared  # the fp32 weights converted once
        ref_np = ref_backend.letter_logits(rows)
        ref_hf = hf_letter_logits(torch, hf_fp32_model(torch, model), rows, mode)
        ref_bf16 = hf_letter_logits(torch, model, rows, mode)
        between = float(np.abs(ref_np - ref_hf).max())
        print(f"4B {mode}: numpy reference {time.perf_counter() - t0:.1f} s; numpy fp32 vs transformers fp32 "
              f"max |dlogit| {between:.2e}")
        assert between < 1e-2, f"the two fp32 references disagree by {between}"
        check_against_fp32(f"4B {mode} (numpy fp32 reference)", got, ref_bf16, ref_np, lengths)


# ---- padding, graphs and split calls (tiny checkpoint) ---------------------------------------------------------------

def test_graph_replay_is_bit_identical_to_eager(cs1, tiny_folder, rng):
    """A captured forward replays exactly the eager kernels: logits byte-identical, for several (length, rows) keys,
    and self_check keeps the graphs."""
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    with CudaBackend(ck, library=cs1, max_tokens=2048, max_rows=8, graphs=True) as be:
        requests = [random_rows(rng, lengths, be.config.vocab_size) for lengths in ([100], [63, 64, 65], [700], [1])]
        for rows in requests:
            eager = be._forward(rows, use_graph=False)
            be._forward(rows, use_graph=True)  # eager + capture
            replay = be._forward(rows, use_graph=True)
            print(f"graph vs eager, lengths {[r.size for r in rows]}: max |dlogit| {np.abs(eager - replay).max()}")
            assert eager.tobytes() == replay.tobytes()
        assert be.self_check(requests)
        assert be.graph_replays > 0 and be.describe()["graphs_captured"] >= 4


def test_down_split_matches_reference_and_replays_exactly(cs1, tiny_folder, rng):
    """The down projection as K batches with fp32 partials (down_split="auto": 2 batches at the tiny model's
    intermediate size 256) on prompts of up to 256 padded rows: each row alone against the numpy reference and
    against down_split="off" (the same tolerance: only the fp32 sum order differs), and graph replay byte-identical
    to eager with the split on."""
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    lengths = [1, 63, 64, 65, 130, 250]
    rows = random_rows(rng, lengths, ck.config.vocab_size)
    out = {}
    for spec in ("off", "auto"):
        with CudaBackend(ck, library=cs1, max_tokens=512, max_rows=4, graphs=True, down_split=spec) as be:
            state = be.describe()["down_split"]
            print(f"down_split={spec}: {state}")
            assert (be.down_splits == 2) == (spec == "auto") and state.startswith("2 batches" if be.down_splits else
                                                                                  "off")
            out[spec] = np.concatenate([be._forward([r], use_graph=False) for r in rows])
            for r in rows:
                be._forward([r], use_graph=True)  # eager + capture
                assert be._forward([r], use_graph=True).tobytes() == be._forward([r], use_graph=False).tobytes()
    ref = ReferenceBackend(ck).letter_logits(rows)
    compare("down split vs reference", out["auto"], ref, lengths)
    compare("down split vs one GEMM", out["auto"], out["off"], lengths)
    print(f"down split vs one GEMM: max |dlogit| {np.abs(out['auto'] - out['off']).max():.3e}")
    with pytest.raises(ValueError):
        CudaBackend(ck, library=cs1, max_tokens=64, max_rows=2, graphs=False, down_split="on")


def setting_off_and_auto(cs1, ck, rows, lengths, name: str) -> dict[str, np.ndarray]:
    """One packed forward of `rows` with CudaBackend's setting `name` "off" and "auto": the backend reports the
    setting, the packed prompts match each run alone (parity tolerance), graph replay gives the eager bytes, and
    "on" is refused. Returns the packed forward's logits per setting."""
    out = {}
    for spec in ("off", "auto"):
        with CudaBackend(ck, library=cs1, max_tokens=1024, max_rows=8, graphs=True, **{name: spec}) as be:
            print(f"{name}={spec}: {be.describe()[name]}")
            assert getattr(be, name) == (spec == "auto")
            out[spec] = be._forward(rows, use_graph=False)
            alone = np.concatenate([be._forward([r], use_graph=False) for r in rows])
            compare(f"{name}={spec}: packed vs alone", out[spec], alone, lengths)
            be._forward(rows, use_graph=True)  # eager + capture
            assert be._forward(rows, use_graph=True).tobytes() == out[spec].tobytes()
    with pytest.raises(ValueError):
        CudaBackend(ck, library=cs1, max_tokens=64, max_rows=2, graphs=False, **{name: "on"})
    return out


def auto_against_reference_and_off(label: str, ck, rows, lengths, out: dict[str, np.ndarray]) -> None:
    compare(f"{label} vs reference", out["auto"], ReferenceBackend(ck).letter_logits(rows), lengths)
    compare(f"{label} vs off", out["auto"], out["off"], lengths)
    print(f"{label} vs off: max |dlogit| {np.abs(out['auto'] - out['off']).max():.3e}")


def test_tail_rows_match_every_row_and_replay_exactly(cs1, tiny_folder, rng):
    """The last layer's tail (o projection, norm, MLP) on the read-out rows alone (tail_rows="auto") against every
    row (off) and the numpy reference, packed prompts included (their last rows gathered), graph replay
    byte-identical to eager; the GEMMs run at M = n rows, so only bf16 rounding may move."""
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    lengths = [1, 63, 64, 65, 130, 250]  # one packed forward: 6 read-out rows of 573
    rows = random_rows(rng, lengths, ck.config.vocab_size)
    out = setting_off_and_auto(cs1, ck, rows, lengths, "tail_rows")
    auto_against_reference_and_off("tail rows", ck, rows, lengths, out)


@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
def test_tail_attention_matches_every_row_and_replays_exactly(cs1, tiny_folder, rng, mode):
    """The last attention layer at the read-out rows alone (tail_attention="auto", cs1_attention_gated_rows) against
    the whole attention (off) and the numpy reference, packed prompts (their last rows) against each alone, graph
    replay byte-identical to eager; the rows' kernel keeps P in fp32, so only bf16 rounding may move."""
    ck = load_checkpoint(tiny_folder, attention_mode=mode, require_tokenizer=False)
    assert ck.config.layer_types[-1] == "full_attention"
    lengths = [1, 63, 64, 65, 130, 250]
    rows = random_rows(rng, lengths, ck.config.vocab_size)
    out = setting_off_and_auto(cs1, ck, rows, lengths, "tail_attention")
    auto_against_reference_and_off(f"{mode} tail attention", ck, rows, lengths, out)


@pytest.mark.parametrize("min_rows", [None, 0])
def test_tail_query_matches_every_row_and_replays_exactly(cs1, tiny_folder, rng, monkeypatch, min_rows):
    """The last attention's q / gate projection and prep at the read-out rows (tail_query="auto", from
    TAIL_QUERY_MIN_ROWS padded rows; 0: at every length) against every row (off), the numpy reference and each
    prompt alone, graph replay byte-identical to eager; the q / gate GEMM runs at M = n, so only bf16 rounding moves."""
    from startlux_native import cuda_backend

    if min_rows is not None:
        monkeypatch.setattr(cuda_backend, "TAIL_QUERY_MIN_ROWS", min_rows)
    ck = load_checkpoint(tiny_folder, attention_mode="causal", require_tokenizer=False)
    lengths = [1, 63, 64, 65, 130, 250]  # 573 rows: padded 576, above the default threshold
    rows = random_rows(rng, lengths, ck.config.vocab_size)
    out = setting_off_and_auto(cs1, ck, rows, lengths, "tail_query")
    auto_against_reference_and_off(f"tail query (min rows {cuda_backend.TAIL_QUERY_MIN_ROWS})", ck, rows, lengths,
                                   out)


def test_gdn_norm_gives_the_same_bytes_and_replays_exactly(cs1, tiny_folder, rng):
    """Each GDN layer's prefill and gated RMSNorm as one call (gdn_norm="auto", cs1_gdn_prefill_norm: the norm inside
    the out kernel above 640 rows) against the two calls (off): the same bytes at 832 padded rows (folded) and at
    160 (the walk, then the norm kernel), packed prompts against each alone, graph replay byte-identical."""
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    for lengths in ([1, 63, 64, 65, 130, 250, 200], [1, 64, 95]):
        rows = random_rows(rng, lengths, ck.config.vocab_size)
        out = setting_off_and_auto(cs1, ck, rows, lengths, "gdn_norm")
        assert out["auto"].tobytes() == out["off"].tobytes(), f"{lengths}: gdn_norm moved the logits"
        compare(f"gdn norm {lengths} vs reference", out["auto"], ReferenceBackend(ck).letter_logits(rows), lengths)


def test_split_calls_and_padding_match_within_tolerance(cs1, tiny_folder, rng):
    """Rows that do not fit one forward run as several; each row matches running it alone (different padding and
    GEMM shapes may move bf16 rounding, never the answer beyond the parity tolerance)."""
    ck = load_checkpoint(tiny_folder, attention_mode="causal", require_tokenizer=False)
    lengths = [300, 250, 5, 200]
    with CudaBackend(ck, library=cs1, max_tokens=512, max_rows=2, graphs=False) as be:
        rows = random_rows(rng, lengths, be.config.vocab_size)
        together = be.letter_logits(rows)  # 3 forwards: [300], [250, 5], [200]
        alone = np.concatenate([be.letter_logits([r]) for r in rows])
    compare("split vs alone", together, alone, lengths)


# ---- GEMM pin tables (startlux_native.gemm_pins) -------------------------------------------------------------------


def _pin_table(path, key, pins) -> str:
    from startlux_native import gemm_pins

    entries = [{"N": N, "K": K, "M": M, "query_rows": q, "rank": r} for N, K, M, q, r in pins]
    path.write_text(json.dumps({"format": gemm_pins.FORMAT, "device": key.as_json(), "pins": entries}))
    return str(path)


def test_gemm_pin_table_applies_and_matches_reference(cs1, tiny_folder, rng, tmp_path):
    """A table with this device's key pins every GEMM shape of the tiny model, at the call's padded length, to
    heuristic #1 asked at the next ladder length: the backend names the table, the plans say the pins applied
    (where cuBLASLt lists such an algorithm), and the answers stay within the reference tolerance."""
    from startlux_native import gemm_pins
    from startlux_native.cuda_backend import PAD_LADDER, padded_length

    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    rows = random_rows(rng, TINY_LENGTHS, TINY["vocab_size"])
    T = padded_length(sum(TINY_LENGTHS), 1024)
    query = next(m for m in PAD_LADDER if m > T)
    h, inter = TINY["hidden_size"], TINY["intermediate_size"]
    with CudaBackend(ck, library=cs1, max_tokens=1024, max_rows=16, gemm_pins="off") as be:
        assert be.describe()["gemm_pins"] == "off"
        shapes = {(be.n_gdn, h), (be.n_attn, h), (be.n_mlp, h), (h, be.value_dim), (h, be.hq * be.dh), (h, inter)}
        key = gemm_pins.device_key(be.lib, be.device)
    table = _pin_table(tmp_path / "pins.json", key, [(N, K, T, query, 1) for N, K in sorted(shapes)])
    with CudaBackend(ck, library=cs1, max_tokens=1024, max_rows=16, gemm_pins=table, graphs=False) as be:
        state = be.describe()["gemm_pins"]
        got = be.letter_logits(rows)
        ffi = be.ffi
        idx, qrows, us = ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("float *")
        applied = 0
        for N, K in sorted(shapes):
            be.lib.cs1_gemm_plan_info(be.gemm, T, N, K, idx, qrows, us)
            applied += (int(qrows[0]), int(idx[0])) == (query, 1)
    print(f"gemm pins: {state}; {applied} of {len(shapes)} shapes run heuristic #1 of {query} rows at {T}")
    assert state.startswith(f"{len(shapes)} pins from ") and applied >= 1
    compare("tiny bidirectional, pinned GEMMs", got, ReferenceBackend(ck).letter_logits(rows), TINY_LENGTHS)


def test_fine_ladder_runs_the_coarse_plans_on_fewer_rows(cs1, tiny_folder, rng):
    """fine_ladder="auto" pads a 1,050-token prompt to 1,088 rows (1,152 on the coarse ladder, "off"), and each of
    that forward's GEMMs runs the algorithm cuBLASLt lists first at 1,152 rows (plan_info: query rows 1,152, rank
    0) where it passes cuBLASLt's check at 1,088. The two settings' logits agree within the parity tolerance (the
    largest difference printed), and each setting's graph replays its eager bytes."""
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    rows = random_rows(rng, [1050], TINY["vocab_size"])
    out = {}
    for spec in ("off", "auto"):
        with CudaBackend(ck, library=cs1, max_tokens=1200, max_rows=2, graphs=True, gemm_pins="off",
                         fine_ladder=spec) as be:
            T, _ = be._prepare(rows)
            assert T == (1088 if spec == "auto" else 1152)
            out[spec] = be._forward(rows, use_graph=False)
            be._forward(rows, use_graph=True)  # eager + capture
            assert be._forward(rows, use_graph=True).tobytes() == out[spec].tobytes()
            ffi = be.ffi
            idx, qrows, us = ffi.new("int32_t *"), ffi.new("int64_t *"), ffi.new("float *")
            plans = {}
            for N, K in sorted(be._row_gemm_shapes()):
                be.lib.cs1_gemm_plan_info(be.gemm, T, N, K, idx, qrows, us)
                plans[(N, K)] = (int(qrows[0]), int(idx[0]))
            print(f"fine_ladder={spec}: {be.describe()['fine_ladder']}; {T} rows; plans (query rows, rank) {plans}")
        if spec == "auto":
            assert sum(p == (1152, 0) for p in plans.values()) >= len(plans) - 1  # one may fail the check at 1,088
            assert all(p in ((1152, 0), (1088, 0)) for p in plans.values())
        else:
            assert all(p == (1152, 0) for p in plans.values())
    compare("fine vs coarse ladder", out["auto"], out["off"], [1050])
    print(f"fine vs coarse ladder: max |dlogit| {np.abs(out['auto'] - out['off']).max():.3e}")
    compare("fine ladder vs reference", out["auto"], ReferenceBackend(ck).letter_logits(rows), [1050])


def test_gemm_pin_table_of_another_device_is_refused(cs1, tiny_folder, tmp_path):
    import dataclasses

    from startlux_native import gemm_pins

    ck = load_checkpoint(tiny_folder, attention_mode="causal", require_tokenizer=False)
    with CudaBackend(ck, library=cs1, max_tokens=64, max_rows=2, graphs=False) as be:
        key = gemm_pins.device_key(be.lib, be.device)
        print(f"this device: {key.describe()}; auto: {be.describe()['gemm_pins']}")
    other = dataclasses.replace(key, cublaslt_version=key.cublaslt_version + 1)
    table = _pin_table(tmp_path / "other.json", other, [(256, 128, 64, 128, 0)])
    with pytest.raises(BackendError, match="was measured on"):
        CudaBackend(ck, library=cs1, max_tokens=64, max_rows=2, graphs=False, gemm_pins=table)
