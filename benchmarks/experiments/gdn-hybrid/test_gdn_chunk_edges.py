"""Chunk-edge prompts through cs1_gdn_prefill (written with the 076cada restructure; valid for any implementation):
prompts of 1, 2 and 3 chunks, partial last chunks, 1-row and empty prompts, a whole padding chunk at the end; each
prompt of the packed call must equal its own separate call bit for bit and the float64 recurrence within the GDN
tolerance. The experiment's run.sh copies this file to tests/gpu/ on the device (it imports test_gdn's helpers)."""

from __future__ import annotations

import numpy as np
from test_gdn import D, check_prefill, packed_recurrence, prefill_inputs, run_prefill


def test_prefill_chunk_edge_prompts_equal_separate_calls(cs1, gpu, rng):
    h, hk = 32, 16
    lengths = [64, 128, 192, 1, 1, 1, 129, 0, 2, 255, 256, 257]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + 70
    bits, ld, g, beta, q, k, v = prefill_inputs(rng, t, h, hk)
    got = run_prefill(cs1, gpu, bits, ld, g, beta, cu, t, h, hk)
    assert np.all(got[cu[-1]:] == 0), "padding rows are not zero"
    ref = packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    check_prefill(f"chunk-edge prompts {lengths}", got[: cu[-1]], ref[: cu[-1]])
    for a, b in zip(cu[:-1], cu[1:], strict=True):
        if b == a:
            continue
        alone = run_prefill(cs1, gpu, bits[a:b].copy(), ld, g[a:b].copy(), beta[a:b].copy(), [0, b - a], int(b - a),
                            h, hk)
        assert np.array_equal(alone, got[a:b]), f"prompt rows {a}:{b} differ from a separate call"
