"""cs1_gdn_conv run kernel (native/gdn_conv.cu): one thread per (run of rows, 8 channels), checked against a numpy
reference and bit for bit against the one-thread-per-element scalar kernel.

The run length depends on T and channels (4 .. 64 rows, a multiple of 4), so the cases below cover runs of 4, 8, 32,
36 and 64 rows, T not a multiple of the run, a channel count whose last 128-group block is partly empty, and packed
prompts (lengths 1, 2, 3 included) whose starts fall inside runs, followed by padding rows at position 0.

Tolerances: within 1 bf16 ulp of silu(fp32 tap sum) evaluated in float64 (the tap sum in fp32 is exact per product,
so float32 adds in tap order reproduce the kernel's); the 16-byte run path and the scalar path are byte-identical.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_gdn import conv_reference  # the one float64 conv reference (fp32 tap sum in kernel order)

from startlux_native import bf16


def packed_positions(rng, t: int, padding: int) -> np.ndarray:
    """Prompts of random lengths (some of 1, 2, 3 rows) filling t - padding rows, then padding rows at position 0."""
    lengths, left = [], t - padding
    while left > 0:
        n = int(min(left, rng.choice([1, 2, 3, int(rng.integers(4, 90))])))
        lengths.append(n)
        left -= n
    pos = [np.arange(n, dtype=np.int32) for n in lengths] + [np.zeros(padding, np.int32)]
    return np.concatenate(pos)


def run_conv(gpu, x_bits, ld, w_bits, positions, t, channels, byte_offset=0):
    d_x = gpu.empty(x_bits.nbytes + 16, poison=False)
    gpu.lib.cs1_upload(d_x.at(byte_offset), gpu.ffi.from_buffer(x_bits), x_bits.nbytes, gpu.stream)
    d_w, d_pos = gpu.upload(w_bits), gpu.upload(positions)
    d_out = gpu.empty(t * channels * 2)
    gpu.lib.cs1_gdn_conv(d_x.at(byte_offset), ld, d_w.ptr, gpu.ffi.cast("int32_t *", d_pos.ptr), d_out.ptr, t,
                         channels, gpu.stream)
    return gpu.download(d_out, np.uint16, (t, channels))


@pytest.mark.parametrize("t,channels,padding", [
    (1, 8192, 0),  # run 4, halo rows before row 0
    (7, 8192, 2),  # one partial run of 4
    (65, 1032, 5),  # last channel block holds 1 of 128 groups
    (300, 8192, 0),  # run 8
    (2200, 8192, 17),  # run 36: a run length that is not a power of two
    (4097, 1032, 3),  # run 8 over many rows, 2 channel blocks
    (4097, 4096, 0),  # run 32
    (4500, 8192, 1),  # run 64, last run partial
])
def test_conv_runs(gpu, rng, t, channels, padding):
    ld = channels + 16  # rows of a wider projection
    x = bf16.round_(rng.standard_normal((t, ld)).astype(np.float32))
    w = bf16.round_((0.5 * rng.standard_normal((channels, 4))).astype(np.float32))
    positions = packed_positions(rng, t, padding)
    x_bits, w_bits = bf16.to_bits(x), bf16.to_bits(w)
    vec = run_conv(gpu, x_bits, ld, w_bits, positions, t, channels)
    ref = conv_reference(x[:, :channels], w, positions)
    got = bf16.from_bits(vec).astype(np.float64)
    assert np.isfinite(got).all(), "non-finite output (poison left in place?)"
    err = np.abs(got - ref) / bf16.ulp(ref.astype(np.float32))
    worst = np.unravel_index(int(np.argmax(err)), err.shape)
    print(f"conv runs T={t} ch={channels}: max error {float(err.max()):.3f} bf16 ulp at {worst}")
    assert err.max() <= 1.0
    if t <= 2200:  # the scalar kernel (ld odd) must give the same bytes
        odd_ld = channels + 1
        odd = np.ascontiguousarray(x_bits[:, :odd_ld])
        scalar = run_conv(gpu, odd, odd_ld, w_bits, positions, t, channels)
        diff = int((scalar != vec).sum())
        print(f"conv runs T={t} ch={channels}: {diff} values differ from the scalar path")
        assert diff == 0


def test_conv_runs_misaligned_base_uses_scalar_path(gpu, rng):
    """qkv 2 bytes off a 16-byte boundary: the scalar kernel, identical bytes to the aligned run kernel."""
    t, channels = 130, 1024
    x = bf16.round_(rng.standard_normal((t, channels)).astype(np.float32))
    w_bits = bf16.to_bits(bf16.round_((0.5 * rng.standard_normal((channels, 4))).astype(np.float32)))
    positions = packed_positions(rng, t, 4)
    aligned = run_conv(gpu, bf16.to_bits(x), channels, w_bits, positions, t, channels)
    shifted = run_conv(gpu, bf16.to_bits(x), channels, w_bits, positions, t, channels, byte_offset=2)
    diff = int((aligned != shifted).sum())
    print(f"conv misaligned: {diff} values differ")
    assert np.isfinite(bf16.from_bits(aligned)).all()
    assert diff == 0
