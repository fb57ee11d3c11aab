"""Statistics of a study's scores (numpy/scipy only; no plotting). Definitions in DESIGN.md s4.

Every interval here is *across seeds/runs*: it says how much a re-run of the study would move,
not the per-example sampling error of one run's dev score.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from suite.records import counts, outcome, runs


def _finite(scores: Sequence[float | None]) -> np.ndarray:
    return np.asarray([s for s in scores if s is not None and np.isfinite(s)], dtype=float)


def spread(scores: Sequence[float | None]) -> dict[str, float | int]:
    """n, median, IQR, mean, std (ddof=1), min, max of the finite scores."""
    x = _finite(scores)
    if x.size == 0:
        return {"n": 0}
    q1, median, q3 = np.percentile(x, [25, 50, 75])
    return {
        "n": int(x.size),
        "median": float(median),
        "iqr": float(q3 - q1),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min": float(x.min()),
        "max": float(x.max()),
    }


def bootstrap_ci(
    scores: Sequence[float | None],
    statistic: str = "median",
    level: float = 0.95,
    seed: int = 0,
    resamples: int = 5000,
) -> tuple[float, float] | None:
    """Seeded percentile-bootstrap CI over runs (across seeds) of the median or mean."""
    x = _finite(scores)
    if x.size < 2:
        return None
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    fn = {"median": np.median, "mean": np.mean}[statistic]
    result = stats.bootstrap(
        (x,),
        fn,
        n_resamples=resamples,
        confidence_level=level,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def expected_max(scores: Sequence[float | None]) -> list[dict[str, float]]:
    """Expected maximum validation performance of n = 1..N runs (Dodge et al. 2019), drawn
    with replacement from the N observed scores, with its standard deviation (the band).

    E[max_n] = sum_i v(i) * ((i/N)^n - ((i-1)/N)^n), v sorted ascending.
    """
    v = np.sort(_finite(scores))
    big_n = v.size
    out = []
    ranks = np.arange(1, big_n + 1)
    for n in range(1, big_n + 1):
        weights = (ranks / big_n) ** n - ((ranks - 1) / big_n) ** n
        mean = float(weights @ v)
        var = max(float(weights @ v**2) - mean**2, 0.0)
        out.append({"n": n, "mean": mean, "std": var**0.5})
    return out


def variance_shares(records: Sequence[dict[str, Any]]) -> dict[str, float] | None:
    """Share of score variance from init seed, order seed and residual on a crossed grid:
    a two-way random-effects ANOVA without replication, per subsample seed, averaged.

    Returns None unless every (init, order) cell of the grid holds exactly one score.
    """
    by_subsample: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("score") is not None and np.isfinite(r["score"]):
            by_subsample[r["seeds"]["subsample"]].append(r)
    components = [c for rs in by_subsample.values() if (c := _two_way(rs)) is not None]
    if not components:
        return None
    init, order, resid = (float(np.mean([c[k] for c in components])) for k in range(3))
    total = init + order + resid
    if total == 0:
        return {"init": 0.0, "order": 0.0, "residual": 0.0, "total_variance": 0.0}
    return {"init": init / total, "order": order / total, "residual": resid / total, "total_variance": total}


def _two_way(records: Sequence[dict[str, Any]]) -> tuple[float, float, float] | None:
    inits = sorted({r["seeds"]["init"] for r in records})
    orders = sorted({r["seeds"]["order"] for r in records})
    if len(inits) < 2 or len(orders) < 2 or len(records) != len(inits) * len(orders):
        return None
    grid = np.full((len(inits), len(orders)), np.nan)
    for r in records:
        grid[inits.index(r["seeds"]["init"]), orders.index(r["seeds"]["order"])] = r["score"]
    if np.isnan(grid).any():
        return None
    i, j = grid.shape
    grand = grid.mean()
    ms_a = j * ((grid.mean(1) - grand) ** 2).sum() / (i - 1)
    ms_b = i * ((grid.mean(0) - grand) ** 2).sum() / (j - 1)
    resid = grid - grid.mean(1, keepdims=True) - grid.mean(0, keepdims=True) + grand
    ms_e = (resid**2).sum() / ((i - 1) * (j - 1))
    return max((ms_a - ms_e) / j, 0.0), max((ms_b - ms_e) / i, 0.0), ms_e


def failure_breakdown(records: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Failed runs by kind: trivial baseline, threshold, divergence (errored trials are not runs)."""
    kinds: dict[str, int] = defaultdict(int)
    for r in runs(records):
        if outcome(r) == "failed":
            kinds[r.get("failure") or "baseline"] += 1
    return dict(kinds)


def summarize(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """Spread, CIs and expected max over the runs, failed runs included (as scored; a diverged
    run has no score) and excluded. Errored and pruned trials are not runs: counted apart here,
    and nowhere else."""
    tally = counts(records)
    records = runs(records)
    scores = [r.get("score") for r in records]
    ok = [r.get("score") for r in records if outcome(r) == "succeeded"]
    out: dict[str, Any] = {
        "runs": len(records),
        "failed": tally["failed"],
        "failure_kinds": failure_breakdown(records),
        "pruned": tally["pruned"],
        "errored": tally["errored"],
    }
    out["failure_rate"] = out["failed"] / len(records) if records else 0.0
    for name, values in (("all", scores), ("excluding_failed", ok)):
        block: dict[str, Any] = dict(spread(values))
        for stat in ("median", "mean"):
            ci = bootstrap_ci(values, stat, seed=seed)
            block[f"ci95_{stat}"] = list(ci) if ci else None
        curve = expected_max(values)
        block["expected_max"] = {str(p["n"]): p["mean"] for p in curve if p["n"] in (1, 5, 10, 20)}
        out[name] = block
    return out


def gap_to_reported(
    scores: Sequence[float | None], reported: float, statistic: str, seed: int = 0
) -> dict[str, Any]:
    """Where a reported value (0-100 scale) falls in our runs (natural scale, x100 here)."""
    x = 100.0 * _finite(scores)
    if x.size == 0:
        return {"n": 0}
    out: dict[str, Any] = {
        "percentile": float(stats.percentileofscore(x, reported, kind="mean")),
        "p_single_run_below": {str(d): float(np.mean(x < reported - d)) for d in (1, 3)},
        "our_value": float(np.median(x) if statistic != "mean" else np.mean(x)),
    }
    if statistic in ("median", "mean"):
        ci = bootstrap_ci(x, statistic, seed=seed)
        out["ci95"] = list(ci) if ci else None
        out["inside_ci"] = bool(ci and ci[0] <= reported <= ci[1])
    else:  # a single run, a max or a server score has no CI of its own kind here
        out["ci95"], out["inside_ci"] = None, None
    out["gap"] = out["our_value"] - reported
    return out


def hyperparameter_importance(records: Sequence[dict[str, Any]], seed: int = 0) -> dict[str, float]:
    """fANOVA importance (Optuna's evaluator) of the hyperparameters that vary across runs.

    Built from the records on an in-memory study, so it works for any storage. Seeds are not
    parameters: their share of the variance is what is left unexplained.
    """
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    scored = [r for r in records if r.get("score") is not None and np.isfinite(r["score"])]
    keys = sorted({k for r in scored for k in r["hparams"]} | {"size"})
    values = {k: sorted({_param(r, k) for r in scored}, key=str) for k in keys}
    varying = [k for k in keys if len(values[k]) > 1]
    if not varying or len(scored) < 4 or np.ptp([r["score"] for r in scored]) == 0:
        return {}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for r in scored:
        study.add_trial(
            optuna.trial.create_trial(
                params={k: _param(r, k) for k in varying},
                distributions={k: CategoricalDistribution(values[k]) for k in varying},
                value=r["score"],
            )
        )
    try:
        importances = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed))
    except RuntimeError:  # fANOVA finds no variance its trees can split on
        return {}
    return {k: float(v) for k, v in importances.items()}


def _param(record: dict[str, Any], key: str) -> Any:
    return record["size"] if key == "size" else record["hparams"].get(key)
