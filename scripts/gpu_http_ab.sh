#!/usr/bin/env bash
# Interleaved HTTP A/B(/C/...) of library builds or server settings on one machine: every arm's server stays up on
# the same GPU (one request at a time reaches any of them), and the measured traversals alternate (A, B, C), then
# (B, C, A), ...: the order rotates every round, so that drift of the machine and the client and the place in a
# round hit all arms alike (separate server starts moved the same code's Public231 p50 by up to 0.5 ms).
#   OUT=<folder> [ARMS="A B"] [LIB_A=<a.so>] [LIB_B=<b.so>] [ENV_B="..."] [ROUNDS=3] [MANIFEST=...]
#   [CKPT=/tmp/bench4b] scripts/gpu_http_ab.sh
# ARMS names the arms (default "A B"; the first is the baseline every other arm is compared with). LIB_<arm>
# defaults to target/libqwen3_5_cuda.so; DIR_<arm> runs that arm's server from another checkout (its own package,
# so builds of two ABI versions compare); ENV_<arm> adds environment settings to one server (e.g.
# ENV_B="CS1_TOKEN_CACHE=0"), so a host-side lever is judged the same way. Arm i listens on port 8010 + i.
# SERVE_<arm> runs another server module with the same flags (e.g. SERVE_B="benchmarks.host_path serve": the instant
# fake backend, with the checkpoint's tokenizer; ENV_B="HOST_PATH_FAKE_FORWARD=5:poll" gives it a fake forward).
# BURN_<arm>=n keeps n lowest-priority busy loops running during that arm's traversals (a probe of the machine's
# idle wake-up latency: the same server with some CPUs kept awake).
# (BACKEND=reference with a small CKPT and META_SET="--set gpu=none --set driver=none --set checkpoint_revision=x"
# runs the same steps without a GPU: a dry run of the script itself.)
# Writes $OUT/ab.txt (per-traversal summaries, bench.py compare of the first arm against each other arm over all
# traversals, and each arm's server-side medians stage by stage) and $OUT/ab.tar.xz (runs and server logs; xz,
# because every run repeats the manifest's requests: gzip left 7 MB for four arms).
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
: >"$T"  # a fresh report (tee -a below appends)
pids=()
finish() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  wait 2>/dev/null
  tar cJf "$FINAL/ab.tar.xz" -C "$W/.." ab
}
trap finish EXIT
[ -f "$CKPT/config.json" ] || python3 benchmarks/make_bench_checkpoint.py "$CKPT" --seed 0 >"$W/checkpoint.log" 2>&1

ARMS=(${ARMS:-A B})
port() {  # arm -> 8010 + its index in ARMS
  local i
  for i in "${!ARMS[@]}"; do [ "${ARMS[$i]}" = "$1" ] && { echo $((8010 + i)); return; }; done
}
for arm in "${ARMS[@]}"; do
  lib=LIB_$arm extra=ENV_$arm
  printf -v "$lib" '%s' "${!lib:-$PWD/target/libqwen3_5_cuda.so}"
  [ -f "${!lib}" ] || { echo "$lib is not a file: '${!lib}'" | tee -a "$T"; exit 2; }
  serve=SERVE_$arm
  echo "arm $arm: library ${!lib}, environment '${!extra:-}', server ${!serve:-server}, port $(port "$arm")" \
    | tee -a "$T"
  dir=DIR_$arm  # the checkout whose server package this arm runs (default: this one)
  src=$(cd "${!dir:-.}" && pwd)
  (cd "$src" && PYTHONPATH=$(echo "$PYTHONPATH" | sed "s#$PWD#$src#") exec env ${!extra:-} python3 -m ${!serve:-server} \
    --checkpoint "$CKPT" --backend "${BACKEND:-cuda}" --library "${!lib}" --port "$(port "$arm")") \
    >"$W/server-$arm.log" 2>&1 &
  pids+=($!)
done
for arm in "${ARMS[@]}"; do
  for ((i = 0; i < 400; i++)); do curl -sf "localhost:$(port "$arm")/ready" >/dev/null && break; sleep 1; done
  curl -sf "localhost:$(port "$arm")/ready" >/dev/null || { echo "server $arm not ready" | tee -a "$T"; exit 1; }
  curl -s "localhost:$(port "$arm")/info" >"$R/info-$arm.json"
  echo "arm $arm: $(grep -o '"build_info":"[^"]*"' "$R/info-$arm.json")" | tee -a "$T"
  lib=LIB_$arm  # target/ may be an earlier call's build on a warm machine: check the commit it reports
  if [ "${!lib}" = "$PWD/target/libqwen3_5_cuda.so" ] && [ -n "${CS1_GIT_DESCRIBE:-}" ] \
    && ! grep -q "git=$CS1_GIT_DESCRIBE\"" "$R/info-$arm.json"; then
    echo "arm $arm: target/ is not commit $CS1_GIT_DESCRIBE (build it first)" | tee -a "$T"; exit 2
  fi
  python3 benchmarks/metadata.py --output "$R/meta-$arm.json" --manifest "$M" --checkpoint "$CKPT" \
    --endpoint "http://127.0.0.1:$(port "$arm")" --arm "$arm" \
    ${CS1_GIT_DESCRIBE:+--set "commit=$CS1_GIT_DESCRIBE"} ${META_SET:-} >"$W/meta-$arm.log" 2>&1
done
run() {  # arm, phase, output name
  python3 benchmarks/bench.py run "$M" --endpoint "http://127.0.0.1:$(port "$1")" --model jev-latest \
    --metadata "$R/meta-$1.json" --concurrency 1 --warmup 5 --score-decimals 6 --phase "$2" --output "$R/$3" \
    >"$W/bench-$3.log" 2>&1
}
for arm in "${ARMS[@]}"; do
  run "$arm" feasibility "$arm-feas" || { echo "feasibility of $arm failed (ab.tar.xz)" | tee -a "$T"; exit 1; }
done
for ((r = 1; r <= ROUNDS; r++)); do
  # round r starts with arm (r - 1) mod n: every arm runs first as often as second (session 8 measured the arm in
  # second place ~0.1 ms slower at p50 with the same order in every round)
  order=("${ARMS[@]:$(((r - 1) % ${#ARMS[@]}))}" "${ARMS[@]:0:$(((r - 1) % ${#ARMS[@]}))}")
  for arm in "${order[@]}"; do
    burn=BURN_$arm spinners=()
    for ((k = 0; k < ${!burn:-0}; k++)); do nice -n 19 sh -c 'while :; do :; done' & spinners+=($!); done
    run "$arm" measured "$arm-t$r"
    [ ${#spinners[@]} -gt 0 ] && { kill "${spinners[@]}"; wait "${spinners[@]}" 2>/dev/null; }
    echo "$arm round $r: $(python3 benchmarks/bench.py summary "$R/$arm-t$r" | grep -E "latency \(ok\)")" | tee -a "$T"
  done
done
joined() { ls -d "$R/$1"-t* | paste -sd,; }
for arm in "${ARMS[@]:1}"; do
  echo "== ${ARMS[0]} vs $arm" | tee -a "$T"
  python3 benchmarks/bench.py compare "$(joined "${ARMS[0]}")" "$(joined "$arm")" | tee -a "$T"
done
for arm in "${ARMS[@]}"; do  # the client's remainder: client latency minus the server's own total, request by request
  echo "== $arm: client - server" | tee -a "$T"
  python3 -m benchmarks.host_path gap $(ls -d "$R/$arm"-t* | sort -V) "$W/server-$arm.log" | tee -a "$T"
done
for arm in "${ARMS[@]}"; do  # the server's own medians: what the change moved, without the client
  python3 - "$W/server-$arm.log" "$arm" <<'EOF' | tee -a "$T"
import re, statistics, sys
stages, tot = {}, []
for line in open(sys.argv[1]):
    if "/v1/systemone" in line and "status=200" in line:
        tot.append(float(re.search(r"total_ms=([\d.]+)", line).group(1)))
        timing = re.search(r"timing=(\S+)", line)
        for name, ms in re.findall(r"([a-z_]+):([\d.]+)", timing.group(1) if timing else ""):
            stages.setdefault(name, []).append(float(ms))
med = ", ".join(f"{k} {statistics.median(v):.3f}" for k, v in stages.items())
print(f"server {sys.argv[2]}: {len(tot)} requests, median total {statistics.median(tot):.3f} ms; stages (ms): {med}")
EOF
done
