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

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.decide import verdict
from suite.stats.design import (
    Layout,
    by_setting,
    draw_indices,
    layout,
    pad_grids,
    stacked_terms,
    stacked_widening,
)
from suite.stats.estimates.expected_maximum import expected_max
from suite.stats.estimates.rank_gap import rank_test
from suite.stats.estimates.uncertainty import Statistic, no_spread, reduce
from suite.study.records import TrialRecord, finite_scores, outcome, score


def predictive_draws(
    records: Sequence[TrialRecord],
    k: int,
    statistic: Statistic,
    resamples: int = 4000,
    seed: int = 0,
    eval_sd: float = 0.0,
) -> np.ndarray:
    """The statistic of k runs as another study of k runs would get them (a paper's median of 5),
    predicted from ours. Each replicate resamples our runs by the design bootstrap, so that the
    uncertainty of our own N runs enters, then draws k runs from it with replacement, all under
    one subsample seed (a paper's runs share one training set), each with its own init and order
    seeds. The part of each draw that is our own uncertainty (the replicate's statistic minus
    ours) is widened like `intervals` (few seeds: t, and the bootstrap's (n-1)/n); the k-run
    sampling around the replicate is not (widening it too made grids conservative: 1.9%
    false positives at 3 x 3). Runs of several settings are pooled as independent runs.
    `eval_sd` (the scores' scale): sd of our evaluation subsample's score around the full
    evaluation set's, one draw per replicate (the k runs of a replicate share one eval set)."""
    if len(by_setting(records)) > 1:
        records = [{"score": r.get("score")} for r in records]
    lay = layout(records)
    return stacked_predictive(lay, lay.grid[None], k, statistic, resamples, seed, eval_sd)[0]


def stacked_predictive(
    lay: Layout,
    grids: np.ndarray,
    k: int,
    statistic: Statistic,
    resamples: int = 4000,
    seed: int = 0,
    eval_sd: float = 0.0,
) -> np.ndarray:
    """`predictive_draws` of T studies of one layout, `grids` (T, S, A, C) -> (T, resamples)."""
    rng = np.random.default_rng(seed)
    n_t = len(grids)
    s, a, c = draw_indices(lay, n_t * resamples, rng)
    rows = np.arange(n_t * resamples)
    slot = rng.integers(s.shape[1], size=rows.size)
    sub = s[rows, slot]
    a_row = a[rows, slot if a.shape[1] > 1 else 0]
    c_row = c[rows, slot if c.shape[1] > 1 else 0]
    j = (rng.random((rows.size, k)) * lay.a_count[sub][:, None]).astype(int)
    m = (rng.random((rows.size, k)) * lay.c_count[sub][:, None]).astype(int)
    t = np.repeat(np.arange(n_t), resamples)
    padded = pad_grids(grids)
    values = padded[
        t[:, None], sub[:, None], np.take_along_axis(a_row, j, 1), np.take_along_axis(c_row, m, 1)
    ]
    replicate = padded[t[:, None, None, None], s[:, :, None, None], a[:, :, :, None], c[:, :, None, :]]
    ours = reduce(replicate.reshape(rows.size, -1), statistic).reshape(n_t, resamples)
    center = reduce(grids.reshape(n_t, -1), statistic)[:, None]
    factor = stacked_widening(*stacked_terms(lay, grids))[0][:, None]
    theirs = reduce(values, statistic).reshape(n_t, resamples) - ours
    draws = center + factor * (ours - center) + theirs  # only our own uncertainty is widened
    return draws + rng.normal(0.0, eval_sd, draws.shape) if eval_sd > 0 else draws


def _efficiency(statistic: str, n: int) -> float:
    """Variance of the statistic of n normal runs over sigma^2 / n: the median's pi/2 (its small-n
    value is lower: 1.35 at n = 3, so this errs wide); a median of 1 or 2 runs is their mean."""
    return math.pi / 2 if statistic == "median" and n >= 3 else 1.0


def _satterthwaite(parts: Sequence[tuple[np.ndarray, np.ndarray | float]]) -> np.ndarray:
    total = sum(v for v, _ in parts)
    with np.errstate(all="ignore"):
        return total**2 / sum(np.where(v > 0, v**2 / np.maximum(d, 1e-12), 0.0) for v, d in parts)


def _mean_squares(lay: Layout, g: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """One subsample seed's (T, A, C) scores: crossed, [var(row means), var(col means), residual
    mean square] with their df; independent, [var(runs)]."""
    if lay.design != "crossed":
        return [(np.nanvar(g[:, :, 0], 1, ddof=1), int(np.isfinite(g[0, :, 0]).sum()) - 1)]
    n_a, n_c = int(np.isfinite(g[0]).any(1).sum()), int(np.isfinite(g[0]).any(0).sum())
    rows, cols = np.nanmean(g, 2), np.nanmean(g, 1)
    resid = g - rows[:, :, None] - cols[:, None, :] + np.nanmean(g, (1, 2))[:, None, None]
    df_e = (n_a - 1) * (n_c - 1)
    return [
        (np.nanvar(rows, 1, ddof=1), n_a - 1),
        (np.nanvar(cols, 1, ddof=1), n_c - 1),
        (np.nansum(resid**2, (1, 2)) / max(df_e, 1), df_e),
    ]


def _pooled(lay: Layout, grids: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """`_mean_squares` pooled over subsample seeds (weighted by df), df summed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        each = [_mean_squares(lay, grids[:, s]) for s in range(grids.shape[1])]
    out = []
    for parts in zip(*each, strict=True):
        df = sum(d for _, d in parts if d > 0)
        total = sum(d * np.nan_to_num(v) for v, d in parts if d > 0)
        out.append((total / df if df else np.zeros(len(grids)), df))
    return out


def our_variance(lay: Layout, grids: np.ndarray, statistic: str) -> tuple[np.ndarray, np.ndarray]:
    """(T,) variance of our own median or mean, normal theory, and its df: the design SE^2 of
    the mean (`stacked_terms`) times the statistic's efficiency; on a crossed grid those terms
    count the residual twice and a median of shared init / order shifts is their mean, so the
    efficiency enters through the residual mean square only: terms + (eff - 2) mse / N."""
    c, levels = stacked_terms(lay, grids)
    big_n = int(np.isfinite(grids[0]).sum())
    efficiency, df = _efficiency(statistic, big_n), stacked_widening(c, levels)[1]
    if lay.design != "crossed":
        return efficiency * c.sum(1), df
    mse, df_e = _pooled(lay, grids)[2]
    correction = (efficiency - 2) * mse / big_n
    variance = np.maximum(c.sum(1) + correction, 0.25 * c.sum(1))
    return variance, _satterthwaite([(c.sum(1), df), (np.abs(correction), df_e)])


def t_reference(lay: Layout, grids: np.ndarray, statistic: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(T,) variance of (their k-run statistic - ours) and its df, normal theory, from ANOVA mean
    squares. Theirs: k independent runs under one subsample seed, each of variance
    sigma_init^2 + sigma_order^2 + sigma_resid^2 (crossed: v_r - mse/J + v_c - mse/I + mse),
    times the statistic's efficiency / k, plus one subsample effect. Ours: the design SE^2 of the
    mean (`stacked_terms`; on a grid it counts the residual twice: the median's efficiency enters
    through the residual only, as a median of shared init / order shifts is their mean). df:
    Satterthwaite over the mean squares on one crossed subsample seed (exactly N - 1 for
    independent runs); otherwise the smaller of ours and theirs."""
    c, levels = stacked_terms(lay, grids)
    big_n, n_s = int(np.isfinite(grids[0]).sum()), grids.shape[1]
    e_ours, e_k = _efficiency(statistic, big_n), _efficiency(statistic, k) / k
    ms = _pooled(lay, grids)
    if lay.design != "crossed":
        ours, theirs = e_ours * c.sum(1), [(e_k * ms[0][0], ms[0][1])]
    else:
        size_a, size_c = (float(np.mean(count)) for count in (lay.a_count, lay.c_count))
        (v_r, df_r), (v_c, df_c), (mse, df_e) = ms
        init, order = np.maximum(v_r - mse / size_c, 0), np.maximum(v_c - mse / size_a, 0)  # components
        theirs = [(e_k * init, df_r), (e_k * order, df_c), (e_k * mse, df_e)]
        if n_s == 1:  # ours and theirs come from the same three mean squares: merge them for the df
            variance = init / size_a + order / size_c + e_ours * mse / big_n + sum(v for v, _ in theirs)
            coefficient = (e_ours - 2) / big_n + e_k * (1 - 1 / size_a - 1 / size_c)
            parts = [((1 / size_a + e_k) * v_r, df_r), ((1 / size_c + e_k) * v_c, df_c)]
            return variance, _satterthwaite([*parts, (np.abs(coefficient) * mse, df_e)])
        ours = our_variance(lay, grids, statistic)[0]
    if n_s > 1:
        means = np.nanmean(grids, (2, 3))
        theirs.append((np.nanvar(means, 1, ddof=1), n_s - 1))  # their one subsample effect
    total_theirs = sum(v for v, _ in theirs)
    return ours + total_theirs, np.fmin(stacked_widening(c, levels)[1], _satterthwaite(theirs))


def stacked_gap(
    lay: Layout,
    grids: np.ndarray,
    reported: np.ndarray,
    statistic: str,
    k: int,
    resamples: int = 4000,
    seed: int = 0,
    eval_sd: float = 0.0,
) -> dict[str, np.ndarray]:
    """The median / mean-of-k comparison of T studies (scores' scale): (T,) arrays p_bootstrap,
    p_t, p = max of the two (NaN: cannot decide, runs that all tie), percentile.

    Why two references: the widened predictive draws follow skew and collapse but are discrete
    at N = 3 (draws of 5 runs from 3 values: 8-14% false positives); the t reference is smooth
    but blind to a bimodal k-run median (N = 10, 40% collapsed runs: 11-16%). A reported value is
    flagged only when it lies outside both. eval_sd (scores' scale) widens both. Measured type-I
    error at p < 0.05 (2000 studies, MC SE 0.5%; median and mean of k = 3, 5, 10; N = 3, 5, 10,
    3 x 3 and 5 x 5 grids; normal, and 25% / 40% of runs or of init seeds collapsed 2-3 SD
    below): 0.5-5.8% (old: 9-14% at N = 3, 6-8% at N = 5). Power against a 1-SD shift (normal,
    k = 5): 3 x 3 grid median 9% (old 7.6%), mean 14%; 10 runs, mean 37%."""
    flat = grids.reshape(len(grids), -1)
    draws = stacked_predictive(lay, grids, k, statistic, resamples, seed, eval_sd)
    r = reported[:, None]
    le, ge = (draws <= r).sum(1), (draws >= r).sum(1)
    p_boot = np.minimum(1.0, 2 * (np.minimum(le, ge) + 1) / (resamples + 1))
    variance, df = t_reference(lay, grids, statistic, k)
    with np.errstate(all="ignore"):
        z = np.abs(reported - reduce(flat, statistic)) / np.sqrt(variance + eval_sd**2)
        p_t = np.where(np.isnan(df), 1.0, 2 * stats.t.sf(z, df))
    undecided = no_spread(flat)
    percentile = 100 * ((draws < r).mean(1) + 0.5 * (draws == r).mean(1))
    return {
        "p_bootstrap": p_boot,
        "p_t": p_t,
        "p": np.where(undecided, np.nan, np.maximum(p_boot, p_t)),
        "percentile": percentile,
    }


def failed_values(records: Sequence[TrialRecord]) -> tuple[float, float] | None:
    """Where a failed run scores, [low, high]: the hull of the failure rule's baseline (the records'
    `baseline`) and of our failed runs' scores; None when neither is known (plain scores)."""
    known = [float(r["baseline"]) for r in records if isinstance(r.get("baseline"), int | float)]
    known += [score(r) for r in records if outcome(r) == "failed"]
    known = [v for v in known if math.isfinite(v)]
    return (min(known), max(known)) if known else None


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
) -> dict[str, np.ndarray]:
    """A reported MEAN of k runs against T studies' SUCCEEDED runs (`lay`, `grids`: failed runs
    left out), where any of the k may have failed unseen, scoring within `failed` (low, high).
    Given j failed among the k, reported = (1 - j/k) S + (j/k) v, S the mean of k - j succeeded
    runs: S = (reported - (j/k) v) / (1 - j/k) is tested by `stacked_gap` against our succeeded
    runs at k - j (v taken where S comes closest to ours); j = k: the reported value must lie in
    `failed`. p = the largest over j = 0..k, a union of the k + 1 tests: whatever number of the
    k failed, its own test holds, so the largest p does too, for any failure rate, seen in our
    runs or not. Why: a mean of runs that fail far below (RTE: 4.4 SD) has a mixture variance a
    sample without a failed run cannot show (at N = 3 and 20% failed, half the samples); the
    mixture-blind test rejected 6.5-11% of true reported means (docs/statistics.md). Above ours
    no j > 0 comes closer, so power there is `stacked_gap`'s; below, a gap that j failed runs
    would make is not a gap. Returns (T,) p (NaN: cannot decide), p_bootstrap, p_t and
    percentile of the j with the largest p, and that j (`failed`)."""
    n_t = len(grids)
    low, high = (np.broadcast_to(np.asarray(v, dtype=float), (n_t,)) for v in failed)
    center = reduce(grids.reshape(n_t, -1), "mean")
    best = {"p": np.full(n_t, -1.0)}
    for j in range(k + 1):
        if j == k:
            inside = ((low <= reported) & (reported <= high)).astype(float)
            found = {"p": inside, "p_bootstrap": inside, "p_t": inside, "percentile": np.full(n_t, 50.0)}
        else:
            share = j / k
            ends = [(reported - share * v) / (1 - share) for v in (high, low)]
            found = stacked_gap(lay, grids, np.clip(center, *ends), "mean", k - j, resamples, seed, eval_sd)
        better = np.nan_to_num(found["p"], nan=-1.0) > best["p"]
        found["failed"] = np.full(n_t, j)
        best = {name: np.where(better, found[name], best.get(name, np.nan)) for name in found}
    undecided = no_spread(grids.reshape(n_t, -1))
    return best | {"p": np.where(undecided, np.nan, best["p"])}


def gap_to_reported(
    records_or_scores: Sequence[TrialRecord] | Sequence[float | None],
    reported: float,
    statistic: str,
    n_runs: int | None = None,
    seed: int = 0,
    resamples: int = 4000,
    eval_sd: float = 0.0,
) -> dict[str, Any]:
    """A reported number (0-100 scale) against ours (natural scale, x100 here), like for like:
    - median or mean of k runs: `stacked_gap` (design-aware predictive draws and a t reference);
      a mean, where the records say where a failed run scores (`failed_values`: their baseline,
      our failed runs), by `stacked_failed_gap` on our succeeded runs: any of the k may have
      failed; it cannot decide where fewer than 2 of ours succeeded or they span one grid row;
    - max of k runs: our expected max at k (past our N runs: our max, a lower bound), with the
      exact rank test `rank_p` (rank_gap.py; a bootstrap cannot reach above our largest run);
    - a single run (or a test-server score): the same rank test at k = 1.
    eval_sd: sd, in x100 points, of our evaluation-subsample score around the full evaluation
    set's (our runs used eval_limit, the reported number the full set); 0 when both used one set.
    Pass the runs (records) of one setting for the design-aware draw; plain scores are taken as
    independent runs. k unknown (n_runs None) -> no same-n comparison, and the note says so.

    Shape: {statistic, k, n, reported, eval_sd, our_value, gap (ours - reported), percentile (of
    the reported value in the reference), p_two_sided (2 min(P(<=), P(>=)), capped at 1; None
    when the test cannot decide), decidable, min_p (the smallest p the test can reach here),
    runs_needed (when it cannot decide: the fewest runs that could), direction ("above" |
    "below": where the reported value lies), reference, method, p_parts {bootstrap, t} (median,
    mean), failed_runs_explain (mean with a failure rule: how many failed runs among the k best
    explain the reported value), estimator and our_value_is (max), p_single_run_below {"1", "3"}
    (share of our runs more than 1 or 3 points below it), note (why no comparison or no decision)}.
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
        return out | _same_statistic(records, reported, statistic, k, seed, resamples, eval_sd)
    return out | rank_test(x, reported, k, eval_sd)


def _same_statistic(
    records: list[TrialRecord],
    reported: float,
    statistic: str,
    k: int,
    seed: int,
    resamples: int,
    eval_sd: float,
) -> dict[str, Any]:
    if len(by_setting(records)) > 1:
        keep = ("score", "outcome", "failed", "baseline")
        records = [{key: r[key] for key in keep if key in r} for r in records]
    lay = layout(records)
    failed = failed_values(records) if statistic == "mean" else None
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
            else stacked_failed_gap(own, own.grid[None], target, k, failed, resamples, seed, eval_sd / 100)
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
        return out
    low, high = (100 * v for v in failed)
    return out | {
        "failed_runs_explain": None if undecided else int(found["failed"]),
        "reference": f"mean of {k} runs, any of them failed (scoring {low:.4g}-{high:.4g}), "
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
