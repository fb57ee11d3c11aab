"""The failure rate of one setting's runs, with an interval that follows the seed design: the
failed indicator (1 for a failed run, diverged ones included, 0 for a run that succeeded) is
resampled over the seed units, as the score intervals resample scores (suite.stats.design).

Why not a binomial interval over runs (Wilson): failures cluster by seed. A bad init seed fails
most runs of its row of a crossed init x order grid, so the 9 runs of a 3 x 3 grid carry about as
much information on the rate as its 3 init seeds. Measured at nominal 95% (tests/test_failure_rate.py;
init seeds bad with probability 0.1, 0.3, 0.5, a bad one failing 90% of its runs, a good one 3%;
1000 grids each, Monte-Carlo SE 0.7 points): Wilson over runs 65-90% on 3 x 3 and 5 x 5 grids
(65% on 5 x 5 with 30-50% bad inits); this interval 94.9-100%. On 3, 5 and 10 independent runs
(rates 0.05-0.9, 2000 studies each): 96-100% (Wilson 84-100%). The price is width: mean 0.57-0.93
on the grids (Wilson's 0.23-0.48 is that narrow by counting 25 runs where 5 seeds decide) and
0.34-0.92 on independent runs (Wilson 0.33-0.69: at 3 runs nothing is narrow).

How: the percentile interval of the bootstrap failure rates, widened for few seeds as the score
intervals are (`stacked_widening`), clipped to [0, 1]. Where every run failed or none did the
bootstrap cannot move, and the exact binomial bound takes over on the seeds of the smallest seed
axis (`least_share`): 0 failures in 3 x 3 runs bound the rate below 0.71, as from 3 runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.design import (
    Layout,
    bootstrap_reduced,
    resample,
    stacked_terms,
    stacked_widening,
    widening,
)
from suite.study.records import TrialRecord, outcome

ALPHA = 0.05
METHOD = "percentile bootstrap of the failed indicator over seed units, 95%"
EXTREME = "exact binomial bound on the {m} seeds of the smallest seed axis ({what})"


def least_share(units: int | float, alpha: float = ALPHA) -> float:
    """The exact (Clopper-Pearson) two-sided lower bound on the share of runs that behave as all
    of ours did, from `units` independent seed units that all agree: (alpha / 2)^(1 / units)."""
    return float((alpha / 2) ** (1 / max(units, 1)))


def wilson(failed: int, n: int) -> dict[str, Any]:
    """Failure rate with its Wilson score interval over independent runs (good coverage at small
    n, unlike Wald). Runs that share seeds are not independent: see `failure_interval`."""
    out: dict[str, Any] = {"estimate": None, "ci95": None, "unit": "runs", "method": "Wilson score interval"}
    if n > 0:
        ci = stats.binomtest(failed, n).proportion_ci(confidence_level=0.95, method="wilson")
        out |= {"estimate": failed / n, "ci95": [float(ci.low), float(ci.high)]}
    return out


def indicators(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The runs with their failed indicator as the score, to lay out and resample like scores."""
    return [{**r, "score": float(outcome(r) == "failed")} for r in records]


def failure_ci(rate: np.ndarray, replicates: np.ndarray, c: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """(T, 2) intervals of T failure rates `rate` (T,) from their bootstrap `replicates` (T, R)
    and the seed-axis terms `c` (T, k) with `levels` (k,) of the indicator."""
    low, high = np.percentile(replicates, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)], axis=1)
    factor = stacked_widening(c, levels)[0]
    low = np.clip(rate - factor * (rate - low), 0.0, 1.0)
    high = np.clip(rate + factor * (high - rate), 0.0, 1.0)
    bound = least_share(min(levels, default=1))  # all runs agree: the bootstrap cannot move
    low = np.where(rate == 1, bound, np.where(rate == 0, 0.0, low))
    high = np.where(rate == 0, 1 - bound, np.where(rate == 1, 1.0, high))
    return np.stack([low, high], 1)


def stacked_failure_intervals(
    lay: Layout, grids: np.ndarray, resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """`failure_interval` of T studies of one layout at once, `grids` (T, S, A, C) of failed
    indicators (complete: every cell a run) -> (T, 2), for simulations: the same code, vectorised."""
    rate = grids.reshape(len(grids), -1).mean(1)
    draws = resample(lay, resamples, np.random.default_rng(seed), grids)
    replicates = draws.reshape(len(grids), resamples, -1).mean(-1)
    return failure_ci(rate, replicates, *stacked_terms(lay, grids))


def _rate(samples: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate of empty cells only: dropped
        return np.nanmean(samples, 1)


def failure_interval(records: Sequence[TrialRecord], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """{estimate, ci95, unit, method, widening} of the failure rate of runs `records` (errored and
    pruned trials are not runs), resampling the seed units of each setting as `intervals` does."""
    out: dict[str, Any] = {"estimate": None, "ci95": None, "unit": "runs", "method": METHOD, "widening": 1.0}
    if not records:
        return out
    (replicates,), unit, terms = bootstrap_reduced(indicators(records), [_rate], resamples, seed)
    rate = float(np.mean([outcome(r) == "failed" for r in records]))
    replicates = replicates[np.isfinite(replicates)]
    c = np.array([[t[0] for t in terms]]).reshape(1, -1)
    levels = np.array([t[1] for t in terms], dtype=float)
    low, high = failure_ci(np.array([rate]), replicates[None], c, levels)[0]
    factor, df = widening(terms)
    method = METHOD + (f", widened x{factor:.2f} (t, {df:.1f} df) for few seeds" if df else "")
    if rate in (0.0, 1.0):
        what = "no run failed" if rate == 0 else "every run failed"
        method = EXTREME.format(m=int(min(levels, default=1)), what=what)
    return out | {
        "estimate": rate,
        "ci95": [float(low), float(high)],
        "unit": unit,
        "method": method,
        "widening": factor,
    }
