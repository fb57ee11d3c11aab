"""A finished trial's record that the storage would not take (a full disk, a database server that
went away): told again a bounded number of times, then kept in a side file and the worker ends in
one line; the next `run` (or worker) tells the kept record to the study before it plans, so nothing
that ended is trained again.

Where the side file goes: beside a SQLite or journal file (`<file>.pending/`), which every rerun of
the study reads, on whatever machine (a SQLite file is one machine's anyway); for a database server,
the run folder's `pending/` (a `suite worker` started by hand: its working directory's
`suite-pending/`), read by the next `run` of the same folder. A disk too full for that small file
too: the user's cache (`~/.cache/suite/pending/`), read by reruns on the same machine.

A kept record proves whose it is before it is told: the study's random id (`study_uid`, given at
its creation: SQLite's trial ids restart at 1 in every storage, so a name and an id match every
later study of that name) and its trial's key. Any other file is left where it is, in one warning.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from suite.errors import SuiteError
from suite.study.storage import public_url, storage_file
from suite.study.supervise import FOLDER_ENV, WORKER_ATTR

# how a worker tells a finished trial (suite/study/work.py `conclude`): passed in, as that module
# imports this one
Conclude = Callable[[optuna.Study, optuna.Trial, dict[str, Any], float], None]
RETRY_WAITS_S = (1.0, 3.0)  # a failed tell is tried again after these: a blip passes, a full disk stays
UID_ATTR = "study_uid"  # a study's random id (uuid4), in its user attributes


@dataclass(frozen=True)
class Keeping:
    """Where a worker keeps a record the storage would not take (`pending_dirs`, first choice
    first), and the id of the study it keeps it for, read before any write can fail."""

    places: list[Path]
    uid: str


def study_uid(study: optuna.Study, locked: bool = False) -> str:
    """The study's random id; a study stored before ids existed gets one, under the study's lock
    (`locked`: the caller holds it), the first time it is opened."""
    if uid := study.user_attrs.get(UID_ATTR):
        return uid
    if locked:
        study.set_user_attr(UID_ATTR, uid := uuid.uuid4().hex)
        return uid
    from suite.study.queue import queue_lock

    with queue_lock(study):
        return study_uid(study, locked=True)


class StorageWriteError(SuiteError):
    """The storage would not take a write: exit 1, as a trial that did not end (rerun to go on)."""

    exit_code = 1

    def __init__(self, line: str, cause: str = "") -> None:
        super().__init__(line)
        self.cause = cause  # the database's own words


def storage_cause(err: BaseException) -> str | None:
    """The database's own words for a failed storage call ("database or disk is full"), or None
    when `err` is not a storage failure. Optuna wraps SQLAlchemy's error in a message about
    "invalid data, e.g. exceeding max length", which would mislead: the driver's is read instead."""
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    seen: BaseException | None = err
    found = None
    while seen is not None:
        if isinstance(seen, DBAPIError) and seen.orig is not None:
            return (str(seen.orig).strip() or type(seen.orig).__name__).splitlines()[0]
        if isinstance(seen, SQLAlchemyError | optuna.exceptions.StorageInternalError):
            found = found or str(seen).strip().splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    return found


def advice(cause: str) -> str:
    if "full" in cause or "space" in cause:
        return "free space and rerun the same command"
    return "check that the storage is reachable and writable, then rerun the same command"


@contextmanager
def storage_faults(url: str) -> Iterator[None]:
    """A storage that fails to write where no finished record is at stake (planning, taking a
    trial): one line naming it and why, instead of the storage library's chained tracebacks."""
    try:
        yield
    except SuiteError:
        raise
    except Exception as err:
        if (cause := storage_cause(err)) is None:
            raise
        line = f"storage {public_url(url)}: cannot write ({cause}); {advice(cause)}"
        raise StorageWriteError(line, cause) from None


def pending_dirs(url: str, folder: Path | None) -> list[Path]:
    """Where a record the storage would not take is kept, first choice first (the module says why)."""
    local = storage_file(url)
    if local is not None:
        first = local.with_name(local.name + ".pending")
    elif folder is not None or os.environ.get(FOLDER_ENV):
        first = Path(folder or os.environ[FOLDER_ENV]) / "pending"
    else:
        first = Path.cwd() / "suite-pending"
    return [first, Path.home() / ".cache" / "suite" / "pending"]


def keeping_for(study: optuna.Study, url: str, folder: Path | None) -> Keeping:
    """Where a worker of `study` at `url` keeps a record, and the study's id (given if missing)."""
    return Keeping(pending_dirs(url, folder), study_uid(study))


def tell_or_keep(
    study: optuna.Study,
    trial: optuna.Trial,
    record: dict[str, Any],
    baseline: float,
    conclude: Conclude,
    keeping: Keeping,
) -> None:
    """Tell a finished trial (`conclude`, under the study's lock), trying again after a failed
    write; when the storage still fails, keep the record in a side file and end in one line."""
    from suite.study.lock import storage_url
    from suite.study.queue import queue_lock

    url, cause = storage_url(study._storage), ""
    for wait in (*RETRY_WAITS_S, None):
        try:
            with storage_faults(url), queue_lock(study):
                conclude(study, trial, record, baseline)
            return
        except StorageWriteError as err:
            cause = err.cause
        if wait is not None:
            time.sleep(wait)
    kept = keep(keeping, study.study_name, trial, record, baseline)
    where = (
        f"its record is kept in {kept} and told to the study by the rerun, not trained again"
        if kept is not None
        else "its record could not be kept either: the rerun trains it again"
    )
    raise StorageWriteError(
        f"storage {public_url(url)}: cannot write ({cause}) as trial {trial.number} ended; {where}: "
        f"{advice(cause)}"
    )


def keep(
    keeping: Keeping, study: str, trial: optuna.Trial, record: dict[str, Any], baseline: float
) -> Path | None:
    """The record in the first place that takes it (written beside, then renamed: never torn),
    with what proves whose it is: the study's id, the trial's key and number."""
    kept = {
        "study": study,
        UID_ATTR: keeping.uid,
        "key": trial.user_attrs["key"],
        "trial_number": trial.number,
        "trial_id": trial._trial_id,
        "baseline": baseline,
        "record": record,
    }
    text = json.dumps(kept)
    name = f"{_tag(study)}-{keeping.uid[:12]}-{trial._trial_id}.json"  # two same-named studies never clash
    for place in keeping.places:
        path = place / name
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        made = not place.exists()
        try:
            place.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
            return path
        except OSError:
            with suppress(OSError):  # a place that is not a folder has no temporary file to remove
                tmp.unlink(missing_ok=True)
            with suppress(OSError):  # nothing empty is left behind (rmdir keeps a folder that holds files)
                if made:
                    place.rmdir()
    return None


def tell_kept(study: optuna.Study, keeping: Keeping, conclude: Conclude, warn: bool = True) -> int:
    """Tell the study every record kept for it (under its lock, held by the caller); returns how
    many. A kept file proves it is this study's (`_owner`) or is left where it is, named in one
    warning line (`warn`); a trial already told (its write landed before the error came back) is
    left as it is; one that another worker runs again leaves its file for the next run."""
    told, left = 0, []
    for index, place in enumerate(keeping.places):
        for path in sorted(place.glob(f"{_tag(study.study_name)}-*.json")) if place.is_dir() else []:
            trials = study.get_trials(deepcopy=False)  # afresh: the last tell may have queued a retry
            kept = _read(path)
            owner = _owner(kept, trials, keeping.uid, index == 0) if kept is not None else None
            if owner is None:
                left.append(path)
                continue
            state = _kept_state(kept, owner, trials)
            if state == "tell":
                conclude(study, optuna.Trial(study, owner._trial_id), kept["record"], kept["baseline"])
                told += 1
            if state != "running":
                path.unlink(missing_ok=True)
    if left and warn:
        print(_left_line(study.study_name, left), file=sys.stderr)
    return told


def _read(path: Path) -> dict[str, Any] | None:
    """A kept file's content, or None where it is not one (torn, foreign, garbage)."""
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        int(kept["trial_id"])
        if isinstance(kept["record"], dict) and "baseline" in kept:
            return kept
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _owner(
    kept: dict[str, Any], trials: list[FrozenTrial], uid: str, first_place: bool
) -> FrozenTrial | None:
    """The trial a kept record was written for, where the file proves it: the study's id and the
    trial's key, or (a file written before studies had ids) lying in the storage's own first place
    with the record's key that trial's. None: another study's (ids restart in every storage)."""
    if UID_ATTR in kept:
        if kept[UID_ATTR] != uid:
            return None
        key = kept.get("key")
    elif first_place:
        key = kept["record"].get("key")
    else:
        return None
    trial = next((t for t in trials if t._trial_id == int(kept["trial_id"])), None)
    if trial is None or key is None or trial.user_attrs.get("key") != key:
        return None
    return trial


def _kept_state(kept: dict[str, Any], owner: FrozenTrial, trials: list[FrozenTrial]) -> str:
    """What to do with this study's kept record: "told" (a trial of its key and attempt already
    ended with a record: each key ends once), "running" (another worker runs it again: left for
    the next run), or "tell" (to its own trial, left running by the worker that kept it, or to
    the queued twin a heartbeat takeover made: `conclude` claims it)."""
    attempt = owner.user_attrs.get("attempt", 1)
    same = [
        t
        for t in trials
        if t.user_attrs.get("key") == owner.user_attrs["key"] and t.user_attrs.get("attempt", 1) == attempt
    ]
    if any(t.state.is_finished() and "record" in t.user_attrs for t in same):
        return "told"
    keeper = kept["record"].get("worker")
    if owner.state == TrialState.RUNNING and owner.system_attrs.get(WORKER_ATTR) in (None, keeper):
        return "tell"
    if any(t.state == TrialState.RUNNING for t in same):
        return "running"
    return "tell"


def _left_line(study: str, left: list[Path]) -> str:
    named = ", ".join(str(p) for p in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    return (
        f"warning: kept record{'s' if len(left) > 1 else ''} {named} "
        f"{'are' if len(left) > 1 else 'is'} not of this study {study!r} (another study of that name, "
        "in another storage or an earlier one, or unreadable): left untouched; rerun that study's "
        "command to tell it there, or delete the file once no study needs it"
    )


def _tag(study: str) -> str:
    """A study's name in file names (names hold `|` and `/`)."""
    return hashlib.sha1(study.encode()).hexdigest()[:12]
