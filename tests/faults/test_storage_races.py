"""Runs that start one new study at the same moment: Optuna's creation of its tables is not safe
against a concurrent one, so a storage is only read (never set up) outside the study's lock. Each
process below does what `run` does on its way in (setup reads which studies the storage holds;
planning opens the storage and creates the study under the lock), all released at once by a
barrier of files."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from suite.study.storage import held_studies

pytestmark = pytest.mark.faults

STARTER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import optuna
    from suite.study.lock import study_lock
    from suite.study.storage import open_storage, stored_study

    url, name, barrier, me, count, role = sys.argv[1:]
    Path(barrier, me).touch()
    deadline = time.monotonic() + 120  # a bound, not a pace: everyone is normally there at once
    while len(list(Path(barrier).iterdir())) < int(count) and time.monotonic() < deadline:
        time.sleep(0.005)
    if role == "create" and stored_study(url, name) is None:  # setup: read only
        with study_lock(url, name):  # planning: opened and created under the lock
            optuna.create_study(storage=open_storage(url), study_name=name, load_if_exists=True)
    while stored_study(url, name) is None:  # a run reading the storage while others create it
        assert time.monotonic() < deadline + 120, "the study never appeared"
    """
)
ROLES = ["create", "watch", "create", "watch", "watch"]


def _start_together(url: str, name: str, barrier: Path) -> None:
    barrier.mkdir()
    count = str(len(ROLES))
    started = [
        subprocess.Popen(
            [sys.executable, "-c", STARTER, url, name, str(barrier), str(i), count, role],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, role in enumerate(ROLES)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in started]
    for p, out in zip(started, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]


def test_runs_starting_a_new_study_on_a_fresh_sqlite_file_all_succeed(tmp_path: Path) -> None:
    for attempt in range(3):  # the race is narrow: several fresh files
        url = f"sqlite:///{tmp_path / f'study{attempt}.db'}"
        _start_together(url, "together", tmp_path / f"barrier{attempt}")
        assert held_studies(url) == ["together"]


def test_reading_which_studies_a_sqlite_file_holds_writes_nothing(tmp_path: Path) -> None:
    """A file another run is setting up right now (here: one table of its own, no Optuna tables)
    holds no study, and is left exactly as it is."""
    path = tmp_path / "study.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE other (x INTEGER)")
    before = path.read_bytes()
    assert held_studies(f"sqlite:///{path}") == []
    assert path.read_bytes() == before


def test_runs_starting_a_new_study_on_a_fresh_postgresql_database_all_succeed(tmp_path: Path) -> None:
    url = os.environ.get("SUITE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    import sqlalchemy
    from sqlalchemy.engine import make_url

    database = f"suite_race_{uuid.uuid4().hex[:8]}"
    admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f"CREATE DATABASE {database}"))
    except sqlalchemy.exc.DBAPIError as err:
        pytest.skip(f"cannot create a fresh database ({str(err).splitlines()[0]})")
    fresh = make_url(url).set(database=database).render_as_string(hide_password=False)
    try:
        _start_together(fresh, "together", tmp_path / "barrier")
        assert held_studies(fresh) == ["together"]
    finally:
        from suite.study.storage import server_engine

        server_engine(fresh).dispose()
        with admin.connect() as connection:
            connection.execute(sqlalchemy.text(f"DROP DATABASE {database} WITH (FORCE)"))
        admin.dispose()


def test_a_run_told_after_another_worker_failed_it_as_stale_is_kept_and_not_trained_again(
    tiny_task: Path, tmp_path: Path
) -> None:
    """A worker whose heartbeat was late finishes a trial that another worker meanwhile failed as
    stale and queued again: its record is kept (on the queued copy), and nothing waits to train it."""
    import optuna
    from optuna.storages import RetryHeartbeatStaleTrialCallback
    from optuna.trial import TrialState

    from suite.config.sweep import SeedSpec, SweepSpec
    from suite.config.task import load_task
    from suite.study.plan import enqueue_plan
    from suite.study.queue import pop_planned, queue_lock
    from suite.study.storage import open_storage, open_study
    from suite.study.work import _tell

    sweep = SweepSpec(name="s", hparams={"lr": 1e-3, "batch_size": 8, "epochs": 1}, seeds=SeedSpec(repeats=1))
    study = open_study(open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}"), "s", sweep, True)
    enqueue_plan(study, load_task(tiny_task), sweep)
    trial = pop_planned(study)
    assert trial is not None
    # What another worker's fail_dead_trials does to a trial whose heartbeat went stale:
    study._storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
    RetryHeartbeatStaleTrialCallback(max_retry=3)(study, study._storage.get_trial(trial._trial_id))
    record = {"outcome": "succeeded", "score": 0.75, "key": trial.user_attrs["key"]}
    with queue_lock(study):
        _tell(study, trial, record, baseline=0.5)
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.COMPLETE]  # no copy left queued
    assert trials[1].user_attrs["record"] == record and trials[1].value == 0.75
    assert trials[1].user_attrs["key"] == trial.user_attrs["key"]
    assert optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'db.sqlite'}").best_value == 0.75


def test_a_journal_trial_whose_worker_died_on_this_machine_is_queued_again(
    tiny_task: Path, tmp_path: Path
) -> None:
    """A journal file keeps no heartbeats: the trial of a worker killed with SIGKILL would stay
    running for ever. A trial whose recorded worker ran here and is gone is failed and queued
    again (same key, same attempt); a live worker's trial is left running."""
    import socket

    from optuna.trial import TrialState

    from suite.config.sweep import SeedSpec, SweepSpec
    from suite.config.task import load_task
    from suite.study.plan import enqueue_plan
    from suite.study.queue import fail_dead_trials, pop_planned
    from suite.study.storage import open_storage, open_study
    from suite.study.supervise import WORKER_ATTR

    sweep = SweepSpec(name="s", hparams={"lr": 1e-3, "batch_size": 8, "epochs": 1}, seeds=SeedSpec(repeats=2))
    study = open_study(open_storage(f"journal:{tmp_path / 'study.log'}"), "s", sweep, True)
    enqueue_plan(study, load_task(tiny_task), sweep)
    dead, live = pop_planned(study), pop_planned(study)
    assert dead is not None and live is not None
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    host = socket.gethostname()
    study._storage.set_trial_system_attr(dead._trial_id, WORKER_ATTR, f"{host}:{ended.stdout.strip()}")
    study._storage.set_trial_system_attr(live._trial_id, WORKER_ATTR, f"{host}:{os.getpid()}")
    fail_dead_trials(study)
    states = {t.number: t.state for t in study.get_trials()}
    assert states[dead.number] == TrialState.FAIL and states[live.number] == TrialState.RUNNING
    (queued,) = study.get_trials(states=(TrialState.WAITING,))
    assert queued.user_attrs["key"] == dead.user_attrs["key"] and queued.user_attrs["attempt"] == 1


def test_one_sqlite_file_has_one_lock_however_its_url_spells_it(tmp_path: Path) -> None:
    import fcntl

    from suite.study.lock import study_lock

    (tmp_path / "sub").mkdir()
    with study_lock(f"sqlite:///{tmp_path / 'sub' / '..' / 'study.db'}?timeout=10", "s"):
        with open(tmp_path / "study.db.lock", "a") as other:  # what the plain URL's lock takes
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.db.lock", "sub"]


def test_a_storage_path_that_cannot_be_written_is_one_line_naming_storage(tmp_path: Path) -> None:
    from suite.errors import SuiteError
    from suite.study.lock import study_lock
    from suite.study.storage import open_storage

    with pytest.raises(SuiteError, match="--storage 'journal:.*missing.*': cannot open"):
        open_storage(f"journal:{tmp_path / 'missing' / 'x.log'}")
    (tmp_path / "file").write_text("")  # a file where a folder should be: no lock file fits here
    with pytest.raises(SuiteError, match="--storage 'sqlite:.*': cannot write its lock file"):
        with study_lock(f"sqlite:///{tmp_path / 'file' / 'study.db'}", "s"):
            pass
