"""Aggregates across tasks (Agarwal et al., NeurIPS 2021, "Deep RL at the edge of the statistical
precipice"; reference code `rliable`): per model or recipe, over the leaderboard entries of several
tasks at one training size,
- each task normalised to a common scale: 0 = the best constant prediction (the entry's
  `baseline.value`), 1 = the best comparable reported median of that task and size (`reported`
  items with `comparable` and `statistic: median`, 0-100 scale); a task without one stays raw
  (or, with `fallback="perfect"`, 1 = a perfect score of 1.0); `normalisation` says which per task;
- the interquartile mean (IQM) over all runs of all tasks, with a stratified-bootstrap interval
  (runs resampled within each task, tasks fixed);
- the performance profile: the share of runs whose normalised score is above each threshold tau,
  with pointwise bootstrap bands (the same replicates); tau = 0 on the baseline scale is the share
  of runs better than the constant prediction (1 - the failure rate under the baseline rule);
- the average probability of improvement against a named reference: the mean over the tasks both
  ran of P(X > Y) (Mann-Whitney form, ties 1/2), with a stratified bootstrap that resamples each
  side's runs independently within each task.
Point estimates are rliable's. Intervals are rliable's percentile intervals widened for few runs
per task (intervals.py, with their measured coverage: the IQM's percentile
interval covered 86-94% at 3-10 runs per task on 5 tasks, the widened one 94-97%);
`intervals="percentile"` gives rliable's own. None has zero width: where no resample moves an
estimate (every run tied) its interval is None, and a profile share of 0 or 1 gets exact bounds.

Sizes are never pooled: `aggregate` takes entries where every task has one size (and one rank
group) and raises otherwise; `aggregate_by_size` gives one aggregate per size, over the tasks
that have it. Settings are never pooled silently: a group with several entries on one task (a
grid of settings, several models under `by="recipe"`) raises unless `settings` says what to do.

Written here rather than calling `rliable` (kept as the test's cross-check, tests/test_aggregate.py)
because rliable 1.2.0 does not do it right for us: (1) it needs every method and task to have the
same number of runs (a runs x tasks matrix); a leaderboard's tasks have different run counts, so
here each task weighs the same whatever its runs (weights 1/n_task; with equal counts this is
rliable's pooled IQM); (2) its bootstrap draws from numpy's global random state, ignoring its
`random_state`; (3) it pins arch < 8, and arch 7.x does not import with pandas 3 while arch 8
breaks rliable's bootstrap (its `random_state` keyword is gone). The IQM here trims exactly a
quarter of the weight from each end (a fractional run at the edges); rliable (scipy's
`trim_mean`) drops floor(N/4) whole runs, so the two agree exactly when N is a multiple of 4.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.config.task import size_order
from suite.errors import SuiteError
from suite.stats.aggregate.intervals import (
    CONFIDENCE,
    METHODS,
    calibrated,
    improvement_factor,
    iqm_factor,
    percentile_interval,
    profile_band,
    resample_tasks,
)
from suite.stats.aggregate.normalised import (
    baseline_of,
    by_task,
    choose,
    group_name,
    normalisation,
    run_scores,
)
from suite.stats.compare import outperform
from suite.study.records import finite_scores, runs

SETTINGS = ("one", "best", "pool")
FALLBACKS = ("raw", "perfect")
Entry = dict[str, Any]


# --- the estimators (vectorised over bootstrap replicates: the last axis holds the runs) -------


def weighted_iqm(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The interquartile mean of `values` (..., N) with run weights (N,): the weighted mean of the
    middle half of the weight (a run that straddles the 25% or 75% point counts with the part of
    its weight inside). Equal weights and N a multiple of 4: scipy's trim_mean(0.25)."""
    order = np.argsort(values, axis=-1, kind="stable")
    v = np.take_along_axis(values, order, axis=-1)
    w = weights[order]
    total = w.sum(axis=-1, keepdims=True)
    upper = np.cumsum(w, axis=-1)
    lower = upper - w
    kept = np.clip(np.minimum(upper, 0.75 * total) - np.maximum(lower, 0.25 * total), 0.0, None)
    return (kept * v).sum(axis=-1) / (0.5 * total[..., 0])


def profile_share(values: np.ndarray, weights: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """(..., len(taus)): the weighted share of runs with a score strictly above each tau."""
    total = weights.sum()
    return np.stack([((values > tau) @ weights) / total for tau in taus], axis=-1)


def improvement_probability(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 between the runs x (..., n) and y (..., m): the Mann-Whitney U of x
    over n m (rliable's `probability_of_improvement` on one task), which is P(A > B) of unpaired
    runs (`outperform.share`: counted by rank past a million pairs; the bootstrap's n x m matrices
    of differences peaked at 3.0 GiB at 300 runs a task)."""
    return outperform.share(x, y, paired=False)


# --- the aggregate ----------------------------------------------------------------------------


def _rng(seed: int, *names: str) -> np.random.Generator:
    """A generator per group (or pair), so adding a group does not move another's interval."""
    return np.random.default_rng([seed, *(zlib.crc32(n.encode()) for n in names)])


def _weights(counts: list[int]) -> np.ndarray:
    """Run weights 1/n_task, scaled by the counts' lcm to whole numbers where that stays exact."""
    scale = math.lcm(*counts)
    scale = scale if scale < 2**40 else 1
    return np.concatenate([np.full(n, scale / n) for n in counts])


def _interval(bounds: np.ndarray | None) -> list[float] | None:
    return None if bounds is None or np.isnan(bounds).any() else [float(b) for b in bounds]


def default_taus(values: Iterable[np.ndarray], points: int = 101) -> np.ndarray:
    """One grid for every group: from min(0, lowest) to max(1, highest), with 0 and 1 on it."""
    flat = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values] or [np.zeros(0)])
    low = min(0.0, float(flat.min())) if flat.size else 0.0
    high = max(1.0, float(flat.max())) if flat.size else 1.0
    return np.union1d(np.linspace(low, high, points), [0.0, 1.0])


def aggregate(
    entries: list[Entry],
    by: str | Callable[[Entry], str | None] = "model",
    reference: str | None = None,
    nboot: int = 2000,
    seed: int = 0,
    taus: np.ndarray | None = None,
    settings: str = "one",
    fallback: str = "raw",
    intervals: str = "widened",
) -> dict[str, Any]:
    """The cross-task aggregate of leaderboard `entries` (every task at one size), per group.

    by: "model", "recipe" (the setting's `recipe`; entries without one are left out),
    "model+recipe", or a function entry -> name (None leaves the entry out).
    reference: the group every other is compared with (average probability of improvement).
    settings: several entries of one group on one task: "one" raises, "best" takes the rank-1
    entry (chosen on the same dev scores: optimistic), "pool" pools their runs.
    fallback: a task without a usable reported median: "raw" scores or "perfect" (0 = baseline,
    1 = a score of 1.0; higher-is-better metrics with a baseline only).
    nboot = 0: estimates without intervals. intervals: "widened" (calibrated for few runs per
    task) or "percentile" (rliable's; suite.stats.aggregate.intervals has both's coverage).

    Returns {by, size: {task: size}, normalisation: {task: scale}, groups: {name: {iqm: {estimate,
    interval}, profile: {taus, share, lower, upper}, tasks, runs: {task: n}, diverged, failure_rate,
    complete, normalisation: {task: kind}}}, improvement: {name: {vs, estimate, interval, tasks,
    per_task}}, nboot, seed, confidence, method, note}.
    """
    if settings not in SETTINGS:
        raise SuiteError(f"aggregate: settings must be one of {', '.join(SETTINGS)}, not {settings!r}")
    if fallback not in FALLBACKS:
        raise SuiteError(f"aggregate: fallback must be one of {', '.join(FALLBACKS)}, not {fallback!r}")
    if intervals not in METHODS:
        raise SuiteError(f"aggregate: intervals must be one of {', '.join(METHODS)}, not {intervals!r}")
    boot = Bootstrap(nboot, seed, intervals)
    name_of = group_name(by)
    strata = by_task(entries)
    scales = {task: normalisation(task, members, fallback) for task, members in strata.items()}
    left_out = sorted({e["model"] for members in strata.values() for e in members if name_of(e) is None})

    # group -> task -> normalised scores
    scores: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    counts: dict[str, dict[str, tuple[int, int | None]]] = defaultdict(dict)
    for task, members in strata.items():
        scale = scales[task]
        base = baseline_of(task, members)
        scored = finite_scores(runs(r for e in members for r in e.get("runs") or []))
        floor = base if base is not None else (float(scored.min()) if scored.size else None)  # diverged runs
        groups: dict[str, list[Entry]] = defaultdict(list)
        for e in members:
            if (name := name_of(e)) is not None:
                groups[str(name)].append(e)
        for name, own in groups.items():
            x, diverged, failed = run_scores(choose(task, name, own, settings), scale, floor)
            if x.size:
                scores[name][task] = x
                counts[name][task] = (diverged, failed)
    if reference is not None and reference not in scores:
        raise SuiteError(f"aggregate: reference {reference!r} is not a group (groups: {', '.join(scores)})")

    tasks = list(strata)
    grid = (
        np.asarray(taus, dtype=float)
        if taus is not None
        else default_taus(x for per_task in scores.values() for x in per_task.values())
    )
    out_groups = {}
    for name, per_task in scores.items():
        out_groups[name] = _group(name, per_task, counts[name], scales, grid, boot, tasks)

    improvement = {}
    if reference is not None:
        for name in scores:
            if name != reference:
                improvement[name] = _improvement(name, reference, scores, boot)

    return {
        "by": by if isinstance(by, str) else getattr(by, "__name__", "custom"),
        "size": {task: members[0]["size"] for task, members in strata.items()},
        "normalisation": scales,
        "groups": out_groups,
        "improvement": improvement,
        "reference": reference,
        "nboot": nboot,
        "seed": seed,
        "confidence": CONFIDENCE,
        "intervals": intervals,
        "method": (
            "Agarwal et al. 2021: per-task normalisation, task-weighted interquartile mean, "
            "performance profile (share of runs above tau), average probability of improvement; "
            "stratified bootstrap (runs resampled within each task), "
            + (
                "percentile intervals widened for few runs per task (t / z, Satterthwaite df over the "
                "tasks), exact bounds where a profile share is 0 or 1"
                if intervals == "widened"
                else "percentile intervals (rliable's)"
            )
        ),
        "note": _note(scales, out_groups, left_out, settings),
    }


@dataclass(frozen=True)
class Bootstrap:
    nboot: int  # 0: no intervals
    seed: int
    method: str  # one of METHODS


def group_intervals(
    xs: list[np.ndarray],
    weights: np.ndarray,
    taus: np.ndarray,
    nboot: int,
    rng: np.random.Generator,
    method: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The IQM's interval (2, ...) and the profile's band (2, ..., taus) of one group's runs per
    task `xs` (..., n_k): leading axes hold several studies at once (simulations: the same code)."""
    replicates = resample_tasks(xs, nboot, rng)  # (..., nboot, N)
    values = np.concatenate(xs, -1)
    iqm = weighted_iqm(values, weights)
    found = percentile_interval(weighted_iqm(replicates, weights), -1)
    shares = percentile_interval(profile_share(replicates, weights, taus), -2)
    band = profile_band(xs, taus, profile_share(values, weights, taus), shares, method)
    return calibrated(iqm, found, iqm_factor(xs, weights), method), band


def improvement_interval(
    pairs: list[tuple[np.ndarray, np.ndarray]], nboot: int, rng: np.random.Generator, method: str
) -> np.ndarray:
    """(2, ...) interval of the average probability of improvement over the tasks' `pairs` of
    runs (x (..., n), y (..., m)): each side's runs resampled independently within each task, as
    bootstrap weights (`outperform.replicates`: the same draws and values as the resampled runs'
    n x m matrices, in memory O(n + m) a replicate, wins counted by rank past a million pairs; the
    matrices would take 16 GB at 1,000 runs a task)."""
    estimate = np.mean([improvement_probability(x, y) for x, y in pairs], 0)
    replicates = np.zeros(())
    for x, y in pairs:
        replicates = replicates + outperform.replicates(x, y, False, nboot, rng)
    found = percentile_interval(replicates / len(pairs), -1)
    return calibrated(estimate, found, improvement_factor(pairs), method)


def _group(
    name: str,
    per_task: dict[str, np.ndarray],
    counts: dict[str, tuple[int, int | None]],
    scales: dict[str, dict[str, Any]],
    taus: np.ndarray,
    boot: Bootstrap,
    tasks: list[str],
) -> dict[str, Any]:
    own = [t for t in tasks if t in per_task]
    xs = [per_task[t] for t in own]
    weights = _weights([x.size for x in xs])
    values = np.concatenate(xs)
    iqm = float(weighted_iqm(values, weights))
    share = profile_share(values, weights, taus)
    found = band = None
    if boot.nboot > 0:
        found, band = group_intervals(
            xs, weights, taus, boot.nboot, _rng(boot.seed, "iqm", name), boot.method
        )
    failed = [counts[t][1] for t in own]  # None: a task's outcomes unknown (imported without a baseline)
    rate = (
        None
        if None in failed
        else float(np.mean([f / per_task[t].size for f, t in zip(failed, own, strict=True)]))
    )
    return {
        "iqm": {"estimate": iqm, "interval": _interval(found)},
        "profile": {
            "taus": [float(t) for t in taus],
            "share": [float(s) for s in share],
            "lower": None if band is None else [float(b) for b in band[0]],
            "upper": None if band is None else [float(b) for b in band[1]],
        },
        "tasks": own,
        "complete": len(own) == len(tasks),
        "runs": {t: int(per_task[t].size) for t in own},
        "diverged": {t: counts[t][0] for t in own if counts[t][0]},
        "failure_rate": rate,  # task-weighted, as the IQM and the profile
        "normalisation": {t: scales[t]["kind"] for t in own},
    }


def _improvement(
    name: str, reference: str, scores: dict[str, dict[str, np.ndarray]], boot: Bootstrap
) -> dict[str, Any]:
    """Average probability of improvement of `name` over `reference` on the tasks both ran."""
    shared = [t for t in scores[name] if t in scores[reference]]
    out: dict[str, Any] = {
        "vs": reference,
        "tasks": shared,
        "estimate": None,
        "interval": None,
        "per_task": {},
    }
    if not shared:
        return out
    per_task = {t: float(improvement_probability(scores[name][t], scores[reference][t])) for t in shared}
    out["per_task"] = per_task
    out["estimate"] = float(np.mean(list(per_task.values())))
    if boot.nboot > 0:
        pairs = [(scores[name][t], scores[reference][t]) for t in shared]
        rng = _rng(boot.seed, "improvement", name, reference)
        out["interval"] = _interval(improvement_interval(pairs, boot.nboot, rng, boot.method))
    return out


def _note(
    scales: dict[str, dict[str, Any]], groups: dict[str, dict[str, Any]], left_out: list[str], settings: str
) -> str:
    parts = []
    kinds: dict[str, list[str]] = defaultdict(list)
    for task, scale in scales.items():
        kinds[scale["kind"]].append(task)
    if set(kinds) - {"reported median"}:
        parts.append("scales: " + "; ".join(f"{kind}: {', '.join(tasks)}" for kind, tasks in kinds.items()))
    raw = [t for t, s in scales.items() if s["kind"].startswith("raw")]
    if raw:
        parts.append(
            f"on {', '.join(raw)} (raw) tau = 0 in the profile is not the baseline"
            + (", and their scores are not on the other tasks' scale" if len(raw) < len(scales) else "")
        )
    incomplete = [n for n, g in groups.items() if not g["complete"]]
    if incomplete:
        parts.append(f"not on every task (their aggregates cover fewer tasks): {', '.join(incomplete)}")
    if left_out:
        parts.append(f"left out (no group name): {', '.join(left_out)}")
    if settings == "best":
        parts.append("each group's rank-1 setting per task, chosen on the same dev scores (optimistic)")
    elif settings == "pool":
        parts.append("settings of a group pooled per task")
    return "; ".join(parts)


def aggregate_by_size(entries: list[Entry], **options: Any) -> dict[str, dict[str, Any]]:
    """One `aggregate` per training size (numeric order, `full` last), over the tasks that have it;
    a size with a single task is skipped (nothing to aggregate across). Keys are str(size)."""
    by_size: dict[Any, list[Entry]] = defaultdict(list)
    for e in entries:
        by_size[e["size"]].append(e)
    out = {}
    for size in sorted(by_size, key=size_order):
        if len({e["task"] for e in by_size[size]}) > 1:
            out[str(size)] = aggregate(by_size[size], **options)
    return out
