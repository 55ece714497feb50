"""benchmarks/inprocess.py's A/B timing: the arms alternate A B, then B A, so drift over a run hits both alike."""

from __future__ import annotations

import pytest

from benchmarks import inprocess


def test_interleaved_alternates_the_arms_and_warms_each_up():
    log = []
    calls = [lambda: log.append("A"), lambda: log.append("B")]
    times = inprocess.interleaved(calls, repeat=4, warmup=2)
    assert log == ["A", "A", "B", "B", "A", "B", "B", "A", "A", "B", "B", "A"]
    assert [len(t) for t in times] == [4, 4]
    assert all(t >= 0 for arm in times for t in arm)


def test_interleaved_one_arm_is_a_plain_loop():
    log = []
    times = inprocess.interleaved([lambda: log.append(1)], repeat=5, warmup=1)
    assert log == [1] * 6 and len(times[0]) == 5


@pytest.mark.parametrize("n", [1, 2, 19, 20, 21])
def test_summary_nearest_rank(n):
    times = [float(x) for x in range(n, 0, -1)]  # unsorted on purpose
    s = inprocess.summary(times)
    assert s["min_ms"] == 1.0
    assert s["p95_ms"] == float(-(-n * 95 // 100))  # the nearest-rank 95th of 1..n
    assert s["p50_ms"] == (n + 1) / 2
