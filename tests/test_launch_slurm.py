"""`suite launch` against a real single-node Slurm (.ci/slurm.sh: real sbatch, squeue, sacct and
scancel; one cluster with accounting, one without) and PostgreSQL: a cancel mid-trial, a rerun that
writes the outputs, `--wait` with and without accounting, `--export=NONE`, a time limit shorter
than a trial, a hard-killed worker, and a database password that no file, argv or Slurm view may
show. Every case ends with each planned trial COMPLETE once, its score bitwise equal to a
one-worker `suite run` of the same plan on this machine.

Without Slurm or PostgreSQL these tests skip with the reason; under CI=true they fail."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from suite.commands.cli import main
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
    path = root / "sweeps" / "one.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text("name: one\nhparams: {batch_size: 8, epochs: 1, lr: 3.0e-4}\nseeds: {repeats: 2}\n")
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


def _trials(study: str, storage: str | None = POSTGRES) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=storage).get_trials()


def _until(what: str, ready: Callable[[], bool], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.5)


def _until_ended(job: str) -> None:
    _until(f"job {job}'s end", lambda: not running([job]))


def _job_ids(folder: Path) -> list[str]:
    return json.loads((folder / "launch.json").read_text())["launches"][-1]["jobs"]


def _stalled_job(command: list[str], study: str, capsys: pytest.CaptureFixture) -> str:
    """One worker job launched without waiting, once its trial is held mid-training."""
    assert main([*command, "--workers", "1"]) == 0
    assert "submitted 1 worker job (slurm): " in capsys.readouterr().out
    _until("a running trial", lambda: any(t.state.name == "RUNNING" for t in _trials(study)))
    (folder,) = (Path(command[command.index("--out") + 1])).glob("tiny/*")
    return _job_ids(folder)[0]


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


def _logs(folder: Path, job: str, suffix: str) -> str:
    return "".join(p.read_text() for p in (folder / "jobs" / job).glob(f"*_log.{suffix}"))


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
        assert "Traceback" not in "".join(_logs(folder, job, "err") for job in _job_ids(folder))
    for study in ("secret-env", "secret-file"):  # the jobs connected and scored every trial
        _assert_each_trial_once(study, reference, planned=2, storage=full)


@pytest.mark.faults
def test_a_cancelled_job_puts_its_trial_back_and_a_rerun_with_export_none_waits_and_writes(
    tiny_task: Path, tiny_models: dict, reference: dict, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    _slurm("accounting", monkeypatch)
    study = f"slurm-{uuid.uuid4().hex[:8]}"
    command = _command(tiny_task, tiny_models["bert"], study)
    monkeypatch.setenv("SUITE_STALL_AT", "train_step:1")  # the job's trial hangs in its first step
    job = _stalled_job(command, study, capsys)
    subprocess.run(["scancel", job], check=True)
    _until_ended(job)
    (folder,) = (tiny_task.parent.parent / "runs").glob("tiny/*")
    assert "Traceback" not in _logs(folder, job, "err")
    assert "stopped by SIGTERM (scancel, the time limit or a stop): trial " in _logs(folder, job, "err")
    assert "(no attempt spent)" in _logs(folder, job, "err")

    monkeypatch.delenv("SUITE_STALL_AT")
    monkeypatch.setenv("SBATCH_EXPORT", "NONE")  # a site's default: the job gets what launch passes
    assert main([*command, "--workers", "2", "--wait"]) == 0
    err = capsys.readouterr().err
    jobs = _job_ids(folder)
    assert [line.split(":")[0] for line in err.splitlines() if line.startswith("job ")] == [
        f"job {j} COMPLETED" for j in jobs
    ]
    _assert_each_trial_once(study, reference, planned=2)
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert sorted(r["key"] for r in records) == sorted(reference)
    logs = "".join(_logs(folder, j, "out") for j in jobs)
    for key in reference:  # one line when each trial started and one when it ended, in some job
        assert logs.count(f"trial {key} started") == 1 and logs.count(f"trial {key} ended: ") == 1


@pytest.mark.faults
def test_time_limits_lose_no_attempt_wait_ends_without_accounting_and_a_killed_worker_is_requeued(
    tiny_task: Path, tiny_models: dict, reference: dict, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """On the cluster without accounting (sacct fails), one trial (`--seeds 1`)."""
    _slurm("none", monkeypatch)
    study = f"slurm-{uuid.uuid4().hex[:8]}"
    command = [*_command(tiny_task, tiny_models["bert"], study), "--seeds", "1"]
    monkeypatch.setenv("SUITE_STALL_AT", "train_step:1")
    # A real 1-minute limit: its signal (15 s ahead) stops the job, whenever it comes, and --wait ends.
    assert main([*command, "--workers", "1", "--slurm-time", "1", "--wait"]) == 1
    (folder,) = (tiny_task.parent.parent / "runs").glob("tiny/*")
    (job,) = _job_ids(folder)
    err = capsys.readouterr().err
    assert f"job {job} " in err and "Traceback" not in _logs(folder, job, "err")
    assert "stopped by the time limit's signal" in _logs(folder, job, "err")
    assert not any(t.state.name == "COMPLETE" for t in _trials(study))

    # The same signal again, and again, until the trial went back twice: not taken again, one line.
    stops = optuna.load_study(study_name=study, storage=POSTGRES).user_attrs.get("time_limited", {})
    for _ in range(2 - sum(len(v) for v in stops.values())):
        job = _stalled_job([*command, "--slurm-time", "1"], study, capsys)
        subprocess.run(["scancel", "--signal=USR2", job], check=True)
        _until_ended(job)
    assert "time limit shorter than a trial: trial " in _logs(folder, job, "err")
    assert main([*command, "--workers", "1", "--slurm-time", "1"]) == 0  # warned at once
    assert "warning: --slurm-time 1 min: a 1 min limit stopped trial " in capsys.readouterr().err
    subprocess.run(["scancel", job := _job_ids(folder)[-1]], check=True)
    _until_ended(job)

    # A worker SIGKILLed mid-trial (FAILED, or unknown once squeue forgot it): the next job
    # re-queues its trial after 3 missed heartbeats and trains it once.
    monkeypatch.delenv("SUITE_STALL_AT")
    monkeypatch.setenv("SUITE_KILL_AT", "evaluation:1")
    assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 1
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("job ")]
    assert " FAILED: " in line or "state unknown: Slurm accounting storage is disabled" in line
    monkeypatch.delenv("SUITE_KILL_AT")
    assert main([*command, "--workers", "1", "--slurm-time", "5", "--wait"]) == 0
    _assert_each_trial_once(study, reference, planned=1)
