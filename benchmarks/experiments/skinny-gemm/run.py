"""Skinny split-K GEMM (libskinny_gemm.so) against cuBLASLt (cs1_gemm) at the 4B shapes on the GPU.

    python benchmarks/experiments/skinny-gemm/run.py --experiment DIR/libskinny_gemm.so [--output FILE.json]
    (run.sh does the build and this call on the H200; --quick: M = 128 only, one call, one trial, no checks: for ncu)

For each shape (N, K) and M: correctness first, on fresh random bf16 inputs (x ~ N(0, 1), w ~ N(0, 1/K), never
zeros) with padded strides (ldx = K + 8, ldy = N + 8) and y poisoned with NaN before every call:
  - against a float64 numpy reference: |y - ref| <= 2 ulp_bf16(|ref|) + 1e-3 * sqrt(K) * rms(x) * rms(w)
    (the final bf16 rounding, plus fp32 accumulation); the padding columns must keep their NaN;
  - a second eager call and two replays of a one-call CUDA graph: bit-identical to the first call (the tile
    counters must be back to zero after every launch);
  - against cuBLASLt on the same operands: max |difference| and the share of elements that differ (printed only).
Then timing: `--calls` calls back to back in one CUDA graph (cs1_graph_*), per-call time = replay time / calls
(host clock around launch + sync, median of `--trials`), the weights rotating over enough copies (>= 200 MB in all)
that the 50 MB L2 cannot hold them; x stays the same (L2-resident, as in a forward). TB/s = weight bytes / time.
Variants: "auto" (the configuration skinny_gemm picks) and, where N % 128 == 0 and M <= 128, "bn128" (config 5).
The decision rule (README.md, frozen before any run) reads the "auto" rows only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from functools import partial

import cffi
import numpy as np

from startlux_native import abi, bf16

SHAPES = [(2560, 4096, "out/o"), (2560, 9216, "down"), (12352, 2560, "gdn_in (reference)")]
MS = [1, 64, 128, 160, 192, 256]
DECISION_MS = [64, 128, 160, 192, 256]  # the Public231 prompt range
MARGIN = 0.97  # "faster" = at most 97 % of cuBLAS's time (graph timing noise is a few per cent)
CDEF = """
int skinny_gemm_workspace_bytes_ex(int64_t M, int64_t N, int64_t K, int config, int64_t grid, size_t *bytes);
int skinny_gemm_describe(int64_t M, int64_t N, int64_t K, int config, int64_t grid, int64_t out[6]);
int skinny_gemm_ex(const void *x, int64_t ldx, const void *w, void *y, int64_t ldy, int64_t M, int64_t N, int64_t K,
                   void *workspace, size_t workspace_bytes, void *stream, int config, int64_t grid);
"""


def rotating(weights: list, call):
    """A no-argument op that calls call(w) with the next weight copy each time (so the L2 cannot hold them)."""
    counter = itertools.count()
    return lambda: call(weights[next(counter) % len(weights)])


def variants(m: int, n: int) -> list[tuple[str, int]]:
    out = [("auto", -1)]
    if n % 128 == 0 and m <= 128:
        out.append(("bn128", 5))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", required=True, help="path of libskinny_gemm.so")
    p.add_argument("--library", default=None, help="libqwen3_5_cuda.so (default: $CS1_LIBRARY)")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--trials", type=int, default=9)
    p.add_argument("--quick", action="store_true", help="M = 128 only, one call, one trial, no checks (for ncu)")
    p.add_argument("--output", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.trials = 1, 1
    ms = [128] if args.quick else MS

    lib = abi.load(args.library)
    ffi = lib.ffi
    xffi = cffi.FFI()
    xffi.cdef(CDEF)
    xlib = xffi.dlopen(args.experiment)

    def xp(q):  # a cs1 device pointer / stream as a pointer of the experiment's ffi
        return xffi.cast("void *", int(ffi.cast("uintptr_t", q)))

    rng = np.random.default_rng(0)
    s_ = ffi.new("void **")
    lib.cs1_stream_create(s_)
    s = s_[0]
    dev = [ffi.new("int *") for _ in range(3)]
    total = ffi.new("size_t *")
    lib.cs1_device_info(0, dev[0], dev[1], dev[2], total)
    context = {"cc": f"{dev[0][0]}.{dev[1][0]}", "sms": dev[2][0], "build_info": lib.build_info(),
               "calls": args.calls, "trials": args.trials}
    print(f"device cc {context['cc']}, {context['sms']} SMs; {context['build_info']}", flush=True)

    def malloc(nbytes):
        q = ffi.new("void **")
        lib.cs1_malloc(q, max(int(nbytes), 1))
        return q[0]

    def up(dst, a):
        a = np.ascontiguousarray(a)
        lib.cs1_upload(dst, ffi.from_buffer(a), a.nbytes, s)

    def down(src, shape):
        a = np.empty(shape, np.uint16)
        lib.cs1_download(ffi.from_buffer(a), src, a.nbytes, s)
        return a

    def rb(shape, scale=1.0):
        return bf16.to_bits((scale * rng.standard_normal(shape)).astype(np.float32))

    hg = ffi.new("void **")
    lib.cs1_gemm_create(32 << 20, hg)
    gemm = hg[0]

    # one workspace for every call, zeroed once (the kernel leaves its counters at zero)
    ws_bytes = 0
    for n, k, _ in SHAPES:
        for m in ms:
            for _, cfg in variants(m, n):
                b = xffi.new("size_t *")
                assert xlib.skinny_gemm_workspace_bytes_ex(m, n, k, cfg, 0, b) == 0, (m, n, k, cfg)
                ws_bytes = max(ws_bytes, b[0])
    ws = malloc(ws_bytes)
    lib.cs1_memset_async(ws, 0, ws_bytes, s)
    context["workspace_bytes"] = ws_bytes

    def skinny(x, ldx, w, y, ldy, m, n, k, cfg):
        st = xlib.skinny_gemm_ex(xp(x), ldx, xp(w), xp(y), ldy, m, n, k, xp(ws), ws_bytes, xp(s), cfg, 0)
        if st != 0:
            raise RuntimeError(f"skinny_gemm_ex status {st} (M={m} N={n} K={k} config={cfg})")

    def cublas(x, ldx, w, y, ldy, m, n, k):
        lib.cs1_gemm(gemm, x, ldx, w, y, ldy, m, n, k, s)

    def skinny_w(x, ldx, y, ldy, m, n, k, cfg, w):  # the weights last, for rotating()
        skinny(x, ldx, w, y, ldy, m, n, k, cfg)

    def cublas_w(x, ldx, y, ldy, m, n, k, w):
        cublas(x, ldx, w, y, ldy, m, n, k)

    def graph_time(fn) -> float:
        fn()  # eager first: plans and smem attributes outside the capture
        lib.cs1_stream_sync(s)
        g = ffi.new("void **")
        lib.cs1_graph_begin(s)
        for _ in range(args.calls):
            fn()
        lib.cs1_graph_end(s, g)
        lib.cs1_graph_launch(g[0], s)  # warm replay
        lib.cs1_stream_sync(s)
        times = []
        for _ in range(args.trials):
            t0 = time.perf_counter()
            lib.cs1_graph_launch(g[0], s)
            lib.cs1_stream_sync(s)
            times.append((time.perf_counter() - t0) / args.calls * 1e6)
        lib.cs1_graph_destroy(g[0])
        return statistics.median(times)

    rows, failures = [], []
    for n, k, name in SHAPES:
        wbytes = n * k * 2
        w_host = rb((n, k), scale=k**-0.5)
        wd = [malloc(wbytes) for _ in range(max(2, -(-200_000_000 // wbytes)))]
        for q in wd:
            up(q, w_host)  # same bits in every copy: only the addresses rotate
        w64 = bf16.from_bits(w_host).astype(np.float64)
        ldx_c, ldy_c = k + 8, n + 8
        x = malloc(256 * ldx_c * 2)
        y, y2 = malloc(256 * ldy_c * 2), malloc(256 * ldy_c * 2)
        for m in ms:
            x_host = rb((m, ldx_c))
            up(x, x_host)
            x64 = bf16.from_bits(x_host[:, :k]).astype(np.float64)
            ref = None if args.quick else x64 @ w64.T
            for vname, cfg in variants(m, n):
                desc = xffi.new("int64_t[6]")
                xlib.skinny_gemm_describe(m, n, k, cfg, 0, desc)
                row = {"shape": name, "N": n, "K": k, "M": m, "variant": vname, "config": int(desc[0]),
                       "bm": int(desc[1]), "bn": int(desc[2]), "threads": int(desc[3]), "smem": int(desc[4]),
                       "grid": int(desc[5])}
                if not args.quick:
                    row.update(check(lib, s, skinny, cublas, down, x, ldx_c, wd[0], y, y2, ldy_c, m, n, k, cfg, ref,
                                     x64, w64))
                    if not row["ok"]:
                        failures.append(row)

                row["us"] = graph_time(rotating(wd, partial(skinny_w, x, k, y, n, m, n, k, cfg)))
                row["tbs"] = wbytes / (row["us"] * 1e-6) / 1e12
                if vname == "auto":
                    row["cublas_us"] = graph_time(rotating(wd, partial(cublas_w, x, k, y2, n, m, n, k)))
                    row["cublas_tbs"] = wbytes / (row["cublas_us"] * 1e-6) / 1e12
                rows.append(row)
                print_row(row)
        for q in wd + [x, y, y2]:
            lib.cs1_free(q)

    verdict = decide(rows)
    print("\nsummary (auto rows; us per call in a CUDA graph, weights from HBM)")
    print(f"{'shape':<20}{'M':>5}{'cuBLAS us':>11}{'skinny us':>11}{'ratio':>7}{'skinny TB/s':>12}{'cfg':>5}{'grid':>6}"
          f"{'check':>7}")
    for r in rows:
        if r["variant"] == "auto":
            print(f"{r['shape']:<20}{r['M']:>5}{r['cublas_us']:>11.2f}{r['us']:>11.2f}{r['us'] / r['cublas_us']:>7.3f}"
                  f"{r['tbs']:>12.2f}{r['config']:>5}{r['grid']:>6}{'ok' if r.get('ok', True) else 'FAIL':>7}")
    for shape, v in verdict.items():
        print(f"decision rule, {shape}: {v}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"context": context, "rows": rows, "verdict": verdict}, f, indent=2)
    if failures:
        print(f"{len(failures)} correctness failures", file=sys.stderr)
        return 1
    return 0


def check(lib, s, skinny, cublas, down, x, ldx, w, y, y2, ldy, m, n, k, cfg, ref, x64, w64) -> dict:
    """Correctness of one (shape, M, config) on padded strides; returns the fields for the row."""
    ffi = lib.ffi
    nbytes = m * ldy * 2

    def fresh_run(fn, out):
        lib.cs1_memset_async(out, 0xFF, nbytes, s)  # NaN
        fn()
        lib.cs1_stream_sync(s)
        return down(out, (m, ldy))

    a = fresh_run(lambda: skinny(x, ldx, w, y, ldy, m, n, k, cfg), y)
    b = fresh_run(lambda: skinny(x, ldx, w, y, ldy, m, n, k, cfg), y)
    g = ffi.new("void **")
    lib.cs1_graph_begin(s)
    skinny(x, ldx, w, y, ldy, m, n, k, cfg)
    lib.cs1_graph_end(s, g)
    replays = [fresh_run(lambda: lib.cs1_graph_launch(g[0], s), y) for _ in range(2)]
    lib.cs1_graph_destroy(g[0])
    c = fresh_run(lambda: cublas(x, ldx, w, y2, ldy, m, n, k), y2)

    pad_ok = bool(np.all(a[:, n:] == 0xFFFF))
    ya = bf16.from_bits(a[:, :n]).astype(np.float64)
    yc = bf16.from_bits(c[:, :n]).astype(np.float64)
    finite = bool(np.all(np.isfinite(ya)))
    scale = np.sqrt(np.mean(x64**2)) * np.sqrt(np.mean(w64**2))
    tol = 2 * bf16.ulp(ref).astype(np.float64) + 1e-3 * np.sqrt(k) * scale
    err = np.abs(ya - ref)
    ratio = float(np.nanmax(err / tol)) if finite else float("inf")
    worst = tuple(int(i) for i in np.unravel_index(np.nanargmax(err / tol), err.shape)) if finite else None
    identical = bool(np.array_equal(a, b)) and all(np.array_equal(a, r) for r in replays)
    out = {"max_abs_err": float(np.nanmax(err)), "max_err_over_tol": ratio, "worst_index": worst,
           "cublas_max_abs_err": float(np.max(np.abs(yc - ref))),
           "max_abs_diff_vs_cublas": float(np.nanmax(np.abs(ya - yc))),
           "share_differing_vs_cublas": float(np.mean(a[:, :n] != c[:, :n])),
           "bit_identical_runs_and_replays": identical, "padding_untouched": pad_ok, "finite": finite}
    out["ok"] = finite and pad_ok and identical and ratio <= 1.0
    return out


def print_row(r: dict) -> None:
    head = f"{r['shape']:<20} M={r['M']:<4} {r['variant']:<6} cfg {r['config']} grid {r['grid']:<4}"
    chk = ""
    if "ok" in r:
        chk = (f" | {'ok' if r['ok'] else 'FAIL'}: max|err| {r['max_abs_err']:.3e} ({r['max_err_over_tol']:.3f} tol "
               f"at {r['worst_index']}), cuBLAS max|err| {r['cublas_max_abs_err']:.3e}, vs cuBLAS max "
               f"{r['max_abs_diff_vs_cublas']:.3e} ({100 * r['share_differing_vs_cublas']:.1f} % differ), "
               f"identical {r['bit_identical_runs_and_replays']}, pad {r['padding_untouched']}")
    base = f" cuBLAS {r['cublas_us']:.2f} us" if "cublas_us" in r else ""
    print(f"{head} {r['us']:8.2f} us {r['tbs']:5.2f} TB/s{base}{chk}", flush=True)


def decide(rows: list[dict]) -> dict:
    """The frozen rule (README.md): per shape, adopt the auto configuration only if it is at most MARGIN x cuBLAS's
    time at every M of DECISION_MS and every checked row passed (bit-identical included)."""
    verdict = {}
    for _, _, shape in SHAPES:
        auto = {r["M"]: r for r in rows if r["shape"] == shape and r["variant"] == "auto"}
        if not all(m in auto for m in DECISION_MS):
            verdict[shape] = "not decided (some M not run)"
            continue
        slow = [m for m in DECISION_MS if auto[m]["us"] > MARGIN * auto[m]["cublas_us"]]
        bad = [m for m in auto if not auto[m].get("ok", False)]
        if bad:
            verdict[shape] = f"REJECT: correctness failed at M = {bad}"
        elif slow:
            verdict[shape] = f"REJECT: not faster than {MARGIN} x cuBLAS at M = {slow}"
        else:
            verdict[shape] = "ADOPT candidate (faster at every M of 64-256, checks passed)"
    return verdict


if __name__ == "__main__":
    sys.exit(main())
