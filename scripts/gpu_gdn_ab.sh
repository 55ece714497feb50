#!/usr/bin/env bash
# One H200 call that judges a GDN kernel change against the previous native/ (carried in ab_old/ with its build.sh):
# builds both, then the steps named in STEPS, in this order:
#   convsweep benchmarks/conv_runs.cu: the conv + gates launch at every run length (no library involved)
#   siluexact benchmarks/silu_exact.cu: silu_n against silu_f on every fp32 input, bit for bit (no library involved)
#   parity    benchmarks/gdn_parity.py old against new, byte for byte, at PARITY_LENGTHS (default: the script's);
#             PARITY_OLD=mid: mid against new, for two stacked levers whose second keeps the first one's bytes
#   bparity   benchmarks/build_parity.py old against new (against mid when ab_mid/ exists: the first of two
#             stacked levers is the one that must keep the bytes; BPARITY_NEW=1 also compares old against new, for
#             two stacked levers that both keep them): the whole model's letter logits, byte for byte
#             (BPARITY_LENGTHS; for a change of any kernel meant to keep every byte, e.g. attention)
#   tests     tests/gpu/test_gdn.py on the new build (default path)
#   split     the same with CS1_GDN_SPLIT_OUT=1 (the separate out kernel of smaller devices)
#   memcheck  compute-sanitizer memcheck of scripts/sanitize_driver.py at MEMCHECK_LENGTHS (default 160 640 1024
#             4096) on the new build (each length also runs one prompt over all its rows: at 160 prep makes P in one wave)
#   racecheck compute-sanitizer racecheck (shared-memory hazards) of the GDN kernels alone in scripts/sanitize_driver.py
#             at RACECHECK_LENGTHS (default 160 1024: the walk that writes O, and the walk + out kernel);
#             RACECHECK_KERNELS (a kernel-name substring, default gdn_) for another family, e.g. gated_attention
#   kt        kernel_times of old and new alternately, ROUNDS times, at LENGTHS
#   ncu       Nsight Compute durations of every GDN kernel (NCU_KERNELS, a regex, default gdn_: another family,
#             e.g. gated_attention), old and new (and mid with ab_mid/), at LENGTHS;
#             NCU_EXPECT="name;name" (as the summary prints them, e.g. "gdn_prep_mma_kernel<0, 1>") says MISSING
#             for each the new build did not launch (lever 86b's first call measured a path its cache had lost)
#   detail    the full Nsight sections (stall reasons included) of the first DETAIL_LAUNCHES (2) launches of the new
#             build's kernels matching DETAIL_KERNELS (default "gdn_(prep|walk)"; "gdn_(prep|walk|out)" with 3 launches
#             gives one layer's prep, walk and, above 640 rows, out kernel) at DETAIL_LENGTHS; NVCC_EXTRA=-lineinfo in
#             the environment gives per-line source counters
#   sources   Nsight's per-instruction stall samples (one launch, SourceCounters) of the kernels matching
#             SOURCE_KERNELS (default gdn_walk) at SOURCE_LENGTHS (default 160 2048), old then new; each read by
#             benchmarks/sass_stalls.py into the summary (segments between barriers), the pages in logs.tar.xz
#   inprocess the in-process table of old and new (one run each, the old arm from ab_old/)
#   inab      the in-process table of old (A) and new (B) in one process, calls alternated (same ABI version only)
#   inba      the same with the load order reversed (A = new, B = old: new's weights get the first allocations),
#             then per length (inab's B - A minus inba's B - A) / 2: the lever with the placement of the two
#             arms' buffers cancelled (each arm loaded first once); with ab_mid/, the three arms in reverse
#             (A = new, B = mid, C = old)
#   inaa      A = B = old (two backends on one build): the in-process A/B's own offset between two placements
#   ops       benchmarks/op_spans.py, A = old, B = new: each op's time inside eager forwards at OPS_LENGTHS
#             (default 160,2048), B - A per op (the judge of a one-op change in its real context)
#   extra     pytest of EXTRA_TESTS (GPU test files) on the new build
#   model     tests/gpu/test_model.py on the new build (reference parity, graph = eager)
#   http      LIB_A=old LIB_B=new ROUNDS=$HTTP_ROUNDS scripts/gpu_http_ab.sh (Public231, alternated rounds)
#   OUT=<folder> CS1_GIT_DESCRIBE=<commit> [OLD_DESCRIBE=<commit>] [STEPS="..."] [ROUNDS=2] [LENGTHS=128,512,2048]
#   [HTTP_ROUNDS=4] [INPROCESS_LENGTHS=128,512] [INAB_REPEAT=40] [EXTRA_TESTS="tests/gpu/..."] scripts/gpu_gdn_ab.sh
# Two stacked levers in one call: ab_mid/ (optional, carried like ab_old/: old + the first lever; the working tree is
# old + both), with MID_DESCRIBE set, becomes a third build; inab then alternates A = old, B = mid, C = new in one
# process (C's rows also give C - B: the second lever alone), ncu times all three, and http runs the three servers
# (MID_DESCRIBE names it). The test steps run on the new build only.
# Default STEPS: "parity tests split memcheck kt ncu detail inprocess". Writes $OUT/summary.txt,
# $OUT/kt-{old,new}-<i>.json, $OUT/inprocess-{old,new}.json, $OUT/ab.txt and $OUT/logs.tar.xz (every log, the HTTP
# runs included). Each step has its own timeout, and a failed step does not stop the later ones.
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_gdn_ab_out}
W=$(mktemp -d)/gdn_ab
mkdir -p "$W" "$FINAL"
. scripts/device_env.sh "$W"
ROUNDS=${ROUNDS:-2}
STEPS=" ${STEPS:-parity tests split memcheck kt ncu detail inprocess} "
step() { [[ $STEPS == *" $1 "* ]]; }
LENGTHS=${LENGTHS:-128,512,2048}
CKPT=${CKPT:-/tmp/bench4b}
S=$FINAL/summary.txt
T0=$SECONDS
say() { printf '%4ss  %s\n' $((SECONDS - T0)) "$*" | tee -a "$S"; }
finish() { tar cJf "$FINAL/logs.tar.xz" -C "$W/.." gdn_ab; }
trap finish EXIT
{ date -u; echo "commit ${CS1_GIT_DESCRIBE:-unknown}"; nvidia-smi --query-gpu=name,driver_version,clocks.sm \
  --format=csv; nvcc --version | tail -1; } >"$W/env.txt" 2>&1
cat "$W/env.txt" >>"$S"

# The old arm's Python steps run in ab_old with its own package, so the two builds may differ in ABI version. An
# ab_old of native/ and build.sh alone (the usual `git archive <old> native build.sh`) has no Python package: its
# steps then run the working tree's benchmarks against the old library (the same ABI version is then needed).
OLD_PYTHONPATH=$(echo "$PYTHONPATH" | sed "s#$PWD#$PWD/ab_old#")
arm_run() {  # arm_run old|new command...: the command in the arm's own checkout
  if [ "$1" = old ] && [ -d ab_old/benchmarks ]; then shift; (cd ab_old && PYTHONPATH=$OLD_PYTHONPATH "$@")
  else shift; "$@"; fi
}
NEW=$PWD/target/libqwen3_5_cuda.so
OLD=$PWD/ab_old/target/libqwen3_5_cuda.so
MID=""
# ab_mid/ only with MID_DESCRIBE: a warm machine keeps the ignored ab_mid/ of an earlier call (LEVERS 82's second call)
if [ -d ab_mid ] && [ -n "${MID_DESCRIBE:-}" ]; then
  MID=$PWD/ab_mid/target/libqwen3_5_cuda.so
elif [ -d ab_mid ]; then
  say "ab_mid/ is here but MID_DESCRIBE is not set: ignored (two arms, old and new)"
fi
./build.sh target 90 >"$W/build_new.log" 2>&1 &
(cd ab_old && CS1_GIT_DESCRIBE="${OLD_DESCRIBE:-old}" ./build.sh target 90) >"$W/build_old.log" 2>&1 &
[ -n "$MID" ] && (cd ab_mid && CS1_GIT_DESCRIBE="${MID_DESCRIBE:-mid}" ./build.sh target 90) >"$W/build_mid.log" 2>&1 &
wait
say "build new: $(tail -n1 "$W/build_new.log")"
say "build old: $(tail -n1 "$W/build_old.log")"
[ -n "$MID" ] && say "build mid: $(tail -n1 "$W/build_mid.log")"

need_checkpoint() {  # the bench checkpoint (random weights, seed 0), made once per machine
  [ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1
}
if step convsweep; then
  nvcc -O3 -std=c++17 -arch=sm_90a -Inative -o "$W/conv_runs" benchmarks/conv_runs.cu >"$W/conv_runs.log" 2>&1 &&
    timeout 120 "$W/conv_runs" >>"$W/conv_runs.log" 2>&1
  say "conv run-length sweep rc=$?"
  grep -vE "warning|declared but|^ *$|\^" "$W/conv_runs.log" | tee -a "$S"
fi
if step siluexact; then
  nvcc -O3 -std=c++17 -arch=sm_90a -Inative -o "$W/silu_exact" benchmarks/silu_exact.cu >"$W/silu_exact.log" 2>&1 &&
    timeout 120 "$W/silu_exact" >>"$W/silu_exact.log" 2>&1
  say "silu_exact rc=$?: $(grep -A8 "results differ" "$W/silu_exact.log" || tail -n3 "$W/silu_exact.log")"
fi
if step parity; then
  PARITY_A=$OLD
  if [ "${PARITY_OLD:-old}" = mid ]; then
    PARITY_A=${MID:-$OLD}
    [ -z "$MID" ] && say "PARITY_OLD=mid without ab_mid/: parity runs old against new"
  fi
  timeout 120 python3 -m benchmarks.gdn_parity "$PARITY_A" "$NEW" ${PARITY_LENGTHS:+--lengths "$PARITY_LENGTHS"} \
    >"$W/parity.log" 2>&1
  rc=$?  # before any command substitution below resets $?
  say "parity ($(basename "$(dirname "$(dirname "$PARITY_A")")") against new) rc=$rc: $(tail -n1 "$W/parity.log")"
fi
if step bparity; then
  need_checkpoint
  timeout 240 python3 -m benchmarks.build_parity "$OLD" "${MID:-$NEW}" "$CKPT" \
    --lengths "${BPARITY_LENGTHS:-1,63,64,65,160,640,2048,4097}" >"$W/bparity.log" 2>&1
  say "build parity rc=$?: $(tail -n1 "$W/bparity.log")"
  if [ -n "$MID" ] && [ -n "${BPARITY_NEW:-}" ]; then
    timeout 240 python3 -m benchmarks.build_parity "$OLD" "$NEW" "$CKPT" \
      --lengths "${BPARITY_LENGTHS:-1,63,64,65,160,640,2048,4097}" >"$W/bparity_new.log" 2>&1
    say "build parity old against new rc=$?: $(tail -n1 "$W/bparity_new.log")"
  fi
fi
# The test_gdn runs are correctness only (mostly float64 references on the CPU), so they run side by side; every
# timed step comes after them.
gdn_tests() {  # gdn_tests <log name> [VAR=value]: tests/gpu/test_gdn.py on the new build, in the background
  local log=$1; shift
  env "$@" CS1_LIBRARY="$NEW" timeout 200 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_gdn.py \
    >"$W/$log.log" 2>&1 &
}
step tests && gdn_tests test_gdn
step split && gdn_tests test_gdn_split CS1_GDN_SPLIT_OUT=1
wait
step tests && say "test_gdn (default path): $(tail -n1 "$W/test_gdn.log")"
step split && say "test_gdn (CS1_GDN_SPLIT_OUT=1): $(tail -n1 "$W/test_gdn_split.log")"
if step memcheck; then
  SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  CS1_LIBRARY=$NEW timeout 120 "$SAN" --tool memcheck --error-exitcode 86 --print-limit 20 \
    python3 scripts/sanitize_driver.py ${MEMCHECK_LENGTHS:-160 640 1024 4096} >"$W/sanitizer.log" 2>&1
  say "memcheck rc=$? $(grep -oE "ERROR SUMMARY: [0-9]+ error" "$W/sanitizer.log" | tail -n1)"
fi
if step racecheck; then
  SAN=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
  CS1_LIBRARY=$NEW timeout 300 "$SAN" --tool racecheck --kernel-name kns="${RACECHECK_KERNELS:-gdn_}" \
    --error-exitcode 86 --print-limit 20 \
    python3 scripts/sanitize_driver.py --no-cublas ${RACECHECK_LENGTHS:-160 1024} >"$W/racecheck.log" 2>&1
  say "racecheck rc=$? $(grep -oE "(ERROR|RACECHECK) SUMMARY: .*" "$W/racecheck.log" | tail -n1); sizes run: $(grep -c "all kernels ran" "$W/racecheck.log")"
fi

step kt && for i in $(seq 1 "$ROUNDS"); do
  for arm in old new; do
    lib=$NEW; [ $arm = old ] && lib=$OLD
    arm_run $arm timeout 90 python3 -m benchmarks.kernel_times --library "$lib" --lengths "$LENGTHS" \
      --output "$FINAL/kt-$arm-$i.json" >"$W/kt-$arm-$i.log" 2>&1
    say "kernel_times $arm $i: $(grep -E "T=|gdn_prefill|attention" "$W/kt-$arm-$i.log" | tr -s ' ' | tr '\n' ' ')"
  done
done
NCU=$(command -v ncu || echo "${CUDA_HOME:-/usr/local/cuda}/bin/ncu")
# per-kernel durations of the GDN kernels (Nsight Compute, clocks as found)
step ncu && for arm in old ${MID:+mid} new; do
  lib=$NEW; [ $arm = old ] && lib=$OLD; [ $arm = mid ] && lib=$MID
  arm_run $arm timeout 150 "$NCU" --clock-control none -k regex:"${NCU_KERNELS:-gdn_}" \
    --metrics gpu__time_duration.sum,launch__grid_size --csv --log-file "$W/ncu-$arm.csv" \
    python3 -m benchmarks.kernel_times --library "$lib" --lengths "$LENGTHS" --calls 1 --trials 1 \
    >"$W/ncu-$arm.log" 2>&1
  say "ncu $arm rc=$?"
  EXPECT=""; [ $arm = new ] && EXPECT=${NCU_EXPECT:-}
  python3 - "$W/ncu-$arm.csv" "$EXPECT" <<'PY' | tee -a "$S"
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
head, rows = rows[0], rows[1:]
k, m, v = head.index("Kernel Name"), head.index("Metric Name"), head.index("Metric Value")
unit = head.index("Metric Unit")
to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
seen = collections.defaultdict(list)
for r in rows:
    if r[m] == "gpu__time_duration.sum":
        name = r[k].removeprefix("void ").replace("<unnamed>::", "").split("(")[0]  # e.g. gdn_walk_mma_kernel<2, 1>
        seen[name].append(float(r[v].replace(",", "")) * to_us.get(r[unit], 1.0))
for name, t in seen.items():
    print(f"  {name}: {len(t)} launches, us each: {' '.join(f'{x:.1f}' for x in t[:12])}")
for name in filter(None, (n.strip() for n in sys.argv[2].split(";"))):
    print(f"  expected kernel {name}: {'ran' if name in seen else 'MISSING: the new build did not launch it'}")
PY
done
# the full Nsight sections of the first two launches matching DETAIL_KERNELS (default: one prep and one walk)
step detail && for L in ${DETAIL_LENGTHS:-128 2048}; do
  timeout 180 "$NCU" --clock-control none -k regex:"${DETAIL_KERNELS:-gdn_(prep|walk)}" \
    --launch-count "${DETAIL_LAUNCHES:-2}" --set full --import-source yes \
    --print-details all python3 -m benchmarks.kernel_times --library "$NEW" --lengths "$L" --calls 1 --trials 1 \
    >"$W/ncu-detail-$L.txt" 2>&1
  say "ncu detail T=$L rc=$? ($(grep -c "Section:" "$W/ncu-detail-$L.txt") sections)"
done
# where the kernels' warps wait, old against new: per-instruction stall samples, read by phase (sass_stalls.py)
step sources && for L in ${SOURCE_LENGTHS:-160 2048}; do
  for arm in old new; do
    lib=$NEW; [ $arm = old ] && lib=$OLD
    rep=$W/src-$arm-$L
    arm_run $arm timeout 180 "$NCU" --clock-control none -k regex:"${SOURCE_KERNELS:-gdn_walk}" --launch-count 1 \
      --section SourceCounters --section WarpStateStats --section LaunchStats -o "$rep" \
      python3 -m benchmarks.kernel_times --library "$lib" --lengths "$L" --calls 1 --trials 1 >"$rep.log" 2>&1
    rc=$?
    "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass 2>>"$rep.log" | xz >"$rep.sass.csv.xz"
    rm -f "$rep.ncu-rep"
    python3 -m benchmarks.sass_stalls "$rep.sass.csv.xz" --top 10 >"$rep.txt" 2>&1
    say "sources $arm T=$L rc=$rc (sass_stalls rc=$?)"
    sed -n '1,/^  top /p' "$rep.txt" | cut -c1-150 | tee -a "$S"
  done
done
if step inprocess; then
  need_checkpoint
  for arm in old new; do
    lib=$NEW; [ $arm = old ] && lib=$OLD
    arm_run $arm timeout 120 python3 -m benchmarks.inprocess "$CKPT" --library "$lib" --graphs on --repeat 10 \
      ${INPROCESS_LENGTHS:+--lengths "$INPROCESS_LENGTHS"} \
      --output "$FINAL/inprocess-$arm.json" >"$W/inprocess-$arm.log" 2>&1
    say "inprocess $arm rc=$?"
    grep -E "^ *[0-9]+ " "$W/inprocess-$arm.log" | head -8 | tee -a "$S"
  done
fi
# inab_run <name> <label> <benchmarks.inprocess library flags...>: one paired in-process table, inprocess-<name>.json
inab_run() {
  local name=$1 label=$2
  shift 2
  need_checkpoint
  timeout "${INAB_TIMEOUT:-240}" python3 -m benchmarks.inprocess "$CKPT" "$@" --graphs on \
    --repeat "${INAB_REPEAT:-40}" ${INPROCESS_LENGTHS:+--lengths "$INPROCESS_LENGTHS"} \
    --output "$FINAL/inprocess-$name.json" >"$W/inprocess-$name.log" 2>&1
  say "inprocess $name ($label, rotated) rc=$?"
  grep -E "^ *[0-9]+ " "$W/inprocess-$name.log" | tee -a "$S"
}
if step inab; then
  if [ -n "$MID" ]; then
    inab_run ab "A = old, B = mid, C = new; C's last column C - B" --library "$OLD" --library-b "$MID" \
      --library-c "$NEW"
  else
    inab_run ab "A = old, B = new" --library "$OLD" --library-b "$NEW"
  fi
fi
if step inba; then
  if [ -n "$MID" ]; then  # the three arms loaded in reverse: B - A = mid - new, C - B = old - mid
    inab_run ba "A = new, B = mid, C = old; C's last column C - B" --library "$NEW" --library-b "$MID" \
      --library-c "$OLD"
  else
    inab_run ba "A = new, B = old" --library "$NEW" --library-b "$OLD"
  fi
fi
step inaa && inab_run aa "A = B = old" --library "$OLD" --library-b "$OLD"
if step inab && step inba && [ -z "$MID" ]; then
  python3 -m benchmarks.load_order "$FINAL/inprocess-ab.json" "$FINAL/inprocess-ba.json" --label "new - old" \
    | tee -a "$S"
fi
if step ops; then
  need_checkpoint
  timeout 240 python3 -m benchmarks.op_spans "$CKPT" --library "$OLD" --library-b "$NEW" \
    --lengths "${OPS_LENGTHS:-160,2048}" --repeat 30 --output "$FINAL/op_spans.json" >"$W/op_spans.log" 2>&1
  say "op_spans (A = old, B = new) rc=$?"
  grep -E "T=|  [a-z]" "$W/op_spans.log" | tee -a "$S"
fi
if step extra; then
  CS1_LIBRARY=$NEW timeout "${EXTRA_TIMEOUT:-200}" python3 -m pytest -q -rs -p no:cacheprovider ${EXTRA_TESTS:-} \
    >"$W/test_extra.log" 2>&1
  say "extra tests (${EXTRA_TESTS:-}): $(tail -n1 "$W/test_extra.log")"
fi
if step model; then
  CS1_LIBRARY=$NEW timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_model.py \
    >"$W/test_model.log" 2>&1
  say "test_model: $(tail -n1 "$W/test_model.log")"
fi
if step http; then
  if [ -n "$MID" ]; then
    ARMS="A B C" DIR_A=ab_old LIB_A=$OLD LIB_B=$MID LIB_C=$NEW ROUNDS=${HTTP_ROUNDS:-4} OUT=$W/http \
      timeout "${HTTP_TIMEOUT:-300}" scripts/gpu_http_ab.sh >"$W/http.log" 2>&1
  else
    DIR_A=ab_old LIB_A=$OLD LIB_B=$NEW ROUNDS=${HTTP_ROUNDS:-4} OUT=$W/http timeout "${HTTP_TIMEOUT:-300}" \
      scripts/gpu_http_ab.sh >"$W/http.log" 2>&1
  fi
  say "http rc=$?"
  cp "$W/http/ab.txt" "$FINAL/ab.txt" 2>/dev/null && grep -E "^(p50|p95|mean|agreement|gate|server)" "$FINAL/ab.txt" | tee -a "$S"
fi
say done
