"""Load a Qwen3.5 dense text-decoder checkpoint (spec qwen3_5-model.md §1–§2), memory-mapped and fully validated.

Every text tensor's name, shape and dtype is checked against the config before anything uses it. bf16 tensors are
exposed as uint16 views of the mapped file (numpy has no bf16), fp32 ones as float32 views: no host copy is made
until a caller asks for float values (`f32`).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import bf16
from .decision_config import DecisionConfig, load_decision_config
from .errors import CheckpointError

log = logging.getLogger("startlux_native")

PREFIXES = ("model.language_model.", "model.", "")
IGNORED_PREFIXES = ("model.visual.", "visual.", "mtp.", "model.mtp.")
LM_HEAD = "lm_head.weight"
FP32_SUFFIXES = (".linear_attn.A_log", ".linear_attn.norm.weight")  # the only fp32 tensors (spec §2)
PINNED_NAME = "startlux-models/StartLux-Decision-v1.1-4B-Instant"
PINNED_REVISION = "416088f77cfce09633906a3675c7cd2e5dabcf10"
ATTENTION_MODES = ("bidirectional", "causal")

# safetensors dtype -> numpy dtype of the exposed view (BF16 as raw bits)
_NP_DTYPES = {"BF16": np.uint16, "F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_STARTLUX_INSTANT = re.compile(r"startlux[-_ ]?decision[-_ ]?v1[._]1.*instant", re.I)


# ---------------------------------------------------------------------------------------------------------------
# config

@dataclass(frozen=True, slots=True)
class ModelConfig:
    """The text-decoder numbers the forward pass needs (spec §1). Build with `from_json`."""

    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    partial_rotary_factor: float
    rotary_dim: int
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    tie_word_embeddings: bool
    max_position_embeddings: int

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "full_attention")

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == "linear_attention")

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim

    @classmethod
    def from_json(cls, raw: dict, *, where: str = "config.json") -> ModelConfig:
        """Parse either the ConditionalGeneration form (`text_config` inside) or a text-only config; refuse
        anything that is not a Qwen3.5 dense text decoder this project implements."""
        text, top = _text_section(raw, where)
        return _parse_text_config(text, top, where)

    def expected_tensors(self, *, lm_head: bool = False) -> dict[str, tuple[tuple[int, ...], str]]:
        """Every text tensor (name without prefix) -> (shape, safetensors dtype), in layer order."""
        h, c = self.hidden_size, self
        out: dict[str, tuple[tuple[int, ...], str]] = {"embed_tokens.weight": ((c.vocab_size, h), "BF16")}
        for i, kind in enumerate(c.layer_types):
            p = f"layers.{i}."
            out[p + "input_layernorm.weight"] = ((h,), "BF16")
            out[p + "post_attention_layernorm.weight"] = ((h,), "BF16")
            if kind == "linear_attention":
                la = p + "linear_attn."
                out[la + "in_proj_qkv.weight"] = ((c.conv_dim, h), "BF16")
                out[la + "in_proj_z.weight"] = ((c.linear_value_dim, h), "BF16")
                out[la + "in_proj_b.weight"] = ((c.linear_num_value_heads, h), "BF16")
                out[la + "in_proj_a.weight"] = ((c.linear_num_value_heads, h), "BF16")
                out[la + "conv1d.weight"] = ((c.conv_dim, 1, c.linear_conv_kernel_dim), "BF16")
                out[la + "A_log"] = ((c.linear_num_value_heads,), "F32")
                out[la + "dt_bias"] = ((c.linear_num_value_heads,), "BF16")
                out[la + "norm.weight"] = ((c.linear_value_head_dim,), "F32")
                out[la + "out_proj.weight"] = ((h, c.linear_value_dim), "BF16")
            else:
                sa = p + "self_attn."
                out[sa + "q_proj.weight"] = ((c.num_attention_heads * c.head_dim * 2, h), "BF16")
                out[sa + "k_proj.weight"] = ((c.num_key_value_heads * c.head_dim, h), "BF16")
                out[sa + "v_proj.weight"] = ((c.num_key_value_heads * c.head_dim, h), "BF16")
                out[sa + "o_proj.weight"] = ((h, c.num_attention_heads * c.head_dim), "BF16")
                out[sa + "q_norm.weight"] = ((c.head_dim,), "BF16")
                out[sa + "k_norm.weight"] = ((c.head_dim,), "BF16")
            out[p + "mlp.gate_proj.weight"] = ((c.intermediate_size, h), "BF16")
            out[p + "mlp.up_proj.weight"] = ((c.intermediate_size, h), "BF16")
            out[p + "mlp.down_proj.weight"] = ((h, c.intermediate_size), "BF16")
        out["norm.weight"] = ((h,), "BF16")
        if lm_head:
            out[LM_HEAD] = ((c.vocab_size, h), "BF16")
        return out

    def describe(self) -> dict:
        d = asdict(self)
        d["layer_types"] = list(self.layer_types)
        return d


def _text_section(raw: dict, where: str) -> tuple[dict, dict]:
    if not isinstance(raw, dict):
        raise CheckpointError(f"{where}: must hold a JSON object")
    model_type = raw.get("model_type")
    if "text_config" in raw:
        if model_type not in (None, "qwen3_5"):
            raise CheckpointError(f"{where}: model_type {model_type!r} is not a Qwen3.5 dense model "
                                  "(expected 'qwen3_5' with a text_config)")
        text = raw["text_config"]
        if not isinstance(text, dict):
            raise CheckpointError(f"{where}: text_config must be an object")
        return text, raw
    return raw, raw


def _parse_text_config(text: dict, top: dict, where: str) -> ModelConfig:
    model_type = text.get("model_type", "qwen3_5_text")
    if model_type != "qwen3_5_text":
        raise CheckpointError(f"{where}: text model_type {model_type!r} is not supported: this server implements only "
                              "the Qwen3.5 dense text decoder ('qwen3_5_text')")
    for key in ("num_experts", "num_local_experts", "num_experts_per_tok", "moe_intermediate_size"):
        if text.get(key):
            raise CheckpointError(f"{where}: {key}={text[key]!r}: mixture-of-experts checkpoints are not supported "
                                  "(dense Qwen3.5 only)")

    def need_int(key: str, default=None) -> int:
        v = text.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise CheckpointError(f"{where}: {key} must be a positive integer, got {v!r}")
        return v

    hidden = need_int("hidden_size")
    layers = need_int("num_hidden_layers")
    if hidden == 5120 or layers >= 64:
        raise CheckpointError(f"{where}: a 27B-sized checkpoint (hidden_size {hidden}, {layers} layers) is not "
                              "supported: this server serves StartLux-Decision v1.1 4B Instant")
    n_q, n_kv = need_int("num_attention_heads"), need_int("num_key_value_heads")
    head_dim = need_int("head_dim")  # read explicitly: 256 != hidden / heads (spec pitfall 6)
    hk, hv = need_int("linear_num_key_heads"), need_int("linear_num_value_heads")
    dk, dv = need_int("linear_key_head_dim"), need_int("linear_value_head_dim")
    kernel = need_int("linear_conv_kernel_dim", 4)
    inter, vocab = need_int("intermediate_size"), need_int("vocab_size")
    max_pos = need_int("max_position_embeddings", 262144)

    if n_q % n_kv:
        raise CheckpointError(f"{where}: num_attention_heads {n_q} is not a multiple of num_key_value_heads {n_kv}")
    if hv % hk:
        raise CheckpointError(f"{where}: linear_num_value_heads {hv} is not a multiple of linear_num_key_heads {hk}")
    for key, v in (("head_dim", head_dim), ("linear_key_head_dim", dk), ("linear_value_head_dim", dv)):
        if v & (v - 1) or not 8 <= v <= 256:
            raise CheckpointError(f"{where}: {key}={v} is not supported (a power of two in 8..256)")
    if kernel != 4:
        raise CheckpointError(f"{where}: linear_conv_kernel_dim={kernel} is not supported (Qwen3.5 uses 4)")
    act = text.get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (Qwen3.5 uses 'silu')")
    if text.get("attention_bias", False):
        raise CheckpointError(f"{where}: attention_bias=true is not supported (Qwen3.5 has no biases)")
    if text.get("attn_output_gate", True) is not True:
        raise CheckpointError(f"{where}: attn_output_gate={text.get('attn_output_gate')!r} is not supported "
                              "(Qwen3.5 gated attention needs true)")

    eps = text.get("rms_norm_eps", 1e-6)
    if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 < eps < 1e-2:
        raise CheckpointError(f"{where}: rms_norm_eps {eps!r} is not a small positive number")

    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise CheckpointError(f"{where}: rope_parameters must be an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise CheckpointError(f"{where}: rope_type {rope_type!r} is not supported (only 'default' RoPE)")
    theta = rope.get("rope_theta", text.get("rope_theta", 10_000_000))
    factor = rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25))
    if not isinstance(theta, int | float) or theta <= 1:
        raise CheckpointError(f"{where}: rope_theta {theta!r} is invalid")
    if not isinstance(factor, int | float) or not 0 < factor <= 1:
        raise CheckpointError(f"{where}: partial_rotary_factor {factor!r} is invalid")
    rotary_dim = int(head_dim * factor)
    if rotary_dim % 2 or rotary_dim < 2:
        raise CheckpointError(f"{where}: rotary dim {head_dim}*{factor} = {rotary_dim} must be even and >= 2")
    section = rope.get("mrope_section")
    if section is not None and sum(section) != rotary_dim // 2:
        raise CheckpointError(f"{where}: mrope_section {section} does not sum to rotary_dim/2 = {rotary_dim // 2}")

    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = need_int("full_attention_interval", 4)
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]
    if (not isinstance(layer_types, list) or len(layer_types) != layers
            or any(t not in ("linear_attention", "full_attention") for t in layer_types)):
        raise CheckpointError(f"{where}: layer_types must list {layers} entries of 'linear_attention' / "
                              f"'full_attention', got {layer_types!r}")

    # the wrapper's value governs its lm_head in the ConditionalGeneration form (the 4B: tied, no lm_head.weight)
    if top is not text and "tie_word_embeddings" in top:
        tied = top["tie_word_embeddings"]
    else:
        tied = text.get("tie_word_embeddings", False)
    return ModelConfig(hidden, layers, tuple(layer_types), n_q, n_kv, head_dim, inter, vocab, float(eps),
                       float(theta), float(factor), rotary_dim, hk, hv, dk, dv, kernel, bool(tied), max_pos)


# ---------------------------------------------------------------------------------------------------------------
# safetensors (parsed by hand: bf16 stays raw uint16, nothing is copied)

@dataclass(frozen=True, slots=True)
class TensorEntry:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offsets in the file
    end: int


def read_safetensors_header(path: Path) -> dict[str, TensorEntry]:
    """name -> TensorEntry for one .safetensors file; validates offsets against the file size."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise CheckpointError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            n = int.from_bytes(head, "little")
            if n <= 0 or n + 8 > size:
                raise CheckpointError(f"{path}: bad safetensors header length {n} (file has {size} bytes)")
            header = json.loads(f.read(n))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    except ValueError as exc:
        raise CheckpointError(f"{path}: safetensors header is not JSON: {exc}") from exc
    base = 8 + n
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (b, e) = meta["dtype"], tuple(int(s) for s in meta["shape"]), meta["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: tensor {name}: malformed header entry {meta!r}") from exc
        item = np.dtype(_NP_DTYPES[dtype]).itemsize if dtype in _NP_DTYPES else None
        if item is not None and e - b != math.prod(shape) * item:
            raise CheckpointError(f"{path}: tensor {name}: {e - b} bytes for shape {list(shape)} {dtype}")
        if not 0 <= b <= e or base + e > size:
            raise CheckpointError(f"{path}: tensor {name}: data offsets [{b}, {e}) outside the file")
        out[name] = TensorEntry(path, dtype, shape, base + b, base + e)
    return out


def _tensor_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    single = folder / "model.safetensors"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{index}: cannot read weight_map: {exc}") from exc
        files = sorted(set(weight_map.values()))
        missing = [f for f in files if not (folder / f).exists()]
        if missing:
            raise CheckpointError(f"{index}: shard files missing: {', '.join(missing)}")
        return [folder / f for f in files]
    if single.exists():
        return [single]
    raise CheckpointError(f"{folder}: neither model.safetensors nor model.safetensors.index.json")


# ---------------------------------------------------------------------------------------------------------------
# profile

@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    revision: str | None
    attention_mode: str  # "bidirectional" | "causal"
    attention_mode_source: str  # "profile" | "override" | "default"
    gdn_param_precision: str  # "bf16-rounded" | "fp32"
    is_startlux_instant: bool = False

    def describe(self) -> dict:
        return asdict(self)


def _name_and_revision(folder: Path, raw_config: dict) -> tuple[str, str | None]:
    for p in (folder.absolute(), folder.resolve()):
        parts = p.parts
        for i in range(len(parts) - 2):
            m = re.fullmatch(r"models--(.+?)--(.+)", parts[i])
            if m and parts[i + 1] == "snapshots":
                return f"{m.group(1)}/{m.group(2)}", parts[i + 2]
    name = raw_config.get("_name_or_path")
    if isinstance(name, str) and name.strip():
        return name.strip(), None
    return folder.absolute().name, None


def _decision_strings(folder: Path) -> list[str]:
    """Every string value of decision_config.json (format/variant fields), lower-cased, for the AutoThink check."""
    path = folder / "decision_config.json"
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # load_decision_config reports it

    def walk(v) -> Iterable[str]:
        if isinstance(v, str):
            yield v.lower()
        elif isinstance(v, dict):
            for k, x in v.items():
                yield str(k).lower()
                yield from walk(x)
        elif isinstance(v, list):
            for x in v:
                yield from walk(x)

    return list(walk(raw))


def _make_profile(folder: Path, raw_config: dict, attention_mode: str | None, keep_fp32: bool,
                  fp32_in_file: bool) -> ModelProfile:
    name, revision = _name_and_revision(folder, raw_config)
    names = [name, folder.absolute().name, str(raw_config.get("_name_or_path", ""))]
    if any("autothink" in n.lower() for n in names) or any("autothink" in s for s in _decision_strings(folder)):
        raise CheckpointError(f"{folder}: '{name}' is an AutoThink checkpoint; this server serves Instant only "
                              "(AutoThink needs a thinking pass whose mixing rule is not published)")
    startlux = (folder / "decision_config.json").exists() or any(_STARTLUX_INSTANT.search(n) for n in names)
    if attention_mode is not None:
        if attention_mode not in ATTENTION_MODES:
            raise CheckpointError(f"attention_mode must be one of {ATTENTION_MODES}, got {attention_mode!r}")
        mode, source = attention_mode, "override"
    elif startlux:
        mode, source = "bidirectional", "profile"
    else:
        mode, source = "causal", "default"
    precision = "fp32" if keep_fp32 and fp32_in_file else "bf16-rounded"
    log.info("model %s%s: attention %s (%s: %s), A_log/linear_attn.norm %s", name,
             f"@{revision}" if revision else "", mode, source,
             {"profile": "StartLux v1.1 Instant profile", "override": "explicit override",
              "default": "generic Qwen3.5"}[source], precision)
    if name == PINNED_NAME and revision not in (None, PINNED_REVISION):
        log.warning("revision %s differs from the pinned %s", revision, PINNED_REVISION)
    return ModelProfile(name, revision, mode, source, precision, startlux)


# ---------------------------------------------------------------------------------------------------------------
# checkpoint

@dataclass
class Checkpoint:
    folder: Path
    config: ModelConfig
    profile: ModelProfile
    decision_config: DecisionConfig
    tokenizer_path: Path | None
    prefix: str
    files: list[Path]
    tensors: dict[str, TensorEntry]  # text tensors, names without prefix ("lm_head.weight" when untied)
    _maps: dict[Path, np.memmap] = field(default_factory=dict, repr=False)

    @property
    def head_name(self) -> str:
        return LM_HEAD if LM_HEAD in self.tensors else "embed_tokens.weight"

    def names(self) -> list[str]:
        return list(self.tensors)

    def raw(self, name: str) -> np.ndarray:
        """The tensor as stored, memory-mapped read-only: bf16 as uint16 bits, fp32 as float32 (no copy)."""
        try:
            e = self.tensors[name]
        except KeyError:
            raise KeyError(f"no text tensor {name!r} in {self.folder}") from None
        mm = self._maps.get(e.file)
        if mm is None:
            mm = self._maps[e.file] = np.memmap(e.file, dtype=np.uint8, mode="r")
        return mm[e.begin:e.end].view(_NP_DTYPES[e.dtype]).reshape(e.shape)

    def f32(self, name: str) -> np.ndarray:
        """Values as the model uses them, float32: bf16 widened exactly; A_log and linear_attn.norm.weight rounded
        to bf16 unless the profile keeps them fp32 (transformers' bf16 load rounds them, spec §8.2)."""
        e = self.tensors.get(name)
        a = self.raw(name)
        if e is not None and e.dtype == "BF16":
            return bf16.from_bits(a)
        out = np.array(a, dtype=np.float32)
        if name.endswith(FP32_SUFFIXES) and self.profile.gdn_param_precision == "bf16-rounded":
            out = bf16.round_(out)
        return out

    def embedding_rows(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), hidden]: rows of embed_tokens (a gather, never the whole table in fp32)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.config.vocab_size):
            raise ValueError(f"token id out of range 0..{self.config.vocab_size - 1}")
        return bf16.from_bits(self.raw("embed_tokens.weight")[ids])

    def letter_rows(self) -> np.ndarray:
        """float32 [26, hidden]: the head rows of the decision letters (tied: embed_tokens)."""
        ids = np.asarray(self.decision_config.letter_token_ids, dtype=np.int64)
        return bf16.from_bits(self.raw(self.head_name)[ids])

    def describe(self) -> dict:
        n_bytes = sum(e.end - e.begin for e in self.tensors.values())
        return {
            "folder": str(self.folder),
            "profile": self.profile.describe(),
            "config": self.config.describe(),
            "prefix": self.prefix,
            "files": [p.name for p in self.files],
            "text_tensors": len(self.tensors),
            "text_bytes": n_bytes,
            "head": "tied (embed_tokens)" if self.head_name == "embed_tokens.weight" else "lm_head",
            "tokenizer_path": str(self.tokenizer_path) if self.tokenizer_path else None,
            "decision_config": self.decision_config.describe(),
        }

    def close(self) -> None:
        self._maps.clear()


def _check_tensors(config: ModelConfig, found: dict[str, TensorEntry], where: str) -> None:
    expected = config.expected_tensors(lm_head=LM_HEAD in found)
    missing = [n for n in expected if n not in found]
    unexpected = [n for n in found if n not in expected]
    if missing:
        more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
        raise CheckpointError(f"{where}: missing text tensor(s) {', '.join(missing[:5])}{more}")
    if unexpected:
        more = f" (+{len(unexpected) - 5} more)" if len(unexpected) > 5 else ""
        raise CheckpointError(f"{where}: unexpected text tensor(s) {', '.join(unexpected[:5])}{more}")
    for name, (shape, dtype) in expected.items():
        e = found[name]
        if e.shape != shape:
            raise CheckpointError(f"{where}: tensor {name} has shape {list(e.shape)}, config needs {list(shape)}")
        # bf16 A_log / gated-norm weight (a checkpoint re-saved from a bf16 load) is accepted: same values as the
        # default rounding
        ok = (e.dtype == dtype) or (dtype == "F32" and e.dtype == "BF16")
        if not ok:
            raise CheckpointError(f"{where}: tensor {name} has dtype {e.dtype}, expected {dtype}")


def load_checkpoint(folder: str | Path, *, attention_mode: str | None = None, keep_fp32_gdn_params: bool = False,
                    require_tokenizer: bool = True) -> Checkpoint:
    """Open a checkpoint folder (config.json, model.safetensors[.index.json], tokenizer.json, decision_config.json).

    attention_mode: None = from the profile (StartLux v1.1 Instant -> "bidirectional", generic Qwen3.5 ->
    "causal"), or "bidirectional"/"causal" to override. keep_fp32_gdn_params keeps A_log and linear_attn.norm.weight
    fp32 instead of rounding them to bf16. Raises CheckpointError naming the file/tensor and the reason.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: not a folder")
    cfg_path = folder / "config.json"
    try:
        raw_config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{cfg_path}: cannot read: {exc}") from exc
    config = ModelConfig.from_json(raw_config, where=str(cfg_path))

    files = _tensor_files(folder)
    all_entries: dict[str, TensorEntry] = {}
    for f in files:
        for name, e in read_safetensors_header(f).items():
            if name in all_entries:
                raise CheckpointError(f"{f}: tensor {name} also appears in {all_entries[name].file.name}")
            all_entries[name] = e

    prefix = next((p for p in PREFIXES if p + "embed_tokens.weight" in all_entries), None)
    if prefix is None:
        raise CheckpointError(f"{folder}: no embed_tokens.weight under any of the prefixes "
                              f"{', '.join(repr(p) for p in PREFIXES)}")
    text: dict[str, TensorEntry] = {}
    for name, e in all_entries.items():
        if name.startswith(IGNORED_PREFIXES):
            continue
        if name == LM_HEAD:
            text[LM_HEAD] = e
        elif name.startswith(prefix):
            text[name[len(prefix):]] = e
        else:
            raise CheckpointError(f"{folder}: unexpected tensor {name} (text tensors are under {prefix!r})")
    _check_tensors(config, text, str(folder))
    if LM_HEAD in text and config.tie_word_embeddings:
        log.warning("%s: config ties the embeddings but the file has lm_head.weight: using embed_tokens, as "
                    "transformers does", folder)
        del text[LM_HEAD]
    elif LM_HEAD not in text and not config.tie_word_embeddings:
        log.warning("%s: config says untied but there is no lm_head.weight: using the tied embedding", folder)

    fp32_in_file = all(text[n].dtype == "F32" for n in text if n.endswith(FP32_SUFFIXES))
    profile = _make_profile(folder, raw_config, attention_mode, keep_fp32_gdn_params, fp32_in_file)
    if keep_fp32_gdn_params and not fp32_in_file:
        log.warning("%s: A_log / linear_attn.norm.weight are stored bf16: keep_fp32_gdn_params has no effect", folder)
    decision = load_decision_config(folder)
    bad = [i for i in decision.letter_token_ids if not 0 <= i < config.vocab_size]
    if bad:
        raise CheckpointError(f"{folder}: letter_token_ids {bad} outside the vocabulary (0..{config.vocab_size - 1})")

    tok = folder / "tokenizer.json"
    if not tok.exists():
        if require_tokenizer:
            raise CheckpointError(f"{folder}: no tokenizer.json")
        tok = None
    ckpt = Checkpoint(folder, config, profile, decision, tok, prefix, files, text)
    log.info("loaded %s: %d text tensors, prefix %r, %d file(s)", folder, len(text), prefix, len(files))
    return ckpt
