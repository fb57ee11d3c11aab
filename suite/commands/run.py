"""`suite run` and `suite worker`: spec -> data -> study -> trials.jsonl and a summary table."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.config.request import Request
from suite.errors import SuiteError
from suite.faults import reach
from suite.outputs.run_folder import summary_rows, write_outputs
from suite.study.offload import hand_back, start_child, tell
from suite.study.setup import Setup, refuse_early
from suite.study.supervise import (
    FOLDER_ENV,
    GO,
    Stopped,
    grace_s,
    let_go,
    restart_as_worker,
    run_workers,
    start_held_workers,
    stop_with_parent,
    stop_workers,
    stops_allowed,
    stops_as_interrupts,
    stops_held,
    worker_env,
    worker_request,
    worker_signals,
)
from suite.study.worker import (
    exit_status,
    interrupted_note,
    join_checked,
    open_joined,
    planned_count,
    put_back_note,
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
    With several workers, the first worker plans: this process, which only waits for the
    workers, then never holds torch, the data or the pre-flight's model (benchmarks/memory.py).
    What the specs and the storage alone refuse is refused first, before any process trains."""
    refuse_early(request)
    # The outputs' own imports (jsonschema and its compiled parts) now, in the process that writes
    # them: under a memory limit they fail here, once and before training, not after it.
    import suite.outputs.leaderboard  # noqa: F401

    with stops_as_interrupts():
        if str(request.workers) == "1":
            s, study, planned = _run_here(request)
        else:
            s, study, planned = _run_supervised(request)
    assert s.folder is not None  # a planned study always has a run folder
    records, summary = write_outputs(study, s.folder, s.task)
    print(summary)
    if (tracking := trackers(s, s.name)) is not None:
        tracking.log_study(summary_rows(records))
    return exit_status(study), s, records


def _run_here(request: Request) -> tuple[Setup, Any, int]:
    """One worker, in this process: plan, then take trials until none is left."""
    import torch

    s, study = _plan(request)
    planned = planned_count(s)
    torch.set_num_threads(s.threads)
    try:
        run_worker(study, s, progress=not request.quiet)
    except KeyboardInterrupt:
        print(interrupted_note(study, planned), file=sys.stderr)
        _outputs_at_stop(s, study)
        raise
    return s, study, planned


def _outputs_at_stop(s: Setup, study: Any) -> None:
    """A stopped run's outputs, of the trials that ended: `report`, `compare` and `leaderboard`
    answer on its folder, and say how many of how many ended (run.json's `trials`)."""
    assert s.folder is not None  # a planned study always has a run folder
    try:
        _, summary = write_outputs(study, s.folder, s.task)
    except SuiteError as err:  # a full disk: the trials are in the storage; the stop goes on
        print(f"error: {err}", file=sys.stderr)
        return
    print(summary)


def _run_supervised(request: Request) -> tuple[Setup, Any, int]:
    """The first worker plans: it tells the worker count as soon as it is known, and this process
    starts the other workers then (none when one is enough: `--workers auto` on one CPU or GPU,
    or one trial left), held until the plan is stored, so their imports overlap the first's
    checks; then it hands back the setup (without its prepared task) and this process waits for
    all. Stops are held from its start to `run_workers` but while it plans: one stops every
    process started so far wherever it lands, and a second cannot cut short the wait for its
    trial to be put back."""
    study = None
    try:
        with stops_held():
            with worker_signals():
                first = start_child(_plan_then_work, request, env=worker_env({}), own_group=True)
            held: list[Any] = []  # the Popen of each worker started while the first plans
            try:
                with stops_allowed():
                    early, environments = first.answer(last=False)
                start_held_workers(early, environments[1:], held)
                with stops_allowed():
                    s, planned = first.answer()
                if request.offline:  # as a process that planned itself
                    os.environ["HF_HUB_OFFLINE"] = "1"
                study = _load_study(s)
            except BaseException:  # a stop, an error it answered, or this process failed
                let_go(held, go=False)  # their input ends: a worker waiting for the plan ends quietly
                stop_workers([first.process, *held], grace_s())
                raise
            let_go(held)
            desc = f"trials ({s.workers} worker{'s' if s.workers > 1 else ''})"
            shown = (
                None if request.quiet else (lambda running: watch(study, planned, s.workers, running, desc))
            )
            codes = run_workers(study, [first.process, *held], watch=shown)
    except KeyboardInterrupt as stop:
        if study is not None:  # the study was planned: what ended, what is left
            print(interrupted_note(study, planned, _what_became_of(stop)), file=sys.stderr)
            _outputs_at_stop(s, study)
        raise
    if bad := [c for c in codes if c]:
        ended = f"{len(bad)} of {len(codes)} workers exited early (codes {bad})"
        print(f"study {s.name}: {ended}", file=sys.stderr)
    return s, study, planned


def _plan(request: Request, on_workers: Callable[[Setup], None] | None = None) -> tuple[Setup, Any]:
    """Plan the study (or resume or grow it), then open its MLflow parent run, before any trial."""
    from suite.study.planning import plan_study

    s, study = plan_study(request, on_workers)
    if (tracking := trackers(s, s.name)) is not None:
        tracking.open_study()
    return s, study


def _load_study(s: Setup) -> Any:
    import optuna

    from suite.study.storage import open_storage

    return optuna.load_study(study_name=s.name, storage=open_storage(s.url))


def _plan_then_work(request: Request) -> int:
    """The first worker's side of `_run_supervised`: plan, hand the plan back, then work as a
    worker `run` started would (`worker_request`); pinned to a device it does not have yet (a
    GPU), it starts afresh as that worker, in the environment it started in."""
    from suite.model.devices import worker_environment

    started_in = dict(os.environ)
    stop_with_parent()

    def tell_workers(early: Setup) -> None:  # the count and each worker's environment, before the checks
        tell((early, [worker_environment(i, early.trainer) for i in range(early.workers)]))

    s, study = _plan(request, on_workers=tell_workers)
    hand_back((dataclasses.replace(s, prepared=None), planned_count(s)))
    own = worker_environment(0, s.trainer)
    if any(started_in.get(name) != value for name, value in own.items()):
        offline = {"HF_HUB_OFFLINE": "1"} if request.offline else {}
        restart_as_worker(s, {**started_in, **offline, **own})
    return work_joined(study, dataclasses.replace(s, request=worker_request(s), workers=1))


def _what_became_of(stop: KeyboardInterrupt) -> str:
    """The running trials of a stopped `run`: how many were put back, and those (named) waiting
    for their heartbeat."""
    if not isinstance(stop, Stopped):  # no worker was stopped by `run_workers`
        return "no trial was put back"
    if not stop.waiting:
        return put_back_note(stop.put_back)
    trials = f"trial{'s' if len(stop.waiting) > 1 else ''} {', '.join(map(str, stop.waiting))}"
    back = f"{put_back_note(stop.put_back)}; " if stop.put_back else ""
    return (
        f"{back}{trials} still marked running, not put back within {stop.grace_s:.0f} s: each goes back "
        "to the queue once its heartbeat is stale"
    )


def worker(request: Request, wait_for_plan: bool = False) -> int:
    """`suite worker`: join a study from another process or machine and run trials until done;
    `wait_for_plan`: one `run` started while its first worker plans (`wait_for_go`)."""
    stop_with_parent()  # first: whatever stop handling this process inherited, a stop reaches it
    if wait_for_plan and not wait_for_go():
        return 0
    study, s = open_joined(request)
    return work_joined(study, s)


def wait_for_go() -> bool:
    """In a worker `run` started while its first worker plans: import what every worker imports,
    then wait for one line on stdin. True: `let_go` (the study is planned); False: the end of input
    (planning failed or was stopped, or `run` is gone), and the worker ends without joining. (A
    stop while it imports ends it too: `run` passes each stop on.)"""
    import suite.study.planning  # noqa: F401 - torch, Optuna
    import suite.study.preflight  # noqa: F401 - transformers, the heads
    import suite.study.work  # noqa: F401 - Lightning, the trial

    reach("held")
    return sys.stdin.readline().strip() == GO


def work_joined(study: Any, s: Setup) -> int:
    """A worker on a study it joined: trials until none is left; a stop says what it left."""
    import torch

    torch.set_num_threads(s.threads)
    join_checked(study, s)
    study.pruner = s.sweep.make_pruner()  # a loaded study has Optuna's default pruner, not the sweep's
    try:  # a worker `run` started leaves the kept files' warning to `run`, which read the same places
        run_worker(study, s, progress=not s.request.quiet, warn_kept=not os.environ.get(FOLDER_ENV))
    except KeyboardInterrupt:
        if not s.request.quiet:  # a worker `run` started is quiet: `run` speaks for the study
            print(interrupted_note(study, planned_count(s)), file=sys.stderr)
        raise
    return 0


def export(run: Path, storage: str | None, study: str | None, every: bool, output: Path) -> None:
    """`suite export`: a run folder's study (or `every` study of its storage) to JSONL or CSV."""
    from suite.outputs.run_folder import export as export_records

    count, unscored = export_records(run, storage, study, every, output)
    for line in unscored:  # the count does not say that some settings have no score
        print(line)
    print(f"{output}: {count} trials")
