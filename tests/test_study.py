import json
from pathlib import Path

import optuna
import pytest

from suite.config.sweep import HParams, SeedSpec, SweepSpec, child_seed, load_sweep, seed_grid
from suite.config.task import load_task
from suite.errors import SpecError
from suite.study.plan import enqueue_plan, plan_trials, replicate_plans, trial_attrs
from suite.study.storage import open_storage, open_study
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


def test_crossed_grid_is_complete_and_independent_draws_are_distinct() -> None:
    crossed = list(seed_grid(SeedSpec(design="crossed", init=3, order=4, subsample=2)))
    assert len(crossed) == 24 and len(set(crossed)) == 24
    assert len({s[0] for s in crossed}) == 3 and len({s[1] for s in crossed}) == 4
    assert len({s[2] for s in crossed}) == 2
    independent = list(seed_grid(SeedSpec(repeats=5)))
    assert len({s[0] for s in independent}) == 5 and len({s[1] for s in independent}) == 5


def test_more_repeats_keep_the_earlier_seeds() -> None:
    assert list(seed_grid(SeedSpec(repeats=8)))[:5] == list(seed_grid(SeedSpec(repeats=5)))
    assert child_seed(0, "init", 0) != child_seed(0, "order", 0) != child_seed(1, "init", 0)


def test_devlin_grid_plans_every_setting_with_every_seed(tiny_task: Path) -> None:
    task = load_task(tiny_task)
    sweep = load_sweep(REPO / "sweeps/devlin.yaml")
    plans = plan_trials(task, sweep)
    assert len(plans) == 4 * 2 * 3 * 3 and len({p.key for p in plans}) == len(plans)
    settings = {(p.hparams.lr, p.hparams.batch_size, p.hparams.epochs) for p in plans}
    assert len(settings) == 24
    seeds_per_setting = {
        s: {
            (p.seeds.init, p.seeds.order)
            for p in plans
            if (p.hparams.lr, p.hparams.batch_size, p.hparams.epochs) == s
        }
        for s in settings
    }
    assert len({frozenset(v) for v in seeds_per_setting.values()}) == 1  # same seeds everywhere


def test_random_and_qmc_plans_are_seeded(tiny_task: Path) -> None:
    raw = {
        "name": "r",
        "hparams": {"batch_size": 8, "epochs": 1},
        "budget": 4,
        "space": {"lr": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True}},
    }
    for sampler in ("random", "qmc"):
        sweep = SweepSpec.model_validate({**raw, "sampler": {"type": sampler}})
        assert sweep.settings() == sweep.settings() and len(sweep.settings()) == 4
        assert all(1e-5 <= s["lr"] <= 1e-4 for s in sweep.settings())


def _drawn_study(tmp_path: Path, sampler: str, name: str) -> tuple[optuna.Study, SweepSpec]:
    sweep = SweepSpec.model_validate(
        {
            "name": "r",
            "hparams": {"batch_size": 8, "epochs": 1},
            "budget": 3,
            "space": {"lr": {"type": "float", "low": 1e-5, "high": 1e-4, "log": True}},
            "sampler": {"type": sampler},
            "seeds": {"repeats": 2},
        }
    )
    study = open_study(open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}"), name, sweep, True)
    study.set_user_attr("run_info", {"study": name})  # as `run` creates it, before planning
    return study, sweep


def _another_library(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sampler draws other values from the same seed (as another optuna or scipy may)."""
    monkeypatch.setattr(SweepSpec, "make_sampler", lambda self: optuna.samplers.RandomSampler(seed=12345))


@pytest.mark.parametrize("sampler", ["random", "qmc"])
def test_drawn_settings_are_stored_at_creation_and_never_drawn_again(
    tiny_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sampler: str
) -> None:
    task = load_task(tiny_task)
    study, sweep = _drawn_study(tmp_path, sampler, "s")
    assert enqueue_plan(study, task, sweep) == 3 * 2
    drawn = study.user_attrs["run_info"]["settings"]
    assert drawn == sweep.settings() and len(drawn) == 3
    keys = sorted(t.user_attrs["key"] for t in study.trials)
    _another_library(monkeypatch)
    assert all(d not in sweep.settings() for d in drawn)  # the sampler now draws other settings
    assert enqueue_plan(study, task, sweep) == 0
    assert study.user_attrs["run_info"]["settings"] == drawn
    assert sorted(t.user_attrs["key"] for t in study.trials) == keys
    # Grown: one more seed for every stored setting, and a fourth setting (the only new draw).
    grown = sweep.model_copy(update={"seeds": SeedSpec(repeats=3), "budget": 4})
    assert enqueue_plan(study, task, grown) == 3 * 1 + 1 * 3
    settings = study.user_attrs["run_info"]["settings"]
    assert settings[:3] == drawn and settings[3] == grown.settings()[3]
    assert len(study.trials) == 4 * 3 and {json.dumps(t.user_attrs["setting"]) for t in study.trials} == {
        json.dumps(s) for s in settings
    }


def test_a_drawn_study_stored_without_its_settings_keeps_those_its_trials_hold(
    tiny_task: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = load_task(tiny_task)
    study, sweep = _drawn_study(tmp_path, "random", "old")
    drawn = sweep.settings()
    for values in drawn:  # queued as before settings were stored: only the trials hold them
        for plan in replicate_plans(task, sweep, values):
            study.enqueue_trial(values, user_attrs=trial_attrs(plan, values), skip_if_exists=False)
    _another_library(monkeypatch)
    assert enqueue_plan(study, task, sweep) == 0 and len(study.trials) == 6
    assert study.user_attrs["run_info"]["settings"] == drawn  # stored from now on


@pytest.mark.parametrize(
    "raw, message",
    [
        (
            {"hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1, "momentum": 0.9}},
            "unknown hyperparameter 'momentum'",
        ),
        ({"hparams": {"lr": 1e-3, "batch_size": 8}}, "epochs"),
        (
            {
                "hparams": {"batch_size": 8, "epochs": 1},
                "space": {"lr": {"type": "float", "low": 1e-5, "high": 1e-4}},
            },
            "grid sampler needs enumerable values",
        ),
        (
            {
                "hparams": {"batch_size": 8, "epochs": 1},
                "sampler": {"type": "tpe"},
                "space": {"lr": {"type": "float", "low": 1e-5, "high": 1e-4}},
            },
            "needs a `budget`",
        ),
        (
            {
                "hparams": {"lr": 1e-3, "batch_size": 8, "epochs": 1},
                "space": {"lr": {"type": "categorical", "choices": [1e-3]}},
            },
            "both fixed",
        ),
    ],
)
def test_bad_sweeps_are_rejected(tmp_path: Path, raw: dict, message: str) -> None:
    import yaml

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", **raw}))
    with pytest.raises(SpecError, match=message):
        load_sweep(path)


def test_enqueue_is_idempotent(tiny_task: Path, tmp_path: Path) -> None:
    task = load_task(tiny_task)
    sweep = SweepSpec(name="s", hparams={"lr": 1e-3, "batch_size": 8, "epochs": 1}, seeds=SeedSpec(repeats=3))
    study = open_study(open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}"), "s", sweep, True)
    assert enqueue_plan(study, task, sweep) == 3 and enqueue_plan(study, task, sweep) == 0
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert sorted(t.user_attrs["key"] for t in waiting) == sorted(p.key for p in plan_trials(task, sweep))


def test_tpe_proposes_hyperparameters_never_seeds(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    folder = run_tiny(
        tiny_task, tiny_models["bert"], "--sweep", str(REPO / "sweeps/tpe.yaml"), "--profile", "smoke"
    )
    storage = f"sqlite:///{folder / 'study.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    trials = optuna.load_study(study_name=summary.study_name, storage=storage).get_trials()
    assert len(trials) == 2 * 2  # budget 2 settings x 2 seed repeats, each once
    for t in trials:
        assert set(t.params) == {"lr", "batch_size", "epochs"}  # no seed is ever a parameter
        assert set(t.user_attrs["seeds"]) == {"init", "order", "subsample"}
    by_setting: dict = {}
    for t in trials:
        by_setting.setdefault(tuple(sorted(t.params.items())), []).append(t.user_attrs["seeds"]["init"])
    assert len(by_setting) == 2 and all(len(set(v)) == 2 for v in by_setting.values())


def test_run_twice_trains_once_and_rewrites_the_same_outputs(tiny_study, tiny_models) -> None:  # noqa: ANN001
    task, folder = tiny_study  # the first run
    trials_file = folder / "trials.jsonl"
    first = trials_file.read_text()
    run_tiny(task, tiny_models["bert"])
    assert trials_file.read_text() == first
    summaries = optuna.get_all_study_summaries(f"sqlite:///{trials_file.parent / 'study.db'}")
    assert len(summaries) == 1 and summaries[0].n_trials == 3  # no new trials on the rerun


def test_hparams_defaults_fill_the_rest() -> None:
    sweep = SweepSpec(name="s", hparams={"lr": 1e-3, "batch_size": 8, "epochs": 1})
    assert sweep.hparams_for({}) == HParams(lr=1e-3, batch_size=8, epochs=1)


def tpe_over(choices: dict[str, list], budget: int) -> SweepSpec:
    """A TPE sweep over a small discrete space, one seed replicate per setting."""
    space = {name: {"type": "categorical", "choices": values} for name, values in choices.items()}
    return SweepSpec(
        name="s",
        hparams={"lr": 1e-3},
        space=space,
        sampler={"type": "tpe", "n_startup_trials": 10},
        budget=budget,
        seeds=SeedSpec(repeats=1),
    )


def test_tpe_never_trains_a_setting_twice_in_a_small_discrete_space(tiny_task: Path) -> None:
    """What a worker does with an empty queue, until the budget is proposed: every setting of a
    4-setting space once, though the sampler would often propose a setting it already gave."""
    from suite.study.work import _propose, _tell, settings_proposed

    task = load_task(tiny_task)
    sweep = tpe_over({"batch_size": [8, 16], "epochs": [1, 2]}, budget=4)
    study = optuna.create_study(direction="maximize")
    for _ in range(3 * sweep.budget):  # bounded: a repeating sampler would otherwise loop for ever
        trials = study.get_trials(deepcopy=False)
        if settings_proposed(trials) >= sweep.budget:
            break
        trial = _propose(study, task, sweep)
        score = float(trial.params["batch_size"] + trial.params["epochs"])
        _tell(study, trial, {"outcome": "succeeded", "score": score}, baseline=0.0)  # as a worker tells
    runs = [t for t in study.get_trials() if "key" in t.user_attrs]
    assert len({t.user_attrs["key"] for t in runs}) == len(runs) == 4  # each setting once, all 4


def test_a_tpe_budget_above_its_discrete_space_is_refused() -> None:
    from suite.study.preflight import check_budget

    check_budget(tpe_over({"batch_size": [8, 16], "epochs": [1, 2]}, budget=4))
    with pytest.raises(SpecError, match="field 'budget': 5 settings, but its space holds only 4"):
        check_budget(tpe_over({"batch_size": [8, 16], "epochs": [1, 2]}, budget=5))
