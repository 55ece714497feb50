"""python -m server: flags (with CS1_* twins) → settings → uvicorn (uvloop + httptools when installed)."""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import sys

import uvicorn

from .app import create_app
from .runtime import Runtime
from .settings import parse


class DrainingServer(uvicorn.Server):
    """uvicorn, but SIGTERM/SIGINT first drain (503 for new work, admitted work finishes), then stop; a second
    signal stops at once. The process exit code comes from the runtime (0, or non-zero after a failure)."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime):
        super().__init__(config)
        self.runtime = runtime
        # uvicorn's live request tasks (this request's included): --inline-max-bytes leaves a request to the GPU
        # thread when others are in the server, so their host work overlaps its forward
        runtime.request_tasks = lambda: len(self.server_state.tasks)

    def handle_exit(self, sig, frame) -> None:
        if self.runtime.drain_requested:
            self.should_exit = True
            self.force_exit = sig == signal.SIGINT
            return
        self.runtime.request_drain()

    async def on_tick(self, counter: int) -> bool:
        if self.runtime.tick():
            return True
        return await super().on_tick(counter)


def _setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).setLevel(level.upper())
    logging.getLogger("uvicorn.access").disabled = True


def event_loop(choice: str) -> str:
    """uvicorn's loop for the --event-loop choice; 'uvloop' without the package is a clear start-up error."""
    installed = importlib.util.find_spec("uvloop") is not None
    if choice == "uvloop" and not installed:
        raise SystemExit("--event-loop uvloop: the uvloop package is not installed (pip install uvloop)")
    loop = "uvloop" if choice == "uvloop" or (choice == "auto" and installed) else "asyncio"
    logging.getLogger("server").info("event loop: %s (--event-loop %s)", loop, choice)
    return loop


def tokenizer_parallelism(on: bool) -> None:
    """--parallel-tokenize decides, whatever TOKENIZERS_PARALLELISM said before (the tokenizers library reads it on
    each batch call; set before the tokenizer is loaded)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if on else "false"


def main(argv=None) -> int:
    settings = parse(argv)
    _setup_logging(settings.log_level)
    tokenizer_parallelism(settings.parallel_tokenize)  # shown as parallel_tokenize in the start-up settings line
    runtime = Runtime(settings)
    app = create_app(settings, runtime)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_config=None, access_log=False, lifespan="on",
        loop=event_loop(settings.event_loop),
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        timeout_graceful_shutdown=int(settings.graceful_timeout) + 5, limit_concurrency=4096, workers=1)
    DrainingServer(config, runtime).run()
    if runtime.exit_code:
        logging.getLogger("server").error("exiting with status %d: %s", runtime.exit_code, runtime.reason)
    return runtime.exit_code


if __name__ == "__main__":
    sys.exit(main())
