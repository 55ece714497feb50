"""The checkpoint's own chat template against the built-in renderer (decision-protocol.md §1.5, §4).

The server renders prompts with a fixed copy of the stock Qwen3.5 template (prompt.chat_prompt), which is fast and
exact. This check renders a probe conversation through the checkpoint's template (tokenizer_config.json
`chat_template`, or chat_template.jinja) the way transformers does (add_generation_prompt=True,
enable_thinking=False) and refuses to start when the two differ, or when the template does not end with the
non-thinking suffix: both mean the prompts would not be what the model was fine-tuned on.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import prompt
from .errors import TokenizerError


def read_template(folder: str | Path) -> tuple[str | None, str | None]:
    """(template text, file it came from), or (None, None) when the checkpoint ships no template."""
    folder = Path(folder)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8"), jinja.name
    config = folder / "tokenizer_config.json"
    if config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"{config}: cannot read: {exc}") from exc
        if isinstance(value, list):  # several named templates: the default one
            value = next((t.get("template") for t in value if isinstance(t, dict) and t.get("name") == "default"),
                         None)
        if isinstance(value, str):
            return value, config.name
    return None, None


def render(template: str, system: str, user: str) -> str:
    """The template applied as transformers' apply_chat_template does (sandboxed Jinja, trim/lstrip blocks)."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False: json.dumps(x, indent=indent,
                                                                                 ensure_ascii=ensure_ascii)
    env.globals["raise_exception"] = raise_exception
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, enable_thinking=False,
                                           tools=None, bos_token="", eos_token="<|im_end|>")


def check(folder: str | Path) -> str:
    """Raise TokenizerError when the checkpoint's template disagrees with the built-in renderer; else describe."""
    template, source = read_template(folder)
    if template is None:
        return "no chat template in the checkpoint: the built-in Qwen3.5 non-thinking template is used"
    system = prompt.SYSTEM
    user = prompt.user_message("(probe evidence)", "Is the letter read-out intact?", ["A) yes", "B) no"])
    want = prompt.chat_prompt(system, user)
    try:
        got = render(template, system, user)
    except Exception as exc:  # any template failure is a start-up refusal with its reason
        raise TokenizerError(f"{source}: the chat template does not render: {exc}") from exc
    if not got.endswith(prompt.THINK_OFF_SUFFIX):
        raise TokenizerError(f"{source}: with enable_thinking=False the chat template ends with {got[-40:]!r}, not "
                             f"the non-thinking suffix {prompt.THINK_OFF_SUFFIX!r}")
    if got != want:
        at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
        raise TokenizerError(f"{source}: the chat template renders differently from the built-in renderer at "
                             f"character {at}: template {got[at:at + 40]!r}, built-in {want[at:at + 40]!r}")
    return f"{source}: the checkpoint's chat template renders exactly as the built-in renderer"
