"""The Optuna the tests run is the one they claim: under `make optuna-floor`, the floor pyproject
allows (its overlay first on the path), else a version inside pyproject's bound."""

from __future__ import annotations

import os
import re
from pathlib import Path

import optuna
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def test_the_optuna_under_test_lies_in_pyproject_s_bound() -> None:
    floor, bound = re.search(r'"optuna>=([\d.]+),<([\d.]+)"', (REPO / "pyproject.toml").read_text()).groups()
    running = Version(optuna.__version__)
    assert Version(floor) <= running < Version(bound)
    if "suite-optuna-floor" in os.environ.get("PYTHONPATH", ""):  # make optuna-floor
        assert running == Version(floor) and "suite-optuna-floor" in optuna.__file__
