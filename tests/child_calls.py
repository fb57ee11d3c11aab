"""Calls the offload tests run in a child process: a module of its own, light to import (the
child imports it to unpickle the call)."""

from __future__ import annotations

import os
from pathlib import Path

from suite.errors import SpecError
from suite.study.offload import hand_back, tell


def answer_then_go_on(path: str, code: int) -> int:
    """Answer this process's pid, then write `path` and end with `code` (2: a `SpecError`)."""
    hand_back(os.getpid())
    Path(path).write_text("went on")
    if code == 2:
        raise SpecError("found after answering")
    return code


def tell_then_end(code: int) -> str:
    """Tell this process's pid, then end with a result (0) or a `SpecError` (2)."""
    tell(os.getpid())
    if code == 2:
        raise SpecError("found after telling")
    return "planned"
