"""Reading a request body: content type, Content-Encoding (identity, gzip, zstd), size limits, strict JSON.

Limits apply to the bytes on the wire (Content-Length checked before reading, streamed bytes counted) and to the
decoded size (decoded in bounded chunks, so a decompression bomb is refused with 413 without being inflated).
The JSON parse keeps member order and the int/float distinction (the renderer re-emits the state byte-exactly,
decision-protocol.md §1.3) and refuses what Python's json module would otherwise let through.
"""

from __future__ import annotations

import io
import json
import math
import re
import zlib

import numpy as np
import zstandard

from .errors import HttpError

MAX_JSON_DEPTH = 100          # deeper documents are refused (400) before anything recurses over them
DECODE_CHUNK = 256 * 1024     # output bytes per decompression step


def too_large(size: int | None, limit: int, what: str = "request body") -> HttpError:
    said = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return HttpError(413, f"{what} is {said}, over the {limit}-byte limit", type="too_long")


def check_content_type(value: str | None) -> None:
    media = (value or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        if media.startswith("multipart/"):
            msg = "content type must be application/json (this model takes no images, so no multipart bodies)"
        else:
            msg = "content type must be application/json"
        raise HttpError(415, msg, loc=("header", "content-type"), type="unsupported")
    params = value.split(";")[1:]
    for param in params:
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise HttpError(415, f"unsupported charset '{val.strip()}': the body must be UTF-8",
                            loc=("header", "content-type"), type="unsupported")


def content_encoding(value: str | None) -> str:
    """'identity', 'gzip' or 'zstd'; anything else (including a list of several encodings) is a 415."""
    codings = [c.strip().lower() for c in (value or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return "identity"
    if len(codings) == 1 and codings[0] in ("gzip", "x-gzip", "zstd"):
        return "gzip" if codings[0] == "x-gzip" else codings[0]
    raise HttpError(415, f"unsupported Content-Encoding '{value}' (accepted: identity, gzip, zstd)",
                    loc=("header", "content-encoding"), type="unsupported")


def check_content_length(value: str | None, limit: int) -> None:
    if value is None:
        return
    try:
        size = int(value)
    except ValueError:
        raise HttpError(400, f"invalid Content-Length '{value}'", loc=("header", "content-length")) from None
    if size > limit:
        raise too_large(size, limit)


def decode(raw: bytes, encoding: str, limit: int) -> bytes:
    """Decompress in bounded steps; refuse (413) as soon as the output passes `limit`."""
    if encoding == "identity":
        return raw
    out = bytearray()
    try:
        if encoding == "gzip":
            d = zlib.decompressobj(wbits=47)  # gzip or zlib header, detected
            data = raw
            while data:
                out += d.decompress(data, DECODE_CHUNK)
                if len(out) > limit:
                    raise too_large(None, limit, "decoded request body")
                data = d.unconsumed_tail
                if d.eof:
                    break
            if not d.eof:
                raise HttpError(400, "body is not valid gzip: truncated stream", type="json_invalid")
        else:
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw), read_across_frames=True) as reader:
                while chunk := reader.read(DECODE_CHUNK):
                    out += chunk
                    if len(out) > limit:
                        raise too_large(None, limit, "decoded request body")
    except (zlib.error, zstandard.ZstdError) as exc:
        raise HttpError(400, f"body is not valid {encoding}: {exc}", type="json_invalid") from None
    return bytes(out)


class _Refused(Exception):
    """Raised from inside json.loads hooks; carries the parser detail."""


def _pairs(pairs: list) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {json.dumps(key, ensure_ascii=False)} in an object")
            seen.add(key)
    return obj


def _constant(name: str):
    raise _Refused(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:40]} overflows a 64-bit float")
    return value


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _depth(text: bytes) -> int:
    """Maximum bracket depth, strings removed (vectorised: a 4 MiB body takes milliseconds)."""
    skeleton = np.frombuffer(_STRING.sub(b"", text), dtype=np.uint8)
    steps = (np.isin(skeleton, (0x5B, 0x7B)).astype(np.int32) - np.isin(skeleton, (0x5D, 0x7D)).astype(np.int32))
    return int(np.cumsum(steps).max(initial=0))


def _has_lone_surrogate(value) -> bool:
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_json(body: bytes):
    """Strict JSON → Python objects (dicts in member order, int vs float kept). Raises HttpError 400."""
    def refuse(detail: str) -> HttpError:
        return HttpError(400, f"body is not valid JSON: {detail}", type="json_invalid")

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"invalid UTF-8 at byte {exc.start}") from None
    # depth never exceeds the number of openers (strings included), so most bodies skip the scan
    if body.count(b"[") + body.count(b"{") > MAX_JSON_DEPTH and _depth(body) > MAX_JSON_DEPTH:
        raise refuse(f"nesting deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
    except _Refused as exc:
        raise refuse(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise refuse(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise refuse("nesting too deep") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise refuse(str(exc)) from None
    if _SURROGATE_ESCAPE.search(body) and _has_lone_surrogate(value):
        raise refuse("a string holds a lone UTF-16 surrogate")
    return value
