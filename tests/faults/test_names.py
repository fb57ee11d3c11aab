"""A task's name and a model's slug become folders (`<out>/<task>/<model>`): each must be one
folder name. A hostile name is refused in one line naming the file and field (or the flag), exit
2, before torch is imported, and nothing is written outside `--out`; the run-folder code refuses
any folder that would not lie under `--out` all the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from suite.commands.cli import main
from suite.config.task import TaskSpec, load_task
from suite.errors import SuiteError

REPO = Path(__file__).resolve().parents[2]
RULE = "one folder name: no '/', '\\', NUL or line break, and not '.', '..' or empty"
HOSTILE = ["../x", "a/b", "/abs", "..", ".", "", "a\0b", "a\nb", "a\\b", "../../escape"]


def _task(folder: Path, **fields: object) -> Path:
    """tasks/rte.yaml with `fields` changed, written in `folder`."""
    raw = yaml.safe_load((REPO / "tasks/rte.yaml").read_text())
    raw.update(fields, sweep=str(REPO / "sweeps/seeds.yaml"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "task.yaml"
    path.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _one_line(capsys: pytest.CaptureFixture, code: int) -> str:
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "", (code, captured)
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    return captured.err.removesuffix("\n")


@pytest.mark.parametrize("name", HOSTILE, ids=repr)
def test_a_hostile_task_name_is_refused_and_writes_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    # --out two folders down, so that `..` and `../..` would land inside tmp_path, where the
    # snapshot sees them.
    out = tmp_path / "a" / "b" / "out"
    path = _task(tmp_path / "a" / "b" / "spec", name=name)
    expected = f"error: {path}: field 'name': {name!r} is not {RULE}"
    before = _tree(tmp_path)
    assert _one_line(capsys, main(["validate", str(path)])) == expected
    for command in ("run", "plan"):
        args = [command, str(path), "--out", str(out), "--offline", "--quiet"]
        assert _one_line(capsys, main(args)) == expected
    assert _tree(tmp_path) == before and not out.exists()
    assert not Path("/abs").exists()


def test_an_absolute_name_cannot_replace_out(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """An absolute name (here one that points into tmp_path, where a write would show)."""
    name = str(tmp_path / "elsewhere")
    path = _task(tmp_path / "spec", name=name)
    before = _tree(tmp_path)
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert _one_line(capsys, code) == f"error: {path}: field 'name': {name!r} is not {RULE}"
    assert _tree(tmp_path) == before


def test_a_name_set_on_the_command_line_is_checked_alike(capsys: pytest.CaptureFixture) -> None:
    path = REPO / "tasks/rte.yaml"
    code = main(["validate", str(path), "--set", "name=../x"])
    where = f'{path} with --set name="../x"'
    assert _one_line(capsys, code) == f"error: {where}: field 'name': '../x' is not {RULE}"


def test_dots_spaces_and_unicode_stay_allowed(tmp_path: Path) -> None:
    from suite.study.storage import run_folder

    for name in ("rte.v2", "my task", "tâche-été", "...", ".hidden", "a..b"):
        task = load_task(_task(tmp_path / "spec", name=name))
        assert run_folder(tmp_path / "out", task, "minilm-l6") == tmp_path / "out" / name / "minilm-l6"


# `main` in a fresh interpreter on each argv given: per call its exit code and the CPU seconds of
# the whole process so far (interpreter start included; a loaded machine does not inflate them as
# it does wall time), then whether torch was ever imported.
PROBE = """
import json, resource, sys
from suite.commands.cli import main
calls = []
for argv in json.loads(sys.argv[1]):
    code = main(argv)
    use = resource.getrusage(resource.RUSAGE_SELF)
    calls.append([code, use.ru_utime + use.ru_stime])
print(json.dumps([calls, "torch" in sys.modules]))
"""


def test_escape_and_model_dots_are_refused_at_once_without_torch(tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "out"
    path = _task(tmp_path / "a" / "b" / "spec", name="../../escape")
    argvs = [
        ["run", str(path), "--out", str(out), "--workers", "2"],
        ["run", "rte", "--model", "..", "--out", str(out)],
    ]
    before = _tree(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ,
    )
    (escape, dots), torch = json.loads(done.stdout.strip().splitlines()[-1])
    assert (escape[0], dots[0], torch) == (2, 2, False), done.stderr
    assert done.stderr.splitlines() == [
        f"error: {path}: field 'name': '../../escape' is not {RULE}",
        f"error: --model '..': its runs' folder would be '..', which is not {RULE}",
    ]
    assert escape[1] < 2.0, escape
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("model", "slug"), [("..", ".."), (".", "."), ("../", ".."), ("/", ""), ("", "")])
def test_a_hostile_model_slug_is_refused(
    model: str, slug: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--model` is refused with the other arguments, before the task is read; the task's `model`
    field in the line naming the file and field."""
    problem = f"its runs' folder would be {slug!r}, which is not {RULE}"
    for command in ("run", "plan", "launch"):
        args = [command, "rte", "--model", model, "--out", str(tmp_path / "out"), "--workers", "1"]
        assert _one_line(capsys, main(args)) == f"error: --model {model!r}: {problem}"
    path = _task(tmp_path / "spec", model=model)
    assert _one_line(capsys, main(["validate", str(path)])) == (
        f"error: {path}: field 'model': {model!r}: {problem}"
    )
    assert _tree(tmp_path) == {"spec", "spec/task.yaml"}


def test_the_run_folder_must_lie_under_out(tmp_path: Path) -> None:
    """The last guard, for a spec that reached it unchecked (`model_construct` skips validation)."""
    from suite.study.storage import model_slug, run_folder

    good = load_task(REPO / "tasks/rte.yaml")
    for name in ("../x", "a/b", str(tmp_path / "abs"), "..", "."):
        task = TaskSpec.model_construct(**{**dict(good), "name": name})
        with pytest.raises(SuiteError, match=r"run folder .* is not under --out"):
            run_folder(tmp_path / "out", task, "minilm-l6")
    with pytest.raises(SuiteError, match=r"model '\.\.': its runs' folder would be '\.\.'"):
        model_slug("..")


def test_a_task_folder_linked_elsewhere_stays_usable(tmp_path: Path) -> None:
    """The guard reads `..` as spelled, not through symlinks: a task folder the user linked to
    another disk is theirs."""
    from suite.study.storage import run_folder

    (tmp_path / "out").mkdir()
    (tmp_path / "disk").mkdir()
    (tmp_path / "out" / "rte").symlink_to(tmp_path / "disk")
    task = load_task(REPO / "tasks/rte.yaml")
    assert run_folder(tmp_path / "out", task, "minilm-l6") == tmp_path / "out" / "rte" / "minilm-l6"


def test_a_worker_joining_a_study_stored_under_a_hostile_name_is_refused_in_one_line() -> None:
    """A study planned before names were checked holds its task as stored: a worker joining it
    is refused in one line naming the study, not with a validation traceback."""
    from suite.config.request import Request
    from suite.errors import SpecError
    from suite.study.setup import join_study

    task = load_task(REPO / "tasks/rte.yaml").model_dump(mode="json")
    info = {"task": {**task, "name": "a/b"}, "sweep": {}, "threads": 1}
    request = Request(storage="sqlite:///x.db", study="a/b|m|s|p")
    with pytest.raises(SpecError) as refused:
        join_study(request, info)
    line = str(refused.value)
    assert "\n" not in line and line.startswith("study 'a/b|m|s|p' (its stored task): ") and RULE in line
