"""What `launch` does with Slurm itself: the job's environment and the time limit's signal in the
sbatch script, the warning for a limit shorter than the study's trials, and waiting for jobs and
reporting how they ended through squeue and sacct, with or without Slurm's accounting.

submitit's own `job.done()` asks sacct: where accounting is off it fails ("Slurm accounting storage
is disabled") and submitit takes every job it cannot see as running, forever. Here a job runs while
squeue lists it unfinished; its end state comes from squeue while it lists the job ended (it keeps
an ended job for MinJobAge, 300 s by default), else from sacct (asked again for a moment where its
accounting lags the end), else it is said to be unknown, and why.

The storage's password never goes into a job's files or arguments (the run folder is on a shared
filesystem; argv is in everyone's `ps`): a job gets the URL without it, and the password in its
environment, named in sbatch's export list so that a site's --export=NONE passes it too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# squeue's states of a job that has not ended (anything else it lists has)
UNFINISHED = {
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
}  # fmt: skip
# What a job needs from the launcher's environment, passed explicitly: a site's --export=NONE
# (SBATCH_EXPORT=NONE) starts the batch script without it.
PASSED = (
    "PATH", "HOME", "USER", "LANG", "VIRTUAL_ENV", "LD_PRELOAD", "MALLOC_CONF", "SLURM_CONF", "PGPASSFILE",
)  # fmt: skip
PASSED_PREFIXES = ("SUITE_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "OMP_", "MKL_")
# never written into the script (sbatch's own export, where on, passes them), nor a value holding a
# URL's password (SUITE_STORAGE, say)
SECRET = re.compile("TOKEN|KEY|PASSWORD|SECRET", re.I)


def signal_lead_s(minutes: int) -> int:
    """How long before a job's time limit its workers are told to stop: submitit's 90 s, or a
    quarter of a shorter limit (15 s of a 1-minute limit), so the signal does not come at the start."""
    return min(90, max(10, minutes * 15))


def code_root() -> str:
    """The launcher's checkout (the folder holding the `suite` package): the jobs import it."""
    import suite

    return str(Path(suite.__file__).resolve().parent.parent)


def job_setup(code: str) -> list[str]:
    """The sbatch script's lines before srun: the launcher's code first on the job's path, and the
    variables a job needs, set whatever sbatch exported."""
    from suite.study.storage import public_url

    environ = dict(os.environ)
    environ["PYTHONPATH"] = os.pathsep.join(p for p in (code, environ.get("PYTHONPATH")) if p)
    names = sorted(
        n
        for n in environ
        if (n in PASSED or n == "PYTHONPATH" or n.startswith(PASSED_PREFIXES))
        and not SECRET.search(n)
        and public_url(environ[n]) == environ[n]
    )
    return [f"export {n}={shlex.quote(environ[n])}" for n in names]


def job_password(url: str) -> tuple[str, dict[str, str]]:
    """The storage URL a job is given, without its password, and the environment that hands the
    password over instead (empty: none to hand over, or ~/.pgpass or PGPASSFILE holds it)."""
    from suite.study.slurm_job import PASSWORD_ENV
    from suite.study.storage import split_password

    bare, password = split_password(url)
    name = next((n for scheme, n in PASSWORD_ENV.items() if url.startswith(scheme)), None)
    password = password or (os.environ.get(name) if name else None)
    return bare, {name: password} if name and password else {}


def exported(names: list[str], given: str | None) -> str:
    """sbatch's --export with `names` added by name (sbatch passes their values, never writing
    them): ALL passes them already; NONE, a site's default, becomes only them (the script exports
    the rest); a list gets them appended."""
    given = (given or "ALL").strip()
    if given.upper() == "ALL" or given.upper().startswith("ALL,"):
        return given
    return ",".join([*([] if given.upper() in ("NONE", "NIL") else [given]), *names])


@contextmanager
def handing_over(secrets: dict[str, str], export: str | None) -> Iterator[None]:
    """While jobs are submitted: what they get is private (umask 077: submitit's pickles, script and
    folders, and the logs Slurm opens with the submitter's umask), and the password is in this
    process's environment, which sbatch (or the local executor) passes on. SBATCH_EXPORT names it
    on top of what the site's SBATCH_EXPORT, else the script's --export (`export`), asked: sbatch
    takes its environment over the script's options."""
    saved = {n: os.environ.get(n) for n in [*secrets, "SBATCH_EXPORT"]}
    mask = os.umask(0o077)
    os.environ.update(secrets)
    if secrets:
        os.environ["SBATCH_EXPORT"] = exported(list(secrets), os.environ.get("SBATCH_EXPORT") or export)
    try:
        yield
    finally:
        os.umask(mask)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def private_folder(folder: Path) -> Path:
    """`folder` made, or kept, readable by its owner alone: the jobs' pickles, scripts and logs."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    return folder


def slurm_parameters(minutes: int, code: str) -> dict[str, Any]:
    """submitit's Slurm parameters for the environment and the time limit's signal; srun is told to
    pass the script's environment on (with --export=NONE, sbatch sets SLURM_EXPORT_ENV=NONE, and
    srun would start the worker without even submitit's SUBMITIT_EXECUTOR)."""
    return {
        "slurm_signal_delay_s": signal_lead_s(minutes),
        "slurm_setup": job_setup(code),
        "slurm_srun_args": ["--export=ALL"],
    }


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def _arrays(ids: list[str]) -> str:
    return ",".join(sorted({i.split("_")[0] for i in ids}))


def squeue_states(ids: list[str]) -> dict[str, str] | None:
    """Job id -> state of the jobs squeue still lists (None: squeue failed)."""
    done = _run("squeue", "-h", "-r", "-t", "all", "-j", _arrays(ids), "-o", "%i|%T")
    if done.returncode:
        return None
    rows = (line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
    return {job: state for job, state in rows if job in ids}


def sacct_states(ids: list[str]) -> tuple[dict[str, str], str]:
    """Job id -> end state from Slurm's accounting, and why there is none ("" when sacct worked)."""
    done = _run("sacct", "-n", "-X", "-P", "-j", _arrays(ids), "-o", "JobID,State")
    if done.returncode:
        return {}, (done.stderr.strip().splitlines() or ["sacct failed"])[-1]
    rows = (line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
    return {job: state.split()[0] for job, state in rows if job in ids and state}, ""


def running(ids: list[str]) -> bool:
    """Whether any of these jobs has not ended, as squeue sees them (a job it no longer lists ended)."""
    states = squeue_states(ids)
    return states is None or any(state in UNFINISHED for state in states.values())


def end_states(ids: list[str], tries: int = 5, wait_s: float = 1.0) -> dict[str, str]:
    """Each ended job's state: squeue's while it lists the job ended (fresh), else sacct's, else
    `unknown (why)`. Accounting lags the job's end by a moment: a job sacct still calls running
    is asked again, `tries` times `wait_s` apart."""
    listed = {i: s for i, s in (squeue_states(ids) or {}).items() if s not in UNFINISHED}
    accounted, why = sacct_states(ids)
    for _ in range(tries - 1):
        if not any(accounted.get(i) in UNFINISHED for i in ids if i not in listed):
            break
        time.sleep(wait_s)
        accounted, why = sacct_states(ids)
    return {i: listed.get(i) or _accounted(accounted.get(i), why) for i in ids}


def _accounted(state: str | None, why: str) -> str:
    if state and state not in UNFINISHED:
        return state
    said = f"sacct still says {state}" if state else why or "sacct does not list it"
    return f"state unknown: {said}; squeue no longer does"


def report(jobs: list[Any], raised: Any) -> None:
    """One line per job: its state, and its own last line (a stop) or error (`raised`)."""
    states = end_states([str(j.job_id) for j in jobs])
    for job in jobs:
        state = states[str(job.job_id)]
        if job.paths.result_pickle.exists():
            outcome, value = _outcome(job)
            said = value if outcome == "success" else raised(str(value))
        else:
            said = f"ended without a result; log {job.paths.stderr}"
        print(f"job {job.job_id} {state}: {said}", file=sys.stderr)


def _outcome(job: Any) -> tuple[str, Any]:
    from submitit.core import utils

    return utils.pickle_load(job.paths.result_pickle)


def time_limit_warning(study: Any, minutes: int) -> str | None:
    """One line when the study's trials need more than a job's time limit leaves them: a stored
    trial took longer, or a limit as long or longer put one back unfinished."""
    from suite.study.endings import trial_name
    from suite.study.records import short_key
    from suite.study.slurm_job import TIME_LIMITED_ATTR

    usable = minutes * 60 - signal_lead_s(minutes)
    for key, times in (study.user_attrs.get(TIME_LIMITED_ATTR) or {}).items():
        if hit := [(ran, limit) for _, ran, limit in times if limit and limit >= minutes]:
            ran, limit = max(hit)
            return (
                f"warning: --slurm-time {minutes} min: a {limit} min limit stopped trial {short_key(key)} "
                f"unfinished after {ran:.0f} s; its jobs would put it back again (no attempt is spent)"
            )
    took = [
        (float(t.user_attrs["record"].get("wall_time_s") or 0), t.number, t)
        for t in study.get_trials(deepcopy=False)
        if t.state.name == "COMPLETE" and "record" in t.user_attrs
    ]
    if not took or max(took)[0] <= usable:
        return None
    seconds, _, trial = max(took)
    return (
        f"warning: --slurm-time {minutes} min leaves a trial {usable} s before the stop signal; "
        f"{trial_name(trial)} took {seconds:.0f} s: its job's limit would put it back unfinished (no "
        "attempt is spent)"
    )
