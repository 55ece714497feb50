"""The checkpoint's chat template is checked against the built-in renderer at start-up (decision-protocol.md §4)."""

from __future__ import annotations

import json

import pytest

from startlux_native import chat_template, prompt
from startlux_native.errors import TokenizerError

# The stock Qwen3.5 shape of a system + user turn with a generation prompt (thinking off when asked).
QWEN_LIKE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content | trim + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}"
)


def write_config(folder, template):
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))


def test_matching_template_passes(tmp_path):
    write_config(tmp_path, QWEN_LIKE)
    assert "exactly" in chat_template.check(tmp_path)


def test_jinja_file_wins_over_the_config(tmp_path):
    write_config(tmp_path, "broken {{")
    (tmp_path / "chat_template.jinja").write_text(QWEN_LIKE)
    assert chat_template.check(tmp_path).startswith("chat_template.jinja")


def test_no_template_is_reported(tmp_path):
    assert "built-in" in chat_template.check(tmp_path)


def test_thinking_only_template_is_refused(tmp_path):
    write_config(tmp_path, QWEN_LIKE.replace("enable_thinking is false", "false"))  # always '<think>\n'
    with pytest.raises(TokenizerError, match="non-thinking suffix"):
        chat_template.check(tmp_path)


def test_a_template_that_renders_differently_is_refused(tmp_path):
    write_config(tmp_path, QWEN_LIKE.replace("'<|im_start|>' + message.role", "'<|im_start|>' + message.role + ' '"))
    with pytest.raises(TokenizerError, match="renders differently"):
        chat_template.check(tmp_path)


def test_a_failing_template_is_refused(tmp_path):
    write_config(tmp_path, "{{ raise_exception('no system messages') }}")
    with pytest.raises(TokenizerError, match="does not render: no system messages"):
        chat_template.check(tmp_path)


def test_the_probe_is_the_built_in_renderer():
    user = prompt.user_message("(probe evidence)", "q", ["A) yes"])
    assert chat_template.render(QWEN_LIKE, prompt.SYSTEM, user) == prompt.chat_prompt(prompt.SYSTEM, user)
