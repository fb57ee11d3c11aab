# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
DATA    ?= $(or $(SUITE_DATA_DIR),../shared/data)
TASK    ?= tasks/ner.yaml
PROFILE ?= default
# One single-threaded worker per core: ~1.2x faster than one worker x all cores (benchmarks/RESULTS.md).
WORKERS ?= auto

$(BIN)/suite: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[dev]'
	touch $@

venv: $(BIN)/suite

run: venv
	SUITE_DATA_DIR=$(DATA) $(BIN)/python -m suite run $(TASK) --profile $(PROFILE) --workers $(WORKERS)

test: venv
	SUITE_DATA_DIR=$(DATA) $(BIN)/python -m pytest -q
	$(BIN)/ruff check suite tests benchmarks analysis

.PHONY: venv run test
