"""decision_config.json: letter ids, per-type temperatures, wide-choice parameters, release date.

Project rule (decision-protocol.md §2.2): a missing file, key or type gets T = 1.0, logged once as a WARNING and
reported with its source; a present but invalid value refuses start-up.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import CheckpointError

log = logging.getLogger("startlux_native")

QUESTION_TYPES = ("choice", "noul", "score")
DEFAULT_LETTER_IDS = tuple(range(32, 58))
DEFAULT_TEMPERATURE = 1.0
DEFAULT_RELEASE_DATE = "2026-10-10"  # v1.1 publication date (featherless.ai listing)


@dataclass(frozen=True, slots=True)
class WideChoice:
    group: int = 25
    keep: int = 3
    residual: float = 1e-3


@dataclass(frozen=True, slots=True)
class DecisionConfig:
    letter_token_ids: tuple[int, ...] = DEFAULT_LETTER_IDS
    temperature_by_type: dict[str, float] = field(default_factory=lambda: dict.fromkeys(QUESTION_TYPES, 1.0))
    # "decision_config.json" or "default", per type
    temperature_source: dict[str, str] = field(default_factory=lambda: dict.fromkeys(QUESTION_TYPES, "default"))
    wide_choice: WideChoice = WideChoice()
    release_date: str = DEFAULT_RELEASE_DATE
    source: str = "default"

    def describe(self) -> dict:
        return {
            "letter_token_ids": list(self.letter_token_ids),
            "temperature_by_type": dict(self.temperature_by_type),
            "temperature_source": dict(self.temperature_source),
            "wide_choice": {"group": self.wide_choice.group, "keep": self.wide_choice.keep,
                            "residual": self.wide_choice.residual},
            "release_date": self.release_date,
            "source": self.source,
        }


def _positive_finite(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise CheckpointError(f"decision_config.json: {where} must be a finite number > 0, got {value!r}")
    return float(value)


def load_decision_config(folder: str | Path) -> DecisionConfig:
    path = Path(folder) / "decision_config.json"
    if not path.exists():
        log.warning("no decision_config.json in %s: temperatures default to T=%.1f for %s, letter ids %d..%d",
                    folder, DEFAULT_TEMPERATURE, ", ".join(QUESTION_TYPES), DEFAULT_LETTER_IDS[0],
                    DEFAULT_LETTER_IDS[-1])
        return DecisionConfig()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: must hold a JSON object")

    ids = raw.get("letter_token_ids", list(DEFAULT_LETTER_IDS))
    if (not isinstance(ids, list) or len(ids) != 26 or not all(isinstance(i, int) and not isinstance(i, bool)
                                                                for i in ids) or len(set(ids)) != 26):
        raise CheckpointError(f"{path}: letter_token_ids must be 26 distinct integers, got {ids!r}")

    temps_raw = raw.get("temperature_by_type", {})
    if not isinstance(temps_raw, dict):
        raise CheckpointError(f"{path}: temperature_by_type must be an object")
    temps, sources, missing = {}, {}, []
    for t in QUESTION_TYPES:
        if t in temps_raw:
            temps[t] = _positive_finite(temps_raw[t], f"temperature_by_type.{t}")
            sources[t] = "decision_config.json"
        else:
            temps[t] = DEFAULT_TEMPERATURE
            sources[t] = "default"
            missing.append(t)
    if missing:
        log.warning("decision_config.json has no temperature for %s: using T=%.1f", ", ".join(missing),
                    DEFAULT_TEMPERATURE)

    wide_raw = raw.get("wide_choice", {}) or {}
    if not isinstance(wide_raw, dict):
        raise CheckpointError(f"{path}: wide_choice must be an object")
    group, keep = wide_raw.get("group", 25), wide_raw.get("keep", 3)
    # keep < group, or a round never narrows the field and wide choice would not terminate
    if not (isinstance(group, int) and 2 <= group <= 26 and isinstance(keep, int) and 1 <= keep < group):
        raise CheckpointError(f"{path}: wide_choice needs 2 <= group <= 26 and 1 <= keep < group, "
                              f"got group={group!r}, keep={keep!r}")
    residual = wide_raw.get("residual", 1e-3)
    if not isinstance(residual, int | float) or not (0 < residual < 1):
        raise CheckpointError(f"{path}: wide_choice.residual must be in (0, 1), got {residual!r}")

    release = raw.get("release_date", DEFAULT_RELEASE_DATE)
    if not isinstance(release, str):
        raise CheckpointError(f"{path}: release_date must be a string")
    if "release_date" not in raw:
        log.info("decision_config.json has no release_date: using %s", DEFAULT_RELEASE_DATE)
    return DecisionConfig(tuple(ids), temps, sources, WideChoice(group, keep, float(residual)), release,
                          "decision_config.json")
