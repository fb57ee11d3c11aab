"""A study's worker, wherever it runs: joins a stored study (refusing one it would not run the same
way), takes trials until none is left with a progress bar, and says what ended (`exit_status`)
or what a stop left (`interrupted_note`); `watch` shows a study's progress from outside."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from suite.config.request import Request
from suite.errors import SuiteError
from suite.study.setup import Setup, join_study
from suite.study.storage import public_url

# tqdm's own ETA counts completions; the postfix carries the one from the measured time per step
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]"
# A watcher's polls of the storage take at most this share of its time: a poll re-reads every
# unfinished trial (Optuna caches only ended ones), 1.2-1.5 s with 10,000 queued, and the watcher
# shares the cores with the workers (benchmarks/RESULTS.md).
POLL_SHARE = 0.1
POLL_MOST_S = 60.0  # a slow poll (the first, before Optuna caches the ended trials) waits no longer


def exit_status(study: Any) -> int:
    """0 when every planned trial ended as a run; 1 (and why) when some did not: one line for each
    error that repeated and stopped trials (`suite.study.repeated_errors`), a line per other
    errored trial (at most 5), then the planned trials that did not end, why (what their workers
    wrote when they put them back: `suite.study.endings`) and what to do."""
    from optuna.trial import TrialState

    from suite.study.endings import ending_lines
    from suite.study.plan import finished_records, planned_keys
    from suite.study.records import outcome, run_key
    from suite.study.repeated_errors import error_signature, study_stops

    final = finished_records(study)
    errored = [r for r in final.values() if outcome(r) == "errored"]
    planned = planned_keys(study)
    missing = sorted(planned - set(final))
    stops = study_stops(study)
    if stops:
        waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
        for stop in stops:  # planned trials it kept from starting (its errored ones are queued too)
            unstarted = {run_key(t.user_attrs.get("key")) for t in waiting if stop.covers(t)} - set(final)
            print(stop.line(len(unstarted)), file=sys.stderr)
        stopped = {stop.signature for stop in stops}
        errored = [r for r in errored if error_signature(str(r.get("reason"))) not in stopped]
        held = {run_key(t.user_attrs.get("key")) for t in waiting if any(s.covers(t) for s in stops)}
        missing = [k for k in missing if k not in held]
    for r in errored[:5]:
        print(
            f"errored trial {r.get('trial_number', '?')} (seeds {r.get('seeds')}): {r.get('reason')}",
            file=sys.stderr,
        )
    trials = study.get_trials(deepcopy=False) if missing else []
    for line in ending_lines(trials, missing, len(planned & set(final)), len(planned)):
        print(line, file=sys.stderr)
    if errored:
        print(f"{len(errored)} errored: rerun the same command to retry them", file=sys.stderr)
    return 1 if stops or errored or missing else 0


def watch(
    study: Any, planned: int, workers: int, running: Any, desc: str, poll_s: float = 2.0, look_s: float = 0.2
) -> None:
    """A progress bar until `running()` turns false: trials ended of planned, each running trial's
    epoch, step and last dev score, and the time left from the measured time per step; drawn
    every `poll_s`, or less often where reading the storage takes long (`poll_period`),
    `running()` asked every `look_s` (it is cheap, and `run_workers` learns there that a worker
    ended)."""
    from suite.study.progress import study_progress
    from suite.study.progress_lines import progress_bar

    with progress_bar(desc, planned, bar_format=BAR_FORMAT) as bar:
        drawn, period = None, poll_s
        while running():
            if drawn is None or time.monotonic() - drawn >= period:
                start = time.monotonic()
                _show(bar, study_progress(study, planned, workers))
                drawn = time.monotonic()
                period = poll_period(poll_s, drawn - start)
            time.sleep(look_s)
        _show(bar, study_progress(study, planned, workers))


def poll_period(poll_s: float, took_s: float) -> float:
    """Seconds from one poll of the storage to the next: `poll_s`, or long enough that polls that
    take `took_s` each stay within `POLL_SHARE` of the watcher's time, up to `POLL_MOST_S`."""
    return max(poll_s, min(took_s / POLL_SHARE, POLL_MOST_S))


def _show(bar: Any, progress: Any) -> None:
    bar.total = progress.planned
    bar.update(progress.ended - bar.n)
    bar.set_postfix_str(progress.describe(), refresh=True)


def planned_count(s: Setup) -> int:
    from suite.study.setup import planned_trials

    return planned_trials(s.task, s.sweep)


def put_back_note(count: int) -> str:
    """What a stop did with the trials its workers were running."""
    if not count:
        return "no trial was running"
    return f"{count} running trial{'s' if count > 1 else ''} went back to the queue"


def interrupted_note(study: Any, planned: int, running: str | None = None) -> str:
    """What Ctrl-C leaves: trials ended, trials left, what became of the running ones (by default
    those this process was running), how to go on."""
    from suite.study.plan import ended_runs
    from suite.study.supervise import trials_put_back_by

    if running is None:
        running = put_back_note(trials_put_back_by(study, [os.getpid()]))
    ended = len(ended_runs(study))
    left = max(0, planned - ended)
    return (
        f"interrupted: {ended} of {planned} planned trials ended, {left} left ({running}); "
        "rerun the same command to resume: ended trials are kept, not rerun"
    )


def run_worker(study: Any, s: Setup, progress: bool, warn_kept: bool = False) -> int:
    """Run queued trials of `study` until none is left, after telling it the records kept for it;
    `warn_kept`: name the kept files left as not this study's (the process that planned has)."""
    from suite.study.memory import allocator
    from suite.study.pending import keeping_for, storage_faults, tell_kept
    from suite.study.plan import finished_records
    from suite.study.progress import study_progress
    from suite.study.progress_lines import progress_bar
    from suite.study.queue import queue_lock
    from suite.study.work import conclude, work

    info = study.user_attrs["run_info"]
    stamp = {
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "allocator": allocator(),
        "study": study.study_name,
        "sweep": s.sweep.name,
        "profile": info.get("profile"),
        "eval_split": s.prepared.spec.eval_split,
        "stack": s.stack,
    }
    planned = planned_count(s)
    bar = progress_bar(
        "trials", planned, initial=len(finished_records(study)), disable=not progress, bar_format=BAR_FORMAT
    )

    def done(record: dict[str, Any]) -> None:
        score = record.get("score")
        text = f"{record['metric']}={score:.3f}" if score is not None else "no score"
        eta = study_progress(study, planned, 1).describe(limit=0) if progress else ""
        bar.set_postfix_str(f"{text} {record['outcome']} | {eta}")
        bar.update()

    tracking = trackers(s, study.study_name)
    try:
        with storage_faults(s.url):  # taking a trial on a full disk: one line too
            keeping = keeping_for(study, s.url, s.folder)
            with queue_lock(study):  # records kept here by a failed write (unless `run` told them)
                tell_kept(study, keeping, conclude, warn=warn_kept)
            return work(
                study, s.prepared, s.model, s.sweep, stamp, s.trainer, progress, done, tracking, keeping
            )
    finally:
        bar.close()


def trackers(s: Setup, study: str) -> Any:
    """The study's `--log-to` trackers in this process (None without any)."""
    if not s.request.log_to:
        return None
    from suite.study.trackers import Tracking, targets_of

    return Tracking(targets_of(s.request.log_to), study, s.task.name)


def open_joined(request: Request) -> tuple[Any, Setup]:
    """The stored study `request` names and this worker's setup for it (`suite worker`), to be
    checked against the study (`join_checked`)."""
    import optuna

    from suite.study.storage import open_storage

    if request.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    storage = open_storage(str(request.storage))
    try:
        study = optuna.load_study(study_name=request.study, storage=storage)
    except KeyError:
        raise SuiteError(
            f"--study {request.study!r}: no such study in {public_url(str(request.storage))}"
        ) from None
    info = study.user_attrs.get("run_info")
    if not info:
        raise SuiteError(f"study {request.study!r}: has no run info (start it with `suite run`)")
    return study, join_study(request, info)


def join_checked(study: Any, s: Setup) -> None:
    """Refuse a stored study this worker would not run the same way; store this worker's stack
    when the study has none yet (planned by `launch`). An allowed stack change marks it mixed once
    a trial runs on it (`resume.note_stack`)."""
    from suite.study.planning import adopt_stack
    from suite.study.resume import resumption

    check_methods_joined(study, s)

    def check() -> Any:  # the study's attributes are read afresh on each call
        stored, info = study.user_attrs.get("fingerprint"), study.user_attrs.get("run_info")
        allow = s.request.allow_stack_change
        return resumption(stored, s.fingerprint, info, s.task, s.sweep, s.name, public_url(s.url), allow)

    how = check()
    if how.grown:  # `run` re-plans a study; a worker runs the plan it finds
        raise SuiteError(
            f"study {s.name!r}: its stored plan differs from its run info; rerun `suite run` first"
        )
    if how.adopt_stack and not adopt_stack(study, s):  # another worker stored its stack first
        check()


def check_methods_joined(study: Any, s: Setup) -> None:
    """Before its first trial, a worker's imported methods hash to the code the study stored: a
    worker on another node with other code (another checkout, an edited file) takes no trial."""
    from suite.identity import METHOD

    stored = study.user_attrs.get("fingerprint") or {}
    for path, code in s.methods.items():
        held = stored.get(f"{METHOD}{path}")
        if held is not None and held != code.hash:
            raise SuiteError(
                f"worker: method {path} as imported here ({code.file}) is code {code.hash}; study "
                f"{s.name!r} ran code {held}: this worker takes no trial (give it the study's method "
                "code: the same checkout on PYTHONPATH, or the same installed package)"
            )
