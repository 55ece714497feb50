"""decide(state, questions): render every question, tokenize, check limits, ONE backend call for round 1, read out.

Wide choices (> 26 options, decision-protocol.md §2.6) add data-dependent rounds; the rounds of all wide questions of
a request are batched together, so a request costs 1 pass, 2 with a wide choice, 3 when a wide choice keeps > 26
finalists.
"""

from __future__ import annotations

import math
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import prompt, readout
from .backend import N_LETTERS
from .errors import BackendError, RequestRefused

SELF_TEST_STATE = {"ticket": "I was charged twice for order #4411 and the app still shows it as unpaid."}
SELF_TEST_QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "Payments, refunds and invoices", "shipping": "Delivery and tracking",
                          "technical": "App, login and account problems"}},
    "urgent": {"type": "noul", "instructions": "Should this ticket be answered today?"},
    "severity": {"type": "score", "instructions": "How severe is the impact?",
                 "criteria": ["cosmetic", "annoying", "blocks the customer"]},
}


@dataclass(slots=True)
class _Plan:
    """One question's work: a single row, a one-option shortcut, or a wide choice driven by a generator."""
    question: prompt.Question
    passes: list[list[int]]                  # the current round's passes (option indices); [] for a shortcut
    texts: list = field(default_factory=list)  # what the encoder takes: user content pieces or full prompts
    wide: Generator | None = None
    answer: dict | None = None


class _Clock:
    """Accumulates perf_counter laps by name (~0.1 µs each, so it runs on every request)."""
    __slots__ = ("laps", "_t")

    def __init__(self):
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = self.laps.get(name, 0.0) + (now - self._t)
        self._t = now


class Engine:
    def __init__(self, backend, tokenizer, decision_config, *, max_prompt_tokens: int = 32768,
                 max_questions: int = 64, max_request_tokens: int | None = None, token_cache_entries: int = 0):
        for name, value in (("max_prompt_tokens", max_prompt_tokens), ("max_questions", max_questions),
                            ("max_request_tokens", max_request_tokens)):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.backend = backend
        self.tokenizer = tokenizer
        self.config = decision_config
        self.max_prompt_tokens = max_prompt_tokens
        self.max_questions = max_questions
        self.max_request_tokens = max_request_tokens
        # A tokenizer that can wrap contents in the pre-tokenized chat skeleton gets only the user contents, as
        # (evidence block, question block) so a request's evidence is tokenized once (§1.5); any other (test fakes)
        # gets full prompts. The token ids are the same either way. token_cache_entries > 0 keeps the ids of recent
        # question blocks (questions recur across requests; the evidence is never cached).
        wrapped = getattr(tokenizer, "wrapped", None)
        self.wrapped_encoder = None
        if callable(wrapped):
            self.wrapped_encoder = wrapped(*prompt.chat_parts(prompt.SYSTEM), cache_entries=token_cache_entries)
            self._encode = self.wrapped_encoder.encode_parts
            self._render = prompt.render_user_parts
        else:
            self._encode, self._render = tokenizer.encode_batch, prompt.render_pass

    # ---- public ------------------------------------------------------------------------------------------------

    def decide(self, state, questions: dict[str, dict], timings: dict | None = None) -> tuple[dict[str, dict], dict]:
        """Answers keyed by question id in request order, and usage {"input_tokens", "output_tokens": 0}.

        `timings`, when given, receives the seconds spent in render, tokenize, forward and readout (host-path bench).
        """
        clock = _Clock()
        if not isinstance(questions, dict) or not questions:
            raise RequestRefused("questions must be a non-empty object", status=400, loc=("body", "questions"))
        if len(questions) > self.max_questions:
            msg = f"{len(questions)} questions, over the limit of {self.max_questions}"
            raise RequestRefused(msg, loc=("body", "questions"), type="too_long")
        evidence = prompt.state_text(state)

        # Render everything before any device work; the first failing question (in request order) decides.
        plans: list[_Plan] = []
        render_error: RequestRefused | None = None
        for qid, question in questions.items():
            try:
                plans.append(self._plan(evidence, qid, question))
            except RequestRefused as exc:
                render_error = exc
                break
        clock.lap("render")
        rows_by_plan = self._tokenize(plans)
        clock.lap("tokenize")
        if render_error is not None:
            raise render_error
        used = sum(len(r) for rows in rows_by_plan for r in rows)
        self._check_request_tokens(used)

        logits = self._run([r for rows in rows_by_plan for r in rows])
        clock.lap("forward")
        at = 0
        t_choice = self._temperature("choice")
        for plan, rows in zip(plans, rows_by_plan, strict=True):
            block, at = logits[at:at + len(rows)], at + len(rows)
            if plan.wide is not None:
                self._advance(plan, [readout.probabilities(z, len(ps), t_choice) for z, ps in zip(block, plan.passes,
                                                                                                    strict=True)])
            elif plan.answer is None:
                plan.answer = self._read(plan.question, block[0])
        clock.lap("readout")

        # Later wide-choice rounds: every pending wide question's passes in one backend call per round.
        while pending := [p for p in plans if p.answer is None]:
            for plan in pending:
                plan.texts = [self._render(evidence, plan.question, [plan.question.options[i] for i in ps])
                              for ps in plan.passes]
            clock.lap("render")
            rows_by_plan = self._tokenize(pending)
            clock.lap("tokenize")
            round_tokens = sum(len(r) for rows in rows_by_plan for r in rows)
            self._check_request_tokens(used + round_tokens)
            used += round_tokens
            logits = self._run([r for rows in rows_by_plan for r in rows])
            clock.lap("forward")
            at = 0
            for plan, rows in zip(pending, rows_by_plan, strict=True):
                block, at = logits[at:at + len(rows)], at + len(rows)
                self._advance(plan, [readout.probabilities(z, len(ps), t_choice)
                                     for z, ps in zip(block, plan.passes, strict=True)])
            clock.lap("readout")

        answers = {p.question.qid: p.answer for p in plans}
        clock.lap("readout")
        if timings is not None:
            timings.update(clock.laps)
        return answers, {"input_tokens": int(used), "output_tokens": 0}

    def self_test(self) -> tuple[dict[str, dict], dict]:
        """Answer a fixed 3-question request; raise BackendError unless every value is finite and sums to 1."""
        answers, usage = self.decide(SELF_TEST_STATE, SELF_TEST_QUESTIONS)
        problems = []
        for qid, answer in answers.items():
            values = [answer["noul"]] if answer["type"] == "noul" else list(answer["probabilities"].values())
            values += [answer[k] for k in ("confidence", "score") if k in answer]
            if not all(isinstance(v, float) and math.isfinite(v) for v in values):
                problems.append(f"{qid}: non-finite or non-float value")
            elif answer["type"] == "noul" and not 0.0 <= answer["noul"] <= 1.0:
                problems.append(f"{qid}: noul {answer['noul']} outside [0, 1]")
            elif answer["type"] != "noul" and abs(sum(answer["probabilities"].values()) - 1.0) > 1e-4:
                problems.append(f"{qid}: probabilities sum to {sum(answer['probabilities'].values())}")
        if usage["input_tokens"] <= 0:
            problems.append(f"usage {usage}")
        if problems:
            raise BackendError("self-test failed: " + "; ".join(problems))
        return answers, usage

    def describe(self) -> dict:
        return {
            "renderer": prompt.VERSION,
            "backend": getattr(self.backend, "name", type(self.backend).__name__),
            "limits": {"max_prompt_tokens": self.max_prompt_tokens, "max_questions": self.max_questions,
                       "max_request_tokens": self.max_request_tokens,
                       "max_choice_options": prompt.MAX_CHOICE_OPTIONS, "max_score_levels": prompt.MAX_LEVELS},
            "temperature_by_type": dict(self.config.temperature_by_type),
            "temperature_source": dict(self.config.temperature_source),
            "wide_choice": {"group": self.config.wide_choice.group, "keep": self.config.wide_choice.keep,
                            "residual": self.config.wide_choice.residual},
            "token_cache": self.wrapped_encoder.cache_info() if self.wrapped_encoder is not None else None,
        }

    # ---- steps -------------------------------------------------------------------------------------------------

    def _temperature(self, qtype: str) -> float:
        return float(self.config.temperature_by_type.get(qtype, 1.0))

    def _plan(self, evidence: str, qid: str, question) -> _Plan:
        q = prompt.convert_question(qid, question)
        n = len(q.options)
        if q.type == "choice" and n == 1:
            return _Plan(q, [], answer=readout.shortcut_answer(q.options[0].id))
        if q.type == "choice" and n > prompt.MAX_OPTIONS:
            wide = self.config.wide_choice
            gen = readout.wide_choice(n, wide.group, wide.keep, wide.residual, prompt.MAX_OPTIONS)
            plan = _Plan(q, next(gen), wide=gen)
        else:
            plan = _Plan(q, [list(range(n))])
        plan.texts = [self._render(evidence, q, [q.options[i] for i in ps]) for ps in plan.passes]
        return plan

    def _tokenize(self, plans: Sequence[_Plan]) -> list[list[np.ndarray]]:
        """One encode_batch for all prompts of `plans`; refuse the first question with an over-long prompt."""
        texts = [t for p in plans for t in p.texts]
        encoded = self._encode(texts) if texts else []
        if len(encoded) != len(texts):
            raise BackendError(f"tokenizer returned {len(encoded)} rows for {len(texts)} prompts")
        out, at = [], 0
        for plan in plans:
            rows = [np.asarray(r, dtype=np.int32) for r in encoded[at:at + len(plan.texts)]]
            at += len(plan.texts)
            longest = max((len(r) for r in rows), default=0)
            if longest > self.max_prompt_tokens:
                raise prompt.refuse(plan.question.qid, f"prompt is {longest} tokens, over the "
                                    f"{self.max_prompt_tokens}-token limit (no silent truncation)", type="too_long")
            out.append(rows)
        return out

    def _check_request_tokens(self, total: int) -> None:
        if self.max_request_tokens is not None and total > self.max_request_tokens:
            raise RequestRefused(f"request needs {total} tokens, over the {self.max_request_tokens}-token limit",
                                 loc=("body", "questions"), type="too_long")

    def _run(self, rows: list[np.ndarray]) -> np.ndarray:
        if not rows:
            return np.zeros((0, N_LETTERS), dtype=np.float32)
        logits = np.asarray(self.backend.letter_logits(rows), dtype=np.float32)
        if logits.shape != (len(rows), N_LETTERS):
            raise BackendError(f"backend returned letter logits of shape {logits.shape}, expected "
                               f"{(len(rows), N_LETTERS)}")
        bad = np.flatnonzero(~np.isfinite(logits).all(axis=1))
        if bad.size:
            raise BackendError(f"backend returned non-finite letter logits for rows {bad.tolist()[:8]} "
                               f"(of {len(rows)})")
        return logits

    def _read(self, q: prompt.Question, z: np.ndarray) -> dict:
        p = readout.probabilities(z, len(q.options), self._temperature(q.type))
        if q.type == "noul":
            return readout.noul_answer(p)
        if q.type == "score":
            return readout.score_answer(q.legend, p)
        return readout.choice_answer([o.id for o in q.options], p)

    def _advance(self, plan: _Plan, probs: list[np.ndarray]) -> None:
        """Send one round's probabilities to the wide-choice generator; store the answer when it finishes."""
        try:
            plan.passes = plan.wide.send(probs)
        except StopIteration as stop:
            p, final = stop.value
            plan.passes = []
            plan.answer = readout.wide_choice_answer([o.id for o in plan.question.options], p, final)
        except ValueError as exc:  # a decision_config wide_choice that never narrows the options
            raise BackendError(f"question '{plan.question.qid}': wide choice failed: {exc}") from exc
