"""Why a study's planned trials did not end, as the end of `run` and `launch --wait` says it: from
what the storage holds, never from a job's accounting alone. A worker that puts a trial back
after a stop writes why on the trial's queued copy (`note_put_back`: the time limit, a cancel,
a cap on the time limit); a copy Optuna queued after missed heartbeats carries `failed_trial`;
a trial still marked running once every worker ended is a dead worker's. What to do follows from
the reasons: a longer `--slurm-time`, the same command again, or nothing."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from suite.study.records import run_key, short_key

PUT_BACK_ATTR = "put_back"  # a queued copy's system attr: why its trial went back (`note_put_back`)
STALE_ATTR = "failed_trial"  # Optuna's, on a copy queued after its trial's heartbeat went stale
SHOWN = 3  # trials named per reason; the rest are counted
# reason -> how a line says it, after the count ({its}, {it}, {was}: one trial's or several's)
SAID = {
    "capped": "put back by a time limit shorter than a trial",
    "array_capped": "put back when that cap cancelled {its} job",
    "time_limit": "put back by the time limit's signal",
    "cancel": "put back by a cancel (SIGTERM)",
    "stop": "put back by a stop",
    "stale": "queued again after {its} worker stopped sending heartbeats (killed, or frozen)",
    "died": "still marked running: {its} worker died without putting {it} back (killed without a "
    "stop: a node failure, the memory limit or SIGKILL)",
    "lost": "ended without a record and {was} not queued again",
    "not_started": "not started",
}
ONE = {"its": "its", "it": "it", "was": "was"}
SEVERAL = {"its": "their", "it": "them", "was": "were"}


@dataclass(frozen=True)
class Unfinished:
    """A planned trial that did not end: why, and the trial that says so (None: never started)."""

    reason: str
    trial: FrozenTrial | None = None
    noted: dict[str, Any] | None = None  # what its worker wrote when it put it back


def trial_name(trial: FrozenTrial | optuna.Trial) -> str:
    """`trial 3 (size=..|...|init=..,order=..,subsample=..)`: a log line's name for a trial."""
    return f"trial {trial.number} ({short_key(str(trial.user_attrs.get('key')))})"


def note_put_back(study: optuna.Study, put_back: FrozenTrial, why: dict[str, Any]) -> bool:
    """Write `why` on the queued copy of `put_back` (the next trials hold it: `work._put_back`
    queued it under the study's lock); False when no copy is left to write on (another worker
    took it and ended it)."""
    storage, key = study._storage, put_back.user_attrs.get("key")
    attempt = put_back.user_attrs.get("attempt", 1)
    for number in range(put_back.number + 1, put_back.number + 65):
        try:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
        except KeyError:  # past the last trial
            return False
        copy = storage.get_trial(trial_id)
        if copy.user_attrs.get("key") == key and copy.user_attrs.get("attempt", 1) == attempt:
            try:
                storage.set_trial_system_attr(trial_id, PUT_BACK_ATTR, {**why, "trial": put_back.number})
            except optuna.exceptions.UpdateFinishedTrialError:
                return False
            return True
    return False


def unfinished(trials: Iterable[FrozenTrial], missing: Iterable[str]) -> list[Unfinished]:
    """Why each planned run in `missing` (run keys) did not end, once every worker has ended."""
    by_key: dict[str | None, list[FrozenTrial]] = {}
    for t in trials:
        by_key.setdefault(run_key(t.user_attrs.get("key")), []).append(t)
    return [_why(sorted(by_key.get(key, []), key=lambda t: t.number)) for key in sorted(missing)]


def _why(trials: list[FrozenTrial]) -> Unfinished:
    if running := [t for t in trials if t.state == TrialState.RUNNING]:
        return Unfinished("died", running[-1])
    waiting = [t for t in trials if t.state == TrialState.WAITING]
    put_back = [t for t in trials if t.state == TrialState.FAIL and "record" not in t.user_attrs]
    copied = waiting[-1].system_attrs if waiting else {}
    if STALE_ATTR in copied:  # Optuna's copy holds its failed trial's attributes: a note is older
        return Unfinished("stale", _numbered(put_back, copied[STALE_ATTR]))
    if noted := copied.get(PUT_BACK_ATTR):
        return Unfinished(noted.get("why", "stop"), _numbered(put_back, noted.get("trial")), noted)
    if put_back:
        return Unfinished("stop" if waiting else "lost", put_back[-1])
    return Unfinished("not_started")


def _numbered(trials: list[FrozenTrial], number: Any) -> FrozenTrial | None:
    return next((t for t in trials if t.number == number), trials[-1] if trials else None)


def reason_lines(found: list[Unfinished]) -> list[str]:
    """One line per reason, in `SAID`'s order: how many, and the first trials with what their
    workers wrote (how long each ran, in which job)."""
    lines = []
    for reason, said in SAID.items():
        these = [u for u in found if u.reason == reason]
        if not these:
            continue
        named = [_named(u) for u in these if u.trial is not None][:SHOWN]
        more = len(these) - len(named)
        listed = ", ".join(named) + (f", and {more} more" if named and more else "")
        said = said.format(**(ONE if len(these) == 1 else SEVERAL))
        lines.append(f"  {_count(len(these))} {said}" + (f": {listed}" if listed else ""))
    return lines


def _named(u: Unfinished) -> str:
    assert u.trial is not None
    noted = u.noted or {}
    if u.reason == "capped" and noted.get("times"):
        ran, limit = ", ".join(f"{t:.0f}" for t in noted["times"]), noted.get("limit_min")
        return f"{trial_name(u.trial)}, stopped after {ran} s by {len(noted['times'])} limits of {limit} min"
    if "after_s" in noted:
        return f"{trial_name(u.trial)} after {noted['after_s']:.0f} s in job {noted.get('job')}"
    return trial_name(u.trial)


def _count(n: int) -> str:
    return f"{n} trial{'s' if n != 1 else ''}"


def advice(found: list[Unfinished]) -> str:
    """What to do about `found`, in one line: a longer --slurm-time where a limit is shorter than
    a trial, else the same command again (nothing, where nothing is left)."""
    left = _count(len(found)) + " left"
    capped = [u.noted for u in found if u.reason == "capped" and u.noted]
    if capped:
        limit = max(int(n.get("limit_min") or 0) for n in capped)
        return f"rerun with a --slurm-time longer than {limit} min to run the {left} (no attempt was spent)"
    line = f"rerun the same command to run the {left} (no attempt was spent)"
    if any(u.reason == "time_limit" for u in found):
        line += "; a trial that time limits stop twice needs a longer --slurm-time"
    return line


def ending_lines(trials: list[FrozenTrial], missing: Iterable[str], ended: int, planned: int) -> list[str]:
    """The study as it is once every worker ended: how many of its planned trials ended, why each
    of `missing` did not, and what to do (no line when none is missing)."""
    found = unfinished(trials, missing)
    if not found:
        return []
    head = f"{ended} of {planned} planned trials ended; {len(found)} did not:"
    return [head, *reason_lines(found), advice(found)]
