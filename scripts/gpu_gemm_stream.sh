#!/usr/bin/env bash
# One H200 call for the weight-streaming GEMM (native/gemm_stream.cu): build, then the steps named in STEPS:
#   tests     tests/gpu/test_gemm_stream.py
#   others    tests/gpu/test_gemm.py (untuned) and test_attention.py (the cp.async/wgmma helpers they share)
#   memcheck  compute-sanitizer memcheck of the stream tests' split-K and strided cases
#   model     tests/gpu/test_model.py (reference parity, graph = eager: the whole library after this change)
#   gdnsplit  tests/gpu/test_gdn.py with CS1_GDN_SPLIT_OUT=1 (the separate GDN out kernel of smaller devices)
#   ncu       Nsight Compute (full set, source view) of the second stream call and one cuBLASLt call per NCU_CASES
#             entry ("M N K BLOCK_N SPLITS CLUSTER", ';'-separated)
#   bench     benchmarks/gemm_stream.py at ROWS (every configuration against cuBLASLt, CUDA graphs)
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [STEPS="tests memcheck bench"] [ROWS=128,160,256] [SHAPES=] \
#   scripts/gpu_gemm_stream.sh
# Writes $OUT/summary.txt, $OUT/gemm_stream.json and $OUT/logs.tar.xz. Each step has its own timeout.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_gemm_stream_out}
W=$(mktemp -d)/gemm_stream
mkdir -p "$W" "$FINAL"
. scripts/device_env.sh "$W"
STEPS=" ${STEPS:-tests others memcheck bench} "
step() { [[ $STEPS == *" $1 "* ]]; }
S=$FINAL/summary.txt
T0=$SECONDS
say() { printf '%4ss  %s\n' $((SECONDS - T0)) "$*" | tee -a "$S"; }
finish() { tar cJf "$FINAL/logs.tar.xz" -C "$W/.." gemm_stream; }
trap finish EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1
cat "$W/env.txt" >>"$S"
NVCC_EXTRA="-Xptxas -v -lineinfo" ./build.sh target 90 >"$W/build.log" 2>&1
say "build: $(tail -n1 "$W/build.log")"

PYTEST="python3 -m pytest -q -rs -p no:cacheprovider"
if step tests; then
  timeout ${TEST_TIMEOUT:-240} $PYTEST -s -x tests/gpu/test_gemm_stream.py >"$W/test_gemm_stream.log" 2>&1
  say "test_gemm_stream: $(tail -n1 "$W/test_gemm_stream.log")"
  grep -h "rel error" "$W/test_gemm_stream.log" | awk '{for(i=1;i<=NF;i++) if($i=="error") print $(i+1)}' \
    | sort -g | tail -n1 | sed 's/^/  max rel error: /' | tee -a "$S"
fi
if step others; then
  timeout 150 $PYTEST tests/gpu/test_attention.py tests/gpu/test_gemm.py -k "not tuned and not tuning" \
    >"$W/test_attention_gemm.log" 2>&1
  say "test_attention + test_gemm: $(tail -n1 "$W/test_attention_gemm.log")"
fi
if step model; then
  timeout 160 $PYTEST tests/gpu/test_model.py >"$W/test_model.log" 2>&1
  say "test_model: $(tail -n1 "$W/test_model.log")"
fi
if step gdnsplit; then
  CS1_GDN_SPLIT_OUT=1 timeout 150 $PYTEST tests/gpu/test_gdn.py >"$W/test_gdn_split.log" 2>&1
  say "test_gdn (CS1_GDN_SPLIT_OUT=1): $(tail -n1 "$W/test_gdn_split.log")"
fi
if step memcheck; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $PYTEST tests/gpu/test_gemm_stream.py \
    -k "deterministic or strided or (awkward_shapes and 65)" >"$W/memcheck.log" 2>&1
  say "memcheck rc=$?: $(grep -h "ERROR SUMMARY" "$W/memcheck.log" | tail -n1) $(tail -n1 "$W/memcheck.log")"
fi
if step ncu; then
  IFS=';' read -ra cases <<<"${NCU_CASES:-128 12352 2560 96 1 2;128 2560 4096 80 4 2}"
  i=0
  for c in "${cases[@]}"; do
    i=$((i + 1))
    timeout 150 ncu --clock-control none --set full --import-source yes -k regex:'gemm_stream|nvjet' \
      --launch-skip 1 --launch-count 2 -o "$W/ncu$i" python3 benchmarks/gemm_stream_once.py $c >"$W/ncu$i.log" 2>&1
    ncu -i "$W/ncu$i.ncu-rep" --page details >"$FINAL/ncu$i.txt" 2>&1
    ncu -i "$W/ncu$i.ncu-rep" --page source --csv --print-source sass -k regex:gemm_stream \
      >"$W/ncu${i}_source.csv" 2>&1
    say "ncu case $i ($c): $(grep -h 'Duration' "$FINAL/ncu$i.txt" | tr -s ' ' | tr '\n' ';')"
  done
fi
if step bench && { ! step tests || tail -n1 "$W/test_gemm_stream.log" | grep -q " passed" && ! tail -n1 "$W/test_gemm_stream.log" | grep -q "failed\|error"; }; then
  timeout 300 python3 benchmarks/gemm_stream.py --rows "${ROWS:-128,160,256}" --shapes "${SHAPES:-}" \
    --output "$FINAL/gemm_stream.json" >"$W/bench.log" 2>&1
  say "bench rc=$?"
  cat "$W/bench.log" >>"$S"
fi
