"""The references a reported median or mean of k runs is placed in (docs/statistics.md, Gap to
reported numbers): the statistic of k runs predicted from ours by the design bootstrap
(`stacked_predictive`), and a t reference from ANOVA mean squares (`t_reference`); `stacked_gap`
flags a reported value only outside both. gap.py builds the user's answer on them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from suite.stats.design import (
    Layout,
    by_setting,
    draw_indices,
    layout,
    level_spread,
    pad_grids,
    pooled_mean_squares,
    satterthwaite,
    stacked_terms,
    stacked_widening,
)
from suite.stats.estimates.uncertainty import Statistic, no_spread, reduce
from suite.study.records import TrialRecord


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
    of_k: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """`predictive_draws` of T studies of one layout, `grids` (T, S, A, C) -> (T, resamples).
    `of_k`: what is taken of the k runs drawn ((rows, k) -> (rows,); default `statistic`), placed
    about each replicate's `statistic` (an order statistic of k about the replicate's median)."""
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
    theirs = (of_k(values) if of_k else reduce(values, statistic)).reshape(n_t, resamples) - ours
    draws = center + factor * (ours - center) + theirs  # only our own uncertainty is widened
    return draws + rng.normal(0.0, eval_sd, draws.shape) if eval_sd > 0 else draws


def _efficiency(statistic: str, n: int) -> float:
    """Variance of the statistic of n normal runs over sigma^2 / n: the median's pi/2 (its small-n
    value is lower: 1.35 at n = 3, so this errs wide); a median of 1 or 2 runs is their mean."""
    return math.pi / 2 if statistic == "median" and n >= 3 else 1.0


def _satterthwaite(parts: Sequence[tuple[np.ndarray, np.ndarray | float]]) -> np.ndarray:
    """Satterthwaite's df of a sum of (variance (T,), df) terms (`satterthwaite`)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v, _ in parts))
    return satterthwaite(
        np.stack([np.broadcast_to(v, shape) for v, _ in parts], -1),
        np.stack([np.broadcast_to(np.asarray(d, dtype=float), shape) for _, d in parts], -1),
    )


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
    mse, df_e = pooled_mean_squares(grids, crossed=True)[2]
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
    ms = pooled_mean_squares(grids, lay.design == "crossed")
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
        theirs.append((level_spread(grids, 1)[1], n_s - 1))  # their one subsample effect
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
    variance, df = t_reference(lay, grids, statistic, k)
    return _both(flat, draws, reported, reduce(flat, statistic), variance + eval_sd**2, df)


def _both(
    flat: np.ndarray,
    draws: np.ndarray,
    reported: np.ndarray,
    center: np.ndarray,
    variance: np.ndarray,
    df: np.ndarray,
) -> dict[str, np.ndarray]:
    """p of the predictive draws (T, resamples) and of the t reference (center, variance, df),
    p their larger (NaN where our runs show no spread), and the reported value's percentile."""
    resamples = draws.shape[1]
    r = reported[:, None]
    le, ge = (draws <= r).sum(1), (draws >= r).sum(1)
    p_boot = np.minimum(1.0, 2 * (np.minimum(le, ge) + 1) / (resamples + 1))
    with np.errstate(all="ignore"):
        z = np.abs(reported - center) / np.sqrt(variance)
        p_t = np.where(np.isnan(df), 1.0, 2 * stats.t.sf(z, df))
    return {
        "p_bootstrap": p_boot,
        "p_t": p_t,
        "p": np.where(no_spread(flat), np.nan, np.maximum(p_boot, p_t)),
        "percentile": 100 * ((draws < r).mean(1) + 0.5 * (draws == r).mean(1)),
    }


@functools.lru_cache(maxsize=256)
def order_moments(n: int, ranks: tuple[int, ...]) -> tuple[float, float]:
    """(mean, variance) of the average of the order statistics `ranks` (0-based) of n standard
    normal runs: 200,000 seeded draws (SE of the mean about 0.002). Why not closed forms: the
    average of two order statistics (an even k's median) has none; a draw is exact enough here."""
    z = np.sort(np.random.default_rng(0).standard_normal((200_000, n)), axis=1)[:, list(ranks)].mean(1)
    return float(z.mean()), float(z.var())


def stacked_order_gap(
    lay: Layout,
    grids: np.ndarray,
    reported: np.ndarray,
    n: int,
    ranks: tuple[int, ...],
    resamples: int = 4000,
    seed: int = 0,
    eval_sd: float = 0.0,
) -> dict[str, np.ndarray]:
    """`stacked_gap` for the average of order statistics `ranks` (0-based) of n runs (a median of
    k in which some runs failed below the rest is such a statistic of the others), about our
    median. Predictive draws as `stacked_predictive` with the order statistic taken of the n runs;
    the t reference is normal theory: our median + sigma e, variance sigma^2 v (`order_moments`)
    + our median's variance + e^2 sigma^2 / (2 df) (sigma estimated), sigma^2 the variance of one
    run from the design's mean squares (`t_reference` at k = 1 less our mean's own variance)."""
    flat = grids.reshape(len(grids), -1)
    pick = list(ranks)
    draws = stacked_predictive(
        lay, grids, n, "median", resamples, seed, eval_sd, of_k=lambda v: np.sort(v, axis=1)[:, pick].mean(1)
    )
    e, v = order_moments(n, ranks)
    sigma2, df = _one_run(lay, grids)
    with np.errstate(all="ignore"):
        center = reduce(flat, "median") + np.sqrt(sigma2) * e
        spread = sigma2 * v + our_variance(lay, grids, "median")[0] + e**2 * sigma2 / (2 * df) + eval_sd**2
    return _both(flat, draws, reported, center, spread, df)


def order_center(lay: Layout, grids: np.ndarray, n: int, ranks: tuple[int, ...]) -> np.ndarray:
    """(T,) where `stacked_order_gap` centres the order statistic: our median + sigma e."""
    sigma2, _ = _one_run(lay, grids)
    return reduce(grids.reshape(len(grids), -1), "median") + np.sqrt(sigma2) * order_moments(n, ranks)[0]


def _one_run(lay: Layout, grids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T,) variance of one run from the design's mean squares (`t_reference` at k = 1 less our
    mean's own variance), and its df."""
    one_run, df = t_reference(lay, grids, "mean", 1)
    return np.maximum(one_run - our_variance(lay, grids, "mean")[0], 0.0), df
