"""Studies that grow: a plan that extends the stored one adds only its new trials; anything else,
and another software stack, is refused unless allowed (docs/guarantees.md)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
from suite.config.sweep import SeedSpec, seed_grid
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


def _stored(folder: Path) -> optuna.Study:
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    return optuna.load_study(study_name=name, storage=storage)


def _records(folder: Path) -> dict[str, str]:
    """Each ended trial's stored record, byte for byte, by its planned key."""
    return {
        t.user_attrs["key"]: json.dumps(t.user_attrs["record"], sort_keys=True)
        for t in _stored(folder).trials
        if "record" in t.user_attrs
    }


def test_earlier_seeds_never_change_when_a_design_grows() -> None:
    assert list(seed_grid(SeedSpec(repeats=6)))[:3] == list(seed_grid(SeedSpec(repeats=3)))
    small = set(seed_grid(SeedSpec(design="crossed", init=3, order=3)))
    assert small < set(seed_grid(SeedSpec(design="crossed", init=5, order=4)))
    assert set(seed_grid(SeedSpec(repeats=2, subsample=1))) < set(seed_grid(SeedSpec(repeats=2, subsample=3)))


def test_more_seeds_train_only_the_new_trials_and_keep_the_stored_records(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    tiny_task, folder = tiny_study  # the tiny sweep: 3 repeats, run at 1 thread
    before = _records(folder)
    assert len(before) == 3
    root = tiny_task.parent.parent
    plan = ["plan", str(tiny_task), "--model", str(model), "--out", str(root / "runs")]
    capsys.readouterr()
    assert main([*plan, "--data-dir", str(root / "data"), "--threads", "1", "--seeds", "6"]) == 0
    assert "adds 3 trials to a stored study of 3 (sweep.seeds.repeats 3 -> 6)" in capsys.readouterr().out
    run_tiny(tiny_task, model, "--threads", "1", "--seeds", "6")
    after = _records(folder)
    assert len(after) == 6 and len(_stored(folder).trials) == 6  # exactly 3 new trials ran
    assert {k: after[k] for k in before} == before  # the stored records are byte-identical
    info = json.loads((folder / "run.json").read_text())
    assert info["sweep"]["seeds"]["repeats"] == 6 and info["grown"][0]["added"] == 3
    run_tiny(tiny_task, model, "--threads", "1", "--seeds", "6")  # the grown study now resumes as is
    assert len(_stored(folder).trials) == 6
    capsys.readouterr()
    run_tiny(tiny_task, model, "--threads", "1", expect=2)  # without the option that grew it
    err = capsys.readouterr().err
    assert "plans 6 trials, this command 3 of them" in err and "rerun with the options that grew it" in err


def test_a_superset_of_sizes_adds_only_the_new_size(tiny_study: tuple[Path, Path], tiny_models: dict) -> None:
    tiny_task, folder = tiny_study
    before = _records(folder)
    run_tiny(tiny_task, tiny_models["bert"], "--threads", "1", "--size", "32", "--size", "16")
    after = _records(folder)
    new = [json.loads(after[k]) for k in set(after) - set(before)]
    assert len(new) == 3 and {r["size"] for r in new} == {16}
    assert {k: after[k] for k in before} == before


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (("--seeds", "6", "--set", "sweep.hparams.lr=2.0e-3"), "sweep.hparams.lr 0.001 -> 0.002"),
        (("--seeds", "2"), "not a superset of the stored plan: it drops 1 of its 3 planned trials"),
        (("--size", "16"), "drops 3 of its 3 planned trials"),
    ],
)
def test_a_plan_that_is_not_a_superset_is_refused(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture, extra: tuple, named: str
) -> None:
    tiny_task, folder = tiny_study
    before = _records(folder)
    capsys.readouterr()
    run_tiny(tiny_task, tiny_models["bert"], "--threads", "1", *extra, expect=2)
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1
    assert _records(folder) == before


def test_another_software_stack_is_refused_unless_allowed_and_then_marked_mixed(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    tiny_task, folder = tiny_study
    study = _stored(folder)
    stored = study.user_attrs["fingerprint"]
    now = stored["stack.transformers"]
    study.set_user_attr("fingerprint", {**stored, "stack.transformers": "4.57.1"})  # made under another
    info = study.user_attrs["run_info"]
    study.set_user_attr("run_info", {**info, "stack": {**info["stack"], "transformers": "4.57.1"}})
    capsys.readouterr()
    run_tiny(tiny_task, model, "--threads", "1", "--seeds", "4", expect=2)
    err = capsys.readouterr().err
    assert f"stack.transformers 4.57.1 -> {now}" in err and "--allow-stack-change" in err
    run_tiny(tiny_task, model, "--threads", "1", "--allow-stack-change")  # finished: no trial runs
    assert not json.loads((folder / "run.json").read_text()).get("stack_mixed")
    assert not any(
        e["stack"]["mixed"] for e in json.loads((folder / "leaderboard.json").read_text())["entries"]
    )
    assert "mixed software stack" not in capsys.readouterr().out
    run_tiny(tiny_task, model, "--threads", "1", "--seeds", "4", "--allow-stack-change")  # one trial on it
    assert "mixed software stack" in capsys.readouterr().out
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["stack_mixed"] is True
    assert [s["transformers"] for s in run_json["stacks"]] == ["4.57.1", now]
    board = json.loads((folder / "leaderboard.json").read_text())
    assert all(e["stack"]["mixed"] for e in board["entries"])
    records = [json.loads(r) for r in _records(folder).values()]
    assert len(records) == 4 and all(r["stack"]["transformers"] == now for r in records)


def test_until_halfwidth_adds_seeds_in_rounds_and_says_why_it_stopped(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    folder = run_tiny(tiny_task, model, "--threads", "1", "--until-halfwidth", "100", "--max-runs", "12")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("until: ")]
    rounds = [int(line.rsplit("next n=", 1)[1]) for line in lines[:-1]]
    assert rounds and rounds == sorted(rounds) and rounds[0] == 5  # 3 runs never stop (nothing confirms)
    assert all(line.startswith("until: continue") for line in lines[:-1])
    assert lines[-1].startswith("until: stopped: every entry's median half-width <= 100 points at n=")
    assert len(_records(folder)) == int(lines[-1].rsplit("n=", 1)[1]) == rounds[-1]
    before = _records(folder)  # the same command again: goes on from the grown study, trains nothing
    run_tiny(tiny_task, model, "--threads", "1", "--until-halfwidth", "100", "--max-runs", "12")
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("until: ")] == lines[-1:]
    assert _records(folder) == before


def test_until_refuses_what_it_cannot_grow_before_training(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    run_tiny(tiny_task, model, "--until-decided", expect=2)
    assert "field 'recipes': --until-decided compares the recipes" in capsys.readouterr().err
    run_tiny(tiny_task, model, "--until-halfwidth", "1", "--max-runs", "2", expect=2)
    assert "--max-runs 2: fewer than the 3 runs already planned" in capsys.readouterr().err
    run_tiny(tiny_task, model, "--until-halfwidth", "1", "--set", "sweep.pruner.type=median", expect=2)
    assert "one subsample and no pruner" in capsys.readouterr().err
    assert not (tiny_task.parent.parent / "runs").exists()


def test_a_study_stored_before_the_stack_is_checked_on_the_versions_it_recorded(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    tiny_task, folder = tiny_study
    study = _stored(folder)
    old = {k: v for k, v in study.user_attrs["fingerprint"].items() if not k.startswith("stack.")}
    study.set_user_attr("fingerprint", old)  # as stored before the stack was in a fingerprint
    info = {k: v for k, v in study.user_attrs["run_info"].items() if k != "stack"}  # stored no stack
    study.set_user_attr("run_info", {**info, "versions": {**info["versions"], "transformers": "4.57.1"}})
    capsys.readouterr()
    run_tiny(tiny_task, model, "--threads", "1", expect=2)
    assert "stack.transformers 4.57.1 -> " in capsys.readouterr().err
    run_tiny(tiny_task, model, "--threads", "1", "--allow-stack-change")
    kept = _stored(folder).user_attrs["fingerprint"]
    assert kept["stack.torch"] and kept["stack.transformers"] != "4.57.1"  # adopted: checked from now on
    assert not json.loads((folder / "run.json").read_text()).get("stack_mixed")  # no trial ran on it
    run_tiny(tiny_task, model, "--threads", "1", "--seeds", "4")  # one did: against its recorded versions
    assert json.loads((folder / "run.json").read_text())["stack_mixed"] is True


def test_a_worker_on_another_stack_is_refused_unless_allowed_and_marks_no_finished_study_mixed(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    folder = run_tiny(tiny_task, tiny_models["bert"], "--threads", "1")
    study = _stored(folder)
    study.set_user_attr("fingerprint", {**study.user_attrs["fingerprint"], "stack.numpy": "1.0.0"})
    storage = f"sqlite:///{folder / 'study.db'}"
    worker = ["worker", "--storage", storage, "--study", study.study_name, "--threads", "1", "--quiet"]
    worker += ["--data-dir", str(tiny_task.parent.parent / "data")]
    capsys.readouterr()
    assert main(worker) == 2
    assert "stack.numpy 1.0.0 -> " in capsys.readouterr().err
    assert main([*worker, "--allow-stack-change"]) == 0
    assert not _stored(folder).user_attrs["run_info"].get("stack_mixed")  # the study had ended: no trial ran


def test_until_decided_plans_its_looks_once(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    sweep = tiny_task.parent.parent / "sweeps" / "recipes.yaml"
    sweep.write_text(
        "name: recipes\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\nseeds: {repeats: 3}\n"
        "recipes: {base: {}, faster: {lr: 2.0e-3}}\n"
    )
    model = tiny_models["bert"]
    folder = run_tiny(tiny_task, model, "--sweep", str(sweep), "--until-decided", "--max-runs", "5")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("until: ")]
    assert "look 1 of 2" in lines[0] and "look 2 of 2" in lines[-1]
    assert len(_records(folder)) == 10 and _stored(folder).user_attrs["until_decided_looks"] == [3, 5]
    run_tiny(tiny_task, model, "--sweep", str(sweep), "--until-decided", "--max-runs", "8", expect=2)
    assert "looks were planned with --max-runs 5 (3, 5); rerun with it" in capsys.readouterr().err


def test_a_tpe_budget_grows_by_asking_the_sampler_only_for_the_new_settings(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    model = tiny_models["bert"]
    tpe = ("--threads", "1", "--sweep", str(REPO / "sweeps/tpe.yaml"), "--profile", "smoke")
    folder = run_tiny(tiny_task, model, *tpe)  # budget 2 settings x 2 seed repeats
    before = _records(folder)
    assert len(before) == 4
    capsys.readouterr()
    run_tiny(tiny_task, model, *tpe, "--set", "sweep.budget=3")
    assert "adds 2 trials to a stored study of 4 (sweep.budget 2 -> 3)" in capsys.readouterr().err
    after = _records(folder)
    assert len(after) == 6 and len(_stored(folder).trials) == 6
    assert {k: after[k] for k in before} == before  # the stored settings' records are untouched
    settings = {json.dumps(json.loads(r)["hparams"], sort_keys=True) for r in after.values()}
    assert len(settings) == 3  # one new setting, run with both seeds
    assert json.loads((folder / "run.json").read_text())["sweep"]["budget"] == 3
    run_tiny(tiny_task, model, *tpe, "--set", "sweep.budget=3")  # the grown study now resumes as is
    assert len(_stored(folder).trials) == 6
    capsys.readouterr()
    run_tiny(tiny_task, model, *tpe, "--set", "sweep.budget=3", "--seeds", "3", expect=2)
    err = capsys.readouterr().err
    assert "a TPE study grows only its budget" in err and len(err.strip().splitlines()) == 1


def test_a_random_study_grows_on_its_stored_settings_whatever_the_sampler_draws_now(
    tiny_task: Path, tiny_models: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = tiny_task.parent.parent / "sweeps" / "random.yaml"
    sweep.write_text(
        "name: random\nhparams: {batch_size: 8, epochs: 1}\nsampler: {type: random}\nbudget: 2\n"
        "space: {lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}}\nseeds: {repeats: 1}\n"
    )
    model = tiny_models["bert"]
    folder = run_tiny(tiny_task, model, "--threads", "1", "--sweep", str(sweep))
    drawn = _stored(folder).user_attrs["run_info"]["settings"]
    assert len(drawn) == 2 and len(_records(folder)) == 2
    monkeypatch.setattr(  # another optuna: other draws from the same seed
        "suite.config.sweep.SweepSpec.make_sampler", lambda self: optuna.samplers.RandomSampler(seed=99)
    )
    run_tiny(tiny_task, model, "--threads", "1", "--sweep", str(sweep))
    assert len(_stored(folder).trials) == 2  # nothing new
    run_tiny(tiny_task, model, "--threads", "1", "--sweep", str(sweep), "--seeds", "2")
    trials = _stored(folder).trials
    assert len(trials) == 4 and _stored(folder).user_attrs["run_info"]["settings"] == drawn
    assert sorted(json.dumps(t.user_attrs["setting"]) for t in trials) == sorted(
        json.dumps(s) for s in drawn + drawn
    )
