"""The built library against the header: symbols, version handshake, status strings, argument checks without a
device, and a clean refusal of a library with the wrong ABI version or a missing symbol."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from startlux_native import abi


def have_compiler(name: str) -> bool:
    return shutil.which(name) is not None


LIBRARY_CODES = {"CS1_ERR_SHAPE": 2001, "CS1_ERR_ALIGNMENT": 2002, "CS1_ERR_NULL": 2003, "CS1_ERR_UNSUPPORTED": 2004,
                 "CS1_ERR_NO_DEVICE": 2005, "CS1_ERR_WORKSPACE": 2006, "CS1_ERR_GRAPH": 2007}


@pytest.fixture(scope="module")
def lib(built_library) -> abi.Library:
    return abi.Library(built_library)


def test_every_declared_symbol_is_exported(built_library):
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(abi.cdef_source())
    raw = ffi.dlopen(str(built_library))
    declared = abi.declared_functions()
    assert len(declared) >= 40, declared
    missing = []
    for name in declared:
        try:
            getattr(raw, name)
        except AttributeError:
            missing.append(name)
    print(f"{len(declared)} declared functions, missing: {missing}")
    assert not missing


def test_version_handshake_and_build_info(lib):
    assert int(lib.raw.cs1_abi_version()) == abi.header_abi_version()
    info = lib.build_info()
    print(info)
    assert re.fullmatch(r"abi=\d+ arch=sm_\d+[a-z]? cuda=\d+\.\d+ nvcc=[\d.]+ git=\S+", info), info
    assert f"abi={abi.header_abi_version()} " in info


def test_enum_values_match_the_header(lib):
    for name, value in LIBRARY_CODES.items():
        assert int(getattr(lib.raw, name)) == value


def test_error_string_covers_all_ranges(lib):
    texts = {code: lib.error_string(code) for code in
             [0, 1, 2, 35, 100, 700, 900, 901, 999, 1001, 1007, 1013, 1015, 1999, *LIBRARY_CODES.values(), 2999, -1]}
    for code, text in texts.items():
        print(f"{code:5d}: {text}")
        assert text
    assert texts[0] == "success"
    assert "illegal memory access" in texts[700]
    assert "no CUDA-capable device" in texts[100]
    for code in (1001, 1007, 1013, 1015, 1999):
        assert texts[code].startswith("cuBLAS")
    assert "INVALID_VALUE" in texts[1007] and "NOT_SUPPORTED" in texts[1015]
    lib_texts = [texts[c] for c in LIBRARY_CODES.values()]
    assert all(t.startswith("cs1:") for t in lib_texts)
    assert len(set(lib_texts)) == len(lib_texts)
    assert "unknown" in texts[2999] and "unknown" in texts[-1]


def test_argument_checks_return_before_any_launch(lib):
    """Shape, null and alignment checks and empty work: no device is touched, so this runs anywhere."""
    ffi, raw = lib.ffi, lib.raw
    p = ffi.cast("void *", 0x10000)  # never dereferenced: every call below must return before a launch
    odd = ffi.cast("void *", 0x10001)
    ip = ffi.cast("int32_t *", 0x10000)
    fp = ffi.cast("float *", 0x10000)
    null = ffi.NULL
    s = null
    cases = {
        "empty embed": (raw.cs1_embed(ip, p, p, 0, 64, 10, s), 0),
        "embed null": (raw.cs1_embed(ffi.cast("int32_t *", 0), p, p, 3, 64, 10, s), 2003),
        "empty rms_norm": (raw.cs1_rms_norm(null, null, null, 0, 64, 1e-6, s), 0),
        "rms_norm null": (raw.cs1_rms_norm(p, null, p, 2, 64, 1e-6, s), 2003),
        "rms_norm odd": (raw.cs1_rms_norm(odd, p, p, 2, 64, 1e-6, s), 2002),
        "rms_norm negative": (raw.cs1_rms_norm(p, p, p, -1, 64, 1e-6, s), 2001),
        "add_rms_norm null": (raw.cs1_add_rms_norm(p, null, p, p, 2, 64, 1e-6, s), 2003),
        "gated D": (raw.cs1_gated_rms_norm(p, p, 1000, fp, 1, p, 2, 2, 100, 1e-6, s), 2004),
        "gated ldz": (raw.cs1_gated_rms_norm(p, p, 100, fp, 1, p, 2, 2, 128, 1e-6, s), 2001),
        "empty silu_mul": (raw.cs1_silu_mul(null, 0, null, 0, 64, s), 0),
        "silu_mul ld": (raw.cs1_silu_mul(p, 100, p, 2, 64, s), 2001),
        "attn_prep Dh": (raw.cs1_attn_prep(p, 4096, p, p, ip, fp, p, p, p, 2, 2, 1, 100, 64, 1e-6, s), 2001),
        "attn_prep rotary": (raw.cs1_attn_prep(p, 4096, p, p, ip, fp, p, p, p, 2, 2, 1, 256, 300, 1e-6, s), 2001),
        "empty gemm": (raw.cs1_gemm(null, null, 64, null, null, 64, 0, 64, 64, s), 0),
        "gemm null handle": (raw.cs1_gemm(null, p, 64, p, p, 64, 2, 64, 64, s), 2003),
        "gemm ldx": (raw.cs1_gemm(p, p, 32, p, p, 64, 2, 64, 64, s), 2001),
        "gemm K%8": (raw.cs1_gemm(p, p, 68, p, p, 64, 2, 64, 63, s), 2002),
        "gemm misaligned y": (raw.cs1_gemm(p, p, 64, p, odd, 64, 2, 64, 64, s), 2002),
        "empty gemm_stream": (raw.cs1_gemm_stream(null, null, 64, null, null, 64, 0, 64, 64, 64, 1, 1, s), 0),
        "gemm_stream block_n": (raw.cs1_gemm_stream(p, p, 64, p, p, 64, 2, 64, 64, 72, 1, 1, s), 2001),
        "gemm_stream cluster": (raw.cs1_gemm_stream(p, p, 64, p, p, 64, 2, 64, 64, 64, 1, 4, s), 2001),
        "gemm_stream splits": (raw.cs1_gemm_stream(p, p, 64, p, p, 64, 2, 64, 64, 64, 17, 1, s), 2001),
        "gemm_stream null": (raw.cs1_gemm_stream(null, p, 64, p, p, 64, 2, 64, 64, 64, 1, 1, s), 2003),
        "gemm_stream M": (raw.cs1_gemm_stream(p, p, 64, p, p, 64, 257, 64, 64, 64, 1, 1, s), 2001),
        "gemm_stream N%8": (raw.cs1_gemm_stream(p, p, 64, p, p, 64, 2, 60, 64, 64, 1, 1, s), 2002),
        "empty conv_gates": (raw.cs1_gdn_conv_gates(null, 64, null, ip, null, 0, 64, null, fp, fp, fp, fp, 2, s), 0),
        "conv_gates nothing": (raw.cs1_gdn_conv_gates(null, 64, null, ip, null, 4, 0, null, fp, fp, fp, fp, 0, s), 0),
        "conv_gates T": (raw.cs1_gdn_conv_gates(p, 64, p, ip, p, -1, 64, p, fp, fp, fp, fp, 2, s), 2001),
        "conv_gates conv null": (raw.cs1_gdn_conv_gates(p, 64, null, ip, p, 4, 64, p, fp, fp, fp, fp, 2, s), 2003),
        "conv_gates ld": (raw.cs1_gdn_conv_gates(p, 32, p, ip, p, 4, 64, p, fp, fp, fp, fp, 2, s), 2001),
        "conv_gates gate null": (raw.cs1_gdn_conv_gates(p, 64, p, ip, p, 4, 64, p, fp, fp, fp,
                                                        ffi.cast("float *", 0), 2, s), 2003),
        "conv_gates ld < 2H": (raw.cs1_gdn_conv_gates(p, 64, p, ip, p, 4, 64, p, fp, fp, fp, fp, 40, s), 2001),
        "conv_gates odd ba": (raw.cs1_gdn_conv_gates(p, 64, p, ip, p, 4, 64, odd, fp, fp, fp, fp, 2, s), 2002),
        "empty readout": (raw.cs1_letter_readout(null, null, ffi.cast("int32_t *", 0), 0, null, fp, 26, fp, 64,
                                                 1e-6, s), 0),
        "readout null": (raw.cs1_letter_readout(null, null, ip, 2, p, fp, 26, fp, 64, 1e-6, s), 2003),
        "graph launch null": (raw.cs1_graph_launch(null, s), 2007),
        "graph end null out": (raw.cs1_graph_end(s, ffi.cast("void **", 0)), 2003),
        "device_count null": (raw.cs1_device_count(ffi.cast("int *", 0)), 2003),
        "malloc null": (raw.cs1_malloc(ffi.cast("void **", 0), 16), 2003),
        "free null": (raw.cs1_free(null), 0),
        "host_free null": (raw.cs1_host_free(null), 0),
        "memset empty": (raw.cs1_memset_async(null, 0, 0, s), 0),
        "copy empty": (raw.cs1_copy_dd(null, null, 0, s), 0),
        "upload null": (raw.cs1_upload(null, p, 16, s), 2003),
        "gemm_destroy null": (raw.cs1_gemm_destroy(null), 0),
        "graph_destroy null": (raw.cs1_graph_destroy(null), 0),
    }
    bad = {k: v for k, v in cases.items() if v[0] != v[1]}
    for k, (got, want) in cases.items():
        print(f"{k:22s} got {got} want {want}")
    assert not bad


NO_DEVICE_SCRIPT = textwrap.dedent("""
    import json, sys
    from startlux_native import abi
    lib = abi.Library(sys.argv[1])
    ffi, raw = lib.ffi, lib.raw
    n = ffi.new("int *")
    out = {"device_count": [raw.cs1_device_count(n), n[0]]}
    if n[0] > 0:
        print(json.dumps({"has_device": True})); sys.exit(0)
    p = ffi.new("void **")
    out["malloc"] = raw.cs1_malloc(p, 256)
    out["host_alloc"] = raw.cs1_host_alloc(p, 256)
    out["stream_create"] = raw.cs1_stream_create(p)
    out["gemm_create"] = raw.cs1_gemm_create(1 << 20, p)
    out["set_device"] = raw.cs1_set_device(0)
    out["mem_info"] = raw.cs1_mem_info(ffi.new("size_t *"), ffi.new("size_t *"))
    out["device_info"] = raw.cs1_device_info(0, ffi.new("int *"), ffi.new("int *"), ffi.new("int *"),
                                             ffi.new("size_t *"))
    out["stream_sync_default"] = raw.cs1_stream_sync(ffi.NULL)
    fake = ffi.cast("void *", 0x10000)  # never dereferenced: without a device the call must refuse first
    out["gemm_stream"] = raw.cs1_gemm_stream(fake, fake, 64, fake, fake, 64, 2, 64, 64, 64, 1, 1, ffi.NULL)
    out["texts"] = {k: lib.error_string(v if isinstance(v, int) else v[0]) for k, v in out.items()}
    print(json.dumps(out))
""")


def test_calls_without_a_device_return_clean_status(built_library):
    """In a subprocess (a crash would otherwise take pytest down): every call returns a non-zero status."""
    proc = subprocess.run([sys.executable, "-c", NO_DEVICE_SCRIPT, str(built_library)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, f"crashed or failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if out.get("has_device"):
        pytest.skip("a CUDA device is visible here: the no-device behaviour is not observable")
    print(json.dumps(out, indent=1))
    assert out["device_count"] == [2005, 0]
    assert out["gemm_stream"] == 2005, out["texts"]["gemm_stream"]  # CS1_ERR_NO_DEVICE
    for key in ("malloc", "host_alloc", "stream_create", "gemm_create", "set_device", "mem_info", "device_info",
                "stream_sync_default"):
        assert out[key] != 0, key
        assert "unknown" not in out["texts"][key], out["texts"][key]


# ---- a fake library: the loader must refuse a wrong version or a missing symbol before creating anything ----------

def write_fake(tmp: Path, *, version: int, drop: str | None = None) -> Path:
    lines = ["#include <stdint.h>"]
    for name in abi.declared_functions():
        if name == drop:
            continue
        if name == "cs1_abi_version":
            lines.append(f"uint32_t cs1_abi_version(void) {{ return {version}u; }}")
        elif name in ("cs1_build_info", "cs1_error_string"):
            lines.append(f'const char *{name}(void) {{ return "fake"; }}')
        else:
            lines.append(f"int {name}(void) {{ return 77; }}")
    src = tmp / f"fake_{version}_{drop or 'all'}.c"
    src.write_text("\n".join(lines) + "\n")
    so = src.with_suffix(".so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


@pytest.mark.skipif(not have_compiler("gcc"), reason="gcc not found")
def test_loader_refuses_wrong_version_and_missing_symbol(tmp_path):
    need = abi.header_abi_version()
    good = abi.Library(write_fake(tmp_path, version=need))  # control: the same stub set with the right version loads
    assert good.raw.cs1_device_count(good.ffi.NULL) == 77
    with pytest.raises(RuntimeError, match=rf"has ABI version {need + 1}, this package needs {need}"):
        abi.Library(write_fake(tmp_path, version=need + 1))
    with pytest.raises(RuntimeError, match=r"lacks cs1_gemm\b"):
        abi.Library(write_fake(tmp_path, version=need, drop="cs1_gemm"))
