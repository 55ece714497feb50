"""--inline-max-bytes: which requests run on the event loop, and that the loop path frees its admission slot and
binds the backend's device once (server/runtime.py). The HTTP behaviour is covered by the contract suite, whose
servers run with the default limit."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("starlette")

from server.runtime import READY, Runtime  # noqa: E402
from server.settings import Settings  # noqa: E402


class FakeBackend:
    def __init__(self):
        self.bound = 0

    def bind_thread(self):
        self.bound += 1


class FakeEngine:
    def __init__(self, fail: bool = False):
        self.backend = FakeBackend()
        self.fail = fail
        self.calls = 0

    def decide(self, state, questions, timings):
        self.calls += 1
        if self.fail:
            raise RuntimeError("engine failed on purpose")
        timings["forward"] = 0.0
        return {q: {"type": "noul", "value": True} for q in questions}, {"input_tokens": 7}


class FakeLoaded:
    def __init__(self, engine):
        self.engine = engine


def ready_runtime(limit: int = 4096, engine: FakeEngine | None = None) -> Runtime:
    rt = Runtime(Settings(demo=True, inline_max_bytes=limit))
    rt.state = READY
    rt.loaded = FakeLoaded(engine or FakeEngine())
    return rt


def test_default_limit_is_on():
    assert Settings().inline_max_bytes == 32768


@pytest.mark.parametrize(("limit", "body", "expected"), [
    (4096, 1, True), (4096, 4096, True), (4096, 4097, False), (0, 1, False), (4096, None, False)])
def test_inline_only_for_short_plain_bodies(limit, body, expected):
    assert ready_runtime(limit)._inline_ok(body) is expected


def test_inline_never_when_anything_else_is_admitted_or_running():
    rt = ready_runtime()
    rt.admission.admitted = 1
    assert not rt._inline_ok(100)
    rt.admission.admitted = 0
    rt.worker.busy_since = 1.0
    assert not rt._inline_ok(100)
    rt.worker.busy_since = None
    rt.worker.stop_starting = True
    assert not rt._inline_ok(100)
    rt.worker.stop_starting = False
    rt.state = "draining"
    assert not rt._inline_ok(100)
    rt.state = READY
    assert rt._inline_ok(100)


def test_inline_never_when_the_server_holds_another_request():
    rt = ready_runtime()
    rt.request_tasks = lambda: 2  # uvicorn holds another request (its host work should overlap this forward)
    assert not rt._inline_ok(100)
    rt.request_tasks = lambda: 1  # this request alone
    assert rt._inline_ok(100)


def test_inline_never_with_a_testing_aid_that_needs_the_worker():
    rt = ready_runtime()
    rt.debug_delay = 0.5
    assert not rt._inline_ok(100)
    rt = ready_runtime()
    rt.debug_fault = "transient"
    assert not rt._inline_ok(100)


def test_inline_decide_answers_binds_once_and_frees_the_slot():
    engine = FakeEngine()
    rt = ready_runtime(engine=engine)

    async def two():
        ctx1, ctx2 = {"body_bytes": 100}, {"body_bytes": 100}
        # the worker thread is never started here: a request that went to it would wait, and time out
        first = await asyncio.wait_for(rt.decide("s", {"q": {}}, ctx1), 5)
        second = await asyncio.wait_for(rt.decide("s", {"q": {}}, ctx2), 5)
        return first, second, ctx1, ctx2

    first, second, ctx1, _ = asyncio.run(two())
    assert first[0] == {"q": {"type": "noul", "value": True}} and second[1] == {"input_tokens": 7}
    assert engine.calls == 2 and engine.backend.bound == 1
    assert rt.admission.admitted == 0
    assert ctx1["engine_s"]["handoff"] < 0.05  # no thread in between


def test_inline_failure_is_500_and_frees_the_slot():
    from server.errors import HttpError

    rt = ready_runtime(engine=FakeEngine(fail=True))
    with pytest.raises(HttpError) as info:
        asyncio.run(asyncio.wait_for(rt.decide("s", {"q": {}}, {"body_bytes": 100}), 5))
    assert info.value.status == 500
    assert rt.admission.admitted == 0
