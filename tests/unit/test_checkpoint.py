"""Checkpoint loader: config forms, file layouts, validation of every tensor, refusals, profile."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from startlux_native import bf16
from startlux_native.checkpoint import PINNED_NAME, PINNED_REVISION, ModelConfig, load_checkpoint
from startlux_native.errors import CheckpointError
from startlux_native.tiny import FOUR_B, make_tiny_checkpoint, tiny_config_json, write_safetensors


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _rewrite_tensors(folder: Path, edit) -> None:
    """Rewrite model.safetensors through edit(dict name -> (array, dtype)) (arrays as stored: uint16 / float32)."""
    from startlux_native.checkpoint import read_safetensors_header

    path = folder / "model.safetensors"
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    items = {n: (np.array(mm[e.begin:e.end]).view(np.uint16 if e.dtype == "BF16" else np.float32).reshape(e.shape),
                 e.dtype) for n, e in read_safetensors_header(path).items()}
    del mm
    edit(items)
    write_safetensors(path, {n: (a.shape, d) for n, (a, d) in items.items()},
                      lambda n, s, d: iter([np.ascontiguousarray(items[n][0]).tobytes()]))


def _edit_config(folder: Path, edit) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg)
    (folder / "config.json").write_text(json.dumps(cfg))


def test_loads_tiny_conditional_generation_form(tiny_checkpoint_dir):
    ck = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False)
    c = ck.config
    assert (c.hidden_size, c.num_hidden_layers, c.head_dim, c.rotary_dim) == (64, 4, 32, 8)
    assert c.layer_types == ("linear_attention",) * 3 + ("full_attention",)
    assert c.linear_num_value_heads == 2 * c.linear_num_key_heads
    assert c.num_attention_heads == 4 * c.num_key_value_heads
    assert ck.prefix == "model.language_model."
    assert len(ck.tensors) == 3 * 14 + 11 + 2
    assert ck.raw("layers.0.mlp.up_proj.weight").dtype == np.uint16
    assert ck.raw("layers.0.linear_attn.A_log").dtype == np.float32
    assert isinstance(ck.raw("embed_tokens.weight"), np.memmap)  # mapped, not read
    assert ck.letter_rows().shape == (26, 64)
    np.testing.assert_array_equal(ck.letter_rows(), bf16.from_bits(ck.raw("embed_tokens.weight")[32:58]))
    assert ck.head_name == "embed_tokens.weight"
    d = ck.describe()
    assert d["text_tensors"] == 55 and d["head"].startswith("tied")
    json.dumps(d)


def test_four_b_shape_has_426_tensors():
    c = ModelConfig.from_json(tiny_config_json(**FOUR_B))
    e = c.expected_tensors()
    assert len(e) == 426
    assert c.full_attention_layers == (3, 7, 11, 15, 19, 23, 27, 31)
    assert sum(int(np.prod(s)) for n, (s, _) in e.items() if n != "embed_tokens.weight") == 3_570_052_096
    assert sum(int(np.prod(s)) for s, d in e.values() if d == "F32") == 3_840
    assert e["layers.0.linear_attn.in_proj_qkv.weight"][0] == (8192, 2560)
    assert e["layers.3.self_attn.q_proj.weight"][0] == (8192, 2560)


def test_parses_a_stock_style_4b_config():
    """The 4B numbers of spec §1 in the published ConditionalGeneration layout (extra keys ignored)."""
    text = {"model_type": "qwen3_5_text", "attention_bias": False, "attn_output_gate": True, "eos_token_id": 248044,
            "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2560,
            "intermediate_size": 9216, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
            "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
            "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
            "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, "num_attention_heads": 16,
            "num_hidden_layers": 32, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "vocab_size": 248320,
            "rope_parameters": {"mrope_interleaved": True, "mrope_section": [11, 11, 10], "rope_type": "default",
                                "rope_theta": 10000000, "partial_rotary_factor": 0.25}}
    raw = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
           "vision_config": {"depth": 24, "hidden_size": 1024}, "tie_word_embeddings": True}
    c = ModelConfig.from_json(raw)
    assert (c.hidden_size, c.head_dim, c.rotary_dim, c.rope_theta, c.conv_dim) == (2560, 256, 64, 1e7, 8192)
    assert c.tie_word_embeddings and c.linear_num_value_heads == 32
    old_style = dict(text, rope_parameters=None, rope_theta=10000000, partial_rotary_factor=0.25,
                     rope_scaling={"type": "mrope", "mrope_section": [11, 11, 10]})
    assert ModelConfig.from_json(old_style) == ModelConfig.from_json(dict(text, tie_word_embeddings=False))


def test_text_only_config_and_model_prefix(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "t", text_only_config=True, prefix="model.", with_tokenizer=False,
                                  vocab_size=300)
    ck = load_checkpoint(folder, require_tokenizer=False)
    assert ck.prefix == "model." and ck.config.vocab_size == 300


def test_bare_prefix_and_sharded_index(tmp_path):
    one = make_tiny_checkpoint(tmp_path / "one", prefix="", vocab_size=300, with_tokenizer=False, seed=5)
    three = make_tiny_checkpoint(tmp_path / "three", prefix="", vocab_size=300, with_tokenizer=False, seed=5,
                                 shards=3)
    a, b = load_checkpoint(one, require_tokenizer=False), load_checkpoint(three, require_tokenizer=False)
    assert a.prefix == "" and len(b.files) == 3 and (three / "model.safetensors.index.json").exists()
    for name in a.names():
        np.testing.assert_array_equal(a.raw(name), b.raw(name))


def test_wrong_shape_names_tensor_and_both_shapes(tmp_path, tiny_checkpoint_dir):
    folder = _copy(tiny_checkpoint_dir, tmp_path / "c")

    def edit(items):
        a, d = items["model.language_model.layers.1.linear_attn.in_proj_z.weight"]
        items["model.language_model.layers.1.linear_attn.in_proj_z.weight"] = (a[:-1], d)

    _rewrite_tensors(folder, edit)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder, require_tokenizer=False)
    msg = str(e.value)
    print(msg)
    assert "layers.1.linear_attn.in_proj_z.weight" in msg and "[127, 64]" in msg and "[128, 64]" in msg


def test_wrong_dtype_refused(tmp_path, tiny_checkpoint_dir):
    folder = _copy(tiny_checkpoint_dir, tmp_path / "c")

    def edit(items):
        n = "model.language_model.layers.3.self_attn.k_proj.weight"
        items[n] = (bf16.from_bits(items[n][0]), "F32")

    _rewrite_tensors(folder, edit)
    with pytest.raises(CheckpointError, match=r"layers\.3\.self_attn\.k_proj\.weight has dtype F32, expected BF16"):
        load_checkpoint(folder, require_tokenizer=False)


def test_missing_and_unexpected_tensors_refused(tmp_path, tiny_checkpoint_dir):
    missing = _copy(tiny_checkpoint_dir, tmp_path / "m")
    _rewrite_tensors(missing, lambda items: items.pop("model.language_model.layers.2.linear_attn.dt_bias"))
    with pytest.raises(CheckpointError, match=r"missing text tensor\(s\) layers\.2\.linear_attn\.dt_bias"):
        load_checkpoint(missing, require_tokenizer=False)

    extra = _copy(tiny_checkpoint_dir, tmp_path / "x")
    _rewrite_tensors(extra, lambda items: items.update(
        {"model.language_model.layers.0.self_attn.q_proj.weight": (np.ones((8, 64), np.uint16), "BF16")}))
    with pytest.raises(CheckpointError, match=r"unexpected text tensor\(s\) layers\.0\.self_attn\.q_proj"):
        load_checkpoint(extra, require_tokenizer=False)


def test_fused_qwen3_next_names_refused(tmp_path, tiny_checkpoint_dir):
    folder = _copy(tiny_checkpoint_dir, tmp_path / "n")

    def edit(items):
        p = "model.language_model.layers.0.linear_attn."
        items[p + "in_proj_qkvz"] = items.pop(p + "in_proj_qkv.weight")

    _rewrite_tensors(folder, edit)
    with pytest.raises(CheckpointError, match="in_proj_qkv.weight"):
        load_checkpoint(folder, require_tokenizer=False)


def test_visual_and_mtp_ignored(tmp_path, rng):
    extra = {"model.visual.blocks.0.attn.qkv.weight": rng.standard_normal((12, 4)).astype(np.float32),
             "mtp.fc.weight": rng.standard_normal((4, 4)).astype(np.float32)}
    folder = make_tiny_checkpoint(tmp_path / "v", vocab_size=300, with_tokenizer=False, extra_tensors=extra)
    ck = load_checkpoint(folder, require_tokenizer=False)
    assert len(ck.tensors) == 55 and not any("visual" in n or "mtp" in n for n in ck.names())


def test_untied_head_used_when_present(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "u", vocab_size=300, with_tokenizer=False, tie_word_embeddings=False)
    ck = load_checkpoint(folder, require_tokenizer=False)
    assert ck.head_name == "lm_head.weight" and len(ck.tensors) == 56
    np.testing.assert_array_equal(ck.letter_rows(), bf16.from_bits(ck.raw("lm_head.weight")[32:58]))
    assert not np.array_equal(ck.letter_rows(), bf16.from_bits(ck.raw("embed_tokens.weight")[32:58]))


def test_gdn_param_rounding_switch(tiny_checkpoint_dir):
    rounded = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False)
    kept = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False, keep_fp32_gdn_params=True)
    assert rounded.profile.gdn_param_precision == "bf16-rounded" and kept.profile.gdn_param_precision == "fp32"
    for name in ("layers.0.linear_attn.A_log", "layers.2.linear_attn.norm.weight"):
        raw = rounded.raw(name)
        assert raw.dtype == np.float32
        np.testing.assert_array_equal(kept.f32(name), raw)
        np.testing.assert_array_equal(rounded.f32(name), bf16.round_(raw))
        assert not np.array_equal(rounded.f32(name), raw)  # random fp32 values are not bf16-exact
    assert (rounded.f32("layers.0.linear_attn.A_log") < 0).all()


def test_profile_startlux_is_bidirectional_generic_is_causal(tmp_path, tiny_checkpoint_dir, caplog):
    caplog.set_level(logging.INFO, logger="startlux_native")
    ck = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False)
    assert (ck.profile.attention_mode, ck.profile.attention_mode_source) == ("bidirectional", "profile")
    assert "attention bidirectional (profile" in caplog.text
    gen = make_tiny_checkpoint(tmp_path / "g", vocab_size=300, attention_mode_profile="generic",
                               with_tokenizer=False)
    g = load_checkpoint(gen, require_tokenizer=False)
    assert (g.profile.attention_mode, g.profile.attention_mode_source) == ("causal", "default")
    assert not (gen / "decision_config.json").exists() and g.decision_config.source == "default"
    o = load_checkpoint(tiny_checkpoint_dir, require_tokenizer=False, attention_mode="causal")
    assert (o.profile.attention_mode, o.profile.attention_mode_source) == ("causal", "override")
    o = load_checkpoint(gen, require_tokenizer=False, attention_mode="bidirectional")
    assert (o.profile.attention_mode, o.profile.attention_mode_source) == ("bidirectional", "override")
    with pytest.raises(CheckpointError, match="attention_mode"):
        load_checkpoint(gen, require_tokenizer=False, attention_mode="sliding")


def test_profile_name_from_hf_snapshot_path(tmp_path, tiny_checkpoint_dir):
    snap = tmp_path / "hub" / "models--startlux-models--StartLux-Decision-v1.1-4B-Instant" / "snapshots"
    folder = _copy(tiny_checkpoint_dir, snap / PINNED_REVISION)
    (folder / "decision_config.json").unlink()  # the name alone must select the StartLux profile
    ck = load_checkpoint(folder, require_tokenizer=False)
    assert (ck.profile.name, ck.profile.revision) == (PINNED_NAME, PINNED_REVISION)
    assert ck.profile.attention_mode == "bidirectional"


def test_autothink_refused(tmp_path, tiny_checkpoint_dir):
    by_name = _copy(tiny_checkpoint_dir, tmp_path / "StartLux-Decision-v1.1-4B-AutoThink")
    with pytest.raises(CheckpointError, match="AutoThink"):
        load_checkpoint(by_name, require_tokenizer=False)
    by_config = _copy(tiny_checkpoint_dir, tmp_path / "plain")
    dc = json.loads((by_config / "decision_config.json").read_text())
    dc["format"] = "StartLux-Decision-v1.1-AutoThink"
    (by_config / "decision_config.json").write_text(json.dumps(dc))
    with pytest.raises(CheckpointError, match="AutoThink"):
        load_checkpoint(by_config, require_tokenizer=False)


@pytest.mark.parametrize("edit, pattern", [
    (lambda t: t.update(hidden_size=5120, num_hidden_layers=64), "27B-sized"),
    (lambda t: t.update(model_type="qwen3_next"), "qwen3_next"),
    (lambda t: t.update(num_experts=256), "mixture-of-experts"),
    (lambda t: t.update(hidden_act="gelu"), "hidden_act"),
    (lambda t: t.update(attention_bias=True), "attention_bias"),
    (lambda t: t.update(attn_output_gate=False), "attn_output_gate"),
    (lambda t: t.update(linear_conv_kernel_dim=3), "linear_conv_kernel_dim"),
    (lambda t: t.update(head_dim=160), "head_dim=160"),
    (lambda t: t["rope_parameters"].update(rope_type="yarn"), "rope_type"),
])
def test_unsupported_configs_refused(tmp_path, tiny_checkpoint_dir, edit, pattern):
    folder = _copy(tiny_checkpoint_dir, tmp_path / "c")
    _edit_config(folder, lambda cfg: edit(cfg["text_config"]))
    with pytest.raises(CheckpointError, match=pattern) as e:
        load_checkpoint(folder, require_tokenizer=False)
    print(e.value)


def test_non_qwen_top_level_refused(tmp_path, tiny_checkpoint_dir):
    folder = _copy(tiny_checkpoint_dir, tmp_path / "c")
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                                                     "num_hidden_layers": 4}))
    with pytest.raises(CheckpointError, match="'llama' is not supported"):
        load_checkpoint(folder, require_tokenizer=False)


def test_tokenizer_required_by_default(tiny_checkpoint_dir):
    with pytest.raises(CheckpointError, match="no tokenizer.json"):
        load_checkpoint(tiny_checkpoint_dir)


def test_tiny_checkpoint_with_real_tokenizer(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "tok", vocab_size=248320)
    ck = load_checkpoint(folder)
    assert ck.tokenizer_path == folder / "tokenizer.json" and ck.tokenizer_path.stat().st_size > 1_000_000
    assert ck.decision_config.letter_token_ids == tuple(range(32, 58))
    assert ck.decision_config.temperature_source["choice"] == "decision_config.json"
