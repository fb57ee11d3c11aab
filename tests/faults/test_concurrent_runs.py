"""Several `suite run`s of one study at once, into one run folder (or one database): each planned
trial trains once, counted from the trainings themselves (every process appends a line to a trace
file when it starts a trial), not only from the records, and trials.jsonl holds each key once.
Two first runs also create the study together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

pytestmark = pytest.mark.faults
SEEDS = 6  # planned trials: the tiny task's one size and setting, 6 seed replicates


def _trainings(trace: Path) -> Counter:
    """How many times each key started training, in any process."""
    lines = trace.read_text().splitlines() if trace.exists() else []
    return Counter(line.split(" ", 2)[2] for line in lines if line.startswith("trial "))


# Two runs on SQLite (the common case), four on PostgreSQL (more racers than trials to go round);
# many processes creating one study on a fresh file or database: tests/faults/test_storage_races.py.
@pytest.mark.parametrize(("backend", "runs"), [("sqlite", 2), ("postgresql", 4)])
def test_concurrent_runs_of_one_study_train_each_planned_trial_once(
    runs: int,
    backend: str,
    tiny_task: Path,
    tiny_models,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    root = tiny_task.parent.parent
    storage: list[str] = []
    if backend == "postgresql":
        url = os.environ.get("SUITE_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
        storage = ["--storage", url, "--study", f"together-{uuid.uuid4().hex[:8]}"]
    command = [
        sys.executable, "-m", "suite", "run", str(tiny_task), "--model", str(tiny_models["bert"]),
        "--out", str(root / "runs"), "--data-dir", str(root / "data"), "--seeds", str(SEEDS),
        "--workers", "1", "--threads", "1", "--quiet", *storage,
    ]  # fmt: skip
    trace = tmp_path / "trace"
    env = {**os.environ, "SUITE_TRACE": str(trace)}
    started = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(runs)
    ]
    outputs = [p.communicate(timeout=1200) for p in started]
    for p, (out, err) in zip(started, outputs, strict=True):
        assert p.returncode == 0, (out + err)[-3000:]

    folder = next((root / "runs").glob("*/*"))
    url = storage[1] if storage else f"sqlite:///{folder / 'study.db'}"
    trials = optuna.load_study(study_name=storage[3] if storage else None, storage=url).get_trials()
    planned = {t.user_attrs["key"] for t in trials}
    assert len(planned) == SEEDS and len(trials) == SEEDS  # one study, each planned trial queued once
    trained = _trainings(trace)
    assert set(trained) == planned and set(trained.values()) == {1}  # each trained once, by one process
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert sorted(r["key"] for r in records) == sorted(planned)  # each key once in the outputs
