"""Every ending says what happened, in one true line with an exit code by its kind: a broken model
folder, an unwritable output folder, a spec too large to read, an internal error (a bug report in
`crash.txt`), and nothing empty or misleading left behind."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import as_from_a_terminal, run_tiny

pytestmark = pytest.mark.faults


def _one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err[-3000:]
    return err.strip()


def test_a_truncated_weights_file_is_one_line_before_any_trial(
    tiny_task: Path, tiny_models, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:  # noqa: ANN001
    model = tmp_path / "model"
    shutil.copytree(tiny_models["bert"], model)
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a copy that did not finish
    folder = run_tiny(tiny_task, model, "--threads", "1", expect=2)
    line = _one_line(capsys)
    assert line.startswith(f"error: model '{model}': {weights} does not load (") and "restore" in line
    assert not (folder / "trials.jsonl").exists()


def test_a_spec_over_the_size_limit_is_refused_before_it_is_parsed(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from suite.commands.cli import main
    from suite.config.reading import MAX_SPEC_BYTES

    spec = tmp_path / "huge.yaml"
    spec.write_text("name: huge\n" + "# padding\n" * (MAX_SPEC_BYTES // 10 + 1))
    assert main(["validate", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{spec}: " in err and "bytes, over the 262,144 a task" in err, err


def test_a_spec_is_parsed_once_and_read_afresh_when_it_changes(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from suite.config import reading

    spec = tmp_path / "s.yaml"
    spec.write_text("lr: 1.0e-3\n")
    parsed = []
    real = reading._parsed
    monkeypatch.setattr(reading, "_parsed", lambda *a: parsed.append(a) or real(*a))
    first = reading.read_yaml(spec)
    first["lr"] = "changed by a caller"
    assert reading.read_yaml(spec) == {"lr": 1.0e-3} and len(parsed) == 1  # a copy, parsed once
    spec.write_text("lr: 2.0e-3\n")  # the same size, at once: read by content, not by time
    assert reading.read_yaml(spec) == {"lr": 2.0e-3} and len(parsed) == 2


def test_progress_is_skipped_silently_on_a_storage_fault_and_a_taken_over_trial_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings
    from types import SimpleNamespace

    import optuna
    from optuna.trial import TrialState

    from suite.study.plan import PROGRESS_ATTR
    from suite.study.storage import open_storage
    from suite.study.trial_progress import TakenOver, TrialProgress

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'study.db'}"))
    trial = study.ask()
    watch = TrialProgress(trial, "accuracy", interval=0)
    trainer = SimpleNamespace(estimated_stepping_batches=10, current_epoch=0, max_epochs=1, global_step=3)
    watch._send(trainer)
    assert study.trials[0].user_attrs[PROGRESS_ATTR]["step"] == 3

    def full(*_: object) -> None:
        raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.")

    with monkeypatch.context() as patched, warnings.catch_warnings():
        warnings.simplefilter("error")  # no UserWarning reaches the user
        patched.setattr(trial, "set_user_attr", full)
        watch._send(trainer)
    study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)  # failed as stale
    with pytest.raises(TakenOver):
        watch._send(trainer)


def test_a_record_that_cannot_be_kept_leaves_no_empty_folder(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    import optuna

    from suite.study import pending
    from suite.study.storage import open_storage

    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'study.db'}"))
    study.enqueue_trial({}, user_attrs={"key": "size=32|x|init=0", "attempt": 1, "setting": {}})
    trial = optuna.Trial(study, study.trials[0]._trial_id)

    def no_space(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pending.os, "replace", no_space)
    places = [tmp_path / "study.db.pending", tmp_path / "home/.cache/suite/pending"]
    assert pending.keep(pending.Keeping(places, "u" * 32), "s", trial, {"key": "k"}, 0.5) is None
    assert not places[0].exists() and not places[1].exists()
    assert (tmp_path / "home/.cache/suite").is_dir()  # made by mkdir's parents: only the leaf is ours


def test_memory_out_while_writing_the_outputs_is_one_line_and_the_rerun_writes_them(
    tiny_study: tuple[Path, Path], tiny_models, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:  # noqa: ANN001  # fmt: skip
    from suite.outputs import leaderboard

    task, folder = tiny_study
    (folder / "leaderboard.json").unlink()
    trace = tmp_path / "trace"
    monkeypatch.setenv("SUITE_TRACE", str(trace))

    def no_memory(*_: object, **__: object) -> None:
        raise MemoryError

    with monkeypatch.context() as patched:
        patched.setattr(leaderboard, "write_leaderboard", no_memory)
        run_tiny(task, tiny_models["bert"], "--threads", "1", expect=1)
    line = _one_line(capsys)
    assert line == (
        f"error: {folder}: out of memory while writing the outputs; every ended trial is kept in the "
        "storage: rerun the same command with more memory to write them (nothing trains again)"
    )
    run_tiny(task, tiny_models["bert"], "--threads", "1")
    assert (folder / "leaderboard.json").is_file() and "size setting" in capsys.readouterr().out
    assert not any(line.startswith("trial ") for line in trace.read_text().splitlines())  # nothing trained


def _refused_early(args: list[str], wrap: tuple[str, ...] = ()) -> str:
    """`args` refused in one line, exit 2, before torch, in a fresh interpreter (the fault suite's probe)."""
    from tests.faults.test_early_refusals import _refused

    return _refused(args, wrap).strip()


def test_an_output_that_cannot_be_written_is_refused_before_torch(tmp_path: Path) -> None:
    """`--out /proc/x` (no folder can be made there), a file where a folder goes, and `-o` of the
    commands that write one file or folder: one line each, before any heavy import."""
    task = Path(__file__).resolve().parents[2] / "tasks/rte.yaml"
    (tmp_path / "a-file").write_text("")
    for command in ("run", "plan"):
        line = _refused_early([command, str(task), "--out", "/proc/x"])
        assert line == "error: --out /proc/x: /proc is not writable; give another --out"
    line = _refused_early(["run", str(task), "--out", str(tmp_path / "a-file/runs")])
    where = tmp_path / "a-file"
    assert line == f"error: --out {where}/runs: {where} is a file, not a folder; give another --out"
    for command in (["leaderboard", str(tmp_path)], ["site", str(tmp_path)], ["export", str(tmp_path)]):
        line = _refused_early([*command, "-o", "/proc/x/out"])
        assert line == "error: -o /proc/x/out: /proc is not writable; give another -o"


def test_report_on_a_read_only_run_folder_is_one_line_before_its_kernel(
    tiny_study: tuple[Path, Path]
) -> None:
    """A run folder mounted read-only (as a user who cannot bypass file modes meets one): refused in
    one line before the kernel starts (it used to run 30 s, then end in nbformat's traceback)."""
    _, folder = tiny_study
    mount = f"mount --bind {folder} {folder} && mount -o remount,bind,ro {folder} && exec \"$0\" \"$@\""
    if not shutil.which("unshare") or os.system(f"unshare -m sh -c 'mount --bind {folder} {folder}'"):
        pytest.skip("no private mount namespace here (unshare -m): a read-only folder cannot be made")
    line = _refused_early(["report", str(folder)], wrap=("unshare", "-m", "sh", "-c", mount))
    assert line == (
        f"error: report {folder}: {folder} is not writable; copy the run folder somewhere writable "
        "and report on the copy"
    )


def test_a_huge_spec_is_refused_before_torch(tmp_path: Path) -> None:
    spec = tmp_path / "huge.yaml"
    spec.write_text("name: huge\n" + "x: 1\n" * 1_000_000)  # 5 MB: PyYAML took minutes over it
    assert "bytes, over the 262,144 a task" in _refused_early(["run", str(spec), "--out", str(tmp_path)])


def test_an_internal_error_leaves_crash_txt_and_one_line(
    tiny_study: tuple[Path, Path], tiny_models, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:  # noqa: ANN001  # fmt: skip
    """A bug (here an AttributeError injected as a study plans, and as a report starts) is not an
    input error: its traceback goes to the run folder's crash.txt, one line names it, exit 1."""
    from suite.commands.cli import main
    from suite.outputs import report
    from suite.study import planning

    task, folder = tiny_study

    def bug(*_: object, **__: object) -> None:
        raise AttributeError("'NoneType' object has no attribute 'sizes'")

    monkeypatch.setattr(planning, "print_budgets", bug)
    args = ["run", str(task), "--model", str(tiny_models["bert"]), "--out", str(folder.parent.parent)]
    assert main([*args, "--data-dir", str(task.parent.parent / "data"), "--quiet", "--threads", "1"]) == 1
    line = _one_line(capsys)
    crash = folder / "crash.txt"
    assert line == (
        "error: internal error (AttributeError: 'NoneType' object has no attribute 'sizes'), a bug in "
        f"suite: its traceback is in {crash}; please report it with that file"
    )
    text = crash.read_text()
    assert "Traceback (most recent call last)" in text and "print_budgets" in text and "in bug" in text
    crash.unlink()
    monkeypatch.setattr(report, "make_report", bug)
    assert main(["report", str(folder)]) == 1
    assert _one_line(capsys).endswith(f"its traceback is in {crash}; please report it with that file")
    assert "make_report" in crash.read_text()


RECIPES = (
    "name: three\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\nseeds: {master: 0, repeats: 2}\n"
    "recipes: {a: {lr: 1.0e-3}, b: {lr: 2.0e-3}, c: {lr: 3.0e-3}}\n"
)


def test_a_recipe_study_is_queued_seed_by_seed(tiny_task: Path, tmp_path: Path) -> None:
    """The trials of one seed cell across recipes are queued next to each other and popped in that
    order: any 3 trials taken first are one complete seed pair of the 3 recipes."""
    import optuna

    from suite.config.sweep import load_sweep
    from suite.config.task import load_task
    from suite.study.plan import enqueue_plan
    from suite.study.queue import pop_planned
    from suite.study.storage import open_storage

    (tmp_path / "three.yaml").write_text(RECIPES)
    task, sweep = load_task(tiny_task), load_sweep(tmp_path / "three.yaml")
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'study.db'}"))
    assert enqueue_plan(study, task, sweep) == 6
    for _ in range(2):
        taken = [pop_planned(study) for _ in range(3)]
        cells = {json.dumps(t.user_attrs["seeds"], sort_keys=True) for t in taken}
        assert len(cells) == 1 and sorted(t.user_attrs["setting"]["recipe"] for t in taken) == ["a", "b", "c"]


@pytest.mark.slow
def test_a_study_stopped_partway_answers_report_and_compare_with_how_many_ended(
    tiny_task: Path, tiny_models, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:  # noqa: ANN001
    """Stopped (Ctrl-C) as its fourth trial starts, a 3-recipe study writes its outputs from the 3
    that ended, which are one complete seed pair; `report` and `compare` on its folder work and say
    how many of how many ended."""
    import signal
    import subprocess
    import sys
    import time

    from suite.commands.cli import main

    (tiny_task.parent.parent / "sweeps" / "tiny.yaml").write_text(RECIPES)
    root, trace = tiny_task.parent.parent, tmp_path / "trace"
    command = [sys.executable, "-m", "suite", "run", str(tiny_task), "--model", str(tiny_models["bert"])]
    command += ["--out", str(root / "runs"), "--data-dir", str(root / "data"), "--quiet", "--threads", "1"]
    env = {**os.environ, "SUITE_TRACE": str(trace), "SUITE_STALL_AT": "trial:4", "PYTHONFAULTHANDLER": "1"}
    run = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal,
    )
    deadline = time.time() + 300
    def started() -> int:
        lines = trace.read_text().splitlines() if trace.exists() else []
        return sum(line.startswith("trial ") for line in lines)

    while started() < 4:
        assert time.time() < deadline and run.poll() is None, run.stderr.read() if run.poll() else "slow"
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)
    try:
        out, err = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:  # where it hangs: each thread's stack (faulthandler, on SIGABRT)
        run.send_signal(signal.SIGABRT)
        stacks = run.communicate()[1].split("\nExtension modules")[0]  # the threads' stacks, not the list
        pytest.fail(f"run did not end within 120 s of its Ctrl-C:\n{stacks[-8000:]}")
    assert run.returncode == 130, err[-3000:]
    assert "interrupted: 3 of 6 planned trials ended" in err and "size setting" in out, (out, err)
    folder = root / "runs" / "tiny" / "bert"
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert len({json.dumps(r["seeds"], sort_keys=True) for r in records}) == 1  # one complete pair
    assert sorted(r["hparams"]["recipe"] for r in records) == ["a", "b", "c"]
    note = f"{folder}: 3 of 6 planned trials ended as runs (the study stopped partway, or some errored)"
    capsys.readouterr()
    assert main(["compare", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith(note) and "recipe" in shown
    assert main(["report", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("wrote ") and note in shown and (folder / "report.html").is_file()


def test_progress_in_a_log_is_a_line_per_ended_trial_and_a_line_every_few_minutes(
    capsys: pytest.CaptureFixture,
) -> None:
    """stderr not a terminal (here pytest's capture, as a log file or a Slurm job's .err): lines,
    never a bar redrawn with carriage returns."""
    from suite.study.progress_lines import ProgressLines, progress_bar

    bar = progress_bar("trials (2 workers)", 9)
    assert isinstance(bar, ProgressLines) and bar.every_s == 300
    bar.set_postfix_str("trial 0: epoch 1/4, step 10/216")  # within 300 s of the start: quiet
    bar.update(0)
    bar.update(1)
    bar.every_s = 0  # a few minutes later
    bar.set_postfix_str("trial 1: epoch 2/4, step 60/216")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "\r" not in "".join(lines)
    assert lines[0].endswith("trials (2 workers): 1/9 ended | trial 0: epoch 1/4, step 10/216")
    assert lines[1].endswith("trials (2 workers): 1/9 ended; running: trial 1: epoch 2/4, step 60/216")
    assert progress_bar("trials", 9, disable=True).disable  # --quiet: no progress at all
