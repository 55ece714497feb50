"""HTTP latency and accuracy bench for a /v1/systemone server (the runner is only a client).

Sub-commands
  validate MANIFEST              check a manifest (schema, expected values) and print its sha256
  run MANIFEST ...               time every request against a running server; writes a NEW output directory
  summary DIR [DIR ...]          recompute a run's statistics offline (several traversals are pooled)
  compare A B                    deltas between two runs and the latency-primary gate (B replaces A or not);
                                 A and B may each be comma-separated traversals, pooled

Run directory (never overwritten): config.json (manifest and runner sha256, metadata, endpoint, phase, ...),
requests.jsonl (the manifest), warmup.json, responses.jsonl (one record per request in manifest order: id, status,
ok, latency_ms, input_tokens, error, error_kind = http_<code> | timeout | transport | invalid_response |
interrupted, normalised answers, response_sha256, server_latency_ms), completion.json, summary.json.

Manifest (JSONL): {"id": str, "request": {"state": ..., "questions": {qid: question}}, "expected"?: {qid: value}}.
`model` must not appear in the request: it is added from --model. Expected values: choice -> a criteria key (str),
noul -> bool, score -> an int level in 0..n-1.

Clock: time.perf_counter() from just before the POST to a fully received, JSON-parsed and schema-validated body
(latency_basis = post_to_body_json_and_schema_validation). Persistence and hashing are outside the clock.
Statistics over successful requests only: p50 = statistics.median; p95 = nearest rank, sorted[ceil(0.95 n) - 1].
Accuracy (successful requests with an expected value): choice = the answered label equals the expected label;
noul = (p_yes >= 0.5) equals the expected bool; score = the argmax level of the probabilities (first maximum) equals
the expected level (the rounded score, round-half-up of Σ level·p, and the score MAE are reported alongside).

The gate (compare): B replaces the latency primary A only when both runs are measured-phase runs of the same
manifest (sha256) at the same concurrency and model, B has the same number of successful requests as A (and no
failures), and B's p50 AND p95 are both lower. A better p50 with a worse p95 (or the reverse) is reported, never
promoted.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

try:  # the package form (tests, python -m benchmarks.bench) and the script form (python benchmarks/bench.py)
    from benchmarks import metadata as bench_metadata
except ImportError:  # pragma: no cover - script run without the package installed
    import metadata as bench_metadata  # type: ignore[no-redef]

RUNNER_VERSION = "1"
LATENCY_BASIS = "post_to_body_json_and_schema_validation"
QUESTION_TYPES = ("choice", "noul", "score")
ERROR_KINDS = ("http", "timeout", "transport", "invalid_response", "interrupted")
API_KEY_ENV = "BENCH_API_KEY"


class ManifestError(ValueError):
    """The manifest cannot be benchmarked; the message names the line and the field."""


class RunRefused(ValueError):
    """`run` will not start (existing output directory, metadata for another manifest, bad numbers)."""


class InvalidResponse(ValueError):
    """A 200 body that breaks the response contract (decision-protocol.md §3.4)."""


# ---------------------------------------------------------------------------------------------------------------
# manifest


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check_question(where: str, qid: str, q) -> None:
    if not isinstance(q, dict):
        raise ManifestError(f"{where}: question {qid!r} must be an object")
    t = q.get("type")
    if t not in QUESTION_TYPES:
        raise ManifestError(f"{where}: question {qid!r}: type must be one of {QUESTION_TYPES}, got {t!r}")
    crit = q.get("criteria")
    if t == "choice" and not (isinstance(crit, dict) and crit):
        raise ManifestError(f"{where}: question {qid!r}: choice needs a non-empty criteria object")
    if t == "score" and not (isinstance(crit, list) and len(crit) >= 2):
        raise ManifestError(f"{where}: question {qid!r}: score needs a criteria array of >= 2 levels")
    if t == "noul" and crit is not None and not isinstance(crit, dict):
        raise ManifestError(f"{where}: question {qid!r}: noul criteria must be an object or null")


def _check_expected(where: str, qid: str, q: dict, value) -> None:
    t = q["type"]
    if t == "choice" and not (isinstance(value, str) and value in q["criteria"]):
        raise ManifestError(f"{where}: expected[{qid!r}] must be one of the criteria keys, got {value!r}")
    if t == "noul" and not isinstance(value, bool):
        raise ManifestError(f"{where}: expected[{qid!r}] must be a boolean for a noul question, got {value!r}")
    if t == "score" and not (isinstance(value, int) and not isinstance(value, bool)
                             and 0 <= value < len(q["criteria"])):
        raise ManifestError(f"{where}: expected[{qid!r}] must be an int level in 0..{len(q['criteria']) - 1}, "
                            f"got {value!r}")


def load_manifest(path: str | os.PathLike) -> list[dict]:
    """Parse and check a manifest; raises ManifestError naming line and field."""
    rows, ids = [], set()
    text = Path(path).read_text(encoding="utf-8")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ManifestError(f"{where}: not JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise ManifestError(f"{where}: a row must be an object")
        extra = set(row) - {"id", "request", "expected"}
        if extra:
            raise ManifestError(f"{where}: unknown members {sorted(extra)}")
        rid = row.get("id")
        if not isinstance(rid, str) or not rid:
            raise ManifestError(f"{where}: id must be a non-empty string")
        if rid in ids:
            raise ManifestError(f"{where}: duplicate id {rid!r}")
        ids.add(rid)
        req = row.get("request")
        if not isinstance(req, dict):
            raise ManifestError(f"{where}: request must be an object")
        if "model" in req:
            raise ManifestError(f"{where}: request must not carry 'model' (it comes from --model)")
        if "state" not in req or req["state"] is None:
            raise ManifestError(f"{where}: request.state is required and not null")
        qs = req.get("questions")
        if not isinstance(qs, dict) or not qs:
            raise ManifestError(f"{where}: request.questions must be a non-empty object")
        for qid, q in qs.items():
            _check_question(where, qid, q)
        exp = row.get("expected")
        if exp is not None:
            if not isinstance(exp, dict):
                raise ManifestError(f"{where}: expected must be an object keyed by question id")
            for qid, value in exp.items():
                if qid not in qs:
                    raise ManifestError(f"{where}: expected names unknown question {qid!r}")
                _check_expected(where, qid, qs[qid], value)
        rows.append(row)
    if not rows:
        raise ManifestError(f"{path}: no rows")
    return rows


# ---------------------------------------------------------------------------------------------------------------
# response validation


def tolerances(decimals: int, n: int) -> tuple[float, float]:
    """(sum tolerance, score tolerance) for values that may be rounded to `decimals` places (fp32 floor 1e-6)."""
    half = 0.5 * 10.0 ** (-decimals)
    return n * half + 1e-6, half * (1 + n * (n - 1) / 2) + 1e-6


def _number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _unit_float(where: str, x) -> float:
    if not _number(x) or not math.isfinite(x) or not 0.0 <= x <= 1.0:
        raise InvalidResponse(f"{where} must be a finite number in [0, 1], got {x!r}")
    return float(x)


def _distribution(where: str, probs, labels: list[str], decimals: int) -> dict[str, float]:
    if not isinstance(probs, dict):
        raise InvalidResponse(f"{where}.probabilities must be an object")
    if set(probs) != set(labels) or len(probs) != len(labels):
        raise InvalidResponse(f"{where}.probabilities labels {sorted(probs)} != criteria keys {sorted(labels)}")
    p = {k: _unit_float(f"{where}.probabilities[{k!r}]", v) for k, v in probs.items()}
    tol, _ = tolerances(decimals, len(labels))
    total = math.fsum(p.values())
    if abs(total - 1.0) > tol:
        raise InvalidResponse(f"{where}.probabilities sum to {total!r}, not 1 within {tol:.2g}")
    return p


def validate_response(request: dict, body, decimals: int) -> dict:
    """Check one parsed 200 body against its request; returns {qid: normalised answer}. Raises InvalidResponse."""
    if not isinstance(body, dict):
        raise InvalidResponse("body is not a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise InvalidResponse("model must be a non-empty string")
    usage = body.get("usage")
    if not isinstance(usage, dict):
        raise InvalidResponse("usage must be an object")
    for key in ("input_tokens", "output_tokens"):
        if not isinstance(usage.get(key), int) or isinstance(usage.get(key), bool) or usage[key] < 0:
            raise InvalidResponse(f"usage.{key} must be an integer >= 0, got {usage.get(key)!r}")
    answers = body.get("answers")
    questions = request["questions"]
    if not isinstance(answers, dict) or set(answers) != set(questions):
        got = sorted(answers) if isinstance(answers, dict) else answers
        raise InvalidResponse(f"answers keys {got!r} != question ids {sorted(questions)}")
    out = {}
    for qid, q in questions.items():
        a, where, t = answers[qid], f"answers.{qid}", q["type"]
        if not isinstance(a, dict) or a.get("type") != t:
            raise InvalidResponse(f"{where}.type must be {t!r}, got {a.get('type') if isinstance(a, dict) else a!r}")
        if t == "noul":
            out[qid] = {"type": t, "value": _unit_float(f"{where}.noul", a.get("noul"))}
            continue
        labels = list(q["criteria"]) if t == "choice" else [str(i) for i in range(len(q["criteria"]))]
        p = _distribution(where, a.get("probabilities"), labels, decimals)
        _unit_float(f"{where}.confidence", a.get("confidence"))
        if t == "choice":
            choice = a.get("choice")
            if choice not in p:
                raise InvalidResponse(f"{where}.choice {choice!r} is not a criteria key")
            if p[choice] < max(p.values()):
                raise InvalidResponse(f"{where}.choice {choice!r} (p={p[choice]!r}) is not a max-probability key")
            out[qid] = {"type": t, "value": choice, "probabilities": p}
        else:
            score = a.get("score")
            n = len(labels)
            _, tol = tolerances(decimals, n)
            if not _number(score) or not math.isfinite(score) or not -tol <= score <= n - 1 + tol:
                raise InvalidResponse(f"{where}.score must be a finite number in [0, {n - 1}], got {score!r}")
            expect = math.fsum(i * p[str(i)] for i in range(n))
            if abs(score - expect) > tol:
                raise InvalidResponse(f"{where}.score {score!r} != sum(level * p) = {expect!r} within {tol:.2g}")
            legend = a.get("legend")
            if not isinstance(legend, dict) or set(legend) != set(labels) or any(v is None for v in legend.values()):
                raise InvalidResponse(f"{where}.legend must map every level '0'..'{n - 1}' to a non-null value")
            out[qid] = {"type": t, "value": float(score), "probabilities": p}
    return out


# ---------------------------------------------------------------------------------------------------------------
# statistics


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def nearest_rank(values: list[float], q: float) -> float | None:
    """sorted[ceil(q n) - 1]: the nearest-rank quantile (p95 of fewer than 20 values is the maximum)."""
    if not values:
        return None
    s = sorted(values)
    return s[max(math.ceil(q * len(s)) - 1, 0)]


def argmax_level(probabilities: dict[str, float]) -> int:
    n = len(probabilities)
    best = 0
    for i in range(1, n):
        if probabilities[str(i)] > probabilities[str(best)]:
            best = i
    return best


def grade(question_type: str, answer: dict, expected) -> dict:
    """Correctness of one answer against its expected value (rules in the module docstring)."""
    if question_type == "choice":
        return {"correct": answer["value"] == expected}
    if question_type == "noul":
        return {"correct": (answer["value"] >= 0.5) == expected}
    level = argmax_level(answer["probabilities"])
    rounded = math.floor(answer["value"] + 0.5)
    return {"correct": level == expected, "rounded_correct": rounded == expected,
            "abs_error": abs(answer["value"] - expected)}


def _group_of(request_id: str) -> str:
    return request_id.split(":", 1)[-1].split("-", 1)[0]  # "t2:hard-x-01" -> "hard"


def summarize(manifest: list[dict], records: list[dict], *, wall_s: float | None = None) -> dict:
    """Counts, latency statistics and accuracy from per-request records (one per manifest row, any order)."""
    by_id = {r["id"]: r for r in records}
    ok = [by_id[m["id"]] for m in manifest if by_id.get(m["id"], {}).get("ok")]
    failed = [r for r in records if not r.get("ok")]
    lat_ok = [r["latency_ms"] for r in ok]
    lat_fail = [r["latency_ms"] for r in failed if r.get("latency_ms") is not None]
    acc: dict[str, dict] = {}
    score_err, rounded_ok = [], 0
    decisions = 0
    for m in manifest:
        r = by_id.get(m["id"])
        if not r or not r.get("ok"):
            continue
        decisions += len(m["request"]["questions"])
        for qid, exp in (m.get("expected") or {}).items():
            t = m["request"]["questions"][qid]["type"]
            g = grade(t, r["answers"][qid], exp)
            for key in ("all", f"type:{t}", f"set:{_group_of(m['id'])}"):
                slot = acc.setdefault(key, {"correct": 0, "graded": 0})
                slot["graded"] += 1
                slot["correct"] += int(g["correct"])
            if t == "score":
                score_err.append(g["abs_error"])
                rounded_ok += int(g["rounded_correct"])
    tokens = [r["input_tokens"] for r in ok if r.get("input_tokens") is not None]
    summary = {
        "planned": len(manifest),
        "attempted": sum(1 for r in records if r.get("error_kind") != "interrupted"),
        "successful": len(ok),
        "failed": len(failed),
        "errors_by_kind": dict(Counter(r["error_kind"] for r in failed)),
        "successful_decisions": decisions,
        "latency_basis": LATENCY_BASIS,
        "estimators": {"p50": "statistics.median", "p95": "nearest rank sorted[ceil(0.95 n) - 1]"},
        "successful_latency_p50_ms": median(lat_ok),
        "successful_latency_p95_ms": nearest_rank(lat_ok, 0.95),
        "successful_latency_mean_ms": statistics.fmean(lat_ok) if lat_ok else None,
        "successful_latency_min_ms": min(lat_ok) if lat_ok else None,
        "successful_latency_max_ms": max(lat_ok) if lat_ok else None,
        "failed_latency_p50_ms": median(lat_fail),
        "failed_latency_p95_ms": nearest_rank(lat_fail, 0.95),
        "input_tokens_total": sum(tokens),
        "input_tokens_p50": median(tokens),
        "accuracy": {k: {**v, "accuracy": v["correct"] / v["graded"] if v["graded"] else None}
                     for k, v in sorted(acc.items())},
        "score_rule": "argmax level (first max) == expected; rounded = floor(score + 0.5)",
        "score_rounded_correct": rounded_ok,
        "score_mae": statistics.fmean(score_err) if score_err else None,
        "evidence_complete": len(ok) == len(manifest),
    }
    if wall_s:
        summary["wall_s"] = wall_s
        summary["successful_requests_per_s"] = len(ok) / wall_s
        summary["successful_decisions_per_s"] = decisions / wall_s
    return summary


# ---------------------------------------------------------------------------------------------------------------
# run


async def _one(client, url: str, body: bytes, request: dict, decimals: int) -> dict:
    """One timed POST. The clock stops after the body is parsed and validated."""
    import httpx

    rec: dict = {"status": None, "ok": False, "latency_ms": None, "input_tokens": None, "error": None,
                 "error_kind": None}
    t0 = time.perf_counter()
    try:
        resp = await client.post(url, content=body, headers={"content-type": "application/json"})
        rec["status"] = resp.status_code
        if resp.status_code != 200:
            rec["latency_ms"] = (time.perf_counter() - t0) * 1e3
            rec["error_kind"] = f"http_{resp.status_code}"
            rec["error"] = resp.text[:500]
            return rec
        try:
            parsed = json.loads(resp.content)
            answers = validate_response(request, parsed, decimals)
        except (ValueError, InvalidResponse) as exc:
            rec["latency_ms"] = (time.perf_counter() - t0) * 1e3
            rec["error_kind"] = "invalid_response"
            rec["error"] = str(exc)[:500]
            rec["response"] = resp.text[:2000]
            return rec
        rec["latency_ms"] = (time.perf_counter() - t0) * 1e3
        rec["ok"] = True
        rec["input_tokens"] = parsed["usage"]["input_tokens"]
        rec["answers"] = answers
        rec["response_sha256"] = hashlib.sha256(resp.content).hexdigest()
        if _number(parsed.get("latency_ms")):
            rec["server_latency_ms"] = parsed["latency_ms"]
        return rec
    except httpx.TimeoutException as exc:
        rec["error_kind"], rec["error"] = "timeout", f"{type(exc).__name__}: {exc}"
    except httpx.HTTPError as exc:
        rec["error_kind"], rec["error"] = "transport", f"{type(exc).__name__}: {exc}"
    rec["latency_ms"] = (time.perf_counter() - t0) * 1e3
    return rec


def _payload(row: dict, model: str) -> bytes:
    req = {"model": model, **row["request"]}
    return json.dumps(req, ensure_ascii=False).encode("utf-8")


def _client(concurrency: int, timeout: float, api_key: str | None):
    """One keep-alive pool for warm-up and measured requests (so measured requests reuse warm connections)."""
    import httpx

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    return httpx.AsyncClient(timeout=timeout, limits=limits, trust_env=False, follow_redirects=False,
                             headers=headers)


async def _drive(client, rows: list[dict], *, url: str, model: str, concurrency: int, decimals: int, on_record,
                 progress=None, stop_on_failure: bool = False) -> bool:
    """Closed loop: `concurrency` workers take rows in manifest order. Returns False if stopped by a failure."""
    queue = list(enumerate(rows))
    queue.reverse()
    stopped = False

    async def worker():
        nonlocal stopped
        while queue and not stopped:
            index, row = queue.pop()
            rec = await _one(client, url, _payload(row, model), row["request"], decimals)
            rec = {"id": row["id"], "index": index, **rec}
            on_record(rec)
            if progress is not None:
                progress.update(1)
            if stop_on_failure and not rec["ok"]:
                stopped = True

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return not stopped


def _write_json(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _progress(total: int, desc: str, enabled: bool):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="req", dynamic_ncols=True, file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    import httpx

    manifest_path = Path(args.manifest)
    rows = load_manifest(manifest_path)
    manifest_sha = sha256_file(manifest_path)
    meta = bench_metadata.load_metadata(args.metadata)  # raises on missing/empty required keys
    if meta["manifest_sha256"] != manifest_sha:
        raise RunRefused(f"metadata manifest_sha256 {meta['manifest_sha256']} != {manifest_path} sha256 "
                         f"{manifest_sha}: regenerate the metadata for this manifest")
    warm_rows = load_manifest(args.warmup_manifest) if args.warmup_manifest else rows
    if args.concurrency < 1 or args.warmup < 0 or args.timeout <= 0:
        raise RunRefused("--concurrency must be >= 1, --warmup >= 0, --timeout > 0")
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=False)  # atomic refusal: a run directory is never reused
    except FileExistsError:
        raise RunRefused(f"{out} exists: every run needs a new output directory (nothing was written)") from None

    url = args.endpoint.rstrip("/")
    if not url.endswith("/v1/systemone"):
        url += "/v1/systemone"
    config = {
        "runner": "benchmarks/bench.py", "runner_version": RUNNER_VERSION,
        "runner_sha256": sha256_file(__file__),
        "manifest": str(manifest_path), "manifest_sha256": manifest_sha, "planned": len(rows),
        "warmup_manifest": str(args.warmup_manifest) if args.warmup_manifest else None,
        "metadata": meta, "endpoint": url, "model": args.model, "phase": args.phase,
        "concurrency": args.concurrency, "warmup": args.warmup, "timeout_s": args.timeout,
        "score_decimals": args.score_decimals, "latency_basis": LATENCY_BASIS,
        "python": platform.python_version(), "httpx": httpx.__version__,
        "started_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _write_json(out / "config.json", config)
    (out / "requests.jsonl").write_bytes(manifest_path.read_bytes())
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    common = {"url": url, "model": args.model, "concurrency": args.concurrency, "decimals": args.score_decimals}
    show = not args.no_progress
    # warm-up: cycled from the warm-up rows, never counted; any failure aborts the run
    warm = [{**warm_rows[i % len(warm_rows)], "id": f"warmup-{i}"} for i in range(args.warmup)]
    warm_records: list[dict] = []
    records: list[dict] = []
    timing = {"start": None, "stop_reason": "finished"}

    async def session(stream) -> bool:
        def keep(rec):
            records.append(rec)
            stream.write(json.dumps(rec, ensure_ascii=False) + "\n")
            stream.flush()

        async with _client(args.concurrency, args.timeout, api_key) as client:
            bar = _progress(len(warm), "warm-up", show and bool(warm))
            try:
                ok = await _drive(client, warm, on_record=warm_records.append, progress=bar, stop_on_failure=True,
                                  **common)
            finally:
                if bar is not None:
                    bar.close()
            _write_json(out / "warmup.json", sorted(warm_records, key=lambda r: r["index"]))
            if not ok:
                return False
            bar = _progress(len(rows), f"{args.phase} c={args.concurrency}", show)
            timing["start"] = time.perf_counter()
            try:
                await _drive(client, rows, on_record=keep, progress=bar, **common)
            finally:
                if bar is not None:
                    bar.close()
        return True

    with open(out / "responses.jsonl", "w", encoding="utf-8") as stream:
        try:
            warm_ok = asyncio.run(session(stream))
        except KeyboardInterrupt:
            warm_ok, timing["stop_reason"] = True, "interrupted"
    if not warm_ok:
        (out / "responses.jsonl").unlink()
        bad = next(r for r in warm_records if not r["ok"])
        _write_json(out / "completion.json", {"stop_reason": "warmup_failure", "attempted": 0,
                                              "warmup_error": bad})
        print(f"warm-up failed ({bad['error_kind']}: {bad['error']}); run aborted", file=sys.stderr)
        return 3
    t_start = timing["start"] if timing["start"] is not None else time.perf_counter()
    stop_reason = timing["stop_reason"]
    wall = time.perf_counter() - t_start
    done = {r["id"] for r in records}
    for i, row in enumerate(rows):
        if row["id"] not in done:
            records.append({"id": row["id"], "index": i, "status": None, "ok": False, "latency_ms": None,
                            "input_tokens": None, "error": "run stopped before this request completed",
                            "error_kind": "interrupted"})
    records.sort(key=lambda r: r["index"])
    tmp = out / "responses.jsonl.tmp"
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    tmp.replace(out / "responses.jsonl")  # manifest order
    summary = summarize(rows, records, wall_s=wall)
    _write_json(out / "summary.json", summary)
    _write_json(out / "completion.json", {
        "stop_reason": stop_reason, "attempted": summary["attempted"], "completed": summary["successful"],
        "finished_utc": datetime.now(UTC).isoformat(timespec="seconds"), "wall_s": wall,
        "responses_sha256": sha256_file(out / "responses.jsonl")})
    print(format_summary(summary, config))
    return 0 if summary["evidence_complete"] else 1


# ---------------------------------------------------------------------------------------------------------------
# summary / compare


def read_run(directory: str | os.PathLike) -> tuple[dict, list[dict], list[dict]]:
    d = Path(directory)
    for name in ("config.json", "requests.jsonl", "responses.jsonl"):
        if not (d / name).exists():
            raise SystemExit(f"{d} is not a complete run directory: {name} is missing")
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    manifest = load_manifest(d / "requests.jsonl")
    records = [json.loads(x) for x in (d / "responses.jsonl").read_text(encoding="utf-8").splitlines() if x]
    return config, manifest, records


def read_runs(dirs: list[str]) -> tuple[dict, list[dict], list[dict]]:
    """One run directory, or several traversals of the same manifest (same phase, concurrency, model and arm)
    pooled into one sample: ids become "t<k>:<id>", so 3 traversals of public231 give 693 latencies."""
    if len(dirs) == 1:
        return read_run(dirs[0])
    runs = [read_run(d) for d in dirs]
    c0 = runs[0][0]
    for d, (c, _, _) in zip(dirs[1:], runs[1:], strict=True):
        for key in ("manifest_sha256", "phase", "concurrency", "model"):
            if c.get(key) != c0.get(key):
                raise RunRefused(f"cannot pool {d} with {dirs[0]}: {key} differs")
        if c["metadata"].get("arm") != c0["metadata"].get("arm"):
            raise RunRefused(f"cannot pool {d} with {dirs[0]}: metadata arm differs")
    manifest, records = [], []
    for k, (_, m, r) in enumerate(runs, 1):
        manifest += [{**row, "id": f"t{k}:{row['id']}"} for row in m]
        records += [{**rec, "id": f"t{k}:{rec['id']}"} for rec in r]
    return {**c0, "traversals": list(dirs)}, manifest, records


def _split_dirs(spec: str) -> list[str]:
    dirs = [d for d in spec.split(",") if d]
    if not dirs:
        raise RunRefused("no run directory given")
    return dirs


def _ms(x) -> str:
    return "-" if x is None else f"{x:.3f} ms"


def format_summary(s: dict, config: dict) -> str:
    lines = [
        f"manifest        {config['manifest']}  sha256 {config['manifest_sha256']}",
        f"arm             {config['metadata'].get('arm')}  phase {config['phase']}  "
        f"concurrency {config['concurrency']}  warm-up {config['warmup']}",
        f"requests        planned {s['planned']}  successful {s['successful']}  failed {s['failed']}"
        + (f"  ({', '.join(f'{k} {v}' for k, v in sorted(s['errors_by_kind'].items()))})" if s["failed"] else ""),
        f"latency (ok)    p50 {_ms(s['successful_latency_p50_ms'])}  p95 {_ms(s['successful_latency_p95_ms'])}  "
        f"mean {_ms(s['successful_latency_mean_ms'])}  max {_ms(s['successful_latency_max_ms'])}",
    ]
    for key, v in s["accuracy"].items():
        lines.append(f"accuracy {key:<14} {v['correct']}/{v['graded']} = {v['accuracy']:.4f}")
    if s.get("score_mae") is not None:
        lines.append(f"score           rounded-correct {s['score_rounded_correct']}  MAE {s['score_mae']:.4f}")
    lines.append(f"evidence        {'complete' if s['evidence_complete'] else 'INCOMPLETE'}")
    return "\n".join(lines)


def summary_cmd(args: argparse.Namespace) -> int:
    dirs = [d for spec in args.directory for d in _split_dirs(spec)]
    config, manifest, records = read_runs(dirs)
    s = summarize(manifest, records)
    for d in dirs:
        if sha256_file(Path(d) / "requests.jsonl") != config["manifest_sha256"]:
            print(f"WARNING: {d}/requests.jsonl does not match the recorded manifest sha256", file=sys.stderr)
    if len(dirs) > 1:
        s["traversals"] = dirs
    print(json.dumps(s, indent=2) if args.json else format_summary(s, config))
    return 0 if s["evidence_complete"] else 1


def gate(a: dict, b: dict) -> tuple[bool, list[str]]:
    """(B replaces A, reasons). a, b: {"config": ..., "summary": ...}."""
    reasons = []
    sa, sb = a["summary"], b["summary"]
    if a["config"]["manifest_sha256"] != b["config"]["manifest_sha256"]:
        reasons.append("different manifests: not comparable")
    for key in ("concurrency", "model"):
        if a["config"].get(key) != b["config"].get(key):
            reasons.append(f"different {key}: {a['config'].get(key)!r} vs {b['config'].get(key)!r}")
    if a["config"]["phase"] != "measured" or b["config"]["phase"] != "measured":
        reasons.append("both runs must be measured-phase runs")
    if sb["successful"] != sa["successful"] or sb["failed"]:
        reasons.append(f"pass count differs or B failed: A {sa['successful']}/{sa['planned']}, "
                       f"B {sb['successful']}/{sb['planned']}")
    pa, pb = sa["successful_latency_p50_ms"], sb["successful_latency_p50_ms"]
    qa, qb = sa["successful_latency_p95_ms"], sb["successful_latency_p95_ms"]
    if None in (pa, pb, qa, qb):
        reasons.append("a run has no successful requests")
    else:
        if not pb < pa:
            reasons.append(f"p50 not lower ({pb:.3f} >= {pa:.3f} ms)")
        if not qb < qa:
            reasons.append(f"p95 not lower ({qb:.3f} >= {qa:.3f} ms)")
    return not reasons, reasons


def question_difference(question_type: str, ax: dict, ay: dict) -> tuple[bool, float]:
    """Whether two answers to one question make the same decision, and their largest probability difference."""
    if question_type == "noul":
        return (ax["value"] >= 0.5) == (ay["value"] >= 0.5), abs(ax["value"] - ay["value"])
    if question_type == "choice":
        same = ax["value"] == ay["value"]
    else:
        same = argmax_level(ax["probabilities"]) == argmax_level(ay["probabilities"])
    return same, max(abs(ax["probabilities"][k] - ay["probabilities"][k]) for k in ax["probabilities"])


def paired_answers(manifest: list[dict], ra: list[dict], rb: list[dict]):
    """(request id, question id, type, answer in A, answer in B) of every question that both runs answered."""
    a_by, b_by = {r["id"]: r for r in ra}, {r["id"]: r for r in rb}
    for m in manifest:
        x, y = a_by.get(m["id"]), b_by.get(m["id"])
        if not (x and y and x.get("ok") and y.get("ok")):
            continue
        for qid, q in m["request"]["questions"].items():
            yield m["id"], qid, q["type"], x["answers"][qid], y["answers"][qid]


def agreement(manifest: list[dict], ra: list[dict], rb: list[dict]) -> dict:
    """Per-question decision agreement and the max probability difference over requests that both answered."""
    same = total = 0
    max_dp, worst = 0.0, None
    for rid, qid, qtype, ax, ay in paired_answers(manifest, ra, rb):
        total += 1
        equal, dp = question_difference(qtype, ax, ay)
        same += int(equal)
        if dp > max_dp:
            max_dp, worst = dp, f"{rid}/{qid}"
    return {"questions": total, "same_decision": same, "max_probability_diff": max_dp, "worst": worst}


def compare_cmd(args: argparse.Namespace) -> int:
    runs = []
    for spec in (args.a, args.b):
        dirs = _split_dirs(spec)
        config, manifest, records = read_runs(dirs)
        first = read_run(dirs[0]) if len(dirs) > 1 else (config, manifest, records)
        runs.append({"dir": spec, "config": config, "manifest": first[1], "records": first[2],
                     "summary": summarize(manifest, records)})
    a, b = runs
    promote, reasons = gate(a, b)
    sa, sb = a["summary"], b["summary"]
    rows = []
    for label, key in (("p50", "successful_latency_p50_ms"), ("p95", "successful_latency_p95_ms"),
                       ("mean", "successful_latency_mean_ms")):
        x, y = sa[key], sb[key]
        delta = None if None in (x, y) else y - x
        rel = None if delta is None or not x else delta / x
        rows.append({"stat": label, "a_ms": x, "b_ms": y, "delta_ms": delta, "delta_rel": rel})
    acc_a, acc_b = sa["accuracy"].get("all", {}), sb["accuracy"].get("all", {})
    result = {"a": args.a, "b": args.b, "latency": rows,
              "successful": [sa["successful"], sb["successful"]], "planned": [sa["planned"], sb["planned"]],
              "correct": [acc_a.get("correct"), acc_b.get("correct")],
              "agreement": agreement(a["manifest"], a["records"], b["records"])
              if a["config"]["manifest_sha256"] == b["config"]["manifest_sha256"] else None,
              "b_replaces_primary": promote, "gate_reasons": reasons}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"A {args.a}  ({a['config']['metadata'].get('arm')}, {sa['planned']} samples)")
        print(f"B {args.b}  ({b['config']['metadata'].get('arm')}, {sb['planned']} samples)")
        for r in rows:
            d = "-" if r["delta_ms"] is None else f"{r['delta_ms']:+.3f} ms ({100 * (r['delta_rel'] or 0):+.2f} %)"
            print(f"{r['stat']:<5} A {_ms(r['a_ms'])}  B {_ms(r['b_ms'])}  delta {d}")
        print(f"pass  A {sa['successful']}/{sa['planned']}  B {sb['successful']}/{sb['planned']}")
        print(f"correct A {acc_a.get('correct')}  B {acc_b.get('correct')}")
        ag = result["agreement"]
        if ag:
            print(f"agreement {ag['same_decision']}/{ag['questions']} same decisions, max |dp| "
                  f"{ag['max_probability_diff']:.3g}" + (f" ({ag['worst']})" if ag["worst"] else ""))
        verdict = "B REPLACES the primary" if promote else "A stays the primary: " + "; ".join(reasons)
        print(f"gate  {verdict}")
    return 0 if promote or not args.require_gate else 1


def validate_cmd(args: argparse.Namespace) -> int:
    rows = load_manifest(args.manifest)
    kinds = Counter(q["type"] for r in rows for q in r["request"]["questions"].values())
    graded = sum(len(r.get("expected") or {}) for r in rows)
    print(f"{args.manifest}: {len(rows)} requests, {sum(kinds.values())} questions "
          f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}), {graded} with expected values")
    print(f"sha256 {sha256_file(args.manifest)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="bench.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a manifest and print its sha256")
    p.add_argument("manifest")
    p.set_defaults(fn=validate_cmd)

    p = sub.add_parser("run", help="time a manifest against a running server (writes a NEW directory)",
                       description="Time every manifest request against a running /v1/systemone server. "
                       "Warm-up requests run first and are excluded; a warm-up failure aborts the run. Exit "
                       "status: 0 all requests succeeded, 1 some failed or were not run, 2 refused before "
                       "starting (bad manifest or metadata, existing output directory), 3 warm-up failed.")
    p.add_argument("manifest")
    p.add_argument("--endpoint", required=True, help="server root, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="model name sent in every request")
    p.add_argument("--metadata", required=True,
                   help=f"JSON file with the required keys {', '.join(bench_metadata.REQUIRED_KEYS)} "
                   "(make it with benchmarks/metadata.py)")
    p.add_argument("--phase", required=True, choices=("feasibility", "measured"),
                   help="feasibility = an excluded shake-down pass; measured = evidence")
    p.add_argument("--concurrency", type=int, required=True, help="closed-loop workers (C1 = 1)")
    p.add_argument("--warmup", type=int, required=True, help="warm-up requests before the measured ones")
    p.add_argument("--warmup-manifest", help="take warm-up requests from this manifest (default: the manifest)")
    p.add_argument("--score-decimals", type=int, required=True,
                   help="decimals the server may round probabilities/scores to; sets the validation tolerances "
                   "(sum: n*0.5e-N + 1e-6; score: 0.5e-N*(1 + n(n-1)/2) + 1e-6). Unrounded servers: 6")
    p.add_argument("--output", required=True, help="new run directory (refused if it exists)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request (default %(default)s)")
    p.add_argument("--api-key-env", default=API_KEY_ENV,
                   help="env var with a bearer token to send, if set (default %(default)s)")
    p.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    p.set_defaults(fn=run)

    p = sub.add_parser("summary", help="recompute a run directory's statistics offline",
                       description="Recompute statistics offline. Several directories (space- or comma-separated "
                       "traversals of one manifest, same arm/phase/concurrency) are pooled into one sample.")
    p.add_argument("directory", nargs="+", help="run directory (or several traversals to pool)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(fn=summary_cmd)

    p = sub.add_parser("compare", help="deltas between runs A and B and the latency-primary gate",
                       description="Latency deltas (B - A), pass counts, accuracy, per-question agreement and max "
                       "probability difference (first traversal of each), and the gate: B replaces the primary A "
                       "only when both are measured runs of the same manifest, B has A's pass count and no "
                       "failures, and B's p50 AND p95 are both lower.")
    p.add_argument("a", help="run directory of the current primary (comma-separated traversals are pooled)")
    p.add_argument("b", help="run directory of the candidate (comma-separated traversals are pooled)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--require-gate", action="store_true", help="exit 1 unless B replaces the primary")
    p.set_defaults(fn=compare_cmd)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ManifestError, RunRefused, bench_metadata.MetadataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
