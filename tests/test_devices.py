"""Where trials run: explicit, recorded options; one device per trial; one GPU per worker."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from suite.errors import SpecError
from suite.model.devices import resolve_trainer, worker_environment


def test_cpu_default_is_explicit_fp32() -> None:
    assert resolve_trainer({})["accelerator"] == "cpu"  # the tests' pin, even on a CUDA host
    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert resolve_trainer({"accelerator": "cpu"}) == cpu
    assert resolve_trainer({"accelerator": "cpu", "precision": "bf16-mixed"})["precision"] == "bf16-mixed"


def _cuda(monkeypatch: pytest.MonkeyPatch, major: int) -> None:
    """A CUDA device of compute capability `major`.0 as torch's own checks see it; bf16 tensors
    work on it (natively from 8.0, emulated before)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(major=major))
    monkeypatch.setattr(torch.cuda, "_check_bf16_tensor_supported", lambda device: True)
    monkeypatch.setattr(torch.version, "hip", None)


@pytest.mark.parametrize(("major", "precision"), [(7, "32-true"), (8, "bf16-mixed"), (9, "bf16-mixed")])
def test_bf16_mixed_is_the_default_only_with_native_bf16(
    major: int, precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch says bf16 is supported on a V100 or T4 too (emulated, slowly): the default there is fp32."""
    _cuda(monkeypatch, major)
    assert torch.cuda.is_bf16_supported()
    assert resolve_trainer({"accelerator": "gpu"}) == {
        "accelerator": "gpu",
        "devices": 1,
        "precision": precision,
    }
    asked = resolve_trainer({"accelerator": "gpu", "precision": "bf16-mixed"})
    assert asked["precision"] == "bf16-mixed"  # asked for: given


def test_the_tests_pin_auto_to_the_cpu_on_a_cuda_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py sets SUITE_ACCELERATOR=cpu (inherited by the suite processes tests start):
    exact CPU numbers are not compared with a GPU's. Asked for, the GPU is still given; without the
    pin (a test marked `gpu`), `auto` is the GPU."""
    _cuda(monkeypatch, 9)
    assert os.environ["SUITE_ACCELERATOR"] == "cpu"
    assert resolve_trainer({})["accelerator"] == "cpu"
    assert resolve_trainer({"accelerator": "gpu"})["accelerator"] == "gpu"
    monkeypatch.delenv("SUITE_ACCELERATOR")
    assert resolve_trainer({}) == {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}


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
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    assert [worker_environment(i, gpu) for i in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
        {"CUDA_VISIBLE_DEVICES": "0"},
    ]
    assert worker_environment(0, {"accelerator": "cpu"}) == {}


@pytest.mark.parametrize(
    ("parent", "expected"),
    [
        ("4,5", ["4", "5", "4"]),  # a scheduler's allocation on a shared node: never GPUs 0 and 1
        ("GPU-1a2b, GPU-3c4d", ["GPU-1a2b", "GPU-3c4d", "GPU-1a2b"]),
        ("MIG-9f8e", ["MIG-9f8e", "MIG-9f8e", "MIG-9f8e"]),
    ],
)
def test_workers_map_through_the_parents_visible_devices(
    monkeypatch: pytest.MonkeyPatch, parent: str, expected: list[str]
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", parent)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)  # what the node has: not what this job may use
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    assert [worker_environment(i, gpu)["CUDA_VISIBLE_DEVICES"] for i in range(3)] == expected


def test_cli_refuses_a_multi_gpu_trial_before_training(tiny_task, tiny_models, tmp_path) -> None:  # noqa: ANN001
    from tests.conftest import run_tiny

    run_tiny(tiny_task, tiny_models["bert"], "--devices", "2", expect=2)


def test_workers_auto_is_one_per_gpu_or_the_cpus_over_the_threads_capped_at_the_trials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from suite.model.devices import Capacity, resolve_workers

    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert resolve_workers("auto", cpu, cpus=2) == (2, "--workers auto: 2 (2 usable CPUs)")
    assert resolve_workers("3", cpu, cpus=4)[0] == 3
    count, why = resolve_workers("auto", cpu, cpus=64, capacity=Capacity(trials=6))  # 6 trials, 64 cores
    assert count == 6 and why == "--workers auto: 6 (64 usable CPUs, capped at the 6 trials planned)"
    count, why = resolve_workers("auto", cpu, cpus=64, capacity=Capacity(trials=1))
    assert count == 1
    count, why = resolve_workers("auto", cpu, cpus=8, capacity=Capacity(trials=2, ended=4))  # resumed
    assert count == 2 and why.endswith("capped at the 2 trials still to run (4 ended))")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert resolve_workers("auto", {**cpu, "accelerator": "gpu"}, cpus=16)[0] == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(SpecError, match="--workers"):
            resolve_workers(bad, cpu, cpus=2)


@pytest.mark.parametrize(
    ("cpus", "threads", "trials", "expected"),
    [(2, 1, 6, 2), (2, 2, 6, 1), (8, 2, 6, 4), (8, 3, 6, 2), (8, 2, 3, 3), (2, 4, 6, 1), (64, 4, 1, 1)],
)
def test_workers_auto_divides_the_cpus_by_the_studys_threads_per_worker(
    cpus: int, threads: int, trials: int, expected: int
) -> None:
    """A study's threads per worker are fixed when it is created: `auto` fits as many workers of
    that many threads as the CPUs hold (at least one), never more than the trials still to run."""
    from suite.model.devices import Capacity, resolve_workers

    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    count, _ = resolve_workers("auto", cpu, cpus, Capacity(trials=trials), threads=threads)
    assert count == max(1, min(cpus // threads, trials)) == expected


def test_an_explicit_worker_count_over_the_cpus_warns() -> None:
    from suite.model.devices import resolve_workers

    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    count, why = resolve_workers("2", cpu, cpus=2, threads=2)
    assert count == 2 and "warning: 2 x 2 threads on 2 usable CPUs" in why
    assert resolve_workers("2", cpu, cpus=4, threads=2) == (2, "--workers 2")


def test_workers_auto_fits_the_memory_from_the_measured_peak() -> None:
    """Memory for 3 workers (7.5 GB free, 2.4 GB measured peak each) gives 3 of 64 CPUs' worth;
    no measured peak yet: memory does not cap, and it says so; an explicit count above it warns."""
    from suite.model.devices import Capacity, resolve_workers

    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    fits3 = Capacity(trials=40, memory_mb=7680, memory_why="7.5 GB available (MemAvailable)", peak_mb=2400)
    count, why = resolve_workers("auto", cpu, cpus=64, capacity=fits3)
    assert count == 3
    assert "capped at 3 by memory: 7.5 GB available (MemAvailable) / 2.34 GB measured peak" in why
    unmeasured = Capacity(trials=40, memory_mb=7680, memory_why="7.5 GB available (MemAvailable)")
    count, why = resolve_workers("auto", cpu, cpus=8, capacity=unmeasured)
    assert count == 8 and "no peak RSS measured yet" in why
    tight = Capacity(trials=40, memory_mb=1000, memory_why="1 GB", peak_mb=2400)
    assert resolve_workers("auto", cpu, cpus=8, capacity=tight)[0] == 1  # never 0
    count, why = resolve_workers("6", cpu, cpus=8, capacity=fits3)
    assert count == 6 and "warning: memory fits 3" in why


def test_workers_per_gpu_share_the_parents_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CUDA_VISIBLE_DEVICES=4,5 with 2 workers per GPU: 4 workers on devices 4, 5, 4, 5."""
    from suite.model.devices import resolve_workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    count, why = resolve_workers("auto", gpu, cpus=16, per_gpu=2)
    assert count == 4 and why == "--workers auto: 4 (2 GPU(s) x 2 per GPU)"
    assert [worker_environment(i, gpu)["CUDA_VISIBLE_DEVICES"] for i in range(count)] == ["4", "5", "4", "5"]
    count, why = resolve_workers("auto", gpu, cpus=3, per_gpu=2)  # 4 workers would share 3 CPUs
    assert count == 3 and why.endswith("capped at the 3 usable CPUs)")
    count, why = resolve_workers("auto", gpu, cpus=16, per_gpu=2, threads=8)  # the study's 8 threads each
    assert count == 2 and why.endswith("capped at the 16 usable CPUs / 8 threads per worker)")
    with pytest.raises(SpecError, match="--workers-per-gpu"):
        resolve_workers("auto", gpu, cpus=16, per_gpu=0)


def test_workers_auto_on_a_2_cpu_container_of_a_64_core_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.cpu_count() says 64; the affinity mask holds 2: two workers."""
    import os

    from suite.model import devices

    monkeypatch.setattr(devices, "CGROUP", tmp_path)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    cpus, _ = devices.usable_cpus()
    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert devices.resolve_workers("auto", cpu, cpus, devices.Capacity(trials=40))[0] == 2


@pytest.mark.parametrize(
    ("files", "expected_mb", "source"),
    [
        ({}, 8000.0, "MemAvailable"),
        ({"memory.max": "max\n", "memory.current": "1000\n"}, 8000.0, "MemAvailable"),
        ({"memory.max": f"{4 * 2**30}\n", "memory.current": f"{2**30}\n"}, 3072.0, "cgroup"),
        (
            {"memory/memory.limit_in_bytes": "9223372036854771712\n", "memory/memory.usage_in_bytes": "5\n"},
            8000.0,
            "MemAvailable",
        ),
    ],
)
def test_available_memory_reads_meminfo_and_the_cgroup_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict, expected_mb: float, source: str
) -> None:
    from suite.model import devices

    (tmp_path / "meminfo").write_text("MemTotal: 16384000 kB\nMemAvailable: 8192000 kB\n")
    for name, text in files.items():
        (tmp_path / "cg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "cg" / name).write_text(text)
    monkeypatch.setattr(devices, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(devices, "CGROUP", tmp_path / "cg")
    monkeypatch.setattr(devices, "SELF_CGROUP", tmp_path / "absent")
    mb, why = devices.available_memory_mb()
    assert mb == pytest.approx(expected_mb) and source in why


def test_a_slurm_jobs_own_cgroup_limits_memory_and_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under cgroup v2 without a namespace the job's limits sit in its own folder, not at the mount:
    a 16 GB job on a 512 GB node holding 5 GB of which 1 GB is droppable file cache has 12 GB; its
    4-CPU quota caps 64 CPUs of affinity."""
    import os

    from suite.model import devices

    job = tmp_path / "cg" / "system.slice" / "slurmstepd.scope" / "job_42"
    job.mkdir(parents=True)
    (job / "memory.max").write_text(f"{16 * 2**30}\n")
    (job / "memory.current").write_text(f"{5 * 2**30}\n")
    (job / "memory.stat").write_text(f"anon 4\ninactive_file {2**30}\nactive_file 7\n")
    (job / "cpu.max").write_text("400000 100000\n")
    (tmp_path / "cg" / "cpu.max").write_text("max 100000\n")
    (tmp_path / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_42\n")
    (tmp_path / "meminfo").write_text("MemAvailable: 536870912 kB\n")
    monkeypatch.setattr(devices, "CGROUP", tmp_path / "cg")
    monkeypatch.setattr(devices, "SELF_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(devices, "MEMINFO", tmp_path / "meminfo")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    mb, why = devices.available_memory_mb()
    assert mb == pytest.approx(12 * 1024) and "cgroup" in why
    assert devices.usable_cpus()[0] == 4


@pytest.mark.parametrize(
    ("files", "affinity", "expected"),
    [
        ({"cpu.max": "max 100000\n"}, 64, (64, "64 CPUs in the affinity mask")),
        ({"cpu.max": "200000 100000\n"}, 64, (2, "cgroup CPU quota 2 of 64 CPUs in the affinity mask")),
        ({"cpu.max": "150000 100000\n"}, 64, (2, "cgroup CPU quota 1.5 of 64 CPUs in the affinity mask")),
        (
            {"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"},
            8,
            (4, "cgroup CPU quota 4 of 8 CPUs in the affinity mask"),
        ),
        ({"cpu.max": "800000 100000\n"}, 2, (2, "2 CPUs in the affinity mask (quota 8)")),
        ({}, 3, (3, "3 CPUs in the affinity mask")),
    ],
)
def test_usable_cpus_reads_the_affinity_mask_and_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict, affinity: int, expected: tuple
) -> None:
    """A 2-CPU container on a 64-core node gets 2 workers, not 64 (os.cpu_count() counts the node)."""
    import os

    from suite.model import devices

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(devices, "CGROUP", tmp_path)
    monkeypatch.setattr(devices, "SELF_CGROUP", tmp_path / "absent")  # the mount's top level only
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    assert devices.usable_cpus() == expected


def test_capacity_counts_the_stored_studys_ended_trials_and_measured_peak(
    tiny_task,
    tiny_models,
    tmp_path: Path,  # noqa: ANN001
) -> None:
    """A rerun of an ended study has no trials still to run and knows its workers' peak RSS."""
    from suite.config.request import Request
    from suite.study.setup import _capacity, load_specs, planned_trials, study_address
    from suite.study.storage import stored_study
    from tests.conftest import run_tiny

    run_tiny(tiny_task, tiny_models["bert"])
    root = tiny_task.parent if (tiny_task.parent / "data").is_dir() else tiny_task.parent.parent
    request = Request(task=str(tiny_task), model=str(tiny_models["bert"]), out=root / "runs")
    _, task, _, sweep = load_specs(request)
    _, url, name = study_address(request, task, sweep)
    study = stored_study(url, name)
    assert study is not None
    cpu = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    capacity = _capacity(task, sweep, study, cpu, str(tiny_models["bert"]))
    assert capacity.gpu_free_mb is None and capacity.gpu_peak_mb is None  # a CPU study: no GPU asked
    assert capacity.ended == planned_trials(task, sweep) > 0 and capacity.trials == 0
    assert capacity.peak_mb is not None and capacity.peak_mb > 50  # a worker's recorded ru_maxrss


def test_workers_auto_on_a_gpu_fill_its_memory_at_the_measured_peak(monkeypatch: pytest.MonkeyPatch) -> None:
    """80 GB free at a 9 GB peak fits 7 workers a card (85% of it); a 1 GB peak would fit more than
    the 8 a card takes; no peak measured: one a card; --workers-per-gpu overrides the memory."""
    from suite.model.devices import MAX_WORKERS_PER_GPU, Capacity, resolve_workers

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    gpu = {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"}
    big = Capacity(trials=100, gpu_free_mb=80 * 1024, gpu_peak_mb=9 * 1024, gpu_peak_why="recorded peak")
    count, why = resolve_workers("auto", gpu, cpus=64, capacity=big, per_gpu=None)
    assert count == 2 * 7 and "x 7 per GPU (80.0 GB free / 9.00 GB recorded peak" in why
    small = Capacity(trials=100, gpu_free_mb=80 * 1024, gpu_peak_mb=1024)
    assert resolve_workers("auto", gpu, cpus=64, capacity=small, per_gpu=None)[0] == 2 * MAX_WORKERS_PER_GPU
    count, why = resolve_workers("auto", gpu, cpus=64, capacity=Capacity(trials=100), per_gpu=None)
    assert count == 2 and "no GPU memory peak measured" in why
    assert resolve_workers("auto", gpu, cpus=64, capacity=big, per_gpu=3)[0] == 6
    assert resolve_workers("auto", gpu, cpus=4, capacity=big, per_gpu=None)[0] == 4  # each needs a CPU
    assert (
        resolve_workers(
            "auto", gpu, cpus=64, capacity=Capacity(trials=5, gpu_free_mb=8e4, gpu_peak_mb=9e3), per_gpu=None
        )[0]
        == 5
    )
