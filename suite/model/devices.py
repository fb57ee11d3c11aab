"""Where trials run: CPU in fp32, or one CUDA device per worker in bf16-mixed.

A study scales over GPUs the way sweeps do, by workers (one per GPU), not by spreading one small
trial over several devices: a multi-device trial would need planning in one rank only, the order
seed in the distributed sampler and predictions gathered across ranks, for no gain at these sizes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import torch

from suite.errors import SpecError

_CPU = ("cpu",)
_GPU = ("gpu", "cuda")


def resolve_trainer(options: dict[str, Any]) -> dict[str, Any]:
    """The Lightning options every trial of a study runs with, made explicit (they are part of
    the study's fingerprint): `auto` or nothing -> $SUITE_ACCELERATOR if set (the tests pin the
    CPU with it, tests/conftest.py), else CUDA when present, else CPU; precision
    bf16-mixed on a GPU with native bf16 (compute capability 8.0+; fp32 on older cards, where torch
    emulates bf16, and on the CPU, where bf16 autocast is ~20x slower)."""
    accelerator = str(options.get("accelerator") or os.environ.get("SUITE_ACCELERATOR") or "auto").lower()
    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator not in _CPU + _GPU:
        raise SpecError(f"--accelerator: expected cpu, gpu or auto, got {accelerator!r}")
    if accelerator in _GPU and not torch.cuda.is_available():
        raise SpecError("--accelerator gpu: no CUDA device is visible on this machine")
    devices = str(options.get("devices", 1))
    if devices != "1":
        raise SpecError(
            f"--devices {devices}: a trial runs on one device; use --workers N to run N trials at once "
            "(one worker per GPU)"
        )
    if options.get("strategy") not in (None, "auto", "single_device"):
        raise SpecError(f"--strategy {options['strategy']}: a trial runs on one device (use --workers)")
    gpu = accelerator in _GPU
    native_bf16 = gpu and torch.cuda.is_bf16_supported(including_emulation=False)
    default_precision = "bf16-mixed" if native_bf16 else "32-true"
    return {
        "accelerator": "gpu" if gpu else "cpu",
        "devices": 1,
        "precision": str(options.get("precision") or default_precision),
    }


CGROUP = Path("/sys/fs/cgroup")  # cgroup v2 (cpu.max); v1 keeps cpu/cpu.cfs_quota_us and cfs_period_us


def usable_cpus() -> tuple[int, str]:
    """The CPUs this process may use, and why: its affinity mask (taskset, a scheduler's allocation)
    capped by the cgroup CPU quota (a container's `--cpus`); `os.cpu_count()` counts the whole node."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_quota()
    if quota is not None and math.ceil(quota) < affinity:
        return max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g} of {affinity} CPUs in the affinity mask"
    return affinity, f"{affinity} CPUs in the affinity mask" + (
        "" if quota is None else f" (quota {quota:g})"
    )


def cgroup_quota() -> float | None:
    """CPUs the cgroup quota allows (quota / period), None when unlimited or unknown."""
    for quota_file, period_file in (
        (CGROUP / "cpu.max", None),
        (CGROUP / "cpu/cpu.cfs_quota_us", CGROUP / "cpu/cpu.cfs_period_us"),
    ):
        try:
            fields = quota_file.read_text().split()
            period = fields[1] if period_file is None else period_file.read_text().strip()
        except (OSError, IndexError):
            continue
        if fields[0] in ("max", "-1"):
            return None
        return int(fields[0]) / int(period)
    return None


def resolve_workers(
    workers: str | int, trainer: dict[str, Any], threads: int, trials: int | None = None
) -> tuple[int, str]:
    """`--workers` and why: a positive count, or `auto`: one worker per GPU, or on CPU one
    single-threaded worker per thread (2 processes x 1 thread ran a 4-trial RTE sweep 1.2x faster
    than 1 x 2: benchmarks/sweep.py --workers-check), never more than the planned `trials`."""
    if str(workers) == "auto":
        gpu = trainer["accelerator"] == "gpu"
        count = max(1, torch.cuda.device_count()) if gpu else max(1, threads)
        why = f"{count} GPU(s)" if gpu else f"{threads} threads"
        if trials is not None and trials < count:
            count, why = max(1, trials), f"{why}, capped at the {trials} planned trials"
        return count, f"--workers auto: {count} ({why})"
    try:
        count = int(workers)
    except ValueError:
        count = 0
    if count < 1:
        raise SpecError(f"--workers: expected a positive integer or auto, got {workers!r}")
    return count, f"--workers {count}"


def visible_devices() -> list[str]:
    """The devices this process may use, as the parent's `CUDA_VISIBLE_DEVICES` names them (indices,
    GPU-/MIG- UUIDs): a shared node or a scheduler's allocation (`4,5`) must not become `0,1`, another
    job's GPUs. Unset: every device torch sees, by index."""
    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        return [str(i) for i in range(torch.cuda.device_count())]
    return [d.strip() for d in given.split(",") if d.strip()]


def worker_environment(index: int, trainer: dict[str, Any]) -> dict[str, str]:
    """Environment variables for local worker `index`: on GPUs, pins it to one of the parent's
    visible devices (round robin when there are more workers than devices, e.g. `--workers-per-gpu`)."""
    if trainer.get("accelerator") != "gpu":
        return {}
    devices = visible_devices() or ["0"]
    return {"CUDA_VISIBLE_DEVICES": devices[index % len(devices)]}
