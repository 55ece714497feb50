#!/usr/bin/env bash
# The one GPU check (H200): build, ABI + kernel tests, compute-sanitizer memcheck of attention and GDN, whole-model
# parity. Run from anywhere:  OUT=<log folder> scripts/gpu_check.sh   (default OUT: ./gpu_check_out)
# Logs: $OUT/{env.txt,build.log,pytest_kernels.log,sanitizer.log,pytest_model.log,junit_*.xml,summary.txt}.
# Budget: < 9 minutes in all (each step has its own time limit; the model tests get what is left).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu_check_out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
T0=$(date +%s)
ARCH=${ARCH:-90}
BUDGET_S=${BUDGET_S:-520}  # the whole script stays under 9 minutes
declare -a SUMMARY

elapsed() { echo $(( $(date +%s) - T0 )); }
# time limit for a step: at most $1 s, and leave $2 s of the budget for the steps after it (never under 30 s)
limit() { local l=$(( BUDGET_S - $(elapsed) - $2 )); [ $l -gt $1 ] && l=$1; [ $l -lt 30 ] && l=30; echo $l; }
record() { SUMMARY+=("$(printf '%-22s %-8s %5ss  %s' "$1" "$2" "$3" "$4")"); }

# ---- carried wheels (the device has no network) and the common environment
. scripts/device_env.sh "$OUT"

# ---- environment record
{
  echo "date: $(date -u)"; echo "host: $(hostname)"
  echo "git: $(git describe --always --dirty 2>/dev/null) $(git rev-parse HEAD 2>/dev/null)"
  git status --short 2>/dev/null | head -50
  echo "--- nvidia-smi"; nvidia-smi 2>&1 | head -30
  echo "--- nvcc"; (nvcc --version || "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version) 2>&1 | tail -3
  echo "--- python"; python3 - <<'EOF' 2>&1
import importlib, sys
print(sys.version)
for m in ("numpy", "cffi", "torch", "transformers", "safetensors", "tokenizers", "pytest", "fla"):
    try:
        mod = importlib.import_module(m)
        extra = f" cuda={mod.version.cuda}" if m == "torch" else ""
        print(f"{m} {getattr(mod, '__version__', '?')}{extra}")
    except Exception as exc:
        print(f"{m}: MISSING ({exc.__class__.__name__}: {exc})")
EOF
} >"$OUT/env.txt" 2>&1
sed -n '1,3p' "$OUT/env.txt"
grep -E "MISSING|^torch|^transformers" "$OUT/env.txt"

# ---- build
s=$(elapsed)
if timeout "$(limit 240 300)" ./build.sh target "$ARCH" >"$OUT/build.log" 2>&1; then
  record build ok $(( $(elapsed) - s )) "$(tail -n1 "$OUT/build.log")"
  build_ok=1
else
  record build FAILED $(( $(elapsed) - s )) "see build.log"
  build_ok=0
  tail -n 30 "$OUT/build.log"
fi
export CS1_LIBRARY=$ROOT/target/libqwen3_5_cuda.so
export CS1_ABI_TEST_LIBRARY=$CS1_LIBRARY  # the ABI tests reuse this build instead of compiling again

pytest_step() {  # name, time limit, pytest args...
  local name=$1 limit=$2 s rc line
  shift 2
  s=$(elapsed)
  timeout "$limit" python3 -m pytest -q -rA -p no:cacheprovider --junitxml="$OUT/junit_$name.xml" "$@" \
    >"$OUT/pytest_$name.log" 2>&1
  rc=$?
  line=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error)|(passed|failed|skipped|error).* in [0-9.]+s" \
    "$OUT/pytest_$name.log" | tail -n1)
  [ $rc = 124 ] && line="TIMEOUT after ${limit}s; $line"
  record "pytest $name" "$([ $rc = 0 ] && echo ok || echo FAILED)" $(( $(elapsed) - s )) "$line"
  grep -E "^(FAILED|ERROR) " "$OUT/pytest_$name.log" | head -20
  grep -E "^SKIPPED" "$OUT/pytest_$name.log" | head -10
}

# ---- ABI + kernel tests (everything but the whole model)
if [ $build_ok = 1 ]; then
  pytest_step kernels "$(limit 330 200)" tests/abi tests/gpu --ignore=tests/gpu/test_model.py
fi

# ---- compute-sanitizer memcheck: attention and GDN (and the other ops) at 640 / 1024 / 4096 rows
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
if [ $build_ok = 1 ] && [ -x "$SAN" ]; then
  cat >"$OUT/sanitize_driver.py" <<'EOF'
"""Drive every kernel once per size under compute-sanitizer (4B head shapes, three packed prompts per batch)."""
import sys
import numpy as np
from startlux_native import abi, bf16

lib = abi.load()
ffi = lib.ffi
rng = np.random.default_rng(0)
s = ffi.new("void **"); lib.cs1_stream_create(s); stream = s[0]
bufs = []

def up(a):
    a = np.ascontiguousarray(a); p = ffi.new("void **"); lib.cs1_malloc(p, max(a.nbytes, 1))
    lib.cs1_upload(p[0], ffi.from_buffer(a), a.nbytes, stream); bufs.append(p[0]); return p[0]

def empty(n):
    p = ffi.new("void **"); lib.cs1_malloc(p, max(n, 1)); lib.cs1_memset_async(p[0], 0xFF, n, stream)
    bufs.append(p[0]); return p[0]

def rb(*shape, scale=1.0):
    return bf16.to_bits((scale * rng.standard_normal(shape)).astype(np.float32))

i32 = lambda p: ffi.cast("int32_t *", p)
f32 = lambda p: ffi.cast("float *", p)
Hq, Hk, Dh, H, HK = 16, 4, 256, 32, 16
for T in [int(a) for a in sys.argv[1:]]:
    lens = [T // 2 + 1, T // 3, T - (T // 2 + 1) - T // 3]
    cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    d_cu, d_pos = i32(up(cu)), i32(up(pos))
    ld_a = (2 * Hq + 2 * Hk) * Dh
    qkv = up(rb(T, ld_a))
    q, gate, k, o = empty(T * Hq * Dh * 2), empty(T * Hq * Dh * 2), empty(T * Hk * Dh * 2), empty(T * Hq * Dh * 2)
    inv = np.float32(1) / np.power(np.float32(1e7), np.arange(0, 64, 2, dtype=np.float32) / np.float32(64))
    lib.cs1_attn_prep(qkv, ld_a, up(rb(Dh, scale=0.1)), up(rb(Dh, scale=0.1)), d_pos, f32(up(inv.astype(np.float32))),
                      q, gate, k, T, Hq, Hk, Dh, 64, 1e-6, stream)
    v = ffi.cast("char *", qkv) + 2 * (2 * Hq * Dh + Hk * Dh)
    lib.cs1_attention_gated(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, stream)
    lib.cs1_attention_gated_bidirectional(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, stream)
    for causal in (0, 1):
        for tile in (64, 128):
            lib.cs1_attention_gated_tiled(q, k, v, ld_a, gate, d_cu, 3, o, T, Hq, Hk, Dh, Dh ** -0.5, causal, tile,
                                          stream)
    conv_dim, ld_g = 2 * HK * 128 + H * 128, 12352
    proj = up(rb(T, ld_g))
    conv = empty(T * conv_dim * 2)
    lib.cs1_gdn_conv(proj, ld_g, up(rb(conv_dim, 4, scale=0.5)), d_pos, conv, T, conv_dim, stream)
    beta, g = f32(empty(T * H * 4)), f32(empty(T * H * 4))
    lib.cs1_gdn_gates(ffi.cast("char *", proj) + 2 * (conv_dim + H * 128), ld_g,
                      f32(up(np.log(rng.uniform(0.05, 0.9, H)).astype(np.float32))),
                      f32(up(rng.uniform(-1, 1.5, H).astype(np.float32))), beta, g, T, H, stream)
    wsb = ffi.new("size_t *"); lib.cs1_gdn_workspace_bytes(T, 3, H, wsb)
    ws, go = empty(int(wsb[0])), empty(T * H * 128 * 2)
    lib.cs1_gdn_prefill(conv, conv_dim, g, beta, d_cu, 3, go, ws, int(wsb[0]), T, H, HK, 128 ** -0.5, stream)
    ln = empty(T * H * 128 * 2)
    lib.cs1_gated_rms_norm(go, ffi.cast("char *", proj) + 2 * conv_dim, ld_g,
                           f32(up(np.ones(128, np.float32))), 1, ln, T, H, 128, 1e-6, stream)
    x, out = up(rb(T, 2560)), empty(T * 2560 * 2)
    lib.cs1_rms_norm(x, up(rb(2560, scale=0.1)), out, T, 2560, 1e-6, stream)
    out2 = empty(T * 2560 * 2)
    lib.cs1_add_rms_norm(x, out, up(rb(2560, scale=0.1)), out2, T, 2560, 1e-6, stream)
    act = empty(T * 9216 * 2)
    gu = up(rb(T, 18432))
    lib.cs1_silu_mul(gu, 18432, act, T, 9216, stream)
    hg = ffi.new("void **"); lib.cs1_gemm_create(32 << 20, hg)
    lib.cs1_gemm(hg[0], act, 9216, up(rb(2560, 9216, scale=0.01)), out, 2560, T, 2560, 9216, stream)
    logits = f32(empty(3 * 26 * 4))
    lib.cs1_letter_readout(x, out, i32(up((cu[1:] - 1).astype(np.int32))), 3, up(rb(2560, scale=0.1)),
                           f32(up(rng.standard_normal((26, 2560)).astype(np.float32))), 26, logits, 2560, 1e-6,
                           stream)
    lib.cs1_stream_sync(stream)
    lib.cs1_gemm_destroy(hg[0])
    for p in bufs:
        lib.cs1_free(p)
    bufs.clear()
    print(f"T={T}: all kernels ran", flush=True)
print("sanitizer driver done")
EOF
  s=$(elapsed)
  timeout "$(limit 150 120)" "$SAN" --tool memcheck --error-exitcode 86 --print-limit 20 \
    python3 "$OUT/sanitize_driver.py" 640 1024 4096 >"$OUT/sanitizer.log" 2>&1
  rc=$?
  errs=$(grep -oE "ERROR SUMMARY: [0-9]+ error" "$OUT/sanitizer.log" | tail -n1)
  status=$([ $rc = 0 ] && echo ok || echo FAILED)
  [ $rc = 124 ] && errs="TIMEOUT; $errs"
  record "memcheck 640/1024/4096" "$status" $(( $(elapsed) - s )) "${errs:-no summary (rc $rc), see sanitizer.log}"
  [ $rc = 0 ] || tail -n 30 "$OUT/sanitizer.log"
else
  record memcheck skipped 0 "no build or no compute-sanitizer ($SAN)"
fi

# ---- whole model: tiny vs numpy, 4B shape vs transformers and numpy (gets the rest of the budget)
if [ $build_ok = 1 ]; then
  pytest_step model "$(limit 600 0)" -s -v tests/gpu/test_model.py  # -s: numbers stream to the log live
fi

# ---- summary
{
  echo "gpu_check $(git describe --always --dirty 2>/dev/null) on $(nvidia-smi --query-gpu=name --format=csv,noheader \
    2>/dev/null | head -n1), total $(elapsed)s, logs in $OUT"
  printf '%s\n' "${SUMMARY[@]}"
} | tee "$OUT/summary.txt"
grep -q "FAILED" "$OUT/summary.txt" && exit 1
exit 0
