"""Every ending says what happened, in one true line with an exit code by its kind: a broken model
folder, an unwritable output folder, a spec too large to read, an internal error (a bug report in
`crash.txt`), and nothing empty or misleading left behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_tiny

pytestmark = pytest.mark.faults


def _one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err[-3000:]
    return err.strip()


def test_a_truncated_weights_file_is_one_line_before_any_trial(
    tiny_task: Path, tiny_models, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:  # noqa: ANN001
    model = tmp_path / "model"
    shutil.copytree(tiny_models["bert"], model)
    weights = model / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)  # a copy that did not finish
    folder = run_tiny(tiny_task, model, "--threads", "1", expect=2)
    line = _one_line(capsys)
    assert line.startswith(f"error: model '{model}': {weights} does not load (") and "restore" in line
    assert not (folder / "trials.jsonl").exists()
