"""Popping planned trials from a study's queue: exactly once across processes, and in time that
does not grow with the queue."""

from __future__ import annotations

import fcntl
import random
from collections.abc import Iterator
from contextlib import contextmanager

import optuna


@contextmanager
def queue_lock(study: optuna.Study) -> Iterator[None]:
    """Makes popping the queue atomic across processes on SQLite. Optuna pops a queued trial
    with SELECT ... FOR UPDATE, which server databases honour and SQLite ignores: two workers
    starting together would both run trial 0. A file lock beside the database serialises the
    pop there (SQLite is one machine's file anyway)."""
    backend = getattr(study._storage, "_backend", study._storage)
    url = str(getattr(backend, "url", ""))
    if not url.startswith("sqlite:///"):
        yield
        return
    with open(url.removeprefix("sqlite:///") + ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pop_planned(study: optuna.Study) -> optuna.Trial | None:
    """A queued trial, or None. Optuna's public `ask()` would create a new, unplanned trial when
    the queue is empty (a duplicate run), so this pops the queue the way `ask()` does inside."""
    waiting = _first_waiting_ids(study)
    if waiting is None:
        trial_id = study._pop_waiting_trial_id()
        return None if trial_id is None else optuna.Trial(study, trial_id)
    # Workers that all tried the head of the queue would queue behind one row lock each pop.
    _POP_ORDER.shuffle(waiting)
    for trial_id in waiting:
        try:  # atomic (SELECT ... FOR UPDATE): False when another worker took it first
            if study._storage.set_trial_state_values(trial_id, state=optuna.trial.TrialState.RUNNING):
                return optuna.Trial(study, trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return pop_planned(study) if waiting else None


_POP_ORDER = random.Random()  # its own generator: never touches the seeded global RNGs


def _first_waiting_ids(study: optuna.Study, limit: int = 64) -> list[int] | None:
    """The first queued trial ids of an RDB storage, read from its trials table alone; None for
    other storages. Optuna's own pop loads every waiting trial with all its attributes on every
    pop (O(queue) each): 16 workers popped a 300-trial PostgreSQL queue at 0.5 trials/s."""
    backend = getattr(study._storage, "_backend", study._storage)
    if not isinstance(backend, optuna.storages.RDBStorage):
        return None
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    trials = models.TrialModel
    with _create_scoped_session(backend.scoped_session) as session:
        rows = (
            session.query(trials.trial_id)
            .filter(trials.study_id == study._study_id, trials.state == optuna.trial.TrialState.WAITING)
            .order_by(trials.trial_id)
            .limit(limit)
            .all()
        )
    return [row[0] for row in rows]
