"""Server settings: one frozen struct, filled from flags with CS1_* environment twins (flag wins over env)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    checkpoint: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    device: int = 0
    backend: str = "cuda"
    library: str | None = None
    max_prompt_tokens: int = 32768
    max_request_tokens: int | None = None
    max_body_bytes: int = 4 * MiB
    max_queue: int = 16
    max_questions: int = 64
    model_names: tuple[str, ...] = ()
    attention_mode: str | None = None
    keep_fp32_gdn_params: bool = False
    graphs: bool = True
    gemm_pins: str = "auto"
    down_split: str = "auto"
    tail_rows: str = "auto"
    tail_attention: str = "auto"
    tail_query: str = "auto"
    gdn_norm: str = "auto"
    fine_ladder: str = "auto"
    demo: bool = False
    log_level: str = "info"
    graceful_timeout: float = 30.0
    event_loop: str = "auto"
    token_cache: int = 1024
    parallel_tokenize: bool = True
    inline_max_bytes: int = 32768

    def public(self) -> dict:
        """For /info and the start-up log (no secrets exist today; keep it that way)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _nonnegative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")

# flag, env twin, type (bool = switch), help
FLAGS: list[tuple[str, type | object, str]] = [
    ("checkpoint", str, "model folder (config.json, model*.safetensors, tokenizer.json, decision_config.json); "
                        "required unless --demo"),
    ("host", str, "address to bind"),
    ("port", int, "port to bind (0 picks a free port)"),
    ("device", int, "CUDA device ordinal (cuda backend)"),
    ("backend", str, "'cuda' (libqwen3_5_cuda.so) or 'reference' (numpy on the CPU, slow; the ground truth)"),
    ("library", str, "path of libqwen3_5_cuda.so (default: target/libqwen3_5_cuda.so)"),
    ("max-prompt-tokens", _positive_int, "longest prompt of one question in tokens; longer ones are refused (422), "
                                         "never truncated"),
    ("max-request-tokens", _positive_int, "cap on the tokens of all prompts of one request, wide rounds included "
                                          "(422 above; cuda default: 65536, which keeps the worst case well under "
                                          "the SDK's 10 s timeout; reference default: no cap). The cuda backend "
                                          "sizes its scratch for one prompt and runs larger requests as several "
                                          "forwards"),
    ("max-body-bytes", _positive_int, "largest request body, raw and decoded (413 above)"),
    ("max-queue", _positive_int, "admitted requests (in flight + queued); more are answered 429 + Retry-After"),
    ("max-questions", _positive_int, "questions per request (422 above)"),
    ("model-name", _names, "comma-separated model name(s) served; the first is reported in responses "
                           "(default: the checkpoint's name)"),
    ("attention-mode", str, "override the profile's attention mode: 'bidirectional' or 'causal'"),
    ("keep-fp32-gdn-params", bool, "keep A_log and linear_attn.norm.weight in fp32 instead of rounding them to bf16"),
    ("graphs", bool, "cuda backend: replay the whole forward as CUDA graphs (captured per padded length at start-up, "
                     "checked byte for byte against eager launches; dropped if they ever differ)"),
    ("gemm-pins", str, "cuda backend: 'auto' uses the shipped GEMM pin table measured on this kind of GPU and "
                       "cuBLASLt version, if there is one (a fixed cuBLASLt algorithm per GEMM shape and padded "
                       "length, chosen offline by benchmarks/gemm_pins.py); 'off' keeps cuBLASLt's first choice; "
                       "or the path of a table, which must match the device (else the server refuses to start). "
                       "The choice is logged and shown in /info"),
    ("down-split", str, "cuda backend: 'auto' runs each layer's down projection, for prompts up to 256 padded tokens, "
                        "as 3 batches of its K in one cuBLASLt call and adds the fp32 partials in the norm that "
                        "follows (a different fp32 sum order than one GEMM's, the same bf16 rounding); 'off' keeps "
                        "one GEMM. Shown in /info"),
    ("tail-rows", str, "cuda backend: 'auto' runs the last layer's row-wise tail (output projection, norm, MLP) on "
                       "each prompt's last row alone, the only row the read-out uses (its GEMMs then run at one row "
                       "per question, so the letters' logits may differ from 'off' in bf16 rounding); 'off' runs it "
                       "on every row. Shown in /info"),
    ("tail-attention", str, "cuda backend: with --tail-rows auto and an attention layer last, 'auto' computes that "
                            "layer's attention for each prompt's last row alone (one query row against every key of "
                            "its prompt, fp32 softmax, instead of every query row: the letters' logits may differ "
                            "from 'off' in bf16 rounding); 'off' runs the whole attention. Shown in /info"),
    ("tail-query", str, "cuda backend: with --tail-attention auto, 'auto' runs that layer's query / gate projection "
                        "and its norm and RoPE at the read-out rows alone for prompts of 512 padded tokens and more "
                        "(keys and values still at every row; bf16 rounding may move); 'off' at every row. Shown in "
                        "/info"),
    ("gdn-norm", str, "cuda backend: 'auto' runs each GDN layer's prefill and gated RMSNorm as one call (above 640 "
                      "tokens the prefill's output kernel normalises its own tile: one launch fewer, O never stored; "
                      "the same bytes); 'off' keeps the separate norm launch. Shown in /info"),
    ("fine-ladder", str, "cuda backend: 'auto' pads prompts of 1,025-4,096 tokens to a multiple of 64 (the coarse "
                         "ladder: 128-256), each new length running the GEMM algorithms of the coarse length above "
                         "it on fewer rows (bf16 rounding may move); 96 CUDA graphs at start-up instead of 64. "
                         "'off' keeps the coarse ladder. Shown in /info"),
    ("demo", bool, "serve a tiny random-weight checkpoint on the CPU reference backend (answers are meaningless)"),
    ("log-level", str, "debug, info, warning or error"),
    ("graceful-timeout", float, "seconds to finish in-flight work after SIGTERM"),
    ("event-loop", str, "'auto' (uvloop when installed, else asyncio), 'uvloop' or 'asyncio' (logged at start-up; "
                        "the host-path bench measured no difference between them)"),
    ("token-cache", _nonnegative_int, "question blocks whose token ids are kept for reuse (least recently used out; "
                                      "0 = off). Questions recur across requests while the evidence changes; the ids "
                                      "are the same as tokenizing afresh, the evidence is never cached"),
    ("parallel-tokenize", bool, "tokenize the parts of a prompt on all cores (sets TOKENIZERS_PARALLELISM for the "
                                "server process; long evidence is cut into ~1,024-character parts where the "
                                "text splits anyway, at line breaks and word boundaries, so a 2,000-token prompt "
                                "tokenizes ~3x faster on 16 cores; the ids are the same)"),
    ("inline-max-bytes", _nonnegative_int, "run a request on the event loop itself, without the GPU thread's hand-off "
                                           "(two thread wake-ups, 0.2-0.9 ms on the H200 machine), when it is the "
                                           "only request in the server and its body has at most this many bytes (0 = "
                                           "every request goes through the GPU thread). The loop answers nothing "
                                           "else meanwhile: at 32,768 bytes (~8k tokens) /health and a new "
                                           "connection may wait one forward, ~0.15 s on an H200"),
]
CHOICES = {"backend": ("cuda", "reference"), "attention-mode": ("bidirectional", "causal"),
           "log-level": ("debug", "info", "warning", "error"), "event-loop": ("auto", "uvloop", "asyncio"),
           "down-split": ("auto", "off"), "tail-rows": ("auto", "off"),
           "tail-attention": ("auto", "off"), "tail-query": ("auto", "off"),
           "gdn-norm": ("auto", "off"), "fine-ladder": ("auto", "off")}
DEST = {"model-name": "model_names"}

EPILOG = """\
Every flag has an environment twin: --max-queue <-> CS1_MAX_QUEUE, --demo <-> CS1_DEMO=1, etc.; a flag on the
command line wins over its environment variable.

Endpoints: POST /v1/systemone, GET /v1/models, /health (liveness), /ready (503 until loaded and self-tested, and
while draining), /metrics (Prometheus), /openapi.json, /info.

Testing aids (not for production): CS1_DEBUG_ENGINE_DELAY_S=<s> sleeps on the GPU thread before each request;
CS1_DEBUG_LOAD_DELAY_S=<s> delays readiness; CS1_DEBUG_FAULT=transient|sticky makes a request whose state is the
string "cs1-debug-fault" fail with a BackendError (500; or 503 and the process exits with status 3).

The model weights (startlux-models/StartLux-Decision-v1.1-4B-Instant) are CC BY-NC 4.0; this project never
distributes or downloads them.
"""


def env_name(flag: str) -> str:
    return "CS1_" + flag.upper().replace("-", "_")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m server", formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG,
        description="Serve StartLux-Decision v1.1 4B Instant behind POST /v1/systemone (TypeSafe wire schema).")
    defaults = Settings()
    for flag, kind, help_text in FLAGS:
        dest = DEST.get(flag, flag.replace("-", "_"))
        default = getattr(defaults, dest)
        shown = ",".join(default) if isinstance(default, tuple) else default
        suffix = f" [env {env_name(flag)}; default {shown if shown not in (None, '', ()) else 'none'}]"
        if kind is bool:
            ap.add_argument(f"--{flag}", dest=dest, action=argparse.BooleanOptionalAction, default=None,
                            help=help_text + suffix)
        else:
            ap.add_argument(f"--{flag}", dest=dest, type=kind, default=None, choices=CHOICES.get(flag),
                            help=help_text + suffix, metavar=flag.split("-")[-1].upper())
    return ap


def parse(argv: Sequence[str] | None = None, environ: dict | None = None) -> Settings:
    """Flags, then CS1_* environment, then defaults; a bad environment value is reported like a bad flag."""
    environ = os.environ if environ is None else environ
    ap = build_parser()
    args = ap.parse_args(argv)
    values = {}
    for flag, kind, _ in FLAGS:
        dest = DEST.get(flag, flag.replace("-", "_"))
        value = getattr(args, dest)
        env = env_name(flag)
        if value is None and env in environ:
            raw = environ[env].strip()
            try:
                if kind is bool:
                    if raw.lower() not in _TRUE + _FALSE:
                        raise ValueError("expected 1/0, true/false, yes/no or on/off")
                    value = raw.lower() in _TRUE
                elif raw == "":
                    value = None
                else:
                    value = kind(raw)
            except (ValueError, argparse.ArgumentTypeError) as exc:
                ap.error(f"{env}={raw!r}: {exc}")
            if flag in CHOICES and value not in CHOICES[flag]:
                ap.error(f"{env}={raw!r}: choose from {', '.join(CHOICES[flag])}")
        if value is not None:
            values[dest] = value
    settings = Settings(**values)
    if settings.demo:
        settings = Settings(**{**values, "backend": "reference"})
    elif not settings.checkpoint:
        ap.error("--checkpoint (or CS1_CHECKPOINT) is required unless --demo is given")
    return settings
