"""benchmarks/tokenize_cuts.py on a small manifest: both arms run, the long one-line JSON evidence is cut only by arm
B, the ids agree, and the summary says so."""

from __future__ import annotations

import json

from benchmarks import tokenize_cuts
from startlux_native import prompt
from startlux_native.tokenizer import LINE_CUTS, SAFE_CUTS


def test_tokenize_cuts_runs_both_arms_and_finds_the_same_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # restored after the test (the bench sets it to true)
    state = {f"record {i}": {"kind": "note", "detail": f"value number {i}, checked"} for i in range(80)}
    question = {"type": "noul", "instructions": "Is record 7 a note?"}
    rows = [{"id": "json-state", "request": {"state": state, "questions": {"q": question}}},
            {"id": "short", "request": {"state": "one line", "questions": {"q": question}}}]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = prompt.state_text(state)
    assert "\n" not in text and len(text) > 4000
    assert not LINE_CUTS.search(text) and SAFE_CUTS.search(text)  # only arm B can cut this evidence
    out = tmp_path / "s.json"
    rc = tokenize_cuts.main(["--manifest", str(manifest), "--rounds", "1", "--gap-ms", "0", "--output", str(out)])
    summary = json.loads(out.read_text())
    assert rc == 0 and summary["ids_differ"] == [] and summary["requests"] == 2
    assert set(summary["per_request_median_ms"]) == {"json-state", "short"}
    assert summary["split_chars"] == {"A": 1024, "B": 1024} and summary["cuts"] == {"A": "line", "B": "safe"}
    assert all(summary["tokenize_ms"][arm]["p50"] > 0 for arm in "AB")
    from server import loading

    assert loading.BACKEND_OVERRIDE is None  # the fake backend does not leak into later loads


def test_tokenize_cuts_compares_part_sizes_with_the_same_cuts(tmp_path, monkeypatch):
    """--cuts-a safe --split-chars-b N: both arms cut at every safe place, only the part size differs."""
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    state = " ".join(f"word{i}," for i in range(900))  # one line, ~7k characters: only space cuts
    question = {"type": "noul", "instructions": "Is it long?"}
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"id": "prose", "request": {"state": state, "questions": {"q": question}}}) + "\n")
    out = tmp_path / "s.json"
    rc = tokenize_cuts.main(["--manifest", str(manifest), "--rounds", "1", "--gap-ms", "0", "--cuts-a", "safe",
                             "--split-chars-b", "512", "--output", str(out)])
    summary = json.loads(out.read_text())
    assert rc == 0 and summary["ids_differ"] == []
    assert summary["cuts"] == {"A": "safe", "B": "safe"} and summary["split_chars"] == {"A": 1024, "B": 512}
