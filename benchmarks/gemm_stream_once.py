"""One cs1_gemm_stream call (after one warm-up call) per configuration given, for profilers (ncu, nsys).

    python benchmarks/gemm_stream_once.py M N K BLOCK_N SPLITS CLUSTER [M N K BLOCK_N SPLITS CLUSTER ...]

Random bf16 operands (never zero); the weights are a fresh buffer per configuration, so they come from HBM.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gemm_shapes import Bench, random_bf16  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 6:
        print(__doc__, file=sys.stderr)
        return 2
    from startlux_native import abi

    lib = abi.load(None)
    bench = Bench(lib, 0, 0, 0)
    rng = np.random.default_rng(0)
    for i in range(0, len(argv), 6):
        M, N, K, bn, s, c = (int(v) for v in argv[i:i + 6])
        x, w, y = bench.alloc(M * K * 2), bench.alloc(N * K * 2), bench.alloc(M * N * 2)
        bench.upload(x, random_bf16(rng, (M, K), 1.0))
        bench.upload(w, random_bf16(rng, (N, K), 1.0 / np.sqrt(K)))
        for _ in range(2):
            lib.cs1_gemm_stream(bench.handles["default"], x, K, w, y, N, M, N, K, bn, s, c, bench.stream)
        lib.cs1_gemm(bench.handles["default"], x, K, w, y, N, M, N, K, bench.stream)
        lib.cs1_stream_sync(bench.stream)
    bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
