"""All three heads on CUDA (bf16-mixed), through `suite run` as a user runs it. Skipped on a
machine without a GPU; run with `pytest -m gpu` where one is present."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from suite.commands.cli import main
from tests.conftest import REPO

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("task", ["rte", "ner", "squad"])
def test_head_trains_and_evaluates_on_cuda(task: str, tmp_path: Path, shared_data: Path) -> None:
    args = ["run", str(REPO / f"tasks/{task}.yaml"), "--profile", "smoke", "--out", str(tmp_path)]
    assert main([*args, "--data-dir", str(shared_data), "--quiet", "--seeds", "2"]) == 0
    records = [json.loads(line) for line in next(tmp_path.glob("*/*/trials.jsonl")).read_text().splitlines()]
    assert records and all(r["outcome"] in ("succeeded", "failed") for r in records)
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    assert all(r["trainer"] == gpu for r in records)
    assert all(r["score"] is not None and r["tokens"]["real"] > 0 for r in records)
