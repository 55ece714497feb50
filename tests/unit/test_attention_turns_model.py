"""benchmarks/attention_turns_model.py: the two-head attention's barrier protocol passes, and the checker catches a
protocol with a step removed or added (so a pass means something)."""

import pytest

from benchmarks import attention_turns_model as model


@pytest.mark.parametrize("schedule", ["turns", "bundles"])
def test_schedules_hold_for_every_tile_count(schedule):
    for n in range(1, 7):
        model.check(schedule, n, trials=300)


def _mutated(monkeypatch, edit):
    original = model.program

    def program(schedule, wg, n):
        return edit(list(original(schedule, wg, n)), wg)

    monkeypatch.setattr(model, "program", program)


def _drop_first(ops, match):
    i = next(i for i, op in enumerate(ops) if match(op))
    return ops[:i] + ops[i + 1:]


@pytest.mark.parametrize("schedule", ["turns", "bundles"])
def test_copy_without_its_empty_wait_is_caught(monkeypatch, schedule):
    _mutated(monkeypatch, lambda ops, wg: _drop_first(ops, lambda op: op[0] == "wait_empty" and op[1] == "V"))
    with pytest.raises(AssertionError, match="before its stage was free|overwritten|early"):
        model.check(schedule, 4, trials=300)


@pytest.mark.parametrize("schedule", ["turns", "bundles"])
def test_turn_without_its_sync_is_caught(monkeypatch, schedule):
    def edit(ops, wg):
        return _drop_first(ops, lambda op: op[0] == "sync") if wg == 1 else ops

    _mutated(monkeypatch, edit)
    with pytest.raises(AssertionError, match="open instance|deadlock|unmatched"):
        model.check(schedule, 3, trials=300)


@pytest.mark.parametrize("schedule", ["turns", "bundles"])
def test_stray_arrival_after_the_last_turn_is_caught(monkeypatch, schedule):
    def edit(ops, wg):
        return ops + [("arrive", 2)] if wg == 1 else ops

    _mutated(monkeypatch, edit)
    with pytest.raises(AssertionError, match="unmatched|open instance"):
        model.check(schedule, 2, trials=50)
