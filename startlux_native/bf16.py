"""bfloat16 as raw uint16 bit patterns in numpy (numpy has no bf16 dtype; safetensors stores raw bits)."""

from __future__ import annotations

import numpy as np


def to_bits(x: np.ndarray) -> np.ndarray:
    """float -> bf16 bits (uint16), round to nearest even; NaN stays NaN."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = np.where(nan, np.uint16(0x7FC0), rounded)
    return rounded


def from_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) -> float32, exact."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_(x: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bf16 value, returned as float32."""
    return from_bits(to_bits(x))


def ulp(x: np.ndarray) -> np.ndarray:
    """Size of one bf16 unit in the last place at |x| (float32), for tolerance checks."""
    a = np.abs(np.asarray(x, dtype=np.float32))
    e = np.floor(np.log2(np.maximum(a, np.float32(2.0**-126))))
    return np.exp2(e - 7).astype(np.float32)
