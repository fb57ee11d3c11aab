"""Design-aware uncertainty for the runs of one setting: a bootstrap whose resampling unit
follows the seed design (suite.stats.design), and intervals that name that unit, calibrated by
simulation at the 3-10 runs the default profiles use (small-N honesty: a median of 3 runs next
to one of them gets a t floor). The predictive distribution of a k-run statistic (same-n
comparisons) is in gap.py; the failure rate's interval in failure_rate.py.

No interval of a mean or a spread has zero width. Where every run scored the same (every run
failed at the baseline, the smoke case) the runs cannot bound a mean, a std or an IQR: a run that
differs could lie anywhere, and 6 runs that all failed say nothing about where a seventh that did
not would score. There ci95 is None, `method` starts "cannot bound", and `tied` gives what the
runs do bound: the share of runs that score that value is at least (2.5%)^(1/m) at 95% (the
exact binomial bound, m the seeds on the smallest seed axis, as failures cluster by seed). The
old rule gave [b, b] from 6 tied runs: the mean's interval then covered 46-47% at N = 6 when 90%
of runs fail. The median is the exception, and only where that share is above 1/2 (`pinned`:
from 6 tied independent runs or 6 seeds per axis, or 11 runs of 12): then the median IS b, and
[b, b] is its interval, with `method` saying why; below that, none.
Every interval here is *across seeds*, never across the examples of one dev set.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.design import (
    Layout,
    bootstrap_reduced,
    kept_scores,
    resample,
    stacked_terms,
    stacked_widening,
    widening,
)
from suite.stats.estimates.failed_runs import failed_values, failure_bounds, widened_mean, widened_std
from suite.stats.estimates.failure_rate import failure_interval, least_share
from suite.study.records import TrialRecord, outcome, score

Statistic = str | Callable[[np.ndarray], float]
PERCENTILE = "percentile bootstrap, 95%"
# Values a row from which quantiles partition it, not sort it. `python -m benchmarks.scale
# --quantiles-only` (20,000,000 resampled values, best of 3; 2 loaded cores, 2026-12-07, three runs):
# sort / partition 0.71-0.87 at 1,000 a row, 0.93-1.09 at 2,000, 1.42-1.92 at 10,000 (sorted
# 0.78-1.19 s, partitioned 0.55-0.78) and 2.3-2.4 at 100,000. A numpy whose float64 sort is
# vectorised (x86-simd-sort; here it sorts int64 6x faster than float64) can turn this round: one
# machine sorted 2,000 x 10,000 in 0.16 s against 0.54 partitioned. Rerun it there before moving this.
_PARTITION_FROM = 2_000
FLOOR_LEVELS = 5  # the median's interval is floored at the mean's t interval below this many seeds
TIED = "cannot bound: all {n} runs scored {value:.6g}; a run that differs could score anything"
PINNED = "the median is {value:.6g}: at 95% over half of all runs score exactly that ({k} of {n} here)"
FLAT = "cannot bound: no resample of the runs moves it (nearly all runs alike)"
NO_SCORE = "no value: no run has a score"
WIDE_NONE = (
    "cannot bound: runs can fail here (the failure rule has a baseline), and the runs that succeeded "
    "are too few or too alike to bound their own {name}"
)


def widen(
    ci: list[float] | None, estimate: float | None, factor: float, scale: str = "linear"
) -> list[float] | None:
    """Stretch an interval about the estimate by `factor`. scale "log" (IQR): on the log scale, as a
    spread cannot go below 0. "log_basic" (std): the basic bootstrap interval on the log scale,
    est^2 / [hi, lo], because resampled stds sit below the estimate and a percentile interval
    inherits that bias (normal runs, n = 9: 84% coverage, basic 92%)."""
    if ci is None or estimate is None:
        return ci
    if scale != "linear" and estimate > 0 and ci[0] > 0:
        low, high = np.array(ci) / estimate
        low, high = (1 / high, 1 / low) if scale == "log_basic" else (low, high)
        return [float(estimate * low**factor), float(estimate * high**factor)]
    if scale != "linear" and ci[0] <= 0 <= estimate:  # a spread of 0 in the resamples: keep 0 as the floor
        return [0.0, estimate + factor * (ci[1] - estimate)]
    return [estimate - factor * (estimate - ci[0]), estimate + factor * (ci[1] - estimate)]


def _quantiles(x: np.ndarray, q: Sequence[float]) -> list[np.ndarray]:
    """Linear-interpolation quantiles along the last axis ignoring NaN, vectorised (numpy's
    nanpercentile loops over rows). NaN orders last, so row r's finite values are its first n[r].
    Rows without a value (all NaN, or an empty last axis: a setting no trial scored) give NaN."""
    if x.shape[-1] == 0:  # no position to take, not even a NaN's
        return [np.full(x.shape[:-1], np.nan) for _ in q]
    n = np.isfinite(x).sum(-1, keepdims=True)
    xs, out = _ordered_at_places(x, n, q), []
    for pos, low, high in (_places(level, n) for level in q):
        a, b = np.take_along_axis(xs, low, -1), np.take_along_axis(xs, high, -1)
        out.append(np.where(n > 0, a + (pos - low) * (b - a), np.nan)[..., 0])
    return out


def _places(level: float, n: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position, the place below it, the place above) of a quantile among n ordered values."""
    pos = level * np.maximum(n - 1, 0)
    low = np.floor(pos).astype(int)
    return pos, low, np.minimum(low + 1, np.maximum(n - 1, 0))


def _ordered_at_places(x: np.ndarray, n: np.ndarray, q: Sequence[float]) -> np.ndarray:
    """x with each row's values at the places the quantiles read being what a sort would put
    there. Long rows: a partition at those places for each count of finite values (the places
    depend on it), where sorting 2,000 resamples of 10,000 runs was a fifth of a leaderboard;
    short ones sorted (one np.sort of every row is the faster below _PARTITION_FROM values)."""
    if x.shape[-1] < _PARTITION_FROM:
        return np.sort(x, axis=-1)
    rows, counts = x.reshape(-1, x.shape[-1]), n.reshape(-1)

    def at(count: int) -> np.ndarray:
        return np.unique([p for level in q for p in _places(level, np.array(count))[1:]])

    distinct = np.unique(counts)
    if len(distinct) == 1:
        return np.partition(x, at(int(distinct[0])), axis=-1)
    out = np.empty_like(rows)
    for count in distinct:
        these = np.flatnonzero(counts == count)
        out[these] = np.partition(rows[these], at(int(count)), axis=-1)
    return out.reshape(x.shape)


def reduce(x: np.ndarray, statistic: Statistic) -> np.ndarray:
    """A statistic along the last axis, ignoring NaN; a callable gets each row's finite values.
    NaN where a row has no value (the max and min of an empty axis would raise)."""
    if x.shape[-1] == 0:
        return np.full(x.shape[:-1], np.nan)
    if callable(statistic):
        return np.array([statistic(row[np.isfinite(row)]) for row in x.reshape(-1, x.shape[-1])])
    if statistic in ("median", "iqr"):
        q = _quantiles(x, [0.5] if statistic == "median" else [0.25, 0.75])
        return q[0] if statistic == "median" else q[1] - q[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN replicate gives NaN, dropped later
        if statistic == "std":
            return np.nanstd(x, axis=-1, ddof=1)
        return {"mean": np.nanmean, "max": np.nanmax, "min": np.nanmin}[statistic](x, axis=-1)


def _reduce_each(rows: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """(rows, len(names)): `reduce` by each of `names`; where both the median and the IQR are
    asked, the two read one partition of the rows at the three quartiles (the same values: each
    reading its own, the partitions were a tenth of a 10,000-run leaderboard)."""
    shared: dict[str, np.ndarray] = {}
    if {"median", "iqr"} <= set(names):
        q1, shared["median"], q3 = _quantiles(rows, [0.25, 0.5, 0.75])
        shared["iqr"] = q3 - q1
    return np.stack([shared[name] if name in shared else reduce(rows, name) for name in names], axis=-1)


def percentile_ci(replicates: np.ndarray) -> list[float] | None:
    finite = replicates[np.isfinite(replicates)]
    return [float(v) for v in np.percentile(finite, [2.5, 97.5])] if finite.size else None


def calibrated_ci(
    estimate: np.ndarray, replicates: np.ndarray, c: np.ndarray, n: np.ndarray, x: np.ndarray, statistic: str
) -> np.ndarray:
    """(T, 2) median or mean intervals (NaN: none) of T studies: `estimate` (T,), bootstrap
    `replicates` (T, R), seed-axis terms `c` (T, k) with levels `n` (k,), scores `x` (T, N).

    The design percentile interval, widened for few seeds (`widening`), with each side floored at
    the t half-width t(0.975, df) * sqrt(sum c) (the design SE of the mean, Satterthwaite df):
    always for the mean, for the median while the smallest seed axis has under FLOOR_LEVELS
    levels. Why: with 3 runs the percentile interval is [min, max] and the stretch is about the
    estimate, so a median next to the min or max gets no room on that side (88-92% coverage);
    from 5 levels the median's percentile interval is wide enough, and the mean's SE would
    overstate a median's with collapsed runs far below. The percentile side still carries skew.
    No interval (NaN) where the runs all tie (`no_spread`) or no resample moves the estimate, but
    for a median that is `pinned`."""
    low, high = _quantiles(replicates, [0.025, 0.975])
    factor, df = stacked_widening(c, n)
    levels = min(n, default=1)
    with np.errstate(invalid="ignore"):
        floor = np.nan_to_num(stats.t.ppf(0.975, df) * np.sqrt(c.sum(1)))
    if statistic != "mean" and levels >= FLOOR_LEVELS:
        floor = np.zeros_like(floor)
    low = np.minimum(estimate - factor * (estimate - low), estimate - floor)
    high = np.maximum(estimate + factor * (high - estimate), estimate + floor)
    none = (no_spread(x) | ~(high > low)) & ~(pinned(x, estimate, n) if statistic == "median" else False)
    return np.where(none[:, None], np.nan, np.stack([low, high], 1))


def pinned(x: np.ndarray, median: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(T,) True where more than half of ALL runs score exactly our `median`, at 95%: the exact
    binomial lower bound on the share of runs at it (its k of N runs scaled to the m seeds of the
    smallest seed axis, as runs that share a seed fail together) exceeds 1/2. The median then is
    that value, and [median, median] is its interval: the one case where zero width is right (6
    independent runs that all failed: the share is at least 0.54; a 3 x 3 grid: only 0.29)."""
    count = np.isfinite(x).sum(1)
    units = min(levels, default=x.shape[1])
    with np.errstate(all="ignore"):
        k = (x == median[:, None]).sum(1) * units / np.maximum(count, 1)
        return stats.beta.ppf(0.025, k, units - k + 1) > 0.5


def no_spread(x: np.ndarray) -> np.ndarray:
    """(T,) True where scores `x` (T, N) allow no interval or test: under 2 scores, or all alike
    (however many: tied runs say nothing about a run that differs; module docstring)."""
    count = np.isfinite(x).sum(1)
    if x.shape[1] == 0:
        return np.ones(len(x), dtype=bool)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tied = np.nanmax(x, 1) == np.nanmin(x, 1)
    return (count < 2) | tied


def tied(x: np.ndarray, levels: np.ndarray) -> dict[str, Any]:
    """What runs that all scored the same do bound: the share of runs scoring that value, at
    least `least_share` of the seeds on the smallest seed axis (levels), at 95%."""
    units = int(min(levels, default=x.size))
    return {
        "value": float(x[0]),
        "runs": int(x.size),
        "seed_units": units,
        "share_at_least": least_share(units),
    }


def stacked_intervals(
    lay: Layout, grids: np.ndarray, statistic: str, resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """`intervals`' median, mean, std or IQR interval (failed runs as scored, not widened) for T
    studies of one layout at once, `grids` (T, S, A, C) -> (T, 2), NaN where none (simulations:
    the same rules as `intervals`, vectorised; tests/test_coverage_table.py holds them equal)."""
    rng = np.random.default_rng(seed)
    flat = grids.reshape(len(grids), -1)
    replicates = reduce(resample(lay, resamples, rng, grids).reshape(len(grids), resamples, -1), statistic)
    terms = stacked_terms(lay, grids)
    if statistic in ("std", "iqr"):
        return _stacked_spread(
            reduce(flat, statistic), replicates, stacked_widening(*terms)[0], flat, statistic
        )
    return calibrated_ci(reduce(flat, statistic), replicates, *terms, flat, statistic)


def _stacked_spread(
    estimate: np.ndarray, replicates: np.ndarray, factor: np.ndarray, x: np.ndarray, statistic: str
) -> np.ndarray:
    """(T, 2) std or IQR intervals as `intervals` makes them: `widen` of the percentile interval
    (std: basic on the log scale; IQR: log scale), NaN where the runs allow none."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanpercentile(replicates, [2.5, 97.5], axis=1)
    with np.errstate(all="ignore"):
        logged = (estimate > 0) & (lo > 0)
        low, high = (
            (1 / (hi / estimate), 1 / (lo / estimate))
            if statistic == "std"
            else (lo / estimate, hi / estimate)
        )
        floor = (lo <= 0) & (0 <= estimate)
        ci_low = np.where(
            logged, estimate * low**factor, np.where(floor, 0.0, estimate - factor * (estimate - lo))
        )
        ci_high = np.where(logged, estimate * high**factor, estimate + factor * (hi - estimate))
    none = no_spread(x) | ~(ci_high > ci_low)
    return np.where(none[:, None], np.nan, np.stack([ci_low, ci_high], 1))


STATISTICS = ("median", "mean", "std", "iqr", "failure_rate")


def intervals(
    records: Sequence[TrialRecord],
    resamples: int = 2000,
    seed: int = 0,
    exclude_failed: bool = False,
    statistics: Sequence[str] = STATISTICS,
    succeeded: dict[str, dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """{median, mean, std, iqr: {estimate, ci95, unit, method, widening}} of the runs' scores
    (failed runs as scored unless excluded), and failure_rate (`failure_interval`: over seed
    units) unless failures are excluded; only those of `statistics` (each one's interval is the
    same asked alone or with the others: they share one bootstrap). Median and mean:
    `calibrated_ci`; std: basic, log scale; IQR: log scale; both widened for few seeds. Where the
    runs cannot bound a statistic ci95 is None and `method` starts "cannot bound"; where they all
    tie, each statistic also gets `tied` (the share of runs at that value they do bound). Zero
    width only for a `pinned` median. No score at all (every trial errored or diverged): estimate
    and ci95 None, `method` NO_SCORE.
    Where runs can fail (the records say where a failed run scores: `failed_values`), the mean and
    std of every run are stated for any failure rate (failed_runs.py: `widened` says over what),
    from the succeeded runs' own intervals (`succeeded`: `intervals(..., exclude_failed=True)` of
    the same records, resamples and seed, computed here when not given); none where the succeeded
    runs bound none. Their coverage per shape: coverage.py's table.

    Measured coverage at nominal 95% (2000 simulated studies each, Monte-Carlo SE 0.5%; normal,
    lognormal(0, 0.5), beta(8, 1.5), and 25% / 40% of runs, or of init seeds on a grid,
    collapsed to a baseline 2-3 SD below the rest): median 96-98% at N = 3 (old 87-93%), 96-98%
    at N = 5, 10, 94-99.6% on 3 x 3 / 5 x 5 grids; mean 93-96% at N = 3 (old 88-95%), 92.6-96%
    at N = 5, 10, 91-99.5% on grids (lowest: 5 x 5, a quarter of the init seeds collapsed 3 SD
    below). Where all 3 runs collapsed (6.4% of studies at 40%) no interval is given; coverage is
    counted where one is. Mean widths at N = 3 (normal): median 5.5 SD (old 4.6), mean 4.8 (old
    4.4, exact t 4.4); from N = 5 within 0-10% of the old. Std of 5-60 normal runs 92-94%; IQR
    96-98%. lognormal(0, 1) (skewness 6): the mean covers 85% at N = 3-10, as a t interval does.
    Collapsed runs 4-5 SD below (RTE's depth; 20-30% of runs): the median 95.9-98.7% at N = 3, 5,
    6, 10, the unwidened mean only 85.8-91.8% at N = 5-6 (92-93% at 3, 90.9-95.2% at 10), and in
    the entries that drew no failed run far less: a sample in which no run collapsed says nothing
    of the collapse (hence the widened mean). 90% of 6 runs failed: 100% where an interval is
    given (the 54% of studies whose runs all failed get none; the old [b, b]: 46-47%). The
    coverage of each interval as stated, per shape: benchmarks/coverage_table.py."""
    wanted = [name for name in STATISTICS[:4] if name in statistics]
    reducers = [partial(_reduce_each, names=wanted)] if wanted else []  # one reducer: one partition
    found, unit, terms = bootstrap_reduced(records, reducers, resamples, seed, exclude_failed)
    replicates_of = list(found[0].T) if wanted else []
    factor, df = widening(terms)
    method = PERCENTILE + (f", widened x{factor:.2f} (t, {df:.1f} df) for few seeds" if df else "")
    x = kept_scores(records, exclude_failed)
    c = np.array([[t[0] for t in terms]]).reshape(1, -1)
    n = np.array([t[1] for t in terms], dtype=float)
    spread = not no_spread(x[None])[0]
    out: dict[str, dict[str, Any]] = {}
    for name, replicates in zip(wanted, replicates_of, strict=True):
        estimate = float(reduce(x[None], name)[0]) if x.size > (name == "std") else None
        if name in ("median", "mean"):
            ci, how = None, method + (", each side at least the t interval of the mean" if df else "")
            if estimate is not None:
                found = calibrated_ci(np.array([estimate]), replicates[None], c, n, x[None], name)[0]
                ci = None if np.isnan(found[0]) else [float(v) for v in found]
        else:
            scale = {"std": "log_basic", "iqr": "log"}[name]
            ci, how = widen(percentile_ci(replicates) if spread else None, estimate, factor, scale), method
        if ci is not None and not ci[1] > ci[0] and name != "median":  # every resample alike
            ci = None
        if ci is not None and not ci[1] > ci[0]:  # a median that calibrated_ci found `pinned`
            how = PINNED.format(value=estimate, k=int((x == estimate).sum()), n=x.size)
        elif ci is None and x.size >= 2:
            how = FLAT if spread else TIED.format(n=x.size, value=x[0])
        elif x.size == 0:
            how = NO_SCORE
        out[name] = {"estimate": estimate, "ci95": ci, "unit": unit, "method": how, "widening": factor}
        if x.size >= 2 and not spread:
            out[name]["tied"] = tied(x, n)
    if not exclude_failed and "failure_rate" in statistics:
        out["failure_rate"] = failure_interval(records, resamples, seed)
    at = None if exclude_failed else failed_values(records)
    if at is not None and x.size >= 2 and spread and {"mean", "std"} & set(wanted):
        if succeeded is None:
            succeeded = intervals(records, resamples, seed, exclude_failed=True, statistics=("mean", "std"))
        failed = sum(outcome(r) == "failed" and np.isfinite(score(r)) for r in records)
        units = float(min(n, default=x.size))
        share = failure_bounds(np.array([failed]), np.array([x.size]), units)
        for name in [k for k in ("mean", "std") if k in wanted]:
            out[name] = _widened(out[name], name, share, succeeded, at, int(units))
    return out


def _widened(
    block: dict[str, Any], name: str, share: np.ndarray, succeeded: dict[str, dict[str, Any]],
    at: tuple[float, float], units: int,
) -> dict[str, Any]:  # fmt: skip
    """The mean or std of runs that can fail (failed_runs.py): over p's exact interval `share`,
    the `succeeded` runs' intervals and a failed run's score in `at`; none where the succeeded runs
    give no interval of their mean (or std)."""
    mean, std = (np.array([succeeded[k]["ci95"] or [np.nan] * 2], dtype=float) for k in ("mean", "std"))
    found = (widened_mean(share, mean, at) if name == "mean" else widened_std(share, mean, std, at))[0]
    low, high = share[0]
    where = f"{at[0]:.4g}" if at[0] == at[1] else f"{at[0]:.4g} to {at[1]:.4g}"
    rate = f"p in [{low:.2f}, {high:.2f}] (exact binomial 95% interval on {units} seed units)"
    how = (
        f"(1 - p) x the succeeded runs' mean + p x a failed run's score ({where}), over {rate} and "
        "the succeeded runs' 95% interval: covers for any failure rate"
        if name == "mean"
        else f"the std of runs failing with probability {rate} at a score of {where}, over the "
        "succeeded runs' 95% intervals of their mean and std: covers for any failure rate"
    )
    if not np.isfinite(found).all() or not found[1] > found[0]:
        return block | {"ci95": None, "method": WIDE_NONE.format(name=name)}
    widened = {
        "failure_rate": [float(low), float(high)],
        "succeeded": succeeded[name]["ci95"],
        "failed_at": [float(v) for v in at],
    }
    return block | {"ci95": [float(v) for v in found], "method": how, "widened": widened}


def median_interval(records: Sequence[TrialRecord], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """`intervals`' median alone (failed runs as scored)."""
    return intervals(records, resamples, seed, statistics=("median",))["median"]
