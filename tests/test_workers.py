"""Shared storages: several workers, killed workers, no duplicate and no lost trial."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import optuna
import pytest

from suite.study.worker import put_back_note
from tests.conftest import as_from_a_terminal, run_tiny

REPO = Path(__file__).resolve().parent.parent


def _sweep(tmp: Path, epochs: int = 1) -> Path:
    path = tmp / "sweeps" / "pair.yaml"
    path.write_text(
        f"name: pair\nhparams: {{batch_size: 8, epochs: {epochs}}}\n"
        "space: {lr: {type: categorical, choices: [1.0e-3, 3.0e-4]}}\nseeds: {repeats: 4}\n"
    )
    return path


def _finished_keys(storage: str) -> tuple[list[str], int]:
    """Keys of trials that ran to an end, and the number of planned keys."""
    keys, planned = [], set()
    for summary in optuna.get_all_study_summaries(storage):
        for t in optuna.load_study(study_name=summary.study_name, storage=storage).get_trials():
            planned.add(t.user_attrs["key"])
            if "record" in t.user_attrs:
                keys.append(t.user_attrs["key"])
    return keys, len(planned)


def _trial_states(db: Path) -> Counter:
    """Trial states read without writing: opening an Optuna storage on a database that the run is
    still creating races it on the schema tables (UNIQUE constraint on alembic_version)."""
    if not db.exists():
        return Counter()
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as connection:
            return Counter(state for (state,) in connection.execute("SELECT state FROM trials"))
    except sqlite3.DatabaseError:  # tables not created yet, or locked for a moment
        return Counter()


def _two_workers(tiny_task: Path, tiny_models, storage: list[str]) -> Path:  # noqa: ANN001
    sweep = _sweep(tiny_task.parent.parent)
    return run_tiny(tiny_task, tiny_models["bert"], "--sweep", str(sweep), "--workers", "2", *storage)


def test_two_workers_on_sqlite(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    folder = _two_workers(tiny_task, tiny_models, [])
    keys, planned = _finished_keys(f"sqlite:///{folder / 'study.db'}")
    assert planned == 2 * 4 and len(keys) == 8 and max(Counter(keys).values()) == 1
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 8 and all(r["worker"] for r in records)


def test_two_workers_on_postgresql(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    url = os.environ.get("SUITE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    folder = _two_workers(tiny_task, tiny_models, ["--storage", url, "--study", name])
    # The server may hold other runs' studies: count this one's trials only.
    trials = optuna.load_study(study_name=name, storage=url).get_trials()
    keys = [t.user_attrs["key"] for t in trials if "record" in t.user_attrs]
    assert len(trials) == 8 and len(keys) == 8 and max(Counter(keys).values()) == 1
    assert json.loads((folder / "run.json").read_text())["storage"].startswith("postgresql://suite:***@")


def _rte_smoke(out: Path, data: Path, *extra: str) -> list[str]:
    """`suite run` of the devlin smoke sweep on RTE (8 trials of MiniLM) as a command line, on 16
    training pairs scored on 48 (what these tests check is where each trial ends, not its score)."""
    return [
        sys.executable, "-m", "suite", "run", str(REPO / "tasks/rte.yaml"),
        "--sweep", str(REPO / "sweeps/devlin.yaml"), "--profile", "smoke", "--size", "16",
        "--set", "eval_limit=48", "--out", str(out), "--data-dir", str(data), "--quiet", "--offline", *extra,
    ]  # fmt: skip


def _wait_to_reach(trace: Path, point: str, times: int, process: subprocess.Popen) -> None:
    """Until the trace file (suite.faults) says `point` was reached `times` times; fails if
    `process` ends first."""
    reached = lambda: [line.split()[0] for line in trace.read_text().splitlines()].count(point)  # noqa: E731
    deadline = time.monotonic() + 600
    while not trace.exists() or reached() < times:
        assert process.poll() is None and time.monotonic() < deadline, f"{point} not reached {times} times"
        time.sleep(0.2)


def test_sigkill_mid_trial_then_rerun_runs_every_planned_trial_once(
    tmp_path: Path, shared_data: Path, tiny_models: dict
) -> None:
    """The acceptance check: devlin smoke on RTE, killed with SIGKILL inside a trial. Each of its
    trials is one step, so the run is held inside the second one's (suite.faults: a deaf hang, as
    in a step that never ends) and killed there from outside: where it stops is no race. A tiny
    encoder trains it (where a trial ends does not depend on the encoder)."""
    command = [*_rte_smoke(tmp_path, shared_data), "--model", str(tiny_models["bert"])]
    trace = tmp_path / "trace"
    env = {**os.environ, "SUITE_HEARTBEAT_S": "1", "SUITE_TRACE": str(trace)}
    hung = {"SUITE_STALL_AT": "train_step:2", "SUITE_STALL_DEAF": "1"}
    db = tmp_path / "rte" / "bert" / "study.db"  # the run folder is named after the model's
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    first = subprocess.Popen(command, env={**env, **hung}, **quiet)
    _wait_to_reach(trace, "train_step", 2, first)  # hung in the second trial's step
    first.send_signal(signal.SIGKILL)
    first.wait()
    storage = f"sqlite:///{db}"
    keys, planned = _finished_keys(storage)
    assert 1 <= len(keys) < planned == 8  # killed part-way through

    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    keys, planned = _finished_keys(storage)
    assert planned == 8 and len(keys) == 8 and max(Counter(keys).values()) == 1
    retried = [
        t
        for t in optuna.load_study(study_name=None, storage=storage).get_trials()
        if "failed_trial" in t.system_attrs
    ]
    assert len(retried) == 1  # the killed trial came back with the same key, seeds and params
    records = [json.loads(line) for line in (db.parent / "trials.jsonl").open()]
    assert len(records) == 8 and len({r["key"] for r in records}) == 8


@pytest.fixture
def cpu_hog() -> Iterator[subprocess.Popen]:
    """A busy loop beside the test, until the test kills it or ends: a loaded machine (CI) widens
    every race."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield hog
    hog.kill()
    hog.wait()


def test_ctrl_c_with_two_workers_puts_running_trials_back_and_a_rerun_resumes(
    tmp_path: Path, shared_data: Path, cpu_hog: subprocess.Popen
) -> None:
    """Ctrl-C reaches `run` (its workers run in their own process group): it passes the stop on, each
    worker puts its running trial back in the queue, `run` says what ended and exits 130; the rerun
    runs each planned trial once, without waiting for a heartbeat to go stale. The stop lands as a
    trial ends, when a worker may be telling the study or taking its next trial: there a stop is
    held until nothing is half-done, so no trial is left running when `run` exits. `run` waits for
    its workers as long as they need here (its grace period, 60 s by default, is a bound on a
    loaded machine, not what this test checks)."""
    command = _rte_smoke(tmp_path, shared_data, "--workers", "2")
    db = tmp_path / "rte" / "minilm-l6" / "study.db"
    env = {**os.environ, "SUITE_STOP_GRACE_S": "3600"}
    first = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=as_from_a_terminal,
    )
    deadline = time.time() + 600
    while not (states := _trial_states(db))["COMPLETE"] or not states["RUNNING"]:
        assert time.time() < deadline and first.poll() is None, "no trial ended while another ran"
        time.sleep(0.3)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=3600)
    cpu_hog.kill()  # the stop's races are run; the rerun's are other tests' (a core back for them)
    assert first.returncode == 130, err[-2000:]
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{db}").get_trials()
    ended = {t.user_attrs["key"] for t in trials if t.state.name == "COMPLETE"}
    assert f"interrupted: {len(ended)} of 8 planned trials ended, {8 - len(ended)} left" in err, err[-2000:]
    assert "rerun the same command" in err
    running = [t.number for t in trials if t.state.name == "RUNNING"]
    assert not running, err[-2000:]  # every running trial was put back, none left to a heartbeat
    put_back = [
        t.user_attrs["key"] for t in trials if t.state.name == "FAIL" and "record" not in t.user_attrs
    ]
    assert f"left ({put_back_note(len(put_back))}); rerun" in err, err[-2000:]  # counted, 0 to 2
    queued = {t.user_attrs["key"] for t in trials if t.state.name == "WAITING"}
    assert set(put_back) <= queued  # each interrupted trial is queued again
    assert len(ended) + len(queued) == 8 and not ended & queued  # every planned trial ended or queued, once

    rerun = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    keys, planned = _finished_keys(f"sqlite:///{db}")
    assert planned == 8 and len(keys) == 8 and max(Counter(keys).values()) == 1


def test_a_trial_killed_before_its_first_heartbeat_is_requeued_after_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Optuna's stale check skips RUNNING trials without a heartbeat row: a worker killed between
    popping a trial and its first beat would leave every other worker waiting forever."""
    from suite.study import queue as trial_queue
    from suite.study.storage import open_storage

    monkeypatch.setenv("SUITE_HEARTBEAT_S", "1")  # grace period 3 s
    clock = [1000.0]
    monkeypatch.setattr(trial_queue.time, "monotonic", lambda: clock[0])
    study = optuna.create_study(storage=open_storage(f"sqlite:///{tmp_path / 'q.db'}"), study_name="q")
    study.enqueue_trial({}, user_attrs={"key": "a"})
    study.enqueue_trial({}, user_attrs={"key": "b"})
    dead, alive = trial_queue.pop_planned(study), trial_queue.pop_planned(study)
    study._storage.record_heartbeat(alive._trial_id)  # a live worker beating now
    states = lambda: [study.get_trials()[t.number].state.name for t in (dead, alive)]  # noqa: E731

    trial_queue.fail_dead_trials(study)
    clock[0] += 2.9
    trial_queue.fail_dead_trials(study)
    assert states() == ["RUNNING", "RUNNING"] and len(study.get_trials()) == 2  # within the grace period
    clock[0] += 0.2
    trial_queue.fail_dead_trials(study)
    assert states() == ["FAIL", "RUNNING"]  # the beating trial is left alone
    retry = study.get_trials()[2]  # popped in a shuffled order: either queued trial may be the dead one
    assert retry.state.name == "WAITING" and retry.system_attrs["failed_trial"] == dead.number
    assert retry.user_attrs["key"] == dead.user_attrs["key"]


POPPER = """
import sys, optuna
from suite.study.storage import open_storage
from suite.study.queue import pop_planned, queue_lock
optuna.logging.set_verbosity(optuna.logging.ERROR)
study = optuna.load_study(study_name=sys.argv[2], storage=open_storage(sys.argv[1]))
got = []
while True:
    with queue_lock(study):
        trial = pop_planned(study)
    if trial is None:
        break
    got.append(trial.number)
print(" ".join(map(str, got)))
"""


@pytest.mark.parametrize("backend", ["sqlite", "journal", "postgresql"])
def test_concurrent_pops_never_hand_out_a_trial_twice(tmp_path: Path, backend: str) -> None:
    from suite.study.storage import open_storage

    url = {
        "sqlite": f"sqlite:///{tmp_path / 'q.db'}",
        "journal": f"journal:{tmp_path / 'q.log'}",
        "postgresql": os.environ.get("SUITE_TEST_POSTGRES_URL"),
    }[backend]
    if not url:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    name = f"q-{uuid.uuid4().hex[:8]}"
    study = optuna.create_study(study_name=name, storage=open_storage(url))
    for i in range(60):
        study.enqueue_trial({}, user_attrs={"key": str(i)}, skip_if_exists=False)
    poppers = [
        subprocess.Popen([sys.executable, "-c", POPPER, url, name], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    popped = [int(n) for p in poppers for n in p.communicate(timeout=120)[0].split()]
    assert sorted(popped) == list(range(60))  # every queued trial once, none twice


@pytest.mark.faults
def test_sixteen_workers_pop_every_planned_trial_once() -> None:
    """16 processes pop-and-complete 200 queued no-op trials from one PostgreSQL study, the way
    `suite worker` pops them: every trial is handed out exactly once (benchmarks/pops.py prints
    the pops per second of the same race, at 2,000 trials by default)."""
    from benchmarks.pops import plan, race

    url = os.environ.get("SUITE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    name, _ = plan(url, 200)
    popped, seconds = race(url, name, workers=16)
    assert sorted(popped) == list(range(200))
    states = Counter(t.state for t in optuna.load_study(study_name=name, storage=url).get_trials())
    assert states == {optuna.trial.TrialState.COMPLETE: 200}
    print(f"16 workers: {len(popped) / seconds:.1f} pops/s")


def test_a_stop_while_held_waits_for_the_held_region_and_one_while_allowed_is_raised_at_once() -> None:
    """Where a worker pops, tells or puts back, a stop is held (raised when that ends, never lost);
    while a trial trains it is raised at once; and once received, every later stop point raises it
    again (a KeyboardInterrupt swallowed somewhere cannot keep a worker taking trials)."""
    from suite.study.supervise import stop_point, stops_allowed, stops_as_interrupts, stops_held

    def stop() -> None:
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)  # ours: safe
        os.kill(os.getpid(), signal.SIGTERM)

    done = []
    with stops_as_interrupts(), pytest.raises(KeyboardInterrupt, match="SIGTERM"), stops_held():
        stop()
        done.append("held")  # runs: the stop waits for the region's end
    with stops_as_interrupts(), pytest.raises(KeyboardInterrupt, match="SIGTERM"), stops_held():
        with stops_allowed():
            stop()
            done.append("allowed")  # never runs
    with stops_as_interrupts(), pytest.raises(KeyboardInterrupt, match="SIGTERM"), stops_held():
        stop()
        with stops_allowed():  # a held stop is raised on the way in
            done.append("allowed after held")
    with stops_as_interrupts():
        try:
            stop()
        except KeyboardInterrupt:
            done.append("swallowed")
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            stop_point()  # the stop is not forgotten
    stop_point()  # outside `run`'s region: forgotten, nothing raised
    assert done == ["held", "swallowed"]


def test_a_worker_prunes_with_the_sweeps_pruner(tiny_task: Path, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    """A study loaded from its storage has Optuna's default pruner (a median pruner with other
    settings): a worker, one `run` started or one started by hand, prunes with the sweep's."""
    import suite.commands.run as run_command
    from suite.commands.cli import main

    pruner = ["--set", "sweep.pruner.type=median", "--set", "sweep.pruner.n_startup_trials=2"]
    pruner += ["--set", "sweep.pruner.n_warmup_steps=3"]
    folder = run_tiny(tiny_task, tiny_models["bert"], "--threads", "1", *pruner)
    storage = f"sqlite:///{folder / 'study.db'}"
    seen: list[object] = []
    worker_stand_in = lambda study, s, progress, **_: seen.append(study.pruner) or 0  # noqa: E731
    monkeypatch.setattr(run_command, "run_worker", worker_stand_in)
    worker = ["worker", "--storage", storage, "--study", optuna.get_all_study_names(storage)[0], "--quiet"]
    assert main([*worker, "--data-dir", str(tiny_task.parent.parent / "data")]) == 0
    (used,) = seen
    assert isinstance(used, optuna.pruners.MedianPruner)
    assert (used._n_startup_trials, used._n_warmup_steps) == (2, 3)


@pytest.mark.parametrize(
    "request_given",
    [
        {},
        {"data_dir": Path("/data/here"), "allow_stack_change": True, "log_to": ("csv:/tmp/x", "tensorboard")},
    ],
    ids=["plain", "every-flag"],
)
def test_the_first_worker_runs_with_the_request_a_started_worker_parses(request_given: dict) -> None:
    """The worker that planned works in the process that planned, with `worker_request`; every other
    worker parses `worker_command`'s arguments: one request both ways, each field."""
    from suite.commands.cli import build_parser, request_of
    from suite.config.request import Request
    from suite.study.setup import Setup
    from suite.study.supervise import worker_command, worker_request

    trainer = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    run = Request(task="tasks/rte.yaml", workers="2", seeds=3, offline=True, **request_given)
    s = Setup(run, None, None, "m", None, 2, 3, trainer, {}, {}, "sqlite:///s.db", "rte|m|devlin|default")
    parsed = request_of(build_parser().parse_args(worker_command(s)[3:]))
    assert parsed == worker_request(s)


def test_a_first_worker_pinned_to_another_device_tells_the_count_then_starts_afresh_pinned(
    tiny_task: Path, tiny_models, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """On GPUs the first worker plans before its device is known: it tells `run` the worker count
    and every worker's environment before its checks, hands back the plan, then starts afresh as a
    worker pinned to its device (here a device `run` does not have: CUDA_VISIBLE_DEVICES=7)."""
    from suite.commands import run
    from suite.commands.cli import build_parser, request_of
    from suite.model import devices

    class Restarted(Exception):
        pass

    def restart(s, env):  # noqa: ANN001, ANN202 - `restart_as_worker` replaces the process
        raise Restarted(s, env)

    said: list[tuple[str, object]] = []
    monkeypatch.setattr(
        devices, "worker_environment", lambda i, trainer: {"CUDA_VISIBLE_DEVICES": str(7 - i)}
    )
    monkeypatch.setattr(run, "tell", lambda value: said.append(("tell", value)))
    monkeypatch.setattr(run, "hand_back", lambda value: said.append(("hand_back", value)))
    monkeypatch.setattr(run, "restart_as_worker", restart)
    root = tiny_task.parent.parent
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--out", str(root / "runs")]
    args += ["--data-dir", str(root / "data"), "--workers", "2", "--threads", "1", "--quiet"]
    with pytest.raises(Restarted) as restarted:
        run._plan_then_work(request_of(build_parser().parse_args(args)))
    (told, (early, envs)), (handed, (s, planned)) = said
    assert (told, handed) == ("tell", "hand_back") and early.workers == s.workers == 2
    assert envs == [{"CUDA_VISIBLE_DEVICES": "7"}, {"CUDA_VISIBLE_DEVICES": "6"}]
    assert early.prepared is None and (early.url, early.name, early.threads) == (s.url, s.name, s.threads)
    assert planned == 3 and restarted.value.args[1]["CUDA_VISIBLE_DEVICES"] == "7"
