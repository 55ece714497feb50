"""Random-weight Qwen3.5-shaped checkpoints: tiny ones for tests and `--demo`, full-size ones for benchmarks.

The file layout is the real one (ConditionalGeneration config, `model.language_model.` prefix, bf16 weights, fp32
A_log and linear_attn.norm.weight, tied embedding). Tensors are written one at a time, generated in blocks, so even
the 4B shape needs little host memory.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from . import bf16
from .checkpoint import LM_HEAD, ModelConfig, read_safetensors_header

_BLOCK = 1 << 22  # values generated per block
# keyword arguments of make_tiny_checkpoint for the exact StartLux/Qwen3.5 4B shape
FOUR_B = dict(hidden_size=2560, num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4, head_dim=256,
              intermediate_size=9216, linear_num_key_heads=16, linear_num_value_heads=32, linear_key_head_dim=128,
              linear_value_head_dim=128)


def tiny_config_json(*, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1,
                     head_dim=32, intermediate_size=128, linear_num_key_heads=2, linear_num_value_heads=4,
                     linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
                     vocab_size=248320, rope_theta=10_000_000.0, partial_rotary_factor=0.25,
                     full_attention_interval=4, tie_word_embeddings=True, rms_norm_eps=1e-6,
                     max_position_embeddings=262144, name="startlux-native/tiny-random-qwen3_5",
                     text_only=False) -> dict:
    """config.json contents: Qwen3_5ForConditionalGeneration form (or the bare text config if text_only)."""
    half = int(head_dim * partial_rotary_factor) // 2
    section = [round(half * 11 / 32), round(half * 11 / 32)]  # the real [11, 11, 10] scaled to rotary_dim / 2
    section.append(half - sum(section))
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": hidden_size,
        "num_hidden_layers": num_hidden_layers,
        "layer_types": ["full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention"
                        for i in range(num_hidden_layers)],
        "full_attention_interval": full_attention_interval,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim,
        "intermediate_size": intermediate_size,
        "linear_num_key_heads": linear_num_key_heads,
        "linear_num_value_heads": linear_num_value_heads,
        "linear_key_head_dim": linear_key_head_dim,
        "linear_value_head_dim": linear_value_head_dim,
        "linear_conv_kernel_dim": linear_conv_kernel_dim,
        "vocab_size": vocab_size,
        "rms_norm_eps": rms_norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "attn_output_gate": True,
        "max_position_embeddings": max_position_embeddings,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta,
                            "partial_rotary_factor": partial_rotary_factor, "mrope_section": section,
                            "mrope_interleaved": True},
        "tie_word_embeddings": tie_word_embeddings,
        "eos_token_id": 248044,
        "dtype": "bfloat16",
    }
    if text_only:
        return {**text, "architectures": ["Qwen3_5ForCausalLM"], "_name_or_path": name}
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "_name_or_path": name,
        "text_config": text,
        "tie_word_embeddings": tie_word_embeddings,
        "image_token_id": 248056,
        "video_token_id": 248057,
        "vision_start_token_id": 248053,
        "vision_end_token_id": 248054,
    }


def _generator(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> Callable[[int], np.ndarray]:
    """Return gen(n) -> float32 values for the next n elements of this tensor. Uniform draws (several times
    faster than normal ones, which matters for the 4B shape) scaled to the wanted standard deviation."""
    def sym(n: int, std: float) -> np.ndarray:  # zero mean, standard deviation std
        u = rng.random(n, dtype=np.float32)
        u -= np.float32(0.5)
        u *= np.float32(std * 2 * math.sqrt(3))
        return u

    fan_in = shape[-1] if len(shape) > 1 else 1
    if name.endswith("A_log"):
        return lambda n: np.log(rng.uniform(0.05, 0.9, n)).astype(np.float32)  # negative, as in the real 4B
    if name.endswith("dt_bias"):
        return lambda n: rng.uniform(-1.0, 1.5, n).astype(np.float32)
    if name.endswith("linear_attn.norm.weight"):
        return lambda n: 1.0 + sym(n, 0.2)  # plain w around 1
    if name.endswith("norm.weight"):
        return lambda n: sym(n, 0.1)  # zero-centred (1 + w)
    if name.endswith("conv1d.weight"):
        return lambda n: sym(n, 0.5)
    if name.endswith(("embed_tokens.weight", LM_HEAD)):
        return lambda n: sym(n, 2.0 / math.sqrt(fan_in))  # letter logits O(1) at any width (0.25 at 64)
    return lambda n: sym(n, 1.0 / math.sqrt(fan_in))


def _blocks(gen: Callable[[int], np.ndarray], count: int, dtype: str) -> Iterator[bytes]:
    done = 0
    while done < count:
        n = min(_BLOCK, count - done)
        v = gen(n)
        v[v == 0] = np.float32(1e-3)  # never an exact zero
        # bf16 by truncation (the upper 16 bits): still random, exactly representable, and fast for the 4B shape
        yield ((v.view(np.uint32) >> 16).astype("<u2") if dtype == "BF16" else v.astype("<f4")).tobytes()
        done += n


def write_safetensors(path: Path, specs: dict[str, tuple[tuple[int, ...], str]],
                      data: Callable[[str, tuple[int, ...], str], Iterator[bytes]]) -> None:
    """Write a safetensors file tensor by tensor: specs name -> (shape, "BF16"|"F32"), data yields the bytes."""
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, dtype) in specs.items():
        n = math.prod(shape) * (2 if dtype == "BF16" else 4)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for name, (shape, dtype) in specs.items():
            written = 0
            for chunk in data(name, shape, dtype):
                f.write(chunk)
                written += len(chunk)
            if written != header[name]["data_offsets"][1] - header[name]["data_offsets"][0]:
                raise RuntimeError(f"{name}: wrote {written} bytes")
    tmp.replace(path)


def make_tiny_checkpoint(folder: str | Path, *, seed: int = 0, attention_mode_profile: str = "startlux",
                         hidden_size: int = 64, num_hidden_layers: int = 4, num_attention_heads: int = 4,
                         num_key_value_heads: int = 1, head_dim: int = 32, intermediate_size: int = 128,
                         linear_num_key_heads: int = 2, linear_num_value_heads: int = 4,
                         linear_key_head_dim: int = 32, linear_value_head_dim: int = 32, vocab_size: int = 248320,
                         rope_theta: float = 10_000_000.0, partial_rotary_factor: float = 0.25,
                         full_attention_interval: int = 4, tie_word_embeddings: bool = True,
                         prefix: str = "model.language_model.", with_decision_config: bool | None = None,
                         with_tokenizer: bool = True, text_only_config: bool = False, shards: int = 1,
                         name: str | None = None, temperatures: dict[str, float] | None = None,
                         extra_tensors: dict[str, np.ndarray] | None = None) -> Path:
    """Write a random-weight Qwen3.5-shaped checkpoint into `folder` and return it.

    attention_mode_profile: "startlux" names the model StartLux-Decision-v1.1-tiny-Instant and writes
    decision_config.json (the loader then picks bidirectional attention); "generic" names it a plain Qwen3.5 and
    writes no decision_config.json unless with_decision_config=True (that file alone marks a StartLux folder).
    The 4B shape: hidden_size=2560, num_hidden_layers=32, num_attention_heads=16, num_key_value_heads=4,
    head_dim=256, intermediate_size=9216, linear_num_key_heads=16, linear_num_value_heads=32,
    linear_key_head_dim=128, linear_value_head_dim=128 (see FOUR_B).
    shards > 1 writes model-0000i-of-0000n.safetensors plus model.safetensors.index.json.
    extra_tensors (full names -> float32 arrays, stored bf16) are added as is (e.g. model.visual.* for tests).
    with_tokenizer copies tokenizer.json from tokenizer.cached_tokenizer_json().
    """
    if attention_mode_profile not in ("startlux", "generic"):
        raise ValueError(f"attention_mode_profile must be 'startlux' or 'generic', got {attention_mode_profile!r}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if name is None:
        name = ("startlux-native/StartLux-Decision-v1.1-tiny-Instant" if attention_mode_profile == "startlux"
                else "startlux-native/tiny-random-qwen3_5")
    cfg = tiny_config_json(hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
                           num_attention_heads=num_attention_heads, num_key_value_heads=num_key_value_heads,
                           head_dim=head_dim, intermediate_size=intermediate_size,
                           linear_num_key_heads=linear_num_key_heads, linear_num_value_heads=linear_num_value_heads,
                           linear_key_head_dim=linear_key_head_dim, linear_value_head_dim=linear_value_head_dim,
                           vocab_size=vocab_size, rope_theta=rope_theta, partial_rotary_factor=partial_rotary_factor,
                           full_attention_interval=full_attention_interval,
                           tie_word_embeddings=tie_word_embeddings, name=name, text_only=text_only_config)
    model_config = ModelConfig.from_json(cfg)
    specs = {prefix + n: v for n, v in model_config.expected_tensors().items()}
    if not tie_word_embeddings:
        specs[LM_HEAD] = ((vocab_size, hidden_size), "BF16")
    extra = dict(extra_tensors or {})
    for n, a in extra.items():
        specs[n] = (tuple(a.shape), "BF16")

    # one generator per tensor, seeded from (seed, tensor index): the same seed gives the same weights whatever
    # the shard split
    def data(n: str, shape: tuple[int, ...], dtype: str) -> Iterator[bytes]:
        if n in extra:
            yield bf16.to_bits(np.asarray(extra[n], dtype=np.float32)).tobytes()
            return
        rng = np.random.default_rng([seed, list(specs).index(n)])
        yield from _blocks(_generator(n, shape, rng), math.prod(shape), dtype)

    names = list(specs)
    shards = max(1, min(shards, len(names)))
    for stale in [*folder.glob("model*.safetensors"), folder / "model.safetensors.index.json"]:
        stale.unlink(missing_ok=True)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", specs, data)
    else:
        weight_map = {}
        for s in range(shards):
            part = names[s::shards]
            fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            write_safetensors(folder / fname, {n: specs[n] for n in part}, data)
            weight_map.update(dict.fromkeys(part, fname))
        total = sum(math.prod(sh) * (2 if dt == "BF16" else 4) for sh, dt in specs.values())
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1), encoding="utf-8")

    (folder / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    if with_decision_config is None:
        with_decision_config = attention_mode_profile == "startlux"
    if with_decision_config:
        dc = {"format": "StartLux-Decision-v1.1-Instant (tiny random test model)",
              "letter_token_ids": list(range(32, 58)),
              "temperature_by_type": temperatures or {"choice": 1.25, "noul": 1.5, "score": 1.75},
              "wide_choice": {"group": 25, "keep": 3, "residual": 1e-3},
              "release_date": "2026-10-10"}
        (folder / "decision_config.json").write_text(json.dumps(dc, indent=2), encoding="utf-8")
    else:
        (folder / "decision_config.json").unlink(missing_ok=True)
    if with_tokenizer:
        from .tokenizer import cached_tokenizer_json  # lazy: the tokenizer build is slow and optional here

        shutil.copyfile(cached_tokenizer_json(), folder / "tokenizer.json")
    return folder


PROJECTION_MATRICES = ("proj.weight", "proj_qkv.weight", "proj_z.weight", "proj_a.weight", "proj_b.weight")


def scale_projection_matrices(folder: str | Path, shift: int = 2) -> Path:
    """Multiply every projection matrix of a single-file checkpoint by 2**-shift in place (bf16 exponent - shift:
    exact for normal values). At tiny.py's default scale a random network is chaotic under bf16 rounding; GPU parity
    tests use the calmer 1/4 scale so real errors are not hidden behind rounding noise."""
    folder = Path(folder)
    path = folder / "model.safetensors"
    mm = np.memmap(path, dtype=np.uint8, mode="r+")
    for name, e in read_safetensors_header(path).items():
        if name.endswith(PROJECTION_MATRICES):
            v = mm[e.begin:e.end].view(np.uint16)
            assert ((v >> 7) & 0xFF).min() > shift, name
            v[:] = (v.astype(np.int32) - (shift << 7)).astype(np.uint16)
    mm.flush()
    del mm
    return folder
