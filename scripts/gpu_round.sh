#!/usr/bin/env bash
# One H200 call for a round of kernel changes: build, each kernel family's tests (a family that fails is restored
# from .fallback/<file> — the last known-good copies, if present — rebuilt and retested, and the fallback is
# recorded), compute-sanitizer memcheck, whole-model tests, the in-process table and the kernel breakdown.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> scripts/gpu_round.sh      ($OUT/round.tgz holds every log)
# Budget: BUDGET_S (default 560 s); steps that would not fit are skipped and say so. SKIP_OTHER=1 skips the tests
# of the families that did not change (ABI, attention, GEMM, runtime, read-out).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FINAL=${OUT:-$ROOT/gpu_round_out}
W=$(mktemp -d)/round
mkdir -p "$W" "$FINAL"
BUDGET_S=${BUDGET_S:-560}
T0=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - T0))); }
. scripts/device_env.sh "$W"
export CKPT=${CKPT:-/tmp/bench4b}
summary=()
note() { summary+=("$(printf '%-16s %5ss  %s' "$1" $((SECONDS - T0)) "$2")"); }
pack() { printf '%s\n' "${summary[@]}" >"$W/summary.txt"; (cd "$W/.." && tar czf "$FINAL/round.tgz" round);
         cp "$W/summary.txt" "$FINAL/"; cp "$W"/*.json "$FINAL/" 2>/dev/null; }
trap pack EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1

build() { ./build.sh target 90 >"$W/build$1.log" 2>&1; }
build "" || { tail -20 "$W/build.log"; note build FAILED; exit 1; }
note build "$(tail -n1 "$W/build.log")"
export CS1_ABI_TEST_LIBRARY=$CS1_LIBRARY
runtest() {  # log name, pytest args...
  local name=$1; shift
  timeout 200 python3 -m pytest -q -rs -p no:cacheprovider "$@" >"$W/$name.log" 2>&1
}
# family: test files, then the native files restored on failure
families=("gdn:tests/gpu/test_gdn.py tests/gpu/test_gdn_conv.py:native/gdn.cu native/gdn_mma.cuh native/gdn_conv.cu"
          "norm:tests/gpu/test_norm.py:native/norm.cu"
          "elementwise:tests/gpu/test_elementwise.py:native/elementwise.cu")
for f in "${families[@]}"; do
  IFS=: read -r name tests files <<<"$f"
  if runtest "test_$name" $tests; then
    note "test_$name" "$(tail -n1 "$W/test_$name.log")"
    continue
  fi
  note "test_$name" "FAILED: $(tail -n1 "$W/test_$name.log")"
  grep -E "^(FAILED|ERROR)" "$W/test_$name.log" | head -8
  restored=""
  for file in $files; do
    [ -f ".fallback/$file" ] && cp ".fallback/$file" "$file" && restored="$restored $file"
  done
  [ -n "$restored" ] || continue
  build "_fallback_$name"
  runtest "test_${name}_fallback" $tests
  note "fallback_$name" "restored$restored: $(tail -n1 "$W/test_${name}_fallback.log")"
done
[ "${SKIP_OTHER:-0}" = 1 ] && note test_other "skipped (SKIP_OTHER=1: their kernels did not change)" || \
runtest test_other tests/abi tests/gpu --ignore=tests/gpu/test_model.py --ignore=tests/gpu/test_gdn.py --ignore=tests/gpu/test_gdn_conv.py \
  --ignore=tests/gpu/test_norm.py --ignore=tests/gpu/test_elementwise.py
[ "${SKIP_OTHER:-0}" = 1 ] || note test_other "$(tail -n1 "$W/test_other.log")"
SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
timeout 120 "$SAN" --tool memcheck --error-exitcode 86 --print-limit 20 python3 scripts/sanitize_driver.py 640 1024 4096 \
  >"$W/sanitizer.log" 2>&1
note memcheck "rc=$? $(grep -oE "ERROR SUMMARY: [0-9]+ error" "$W/sanitizer.log" | tail -n1)"
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1
if [ "$(left)" -gt 150 ]; then
  timeout 90 python3 -m benchmarks.inprocess "$CKPT" --repeat 10 --output "$W/inprocess.json" >"$W/inprocess.log" 2>&1
  note inprocess "rc=$?"
  timeout 45 python3 -m benchmarks.kernel_times --lengths 128,2048 --output "$W/kernel_times.json" \
    >"$W/kernel_times.log" 2>&1
  note kernel_times "rc=$?"
else
  note inprocess "skipped: $(left) s left"
fi
if [ "$(left)" -gt 70 ]; then
  timeout $(( $(left) - 10 )) python3 -m pytest -q -rA -s -p no:cacheprovider tests/gpu/test_model.py \
    >"$W/test_model.log" 2>&1
  note test_model "$(grep -E "passed|failed" "$W/test_model.log" | tail -n1)"
else
  note test_model "skipped: $(left) s left"
fi
grep -E "^ *[0-9]+ +(True|False)|tokens" "$W/inprocess.log" | head -12
grep -E "T=|gdn_prefill|gdn_conv|add_rms|attn_prep" "$W/kernel_times.log"
grep -E "rows with" "$W/test_model.log" | head -6
printf '%s\n' "${summary[@]}"
