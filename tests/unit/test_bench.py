"""benchmarks/bench.py: manifests, response validation, statistics, the gate, and runs against a real demo server."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from server_process import running_server

from benchmarks import bench, metadata
from benchmarks.manifests import build_public231

ROOT = Path(__file__).resolve().parents[2]
PUBLIC231 = ROOT / "benchmarks" / "manifests" / "public231.jsonl"
JEVBENCH = build_public231.DEFAULT_DATA

SYNTHETIC = [
    {"id": "route", "request": {"state": {"ticket": "Charged twice for order #4411."}, "questions": {
        "team": {"type": "choice", "instructions": "Which team?",
                 "criteria": {"billing": "Payments", "shipping": "Delivery", "technical": "App problems"}}}},
     "expected": {"team": "billing"}},
    {"id": "refund", "request": {"state": "Bought 12 days ago, no receipt.", "questions": {
        "ok": {"type": "noul", "instructions": "Is a refund allowed?"}}}, "expected": {"ok": False}},
    {"id": "urgency", "request": {"state": "The icon is misaligned.", "questions": {
        "level": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]}}},
     "expected": {"level": 0}},
    {"id": "mixed", "request": {"state": ["a", 1, 2.5], "questions": {
        "c": {"type": "choice", "instructions": "Pick", "criteria": {"x": None, "y": "why"}},
        "n": {"type": "noul", "criteria": {"true": "yes it is", "false": None}},
        "s": {"type": "score", "instructions": "Rate", "criteria": ["0", "1"]}}}},
]


def write_manifest(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ---- manifests ------------------------------------------------------------------------------------------------


def test_public231_manifest_is_valid_and_ordered():
    rows = bench.load_manifest(PUBLIC231)
    assert len(rows) == 231
    prefixes = [r["id"].split("-", 1)[0] for r in rows]
    assert prefixes == ["easy"] * 48 + ["original"] * 72 + ["hard"] * 111
    assert all(len(r["request"]["questions"]) == 1 and set(r["expected"]) == {"q"} for r in rows)
    kinds = {q["type"] for r in rows for q in r["request"]["questions"].values()}
    assert kinds == {"choice", "noul", "score"}
    assert bench.main(["validate", str(PUBLIC231)]) == 0


@pytest.mark.skipif(not JEVBENCH.exists(), reason=f"{JEVBENCH} not present (the shared data folder)")
def test_public231_manifest_matches_its_build_script(tmp_path):
    out = tmp_path / "p.jsonl"
    assert build_public231.main(["--data", str(JEVBENCH), "--output", str(out)]) == 0
    assert out.read_bytes() == PUBLIC231.read_bytes(), "rerun benchmarks/manifests/build_public231.py"
    # expected values carried over in the manifest's form
    source = [json.loads(x) for name in build_public231.SETS
              for x in (JEVBENCH / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    for item, row in zip(source, bench.load_manifest(PUBLIC231), strict=True):
        assert row["id"] == item["id"]
        exp = row["expected"]["q"]
        q = item["question"]
        assert exp == ({"yes": True, "no": False}[item["expected"]] if q["type"] == "noul" else item["expected"])
        assert list(row["request"]["questions"]["q"]["criteria"]) == list(q["criteria"])  # order kept


def test_synthetic_manifest_validates(tmp_path, capsys):
    path = write_manifest(tmp_path / "m.jsonl", SYNTHETIC)
    assert len(bench.load_manifest(path)) == 4
    assert bench.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4 requests, 6 questions" in out and hashlib.sha256(path.read_bytes()).hexdigest() in out


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r["request"].update(model="x"), "must not carry 'model'"),
    (lambda r: r["expected"].update(team="nope"), "criteria keys"),
    (lambda r: r.update(id=""), "id must be"),
    (lambda r: r["request"]["questions"]["team"].update(type="box"), "type must be"),
    (lambda r: r["request"].update(questions={}), "non-empty"),
    (lambda r: r.update(extra=1), "unknown members"),
])
def test_bad_manifest_rows_are_refused(tmp_path, mutate, needle):
    row = json.loads(json.dumps(SYNTHETIC[0]))
    mutate(row)
    with pytest.raises(bench.ManifestError, match=needle):
        bench.load_manifest(write_manifest(tmp_path / "m.jsonl", [row]))


def test_expected_types_are_checked(tmp_path):
    bad_noul = {**SYNTHETIC[1], "expected": {"ok": "no"}}
    bad_score = {**SYNTHETIC[2], "expected": {"level": 3}}
    dup = [SYNTHETIC[0], SYNTHETIC[0]]
    for rows, needle in (([bad_noul], "boolean"), ([bad_score], "0..2"), (dup, "duplicate id")):
        with pytest.raises(bench.ManifestError, match=needle):
            bench.load_manifest(write_manifest(tmp_path / "m.jsonl", rows))


# ---- response validation --------------------------------------------------------------------------------------


def good_body(rng: np.random.Generator) -> dict:
    """A valid response to SYNTHETIC[3] with fresh random fp32 probabilities."""
    def dist(n):
        z = rng.standard_normal(n).astype(np.float32)
        p = np.exp(z - z.max())
        return [float(x) for x in (p / p.sum()).astype(np.float32)]

    pc, ps = dist(2), dist(2)
    c = ["x", "y"][int(np.argmax(pc))]
    return {"model": "m", "usage": {"input_tokens": 300, "output_tokens": 0}, "answers": {
        "c": {"type": "choice", "choice": c, "confidence": 0.5, "probabilities": {"x": pc[0], "y": pc[1]}},
        "n": {"type": "noul", "noul": float(rng.uniform())},
        "s": {"type": "score", "score": ps[1], "confidence": 0.1, "legend": {"0": "0", "1": "1"},
              "probabilities": {"0": ps[0], "1": ps[1]}}}}


def test_valid_response_passes_and_normalises():
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    for _ in range(20):
        body = good_body(rng)
        out = bench.validate_response(SYNTHETIC[3]["request"], body, 6)
        assert out["n"]["value"] == body["answers"]["n"]["noul"]
        assert out["c"]["value"] == body["answers"]["c"]["choice"]


@pytest.mark.parametrize("breaks, needle", [
    (lambda b: b["answers"]["c"].update(type="noul"), "type must be"),
    (lambda b: b["answers"]["c"]["probabilities"].pop("y"), "labels"),
    (lambda b: b["answers"]["c"]["probabilities"].update(x=0.9, y=0.2), "sum to"),
    (lambda b: b["answers"]["c"].update(choice="x", probabilities={"x": 0.25, "y": 0.75}), "max-probability"),
    (lambda b: b["answers"]["n"].update(noul=float("nan")), "finite"),
    (lambda b: b["answers"]["n"].update(noul=1.5), r"\[0, 1\]"),
    (lambda b: b["answers"]["s"].update(score=b["answers"]["s"]["score"] + 0.01), "sum\\(level"),
    (lambda b: b["answers"]["s"].pop("legend"), "legend"),
    (lambda b: b["answers"].pop("s"), "answers keys"),
    (lambda b: b["usage"].update(input_tokens=1.0), "integer"),
    (lambda b: b.pop("model"), "model"),
    (lambda b: b["answers"]["c"].pop("confidence"), "confidence"),
])
def test_invalid_responses_are_refused(breaks, needle):
    body = good_body(np.random.default_rng(7))
    breaks(body)
    with pytest.raises(bench.InvalidResponse, match=needle):
        bench.validate_response(SYNTHETIC[3]["request"], body, 6)


def test_rounded_wire_values_pass_with_matching_decimals():
    # a 4-decimal server: sum 0.9999 is fine at --score-decimals 4 and refused at 6
    req = SYNTHETIC[0]["request"]
    body = {"model": "m", "usage": {"input_tokens": 1, "output_tokens": 0}, "answers": {"team": {
        "type": "choice", "choice": "billing", "confidence": 0.5,
        "probabilities": {"billing": 0.3334, "shipping": 0.3333, "technical": 0.3332}}}}
    assert bench.validate_response(req, body, 4)["team"]["value"] == "billing"
    with pytest.raises(bench.InvalidResponse, match="sum to"):
        bench.validate_response(req, body, 6)


# ---- statistics and grading -----------------------------------------------------------------------------------


def test_median_and_nearest_rank_on_known_numbers():
    assert bench.median([3.0, 1.0, 2.0, 4.0]) == 2.5
    assert bench.nearest_rank(list(range(1, 101)), 0.95) == 95  # ceil(95) - 1 -> 95th value
    assert bench.nearest_rank(list(range(1, 21)), 0.95) == 19
    assert bench.nearest_rank([5.0, 1.0, 9.0], 0.95) == 9.0  # n < 20: the maximum
    assert bench.nearest_rank(list(range(1, 22)), 0.95) == 20  # ceil(19.95) = 20
    assert bench.nearest_rank([], 0.95) is None and bench.median([]) is None
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    x = rng.uniform(1, 100, 693).tolist()
    assert bench.nearest_rank(x, 0.95) == sorted(x)[math.ceil(0.95 * 693) - 1]


def record(rid, ok, ms, answers=None, kind=None, index=0):
    return {"id": rid, "index": index, "ok": ok, "latency_ms": ms, "status": 200 if ok else 500,
            "input_tokens": 100 if ok else None, "answers": answers, "error_kind": kind,
            "error": None if ok else "boom"}


def test_summary_counts_accuracy_and_keeps_failures_apart():
    manifest = SYNTHETIC[:3]
    recs = [
        record("route", True, 10.0, {"team": {"type": "choice", "value": "billing",
                                              "probabilities": {"billing": .8, "shipping": .1, "technical": .1}}}),
        record("refund", True, 30.0, {"ok": {"type": "noul", "value": 0.5}}),  # p >= 0.5 counts as yes -> wrong
        record("urgency", False, 999.0, kind="http_500"),
    ]
    s = bench.summarize(manifest, recs)
    assert (s["planned"], s["successful"], s["failed"]) == (3, 2, 1)
    assert s["successful_latency_p50_ms"] == 20.0 and s["successful_latency_p95_ms"] == 30.0
    assert s["failed_latency_p50_ms"] == 999.0 and s["errors_by_kind"] == {"http_500": 1}
    assert s["accuracy"]["all"] == {"correct": 1, "graded": 2, "accuracy": 0.5}
    assert not s["evidence_complete"]


def test_score_grading_uses_argmax_and_reports_rounded():
    ans = {"type": "score", "value": 1.45, "probabilities": {"0": 0.3, "1": 0.0, "2": 0.35, "3": 0.35}}
    g = bench.grade("score", ans, 2)
    assert g["correct"] is True  # argmax: first maximum is level 2
    assert g["rounded_correct"] is False  # floor(1.45 + 0.5) = 1
    assert g["abs_error"] == pytest.approx(0.55)
    assert bench.grade("noul", {"value": 0.49}, False)["correct"]


def run_dir(tmp_path: Path, name: str, *, p50_values, phase="measured", sha="a" * 64, failed=0) -> dict:
    manifest = [{"id": f"r{i}", "request": {"state": "s", "questions": {"q": {"type": "noul"}}}}
                for i in range(len(p50_values))]
    recs = [record(f"r{i}", i >= failed, v, {"q": {"type": "noul", "value": 0.7}}, None if i >= failed
                   else "timeout", i) for i, v in enumerate(p50_values)]
    return {"config": {"manifest_sha256": sha, "phase": phase, "concurrency": 1, "model": "m"},
            "summary": bench.summarize(manifest, recs)}


def test_gate_needs_lower_p50_and_p95_and_the_same_pass_count(tmp_path):
    a = run_dir(tmp_path, "a", p50_values=[10, 11, 12, 13, 50])
    faster = run_dir(tmp_path, "b", p50_values=[9, 10, 11, 12, 40])
    assert bench.gate(a, faster) == (True, [])
    worse_tail = run_dir(tmp_path, "b", p50_values=[5, 6, 7, 8, 60])
    ok, why = bench.gate(a, worse_tail)
    assert not ok and any("p95" in w for w in why)
    worse_mid = run_dir(tmp_path, "b", p50_values=[12, 13, 14, 15, 20])
    ok, why = bench.gate(a, worse_mid)
    assert not ok and any("p50" in w for w in why)
    one_failed = run_dir(tmp_path, "b", p50_values=[1, 2, 3, 4, 5], failed=1)
    ok, why = bench.gate(a, one_failed)
    assert not ok and any("pass count" in w for w in why)
    other_manifest = run_dir(tmp_path, "b", p50_values=[1, 2, 3, 4, 5], sha="b" * 64)
    assert not bench.gate(a, other_manifest)[0]
    feasibility = run_dir(tmp_path, "b", p50_values=[1, 2, 3, 4, 5], phase="feasibility")
    assert not bench.gate(a, feasibility)[0]


# ---- metadata and refusals ------------------------------------------------------------------------------------


def write_metadata(path: Path, manifest: Path, **override) -> Path:
    meta = {"gpu": "test GPU", "driver": "0", "cuda": "none", "commit": "abc", "checkpoint_revision":
            "random weights (seed 0)", "precision": "bf16", "manifest_sha256": bench.sha256_file(manifest),
            "arm": "demo reference", **override}
    path.write_text(json.dumps(meta), encoding="utf-8")
    return path


def test_metadata_lacking_required_keys_is_refused(tmp_path):
    manifest = write_manifest(tmp_path / "m.jsonl", SYNTHETIC)
    meta = write_metadata(tmp_path / "meta.json", manifest, driver="", arm=None)
    with pytest.raises(metadata.MetadataError, match="driver, .*arm"):
        metadata.load_metadata(meta)
    rc = bench.main(["run", str(manifest), "--endpoint", "http://127.0.0.1:9", "--model", "m", "--metadata",
                     str(meta), "--phase", "measured", "--concurrency", "1", "--warmup", "0",
                     "--score-decimals", "6", "--output", str(tmp_path / "out")])
    assert rc == 2 and not (tmp_path / "out").exists()


def test_metadata_helper_fills_what_it_can(tmp_path):
    manifest = write_manifest(tmp_path / "m.jsonl", SYNTHETIC)
    out = tmp_path / "meta.json"
    rc = metadata.main(["--output", str(out), "--manifest", str(manifest), "--arm", "x",
                        "--checkpoint-revision", "random weights", "--set", "gpu=g", "--set", "driver=d",
                        "--set", "cuda=c"])
    meta = json.loads(out.read_text())
    assert meta["manifest_sha256"] == bench.sha256_file(manifest) and meta["precision"] == "bf16"
    assert rc == (0 if meta["commit"] else 2)
    with pytest.raises(SystemExit):
        metadata.main(["--output", str(out)])  # never overwritten


def test_run_refuses_an_existing_output_dir_and_a_foreign_manifest(tmp_path, capsys):
    manifest = write_manifest(tmp_path / "m.jsonl", SYNTHETIC)
    meta = write_metadata(tmp_path / "meta.json", manifest)
    existing = tmp_path / "run"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    args = ["run", str(manifest), "--endpoint", "http://127.0.0.1:9", "--model", "m", "--metadata", str(meta),
            "--phase", "measured", "--concurrency", "1", "--warmup", "0", "--score-decimals", "6"]
    assert bench.main([*args, "--output", str(existing)]) == 2
    assert "exists" in capsys.readouterr().err
    assert sorted(p.name for p in existing.iterdir()) == ["keep.txt"]
    other = write_metadata(tmp_path / "meta2.json", manifest, manifest_sha256="0" * 64)
    assert bench.main([*args[:7], str(other), *args[8:], "--output", str(tmp_path / "new")]) == 2
    assert not (tmp_path / "new").exists()


# ---- end to end against a real demo server --------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("bench-server") / "server.log"
    with running_server(["-m", "server", "--demo", "--host", "127.0.0.1"], log_path) as url:
        yield url


def test_run_summary_compare_end_to_end(demo_server, tmp_path, capsys):
    rows = bench.load_manifest(PUBLIC231)
    picks = [rows[0], rows[50], next(r for r in rows if r["request"]["questions"]["q"]["type"] == "score")]
    manifest = write_manifest(tmp_path / "m.jsonl", [*picks, *SYNTHETIC])
    meta = write_metadata(tmp_path / "meta.json", manifest)
    common = ["run", str(manifest), "--endpoint", demo_server, "--model", "jev-latest", "--metadata", str(meta),
              "--phase", "measured", "--concurrency", "2", "--warmup", "2", "--score-decimals", "6", "--no-progress"]
    assert bench.main([*common, "--output", str(tmp_path / "a")]) == 0
    assert bench.main([*common, "--output", str(tmp_path / "b")]) == 0
    a = tmp_path / "a"
    assert sorted(p.name for p in a.iterdir()) == ["completion.json", "config.json", "requests.jsonl",
                                                   "responses.jsonl", "summary.json", "warmup.json"]
    recs = [json.loads(x) for x in (a / "responses.jsonl").read_text().splitlines()]
    assert [r["id"] for r in recs] == [r["id"] for r in bench.load_manifest(manifest)]  # manifest order
    assert all(r["ok"] and r["status"] == 200 and r["latency_ms"] > 0 and r["input_tokens"] > 0 for r in recs)
    assert len(json.loads((a / "warmup.json").read_text())) == 2
    summary = json.loads((a / "summary.json").read_text())
    assert (summary["planned"], summary["successful"], summary["failed"]) == (7, 7, 0)
    lat = [r["latency_ms"] for r in recs]
    assert summary["successful_latency_p95_ms"] == max(lat)  # n < 20: nearest rank is the maximum
    assert summary["accuracy"]["all"]["graded"] == 6
    capsys.readouterr()
    assert bench.main(["summary", str(a), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["successful_latency_p50_ms"] == summary["successful_latency_p50_ms"]
    assert bench.main(["summary", str(a), str(tmp_path / "b"), "--json"]) == 0  # two traversals pooled
    pooled = json.loads(capsys.readouterr().out)
    assert (pooled["planned"], pooled["successful"]) == (14, 14) and pooled["accuracy"]["all"]["graded"] == 12
    bench.main(["compare", str(a), str(tmp_path / "b"), "--json"])
    cmp = json.loads(capsys.readouterr().out)
    assert cmp["agreement"]["questions"] == 9 and cmp["agreement"]["same_decision"] == 9  # same weights
    assert cmp["agreement"]["max_probability_diff"] <= 1e-6
    assert cmp["b_replaces_primary"] == (cmp["latency"][0]["delta_ms"] < 0 and cmp["latency"][1]["delta_ms"] < 0)
    # the same directory again is refused, and nothing in it changes
    before = (a / "responses.jsonl").read_bytes()
    assert bench.main([*common, "--output", str(a)]) == 2
    assert (a / "responses.jsonl").read_bytes() == before


def test_refused_requests_are_failures_not_latencies(demo_server, tmp_path):
    bad = {"id": "too-many-levels", "request": {"state": "s", "questions": {
        "s": {"type": "score", "instructions": "Rate", "criteria": [str(i) for i in range(11)]}}}}
    manifest = write_manifest(tmp_path / "m.jsonl", [SYNTHETIC[0], bad])
    meta = write_metadata(tmp_path / "meta.json", manifest)
    rc = bench.main(["run", str(manifest), "--endpoint", demo_server, "--model", "m", "--metadata", str(meta),
                     "--phase", "feasibility", "--concurrency", "1", "--warmup", "0", "--score-decimals", "6",
                     "--output", str(tmp_path / "r"), "--no-progress"])
    assert rc == 1
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (s["successful"], s["failed"], s["errors_by_kind"]) == (1, 1, {"http_422": 1})
    # a failing warm-up aborts the run before any measured request
    warm = write_manifest(tmp_path / "warm.jsonl", [bad])
    rc = bench.main(["run", str(manifest), "--endpoint", demo_server, "--model", "m", "--metadata", str(meta),
                     "--phase", "measured", "--concurrency", "1", "--warmup", "2", "--warmup-manifest", str(warm),
                     "--score-decimals", "6", "--output", str(tmp_path / "w"), "--no-progress"])
    assert rc == 3
    assert json.loads((tmp_path / "w" / "completion.json").read_text())["stop_reason"] == "warmup_failure"
    assert not (tmp_path / "w" / "responses.jsonl").exists() and not (tmp_path / "w" / "summary.json").exists()


# ---- attention-wide verdict rules -----------------------------------------------------------------------------


def load_attention_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("attention_wide_run", ROOT / "benchmarks/attention-wide/run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_attention_wide_plan_is_complete_and_verdict_follows_it():
    mod = load_attention_run()
    plan = json.loads(mod.PLAN.read_text())
    assert plan["lengths"] == [512, 640, 1024, 2048, 4096, 8192]
    assert {"controls", "timing", "byte_parity", "decision"} <= set(plan)

    def rows(wide_ratio, same=True, noise=0.01):
        return [{"length": n, "mode": m, "narrow_ms": 1.0, "narrow_b_ms": 1.0 + noise, "wide_ms": wide_ratio(n),
                 "byte_identical": same} for n in plan["lengths"] for m in plan["modes"]]

    assert mod.verdict(plan, rows(lambda n: 0.8 if n >= 1024 else 0.99))["adopt_wide"]
    v = mod.verdict(plan, rows(lambda n: 0.8, same=False))
    assert not v["adopt_wide"] and any("byte parity" in r for r in v["reasons"])
    v = mod.verdict(plan, rows(lambda n: 1.02 if n == 640 else 0.8))
    assert not v["adopt_wide"] and any("slower" in r for r in v["reasons"])
    assert not mod.verdict(plan, rows(lambda n: 0.85, noise=0.1))["adopt_wide"]  # inside 2x the A-A noise
    assert not mod.verdict(plan, rows(lambda n: 1.3 if n == 512 else 0.95))["adopt_wide"]  # no 10 % point
    assert mod.verdict(plan, rows(lambda n: 1.3 if n == 512 else 0.8))["adopt_wide"]  # 512 is recorded only
    unsupported = rows(lambda n: None)
    assert not mod.verdict(plan, unsupported)["adopt_wide"]


FAKE_BODIES = {
    "cs1_abi_version": "return CS1_ABI_VERSION;",
    "cs1_build_info": 'return "fake host-memory library (tests/unit/test_bench.py)";',
    "cs1_error_string": 'return "fake error";',
    "cs1_device_info": "*a1 = 8; *a2 = 9; *a3 = 4; *a4 = (size_t)1 << 30; return 0;",
    "cs1_malloc": "*a0 = malloc(a1); return *a0 ? 0 : 2;",
    "cs1_free": "free(a0); return 0;",
    "cs1_memset_async": "memset(a0, a1, a2); return 0;",
    "cs1_upload": "memcpy(a0, a1, a2); return 0;",
    "cs1_download": "memcpy(a0, a1, a2); return 0;",
    "cs1_stream_create": "*a0 = (void *)1; return 0;",
    "cs1_graph_end": "*a1 = (void *)2; return 0;",
    "cs1_attention_tile_rows": "*a1 = a0 >= 640 ? 128 : 64; return 0;",
    # out = gate (bf16 bits), whatever the tile: byte-identical by construction
    "cs1_attention_gated_tiled": "memcpy(a7, a4, (size_t)a8 * a9 * a11 * 2); return 0;",
}


def build_fake_library(tmp_path: Path) -> Path:
    """A host-memory stand-in for libqwen3_5_cuda.so with every cs1_* symbol of native/cs1.h (compiled by cc)."""
    import re
    import shutil

    from startlux_native import abi

    if shutil.which("cc") is None:
        pytest.skip("no C compiler for the fake library")
    lines = ["#include <stdlib.h>", "#include <string.h>", '#include "cs1.h"']
    for ret, name, params in re.findall(r"(int|uint32_t|const char \*)\s*(cs1_\w+)\s*\(([^;]*?)\)\s*;",
                                        abi.cdef_source(), re.S):
        parts = [p.strip() for p in params.split(",")] if params.strip() != "void" else []
        named = [re.sub(r"(\w+)$", f"a{i}", re.sub(r"\s+", " ", p)) for i, p in enumerate(parts)]
        body = FAKE_BODIES.get(name, "return 0;")
        lines.append(f"{ret} {name}({', '.join(named) or 'void'}) {{ {body} }}")
    src = tmp_path / "fake.c"
    src.write_text("\n".join(lines) + "\n")
    lib = tmp_path / "libfake.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", f"-I{ROOT / 'native'}", str(src), "-o", str(lib)], check=True)
    return lib


def test_attention_wide_runner_end_to_end_on_a_fake_library(tmp_path, capsys):
    """run.py's flow (buffers, graphs, parity, verdict, a new results file) through startlux_native.abi, with a
    host-memory fake library: no timing meaning, but every call goes through cffi with the header's types."""
    mod = load_attention_run()
    lib = build_fake_library(tmp_path)
    out = tmp_path / "results.json"
    assert mod.main(["--library", str(lib), "--quick", "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["evidence"] is False and res["device"]["compute_capability"] == "8.9"
    assert [(r["length"], r["mode"]) for r in res["rows"]] == [(n, m) for n in (512, 640)
                                                               for m in ("bidirectional", "causal")]
    assert all(r["byte_identical"] and r["finite"] for r in res["rows"])
    assert [r["policy_tile_rows"] for r in res["rows"]] == [64, 64, 128, 128]
    assert all(len(r["wide_trials_ms"]) == 3 for r in res["rows"])
    assert mod.main(["--library", str(lib), "--quick", "--output", str(out)]) == 2  # never overwritten
