"""A finished trial's record that the storage would not take (a full disk, a database server that
went away): told again a bounded number of times, then kept in a side file and the worker ends in
one line; the next `run` (or worker) tells the kept record to the study before it plans, so nothing
that ended is trained again.

Where the side file goes: beside a SQLite or journal file (`<file>.pending/`), which every rerun of
the study reads, on whatever machine (a SQLite file is one machine's anyway); for a database server,
the run folder's `pending/` (a `suite worker` started by hand: its working directory's
`suite-pending/`), read by the next `run` of the same folder. A disk too full for that small file
too: the user's cache (`~/.cache/suite/pending/`), read by reruns on the same machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import optuna

from suite.errors import SuiteError
from suite.study.storage import public_url, storage_file
from suite.study.supervise import FOLDER_ENV

# how a worker tells a finished trial (suite/study/work.py `conclude`): passed in, as that module
# imports this one
Conclude = Callable[[optuna.Study, optuna.Trial, dict[str, Any], float], None]
RETRY_WAITS_S = (1.0, 3.0)  # a failed tell is tried again after these: a blip passes, a full disk stays


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


def tell_or_keep(
    study: optuna.Study,
    trial: optuna.Trial,
    record: dict[str, Any],
    baseline: float,
    conclude: Conclude,
    kept_in: list[Path] | None = None,
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
    kept = keep(kept_in or pending_dirs(url, None), study.study_name, trial._trial_id, record, baseline)
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
    places: list[Path], study: str, trial_id: int, record: dict[str, Any], baseline: float
) -> Path | None:
    """The record in the first place that takes it (written beside, then renamed: never torn)."""
    text = json.dumps({"study": study, "trial_id": trial_id, "baseline": baseline, "record": record})
    name = f"{_tag(study)}-{trial_id}.json"
    for place in places:
        path = place / name
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            place.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, path)
            return path
        except OSError:
            tmp.unlink(missing_ok=True)
    return None


def tell_kept(study: optuna.Study, places: list[Path], conclude: Conclude) -> int:
    """Tell the study every record kept for it (under its lock, held by the caller); returns how many.
    A trial already told (its write landed before the error came back) is left as it is."""
    told, ours = 0, None
    for place in places:
        for path in sorted(place.glob(f"{_tag(study.study_name)}-*.json")) if place.is_dir() else []:
            ours = ours or {t._trial_id for t in study.get_trials(deepcopy=False)}
            try:
                kept = json.loads(path.read_text())
                trial_id = int(kept["trial_id"])
            except (OSError, ValueError, KeyError):
                continue
            if trial_id not in ours:
                continue  # not this study's trial (a replaced storage): left for the user to see
            frozen = study._storage.get_trial(trial_id)
            if not (frozen.state.is_finished() and "record" in frozen.user_attrs):
                conclude(study, optuna.Trial(study, trial_id), kept["record"], kept["baseline"])
                told += 1
            path.unlink(missing_ok=True)
    return told


def _tag(study: str) -> str:
    """A study's name in file names (names hold `|` and `/`)."""
    return hashlib.sha1(study.encode()).hexdigest()[:12]
