"""A `suite launch` job's own process: the time limit's signal, what a stop put back, the array it
cancels when a time limit is shorter than a trial, the check that it runs the launcher's code, and
the storage's password from its environment.
`suite.commands.launch_job.worker_job` is what the job runs; signals and processes live here, in
the study stage (docs/contributing.md).

The signal Slurm sends before the job's time limit (`--signal=USR2@lead`, `suite.study.slurm
.signal_lead_s`) stops the worker the way SIGTERM does: its trial goes back to the queue with no
attempt spent (submitit's own handler would raise inside the trial and record it errored). A trial
that time limits as long as this job's put back twice is not taken again: the job says so in one
line and cancels the rest of its array.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from suite.config.request import Request
from suite.errors import SuiteError

TIME_LIMIT = signal.SIGUSR2  # submitit's --signal (SUBMITIT_PREEMPT_SIGNAL unset)
TIME_LIMITED_ATTR = "time_limited"  # study attr: key -> [[array job, seconds it ran, limit min], ...]
MAX_TIME_LIMITED = 2  # put-backs by one launch's time limits before a trial is held
# The variable that hands a job its storage's password (`launch` exports it by name, not value):
# libpq reads PGPASSWORD itself; a MySQL job puts SUITE_STORAGE_PASSWORD back into its URL, in memory.
PASSWORD_ENV = {"postgresql": "PGPASSWORD", "mysql": "SUITE_STORAGE_PASSWORD"}


class BeforeStart(KeyboardInterrupt):
    """The time limit's signal before this job took a trial (its imports)."""


def _before_start(signum: int, frame: Any) -> None:
    raise BeforeStart(signal.Signals(signum).name)


def watch_time_limit() -> None:
    """From the job's first instruction: the time limit's signal ends it before a trial is taken
    (the imports take seconds); `stop_also_on(TIME_LIMIT)` takes over once it works."""
    signal.signal(TIME_LIMIT, _before_start)


def check_code(code: str) -> None:
    """Refuse, in one line, a job that imported `suite` from somewhere else than the launcher."""
    import suite

    here = Path(suite.__file__).resolve().parent.parent
    if here != Path(code):
        raise SuiteError(
            f"this job imported suite from {here}, the launcher ran {code}: run both from one "
            "checkout (PYTHONPATH or the venv's install)"
        )


def with_password(request: Request) -> Request:
    """A MySQL job's storage URL with the password `launch` handed over in its environment, in this
    process's memory only (a PostgreSQL job's libpq reads PGPASSWORD itself)."""
    password = os.environ.get(PASSWORD_ENV["mysql"])
    if not password or not str(request.storage).startswith("mysql"):
        return request
    from sqlalchemy.engine import make_url

    url = make_url(str(request.storage))._replace(password=password)
    return dataclasses.replace(request, storage=url.render_as_string(hide_password=False))


def stopped(request: Request, why: str, limit_min: int | None) -> str:
    """What a stop did: which trial went back to the queue (none: it came before one was taken)."""
    from suite.study.job_log import trial_put_back

    study, trial = trial_put_back(request)
    cause = "the time limit's signal" if why == "SIGUSR2" else f"{why} (scancel, the time limit or a stop)"
    if trial is None:
        return f"stopped by {cause} before taking a trial"
    ran = (trial.datetime_complete - trial.datetime_start).total_seconds()
    line = f"stopped by {cause}: trial {trial.user_attrs['key']} went back to the queue after {ran:.0f} s"
    if why != "SIGUSR2":
        return line + " (no attempt spent)"
    times = count_time_limited(study, trial.user_attrs["key"], ran, limit_min)
    if len(times) < MAX_TIME_LIMITED:
        return line + " (no attempt spent)"
    cancel_array()
    return (
        f"time limit shorter than a trial: trial {trial.user_attrs['key']} ran "
        f"{' s, '.join(f'{t:.0f}' for t in times)} s before {len(times)} time limits and is not taken "
        "again by this launch (its other jobs cancelled); rerun with a longer --slurm-time"
    )


def count_time_limited(study: Any, key: str, ran: float, limit_min: int | None) -> list[float]:
    """Record that a time limit of `limit_min` put `key` back after `ran` s; how long it ran each
    time a limit at least as long did so."""
    from suite.study.queue import queue_lock

    array = os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID", "")
    with queue_lock(study):
        held = dict(study.user_attrs.get(TIME_LIMITED_ATTR, {}))
        held[key] = [*held.get(key, []), [array, round(ran, 1), limit_min]]
        study.set_user_attr(TIME_LIMITED_ATTR, held)
    # a longer limit starts afresh (a rerun given more time); one as short or shorter counts them all
    return [seconds for _, seconds, limit in held[key] if (limit or 0) >= (limit_min or 0)]


def cancel_array() -> None:
    """Cancel this job's array: its other jobs put their trials back (SIGTERM), this one ends."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cancel reaches this job too
        subprocess.run(["scancel", array], check=False)
