# Two commands cover a fresh machine: `make sweep` (set up + the quickstart sweep) and `make test`.
PY := .venv/bin/python
export OMP_NUM_THREADS ?= 2

.PHONY: setup test test-fast sweep train bench browser mutation

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

# The browser check (tests/tune/test_browser.py, scripts/screenshots.py): Debian's chromium driven by playwright.
browser: setup
	@[ -x /usr/bin/chromium ] || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)
	XBM_BROWSER_TEST=1 $(PY) -m pytest -q tests/tune/test_browser.py

# Mutation testing of the core modules (not in CI; hours on 2 cores): docs/ARCHITECTURE.md has the kill rates.
mutation: setup
	nice -n 19 $(PY) scripts/mutation.py $(GROUPS)
