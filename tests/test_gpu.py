"""All three heads on CUDA (bf16-mixed), through `suite run` as a user runs it, and what the GPU
path changes: no host sync per training step from the suite's own code, batches computed whole
(`piece_cost` None), Viterbi on one CPU copy, fp32 output layers. Skipped on a machine without a
GPU; run with `pytest -m gpu` where one is present (these tests are not pinned to the CPU)."""

from __future__ import annotations

import json
import math
import os
import random
import warnings
from pathlib import Path

import pytest
import torch

from suite.commands.cli import main
from tests.conftest import REPO
from tests.test_bf16_cpu import HEADS, RECIPES, head_trial, recipe_trial, trains_as_a_run

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
    for r in records:  # the presets split batches on a CPU; on a GPU they are computed whole
        assert r["hparams"]["split_batches"] and r["piece_cost"] is None
        steps = math.ceil(r["n_train"] / r["hparams"]["batch_size"]) * r["epochs_run"]
        assert len(r["loss_curve"]) == steps and all(math.isfinite(v) for v in r["loss_curve"])


def test_gpu_tests_are_not_pinned_to_the_cpu() -> None:
    from suite.model.devices import resolve_trainer

    assert "SUITE_ACCELERATOR" not in os.environ
    assert resolve_trainer({})["accelerator"] == "gpu"


def _tagging_module(tiny_models, tiny_ner: Path):  # noqa: ANN001, ANN202
    """The tiny NER task and its linear tagging head on a tiny BERT, with `split_batches`."""
    from suite.config.sweep import HParams
    from suite.config.task import load_task
    from suite.heads.registry import prepare_task
    from suite.model.encoders import load_encoder, load_tokenizer

    model = str(tiny_models["bert"])
    task = prepare_task(load_task(tiny_ner), tiny_ner.parent / "data", load_tokenizer(model))
    torch.manual_seed(0)
    hparams = HParams(lr=1e-3, batch_size=8, epochs=1, split_batches=True)
    return task, task.build_module(load_encoder(model), hparams)


def test_training_steps_do_not_wait_for_the_gpu(tiny_models, tiny_ner: Path) -> None:  # noqa: ANN001
    """torch's sync debug mode warns at every host sync: none may come from the suite's own code
    in a training step (pieces, shares and token counts are decided on the CPU; losses are read
    back every few steps). Library code (transformers, pytorch-crf's checks) is not ours to judge."""
    from lightning.fabric.utilities.apply_func import move_data_to_device

    task, module = _tagging_module(tiny_models, tiny_ner)
    module.to("cuda").train()
    data = task.data
    features = data.features("train", data.train_indices(32, 3))
    batches = [task.collate(random.Random(i).sample(features, 8)) for i in range(4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for batch in batches:
                work = move_data_to_device(module.step_work(batch), torch.device("cuda"))
                module.training_step(work, 0).backward()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    ours = [w for w in caught if "synchroniz" in str(w.message) and f"{os.sep}suite{os.sep}" in w.filename]
    assert not ours, [(w.filename, w.lineno) for w in ours]
    assert len(module._unread) == 4 and module.loss_curve == []  # still on the device
    module.record_steps()
    assert len(module.loss_curve) == 4 and module.tokens["real"] > 0


def test_crf_decode_on_cuda_is_pytorch_crfs_on_the_cpu() -> None:
    from torchcrf import CRF

    from suite.data.tagging import tag_vocabulary
    from suite.heads.tagging import ConstrainedCRF

    crf = ConstrainedCRF(tag_vocabulary(["PER", "LOC"]))
    torch.manual_seed(0)
    emissions = torch.randn(16, 40, 5) * 3
    mask = torch.arange(40) < torch.randint(1, 41, (16, 1))
    expected = CRF.decode(crf, emissions, mask=mask.to(torch.uint8))
    crf.to("cuda")
    assert crf.decode(emissions.cuda(), mask=mask.cuda()) == expected
    rounded = emissions.bfloat16()  # bf16 emissions decode as their fp32 values
    assert crf.decode(rounded.cuda(), mask=mask.cuda()) == CRF.decode(
        crf.cpu(), rounded.float(), mask=mask.to(torch.uint8)
    )


def test_output_layers_are_fp32_under_bf16_mixed_on_cuda(tiny_models) -> None:  # noqa: ANN001
    from suite.config.sweep import HParams
    from suite.heads.classification import ClassificationModule
    from suite.heads.span import SpanModule
    from suite.model.encoders import load_encoder

    hp = HParams(lr=1e-3, batch_size=8, epochs=1)
    batch = {
        "input_ids": torch.tensor([[101, 2023, 2003, 1037, 102], [101, 7592, 102, 0, 0]]).cuda(),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]).cuda(),
    }
    model = str(tiny_models["bert"])
    span = SpanModule(load_encoder(model), hp, lambda s, e: ({}, {})).cuda().eval()
    stsb = ClassificationModule(load_encoder(model), hp, 1, ["spearman"], regression=True, classifier="auto")
    stsb = stsb.cuda().eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        start, end = span(batch)
        scores = stsb(batch)
    assert start.dtype == end.dtype == scores.dtype == torch.float32
    assert not torch.equal(scores, scores.bfloat16().float())  # not rounded to bf16's ~0.02 steps


def test_two_workers_on_cuda_run_each_planned_trial_once_on_a_gpu(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    """`--workers 2` on the GPUs: the first worker plans, then starts afresh as a worker pinned to
    its device (it planned before its device was known; the pinning itself: tests/test_devices.py);
    the study ends with each planned trial run once, on a GPU."""
    from tests.conftest import run_tiny

    folder = run_tiny(tiny_task, tiny_models["bert"], "--workers", "2", "--seeds", "4")
    records = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
    assert len(records) == len({r["key"] for r in records}) == 4
    assert all(r["trainer"]["accelerator"] == "gpu" for r in records)


# Pairwise coverage on the card: each head at each precision on full fine-tuning, each recipe on
# classification at bf16 (the CPU runs the same trials at bf16-mixed: tests/test_bf16_cpu.py).
PRECISIONS = ["32-true", "bf16-mixed", "16-mixed"]  # 16-mixed (a gradient scaler): a GPU only


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("head", HEADS)
def test_every_head_trains_on_cuda_at_every_precision(
    head: str, precision: str, tiny_models, tiny_task: Path, tiny_ner: Path, shared_data: Path, tmp_path: Path
) -> None:  # noqa: ANN001
    trainer = {"accelerator": "gpu", "precision": precision}
    record = head_trial(head, tiny_models["bert"], tiny_task, tiny_ner, shared_data, tmp_path, trainer)
    trains_as_a_run(record, precision)
    assert record["trainer"]["accelerator"] == "gpu" and record["peak_gpu_mb"] > 0


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_every_recipe_trains_on_cuda_at_bf16(
    recipe: str, tiny_models, four_layers: Path, tiny_task: Path
) -> None:  # noqa: ANN001
    model = four_layers if recipe == "feature-based" else tiny_models["bert"]
    record = recipe_trial(recipe, model, tiny_task, {"accelerator": "gpu", "precision": "bf16-mixed"})
    trains_as_a_run(record, optimizer="bert-adam" if recipe == "bert-adam" else "adamw-foreach")


def test_replicates_on_cuda_at_bf16_equal_their_sequential_trials_without_dropout(
    tiny_task: Path, tmp_path: Path
) -> None:  # noqa: E501
    """R = 3 replicates under bf16-mixed on the card, dropout 0: each replicate's loss curve is its
    sequential trial's within bf16's rounding (2% relative: the two paths batch their matrix
    products differently), and every one ends as a run."""
    from suite.config.sweep import HParams
    from suite.training.replicas import run_replicates
    from suite.training.trial import run_trial
    from suite.training.trial_plan import Seeds, TrialPlan
    from tests.conftest import save_tiny_models
    from tests.test_bf16_cpu import _prepared

    def no_dropout(config: object) -> None:
        for name, value in config.to_dict().items():
            if "dropout" in name and isinstance(value, float):
                setattr(config, name, 0.0)
        config.classifier_dropout = 0.0

    model = save_tiny_models(tmp_path / "models", ["bert"], no_dropout)["bert"]
    task, gpu = _prepared(tiny_task, model), {"accelerator": "gpu", "precision": "bf16-mixed"}
    plans = [
        TrialPlan(32, HParams(lr=1e-3, batch_size=8, epochs=2), Seeds(10 + r, 20 + r, 5)) for r in range(3)
    ]
    for plan, parallel in zip(plans, run_replicates(task, str(model), plans, trainer=gpu), strict=True):
        sequential = run_trial(task, str(model), plan, trainer=gpu)
        trains_as_a_run(parallel)
        assert parallel["loss_curve"] == pytest.approx(sequential["loss_curve"], rel=2e-2, abs=1e-3)


def test_the_gpu_memory_probe_covers_a_trials_recorded_peak(tiny_models, tiny_task: Path) -> None:  # noqa: ANN001
    """`--workers auto` sizes workers per card from a probed step at the largest batch and length:
    it is at least what a trial of a smaller batch and shorter texts records."""
    from suite.model.gpu_memory import CONTEXT_MB, probe_peak_mb

    model = tiny_models["bert"]
    record = recipe_trial("bitfit", model, tiny_task, {"accelerator": "gpu", "precision": "bf16-mixed"})
    probed = probe_peak_mb(str(model), 16, 128, "bf16-mixed")
    assert CONTEXT_MB < record["peak_gpu_mb"] <= probed


def test_plan_estimates_a_gpu_study_from_a_gpu_calibration(tiny_task: Path, tiny_models, capsys) -> None:  # noqa: ANN001
    from suite.commands.cli import main

    root = tiny_task.parent.parent
    args = ["plan", str(tiny_task), "--model", str(tiny_models["bert"]), "--data-dir", str(root / "data")]
    torch.cuda.reset_peak_memory_stats()
    assert main([*args, "--out", str(root / "runs"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "estimate: ~" in out and "s/step" in out and "GPU(s) at one worker's pace" in out
    assert torch.cuda.max_memory_allocated() > 0  # the calibration trained on the card
