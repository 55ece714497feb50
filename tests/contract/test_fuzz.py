"""Fuzz-ish: hundreds of malformed or odd bodies (random JSON shapes, mutated valid requests, damaged bytes, odd
headers) never produce a 5xx, and afterwards a good request gets exactly the answer it got before."""

from __future__ import annotations

import copy
import json
import os
import random

from contract_harness import STANDARD

ALLOWED = {200, 400, 413, 415, 422}
N_CASES = int(os.environ.get("CS1_FUZZ_CASES", "300"))
ODD_STRINGS = ["", " ", "\n", "<|im_start|>", "<|endoftext|>", "</think>", "A)", "é\u0301", "😀", "\u2028",
               "\x00", "\ud7ff", "null", "true", "type", "criteria", "_index", "a" * 300, "0", "-1", "1e309"]
ODD_NUMBERS = [0, -0.0, 1, -1, 0.1, 1e-320, 1.7976931348623157e308, 2**63, -(2**64) - 1, 10**40, 3.0, 255, 256]


def random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.choice(ODD_STRINGS + ["text"])
    if kind == 1:
        return rng.choice(ODD_NUMBERS)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return "".join(chr(rng.choice([rng.randrange(32, 127), rng.randrange(0x80, 0x3000)])) for _ in range(5))
    if kind in (4, 5):
        return {rng.choice(ODD_STRINGS + ["k", "type"]): random_json(rng, depth + 1) for _ in range(rng.randrange(4))}
    return [random_json(rng, depth + 1) for _ in range(rng.randrange(10))]


def random_question(rng: random.Random):
    q = {"type": rng.choice(["choice", "noul", "score", "box", "bool", "", None, 1])}
    if rng.random() < 0.8:
        q["instructions"] = rng.choice([random_json(rng), "Which one?", "", None])
    if rng.random() < 0.8:
        n = rng.choice([0, 1, 2, 3, 9, 11, 26, 27, 40])
        if rng.random() < 0.5:
            q["criteria"] = {rng.choice(ODD_STRINGS) + str(i): rng.choice([None, "d", random_json(rng)])
                             for i in range(n)}
        else:
            q["criteria"] = [rng.choice(["level", random_json(rng)]) for _ in range(n)]
    if rng.random() < 0.1:
        q[rng.choice(["weight", "options", "question", "true"])] = random_json(rng)
    if q["type"] is None:
        del q["type"]
    return q


def mutate(rng: random.Random, doc):
    """Replace, delete or add one member somewhere in a copy of doc."""
    doc = copy.deepcopy(doc)
    node = doc
    for _ in range(rng.randrange(4)):
        children = list(node.items()) if isinstance(node, dict) else list(enumerate(node)) if isinstance(node, list) \
            else []
        containers = [(k, v) for k, v in children if isinstance(v, dict | list) and v]
        if not containers:
            break
        _, node = rng.choice(containers)
    if isinstance(node, dict) and node:
        key = rng.choice(list(node))
        action = rng.randrange(3)
        if action == 0:
            node[key] = random_json(rng)
        elif action == 1:
            del node[key]
        else:
            node[rng.choice(ODD_STRINGS)] = random_json(rng)
    elif isinstance(node, list) and node:
        node[rng.randrange(len(node))] = random_json(rng)
    return doc


def damage(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randrange(1, 4)):
        at = rng.randrange(len(data))
        op = rng.randrange(3)
        if op == 0:
            data[at] = rng.randrange(256)
        elif op == 1:
            del data[at]
        else:
            data[at:at] = rng.choice([b"{", b"}", b"[", b'"', b",", b"\\", b"\\u", b"\xff", b"NaN", b"1e999"])
    return bytes(data)


def cases(rng: random.Random):
    standard_raw = json.dumps(STANDARD).encode()
    for i in range(N_CASES):
        kind = i % 6
        headers = {"content-type": "application/json"}
        if kind == 0:
            body = json.dumps(random_json(rng), ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        elif kind == 1:
            body = json.dumps(mutate(rng, STANDARD)).encode("utf-8", "surrogatepass")
        elif kind == 2:
            doc = {"state": random_json(rng), "questions": {rng.choice(ODD_STRINGS): random_question(rng)
                                                            for _ in range(rng.randrange(1, 4))}}
            if rng.random() < 0.3:
                doc["model"] = rng.choice(ODD_STRINGS + [None, 5])
            body = json.dumps(doc).encode("utf-8", "surrogatepass")
        elif kind == 3:
            body = damage(rng, standard_raw)
        elif kind == 4:
            body = standard_raw
            headers["content-type"] = rng.choice(["application/json; charset=ascii", "text/json", "", "*/*",
                                                  "application/json;", "APPLICATION/JSON", "application/json; x=y"])
            if rng.random() < 0.5:
                headers["content-encoding"] = rng.choice(["", "identity", "zstd", "gzip", "x-gzip", "br", ",", "GZIP"])
        else:
            body = json.dumps(mutate(rng, mutate(rng, STANDARD))).encode("utf-8", "surrogatepass")
        yield i, body, headers


def test_odd_bodies_never_yield_a_5xx_and_the_server_still_answers_the_same(client):
    seed = int(os.environ.get("CS1_TEST_SEED", "0")) or 20261129
    print(f"seed={seed} cases={N_CASES}")
    before = client.post("/v1/systemone", json=STANDARD)
    assert before.status_code == 200
    counts: dict[int, int] = {}
    failures = []
    for i, body, headers in cases(random.Random(seed)):
        r = client.post("/v1/systemone", content=body, headers=headers)
        counts[r.status_code] = counts.get(r.status_code, 0) + 1
        if r.status_code not in ALLOWED:
            failures.append((i, r.status_code, body[:200], headers, r.text[:300]))
        elif r.status_code != 200:
            assert set(r.json()) == {"error", "detail"}, r.text
    print("statuses:", dict(sorted(counts.items())))
    assert not failures, failures[:5]
    assert counts.get(200, 0) > 0 and counts.get(400, 0) > 0 and counts.get(422, 0) > 0
    after = client.post("/v1/systemone", json=STANDARD)
    assert after.status_code == 200
    assert after.json()["answers"] == before.json()["answers"]
    assert after.json()["usage"] == before.json()["usage"]
