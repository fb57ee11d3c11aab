"""A study's ended records read from the RDB tables in one query are exactly those Optuna's
`get_trials` gives, on SQLite and PostgreSQL; any other storage, or a query that fails, is read
through Optuna."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from suite.study import plan, stored_records
from suite.study.stored_records import rdb_records

POSTGRES = os.environ.get("SUITE_TEST_POSTGRES_URL")


def _fill(study: optuna.Study) -> list[dict]:
    """Trials of every state, with and without a record; returns the records an export keeps."""
    kept = []
    for number in range(3):
        record = {
            "key": f"run-{number}",
            "outcome": "succeeded",
            "score": 0.5 + number / 10,
            "x": [1, {"y": None}],
        }
        study.add_trial(
            create_trial(state=TrialState.COMPLETE, value=record["score"], user_attrs={"record": record})
        )
        kept.append(record)
    pruned = {"key": "pruned", "outcome": "pruned", "score": None}
    errored = {"key": "errored", "outcome": "errored", "reason": "error: CUDA out of memory"}
    killed = {"key": "killed", "outcome": "succeeded", "score": 0.9}  # written before a kill: not trusted
    study.add_trial(create_trial(state=TrialState.PRUNED, user_attrs={"record": pruned}))
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={"record": errored}))
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={"record": killed}))
    study.add_trial(create_trial(state=TrialState.FAIL, user_attrs={"key": "no record"}))
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.2, user_attrs={"record": None}))
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.1, user_attrs={"key": "no record"}))
    study.enqueue_trial({}, user_attrs={"key": "queued"})
    running = study.ask()  # the queued trial, now running, its record already written
    running.set_user_attr("record", {"key": "queued", "outcome": "succeeded", "score": 0.3})
    late = {"key": "late", "outcome": "failed", "score": 0.5, "failed": True}
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=0.5, user_attrs={"record": late}))
    return [*kept, pruned, errored, late]


def _url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'study.db'}"
    if not POSTGRES:
        pytest.skip("SUITE_TEST_POSTGRES_URL not set (.ci/run starts a server and sets it)")
    return POSTGRES


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_query_reads_what_optuna_reads(backend: str, tmp_path: Path) -> None:
    url = _url(backend, tmp_path)
    name = f"records-{uuid.uuid4().hex[:8]}"
    study = optuna.create_study(study_name=name, storage=url)
    expected = _fill(study)
    other = optuna.create_study(study_name=f"{name}-other", storage=url)  # same tables, not read
    _fill(other)
    loaded = optuna.load_study(study_name=name, storage=plan.open_storage(url))
    through_optuna = [r for t in loaded.get_trials(deepcopy=False) if (r := plan._record(t)) is not None]
    assert rdb_records(loaded) == through_optuna == expected
    assert plan.study_records(loaded) == expected


def test_a_journal_storage_or_a_failed_query_is_read_through_optuna(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = plan.open_storage(f"journal:{tmp_path / 'journal.log'}")
    study = optuna.create_study(study_name="journal", storage=storage)
    expected = _fill(study)
    assert rdb_records(study) is None and plan.study_records(study) == expected

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="rdb", storage=plan.open_storage(url))
    expected = _fill(study)
    monkeypatch.setattr(
        stored_records, "_QUERY", stored_records.sqlalchemy.text("SELECT no_such FROM trials")
    )
    assert rdb_records(study) is None and plan.study_records(study) == expected
