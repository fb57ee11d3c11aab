"""A launch job's log: one line when one of its trials starts and one when it ends (key, outcome,
score), read from the study beside the worker (a thread that polls this process's running trials),
so the worker's loop is the one `run` uses, untouched."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from suite.config.request import Request
from suite.study.periodic import periodically

POLL_S = 1.0  # how often the log looks at this worker's running trials


def me() -> str:
    """This worker as it marks the trials it takes (`supervise.WORKER_ATTR`)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _say(line: str, at: Any = None) -> None:
    """A log line stamped with the time it happened (`at`, a datetime) or now."""
    print(f"{at.strftime('%H:%M:%S') if at else time.strftime('%H:%M:%S')} {line}", flush=True)


def ended_line(trial: Any) -> str | None:
    """`trial KEY ended: OUTCOME, metric=score`; None for a trial put back (no record: no end)."""
    record = trial.user_attrs.get("record")
    if record is None:
        return None
    score = record.get("score")
    scored = f", {record.get('metric', 'score')}={score!r}" if score is not None else ", no score"
    reason = f" ({record.get('reason')})" if record.get("outcome") == "errored" else ""
    return f"trial {trial.user_attrs.get('key')} ended: {record.get('outcome')}{scored}{reason}"


@contextmanager
def logging_trials(request: Request) -> Iterator[None]:
    """Around a worker in this process: its trials' start and end lines in the job's log."""
    from suite.study.storage import open_storage

    storage = open_storage(str(request.storage))
    study_id = storage.get_study_id_from_name(str(request.study))
    seen: dict[int, bool] = {}  # trial id -> whether its end was said

    def look(every: bool = False) -> None:
        """This worker's trials that started or ended since the last look; `every`: also those
        that started and ended between two looks (a scan of the whole study, once at the end)."""
        from optuna.trial import TrialState

        from suite.study.supervise import WORKER_ATTR

        states = None if every else (TrialState.RUNNING,)
        for t in storage.get_all_trials(study_id, deepcopy=False, states=states):
            if t.system_attrs.get(WORKER_ATTR) == me() and t._trial_id not in seen:
                seen[t._trial_id] = False
                _say(f"trial {t.user_attrs.get('key')} started (number {t.number})", t.datetime_start)
        for trial_id in [i for i, said in seen.items() if not said]:
            t = storage.get_trial(trial_id)
            if t.state.is_finished():
                seen[trial_id] = True
                if line := ended_line(t):
                    _say(line, t.datetime_complete)

    def safely(every: bool = False) -> None:
        try:
            look(every)
        except Exception as err:  # the log must never stop the worker
            print(f"job log: {type(err).__name__}: {err}", file=sys.stderr)

    try:
        with periodically(safely, POLL_S, "suite-job-log"):
            yield
    finally:
        safely(every=True)


def trial_put_back(request: Request) -> tuple[Any, Any]:
    """The study, and the trial this process put back after a stop (None: it held none)."""
    import optuna
    from optuna.trial import TrialState

    from suite.study.storage import open_storage
    from suite.study.supervise import WORKER_ATTR

    study = optuna.load_study(study_name=request.study, storage=open_storage(str(request.storage)))
    failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    mine = [t for t in failed if t.system_attrs.get(WORKER_ATTR) == me() and "record" not in t.user_attrs]
    return study, max(mine, key=lambda t: t.number, default=None)
