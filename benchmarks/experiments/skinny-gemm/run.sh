#!/usr/bin/env bash
# Experiment skinny-gemm (one H200 call, about 3 minutes): the split-K weight-streaming GEMM (libskinny_gemm.so, built
# here from skinny_gemm.cu) against cuBLASLt (cs1_gemm of libqwen3_5_cuda.so) at the 4B shapes, M in
# {1, 64, 128, 160, 192, 256}: correctness (float64 reference, bit-identity, graph replays), then CUDA-graph timing.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> benchmarks/experiments/skinny-gemm/run.sh
# Writes $OUT/summary.txt, $OUT/table.txt (run.py's output), $OUT/skinny_gemm.json, $OUT/ncu.csv (Nsight Compute
# kernel durations at M = 128, when ncu exists) and $OUT/logs.tgz. The decision rule is in README.md (frozen).
set -uo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
EXP=benchmarks/experiments/skinny-gemm
OUT=${OUT:-$ROOT/skinny_gemm_out}
L=$(mktemp -d)/logs  # logs live outside $OUT and are re-packed into $OUT/logs.tgz at every step
mkdir -p "$OUT" "$L"
. scripts/device_env.sh "$L"
log() { echo "$(date -u +%T) $*" | tee -a "$OUT/summary.txt"; tar czf "$OUT/logs.tgz" -C "$L/.." logs; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader >"$L/gpu.txt" 2>&1
log "gpu: $(cat "$L/gpu.txt")"
if [ ! -f target/libqwen3_5_cuda.so ]; then
  ./build.sh target 90 >"$L/build.log" 2>&1 || { log "library build FAILED (logs.tgz: build.log)"; exit 1; }
fi
log "library ok ${CS1_GIT_DESCRIBE:-}"
"$EXP/build.sh" "$L/skinny" 90 >"$L/build-skinny.log" 2>&1 || { log "experiment build FAILED: $(tail -n3 "$L/build-skinny.log")"; exit 1; }
log "experiment build ok: $(grep -c ' 0 bytes spill stores' "$L/build-skinny.log") kernels, no spills"
SO=$L/skinny/libskinny_gemm.so
timeout 420 python3 "$EXP/run.py" --experiment "$SO" --output "$OUT/skinny_gemm.json" >"$OUT/table.txt" 2>"$L/run.stderr"
rc=$?
log "run.py rc=$rc $(tail -n3 "$L/run.stderr" | tr '\n' ' ')"
grep -E "^decision rule" "$OUT/table.txt" | while read -r line; do log "$line"; done
if command -v ncu >/dev/null 2>&1; then
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUT/ncu.csv" \
    python3 "$EXP/run.py" --experiment "$SO" --quick >"$L/ncu.log" 2>&1
  log "ncu rc=$? (kernel durations at M = 128: ncu.csv)"
fi
log "done"
