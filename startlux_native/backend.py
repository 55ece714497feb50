"""The seam between the engine and a forward-pass implementation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

N_LETTERS = 26


class Backend(Protocol):
    """A forward pass that maps token-id rows to the 26 letter logits at each row's last position.

    All rows of one call run as variable-length rows of one forward pass; padding, if any, must not change a
    result. Returns float32 [len(rows), 26]. Raises BackendError on internal failure.
    """

    name: str

    def letter_logits(self, rows: Sequence[np.ndarray]) -> np.ndarray: ...

    def describe(self) -> dict: ...
