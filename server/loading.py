"""Building the engine: checkpoint → tokenizer check → backend → engine → warm-up/self-test. Runs on the GPU thread.

Imports of the model packages are lazy, so `python -m server --help` stays fast and needs no GPU library.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .settings import Settings

log = logging.getLogger("server.loading")

LICENCE_LINE = ("model weights: startlux-models/StartLux-Decision-v1.1-4B-Instant are licensed CC BY-NC 4.0 "
                "(non-commercial use only); this project never distributes or downloads them")
DEMO_BANNER = "DEMO MODE: tiny random-weight model on the CPU reference backend; every answer is meaningless"
DEMO_NAME = "startlux-native-demo-tiny-random"
CUDA_DEFAULT_REQUEST_TOKENS = 65536  # the TypeSafe hosted budget per request: worst case well under the SDK's 10 s
CUDA_MAX_ROWS = 64  # rows per forward; more rows (many questions, wide rounds) run as several forwards
# graph-vs-eager self-check shapes: one, three and one long prompt (random ids; the check is byte equality)
GRAPH_CHECK_SHAPES = ([147], [290, 300, 301], [1000], [3900])

# Test/bench only, never set in production: when not None, load() calls BACKEND_OVERRIDE(checkpoint) instead of
# building the configured backend (benchmarks/host_path.py installs an instant fake one to time the host path).
BACKEND_OVERRIDE = None

# A request that goes through the same decide path as a client's; its answers must be well-formed.
SELF_TEST_REQUEST = {
    "state": {"order": 4411, "amount": 12.5, "events": ["charged", "charged", "refund requested"]},
    "questions": {
        "wide": {"type": "choice", "instructions": "Which code applies?",
                 "criteria": {f"code-{i}": f"reason {i}" for i in range(30)}},
        "one": {"type": "choice", "instructions": "Only option?", "criteria": {"only": None}},
        "yes": {"type": "noul", "criteria": {"true": "it is a duplicate charge", "false": None}},
        "level": {"type": "score", "instructions": "How bad?", "criteria": ["fine", {"level": "bad"}, ["worse"]]},
    },
}


@dataclass
class Loaded:
    engine: object
    checkpoint: object
    names: list[str]
    demo: bool
    load_seconds: float
    stages_ms: dict[str, float] = field(default_factory=dict)
    self_test: dict = field(default_factory=dict)


def demo_checkpoint() -> Path:
    """The tiny random checkpoint in the cache folder, built once (into a temp folder, then renamed into place)."""
    from startlux_native import tiny, tokenizer

    target = tokenizer.cache_dir() / "demo-tiny-seed0"
    if all((target / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json")):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".demo-tiny-", dir=target.parent))
    tiny.make_tiny_checkpoint(tmp, seed=0)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race; its folder is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _check_answers(answers: dict, questions: dict) -> None:
    from startlux_native.errors import BackendError

    if list(answers) != list(questions):
        raise BackendError(f"self-test request: answers {list(answers)} do not match questions {list(questions)}")
    for qid, q in questions.items():
        a = answers[qid]
        if a.get("type") != q["type"]:
            raise BackendError(f"self-test request: answer {qid} has type {a.get('type')!r}")
        if q["type"] == "choice" and set(a["probabilities"]) != set(q["criteria"]):
            raise BackendError(f"self-test request: answer {qid} lacks some options")


def load(settings: Settings) -> Loaded:
    """Everything before readiness. Raises CheckpointError / TokenizerError / BackendError on failure."""
    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    bar = tqdm(total=6, desc="loading", unit="step", disable=not sys.stderr.isatty(), file=sys.stderr)

    def stage(name: str, t_start: float) -> float:
        now = time.perf_counter()
        stages[name] = round((now - t_start) * 1000, 1)
        bar.set_postfix_str(name)
        bar.update(1)
        return now

    from startlux_native import chat_template, prompt, tokenizer
    from startlux_native import checkpoint as ckpt_mod
    from startlux_native import engine as engine_mod

    t = time.perf_counter()
    folder = demo_checkpoint() if settings.demo else Path(settings.checkpoint)
    t = stage("checkpoint-folder", t)
    ckpt = ckpt_mod.load_checkpoint(folder, attention_mode=settings.attention_mode,
                                    keep_fp32_gdn_params=settings.keep_fp32_gdn_params)
    t = stage("checkpoint", t)
    tok = tokenizer.DecisionTokenizer.from_file(ckpt.tokenizer_path)
    tok.check(ckpt.decision_config.letter_token_ids, prompt.probe_prompt())
    template = chat_template.check(folder)  # refuses a checkpoint template that renders otherwise (§4)
    log.info("chat template: %s", template)
    t = stage("tokenizer-check", t)
    request_tokens = settings.max_request_tokens
    if BACKEND_OVERRIDE is not None:
        log.warning("backend override (test/bench only): %s", BACKEND_OVERRIDE)
        backend = BACKEND_OVERRIDE(ckpt)
    elif settings.backend == "reference":
        from startlux_native.reference import ReferenceBackend

        backend = ReferenceBackend(ckpt)
    else:
        from startlux_native.cuda_backend import CudaBackend

        # Scratch for the longest admitted prompt (weights + scratch at 32k tokens stay under 24 GB); a request
        # with more tokens or rows runs as several forwards inside the backend.
        request_tokens = request_tokens or max(CUDA_DEFAULT_REQUEST_TOKENS, settings.max_prompt_tokens)
        backend = CudaBackend(ckpt, library=settings.library, device=settings.device,
                              max_tokens=settings.max_prompt_tokens, max_rows=CUDA_MAX_ROWS, graphs=settings.graphs,
                              gemm_pins=settings.gemm_pins, down_split=settings.down_split,
                              tail_rows=settings.tail_rows, tail_attention=settings.tail_attention,
                              tail_query=settings.tail_query, gdn_norm=settings.gdn_norm,
                              fine_ladder=settings.fine_ladder)
        log.info("GEMM pins: %s; down projection split: %s; %s; %s; %s; GDN norm: %s; fine ladder: %s",
                 backend.gemm_pins_state, backend.down_split_state, backend.tail_rows_state,
                 backend.tail_attention_state, backend.tail_query_state, backend.gdn_norm_state,
                 backend.fine_ladder_state)
        if settings.graphs:
            captured = backend.capture_graphs()
            log.info("captured %d CUDA graphs (one prompt per padded length)", captured)
    t = stage("backend", t)
    engine = engine_mod.Engine(backend, tok, ckpt.decision_config, max_prompt_tokens=settings.max_prompt_tokens,
                               max_questions=settings.max_questions, max_request_tokens=request_tokens,
                               token_cache_entries=settings.token_cache)
    answers, usage = engine.self_test()  # warm-up: first real forward (caches, graphs), finite and normalised
    t = stage("warm-up", t)
    req = SELF_TEST_REQUEST
    answers2, usage2 = engine.decide(req["state"], req["questions"])
    _check_answers(answers2, req["questions"])
    graphs = None
    if hasattr(backend, "self_check") and getattr(backend, "graphs_enabled", False):
        import numpy as np

        rng = np.random.default_rng(0)
        vocab = min(ckpt.config.vocab_size, 200_000)
        shapes = [s for s in GRAPH_CHECK_SHAPES if sum(s) <= settings.max_prompt_tokens]
        backend.self_check([[rng.integers(100, vocab, n).astype(np.int32) for n in s] for s in shapes])
        graphs = backend.graph_state
        log.info("CUDA graphs: %s", graphs)
    stage("self-test", t)
    bar.close()

    names = list(settings.model_names) or [DEMO_NAME if settings.demo else ckpt.profile.name.split("/")[-1]]
    return Loaded(engine, ckpt, names, settings.demo, time.perf_counter() - t0, stages,
                  {"warm_up": {"input_tokens": usage["input_tokens"]},
                   "request": {"input_tokens": usage2["input_tokens"], "questions": len(answers2)},
                   "graphs": graphs, "chat_template": template, "passed": True})
