"""4 workers on one study, one of them killed mid-trial: every planned trial ends once as a run,
the killed one is retried by another worker, and no database error reaches the user."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

pytestmark = pytest.mark.faults


def _sweep(root: Path) -> Path:
    path = root / "sweeps" / "four.yaml"
    path.write_text(
        "name: four\nhparams: {batch_size: 8, epochs: 1}\n"
        "space: {lr: {type: categorical, choices: [1.0e-3, 3.0e-4]}}\nseeds: {repeats: 4}\n"
    )
    return path


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_four_workers_one_killed(backend: str, tiny_task: Path, tiny_models, tmp_path: Path) -> None:  # noqa: ANN001
    root = tiny_task.parent.parent
    storage: list[str] = []
    if backend == "postgresql":
        url = os.environ.get("SUITE_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
        storage = ["--storage", url, "--study", f"four-{uuid.uuid4().hex[:8]}"]
    command = [
        sys.executable, "-m", "suite", "run", str(tiny_task), "--model", str(tiny_models["bert"]),
        "--sweep", str(_sweep(root)), "--out", str(root / "runs"), "--data-dir", str(root / "data"),
        "--workers", "4", "--threads", "1", "--quiet", *storage,
    ]  # fmt: skip
    env = {
        **os.environ,
        "SUITE_HEARTBEAT_S": "5",  # stale after 15 s: a loaded machine never stales a live worker
        "SUITE_KILL_AT": "train_step:2",  # the first worker to reach its 2nd step dies
        "SUITE_KILL_ONCE": str(tmp_path / "killed-one"),
    }
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert (tmp_path / "killed-one").exists()  # a worker really was killed
    assert done.returncode == 0, output[-3000:]  # the study still ended: every trial is a run
    assert "1 of 4 workers exited early" in output
    assert "database is locked" not in output and "Traceback" not in output

    url = storage[1] if storage else f"sqlite:///{next((root / 'runs').glob('*/*')) / 'study.db'}"
    name = storage[3] if storage else None
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    ended = Counter(t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE")
    assert len(ended) == 8 and max(ended.values()) == 1  # every planned trial ran to an end once
    killed = [t for t in trials if t.state.name == "FAIL"]
    retried = [t for t in trials if "failed_trial" in t.system_attrs]
    assert len(killed) == 1 and len(retried) == 1  # the killed trial came back, same key and seeds
    assert retried[0].user_attrs["key"] == killed[0].user_attrs["key"]
    assert retried[0].user_attrs["seeds"] == killed[0].user_attrs["seeds"]
