from pathlib import Path

import optuna

from suite.spec import HParams, SeedSpec, SweepSpec, load_task
from suite.study import child_seed, plan_trials, seed_grid


def test_crossed_grid_is_complete_and_independent_draws_are_distinct() -> None:
    crossed = list(seed_grid(SeedSpec(design="crossed", init=3, order=4, subsample=2)))
    assert len(crossed) == 24 and len(set(crossed)) == 24
    assert len({s.init for s in crossed}) == 3 and len({s.order for s in crossed}) == 4
    independent = list(seed_grid(SeedSpec(replicates=5)))
    assert len({s.init for s in independent}) == 5 and len({s.order for s in independent}) == 5


def test_more_replicates_keep_the_earlier_seeds() -> None:
    five = list(seed_grid(SeedSpec(replicates=5)))
    eight = list(seed_grid(SeedSpec(replicates=8)))
    assert eight[:5] == five
    assert child_seed(0, "init", 0) != child_seed(0, "order", 0) != child_seed(1, "init", 0)


def test_plan_covers_every_size_and_seed(tiny_task: Path) -> None:
    task = load_task(tiny_task).model_copy(update={"sizes": [16, "full"]})
    sweep = SweepSpec(
        name="s", hparams=HParams(lr=1e-3, batch_size=8, epochs=1), seeds=SeedSpec(replicates=3)
    )
    plans = plan_trials(task, sweep)
    assert len(plans) == 6 and len({p.key for p in plans}) == 6


def test_run_twice_trains_once_and_rewrites_the_same_outputs(tiny_task: Path, tiny_models) -> None:
    from suite.cli import main

    out = tiny_task.parent.parent / "runs"
    args = [
        "run",
        str(tiny_task),
        "--model",
        str(tiny_models["bert"]),
        "--out",
        str(out),
        "--data-dir",
        str(tiny_task.parent.parent / "data"),
        "--quiet",
    ]
    assert main(args) == 0
    trials_file = next(out.glob("tiny/*/trials.jsonl"))
    first = trials_file.read_text()
    assert main(args) == 0
    assert trials_file.read_text() == first
    storage = f"sqlite:///{trials_file.parent / 'study.db'}"
    summaries = optuna.get_all_study_summaries(storage)
    assert len(summaries) == 1 and summaries[0].n_trials == 3  # no new trials on the rerun
