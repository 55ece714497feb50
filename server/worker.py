"""The GPU worker: one thread owns the engine (loading included) and runs jobs one at a time, in arrival order.

The event loop only submits jobs and awaits their futures. Admission (in flight + queued) is counted on the event
loop, so it needs no lock; the slot is released when the job's future is done (also when a client went away while
its job was still queued: such jobs are skipped, never run).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger("server.worker")


class Draining(Exception):
    """A queued job was not started because the server is shutting down or the device failed."""


class GpuWorker:
    def __init__(self, name: str = "cs1-gpu"):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.stop_starting = False  # set when draining or after a fatal error: queued jobs fail with Draining
        self.busy_since: float | None = None

    def start(self) -> None:
        self._thread.start()

    def submit(self, fn: Callable, *args, always: bool = False) -> concurrent.futures.Future:
        """Queue fn(*args); `always` jobs (teardown) run even when draining."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((fut, fn, args, always))
        return fut

    def close(self, timeout: float | None = None) -> None:
        self._jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            fut, fn, args, always = item
            if not fut.set_running_or_notify_cancel():
                continue  # the client went away while queued
            if self.stop_starting and not always:
                fut.set_exception(Draining())
                continue
            self.busy_since = time.perf_counter()
            try:
                result = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - every failure goes back to the waiting request
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            finally:
                self.busy_since = None


class Admission:
    """A non-blocking counter of admitted requests (in flight + queued), touched only on the event loop."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.admitted = 0

    def try_acquire(self) -> bool:
        if self.admitted >= self.capacity:
            return False
        self.admitted += 1
        return True

    def release(self) -> None:
        self.admitted -= 1


async def run_admitted(worker: GpuWorker, admission: Admission, fn: Callable, *args):
    """Run fn(*args) on the worker; the admission slot (already acquired) is freed when the job is really done."""
    loop = asyncio.get_running_loop()
    fut = worker.submit(fn, *args)
    fut.add_done_callback(lambda _f: _call_soon(loop, admission.release))
    return await asyncio.wrap_future(fut)


def _call_soon(loop: asyncio.AbstractEventLoop, fn) -> None:
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:  # loop closed at exit
        pass
