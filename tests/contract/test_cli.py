"""`python -m server --help` documents every flag with its CS1_* twin; flags win over the environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from contract_harness import ROOT

from server.settings import FLAGS, Settings, env_name, parse


def test_help_documents_every_flag_with_its_environment_twin():
    out = subprocess.run([sys.executable, "-m", "server", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    required = ["checkpoint", "host", "port", "device", "backend", "library", "max-prompt-tokens", "max-body-bytes",
                "max-queue", "max-questions", "model-name", "attention-mode", "keep-fp32-gdn-params", "demo",
                "log-level"]
    assert set(required) <= {flag for flag, _, _ in FLAGS}
    for flag, _, _ in FLAGS:
        assert f"--{flag}" in text, flag
        assert f"env {env_name(flag)}" in text, flag
    assert "CC BY-NC 4.0" in text and "default 32768" in text and "default 4194304" in text


def test_environment_twins_and_flag_precedence():
    env = {"CS1_MAX_QUEUE": "3", "CS1_DEMO": "yes", "CS1_MODEL_NAME": "a, b", "CS1_KEEP_FP32_GDN_PARAMS": "0",
           "CS1_ATTENTION_MODE": "causal", "CS1_MAX_BODY_BYTES": "1000"}
    s = parse([], env)
    assert (s.max_queue, s.demo, s.model_names, s.keep_fp32_gdn_params, s.attention_mode, s.max_body_bytes) == \
        (3, True, ("a", "b"), False, "causal", 1000)
    assert s.backend == "reference"  # demo always serves on the CPU reference backend
    s = parse(["--max-queue", "5", "--no-demo", "--checkpoint", "/x", "--backend", "reference"], env)
    assert (s.max_queue, s.demo, s.checkpoint, s.backend) == (5, False, "/x", "reference")
    assert Settings().max_prompt_tokens == 32768 and Settings().max_body_bytes == 4 * 1024 * 1024
    assert Settings().token_cache == 1024 and parse(["--demo"], {"CS1_TOKEN_CACHE": "0"}).token_cache == 0
    assert Settings().parallel_tokenize and not parse(["--demo"], {"CS1_PARALLEL_TOKENIZE": "0"}).parallel_tokenize
    assert not parse(["--demo", "--no-parallel-tokenize"], {}).parallel_tokenize
    assert Settings().tail_rows == "auto" and parse(["--demo"], {"CS1_TAIL_ROWS": "off"}).tail_rows == "off"
    assert parse(["--demo", "--tail-rows", "auto"], {"CS1_TAIL_ROWS": "off"}).tail_rows == "auto"
    assert Settings().tail_attention == "auto"
    assert parse(["--demo"], {"CS1_TAIL_ATTENTION": "off"}).tail_attention == "off"
    assert Settings().tail_query == "auto" and parse(["--demo", "--tail-query", "off"], {}).tail_query == "off"
    assert Settings().gdn_norm == "auto" and parse(["--demo"], {"CS1_GDN_NORM": "off"}).gdn_norm == "off"
    assert Settings().fine_ladder == "auto" and parse(["--demo"], {"CS1_FINE_LADDER": "off"}).fine_ladder == "off"
    assert parse(["--demo", "--fine-ladder", "auto"], {"CS1_FINE_LADDER": "off"}).fine_ladder == "auto"


def test_parallel_tokenize_sets_the_tokenizers_switch(monkeypatch):
    from server.__main__ import tokenizer_parallelism

    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    tokenizer_parallelism(True)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "true"
    tokenizer_parallelism(False)
    assert os.environ["TOKENIZERS_PARALLELISM"] == "false"


@pytest.mark.parametrize("argv,env", [([], {}), (["--demo", "--max-queue", "0"], {}), (["--demo"], {"CS1_PORT": "x"}),
                                      ([], {"CS1_DEMO": "maybe"}), (["--demo"], {"CS1_BACKEND": "tpu"}),
                                      (["--demo", "--token-cache", "-1"], {}), (["--demo"], {"CS1_TOKEN_CACHE": "x"}),
                                      (["--demo", "--tail-rows", "on"], {}), (["--demo"], {"CS1_TAIL_ROWS": "1"}),
                                      (["--demo", "--tail-attention", "yes"], {}),
                                      (["--demo", "--fine-ladder", "64"], {})])
def test_bad_settings_are_refused_with_a_message(argv, env, capsys):
    with pytest.raises(SystemExit) as e:
        parse(argv, env)
    assert e.value.code == 2
    assert capsys.readouterr().err.strip()


def test_a_checkpoint_that_cannot_load_exits_with_status_2(tmp_path):
    from contract_harness import free_port

    out = subprocess.run([sys.executable, "-m", "server", "--checkpoint", str(tmp_path / "missing"), "--backend",
                          "reference", "--port", str(free_port())], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "start-up failed" in out.stderr and "missing" in out.stderr
    assert "CC BY-NC 4.0" in out.stderr  # the licence line comes first, whatever happens next


def test_event_loop_choice(monkeypatch):
    import importlib.util

    from server.__main__ import event_loop

    installed = importlib.util.find_spec("uvloop") is not None
    assert event_loop("asyncio") == "asyncio"
    assert event_loop("auto") == ("uvloop" if installed else "asyncio")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else object())
    assert event_loop("auto") == "asyncio"
    with pytest.raises(SystemExit, match="uvloop package is not installed"):
        event_loop("uvloop")
