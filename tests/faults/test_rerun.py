"""A rerun always resumes: a study's threads per worker are fixed when it is created, so a rerun
with `--workers auto` (which sizes its workers from the trials still to run) or another worker
count picks up where it stopped; a finished study rerun writes its outputs; a run folder whose
outputs name a study the storage does not hold is refused with its outputs untouched."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
import yaml

from suite.commands.cli import main

pytestmark = pytest.mark.faults
OUTPUTS = ("run.json", "trials.jsonl", "leaderboard.json")


@pytest.fixture
def two_cpus() -> set[int]:
    """Two CPUs of this process's affinity mask: the `run`s below are pinned to them (their
    children inherit it), so `--workers auto` sees a 2-CPU machine wherever the tests run."""
    from suite.model.devices import usable_cpus

    if not hasattr(os, "sched_setaffinity") or usable_cpus()[0] < 2:
        pytest.skip("needs 2 usable CPUs and an affinity mask to pin them")
    return set(sorted(os.sched_getaffinity(0))[:2])


def _run(
    task: Path, model: Path, out: Path, cpus: set[int], *extra: str, **env: str
) -> subprocess.CompletedProcess:
    """`suite run` of the tiny task in a process pinned to `cpus`, with these environment variables."""
    data = task.parent.parent / "data"
    command = [
        sys.executable, "-m", "suite", "run", str(task), "--model", str(model), "--out", str(out),
        "--data-dir", str(data), "--quiet", *extra,
    ]  # fmt: skip
    inherited = {k: v for k, v in os.environ.items() if k not in ("SUITE_KILL_AT", "SUITE_KILL_ONCE")}
    environment = {**inherited, "SUITE_HEARTBEAT_S": "5", **env}
    return subprocess.run(
        command,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        preexec_fn=lambda: os.sched_setaffinity(0, cpus),
    )


def _study(folder: Path) -> optuna.Study:
    return optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'study.db'}")


def _ended(folder: Path) -> Counter:
    """How many times each planned key ran to an end."""
    return Counter(t.user_attrs["key"] for t in _study(folder).get_trials() if "record" in t.user_attrs)


def _check_finished(folder: Path, planned: int, threads: int) -> None:
    """Every planned trial ended once, each with the study's threads; the outputs hold them all."""
    ended = _ended(folder)
    assert len(ended) == planned and set(ended.values()) == {1}
    assert _study(folder).user_attrs["fingerprint"]["threads"] == threads
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == planned and {r["threads"] for r in records} == {threads}
    assert json.loads((folder / "run.json").read_text())["threads"] == threads


def _steps_per_trial(task: Path) -> int:
    """Training steps of one trial of the fixture's sweep, counted from its YAML."""
    spec = yaml.safe_load(task.read_text())
    sweep = yaml.safe_load((task.parent.parent / spec["sweep"]).read_text())["hparams"]
    return sweep["epochs"] * math.ceil(spec["sizes"][0] / sweep["batch_size"])


def test_auto_study_killed_with_one_trial_left_resumes_with_auto_and_with_one_worker(
    tiny_task: Path, tiny_models, tmp_path: Path, two_cpus: set[int]
) -> None:  # noqa: ANN001
    """On 2 CPUs, `--workers auto` runs the 3 planned trials as 2 workers x 1 thread. Each worker
    dies at the first step of its second trial, so exactly one trial is left whatever the order.
    Rerun, `auto` picks one worker (one trial left): it keeps the study's 1 thread instead of
    refusing `threads 1 -> 2`; `--workers 1` on a copy of the same study resumes too."""
    model, out = tiny_models["bert"], tmp_path / "runs"
    kill = f"train_step:{_steps_per_trial(tiny_task) + 1}"
    killed = _run(tiny_task, model, out, two_cpus, "--workers", "auto", SUITE_KILL_AT=kill)
    assert killed.returncode == 1, killed.stderr[-2000:]
    folder = next(out.glob("*/*"))
    assert len(_ended(folder)) == 2 and _study(folder).user_attrs["fingerprint"]["threads"] == 1
    shutil.copytree(out, tmp_path / "copy")

    auto = _run(tiny_task, model, out, two_cpus, "--workers", "auto")
    assert auto.returncode == 0, auto.stderr[-2000:]
    _check_finished(folder, planned=3, threads=1)

    one = _run(tiny_task, model, tmp_path / "copy", two_cpus, "--workers", "1")
    assert one.returncode == 0, one.stderr[-2000:]
    _check_finished(next((tmp_path / "copy").glob("*/*")), planned=3, threads=1)

    other = _run(tiny_task, model, out, two_cpus, "--workers", "auto", "--threads", "2")
    assert other.returncode == 2 and other.stderr.count("\n") == 1, other.stderr[-2000:]
    assert "--threads 2:" in other.stderr and "runs 1 thread(s) per worker" in other.stderr


def test_a_finished_study_rerun_writes_its_outputs_whatever_the_workers(
    tiny_study: tuple[Path, Path], tiny_models, two_cpus: set[int]
) -> None:  # noqa: ANN001
    """Every trial ended but `run` died writing the outputs (what the output-write error tells
    users to rerun; a kill there leaves none, tests/faults/test_kills.py): here the outputs of a
    finished study removed. The rerun with `--workers auto` (one worker: no trial left) writes
    them and exits 0, and so does `--workers 2`, rewriting the same files."""
    task, folder = tiny_study
    model, out = tiny_models["bert"], folder.parent.parent
    for name in OUTPUTS:
        (folder / name).unlink()
    assert len(_ended(folder)) == 3

    auto = _run(task, model, out, two_cpus, "--workers", "auto")
    assert auto.returncode == 0, auto.stderr[-2000:]
    _check_finished(folder, planned=3, threads=1)
    written = {name: (folder / name).read_bytes() for name in ("trials.jsonl", "leaderboard.json")}

    two = _run(task, model, out, two_cpus, "--workers", "2")
    assert two.returncode == 0, two.stderr[-2000:]
    _check_finished(folder, planned=3, threads=1)
    assert (folder / "trials.jsonl").read_bytes() == written["trials.jsonl"]


def _replaced_by_another_study(db: Path) -> None:
    db.unlink()
    optuna.create_study(study_name="another", storage=f"sqlite:///{db}")


DAMAGES = {
    "empty": lambda db: db.write_bytes(b""),  # a 0-byte study.db
    "replaced": _replaced_by_another_study,
    "missing": lambda db: db.unlink(),
}


def test_outputs_of_a_study_the_storage_does_not_hold_are_refused_and_kept(
    tiny_study: tuple[Path, Path], tiny_models, capsys
) -> None:  # noqa: ANN001
    """`run` (and `plan`) would take it as a new study and overwrite the only copy of the old
    one's results: one line naming the study, exit 2, the outputs and the storage untouched."""
    tiny_task, trained = tiny_study
    root = tiny_task.parent.parent
    name = json.loads((trained / "run.json").read_text())["study"]
    for damage, harm in DAMAGES.items():
        out = root / damage
        shutil.copytree(root / "runs", out)
        folder = out / trained.relative_to(root / "runs")
        harm(folder / "study.db")
        before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        capsys.readouterr()
        for command in ("run", "plan"):
            args = [command, str(tiny_task), "--model", str(tiny_models["bert"]), "--out", str(out)]
            assert main([*args, "--data-dir", str(root / "data"), "--quiet"]) == 2, damage
            err = capsys.readouterr().err
            assert err.startswith(f"error: {folder}: its outputs") and err.count("\n") == 1, err
            assert repr(name) in err and "does not hold" in err
            assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
