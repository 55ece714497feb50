#!/usr/bin/env bash
# The first device call of a session: the card decides what it runs. On an H200, the record of main (Public231 over
# HTTP, the three arms, two traversals; the three-question 891-token manifest, native only; the in-process ladder at
# 128 / 1024 / 8192 tokens). On any other card, LEVER_CMD (a lever's A/B, usually scripts/gpu_gdn_ab.sh with its
# knobs), run as is from the repository root with OUT set.
#   OUT=<folder> MAIN=<commit> [LEVER_CMD="..."] [FORCE=record|lever] scripts/gpu_first_call.sh
# A tree that holds a lever under test carries main's native/ and build.sh as ab_old/ (`git archive main native
# build.sh | tar x -C ab_old`): the record copies them over the tree first, so it is of main. Returns at most four
# files ($OUT comes back with eight at most): first_call.log, and for the record record.tar (the two HTTP folders and
# their logs) and ladder.log; LEVER_CMD writes its own.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT=<folder> is required}" "${MAIN:?MAIN=<main commit> is required}"
LOG=$OUT/first_call.log
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)
echo "$(date -u +%T) card: $GPU" | tee "$LOG"
mode=${FORCE:-}
if [ -z "$mode" ]; then
  case "$GPU" in *H200*) mode=record ;; *) mode=lever ;; esac
fi
if [ "$mode" = record ]; then
  if [ -d ab_old/native ]; then
    rm -rf native build.sh && cp -r ab_old/native ab_old/build.sh . && echo "record: native/ from ab_old/" | tee -a "$LOG"
  fi
  rm -rf /tmp/bench4b target ab_old ab_mid
  export CS1_GIT_DESCRIBE=$MAIN
  W=$OUT/record
  mkdir -p "$W"
  OUT=$W/p231 TRAVERSALS=2 DEADLINE_S=370 scripts/gpu_http_bench.sh >"$W/p231.log" 2>&1
  echo "$(date -u +%T) Public231 rc=$?" | tee -a "$LOG"
  ARMS=native MANIFEST=benchmarks/manifests/three-fields-891.jsonl TRAVERSALS=2 OUT=$W/tf DEADLINE_S=140 \
    scripts/gpu_http_bench.sh >"$W/tf.log" 2>&1
  echo "$(date -u +%T) three fields rc=$?" | tee -a "$LOG"
  . scripts/device_env.sh /tmp/first_call_env
  timeout 40 python3 -m benchmarks.inprocess /tmp/bench4b --graphs on --lengths 128,1024,8192 --repeat 10 \
    >"$OUT/ladder.log" 2>&1
  echo "$(date -u +%T) ladder rc=$?" | tee -a "$LOG"
  tar cf "$OUT/record.tar" -C "$OUT" record && rm -rf "$W"
elif [ -n "${LEVER_CMD:-}" ]; then
  echo "$(date -u +%T) lever: $LEVER_CMD" | tee -a "$LOG"
  OUT=$OUT bash -c "$LEVER_CMD" >>"$LOG" 2>&1
  echo "$(date -u +%T) lever rc=$?" | tee -a "$LOG"
else
  echo "not an H200 and no LEVER_CMD: nothing to run" | tee -a "$LOG"
fi
