"""The GPU Backend: the Qwen3.5 forward pass through libqwen3_5_cuda.so (native/cs1.h), one forward per call.

All rows of a call run packed as variable-length rows (cu_seqlens + positions) of one forward. Per call the host
fills a pinned int32 buffer [ids | positions | cu_seqlens | last_rows] and queues one upload; every op only queues
work on the backend's stream; only the final wait for the 26 letter logits per row synchronises.

Padding and graphs: the packed batch is right-padded to a length on a fixed ladder (PAD_LADDER) with a real token id;
the kernels treat rows at or after cu_seqlens[n] as padding, so padding never reaches a real row. The whole forward
for one (padded length, row count) is captured once into a CUDA graph and replayed; eager and graph runs execute the
same kernels with the same arguments, so they are bit-identical (checked at start-up by self_check(), which drops
the graphs if they ever differ). A call larger than max_tokens / max_rows runs as several forwards.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import abi, gemm_pins
from .backend import N_LETTERS
from .errors import BackendError
from .tokenizer import PAD_TOKEN_ID

GEMM_WORKSPACE = 32 << 20
ALIGN = 256  # byte alignment of every scratch sub-buffer
BF16 = 2
F32 = 4
I32 = 4


# Padded lengths: fine steps where most prompts are (padding rows cost GEMM and kernel time), coarser above (steps
# of <= 25 %); above the ladder, multiples of 1024. The GEMM plans (pin tables, benchmarks/gemm_pins.py) are chosen
# at COARSE_LADDER's lengths.
COARSE_LADDER = (tuple(range(16, 513, 16)) + tuple(range(576, 1025, 64)) + tuple(range(1152, 2049, 128))
                 + tuple(range(2304, 4097, 256)) + tuple(range(4608, 8193, 512)))
# fine_ladder="auto" (LEVERS 105): 64-row steps up to 4,096 rows as well, where Public231's p95 prompts are (2.5-3.9k
# tokens, ~5 % padding on COARSE_LADDER). A length that COARSE_LADDER lacks runs every GEMM with the plan of the
# COARSE_LADDER length above it (CudaBackend._inherit_plans): the kernels of that length, on fewer rows.
FINE_LADDER = tuple(sorted(set(COARSE_LADDER) | set(range(1088, 4097, 64))))
PAD_LADDER = FINE_LADDER  # the default ladder
MAX_GRAPHS = 160  # the fine ladder's 96 single-prompt graphs of start-up, and 64 more for packed questions
# The down projection (N = hidden, K = intermediate) as a K split into batches with fp32 partials, summed by the
# add_rms_norm that follows it (LEVERS 50, 51): at prompt-sized M cuBLASLt's one GEMM adds its own split-K in a
# second pass. Up to DOWN_SPLIT_MAX_ROWS padded rows; above them the GEMM is compute-bound and the partials' bytes
# would cost. The last layer's down keeps the plain GEMM (the read-out adds its delta).
DOWN_SPLITS = 3
DOWN_SPLIT_MAX_ROWS = 256
# From this many padded rows the last attention layer's q / gate projection and prep run at the read-out rows alone
# (keys and values still at every row): below it the extra GEMM launch and gather cost more than the rows saved.
TAIL_QUERY_MIN_ROWS = 512
ROWS_ATTENTION_GROUPS = (1, 2, 4)  # query heads per kv head that cs1_attention_gated_rows implements
PAD_TOKEN = PAD_TOKEN_ID  # falls back to 0 for tiny vocabularies


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def ladder_lengths(cap: int, ladder: Sequence[int] = PAD_LADDER) -> list[int]:
    """Every padded length a forward of at most cap rows can have, in order (the GEMM row counts that occur)."""
    out = [m for m in ladder if m < cap] + list(range(_round_up(ladder[-1] + 1, 1024), cap, 1024))
    return out + [cap] if cap >= 1 else out


def padded_length(T: int, cap: int, ladder: Sequence[int] = PAD_LADDER) -> int:
    """The ladder length for T real tokens, never above cap."""
    for step in ladder:
        if step >= T:
            return min(step, cap)
    return min(_round_up(T, 1024), cap)


@dataclass
class _Arena:
    """Byte offsets of named sub-buffers inside one device allocation."""

    offsets: dict[str, int] = field(default_factory=dict)
    size: int = 0

    def add(self, name: str, nbytes: int) -> None:
        self.offsets[name] = self.size
        self.size += _round_up(max(int(nbytes), 1), ALIGN)


@dataclass
class _GdnLayer:
    w_in: object  # [in_proj_qkv | in_proj_z | in_proj_b | in_proj_a] (+ zero rows up to a multiple of 8)
    conv_w: object  # bf16 [conv_dim, 4]
    a_log: object  # fp32 [Hv]
    dt_bias: object  # fp32 [Hv]
    norm_w: object  # fp32 [128]
    w_out: object  # bf16 [hidden, Hv * 128]


@dataclass
class _AttentionLayer:
    w_qkv: object  # [q_proj | k_proj | v_proj]
    q_norm: object
    k_norm: object
    w_o: object


@dataclass
class _Layer:
    kind: str
    input_norm: object
    post_norm: object
    w_gate_up: object  # [gate_proj | up_proj]
    w_down: object
    mixer: _GdnLayer | _AttentionLayer


class CudaBackend:
    """Backend on one CUDA device. `checkpoint` follows startlux_native.checkpoint.Checkpoint (config, profile,
    raw, f32, letter_rows). `library` is an abi.Library, a path, or None ($CS1_LIBRARY / target/). `gemm_pins` is
    "auto" (the shipped GEMM pin table measured on this kind of GPU, if any), "off", or a table's path
    (startlux_native.gemm_pins). `down_split` is "auto" (the down projection as DOWN_SPLITS batches of K up to
    DOWN_SPLIT_MAX_ROWS padded rows, when the intermediate size allows it) or "off". `gate_in_prep` is "auto" (the
    attention's output gate goes through its sigmoid in attn_prep, cs1_attn_prep_sigmoid_gate, and the attention
    multiplies by it, cs1_attention_sigmoid_gated) or "off" (the attention's epilogue applies the sigmoid); both
    give the same bytes. `tail_rows` is "auto" (the last layer's row-wise tail, from its output projection through
    the MLP, runs on each prompt's last row alone: the only rows the read-out uses) or "off" (on every row).
    `tail_attention` is "auto" (with the tail on the read-out rows and an attention layer last, that layer's
    attention runs for the read-out rows alone, cs1_attention_gated_rows, instead of every query row) or "off".
    `tail_query` is "auto" (with that, from TAIL_QUERY_MIN_ROWS padded rows, the last attention's q / gate
    projection and prep run at the read-out rows alone; keys and values at every row) or "off". `gdn_norm` is
    "auto" (each GDN layer's prefill and gated RMSNorm as one call, cs1_gdn_prefill_norm: above 640 rows the prefill's
    out kernel normalises its own tile, so O is never written nor read back) or "off" (cs1_gdn_prefill, then
    cs1_gated_rms_norm); both give the same bytes on every prompt row. `fine_ladder` is "auto" (prompts pad to
    FINE_LADDER, each of its lengths that COARSE_LADDER lacks running the GEMM plans of the COARSE_LADDER length above
    it) or "off" (COARSE_LADDER)."""

    name = "cuda"

    def __init__(self, checkpoint, *, library=None, device: int = 0, max_tokens: int = 32768,
                 max_rows: int = 256, graphs: bool = True, gemm_pins: str = "auto", down_split: str = "auto",
                 gate_in_prep: str = "auto", tail_rows: str = "auto", tail_attention: str = "auto",
                 tail_query: str = "auto", gdn_norm: str = "auto", fine_ladder: str = "auto"):
        self.checkpoint = checkpoint
        self.config = cfg = checkpoint.config
        self.profile = checkpoint.profile
        self.lib = library if isinstance(library, abi.Library) else abi.load(str(abi.library_path(library)))
        self.ffi = self.lib.ffi
        self.device = int(device)
        self.max_tokens = int(max_tokens)
        self.max_rows = min(int(max_rows), self.max_tokens)
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self._check_config(cfg)
        self.attention_mode = self.profile.attention_mode
        if self.attention_mode not in ("causal", "bidirectional"):
            raise BackendError(f"unknown attention mode {self.attention_mode!r}")
        self.round_weighted = 1 if self.profile.gdn_param_precision == "bf16-rounded" else 0
        self.pad_token = PAD_TOKEN if PAD_TOKEN < cfg.vocab_size else 0
        if down_split not in ("auto", "off"):
            raise ValueError(f"down_split must be 'auto' or 'off', not {down_split!r}")
        self.down_splits = self.split_count(cfg.intermediate_size) if down_split == "auto" else 0
        self.down_split_state = (f"{self.down_splits} batches of K up to {DOWN_SPLIT_MAX_ROWS} rows"
                                 if self.down_splits else
                                 "off (option)" if down_split == "off" else "off (intermediate size does not split)")
        if gate_in_prep not in ("auto", "off"):
            raise ValueError(f"gate_in_prep must be 'auto' or 'off', not {gate_in_prep!r}")
        self.gate_in_prep = gate_in_prep == "auto"
        self.gate_in_prep_state = "in attn_prep" if self.gate_in_prep else "in the attention epilogue (option)"
        if tail_rows not in ("auto", "off"):
            raise ValueError(f"tail_rows must be 'auto' or 'off', not {tail_rows!r}")
        self.tail_rows = tail_rows == "auto"
        self.tail_rows_state = ("the last layer's tail on the read-out rows" if self.tail_rows
                                else "the last layer's tail on every row (option)")
        if tail_attention not in ("auto", "off"):
            raise ValueError(f"tail_attention must be 'auto' or 'off', not {tail_attention!r}")
        last_is_attention = bool(cfg.layer_types) and cfg.layer_types[-1] != "linear_attention"
        group = cfg.num_attention_heads // cfg.num_key_value_heads
        self.tail_attention = (tail_attention == "auto" and self.tail_rows and last_is_attention
                               and group in ROWS_ATTENTION_GROUPS)
        self.tail_attention_state = (
            "the last attention at the read-out rows" if self.tail_attention else
            "off (option)" if tail_attention == "off" else
            "off (the tail runs on every row)" if not self.tail_rows else
            "off (the last layer is not attention)" if not last_is_attention else
            f"off (query heads per kv head {group}: the rows' kernel takes 1, 2 or 4)")
        if tail_query not in ("auto", "off"):
            raise ValueError(f"tail_query must be 'auto' or 'off', not {tail_query!r}")
        self.tail_query = tail_query == "auto" and self.tail_attention
        self.tail_query_state = (f"the last q / gate projection at the read-out rows from {TAIL_QUERY_MIN_ROWS} rows"
                                 if self.tail_query else "off (option)" if tail_query == "off" else
                                 "off (the last attention runs on every row)")
        if gdn_norm not in ("auto", "off"):
            raise ValueError(f"gdn_norm must be 'auto' or 'off', not {gdn_norm!r}")
        self.gdn_norm = gdn_norm == "auto"
        self.gdn_norm_state = ("the gated RMSNorm inside the GDN prefill's out kernel above 640 rows" if self.gdn_norm
                               else "off (option)")
        if fine_ladder not in ("auto", "off"):
            raise ValueError(f"fine_ladder must be 'auto' or 'off', not {fine_ladder!r}")
        self.fine_ladder = fine_ladder == "auto"
        self.ladder = FINE_LADDER if self.fine_ladder else COARSE_LADDER
        self.inherited_plans = 0  # GEMM plans that fine-ladder lengths take from COARSE_LADDER (_inherit_plans)
        self.graphs_enabled = bool(graphs)
        self.graph_state = "enabled" if graphs else "disabled by option"
        self._graphs: dict[tuple[int, int, str], object] = {}  # (padded T, rows, attention mode) -> graph exec
        self.graph_replays = 0
        self._lock = threading.Lock()
        self._allocations: list = []
        self._host_allocations: list = []
        self.stream = self.gemm = None
        self.weight_bytes = 0
        self.gemm_pins_state = "not applied"
        self._pin_table = None
        try:
            self._call("cs1_set_device", self.device)
            s = self.ffi.new("void **")
            self._call("cs1_stream_create", s)
            self.stream = s[0]
            g = self.ffi.new("void **")
            self._call("cs1_gemm_create", GEMM_WORKSPACE, g)
            self.gemm = g[0]
            self._pin_gemms(gemm_pins)
            self._load_weights()
            self._inherit_plans()
            self._allocate_scratch()
        except BaseException:
            self.close()
            raise

    # ---- set-up ------------------------------------------------------------------------------------------------

    def _pin_gemms(self, spec: str) -> None:
        """Before any plan exists: the pin table's algorithms replace cuBLASLt's first choice per (N, K, M)."""
        try:
            table, self.gemm_pins_state = gemm_pins.resolve(spec, gemm_pins.device_key(self.lib, self.device))
        except gemm_pins.PinTableError as exc:
            raise BackendError(str(exc)) from exc
        except abi.Cs1Error as exc:
            raise BackendError(f"CUDA backend: {exc}", sticky=exc.sticky) from exc
        if table is not None:
            gemm_pins.apply(self.lib, self.gemm, table)
        self._pin_table = table

    def _row_gemm_shapes(self) -> set[tuple[int, int]]:
        """(N, K) of every GEMM that _enqueue runs at the padded row count (not the tail's, at the read-out rows)."""
        h, kinds = self.config.hidden_size, set(self.config.layer_types)
        shapes = {(self.n_mlp, h), (h, self.config.intermediate_size)}
        if "linear_attention" in kinds:
            shapes |= {(self.n_gdn, h), (h, self.value_dim)}
        if kinds - {"linear_attention"}:
            width = self.hq * self.dh
            shapes |= {(self.n_attn, h), (h, width)}
            if self.tail_query:  # the last attention's k | v columns alone (from TAIL_QUERY_MIN_ROWS rows)
                shapes.add((self.n_attn - 2 * width, h))
        return shapes

    @property
    def fine_ladder_state(self) -> str:
        if not self.fine_ladder:
            return "off (option): the coarse ladder"
        return (f"64-row steps up to 4,096 rows; {self.inherited_plans} GEMM plans taken from the coarse ladder's "
                f"next length")

    def _inherit_plans(self) -> None:
        """With the fine ladder, each padded length that COARSE_LADDER lacks runs every GEMM with the plan of the
        COARSE_LADDER length above it: that length's pin where the table has one, else cuBLASLt's first choice asked
        at that length (cs1_gemm_pin). So a prompt runs the GEMM algorithms it ran on COARSE_LADDER, on fewer rows,
        and a pin table needs no lengths beyond COARSE_LADDER's. A pin the table holds for the length itself wins."""
        if not self.fine_ladder:
            return
        table = {(p.N, p.K, p.M): p for p in self._pin_table.pins} if self._pin_table is not None else {}
        coarse = set(ladder_lengths(self.max_tokens, COARSE_LADDER))
        shapes = sorted(self._row_gemm_shapes())
        for M in ladder_lengths(self.max_tokens, self.ladder):
            if M in coarse:
                continue
            L = padded_length(M, self.max_tokens, COARSE_LADDER)
            for N, K in shapes:
                if (N, K, M) in table:
                    continue
                pin = table.get((N, K, L))
                query_rows, rank = (pin.query_rows, pin.rank) if pin is not None else (L, 0)
                self._call("cs1_gemm_pin", self.gemm, M, N, K, query_rows, rank)
                self.inherited_plans += 1

    @staticmethod
    def split_count(inter: int) -> int:
        """DOWN_SPLITS batches when every slice of K is a whole number of 8 columns (16 bytes), else 2, else 0."""
        for splits in (DOWN_SPLITS, 2):
            if inter % (8 * splits) == 0:
                return splits
        return 0

    @staticmethod
    def _check_config(cfg) -> None:
        problems = []
        if cfg.head_dim != 256:
            problems.append(f"head_dim {cfg.head_dim} (the attention kernels need 256)")
        if cfg.linear_key_head_dim != 128 or cfg.linear_value_head_dim != 128:
            problems.append(f"linear head dims {cfg.linear_key_head_dim}/{cfg.linear_value_head_dim} (need 128)")
        if cfg.linear_conv_kernel_dim != 4:
            problems.append(f"conv kernel {cfg.linear_conv_kernel_dim} (need 4)")
        if cfg.hidden_size % 8 or cfg.intermediate_size % 8:
            problems.append("hidden_size and intermediate_size must be multiples of 8")
        if cfg.linear_num_value_heads % cfg.linear_num_key_heads or cfg.num_attention_heads % cfg.num_key_value_heads:
            problems.append("value/query heads must be multiples of key/kv heads")
        if problems:
            raise BackendError("the CUDA backend does not implement this model: " + "; ".join(problems))

    def _call(self, fn: str, *args) -> None:
        try:
            getattr(self.lib, fn)(*args)
        except abi.Cs1Error as exc:
            raise BackendError(f"CUDA backend: {exc}", sticky=exc.sticky) from exc

    def _device_alloc(self, nbytes: int):
        p = self.ffi.new("void **")
        self._call("cs1_malloc", p, max(int(nbytes), 1))
        self._allocations.append(p[0])
        return p[0]

    def _upload(self, array: np.ndarray):
        a = np.ascontiguousarray(array)
        ptr = self._device_alloc(a.nbytes)
        self._call("cs1_upload", ptr, self.ffi.from_buffer(a), a.nbytes, self.stream)
        self.weight_bytes += a.nbytes
        return ptr

    def _bf16(self, name: str) -> np.ndarray:
        a = self.checkpoint.raw(name)
        if a.dtype != np.uint16:
            raise BackendError(f"tensor {name} is {a.dtype}, expected bf16")
        return a

    def _load_weights(self) -> None:
        cfg, ck = self.config, self.checkpoint
        h = cfg.hidden_size
        self.hv, self.hk_lin = cfg.linear_num_value_heads, cfg.linear_num_key_heads
        self.hq, self.hkv, self.dh = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.dk = cfg.linear_key_head_dim
        self.conv_dim = cfg.conv_dim
        self.value_dim = cfg.linear_value_dim
        self.n_gdn = _round_up(self.conv_dim + self.value_dim + 2 * self.hv, 8)
        self.n_attn = (2 * self.hq + 2 * self.hkv) * self.dh
        self.n_mlp = 2 * cfg.intermediate_size

        self.embed = self._upload(self._bf16("embed_tokens.weight"))
        self.final_norm = self._upload(self._bf16("norm.weight"))
        self.letters = self._upload(np.ascontiguousarray(ck.letter_rows(), dtype=np.float32))
        if ck.letter_rows().shape != (N_LETTERS, h):
            raise BackendError(f"letter rows have shape {ck.letter_rows().shape}, expected ({N_LETTERS}, {h})")
        half = cfg.rotary_dim // 2
        # transformers: 1 / theta ** (arange(0, rotary_dim, 2) / rotary_dim), in fp32
        exponent = np.arange(0, cfg.rotary_dim, 2, dtype=np.float32) / np.float32(cfg.rotary_dim)
        inv_freq = (np.float32(1.0) / np.power(np.float32(cfg.rope_theta), exponent)).astype(np.float32)
        self.inv_freq = self._upload(inv_freq[:half])

        self.layers: list[_Layer] = []
        for i, kind in enumerate(cfg.layer_types):
            p = f"layers.{i}."
            if kind == "linear_attention":
                la = p + "linear_attn."
                w_in = np.concatenate([self._bf16(la + n) for n in
                                       ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight",
                                        "in_proj_a.weight")], axis=0)
                if w_in.shape[0] < self.n_gdn:
                    w_in = np.concatenate([w_in, np.zeros((self.n_gdn - w_in.shape[0], h), np.uint16)], axis=0)
                mixer = _GdnLayer(
                    w_in=self._upload(w_in),
                    conv_w=self._upload(self._bf16(la + "conv1d.weight").reshape(self.conv_dim, -1)),
                    a_log=self._upload(ck.f32(la + "A_log").astype(np.float32)),
                    dt_bias=self._upload(ck.f32(la + "dt_bias").astype(np.float32)),
                    norm_w=self._upload(ck.f32(la + "norm.weight").astype(np.float32)),
                    w_out=self._upload(self._bf16(la + "out_proj.weight")))
                del w_in
            else:
                sa = p + "self_attn."
                w_qkv = np.concatenate([self._bf16(sa + n) for n in ("q_proj.weight", "k_proj.weight",
                                                                     "v_proj.weight")], axis=0)
                mixer = _AttentionLayer(w_qkv=self._upload(w_qkv),
                                        q_norm=self._upload(self._bf16(sa + "q_norm.weight")),
                                        k_norm=self._upload(self._bf16(sa + "k_norm.weight")),
                                        w_o=self._upload(self._bf16(sa + "o_proj.weight")))
                del w_qkv
            gate_up = np.concatenate([self._bf16(p + "mlp.gate_proj.weight"), self._bf16(p + "mlp.up_proj.weight")],
                                     axis=0)
            self.layers.append(_Layer(kind, self._upload(self._bf16(p + "input_layernorm.weight")),
                                      self._upload(self._bf16(p + "post_attention_layernorm.weight")),
                                      self._upload(gate_up), self._upload(self._bf16(p + "mlp.down_proj.weight")),
                                      mixer))
            del gate_up

    def _allocate_scratch(self) -> None:
        cfg, cap, rows = self.config, self.max_tokens, self.max_rows
        h = cfg.hidden_size
        # ids | positions | cu_seqlens | last_rows | 0..n-1 | the last rows' positions
        self.io_ints = 2 * cap + 4 * rows + 1
        ws = self.ffi.new("size_t *")
        self._call("cs1_gdn_workspace_bytes", cap, rows, self.hv, ws)
        self.gdn_workspace_bytes = int(ws[0])
        a = _Arena()
        a.add("io", self.io_ints * I32)
        for name in ("res", "x", "delta"):
            a.add(name, cap * h * BF16)
        a.add("proj", cap * max(self.n_gdn, self.n_attn, self.n_mlp) * BF16)
        a.add("conv", cap * self.conv_dim * BF16)
        a.add("beta", cap * self.hv * F32)
        a.add("g", cap * self.hv * F32)
        a.add("gdn_o", cap * self.value_dim * BF16)
        a.add("ln", cap * self.value_dim * BF16)
        a.add("q", cap * self.hq * self.dh * BF16)
        a.add("gate", cap * self.hq * self.dh * BF16)
        a.add("k", cap * self.hkv * self.dh * BF16)
        a.add("ao", cap * self.hq * self.dh * BF16)
        a.add("act", cap * cfg.intermediate_size * BF16)
        a.add("logits", rows * N_LETTERS * F32)
        a.add("gdn_ws", self.gdn_workspace_bytes)
        if self.tail_rows:  # the read-out rows of the last layer's mixer output and of the residual
            a.add("tail_in", rows * max(self.value_dim, self.hq * self.dh) * BF16)
            a.add("tail_res", rows * h * BF16)
        if self.tail_attention:
            self._call("cs1_attention_rows_workspace_bytes", cap, rows, self.hq, self.dh, ws)
            self.attention_rows_workspace_bytes = int(ws[0])
            a.add("attn_rows_ws", self.attention_rows_workspace_bytes)
        if self.tail_query:  # the read-out rows of the last attention's input and their q | gate projection
            a.add("tail_x", rows * h * BF16)
            a.add("tail_qg", rows * 2 * self.hq * self.dh * BF16)
        if self.down_splits:
            a.add("partials", self.down_splits * min(cap, DOWN_SPLIT_MAX_ROWS) * h * F32)
        self.scratch_bytes = a.size
        base = self.ffi.cast("char *", self._device_alloc(a.size))
        self.buf = {name: base + off for name, off in a.offsets.items()}
        # pinned host buffers: the per-call int32 inputs and the logits that come back
        for attr, nbytes in (("host_io", self.io_ints * I32), ("host_logits", rows * N_LETTERS * F32)):
            p = self.ffi.new("void **")
            self._call("cs1_host_alloc", p, nbytes)
            self._host_allocations.append(p[0])
            setattr(self, attr, p[0])
        self.host_io_view = np.frombuffer(self.ffi.buffer(self.host_io, self.io_ints * I32), dtype=np.int32)
        self.host_logits_view = np.frombuffer(self.ffi.buffer(self.host_logits, rows * N_LETTERS * F32),
                                              dtype=np.float32)

    # ---- forward -----------------------------------------------------------------------------------------------

    def _groups(self, arrays: list[np.ndarray]) -> list[list[int]]:
        """Row indices per forward: consecutive rows while they fit max_tokens and max_rows."""
        groups, cur, used = [], [], 0
        for i, a in enumerate(arrays):
            if a.size > self.max_tokens:
                raise BackendError(f"a row of {a.size} tokens exceeds this backend's max_tokens={self.max_tokens}")
            if cur and (used + a.size > self.max_tokens or len(cur) == self.max_rows):
                groups.append(cur)
                cur, used = [], 0
            cur.append(i)
            used += a.size
        if cur:
            groups.append(cur)
        return groups

    def _prepare(self, arrays: Sequence[np.ndarray]) -> tuple[int, int]:
        """Fill the pinned input buffer for one forward, right-padded to the ladder; returns (padded T, n)."""
        n = len(arrays)
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=n)
        real = int(lengths.sum())
        T = padded_length(real, self.max_tokens, self.ladder)
        cu = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=cu[1:])
        v = self.host_io_view
        np.concatenate(arrays, out=v[:real], casting="unsafe")
        v[real:T] = self.pad_token
        v[T:T + real] = np.arange(real, dtype=np.int64) - np.repeat(cu[:-1], lengths)
        v[T + real:2 * T] = 0
        v[2 * T:2 * T + n + 1] = cu
        v[2 * T + n + 1:2 * T + 2 * n + 1] = cu[1:] - 1
        v[2 * T + 2 * n + 1:2 * T + 3 * n + 1] = np.arange(n)
        v[2 * T + 3 * n + 1:2 * T + 4 * n + 1] = lengths - 1
        return T, n

    def _enqueue(self, T: int, n: int) -> None:
        """Queue the whole forward for the prepared inputs (queue-only: capturable into a CUDA graph)."""
        cfg, L, ffi, s, g = self.config, self.lib, self.ffi, self.stream, self.gemm
        b, h, eps = self.buf, cfg.hidden_size, float(cfg.rms_norm_eps)
        io = b["io"]
        ids = ffi.cast("int32_t *", io)
        positions = ffi.cast("int32_t *", io + 4 * T)
        cu = ffi.cast("int32_t *", io + 8 * T)
        last = ffi.cast("int32_t *", io + 8 * T + 4 * (n + 1))
        iota = ffi.cast("int32_t *", io + 8 * T + 4 * (2 * n + 1))
        last_pos = ffi.cast("int32_t *", io + 8 * T + 4 * (3 * n + 1))
        L.cs1_upload_async(io, self.host_io, (2 * T + 4 * n + 1) * I32, s)
        L.cs1_embed(ids, self.embed, b["res"], T, h, cfg.vocab_size, s)
        L.cs1_rms_norm(b["res"], self.layers[0].input_norm, b["x"], T, h, eps, s)
        attention = (L.cs1_attention_gated_bidirectional if self.attention_mode == "bidirectional"
                     else L.cs1_attention_gated)
        beta, gg = ffi.cast("float *", b["beta"]), ffi.cast("float *", b["g"])
        split = self.down_splits if T <= DOWN_SPLIT_MAX_ROWS else 0
        partials = ffi.cast("float *", b["partials"]) if split else None
        for i, layer in enumerate(self.layers):
            # the last layer's row-wise tail (output projection to MLP) on the n read-out rows alone
            tail = self.tail_rows and i + 1 == len(self.layers)
            rows, res = (n, b["tail_res"]) if tail else (T, b["res"])
            m = layer.mixer
            if isinstance(m, _GdnLayer):
                proj, ld = b["proj"], self.n_gdn
                L.cs1_gemm(g, b["x"], h, m.w_in, proj, ld, T, self.n_gdn, h, s)
                L.cs1_gdn_conv_gates(proj, ld, m.conv_w, positions, b["conv"], T, self.conv_dim,
                                     proj + BF16 * (self.conv_dim + self.value_dim), ffi.cast("float *", m.a_log),
                                     ffi.cast("float *", m.dt_bias), beta, gg, self.hv, s)
                z, norm_w = proj + BF16 * self.conv_dim, ffi.cast("float *", m.norm_w)
                if self.gdn_norm:
                    L.cs1_gdn_prefill_norm(b["conv"], self.conv_dim, gg, beta, cu, n, z, ld, norm_w,
                                           self.round_weighted, eps, b["gdn_o"], b["ln"], b["gdn_ws"],
                                           self.gdn_workspace_bytes, T, self.hv, self.hk_lin, self.dk ** -0.5, s)
                else:
                    L.cs1_gdn_prefill(b["conv"], self.conv_dim, gg, beta, cu, n, b["gdn_o"], b["gdn_ws"],
                                      self.gdn_workspace_bytes, T, self.hv, self.hk_lin, self.dk ** -0.5, s)
                    L.cs1_gated_rms_norm(b["gdn_o"], z, ld, norm_w, self.round_weighted, b["ln"], T, self.hv,
                                         self.dk, eps, s)
                mixed, width, w_out = b["ln"], self.value_dim, m.w_out
            else:
                proj, ld = b["proj"], self.n_attn
                width = self.hq * self.dh
                prep = L.cs1_attn_prep_sigmoid_gate if self.gate_in_prep else L.cs1_attn_prep
                inv_freq = ffi.cast("float *", self.inv_freq)
                q_rows = last
                if tail and self.tail_query and T >= TAIL_QUERY_MIN_ROWS:
                    # keys and values at every row; queries and gates at the read-out rows (rows 0..n-1 of q, gate)
                    qg = 2 * width  # the q | gate columns come first in the projection row and its weights
                    w_kv = ffi.cast("char *", m.w_qkv) + BF16 * qg * h
                    L.cs1_gemm(g, b["x"], h, w_kv, proj + BF16 * qg, ld, T, ld - qg, h, s)
                    prep(proj + BF16 * qg, ld, m.q_norm, m.k_norm, positions, inv_freq, b["q"], b["gate"], b["k"],
                         T, 0, self.hkv, self.dh, cfg.rotary_dim, eps, s)
                    L.cs1_gather_rows(b["x"], h, T, last, n, b["tail_x"], h, h, s)
                    L.cs1_gemm(g, b["tail_x"], h, m.w_qkv, b["tail_qg"], qg, n, qg, h, s)
                    prep(b["tail_qg"], qg, m.q_norm, m.k_norm, last_pos, inv_freq, b["q"], b["gate"], b["k"], n,
                         self.hq, 0, self.dh, cfg.rotary_dim, eps, s)
                    q_rows = iota
                else:
                    L.cs1_gemm(g, b["x"], h, m.w_qkv, proj, ld, T, self.n_attn, h, s)
                    prep(proj, ld, m.q_norm, m.k_norm, positions, inv_freq, b["q"], b["gate"], b["k"], T, self.hq,
                         self.hkv, self.dh, cfg.rotary_dim, eps, s)
                v = proj + BF16 * (2 * width + self.hkv * self.dh)
                scale = 1.0 / math.sqrt(self.dh)
                causal = int(self.attention_mode != "bidirectional")
                if tail and self.tail_attention:
                    # the read-out rows' attention alone, written straight into the tail's input rows
                    L.cs1_attention_gated_rows(b["q"], b["gate"], q_rows, int(self.gate_in_prep), b["k"], v, ld, cu,
                                               last, n, b["tail_in"], b["attn_rows_ws"],
                                               self.attention_rows_workspace_bytes, T, self.hq, self.hkv, self.dh,
                                               scale, causal, s)
                elif self.gate_in_prep:
                    L.cs1_attention_sigmoid_gated(b["q"], b["k"], v, ld, b["gate"], cu, n, b["ao"], T, self.hq,
                                                  self.hkv, self.dh, scale, causal, 0, s)
                else:
                    attention(b["q"], b["k"], v, ld, b["gate"], cu, n, b["ao"], T, self.hq, self.hkv, self.dh, scale,
                              s)
                mixed, w_out = b["ao"], m.w_o
            if tail:
                if not (self.tail_attention and isinstance(m, _AttentionLayer)):
                    L.cs1_gather_rows(mixed, width, T, last, n, b["tail_in"], width, width, s)
                L.cs1_gather_rows(b["res"], h, T, last, n, res, h, h, s)
                mixed = b["tail_in"]
            L.cs1_gemm(g, mixed, width, w_out, b["delta"], h, rows, h, width, s)
            L.cs1_add_rms_norm(res, b["delta"], layer.post_norm, b["x"], rows, h, eps, s)
            inter = cfg.intermediate_size
            L.cs1_gemm(g, b["x"], h, layer.w_gate_up, b["proj"], self.n_mlp, rows, self.n_mlp, h, s)
            L.cs1_silu_mul(b["proj"], self.n_mlp, b["act"], rows, inter, s)
            if split and i + 1 < len(self.layers):
                L.cs1_gemm_split_f32(g, b["act"], inter, layer.w_down, partials, T, h, inter, split, s)
                L.cs1_add_partials_rms_norm(b["res"], partials, split, T * h, self.layers[i + 1].input_norm, b["x"],
                                            T, h, eps, s)
            else:
                L.cs1_gemm(g, b["act"], inter, layer.w_down, b["delta"], h, rows, h, inter, s)
                if i + 1 < len(self.layers):
                    L.cs1_add_rms_norm(b["res"], b["delta"], self.layers[i + 1].input_norm, b["x"], T, h, eps, s)
        # the last residual add and the final norm happen inside the read-out, at the last rows only
        logits = ffi.cast("float *", b["logits"])
        final_res, final_rows = (b["tail_res"], iota) if self.tail_rows else (b["res"], last)
        L.cs1_letter_readout(final_res, b["delta"], final_rows, n, self.final_norm, ffi.cast("float *", self.letters),
                             N_LETTERS, logits, h, eps, s)
        L.cs1_download_async(self.host_logits, b["logits"], n * N_LETTERS * F32, s)

    def bind_thread(self) -> None:
        """Make this backend's device current on the calling thread (the CUDA runtime's current device is per
        thread); a thread other than the one that built the backend calls it once before letter_logits."""
        self._call("cs1_set_device", self.device)

    def letter_logits(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        if len(rows) == 0:
            return np.zeros((0, N_LETTERS), dtype=np.float32)
        arrays = [np.asarray(r) for r in rows]
        vocab = self.config.vocab_size
        for a in arrays:
            if a.ndim != 1 or a.size == 0:
                raise BackendError("every row must be a non-empty 1-D array of token ids")
            if a.min() < 0 or a.max() >= vocab:
                raise BackendError(f"token id outside 0..{vocab - 1}")
        out = np.empty((len(arrays), N_LETTERS), dtype=np.float32)
        with self._lock:
            for group in self._groups(arrays):
                out[group] = self._forward([arrays[i] for i in group], use_graph=self.graphs_enabled)
        if not np.isfinite(out).all():
            bad = sorted({int(r) for r in np.nonzero(~np.isfinite(out))[0]})
            raise BackendError(f"non-finite letter logits in row(s) {bad}")
        return out

    def _forward(self, arrays: Sequence[np.ndarray], *, use_graph: bool, capture: bool = True) -> np.ndarray:
        """One padded forward of `arrays` (caller holds the lock): graph replay when one is captured for this
        (padded length, rows, mode); otherwise eager, then capture for the next call."""
        T, n = self._prepare(arrays)
        key = (T, n, self.attention_mode)
        try:
            graph = self._graphs.pop(key, None) if use_graph else None
            if graph is not None:
                self._graphs[key] = graph  # most recently used last: eviction takes the least recently used
                self._call("cs1_graph_launch", graph, self.stream)
                self.graph_replays += 1
            else:
                self._enqueue(T, n)
            self.lib.cs1_stream_sync(self.stream)
            out = self.host_logits_view[:n * N_LETTERS].reshape(n, N_LETTERS).copy()
            if use_graph and graph is None and capture:
                self._capture(key, T, n)
        except abi.Cs1Error as exc:
            if not exc.sticky:
                self.lib.raw.cs1_stream_sync(self.stream)  # let queued work drain before the buffers are reused
            raise BackendError(f"CUDA forward failed: {exc}", sticky=exc.sticky) from exc
        return out

    def _capture(self, key, T: int, n: int) -> None:
        """Capture the forward for (T, n) into a graph (after an eager run at the same key, so every lazy set-up,
        GEMM plans and shared-memory attributes, already happened). A failed capture disables graphs."""
        if len(self._graphs) >= MAX_GRAPHS:
            oldest = next(iter(self._graphs))
            self.lib.raw.cs1_graph_destroy(self._graphs.pop(oldest))
        exec_ = self.ffi.new("void **")
        try:
            self.lib.cs1_graph_begin(self.stream)
            try:
                self._enqueue(T, n)
            finally:
                self.lib.cs1_graph_end(self.stream, exec_)
        except abi.Cs1Error as exc:
            if exec_[0] != self.ffi.NULL:  # the capture ended but an op failed inside it: never launch that graph
                self.lib.raw.cs1_graph_destroy(exec_[0])
            if exc.sticky:
                raise
            self._drop_graphs(f"capture failed: {exc}")
            return
        self._graphs[key] = exec_[0]

    def _drop_graphs(self, reason: str) -> None:
        for g in self._graphs.values():
            self.lib.raw.cs1_graph_destroy(g)
        self._graphs.clear()
        self.graphs_enabled = False
        self.graph_state = f"disabled: {reason}"

    def capture_graphs(self, lengths: Sequence[int] | None = None, rows: int = 1) -> int:
        """Pre-capture graphs for single prompts of the given lengths (default: the ladder's; start-up warm-up);
        returns how many exist."""
        if not self.graphs_enabled:
            return 0
        lengths = self.ladder if lengths is None else lengths
        rng = np.random.default_rng(0)
        with self._lock:
            for L in lengths:
                if L * rows > self.max_tokens or rows > self.max_rows:
                    continue
                arrays = [rng.integers(100, min(self.config.vocab_size, 200_000), L).astype(np.int32)
                          for _ in range(rows)]
                self._forward(arrays, use_graph=True)
                if not self.graphs_enabled:
                    break
        return len(self._graphs)

    def self_check(self, requests: Sequence[Sequence[np.ndarray]]) -> bool:
        """Run each request eagerly and through its graph; any byte difference drops the graphs for good.
        Returns True when graphs stay enabled."""
        if not self.graphs_enabled:
            return False
        with self._lock:
            for rows in requests:
                arrays = [np.asarray(r) for r in rows]
                for group in self._groups(arrays):
                    part = [arrays[i] for i in group]
                    eager = self._forward(part, use_graph=False)
                    self._forward(part, use_graph=True)  # captures when needed
                    replay = self._forward(part, use_graph=True)
                    if eager.tobytes() != replay.tobytes():
                        diff = float(np.abs(eager - replay).max())
                        self._drop_graphs(f"graph replay differed from eager (max |dlogit| {diff:.3g})")
                        return False
            self.graph_state = f"enabled, self-check passed on {len(requests)} request(s)"
        return True

    # ---- info and teardown ---------------------------------------------------------------------------------------

    def describe(self) -> dict:
        cc_major, cc_minor, sms = (self.ffi.new("int *") for _ in range(3))
        total = self.ffi.new("size_t *")
        device = {"index": self.device}
        if self.lib.raw.cs1_device_info(self.device, cc_major, cc_minor, sms, total) == 0:
            device.update(compute_capability=f"{cc_major[0]}.{cc_minor[0]}", sm_count=sms[0], total_bytes=total[0])
        return {
            "backend": self.name,
            "library": str(Path(self.lib.path).resolve()),
            "build_info": self.lib.build_info(),
            "device": device,
            "attention_mode": self.attention_mode,
            "gdn_param_precision": self.profile.gdn_param_precision,
            "max_tokens": self.max_tokens,
            "max_rows": self.max_rows,
            "graphs": self.graph_state,
            "graphs_captured": len(self._graphs),
            "graph_replays": self.graph_replays,
            "gemm_pins": self.gemm_pins_state,
            "down_split": self.down_split_state,
            "gate_sigmoid": self.gate_in_prep_state,
            "tail_rows": self.tail_rows_state,
            "tail_attention": self.tail_attention_state,
            "tail_query": self.tail_query_state,
            "gdn_norm": self.gdn_norm_state,
            "fine_ladder": self.fine_ladder_state,
            "weight_bytes": self.weight_bytes,
            "scratch_bytes": self.scratch_bytes,
            "model": self.profile.describe(),
        }

    def close(self) -> None:
        """Free device and pinned memory (waits for queued work first). Safe to call twice."""
        raw = self.lib.raw
        if self.stream is not None:
            raw.cs1_stream_sync(self.stream)
        for g in getattr(self, "_graphs", {}).values():
            raw.cs1_graph_destroy(g)
        if hasattr(self, "_graphs"):
            self._graphs.clear()
        for p in self._allocations:
            raw.cs1_free(p)
        self._allocations.clear()
        for p in self._host_allocations:
            raw.cs1_host_free(p)
        self._host_allocations.clear()
        if self.gemm is not None:
            raw.cs1_gemm_destroy(self.gemm)
            self.gemm = None
        if self.stream is not None:
            raw.cs1_stream_destroy(self.stream)
            self.stream = None

    def __enter__(self) -> CudaBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
