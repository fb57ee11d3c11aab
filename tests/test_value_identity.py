"""One value, one identity: `1e-4` (a string to YAML 1.1), `1.0e-4` and `0.0001` are one value in
a sweep and in a study's fingerprint, from the YAML and from `--set`, and a study stored under
one spelling resumes under another (docs/sweeps.md#fields)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from suite.config.overrides import parse_sets
from suite.config.sweep import SweepSpec, load_sweep
from suite.config.task import TaskSpec, load_task
from suite.errors import SpecError, SuiteError
from suite.identity import study_fingerprint
from suite.study.resume import Resumption, resumption
from tests.conftest import REPO, run_tiny

SPELLINGS = ("1e-4", "1.0e-4", "0.0001")
FIXED = "hparams: {batch_size: 8, epochs: 1}\n"
BLOCKS = {  # a sweep whose lr is written in one block, `{lr}` standing for its spelling
    "hparams": "hparams: {lr: {lr}, batch_size: 8, epochs: 1}\n",
    "recipes": FIXED + "recipes: {a: {lr: {lr}}, b: {lr: 2.0e-5}}\n",
    "space": FIXED + "space: {lr: {type: categorical, choices: [{lr}, 2.0e-5]}}\n",
}


def _sweep(tmp_path: Path, text: str, sets: tuple[str, ...] | list[str] = ()) -> SweepSpec:
    path = tmp_path / "s.yaml"
    path.write_text("name: s\n" + text)
    return load_sweep(path, None, parse_sets([f"sweep.{s}" for s in sets])[1])


def _fingerprint(task: TaskSpec, sweep: SweepSpec) -> dict[str, Any]:
    return study_fingerprint(task.model_dump(mode="json"), sweep.model_dump(mode="json"), {}, {}, 1, {})


@pytest.fixture(scope="module")
def rte() -> TaskSpec:
    return load_task(REPO / "tasks/rte.yaml", "smoke")


@pytest.mark.parametrize("block", BLOCKS)
def test_every_spelling_is_one_sweep_and_one_fingerprint(tmp_path: Path, rte: TaskSpec, block: str) -> None:
    sweeps = [_sweep(tmp_path, BLOCKS[block].replace("{lr}", lr)) for lr in SPELLINGS]
    assert yaml.safe_load("x: 1e-4")["x"] == "1e-4"  # why: YAML 1.1 reads it as a string
    dumped = [json.dumps(s.model_dump(mode="json"), sort_keys=True) for s in sweeps]
    assert dumped[0] == dumped[1] == dumped[2] and "1e-4" not in dumped[0]
    prints = [_fingerprint(rte, s) for s in sweeps]
    assert prints[0] == prints[1] == prints[2]
    assert {type(v) for k, v in prints[0].items() if k.endswith(".lr")} <= {float}
    if block == "space":  # Optuna's distribution too: a stored study's trials continue
        assert len({repr(s.space["lr"].distribution()) for s in sweeps}) == 1


def test_a_set_value_is_the_yaml_value_in_every_spelling(tmp_path: Path, rte: TaskSpec) -> None:
    base = BLOCKS["hparams"].replace("{lr}", "1.0e-4")
    written = _fingerprint(rte, _sweep(tmp_path, base))
    for lr in SPELLINGS:
        assert _fingerprint(rte, _sweep(tmp_path, base, [f"hparams.lr={lr}"])) == written
        assert _sweep(tmp_path, base, [f"hparams.lr={lr}"]).hparams["lr"] == 1e-4
    recipes = BLOCKS["recipes"].replace("{lr}", "1.0e-4")
    assert _sweep(tmp_path, recipes, ["recipes.a.lr=1e-4"]) == _sweep(tmp_path, recipes)
    space = BLOCKS["space"].replace("{lr}", "1.0e-4")
    assert _sweep(tmp_path, space, ["space.lr.choices=[1e-4, 2e-5]"]) == _sweep(tmp_path, space)


def test_ordinary_values_are_kept_as_written(tmp_path: Path) -> None:
    """Every shipped sweep's fixed and recipe values, in value and type, as its YAML writes them
    (an int stays an int, a float a float): no stored fingerprint of them moves."""
    for path in sorted((REPO / "sweeps").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        sweep = load_sweep(path, None).model_dump(mode="json")
        blocks = [(raw.get("hparams") or {}, sweep["hparams"])]
        blocks += [(values, sweep["recipes"][r]) for r, values in (raw.get("recipes") or {}).items()]
        for written, kept in blocks:
            for name, value in written.items():
                if name != "reference":  # a label, lifted out of the recipe
                    assert (kept[name], type(kept[name])) == (value, type(value)), (path, name)
    kept = _sweep(tmp_path, "hparams: {lr: 1.0e-4, batch_size: 16, epochs: 2, weight_decay: 0}\n").hparams
    assert [(v, type(v)) for v in kept.values()] == [(1e-4, float), (16, int), (2, int), (0, int)]


def test_two_spellings_of_one_choice_are_one_choice_listed_twice(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="a choice is listed twice"):
        _sweep(tmp_path, BLOCKS["space"].replace("{lr}", "1e-4").replace("2.0e-5", "0.0001"))


def _resume(stored: dict, current: dict, task: TaskSpec, sweep: SweepSpec) -> Resumption:
    return resumption(stored, current, None, task, sweep, "s", "here")


@pytest.mark.parametrize("block", ["hparams", "recipes"])
def test_a_study_stored_under_one_spelling_resumes_under_the_other(
    tmp_path: Path, rte: TaskSpec, block: str
) -> None:
    """A study stored by the version before, with the string YAML read from `1e-4`, resumes under
    0.0001; one stored at 0.0001 resumes under `1e-4` (a YAML and a --set)."""
    written = _sweep(tmp_path, BLOCKS[block].replace("{lr}", "0.0001"))
    numeric = _fingerprint(rte, written)
    path = "sweep.hparams.lr" if block == "hparams" else "sweep.recipes.a.lr"
    assert numeric[path] == 1e-4
    as_string = {**numeric, path: "1e-4"}  # what the version before stored for `lr: 1e-4`
    assert _resume(as_string, numeric, rte, written) == Resumption()
    spelled = _sweep(tmp_path, BLOCKS[block].replace("{lr}", "1e-4"))
    assert _resume(numeric, _fingerprint(rte, spelled), rte, spelled) == Resumption()
    assert _resume(as_string, _fingerprint(rte, spelled), rte, spelled) == Resumption()
    other = _sweep(tmp_path, BLOCKS[block].replace("{lr}", "2e-4"))
    with pytest.raises(SuiteError, match=rf"{path} 0\.0001 -> 0\.0002"):  # another value: refused
        _resume(as_string, _fingerprint(rte, other), rte, other)


def test_a_study_stored_with_choices_as_strings_is_refused_naming_them(tmp_path: Path, rte: TaskSpec) -> None:
    """Optuna's storage holds a categorical's choices: a study stored with `'1e-4'` cannot take
    trials that suggest 0.0001 (Optuna refuses a changed categorical), so it is refused, not
    resumed into a crash."""
    sweep = _sweep(tmp_path, BLOCKS["space"].replace("{lr}", "1e-4"))
    current = _fingerprint(rte, sweep)
    stored = {**current, "sweep.space.lr.choices": ["1e-4", 2e-5]}
    shown = r"sweep\.space\.lr\.choices \[\"1e-4\", 2e-05\] -> \[0\.0001, 2e-05\]"
    with pytest.raises(SuiteError, match=shown):
        _resume(stored, current, rte, sweep)
    with pytest.raises(SuiteError, match="holds the choices as the strings YAML read then"):
        _resume(stored, current, rte, sweep)


def test_set_lr_in_another_spelling_resumes_the_stored_study_without_training(
    tiny_study: tuple[Path, Path], tiny_models: dict
) -> None:
    """The tiny study was stored at `lr: 1.0e-3`: `--set sweep.hparams.lr=1e-3` resumes it."""
    task, folder = tiny_study
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    before = len(optuna.load_study(study_name=name, storage=storage).trials)
    lines = (folder / "trials.jsonl").read_text().count("\n")
    run_tiny(task, tiny_models["bert"], "--threads", "1", "--set", "sweep.hparams.lr=1e-3")
    assert len(optuna.load_study(study_name=name, storage=storage).trials) == before == 3
    assert (folder / "trials.jsonl").read_text().count("\n") == lines == 3
