"""benchmarks/host_path.py helpers: the fake forward's wait and `gap` (client minus server, request by request)."""

from __future__ import annotations

import json
import time

import pytest

from benchmarks import host_path


@pytest.mark.parametrize("spec", [None, "", "0"])
def test_no_fake_wait(spec):
    assert host_path.fake_forward_wait(spec) is None


@pytest.mark.parametrize("how", ["sleep", "poll"])
def test_fake_wait_lasts_at_least_its_time(how):
    wait = host_path.fake_forward_wait(f"3:{how}")
    t0 = time.perf_counter()
    wait()
    assert time.perf_counter() - t0 >= 0.003


@pytest.mark.parametrize("spec", ["3", "3:spin", "-1:sleep", "x:poll"])
def test_bad_fake_wait_is_refused(spec):
    with pytest.raises(SystemExit, match="HOST_PATH_FAKE_FORWARD"):
        host_path.fake_forward_wait(spec)


def _log_line(tokens: int, total_ms: float) -> str:
    return (f"2026-11-30 INFO server.request: request id=x method=POST path=/v1/systemone status=200 questions=1 "
            f"input_tokens={tokens} queue_ms=0.1 gpu_ms=1.0 total_ms={total_ms} timing=read:0.1\n")


def _run_dir(path, rows):
    path.mkdir()
    (path / "responses.jsonl").write_text("".join(
        json.dumps({"ok": True, "input_tokens": t, "latency_ms": ms}) + "\n" for t, ms in rows))
    return str(path)


def test_gap_skips_warm_ups_and_pairs_each_run_with_its_log_lines(tmp_path, capsys):
    # log: 2 warm-ups, run 1 (tokens 10, 20, 30), 2 warm-ups, run 2 (the same tokens)
    log = "".join([_log_line(10, 9.0), _log_line(20, 9.0),
                   _log_line(10, 1.0), _log_line(20, 2.0), _log_line(30, 3.0),
                   _log_line(10, 9.0), _log_line(20, 9.0),
                   _log_line(10, 1.5), _log_line(20, 2.5), _log_line(30, 3.5)])
    (tmp_path / "server.log").write_text(log)
    r1 = _run_dir(tmp_path / "t1", [(10, 2.0), (20, 3.0), (30, 4.0)])
    r2 = _run_dir(tmp_path / "t2", [(10, 2.5), (20, 3.5), (30, 4.5)])
    assert host_path.gap([r1, r2], str(tmp_path / "server.log")) == 0
    out = capsys.readouterr().out
    assert "client-server  p50    1.000" in out and "(6 requests)" in out


def test_gap_refuses_a_run_missing_from_the_log(tmp_path):
    (tmp_path / "server.log").write_text(_log_line(10, 1.0))
    r1 = _run_dir(tmp_path / "t1", [(11, 2.0)])
    with pytest.raises(SystemExit):
        host_path.gap([r1], str(tmp_path / "server.log"))
