"""What one `suite launch` job runs on its node: submitit unpickles `worker_job` there and calls it.

The job first checks that it imported the launcher's code, then works as `suite worker` does; the
time limit's signal stops it the way SIGTERM does (`suite.study.slurm_job`). The job's log holds one
line per trial started and ended (`suite.study.job_log`) and one line for a stop; the result the
launcher reads is that line.
"""

from __future__ import annotations

import sys

from suite.config.request import Request
from suite.study.slurm_job import BeforeStart, check_code, stopped, watch_time_limit, with_password


def worker_job(request: Request, code: str, limit_min: int | None = None) -> str:
    """One submitted job: `suite worker` on the study, in this process, from the launcher's `code`
    under a time limit of `limit_min` minutes. Returns its one line."""
    watch_time_limit()  # first: the imports below take seconds
    check_code(code)
    from suite.commands.run import worker
    from suite.study.job_log import logging_trials
    from suite.study.slurm_job import TIME_LIMIT
    from suite.study.supervise import stop_also_on, stop_received

    stop_also_on(TIME_LIMIT)
    request = with_password(request)  # MySQL's; PostgreSQL's libpq reads PGPASSWORD itself
    try:
        with logging_trials(request):
            worker(request)
    except KeyboardInterrupt as stop:
        why = "SIGUSR2" if isinstance(stop, BeforeStart) else stop_received() or "SIGINT"
        line = stopped(request, why, limit_min)
        print(line, file=sys.stderr)
        return line
    return "ended: no trial left to take"
