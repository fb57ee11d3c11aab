"""Random-effects variance components of one setting's scores: how much of the spread comes from
the init seed, the data-order seed, the subsample draw and the rest (DESIGN.md s4), estimated for
the seed design the sweep actually ran.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from suite.uncertainty import PERCENTILE, Record, by_setting, layout, percentile_ci, resample


def crossed_components(y: np.ndarray) -> dict[str, np.ndarray]:
    """Method-of-moments random-effects components of complete grids y[..., S, I, O], one run per
    cell: a two-way ANOVA without replication per subsample seed, averaged over subsample seeds.
    Raw estimates (they can be negative); vectorised over the leading axes."""
    n_i, n_o = y.shape[-2:]
    m = y.mean((-2, -1), keepdims=True)
    rows, cols = y.mean(-1, keepdims=True), y.mean(-2, keepdims=True)
    ms_init = n_o * ((rows - m) ** 2).sum((-2, -1)) / (n_i - 1)  # E = n_o var_init + var_e
    ms_order = n_i * ((cols - m) ** 2).sum((-2, -1)) / (n_o - 1)  # E = n_i var_order + var_e
    ms_e = ((y - rows - cols + m) ** 2).sum((-2, -1)) / ((n_i - 1) * (n_o - 1))  # E = var_e
    out = {
        "init": ((ms_init - ms_e) / n_o).mean(-1),
        "order": ((ms_order - ms_e) / n_i).mean(-1),
        "interaction+residual": ms_e.mean(-1),
    }
    if y.shape[-3] > 1:  # Var(subsample mean) = var_sub + var_init/n_i + var_order/n_o + var_e/(n_i n_o)
        within = ((ms_init + ms_order - ms_e) / (n_i * n_o)).mean(-1)
        out["subsample"] = m[..., 0, 0].var(-1, ddof=1) - within
    return out


def independent_components(y: np.ndarray) -> dict[str, np.ndarray]:
    """One-way method of moments on y[..., S, R] (NaN = no run): 'seed' is the pooled variance
    within subsample seeds (init, order and residual together); 'subsample' is the variance of
    the subsample means minus the seed variance each mean carries (var_seed / n)."""
    n = np.isfinite(y).sum(-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        df = np.clip(n - 1, 0, None)
        seed = np.nansum(np.nan_to_num(np.nanvar(y, -1, ddof=1)) * df, -1) / df.sum(-1)
        out = {"seed": seed}
        if y.shape[-2] > 1:
            carried = np.where(n > 0, seed[..., None] / np.maximum(n, 1), np.nan)
            out["subsample"] = np.nanvar(np.nanmean(y, -1), -1, ddof=1) - np.nanmean(carried, -1)
    return out


def _missing(reason: str) -> dict[str, Any]:
    return {"identifiable": False, "reason": reason}


def variance_components(records: Sequence[Record], resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Random-effects variance components of ONE setting's scores, with design-bootstrap 95%
    intervals (approximate: a variance from few seeds is uncertain, and the interval says so).

    Shape: {"design", "unit", "runs", "method", "total", "components": {name: C}}; names: init,
    order, interaction+residual, subsample (crossed) or seed, subsample (independent; init and
    order are confounded there). C = {"identifiable": True, "estimate" (raw, may be < 0),
    "truncated_at_0", "ci95" (of the raw estimate), "share", "share_ci95"} or {"identifiable":
    False, "reason"}. Shares and "total" use the estimates truncated at 0."""
    if len(by_setting(records)) > 1:
        return {"identifiable": False, "reason": "the runs span several settings: components are per setting"}
    lay = layout(records)
    rng = np.random.default_rng(seed)
    several = lay.grid.shape[0] > 1
    comps: dict[str, dict[str, Any]] = {}
    est: dict[str, np.ndarray] = {}
    if lay.design == "crossed":
        if lay.complete:
            est, boot = crossed_components(lay.grid), crossed_components(resample(lay, resamples, rng))
        else:
            why = "incomplete init x order grid (a missing cell, a run without a score, or unequal grids)"
            comps = dict.fromkeys(("init", "order", "interaction+residual", "subsample"), _missing(why))
    else:
        why = "independent seeds: init and order seeds change together (see 'seed')"
        comps = {"init": _missing(why), "order": _missing(why)}
        comps["interaction+residual"] = _missing("inside 'seed'")
        if (np.isfinite(lay.grid[..., 0]).sum(-1) >= 2).any():
            est = independent_components(lay.grid[..., 0])
            boot = independent_components(resample(lay, resamples, rng)[..., 0])
        else:
            why = "one run per subsample seed: seed and subsample effects are confounded"
            comps |= {"seed": _missing(why), "subsample": _missing(why)}
    if not several:
        comps["subsample"] = _missing("one subsample seed")
    est = {k: v for k, v in est.items() if k not in comps}
    total = sum(max(float(v), 0.0) for v in est.values())
    if est:
        boot_trunc = {k: np.clip(boot[k], 0, None) for k in est}
        boot_total = sum(boot_trunc.values())
        for k, v in est.items():
            with np.errstate(invalid="ignore", divide="ignore"):
                share_reps = boot_trunc[k] / boot_total
            comps[k] = {
                "identifiable": True,
                "estimate": float(v),
                "truncated_at_0": bool(v < 0),
                "ci95": percentile_ci(boot[k]),
                "share": max(float(v), 0.0) / total if total > 0 else None,
                "share_ci95": percentile_ci(share_reps),
            }
    return {
        "design": lay.design,
        "unit": lay.unit,
        "runs": len(records),
        "method": "random-effects ANOVA, method of moments; intervals: " + PERCENTILE,
        "total": total if est else None,
        "components": comps,
    }


def variance_shares(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any] | None:
    """Shares of score variance on ONE setting's crossed init x order grid, as the report's bar
    chart reads them: {"init", "order", "residual" (= interaction+residual), "subsample" (when
    identifiable), "total_variance"} from the components truncated at 0, plus "components": the
    full `suite.uncertainty.variance_components` result (raw estimates, intervals, what was
    truncated). None unless one setting on a complete crossed grid: never pool settings."""
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
