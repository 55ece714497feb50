#!/usr/bin/env bash
# One H200 call: where one forward's wall time goes (benchmarks/forward_span.py) and Nsight Compute's full sections
# with per-instruction stall samples for the kernels named in SOURCE_CASES (scripts/gpu_profile.sh SOURCES=1).
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [SPAN_LENGTHS=128,160,512,2048] [SOURCE_CASES="160:gated_attention ..."]
#   scripts/gpu_span_probe.sh
# Writes $OUT/summary.txt, $OUT/forward_span.json, $OUT/sources.tar and $OUT/logs.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_span_out}
W=$(mktemp -d)/span
mkdir -p "$W" "$FINAL"
. scripts/device_env.sh "$W"
CKPT=${CKPT:-/tmp/bench4b}
S=$FINAL/summary.txt
T0=$SECONDS
say() { printf '%4ss  %s\n' $((SECONDS - T0)) "$*" | tee -a "$S"; }
trap 'tar cJf "$FINAL/logs.tar.xz" -C "$W/.." span' EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm \
  --format=csv; nvcc --version | tail -1; } | tee -a "$S"
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1 &
CKPT_PID=$!
SOURCES=1 SOURCE_CASES="${SOURCE_CASES:-160:gated_attention 2048:gated_attention 160:gdn_conv 2048:gdn_conv}" \
  OUT="$W/profile" timeout 300 scripts/gpu_profile.sh >"$W/profile.log" 2>&1
say "profile rc=$?"; cat "$W/profile/profile.log" >>"$S"
mv "$W/profile/sources.tar" "$FINAL/" 2>/dev/null
wait $CKPT_PID
timeout 180 python3 -m benchmarks.forward_span "$CKPT" --lengths "${SPAN_LENGTHS:-128,160,512,2048}" --repeat 50 \
  --output "$FINAL/forward_span.json" >"$W/forward_span.log" 2>&1
say "forward_span rc=$?"; grep -vE '^\{' "$W/forward_span.log" | tail -8 | tee -a "$S"
