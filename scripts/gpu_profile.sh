#!/usr/bin/env bash
# Per-kernel profile of one 4B layer's ops (H200): build, then Nsight Compute over benchmarks.kernel_times with one
# call per op, clocks as found (--clock-control none). Writes $OUT/ncu_<lengths>.csv and $OUT/profile.log.
#   OUT=<folder> LENGTHS=128,2048 scripts/gpu_profile.sh
# DETAIL=1 adds the occupancy, launch and warp-stall sections (one more CSV per length, ncu_detail_<length>.csv) for
# the kernels whose names match KERNELS (a regex; default: every non-GEMM kernel of ours).
# SOURCES=1 instead profiles one launch per case of SOURCE_CASES ("LENGTH:REGEX ...", default: the GDN prep, walk and
# out kernels at 160 and 2048 rows) with the full section set and the per-instruction source counters (the build
# gets -lineinfo): src-<length>-<regex>.details.txt and .sass.csv.xz (warp stalls per SASS instruction), packed in
# $OUT/sources.tar.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_profile_out}
mkdir -p "$OUT"
LENGTHS=${LENGTHS:-128,2048}
. scripts/device_env.sh "$OUT"
[ "${SOURCES:-0}" = 1 ] && export NVCC_EXTRA="${NVCC_EXTRA:-} -lineinfo"
./build.sh target 90 >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
NCU=$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")
if [ "${SOURCES:-0}" = 1 ]; then
  for case in ${SOURCE_CASES:-160:gdn_walk 160:gdn_prep 2048:gdn_walk 2048:gdn_out 2048:gdn_prep}; do
    L=${case%%:*} K=${case#*:} name=src-${case%%:*}-${case#*:}
    timeout 120 "$NCU" --clock-control none --set full --import-source yes -k "regex:$K" --launch-count 1 \
      -o "$OUT/$name" python3 -m benchmarks.kernel_times --lengths "$L" --calls 1 --trials 1 >"$OUT/$name.log" 2>&1
    echo "ncu $case rc=$?" | tee -a "$OUT/profile.log"
    "$NCU" -i "$OUT/$name.ncu-rep" --page details >"$OUT/$name.details.txt" 2>&1
    "$NCU" -i "$OUT/$name.ncu-rep" --page source --csv --print-source sass 2>&1 | xz >"$OUT/$name.sass.csv.xz"
    grep -E "^  [a-z_<>, 0-9]+\(|Duration|Registers Per|Warp Cycles Per Issued|Issue Slots Busy" "$OUT/$name.details.txt" \
      | tr -s ' ' | head -8 | tee -a "$OUT/profile.log"
    rm -f "$OUT/$name.ncu-rep"
  done
  # one archive: the device tool returns a limited number of files per call
  (cd "$OUT" && tar cf sources.tar src-* && rm -f src-*)
  exit 0
fi
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
