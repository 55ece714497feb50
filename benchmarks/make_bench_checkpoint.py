"""Write a random-weight checkpoint of the EXACT StartLux-Decision v1.1 4B text shape, for latency work without
the real (CC BY-NC) weights.

    python benchmarks/make_bench_checkpoint.py OUTDIR [--seed 0] [--layers 32] [--hidden 2560] [--max-shard-gb 2]

Shape (defaults): hidden 2560, 32 layers (full attention at 3, 7, ..., 31), 16/4 heads x 256, GDN 16/32 heads x
128, MLP 9216, vocab 248320, tied embedding; bf16 weights with fp32 A_log (negative) and linear_attn.norm.weight;
names under `model.language_model.` with a Qwen3_5ForConditionalGeneration config.json; tokenizer.json from
startlux_native.tokenizer.cached_tokenizer_json(); a decision_config.json; and RANDOM_WEIGHTS.json, the marker
that benchmarks/metadata.py turns into checkpoint_revision = "random weights (...)".

Weights are never zero; linear weights have std 1/sqrt(fan_in) (0.0198 at fan-in 2560), zero-centred norm weights
are near 0 (so 1 + w is near 1), which keeps activations finite through 32 layers. Tensors are generated and
written one at a time in blocks (startlux_native.tiny), so memory stays small; shards are sized so that none
exceeds --max-shard-gb. --layers N (and --hidden H for a narrow model) make a smoke-sized variant; H != 2560 uses
the tiny model's head layout.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from startlux_native.checkpoint import ModelConfig
from startlux_native.tiny import FOUR_B, make_tiny_checkpoint, tiny_config_json

MARKER = "RANDOM_WEIGHTS.json"  # benchmarks/metadata.py reads it
NAME = "startlux-native/random-weights-qwen3_5-4b-shape"
# placeholder temperatures (the real ones come with the real checkpoint); marked as such in the file
TEMPERATURES = {"choice": 1.0, "noul": 1.0, "score": 1.0}


def shape_kwargs(layers: int, hidden: int) -> dict:
    if layers < 1:
        raise ValueError("--layers must be >= 1")
    if hidden == FOUR_B["hidden_size"]:
        return {**FOUR_B, "num_hidden_layers": layers}
    if hidden < 32 or hidden % 32:
        raise ValueError("--hidden must be 2560 or a multiple of 32")
    return {"hidden_size": hidden, "num_hidden_layers": layers, "intermediate_size": 2 * hidden}


def tensor_sizes(kwargs: dict) -> dict[str, int]:
    cfg = ModelConfig.from_json(tiny_config_json(**kwargs))
    return {n: math.prod(shape) * (2 if dt == "BF16" else 4) for n, (shape, dt) in cfg.expected_tensors().items()}


def shard_count(sizes: dict[str, int], max_bytes: int) -> int:
    """Fewest shards whose round-robin split (startlux_native.tiny's) keeps every shard <= max_bytes."""
    names = list(sizes)
    if max(sizes.values()) > max_bytes:
        raise ValueError(f"a single tensor is larger than {max_bytes} bytes")
    for shards in range(1, len(names) + 1):
        if all(sum(sizes[n] for n in names[s::shards]) <= max_bytes for s in range(shards)):
            return shards
    return len(names)


def make_bench_checkpoint(outdir: str | Path, *, seed: int = 0, layers: int = 32, hidden: int = 2560,
                          max_shard_bytes: int = 2 * 10**9) -> Path:
    out = Path(outdir)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    kwargs = shape_kwargs(layers, hidden)
    sizes = tensor_sizes(kwargs)
    shards = shard_count(sizes, max_shard_bytes)
    make_tiny_checkpoint(out, seed=seed, attention_mode_profile="startlux", name=NAME, shards=shards,
                         temperatures=TEMPERATURES, **kwargs)
    dc_path = out / "decision_config.json"
    dc = json.loads(dc_path.read_text(encoding="utf-8"))
    dc["format"] = "StartLux-Decision-v1.1-Instant shape, RANDOM WEIGHTS (placeholder temperatures 1.0)"
    dc_path.write_text(json.dumps(dc, indent=2) + "\n", encoding="utf-8")
    shape = "4B text shape" if kwargs.get("hidden_size") == 2560 and layers == 32 else \
        f"smoke shape: {layers} layers, hidden {kwargs['hidden_size']}"
    marker = {"random_weights": True, "seed": seed, "shape": shape, "shape_kwargs": kwargs,
              "tensors": len(sizes), "bytes": sum(sizes.values()), "shards": shards,
              "note": "random weights: answers are meaningless; for latency measurement only"}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", help="new (or empty) folder to write")
    ap.add_argument("--seed", type=int, default=0, help="weight seed (default %(default)s)")
    ap.add_argument("--layers", type=int, default=32, help="decoder layers (default %(default)s; fewer = smoke)")
    ap.add_argument("--hidden", type=int, default=2560, help="hidden size (default %(default)s; smaller = smoke)")
    ap.add_argument("--max-shard-gb", type=float, default=2.0, help="largest shard in GB (default %(default)s)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        out = make_bench_checkpoint(args.outdir, seed=args.seed, layers=args.layers, hidden=args.hidden,
                                    max_shard_bytes=int(args.max_shard_gb * 1e9))
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    info = json.loads((out / MARKER).read_text(encoding="utf-8"))
    print(f"{out}: {info['tensors']} tensors, {info['bytes'] / 1e9:.3f} GB in {info['shards']} shard(s), "
          f"{info['shape']}, seed {args.seed}, {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
