"""Gated attention (cs1_attention_gated*, native/attention.cu) against a float64 numpy reference.

Shapes of the 4B model: Hq 16, Hk 4, Dh 256, V read in place from a 10240-wide projection row (ldv 10240).
Tolerance (bf16 inputs, fp32 softmax, P and the output rounded to bf16): max|diff| / max|ref| < 1.6e-2 over the
compared rows. The 64-row and 128-row tiles must agree byte for byte, and packed prompts must equal separate calls.
The sm_90 warpgroup-MMA kernel (tile_rows CS1_ATTENTION_TILE_WGMMA, bidirectional) has the same tolerance and the
same packing rule, and its two-head block (CS1_ATTENTION_TILE_WGMMA_PAIR) must give its bytes; those tests skip,
with the reason, where it cannot run. The gate's sigmoid taken in attn_prep (cs1_attn_prep_sigmoid_gate +
cs1_attention_sigmoid_gated) must give the bytes of the sigmoid taken in the attention, on every kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from startlux_native import bf16

HQ, HK, DH = 16, 4, 256
LDV = 10240                      # q|gate (16*512) + k (4*256) + v (4*256)
V_OFFSET = HQ * 2 * DH + HK * DH  # v columns start here (elements)
SCALE = DH**-0.5
REL_TOL = 1.6e-2
SHAPE, ALIGNMENT, NULL, UNSUPPORTED = 2001, 2002, 2003, 2004
LENGTHS = [1, 63, 64, 65, 640, 700, 2048, 4097]
POLICY_HEADER = Path(__file__).resolve().parents[2] / "native" / "attention_policy.h"


@dataclass
class Case:
    """Host inputs: prompts packed back to back, then `padding` rows."""

    lengths: list[int]
    padding: int
    q: np.ndarray     # bf16 bits [T, HQ, DH]
    k: np.ndarray     # bf16 bits [T, HK, DH]
    proj: np.ndarray  # bf16 bits [T, LDV]; v = proj[:, V_OFFSET:]
    gate: np.ndarray  # bf16 bits [T, HQ*DH]

    @property
    def T(self) -> int:
        return sum(self.lengths) + self.padding

    @property
    def cu_seqlens(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)

    def v(self) -> np.ndarray:
        return self.proj[:, V_OFFSET:].reshape(self.T, HK, DH)

    def prompt(self, i: int) -> Case:
        s, e = self.cu_seqlens[i], self.cu_seqlens[i + 1]
        return Case([int(e - s)], 0, self.q[s:e], self.k[s:e], self.proj[s:e], self.gate[s:e])


def make_case(rng: np.random.Generator, lengths: list[int], padding: int = 0) -> Case:
    T = sum(lengths) + padding

    def bits(shape, std):
        return bf16.to_bits(rng.standard_normal(shape, dtype=np.float32) * np.float32(std))

    proj = bits((T, LDV), 1.0)  # the q/gate/k columns are noise here; only v is read from it
    return Case(list(lengths), padding, bits((T, HQ, DH), 1.5), bits((T, HK, DH), 1.5), proj,
                bits((T, HQ * DH), 2.0))


def reference_rows(case: Case, rows: np.ndarray, causal: bool) -> np.ndarray:
    """float64 out[rows] = softmax(q k^T * scale) v * sigmoid(gate), per prompt, GQA; padding rows are zero."""
    q = bf16.from_bits(case.q).astype(np.float64)
    k = bf16.from_bits(case.k).astype(np.float64)
    v = bf16.from_bits(case.v()).astype(np.float64)
    gate = bf16.from_bits(case.gate).astype(np.float64)
    cu = case.cu_seqlens
    out = np.zeros((len(rows), HQ * DH))
    prompt_of = np.searchsorted(cu, rows, side="right") - 1
    for i in range(len(case.lengths)):
        pick = np.nonzero(prompt_of == i)[0]
        if len(pick) == 0:
            continue
        s, e = cu[i], cu[i + 1]
        r = rows[pick]
        for h in range(HQ):
            kv = h // (HQ // HK)
            logits = q[r, h] @ k[s:e, kv].T * SCALE
            if causal:
                logits[np.arange(s, e)[None, :] > r[:, None]] = -np.inf
            p = np.exp(logits - logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            attn = p @ v[s:e, kv]
            g = gate[r, h * DH:(h + 1) * DH]
            out[pick, h * DH:(h + 1) * DH] = attn / (1.0 + np.exp(-g))
    return out


def compared_rows(case: Case, rng: np.random.Generator, limit: int = 800) -> np.ndarray:
    """Every row of small cases; for long ones tile edges, the last rows and a random sample."""
    T = case.T
    if T <= limit:
        return np.arange(T)
    edges = [0, 1, 31, 32, 33, 63, 64, 65, 127, 128, 129, 639, 640, 641, T // 2, T - 65, T - 64, T - 2, T - 1]
    sample = rng.choice(T, size=64, replace=False)
    return np.unique(np.clip(np.concatenate([edges, sample]), 0, T - 1))


def attention_on_device(gpu, case: Case, *, causal: bool, tile_rows: int | None = None) -> np.ndarray:
    """Runs one call over the packed case into a poisoned output; returns bf16 bits [T, HQ*DH].
    tile_rows None = the public entry points (automatic tile), else cs1_attention_gated_tiled."""
    T = case.T
    q, k, proj, gate = (gpu.upload(a) for a in (case.q, case.k, case.proj, case.gate))
    cu = gpu.upload(case.cu_seqlens)
    out = gpu.empty(T * HQ * DH * 2)  # poisoned with 0xFF (NaN)
    v = proj.at(V_OFFSET * 2)
    n = len(case.lengths)
    lib = gpu.lib
    if tile_rows is None:
        fn = lib.cs1_attention_gated if causal else lib.cs1_attention_gated_bidirectional
        fn(q.ptr, k.ptr, v, LDV, gate.ptr, cu.ptr, n, out.ptr, T, HQ, HK, DH, SCALE, gpu.stream)
    else:
        lib.cs1_attention_gated_tiled(q.ptr, k.ptr, v, LDV, gate.ptr, cu.ptr, n, out.ptr, T, HQ, HK, DH, SCALE,
                                      int(causal), tile_rows, gpu.stream)
    gpu.sync()
    return gpu.download(out, np.uint16, (T, HQ * DH))


def check_against_reference(case: Case, got_bits: np.ndarray, rows: np.ndarray, causal: bool, label: str) -> float:
    got = bf16.from_bits(got_bits).astype(np.float64)
    assert np.isfinite(got).all(), f"{label}: non-finite output (a row was never written: poison left)"
    ref = reference_rows(case, rows, causal)
    diff, size = float(np.abs(got[rows] - ref).max()), float(np.abs(ref).max())
    rel = diff / size if size > 0 else diff  # all-padding rows: the reference is exactly zero
    print(f"{label}: max|diff|/max|ref| = {rel:.3e} over {len(rows)} rows (tolerance {REL_TOL})")
    assert rel < REL_TOL, f"{label}: relative error {rel:.3e} >= {REL_TOL}"
    return rel


def tile_rows_for(gpu, rows: int) -> int:
    out = gpu.ffi.new("int32_t *")
    gpu.lib.cs1_attention_tile_rows(rows, out)
    return int(out[0])


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("T", LENGTHS)
def test_single_prompt_matches_float64(gpu, rng, T, causal):
    case = make_case(rng, [T])
    got = attention_on_device(gpu, case, causal=causal)
    label = f"T={T} {'causal' if causal else 'bidirectional'} tile={tile_rows_for(gpu, T)}"
    check_against_reference(case, got, compared_rows(case, rng), causal, label)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("layout", ["5+700+64+pad11", "45-short-prompts+pad3", "padding-only"])
def test_packed_prompts_equal_separate_calls(gpu, rng, layout, causal):
    if layout.startswith("5+"):
        lengths, padding = [5, 700, 64], 11
    elif layout == "padding-only":  # n_seqs = 0: every row is padding
        lengths, padding = [], 70
    else:  # more than 32 prompts (the device scan walks cu_seqlens 32 at a time), empty ones included
        lengths, padding = [int(x) for x in rng.integers(0, 90, size=45)], 3
        lengths[7] = 0
    case = make_case(rng, lengths, padding)
    packed = attention_on_device(gpu, case, causal=causal)
    check_against_reference(case, packed, np.arange(case.T), causal, f"packed {layout} causal={causal}")
    cu = case.cu_seqlens
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        alone = attention_on_device(gpu, case.prompt(i), causal=causal)
        assert np.array_equal(packed[cu[i]:cu[i + 1]], alone), f"prompt {i} (length {n}) differs from its own call"
    pad = packed[case.T - padding:]
    assert np.array_equal(pad, np.zeros_like(pad)), "padding rows are not zero"


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("layout", [str(t) for t in LENGTHS] + ["5+700+64+pad11"])
def test_wide_tile_is_byte_identical_to_narrow(gpu, rng, layout, causal):
    case = make_case(rng, [5, 700, 64], 11) if "+" in layout else make_case(rng, [int(layout)])
    narrow = attention_on_device(gpu, case, causal=causal, tile_rows=64)
    wide = attention_on_device(gpu, case, causal=causal, tile_rows=128)
    assert np.isfinite(bf16.from_bits(narrow)).all() and np.isfinite(bf16.from_bits(wide)).all()
    diff = np.nonzero((narrow != wide).any(axis=1))[0]
    print(f"{layout} causal={causal}: {len(diff)} rows differ between the 64- and 128-row tiles")
    assert len(diff) == 0, f"rows {diff[:10]} differ between the 64- and 128-row tiles"
    auto = attention_on_device(gpu, case, causal=causal, tile_rows=0)
    if not causal and wgmma_runs(gpu):  # the automatic policy takes the wgmma kernel for bidirectional calls
        assert np.array_equal(auto, attention_on_device(gpu, case, causal=False, tile_rows=WGMMA))
    else:
        assert np.array_equal(auto, narrow)


WGMMA = -64  # CS1_ATTENTION_TILE_WGMMA


def device_cc(gpu) -> tuple[int, int]:
    major, minor = gpu.ffi.new("int *"), gpu.ffi.new("int *")
    sms, mem = gpu.ffi.new("int *"), gpu.ffi.new("size_t *")
    device = gpu.ffi.new("int *")
    gpu.lib.cs1_get_device(device)
    gpu.lib.cs1_device_info(device[0], major, minor, sms, mem)
    return major[0], minor[0]


def wgmma_runs(gpu) -> bool:
    """The sm_90 warpgroup-MMA kernel runs on compute capability 9.0 with a target-90 build; elsewhere its call must
    refuse with CS1_ERR_UNSUPPORTED."""
    assert gpu.lib.raw.CS1_ATTENTION_TILE_WGMMA == WGMMA
    case = make_case(np.random.default_rng(1), [3])
    q, k, proj, gate = (gpu.upload(a) for a in (case.q, case.k, case.proj, case.gate))
    cu, out = gpu.upload(case.cu_seqlens), gpu.empty(case.T * HQ * DH * 2)
    status = gpu.lib.raw.cs1_attention_gated_tiled(q.ptr, k.ptr, proj.at(V_OFFSET * 2), LDV, gate.ptr, cu.ptr, 1,
                                                   out.ptr, case.T, HQ, HK, DH, SCALE, 0, WGMMA, gpu.stream)
    gpu.sync()
    if status == UNSUPPORTED:
        assert device_cc(gpu) != (9, 0) or "sm_90" not in gpu.lib.build_info(), (
            "compute capability 9.0 with a target-90 build must run the wgmma kernel")
        return False
    assert status == 0, f"wgmma attention call failed with status {status}"
    return True


def wgmma_or_skip(gpu) -> None:
    if not wgmma_runs(gpu):
        pytest.skip(f"wgmma attention kernel unsupported here (sm_{''.join(map(str, device_cc(gpu)))} or a build "
                    "without sm_90a): CS1_ERR_UNSUPPORTED, as documented")


@pytest.mark.parametrize("T", LENGTHS)
def test_wgmma_single_prompt_matches_float64(gpu, rng, T):
    wgmma_or_skip(gpu)
    case = make_case(rng, [T])
    got = attention_on_device(gpu, case, causal=False, tile_rows=WGMMA)
    check_against_reference(case, got, compared_rows(case, rng), False, f"T={T} bidirectional wgmma")
    again = attention_on_device(gpu, case, causal=False, tile_rows=WGMMA)
    assert np.array_equal(got, again), "two calls on the same inputs differ"


@pytest.mark.parametrize("layout", ["5+700+64+pad11", "45-short-prompts+pad3", "padding-only"])
def test_wgmma_packed_prompts_equal_separate_calls(gpu, rng, layout):
    wgmma_or_skip(gpu)
    if layout.startswith("5+"):
        lengths, padding = [5, 700, 64], 11
    elif layout == "padding-only":
        lengths, padding = [], 70
    else:
        lengths, padding = [int(x) for x in rng.integers(0, 90, size=45)], 3
        lengths[7] = 0
    case = make_case(rng, lengths, padding)
    packed = attention_on_device(gpu, case, causal=False, tile_rows=WGMMA)
    check_against_reference(case, packed, np.arange(case.T), False, f"packed {layout} wgmma")
    cu = case.cu_seqlens
    for i, n in enumerate(lengths):
        if n == 0:
            continue
        alone = attention_on_device(gpu, case.prompt(i), causal=False, tile_rows=WGMMA)
        assert np.array_equal(packed[cu[i]:cu[i + 1]], alone), f"prompt {i} (length {n}) differs from its own call"
    pad = packed[case.T - padding:]
    assert np.array_equal(pad, np.zeros_like(pad)), "padding rows are not zero"


PAIR = -128  # CS1_ATTENTION_TILE_WGMMA_PAIR


PAIR_LAYOUTS = {"5+700+64+pad11": ([5, 700, 64], 11), "1+65+130+191+256+900": ([1, 65, 130, 191, 256, 900], 0)}


@pytest.mark.parametrize("layout", [str(t) for t in LENGTHS] + list(PAIR_LAYOUTS))
def test_wgmma_pair_block_is_byte_identical_to_one_head_blocks(gpu, rng, layout):
    """Two heads per block share the K and V tiles; each warpgroup does the same operations on O in the same order
    as alone, so the bytes are the same (the two-head epilogue loads its gate rows differently: LEVERS 97). The
    second packed layout gives prompts of 1, 2, 3, 3, 4 and 15 key tiles, and rows that end inside a warp's 16."""
    wgmma_or_skip(gpu)
    assert gpu.lib.raw.CS1_ATTENTION_TILE_WGMMA_PAIR == PAIR
    case = make_case(rng, *PAIR_LAYOUTS[layout]) if "+" in layout else make_case(rng, [int(layout)])
    one = attention_on_device(gpu, case, causal=False, tile_rows=WGMMA)
    pair = attention_on_device(gpu, case, causal=False, tile_rows=PAIR)
    assert np.isfinite(bf16.from_bits(pair)).all()
    diff = np.nonzero((one != pair).any(axis=1))[0]
    print(f"{layout}: {len(diff)} rows differ between the one-head and the two-head wgmma blocks")
    assert len(diff) == 0, f"rows {diff[:10]} differ"
    assert np.array_equal(attention_on_device(gpu, case, causal=False, tile_rows=0), pair), "auto is not the pair"


def gates_from_prep(gpu, case: Case, sigmoid: bool):
    """The gate columns of case.proj (the fused projection rows attn_prep reads) through cs1_attn_prep, or through
    cs1_attn_prep_sigmoid_gate (bf16(sigmoid(gate))); returns the device buffer."""
    T, ffi = case.T, gpu.ffi
    rot = 64
    w = gpu.upload(bf16.to_bits(np.full(DH, 0.05, np.float32)))
    positions = gpu.upload(np.arange(T, dtype=np.int32))
    inv_freq = gpu.upload((1.0 / np.power(1e7, np.arange(0, rot, 2) / rot)).astype(np.float32))
    q, gate, k = gpu.empty(T * HQ * DH * 2), gpu.empty(T * HQ * DH * 2), gpu.empty(T * HK * DH * 2)
    prep = gpu.lib.cs1_attn_prep_sigmoid_gate if sigmoid else gpu.lib.cs1_attn_prep
    prep(gpu.upload(case.proj).ptr, LDV, w.ptr, w.ptr, ffi.cast("int32_t *", positions.ptr),
         ffi.cast("float *", inv_freq.ptr), q.ptr, gate.ptr, k.ptr, T, HQ, HK, DH, rot, 1e-6, gpu.stream)
    gpu.sync()
    return gate


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile_rows", [0, 64, 128, WGMMA, PAIR])
def test_sigmoid_gated_gives_the_raw_gate_bytes(gpu, rng, tile_rows, causal):
    """The gate's sigmoid taken in attn_prep (cs1_attn_prep_sigmoid_gate, then cs1_attention_sigmoid_gated) or in
    the attention's epilogue (cs1_attn_prep, then cs1_attention_gated_tiled): the same bytes, on every kernel."""
    if tile_rows in (WGMMA, PAIR):
        if causal:
            pytest.skip("the wgmma kernel is bidirectional only (its causal refusal: test_wgmma_refuses_causal)")
        wgmma_or_skip(gpu)
    case = make_case(rng, [5, 160, 64, 700], 11)
    T, n = case.T, 4
    raw, sig = gates_from_prep(gpu, case, False), gates_from_prep(gpu, case, True)
    want_raw = case.proj[:, :2 * HQ * DH].reshape(T, HQ, 2 * DH)[:, :, DH:].reshape(T, HQ * DH)
    assert np.array_equal(gpu.download(raw, np.uint16, (T, HQ * DH)), want_raw), "attn_prep's gate is not a copy"
    q, k, proj, cu = gpu.upload(case.q), gpu.upload(case.k), gpu.upload(case.proj), gpu.upload(case.cu_seqlens)
    outs = []
    for gate, fn in ((raw, gpu.lib.cs1_attention_gated_tiled), (sig, gpu.lib.cs1_attention_sigmoid_gated)):
        out = gpu.empty(T * HQ * DH * 2)  # poisoned
        fn(q.ptr, k.ptr, proj.at(V_OFFSET * 2), LDV, gate.ptr, cu.ptr, n, out.ptr, T, HQ, HK, DH, SCALE, int(causal),
           tile_rows, gpu.stream)
        gpu.sync()
        outs.append(gpu.download(out, np.uint16, (T, HQ * DH)))
    assert np.isfinite(bf16.from_bits(outs[1])).all()
    diff = np.nonzero((outs[0] != outs[1]).any(axis=1))[0]
    print(f"tile {tile_rows} causal {causal}: {len(diff)} rows differ between the two gate forms")
    assert len(diff) == 0, f"rows {diff[:10]} differ"


def test_wgmma_pair_needs_an_even_group(gpu, rng):
    """Hq / Hk odd (here 16 / 16): the pair block refuses, the automatic choice falls back to one head per block."""
    wgmma_or_skip(gpu)
    T = 130
    q = bf16.to_bits(rng.standard_normal((T, HQ, DH), dtype=np.float32))
    k = bf16.to_bits(rng.standard_normal((T, HQ, DH), dtype=np.float32))
    v = bf16.to_bits(rng.standard_normal((T, HQ * DH), dtype=np.float32))
    gate = bf16.to_bits(rng.standard_normal((T, HQ * DH), dtype=np.float32))
    bufs = [gpu.upload(a) for a in (q, k, v, gate, np.array([0, T], dtype=np.int32))]
    raw = gpu.lib.raw

    def call(tile):
        out = gpu.empty(T * HQ * DH * 2)
        status = raw.cs1_attention_gated_tiled(bufs[0].ptr, bufs[1].ptr, bufs[2].ptr, HQ * DH, bufs[3].ptr,
                                               bufs[4].ptr, 1, out.ptr, T, HQ, HQ, DH, SCALE, 0, tile, gpu.stream)
        gpu.sync()
        return status, gpu.download(out, np.uint16, (T, HQ * DH))

    status, _ = call(PAIR)
    assert status == UNSUPPORTED
    s_auto, auto = call(0)
    s_one, one = call(WGMMA)
    assert s_auto == 0 and s_one == 0 and np.isfinite(bf16.from_bits(one)).all()
    assert np.array_equal(auto, one)


def test_wgmma_refuses_causal(gpu, rng):
    wgmma_or_skip(gpu)
    case = make_case(rng, [65])
    q, k, proj, gate = (gpu.upload(a) for a in (case.q, case.k, case.proj, case.gate))
    cu, out = gpu.upload(case.cu_seqlens), gpu.empty(case.T * HQ * DH * 2)
    for tile in (WGMMA, PAIR):
        status = gpu.lib.raw.cs1_attention_gated_tiled(q.ptr, k.ptr, proj.at(V_OFFSET * 2), LDV, gate.ptr, cu.ptr,
                                                       1, out.ptr, case.T, HQ, HK, DH, SCALE, 1, tile, gpu.stream)
        gpu.sync()
        assert status == UNSUPPORTED
    assert (gpu.download(out, np.uint16, (case.T, HQ * DH)) == 0xFFFF).all(), "a refused call wrote to the output"


def test_tile_policy_on_this_device(gpu):
    major, minor = gpu.ffi.new("int *"), gpu.ffi.new("int *")
    sms, mem = gpu.ffi.new("int *"), gpu.ffi.new("size_t *")
    device = gpu.ffi.new("int *")
    gpu.lib.cs1_get_device(device)
    gpu.lib.cs1_device_info(device[0], major, minor, sms, mem)
    cc = (major[0], minor[0])
    wide_on_sm90 = re.search(r"kWideTileOnSm90\s*=\s*true", POLICY_HEADER.read_text()) is not None
    wide_arch = cc == (8, 9) or cc[0] == 12 or (cc[0] == 9 and wide_on_sm90)
    got = {rows: tile_rows_for(gpu, rows) for rows in (1, 639, 640, 4097)}
    print(f"sm_{cc[0]}{cc[1]}: tile rows {got}")
    assert got[1] == 64 and got[639] == 64
    assert got[640] == got[4097] == (128 if wide_arch else 64)
    assert gpu.lib.raw.cs1_attention_tile_rows(-1, gpu.ffi.new("int32_t *")) == SHAPE
    assert gpu.lib.raw.cs1_attention_tile_rows(10, gpu.ffi.NULL) == NULL


def test_error_statuses_launch_nothing(gpu, rng):
    case = make_case(rng, [65])
    T = case.T
    q, k, proj, gate = (gpu.upload(a) for a in (case.q, case.k, case.proj, case.gate))
    cu = gpu.upload(case.cu_seqlens)
    out = gpu.empty(T * HQ * DH * 2)
    v = proj.at(V_OFFSET * 2)
    raw, null = gpu.lib.raw, gpu.ffi.NULL
    good = dict(q=q.ptr, k=k.ptr, v=v, ldv=LDV, gate=gate.ptr, cu=cu.ptr, n=1, out=out.ptr, T=T, Hq=HQ, Hk=HK,
                Dh=DH, causal=1, tile=0)

    def call(**changes):
        a = good | changes
        return raw.cs1_attention_gated_tiled(a["q"], a["k"], a["v"], a["ldv"], a["gate"], a["cu"], a["n"], a["out"],
                                             a["T"], a["Hq"], a["Hk"], a["Dh"], SCALE, a["causal"], a["tile"],
                                             gpu.stream)

    assert call(Dh=128) == UNSUPPORTED
    assert call(gate=null) == NULL
    assert call(q=null) == NULL
    assert call(cu=null) == NULL
    assert call(q=q.at(2)) == ALIGNMENT
    assert call(v=proj.at(V_OFFSET * 2 + 8)) == ALIGNMENT
    assert call(out=out.at(4)) == ALIGNMENT
    assert call(ldv=LDV - 4) == ALIGNMENT
    assert call(Hk=3) == SHAPE               # 16 % 3 != 0
    assert call(ldv=HK * DH - 8) == SHAPE    # a v row must hold every kv head
    assert call(T=-1) == SHAPE
    assert call(n=-1) == SHAPE
    assert call(tile=96) == SHAPE
    assert call(causal=2) == SHAPE
    # empty work: success without touching anything, even with null pointers
    assert call(T=0, q=null, k=null, v=null, gate=null, cu=null, out=null) == 0
    assert raw.cs1_attention_gated(null, null, null, LDV, null, null, 0, null, 0, HQ, HK, DH, SCALE, gpu.stream) == 0
    assert raw.cs1_attention_gated_bidirectional(q.ptr, k.ptr, v, LDV, null, cu.ptr, 1, out.ptr, T, HQ, HK, DH,
                                                 SCALE, gpu.stream) == NULL
    gpu.sync()
    untouched = gpu.download(out, np.uint16, (T, HQ * DH))
    assert (untouched == 0xFFFF).all(), "a rejected call wrote to the output"
