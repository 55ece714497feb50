#!/usr/bin/env bash
# One H200 call for a lever or the record: build; optionally the tests of what changed (TESTS); the kernel
# breakdown; Public231 native over HTTP; the in-process table. Everything lands in $OUT as it finishes, so a cut-off
# run still returns what ran.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [TESTS="tests/gpu/test_x.py ..."] scripts/gpu_final.sh
# Knobs:
#   STEPS="tests kernels http inprocess"  the steps to run (default all four, in this order)
#   SKIP_BUILD=1       reuse target/libqwen3_5_cuda.so when it exists (a warm machine of an earlier call)
#   TRAVERSALS=1       measured Public231 passes of the HTTP run
#   INPROCESS_ARGS     extra arguments of benchmarks.inprocess (e.g. "--lengths 128,2048 --graphs on")
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_final_out}
L=$(mktemp -d)/logs  # logs live outside $OUT and are re-packed into $OUT/logs.tgz at every step (few files return)
mkdir -p "$OUT" "$L"
. scripts/device_env.sh "$L"
export CKPT=${CKPT:-/tmp/bench4b} CS1_ABI_TEST_LIBRARY=$PWD/target/libqwen3_5_cuda.so
STEPS=${STEPS:-tests kernels http inprocess}
step() { [[ " $STEPS " == *" $1 "* ]]; }
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/summary.txt"; tar czf "$OUT/logs.tgz" -C "$L/.." logs; }
if [ -n "${SKIP_BUILD:-}" ] && [ -f target/libqwen3_5_cuda.so ]; then
  log "build skipped (target/ kept from an earlier call) ${CS1_GIT_DESCRIBE:-}"
else
  ./build.sh target 90 >"$L/build.log" 2>&1 || { log "build FAILED"; exit 1; }
  log "build ok ${CS1_GIT_DESCRIBE:-}"
fi
ckpt_pid=
[ -f "$CKPT/config.json" ] || { (python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$L/checkpoint.log" 2>&1) &
                                ckpt_pid=$!; }
if step tests && [ -n "${TESTS:-}" ]; then  # the tests of what changed last, e.g. TESTS=tests/gpu/test_norm.py
  timeout 200 python3 -m pytest -q -p no:cacheprovider $TESTS >"$L/tests.log" 2>&1
  log "tests ($TESTS): rc=$? $(tail -n1 "$L/tests.log")"
fi
if step kernels; then
  timeout 40 python3 -m benchmarks.kernel_times --lengths 128,2048 --output "$OUT/kernel_times.json" \
    >"$L/kernel_times.log" 2>&1
  log "kernel_times rc=$? $(grep -E "sum of ops" "$L/kernel_times.log" | tr '\n' ';')"
fi
[ -z "$ckpt_pid" ] || { wait "$ckpt_pid"; log "checkpoint: $(tail -n1 "$L/checkpoint.log")"; }
if step http; then
  OUT=$OUT/http ARMS=native TRAVERSALS=${TRAVERSALS:-1} timeout 150 bash scripts/gpu_http_bench.sh >"$L/http.log" 2>&1
  log "http rc=$? $(grep -E "latency" "$OUT/http/summary.txt" 2>/dev/null)"
fi
if step inprocess; then
  timeout 150 python3 -m benchmarks.inprocess "$CKPT" --repeat 10 ${INPROCESS_ARGS:-} \
    --output "$OUT/inprocess.json" >"$L/inprocess.log" 2>&1
  log "inprocess rc=$?"
  sed -n '/^ *tokens/,$p' "$L/inprocess.log" | tee -a "$OUT/summary.txt"
fi
log "done"
