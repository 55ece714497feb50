"""How much the GDN prefill's tf32 operand rounding adds to its output error, on the CPU, before any kernel exists.

    python -m benchmarks.gdn_rounding [--cases 700w,700,2048,4097,4097w] [--heads 4]

A float64 model of the chunked gated delta rule (the steps of tests/gpu/test_gdn.py's chunked_mirror: prep's U and
W, the walk's Delta = U - W S and state update, O = diag(qs e^Gam) Q S0 + P Delta), with the stored quantities in
fp32 as the kernels store them and each tensor-core product's operands either exact (the 2- and 3-term tf32 splits
keep ~fp32: modelled exact) or rounded once to tf32 (nearest, ties away, as tf32_rna_bits). O is compared before
its bf16 store against the token-by-token float64 recurrence of test_gdn, on test_gdn's own random inputs
(prefill_inputs: bf16 q, k, v, realistic or weak decay), as max and mean |O - ref| / max |ref|. For scale: the bf16
store alone adds up to 2^-9 of |O| (test_gdn's measured ~2-3.5e-3 on the GPU).

Forms (which products take 1-term operands):
  exact     none (main before lever 69)
  o-1term   Q S0 and P Delta, which feed O only (lever 69, main since session 24)
  all-1term also the state's W S and K^T diag(f) Delta (lever 70)
  o-bf16    all-1term, but O's fp32 operands (S0, P, Delta) rounded to bf16 (nearest even), as bf16 MMAs would take
            them (the reference arm's flash-linear-attention forms O so)
  inv-tf32  all-1term, and prep's U and W as one tensor-core product each: T = (I + L)^-1 (fp32, modelled exact),
            then U = T (beta V), W = T (cw K) with T and the right-hand sides rounded to tf32 (a design for prep's
            solve on tensor cores, not a kernel)
  blk-tf32  all-1term, and prep's substitution blocked by 16 rows: the diagonal blocks solved in fp32 (exact here),
            each off-diagonal block's product L_bc X_c with L_bc and X_c rounded to tf32 (the other design)
  inv16     inv-tf32 with T itself built from 16 x 16 blocks: the diagonal blocks' inverses in fp32 (exact here), each
            off-diagonal block T_bc = -T_bb sum_{c<=d<b} L_bd T_dc from tf32 operands (products fp32, stored fp32)
  blk16     blk-tf32 with each diagonal block applied as a product: X_b = T_bb C_b, T_bb = (I + L_bb)^-1 (fp32, exact
            here) and C_b = R_b - sum_{d<b} L_bd X_d (fp32) both rounded to tf32 (lever 88's kernel)
A case is T[w]: T rows, w for weak decay (g ~ -1e-5..-1e-3, the state barely forgets). --stored compares O after
its bf16 store instead (what test_gdn measures on the GPU, limit 2e-2). --key-corr RHO gives every key of a key head
a shared direction (cosine ~RHO between two keys, bf16-rounded), so L's entries grow toward beta: the harder case
for a solve's or an inverse's rounding than test_gdn's near-orthogonal random keys.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

from startlux_native import bf16

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("test_gdn", ROOT / "tests" / "gpu" / "test_gdn.py")
tg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tg)
C, D = tg.C, tg.D


def tf32(x):
    """x (as fp32) rounded to tf32: nearest, ties away from zero, as the kernels' tf32_rna_bits (finite x)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32).astype(np.float64)


def f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def bf16r(x):
    """x (as fp32) rounded to bf16, nearest even, as a float64."""
    return bf16.round_(np.asarray(x, dtype=np.float32)).astype(np.float64)


# form: (rounding of O's fp32 operands, rounding of the state products' fp32 operands, prep's solve)
FORMS = {"exact": (f32, f32, "subst"), "o-1term": (tf32, f32, "subst"), "all-1term": (tf32, tf32, "subst"),
         "o-bf16": (bf16r, tf32, "subst"), "inv-tf32": (tf32, tf32, "inv"), "blk-tf32": (tf32, tf32, "blk"),
         "inv16": (tf32, tf32, "inv16"), "blk16": (tf32, tf32, "blk16")}


def inverse16(big_l):
    """(I + L)^-1 per head from 16 x 16 blocks: diagonal blocks inverted exactly, the rest from tf32 operands."""
    blk, n = 16, C // 16
    t = np.zeros_like(big_l)
    diag = [np.linalg.inv(np.eye(blk)[None] + big_l[:, b * blk:(b + 1) * blk, b * blk:(b + 1) * blk])
            for b in range(n)]
    for b in range(n):
        t[:, b * blk:(b + 1) * blk, b * blk:(b + 1) * blk] = f32(diag[b])
    for b in range(1, n):
        rb = slice(b * blk, (b + 1) * blk)
        for c in range(b - 1, -1, -1):
            acc = np.zeros((big_l.shape[0], blk, blk))
            for d in range(c, b):
                rd = slice(d * blk, (d + 1) * blk)
                acc += tf32(big_l[:, rb, rd]) @ tf32(t[:, rd, c * blk:(c + 1) * blk])
            t[:, rb, c * blk:(c + 1) * blk] = f32(-(tf32(f32(diag[b])) @ tf32(f32(acc))))
    return t


def solve(big_l, rhs, how):
    """x = (I + L)^-1 rhs per head, L strictly lower [H, C, C], rhs [H, C, D]; stored as fp32 (prep's U / W)."""
    if how in ("inv", "inv16"):
        inv = np.linalg.inv(np.eye(C)[None] + big_l) if how == "inv" else inverse16(big_l)
        return f32(tf32(inv) @ tf32(rhs))
    x = np.zeros_like(rhs)
    if how == "subst":  # prep's forward substitution (fp32 on the GPU; its own rounding is not what is asked here)
        for i in range(C):
            x[:, i] = rhs[:, i] - np.einsum("hj,hjd->hd", big_l[:, i, :i], x[:, :i])
        return f32(x)
    blk = 16
    for b0 in range(0, C, blk):
        rows = slice(b0, b0 + blk)
        r = rhs[:, rows] - (tf32(big_l[:, rows, :b0]) @ tf32(f32(x[:, :b0])) if b0 else 0.0)
        if how == "blk16":
            t_bb = np.linalg.inv(np.eye(blk)[None] + big_l[:, rows, rows])
            x[:, rows] = f32(tf32(f32(t_bb)) @ tf32(f32(r)))
        else:
            x[:, rows] = np.linalg.solve(np.eye(blk)[None] + big_l[:, rows, rows], r)
    return f32(x)


def chunked(q, k, v, g, beta, scale, ro, rs, how="subst"):
    """One prompt, every head: O before its bf16 store [T, H, 128]; ro / rs round O's / the state's operands."""
    t, hv = v.shape[0], v.shape[1]
    r = hv // k.shape[1]
    lower = np.tril(np.ones((C, C), dtype=bool), -1)
    incl = np.tril(np.ones((C, C), dtype=bool))
    state = np.zeros((hv, D, D))
    o = np.zeros((t, hv, D))
    for row0 in range(0, t, C):
        n = min(C, t - row0)
        rows = slice(row0, row0 + n)

        def pad(x, n=n):
            out = np.zeros((C,) + x.shape[1:])
            out[:n] = x
            return np.moveaxis(out, 1, 0)

        kraw, qraw = np.repeat(pad(k[rows]), r, axis=0), np.repeat(pad(q[rows]), r, axis=0)
        vv, gg, bb = pad(v[rows]), pad(g[rows]), pad(beta[rows])
        gam = np.cumsum(gg, axis=1)
        rk = 1.0 / np.sqrt(np.sum(kraw * kraw, axis=2) + tg.L2_EPS)
        gram = (kraw @ np.swapaxes(kraw, 1, 2)) * rk[:, :, None] * rk[:, None, :]
        decay = np.exp(np.where(lower, gam[:, :, None] - gam[:, None, :], 0.0))
        big_l = np.where(lower, bb[:, :, None] * gram * decay, 0.0)
        rhs_u, rhs_w = bb[:, :, None] * vv, (bb * np.exp(gam) * rk)[:, :, None] * kraw
        u, w = solve(big_l, rhs_u, how), solve(big_l, rhs_w, how)
        s0 = f32(state)
        delta = f32(f32(u) - rs(w) @ rs(s0))  # K^T and Q enter exactly (bf16 rows)
        gam_last = gam[:, C - 1]
        f = rk * np.exp(gam_last[:, None] - gam)
        state = f32(np.exp(gam_last)[:, None, None] * s0 + np.swapaxes(kraw, 1, 2) @ rs(f32(f[:, :, None] * delta)))
        qs = scale / np.sqrt(np.sum(qraw * qraw, axis=2) + tg.L2_EPS)
        diff = np.where(incl, gam[:, :, None] - gam[:, None, :], 0.0)
        p = np.where(incl, (qraw @ np.swapaxes(kraw, 1, 2)) * qs[:, :, None] * rk[:, None, :] * np.exp(diff), 0.0)
        out = (qs * np.exp(gam))[:, :, None] * (qraw @ ro(s0)) + ro(f32(p)) @ ro(delta)
        o[rows] = np.moveaxis(out, 0, 1)[:n]
    return o


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="700w,700,2048,4097,4097w", help="T[w] list (default: %(default)s)")
    ap.add_argument("--heads", type=int, default=4, help="value heads (key heads: half; default %(default)s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--stored", action="store_true", help="O after its bf16 store (default: before)")
    ap.add_argument("--key-corr", type=float, default=0.0, metavar="RHO",
                    help="cosine between keys from a shared direction per key head (default %(default)s)")
    args = ap.parse_args(argv)
    h, hk = args.heads, max(1, args.heads // 2)
    when = "after" if args.stored else "before"
    corr = f", key cosine ~{args.key_corr}" if args.key_corr else ""
    print(f"|O - ref| / max|ref| {when} the bf16 store, {h} value heads, seed {args.seed}{corr}: max (mean)")
    print(f"{'case':>7}  " + "  ".join(f"{name:>20}" for name in FORMS), flush=True)
    for case in args.cases.split(","):
        weak = case.endswith("w")
        t = int(case.rstrip("w"))
        rng = np.random.default_rng(args.seed)
        _, _, g, beta, q, k, v = tg.prefill_inputs(rng, t, h, hk, weak=weak)
        if args.key_corr:
            shared = rng.standard_normal((1, hk, D))
            k = bf16r(np.sqrt(args.key_corr) * shared + np.sqrt(1.0 - args.key_corr) * k)
        g64, b64 = g.astype(np.float64), beta.astype(np.float64)
        ref = tg.recurrence(q, k, v, g64, b64, D**-0.5)
        top = np.abs(ref).max()
        cells = []
        for ro, rs, how in FORMS.values():
            got = chunked(q, k, v, g64, b64, D**-0.5, ro, rs, how)
            err = np.abs((bf16r(got) if args.stored else got) - ref) / top
            cells.append(f"{err.max():.2e} ({err.mean():.1e})")
        print(f"{case:>7}  " + "  ".join(f"{c:>20}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
