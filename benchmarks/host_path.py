"""Host-path latency of POST /v1/systemone: the real server with an instant fake backend, so every millisecond
measured is host work (HTTP, parse, validate, render, tokenize, read-out, response encode, thread hand-off).

    python -m benchmarks.host_path [--manifest FILE] [--traversals 3] [--warmup 1] [--output FILE.json]
        [--server-arg=--flag ...] [--b-server-arg=--flag ...]
    python -m benchmarks.host_path serve [server flags]        (the server alone, for another client; --demo
                                                               unless --checkpoint is given)
    python -m benchmarks.host_path gap RUN_DIR... SERVER_LOG   (bench.py runs: client minus the server's total)

HOST_PATH_FAKE_FORWARD="<ms>:sleep" or "<ms>:poll" (in the server's environment) makes the fake forward wait, to
imitate a forward's idle time on a machine without a GPU.

Starts `python -m benchmarks.host_path serve` (= `python -m server --demo` with server.loading.BACKEND_OVERRIDE set
to InstantBackend: the demo checkpoint's real tokenizer, prompt renderer and read-out, no forward) on a free port,
sends every manifest request (plus "model") over HTTP with httpx at concurrency 1, and reports p50/p95 of the whole
request (client clock: just before the POST to the body fully received) and of each stage the server reports in
its Server-Timing header. "asgi" is the server's own total (the total_ms of its per-request log line: uvicorn hands
the request to the app → the app returns) minus those stages (Starlette routing, Request, middleware, metrics);
"client+socket" is the client total minus the server total (httpx, loopback, uvicorn's HTTP parsing).
Estimators as in bench.py: p50 = median, p95 = nearest rank sorted[ceil(0.95 n) - 1].

The fake logits pick a row of a fixed random table by a CRC of the row's token ids, so the answers (and the
`answers_sha256` printed) change if tokenization or rendering changes: compare it before and after a host-path
change to prove the answers are bit-identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MANIFEST = ROOT / "benchmarks" / "manifests" / "public231.jsonl"
MODEL = "StartLux-Decision-v1.1-4B-Instant"
STAGES = ("read", "parse", "validate", "handoff", "render", "tokenize", "forward", "readout", "encode")
TABLE_ROWS = 4096


FAKE_FORWARD_ENV = "HOST_PATH_FAKE_FORWARD"  # "<ms>:sleep" or "<ms>:poll": the fake forward's duration and wait


def fake_forward_wait(spec: str | None):
    """The wait the instant backend makes per call, to imitate a forward's idle time without a GPU.

    "sleep": one time.sleep (the thread blocks, as a blocking CUDA sync would). "poll": time.sleep(0) in a loop until
    the time is up (the thread stays runnable and lets the GIL go between polls, as the CUDA driver's spin-wait
    inside a cffi call does). None or "" or "0": no wait."""
    if not spec or spec == "0":
        return None
    ms, _, how = spec.partition(":")
    try:
        seconds = float(ms) / 1000
    except ValueError:
        seconds = float("nan")
    if how not in ("sleep", "poll") or not seconds > 0:
        raise SystemExit(f"{FAKE_FORWARD_ENV}={spec!r}: expected '<ms>:sleep' or '<ms>:poll' with ms > 0")
    if how == "sleep":
        return lambda: time.sleep(seconds)

    def poll():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            time.sleep(0)
    return poll


class InstantBackend:
    """A Backend that computes nothing: each row's 26 logits are a table row chosen by crc32 of its token ids
    (after an optional fake wait, `HOST_PATH_FAKE_FORWARD`)."""

    name = "instant-fake"

    def __init__(self, checkpoint=None, seed: int = 0):
        self._table = np.random.default_rng(seed).normal(0.0, 2.0, (TABLE_ROWS, 26)).astype(np.float32)
        self._wait = fake_forward_wait(os.environ.get(FAKE_FORWARD_ENV))

    def letter_logits(self, rows) -> np.ndarray:
        if self._wait is not None:
            self._wait()
        return self._table[[zlib.crc32(np.ascontiguousarray(r, dtype=np.int32).tobytes()) % TABLE_ROWS
                            for r in rows]]

    def describe(self) -> dict:
        return {"name": self.name, "note": "test/bench only: no forward pass"}


def serve(argv: list[str]) -> int:
    """The server process with the instant backend installed: the demo checkpoint's tokenizer and template, or those
    of --checkpoint when it is given (its weights are never read)."""
    from server import __main__ as server_main
    from server import loading

    loading.BACKEND_OVERRIDE = InstantBackend
    has_checkpoint = any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in argv)
    return server_main.main(argv if has_checkpoint else ["--demo", *argv])


# ---------------------------------------------------------------------------------------------------------------
# client


def quantiles(values: list[float]) -> dict:
    s = sorted(values)
    return {"p50": statistics.median(s), "p95": s[max(math.ceil(0.95 * len(s)) - 1, 0)],
            "mean": statistics.fmean(s)}


def parse_server_timing(value: str) -> dict[str, float]:
    out = {}
    for part in value.split(","):
        name, _, dur = part.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_path: Path, server_args: list[str]) -> subprocess.Popen:
    env = {"TOKENIZERS_PARALLELISM": "false", **os.environ}  # pinned as in scripts/gpu_http_bench.sh unless set
    cmd = [sys.executable, "-m", "benchmarks.host_path", "serve", "--host", "127.0.0.1", "--port", str(port),
           *server_args]
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(client, proc: subprocess.Popen, log_path: Path, timeout: float = 300.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if client.get("/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"server not ready after {timeout} s:\n{log_path.read_text()[-3000:]}")


def load_bodies(manifest: Path) -> list[tuple[str, bytes]]:
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines() if line.strip()]
    requests = [(r["id"], r["request"] if "request" in r else {"state": r["state"], "questions": r["questions"]})
                for r in rows]  # a bench manifest, or rows of {id, state, questions} (Typed Decisions)
    return [(rid, json.dumps({"model": MODEL, **req}, ensure_ascii=False).encode()) for rid, req in requests]


def traverse(client, bodies, record: bool) -> tuple[list[float], list[dict], list[bytes]]:
    totals, stages, answers = [], [], []
    headers = {"content-type": "application/json"}
    for rid, body in bodies:
        t0 = time.perf_counter()
        r = client.post("/v1/systemone", content=body, headers=headers)
        t1 = time.perf_counter()
        if r.status_code != 200:
            raise SystemExit(f"{rid}: HTTP {r.status_code}: {r.text[:300]}")
        if record:
            totals.append((t1 - t0) * 1000)
            stages.append(parse_server_timing(r.headers.get("server-timing", "")))
            doc = r.json()
            doc.pop("latency_ms", None)
            answers.append(json.dumps(doc, sort_keys=True).encode())
    return totals, stages, answers


def logged_requests(log_text: str) -> list[tuple[int, float]]:
    """(input_tokens, total_ms) of every answered POST /v1/systemone, in order, from the server's log lines."""
    return [(int(t), float(ms)) for t, ms in
            re.findall(r"path=/v1/systemone status=200 .*?input_tokens=(\d+) .*?total_ms=([0-9.]+)", log_text)]


def server_totals(log_text: str) -> list[float]:
    """total_ms of every answered POST /v1/systemone, in order, from the server's per-request log lines."""
    return [ms for _, ms in logged_requests(log_text)]


def summarise(totals: list[float], stages: list[dict], app_ms: list[float]) -> dict:
    out = {"total": quantiles(totals)}
    for name in STAGES:
        vals = [s.get(name, 0.0) for s in stages]
        out[name] = quantiles(vals)
    out["stages"] = quantiles([sum(s.values()) for s in stages])
    out["asgi"] = quantiles([a - sum(s.values()) for a, s in zip(app_ms, stages, strict=True)])
    out["server"] = quantiles(app_ms)
    out["client+socket"] = quantiles([t - a for t, a in zip(totals, app_ms, strict=True)])
    return out


def table(summary: dict) -> str:
    lines = [f"{'stage':<12}{'p50 ms':>10}{'p95 ms':>10}{'mean ms':>10}"]
    for name in (*STAGES, "stages", "asgi", "server", "client+socket", "total"):
        q = summary[name]
        lines.append(f"{name:<12}{q['p50']:>10.3f}{q['p95']:>10.3f}{q['mean']:>10.3f}")
    return "\n".join(lines)


def run(args) -> int:
    import httpx

    bodies = load_bodies(Path(args.manifest))
    arms = {"A": args.server_arg} if args.b_server_arg is None else {"A": args.server_arg,
                                                                     "B": args.server_arg + args.b_server_arg}
    servers = {}
    try:
        for arm, server_args in arms.items():
            port = free_port()
            log_path = Path(tempfile.mkdtemp(prefix=f"host-path-{arm}-")) / "server.log"
            servers[arm] = (start_server(port, log_path, server_args), log_path,
                            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60))
        for proc, log_path, client in servers.values():
            wait_ready(client, proc, log_path)
            for _ in range(args.warmup):
                traverse(client, bodies, record=False)
        got = {arm: ([], [], []) for arm in servers}
        for _ in range(args.traversals):  # with two servers up, the traversals alternate A, B, A, B, ...
            for arm, (_, _, client) in servers.items():
                t, st, a = traverse(client, bodies, record=True)
                totals, stages, answers = got[arm]
                totals += t
                stages += st
                if answers and a != answers:
                    raise SystemExit(f"arm {arm}: answers differ between traversals")
                answers[:] = a
    finally:
        for proc, _, client in servers.values():
            client.close()
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    doc = {"manifest": str(args.manifest), "requests": len(bodies), "traversals": args.traversals,
           "warmup": args.warmup, "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                                              "node": platform.node()}, "arms": {}}
    for arm, (totals, stages, answers) in got.items():
        log_path = servers[arm][1]
        app_ms = server_totals(log_path.read_text(errors="replace"))[-len(totals):]
        if len(app_ms) != len(totals):
            raise SystemExit(f"arm {arm}: found {len(app_ms)} request log lines for {len(totals)} timed requests")
        summary = summarise(totals, stages, app_ms)
        digest = hashlib.sha256(b"\n".join(answers)).hexdigest()
        print(f"host path{f' arm {arm} (server args {arms[arm]})' if len(arms) > 1 else ''}: {len(bodies)} requests "
              f"x {args.traversals} traversals (warm-up {args.warmup}), concurrency 1, instant fake backend")
        print(table(summary))
        print(f"answers_sha256 {digest}")
        doc["arms"][arm] = {"server_args": arms[arm], "samples": len(totals), "answers_sha256": digest,
                            "summary_ms": summary, "server_log": str(log_path)}
    if len(arms) > 1:
        a, b = (doc["arms"][k]["summary_ms"]["total"] for k in ("A", "B"))
        same = doc["arms"]["A"]["answers_sha256"] == doc["arms"]["B"]["answers_sha256"]
        print(f"B - A: total p50 {b['p50'] - a['p50']:+.3f} ms, p95 {b['p95'] - a['p95']:+.3f} ms; "
              f"answers {'identical' if same else 'DIFFERENT'}")
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


def gap(run_dirs: list[str], server_log: str) -> int:
    """`gap RUN_DIR... SERVER_LOG`: bench.py runs against one server: client latency minus the server's own total
    (total_ms of its log line). Each run is found in the log as its sequence of input_tokens, after the previous
    run's (bench.py's warm-ups come first and are skipped)."""
    logged = logged_requests(Path(server_log).read_text(errors="replace"))
    client, app_ms, start = [], [], 0
    for d in run_dirs:
        rows = [json.loads(line) for line in (Path(d) / "responses.jsonl").read_text().splitlines() if line.strip()]
        if not rows or not all(r["ok"] for r in rows):
            raise SystemExit(f"{d}: no requests, or not every request succeeded")
        tokens = [r["input_tokens"] for r in rows]
        at = next((i for i in range(start, len(logged) - len(rows) + 1)
                   if [t for t, _ in logged[i:i + len(rows)]] == tokens), None)
        if at is None:
            raise SystemExit(f"{d}: its requests are not in {server_log} (in order, after the previous run's)")
        client += [r["latency_ms"] for r in rows]
        app_ms += [ms for _, ms in logged[at:at + len(rows)]]
        start = at + len(rows)
    for name, vals in (("client", client), ("server", app_ms),
                       ("client-server", [c - a for c, a in zip(client, app_ms, strict=True)])):
        q = quantiles(vals)
        print(f"{name:<14} p50 {q['p50']:8.3f}  p95 {q['p95']:8.3f}  mean {q['mean']:8.3f} ms  ({len(vals)} requests)")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:1] == ["gap"]:
        if len(argv) < 3:
            raise SystemExit("usage: python -m benchmarks.host_path gap RUN_DIR [RUN_DIR ...] SERVER_LOG")
        return gap(argv[1:-1], argv[-1])
    ap = argparse.ArgumentParser(prog="python -m benchmarks.host_path", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifest", default=str(DEFAULT_MANIFEST))
    ap.add_argument("--traversals", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed traversals first")
    ap.add_argument("--output", help="write the summary JSON here")
    ap.add_argument("--server-arg", action="append", default=[], help="extra server flag (repeatable)")
    ap.add_argument("--b-server-arg", action="append", default=None,
                    help="start a second server (arm B) with these extra flags as well (repeatable); both stay up "
                         "and the traversals alternate A, B, so drift hits both arms alike")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
