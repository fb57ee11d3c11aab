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
imported what it needs and waits for the plan). Unset, `reach` costs three
dictionary lookups.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

_REACHED: Counter[str] = Counter()


def reach(point: str, detail: str = "") -> None:
    if trace := os.environ.get("SUITE_TRACE"):
        _append(trace, f"{point} {os.getpid()} {detail}".rstrip() + "\n")
    kill, stall = os.environ.get("SUITE_KILL_AT"), os.environ.get("SUITE_STALL_AT")
    if not (kill or stall):
        return
    _REACHED[point] += 1
    if _is_now(stall, point):
        if os.environ.get("SUITE_STALL_DEAF"):
            for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(stop, signal.SIG_IGN)
        while True:  # until a stop's KeyboardInterrupt (or a kill) ends it
            time.sleep(1)
    if not _is_now(kill, point):
        return
    if once := os.environ.get("SUITE_KILL_ONCE"):
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)


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
