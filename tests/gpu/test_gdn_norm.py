"""cs1_gdn_prefill_norm (native/gdn.cu, lever 65): the GDN prefill and the layer's gated RMSNorm in one call, checked
byte for byte against cs1_gdn_prefill followed by cs1_gated_rms_norm on the same inputs (each of those two is
checked against float64 references in test_gdn.py and test_norm.py).

Above 256 rows (and at every length with CS1_GDN_SPLIT_OUT=1) the prefill's out kernel normalises its own O tile
(gdn_out_norm_mma_kernel) and o is not touched; up to 256 rows the call runs the prefill into o and then the norm
kernel. Inputs: q|k|v rows from test_gdn.prefill_inputs with z in the same rows after q|k|v (as in the forward's
projection row) and 8 NaN columns after z, so a read outside q|k|v|z shows up. Every output buffer starts
NaN-poisoned (0xFF bytes).
Tolerances: none. The normed rows inside prompts must have identical bytes; rows outside every prompt must be zero
(+0 where the out kernel runs, the two calls may give -0); o must be untouched where the out kernel normalises,
else identical to the two calls' o. Each comparison prints the number of values that differ (0).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_gdn import ALIGNMENT, NULL, SHAPE, D, f32p, i32p, prefill_inputs, workspace_bytes

from startlux_native import bf16

SCALE = D**-0.5
EPS = 1e-6
POISON = 0xFFFF  # bf16 bits of the 0xFF poison
WALK_MAX_ROWS = 640  # native/gdn.cu kWalkOutMaxRows: above it the out kernel runs (and folds the norm)


def norm_inputs(rng, lengths, pad_rows, h, hk):
    """(bits [T, ld] with q|k|v, z [H*128] and 8 NaN columns; ld; g; beta; cu; first column of z)."""
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + pad_rows
    width = (2 * hk + h) * D
    bits, ld, g, beta, *_ = prefill_inputs(rng, t, h, hk, extra_cols=h * D + 8)
    z = rng.standard_normal((t, h * D), dtype=np.float32) * np.float32(2.0)
    bits[:, width:width + h * D] = bf16.to_bits(z)
    return bits, ld, g, beta, cu, width


def run_both(cs1, gpu, rng, lengths, pad_rows, h, hk, round_weighted=1):
    """(fused out, fused o, two-call out, two-call o, T, rows inside prompts) as bf16 bits [T, H*128]."""
    bits, ld, g, beta, cu, zcol = norm_inputs(rng, lengths, pad_rows, h, hk)
    t, n = int(bits.shape[0]), len(cu) - 1
    w = rng.uniform(0.5, 1.5, D).astype(np.float32)
    if round_weighted:  # the model's weights: bf16 values held as fp32
        w = bf16.round_(w)
    ws = workspace_bytes(cs1, t, n, h)
    d_qkv, d_g, d_b, d_cu, d_w = (gpu.upload(bits), gpu.upload(g), gpu.upload(beta), gpu.upload(cu),
                                  gpu.upload(w))
    z = d_qkv.at(2 * zcol)
    fg, fb, icu, fw = f32p(gpu, d_g), f32p(gpu, d_b), i32p(gpu, d_cu), f32p(gpu, d_w)
    nbytes = t * h * D * 2
    o1, out1, o2, out2, d_ws = (gpu.empty(nbytes), gpu.empty(nbytes), gpu.empty(nbytes), gpu.empty(nbytes),
                                gpu.empty(ws))
    assert cs1.raw.cs1_gdn_prefill_norm(d_qkv.ptr, ld, fg, fb, icu, n, z, ld, fw, round_weighted, EPS, o1.ptr,
                                        out1.ptr, d_ws.ptr, ws, t, h, hk, SCALE, gpu.stream) == 0
    assert cs1.raw.cs1_gdn_prefill(d_qkv.ptr, ld, fg, fb, icu, n, o2.ptr, d_ws.ptr, ws, t, h, hk, SCALE,
                                   gpu.stream) == 0
    assert cs1.raw.cs1_gated_rms_norm(o2.ptr, z, ld, fw, round_weighted, out2.ptr, t, h, D, EPS, gpu.stream) == 0
    gpu.sync()
    get = lambda b: gpu.download(b, np.uint16, (t, h * D))  # noqa: E731
    return get(out1), get(o1), get(out2), get(o2), t, int(cu[-1])


def check_same(label, out1, o1, out2, o2, t, real, folded):
    differ = int(np.count_nonzero(out1[:real] != out2[:real]))
    print(f"{label}: T={t} prompt rows {real}, {'out kernel + norm' if folded else 'walk, then the norm kernel'}: "
          f"{differ} normed values differ")
    assert differ == 0, f"{label}: the normed prompt rows differ from cs1_gdn_prefill + cs1_gated_rms_norm"
    pad = out1[real:]
    assert np.all((pad & 0x7FFF) == 0), f"{label}: padding rows of out are not zero"
    if folded:
        assert np.all(o1 == POISON), f"{label}: o was written although the out kernel normalised its tile"
    else:
        assert o1.tobytes() == o2.tobytes(), f"{label}: o differs from cs1_gdn_prefill's"


@pytest.mark.parametrize("lengths,pad_rows,h,hk", [
    ([1], 0, 32, 16), ([63], 1, 32, 16), ([64], 0, 32, 16), ([65], 0, 4, 2), ([160], 0, 32, 16),
    ([256], 0, 32, 16), ([257], 0, 32, 16), ([300], 40, 8, 2), ([640], 0, 32, 16), ([641], 0, 32, 16),
    ([4097], 0, 32, 16),
    ([1, 64, 65, 30, 200], 70, 32, 16), ([100, 0, 50], 10, 4, 4), ([0], 70, 4, 2), ([513, 1, 7], 3, 4, 2),
])
def test_prefill_norm_equals_the_two_calls(cs1, gpu, rng, lengths, pad_rows, h, hk):
    out1, o1, out2, o2, t, real = run_both(cs1, gpu, rng, lengths, pad_rows, h, hk)
    check_same(f"{lengths}+{pad_rows} H/HK {h}/{hk}", out1, o1, out2, o2, t, real, t > WALK_MAX_ROWS)


@pytest.mark.parametrize("t", [65, 700])
def test_prefill_norm_unrounded_weights(cs1, gpu, rng, t):
    """round_weighted 0 (fp32 weights: n' = w * n kept in fp32), on both paths."""
    out1, o1, out2, o2, t, real = run_both(cs1, gpu, rng, [t], 0, 32, 16, round_weighted=0)
    check_same(f"round_weighted 0, T={t}", out1, o1, out2, o2, t, real, t > WALK_MAX_ROWS)


_SPLIT_OUT_CHILD = """
import sys
import numpy as np
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests/gpu"]
from conftest import Gpu
from startlux_native import abi
from test_gdn_norm import check_same, run_both
gpu = Gpu(abi.load())
for lengths, pad in (([1], 0), ([65], 3), ([1, 63, 64, 30], 7), ([160], 0)):
    out1, o1, out2, o2, t, real = run_both(gpu.lib, gpu, np.random.default_rng(len(lengths)), lengths, pad, 32, 16)
    check_same(f"CS1_GDN_SPLIT_OUT=1 {lengths}", out1, o1, out2, o2, t, real, True)
"""


def test_prefill_norm_folds_at_short_lengths_with_the_out_kernel(cs1):
    """CS1_GDN_SPLIT_OUT=1 (read once per process, so in a child) runs the out kernel at every length: the norm is
    folded there too, at 1-160 rows, against the two calls on the same path."""
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "CS1_GDN_SPLIT_OUT": "1"}
    r = subprocess.run([sys.executable, "-c", _SPLIT_OUT_CHILD, root], env=env, timeout=300, capture_output=True,
                       text=True)
    print(r.stdout, r.stderr)
    assert r.returncode == 0


def test_prefill_norm_rejects_bad_arguments(cs1, gpu, rng):
    h, hk = 4, 2
    bits, ld, g, beta, cu, zcol = norm_inputs(rng, [65], 0, h, hk)
    t = int(bits.shape[0])
    ws = workspace_bytes(cs1, t, 1, h)
    d_qkv, d_g, d_b, d_cu = gpu.upload(bits), gpu.upload(g), gpu.upload(beta), gpu.upload(cu)
    d_w = gpu.upload(np.ones(D + 4, np.float32))
    d_o, d_out, d_ws = gpu.empty(t * h * D * 2 + 16), gpu.empty(t * h * D * 2 + 16), gpu.empty(ws)
    fg, fb, icu = f32p(gpu, d_g), f32p(gpu, d_b), i32p(gpu, d_cu)
    z0, w0 = d_qkv.at(2 * zcol), f32p(gpu, d_w)

    def status(z=z0, ldz=ld, w=w0, out=d_out.ptr, t_=t):
        return cs1.raw.cs1_gdn_prefill_norm(d_qkv.ptr, ld, fg, fb, icu, 1, z, ldz, w, 1, EPS, d_o.ptr, out,
                                            d_ws.ptr, ws, t_, h, hk, SCALE, gpu.stream)

    assert status() == 0
    assert status(z=cs1.ffi.NULL) == NULL
    assert status(w=cs1.ffi.NULL) == NULL
    assert status(out=cs1.ffi.NULL) == NULL
    assert status(ldz=h * D - 8) == SHAPE
    assert status(ldz=ld + 4) == ALIGNMENT
    assert status(z=d_qkv.at(2 * zcol + 2)) == ALIGNMENT
    assert status(w=cs1.ffi.cast("float *", d_w.at(4))) == ALIGNMENT
    assert status(out=d_out.at(8)) == ALIGNMENT
    assert status(t_=0, out=cs1.ffi.NULL) == 0  # empty work launches nothing
    gpu.sync()
