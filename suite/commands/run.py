"""`suite run` and `suite worker`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from suite.config.request import Request
from suite.outputs.run_folder import summary_rows, write_outputs
from suite.study.setup import Setup
from suite.study.supervise import Stopped, run_workers, stop_with_parent, stops_as_interrupts
from suite.study.worker import (
    PUT_BACK,
    exit_status,
    interrupted_note,
    open_joined,
    planned_count,
    run_worker,
    trackers,
    watch,
)


def run(request: Request) -> int:
    """Check every input, plan the study into its storage (or resume or grow it when its
    fingerprint allows), run it with local workers, write the outputs. Returns the exit code: 0
    when every planned trial ended as a run, 1 when some trial is still errored or unfinished."""
    return run_study(request)[0]


def run_study(request: Request) -> tuple[int, Setup, list[dict[str, Any]]]:
    """`run`, also giving its setup and the final records it wrote (what `--until-*` reads).
    With several workers, the planning runs in a child process: this one, which only waits for
    the workers, then never holds torch, the data or the pre-flight's model (benchmarks/memory.py)."""
    s, study, environments, planned = (
        _planned_in_child(request) if str(request.workers) != "1" else (None, None, None, 0)
    )
    if study is None:  # one worker, in this process
        from suite.study.planning import plan_study

        s, study = plan_study(request if s is None else s.request)
        planned = planned_count(s)
    assert s.folder is not None  # a planned study always has a run folder
    tracking = trackers(s, s.name)
    if tracking is not None:  # the MLflow parent run, before any trial is logged under it
        tracking.open_study()
    try:
        with stops_as_interrupts():
            if s.workers == 1:
                import torch

                torch.set_num_threads(s.threads)
                run_worker(study, s, progress=not request.quiet)
            else:
                _run_workers(s, study, environments, planned, progress=not request.quiet)
    except KeyboardInterrupt as stop:
        print(interrupted_note(study, planned, _what_became_of(stop)), file=sys.stderr)
        raise
    records, summary = write_outputs(study, s.folder, s.task)
    print(summary)
    if tracking is not None:
        tracking.log_study(summary_rows(records))
    return exit_status(study), s, records


def _planned_in_child(request: Request) -> tuple[Setup, Any, list[dict[str, str]] | None, int]:
    """`plan_study` in a child process: the setup without its prepared task, the study, each
    worker's environment and the planned trials (counting them imports torch); (setup, None, None,
    0) when it found that one worker is enough (`--workers auto` on one CPU or GPU, or one trial
    left): its request then asks for that one."""
    import optuna

    from suite.study.offload import in_child
    from suite.study.storage import open_storage

    s, environments, planned = in_child(_plan_for_workers, request)
    if s.workers == 1:
        return dataclasses.replace(s, request=dataclasses.replace(request, workers="1")), None, None, 0
    if request.offline:  # the workers inherit it, as from a process that planned itself
        os.environ["HF_HUB_OFFLINE"] = "1"
    return s, optuna.load_study(study_name=s.name, storage=open_storage(s.url)), environments, planned


def _plan_for_workers(request: Request) -> tuple[Setup, list[dict[str, str]], int]:
    """The child's side of `_planned_in_child`."""
    from suite.model.devices import worker_environment
    from suite.study.planning import plan_study

    s, _ = plan_study(request)
    environments = [worker_environment(i, s.trainer) for i in range(s.workers)]
    return dataclasses.replace(s, prepared=None), environments, planned_count(s)


def _run_workers(
    s: Setup, study: Any, environments: list[dict[str, str]] | None, planned: int, progress: bool
) -> None:
    desc = f"trials ({s.workers} workers)"
    shown = (lambda running: watch(study, planned, s.workers, running, desc)) if progress else None
    codes = run_workers(s, study, environments, watch=shown)
    if bad := [c for c in codes if c]:
        print(
            f"study {s.name}: {len(bad)} of {len(codes)} workers exited early (codes {bad})", file=sys.stderr
        )


def _what_became_of(stop: KeyboardInterrupt) -> str:
    """The running trials of a stopped `run`: put back, or (named) waiting for their heartbeat."""
    if not isinstance(stop, Stopped) or not stop.waiting:
        return PUT_BACK
    trials = f"trial{'s' if len(stop.waiting) > 1 else ''} {', '.join(map(str, stop.waiting))}"
    return (
        f"{trials} still marked running, not put back within {stop.grace_s:.0f} s: each goes back to "
        "the queue once its heartbeat is stale"
    )


def worker(request: Request) -> int:
    """`suite worker`: join a study from another process or machine and run trials until done."""
    stop_with_parent()  # first: whatever stop handling this process inherited, a stop reaches it
    study, s = open_joined(request)
    try:
        run_worker(study, s, progress=not request.quiet)
    except KeyboardInterrupt:
        if not request.quiet:  # a worker `run` started is quiet: `run` speaks for the study
            print(interrupted_note(study, planned_count(s)), file=sys.stderr)
        raise
    return 0


def export(run: Path, storage: str | None, study: str | None, every: bool, output: Path) -> None:
    """`suite export`: a run folder's study (or `every` study of its storage) to JSONL or CSV."""
    from suite.outputs.run_folder import export as export_records

    print(f"{output}: {export_records(run, storage, study, every, output)} trials")
