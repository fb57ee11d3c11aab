"""What a worker does with the stops it inherited, checked in a fresh process (signal handling
is per process): SIGHUP stays ignored for a worker started by hand under `nohup`, and stops a
worker that `run` started (its parent's death reaches it anyway, through SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from suite.study.supervise import PARENT_ENV

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGHUP is POSIX's"),
]

PROBE = """
import signal
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what `nohup` hands its command
from suite.study.supervise import install_stops
install_stops()
print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)
"""


def _probe(**env: str) -> str:
    inherited = {k: v for k, v in os.environ.items() if k != PARENT_ENV}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env={**inherited, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_a_worker_started_by_hand_under_nohup_keeps_sighup_ignored() -> None:
    assert _probe() == "True False"  # SIGHUP still ignored; SIGTERM stops it


def test_a_worker_started_by_run_is_stopped_by_sighup() -> None:
    assert _probe(**{PARENT_ENV: str(os.getpid())}) == "False False"
