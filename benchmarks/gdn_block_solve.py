"""The gated delta rule of one short prompt as a block-triangular solve over its chunks (lever 68's math, numpy).

    python -m benchmarks.gdn_block_solve        (checks the form against the token-by-token recurrence, float64)

Why: at <= 256 rows (<= 4 chunks of 64) the walk carries a 128 x 128 state from chunk to chunk: per chunk W S0,
Q S0 and the state update, each 64 x 128 x d_v, in series. With the prompt's state zero at its start the state can
be eliminated. With chunk i's Γ^i (cumulative log decay inside the chunk), γ_i = Γ^i at its last row, U_i, W_i and
A_i = (Q_i K_i^T ⊙ D_i) as today (reference.gated_delta_rule_chunked), and λ_{j,i} = exp(γ_{j+1} + ... + γ_{i-1}):

    S_{i-1} = sum_{j<i} λ_{j,i} Kt_j^T Δ_j,          Kt_j = diag(e^{γ_j - Γ^j}) K_j
    Δ_i = U_i - sum_{j<i} M_ij Δ_j,                  M_ij = λ_{j,i} W_i Kt_j^T                 (C x C)
    O_i = A_i Δ_i + sum_{j<i} N_ij Δ_j,              N_ij = λ_{j,i} diag(e^{Γ^i}) Q_i Kt_j^T   (C x C)

so the serial part is one C x C x d_v product per earlier chunk, and M_ij, N_ij (C x d_k x C each, independent of
d_v) can be formed for all pairs at once. Entry (r, s) of N_ij is exp(Γ^i_r + γ_j + ... + γ_{i-1} - Γ^j_s) q_r . k_s:
one exponent per entry (no e^{-Γ} factor on its own, which could overflow under strong decay); M_ij likewise.
This module is the float64 statement of that form. The kernels that implemented it (prep's pair matrices and the
solve kernel; branch exp/gdn-solve2, 9238ba3) ran on the H200 in session 23 and were refused: prep's pair matrices
cost more than the walk they replaced (benchmarks/LEVERS.md, lever 68). Nothing in the server uses this module.
"""

from __future__ import annotations

import sys

import numpy as np

from startlux_native.reference import _prepare_qk, gated_delta_rule_recurrent


def gated_delta_rule_block_solve(q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray, *,
                                 chunk_size: int = 64, scale: float | None = None) -> np.ndarray:
    """o [T, Hv, Dv] of one prompt from a zero state (q, k [T, Hk, Dk]; v [T, Hv, Dv]; g, beta [T, Hv]), float64,
    q and k L2-normalised and q scaled as in reference.gated_delta_rule_recurrent."""
    q, k = _prepare_qk(q.astype(np.float64), k.astype(np.float64), v, True, scale)
    v, g, beta = v.astype(np.float64), g.astype(np.float64), beta.astype(np.float64)
    t, hv, dv = v.shape
    c = chunk_size
    n = -(-t // c)
    pad = n * c - t

    def chunks(x):  # [T, Hv, ...] -> [Hv, n, C, ...], padding rows zero (k = v = beta = g = 0 there)
        x = np.concatenate([x, np.zeros((pad, *x.shape[1:]))], axis=0)
        return np.moveaxis(x.reshape(n, c, *x.shape[1:]), 2, 0)

    qc, kc, vc, gc, bc = chunks(q), chunks(k), chunks(v), chunks(g), chunks(beta)
    gam = np.cumsum(gc, axis=-1)  # Γ^i [Hv, n, C]
    last = gam[:, :, -1]  # γ_i [Hv, n]
    lower = np.tril(np.ones((c, c), dtype=bool))
    strict = np.tril(np.ones((c, c), dtype=bool), -1)
    u, w, a = [], [], []
    for i in range(n):
        diff = np.where(lower, gam[:, i, :, None] - gam[:, i, None, :], -np.inf)
        dmat = np.exp(diff)
        kk = kc[:, i] @ kc[:, i].transpose(0, 2, 1)
        lmat = np.where(strict, bc[:, i, :, None] * kk * dmat, 0.0)
        tri = np.eye(c) + lmat
        u.append(np.linalg.solve(tri, bc[:, i, :, None] * vc[:, i]))
        w.append(np.linalg.solve(tri, (bc[:, i] * np.exp(gam[:, i]))[:, :, None] * kc[:, i]))
        a.append((qc[:, i] @ kc[:, i].transpose(0, 2, 1)) * dmat)

    def pair_exponent(i: int, j: int, rows: np.ndarray) -> np.ndarray:
        """[Hv, C, C]: rows[r] + γ_j + ... + γ_{i-1} - Γ^j_s, the exponent of entry (r, s) of pair (i, j)."""
        carried = last[:, j:i].sum(axis=1)  # γ_j (Kt_j's own factor) + λ_{j,i}'s γ_{j+1} .. γ_{i-1}
        return rows[:, :, None] + carried[:, None, None] - gam[:, j, None, :]

    delta, out = [], np.empty((hv, n, c, dv))
    for i in range(n):
        d_i = u[i].copy()
        o_i = np.zeros((hv, c, dv))
        for j in range(i):
            kt = kc[:, j].transpose(0, 2, 1)
            m_ij = (w[i] @ kt) * np.exp(pair_exponent(i, j, np.zeros((hv, c))))  # W_i carries its own e^{Γ^i}
            n_ij = (qc[:, i] @ kt) * np.exp(pair_exponent(i, j, gam[:, i]))
            d_i -= m_ij @ delta[j]
            o_i += n_ij @ delta[j]
        delta.append(d_i)
        out[:, i] = o_i + a[i] @ d_i
    return np.moveaxis(out, 0, 2).reshape(n * c, hv, dv)[:t]


def main() -> int:
    rng = np.random.default_rng(7)
    worst = 0.0
    for t in (1, 63, 64, 65, 129, 160, 200, 256):
        for decay in (0.05, 3.0):  # mild and strong per-token decay (g = -decay * U(0, 1))
            hk, hv, d = 2, 4, 32
            q, k = rng.standard_normal((t, hk, d)), rng.standard_normal((t, hk, d))
            v = rng.standard_normal((t, hv, d))
            g = -decay * rng.uniform(0, 1, (t, hv))
            beta = rng.uniform(0.05, 1.0, (t, hv))
            ref, _ = gated_delta_rule_recurrent(q, k, v, g, beta)
            got = gated_delta_rule_block_solve(q, k, v, g, beta)
            err = float(np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30))
            worst = max(worst, err)
            print(f"T={t:4d} decay={decay:4.2f}: max |block - recurrent| / max |recurrent| = {err:.2e}")
    ok = worst < 1e-10
    print(f"worst {worst:.2e} ({'ok' if ok else 'FAILED'}: float64 limit 1e-10)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
