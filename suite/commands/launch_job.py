"""What one `suite launch` job runs on its node: submitit unpickles `worker_job` there and calls it.

The job first checks that it imported the launcher's code, then works as `suite worker` does; the
time limit's signal stops it the way SIGTERM does (`suite.study.slurm_job`). The job's log (its
stderr) holds one line per trial started and ended and one for a stop (`suite.study.job_log`);
the result the launcher reads is the job's last line: what it ended, what a stop put back, a trial
taken over.
"""

from __future__ import annotations

import sys
import time

from suite.config.request import Request
from suite.study.slurm_job import (
    TIME_LIMIT,
    BeforeStart,
    cause_of,
    check_code,
    end_quickly,
    stopped,
    watch_time_limit,
    with_password,
)


def worker_job(request: Request, code: str, limit_min: int | None = None) -> str:
    """One submitted job: `suite worker` on the study, in this process, from the launcher's `code`
    under a time limit of `limit_min` minutes. Returns its one line."""
    watch_time_limit()  # first: the imports below take seconds
    try:
        check_code(code)
        return _work(with_password(request), limit_min)  # MySQL's password; libpq reads PGPASSWORD
    except KeyboardInterrupt as stop:  # before the worker could take a trial (its imports)
        end_quickly()
        return _said(f"stopped by {cause_of(_signal(stop))} with no trial running")
    finally:
        end_quickly()


def _work(request: Request, limit_min: int | None) -> str:
    from suite.commands.run import worker
    from suite.study.job_log import JobLog, logging_trials, say
    from suite.study.supervise import stop_also_on

    stop_also_on(TIME_LIMIT)
    log = JobLog(request)
    try:
        with logging_trials(log):
            worker(request)
    except KeyboardInterrupt as stop:
        end_quickly()  # no second stop cuts its last writes short
        line = stopped(log, _signal(stop), limit_min)
        say(line)
        return line
    return log.summary()


def _signal(stop: KeyboardInterrupt) -> str:
    if isinstance(stop, BeforeStart):
        return str(stop.args[0])
    from suite.study.supervise import stop_received

    return stop_received() or "SIGINT"


def _said(line: str) -> str:
    print(f"{time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)
    return line
