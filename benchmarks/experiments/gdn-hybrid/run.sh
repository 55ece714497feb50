#!/usr/bin/env bash
# Experiment gdn-hybrid (one H200 call, ~4 minutes): the current GDN prefill (A) against A with the prep and out
# kernels of commit 076cada (B = A + gdn-hybrid.patch; the walk stays A's double-buffered one).
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> benchmarks/experiments/gdn-hybrid/run.sh
# For each of A and B: build into its own folder; tests/gpu/test_gdn.py + the chunk-edge test; compute-sanitizer
# memcheck (scripts/sanitize_driver.py 640 1024 4096); kernel_times at 128 and 2048 tokens; Nsight Compute per kernel
# (gdn kernels only). Decision rule (frozen here, before any run): B replaces A only if every test passes and the
# gdn_prefill time per call is lower at both 128 and 2048 tokens; record the numbers in benchmarks/LEVERS.md either way.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gdn_hybrid_out}
L=$(mktemp -d)/logs
mkdir -p "$OUT" "$L"
. scripts/device_env.sh "$L"
cp benchmarks/experiments/gdn-hybrid/test_gdn_chunk_edges.py tests/gpu/
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/summary.txt"; tar czf "$OUT/logs.tgz" -C "$L/.." logs; }
variant() {  # name, patch or "" -> builds build/$name and runs everything against it
  local name=$1 patch=$2 tree=$L/src-$1
  rm -rf "$tree" && mkdir -p "$tree" && cp -r native build.sh "$tree/"
  [ -z "$patch" ] || (cd "$tree" && patch -p1 -s <"$ROOT/$patch") || { log "$name: patch FAILED"; return 1; }
  (cd "$tree" && ./build.sh "$ROOT/build/$name" 90) >"$L/build-$name.log" 2>&1 || { log "$name: build FAILED"; return 1; }
  export CS1_LIBRARY=$ROOT/build/$name/libqwen3_5_cuda.so CS1_ABI_TEST_LIBRARY=$ROOT/build/$name/libqwen3_5_cuda.so
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gdn.py tests/gpu/test_gdn_chunk_edges.py \
    >"$L/test-$name.log" 2>&1
  log "$name tests: $(tail -n1 "$L/test-$name.log")"
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 86 python3 scripts/sanitize_driver.py 640 1024 4096 \
    >"$L/memcheck-$name.log" 2>&1
  log "$name memcheck: rc=$? $(grep -oE "ERROR SUMMARY: [0-9]+ error" "$L/memcheck-$name.log" | tail -n1)"
  timeout 40 python3 -m benchmarks.kernel_times --lengths 128,2048 --output "$OUT/kernel_times-$name.json" \
    >"$L/kernel_times-$name.log" 2>&1
  log "$name kernel_times: $(grep -E "gdn_prefill" "$L/kernel_times-$name.log" | tr -s ' ' | tr '\n' ';')"
  timeout 90 ncu --clock-control none -k regex:gdn_ --metrics gpu__time_duration.sum --csv \
    --log-file "$L/ncu-$name.csv" python3 -m benchmarks.kernel_times --lengths 128,2048 --calls 1 --trials 1 \
    >/dev/null 2>&1
  log "$name ncu rc=$?"
}
variant A ""
variant B benchmarks/experiments/gdn-hybrid/gdn-hybrid.patch
