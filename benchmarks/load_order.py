"""A two-arm in-process A/B with the load order cancelled: two `benchmarks.inprocess` JSON files of the same arms,
once loaded B after A (inab) and once A after B (inba), give per length

    lever = (inab - inba) / 2   (B - A, with each arm loaded first once)
    placement = (inab + inba) / 2   (what being loaded second costs, whichever arm it is)

    python -m benchmarks.load_order INPROCESS_AB.json INPROCESS_BA.json [--label "new - old"]

In inba the arms are swapped, so its paired delta is A - B of the lever's terms; rows without a paired delta (arm A's
own rows) are skipped.
"""

from __future__ import annotations

import argparse
import json


def paired(path: str) -> dict[int, float]:
    with open(path) as f:
        rows = json.load(f)["rows"]
    return {r["tokens"]: r["paired_delta_ms"] for r in rows if "paired_delta_ms" in r}


def lines(ab: dict[int, float], ba: dict[int, float], label: str) -> list[str]:
    return [f"  {t:>6} tokens: {label} {(ab[t] - ba[t]) / 2:+.4f} ms with each arm loaded first once "
            f"(inab {ab[t]:+.4f}, inba {-ba[t]:+.4f}; placement offset {(ab[t] + ba[t]) / 2:+.4f})"
            for t in ab if t in ba]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ab", help="inprocess JSON, arm A = the baseline, arm B = the lever")
    p.add_argument("ba", help="inprocess JSON of the same arms swapped (A = the lever, B = the baseline)")
    p.add_argument("--label", default="new - old")
    args = p.parse_args(argv)
    print("\n".join(lines(paired(args.ab), paired(args.ba), args.label)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
