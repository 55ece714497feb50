"""benchmarks.load_order: the lever's delta and the placement offset from two swapped in-process runs."""

import json

from benchmarks import load_order


def write(path, deltas):
    rows = [{"tokens": t, "arm": "A"} for t in deltas] + [{"tokens": t, "arm": "B", "paired_delta_ms": d}
                                                           for t, d in deltas.items()]
    path.write_text(json.dumps({"rows": rows}))
    return str(path)


def test_lever_and_placement_separate(tmp_path, capsys):
    # the lever is -0.10 ms, being loaded second costs +0.02: inab reads -0.08, inba (swapped) +0.12
    ab = write(tmp_path / "ab.json", {160: -0.08, 512: 0.01})
    ba = write(tmp_path / "ba.json", {160: 0.12})
    assert load_order.main([ab, ba, "--label", "on - off"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1  # 512 has no swapped run
    assert "160 tokens: on - off -0.1000 ms" in out[0] and "placement offset +0.0200" in out[0]
    assert "inab -0.0800, inba -0.1200" in out[0]
