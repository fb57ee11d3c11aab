"""Round trip, exactly: `suite export` of a study the suite trained, then `suite import` of that file,
gives a leaderboard whose entries equal the native one's in every statistic, to the last digit, on a
recipe study, a K-shot study and a synthetic study of 2 sizes x settings with failed, diverged and
retried runs and reported numbers to test against. No bootstrap seed depends on what the import
changes (the study's name, its folder, its provenance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scale_data import make_records, write_study
from suite.commands.cli import main
from tests.conftest import run_tiny, write_tiny_task

# Entry fields that are not statistics but the study's provenance, which an imported study states
# itself (docs/runs.md, "Round trip"): when and with what it was trained, the sweep, the data's hashes
# (not hashed for runs scored elsewhere: the rank group's `data` digest with them), being imported.
PROVENANCE = {
    "date", "git_commit", "versions", "stack", "sweep", "profile", "pruner", "task_hash",
    "model_revision", "data_origin", "data_sha256", "imported",
}  # fmt: skip
REPORTED = "{model: bert, value: 51.0, metric: accuracy, statistic: median, n_runs: 5, split: dev, size: 32}"


def _task(root: Path) -> Path:
    """The tiny task with a number reported for the tiny model at size 32, so a gap is tested."""
    task = write_tiny_task(root)
    task.write_text(task.read_text() + f"reported:\n  - {REPORTED[:-1]}, source: a test}}\n")
    return task


def _entries(board: Path) -> list[dict[str, Any]]:
    return json.loads(board.read_text())["entries"]


def _statistics(entry: dict[str, Any]) -> dict[str, Any]:
    kept = {k: v for k, v in entry.items() if k not in PROVENANCE}
    kept["rank_group"] = {k: v for k, v in entry["rank_group"].items() if k != "data"}
    return kept


def _round_trip(native: Path, task: Path, tmp_path: Path, suffix: str = ".jsonl") -> Path:
    """Export the native study, import the file as the same task, model and max_length."""
    exported = tmp_path / f"exported{suffix}"
    assert main(["export", str(native), "-o", str(exported)]) == 0
    info = json.loads((native / "run.json").read_text())
    out = tmp_path / f"imported{suffix.replace('.', '-')}"
    args = ["import", str(exported), "--task", str(task), "--model", info["model"], "--out", str(out)]
    assert (
        main(
            [
                *args,
                "--max-length",
                str(info["task"]["max_length"]),
                "--data-dir",
                str(task.parent.parent / "data"),
            ]
        )
        == 0
    )
    return next(out.glob("*/*"))


def _same_statistics(native: Path, imported: Path) -> list[dict[str, Any]]:
    ours, theirs = _entries(native / "leaderboard.json"), _entries(imported / "leaderboard.json")
    assert [_statistics(e) for e in theirs] == [_statistics(e) for e in ours]  # every digit
    assert all(e["imported"] for e in theirs) and not any("imported" in e for e in ours)
    return ours


@pytest.fixture(scope="module")
def recipe_study(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The tiny task under a sweep of 2 recipes x 2 seeds: (task YAML, run folder)."""
    task = _task(tmp_path_factory.mktemp("recipes"))
    sweep = task.parent.parent / "sweeps" / "recipes.yaml"
    sweep.write_text(
        "name: recipes\nhparams: {lr: 1.0e-3, batch_size: 8, epochs: 1}\nseeds: {repeats: 2}\n"
        "recipes: {base: {}, faster: {lr: 2.0e-3}}\n"
    )
    return task, run_tiny(task, tiny_models["bert"], "--threads", "1", "--sweep", str(sweep))


def test_a_recipe_study_round_trips_exactly(recipe_study: tuple[Path, Path], tmp_path: Path) -> None:
    task, native = recipe_study
    entries = _same_statistics(native, _round_trip(native, task, tmp_path))
    assert sorted(e["setting"]["recipe"] for e in entries) == ["base", "faster"]
    assert all(e["examples"]["dev_se_median"] is not None for e in entries)  # per-example outcomes came along


def test_a_k_shot_study_round_trips_exactly(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    task = _task(tmp_path)
    extra = ("--threads", "1", "--size", "4/class", "--seeds", "2", "--set", "sweep.hparams.epochs=1")
    native = run_tiny(task, tiny_models["bert"], *extra)
    (entry,) = _same_statistics(native, _round_trip(native, task, tmp_path))
    assert entry["size"] == "4/class" and entry["summary"]["runs"] == 2


@pytest.fixture
def synthetic(recipe_study: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A study of 2 sizes x 5 settings x 10 seeds in the suite's own storage and files, its records
    a real run's (the recipe study's first) with drawn scores, judged by a baseline of 0.4 (a third
    fail), some diverged (no score) and 2% errored once, then retried. (task YAML, run folder)"""
    task, seed_run = recipe_study
    first = json.loads((seed_run / "trials.jsonl").read_text().splitlines()[0])
    first["hparams"] = {k: v for k, v in first["hparams"].items() if k != "recipe"}
    records = make_records({**first, "baseline": 0.4}, "grid", 100, shift=0.0, seed=3)
    for r in records:  # the failure rule's verdict, as the suite gives it
        if r["outcome"] != "errored" and r.get("failure") != "diverged":
            failed = r["score"] <= 0.4
            reason = f"dev accuracy {r['score']:.4f} no better than the trivial baseline 0.4000"
            r |= {"outcome": "failed" if failed else "succeeded", "failed": failed}
            r |= {"failure": "baseline" if failed else None, "reason": reason if failed else None}
    folder = tmp_path / "synthetic" / "tiny" / "bert"
    write_study(seed_run, folder, records)
    info = json.loads((folder / "run.json").read_text())
    info["task"]["eval_limit"] = None  # scored on the whole (synthetic) dev set, as an import states it
    (folder / "run.json").write_text(json.dumps(info))
    assert main(["leaderboard", str(folder), "-o", str(folder / "leaderboard.json")]) == 0
    return task, folder


def test_a_study_with_failures_retries_and_reported_numbers_round_trips_exactly(
    synthetic: tuple[Path, Path], tmp_path: Path
) -> None:
    task, native = synthetic
    entries = _same_statistics(native, _round_trip(native, task, tmp_path))
    assert len(entries) == 10 and sum(e["summary"]["failed"] for e in entries) > 0
    gaps = [r["gap"] for e in entries for r in e["reported"] if r["comparable"]]
    assert len(gaps) == 5 and all("fallback" not in g for g in gaps)  # size 32; the records carry a baseline
    outcomes = {r["outcome"] for e in entries for r in e["runs"]}
    assert outcomes == {"succeeded", "failed"}  # each errored attempt's retry ran


def test_a_csv_round_trip_keeps_every_statistic_the_csv_carries(
    synthetic: tuple[Path, Path], tmp_path: Path
) -> None:
    """`suite export -o x.csv` writes a record's objects as dotted columns (read back), leaves the
    loss curve out and writes lists as Python literals: the per-example outcomes are JSON too and
    come back; the dev curves (lists of objects, Python-quoted) do not. No entry statistic reads a
    curve, so every one of them survives; the report's curve panels are what a CSV loses."""
    task, native = synthetic
    imported = _round_trip(native, task, tmp_path, ".csv")
    _same_statistics(native, imported)
    records = [json.loads(line) for line in (imported / "trials.jsonl").read_text().splitlines()]
    assert all(r["per_example"]["correct"] for r in records if r["outcome"] == "succeeded")
    assert not any("epochs" in r or "loss_curve" in r for r in records)  # what a CSV round trip loses
