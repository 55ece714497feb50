"""One exception hierarchy for the whole package. The server maps each to an HTTP status."""

from __future__ import annotations

from collections.abc import Sequence


class StartluxError(Exception):
    """Base of every error this package raises on purpose."""


class RequestRefused(StartluxError):
    """A deterministic refusal of one request (a 4xx that clients must not retry).

    `loc` points at the offending field, e.g. ("body", "questions", "severity", "criteria");
    `type` is a short code (value_error, too_long, missing, unsupported, ...).
    """

    def __init__(self, msg: str, *, status: int = 422, loc: Sequence[str | int] = ("body",),
                 type: str = "value_error", error: str | None = None):
        super().__init__(error or msg)
        self.msg = msg
        self.status = status
        self.loc = tuple(loc)
        self.type = type
        self.error = error or msg

    def detail(self) -> list[dict]:
        return [{"loc": list(self.loc), "msg": self.msg, "type": self.type}]


class CheckpointError(StartluxError):
    """The checkpoint folder cannot be served: the message names the file or tensor and the reason."""


class TokenizerError(StartluxError):
    """The tokenizer fails a start-up check (letters, chat suffix, decision_config letter ids)."""


class BackendError(StartluxError):
    """An internal inference failure (non-finite logits, a CUDA error). `sticky` means the device context is
    unusable and the process must exit so a supervisor restarts it."""

    def __init__(self, msg: str, *, sticky: bool = False):
        super().__init__(msg)
        self.sticky = sticky
