"""Build benchmarks/manifests/three-fields-891.jsonl: the "3 fields" latency request of the issue's target.

StartLux's published anchor (performance.md §5.1): one choice, one yes/no and one score question on a support
ticket, the three prompts totalling 891 tokens (each carries the full state, ~297 tokens), in one forward pass.
This script writes a support-ticket state whose three prompts, rendered by our renderer and counted by the real
tokenizer, total exactly `--tokens` (default 891); then `--copies` rows of that same request (ids differ, so
bench.py times each one; the server has no cache, so each is a full forward).

    python benchmarks/manifests/build_three_fields.py [--tokens 891] [--copies 100] [--output FILE]

Prints the token count reached and the manifest's sha256. The text is written here (no dataset).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from startlux_native.decision_config import DecisionConfig  # noqa: E402
from startlux_native.engine import Engine  # noqa: E402
from startlux_native.tokenizer import DecisionTokenizer, cached_tokenizer_json  # noqa: E402

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "three-fields-891.jsonl"

SEVERITY_WORDINGS = ("How severe is the impact on the customer?", "How severe is the impact?",
                     "How severe is it?", "Rate the severity of the impact.")
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": {"billing": "Payments, refunds and invoices", "shipping": "Delivery and tracking",
                          "technical": "App, login and account problems"}},
    "urgent": {"type": "noul", "instructions": "Should this ticket be answered today?"},
    "severity": {"type": "score", "instructions": "How severe is the impact on the customer?",
                 "criteria": ["cosmetic", "annoying", "blocks the customer"]},
}
# Sentences of the ticket thread, used in order until the token count is reached.
THREAD = (
    "I was charged twice for order #4411 and the app still shows it as unpaid.",
    "The first charge went through on Monday morning and the second one a few minutes later.",
    "My bank statement lists both payments of 48.90 EUR to your company.",
    "When I open the order in the app it says payment pending and asks me to pay again.",
    "I tried logging out and back in, and I reinstalled the app, but nothing changed.",
    "The delivery date in the confirmation email was Thursday, and I need the parcel before the weekend.",
    "Your chat assistant told me to wait 48 hours, which I did, and the status is still the same.",
    "I would like one of the two payments refunded and the order marked as paid.",
    "Please also confirm that the order will still ship on time.",
    "I have been a customer for four years and this has never happened before.",
    "I attached screenshots of the bank statement and of the app screen to my previous message.",
    "If it helps, I paid with the card ending in 0417 and used the saved address on my account.",
    "My phone is an Android device and the app version shown in the settings is 7.12.3.",
    "I also noticed that the invoice PDF in my account cannot be downloaded; the button does nothing.",
    "A colleague of mine had the same problem last month, so it may not be just my account.",
    "I can be reached by phone in the afternoon or by email at any time.",
    "Thank you for looking into this quickly.",
) * 4


class _CountOnly:
    """A backend that returns finite zeros: the engine renders and tokenizes for real, only the forward is fake."""

    name = "count-only"

    def letter_logits(self, rows):
        return np.zeros((len(rows), 26), np.float32)


def total_tokens(engine: Engine, state: dict, questions: dict) -> int:
    _, usage = engine.decide(state, questions)
    return usage["input_tokens"]


def build_state(engine: Engine, target: int, questions: dict) -> tuple[dict, int]:
    """The longest thread prefix under the target, then filler words until the three prompts total `target`."""
    def state(sentences: list[str], tail: str = "") -> dict:
        return {"channel": "app", "customer_tier": "gold", "order": "#4411",
                "thread": " ".join(sentences) + tail}
    used: list[str] = []
    for s in THREAD:
        if total_tokens(engine, state(used + [s]), questions) > target:
            break
        used.append(s)
    tail = ""
    for _ in range(400):  # each word adds 3 tokens (one per prompt); a 1- or 2-token remainder needs punctuation
        n = total_tokens(engine, state(used, tail), questions)
        if n == target:
            return state(used, tail), n
        if n > target:
            break
        gap = target - n
        tail += " Thanks." if gap >= 6 else (" ok" if gap >= 3 else "!")
    n = total_tokens(engine, state(used, tail), questions)
    return state(used, tail), n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=891, help="total prompt tokens of the request (default 891)")
    p.add_argument("--copies", type=int, default=100, help="rows in the manifest (default 100)")
    p.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = p.parse_args(argv)
    engine = Engine(_CountOnly(), DecisionTokenizer.from_file(cached_tokenizer_json()), DecisionConfig())
    # The evidence is in every prompt, so it moves the total in steps of 3; the score question's wording sets the
    # remainder.
    for wording in SEVERITY_WORDINGS:
        questions = {**QUESTIONS, "severity": {**QUESTIONS["severity"], "instructions": wording}}
        state, n = build_state(engine, args.tokens, questions)
        if n == args.tokens:
            break
    if n != args.tokens:
        print(f"reached {n} tokens, not {args.tokens}", file=sys.stderr)
        return 1
    lines = [json.dumps({"id": f"three-fields-{i:03d}", "request": {"state": state, "questions": questions}},
                        ensure_ascii=False, separators=(",", ":")) for i in range(args.copies)]
    data = ("\n".join(lines) + "\n").encode()
    args.output.write_bytes(data)
    print(f"{args.output}: {args.copies} requests of {n} prompt tokens (3 questions); "
          f"sha256 {hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
