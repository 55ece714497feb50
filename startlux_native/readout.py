"""The letter read-out (decision-protocol.md §2): pure functions over float32 letter logits.

Probabilities are an fp32 softmax; the answer fields derived from them (confidence, score, wide-choice mixing) are
computed in binary64 from those fp32 values and returned as Python floats, never rounded (§2.8).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence

import numpy as np

from .backend import N_LETTERS as MAX_OPTIONS

Passes = list[list[int]]  # one pass = option indices (into the question's options) in letter order


def probabilities(logits: np.ndarray, n: int, temperature: float) -> np.ndarray:
    """softmax(z[0:n] / T) in fp32 (§2.2). Returns float32 [n]."""
    z = np.asarray(logits, dtype=np.float32)[:n] / np.float32(temperature)
    e = np.exp(z - z.max())
    return e / e.sum(dtype=np.float32)


def noul_answer(p: np.ndarray) -> dict:
    return {"type": "noul", "noul": float(p[0])}


def choice_confidence(pmax: float, n: int) -> float:
    """TypeSafe's (p_max - 1/n) / (1 - 1/n), clamped to [0, 1]; 1 for n < 2."""
    if n < 2:
        return 1.0
    return min(1.0, max(0.0, (n * pmax - 1.0) / (n - 1)))


def choice_answer(ids: Sequence[str], p: np.ndarray) -> dict:
    probs = [float(x) for x in p]
    best = max(range(len(probs)), key=lambda k: (probs[k], -k))  # ties -> first listed
    return {"type": "choice", "choice": ids[best], "confidence": choice_confidence(probs[best], len(probs)),
            "probabilities": dict(zip(ids, probs, strict=True))}


def score_answer(legend: Sequence, p: np.ndarray) -> dict:
    """s = sum i p_i; confidence = max(0, 1 - sum p_i |i - m| / D), D = mean |i - (n-1)/2|, m = first argmax."""
    probs = [float(x) for x in p]
    n = len(probs)
    m = max(range(n), key=lambda k: (probs[k], -k))
    d = sum(abs(i - (n - 1) / 2) for i in range(n)) / n
    spread = sum(pi * abs(i - m) for i, pi in enumerate(probs))
    confidence = 1.0 if d == 0 else max(0.0, 1.0 - spread / d)
    keys = [str(i) for i in range(n)]
    return {"type": "score", "score": sum(i * pi for i, pi in enumerate(probs)), "confidence": confidence,
            "legend": dict(zip(keys, legend, strict=True)), "probabilities": dict(zip(keys, probs, strict=True))}


def shortcut_answer(option_id: str) -> dict:
    """A one-option choice, answered without the model (§2.5)."""
    return {"type": "choice", "choice": option_id, "confidence": 1.0, "probabilities": {option_id: 1.0}}


# ---- wide choice (§2.6) ----------------------------------------------------------------------------------------

def wide_groups(n: int, group: int) -> list[tuple[int, int]]:
    """Consecutive [start, stop) slices: ceil(n / G) groups, the first `extra` of them one larger."""
    n_groups = math.ceil(n / group)
    size, extra = divmod(n, n_groups)
    out, start = [], 0
    for g in range(n_groups):
        stop = start + size + (1 if g < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def finalists(groups: Sequence[tuple[int, int]], p1: np.ndarray, keep: int) -> list[int]:
    """Per group in order: the `keep` options of highest round-1 probability (stable: ties keep request order)."""
    out: list[int] = []
    for start, stop in groups:
        ranked = sorted(range(start, stop), key=lambda k: -float(p1[k]))
        out.extend(ranked[:keep])
    return out


def combine(p1: np.ndarray, final: Sequence[int], p_final: np.ndarray, residual: float) -> np.ndarray:
    """q_k = pF_k (1 - rho) for finalists, rho p1_k / M for the rest (M = their round-1 mass, 1 if 0); normalised.

    Returns float64 [n]."""
    p1 = np.asarray(p1, dtype=np.float64)
    q = np.empty(len(p1), dtype=np.float64)
    is_final = np.zeros(len(p1), dtype=bool)
    is_final[list(final)] = True
    mass = float(p1[~is_final].sum())
    if mass == 0.0:
        mass = 1.0
    q[~is_final] = residual * p1[~is_final] / mass
    q[list(final)] = np.asarray(p_final, dtype=np.float64) * (1.0 - residual)
    return q / q.sum()


def wide_choice(n: int, group: int, keep: int, residual: float,
                max_options: int = MAX_OPTIONS) -> Generator[Passes, list[np.ndarray], tuple[np.ndarray, list[int]]]:
    """The wide-choice rounds as a generator, so the caller can batch rounds of several questions into one pass.

    Yields the passes of the next round (each a list of option indices, in letter order); must be sent back the
    within-pass probabilities of each pass (same order). Returns (p float64 [n], finalists in F order).
    """
    groups = wide_groups(n, group)
    round1 = yield [list(range(a, b)) for a, b in groups]
    p1 = np.concatenate([np.asarray(p, dtype=np.float32) for p in round1])
    final = finalists(groups, p1, keep)
    if len(final) > max_options:
        if len(final) >= n:  # keep >= group size: recursion would never shrink
            raise ValueError(f"wide_choice keep={keep} does not reduce {n} options (group={group})")
        p_final, _ = yield from _mapped(wide_choice(len(final), group, keep, residual, max_options), final)
    else:
        (p_final,) = yield [list(final)]
    return combine(p1, final, p_final, residual), final


def _mapped(inner: Generator, index: Sequence[int]) -> Generator:
    """Run `inner` (over options 0..len(index)-1) with its pass indices mapped through `index`."""
    try:
        passes = next(inner)
        while True:
            result = yield [[index[i] for i in ps] for ps in passes]
            passes = inner.send(result)
    except StopIteration as stop:
        return stop.value


def wide_choice_answer(ids: Sequence[str], p: np.ndarray, final: Sequence[int]) -> dict:
    """argmax with ties broken by: finalists in F order first, then non-finalists in request order (§2.6 step 6)."""
    probs = [float(x) for x in p]
    finals = set(final)
    order = list(final) + [k for k in range(len(probs)) if k not in finals]
    best = order[0]
    for k in order[1:]:
        if probs[k] > probs[best]:
            best = k
    return {"type": "choice", "choice": ids[best], "confidence": choice_confidence(probs[best], len(probs)),
            "probabilities": dict(zip(ids, probs, strict=True))}
