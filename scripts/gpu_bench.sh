#!/usr/bin/env bash
# H200 measurement run (one device call): build; the gated-norm and whole-model GPU tests; a random-weight checkpoint
# of the exact 4B text shape; the in-process single-prompt table (eager vs CUDA graphs) next to the measured floor;
# graph-vs-eager byte parity on every Public231 request; the attention tile timing; the GEMM shape table.
#   OUT=<log folder> scripts/gpu_bench.sh      ($OUT/gpu_bench.tgz holds every log; JSON results and a summary too)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FINAL=${OUT:-$ROOT/gpu_bench_out}
OUT=$(mktemp -d)/gpu_bench  # everything lands here, packed into $FINAL/gpu_bench.tgz at the end
mkdir -p "$OUT" "$FINAL"
. scripts/device_env.sh "$OUT"
CKPT=${CKPT:-/tmp/bench4b}
summary=()
step() {  # name, time limit, command...
  local name=$1 limit=$2 s=$SECONDS rc
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  summary+=("$(printf '%-16s rc=%-3s %4ss  %s' "$name" "$rc" $((SECONDS - s)) "$(tail -n1 "$OUT/$name.log" | cut -c1-110)")")
  return $rc
}
{ date -u; git describe --always --dirty; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit \
  --format=csv; nvcc --version | tail -2; } >"$OUT/env.txt" 2>&1
step build 240 ./build.sh target 90 || { cat "$OUT/build.log"; exit 1; }
step tests 300 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_model.py "tests/gpu/test_norm.py::test_gated_rms_norm"
step checkpoint 200 python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0
step inprocess 200 python3 -m benchmarks.inprocess "$CKPT" --output "$OUT/inprocess.json"
step graph_parity 120 python3 -m benchmarks.graph_parity "$CKPT" --output "$OUT/graph_parity.json"
step attention_wide 120 python3 benchmarks/attention-wide/run.py --output "$OUT/attention_wide.json"
[ -f benchmarks/gemm_shapes.py ] && step gemm_shapes 120 python3 benchmarks/gemm_shapes.py --output "$OUT/gemm_shapes.json"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -n 12
grep -E "^ *[0-9]+ +(True|False)" "$OUT/inprocess.log"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
cp "$OUT/summary.txt" "$OUT"/*.json "$FINAL/" 2>/dev/null
(cd "$OUT/.." && tar czf "$FINAL/gpu_bench.tgz" gpu_bench)
