"""The StartLux prompt renderer `jev_render_v3` (decision-protocol.md §1). Pure functions, no I/O.

Every question becomes its own chat prompt holding the whole state; the question id is never rendered. Render-time
validation (§1.6) raises RequestRefused (422) with `loc` pointing at the offending field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .backend import N_LETTERS
from .decision_config import QUESTION_TYPES
from .errors import RequestRefused

VERSION = "jev_render_v3"
SYSTEM = "Apply the criterion to the evidence. Choose exactly one listed option. Answer with its letter only."
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_OPTIONS = N_LETTERS   # per pass
MAX_LEVELS = 10           # score
MAX_CHOICE_OPTIONS = 255  # §3.10, wider than one pass through wide choice (§2.6)
MAX_ID_CHARS = 200
ANNOTATE_MIN = 8
THINK_OFF_SUFFIX = "<think>\n\n</think>\n\n"
DEFAULT_NOUL_INSTRUCTIONS = "Which answer fits the evidence?"
EMPTY_EVIDENCE = "(none)"
QUESTION_FIELDS = ("type", "instructions", "criteria")
NOUL_IDS = ("true", "false")
NOUL_NAMES = {"true": "yes", "false": "no"}
BARE = re.compile(r"^(?:\(?[A-Za-z][\).]?|\(?\d{1,3}[\).]?|option[_ ]?\d{1,3}|opt[_ ]?\d{1,3})$", re.I)
_NORM_RUN = re.compile(r"[\s_-]+")


@dataclass(frozen=True, slots=True)
class Option:
    id: str                  # answer key: the choice key, "0".."n-1" for score, "true"/"false" for noul
    name: str                # displayed name N
    description: str | None  # D after value_text


@dataclass(frozen=True, slots=True)
class Question:
    """A converted, validated question (`from_systemone`), not yet rendered."""
    qid: str
    type: str
    instructions: str
    options: tuple[Option, ...]
    legend: tuple | None = None  # score: the original criteria items, for the answer's legend


@dataclass(frozen=True, slots=True)
class RenderedQuestion:
    qid: str
    type: str
    option_ids: tuple[str, ...]  # in letter order (A, B, ...)
    text: str                    # the full chat prompt


# ---- JSON text -------------------------------------------------------------------------------------------------

def _dumps(value, loc: Sequence[str | int], what: str) -> str:
    # json.dumps with default separators is the format the model was calibrated on (§1.3); allow_nan=False because
    # Python would otherwise emit `Infinity`, which the parser must have refused already.
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:  # non-finite float or an int beyond Python's digit limit
        raise RequestRefused(f"{what} holds a number that cannot be written as JSON ({exc})", status=400,
                             loc=loc) from exc


def annotate_indices(value):
    """Replace every array of >= ANNOTATE_MIN elements, at any depth, by `{"_index": i, ...}` objects (§1.3)."""
    if isinstance(value, dict):
        return {k: annotate_indices(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [annotate_indices(v) for v in value]
        if len(items) < ANNOTATE_MIN:
            return items
        # dict merge: an existing `_index` member wins but the key stays first
        return [{"_index": i, **v} if isinstance(v, dict) else {"_index": i, "value": v} for i, v in enumerate(items)]
    return value


def state_text(state) -> str:
    """The evidence text: a string verbatim (blank -> `(none)`), empty/null -> `(none)`, else annotated JSON."""
    if state is None:
        return EMPTY_EVIDENCE
    if isinstance(state, str):
        return state if state.strip() else EMPTY_EVIDENCE
    if isinstance(state, dict | list) and not state:
        return EMPTY_EVIDENCE
    return _dumps(annotate_indices(state), ("body", "state"), "state")


def value_text(value, loc: Sequence[str | int] = ("body",)) -> str | None:
    """null -> None; a string -> itself; anything else -> JSON (no annotation); then stripped; empty -> None."""
    if value is None:
        return None
    text = value if isinstance(value, str) else _dumps(value, loc, "value")
    text = text.strip()
    return text or None


# ---- options ---------------------------------------------------------------------------------------------------

def norm(s: str) -> str:
    return _NORM_RUN.sub(" ", s).strip().lower()


def option_line(letter: str, option: Option, hide_ids: bool) -> str:
    d = option.description
    if hide_ids:
        return f"{letter}) {d}"
    if d is None or norm(d) == norm(option.name):
        return f"{letter}) {option.name}"
    return f"{letter}) {option.name}: {d}"


def option_lines(options: Sequence[Option], qtype: str) -> list[str]:
    """Lettered lines; choice ids are hidden when every id is bare (BARE) and every option has a description."""
    hide = qtype == "choice" and all(BARE.match(o.id) and o.description is not None for o in options)
    return [option_line(LETTERS[k], o, hide) for k, o in enumerate(options)]


# ---- messages and template -------------------------------------------------------------------------------------

def user_parts(evidence: str, instructions: str, lines: Sequence[str]) -> tuple[str, str]:
    """The user message split after the evidence block: (evidence block, question block). The evidence block is the
    same for every question of a request, and the join is a line break before 'Question:' (§1.5)."""
    return "Evidence:\n" + evidence + "\n\n", "Question: " + instructions.strip() + "\nOptions:\n" + "\n".join(lines)


def user_message(evidence: str, instructions: str, lines: Sequence[str]) -> str:
    return "".join(user_parts(evidence, instructions, lines))


def chat_parts(system: str = SYSTEM) -> tuple[str, str]:
    """(prefix, suffix) of the chat prompt around the trimmed user content: fixed text, tokenized once (§1.5)."""
    return (f"<|im_start|>system\n{system.strip()}<|im_end|>\n<|im_start|>user\n",
            f"<|im_end|>\n<|im_start|>assistant\n{THINK_OFF_SUFFIX}")


def chat_prompt(system: str, user: str) -> str:
    """The stock Qwen3.5 template, add_generation_prompt=True, enable_thinking=False; `|trim` on both contents."""
    prefix, suffix = chat_parts(system)
    return prefix + user.strip() + suffix


# ---- conversion and validation (§1.2, §1.6, §3.9) --------------------------------------------------------------

def refuse(qid: str, msg: str, *fields: str | int, type: str = "value_error") -> RequestRefused:
    return RequestRefused(msg, loc=("body", "questions", qid, *fields), type=type, error=f"question '{qid}': {msg}")


def _shown(s: str, limit: int = 40) -> str:
    return repr(s if len(s) <= limit else s[:limit] + "…")


def _json_value(qid: str, value, *fields: str | int) -> str | None:
    if value is not None and not isinstance(value, str | dict | list):
        what = "instructions" if fields == ("instructions",) else f"criterion {fields[-1]!r}"
        raise refuse(qid, f"{what} must be a string, object, array or null", *fields)
    return value_text(value, ("body", "questions", qid, *fields))


def check_option_ids(qid: str, ids: Sequence[str]) -> None:
    for oid in ids:
        if not isinstance(oid, str):
            raise refuse(qid, f"bad option id {oid!r}: not a string", "criteria")
        reason = ("blank" if not oid.strip() else "contains a newline" if "\n" in oid or "\r" in oid
                  else f"over {MAX_ID_CHARS} characters" if len(oid) > MAX_ID_CHARS else None)
        if reason:
            raise refuse(qid, f"bad option id {_shown(oid)}: {reason}", "criteria", oid)
    if len(set(ids)) != len(ids):
        raise refuse(qid, "duplicate option id", "criteria")


def convert_question(qid: str, question) -> Question:
    """Validate one wire question and convert it to options (request order). Does not render."""
    if not isinstance(question, dict):
        raise refuse(qid, "question must be an object")
    for key in question:
        if key not in QUESTION_FIELDS:
            raise refuse(qid, f"unknown field {key!r} (a question has only type, instructions and criteria)", key,
                         type="extra_forbidden")
    if "type" not in question:
        raise refuse(qid, "unknown question type (missing)", "type", type="missing")
    qtype = question["type"]
    if qtype not in QUESTION_TYPES:
        raise refuse(qid, f"unknown question type {qtype!r}", "type")

    instructions = _json_value(qid, question.get("instructions"), "instructions") or ""
    criteria = question.get("criteria")

    if qtype == "choice":
        if not isinstance(criteria, dict):
            raise refuse(qid, "choice criteria must be an object of option id -> description", "criteria")
        if not 1 <= len(criteria) <= MAX_CHOICE_OPTIONS:
            raise refuse(qid, f"choice needs 1..{MAX_CHOICE_OPTIONS} options, got {len(criteria)}", "criteria")
        options = tuple(Option(k, k, _json_value(qid, v, "criteria", k)) for k, v in criteria.items())
        if len(options) == 1:  # the one-option shortcut (§2.5): render-time rules do not run
            return Question(qid, qtype, instructions, options)
        if not instructions:
            raise refuse(qid, "instructions required", "instructions")
        check_option_ids(qid, [o.id for o in options])
        return Question(qid, qtype, instructions, options)

    if qtype == "noul":
        if criteria is None:
            criteria = {}
        if not isinstance(criteria, dict) or any(k not in NOUL_IDS for k in criteria):
            raise refuse(qid, "noul ids must be true/false", "criteria")
        options = tuple(Option(k, NOUL_NAMES[k], _json_value(qid, criteria.get(k), "criteria", k)) for k in NOUL_IDS)
        return Question(qid, qtype, instructions or DEFAULT_NOUL_INSTRUCTIONS, options)

    if not isinstance(criteria, list):
        raise refuse(qid, "score criteria must be an array of levels, lowest first", "criteria")
    for i, item in enumerate(criteria):
        if item is None:  # the legend echoes each item and the SDK requires non-null legend values
            raise refuse(qid, f"score level {i} must be a string, object or array", "criteria", i)
    options = tuple(Option(str(i), str(i), _json_value(qid, item, "criteria", i)) for i, item in enumerate(criteria))
    if not instructions:
        raise refuse(qid, "instructions required", "instructions")
    if not 2 <= len(criteria) <= MAX_LEVELS:
        raise refuse(qid, f"score needs 2..{MAX_LEVELS} levels", "criteria")
    return Question(qid, qtype, instructions, options, legend=tuple(criteria))


# ---- rendering -------------------------------------------------------------------------------------------------

def render_user(evidence: str, question: Question, options: Sequence[Option] | None = None) -> str:
    """The trimmed user content of one pass over `options` (default: all of the question's), lettered from A;
    render_pass is chat_prompt(SYSTEM, this). Validates like render_pass."""
    return "".join(render_user_parts(evidence, question, options))


def render_user_parts(evidence: str, question: Question,
                      options: Sequence[Option] | None = None) -> tuple[str, str]:
    """render_user as (evidence block, question block). The content starts with 'Evidence:' and the question block
    with 'Question:', so the template's trim only ever removes trailing whitespace of the question block."""
    options = question.options if options is None else tuple(options)
    if not 2 <= len(options) <= MAX_OPTIONS:
        raise refuse(question.qid, f"2..{MAX_OPTIONS} options required, got {len(options)}", "criteria")
    check_option_ids(question.qid, [o.id for o in options])
    if question.type == "noul" and tuple(o.id for o in options) != NOUL_IDS:
        raise refuse(question.qid, "noul ids must be true/false", "criteria")
    if not question.instructions.strip():
        raise refuse(question.qid, "instructions required", "instructions")
    head, tail = user_parts(evidence, question.instructions, option_lines(options, question.type))
    return head, tail.rstrip()


def render_pass(evidence: str, question: Question, options: Sequence[Option] | None = None) -> str:
    """One pass over `options` (default: all of the question's), lettered from A: the full chat prompt."""
    text = chat_prompt(SYSTEM, render_user(evidence, question, options))
    if not text.endswith(THINK_OFF_SUFFIX):  # the renderer's own guard (§1.5)
        raise AssertionError("rendered prompt lacks the thinking-off suffix")
    return text


def render_question(state_text: str, question: dict, qid: str) -> RenderedQuestion:
    """Convert, validate and render a question of at most 26 options (wide choices go through engine rounds)."""
    q = convert_question(qid, question)
    return RenderedQuestion(qid, q.type, tuple(o.id for o in q.options), render_pass(state_text, q))


def probe_prompt() -> str:
    """A rendered noul prompt for the tokenizer start-up check (§1.5)."""
    q = convert_question("probe", {"type": "noul"})
    return render_pass(state_text({"probe": "Is the letter read-out intact?"}), q)
