# Sourced by the scripts/gpu_*.sh runs on the GPU machine (no network there): install the wheels carried in .whl/
# (fetched here with scripts/fetch_device_wheels.sh) into /tmp/site, and set the environment every run uses.
# $1: a folder for pip's log.
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    >"$1/pip.log" 2>&1 || echo "wheel install failed: see $1/pip.log"
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export CS1_LIBRARY=$PWD/target/libqwen3_5_cuda.so
