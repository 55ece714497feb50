"""CudaBackend's wiring without a GPU: a numpy stand-in for libqwen3_5_cuda.so implements every op it calls with the
semantics written in native/cs1.h (pointers are host memory), so the weight fusion, buffer offsets, row strides,
packing (cu_seqlens, positions, last rows) and the layer sequence are checked against the numpy ReferenceBackend.

Criterion as on the GPU: the letter probabilities (T = 1) differ by <= 0.02 and the top letter agrees (unless the
reference's top two are within 0.01: a near-tie that tolerance cannot resolve). The projection matrices of the tiny
random checkpoint are scaled by 1/4 (exact in bf16): at tiny.py's default scale the random network is chaotic under
bf16 rounding (transformers in bf16 itself differs from the fp32 reference by 0.07 in probability), which would
hide wiring errors behind rounding noise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from startlux_native import abi, bf16, cuda_backend
from startlux_native.checkpoint import load_checkpoint
from startlux_native.cuda_backend import CudaBackend
from startlux_native.reference import ReferenceBackend, attention, gated_delta_rule_chunked
from startlux_native.tiny import make_tiny_checkpoint, scale_projection_matrices

TINY = dict(hidden_size=128, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2, head_dim=256,
            intermediate_size=256, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
            linear_value_head_dim=128, vocab_size=4096)
LENGTHS = [1, 5, 63, 64, 65, 130]
NEAR_TIE = 0.01


def rb(x: np.ndarray) -> np.ndarray:
    """round to bf16 values (float32)"""
    return bf16.round_(np.asarray(x, dtype=np.float32))


def silu(x):
    return x / (1.0 + np.exp(-x))


class FakeLibrary(abi.Library):
    """The ABI in numpy on host memory. Ops follow cs1.h's rounding points; nothing can fail."""

    def __init__(self):  # no dlopen: everything below is plain Python
        import cffi

        self.path = "numpy-fake"
        self.ffi = cffi.FFI()
        self.raw = self
        self._keep: dict[int, object] = {}
        self._int_functions = set()
        self._wrappers = {}
        self.split_calls = 0  # cs1_gemm_split_f32 calls: the rows alone (<= 256 padded rows) take the split path
        self.prep_calls = 0  # cs1_attn_prep and cs1_attn_prep_sigmoid_gate calls
        self.sigmoid_gated_calls = 0  # cs1_attention_sigmoid_gated calls
        self.gather_calls = 0  # cs1_gather_rows calls
        self.rows_attention_calls = 0  # cs1_attention_gated_rows calls
        self.prefill_norm_calls = 0  # cs1_gdn_prefill_norm calls
        self.pins: dict[tuple[int, int, int], tuple[int, int]] = {}  # cs1_gemm_pin: (M, N, K) -> (query_rows, rank)
        self.gemm_shapes: set[tuple[int, int, int]] = set()  # (M, N, K) of every cs1_gemm call
        self.embed_rows: list[int] = []  # T of every cs1_embed call: the padded length of each forward
        self._sigmoid_gate = False

    def build_info(self) -> str:
        return "numpy fake"

    def error_string(self, status: int) -> str:
        return f"fake status {status}"

    # ---- memory helpers
    def _addr(self, p) -> int:
        return int(self.ffi.cast("uintptr_t", p))

    def _new(self, nbytes):
        a = self.ffi.new("char[]", max(int(nbytes), 1))
        self._keep[self._addr(a)] = a
        return self.ffi.cast("void *", a)

    def view(self, p, dtype, count):
        dtype = np.dtype(dtype)
        return np.frombuffer(self.ffi.buffer(self.ffi.cast("char *", p), int(count) * dtype.itemsize), dtype=dtype)

    def rows(self, p, dtype, n_rows, cols, ld):
        """[n_rows, cols] strided view (rows of ld elements)."""
        v = self.view(p, dtype, (n_rows - 1) * ld + cols)
        return np.lib.stride_tricks.as_strided(v, shape=(n_rows, cols), strides=(ld * v.itemsize, v.itemsize))

    def bf(self, p, n_rows, cols, ld=None):
        return bf16.from_bits(self.rows(p, np.uint16, n_rows, cols, ld or cols)).astype(np.float32)

    def put(self, p, values, n_rows, cols, ld=None):
        self.rows(p, np.uint16, n_rows, cols, ld or cols)[...] = bf16.to_bits(
            np.asarray(values, np.float32).reshape(n_rows, cols))

    # ---- runtime
    def cs1_set_device(self, d):
        return 0

    def cs1_stream_create(self, out):
        out[0] = self.ffi.cast("void *", 1)
        return 0

    def cs1_stream_sync(self, s):
        return 0

    def cs1_stream_destroy(self, s):
        return 0

    def cs1_gemm_create(self, ws, out):
        out[0] = self.ffi.cast("void *", 2)
        return 0

    def cs1_gemm_destroy(self, g):
        return 0

    def cs1_gemm_blas_version(self, out):
        out[0] = 1  # no shipped pin table matches this key: the default plans ("none: ..." in describe())
        return 0

    def cs1_gemm_pin(self, g, M, N, K, query_rows, rank):
        self.pins[(M, N, K)] = (query_rows, rank)
        return 0

    def cs1_malloc(self, out, nbytes):
        out[0] = self._new(nbytes)
        return 0

    cs1_host_alloc = cs1_malloc

    def cs1_free(self, p):
        self._keep.pop(self._addr(p), None)
        return 0

    cs1_host_free = cs1_free

    def _copy(self, dst, src, nbytes, s=None):
        self.ffi.memmove(self.ffi.cast("char *", dst), self.ffi.cast("char *", src), nbytes)
        return 0

    cs1_upload = cs1_upload_async = cs1_download = cs1_download_async = cs1_copy_dd = _copy

    def cs1_memset_async(self, p, value, nbytes, s):
        self.view(p, np.uint8, nbytes)[:] = value & 0xFF
        return 0

    def cs1_device_info(self, d, a, b, c, t):
        a[0], b[0], c[0], t[0] = 0, 0, 0, 0
        return 0

    def cs1_gdn_workspace_bytes(self, T, n, H, out):
        out[0] = 256
        return 0

    # ---- ops
    def cs1_embed(self, ids, table, out, T, D, vocab, s):
        self.embed_rows.append(T)
        idx = self.view(ids, np.int32, T)
        self.rows(out, np.uint16, T, D, D)[...] = self.rows(table, np.uint16, vocab, D, D)[idx]
        return 0

    @staticmethod
    def _norm(x, w, eps):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + w)

    def cs1_rms_norm(self, x, w, out, rows, D, eps, s):
        self.put(out, self._norm(self.bf(x, rows, D), self.bf(w, 1, D)[0], eps), rows, D)
        return 0

    def cs1_add_rms_norm(self, res, delta, w, out, rows, D, eps, s):
        r = rb(self.bf(res, rows, D) + self.bf(delta, rows, D))
        self.put(res, r, rows, D)
        self.put(out, self._norm(r, self.bf(w, 1, D)[0], eps), rows, D)
        return 0

    def cs1_gemm(self, g, x, ldx, w, y, ldy, M, N, K, s):
        self.gemm_shapes.add((M, N, K))
        # float64 products: a row's result does not depend on M (numpy's float32 blocking would)
        self.put(y, self.bf(x, M, K, ldx).astype(np.float64) @ self.bf(w, N, K).T.astype(np.float64), M, N, ldy)
        return 0

    def cs1_gemm_split_f32(self, g, x, ldx, w, partials, M, N, K, splits, s):
        # batch i: K columns [i k, (i + 1) k) of x and w, its float32 partial at partials + i * M * N
        self.split_calls += 1
        k = K // splits
        xs, ws = self.bf(x, M, K, ldx).astype(np.float64), self.bf(w, N, K).astype(np.float64)
        out = self.view(partials, np.float32, splits * M * N).reshape(splits, M, N)
        for i in range(splits):
            out[i] = xs[:, i * k:(i + 1) * k] @ ws[:, i * k:(i + 1) * k].T
        return 0

    def cs1_add_partials_rms_norm(self, res, partials, splits, stride, w, out, rows, D, eps, s):
        p = self.view(partials, np.float32, (splits - 1) * stride + rows * D)
        total = p[:rows * D].copy()
        for i in range(1, splits):  # float32, in split order
            total = total + p[i * stride:i * stride + rows * D]
        r = rb(self.bf(res, rows, D) + rb(total).reshape(rows, D))
        self.put(res, r, rows, D)
        self.put(out, self._norm(r, self.bf(w, 1, D)[0], eps), rows, D)
        return 0

    def cs1_gdn_conv(self, qkv, ld, w, positions, out, T, C, s):
        x = self.bf(qkv, T, C, ld)
        wt = self.bf(w, C, 4)
        pos = self.view(positions, np.int32, T)
        acc = np.zeros((T, C), np.float32)
        for j in range(4):
            back = 3 - j
            src = np.zeros((T, C), np.float32)
            src[back:] = x[:T - back] if back else x
            src[pos < back] = 0.0  # history never crosses a prompt start
            acc += wt[:, j][None, :] * src
        self.put(out, silu(acc), T, C)
        return 0

    def cs1_gdn_gates(self, ba, ld, a_log, dt_bias, beta, g, T, H, s):
        v = self.bf(ba, T, 2 * H, ld)
        b, a = v[:, :H], v[:, H:]
        al = self.view(a_log, np.float32, H)
        dt = self.view(dt_bias, np.float32, H)
        self.view(beta, np.float32, T * H)[:] = rb(1.0 / (1.0 + np.exp(-b))).reshape(-1)
        u = a + dt
        sp = np.where(u > 20, u, np.log1p(np.exp(np.minimum(u, 20))))
        self.view(g, np.float32, T * H)[:] = (-np.exp(al) * sp).astype(np.float32).reshape(-1)
        return 0

    def cs1_gdn_conv_gates(self, qkv, ld, w, positions, out, T, C, ba, a_log, dt_bias, beta, g, H, s):
        self.cs1_gdn_conv(qkv, ld, w, positions, out, T, C, s)
        return self.cs1_gdn_gates(ba, ld, a_log, dt_bias, beta, g, T, H, s)

    def cs1_gdn_prefill(self, qkv, ld, g, beta, cu, n, o, ws, wsb, T, H, HK, scale, s):
        cuv = self.view(cu, np.int32, n + 1)
        x = self.bf(qkv, T, ld, ld)
        gv = self.view(g, np.float32, T * H).reshape(T, H)
        bv = self.view(beta, np.float32, T * H).reshape(T, H)
        out = np.zeros((T, H * 128), np.float32)
        for i in range(n):
            a, e = int(cuv[i]), int(cuv[i + 1])
            if e <= a:
                continue
            q = x[a:e, :HK * 128].reshape(-1, HK, 128)
            k = x[a:e, HK * 128:2 * HK * 128].reshape(-1, HK, 128)
            v = x[a:e, 2 * HK * 128:2 * HK * 128 + H * 128].reshape(-1, H, 128)
            res, _ = gated_delta_rule_chunked(q, k, v, gv[a:e], bv[a:e], scale=scale)
            out[a:e] = res.reshape(e - a, H * 128)
        self.put(o, out, T, H * 128)
        return 0

    def cs1_gdn_prefill_norm(self, qkv, ld, g, beta, cu, n, z, ldz, w, rw, eps, o, out, ws, wsb, T, H, HK, scale, s):
        # cs1.h: the prefill, then the gated RMSNorm (D = 128) into out, the same bytes on every prompt row
        self.prefill_norm_calls += 1
        assert ldz % 8 == 0 and all(self._addr(p) % 16 == 0 for p in (z, w, out)), "cs1.h's alignment"
        self.cs1_gdn_prefill(qkv, ld, g, beta, cu, n, o, ws, wsb, T, H, HK, scale, s)
        return self.cs1_gated_rms_norm(o, z, ldz, w, rw, out, T, H, 128, eps, s)

    def cs1_gated_rms_norm(self, x, z, ldz, w, rw, out, T, H, D, eps, s):
        xv = self.bf(x, T * H, D)
        zv = self.bf(z, T, H * D, ldz).reshape(T * H, D)
        wv = self.view(w, np.float32, D)
        n = rb(xv / np.sqrt(np.mean(xv * xv, axis=-1, keepdims=True) + eps)) * wv
        if rw:
            n = rb(n)
        self.put(out, n * silu(zv), T * H, D)
        return 0

    def cs1_attn_prep(self, qkv, ld, qw, kw, positions, inv_freq, q, gate, k, T, Hq, Hk, Dh, rot, eps, s):
        x = self.bf(qkv, T, (2 * Hq + Hk) * Dh, ld)
        qg = x[:, :2 * Hq * Dh].reshape(T, Hq, 2 * Dh)
        kk = x[:, 2 * Hq * Dh:].reshape(T, Hk, Dh)
        half = rot // 2
        phi = self.view(positions, np.int32, T).astype(np.float32)[:, None] * self.view(inv_freq, np.float32, half)
        c, sn = rb(np.cos(phi))[:, None, :], rb(np.sin(phi))[:, None, :]

        def prep(v, w):
            nrm = rb(self._norm(v, self.bf(w, 1, Dh)[0], eps))
            x1, x2 = nrm[..., :half].copy(), nrm[..., half:rot].copy()
            nrm[..., :half] = rb(rb(x1 * c) + rb(-x2 * sn))
            nrm[..., half:rot] = rb(rb(x2 * c) + rb(x1 * sn))
            return nrm

        self.put(q, prep(qg[:, :, :Dh], qw), T, Hq * Dh)
        self.put(gate, rb(1.0 / (1.0 + np.exp(-qg[:, :, Dh:]))) if self._sigmoid_gate else qg[:, :, Dh:], T, Hq * Dh)
        self.put(k, prep(kk, kw), T, Hk * Dh)
        self.prep_calls += 1
        return 0

    def cs1_attn_prep_sigmoid_gate(self, *args):
        self._sigmoid_gate = True
        try:
            return self.cs1_attn_prep(*args)
        finally:
            self._sigmoid_gate = False

    def _attention(self, q, k, v, ldv, gate, cu, n, out, T, Hq, Hk, Dh, scale, s, *, causal, gate_is_sigmoid=False):
        cuv = self.view(cu, np.int32, n + 1)
        qv = self.bf(q, T, Hq * Dh).reshape(T, Hq, Dh)
        kv = self.bf(k, T, Hk * Dh).reshape(T, Hk, Dh)
        vv = self.bf(v, T, Hk * Dh, ldv).reshape(T, Hk, Dh)
        gv = self.bf(gate, T, Hq * Dh)
        o = np.zeros((T, Hq * Dh), np.float32)
        for i in range(n):
            a, e = int(cuv[i]), int(cuv[i + 1])
            att = attention(qv[a:e], kv[a:e], vv[a:e], causal=causal, scale=scale).reshape(e - a, Hq * Dh)
            o[a:e] = rb(att) * (gv[a:e] if gate_is_sigmoid else rb(1.0 / (1.0 + np.exp(-gv[a:e]))))
        self.put(out, o, T, Hq * Dh)
        return 0

    def cs1_attention_gated(self, *args):
        return self._attention(*args, causal=True)

    def cs1_attention_gated_bidirectional(self, *args):
        return self._attention(*args, causal=False)

    def cs1_attention_sigmoid_gated(self, q, k, v, ldv, gate, cu, n, out, T, Hq, Hk, Dh, scale, causal, tile_rows, s):
        assert tile_rows == 0, "the forward leaves the kernel choice to the library"
        self.sigmoid_gated_calls += 1
        return self._attention(q, k, v, ldv, gate, cu, n, out, T, Hq, Hk, Dh, scale, s, causal=bool(causal),
                               gate_is_sigmoid=True)

    def cs1_attention_rows_workspace_bytes(self, T, n, Hq, Dh, out):
        out[0] = (T // 64 + n) * Hq * (Dh + 2) * 4
        return 0

    def cs1_attention_gated_rows(self, q, gate, q_rows, gate_is_sigmoid, k, v, ldv, cu, rows, n, out, ws, wsb, T,
                                 Hq, Hk, Dh, scale, causal, s):
        self.rows_attention_calls += 1
        need = self.ffi.new("size_t *")
        self.cs1_attention_rows_workspace_bytes(T, n, Hq, Dh, need)
        assert wsb >= need[0]
        cuv, qr = self.view(cu, np.int32, n + 1), self.view(q_rows, np.int32, n)
        kv = self.bf(k, T, Hk * Dh).reshape(T, Hk, Dh)
        vv = self.bf(v, T, Hk * Dh, ldv).reshape(T, Hk, Dh)
        o = np.zeros((n, Hq * Dh), np.float32)
        for i in range(n):
            a, e = int(cuv[i]), int(cuv[i + 1])
            if causal:
                e = min(max(int(self.view(rows, np.int32, n)[i]), a), e - 1) + 1
            qi = self.bf(q, int(qr[i]) + 1, Hq * Dh)[int(qr[i])].reshape(1, Hq, Dh)
            gi = self.bf(gate, int(qr[i]) + 1, Hq * Dh)[int(qr[i])]
            att = self._one_row(qi[0], kv[a:e], vv[a:e], scale)
            o[i] = rb(att.reshape(-1)) * (gi if gate_is_sigmoid else rb(1.0 / (1.0 + np.exp(-gi))))
        self.put(out, o, n, Hq * Dh)
        return 0

    @staticmethod
    def _one_row(q, k, v, scale):
        """one query row [Hq, D] over keys k / v [L, Hkv, D] -> [Hq, D] (float64 softmax)"""
        group = q.shape[0] // k.shape[1]
        kk, vv = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # [L, Hq, D]
        sc = np.einsum("hd,lhd->hl", q.astype(np.float64), kk) * scale
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return np.einsum("hl,lhd->hd", p, vv).astype(np.float32)

    def cs1_silu_mul(self, gu, ld, out, T, I, s):
        x = self.bf(gu, T, 2 * I, ld)
        self.put(out, rb(silu(x[:, :I])) * x[:, I:], T, I)
        return 0

    def cs1_gather_rows(self, src, ld_src, src_rows, rows, n, dst, ld_dst, width, s):
        self.gather_calls += 1
        idx = self.view(rows, np.int32, n)
        x = self.bf(src, src_rows, width, ld_src)
        ok = (idx >= 0) & (idx < src_rows)
        self.put(dst, np.where(ok[:, None], x[np.clip(idx, 0, src_rows - 1)], 0.0), n, width, ld_dst)
        return 0

    def cs1_letter_readout(self, res, delta, last, n, w, letters, nl, logits, D, eps, s):
        rows = self.view(last, np.int32, n)
        T = int(rows.max()) + 1
        h = self.bf(res, T, D)[rows]
        if delta != self.ffi.NULL:
            h = rb(h + self.bf(delta, T, D)[rows])
        y = rb(self._norm(h, self.bf(w, 1, D)[0], eps))
        lv = self.view(letters, np.float32, nl * D).reshape(nl, D)
        self.view(logits, np.float32, n * nl)[:] = (y @ lv.T).reshape(-1)
        return 0


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return scale_projection_matrices(make_tiny_checkpoint(tmp_path_factory.mktemp("wiring") / "ckpt", seed=3,
                                                           with_tokenizer=False, with_decision_config=True, **TINY))


def probs(z):
    z = z.astype(np.float64) - z.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def tiny_folder_gdn_last(tmp_path_factory):
    """6 layers: the attention layer is the fourth, so the last layer is a GDN layer."""
    cfg = dict(TINY, num_hidden_layers=6)
    return scale_projection_matrices(make_tiny_checkpoint(tmp_path_factory.mktemp("wiring6") / "ckpt", seed=4,
                                                           with_tokenizer=False, with_decision_config=True, **cfg))


@pytest.mark.parametrize("last_layer", ["attention", "gdn"])
@pytest.mark.parametrize("tail_rows,tail_attention,tail_query,gdn_norm",
                         [("auto", "auto", "auto", "auto"), ("auto", "auto", "off", "auto"),
                          ("auto", "off", "auto", "off"), ("off", "auto", "auto", "auto")])
@pytest.mark.parametrize("gate_in_prep", ["auto", "off"])
@pytest.mark.parametrize("mode", ["bidirectional", "causal"])
def test_backend_wiring_matches_reference(request, monkeypatch, mode, gate_in_prep, tail_rows, tail_attention,
                                          tail_query, gdn_norm, last_layer):
    monkeypatch.setattr(cuda_backend, "TAIL_QUERY_MIN_ROWS", 0)  # the query at the read-out rows at every length
    folder = request.getfixturevalue("tiny_folder" if last_layer == "attention" else "tiny_folder_gdn_last")
    ck = load_checkpoint(folder, attention_mode=mode, require_tokenizer=False)
    assert ck.config.layer_types[-1] == ("full_attention" if last_layer == "attention" else "linear_attention")
    rng = np.random.default_rng(11)
    rows = [rng.integers(100, TINY["vocab_size"], n).astype(np.int32) for n in LENGTHS]
    lib = FakeLibrary()
    with CudaBackend(ck, library=lib, max_tokens=512, max_rows=8, graphs=False, gate_in_prep=gate_in_prep,
                     tail_rows=tail_rows, tail_attention=tail_attention, tail_query=tail_query,
                     gdn_norm=gdn_norm) as be:
        got = be.letter_logits(rows)  # 328 rows: one GEMM per projection
        assert lib.split_calls == 0
        # each GDN layer's prefill and gated RMSNorm as one call (auto) or two (off)
        n_gdn = ck.config.layer_types.count("linear_attention")
        assert lib.prefill_norm_calls == (n_gdn if gdn_norm == "auto" else 0)
        assert (be.describe()["gdn_norm"] == "off (option)") == (gdn_norm == "off")
        # the last attention at the read-out rows only with the tail there and an attention layer last
        rows_attention = tail_rows == "auto" and tail_attention == "auto" and last_layer == "attention"
        assert lib.rows_attention_calls == int(rows_attention)
        assert (be.describe()["tail_attention"] == "the last attention at the read-out rows") == rows_attention
        # and its q / gate projection and prep at those rows (a second prep call, and the input rows gathered)
        rows_query = rows_attention and tail_query == "auto"
        assert (be.describe()["tail_query"].startswith("the last q / gate")) == rows_query
        # the gate's sigmoid in attn_prep (auto) or in the attention's epilogue (off), never both or neither
        n_attention = ck.config.layer_types.count("full_attention")
        assert lib.prep_calls == n_attention + rows_query
        assert lib.sigmoid_gated_calls == (n_attention - rows_attention if gate_in_prep == "auto" else 0)
        # the last layer's tail on the read-out rows: its mixer output (unless the rows' attention wrote it) and the
        # residual gathered once per forward
        assert lib.gather_calls == (2 - rows_attention + rows_query if tail_rows == "auto" else 0)
        single = np.concatenate([be.letter_logits([r]) for r in rows[:3]])  # <= 64 rows: the K batches
        assert lib.split_calls > 0
        print(be.describe())
    ref = ReferenceBackend(ck).letter_logits(rows)
    pg, pr = probs(got), probs(ref)
    diff = np.abs(pg - pr).max(-1)
    top2 = np.sort(pr, axis=-1)[:, -2:]
    tie = top2[:, 1] - top2[:, 0] < NEAR_TIE
    for n, d, a, b, t in zip(LENGTHS, diff, pg.argmax(-1), pr.argmax(-1), tie, strict=True):
        print(f"{mode} {n:4d} tokens: top {chr(65 + a)}/{chr(65 + b)}{' (near-tie)' if t else ''}, max |dp| {d:.5f}")
    assert ((pg.argmax(-1) == pr.argmax(-1)) | tie).all()
    assert diff.max() <= 0.02
    sep = np.abs(probs(single) - pg[:3]).max()
    print(f"{mode}: rows alone vs packed: max |dp| {sep:.2e}")
    assert sep <= 1e-5, "a row's result depends on the other rows of the call"


def test_tail_attention_steps_aside_for_an_unsupported_query_group(tmp_path):
    """8 query heads per kv head: the rows' kernel refuses that group, so the backend keeps the whole attention (and
    says why in /info) instead of failing at the first forward."""
    cfg = dict(TINY, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=1)
    folder = scale_projection_matrices(make_tiny_checkpoint(tmp_path / "ckpt", seed=5, with_tokenizer=False,
                                                            with_decision_config=True, **cfg))
    ck = load_checkpoint(folder, attention_mode="bidirectional", require_tokenizer=False)
    rows = [np.arange(100, 100 + n, dtype=np.int32) for n in (3, 70)]
    lib = FakeLibrary()
    with CudaBackend(ck, library=lib, max_tokens=256, max_rows=4, graphs=False) as be:
        assert not be.tail_attention and not be.tail_query
        assert be.describe()["tail_attention"].startswith("off (query heads per kv head 8")
        got = be.letter_logits(rows)
    assert lib.rows_attention_calls == 0
    ref = ReferenceBackend(ck).letter_logits(rows)
    assert np.abs(probs(got) - probs(ref)).max() <= 0.02


class PinnedDeviceLibrary(FakeLibrary):
    """The fake on a device that a pin table can name (compute capability 9.0, 132 SMs, 140 GiB)."""

    def cs1_device_info(self, d, a, b, c, t):
        a[0], b[0], c[0], t[0] = 9, 0, 132, 140 << 30
        return 0


def test_fine_ladder_runs_the_coarse_lengths_gemm_plans_on_fewer_rows(tiny_folder, tmp_path):
    """fine_ladder="auto": a prompt of 1,050 tokens pads to 1,088 rows (1,152 on the coarse ladder), and every GEMM
    that its forward runs at 1,088 rows was pinned, before any plan, to what 1,152 rows run: the table's pin there,
    else cuBLASLt's first choice asked at 1,152 rows; the table's own pin at 1,088 wins. "off" pads to 1,152 and
    inherits nothing. The logits are the same either way (the fake's GEMMs are exact per row; padding is masked)."""
    from startlux_native import gemm_pins

    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    h = TINY["hidden_size"]
    row = np.random.default_rng(12).integers(100, TINY["vocab_size"], 1050).astype(np.int32)
    with CudaBackend(ck, library=PinnedDeviceLibrary(), max_tokens=1200, max_rows=2, graphs=False,
                     gemm_pins="off") as be:
        shapes = be._row_gemm_shapes()
        key = gemm_pins.device_key(be.lib, be.device)
    mlp = (be.n_mlp, h)
    down = (h, TINY["intermediate_size"])
    table = tmp_path / "pins.json"
    table.write_text(json.dumps({"format": gemm_pins.FORMAT, "device": key.as_json(), "pins": [
        {"N": mlp[0], "K": mlp[1], "M": 1152, "query_rows": 1200, "rank": 2},  # inherited by 1,088
        {"N": down[0], "K": down[1], "M": 1088, "query_rows": 1088, "rank": 3}]}))  # 1,088's own
    out = {}
    for spec in ("auto", "off"):
        lib = PinnedDeviceLibrary()
        with CudaBackend(ck, library=lib, max_tokens=1200, max_rows=2, graphs=False, gemm_pins=str(table),
                         fine_ladder=spec) as be:
            state = be.describe()["fine_ladder"]
            out[spec] = be.letter_logits([row])
        row_gemms = {(N, K) for M, N, K in lib.gemm_shapes if M == lib.embed_rows[0]}
        print(f"fine_ladder={spec}: {state}; {lib.embed_rows[0]} rows; pins {sorted(lib.pins.items())[:3]} ...")
        if spec == "off":
            assert lib.embed_rows == [1152] and state.startswith("off")
            assert set(lib.pins) == {(1152, *mlp), (1088, *down)}  # the table alone
            continue
        assert lib.embed_rows == [1088]
        assert row_gemms == shapes and len(shapes) == 7  # GDN in / out, qkv, o, the last k | v, gate / up, down
        for N, K in shapes:
            want = {mlp: (1200, 2), down: (1088, 3)}.get((N, K), (1152, 0))
            assert lib.pins[(1088, N, K)] == want, (N, K)
        # every fine-only length below the cap, every shape: 1,088 only here (1,216 > 1,200 = the cap's own length)
        inherited = {k for k in lib.pins if k[0] not in (1152,)} - {(1088, *down)}
        assert inherited == {(1088, N, K) for N, K in shapes} - {(1088, *down)}
        assert state.startswith("64-row steps") and f"{len(inherited)} GEMM plans" in state
    assert np.abs(out["auto"] - out["off"]).max() <= 1e-5


def test_fine_ladder_setting_is_checked(tiny_folder):
    ck = load_checkpoint(tiny_folder, attention_mode="bidirectional", require_tokenizer=False)
    with pytest.raises(ValueError, match="fine_ladder must be 'auto' or 'off'"):
        CudaBackend(ck, library=FakeLibrary(), max_tokens=64, graphs=False, fine_ladder="on")
