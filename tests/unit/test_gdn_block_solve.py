"""Lever 68's math (benchmarks/gdn_block_solve.py): a short prompt's gated delta rule as a block-triangular solve over
its chunks equals the token-by-token recurrence (float64, limit 1e-10 relative to max |o|; measured ~4e-15).
Awkward sizes around the chunk edges, mild and strong decay."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.gdn_block_solve import gated_delta_rule_block_solve
from startlux_native.reference import gated_delta_rule_recurrent


@pytest.mark.parametrize("t", [1, 63, 64, 65, 160, 256])
@pytest.mark.parametrize("decay", [0.05, 3.0])
def test_block_solve_matches_the_recurrence(t, decay):
    rng = np.random.default_rng(t * 10 + int(decay))
    q, k = rng.standard_normal((t, 2, 32)), rng.standard_normal((t, 2, 32))
    v = rng.standard_normal((t, 4, 32))
    g = -decay * rng.uniform(0, 1, (t, 4))
    beta = rng.uniform(0.05, 1.0, (t, 4))
    ref, _ = gated_delta_rule_recurrent(q, k, v, g, beta)
    got = gated_delta_rule_block_solve(q, k, v, g, beta)
    err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
    print(f"T={t} decay={decay}: relative error {err:.2e}")
    assert err < 1e-10
