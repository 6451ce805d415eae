#!/usr/bin/env bash
# Idempotent set-up: a virtual environment at .venv, filled from constraints.txt.
# It is rebuilt only when missing or when pyproject.toml / constraints.txt changed since the last fill.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.xbm-tune-stamp
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "setting up .venv (first run or dependencies changed; a few minutes)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
echo "$want" > "$stamp"
