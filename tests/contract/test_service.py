"""Service behaviour: request ids, /v1/models, /health, /ready, /metrics, /openapi.json, /info, readiness before load,
429 under a full queue, 500 for a transient engine failure, 503 + non-zero exit for a sticky one, SIGTERM drain."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time

import httpx
import pytest
from contract_harness import BACKEND, DEMO, FAULT_STATE, SLOW_DELAY_S, STANDARD, assert_error
from typesafe_sdk import RetryPolicy, TypeSafeClient, TypeSafeRateLimitError

UUID_HEX = re.compile(r"^[0-9a-f]{32}$")


def test_request_id_is_echoed_or_generated_on_every_response(client):
    calls = [("POST", "/v1/systemone", {"json": STANDARD}), ("POST", "/v1/systemone", {"content": b"{"}),
             ("GET", "/nowhere", {}), ("GET", "/v1/systemone", {}), ("GET", "/health", {}), ("GET", "/ready", {}),
             ("GET", "/metrics", {}), ("GET", "/v1/models", {}), ("GET", "/openapi.json", {}), ("GET", "/info", {})]
    seen = set()
    for method, path, kw in calls:
        r = client.request(method, path, headers={"content-type": "application/json"}, **kw)
        rid = r.headers["x-typesafe-request-id"]
        assert UUID_HEX.match(rid), (path, rid)
        seen.add(rid)
        r = client.request(method, path, headers={"content-type": "application/json",
                                                  "x-typesafe-request-id": "client-id-42"}, **kw)
        assert r.headers["x-typesafe-request-id"] == "client-id-42", path
    assert len(seen) == len(calls)  # fresh ids
    r = client.get("/health", headers={"x-typesafe-request-id": "bad id with spaces"})
    assert UUID_HEX.match(r.headers["x-typesafe-request-id"])


def test_models_health_ready_info(client):
    models = client.get("/v1/models").json()
    assert list(models) == ["models"] and len(models["models"]) == 1
    m = models["models"][0]
    assert set(m) == {"name", "description", "release_date"}
    assert "CC BY-NC 4.0" in m["description"] and ("DEMO" in m["description"]) == DEMO
    assert re.match(r"^\d{4}-\d{2}-\d{2}$", m["release_date"])

    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    ready = client.get("/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"

    info = client.get("/info").json()
    assert info["state"] == "ready" and "CC BY-NC 4.0" in info["licence"]
    assert ("meaningless" in (info["demo"] or "")) == DEMO
    assert info["limits"]["max_prompt_tokens"] == 32768 and info["limits"]["max_body_bytes"] == 4 * 1024 * 1024
    assert info["temperature_by_type"] == {"choice": 1.25, "noul": 1.5, "score": 1.75}
    assert info["temperature_source"] == dict.fromkeys(("choice", "noul", "score"), "decision_config.json")
    assert info["backend"]["backend"].startswith(BACKEND)
    assert info["start_up"]["self_test"]["passed"] is True
    assert info["build"]["version"]


def test_openapi_is_generated_from_the_real_schema(client):
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    schemas = doc["components"]["schemas"]
    req = schemas["SystemOneRequest"]
    assert set(req["required"]) == {"state", "questions"}
    questions = req["properties"]["questions"]
    assert questions["minProperties"] == 1
    union = questions["additionalProperties"]
    assert union["discriminator"]["propertyName"] == "type"
    assert set(union["discriminator"]["mapping"]) == {"choice", "noul", "score"}
    assert schemas["ChoiceQuestion"]["additionalProperties"] is False
    assert schemas["ChoiceQuestion"]["properties"]["criteria"]["maxProperties"] == 255
    assert schemas["ScoreQuestion"]["properties"]["criteria"]["minItems"] == 2
    assert "SystemOneResponse" in schemas and "ErrorBody" in schemas
    assert set(doc["paths"]["/v1/systemone"]["post"]["responses"]) >= {"200", "400", "413", "415", "422", "429"}


def test_metrics_count_requests_by_status_and_tokens(client):
    client.post("/v1/systemone", json=STANDARD)
    client.post("/v1/systemone", content=b"{", headers={"content-type": "application/json"})
    text = client.get("/metrics").text
    assert re.search(r'cs1_requests_total\{error_type="",route="/v1/systemone",status="200"\} [1-9]', text)
    assert re.search(r'cs1_requests_total\{error_type="json_invalid",route="/v1/systemone",status="400"\} [1-9]',
                     text)
    for name in ("cs1_request_seconds_bucket", "cs1_gpu_seconds_bucket", "cs1_queue_seconds_bucket",
                 "cs1_queue_depth", "cs1_in_flight", "cs1_input_tokens_total", "cs1_ready 1.0"):
        assert name in text, name


def test_ready_is_503_before_the_model_is_loaded(fleet):
    first = fleet["slow"].first_answers
    body = assert_error(first["ready"], 503, "model is loading")
    assert body["detail"][0]["type"] == "unavailable"
    assert first["ready"].headers["retry-after"]
    assert_error(first["decide"], 503, "model is loading")
    assert first["health"].status_code == 200 and first["health"].json()["state"] == "loading"


def post_in_background(url: str, until_metric: str) -> tuple[threading.Thread, dict]:
    """POST the standard request from a thread; return once /metrics shows `until_metric` (it reached the server).
    The response lands in the dict under "response" when the thread ends."""
    result: dict = {}

    def post():
        result["response"] = httpx.post(url + "/v1/systemone", json=STANDARD, timeout=60)

    t = threading.Thread(target=post)
    t.start()
    deadline = time.monotonic() + 10
    while until_metric not in httpx.get(url + "/metrics").text:
        assert time.monotonic() < deadline, f"{until_metric!r} never showed in /metrics"
        time.sleep(0.02)
    return t, result


def test_full_queue_answers_429_at_once_with_retry_after(slow_server):
    """--max-queue 1 and every request held SLOW_DELAY_S on the GPU thread: the second request is refused at once."""
    t, first = post_in_background(slow_server.url, "cs1_admitted 1.0")
    t0 = time.monotonic()
    r = httpx.post(slow_server.url + "/v1/systemone", json=STANDARD, timeout=60)
    elapsed = time.monotonic() - t0
    body = assert_error(r, 429, "server is busy; retry after")
    assert body["detail"][0]["type"] == "busy"
    assert int(r.headers["retry-after"]) >= 1 and int(r.headers["retry-after-ms"]) > 0
    assert elapsed < SLOW_DELAY_S, f"429 took {elapsed:.2f} s: it must not wait for the queue"
    # the SDK sees a rate-limit error carrying the hint
    with TypeSafeClient(api_key="unused", base_url=slow_server.url, retry=RetryPolicy(max_retries=0),
                        compression=False) as c, pytest.raises(TypeSafeRateLimitError) as e:
        c.system_one(state=STANDARD["state"], questions=STANDARD["questions"])
    assert e.value.retry_after_ms and e.value.retry_after_ms > 0
    t.join()
    assert first["response"].status_code == 200
    # and the slot is free again
    assert httpx.post(slow_server.url + "/v1/systemone", json=STANDARD, timeout=60).status_code == 200


def test_transient_engine_failure_is_500_and_the_server_keeps_serving(slow_server):
    r = httpx.post(slow_server.url + "/v1/systemone", timeout=60,
                   json={"state": FAULT_STATE, "questions": {"q": {"type": "noul"}}})
    body = assert_error(r, 500, "inference failed")
    assert "debug fault" not in r.text  # details only in the log
    assert "debug fault injected" in slow_server.log()
    assert httpx.get(slow_server.url + "/ready").status_code == 200
    assert httpx.post(slow_server.url + "/v1/systemone", json=STANDARD, timeout=60).status_code == 200
    assert body["detail"][0]["type"] == "internal_error"


def test_sticky_device_failure_is_503_then_the_process_exits_non_zero(fleet):
    server = fleet["sticky"].wait_ready()
    r = httpx.post(server.url + "/v1/systemone", timeout=60,
                   json={"state": FAULT_STATE, "questions": {"q": {"type": "noul"}}})
    assert_error(r, 503, "device failure")
    assert r.headers["retry-after"]
    try:
        code = server.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail("the server did not exit after a sticky device error")
    assert code == 3, server.log()


def test_sigterm_drains_in_flight_work_and_refuses_new_work(fleet):
    server = fleet["drain"].wait_ready()
    t, in_flight = post_in_background(server.url, "cs1_in_flight 1.0")
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the drain starts on the next 0.1 s tick
    late = httpx.post(server.url + "/v1/systemone", json=STANDARD, timeout=10)
    assert_error(late, 503, "shutting down")
    assert httpx.get(server.url + "/ready").status_code == 503
    t.join()
    assert in_flight["response"].status_code == 200, in_flight["response"].text
    assert server.proc.wait(30) == 0, server.log()
    assert "draining" in server.log()
