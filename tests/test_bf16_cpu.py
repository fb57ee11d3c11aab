"""The GPU's default precision, bf16-mixed, run on the CPU: every head and recipe trains under it
(fused AdamW once made Lightning refuse to clip there, and every GPU trial errored), a clipped
bf16 step is the clipped fp32 step within bf16's rounding, and the replicas path runs under it.
Tiny encoders, in-process: each trial takes about a second."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from torch import nn

from suite.config.sweep import HParams
from suite.config.task import load_task
from suite.heads.registry import PreparedTask, prepare_task
from suite.model.encoders import load_encoder, load_tokenizer
from suite.model.optim import adamw_implementation
from suite.training.replicas import run_replicates
from suite.training.trial import run_trial
from suite.training.trial_plan import Seeds, TrialPlan
from tests.conftest import REPO, run_tiny

BF16 = {"precision": "bf16-mixed"}
HP = dict(lr=1e-3, batch_size=8, epochs=1)


def _prepared(task: Path, model: Path, data: Path | None = None) -> PreparedTask:
    root = data or (task.parent.parent / "data")
    return prepare_task(load_task(task), root, load_tokenizer(str(model)))


def trains_as_a_run(
    record: dict[str, Any], precision: str = "bf16-mixed", optimizer: str | None = None
) -> None:
    """Ended as a run (succeeded or failed by the task's rule, not errored nor diverged), with a
    finite score, under `precision` and the optimizer that precision takes."""
    assert record["outcome"] in ("succeeded", "failed"), record.get("reason")
    assert record["failure"] != "diverged", record["reason"]
    assert record["score"] is not None and math.isfinite(record["score"])
    assert record["trainer"]["precision"] == precision
    assert record["optimizer"] == (optimizer or f"adamw-{adamw_implementation(precision)}")
    assert record["loss_curve"] and all(math.isfinite(v) for v in record["loss_curve"])


def test_mixed_precision_takes_an_unfused_adamw_and_full_precision_the_fused_one() -> None:
    assert [adamw_implementation(p) for p in ("32-true", "bf16-true", "bf16-mixed", "16-mixed")] == [
        "fused",
        "fused",
        "foreach",
        "foreach",
    ]


def _regression_task(tiny_task: Path) -> Path:
    """The tiny pair task with a numeric label (1 when both sentences share their first word)."""
    data = tiny_task.parent.parent / "data" / "tiny"
    for name in ("train.tsv", "dev.tsv"):
        path = data / name
        path.write_text(path.read_text().replace("\tyes\n", "\t1.0\n").replace("\tno\n", "\t0.0\n"))
    text = tiny_task.read_text().replace("labels: ['no', 'yes']\n", "regression: true\n")
    tiny_task.write_text(text.replace("metric: {main: accuracy, extra: [f1]}", "metric: {main: pearson}"))
    return tiny_task


def _crf(tiny_ner: Path) -> Path:
    tiny_ner.write_text(tiny_ner.read_text().replace("crf: false", "crf: true"))
    return tiny_ner


def _squad(tmp_path: Path) -> Path:
    text = (REPO / "tasks/squad.yaml").read_text().replace("eval_limit: 300", "eval_limit: 8")
    (tmp_path / "squad.yaml").write_text(text)
    return tmp_path / "squad.yaml"


HEADS = ["classification", "regression", "tagging", "crf", "span"]


def head_trial(
    head: str, model: Path, tiny_task: Path, tiny_ner: Path, shared_data: Path, tmp_path: Path, trainer: dict
) -> dict[str, Any]:
    """One full fine-tuning trial of `head` on its tiny task under `trainer` (also tests/test_gpu.py)."""
    if head == "classification":
        task, size = _prepared(tiny_task, model), 32
    elif head == "regression":
        task, size = _prepared(_regression_task(tiny_task), model), 32
    elif head in ("tagging", "crf"):
        ner = _crf(tiny_ner) if head == "crf" else tiny_ner
        task, size = _prepared(ner, model, ner.parent / "data"), 32
        assert task.spec.tagging.crf == (head == "crf")
    else:
        task, size = _prepared(_squad(tmp_path), model, shared_data), 16
    seeds = Seeds(1, 2, 42 if head == "span" else 3)  # a few-shot split's seed
    return run_trial(task, str(model), TrialPlan(size, HParams(**HP), seeds), trainer=trainer)


@pytest.mark.parametrize("head", HEADS)
def test_every_head_trains_under_bf16_mixed(
    head: str, tiny_models, tiny_task: Path, tiny_ner: Path, shared_data: Path, tmp_path: Path
) -> None:  # noqa: ANN001
    record = head_trial(head, tiny_models["bert"], tiny_task, tiny_ner, shared_data, tmp_path, BF16)
    trains_as_a_run(record)


RECIPES = {  # every recipe and stabiliser the sweeps offer, on the classification head
    "lora": dict(adapter="lora", lora_r=4, lora_alpha=8.0),
    "bitfit": dict(adapter="bitfit"),
    "reinit": dict(reinit_layers=1),
    "llrd-head-lr": dict(llrd=0.8, head_lr_mult=2.0),
    "bert-adam": dict(bias_correction=False),
    "linear-probe": dict(freeze="encoder", lr=1e-2),
    "feature-based": dict(freeze="encoder", features="last4", classifier="cls"),
    "frozen-embeddings-mean": dict(freeze="embeddings", classifier="mean", split_batches=True),
}


def recipe_trial(recipe: str, model: Path, tiny_task: Path, trainer: dict) -> dict[str, Any]:
    """One trial of `recipe` on the tiny classification task under `trainer` (also tests/test_gpu.py)."""
    hparams = HParams(**{**HP, **RECIPES[recipe]})
    return run_trial(
        _prepared(tiny_task, model), str(model), TrialPlan(32, hparams, Seeds(1, 2, 3)), trainer=trainer
    )


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_trains_under_bf16_mixed(
    recipe: str, tiny_models, four_layers: Path, tiny_task: Path
) -> None:  # noqa: ANN001
    record = recipe_trial(
        recipe, four_layers if recipe == "feature-based" else tiny_models["bert"], tiny_task, BF16
    )
    trains_as_a_run(record, optimizer="bert-adam" if recipe == "bert-adam" else "adamw-foreach")


def test_replicates_train_under_bf16_mixed(tiny_models, tiny_task: Path) -> None:  # noqa: ANN001
    model = tiny_models["bert"]
    plans = [TrialPlan(32, HParams(**HP), Seeds(10 + r, 20 + r, 5)) for r in range(3)]
    for record in run_replicates(_prepared(tiny_task, model), str(model), plans, trainer=BF16):
        trains_as_a_run(record)


def test_a_bf16_study_runs_end_to_end_and_its_optimizer_is_in_its_identity(
    tiny_task: Path, tiny_models
) -> None:  # noqa: ANN001
    folder = run_tiny(tiny_task, tiny_models["bert"], "--precision", "bf16-mixed")
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 3
    for record in records:
        trains_as_a_run(record)
    import optuna

    (name,) = optuna.get_all_study_names(f"sqlite:///{folder / 'study.db'}")
    stored = optuna.load_study(study_name=name, storage=f"sqlite:///{folder / 'study.db'}").user_attrs
    assert stored["fingerprint"]["optimizer.adamw"] == "foreach"
    assert stored["fingerprint"]["trainer.precision"] == "bf16-mixed"


class _ClippedGradients(L.Callback):
    """The gradients the optimizer stepped with (after Lightning clipped them), on the first step
    (the closure runs inside `step`: a pre-hook would see none)."""

    def __init__(self) -> None:
        self.grads: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer: L.Trainer, module: Any) -> None:
        names = {id(p): n for n, p in module.named_parameters()}

        def keep(optimizer: torch.optim.Optimizer, *_: Any) -> None:
            if not self.grads:
                for group in optimizer.param_groups:
                    grads = {names[id(p)]: p.grad for p in group["params"] if p.grad is not None}
                    self.grads.update({n: g.float().clone() for n, g in grads.items()})

        trainer.optimizers[0].register_step_post_hook(keep)  # grads are kept until the next step


MAX_NORM = 0.05  # far below the tiny model's gradient norm: the step is clipped at both precisions
# bf16 keeps 8 bits of mantissa: through the tiny two-layer encoder the clipped gradient moved by
# 0.4% (relative L2 distance from the fp32 one, measured); 2% leaves room for other kernels.
TOLERANCE = 0.02


def _clipped_step(task: PreparedTask, model: Path, precision: str) -> tuple[dict[str, torch.Tensor], float]:
    torch.manual_seed(0)
    hparams = HParams(lr=1e-3, batch_size=8, epochs=1, max_grad_norm=MAX_NORM)
    module = task.build_module(load_encoder(str(model)), hparams)
    for layer in module.modules():  # no dropout: both precisions see the same network
        if isinstance(layer, nn.Dropout):
            layer.p = 0.0
    from suite.data.module import FeatureDataModule

    data = task.data
    train = data.features("train", data.train_indices(32, 3))
    loader = FeatureDataModule(train, train, 8, 2, task.collate).train_dataloader()  # seeded order
    seen = _ClippedGradients()
    trainer = L.Trainer(
        accelerator="cpu",
        precision=precision,
        max_steps=1,
        gradient_clip_val=MAX_NORM,
        callbacks=[seen],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, train_dataloaders=loader)
    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in seen.grads.values()])).item()
    return seen.grads, total


def test_a_clipped_bf16_step_is_the_clipped_fp32_step(tiny_models, tiny_task: Path) -> None:  # noqa: ANN001
    model = tiny_models["bert"]
    task = _prepared(tiny_task, model)
    fp32, fp32_norm = _clipped_step(task, model, "32-true")
    bf16, bf16_norm = _clipped_step(task, model, "bf16-mixed")
    assert fp32.keys() == bf16.keys() and fp32
    # Clipping holds at both: the norm the optimizer sees is the clipping norm (it was far above).
    assert fp32_norm == pytest.approx(MAX_NORM, rel=1e-3) and bf16_norm == pytest.approx(MAX_NORM, rel=1e-3)
    a, b = (torch.cat([g[n].flatten() for n in sorted(fp32)]) for g in (fp32, bf16))
    assert (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(a)).item() < TOLERANCE


def test_the_adapters_sweep_runs_end_to_end_under_bf16_mixed(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    """`suite run sst2 --sweep adapters --precision bf16-mixed` as a tiny study: full fine-tuning,
    LoRA and BitFit on one seed, every trial a run with a finite score."""
    sweep = str(REPO / "sweeps/adapters.yaml")
    args = (
        "--sweep",
        sweep,
        "--profile",
        "smoke",
        "--set",
        "sizes=[32]",
        "--seeds",
        "1",
        "--precision",
        "bf16-mixed",
    )
    folder = run_tiny(tiny_task, tiny_models["bert"], *args)
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert sorted({r["hparams"].get("adapter", "none") for r in records}) == ["bitfit", "lora", "none"]
    assert len(records) == 3
    for record in records:
        trains_as_a_run(record)
