"""GEMM pin tables: a fixed cuBLASLt algorithm per (N, K, padded M), measured once offline and replayed at start-up.

cuBLASLt's first heuristic is not always its fastest algorithm, and timing candidates at every start makes the plan
depend on that start's noise (LEVERS lever 4). A table written by benchmarks/gemm_pins.py on one kind of GPU names,
per (N, K, M), heuristic #rank of the problem asked at query_rows rows (cs1_gemm_pin). The heuristic lists depend on
the GPU and the cuBLASLt version, so a table applies only where both match what it was measured on; elsewhere the
default plans run. Tables ship in startlux_native/gemm_pins/*.json.

A spec is "auto" (the shipped table that matches this device, if any), "off", or the path of a table (which must
match the device: an explicit table that does not is an error, never silently ignored).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TABLE_DIR = Path(__file__).resolve().parent / "gemm_pins"
FORMAT = "startlux-native gemm pins 1"
GIB = 1 << 30


class PinTableError(ValueError):
    """A pin table that cannot be read or does not fit this device."""


@dataclass(frozen=True)
class DeviceKey:
    """What a table must match: the GPU kind (compute capability, SMs, memory) and the cuBLASLt version."""

    compute_capability: str
    sm_count: int
    total_gib: int
    cublaslt_version: int

    def describe(self) -> str:
        return (f"compute capability {self.compute_capability}, {self.sm_count} SMs, {self.total_gib} GiB, "
                f"cuBLASLt {self.cublaslt_version}")

    def as_json(self) -> dict:
        return {"compute_capability": self.compute_capability, "sm_count": self.sm_count,
                "total_gib": self.total_gib, "cublaslt_version": self.cublaslt_version}


@dataclass(frozen=True)
class Pin:
    N: int
    K: int
    M: int
    query_rows: int
    rank: int


@dataclass(frozen=True)
class PinTable:
    path: Path
    key: DeviceKey
    pins: tuple[Pin, ...]


def device_key(lib, device: int) -> DeviceKey:
    """The key of `device` as the loaded library sees it (cs1_device_info, cs1_gemm_blas_version)."""
    ffi = lib.ffi
    major, minor, sms = (ffi.new("int *") for _ in range(3))
    total, version = ffi.new("size_t *"), ffi.new("size_t *")
    lib.cs1_device_info(device, major, minor, sms, total)
    lib.cs1_gemm_blas_version(version)
    return DeviceKey(f"{major[0]}.{minor[0]}", int(sms[0]), round(int(total[0]) / GIB), int(version[0]))


def _int(entry: dict, name: str, where: str, low: int) -> int:
    v = entry.get(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
        raise PinTableError(f"{where}: '{name}' must be an integer >= {low}, got {v!r}")
    return v


def load_table(path: str | Path) -> PinTable:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PinTableError(f"cannot read GEMM pin table {path}: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PinTableError(f"{path} is not a GEMM pin table (format must be {FORMAT!r})")
    dev = data.get("device")
    if not isinstance(dev, dict) or not isinstance(dev.get("compute_capability"), str):
        raise PinTableError(f"{path}: 'device' must hold compute_capability, sm_count, total_gib, cublaslt_version")
    key = DeviceKey(dev["compute_capability"], _int(dev, "sm_count", f"{path} device", 1),
                    _int(dev, "total_gib", f"{path} device", 1), _int(dev, "cublaslt_version", f"{path} device", 1))
    entries = data.get("pins")
    if not isinstance(entries, list):
        raise PinTableError(f"{path}: 'pins' must be a list")
    pins, seen = [], set()
    for i, e in enumerate(entries):
        where = f"{path} pins[{i}]"
        if not isinstance(e, dict):
            raise PinTableError(f"{where}: must be an object")
        pin = Pin(_int(e, "N", where, 1), _int(e, "K", where, 1), _int(e, "M", where, 1),
                  _int(e, "query_rows", where, 1), _int(e, "rank", where, 0))
        if pin.rank > 63:
            raise PinTableError(f"{where}: rank must be <= 63, got {pin.rank}")
        if (pin.N, pin.K, pin.M) in seen:
            raise PinTableError(f"{where}: (N, K, M) = ({pin.N}, {pin.K}, {pin.M}) is pinned twice")
        seen.add((pin.N, pin.K, pin.M))
        pins.append(pin)
    return PinTable(path, key, tuple(pins))


def shipped_tables() -> list[Path]:
    return sorted(TABLE_DIR.glob("*.json"))


def resolve(spec: str, key: DeviceKey) -> tuple[PinTable | None, str]:
    """(table or None, a line for logs and /info). Raises PinTableError for an explicit table that does not fit."""
    if spec == "off":
        return None, "off"
    if spec == "auto":
        for path in shipped_tables():
            table = load_table(path)
            if table.key == key:
                return table, f"{len(table.pins)} pins from {path.name}"
        return None, f"none: no shipped table measured on this device ({key.describe()})"
    table = load_table(spec)
    if table.key != key:
        raise PinTableError(f"GEMM pin table {spec} was measured on {table.key.describe()}; this device is "
                            f"{key.describe()} (use 'auto' or 'off')")
    return table, f"{len(table.pins)} pins from {table.path}"


def apply(lib, gemm, table: PinTable) -> int:
    """Pins every entry on the GEMM handle (before its plans are made); returns how many."""
    for p in table.pins:
        lib.cs1_gemm_pin(gemm, p.M, p.N, p.K, p.query_rows, p.rank)
    return len(table.pins)
