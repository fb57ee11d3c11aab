"""Leaderboard entries to normalised runs, one task at a time: the scale each task is read on (0 =
the best constant prediction, 1 = the comparable reported median of that size, else a perfect
score or the raw score), the entries a group contributes per task, and the strata the aggregate
resamples within (across_tasks.py)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from suite.errors import SuiteError
from suite.stats.compare import rank_group_key
from suite.study.records import is_run, score

Entry = dict[str, Any]


def group_name(by: str | Callable[[Entry], str | None]) -> Callable[[Entry], str | None]:
    if callable(by):
        return by
    if by == "model":
        return lambda e: e["model"]
    if by == "recipe":
        return lambda e: (e.get("setting") or {}).get("recipe")
    if by == "model+recipe":

        def both(e: Entry) -> str | None:
            recipe = (e.get("setting") or {}).get("recipe")
            return None if recipe is None else f"{e['model']} / {recipe}"

        return both
    raise SuiteError(f"aggregate: by must be model, recipe or model+recipe, not {by!r}")


def baseline_of(task: str, entries: list[Entry]) -> float | None:
    values = {
        float(v)
        for e in entries
        if isinstance(e.get("baseline"), dict) and (v := e["baseline"].get("value")) is not None
    }
    if len(values) > 1 and max(values) - min(values) > 1e-9:
        raise SuiteError(
            f"aggregate: task {task}: entries of one rank group disagree on the baseline {values}"
        )
    return next(iter(values), None)


def normalisation(task: str, entries: list[Entry], fallback: str = "raw") -> dict[str, Any]:
    """The scale of one task (its entries at one size, one rank group): {kind, zero, one,
    reference (the reported median used: model, value, source), direction (+1, or -1 for a raw
    lower-is-better metric, negated so that higher is better everywhere), why (when not the
    reported median)}. Scores map to (score - zero) / (one - zero), times direction when raw."""
    higher = bool(entries[0].get("higher_is_better", True))
    base = baseline_of(task, entries)
    medians = [
        rep
        for e in entries
        for rep in e.get("reported") or []
        if rep.get("comparable") and rep.get("statistic") == "median" and rep.get("value") is not None
    ]
    why = "no comparable reported median for this task and size"
    if medians and base is None:
        why = "no baseline value"
    elif medians:
        best = (max if higher else min)(medians, key=lambda rep: float(rep["value"]))
        one = float(best["value"]) / 100.0  # reported numbers are on the 0-100 scale, scores 0-1
        if (one - base) * (1 if higher else -1) > 0:
            reference = {k: best.get(k) for k in ("model", "value", "source", "n_runs")}
            return {
                "kind": "reported median",
                "zero": base,
                "one": one,
                "reference": reference,
                "direction": 1,
            }
        why = f"the best comparable reported median ({best['value']}) is not better than the baseline"
    if fallback == "perfect" and base is not None and higher and base < 1.0:
        return {
            "kind": "perfect score",
            "zero": base,
            "one": 1.0,
            "reference": None,
            "direction": 1,
            "why": why,
        }
    direction = 1 if higher else -1
    kind = "raw" if higher else "raw (negated: lower is better)"
    return {"kind": kind, "zero": 0.0, "one": 1.0, "reference": None, "direction": direction, "why": why}


def _normalise(scale: dict[str, Any], score: float) -> float:
    return scale["direction"] * (score - scale["zero"]) / (scale["one"] - scale["zero"])


def run_scores(
    entries: list[Entry], scale: dict[str, Any], floor: float | None
) -> tuple[np.ndarray, int, int | None]:
    """The normalised scores of the entries' runs (errored and pruned trials are not runs), the
    number of diverged runs and of failed runs (None where a run's outcome is unknown: imported
    without the failure rule's baseline). A diverged run (no score) counts as the
    constant prediction's score (no better than the baseline), or, with no baseline, as the task's
    lowest scored run."""
    scores, diverged, failed, unknown = [], 0, 0, False
    for e in entries:
        for r in e.get("runs") or []:
            if not is_run(r):
                continue
            unknown |= r.get("outcome") == "unknown"
            failed += bool(r.get("failed"))
            s = score(r)
            if not math.isfinite(s):
                diverged += 1
                s = floor
            if s is not None:
                scores.append(_normalise(scale, float(s)))
    return np.asarray(scores, dtype=float), diverged, None if unknown else failed


def choose(task: str, name: str, entries: list[Entry], settings: str) -> list[Entry]:
    if len(entries) == 1 or settings == "pool":
        return entries
    if settings == "best":  # the entry ranked first in its group (selected on the same dev scores)
        return [min(entries, key=lambda e: e.get("rank", 1))]
    raise SuiteError(
        f"aggregate: {name} has {len(entries)} entries (settings) on task {task}: pass one per group and "
        "task, group by model+recipe, or settings='best' (the rank-1 setting) or 'pool'"
    )


def by_task(entries: list[Entry]) -> dict[str, list[Entry]]:
    """Task -> its entries; one size and one rank group per task, or a SuiteError."""
    by_task: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        by_task[e["task"]].append(e)
    for task, members in by_task.items():
        sizes = sorted({str(e["size"]) for e in members})
        if len(sizes) > 1:
            raise SuiteError(
                f"aggregate: task {task} has sizes {', '.join(sizes)}; sizes are never pooled: "
                "use aggregate_by_size or pass one size per task"
            )
        if len({rank_group_key(e["rank_group"]) for e in members if e.get("rank_group")}) > 1:
            raise SuiteError(
                f"aggregate: task {task} has entries in more than one rank group (evaluation set, "
                "eval_limit, max_length, metric or data differ); pass the entries of one"
            )
    return dict(sorted(by_task.items()))
