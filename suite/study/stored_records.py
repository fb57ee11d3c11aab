"""The ended trials' records of a study, read from an RDB storage's tables in one query.

Why by hand: a trial's record is one user attribute (`record`), and Optuna's `get_trials` builds
every trial whole, some 20 ORM objects each (params, values, every attribute): 10 s of `export`
at 10,000 trials and 132 s at 100,000, its session's bookkeeping growing faster than the
trials. The query reads Optuna's tables `trials` and `trial_user_attributes` (their columns
unchanged since Optuna 2); on another storage (a journal file), or where the query fails, the
caller reads `get_trials` (`suite.study.plan.study_records`).
"""

from __future__ import annotations

import gc
import json
from typing import Any

import optuna
import sqlalchemy

from suite.study.records import outcome

# A trial's state is stored by name; an ended trial is COMPLETE, PRUNED or FAIL.
_QUERY = sqlalchemy.text(
    "SELECT t.state, a.value_json FROM trials t JOIN trial_user_attributes a"
    " ON a.trial_id = t.trial_id AND a.key = 'record'"
    " WHERE t.study_id = :study AND t.state IN ('COMPLETE', 'PRUNED', 'FAIL') ORDER BY t.number"
)


def rdb_records(study: optuna.Study) -> list[dict[str, Any]] | None:
    """Every ended trial's record in trial order, as `plan._record` keeps them (a FAIL only with
    an errored record), or None where the storage is not an RDB one or the query fails."""
    storage = study._storage  # a study's storage is the RDB storage in Optuna's read cache
    backend = getattr(storage, "_backend", storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        return None
    try:
        with backend.engine.connect() as connection:
            rows = connection.execute(_QUERY, {"study": study._study_id}).all()
    except sqlalchemy.exc.SQLAlchemyError:
        return None
    enabled = gc.isenabled()
    gc.disable()  # parsed JSON holds no cycles: the collector's passes over 10,000 records are waste
    try:
        records = [(state, json.loads(value)) for state, value in rows]
    finally:
        if enabled:
            gc.enable()
    # as `plan._record` keeps them: a record (not null) of a run, or an errored one of a FAIL
    return [
        r for state, r in records if r is not None and (_state(state) != "FAIL" or outcome(r) == "errored")
    ]


def _state(stored: Any) -> str:
    """A state as its name: a string from SQLite, or the enum PostgreSQL's driver may return."""
    return getattr(stored, "name", str(stored))
