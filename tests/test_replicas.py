"""Replicate-parallel training (suite/training/replicas.py) against sequential `run_trial`."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.errors import SuiteError
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_tokenizer
from suite.training.replicas import TRAINING_CODE, _Group, run_replicates
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import WORDS, save_tiny_models

pytestmark = pytest.mark.trains  # its fixtures build and train tiny models

FAMILIES = ["bert", "roberta", "distilbert", "albert", "electra", "deberta-v2"]


@pytest.fixture(scope="module")
def no_dropout(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random encoder of each supported family with every dropout probability 0."""

    def no_dropout(config: Any) -> None:
        for name, value in config.to_dict().items():
            if "dropout" in name and isinstance(value, float):
                setattr(config, name, 0.0)
        config.classifier_dropout = 0.0  # None: the head would fall back to hidden dropout

    return save_tiny_models(tmp_path_factory.mktemp("models"), FAMILIES, no_dropout)


@pytest.fixture
def no_dropout_bert(no_dropout) -> Path:
    return no_dropout["bert"]


def _rows(n: int, seed: int) -> list[str]:
    """Sentence pairs of 1-12 words each: batches of very different lengths."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a = [rng.choice(WORDS) for _ in range(rng.randint(1, 12))]
        b = [a[0] if i % 2 else rng.choice(WORDS)] + [rng.choice(WORDS) for _ in range(rng.randint(0, 11))]
        rows.append(f"{' '.join(a)}\t{' '.join(b)}\t{'yes' if i % 2 else 'no'}")
    return rows


@pytest.fixture
def ragged_task(tiny_task: Path) -> Path:
    """The tiny pair task (tests/conftest.py) with ragged rows instead of its 4-word ones."""
    data = tiny_task.parent.parent / "data" / "tiny"
    for name, n, seed in (("train.tsv", 40, 1), ("dev.tsv", 20, 2)):
        (data / name).write_text("s1\ts2\tlabel\n" + "\n".join(_rows(n, seed)) + "\n")
    return tiny_task


def _prepared(task: Path, model: Path) -> PreparedTask:
    return prepare_task(load_task(task), task.parent.parent / "data", load_tokenizer(str(model)))


def _plans(hparams: HParams, replicas: int = 3, size: int = 28) -> list[TrialPlan]:
    return [TrialPlan(size, hparams, Seeds(init=10 + r, order=20 + r, subsample=5)) for r in range(replicas)]


# A small clipping norm: every step is clipped, so clipping over the stack instead of per
# replicate changes every update. 28 examples in batches of 8: a short last batch, which whole-set
# buckets put at a different step per replicate (the batch dimension is padded too).
SETTINGS = {
    "adamw": HParams(lr=1e-3, batch_size=8, epochs=2, max_grad_norm=0.05),
    "bertadam-buckets-llrd": HParams(
        lr=1e-3,
        batch_size=8,
        epochs=2,
        max_grad_norm=0.05,
        bias_correction=False,
        group_by_length=True,
        llrd=0.8,
        head_lr_mult=2.0,
        warmup_ratio=0.3,
    ),
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_replicates_equal_sequential_training_without_dropout(setting, ragged_task, no_dropout_bert) -> None:
    prepared = _prepared(ragged_task, no_dropout_bert)
    plans = _plans(SETTINGS[setting])
    group = run_replicates(prepared, str(no_dropout_bert), plans)
    for plan, parallel in zip(plans, group, strict=True):
        sequential = run_trial(prepared, str(no_dropout_bert), plan)
        assert parallel["outcome"] == sequential["outcome"] != "errored", parallel.get("reason")
        assert set(sequential) <= set(parallel)
        # loss_curve is rounded to 5 decimals: one unit of the last place, plus float noise.
        assert len(parallel["loss_curve"]) == len(sequential["loss_curve"]) == 8
        assert parallel["loss_curve"] == pytest.approx(sequential["loss_curve"], abs=2e-5, rel=1e-5)
        assert parallel["epochs"] == sequential["epochs"] and len(parallel["epochs"]) == 2
        assert parallel["per_example"] == sequential["per_example"]
        assert parallel["tokens"] == sequential["tokens"]
        for field in ("key", "n_train", "n_dev", "head", "epochs_run", "score", "scores", "failure"):
            assert parallel[field] == sequential[field], field
        assert parallel["training_code"] == TRAINING_CODE
        assert parallel["replicate_group"] == [p.key for p in plans]
    # The replicates did train differently (their seeds matter), so equality above is per replicate.
    assert group[0]["loss_curve"] != group[1]["loss_curve"]


@pytest.mark.parametrize("arch", [a for a in FAMILIES if a != "bert"])
def test_every_supported_family_matches_sequential(arch, ragged_task, no_dropout) -> None:
    """Each family takes its padding mask its own way (suite.training.replicas.MASK_KIND)."""
    model = str(no_dropout[arch])
    prepared = _prepared(ragged_task, no_dropout[arch])
    plans = _plans(HParams(lr=1e-3, batch_size=8, epochs=1, max_grad_norm=0.05), replicas=2)
    for plan, parallel in zip(plans, run_replicates(prepared, model, plans), strict=True):
        sequential = run_trial(prepared, model, plan)
        assert parallel["outcome"] != "errored", parallel["reason"]
        assert parallel["loss_curve"] == pytest.approx(sequential["loss_curve"], abs=2e-5, rel=1e-5)
        assert parallel["per_example"] == sequential["per_example"]


def test_dropout_masks_differ_per_replicate_and_the_group_is_reproducible(tiny_models, ragged_task) -> None:
    model = tiny_models["bert"]  # dropout 0.1
    prepared = _prepared(ragged_task, model)
    hparams = HParams(lr=1e-3, batch_size=8, epochs=1)
    # Same init seed, so both replicates hold identical weights: fed the same batch, their
    # losses differ only by their dropout masks.
    plans = [TrialPlan(28, hparams, Seeds(init=1, order=order, subsample=5)) for order in (2, 3)]
    records = [dict(n=0) for _ in plans]
    group = _Group(prepared, str(model), plans, records, {"accelerator": "cpu", "precision": "32-true"})
    batch = next(iter(group.loaders[0]))
    stacked = group._stack([batch, batch])
    loss = torch.vmap(group._loss, randomness="different")
    torch.manual_seed(0)
    train = loss(group.params, stacked)
    assert train[0] != train[1]
    group.skeleton.eval()
    evaluated = loss(group.params, stacked)
    assert evaluated[0].item() == pytest.approx(evaluated[1].item(), rel=1e-6)

    a = run_replicates(prepared, str(model), plans)
    b = run_replicates(prepared, str(model), plans)
    assert [r["loss_curve"] for r in a] == [r["loss_curve"] for r in b]
    assert [r["epochs"] for r in a] == [r["epochs"] for r in b]
    assert a[0]["dropout_seed"] == b[1]["dropout_seed"]
    assert a[0]["loss_curve"] != a[1]["loss_curve"]


def test_a_group_that_is_not_seed_replicates_is_refused(ragged_task, no_dropout_bert, tiny_models) -> None:
    prepared = _prepared(ragged_task, no_dropout_bert)
    model = str(no_dropout_bert)
    hp = HParams(lr=1e-3, batch_size=8, epochs=1)
    base = TrialPlan(28, hp, Seeds(1, 2, 3))
    for other, what in (
        (TrialPlan(28, HParams(lr=2e-3, batch_size=8, epochs=1), Seeds(4, 5, 3)), "hparams"),
        (TrialPlan(20, hp, Seeds(4, 5, 3)), "size"),
        (TrialPlan(28, hp, Seeds(4, 5, 6)), "subsample seed"),
        (base, "listed twice"),
    ):
        with pytest.raises(SuiteError, match=what):
            run_replicates(prepared, model, [base, other])
    tagging = dataclasses.replace(prepared, spec=prepared.spec.model_copy(update={"head": "tagging"}))
    with pytest.raises(SuiteError, match="classification head only"):
        run_replicates(tagging, model, [base])
    with pytest.raises(SuiteError, match="no plans"):
        run_replicates(prepared, model, [])
    split = TrialPlan(28, HParams(lr=1e-3, batch_size=8, epochs=1, split_batches=True), Seeds(1, 2, 3))
    with pytest.raises(SuiteError, match="split_batches"):
        run_replicates(prepared, model, [split])
    # ModernBERT builds a sliding-window mask from the same argument: refused, not trained wrong.
    modernbert = _prepared(ragged_task, tiny_models["modernbert"])
    with pytest.raises(SuiteError, match="modernbert encoders are not supported"):
        run_replicates(modernbert, str(tiny_models["modernbert"]), [base])


def test_a_diverged_replicate_stops_alone(ragged_task, no_dropout_bert, monkeypatch) -> None:
    prepared = _prepared(ragged_task, no_dropout_bert)
    plans = _plans(SETTINGS["adamw"], replicas=2)
    clean = run_replicates(prepared, str(no_dropout_bert), plans)
    record_step = _Group._record_step

    def nan_at_step_5(self, step, losses, batches):  # noqa: ANN001, ANN202
        return record_step(
            self, step, [float("nan") if step == 5 and r == 1 else v for r, v in enumerate(losses)], batches
        )

    monkeypatch.setattr(_Group, "_record_step", nan_at_step_5)
    kept, diverged = run_replicates(prepared, str(no_dropout_bert), plans)
    assert diverged["outcome"] == "failed" and diverged["failure"] == "diverged"
    assert diverged["reason"] == "diverged: non-finite training loss (nan) at step 5"
    assert (
        diverged["loss_curve"] == clean[1]["loss_curve"][:5] and diverged["epochs"] == clean[1]["epochs"][:1]
    )
    assert diverged["score"] is None and diverged["last_score"] == clean[1]["epochs"][0]["accuracy"]
    for field in ("loss_curve", "epochs", "outcome", "score"):
        assert kept[field] == clean[0][field], field
