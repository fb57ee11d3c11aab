"""A seed grid's mean squares, their degrees of freedom, and Satterthwaite's df of a sum of
mean-square terms: the one home of the variance model every design statistic reads (seeds.py's
terms of a mean, decide/paired.py's seed-unit t, estimates/gap_reference.py's t reference,
estimates/components.py's variance components).

Two forms, as the callers need them:
- complete grids (every cell scored; `effect_sums`, `crossed_mean_squares`): each main effect and
  interaction of crossed seed axes by inclusion-exclusion of axis means, vectorised over leading
  axes (simulations hold thousands of grids);
- grids with missing cells (NaN: a diverged run, a cell no run filled; `level_spread`,
  `pooled_mean_squares`): level means over the scored cells, per subsample seed, pooled.
The two agree on complete grids up to rounding, not bit for bit (they sum in another order), so
each caller keeps the form its numbers were measured with.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence

import numpy as np

Term = tuple[int, ...]  # the axes of an effect: (0,) a main effect, (0, 1) their interaction


def crossed_terms(k: int) -> list[Term]:
    """Every main effect and interaction of k crossed axes, the main effects first:
    (0,), (1,), ..., (0, 1), ..., (0, ..., k - 1), the last the residual at one run per cell."""
    return [t for r in range(1, k + 1) for t in itertools.combinations(range(k), r)]


def term_df(sizes: Sequence[int], term: Term) -> int:
    """Degrees of freedom of an effect of a complete grid: the product of (levels - 1) over its axes."""
    return math.prod(sizes[a] - 1 for a in term)


def effect_sums(y: np.ndarray, k: int) -> dict[Term, np.ndarray]:
    """Each effect of complete grids y[..., n_1, ..., n_k] (`crossed_terms(k)`) -> the sum over its
    levels of its squared estimate, vectorised over leading axes. An effect by inclusion-exclusion
    of axis means, e.g. (01) = y_01. - y_0.. - y_.1. + y_...; its sum of squares is this sum times
    the cells a level spans (prod n / prod of its n), its df `term_df`."""
    axes = tuple(range(y.ndim - k, y.ndim))
    out = {}
    for t in crossed_terms(k):
        effect = sum(
            (-1) ** (len(t) - len(u))
            * y.mean(axis=tuple(axes[j] for j in range(k) if j not in u), keepdims=True)
            for r in range(len(t) + 1)
            for u in itertools.combinations(t, r)
        )
        out[t] = (effect**2).sum(axis=axes)
    return out


def crossed_mean_squares(y: np.ndarray, k: int) -> tuple[dict[Term, np.ndarray], dict[Term, int]]:
    """The mean square of every effect of complete grids y[..., n_1, ..., n_k] (leading axes kept)
    and its df, by `crossed_terms(k)`."""
    n = y.shape[y.ndim - k :]
    total = math.prod(n)
    ms, dfs = {}, {}
    for t, sums in effect_sums(y, k).items():
        dfs[t] = term_df(n, t)
        ms[t] = sums * (total / math.prod(n[j] for j in t)) / dfs[t]
    return ms, dfs


def level_spread(grids: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Grids (T, ...) with NaN cells: the level means along `axis` (T, levels; each over every
    other axis but the first, NaN cells left out), their variance (T,) (ddof 1) and the number of
    levels that have a mean (counted on the first grid: the grids share where they are missing).
    Call under a RuntimeWarning filter: a level or grid without a score warns."""
    means = np.nanmean(grids, tuple(a for a in range(1, grids.ndim) if a != axis))
    return means, np.nanvar(means, 1, ddof=1), int(np.isfinite(means[0]).sum())


def grid_mean_squares(g: np.ndarray, crossed: bool) -> list[tuple[np.ndarray, int]]:
    """One subsample seed's (T, A, C) scores with NaN cells, as mean squares with their df:
    crossed, [rows (A), columns (C), residual]; independent runs (C = 1), [runs]."""
    if not crossed:
        _, variance, levels = level_spread(g, 1)
        return [(variance, levels - 1)]
    (rows, v_r, n_a), (cols, v_c, n_c) = level_spread(g, 1), level_spread(g, 2)
    resid = g - rows[:, :, None] - cols[:, None, :] + np.nanmean(g, (1, 2))[:, None, None]
    df_e = (n_a - 1) * (n_c - 1)
    return [(v_r, n_a - 1), (v_c, n_c - 1), (np.nansum(resid**2, (1, 2)) / max(df_e, 1), df_e)]


def pooled_mean_squares(grids: np.ndarray, crossed: bool) -> list[tuple[np.ndarray, int]]:
    """`grid_mean_squares` of grids (T, S, A, C) pooled over the S subsample seeds (weighted by
    df; a seed's NaN mean square counts 0), df summed; 0 where no seed has a df."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        each = [grid_mean_squares(grids[:, s], crossed) for s in range(grids.shape[1])]
    out = []
    for parts in zip(*each, strict=True):
        df = sum(d for _, d in parts if d > 0)
        total = sum(d * np.nan_to_num(v) for v, d in parts if d > 0)
        out.append((total / df if df else np.zeros(len(grids)), df))
    return out


def satterthwaite(
    parts: np.ndarray, df: np.ndarray | float, total: float | np.ndarray | None = None
) -> np.ndarray:
    """Satterthwaite's degrees of freedom of a sum of independent mean-square terms `parts` (last
    axis; a linear combination's terms c_q MS_q, signed) with `df` (broadcast): (sum of the parts)^2
    / sum(part^2 / df). A part of 0 adds nothing whatever its df (NaN: a grid without spread); a df
    under 1e-12 counts as 1e-12. `total`: the parts' sum where the caller has it in another form
    (a dot product); by default their sum along the last axis. NaN or inf where no part is nonzero."""
    parts = np.asarray(parts, dtype=float)
    total = parts.sum(-1) if total is None else total
    with np.errstate(all="ignore"):
        return total**2 / np.where(np.abs(parts) > 0, parts**2 / np.maximum(df, 1e-12), 0.0).sum(-1)
