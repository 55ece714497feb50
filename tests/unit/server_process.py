"""A server as a child process for a test: started on a free port, waited for until /ready, stopped with SIGTERM.
A server that exits or is not ready in time fails the test with its log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(args: list[str], log_path: Path, *, ready_s: float = 150.0) -> Iterator[str]:
    """`python <args> --port <free port>` from the repository root; yields its base URL once /ready says 200."""
    import httpx

    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, *args, "--port", str(port)], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_s
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready after {ready_s:.0f} s:\n{log_path.read_text(errors='replace')}")
            try:
                if httpx.get(url + "/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
