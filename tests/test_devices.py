"""Where trials run: explicit, recorded options; one device per trial; one GPU per worker."""

from __future__ import annotations

import pytest
import torch

from suite.errors import SpecError
from suite.model.devices import resolve_trainer, worker_environment


def test_cpu_default_is_explicit_fp32() -> None:
    expected = "gpu" if torch.cuda.is_available() else "cpu"
    assert resolve_trainer({})["accelerator"] == expected
    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert resolve_trainer({"accelerator": "cpu"}) == cpu
    assert resolve_trainer({"accelerator": "cpu", "precision": "bf16-mixed"})["precision"] == "bf16-mixed"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"devices": 2}, "--devices 2"),
        ({"devices": "auto"}, "--devices auto"),
        ({"strategy": "ddp"}, "--strategy ddp"),
        ({"accelerator": "tpu"}, "--accelerator"),
    ],
)
def test_multi_device_trials_are_refused_with_one_line(options: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        resolve_trainer({"accelerator": "cpu", **options} if "accelerator" not in options else options)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_without_cuda_is_a_user_error() -> None:
    with pytest.raises(SpecError, match="no CUDA device"):
        resolve_trainer({"accelerator": "gpu"})


def test_workers_are_pinned_round_robin_on_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    assert [worker_environment(i, gpu) for i in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
        {"CUDA_VISIBLE_DEVICES": "0"},
    ]
    assert worker_environment(0, {"accelerator": "cpu"}) == {}


def test_cli_refuses_a_multi_gpu_trial_before_training(tiny_task, tiny_models, tmp_path) -> None:  # noqa: ANN001
    from tests.conftest import run_tiny

    run_tiny(tiny_task, tiny_models["bert"], "--devices", "2", expect=2)


def test_workers_auto_is_one_per_gpu_or_one_per_cpu_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.model.devices import resolve_workers

    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert resolve_workers("auto", cpu, threads=2) == 2
    assert resolve_workers("3", cpu, threads=2) == 3
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert resolve_workers("auto", {**cpu, "accelerator": "gpu"}, threads=16) == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(SpecError, match="--workers"):
            resolve_workers(bad, cpu, threads=2)
