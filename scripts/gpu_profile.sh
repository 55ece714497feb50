#!/usr/bin/env bash
# Per-kernel profile of one 4B layer's ops (H200): build, then Nsight Compute over benchmarks.kernel_times with one
# call per op, clocks as found (--clock-control none). Writes $OUT/ncu_<lengths>.csv and $OUT/profile.log.
#   OUT=<folder> LENGTHS=128,2048 scripts/gpu_profile.sh
# DETAIL=1 adds the occupancy, launch and warp-stall sections (one more CSV per length, ncu_detail_<length>.csv) for
# the kernels whose names match KERNELS (a regex; default: every non-GEMM kernel of ours).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_profile_out}
mkdir -p "$OUT"
LENGTHS=${LENGTHS:-128,2048}
. scripts/device_env.sh "$OUT"
./build.sh target 90 >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,launch__grid_size,\
launch__registers_per_thread,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
for L in ${LENGTHS//,/ }; do
  timeout 240 "$NCU" --clock-control none --metrics "$METRICS" --csv --log-file "$OUT/ncu_$L.csv" \
    python3 -m benchmarks.kernel_times --lengths "$L" --calls 1 --trials 1 >>"$OUT/profile.log" 2>&1
  echo "ncu T=$L rc=$?" | tee -a "$OUT/profile.log"
  [ "${DETAIL:-0}" = 1 ] || continue
  timeout 300 "$NCU" --clock-control none --kernel-name "regex:${KERNELS:-gdn|silu|rms|attn|attention|embed|readout}" \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis \
    --csv --page details --log-file "$OUT/ncu_detail_$L.csv" \
    python3 -m benchmarks.kernel_times --lengths "$L" --calls 1 --trials 1 >>"$OUT/profile.log" 2>&1
  echo "ncu detail T=$L rc=$?" | tee -a "$OUT/profile.log"
done
