"""benchmarks/ref_distance.py on synthetic runs with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import bench, ref_distance

ROOT = Path(__file__).resolve().parents[2]


def rows_of_each_type() -> list[dict]:
    rows, seen = [], set()
    for line in (ROOT / "benchmarks" / "manifests" / "public231.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        qtype = next(iter(row["request"]["questions"].values()))["type"]
        if len(row["request"]["questions"]) == 1 and qtype not in seen:
            seen.add(qtype)
            rows.append(row)
    assert seen == {"choice", "noul", "score"}
    return rows


def answer(q: dict, p_first: float) -> dict:
    """p_first on the first option (or on true), the rest spread evenly."""
    if q["type"] == "noul":
        return {"type": "noul", "value": p_first}
    labels = list(q["criteria"]) if q["type"] == "choice" else [str(i) for i in range(len(q.get("levels", [0] * 10)))]
    rest = (1 - p_first) / (len(labels) - 1)
    probs = {k: (p_first if i == 0 else rest) for i, k in enumerate(labels)}
    value = labels[0] if p_first >= rest else labels[1]
    return {"type": q["type"], "value": value if q["type"] == "choice" else 0.0, "probabilities": probs}


def write_run(path: Path, rows: list[dict], p_first: list[float], arm: str) -> str:
    path.mkdir(parents=True)
    (path / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sha = bench.sha256_file(path / "requests.jsonl")
    (path / "config.json").write_text(json.dumps({"manifest_sha256": sha, "metadata": {"arm": arm}}),
                                      encoding="utf-8")
    records = [{"id": r["id"], "ok": True,
                "answers": {qid: answer(q, p) for qid, q in r["request"]["questions"].items()}}
               for r, p in zip(rows, p_first, strict=True)]
    (path / "responses.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records), encoding="utf-8")
    return str(path)


def test_distances_to_the_reference(tmp_path, capsys):
    rows = rows_of_each_type()
    ref = write_run(tmp_path / "ref", rows, [0.6, 0.7, 0.5], "ref-graph")
    near = write_run(tmp_path / "near", rows, [0.61, 0.7, 0.5], "near")
    far = write_run(tmp_path / "far", rows, [0.05, 0.7, 0.5], "far")  # the first row's decision flips
    d = ref_distance.distances(bench.read_run(ref), bench.read_run(near))
    assert d["questions"] == 3 and d["max_dp"] == pytest.approx(0.01) and d["same_decision"] == 3
    d = ref_distance.distances(bench.read_run(ref), bench.read_run(far))
    qid = next(iter(rows[0]["request"]["questions"]))
    assert d["max_dp"] == pytest.approx(0.55) and d["worst"] == f"{rows[0]['id']}/{qid}"
    assert d["same_decision"] == 2
    assert ref_distance.main([ref, f"near={near}", f"far={far}"]) == 0
    out = capsys.readouterr().out
    assert "near" in out and "far" in out and "same decision as the reference" in out


def test_traversals_that_differ_are_refused(tmp_path):
    rows = rows_of_each_type()
    ref = write_run(tmp_path / "ref", rows, [0.6, 0.7, 0.5], "ref-graph")
    t1 = write_run(tmp_path / "t1", rows, [0.6, 0.7, 0.5], "x")
    t2 = write_run(tmp_path / "t2", rows, [0.6, 0.71, 0.5], "x")
    with pytest.raises(SystemExit, match="answered differently"):
        ref_distance.main([ref, f"x={t1},{t2}"])
    with pytest.raises(SystemExit, match="NAME=RUN"):
        ref_distance.main([ref, t1])
