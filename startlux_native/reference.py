"""Numpy reference forward of the Qwen3.5 text decoder (spec qwen3_5-model.md §3–§7, §10).

Exact math, no bf16 emulation: precision "float64" does everything in float64; "fp32" keeps tensors in float32 and
accumulates norms, softmax sums and the delta-rule state in float64. The pure functions below are also the
references for the kernel tests; shapes use T = tokens, H = heads, D = head dim.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .backend import N_LETTERS
from .checkpoint import Checkpoint, ModelConfig

PRECISIONS = {"fp32": np.float32, "float64": np.float64}
DELTA_RULES = ("chunked", "recurrent")
L2_EPS = 1e-6  # hard-coded in transformers / FLA, inside the sqrt


# ---------------------------------------------------------------------------------------------------------------
# elementwise and norms

def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x), linear above 20 like torch.nn.functional.softplus."""
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


def rms_norm_1p(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Zero-centred RMSNorm (spec §4.1): x [..., D], w [D] -> x / sqrt(mean(x²) + eps) · (1 + w), x's dtype.
    The mean of squares is accumulated in float64."""
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(ms + eps)).astype(x.dtype) * (1.0 + w.astype(x.dtype))).astype(x.dtype)


def rms_norm_gated(x: np.ndarray, z: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Gated RMSNorm of linear_attn.norm (spec §4.2), norm before gate, plain w:
    x, z [..., D], w [D] -> x / sqrt(mean(x²) + eps) · w · silu(z)."""
    ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(ms + eps)).astype(x.dtype) * w.astype(x.dtype) * silu(z)).astype(x.dtype)


def l2_normalize(x: np.ndarray, eps: float = L2_EPS) -> np.ndarray:
    """x [..., D] -> x / sqrt(Σx² + eps) over the last axis (sum in float64)."""
    ss = np.sum(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(ss + eps)).astype(x.dtype)).astype(x.dtype)


def mlp_swiglu(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """x [T, H], w_gate/w_up [I, H], w_down [H, I] -> W_down (silu(W_gate x) ⊙ W_up x), [T, H]."""
    return (silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


# ---------------------------------------------------------------------------------------------------------------
# gated full attention

def rope_cos_sin(positions: np.ndarray, rotary_dim: int, theta: float, dtype=np.float64) -> tuple[np.ndarray, ...]:
    """cos, sin [T, rotary_dim] for NeoX rotate-half RoPE: [cos φ_0..φ_{r/2-1}, cos φ_0..] with
    φ_i = p · theta^(-2i/r). In float32 the frequencies are formed in float32, as transformers does."""
    half = rotary_dim // 2
    if dtype == np.float32:
        inv = (1.0 / (np.float32(theta) ** (np.arange(0, rotary_dim, 2, dtype=np.float32) / np.float32(rotary_dim))))
        phi = positions.astype(np.float32)[:, None] * inv.astype(np.float32)[None, :]
    else:
        inv = 1.0 / (float(theta) ** (np.arange(half, dtype=np.float64) * 2.0 / rotary_dim))
        phi = positions.astype(np.float64)[:, None] * inv[None, :]
    phi = np.concatenate([phi, phi], axis=-1)
    return np.cos(phi).astype(dtype), np.sin(phi).astype(dtype)


def apply_partial_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [T, H, D], cos/sin [T, r] -> x with dims 0..r-1 rotated (pair i ↔ i + r/2), dims r..D-1 unchanged."""
    r = cos.shape[-1]
    half = r // 2
    x1, x2, rest = x[..., :half], x[..., half:r], x[..., r:]
    c, s = cos[:, None, :half], sin[:, None, :half]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s, rest], axis=-1).astype(x.dtype)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool, scale: float | None = None) -> np.ndarray:
    """Softmax attention with GQA. q [T, Hq, D], k/v [T, Hkv, D] (Hq multiple of Hkv; q head h uses kv head
    h // (Hq/Hkv)) -> [T, Hq, D]. causal=False attends over the whole sequence. Softmax sums in float64."""
    t, hq, d = q.shape
    group = hq // k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    kk = np.repeat(k, group, axis=1).transpose(1, 2, 0)  # [Hq, D, T]
    vv = np.repeat(v, group, axis=1).transpose(1, 0, 2)  # [Hq, T, D]
    s = (q.transpose(1, 0, 2) @ kk) * q.dtype.type(scale)  # [Hq, T, T]
    if causal:
        s = np.where(np.tril(np.ones((t, t), dtype=bool))[None], s, -np.inf)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = (p / np.sum(p, axis=-1, keepdims=True, dtype=np.float64)).astype(q.dtype)
    return (p @ vv).transpose(1, 0, 2)


@dataclass
class AttentionWeights:
    q_proj: np.ndarray  # [Hq·2D, H] per head [query D | gate D]
    k_proj: np.ndarray  # [Hkv·D, H]
    v_proj: np.ndarray  # [Hkv·D, H]
    o_proj: np.ndarray  # [H, Hq·D]
    q_norm: np.ndarray  # [D]
    k_norm: np.ndarray  # [D]


def gated_attention(x: np.ndarray, w: AttentionWeights, cfg: ModelConfig, *, causal: bool) -> np.ndarray:
    """Gated full-attention mixer (spec §5): x [T, H] (after input_layernorm) -> [T, H]; positions 0..T-1."""
    t = x.shape[0]
    d, hq, hkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    p = (x @ w.q_proj.T).reshape(t, hq, 2 * d)
    q, gate = p[..., :d], p[..., d:].reshape(t, hq * d)  # per-head interleaved split (pitfall 1)
    k = (x @ w.k_proj.T).reshape(t, hkv, d)
    v = (x @ w.v_proj.T).reshape(t, hkv, d)
    q = rms_norm_1p(q, w.q_norm, cfg.rms_norm_eps)
    k = rms_norm_1p(k, w.k_norm, cfg.rms_norm_eps)
    cos, sin = rope_cos_sin(np.arange(t), cfg.rotary_dim, cfg.rope_theta, x.dtype.type)
    q, k = apply_partial_rope(q, cos, sin), apply_partial_rope(k, cos, sin)
    a = attention(q, k, v, causal=causal).reshape(t, hq * d)
    return (a * sigmoid(gate)) @ w.o_proj.T


# ---------------------------------------------------------------------------------------------------------------
# gated DeltaNet

def causal_conv1d_silu(m: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Depthwise causal conv + SiLU (spec §6.2): m [T, C], w [C, K] (w[:, K-1] multiplies the current token, zeros
    before the start) -> [T, C]."""
    t, c = m.shape
    kk = w.shape[1]
    padded = np.concatenate([np.zeros((kk - 1, c), dtype=m.dtype), m], axis=0)
    out = np.zeros_like(m)
    for j in range(kk):
        out += padded[j:j + t] * w[None, :, j]
    return silu(out)


def gdn_gates(a: np.ndarray, b: np.ndarray, a_log: np.ndarray, dt_bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a, b [T, Hv]; A_log, dt_bias [Hv] -> (g = -exp(A_log)·softplus(a + dt_bias) (log decay), beta = σ(b))."""
    g = -np.exp(a_log) * softplus(a + dt_bias)
    return g.astype(a.dtype), sigmoid(b).astype(b.dtype)


def _prepare_qk(q, k, v, use_qk_l2norm: bool, scale: float | None):
    """Expand key heads to value heads (value head h ↔ key head h // r), L2-normalise, scale q."""
    r = v.shape[1] // k.shape[1]
    if v.shape[1] % k.shape[1]:
        raise ValueError(f"value heads {v.shape[1]} not a multiple of key heads {k.shape[1]}")
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q = q * q.dtype.type(scale)
    return np.repeat(q, r, axis=1), np.repeat(k, r, axis=1)


def gated_delta_rule_recurrent(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                               initial_state: np.ndarray | None = None, use_qk_l2norm: bool = True,
                               scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Token-by-token gated delta rule (spec §6.6).

    q, k [T, Hk, Dk]; v [T, Hv, Dv]; g (log decay), beta [T, Hv]; initial_state [Hv, Dk, Dv] (key index first).
    q and k are L2-normalised (eps 1e-6 inside the sqrt) when use_qk_l2norm, q is scaled by `scale`
    (default Dk^-1/2). Returns (o [T, Hv, Dv], final state [Hv, Dk, Dv]); the state is float64 in any precision.
    Per step: S ← e^g S; δ = β (v − Sᵀk); S += k δᵀ; o = Sᵀq.
    """
    dtype = v.dtype
    q, k = _prepare_qk(q, k, v, use_qk_l2norm, scale)
    t, hv, dv = v.shape
    s = np.zeros((hv, k.shape[-1], dv)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    o = np.empty((t, hv, dv), dtype=dtype)
    for i in range(t):
        ki, qi = k[i].astype(np.float64), q[i].astype(np.float64)
        s *= np.exp(g[i].astype(np.float64))[:, None, None]
        pred = np.einsum("hkv,hk->hv", s, ki)
        delta = beta[i].astype(np.float64)[:, None] * (v[i] - pred)
        s += ki[:, :, None] * delta[:, None, :]
        o[i] = np.einsum("hkv,hk->hv", s, qi)
    return o, s


def gated_delta_rule_chunked(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                             chunk_size: int = 64, initial_state: np.ndarray | None = None,
                             use_qk_l2norm: bool = True, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Chunked gated delta rule (spec §7.1, WY/UT form), same arguments and results as the recurrent form.

    Per chunk of C tokens (zero-padded; padding has k = β = g = 0): Γ = inclusive cumsum g; D_ij = e^{Γi−Γj} (j ≤ i);
    L = strictly-lower(β_i k_i·k_j D_ij); U = (I+L)^-1 diag(β) V; W = (I+L)^-1 diag(β e^Γ) K; Δ = U − W S₀;
    O = e^Γ Q S₀ + (Q Kᵀ ⊙ D) Δ; S ← e^{Γ_last} S₀ + (K ⊙ e^{Γ_last − Γ})ᵀ Δ. The intra-chunk math runs in the input
    precision, the carried state in float64 (float64 inputs: everything float64).
    """
    dtype = v.dtype
    q, k = _prepare_qk(q, k, v, use_qk_l2norm, scale)
    t, hv, dv = v.shape
    dk = k.shape[-1]
    c = chunk_size
    n = -(-t // c)
    pad = n * c - t

    def heads_first(x, fill_shape):  # [T, Hv, ...] -> [Hv, n, C, ...] padded with zeros
        x = np.concatenate([x, np.zeros((pad, *fill_shape), dtype=x.dtype)], axis=0)
        return np.moveaxis(x.reshape(n, c, *x.shape[1:]), 2, 0)

    qc, kc, vc = heads_first(q, (hv, dk)), heads_first(k, (hv, dk)), heads_first(v, (hv, dv))
    gc, bc = heads_first(g.astype(dtype), (hv,)), heads_first(beta.astype(dtype), (hv,))
    state = np.zeros((hv, dk, dv)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    lower_incl = np.tril(np.ones((c, c), dtype=bool))
    strict = np.tril(np.ones((c, c), dtype=bool), -1)
    eye = np.eye(c, dtype=dtype)
    out = np.empty((hv, n, c, dv), dtype=dtype)
    for ci in range(n):
        qi, ki, vi, bi = qc[:, ci], kc[:, ci], vc[:, ci], bc[:, ci]  # [Hv, C, D], beta [Hv, C]
        gam = np.cumsum(gc[:, ci].astype(np.float64), axis=-1)  # [Hv, C]
        diff = np.where(lower_incl, gam[:, :, None] - gam[:, None, :], -np.inf)  # mask before exp
        dmat = np.exp(diff).astype(dtype)
        lmat = np.where(strict, bi[:, :, None] * (ki @ ki.transpose(0, 2, 1)) * dmat, 0).astype(dtype)
        a = eye + lmat
        u = np.linalg.solve(a, bi[:, :, None] * vi)
        w = np.linalg.solve(a, (bi * np.exp(gam).astype(dtype))[:, :, None] * ki)
        s0 = state.astype(dtype)
        delta = u - w @ s0
        o = (np.exp(gam).astype(dtype)[:, :, None] * qi) @ s0 + ((qi @ ki.transpose(0, 2, 1)) * dmat) @ delta
        out[:, ci] = o
        decay_to_end = np.exp(gam[:, -1:] - gam).astype(dtype)  # [Hv, C]
        state = (np.exp(gam[:, -1])[:, None, None] * state
                 + ((ki * decay_to_end[:, :, None]).transpose(0, 2, 1) @ delta).astype(np.float64))
    o = np.moveaxis(out, 0, 2).reshape(n * c, hv, dv)[:t]
    return o, state


@dataclass
class DeltaNetWeights:
    in_proj_qkv: np.ndarray  # [2·Hk·Dk + Hv·Dv, H], rows [q | k | v] contiguous
    in_proj_z: np.ndarray  # [Hv·Dv, H]
    in_proj_b: np.ndarray  # [Hv, H]
    in_proj_a: np.ndarray  # [Hv, H]
    conv1d: np.ndarray  # [C, K]
    a_log: np.ndarray  # [Hv]
    dt_bias: np.ndarray  # [Hv]
    norm: np.ndarray  # [Dv] plain weight
    out_proj: np.ndarray  # [H, Hv·Dv]


def gated_deltanet(x: np.ndarray, w: DeltaNetWeights, cfg: ModelConfig, *, delta_rule: str = "chunked") -> np.ndarray:
    """Gated DeltaNet mixer (spec §6): x [T, H] (after input_layernorm) -> [T, H]."""
    t = x.shape[0]
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
    mixed = causal_conv1d_silu(x @ w.in_proj_qkv.T, w.conv1d)
    q = mixed[:, :hk * dk].reshape(t, hk, dk)
    k = mixed[:, hk * dk:2 * hk * dk].reshape(t, hk, dk)
    v = mixed[:, 2 * hk * dk:].reshape(t, hv, dv)
    z = (x @ w.in_proj_z.T).reshape(t, hv, dv)
    g, beta = gdn_gates(x @ w.in_proj_a.T, x @ w.in_proj_b.T, w.a_log, w.dt_bias)
    rule = gated_delta_rule_chunked if delta_rule == "chunked" else gated_delta_rule_recurrent
    o, _ = rule(q, k, v, g, beta)
    u = rms_norm_gated(o.astype(x.dtype), z, w.norm, cfg.rms_norm_eps)
    return u.reshape(t, hv * dv) @ w.out_proj.T


# ---------------------------------------------------------------------------------------------------------------
# the whole decoder

class ReferenceBackend:
    """Backend over a loaded Checkpoint, in numpy. Each row is an independent prompt (no padding anywhere).

    precision "fp32" (float32 tensors, float64 reductions and delta-rule state) or "float64"; delta_rule "chunked"
    (C = 64) or "recurrent". Attention over the prompt is causal or bidirectional per checkpoint.profile.
    Weights are converted once and cached (tiny models; for the 4B expect ~17 GB in fp32).
    """

    def __init__(self, checkpoint: Checkpoint, *, precision: str = "fp32", delta_rule: str = "chunked",
                 attention_mode: str | None = None):
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
        if delta_rule not in DELTA_RULES:
            raise ValueError(f"delta_rule must be one of {DELTA_RULES}, got {delta_rule!r}")
        self.checkpoint = checkpoint
        self.config = checkpoint.config
        self.precision = precision
        self.dtype = PRECISIONS[precision]
        self.delta_rule = delta_rule
        self.attention_mode = attention_mode or checkpoint.profile.attention_mode
        if self.attention_mode not in ("causal", "bidirectional"):
            raise ValueError(f"attention_mode {self.attention_mode!r}")
        self.name = f"reference-numpy-{precision}-{delta_rule}"
        self._cache: dict[str, np.ndarray] = {}

    def _w(self, name: str) -> np.ndarray:
        a = self._cache.get(name)
        if a is None:
            a = self._cache[name] = self.checkpoint.f32(name).astype(self.dtype)
        return a

    def _layer(self, i: int):
        p = f"layers.{i}."
        if self.config.layer_types[i] == "full_attention":
            sa = p + "self_attn."
            return AttentionWeights(*(self._w(sa + n) for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                                 "o_proj.weight", "q_norm.weight", "k_norm.weight")))
        la = p + "linear_attn."
        return DeltaNetWeights(self._w(la + "in_proj_qkv.weight"), self._w(la + "in_proj_z.weight"),
                               self._w(la + "in_proj_b.weight"), self._w(la + "in_proj_a.weight"),
                               self._w(la + "conv1d.weight")[:, 0, :], self._w(la + "A_log"),
                               self._w(la + "dt_bias"), self._w(la + "norm.weight"), self._w(la + "out_proj.weight"))

    def hidden_states(self, ids: np.ndarray) -> np.ndarray:
        """Final-norm hidden states [T, hidden] of one prompt (token ids [T])."""
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("a row must be a non-empty 1-D array of token ids")
        cfg = self.config
        x = self.checkpoint.embedding_rows(ids).astype(self.dtype)
        for i, kind in enumerate(cfg.layer_types):
            p = f"layers.{i}."
            y = rms_norm_1p(x, self._w(p + "input_layernorm.weight"), cfg.rms_norm_eps)
            w = self._layer(i)
            if kind == "full_attention":
                x = x + gated_attention(y, w, cfg, causal=self.attention_mode == "causal")
            else:
                x = x + gated_deltanet(y, w, cfg, delta_rule=self.delta_rule)
            y = rms_norm_1p(x, self._w(p + "post_attention_layernorm.weight"), cfg.rms_norm_eps)
            x = x + mlp_swiglu(y, self._w(p + "mlp.gate_proj.weight"), self._w(p + "mlp.up_proj.weight"),
                               self._w(p + "mlp.down_proj.weight"))
        return rms_norm_1p(x, self._w("norm.weight"), cfg.rms_norm_eps)

    def last_hidden(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """[n, hidden] in the working precision: the final-norm hidden state at each row's last position."""
        out = np.empty((len(rows), self.config.hidden_size), dtype=self.dtype)
        for r, ids in enumerate(rows):
            out[r] = self.hidden_states(ids)[-1]
        return out

    def letter_logits(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """float32 [n, 26]: last-position hidden (working precision) · letter head rows, summed in float64."""
        if len(rows) == 0:
            return np.zeros((0, N_LETTERS), dtype=np.float32)
        # one matrix-vector product per row, accumulated in float64: a row's result never depends on its batch
        letters = self.checkpoint.letter_rows().astype(self.dtype).astype(np.float64)
        hidden = self.last_hidden(rows).astype(np.float64)
        return np.stack([letters @ h for h in hidden]).astype(np.float32)

    def describe(self) -> dict:
        return {"backend": self.name, "precision": self.precision, "delta_rule": self.delta_rule,
                "attention_mode": self.attention_mode, "model": self.checkpoint.profile.describe()}
