"""GEMM pin tables (startlux_native.gemm_pins) without a GPU: reading, validation, matching a device, and the
tables shipped with the package (the GPU side is tests/gpu/test_gemm.py and tests/gpu/test_model.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from startlux_native import gemm_pins
from startlux_native.gemm_pins import DeviceKey, PinTableError

KEY = DeviceKey("9.0", 132, 140, 130100)


def write(tmp_path, pins, key=KEY, **extra):
    data = {"format": gemm_pins.FORMAT, "device": key.as_json(), "pins": pins, **extra}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    return path


def pin(N=2560, K=4096, M=160, query_rows=192, rank=0, **extra):
    return {"N": N, "K": K, "M": M, "query_rows": query_rows, "rank": rank, **extra}


def test_load_and_resolve_explicit_table(tmp_path):
    path = write(tmp_path, [pin(), pin(M=144, rank=2, default_us=11.6)])
    table = gemm_pins.load_table(path)
    assert table.key == KEY and [(p.M, p.query_rows, p.rank) for p in table.pins] == [(160, 192, 0), (144, 192, 2)]
    got, state = gemm_pins.resolve(str(path), KEY)
    assert got == table and state == f"2 pins from {path}"


def test_explicit_table_of_another_device_is_an_error(tmp_path):
    path = write(tmp_path, [pin()])
    other = dataclasses.replace(KEY, cublaslt_version=KEY.cublaslt_version + 1)
    with pytest.raises(PinTableError, match="was measured on compute capability 9.0, 132 SMs, 140 GiB, cuBLASLt "
                                            "130100; this device is .* cuBLASLt 130101"):
        gemm_pins.resolve(str(path), other)


def test_off_and_auto_without_a_matching_table(monkeypatch, tmp_path):
    assert gemm_pins.resolve("off", KEY) == (None, "off")
    monkeypatch.setattr(gemm_pins, "TABLE_DIR", tmp_path)
    write(tmp_path, [pin()], key=dataclasses.replace(KEY, sm_count=114))
    table, state = gemm_pins.resolve("auto", KEY)
    assert table is None and state.startswith("none: no shipped table measured on this device (compute capability")


def test_auto_picks_the_matching_shipped_table(monkeypatch, tmp_path):
    monkeypatch.setattr(gemm_pins, "TABLE_DIR", tmp_path)
    (tmp_path / "a.json").write_text(json.dumps({"format": gemm_pins.FORMAT, "pins": [],
                                                 "device": dataclasses.replace(KEY, total_gib=80).as_json()}))
    (tmp_path / "b.json").write_text(json.dumps({"format": gemm_pins.FORMAT, "pins": [pin()],
                                                 "device": KEY.as_json()}))
    table, state = gemm_pins.resolve("auto", KEY)
    assert table is not None and table.path.name == "b.json" and state == "1 pins from b.json"


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.update(format="other"), "not a GEMM pin table"),
    (lambda d: d.pop("device"), "'device' must hold"),
    (lambda d: d["device"].update(sm_count="132"), "'sm_count' must be an integer >= 1"),
    (lambda d: d.update(pins={}), "'pins' must be a list"),
    (lambda d: d["pins"].append(7), r"pins\[1\]: must be an object"),
    (lambda d: d["pins"][0].update(rank=64), "rank must be <= 63"),
    (lambda d: d["pins"][0].update(rank=-1), "'rank' must be an integer >= 0"),
    (lambda d: d["pins"][0].update(M=True), "'M' must be an integer >= 1"),
    (lambda d: d["pins"][0].pop("query_rows"), "'query_rows' must be an integer >= 1"),
    (lambda d: d["pins"].append(pin(query_rows=256)), r"\(2560, 4096, 160\) is pinned twice"),
])
def test_malformed_tables_are_refused_with_the_reason(tmp_path, mutate, message):
    data = {"format": gemm_pins.FORMAT, "device": KEY.as_json(), "pins": [pin()]}
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PinTableError, match=message):
        gemm_pins.load_table(path)


def test_unreadable_table(tmp_path):
    with pytest.raises(PinTableError, match="cannot read GEMM pin table"):
        gemm_pins.load_table(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(PinTableError, match="cannot read GEMM pin table"):
        gemm_pins.load_table(tmp_path / "x.json")


def test_shipped_tables_are_valid_and_keyed_apart():
    """Every table in the package loads, pins only the 4B's GEMM shapes on ladder lengths, and no two share a key
    (auto would then depend on file order)."""
    from startlux_native.cuda_backend import PAD_LADDER

    shapes = {(12352, 2560), (10240, 2560), (18432, 2560), (2560, 4096), (2560, 9216)}
    keys = set()
    for path in gemm_pins.shipped_tables():
        table = gemm_pins.load_table(path)
        assert table.key not in keys, f"{path.name}: a second table for {table.key.describe()}"
        keys.add(table.key)
        for p in table.pins:
            assert (p.N, p.K) in shapes and p.M in PAD_LADDER, f"{path.name}: {p}"
        print(f"{path.name}: {len(table.pins)} pins for {table.key.describe()}")


def test_filter_keeps_only_the_lengths_whose_forward_gained(tmp_path):
    """benchmarks.gemm_pins filter: pins of a length survive only with a paired in-process delta <= 0."""
    from benchmarks import gemm_pins as tool

    table = write(tmp_path, [pin(M=144), pin(M=160), pin(M=192, K=9216), pin(M=192), pin(M=320)],
                  measured={"commit": "x"})
    rows = [{"tokens": 144, "graphs": True, "arm": "A"}, {"tokens": 144, "graphs": True, "arm": "B",
                                                          "paired_delta_ms": 0.047},
            {"tokens": 160, "graphs": True, "arm": "B", "paired_delta_ms": -0.026},
            {"tokens": 192, "graphs": True, "arm": "B", "paired_delta_ms": 0.0}]
    ab = tmp_path / "ab.json"
    ab.write_text(json.dumps({"commit": "y", "rows": rows}))
    out = tmp_path / "out.json"
    assert tool.main(["filter", "--table", str(table), "--inprocess", str(ab), "--output", str(out)]) == 0
    got = gemm_pins.load_table(out)
    assert [(p.M, p.K) for p in got.pins] == [(160, 4096), (192, 9216), (192, 4096)]
    validated = json.loads(out.read_text())["measured"]["validated"]
    assert validated["dropped_lengths"] == {"144": "+0.0470 ms", "320": "not measured"}
