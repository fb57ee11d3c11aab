"""The [CLS] head trains on a tiny random encoder of every supported family."""

import math
from pathlib import Path

import pytest

from suite.heads.registry import prepare_task
from suite.models import load_tokenizer
from suite.spec import load_task
from suite.sweep import HParams
from suite.trial import Seeds, TrialPlan, run_trial
from tests.conftest import ARCHITECTURES

HP = HParams(lr=1e-3, batch_size=8, epochs=1)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_classification_head_trains_on_each_family(arch: str, tiny_models, tiny_task: Path) -> None:
    model = str(tiny_models[arch])
    prepared = prepare_task(load_task(tiny_task), tiny_task.parent.parent / "data", load_tokenizer(model))
    record = run_trial(prepared, model, TrialPlan(16, HP, Seeds(1, 2, 3)))
    assert record.get("reason") is None or not record["reason"].startswith("error"), record["reason"]
    assert len(record["loss_curve"]) == 2 and all(math.isfinite(v) for v in record["loss_curve"])
    assert 0.0 <= record["score"] <= 1.0
    assert record["tokens"]["real"] <= record["tokens"]["padded"]
