"""A reported number against ours, like for like (docs/statistics.md, Gap to reported numbers): a
reported median or mean of k runs against that statistic of k runs predicted from ours; a max of k
against our expected max at k with an exact rank test; a single run with the same test at k = 1.
Never against the CI of our own N-run median, which shrinks with N.

Two honesty rules (docs/design.md, Intervals and small samples): a rank test that cannot reach
p < 0.05 in the direction the reported number lies says so and gives the runs it needs
(suite.stats.decide), and the sampling error of our evaluation subsample (`eval_sd`) widens every
reference it can enter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from suite.stats.decide import verdict
from suite.stats.design import Layout, by_setting, layout
from suite.stats.estimates.expected_maximum import expected_max
from suite.stats.estimates.failed_runs import failed_values
from suite.stats.estimates.gap_reference import order_center, stacked_gap, stacked_order_gap
from suite.stats.estimates.rank_gap import rank_test
from suite.stats.estimates.uncertainty import no_spread, reduce
from suite.study.records import TrialRecord, finite_scores, outcome


def lost_design(lay: Layout, succeeded: Layout) -> bool:
    """Our succeeded runs no longer form the design's grid (one init row left of a 3 x 3 grid whose
    other rows failed): their spread then hides an axis a paper's runs vary along."""
    return lay.design == "crossed" and succeeded.design != "crossed"


def stacked_failed_gap(
    lay: Layout,
    grids: np.ndarray,
    reported: np.ndarray,
    k: int,
    failed: tuple[np.ndarray | float, np.ndarray | float],
    resamples: int = 4000,
    seed: int = 0,
    eval_sd: float = 0.0,
    statistic: str = "mean",
) -> dict[str, np.ndarray]:
    """A reported mean or median of k runs against T studies' SUCCEEDED runs (`lay`, `grids`:
    failed runs left out), where any of the k may have failed unseen, scoring within `failed`
    (low, high). p = the largest over j = 0..k failed among the k, a union of k + 1 tests:
    whatever number of the k failed, its own test holds, so the largest p does too, for any
    failure rate, seen in our runs or not. Why: runs that fail far below (RTE: 4.4 SD) make a
    mixture a sample without a failed run cannot show (at N = 3 and 20% failed, half the
    samples); the mixture-blind tests rejected 6.5-11% of true reported means and 6-8% of true
    medians (docs/statistics.md). Given j:
    - mean: reported = (1 - j/k) S + (j/k) v, S the mean of k - j succeeded runs, so
      S = (reported - (j/k) v) / (1 - j/k) is tested by `stacked_gap` at k - j (v where S comes
      closest to ours); j = k: the reported value must lie in `failed`;
    - median: the j failed runs are the lowest, so the median of k is an order statistic of the
      k - j succeeded runs (`_median_given`), tested by `stacked_order_gap`; where the middle of
      the k runs failed, the reported value must lie in `failed`.
    Above ours no j > 0 comes closer, so power there is `stacked_gap`'s; below, a gap that j
    failed runs would make is not a gap. Returns (T,) p (NaN: cannot decide), p_bootstrap, p_t
    and percentile of the j with the largest p, and that j (`failed`)."""
    n_t = len(grids)
    low, high = (np.broadcast_to(np.asarray(v, dtype=float), (n_t,)) for v in failed)
    center = reduce(grids.reshape(n_t, -1), statistic)
    best = {"p": np.full(n_t, -1.0)}
    for j in range(k + 1):
        given = _median_given(k, j) if statistic == "median" else (() if j == k else None)
        if given == ():  # the reported value is failed runs' own score
            inside = ((low <= reported) & (reported <= high)).astype(float)
            found = {"p": inside, "p_bootstrap": inside, "p_t": inside, "percentile": np.full(n_t, 50.0)}
        elif statistic == "mean":
            share = j / k
            ends = [(reported - share * v) / (1 - share) for v in (high, low)]
            found = stacked_gap(lay, grids, np.clip(center, *ends), "mean", k - j, resamples, seed, eval_sd)
        elif j == 0:
            found = stacked_gap(lay, grids, reported, "median", k, resamples, seed, eval_sd)
        else:
            ranks, halves = given
            if halves:  # v where S = 2 x reported - v comes closest to where the lowest run centres
                expected = order_center(lay, grids, k - j, ranks)
                value = np.clip(expected, 2 * reported - high, 2 * reported - low)
            else:
                value = reported
            found = stacked_order_gap(lay, grids, value, k - j, ranks, resamples, seed, eval_sd)
        better = np.nan_to_num(found["p"], nan=-1.0) > best["p"]
        found["failed"] = np.full(n_t, j)
        best = {name: np.where(better, found[name], best.get(name, np.nan)) for name in found}
    undecided = no_spread(grids.reshape(n_t, -1))
    return best | {"p": np.where(undecided, np.nan, best["p"])}


def _median_given(k: int, j: int) -> tuple[tuple[int, ...], bool] | tuple[()]:
    """The median of k runs whose j lowest failed, as the succeeded runs' order statistics:
    (their 0-based ranks among the k - j, whether one middle run failed: an even k's median then
    averages a failed score v and the lowest succeeded run, S = 2 x reported - v); () where every
    middle run failed (the median is a failed score)."""
    lower, upper = (k - 1) // 2, k // 2  # the middle runs' positions among the k (equal for odd k)
    if j <= lower:
        return tuple(sorted({lower - j, upper - j})), False
    if j <= upper:
        return (0,), True
    return ()


# Measured with `python -m benchmarks.gap_collapse --fallback --studies 4000 --resamples 4000`
# (2026-12-07): the test on every run, a reported mean or median of 5, 25% of runs failing 4.4 SD
# below, our 3, 5, 10 runs and a 3 x 3 grid; MC SE 0.3-0.5 points.
FALLBACK_TYPE_I = {"mean": "5.6-10.3%", "median": "2.8-6.3%"}
FALLBACK = (
    "no failure baseline: this test assumes no run fails unseen, and its type-I is not held where runs "
    "collapse (at nominal 5% it rejected {rate} of true reported {statistic}s of 5 where 25% of runs "
    "failed 4.4 SD below, from 3-10 runs or a 3 x 3 grid; docs/statistics.md#gap-to-reported-numbers); "
    "give the failure rule's baseline (records' `baseline`, or failure_baseline) for the test that holds"
)


def gap_to_reported(
    records_or_scores: Sequence[TrialRecord] | Sequence[float | None],
    reported: float,
    statistic: str,
    n_runs: int | None = None,
    seed: int = 0,
    resamples: int = 4000,
    eval_sd: float = 0.0,
    *,
    failure_baseline: float | None = None,
) -> dict[str, Any]:
    """A reported number (0-100 scale) against ours (natural scale, x100 here), like for like:
    - median or mean of k runs: `stacked_gap` (design-aware predictive draws and a t reference);
      where the records say where a failed run scores (`failed_values`: their baseline, our
      failed runs), by `stacked_failed_gap` on our succeeded runs: any of the k may have
      failed; it cannot decide where fewer than 2 of ours succeeded or they span one grid row;
    - max of k runs: our expected max at k (past our N runs: our max, a lower bound), with the
      exact rank test `rank_p` (rank_gap.py; a bootstrap cannot reach above our largest run);
    - a single run (or a test-server score): the same rank test at k = 1.
    eval_sd: sd, in x100 points, of our evaluation-subsample score around the full evaluation
    set's (our runs used eval_limit, the reported number the full set); 0 when both used one set.
    Pass the runs (records) of one setting for the design-aware draw; plain scores are taken as
    independent runs. k unknown (n_runs None) -> no same-n comparison, and the note says so.
    failure_baseline: where the task's failed runs score (its failure rule's baseline, on the
    runs' scale as the suite's records carry it in `baseline`, not x100). Without either, and
    with no failed run among ours, a median or mean falls back to the test on every run, whose
    type-I is not held where runs collapse: the result's `fallback` says so (FALLBACK).

    Shape: {statistic, k, n, reported, eval_sd, our_value, gap (ours - reported), percentile (of
    the reported value in the reference), p_two_sided (2 min(P(<=), P(>=)), capped at 1; None
    when the test cannot decide), decidable, min_p (the smallest p the test can reach here),
    runs_needed (when it cannot decide: the fewest runs that could), direction ("above" |
    "below": where the reported value lies), reference, method, p_parts {bootstrap, t} (median,
    mean), failed_runs_explain (with a failure rule: how many failed runs among the k best
    explain the reported value), fallback (median, mean without a failure baseline: why its p may
    mislead), estimator and our_value_is (max), p_single_run_below {"1", "3"} (share of our runs
    more than 1 or 3 points below it), note (why no comparison or no decision)}.
    """
    records = [r if isinstance(r, dict) else {"score": r} for r in records_or_scores]
    x = 100.0 * finite_scores(records)
    k = 1 if statistic in ("single", "test_server") else n_runs
    out: dict[str, Any] = {"statistic": statistic, "k": k, "n": int(x.size), "reported": reported}
    out["eval_sd"] = float(eval_sd)
    out["percentile"] = out["p_two_sided"] = out["reference"] = None  # until a test gives them
    if x.size == 0:
        return {**out, "note": "no scored runs"}
    out["p_single_run_below"] = {str(d): float(np.mean(x < reported - d)) for d in (1, 3)}
    if statistic in ("median", "mean"):
        out["our_value"] = float(np.median(x) if statistic == "median" else np.mean(x))
    elif statistic in ("single", "test_server"):
        out["our_value"] = float(np.median(x))  # a typical single run of ours
    elif statistic == "max" and k is not None:
        point = expected_max(x / 100.0, n_max=k, resamples=200)[-1]
        out["our_value"], out["estimator"] = 100.0 * point["mean"], point["estimator"]
        out["our_value_is"] = (
            "a lower bound (more runs than ours)" if point["extrapolated"] else "an estimate"
        )
    elif statistic != "max":
        return {**out, "note": f"statistic {statistic!r} has no like-for-like comparison"}
    if "our_value" in out:
        out["gap"] = out["our_value"] - reported
    if k is None:
        out["note"] = f"the number of runs behind the reported {statistic} is unknown: no same-n comparison"
        return out
    if statistic in ("median", "mean"):
        return out | _same_statistic(
            records, reported, statistic, k, seed, resamples, eval_sd, failure_baseline
        )
    return out | rank_test(x, reported, k, eval_sd)


def _same_statistic(
    records: list[TrialRecord],
    reported: float,
    statistic: str,
    k: int,
    seed: int,
    resamples: int,
    eval_sd: float,
    failure_baseline: float | None = None,
) -> dict[str, Any]:
    if len(by_setting(records)) > 1:
        keep = ("score", "outcome", "failed", "baseline")
        records = [{key: r[key] for key in keep if key in r} for r in records]
    lay = layout(records)
    failed = failed_values(records, failure_baseline)
    target = np.array([reported / 100])
    if failed is None:
        found = stacked_gap(lay, lay.grid[None], target, statistic, k, resamples, seed, eval_sd / 100)
        own, lost = lay, False
    else:
        own = layout([r for r in records if outcome(r) != "failed"])
        lost = lost_design(lay, own) or np.isfinite(own.grid).sum() < 2
        found = (
            dict.fromkeys(("p", "p_bootstrap", "p_t", "percentile", "failed"), np.full(1, np.nan))
            if lost
            else stacked_failed_gap(
                own, own.grid[None], target, k, failed, resamples, seed, eval_sd / 100, statistic
            )
        )
    found = {name: float(v[0]) for name, v in found.items()}
    p, n, n_own = found["p"], int(np.isfinite(lay.grid).sum()), int(np.isfinite(own.grid).sum())
    undecided = bool(np.isnan(p)) or lost  # no spread: a variance from runs that all tie says nothing
    decision = verdict(None if undecided else p, 1.0 if undecided else 2 / (resamples + 1), n, None, "runs")
    if undecided:
        decision["note"] = _undecided_note(n, n_own, lost)
        decision["runs_needed"] = 2 if n < 2 else None
    p_two_sided = decision.pop("p")
    out = {
        **decision,
        "p_two_sided": p_two_sided,
        "percentile": found["percentile"],
        "direction": "above"
        if reported > 100 * float(reduce(lay.grid.reshape(1, -1), statistic)[0])
        else "below",
        "p_parts": {"bootstrap": found["p_bootstrap"], "t": found["p_t"]},
        "reference": f"{statistic} of {k} runs drawn from ours (design bootstrap, predictive)",
        "method": "flagged only outside both the widened predictive draws and the t reference",
    }
    if failed is None:
        return out | {"fallback": FALLBACK.format(rate=FALLBACK_TYPE_I[statistic], statistic=statistic)}
    low, high = (100 * v for v in failed)
    return out | {
        "failed_runs_explain": None if undecided else int(found["failed"]),
        "reference": f"{statistic} of {k} runs, any of them failed (scoring {low:.4g}-{high:.4g}), "
        "the rest drawn from our succeeded runs (design bootstrap, predictive)",
        "method": "flagged only where no number of failed runs among the reported ones explains it "
        "(each: outside both the widened predictive draws and the t reference)",
    }


def _undecided_note(n: int, n_own: int, lost: bool) -> str:
    if n < 2:
        return f"cannot decide with {n} run; needs at least 2"
    if n_own < n:
        why = "share one seed of the grid" if n_own > 1 and lost else "are too few to show a spread"
        why = why if n_own < 2 or lost else "show no spread"
        return f"cannot decide: {n - n_own} of our {n} runs failed, and the {n_own} that succeeded {why}"
    return f"cannot decide: our {n} runs all scored the same (no spread to compare with)"
