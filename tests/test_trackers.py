"""`--log-to`: every trial and the study's summary in MLflow (a real SQLite store, read back through
MLflow's client), TensorBoard (event files read back with its reader), CSV and W&B (offline);
a tracker not installed is one line before training; a trial's numbers are the same without it."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

from suite.commands.cli import main
from tests.conftest import run_tiny


def _records(folder: Path) -> list[dict]:
    rows = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: r["trial_number"])


def test_trackers_log_each_trial_and_the_summary_and_change_no_number(
    tiny_task: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """One tiny study logged to MLflow, TensorBoard and CSV at once (two studies: CPU time)."""
    logs = tmp_path / "logs"
    trackers = (
        "mlflow:" + str(logs / "mlflow"),
        "tensorboard:" + str(logs / "tb"),
        "csv:" + str(logs / "csv"),
    )
    folder = run_tiny(tiny_task, tiny_models["bert"], *[a for t in trackers for a in ("--log-to", t)])
    _mlflow_holds_one_run_per_trial_under_the_study(folder, logs)
    _tensorboard_and_csv_hold_each_trials_metrics(folder, logs)
    _a_trials_numbers_are_the_same_without_trackers(folder, tiny_task, tiny_models)


def _mlflow_holds_one_run_per_trial_under_the_study(folder: Path, logs: Path) -> None:
    from mlflow import MlflowClient

    records = _records(folder)
    client = MlflowClient(f"sqlite:///{logs / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tiny")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if r.data.tags.get("suite.role") == "study"]
    trials = {r.data.tags["suite.trial"]: r for r in runs if "suite.trial" in r.data.tags}
    assert len(parents) == 1 and len(trials) == len(records) == 3
    parent = parents[0]
    study = records[0]["study"]
    assert parent.data.tags["suite.study"] == study and parent.info.status == "FINISHED"
    for record in records:
        run = trials[str(record["trial_number"])]
        tags = run.data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["suite.study"] == study and tags["suite.task"] == "tiny"
        assert tags["suite.size"] == str(record["size"]) and tags["suite.outcome"] == record["outcome"]
        assert {k: int(tags[f"suite.seed.{k}"]) for k in record["seeds"]} == record["seeds"]
        assert json.loads(tags["suite.setting"]) == record["hparams"]
        assert run.data.params["lr"] == str(record["hparams"]["lr"])
        assert run.data.params["epochs"] == str(record["hparams"]["epochs"])
        loss = client.get_metric_history(run.info.run_id, "train_loss")
        assert [m.value for m in sorted(loss, key=lambda m: m.step)] == pytest.approx(record["loss_curve"])
        dev = client.get_metric_history(run.info.run_id, "dev_accuracy")
        assert [m.value for m in sorted(dev, key=lambda m: m.step)] == pytest.approx(
            [e["accuracy"] for e in record["epochs"]]
        )
        assert run.data.metrics["score"] == pytest.approx(record["score"])
    # the summary: one (size, setting) here, its median and failed runs counted by hand
    scores = sorted(r["score"] for r in records)
    metrics = parent.data.metrics
    median = [v for k, v in metrics.items() if k.endswith("/median")]
    assert median == [pytest.approx(scores[1])]
    failed = [v for k, v in metrics.items() if k.endswith("/failed")]
    assert failed == [sum(r["outcome"] == "failed" for r in records)]


def _tensorboard_and_csv_hold_each_trials_metrics(folder: Path, logs: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = _records(folder)
    for tracker in ("tb", "csv"):  # one study folder, one version folder per trial, a summary file
        (study,) = [p for p in (logs / tracker).iterdir() if p.is_dir()]
        summary = json.loads((study / "summary.json").read_text())
        assert sum(row["runs"] for row in summary["rows"]) == len(records)
    for record in records:
        (events,) = (logs / "tb").glob(f"*/trial {record['trial_number']}/events.out.tfevents.*")
        acc = EventAccumulator(str(events.parent))
        acc.Reload()
        loss = [e.value for e in acc.Scalars("train_loss")]
        assert loss == pytest.approx(record["loss_curve"], rel=1e-6)
        dev = [e.value for e in acc.Scalars("dev_accuracy")]
        assert dev == pytest.approx([e["accuracy"] for e in record["epochs"]], rel=1e-6)
        (metrics,) = (logs / "csv").glob(f"*/trial {record['trial_number']}/metrics.csv")
        rows = list(csv.DictReader(metrics.open()))
        assert [float(r["train_loss"]) for r in rows if r["train_loss"]] == pytest.approx(
            record["loss_curve"]
        )
        assert [float(r["score"]) for r in rows if r.get("score")] == pytest.approx([record["score"]])


def _a_trials_numbers_are_the_same_without_trackers(
    folder: Path, tiny_task: Path, tiny_models: dict[str, Path]
) -> None:
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--quiet"]
    root = tiny_task.parent.parent
    out = root / "plain"
    assert main([*args, "--out", str(out), "--data-dir", str(root / "data")]) == 0
    (plain,) = out.glob("tiny/*")
    fields = ("key", "score", "loss_curve", "epochs", "per_example")
    for a, b in zip(_records(folder), _records(plain), strict=True):
        assert [a[k] for k in fields] == [b[k] for k in fields]
    # trackers are not the study's identity: the same study, rerun with one, resumes with nothing to train
    logs = root / "later"
    assert main([*args, "--out", str(out), "--data-dir", str(root / "data"), "--log-to", f"csv:{logs}"]) == 0
    assert len(_records(plain)) == len(_records(folder))
    assert not list(logs.glob("*/trial */metrics.csv")) and list(logs.glob("*/summary.json"))


def test_a_tracker_not_installed_is_one_line_before_training(
    tiny_task: Path,
    tiny_models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setitem(sys.modules, "mlflow", None)  # `import mlflow` now fails as if not installed
    folder = run_tiny(tiny_task, tiny_models["bert"], "--log-to", "mlflow", expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--log-to mlflow" in err[0] and "mlflow-skinny" in err[0]
    assert not list(folder.rglob("trials.jsonl"))


def test_an_unknown_tracker_is_one_line(tiny_task: Path, tiny_models: dict[str, Path], capsys) -> None:
    run_tiny(tiny_task, tiny_models["bert"], "--log-to", "neptune", expect=2)
    assert "--log-to 'neptune'" in capsys.readouterr().err


def test_a_tracker_that_could_not_log_is_one_line_before_training(
    tiny_task: Path, tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:  # noqa: ANN001
    """A run is logged after its trial ends and a rerun trains nothing: a tracker that cannot take
    the runs (a folder it cannot make, W&B with no login, where wandb.init would prompt) is
    refused before any training."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    folder = run_tiny(tiny_task, tiny_models["bert"], "--log-to", f"csv:{blocker / 'logs'}", expect=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--log-to csv:{blocker / 'logs'}: cannot make its folder" in err[0]
    assert not list(folder.rglob("trials.jsonl"))
    for name in ("WANDB_API_KEY", "WANDB_MODE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    from suite.errors import SpecError
    from suite.study.trackers import targets_of

    with pytest.raises(SpecError, match="--log-to wandb: W&B is not logged in"):
        targets_of(["wandb"])
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert targets_of(["wandb"])[0].kind == "wandb"


def test_workers_get_the_trackers() -> None:
    from suite.config.request import Request
    from suite.study.supervise import worker_command

    class S:  # the fields `worker_command` reads
        url, name, threads, trainer = "sqlite:///x.db", "s", 1, {}
        request = Request(task="t", log_to=("csv:/tmp/x", "mlflow"))

    command = worker_command(S())  # type: ignore[arg-type]
    assert command[-4:] == ["--log-to", "csv:/tmp/x", "--log-to", "mlflow"]
    assert main(["worker", "--storage", "sqlite:///nowhere.db", "--study", "s", "--log-to", "bogus"]) == 2


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed")
def test_wandb_offline_holds_one_run_per_trial(
    tiny_task: Path, tiny_models: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_tiny(tiny_task, tiny_models["bert"], "--seeds", "1", "--log-to", "wandb:tiny-test")
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2  # the trial and the study's summary
    assert all(list(run.glob("*.wandb")) for run in runs)


def test_workers_started_by_run_log_every_trial_under_one_parent(
    tiny_task: Path, tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    store = tmp_path / "mlflow"
    args = (
        "--workers",
        "2",
        "--threads",
        "1",
        "--log-to",
        f"mlflow:{store}",
        "--log-to",
        f"csv:{tmp_path / 'csv'}",
    )
    folder = run_tiny(tiny_task, tiny_models["bert"], *args)
    records = _records(folder)
    assert all(not r["worker"].endswith(f":{os.getpid()}") for r in records)  # worker processes ran them
    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    (parent,) = [r.info.run_id for r in runs if r.data.tags.get("suite.role") == "study"]
    trials = [r for r in runs if "suite.trial" in r.data.tags]
    assert sorted(int(r.data.tags["suite.trial"]) for r in trials) == [r["trial_number"] for r in records]
    assert {r.data.tags["mlflow.parentRunId"] for r in trials} == {parent}
    assert len({r.data.tags["suite.seed.order"] for r in trials}) == len(records)  # each its own trial
    assert len(list((tmp_path / "csv").glob("*/trial */metrics.csv"))) == len(records)
