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
