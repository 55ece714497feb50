"""Inputs shared by the kernel tests: the awkward row counts every kernel is tested at, the norm epsilon, and fresh
random bf16 data (never zeros: an exact zero becomes 1e-3, so a kernel that skips work cannot pass by accident)."""

from __future__ import annotations

import numpy as np

from startlux_native import bf16

ROWS = [1, 63, 64, 65, 640, 700, 2048, 4097]
EPS = 1e-6


def rand_bf16(rng, shape, scale=1.0) -> np.ndarray:
    """bf16 bits of scale * N(0, 1), with no exact zeros."""
    v = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)  # float32 draws: the GEMM weights are big
    v[v == 0] = 1e-3
    return bf16.to_bits(v)
