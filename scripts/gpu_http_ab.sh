#!/usr/bin/env bash
# Interleaved HTTP A/B of two library builds on one machine: both servers stay up on the same GPU (one request at a
# time reaches either), and the measured traversals alternate A, B, A, B, ... so that drift of the machine and the
# client hits both arms alike (separate server starts moved the same code's Public231 p50 by up to 0.5 ms).
#   OUT=<folder> LIB_A=<a.so> LIB_B=<b.so> [ROUNDS=3] [MANIFEST=...] [CKPT=/tmp/bench4b] scripts/gpu_http_ab.sh
# LIB_A / LIB_B default to target/libqwen3_5_cuda.so; ENV_A / ENV_B add environment settings to one server (e.g.
# ENV_A="CS1_TOKEN_CACHE=0" against the default), so a host-side lever is judged the same way.
# (BACKEND=reference with a small CKPT and META_SET="--set gpu=none --set driver=none --set checkpoint_revision=x"
# runs the same steps without a GPU: a dry run of the script itself.)
# Writes $OUT/ab.txt (per-traversal summaries, then bench.py compare A vs B over all traversals, and the server-side
# medians of each arm) and $OUT/ab.tgz (runs and server logs).
set -uo pipefail
cd "$(dirname "$0")/.."
FINAL=${OUT:-$PWD/gpu_http_ab_out}
W=$(mktemp -d)/ab
R=$W/results
mkdir -p "$R" "$FINAL"
. scripts/device_env.sh "$W"
CKPT=${CKPT:-/tmp/bench4b}
M=${MANIFEST:-benchmarks/manifests/public231.jsonl}
ROUNDS=${ROUNDS:-3}
T=$FINAL/ab.txt
pids=()
finish() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  tar czf "$FINAL/ab.tgz" -C "$W/.." ab
}
trap finish EXIT
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1

port() { [ "$1" = A ] && echo 8010 || echo 8011; }
LIB_A=${LIB_A:-$PWD/target/libqwen3_5_cuda.so} LIB_B=${LIB_B:-$PWD/target/libqwen3_5_cuda.so}
for arm in A B; do
  lib=LIB_$arm extra=ENV_$arm
  [ -f "${!lib}" ] || { echo "$lib is not a file: '${!lib}'" | tee -a "$T"; exit 2; }
  echo "arm $arm: library ${!lib}, environment '${!extra:-}'" | tee -a "$T"
  env ${!extra:-} python3 -m server --checkpoint "$CKPT" --backend "${BACKEND:-cuda}" --library "${!lib}" \
    --port "$(port $arm)" >"$W/server-$arm.log" 2>&1 &
  pids+=($!)
done
for arm in A B; do
  for ((i = 0; i < 400; i++)); do curl -sf "localhost:$(port $arm)/ready" >/dev/null && break; sleep 1; done
  curl -sf "localhost:$(port $arm)/ready" >/dev/null || { echo "server $arm not ready" | tee -a "$T"; exit 1; }
  curl -s "localhost:$(port $arm)/info" >"$R/info-$arm.json"
  python3 benchmarks/metadata.py --output "$R/meta-$arm.json" --manifest "$M" --checkpoint "$CKPT" \
    --endpoint "http://127.0.0.1:$(port $arm)" --arm "$arm" \
    ${CS1_GIT_DESCRIBE:+--set "commit=$CS1_GIT_DESCRIBE"} ${META_SET:-} >"$W/meta-$arm.log" 2>&1
done
run() {  # arm, phase, output name
  python3 benchmarks/bench.py run "$M" --endpoint "http://127.0.0.1:$(port "$1")" --model jev-latest \
    --metadata "$R/meta-$1.json" --concurrency 1 --warmup 5 --score-decimals 6 --phase "$2" --output "$R/$3" \
    >"$W/bench-$3.log" 2>&1
}
run A feasibility A-feas && run B feasibility B-feas || { echo "feasibility failed (ab.tgz)" | tee -a "$T"; exit 1; }
for ((r = 1; r <= ROUNDS; r++)); do
  for arm in A B; do
    run "$arm" measured "$arm-t$r"
    echo "$arm round $r: $(python3 benchmarks/bench.py summary "$R/$arm-t$r" | grep -E "latency \(ok\)")" | tee -a "$T"
  done
done
joined() { ls -d "$R/$1"-t* | paste -sd,; }
python3 benchmarks/bench.py compare "$(joined A)" "$(joined B)" | tee -a "$T"
for arm in A B; do  # the server's own medians: what the change moved, without the client
  python3 - "$W/server-$arm.log" "$arm" <<'EOF' | tee -a "$T"
import re, statistics, sys
fw, tot = [], []
for line in open(sys.argv[1]):
    if "/v1/systemone" in line and "status=200" in line:
        tot.append(float(re.search(r"total_ms=([\d.]+)", line).group(1)))
        fw.append(float(re.search(r"forward:([\d.]+)", line).group(1)))
print(f"server {sys.argv[2]}: {len(tot)} requests, median total {statistics.median(tot):.3f} ms, "
      f"forward {statistics.median(fw):.3f} ms")
EOF
done
