"""A call run in a fresh Python process, its result (or its error) handed back.

`suite run --workers N` uses it so that the process that only waits for its workers never holds
what planning needs: torch, transformers and Lightning imported, the data read and tokenised,
the model loaded for the pre-flight (on the NER default, benchmarks/memory.py: 743 MB while
waiting before, 85 MB after). Exiting the child is what frees them: a process cannot give back
its imports.

The child's stdout and stderr are this process's; a `SuiteError` raised in it is raised here as
the same error (same message, same exit code); another exception too, with the child's traceback
as a note.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def in_child(function: Callable[..., Any], *args: Any) -> Any:
    """`function(*args)` in a child interpreter (a module-level function; picklable arguments and
    result)."""
    with tempfile.TemporaryDirectory(prefix="suite-call-") as folder:
        call, answer = Path(folder) / "call.pickle", Path(folder) / "answer.pickle"
        call.write_bytes(pickle.dumps((function, args)))
        code = subprocess.call([sys.executable, "-m", "suite.study.offload", str(call), str(answer)])
        if not answer.is_file():
            raise RuntimeError(
                f"{function.__module__}.{function.__qualname__}: the child process exited with code "
                f"{code} before answering"
            )
        ok, value = pickle.loads(answer.read_bytes())
    if not ok:
        raise value
    return value


def _answer(call: Path, answer: Path) -> int:
    """The child's side: run the pickled call, write (True, result) or (False, error)."""
    from suite.errors import SuiteError

    function, args = pickle.loads(call.read_bytes())
    try:
        reply = (True, function(*args))
    except Exception as err:  # noqa: BLE001 - every error goes back to the caller, which raises it
        if not isinstance(err, SuiteError):
            err.add_note("in the child process:\n" + "".join(traceback.format_exception(err)).rstrip())
        reply = (False, err)
    try:
        blob = pickle.dumps(reply)
    except Exception:  # noqa: BLE001 - an error that does not pickle goes back as its text
        text = "".join(traceback.format_exception(reply[1])) if not reply[0] else "an unpicklable result"
        blob = pickle.dumps((False, RuntimeError(f"in the child process:\n{text}")))
    answer.write_bytes(blob)
    return 0


if __name__ == "__main__":
    raise SystemExit(_answer(Path(sys.argv[1]), Path(sys.argv[2])))
