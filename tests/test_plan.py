"""`suite plan`: the planned trials, what the storage holds, an estimate; nothing trained or written."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
from tests.conftest import run_tiny


def _plan(task: Path, model: Path, *extra: str, threads: str | None = "1") -> tuple[int, Path]:
    root = task.parent.parent
    out = root / "runs"
    args = ["plan", str(task), "--model", str(model), "--out", str(out), "--data-dir", str(root / "data")]
    code = main([*args, *(["--threads", threads] if threads else []), *extra])
    return code, out


def test_plan_counts_estimates_and_writes_nothing(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    grid = tiny_task.parent.parent / "sweeps" / "grid.yaml"
    grid.write_text(
        "name: grid\nhparams: {batch_size: 8, epochs: 2}\n"
        "space: {lr: {type: categorical, choices: [1.0e-3, 2.0e-3]}}\nseeds: {repeats: 3}\n"
    )
    code, out = _plan(tiny_task, tiny_models["bert"], "--sweep", str(grid), "--set", "sizes=[16, 32]")
    text, progress = capsys.readouterr()
    assert code == 0 and not out.exists()  # no run folder, no storage
    assert "planned: 2 size(s) x 2 setting(s) x 3 seeds = 12 trials" in text
    assert "does not exist yet; all 12 trials to run" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("16 ", "32 "))]
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("16", "lr=0.001", "16", "4", "3"),  # 16 examples, 2 epochs of 2 steps, 3 seeds
        ("16", "lr=0.002", "16", "4", "3"),
        ("32", "lr=0.001", "32", "8", "3"),
        ("32", "lr=0.002", "32", "8", "3"),
    ]
    assert "estimate: ~" in text and "for the 12 trials to run on 1 worker(s) x 1 threads" in text
    assert "batch 8: " in text
    # every setting under the 200-step floor: one warning line, and what lifts them
    assert "warning: 4 of 4 setting(s) train fewer than 200 optimizer steps" in text
    assert "size 16 lr=0.001: 4, size 16 lr=0.002: 4, size 32 lr=0.001: 8, size 32 lr=0.002: 8" in text
    # While it times the steps, a progress bar on stderr: 1 batch size, a warm-up, 3 timed steps, 1 dev batch
    assert "plan: timing 3 training steps per batch size" in progress and "0/5" in progress


def test_plan_shows_min_steps_lifting_every_setting_to_the_floor(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    """16 examples at batch 8, 2 epochs: 4 steps; min_steps 200 evaluates every 50th epoch, so
    100 epochs of 2 steps; 32 examples: every 25th, 50 epochs of 4 steps. No warning then."""
    code, _ = _plan(
        tiny_task, tiny_models["bert"], "--set", "sizes=[16, 32]", "--set", "sweep.hparams.min_steps=200"
    )
    text = capsys.readouterr().out
    steps = [line.split()[3] for line in text.splitlines() if line.strip().startswith(("16 ", "32 "))]
    assert code == 0 and steps == ["200", "200"] and "warning" not in text


def test_plan_reports_what_the_storage_holds_and_a_refusal(
    tiny_study: tuple[Path, Path], tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    tiny_task, folder = tiny_study
    storage = f"sqlite:///{folder / 'study.db'}"
    (name,) = optuna.study.get_all_study_names(storage)
    before = len(optuna.load_study(study_name=name, storage=storage).trials)
    capsys.readouterr()
    code, _ = _plan(tiny_task, tiny_models["bert"])
    text = capsys.readouterr().out
    assert code == 0
    assert "holds 3 of the 3 planned trials (3 ended as runs, 0 queued or running); 0 to run" in text
    assert "estimate: ~0 s for the 0 trials to run" in text
    code, _ = _plan(tiny_task, tiny_models["bert"], "--set", "max_length=24", "--seeds", "4")
    captured = capsys.readouterr()
    assert code == 2 and "task.max_length 32 -> 24" in captured.err and captured.err.count("\n") == 1
    # Trial keys name the seeds and hparams, not max_length: the fingerprint is what refuses.
    assert "holds 3 of the 4 planned trials (3 ended as runs, 0 queued or running); 1 to run" in captured.out
    assert len(optuna.load_study(study_name=name, storage=storage).trials) == before


def test_plan_uses_the_studys_threads_and_refuses_other_ones(
    tiny_task: Path, tiny_models: dict, capsys: pytest.CaptureFixture
) -> None:
    """Threads per worker are fixed when a study is created: without --threads, `plan` (like
    `run`) takes the stored ones whatever --workers says; a differing --threads is one line
    naming both, exit 2, before anything is timed."""
    run_tiny(tiny_task, tiny_models["bert"], "--threads", "2")
    capsys.readouterr()
    for workers in ("1", "auto", "3"):
        code, _ = _plan(tiny_task, tiny_models["bert"], "--workers", workers, threads=None)
        text = capsys.readouterr().out
        assert code == 0 and "x 2 threads" in text and "0 to run" in text
    code, _ = _plan(tiny_task, tiny_models["bert"], threads="1")
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and captured.err.count("\n") == 1
    assert "--threads 1:" in captured.err and "2 thread(s) per worker" in captured.err
    assert "threads 2 -> 1" in captured.err
