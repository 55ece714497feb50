#!/usr/bin/env bash
# One H200 call for the attention kernels: build; the attention tests (TESTS_K: a pytest -k filter, default all);
# the wgmma-vs-mma.sync timing (benchmarks/attention_tiles.py); optionally compute-sanitizer on the wgmma tests.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [TESTS_K=wgmma] [SANITIZE=1] scripts/gpu_attention.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_attention_out}
L=$OUT/logs
mkdir -p "$L"
. scripts/device_env.sh "$L"
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/summary.txt"; }
./build.sh target 90 >"$L/build.log" 2>&1 || { log "build FAILED"; tail -n 30 "$L/build.log"; exit 1; }
log "build ok ${CS1_GIT_DESCRIBE:-} $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention.py ${TESTS_K:+-k "$TESTS_K"} -rs \
  >"$L/tests.log" 2>&1
log "attention tests rc=$? $(tail -n1 "$L/tests.log")"
grep -E "wgmma.*max\|diff\||FAILED|Error" "$L/tests.log" | head -40 >>"$OUT/summary.txt"
timeout 200 python3 -m benchmarks.attention_tiles --output "$OUT/attention_tiles.json" >"$L/tiles.log" 2>&1
log "attention_tiles rc=$?"
cat "$L/tiles.log" >>"$OUT/summary.txt"
if [ -n "${SANITIZE:-}" ]; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_attention.py -k "wgmma and (700 or packed)" >"$L/memcheck.log" 2>&1
  log "memcheck rc=$? $(grep -E "ERROR SUMMARY" "$L/memcheck.log" | tail -n1) $(tail -n1 "$L/memcheck.log")"
fi
log done
