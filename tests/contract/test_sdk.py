"""The official TypeSafe SDK (typesafe-sdk 0.7.5) against the server: same answers as raw HTTP, zstd bodies, errors.

On Python < 3.14 the SDK compresses only with the `typesafe-sdk[zstd]` extra (backports.zstd); without it we plug
`zstandard.compress` into the SDK's compressor table, which is the same wire format.
"""

from __future__ import annotations

import httpx2
import pytest
import zstandard
from contract_harness import DEMO, MODEL_NAME, STANDARD
from typesafe_sdk import (
    Choice,
    Noul,
    RetryPolicy,
    Score,
    TypeSafeBadRequestError,
    TypeSafeClient,
    TypeSafeNotFoundError,
    TypeSafeUnprocessableEntityError,
)
from typesafe_sdk._core import compression as sdk_compression

NO_RETRY = RetryPolicy(max_retries=0)


def sdk(url: str, **kwargs) -> TypeSafeClient:
    return TypeSafeClient(api_key="unused", base_url=url, retry=NO_RETRY, timeout=60, **kwargs)


def raw_answers(client, body) -> dict:
    r = client.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_sdk_typed_questions_get_the_raw_http_answers(client, main_server):
    raw = raw_answers(client, STANDARD)
    questions = {
        "team": Choice(instructions=STANDARD["questions"]["team"]["instructions"],
                       criteria=STANDARD["questions"]["team"]["criteria"]),
        "urgent": Noul(instructions=STANDARD["questions"]["urgent"]["instructions"]),
        "severity": Score(instructions=STANDARD["questions"]["severity"]["instructions"],
                          criteria=STANDARD["questions"]["severity"]["criteria"]),
    }
    with sdk(main_server.url, compression=False) as c:
        result = c.system_one(state=STANDARD["state"], questions=questions)
    assert result.model == raw["model"]
    assert result.usage.input_tokens == raw["usage"]["input_tokens"] and result.usage.output_tokens == 0
    assert len(result.request_id) == 32
    team, urgent, severity = result.choices["team"], result.nouls["urgent"], result.scores["severity"]
    assert team.choice == raw["answers"]["team"]["choice"]
    assert team.confidence == raw["answers"]["team"]["confidence"]
    assert dict(team.probabilities) == raw["answers"]["team"]["probabilities"]
    assert urgent.noul == raw["answers"]["urgent"]["noul"]
    assert severity.score == raw["answers"]["severity"]["score"]
    assert severity.confidence == raw["answers"]["severity"]["confidence"]
    assert {str(k): v for k, v in severity.probabilities.items()} == raw["answers"]["severity"]["probabilities"]
    assert {str(k): v for k, v in severity.legend.items()} == raw["answers"]["severity"]["legend"]


def test_sdk_zstd_compressed_body_gets_the_same_answers(client, main_server, monkeypatch):
    monkeypatch.setitem(sdk_compression.COMPRESSORS, "zstd", zstandard.compress)
    big = {**STANDARD, "state": {**STANDARD["state"], "history": ["previous message " * 8] * 12}}
    raw = raw_answers(client, big)
    sent = []
    http = httpx2.Client(timeout=60, event_hooks={"request": [lambda req: sent.append(dict(req.headers))]})
    with sdk(main_server.url, compression="zstd", http_client=http) as c:
        result = c.system_one(state=big["state"], questions=big["questions"])
    assert sent and sent[0].get("content-encoding") == "zstd", sent
    assert result.usage.input_tokens == raw["usage"]["input_tokens"]
    assert result.choices["team"].probabilities == raw["answers"]["team"]["probabilities"]
    assert result.nouls["urgent"].noul == raw["answers"]["urgent"]["noul"]
    assert result.scores["severity"].score == raw["answers"]["severity"]["score"]


def test_sdk_lists_the_model(main_server):
    with sdk(main_server.url) as c:
        listed = c.models.list()
    assert [m.name for m in listed.models] == [MODEL_NAME]
    assert "CC BY-NC 4.0" in listed.models[0].description
    assert ("meaningless" in listed.models[0].description) == DEMO
    assert listed.models[0].release_date == "2026-10-10"


def test_sdk_raises_the_right_errors_with_the_server_sentence(main_server):
    with sdk(main_server.url, compression=False) as c:
        with pytest.raises(TypeSafeUnprocessableEntityError) as e:
            c.system_one(state="s", questions={"q": {"type": "score", "instructions": "x", "criteria": ["one"]}})
        assert "question 'q': score needs 2..10 levels" in str(e.value)
        assert e.value.request_id and len(e.value.request_id) == 32
        with pytest.raises(TypeSafeUnprocessableEntityError, match="refused by design"):
            c.system_one(state="s", questions={"q": Noul(instructions="x")},
                         model="StartLux-Decision-v1.1-4B-AutoThink")
        with pytest.raises(TypeSafeBadRequestError, match="questions must be a non-empty object"):
            c.system_one(state="s", questions={"q": Noul(instructions="x")}, extra_body={"questions": {}})
    with sdk(main_server.url + "/nowhere") as c, pytest.raises(TypeSafeNotFoundError, match="not found"):
        c.models.list()
