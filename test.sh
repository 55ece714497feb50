#!/usr/bin/env bash
# The test command: installs everything into .venv, then runs ruff and the whole pytest suite.
# GPU tests skip (with the reason) when no GPU or no built library is present.
#   ./test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")"
. scripts/venv.sh test
echo "== ruff check"
ruff check .
echo "== pytest"
exec python -m pytest -q -rs "$@"
