"""The token-tagging head (linear and CRF) trains on a tiny encoder of every family."""

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


def _train(task_path: Path, model: str, tokenizer=None) -> dict:  # noqa: ANN001
    tokenizer = tokenizer or load_tokenizer(model)
    prepared = prepare_task(load_task(task_path), task_path.parent / "data", tokenizer)
    return run_trial(prepared, model, TrialPlan(32, HP, Seeds(1, 2, 3)))


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("crf", [False, True], ids=["linear", "crf"])
def test_tagging_head_trains(arch: str, crf: bool, tiny_models, tiny_ner: Path) -> None:
    if crf:
        tiny_ner.write_text(tiny_ner.read_text().replace("crf: false", "crf: true"))
    record = _train(tiny_ner, str(tiny_models[arch]))
    assert not (record["reason"] or "").startswith("error"), record["reason"]
    assert len(record["loss_curve"]) == 4 and all(math.isfinite(v) for v in record["loss_curve"])
    assert 0.0 <= record["score"] <= 1.0 and "entity_f1_strict" in record["scores"]


def test_roberta_with_byte_level_bpe_and_deberta_with_unigram(tiny_models, tiny_tokenizers, tiny_ner) -> None:  # noqa: ANN001
    for arch, family in (("roberta", "bpe"), ("deberta-v2", "unigram")):
        record = _train(tiny_ner, str(tiny_models[arch]), tiny_tokenizers[family])
        assert record["reason"] is None or "threshold" in record["reason"], record["reason"]
