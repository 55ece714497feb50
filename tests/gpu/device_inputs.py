"""Inputs shared by the kernel tests: the awkward row counts every kernel is tested at, the norm epsilon, the 4B's
GEMM weight shapes, and fresh random bf16 data (never zeros: an exact zero becomes 1e-3, so a kernel that skips work
cannot pass by accident)."""

from __future__ import annotations

import numpy as np

from startlux_native import bf16

ROWS = [1, 63, 64, 65, 640, 700, 2048, 4097]
EPS = 1e-6
# (N, K) of the 4B's fused GEMMs: GDN in, attention in, MLP gate|up, GDN out / o_proj, down
GEMM_SHAPES = [(12352, 2560), (10240, 2560), (18432, 2560), (2560, 4096), (2560, 9216)]


def rand_bf16(rng, shape, scale=1.0) -> np.ndarray:
    """bf16 bits of scale * N(0, 1), with no exact zeros."""
    v = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)  # float32 draws: the GEMM weights are big
    v[v == 0] = 1e-3
    return bf16.to_bits(v)


_WEIGHTS: dict[tuple[int, int], np.ndarray] = {}  # one random weight per (N, K) per session: generation is slow


def gemm_weight(rng, N, K) -> np.ndarray:
    """bf16 bits of an [N, K] weight of scale 1/sqrt(K), drawn once per session and shape (first caller's rng)."""
    if (N, K) not in _WEIGHTS:
        _WEIGHTS[(N, K)] = rand_bf16(rng, (N, K), 1.0 / np.sqrt(K))
    return _WEIGHTS[(N, K)]
