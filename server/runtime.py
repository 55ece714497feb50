"""The serving state machine: loading → ready → draining (SIGTERM) or failed (sticky device error / load failure).

Everything that touches the engine runs on the GPU worker thread, except a short request that finds nothing else
admitted when --inline-max-bytes allows it: that one runs on the event loop itself, which saves the two thread
wake-ups of the hand-off. State changes happen on the event loop (the worker reports back through
call_soon_threadsafe). `tick()` is polled by the uvicorn server every 0.1 s and says
when the process should stop serving; `exit_code` is what it exits with.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time

from .errors import HttpError, unavailable
from .metrics import Metrics
from .settings import Settings
from .worker import Admission, Draining, GpuWorker, run_admitted

log = logging.getLogger("server")

LOADING, READY, DRAINING, FAILED = "loading", "ready", "draining", "failed"
EXIT_LOAD_FAILED, EXIT_DEVICE_FAILED = 2, 3
DEBUG_FAULT_STATE = "cs1-debug-fault"  # with CS1_DEBUG_FAULT set, a request with this state fails on purpose


def _env_float(name: str) -> float:
    try:
        return max(float(os.environ.get(name, "0") or 0), 0.0)
    except ValueError:
        return 0.0


class Runtime:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.metrics = Metrics()
        self.worker = GpuWorker()
        self.admission = Admission(settings.max_queue)
        self.state = LOADING
        self.reason: str | None = None
        self.loaded = None
        self.exit_code = 0
        self.drain_requested = False
        self.drain_deadline: float | None = None
        self.started_at = time.time()
        self.gpu_seconds_avg: float | None = None
        # testing aids, documented in --help
        self.debug_delay = _env_float("CS1_DEBUG_ENGINE_DELAY_S")
        self.debug_load_delay = _env_float("CS1_DEBUG_LOAD_DELAY_S")
        self.debug_fault = os.environ.get("CS1_DEBUG_FAULT", "").strip().lower() or None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_bound = False  # the backend's device made current on the loop thread (first inline request)
        self.request_tasks = None  # set by the uvicorn server: how many requests it holds now (this one included)

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the worker and queue the load; the server answers (503) while it runs."""
        self._loop = asyncio.get_running_loop()
        self.worker.start()
        fut = self.worker.submit(self._load)
        fut.add_done_callback(lambda f: self._call_soon(self._load_done, f))

    def _call_soon(self, fn, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the process is exiting anyway
            pass

    def _load(self):
        from .loading import load

        if self.debug_load_delay:
            time.sleep(self.debug_load_delay)
        return load(self.settings)

    def _load_done(self, fut) -> None:
        exc = fut.exception()
        if exc is not None:
            from startlux_native.errors import StartluxError

            # our own errors name the file, tensor or check; anything else is a bug and gets its traceback
            log.error("start-up failed: %s: %s", type(exc).__name__, exc,
                      exc_info=None if isinstance(exc, StartluxError) else exc)
            self._fail(f"start-up failed: {exc}", EXIT_LOAD_FAILED)
            return
        self.loaded = fut.result()
        if self.state != LOADING:
            return
        self.state = READY
        self.metrics.ready.set(1)
        names = ", ".join(self.loaded.names)
        log.info("ready: serving %s on backend %s (loaded and self-tested in %.1f s: %s)", names,
                 self.settings.backend, self.loaded.load_seconds,
                 ", ".join(f"{k} {v:.0f} ms" for k, v in self.loaded.stages_ms.items()))

    def _fail(self, reason: str, code: int) -> None:
        self.state, self.reason, self.exit_code = FAILED, reason, code
        self.worker.stop_starting = True
        self.metrics.ready.set(0)
        self.drain_deadline = time.monotonic() + 5.0  # answer what is in flight with 503, then exit

    def request_drain(self) -> None:
        """From the signal handler: only sets a flag; tick() does the rest on the loop."""
        self.drain_requested = True

    def tick(self) -> bool:
        """Polled on the loop; True when the server should stop serving now."""
        if self.drain_requested and self.state in (LOADING, READY):
            log.info("draining: new requests get 503; waiting for %d admitted request(s) (at most %.0f s)",
                     self.admission.admitted, self.settings.graceful_timeout)
            was_loading = self.state == LOADING
            self.state, self.reason = DRAINING, "shutting down"
            self.metrics.ready.set(0)
            self.worker.stop_starting = True
            self.drain_deadline = time.monotonic() + (0.0 if was_loading else self.settings.graceful_timeout)
        busy = self.worker.busy_since is not None
        self.metrics.admitted.set(self.admission.admitted)
        self.metrics.in_flight.set(1 if busy else 0)
        self.metrics.queue_depth.set(max(self.admission.admitted - (1 if busy else 0), 0))
        if self.state in (DRAINING, FAILED):
            if self.admission.admitted == 0 or time.monotonic() >= (self.drain_deadline or 0):
                return True
        return False

    def close(self) -> None:
        """Free the model on the GPU thread (bounded wait: a wedged device must not block the exit)."""
        backend = getattr(self.loaded.engine, "backend", None) if self.loaded is not None else None
        if backend is not None and callable(getattr(backend, "close", None)) and self.state != FAILED:
            try:
                self.worker.submit(backend.close, always=True).result(timeout=10)
            except Exception as exc:  # noqa: BLE001 - teardown is best effort
                log.warning("freeing the model failed: %s", exc)
        self.worker.close(timeout=1.0)

    # ---- requests ----------------------------------------------------------------------------------------------

    def check_serving(self) -> None:
        if self.state == READY:
            return
        if self.state == LOADING:
            raise unavailable("model is loading", 2)
        if self.state == DRAINING:
            raise unavailable("shutting down", 1)
        raise unavailable("device failure; the server is restarting", 5)

    def retry_after_ms(self) -> int:
        """A hint for 429: the admitted work ahead, at the recent per-request engine time."""
        per = self.gpu_seconds_avg if self.gpu_seconds_avg is not None else 0.05
        return max(50, int(math.ceil(per * max(self.admission.admitted, 1) * 1000)))

    def busy(self) -> HttpError:
        ms = self.retry_after_ms()
        seconds = max(1, math.ceil(ms / 1000))
        self.metrics.rejected.inc()
        return HttpError(429, f"server is busy; retry after {seconds} s", loc=(), type="busy",
                         headers={"Retry-After": str(seconds), "retry-after-ms": str(ms)})

    def _decide_job(self, state, questions, submitted: float):
        from startlux_native.errors import BackendError

        started = time.perf_counter()
        if self.debug_delay:
            time.sleep(self.debug_delay)
        if self.debug_fault in ("transient", "sticky") and state == DEBUG_FAULT_STATE:
            raise BackendError(f"debug fault injected (CS1_DEBUG_FAULT={self.debug_fault})",
                               sticky=self.debug_fault == "sticky")
        timings: dict[str, float] = {}
        try:
            answers, usage = self.loaded.engine.decide(state, questions, timings)
        except Exception as exc:
            if getattr(exc, "sticky", False):
                self.worker.stop_starting = True  # before the next queued job can start
            raise
        done = time.perf_counter()
        return answers, usage, started - submitted, done - started, timings, done

    def _inline_ok(self, body_bytes) -> bool:
        """Whether this request may run on the event loop: short, nothing else admitted, no other request in the
        server (its host work would wait for this forward instead of overlapping it), the worker idle, no testing
        aid that needs the worker (a delay there would stall the loop)."""
        limit = self.settings.inline_max_bytes
        return (limit > 0 and body_bytes is not None and body_bytes <= limit and self.admission.admitted == 0
                and (self.request_tasks is None or self.request_tasks() <= 1)
                and self.worker.busy_since is None and not self.worker.stop_starting and self.state == READY
                and not self.debug_delay and not self.debug_fault)

    def _decide_inline(self, state, questions):
        try:
            if not self._loop_bound:
                bind = getattr(self.loaded.engine.backend, "bind_thread", None)
                if bind is not None:
                    bind()
                self._loop_bound = True
            return self._decide_job(state, questions, time.perf_counter())
        finally:
            self.admission.release()

    async def decide(self, state, questions, context: dict):
        """Admitted → queued → engine (on the loop when _inline_ok). Returns (answers, usage, queue_s, gpu_s) or
        raises HttpError."""
        from startlux_native.errors import RequestRefused

        inline = self._inline_ok(context.get("body_bytes"))
        if not self.admission.try_acquire():
            raise self.busy()
        try:
            if inline:
                answers, usage, queue_s, gpu_s, timings, done = self._decide_inline(state, questions)
            else:
                answers, usage, queue_s, gpu_s, timings, done = await run_admitted(
                    self.worker, self.admission, self._decide_job, state, questions, time.perf_counter())
        except RequestRefused as exc:
            raise HttpError(exc.status, exc.error, detail=exc.detail(), type=exc.type) from None
        except Draining:
            self.check_serving()
            raise unavailable("shutting down", 1) from None
        except Exception as exc:
            context["error_detail"] = f"{type(exc).__name__}: {exc}"
            if getattr(exc, "sticky", False):
                log.critical("sticky device error (request %s): %s; exiting with status %d so a supervisor restarts "
                             "the process", context.get("request_id"), exc, EXIT_DEVICE_FAILED)
                self._fail(f"device failure: {exc}", EXIT_DEVICE_FAILED)
                raise unavailable("device failure; the server is restarting", 5) from None
            log.error("inference failed (request %s): %s: %s", context.get("request_id"), type(exc).__name__, exc,
                      exc_info=not type(exc).__name__ == "BackendError")
            raise HttpError(500, "inference failed", loc=(), type="internal_error") from None
        timings["handoff"] = queue_s + (time.perf_counter() - done)  # loop → worker → loop, without the job
        context["engine_s"] = timings
        self.gpu_seconds_avg = gpu_s if self.gpu_seconds_avg is None else 0.8 * self.gpu_seconds_avg + 0.2 * gpu_s
        m = self.metrics
        m.queue_seconds.observe(queue_s)
        m.gpu_seconds.observe(gpu_s)
        m.input_tokens.inc(usage.get("input_tokens", 0))
        m.questions.inc(len(answers))
        return answers, usage, queue_s, gpu_s
