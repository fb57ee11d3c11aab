"""Progress where stderr is not a terminal (a log file, a Slurm job's `.err`): a line per ended
trial, and every few minutes a line naming what each running trial has reached. A bar redrawn
with carriage returns reads in a log as one line that stays at `0/9 [00:00]` until the first
trial ends, which for a long study is most of an hour."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

LINE_ENV = "SUITE_PROGRESS_LINE_S"  # seconds between two lines about the running trials (default 300)


class ProgressLines:
    """The part of tqdm's interface `run` uses (`update`, `set_postfix_str`, `n`, `total`,
    `close`), written as lines."""

    def __init__(self, desc: str, total: int, initial: int = 0, every_s: float | None = None) -> None:
        self.desc, self.total, self.n, self.postfix = desc, total, initial, ""
        self.every_s = float(os.environ.get(LINE_ENV, "300")) if every_s is None else every_s
        self.said = time.monotonic()

    def update(self, count: int = 1) -> None:
        if count <= 0:
            return
        self.n += count
        self._say(f"{self.n}/{self.total} ended" + (f" | {self.postfix}" if self.postfix else ""))

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text
        if text and time.monotonic() - self.said >= self.every_s:
            self._say(f"{self.n}/{self.total} ended; running: {text}")

    def _say(self, text: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {self.desc}: {text}", file=sys.stderr, flush=True)
        self.said = time.monotonic()

    def close(self) -> None:
        pass

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def progress_bar(desc: str, total: int, initial: int = 0, disable: bool = False, **bar: Any) -> Any:
    """A tqdm bar on a terminal, else progress as lines (`ProgressLines`); `disable`: neither."""
    from tqdm.auto import tqdm

    if disable or sys.stderr.isatty():
        return tqdm(desc=desc, total=total, initial=initial, disable=disable, unit="trial", **bar)
    return ProgressLines(desc, total, initial)
