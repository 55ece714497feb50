"""CPU check of native/gdn.cu's prefill kernels, without a GPU: a block emulator (prefix.h) runs the real kernel
source, every CUDA thread a std::thread. It checks logic (fragment layouts, cp.async group accounting, masking,
packed prompts), not speed, and not races between blocks.

    python benchmarks/gdn_emulator/check.py NATIVE_DIR [--against OLD_NATIVE_DIR] [--walk "<kernel<...>>"]

Builds NATIVE_DIR/gdn.cu (less its device set-up and C API) + prefix.h + driver.cpp with g++ (C++20, CUDA headers
from $CUDA_HOME/include) and runs cases of 1 to 700 rows against tests/gpu/test_gdn.py's float64 recurrence
(limit 2e-2 x max|ref|), packed prompts against separate calls and a repeat (bit for bit). With --against, the
same cases also run through OLD_NATIVE_DIR's kernels and every output must have the same bytes: the check of a
change meant to leave results unchanged. The emulator sums each MMA in double (the hardware's fp32 order is
unspecified), so "the same bytes" here means the same operands in the same order, which the GPU then also gives.
NaN is out of its reach: the CPU's fp32 arithmetic keeps a NaN's payload where the GPU returns the canonical
0x7fffffff, so NaN propagation is checked on the GPU only (tests/gpu/test_gdn.py, the NaN case; LEVERS lever 32).
--walk picks the walk kernel instantiation (default: the double-buffered walk that writes O itself when the source
has it, gdn_walk_mma_kernel<2, true>; "gdn_walk_mma_kernel<2, false>" runs the separate out kernel after it;
"gdn_walk_mma_kernel<2, true, true>" the walk that takes P and qs from prep, prep then making them; trees before
lever 70 spell it "gdn_walk_mma_kernel<2, true, false, true>").
--prep-rolled (with that walk) runs prep with the solve's rows 32-63 as a loop (gdn_prep_mma_kernel<true, true>,
lever 73c), as the GPU did above 64 rows (lever 74) when prep's grid had at most one block per SM; for trees
between levers 73c and 88 only (lever 88 replaced the substitution, rolled or not, by block rows on tensor cores).
--no-tma builds NATIVE's walk with cp.async copies only, as sm_80-89 run it; without it the emulator takes the sm_90
form where the source has one (the walk's TMA copies on an mbarrier, lever 84: prefix.h models both).
--norm checks only the out kernel with the layer's gated RMSNorm folded in (gdn_out_norm_mma_kernel, lever 65)
against the norm kernel's row code (gated_norm.cuh) run on the out kernel's own O: the same bytes on prompt rows.
Several minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
from startlux_native import bf16  # noqa: E402

spec = importlib.util.spec_from_file_location("tg", ROOT / "tests" / "gpu" / "test_gdn.py")
tg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tg)
D = 128
WORK = Path(tempfile.mkdtemp(prefix="gdn-emu-"))


def build(native: Path, walk: str | None, name: str, prep_rolled: bool = False, tma: bool = True) -> Path:
    src = (native / "gdn.cu").read_text()
    walk_out = "bool kOut" in src  # the walk writes O itself unless told otherwise; prep zeroes the padding rows
    if walk is None:
        if walk_out:
            walk = "gdn_walk_mma_kernel<2, true>"
        else:
            walk = "gdn_walk_mma_kernel<2, true>" if "bool kPreSplit" in src else "gdn_walk_mma_kernel<2>"
    cut = next(m for m in ("// The walk variants", "// How one cs1_gdn_prefill runs", "// Opt in to") if m in src)
    body = src[:src.index(cut)]
    body += "}  // namespace\n"
    body = body.replace("#include <atomic>", "")
    body = body.replace('#include "common.cuh"', '#include "prefix.h"\n#include "common.cuh"')
    body = body.replace("extern __shared__ __align__(16) unsigned char smem_raw[];",
                        "unsigned char *smem_raw = (unsigned char *)smem;")
    if "kPrepIndexMaxSeqs" in src:  # prep computes the index itself for a few prompts
        body = "#define GDN_PREP_INDEX 1\n" + body
    if walk_out:
        params = walk.replace(" ", "").rstrip(">").split(",")  # <kBufs, kOut[, kPIn]>; before lever 70 <kBufs,
        # kOut[, kPreSplit[, kPIn]]>
        body = f"#define GDN_WALK_OUT {int(params[1] == 'true')}\n" + body
    if "gdn_out_norm_mma_kernel" in src:  # the out kernel with the gated RMSNorm folded in (check.py --norm)
        body = "#define GDN_OUT_NORM 1\n" + body
    if "bool kPOut" in src:  # prep takes scale and kPOut: P and qs for the walk that reads them (kPIn)
        pin_at = 3 if "bool kPreSplit" in src else 2
        p_in = len(params) > pin_at and params[pin_at] == "true"
        body = f"#define GDN_PREP_P 1\n#define GDN_WALK_PIN {int(p_in)}\n" + body
    if prep_rolled:
        if not ("bool kRolledSolve" in src and "bool kPOut" in src and p_in):
            raise SystemExit("--prep-rolled needs a tree with kRolledSolve and --walk with kPIn (P from prep)")
        body = "#define GDN_PREP_ROLLED 1\n" + body
    if not tma:  # the walk's copies as a device without TMA makes them (sm_80-89: cp.async only)
        body = "#define GDN_EMULATED_NO_TMA 1\n" + body
    (WORK / f"{name}.cpp").write_text(body + (HERE / "driver.cpp").read_text())
    exe = WORK / name
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    subprocess.run(["g++", "-std=c++20", "-O2", "-pthread", "-w", f"-I{cuda}/include", f"-I{HERE}", f"-I{native}",
                    f"-DWALK={walk}", str(WORK / f"{name}.cpp"), "-o", str(exe)], check=True)
    print(f"built {name} from {native} (walk {walk}{', the rolled prep' if prep_rolled else ''}"
          f"{', no TMA' if not tma else ''})", flush=True)
    return exe


def run(exe, bits, ld, g, beta, cu, t, h, hk, dump_uw=False):
    d = WORK / "data"
    d.mkdir(exist_ok=True)
    bits.tofile(d / "qkv.bin")
    g.tofile(d / "g.bin")
    beta.tofile(d / "beta.bin")
    np.asarray(cu, np.int32).tofile(d / "cu.bin")
    subprocess.run([str(exe), "prefill", str(d), str(t), str(h), str(hk), str(ld), str(len(cu) - 1), repr(D**-0.5)],
                   check=True, capture_output=True, env={**os.environ, "GDN_EMU_DUMP_UW": "1"} if dump_uw else None)
    return np.fromfile(d / "o.bin", dtype=np.uint16).reshape(t, h, D)


def norm_case(exe, lengths, h, hk, pad=0, round_weighted=1, seed=0):
    """The out kernel with the gated RMSNorm folded in (gdn_out_norm_mma_kernel) against the norm kernel's row code
    run on the out kernel's O: the same bytes on every prompt row. exe: built with the walk without O."""
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + pad
    bits, ld, g, beta, *_ = tg.prefill_inputs(rng, t, h, hk)
    d = WORK / "data"
    d.mkdir(exist_ok=True)
    z = np.full((t, h * D + 8), bf16.to_bits(np.float32([np.nan]))[0], np.uint16)  # 8 NaN columns past z
    z[:, : h * D] = bf16.to_bits(rng.standard_normal((t, h * D), dtype=np.float32) * np.float32(2.0))
    z.tofile(d / "z.bin")
    w = rng.uniform(0.5, 1.5, D).astype(np.float32)
    (bf16.round_(w) if round_weighted else w).tofile(d / "w.bin")
    env = {**os.environ, "GDN_EMU_NORM": str(round_weighted)}
    for n in ("norm_ref.bin", "norm_fused.bin"):
        (d / n).unlink(missing_ok=True)
    bits.tofile(d / "qkv.bin")
    g.tofile(d / "g.bin")
    beta.tofile(d / "beta.bin")
    cu.tofile(d / "cu.bin")
    t0 = time.time()
    subprocess.run([str(exe), "prefill", str(d), str(t), str(h), str(hk), str(ld), str(len(cu) - 1), repr(D**-0.5)],
                   check=True, capture_output=True, env=env)
    ref = np.fromfile(d / "norm_ref.bin", dtype=np.uint16).reshape(t, h * D)
    fused = np.fromfile(d / "norm_fused.bin", dtype=np.uint16).reshape(t, h * D)
    real = int(cu[-1])
    assert np.all(np.isfinite(bf16.from_bits(ref[:real]))), "the reference norm left poison in a prompt row"
    differ = int(np.count_nonzero(ref[:real] != fused[:real]))
    print(f"norm {lengths} H={h} HK={hk} pad={pad} round_weighted={round_weighted}: {differ} of {ref[:real].size} "
          f"prompt-row values differ ({time.time() - t0:.0f} s)", flush=True)
    assert differ == 0, "the folded norm differs from the norm kernel's rows"
    assert np.all(fused[real:] == 0xFFFF), "the out kernel wrote a padding row (prep zeroes them on the GPU path)"
    return fused


def uw_stride(native: Path) -> int:
    """The row stride of U and W in the tree's workspace: the walk tile's kLdF since lever 84, else D."""
    src = (native / "gdn.cu").read_text()
    m = re.search(r"constexpr int kLdF = (\d+);", src)
    return int(m.group(1)) if m and "kLdUW = kLdF" in src else D


def prep_precision(exe, t, h, hk, seed=0, weak=False, ld_uw=D):
    """Prep's U and W (one prompt of t rows) against float64: U = (I + L)^-1 diag(beta) V, W = (I + L)^-1
    diag(beta e^Gam / |k|) K, per chunk and head; returns the largest |error| / max |ref| of each (NaN where any
    value is not finite: the workspace is poisoned before the run)."""
    rng = np.random.default_rng(seed)
    bits, ld, g, beta, q, k, v = tg.prefill_inputs(rng, t, h, hk, weak=weak)
    run(exe, bits, ld, g, beta, [0, t], t, h, hk, dump_uw=True)
    nc = -(-t // 64) + 1  # the workspace's chunk slots (ceil(T / 64) + n_seqs)
    size = nc * h * 64 * ld_uw
    got = {n: np.fromfile(WORK / "data" / f"{n}.bin", dtype=np.float32)[:size].reshape(nc, h, 64, ld_uw)[..., :D]
           for n in "uw"}
    errs = {"u": [], "w": []}
    for c in range(-(-t // 64)):
        r0, r1 = 64 * c, min(t, 64 * c + 64)
        for head in range(h):
            kk = k[r0:r1, head // (h // hk)]
            gam = np.cumsum(g[r0:r1, head].astype(np.float64))
            b = beta[r0:r1, head].astype(np.float64)
            rk = 1.0 / np.sqrt((kk * kk).sum(1) + 1e-6)
            lmat = np.tril(b[:, None] * (kk @ kk.T) * rk[:, None] * rk[None, :] * np.exp(gam[:, None] - gam[None, :]),
                           -1)
            a = np.eye(r1 - r0) + lmat
            ref = {"u": np.linalg.solve(a, b[:, None] * v[r0:r1, head]),
                   "w": np.linalg.solve(a, (b * np.exp(gam) * rk)[:, None] * kk)}
            for n in "uw":
                errs[n].append(np.max(np.abs(got[n][c, head, : r1 - r0] - ref[n])) / np.max(np.abs(ref[n])))
    return {n: float(np.max(e)) for n, e in errs.items()}  # np.max keeps a NaN


def case(exes, lengths, h, hk, pad=0, extra=0, amplitude=1.0, weak=False, separate=False, seed=0):
    exe, old = exes
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    t = int(cu[-1]) + pad
    bits, ld, g, beta, q, k, v = tg.prefill_inputs(rng, t, h, hk, amplitude=amplitude, weak=weak, extra_cols=extra)
    t0 = time.time()
    raw = run(exe, bits, ld, g, beta, cu, t, h, hk)
    o = bf16.from_bits(raw)
    ref = tg.packed_recurrence(q, k, v, g.astype(np.float64), beta.astype(np.float64), cu, D**-0.5, t)
    assert np.all(np.isfinite(o)), "non-finite output"
    assert np.all(o[cu[-1]:] == 0), "padding rows are not zero"
    ratio = float(np.max(np.abs(o - ref)) / np.max(np.abs(ref)))
    note = ""
    if old is not None:
        same = np.array_equal(raw, run(old, bits, ld, g, beta, cu, t, h, hk))
        note = ", same bytes as the old kernels" if same else ", DIFFERENT bytes from the old kernels"
        assert same, "the output differs from the old kernels'"
    print(f"{lengths} H={h} HK={hk} pad={pad} ld+{extra} amp={amplitude} weak={weak}: max err / max|ref| "
          f"{ratio:.3e}{note} ({time.time() - t0:.0f} s)", flush=True)
    assert ratio <= 2e-2
    if separate:
        for a, b in zip(cu[:-1], cu[1:], strict=True):
            if b > a:
                alone = run(exe, bits[a:b].copy(), ld, g[a:b].copy(), beta[a:b].copy(), [0, b - a], int(b - a), h, hk)
                assert np.array_equal(alone, raw[a:b]), f"rows {a}:{b} differ from a separate call"
        print("  packed == separate calls, bit for bit", flush=True)
    return raw


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("native", type=Path)
    ap.add_argument("--against", type=Path, help="a native/ folder whose kernels must give the same bytes")
    ap.add_argument("--walk", help="walk kernel instantiation of NATIVE (default: see above)")
    ap.add_argument("--prep-rolled", action="store_true",
                    help="prep with the solve's rows 32-63 as a loop (needs --walk with P from prep)")
    ap.add_argument("--prep-precision", action="store_true",
                    help="only measure prep's U and W against float64 (NATIVE, and OLD with --against), then stop "
                         "(W is stored rounded to tf32 since lever 70: its error is then that rounding's)")
    ap.add_argument("--no-tma", action="store_true",
                    help="NATIVE's walk with cp.async copies only, as on sm_80-89 (the emulator otherwise takes the "
                         "sm_90 form where the source has one: its TMA copies on an mbarrier)")
    ap.add_argument("--norm", action="store_true",
                    help="only check the out kernel with the gated RMSNorm folded in (walk without O), then stop")
    args = ap.parse_args(argv)
    if args.norm:
        exe = build(args.native.resolve(), "gdn_walk_mma_kernel<2, false>", "emu_norm")
        norm_case(exe, [1], 2, 1)
        norm_case(exe, [1, 64, 65, 0, 7], 4, 2, pad=9)
        norm_case(exe, [130], 2, 2, round_weighted=0)
        print("the folded norm: all cases the same bytes")
        return 0
    if args.prep_precision:
        trees = [("new", args.native)] + ([("old", args.against)] if args.against else [])
        for label, tree in trees:
            exe = build(tree.resolve(), args.walk, f"emu_{label}")
            for t, h, hk, weak in [(64, 4, 2, False), (200, 4, 2, False), (700, 2, 1, True)]:
                w = prep_precision(exe, t, h, hk, weak=weak, ld_uw=uw_stride(tree))
                print(f"{label} T={t} H={h} weak={weak}: prep max|err|/max|ref| U {w['u']:.3e}  W {w['w']:.3e}",
                      flush=True)
        return 0
    exes = (build(args.native.resolve(), args.walk, "emu", args.prep_rolled, tma=not args.no_tma),
            build(args.against.resolve(), None, "emu_old") if args.against else None)
    case(exes, [1], 2, 1)
    case(exes, [64], 2, 2)
    case(exes, [200], 8, 2, extra=72)
    case(exes, [1, 64, 65, 130, 0, 7], 4, 2, pad=37, separate=True)
    case(exes, [64, 128, 192, 1, 1, 1, 129, 0, 2], 2, 1, pad=70, separate=True)
    case(exes, [300], 4, 2, amplitude=1e-9)
    case(exes, [700], 2, 1, weak=True)
    case(exes, [3, 0, 5] * 23 + [9], 2, 1, pad=4)  # 70 prompts: the index kernel runs before prep
    a = case(exes, [40] * 3 + [1] * 20, 2, 1, pad=5)
    b = case(exes, [40] * 3 + [1] * 20, 2, 1, pad=5)
    assert np.array_equal(a, b), "a repeat differs"
    print("repeat equal, bit for bit; all cases passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
