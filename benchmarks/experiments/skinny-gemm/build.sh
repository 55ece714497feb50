#!/usr/bin/env bash
# Build the experiment's own library (not part of libqwen3_5_cuda.so):
#   benchmarks/experiments/skinny-gemm/build.sh OUTDIR [ARCH]   -> OUTDIR/libskinny_gemm.so (ARCH default 90)
# Fails when ptxas reports a spill (the kernel is tuned to fit its registers: a spill would be timed silently).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUTDIR=${1:?usage: build.sh OUTDIR [ARCH]}
ARCH=${2:-90}
NVCC=${NVCC:-nvcc}
mkdir -p "$OUTDIR"
log="$OUTDIR/ptxas-sm_$ARCH.log"
"$NVCC" -O3 -std=c++17 -gencode "arch=compute_$ARCH,code=[sm_$ARCH,compute_$ARCH]" -shared -Xcompiler -fPIC \
  -Xcompiler -Wall,-Wextra -cudart static -Xptxas -v ${NVCC_EXTRA:-} \
  "$HERE/skinny_gemm.cu" -o "$OUTDIR/libskinny_gemm.so" 2>"$log" || { cat "$log" >&2; exit 1; }
grep -E "registers|spill" "$log" | sed 's/^ *//' | sort | uniq -c >&2
if grep -E "[1-9][0-9]* bytes spill" "$log" >/dev/null; then
  echo "build.sh: ptxas reports spills (see $log)" >&2
  exit 1
fi
echo "$OUTDIR/libskinny_gemm.so"
