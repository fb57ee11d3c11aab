"""A worker's memory between and during trials (glibc's allocator; elsewhere these do nothing).

Measured on the NER default (benchmarks/memory.py, benchmarks/RESULTS.md): each trial's module,
optimizer, gradients and trainer lived on as reference cycles until Python's collector happened
to run, so the next trial started on top of them (a worker's peak doubled over 20 trials); and a
trial's tensors change shape with every padded batch, which glibc's malloc serves from its heap
(its mmap threshold rises to 32 MiB once a large block is freed), where freed gaps stay resident:
0.8 GB of a worker's 1.9 GB peak was free heap at the end of one six-epoch trial. Neither changes a
number a trial computes.

Pages given back cost a page fault each when the heap uses them again. On one one-epoch NER trial
(peak RSS, CPU time against no trimming): a trim every 10 s, 1.33-1.39 GB for ~2% more CPU; every
5 s, 1.31 GB for ~4%; a fixed 128 KiB mmap threshold (each tensor its own mapping), 1.18 GB for
~25%; none, 1.54 GB and growing with every epoch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

TRIM_PERIOD_S = 10.0  # seconds between trims while a worker runs (see above)


@cache
def _glibc() -> Any:
    """glibc's C library, or None (another platform or C library: nothing to give back)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # musl has no malloc_trim
        return None
    return libc


def trim() -> None:
    """The heap's free pages given back to the system (glibc's `malloc_trim(0)`)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def release() -> None:
    """After a trial: its module, optimizer and trainer (held by reference cycles) collected now,
    and the pages they held given back."""
    gc.collect()
    trim()


def reset_peak() -> bool:
    """Restarts this process's peak RSS from its current RSS (Linux: VmHWM, and with it
    getrusage's `ru_maxrss`), so that the `peak_rss_mb` a trial records is that trial's own peak:
    a trial that needs more than the others, or a leak, shows in its own record, not only as a
    new maximum over every earlier trial. False where it cannot (another platform)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@contextmanager
def trimming(period: float = TRIM_PERIOD_S) -> Iterator[None]:
    """While the block runs, `trim()` every `period` seconds from a background thread (the call
    releases the GIL; glibc locks its heap meanwhile, ~40 ms for a worker's)."""
    if _glibc() is None:
        yield
        return
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(period):
            trim()

    thread = threading.Thread(target=loop, name="suite-trim", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
