"""A call run in a fresh Python process, its result (or its error) handed back; the call may hand
its result back early (`hand_back`) and go on working in that process, and may answer something
before its result (`tell`: `run`'s first worker says how many workers the study gets before it
checks the inputs, so that `run` starts the others meanwhile).

`suite run --workers N` uses it so that the process that only waits for its workers never holds
what planning needs: torch, transformers and Lightning imported, the data read and tokenised,
the model loaded for the pre-flight (on the NER default, benchmarks/memory.py: 743 MB while
waiting before, 85 MB after). The child that planned goes on as the first worker: its imports
and prepared data are what a worker needs, and starting a process costs ~10 CPU-seconds of
imports on 2 cores (benchmarks/RESULTS.md).

The call travels on the child's stdin, the answer on a pipe of its own (the child's stdout and
stderr are this process's); a `SuiteError` raised in the child before it answered is raised here
as the same error (same message, same exit code); another exception too, with the child's
traceback as a note.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from typing import Any

_answer_fd: int | None = None  # in a child: the pipe its answer goes to, until it answers


class Child:
    """A call running in a child process (`start_child`)."""

    def __init__(self, process: subprocess.Popen, answers: int, name: str) -> None:
        self.process, self._answers, self._name = process, os.fdopen(answers, "rb"), name

    def answer(self, last: bool = True) -> Any:
        """The call's next answer: what it tells (`last=False`: `tell`), else its last (its result,
        or its error raised here, whichever answer was awaited); waits for it."""
        try:  # one pickle, not to the pipe's end: a process the child forked may hold it open
            ok, value = pickle.load(self._answers)
        except (EOFError, pickle.UnpicklingError):  # none, or cut short
            self._answers.close()
            raise RuntimeError(
                f"{self._name}: the child process exited with code {self.process.wait()} before answering"
            ) from None
        if last or not ok:
            self._answers.close()
        if not ok:
            raise value
        return value


def start_child(
    function: Callable[..., Any], *args: Any, env: dict[str, str] | None = None, own_group: bool = False
) -> Child:
    """`function(*args)` starting in a child interpreter (a module-level function; picklable
    arguments and result); `env` its environment, `own_group` its own process group (no terminal
    signal reaches it)."""
    call = pickle.dumps((function, args))  # before any process starts: an unpicklable call starts none
    read, write = os.pipe()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "suite.study.offload", str(write)],
            stdin=subprocess.PIPE,
            pass_fds=(write,),
            env=env,
            process_group=0 if own_group else None,
        )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)  # the child holds the only writing end: its exit ends the answer
    assert process.stdin is not None
    try:
        with process.stdin:
            process.stdin.write(call)
    except BrokenPipeError:  # it died at once: `answer()` says with which code
        pass
    except BaseException:
        os.close(read)
        process.kill()
        process.wait()
        raise
    return Child(process, read, f"{function.__module__}.{function.__qualname__}")


def tell(value: Any) -> None:
    """In a child: answer `value` now (the caller's next `answer()` returns it) and go on; the
    call's last answer (`hand_back`, its result or its error) comes after it."""
    _write_answer(pickle.dumps((True, value)), last=False)


def hand_back(value: Any) -> None:
    """In a child: answer `value` now (the caller's `answer()` returns it) and go on. A value that
    does not pickle raises here: the child answers that error instead and does not go on."""
    _write_answer(pickle.dumps((True, value)))


def _fail(err: BaseException) -> None:
    """In a child: answer with `err` (as its text when it does not pickle), and end: from here a
    stop ends it at once and quietly (the caller may stop it while it exits)."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)
    try:
        blob = pickle.dumps((False, err))
    except Exception:  # noqa: BLE001 - an error that does not pickle goes back as its text
        text = "".join(traceback.format_exception(err))
        blob = pickle.dumps((False, RuntimeError(f"in the child process:\n{text}")))
    _write_answer(blob)


def _write_answer(blob: bytes, last: bool = True) -> None:
    global _answer_fd
    if _answer_fd is None:
        raise RuntimeError("this process already answered (or is no child of `start_child`)")
    fd = _answer_fd
    if last:
        _answer_fd = None
    try:
        with os.fdopen(fd, "wb", closefd=last) as pipe:
            pipe.write(blob)
    except BrokenPipeError:  # the caller stopped listening (it was stopped): nothing to tell
        pass


def _serve(answers: int) -> int:
    """The child's side: run the call from stdin; answer its result or its error, unless it
    answered itself. After an answer the process is on its own: an error ends it like a command's
    (one line and the error's exit code for a `SuiteError`, 130 for a stop)."""
    global _answer_fd
    from suite.errors import SuiteError, report

    os.set_inheritable(answers, False)  # a process this one starts does not hold the answer open
    _answer_fd = answers
    function, args = pickle.loads(sys.stdin.buffer.read())
    try:
        result = function(*args)
    except Exception as err:  # noqa: BLE001 - every error goes back to the caller, which raises it
        if _answer_fd is None:
            if isinstance(err, SuiteError):
                return report(err)
            raise
        if not isinstance(err, SuiteError):
            err.add_note("in the child process:\n" + "".join(traceback.format_exception(err)).rstrip())
        _fail(err)
        return 1
    except KeyboardInterrupt:
        return 130
    if _answer_fd is None:  # it answered itself, then went on: its result is its exit code
        return result if isinstance(result, int) else 0
    try:
        hand_back(result)
    except Exception as err:  # noqa: BLE001 - a result that does not pickle: its error instead
        _fail(err)
        return 1
    return 0


if __name__ == "__main__":  # through the module's own name: `hand_back` reads its `_answer_fd`
    from suite.study import offload
    from suite.study.memory import skip_exit_collection

    try:
        raise SystemExit(offload._serve(int(sys.argv[1])))
    finally:
        skip_exit_collection()
