"""Two builds of libqwen3_5_cuda.so, byte for byte: the letter logits of the same prompts through each.

    python -m benchmarks.build_parity OLD.so NEW.so CHECKPOINT [--lengths 1,63,64,65,640,4097]

For a change meant to leave every result unchanged (a refactor): the prompts (random ids, seed 0) run packed in one
call and each alone, eagerly, through a CudaBackend on each library (one after the other, on the same device).
Prints the largest difference; exit 0 only when every logit has the same bytes.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from startlux_native import abi
from startlux_native.checkpoint import load_checkpoint
from startlux_native.cuda_backend import CudaBackend


def logits(library: str, ckpt, rows: list[np.ndarray]) -> list[np.ndarray]:
    lib = abi.load(library)
    print(f"{library}: {lib.build_info()}", flush=True)
    with CudaBackend(ckpt, library=lib, max_tokens=sum(r.size for r in rows), max_rows=len(rows),
                     graphs=False) as be:
        return [be.letter_logits(rows), *(be.letter_logits([r]) for r in rows)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("checkpoint")
    p.add_argument("--lengths", default="1,63,64,65,640,4097")
    args = p.parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint)
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in args.lengths.split(",")]
    rows = [rng.integers(100, min(ckpt.config.vocab_size, 200_000), n).astype(np.int32) for n in lengths]
    old, new = logits(args.old, ckpt, rows), logits(args.new, ckpt, rows)
    same = all(a.tobytes() == b.tobytes() for a, b in zip(old, new, strict=True))
    diff = max(float(np.abs(a - b).max()) for a, b in zip(old, new, strict=True))
    print(f"lengths {lengths}, packed and alone: max |dlogit| {diff:.3g}, "
          f"{'bit-identical' if same else 'DIFFERENT BYTES'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
