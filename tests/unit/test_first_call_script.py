"""scripts/gpu_first_call.sh picks its work by the card: the record of main on an H200, LEVER_CMD elsewhere.

Run on the CPU with a stand-in nvidia-smi on PATH and, for the record, stand-ins for the HTTP bench and the device
environment in a scratch copy of the script's folder layout (the record deletes native/ when ab_old/ is there, so it
never runs in the checkout itself)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_first_call.sh"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def run(tmp_path: Path, card: str, repo: Path, **env: str) -> subprocess.CompletedProcess:
    executable(tmp_path / "bin" / "nvidia-smi", f"#!/bin/sh\necho '{card}'\n")
    full = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", **env}
    return subprocess.run(["bash", str(repo / "scripts" / "gpu_first_call.sh")], env=full, capture_output=True,
                          text=True, timeout=60)


def test_an_h100_runs_the_lever_command_with_out_set(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run(tmp_path, "NVIDIA H100 80GB HBM3", ROOT, OUT=str(out), MAIN="abc1234",
               LEVER_CMD='echo "lever saw $OUT" > "$OUT/lever.txt"')
    assert done.returncode == 0, done.stderr
    assert (out / "lever.txt").read_text().strip() == f"lever saw {out}"
    log = (out / "first_call.log").read_text()
    assert "card: NVIDIA H100 80GB HBM3" in log and "lever rc=0" in log


def test_no_lever_command_on_an_h100_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run(tmp_path, "NVIDIA H100 80GB HBM3", ROOT, OUT=str(out), MAIN="abc1234")
    assert done.returncode == 0
    assert "nothing to run" in (out / "first_call.log").read_text()


def test_main_is_required(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MAIN"}
    executable(tmp_path / "bin" / "nvidia-smi", "#!/bin/sh\necho 'NVIDIA H200'\n")
    env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    env["OUT"] = str(out)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "MAIN=<main commit> is required" in done.stderr


def test_an_h200_records_main_from_ab_old(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "gpu_first_call.sh")
    # the HTTP bench stand-in writes which manifest and commit it was given
    executable(repo / "scripts" / "gpu_http_bench.sh",
               '#!/bin/bash\nmkdir -p "$OUT"\necho "${MANIFEST:-public231} $CS1_GIT_DESCRIBE" > "$OUT/summary.txt"\n')
    (repo / "scripts" / "device_env.sh").write_text('mkdir -p "$1"\n')
    (repo / "native").mkdir()
    (repo / "native" / "kernel.cu").write_text("lever under test\n")
    (repo / "build.sh").write_text("lever build\n")
    (repo / "ab_old" / "native").mkdir(parents=True)
    (repo / "ab_old" / "native" / "kernel.cu").write_text("main\n")
    (repo / "ab_old" / "build.sh").write_text("main build\n")
    out = tmp_path / "out"
    out.mkdir()
    done = run(tmp_path, "NVIDIA H200", repo, OUT=str(out), MAIN="abc1234")
    assert done.returncode == 0, done.stderr
    assert (repo / "native" / "kernel.cu").read_text() == "main\n", "the record is not of main's native/"
    assert not (repo / "ab_old").exists()
    log = (out / "first_call.log").read_text()
    assert "record: native/ from ab_old/" in log and "Public231 rc=0" in log and "three fields rc=0" in log
    with tarfile.open(out / "record.tar") as tar:
        p231 = tar.extractfile("record/p231/summary.txt").read().decode().split()
        tf = tar.extractfile("record/tf/summary.txt").read().decode().split()
    assert p231 == ["public231", "abc1234"]
    assert tf == ["benchmarks/manifests/three-fields-891.jsonl", "abc1234"]
    assert sorted(p.name for p in out.iterdir()) == ["first_call.log", "ladder.log", "record.tar"]
