"""GEMM pin tables without a GPU: startlux_native.gemm_pins (reading, validation, matching a device, the tables
shipped with the package), and benchmarks/gemm_pins.py (filter, and the bench's candidate, drop and pick logic on a
stand-in library). The GPU side: tests/gpu/test_gemm.py, tests/gpu/test_model.py, scripts/gpu_gemm_pins.sh."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
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
    from startlux_native.cuda_backend import ladder_lengths

    lengths = set(ladder_lengths(32768))
    shapes = {(12352, 2560), (10240, 2560), (18432, 2560), (2560, 4096), (2560, 9216)}
    keys = set()
    for path in gemm_pins.shipped_tables():
        table = gemm_pins.load_table(path)
        assert table.key not in keys, f"{path.name}: a second table for {table.key.describe()}"
        keys.add(table.key)
        for p in table.pins:
            assert (p.N, p.K) in shapes and p.M in lengths, f"{path.name}: {p}"
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


def test_filter_keep_unmeasured_judges_only_the_added_lengths(tmp_path):
    """filter --keep-unmeasured: an A/B of the lengths just added judges those; the table's other pins stay as they
    were, and the first validation record is kept beside the new one."""
    from benchmarks import gemm_pins as tool

    table = write(tmp_path, [pin(M=160, forward_delta_ms=-0.03), pin(M=9216), pin(M=10240)],
                  measured={"commit": "x", "validated": {"commit": "first"}})
    rows = [{"tokens": 9216, "graphs": True, "arm": "B", "paired_delta_ms": -0.4},
            {"tokens": 10240, "graphs": True, "arm": "B", "paired_delta_ms": 0.2}]
    ab = tmp_path / "ab.json"
    ab.write_text(json.dumps({"commit": "y", "rows": rows}))
    out = tmp_path / "out.json"
    assert tool.main(["filter", "--table", str(table), "--inprocess", str(ab), "--output", str(out),
                      "--keep-unmeasured"]) == 0
    assert [p.M for p in gemm_pins.load_table(out).pins] == [160, 9216]
    measured = json.loads(out.read_text())["measured"]
    assert measured["validated"] == {"commit": "first"}
    assert measured["validated_added"][0]["dropped_lengths"] == {"10240": "+0.2000 ms"}


def test_lengths_above_max_rows_get_their_neighbours():
    """--rows past --max-rows (extending a table above 8,192): the neighbour ladder reaches the longest of them, so
    9,216 is tried with the heuristics of 8,192 below and 10,240 .. 12,288 above, not of 8,192 alone."""
    from benchmarks import gemm_pins as tool

    rows, ladder = tool.rows_and_ladder("9216,10240,11264,12288", 8192)
    assert rows == [9216, 10240, 11264, 12288] and ladder[-1] == 12288
    assert tool.neighbours(9216, ladder, 3) == [8192, 10240, 11264, 12288]
    rows, ladder = tool.rows_and_ladder(None, 512)
    assert rows == ladder and rows[-1] == 512 and rows[0] == 16


def test_merge_adds_disjoint_lengths_and_refuses_the_rest(tmp_path):
    """benchmarks.gemm_pins merge: pins of other lengths are added (sorted, provenance kept); a length pinned in both
    tables, or a table of another device, is refused and nothing is written."""
    from benchmarks import gemm_pins as tool

    base = tmp_path / "base.json"
    base.write_text(json.dumps({"format": gemm_pins.FORMAT, "device": KEY.as_json(), "measured": {"commit": "a"},
                                "pins": [pin(M=160), pin(M=8192, K=9216)]}))
    add = tmp_path / "add.json"
    add.write_text(json.dumps({"format": gemm_pins.FORMAT, "device": KEY.as_json(), "measured": {"commit": "b"},
                               "pins": [pin(M=10240), pin(M=9216, K=9216)]}))
    out = tmp_path / "out.json"
    assert tool.main(["merge", "--table", str(base), "--add", str(add), "--output", str(out)]) == 0
    assert [(p.M, p.K) for p in gemm_pins.load_table(out).pins] == [(160, 4096), (8192, 9216), (9216, 9216),
                                                                    (10240, 4096)]
    measured = json.loads(out.read_text())["measured"]
    assert measured["commit"] == "a" and measured["added"] == [{"commit": "b"}]

    clash = tmp_path / "clash.json"
    clash.write_text(json.dumps({"format": gemm_pins.FORMAT, "device": KEY.as_json(), "measured": {},
                                 "pins": [pin(M=160, K=9216)]}))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": gemm_pins.FORMAT, "measured": {}, "pins": [pin(M=9216)],
                                 "device": dataclasses.replace(KEY, cublaslt_version=130000).as_json()}))
    for bad, message in ((clash, r"both tables pin the lengths \[160\]"), (other, "was measured on")):
        dest = tmp_path / f"no-{bad.name}"
        with pytest.raises(SystemExit, match=message):
            tool.main(["merge", "--table", str(base), "--add", str(bad), "--output", str(dest)])
        assert not dest.exists()


# ---- benchmarks/gemm_pins.py end to end on a stand-in library (the GPU run is scripts/gpu_gemm_pins.sh) ------------


class FakeGemmLibrary:
    """Just enough of the ABI for the pin bench: device buffers are numpy arrays behind fake addresses, a GEMM computes
    x w^T eagerly and records itself in a capture; a replay busy-waits each recorded call's time. Pins apply up to
    rank 2; heuristic #1 asked at 176 rows is 3x faster than the default (a gap of 400 us per 20-call graph, so that
    a busy CI machine's preemptions cannot hide it: at 20 % it once lost a screening); #1 asked at 128 rows gives
    other values."""

    SLOW_US, FAST_US = 30.0, 10.0

    def __init__(self):
        import cffi

        self.ffi = cffi.FFI()
        self.mem: dict[int, np.ndarray] = {}
        self.next_addr = 1 << 20
        self.handles: dict[int, dict] = {}
        self.graphs: dict[int, list] = {}
        self.capturing: list | None = None

    def _new_addr(self, nbytes=0) -> int:
        addr, self.next_addr = self.next_addr, self.next_addr + max(nbytes, 1) + 4096
        return addr

    def _addr(self, p) -> int:
        return int(self.ffi.cast("uintptr_t", p))

    def build_info(self):
        return "fake"

    def cs1_set_device(self, d):
        pass

    def cs1_stream_create(self, p):
        p[0] = self.ffi.cast("void *", self._new_addr())

    def cs1_stream_sync(self, s):
        pass

    def cs1_stream_destroy(self, s):
        pass

    def cs1_device_info(self, d, major, minor, sms, total):
        major[0], minor[0], sms[0], total[0] = 9, 0, 132, 150 << 30

    def cs1_gemm_blas_version(self, v):
        v[0] = 130100

    def cs1_malloc(self, p, nbytes):
        addr = self._new_addr(nbytes)
        self.mem[addr] = np.full(nbytes, 0xFF, np.uint8)
        p[0] = self.ffi.cast("void *", addr)

    def cs1_free(self, p):
        del self.mem[self._addr(p)]

    def cs1_upload(self, dst, src, nbytes, s):
        self.mem[self._addr(dst)][:nbytes] = np.frombuffer(self.ffi.buffer(src, nbytes), np.uint8)

    def cs1_download(self, dst, src, nbytes, s):
        self.ffi.memmove(dst, self.mem[self._addr(src)][:nbytes].tobytes(), nbytes)

    def cs1_memset_async(self, p, value, nbytes, s):
        if self.capturing is None:
            self.mem[self._addr(p)][:nbytes] = value & 0xFF

    def cs1_gemm_create(self, ws, p):
        addr = self._new_addr()
        self.handles[addr] = {"pins": {}, "plans": {}}
        p[0] = self.ffi.cast("void *", addr)

    def cs1_gemm_destroy(self, g):
        del self.handles[self._addr(g)]

    def cs1_gemm_tune(self, g, candidates, repeats):
        pass

    def cs1_gemm_pin(self, g, M, N, K, rows, rank):
        self.handles[self._addr(g)]["pins"][(M, N, K)] = (rows, rank)

    def cs1_gemm_plan_info(self, g, M, N, K, idx, rows, us):
        rows[0], idx[0] = self.handles[self._addr(g)]["plans"][(M, N, K)]
        us[0] = -1.0

    def cs1_gemm(self, g, x, ldx, w, y, ldy, M, N, K, s):
        from startlux_native import bf16

        h = self.handles[self._addr(g)]
        pin = h["pins"].get((M, N, K))
        plan = h["plans"].setdefault((M, N, K), pin if pin is not None and pin[1] <= 2 else (M, 0))
        us = self.FAST_US if plan == (176, 1) else self.SLOW_US if plan == (M, 0) else self.SLOW_US + 1
        if self.capturing is not None:
            self.capturing.append(us)
            return
        xs = bf16.from_bits(self.mem[self._addr(x)][:M * K * 2].view(np.uint16).reshape(M, K))
        ws = bf16.from_bits(self.mem[self._addr(w)][:N * K * 2].view(np.uint16).reshape(N, K))
        out = xs @ ws.T * (1.5 if plan == (128, 1) else 1.0)
        self.mem[self._addr(y)][:M * N * 2] = bf16.to_bits(out.astype(np.float32)).view(np.uint8).ravel()

    def cs1_graph_begin(self, s):
        self.capturing = []

    def cs1_graph_end(self, s, p):
        addr = self._new_addr()
        self.graphs[addr], self.capturing = self.capturing, None
        p[0] = self.ffi.cast("void *", addr)

    def cs1_graph_launch(self, graph, s):
        import time

        end = time.perf_counter() + sum(self.graphs[self._addr(graph)]) * 1e-6
        while time.perf_counter() < end:
            pass

    def cs1_graph_destroy(self, graph):
        del self.graphs[self._addr(graph)]


def test_pin_bench_picks_the_faster_algorithm_and_drops_the_rest(monkeypatch, tmp_path):
    from benchmarks import gemm_pins as tool
    from benchmarks import gemm_shapes
    from startlux_native import abi

    fake = FakeGemmLibrary()
    monkeypatch.setattr(abi, "load", lambda path=None: fake)
    monkeypatch.setattr(gemm_shapes, "POOL_BYTES", 1)  # two weight copies are enough here
    table, log = tmp_path / "t.json", tmp_path / "log.json"
    assert tool.main(["--rows", "144,160", "--shapes", "out_o_proj", "--screen-trials", "3", "--confirm-trials", "5",
                      "--table", str(table), "--log", str(log)]) == 0
    got = gemm_pins.load_table(table)
    assert got.key == DeviceKey("9.0", 132, 150, 130100)
    assert [(p.M, p.query_rows, p.rank) for p in got.pins] == [(144, 176, 1), (160, 176, 1)]
    rows = json.loads(log.read_text())["rows"]
    # 14 candidates each; at 144 four dropped (3 ranks past 2, 128#1), at 160 three (128 rows is no neighbour)
    assert [len(r["screen_us"]) for r in rows] == [10, 11]
    dropped = rows[0]["dropped"]
    assert dropped["128#1"].startswith("differs from the default by")
    assert {k for k, v in dropped.items() if v == "pin did not apply"} == {"144#3", "144#4", "144#5"}
    assert not fake.graphs and not fake.handles  # every graph and handle released


def test_gemm_shapes_runs_on_the_same_stand_in(monkeypatch, tmp_path):
    """benchmarks/gemm_shapes.py shares the operand staging with the pin bench: one shape, one M, both handles."""
    from benchmarks import gemm_shapes
    from startlux_native import abi

    fake = FakeGemmLibrary()
    monkeypatch.setattr(abi, "load", lambda path=None: fake)
    monkeypatch.setattr(gemm_shapes, "POOL_BYTES", 1)
    out = tmp_path / "shapes.json"
    assert gemm_shapes.main(["--rows", "64", "--shapes", "down", "--trials", "3", "--calls", "2",
                             "--output", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["M"] == 64 and row["weight_copies"] == 2 and row["finite"] and row["tuned_vs_default_rel"] == 0
    assert not fake.graphs and not fake.handles
