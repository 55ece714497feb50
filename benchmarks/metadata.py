"""Bench metadata: what ran where. `bench.py run` refuses a metadata file that lacks a required key.

Required (non-empty strings):
  gpu                  GPU name (nvidia-smi)
  driver               driver version (nvidia-smi)
  cuda                 CUDA versions: driver API (nvidia-smi) and toolkit (nvcc)
  commit               git commit of the server checkout ("+dirty" when it has uncommitted changes)
  checkpoint_revision  the weights' revision, or "random weights (...)" for a bench checkpoint
  precision            e.g. "bf16"
  manifest_sha256      sha256 of the manifest the run uses (run checks it)
  arm                  which server configuration answered, e.g. "native graph", "reference eager"

Fill what can be found automatically:
    python benchmarks/metadata.py --output meta.json --manifest benchmarks/manifests/public231.jsonl \\
        --checkpoint /models/startlux-4b [--endpoint http://127.0.0.1:8000] [--arm "native graph"]
        [--precision bf16] [--set key=value ...]
Exit status 0 when every required key is filled, 2 otherwise (the file is written either way, for editing).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REQUIRED_KEYS = ("gpu", "driver", "cuda", "commit", "checkpoint_revision", "precision", "manifest_sha256", "arm")
RANDOM_MARKER = "RANDOM_WEIGHTS.json"  # written by benchmarks/make_bench_checkpoint.py
REPO = Path(__file__).resolve().parent.parent


class MetadataError(ValueError):
    """A metadata file that cannot back a benchmark run."""


def missing_keys(meta: dict) -> list[str]:
    return [k for k in REQUIRED_KEYS if not (isinstance(meta.get(k), str) and meta[k].strip())]


def load_metadata(path: str | os.PathLike) -> dict:
    try:
        meta = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MetadataError(f"metadata {path}: cannot read: {exc}") from exc
    if not isinstance(meta, dict):
        raise MetadataError(f"metadata {path}: must hold a JSON object")
    missing = missing_keys(meta)
    if missing:
        raise MetadataError(f"metadata {path} lacks required keys (non-empty strings): {', '.join(missing)}")
    return meta


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=30, cwd=cwd, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def gpu_facts(index: int) -> dict:
    fields = "name,driver_version,pci.bus_id,memory.total,power.limit,clocks.max.sm,compute_cap"
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", f"--id={index}"])
    facts: dict = {}
    if out:
        parts = [p.strip() for p in out.splitlines()[0].split(",")]
        names = fields.split(",")
        row = dict(zip(names, parts, strict=False))
        facts["gpu"] = row.get("name", "")
        facts["driver"] = row.get("driver_version", "")
        facts["gpu_details"] = {k: v for k, v in row.items() if k not in ("name", "driver_version")}
    header = _run(["nvidia-smi"])
    m = re.search(r"CUDA Version:\s*([\d.]+)", header or "")
    nvcc = _run(["nvcc", "--version"])
    n = re.search(r"release ([\d.]+), V([\d.]+)", nvcc or "")
    cuda = []
    if m:
        cuda.append(f"driver API {m.group(1)}")
    if n:
        cuda.append(f"nvcc {n.group(2)}")
    facts["cuda"] = "; ".join(cuda)
    facts["gpu_ids"] = os.environ.get("CUDA_VISIBLE_DEVICES", str(index))
    return facts


def git_commit(repo: Path = REPO) -> str:
    head = _run(["git", "rev-parse", "HEAD"], cwd=repo)
    if not head:
        return ""
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo)
    return head + ("+dirty" if dirty else "")


def checkpoint_revision(folder: Path) -> str:
    """'random weights (...)' for a bench checkpoint, a HF snapshot hash from the path, else ''."""
    marker = folder / RANDOM_MARKER
    if marker.exists():
        info = json.loads(marker.read_text(encoding="utf-8"))
        return f"random weights (seed {info.get('seed')}, {info.get('shape', 'bench shape')})"
    m = re.search(r"snapshots/([0-9a-f]{40})", str(folder.resolve()))
    if m:
        return m.group(1)
    rev = folder / "REVISION"
    return rev.read_text(encoding="utf-8").strip() if rev.exists() else ""


def sha256_file(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def server_info(endpoint: str) -> dict:
    """GET <endpoint>/info of a running server: backend, profile and start-up facts ({} when unavailable)."""
    import httpx

    try:
        r = httpx.get(endpoint.rstrip("/") + "/info", timeout=10, trust_env=False)
        info = r.json() if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    keep = ("settings", "backend", "engine", "start_up", "models")
    out = {k: info[k] for k in keep if k in info}
    profile = (info.get("checkpoint") or {}).get("profile")
    if profile:
        out["profile"] = profile
    return out


def default_arm(info: dict) -> str:
    backend = (info.get("settings") or {}).get("backend") or (info.get("backend") or {}).get("name")
    mode = (info.get("profile") or {}).get("attention_mode")
    return " ".join(x for x in (backend, mode and f"({mode})") if x)


def collect(args: argparse.Namespace) -> dict:
    meta: dict = {"created_utc": datetime.now(UTC).isoformat(timespec="seconds"), "host": platform.node()}
    meta.update(gpu_facts(args.gpu_index))
    meta["commit"] = git_commit()
    meta["precision"] = args.precision
    if args.endpoint:
        meta["server_info"] = server_info(args.endpoint)
    meta["arm"] = args.arm or default_arm(meta.get("server_info") or {})
    meta["checkpoint_revision"] = args.checkpoint_revision or (
        checkpoint_revision(Path(args.checkpoint)) if args.checkpoint else "")
    if args.checkpoint:
        meta["checkpoint"] = str(Path(args.checkpoint).resolve())
    meta["manifest_sha256"] = sha256_file(args.manifest) if args.manifest else ""
    if args.manifest:
        meta["manifest"] = str(args.manifest)
    for item in args.set or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set needs key=value, got {item!r}")
        meta[key] = value
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", required=True, help="metadata JSON to write (refused if it exists)")
    ap.add_argument("--manifest", help="manifest the runs will use (its sha256 is recorded)")
    ap.add_argument("--checkpoint", help="checkpoint folder (revision from a snapshot path, REVISION file or "
                    "the random-weights marker)")
    ap.add_argument("--checkpoint-revision", help="explicit revision (overrides --checkpoint detection)")
    ap.add_argument("--arm", help='server configuration, e.g. "native graph", "reference graph"')
    ap.add_argument("--endpoint", help="a running server's root URL: records its /info (backend, attention mode, "
                    "graphs, flash-linear-attention) and names the arm from it when --arm is not given")
    ap.add_argument("--precision", default="bf16", help="weights/activation precision (default %(default)s)")
    ap.add_argument("--gpu-index", type=int, default=0, help="nvidia-smi GPU index (default %(default)s)")
    ap.add_argument("--set", action="append", metavar="KEY=VALUE", help="add or override a key (repeatable)")
    args = ap.parse_args(argv)
    out = Path(args.output)
    if out.exists():
        raise SystemExit(f"{out} exists; metadata files are not overwritten")
    meta = collect(args)
    out.write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    missing = missing_keys(meta)
    print(json.dumps(meta, indent=2, ensure_ascii=False))
    if missing:
        print(f"{out}: fill these required keys before `bench.py run`: {', '.join(missing)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
