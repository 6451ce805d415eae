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
echo "setting up .venv (first run or dependencies changed; about a minute)"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# uv (pinned in constraints.txt, from the registry) fills .venv with the same versions as pip: 91 s from cold
# caches where pip took 4 min 17 s on this 2-core machine (2026-11-28/29); pip does it when uv cannot be installed.
# uv reads no pip.conf: it takes the packages from the registry (PyPI), as pip did for every one this project pins.
# --compile-bytecode: pip compiles the .pyc files at install and uv does not; where PYTHONDONTWRITEBYTECODE=1 (this
# machine) nothing writes them later, so every new process (each Ray worker, trial, subprocess) compiled torch and
# Ray again from source: the whole suite took 55 min instead of about 30, test_pbt.py 162 s against 64 s with them.
# The extras beside dev: viewers (tensorboard, optuna-dashboard: `make sweep` prints their commands) and cmaes (--search cmaes).
if .venv/bin/python -m pip install -qq -c constraints.txt uv; then  # -qq: not the local indexes' "no uv here" warnings
  .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -c constraints.txt -e ".[dev,viewers,cmaes]"
else
  echo "uv could not be installed: pip fills .venv instead (slower)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev,viewers,cmaes]"
fi
echo "$want" > "$stamp"
