#!/usr/bin/env bash
# scripts/study_omniglot_oneshot.sh OUT_DIR [--budget MINUTES] [--seeds N] [--data DIR] [--runs ZIP] [--set K=V]...
#
# The Omniglot one-shot study in one command (issue 52): the omniglot_oneshot sweep selected on val_oneshot_error
# (held-out alphabets), the choice refit on every class over N seeds and scored once on the 20 real runs
# (all_runs.zip), the memory comparison (no memory, XBM, XBN, PC-XBN) at that choice with paired differences, and
# OUT_DIR/summary.md. Rerun the same command to resume after a stop: every finished step is kept.
# scripts/study_omniglot_oneshot.py says what each step writes; docs/studies/omniglot_oneshot.md holds the results.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${XBM_PYTHON:-$here/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
exec "$PY" "$here/scripts/study_omniglot_oneshot.py" "$@"
