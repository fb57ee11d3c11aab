"""Progress you can trust: a trial reports epoch and step of steps; the time left comes from the
measured time per step; Ctrl-C says what ended and what is left, and a rerun resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_tokenizer
from suite.study.plan import PROGRESS_ATTR
from suite.study.progress import study_progress
from suite.study.trial_progress import TrialProgress
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan


class _Trial:
    """What TrialProgress writes to: an Optuna trial's user attributes."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def set_user_attr(self, name: str, value: dict) -> None:
        assert name == PROGRESS_ATTR
        self.sent.append(value)


@pytest.fixture
def prepared(tiny_models, tiny_task: Path) -> PreparedTask:  # noqa: ANN001
    model = str(tiny_models["bert"])
    return prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))


def test_a_trial_reports_its_epoch_step_of_steps_and_dev_score(prepared, tiny_models) -> None:  # noqa: ANN001
    trial = _Trial()
    plan = TrialPlan(32, HParams(lr=1e-3, batch_size=8, epochs=2), Seeds(1, 2, 3))
    watch = TrialProgress(trial, "accuracy", interval=0.0)  # every step
    record = run_trial(prepared, str(tiny_models["bert"]), plan, callbacks=[watch])
    steps = [p["step"] for p in trial.sent]
    assert steps == sorted(steps) and steps[0] == 0 and steps[-1] == 8  # 32 examples / 8 x 2 epochs
    assert {p["steps"] for p in trial.sent} == {8} and {p["epochs"] for p in trial.sent} == {2}
    assert trial.sent[-1]["score"] == pytest.approx(record["score"])  # the last dev evaluation's
    assert all(p["elapsed_s"] >= 0 for p in trial.sent)
    unwatched = run_trial(prepared, str(tiny_models["bert"]), plan)
    assert unwatched["score"] == record["score"]  # watching does not change the run


def _ended(key: str, wall: float, steps: int = 16, kind: str = "succeeded") -> optuna.trial.FrozenTrial:
    record = {"key": key, "outcome": kind, "score": 0.7, "loss_curve": [0.5] * steps, "wall_time_s": wall}
    state = TrialState.FAIL if kind == "errored" else TrialState.COMPLETE
    return create_trial(
        state=state, value=None if kind == "errored" else 0.7, user_attrs={"key": key, "record": record}
    )


def test_time_left_comes_from_the_measured_time_per_step_not_from_completions() -> None:
    """Two ended trials of 16 steps in 32 s and one at step 4 of 16 after 8 s: 2 s a step. Left:
    12 steps of the running trial and 3 queued trials of 16: 60 steps, 120 s over 2 workers."""
    study = optuna.create_study(direction="maximize")
    study.add_trial(_ended("a", 32.0))
    study.add_trial(_ended("b", 32.0))
    running = {"epoch": 1, "epochs": 2, "step": 4, "steps": 16, "score": None, "metric": "f1"}
    running["elapsed_s"] = 8.0
    study.add_trial(create_trial(state=TrialState.RUNNING, user_attrs={"key": "c", PROGRESS_ATTR: running}))
    progress = study_progress(study, planned=6, workers=2)
    assert progress.ended == 2 and progress.planned == 6
    assert progress.eta_s == pytest.approx(60.0)
    assert progress.describe().startswith("ETA 1m00s | ep 1/2 step 4/16")
    assert study_progress(optuna.create_study(), planned=6, workers=2).eta_s is None  # nothing timed yet


def test_a_pruned_run_counts_the_steps_it_took_and_a_crash_counts_none() -> None:
    """30 steps in 30 s and a run pruned after 10 steps in 10 s: 1 s a step (not 40 s over 60 planned
    steps); an errored trial's 5 s say nothing about a step. 2 left of 4: 2 x 20 steps, 1 worker."""
    study = optuna.create_study(direction="maximize")
    study.add_trial(_ended("a", 30.0, steps=30))
    study.add_trial(_ended("b", 10.0, steps=10, kind="pruned"))
    study.add_trial(_ended("c", 5.0, steps=1, kind="errored"))
    progress = study_progress(study, planned=5, workers=1)
    assert progress.ended == 2  # the errored trial runs again: not ended
    assert progress.eta_s == pytest.approx(3 * 20.0)


def test_a_look_at_an_rdb_study_reads_its_cached_trials_not_every_record_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watcher looks every 2 s: on SQLite the progress comes from the study's trials (ended ones
    cached by Optuna's storage), never the one-query read of every record, and counts as it does."""
    from suite.study import plan

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", direction="maximize")
    for trial in (_ended("a", 30.0, steps=30), _ended("b", 10.0, steps=10, kind="pruned")):
        study.add_trial(trial)
    study.add_trial(_ended("c", 5.0, steps=1, kind="errored"))
    assert set(plan.ended_runs(study)) == {"a", "b"}  # the one-query read, as `run` and export use it
    monkeypatch.setattr(plan, "rdb_records", lambda study: pytest.fail("a look read every record"))
    progress = study_progress(study, planned=5, workers=1)
    assert progress.ended == 2 and progress.eta_s == pytest.approx(3 * 20.0)


def _sigterm() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # a scheduler's stop, or `timeout`
    time.sleep(5)  # the handler raises before this ends


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_says_what_ended_and_a_rerun_resumes_without_rerunning(
    stop: str,
    tiny_task: Path,
    tiny_models,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Ctrl-C (or SIGTERM) inside the second trial: exit 130, '1 of 3 ended, 2 left', the running
    trial goes back to the queue; the rerun runs the two left, each planned trial once, and keeps
    the first."""
    from suite.study import work
    from tests.conftest import run_tiny

    real, calls = work.run_trial, []

    def interrupted_second(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:
            if stop == "sigterm":
                _sigterm()
            raise SystemExit(1)  # what Lightning turns Ctrl-C into
        return real(*args, **kwargs)

    monkeypatch.setattr(work, "run_trial", interrupted_second)
    folder = run_tiny(tiny_task, tiny_models["bert"], expect=130)
    said = "interrupted: 1 of 3 planned trials ended, 2 left (1 running trial went back to the queue)"
    assert said in capsys.readouterr().err
    url = f"sqlite:///{folder / 'study.db'}"

    def numbers(state: str) -> list[int]:
        return [
            t.number
            for t in optuna.load_study(study_name=None, storage=url).get_trials()
            if t.state.name == state
        ]

    first = numbers("COMPLETE")
    monkeypatch.setattr(work, "run_trial", real)
    folder = run_tiny(tiny_task, tiny_models["bert"])
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3 and max(Counter(r["key"] for r in records).values()) == 1
    failed = [
        t for t in optuna.load_study(study_name=None, storage=url).get_trials() if t.state == TrialState.FAIL
    ]
    assert len(failed) == 1 and "record" not in failed[0].user_attrs  # put back, never read as a run
    assert len(first) == 1 and first[0] in {r["trial_number"] for r in records}  # kept, not rerun


GRANDCHILD = """
import sys, time
from pathlib import Path
try:
    from suite.study.supervise import stop_with_parent
    stop_with_parent()
    Path(sys.argv[1] + ".armed").write_text("")
    time.sleep(120)
except KeyboardInterrupt:  # written whole, then renamed: the test never reads it half-written
    Path(sys.argv[1] + ".part").write_text("stopped")
    Path(sys.argv[1] + ".part").rename(sys.argv[1])
"""

MIDDLE = """
import os, subprocess, sys, time
env = {**os.environ, "SUITE_PARENT_PID": str(os.getpid())}
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], env=env, process_group=0)
print(child.pid, flush=True)
time.sleep(120)
"""


def test_a_worker_stops_when_the_run_that_started_it_dies_even_by_sigkill(tmp_path: Path) -> None:
    """Workers run in their own process group (Ctrl-C reaches `run` only), so nothing else would stop them
    when `run` is killed outright: the kernel sends them SIGTERM (they put their trial back)."""
    flag = tmp_path / "stopped"
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, GRANDCHILD, str(flag)], stdout=subprocess.PIPE, text=True
    )
    int(middle.stdout.readline())  # the worker started
    armed = tmp_path / "stopped.armed"
    deadline = time.time() + 300
    while not armed.exists() and time.time() < deadline:  # it imported suite and armed itself
        time.sleep(0.2)
    assert armed.exists(), "the worker never armed its parent-death signal"
    middle.kill()
    middle.wait()
    deadline = time.time() + 300
    while not flag.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert flag.exists() and flag.read_text() == "stopped"


IDLE = """
import sys
from pathlib import Path
from suite.study.supervise import idle_wait, stop_with_parent
stop_with_parent()
Path(sys.argv[1]).write_text("")
sys.exit(0 if idle_wait(60) else 1)
"""

ENDING = "import os, sys, time\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.05)"


@pytest.mark.skipif(not hasattr(signal, "sigtimedwait"), reason="the early look needs sigtimedwait")
def test_an_idle_worker_looks_again_as_soon_as_another_worker_of_run_ends(tmp_path: Path) -> None:
    """A worker of `run` with no trial to take waits for its next look at the queue (here 60 s,
    so a missed call fails the test); when another worker ends (here: once the idle one is about
    to wait: the call stays pending until it does), `run_workers` tells it to look at once, and it
    wakes because it was told (exit 0), not because its wait ran out (exit 1). A worker `run`
    starts has the call blocked from its first instruction (`worker_signals`), in every thread."""
    from suite.study.supervise import PARENT_ENV, run_workers, worker_signals

    armed = tmp_path / "armed"
    env = {**os.environ, PARENT_ENV: str(os.getpid())}
    with worker_signals():  # as `run` starts its workers
        idle = subprocess.Popen([sys.executable, "-c", IDLE, str(armed)], env=env, process_group=0)
    ending = subprocess.Popen([sys.executable, "-c", ENDING, str(armed)])
    assert run_workers(None, [ending, idle]) == [0, 0]


def test_a_stop_counts_the_trials_its_workers_put_back() -> None:
    """What a stop says of the running trials: the trials these worker processes failed without
    a record (put back), counted (0, 1, 2), not those of another worker, nor an ended trial."""
    import socket

    from optuna.trial import TrialState

    from suite.study.supervise import WORKER_ATTR, trials_put_back_by
    from suite.study.worker import put_back_note

    study = optuna.create_study()
    for pid, record in ((11, None), (12, None), (13, None), (11, {"outcome": "errored"})):
        trial = study.ask()
        study._storage.set_trial_system_attr(trial._trial_id, WORKER_ATTR, f"{socket.gethostname()}:{pid}")
        if record is not None:
            trial.set_user_attr("record", record)
        study.tell(trial, state=TrialState.FAIL)
    counts = [trials_put_back_by(study, pids) for pids in ([], [11], [11, 12], [14])]
    assert counts == [0, 1, 2, 0]
    assert [put_back_note(n) for n in (0, 1, 2)] == [
        "no trial was running",
        "1 running trial went back to the queue",
        "2 running trials went back to the queue",
    ]


@pytest.mark.parametrize(
    ("cost_s", "every_s", "share"), [(0.01, 2.0, 0.005), (1.5, 15.0, 0.1), (9.0, 60.0, 0.15)]
)
def test_the_watcher_looks_less_often_where_a_look_takes_long(
    monkeypatch: pytest.MonkeyPatch, cost_s: float, every_s: float, share: float
) -> None:
    """`run` watches every 2 s; where a look at the storage takes 1.5 s (10,000 trials queued), it
    looks every 15 s instead, so looking takes at most a tenth of the watcher's time, and never
    waits more than a minute (a fake clock: each look advances it by its cost, each wait by the
    wait)."""
    from types import SimpleNamespace

    from suite.study import progress, worker

    clock, looks = [0.0], []

    def look(study: object, planned: int, workers: int) -> progress.StudyProgress:
        looks.append(clock[0])
        clock[0] += cost_s
        return progress.StudyProgress(0, planned)

    def wait(seconds: float) -> None:
        clock[0] += seconds

    monkeypatch.setattr(worker, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=wait))
    monkeypatch.setattr(progress, "study_progress", look)
    worker.watch(None, 10, 2, lambda: clock[0] < 300.0, "trials")
    # from the end of one look to the start of the next (the last look: as the workers end)
    gaps = [b - a - cost_s for a, b in zip(looks[:-2], looks[1:-1], strict=True)]
    assert gaps and all(every_s <= g < every_s + 0.25 for g in gaps), gaps
    assert cost_s * (len(looks) - 1) <= share * clock[0]  # a tenth at most, unless capped at a minute
