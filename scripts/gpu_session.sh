#!/usr/bin/env bash
# One H200 call that records a session's evidence, most important first, inside a time budget:
#   1. build; 2. the GDN kernel tests (if they fail and FALLBACK_GDN_REV is set, that revision's gdn.cu is restored,
#   rebuilt and retested, and the fallback is recorded); 3. Public231 over HTTP, native vs the reference arm
#   (scripts/gpu_http_bench.sh); 4. the in-process table and the kernel breakdown; 5. the whole-model GPU tests.
#   OUT=<folder> BUDGET_S=540 scripts/gpu_session.sh     ($OUT/session.tgz holds every log; summaries printed)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FINAL=${OUT:-$ROOT/gpu_session_out}
W=$(mktemp -d)/session
mkdir -p "$W" "$FINAL"
BUDGET_S=${BUDGET_S:-540}
T0=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - T0))); }
. scripts/device_env.sh "$W"
export CKPT=${CKPT:-/tmp/bench4b}
summary=()
note() { summary+=("$(printf '%-14s %5ss  %s' "$1" $((SECONDS - T0)) "$2")"); }
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1

./build.sh target 90 >"$W/build.log" 2>&1 || { tail -20 "$W/build.log"; exit 1; }
note build "$(tail -n1 "$W/build.log")"
gdn_tests() { timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gdn.py >"$W/$1.log" 2>&1; }
if gdn_tests test_gdn; then
  note test_gdn "$(tail -n1 "$W/test_gdn.log")"
else
  note test_gdn "FAILED: $(tail -n1 "$W/test_gdn.log")"
  if [ -n "${FALLBACK_GDN_REV:-}" ]; then
    cp "$W/test_gdn.log" "$W/test_gdn_new_failed.log"
    git show "$FALLBACK_GDN_REV:native/gdn.cu" >native/gdn.cu 2>/dev/null || cp .fallback/gdn.cu native/gdn.cu
    ./build.sh target 90 >"$W/build_fallback.log" 2>&1
    gdn_tests test_gdn_fallback
    note fallback "gdn.cu of $FALLBACK_GDN_REV: $(tail -n1 "$W/test_gdn_fallback.log")"
  fi
fi
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1
note checkpoint "$(tail -n1 "$W/checkpoint.log" 2>/dev/null)"
if [ "$(left)" -gt 200 ]; then
  OUT=$W/http timeout $(( $(left) - 150 )) bash scripts/gpu_http_bench.sh >"$W/http.log" 2>&1
  note http "rc=$? $(grep -E "p50" "$W/http/summary.txt" 2>/dev/null | head -3 | tr '\n' ' ')"
fi
if [ "$(left)" -gt 90 ]; then
  timeout 80 python3 -m benchmarks.inprocess "$CKPT" --repeat 10 --output "$W/inprocess.json" >"$W/inprocess.log" 2>&1
  note inprocess "rc=$?"
  timeout 40 python3 -m benchmarks.kernel_times --lengths 128,2048 --output "$W/kernel_times.json" \
    >"$W/kernel_times.log" 2>&1
  note kernel_times "rc=$?"
fi
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 15 )) python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_model.py >"$W/test_model.log" 2>&1
  note test_model "$(grep -E "passed|failed" "$W/test_model.log" | tail -n1)"
fi
cat "$W/http/summary.txt" 2>/dev/null | grep -E "arm|p50|p95|successful|gate|replace" | head -30
grep -E "^ *[0-9]+ +(True|False)" "$W/inprocess.log"
grep -E "T=|gdn_prefill|gdn_conv" "$W/kernel_times.log"
grep -E "rms dlogit|rows with" "$W/test_model.log" | grep -v print | head -12
printf '%s\n' "${summary[@]}" | tee "$W/summary.txt"
cp "$W/summary.txt" "$W"/*.json "$W/http/http_bench.tgz" "$FINAL/" 2>/dev/null
(cd "$W/.." && tar czf "$FINAL/session.tgz" --exclude=http_bench.tgz session)
