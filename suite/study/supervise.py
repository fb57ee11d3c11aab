"""How a study's processes stop, and how `run` starts, waits for and stops its local workers.

A stop is SIGINT (Ctrl-C), SIGTERM (a scheduler, `timeout`, CI) or SIGHUP (the terminal closed).
Inside a process it is raised as KeyboardInterrupt only where nothing is half-done: a worker holds
stops (`stops_held`) while it takes a trial, tells the study an outcome or puts a trial back, and
lets them through (`stops_allowed`) while a trial trains or while it waits for others; a stop that
came while held is raised where they are let through again, so none is lost.

`run`'s workers run in their own process group, so a terminal's Ctrl-C reaches `run` only: `run`
passes each stop on as SIGTERM and waits, a bounded time, for every worker to put its running
trial back. Their group, not their own session: where the kernel groups each session's processes
for the scheduler (Linux's autogroup, on by default), a session of its own would weigh each worker
like everything else the user runs together, and a nice-19 job started from the same terminal
took a third of each worker's core (benchmarks/RESULTS.md, the process group section). In
`run`'s session the workers are weighed as `run`, beside another session's jobs (another login,
a tmux window) as one session, like any of the user's terminals: nice counts within a session.
A worker sets its own stop handling when it starts, whatever it inherited (a job started as
`cmd &` from a script inherits SIGINT ignored), and asks the kernel for SIGTERM when `run` dies,
however it dies (SIGKILL too), so no worker trains on without it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from suite.config.request import Request
from suite.study.memory import allocator_env
from suite.study.setup import Setup

PARENT_ENV = "SUITE_PARENT_PID"  # in a worker `run` started: `run`'s pid (its death stops the worker)
FOLDER_ENV = "SUITE_RUN_FOLDER"  # in a worker `run` started: the run folder (suite/study/pending.py)
WORKER_ATTR = "worker"  # a running trial's system attribute: host:pid of the worker that took it
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_ENV = "SUITE_STOP_GRACE_S"  # how long `run` waits for stopped workers (default 60 s)
# `run` to its other workers when one ends: look at the queue now. Ignored by default (a process
# that never asked for it is untouched); `run` starts its workers with it blocked, so it waits for
# their next look. None where a worker could not wait for it (macOS: no sigtimedwait).
LOOK = signal.SIGURG if hasattr(signal, "SIGURG") and hasattr(signal, "sigtimedwait") else None

_held = 0  # depth of `stops_held` regions in this process
_stop: str | None = None  # the stop this process received, if any: it is never forgotten


def _on_stop(signum: int, frame: Any) -> None:
    global _stop
    _stop = signal.Signals(signum).name
    if not _held:
        raise KeyboardInterrupt(_stop)


def stop_point() -> None:
    """Raise the stop this process received, if any. Every later stop point raises it again: a
    stop that a library swallowed (a KeyboardInterrupt raised inside a finalizer is only printed)
    still ends the worker before its next trial."""
    if _stop is not None:
        raise KeyboardInterrupt(_stop)


@contextmanager
def stops_held() -> Iterator[None]:
    """A stop that comes inside is raised when the outermost held region ends, or at a stop point
    or `stops_allowed` inside it."""
    global _held
    saved = _held  # restored, not counted down: a stop raised mid-exit cannot skew the depth
    _held = saved + 1
    try:
        yield
    finally:
        _held = saved
    if not saved:
        stop_point()


@contextmanager
def stops_allowed() -> Iterator[None]:
    """Inside held code, a region where a stop is raised at once (one received before, on entry)."""
    global _held
    saved, _held = _held, 0
    try:
        stop_point()
        yield
    finally:
        _held = saved


def install_stops() -> None:
    """In a worker, when it starts: SIGINT, SIGTERM and SIGHUP stop it, whatever it inherited;
    but a worker started by hand with SIGHUP ignored (`nohup suite worker ... &`) was asked to
    outlive its terminal, and keeps it ignored (one `run` started hears it through `run`'s death)."""
    for sig in STOPS:
        hand_nohup = sig == signal.SIGHUP and not os.environ.get(PARENT_ENV)
        if not (hand_nohup and signal.getsignal(sig) is signal.SIG_IGN):
            signal.signal(sig, _on_stop)


def stop_also_on(sig: signal.Signals) -> None:
    """In a worker: `sig` stops it like SIGTERM (a scheduler's warning before it kills a job:
    Slurm's `--signal` ahead of a time limit), so its trial goes back to the queue."""
    signal.signal(sig, _on_stop)


def stop_received() -> str | None:
    """The name of the stop this process received (None: none)."""
    return _stop


@contextmanager
def stops_as_interrupts() -> Iterator[None]:
    """`run` itself: each stop stops the study (the workers in their own process group hear none). A
    stop the shell set to be ignored stays ignored: a background job's SIGINT, `nohup`'s SIGHUP.
    A stop received inside is forgotten when it ends (the process may run another study)."""
    global _stop
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOPS}
    _stop = None
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _on_stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: a handler set outside Python, which cannot be put back
                signal.signal(sig, handler)
        _stop = None


def stop_with_parent() -> None:
    """In a worker: its own stops (`install_stops`), and, when `run` started it, SIGTERM from the
    kernel when `run` dies, however it dies (Linux's PR_SET_PDEATHSIG; elsewhere nothing)."""
    install_stops()
    parent = os.environ.get(PARENT_ENV)
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # it died before the line above: nothing would signal us
        os.kill(os.getpid(), signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """A stop reached `run_workers`: every worker ended; `waiting` are the trials a worker still
    held when it ended (killed after `grace_s`, or dead): each goes back to the queue when its
    heartbeat goes stale."""

    def __init__(self, waiting: list[int], grace_s: float, put_back: int = 0) -> None:
        super().__init__(f"stopped; trials waiting for their heartbeat: {waiting}")
        self.waiting, self.grace_s, self.put_back = waiting, grace_s, put_back


@contextmanager
def worker_signals() -> Iterator[None]:
    """Around `run` starting a worker: what the worker has from its first instruction, before any
    thread of its own exists (a signal mask and an ignored signal pass through fork and exec):
    `LOOK` blocked, so it stays pending for `idle_wait` (a thread that had not blocked it would
    take it and, ignored, lose it), and SIGTTOU ignored (a background group of `run`'s terminal
    writing under `stty tostop`, even an import's warning, would be stopped there). `run` gets
    both back as they were."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {LOOK}) if LOOK is not None else None
    main = threading.current_thread() is threading.main_thread()  # only there may Python set one
    ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN) if main and hasattr(signal, "SIGTTOU") else None
    try:
        yield
    finally:
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if ttou is not None:
            signal.signal(signal.SIGTTOU, ttou)


def idle_wait(seconds: float) -> bool:
    """A worker with no trial to take, while others run: until its next look at the queue, or
    until `run` says one of its workers ended (`LOOK`; True): the study's last trial may have, and
    an idle worker of a finished study then ends at once, not up to a look's interval later."""
    if LOOK is None:
        time.sleep(seconds)
        return False
    return signal.sigtimedwait({LOOK}, seconds) is not None


def run_workers(
    study: Any,
    workers: Sequence[subprocess.Popen],
    watch: Callable[[Callable[[], bool]], None] | None = None,
    poll_s: float = 0.2,
) -> list[int]:
    """Waits for `run`'s local worker processes on the shared storage (the first, which planned,
    and those `start_held_workers` started); `watch(running)` shows progress while `running()`.
    Each time one ends, the others look at the queue at once (`idle_wait`).
    Returns their exit codes (the study's state, not these, decides the run's). A stop passes on
    to every worker; once each has put its trial back (or the grace period passed), `Stopped` is
    raised."""
    live = list(workers)

    def running() -> bool:
        ended = [w for w in live if w.poll() is not None]
        for w in ended:
            live.remove(w)
        if ended and LOOK is not None:
            for w in live:
                w.send_signal(LOOK)  # one that ended since is not signalled (Popen checks)
        return bool(live)

    with stops_held():
        try:
            with stops_allowed():
                if watch is not None:
                    watch(running)
                while running():
                    time.sleep(poll_s)
                return [w.wait() for w in workers]
        except BaseException as err:  # a stop, or this process failed: no worker goes on without it
            ended = stop_workers(list(workers), grace_s())
            if isinstance(err, KeyboardInterrupt):
                held, back = trials_held_by(study, ended), trials_put_back_by(study, ended)
                raise Stopped(held, grace_s(), back) from err
            raise


GO = "go"  # the line a held worker reads once the study is planned (`start_held_workers`)


def start_held_workers(s: Setup, environments: list[dict[str, str]], started: list[subprocess.Popen]) -> None:
    """The workers `run` starts besides the first while the first still plans (`s`: its setup as
    soon as the worker count is known), one per environment, each into `started` as it starts (a
    failed start leaves the others there to be stopped): each imports what a worker needs
    (seconds of CPU, on the other cores), then waits (`suite worker --wait-for-go`) for `let_go`
    before it joins the study. Only as many as `s.workers` says: none for a trial that is not there."""
    for own in environments:  # the command is built per worker: none for no worker
        command = [*worker_command(s), "--wait-for-go"]
        with worker_signals():
            env = worker_env({**own, FOLDER_ENV: str(s.folder)} if s.folder else own)
            process = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, process_group=0)
        started.append(process)


def let_go(workers: Sequence[subprocess.Popen], go: bool = True) -> None:
    """The study is planned (`go`): each held worker joins it; else their input just ends, and
    each ends without joining."""
    for w in workers:
        assert w.stdin is not None
        try:
            with w.stdin:
                if go:
                    w.stdin.write(f"{GO}\n".encode())
        except BrokenPipeError:  # it ended already: its exit code tells
            pass


def worker_env(own: dict[str, str]) -> dict[str, str]:
    """A local worker's environment: this process's, jemalloc where installed (`allocator_env`),
    its own (a device), and this process's pid (its death stops the worker: `stop_with_parent`).
    Workers start in their own process group (`run`'s session: the module's docstring says why)."""
    return {**os.environ, **allocator_env(), **own, PARENT_ENV: str(os.getpid())}


def grace_s() -> float:
    """How long `run` waits for its stopped workers to put their trials back."""
    return float(os.environ.get(GRACE_ENV, "60"))


def worker_request(s: Setup) -> Request:
    """The request of a worker this `run` starts on the study, in a process of its own or in the
    one that planned: what `suite worker` reads from `worker_command(s)` (a test holds them equal)."""
    return Request(
        data_dir=s.request.data_dir,
        storage=s.url,
        study=s.name,
        threads=s.threads,
        trainer={option: str(value) for option, value in s.trainer.items()},
        quiet=True,
        allow_stack_change=s.request.allow_stack_change,
        log_to=tuple(s.request.log_to),
    )


def worker_command(s: Setup) -> list[str]:
    """`suite worker` on this study, as this `run` would run a trial."""
    r = worker_request(s)
    command = [sys.executable, "-m", "suite", "worker", "--storage", str(r.storage), "--study", str(r.study)]
    command += ["--threads", str(r.threads), "--quiet"]
    if r.data_dir:
        command += ["--data-dir", str(r.data_dir)]
    for option, value in r.trainer.items():
        command += [f"--{option}", value]
    if r.allow_stack_change:
        command += ["--allow-stack-change"]
    for tracker in r.log_to:
        command += ["--log-to", tracker]
    return command


def restart_as_worker(s: Setup, env: dict[str, str]) -> NoReturn:
    """This process, replaced by `worker_command(s)` in `env` (the first worker, which planned
    before the device it is pinned to was known)."""
    command = worker_command(s)
    sys.stdout.flush(), sys.stderr.flush()  # what it printed so far, before the process is replaced
    os.execve(command[0], command, env)


def stop_workers(workers: list[subprocess.Popen], grace_s: float) -> list[int]:
    """SIGTERM to each worker still running, then wait for all of them to end: each puts its trial
    back in the queue. One still running after `grace_s` is killed (its trial then comes back
    through its heartbeat). Returns the pids of every worker."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for w in workers:
        try:
            w.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()
    return [w.pid for w in workers]


def trials_held_by(study: Any, pids: list[int]) -> list[int]:
    """Numbers of the study's running trials that one of these (ended) worker processes took."""
    import socket

    from optuna.trial import TrialState

    ours = {f"{socket.gethostname()}:{pid}" for pid in pids}
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return [t.number for t in running if t.system_attrs.get(WORKER_ATTR) in ours]


def trials_put_back_by(study: Any, pids: list[int]) -> int:
    """How many trials these worker processes put back when stopped: failed without a record
    (what `work` does to a trial it was stopped in; an ended trial always has one)."""
    import socket

    from optuna.trial import TrialState

    ours = {f"{socket.gethostname()}:{pid}" for pid in pids}
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    return sum(t.system_attrs.get(WORKER_ATTR) in ours and "record" not in t.user_attrs for t in failed)
