"""Budgets for small data: each setting's optimizer steps against the cited floor
(suite/study/budget.py; docs/sweeps.md, Budgets for small data)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from suite.config.sweep import load_sweep
from suite.config.task import load_task
from suite.study.budget import STEPS_FLOOR, Budget, budgets, floor_warning, steps_line, steps_of
from suite.study.plan import plan_trials
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


class _Data:
    """A task's data as `budgets` reads it: each (size, subsample seed)'s training features."""

    def __init__(self, counts: dict[tuple[Any, int], int]) -> None:
        self.counts = counts

    def train_indices(self, size: Any, subsample: int) -> np.ndarray:
        return np.arange(self.counts[size, subsample])

    def features(self, split: str, indices: np.ndarray) -> list[int]:
        return list(indices)


def _plans(sweep: str, profile: str, size: str | int) -> list:
    task = load_task(REPO / "tasks/sst2.yaml", sets={"sizes": [size]})
    return plan_trials(task, load_sweep(REPO / f"sweeps/{sweep}.yaml", profile))


def test_the_adapters_sweep_trains_each_recipe_past_the_floor_at_16_per_class() -> None:
    """SST-2 at 16/class is 32 examples: 2 steps an epoch at batch 16, 6 steps in 3 epochs
    before the floor; `min_steps: 200` stretches each recipe to 34 x 3 epochs, 204 steps."""
    plans = _plans("adapters", "default", "16/class")
    subsamples = {p.seeds.subsample for p in plans}
    rows = budgets(_Data({("16/class", s): 32 for s in subsamples}), {}, plans)
    assert [(b.setting, b.steps, b.trials) for b in rows] == [
        ("full", 204, 10),
        ("lora", 204, 10),
        ("bitfit", 204, 10),
    ]
    assert min(b.steps for b in rows) >= STEPS_FLOOR and floor_warning(rows) is None
    # smoke stays smoke: one epoch of 4 steps on its 64 examples, and the warning says so
    smoke = _plans("adapters", "smoke", 64)
    rows = budgets(_Data({(64, p.seeds.subsample): 64 for p in smoke}), {}, smoke)
    assert {b.steps for b in rows} == {4}
    warning = floor_warning(rows)
    assert warning is not None and warning.startswith("warning: 3 of 3 setting(s) train fewer than 200")
    assert "size 64 full: 4, size 64 lora: 4, size 64 bitfit: 4" in warning
    assert "--set sweep.hparams.min_steps=200" in warning


def test_steps_per_trial_count_the_stretched_epochs() -> None:
    (plan,) = _plans("adapters", "default", "16/class")[:1]
    h = plan.hparams
    assert steps_of(h, 500) == 9 * 32  # 96 steps in 3 epochs < 200: every 3rd epoch evaluated, 9 epochs
    assert steps_of(h, 5000) == 3 * 313  # past the floor: the epochs as given
    assert steps_of(h.model_copy(update={"min_steps": 0}), 32) == 6


def test_a_setting_counts_its_fewest_steps_over_subsamples_and_the_line_lists_or_ranges() -> None:
    """A QA context cut into several features gives each subsample its own count: the row keeps
    the fewest steps (what the floor is about)."""
    plans = _plans("seeds", "lm-bff", "16/class")
    seeds = sorted({p.seeds.subsample for p in plans})
    data = _Data({("16/class", s): 32 + 8 * i for i, s in enumerate(seeds)})
    (row,) = budgets(data, {}, plans)
    assert row.n_train == 32 and row.steps == steps_of(plans[0].hparams, 32) >= STEPS_FLOOR
    assert steps_line([row]) == f"optimizer steps per trial: size 16/class: (fixed) {row.steps}"
    many = [Budget("100", f"lr={i}", 100, 40 + i, 3) for i in range(8)]
    assert steps_line(many) == "optimizer steps per trial: size 100: 40-47 over 8 settings"
    assert "and 2 more" in (floor_warning(many) or "")


def test_run_prints_the_steps_and_the_warning_before_training(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    """`run`'s header (on stdout, --quiet or not: stderr stays one line for an error): the steps
    line, then the warning, once, before the summary; the trial trains the steps the line gave."""
    folder = run_tiny(tiny_task, tiny_models["bert"], "--set", "sizes=[16]", "--seeds", "1")
    out = capsys.readouterr().out.splitlines()
    assert out.count("optimizer steps per trial: size 16: (fixed) 4") == 1
    (warning,) = [line for line in out if line.startswith("warning: ")]
    assert "1 of 1 setting(s) train fewer than 200 optimizer steps" in warning
    assert "for it: size 16 (fixed): 4;" in warning
    (record,) = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert record["outcome"] in ("succeeded", "failed")  # a score (a tiny random encoder may fail)
    assert record["epochs_run"] == 2 and len(record["loss_curve"]) == 4  # 2 epochs of 2 steps
