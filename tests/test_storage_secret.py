"""The storage's password stays out of a launch's files and arguments: jobs get the URL without
it and the password in their environment (sbatch's export names it); `worker` and `launch` read
their storage from $SUITE_STORAGE. Without a cluster: a fake sbatch records what it was given."""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from suite.commands.cli import build_parser, main, request_of
from suite.config.request import Request
from suite.study import slurm
from suite.study.slurm_job import with_password
from suite.study.storage import split_password


@pytest.mark.parametrize(
    "url, bare, password",
    [
        ("postgresql://u:p%40ss%2Fw@db:5432/s?sslmode=require", "postgresql://u@db:5432/s?sslmode=require",
         "p@ss/w"),
        ("postgresql+psycopg://u:pw@db/s", "postgresql+psycopg://u@db/s", "pw"),
        ("mysql+pymysql://u:pw@db/s", "mysql+pymysql://u@db/s", "pw"),
        ("postgresql://u@db/s", "postgresql://u@db/s", None),  # ~/.pgpass or PGPASSFILE holds it
        ("sqlite:////runs/u:pw@x/study.db", "sqlite:////runs/u:pw@x/study.db", None),  # a file: no password
        ("journal:/runs/study.log", "journal:/runs/study.log", None),
    ],
)  # fmt: skip
def test_a_url_splits_into_the_url_a_job_carries_and_its_password(
    url: str, bare: str, password: str | None
) -> None:
    assert split_password(url) == (bare, password)


def test_the_password_goes_by_the_variable_its_driver_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    assert slurm.job_password("postgresql://u:pw@db/s") == ("postgresql://u@db/s", {"PGPASSWORD": "pw"})
    assert slurm.job_password("postgresql://u@db/s") == ("postgresql://u@db/s", {})
    monkeypatch.setenv("PGPASSWORD", "from-env")  # a password-less URL, the launcher's PGPASSWORD
    assert slurm.job_password("postgresql://u@db/s")[1] == {"PGPASSWORD": "from-env"}
    assert slurm.job_password("mysql://u:pw@db/s") == ("mysql://u@db/s", {"SUITE_STORAGE_PASSWORD": "pw"})
    assert slurm.job_password("sqlite:///x.db") == ("sqlite:///x.db", {})


@pytest.mark.parametrize(
    "given, export",
    [(None, "ALL"), ("ALL", "ALL"), ("all,X=1", "all,X=1"), ("NONE", "PGPASSWORD"),
     ("HOME,PATH", "HOME,PATH,PGPASSWORD")],
)  # fmt: skip
def test_sbatch_exports_the_password_by_name_whatever_the_site_exports(
    given: str | None, export: str
) -> None:
    assert slurm.exported(["PGPASSWORD"], given) == export


def test_a_mysql_job_puts_its_password_back_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_STORAGE_PASSWORD", "p@ss")
    assert with_password(Request(storage="mysql://u@db/s")).storage == "mysql://u:p%40ss@db/s"
    assert with_password(Request(storage="postgresql://u@db/s")).storage == "postgresql://u@db/s"


def test_the_sbatch_script_sets_no_password_nor_a_url_holding_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUITE_STORAGE", "postgresql://u:hunter2hunter2@db/s")
    monkeypatch.setenv("SUITE_STORAGE_PASSWORD", "hunter2hunter2")
    monkeypatch.setenv("PGPASSWORD", "hunter2hunter2")
    monkeypatch.setenv("PGPASSFILE", "/home/u/.pgpass")
    monkeypatch.setenv("SUITE_HEARTBEAT_S", "5")
    setup = "\n".join(slurm.job_setup("/code"))
    assert "hunter2" not in setup
    assert "export PGPASSFILE=/home/u/.pgpass" in setup and "export SUITE_HEARTBEAT_S=5" in setup


def test_worker_and_launch_read_their_storage_from_suite_storage(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.delenv("SUITE_STORAGE", raising=False)
    assert main(["worker", "--study", "s"]) == 2
    err = capsys.readouterr().err
    assert err == "error: worker: give the study's storage, --storage URL or $SUITE_STORAGE\n"
    monkeypatch.setenv("SUITE_STORAGE", "postgresql://u@db/s")
    parse = build_parser().parse_args
    assert request_of(parse(["worker", "--study", "s"])).storage == "postgresql://u@db/s"
    assert request_of(parse(["launch", "t", "--workers", "1"])).storage == "postgresql://u@db/s"
    given = request_of(parse(["worker", "--study", "s", "--storage", "sqlite:///x.db"]))
    assert given.storage == "sqlite:///x.db"
    assert request_of(parse(["run", "t"])).storage is None  # `run` keeps its own SQLite file


def _private(path: Path) -> bool:
    return not path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)


def test_a_slurm_submission_hands_the_password_over_by_the_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real submitit path to a fake sbatch, under a site's SBATCH_EXPORT=NONE: sbatch's own
    environment has the password, named by SBATCH_EXPORT; no file under the run folder holds it,
    and every one there is its owner's alone."""
    from submitit.core.utils import DelayedSubmission

    from suite.commands.launch import submit

    password = secrets.token_urlsafe(18)
    url = f"postgresql://someone:{password}@db.example/suite"
    seen = tmp_path / "sbatch-saw"  # outside the run folder
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for tool, body in {
        "srun": "exit 0",
        "sbatch": f'{{ umask; echo "PGPASSWORD=$PGPASSWORD"; echo "SBATCH_EXPORT=$SBATCH_EXPORT"; }} >{seen}'
        '\necho "Submitted batch job 4242"',
    }.items():
        (bin_ / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SBATCH_EXPORT", "NONE")
    monkeypatch.setenv("SUITE_STORAGE", url)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    folder = tmp_path / "runs" / "tiny" / "m"
    folder.mkdir(parents=True)
    request = SimpleNamespace(data_dir=None, offline=True, allow_stack_change=False)
    s = SimpleNamespace(folder=folder, url=url, name="study", request=request)
    jobs = submit(s, "slurm", {"timeout_min": 10, "name": "suite-tiny"}, cpus=1, count=2)

    assert [str(j.job_id) for j in jobs] == ["4242_0", "4242_1"]
    assert seen.read_text().split() == ["0077", f"PGPASSWORD={password}", "SBATCH_EXPORT=PGPASSWORD"]
    assert os.environ["SBATCH_EXPORT"] == "NONE" and "PGPASSWORD" not in os.environ  # restored
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name.endswith("_submitted.pkl") for p in files) and any(p.suffix == ".sh" for p in files)
    assert not [p for p in files if password.encode() in p.read_bytes()]
    assert oct(stat.S_IMODE((folder / "jobs").stat().st_mode)) == "0o700"
    assert all(_private(p) for p in (folder / "jobs").rglob("*"))
    (pickled, *_) = folder.glob("jobs/4242_*/*_submitted.pkl")
    assert DelayedSubmission.load(pickled).args[0].storage == "postgresql://someone@db.example/suite"
