"""The bench checkpoint maker and the reference arm's torch backend, on the CPU with smoke-sized random weights."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from benchmarks import make_bench_checkpoint as mbc
from benchmarks import metadata

pytestmark = pytest.mark.slow  # about a minute on the CPU: torch import, transformers forwards, a server process


def test_shard_count_keeps_every_4b_shard_under_2_gb():
    sizes = mbc.tensor_sizes(mbc.shape_kwargs(32, 2560))
    assert len(sizes) == 426  # 24 * 14 + 8 * 11 + 2 text tensors of the 4B
    assert sum(sizes.values()) == 4_205_751_296 * 2 - 3840 * 2 + 3840 * 4  # bf16 + fp32 A_log/norm
    shards = mbc.shard_count(sizes, 2 * 10**9)
    names = list(sizes)
    assert all(sum(sizes[n] for n in names[s::shards]) <= 2 * 10**9 for s in range(shards))
    assert shards == 1 or any(sum(sizes[n] for n in names[s::shards - 1]) > 2 * 10**9 for s in range(shards - 1))


@pytest.fixture(scope="module")
def smoke_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-ckpt") / "ckpt"
    seed = int.from_bytes(os.urandom(2), "little")
    assert mbc.main([str(out), "--layers", "8", "--hidden", "64", "--seed", str(seed)]) == 0
    return out


def test_smoke_checkpoint_loads_with_the_real_layout(smoke_checkpoint):
    from startlux_native.checkpoint import load_checkpoint

    ck = load_checkpoint(smoke_checkpoint)
    assert ck.prefix == "model.language_model." and ck.profile.attention_mode == "bidirectional"
    assert ck.config.layer_types[3] == "full_attention" and ck.config.layer_types[7] == "full_attention"
    a_log = ck.raw("layers.0.linear_attn.A_log")
    assert a_log.dtype == np.float32 and (a_log < 0).all()
    assert ck.raw("layers.0.linear_attn.norm.weight").dtype == np.float32
    up = ck.raw("layers.0.mlp.up_proj.weight")
    assert up.dtype == np.uint16 and (up != 0).all()
    marker = json.loads((smoke_checkpoint / mbc.MARKER).read_text())
    assert marker["random_weights"] is True
    assert metadata.checkpoint_revision(smoke_checkpoint).startswith("random weights (seed ")
    with pytest.raises(FileExistsError):
        mbc.make_bench_checkpoint(smoke_checkpoint, layers=1, hidden=64)


@pytest.fixture(scope="module")
def backends(smoke_checkpoint):
    from benchmarks.reference_server import TorchBackend

    return {m: TorchBackend(smoke_checkpoint, mode="eager", attention_mode=m, device="cpu")
            for m in ("bidirectional", "causal")}


def fresh_rows(lengths):
    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    return [rng.integers(100, 200_000, n).astype(np.int32) for n in lengths]


@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
def test_torch_backend_matches_the_numpy_reference(smoke_checkpoint, backends, mode):
    """bf16 transformers vs the fp32 numpy reference, judged on the median relative RMS of 7 fresh draws of rows:
    <= 0.2. Over 60 random checkpoints x 2 draws (session 3) one draw measured median 0.055, p95 0.13, max 0.32,
    and 5-10 % of single draws passed 0.15 (bf16 chaos of random weights, not clustered by checkpoint): a bound on
    one draw failed CI now and then. A misplaced tensor or a wrong norm convention gives O(1) on every draw."""
    from startlux_native.checkpoint import load_checkpoint
    from startlux_native.reference import ReferenceBackend

    reference = ReferenceBackend(load_checkpoint(smoke_checkpoint, attention_mode=mode))
    rels = []
    for _ in range(7):
        rows = fresh_rows((1, 63, 65))
        z = backends[mode].letter_logits(rows)
        ref = reference.letter_logits(rows)
        assert z.shape == (3, 26) and z.dtype == np.float32 and np.isfinite(z).all()
        rels.append(float(np.sqrt(((z - ref) ** 2).mean() / (ref ** 2).mean())))
    print(f"{mode}: relative RMS |torch bf16 - numpy fp32| per draw {[round(r, 4) for r in rels]}, "
          f"median {np.median(rels):.4f}")
    assert np.median(rels) <= 0.2


def test_attention_mode_reaches_the_mask(backends):
    """One token: both modes compute the same thing (bit-identical). Longer rows: layer 3's attention feeds layer 7,
    so causal and bidirectional must differ."""
    one, long = fresh_rows((1, 40))
    b, c = backends["bidirectional"], backends["causal"]
    assert np.array_equal(b.letter_logits([one]), c.letter_logits([one]))
    zb, zc = b.letter_logits([long]), c.letter_logits([long])
    diff = float(np.abs(zb - zc).max())
    print(f"causal vs bidirectional, 40 tokens: max |diff| = {diff:.4g} (max |z| {np.abs(zb).max():.4g})")
    assert diff > 1e-3 * float(np.abs(zb).max())


@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
def test_padding_does_not_change_a_result(backends, mode):
    """A row followed by arbitrary tokens past its length (what a padded graph bucket holds) reads the same as
    the row alone, up to bf16 rounding: masked keys are excluded, but SDPA reduces over a longer key axis in another
    order, so rows move by 1 bf16 ulp at layer 3, which random weights amplify to 0.7-1.6 % of max |z| at the
    output (12 bidirectional draws; 1.1 % in a causal one). Tolerance 0.04 x max |z|; a padding key that leaks
    into the softmax gives O(max |z|)."""
    import torch

    backend = backends[mode]
    row, junk = fresh_rows((37, 27))
    alone = backend.letter_logits([row])
    ids = torch.as_tensor(np.concatenate([row, junk]).astype(np.int64))[None]
    with torch.no_grad():
        padded = backend._forward(ids, torch.tensor([len(row)])).numpy()
    batched = backend.letter_logits([row, junk])[:1]
    scale = float(np.abs(alone).max())
    for name, z in (("junk after the row", padded), ("batched with a shorter row", batched)):
        err = float(np.abs(z - alone).max())
        print(f"{mode}, {name}: max |diff| = {err:.4g} (max |z| {scale:.4g})")
        assert err <= 0.04 * scale


def test_reference_server_answers_a_bench_run_on_the_cpu(smoke_checkpoint, tmp_path):
    """The reference arm as a process (eager, CPU, the server package's app), timed by bench.py end to end."""
    import httpx
    from server_process import running_server

    from benchmarks import bench

    args = ["benchmarks/reference_server.py", str(smoke_checkpoint), "--mode", "eager", "--device", "cpu"]
    with running_server(args, tmp_path / "reference.log") as url:
        info = httpx.get(url + "/info", timeout=5).json()
        assert info["backend"]["name"] == "transformers-eager" and info["backend"]["attention_mode"] == "bidirectional"
        rows = [{"id": "c", "request": {"state": {"ticket": "charged twice"}, "questions": {
                    "team": {"type": "choice", "instructions": "Which team?",
                             "criteria": {"billing": "Payments", "shipping": "Delivery"}},
                    "urgent": {"type": "noul", "instructions": "Answer today?"},
                    "level": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high"]}}},
                 "expected": {"team": "billing", "urgent": True, "level": 1}}]
        manifest = tmp_path / "m.jsonl"
        manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        meta = tmp_path / "meta.json"
        meta.write_text(json.dumps({"gpu": "none", "driver": "none", "cuda": "none", "commit": "test",
                                    "checkpoint_revision": "random weights", "precision": "bf16",
                                    "manifest_sha256": bench.sha256_file(manifest),
                                    "arm": "reference eager (cpu)"}), encoding="utf-8")
        rc = bench.main(["run", str(manifest), "--endpoint", url, "--model", "jev-latest", "--metadata", str(meta),
                         "--phase", "feasibility", "--concurrency", "1", "--warmup", "1", "--score-decimals", "6",
                         "--output", str(tmp_path / "run"), "--no-progress"])
        assert rc == 0, (tmp_path / "run" / "responses.jsonl").read_text()
