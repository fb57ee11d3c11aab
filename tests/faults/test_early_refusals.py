"""What the specs and the storage alone refuse (an emptied or replaced storage, a changed spec,
other threads) is refused by `run` itself, before it imports torch or starts the process that
would plan and train: one line, exit 2, in a fresh interpreter that never imports torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.faults

# `run` in a fresh interpreter, any child process it would start refused: prints the exit code and
# whether torch was imported.
PROBE = """
import json, sys
import suite.commands.run as run
def no_child(*args, **kwargs):
    raise SystemExit("run started a child process")
run.start_child = no_child
from suite.commands.cli import main
code = main(json.loads(sys.argv[1]))
print(json.dumps([code, "torch" in sys.modules]))
"""


def _refused(args: list[str], wrap: tuple[str, ...] = ()) -> str:
    """`args` refused in one line, exit 2, torch never imported; `wrap`: a command to run it under."""
    done = subprocess.run(
        [*wrap, sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [2, False], done.stderr[-2000:]
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr[-2000:]
    return done.stderr


def test_what_the_storage_and_specs_refuse_is_refused_before_torch_or_a_child(
    tiny_study: tuple[Path, Path], tiny_models
) -> None:  # noqa: ANN001
    task, folder = tiny_study
    root = task.parent.parent
    args = ["run", str(task), "--model", str(tiny_models["bert"]), "--out", str(root / "runs")]
    args += ["--data-dir", str(root / "data"), "--quiet"]
    for workers in ("1", "2"):
        assert "task.max_length 32 -> 16" in _refused([*args, "--workers", workers, "--set", "max_length=16"])
        assert "--threads 2:" in _refused([*args, "--workers", workers, "--threads", "2"])
    (folder / "study.db").write_bytes(b"")  # emptied
    for workers in ("1", "2"):
        assert "does not hold" in _refused([*args, "--workers", workers])
