# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
# The benchmark data: $SUITE_DATA_DIR, else ../shared/data where it exists, else none (the tasks
# then read their pinned hub sources, which need the network; README, Install).
DATA    ?= $(abspath $(or $(SUITE_DATA_DIR),$(wildcard ../shared/data)))
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
	$(BIN)/ruff check suite tests benchmarks analysis  # first: seconds, where the tests take minutes
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # docs/ -> build/docs/: a dead link or a page not in nav fails (not --quiet: it hides the warnings strict counts)
	SUITE_DATA_DIR=$(DATA) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n auto --dist load --durations=15 -m 'not slurm and not coverage_sim and not cross_check'  # one test process per core (pytest-xdist): each takes a first chunk of the collection, then the next tests as it frees (docs/contributing.md); the 15 slowest tests, to keep the suite fast; the real-Slurm tests are `slurm-test`, the full coverage simulation `coverage-check`, the reference head `cross-check`

# The tier to run after each change: ruff, then every test that neither trains, reads the real
# data, starts suite processes nor simulates many studies (markers `trains`, `slow`, `faults`,
# `simulation`: tests/conftest.py, pyproject.toml), every module imported (tests/test_layout.py),
# with its line coverage of suite/stats and suite/config (docs/contributing.md gives the figures).
# `make test`, which CI runs, stays the whole suite.
FAST := not slow and not faults and not trains and not simulation and not slurm and not coverage_sim and not cross_check
test-fast: venv
	$(BIN)/ruff check suite tests benchmarks analysis
	SUITE_DATA_DIR=$(DATA) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n auto --dist load -m '$(FAST)' \
	  --cov=suite.stats --cov=suite.config --cov-report=term:skip-covered

# The launch tests against a real Slurm and PostgreSQL (tests/test_launch_slurm.py), a step of its
# own in CI (.ci/run starts both): 2-3 minutes of jobs that import the suite (docs/clusters.md), kept
# out of the 15 minutes of `make test`. Without Slurm they skip, the reason printed (-rs; they fail
# under CI=true).
slurm-test: venv
	SUITE_DATA_DIR=$(DATA) $(BIN)/python -m pytest -q -rs -n 2 --dist load -m slurm tests/test_launch_slurm.py

# The suite against reference implementations, a CI step of its own: the aggregates against rliable
# itself (tests/test_aggregate.py: rliable 1.2.0 needs arch<8 and pandas<3, so that one file runs
# on an overlay of them, leaving the suite's own pandas alone), and the default classification
# head against a plain PyTorch loop over AutoModelForSequenceClassification (marker `cross_check`:
# 10 trainings on real SST-2, about 3 minutes of a core, kept out of `make test`'s 15 minutes).
OVERLAY ?= /tmp/suite-rliable-overlay
cross-check: venv
	$(BIN)/python -m pip install -q --no-deps --target $(OVERLAY) rliable==1.2.0 'arch>=7,<8' absl-py 'pandas<3' pytz
	PYTHONPATH=$(OVERLAY) SUITE_DATA_DIR=$(DATA) $(BIN)/python -m pytest -q tests/test_aggregate.py
	SUITE_DATA_DIR=$(DATA) HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -rs -m cross_check tests/test_reference_head.py

# The coverage table the intervals' flag states (suite/stats/estimates/coverage_table.json, written
# by `python -m benchmarks.coverage_table`) simulated again at 4000 studies a cell: about 3 minutes
# of one core, a CI step of its own (make test runs its 200-study smoke).
coverage-check: venv
	$(BIN)/python -m pytest -q -p no:xdist -m coverage_sim tests/test_coverage_table.py

# The queue, resume and worker tests on the lowest Optuna pyproject allows (its floor, read from
# pyproject.toml): the suite calls private Optuna names (docs/contributing.md), so the floor is a
# tested version, not a guess; `make test` runs the newest the bound allows.
OPTUNA_FLOOR := $(shell sed -n 's/.*"optuna>=\([0-9.]*\),.*/\1/p' pyproject.toml)
FLOOR_OVERLAY ?= /tmp/suite-optuna-floor
optuna-floor: venv
	$(BIN)/python -m pip install -q --no-deps --target $(FLOOR_OVERLAY) optuna==$(OPTUNA_FLOOR)
	PYTHONPATH=$(FLOOR_OVERLAY) SUITE_DATA_DIR=$(DATA) $(BIN)/python -m pytest -q -n auto --dist load \
	  tests/test_optuna_floor.py tests/test_planned_once.py tests/faults/test_kept_records.py \
	  tests/faults/test_storage_races.py tests/faults/test_concurrent_runs.py tests/faults/test_rerun.py

.PHONY: venv run test test-fast slurm-test cross-check coverage-check optuna-floor
