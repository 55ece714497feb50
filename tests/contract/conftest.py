"""Contract tests run against REAL server processes (uvicorn on a free port): `python -m server --demo` (the tiny
random checkpoint on the CPU reference backend), or, when a GPU and the built library are present (or
CS1_CONTRACT_BACKEND=cuda), a tiny checkpoint in the kernels' head shapes on the CUDA backend. All servers of the
session start at once, so their start-ups overlap; each fixture then waits for its server's /ready.

Servers:
  main   --demo (defaults, max-queue 8)
  slow   --demo --max-queue 1, CS1_DEBUG_ENGINE_DELAY_S (every request sleeps on the GPU thread),
         CS1_DEBUG_LOAD_DELAY_S (readiness is observed as 503 first), CS1_DEBUG_FAULT=transient
  sticky --demo, CS1_DEBUG_FAULT=sticky (a device failure: 503, then the process exits non-zero)
  drain  --demo, CS1_DEBUG_ENGINE_DELAY_S (SIGTERM while a request is in flight)
"""

from __future__ import annotations

import httpx
import pytest
from contract_harness import LOAD_DELAY_S, SLOW_DELAY_S, STANDARD, ServerProcess, server_target


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """Build the demo checkpoint once (so servers never race to build it), then start every server at once."""
    from server.loading import demo_checkpoint

    demo_checkpoint()
    tmp = tmp_path_factory.mktemp("servers")
    target, _ = server_target(tmp)
    servers = {
        "main": ServerProcess("main", tmp, target, ["--max-queue", "8"]),
        "slow": ServerProcess("slow", tmp, target, ["--max-queue", "1"],
                              {"CS1_DEBUG_ENGINE_DELAY_S": str(SLOW_DELAY_S),
                               "CS1_DEBUG_LOAD_DELAY_S": str(LOAD_DELAY_S), "CS1_DEBUG_FAULT": "transient"}),
        "sticky": ServerProcess("sticky", tmp, target, [], {"CS1_DEBUG_FAULT": "sticky"}),
        "drain": ServerProcess("drain", tmp, target, ["--graceful-timeout", "20"],
                               {"CS1_DEBUG_ENGINE_DELAY_S": "2.0"}),
    }
    # readiness as seen before the model is loaded (the slow server loads for LOAD_DELAY_S at least)
    slow = servers["slow"]
    slow.first_answers["ready"] = slow.wait_listening()
    slow.first_answers["decide"] = httpx.post(slow.url + "/v1/systemone", json=STANDARD, timeout=10)
    slow.first_answers["health"] = httpx.get(slow.url + "/health", timeout=10)
    yield servers
    for s in servers.values():
        s.stop()


@pytest.fixture(scope="session")
def target_settings(fleet) -> dict:
    """Settings fields of the model the servers serve (for an in-process engine over the same checkpoint)."""
    return server_target(next(iter(fleet.values())).log_path.parent)[1]


@pytest.fixture(scope="session")
def main_server(fleet) -> ServerProcess:
    return fleet["main"].wait_ready()


@pytest.fixture(scope="session")
def slow_server(fleet) -> ServerProcess:
    return fleet["slow"].wait_ready()


@pytest.fixture(scope="session")
def client(main_server):
    with httpx.Client(base_url=main_server.url, timeout=60) as c:
        yield c


