"""Gated attention of one query row per prompt (cs1_attention_gated_rows, native/attention_rows.cu) against a float64
numpy reference.

Shapes of the 4B model: Hq 16, Hk 4, Dh 256, V read in place from a 10240-wide projection row (ldv 10240); also
groups Hq / Hk of 1 and 2 (group 8 and Dh != 256 must refuse with CS1_ERR_UNSUPPORTED). Prompts are packed back to
back (cu_seqlens) with padding rows after the last one; prompt s reads its query and gate at row q_rows[s] (the
prompt's last row in the projection buffers, or a compact [n]-row buffer, in any order) and its keys up to rows[s]
(causal) or all of them (bidirectional).

Reference: scores and softmax in float64 from the bf16 inputs, attn = P V, out = bf16(bf16(attn) * g) with
g = bf16(sigmoid(gate)) (fp32 sigmoid) or the gate itself when gate_is_sigmoid = 1.
Tolerance (fp32 scores, softmax and P.V; P is not rounded to bf16): max|diff| / max|ref| < 8e-3 per call, and at
least 99% of the elements within one bf16 step of the reference. Against the full kernel (cs1_attention_sigmoid_gated,
which rounds P to bf16) the rows must agree within that kernel's own tolerance, 1.6e-2 (tests/gpu/test_attention.py).
Exact: a prompt packed with others gives the bytes of the same prompt alone (its 64-key chunks start at the prompt's
first row either way), two calls give the same bytes, the host's bf16(sigmoid(gate)) with gate_is_sigmoid = 1 gives
the bytes of the raw gate, and an empty prompt's row is zeros. Every output and workspace is poisoned (NaN) first.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from startlux_native import bf16

HQ, HK, DH = 16, 4, 256
LDV = 10240  # q|gate (16*512) + k (4*256) + v (4*256)
SCALE = DH**-0.5
REL_TOL = 8e-3
FULL_KERNEL_TOL = 1.6e-2  # test_attention.py's REL_TOL: the full kernel rounds P to bf16
WITHIN_ONE_STEP = 0.99    # fraction of elements within one bf16 step of the reference
SHAPE, ALIGNMENT, NULL, UNSUPPORTED, WORKSPACE = 2001, 2002, 2003, 2004, 2006
KEY_LENGTHS = [1, 63, 64, 65, 127, 128, 129, 640, 4097]
PACKS = {"1+65+640+3": [1, 65, 640, 3], "4097+1": [4097, 1], "129+empty+64+1": [129, 0, 64, 1]}
MODES = ["causal-last", "causal-inner", "bidirectional"]  # keys up to the last row / a row inside / all of them


@dataclass
class Case:
    """Host inputs: prompts packed back to back, then `padding` rows; q/gate/k/v as the attention projection gives
    them (v in place in a row of ldv = hq*2*DH + 2*hk*DH, after q|gate and k)."""

    lengths: list[int]
    padding: int
    hq: int
    hk: int
    q: np.ndarray     # bf16 bits [T, hq, DH]
    k: np.ndarray     # bf16 bits [T, hk, DH]
    proj: np.ndarray  # bf16 bits [T, ldv]; v = proj[:, v_offset:]
    gate: np.ndarray  # bf16 bits [T, hq*DH]

    @property
    def T(self) -> int:
        return sum(self.lengths) + self.padding

    @property
    def n(self) -> int:
        return len(self.lengths)

    @property
    def ldv(self) -> int:
        return self.hq * 2 * DH + 2 * self.hk * DH

    @property
    def v_offset(self) -> int:  # elements
        return self.hq * 2 * DH + self.hk * DH

    @property
    def cu_seqlens(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)

    def v(self) -> np.ndarray:
        return self.proj[:, self.v_offset:].reshape(self.T, self.hk, DH)

    def last_rows(self) -> np.ndarray:
        """Each prompt's last row; an empty prompt gets a row that exists (its output is zeros whatever it reads)."""
        return np.maximum(self.cu_seqlens[1:] - 1, 0).astype(np.int32)

    def prompt(self, i: int) -> Case:
        s, e = self.cu_seqlens[i], self.cu_seqlens[i + 1]
        return replace(self, lengths=[int(e - s)], padding=0, q=self.q[s:e], k=self.k[s:e], proj=self.proj[s:e],
                       gate=self.gate[s:e])


@dataclass
class Query:
    """What one call reads besides the keys: the q/gate buffers (the case's own rows or a compact copy), the row of
    each prompt's query in them, and the last key row of each prompt (None: a null pointer, bidirectional only)."""

    q: np.ndarray     # bf16 bits [R, hq, DH]
    gate: np.ndarray  # bf16 bits [R, hq*DH]
    q_rows: np.ndarray  # int32 [n]
    rows: np.ndarray | None  # int32 [n]
    causal: bool
    gate_is_sigmoid: bool = False


def make_case(rng: np.random.Generator, lengths: list[int], padding: int = 0, hq: int = HQ, hk: int = HK) -> Case:
    T = sum(lengths) + padding

    def bits(shape, std):
        return bf16.to_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(std))

    ldv = hq * 2 * DH + 2 * hk * DH
    proj = bits((T, ldv), 1.0)  # only the v columns are read; the rest is noise that must not leak in
    return Case(list(lengths), padding, hq, hk, bits((T, hq, DH), 1.5), bits((T, hk, DH), 1.5), proj,
                bits((T, hq * DH), 2.0))


def key_rows(case: Case, mode: str, rng: np.random.Generator) -> np.ndarray | None:
    """rows[s] for a mode: the last row, a random row inside the prompt, or None (bidirectional)."""
    if mode == "bidirectional":
        return None
    if mode == "causal-last":
        return case.last_rows()
    cu = case.cu_seqlens
    return np.array([cu[s] + (rng.integers(0, n) if n else 0) for s, n in enumerate(case.lengths)], dtype=np.int32)


def forward_query(case: Case, mode: str, rng: np.random.Generator) -> Query:
    """The forward's use: each prompt's query at its last row of the projection buffers."""
    return Query(case.q, case.gate, case.last_rows(), key_rows(case, mode, rng), mode != "bidirectional")


def sigmoid_bits(gate_bits: np.ndarray) -> np.ndarray:
    """bf16(sigmoid(gate)) with the sigmoid in fp32 (taken in float64, rounded once to float32)."""
    x = bf16.from_bits(gate_bits).astype(np.float64)
    return bf16.to_bits((1.0 / (1.0 + np.exp(-x))).astype(np.float32))


def gate_away_from_ties(gate_bits: np.ndarray) -> np.ndarray:
    """The gate with every value whose fp32 sigmoid lies within 64 fp32 steps of a bf16 rounding tie moved to the
    next bf16 value: the device's fp32 sigmoid may differ from the host's in the last bits, which must not flip a
    rounding when the test asks for equal bytes."""
    g = gate_bits.copy()
    for _ in range(100):
        x = bf16.from_bits(g).astype(np.float64)
        low = ((1.0 / (1.0 + np.exp(-x))).astype(np.float32).view(np.uint32) & 0xFFFF).astype(np.int64)
        near = np.abs(low - 0x8000) < 64
        if not near.any():
            return g
        g[near] += 1
    raise AssertionError("could not move the gate away from bf16 ties")


def reference(case: Case, query: Query) -> np.ndarray:
    """The float64 reference (bf16 values as float64) [n, hq*DH]; an empty prompt's row is zero."""
    k = bf16.from_bits(case.k).astype(np.float64)
    v = bf16.from_bits(case.v()).astype(np.float64)
    group = case.hq // case.hk
    cu = case.cu_seqlens
    out = np.zeros((case.n, case.hq * DH))
    for s in range(case.n):
        start, end = int(cu[s]), int(cu[s + 1])
        if end == start:
            continue
        if query.causal:
            end = min(max(int(query.rows[s]), start), end - 1) + 1  # keys up to rows[s], clamped into the prompt
        # query head h = kv * group + g reads kv head h // group
        q = bf16.from_bits(query.q[query.q_rows[s]]).astype(np.float64).reshape(case.hk, group, DH)
        scores = np.einsum("kgd,tkd->kgt", q, k[start:end]) * SCALE
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        attn = bf16.round_(np.einsum("kgt,tkd->kgd", p, v[start:end]).reshape(-1).astype(np.float32))
        raw = query.gate[query.q_rows[s]]
        g = bf16.from_bits(raw if query.gate_is_sigmoid else sigmoid_bits(raw))
        out[s] = bf16.round_(attn * g)  # a product of two bf16 values is exact in float32
    return out


def workspace_bytes(gpu, T: int, n: int, hq: int) -> int:
    size = gpu.ffi.new("size_t *")
    gpu.lib.cs1_attention_rows_workspace_bytes(T, n, hq, DH, size)
    return int(size[0])


def int32_ptr(gpu, buf):
    return gpu.ffi.cast("int32_t *", buf.ptr)


def rows_on_device(gpu, case: Case, query: Query, workspace=None) -> np.ndarray:
    """One call into a poisoned output (and, unless one is given, a fresh poisoned workspace of exactly the size
    asked for); returns bf16 bits [n, hq*DH]."""
    n, ffi = case.n, gpu.ffi
    q, gate, k, proj = (gpu.upload(a) for a in (query.q, query.gate, case.k, case.proj))
    q_rows, cu = gpu.upload(query.q_rows.astype(np.int32)), gpu.upload(case.cu_seqlens)
    rows = ffi.NULL if query.rows is None else int32_ptr(gpu, gpu.upload(query.rows.astype(np.int32)))
    size = workspace_bytes(gpu, case.T, n, case.hq)
    if workspace is None:
        workspace = gpu.empty(size)
    out = gpu.empty(n * case.hq * DH * 2)
    gpu.lib.cs1_attention_gated_rows(q.ptr, gate.ptr, int32_ptr(gpu, q_rows), int(query.gate_is_sigmoid), k.ptr,
                                     proj.at(case.v_offset * 2), case.ldv, int32_ptr(gpu, cu), rows, n, out.ptr,
                                     workspace.ptr, size, case.T, case.hq, case.hk, DH, SCALE, int(query.causal),
                                     gpu.stream)
    gpu.sync()
    return gpu.download(out, np.uint16, (n, case.hq * DH))


def check_against_reference(case: Case, query: Query, got_bits: np.ndarray, label: str) -> float:
    got = bf16.from_bits(got_bits).astype(np.float64)
    assert np.isfinite(got).all(), f"{label}: non-finite output (a row was never written: poison left)"
    ref = reference(case, query)
    diff = np.abs(got - ref)
    size = float(np.abs(ref).max())
    rel = float(diff.max()) / size if size > 0 else float(diff.max())
    within = float(np.mean(diff <= bf16.ulp(ref)))
    print(f"{label}: max|diff|/max|ref| = {rel:.3e}, {within:.4%} within one bf16 step "
          f"(tolerance {REL_TOL}, {WITHIN_ONE_STEP:.0%})")
    assert rel < REL_TOL, f"{label}: relative error {rel:.3e} >= {REL_TOL}"
    assert within >= WITHIN_ONE_STEP, f"{label}: only {within:.4%} of the elements within one bf16 step"
    for s in np.nonzero(np.array(case.lengths) == 0)[0]:
        assert (got_bits[s] == 0).all(), f"{label}: empty prompt {s} is not zeros"
    return rel


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("length", KEY_LENGTHS)
def test_single_prompt_matches_float64(gpu, rng, length, mode):
    case = make_case(rng, [length])
    query = forward_query(case, mode, rng)
    if mode == "causal-inner":  # a row in the middle of the prompt, the query still at the last row
        query.rows = np.array([(length - 1) // 2], dtype=np.int32)
    # bidirectional: rows is None here, so the call gets a null rows pointer
    check_against_reference(case, query, rows_on_device(gpu, case, query), f"keys={length} {mode}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", [0, 37])
@pytest.mark.parametrize("pack", list(PACKS))
def test_packed_prompts_match_float64_and_equal_alone(gpu, rng, pack, padding, mode):
    case = make_case(rng, PACKS[pack], padding)
    query = forward_query(case, mode, rng)
    if mode == "bidirectional":  # give rows anyway: bidirectional calls ignore them
        query.rows = case.last_rows()
    packed = rows_on_device(gpu, case, query)
    check_against_reference(case, query, packed, f"pack {pack} padding={padding} {mode}")
    cu = case.cu_seqlens
    for i, n in enumerate(case.lengths):
        if n == 0:
            continue
        # alone: the prompt's own rows, its query copied into a one-row buffer (the bytes of q are what count)
        r = query.q_rows[i]
        alone_query = Query(query.q[[r]], query.gate[[r]], np.zeros(1, np.int32),
                            None if query.rows is None else query.rows[[i]] - cu[i], query.causal)
        alone = rows_on_device(gpu, case.prompt(i), alone_query)
        assert np.array_equal(packed[i], alone[0]), f"prompt {i} (length {n}) differs from its own call"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_query_rows_compact_and_permuted(gpu, rng, causal):
    """q_rows into a compact [n]-row q/gate buffer (in order and shuffled) give the bytes of the in-place rows; q_rows
    permuted across prompts (a prompt's query read at another prompt's row) match the reference."""
    case = make_case(rng, [1, 65, 640, 3], 37)
    mode = "causal-last" if causal else "bidirectional"
    in_place = forward_query(case, mode, rng)
    want = rows_on_device(gpu, case, in_place)
    check_against_reference(case, in_place, want, f"in place causal={causal}")
    last = case.last_rows()
    compact = replace(in_place, q=case.q[last], gate=case.gate[last], q_rows=np.arange(case.n, dtype=np.int32))
    assert np.array_equal(rows_on_device(gpu, case, compact), want), "compact q/gate rows differ from in place"
    order = rng.permutation(case.n)  # buffer row order[s] holds prompt s's query
    shuffled = np.empty_like(order)
    shuffled[order] = np.arange(case.n)
    compact_shuffled = replace(in_place, q=case.q[last[shuffled]], gate=case.gate[last[shuffled]],
                               q_rows=order.astype(np.int32))
    assert np.array_equal(rows_on_device(gpu, case, compact_shuffled), want), "shuffled compact rows differ"
    crossed = replace(in_place, q_rows=last[np.roll(np.arange(case.n), 1)])
    check_against_reference(case, crossed, rows_on_device(gpu, case, crossed), f"crossed q_rows causal={causal}")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (8, 4), (16, 4)], ids=["group1", "group2", "group4"])
def test_group_sizes_match_float64(gpu, rng, hq, hk, causal):
    case = make_case(rng, [65, 640, 1], 5, hq, hk)
    query = forward_query(case, "causal-last" if causal else "bidirectional", rng)
    check_against_reference(case, query, rows_on_device(gpu, case, query), f"Hq={hq} Hk={hk} causal={causal}")


def test_deterministic_and_workspace_contents_ignored(gpu, rng):
    """Two calls on one workspace (the second sees the first's partials) and a call on a fresh poisoned one."""
    case = make_case(rng, [4097, 1, 640], 37)
    query = forward_query(case, "causal-last", rng)
    workspace = gpu.empty(workspace_bytes(gpu, case.T, case.n, HQ))
    first = rows_on_device(gpu, case, query, workspace)
    check_against_reference(case, query, first, "determinism")
    assert np.array_equal(rows_on_device(gpu, case, query, workspace), first), "a second call differs"
    assert np.array_equal(rows_on_device(gpu, case, query), first), "a fresh workspace gives other bytes"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_sigmoid_gate_gives_the_raw_gate_bytes(gpu, rng, causal):
    case = make_case(rng, [1, 65, 640, 3], 11)
    case.gate = gate_away_from_ties(case.gate)
    raw = forward_query(case, "causal-last" if causal else "bidirectional", rng)
    sig = replace(raw, gate=sigmoid_bits(case.gate), gate_is_sigmoid=True)
    want = rows_on_device(gpu, case, raw)
    got = rows_on_device(gpu, case, sig)
    check_against_reference(case, sig, got, f"sigmoid gate causal={causal}")
    diff = np.nonzero((want != got).any(axis=1))[0]
    print(f"causal={causal}: {len(diff)} rows differ between the raw and the sigmoid gate")
    assert len(diff) == 0, f"rows {diff} differ between the raw and the sigmoid gate"


def test_agrees_with_the_full_attention_kernel(gpu, rng):
    """Bidirectional [640, 65]: cs1_attention_sigmoid_gated over every row (automatic tile) at each prompt's last row
    against the rows kernel. The bits differ (the full kernel rounds P to bf16): its own tolerance applies."""
    case = make_case(rng, [640, 65], 11)
    query = replace(forward_query(case, "bidirectional", rng), gate=sigmoid_bits(case.gate), gate_is_sigmoid=True)
    rows = rows_on_device(gpu, case, query)
    check_against_reference(case, query, rows, "rows kernel [640, 65] bidirectional")
    T = case.T
    q, k, proj, gate = (gpu.upload(a) for a in (case.q, case.k, case.proj, query.gate))
    cu, out = gpu.upload(case.cu_seqlens), gpu.empty(T * HQ * DH * 2)
    gpu.lib.cs1_attention_sigmoid_gated(q.ptr, k.ptr, proj.at(case.v_offset * 2), LDV, gate.ptr, int32_ptr(gpu, cu),
                                        case.n, out.ptr, T, HQ, HK, DH, SCALE, 0, 0, gpu.stream)
    gpu.sync()
    full = bf16.from_bits(gpu.download(out, np.uint16, (T, HQ * DH))[case.last_rows()]).astype(np.float64)
    got = bf16.from_bits(rows).astype(np.float64)
    rel = float(np.abs(full - got).max() / np.abs(full).max())
    print(f"full kernel vs rows kernel at the last rows: max|diff|/max|full| = {rel:.3e} (tolerance "
          f"{FULL_KERNEL_TOL}), {int((full != got).sum())} of {got.size} values differ")
    assert np.isfinite(full).all()
    assert rel < FULL_KERNEL_TOL, f"relative difference {rel:.3e} >= {FULL_KERNEL_TOL}"


def test_workspace_size_is_checked(gpu, rng):
    case = make_case(rng, [65, 640], 37)
    size = workspace_bytes(gpu, case.T, case.n, HQ)
    print(f"workspace for T={case.T}, n={case.n}: {size} bytes")
    assert size > 0
    assert gpu.lib.raw.cs1_attention_rows_workspace_bytes(case.T, case.n, HQ, DH, gpu.ffi.NULL) == NULL
    query = forward_query(case, "causal-last", rng)
    q, gate, k, proj = (gpu.upload(a) for a in (case.q, case.gate, case.k, case.proj))
    q_rows, cu = gpu.upload(query.q_rows), gpu.upload(case.cu_seqlens)
    workspace, out = gpu.empty(size), gpu.empty(case.n * HQ * DH * 2)
    status = gpu.lib.raw.cs1_attention_gated_rows(q.ptr, gate.ptr, int32_ptr(gpu, q_rows), 0, k.ptr,
                                                  proj.at(case.v_offset * 2), LDV, int32_ptr(gpu, cu),
                                                  int32_ptr(gpu, q_rows), case.n, out.ptr, workspace.ptr, size - 1,
                                                  case.T, HQ, HK, DH, SCALE, 1, gpu.stream)
    gpu.sync()
    assert status == WORKSPACE, f"a workspace one byte short gave status {status}"
    assert (gpu.download(out, np.uint16, (case.n, HQ * DH)) == 0xFFFF).all(), "a refused call wrote to the output"


def test_error_statuses_launch_nothing(gpu, rng):
    case = make_case(rng, [65, 3], 5)
    T, n = case.T, case.n
    q, gate, k, proj = (gpu.upload(a) for a in (case.q, case.gate, case.k, case.proj))
    q_rows, cu = int32_ptr(gpu, gpu.upload(case.last_rows())), int32_ptr(gpu, gpu.upload(case.cu_seqlens))
    size = workspace_bytes(gpu, T, n, HQ)
    workspace, out = gpu.empty(size), gpu.empty(n * HQ * DH * 2)
    v = proj.at(case.v_offset * 2)
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    good = dict(q=q.ptr, gate=gate.ptr, q_rows=q_rows, k=k.ptr, v=v, ldv=LDV, cu=cu, rows=q_rows, n=n, out=out.ptr,
                ws=workspace.ptr, size=size, T=T, Hq=HQ, Hk=HK, Dh=DH, causal=1)

    def call(**changes):
        a = good | changes
        return raw.cs1_attention_gated_rows(a["q"], a["gate"], a["q_rows"], 0, a["k"], a["v"], a["ldv"], a["cu"],
                                            a["rows"], a["n"], a["out"], a["ws"], a["size"], a["T"], a["Hq"],
                                            a["Hk"], a["Dh"], SCALE, a["causal"], gpu.stream)

    for name in ("q", "gate", "q_rows", "k", "v", "cu", "out", "ws"):
        assert call(**{name: null}) == NULL, f"null {name}"
    assert call(rows=null) == NULL  # causal needs rows
    assert call(causal=2) == SHAPE
    assert call(Hk=3) == SHAPE  # 16 % 3 != 0
    assert call(ldv=HK * DH - 8) == SHAPE  # a v row must hold every kv head
    assert call(Dh=128) == UNSUPPORTED
    assert call(Hk=2) == UNSUPPORTED  # group 8
    assert call(q=q.at(2)) == ALIGNMENT
    assert call(k=k.at(2)) == ALIGNMENT
    assert call(v=proj.at(case.v_offset * 2 + 2)) == ALIGNMENT
    assert call(out=out.at(1)) == ALIGNMENT  # bf16 stores: 2-byte alignment is all the output needs
    assert call(size=size - 1) == WORKSPACE
    # empty work: success without touching anything (with null pointers too, as every cs1 op)
    assert call(n=0) == 0
    assert call(T=0) == 0
    assert call(T=0, q=null, gate=null, q_rows=null, k=null, v=null, cu=null, rows=null, out=null, ws=null) == 0
    gpu.sync()
    untouched = gpu.download(out, np.uint16, (n, HQ * DH))
    assert (untouched == 0xFFFF).all(), "a rejected or empty call wrote to the output"
