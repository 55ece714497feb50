"""Shared fixtures: tiny random Qwen3.5 checkpoints (built once per session) and a seeded rng."""

from __future__ import annotations

import os

import numpy as np
import pytest

from startlux_native.tiny import make_tiny_checkpoint

SEED = int(os.environ.get("CS1_TEST_SEED", "0")) or int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="session")
def tiny_checkpoint_dir(tmp_path_factory):
    """The default tiny StartLux-profile checkpoint (4 layers: 3 GDN + 1 attention), without tokenizer.json."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "StartLux-tiny", seed=1, with_tokenizer=False)


@pytest.fixture(scope="session")
def tiny8_checkpoint_dir(tmp_path_factory):
    """8 layers (6 GDN + 2 attention: the last-position read-out then depends on causal vs bidirectional), small
    vocabulary, generic profile, no tokenizer."""
    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny8") / "qwen3_5-tiny8", seed=2, num_hidden_layers=8,
                                vocab_size=320, attention_mode_profile="generic", with_tokenizer=False)


@pytest.fixture()
def rng(request):
    seed = SEED + sum(map(ord, request.node.name))
    print(f"seed={seed} (CS1_TEST_SEED={SEED})")
    return np.random.default_rng(seed)
