"""`suite launch`: plan a study into a storage its workers share, then submit the workers as jobs
through submitit: a Slurm job array (`--executor slurm`) or local processes (`--executor local`,
the same jobs on this machine). Each job runs `suite worker` on the study.

The launcher plans like `run` (the same planning path, suite/study/planning.py), so rerunning the
same command resumes: it queues only the planned trials the storage does not hold as runs, submits
workers only while some are left, and writes the run folder's outputs once none is.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.commands.launch_job import worker_job
from suite.config.request import Request
from suite.data.paths import data_dir
from suite.errors import SpecError, SuiteError
from suite.model.devices import usable_cpus
from suite.outputs.run_folder import write_outputs
from suite.study import slurm
from suite.study.planning import now, plan_study
from suite.study.setup import Setup
from suite.study.storage import public_url, write_atomic
from suite.study.worker import exit_status, interrupted_note, watch

EXECUTORS = ("slurm", "local")
# What nodes of a cluster can share: a database server. SQLite's file locks (and the queue's flock
# beside the file) are unreliable on network filesystems, so two nodes could pop one trial; a journal
# file has no heartbeats, so a job killed at its time limit would hold its trial forever.
SHARED_STORAGES = ("postgresql", "mysql")
DEFAULT_SLURM_TIME = "4:00:00"
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # submitit's local default (2 min) would kill every worker
POLL_S = {"local": 2.0, "slurm": 10.0}  # squeue is cheap; submitit's sacct view is not asked
POLL_ENV = "SUITE_LAUNCH_POLL_S"  # how often a waiting launch looks at its jobs


@dataclass(frozen=True)
class Launch:
    """How the workers are submitted: what `launch` adds to `run`'s request."""

    executor: str  # slurm | local
    workers: int  # worker jobs (an array on Slurm), at most the trials left to run
    cpus_per_worker: int | None = None  # torch threads per worker; default: slurm 1, local CPUs / workers
    partition: str | None = None
    time: str | None = None  # Slurm time limit: minutes, H:MM:SS or D-HH[:MM[:SS]]
    mem: str | None = None  # Slurm --mem per worker, e.g. 16G
    parallelism: int | None = None  # at most this many array jobs at once (default: all)
    options: tuple[str, ...] = ()  # more sbatch options, KEY=VALUE (account=..., qos=...)
    wait: bool | None = None  # wait for the jobs and write the outputs (default: local yes, slurm no)

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise SpecError(f"--executor: expected {' or '.join(EXECUTORS)}, got {self.executor!r}")
        for name in ("workers", "cpus_per_worker", "parallelism"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise SpecError(f"--{name.replace('_', '-')}: expected a positive integer, got {value}")


def launch(request: Request, how: Launch) -> int:
    """Plan the study, submit its workers, then wait and write the outputs (exit 0 when every
    planned trial ended as a run) or print how to watch and resume (exit 0)."""
    check_executor(request.storage, how.executor)
    if how.executor == "local" and request.gpus_per_worker:
        # submitit's local executor gives every job GPUs 0..G-1, whatever CUDA_VISIBLE_DEVICES says
        raise SpecError(
            "--gpus-per-worker with --executor local: every job would get the same GPUs; on one machine use "
            "`suite run --workers auto --workers-per-gpu K`, which maps workers through CUDA_VISIBLE_DEVICES"
        )
    stored = _stored_threads(request)
    if how.cpus_per_worker and stored and how.cpus_per_worker != stored:  # the flag typed, not --threads
        raise SpecError(
            f"--cpus-per-worker {how.cpus_per_worker}: the study runs {stored} thread(s) per worker, "
            "fixed when it was created; omit --cpus-per-worker to resume it"
        )
    cpus = how.cpus_per_worker or stored or _default_cpus(how)
    gpus = request.gpus_per_worker or 0
    parameters = executor_parameters(how, cpus, gpus, Path(str(request.task)).stem)
    # Each job is one worker with `cpus` threads: the study's threads, whatever this machine has.
    s, study = plan_study(dataclasses.replace(request, workers="1", threads=cpus, gpus_per_worker=gpus))
    assert s.folder is not None
    count = min(how.workers, _left_to_run(study, s, how.workers))
    limit = parameters["timeout_min"]
    if how.executor == "slurm" and (late := slurm.time_limit_warning(study, limit)):
        print(late, file=sys.stderr)
    if count:  # none left: a rerun after the jobs ended writes the outputs
        jobs = submit(s, how.executor, parameters, cpus, count)
        _record(s, how.executor, parameters, jobs)
        _say_submitted(s, how.executor, jobs)
        if not _waits(how):
            return 0
        try:
            _wait_for(jobs, study, s, how.executor, request.quiet)
        except KeyboardInterrupt:
            _interrupted(jobs, study, s, how.executor)
            raise
        _report(jobs, how.executor)
    else:
        print(f"study {s.name!r}: every planned trial has ended; no worker submitted")
    print(write_outputs(study, s.folder, s.task)[1])
    return exit_status(study)


def check_executor(storage: str | None, executor: str) -> None:
    """Refuse, before anything is planned or submitted, a storage the executor's workers cannot
    share, or Slurm where its commands are missing."""
    if executor == "local":
        return
    if not (storage or "").startswith(SHARED_STORAGES):
        given = (
            f"--storage {public_url(storage)}"
            if storage
            else "no --storage or $SUITE_STORAGE, the default storage (SQLite in the run folder)"
        )
        raise SpecError(
            f"{given}: Slurm workers on several nodes need a database server, --storage postgresql://... "
            "or mysql://... (SQLite's locks are unsafe on a network filesystem; a journal file has no "
            "heartbeats to re-queue a killed job's trial)"
        )
    if missing := [c for c in ("sbatch", "srun") if shutil.which(c) is None]:
        raise SuiteError(
            f"--executor slurm: no {' or '.join(missing)} on this machine's PATH (launch from a login node)"
        )


def _stored_threads(request: Request) -> int | None:
    """The threads per worker the request's study was created with (None: a new study): a rerun
    with other `--workers` keeps them, like `run` does, instead of being refused for them."""
    from suite.study.setup import load_specs, stored_threads, study_address
    from suite.study.storage import stored_study

    _, task, _, sweep = load_specs(request)
    _, url, name = study_address(request, task, sweep)
    return stored_threads(stored_study(url, name))


def _default_cpus(how: Launch) -> int:
    return 1 if how.executor == "slurm" else max(1, usable_cpus()[0] // how.workers)


def _waits(how: Launch) -> bool:
    return how.wait if how.wait is not None else how.executor == "local"


def _left_to_run(study: Any, s: Setup, workers: int) -> int:
    """Planned trials not ended as runs (queued, running, or a dead worker's, soon re-queued); a TPE
    study proposes its settings as it goes, so until its budget is spent it keeps every worker."""
    from suite.study.plan import ended_runs, planned_keys
    from suite.study.work import settings_proposed

    if s.sweep.adaptive and settings_proposed(study.get_trials(deepcopy=False)) < (s.sweep.budget or 0):
        return workers
    return len(planned_keys(study) - set(ended_runs(study)))


def submit(s: Setup, executor_name: str, parameters: dict[str, Any], cpus: int, count: int) -> list[Any]:
    """`count` worker jobs on the study (one array on Slurm), their files and logs under the run
    folder, readable by this user alone; the storage's password reaches them by the environment."""
    assert s.folder is not None
    code = slurm.code_root()
    if executor_name == "slurm":  # the job's environment and the limit's signal, not in launch.json
        parameters = {**parameters, **slurm.slurm_parameters(parameters["timeout_min"], code)}
    root = data_dir(s.request.data_dir)
    url, secrets = slurm.job_password(s.url)  # the password goes by the environment, never a file
    job = Request(
        storage=url,
        study=s.name,
        data_dir=root.resolve() if root else None,  # jobs may start elsewhere
        threads=cpus,
        offline=s.request.offline,
        quiet=True,
        allow_stack_change=s.request.allow_stack_change,
    )
    # worker_job is pickled by reference: the job imports it from the launcher's code (on its path)
    limit = parameters["timeout_min"] if executor_name == "slurm" else None
    export = parameters.get("slurm_additional_parameters", {}).get("export")
    with slurm.handing_over(secrets, export):
        executor = make_executor(executor_name, slurm.private_folder(s.folder / "jobs"), parameters)
        return executor.map_array(worker_job, [job] * count, [code] * count, [limit] * count)


def make_executor(executor: str, folder: Path, parameters: dict[str, Any]) -> Any:
    """A submitit executor for the workers, its job folders under `folder` (Slurm: `srun` on PATH)."""
    import submitit

    made = submitit.AutoExecutor(folder=folder / "%j", cluster=executor)
    made.update_parameters(**parameters)
    return made


def executor_parameters(how: Launch, cpus: int, gpus: int, name: str) -> dict[str, Any]:
    """submitit's parameters: the shared ones (both executors) and Slurm's own (`slurm_` prefix,
    ignored by the local executor)."""
    minutes = slurm_minutes(how.time or DEFAULT_SLURM_TIME) if how.executor == "slurm" else LOCAL_TIMEOUT_MIN
    parameters: dict[str, Any] = {
        "name": f"suite-{name}",
        "cpus_per_task": cpus,
        "gpus_per_node": gpus or None,  # none: CPU workers (sbatch gets no GPU request at all)
        "timeout_min": minutes,
        "slurm_partition": how.partition,
        "slurm_mem": _checked_mem(how.mem),
        "slurm_array_parallelism": how.parallelism or how.workers,
    }
    if how.options:
        parameters["slurm_additional_parameters"] = dict(_option(o) for o in how.options)
    return {k: v for k, v in parameters.items() if v is not None}


def slurm_minutes(text: str) -> int:
    """A Slurm time limit in whole minutes (seconds round up), in sbatch's formats: `M`, `M:S`,
    `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`."""
    found = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", text.strip())
    if not found:
        raise SpecError(f"--slurm-time: expected minutes, H:MM:SS or D-HH:MM:SS, got {text!r}")
    days, clock = found.groups()
    parts = [int(p) for p in clock.split(":")]
    if days is None:
        hours, minutes, seconds = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    else:
        hours, minutes, seconds = (*parts, 0, 0)[:3]
    total = (int(days or 0) * 24 + hours) * 60 + minutes + math.ceil(seconds / 60)
    if total < 1:
        raise SpecError(f"--slurm-time: expected at least one minute, got {text!r}")
    return total


def _checked_mem(mem: str | None) -> str | None:
    if mem is not None and not re.fullmatch(r"\d+[KMGT]?", mem):
        raise SpecError(f"--slurm-mem: expected a size such as 16G or 4000M, got {mem!r}")
    return mem


def _option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SpecError(f"--slurm-option: expected KEY=VALUE (e.g. account=myproject), got {text!r}")
    return key.strip(), value.strip()


def _record(s: Setup, executor: str, parameters: dict[str, Any], jobs: list[Any]) -> None:
    """launch.json in the run folder: every launch of the study, with its job ids."""
    assert s.folder is not None
    path = s.folder / "launch.json"
    launches = json.loads(path.read_text())["launches"] if path.is_file() else []
    launches.append(
        {
            "date": now(),
            "executor": executor,
            "jobs": [str(j.job_id) for j in jobs],
            "study": s.name,
            "storage": public_url(s.url),
            "parameters": parameters,
            "logs": str(s.folder / "jobs"),
        }
    )
    write_atomic(path, json.dumps({"launches": launches}, indent=2) + "\n")


def _say_submitted(s: Setup, executor: str, jobs: list[Any]) -> None:
    assert s.folder is not None
    url = public_url(s.url)
    hidden = " (the password is hidden here)" if url != s.url else ""
    print(
        f"submitted {len(jobs)} worker job{'s' if len(jobs) != 1 else ''} ({executor}): "
        f"{job_ids([str(j.job_id) for j in jobs])}; "
        f"logs in {s.folder / 'jobs'}\n"
        f"study {s.name!r} in {url}\n"
        f"watch: optuna-dashboard '{url}'{hidden}\n"
        "rerun this command to resume (trials that ended as runs are not rerun) and, once no trial is "
        f"left, to write the outputs to {s.folder}"
    )


def job_ids(ids: list[str]) -> str:
    """Job ids as squeue writes them: an array's tasks as `4242_[0-3,7]` (one task: `4242_0`),
    other ids (a lone job, a local process) as they are."""
    tasks: dict[str, list[int]] = {}
    shown: list[str] = []
    for found in ids:
        base, _, task = found.partition("_")
        if not task.isdigit():
            shown.append(found)
            continue
        if base not in tasks:
            shown.append(base)  # its place, filled below
        tasks.setdefault(base, []).append(int(task))
    return " ".join(_array(base, tasks[base]) if base in tasks else base for base in shown)


def _array(base: str, tasks: list[int]) -> str:
    if len(tasks) == 1:
        return f"{base}_{tasks[0]}"
    runs: list[list[int]] = []
    for task in sorted(set(tasks)):
        if runs and task == runs[-1][-1] + 1:
            runs[-1].append(task)
        else:
            runs.append([task])
    return f"{base}_[{','.join(f'{r[0]}-{r[-1]}' if len(r) > 1 else str(r[0]) for r in runs)}]"


def _wait_for(jobs: list[Any], study: Any, s: Setup, executor: str, quiet: bool) -> None:
    """Until every job has ended (Slurm: as squeue sees them, with or without accounting);
    meanwhile the study's progress (`run`'s bar)."""
    from suite.study.setup import planned_trials

    poll_s = float(os.environ.get(POLL_ENV, POLL_S[executor]))
    if executor == "slurm":
        ids = [str(j.job_id) for j in jobs]
        running = lambda: slurm.running(ids)  # noqa: E731
    else:
        running = lambda: not all(j.done() for j in jobs)  # noqa: E731
    if quiet:
        while running():
            time.sleep(poll_s)
        return
    watch(study, planned_trials(s.task, s.sweep), len(jobs), running, f"trials ({len(jobs)} jobs)", poll_s)


def _interrupted(jobs: list[Any], study: Any, s: Setup, executor: str) -> None:
    """Ctrl-C while waiting: local jobs stop (each puts its running trial back); Slurm jobs run on."""
    from suite.study.setup import planned_trials

    if executor == "local":
        # submitit's local controller passes SIGINT on but kills its job a second later, often before
        # the worker has put its trial back: that trial then returns through its stale heartbeat.
        for job in jobs:
            job.cancel(check=False)
        deadline = time.monotonic() + 60
        while not all(j.done() for j in jobs) and time.monotonic() < deadline:
            time.sleep(0.5)
        print(
            interrupted_note(
                study,
                planned_trials(s.task, s.sweep),
                "a running trial may come back only after its heartbeat's grace, 3 x SUITE_HEARTBEAT_S",
            ),
            file=sys.stderr,
        )
    else:
        ids = sorted({str(j.job_id).split("_")[0] for j in jobs})
        print(
            f"stopped waiting; the jobs run on (scancel {' '.join(ids)} stops them); rerun this command "
            "to collect the outputs",
            file=sys.stderr,
        )


def _report(jobs: list[Any], executor: str) -> None:
    """Slurm: one line per job, its state; local: one line per job that failed (the study's state,
    not the jobs', decides the exit code)."""
    if executor == "slurm":
        slurm.report(jobs, _raised)
        return
    for job in jobs:
        if not job.paths.result_pickle.exists():  # killed: time or memory limit, preempted, a signal
            why = f"ended without a result (state {job.state})"
        elif (error := job.exception()) is not None:
            why = _raised(str(error))
        else:
            continue
        print(f"job {job.job_id}: {why}; log {job.paths.stderr}", file=sys.stderr)


def _raised(text: str) -> str:
    """The exception line of a submitit error: the last line of the trace it frames in dashes."""
    lines = text.splitlines()
    frame = [i for i, line in enumerate(lines) if line == "-" * 22]
    trace = [line for line in lines[frame[0] + 1 : frame[1]] if line.strip()] if len(frame) > 1 else []
    return trace[-1] if trace else lines[0]
