"""Every refusal of decision-protocol.md §3.9: status, a complete `error` sentence, `detail[{loc, msg, type}]`."""

from __future__ import annotations

import copy
import gzip
import json

import pytest
import zstandard
from contract_harness import STANDARD, assert_error, post_raw

LIMIT = 4 * 1024 * 1024  # the default --max-body-bytes


def body_with(**changes) -> bytes:
    doc = copy.deepcopy(STANDARD)
    doc.update(changes)
    return json.dumps(doc).encode()


def one(question) -> bytes:
    return json.dumps({"state": "s", "questions": {"q": question}}).encode()


BAD_JSON = {
    "truncated": b'{"state": "s", "questions": {',
    "empty body": b"",
    "trailing garbage": b'{"state": "s"} x',
    "single quotes": b"{'state': 's'}",
    "duplicate key": b'{"state": "a", "state": "b", "questions": {"q": {"type": "noul"}}}',
    "duplicate nested key": b'{"state": {"k": 1, "k": 2}, "questions": {"q": {"type": "noul"}}}',
    "NaN": b'{"state": {"x": NaN}, "questions": {"q": {"type": "noul"}}}',
    "Infinity": b'{"state": {"x": Infinity}, "questions": {"q": {"type": "noul"}}}',
    "-Infinity": b'{"state": [-Infinity], "questions": {"q": {"type": "noul"}}}',
    "overflowing float": b'{"state": {"x": 1e400}, "questions": {"q": {"type": "noul"}}}',
    "overflowing negative float": b'{"state": {"x": -2.5e309}, "questions": {"q": {"type": "noul"}}}',
    "deep nesting": b'{"state": ' + b"[" * 5000 + b"]" * 5000 + b', "questions": {"q": {"type": "noul"}}}',
    "nesting over 100": b'{"state": ' + b"[" * 150 + b"]" * 150 + b', "questions": {"q": {"type": "noul"}}}',
    "invalid utf-8": b'{"state": "\xff\xfe", "questions": {"q": {"type": "noul"}}}',
    "lone surrogate": b'{"state": "\\ud800", "questions": {"q": {"type": "noul"}}}',
    "huge integer": b'{"state": {"x": ' + b"9" * 5000 + b'}, "questions": {"q": {"type": "noul"}}}',
}


@pytest.mark.parametrize("raw", BAD_JSON.values(), ids=BAD_JSON.keys())
def test_malformed_json_is_400(client, raw):
    body = assert_error(post_raw(client, raw), 400, "body is not valid JSON")
    assert body["detail"][0]["type"] == "json_invalid"


@pytest.mark.parametrize("raw", [b"[]", b'"text"', b"3", b"null"], ids=["array", "string", "number", "null"])
def test_body_not_an_object_is_400(client, raw):
    assert_error(post_raw(client, raw), 400, "body must be a JSON object")


@pytest.mark.parametrize("questions", [None, {}, [], "q", 5], ids=["missing", "empty", "array", "string", "number"])
def test_questions_missing_or_empty_is_400(client, questions):
    doc = {"state": "s"} if questions is None else {"state": "s", "questions": questions}
    body = assert_error(client.post("/v1/systemone", json=doc), 400, "questions must be a non-empty object")
    assert body["detail"][0]["loc"] == ["body", "questions"]


def test_body_over_the_limit_is_413_from_content_length(client):
    r = post_raw(client, b" " * (LIMIT + 1))
    assert_error(r, 413, f"request body is {LIMIT + 1} bytes, over the {LIMIT}-byte limit")


def test_streamed_body_over_the_limit_is_413(client):
    def chunks():
        for _ in range(5):
            yield b" " * (1024 * 1024)

    r = client.post("/v1/systemone", content=chunks(), headers={"content-type": "application/json"})
    assert "content-length" not in r.request.headers
    assert_error(r, 413, f"over the {LIMIT}-byte limit")


def peak_rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_zstd_bomb_is_413_without_inflating(client, main_server):
    """1 GiB of JSON text in ~32 KiB of zstd: refused with 413 while the server's peak memory barely moves."""
    head, tail = b'{"state": "', b'", "questions": {"q": {"type": "noul"}}}'
    packer = zstandard.ZstdCompressor(level=1).compressobj()
    parts = [packer.compress(head)]
    block = b"a" * (16 * 1024 * 1024)
    parts += [packer.compress(block) for _ in range(64)]
    parts += [packer.compress(tail), packer.flush()]
    packed = b"".join(parts)
    before = peak_rss_bytes(main_server.proc.pid)
    r = post_raw(client, packed, **{"content-encoding": "zstd"})
    grown = peak_rss_bytes(main_server.proc.pid) - before
    print(f"zstd bomb: {len(packed)} bytes on the wire, 1 GiB decoded; server peak RSS grew {grown >> 20} MiB")
    assert_error(r, 413, "decoded request body", f"over the {LIMIT}-byte limit")
    assert grown < 128 * 1024 * 1024


def test_gzip_bomb_is_413(client):
    packed = gzip.compress(b'{"state": "' + b"a" * (64 * 1024 * 1024) + b'"}', 6)
    assert_error(post_raw(client, packed, **{"content-encoding": "gzip"}), 413, "decoded request body")


def test_corrupt_compressed_body_is_400(client):
    assert_error(post_raw(client, b"not zstd at all", **{"content-encoding": "zstd"}), 400, "not valid zstd")
    assert_error(post_raw(client, b"not gzip at all", **{"content-encoding": "gzip"}), 400, "not valid gzip")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", "application/jsonx"])
def test_wrong_content_type_is_415(client, content_type):
    assert_error(post_raw(client, body_with(), content_type), 415, "content type must be application/json")


def test_non_utf8_charset_is_415(client):
    assert_error(post_raw(client, body_with(), "application/json; charset=latin-1"), 415, "charset")


@pytest.mark.parametrize("encoding", ["br", "deflate", "gzip, zstd", "compress"])
def test_unsupported_content_encoding_is_415(client, encoding):
    assert_error(post_raw(client, body_with(), **{"content-encoding": encoding}), 415,
                 "unsupported Content-Encoding")


UNPROCESSABLE = {
    "unknown type": (one({"type": "rank", "criteria": ["a", "b"]}), "unknown question type 'rank'"),
    "missing type": (one({"instructions": "x", "criteria": {"a": None, "b": None}}), "unknown question type"),
    "type bool": (one({"type": "bool", "instructions": "x"}), "unknown question type 'bool'"),
    "type box": (one({"type": "box", "instructions": "the dog"}), "unknown question type 'box'"),
    "type not a string": (one({"type": 3}), "unknown question type"),
    "question not an object": (one("is it?"), "must be a JSON object"),
    "question is a list": (one(["noul"]), "must be a JSON object"),
    "choice without criteria": (one({"type": "choice", "instructions": "x"}), "criteria: field required"),
    "score without criteria": (one({"type": "score", "instructions": "x"}), "criteria: field required"),
    "choice criteria a list": (one({"type": "choice", "instructions": "x", "criteria": ["a", "b"]}), "criteria"),
    "score criteria an object": (one({"type": "score", "instructions": "x", "criteria": {"0": "a"}}), "criteria"),
    "choice with 0 options": (one({"type": "choice", "instructions": "x", "criteria": {}}),
                              "choice needs 1..255 options, got 0"),
    "choice with 256 options": (one({"type": "choice", "instructions": "x",
                                     "criteria": {f"o{i}": None for i in range(256)}}),
                                "choice needs 1..255 options, got 256"),
    "score with 1 level": (one({"type": "score", "instructions": "x", "criteria": ["only"]}),
                           "score needs 2..10 levels"),
    "score with 11 levels": (one({"type": "score", "instructions": "x", "criteria": [str(i) for i in range(11)]}),
                             "score needs 2..10 levels"),
    "score level null": (one({"type": "score", "instructions": "x", "criteria": ["a", None]}), "criteria.1"),
    "description a number": (one({"type": "choice", "instructions": "x", "criteria": {"a": 1, "b": None}}),
                             "criteria.a"),
    "instructions a number": (one({"type": "noul", "instructions": 7}), "instructions"),
    "noul criteria a string": (one({"type": "noul", "criteria": "yes"}), "criteria"),
    "unknown member in question": (one({"type": "noul", "instructions": "x", "weight": 2}),
                                   "unknown member 'weight'"),
    "options alias": (one({"type": "choice", "instructions": "x", "options": {"a": None, "b": None}}),
                      "unknown member 'options'"),
    "question alias": (one({"type": "noul", "question": "x"}), "unknown member 'question'"),
    "unknown member in noul criteria": (one({"type": "noul", "criteria": {"true": "a", "maybe": "b"}}),
                                        "unknown member 'maybe'"),
    "blank choice instructions": (one({"type": "choice", "instructions": "  ", "criteria": {"a": None, "b": None}}),
                                  "instructions required"),
    "option id with a newline": (one({"type": "choice", "instructions": "x", "criteria": {"a\nb": None, "c": None}}),
                                 "bad option id"),
    "blank option id": (one({"type": "choice", "instructions": "x", "criteria": {" ": None, "c": None}}),
                        "bad option id"),
    "option id over 200 chars": (one({"type": "choice", "instructions": "x",
                                      "criteria": {"a" * 201: None, "c": None}}), "bad option id"),
    "images present": (body_with(images=["data:image/png;base64,AAAA"]), "this model takes no images"),
    "assets present": (body_with(assets={"img": {"type": "image", "data_base64": "AAAA", "format": "png"}}),
                       "this model takes no images"),
    "state missing": (json.dumps({"questions": STANDARD["questions"]}).encode(), "state: field required"),
    "state null": (body_with(state=None), "state"),
    "state a number": (body_with(state=42), "state"),
    "state a boolean": (body_with(state=True), "state"),
    "model not a string": (body_with(model=5), "model"),
    "too many questions": (json.dumps({"state": "s", "questions": {
        f"q{i}": {"type": "noul"} for i in range(65)}}).encode(), "65 questions, over the limit of 64"),
}


@pytest.mark.parametrize("raw,needle", UNPROCESSABLE.values(), ids=UNPROCESSABLE.keys())
def test_unprocessable_is_422(client, raw, needle):
    body = assert_error(post_raw(client, raw), 422, needle)
    print(body["error"])


@pytest.mark.parametrize("model", ["StartLux-Decision-v1.1-4B-AutoThink", "startlux-decision-v1.1-27b-instant",
                                   "StartLux-Decision-v1.1-27B-AutoThink"])
def test_autothink_and_27b_are_refused_by_design(client, model):
    body = assert_error(post_raw(client, body_with(model=model)), 422, "refused by design", model)
    assert body["detail"][0]["loc"] == ["body", "model"]


def test_prompt_over_the_token_limit_is_422_naming_question_count_and_limit(client):
    long_text = "word " * 34000  # ~34k tokens, over the default 32,768 (tokenized, never run)
    doc = {"state": "short", "questions": {
        "fine": {"type": "noul", "instructions": "ok?"},
        "long one": {"type": "noul", "instructions": long_text}}}
    body = assert_error(client.post("/v1/systemone", json=doc), 422, "question 'long one'", "32768-token limit",
                        "no silent truncation")
    tokens = int(body["error"].split("prompt is ")[1].split(" tokens")[0])
    assert tokens > 32768
    assert body["detail"][0]["loc"][:3] == ["body", "questions", "long one"]


def test_first_failing_question_in_request_order_decides(client):
    doc = {"state": "s", "questions": {
        "ok": {"type": "noul"},
        "first": {"type": "score", "instructions": "x", "criteria": ["a"]},
        "second": {"type": "rank"}}}
    body = assert_error(client.post("/v1/systemone", json=doc), 422, "question 'first'")
    assert len(body["detail"]) == 2


def test_unknown_path_is_404_and_wrong_method_is_405(client):
    for method, path in [("GET", "/"), ("GET", "/v1/nothing"), ("POST", "/v2/systemone"), ("GET", "/v1/systemone//")]:
        assert_error(client.request(method, path), 404, "not found")
    r = client.get("/v1/systemone")
    assert_error(r, 405, "method not allowed")
    assert r.headers["allow"] == "POST"
    r = client.post("/v1/models", json={})
    assert_error(r, 405, "method not allowed")
    assert "GET" in r.headers["allow"]
