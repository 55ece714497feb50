"""200 answers: fields per question type, wide choice, shortcut, order, determinism, and the server's answers equal
the engine's own answers for the same parsed request (so parsing kept member order and int vs float)."""

from __future__ import annotations

import copy
import gzip
import json
import math

import pytest
import zstandard
from contract_harness import MODEL_NAME, STANDARD, post_raw

from server.loading import load
from server.settings import Settings


@pytest.fixture(scope="session")
def local_engine(target_settings):
    """The same checkpoint and backend, in this process: the ground truth for the server's answers."""
    return load(Settings(**target_settings)).engine


def decide(client, body):
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def check_probabilities(probs: dict, keys) -> None:
    assert list(probs) == list(keys)
    assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in probs.values())
    assert math.isclose(sum(probs.values()), 1.0, abs_tol=1e-5), sum(probs.values())


def test_each_question_type_has_its_answer_fields(client, main_server):
    body = decide(client, STANDARD)
    assert set(body) == {"model", "answers", "usage", "latency_ms"}
    assert body["model"] == MODEL_NAME  # the server's own name, not the request's alias
    assert list(body["answers"]) == ["team", "urgent", "severity"]
    team, urgent, severity = (body["answers"][k] for k in ("team", "urgent", "severity"))

    assert set(team) == {"type", "choice", "confidence", "probabilities"} and team["type"] == "choice"
    check_probabilities(team["probabilities"], ["billing", "shipping", "technical"])
    p = team["probabilities"]
    assert team["choice"] == max(p, key=p.get)
    n, p_max = len(p), max(p.values())
    assert math.isclose(team["confidence"], min(max((n * p_max - 1) / (n - 1), 0.0), 1.0), rel_tol=1e-5)

    assert set(urgent) == {"type", "noul"} and 0.0 <= urgent["noul"] <= 1.0

    assert set(severity) == {"type", "score", "confidence", "legend", "probabilities"}
    check_probabilities(severity["probabilities"], ["0", "1", "2"])
    assert severity["legend"] == {"0": "cosmetic", "1": {"level": "annoying"}, "2": ["blocks", "the customer"]}
    expected = sum(i * q for i, q in enumerate(severity["probabilities"].values()))
    assert math.isclose(severity["score"], expected, rel_tol=1e-5)
    assert 0.0 <= severity["confidence"] <= 1.0

    usage = body["usage"]
    assert usage["output_tokens"] == 0 and isinstance(usage["input_tokens"], int) and usage["input_tokens"] > 0
    print("answers:", json.dumps(body["answers"])[:300], "usage:", usage)


def test_wide_choice_30_options(client):
    criteria = {f"option {i}": f"description number {i}" for i in range(30)}
    body = decide(client, {"state": "pick one", "questions": {
        "w": {"type": "choice", "instructions": "Which option?", "criteria": criteria}}})
    answer = body["answers"]["w"]
    check_probabilities(answer["probabilities"], list(criteria))
    assert all(p > 0 for p in answer["probabilities"].values())  # non-finalists share the residual
    assert answer["choice"] in criteria
    print("wide choice:", answer["choice"], answer["confidence"], body["usage"])


def test_one_option_choice_is_answered_without_the_model(client):
    body = decide(client, {"state": "x", "questions": {
        "only": {"type": "choice", "instructions": "Pick", "criteria": {"the one": None}}}})
    assert body["answers"]["only"] == {"type": "choice", "choice": "the one", "confidence": 1.0,
                                       "probabilities": {"the one": 1.0}}
    assert body["usage"] == {"input_tokens": 0, "output_tokens": 0}


def test_same_request_same_answer_any_alias_trailing_slash_and_encoding(client):
    first = decide(client, STANDARD)
    raw = json.dumps({**STANDARD, "model": "some-other-name"}).encode()
    variants = {
        "again": client.post("/v1/systemone", json=STANDARD),
        "no model": client.post("/v1/systemone", json={k: v for k, v in STANDARD.items() if k != "model"}),
        "other alias": post_raw(client, raw),
        "trailing slash": client.post("/v1/systemone/", json=STANDARD),
        "gzip": post_raw(client, gzip.compress(raw), **{"content-encoding": "gzip"}),
        "zstd": post_raw(client, zstandard.compress(raw), **{"content-encoding": "zstd"}),
        "charset": post_raw(client, raw, "application/json; charset=utf-8"),
    }
    for name, r in variants.items():
        assert r.status_code == 200, (name, r.text)
        assert r.json()["answers"] == first["answers"], name
        assert r.json()["usage"] == first["usage"], name


STATES = [
    "plain text with unicode: café ✓ and an emoji 😀",
    "   ",
    {"b": 1, "a": 2},
    {"a": 2, "b": 1},
    {"x": 1},
    {"x": 1.0},
    {"x": 1e16, "y": -0.0, "z": 12345678901234567890123},
    {"list": list(range(9)), "nested": {"deep": [{"k": None, "t": True}]}},
    [],
    {"s": "quote \" backslash \\ newline \n tab \t ctrl \u0001 del \u007f sep \u2028"},
]


@pytest.mark.parametrize("state", STATES, ids=[f"state{i}" for i in range(len(STATES))])
def test_server_answers_equal_the_engine_for_the_same_json(client, local_engine, state):
    """The body is sent as JSON text; the server must hand the engine exactly what Python's json makes of it
    (order, int vs float, escapes), so its answers equal an in-process decide() on the same document."""
    questions = copy.deepcopy(STANDARD["questions"])
    text = json.dumps({"state": state, "questions": questions}, ensure_ascii=False)
    r = post_raw(client, text.encode("utf-8"))
    assert r.status_code == 200, r.text
    answers, usage = local_engine.decide(json.loads(text)["state"], questions)
    body = r.json()
    assert body["usage"] == usage
    assert_same_answers(body["answers"], json.loads(json.dumps(answers)))


def assert_same_answers(got, want, tol: float = 0.0) -> None:
    """Same ids, types, choices, legends and keys in the same order, and bit-identical floats (same numpy, same BLAS
    threading: the servers inherit this process's environment). A different prompt moves them by ~1e-2."""
    assert list(got) == list(want)
    worst = 0.0
    for qid, a in got.items():
        b = want[qid]
        assert list(a) == list(b) and a["type"] == b["type"] and a.get("choice") == b.get("choice")
        assert a.get("legend") == b.get("legend")
        floats_a = [a[k] for k in ("noul", "score", "confidence") if k in a] + list(a.get("probabilities", {}).values())
        floats_b = [b[k] for k in ("noul", "score", "confidence") if k in b] + list(b.get("probabilities", {}).values())
        assert list(a.get("probabilities", {})) == list(b.get("probabilities", {}))
        worst = max([worst] + [abs(x - y) for x, y in zip(floats_a, floats_b, strict=True)])
    print(f"max |server - in-process engine| = {worst:.3g} (tolerance {tol})")
    assert worst <= tol, (got, want)


def test_member_order_and_number_kind_change_the_prompt(client):
    """{"b":1,"a":2} vs {"a":2,"b":1} and 1 vs 1.0 render differently (order and number kind are kept)."""
    def probs(state):
        return decide(client, {"state": state, "questions": STANDARD["questions"]})["answers"]["team"]["probabilities"]

    assert probs({"b": 1, "a": 2}) != probs({"a": 2, "b": 1})
    assert probs({"x": 1}) != probs({"x": 1.0})


def test_answers_follow_request_order_and_ids(client):
    questions = {name: {"type": "noul", "instructions": f"Is it {name}?"} for name in ["z", "a", "", "ü 1", "m"]}
    body = decide(client, {"state": "s", "questions": questions})
    assert list(body["answers"]) == list(questions)
