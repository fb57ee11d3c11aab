"""Intervals for linear combinations of independent chi-square mean squares, the form of every
random-effects variance component (components.py): modified large-sample (MLS) intervals for a
component, generalized pivotal quantities for any function of them (shares)."""

from __future__ import annotations

import itertools

import numpy as np
from scipy import stats

ALPHA = 0.025  # each tail of a 95% interval


def mls_interval(ms: np.ndarray, df: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """95% modified large-sample interval for sum_q c_q E[MS_q], independent chi-square mean
    squares (Ting, Burdick, Graybill, Jeyaratnam and Lu 1990; Burdick and Graybill 1992, s3.3),
    vectorised over leading axes of ms. By hand: neither scipy nor statsmodels has it. Exact for a
    single mean square (the chi-square interval of a variance)."""
    pos, neg = np.flatnonzero(c > 0), np.flatnonzero(c < 0)
    s = ms * np.abs(c)
    g = 1 - df / stats.chi2.isf(ALPHA, df)  # 1 - 1/F(alpha: n, inf)
    h = df / stats.chi2.ppf(ALPHA, df) - 1  # 1/F(1 - alpha: n, inf) - 1
    v_low = (g[pos] ** 2 * s[..., pos] ** 2).sum(-1) + (h[neg] ** 2 * s[..., neg] ** 2).sum(-1)
    v_high = (h[pos] ** 2 * s[..., pos] ** 2).sum(-1) + (g[neg] ** 2 * s[..., neg] ** 2).sum(-1)
    for q, r in itertools.product(pos, neg):
        f_up, f_low, both = (
            stats.f.isf(ALPHA, df[q], df[r]),
            stats.f.ppf(ALPHA, df[q], df[r]),
            s[..., q] * s[..., r],
        )
        v_low = v_low + ((f_up - 1) ** 2 - g[q] ** 2 * f_up**2 - h[r] ** 2) / f_up * both
        v_high = v_high + ((1 - f_low) ** 2 - h[q] ** 2 * f_low**2 - g[r] ** 2) / f_low * both
    for q, t in itertools.combinations(pos, 2):
        n = df[q] + df[t]
        star = (1 - n / stats.chi2.isf(ALPHA, n)) ** 2 * n**2 / (df[q] * df[t])
        star -= g[q] ** 2 * df[q] / df[t] + g[t] ** 2 * df[t] / df[q]
        v_low = v_low + star / (len(pos) - 1) * s[..., q] * s[..., t]
    est = s[..., pos].sum(-1) - s[..., neg].sum(-1)
    return est - np.sqrt(np.maximum(v_low, 0)), est + np.sqrt(np.maximum(v_high, 0))


def gpq_draws(ms: np.ndarray, df: np.ndarray, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(..., draws, terms) generalized pivotal quantities of the expected mean squares
    (Weerahandi 1993): E[MS_q] = MS_q n_q / chi2(n_q). Any function of them, such as a share,
    gets an interval from their quantiles."""
    return ms[..., None, :] * df / rng.chisquare(df, (*ms.shape[:-1], draws, len(df)))


def component_interval(ms: np.ndarray, df: np.ndarray, c: np.ndarray) -> np.ndarray:
    """(..., 2) 95% intervals of sum_q c_q E[MS_q] clipped at 0 (a variance is >= 0), vectorised
    over leading axes of ms; NaN where the runs cannot bound it. MLS, but where its upper end is
    <= 0 (an estimate far below 0) it would say [0, 0], a certainty no run gives: the upper end is
    then the MLS bound of the positive terms alone, which are at least the component (valid, one
    sided). Where even those are 0 (the runs tie along these seeds), NaN."""
    low, high = mls_interval(ms, df, c)
    high = np.where(high > 0, high, mls_interval(ms, df, np.clip(c, 0, None))[1])
    out = np.stack([np.maximum(low, 0.0), np.maximum(high, 0.0)], -1)
    return np.where((out[..., 1] > out[..., 0])[..., None], out, np.nan)
