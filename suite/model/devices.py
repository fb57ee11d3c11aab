"""Where trials run: CPU in fp32, or one CUDA device per worker in bf16-mixed.

A study scales over GPUs the way sweeps do, by workers (one per GPU), not by spreading one small
trial over several devices: a multi-device trial would need planning in one rank only, the order
seed in the distributed sampler and predictions gathered across ranks, for no gain at these sizes.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from suite.config.request import worker_count
from suite.errors import SpecError

_CPU = ("cpu",)
_GPU = ("gpu", "cuda")


def resolve_trainer(options: dict[str, Any], gpus: int | None = None) -> dict[str, Any]:
    """The Lightning options every trial of a study runs with, made explicit (they are part of
    the study's fingerprint): `auto` or nothing -> $SUITE_ACCELERATOR if set (the tests pin the
    CPU with it, tests/conftest.py), else CUDA when present, else CPU; precision
    bf16-mixed on a GPU with native bf16 (compute capability 8.0+; fp32 on older cards, where torch
    emulates bf16, and on the CPU, where bf16 autocast is ~20x slower).
    `gpus`: each worker's GPUs on a cluster node (`launch`), resolved without looking at this
    machine, often a login node without any: bf16 is then assumed (Ampere or newer)."""
    here = os.environ.get("SUITE_ACCELERATOR") if gpus is None else None  # this machine's, not the cluster's
    accelerator = str(options.get("accelerator") or here or "auto").lower()
    cuda = torch.cuda.is_available() if gpus is None else gpus > 0
    if accelerator == "auto":
        accelerator = "gpu" if cuda else "cpu"
    if accelerator not in _CPU + _GPU:
        raise SpecError(f"--accelerator: expected cpu, gpu or auto, got {accelerator!r}")
    if gpus is not None and (accelerator in _GPU) != cuda:
        raise SpecError(
            f"--accelerator {accelerator}: the workers have {gpus} GPU(s) each (--gpus-per-worker)"
        )
    if accelerator in _GPU and not cuda:
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
    native_bf16 = gpu and (gpus is not None or torch.cuda.is_bf16_supported(including_emulation=False))
    default_precision = "bf16-mixed" if native_bf16 else "32-true"
    precision = str(options.get("precision") or default_precision)
    precision = _PRECISION_ALIASES.get(precision, precision)  # what Lightning runs: one name in the record
    if precision == "16-mixed" and not gpu:
        raise SpecError("--precision 16-mixed: fp16 with a gradient scaler needs a GPU (CPU: bf16-mixed)")
    return {"accelerator": "gpu" if gpu else "cpu", "devices": 1, "precision": precision}


# Lightning's short names for its precisions (`--precision bf16` runs bf16-mixed).
_PRECISION_ALIASES = {"bf16": "bf16-mixed", "16": "16-mixed", "32": "32-true", "64": "64-true"}


CGROUP = Path("/sys/fs/cgroup")  # the mount: v2 files at its top level, v1 under one folder per controller
SELF_CGROUP = Path("/proc/self/cgroup")
MEMINFO = Path("/proc/meminfo")
_NO_LIMIT = 2**60  # cgroup v1 writes a huge number for "no limit"


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


def cgroup_folders(controller: str) -> list[Path]:
    """This process's cgroup folders for `controller`, innermost first, up to the mount: a Slurm
    job's or a systemd scope's limit sits in its own folder, not at the mount's top. v2 (one `0::`
    hierarchy) first, else v1's folder for the controller."""
    try:
        lines = [line.split(":", 2) for line in SELF_CGROUP.read_text().splitlines()]
    except OSError:
        lines = []
    v2 = next((p for h, _, p in lines if h == "0"), "/")
    v1 = next((p for _, names, p in lines if controller in names.split(",")), "/")
    found = []
    for path, root in ((v2, CGROUP), (v1, CGROUP / controller)):
        here = root / path.strip("/")
        found += [here, *[p for p in here.parents if p == root or root in p.parents]]
    return found


def cgroup_quota() -> float | None:
    """CPUs the cgroup quota allows (quota / period), the tightest over this process's cgroups;
    None when unlimited or unknown."""
    quotas = []
    for folder in cgroup_folders("cpu"):
        try:
            if (folder / "cpu.max").exists():
                quota, period = (folder / "cpu.max").read_text().split()[:2]
            else:
                quota = (folder / "cpu.cfs_quota_us").read_text().strip()
                period = (folder / "cpu.cfs_period_us").read_text().strip()
        except (OSError, ValueError):
            continue
        if quota not in ("max", "-1"):
            quotas.append(int(quota) / int(period))
    return min(quotas, default=None)


def available_memory_mb() -> tuple[float | None, str]:
    """Memory a new worker may take, in MB, and where the figure comes from: the kernel's
    MemAvailable, capped by each of this process's cgroup memory limits less what the cgroup holds
    (a container's `--memory`, a Slurm job's `--mem`; page cache it may drop does not count).
    None when nothing can be read."""
    figures = []
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                figures.append((int(line.split()[1]) / 1024, "MemAvailable"))
    except (OSError, ValueError, IndexError):
        pass
    for folder in cgroup_folders("memory"):
        if (free := _cgroup_free(folder)) is not None:
            figures.append((free / 2**20, "the cgroup memory limit"))
    if not figures:
        return None, "memory unknown"
    mb, source = min(figures)
    return mb, f"{mb / 1024:.1f} GB available ({source})"


def _cgroup_free(folder: Path) -> int | None:
    """Bytes a cgroup's limit leaves (limit - usage + inactive file cache); None without a limit."""
    for limit_name, usage_name, cache_key in (
        ("memory.max", "memory.current", "inactive_file"),
        ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        try:
            limit, usage = (folder / limit_name).read_text().strip(), int((folder / usage_name).read_text())
        except (OSError, ValueError):
            continue
        if limit == "max" or int(limit) >= _NO_LIMIT:
            return None
        return max(0, int(limit) - usage + _stat(folder / "memory.stat", cache_key))
    return None


def _stat(path: Path, key: str) -> int:
    try:
        return next((int(v) for k, v in (line.split() for line in path.open()) if k == key), 0)
    except (OSError, ValueError):
        return 0


# `--workers auto` on a GPU: workers share a card until its memory is spent, with a margin for the
# allocator's fragmentation; past 8, a small model's trials gained nothing measured (the card is
# bound by kernel launches: six workers ran 1.3x one, benchmarks/RESULTS.md).
GPU_MEMORY_SHARE = 0.85
MAX_WORKERS_PER_GPU = 8


def gpu_free_mb() -> float | None:
    """Free memory (MB) of the fullest GPU this process sees; None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return min(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count())) / 2**20


@dataclass(frozen=True)
class Capacity:
    """What bounds `--workers auto` besides the CPUs or GPUs: the trials still to run (all planned
    ones when none ended yet) and memory, from the peak RSS a worker of this study measured."""

    trials: int | None = None  # still to run
    ended: int = 0  # planned trials that already ended as runs (a resumed study)
    memory_mb: float | None = None  # available now
    memory_why: str = ""
    peak_mb: float | None = None  # the largest peak RSS a worker of this study recorded
    gpu_free_mb: float | None = None  # free on the fullest visible GPU now
    gpu_peak_mb: float | None = None  # a worker's peak on its GPU: recorded, else probed (`gpu_memory`)
    gpu_peak_why: str = ""

    def memory_cap(self) -> int | None:
        if self.memory_mb is None or not self.peak_mb:
            return None
        return max(1, int(self.memory_mb // self.peak_mb))

    def gpu_cap(self) -> int | None:
        """Workers one GPU holds by memory, at most `MAX_WORKERS_PER_GPU`; None when unmeasured."""
        if self.gpu_free_mb is None or not self.gpu_peak_mb:
            return None
        fit = int(self.gpu_free_mb * GPU_MEMORY_SHARE // self.gpu_peak_mb)
        return max(1, min(MAX_WORKERS_PER_GPU, fit))

    def memory_text(self) -> str:
        return f"{self.memory_why} / {self.peak_mb / 1024:.2f} GB measured peak per worker"


def resolve_workers(
    workers: str | int,
    trainer: dict[str, Any],
    cpus: int,
    capacity: Capacity | None = None,
    per_gpu: int | None = 1,
    threads: int = 1,
) -> tuple[int, str]:
    """`--workers` and why: a positive count, or `auto`: `per_gpu` workers per visible GPU (None:
    as many as the GPU's free memory holds at the measured peak, `Capacity.gpu_cap`), or on
    CPU the usable `cpus` / `threads` per worker (one single-threaded worker per CPU unless the
    study fixed more threads: 2 processes x 1 thread ran a 4-trial RTE sweep 1.2x faster than
    1 x 2, benchmarks/sweep.py --workers-check), never more than the trials still to run nor
    than the measured peak RSS fits in the memory available."""
    capacity = capacity or Capacity()
    if per_gpu is not None and per_gpu < 1:
        raise SpecError(f"--workers-per-gpu: expected a positive integer, got {per_gpu}")
    fit = max(1, cpus // threads)  # workers whose threads the CPUs hold
    each = f" / {threads} threads per worker" if threads > 1 else ""
    count = worker_count(workers)
    if count is not None:
        cap = capacity.memory_cap()
        if cap is not None and count > cap:  # the user's choice stands, but not silently
            return count, f"--workers {count} (warning: memory fits {cap}: {capacity.memory_text()})"
        if trainer["accelerator"] != "gpu" and count * threads > cpus:
            return count, f"--workers {count} (warning: {count} x {threads} threads on {cpus} usable CPUs)"
        return count, f"--workers {count}"
    if trainer["accelerator"] == "gpu":
        devices = max(1, len(visible_devices()))
        per_gpu, each_gpu = _per_gpu(per_gpu, capacity)
        count, why = devices * per_gpu, f"{devices} GPU(s){each_gpu}"
        if fit < count:  # each worker feeds its GPU from CPUs of its own
            count, why = fit, f"{why}, capped at the {cpus} usable CPUs{each}"
    else:
        count, why = fit, f"{cpus} usable CPUs{each}"
    if capacity.trials is not None and capacity.trials < count:
        left = "planned" if not capacity.ended else f"still to run ({capacity.ended} ended)"
        count, why = max(1, capacity.trials), f"{why}, capped at the {capacity.trials} trials {left}"
    cap = capacity.memory_cap()
    if cap is not None and cap < count:
        count, why = cap, f"{why}, capped at {cap} by memory: {capacity.memory_text()}"
    elif cap is None and capacity.memory_mb is not None and count > 1:
        why += "; memory does not cap it: no peak RSS measured yet (a rerun caps by it)"
    return count, f"--workers auto: {count} ({why})"


def _per_gpu(asked: int | None, capacity: Capacity) -> tuple[int, str]:
    """Workers per GPU and how they were chosen: `--workers-per-gpu`, else by the GPU's memory."""
    if asked is not None:
        return asked, f" x {asked} per GPU" if asked > 1 else ""
    fit = capacity.gpu_cap()
    if fit is None:
        return 1, " (no GPU memory peak measured: 1 per GPU)"
    free = f"{capacity.gpu_free_mb / 1024:.1f} GB free / {capacity.gpu_peak_mb / 1024:.2f} GB"
    return fit, f" x {fit} per GPU ({free} {capacity.gpu_peak_why}, at most {MAX_WORKERS_PER_GPU})"


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
