"""benchmarks/inprocess.py's A/B(/C) timing: the arms' order rotates every round (A B, B A; A B C, B C A, C A B), so
drift over a run and the place in a round hit every arm alike; paired deltas against A and the previous arm."""

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


def test_interleaved_three_arms_rotate():
    log = []
    calls = [lambda a=a: log.append(a) for a in "ABC"]
    times = inprocess.interleaved(calls, repeat=3, warmup=1)
    assert "".join(log) == "ABC" + "ABC" + "BCA" + "CAB"
    assert [len(t) for t in times] == [3, 3, 3]


def test_paired_deltas_against_a_and_the_previous_arm():
    a, b, c = [10.0, 12.0, 11.0], [9.0, 11.5, 10.0], [9.5, 10.0, 10.0]
    d = inprocess.paired_deltas([a, b, c])
    assert d[0] == {}
    assert d[1] == {"paired_delta_ms": -1.0}  # median of -1, -0.5, -1
    assert d[2] == {"paired_delta_ms": -1.0, "paired_delta_prev_ms": 0.0}  # C - A: -0.5, -2, -1; C - B: 0.5, -1.5, 0
    assert inprocess.paired_deltas([a]) == [{}]


def test_library_c_needs_library_b_and_cuda(capsys):
    with pytest.raises(SystemExit):
        inprocess.main(["ckpt", "--backend", "reference", "--library-c", "c.so"])
    assert "need the CUDA backend" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        inprocess.main(["ckpt", "--library-c", "c.so"])
    assert "--library-c needs --library-b" in capsys.readouterr().err


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
