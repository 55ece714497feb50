"""Starlette routes and the request-context middleware (request id on every response, one log line per request)."""

from __future__ import annotations

import contextlib
import logging
import platform
import re
import time
import uuid
from importlib import metadata

import anyio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from . import jsonbody, schema
from .errors import HttpError, error_response, json_bytes, json_response, unavailable
from .loading import DEMO_BANNER, LICENCE_LINE
from .runtime import FAILED, Runtime
from .settings import Settings

log = logging.getLogger("server")
request_log = logging.getLogger("server.request")

REQUEST_ID = "x-typesafe-request-id"
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
OFF_LOOP_BYTES = 64 * 1024  # bodies above this are decoded and parsed on a worker thread, not the event loop
QUIET_PATHS = ("/health", "/v1/health", "/ready", "/metrics")


def version() -> str:
    try:
        return metadata.version("startlux-native")
    except metadata.PackageNotFoundError:
        return "0+unknown"


# ---------------------------------------------------------------------------------------------------------------
# /v1/systemone


def _decode_and_parse(raw: bytes, encoding: str, limit: int):
    return jsonbody.parse_json(jsonbody.decode(raw, encoding, limit))


async def systemone(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    ctx = request.scope["state"]
    t0 = time.perf_counter()
    rt.check_serving()
    limit = rt.settings.max_body_bytes
    jsonbody.check_content_type(request.headers.get("content-type"))
    encoding = jsonbody.content_encoding(request.headers.get("content-encoding"))
    jsonbody.check_content_length(request.headers.get("content-length"), limit)
    raw = bytearray()
    try:
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise jsonbody.too_large(None, limit)
    except ClientDisconnect:
        raise HttpError(400, "client disconnected before the body was complete", type="json_invalid") from None
    t1 = time.perf_counter()
    if len(raw) > OFF_LOOP_BYTES or encoding != "identity":
        obj = await anyio.to_thread.run_sync(_decode_and_parse, bytes(raw), encoding, limit)
    else:
        obj = _decode_and_parse(bytes(raw), encoding, limit)
    t2 = time.perf_counter()
    schema.validate_request(obj, rt.settings.max_questions)
    t3 = time.perf_counter()
    ctx["questions"] = len(obj["questions"])
    ctx["body_bytes"] = len(raw) if encoding == "identity" else None  # --inline-max-bytes: plain bodies only
    answers, usage, queue_s, gpu_s = await rt.decide(obj["state"], obj["questions"], ctx)
    ctx.update(input_tokens=usage.get("input_tokens"), queue_ms=queue_s * 1000, gpu_ms=gpu_s * 1000)
    t4 = time.perf_counter()
    body = {"model": rt.loaded.names[0], "answers": answers, "usage": usage,
            "latency_ms": round((queue_s + gpu_s) * 1000, 2)}
    content = json_bytes(body)
    t5 = time.perf_counter()
    timing = ctx["host_timing"] = server_timing(t1 - t0, t2 - t1, t3 - t2, ctx.get("engine_s") or {}, t5 - t4)
    headers = {"x-queue-time-ms": f"{queue_s * 1000:.2f}", "x-inference-time-ms": f"{gpu_s * 1000:.2f}",
               "server-timing": timing}
    return Response(content, 200, headers, media_type="application/json")


TIMED_STAGES = ("render", "tokenize", "forward", "readout", "handoff")


def server_timing(read_s: float, parse_s: float, validate_s: float, engine_s: dict, encode_s: float) -> str:
    """The Server-Timing header (ms, 3 decimals): where one request's host time went (benchmarks/host_path.py)."""
    parts = [f"read;dur={read_s * 1000:.3f}", f"parse;dur={parse_s * 1000:.3f}",
             f"validate;dur={validate_s * 1000:.3f}"]
    parts += [f"{k};dur={engine_s[k] * 1000:.3f}" for k in TIMED_STAGES if k in engine_s]
    parts.append(f"encode;dur={encode_s * 1000:.3f}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------------------------------------------
# the other endpoints


def _description(rt: Runtime) -> str:
    text = ("StartLux-Decision typed decision model (choice, noul, score; Instant read-out). Weights: "
            "startlux-models/StartLux-Decision-v1.1-4B-Instant, CC BY-NC 4.0 (non-commercial), not distributed by "
            "this server.")
    if rt.loaded is not None and rt.loaded.demo:
        text = DEMO_BANNER + ". " + text
    return text


async def models(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    if rt.loaded is None:
        rt.check_serving()
        raise unavailable("model is loading", 2)
    release = rt.loaded.checkpoint.decision_config.release_date
    return json_response({"models": [{"name": n, "description": _description(rt), "release_date": release}
                                      for n in rt.loaded.names]})


async def health(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    if rt.loaded and getattr(request.app.state, "backend_info", None) is None:
        request.app.state.backend_info = rt.loaded.engine.backend.describe()  # once: it does not change after load
    backend = getattr(request.app.state, "backend_info", None) or {}
    graphs = backend.get("graphs")
    body = {"status": "ok" if rt.state != FAILED else "failed", "state": rt.state,
            "model": rt.loaded.names[0] if rt.loaded else None, "backend": rt.settings.backend,
            "accelerator": (backend.get("device") or {}).get("compute_capability") and "cuda",
            "fast_kernels": rt.settings.backend == "cuda", "graphs": graphs,
            "cuda_graphs": bool(graphs and graphs.startswith("enabled")),
            "images": False, "max_length": rt.settings.max_prompt_tokens}
    return json_response(body, 503 if rt.state == FAILED else 200)


async def ready(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    rt.check_serving()
    return json_response({"status": "ready", "model": rt.loaded.names[0]})


async def metrics(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    return Response(rt.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


async def openapi(request: Request) -> Response:
    return json_response(request.app.state.openapi)


async def info(request: Request) -> Response:
    rt: Runtime = request.app.state.runtime
    s = rt.settings
    body = {
        "state": rt.state, "reason": rt.reason, "uptime_s": round(time.time() - rt.started_at, 1),
        "licence": LICENCE_LINE,
        "demo": DEMO_BANNER if s.demo else None,
        "limits": {"max_prompt_tokens": s.max_prompt_tokens, "max_request_tokens": s.max_request_tokens,
                   "max_body_bytes": s.max_body_bytes, "max_queue": s.max_queue, "max_questions": s.max_questions,
                   "max_choice_options": schema.MAX_CHOICE_OPTIONS, "score_levels": list(schema.SCORE_LEVELS),
                   "max_json_depth": jsonbody.MAX_JSON_DEPTH},
        "settings": s.public(),
        "queue": {"admitted": rt.admission.admitted, "capacity": rt.admission.capacity},
        "build": {"version": version(), "python": platform.python_version()},
    }
    if rt.loaded is not None:
        eng, ck = rt.loaded.engine, rt.loaded.checkpoint
        dc = ck.decision_config
        body["limits"]["max_request_tokens"] = eng.max_request_tokens
        body.update({
            "models": rt.loaded.names,
            "temperature_by_type": dict(dc.temperature_by_type), "temperature_source": dict(dc.temperature_source),
            "engine": eng.describe(), "backend": eng.backend.describe(), "checkpoint": ck.describe(),
            "start_up": {"load_seconds": round(rt.loaded.load_seconds, 3), "stages_ms": rt.loaded.stages_ms,
                         "self_test": rt.loaded.self_test},
        })
        build = getattr(eng.backend, "build_info", None)
        if callable(build):
            with contextlib.suppress(Exception):
                body["build"]["library"] = build()
    return Response(json_bytes(_jsonable(body)), media_type="application/json")


def _jsonable(value):
    """describe() dicts may hold paths, tuples or numpy scalars; /info shows them as plain JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


# ---------------------------------------------------------------------------------------------------------------
# errors and middleware


async def _http_error(request: Request, exc: HttpError) -> Response:
    ctx = request.scope.setdefault("state", {})
    ctx["error"], ctx["error_type"] = exc.error, exc.type
    return error_response(exc)


async def _starlette_error(request: Request, exc: HTTPException) -> Response:
    text = {404: "not found", 405: "method not allowed"}.get(exc.status_code, str(exc.detail).lower())
    err = HttpError(exc.status_code, text, loc=("path",), type={404: "not_found", 405: "method_not_allowed"}.get(
        exc.status_code, "http_error"), headers=exc.headers)
    return await _http_error(request, err)


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(HttpError(500, "internal server error", loc=(), type="internal_error"))


class RequestContext:
    """Outermost ASGI layer: request id (client's own if sane, else uuid4 hex) on every response, the per-request
    log line, request metrics, and a JSON 500 for anything that escaped."""

    def __init__(self, app, runtime: Runtime):
        self.app = app
        self.runtime = runtime

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"x-typesafe-request-id"), "")
        rid = supplied if _CLIENT_ID.match(supplied) else uuid.uuid4().hex
        ctx = scope.setdefault("state", {})
        ctx["request_id"] = rid
        t0 = time.perf_counter()
        sent = {"status": None}

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID] = rid
                sent["status"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:  # noqa: BLE001 - the 500 was sent by the handler below, or is sent here
            log.error("unhandled error (request %s): %s: %s", rid, type(exc).__name__, exc, exc_info=exc)
            if sent["status"] is None:
                with contextlib.suppress(Exception):
                    await error_response(HttpError(500, "internal server error", loc=(), type="internal_error"))(
                        scope, receive, send_with_id)
            sent["status"] = sent["status"] or 500
        finally:
            self._record(scope, ctx, rid, sent["status"] or 500, time.perf_counter() - t0)

    def _record(self, scope, ctx, rid, status, seconds) -> None:
        path = scope.get("path", "")
        route = scope.get("route")
        route_name = getattr(route, "path", None) or "unmatched"
        error_type = "" if status < 400 else str(ctx.get("error_type") or status)
        m = self.runtime.metrics
        m.requests.labels(route_name, str(status), error_type).inc()
        if route_name.startswith("/v1/systemone"):
            m.total_seconds.observe(seconds)
        level = logging.DEBUG if path in QUIET_PATHS and status < 500 else logging.INFO
        if not request_log.isEnabledFor(level):
            return
        parts = [f"id={rid}", f"method={scope.get('method')}", f"path={path}", f"status={status}"]
        for key in ("questions", "input_tokens"):
            if ctx.get(key) is not None:
                parts.append(f"{key}={ctx[key]}")
        for key in ("queue_ms", "gpu_ms"):
            if ctx.get(key) is not None:
                parts.append(f"{key}={ctx[key]:.2f}")
        parts.append(f"total_ms={seconds * 1000:.2f}")
        if ctx.get("host_timing"):
            parts.append("timing=" + ctx["host_timing"].replace(";dur=", ":").replace(", ", ","))
        if ctx.get("error"):
            parts.append("error=" + json_bytes(ctx["error"][:300]).decode())
        if ctx.get("error_detail"):
            parts.append("detail=" + json_bytes(ctx["error_detail"][:300]).decode())
        request_log.log(level, "request " + " ".join(parts))


def create_app(settings: Settings, runtime: Runtime | None = None):
    rt = runtime or Runtime(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        log.info(LICENCE_LINE)
        if settings.demo:
            log.warning(DEMO_BANNER)
        log.info("settings: %s", settings.public())
        rt.start()
        try:
            yield
        finally:
            rt.close()

    routes = [
        Route("/v1/systemone", systemone, methods=["POST"]),
        Route("/v1/systemone/", systemone, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/info", info, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={
        HttpError: _http_error, HTTPException: _starlette_error, Exception: _internal_error})
    app.router.redirect_slashes = False
    app.state.runtime = rt
    app.state.openapi = schema.openapi("startlux-native", version())
    return RequestContext(app, rt)

