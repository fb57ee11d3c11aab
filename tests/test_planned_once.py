"""Each run is planned once: size `full` trains on every example whatever the subsample seed, so
it runs each (init, order) pair once; a stored study that trained it under several subsample seeds
is read with each run once and resumes without new trials."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import optuna
import pytest

from suite.config.sweep import child_seed, load_sweep, seed_grid
from suite.config.task import load_task
from suite.study.plan import plan_trials, replicates
from suite.study.records import load_run
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


def test_the_full_profile_of_rte_plans_each_full_run_once() -> None:
    task = load_task(REPO / "tasks/rte.yaml", "full")
    sweep = load_sweep(REPO / "sweeps/seeds.yaml", "full")
    seeds = sweep.seeds
    assert task.sizes[-1] == "full" and seeds.subsample == 3  # the case: three subsample draws
    plans = plan_trials(task, sweep)
    pairs = {
        (child_seed(seeds.master, "init", i), child_seed(seeds.master, "order", o))
        for i in range(seeds.init)
        for o in range(seeds.order)
    }
    counted = Counter(p.size for p in plans)
    assert counted == {**{z: len(pairs) * 3 for z in task.sizes[:-1]}, "full": len(pairs)}
    assert counted["full"] == 25 and len(plans) == replicates(task, sweep) == 3 * 75 + 25
    full = [p for p in plans if p.size == "full"]
    assert {(p.seeds.init, p.seeds.order) for p in full} == pairs and {p.seeds.subsample for p in full} == {0}
    assert len({p.key for p in plans}) == len(plans)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (
            ("--size", "full", "--set", "sweep.seeds.subsample_seeds=[1, 2]"),
            "field 'sizes': size full trains on every example, where the sweep's seeds.subsample_seeds",
        ),
        (  # the tiny task's training set has 48 examples
            ("--size", "48", "--set", "sweep.seeds.subsample=2"),
            "field 'sizes': size 48 is every training example of",
        ),
    ],
)
def test_subsample_seeds_at_a_whole_training_set_are_refused_before_anything_is_written(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture, extra: tuple, named: str
) -> None:
    capsys.readouterr()
    run_tiny(tiny_task, tiny_models["bert"], "--threads", "1", *extra, expect=2)
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1
    assert not (tiny_task.parent.parent / "runs").exists()


def _old_planner(sweep, size):  # noqa: ANN001, ANN202 (the planner before `full` was planned once)
    return list(seed_grid(sweep.seeds))


def test_a_stored_study_with_full_runs_under_two_subsample_seeds_is_read_once_and_resumes_as_is(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--threads", "1", "--size", "full", "--set", "sweep.seeds.subsample=2")
    with monkeypatch.context() as patched:
        patched.setattr("suite.study.plan.replicate_seeds", _old_planner)
        folder = run_tiny(tiny_task, tiny_models["bert"], *args)
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    stored = optuna.load_study(study_name=name, storage=storage).trials
    records = [t.user_attrs["record"] for t in stored]
    assert len(records) == 6 and len({r["seeds"]["subsample"] for r in records}) == 2
    by_pair: dict = {}
    for r in records:  # the premise: both subsample seeds trained the same run, number for number
        by_pair.setdefault((r["seeds"]["init"], r["seeds"]["order"]), []).append(r["score"])
    assert len(by_pair) == 3 and all(len(v) == 2 and v[0] == v[1] for v in by_pair.values())

    capsys.readouterr()
    run_tiny(tiny_task, tiny_models["bert"], *args)  # today's planner, on the stored study
    err = capsys.readouterr().err
    assert len(optuna.load_study(study_name=name, storage=storage).trials) == 6  # nothing queued
    assert "note: 3 stored runs at size full repeat another run" in err
    info, final = load_run(folder)
    assert info["repeated_runs"] == 3
    assert len(final) == 3 and {r["seeds"]["subsample"] for r in final} == {0}
    assert {(r["seeds"]["init"], r["seeds"]["order"]) for r in final} == set(by_pair)
    assert all(r["key"].endswith(",subsample=0") for r in final)
    (entry,) = json.loads((folder / "leaderboard.json").read_text())["entries"]
    assert len(entry["runs"]) == 3


def test_a_stored_study_with_explicit_subsample_seeds_at_full_resumes_with_the_same_command(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Explicit subsample seeds at size full are refused for a new study only: a study stored
    before that refusal resumes with the command that made it, reading each run once."""
    args = ("--threads", "1", "--seeds", "2", "--size", "full", "--set", "sweep.seeds.subsample_seeds=[1, 2]")
    with monkeypatch.context() as patched:  # the planner and pre-flight before `full` was planned once
        patched.setattr("suite.study.plan.replicate_seeds", _old_planner)
        patched.setattr("suite.study.preflight.check_whole_set", lambda *args: None)
        folder = run_tiny(tiny_task, tiny_models["bert"], *args)
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    trials = optuna.load_study(study_name=name, storage=storage).trials
    assert {t.user_attrs["seeds"]["subsample"] for t in trials} == {1, 2}
    pairs = {(t.user_attrs["seeds"]["init"], t.user_attrs["seeds"]["order"]) for t in trials}
    capsys.readouterr()
    run_tiny(tiny_task, tiny_models["bert"], *args)  # today's pre-flight and planner: resumes, exit 0
    assert len(optuna.load_study(study_name=name, storage=storage).trials) == len(trials)  # none queued
    _, final = load_run(folder)
    assert {(r["seeds"]["init"], r["seeds"]["order"]) for r in final} == pairs
    assert len(final) == len(pairs) < len(trials)  # each (init, order) pair's run once
