"""Tests whose unit is the seed, not the run (docs/design.md, The unit of a statistic), for runs that
share seeds: a crossed init x order grid, or runs under several shared subsample seeds.

Why: every cell of a crossed grid shares its init effect with its row and its order effect with its
column. When a recipe interacts with the seed (its own init and order effects), the paired
differences d[i, o] = B - A still share them, so cells are not independent pairs: the signed-rank
test on cells rejected 20-30% of null studies on 3 x 3 and 5 x 5 grids.

The test here: the mean over a balanced grid of the seed factors that have more than one level
(subsample, init, order, or runs), of the paired differences or of each arm's runs, with
Var(mean) = sum over terms T (main effects and interactions) of sigma_T^2 / n_T, each component
estimated from the ANOVA mean squares (inclusion-exclusion over the terms containing T) and
truncated at 0; t with the fewest degrees of freedom among the terms kept. Measured type-I error
(tests/test_compare.py): <= 5.1% at nominal 5% over grids from 2 x 2 to 5 x 5 and every mix of
init, order and cell variance. Satterthwaite's df were not honest here (6.6% on 3 x 5, 8% on 2 x 3
grids with one dominant seed axis; its estimated df grow exactly when the dominant mean square is
small by chance); untruncated components cost most of the power when cell noise dominates.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.stats.decide.decidable import verdict
from suite.stats.design import crossed_mean_squares, crossed_terms, layout
from suite.study.records import TrialRecord, outcome, score

Value = Callable[[TrialRecord], float]
METHOD = (
    "mean over seed units, variance from the seed factors' mean squares (components truncated at 0), "
    "t with the fewest df of the terms kept"
)


def oriented(
    side: Sequence[TrialRecord] | np.ndarray, higher_is_better: bool
) -> Sequence[TrialRecord] | np.ndarray:
    """The runs with their scores negated where the metric is lower-is-better, so that a higher
    value always means a better run (for the verdicts that name the side that is ahead)."""
    if higher_is_better:
        return side
    if isinstance(side, np.ndarray) or (len(side) and not isinstance(side[0], dict)):
        return -np.asarray(side, dtype=float)
    return [r if r.get("score") is None else {**r, "score": -r["score"]} for r in side]


def failed(r: TrialRecord) -> float:
    return float(outcome(r) == "failed")


def _seed_key(r: TrialRecord) -> tuple | None:
    """What matches a run across studies: its seeds (a tuple: it only keys a dict here), and where
    it was trained: a run imported from elsewhere (`suite import`) never pairs with one the suite
    trained, since the same seed numbers draw other weights and orders in another code."""
    if r.get("seeds") is None:
        return None
    return (*sorted(r["seeds"].items()), ("imported", r.get("imported") is not None))


def pair_up(a: Sequence[TrialRecord], b: Sequence[TrialRecord]) -> list[tuple[TrialRecord, TrialRecord]]:
    """Runs of A and B with the same seeds, in A's order; a seed set seen twice on a side has no
    unique partner and is left out."""

    def index(side: Sequence[TrialRecord]) -> dict[str, TrialRecord]:
        keys = [_seed_key(r) for r in side]
        seen = Counter(keys)
        return {k: r for k, r in zip(keys, side, strict=True) if k is not None and seen[k] == 1}

    ia, ib = index(a), index(b)
    return [(ia[k], ib[k]) for k in ia if k in ib]


def differences(pairs: Sequence[tuple[TrialRecord, TrialRecord]], value: Value = score) -> list[TrialRecord]:
    """One record per pair, its seeds and value(B) - value(A) as its score (NaN when either is missing)."""
    return [{"seeds": ra["seeds"], "score": value(rb) - value(ra)} for ra, rb in pairs]


def _complete(g: np.ndarray) -> np.ndarray:
    """The largest balanced grid left after dropping, one at a time, the seed level with the largest
    share of missing cells."""
    while g.size and not np.isfinite(g).all():
        missing = ~np.isfinite(g)
        worst = max(
            (missing.mean(axis=tuple(a for a in range(g.ndim) if a != ax))[level], ax, level)
            for ax in range(g.ndim)
            for level in range(g.shape[ax])
            if g.shape[ax] > 1 or g.size == 1
        )
        g = np.delete(g, worst[2], axis=worst[1])
    return g


def unit_grid(records: Sequence[TrialRecord], value: Value = score) -> tuple[np.ndarray, str]:
    """The runs' values as a complete grid over the seed factors with more than one level, and the
    unit's name. Subsample seeds that each have their own init and order seeds: their means."""
    lay = layout([{"seeds": r.get("seeds"), "score": value(r)} for r in records])
    g = lay.grid
    if not lay.shared and g.shape[0] > 1:
        with np.errstate(all="ignore"):
            g = np.nanmean(g, axis=(1, 2), keepdims=True)
    g = _complete(g)
    return g.reshape([s for s in g.shape if s > 1] or [g.size]), lay.unit


def mean_variance(y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Variance of the mean of a balanced grid over its last k axes (seed factors, all crossed), and
    its degrees of freedom: see the module docstring. Vectorised over the leading axes."""
    total = math.prod(y.shape[y.ndim - k :])
    terms = crossed_terms(k)
    ms, dfs = crossed_mean_squares(y, k)
    variance = np.zeros(y.shape[: y.ndim - k])
    df = np.full(variance.shape, float(dfs[terms[-1]]))  # the residual (top) term is always in
    for t in terms:
        component = sum((-1) ** (len(u) - len(t)) * ms[u] for u in terms if set(t) <= set(u))
        variance = variance + np.maximum(component, 0) / total
        df = np.where(component > 0, np.minimum(df, dfs[t]), df)
    return variance, df


def t_p(estimate: np.ndarray, variance: np.ndarray, df: np.ndarray) -> np.ndarray:
    """Two-sided t p; NaN when the values do not vary across seed units but their mean is not 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * stats.t.sf(np.abs(estimate) / np.sqrt(variance), df)
    return np.where(variance > 0, p, np.where(estimate == 0, 1.0, np.nan))


def unit_t(y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, variance of the mean, df) of a balanced grid over its last k axes; vectorised."""
    variance, df = mean_variance(y, k)
    return y.mean(axis=tuple(range(y.ndim - k, y.ndim))), variance, df


def welch_t(ya: np.ndarray, ka: int, yb: np.ndarray, kb: int) -> tuple[np.ndarray, ...]:
    """(mean of B - mean of A, its variance, df): each arm's variance from its own seed units, the
    fewer df of the two (Welch's conservative choice; Satterthwaite's is not honest here)."""
    (ea, va, da), (eb, vb, db) = unit_t(ya, ka), unit_t(yb, kb)
    return eb - ea, va + vb, np.minimum(da, db)


def _result(found: tuple[np.ndarray, ...] | None, cells: int, unit: str) -> dict[str, Any]:
    out: dict[str, Any] = {"estimate": None, "ci95": None, "unit": unit, "method": METHOD}
    if found is None or cells < 2:
        return out | verdict(None, 1.0, cells, 2, "seed units")
    estimate, variance, df = (float(np.asarray(x).reshape(-1)[0]) for x in found)
    p = float(t_p(np.array(estimate), np.array(variance), np.array(df)))
    out["estimate"] = estimate
    if not np.isfinite(p):
        note = "the values do not vary across seed units: no test"
        return out | {"decidable": False, "p": None, "min_p": None, "runs_needed": None, "note": note}
    half = float(stats.t.ppf(0.975, df) * np.sqrt(variance))
    return out | verdict(p, 0.0, cells, None) | {"ci95": [estimate - half, estimate + half], "df": df}


def paired_units(pairs: Sequence[tuple[TrialRecord, TrialRecord]], value: Value = score) -> dict:
    """Mean of value(B) - value(A) over the seed-paired runs, tested on seed units."""
    g, unit = unit_grid(differences(pairs, value))
    unit = f"{g.size} seed-paired runs, {unit}"
    return _result(unit_t(g[None], g.ndim) if g.size else None, g.size, unit)


def unpaired_units(a: Sequence[TrialRecord], b: Sequence[TrialRecord], value: Value = score) -> dict:
    """Mean of value over B's runs minus A's, each arm's variance from its own seed units."""
    (ga, unit_a), (gb, unit_b) = unit_grid(a, value), unit_grid(b, value)
    cells = min(ga.size, gb.size)
    found = welch_t(ga[None], ga.ndim, gb[None], gb.ndim) if cells else None
    return _result(found, cells, f"A: {unit_a}; B: {unit_b}")
