"""A `suite launch` job's own process: the time limit's signal, what a stop put back, the array it
cancels when a time limit is shorter than a trial, the check that it runs the launcher's code, and
the storage's password from its environment.
`suite.commands.launch_job.worker_job` is what the job runs; signals and processes live here, in
the study stage (docs/contributing.md).

The signal Slurm sends before the job's time limit (`--signal=USR2@lead`, `suite.study.slurm
.signal_lead_s`) stops the worker the way SIGTERM does: its trial goes back to the queue with no
attempt spent (submitit's own handler would raise inside the trial and record it errored). Why a
trial went back is written on its queued copy (`suite.study.endings`), which the study's ending
reads. A trial that time limits as long as this job's put back twice is not taken again: the job
says so in one line and cancels the rest of its array.

Once its worker is out, a job ignores further stops and leaves without the interpreter's garbage
collections (`end_quickly`): Slurm kills a job step still there `KillWait` (often 10-30 s) after a
cancel or the time limit's SIGTERM, and srun then ends the log with `srun: error: ... Killed`.
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
    """The time limit's signal, or a stop, before this job took a trial (its imports)."""


def _before_start(signum: int, frame: Any) -> None:
    raise BeforeStart(signal.Signals(signum).name)


def watch_time_limit() -> None:
    """From the job's first instruction: the time limit's signal or a stop (a cancel) ends it
    before a trial is taken (the imports take seconds) with its line, not Python's default death;
    the worker's own stops (`stop_also_on(TIME_LIMIT)`, `install_stops`) take over once they work."""
    for sig in (TIME_LIMIT, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:  # one the job was told to ignore stays so
            signal.signal(sig, _before_start)


def end_quickly() -> None:
    """Once the worker is out (its trial put back, or none left): a later stop (srun passing on
    the cancel, the time limit's SIGTERM) no longer interrupts the job's last writes, and the
    process ends without collecting what torch and the trials left (seconds of CPU on a loaded
    node, past Slurm's KillWait). Only in a job's own process (submitit's, which names its folder in
    SUBMITIT_FOLDER): a process that calls `worker_job` itself goes on."""
    from suite.study.memory import skip_exit_collection

    if "SUBMITIT_FOLDER" not in os.environ:
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, TIME_LIMIT):
        signal.signal(sig, signal.SIG_IGN)
    skip_exit_collection()


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


def job_id() -> str:
    """This job as squeue and `launch` name it: an array's task as ARRAY_TASK, else its id (a
    local job: its controller's pid)."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getpid())


def stopped(log: Any, why: str, limit_min: int | None) -> str:
    """After a stop (`why`: the signal's name) has put this job's trial back: what went back and
    why, written on its queued copy for the study's ending (`endings.note_put_back`); a trial that
    time limits as long as this job's put back twice also cancels the rest of the array.
    `log`: the job's `JobLog`. Returns the job's line."""
    from suite.study.endings import note_put_back, trial_name

    study = log.study()
    trial = log.put_back(study)
    capped = capped_by(study, limit_min) if why == "SIGTERM" else None
    cause = cause_of(why, capped)
    if trial is None:
        return f"stopped by {cause} with no trial running"
    log.started(trial)
    ran = (trial.datetime_complete - trial.datetime_start).total_seconds()
    noted: dict[str, Any] = {"signal": why, "job": job_id(), "after_s": round(ran, 1), "limit_min": limit_min}
    line = f"stopped by {cause}: {trial_name(trial)} went back to the queue after {ran:.0f} s"
    line += " (no attempt spent)"
    if why != TIME_LIMIT.name:
        reason = "array_capped" if capped else "cancel" if why == "SIGTERM" else "stop"
        note_put_back(study, trial, {**noted, "why": reason})
        return line
    times = count_time_limited(study, trial.user_attrs["key"], ran, limit_min)
    if len(times) < MAX_TIME_LIMITED:
        note_put_back(study, trial, {**noted, "why": "time_limit"})
        return line
    note_put_back(study, trial, {**noted, "why": "capped", "times": times})
    others = cancel_rest_of_array()
    cancelled = f" (its {others} other job{'s' if others > 1 else ''} cancelled)" if others else ""
    return (
        f"time limit shorter than a trial: {trial_name(trial)} ran {', '.join(f'{t:.0f}' for t in times)} s "
        f"before {len(times)} time limits of {limit_min} min and is not taken again by this launch"
        f"{cancelled}; rerun with a longer --slurm-time"
    )


def cause_of(why: str, capped: str | None = None) -> str:
    """A stop's signal as a job's line says it: the time limit's, a cancel's, a capped array's."""
    if why == TIME_LIMIT.name:
        return f"the time limit's signal ({why})"
    if capped is not None:
        return f"{why}: this array was cancelled, its time limit shorter than {capped}"
    return f"{why} (a cancel, or Slurm ending the job)" if why == "SIGTERM" else why


def capped_by(study: Any, limit_min: int | None) -> str | None:
    """The trial (a key, shortened) whose time limits made this job's array cancel itself: the
    last put-back a time limit of this array counted reached `MAX_TIME_LIMITED` (None: none did)."""
    from suite.study.records import short_key

    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    for key, times in (study.user_attrs.get(TIME_LIMITED_ATTR) or {}).items():
        counted = [t for t in times if (t[2] or 0) >= (limit_min or 0)]
        if array and len(counted) >= MAX_TIME_LIMITED and times[-1][0] == array:
            return f"a trial ({short_key(key)})"
    return None


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


def cancel_rest_of_array() -> int:
    """Cancel this job's array but this job: the others put their trials back (SIGTERM), this one
    ends on its own, so Slurm neither cancels nor kills it. Returns how many were cancelled. Where
    squeue cannot list the array's jobs, the whole array is cancelled, this job ignoring the
    SIGTERM that comes with it."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if not array:
        return 0
    try:
        listed = subprocess.run(
            ["squeue", "-h", "-r", "-j", array, "-o", "%i"], capture_output=True, text=True, check=False
        )
    except OSError:  # no squeue here: nothing to cancel with either
        return 0
    if listed.returncode:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        subprocess.run(["scancel", array], check=False)
        return 0
    others = [i for i in listed.stdout.split() if i != f"{array}_{task}"]
    if others:
        subprocess.run(["scancel", *others], check=False)
    return len(others)
