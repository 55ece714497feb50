"""benchmarks/gdn_rounding.py, the float64 model of the GDN prefill's tf32 rounding: its exact form equals the
token-by-token recurrence (limit 1e-6 of max |ref|, fp32 storage only), every rounded form stays below the bf16
store's own 2^-9, and the two designs for prep's solve on tensor cores (lever 87's) stay near the kernels' present
form. Fresh random inputs at awkward sizes, one with weak decay."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import gdn_rounding as gr


@pytest.mark.parametrize("case", ["1", "63", "65", "160", "200w"])
def test_rounding_model_forms(case):
    weak = case.endswith("w")
    t = int(case.rstrip("w"))
    rng = np.random.default_rng(np.random.SeedSequence().entropy)
    _, _, g, beta, q, k, v = gr.tg.prefill_inputs(rng, t, 2, 1, weak=weak)
    g64, b64 = g.astype(np.float64), beta.astype(np.float64)
    ref = gr.tg.recurrence(q, k, v, g64, b64, gr.D**-0.5)
    top = np.abs(ref).max()
    errs = {}
    for name, (ro, rs, how) in gr.FORMS.items():
        got = gr.chunked(q, k, v, g64, b64, gr.D**-0.5, ro, rs, how)
        assert np.isfinite(got).all(), name
        errs[name] = np.abs(got - ref).max() / top
    print(f"T={case}: " + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()))
    assert errs["exact"] < 1e-6
    assert all(e < 2.0**-9 for n, e in errs.items() if n != "o-bf16")  # o-bf16 rounds O's operands to bf16
    assert errs["blk-tf32"] < 2 * errs["all-1term"] + 1e-6
    assert errs["inv-tf32"] < 3 * errs["all-1term"] + 1e-6
    assert errs["inv16"] < 3 * errs["all-1term"] + 1e-6
    assert errs["blk16"] < 3 * errs["all-1term"] + 1e-6
