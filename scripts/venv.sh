# Sourced by test.sh / serve.sh: create .venv once and (re)install the package when pyproject.toml changed.
# $1 = "test" installs the test extra too.
extra=""
[ "${1:-}" = "test" ] && extra="[test]"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=".venv/.installed${extra}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".${extra}"
  touch "$stamp"
fi
. .venv/bin/activate
export TOKENIZERS_PARALLELISM=false
