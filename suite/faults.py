"""Fault injection for the fault suite (tests/faults/): a process kills itself, or hangs, at a named
point, and can leave a trace of the points it reached.

`SUITE_KILL_AT=point[:n]` sends SIGKILL to this process the n-th time (default 1st) it reaches
`point`; with `SUITE_KILL_ONCE=FILE` only the first process to create FILE dies (one worker of
many). `SUITE_STALL_AT=point[:n]` hangs it there instead (a step that never ends), until a stop
(a signal) interrupts it; with `SUITE_STALL_DEAF=1` no stop does (it ignores SIGINT, SIGTERM and
SIGHUP from then on, like a process hung where no signal handler runs), only a kill.
`SUITE_TRACE=FILE` appends `point pid detail` to FILE each time a process reaches a point: how
often each trial trained, and by which processes, counted across processes. Points: `trial` (a
worker starts a trial; detail: its key), `cache_write` (a feature file written, not yet in place),
`train_step`, `evaluation` (a dev evaluation done, not yet recorded), `outputs_write` (an output
written, not yet in place), `held` (a worker `run` started while its first worker plans has
imported what it needs and waits for the plan), `tell` (a worker is about to tell the study a
finished trial's record). `SUITE_STORAGE_FAIL_AT=point[:n]` breaks this process's storage from
that reach on (`fail_storage`): a genuine SQLITE_FULL, or PostgreSQL connections the server ends.
Unset, `reach` costs four dictionary lookups.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from typing import Any

_REACHED: Counter[str] = Counter()
FAIL_ENV = "SUITE_STORAGE_FAIL_AT"
_failing: set[str] = set()  # "storage" once SUITE_STORAGE_FAIL_AT was reached


def reach(point: str, detail: str = "") -> None:
    if trace := os.environ.get("SUITE_TRACE"):
        _append(trace, f"{point} {os.getpid()} {detail}".rstrip() + "\n")
    kill, stall = os.environ.get("SUITE_KILL_AT"), os.environ.get("SUITE_STALL_AT")
    fail = os.environ.get(FAIL_ENV)
    if not (kill or stall or fail):
        return
    _REACHED[point] += 1
    if _is_now(fail, point):
        _failing.add("storage")
    if _is_now(stall, point):
        if os.environ.get("SUITE_STALL_DEAF"):
            for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(stop, signal.SIG_IGN)
        while True:  # until a stop's KeyboardInterrupt (or a kill) ends it
            time.sleep(1)
            _swallowed_stop()
    if not _is_now(kill, point):
        return
    if once := os.environ.get("SUITE_KILL_ONCE"):
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


def _swallowed_stop() -> None:
    """A stop this process received that a library swallowed (a KeyboardInterrupt raised inside a
    weakref callback is only printed) ends a stall as it ends a trial's step (suite/study/supervise.py:
    looked up, not imported, since this module sits below every stage)."""
    supervise = sys.modules.get("suite.study.supervise")
    if supervise is not None:
        supervise.stop_point()


def _is_now(target: str | None, point: str) -> bool:
    """Whether `target` (point[:n]) names this reach of `point`."""
    name, _, nth = (target or "").partition(":")
    return name == point and _REACHED[point] == int(nth or 1)


def _append(path: str, line: str) -> None:
    """One write of a line opened for appending: lines from many processes never interleave."""
    handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(handle, line.encode())
    finally:
        os.close(handle)


def fail_storage(engine: Any, url: str) -> None:
    """With SUITE_STORAGE_FAIL_AT set, from its point on each connection this process's storage
    takes is broken as a real fault breaks it. SQLite: its `max_page_count` held at the file's size
    and the free pages filled once, so a write that needs a page fails with SQLite's own
    "database or disk is full" (not an injected error); the next process, without the variable,
    finds the space freed. PostgreSQL: the server ends the connection (`pg_terminate_backend`
    from another one), as a server restart or a dropped network does."""
    from sqlalchemy import event

    def broken(connection: Any, record: Any, proxy: Any) -> None:
        if "storage" not in _failing:
            return
        if url.startswith("sqlite"):
            _fill(connection)
        elif url.startswith("postgresql"):
            _terminate(connection, url)

    event.listen(engine, "checkout", broken)


def _fill(connection: Any) -> None:
    import sqlite3

    connection.execute("PRAGMA max_page_count = 1")  # raised to the file's size: it cannot grow
    if "filled" in _failing:
        return
    _failing.add("filled")
    size = connection.execute("PRAGMA page_size").fetchone()[0]
    try:  # the free pages, taken by blobs of shrinking size until not even a small one fits
        connection.execute("CREATE TABLE IF NOT EXISTS suite_fault_fill (x BLOB)")
        connection.commit()
        while size >= 16:
            try:
                connection.execute("INSERT INTO suite_fault_fill VALUES (zeroblob(?))", (size,))
                connection.commit()
            except sqlite3.OperationalError:
                connection.rollback()
                size //= 2
    except sqlite3.OperationalError:  # not even the table fits: full already
        connection.rollback()


def _terminate(connection: Any, url: str) -> None:
    import sqlalchemy

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    other = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
    with other.connect() as admin:
        admin.execute(sqlalchemy.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        admin.commit()
    other.dispose()
