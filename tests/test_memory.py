"""Memory per process: the `run` process that waits for its workers holds neither torch nor the
prepared data or model, and a worker frees each trial's module, optimizer and trainer before the
next trial builds its own (benchmarks/memory.py measures both on the NER default)."""

import gc
import json
import os
import resource
import subprocess
import sys
import time
import weakref
from pathlib import Path

import lightning as L
import pytest

from suite.errors import SpecError
from suite.heads.registry import PreparedTask
from suite.study.memory import allocator, release, reset_peak, trimming
from suite.study.offload import start_child
from suite.study.setup import _int_size
from tests.child_calls import answer_then_go_on, tell_then_end
from tests.conftest import run_tiny

REPO = Path(__file__).resolve().parent.parent

# Runs `suite run` with `run_workers` spied on: what the process holds while its workers train.
SPY = """
import json, sys
import suite.commands.run as run

seen = {}
wait = run.run_workers


def spy(*args, **kwargs):
    import gc

    heavy = ("torch", "lightning", "transformers", "datasets")
    seen["modules"] = sorted(m for m in heavy if m in sys.modules)
    held = ("PreparedTask", "ClassificationData")
    seen["prepared"] = sum(type(o).__name__ in held for o in gc.get_objects())
    status = dict(line.split(":", 1) for line in open("/proc/self/status"))
    seen["rss_mb"] = int(status["VmRSS"].split()[0]) / 1024
    return wait(*args, **kwargs)


run.run_workers = spy
from suite.commands.cli import main

code = main(sys.argv[1:])
print(json.dumps({**seen, "code": code}))
"""


def _in_child(function, *args):  # noqa: ANN001, ANN202
    child = start_child(function, *args)
    try:
        return child.answer()
    finally:
        child.process.wait()


def test_a_child_runs_elsewhere_and_raises_what_it_raised() -> None:
    assert _in_child(os.getpid) != os.getpid()
    assert _in_child(_int_size, "64") == 64
    expected = r"--size: expected an integer, K per class \(e.g. 16/class\) or 'full', got 'x'"
    with pytest.raises(SpecError, match=expected):
        _in_child(_int_size, "x")
    with pytest.raises(ValueError, match="invalid literal") as caught:
        _in_child(int, "x")
    assert "in the child process" in "".join(caught.value.__notes__)


def test_a_child_that_answered_goes_on_and_ends_as_a_command(tmp_path: Path) -> None:
    """The answer comes before the child ends; what the call does after it is the child's own:
    its return value is the exit code, a `SuiteError` one line and its code."""
    here = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": here}  # the child imports tests.child_calls
    for code in (0, 3, 2):
        child = start_child(answer_then_go_on, str(tmp_path / f"{code}.txt"), code, env=env)
        assert child.answer() == child.process.pid
        assert child.process.wait() == code
        assert (tmp_path / f"{code}.txt").read_text() == "went on"
    with pytest.raises(RuntimeError, match="exited with code 1 before answering"):
        start_child(os._exit, 1).answer()


def test_a_child_tells_before_its_last_answer_which_may_be_an_error() -> None:
    """What a child tells comes first, its result or its error after it: the first worker tells
    `run` the worker count, then hands back the plan or the error that ended planning."""
    here = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": here}
    child = start_child(tell_then_end, 0, env=env)
    assert child.answer(last=False) == child.process.pid and child.answer() == "planned"
    assert child.process.wait() == 0
    child = start_child(tell_then_end, 2, env=env)
    assert child.answer(last=False) == child.process.pid
    with pytest.raises(SpecError, match="found after telling"):
        child.answer()
    assert child.process.wait() == 1


def test_a_suite_process_ends_without_the_teardowns_collections(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m suite ...` freezes what it holds out of the collector as it ends, whatever its
    exit: the interpreter's teardown then frees by reference count only."""
    from suite.commands.cli import entry

    monkeypatch.setattr(sys, "argv", ["suite", "list"])
    try:
        assert gc.get_freeze_count() == 0 and entry() == 0 and gc.get_freeze_count() > 0
        gc.unfreeze()
        monkeypatch.setattr(sys, "argv", ["suite", "validate", "no-such-file.yaml"])
        assert entry() == 2 and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_waiting_run_process_holds_no_torch_no_data_no_model(tiny_task: Path, tiny_models) -> None:  # noqa: ANN001
    root = tiny_task.parent.parent
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--out", str(root / "runs")]
    args += ["--data-dir", str(root / "data"), "--quiet", "--workers", "2", "--threads", "1"]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", SPY, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["code"] == 0
    assert seen["modules"] == [] and seen["prepared"] == 0
    assert seen["rss_mb"] < 200  # ~70 MB: Python, optuna and SQLAlchemy (was ~700 MB on the NER default)
    records = [json.loads(line) for line in next((root / "runs").glob("tiny/*/trials.jsonl")).open()]
    assert len(records) == 3 and all(r["outcome"] != "errored" for r in records)


def test_worker_frees_each_trial_before_the_next(tiny_task: Path, tiny_models, monkeypatch) -> None:  # noqa: ANN001
    """With the cyclic collector off, only the worker's own `release()` frees a trial's objects:
    when a trial builds its module, no earlier trial's module, trainer or optimizer is alive."""
    alive: list[weakref.ref] = []
    leftovers: list[int] = []
    build, fit = PreparedTask.build_module, L.Trainer.fit

    def spy_build(self, encoder, hparams):  # noqa: ANN001, ANN202
        leftovers.append(sum(ref() is not None for ref in alive))
        module = build(self, encoder, hparams)
        alive.append(weakref.ref(module))
        return module

    def spy_fit(self, module, *args, **kwargs):  # noqa: ANN001, ANN202
        alive.append(weakref.ref(self))
        try:
            return fit(self, module, *args, **kwargs)
        finally:
            alive.extend(weakref.ref(o) for o in self.optimizers)

    monkeypatch.setattr(PreparedTask, "build_module", spy_build)
    monkeypatch.setattr(L.Trainer, "fit", spy_fit)
    gc.collect()
    gc.disable()
    try:
        run_tiny(tiny_task, tiny_models["bert"], "--workers", "1")
        ended = sum(ref() is not None for ref in alive)
    finally:
        gc.enable()
    assert len(leftovers) == 3 and len(alive) == 9  # 3 trials: module, trainer, optimizer each
    assert leftovers == [0, 0, 0] and ended == 0


def _rss_mb() -> float:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) / 1024


def _fragmented_heap() -> tuple[list[bytes], float]:
    """128 MB of heap blocks (64 KB: under glibc's mmap threshold) freed between small blocks still
    in use, so the heap cannot shrink from its top (freeing alone gives back ~10 MB); the live
    blocks, and the RSS before the frees."""
    blocks, keep = [], []
    for i in range(2000):
        blocks.append(bytes(64 * 1024) + bytes([i % 256]))
        keep.append(bytes(600) + bytes([i % 256]))
    full = _rss_mb()
    del blocks
    return keep, full


@pytest.mark.skipif(allocator() != "glibc", reason="glibc's malloc serves this process")
def test_release_gives_freed_heap_pages_back() -> None:
    keep, full = _fragmented_heap()
    release()
    assert full - _rss_mb() > 64 and keep


@pytest.mark.skipif(allocator() != "glibc", reason="glibc's malloc serves this process")
def test_trimming_gives_freed_heap_pages_back_while_a_trial_runs() -> None:
    with trimming(period=0.05):
        keep, full = _fragmented_heap()
        time.sleep(0.5)
        after = _rss_mb()
    assert full - after > 64 and keep


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/clear_refs")
def test_a_trial_records_its_own_peak_not_an_earlier_trials() -> None:
    """`reset_peak` (the worker calls it as each trial starts) restarts ru_maxrss, which every
    trial record's `peak_rss_mb` reads."""
    block = bytearray(300 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])  # touched: resident
    del block
    high = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert reset_peak()
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 < high - 250


def test_workers_auto_that_finds_one_trains_in_the_worker_that_planned(
    tiny_task: Path, tiny_models, monkeypatch
) -> None:  # noqa: ANN001
    """The first worker plans and finds one worker enough (one planned trial): it trains the trial
    itself; `run` starts no other worker and trains nothing."""
    from suite.study import supervise

    started: list[object] = []
    command = supervise.worker_command
    monkeypatch.setattr(supervise, "worker_command", lambda s: started.append(s) or command(s))
    folder = run_tiny(tiny_task, tiny_models["bert"], "--workers", "auto", "--seeds", "1")
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 1 and not records[0]["worker"].endswith(f":{os.getpid()}")
    assert started == []


def test_an_explicit_worker_count_starts_no_process_for_a_trial_that_is_not_there(
    tiny_task: Path, tiny_models, monkeypatch
) -> None:  # noqa: ANN001
    """`--workers 2` on a new one-trial study: the worker that planned trains it alone, at the
    threads two workers would have had (the study's identity is what was asked); rerun with
    `--workers 2` once it ended: it only writes the outputs, no worker started besides."""
    from suite.model.devices import usable_cpus
    from suite.study import supervise

    started: list[object] = []
    command = supervise.worker_command
    monkeypatch.setattr(supervise, "worker_command", lambda s: started.append(s) or command(s))
    folder = run_tiny(tiny_task, tiny_models["bert"], "--workers", "2", "--seeds", "1")
    records = [json.loads(line) for line in (folder / "trials.jsonl").open()]
    assert len(records) == 1 and started == []
    assert records[0]["threads"] == max(1, usable_cpus()[0] // 2)
    (folder / "trials.jsonl").unlink()
    run_tiny(tiny_task, tiny_models["bert"], "--workers", "2", "--seeds", "1")
    assert started == [] and len((folder / "trials.jsonl").read_text().splitlines()) == 1


@pytest.mark.trains  # starts `run`'s worker processes (no training fixture)
def test_a_user_error_found_while_the_first_worker_plans_is_one_line_exit_2(
    tiny_task: Path, tmp_path: Path, capfd: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that does not exist is found by planning (the spec reads fine): the worker that
    planned answers the error and ends, `run` says it once and exits 2; no trial was queued. The
    second worker, started once the count was known, ended with it without joining."""
    from suite.commands import run

    lists: list[list[subprocess.Popen]] = []  # the list `run` starts its held workers into
    start = run.start_held_workers
    monkeypatch.setattr(
        run, "start_held_workers", lambda s, envs, into: lists.append(into) or start(s, envs, into)
    )
    run_tiny(tiny_task, tmp_path / "no-such-model", "--workers", "2", expect=2)
    err = capfd.readouterr().err
    assert err.count("error:") == 1 and "no-such-model" in err, err
    [held] = lists
    assert len(held) == 1 and held[0].poll() is not None
    assert not list((tiny_task.parent.parent / "runs").glob("*/*/study.db"))


def test_a_worker_keeps_no_pretrained_weights_between_trials(tiny_models) -> None:  # noqa: ANN001
    """Each trial reads the encoder from disk: the process keeps only the names of the weights the
    checkpoint lacked, never a tensor, and loading leaves torch's RNG (the trial's stream) alone."""
    import torch

    from suite.model import encoders

    model = str(tiny_models["bert"])
    torch.manual_seed(7)
    state = torch.get_rng_state()
    first = encoders.load_encoder(model)
    assert torch.equal(torch.get_rng_state(), state)
    second = encoders.load_encoder(model)
    assert first is not second and first.training
    assert all(
        torch.equal(a, b)
        for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    )
    assert encoders._PRETRAINED[encoders.resolve(model)] == first.checkpoint_missing == ()
    held = weakref.ref(first)
    del first
    gc.collect()
    assert held() is None  # nothing in the process holds a loaded encoder


def test_the_subsample_module_loads_scikit_learn_only_to_stratify() -> None:
    probe = "import sys, suite.data.subsample as s; print('sklearn' in sys.modules)"
    found = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert found.stdout.strip() == "False"


def test_workers_run_starts_allocate_with_jemalloc_where_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """`allocator_env` preloads jemalloc (beside what LD_PRELOAD already holds) unless the user
    asks for the system's malloc or preloads an allocator of their own; a wrong value is one line."""
    from suite.errors import SuiteError
    from suite.study import memory

    monkeypatch.setattr(memory, "_jemalloc_library", lambda: "libjemalloc.so.2")
    conf = memory.JEMALLOC_CONF
    assert memory.allocator_env({}) == {"LD_PRELOAD": "libjemalloc.so.2", "MALLOC_CONF": conf}
    kept = memory.allocator_env({"LD_PRELOAD": "libiomp5.so", "MALLOC_CONF": "narenas:1"})
    assert kept == {"LD_PRELOAD": "libiomp5.so libjemalloc.so.2", "MALLOC_CONF": "narenas:1"}
    assert memory.allocator_env({"SUITE_ALLOCATOR": "system"}) == {}
    assert memory.allocator_env({"LD_PRELOAD": "/opt/libmalloc_x/libtcmalloc_minimal.so.4"}) == {}
    with pytest.raises(SuiteError, match="^SUITE_ALLOCATOR=tcmalloc: expected auto .* or system$"):
        memory.allocator_env({"SUITE_ALLOCATOR": "tcmalloc"})
    monkeypatch.setattr(memory, "_jemalloc_library", lambda: None)
    assert memory.allocator_env({}) == {}  # not installed: glibc's malloc, trimmed


def test_a_process_starts_again_under_jemalloc_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where glibc serves and jemalloc is asked for, the process execs itself with the preload and
    a marker; with the marker (after the restart, whatever the dynamic linker made of the preload)
    or another allocator serving, it goes on as it is."""
    from suite.study import memory

    started: list[dict[str, str]] = []
    monkeypatch.setattr(os, "execve", lambda path, args, env: started.append(env))
    monkeypatch.setattr(memory, "_jemalloc_library", lambda: "libjemalloc.so.2")
    monkeypatch.setattr(memory, "allocator", lambda: "glibc")
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("SUITE_ALLOCATOR", raising=False)
    memory.restart_with_allocator()
    (env,) = started
    assert env["LD_PRELOAD"] == "libjemalloc.so.2" and env[memory.RESTARTED_ENV] == "1"
    monkeypatch.setenv(memory.RESTARTED_ENV, "1")
    memory.restart_with_allocator()  # restarted: never a second time
    assert len(started) == 1 and memory.RESTARTED_ENV not in os.environ  # workers do not inherit it
    monkeypatch.setattr(memory, "allocator", lambda: "jemalloc")
    memory.restart_with_allocator()
    assert len(started) == 1


def test_a_wrong_allocator_setting_stops_run_before_any_worker_starts(
    tiny_task: Path, tiny_models, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:  # noqa: ANN001
    from suite.commands.cli import main

    monkeypatch.setenv("SUITE_ALLOCATOR", "mimalloc")
    data = tiny_task.parent.parent / "data"
    args = ["run", str(tiny_task), "--model", str(tiny_models["bert"]), "--data-dir", str(data)]
    assert main([*args, "--out", str(tiny_task.parent.parent / "runs"), "--workers", "2", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: SUITE_ALLOCATOR=mimalloc: expected auto")
    assert not (tiny_task.parent.parent / "runs").exists()  # nothing planned, nothing trained
