"""HTTP refusals: one exception type and one error-body shape for every 4xx/5xx (decision-protocol.md §3.7)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from starlette.responses import Response


class HttpError(Exception):
    """A response that is not a 200: `error` is a complete human sentence, `detail` the [{loc, msg, type}] list."""

    def __init__(self, status: int, error: str, *, detail: Sequence[Mapping] | None = None,
                 loc: Sequence[str | int] = ("body",), type: str = "value_error",
                 headers: Mapping[str, str] | None = None):
        super().__init__(error)
        self.status = status
        self.error = error
        self.type = type
        self.detail = list(detail) if detail is not None else [{"loc": list(loc), "msg": error, "type": type}]
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {"error": self.error, "detail": self.detail}


def json_bytes(obj) -> bytes:
    """Compact JSON, UTF-8, floats as Python repr (shortest round trip, never rounded); NaN is a bug, not output."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def json_response(obj, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(json_bytes(obj), status_code=status, headers=dict(headers or {}), media_type="application/json")


def error_response(exc: HttpError) -> Response:
    return json_response(exc.body(), exc.status, exc.headers)


def unavailable(reason: str, retry_after_s: int = 1) -> HttpError:
    """503 the SDK retries: loading, draining, or a device that failed (the process is about to exit)."""
    return HttpError(503, reason, loc=(), type="unavailable",
                     headers={"Retry-After": str(retry_after_s), "retry-after-ms": str(retry_after_s * 1000)})
