"""SIGKILL `suite run` at chosen and at random points, rerun until done: the trial set and the
scores equal an uninterrupted run's, each planned trial ran to an end once, no half-written
file is left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest

from suite.outputs.leaderboard import read_leaderboard

pytestmark = pytest.mark.faults
KILL_POINTS = ["cache_write", "train_step:3", "evaluation:2", "outputs_write"]


def _command(task: Path, model: Path, out: Path) -> list[str]:
    data = task.parent.parent / "data"
    return [
        sys.executable, "-m", "suite", "run", str(task), "--model", str(model), "--out", str(out),
        "--data-dir", str(data), "--quiet", "--threads", "1",
    ]  # fmt: skip


def _env(cache: Path, kill: str | None = None) -> dict[str, str]:
    env = {**os.environ, "SUITE_CACHE_DIR": str(cache), "SUITE_HEARTBEAT_S": "2", "HF_HUB_OFFLINE": "1"}
    env.pop("SUITE_KILL_AT", None)
    return {**env, "SUITE_KILL_AT": kill} if kill else env


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)


def _outcomes(folder: Path) -> dict[str, tuple]:
    """key -> (score, per-epoch metrics, loss curve) of the final record of each trial."""
    from suite.study.records import load_run

    _, records = load_run(folder)
    return {r["key"]: (r["score"], r["epochs"], r["loss_curve"]) for r in records}


def _check_complete(folder: Path, expected: dict[str, tuple]) -> None:
    assert _outcomes(folder) == expected  # same trials, identical CPU scores and curves
    storage = f"sqlite:///{folder / 'study.db'}"
    study = optuna.load_study(study_name=None, storage=storage)
    ended = Counter(t.user_attrs["key"] for t in study.get_trials() if t.state.name == "COMPLETE")
    assert set(ended) == set(expected) and max(ended.values()) == 1  # each planned trial once
    assert not list(folder.glob("*.tmp"))  # no half-written file left beside the outputs
    read_leaderboard(folder / "leaderboard.json")  # complete and valid
    json.loads((folder / "run.json").read_text())


@pytest.fixture
def uninterrupted(tiny_task: Path, tiny_models, tmp_path: Path) -> dict[str, tuple]:  # noqa: ANN001
    out = tmp_path / "clean"
    done = _run(_command(tiny_task, tiny_models["bert"], out), _env(tmp_path / "cache-clean"))
    assert done.returncode == 0, done.stderr[-2000:]
    return _outcomes(next(out.glob("*/*")))


def test_kills_at_every_named_point_then_rerun(
    tiny_task: Path, tiny_models, tmp_path: Path, uninterrupted
) -> None:  # noqa: ANN001, E501
    out, cache = tmp_path / "killed", tmp_path / "cache-killed"
    command = _command(tiny_task, tiny_models["bert"], out)
    for point in KILL_POINTS:  # one after another into the same run folder and cache
        killed = _run(command, _env(cache, point))
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
    final = _run(command, _env(cache))
    assert final.returncode == 0, final.stderr[-2000:]
    _check_complete(next(out.glob("*/*")), uninterrupted)
    import torch

    for features in (cache / "features").glob("*.pt"):  # a kill mid-write never left a torn one
        assert torch.load(features, weights_only=False)


def test_kills_at_random_moments_then_rerun(
    tiny_task: Path, tiny_models, tmp_path: Path, uninterrupted
) -> None:  # noqa: ANN001, E501
    out, cache = tmp_path / "random", tmp_path / "cache-random"
    command = _command(tiny_task, tiny_models["bert"], out)
    rng = random.Random(7)
    for _ in range(4):
        process = subprocess.Popen(
            command, env=_env(cache), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(4.0, 14.0))  # start-up takes ~5 s; a trial a few seconds
        process.send_signal(signal.SIGKILL)
        process.wait()
    for _ in range(3):
        final = _run(command, _env(cache))
        if final.returncode == 0:
            break
    assert final.returncode == 0, final.stderr[-2000:]
    _check_complete(next(out.glob("*/*")), uninterrupted)
