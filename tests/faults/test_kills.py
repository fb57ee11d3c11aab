"""SIGKILL `suite run` at chosen and at random points, rerun until done: the trial set and the
scores equal an uninterrupted run's, each planned trial ran to an end once, no half-written
file is left."""

from __future__ import annotations

import ctypes.util
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
from tests.conftest import write_tiny_task

pytestmark = pytest.mark.faults
KILL_POINTS = ["cache_write", "train_step:3", "evaluation:2", "outputs_write"]


def _command(task: Path, model: Path, out: Path) -> list[str]:
    data = task.parent.parent / "data"
    return [
        sys.executable, "-m", "suite", "run", str(task), "--model", str(model), "--out", str(out),
        "--data-dir", str(data), "--quiet", "--threads", "1",
    ]  # fmt: skip


def _env(cache: Path, kill: str | None = None) -> dict[str, str]:
    env = {**os.environ, "SUITE_CACHE_DIR": str(cache), "SUITE_HEARTBEAT_S": "5", "HF_HUB_OFFLINE": "1"}
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


@pytest.fixture(scope="module")
def uninterrupted(tiny_models, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:  # noqa: ANN001
    """The outcomes of the tiny task run without a kill, once for the tests below (each kills its
    own copy of the same task: keys and numbers do not depend on where a task lives)."""
    root = tmp_path_factory.mktemp("uninterrupted")
    task, out = write_tiny_task(root), root / "clean"
    done = _run(_command(task, tiny_models["bert"], out), _env(root / "cache-clean"))
    assert done.returncode == 0, done.stderr[-2000:]
    # `run` typed at the command line trains under jemalloc where installed, at one worker too.
    expected = "jemalloc" if ctypes.util.find_library("jemalloc") else "glibc"
    records = [json.loads(line) for line in next(out.glob("*/*/trials.jsonl")).open()]
    assert {r["allocator"] for r in records} == {expected}
    return _outcomes(next(out.glob("*/*")))


def test_kills_at_every_named_point_then_rerun(
    tiny_task: Path, tiny_models, tmp_path: Path, uninterrupted
) -> None:  # noqa: ANN001, E501
    out, cache = tmp_path / "killed", tmp_path / "cache-killed"
    command = _command(tiny_task, tiny_models["bert"], out)
    for point in KILL_POINTS:  # one after another into the same run folder and cache
        killed = _run(command, _env(cache, point))
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr[-2000:])
    outputs = ("run.json", "trials.jsonl", "leaderboard.json")
    assert not [name for name in outputs if (next(out.glob("*/*")) / name).exists()]  # died before any
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


BACKGROUND = '"$@" & echo $!; wait'  # a plain background job of a script: its SIGINT is ignored


def _gone(pid: int) -> bool:
    """The process ended (a zombie no one reaped yet counts as ended)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


# A foreground job of a terminal: Ctrl-C's SIGINT neither ignored nor blocked, whatever the test
# runner's own (a runner started as `cmd &` by a script ignores SIGINT, and its children inherit that).
FOREGROUND = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


def _signal_state(pids: list[int]) -> str:
    """Each live process's ignored, blocked and caught signals (/proc), for a stop that did not land."""
    lines = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            lines.append(f"{pid}: gone")
            continue
        lines.append(
            f"{pid}: " + ", ".join(s for s in status if s.startswith(("State", "SigBlk", "SigIgn", "SigCgt")))
        )
    return "; ".join(lines)


def _started(trace: Path) -> Counter:
    """Worker pid -> the trials it started (from the fault hooks' trace file)."""
    lines = trace.read_text().splitlines() if trace.exists() else []
    return Counter(int(line.split()[1]) for line in lines if line.startswith("trial "))


def _wait_for(condition, what: str, seconds: float) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what} after {seconds:.0f} s"
        time.sleep(0.2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_stop_reaches_the_workers_of_a_run_started_as_a_background_job(
    stop: signal.Signals, tiny_task: Path, tiny_models, tmp_path: Path
) -> None:  # noqa: ANN001
    """`run` with 2 workers, started as `cmd &` by a script (so it and its workers inherit SIGINT
    ignored); each worker ends one trial and hangs in its second. Killed outright, or stopped with
    SIGTERM, `run`'s workers stop and put their trials back; SIGTERM's message counts what ended."""
    trace = tmp_path / "trace"
    command = _command(tiny_task, tiny_models["bert"], tmp_path / "out") + ["--seeds", "6", "--workers", "2"]
    env = {**_env(tmp_path / "cache"), "SUITE_TRACE": str(trace), "SUITE_STALL_AT": "trial:2"}
    script = subprocess.Popen(
        ["bash", "-c", BACKGROUND, "bash", *command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run, workers = int(script.stdout.readline()), []

    try:
        _wait_for(
            lambda: sorted(_started(trace).values()) == [2, 2], "both workers in their second trial", 600
        )
        workers = list(_started(trace))
        os.kill(run, stop)
        _wait_for(lambda: all(_gone(pid) for pid in workers), "the workers to stop", 60)
        _, err = script.communicate(timeout=120)
    finally:  # a failed check leaves no hung process behind
        for pid in [run, *workers]:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
        script.kill()

    folder = next((tmp_path / "out").glob("*/*"))
    states = Counter(
        t.state.name
        for t in optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'study.db'}").get_trials()
    )
    assert states["COMPLETE"] == 2 and states["RUNNING"] == 0  # the hung trials were put back
    assert states["WAITING"] == 6 - 2  # and queued again: the rerun resumes them at once
    if stop == signal.SIGTERM:
        assert f"interrupted: {states['COMPLETE']} of 6 planned trials ended, 4 left" in err, err[-2000:]
        assert "(2 running trials went back to the queue)" in err  # one per worker, counted


def test_a_worker_that_does_not_stop_is_killed_after_the_grace_period_and_run_names_its_trial(
    tiny_task: Path, tiny_models, tmp_path: Path
) -> None:  # noqa: ANN001
    """Both workers hang in their second trial deaf to stops: `run`, stopped, waits the grace period
    (2 s here), kills them, and names the two trials left to their heartbeat."""
    trace = tmp_path / "trace"
    command = _command(tiny_task, tiny_models["bert"], tmp_path / "out") + ["--seeds", "6", "--workers", "2"]
    env = {
        **_env(tmp_path / "cache"),
        "SUITE_TRACE": str(trace),
        "SUITE_STALL_AT": "trial:2",
        "SUITE_STALL_DEAF": "1",
        "SUITE_STOP_GRACE_S": "2",
    }
    run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    try:
        _wait_for(
            lambda: sorted(_started(trace).values()) == [2, 2], "both workers in their second trial", 600
        )
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=600)
    finally:
        for pid in [run.pid, *_started(trace)]:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == 130, err[-2000:]
    assert all(_gone(pid) for pid in _started(trace))  # killed, not left training
    folder = next((tmp_path / "out").glob("*/*"))
    trials = optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'study.db'}").get_trials()
    running = [t.number for t in trials if t.state.name == "RUNNING"]
    assert len(running) == 2
    named = f"(trials {running[0]}, {running[1]} still marked running, not put back within 2 s"
    assert named in err and "heartbeat" in err, err[-2000:]  # and none counted as put back


def test_a_stop_while_the_first_worker_plans_ends_it_and_the_rerun_runs_every_trial_once(
    tiny_task: Path, tiny_models, tmp_path: Path, uninterrupted
) -> None:  # noqa: ANN001
    """With several workers the first one plans while the second, started once the count was
    known, waits for the plan: stopped while the first writes the features (before any trial is
    queued or started) and the second waits, `run` stops both, waits for them and exits 130. The
    planner here hangs deaf to stops, so only `run`'s own kill after its grace period ends it (its
    parent's death would send a SIGTERM it ignores): gone when `run` is. The rerun plans again and
    runs each planned trial once, with the uninterrupted run's numbers."""
    trace, out, log = tmp_path / "trace", tmp_path / "out", tmp_path / "stderr"
    command = _command(tiny_task, tiny_models["bert"], out) + ["--workers", "2"]
    env = {**_env(tmp_path / "cache"), "SUITE_TRACE": str(trace), "SUITE_STALL_AT": "cache_write"}
    deaf = {**env, "SUITE_STALL_DEAF": "1", "SUITE_STOP_GRACE_S": "2"}
    planner = held = None

    def reached() -> dict[str, int]:  # point -> the pid that reached it
        return {line.split()[0]: int(line.split()[1]) for line in trace.read_text().splitlines()}

    with log.open("w") as err:  # a file, not a pipe the planner would hold open after `run` ends
        run = subprocess.Popen(command, env=deaf, stdout=subprocess.DEVNULL, stderr=err)
        try:
            points = ("cache_write", "held")
            _wait_for(lambda: trace.exists() and set(points) <= set(reached()), "planning", 600)
            planner, held = (reached()[point] for point in points)
            run.send_signal(signal.SIGTERM)
            assert run.wait(timeout=600) == 130, log.read_text()[-2000:]
            assert _gone(planner) and _gone(held)  # `run` ended both and waited for them
        finally:
            for pid in filter(None, [run.pid, planner, held]):
                if not _gone(pid):
                    os.kill(pid, signal.SIGKILL)
    assert len({run.pid, planner, held}) == 3  # it planned in a worker, beside the one held
    assert not _started(trace)  # no trial started

    rerun = _run(command, {**env, "SUITE_STALL_AT": ""})
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    _check_complete(next(out.glob("*/*")), uninterrupted)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="autogroups and sessions as Linux has them")
def test_the_workers_of_run_share_its_session_in_a_process_group_of_their_own(
    tiny_task: Path, tiny_models, tmp_path: Path
) -> None:  # noqa: ANN001
    """`run` started as a shell starts a foreground job (a process group of its own); its two
    workers (the first, which planned, and the one started while it planned) each hang in their
    first trial. Each is in `run`'s session, where the scheduler weighs it as one of `run`'s
    processes (a session of its own is weighed like a whole terminal of the user's: beside a
    nice-19 job, two thirds of a core), and in a process group other than `run`'s, the one a
    terminal's Ctrl-C reaches. That Ctrl-C (SIGINT to `run`'s group) stops the study: the workers
    put their trials back and `run` exits 130."""
    trace = tmp_path / "trace"
    command = _command(tiny_task, tiny_models["bert"], tmp_path / "out") + ["--seeds", "4", "--workers", "2"]
    env = {**_env(tmp_path / "cache"), "SUITE_TRACE": str(trace), "SUITE_STALL_AT": "trial:1"}
    run = subprocess.Popen(
        [sys.executable, "-c", FOREGROUND, *command[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    workers: list[int] = []
    try:
        _wait_for(lambda: len(_started(trace)) == 2, "both workers in their first trial", 600)
        workers = list(_started(trace))
        assert [os.getsid(pid) for pid in workers] == [os.getsid(run.pid)] * 2
        assert run.pid not in [os.getpgid(pid) for pid in workers]
        os.killpg(run.pid, signal.SIGINT)
        try:
            _, err = run.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            pytest.fail(f"`run` still running 300 s after Ctrl-C: {_signal_state([run.pid, *workers])}")
    finally:  # a failed check leaves no hung process behind
        for pid in [run.pid, *workers]:
            if not _gone(pid):
                os.kill(pid, signal.SIGKILL)
    assert run.returncode == 130, err[-2000:]
    assert "interrupted: 0 of 4 planned trials ended, 4 left (2 running trials went back" in err, err[-2000:]
    folder = next((tmp_path / "out").glob("*/*"))
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{folder / 'study.db'}")
    states = Counter(t.state.name for t in study.get_trials())
    assert states["RUNNING"] == 0 and states["WAITING"] == 4  # both put back, queued again
