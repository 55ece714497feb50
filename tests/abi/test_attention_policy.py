"""The attention tile policy and its per-device capability cache (native/attention_policy.h), built with plain g++
against a stub device API: no CUDA toolkit, no GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "native"

# Stub devices: 0 = sm_89 (L20), 1 = sm_90 (H200), 2 = sm_120, 3 = sm_86, 4 = sm_89 with too little shared memory
# for the wide tile, 5 = sm_75. The program prints one line per check; the Python side decides what is expected.
STUB_PROGRAM = r"""
#include <cstdio>
#include "attention_policy.h"

namespace pol = cs1_attention_policy;

static int g_current = 0;
static int g_queries[8] = {0};
static int g_smem_calls[8][4] = {{0}};
static const pol::DeviceCaps kDevices[6] = {
    {8, 9, 101376}, {9, 0, 232448}, {12, 0, 101376}, {8, 6, 101376}, {8, 9, 101375}, {7, 5, 65536}};

struct StubApi {
    static int current_device(int *device) { *device = g_current; return 0; }
    static int query_caps(int device, pol::DeviceCaps *caps) {
        ++g_queries[device];
        *caps = kDevices[device];
        return 0;
    }
    static int set_max_dynamic_smem(int kernel_id, int bytes) {
        if (bytes > kDevices[g_current].smem_optin) return 1;  // cudaErrorInvalidValue
        ++g_smem_calls[g_current][kernel_id];
        return 0;
    }
};

static pol::DeviceCache<StubApi> cache;

static int tile(long rows) {
    int32_t t = -1;
    int status = pol::tile_rows_for_current_device(cache, rows, &t);
    return status != 0 ? -status : t;
}

int main() {
    std::printf("wide_on_sm90 %d\n", pol::kWideTileOnSm90 ? 1 : 0);
    std::printf("min_rows %ld\n", (long)pol::kWideTileMinRows);
    std::printf("smem %d %d\n", pol::smem_bytes(pol::kNarrowTileRows), pol::smem_bytes(pol::kWideTileRows));
    const int order[] = {0, 1, 2, 1, 0, 3, 4, 5};
    for (int step = 0; step < 8; ++step) {
        g_current = order[step];
        int device = -1;
        pol::DeviceCaps caps;
        cache.current(&device, &caps);
        // the launch path: set the attribute of the chosen kernel twice; only the first call reaches the API
        int t = tile(4097);
        int status = 0;
        if (t > 0) {
            int id = t == pol::kWideTileRows ? 2 : 0;
            status = cache.ensure_smem(device, id, pol::smem_bytes(t));
            if (status == 0) status = cache.ensure_smem(device, id, pol::smem_bytes(t));
        }
        std::printf("step %d device %d cc %d%d rows1 %d rows639 %d rows640 %d rows4097 %d queries %d"
                    " smem_narrow %d smem_wide %d status %d\n",
                    step, device, caps.cc_major, caps.cc_minor, tile(1), tile(639), tile(640), t,
                    g_queries[device], g_smem_calls[device][0], g_smem_calls[device][2], status);
    }
    for (int d = 0; d < 6; ++d)  // the wgmma rule: bidirectional / causal / library without the sm_90a build
        std::printf("wgmma_dev%d %d%d%d\n", d, pol::use_wgmma(kDevices[d], false, true, 99328) ? 1 : 0,
                    pol::use_wgmma(kDevices[d], true, true, 99328) ? 1 : 0,
                    pol::use_wgmma(kDevices[d], false, false, 99328) ? 1 : 0);
    g_current = 0;
    std::printf("negative_rows %d\n", tile(-1));
    std::printf("null_out %d\n", pol::tile_rows_for_current_device(cache, 10, nullptr));
    return 0;
}
"""


def _run_stub(tmp_path: Path) -> list[str]:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed: cannot build the policy stub program")
    src = tmp_path / "policy_stub.cpp"
    exe = tmp_path / "policy_stub"
    src.write_text(STUB_PROGRAM, encoding="utf-8")
    build = subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", str(NATIVE), str(src),
                            "-o", str(exe), "-pthread"], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    print(run.stdout)
    return run.stdout.splitlines()


def test_policy_follows_the_current_device_and_caches_per_device(tmp_path):
    lines = _run_stub(tmp_path)
    head = dict(line.split(" ", 1) for line in lines if not line.startswith("step"))
    wide_on_sm90 = head["wide_on_sm90"] == "1"
    assert int(head["min_rows"]) == 640
    assert head["smem"] == "67584 101376"
    assert head["negative_rows"] == "-2001"  # CS1_ERR_SHAPE
    assert head["null_out"] == "2003"        # CS1_ERR_NULL
    # the wgmma kernel: bidirectional calls on compute capability 9.0 (device 1) of a build that holds it, only
    assert [head[f"wgmma_dev{d}"] for d in range(6)] == ["000", "100", "000", "000", "000", "000"]

    steps = [line.split() for line in lines if line.startswith("step")]
    got = [dict(zip(s[0::2], s[1::2], strict=True)) for s in steps]
    sm90_wide = 128 if wide_on_sm90 else 64
    # (device, cc, rows640/rows4097 choice, capability queries so far for that device)
    expected = [
        ("0", "89", 128, 1),         # sm_89: wide from 640 rows
        ("1", "90", sm90_wide, 1),   # sm_90: the measured constant
        ("2", "120", 128, 1),        # sm_120: wide
        ("1", "90", sm90_wide, 1),   # back to sm_90: answer re-evaluated, capabilities served from the cache
        ("0", "89", 128, 1),         # back to sm_89
        ("3", "86", 64, 1),          # sm_86: never wide
        ("4", "89", 64, 1),          # sm_89 without 99 KiB of opt-in shared memory: narrow
    ]
    for step, (device, cc, wide, queries) in zip(got, expected, strict=False):
        assert step["device"] == device and step["cc"] == cc, step
        assert int(step["rows1"]) == 64 and int(step["rows639"]) == 64, step
        assert int(step["rows640"]) == wide and int(step["rows4097"]) == wide, step
        assert int(step["queries"]) == queries, step
        assert step["status"] == "0", step
        # the dynamic smem attribute is set once per (device, kernel), not once per process
        calls = [int(step["smem_narrow"]), int(step["smem_wide"])]
        assert calls == ([0, 1] if wide == 128 else [1, 0]), step
    sm75 = got[7]
    assert sm75["device"] == "5" and int(sm75["rows640"]) == -2004, sm75  # CS1_ERR_UNSUPPORTED below sm_80
