"""Expected maximum validation performance of n runs, with an interval for the
ESTIMATE (how far our curve could be from the true E[max of n]), not only the spread of the max
of n runs drawn from ours (`std`, the band: exactly 0 at n = N, where only one subset exists).

Past our N runs nothing in the data says how far the upper tail reaches: Dodge's with-replacement
curve redraws our runs (biased low by 0.8-1.6 points there, and below the max we already saw), so
"auto" reports the observed max as a labelled lower bound instead: E[max of n] >= E[max of N].
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import gammaln, log_ndtr

from suite.stats.design import Layout, by_setting, layout, resample, stacked_terms, stacked_widening
from suite.stats.estimates.uncertainty import no_spread
from suite.study.records import TrialRecord

WITHOUT_REPLACEMENT = "unbiased, without replacement (Tang et al. 2020)"
WITH_REPLACEMENT = "with replacement (Dodge et al. 2019)"
LOWER_BOUND = "lower bound past our N runs (extrapolation): our max, E[max of N] <= E[max of n]"


def _tang_weights(big_n: int, n: int) -> np.ndarray:
    """P(the max of n runs drawn without replacement from N is the i-th smallest) = C(i-1, n-1) / C(N, n)."""
    i = np.arange(1, big_n + 1)
    w = np.zeros(big_n)
    ok = i >= n
    log_c = gammaln(big_n + 1) - gammaln(n + 1) - gammaln(big_n - n + 1)
    w[ok] = np.exp(gammaln(i[ok]) - gammaln(n) - gammaln(i[ok] - n + 1) - log_c)
    return w


def _dodge_weights(big_n: int, n: int) -> np.ndarray:
    """P(the max of n runs drawn with replacement from N is the i-th smallest) = (i/N)^n - ((i-1)/N)^n."""
    i = np.arange(1, big_n + 1)
    return (i / big_n) ** n - ((i - 1) / big_n) ** n


# The max of n normals' density n phi(x) Phi(x)^(n-1) is smooth and dies off at both ends, where the
# trapezoidal rule converges faster than any power of the step: on this grid it agrees with adaptive
# quadrature to 1e-9 for n up to 10^6 (tests/test_statistics.py), for all n in one array operation.
_GRID = np.linspace(-12.0, 12.0, 4801)
_LOG_PDF, _LOG_CDF = stats.norm.logpdf(_GRID), log_ndtr(_GRID)
_CHUNK = 256  # n values per (chunk, grid) array: ~10 MB


def normal_max_sd(ns: Iterable[int]) -> np.ndarray:
    """SD of the max of n standard normals, for each n of `ns` (integrals of its density)."""
    ns = np.asarray(list(ns), dtype=float)
    out = np.empty(ns.size)
    step = _GRID[1] - _GRID[0]
    for start in range(0, ns.size, _CHUNK):
        n = ns[start : start + _CHUNK, None]
        density = np.exp(np.log(n) + _LOG_PDF + (n - 1) * _LOG_CDF)
        m1, m2 = (np.trapezoid(density * _GRID**p, dx=step, axis=1) for p in (1, 2))
        out[start : start + _CHUNK] = np.sqrt(np.maximum(m2 - m1**2, 0.0))
    return out


def stacked_ci(
    lay: Layout, grids: np.ndarray, ns: Sequence[int], resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """(T, len(ns), 2) 95% intervals for the unbiased estimate of E[max of n], n <= N, of T studies
    of one layout (`grids` (T, S, A, C), complete). The estimate +- t(df) * SE, where SE is the
    larger of
    - the design bootstrap SD of the estimator (resampled seeds, corrected by (n-1)/n like
      `uncertainty.widening`), which cannot see above our largest run, so it is far too small at
      n near N (normal, n = N = 10: 80% coverage alone);
    - sqrt(n/N) * s * sd(max of n normals) * sqrt(design effect): Hoeffding's bound for a
      U-statistic, Var <= (n/N) Var(max of n), with a normal upper tail, inflated like the mean
      (design SE^2 of the mean / (s^2/N)).
    Measured coverage at nominal 95% (2000 studies, MC SE 0.5%), n in {1, 2, N/2, N}, N = 3, 5,
    10 and 3 x 3, 5 x 5 grids: normal 94-99%, beta(8, 1.5) 91-100% (91-93%: n = 1, the mean of
    left-skewed runs), 25% / 40% collapsed runs 92-99% where an interval is given (none where
    the runs all tie); with the bootstrap SD alone 78-86% at n >= N/2. A right-skewed
    lognormal(0, 0.5) 77-96%: its upper tail is heavier than the normal's, n = N undercovers."""
    n_t = len(grids)
    flat = np.sort(grids.reshape(n_t, -1), 1)
    big_n = flat.shape[1]
    weights = np.stack([_tang_weights(big_n, n) for n in ns], 1)  # (N, len(ns))
    reps = np.sort(
        resample(lay, resamples, np.random.default_rng(seed), grids).reshape(n_t, resamples, -1), -1
    )
    c, levels = stacked_terms(lay, grids)
    df = stacked_widening(c, levels)[1]
    with np.errstate(all="ignore"):  # the bootstrap's variance is low by (n-1)/n per seed axis
        bias = np.nan_to_num(c.sum(1) / np.sum(c * (levels - 1) / levels, 1), nan=1.0)
    boot_sd = (reps @ weights).std(1) * np.sqrt(bias)[:, None]
    s = flat.std(1, ddof=1) if big_n > 1 else np.zeros(n_t)
    with np.errstate(all="ignore"):
        design_effect = np.maximum(1.0, np.nan_to_num(c.sum(1) / (s**2 / big_n), nan=1.0))
    normal_sd = np.sqrt(np.array(ns) / big_n) * normal_max_sd(ns)
    se = np.maximum(boot_sd, (s * np.sqrt(design_effect))[:, None] * normal_sd)
    half = np.nan_to_num(stats.t.ppf(0.975, df))[:, None] * se
    estimate = flat @ weights
    out = np.stack([estimate - half, estimate + half], -1)
    return np.where(no_spread(flat)[:, None, None], np.nan, out)


def expected_max(
    scores: Sequence[float | None] | Sequence[TrialRecord],
    n_max: int | None = None,
    method: str = "auto",
    resamples: int = 1000,
    seed: int = 0,
    at: Iterable[int] | None = None,
) -> list[dict[str, Any]]:
    """Expected maximum validation performance of n = 1..n_max runs (default N, the runs we
    have), per point {n, mean, std, estimator, ci95, extrapolated} (+ at_least past N).

    mean: method "without_replacement" (Tang et al. 2020, arXiv 2004.13705): sum_i v(i) C(i-1,
    n-1) / C(N, n), the exact mean over all n-subsets of our runs: unbiased for the expected max
    of n fresh runs, defined for n <= N only. "with_replacement" (Dodge et al. 2019, arXiv
    1909.03004): sum_i v(i) ((i/N)^n - ((i-1)/N)^n); it redraws the same runs, so it is biased low.
    "auto": the unbiased one up to N; past N our max, a lower bound (LOWER_BOUND), never Dodge's
    curve, which falls below the max we already observed. v sorted ascending; at n = 1 both are
    the mean, and neither exceeds our max.
    std: the spread of the max of n runs drawn from ours (the band); 0 at n = N unbiased.
    ci95: 95% interval for the estimate `mean` (`stacked_ci`), n <= N; None past N (extrapolated:
    True), where at_least = the lower end of the n = N interval bounds E[max of n] from below.
    `at`: only these n (of 1..n_max), each point as the whole curve has it: the curve's cost is
    O(N) a point, O(N^2) for all n up to N.
    Pass records (dicts) for a design-aware interval (crossed init x order grids); plain scores
    are independent runs. With records of a crossed grid the estimate is over cells, which share
    seeds: slightly below the expected max of n independent runs (5 x 5, n = 25: -0.15 SD).
    """
    records = [r if isinstance(r, dict) else {"score": r} for r in scores]
    if len(by_setting(records)) > 1:  # several settings: their runs as independent runs
        records = [{"score": r.get("score")} for r in records]
    lay = layout(records)
    v = np.sort(lay.grid[np.isfinite(lay.grid)])
    big_n = v.size
    last = big_n if n_max is None else n_max
    if big_n == 0:
        return []
    points = range(1, last + 1) if at is None else sorted({n for n in at if 1 <= n <= last})
    # The interval at each n <= N shown, and at N itself when a point lies past it (at_least).
    inside = sorted({n for n in points if n <= big_n} | ({big_n} if last > big_n else set()))
    design = lay if lay.complete else layout([{"score": x} for x in v])
    ci = dict(zip(inside, _design_ci(design, inside, resamples, seed), strict=True)) if inside else {}
    out: list[dict[str, Any]] = []
    for n in points:
        unbiased = method == "without_replacement" or (method == "auto" and n <= big_n)
        if unbiased and n > big_n:
            break
        weights = _tang_weights(big_n, n) if unbiased else _dodge_weights(big_n, n)
        mean = float(weights @ v)
        std = max(float(weights @ v**2) - mean**2, 0.0) ** 0.5
        point = {
            "n": n,
            "mean": mean,
            "std": std,
            "estimator": WITHOUT_REPLACEMENT if unbiased else WITH_REPLACEMENT,
        }
        if n <= big_n:
            low, high = ci[n]
            point |= {"ci95": None if np.isnan(low) else [float(low), float(high)], "extrapolated": False}
        else:
            at_least = None if np.isnan(ci[big_n][0]) else float(ci[big_n][0])
            point |= {"ci95": None, "extrapolated": True, "at_least": at_least}
            if method == "auto":  # our max: E[max of n] >= E[max of N], estimated without bias by it
                point |= {"mean": float(v[-1]), "estimator": LOWER_BOUND}
        out.append(point)
    return out


def _design_ci(lay: Layout, ns: list[int], resamples: int, seed: int) -> np.ndarray:
    """(len(ns), 2) intervals of one study (a grid with holes: its scores as independent runs)."""
    return stacked_ci(lay, lay.grid[None], ns, resamples, seed)[0]
