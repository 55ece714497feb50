#!/usr/bin/env bash
# A forward setting off and on in ONE H200 build (the setting is the only difference): SETTING=down-split (lever 51,
# the default: the down projection's K split), gate-in-prep (lever 58: the attention gate's sigmoid in attn_prep) or
# tail-rows (lever 60: the last layer's tail on the read-out rows only) or tail-attention (lever 61: the last
# attention layer at the read-out rows only), tail-query (lever 62: its q / gate projection there too) or
# gdn-norm (lever 65: each GDN layer's gated RMSNorm inside the prefill's out kernel, cs1_gdn_prefill_norm) or
# fine-ladder (lever 105: 64-row padding steps up to 4,096 rows, GEMM plans of the coarse length above).
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [SETTING=down-split] [STEPS="tests memcheck ops inab inba http"]
#   [INPROCESS_LENGTHS=...] [INAB_REPEAT=60] [OPS_LENGTHS=128,160] [ROUNDS=4] [SKIP_BUILD=1] scripts/gpu_down_split_ab.sh
# Steps:
#   tests     pytest, per setting: down-split: test_gemm's and test_norm's split / partials tests, test_model's
#             split, graph and 4B numpy reference tests (the 4B at 100 tokens runs the split); gate-in-prep:
#             test_attention, test_elementwise, test_model's graph and 4B numpy reference tests
#             tail-rows: test_readout_kernel and all of test_model; tail-attention: test_attention_rows and
#             all of test_model; tail-query: all of test_model; gdn-norm: test_gdn_norm and all of test_model;
#             fine-ladder: all of test_model
#   (http: down-split, tail-rows, tail-attention, tail-query, gdn-norm and fine-ladder, the settings the server has
#   a flag for)
#   memcheck  compute-sanitizer memcheck of scripts/sanitize_driver.py 160 640 1024 (the split on at 160)
#   ops       benchmarks/op_spans.py, A = off, B = auto, at OPS_LENGTHS
#   inab      benchmarks/inprocess.py, A = off, B = auto (the largest logit difference between the arms per length)
#   inba      the same with the arms loaded in the other order (A = auto, B = off); with inab, the lever's delta
#             with the load order cancelled
#   http      scripts/gpu_http_ab.sh: three servers of this build, A = C = CS1_<SETTING>=off, B = auto
# Writes $OUT/summary.txt, $OUT/inprocess-{ab,ba}.json, $OUT/op_spans.json, $OUT/ab.txt, $OUT/logs.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_down_split_ab_out}
W=$(mktemp -d)/split_ab
mkdir -p "$W" "$FINAL"
. scripts/device_env.sh "$W"
STEPS=" ${STEPS:-tests memcheck ops inab inba} "
SETTING=${SETTING:-down-split}
case $SETTING in
  down-split) TESTS=(tests/gpu/test_gemm.py tests/gpu/test_norm.py tests/gpu/test_model.py -k
                     "split or partials or graph or numpy_reference") ;;
  gate-in-prep) TESTS=(tests/gpu/test_attention.py tests/gpu/test_elementwise.py tests/gpu/test_model.py -k
                       "not test_model or graph or numpy_reference") ;;
  tail-rows) TESTS=(tests/gpu/test_readout_kernel.py tests/gpu/test_model.py) ;;
  tail-attention) TESTS=(tests/gpu/test_attention_rows.py tests/gpu/test_model.py) ;;
  tail-query) TESTS=(tests/gpu/test_model.py) ;;
  gdn-norm) TESTS=(tests/gpu/test_gdn_norm.py tests/gpu/test_model.py) ;;
  fine-ladder) TESTS=(tests/gpu/test_model.py) ;;
  *) echo "SETTING must be down-split, gate-in-prep, tail-rows, tail-attention, tail-query, gdn-norm or fine-ladder" \
       >&2; exit 2 ;;
esac
step() { [[ $STEPS == *" $1 "* ]]; }
CKPT=${CKPT:-/tmp/bench4b}
S=$FINAL/summary.txt
T0=$SECONDS
say() { printf '%4ss  %s\n' $((SECONDS - T0)) "$*" | tee -a "$S"; }
finish() { tar cJf "$FINAL/logs.tar.xz" -C "$W/.." split_ab; }
trap finish EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}, setting $SETTING"; nvidia-smi --query-gpu=name,driver_version,clocks.sm \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1
cat "$W/env.txt" >>"$S"
if [ -n "${SKIP_BUILD:-}" ] && [ -f target/libqwen3_5_cuda.so ]; then  # a warm machine's build of this commit
  say "build: SKIP_BUILD, reusing target/libqwen3_5_cuda.so"
else
  ./build.sh target 90 >"$W/build.log" 2>&1
  say "build: $(tail -n1 "$W/build.log")"
fi
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1 &
CK=$!
if step tests; then
  timeout 420 python3 -m pytest -q -rs -p no:cacheprovider "${TESTS[@]}" >"$W/tests.log" 2>&1
  say "tests rc=$?: $(tail -n1 "$W/tests.log")"
fi
if step memcheck; then
  SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  timeout 150 "$SAN" --tool memcheck --error-exitcode 86 --print-limit 20 \
    python3 scripts/sanitize_driver.py 160 640 1024 >"$W/sanitizer.log" 2>&1
  say "memcheck rc=$? $(grep -oE "ERROR SUMMARY: [0-9]+ error" "$W/sanitizer.log" | tail -n1)"
fi
wait $CK
if step ops; then
  timeout 240 python3 -m benchmarks.op_spans "$CKPT" "--$SETTING" off "--$SETTING-b" auto \
    --lengths "${OPS_LENGTHS:-128,160}" --repeat 30 --output "$FINAL/op_spans.json" >"$W/op_spans.log" 2>&1
  say "op_spans (A = off, B = auto) rc=$?"
  grep -E "T=|  [a-z]" "$W/op_spans.log" | tee -a "$S"
fi
inab_run() {  # inab_run <name> <label> <inprocess flags...>
  local name=$1 label=$2
  shift 2
  timeout "${INAB_TIMEOUT:-240}" python3 -m benchmarks.inprocess "$CKPT" "$@" --graphs on \
    --repeat "${INAB_REPEAT:-60}" --lengths "${INPROCESS_LENGTHS:-128,160,256,512}" \
    --output "$FINAL/inprocess-$name.json" >"$W/inprocess-$name.log" 2>&1
  say "inprocess $name ($label, rotated) rc=$?"
  grep -E "^arm|^ *[0-9]+ " "$W/inprocess-$name.log" | tee -a "$S"
  python3 - "$FINAL/inprocess-$name.json" <<'PY' | tee -a "$S"
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r.get("arm") == "B"]
print("  max |dlogit| B vs A: " + ", ".join(f"{r['tokens']} {r['max_abs_dlogit_vs_a']:.3e}" for r in rows))
PY
}
step inab && inab_run ab "A = off, B = auto" "--$SETTING" off "--$SETTING-b" auto
step inba && inab_run ba "A = auto, B = off" "--$SETTING" auto "--$SETTING-b" off
if step inab && step inba; then
  python3 -m benchmarks.load_order "$FINAL/inprocess-ab.json" "$FINAL/inprocess-ba.json" --label "on - off" \
    | tee -a "$S"
fi
ENV_NAME=CS1_$(echo "$SETTING" | tr a-z- A-Z_)  # the server's environment twin of the setting's flag
if step http && [[ $SETTING == down-split || $SETTING == tail-rows || $SETTING == tail-attention \
                  || $SETTING == tail-query || $SETTING == gdn-norm || $SETTING == fine-ladder ]]; then
  ARMS="A B C" ENV_A="$ENV_NAME=off" ENV_B="$ENV_NAME=auto" ENV_C="$ENV_NAME=off" \
    ROUNDS=${ROUNDS:-4} OUT=$FINAL SKIP_BUILD=1 scripts/gpu_http_ab.sh >"$W/http.log" 2>&1
  say "http rc=$?"
  tail -n 40 "$W/http.log" | tee -a "$S"
fi
say "done"
