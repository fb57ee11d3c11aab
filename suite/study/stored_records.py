"""The ended trials' records of a study, read from an RDB storage's tables in one query.

Why by hand: a trial's record is one user attribute (`record`), and Optuna's `get_trials` builds
every trial whole, some 20 ORM objects each (params, values, every attribute): 10 s of `export`
at 10,000 trials and 132 s at 100,000, its session's bookkeeping growing faster than the
trials. The query reads Optuna's tables `trials` and `trial_user_attributes` (their columns
unchanged since Optuna 2); on another storage (a journal file), or where the query fails, the
caller reads `get_trials` (`suite.study.plan.study_records`).
"""

from __future__ import annotations

import json
from typing import Any

import optuna
import sqlalchemy

from suite.study.records import collector_paused, outcome

# A trial's state is stored by name; an ended trial is COMPLETE, PRUNED or FAIL.
_QUERY = sqlalchemy.text(
    "SELECT t.state, a.value_json FROM trials t JOIN trial_user_attributes a"
    " ON a.trial_id = t.trial_id AND a.key = 'record'"
    " WHERE t.study_id = :study AND t.state IN ('COMPLETE', 'PRUNED', 'FAIL') ORDER BY t.number"
)


def rdb_records(study: optuna.Study) -> list[dict[str, Any]] | None:
    """Every ended trial's record in trial order (`ended_record`), or None where the storage is
    not an RDB one or the query fails."""
    storage = study._storage  # a study's storage is the RDB storage in Optuna's read cache
    backend = getattr(storage, "_backend", storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        return None
    try:
        with backend.engine.connect() as connection:
            rows = connection.execute(_QUERY, {"study": study._study_id}).all()
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    with collector_paused():
        records = [(_state(state), json.loads(value)) for state, value in rows]
    return [r for state, stored in records if (r := ended_record(state, stored)) is not None]


def ended_record(state: str, record: Any) -> dict[str, Any] | None:
    """A trial's record if the trial ended, by its state's name: a run or pruned trial is COMPLETE
    or PRUNED; an errored one is FAIL with its record. A FAIL without an errored record is a
    worker killed mid-trial (its record, if any, was written before the kill and is not trusted);
    a trial with no record (or a null one) has not ended."""
    if record is None:
        return None
    if state in ("COMPLETE", "PRUNED"):
        return record
    return record if state == "FAIL" and outcome(record) == "errored" else None


def _state(stored: Any) -> str:
    """A state as its name: a string from SQLite, or the enum PostgreSQL's driver may return."""
    return getattr(stored, "name", str(stored))
