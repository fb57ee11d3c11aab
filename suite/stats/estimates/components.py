"""Random-effects variance components of one setting's scores: how much of the spread comes from
the init seed, the data-order seed, the subsample draw and the rest, estimated for the seed design
the sweep actually ran (one run per cell; `suite.stats.design.layout` finds it):

- crossed, shared seeds (the sweep's grid: the same init and order seeds under every subsample
  seed): subsample x init x order fully crossed with the two-way interactions; the three-way one
  is the residual. Treating the seeds as redrawn per subsample read a true subsample variance of
  0.5 as 0.10 (3 x 5 x 5, init 1.5 and order 0.5 subtracted as if each subsample mean carried them).
- crossed, nested: each subsample seed has its own init and order seeds.
- independent runs (init and order seeds change together): subsample x run crossed when the
  same run seeds recur under every subsample seed, else runs nested in subsample seeds.

Complete grids: the method of moments on the ANOVA mean squares (unbiased). A missing cell (a
diverged run, an incomplete grid): REML (statsmodels MixedLM). Component intervals: modified
large-sample (MLS) intervals on the mean squares; share intervals: generalized pivotal
quantities. Measured coverage at nominal 95% (normal effects, 4000 simulated studies each,
Monte-Carlo error +-0.7 points; tests/test_components.py re-measures 5 x 5, 3 x 5 x 5, N = 3-10
and the 5 x 5 shares):
- 5 x 5 grid, one subsample seed: init 95.0%, order 94.8%, interaction+residual 95.0%;
  3 x 3: 95.1 / 95.5 / 94.9%.
- 3 subsample seeds x 5 x 5, shared: subsample 95.2%, init 94.8%, order 95.0%,
  interaction+residual 96.5%; nested: 95.4 / 95.2 / 94.1 / 94.7%.
- independent runs, one subsample seed (exact chi-square): N = 3 94.9%, N = 5 95.4%, N = 10 94.9%;
  4 subsample seeds x 6 runs: subsample 94.8%, seed 96.9% (shared), 95.6 / 94.8% (nested).
- shares (2000 studies): 94.7-97.7% on 3 x 3, 5 x 5 and 3 x 5 x 5.
- REML with 1-3 missing cells (300 studies): 94-98% on 5 x 5, 3 x 5 x 5 and 4 x 6 runs.
- through `variance_components` on records (500 studies): 93-97% on 5 x 5 and 3 x 5 x 5.
The percentile bootstrap this replaces covered 58% (3 x 3) and 77% (5 x 5): its replicates of a
variance centre at ((n-1)/n)^2 of the estimate. Satterthwaite chi-square intervals, the simpler
choice, covered 49-86% for some components on 5 x 5 and 3 x 5 x 5 (differences of mean squares).
All of this assumes roughly normal effects: with t(5) effects MLS covers 88-93% (N = 10 runs: 87%).
No interval has zero width (`component_interval`): an MLS interval below 0 (1.8-2% of 3 x 3
studies with small init and order effects) gets the positive terms' upper bound instead of [0, 0]
(coverage 95.0 -> 96.2%); where the runs do not vary along a component's seeds, none, and a
mean square at floating-point residue (under 1e-12 of the largest) counts as not varying.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.stats.design import Layout, by_setting, crossed_terms, effect_sums, layout, satterthwaite, term_df
from suite.stats.estimates.ms_intervals import component_interval, gpq_draws, mls_interval
from suite.study.records import TrialRecord

TIED = "cannot bound: the runs do not vary along this component's seeds"
POSITIVE = "the MLS interval lay below 0: upper end from its positive mean-square terms alone"
SHARE_WIDTH = 0.5  # a share interval at least this wide does not bound the share
MAX_SEEDS = 100  # seeds_for_share looks no further
RESIDUE = 1e-12  # a mean square this small beside the largest is floating-point residue, not variance
Subset = tuple[int, ...]  # the axes of an effect: (0,) a main effect, (0, 1) their interaction
LABELS = {"crossed": ("subsample", "init", "order"), "independent": ("subsample", "run")}


@dataclass(frozen=True)
class Model:
    """A balanced random-effects design on a grid of `sizes`. terms: the crossed effects pooled
    into each mean square (a nested design pools init and subsample x init into 'init within
    subsample'); the random effect a mean square adds is its group's last subset. names: each
    reported component -> the random effects it sums."""

    sizes: tuple[int, ...]
    terms: tuple[tuple[Subset, ...], ...]
    names: dict[str, tuple[Subset, ...]]

    @property
    def effects(self) -> list[Subset]:
        return [group[-1] for group in self.terms]

    @property
    def df(self) -> np.ndarray:
        return np.array([sum(term_df(self.sizes, t) for t in g) for g in self.terms], float)

    def expected(self) -> np.ndarray:
        """K with E[MS] = K @ variances. Balanced random model: effect U adds prod(n_a, a not in U)
        times its variance to the mean square of every effect it contains."""
        k = np.zeros((len(self.terms), len(self.terms)))
        for t, group in enumerate(self.terms):
            for u, eff in enumerate(self.effects):
                if set(group[0]) <= set(eff):
                    k[t, u] = math.prod(n for a, n in enumerate(self.sizes) if a not in eff)
        return k

    def coefficients(self) -> dict[str, np.ndarray]:
        """Each component -> c with estimate = MS @ c (the method-of-moments solution)."""
        inv = np.linalg.inv(self.expected())
        return {name: sum(inv[self.effects.index(e)] for e in effs) for name, effs in self.names.items()}


def model(sizes: Sequence[int], design: str, shared: bool) -> Model:
    """The random-effects model of a complete grid: crossed (S, I, O) or (I, O) with one subsample
    seed; independent (S, R) or (R,)."""
    sizes = tuple(int(n) for n in sizes)
    every = tuple((s,) for s in crossed_terms(len(sizes)))
    rest = "interaction+residual"
    if design == "crossed" and len(sizes) == 2:
        return Model(sizes, every, {"init": ((0,),), "order": ((1,),), rest: ((0, 1),)})
    if design == "crossed" and shared:
        inter = ((0, 1), (0, 2), (1, 2), (0, 1, 2))
        return Model(sizes, every, {"subsample": ((0,),), "init": ((1,),), "order": ((2,),), rest: inter})
    if design == "crossed":
        terms = (((0,),), ((1,), (0, 1)), ((2,), (0, 2)), ((1, 2), (0, 1, 2)))
        names = {"subsample": ((0,),), "init": ((0, 1),), "order": ((0, 2),), rest: ((0, 1, 2),)}
        return Model(sizes, terms, names)
    if len(sizes) == 1:
        return Model(sizes, every, {"seed": ((0,),)})
    if shared:
        return Model(sizes, every, {"subsample": ((0,),), "seed": ((1,), (0, 1))})
    return Model(sizes, (((0,),), ((1,), (0, 1))), {"subsample": ((0,),), "seed": ((0, 1),)})


def labels(m: Model, design: str) -> list[str]:
    """A name per random effect, e.g. 'init within subsample', 'residual (init x order)': at one
    run per cell the residual holds the highest interaction."""
    k = len(m.sizes)
    axes = LABELS[design][-k:]
    out = []
    for group in m.terms:
        label = " x ".join(axes[a] for a in group[0]) + (" within subsample" if len(group) > 1 else "")
        out.append(f"residual ({label})" if k > 1 and len(group[-1]) == k else label)
    return out


def mean_squares(y: np.ndarray, m: Model) -> np.ndarray:
    """(..., terms) mean squares of complete grids y[..., *sizes], vectorised over leading axes:
    each effect's sum of squares (`effect_sums`: inclusion-exclusion of axis means), pooled into
    the model's terms (a nested design pools init and subsample x init)."""
    total = math.prod(m.sizes)
    ss = {t: s * total / math.prod(m.sizes[a] for a in t) for t, s in effect_sums(y, len(m.sizes)).items()}
    return np.stack([sum(ss[t] for t in g) for g in m.terms], -1) / m.df


def crossed_components(y: np.ndarray, shared: bool = True) -> dict[str, np.ndarray]:
    """Raw method-of-moments components (may be < 0) of complete grids y[..., S, I, O], one run
    per cell, vectorised; shared: the same init and order seeds under every subsample seed."""
    if y.shape[-3] == 1:
        return _raw(y[..., 0, :, :], model(y.shape[-2:], "crossed", shared))
    return _raw(y, model(y.shape[-3:], "crossed", shared))


def independent_components(y: np.ndarray, shared: bool = True) -> dict[str, np.ndarray]:
    """Raw components of complete y[..., S, R] (R runs under each subsample seed): 'seed' is the
    variance between runs of one subsample seed (init, order and residual together)."""
    if y.shape[-2] == 1:
        return _raw(y[..., 0, :], model(y.shape[-1:], "independent", shared))
    return _raw(y, model(y.shape[-2:], "independent", shared))


def _raw(y: np.ndarray, m: Model) -> dict[str, np.ndarray]:
    ms = mean_squares(y, m)
    return {k: ms @ c for k, c in m.coefficients().items()}


def _missing(reason: str) -> dict[str, Any]:
    return {"identifiable": False, "reason": reason}


def _scored(grid: np.ndarray) -> np.ndarray:
    """The grid without the seeds (slices on any axis) that have no scored run: they inform no
    component, and REML would read an arbitrary variance for a factor left with one level."""
    for axis in range(grid.ndim):
        keep = np.isfinite(grid).any(tuple(a for a in range(grid.ndim) if a != axis))
        grid = np.compress(keep, grid, axis)
    return grid


def _design(lay: Layout) -> tuple[np.ndarray | None, Model | None, dict[str, dict[str, Any]]]:
    """The grid to analyse, its model, and the components this design cannot identify."""
    grid = _scored(lay.grid)
    if grid.size == 0:  # every run diverged: no score to split (and no seed axis left to index)
        names = ("init", "order", "interaction+residual") if lay.design == "crossed" else ("seed",)
        return None, None, dict.fromkeys(("subsample", *names), _missing("no run has a score"))
    several = grid.shape[0] > 1
    one = "one subsample seed" + ("" if lay.grid.shape[0] == 1 else " with scored runs")
    missing = {} if several else {"subsample": _missing(one)}
    if lay.design == "crossed":
        if min(grid.shape[1:]) < 2:
            why = _missing("fewer than 2 init or order seeds with scored runs")
            return None, None, dict.fromkeys(("subsample", "init", "order", "interaction+residual"), why)
        grid = grid if several else grid[0]
        return grid, model(grid.shape, "crossed", lay.shared), missing
    why = _missing("independent seeds: init and order seeds change together (see 'seed')")
    missing |= {"init": why, "order": why, "interaction+residual": _missing("inside 'seed'")}
    grid = grid[..., 0]
    if not (lay.shared and several):  # runs nested in subsample seeds: their order is arbitrary, close gaps
        grid = np.sort(grid, -1)[:, : int(np.isfinite(grid).sum(-1).max(initial=0))]
    if np.isfinite(grid).sum(-1).max(initial=0) < 2:
        why = _missing("one run per subsample seed: seed and subsample confounded" if several else "one run")
        return None, None, missing | {"seed": why, "subsample": why}
    grid = grid if several else grid[0]
    return grid, model(grid.shape, "independent", lay.shared), missing


def _reml(grid: np.ndarray, m: Model) -> np.ndarray | None:
    """REML variance of each random effect of an incomplete grid, or None if the fit fails
    (statsmodels MixedLM, crossed effects as variance components of one group). Powell: the
    default gradient optimizers stop short on the boundary (a zero interaction), measured."""
    import pandas as pd
    from statsmodels.regression.mixed_linear_model import MixedLM

    idx = np.argwhere(np.isfinite(grid))
    data = {"y": grid[tuple(idx.T)], "g": np.zeros(len(idx))}
    for u, eff in enumerate(m.effects[:-1]):  # the last effect is the residual
        data[f"e{u}"] = np.ravel_multi_index(idx[:, list(eff)].T, [m.sizes[a] for a in eff])
    vc = {f"e{u}": f"0 + C(e{u})" for u in range(len(m.effects) - 1)}  # sorted names keep this order
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # boundary and Hessian warnings: the intervals do not use it
        try:
            fit = MixedLM.from_formula("y ~ 1", pd.DataFrame(data), groups="g", vc_formula=vc)
            fit = fit.fit(reml=True, method="powell")
        except (np.linalg.LinAlgError, ValueError):
            return None
    if not fit.converged or not np.isfinite(fit.scale):
        return None
    return np.append(np.maximum(fit.vcomp, 0), fit.scale)


def _fit(grid: np.ndarray, m: Model) -> tuple[np.ndarray, np.ndarray, str] | None:
    """Mean squares and their df: observed on a complete grid; on an incomplete one those a complete
    grid would have at the REML estimates, the residual df less the missing cells (approximate),
    so that one interval method serves both."""
    if np.isfinite(grid).all():
        return _residue_as_zero(mean_squares(grid, m)), m.df, "ANOVA"
    sigma = _reml(grid, m)
    if sigma is None:
        return None
    df = m.df.copy()
    df[-1] = max(df[-1] - (~np.isfinite(grid)).sum(), 1.0)
    return _residue_as_zero(m.expected() @ sigma), df, "REML"


def _residue_as_zero(ms: np.ndarray) -> np.ndarray:
    """Mean squares at rounding residue (RESIDUE of the largest, which bounds the total variance's
    scale) as 0: scores that vary by init seed only leave order and residual mean squares of
    ~1e-32 from floating-point sums, whose MLS intervals [0, 7e-31] looked like certainty that the
    component is 0; at 0 they give "cannot bound", as runs that tie do."""
    return np.where(ms > RESIDUE * ms.max(initial=0.0), ms, 0.0)


def share_draws(ms: np.ndarray, df: np.ndarray, m: Model, draws: int, rng: np.random.Generator) -> np.ndarray:
    """(..., draws, components) GPQ draws of each component's share of the total, components
    truncated at 0 in every draw as in the point estimate."""
    c = np.stack(list(m.coefficients().values()), -1)
    comp = np.clip(gpq_draws(ms, df, draws, rng) @ c, 0, None)
    with np.errstate(invalid="ignore", divide="ignore"):
        return comp / comp.sum(-1, keepdims=True)


def _interval(draws: np.ndarray) -> list[float] | None:
    """The 95% percentile interval of GPQ draws; None when they never move (no [0, 0] share)."""
    finite = draws[np.isfinite(draws)]
    low, high = np.percentile(finite, [2.5, 97.5]) if finite.size else (0.0, 0.0)
    return [float(low), float(high)] if high > low else None


def seeds_for_share(m: Model, variances: np.ndarray, name: str, width: float = SHARE_WIDTH) -> int | None:
    """Fewest seeds per axis (on every axis of the design) at which `name`'s share interval would
    be narrower than `width`, if the effects have these variances: a formula, the GPQ interval at
    the expected mean squares. Simulated studies at that n get a narrower interval about half the
    time (median width within one seed per axis of `width`). None beyond MAX_SEEDS."""
    j = list(m.names).index(name)

    def wide(n: int) -> bool:
        big = Model((n,) * len(m.sizes), m.terms, m.names)
        ms = big.expected() @ variances
        ci = _interval(share_draws(ms, big.df, big, 1000, np.random.default_rng(0))[:, j])
        return ci is None or ci[1] - ci[0] >= width

    low, high = max(m.sizes), MAX_SEEDS
    if wide(high):
        return None
    while high - low > 1:  # the width falls with n: bisect
        mid = (low + high) // 2
        low, high = (mid, high) if wide(mid) else (low, mid)
    return high


def _component(ms: np.ndarray, df: np.ndarray, c: np.ndarray) -> dict[str, Any]:
    est = float(ms @ c)
    low, high = component_interval(ms, df, c)
    satterthwaite_df = float(satterthwaite(c * ms, df, total=est))
    note = TIED if np.isnan(low) else (POSITIVE if mls_interval(ms, df, c)[1] <= 0 else None)
    return {
        "identifiable": True,
        "estimate": est,
        "truncated_at_0": est < 0,
        "ci95": None if np.isnan(low) else [float(low), float(high)],
        **({"ci95_note": note} if note else {}),
        "df": satterthwaite_df if est > 0 and math.isfinite(satterthwaite_df) else None,
    }


def _add_shares(comps: dict, ms: np.ndarray, df: np.ndarray, m: Model, draws: int, seed: int) -> float:
    """Shares, their GPQ intervals, and for a share the design cannot bound the seeds it needs."""
    total = sum(max(comps[k]["estimate"], 0.0) for k in m.names)
    variances = np.clip(np.linalg.solve(m.expected(), ms), 0, None)
    shares = share_draws(ms, df, m, draws, np.random.default_rng(seed))
    alone = len(m.names) == 1  # the only component: its share is 1 by definition, no interval
    for j, name in enumerate(m.names):
        ci = None if alone else _interval(shares[:, j])
        informative = alone or (ci is not None and ci[1] - ci[0] < SHARE_WIDTH)
        comps[name] |= {
            "share": max(comps[name]["estimate"], 0.0) / total if total > 0 else None,
            "share_ci95": ci,
            "share_informative": informative,
        }
        if not informative and total > 0:
            n = seeds_for_share(m, variances, name)
            comps[name] |= {"seeds_per_axis_needed": n, "runs_needed": n ** len(m.sizes) if n else None}
    return total


def variance_components(
    records: Sequence[TrialRecord], resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Random-effects variance components of ONE setting's scores, for the seed design it ran.

    Shape: {"design", "unit", "runs", "method", "model" (its random effects), "total",
    "components": {name: C}}; names: init, order, interaction+residual, subsample (crossed) or
    seed, subsample (independent: init and order are confounded there). C = {"identifiable":
    True, "estimate" (raw, may be < 0; REML's is >= 0), "truncated_at_0", "ci95"
    (`component_interval`; None where the runs cannot bound it), "ci95_note" (when ci95 is None
    or its upper end is the positive terms' bound), "df" (Satterthwaite; None unless the estimate
    is > 0), "includes" (the model's effects it sums), "share", "share_ci95" (GPQ, `resamples`
    draws seeded by `seed`; None for the only component or draws that never move),
    "share_informative" (False when the interval is SHARE_WIDTH or wider: the design cannot bound
    the share), and when not informative "seeds_per_axis_needed",
    "runs_needed" (see `seeds_for_share`; None beyond MAX_SEEDS per axis)} or {"identifiable":
    False, "reason"}. Shares and "total" use the estimates truncated at 0."""
    if len(by_setting(records)) > 1:
        return {"identifiable": False, "reason": "the runs span several settings: components are per setting"}
    lay = layout(records)
    grid, m, comps = _design(lay)
    out = {"design": lay.design, "unit": lay.unit, "runs": len(records), "method": None, "model": None}
    fitted = _fit(grid, m) if grid is not None and m is not None else None
    if m is None or fitted is None:
        if m is not None:
            comps |= {k: _missing("REML did not converge on the incomplete grid") for k in m.names}
        return out | {"total": None, "components": comps}
    ms, df, how = fitted
    named = dict(zip(m.effects, labels(m, lay.design), strict=True))
    for name, c in m.coefficients().items():
        comps[name] = _component(ms, df, c) | {"includes": [named[e] for e in m.names[name]]}
    total = _add_shares(comps, ms, df, m, resamples, seed)
    how = "random-effects ANOVA, method of moments" if how == "ANOVA" else "REML (statsmodels MixedLM)"
    method = f"{how}; intervals: MLS (Ting et al. 1990); shares: generalized pivotal quantities"
    return out | {"method": method, "model": " + ".join(named.values()), "total": total, "components": comps}


def variance_shares(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any] | None:
    """Shares of score variance on ONE setting's crossed init x order grid, as the report's bar
    chart reads them: {"init", "order", "residual" (= interaction+residual), "subsample" (when
    identifiable), "total_variance"} from the components truncated at 0, plus "components": the
    full `variance_components` result (raw estimates, intervals, what was truncated, which share
    intervals are informative). None unless one setting on a crossed grid: never pool settings."""
    if len(by_setting(records)) != 1:
        return None
    full = variance_components(records, seed=seed)
    parts = full["components"]
    if full["design"] != "crossed" or not parts["init"]["identifiable"]:
        return None
    names = {"init": "init", "order": "order", "residual": "interaction+residual", "subsample": "subsample"}
    trunc = {k: max(parts[v]["estimate"], 0.0) for k, v in names.items() if parts[v]["identifiable"]}
    total = sum(trunc.values())
    shares = {k: (v / total if total > 0 else 0.0) for k, v in trunc.items()}
    return {**shares, "total_variance": total, "components": full}
