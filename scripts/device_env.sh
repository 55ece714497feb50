# Sourced by the scripts/gpu_*.sh runs on the GPU machine (no network there): install the wheels carried in .whl/
# (fetched here with scripts/fetch_device_wheels.sh) into /tmp/site, and set the environment every run uses.
# $1: a folder for pip's log (made if missing).
mkdir -p "$1"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$1/pip.log" 2>&1 || echo "wheel install failed: see $1/pip.log"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export CS1_LIBRARY=$PWD/target/libqwen3_5_cuda.so
# The host under the GPU: HTTP p50 has moved by up to 1.5 ms between machine starts with the GPU forward unchanged
# (session 22: client - server 1.36 to 2.05 ms, tokenize 0.24 to 0.39 ms), so every run records what it ran on.
{
  echo "date: $(date -u)"; echo "nproc: $(nproc)"
  lscpu 2>/dev/null | grep -E "^(Model name|Vendor ID|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|CPU MHz|CPU max MHz|Hypervisor)"
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  echo "cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)"
  echo "loadavg: $(cat /proc/loadavg)"
} >"$1/host.txt" 2>&1
