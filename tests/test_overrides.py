"""`--set path=value` on run and validate; tasks and sweeps by name; `validate DIR`; `list`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from suite.commands.cli import main
from suite.config.overrides import apply_sets, parse_sets
from suite.config.resources import resolve, shipped_dir
from suite.config.sweep import load_sweep
from suite.config.task import load_task
from suite.errors import SpecError
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent


def _one_error_line(capsys: pytest.CaptureFixture, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err.strip()


def test_sets_split_into_task_and_sweep_fields_parsed_as_yaml() -> None:
    task, sweep = parse_sets(["sizes=[100, full]", "sweep.hparams.lr=1.0e-4", "data.header=false"])
    assert task == {"sizes": [100, "full"], "data.header": False}
    assert sweep == {"hparams.lr": 1.0e-4}


def test_a_set_field_is_validated_like_the_yaml() -> None:
    task = load_task(REPO / "tasks/ner.yaml", "smoke", {"sizes": [200], "failure.threshold": 0.1})
    assert task.sizes == [200] and task.failure.threshold == 0.1
    assert task.eval_limit == 300  # the profile still applies; --set comes after it
    sweep = load_sweep(REPO / "sweeps/ner-seeds.yaml", "smoke", {"hparams.lr": "2e-4", "seeds.repeats": 2})
    assert sweep.hparams["lr"] == 2e-4 and sweep.hparams_for({}).lr == 2e-4  # `2e-4` is read as a number
    assert sweep.seeds.repeats == 2
    with pytest.raises(SpecError, match=r"ner\.yaml with --set sizes=\[1\]: field 'sizes'"):
        load_task(REPO / "tasks/ner.yaml", "default", {"sizes": [1]})


def test_list_items_are_set_by_index_and_the_original_is_untouched() -> None:
    raw = {"reported": [{"value": 1}], "data": {"local": "x"}}
    out = apply_sets(raw, {"reported.0.value": 2, "data.hub.path": "a/b"})
    assert out == {"reported": [{"value": 2}], "data": {"local": "x", "hub": {"path": "a/b"}}}
    assert raw == {"reported": [{"value": 1}], "data": {"local": "x"}}


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        (["sizes=[abc]"], "tasks/ner.yaml with --set sizes=[\"abc\"]: field 'sizes': a size is"),
        (["data.nope=1"], "field 'data.nope': Extra inputs are not permitted"),
        (["sweep.hparams.lr=abc"], "ner-seeds.yaml with --set sweep.hparams.lr=\"abc\": field 'hparams.lr'"),
        (["sweep.hparams.momentum=0.9"], "field 'hparams.momentum': unknown hyperparameter"),
        (["max_length.x=1"], "--set max_length.x: 'max_length' is an integer, not a mapping or list"),
        (["sizes.x=1"], "--set sizes.x: expected a list index 0..0, got 'x'"),
        (["sizes"], "--set sizes: expected PATH=VALUE"),
        (["labels=[a, b"], "--set labels: value '[a, b' is not valid YAML"),
        (["profiles.smoke.sizes=[5]"], "--set profiles.smoke.sizes: profiles are merged before --set"),
        (["sizes=[5]", "sizes=[6]"], "--set sizes: given twice"),
    ],
)
def test_a_bad_set_is_one_line_naming_the_field(
    capsys: pytest.CaptureFixture, sets: list[str], expected: str
) -> None:
    args = ["validate", str(REPO / "tasks/ner.yaml")]
    for item in sets:
        args += ["--set", item]
    assert expected in _one_error_line(capsys, args)


def test_run_refuses_a_bad_set_before_writing(capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    args = ["run", "ner", "--set", "max_length=4", "--out", str(tmp_path / "runs"), "--quiet"]
    assert "field 'max_length'" in _one_error_line(capsys, args)
    assert not (tmp_path / "runs").exists()


def test_an_overridden_spec_runs_and_a_changed_one_is_refused(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    folder = run_tiny(
        tiny_task, tiny_models["bert"], "--set", "sweep.seeds.repeats=1", "--set", "max_length=24"
    )
    assert len((folder / "trials.jsonl").read_text().splitlines()) == 1
    info = json.loads((folder / "run.json").read_text())
    assert info["sweep"]["seeds"]["repeats"] == 1 and info["task"]["max_length"] == 24
    assert info["fingerprint"]["task.max_length"] == 24
    capsys.readouterr()
    run_tiny(tiny_task, tiny_models["bert"], "--set", "sweep.seeds.repeats=1", expect=2)
    err = capsys.readouterr().err
    assert "was run with a different spec: task.max_length 24 -> 32" in err


def test_tasks_and_sweeps_by_name_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve("ner", "tasks", "task") == shipped_dir("tasks") / "ner.yaml"
    assert resolve("tasks/ner.yaml", "tasks", "task") == shipped_dir("tasks") / "ner.yaml"
    assert resolve("devlin", "sweeps", "--sweep") == shipped_dir("sweeps") / "devlin.yaml"
    known = r"task 'nre': no such file, and no task by that name \(known: boolq, cola"
    with pytest.raises(SpecError, match=known):
        resolve("nre", "tasks", "task")
    (tmp_path / "tasks").mkdir()
    shutil.copy(REPO / "tasks/rte.yaml", tmp_path / "tasks/ner.yaml")  # a local file shadows a name
    assert resolve("ner", "tasks", "task") == Path("tasks/ner.yaml")


def test_list_shows_shipped_and_local_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tasks").mkdir()
    shutil.copy(REPO / "tasks/rte.yaml", tmp_path / "tasks/my-rte.yaml")
    (tmp_path / "tasks/broken.yaml").write_text("name: broken\n")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    shipped, local = out.split("tasks (local, ./tasks")
    assert "  ner  " in shipped and "my-rte" not in shipped
    assert "  my-rte        classification  accuracy  sizes [500]" in local
    assert "  broken        invalid: " in local


def test_validate_a_folder_checks_every_yaml(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    shutil.copy(REPO / "tasks/rte.yaml", tmp_path / "good.yaml")
    shutil.copy(REPO / "sweeps/devlin.yaml", tmp_path / "sweep.yaml")
    (tmp_path / "bad.yaml").write_text(
        (REPO / "tasks/rte.yaml").read_text().replace("sizes: [500]", "sizes: []")
    )
    assert main(["validate", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out.count("ok    ") == 2 and "bad.yaml: field 'sizes'" in captured.err
    assert main(["validate", str(tmp_path / "good.yaml"), "devlin", "ner"]) == 0
    assert main(["validate", str(tmp_path / "empty-dir-does-not-exist")]) == 2


def test_validate_defaults_to_the_shipped_folders_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert out.count("ok    ") == len(list((REPO / "tasks").glob("*.yaml"))) + len(
        list((REPO / "sweeps").glob("*.yaml"))
    )
