"""The device every way of a benchmark runs on, as the suite's trials would run there, and that
device's measured matmul peak: a ratio of a GPU run to a CPU peak (or of a GPU suite to CPU
baselines) would compare two machines, not two ways.

- `--device auto` (the default) is the trial's device: `suite.model.devices.resolve_trainer`'s
  choice (CUDA when present, else the CPU);
- precision follows the suite's default on that device: bf16 autocast on a GPU with native bf16,
  fp32 elsewhere;
- the peak is the best measured GEMM rate in that precision: fp32 on the CPU (BERT-layer shapes
  and a square one), bf16 on a GPU (the same shapes at GPU batch sizes and a large square one).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

DEVICES = ("auto", "cpu", "cuda")
# (m, k, n): a BERT-small layer's GEMMs at 2,048 tokens, and a square one.
CPU_SHAPES = ((2048, 384, 1536), (2048, 1536, 384), (1024, 1024, 1024))
# A BERT-base layer's at 16,384 tokens, and a square one large enough to reach a card's peak.
GPU_SHAPES = ((16384, 768, 3072), (16384, 3072, 768), (8192, 8192, 8192))


def resolve_device(name: str) -> str:
    """`cpu` or `cuda`: `auto` is where a trial of the suite would run."""
    from suite.model.devices import resolve_trainer

    if name not in DEVICES:
        raise ValueError(f"--device: expected one of {', '.join(DEVICES)}, got {name!r}")
    device = ("cuda" if resolve_trainer({})["accelerator"] == "gpu" else "cpu") if name == "auto" else name
    if device == "cuda" and torch.cuda.device_count() > 1:
        # Hugging Face's Trainer would spread its baselines over every visible GPU (DataParallel)
        # while a trial of the suite runs on one: the ratios would compare 1 GPU with several.
        raise SystemExit("benchmarks on cuda: make one GPU visible, e.g. CUDA_VISIBLE_DEVICES=0")
    return device


def accelerator(device: str) -> str:
    """The suite's `--accelerator` for a device."""
    return "gpu" if device == "cuda" else "cpu"


def precision(device: str) -> str:
    """The Lightning precision a trial uses by default on the device."""
    from suite.model.devices import resolve_trainer

    return resolve_trainer({"accelerator": accelerator(device)})["precision"]


def autocast(device: str) -> contextlib.AbstractContextManager:
    """The suite's default precision on the device, for a hand-written loop."""
    if precision(device) == "bf16-mixed":
        return torch.autocast(device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: str, threads: int, seconds: float = 3.0) -> tuple[float, str]:
    """(best GFLOP/s, its label): GEMMs in the precision trials use on the device."""
    torch.set_num_threads(threads)
    bf16 = device == "cuda" and precision(device) == "bf16-mixed"
    dtype = torch.bfloat16 if bf16 else torch.float32
    shapes = GPU_SHAPES if device == "cuda" else CPU_SHAPES
    best = max(_gemm_rate(m, k, n, device, dtype, seconds / len(shapes)) for m, k, n in shapes)
    return best, f"{'bf16' if bf16 else 'fp32'} matmul peak on {device_name(device)}"


def _gemm_rate(m: int, k: int, n: int, device: str, dtype: torch.dtype, seconds: float) -> float:
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    a @ b  # warm-up
    synchronize(device)
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        a @ b
        runs += 1
        if device == "cuda" and runs % 10 == 0:  # queue no further ahead than the clock reads
            synchronize(device)
    synchronize(device)
    return 2 * m * k * n * runs / (time.perf_counter() - start) / 1e9


def device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "CPU"


def to_device(batch: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
