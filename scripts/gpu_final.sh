#!/usr/bin/env bash
# The short closing H200 call of a session (little device time left): build; optionally the tests of what changed
# last (TESTS); the kernel breakdown; Public231 native over HTTP (one traversal); the in-process table. Everything
# lands in $OUT as it finishes, so a cut-off run still returns what ran.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [TESTS="tests/gpu/test_x.py ..."] scripts/gpu_final.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_final_out}
L=$(mktemp -d)/logs  # logs live outside $OUT and are re-packed into $OUT/logs.tgz at every step (few files return)
mkdir -p "$OUT" "$L"
. scripts/device_env.sh "$L"
export CKPT=${CKPT:-/tmp/bench4b} CS1_ABI_TEST_LIBRARY=$PWD/target/libqwen3_5_cuda.so
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/summary.txt"; tar czf "$OUT/logs.tgz" -C "$L/.." logs; }
./build.sh target 90 >"$L/build.log" 2>&1 || { log "build FAILED"; exit 1; }
log "build ok ${CS1_GIT_DESCRIBE:-}"
ckpt_pid=
[ -f "$CKPT/config.json" ] || { (python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$L/checkpoint.log" 2>&1) &
                                ckpt_pid=$!; }
if [ -n "${TESTS:-}" ]; then  # the tests of what changed last, e.g. TESTS=tests/gpu/test_norm.py
  timeout 150 python3 -m pytest -q -p no:cacheprovider $TESTS >"$L/tests.log" 2>&1
  log "tests ($TESTS): rc=$? $(tail -n1 "$L/tests.log")"
fi
timeout 40 python3 -m benchmarks.kernel_times --lengths 128,2048 --output "$OUT/kernel_times.json" \
  >"$L/kernel_times.log" 2>&1
log "kernel_times rc=$? $(grep -E "sum of ops" "$L/kernel_times.log" | tr '\n' ';')"
[ -z "$ckpt_pid" ] || { wait "$ckpt_pid"; log "checkpoint: $(tail -n1 "$L/checkpoint.log")"; }
OUT=$OUT/http ARMS=native TRAVERSALS=${TRAVERSALS:-1} timeout 120 bash scripts/gpu_http_bench.sh >"$L/http.log" 2>&1
log "http rc=$? $(grep -E "latency" "$OUT/http/summary.txt" 2>/dev/null)"
timeout 90 python3 -m benchmarks.inprocess "$CKPT" --repeat 10 --output "$OUT/inprocess.json" >"$L/inprocess.log" 2>&1
log "inprocess rc=$?"
