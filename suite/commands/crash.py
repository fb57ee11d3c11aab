"""An unexpected exception is a bug in the suite, not an input error: its traceback goes to
`<run folder>/crash.txt` (or to stderr where the command has no run folder), and the command ends
with one line naming that file, exit 1."""

from __future__ import annotations

import argparse
import sys
import traceback
from contextlib import suppress
from pathlib import Path

from suite.config.request import Request

EXIT_CODE = 1


def crash_folder(args: argparse.Namespace, request: Request | None) -> Path | None:
    """The run folder the command works in, where it exists: the one it names (`report`,
    `export`, `compare`), or the one its specs address (`run`, `plan`, `launch`)."""
    for name in ("run", "run_a"):
        if (given := getattr(args, name, None)) and Path(given).is_dir():
            return Path(given)
    if request is None or request.task is None:
        return None
    with suppress(Exception):  # the specs are what crashed: no folder to name
        from suite.study.setup import read_specs, study_address

        _, task, _, sweep = read_specs(request)
        folder = study_address(request, task, sweep)[0]
        return folder if folder.is_dir() else None
    return None


def crashed(err: BaseException, args: argparse.Namespace, request: Request | None) -> int:
    """Report the exception being handled as a bug: its traceback kept, one line said."""
    text = "".join(traceback.format_exception(err))
    what = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip(": ")
    folder = crash_folder(args, request)
    if folder is not None:
        with suppress(OSError):
            (folder / "crash.txt").write_text(f"suite {' '.join(sys.argv[1:])}\n\n{text}", encoding="utf-8")
            print(
                f"error: internal error ({what}), a bug in suite: its traceback is in "
                f"{folder / 'crash.txt'}; please report it with that file",
                file=sys.stderr,
            )
            return EXIT_CODE
    print(text, end="", file=sys.stderr)
    print(f"error: internal error ({what}), a bug in suite: please report it with the traceback above",
          file=sys.stderr)  # fmt: skip
    return EXIT_CODE
