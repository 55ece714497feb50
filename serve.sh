#!/usr/bin/env bash
# The serve command: installs the runtime into .venv, then starts the /v1/systemone server.
#   ./serve.sh --demo                         tiny random-weight model on the CPU (answers are meaningless)
#   ./serve.sh --checkpoint DIR [--backend cuda --library target/libqwen3_5_cuda.so]
# Every flag is documented by ./serve.sh --help and has a CS1_* environment twin.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/venv.sh serve
exec python -m server "$@"
