"""Helpers shared by the contract tests: the server process wrapper, the standard request, error-body checks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def _gpu_available() -> bool:
    """The built library loads and sees a CUDA device."""
    try:
        from startlux_native import abi

        path = abi.library_path()
        if not path.exists():
            return False
        lib = abi.load(str(path))
        count = lib.ffi.new("int *")
        return lib.raw.cs1_device_count(count) == 0 and count[0] > 0
    except Exception:  # no library, wrong ABI, no driver: the CPU reference backend it is
        return False


# Which backend the servers run: CS1_CONTRACT_BACKEND=reference|cuda, default: cuda when a GPU and the library are
# present (a tiny checkpoint in the shapes the kernels take), else the demo on the CPU reference backend.
BACKEND = os.environ.get("CS1_CONTRACT_BACKEND", "auto")
if BACKEND == "auto":
    BACKEND = "cuda" if _gpu_available() else "reference"
DEMO = BACKEND == "reference"
MODEL_NAME = "startlux-native-demo-tiny-random" if DEMO else "startlux-native-contract-tiny-gpu"
# the demo's tiny shape with the head dims the CUDA kernels implement (256 for attention, 128 for GDN)
GPU_TINY = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=256, intermediate_size=256,
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128, linear_value_head_dim=128)


def server_target(tmp: Path) -> tuple[list[str], dict]:
    """(server arguments, Settings fields) of the model every contract server serves."""
    if DEMO:
        return ["--demo"], {"demo": True, "backend": "reference"}
    from startlux_native.tiny import make_tiny_checkpoint

    folder = tmp / "gpu-tiny"
    if not (folder / "config.json").exists():
        make_tiny_checkpoint(folder, seed=0, **GPU_TINY)
    return (["--checkpoint", str(folder), "--backend", "cuda", "--model-name", MODEL_NAME],
            {"checkpoint": str(folder), "backend": "cuda", "model_names": (MODEL_NAME,)})
START_TIMEOUT_S = 150.0  # generous: CI machines with 2 busy cores load slowly
SLOW_DELAY_S = 1.5
LOAD_DELAY_S = 4.0
FAULT_STATE = "cs1-debug-fault"

STANDARD = {
    "model": "jev-latest",
    "state": {"ticket": "I was charged twice for order #4411 and the app still shows it as unpaid.",
              "amount": 12.5, "count": 2, "tags": ["billing", "app"]},
    "questions": {
        "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                 "criteria": {"billing": "Payments, refunds and invoices", "shipping": "Delivery and tracking",
                              "technical": "App, login and account problems"}},
        "urgent": {"type": "noul", "instructions": "Should this ticket be answered today?"},
        "severity": {"type": "score", "instructions": "How severe is the impact?",
                     "criteria": ["cosmetic", {"level": "annoying"}, ["blocks", "the customer"]]},
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, name: str, tmp: Path, target: list[str], args: list[str], env: dict[str, str] | None = None):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"server-{name}.log"
        # same BLAS threading as this process, so the in-process engine reproduces the server's floats exactly
        full_env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", **(env or {})}
        for key in ("CS1_DEBUG_ENGINE_DELAY_S", "CS1_DEBUG_LOAD_DELAY_S", "CS1_DEBUG_FAULT"):
            if key not in (env or {}):
                full_env.pop(key, None)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "server", *target, "--host", "127.0.0.1",
                                      "--port", str(self.port), *args],
                                     cwd=ROOT, env=full_env, stdout=self._log, stderr=subprocess.STDOUT)
        self.first_answers: dict[str, httpx.Response] = {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self, timeout: float = START_TIMEOUT_S) -> httpx.Response:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server {self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                return httpx.get(self.url + "/ready", timeout=5)
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError(f"server {self.name} did not listen within {timeout} s:\n{self.log()}")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> ServerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.wait_listening(max(deadline - time.monotonic(), 0.1))
            if r.status_code == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"server {self.name} not ready within {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


def post_raw(client: httpx.Client, body: bytes, content_type: str | None = "application/json", **headers):
    h = dict(headers)
    if content_type is not None:
        h["content-type"] = content_type
    return client.post("/v1/systemone", content=body, headers=h)


def assert_error(r: httpx.Response, status: int, *needles: str) -> dict:
    """Status, the error-body shape {error, detail[{loc, msg, type}]}, and the request id header."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers.get("x-typesafe-request-id")
    body = r.json()
    assert isinstance(body["error"], str) and body["error"], body
    assert isinstance(body["detail"], list) and body["detail"], body
    for item in body["detail"]:
        assert set(item) == {"loc", "msg", "type"}, item
        assert isinstance(item["loc"], list) and isinstance(item["msg"], str) and isinstance(item["type"], str)
    for needle in needles:
        assert needle in body["error"], (needle, body["error"])
    return body
