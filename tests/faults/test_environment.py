"""A broken environment gets one clear line (exit 2), nothing half-done is kept as a result, and
the same command after the fix continues where it stopped."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import optuna
import pytest

from tests.conftest import run_tiny


def _one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def _disk_full(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    raise OSError(errno.ENOSPC, "No space left on device")


_write_text = Path.write_text


def _disk_full_for_outputs(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
    """The disk fills up once training is done: every output is written as a .tmp first."""
    if self.suffix == ".tmp":
        _disk_full()
    return _write_text(self, *args, **kwargs)


def test_output_folder_that_cannot_exist(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    from suite.commands.cli import main

    blocker = tiny_task.parent.parent / "runs-file"
    blocker.write_text("a file where the runs folder should go")
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--out", str(blocker / "runs")]
    data = ["--data-dir", str(tiny_task.parent.parent / "data"), "--quiet"]
    assert main([*args, *data]) == 2
    assert "--out" in _one_line(capsys) and blocker.is_file()
    blocker.unlink()  # the fix
    blocker.mkdir()
    assert main([*args, *data]) == 0 and list((blocker / "runs").glob("*/*/trials.jsonl"))


def test_disk_full_while_writing_outputs_then_rerun(
    tiny_task: Path, tiny_models, capsys, monkeypatch
) -> None:  # noqa: ANN001, E501
    monkeypatch.setattr(Path, "write_text", _disk_full_for_outputs)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=2)
    err = _one_line(capsys)
    assert "No space left on device" in err and "rerun" in err
    assert not list(folder.glob("*.tmp")) and not (folder / "trials.jsonl").exists()
    storage = f"sqlite:///{folder / 'study.db'}"
    trained = optuna.load_study(study_name=None, storage=storage).get_trials()
    assert len(trained) == 3 and all(t.state.name == "COMPLETE" for t in trained)  # nothing lost

    monkeypatch.undo()
    run_tiny(tiny_task, tiny_models["bert"])  # the fix: the same command writes the outputs
    assert len(optuna.load_study(study_name=None, storage=storage).get_trials()) == 3  # no retraining
    assert len((folder / "trials.jsonl").read_text().splitlines()) == 3


def test_disk_full_while_caching_features(
    tiny_task: Path, tiny_models, capsys, monkeypatch, tmp_path
) -> None:  # noqa: ANN001, E501
    import torch

    monkeypatch.setenv("SUITE_CACHE_DIR", str(tmp_path / "fresh-cache"))
    monkeypatch.setattr(torch, "save", _disk_full)
    out = tiny_task.parent.parent / "runs"
    run_tiny(tiny_task, tiny_models["bert"], expect=2)
    assert "feature cache" in _one_line(capsys) and not out.exists()  # caught before any write
    monkeypatch.undo()
    monkeypatch.setenv("SUITE_CACHE_DIR", str(tmp_path / "fresh-cache"))
    run_tiny(tiny_task, tiny_models["bert"])


def test_unreachable_storage_masks_the_password(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    out = tiny_task.parent.parent / "runs"
    run_tiny(
        tiny_task, tiny_models["bert"], "--storage", "postgresql://suite:s3cret@127.0.0.1:9/none", expect=2
    )
    err = _one_line(capsys)
    assert "--storage" in err and "s3cret" not in err and "suite:***@" in err
    assert not out.exists()  # nothing written before the storage answered


def test_unknown_model_offline_writes_nothing(tiny_task: Path, capsys, tmp_path: Path) -> None:
    run_tiny(tiny_task, tmp_path / "no-such-model", expect=2)
    assert "unknown model" in _one_line(capsys)
    assert not (tiny_task.parent.parent / "runs").exists()


def test_report_compare_and_leaderboard_work_without_the_storage_password(
    tiny_task: Path, tiny_models
) -> None:  # noqa: ANN001, E501
    """A run folder is self-contained: its run.json names the storage with the password masked,
    and report/compare/leaderboard read the folder's own files."""
    from suite.commands.cli import main

    folder = run_tiny(tiny_task, tiny_models["bert"])
    info = json.loads((folder / "run.json").read_text())
    info["storage"] = "postgresql://suite:***@db.example/suite"  # as written for a server storage
    (folder / "run.json").write_text(json.dumps(info))
    (folder / "study.db").rename(folder / "elsewhere.db")  # the storage is out of reach
    assert main(["leaderboard", str(folder), "-o", str(folder / "board.json")]) == 0
    assert main(["compare", str(folder), str(folder)]) == 0
