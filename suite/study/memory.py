"""A worker's memory between and during trials: the allocator that serves it, its objects
collected after each trial, and glibc's heap handed back where glibc's malloc serves it.

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

Where jemalloc is installed (Linux: Debian's `libjemalloc2`), the processes that train allocate
with it instead: the workers `run` starts (`allocator_env`, preloaded), and `run --workers 1` or
`worker` typed at the command line (`restart_with_allocator`). It keeps no freed gaps resident and hands
pages back from a thread of its own (`background_thread`): on the NER default a worker's six-epoch
peak fell from 1.43 GB to 1.18 GB at the same CPU time, every number identical
(benchmarks/memory.py). `SUITE_ALLOCATOR=system` keeps the C library's malloc; an allocator
already in `LD_PRELOAD` is left as it is. Each trial records which one served it (`allocator`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from suite.errors import SuiteError
from suite.study.periodic import periodically

TRIM_PERIOD_S = 10.0  # seconds between trims while a worker runs (see above)
ALLOCATOR_ENV = "SUITE_ALLOCATOR"  # auto (jemalloc where installed, the default) or system
RESTARTED_ENV = "SUITE_ALLOCATOR_RESTARTED"  # set across `restart_with_allocator`: never twice
JEMALLOC_CONF = "background_thread:true"  # its own thread hands freed pages back
# A symbol only each allocator exports into the process's global scope (preloaded, it serves malloc).
ALLOCATORS = {"mallctl": "jemalloc", "tc_malloc": "tcmalloc", "mi_malloc": "mimalloc"}


def allocator_setting(environ: Mapping[str, str] = os.environ) -> str:
    """`SUITE_ALLOCATOR`: `auto` (the default) or `system`; anything else is one line."""
    choice = environ.get(ALLOCATOR_ENV, "auto")
    if choice not in ("auto", "system"):
        raise SuiteError(f"{ALLOCATOR_ENV}={choice}: expected auto (jemalloc where installed) or system")
    return choice


def allocator_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """What a worker's environment adds for jemalloc to serve it: `LD_PRELOAD` and `MALLOC_CONF`,
    where Linux has the library; nothing with `SUITE_ALLOCATOR=system`, an allocator already
    preloaded (a `*malloc*` library in `LD_PRELOAD`), or no jemalloc installed."""
    choice = allocator_setting(environ)
    preloaded = environ.get("LD_PRELOAD", "")
    if choice == "system" or any("malloc" in Path(p).name for p in preloaded.replace(":", " ").split()):
        return {}
    if (library := _jemalloc_library()) is None:
        return {}
    return {
        "LD_PRELOAD": f"{preloaded} {library}".strip(),
        "MALLOC_CONF": environ.get("MALLOC_CONF", JEMALLOC_CONF),
    }


@cache
def _jemalloc_library() -> str | None:
    """jemalloc's shared library as the dynamic linker finds it (`ldconfig`), or None."""
    return ctypes.util.find_library("jemalloc") if sys.platform.startswith("linux") else None


def restart_with_allocator() -> None:
    """This process started again in place (exec: the same pid, terminal and arguments) with
    jemalloc preloaded, when glibc's malloc serves it and `allocator_env` asks for jemalloc: a
    `run --workers 1` or a `worker` typed at the command line trains under it. Once only: after
    the restart (`RESTARTED_ENV`) it goes on with whatever serves it (a preload the dynamic
    linker refused leaves glibc's)."""
    if os.environ.pop(RESTARTED_ENV, None) or allocator() != "glibc":
        return
    if extra := allocator_env():
        sys.stdout.flush(), sys.stderr.flush()
        os.execve(
            sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, **extra, RESTARTED_ENV: "1"}
        )


@cache
def allocator() -> str:
    """What serves this process's malloc: `jemalloc`, `tcmalloc` or `mimalloc` (preloaded),
    `glibc`, or `system` (another platform or C library); each trial records it."""
    try:
        process = ctypes.CDLL(None)  # the global scope: the program, its libraries and preloads
    except OSError:
        return "system"
    for symbol, name in ALLOCATORS.items():
        if hasattr(process, symbol):
            return name
    glibc = hasattr(process, "gnu_get_libc_version") and hasattr(process, "malloc_trim")
    return "glibc" if glibc else "system"


@cache
def _glibc() -> Any:
    """glibc's C library when its malloc serves this process, or None (another allocator, platform
    or C library: nothing of glibc's heap to give back)."""
    if allocator() != "glibc":
        return None
    libc = ctypes.CDLL(None)  # glibc's malloc_trim, found in the global scope
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


def trim() -> None:
    """The heap's free pages given back to the system (glibc's `malloc_trim(0)`)."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def release() -> None:
    """After a trial: its module, optimizer and trainer (held by reference cycles) collected now,
    and the pages they held given back; on a GPU, torch's cached blocks too, so the next trial's
    `peak_gpu_mb` is its own and other workers on the card can have them."""
    gc.collect()
    trim()
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def skip_exit_collection() -> None:
    """Called as a `suite` process ends: every object it holds leaves the garbage collector's
    reach (`gc.freeze`), so the interpreter's teardown frees them by reference count only instead
    of running full collections over the millions that torch, transformers and a trained model
    leave: ~2.3 s of CPU at the end of every process that trained, 0.2 s frozen
    (benchmarks/RESULTS.md). The reference cycles left are memory the OS takes back at exit; the
    outputs, storage and trackers are closed by then, and atexit handlers (logging, weakref
    finalizers) still run."""
    gc.freeze()


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
    with periodically(trim, period, "suite-trim"):
        yield
