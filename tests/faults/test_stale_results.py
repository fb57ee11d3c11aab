"""A study's numbers always belong to the spec that made them: a changed task field, data file,
evaluation split, model or thread count is refused before any work, naming what changed."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
from tests.conftest import run_tiny


def _trials(folder: Path) -> int:
    storage = f"sqlite:///{folder / 'study.db'}"
    return sum(s.n_trials for s in optuna.get_all_study_summaries(storage))


def _refused(capsys: pytest.CaptureFixture, task: Path, model: Path, *extra: str) -> str:
    before = (task.parent.parent / "runs").glob("*/*/trials.jsonl")
    snapshot = {p: p.read_text() for p in before}
    run_tiny(task, model, *extra, expect=2)
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    assert {p: p.read_text() for p in snapshot} == snapshot  # the old outputs are untouched
    return err


def test_changed_task_field_is_refused_naming_it(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, folder = tiny_study
    n = _trials(folder)
    task.write_text(task.read_text().replace("max_length: 32", "max_length: 16"))
    err = _refused(capsys, task, tiny_models["bert"])
    assert "task.max_length 32 -> 16" in err and "--out" in err and "--study" in err
    assert _trials(folder) == n  # nothing trained, nothing queued


def test_changed_failure_rule_and_eval_limit_are_refused(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, _ = tiny_study
    task.write_text(task.read_text() + "eval_limit: 10\nfailure: {margin: 0.05}\n")
    err = _refused(capsys, task, tiny_models["bert"])
    assert "task.eval_limit null -> 10" in err and "task.failure.margin 0.0 -> 0.05" in err


def test_edited_data_file_is_refused(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, _ = tiny_study
    train = task.parent.parent / "data" / "tiny" / "train.tsv"
    lines = train.read_text().splitlines()
    train.write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")  # same path, new content
    err = _refused(capsys, task, tiny_models["bert"])
    assert "data.train " in err


def test_other_eval_split_is_refused(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    data = tiny_task.parent.parent / "data" / "tiny"
    (data / "test.tsv").write_text((data / "dev.tsv").read_text())
    tiny_task.write_text(
        tiny_task.read_text().replace("validation: dev.tsv", "validation: dev.tsv, test: test.tsv")
    )
    run_tiny(tiny_task, tiny_models["bert"])
    err = _refused(capsys, tiny_task, tiny_models["bert"], "--eval-split", "test")
    assert "task.eval_split validation -> test" in err


def test_other_thread_count_is_refused(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, _ = tiny_study  # run with --threads 1
    err = _refused(capsys, task, tiny_models["bert"], "--threads", "2")
    assert "threads 1 -> 2" in err


def test_same_command_resumes_and_a_new_study_name_starts_afresh(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    tiny_task, folder = tiny_study
    first = (folder / "trials.jsonl").read_text()
    run_tiny(tiny_task, tiny_models["bert"])
    assert (folder / "trials.jsonl").read_text() == first and _trials(folder) == 3
    tiny_task.write_text(tiny_task.read_text().replace("max_length: 32", "max_length: 16"))
    run_tiny(tiny_task, tiny_models["bert"], "--study", "short")
    # The folder's outputs now belong to the new study alone; the old one stays in the storage.
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3 and {r["study"] for r in records} == {"short"}
    assert json.loads((folder / "run.json").read_text())["task"]["max_length"] == 16
    assert _trials(folder) == 6


def test_worker_refuses_a_study_it_would_run_differently(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, folder = tiny_study  # run with --threads 1
    name = json.loads((folder / "run.json").read_text())["study"]
    data = task.parent.parent / "data"
    common = ["worker", "--storage", f"sqlite:///{folder / 'study.db'}", "--study", name, "--quiet"]
    assert main([*common, "--data-dir", str(data), "--threads", "1"]) == 0  # same inputs: joins
    assert main([*common, "--data-dir", str(data), "--threads", "2"]) == 2
    assert "threads 1 -> 2" in capsys.readouterr().err
    (data / "tiny" / "dev.tsv").write_text(
        (data / "tiny" / "dev.tsv").read_text().replace("\tyes", "\tno", 1)
    )
    assert main([*common, "--data-dir", str(data), "--threads", "1"]) == 2
    assert "data.dev " in capsys.readouterr().err


def test_study_without_fingerprint_is_refused(tiny_study, tiny_models, capsys) -> None:  # noqa: ANN001
    task, folder = tiny_study
    storage = f"sqlite:///{folder / 'study.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    study._storage.set_study_user_attr(study._study_id, "fingerprint", None)  # an older suite's study
    err = _refused(capsys, task, tiny_models["bert"])
    assert "has no fingerprint" in err


def test_feature_cache_follows_file_content_and_rebuilds_a_torn_file(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    from suite.config.task import load_task
    from suite.data.cache import cache_dir
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_tokenizer

    root = tiny_task.parent.parent / "data"
    tokenizer = load_tokenizer(str(tiny_models["bert"]))
    data = prepare_task(load_task(tiny_task), root, tokenizer).data
    indices = data.train_indices(8, 0)
    before = data.features("train", indices)
    train = root / "tiny" / "train.tsv"
    train.write_text(train.read_text().replace("red", "violet"))  # same path, same labels
    edited = prepare_task(load_task(tiny_task), root, tokenizer).data
    assert edited.features("train", indices) != before  # no stale features from the old content

    newest = max((cache_dir() / "features").glob("*.pt"), key=lambda p: p.stat().st_mtime)
    newest.write_bytes(newest.read_bytes()[:100])  # torn
    rebuilt = prepare_task(load_task(tiny_task), root, tokenizer).data.features("train", indices)
    assert rebuilt == edited.features("train", indices) and newest.stat().st_size > 100
