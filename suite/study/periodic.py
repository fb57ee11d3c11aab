"""A background thread that calls a function every few seconds while a block runs, and stops
with it: the heap trim of a worker that trains (`memory.trimming`), a job's trial log
(`job_log.logging_trials`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def periodically(call: Callable[[], None], period: float, name: str) -> Iterator[None]:
    """`call()` every `period` seconds from a daemon thread named `name` until the block ends;
    the thread is joined before the block's exit returns."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period):
            call()

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
