"""A launch job's log, on the job's stderr (`<job>_log.err`), where Slurm's own lines about the job
go too: one stamped line when one of its trials starts, one when it ends (outcome, score) and one
for a stop, each naming the trial by its number and short key (`endings.trial_name`). Read from
the study beside the worker (a thread that polls this process's running trials), so the worker's
loop is the one `run` uses, untouched. At its end the job says what it did in one line: the line
`launch --wait` prints for it."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from optuna.trial import TrialState

from suite.config.request import Request
from suite.study.endings import trial_name
from suite.study.periodic import periodically

POLL_S = 1.0  # how often the log looks at this worker's running trials
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def me() -> str:
    """This worker as it marks the trials it takes (`supervise.WORKER_ATTR`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def say(line: str, at: Any = None) -> None:
    """A log line stamped with the time it happened (`at`, a datetime) or now."""
    stamp = at.strftime("%H:%M:%S") if at else time.strftime("%H:%M:%S")
    print(f"{stamp} {line}", file=sys.stderr, flush=True)


def ended_line(trial: Any) -> str | None:
    """`trial N (short key) ended: OUTCOME, metric=score`; None for a trial with no record (put
    back, or taken over: no end)."""
    record = trial.user_attrs.get("record")
    if record is None:
        return None
    score = record.get("score")
    scored = f", {record.get('metric', 'score')}={score!r}" if score is not None else ", no score"
    reason = f" ({record.get('reason')})" if record.get("outcome") == "errored" else ""
    return f"{trial_name(trial)} ended: {record.get('outcome')}{scored}{reason}"


class JobLog:
    """This worker's trials in the study: those it started, those that ended with a record, and
    those another worker took over after a missed heartbeat (one that ended without a record while
    this process had received no stop: after one, the trial it put back)."""

    def __init__(self, request: Request) -> None:
        from suite.study.storage import open_storage

        self.request = request
        self.storage = open_storage(str(request.storage))
        self.study_id = self.storage.get_study_id_from_name(str(request.study))
        self.seen: dict[int, bool] = {}  # trial id -> whether it is finished (and its end said)
        self.ended: list[Any] = []  # with a record
        self.taken_over: list[Any] = []  # finished without one before any stop

    def study(self) -> Any:
        import optuna

        return optuna.load_study(study_name=self.request.study, storage=self.storage)

    def look(self, every: bool = False) -> None:
        """This worker's trials that started or ended since the last look; `every`: also those
        that started and ended between two looks (a scan of the whole study)."""
        from suite.study.supervise import WORKER_ATTR, stop_received

        states = (TrialState.RUNNING,) if not every else (TrialState.RUNNING, *FINISHED)
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False, states=states):
            if t.system_attrs.get(WORKER_ATTR) == me():
                self.started(t)
        for trial_id in [i for i, said in self.seen.items() if not said]:
            t = self.storage.get_trial(trial_id)
            if t.state.is_finished():
                self.seen[trial_id] = True
                if line := ended_line(t):
                    self.ended.append(t)
                    say(line, t.datetime_complete)
                elif stop_received() is None:  # the signal came first: what follows is a put-back
                    self.taken_over.append(t)

    def started(self, trial: Any) -> None:
        """Its start line, unless said: a trial a stop put back before a look saw it gets one too."""
        if trial._trial_id not in self.seen:
            self.seen[trial._trial_id] = False
            say(f"{trial_name(trial)} started", trial.datetime_start)

    def safely(self, every: bool = False) -> None:
        try:
            self.look(every)
        except Exception as err:  # the log must never stop the worker
            print(f"job log: {type(err).__name__}: {err}", file=sys.stderr)

    def summary(self) -> str:
        """What a job that ran out of trials did: the trials it ended, and each one it was running
        that another worker took over after a missed heartbeat (its result discarded)."""
        ended = len(self.ended)
        parts = [f"ended {ended} trial{'s' if ended != 1 else ''}"]
        parts += [
            f"{trial_name(t)} was taken over after a missed heartbeat (its result is discarded)"
            for t in self.taken_over
        ]
        return "; ".join([*parts, "no trial left to take"])

    def put_back(self, study: Any) -> Any:
        """The trial this worker put back after a stop (None: it held none): the last one it took
        that ended without a record, and not one taken over before."""
        from suite.study.supervise import WORKER_ATTR

        failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        over = {t._trial_id for t in self.taken_over}
        mine = [t for t in failed if t.system_attrs.get(WORKER_ATTR) == me() and t._trial_id not in over]
        mine = [t for t in mine if "record" not in t.user_attrs]
        return max(mine, key=lambda t: t.datetime_complete, default=None)


@contextmanager
def logging_trials(log: JobLog) -> Iterator[JobLog]:
    """Around a worker in this process: its trials' start and end lines in the job's log. After a
    stop only what it saw is said: the whole study is not read again while Slurm waits to kill."""
    from suite.study.supervise import stop_received

    try:
        with periodically(log.safely, POLL_S, "suite-job-log"):
            yield log
    finally:
        log.safely(every=stop_received() is None)
