"""A study made by an earlier layout of the code resumes: its stored fingerprint (a fixture written
on main before the code moved into stage packages) still matches what `suite run` computes today."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from suite.config.request import Request
from suite.identity import STACK, TASK_FIELDS_ADDED
from suite.study.setup import setup_study
from suite.study.storage import open_storage, sqlite_url
from tests.conftest import run_tiny

FIXTURE = Path(__file__).parent / "fixtures" / "study-before-packages.json"


def _request(task: Path) -> Request:
    root = task.parent.parent
    return Request(task=str(task), model="minilm-l6", threads=1, data_dir=root / "data", out=root / "runs")


def test_the_fingerprint_of_a_study_made_before_the_move_is_unchanged(tiny_task: Path) -> None:
    """Every field it stored is computed the same today; the software stack (`stack.*`) and the
    task fields added since (a new study's `task.curve_sample`) were added to the identity after it
    and are not compared for a study stored without them."""
    stored = json.loads(FIXTURE.read_text())
    s = setup_study(_request(tiny_task))
    assert s.name == stored["name"]
    added = {f"task.{name}" for name in TASK_FIELDS_ADDED}
    kept = {k: v for k, v in s.fingerprint.items() if not k.startswith(STACK) and k not in added}
    assert kept == stored["fingerprint"]
    assert {k.removeprefix(STACK) for k in s.fingerprint if k.startswith(STACK)} >= {"torch", "transformers"}


@pytest.mark.trains  # trains the stored study's trials (no training fixture)
def test_a_study_made_before_the_move_resumes(tiny_task: Path) -> None:
    """The stored study (its fingerprint, no trials yet) is resumed by `suite run`, not refused, and
    adopts today's software stack into its fingerprint."""
    stored = json.loads(FIXTURE.read_text())
    folder = setup_study(_request(tiny_task)).folder
    folder.mkdir(parents=True)
    study = optuna.create_study(study_name=stored["name"], storage=open_storage(sqlite_url(folder)))
    study.set_user_attr("fingerprint", stored["fingerprint"])
    run_tiny(tiny_task, Path("minilm-l6"), "--threads", "1")
    resumed = optuna.load_study(study_name=stored["name"], storage=sqlite_url(folder))
    kept = resumed.user_attrs["fingerprint"]
    assert {k: v for k, v in kept.items() if not k.startswith(STACK)} == stored["fingerprint"]
    assert kept["stack.torch"]  # from now on its software stack is checked too
    assert len(resumed.trials) == 3 and all(t.state.name == "COMPLETE" for t in resumed.trials)
