#!/usr/bin/env bash
# H200 HTTP run (one device call): a manifest (Public231 by default) at concurrency 1 through the native server and
# through the reference arm (transformers + flash-linear-attention, CUDA-graph mode and eager mode) on the same GPU, then compare.
#   OUT=<log folder> scripts/gpu_http_bench.sh     ($OUT/http_bench.tgz holds every log and run; summary last)
# Knobs: MANIFEST (default benchmarks/manifests/public231.jsonl; also three-fields-891.jsonl), TRAVERSALS
# (measured passes per arm, default 3), ARMS (default "native ref-graph ref-eager"), DEADLINE_S
# (no arm or traversal starts after it; what ran is packed either way), CS1_GIT_DESCRIBE (the commit, where the
# device copy has no git history; the native arm stops unless its library reports that commit), SKIP_BUILD=1 (reuse
# target/ as built by an earlier command of the same call: a warm machine keeps an earlier call's target/, so the
# library is rebuilt by default).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FINAL=${OUT:-$ROOT/gpu_http_out}
OUT=$(mktemp -d)/http_bench  # everything lands here, packed into $FINAL/http_bench.tgz at the end
mkdir -p "$OUT" "$FINAL"
. scripts/device_env.sh "$OUT"
CKPT=${CKPT:-/tmp/bench4b}
M=${MANIFEST:-benchmarks/manifests/public231.jsonl}
R=$OUT/results
mkdir -p "$R"
TRAVERSALS=${TRAVERSALS:-3}
pack() {  # also on SIGTERM from an outer timeout: what ran so far comes back
  (cd "$OUT/.." && tar czf "$FINAL/http_bench.tgz" http_bench)
  cat "$OUT"/summary-*.txt "$OUT"/compare-*.txt >"$FINAL/summary.txt" 2>/dev/null
  jobs -p | xargs -r kill 2>/dev/null
}
trap pack EXIT
DEADLINE_S=${DEADLINE_S:-100000}  # no new arm or traversal starts after this many seconds of the script
ARMS=${ARMS:-native ref-graph ref-eager}

if [ -n "${SKIP_BUILD:-}" ] && [ -f target/libqwen3_5_cuda.so ]; then
  echo "SKIP_BUILD: reusing target/libqwen3_5_cuda.so"
else
  ./build.sh target 90 >"$OUT/build.log" 2>&1 || { tail "$OUT/build.log"; exit 1; }
fi
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$OUT/checkpoint.log" 2>&1

wait_ready() {  # port, pid, limit seconds
  local i
  for ((i = 0; i < $3; i++)); do
    curl -sf "localhost:$1/ready" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 1
  done
  return 1
}

bench_arm() {  # arm name, port, server command...
  local arm=$1 port=$2 pid s=$SECONDS t
  shift 2
  "$@" --port "$port" >"$OUT/server-$arm.log" 2>&1 &
  pid=$!
  if ! wait_ready "$port" "$pid" 400; then
    echo "$arm: server not ready (see server-$arm.log)"; tail -n 20 "$OUT/server-$arm.log"; kill "$pid" 2>/dev/null
    return 1
  fi
  echo "$arm ready after $((SECONDS - s)) s"
  curl -s "localhost:$port/info" >"$R/info-$arm.json"
  if [ "$arm" = native ] && [ -n "${CS1_GIT_DESCRIBE:-}" ] \
    && ! grep -q "git=$CS1_GIT_DESCRIBE\"" "$R/info-$arm.json"; then
    echo "$arm: the library is not commit $CS1_GIT_DESCRIBE: $(grep -o '"build_info":"[^"]*"' "$R/info-$arm.json")"
    kill "$pid"; wait "$pid" 2>/dev/null
    return 1
  fi
  python3 benchmarks/metadata.py --output "$R/meta-$arm.json" --manifest $M --checkpoint "$CKPT" \
    --endpoint "http://127.0.0.1:$port" --arm "$arm" \
    ${CS1_GIT_DESCRIBE:+--set "commit=$CS1_GIT_DESCRIBE"} >"$OUT/meta-$arm.log" 2>&1
  local common=(--endpoint "http://127.0.0.1:$port" --model jev-latest --metadata "$R/meta-$arm.json"
                --concurrency 1 --warmup 5 --score-decimals 6)
  python3 benchmarks/bench.py run $M "${common[@]}" --phase feasibility --output "$R/$arm-c1-feas" \
    >"$OUT/bench-$arm-feas.log" 2>&1
  for ((t = 1; t <= TRAVERSALS; t++)); do
    [ $SECONDS -lt "$DEADLINE_S" ] || { echo "$arm: deadline reached before traversal $t"; break; }
    python3 benchmarks/bench.py run $M "${common[@]}" --phase measured --output "$R/$arm-c1-t$t" \
      >"$OUT/bench-$arm-t$t.log" 2>&1
  done
  kill -TERM "$pid"; wait "$pid" 2>/dev/null
  local dirs
  dirs=$(ls -d "$R/$arm"-c1-t* | paste -sd,)
  python3 benchmarks/bench.py summary "$dirs" | tee "$OUT/summary-$arm.txt" | tail -n 12
}

for arm in $ARMS; do
  [ $SECONDS -lt "$DEADLINE_S" ] || { echo "deadline reached: $arm not run"; continue; }
  case $arm in
    native) bench_arm native 8000 python3 -m server --checkpoint "$CKPT" --backend cuda ;;
    ref-graph) bench_arm ref-graph 8001 python3 benchmarks/reference_server.py "$CKPT" --mode graph --graph-rows 1 ;;
    ref-eager) bench_arm ref-eager 8002 python3 benchmarks/reference_server.py "$CKPT" --mode eager ;;
  esac
done
join() { ls -d "$R/$1"-c1-t* 2>/dev/null | paste -sd,; }
for ref in ref-graph ref-eager; do
  if [ -n "$(join native)" ] && [ -n "$(join $ref)" ]; then
    echo "=== compare $ref (A) vs native (B)"
    python3 benchmarks/bench.py compare "$(join $ref)" "$(join native)" | tee "$OUT/compare-$ref.txt" | tail -n 15
  fi
done
