"""One lock per study, across processes and machines. Planning (which reads the keys the storage
holds, then queues the rest), popping a queued trial, and telling or putting back a trial (which
can queue it again) all take it, so no planned trial is queued or handed out twice, however many
`run`s and workers share a study, even two first `run`s that both create it.

Per storage kind:
- SQLite and journal files: an exclusive `flock` on a file beside the storage file (a SQLite or
  journal file is one machine's anyway; the kernel drops the lock of a process that dies). The
  journal's is not `PATH.lock`: Optuna makes and deletes that one as its own append lock.
- PostgreSQL: `pg_advisory_xact_lock`, keyed by the study name, held by an open transaction on a
  connection of its own. An advisory lock, not a row lock: the study's row does not exist yet while
  the first runs create it. Transaction-scoped: the server drops it with the transaction, also when
  the process holding it dies (its connection closes), so no killed worker leaves a study locked.
- MySQL: `GET_LOCK` named after the study, on a connection of its own (dropped with it likewise).
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from suite.errors import SuiteError


@contextmanager
def study_lock(url: str, name: str) -> Iterator[None]:
    """Hold study `name`'s lock in the storage at `url` (a URL as `open_storage` takes it)."""
    from suite.study.storage import server_engine, storage_file

    if (path := storage_file(url)) is not None:  # the real file, however its URL spells it
        with _file_lock(f"{path}{'.lock' if url.startswith('sqlite') else '.suite.lock'}", url):
            yield
    elif url.startswith("postgresql"):
        with server_engine(url).connect() as connection, connection.begin():  # released at the commit
            connection.execute(_sql("SELECT pg_advisory_xact_lock(:key)"), {"key": _key(name)})
            yield
    elif url.startswith("mysql"):
        with server_engine(url).connect() as connection:
            lock = {"name": f"suite:{hashlib.sha1(name.encode()).hexdigest()}"}  # names <= 64 chars
            connection.execute(_sql("SELECT GET_LOCK(:name, -1)"), lock)
            try:
                yield
            finally:
                connection.execute(_sql("SELECT RELEASE_LOCK(:name)"), lock)
    else:  # an in-memory storage (one process), or a proxy whose server's database pops atomically
        yield


def storage_url(storage: Any) -> str:
    """The URL an opened Optuna storage was opened from (`study_lock` takes it)."""
    backend = getattr(storage, "_backend", storage)  # an RDB storage sits inside Optuna's cache
    if hasattr(backend, "url"):
        return str(backend.url)
    path = getattr(getattr(backend, "_backend", backend), "_file_path", None)  # a journal file
    return f"journal:{path}" if path else ""


@contextmanager
def _file_lock(path: str, url: str) -> Iterator[None]:
    try:
        handle = open(path, "a")  # noqa: SIM115 (closed below; an OSError here is the user's to fix)
    except OSError as err:
        from suite.study.storage import public_url

        raise SuiteError(
            f"--storage {public_url(url)!r}: cannot write its lock file {path} ({err.strerror or err})"
        ) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sql(text: str) -> Any:
    import sqlalchemy

    return sqlalchemy.text(text)


def _key(name: str) -> int:
    """The study's advisory-lock key: a signed 64-bit digest of its name (per database)."""
    digest = hashlib.blake2b(f"suite study {name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)
