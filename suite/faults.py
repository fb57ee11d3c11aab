"""Fault injection for the fault suite (tests/faults/): a process kills itself at a named point.

`SUITE_KILL_AT=point[:n]` sends SIGKILL to this process the n-th time (default 1st) it reaches
`point`; with `SUITE_KILL_ONCE=FILE` only the first process to create FILE dies (one worker of
many). Points: `cache_write` (a feature file written, not yet in place), `train_step`,
`evaluation` (a dev evaluation done, not yet recorded), `outputs_write` (an output written,
not yet in place). Unset, `reach` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

_REACHED: Counter[str] = Counter()


def reach(point: str) -> None:
    target = os.environ.get("SUITE_KILL_AT")
    if not target:
        return
    name, _, nth = target.partition(":")
    if name != point:
        return
    _REACHED[point] += 1
    if _REACHED[point] != int(nth or 1):
        return
    if once := os.environ.get("SUITE_KILL_ONCE"):
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
