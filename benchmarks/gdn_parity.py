"""Two builds of libqwen3_5_cuda.so, byte for byte, on cs1_gdn_prefill alone (4B head shapes: 32 value heads, 16 key
heads): the check of a GDN kernel change meant to leave every result unchanged, without a checkpoint.

    python -m benchmarks.gdn_parity OLD.so NEW.so [--lengths 1,63,64,65,640,4097]

Each length runs alone, then all of them packed in one call with 37 padding rows; inputs are random (seed 0, never
zero), output and workspace poisoned (0xFF) before each call. Each library runs its calls with its own device
buffers, one library after the other. Prints the count of differing bytes; exit 0 only when there are none.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

from benchmarks.device_buffers import DeviceBuffers
from startlux_native import abi

ROOT = Path(__file__).resolve().parents[1]
H, HK, D = 32, 16, 128


def load_test_gdn():
    spec = importlib.util.spec_from_file_location("test_gdn", ROOT / "tests" / "gpu" / "test_gdn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def outputs(library: str, cases: list[tuple]) -> list[np.ndarray]:
    lib = abi.Library(library, strict=False)  # the two builds may differ in ABI version; cs1_gdn_prefill is the same
    print(f"{library}: {lib.build_info()}", flush=True)
    dev = DeviceBuffers.on_new_stream(lib, np.random.default_rng(0))
    ffi, got = lib.ffi, []
    for bits, ld, g, beta, cu in cases:
        t, n = bits.shape[0], len(cu) - 1
        ws_bytes = ffi.new("size_t *")
        lib.cs1_gdn_workspace_bytes(t, n, H, ws_bytes)
        o = dev.empty(t * H * D * 2)
        ws = dev.empty(int(ws_bytes[0]))
        lib.cs1_gdn_prefill(dev.up(bits), ld, ffi.cast("float *", dev.up(g)), ffi.cast("float *", dev.up(beta)),
                            ffi.cast("int32_t *", dev.up(cu)), n, o, ws, int(ws_bytes[0]), t, H, HK, D**-0.5,
                            dev.stream)
        host = np.empty((t, H, D), np.uint16)
        lib.cs1_download(ffi.from_buffer(host), o, host.nbytes, dev.stream)
        lib.cs1_stream_sync(dev.stream)
        got.append(host)
    dev.free_all()
    return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--lengths", default="1,63,64,65,640,4097")
    args = p.parse_args(argv)
    tg = load_test_gdn()
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in args.lengths.split(",")]
    cases = []
    for pack in [[n] for n in lengths] + [lengths]:
        cu = np.concatenate([[0], np.cumsum(pack)]).astype(np.int32)
        pad = 37 if len(pack) > 1 else 0
        bits, ld, g, beta, *_ = tg.prefill_inputs(rng, int(cu[-1]) + pad, H, HK)
        cases.append((bits, ld, g, beta, cu))
    old, new = outputs(args.old, cases), outputs(args.new, cases)
    bad = 0
    for (bits, *_, cu), a, b in zip(cases, old, new, strict=True):
        diff = int(np.count_nonzero(a != b))
        bad += diff
        print(f"prompts {np.diff(cu).tolist()} ({bits.shape[0]} rows): {diff} differing bf16 values", flush=True)
    print("bit-identical" if bad == 0 else f"DIFFER: {bad} values")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
