"""The reference arm: the same /v1/systemone contract, prompt and read-out code (startlux_native.engine.Engine), with
the forward pass run by HF transformers `Qwen3_5ForCausalLM` in bf16 from the same checkpoint folder.

    python benchmarks/reference_server.py CHECKPOINT --mode {eager,graph} [--port 8001] [--device cuda:0]
        [--attention-mode {bidirectional,causal}] [--graph-lengths 128,...] [--graph-rows 1,2,3,4]

- flash-linear-attention is used for the GDN layers when importable (transformers picks it up by itself);
  otherwise transformers' PyTorch fallback runs (correct, slower). /info says which.
- Rows are right-padded with <|endoftext|> (248044). Full-attention layers get a 4D mask built on the device from
  the row lengths (bidirectional: key < length); causal mode needs no mask (SDPA's is_causal path, flash kernels),
  and neither does an unpadded bidirectional batch (SDPA without a mask, non-causal). GDN layers are causal, so
  trailing padding never reaches a real position. (Padding still lengthens SDPA's key axis and changes its reduction
  order, so a padded row can move by bf16 rounding; tests/unit/test_bench_reference.py measures it.)
- The read-out takes the bf16 final-norm hidden state at each row's last token and multiplies it in fp32 with the
  26 letter rows of the tied embedding (decision-protocol.md §2.1).
- --mode graph: the whole forward (embedding to the 26 logits) is captured in one torch CUDA graph per bucket
  (rows x padded length) at start-up, all graphs in one memory pool; a request pads to the smallest bucket that
  fits, and runs eagerly (unpadded) when none does. --mode eager runs unpadded (rows padded to the longest row).
  At start-up the graph arm compares a padded row in the shortest and the longest bucket with an unpadded eager
  forward and reports the max |diff| of the logits (/info backend.padding_check_max_abs_diff).
- A_log and linear_attn.norm.weight (fp32 in the file) are rounded to bf16 as transformers' bf16 loading does.
- HTTP: the server package's own app and uvicorn wrapper (same routes, admission, headers, error bodies and
  /ready as the native arm, so both arms pay the same HTTP cost), with this engine loaded on the server's GPU
  thread; /info names the backend "transformers-eager" or "transformers-graph". --minimal-app (or a server
  package without those pieces) serves a small Starlette app that uses the server's schema and body parser.
- It must at least run on the CPU in eager mode with a tiny checkpoint (smoke tests); graphs need CUDA.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from startlux_native.tokenizer import PAD_TOKEN_ID

log = logging.getLogger("reference_server")

PAD_ID = PAD_TOKEN_ID  # <|endoftext|>, as the native backend pads
DEFAULT_GRAPH_LENGTHS = (128, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048, 2560, 3072, 4096)
DEFAULT_GRAPH_ROWS = (1, 2, 3, 4)
MULTI_ROW_MAX_LENGTH = 1024  # buckets with more than one row stop here (memory and capture time)


def fla_available() -> bool:
    try:
        import fla  # noqa: F401
    except Exception:
        return False
    return True


class TorchBackend:
    """Backend protocol over transformers' Qwen3.5 text model: letter_logits(rows) -> float32 [n, 26]."""

    def __init__(self, folder: str | Path, *, mode: str = "eager", attention_mode: str = "bidirectional",
                 device: str = "cuda:0", graph_lengths: Sequence[int] = DEFAULT_GRAPH_LENGTHS,
                 graph_rows: Sequence[int] = DEFAULT_GRAPH_ROWS, letter_ids: Sequence[int] = tuple(range(32, 58))):
        import torch

        if mode not in ("eager", "graph"):
            raise ValueError(f"mode must be eager or graph, got {mode!r}")
        if attention_mode not in ("bidirectional", "causal"):
            raise ValueError(f"attention_mode must be bidirectional or causal, got {attention_mode!r}")
        self.torch = torch
        self.folder = Path(folder)
        self.mode = mode
        self.attention_mode = attention_mode
        self.device = torch.device(device)
        if mode == "graph" and self.device.type != "cuda":
            raise ValueError("--mode graph needs a CUDA device")
        self.name = f"transformers-{mode}"
        t0 = time.perf_counter()
        self.model = self._build_model()
        emb = self.model.model.embed_tokens.weight
        self.letters = emb.detach()[list(letter_ids)].float().contiguous()  # [26, hidden] fp32
        self.load_seconds = time.perf_counter() - t0
        self.graphs: dict[tuple[int, int], tuple] = {}
        self.graph_lengths = sorted(set(int(x) for x in graph_lengths))
        self.graph_rows = sorted(set(int(x) for x in graph_rows))
        self.calls = {"graph": 0, "eager": 0}
        self.padding_check: dict[str, float] = {}
        if mode == "graph":
            with torch.cuda.device(self.device):  # streams, pool and graphs on this device
                self._capture_all()

    # ---- model --------------------------------------------------------------------------------------------------

    def _build_model(self):
        torch = self.torch
        from safetensors import safe_open
        from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

        raw = json.loads((self.folder / "config.json").read_text(encoding="utf-8"))
        text = dict(raw.get("text_config", raw))
        for key in ("architectures", "_name_or_path", "model_type", "dtype", "torch_dtype"):
            text.pop(key, None)
        text.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", True))
        config = Qwen3_5TextConfig(**text)
        config._attn_implementation = "sdpa"
        try:  # every weight is loaded below (and checked), so skip the random initialisation
            from transformers.initialization import no_init_weights
        except ImportError:
            from contextlib import nullcontext as no_init_weights
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with torch.device(self.device), no_init_weights():
                model = Qwen3_5ForCausalLM(config)
        finally:
            torch.set_default_dtype(previous)
        model.eval().requires_grad_(False)

        params = {f"model.{k}": v for k, v in model.model.state_dict().items()}
        index = self.folder / "model.safetensors.index.json"
        files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() \
            else ["model.safetensors"]
        loaded = set()
        for fname in files:
            with safe_open(str(self.folder / fname), framework="pt", device="cpu") as f:
                for key in f.keys():
                    if key == "lm_head.weight" or key.startswith(("mtp.", "model.visual.")):
                        continue  # untied head (never read: 26 embedding rows are), MTP head, vision tower
                    name = next((f"model.{key[len(p):]}" for p in ("model.language_model.", "model.", "")
                                 if key.startswith(p) and f"model.{key[len(p):]}" in params), None)
                    if name is None:
                        raise KeyError(f"{fname}: tensor {key} has no place in Qwen3_5ForCausalLM")
                    src, dst = f.get_tensor(key), params[name]
                    if tuple(src.shape) != tuple(dst.shape):
                        raise ValueError(f"{key}: shape {tuple(src.shape)} != model {tuple(dst.shape)}")
                    with torch.no_grad():
                        dst.copy_(src.to(self.device))  # fp32 A_log / linear_attn.norm -> bf16, as transformers
                    loaded.add(name)
        missing = sorted(set(params) - loaded)
        if missing:
            raise KeyError(f"{self.folder}: tensors missing from the checkpoint: {', '.join(missing[:8])}")
        return model

    # ---- forward ------------------------------------------------------------------------------------------------

    def _forward(self, ids, lens, *, padded: bool = True):
        """ids [n, L] int64 (right-padded), lens [n] int64 -> letter logits [n, 26] fp32. Graph-capturable.

        Causal: no mask, SDPA's is_causal path (flash kernels); right padding is never seen by a real query.
        Bidirectional: an additive 4D mask hides keys at or past each row's length; with no padding at all
        (padded=False: every row fills L) the mask is omitted and SDPA runs non-causal without one."""
        torch = self.torch
        n, length = ids.shape
        k = torch.arange(length, device=ids.device)
        extra = {}
        if self.attention_mode == "causal":
            mask = None
        elif not padded:
            mask, extra = None, {"is_causal": False}
        else:
            allowed = k.view(1, 1, 1, length) < lens.view(n, 1, 1, 1)
            neg = torch.finfo(torch.bfloat16).min
            mask = torch.zeros(allowed.shape, dtype=torch.bfloat16, device=ids.device).masked_fill(~allowed, neg)
        pos = k.view(1, length).expand(n, length)
        out = self.model.model(input_ids=ids, attention_mask={"full_attention": mask, "linear_attention": None},
                               position_ids=pos, use_cache=False, **extra)
        h = out.last_hidden_state[torch.arange(n, device=ids.device), lens - 1]  # bf16 [n, hidden]
        return h.float() @ self.letters.T

    def _inputs(self, rows: Sequence[np.ndarray], length: int, n: int | None = None):
        n = len(rows) if n is None else n
        ids = np.full((n, length), PAD_ID, dtype=np.int64)
        lens = np.ones(n, dtype=np.int64)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            lens[i] = len(r)
        return ids, lens

    def _bucket(self, n: int, longest: int) -> tuple[int, int] | None:
        for rows in self.graph_rows:
            if rows < n:
                continue
            for length in self.graph_lengths:
                if length >= longest and (rows, length) in self.graphs:
                    return rows, length
            return None
        return None

    def _capture_all(self) -> None:
        torch = self.torch
        self.pool = torch.cuda.graph_pool_handle()
        rng = np.random.default_rng(0)
        t0 = time.perf_counter()
        # longest buckets first so the shared pool is sized by the largest capture
        buckets = [(r, L) for r in self.graph_rows for L in self.graph_lengths
                   if r == 1 or L <= MULTI_ROW_MAX_LENGTH]
        for rows, length in sorted(buckets, key=lambda b: -b[0] * b[1]):
            ids = torch.full((rows, length), PAD_ID, dtype=torch.int64, device=self.device)
            ids[:, : length - 1] = torch.as_tensor(rng.integers(100, 200_000, (rows, length - 1)), device=self.device)
            lens = torch.full((rows,), length - 1, dtype=torch.int64, device=self.device)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.no_grad(), torch.cuda.stream(side):
                for _ in range(3):  # kernel selection / Triton autotuning happen outside the capture
                    self._forward(ids, lens)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(graph, pool=self.pool):
                logits = self._forward(ids, lens)
            self.graphs[(rows, length)] = (graph, ids, lens, logits)
        torch.cuda.synchronize()
        self.capture_seconds = time.perf_counter() - t0
        log.info("captured %d graphs in %.1f s", len(self.graphs), self.capture_seconds)
        self._check_padding(rng)

    def _check_padding(self, rng) -> None:
        """Graph (padded) vs eager (unpadded) logits on random rows shorter than their bucket."""
        for length in self.graph_lengths[:1] + self.graph_lengths[-1:]:
            real = max(1, length - length // 3)
            row = rng.integers(100, 200_000, real).astype(np.int32)
            g = self.letter_logits([row])
            e = self._eager([row])
            self.padding_check[f"{real}->{length}"] = float(np.max(np.abs(g - e)))
        log.info("padding check (graph padded vs eager unpadded, max |diff| of logits): %s", self.padding_check)

    def _eager(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        torch = self.torch
        longest = max(len(r) for r in rows)
        ids, lens = self._inputs(rows, longest)
        with torch.no_grad():
            out = self._forward(torch.as_tensor(ids, device=self.device), torch.as_tensor(lens, device=self.device),
                                padded=any(len(r) != longest for r in rows))
        self.calls["eager"] += 1
        return out.cpu().numpy().astype(np.float32)

    def letter_logits(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        if not rows:
            return np.zeros((0, 26), dtype=np.float32)
        if self.device.type == "cuda":  # the calling thread's current device may be another one
            with self.torch.cuda.device(self.device):
                return self._letter_logits(rows)
        return self._letter_logits(rows)

    def _letter_logits(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        from startlux_native.errors import BackendError

        bucket = self._bucket(len(rows), max(len(r) for r in rows)) if self.graphs else None
        if bucket is None:
            out = self._eager(rows)
        else:
            graph, ids, lens, logits = self.graphs[bucket]
            host_ids, host_lens = self._inputs(rows, bucket[1], bucket[0])
            ids.copy_(self.torch.as_tensor(host_ids), non_blocking=False)
            lens.copy_(self.torch.as_tensor(host_lens), non_blocking=False)
            graph.replay()
            out = logits[: len(rows)].cpu().numpy().astype(np.float32)
            self.calls["graph"] += 1
        if not np.all(np.isfinite(out)):
            raise BackendError("non-finite letter logits from the transformers forward")
        return out

    def describe(self) -> dict:
        torch = self.torch
        import transformers

        info = {"name": self.name, "mode": self.mode, "attention_mode": self.attention_mode,
                "device": str(self.device), "dtype": "bfloat16", "torch": torch.__version__,
                "transformers": transformers.__version__, "flash_linear_attention": fla_available(),
                "gdn_params": "bf16-rounded (transformers bf16 load)", "pad_id": PAD_ID,
                "load_seconds": round(self.load_seconds, 2), "calls": dict(self.calls)}
        if self.device.type == "cuda":
            info["gpu"] = torch.cuda.get_device_name(self.device)
            info["cuda"] = torch.version.cuda
        if self.mode == "graph":
            info["graphs"] = sorted(f"{r}x{L}" for r, L in self.graphs)
            info["capture_seconds"] = round(self.capture_seconds, 2)
            info["padding_check_max_abs_diff"] = self.padding_check
        return info


# ---------------------------------------------------------------------------------------------------------------
# engine + HTTP app


def build_engine(folder: str | Path, *, mode: str, attention_mode: str | None, device: str,
                 graph_lengths=DEFAULT_GRAPH_LENGTHS, graph_rows=DEFAULT_GRAPH_ROWS, max_prompt_tokens: int = 32768):
    from startlux_native import prompt
    from startlux_native.checkpoint import load_checkpoint
    from startlux_native.engine import Engine
    from startlux_native.tokenizer import DecisionTokenizer

    ckpt = load_checkpoint(folder, attention_mode=attention_mode)  # same checks and profile as the native server
    mode_used = ckpt.profile.attention_mode
    tok = DecisionTokenizer.from_file(ckpt.tokenizer_path)
    tok.check(ckpt.decision_config.letter_token_ids, prompt.probe_prompt())
    backend = TorchBackend(folder, mode=mode, attention_mode=mode_used, device=device, graph_lengths=graph_lengths,
                           graph_rows=graph_rows, letter_ids=ckpt.decision_config.letter_token_ids)
    engine = Engine(backend, tok, ckpt.decision_config, max_prompt_tokens=max_prompt_tokens)
    engine.self_test()
    return engine, ckpt


def server_app(folder: str, *, mode: str, host: str, port: int, name: str | None, build):
    """The server package's own app (same routes, admission, headers and error bodies as the native arm), with the
    engine built by `build()` on the server's GPU thread. Returns (app, runtime), or None when the server package
    lacks the pieces."""
    try:
        from dataclasses import replace

        from server.app import create_app
        from server.loading import Loaded
        from server.runtime import Runtime
        from server.settings import parse
    except ImportError as exc:
        log.warning("server package unavailable (%s): using the minimal app", exc)
        return None
    argv = ["--checkpoint", folder, "--backend", "reference", "--host", host, "--port", str(port)]
    if name:
        argv += ["--model-name", name]
    settings = replace(parse(argv, environ={}), backend=f"transformers-{mode}")

    class ReferenceRuntime(Runtime):
        def _load(self):
            t0 = time.perf_counter()
            engine, ckpt = build()
            names = list(settings.model_names) or [ckpt.profile.name.split("/")[-1]]
            return Loaded(engine, ckpt, names, False, time.perf_counter() - t0, {}, {"passed": True})

    runtime = ReferenceRuntime(settings)
    return create_app(settings, runtime), runtime


def build_app(engine, *, model_name: str, info: dict):
    """A minimal Starlette app with the /v1/systemone contract, using the server's schema and body parser."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    from server.errors import HttpError, error_response, json_response
    from server.jsonbody import check_content_type, content_encoding, decode, parse_json
    from server.schema import validate_request
    from startlux_native.errors import BackendError, RequestRefused

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-gpu")  # one device thread
    limit = 4 << 20

    async def decide(request: Request):
        rid = uuid.uuid4().hex
        headers = {"x-typesafe-request-id": rid}
        try:
            check_content_type(request.headers.get("content-type"))
            raw = decode(await request.body(), content_encoding(request.headers.get("content-encoding")), limit)
            body = parse_json(raw)
            validate_request(body)
            t0 = time.perf_counter()
            loop = asyncio.get_running_loop()
            answers, usage = await loop.run_in_executor(executor, engine.decide, body["state"], body["questions"])
            ms = (time.perf_counter() - t0) * 1e3
            return json_response({"model": model_name, "answers": answers, "usage": usage,
                                  "latency_ms": round(ms, 2)}, headers=headers)
        except HttpError as exc:
            exc.headers.update(headers)
            return error_response(exc)
        except RequestRefused as exc:
            return json_response({"error": exc.error, "detail": exc.detail()}, exc.status, headers)
        except BackendError:
            log.exception("inference failed (request %s)", rid)
            return json_response({"error": "inference failed",
                                  "detail": [{"loc": ["body"], "msg": "inference failed", "type": "internal"}]},
                                 500, headers)

    async def models(request: Request):
        return json_response({"models": [{"name": model_name, "description": "StartLux-Decision typed decision "
                                          "model (reference arm: transformers)",
                                          "release_date": engine.config.release_date}]},
                             headers={"x-typesafe-request-id": uuid.uuid4().hex})

    async def health(request: Request):
        return json_response({"status": "ok", "model": model_name, **info, "engine": engine.describe()},
                             headers={"x-typesafe-request-id": uuid.uuid4().hex})

    routes = [Route("/v1/systemone", decide, methods=["POST"]), Route("/v1/systemone/", decide, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]), Route("/health", health, methods=["GET"]),
              Route("/v1/health", health, methods=["GET"]), Route("/ready", health, methods=["GET"])]
    return Starlette(routes=routes)


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("values must be positive")
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="checkpoint folder (config.json, safetensors, tokenizer.json, ...)")
    ap.add_argument("--mode", choices=("eager", "graph"), required=True)
    ap.add_argument("--attention-mode", choices=("bidirectional", "causal"),
                    help="override the checkpoint profile's attention mode (default: the profile's)")
    ap.add_argument("--device", default=None, help="torch device (default cuda:0 when available, else cpu)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--name", default=None, help="model name in responses (default: the checkpoint profile's)")
    ap.add_argument("--graph-lengths", type=_ints, default=DEFAULT_GRAPH_LENGTHS,
                    help="padded lengths captured for one row (default %(default)s)")
    ap.add_argument("--graph-rows", type=_ints, default=DEFAULT_GRAPH_ROWS,
                    help=f"row counts captured (rows > 1 only up to {MULTI_ROW_MAX_LENGTH} tokens; "
                    "default %(default)s)")
    ap.add_argument("--max-prompt-tokens", type=int, default=32768)
    ap.add_argument("--minimal-app", action="store_true",
                    help="serve the built-in minimal app instead of the server package's app")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    import torch
    import uvicorn

    device = args.device or ("cuda:0" if torch.cuda.is_available() else "cpu")

    def build():
        return build_engine(args.checkpoint, mode=args.mode, attention_mode=args.attention_mode, device=device,
                            graph_lengths=args.graph_lengths, graph_rows=args.graph_rows,
                            max_prompt_tokens=args.max_prompt_tokens)

    served = None if args.minimal_app else server_app(args.checkpoint, mode=args.mode, host=args.host,
                                                      port=args.port, name=args.name, build=build)
    if served is not None:
        app, runtime = served
        try:  # the server's uvicorn wrapper: drains on SIGTERM, exits non-zero when loading fails
            from server.__main__ import DrainingServer

            config = uvicorn.Config(app, host=args.host, port=args.port, log_config=None, access_log=False,
                                    lifespan="on", timeout_graceful_shutdown=5)
            DrainingServer(config, runtime).run()
            return runtime.exit_code
        except ImportError:
            uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False, lifespan="on")
            return runtime.exit_code
    t0 = time.perf_counter()  # minimal app: load here, then serve
    engine, ckpt = build()
    info = {"arm": f"reference {args.mode}", "backend": engine.backend.describe(),
            "profile": ckpt.profile.describe(), "ready_seconds": round(time.perf_counter() - t0, 2)}
    app = build_app(engine, model_name=args.name or ckpt.profile.name.split("/")[-1], info=info)
    log.info("reference arm ready in %.1f s: %s", time.perf_counter() - t0, json.dumps(info["backend"]))
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
