# Two commands cover a fresh machine: `make sweep` (set up + the quickstart sweep) and `make test`.
PY := .venv/bin/python
export OMP_NUM_THREADS ?= 2

.PHONY: setup test test-fast sweep train bench mutation

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest -q tests

test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

sweep: setup
	.venv/bin/xbm-tune sweep quickstart

train: setup
	.venv/bin/xbm-tune train --set dataset=toy --set model=mlp --set epochs=5

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# Mutation testing of the core modules (not in CI; hours on 2 cores): docs/ARCHITECTURE.md has the kill rates.
mutation: setup
	nice -n 19 $(PY) scripts/mutation.py $(GROUPS)
