"""Engine.decide over a fake tokenizer and backend: batching, limits, refusals, usage, wide-choice rounds.

The fake tokenizer maps each character to one token (its code point), so the fake backend can read a row back as
text and give each option line a logit: `w=<number>` in the line sets it, otherwise a hash of the line does. Every
row's logits depend on that row alone, as with a real backend.
"""

from __future__ import annotations

import re
import zlib

import numpy as np
import pytest

from startlux_native import prompt, readout
from startlux_native.decision_config import DecisionConfig
from startlux_native.engine import SELF_TEST_QUESTIONS, SELF_TEST_STATE, Engine
from startlux_native.errors import BackendError, RequestRefused

TEMPS = {"choice": 1.3, "noul": 0.7, "score": 2.1}
CONFIG = DecisionConfig(temperature_by_type=dict(TEMPS),
                        temperature_source=dict.fromkeys(TEMPS, "decision_config.json"), source="decision_config.json")


class CharTokenizer:
    def __init__(self):
        self.calls: list[list[str]] = []

    def encode_batch(self, texts):
        self.calls.append(list(texts))
        return [np.frombuffer(t.encode("utf-32-le"), dtype=np.int32).copy() for t in texts]


def row_text(row: np.ndarray) -> str:
    return np.asarray(row, dtype=np.int32).tobytes().decode("utf-32-le")


def line_logit(line: str) -> float:
    m = re.search(r"w=(-?[\d.]+)", line)
    return float(m.group(1)) if m else (zlib.crc32(line[3:].encode()) % 1000) / 125.0 - 4.0


def option_lines_of(text: str) -> list[str]:
    return text.split("\nOptions:\n", 1)[1].split("<|im_end|>", 1)[0].split("\n")


class TextBackend:
    name = "fake-text"

    def __init__(self, poison_row: int | None = None, shape=None):
        self.calls: list[list[str]] = []
        self.poison_row = poison_row
        self.shape = shape

    def letter_logits(self, rows):
        texts = [row_text(r) for r in rows]
        self.calls.append(texts)
        out = np.full((len(rows), 26), 50.0, dtype=np.float32)  # letters beyond n must be ignored
        for i, text in enumerate(texts):
            for j, line in enumerate(option_lines_of(text)):
                out[i, j] = line_logit(line)
        if self.poison_row is not None:
            out[self.poison_row, 3] = np.nan
        return out if self.shape is None else out[: self.shape[0], : self.shape[1]]

    def describe(self):
        return {"name": self.name}


def make(**limits):
    tok, backend = CharTokenizer(), TextBackend()
    return Engine(backend, tok, CONFIG, **limits), tok, backend


def rendered_len(state, question, qid="q") -> int:
    return len(prompt.render_question(prompt.state_text(state), question, qid).text)


def wide_question(n: int, weights=None, desc="") -> dict:
    weights = weights if weights is not None else [((i * 37) % 101) / 20.0 for i in range(n)]
    return {"type": "choice", "instructions": "Which product?",
            "criteria": {f"prod-{i}": f"item {i} w={weights[i]}{desc}" for i in range(n)}}


# ---- the ordinary path ---------------------------------------------------------------------------------------

def test_ticket_request_one_encode_one_backend_call_and_exact_readout():
    engine, tok, backend = make()
    answers, usage = engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)
    assert len(tok.calls) == 1 and len(backend.calls) == 1 and len(backend.calls[0]) == 3
    evidence = prompt.state_text(SELF_TEST_STATE)
    texts = [prompt.render_question(evidence, q, qid).text for qid, q in SELF_TEST_QUESTIONS.items()]
    assert backend.calls[0] == texts  # request order, full prompts
    assert list(answers) == ["team", "urgent", "severity"]
    assert usage == {"input_tokens": sum(len(t) for t in texts), "output_tokens": 0}
    assert type(usage["input_tokens"]) is int

    for (qid, q), text in zip(SELF_TEST_QUESTIONS.items(), texts, strict=True):
        z = np.array([line_logit(line) for line in option_lines_of(text)], dtype=np.float32)
        p = readout.probabilities(z, len(z), TEMPS[q["type"]])  # the per-type temperature
        if q["type"] == "noul":
            assert answers[qid] == {"type": "noul", "noul": float(p[0])}
        elif q["type"] == "score":
            assert answers[qid] == readout.score_answer(q["criteria"], p)
        else:
            assert answers[qid] == readout.choice_answer(list(q["criteria"]), p)
            assert answers[qid]["choice"] == list(q["criteria"])[int(np.argmax(z))]


def test_rows_do_not_leak_into_each_other():
    engine, _, _ = make()
    together, _ = engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)
    for qid, q in SELF_TEST_QUESTIONS.items():
        alone, usage = engine.decide(SELF_TEST_STATE, {qid: q})
        assert alone[qid] == together[qid]
        assert usage["input_tokens"] == rendered_len(SELF_TEST_STATE, q, qid)


def test_shortcut_costs_nothing_and_keeps_request_order():
    engine, tok, backend = make()
    questions = {"first": {"type": "noul"}, "one": {"type": "choice", "criteria": {"only": "the one"}},
                 "last": {"type": "score", "instructions": "How?", "criteria": ["lo", "hi"]}}
    answers, usage = engine.decide("plain text state", questions)
    assert list(answers) == ["first", "one", "last"]
    assert answers["one"] == {"type": "choice", "choice": "only", "confidence": 1.0, "probabilities": {"only": 1.0}}
    assert len(backend.calls) == 1 and len(backend.calls[0]) == 2
    assert usage["input_tokens"] == sum(len(t) for t in backend.calls[0])


def test_only_shortcuts_never_touch_the_backend():
    engine, tok, backend = make()
    answers, usage = engine.decide({"a": 1}, {"x": {"type": "choice", "instructions": "", "criteria": {"k": None}}})
    assert answers["x"]["choice"] == "k" and usage == {"input_tokens": 0, "output_tokens": 0}
    assert backend.calls == [] and tok.calls == []


# ---- limits and refusals -------------------------------------------------------------------------------------

def test_over_long_prompt_is_refused_before_any_backend_call():
    long_q = {"type": "noul", "instructions": "Is it long? " * 40}
    limit = rendered_len(SELF_TEST_STATE, long_q) - 1
    engine, _, backend = make(max_prompt_tokens=limit)
    with pytest.raises(RequestRefused) as info:
        engine.decide(SELF_TEST_STATE, {"short": {"type": "noul"}, "long": long_q})
    exc = info.value
    n = limit + 1
    assert exc.error == f"question 'long': prompt is {n} tokens, over the {limit}-token limit (no silent truncation)"
    assert exc.status == 422 and exc.loc == ("body", "questions", "long") and exc.type == "too_long"
    assert backend.calls == []
    engine.max_prompt_tokens = limit + 1
    engine.decide(SELF_TEST_STATE, {"long": long_q})  # exactly at the limit is fine


def test_first_failing_question_decides():
    long_q = {"type": "noul", "instructions": "Is it long? " * 40}
    bad = {"type": "score", "instructions": "How?", "criteria": ["only one"]}
    engine, _, backend = make(max_prompt_tokens=rendered_len("s", long_q) - 1)
    with pytest.raises(RequestRefused, match="question 'a': prompt is"):
        engine.decide("s", {"a": long_q, "b": bad})
    with pytest.raises(RequestRefused, match="question 'b': score needs 2..10 levels"):
        engine.decide("s", {"ok": {"type": "noul"}, "b": bad, "a": long_q})
    assert backend.calls == []


def test_too_many_questions():
    engine, _, backend = make(max_questions=2)
    with pytest.raises(RequestRefused) as info:
        engine.decide("s", {f"q{i}": {"type": "noul"} for i in range(3)})
    assert info.value.error == "3 questions, over the limit of 2" and info.value.loc == ("body", "questions")
    assert backend.calls == []


def test_request_token_cap():
    need = sum(rendered_len(SELF_TEST_STATE, q, qid) for qid, q in SELF_TEST_QUESTIONS.items())
    engine, _, backend = make(max_request_tokens=need - 1)
    with pytest.raises(RequestRefused) as info:
        engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)
    assert info.value.error == f"request needs {need} tokens, over the {need - 1}-token limit"
    assert info.value.status == 422 and backend.calls == []
    engine.max_request_tokens = need
    assert engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)[1]["input_tokens"] == need


@pytest.mark.parametrize("questions", [{}, None, []])
def test_questions_must_be_a_non_empty_object(questions):
    engine, _, _ = make()
    with pytest.raises(RequestRefused) as info:
        engine.decide("s", questions)
    assert info.value.status == 400


def test_render_refusal_carries_loc():
    engine, _, backend = make()
    with pytest.raises(RequestRefused) as info:
        engine.decide("s", {"sev": {"type": "score", "instructions": "How?", "criteria": [str(i) for i in range(11)]}})
    assert info.value.error == "question 'sev': score needs 2..10 levels"
    assert info.value.detail() == [{"loc": ["body", "questions", "sev", "criteria"], "msg": "score needs 2..10 levels",
                                    "type": "value_error"}]


def test_non_finite_logits_are_a_backend_error():
    tok = CharTokenizer()
    engine = Engine(TextBackend(poison_row=1), tok, CONFIG)
    with pytest.raises(BackendError, match="non-finite letter logits for rows \\[1\\]"):
        engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)
    with pytest.raises(BackendError, match="self-test|non-finite"):
        engine.self_test()


def test_wrong_logits_shape_is_a_backend_error():
    engine = Engine(TextBackend(shape=(2, 26)), CharTokenizer(), CONFIG)
    with pytest.raises(BackendError, match="shape"):
        engine.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)


@pytest.mark.parametrize("limits", [{"max_prompt_tokens": 0}, {"max_questions": -1}, {"max_request_tokens": 1.5}])
def test_bad_limits_are_rejected(limits):
    with pytest.raises(ValueError):
        Engine(TextBackend(), CharTokenizer(), CONFIG, **limits)


# ---- wide choice ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, calls, round_rows", [(27, 2, [2 + 1, 1]), (100, 2, [4 + 1, 1]), (255, 3, [11 + 1, 2, 1])])
def test_wide_choice_rounds_through_the_engine(n, calls, round_rows):
    engine, tok, backend = make()
    weights = [((i * 37) % 101) / 20.0 for i in range(n)]
    questions = {"noul": {"type": "noul"}, "wide": wide_question(n, weights)}
    answers, usage = engine.decide({"basket": list(range(3))}, questions)
    assert len(backend.calls) == calls and [len(c) for c in backend.calls] == round_rows
    assert len(tok.calls) == calls  # one encode_batch per round
    assert usage["input_tokens"] == sum(len(t) for c in backend.calls for t in c)
    wide = answers["wide"]
    probs = np.array(list(wide["probabilities"].values()))
    assert list(wide["probabilities"]) == list(questions["wide"]["criteria"])
    assert abs(probs.sum() - 1.0) < 1e-6 and np.all(probs > 0)
    best = int(np.argmax(weights))  # the heaviest option survives every round and wins
    assert wide["choice"] == f"prod-{best}"
    assert abs(wide["confidence"] - max(0.0, (n * probs.max() - 1) / (n - 1))) < 1e-12
    # the last round lists the finalists, letters restart at A
    assert option_lines_of(backend.calls[-1][-1])[0].startswith("A) prod-")
    assert answers["noul"] == Engine(TextBackend(), CharTokenizer(), CONFIG).decide(
        {"basket": list(range(3))}, {"noul": {"type": "noul"}})[0]["noul"]


def test_wide_choice_matches_readout_driven_by_hand():
    n = 60
    engine, _, backend = make()
    q = wide_question(n)
    answers, _ = engine.decide("s", {"w": q})
    conv = prompt.convert_question("w", q)

    def probs_of_pass(ps):
        text = prompt.render_pass("s", conv, [conv.options[i] for i in ps])
        z = np.array([line_logit(line) for line in option_lines_of(text)], dtype=np.float32)
        return readout.probabilities(z, len(ps), TEMPS["choice"])

    gen = readout.wide_choice(n, 25, 3, 1e-3)
    passes = next(gen)
    try:
        while True:
            passes = gen.send([probs_of_pass(ps) for ps in passes])
    except StopIteration as stop:
        p, final = stop.value
    assert answers["w"] == readout.wide_choice_answer(list(q["criteria"]), p, final)


def test_two_wide_questions_share_their_rounds():
    engine, _, backend = make()
    answers, _ = engine.decide("s", {"a": wide_question(255), "b": wide_question(27), "c": {"type": "noul"}})
    assert [len(c) for c in backend.calls] == [11 + 2 + 1, 2 + 1, 1]
    assert list(answers) == ["a", "b", "c"]


def test_hidden_ids_are_decided_per_group():
    n = 27  # groups 0..13 and 14..26: the second group's ids are all bare, the first group's are not
    criteria = {("first" if i == 0 else f"({i})" if i < 14 else f"opt {i}"): f"d{i} w={i / 10}" for i in range(n)}
    engine, _, backend = make()
    engine.decide("s", {"w": {"type": "choice", "instructions": "Pick.", "criteria": criteria}})
    group1, group2 = (option_lines_of(t) for t in backend.calls[0])
    assert group1[0] == "A) first: d0 w=0.0" and group1[1] == "B) (1): d1 w=0.1"
    assert group2[0] == "A) d14 w=1.4"


def test_later_round_over_the_limit_is_refused():
    n = 27
    weights = [9.0 if i in (0, 1, 2, 14, 15, 16) else 0.0 for i in range(n)]
    q = wide_question(n, weights)
    pad = " long" * 60
    for i in (0, 1, 2, 14, 15, 16):  # the six finalists carry long descriptions: the final round is the longest
        q["criteria"][f"prod-{i}"] += pad
    engine, _, backend = make()
    engine.decide("s", {"w": q})
    longest_group, final_round = max(len(t) for t in backend.calls[0]), len(backend.calls[1][0])
    assert final_round > longest_group
    engine, _, backend = make(max_prompt_tokens=longest_group)
    with pytest.raises(RequestRefused, match=f"question 'w': prompt is {final_round} tokens, over the "
                                             f"{longest_group}-token limit"):
        engine.decide("s", {"w": q})
    assert len(backend.calls) == 1  # refused before the second pass


def test_wide_request_token_cap_counts_later_rounds():
    engine, _, backend = make()
    _, usage = engine.decide("s", {"w": wide_question(27)})
    first_round = sum(len(t) for t in backend.calls[0])
    engine, _, backend = make(max_request_tokens=usage["input_tokens"] - 1)
    with pytest.raises(RequestRefused, match=f"request needs {usage['input_tokens']} tokens"):
        engine.decide("s", {"w": wide_question(27)})
    assert first_round < usage["input_tokens"] and len(backend.calls) == 1


def test_wide_choice_keep_that_never_narrows_is_a_backend_error():
    from startlux_native.decision_config import WideChoice
    config = DecisionConfig(wide_choice=WideChoice(group=25, keep=25, residual=1e-3))
    engine = Engine(TextBackend(), CharTokenizer(), config)
    with pytest.raises(BackendError, match="wide choice failed"):
        engine.decide("s", {"w": wide_question(40)})


# ---- self-test and describe ----------------------------------------------------------------------------------

def test_self_test_and_describe():
    engine, _, backend = make(max_request_tokens=5000)
    answers, usage = engine.self_test()
    assert set(answers) == {"team", "urgent", "severity"} and usage["input_tokens"] > 0
    assert len(backend.calls) == 1
    info = engine.describe()
    assert info["temperature_by_type"] == TEMPS
    assert info["temperature_source"] == dict.fromkeys(TEMPS, "decision_config.json")
    assert info["limits"]["max_prompt_tokens"] == 32768 and info["limits"]["max_questions"] == 64
    assert info["limits"]["max_request_tokens"] == 5000
    assert info["wide_choice"] == {"group": 25, "keep": 3, "residual": 1e-3}
    assert info["renderer"] == "jev_render_v3" and info["backend"] == "fake-text"


def test_default_temperatures_are_reported_with_their_source():
    engine = Engine(TextBackend(), CharTokenizer(), DecisionConfig())
    info = engine.describe()
    assert info["temperature_by_type"] == {"choice": 1.0, "noul": 1.0, "score": 1.0}
    assert set(info["temperature_source"].values()) == {"default"}


# ---- the real tokenizer: pre-tokenized chat skeleton vs full prompts ------------------------------------------

class CrcBackend:
    """Logits chosen by a CRC of the row's ids, so any token difference changes the answers."""
    name = "crc"

    def __init__(self):
        self.calls: list[list[list[int]]] = []
        self.table = np.random.default_rng(7).normal(0.0, 2.0, (997, 26)).astype(np.float32)

    def letter_logits(self, rows):
        self.calls.append([np.asarray(r).tolist() for r in rows])
        return self.table[[zlib.crc32(np.asarray(r, dtype=np.int32).tobytes()) % 997 for r in rows]]


class FullPromptTokenizer:
    """Only encode_batch: the engine falls back to encoding full rendered prompts."""

    def __init__(self, tok):
        self.encode_batch = tok.encode_batch


def test_wrapped_skeleton_rows_and_answers_equal_full_prompt_encoding():
    from startlux_native.tokenizer import DecisionTokenizer, cached_tokenizer_json

    tok = DecisionTokenizer.from_file(cached_tokenizer_json())
    state = {"ticket": "  Charged twice.\n\n", "lines": [f"item {i}" for i in range(9)], "x": 1.5}
    questions = {**SELF_TEST_QUESTIONS, "wide": wide_question(60), "narrow": wide_question(27),
                 "odd": {"type": "choice", "instructions": " \tWhich? ", "criteria": {"a ": "x\n", "b": None}}}
    fast_backend, full_backend = CrcBackend(), CrcBackend()
    timings = {}
    fast = Engine(fast_backend, tok, CONFIG).decide(state, questions, timings)
    full = Engine(full_backend, FullPromptTokenizer(tok), CONFIG).decide(state, questions)
    print(f"{len(fast_backend.calls)} backend calls, {sum(len(c) for c in fast_backend.calls)} rows, "
          f"{fast[1]['input_tokens']} tokens")
    assert len(fast_backend.calls) == 2  # round 1, then the finalists of both wide questions
    assert fast_backend.calls == full_backend.calls
    assert fast == full
    assert set(timings) == {"render", "tokenize", "forward", "readout"} and all(t >= 0 for t in timings.values())
