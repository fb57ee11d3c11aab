"""The one planning path of `run` and `launch`: a request's study opened in its storage (new,
resumed, or grown when its fingerprint allows), its provenance recorded once, and every planned
trial the storage does not hold queued. Workers then pop the queue (suite/study/work.py), here
(`run`) or on other machines (`launch`)."""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import optuna
import torch

from suite import __version__
from suite.config.request import Request
from suite.config.sweep import SweepSpec
from suite.config.task import TaskSpec, spec_hash
from suite.data.hub import source_sha256
from suite.identity import STACK, stack_fields
from suite.provenance import git_commit
from suite.study.setup import Setup, setup_study
from suite.study.storage import public_url


def plan_study(
    request: Request, on_workers: Callable[[Setup], None] | None = None
) -> tuple[Setup, optuna.Study]:
    """Check every input, then open the request's study and queue its plan; nothing is written
    before the checks pass (a refused study is one line, exit 2). `on_workers`: `setup_study`'s."""
    from suite.study.lock import study_lock
    from suite.study.pending import Keeping, pending_dirs, storage_faults, study_uid, tell_kept
    from suite.study.plan import enqueue_plan, note_repeated_runs
    from suite.study.preflight import check_writable, make_run_folder
    from suite.study.storage import open_storage
    from suite.study.work import conclude

    s = setup_study(request, on_workers)  # a storage that cannot be reached is refused here (read only)
    assert s.folder is not None  # a planned study always has a run folder
    check_writable(s.folder)
    make_run_folder(s.folder)
    # Under the study's lock, as pops are: concurrent runs of one study create it once and
    # queue each planned trial once (the second finds the first's queue). The storage is opened
    # under it too: Optuna's creation of its tables is not safe against a concurrent one.
    with study_lock(s.url, s.name), storage_faults(s.url):
        study = open_or_resume(open_storage(s.url), s)
        keeping = Keeping(pending_dirs(s.url, s.folder), study_uid(study, locked=True))  # given if new
        tell_kept(study, keeping, conclude)  # kept records: not planned again
        if "run_info" not in study.user_attrs:  # the study's creation is its provenance
            info = run_info(s.task, s.sweep, request.profile, s.model, s.prepared)
            study.set_user_attr(
                "run_info",
                {
                    **info,
                    "study": s.name,
                    "storage": public_url(s.url),
                    "trainer": s.trainer,
                    "threads": s.threads,
                    "stack": s.stack or None,  # planned for other machines: its first worker's (adopt_stack)
                },
            )
        enqueue_plan(study, s.task, s.sweep)  # a random or QMC study's settings: drawn once, stored
        if note := note_repeated_runs(study):  # planned before `full` was planned once
            print(note, file=sys.stderr)
    print_budgets(s, study)  # not a progress bar: --quiet keeps it
    return s, study


def print_budgets(s: Setup, study: optuna.Study) -> None:
    """The run's header: each setting's optimizer steps (of the settings the study stored, for a
    random or QMC sweep), and a warning below the floor, before any trial trains. A TPE study's
    settings come from results: it has no line (`plan` shows its stand-ins)."""
    from suite.study.budget import budgets, floor_warning, steps_line
    from suite.study.plan import plan_trials, study_settings

    if s.sweep.adaptive:
        return
    plans = plan_trials(s.task, s.sweep, study_settings(study, s.sweep))
    rows = budgets(s.prepared.data, s.sweep.space, plans)
    print(steps_line(rows))  # stdout, as the summary: stderr stays one line for an error
    if warning := floor_warning(rows):
        print(warning)


def open_or_resume(storage: Any, s: Setup) -> optuna.Study:
    """The stored study when it resumes (the same plan, a grown plan, or an allowed stack change),
    a new one when none exists; else refuse before anything is written."""
    from suite.study.resume import resumption
    from suite.study.storage import open_study

    how = None
    if s.name in optuna.study.get_all_study_names(storage):
        existing = optuna.load_study(study_name=s.name, storage=storage)
        stored = existing.user_attrs.get("fingerprint")
        if stored is not None and not s.stack:  # planned for other machines: their workers check the stack
            stored = plan_fields(stored)
        if stored is not None or existing.get_trials(deepcopy=False):  # else: killed while created
            info = existing.user_attrs.get("run_info")
            allow = s.request.allow_stack_change
            how = resumption(stored, s.fingerprint, info, s.task, s.sweep, s.name, str(s.folder), allow)
    study = open_study(storage, s.name, s.sweep, s.task.metric.higher_is_better)
    if "fingerprint" not in study.user_attrs:
        study.set_user_attr("fingerprint", s.fingerprint)
    if how is not None:
        _record_resumption(study, s, how)
    return study


def _record_resumption(study: optuna.Study, s: Setup, how: Any) -> None:
    """A grown plan becomes the study's plan (fingerprint, task and sweep: workers and later runs
    compare against it); an allowed stack change is kept as the study's list of stacks."""
    if how.adopt_stack:  # from now on its stack is checked like any other study's
        # adds, never replaces:
        study.set_user_attr("fingerprint", {**stack_fields(s.fingerprint), **study.user_attrs["fingerprint"]})
    if not (how.grown or how.stack_changed):
        return
    info = dict(study.user_attrs.get("run_info") or {})
    if how.grown:
        stack = stack_fields(study.user_attrs["fingerprint"])
        study.set_user_attr("fingerprint", {**plan_fields(s.fingerprint), **stack})
        info.update(
            task=s.task.model_dump(mode="json"),
            task_hash=spec_hash(s.task),
            sweep=s.sweep.model_dump(mode="json"),
        )
        info["grown"] = [*info.get("grown", []), {"date": now(), "fields": how.grown, "added": how.added}]
    study.set_user_attr("run_info", info)  # mixed once a trial runs on the new stack (resume.note_stack)
    print(f"study {s.name}: {how.describe()}", file=sys.stderr)


def adopt_stack(study: optuna.Study, s: Setup) -> bool:
    """A worker joining a study stored without a stack (planned by `launch` on another machine, or
    before stacks, or some of their libraries, were fingerprinted) stores the entries it lacks: later
    workers and runs are checked against them. False when another worker stored them first (check
    against those instead). Re-read just before writing; two first workers racing within that moment
    both write, the last one wins."""
    stored = study.user_attrs.get("fingerprint") or {}  # read from the storage on each access
    stack = {k: v for k, v in stack_fields(s.fingerprint).items() if k not in stored}
    if not stack:
        return False
    study.set_user_attr("fingerprint", {**stored, **stack})
    info = study.user_attrs.get("run_info") or {}
    if not info.get("stack"):
        study.set_user_attr("run_info", {**info, "stack": s.stack})
    return True


def plan_fields(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint without its stack: a grown plan keeps the study's first stack on record."""
    return {k: v for k, v in fingerprint.items() if not k.startswith(STACK)}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_info(task: TaskSpec, sweep: SweepSpec, profile: str, model: str, prepared: Any) -> dict[str, Any]:
    """Provenance of one study: what ran, on what data, with which versions."""
    import transformers

    from suite.model.encoders import model_revision

    return {
        "suite_version": __version__,
        "date": now(),
        "task": task.model_dump(mode="json"),
        "task_hash": spec_hash(task),
        "sweep": sweep.model_dump(mode="json"),
        "profile": profile,
        "model": model,
        "model_revision": model_revision(model),
        "data_origin": prepared.data.origin,  # local files, or hub path/name/revision
        "data_sources": prepared.data.sources,
        "data_sha256": {k: source_sha256(v) for k, v in prepared.data.sources.items()},
        "git_commit": git_commit(),
        "baseline": prepared.baseline,
        "threads": torch.get_num_threads(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
    }
