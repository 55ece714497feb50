"""The read-out against decision-protocol.md §2: fp32 softmax, answer formulas, the worked example, wide choice.

Tolerances: fp32 softmax vs a float64 reference, 2e-6 absolute per probability; derived binary64 values (confidence,
score, wide-choice mixing) vs hand-computed numbers, 1e-9 when the inputs are exact, 1e-6 when they pass through fp32.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from startlux_native import readout

RNG_SEED = 20261010


def softmax64(z: np.ndarray, t: float) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64) / t
    e = np.exp(z - z.max())
    return e / e.sum()


def run_to_end(gen, probs_of_pass):
    """Drive a wide-choice generator; returns (p, finalists, list of rounds, each a list of passes)."""
    rounds = []
    passes = next(gen)
    try:
        while True:
            rounds.append(passes)
            passes = gen.send([probs_of_pass(ps) for ps in passes])
    except StopIteration as stop:
        p, final = stop.value
    return p, final, rounds


# ---- probabilities ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 3, 7, 25, 26])
@pytest.mark.parametrize("temperature", [0.37, 1.0, 1.9924, 5.0])
def test_fp32_softmax_matches_float64_reference(n, temperature):
    rng = np.random.default_rng(RNG_SEED + n)
    logits = (rng.standard_normal(26) * 6 + 30).astype(np.float32)  # offset: stability must not depend on it
    p = readout.probabilities(logits, n, temperature)
    ref = softmax64(logits[:n], temperature)
    err = float(np.abs(p.astype(np.float64) - ref).max())
    print(f"n={n} T={temperature} max |p - p64| = {err:.3g}")
    assert p.dtype == np.float32 and p.shape == (n,)
    assert err < 2e-6
    assert abs(float(p.astype(np.float64).sum()) - 1.0) < 1e-6
    assert int(np.argmax(p)) == int(np.argmax(logits[:n]))  # temperature never changes the argmax


def test_softmax_ignores_letters_beyond_n_and_survives_huge_logits():
    logits = np.array([1e4, 1e4 - 1.0, -1e4] + [np.float32(3e38)] * 23, dtype=np.float32)
    p = readout.probabilities(logits, 3, 1.0)
    ref = softmax64(logits[:3], 1.0)
    assert np.all(np.isfinite(p)) and np.abs(p - ref).max() < 2e-6


# ---- answers ---------------------------------------------------------------------------------------------------

def test_worked_example_choice():
    """§2.4: p = 0.877 / 0.005 / 0.118 -> billing, confidence (3 * 0.877 - 1) / 2 = 0.8155 (0.816 displayed)."""
    p = np.array([0.877, 0.005, 0.118], dtype=np.float32)
    answer = readout.choice_answer(["billing", "shipping", "technical"], p)
    assert answer["choice"] == "billing"
    assert abs(answer["confidence"] - 0.8155) < 1e-6 and round(answer["confidence"], 3) in (0.815, 0.816)
    assert list(answer["probabilities"]) == ["billing", "shipping", "technical"]
    assert all(type(v) is float for v in answer["probabilities"].values())
    assert type(answer["confidence"]) is float


def test_worked_example_score_from_logits():
    """§2.4: p = [0.116, 0.433, 0.451] -> score 1.335, m = 2, sum p|i-2| = 0.665, D = 2/3, confidence 0.0025."""
    target = np.array([0.116, 0.433, 0.451])
    t = 1.9924
    logits = np.zeros(26, dtype=np.float32)
    logits[:3] = (np.log(target) * t).astype(np.float32)
    answer = readout.score_answer(["cosmetic", "annoying", "blocks the customer"], readout.probabilities(logits, 3, t))
    print("score", answer["score"], "confidence", answer["confidence"])
    assert abs(answer["score"] - 1.335) < 1e-6
    assert abs(answer["confidence"] - 0.0025) < 1e-5  # the docs display 0.002
    assert answer["legend"] == {"0": "cosmetic", "1": "annoying", "2": "blocks the customer"}
    assert list(answer["probabilities"]) == ["0", "1", "2"]


def test_noul_is_probability_of_yes():
    logits = np.zeros(26, dtype=np.float32)
    logits[0], logits[1] = math.log(0.635), math.log(0.365)
    answer = readout.noul_answer(readout.probabilities(logits, 2, 1.0))
    assert set(answer) == {"type", "noul"} and answer["type"] == "noul"
    assert abs(answer["noul"] - 0.635) < 1e-6 and type(answer["noul"]) is float


@pytest.mark.parametrize("p, choice, confidence", [
    ([0.25, 0.25, 0.25, 0.25], "a", 0.0),           # all tied: first listed, uniform -> 0
    ([0.1, 0.45, 0.45], "b", (3 * 0.45 - 1) / 2),   # tie between b and c -> b
    ([0.5, 0.5], "a", 0.0),
    ([0.0, 1.0], "b", 1.0),
    ([0.75, 0.25], "a", 0.5),
])
def test_choice_ties_and_confidence(p, choice, confidence):
    answer = readout.choice_answer("abcd"[:len(p)], np.array(p, dtype=np.float64))
    assert answer["choice"] == choice and abs(answer["confidence"] - confidence) < 1e-12


def test_choice_confidence_formula_edges():
    assert readout.choice_confidence(0.3, 1) == 1.0
    assert readout.choice_confidence(0.2, 4) == 0.0  # below 1/n clamps to 0
    assert readout.choice_confidence(1.0000001, 3) == 1.0


@pytest.mark.parametrize("p, score, confidence", [
    ([0.3, 0.7], 0.7, 1 - 0.3 / 0.5),                               # D(2) = 0.5
    ([1.0, 0.0, 0.0], 0.0, 1.0),
    ([0.1, 0.2, 0.7], 1.6, 1 - (0.1 * 2 + 0.2) / (2 / 3)),          # D(3) = 2/3
    ([0.2, 0.3, 0.5], 1.3, 0.0),                                     # 1 - 0.7 / (2/3) < 0 clamps
    ([0.1] * 10, 4.5, 0.0),                                          # D(10) = 2.5, m = 0: 1 - 4.5 / 2.5 < 0
    ([0.0] * 4 + [0.6, 0.4] + [0.0] * 4, 4.4, 1 - 0.4 / 2.5),
])
def test_score_formula(p, score, confidence):
    answer = readout.score_answer([f"l{i}" for i in range(len(p))], np.array(p))
    assert abs(answer["score"] - score) < 1e-12 and abs(answer["confidence"] - confidence) < 1e-12


def test_score_legend_keeps_the_original_items():
    legend = [{"label": "low", "max": 1.0}, ["mid", 2], "high"]
    answer = readout.score_answer(legend, np.array([0.2, 0.3, 0.5], dtype=np.float32))
    assert answer["legend"] == {"0": legend[0], "1": legend[1], "2": "high"}
    assert answer["legend"]["0"] is legend[0]


def test_shortcut():
    assert readout.shortcut_answer("only") == {"type": "choice", "choice": "only", "confidence": 1.0,
                                               "probabilities": {"only": 1.0}}


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 26), st.floats(0.2, 5.0), st.integers(0, 2**32 - 1))
def test_answers_are_well_formed_for_random_logits(n, t, seed):
    logits = (np.random.default_rng(seed).standard_normal(26) * 8).astype(np.float32)
    p = readout.probabilities(logits, n, t)
    assert abs(float(p.astype(np.float64).sum()) - 1.0) < 1e-6
    c = readout.choice_answer([f"o{i}" for i in range(n)], p)
    assert 0.0 <= c["confidence"] <= 1.0 and c["choice"] == f"o{int(np.argmax(p))}"
    if n <= 10:
        s = readout.score_answer(list(range(n)), p)
        assert -1e-6 <= s["score"] <= n - 1 + 1e-6 and 0.0 <= s["confidence"] <= 1.0


# ---- wide choice -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, sizes", [
    (27, [14, 13]), (50, [25, 25]), (51, [17, 17, 17]), (100, [25] * 4), (255, [24, 24] + [23] * 9),
    (33, [17, 16]),
])
def test_wide_groups_examples(n, sizes):
    groups = readout.wide_groups(n, 25)
    assert [b - a for a, b in groups] == sizes
    assert groups[0][0] == 0 and groups[-1][1] == n
    assert all(groups[i][1] == groups[i + 1][0] for i in range(len(groups) - 1))


@given(st.integers(27, 255), st.integers(2, 26))
def test_wide_groups_properties(n, g):
    sizes = [b - a for a, b in readout.wide_groups(n, g)]
    assert len(sizes) == math.ceil(n / g) and sum(sizes) == n and max(sizes) <= g
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_finalists_stable_and_in_group_order():
    p1 = np.array([0.2, 0.5, 0.2, 0.1, 0.3, 0.3, 0.4], dtype=np.float32)
    assert readout.finalists([(0, 4), (4, 7)], p1, 2) == [1, 0, 6, 4]
    assert readout.finalists([(0, 4), (4, 7)], p1, 3) == [1, 0, 2, 6, 4, 5]


def test_combine_hand_computed():
    p1 = np.array([0.7, 0.3, 0.4, 0.6])
    p = readout.combine(p1, [0, 3], np.array([0.2, 0.8]), 0.1)
    expected = [0.18, 0.1 * 0.3 / 0.7, 0.1 * 0.4 / 0.7, 0.72]
    assert np.abs(p - expected).max() < 1e-12


def test_combine_with_no_non_finalist_mass():
    p = readout.combine(np.array([0.5, 0.0, 0.5, 0.0]), [0, 2], np.array([0.25, 0.75]), 1e-3)
    assert np.abs(p - [0.25, 0.0, 0.75, 0.0]).max() < 1e-12


def reference_wide(scores: np.ndarray, t: float, g: int, k: int, rho: float) -> np.ndarray:
    """A float64 re-statement of §2.6 over option scores (a pass's probabilities = softmax of its scores / T)."""
    n = len(scores)
    n_g = -(-n // g)
    size, extra = divmod(n, n_g)
    bounds, start = [], 0
    for i in range(n_g):
        bounds.append((start, start + size + (i < extra)))
        start = bounds[-1][1]
    p1 = np.concatenate([softmax64(scores[a:b], t) for a, b in bounds])
    final = []
    for a, b in bounds:
        final += sorted(range(a, b), key=lambda j: -p1[j])[:k]
    pf = reference_wide(scores[final], t, g, k, rho) if len(final) > 26 else softmax64(scores[final], t)
    rest = [j for j in range(n) if j not in final]
    mass = p1[rest].sum() or 1.0
    q = np.zeros(n)
    q[final] = pf * (1 - rho)
    q[rest] = rho * p1[rest] / mass
    return q / q.sum()


@pytest.mark.parametrize("n, n_rounds, round_sizes", [
    (27, 2, [[14, 13], [6]]),
    (100, 2, [[25] * 4, [12]]),
    (255, 3, [[24, 24] + [23] * 9, [17, 16], [6]]),
])
def test_wide_choice_rounds_against_reference(n, n_rounds, round_sizes):
    rng = np.random.default_rng(RNG_SEED + n)
    scores = (rng.standard_normal(n) * 3).astype(np.float32)
    t = 1.37

    def probs_of_pass(ps):
        assert 2 <= len(ps) <= 26 and len(set(ps)) == len(ps)
        return readout.probabilities(scores[ps], len(ps), t)

    p, final, rounds = run_to_end(readout.wide_choice(n, 25, 3, 1e-3), probs_of_pass)
    assert len(rounds) == n_rounds
    assert [[len(ps) for ps in r] for r in rounds] == round_sizes
    assert rounds[-1] == [final] or n_rounds == 3
    ref = reference_wide(scores, t, 25, 3, 1e-3)
    err = float(np.abs(p - ref).max())
    print(f"n={n}: max |p - ref| = {err:.3g}, finalists {len(final)}")
    assert err < 2e-6
    assert abs(p.sum() - 1.0) < 1e-9 and np.all(p > 0)
    outside = np.setdiff1d(np.arange(n), final)
    assert abs(p[outside].sum() - 1e-3) < 1e-9  # non-finalists share rho
    answer = readout.wide_choice_answer([f"o{i}" for i in range(n)], p, final)
    assert answer["choice"] == f"o{int(np.argmax(p))}" and len(answer["probabilities"]) == n
    assert abs(answer["confidence"] - max(0.0, (n * p.max() - 1) / (n - 1))) < 1e-12


def test_wide_choice_255_recursion_maps_indices_back():
    n = 255
    scores = np.arange(n, dtype=np.float32) % 7  # many ties: stable order matters
    p, final, rounds = run_to_end(readout.wide_choice(n, 25, 3, 1e-3),
                                  lambda ps: readout.probabilities(scores[ps], len(ps), 1.0))
    assert sorted(sum(rounds[0], [])) == list(range(n))
    assert len(final) == 33 and sum(rounds[1], []) == final  # round 2 covers the finalists, in F order
    assert set(rounds[2][0]) <= set(final) and len(rounds[2][0]) == 6
    assert np.abs(p - reference_wide(scores, 1.0, 25, 3, 1e-3)).max() < 2e-6


def test_wide_choice_tie_breaks():
    ids = [f"o{i}" for i in range(30)]
    p = np.full(30, 0.01)
    p[[5, 2, 20]] = 0.2
    assert readout.wide_choice_answer(ids, p, [20, 5, 2, 9])["choice"] == "o20"   # F order, not request order
    p = np.full(30, 0.02)
    p[[3, 25]] = 0.21
    assert readout.wide_choice_answer(ids, p, [25, 4])["choice"] == "o25"         # finalist before non-finalist
    p = np.full(30, 0.03)
    p[[7, 1]] = 0.065
    assert readout.wide_choice_answer(ids, p, [0, 2])["choice"] == "o1"           # then request order


def test_wide_choice_refuses_a_keep_that_never_narrows():
    gen = readout.wide_choice(30, 25, 25, 1e-3)
    passes = next(gen)
    with pytest.raises(ValueError, match="does not reduce"):
        gen.send([np.full(b - a, 1 / (b - a), dtype=np.float32) for a, b in ((p[0], p[-1] + 1) for p in passes)])
