"""Each command's early checks: what it will write can be written, answered in one line before it
imports torch, reads data or starts a kernel (an unwritable `--out` was found after a minute of
imports and model loading). One function per command, called by the CLI before it dispatches;
this module imports nothing heavy."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from suite.errors import SuiteError


def writable_problem(path: Path) -> str | None:
    """Why `path` (a folder to create or fill, or a file to write) cannot be written: its nearest
    existing ancestor is not a folder or refuses a new entry, or the file refuses writes; None where
    it can. Probed, not read off the modes: root passes `os.access` on `/proc`, where nothing can be
    made, and the probe also meets read-only mounts and full quotas of names."""
    existing = next((p for p in [path, *path.parents] if p.exists()), None)
    if existing is None:
        return None
    if existing == path and not path.is_dir():
        return None if os.access(path, os.W_OK) else f"{path} is not writable"
    if not existing.is_dir():
        return f"{existing} is a file, not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".suite-probe-", dir=existing))
    except OSError:
        return f"{existing} is not writable"
    return None


def _check(flag: str, path: Path, then: str = "") -> None:
    if problem := writable_problem(path):
        raise SuiteError(f"{flag} {path}: {problem}{then}")


def _study(args: argparse.Namespace) -> None:
    """`run`, `plan`, `launch`, `import`: the runs folder (`--out`) that holds the run folder."""
    _check("--out", Path(args.out), "; give another --out")


def _report(args: argparse.Namespace) -> None:
    """`report`: report.ipynb and report.html beside the run's files (the kernel takes 30 s)."""
    run = Path(args.run)
    if not run.is_dir():
        return  # the report names a missing folder itself
    for path in (run, run / "report.ipynb", run / "report.html"):
        if path.exists() or path == run:
            _check("report", path, "; copy the run folder somewhere writable and report on the copy")


def _output(flag: str) -> Callable[[argparse.Namespace], None]:
    """A command writing one file or folder (`-o`)."""

    def check(args: argparse.Namespace) -> None:
        _check(flag, Path(args.output), f"; give another {flag}")

    return check


PREFLIGHTS: dict[str, Callable[[argparse.Namespace], None]] = {
    "run": _study,
    "plan": _study,
    "launch": _study,
    "import": _study,
    "report": _report,
    "site": _output("-o"),
    "leaderboard": _output("-o"),
    "export": _output("-o"),
}


def preflight(args: argparse.Namespace) -> None:
    """The command's early checks, if it has any (one line, exit 2)."""
    if (check := PREFLIGHTS.get(args.command)) is not None:
        check(args)
