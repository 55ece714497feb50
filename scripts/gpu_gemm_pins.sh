#!/usr/bin/env bash
# One H200 call for the GEMM pin table (lever 30): builds, then the steps named in STEPS, in this order:
#   smoke   benchmarks/gemm_pins.py on two out/o lengths (a quick failure before the long steps)
#   tests   tests/gpu/test_gemm.py and the pin tests of tests/gpu/test_model.py
#   pins    benchmarks/gemm_pins.py over the padding ladder up to PIN_MAX_ROWS -> $OUT/gemm_pins_h200.json (also
#           copied to startlux_native/gemm_pins/h200.json in this checkout, so "auto" finds it in later steps)
#   ladder  benchmarks/inprocess.py A/B (A without pins, B with the table) at every ladder length up to PIN_MAX_ROWS,
#           then `benchmarks.gemm_pins filter`: only lengths whose whole forward gained keep their pins ->
#           $OUT/gemm_pins_h200.json (copied into startlux_native/gemm_pins/h200.json here, as after `pins`)
#   inab    benchmarks/inprocess.py, one build, arm A without pins, arm B with the table, calls alternated
#           (INAB_SEED: other prompts than the ladder step's)
#   model   tests/gpu/test_model.py (the 4B shape against transformers, with the table on "auto")
#   http    scripts/gpu_http_ab.sh: A = CS1_GEMM_PINS=off, B = the table (Public231, rotated rounds)
# PIN_MIN_ROWS > 0 extends the shipped table instead of remaking it: `pins` measures only the ladder lengths in
# (PIN_MIN_ROWS, PIN_MAX_ROWS] (-> $OUT/gemm_pins_added.json) and merges them into startlux_native/gemm_pins/h200.json
# (`gemm_pins merge`), and `ladder` A/Bs only those lengths and filters with --keep-unmeasured (the shipped table's
# own lengths keep their pins and their first validation). E.g. PIN_MIN_ROWS=8192 PIN_MAX_ROWS=32768.
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [STEPS="..."] [TABLE=<an existing table for inab/model/http>]
#   [PIN_MIN_ROWS=0] [PIN_MAX_ROWS=8192] [PINS_TIMEOUT=300] [LADDER_REPEAT=20] [LADDER_TIMEOUT=300]
#   [INPROCESS_LENGTHS=...]
#   [INAB_REPEAT=30] [INAB_SEED=1234] [HTTP_ROUNDS=6] scripts/gpu_gemm_pins.sh
# Writes $OUT/summary.txt, $OUT/gemm_pins_h200.json, $OUT/gemm_pins_log.json.xz, $OUT/inprocess-ab.json,
# $OUT/ab.txt and $OUT/logs.tar.xz (every log). Each step has its own timeout; a failed step does not stop the rest.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_gemm_pins_out}
W=$(mktemp -d)/pins
mkdir -p "$W" "$FINAL"
. scripts/device_env.sh "$W"
STEPS=" ${STEPS:-smoke tests pins inab} "
step() { [[ $STEPS == *" $1 "* ]]; }
CKPT=${CKPT:-/tmp/bench4b}
S=$FINAL/summary.txt
T0=$SECONDS
say() { printf '%4ss  %s\n' $((SECONDS - T0)) "$*" | tee -a "$S"; }
finish() { tar cJf "$FINAL/logs.tar.xz" -C "$W/.." pins; }
trap finish EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1
cat "$W/env.txt" >>"$S"

./build.sh target 90 >"$W/build.log" 2>&1
say "build rc=$?: $(tail -n1 "$W/build.log")"
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1 &
CKPT_PID=$!

if step smoke; then
  for sep in --no-separate ""; do  # back to back, then with a memset between calls (the default)
    timeout 60 python3 -m benchmarks.gemm_pins --rows 144,160 --shapes out_o_proj --table "$W/smoke$sep.json" \
      --log "$W/smoke$sep-log.json" $sep >"$W/smoke$sep.log" 2>&1
    say "smoke ${sep:-(separated)} rc=$?"; grep -E "M=|pins of" "$W/smoke$sep.log" | tee -a "$S"
    python3 -c "import json, sys; [print(f'  M={r[\"M\"]} screen:', {k: round(v, 2) for k, v in r['screen_us'].items()})
for r in json.load(open(sys.argv[1]))['rows']]" "$W/smoke$sep-log.json" | tee -a "$S"
  done
fi
if step tests; then
  timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_gemm.py >"$W/test_gemm.log" 2>&1
  say "test_gemm: $(tail -n1 "$W/test_gemm.log")"
  grep -E "^pinned gemm" "$W/test_gemm.log" | sed 's/^/  /' | tee -a "$S"
  timeout 120 python3 -m pytest -q -rs -s -p no:cacheprovider tests/gpu/test_model.py -k "pin" \
    >"$W/test_model_pins.log" 2>&1
  say "test_model -k pin: $(tail -n1 "$W/test_model_pins.log")"
  grep -E "^gemm pins:|this device:" "$W/test_model_pins.log" | sed 's/^/  /' | tee -a "$S"
fi
TABLE=${TABLE:-}
MIN_ROWS=${PIN_MIN_ROWS:-0}
# the padded lengths measured: the coarse ladder in (PIN_MIN_ROWS, PIN_MAX_ROWS] (the fine ladder inherits its plans)
LADDER=$(python3 -c "from startlux_native.cuda_backend import COARSE_LADDER, ladder_lengths as L; \
print(','.join(str(m) for m in L(32768, COARSE_LADDER) if $MIN_ROWS < m <= ${PIN_MAX_ROWS:-8192}))")
if step pins; then
  if [ "$MIN_ROWS" -gt 0 ]; then  # extend the shipped table with the new lengths
    timeout "${PINS_TIMEOUT:-300}" python3 -m benchmarks.gemm_pins --rows "$LADDER" \
      --table "$FINAL/gemm_pins_added.json" --log "$W/gemm_pins_log.json" >"$W/gemm_pins.log" 2>&1
    say "gemm_pins (lengths $LADDER) rc=$?: $(tail -n1 "$W/gemm_pins.log")"
    if [ -s "$FINAL/gemm_pins_added.json" ]; then
      python3 -m benchmarks.gemm_pins merge --table startlux_native/gemm_pins/h200.json \
        --add "$FINAL/gemm_pins_added.json" --output "$FINAL/gemm_pins_h200.json" >"$W/merge.log" 2>&1
      say "merge rc=$?: $(tail -n1 "$W/merge.log")"
    else
      say "merge skipped: the bench wrote no table"
    fi
  else
    timeout "${PINS_TIMEOUT:-300}" python3 -m benchmarks.gemm_pins --max-rows "${PIN_MAX_ROWS:-8192}" \
      --table "$FINAL/gemm_pins_h200.json" --log "$W/gemm_pins_log.json" >"$W/gemm_pins.log" 2>&1
    say "gemm_pins rc=$?: $(tail -n1 "$W/gemm_pins.log")"
  fi
  grep -E "^forward" "$W/gemm_pins.log" | tee -a "$S"
  xz -k -c "$W/gemm_pins_log.json" >"$FINAL/gemm_pins_log.json.xz" 2>/dev/null
  if [ -s "$FINAL/gemm_pins_h200.json" ]; then
    mkdir -p startlux_native/gemm_pins && cp "$FINAL/gemm_pins_h200.json" startlux_native/gemm_pins/h200.json
    TABLE=$PWD/startlux_native/gemm_pins/h200.json
  fi
fi
wait "$CKPT_PID"
if step ladder; then
  if [ -z "$TABLE" ]; then say "ladder skipped: no table"; else
    timeout "${LADDER_TIMEOUT:-300}" python3 -m benchmarks.inprocess "$CKPT" --gemm-pins off --gemm-pins-b "$TABLE" \
      --graphs on --repeat "${LADDER_REPEAT:-20}" --lengths "$LADDER" --output "$FINAL/inprocess-ladder.json" \
      >"$W/inprocess-ladder.log" 2>&1
    say "inprocess ladder A/B rc=$?"
    grep -E "^ *[0-9]+ .* B " "$W/inprocess-ladder.log" | tr -s ' ' | cut -d' ' -f2,9 | tr '\n' ';' | tee -a "$S"; echo | tee -a "$S"
    KEEP=(); [ "$MIN_ROWS" -gt 0 ] && KEEP=(--keep-unmeasured)
    python3 -m benchmarks.gemm_pins filter --table "$TABLE" --inprocess "$FINAL/inprocess-ladder.json" \
      --output "$FINAL/gemm_pins_h200.json" ${KEEP[@]+"${KEEP[@]}"} >"$W/filter.log" 2>&1
    say "filter rc=$?: $(tail -n1 "$W/filter.log")"
    grep dropped "$W/filter.log" | tee -a "$S"
    mkdir -p startlux_native/gemm_pins && cp "$FINAL/gemm_pins_h200.json" startlux_native/gemm_pins/h200.json
    TABLE=$PWD/startlux_native/gemm_pins/h200.json
  fi
fi
if step inab; then
  if [ -z "$TABLE" ]; then say "inab skipped: no table"; else
    timeout 240 python3 -m benchmarks.inprocess "$CKPT" --gemm-pins off --gemm-pins-b "$TABLE" --graphs on \
      --repeat "${INAB_REPEAT:-30}" --seed "${INAB_SEED:-1234}" --lengths "${INPROCESS_LENGTHS:-128,144,160,192,256,512,896,1024,2048,3072,4096,8192}" \
      --output "$FINAL/inprocess-ab.json" >"$W/inprocess-ab.log" 2>&1
    say "inprocess A/B (A = no pins, B = $TABLE, alternated) rc=$?"
    grep -E "^arm|^ *[0-9]+ " "$W/inprocess-ab.log" | tee -a "$S"
  fi
fi
if step model; then
  timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_model.py >"$W/test_model.log" 2>&1
  say "test_model: $(tail -n1 "$W/test_model.log")"
fi
if step http; then
  ENV_A="CS1_GEMM_PINS=off" ENV_B="CS1_GEMM_PINS=$TABLE" ROUNDS=${HTTP_ROUNDS:-6} OUT=$W/http \
    timeout "${HTTP_TIMEOUT:-420}" scripts/gpu_http_ab.sh >"$W/http.log" 2>&1
  say "http rc=$?"
  cp "$W/http/ab.txt" "$FINAL/ab.txt" 2>/dev/null && grep -E "^(p50|p95|mean|agreement|gate|server)" "$FINAL/ab.txt" | tee -a "$S"
fi
say done
