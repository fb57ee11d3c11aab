"""The storage fails as a finished trial is told: a SQLite file that cannot grow (SQLite's own
SQLITE_FULL, through `max_page_count`: suite/faults.py) or a PostgreSQL server that ends every
connection. `run` says so in one line and exits 1, the record is kept in a side file, and the
rerun, the storage healthy again, tells it to the study: nothing that ended is trained again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import optuna
import pytest

pytestmark = pytest.mark.faults


def _run(task: Path, model: Path, trace: Path, *extra: str, **env: str) -> subprocess.CompletedProcess:
    root = task.parent.parent
    command = [
        sys.executable, "-m", "suite", "run", str(task), "--model", str(model), "--out", str(root / "runs"),
        "--data-dir", str(root / "data"), "--quiet", "--threads", "1", *extra,
    ]  # fmt: skip
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("SUITE_KILL", "SUITE_STALL"))}
    environment = {**inherited, "SUITE_HEARTBEAT_S": "5", "SUITE_TRACE": str(trace), **env}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=900)


def _trained(trace: Path) -> Counter:
    """Key -> how many times a trial of it started training (the fault hooks' trace)."""
    return Counter(line.split()[2] for line in trace.read_text().splitlines() if line.startswith("trial "))


def _fails_then_resumes(task: Path, model: Path, tmp_path: Path, cause: str, *storage: str) -> tuple:
    """Run with the storage failing at the second tell, then rerun it healthy; returns the failed
    run's stderr and the study."""
    trace = tmp_path / "trace"
    failed = _run(task, model, trace, *storage, SUITE_STORAGE_FAIL_AT="tell:2")
    line = failed.stderr.strip()
    assert failed.returncode == 1 and "\n" not in line, failed.stderr[-3000:]
    assert line.startswith("error: storage ") and f"cannot write ({cause}" in line, line
    kept = Path(line.split("its record is kept in ")[1].split(" and told")[0])
    assert kept.is_file() and json.loads(kept.read_text())["record"]["outcome"]
    assert sum(_trained(trace).values()) == 2  # the second trial trained, then was not told

    rerun = _run(task, model, trace, *storage)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    trained = _trained(trace)
    assert len(trained) == 3 and max(trained.values()) == 1  # the kept trial was not trained again
    assert not kept.exists()
    url, name = (
        (storage[1], storage[3]) if storage else (f"sqlite:///{kept.parent.parent / 'study.db'}", None)
    )
    study = optuna.load_study(study_name=name, storage=url)
    ended = Counter(t.user_attrs["key"] for t in study.get_trials() if t.state.name == "COMPLETE")
    assert len(ended) == 3 and max(ended.values()) == 1
    return line, kept


def test_a_full_sqlite_file_as_a_trial_is_told_keeps_its_record_for_the_rerun(
    tiny_task: Path, tiny_models, tmp_path: Path
) -> None:  # noqa: ANN001
    line, kept = _fails_then_resumes(tiny_task, tiny_models["bert"], tmp_path, "database or disk is full")
    assert "free space and rerun the same command" in line
    assert kept.parent.name == "study.db.pending"  # beside the storage: any rerun of it reads it


def test_a_postgresql_connection_lost_as_a_trial_is_told_keeps_its_record_for_the_rerun(
    tiny_task: Path, tiny_models, tmp_path: Path
) -> None:  # noqa: ANN001
    url = os.environ.get("SUITE_TEST_POSTGRES_URL")
    if not url:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    storage = ("--storage", url, "--study", f"lost-{uuid.uuid4().hex[:8]}")
    line, kept = _fails_then_resumes(
        tiny_task, tiny_models["bert"], tmp_path, "terminating connection", *storage
    )
    assert "rerun the same command" in line and "suite:***@" in line  # no password in the line
    assert kept.parent == next((tiny_task.parent.parent / "runs").glob("*/*")) / "pending"


def test_a_heartbeat_the_storage_cannot_take_is_skipped_without_a_traceback(tmp_path: Path) -> None:
    """A heartbeat write the storage refuses (here SQLite's own SQLITE_READONLY: an in-place update
    of a beat fits a file that cannot grow, while a full disk also refuses its journal) skips the
    beat: Optuna's own heartbeat raises, which ends its thread with a traceback while the trial
    trains on."""
    from sqlalchemy import event

    from suite.study.storage import open_storage

    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    trial = optuna.create_study(storage=storage).ask()
    storage.record_heartbeat(trial._trial_id)
    event.listen(
        storage.engine, "checkout", lambda connection, *_: connection.execute("PRAGMA query_only = 1")
    )
    storage.engine.dispose()  # pooled connections come back through the listener
    time.sleep(1.1)  # a beat in the same second as the last writes nothing (SQLite's now() is in seconds)
    with pytest.raises(optuna.exceptions.StorageInternalError) as raised:  # Optuna's own beat
        optuna.storages.RDBStorage.record_heartbeat(storage, trial._trial_id)
    assert "readonly" in str(raised.value.__cause__)
    storage.record_heartbeat(trial._trial_id)  # the suite's: skipped


def test_a_hot_journal_left_by_a_killed_writer_is_rolled_back_not_refused(tmp_path: Path) -> None:
    """A writer killed mid-transaction leaves a hot journal beside the SQLite file; reading which
    studies it holds (what every command does first) rolls it back, as a read-write open does,
    instead of refusing the storage with "attempt to write a readonly database"."""
    from suite.study.storage import held_studies

    db = tmp_path / "study.db"
    writer = f"""
import os, sqlite3
c = sqlite3.connect({str(db)!r}, isolation_level=None)
c.execute("CREATE TABLE studies (study_name TEXT)")
c.execute("INSERT INTO studies VALUES ('kept')")
c.execute("PRAGMA cache_size = 1")  # pages spill into the file before the commit
c.execute("BEGIN")
c.executemany("INSERT INTO studies VALUES (?)", [(str(i) * 200,) for i in range(2000)])
os.kill(os.getpid(), 9)
"""
    subprocess.run([sys.executable, "-c", writer], check=False)
    journal = tmp_path / "study.db-journal"
    assert journal.is_file() and journal.stat().st_size > 0  # hot: the killed writer's
    assert held_studies(f"sqlite:///{db}") == ["kept"]  # the uncommitted rows rolled back
    assert not journal.exists() or journal.stat().st_size == 0
