"""Build benchmarks/manifests/public231.jsonl: the 231 public JevBench items as one-question requests.

Order is stable: easy, original, hard; file order inside each. Every row is
    {"id": item id, "request": {"state": ..., "questions": {"q": question}}, "expected": {"q": value}}
with value = the choice label (string), the noul outcome as a boolean (yes -> true), or the score level (int).
The question id is never rendered into the prompt (decision-protocol.md §1.2), so "q" changes nothing.

    python benchmarks/manifests/build_public231.py [--data DIR] [--output FILE]

Prints the manifest's sha256 (the README records it). The data is MIT-licensed (jevbench/LICENSE.txt).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "jevbench"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "public231.jsonl"
SETS = ("easy", "original", "hard")
EXPECTED_COUNT = 231
QUESTION_ID = "q"


def expected_value(item: dict):
    """The item's expected answer in the manifest's form, checked against its question."""
    q, exp = item["question"], item["expected"]
    if q["type"] == "choice":
        if exp not in q["criteria"]:
            raise ValueError(f"{item['id']}: expected {exp!r} is not a criteria key")
        return exp
    if q["type"] == "noul":
        if exp not in ("yes", "no"):
            raise ValueError(f"{item['id']}: noul expected must be yes/no, got {exp!r}")
        return exp == "yes"
    if q["type"] == "score":
        if not (isinstance(exp, int) and 0 <= exp < len(q["criteria"])):
            raise ValueError(f"{item['id']}: score expected {exp!r} outside 0..{len(q['criteria']) - 1}")
        return exp
    raise ValueError(f"{item['id']}: unknown question type {q['type']!r}")


def manifest_row(item: dict) -> dict:
    q = item["question"]
    # member order: type, instructions, criteria (criteria keys keep the evaluated order of the source file)
    question = {"type": q["type"], "instructions": q["instructions"], "criteria": q["criteria"]}
    return {"id": item["id"], "request": {"state": item["state"], "questions": {QUESTION_ID: question}},
            "expected": {QUESTION_ID: expected_value(item)}}


def build_lines(data_dir: Path) -> list[str]:
    lines, seen = [], set()
    for name in SETS:
        path = data_dir / f"{name}.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path} not found (pass --data DIR)")
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not text.strip():
                continue
            item = json.loads(text)
            if item["id"] in seen:
                raise ValueError(f"{path}:{n}: duplicate id {item['id']!r}")
            seen.add(item["id"])
            lines.append(json.dumps(manifest_row(item), ensure_ascii=False, separators=(",", ":")))
    if len(lines) != EXPECTED_COUNT:
        raise ValueError(f"expected {EXPECTED_COUNT} public items, found {len(lines)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA,
                    help="folder with easy/original/hard.jsonl (default: <repo>/../shared/data/jevbench)")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="manifest to write (default: %(default)s)")
    args = ap.parse_args(argv)
    payload = ("\n".join(build_lines(args.data)) + "\n").encode("utf-8")
    args.output.write_bytes(payload)
    print(f"{args.output}: {EXPECTED_COUNT} rows, {len(payload)} bytes")
    print(f"sha256 {hashlib.sha256(payload).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
