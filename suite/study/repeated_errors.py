"""An error that repeats stops the study: once `REPEATS` planned trials errored with one signature
(the exception's type and message with numbers and paths taken out), no worker starts another trial
of what that error covers, so a crash on every trial cannot burn a queue of 64 workers.

What it covers (`Stop.scope`): the (size, searched values) pairs every trial it hit shares, when no
trial that ended as a run shares them all (an out-of-memory at `batch_size=64` stops the settings
at 64, not the others); else the whole study, and then only when those errors came in a row, after
the last trial that ended as a run: three transient faults spread over a long study stop nothing.
Only errors told since the study was last planned count (each errored record carries the plan's
`epoch`, `PLAN_EPOCH_ATTR`): rerunning the same command after a fix gives every trial fresh
attempts, and rerunning it without one stops again after three."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from optuna.trial import FrozenTrial, TrialState

from suite.study.records import outcome

REPEATS = 3  # planned trials errored with one signature that stop what it covers
PLAN_EPOCH_ATTR = "plan_epoch"  # the study's count of reruns that planned errored trials again

_LOCATION = re.compile(r"\s*\([\w.-]+\.py:\d+\)$")  # crash_reason's `(file.py:line)`
_PATH = re.compile(r"(?:[A-Za-z]:)?[\w.~-]*(?:/[\w.@+~-]+)+/?")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# What to change, for errors whose cause is known (the first pattern found in the message).
_HINTS = (
    ("out of memory", "lower batch_size or max_length, or run fewer workers per GPU (--workers-per-gpu)"),
    ("no kernel image", "install a torch built for this GPU (docs/gpu.md)"),
    ("cuda error", "check the GPU with nvidia-smi; a failing card errors every trial"),
)


def error_signature(reason: str) -> str:
    """`error: Type: message (file.py:line)` -> `Type: message`, with paths and numbers as `<path>`
    and `#`: the same error at another step, address, allocation size or file is one error."""
    text = _LOCATION.sub("", reason.removeprefix("error: ").strip())
    text = _PATH.sub("<path>", text)
    return _NUMBER.sub("#", text)[:300]


def _factors(trial: FrozenTrial) -> dict[str, str]:
    """The trial's size and searched values, as comparable strings."""
    attrs = trial.user_attrs
    values = {f"{k}": repr(v) for k, v in (attrs.get("setting") or {}).items()}
    return {"size": repr(attrs.get("size")), **values}


@dataclass(frozen=True)
class Stop:
    """One repeated error: its signature, how many trials it errored, an example of its full reason,
    and what it stops (`scope`: factor -> value every trial it hit shares; None: the study)."""

    signature: str
    count: int
    example: str
    scope: dict[str, str] | None

    def covers(self, trial: FrozenTrial | Any) -> bool:
        """Whether a planned trial falls in what this error stops."""
        if self.scope is None:
            return True
        factors = _factors(trial)
        return all(factors.get(k) == v for k, v in self.scope.items())

    def where(self) -> str:
        if self.scope is None:
            return "every trial"
        return "trials at " + " ".join(f"{k}={v}" for k, v in self.scope.items())

    def line(self, waiting: int = 0) -> str:
        """The one line a run says for it: the error, what it stopped, what to change."""
        hint = next((h for pattern, h in _HINTS if pattern in self.signature.lower()), "fix its cause")
        held = f"; {waiting} planned trial{'s' if waiting != 1 else ''} not started" if waiting else ""
        return (
            f"stopped {self.where()}: {self.count} trials errored with the same error, "
            f"{self.example}{held}. To go on: {hint}, then rerun the same command (every errored "
            "and unstarted trial trains then; each errored record keeps its trace in trials.jsonl); "
            "a fix to the model, data or method files is a new study: add --study NAME or use another --out"
        )


def repeated_errors(trials: list[FrozenTrial], epoch: int = 0, repeats: int = REPEATS) -> list[Stop]:
    """The errors of `trials` told in plan `epoch` that `repeats` or more planned trials share."""
    hits: dict[str, dict[str, FrozenTrial]] = defaultdict(dict)  # signature -> key -> its last error
    runs = []
    for t in sorted(trials, key=lambda t: t.number):
        record = t.user_attrs.get("record")
        if record is None or t.state not in (TrialState.FAIL, TrialState.COMPLETE, TrialState.PRUNED):
            continue
        if outcome(record) != "errored":
            runs.append(t)
        elif t.state == TrialState.FAIL and record.get(PLAN_EPOCH_ATTR, 0) == epoch:
            hits[error_signature(str(record.get("reason", "")))][str(t.user_attrs.get("key"))] = t
    planned = [t for t in trials if "key" in t.user_attrs]
    last_run = max((t.datetime_complete for t in runs if t.datetime_complete), default=None)
    stops = []
    for signature, by_key in hits.items():
        hit = list(by_key.values())
        scope = _scope(hit, runs) if len(hit) >= repeats else None
        if scope is not None and all(Stop(signature, 0, "", scope).covers(t) for t in planned):
            scope = None  # it covers every planned trial: say so
        if scope is None and last_run is not None:  # the study's: only errors since the last run
            hit = [t for t in hit if t.datetime_complete and t.datetime_complete > last_run]
        if len(hit) >= repeats:
            stops.append(Stop(signature, len(hit), str(hit[-1].user_attrs["record"].get("reason")), scope))
    return stops


def _scope(hit: list[FrozenTrial], runs: list[FrozenTrial]) -> dict[str, str] | None:
    """The factors every hit trial shares, if no run shares them all; else None (the study)."""
    first, *rest = (_factors(t) for t in hit)
    shared = {k: v for k, v in first.items() if all(f.get(k) == v for f in rest)}
    if not shared or any(all(_factors(r).get(k) == v for k, v in shared.items()) for r in runs):
        return None
    return shared


def study_stops(study: Any, trials: list[FrozenTrial] | None = None) -> list[Stop]:
    """The repeated errors that stop (part of) a stored study now."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return repeated_errors(trials, plan_epoch(study))


def plan_epoch(study: Any) -> int:
    """How many reruns planned the study's errored trials again (0: none yet)."""
    return int(study.user_attrs.get(PLAN_EPOCH_ATTR, 0))
