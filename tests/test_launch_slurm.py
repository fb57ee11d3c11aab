"""`suite launch` against a real single-node Slurm (.ci/slurm.sh: real sbatch, squeue, sacct and
scancel; one cluster with accounting, one without) and PostgreSQL: a cancel mid-trial, a rerun that
writes the outputs, `--wait` with and without accounting, `--export=NONE`, a time limit shorter
than a trial, a hard-killed worker, a worker frozen past its heartbeat's grace whose trial is
taken over, and a database password that no file, argv or Slurm view may show. Every case ends
with each planned trial COMPLETE once, its score bitwise equal to a one-worker `suite run` of the
same plan on this machine. Each ending `--wait` prints is asserted line by line (what ended, what
went back and why, what to do), and no job's log holds an `srun: error` line or a traceback.

Without Slurm or PostgreSQL these tests skip with the reason; under CI=true they fail."""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
from suite.study.endings import trial_name
from suite.study.slurm import running

pytestmark = pytest.mark.slurm  # `make slurm-test`: a step of its own in CI, outside `make test`
POSTGRES = os.environ.get("SUITE_TEST_POSTGRES_URL")
CLUSTERS = {"accounting": "SUITE_TEST_SLURM_CONF", "none": "SUITE_TEST_SLURM_NOACCT_CONF"}


def _missing(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why} (CI=true: .ci/run starts it)")
    pytest.skip(f'{why} (.ci/run starts it: eval "$(bash .ci/slurm.sh)", bash .ci/postgres.sh)')


def _slurm(accounting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's launcher and jobs on one of .ci/slurm.sh's clusters, polled every second."""
    conf = os.environ.get(CLUSTERS[accounting])
    if not conf:
        _missing(f"{CLUSTERS[accounting]} not set: no Slurm")
    if not POSTGRES:
        _missing("SUITE_TEST_POSTGRES_URL not set: no PostgreSQL for the workers")
    monkeypatch.setenv("SLURM_CONF", conf)
    if subprocess.run(["scontrol", "ping"], capture_output=True, check=False).returncode:
        _missing(f"Slurm at {conf} does not answer scontrol ping")
    monkeypatch.setenv("SUITE_LAUNCH_POLL_S", "1")
    monkeypatch.setenv("SUITE_HEARTBEAT_S", "2")  # a killed worker's trial comes back after 6 s


def _write_sweep(root: Path) -> Path:
    """2 seeds of one setting, 10 epochs: a trial trains for seconds, long enough to be frozen in."""
    path = root / "sweeps" / "one.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("name: one\nhparams: {batch_size: 8, epochs: 10, lr: 3.0e-4}\nseeds: {repeats: 2}\n")
    return path


@pytest.fixture(scope="module")
def reference(tiny_models: dict, tmp_path_factory: pytest.TempPathFactory) -> dict[str, float]:
    """Key -> score of a one-worker `suite run` of the plan (2 seeds) on this machine."""
    from tests.conftest import write_tiny_task

    root = tmp_path_factory.mktemp("reference")
    task = write_tiny_task(root)
    args = ["run", str(task), "--model", str(tiny_models["bert"]), "--sweep", str(_write_sweep(root))]
    args += ["--out", str(root / "runs"), "--data-dir", str(root / "data"), "--workers", "1"]
    assert main([*args, "--threads", "1", "--quiet"]) in (0, 1)
    (folder,) = (root / "runs").glob("tiny/*")
    return {r["key"]: r["score"] for r in map(json.loads, (folder / "trials.jsonl").open())}


def _command(
    task: Path, model: Path, study: str, *extra: str, storage: str | None = POSTGRES, out: str = "runs"
) -> list[str]:
    root = task.parent.parent
    return [
        "launch", str(task), "--model", str(model), "--sweep", str(_write_sweep(root)),
        "--out", str(root / out), "--data-dir", str(root / "data"), "--study", study,
        *(["--storage", storage] if storage else []), "--cpus-per-worker", "1", "--quiet", *extra,
    ]  # fmt: skip


@functools.cache
def _storage(url: str) -> optuna.storages.RDBStorage:
    """One storage per URL for the test's looks, holding no idle connection: tests poll it every
    half second beside the jobs, and a fresh engine per look kept each one's connection until the
    server refused clients."""
    from sqlalchemy.pool import NullPool

    return optuna.storages.RDBStorage(url, engine_kwargs={"poolclass": NullPool})


def _trials(study: str, storage: str | None = POSTGRES) -> list[optuna.trial.FrozenTrial]:
    assert storage is not None
    return optuna.load_study(study_name=study, storage=_storage(storage)).get_trials()


def _until(what: str, ready: Callable[[], bool], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.5)


def _until_ended(job: str) -> None:
    _until(f"job {job}'s end", lambda: not running([job]))


def _job_ids(folder: Path) -> list[str]:
    return json.loads((folder / "launch.json").read_text())["launches"][-1]["jobs"]


def _until_running(study: str) -> optuna.trial.FrozenTrial:
    """The first trial seen running, once its worker has marked it (past the pop's lock)."""
    seen: list[optuna.trial.FrozenTrial] = []

    def one() -> bool:
        seen.extend(t for t in _trials(study) if t.state.name == "RUNNING" and "worker" in t.system_attrs)
        return bool(seen)

    _until("a running trial", one)
    return seen[0]


def _launched(root: Path) -> list[dict]:
    found = list((root / "runs").glob("tiny/*/launch.json"))
    return json.loads(found[0].read_text())["launches"] if found else []


@contextmanager
def _meanwhile(root: Path, act: Callable[[list[str]], object]) -> Iterator[None]:
    """`act(job ids)` in a thread once the launch the block runs (one that waits) has submitted its
    jobs. Should it fail, the jobs are cancelled, so that the wait ends and the test fails."""
    before, failed = len(_launched(root)), []

    def run() -> None:
        ids: list[str] = []
        try:
            _until("the launch's jobs", lambda: len(_launched(root)) > before)
            ids = _launched(root)[-1]["jobs"]
            act(ids)
        except BaseException as err:  # reported in the test's own thread
            failed.append(err)
            subprocess.run(["scancel", *ids], check=False)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:  # the thread's failure first: it is why the launch ended as it did
        thread.join(timeout=60)
        assert not failed, failed


def _put_back(study: str) -> optuna.trial.FrozenTrial:
    """The last trial a stop put back (failed without a record)."""
    return max((t for t in _trials(study) if t.state.name == "FAIL"), key=lambda t: t.number)


def _assert_lines(err: str, expected: list[str]) -> None:
    """`err`'s lines from its first job line on are `expected`, each matched as a whole (regexes)."""
    lines = err.splitlines()
    ours = lines[next(i for i, line in enumerate(lines) if line.startswith("job ")) :]
    assert len(ours) == len(expected), "\n".join(ours)
    for line, pattern in zip(ours, expected, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} !~ {pattern!r}"
    assert "did not end (a worker died?)" not in err


def _assert_clean_logs(folder: Path, jobs: list[str]) -> None:
    """These jobs' logs: no traceback, no warning, no `srun: error` (a step Slurm killed), and
    none of the job's own lines on its stdout (they all go to one stream, its stderr)."""
    for job in jobs:
        log = _logs(folder, job)
        assert "Traceback" not in log and "Warning:" not in log and "srun: error" not in log, log
        out = "".join(p.read_text() for p in (folder / "jobs" / job).glob("*_log.out"))
        assert not re.search(r"^\d\d:\d\d:\d\d ", out, re.M), out


def _assert_stop_logged(folder: Path, job: str, trial: optuna.trial.FrozenTrial) -> None:
    """The job's log: the trial a stop put back started once, then a stamped line put it back."""
    log = _logs(folder, job)
    assert re.search(rf"^\d\d:\d\d:\d\d {re.escape(trial_name(trial))} started$", log, re.M), log
    assert re.search(rf"^\d\d:\d\d:\d\d .*: {re.escape(trial_name(trial))} (went back|ran )", log, re.M), log


def _assert_left_within(job: str, folder: Path, seconds: float) -> None:
    """The job's step ended (sacct) at most `seconds` after its stop line's stamp."""
    stamp = re.search(r"^(\d\d:\d\d:\d\d) stopped by ", _logs(folder, job), re.M)
    assert stamp, _logs(folder, job)
    ends: dict[str, str] = {}

    def accounted() -> bool:
        done = subprocess.run(
            ["sacct", "-n", "-P", "-j", job, "-o", "JobID,End"], capture_output=True, text=True, check=False
        )
        ends.update(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
        return ends.get(f"{job}.0", "Unknown") not in ("Unknown", "")

    _until(f"job {job}'s step in sacct", accounted, timeout_s=60)
    end = datetime.fromisoformat(ends[f"{job}.0"])
    stop = datetime.combine(end.date(), datetime.strptime(stamp.group(1), "%H:%M:%S").time())
    assert 0 <= (end - stop).total_seconds() <= seconds, (stamp.group(1), end)


def _assert_each_trial_once(
    study: str, reference: dict[str, float], planned: int, storage: str | None = POSTGRES
) -> None:
    """Each planned trial COMPLETE once at its first attempt, scores bitwise the reference's;
    nothing errored, every other trial one that a stop or a kill put back."""
    trials = _trials(study, storage)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    keys = [t.user_attrs["key"] for t in complete]
    assert len(keys) == len(set(keys)) == planned
    for t in complete:
        record = t.user_attrs["record"]
        assert record["score"] == reference[t.user_attrs["key"]] and record["attempt"] == 1
    assert all("record" not in t.user_attrs for t in trials if t.state.name == "FAIL")


def _logs(folder: Path, job: str) -> str:
    """A job's log: its lines (trials started and ended, a stop) and Slurm's, on its stderr."""
    return "".join(p.read_text() for p in (folder / "jobs" / job).glob("*_log.err"))


@pytest.fixture
def own_role() -> Iterator[tuple[str, str]]:
    """A login role of this test's own with a random 32-character password (stored as SCRAM) and
    a database it owns: its password-less URL and the password. Dropped afterwards."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    if not POSTGRES:
        _missing("SUITE_TEST_POSTGRES_URL not set: no PostgreSQL for the workers")
    name, password = f"launch_{uuid.uuid4().hex[:12]}", secrets.token_urlsafe(24)
    admin = sqlalchemy.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as sql:  # the statement goes over the connection, not into any argv
        sql.execute(sqlalchemy.text(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'"))
        stored = sql.execute(sqlalchemy.text(f"SELECT rolpassword FROM pg_authid WHERE rolname = '{name}'"))
        assert stored.scalar().startswith("SCRAM-SHA-256$")
        sql.execute(sqlalchemy.text(f"CREATE DATABASE {name} OWNER {name}"))
    url = make_url(POSTGRES)._replace(username=name, password=None, database=name)
    try:
        yield url.render_as_string(hide_password=False), password
    finally:
        with admin.connect() as sql:
            sql.execute(sqlalchemy.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            sql.execute(sqlalchemy.text(f"DROP ROLE IF EXISTS {name}"))
        admin.dispose()


def _visible(ids: list[str]) -> str:
    """What every user of the machine may read of the running jobs: each process's argv, squeue's
    every field, `scontrol show job` in detail, and the batch script Slurm keeps."""
    argv = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # a process that just ended
            continue
    arrays = sorted({i.split("_")[0] for i in ids})
    slurm = [["squeue", "-h", "-r", "-o", "%all"], ["scontrol", "-dd", "show", "job", ",".join(arrays)]]
    slurm += [["scontrol", "write", "batch_script", job, "-"] for job in arrays]
    shown = [subprocess.run(c, capture_output=True, text=True, check=False).stdout for c in slurm]
    return "\n".join(argv + shown)


# First of the tests: under `make slurm-test` (-n 2 --dist load) the first and the third share a test
# process, one after the other, so this one's jobs do not crowd the imports of the time-limit test's
# 1-minute jobs.
@pytest.mark.faults
def test_the_storage_password_reaches_jobs_through_no_file_argv_slurm_view_or_log(
    tiny_task: Path,
    tiny_models: dict,
    reference: dict,
    own_role: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two launches side by side on a role of the test's own: its password in $SUITE_STORAGE (no
    --storage in argv) under a site's SBATCH_EXPORT=NONE, and the docs' password-less URL with a
    0600 PGPASSFILE, sbatch exporting all. The jobs connect and train every trial; the password is
    in no file under either run folder (pickles, scripts, logs), no process's argv, no squeue or
    `scontrol show job` view and no batch script Slurm keeps."""
    import sqlalchemy
    from sqlalchemy.engine import make_url

    _slurm("accounting", monkeypatch)
    bare, password = own_role
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path_factory.mktemp("nowhere") / "pgpass"))
    with pytest.raises(sqlalchemy.exc.OperationalError, match="password"):  # no password, no login
        sqlalchemy.create_engine(bare).connect()
    full = make_url(bare)._replace(password=password).render_as_string(hide_password=False)
    model, root = tiny_models["bert"], tiny_task.parent.parent

    monkeypatch.setenv("SUITE_STORAGE", full)
    monkeypatch.setenv("SBATCH_EXPORT", "NONE")
    assert main(_command(tiny_task, model, "secret-env", "--workers", "1", storage=None, out="a")) == 0
    monkeypatch.delenv("SUITE_STORAGE")
    monkeypatch.delenv("SBATCH_EXPORT")
    pgpass = tmp_path_factory.mktemp("home") / ".pgpass"  # in a home, not the shared run folder
    pgpass.write_text(f"*:*:*:{make_url(bare).username}:{password}\n")
    pgpass.chmod(0o600)  # libpq ignores a password file others may read
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    assert main(_command(tiny_task, model, "secret-file", "--workers", "1", storage=bare, out="b")) == 0

    folders = [next((root / out).glob("tiny/*")) for out in ("a", "b")]
    ids = [job for folder in folders for job in _job_ids(folder)]
    looks: list[tuple[bool, bool]] = []  # (a worker's argv was seen, the password was) per look

    def ended() -> bool:
        view = _visible(ids)
        looks.append(("submitit.core._submit" in view, password in view))
        return not running(ids)

    _until("both launches' jobs to end", ended, timeout_s=300)
    assert any(worker for worker, _ in looks) and not any(leaked for _, leaked in looks)
    for folder in folders:
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert any(p.name.endswith("_submitted.pkl") for p in files)
        assert any(p.name.endswith("_submission.sh") for p in files)
        assert any(p.name.endswith("_log.err") for p in files)
        assert not [p for p in files if password.encode() in p.read_bytes()]
        jobs = [folder / "jobs", *(folder / "jobs").rglob("*")]
        assert not [p for p in jobs if p.stat().st_mode & 0o077]  # the owner's alone
        _assert_clean_logs(folder, _job_ids(folder))
    for study in ("secret-env", "secret-file"):  # the jobs connected and scored every trial
        _assert_each_trial_once(study, reference, planned=2, storage=full)


STATE = r"(?:COMPLETED|state unknown: .+)"  # without accounting, once squeue forgot the job
DIED = (
    r"  1 trial still marked running: its worker died without putting it back \(killed without a stop: "
    r"a node failure, the memory limit or SIGKILL\): "
)


@pytest.mark.faults
def test_a_cancelled_job_puts_its_trial_back_and_a_rerun_with_export_none_waits_and_writes(
    tiny_task: Path, tiny_models: dict, reference: dict, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The only job of a waiting launch, cancelled mid-trial: --wait says what went back and why,
    and to rerun; the job left within 10 s of its stop line. The same command again, 2 jobs under
    --export=NONE: one is frozen (SIGSTOP) past its heartbeat's grace, the other takes its trial
    over, and the frozen one, woken, stops that trial with one line; --wait says whose trial was
    taken over and exits 0."""
    _slurm("accounting", monkeypatch)
    study, root = f"slurm-{uuid.uuid4().hex[:8]}", tiny_task.parent.parent
    command = _command(tiny_task, tiny_models["bert"], study)
    monkeypatch.setenv("SUITE_STALL_AT", "train_step:1")  # the job's trial hangs in its first step
    with _meanwhile(root, _once_running(study)):
        assert main([*command, "--workers", "1", "--wait"]) == 1
    out, err = capsys.readouterr()
    (folder,) = (root / "runs").glob("tiny/*")
    (job,) = _job_ids(folder)
    name = re.escape(trial_name(back := _put_back(study)))
    _assert_stop_logged(folder, job, back)
    _assert_lines(
        err,
        [
            rf"job {job} CANCELLED: stopped by SIGTERM \(a cancel, or Slurm ending the job\): {name} went "
            r"back to the queue after \d+ s \(no attempt spent\)",
            r"0 of 2 planned trials ended; 2 did not:",
            rf"  1 trial put back by a cancel \(SIGTERM\): {name} after \d+ s in job {job}",
            r"  1 trial not started",
            r"rerun the same command to run the 2 trials left \(no attempt was spent\)",
        ],
    )
    assert (
        out.splitlines()[-1] == f"tiny (accuracy x100, dev) -> {folder / 'trials.jsonl'}: no trial has ended"
    )
    _assert_clean_logs(folder, [job])
    _assert_left_within(job, folder, 10)

    monkeypatch.delenv("SUITE_STALL_AT")
    monkeypatch.setenv("SBATCH_EXPORT", "NONE")  # a site's default: the job gets what launch passes
    taken: list[optuna.trial.FrozenTrial] = []
    with _meanwhile(root, lambda ids: taken.append(_taken_over(study))):
        assert main([*command, "--workers", "2", "--wait"]) == 0
    out, err = capsys.readouterr()
    jobs, (trial,) = _job_ids(folder), taken
    (frozen,) = [j for j in jobs if "was taken over" in _logs(folder, j)]
    assert (
        _logs(folder, frozen).count(
            f"\n{trial_name(trial)} was taken over after a missed heartbeat; its result is discarded\n"
        )
        == 1
    )
    ended = {j: _logs(folder, j).count(" ended: ") for j in jobs}  # the woken one may take its copy
    assert sum(ended.values()) == 2
    over = f"; {trial_name(trial)} was taken over after a missed heartbeat (its result is discarded)"
    said = [
        f"job {j} COMPLETED: ended {ended[j]} trial{'s' if ended[j] != 1 else ''}"
        f"{over if j == frozen else ''}; no trial left to take"
        for j in jobs
    ]
    _assert_lines(err, [re.escape(line) for line in said])
    assert "  size setting" in out
    _assert_clean_logs(folder, jobs)
    _assert_each_trial_once(study, reference, planned=2)
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert sorted(r["key"] for r in records) == sorted(reference)
    logs = "".join(_logs(folder, j) for j in jobs)
    for t in _trials(study):  # one line when each trial started and one when it ended, in some job
        if t.state.name == "COMPLETE":
            assert (
                logs.count(f"{trial_name(t)} started\n") == 1 and logs.count(f"{trial_name(t)} ended: ") == 1
            )
    assert logs.count(f"{trial_name(trial)} started\n") == 1 and f"{trial_name(trial)} ended" not in logs


def _taken_over(study: str) -> optuna.trial.FrozenTrial:
    """Freeze (SIGSTOP) the worker of the first trial seen running until another worker has failed
    that trial as stale (its heartbeat's grace, 3 x SUITE_HEARTBEAT_S), then wake it (SIGCONT)."""
    trial = _until_running(study)
    pid = int(trial.system_attrs["worker"].rpartition(":")[2])
    os.kill(pid, signal.SIGSTOP)
    try:
        (now,) = [t for t in _trials(study) if t.number == trial.number]
        assert now.state.name == "RUNNING", "the trial ended before its worker was frozen"
        _until("its trial failed as stale", lambda: _trials(study)[trial.number].state.name == "FAIL")
    finally:
        os.kill(pid, signal.SIGCONT)
    return trial


def _once_running(study: str, *signal_: str) -> Callable[[list[str]], None]:
    """scancel (a signal: `--signal=USR2`, the time limit's) to a launch's jobs once one runs a trial."""

    def cancel(ids: list[str]) -> None:
        _until_running(study)
        subprocess.run(["scancel", *signal_, *ids], check=True)

    return cancel


@pytest.mark.faults
def test_time_limits_lose_no_attempt_wait_ends_without_accounting_and_a_killed_worker_is_requeued(
    tiny_task: Path, tiny_models: dict, reference: dict, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """On the cluster without accounting (sacct fails), one trial (`--seeds 1`): a real 1-minute
    limit, then the limit's signal twice at 5 minutes (sent as a trial runs: once is put back, twice
    is the cap), a rerun warned, and a worker SIGKILLed: each ending as --wait says it."""
    _slurm("none", monkeypatch)
    study, root = f"slurm-{uuid.uuid4().hex[:8]}", tiny_task.parent.parent
    command = [*_command(tiny_task, tiny_models["bert"], study), "--seeds", "1"]
    monkeypatch.setenv("SUITE_STALL_AT", "train_step:1")
    # A real 1-minute limit: its signal (15 s ahead, or up to a minute early) stops the job, with or
    # without a trial taken yet, and --wait ends.
    assert main([*command, "--workers", "1", "--slurm-time", "1", "--wait"]) == 1
    (folder,) = (root / "runs").glob("tiny/*")
    (job,) = _job_ids(folder)
    err = capsys.readouterr().err
    if f"job {job} " in err and "with no trial running" in err:
        first = [rf"job {job} {STATE}: stopped by the time limit's signal \(SIGUSR2\) with no trial running"]
        first += ["0 of 1 planned trials ended; 1 did not:", "  1 trial not started"]
        _assert_lines(
            err, [*first, r"rerun the same command to run the 1 trial left \(no attempt was spent\)"]
        )
    else:
        _assert_time_limited(err, folder, job, study)
    _assert_clean_logs(folder, [job])

    # The limit's signal at 5 minutes: the trial goes back; again: the cap (not taken again).
    with _meanwhile(root, _once_running(study, "--signal=USR2")):
        assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 1
    (job,) = _job_ids(folder)
    _assert_time_limited(capsys.readouterr().err, folder, job, study)
    with _meanwhile(root, _once_running(study, "--signal=USR2")):
        assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 1
    out, err = capsys.readouterr()
    (job,) = _job_ids(folder)
    name = re.escape(trial_name(back := _put_back(study)))
    _assert_stop_logged(folder, job, back)
    _assert_lines(
        err,
        [
            rf"job {job} {STATE}: time limit shorter than a trial: {name} ran \d+, \d+ s before 2 time "
            r"limits of 5 min and is not taken again by this launch; rerun with a longer --slurm-time",
            r"0 of 1 planned trials ended; 1 did not:",
            rf"  1 trial put back by a time limit shorter than a trial: {name}, stopped after \d+, \d+ s "
            r"by 2 limits of 5 min",
            r"rerun with a --slurm-time longer than 5 min to run the 1 trial left \(no attempt was spent\)",
        ],
    )
    assert (
        out.splitlines()[-1] == f"tiny (accuracy x100, dev) -> {folder / 'trials.jsonl'}: no trial has ended"
    )
    _assert_clean_logs(folder, [job])
    assert main([*command, "--workers", "1", "--slurm-time", "5"]) == 0  # warned at once
    assert "warning: --slurm-time 5 min: a 5 min limit stopped trial size=32|...|" in capsys.readouterr().err
    subprocess.run(["scancel", job := _job_ids(folder)[-1]], check=True)
    _until_ended(job)

    # A worker SIGKILLed mid-trial (FAILED, or unknown once squeue forgot it): --wait says so; the
    # next job re-queues its trial after 3 missed heartbeats and trains it once.
    monkeypatch.delenv("SUITE_STALL_AT")
    monkeypatch.setenv("SUITE_KILL_AT", "evaluation:1")
    assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 1
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("job ")]
    assert " FAILED: " in line or "state unknown: Slurm accounting storage is disabled" in line
    (running_,) = [t for t in _trials(study) if t.state.name == "RUNNING"]
    _assert_lines(
        err,
        [
            re.escape(line),
            r"0 of 1 planned trials ended; 1 did not:",
            DIED + re.escape(trial_name(running_)),
            r"rerun the same command to run the 1 trial left \(no attempt was spent\)",
        ],
    )
    monkeypatch.delenv("SUITE_KILL_AT")
    assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 0
    _assert_each_trial_once(study, reference, planned=1)


def _assert_time_limited(err: str, folder: Path, job: str, study: str) -> None:
    """--wait's ending after the time limit's signal put the study's one trial back."""
    name = re.escape(trial_name(_put_back(study)))
    _assert_stop_logged(folder, job, _put_back(study))
    _assert_lines(
        err,
        [
            rf"job {job} {STATE}: stopped by the time limit's signal \(SIGUSR2\): {name} went back to the "
            r"queue after \d+ s \(no attempt spent\)",
            r"0 of 1 planned trials ended; 1 did not:",
            rf"  1 trial put back by the time limit's signal: {name} after \d+ s in job {job}",
            r"rerun the same command to run the 1 trial left \(no attempt was spent\); a trial that time "
            r"limits stop twice needs a longer --slurm-time",
        ],
    )
